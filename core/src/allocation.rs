//! Allocation math: GPU-equivalent time per tenant, guaranteed vs. borrowed capacity, and
//! overcommit detection.
//!
//! `allocated GPU-equivalent time = ∫ capacity_fraction(t) dt` (DESIGN.md, "Allocation").
//! Everything is exact ([`Fraction`] of GPU-nanoseconds); nothing is capped or dropped:
//! time without an owner is reported as [`Attribution::Unattributed`] and allocations that
//! cannot be checked are listed.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::confidence::Confidence;
use crate::error::DomainError;
use crate::fraction::{Fraction, Quantity};
use crate::ids::{ClusterId, GpuClass, GpuUuid, NamespaceUid, PodUid, TenantId, VmUid};
use crate::interval::{Interval, Validity};
use crate::sharing::SharingMode;

/// One allocation fact: who held what capacity, on which device, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The event/interval ID, for tracing a number back to its evidence.
    pub id: String,
    /// The cluster the capacity belongs to.
    pub cluster: ClusterId,
    /// The namespace that held it (its owner at each instant is the charged tenant).
    pub namespace: NamespaceUid,
    /// The pod, for container workloads.
    pub pod: Option<PodUid>,
    /// The VM, for vGPU and passthrough.
    pub vm: Option<VmUid>,
    /// The physical GPU, when known (required for overcommit checks).
    pub gpu: Option<GpuUuid>,
    /// The pricing class of the GPU.
    pub gpu_class: GpuClass,
    /// How the GPU was shared.
    pub mode: SharingMode,
    /// Fraction of one GPU held (may exceed 1 for a multi-GPU allocation without a UUID).
    pub fraction: Fraction,
    /// When it was held.
    pub interval: Interval,
    /// Whether the end had to be inferred rather than read from the control plane.
    pub end_estimated: bool,
    /// Confidence as recorded; see [`Allocation::effective_confidence`].
    pub confidence: Confidence,
}

impl Allocation {
    /// Confidence implied by the facts: the mode's base confidence, weakened to
    /// `Estimated` when the end was inferred.
    pub fn derived_confidence(mode: &SharingMode, end_estimated: bool) -> Confidence {
        let end = if end_estimated { Confidence::Estimated } else { Confidence::Exact };
        mode.base_confidence().combine(end)
    }

    /// The recorded confidence, never stronger than the facts allow (so a mislabelled
    /// record cannot overstate certainty).
    pub fn effective_confidence(&self) -> Confidence {
        self.confidence.combine(Self::derived_confidence(&self.mode, self.end_estimated))
    }

    /// GPU-equivalent time of the whole interval: `fraction × duration`.
    pub fn gpu_time(&self) -> Result<Quantity, DomainError> {
        Quantity::held(self.fraction, self.interval.duration_nanos())
    }
}

/// A namespace → tenant mapping with its validity. Changing owner closes the old mapping and
/// opens a new one; mappings are never overwritten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    /// The namespace.
    pub namespace: NamespaceUid,
    /// Its owner during `valid`.
    pub tenant: TenantId,
    /// When the mapping holds.
    pub valid: Validity,
}

/// Who a piece of GPU time is attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Attribution {
    /// The tenant owning the namespace at the time.
    Tenant {
        /// The tenant.
        tenant: TenantId,
    },
    /// No ownership mapping covered the time: reported so it can be fixed, not dropped.
    Unattributed,
}

/// GPU-equivalent time of one (attribution, GPU class) group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUsage {
    /// Tenant or unattributed.
    pub attribution: Attribution,
    /// The GPU pricing class.
    pub gpu_class: GpuClass,
    /// Exact sum of `fraction × duration` of the group's pieces.
    pub gpu_time: Quantity,
    /// Weakest effective confidence of the group's pieces.
    pub confidence: Confidence,
    /// IDs of the allocations that contributed, sorted and de-duplicated.
    pub allocation_ids: Vec<String>,
}

impl TenantUsage {
    /// The group's GPU-hours, exactly.
    pub fn gpu_hours(&self) -> Result<Fraction, DomainError> {
        self.gpu_time.gpu_hours()
    }
}

