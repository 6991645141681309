//! What-if comparisons of a month (issue 21): the ledger computed twice — as priced now and with one change in
//! place (a draft cost policy, an inventory entry not yet saved) — and the difference per department and tenant.
//!
//! Both sides come from the ledger's one computation (`gpuledger_core::ledger::compute`) over the same inputs the
//! ledger itself uses: an open month's inputs as the refresh worker reads them ([`crate::close::preview`]: facts,
//! approved credits, late-data corrections), a closed month's as its close froze them (the stored bundle), so the
//! `approved` side is the month's figures and only the change moves the `draft` side. Shared by the `policy` and
//! `tenancy` features; no handler lives here.

use std::collections::BTreeMap;

use gpuledger_api::policy::{DepartmentImpact, Impact, ImpactAmounts, TenantImpact};
use gpuledger_core::{
    Period,
    decimal::Decimal,
    ids::{DepartmentId, TenantId},
    ledger::{AMOUNT_SCALE, LedgerInput, LedgerLine, compute},
    policy::CostPolicy,
};

use crate::{db::OrgTx, error::AppError};

/// A month's inputs and lines as the ledger computes them now.
pub struct Month {
    /// The month is closed (its inputs are the ones its close froze).
    pub closed: bool,
    /// The inputs (the approved policy included).
    pub input: LedgerInput,
    /// The lines computed from them.
    pub lines: Vec<LedgerLine>,
}

/// The month as the ledger computes it: an open month as the refresh worker does ([`crate::close::preview`]), a
/// closed month from the inputs its close froze (its stored bundle), so `lines` are its closed lines.
pub async fn frozen_or_open(tx: &mut OrgTx, period: Period) -> Result<Month, AppError> {
    if crate::store::period_state(tx, period).await? == gpuledger_api::states::PeriodState::Closed
        && let Some(bundle) = crate::store::stored_bundle(tx, period).await?
    {
        let lines = compute(&bundle.inputs).map_err(AppError::computing)?.lines;
        return Ok(Month { closed: true, input: bundle.inputs, lines });
    }
    let preview = crate::close::preview(tx, period).await?;
    Ok(Month { closed: false, input: preview.input, lines: preview.ledger.lines })
}

/// The month from today's facts: an open month as [`frozen_or_open`] computes it, a closed month recomputed with
/// its own policy and no adjustments (as the late-data check does), so a change to the facts shows in both.
pub async fn from_facts(tx: &mut OrgTx, period: Period) -> Result<Month, AppError> {
    if crate::store::period_state(tx, period).await? == gpuledger_api::states::PeriodState::Closed {
        let policy = approved_policy(tx, period).await?;
        let input = crate::ledger::load_input(tx, period, policy).await?;
        let lines = compute(&input).map_err(AppError::computing)?.lines;
        return Ok(Month { closed: true, input, lines });
    }
    let preview = crate::close::preview(tx, period).await?;
    Ok(Month { closed: false, input: preview.input, lines: preview.ledger.lines })
}

/// The approved policy that prices `period`, or 409 when none does.
pub async fn approved_policy(tx: &mut OrgTx, period: Period) -> Result<CostPolicy, AppError> {
    crate::store::policy_for(tx, period).await?.ok_or_else(|| {
        AppError::Conflict(format!(
            "no approved cost policy covers {period}: approve one effective from {period} or earlier"
        ))
    })
}

/// The month's lines with `policy` in place of the approved one, every other input unchanged. When `policy`
/// prices energy and the month's inputs carry none (its approved policy does not), the month's telemetry is read
/// for it.
pub async fn with_policy(tx: &mut OrgTx, month: &Month, policy: CostPolicy) -> Result<Vec<LedgerLine>, AppError> {
    let mut input = month.input.clone();
    if policy.energy.is_some() && input.policy.energy.is_none() && input.energy.is_empty() {
        input.energy = crate::ledger::load_input(tx, input.period, policy.clone()).await?.energy;
    }
    input.policy = policy;
    Ok(compute(&input).map_err(AppError::computing)?.lines)
}

fn zero() -> Result<Decimal, AppError> {
    Ok(Decimal::from_scaled(0, AMOUNT_SCALE)?)
}

#[derive(Clone)]
struct Sides {
    approved: Decimal,
    draft: Decimal,
}

impl Sides {
    fn new() -> Result<Self, AppError> {
        Ok(Self { approved: zero()?, draft: zero()? })
    }

    fn add(&mut self, draft: bool, amount: &Decimal) -> Result<(), AppError> {
        let side = if draft { &mut self.draft } else { &mut self.approved };
        *side = side.checked_add(amount)?;
        Ok(())
    }

    fn amounts(&self) -> Result<(String, String, String), AppError> {
        let delta = self.draft.checked_sub(&self.approved)?;
        Ok((self.approved.to_string(), self.draft.to_string(), delta.to_string()))
    }
}

/// What the two sides of a comparison are.
pub struct Comparison<'a> {
    /// The month.
    pub period: Period,
    /// Closed month.
    pub closed: bool,
    /// Version priced on the draft side.
    pub version: i32,
    /// Approved version pricing the month.
    pub approved_version: i32,
    /// Currency.
    pub currency: &'a str,
    /// Lines as priced now.
    pub approved: &'a [LedgerLine],
    /// Lines with the change.
    pub draft: &'a [LedgerLine],
    /// The departments the caller may see (`None`: all).
    pub scope: Option<&'a [DepartmentId]>,
    /// The answer's note.
    pub note: String,
}

