//! Borrowed allocation charge: ∫ max(0, allocated(t) − quota(t)) dt × borrowed rate, swept per quota pool.
//!
//! Two sweeps give the same sums: [`sweep_pool`] over a pool's segments all at once (`compute`), and [`PoolSweep`],
//! fed the segments in start order a part at a time, holding only the allocations still running (a month of a
//! large fleet read in parts: its memory is the pool's concurrency, not its month). A test checks them equal.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, HashMap},
};

use super::{
    LedgerInput, QuotaHolder, Term,
    allocations::{Seg, Usage},
    arith::{clip, hours, lcm, money, qty},
    context::Ctx,
};
use crate::{confidence::Confidence, error::DomainError, fraction::Fraction, ids::TenantId, interval::Interval};

/// A pool's quotas clipped to the period: (start ns, end ns, GPUs).
pub(super) type PoolQuotas = Vec<(i128, i128, Fraction)>;

/// What a pool's sweep gives: the GPU-ns each tenant borrowed, and the pool's charged (reserved or held) GPU-ns.
pub(super) type Swept = (Vec<(TenantId, Fraction)>, Fraction);

/// The quotas of pool (`holder`, `class`), clipped to `period`.
pub(super) fn pool_quotas(input: &LedgerInput, period: Interval, holder: QuotaHolder, class: &str) -> PoolQuotas {
    input
        .quotas
        .iter()
        .filter(|q| q.holder == holder && q.gpu_class == class)
        .filter_map(|q| clip(q.valid_from, q.valid_to, &period).map(|(s, e)| (s, e, q.gpus.value())))
        .collect()
}

fn overflow() -> DomainError {
    DomainError::overflow("sweep")
}

/// Half up, as whole GPU-nanoseconds: a/scale × (excess/scale × dt) / (total/scale) = a × excess × dt / (total ×
/// scale) — a ratio that does not depend on the scale the amounts are counted in.
fn share_of_step(a: i128, excess_dt: i128, total: i128, scale: i128) -> Option<i128> {
    let den = total.checked_mul(scale)?;
    let num = a.checked_mul(excess_dt)?;
    let (q, r) = (num / den, num % den);
    Some(if 2 * r >= den { q + 1 } else { q })
}

/// ∫Q + ∫max(0, A − Q): reserved or held, whichever is more.
fn charged(quotas: &PoolQuotas, borrowed: &[(TenantId, Fraction)]) -> Result<Fraction, DomainError> {
    // Quota time with no allocation at all still counts as charged (reserved) capacity.
    let quota_total = quotas
        .iter()
        .try_fold(Fraction::ZERO, |acc, (s, e, g)| acc.checked_add(Fraction::from_integer(e - s)?.checked_mul(*g)?))?;
    let borrowed_total = borrowed.iter().try_fold(Fraction::ZERO, |a, (_, b)| a.checked_add(*b))?;
    quota_total.checked_add(borrowed_total)
}

