//! Utilization analytics: idle reservations and active-equivalent GPU-hours.
//!
//! **Analytics only, never money** (DESIGN.md, "Four measurements"): a reserved GPU costs its holder even when
//! idle, so nothing here feeds a charge. The numbers sit *beside* allocated GPU-hours to show how much of what
//! was held was used.
//!
//! Definitions, for one allocation `a` holding `fraction` of a GPU on devices `D` (|D| = n), clipped to the
//! period as `[s, e)`:
//! - **allocated GPU-hours** = `fraction × (e − s)`, exactly as the ledger counts it.
//! - **active-equivalent GPU-hours** = `fraction × (1/n) × Σ_{d ∈ D} Σ_{window w on d} overlap(w, [s, e)) × u(w)`,
//!   where `u(w)` is the window's mean utilization as a fraction of 1 (see [`Utilization`]). Time without
//!   telemetry contributes nothing, so this never exceeds the allocated GPU-hours.
//! - **observed hours** = `(1/n) × Σ_{d ∈ D} |time of [s, e) covered by d's windows|`: how much of the
//!   allocation telemetry saw. An allocation with no telemetry has 0 observed hours and is never idle, so a
//!   reader can tell "no data" from "idle". **Observed GPU-hours** = `fraction × observed hours`.
//! - **idle stretches**: the maximal runs of time in `[s, e)` during which *every* device of the allocation
//!   has telemetry whose utilization is strictly below the threshold, that last at least the minimum idle
//!   duration. Runs break where a window is at or above the threshold and where telemetry is missing (idle is
//!   only ever claimed for observed time). **Idle GPU-hours** = `fraction × Σ stretch lengths`; the allocation
//!   is **idle** when it has at least one stretch.
//!
//! Samples:
//! - Utilization percentages arrive as floats (`f32` from PostgreSQL `real`, `f64` from the wire). They are
//!   converted once to an exact per-mille integer ([`Utilization`]) by rounding the number's shortest decimal
//!   form half-up to one decimal place of a percent, so the results are exact rationals and deterministic.
//! - Windows of one device that overlap (a re-sent or re-aligned rollup) are made disjoint first: sorted by
//!   (start, end, utilization), each window keeps only the part after the windows before it, so no instant of
//!   a device is counted twice.
//! - **MIG approximation**: telemetry is per physical GPU. Samples of a whole GPU apply to *each* allocation on
//!   that GPU, so a 3/7 MIG slice on a GPU busy at 70% is credited `3/7 × 0.7` per hour even if the work ran in
//!   another slice. Callers resolve MIG device IDs to their parent GPU UUID before calling.
//!
//! Cost: samples are grouped by device and sorted once (`O(S log S)`); each allocation then binary-searches
//! its devices' windows and walks only the windows it overlaps (`O(A × (log S + k))`).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::confidence::Confidence;
use crate::error::DomainError;
use crate::fraction::Fraction;
use crate::ids::{GpuClass, TenantId};
use crate::interval::{Interval, NANOS_PER_HOUR};

/// Default idle threshold: 5.0 % (50 ‰).
pub const DEFAULT_IDLE_THRESHOLD_PERMILLE: u16 = 50;
/// Default minimum length of an idle stretch: one hour, in nanoseconds.
pub const DEFAULT_MIN_IDLE_NANOS: i128 = NANOS_PER_HOUR;

/// A GPU's activity as an exact integer number of per-mille (0.1 percentage point): `0..=1000`.
///
/// Built from a telemetry percentage by [`Utilization::from_pct`]: values below 0 become 0, values above 100
/// become 100 %, and everything else is rounded half-up at one decimal place of a percent, taken from the
/// float's shortest decimal representation (so `4.95_f32` is 4.95 %, rounded to 5.0 % = 50 ‰, although the
/// binary value is slightly below 4.95).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct Utilization(u16);

