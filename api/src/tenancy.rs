//! Departments, tenants, the approved GPU inventory and endpoint aliases (`/api/v1/departments`,
//! `/api/v1/tenants`, `/api/v1/inventory/…`, `/api/v1/endpoints/{endpoint}/aliases`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::{FractionText, Instant, Int, Line, NamespacePattern, Prose};

/// Longest department, tenant, class, model or profile name.
pub const MAX_NAME: usize = 100;
/// Longest cluster name.
pub const MAX_CLUSTER: usize = 200;
/// Longest namespace name (a Kubernetes object name).
pub const MAX_NAMESPACE: usize = 253;
/// Longest reason kept with a tenancy change.
pub const MAX_REASON: usize = 1000;

/// A department, as `GET /api/v1/departments` lists it (by name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Department {
    /// The department's ID (UUID).
    pub department_id: String,
    /// Its name.
    pub name: String,
    /// How many tenants it has.
    pub tenants: i64,
    /// Retired from this instant (RFC 3339); none: active.
    #[serde(default)]
    pub retired_at: Option<String>,
    /// Names it had before, oldest first.
    #[serde(default)]
    pub former_names: Vec<String>,
    /// The cost centre its journal rows are booked to (none: not set; its rows then carry a finding).
    #[serde(default)]
    pub cost_center: Option<String>,
    /// The general-ledger account its journal debits go to (none: not set; its rows then carry a finding).
    #[serde(default)]
    pub gl_account: Option<String>,
}

/// Longest cost centre or general-ledger account code (SAP's cost centre is 10 characters, an Oracle accounting
/// flexfield a few segments of up to 25: 64 holds either with room).
pub const MAX_ACCOUNT: usize = 64;

/// `POST /api/v1/departments`: a new department (admins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DepartmentBody {
    /// Its name (unique in the organization).
    pub name: Line<MAX_NAME>,
}

/// `POST /api/v1/departments` (201): the department created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedDepartment {
    /// The new department's ID (UUID).
    pub department_id: String,
    /// Its name.
    pub name: String,
}

/// A tenant, as `GET /api/v1/tenants` lists it (by department, then name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tenant {
    /// The tenant's ID (UUID).
    pub tenant_id: String,
    /// Its name.
    pub name: String,
    /// Its department's ID (UUID).
    pub department_id: String,
    /// Its department's name.
    pub department: String,
    /// Namespaces it owns now.
    pub namespaces: i64,
    /// Retired from this instant (RFC 3339); none: active.
    #[serde(default)]
    pub retired_at: Option<String>,
    /// Names it had before, oldest first.
    #[serde(default)]
    pub former_names: Vec<String>,
}

/// `POST /api/v1/tenants`: a new tenant (admins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantBody {
    /// Its name (unique in the organization).
    pub name: Line<MAX_NAME>,
    /// Its department's name or ID.
    pub department: Line<MAX_NAME>,
}

/// `POST /api/v1/tenants` (201): the tenant created, with what it took over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedTenant {
    /// The new tenant's ID (UUID).
    pub tenant_id: String,
    /// Its name.
    pub name: String,
    /// Its department's ID (UUID).
    pub department_id: String,
    /// Namespaces whose labels named it, now owned by it.
    pub namespaces_mapped: u64,
    /// Usage rows kept under its name, now attributed to it.
    pub usage_rows_attributed: u64,
}

/// `GET /api/v1/inventory`: the approved GPU inventory, with each entry's validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Inventory {
    /// Price classes, by name.
    pub classes: Vec<GpuClass>,
    /// GPU models and their class, by model and start.
    pub models: Vec<GpuModel>,
    /// MIG and vGPU profiles and their fraction of a GPU.
    pub profiles: Vec<GpuProfile>,
    /// Declared time-slicing policies.
    pub timeslicing: Vec<Timeslicing>,
    /// Which share a soft-shared allocation (HAMi, Volcano vGPU, Run:ai, gpushare) pays, by cluster and start;
    /// with no version in force, the larger of the compute and memory shares.
    #[serde(default)]
    pub share_bases: Vec<ShareBasisEntry>,
}

/// A version of the share basis for soft-shared GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ShareBasisEntry {
    /// The cluster; null: every cluster without a version of its own.
    pub cluster: Option<String>,
    /// `compute`, `memory` or `larger`.
    pub basis: String,
    /// Start of the validity (ISO 8601 time).
    pub valid_from: String,
    /// End of the validity; null: in force.
    pub valid_to: Option<String>,
}

