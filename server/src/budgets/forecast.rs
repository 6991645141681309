//! The month-end forecast.
//!
//! - **to date**: the month's ledger with every allocation and quota cut at now — what has been used so far.
//! - **run rate**: the month's ledger as the open month shows it — the allocations still open priced to the month's
//!   end (nothing new starts, nothing open stops early).
//! - **history**: where a department's last three closed months are regular (each within 10 % of their mean), the
//!   rest of the month is also expected at that pace: `to date + mean × share of the month left`. The forecast is
//!   the larger of the two (`run_rate+history`, confidence high); otherwise the run rate (`run_rate`, confidence
//!   medium, or low in the month's first quarter). Tenants are forecast by run rate.
//! - A month that is over (or closed) has `method: final` and its forecast is its figure: a closed month's as its
//!   close stored it (the read model's month tables), an open month that is over computed now.

use std::collections::HashMap;

use gpuledger_api::{
    foresight::{Forecast, ForecastRow, ForecastTotal},
    states::{ForecastConfidence as Level, ForecastMethod as Method},
};
use gpuledger_core::{Period, decimal::Decimal, fraction::Fraction, ledger::compute as compute_ledger};
use time::OffsetDateTime;
use uuid::Uuid;

use super::store::{self, LineSum};
use crate::{
    db::OrgTx,
    error::AppError,
    figures::{Key, Sums, cut_at, sums},
};

fn internal(e: impl std::fmt::Display) -> AppError {
    AppError::Internal(e.to_string())
}

/// The open month's stored snapshot, when the read model has one with its "to date": (as of, run rate, to date).
async fn stored(tx: &mut OrgTx, period: Period) -> Result<Option<(OffsetDateTime, Sums, Sums, Sums, Sums)>, AppError> {
    let Some((as_of, to_date)) = store::snapshot_to_date(tx, period.first_day()).await? else { return Ok(None) };
    let rows = store::line_sums(tx, period.first_day()).await?;
    let (mut rate_d, mut rate_t, mut so_far_d, mut so_far_t) = (Sums::new(), Sums::new(), Sums::new(), Sums::new());
    let amount = |v: &serde_json::Value| -> Result<Decimal, AppError> {
        v.as_str().map_or(Ok(Decimal::ZERO), |s| Decimal::parse(s).map_err(internal))
    };
    for LineSum { department_id: d, department: dname, tenant_id: t, tenant: tname, sum } in rows {
        let sum = Decimal::parse(&sum).map_err(internal)?;
        let dk = (d, dname.clone(), None);
        let e = rate_d.entry(dk.clone()).or_insert(Decimal::ZERO);
        *e = e.checked_add(&sum).map_err(internal)?;
        so_far_d.insert(dk, amount(&to_date["departments"][d.to_string()])?);
        if let Some(t) = t {
            let tk = (d, dname, Some((t, tname)));
            let e = rate_t.entry(tk.clone()).or_insert(Decimal::ZERO);
            *e = e.checked_add(&sum).map_err(internal)?;
            so_far_t.insert(tk, amount(&to_date["tenants"][t.to_string()])?);
        }
    }
    Ok(Some((as_of, rate_d, rate_t, so_far_d, so_far_t)))
}

/// A closed month's figures as stored by its close (`read_months` / `read_lines`): (currency, per department, per
/// tenant). `None` when the month is not closed or has no stored figures (closed before the read model and not
/// read since: the caller computes).
async fn closed(tx: &mut OrgTx, period: Period) -> Result<Option<(String, Sums, Sums)>, AppError> {
    let Some(currency) = store::closed_currency(tx, period.first_day()).await? else { return Ok(None) };
    let rows = store::line_sums(tx, period.first_day()).await?;
    let (mut departments, mut tenants) = (Sums::new(), Sums::new());
    for LineSum { department_id: d, department: dname, tenant_id: t, tenant: tname, sum } in rows {
        let sum = Decimal::parse(&sum).map_err(internal)?;
        let e = departments.entry((d, dname.clone(), None)).or_insert(Decimal::ZERO);
        *e = e.checked_add(&sum).map_err(internal)?;
        if let Some(t) = t {
            let e = tenants.entry((d, dname, Some((t, tname)))).or_insert(Decimal::ZERO);
            *e = e.checked_add(&sum).map_err(internal)?;
        }
    }
    Ok(Some((currency.unwrap_or_default(), departments, tenants)))
}

