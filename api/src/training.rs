//! Training progress records and work per GPU-hour (`/api/v1/training/progress`, `/api/v1/analytics/training`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `POST /api/v1/training/progress`: what was kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProgressAck {
    /// Records in the request.
    pub received: u64,
    /// Records newly stored.
    pub stored: u64,
    /// Records already stored (same record_id).
    pub duplicates: u64,
}

/// One training workload's month.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TrainingWorkload {
    /// Its namespace.
    pub namespace: String,
    /// The workload (job) name.
    pub workload: String,
    /// The namespace's owner at the last report.
    pub tenant: Option<String>,
    /// That tenant's department.
    pub department: Option<String>,
    /// Steps done in the month (`null`: not reported).
    pub steps: Option<i64>,
    /// Samples done in the month (`null`: not reported).
    pub samples: Option<i64>,
    /// GPU-hours of its pods in the month, a decimal string.
    pub gpu_hours: String,
    /// Steps per GPU-hour, a decimal string (`null`: no steps or no GPU-hours).
    pub steps_per_gpu_hour: Option<String>,
    /// Samples per GPU-hour, a decimal string.
    pub samples_per_gpu_hour: Option<String>,
}

/// `GET /api/v1/analytics/training`: work per GPU-hour of the month's training workloads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Training {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// What the figures are (analytics, never billed).
    pub basis: String,
    /// The workloads the caller may see.
    pub workloads: Vec<TrainingWorkload>,
}