/// `POST /api/v1/inventory/share-basis`: which share soft-shared allocations pay from `valid_from` (admin or
/// finance). Soft-shared allocations that started since are priced again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareBasisBody {
    /// A registered cluster's name or ID; absent or null: the organization's default for every cluster.
    #[serde(default)]
    pub cluster: Option<Line<MAX_CLUSTER>>,
    /// Which share is paid.
    pub basis: ShareBasisName,
    /// When the version starts.
    pub valid_from: Instant,
}

/// Which share a soft-shared allocation pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ShareBasisName {
    /// Its compute share.
    Compute,
    /// Its memory share.
    Memory,
    /// The larger of the two.
    Larger,
}

impl ShareBasisName {
    /// As stored and answered.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Memory => "memory",
            Self::Larger => "larger",
        }
    }
}

/// `POST /api/v1/inventory/share-basis` (201): the version added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedShareBasis {
    /// The cluster, or null for the organization's default.
    pub cluster: Option<String>,
    /// The basis.
    pub basis: String,
    /// Soft-shared allocations priced again.
    pub recomputed_allocations: u64,
}

/// A GPU price class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GpuClass {
    /// Its name (`H100-80GB`).
    pub gpu_class: String,
    /// What it stands for (may be empty).
    pub description: String,
}

/// A GPU model's class over a validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GpuModel {
    /// The model as node labels and NVML name it.
    pub model: String,
    /// Its price class.
    pub gpu_class: String,
    /// Its memory in MiB, when declared.
    pub memory_mib: Option<i32>,
    /// Start of the validity (ISO 8601 time).
    pub valid_from: String,
    /// End of the validity; null: in force.
    pub valid_to: Option<String>,
}

/// A MIG or vGPU profile's fraction of a GPU over a validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GpuProfile {
    /// `mig` or `vgpu`.
    pub kind: ProfileKind,
    /// The GPU model.
    pub model: String,
    /// The profile (`3g.40gb`, `GRID_A100-40C`).
    pub profile: String,
    /// Its share of the whole GPU, exact (`3/7`).
    pub fraction: String,
    /// Start of the validity (ISO 8601 time).
    pub valid_from: String,
    /// End of the validity; null: in force.
    pub valid_to: Option<String>,
}

/// A declared time-slicing policy over a validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Timeslicing {
    /// The cluster.
    pub cluster: String,
    /// The device plugin's sharing configuration.
    pub name: String,
    /// Replicas per GPU.
    pub replicas: i32,
    /// Start of the validity (ISO 8601 time).
    pub valid_from: String,
    /// End of the validity; null: in force.
    pub valid_to: Option<String>,
}

/// `POST /api/v1/inventory/models`: a GPU model's class from `valid_from` (admin or finance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelBody {
    /// The GPU model as the node labels and NVML name it (`NVIDIA H100 80GB HBM3`).
    pub model: Line<MAX_NAME>,
    /// Its price class; created if new (a policy must still price it).
    pub gpu_class: Line<MAX_NAME>,
    /// Its memory in MiB, if known.
    #[serde(default)]
    pub memory_mib: Option<Int<1, 2_147_483_647>>,
    /// When the entry starts; it ends the entry in force there.
    pub valid_from: Instant,
}

/// `POST /api/v1/inventory/models` (201): the entry added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedModel {
    /// The GPU model.
    pub model: String,
    /// Its price class.
    pub gpu_class: String,
    /// Allocations recomputed with the new entry.
    pub recomputed_allocations: u64,
}

/// `POST /api/v1/inventory/profiles`: a MIG or vGPU profile's fraction from `valid_from` (admin or finance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("if" = {"properties": {"kind": {"const": "mig"}}},
                  "then" = {"properties": {"profile": {"pattern": crate::input::MigProfileName::PATTERN}}}))]
pub struct ProfileBody {
    /// `mig` or `vgpu`.
    pub kind: ProfileKind,
    /// The GPU model.
    pub model: Line<MAX_NAME>,
    /// MIG (`3g.40gb`, the pattern of a MIG profile) or vGPU (`GRID_A100-40C`) profile.
    pub profile: Line<MAX_NAME>,
    /// The share of the whole GPU, exact: `3/7`, `1/2`, `0.25` (more than 0 and at most 1, else 409).
    pub fraction: FractionText,
    /// When the entry starts.
    pub valid_from: Instant,
}