impl Utilization {
    /// Units per whole GPU: the value is per-mille.
    pub const SCALE: u16 = 1000;
    /// No activity.
    pub const ZERO: Utilization = Utilization(0);
    /// Fully busy.
    pub const FULL: Utilization = Utilization(Self::SCALE);

    /// From per-mille; rejects values above 1000.
    pub fn from_permille(permille: u16) -> Result<Self, DomainError> {
        if permille > Self::SCALE {
            return Err(DomainError::invalid("utilization", format!("{permille} per-mille is above 1000")));
        }
        Ok(Self(permille))
    }

    /// From a percentage as sampled (`f64`); `None` for NaN or infinity (no usable sample).
    pub fn from_pct(pct: f64) -> Option<Self> {
        if !pct.is_finite() {
            return None;
        }
        // Below 0.04 % everything rounds to 0; this also keeps the decimal form short.
        if pct < 0.04 {
            return Some(Self::ZERO);
        }
        if pct >= 100.0 {
            return Some(Self::FULL);
        }
        permille_from_decimal(&pct.to_string()).map(Self)
    }

    /// From a percentage stored as `f32` (PostgreSQL `real`): its shortest `f32` decimal form is used, so the
    /// value a person reads in the database is the value rounded.
    pub fn from_pct_f32(pct: f32) -> Option<Self> {
        if !pct.is_finite() {
            return None;
        }
        if pct < 0.04 {
            return Some(Self::ZERO);
        }
        if pct >= 100.0 {
            return Some(Self::FULL);
        }
        permille_from_decimal(&pct.to_string()).map(Self)
    }

    /// The value in per-mille.
    pub const fn permille(self) -> u16 {
        self.0
    }

    /// The value as an exact fraction of one GPU (`permille / 1000`).
    pub fn as_fraction(self) -> Result<Fraction, DomainError> {
        Fraction::new(i128::from(self.0), i128::from(Self::SCALE))
    }
}

impl TryFrom<u16> for Utilization {
    type Error = DomainError;

    fn try_from(value: u16) -> Result<Self, Self::Error> {
        Self::from_permille(value)
    }
}

impl From<Utilization> for u16 {
    fn from(u: Utilization) -> Self {
        u.0
    }
}

/// Rounds a plain decimal `"12.345"` (no sign, no exponent, value in `[0, 100)`) half-up to per-mille.
fn permille_from_decimal(s: &str) -> Option<u16> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let int: u32 = int.parse().ok()?;
    let mut digits = frac.bytes().map(|b| u32::from(b - b'0'));
    let tenths = digits.next().unwrap_or(0);
    let round_up = u32::from(digits.next().unwrap_or(0) >= 5);
    let permille = int.checked_mul(10)?.checked_add(tenths)?.checked_add(round_up)?;
    u16::try_from(permille.min(u32::from(Utilization::SCALE))).ok()
}

/// Thresholds and the period of an utilization analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UtilizationOptions {
    /// The time analysed; allocations are clipped to it (an open allocation runs to its end). A caller
    /// analysing the current month passes `[month start, now)`.
    pub period: Interval,
    /// A window is idle when its utilization is strictly below this.
    pub idle_threshold: Utilization,
    /// An idle run counts as a stretch only if it lasts at least this many nanoseconds.
    pub min_idle_nanos: i128,
}

impl UtilizationOptions {
    /// The defaults (5 % threshold, one hour minimum) over `period`.
    pub fn new(period: Interval) -> Self {
        Self {
            period,
            idle_threshold: Utilization(DEFAULT_IDLE_THRESHOLD_PERMILLE),
            min_idle_nanos: DEFAULT_MIN_IDLE_NANOS,
        }
    }

    /// Sets the idle threshold from a percentage in `0..=100` (rounded to per-mille like a sample).
    pub fn with_idle_threshold_pct(mut self, pct: f64) -> Result<Self, DomainError> {
        if !pct.is_finite() || !(0.0..=100.0).contains(&pct) {
            return Err(DomainError::invalid("idle_threshold_pct", format!("{pct} is not a percentage in 0..=100")));
        }
        self.idle_threshold = Utilization::from_pct(pct)
            .ok_or_else(|| DomainError::invalid("idle_threshold_pct", format!("{pct} is not a number")))?;
        Ok(self)
    }

