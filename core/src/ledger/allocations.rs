//! Allocations clipped to the period and sorted out: shared-endpoint capacity aside, unattributed hours noted, the
//! rest grouped into quota pools with per (tenant, class) usage: what the borrowed, energy, service and overhead
//! terms read.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{LedgerNotes, QuotaHolder, arith::clip, context::Ctx};
use crate::{
    confidence::Confidence,
    error::DomainError,
    fraction::Fraction,
    ids::{DepartmentId, TenantId},
    interval::Interval,
};

/// One allocation's clipped segment in a pool.
pub(super) struct Seg {
    pub(super) tenant: TenantId,
    pub(super) fraction: Fraction,
    pub(super) s: i128,
    pub(super) e: i128,
}

/// Per (tenant, class) sums gathered while sweeping.
#[derive(Default, Clone)]
pub(super) struct Usage {
    pub(super) allocated_ns: Fraction,
    pub(super) borrowed_ns: Fraction,
    pub(super) confidence: Option<Confidence>,
    pub(super) count: usize,
    /// Share bases of the soft-shared allocations among them (named in the line's explanation).
    pub(super) share_bases: BTreeSet<crate::sharing::ShareBasis>,
}

/// What the allocation pass gathered.
pub(super) struct Gathered<'a> {
    /// Segments per quota pool (holder, class).
    pub(super) pools: BTreeMap<(QuotaHolder, &'a str), Vec<Seg>>,
    /// Endpoint → class → GPU-ns of priced shared endpoints.
    pub(super) endpoint_ns: BTreeMap<String, BTreeMap<String, Fraction>>,
    /// Weakest confidence of each endpoint's allocations.
    pub(super) endpoint_conf: BTreeMap<String, Confidence>,
    /// GPU-ns per class held where no tenant owned the namespace.
    pub(super) unattributed: BTreeMap<String, Fraction>,
    /// (tenant, class) of each usage slot, in slot order.
    pub(super) slot_keys: Vec<(TenantId, &'a str)>,
    /// Usage per (tenant, class).
    pub(super) usage: BTreeMap<(TenantId, &'a str), Usage>,
    /// Allocation index → per-device fraction, usage slot.
    pub(super) energy_share: Vec<(usize, Fraction, usize)>,
}

/// Clips, routes and pools the period's allocations; counts open and unpriced ones in `notes`.
pub(super) fn gather<'a>(
    ctx: &Ctx<'a>,
    period: Interval,
    priced_endpoints: &BTreeSet<&str>,
    notes: &mut LedgerNotes,
) -> Result<Gathered<'a>, DomainError> {
    let input = ctx.input;
    let policy = &input.policy;
    let mut pool_of: BTreeMap<(QuotaHolder, &str), usize> = BTreeMap::new();
    let mut pool_segs: Vec<((QuotaHolder, &str), Vec<Seg>)> = Vec::new();
    let mut endpoint_ns: BTreeMap<String, BTreeMap<String, Fraction>> = BTreeMap::new(); // endpoint → class → GPU-ns
    let mut endpoint_conf: BTreeMap<String, Confidence> = BTreeMap::new();
    let mut unattributed: BTreeMap<String, Fraction> = BTreeMap::new();
    let has_tenant_quota: BTreeSet<(TenantId, &str)> = input
        .quotas
        .iter()
        .filter_map(|q| match q.holder {
            QuotaHolder::Tenant(t) => Some((t, q.gpu_class.as_str())),
            QuotaHolder::Department(_) => None,
        })
        .collect();
    let has_dept_quota: BTreeSet<(DepartmentId, &str)> = input
        .quotas
        .iter()
        .filter_map(|q| match q.holder {
            QuotaHolder::Department(d) => Some((d, q.gpu_class.as_str())),
            QuotaHolder::Tenant(_) => None,
        })
        .collect();
    let mut slot_of: HashMap<(TenantId, &str), usize> = HashMap::new();
    let mut usage_slots: Vec<((TenantId, &str), usize, Usage)> = Vec::new();
    let mut energy_share: Vec<(usize, Fraction, usize)> = Vec::new(); // allocation → per-device fraction, slot
    for (idx, a) in ctx.allocations.iter().enumerate() {
        if a.fraction.numer() <= 0 {
            return Err(DomainError::invalid_at(format!("allocations[{idx}].fraction"), "must be positive"));
        }
        let Some((s, e)) = clip(a.start, a.end, &period) else { continue };
        if a.end.is_none_or(|end| end > period.end()) {
            notes.open_allocations += 1;
        }
        let Some(class) = &a.gpu_class else {
            notes.unpriced_allocations += 1;
            continue;
        };
        let gpu_ns = Fraction::new(
            (e - s).checked_mul(a.fraction.numer()).ok_or_else(|| DomainError::overflow("allocation"))?,
            a.fraction.denom(),
        )?;
        if let Some(ep) = a.endpoint.as_deref().filter(|ep| priced_endpoints.contains(ep)) {
            let per_class = endpoint_ns.entry(ep.to_string()).or_default();
            let v = per_class.entry(class.clone()).or_insert(Fraction::ZERO);
            *v = v.checked_add(gpu_ns)?;
            let c = endpoint_conf.entry(ep.to_string()).or_insert(Confidence::Exact);
            *c = c.combine(a.confidence);
            continue;
        }
        let Some(tenant) = a.tenant else {
            let v = unattributed.entry(class.clone()).or_insert(Fraction::ZERO);
            *v = v.checked_add(gpu_ns)?;
            continue;
        };
        // The pool and the usage of a (tenant, class) are resolved on its first allocation.
        let slot = match slot_of.get(&(tenant, class.as_str())) {
            Some(slot) => *slot,
            None => {
                let department = ctx.department_of(tenant)?;
                if policy.rates(class).is_none() {
                    return Err(DomainError::invalid_at(
                        "policy.classes",
                        format!("no rate for GPU class {class} (allocation {} needs one)", a.id),
                    ));
                }
                let holder = if has_tenant_quota.contains(&(tenant, class.as_str())) {
                    QuotaHolder::Tenant(tenant)
                } else if has_dept_quota.contains(&(department, class.as_str())) {
                    QuotaHolder::Department(department)
                } else {
                    QuotaHolder::Tenant(tenant)
                };
                let pool = *pool_of.entry((holder, class.as_str())).or_insert_with(|| {
                    pool_segs.push(((holder, class.as_str()), Vec::new()));
                    pool_segs.len() - 1
                });
                usage_slots.push(((tenant, class.as_str()), pool, Usage::default()));
                slot_of.insert((tenant, class.as_str()), usage_slots.len() - 1);
                usage_slots.len() - 1
            }
        };
        let (_, pool, u) = &mut usage_slots[slot];
        pool_segs[*pool].1.push(Seg { tenant, fraction: a.fraction, s, e });
        u.allocated_ns = u.allocated_ns.checked_add(gpu_ns)?;
        u.confidence = Some(u.confidence.map_or(a.confidence, |c| c.combine(a.confidence)));
        u.count += 1;
        if let Some(basis) = a.share_basis {
            u.share_bases.insert(basis);
        }
        if !a.devices.is_empty() {
            let per_device = a.fraction.denom().checked_mul(a.devices.len() as i128);
            energy_share.push((
                idx,
                Fraction::new(a.fraction.numer(), per_device.ok_or_else(|| DomainError::overflow("allocation"))?)?,
                slot,
            ));
        }
    }
    let pools: BTreeMap<(QuotaHolder, &str), Vec<Seg>> = pool_segs.into_iter().collect();
    let slot_keys: Vec<(TenantId, &str)> = usage_slots.iter().map(|(key, _, _)| *key).collect();
    let usage: BTreeMap<(TenantId, &str), Usage> = usage_slots.into_iter().map(|(k, _, u)| (k, u)).collect();
    Ok(Gathered { pools, endpoint_ns, endpoint_conf, unattributed, slot_keys, usage, energy_share })
}