/// Sums both sides per department and tenant (only the departments in scope) and their differences, exactly.
pub fn compare(c: Comparison<'_>) -> Result<Impact, AppError> {
    let mut departments: BTreeMap<(String, DepartmentId), Sides> = BTreeMap::new();
    let mut tenants: BTreeMap<(String, String, TenantId), Sides> = BTreeMap::new();
    let mut total = Sides::new()?;
    for (draft, lines) in [(false, c.approved), (true, c.draft)] {
        for l in lines {
            if c.scope.is_some_and(|s| !s.contains(&l.department_id)) {
                continue;
            }
            let key = (l.department.clone(), l.department_id);
            match departments.get_mut(&key) {
                Some(d) => d.add(draft, &l.amount)?,
                None => {
                    let mut d = Sides::new()?;
                    d.add(draft, &l.amount)?;
                    departments.insert(key, d);
                }
            }
            if let Some(t) = l.tenant_id {
                let key = (l.department.clone(), l.tenant.clone(), t);
                match tenants.get_mut(&key) {
                    Some(s) => s.add(draft, &l.amount)?,
                    None => {
                        let mut s = Sides::new()?;
                        s.add(draft, &l.amount)?;
                        tenants.insert(key, s);
                    }
                }
            }
            total.add(draft, &l.amount)?;
        }
    }
    let departments = departments
        .into_iter()
        .map(|((department, id), s)| {
            let (approved, draft, delta) = s.amounts()?;
            Ok(DepartmentImpact { department, department_id: id.to_string(), approved, draft, delta })
        })
        .collect::<Result<Vec<_>, AppError>>()?;
    let tenants = tenants
        .into_iter()
        .map(|((department, tenant, id), s)| {
            let (approved, draft, delta) = s.amounts()?;
            Ok(TenantImpact { tenant, tenant_id: id.to_string(), department, approved, draft, delta })
        })
        .collect::<Result<Vec<_>, AppError>>()?;
    let (approved, draft, delta) = total.amounts()?;
    Ok(Impact {
        period: c.period.to_string(),
        version: c.version,
        approved_version: c.approved_version,
        closed: c.closed,
        currency: c.currency.to_string(),
        departments,
        tenants,
        total: ImpactAmounts { approved, draft, delta },
        note: c.note,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use gpuledger_core::{Confidence, ledger::Term};

    fn line(dept: DepartmentId, dname: &str, tenant: Option<(TenantId, &str)>, amount: &str) -> LedgerLine {
        LedgerLine {
            line_id: format!("2026-10/x/{amount}"),
            period: Period::parse("2026-10").unwrap(),
            department_id: dept,
            department: dname.into(),
            tenant_id: tenant.map(|t| t.0),
            tenant: tenant.map(|t| t.1.to_string()).unwrap_or_default(),
            term: Term::Guaranteed,
            gpu_class: String::new(),
            quantity: Decimal::parse("1").unwrap(),
            unit: "GPU-hour".into(),
            rate: Decimal::parse("1").unwrap(),
            amount: Decimal::parse(amount).unwrap(),
            currency: "USD".into(),
            confidence: Confidence::Exact,
            policy_version: 1,
            evidence: String::new(),
            corrects: None,
            explanation: String::new(),
        }
    }

    #[test]
    fn deltas_are_exact_and_add_up() {
        let (a, b) = (DepartmentId::from_uuid(uuid::Uuid::new_v4()), DepartmentId::from_uuid(uuid::Uuid::new_v4()));
        let t = TenantId::from_uuid(uuid::Uuid::new_v4());
        let approved =
            vec![line(a, "A", Some((t, "t1")), "10.10"), line(b, "B", None, "0.20"), line(a, "A", None, "-1.00")];
        let draft = vec![line(a, "A", Some((t, "t1")), "20.20"), line(b, "B", None, "0.10")];
        let base = || Comparison {
            period: Period::parse("2026-10").unwrap(),
            closed: true,
            version: 2,
            approved_version: 1,
            currency: "USD",
            approved: &approved,
            draft: &draft,
            scope: None,
            note: String::new(),
        };
        let i = compare(base()).unwrap();
        assert_eq!(
            (i.total.approved.as_str(), i.total.draft.as_str(), i.total.delta.as_str()),
            ("9.30", "20.30", "11.00")
        );
        let deltas: Vec<&str> = i.departments.iter().map(|d| d.delta.as_str()).collect();
        assert_eq!(deltas, ["11.10", "-0.10"]);
        assert_eq!(i.tenants.len(), 1);
        assert_eq!(i.tenants[0].delta, "10.10");
        // A caller limited to department B sees only it, and the total is its own.
        let scope = [b];
        let i = compare(Comparison { scope: Some(&scope), ..base() }).unwrap();
        assert_eq!(i.departments.len(), 1);
        assert!(i.tenants.is_empty());
        assert_eq!(i.total.delta, "-0.10");
    }
}