    /// Sets the minimum idle duration; rejects negative durations.
    pub fn with_min_idle(mut self, min_idle: time::Duration) -> Result<Self, DomainError> {
        let nanos = min_idle.whole_nanoseconds();
        if nanos < 0 {
            return Err(DomainError::invalid("min_idle", format!("{min_idle} is negative")));
        }
        self.min_idle_nanos = nanos;
        Ok(self)
    }
}

/// One allocation as the analysis needs it: who held how much of which devices, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldAllocation {
    /// The allocation (interval) ID, for tracing a row back to its evidence.
    pub id: String,
    /// The tenant charged for it, when known.
    pub tenant: Option<TenantId>,
    /// The GPU pricing class, when known.
    pub gpu_class: Option<GpuClass>,
    /// GPU-equivalents held in total (e.g. 2 for two whole GPUs, 3/7 for a `3g` MIG slice).
    pub fraction: Fraction,
    /// Start of the hold.
    #[serde(with = "time::serde::rfc3339")]
    pub start: OffsetDateTime,
    /// End of the hold; `None` while still held (clipped to the period's end).
    #[serde(with = "time::serde::rfc3339::option")]
    pub end: Option<OffsetDateTime>,
    /// Physical GPU UUIDs the allocation holds (MIG devices resolved to their parent GPU); duplicates ignored.
    pub devices: Vec<String>,
    /// Confidence of the allocation fact, carried to the row.
    pub confidence: Confidence,
}

/// A rolled-up telemetry window of one physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivitySample {
    /// The physical GPU UUID.
    pub gpu_uuid: String,
    /// The window `[start, end)` the value covers.
    pub window: Interval,
    /// Mean utilization over the window.
    pub utilization: Utilization,
}

/// Utilization of one allocation within the period. Ordered by ID, then held interval, then the other fields.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AllocationUtilization {
    /// The allocation ID.
    pub id: String,
    /// The part of the allocation inside the period.
    pub held: Interval,
    /// The tenant, when known.
    pub tenant: Option<TenantId>,
    /// The GPU pricing class, when known.
    pub gpu_class: Option<GpuClass>,
    /// GPU-equivalents held.
    pub fraction: Fraction,
    /// The allocation's confidence.
    pub confidence: Confidence,
    /// `fraction × held hours`.
    pub allocated_gpu_hours: Fraction,
    /// `fraction × Σ overlap × utilization`, averaged over the devices.
    pub active_equivalent_gpu_hours: Fraction,
    /// Wall-clock hours covered by telemetry, averaged over the devices.
    pub observed_hours: Fraction,
    /// `fraction × observed_hours`.
    pub observed_gpu_hours: Fraction,
    /// `fraction × Σ idle stretch lengths`.
    pub idle_gpu_hours: Fraction,
    /// Whether there is at least one idle stretch.
    pub idle: bool,
    /// The idle stretches, in time order.
    pub idle_stretches: Vec<Interval>,
}

/// The sum of one tenant's allocation rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUtilization {
    /// The tenant; `None` groups the allocations without one.
    pub tenant: Option<TenantId>,
    /// Number of allocation rows.
    pub allocations: u64,
    /// Number of rows flagged idle.
    pub idle_allocations: u64,
    /// Σ allocated GPU-hours.
    pub allocated_gpu_hours: Fraction,
    /// Σ active-equivalent GPU-hours.
    pub active_equivalent_gpu_hours: Fraction,
    /// Σ observed GPU-hours.
    pub observed_gpu_hours: Fraction,
    /// Σ idle GPU-hours.
    pub idle_gpu_hours: Fraction,
    /// Weakest confidence of the rows.
    pub confidence: Confidence,
}

