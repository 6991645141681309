//! Quota, service-usage, training-progress and device-fault facts.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

/// One resource's quota in a Kueue ClusterQueue flavor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct QuotaEntry {
    /// ResourceFlavor name.
    pub flavor: String,
    /// Resource, e.g. `nvidia.com/gpu`.
    pub resource: String,
    /// Nominal (guaranteed) quota, in units of the resource.
    pub nominal: u32,
    /// How much more it may borrow from its cohort, if limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<u32>,
}

/// A Kueue ClusterQueue and its GPU quotas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct QuotaFact {
    /// ClusterQueue name.
    pub cluster_queue: String,
    /// ClusterQueue UID.
    pub uid: Uuid,
    /// Cohort it borrows within.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// GPU quotas (non-GPU resources are left out).
    pub quotas: Vec<QuotaEntry>,
    /// Since when these quotas hold (creation on first sight, else when the change was seen).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub since: OffsetDateTime,
}

/// Work a shared endpoint did for one tenant in a window: counter deltas, never rates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ServiceUsageFact {
    /// Endpoint name, as in the `endpoint` attribution label of its pods (e.g. `llm-shared`).
    pub endpoint: String,
    /// Model served (the server's model name; weights are per model).
    pub model: String,
    /// Tenant the requests were made for, by tenant name (from the gateway or the per-tenant served-model name).
    pub tenant: String,
    /// Window start (inclusive).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub window_start: OffsetDateTime,
    /// Window end (exclusive).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub window_end: OffsetDateTime,
    /// Requests completed in the window.
    pub requests: u64,
    /// Input (prompt) tokens in the window.
    pub input_tokens: u64,
    /// Output (generated) tokens in the window.
    pub output_tokens: u64,
    /// Time to first token (or first response) of the window's requests, summed, in milliseconds; with
    /// `ttft_count` it gives the mean. Absent when the model server does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms_sum: Option<u64>,
    /// Requests `ttft_ms_sum` covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_count: Option<u64>,
}

/// A model-server pod's own counts for a window (counter deltas between two scrapes), whoever the requests were for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointTotalsFact {
    /// Endpoint name, as in `service_usage` facts and usage records.
    pub endpoint: String,
    /// Model served.
    pub model: String,
    /// Server kind: `vllm`, `triton`, `tgi` or `nim`.
    pub server: String,
    /// The pod scraped, `namespace/name` (an endpoint's replicas are counted one by one, then summed).
    pub pod: String,
    /// Window start (the earlier scrape).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub window_start: OffsetDateTime,
    /// Window end (the later scrape).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub window_end: OffsetDateTime,
    /// Requests finished in the window.
    pub requests: u64,
    /// Input (prompt) tokens in the window.
    pub input_tokens: u64,
    /// Output (generated) tokens in the window.
    pub output_tokens: u64,
    /// Time to first token of the window's requests, summed, in milliseconds (with `ttft_count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms_sum: Option<u64>,
    /// Requests `ttft_ms_sum` covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_count: Option<u64>,
    /// Requests waiting at the window's end (a gauge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<f64>,
    /// The server restarted between the scrapes (its counters started again from zero).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restarted: bool,
}

/// A training job's counters as its pod declares them (annotations `gpuledger.io/training-steps` and
/// `gpuledger.io/training-samples`), cumulative; at least one is present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TrainingProgressFact {
    /// Namespace.
    pub namespace: String,
    /// The workload: its Job's name when the pod belongs to one, else the pod's name.
    pub workload: String,
    /// When the agent read the counters.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub reported_at: OffsetDateTime,
    /// Optimizer steps so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// Samples (or tokens) so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
}

/// What a node agent saw go wrong with a GPU (or go right again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceFaultFact {
    /// Node (hostname).
    pub node: String,
    /// `GPU-…` UUID of the physical GPU.
    pub gpu_uuid: String,
    /// What happened (`fault`, since `kind` names the fact's own kind on the wire).
    pub fault: DeviceFaultKind,
    /// The XID error code (`fault: xid`), as NVML and DCGM (`DCGM_FI_DEV_XID_ERRORS`) report it: e.g. 48 double-bit
    /// ECC error, 79 fallen off the bus, 94 contained / 95 uncontained ECC error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    /// When the agent first saw it.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub occurred_at: OffsetDateTime,
    /// What the agent read, for people (`DCGM_FI_DEV_RETIRED_DBE 0 → 2`, NVML's `GPU is lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The kinds of [`DeviceFaultFact`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum DeviceFaultKind {
    /// An XID error (its code in `xid`).
    Xid,
    /// The GPU disappeared: gone from the exporter's output, or NVML answers `NVML_ERROR_GPU_IS_LOST` (15).
    DeviceLost,
    /// Memory pages retired for double-bit ECC errors (the count rose).
    RetiredPages,
    /// The device is healthy again (back on the bus, its last XID cleared by a reset): ends the fault.
    Recovered,
}

impl DeviceFaultKind {
    /// Name as on the wire.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Xid => "xid",
            Self::DeviceLost => "device_lost",
            Self::RetiredPages => "retired_pages",
            Self::Recovered => "recovered",
        }
    }
}