/// Ownership mappings per namespace, sorted by start; rejects overlaps, because two owners
/// at once would charge the same time twice.
fn index_ownerships(ownerships: &[Ownership]) -> Result<BTreeMap<NamespaceUid, Vec<&Ownership>>, DomainError> {
    let mut by_ns: BTreeMap<NamespaceUid, Vec<&Ownership>> = BTreeMap::new();
    for o in ownerships {
        by_ns.entry(o.namespace).or_default().push(o);
    }
    for (ns, list) in &mut by_ns {
        list.sort_by_key(|o| (o.valid.from(), o.valid.to().is_none(), o.valid.to(), o.tenant));
        for pair in list.windows(2) {
            if let [a, b] = pair
                && a.valid.overlaps(&b.valid)
            {
                return Err(DomainError::invalid(
                    "ownership",
                    format!(
                        "namespace {ns} has overlapping owners {} (from {}) and {} (from {})",
                        a.tenant,
                        a.valid.from(),
                        b.tenant,
                        b.valid.from()
                    ),
                ));
            }
        }
    }
    Ok(by_ns)
}

/// Splits `clip` at ownership boundaries: each piece with its attribution.
fn attribute(clip: Interval, owners: &[&Ownership]) -> Vec<(Attribution, Interval)> {
    let mut pieces = Vec::new();
    let mut cursor = clip.start();
    for o in owners {
        let Some(seg) = o.valid.intersect(&clip) else {
            continue;
        };
        if let Ok(gap) = Interval::new(cursor, seg.start())
            && !gap.is_empty()
        {
            pieces.push((Attribution::Unattributed, gap));
        }
        pieces.push((Attribution::Tenant { tenant: o.tenant }, seg));
        cursor = seg.end();
    }
    if let Ok(tail) = Interval::new(cursor, clip.end())
        && !tail.is_empty()
    {
        pieces.push((Attribution::Unattributed, tail));
    }
    pieces
}

/// GPU-equivalent time per (tenant, GPU class) within `period`.
///
/// Each allocation is clipped to `period`, split where its namespace changed owner, and each
/// piece is attributed to the owner at that time; time with no owner goes to
/// [`Attribution::Unattributed`]. Output is sorted by (attribution, GPU class), tenants
/// first. Errors on overlapping ownerships of one namespace and on arithmetic overflow.
pub fn allocated_hours(
    allocations: &[Allocation],
    ownerships: &[Ownership],
    period: Interval,
) -> Result<Vec<TenantUsage>, DomainError> {
    struct Acc {
        gpu_time: Quantity,
        confidence: Confidence,
        ids: BTreeSet<String>,
    }
    let owners = index_ownerships(ownerships)?;
    let mut groups: BTreeMap<(Attribution, GpuClass), Acc> = BTreeMap::new();
    for a in allocations {
        let Some(clip) = a.interval.intersect(&period) else {
            continue;
        };
        let ns_owners = owners.get(&a.namespace).map(Vec::as_slice).unwrap_or(&[]);
        for (attribution, piece) in attribute(clip, ns_owners) {
            let time = Quantity::held(a.fraction, piece.duration_nanos())?;
            let acc = groups.entry((attribution, a.gpu_class.clone())).or_insert_with(|| Acc {
                gpu_time: Quantity::ZERO,
                confidence: Confidence::Exact,
                ids: BTreeSet::new(),
            });
            acc.gpu_time = acc.gpu_time.checked_add(time)?;
            acc.confidence = acc.confidence.combine(a.effective_confidence());
            acc.ids.insert(a.id.clone());
        }
    }
    Ok(groups
        .into_iter()
        .map(|((attribution, gpu_class), acc)| TenantUsage {
            attribution,
            gpu_class,
            gpu_time: acc.gpu_time,
            confidence: acc.confidence,
            allocation_ids: acc.ids.into_iter().collect(),
        })
        .collect())
}