/// A GPU partitioning kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProfileKind {
    /// A MIG profile.
    Mig,
    /// A vGPU profile.
    Vgpu,
}

crate::states::names!(ProfileKind { Mig => "mig", Vgpu => "vgpu" });

/// `POST /api/v1/inventory/profiles` (201): the entry added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedProfile {
    /// `mig` or `vgpu`.
    pub kind: ProfileKind,
    /// The GPU model.
    pub model: String,
    /// The profile.
    pub profile: String,
    /// The fraction stored, reduced (`3/7`).
    pub fraction: String,
    /// Allocations recomputed with the new entry.
    pub recomputed_allocations: u64,
}

/// `POST /api/v1/inventory/timeslicing`: a declared time-slicing policy from `valid_from` (admin or finance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimeslicingBody {
    /// A registered cluster's name.
    pub cluster: Line<MAX_CLUSTER>,
    /// The sharing configuration's name (the device plugin's config).
    pub name: Line<MAX_NAME>,
    /// Replicas per GPU.
    pub replicas: Int<1, 1024>,
    /// When the entry starts.
    pub valid_from: Instant,
}

/// `POST /api/v1/inventory/timeslicing` (201): the entry added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedTimeslicing {
    /// The cluster.
    pub cluster: String,
    /// The sharing configuration's name.
    pub name: String,
    /// Replicas per GPU.
    pub replicas: i32,
}

/// `POST /api/v1/tenancy/reassignments`: a namespace belongs to `tenant` from `valid_from` (admins). Ownership
/// history is closed and reopened, never rewritten; a change reaching into a closed month leaves it as closed
/// and produces correction lines at the next close.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReassignmentBody {
    /// The namespace's cluster (name or ID).
    pub cluster: Line<MAX_CLUSTER>,
    /// The namespace's name, as the agent reports it.
    pub namespace: Line<MAX_NAMESPACE>,
    /// The new owner (tenant name or ID).
    pub tenant: Line<MAX_NAME>,
    /// From when (at most 366 days ahead, within the namespace's life: else 409).
    pub valid_from: Instant,
    /// Why (kept in the audit log).
    pub reason: Prose<MAX_REASON>,
}

/// `POST /api/v1/tenancy/reassignments` (201): the ownership entry opened, and what it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Reassignment {
    /// The cluster's name.
    pub cluster: String,
    /// The namespace's name.
    pub namespace: String,
    /// The namespace's UID.
    pub namespace_uid: String,
    /// The new owner's name.
    pub tenant: String,
    /// The owner before `valid_from` (none: the namespace had no owner then).
    pub previous_tenant: Option<String>,
    /// Start of the new entry (RFC 3339, UTC).
    pub valid_from: String,
    /// Its end: where a later ownership change already starts (none: open-ended).
    pub valid_to: Option<String>,
    /// Closed months the change reaches into (`YYYY-MM`): they stay as closed; the next close adds corrections.
    pub corrected_at_next_close: Vec<String>,
}

/// One entry of a namespace's ownership history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OwnershipEntry {
    /// The owner's name.
    pub tenant: String,
    /// The owner's department.
    pub department: String,
    /// Start (RFC 3339, UTC).
    pub valid_from: String,
    /// End (none: still in force).
    pub valid_to: Option<String>,
    /// What established it: `label` (the namespace's labels, seen by the agent) or `admin` (a reassignment).
    pub source: String,
}

/// `GET /api/v1/tenancy/ownership?cluster=&namespace=`: a namespace's ownership history, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamespaceOwnership {
    /// The cluster's name.
    pub cluster: String,
    /// The namespace's name.
    pub namespace: String,
    /// The namespace's UID.
    pub namespace_uid: String,
    /// Its history.
    pub entries: Vec<OwnershipEntry>,
}

/// `PATCH /api/v1/tenants/{tenant}` (admins; a department's change is [`DepartmentUpdate`]): rename, retire, or both.
/// A rename applies from now on (closed months keep the names frozen in their bundles; former names are kept); a
/// retired department or tenant keeps its history and takes nothing new from `retired_from` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("anyOf" = [
    {"required": ["name"], "properties": {"name": {"type": "string"}}},
    {"required": ["retired_from"], "properties": {"retired_from": {"type": "string"}}}
]))]
pub struct RenameOrRetire {
    /// The new name (unique in the organization).
    #[serde(default)]
    pub name: Option<Line<MAX_NAME>>,
    /// Retire from this instant.
    #[serde(default)]
    pub retired_from: Option<Instant>,
    /// Why (kept in the audit log).
    pub reason: Prose<MAX_REASON>,
}

