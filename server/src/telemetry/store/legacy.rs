//! SQL of the telemetry stored in earlier forms, which the upkeep moves into the tiers: rows taken (deleted and
//! returned) a chunk at a time, and the series they belong to.

use std::collections::HashMap;

use gpuledger_core::ids::ClusterId;
use time::OffsetDateTime;
use uuid::Uuid;

use super::unix_ms;
use crate::db::{DbError, OrgTx};

/// A row stored before the tiers (`telemetry_rollups`), moved by the upkeep.
#[derive(sqlx::FromRow)]
pub(crate) struct LegacyRow {
    pub(crate) cluster_id: Uuid,
    pub(crate) gpu_uuid: String,
    pub(crate) gpu_instance_id: i32,
    pub(crate) window_start: OffsetDateTime,
    pub(crate) window_end: OffsetDateTime,
    pub(crate) node: String,
    pub(crate) mig_profile: Option<String>,
    pub(crate) samples: i32,
    pub(crate) util_min: Option<f32>,
    pub(crate) util_avg: Option<f32>,
    pub(crate) util_max: Option<f32>,
    pub(crate) mem_used_min: Option<f32>,
    pub(crate) mem_used_avg: Option<f32>,
    pub(crate) mem_used_max: Option<f32>,
    pub(crate) power_min: Option<f32>,
    pub(crate) power_avg: Option<f32>,
    pub(crate) power_max: Option<f32>,
    pub(crate) energy_j: Option<f64>,
    pub(crate) pod_namespace: Option<String>,
    pub(crate) pod_name: Option<String>,
    pub(crate) pod_uid: Option<Uuid>,
}

/// Takes (deletes and returns) up to `limit` rows stored before the tiers.
pub(crate) async fn take_legacy_rows(tx: &mut OrgTx, limit: i64) -> Result<Vec<LegacyRow>, DbError> {
    let rows: Vec<LegacyRow> = sqlx::query_as(
        "WITH picked AS (SELECT cluster_id, gpu_uuid, gpu_instance_id, window_start FROM telemetry_rollups
                          WHERE org_id = $1 LIMIT $2)
         DELETE FROM telemetry_rollups t USING picked p
          WHERE t.org_id = $1 AND t.cluster_id = p.cluster_id AND t.gpu_uuid = p.gpu_uuid
            AND t.gpu_instance_id = p.gpu_instance_id AND t.window_start = p.window_start
         RETURNING t.cluster_id, t.gpu_uuid, t.gpu_instance_id, t.window_start, t.window_end, t.node, t.mig_profile,
            t.samples, t.util_min, t.util_avg, t.util_max, t.mem_used_min, t.mem_used_avg, t.mem_used_max,
            t.power_min, t.power_avg, t.power_max, t.energy_j, t.pod_namespace, t.pod_name, t.pod_uid",
    )
    .bind(tx.org().as_uuid())
    .bind(limit)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// An hour of the tables before one row per GPU-hour (`telemetry_hours`, with its `telemetry_windows` block).
#[derive(sqlx::FromRow)]
pub(crate) struct OldHour {
    pub(crate) series_id: i64,
    pub(crate) hour: OffsetDateTime,
    pub(crate) windows: i16,
    pub(crate) samples: i32,
    pub(crate) sampled_ms: i32,
    pub(crate) span_from_ms: i32,
    pub(crate) span_to_ms: i32,
    pub(crate) util_ms: i32,
    pub(crate) util_sum: i64,
    pub(crate) util_max: i16,
    pub(crate) mem_max: i32,
    pub(crate) power_max: i32,
    pub(crate) energy_ms: i32,
    pub(crate) energy_j: i64,
}

/// Takes (deletes and returns) up to `limit` device-hours stored one row per device.
pub(crate) async fn take_old_hours(tx: &mut OrgTx, limit: i64) -> Result<Vec<OldHour>, DbError> {
    let org = tx.org().as_uuid();
    let hours: Vec<OldHour> = sqlx::query_as(
        "WITH picked AS (SELECT series_id, hour FROM telemetry_hours WHERE org_id = $1 LIMIT $2)
         DELETE FROM telemetry_hours t USING picked p
          WHERE t.org_id = $1 AND t.series_id = p.series_id AND t.hour = p.hour
         RETURNING t.series_id, t.hour, t.windows, t.samples, t.sampled_ms, t.span_from_ms, t.span_to_ms, t.util_ms,
                   t.util_sum, t.util_max, t.mem_max, t.power_max, t.energy_ms, t.energy_j",
    )
    .bind(org)
    .bind(limit)
    .fetch_all(tx.conn())
    .await?;
    Ok(hours)
}

/// Takes (deletes and returns) the blocks of the device-hours `series`×`hours` (pairwise): (series, hour in Unix ms)
/// → block.
pub(crate) async fn take_old_blocks(
    tx: &mut OrgTx,
    series: &[i64],
    hours: &[OffsetDateTime],
) -> Result<HashMap<(i64, i64), Vec<u8>>, DbError> {
    let org = tx.org().as_uuid();
    let blocks = sqlx::query_as::<_, (i64, OffsetDateTime, Vec<u8>)>(
        "DELETE FROM telemetry_windows w USING unnest($2::bigint[], $3::timestamptz[]) AS k(s, h)
          WHERE w.org_id = $1 AND w.series_id = k.s AND w.hour = k.h
         RETURNING w.series_id, w.hour, w.block",
    )
    .bind(org)
    .bind(series)
    .bind(hours)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(s, h, b)| ((s, unix_ms(h)), b))
    .collect();
    Ok(blocks)
}

/// The keys of series `ids`: ID → (cluster, GPU UUID, GPU instance, node, MIG profile).
#[allow(clippy::type_complexity)]
pub(crate) async fn series_keys(
    tx: &mut OrgTx,
    ids: &[i64],
) -> Result<HashMap<i64, (Uuid, String, i32, String, Option<String>)>, DbError> {
    let org = tx.org().as_uuid();
    let series = sqlx::query_as::<_, (i64, Uuid, String, i32, String, Option<String>)>(
        "SELECT series_id, cluster_id, gpu_uuid, gpu_instance_id, node, mig_profile FROM telemetry_series
              WHERE org_id = $1 AND series_id = ANY($2)",
    )
    .bind(org)
    .bind(ids)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(id, c, g, gi, n, p)| (id, (c, g, gi, n, p)))
    .collect();
    Ok(series)
}

/// The whole-GPU series of `gpus` on `cluster`: GPU UUID → (series, node).
pub(crate) async fn whole_gpu_series(
    tx: &mut OrgTx,
    cluster: ClusterId,
    gpus: &[&str],
) -> Result<HashMap<String, (i64, String)>, DbError> {
    let org = tx.org().as_uuid();
    let stored = sqlx::query_as::<_, (String, i64, String)>(
        "SELECT gpu_uuid, series_id, node FROM telemetry_series
          WHERE org_id = $1 AND cluster_id = $2 AND gpu_instance_id = -1 AND gpu_uuid = ANY($3)",
    )
    .bind(org)
    .bind(cluster.as_uuid())
    .bind(gpus)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(g, id, n)| (g, (id, n)))
    .collect();
    Ok(stored)
}