/// Guaranteed and borrowed GPU time over a window (all exact GPU-nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    /// `∫ min(allocated(t), quota(t)) dt`: use covered by the quota.
    pub guaranteed: Quantity,
    /// `∫ max(0, allocated(t) − quota(t)) dt`: use beyond the quota.
    pub borrowed: Quantity,
    /// `∫ allocated(t) dt` (= guaranteed + borrowed).
    pub allocated: Quantity,
    /// `∫ quota(t) dt`: committed capacity, charged whether used or not.
    pub quota: Quantity,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    // Rises sort before falls at one instant so running levels never dip below zero.
    AllocUp,
    QuotaUp,
    AllocDown,
    QuotaDown,
}

/// Splits allocated GPU time into guaranteed (within quota) and borrowed (beyond quota)
/// over `window`.
///
/// `allocs` and `quota` are `(interval, GPUs)` segments, clipped to `window`; overlapping
/// segments add up, and where no quota segment covers a time the quota is 0. A sweep over
/// the sorted segment endpoints integrates `min(a, q)` and `max(0, a − q)` exactly:
/// **O(n log n)** time and O(n) memory for n segments (the sort dominates).
pub fn split_guaranteed_borrowed(
    allocs: &[(Interval, Fraction)],
    quota: &[(Interval, Fraction)],
    window: Interval,
) -> Result<Split, DomainError> {
    let mut events: Vec<(OffsetDateTime, Step, Fraction)> = Vec::with_capacity(2 * (allocs.len() + quota.len()));
    for (list, up, down) in [(allocs, Step::AllocUp, Step::AllocDown), (quota, Step::QuotaUp, Step::QuotaDown)] {
        for (interval, f) in list {
            if let Some(clip) = interval.intersect(&window)
                && !f.is_zero()
            {
                events.push((clip.start(), up, *f));
                events.push((clip.end(), down, *f));
            }
        }
    }
    events.sort_unstable_by_key(|&(t, step, f)| (t, step, f));

    let mut split = Split {
        guaranteed: Quantity::ZERO,
        borrowed: Quantity::ZERO,
        allocated: Quantity::ZERO,
        quota: Quantity::ZERO,
    };
    let (mut a, mut q) = (Fraction::ZERO, Fraction::ZERO);
    let mut prev: Option<OffsetDateTime> = None;
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        if let Some(p) = prev {
            let dt = (t - p).whole_nanoseconds();
            if dt > 0 {
                let within = a.min(q);
                split.guaranteed = split.guaranteed.checked_add(Quantity::held(within, dt)?)?;
                split.borrowed = split.borrowed.checked_add(Quantity::held(a.checked_sub(within)?, dt)?)?;
                split.allocated = split.allocated.checked_add(Quantity::held(a, dt)?)?;
                split.quota = split.quota.checked_add(Quantity::held(q, dt)?)?;
            }
        }
        while let Some(&(when, step, f)) = events.get(i)
            && when == t
        {
            match step {
                Step::AllocUp => a = a.checked_add(f)?,
                Step::QuotaUp => q = q.checked_add(f)?,
                Step::AllocDown => a = a.checked_sub(f)?,
                Step::QuotaDown => q = q.checked_sub(f)?,
            }
            i += 1;
        }
        prev = Some(t);
    }
    Ok(split)
}

/// A maximal time range during which allocations on one GPU summed to more than one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OvercommitFinding {
    /// The physical GPU.
    pub gpu: GpuUuid,
    /// The maximal contiguous range where the sum of fractions exceeded 1.
    pub interval: Interval,
    /// The highest sum reached in that range.
    pub peak: Fraction,
    /// IDs of every allocation held on the GPU at some point of the range, sorted.
    pub allocation_ids: Vec<String>,
}

/// Result of [`detect_overcommit`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OvercommitReport {
    /// Findings sorted by GPU, then start time.
    pub findings: Vec<OvercommitFinding>,
    /// IDs of allocations without a GPU UUID, which cannot be checked (sorted). Reported so a
    /// clean result is never mistaken for a complete check.
    pub unchecked: Vec<String>,
}

