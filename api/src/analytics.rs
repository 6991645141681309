//! Analytics, never billed: utilization, inference efficiency, agent sessions (`/api/v1/analytics/…`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a utilization analysis covered (shared by the answer and the stored summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UtilizationHead {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// Start of the window analysed (RFC 3339).
    pub from: String,
    /// Its end: the month's end, or now for the current month (RFC 3339).
    pub to: String,
    /// Idle threshold, percent of the GPU (a decimal string).
    pub threshold: String,
    /// Shortest idle stretch counted, hours (a decimal string).
    pub min_idle_hours: String,
    /// What the figures are (analytics, never billed).
    pub basis: String,
    /// Allocations left out: their GPU fraction is unknown.
    pub without_fraction: u64,
}

/// One tenant's utilization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TenantUtilization {
    /// The tenant's ID (`null`: work no tenant owned).
    pub tenant_id: Option<String>,
    /// Its name.
    pub tenant_name: Option<String>,
    /// Its allocations in the window.
    pub allocations: u64,
    /// Those with an idle stretch.
    pub idle_allocations: u64,
    /// GPU-hours held, a decimal string.
    pub allocated_gpu_hours: String,
    /// GPU-hours of work at full utilization equivalent, a decimal string.
    pub active_equivalent_gpu_hours: String,
    /// GPU-hours with utilization samples, a decimal string.
    pub observed_gpu_hours: String,
    /// GPU-hours idle, a decimal string.
    pub idle_gpu_hours: String,
    /// `exact`, `modeled` or `estimated`.
    pub confidence: crate::states::Confidence,
}

/// A stretch of time (RFC 3339 bounds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Stretch {
    /// Start (RFC 3339).
    pub from: String,
    /// End (RFC 3339).
    pub to: String,
}

/// One allocation's utilization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AllocationUtilization {
    /// Its cluster's ID.
    pub cluster_id: String,
    /// The allocation's ID in the cluster.
    pub allocation_id: String,
    /// The tenant's ID.
    pub tenant_id: Option<String>,
    /// The tenant's name.
    pub tenant_name: Option<String>,
    /// The GPU class.
    pub gpu_class: Option<String>,
    /// The fraction of a GPU held, an exact rational (`3/7`).
    pub fraction: String,
    /// The physical GPUs.
    pub devices: Vec<String>,
    /// Held from (RFC 3339, within the window).
    pub from: String,
    /// Held to (RFC 3339, within the window).
    pub to: String,
    /// GPU-hours held, a decimal string.
    pub allocated_gpu_hours: String,
    /// GPU-hours of work at full utilization equivalent, a decimal string.
    pub active_equivalent_gpu_hours: String,
    /// Hours with utilization samples, a decimal string.
    pub observed_hours: String,
    /// GPU-hours with utilization samples, a decimal string.
    pub observed_gpu_hours: String,
    /// GPU-hours idle, a decimal string.
    pub idle_gpu_hours: String,
    /// Has an idle stretch.
    pub idle: bool,
    /// The idle stretches.
    pub idle_stretches: Vec<Stretch>,
    /// `exact`, `modeled` or `estimated`.
    pub confidence: crate::states::Confidence,
    /// Why its utilization is not measured, when no sample covers it (never shown as 0 % busy); null when measured.
    #[serde(default)]
    pub not_measured: Option<String>,
}

/// `GET /api/v1/analytics/utilization`: idle reservations and active-equivalent GPU-hours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Utilization {
    /// What the analysis covered.
    #[serde(flatten)]
    pub head: UtilizationHead,
    /// Per tenant, most idle first.
    pub tenants: Vec<TenantUtilization>,
    /// A page of allocations, most idle first.
    pub allocations: Vec<AllocationUtilization>,
    /// Allocations in all pages.
    pub total: u64,
    /// This page's number, from 1.
    pub page: u64,
    /// Allocations per page.
    pub per_page: u64,
}

/// One tenant's use of one shared endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TenantInference {
    /// The tenant's ID.
    pub tenant_id: String,
    /// Its name.
    pub tenant_name: String,
    /// Its department's ID.
    pub department_id: String,
    /// Its department's name.
    pub department: String,
    /// The endpoint.
    pub endpoint: String,
    /// Models served to the tenant.
    pub models: Vec<String>,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Its share of the endpoint's weighted tokens, percent (a decimal string).
    pub share_pct: String,
    /// GPU-hours attributed by weighted tokens, a decimal string.
    pub gpu_hours: String,
    /// Tokens per GPU-hour, a decimal string (`null`: no GPU-hours).
    pub tokens_per_gpu_hour: Option<String>,
    /// Output tokens per GPU-hour, a decimal string.
    pub output_tokens_per_gpu_hour: Option<String>,
    /// Mean time to first token, milliseconds (a decimal string).
    pub mean_ttft_ms: Option<String>,
    /// `exact`, `modeled` or `estimated`.
    pub confidence: crate::states::Confidence,
    /// Why that confidence.
    pub confidence_reason: String,
}

/// One shared endpoint's totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EndpointInference {
    /// The endpoint.
    pub endpoint: String,
    /// GPU-hours of its pods, a decimal string.
    pub gpu_hours: String,
    /// Requests.
    pub requests: u64,
    /// Tokens.
    pub tokens: u64,
    /// Tokens per GPU-hour, a decimal string.
    pub tokens_per_gpu_hour: Option<String>,
    /// Mean time to first token, milliseconds (a decimal string).
    pub mean_ttft_ms: Option<String>,
    /// `exact`, `modeled` or `estimated`.
    pub confidence: crate::states::Confidence,
}

/// Work no tenant is known for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Unattributed {
    /// Requests.
    pub requests: u64,
    /// Tokens.
    pub tokens: u64,
    /// GPU-hours, a decimal string.
    pub gpu_hours: String,
}

/// `GET /api/v1/analytics/inference`: inference efficiency of shared endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Inference {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// Start of the window (RFC 3339).
    pub from: String,
    /// End of the window (RFC 3339).
    pub to: String,
    /// What the figures are (analytics, never billed).
    pub basis: String,
    /// Per endpoint (empty unless the caller sees the whole organization).
    pub endpoints: Vec<EndpointInference>,
    /// Per tenant and endpoint.
    pub tenants: Vec<TenantInference>,
    /// Work without a tenant (`null` unless the caller sees the whole organization).
    pub unattributed: Option<Unattributed>,
}

/// One AI-agent session of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionRow {
    /// The agent_session_id.
    pub session: String,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Mean time to first token, milliseconds (a decimal string).
    pub mean_ttft_ms: Option<String>,
    /// Session-labelled allocations.
    pub allocations: u64,
    /// Their GPU-hours, a decimal string.
    pub gpu_hours: String,
    /// Modeled cost, a decimal string (`null`: the tenant has no ledger lines).
    pub cost: Option<String>,
    /// Always `modeled`.
    pub confidence: crate::states::Confidence,
}

/// `GET /api/v1/analytics/sessions`: showback by AI-agent session within a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Sessions {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// Start of the window (RFC 3339).
    pub from: String,
    /// End of the window (RFC 3339).
    pub to: String,
    /// The tenant's ID.
    pub tenant_id: String,
    /// Its name.
    pub tenant_name: String,
    /// Currency of its ledger lines (empty when none).
    pub currency: String,
    /// How the cost is modeled.
    pub basis: String,
    /// The sessions, costliest first.
    pub sessions: Vec<SessionRow>,
}
