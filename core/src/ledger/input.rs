//! What a period's ledger is computed from: the [`LedgerInput`] and the records it holds.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Work;
use crate::{
    confidence::Confidence,
    decimal::Decimal,
    fraction::Fraction,
    ids::{DepartmentId, TenantId},
    interval::Period,
    policy::CostPolicy,
};

/// Everything a period's ledger is computed from; also the `inputs` of an evidence bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerInput {
    /// The month.
    pub period: Period,
    /// The approved policy that prices it.
    pub policy: CostPolicy,
    /// Content hash of the approved inventory the allocation fractions came from.
    pub inventory_version: String,
    /// Departments.
    pub departments: Vec<DepartmentRef>,
    /// Tenants.
    pub tenants: Vec<TenantRef>,
    /// Physical GPUs per class (for the cost of unallocated capacity).
    #[serde(default)]
    pub capacity: Vec<ClassCapacity>,
    /// Guaranteed capacity.
    #[serde(default)]
    pub quotas: Vec<QuotaRecord>,
    /// Who held which capacity, when (split at ownership changes).
    #[serde(default)]
    pub allocations: Vec<AllocationRecord>,
    /// Energy per device: its hours (bundle format 2) or windows (format 1), compact (see [`DeviceEnergy`]).
    #[serde(default, deserialize_with = "energy_any_format")]
    pub energy: Vec<DeviceEnergy>,
    /// Productive work of shared endpoints per tenant (period totals).
    #[serde(default)]
    pub service_usage: Vec<UsageRecord>,
    /// What shared endpoints' model servers counted themselves (period totals per endpoint and model, from the
    /// agent's scrapes). Work beyond the tenants' usage is the endpoint's unattributed remainder: its share of the
    /// endpoint's cost joins the overhead pool instead of being split among the tenants that were attributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_totals: Vec<EndpointTotal>,
    /// Credits and corrections that land in this period.
    #[serde(default)]
    pub adjustments: Vec<AdjustmentRecord>,
    /// The month's cloud bill per GPU class, for classes the policy prices at actual cost (from the month's
    /// imported FOCUS bill: the matched nodes' EffectiveCost). Absent when empty, so earlier bundles hash as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actual_costs: Vec<ActualCost>,
    /// The month's instants when they are not UTC's calendar month: the organization's own time zone (local midnight
    /// of the 1st to local midnight of the next 1st; a DST month has 743 or 745 hours), or a month that continues
    /// where the previous closed month ended after a change of zone. Absent for a UTC month, so earlier bundles
    /// hash as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<MonthBounds>,
}

/// A month's instants in the organization's calendar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonthBounds {
    /// IANA time zone (`Asia/Tokyo`).
    pub time_zone: String,
    /// First instant.
    #[serde(with = "time::serde::rfc3339")]
    pub starts_at: OffsetDateTime,
    /// First instant after it.
    #[serde(with = "time::serde::rfc3339")]
    pub ends_at: OffsetDateTime,
    /// Where the charges begin when not at `starts_at`: the previous month closed at this instant, in the zone it
    /// closed under (the first month after a change of zone; no hour charged twice, none lost).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    pub continues_from: Option<OffsetDateTime>,
}

impl LedgerInput {
    /// The instants the ledger covers: the month in the organization's calendar ([`MonthBounds`]), or UTC's.
    pub fn interval(&self) -> Result<crate::interval::Interval, crate::error::DomainError> {
        match &self.bounds {
            Some(b) => crate::interval::Interval::new(b.continues_from.unwrap_or(b.starts_at), b.ends_at),
            None => self.period.interval(),
        }
    }
}

/// The part of a month's cloud bill that pays for one GPU class: the effective cost of the bill's lines for the nodes
/// holding that class's GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActualCost {
    /// GPU class.
    pub gpu_class: String,
    /// Sum of the matched nodes' EffectiveCost for the month (exact, as the bill wrote it).
    pub cost: Decimal,
    /// How many nodes it came from.
    pub nodes: u32,
}

