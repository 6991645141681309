//! Liveness and readiness (`/healthz`, `/readyz`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `GET /healthz`: the process answers (never touches the database).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Alive {
    /// Always `ok`.
    pub status: crate::states::AliveStatus,
}

/// `GET /readyz`: the database answers and its schema is the one this binary expects (else 503, a problem).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ready {
    /// Always `ready`.
    pub status: crate::states::ReadyStatus,
    /// The newest migration applied.
    pub schema_version: Option<i64>,
}
