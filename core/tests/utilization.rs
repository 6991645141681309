//! Utilization analytics: hand-computed golden cases and properties (bounds, order independence).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpuledger_core::{
    ActivitySample, AllocationUtilization, Confidence, Fraction, HeldAllocation, Interval, Period, TenantId,
    Utilization, UtilizationOptions, analyze_utilization,
    utilization::{DeviceTimelines, analyze_timelines},
};
use proptest::prelude::*;
use time::OffsetDateTime;
use time::macros::datetime;
use uuid::Uuid;

const GPU: [&str; 3] = [
    "GPU-11111111-1111-1111-1111-111111111111",
    "GPU-22222222-2222-2222-2222-222222222222",
    "GPU-33333333-3333-3333-3333-333333333333",
];

fn fr(n: i128, d: i128) -> Fraction {
    Fraction::new(n, d).unwrap()
}

/// Minutes after 2026-10-01 00:00 UTC.
fn m(minutes: i64) -> OffsetDateTime {
    datetime!(2026-10-01 00:00 UTC) + time::Duration::minutes(minutes)
}

fn october() -> UtilizationOptions {
    UtilizationOptions::new(Period::parse("2026-10").unwrap().interval().unwrap())
}

fn alloc(
    id: &str,
    fraction: Fraction,
    start: OffsetDateTime,
    end: Option<OffsetDateTime>,
    gpu: &str,
) -> HeldAllocation {
    HeldAllocation {
        id: id.into(),
        tenant: Some(TenantId::from_uuid(Uuid::from_u128(1))),
        gpu_class: None,
        fraction,
        start,
        end,
        devices: vec![gpu.to_string()],
        confidence: Confidence::Exact,
    }
}

/// One-minute windows at `pct` from `from` (inclusive) to `to` (exclusive), as a DCGM/NVML rollup sends them.
fn minutes(gpu: &str, from: OffsetDateTime, to: OffsetDateTime, pct: f32) -> Vec<ActivitySample> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let next = t + time::Duration::minutes(1);
        out.push(ActivitySample {
            gpu_uuid: gpu.into(),
            window: Interval::new(t, next).unwrap(),
            utilization: Utilization::from_pct_f32(pct).unwrap(),
        });
        t = next;
    }
    out
}

fn one(allocation: HeldAllocation, samples: &[ActivitySample]) -> AllocationUtilization {
    let report = analyze_utilization(&[allocation], samples, &october()).unwrap();
    assert_eq!(report.allocations.len(), 1);
    report.allocations.into_iter().next().unwrap()
}

#[test]
fn idle_notebook_ten_hours_at_two_percent() {
    let samples = minutes(GPU[0], m(0), m(600), 2.0);
    let row = one(alloc("notebook", Fraction::ONE, m(0), Some(m(600)), GPU[0]), &samples);
    assert_eq!(row.allocated_gpu_hours, fr(10, 1));
    assert_eq!(row.observed_hours, fr(10, 1));
    // 1 GPU × 10 h × 0.02 = 0.2 GPU-h.
    assert_eq!(row.active_equivalent_gpu_hours, fr(1, 5));
    assert_eq!(row.idle_gpu_hours, fr(10, 1));
    assert!(row.idle);
    assert_eq!(row.idle_stretches, vec![Interval::new(m(0), m(600)).unwrap()]);
}

#[test]
fn mig_three_sevenths_busy_at_seventy_percent() {
    // The whole GPU's telemetry applies to the slice (documented approximation).
    let samples = minutes(GPU[1], m(0), m(7 * 60), 70.0);
    let row = one(alloc("mig", fr(3, 7), m(0), Some(m(7 * 60)), GPU[1]), &samples);
    // 3/7 × 7 h = 3 GPU-h allocated; × 0.7 = 2.1 GPU-h active-equivalent.
    assert_eq!(row.allocated_gpu_hours, fr(3, 1));
    assert_eq!(row.active_equivalent_gpu_hours, fr(21, 10));
    assert_eq!(row.observed_hours, fr(7, 1));
    assert_eq!(row.observed_gpu_hours, fr(3, 1));
    assert_eq!(row.idle_gpu_hours, Fraction::ZERO);
    assert!(!row.idle);
}