/// Finds every range where the fractions held on one physical GPU sum to more than 1.
///
/// Nothing is capped: an overcommit is a finding to investigate, and every allocation keeps
/// its full fraction. Allocations without a GPU UUID are skipped and listed in
/// [`OvercommitReport::unchecked`]. Sweep per GPU: O(n log n).
pub fn detect_overcommit(allocs: &[Allocation]) -> Result<OvercommitReport, DomainError> {
    let mut by_gpu: BTreeMap<&GpuUuid, Vec<&Allocation>> = BTreeMap::new();
    let mut unchecked = Vec::new();
    for a in allocs {
        match &a.gpu {
            Some(gpu) => by_gpu.entry(gpu).or_default().push(a),
            None => unchecked.push(a.id.clone()),
        }
    }
    unchecked.sort();

    struct Open {
        start: OffsetDateTime,
        peak: Fraction,
        ids: BTreeSet<String>,
    }
    let mut findings = Vec::new();
    for (gpu, list) in by_gpu {
        // (time, is_end, index): at one instant, starts before ends keeps the level >= 0.
        let mut events: Vec<(OffsetDateTime, bool, usize)> = Vec::with_capacity(2 * list.len());
        for (idx, a) in list.iter().enumerate() {
            if !a.interval.is_empty() && !a.fraction.is_zero() {
                events.push((a.interval.start(), false, idx));
                events.push((a.interval.end(), true, idx));
            }
        }
        events.sort_unstable_by_key(|&(t, end, idx)| (t, end, &list[idx].id, idx));

        let mut level = Fraction::ZERO;
        let mut active: BTreeMap<&str, usize> = BTreeMap::new();
        let mut open: Option<Open> = None;
        let mut i = 0;
        while i < events.len() {
            let t = events[i].0;
            while let Some(&(when, is_end, idx)) = events.get(i)
                && when == t
            {
                let a = list[idx];
                if is_end {
                    level = level.checked_sub(a.fraction)?;
                    if let Some(n) = active.get_mut(a.id.as_str()) {
                        *n -= 1;
                        if *n == 0 {
                            active.remove(a.id.as_str());
                        }
                    }
                } else {
                    level = level.checked_add(a.fraction)?;
                    *active.entry(a.id.as_str()).or_default() += 1;
                }
                i += 1;
            }
            if level > Fraction::ONE {
                let o = open.get_or_insert_with(|| Open { start: t, peak: level, ids: BTreeSet::new() });
                o.peak = o.peak.max(level);
                o.ids.extend(active.keys().map(|id| (*id).to_owned()));
            } else if let Some(o) = open.take() {
                findings.push(OvercommitFinding {
                    gpu: gpu.clone(),
                    interval: Interval::new(o.start, t)?,
                    peak: o.peak,
                    allocation_ids: o.ids.into_iter().collect(),
                });
            }
        }
    }
    Ok(OvercommitReport { findings, unchecked })
}

/// One holding in a capacity pool (a GPU, or a node's GPUs when the devices are not known), for [`over_capacity`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The pool: a GPU UUID, or `node:<name>`.
    pub pool: String,
    /// The pool's capacity in GPUs.
    pub capacity: Fraction,
    /// The allocation.
    pub id: String,
    /// Start.
    pub start: OffsetDateTime,
    /// End (`None`: still held; the sweep ends it at `until`).
    pub end: Option<OffsetDateTime>,
    /// GPUs it holds in this pool.
    pub fraction: Fraction,
}

/// A maximal time range in which the holdings of one pool summed above its capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverCapacity {
    /// The pool.
    pub pool: String,
    /// Its capacity.
    pub capacity: Fraction,
    /// From.
    pub start: OffsetDateTime,
    /// To.
    pub end: OffsetDateTime,
    /// The highest sum reached.
    pub peak: Fraction,
    /// Every allocation held in the pool during the range, sorted.
    pub ids: Vec<String>,
}