/// `PATCH /api/v1/departments/{department}` (admins): rename, retire, set its journal accounts, or several at once.
/// `cost_center` and `gl_account`: left out, unchanged; `null`, cleared; a value, set (the month's journal debits
/// the department to them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("anyOf" = [
    {"required": ["name"], "properties": {"name": {"type": "string"}}},
    {"required": ["retired_from"], "properties": {"retired_from": {"type": "string"}}},
    {"required": ["cost_center"]},
    {"required": ["gl_account"]}
]))]
pub struct DepartmentUpdate {
    /// The new name (unique in the organization).
    #[serde(default)]
    pub name: Option<Line<MAX_NAME>>,
    /// Retire from this instant.
    #[serde(default)]
    pub retired_from: Option<Instant>,
    /// The cost centre its journal rows carry (`null` clears it).
    #[serde(default, deserialize_with = "crate::input::clearable", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Line<MAX_ACCOUNT>>")]
    pub cost_center: Option<Option<Line<MAX_ACCOUNT>>>,
    /// The general-ledger account its journal debits go to (`null` clears it).
    #[serde(default, deserialize_with = "crate::input::clearable", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Line<MAX_ACCOUNT>>")]
    pub gl_account: Option<Option<Line<MAX_ACCOUNT>>>,
    /// Why (kept in the audit log).
    pub reason: Prose<MAX_REASON>,
}

/// `PATCH /api/v1/departments/{department}`, `PATCH /api/v1/tenants/{tenant}` (200): what changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Updated {
    /// The department's or tenant's ID (UUID).
    pub id: String,
    /// Its name before this change.
    pub name: String,
    /// Its new name, when renamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_to: Option<String>,
    /// Retired from (RFC 3339), when retired by this change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_from: Option<String>,
    /// A department's cost centre after this change (departments only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_center: Option<String>,
    /// A department's general-ledger account after this change (departments only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gl_account: Option<String>,
}

/// `POST /api/v1/tenancy/namespace-rules` (admins): namespaces without labels whose name is `pattern` (`exact`)
/// or starts with it (`prefix`) belong to `tenant` from `valid_from`. A new rule for the same cluster, match and
/// pattern ends the one in force where it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamespaceRuleBody {
    /// A cluster (name or ID); none: every cluster.
    #[serde(default)]
    pub cluster: Option<Line<MAX_CLUSTER>>,
    /// `exact` or `prefix`.
    #[serde(rename = "match")]
    pub match_kind: MatchKind,
    /// The name or prefix.
    pub pattern: NamespacePattern,
    /// The owner (tenant name or ID).
    pub tenant: Line<MAX_NAME>,
    /// From when.
    pub valid_from: Instant,
    /// Why (kept in the audit log).
    pub reason: Prose<MAX_REASON>,
}

/// How a namespace rule matches names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    /// The whole name.
    Exact,
    /// The name's start.
    Prefix,
}

impl MatchKind {
    /// As stored and answered.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Prefix => "prefix",
        }
    }
}

/// A rule for namespaces without labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamespaceRule {
    /// The rule's ID (UUID).
    pub rule_id: String,
    /// Its cluster; none: every cluster.
    pub cluster: Option<String>,
    /// `exact` or `prefix`.
    #[serde(rename = "match")]
    pub match_kind: String,
    /// The name or prefix.
    pub pattern: String,
    /// The owner.
    pub tenant: String,
    /// Start (RFC 3339).
    pub valid_from: String,
    /// End; none: in force.
    pub valid_to: Option<String>,
    /// Namespaces it gave an owner to when it was added (in the answer to `POST`; 0 in lists).
    #[serde(default)]
    pub namespaces_given: u64,
}

/// `POST /api/v1/inventory/impact?period=YYYY-MM`: an inventory change to preview, with exactly the body its save
/// endpoint takes — `{"model": ModelBody}`, `{"profile": ProfileBody}` or `{"timeslicing": TimeslicingBody}`.
/// Nothing is saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum InventoryChange {
    /// As `POST /api/v1/inventory/models` takes it.
    Model(ModelBody),
    /// As `POST /api/v1/inventory/profiles` takes it.
    Profile(ProfileBody),
    /// As `POST /api/v1/inventory/timeslicing` takes it.
    Timeslicing(TimeslicingBody),
}
