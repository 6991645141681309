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

use std::collections::BTreeMap;

use axum::{
    Json, Router,
    extract::{Query, State, rejection::QueryRejection},
    http::HeaderMap,
    routing::{get, post},
};
use gpuledger_api::training::{ProgressAck, Training, TrainingWorkload};
use gpuledger_core::{Fraction, NANOS_PER_HOUR, Period};
use serde::Deserialize;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    app::AppState,
    auth,
    auth::Visible,
    db::OrgTx,
    error::AppError,
    http::{Caller, ReadLedger},
};

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

/// Stores the agents' `training_progress` facts (checked by ingest) like reports of the API, idempotent by event ID.
pub async fn store_facts(
    tx: &mut crate::db::OrgTx,
    org: gpuledger_core::ids::OrgId,
    cluster: gpuledger_core::ids::ClusterId,
    facts: &[(&str, &gpuledger_core::wire::TrainingProgressFact)],
) -> Result<u64, AppError> {
    let reports: Vec<ProgressReport> = facts.iter().map(|(id, t)| report_of(id, t)).collect();
    store(tx, org, cluster, &reports).await
}

async fn store(
    tx: &mut crate::db::OrgTx,
    org: gpuledger_core::ids::OrgId,
    cluster: gpuledger_core::ids::ClusterId,
    reports: &[ProgressReport],
) -> Result<u64, AppError> {
    let big = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    let ids: Vec<&str> = reports.iter().map(|r| r.record_id.as_str()).collect();
    let namespaces: Vec<&str> = reports.iter().map(|r| r.namespace.as_str()).collect();
    let workloads: Vec<&str> = reports.iter().map(|r| r.workload.as_str()).collect();
    let ats: Vec<OffsetDateTime> = reports.iter().map(|r| r.reported_at).collect();
    let steps: Vec<Option<i64>> = reports.iter().map(|r| big(r.steps)).collect();
    let samples: Vec<Option<i64>> = reports.iter().map(|r| big(r.samples)).collect();
    Ok(sqlx::query(
        "INSERT INTO training_progress (org_id, record_id, cluster_id, namespace, workload, reported_at, steps, samples)
         SELECT $1, r.id, $2, r.ns, r.w, r.at, r.steps, r.samples
           FROM unnest($3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::int8[], $8::int8[])
             AS r(id, ns, w, at, steps, samples)
         ON CONFLICT (org_id, record_id) DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&ids)
    .bind(&namespaces)
    .bind(&workloads)
    .bind(&ats)
    .bind(&steps)
    .bind(&samples)
    .execute(tx.conn())
    .await?
    .rows_affected())
}