#[test]
fn a_quiet_stretch_shorter_than_the_minimum_is_not_idle() {
    // 45 min at 1 %, 2 h at 60 %, 50 min at 3 %: neither quiet stretch reaches one hour.
    let mut samples = minutes(GPU[0], m(0), m(45), 1.0);
    samples.extend(minutes(GPU[0], m(45), m(165), 60.0));
    samples.extend(minutes(GPU[0], m(165), m(215), 3.0));
    let row = one(alloc("short", Fraction::ONE, m(0), Some(m(215)), GPU[0]), &samples);
    assert!(!row.idle);
    assert_eq!(row.idle_gpu_hours, Fraction::ZERO);
    // (45 × 0.01 + 120 × 0.6 + 50 × 0.03) / 60 = (0.45 + 72 + 1.5) / 60 = 73.95 / 60
    assert_eq!(row.active_equivalent_gpu_hours, fr(7395, 6000));
    assert_eq!(row.allocated_gpu_hours, fr(215, 60));
}

#[test]
fn no_telemetry_is_not_idle() {
    let row = one(alloc("dark", fr(2, 1), m(0), Some(m(300)), GPU[2]), &minutes(GPU[0], m(0), m(300), 0.0));
    assert_eq!(row.allocated_gpu_hours, fr(10, 1));
    assert_eq!(row.observed_hours, Fraction::ZERO);
    assert_eq!(row.active_equivalent_gpu_hours, Fraction::ZERO);
    assert_eq!(row.idle_gpu_hours, Fraction::ZERO);
    assert!(!row.idle);
}

#[test]
fn allocations_crossing_the_period_are_clipped() {
    // Held from 22:00 on 30 September to 02:00 on 1 October, idle throughout: only October's two hours count.
    let samples = minutes(GPU[0], m(-120), m(120), 0.0);
    let row = one(alloc("cross", Fraction::ONE, m(-120), Some(m(120)), GPU[0]), &samples);
    assert_eq!(row.held, Interval::new(m(0), m(120)).unwrap());
    assert_eq!(row.allocated_gpu_hours, fr(2, 1));
    assert_eq!(row.observed_hours, fr(2, 1));
    assert_eq!(row.idle_gpu_hours, fr(2, 1));
    assert_eq!(row.idle_stretches, vec![Interval::new(m(0), m(120)).unwrap()]);

    // Still open at the end of the month: runs to 1 November 00:00.
    let last_day = datetime!(2026-10-31 20:00 UTC);
    let row = one(alloc("open", fr(1, 2), last_day, None, GPU[1]), &[]);
    assert_eq!(row.held.end(), datetime!(2026-11-01 00:00 UTC));
    assert_eq!(row.allocated_gpu_hours, fr(2, 1));
}

#[test]
fn a_custom_threshold_and_minimum() {
    let samples = minutes(GPU[0], m(0), m(40), 12.0);
    let options = october().with_idle_threshold_pct(15.0).unwrap().with_min_idle(time::Duration::minutes(30)).unwrap();
    let report =
        analyze_utilization(&[alloc("custom", Fraction::ONE, m(0), Some(m(60)), GPU[0])], &samples, &options).unwrap();
    let row = &report.allocations[0];
    assert_eq!(row.idle_gpu_hours, fr(2, 3));
    assert_eq!(row.observed_hours, fr(2, 3));
    assert_eq!(report.tenants[0].idle_allocations, 1);
}

