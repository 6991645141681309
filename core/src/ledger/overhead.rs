//! Shared overhead: the platform pool (fixed costs, unattributed service work, unallocated capacity) distributed by
//! the policy's key.

use std::collections::BTreeMap;

use super::{
    ClassCapacity, TenantRef, Term,
    allocations::Gathered,
    arith::{distribute, hours, money, qty},
    context::Ctx,
};
use crate::{
    confidence::Confidence, decimal::Decimal, error::DomainError, fraction::Fraction, interval::Interval,
    policy::OverheadKey,
};

/// Adds the overhead lines.
pub(super) fn lines(
    ctx: &mut Ctx<'_>,
    period: Interval,
    gathered: &Gathered<'_>,
    charged_ns: &BTreeMap<String, Fraction>,
    service_remainders: &[(String, Decimal)],
    spread: &super::actual::Spread,
) -> Result<(), DomainError> {
    let input = ctx.input;
    let policy = &input.policy;
    let endpoint_ns = &gathered.endpoint_ns;
    let unattributed = &gathered.unattributed;
    let usage = &gathered.usage;
    let mut pool = Fraction::ZERO;
    let mut pool_text = Vec::new();
    for f in &policy.overhead.fixed {
        pool = pool.checked_add(f.amount.value())?;
        pool_text.push(format!("{} {}", f.name, f.amount.grouped()));
    }
    for (endpoint, amount) in service_remainders {
        pool = pool.checked_add(amount.value())?;
        pool_text.push(format!("unattributed work on {endpoint} {}", amount.grouped()));
    }
    for (what, amount) in &spread.pool {
        pool = pool.checked_add(amount.value())?;
        pool_text.push(format!("{what} {}", amount.grouped()));
    }
    if policy.overhead.unallocated_capacity {
        // One entry per class, in class order, whatever the order (or repetition) of the input's entries.
        let mut by_class: BTreeMap<&str, u32> = BTreeMap::new();
        for cap in &input.capacity {
            let n = by_class.entry(cap.gpu_class.as_str()).or_insert(0);
            *n = n.saturating_add(cap.gpus);
        }
        for cap in by_class.into_iter().map(|(c, gpus)| ClassCapacity { gpu_class: c.to_string(), gpus }) {
            let Some(rates) = policy.rates(&cap.gpu_class) else { continue };
            if spread.classes.contains(&cap.gpu_class) {
                continue; // its idle capacity is inside the bill already spread over the class's hours
            }
            let capacity_ns = Fraction::from_integer(period.duration_nanos())?.checked_mul_int(i128::from(cap.gpus))?;
            let endpoint_class_ns = endpoint_ns
                .values()
                .filter_map(|m| m.get(&cap.gpu_class))
                .try_fold(Fraction::ZERO, |a, v| a.checked_add(*v))?;
            let used = charged_ns
                .get(&cap.gpu_class)
                .copied()
                .unwrap_or(Fraction::ZERO)
                .checked_add(endpoint_class_ns)?
                .checked_add(unattributed.get(&cap.gpu_class).copied().unwrap_or(Fraction::ZERO))?;
            let idle = capacity_ns.sub_or_zero(used)?;
            if idle.is_zero() {
                continue;
            }
            let h = hours(idle)?;
            pool = pool.checked_add(h.checked_mul(rates.guaranteed.value())?)?;
            pool_text.push(format!("unallocated {} {} GPU-h × {}", qty(h)?.grouped(), cap.gpu_class, rates.guaranteed));
        }
    }
    if !pool.is_zero() && !input.tenants.is_empty() {
        let mut tenants: Vec<&TenantRef> = input.tenants.iter().collect();
        tenants.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        let (weights, key_text): (Vec<Fraction>, &str) = match &policy.overhead.key {
            OverheadKey::Equal => (vec![Fraction::ONE; tenants.len()], "equal shares"),
            OverheadKey::FixedShares { shares } => (
                tenants
                    .iter()
                    .map(|t| shares.iter().find(|s| s.tenant == t.id).map_or(Fraction::ZERO, |s| s.share.value()))
                    .collect(),
                "fixed shares",
            ),
            OverheadKey::AllocatedGpuHours => {
                let w: Vec<Fraction> = tenants
                    .iter()
                    .map(|t| {
                        usage
                            .iter()
                            .filter(|((tid, _), _)| *tid == t.id)
                            .try_fold(Fraction::ZERO, |a, (_, u)| a.checked_add(u.allocated_ns))
                    })
                    .collect::<Result<_, _>>()?;
                if w.iter().all(Fraction::is_zero) {
                    (vec![Fraction::ONE; tenants.len()], "equal shares (nobody allocated GPUs)")
                } else {
                    (w.into_iter().map(hours).collect::<Result<_, _>>()?, "allocated GPU-hours")
                }
            }
        };
        let amounts = distribute(pool, &weights)?;
        let total_w = weights.iter().try_fold(Fraction::ZERO, |a, w| a.checked_add(*w))?;
        let pool_amount = money(pool)?;
        for ((t, w), amount) in tenants.iter().zip(&weights).zip(amounts) {
            if w.is_zero() {
                continue;
            }
            let mut line = ctx.base_line(Term::Overhead, Some(t.id), t.department, "", "")?;
            let share = w.checked_div(total_w)?;
            line.quantity = qty(share)?;
            line.unit = "share".into();
            line.rate = pool_amount;
            line.amount = amount;
            line.confidence = Confidence::Modeled;
            line.evidence = format!("policy:v{}/overhead", policy.version);
            line.explanation = format!(
                "{}% of the shared overhead pool {} {} ({}) by {key_text} = {} {}",
                Decimal::round(share.checked_mul_int(100)?, 4)?,
                pool_amount.grouped(),
                policy.currency,
                pool_text.join(" + "),
                amount.grouped(),
                policy.currency
            );
            ctx.lines.push(line);
        }
    }
    Ok(())
}