fn money(d: &Decimal) -> Result<String, AppError> {
    Ok(d.with_scale(2).or_else(|_| Decimal::round(d.value(), 2)).map_err(internal)?.to_string())
}

/// The forecast of `period` as of `now`, for the whole organization (callers cut it to their scope).
pub async fn compute(tx: &mut OrgTx, period: Period, now: OffsetDateTime) -> Result<Forecast, AppError> {
    let (start, end) = crate::ledger::bounds(tx, period).await?;
    if now < start {
        return Err(AppError::refused("period", format!("{period} has not started yet")));
    }
    let over = now >= end;
    // The open month: the read model's snapshot (the run rate is its figures; "to date" was computed with it), as
    // of its time; without one, both are computed now.
    let snapshot = if over { None } else { stored(tx, period).await? };
    // A closed month: its figures as the close stored them (the final figure is the closed ledger, not a new
    // computation over today's facts).
    let closed = if over { closed(tx, period).await? } else { None };
    let (now, currency, run_rate, to_date) = match (snapshot, closed) {
        (_, Some((currency, departments, tenants))) => {
            let s = (departments, tenants);
            (now, currency, s.clone(), s)
        }
        (Some((as_of, rate_d, rate_t, so_far_d, so_far_t)), None) => {
            let currency = store::figures_currency(tx, period.first_day()).await?;
            (as_of.max(start), currency.unwrap_or_default(), (rate_d, rate_t), (so_far_d, so_far_t))
        }
        (None, None) => {
            let preview = crate::close::preview(tx, period).await?;
            let currency = preview.input.policy.currency.clone();
            if over {
                let s = sums(&preview.ledger)?;
                (now, currency, s.clone(), s)
            } else {
                let whole = sums(&preview.ledger)?;
                let input = cut_at(preview.input, now);
                let so_far = tokio::task::spawn_blocking(move || compute_ledger(&input))
                    .await
                    .map_err(internal)?
                    .map_err(AppError::computing)?;
                (now, currency, whole, sums(&so_far)?)
            }
        }
    };
    let month_ns = (end - start).whole_nanoseconds();
    let elapsed = if over {
        Fraction::ONE
    } else {
        Fraction::new((now - start).whole_nanoseconds(), month_ns).map_err(internal)?
    };
    let left = Fraction::ONE.checked_sub(elapsed).map_err(internal)?;
    let history = history(tx, period).await?;
    let budgets = super::budgets(tx, period).await?;
    let budget_of = |department: Uuid, tenant: Option<Uuid>| -> Result<Option<Decimal>, AppError> {
        budgets
            .iter()
            .find(|b| match tenant {
                Some(t) => b.tenant_id.as_deref() == Some(&t.to_string()),
                None => b.tenant_id.is_none() && b.department_id.as_deref() == Some(&department.to_string()),
            })
            .map(|b| Decimal::parse(&b.amount).map_err(internal))
            .transpose()
    };

    let mut departments = Vec::new();
    // Departments with a budget and no charges yet are shown too (at zero).
    let mut keys: Vec<Key> = run_rate.0.keys().cloned().collect();
    for b in budgets.iter().filter(|b| b.tenant_id.is_none()) {
        if let Some(id) = b.department_id.as_deref().and_then(|d| d.parse::<Uuid>().ok())
            && !keys.iter().any(|k| k.0 == id)
        {
            keys.push((id, b.department.clone(), None));
        }
    }
    keys.sort_by(|a, b| a.1.cmp(&b.1));
    for key in keys {
        let so_far = to_date.0.get(&key).copied().unwrap_or(Decimal::ZERO);
        let rate = run_rate.0.get(&key).copied().unwrap_or(Decimal::ZERO).max(so_far);
        let (forecast, method, confidence, explanation) = if over {
            (so_far, Method::Final, Level::High, format!("{period} is over: its figure is final"))
        } else {
            let pace = history.get(&key.0).and_then(|h| regular(h));
            match pace {
                Some(mean) => {
                    let at_pace = Decimal::round(
                        so_far
                            .value()
                            .checked_add(mean.value().checked_mul(left).map_err(internal)?)
                            .map_err(internal)?,
                        2,
                    )
                    .map_err(internal)?;
                    (
                        rate.max(at_pace),
                        Method::RunRateHistory,
                        Level::High,
                        format!(
                            "to date {}; the allocations still open priced to the month's end give {}; the last three \
                             closed months were regular (mean {}), and at that pace the month ends at {}; the larger \
                             counts",
                            money(&so_far)?,
                            money(&rate)?,
                            money(&mean)?,
                            money(&at_pace)?
                        ),
                    )
                }
                None => (
                    rate,
                    Method::RunRate,
                    if elapsed < Fraction::new(1, 4).map_err(internal)? { Level::Low } else { Level::Medium },
                    format!(
                        "to date {}; the allocations still open priced to the month's end give {} (no regular history \
                         of three closed months to add new work by)",
                        money(&so_far)?,
                        money(&rate)?
                    ),
                ),
            }
        };
        let budget = budget_of(key.0, None)?;
        departments.push(ForecastRow {
            department_id: key.0.to_string(),
            department: key.1.clone(),
            tenant_id: None,
            tenant: None,
            to_date: money(&so_far)?,
            forecast: money(&forecast)?,
            budget: budget.as_ref().map(money).transpose()?,
            over_budget: budget.is_some_and(|b| forecast > b),
            method,
            confidence,
            explanation,
        });
    }
    let mut tenants = Vec::new();
    for (key, rate) in &run_rate.1 {
        let Some((tenant_id, tenant)) = &key.2 else { continue };
        let so_far = to_date.1.get(key).copied().unwrap_or(Decimal::ZERO);
        let forecast = (*rate).max(so_far);
        let budget = budget_of(key.0, Some(*tenant_id))?;
        tenants.push(ForecastRow {
            department_id: key.0.to_string(),
            department: key.1.clone(),
            tenant_id: Some(tenant_id.to_string()),
            tenant: Some(tenant.clone()),
            to_date: money(&so_far)?,
            forecast: money(&forecast)?,
            budget: budget.as_ref().map(money).transpose()?,
            over_budget: budget.is_some_and(|b| forecast > b),
            method: if over { Method::Final } else { Method::RunRate },
            confidence: if over { Level::High } else { Level::Medium },
            explanation: if over {
                format!("{period} is over: its figure is final")
            } else {
                format!(
                    "to date {}; the allocations still open priced to the month's end give {}",
                    money(&so_far)?,
                    money(rate)?
                )
            },
        });
    }
    tenants.sort_by(|a, b| (&a.department, &a.tenant).cmp(&(&b.department, &b.tenant)));
    let total = total(&departments)?;
    Ok(Forecast {
        period: period.to_string(),
        as_of: gpuledger_core::time_fmt::rfc3339(now.min(end)),
        currency,
        elapsed: Decimal::round(elapsed, 4).map_err(internal)?.to_string(),
        departments,
        tenants,
        total,
    })
}

