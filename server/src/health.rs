//! Liveness and readiness.

use axum::{Json, Router, extract::State, routing::get};
use gpuledger_api::health::{Alive, Ready};

use crate::{error::AppError, state::AppState};

/// What these handlers take, for the API document.
pub(crate) fn inputs() -> Vec<crate::describe::Inputs> {
    vec![crate::describe::inputs("get", "/healthz", healthz), crate::describe::inputs("get", "/readyz", readyz)]
}

/// `/healthz` and `/readyz`.
pub fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

/// Alive: the process answers. Never touches the database, so a database outage does not restart pods.
async fn healthz() -> Json<Alive> {
    Json(Alive { status: gpuledger_api::states::AliveStatus::Ok })
}

/// Ready: the database answers and its schema is the one this binary expects.
async fn readyz(State(state): State<AppState>) -> Result<Json<Ready>, AppError> {
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
    Ok(Json(Ready { status: gpuledger_api::states::ReadyStatus::Ready, schema_version: r.applied }))
}

/// A startup step the server must finish before it is ready (the demo loading its history): while closed,
/// `/readyz` answers 503 with the gate's reason, whatever the database says.
#[derive(Debug, Clone, Default)]
pub struct StartupGate(std::sync::Arc<std::sync::RwLock<Option<String>>>);

impl StartupGate {
    /// A gate closed for `reason` (e.g. "demo data still loading").
    pub fn closed(reason: impl Into<String>) -> Self {
        Self(std::sync::Arc::new(std::sync::RwLock::new(Some(reason.into()))))
    }

    /// Opens the gate: readiness is the database's again.
    pub fn open(&self) {
        if let Ok(mut reason) = self.0.write() {
            *reason = None;
        }
    }

    /// Why the server is not ready yet, while the gate is closed.
    pub fn reason(&self) -> Option<String> {
        self.0.read().map_or_else(|e| e.into_inner().clone(), |r| r.clone())
    }

    /// `router` with `/readyz` answering 503 (problem JSON naming the reason) while the gate is closed.
    pub fn guard(self, router: Router) -> Router {
        router.layer(axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            let reason = if request.uri().path() == "/readyz" { self.reason() } else { None };
            async move {
                match reason {
                    Some(reason) => axum::response::IntoResponse::into_response(AppError::Unavailable(reason)),
                    None => next.run(request).await,
                }
            }
        }))
    }
}

/// This process's resident memory now (MiB; 0 where `/proc` cannot say): logged at the steps of long work (the
/// close) so an operator sees what a month of a large fleet costs.
pub fn rss_mib() -> u64 {
    proc_status_kib("VmRSS:") / 1024
}

/// This process's peak resident memory so far (MiB; 0 where `/proc` cannot say).
pub fn peak_rss_mib() -> u64 {
    proc_status_kib("VmHWM:") / 1024
}

fn proc_status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()))
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use axum::{body::Body, http::StatusCode};
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_closed_gate_keeps_readyz_unavailable_with_its_reason() {
        let gate = StartupGate::closed("demo data still loading");
        let app = gate
            .clone()
            .guard(Router::new().route("/readyz", get(|| async { "ready" })).route("/healthz", get(|| async { "ok" })));
        let get = |path: &'static str| {
            let app = app.clone();
            async move {
                let response = app.oneshot(axum::http::Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
                let status = response.status();
                let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
        };
        let (status, body) = get("/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("demo data still loading"), "{body}");
        assert_eq!(get("/healthz").await.0, StatusCode::OK, "liveness is not gated");
        gate.open();
        assert_eq!(get("/readyz").await, (StatusCode::OK, "ready".to_string()));
    }
}