/// Finds where soft shares (or any holdings) of one pool sum above its capacity — an over-committed device, a
/// finding to investigate rather than a silent overcharge; nothing is capped. Open holdings end at `until`.
pub fn over_capacity(holdings: &[Holding], until: OffsetDateTime) -> Result<Vec<OverCapacity>, DomainError> {
    let mut by_pool: BTreeMap<&str, Vec<&Holding>> = BTreeMap::new();
    for h in holdings {
        by_pool.entry(h.pool.as_str()).or_default().push(h);
    }
    let mut out = Vec::new();
    for (pool, list) in by_pool {
        let capacity = list.iter().map(|h| h.capacity).min().unwrap_or(Fraction::ONE);
        let mut events: Vec<(OffsetDateTime, bool, usize)> = Vec::new();
        for (i, h) in list.iter().enumerate() {
            let end = h.end.unwrap_or(until);
            if end > h.start && !h.fraction.is_zero() {
                events.push((h.start, false, i));
                events.push((end, true, i));
            }
        }
        // Ends before starts at one instant: back-to-back holdings do not overlap.
        events.sort_unstable_by_key(|&(t, start_or_end, i)| (t, !start_or_end, i));
        let mut level = Fraction::ZERO;
        let mut active: BTreeSet<usize> = BTreeSet::new();
        let mut open: Option<(OffsetDateTime, Fraction, BTreeSet<usize>)> = None;
        let mut k = 0;
        while k < events.len() {
            let t = events[k].0;
            while let Some(&(when, is_end, i)) = events.get(k)
                && when == t
            {
                if is_end {
                    level = level.checked_sub(list[i].fraction)?;
                    active.remove(&i);
                } else {
                    level = level.checked_add(list[i].fraction)?;
                    active.insert(i);
                }
                k += 1;
            }
            if level > capacity {
                let o = open.get_or_insert_with(|| (t, level, BTreeSet::new()));
                o.1 = o.1.max(level);
                o.2.extend(active.iter().copied());
            } else if let Some((start, peak, ids)) = open.take() {
                let mut ids: Vec<String> = ids.into_iter().map(|i| list[i].id.clone()).collect();
                ids.sort();
                ids.dedup();
                out.push(OverCapacity { pool: pool.to_string(), capacity, start, end: t, peak, ids });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::ids::MigProfile;
    use crate::interval::NANOS_PER_HOUR;
    use time::macros::datetime;
    use uuid::Uuid;

    const GPU_A: &str = "GPU-00000000-0000-0000-0000-00000000000a";
    const GPU_B: &str = "GPU-00000000-0000-0000-0000-00000000000b";

    fn fr(n: i128, d: i128) -> Fraction {
        Fraction::new(n, d).unwrap()
    }

    fn at(h: u8, m: u8) -> OffsetDateTime {
        datetime!(2026-10-01 00:00 UTC).replace_hour(h).unwrap().replace_minute(m).unwrap()
    }

    fn iv(a: OffsetDateTime, b: OffsetDateTime) -> Interval {
        Interval::new(a, b).unwrap()
    }

    fn ns(n: u128) -> NamespaceUid {
        NamespaceUid::from_uuid(Uuid::from_u128(n))
    }

    fn tenant(n: u128) -> TenantId {
        TenantId::from_uuid(Uuid::from_u128(0x1000 + n))
    }

    fn alloc(id: &str, mode: SharingMode, interval: Interval) -> Allocation {
        let fraction = mode.fraction().unwrap().unwrap_or(Fraction::ONE);
        Allocation {
            id: id.into(),
            cluster: ClusterId::from_uuid(Uuid::nil()),
            namespace: ns(1),
            pod: Some(PodUid::from_uuid(Uuid::from_u128(7))),
            vm: None,
            gpu: Some(GpuUuid::new(GPU_A).unwrap()),
            gpu_class: GpuClass::new("H100-80GB").unwrap(),
            confidence: Allocation::derived_confidence(&mode, false),
            mode,
            fraction,
            interval,
            end_estimated: false,
        }
    }

    fn owner(t: TenantId, from: OffsetDateTime, to: Option<OffsetDateTime>) -> Ownership {
        Ownership { namespace: ns(1), tenant: t, valid: Validity::new(from, to).unwrap() }
    }

    fn day() -> Interval {
        iv(at(0, 0), datetime!(2026-10-02 00:00 UTC))
    }

    fn hours(u: &TenantUsage) -> Fraction {
        u.gpu_hours().unwrap()
    }

    #[test]
    fn mig_seventh_for_seven_hours_is_one_gpu_hour() {
        let mut a =
            alloc("mig", SharingMode::Mig { profile: MigProfile::new("1g.10gb").unwrap() }, iv(at(8, 0), at(15, 0)));
        a.fraction = fr(1, 7);
        let usage = allocated_hours(&[a], &[owner(tenant(1), at(0, 0), None)], day()).unwrap();
        assert_eq!(usage.len(), 1);
        assert_eq!(hours(&usage[0]), Fraction::ONE);
        assert_eq!(usage[0].confidence, Confidence::Exact);
        assert_eq!(usage[0].attribution, Attribution::Tenant { tenant: tenant(1) });
        assert_eq!(usage[0].allocation_ids, vec!["mig".to_owned()]);
    }

    #[test]
    fn time_slice_quarter_for_two_hours_is_half_gpu_hour_modeled() {
        let a = alloc("ts", SharingMode::TimeSlice { replicas: 4 }, iv(at(10, 0), at(12, 0)));
        let usage = allocated_hours(&[a], &[owner(tenant(1), at(0, 0), None)], day()).unwrap();
        assert_eq!(hours(&usage[0]), fr(1, 2));
        assert_eq!(usage[0].confidence, Confidence::Modeled);
    }

    #[test]
    fn ownership_change_splits_the_allocation() {
        let a = alloc("pod", SharingMode::Exclusive, iv(at(10, 0), at(14, 0)));
        let owners = [owner(tenant(2), at(12, 0), None), owner(tenant(1), at(0, 0), Some(at(12, 0)))];
        let usage = allocated_hours(&[a], &owners, day()).unwrap();
        assert_eq!(usage.len(), 2);
        assert_eq!(usage[0].attribution, Attribution::Tenant { tenant: tenant(1) });
        assert_eq!(hours(&usage[0]), fr(2, 1));
        assert_eq!(usage[1].attribution, Attribution::Tenant { tenant: tenant(2) });
        assert_eq!(hours(&usage[1]), fr(2, 1));
    }

    #[test]
    fn unowned_time_is_reported_and_period_clips() {
        let mut a = alloc("pod", SharingMode::Exclusive, iv(at(10, 0), at(14, 0)));
        a.end_estimated = true;
        // Owned only 11:00–12:00; period ends 13:00.
        let owners = [owner(tenant(1), at(11, 0), Some(at(12, 0)))];
        let usage = allocated_hours(&[a], &owners, iv(at(0, 0), at(13, 0))).unwrap();
        assert_eq!(usage.len(), 2);
        assert_eq!(usage[0].attribution, Attribution::Tenant { tenant: tenant(1) });
        assert_eq!(hours(&usage[0]), Fraction::ONE);
        assert_eq!(usage[1].attribution, Attribution::Unattributed);
        assert_eq!(hours(&usage[1]), fr(2, 1));
        assert!(usage.iter().all(|u| u.confidence == Confidence::Estimated));
    }

    #[test]
    fn recorded_confidence_cannot_overstate_the_facts() {
        let mut a = alloc("ts", SharingMode::TimeSlice { replicas: 2 }, iv(at(1, 0), at(2, 0)));
        a.confidence = Confidence::Exact;
        assert_eq!(a.effective_confidence(), Confidence::Modeled);
        assert_eq!(a.gpu_time().unwrap().gpu_hours().unwrap(), fr(1, 2));
    }

    #[test]
    fn overlapping_ownerships_are_rejected() {
        let a = alloc("pod", SharingMode::Exclusive, iv(at(10, 0), at(14, 0)));
        let owners = [owner(tenant(1), at(0, 0), Some(at(12, 0))), owner(tenant(2), at(11, 0), None)];
        let err = allocated_hours(&[a], &owners, day()).unwrap_err();
        assert!(matches!(err, DomainError::Invalid { field: "ownership", .. }), "{err}");
    }

    #[test]
    fn classes_are_grouped_separately() {
        let a = alloc("a", SharingMode::Exclusive, iv(at(1, 0), at(2, 0)));
        let mut b = alloc("b", SharingMode::Exclusive, iv(at(1, 0), at(3, 0)));
        b.gpu_class = GpuClass::new("A100-40GB").unwrap();
        let c = alloc("c", SharingMode::Exclusive, iv(at(5, 0), at(6, 0)));
        let usage = allocated_hours(&[a, b, c], &[owner(tenant(1), at(0, 0), None)], day()).unwrap();
        let got: Vec<(&str, Fraction, Vec<String>)> =
            usage.iter().map(|u| (u.gpu_class.as_str(), hours(u), u.allocation_ids.clone())).collect();
        assert_eq!(
            got,
            vec![
                ("A100-40GB", fr(2, 1), vec!["b".to_owned()]),
                ("H100-80GB", fr(2, 1), vec!["a".to_owned(), "c".to_owned()]),
            ]
        );
    }

    #[test]
    fn quota_one_allocation_three_is_one_guaranteed_two_borrowed() {
        let hour = iv(at(10, 0), at(11, 0));
        let s =
            split_guaranteed_borrowed(&[(hour, fr(3, 1))], &[(iv(at(0, 0), at(23, 0)), Fraction::ONE)], hour).unwrap();
        assert_eq!(s.guaranteed.gpu_hours().unwrap(), Fraction::ONE);
        assert_eq!(s.borrowed.gpu_hours().unwrap(), fr(2, 1));
        assert_eq!(s.allocated.gpu_hours().unwrap(), fr(3, 1));
        assert_eq!(s.quota.gpu_hours().unwrap(), Fraction::ONE);
    }

    #[test]
    fn quota_gaps_and_overlaps() {
        // Allocation of 2 GPUs 10–14. Quota: 1 GPU 10–12, plus 1/2 GPU 11–13, none after 13.
        let s = split_guaranteed_borrowed(
            &[(iv(at(10, 0), at(14, 0)), fr(2, 1))],
            &[(iv(at(10, 0), at(12, 0)), Fraction::ONE), (iv(at(11, 0), at(13, 0)), fr(1, 2))],
            day(),
        )
        .unwrap();
        // guaranteed: 10–11: 1, 11–12: 3/2, 12–13: 1/2, 13–14: 0 → 3 GPU-hours.
        assert_eq!(s.guaranteed.gpu_hours().unwrap(), fr(3, 1));
        assert_eq!(s.borrowed.gpu_hours().unwrap(), fr(5, 1));
        assert_eq!(s.quota.gpu_hours().unwrap(), fr(3, 1));
        assert_eq!(s.allocated.gpu_hours().unwrap(), fr(8, 1));
    }

    #[test]
    fn split_of_nothing_is_zero() {
        let s = split_guaranteed_borrowed(&[], &[], day()).unwrap();
        assert_eq!(s.allocated, Quantity::ZERO);
        assert_eq!(s.borrowed, Quantity::ZERO);
    }

    #[test]
    fn two_exclusive_pods_overlapping_give_one_finding() {
        let a = alloc("a", SharingMode::Exclusive, iv(at(10, 0), at(11, 0)));
        let b = alloc("b", SharingMode::Exclusive, iv(at(10, 30), at(12, 0)));
        let report = detect_overcommit(&[b, a]).unwrap();
        assert_eq!(report.findings.len(), 1);
        let f = &report.findings[0];
        assert_eq!(f.gpu.as_str(), GPU_A);
        assert_eq!(f.interval, iv(at(10, 30), at(11, 0)));
        assert_eq!(f.peak, fr(2, 1));
        assert_eq!(f.allocation_ids, vec!["a".to_owned(), "b".to_owned()]);
        assert!(report.unchecked.is_empty());
    }

    #[test]
    fn full_time_slice_policy_is_not_overcommitted_but_one_more_is() {
        let mode = SharingMode::TimeSlice { replicas: 4 };
        let mut allocs: Vec<Allocation> =
            (0..4).map(|i| alloc(&format!("r{i}"), mode.clone(), iv(at(10, 0), at(12, 0)))).collect();
        assert!(detect_overcommit(&allocs).unwrap().findings.is_empty());
        allocs.push(alloc("r4", mode, iv(at(11, 0), at(13, 0))));
        let report = detect_overcommit(&allocs).unwrap();
        assert_eq!(report.findings.len(), 1);
        assert_eq!(report.findings[0].peak, fr(5, 4));
        assert_eq!(report.findings[0].interval, iv(at(11, 0), at(12, 0)));
        assert_eq!(report.findings[0].allocation_ids.len(), 5);
    }

    #[test]
    fn overcommit_range_is_maximal_across_handovers() {
        let a = alloc("a", SharingMode::Exclusive, iv(at(10, 0), at(12, 0)));
        let b = alloc("b", SharingMode::Exclusive, iv(at(11, 0), at(13, 0)));
        let c = alloc("c", SharingMode::Exclusive, iv(at(12, 0), at(14, 0)));
        let mut d = alloc("d", SharingMode::Exclusive, iv(at(11, 0), at(13, 0)));
        d.gpu = Some(GpuUuid::new(GPU_B).unwrap());
        let mut e = alloc("e", SharingMode::Exclusive, iv(at(0, 0), at(23, 0)));
        e.gpu = None;
        let report = detect_overcommit(&[c, e, a, d, b]).unwrap();
        assert_eq!(report.findings.len(), 1);
        let f = &report.findings[0];
        assert_eq!(f.interval, iv(at(11, 0), at(13, 0)));
        assert_eq!(f.peak, fr(2, 1));
        assert_eq!(f.allocation_ids, vec!["a", "b", "c"]);
        assert_eq!(report.unchecked, vec!["e".to_owned()]);
    }

    #[test]
    fn back_to_back_allocations_are_not_overcommit() {
        let a = alloc("a", SharingMode::Exclusive, iv(at(10, 0), at(11, 0)));
        let b = alloc("b", SharingMode::Exclusive, iv(at(11, 0), at(12, 0)));
        assert!(detect_overcommit(&[a, b]).unwrap().findings.is_empty());
    }

    #[test]
    fn nanosecond_exactness() {
        let mut a = alloc("a", SharingMode::Exclusive, iv(at(10, 0), at(10, 0)));
        a.interval = Interval::new(at(10, 0), at(10, 0) + time::Duration::nanoseconds(1)).unwrap();
        a.fraction = fr(1, 3);
        let usage = allocated_hours(&[a], &[owner(tenant(1), at(0, 0), None)], day()).unwrap();
        assert_eq!(usage[0].gpu_time.gpu_nanos(), fr(1, 3));
        assert_eq!(hours(&usage[0]), fr(1, 3 * NANOS_PER_HOUR));
    }
}

#[cfg(test)]
mod over_capacity_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use time::macros::datetime;

    fn h(pool: &str, id: &str, from: u8, to: Option<u8>, f: &str) -> Holding {
        let at = |hh: u8| datetime!(2026-11-02 00:00 UTC).replace_hour(hh).unwrap();
        Holding {
            pool: pool.into(),
            capacity: Fraction::ONE,
            id: id.into(),
            start: at(from),
            end: to.map(at),
            fraction: f.parse().unwrap(),
        }
    }

    #[test]
    fn shares_above_one_gpu_are_found_and_back_to_back_ones_are_not() {
        let until = datetime!(2026-11-03 00:00 UTC);
        let ok =
            [h("GPU-a", "x", 1, Some(3), "1/2"), h("GPU-a", "y", 1, Some(3), "1/2"), h("GPU-a", "z", 3, Some(5), "1")];
        assert!(over_capacity(&ok, until).unwrap().is_empty());
        let over = [
            h("GPU-a", "x", 1, Some(4), "1/2"),
            h("GPU-a", "y", 2, Some(5), "3/10"),
            h("GPU-a", "z", 3, None, "1/2"),
            h("GPU-b", "w", 3, None, "1/2"),
        ];
        let found = over_capacity(&over, until).unwrap();
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!((f.pool.as_str(), f.peak), ("GPU-a", "13/10".parse().unwrap()));
        assert_eq!((f.start.hour(), f.end.hour()), (3, 4));
        assert_eq!(f.ids, ["x", "y", "z"]);
        // A node pool of 2 GPUs holds 1.5 without a finding.
        let mut node = vec![h("node:n1", "p", 0, None, "1"), h("node:n1", "q", 0, None, "1/2")];
        for n in &mut node {
            n.capacity = Fraction::from_integer(2).unwrap();
        }
        assert!(over_capacity(&node, until).unwrap().is_empty());
    }
}