/// Sweeps one pool's segments at once.
pub(super) fn sweep_pool(segs: &[Seg], quotas: &PoolQuotas) -> Result<Swept, DomainError> {
    // Amounts as integers in units of 1/scale GPU (scale: the lcm of the pool's denominators), so that the sweep
    // adds and multiplies integers; what it sums converts back to the same exact fractions.
    let scale =
        segs.iter().map(|s| s.fraction.denom()).chain(quotas.iter().map(|q| q.2.denom())).try_fold(1_i128, lcm)?;
    let units = |f: Fraction| f.numer().checked_mul(scale / f.denom()).ok_or_else(overflow);
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
    for (s, e, g) in quotas {
        let u = units(*g)?;
        events.push((*s, quota_slot, u));
        events.push((*e, quota_slot, -u));
    }
    // All events at one instant are applied before the next step, so their order does not matter.
    events.sort_unstable_by_key(|e| e.0);
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
                    for (i, a) in alloc.iter().enumerate() {
                        if *a != 0 {
                            let part = share_of_step(*a, excess_dt, total, scale).ok_or_else(overflow)?;
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
    let borrowed: Vec<(TenantId, Fraction)> = if tenants_in_pool.len() == 1 {
        vec![(tenants_in_pool[0], Fraction::new(borrowed_acc[0], scale)?)]
    } else {
        tenants_in_pool
            .iter()
            .zip(&borrowed_acc)
            .map(|(t, b)| Ok((*t, Fraction::from_integer(*b)?)))
            .collect::<Result<_, DomainError>>()?
    };
    let charged = charged(quotas, &borrowed)?;
    Ok((borrowed, charged))
}

/// A quota pool swept as its segments arrive, in start order: the events still to come (the running allocations'
/// ends, the quotas') wait in a heap; everything before the newest start is summed. The same arithmetic as
/// [`sweep_pool`]: amounts in units of the lcm of the denominators met so far (rescaled when a new one comes — the
/// per-step shares are ratios that do not depend on it), and both sums kept — exact (one tenant) and rounded per
/// step (several) — since which one applies is known only at the end.
pub(super) struct PoolSweep {
    quotas: PoolQuotas,
    scale: i128,
    tenants: Vec<TenantId>,
    tix: HashMap<TenantId, usize>,
    alloc: Vec<i128>,
    total: i128,
    quota: i128,
    /// Units × ns above quota: the borrowed time of a pool of one tenant; `None` once it overflowed.
    exact: Option<i128>,
    /// Whole GPU-ns per tenant, rounded per step; `None` once it overflowed (an error only if it is needed).
    rounded: Option<Vec<i128>>,
    prev_t: Option<i128>,
    /// (time, tenant index or `usize::MAX` for the quota, signed units).
    pending: BinaryHeap<Reverse<(i128, usize, i128)>>,
    last_start: Option<i128>,
}

const QUOTA: usize = usize::MAX;

impl PoolSweep {
    /// A pool with its quotas (clipped to the period).
    pub(super) fn new(quotas: PoolQuotas) -> Result<Self, DomainError> {
        let scale = quotas.iter().map(|q| q.2.denom()).try_fold(1_i128, lcm)?;
        let mut pending = BinaryHeap::with_capacity(quotas.len() * 2);
        for (s, e, g) in &quotas {
            let u = g.numer().checked_mul(scale / g.denom()).ok_or_else(overflow)?;
            pending.push(Reverse((*s, QUOTA, u)));
            pending.push(Reverse((*e, QUOTA, -u)));
        }
        Ok(Self {
            quotas,
            scale,
            tenants: Vec::new(),
            tix: HashMap::new(),
            alloc: Vec::new(),
            total: 0,
            quota: 0,
            exact: Some(0),
            rounded: Some(Vec::new()),
            prev_t: None,
            pending,
            last_start: None,
        })
    }

    fn rescale(&mut self, denom: i128) -> Result<(), DomainError> {
        let scale = lcm(self.scale, denom)?;
        if scale == self.scale {
            return Ok(());
        }
        let f = scale / self.scale;
        let times = |v: i128| v.checked_mul(f).ok_or_else(overflow);
        for a in &mut self.alloc {
            *a = times(*a)?;
        }
        self.total = times(self.total)?;
        self.quota = times(self.quota)?;
        self.exact = self.exact.and_then(|e| e.checked_mul(f));
        let pending = std::mem::take(&mut self.pending).into_vec();
        self.pending = pending
            .into_iter()
            .map(|Reverse((t, who, u))| Ok(Reverse((t, who, times(u)?))))
            .collect::<Result<_, DomainError>>()?;
        self.scale = scale;
        Ok(())
    }

    /// The step from the last instant to `t`, with the amounts held since.
    fn step_to(&mut self, t: i128) -> Result<(), DomainError> {
        if let Some(pt) = self.prev_t
            && t > pt
        {
            let excess = self.total - self.quota;
            if excess > 0 {
                let excess_dt = excess.checked_mul(t - pt).ok_or_else(overflow)?;
                self.exact = self.exact.and_then(|e| e.checked_add(excess_dt));
                if let Some(rounded) = &mut self.rounded {
                    let mut ok = true;
                    for (i, a) in self.alloc.iter().enumerate() {
                        if *a != 0 {
                            match share_of_step(*a, excess_dt, self.total, self.scale)
                                .and_then(|part| rounded[i].checked_add(part))
                            {
                                Some(v) => rounded[i] = v,
                                None => ok = false,
                            }
                        }
                    }
                    if !ok {
                        self.rounded = None;
                    }
                }
            }
        }
        self.prev_t = Some(self.prev_t.map_or(t, |pt| pt.max(t)));
        Ok(())
    }

    fn apply(&mut self, who: usize, delta: i128) {
        if who == QUOTA {
            self.quota += delta;
        } else {
            self.alloc[who] += delta;
            self.total += delta;
        }
    }

    /// Applies every waiting event before `limit` (all of them with `None`), an instant at a time.
    fn flush(&mut self, limit: Option<i128>) -> Result<(), DomainError> {
        while let Some(&Reverse((t, _, _))) = self.pending.peek() {
            if limit.is_some_and(|l| t >= l) {
                break;
            }
            self.step_to(t)?;
            while let Some(&Reverse((u, who, delta))) = self.pending.peek() {
                if u != t {
                    break;
                }
                self.pending.pop();
                self.apply(who, delta);
            }
        }
        Ok(())
    }

    /// Adds a segment; segments come in start order (an earlier start than the last is refused).
    pub(super) fn push(&mut self, seg: &Seg) -> Result<(), DomainError> {
        if self.last_start.is_some_and(|l| seg.s < l) {
            return Err(DomainError::invalid_at(
                "allocations",
                "a quota pool's allocations must come in start order across parts (one started before the last)",
            ));
        }
        self.last_start = Some(seg.s);
        self.rescale(seg.fraction.denom())?;
        self.flush(Some(seg.s))?;
        self.step_to(seg.s)?;
        let i = match self.tix.get(&seg.tenant) {
            Some(i) => *i,
            None => {
                self.tenants.push(seg.tenant);
                self.alloc.push(0);
                if let Some(r) = &mut self.rounded {
                    r.push(0);
                }
                self.tix.insert(seg.tenant, self.tenants.len() - 1);
                self.tenants.len() - 1
            }
        };
        let u = seg.fraction.numer().checked_mul(self.scale / seg.fraction.denom()).ok_or_else(overflow)?;
        self.apply(i, u);
        self.pending.push(Reverse((seg.e, i, -u)));
        Ok(())
    }

    /// The pool's sums once every segment was pushed.
    pub(super) fn finish(mut self) -> Result<Swept, DomainError> {
        self.flush(None)?;
        let borrowed: Vec<(TenantId, Fraction)> = if self.tenants.len() == 1 {
            vec![(self.tenants[0], Fraction::new(self.exact.ok_or_else(overflow)?, self.scale)?)]
        } else {
            let rounded = self.rounded.as_ref().ok_or_else(overflow)?;
            let mut b: Vec<(TenantId, Fraction)> = self
                .tenants
                .iter()
                .zip(rounded)
                .map(|(t, r)| Ok((*t, Fraction::from_integer(*r)?)))
                .collect::<Result<_, DomainError>>()?;
            b.sort_by_key(|(t, _)| *t);
            b
        };
        let charged = charged(&self.quotas, &borrowed)?;
        Ok((borrowed, charged))
    }
}

/// Adds each pool's sums: the borrowed GPU-ns to its tenants' usage, the charged GPU-ns to its class.
pub(super) fn add_swept(
    class: &str,
    swept: Swept,
    usage: &mut BTreeMap<(TenantId, String), Usage>,
    charged_ns: &mut BTreeMap<String, Fraction>,
) -> Result<(), DomainError> {
    let (borrowed, charged) = swept;
    let c = charged_ns.entry(class.to_string()).or_insert(Fraction::ZERO);
    *c = c.checked_add(charged)?;
    for (t, b) in borrowed {
        if let Some(u) = usage.get_mut(&(t, class.to_string())) {
            u.borrowed_ns = u.borrowed_ns.checked_add(b)?;
        }
    }
    Ok(())
}

/// The borrowed lines, from each (tenant, class)'s usage.
pub(super) fn lines(ctx: &mut Ctx<'_>, usage: &BTreeMap<(TenantId, String), Usage>) -> Result<(), DomainError> {
    let policy = &ctx.input.policy;
    for ((tenant, class), u) in usage {
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
    Ok(())
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
