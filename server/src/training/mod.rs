//! Training progress: jobs report cumulative steps and/or samples; the portal shows work per GPU-hour.
//!
//! - `POST /api/v1/training/progress` (an agent token: the cluster the job runs in), NDJSON, one report per line:
//!   `{"record_id", "namespace", "workload", "reported_at", "steps"?, "samples"?}` — counters are cumulative (what
//!   a training loop knows); idempotent by `record_id`; one bad line refuses the body naming `line N: field`.
//! - `GET /api/v1/analytics/training?period=YYYY-MM` (readers): per workload, the work done in the month (the last
//!   report in it minus the last one before it, or minus the month's first report when there is none before; a
//!   counter that went down means a restart and counts from zero), the GPU-hours of its pods (allocations in that
//!   cluster and namespace named `<workload>` or `<workload>-…`, clipped to the month and to now), and steps and
//!   samples per GPU-hour. The tenant is the namespace's owner at the last report. Analytics only, never billed.

use axum::{
    Json, Router,
    extract::State,
    routing::{get, post},
};
use gpuledger_api::training::{ProgressAck, Training};
use serde::Deserialize;
use time::OffsetDateTime;

use crate::http::Params;
use crate::{
    auth,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, ReadLedger},
    state::AppState,
};

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("post", "/api/v1/training/progress", post_progress),
        described("get", "/api/v1/analytics/training", training),
    ]
}

pub mod store;
pub use store::store_facts;
pub(crate) use store::{insert_reports, workloads};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/training/progress", post(post_progress))
        .route("/api/v1/analytics/training", get(training))
}

const MAX_REPORTS: usize = 10_000;

/// One progress report.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressReport {
    /// The sender's unique ID (a retry sends the same).
    pub record_id: String,
    /// Kubernetes namespace of the job.
    pub namespace: String,
    /// The workload: a pod name, or a Job / run whose pods are named `<workload>-…`.
    pub workload: String,
    /// When the counters were read.
    #[serde(with = "time::serde::rfc3339")]
    pub reported_at: OffsetDateTime,
    /// Optimizer steps so far (cumulative).
    #[serde(default)]
    pub steps: Option<u64>,
    /// Samples (or tokens) processed so far (cumulative).
    #[serde(default)]
    pub samples: Option<u64>,
}

/// Parses an NDJSON body of reports; errors name the line and the field.
pub fn parse_reports(body: &[u8], now: OffsetDateTime) -> Result<Vec<ProgressReport>, AppError> {
    crate::usage::parse_ndjson(body, MAX_REPORTS, "reports", |r| check(r, now))
}

fn check(r: &ProgressReport, now: OffsetDateTime) -> Result<(), (&'static str, String)> {
    for (field, v, max) in
        [("record_id", &r.record_id, 200), ("namespace", &r.namespace, 253), ("workload", &r.workload, 253)]
    {
        if v.trim().is_empty() || v.chars().count() > max || v.chars().any(char::is_control) {
            return Err((field, format!("must be 1 to {max} printable characters")));
        }
    }
    if r.steps.is_none() && r.samples.is_none() {
        return Err(("steps", "one of steps or samples is required".into()));
    }
    for (field, v) in [("steps", r.steps), ("samples", r.samples)] {
        if v.is_some_and(|v| i64::try_from(v).is_err()) {
            return Err((field, "too large".into()));
        }
    }
    if r.reported_at > now + time::Duration::minutes(5) {
        return Err(("reported_at", "is in the future".into()));
    }
    Ok(())
}

/// Checks a `training_progress` fact like a report of the API (the event ID is its record ID).
pub fn check_fact(
    t: &gpuledger_core::wire::TrainingProgressFact,
    event_id: &str,
    now: OffsetDateTime,
) -> Result<(), (&'static str, String)> {
    check(&report_of(event_id, t), now)
}

fn report_of(event_id: &str, t: &gpuledger_core::wire::TrainingProgressFact) -> ProgressReport {
    ProgressReport {
        record_id: event_id.to_owned(),
        namespace: t.namespace.clone(),
        workload: t.workload.clone(),
        reported_at: t.reported_at,
        steps: t.steps,
        samples: t.samples,
    }
}

async fn post_progress(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Json<ProgressAck>, AppError> {
    // The credential first: a caller that may not send progress is refused whatever the body is.
    let principal = auth::authenticate(&state.db, request.headers()).await?;
    let Some(cluster) = principal.agent_cluster() else {
        return Err(AppError::Forbidden("training progress is sent with an agent token (the job's cluster)".into()));
    };
    let body = crate::http::body_bytes(request, &state).await?;
    let reports = parse_reports(&body, OffsetDateTime::now_utc())?;
    let mut tx = principal.begin(&state.db).await?;
    let stored = insert_reports(&mut tx, principal.org, cluster, &reports).await?;
    tx.commit().await?;
    let received = reports.len() as u64;
    Ok(Json(ProgressAck { received, stored, duplicates: received - stored }))
}

/// Work done over a series of cumulative readings (in time order), a restart (a drop) counting from zero.
fn done(before: Option<i64>, readings: &[i64]) -> i64 {
    let mut total = 0i64;
    let mut last = before;
    for &v in readings {
        total += match last {
            Some(l) if v >= l => v - l,
            Some(_) => v,
            None => 0,
        };
        last = Some(v);
    }
    total
}

async fn training(
    State(state): State<AppState>,
    principal: Caller<ReadLedger>,
    Params(q): Params<gpuledger_api::params::MonthParams>,
) -> Result<Json<Training>, AppError> {
    let period = q.period.period();
    let visible = principal.visible(&state.db).await?;
    let tx = state.db.begin_org(principal.org).await?;
    let (period, rows) = workloads(tx, period, &visible).await?;
    Ok(Json(Training {
        period: period.to_string(),
        basis: TRAINING_BASIS.into(),
        workloads: rows.into_iter().map(|(_, row)| row).collect(),
    }))
}

/// What the training report says its figures are.
pub(crate) const TRAINING_BASIS: &str = "analytics only: work reported by the jobs over the GPU-hours of their pods";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn cumulative_counters_and_restarts() {
        assert_eq!(done(Some(100), &[150, 210]), 110);
        assert_eq!(done(None, &[150, 210]), 60, "the month's first reading is the baseline");
        assert_eq!(done(Some(100), &[150, 20, 50]), 50 + 20 + 30, "a drop is a restart from zero");
        assert_eq!(done(None, &[]), 0);
    }

    #[test]
    fn reports_name_line_and_field() {
        let now = time::macros::datetime!(2026-11-29 12:00 UTC);
        let ok = r#"{"record_id":"p1","namespace":"ml","workload":"llm-pretrain","reported_at":"2026-11-29T10:00:00Z","steps":10}"#;
        assert_eq!(parse_reports(ok.as_bytes(), now).unwrap()[0].steps, Some(10));
        let field = |b: String| match parse_reports(b.as_bytes(), now).unwrap_err() {
            AppError::Invalid { field, .. } => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(format!("{ok}\n{}", ok.replace(r#","steps":10"#, ""))), "line 2: steps");
        assert_eq!(field(format!("{ok}\n{}", ok.replace("llm-pretrain", ""))), "line 2: workload");
        assert_eq!(field(ok.replace("2026-11-29T10", "2027-11-29T10")), "line 1: reported_at");
        assert_eq!(field(ok.replace("10}", "-1}")), "line 1: steps");
    }
}
