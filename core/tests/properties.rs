//! Property tests of the allocation math: conservation, order independence and bounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use gpuledger_core::{
    Allocation, Attribution, ClusterId, Confidence, Fraction, GpuClass, GpuUuid, Interval, NamespaceUid, Ownership,
    Quantity, SharingMode, TenantId, TenantUsage, Validity, allocated_hours, detect_overcommit,
    split_guaranteed_borrowed,
};
use proptest::prelude::*;
use time::OffsetDateTime;
use time::macros::datetime;
use uuid::Uuid;

const DAY: i64 = 86_400;

fn t(s: i64) -> OffsetDateTime {
    datetime!(2026-10-01 00:00 UTC) + time::Duration::seconds(s)
}

fn iv(a: i64, b: i64) -> Interval {
    Interval::new(t(a), t(b)).unwrap()
}

fn day() -> Interval {
    iv(0, DAY)
}

fn fraction() -> impl Strategy<Value = Fraction> {
    (1i128..=8, 1i128..=8).prop_map(|(n, d)| Fraction::new(n, d).unwrap())
}

/// An interval starting within the day; it may run past the day's end (windows clip it).
fn interval() -> impl Strategy<Value = Interval> {
    (0..DAY, 1..DAY / 2).prop_map(|(s, len)| iv(s, s + len))
}

fn segments() -> impl Strategy<Value = Vec<(Interval, Fraction)>> {
    prop::collection::vec((interval(), fraction()), 0..12)
}

#[derive(Debug, Clone)]
struct Spec {
    interval: Interval,
    fraction: Fraction,
    gpu: Option<u8>,
    namespace: u8,
    class: u8,
    time_slice: bool,
    end_estimated: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        interval(),
        fraction(),
        prop::option::weighted(0.9, 0u8..3),
        0u8..3,
        0u8..2,
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(interval, fraction, gpu, namespace, class, time_slice, end_estimated)| Spec {
            interval,
            fraction,
            gpu,
            namespace,
            class,
            time_slice,
            end_estimated,
        })
}

fn ns(n: u8) -> NamespaceUid {
    NamespaceUid::from_uuid(Uuid::from_u128(u128::from(n) + 1))
}

fn build(specs: &[Spec]) -> Vec<Allocation> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mode = if s.time_slice { SharingMode::TimeSlice { replicas: 4 } } else { SharingMode::Exclusive };
            Allocation {
                id: format!("alloc-{i:03}"),
                cluster: ClusterId::from_uuid(Uuid::nil()),
                namespace: ns(s.namespace),
                pod: None,
                vm: None,
                gpu: s.gpu.map(|g| GpuUuid::new(format!("GPU-00000000-0000-0000-0000-{g:012}")).unwrap()),
                gpu_class: GpuClass::new(if s.class == 0 { "H100-80GB" } else { "A100-40GB" }).unwrap(),
                confidence: Allocation::derived_confidence(&mode, s.end_estimated),
                mode,
                fraction: s.fraction,
                interval: s.interval,
                end_estimated: s.end_estimated,
            }
        })
        .collect()
}

/// Non-overlapping ownerships: per namespace, cut the day at sorted points; each segment is
/// owned by one of three tenants or by nobody (a gap); the last segment may be open-ended.
fn ownerships() -> impl Strategy<Value = Vec<Ownership>> {
    prop::collection::vec(
        (
            prop::collection::btree_set(0..DAY, 0..4),
            prop::collection::vec(prop::option::weighted(0.8, 0u8..3), 5),
            any::<bool>(),
        ),
        3,
    )
    .prop_map(|per_ns| {
        let mut out = Vec::new();
        for (n, (cuts, owners, open_end)) in per_ns.into_iter().enumerate() {
            let mut points = vec![0];
            points.extend(cuts.into_iter().filter(|c| *c > 0));
            points.push(DAY);
            let last = points.len() - 2;
            for (k, w) in points.windows(2).enumerate() {
                if let Some(tenant) = owners[k] {
                    let to = if k == last && open_end { None } else { Some(t(w[1])) };
                    out.push(Ownership {
                        namespace: ns(u8::try_from(n).unwrap()),
                        tenant: TenantId::from_uuid(Uuid::from_u128(0x100 + u128::from(tenant))),
                        valid: Validity::new(t(w[0]), to).unwrap(),
                    });
                }
            }
        }
        out
    })
}