async fn post_progress(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<ProgressAck>, AppError> {
    let principal = auth::authenticate(&state.db, &headers).await?;
    let Some(cluster) = principal.agent_cluster() else {
        return Err(AppError::Forbidden("training progress is sent with an agent token (the job's cluster)".into()));
    };
    let reports = parse_reports(&body, OffsetDateTime::now_utc())?;
    let mut tx = principal.begin(&state.db).await?;
    let stored = store(&mut tx, principal.org, cluster, &reports).await?;
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

type Reading = (Uuid, String, String, OffsetDateTime, Option<i64>, Option<i64>);

async fn training(
    State(state): State<AppState>,
    principal: Caller<ReadLedger>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<Training>, AppError> {
    let Query(pairs) = query.map_err(|e| AppError::invalid("query", e.body_text()))?;
    let params = crate::analytics::checked_params(&pairs, &["period"])?;
    let period = crate::policy::parse_period("period", params.get("period").copied().unwrap_or_default())?;
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

/// The month's training workloads `visible` may see (`None`: the whole organization, which the read model stores
/// as the month's summary), each with its owner's department.
pub(crate) async fn workloads(
    mut tx: OrgTx,
    period: Period,
    visible: &Option<Visible>,
) -> Result<(Period, Vec<(Option<Uuid>, TrainingWorkload)>), AppError> {
    let (month, to) = crate::analytics::month_so_far(period)?;
    let from = month.start();
    let internal = |e: gpuledger_core::DomainError| AppError::Internal(e.to_string());
    let org = tx.org().as_uuid();
    // The month's readings, and the last one before the month, of every workload reporting in the month.
    let readings: Vec<Reading> = sqlx::query_as(
        "SELECT cluster_id, namespace, workload, reported_at, steps, samples FROM training_progress p
          WHERE p.org_id = $3 AND reported_at < $2 AND (reported_at >= $1 OR reported_at = (
                SELECT max(q.reported_at) FROM training_progress q
                 WHERE q.org_id = $3 AND q.cluster_id = p.cluster_id AND q.namespace = p.namespace
                   AND q.workload = p.workload AND q.reported_at < $1))
          ORDER BY cluster_id, namespace, workload, reported_at",
    )
    .bind(from)
    .bind(month.end())
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let mut by: BTreeMap<(Uuid, String, String), Vec<Reading>> = BTreeMap::new();
    for r in readings {
        by.entry((r.0, r.1.clone(), r.2.clone())).or_default().push(r);
    }
    let mut rows = Vec::new();
    for ((cluster, namespace, workload), rs) in by {
        let (before, inside): (Vec<&Reading>, Vec<&Reading>) = rs.iter().partition(|r| r.3 < from);
        if inside.is_empty() {
            continue;
        }
        let series = |pick: fn(&Reading) -> Option<i64>| {
            let prior = before.last().and_then(|r| pick(r));
            let values: Vec<i64> = inside.iter().filter_map(|r| pick(r)).collect();
            (!values.is_empty()).then(|| done(prior, &values))
        };
        let steps = series(|r| r.4);
        let samples = series(|r| r.5);
        let allocations: Vec<(i64, i64, OffsetDateTime, Option<OffsetDateTime>)> = sqlx::query_as(
            "SELECT fraction_num, fraction_den, started_at, ended_at FROM allocation_intervals
              WHERE cluster_id = $1 AND namespace = $2 AND fraction_num IS NOT NULL AND fraction_den IS NOT NULL
                AND (holder_name = $3 OR starts_with(holder_name, $3 || '-'))
                AND started_at < $5 AND (ended_at IS NULL OR ended_at > $4) AND org_id = $6",
        )
        .bind(cluster)
        .bind(&namespace)
        .bind(&workload)
        .bind(from)
        .bind(to)
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
        let mut nanos = Fraction::ZERO;
        for (num, den, s, e) in allocations {
            let (s, e) = (s.max(from), e.map_or(to, |e| e.min(to)));
            if s < e {
                let f = Fraction::new(i128::from(num), i128::from(den)).map_err(internal)?;
                nanos = nanos
                    .checked_add(f.checked_mul_int((e - s).whole_nanoseconds()).map_err(internal)?)
                    .map_err(internal)?;
            }
        }
        let hours = nanos.checked_div(Fraction::from_integer(NANOS_PER_HOUR).map_err(internal)?).map_err(internal)?;
        let last_at = inside.last().map_or(to, |r| r.3);
        let owner: Option<(Uuid, String, String, Uuid)> = sqlx::query_as(
            "SELECT t.tenant_id, t.name, d.name, d.department_id FROM namespaces n
               JOIN namespace_ownership o ON o.org_id = n.org_id AND o.namespace_uid = n.namespace_uid
                AND o.valid_from <= $3 AND (o.valid_to IS NULL OR o.valid_to > $3)
               JOIN tenants t ON t.org_id = o.org_id AND t.tenant_id = o.tenant_id
               JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
              WHERE n.org_id = $4 AND n.cluster_id = $1 AND n.name = $2 ORDER BY n.created_at DESC LIMIT 1",
        )
        .bind(cluster)
        .bind(&namespace)
        .bind(last_at)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?;
        if !Visible::tenant(visible, owner.as_ref().map(|o| o.0)) {
            continue;
        }
        let per_hour = |work: Option<i64>| -> Result<Option<String>, AppError> {
            Ok(match work {
                Some(w) if !hours.is_zero() => Some(
                    Fraction::from(u64::try_from(w).unwrap_or(0))
                        .checked_div(hours)
                        .and_then(|r| r.to_decimal_string(1))
                        .map_err(internal)?,
                ),
                _ => None,
            })
        };
        rows.push((
            owner.as_ref().map(|o| o.3),
            TrainingWorkload {
                namespace: namespace.clone(),
                workload: workload.clone(),
                tenant: owner.as_ref().map(|o| o.1.clone()),
                department: owner.as_ref().map(|o| o.2.clone()),
                steps,
                samples,
                gpu_hours: hours.to_decimal_string(3).map_err(internal)?,
                steps_per_gpu_hour: per_hour(steps)?,
                samples_per_gpu_hour: per_hour(samples)?,
            },
        ));
    }
    tx.commit().await?;
    Ok((period, rows))
}

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