/// Totals over department rows.
pub fn total(rows: &[ForecastRow]) -> Result<ForecastTotal, AppError> {
    let mut to_date = Decimal::ZERO;
    let mut forecast = Decimal::ZERO;
    let mut budget: Option<Decimal> = None;
    for r in rows {
        to_date = to_date.checked_add(&Decimal::parse(&r.to_date).map_err(internal)?).map_err(internal)?;
        forecast = forecast.checked_add(&Decimal::parse(&r.forecast).map_err(internal)?).map_err(internal)?;
        if let Some(b) = &r.budget {
            let b = Decimal::parse(b).map_err(internal)?;
            budget = Some(budget.unwrap_or(Decimal::ZERO).checked_add(&b).map_err(internal)?);
        }
    }
    Ok(ForecastTotal {
        to_date: money(&to_date)?,
        forecast: money(&forecast)?,
        budget: budget.as_ref().map(money).transpose()?,
    })
}

/// Each department's totals of the three closed months before `period` (from the stored month figures).
async fn history(tx: &mut OrgTx, period: Period) -> Result<HashMap<Uuid, Vec<Decimal>>, AppError> {
    let from = period.add_months(-3).map_err(internal)?;
    let rows = store::closed_department_totals(tx, from.first_day(), period.first_day()).await?;
    let mut out: HashMap<Uuid, Vec<Decimal>> = HashMap::new();
    for (department, total) in rows {
        out.entry(department).or_default().push(Decimal::parse(&total).map_err(internal)?);
    }
    Ok(out)
}

