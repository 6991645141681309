//! Borrowed allocation charge: ∫ max(0, allocated(t) − quota(t)) dt × borrowed rate, swept per quota pool.

use std::collections::{BTreeMap, HashMap};

use super::{
    Term,
    allocations::Gathered,
    arith::{clip, hours, lcm, money, qty},
    context::Ctx,
};
use crate::{confidence::Confidence, error::DomainError, fraction::Fraction, ids::TenantId, interval::Interval};

/// Sweeps each pool, adds the borrowed lines and returns the charged (reserved or held) GPU-ns per class.
pub(super) fn lines(
    ctx: &mut Ctx<'_>,
    period: Interval,
    gathered: &mut Gathered<'_>,
) -> Result<BTreeMap<String, Fraction>, DomainError> {
    let input = ctx.input;
    let policy = &input.policy;
    let pools = &gathered.pools;
    let usage = &mut gathered.usage;
    let mut charged_ns: BTreeMap<String, Fraction> = BTreeMap::new();
    for ((holder, class), segs) in pools {
        let quotas: Vec<(i128, i128, Fraction)> = input
            .quotas
            .iter()
            .filter(|q| q.holder == *holder && q.gpu_class == *class)
            .filter_map(|q| clip(q.valid_from, q.valid_to, &period).map(|(s, e)| (s, e, q.gpus.value())))
            .collect();
        // Amounts as integers in units of 1/scale GPU (scale: the lcm of the pool's denominators), so that the sweep
        // adds and multiplies integers; what it sums converts back to the same exact fractions.
        let scale =
            segs.iter().map(|s| s.fraction.denom()).chain(quotas.iter().map(|q| q.2.denom())).try_fold(1_i128, lcm)?;
        let units =
            |f: Fraction| f.numer().checked_mul(scale / f.denom()).ok_or_else(|| DomainError::overflow("sweep"));
        // events: (time, tenant index or quota, signed amount in units: an end subtracts)
        let mut tenants_in_pool: Vec<TenantId> = segs.iter().map(|s| s.tenant).collect();
        tenants_in_pool.sort();
        tenants_in_pool.dedup();
        let tix: HashMap<TenantId, usize> = tenants_in_pool.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let mut events: Vec<(i128, usize, i128)> = Vec::with_capacity(segs.len() * 2 + quotas.len() * 2);
        let quota_slot = usize::MAX;
        for s in segs {
            let (i, u) = (tix[&s.tenant], units(s.fraction)?);
            events.push((s.s, i, u));
            events.push((s.e, i, -u));
        }
        for (s, e, g) in &quotas {
            let u = units(*g)?;
            events.push((*s, quota_slot, u));
            events.push((*e, quota_slot, -u));
        }
        // All events at one instant are applied before the next step, so their order does not matter.
        events.sort_unstable_by_key(|e| e.0);
        let overflow = || DomainError::overflow("sweep");
        let mut alloc = vec![0_i128; tenants_in_pool.len()];
        let mut total = 0_i128;
        let mut quota = 0_i128;
        // One tenant: units × ns, exact. Several: whole GPU-nanoseconds (rounded per step, see below).
        let mut borrowed_acc = vec![0_i128; tenants_in_pool.len()];
        let mut k = 0;
        let mut prev_t: Option<i128> = None;
        while k < events.len() {
            let t = events[k].0;
            if let Some(pt) = prev_t
                && t > pt
            {
                let dt = t - pt;
                let excess = total - quota;
                if excess > 0 {
                    let excess_dt = excess.checked_mul(dt).ok_or_else(overflow)?;
                    if tenants_in_pool.len() == 1 {
                        borrowed_acc[0] = borrowed_acc[0].checked_add(excess_dt).ok_or_else(overflow)?;
                    } else {
                        // Each tenant borrows in proportion to what it holds at the moment, rounded to whole
                        // GPU-nanoseconds (half up): kept exact, the common denominator of the shares grows with every
                        // distinct pool total and overflows i128 within a month of a shared department quota.
                        // a/scale × (excess/scale × dt) / (total/scale) = a × excess × dt / (total × scale).
                        let den = total.checked_mul(scale).ok_or_else(overflow)?;
                        for (i, a) in alloc.iter().enumerate() {
                            if *a != 0 {
                                let num = a.checked_mul(excess_dt).ok_or_else(overflow)?;
                                let (q, r) = (num / den, num % den);
                                let part = if 2 * r >= den { q + 1 } else { q };
                                borrowed_acc[i] = borrowed_acc[i].checked_add(part).ok_or_else(overflow)?;
                            }
                        }
                    }
                }
            }
            while k < events.len() && events[k].0 == t {
                let (_, who, delta) = events[k];
                if who == quota_slot {
                    quota += delta;
                } else {
                    alloc[who] += delta;
                    total += delta;
                }
                k += 1;
            }
            prev_t = Some(t);
        }
        let borrowed: Vec<Fraction> = if tenants_in_pool.len() == 1 {
            vec![Fraction::new(borrowed_acc[0], scale)?]
        } else {
            borrowed_acc.iter().map(|b| Fraction::from_integer(*b)).collect::<Result<_, _>>()?
        };
        // Quota time with no allocation at all still counts as charged (reserved) capacity.
        let quota_total = quotas.iter().try_fold(Fraction::ZERO, |acc, (s, e, g)| {
            acc.checked_add(Fraction::from_integer(e - s)?.checked_mul(*g)?)
        })?;
        let borrowed_total = borrowed.iter().try_fold(Fraction::ZERO, |a, b| a.checked_add(*b))?;
        // ∫max(A, Q) = ∫Q + ∫max(0, A − Q): reserved or held, whichever is more.
        let c = charged_ns.entry((*class).to_string()).or_insert(Fraction::ZERO);
        *c = c.checked_add(quota_total.checked_add(borrowed_total)?)?;
        for (i, t) in tenants_in_pool.iter().enumerate() {
            if let Some(u) = usage.get_mut(&(*t, *class)) {
                u.borrowed_ns = u.borrowed_ns.checked_add(borrowed[i])?;
            }
        }
    }
    for ((tenant, class), u) in usage.iter() {
        if u.borrowed_ns.is_zero() {
            continue;
        }
        let Some(rates) = policy.rates(class) else { continue };
        let quantity = hours(u.borrowed_ns)?;
        let amount = money(quantity.checked_mul(rates.borrowed.value())?)?;
        let department = ctx.department_of(*tenant)?;
        let mut line = ctx.base_line(Term::Borrowed, Some(*tenant), department, class, class)?;
        line.quantity = qty(quantity)?;
        line.unit = "GPU-hour".into();
        line.rate = rates.borrowed;
        line.amount = amount;
        line.confidence = u.confidence.unwrap_or(Confidence::Exact);
        line.evidence = ctx.evidence(&format!("tenant={tenant}&gpu_class={class}"));
        line.explanation = format!(
            "{} {class} GPU-hours above quota (of {} allocated in {} allocations) × {} {} = {} {}{}",
            line.quantity.grouped(),
            qty(hours(u.allocated_ns)?)?.grouped(),
            u.count,
            rates.borrowed,
            policy.currency,
            amount.grouped(),
            policy.currency,
            share_note(&u.share_bases)
        );
        ctx.lines.push(line);
    }
    Ok(charged_ns)
}

