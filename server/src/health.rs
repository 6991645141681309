//! Liveness and readiness.

use axum::{Json, Router, extract::State, routing::get};
use serde_json::{Value, json};

use crate::{app::AppState, error::AppError};

/// `/healthz` and `/readyz`.
pub fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

/// Alive: the process answers. Never touches the database, so a database outage does not restart pods.
async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Ready: the database answers and its schema is the one this binary expects.
async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, AppError> {
    let r = state.db.readiness().await;
    if !r.reachable {
        return Err(AppError::Unavailable("database unreachable".into()));
    }
    if !r.is_ready() {
        return Err(AppError::Unavailable(format!(
            "schema at migration {} but this binary expects {}; run `gpuledger-server migrate`",
            r.applied.map_or_else(|| "none".into(), |v| v.to_string()),
            r.expected.map_or_else(|| "none".into(), |v| v.to_string()),
        )));
    }
    Ok(Json(json!({ "status": "ready", "schema_version": r.applied })))
}