/// A larger run: many allocations with a few samples each stays fast (debug build; the release build is ~10×
/// faster). Scaled by `GPULEDGER_UTIL_SCALE` (default 50,000 allocations).
#[test]
fn many_allocations_with_a_few_samples_each() {
    let n: usize = std::env::var("GPULEDGER_UTIL_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(50_000);
    let gpus: Vec<String> = (0..n).map(|i| format!("GPU-{:08x}-0000-0000-0000-000000000000", i)).collect();
    let mut allocations = Vec::with_capacity(n);
    let mut samples = Vec::with_capacity(n * 4);
    for (i, gpu) in gpus.iter().enumerate() {
        let start = m((i % 1000) as i64 * 10);
        allocations.push(HeldAllocation {
            id: format!("a{i}"),
            tenant: Some(TenantId::from_uuid(Uuid::from_u128((i % 50) as u128))),
            gpu_class: None,
            fraction: fr(1 + (i % 7) as i128, 7),
            start,
            end: Some(start + time::Duration::hours(4)),
            devices: vec![gpu.clone()],
            confidence: Confidence::Exact,
        });
        for k in 0..4 {
            let from = start + time::Duration::hours(k);
            samples.push(ActivitySample {
                gpu_uuid: gpu.clone(),
                window: Interval::new(from, from + time::Duration::hours(1)).unwrap(),
                utilization: Utilization::from_pct(((i + k as usize) % 10) as f64 * 1.5).unwrap(),
            });
        }
    }
    let started = std::time::Instant::now();
    let report = analyze_utilization(&allocations, &samples, &october()).unwrap();
    let took = started.elapsed();
    eprintln!("{n} allocations, {} samples: {took:?}", samples.len());
    assert_eq!(report.allocations.len(), n);
    assert_eq!(report.tenants.len(), 50.min(n));
    assert!(took < std::time::Duration::from_secs(60), "took {took:?}");
}

// ------------------------------------------------------------------------------------------------ properties

fn t(minutes: i64) -> OffsetDateTime {
    datetime!(2026-10-01 00:00 UTC) + time::Duration::minutes(minutes)
}

#[derive(Debug, Clone)]
struct AllocSpec {
    start: i64,
    len: Option<i64>,
    num: i128,
    den: i128,
    devices: Vec<usize>,
    tenant: Option<u8>,
    confidence: u8,
}

fn alloc_spec() -> impl Strategy<Value = AllocSpec> {
    (
        -300i64..1200,
        prop::option::weighted(0.8, 0i64..900),
        1i128..=16,
        1i128..=8,
        prop::collection::vec(0usize..3, 0..4),
        prop::option::of(0u8..3),
        0u8..3,
    )
        .prop_map(|(start, len, num, den, devices, tenant, confidence)| AllocSpec {
            start,
            len,
            num,
            den,
            devices,
            tenant,
            confidence,
        })
}

fn sample_spec() -> impl Strategy<Value = (usize, i64, i64, u16)> {
    (0usize..3, -300i64..1500, 1i64..240, 0u16..=1000)
}

fn build(specs: &[AllocSpec], samples: &[(usize, i64, i64, u16)]) -> (Vec<HeldAllocation>, Vec<ActivitySample>) {
    let allocations = specs
        .iter()
        .enumerate()
        .map(|(i, s)| HeldAllocation {
            id: format!("a{}", i % 5),
            tenant: s.tenant.map(|t| TenantId::from_uuid(Uuid::from_u128(u128::from(t)))),
            gpu_class: None,
            fraction: fr(s.num, s.den),
            start: t(s.start),
            end: s.len.map(|l| t(s.start + l)),
            devices: s.devices.iter().map(|&d| GPU[d].to_string()).collect(),
            confidence: [Confidence::Exact, Confidence::Modeled, Confidence::Estimated][usize::from(s.confidence)],
        })
        .collect();
    let samples = samples
        .iter()
        .map(|&(g, start, len, permille)| ActivitySample {
            gpu_uuid: GPU[g].into(),
            window: Interval::new(t(start), t(start + len)).unwrap(),
            utilization: Utilization::from_permille(permille).unwrap(),
        })
        .collect();
    (allocations, samples)
}

fn options(threshold_pct: u8, min_idle_minutes: i64) -> UtilizationOptions {
    // A one-day "period" keeps clipping in play at both ends.
    UtilizationOptions::new(Interval::new(t(0), t(24 * 60)).unwrap())
        .with_idle_threshold_pct(f64::from(threshold_pct))
        .unwrap()
        .with_min_idle(time::Duration::minutes(min_idle_minutes))
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bounded_by_what_was_allocated(
        specs in prop::collection::vec(alloc_spec(), 0..8),
        samples in prop::collection::vec(sample_spec(), 0..30),
        threshold in 0u8..=100,
        min_idle in 0i64..120,
    ) {
        let (allocations, samples) = build(&specs, &samples);
        let report = analyze_utilization(&allocations, &samples, &options(threshold, min_idle)).unwrap();
        for row in &report.allocations {
            prop_assert!(row.active_equivalent_gpu_hours <= row.observed_gpu_hours);
            prop_assert!(row.observed_gpu_hours <= row.allocated_gpu_hours);
            prop_assert!(row.idle_gpu_hours <= row.observed_gpu_hours);
            prop_assert!(row.idle_gpu_hours <= row.allocated_gpu_hours);
            prop_assert!(row.active_equivalent_gpu_hours <= row.allocated_gpu_hours);
            prop_assert_eq!(row.idle, !row.idle_stretches.is_empty());
            prop_assert_eq!(row.idle, !row.idle_gpu_hours.is_zero());
            for pair in row.idle_stretches.windows(2) {
                prop_assert!(pair[0].end() < pair[1].start());
            }
            for s in &row.idle_stretches {
                prop_assert!(s.duration_nanos() >= i128::from(min_idle) * 60_000_000_000);
                prop_assert!(row.held.start() <= s.start() && s.end() <= row.held.end());
            }
        }
        // Per-tenant sums are exactly the sums of the rows.
        let mut total = Fraction::ZERO;
        for s in &report.tenants {
            total = total.checked_add(s.idle_gpu_hours).unwrap();
        }
        let mut rows = Fraction::ZERO;
        for r in &report.allocations {
            rows = rows.checked_add(r.idle_gpu_hours).unwrap();
        }
        prop_assert_eq!(total, rows);
        let count: u64 = report.tenants.iter().map(|s| s.allocations).sum();
        prop_assert_eq!(count, report.allocations.len() as u64);
    }

    #[test]
    fn independent_of_input_order(
        specs in prop::collection::vec(alloc_spec(), 0..8),
        samples in prop::collection::vec(sample_spec(), 0..30),
        threshold in 0u8..=100,
        min_idle in 0i64..120,
        seed in any::<u64>(),
    ) {
        let (allocations, samples) = build(&specs, &samples);
        let opts = options(threshold, min_idle);
        let expected = analyze_utilization(&allocations, &samples, &opts).unwrap();

        // Deterministic shuffles (Fisher–Yates with a small LCG), and device lists reversed.
        let mut state = seed | 1;
        let mut next = |bound: usize| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % bound
        };
        let mut a2 = allocations.clone();
        for i in (1..a2.len()).rev() {
            a2.swap(i, next(i + 1));
        }
        for a in &mut a2 {
            a.devices.reverse();
        }
        let mut s2 = samples.clone();
        for i in (1..s2.len()).rev() {
            s2.swap(i, next(i + 1));
        }
        prop_assert_eq!(analyze_utilization(&a2, &s2, &opts).unwrap(), expected);
    }

    /// What the read model's month summary runs: the timelines built sample by sample, no allocation rows kept —
    /// the same per-tenant sums as the full analysis.
    #[test]
    fn summary_without_rows_has_the_same_tenants(
        specs in prop::collection::vec(alloc_spec(), 0..8),
        samples in prop::collection::vec(sample_spec(), 0..30),
        threshold in 0u8..=100,
        min_idle in 0i64..120,
    ) {
        let (allocations, samples) = build(&specs, &samples);
        let opts = options(threshold, min_idle);
        let full = analyze_utilization(&allocations, &samples, &opts).unwrap();
        let mut timelines = DeviceTimelines::new();
        for s in &samples {
            timelines.push(&s.gpu_uuid, s.window, s.utilization).unwrap();
        }
        let summary = analyze_timelines(&allocations, timelines, &opts, false).unwrap();
        prop_assert!(summary.allocations.is_empty());
        prop_assert_eq!(summary.tenants, full.tenants);
    }
}