/// The result of [`analyze_utilization`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UtilizationReport {
    /// One row per allocation overlapping the period, sorted (see [`AllocationUtilization`]).
    pub allocations: Vec<AllocationUtilization>,
    /// One row per tenant (`None` first, then by tenant ID).
    pub tenants: Vec<TenantUtilization>,
}

/// A device's telemetry as a disjoint, sorted timeline (nanoseconds since the Unix epoch; `i64` covers 1677–2262
/// and keeps a month of a large fleet's device-hours at 24 bytes each).
#[derive(Debug, Clone, Copy)]
struct Segment {
    start: i64,
    end: i64,
    permille: u16,
}

/// Telemetry indexed by device for [`analyze_timelines`]: built one sample at a time, so a month of a large fleet
/// (millions of device-hours) never exists as [`ActivitySample`]s, each with its own copy of the device's ID.
#[derive(Debug, Clone, Default)]
pub struct DeviceTimelines {
    by_device: HashMap<String, Vec<Segment>>,
}

impl DeviceTimelines {
    /// No telemetry yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds what `device` measured over `window` (an empty window adds nothing). Errors: a window outside the
    /// years 1677–2262.
    pub fn push(&mut self, device: &str, window: Interval, utilization: Utilization) -> Result<(), DomainError> {
        if window.is_empty() {
            return Ok(());
        }
        let ns = |t: OffsetDateTime| {
            i64::try_from(t.unix_timestamp_nanos())
                .map_err(|_| DomainError::invalid("window", format!("{t} is outside the years 1677–2262")))
        };
        let segment = Segment { start: ns(window.start())?, end: ns(window.end())?, permille: utilization.permille() };
        match self.by_device.get_mut(device) {
            Some(v) => v.push(segment),
            None => {
                self.by_device.insert(device.to_string(), vec![segment]);
            }
        }
        Ok(())
    }

    /// Adds samples.
    pub fn extend(&mut self, samples: &[ActivitySample]) -> Result<(), DomainError> {
        for s in samples {
            self.push(&s.gpu_uuid, s.window, s.utilization)?;
        }
        Ok(())
    }

    /// Sorted per device, overlaps trimmed: each window keeps only what lies after everything before it.
    fn sealed(mut self) -> HashMap<String, Vec<Segment>> {
        for segments in self.by_device.values_mut() {
            segments.sort_unstable_by_key(|s| (s.start, s.end, s.permille));
            let mut cursor = i64::MIN;
            segments.retain_mut(|s| {
                s.start = s.start.max(cursor);
                let keep = s.start < s.end;
                cursor = cursor.max(s.end);
                keep
            });
            segments.shrink_to_fit();
        }
        self.by_device
    }
}