/// A department.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepartmentRef {
    /// ID.
    pub id: DepartmentId,
    /// Name.
    pub name: String,
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRef {
    /// ID.
    pub id: TenantId,
    /// Name.
    pub name: String,
    /// Department.
    pub department: DepartmentId,
}

/// Number of physical GPUs of a class in the period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCapacity {
    /// GPU class.
    pub gpu_class: String,
    /// GPUs.
    pub gpus: u32,
}

/// Who a quota guarantees capacity to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum QuotaHolder {
    /// One tenant.
    Tenant(TenantId),
    /// A department: its tenants without their own quota for the class share it.
    Department(DepartmentId),
}

/// A guarantee: `gpus` of a class for a validity period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaRecord {
    /// Stable ID (evidence reference).
    pub id: String,
    /// Tenant or department.
    pub holder: QuotaHolder,
    /// GPU class.
    pub gpu_class: String,
    /// Guaranteed GPUs (may be fractional).
    pub gpus: Decimal,
    /// From (inclusive).
    #[serde(with = "time::serde::rfc3339")]
    pub valid_from: OffsetDateTime,
    /// To (exclusive), open when absent.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub valid_to: Option<OffsetDateTime>,
}

/// One allocation (or the part of it under one owner).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationRecord {
    /// Cluster and allocation ID (with a `#n` suffix when split at an ownership change).
    pub id: String,
    /// Owner; `None` when no tenant owned the namespace (never charged, reported).
    pub tenant: Option<TenantId>,
    /// Pricing class; `None` while the inventory has no entry (never charged, reported).
    pub gpu_class: Option<String>,
    /// GPU-equivalents held (exact).
    pub fraction: Fraction,
    /// Start.
    #[serde(with = "time::serde::rfc3339")]
    pub start: OffsetDateTime,
    /// End; open when absent.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub end: Option<OffsetDateTime>,
    /// Confidence of the interval and its fraction.
    pub confidence: Confidence,
    /// Physical GPU UUIDs it held capacity on (parents of MIG instances).
    #[serde(default)]
    pub devices: Vec<String>,
    /// Shared endpoint it serves, if its pods carry the endpoint label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// For a soft share (HAMi, Volcano vGPU, Run:ai, gpushare): which share its fraction is, from the inventory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_basis: Option<crate::sharing::ShareBasis>,
}

/// Energy a device used in a window (bundle format 1's record; [`group_energy`] turns records into devices).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyRecord {
    /// Physical GPU UUID.
    pub gpu_uuid: String,
    /// Window start.
    #[serde(with = "time::serde::rfc3339")]
    pub start: OffsetDateTime,
    /// Window end.
    #[serde(with = "time::serde::rfc3339")]
    pub end: OffsetDateTime,
    /// Joules (whole joules).
    pub joules: u64,
}

/// One span of a device's energy: `[start, end)` in Unix microseconds, whole joules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnergySpan {
    /// Start, Unix µs.
    pub start_us: i64,
    /// End, Unix µs.
    pub end_us: i64,
    /// Joules.
    pub joules: u64,
}

/// A device's energy in the period: its spans by start (one per device-hour from the hourly tier). Written as
/// `{"gpu_uuid", "start", "spans": [[gap_us, length_us, joules], …]}` — each gap after the previous span's end (the
/// first after `start`), so a month of hours is a few bytes an hour once gzipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEnergy {
    /// Physical GPU UUID.
    pub gpu_uuid: String,
    /// Spans, by start.
    pub spans: Vec<EnergySpan>,
}

fn us(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000).unwrap_or(i64::MAX)
}