/// Adds to `charged_ns` the quotas of holders with no allocation at all (no pool was swept for them): reserved
/// capacity too. Run once, after every part's pools were swept.
pub(super) fn reserved_unswept(
    quotas: &[super::QuotaRecord],
    period: Interval,
    swept: impl Fn(&super::QuotaHolder, &str) -> bool,
    charged_ns: &mut BTreeMap<String, Fraction>,
) -> Result<(), DomainError> {
    for q in quotas {
        if !swept(&q.holder, q.gpu_class.as_str())
            && let Some((s, e)) = clip(q.valid_from, q.valid_to, &period)
        {
            let c = charged_ns.entry(q.gpu_class.clone()).or_insert(Fraction::ZERO);
            *c = c.checked_add(Fraction::from_integer(e - s)?.checked_mul(q.gpus.value())?)?;
        }
    }
    Ok(())
}

/// `"; soft shares priced by the larger of the compute and memory shares"` when soft-shared allocations are in the
/// line, so a reader sees which share was charged without opening the evidence.
pub(super) fn share_note(bases: &std::collections::BTreeSet<crate::sharing::ShareBasis>) -> String {
    if bases.is_empty() {
        return String::new();
    }
    let said: Vec<&str> = bases.iter().map(|b| b.describe()).collect();
    format!("; soft shares priced by {}", said.join(" or "))
}
