//! Cost policies and quotas (`/api/v1/policies/…`, `/api/v1/quotas/…`).

use std::{borrow::Cow, collections::BTreeMap};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, de::Error as _};

use crate::input::{
    Currency, Gpus, Hours, Id, Instant, Line, List, Money, Month, Note, Percent, Pue, Rate, Weight, present,
};

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
    pub state: crate::states::PolicyState,
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
    /// The first month it prices.
    pub effective_from: Month,
    /// What changed and why.
    #[serde(default)]
    pub note: Note<2000>,
    /// The policy; errors name the field (`policy.classes[0].borrowed`). A class, endpoint or model listed twice,
    /// or shares adding up to zero, are refused by the policy's rules (409).
    pub policy: PolicyDocument,
}

/// A cost policy's content as the API reads it: the shape of `gpuledger_core::policy::CostPolicy`, each number
/// within what the ledger stores and computes exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyDocument {
    /// Ignored: the server numbers versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<crate::input::Int<0, 2_147_483_647>>,
    /// ISO 4217 code, e.g. `USD`.
    pub currency: Currency,
    /// Rates per GPU class, per GPU-hour.
    #[serde(default)]
    pub classes: List<ClassRatesInput, 0, 500>,
    /// Energy price, when energy is charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<EnergyInput>,
    /// Shared model-serving endpoints priced by weighted productive work.
    #[serde(default)]
    pub services: List<ServiceInput, 0, 500>,
    /// Token weights per model (`*` = any other model).
    #[serde(default)]
    pub token_weights: List<TokenWeightInput, 0, 500>,
    /// The shared-overhead pool and its distribution key.
    #[serde(default)]
    pub overhead: OverheadInput,
    /// When a reservation counts as idle (default: below 5 % for 2 hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleInput>,
    /// Which device faults earn a credit (default: XIDs 48, 79, 94, 95 and a GPU lost, 5 minutes of grace,
    /// proposed for finance's approval).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "object_only")]
    pub faults: Option<FaultsInput>,
}

/// An optional object field that is an object or null, never an array (serde reads a struct from a sequence, and a
/// struct whose fields are all optional would take `[null, null]`).
fn object_only<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    match Option::<serde_json::Map<String, serde_json::Value>>::deserialize(d)? {
        None => Ok(None),
        Some(m) => T::deserialize(serde_json::Value::Object(m)).map(Some).map_err(D::Error::custom),
    }
}

/// When a device fault earns a credit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultsInput {
    /// XID codes that open an outage (default 48, 79, 94, 95).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xids: Option<List<crate::input::Int<1, 65_535>, 0, 256>>,
    /// Whether a GPU gone from the bus opens one (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_lost: Option<bool>,
    /// Whether retired memory pages open one (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pages: Option<bool>,
    /// Minutes after the fault before hours count (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_minutes: Option<crate::input::Int<0, 1440>>,
    /// Propose the credits for finance's approval (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_propose: Option<bool>,
}

/// Rates of one GPU class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassRatesInput {
    /// GPU class (as in the approved inventory).
    pub gpu_class: Line<100>,
    /// Per guaranteed GPU-hour.
    pub guaranteed: Rate,
    /// Per borrowed GPU-hour.
    pub borrowed: Rate,
    /// Price the class at actual cost: the month's imported cloud bill for the nodes of this class spread over the
    /// class's charged GPU-hours (`guaranteed` and `borrowed` are then the fallback for a month without a bill).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub actual_cost: bool,
}

/// Price of energy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnergyInput {
    /// Per kWh.
    pub per_kwh: Rate,
    /// Power usage effectiveness multiplier, when facility overhead is charged with the energy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pue: Option<Pue>,
}

/// How a shared endpoint is priced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceInput {
    /// Endpoint name.
    pub endpoint: Line<200>,
    /// A fixed price per million weighted tokens; without it the endpoint's own cost is split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_million_weighted_tokens: Option<Rate>,
}

/// Token weights of one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenWeightInput {
    /// Model name, or `*` for any model without its own entry.
    pub model: Line<200>,
    /// Weight of an input token.
    pub input: Weight,
    /// Weight of an output token.
    pub output: Weight,
}

/// The platform's shared costs and how they are distributed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OverheadInput {
    /// Fixed monthly amounts.
    #[serde(default)]
    pub fixed: List<FixedCostInput, 0, 500>,
    /// Add the cost of capacity nobody held or reserved.
    #[serde(default)]
    pub unallocated_capacity: bool,
    /// Distribution key (default `allocated_gpu_hours`).
    #[serde(default)]
    pub key: OverheadKeyInput,
}

/// A fixed monthly cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FixedCostInput {
    /// What it is.
    pub name: Line<200>,
    /// Amount per month.
    pub amount: Money,
}

/// How the overhead pool is distributed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum OverheadKeyInput {
    /// Proportional to allocated GPU-hours.
    AllocatedGpuHours {},
    /// Equal shares among tenants.
    Equal {},
    /// Declared shares (normalized to their sum, which must be above zero: else 409).
    FixedShares {
        /// Tenant and share.
        shares: List<FixedShareInput, 1, 1000>,
    },
}

impl Default for OverheadKeyInput {
    fn default() -> Self {
        Self::AllocatedGpuHours {}
    }
}

/// One tenant's declared share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FixedShareInput {
    /// Tenant ID.
    pub tenant: Id,
    /// Share.
    pub share: Weight,
}

/// When an allocation counts as idle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdleInput {
    /// Percent of activity below which time is idle.
    pub threshold_pct: Percent,
    /// Hours of idle time before a reservation is listed.
    pub min_hours: Hours,
}

/// `POST /api/v1/policies/{version}/approve`: the approval's reason (the body may be absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// Why it is approved (kept in the audit log).
    #[serde(default)]
    pub reason: Note<2000>,
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
#[schemars(extend("oneOf" = [{"required": ["tenant"]}, {"required": ["department"]}]))]
pub struct QuotaBody {
    /// The holder tenant's name or ID.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Line<100>")]
    pub tenant: Option<Line<100>>,
    /// The holder department's name or ID.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Line<100>")]
    pub department: Option<Line<100>>,
    /// A GPU class of the approved inventory (else 409).
    pub gpu_class: Line<100>,
    /// Guaranteed GPUs.
    pub gpus: Gpus,
    /// Start.
    pub valid_from: Instant,
    /// End, after the start (else 409); absent: open-ended.
    #[serde(default)]
    pub valid_to: Option<Instant>,
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
    pub mappings: KueueMappings,
}

/// ClusterQueue names (1 to 253 characters) to tenant or department names (1 to 100), at most 1,000, no control
/// characters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KueueMappings(pub BTreeMap<String, String>);

impl<'de> Deserialize<'de> for KueueMappings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<String, String>::deserialize(d)?;
        if raw.len() > 1000 {
            return Err(D::Error::custom(format!("{} mappings; at most 1000", raw.len())));
        }
        let mut out = BTreeMap::new();
        for (k, v) in raw {
            let key = Line::<253>::new(&k).map_err(|e| D::Error::custom(format!("{k:?}: {e}")))?;
            let value = Line::<100>::new(&v).map_err(|e| D::Error::custom(format!("{k:?}: {e}")))?;
            out.insert(key.into_inner(), value.into_inner());
        }
        Ok(Self(out))
    }
}

impl JsonSchema for KueueMappings {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "KueueMappings".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "maxProperties": 1000,
            "propertyNames": g.subschema_for::<Line<253>>(),
            "additionalProperties": g.subschema_for::<Line<100>>(),
        })
    }
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