/// Groups energy records by device, each device's spans by start (devices by UUID).
pub fn group_energy(records: impl IntoIterator<Item = EnergyRecord>) -> Vec<DeviceEnergy> {
    let mut by: std::collections::BTreeMap<String, Vec<EnergySpan>> = std::collections::BTreeMap::new();
    for r in records {
        by.entry(r.gpu_uuid).or_default().push(EnergySpan {
            start_us: us(r.start),
            end_us: us(r.end),
            joules: r.joules,
        });
    }
    by.into_iter()
        .map(|(gpu_uuid, mut spans)| {
            spans.sort_by_key(|s| (s.start_us, s.end_us, s.joules));
            DeviceEnergy { gpu_uuid, spans }
        })
        .collect()
}

#[derive(Serialize, Deserialize)]
struct DeviceEnergyForm {
    gpu_uuid: String,
    #[serde(with = "time::serde::rfc3339")]
    start: OffsetDateTime,
    spans: Vec<(i64, i64, u64)>,
}

impl Serialize for DeviceEnergy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let first = self.spans.first().map_or(0, |f| f.start_us);
        let start =
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(first) * 1_000).map_err(serde::ser::Error::custom)?;
        let mut prev = first;
        let spans = self
            .spans
            .iter()
            .map(|sp| {
                let gap = sp.start_us - prev;
                prev = sp.end_us;
                (gap, sp.end_us - sp.start_us, sp.joules)
            })
            .collect();
        DeviceEnergyForm { gpu_uuid: self.gpu_uuid.clone(), start, spans }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for DeviceEnergy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = DeviceEnergyForm::deserialize(d)?;
        let mut at = us(f.start);
        let mut spans = Vec::with_capacity(f.spans.len());
        for (gap, len, joules) in f.spans {
            let start_us = at.checked_add(gap).ok_or_else(|| serde::de::Error::custom("energy span out of range"))?;
            let end_us =
                start_us.checked_add(len).ok_or_else(|| serde::de::Error::custom("energy span out of range"))?;
            spans.push(EnergySpan { start_us, end_us, joules });
            at = end_us;
        }
        Ok(DeviceEnergy { gpu_uuid: f.gpu_uuid, spans })
    }
}

/// Reads `energy` as either bundle format: a list of devices (format 2) or of window records (format 1).
fn energy_any_format<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<DeviceEnergy>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Item {
        Device(DeviceEnergy),
        Record(EnergyRecord),
    }
    let items = Vec::<Item>::deserialize(d)?;
    let (mut devices, mut records) = (Vec::new(), Vec::new());
    for i in items {
        match i {
            Item::Device(dev) => devices.push(dev),
            Item::Record(r) => records.push(r),
        }
    }
    devices.extend(group_energy(records));
    Ok(devices)
}

/// A tenant's use of a shared endpoint in the period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// Endpoint.
    pub endpoint: String,
    /// Model.
    pub model: String,
    /// Tenant.
    pub tenant: TenantId,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl UsageRecord {
    /// Its requests, input and output tokens.
    pub fn work(&self) -> Work {
        [self.requests, self.input_tokens, self.output_tokens]
    }
}

/// What a shared endpoint's model servers counted for one model in the period (all tenants, attributed or not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointTotal {
    /// Endpoint.
    pub endpoint: String,
    /// Model.
    pub model: String,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl EndpointTotal {
    /// Its requests, input and output tokens.
    pub fn work(&self) -> Work {
        [self.requests, self.input_tokens, self.output_tokens]
    }
}

/// Kind of adjustment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdjustmentKind {
    /// A credit approved after an accepted dispute.
    Credit,
    /// A correction for facts that arrived after their period closed.
    LateData,
}

/// An adjustment landing in this period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdjustmentRecord {
    /// Stable ID.
    pub id: String,
    /// Credit or late data.
    pub kind: AdjustmentKind,
    /// Tenant (none for a department-level line).
    pub tenant: Option<TenantId>,
    /// Department.
    pub department: DepartmentId,
    /// GPU class of the corrected line, if any.
    #[serde(default)]
    pub gpu_class: String,
    /// Signed amount (a credit is negative).
    pub amount: Decimal,
    /// What it corrects (`PERIOD/line_id`, or a dispute).
    pub corrects: String,
    /// Why, in words.
    pub reason: String,
}
