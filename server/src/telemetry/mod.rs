//! Telemetry in tiers (issue 31): full-resolution windows as one compact block per device and hour, and the hour's
//! exact sums beside it (`store`); what each cluster and node sends and what keeping it costs (`coverage`).

pub mod store;
pub mod upgrade;

use axum::{Json, Router, extract::State, routing::get};
use gpuledger_api::telemetry::{Coverage, CoverageRow, CoverageStatus};
use gpuledger_core::{Fraction, Period, decimal::Decimal};
use serde::Deserialize;
use time::OffsetDateTime;

use crate::{
    error::AppError,
    http::{Administer, Caller, Params, parse_period},
    state::AppState,
};

/// Bytes one `telemetry_gpu_hours` row takes on disk besides its block and its instances' sums (tuple header, key,
/// the GPU's sums, primary-key entry; measured on PostgreSQL 15 with `pg_total_relation_size` over a demo month:
/// docs/telemetry.md).
pub const GPU_HOUR_ROW_BYTES: i64 = 205;
/// Share of held hours below which a node's telemetry is `partial`.
const PARTIAL_BELOW: f64 = 0.9;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/telemetry/coverage", get(get_coverage))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoverageQuery {
    period: Option<String>,
}

/// `GET /api/v1/telemetry/coverage?period=YYYY-MM` (admins): per cluster and node.
async fn get_coverage(
    State(state): State<AppState>,
    p: Caller<Administer>,
    Params(q): Params<CoverageQuery>,
) -> Result<Json<Coverage>, AppError> {
    read_coverage(&state, &p, q.period.as_deref()).await.map(Json)
}

/// The month's coverage (`GET /api/v1/telemetry/coverage`): `period` as given (`None`: this month).
pub(crate) async fn read_coverage(
    state: &AppState,
    p: &crate::auth::Principal,
    period: Option<&str>,
) -> Result<Coverage, AppError> {
    let now = OffsetDateTime::now_utc();
    let period = match period {
        Some(s) => parse_period("period", s)?,
        None => Period::containing(now),
    };
    let mut tx = state.db.begin_org(p.org).await?;
    let answer = coverage(&mut tx, period, now).await?;
    tx.commit_quiet().await?;
    Ok(answer)
}

/// The month's coverage (what the API answers and the portal page shows).
pub async fn coverage(tx: &mut crate::db::OrgTx, period: Period, now: OffsetDateTime) -> Result<Coverage, AppError> {
    let (start, end) = crate::calendar::charged_bounds(tx, period).await?;
    let rows = store::coverage(tx, start, end, now).await?;
    let rfc3339 = |t: OffsetDateTime| gpuledger_core::time_fmt::try_rfc3339(t).map_err(AppError::from);
    let (mut clusters, mut nodes) = (Vec::new(), Vec::new());
    for r in rows {
        let with_telemetry = Decimal::round(Fraction::new(i128::from(r.gpu_ms), 3_600_000)?, 2)?;
        let held: f64 = r.held_hours.parse().unwrap_or(0.0);
        let covered = r.gpu_ms as f64 / 3_600_000.0;
        let (status, fix) = if r.windows == 0 && held > 0.0 {
            (
                CoverageStatus::Silent,
                Some(
                    "no telemetry while GPUs were held: run the node agent (gpuledger-agent node) on this node, or \
                     point it at the node's DCGM Exporter; energy and idle detection need it"
                        .to_string(),
                ),
            )
        } else if held > 0.0 && covered < held * PARTIAL_BELOW {
            (
                CoverageStatus::Partial,
                Some(format!(
                    "telemetry covers {covered:.1} of {held:.1} GPU-hours held: check the node agent's logs and \
                     restarts on this node (a gap shows where it stopped)"
                )),
            )
        } else {
            (CoverageStatus::Reporting, None)
        };
        let row = CoverageRow {
            cluster_id: r.cluster_id.to_string(),
            cluster: r.cluster,
            node: r.node.clone(),
            gpus: u64::try_from(r.gpus).unwrap_or(0),
            mig_instances: u64::try_from(r.mig_instances).unwrap_or(0),
            gpu_hours_held: r.held_hours,
            gpu_hours_with_telemetry: with_telemetry.to_string(),
            windows: u64::try_from(r.windows).unwrap_or(0),
            median_window_secs: r
                .median_window_ms
                .map(|ms| Decimal::from_scaled(i128::from(ms), 3).map(|d| d.normalized().to_string()))
                .transpose()?,
            bytes_full_resolution: u64::try_from(r.block_bytes).unwrap_or(0),
            bytes_hourly: u64::try_from(r.hour_rows * GPU_HOUR_ROW_BYTES + r.inst_sums_bytes).unwrap_or(0),
            last_hour: r.last_hour.map(rfc3339).transpose()?,
            status,
            fix,
        };
        match r.node {
            Some(_) => nodes.push(row),
            None => clusters.push(row),
        }
    }
    Ok(Coverage { period: period.to_string(), starts_at: rfc3339(start)?, ends_at: rfc3339(end)?, clusters, nodes })
}