/// Intersection of two sorted lists of disjoint, non-touching intervals.
fn intersect(a: &[(i128, i128)], b: &[(i128, i128)]) -> Vec<(i128, i128)> {
    let mut out: Vec<(i128, i128)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while let (Some(&(a0, a1)), Some(&(b0, b1))) = (a.get(i), b.get(j)) {
        let (lo, hi) = (a0.max(b0), a1.min(b1));
        if lo < hi {
            match out.last_mut() {
                Some(last) if last.1 == lo => last.1 = hi,
                _ => out.push((lo, hi)),
            }
        }
        if a1 < b1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

fn instant(nanos: i128) -> Result<OffsetDateTime, DomainError> {
    OffsetDateTime::from_unix_timestamp_nanos(nanos).map_err(|e| DomainError::invalid("interval", e.to_string()))
}

fn overflow() -> DomainError {
    DomainError::overflow("utilization")
}

/// `fraction × numer / (per × NANOS_PER_HOUR)`, exactly: one reduction when the products fit, the
/// cross-reducing [`Fraction`] operations when they do not.
fn gpu_hours(fraction: Fraction, numer: i128, per: i128) -> Result<Fraction, DomainError> {
    let den = per.checked_mul(NANOS_PER_HOUR).ok_or_else(overflow)?;
    match (fraction.numer().checked_mul(numer), fraction.denom().checked_mul(den)) {
        (Some(n), Some(d)) => Fraction::new(n, d),
        _ => fraction.checked_mul(Fraction::new(numer, den)?),
    }
}

fn analyze_one(
    a: &HeldAllocation,
    index: &HashMap<String, Vec<Segment>>,
    options: &UtilizationOptions,
) -> Result<Option<AllocationUtilization>, DomainError> {
    if let Some(end) = a.end
        && end < a.start
    {
        return Err(DomainError::invalid("allocation", format!("{}: end {end} is before start {}", a.id, a.start)));
    }
    let period = options.period;
    let start = a.start.max(period.start());
    let end = a.end.map_or(period.end(), |e| e.min(period.end()));
    if start >= end {
        return Ok(None);
    }
    let held = Interval::new(start, end)?;
    let (s, e) = (start.unix_timestamp_nanos(), end.unix_timestamp_nanos());

    let mut devices: Vec<&str> = a.devices.iter().map(String::as_str).collect();
    devices.sort_unstable();
    devices.dedup();

    let threshold = options.idle_threshold.permille();
    let mut active: i128 = 0;
    let mut covered: i128 = 0;
    let mut idle_runs: Option<Vec<(i128, i128)>> = None;
    for device in &devices {
        let mut below: Vec<(i128, i128)> = Vec::new();
        if let Some(segments) = index.get(*device) {
            let first = segments.partition_point(|seg| i128::from(seg.end) <= s);
            for seg in segments[first..].iter().take_while(|seg| i128::from(seg.start) < e) {
                let (lo, hi) = (i128::from(seg.start).max(s), i128::from(seg.end).min(e));
                let overlap = hi - lo;
                active = overlap
                    .checked_mul(i128::from(seg.permille))
                    .and_then(|x| active.checked_add(x))
                    .ok_or_else(overflow)?;
                covered = covered.checked_add(overlap).ok_or_else(overflow)?;
                if seg.permille < threshold {
                    match below.last_mut() {
                        Some(last) if last.1 == lo => last.1 = hi,
                        _ => below.push((lo, hi)),
                    }
                }
            }
        }
        idle_runs = Some(match idle_runs {
            None => below,
            Some(prev) if prev.is_empty() => prev,
            Some(prev) => intersect(&prev, &below),
        });
    }
    let stretches: Vec<(i128, i128)> = idle_runs
        .unwrap_or_default()
        .into_iter()
        .filter(|(lo, hi)| hi > lo && hi - lo >= options.min_idle_nanos)
        .collect();
    let idle_nanos = stretches.iter().try_fold(0i128, |acc, (lo, hi)| acc.checked_add(hi - lo)).ok_or_else(overflow)?;
    let idle_stretches =
        stretches.iter().map(|&(lo, hi)| Interval::new(instant(lo)?, instant(hi)?)).collect::<Result<Vec<_>, _>>()?;

    let n = i128::try_from(devices.len()).map_err(|_| overflow())?;
    let (active_gpu_hours, observed_hours, observed_gpu_hours) = if n == 0 {
        (Fraction::ZERO, Fraction::ZERO, Fraction::ZERO)
    } else {
        let scaled = n.checked_mul(i128::from(Utilization::SCALE)).ok_or_else(overflow)?;
        (
            gpu_hours(a.fraction, active, scaled)?,
            gpu_hours(Fraction::ONE, covered, n)?,
            gpu_hours(a.fraction, covered, n)?,
        )
    };
    Ok(Some(AllocationUtilization {
        id: a.id.clone(),
        held,
        tenant: a.tenant,
        gpu_class: a.gpu_class.clone(),
        fraction: a.fraction,
        confidence: a.confidence,
        allocated_gpu_hours: gpu_hours(a.fraction, e - s, 1)?,
        active_equivalent_gpu_hours: active_gpu_hours,
        observed_hours,
        observed_gpu_hours,
        idle_gpu_hours: gpu_hours(a.fraction, idle_nanos, 1)?,
        idle: !idle_stretches.is_empty(),
        idle_stretches,
    }))
}

/// Computes each allocation's allocated, active-equivalent, observed and idle GPU-hours within the period, and
/// their sums per tenant (see the module documentation for the definitions).
///
/// Allocations that do not overlap the period are left out. Results do not depend on the order of either input.
/// Errors: an allocation ending before it starts, or arithmetic overflow.
pub fn analyze_utilization(
    allocations: &[HeldAllocation],
    samples: &[ActivitySample],
    options: &UtilizationOptions,
) -> Result<UtilizationReport, DomainError> {
    let mut timelines = DeviceTimelines::new();
    timelines.extend(samples)?;
    analyze_timelines(allocations, timelines, options, true)
}

/// [`analyze_utilization`] over telemetry already indexed by device. With `rows` false the report's `allocations`
/// stay empty (the per-tenant sums are the same): a month's summary of a large fleet need not hold a row per
/// allocation.
pub fn analyze_timelines(
    allocations: &[HeldAllocation],
    timelines: DeviceTimelines,
    options: &UtilizationOptions,
    rows: bool,
) -> Result<UtilizationReport, DomainError> {
    let index = timelines.sealed();
    let mut kept = Vec::with_capacity(if rows { allocations.len() } else { 0 });
    let mut tenants: BTreeMap<Option<TenantId>, TenantUtilization> = BTreeMap::new();
    for a in allocations {
        let Some(row) = analyze_one(a, &index, options)? else { continue };
        let t = tenants.entry(row.tenant).or_insert_with(|| TenantUtilization {
            tenant: row.tenant,
            allocations: 0,
            idle_allocations: 0,
            allocated_gpu_hours: Fraction::ZERO,
            active_equivalent_gpu_hours: Fraction::ZERO,
            observed_gpu_hours: Fraction::ZERO,
            idle_gpu_hours: Fraction::ZERO,
            confidence: Confidence::Exact,
        });
        t.allocations += 1;
        t.idle_allocations += u64::from(row.idle);
        t.allocated_gpu_hours = t.allocated_gpu_hours.checked_add(row.allocated_gpu_hours)?;
        t.active_equivalent_gpu_hours = t.active_equivalent_gpu_hours.checked_add(row.active_equivalent_gpu_hours)?;
        t.observed_gpu_hours = t.observed_gpu_hours.checked_add(row.observed_gpu_hours)?;
        t.idle_gpu_hours = t.idle_gpu_hours.checked_add(row.idle_gpu_hours)?;
        t.confidence = t.confidence.combine(row.confidence);
        if rows {
            kept.push(row);
        }
    }
    kept.sort_unstable();
    Ok(UtilizationReport { allocations: kept, tenants: tenants.into_values().collect() })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::datetime;

    const GPU_A: &str = "GPU-00000000-0000-0000-0000-00000000000a";
    const GPU_B: &str = "GPU-00000000-0000-0000-0000-00000000000b";

    fn fr(n: i128, d: i128) -> Fraction {
        Fraction::new(n, d).unwrap()
    }

    fn h(hours: i64) -> OffsetDateTime {
        datetime!(2026-10-01 00:00 UTC) + time::Duration::hours(hours)
    }

    fn m(minutes: i64) -> OffsetDateTime {
        datetime!(2026-10-01 00:00 UTC) + time::Duration::minutes(minutes)
    }

    fn day() -> UtilizationOptions {
        UtilizationOptions::new(Interval::new(h(0), h(24)).unwrap())
    }

    fn alloc(
        id: &str,
        fraction: Fraction,
        start: OffsetDateTime,
        end: Option<OffsetDateTime>,
        devices: &[&str],
    ) -> HeldAllocation {
        HeldAllocation {
            id: id.into(),
            tenant: None,
            gpu_class: None,
            fraction,
            start,
            end,
            devices: devices.iter().map(|d| d.to_string()).collect(),
            confidence: Confidence::Exact,
        }
    }

    fn sample(gpu: &str, from: OffsetDateTime, to: OffsetDateTime, pct: f64) -> ActivitySample {
        ActivitySample {
            gpu_uuid: gpu.into(),
            window: Interval::new(from, to).unwrap(),
            utilization: Utilization::from_pct(pct).unwrap(),
        }
    }

    #[test]
    fn percent_to_permille_is_exact_and_half_up() {
        let p = |x: f64| Utilization::from_pct(x).map(Utilization::permille);
        assert_eq!(p(0.0), Some(0));
        assert_eq!(p(-3.0), Some(0));
        assert_eq!(p(-0.0), Some(0));
        assert_eq!(p(0.04), Some(0));
        assert_eq!(p(0.05), Some(1));
        assert_eq!(p(2.0), Some(20));
        assert_eq!(p(4.95), Some(50));
        assert_eq!(p(4.949_999), Some(49));
        assert_eq!(p(70.0), Some(700));
        assert_eq!(p(99.96), Some(1000));
        assert_eq!(p(100.0), Some(1000));
        assert_eq!(p(250.0), Some(1000));
        assert_eq!(p(1e-300), Some(0));
        assert_eq!(p(f64::NAN), None);
        assert_eq!(p(f64::INFINITY), None);
        // The f32 a database `real` holds for 4.95 is 4.9499998…; its shortest form is "4.95".
        assert_eq!(Utilization::from_pct_f32(4.95).map(Utilization::permille), Some(50));
        assert_eq!(Utilization::from_pct_f32(33.333_33).map(Utilization::permille), Some(333));
        assert_eq!(Utilization::from_pct_f32(f32::NAN), None);
        assert_eq!(Utilization::from_permille(700).unwrap().as_fraction().unwrap(), fr(7, 10));
        assert!(Utilization::from_permille(1001).is_err());
    }

    #[test]
    fn options_validate() {
        let o = day();
        assert_eq!(o.idle_threshold.permille(), 50);
        assert_eq!(o.min_idle_nanos, NANOS_PER_HOUR);
        assert_eq!(o.with_idle_threshold_pct(12.5).unwrap().idle_threshold.permille(), 125);
        assert!(o.with_idle_threshold_pct(-1.0).is_err());
        assert!(o.with_idle_threshold_pct(100.5).is_err());
        assert!(o.with_idle_threshold_pct(f64::NAN).is_err());
        assert_eq!(o.with_min_idle(time::Duration::minutes(30)).unwrap().min_idle_nanos, NANOS_PER_HOUR / 2);
        assert!(o.with_min_idle(time::Duration::minutes(-1)).is_err());
    }

    #[test]
    fn overlapping_windows_count_once() {
        let samples = [sample(GPU_A, h(0), h(2), 50.0), sample(GPU_A, h(1), h(3), 100.0)];
        let r =
            analyze_utilization(&[alloc("a", Fraction::ONE, h(0), Some(h(3)), &[GPU_A])], &samples, &day()).unwrap();
        let row = &r.allocations[0];
        assert_eq!(row.observed_hours, fr(3, 1));
        // 2 h at 50 % then the remaining 1 h at 100 %.
        assert_eq!(row.active_equivalent_gpu_hours, fr(2, 1));
    }

    #[test]
    fn multi_gpu_averages_and_is_idle_only_when_every_device_is() {
        let samples = [sample(GPU_A, h(0), h(4), 1.0), sample(GPU_B, h(0), h(2), 1.0), sample(GPU_B, h(2), h(4), 90.0)];
        let a = alloc("a", fr(2, 1), h(0), Some(h(4)), &[GPU_A, GPU_B, GPU_A]);
        let r = analyze_utilization(&[a], &samples, &day()).unwrap();
        let row = &r.allocations[0];
        assert_eq!(row.allocated_gpu_hours, fr(8, 1));
        // 2 × ½ × (4 h × 0.01 + 2 h × 0.01 + 2 h × 0.9) = 1.86
        assert_eq!(row.active_equivalent_gpu_hours, fr(186, 100));
        assert_eq!(row.observed_hours, fr(4, 1));
        assert_eq!(row.idle_stretches, vec![Interval::new(h(0), h(2)).unwrap()]);
        assert_eq!(row.idle_gpu_hours, fr(4, 1));
    }

    #[test]
    fn a_missing_window_breaks_an_idle_run() {
        let samples = [sample(GPU_A, m(0), m(50), 0.0), sample(GPU_A, m(51), m(100), 0.0)];
        let r =
            analyze_utilization(&[alloc("a", Fraction::ONE, h(0), Some(h(2)), &[GPU_A])], &samples, &day()).unwrap();
        assert!(!r.allocations[0].idle);
        assert_eq!(r.allocations[0].observed_hours, fr(99, 60));
        let half_hour = day().with_min_idle(time::Duration::minutes(30)).unwrap();
        let r = analyze_utilization(&[alloc("a", Fraction::ONE, h(0), Some(h(2)), &[GPU_A])], &samples, &half_hour)
            .unwrap();
        assert_eq!(r.allocations[0].idle_stretches.len(), 2);
        assert_eq!(r.allocations[0].idle_gpu_hours, fr(99, 60));
    }

    #[test]
    fn contiguous_windows_join_and_threshold_is_strict() {
        let samples =
            [sample(GPU_A, m(0), m(30), 4.9), sample(GPU_A, m(30), m(60), 0.0), sample(GPU_A, m(60), m(90), 5.0)];
        let r =
            analyze_utilization(&[alloc("a", Fraction::ONE, h(0), Some(h(2)), &[GPU_A])], &samples, &day()).unwrap();
        assert_eq!(r.allocations[0].idle_stretches, vec![Interval::new(m(0), m(60)).unwrap()]);
        assert_eq!(r.allocations[0].idle_gpu_hours, Fraction::ONE);
    }

    #[test]
    fn allocations_outside_the_period_and_reversed_ones() {
        let outside = alloc("x", Fraction::ONE, h(30), None, &[GPU_A]);
        assert!(analyze_utilization(&[outside], &[], &day()).unwrap().allocations.is_empty());
        let reversed = alloc("r", Fraction::ONE, h(3), Some(h(2)), &[GPU_A]);
        assert!(analyze_utilization(&[reversed], &[], &day()).is_err());
    }

    #[test]
    fn tenants_are_summed() {
        let t = TenantId::from_uuid(uuid::Uuid::from_u128(7));
        let mut a = alloc("a", Fraction::ONE, h(0), Some(h(2)), &[GPU_A]);
        a.tenant = Some(t);
        let mut b = alloc("b", fr(1, 2), h(0), Some(h(2)), &[GPU_B]);
        b.tenant = Some(t);
        b.confidence = Confidence::Modeled;
        let c = alloc("c", Fraction::ONE, h(0), Some(h(1)), &[]);
        let samples = [sample(GPU_A, h(0), h(2), 0.0), sample(GPU_B, h(0), h(2), 50.0)];
        let r = analyze_utilization(&[c, b, a], &samples, &day()).unwrap();
        assert_eq!(r.allocations.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(r.tenants.len(), 2);
        assert_eq!(r.tenants[0].tenant, None);
        assert_eq!(r.tenants[0].observed_gpu_hours, Fraction::ZERO);
        let s = &r.tenants[1];
        assert_eq!((s.allocations, s.idle_allocations), (2, 1));
        assert_eq!(s.allocated_gpu_hours, fr(3, 1));
        assert_eq!(s.active_equivalent_gpu_hours, fr(1, 2));
        assert_eq!(s.observed_gpu_hours, fr(3, 1));
        assert_eq!(s.idle_gpu_hours, fr(2, 1));
        assert_eq!(s.confidence, Confidence::Modeled);
    }
}
