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
    /// Energy per device and window.
    #[serde(default)]
    pub energy: Vec<EnergyRecord>,
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

/// Energy a device used in a window.
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
