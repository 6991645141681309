//! Cost policies and quotas (`/api/v1/policies/…`, `/api/v1/quotas/…`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `GET /api/v1/policies`: every cost policy version, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyList {
    /// The versions.
    pub items: Vec<PolicyVersion>,
    /// How many versions there are.
    pub total: usize,
}

/// One cost policy version (`GET /api/v1/policies/{version}`, and the answer of creating, editing, approving).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyVersion {
    /// The version number, from 1 per organization.
    pub version: i32,
    /// `draft`, `approved` or `superseded`.
    pub state: String,
    /// The first month it prices (`YYYY-MM`).
    pub effective_from: String,
    /// Its currency (ISO 4217).
    pub currency: String,
    /// The author's note.
    pub note: String,
    /// The policy as stored: currency, classes, energy, services, token weights, overhead (decimals as
    /// strings); the cost model's own document, validated on every write.
    pub document: serde_json::Value,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Who created it.
    pub created_by: String,
    /// When it was approved (RFC 3339), if it was.
    pub approved_at: Option<String>,
    /// Who approved it.
    pub approved_by: Option<String>,
    /// When a later approval with the same start superseded it (RFC 3339).
    pub superseded_at: Option<String>,
}

/// `POST /api/v1/policies`, `PUT /api/v1/policies/{version}`: a draft's content and first month.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    /// The first month it prices (`YYYY-MM`).
    pub effective_from: String,
    /// What changed and why.
    #[serde(default)]
    pub note: String,
    /// The policy: `{currency, classes[{gpu_class, guaranteed, borrowed}], energy{per_kwh, pue},
    /// services[{endpoint, per_million_weighted_tokens?}], token_weights[{model, input, output}],
    /// overhead{fixed[{name, amount}], unallocated_capacity, key{kind, shares?}}}`, decimals as strings; errors
    /// name the field (`policy.classes[0].borrowed`).
    pub policy: serde_json::Value,
}

/// `POST /api/v1/policies/{version}/approve`: the approval's reason (the body may be absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// Why it is approved (kept in the audit log).
    #[serde(default)]
    pub reason: String,
}

/// `GET /api/v1/quotas`: quotas by department, tenant, class and start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuotaList {
    /// The quotas.
    pub items: Vec<Quota>,
    /// How many there are.
    pub total: usize,
}

/// Guaranteed GPUs of one class for a tenant or a department over a validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Quota {
    /// The quota's ID (UUID).
    pub quota_id: String,
    /// The holder tenant's ID, when a tenant holds it.
    pub tenant_id: Option<String>,
    /// The holder tenant's name.
    pub tenant: Option<String>,
    /// The holder department's ID (or the holder tenant's department).
    pub department_id: Option<String>,
    /// That department's name.
    pub department: Option<String>,
    /// The GPU class.
    pub gpu_class: String,
    /// Guaranteed GPUs, a decimal string.
    pub gpus: String,
    /// Start (RFC 3339).
    pub valid_from: String,
    /// End (RFC 3339); null: open-ended.
    pub valid_to: Option<String>,
    /// `manual` or `kueue`.
    pub source: String,
    /// The imported ClusterQueue (`CLUSTER/clusterqueue/UID`), else empty.
    pub source_ref: String,
}

/// `POST /api/v1/quotas`: a quota for exactly one of a tenant or a department.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaBody {
    /// The holder tenant's name or ID.
    #[serde(default)]
    pub tenant: Option<String>,
    /// The holder department's name or ID.
    #[serde(default)]
    pub department: Option<String>,
    /// A GPU class of the approved inventory.
    pub gpu_class: String,
    /// Guaranteed GPUs, a decimal string (at most 4 decimals, not negative).
    pub gpus: String,
    /// Start (RFC 3339).
    pub valid_from: String,
    /// End (RFC 3339), after the start; absent: open-ended.
    #[serde(default)]
    pub valid_to: Option<String>,
}

/// `POST /api/v1/quotas` (201): the quota created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedQuota {
    /// The new quota's ID (UUID).
    pub quota_id: String,
}

/// `POST /api/v1/quotas/import-kueue`: how ClusterQueues map to holders (the body may be absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportKueueBody {
    /// ClusterQueue name → tenant or department name; by default a ClusterQueue named like a tenant (else a
    /// department) maps to it.
    #[serde(default)]
    pub mappings: BTreeMap<String, String>,
}

/// `POST /api/v1/quotas/import-kueue`: what was imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct KueueImport {
    /// Quotas created.
    pub imported: u64,
    /// Why each skipped ClusterQueue or flavor was skipped.
    pub skipped: Vec<String>,
}

/// `GET /api/v1/policies/{version}/impact?period=YYYY-MM` and `POST /api/v1/inventory/impact?period=YYYY-MM`:
/// a month computed twice by the ledger — as priced now (`approved`) and with the change in place (`draft`).
/// Amounts are decimal strings; `delta = draft − approved` exactly, and the departments' deltas add up to the
/// total's exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Impact {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// The policy version priced on the `draft` side: the draft asked about, or (inventory preview) the approved
    /// version that prices the month.
    pub version: i32,
    /// The approved version that prices the month (the `approved` side).
    pub approved_version: i32,
    /// The month is closed: its figures stay as they are; this is a what-if.
    pub closed: bool,
    /// The currency of every amount.
    pub currency: String,
    /// Per department the caller may see, by name.
    pub departments: Vec<DepartmentImpact>,
    /// Per tenant the caller may see, by department and name (department-level lines such as a department's
    /// own quota belong to no tenant, so the tenants need not add up to their department).
    pub tenants: Vec<TenantImpact>,
    /// The sum of `departments`.
    pub total: ImpactAmounts,
    /// What the comparison covers and leaves out, in one or two sentences.
    pub note: String,
}

/// Both sides of a comparison and their difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ImpactAmounts {
    /// As priced now (decimal string).
    pub approved: String,
    /// With the change (decimal string).
    pub draft: String,
    /// `draft − approved` (decimal string).
    pub delta: String,
}

/// One department's side of an [`Impact`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DepartmentImpact {
    /// Its name.
    pub department: String,
    /// Its ID (UUID).
    pub department_id: String,
    /// As priced now (decimal string).
    pub approved: String,
    /// With the change (decimal string).
    pub draft: String,
    /// `draft − approved` (decimal string).
    pub delta: String,
}

/// One tenant's side of an [`Impact`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TenantImpact {
    /// Its name.
    pub tenant: String,
    /// Its ID (UUID).
    pub tenant_id: String,
    /// Its department's name.
    pub department: String,
    /// As priced now (decimal string).
    pub approved: String,
    /// With the change (decimal string).
    pub draft: String,
    /// `draft − approved` (decimal string).
    pub delta: String,
}
