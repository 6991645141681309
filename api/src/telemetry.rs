//! Telemetry coverage: which clusters and nodes report, at what cadence, and what keeping it costs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a node's telemetry stands for the month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CoverageStatus {
    /// Telemetry for (nearly) every hour its GPUs were held.
    Reporting,
    /// Some held hours have no telemetry.
    Partial,
    /// GPUs were held and nothing was reported.
    Silent,
}

/// One cluster's or node's coverage in the month.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CoverageRow {
    /// Cluster ID.
    pub cluster_id: String,
    /// Cluster name.
    pub cluster: String,
    /// Node (absent on a cluster's row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Whole GPUs that reported in the month.
    pub gpus: u64,
    /// MIG instances that reported in the month.
    pub mig_instances: u64,
    /// GPU-equivalent hours held by allocations on it in the month (decimal string).
    pub gpu_hours_held: String,
    /// Whole-GPU hours covered by telemetry windows (decimal string).
    pub gpu_hours_with_telemetry: String,
    /// Windows received (whole GPUs and MIG instances).
    pub windows: u64,
    /// Median window length, seconds (decimal string; absent without windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_window_secs: Option<String>,
    /// Bytes the full-resolution tier keeps for it (blocks plus the measured per-row overhead).
    pub bytes_full_resolution: u64,
    /// Bytes the hourly tier keeps for it (the measured per-row size).
    pub bytes_hourly: u64,
    /// Start of the latest hour with telemetry (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_hour: Option<String>,
    /// Reporting, partial or silent.
    pub status: CoverageStatus,
    /// What to do when it is not reporting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// `GET /api/v1/telemetry/coverage?period=YYYY-MM`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Coverage {
    /// The month.
    pub period: String,
    /// Its first instant (RFC 3339).
    pub starts_at: String,
    /// Its end (exclusive; RFC 3339).
    pub ends_at: String,
    /// Per cluster, by name.
    pub clusters: Vec<CoverageRow>,
    /// Per node, by cluster and node name.
    pub nodes: Vec<CoverageRow>,
}
