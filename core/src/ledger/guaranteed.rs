//! Guaranteed capacity charge: committed quota × hours × guaranteed rate, used or not (one line per quota record).

use std::collections::BTreeMap;

use super::{
    QuotaHolder, Term,
    arith::{clip, hours, money, qty},
    context::Ctx,
};
use crate::{error::DomainError, fraction::Fraction, interval::Interval};

/// Adds one guaranteed line per quota record that overlaps the period.
pub(super) fn lines(ctx: &mut Ctx<'_>, period: Interval) -> Result<(), DomainError> {
    let input = ctx.input;
    let policy = &input.policy;
    let mut quota_ns: BTreeMap<String, Fraction> = BTreeMap::new(); // per class; nothing reads it any more, but its checked sum still rejects an overflowing quota total
    for (i, q) in input.quotas.iter().enumerate() {
        let rates = policy.rates(&q.gpu_class).ok_or_else(|| {
            DomainError::invalid_at(
                "policy.classes",
                format!("no rate for GPU class {} (quota {} needs one)", q.gpu_class, q.id),
            )
        })?;
        if q.gpus.is_negative() {
            return Err(DomainError::invalid_at(format!("quotas[{i}].gpus"), "is negative"));
        }
        let Some((s, e)) = clip(q.valid_from, q.valid_to, &period) else { continue };
        let ns = Fraction::from_integer(e - s)?;
        let gpu_ns = ns.checked_mul(q.gpus.value())?;
        let entry = quota_ns.entry(q.gpu_class.clone()).or_insert(Fraction::ZERO);
        *entry = entry.checked_add(gpu_ns)?;
        let (tenant, department) = match q.holder {
            QuotaHolder::Tenant(t) => (Some(t), ctx.department_of(t)?),
            QuotaHolder::Department(d) => (None, d),
        };
        let h = hours(ns)?;
        let quantity = hours(gpu_ns)?;
        let amount = money(quantity.checked_mul(rates.guaranteed.value())?)?;
        let mut line =
            ctx.base_line(Term::Guaranteed, tenant, department, &q.gpu_class, &format!("{}/{}", q.gpu_class, q.id))?;
        line.quantity = qty(quantity)?;
        line.unit = "GPU-hour".into();
        line.rate = rates.guaranteed;
        line.amount = amount;
        line.evidence = format!("quota:{}", q.id);
        line.explanation = format!(
            "{} {} guaranteed × {} h × {} {} = {} {}",
            q.gpus.normalized().grouped(),
            q.gpu_class,
            qty(h)?.grouped().trim_end_matches('0').trim_end_matches('.'),
            rates.guaranteed,
            policy.currency,
            amount.grouped(),
            policy.currency
        );
        ctx.lines.push(line);
    }
    Ok(())
}