/// The mean of three monthly totals when each lies within 10 % of it (a regular pattern), else `None`.
fn regular(months: &[Decimal]) -> Option<Decimal> {
    if months.len() != 3 {
        return None;
    }
    let sum = months.iter().try_fold(Fraction::ZERO, |acc, m| acc.checked_add(m.value()).ok())?;
    let mean = sum.checked_div(Fraction::from_integer(3).ok()?).ok()?;
    if mean <= Fraction::ZERO {
        return None;
    }
    let tolerance = mean.checked_mul(Fraction::new(1, 10).ok()?).ok()?;
    // Fractions here are non-negative (monthly totals): the distance is the larger minus the smaller.
    let within = months.iter().all(|m| {
        let v = m.value();
        let diff = if v >= mean { v.checked_sub(mean) } else { mean.checked_sub(v) };
        diff.is_ok_and(|d| d <= tolerance)
    });
    within.then(|| Decimal::round(mean, 2).ok()).flatten()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::parse(s).unwrap()
    }

    #[test]
    fn a_regular_history_has_a_mean_and_an_irregular_one_none() {
        assert_eq!(regular(&[d("100"), d("105"), d("95")]), Some(d("100")));
        assert_eq!(regular(&[d("100.01"), d("100"), d("100")]), Some(d("100.00")), "rounded to cents");
        assert_eq!(regular(&[d("100"), d("130"), d("95")]), None, "130 is 18 % above the mean");
        assert_eq!(regular(&[d("100"), d("100")]), None, "three months are needed");
        assert_eq!(regular(&[d("0"), d("0"), d("0")]), None, "nothing to extrapolate");
    }

    #[test]
    fn totals_add_departments_and_their_budgets() {
        let row = |to: &str, f: &str, b: Option<&str>| ForecastRow {
            department_id: Uuid::nil().to_string(),
            department: "d".into(),
            tenant_id: None,
            tenant: None,
            to_date: to.into(),
            forecast: f.into(),
            budget: b.map(Into::into),
            over_budget: false,
            method: gpuledger_api::states::ForecastMethod::RunRate,
            confidence: gpuledger_api::states::ForecastConfidence::Medium,
            explanation: String::new(),
        };
        let t = total(&[row("1.10", "2.20", Some("5.00")), row("0.05", "3.00", None)]).unwrap();
        assert_eq!((t.to_date.as_str(), t.forecast.as_str(), t.budget.as_deref()), ("1.15", "5.20", Some("5.00")));
        assert_eq!(total(&[row("1", "1", None)]).unwrap().budget, None);
    }
}