fn total(usages: &[TenantUsage]) -> Quantity {
    usages.iter().try_fold(Quantity::ZERO, |acc, u| acc.checked_add(u.gpu_time)).unwrap()
}

fn by_key(usages: &[TenantUsage]) -> BTreeMap<(Attribution, GpuClass), Quantity> {
    let mut m: BTreeMap<(Attribution, GpuClass), Quantity> = BTreeMap::new();
    for u in usages {
        let e = m.entry((u.attribution, u.gpu_class.clone())).or_insert(Quantity::ZERO);
        *e = e.checked_add(u.gpu_time).unwrap();
    }
    m
}

fn sum(qs: impl IntoIterator<Item = Quantity>) -> Quantity {
    qs.into_iter().try_fold(Quantity::ZERO, |acc, q| acc.checked_add(q)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// (a) Splitting the period at any instant conserves every group's hours.
    #[test]
    fn period_split_conserves_hours(
        specs in prop::collection::vec(spec(), 0..10),
        owners in ownerships(),
        cut in 1..DAY,
    ) {
        let allocs = build(&specs);
        let whole = allocated_hours(&allocs, &owners, day()).unwrap();
        let left = allocated_hours(&allocs, &owners, iv(0, cut)).unwrap();
        let right = allocated_hours(&allocs, &owners, iv(cut, DAY)).unwrap();
        let mut parts = by_key(&left);
        for (k, q) in by_key(&right) {
            let e = parts.entry(k).or_insert(Quantity::ZERO);
            *e = e.checked_add(q).unwrap();
        }
        prop_assert_eq!(by_key(&whole), parts);

        let segs: Vec<(Interval, Fraction)> = allocs.iter().map(|a| (a.interval, a.fraction)).collect();
        let s = split_guaranteed_borrowed(&segs, &[], day()).unwrap();
        let l = split_guaranteed_borrowed(&segs, &[], iv(0, cut)).unwrap();
        let r = split_guaranteed_borrowed(&segs, &[], iv(cut, DAY)).unwrap();
        prop_assert_eq!(s.allocated, l.allocated.checked_add(r.allocated).unwrap());
    }

    /// (b) guaranteed + borrowed == allocated; (e) guaranteed <= quota and <= allocated.
    #[test]
    fn split_adds_up_and_is_bounded(
        allocs in segments(),
        quota in segments(),
        w in interval(),
    ) {
        let s = split_guaranteed_borrowed(&allocs, &quota, w).unwrap();
        prop_assert_eq!(s.guaranteed.checked_add(s.borrowed).unwrap(), s.allocated);
        prop_assert!(s.guaranteed <= s.quota);
        prop_assert!(s.guaranteed <= s.allocated);
        // allocated and quota are plain integrals of the clipped segments.
        let integral = |segs: &[(Interval, Fraction)]| sum(segs.iter().filter_map(|(i, f)| {
            i.intersect(&w).map(|c| Quantity::held(*f, c.duration_nanos()).unwrap())
        }));
        prop_assert_eq!(s.allocated, integral(&allocs));
        prop_assert_eq!(s.quota, integral(&quota));
        // Brute-force oracle: integrate min(a, q) over elementary segments between endpoints.
        let mut points: Vec<OffsetDateTime> = allocs
            .iter()
            .chain(quota.iter())
            .filter_map(|(i, _)| i.intersect(&w))
            .flat_map(|c| [c.start(), c.end()])
            .collect();
        points.sort();
        points.dedup();
        let level = |segs: &[(Interval, Fraction)], at: OffsetDateTime| {
            segs.iter()
                .filter(|(i, _)| i.contains(at))
                .try_fold(Fraction::ZERO, |acc, (_, f)| acc.checked_add(*f))
                .unwrap()
        };
        let oracle = sum(points.windows(2).map(|p| {
            let (a, q) = (level(&allocs, p[0]), level(&quota, p[0]));
            Quantity::held(a.min(q), (p[1] - p[0]).whole_nanoseconds()).unwrap()
        }));
        prop_assert_eq!(s.guaranteed, oracle);
        // With no quota everything is borrowed.
        let none = split_guaranteed_borrowed(&allocs, &[], w).unwrap();
        prop_assert_eq!(none.borrowed, none.allocated);
        prop_assert!(none.guaranteed.is_zero());
    }

    /// (c) Input order changes no result.
    #[test]
    fn order_does_not_matter(
        (specs, shuffled) in prop::collection::vec(spec(), 0..10)
            .prop_flat_map(|v| {
                let idx: Vec<usize> = (0..v.len()).collect();
                (Just(v), Just(idx).prop_shuffle())
            }),
        (owners, owner_order) in ownerships().prop_flat_map(|o| {
            let idx: Vec<usize> = (0..o.len()).collect();
            (Just(o), Just(idx).prop_shuffle())
        }),
        (quota, quota_order) in segments().prop_flat_map(|q| {
            let idx: Vec<usize> = (0..q.len()).collect();
            (Just(q), Just(idx).prop_shuffle())
        }),
    ) {
        let allocs = build(&specs);
        let allocs2: Vec<Allocation> = shuffled.iter().map(|&i| allocs[i].clone()).collect();
        let owners2: Vec<Ownership> = owner_order.iter().map(|&i| owners[i].clone()).collect();
        let quota2: Vec<(Interval, Fraction)> = quota_order.iter().map(|&i| quota[i]).collect();

        prop_assert_eq!(
            allocated_hours(&allocs, &owners, day()).unwrap(),
            allocated_hours(&allocs2, &owners2, day()).unwrap()
        );
        let segs = |a: &[Allocation]| a.iter().map(|a| (a.interval, a.fraction)).collect::<Vec<_>>();
        prop_assert_eq!(
            split_guaranteed_borrowed(&segs(&allocs), &quota, day()).unwrap(),
            split_guaranteed_borrowed(&segs(&allocs2), &quota2, day()).unwrap()
        );
        prop_assert_eq!(detect_overcommit(&allocs).unwrap(), detect_overcommit(&allocs2).unwrap());
    }

    /// (d) Ownership splits conserve hours: the sum over tenants and unattributed equals the
    /// total of the clipped allocations, and confidence never exceeds any input's.
    #[test]
    fn ownership_split_conserves_hours(
        specs in prop::collection::vec(spec(), 0..10),
        owners in ownerships(),
        w in interval(),
    ) {
        let allocs = build(&specs);
        let usage = allocated_hours(&allocs, &owners, w).unwrap();
        let expected = sum(allocs.iter().filter_map(|a| {
            a.interval.intersect(&w).map(|c| Quantity::held(a.fraction, c.duration_nanos()).unwrap())
        }));
        prop_assert_eq!(total(&usage), expected);
        // No owners at all: everything is unattributed, nothing lost.
        let unowned = allocated_hours(&allocs, &[], w).unwrap();
        prop_assert!(unowned.iter().all(|u| u.attribution == Attribution::Unattributed));
        prop_assert_eq!(total(&unowned), expected);
        for u in &usage {
            let weakest = Confidence::weakest(
                allocs.iter().filter(|a| u.allocation_ids.contains(&a.id)).map(|a| a.effective_confidence()),
            );
            prop_assert_eq!(u.confidence, weakest);
        }
    }

    /// Overcommit findings agree with a brute-force level check at every endpoint, and every
    /// allocation without a GPU is listed as unchecked.
    #[test]
    fn overcommit_matches_brute_force(specs in prop::collection::vec(spec(), 0..12)) {
        let allocs = build(&specs);
        let report = detect_overcommit(&allocs).unwrap();
        prop_assert_eq!(
            report.unchecked.len(),
            allocs.iter().filter(|a| a.gpu.is_none()).count()
        );
        for a in allocs.iter().filter(|a| a.gpu.is_some()) {
            for at in [a.interval.start(), a.interval.end()] {
                let gpu = a.gpu.as_ref();
                let level = allocs
                    .iter()
                    .filter(|b| b.gpu.as_ref() == gpu && b.interval.contains(at))
                    .try_fold(Fraction::ZERO, |acc, b| acc.checked_add(b.fraction))
                    .unwrap();
                let flagged = report
                    .findings
                    .iter()
                    .any(|f| Some(&f.gpu) == gpu && f.interval.contains(at));
                prop_assert_eq!(level > Fraction::ONE, flagged, "at {} level {}", at, level);
            }
        }
        // Findings on one GPU never touch: each is maximal.
        for pair in report.findings.windows(2) {
            if pair[0].gpu == pair[1].gpu {
                prop_assert!(pair[0].interval.end() < pair[1].interval.start());
            }
        }
    }
}
