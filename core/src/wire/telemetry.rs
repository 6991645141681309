//! Telemetry facts: a device's windowed rollup and the processes (pods) that used it.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

/// min / avg / max of one metric over a window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Stat {
    /// Smallest sample.
    pub min: f64,
    /// Mean of the samples.
    pub avg: f64,
    /// Largest sample.
    pub max: f64,
}

/// Utilization of one device (or MIG instance) over a window: analytics only, never money by itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TelemetryRollup {
    /// Node.
    pub node: String,
    /// Physical GPU UUID (the parent, for MIG rows).
    pub gpu_uuid: String,
    /// MIG GPU instance ID, for MIG rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<u32>,
    /// MIG profile, for MIG rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    /// Window start (inclusive).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub window_start: OffsetDateTime,
    /// Window end (exclusive).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub window_end: OffsetDateTime,
    /// Number of samples rolled up.
    pub samples: u32,
    /// GPU (or graphics engine, for MIG) activity, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_pct: Option<Stat>,
    /// Framebuffer used, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mib: Option<Stat>,
    /// Power draw, watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<Stat>,
    /// Energy consumed in the window, joules (from counter deltas, never from integrating power).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// Pod the exporter attributes the device to, when it says (informational: time-sliced devices are split
    /// by allocation, never by this label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
}

/// Most pods one `process_telemetry` fact may name (a GPU with more processes than this is not a real one).
pub const MAX_PODS_PER_PROCESS_WINDOW: usize = 256;

/// One GPU's processes over a window, summed per pod, from the driver's per-process samples (NVML
/// `nvmlDeviceGetProcessUtilization`). The window was sampled: a pod of the node that is not listed did nothing
/// on this GPU (an empty `pods` is an idle GPU, not a missing measurement).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProcessTelemetry {
    /// Node.
    pub node: String,
    /// Physical GPU UUID.
    pub gpu_uuid: String,
    /// Window start (inclusive).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub window_start: OffsetDateTime,
    /// Window end (exclusive).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub window_end: OffsetDateTime,
    /// Samplings of the GPU's processes in the window.
    pub samples: u32,
    /// The pods whose processes ran on the GPU in the window.
    pub pods: Vec<PodActivity>,
}

/// One pod's share of a GPU's work over a window: its processes' SM activity summed per sampling, then
/// rolled up over the window's samplings (a sampling without its processes counts as 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PodActivity {
    /// The pod's UID (from the processes' cgroups).
    pub pod_uid: Uuid,
    /// Percent of the GPU's streaming multiprocessors busy with the pod's processes.
    pub sm_pct: Stat,
    /// Percent of the GPU's memory bandwidth the pod's processes used, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_pct: Option<Stat>,
}

/// A pod as an exporter labels it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID (newer exporters only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<Uuid>,
    /// Container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}
