//! SQL of the telemetry tiers: series, full-resolution blocks per device-hour, and the hours' exact sums.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};

use flate2::{Compression, read::DeflateDecoder, write::DeflateEncoder};
use gpuledger_core::{
    ids::ClusterId,
    ledger::{DeviceEnergy, EnergySpan},
    telemetry::{HourSums, Window, WindowError, decode, encode, merge},
};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// One device's windows as an agent (or the upkeep) delivers them.
pub struct SeriesWindows {
    /// Physical GPU UUID.
    pub gpu_uuid: String,
    /// MIG GPU instance ID (-1: the whole GPU).
    pub gpu_instance_id: i32,
    /// The node that reported the latest of them.
    pub node: String,
    /// MIG profile, for instances.
    pub mig_profile: Option<String>,
    /// The windows.
    pub windows: Vec<Window>,
}

/// Most bytes a decompressed block may have (3,600 windows of the widest kind fit many times over).
const MAX_BLOCK_BYTES: u64 = 4 << 20;

fn deflate(raw: &[u8]) -> Result<Vec<u8>, DbError> {
    let mut e = DeflateEncoder::new(Vec::with_capacity(raw.len() / 2), Compression::fast());
    e.write_all(raw).map_err(|e| DbError::Data(e.to_string()))?;
    e.finish().map_err(|e| DbError::Data(e.to_string()))
}

/// Decompresses and decodes a stored block.
pub fn unpack(hour: OffsetDateTime, block: &[u8]) -> Result<Vec<Window>, DbError> {
    let mut raw = Vec::new();
    DeflateDecoder::new(block)
        .take(MAX_BLOCK_BYTES)
        .read_to_end(&mut raw)
        .map_err(|e| DbError::Data(format!("telemetry block of {hour}: {e}")))?;
    decode(unix_ms(hour), &raw).map_err(|e| DbError::Data(format!("telemetry block of {hour}: {e}")))
}

/// Compresses windows of one hour as stored.
pub fn pack(hour_ms: i64, windows: &[Window]) -> Result<Vec<u8>, DbError> {
    deflate(&encode(hour_ms, windows))
}

fn unix_ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The instant of Unix milliseconds `ms` (clamped to the representable range).
pub fn at_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// The series IDs of the devices, made where new; a device reported from another node (or with another MIG
/// profile) is updated to the latest.
pub async fn series_ids(
    tx: &mut OrgTx,
    cluster: ClusterId,
    devices: &[(&str, i32, &str, Option<&str>)],
) -> Result<Vec<i64>, DbError> {
    let org = tx.org().as_uuid();
    let gpu: Vec<&str> = devices.iter().map(|d| d.0).collect();
    let gi: Vec<i32> = devices.iter().map(|d| d.1).collect();
    let node: Vec<&str> = devices.iter().map(|d| d.2).collect();
    let profile: Vec<Option<&str>> = devices.iter().map(|d| d.3).collect();
    sqlx::query(
        "INSERT INTO telemetry_series (org_id, cluster_id, gpu_uuid, gpu_instance_id, node, mig_profile)
         SELECT $1, $2, * FROM unnest($3::text[], $4::int[], $5::text[], $6::text[]) ORDER BY 1, 2
         ON CONFLICT DO NOTHING",
    )
    .bind(org)
    .bind(cluster.as_uuid())
    .bind(&gpu)
    .bind(&gi)
    .bind(&node)
    .bind(&profile)
    .execute(tx.conn())
    .await?;
    let rows: Vec<(String, i32, i64, String, Option<String>)> = sqlx::query_as(
        "SELECT gpu_uuid, gpu_instance_id, series_id, node, mig_profile FROM telemetry_series
          WHERE org_id = $1 AND cluster_id = $2 AND gpu_uuid = ANY($3)",
    )
    .bind(org)
    .bind(cluster.as_uuid())
    .bind(&gpu)
    .fetch_all(tx.conn())
    .await?;
    let found: HashMap<(&str, i32), (i64, &str, Option<&str>)> =
        rows.iter().map(|(g, i, s, n, p)| ((g.as_str(), *i), (*s, n.as_str(), p.as_deref()))).collect();
    let mut ids = Vec::with_capacity(devices.len());
    let mut moved: Vec<(i64, &str, Option<&str>)> = Vec::new();
    for (g, i, n, p) in devices {
        let (id, node, profile) =
            *found.get(&(*g, *i)).ok_or_else(|| DbError::Data(format!("telemetry series of {g} not stored")))?;
        if node != *n || profile != *p {
            moved.push((id, n, *p));
        }
        ids.push(id);
    }
    if !moved.is_empty() {
        sqlx::query(
            "UPDATE telemetry_series s SET node = u.n, mig_profile = u.p
               FROM unnest($2::bigint[], $3::text[], $4::text[]) AS u(id, n, p)
              WHERE s.org_id = $1 AND s.series_id = u.id",
        )
        .bind(org)
        .bind(moved.iter().map(|m| m.0).collect::<Vec<_>>())
        .bind(moved.iter().map(|m| m.1).collect::<Vec<_>>())
        .bind(moved.iter().map(|m| m.2).collect::<Vec<_>>())
        .execute(tx.conn())
        .await?;
    }
    Ok(ids)
}

/// Device-hours as column vectors: each hour's block (for `telemetry_windows`) and sums (for `telemetry_hours`).
#[derive(Default)]
pub struct HourRows {
    series: Vec<i64>,
    hour: Vec<OffsetDateTime>,
    windows: Vec<i16>,
    blocks: Vec<Vec<u8>>,
    sums: Vec<HourSums>,
}

impl HourRows {
    /// Adds series `series`'s windows of hour `hour_ms` (sorted by start, one per start).
    pub fn push(&mut self, series: i64, hour_ms: i64, windows: &[Window]) -> Result<(), DbError> {
        self.series.push(series);
        self.hour.push(at_ms(hour_ms));
        self.windows.push(i16::try_from(windows.len()).map_err(|_| DbError::Data("too many windows".into()))?);
        self.blocks.push(pack(hour_ms, windows)?);
        self.sums.push(HourSums::of(hour_ms, windows));
        Ok(())
    }
}

fn int(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// Inserts the hours' blocks where no block of that device-hour is stored yet; returns the device-hours inserted.
pub async fn insert_blocks(tx: &mut OrgTx, rows: &HourRows) -> Result<Vec<(i64, OffsetDateTime)>, DbError> {
    Ok(sqlx::query_as(
        "INSERT INTO telemetry_windows (org_id, series_id, hour, windows, block)
         SELECT $1, * FROM unnest($2::bigint[], $3::timestamptz[], $4::smallint[], $5::bytea[])
         ON CONFLICT DO NOTHING RETURNING series_id, hour",
    )
    .bind(tx.org().as_uuid())
    .bind(&rows.series)
    .bind(&rows.hour)
    .bind(&rows.windows)
    .bind(&rows.blocks)
    .fetch_all(tx.conn())
    .await?)
}

/// Writes the hours' sums (inserting, or replacing an hour's sums by those of its whole merged block).
pub async fn write_sums(tx: &mut OrgTx, rows: &HourRows) -> Result<(), DbError> {
    let s = &rows.sums;
    let col = |f: fn(&HourSums) -> i64| s.iter().map(|x| int(f(x))).collect::<Vec<i32>>();
    let big = |f: fn(&HourSums) -> i64| s.iter().map(f).collect::<Vec<i64>>();
    sqlx::query(
        "INSERT INTO telemetry_hours (org_id, series_id, hour, windows, samples, sampled_ms, span_from_ms, span_to_ms,
             util_ms, util_sum, util_max, mem_max, power_max, energy_ms, energy_j, block_bytes)
         SELECT $1, * FROM unnest($2::bigint[], $3::timestamptz[], $4::smallint[], $5::int[], $6::int[], $7::int[],
             $8::int[], $9::int[], $10::bigint[], $11::smallint[], $12::int[], $13::int[], $14::int[], $15::bigint[],
             $16::int[])
         ON CONFLICT (org_id, series_id, hour) DO UPDATE SET block_bytes = EXCLUDED.block_bytes, windows = EXCLUDED.windows, samples = EXCLUDED.samples,
             sampled_ms = EXCLUDED.sampled_ms, span_from_ms = EXCLUDED.span_from_ms,
             span_to_ms = EXCLUDED.span_to_ms, util_ms = EXCLUDED.util_ms, util_sum = EXCLUDED.util_sum,
             util_max = EXCLUDED.util_max, mem_max = EXCLUDED.mem_max, power_max = EXCLUDED.power_max,
             energy_ms = EXCLUDED.energy_ms, energy_j = EXCLUDED.energy_j",
    )
    .bind(tx.org().as_uuid())
    .bind(&rows.series)
    .bind(&rows.hour)
    .bind(&rows.windows)
    .bind(col(|x| x.samples))
    .bind(col(|x| x.sampled_ms))
    .bind(col(|x| x.span_from_ms))
    .bind(col(|x| x.span_to_ms))
    .bind(col(|x| x.util_ms))
    .bind(big(|x| x.util_sum))
    .bind(s.iter().map(|x| i16::try_from(x.util_max).unwrap_or(i16::MAX)).collect::<Vec<_>>())
    .bind(col(|x| x.mem_max))
    .bind(col(|x| x.power_max))
    .bind(col(|x| x.energy_ms))
    .bind(big(|x| x.energy_j))
    .bind(rows.blocks.iter().map(|b| int(b.len() as i64)).collect::<Vec<i32>>())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Stores windows in both tiers: each device-hour's block gains the windows it did not have (a redelivered window
/// changes nothing) and its sums are those of the whole merged block. Returns how many windows were new.
///
/// Concurrent batches touching the same hour are serialised on its block row: new hours are inserted first (a
/// concurrent insert of the same hour waits and then finds it), existing ones are locked `FOR UPDATE`, both in key
/// order.
pub async fn store_windows(tx: &mut OrgTx, cluster: ClusterId, series: Vec<SeriesWindows>) -> Result<u64, DbError> {
    if series.is_empty() {
        return Ok(0);
    }
    let devices: Vec<(&str, i32, &str, Option<&str>)> = series
        .iter()
        .map(|s| (s.gpu_uuid.as_str(), s.gpu_instance_id, s.node.as_str(), s.mig_profile.as_deref()))
        .collect();
    let ids = series_ids(tx, cluster, &devices).await?;
    // (series, hour ms) → its windows in this batch, merged (sorted, one per start).
    let mut hours: BTreeMap<(i64, i64), Vec<Window>> = BTreeMap::new();
    for (s, id) in series.into_iter().zip(ids) {
        for w in s.windows {
            hours.entry((id, w.hour_ms())).or_default().push(w);
        }
    }
    for ws in hours.values_mut() {
        let batch = std::mem::take(ws);
        merge(ws, batch);
    }
    let org = tx.org().as_uuid();

    // 1. Hours nobody stored yet: the batch's windows are the whole block.
    let mut fresh = HourRows::default();
    for ((id, hour), ws) in &hours {
        fresh.push(*id, *hour, ws)?;
    }
    let inserted = insert_blocks(tx, &fresh).await?;
    let mut added: u64 = 0;
    let inserted: std::collections::HashSet<(i64, i64)> = inserted.into_iter().map(|(s, h)| (s, unix_ms(h))).collect();
    let mut new_sums = HourRows::default();
    for (i, key) in hours.keys().enumerate() {
        if inserted.contains(key) {
            added += fresh.windows[i] as u64;
            new_sums.series.push(fresh.series[i]);
            new_sums.hour.push(fresh.hour[i]);
            new_sums.windows.push(fresh.windows[i]);
            new_sums.sums.push(fresh.sums[i]);
            new_sums.blocks.push(std::mem::take(&mut fresh.blocks[i]));
        }
    }
    if !new_sums.series.is_empty() {
        // An hour whose sums exist but whose block did not had its full resolution dropped by retention: its
        // windows cannot be merged exactly (a redelivery would count twice), so the hour's sums stand and the late
        // windows are not kept.
        let stale: Vec<(i64, OffsetDateTime)> = sqlx::query_as(
            "SELECT h.series_id, h.hour FROM telemetry_hours h
               JOIN unnest($2::bigint[], $3::timestamptz[]) AS k(s, h) ON h.series_id = k.s AND h.hour = k.h
              WHERE h.org_id = $1",
        )
        .bind(org)
        .bind(&new_sums.series)
        .bind(&new_sums.hour)
        .fetch_all(tx.conn())
        .await?;
        if !stale.is_empty() {
            let (s, h): (Vec<i64>, Vec<OffsetDateTime>) = stale.iter().copied().unzip();
            sqlx::query(
                "DELETE FROM telemetry_windows w USING unnest($2::bigint[], $3::timestamptz[]) AS k(s, h)
                  WHERE w.org_id = $1 AND w.series_id = k.s AND w.hour = k.h",
            )
            .bind(org)
            .bind(&s)
            .bind(&h)
            .execute(tx.conn())
            .await?;
            let stale: std::collections::HashSet<(i64, i64)> =
                stale.into_iter().map(|(s, h)| (s, unix_ms(h))).collect();
            tracing::warn!(hours = stale.len(), "late telemetry for hours whose full resolution was dropped: not kept");
            let mut kept = HourRows::default();
            for i in 0..new_sums.series.len() {
                if stale.contains(&(new_sums.series[i], unix_ms(new_sums.hour[i]))) {
                    added -= new_sums.windows[i] as u64;
                    continue;
                }
                kept.series.push(new_sums.series[i]);
                kept.hour.push(new_sums.hour[i]);
                kept.windows.push(new_sums.windows[i]);
                kept.sums.push(new_sums.sums[i]);
                kept.blocks.push(std::mem::take(&mut new_sums.blocks[i]));
            }
            new_sums = kept;
        }
    }
    if !new_sums.series.is_empty() {
        write_sums(tx, &new_sums).await?;
    }
    if inserted.len() == hours.len() {
        return Ok(added);
    }

    // 2. Hours already stored: merge into their blocks.
    let (keep_s, keep_h): (Vec<i64>, Vec<OffsetDateTime>) =
        hours.keys().filter(|k| !inserted.contains(k)).map(|(s, h)| (*s, at_ms(*h))).unzip();
    let stored: Vec<(i64, OffsetDateTime, Vec<u8>)> = sqlx::query_as(
        "SELECT w.series_id, w.hour, w.block FROM telemetry_windows w
           JOIN unnest($2::bigint[], $3::timestamptz[]) AS k(s, h) ON w.series_id = k.s AND w.hour = k.h
          WHERE w.org_id = $1 ORDER BY w.series_id, w.hour FOR UPDATE OF w",
    )
    .bind(org)
    .bind(&keep_s)
    .bind(&keep_h)
    .fetch_all(tx.conn())
    .await?;
    let mut changed = HourRows::default();
    for (id, hour, block) in stored {
        let hour_ms = unix_ms(hour);
        let Some(new) = hours.remove(&(id, hour_ms)) else { continue };
        let mut kept = unpack(hour, &block)?;
        let n = merge(&mut kept, new);
        if n == 0 {
            continue;
        }
        added += n as u64;
        changed.push(id, hour_ms, &kept)?;
    }
    if changed.series.is_empty() {
        return Ok(added);
    }
    sqlx::query(
        "UPDATE telemetry_windows w SET windows = u.n, block = u.b
           FROM unnest($2::bigint[], $3::timestamptz[], $4::smallint[], $5::bytea[]) AS u(s, h, n, b)
          WHERE w.org_id = $1 AND w.series_id = u.s AND w.hour = u.h",
    )
    .bind(org)
    .bind(&changed.series)
    .bind(&changed.hour)
    .bind(&changed.windows)
    .bind(&changed.blocks)
    .execute(tx.conn())
    .await?;
    write_sums(tx, &changed).await?;
    Ok(added)
}

/// An hour's sums of one whole-GPU or MIG-instance series, for readers.
pub struct HourRow {
    /// Physical GPU UUID.
    pub gpu_uuid: String,
    /// MIG GPU instance ID (-1: whole GPU).
    pub gpu_instance_id: i32,
    /// Span the hour's windows cover.
    pub from: OffsetDateTime,
    /// End of that span.
    pub to: OffsetDateTime,
    /// Average utilization (%) over the windows that had one.
    pub util_avg_pct: Option<f64>,
}

/// Whole-GPU hours with energy that overlap `[start, end)`: the close's energy, one span per device-hour, devices
/// by UUID and spans by start (streamed from the database, kept compact: 24 bytes an hour).
pub async fn energy_hours(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
) -> Result<Vec<DeviceEnergy>, DbError> {
    use futures::TryStreamExt;
    let mut rows = sqlx::query_as::<_, (String, OffsetDateTime, i32, i32, i64)>(
        "SELECT s.gpu_uuid, h.hour, h.span_from_ms, h.span_to_ms, h.energy_j
           FROM telemetry_hours h JOIN telemetry_series s ON s.org_id = h.org_id AND s.series_id = h.series_id
          WHERE h.org_id = $3 AND s.org_id = $3 AND s.gpu_instance_id = -1 AND h.energy_ms > 0
            AND h.hour >= $1 - interval '1 day' AND h.hour < $2
            AND h.hour + make_interval(secs => h.span_to_ms / 1000.0) > $1
          ORDER BY s.gpu_uuid, h.hour",
    )
    .bind(start)
    .bind(end)
    .bind(tx.org().as_uuid())
    .fetch(tx.conn());
    let mut out: Vec<DeviceEnergy> = Vec::new();
    while let Some((gpu, hour, from, to, j)) = rows.try_next().await? {
        let h = unix_ms(hour) * 1_000;
        let span = EnergySpan {
            start_us: h + i64::from(from) * 1_000,
            end_us: h + i64::from(to) * 1_000,
            joules: u64::try_from(j).unwrap_or(0),
        };
        match out.last_mut() {
            Some(d) if d.gpu_uuid == gpu => d.spans.push(span),
            _ => out.push(DeviceEnergy { gpu_uuid: gpu, spans: vec![span] }),
        }
    }
    for d in &mut out {
        d.spans.sort_by_key(|s| (s.start_us, s.end_us, s.joules));
    }
    Ok(out)
}

/// Hours with utilization of the given whole GPUs and of the MIG instances of the given parents, overlapping
/// `[from, to)` (hours starting up to a day before `from`, so a long window reaching in is seen), handed to `each`
/// as they arrive: a month of a large fleet is millions of device-hours, never held here.
pub async fn utilization_hours(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    to: OffsetDateTime,
    whole: &[String],
    parents: &[String],
    mut each: impl FnMut(HourRow) -> Result<(), DbError>,
) -> Result<(), DbError> {
    use futures::TryStreamExt;
    let mut rows = sqlx::query_as::<_, (String, i32, OffsetDateTime, i32, i32, i64, i32)>(
        "SELECT s.gpu_uuid, s.gpu_instance_id, h.hour, h.span_from_ms, h.span_to_ms, h.util_sum, h.util_ms
           FROM telemetry_series s JOIN telemetry_hours h ON h.org_id = s.org_id AND h.series_id = s.series_id
          WHERE s.org_id = $5 AND h.org_id = $5 AND h.util_ms > 0
            AND h.hour >= $1 - interval '1 day' AND h.hour < $2
            AND ((s.gpu_instance_id = -1 AND s.gpu_uuid = ANY($3)) OR (s.gpu_instance_id >= 0 AND s.gpu_uuid = ANY($4)))",
    )
    .bind(from)
    .bind(to)
    .bind(whole)
    .bind(parents)
    .bind(tx.org().as_uuid())
    .fetch(tx.conn());
    while let Some((gpu_uuid, gpu_instance_id, hour, f, t, sum, ms)) = rows.try_next().await? {
        let h = unix_ms(hour);
        let row = HourRow {
            gpu_uuid,
            gpu_instance_id,
            from: at_ms(h + i64::from(f)),
            to: at_ms(h + i64::from(t)),
            util_avg_pct: (ms > 0).then(|| sum as f64 / f64::from(ms) / 10.0),
        };
        if row.to > from {
            each(row)?;
        }
    }
    Ok(())
}

/// A row stored before the tiers (`telemetry_rollups`), moved by the upkeep.
#[derive(sqlx::FromRow)]
struct LegacyRow {
    cluster_id: Uuid,
    gpu_uuid: String,
    gpu_instance_id: i32,
    window_start: OffsetDateTime,
    window_end: OffsetDateTime,
    node: String,
    mig_profile: Option<String>,
    samples: i32,
    util_min: Option<f32>,
    util_avg: Option<f32>,
    util_max: Option<f32>,
    mem_used_min: Option<f32>,
    mem_used_avg: Option<f32>,
    mem_used_max: Option<f32>,
    power_min: Option<f32>,
    power_avg: Option<f32>,
    power_max: Option<f32>,
    energy_j: Option<f64>,
    pod_namespace: Option<String>,
    pod_name: Option<String>,
    pod_uid: Option<Uuid>,
}

/// Moves up to `limit` rows stored before the tiers into them (same merge as ingest; the moved rows are deleted in
/// the same transaction). Returns how many rows it moved.
pub async fn move_legacy(tx: &mut OrgTx, limit: i64) -> Result<u64, DbError> {
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
    let moved = rows.len() as u64;
    let mut by_cluster: BTreeMap<Uuid, BTreeMap<(String, i32), SeriesWindows>> = BTreeMap::new();
    for r in rows {
        let stat = |min: Option<f32>, avg: Option<f32>, max: Option<f32>| -> Option<gpuledger_core::wire::Stat> {
            Some(gpuledger_core::wire::Stat { min: f64::from(min?), avg: f64::from(avg?), max: f64::from(max?) })
        };
        let (cluster, gpu, gi, node, profile) = (r.cluster_id, r.gpu_uuid, r.gpu_instance_id, r.node, r.mig_profile);
        let rollup = gpuledger_core::wire::TelemetryRollup {
            node: node.clone(),
            gpu_uuid: gpu.clone(),
            gpu_instance_id: u32::try_from(gi).ok(),
            mig_profile: profile.clone(),
            window_start: r.window_start,
            window_end: r.window_end,
            samples: u32::try_from(r.samples).unwrap_or(0),
            utilization_pct: stat(r.util_min, r.util_avg, r.util_max),
            memory_used_mib: stat(r.mem_used_min, r.mem_used_avg, r.mem_used_max),
            power_w: stat(r.power_min, r.power_avg, r.power_max),
            energy_j: r.energy_j,
            pod: r.pod_namespace.zip(r.pod_name).map(|(namespace, name)| gpuledger_core::wire::PodRef {
                namespace,
                name,
                uid: r.pod_uid,
                container: None,
            }),
        };
        // A value the tiers cannot hold (it was accepted before they existed) is left out of its window, never the
        // whole window dropped.
        let mut rollup = rollup;
        let window = loop {
            match Window::from_rollup(&rollup) {
                Ok(w) => break Some(w),
                Err(WindowError::Value("utilization_pct")) if rollup.utilization_pct.is_some() => {
                    rollup.utilization_pct = None;
                }
                Err(WindowError::Value("memory_used_mib")) if rollup.memory_used_mib.is_some() => {
                    rollup.memory_used_mib = None;
                }
                Err(WindowError::Value("power_w")) if rollup.power_w.is_some() => rollup.power_w = None,
                Err(WindowError::Value("energy_j")) if rollup.energy_j.is_some() => rollup.energy_j = None,
                Err(_) => break None,
            }
        };
        let Some(window) = window else { continue };
        let s = by_cluster.entry(cluster).or_default().entry((gpu.clone(), gi)).or_insert_with(|| SeriesWindows {
            gpu_uuid: gpu,
            gpu_instance_id: gi,
            node: node.clone(),
            mig_profile: profile,
            windows: Vec::new(),
        });
        s.node = node;
        s.windows.push(window);
    }
    for (cluster, series) in by_cluster {
        store_windows(tx, ClusterId::from_uuid(cluster), series.into_values().collect()).await?;
    }
    Ok(moved)
}

/// One cluster's (node `None`) or node's telemetry in a month, from the hourly tier and the allocations.
pub struct CoverageRow {
    /// Cluster.
    pub cluster_id: Uuid,
    /// Cluster name.
    pub cluster: String,
    /// Node (None: the cluster's total).
    pub node: Option<String>,
    /// Whole GPUs that reported.
    pub gpus: i64,
    /// MIG instances that reported.
    pub mig_instances: i64,
    /// Whole-GPU milliseconds covered by windows.
    pub gpu_ms: i64,
    /// Windows.
    pub windows: i64,
    /// Hour rows (both tiers hold one per device-hour).
    pub hour_rows: i64,
    /// Σ block bytes.
    pub block_bytes: i64,
    /// Median of the hours' mean window length, ms.
    pub median_window_ms: Option<i64>,
    /// Latest hour with telemetry.
    pub last_hour: Option<OffsetDateTime>,
    /// GPU-equivalent hours held by allocations (decimal text, exact).
    pub held_hours: String,
}

/// The month's coverage per cluster and node: telemetry from `telemetry_hours` (never the blocks), held hours from
/// the allocations (open ones counted until `now`).
///
/// One hash aggregate over the month's hours by node and mean window length (whole seconds): the medians and the
/// clusters' totals are made from those few groups here, so no sort of millions of hours is needed.
pub async fn coverage(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
    now: OffsetDateTime,
) -> Result<Vec<CoverageRow>, DbError> {
    let org = tx.org().as_uuid();
    #[allow(clippy::type_complexity)]
    let groups: Vec<(Uuid, String, i64, i64, i64, i64, i64, i64, i64, Option<OffsetDateTime>)> = sqlx::query_as(
        "SELECT s.cluster_id, s.node, (h.sampled_ms / h.windows / 1000)::bigint AS len_s,
                count(*) FILTER (WHERE s.gpu_instance_id = -1), coalesce(sum(h.sampled_ms) FILTER (WHERE s.gpu_instance_id = -1), 0)::bigint,
                sum(h.windows)::bigint, count(*), sum(h.block_bytes)::bigint, sum(h.sampled_ms)::bigint, max(h.hour)
           FROM telemetry_hours h
           JOIN telemetry_series s ON s.org_id = h.org_id AND s.series_id = h.series_id
          WHERE h.org_id = $1 AND s.org_id = $1 AND h.hour >= $2 AND h.hour < $3
          GROUP BY 1, 2, 3",
    )
    .bind(org)
    .bind(start)
    .bind(end)
    .fetch_all(tx.conn())
    .await?;
    // Devices that reported, per node (distinct series: a separate, small aggregate over the series of the hours).
    let devices: Vec<(Uuid, String, i64, i64)> = sqlx::query_as(
        "SELECT s.cluster_id, s.node, count(*) FILTER (WHERE s.gpu_instance_id = -1), count(*) FILTER (WHERE s.gpu_instance_id >= 0)
           FROM telemetry_series s
          WHERE s.org_id = $1 AND EXISTS (SELECT 1 FROM telemetry_hours h WHERE h.org_id = $1 AND h.series_id = s.series_id
                                             AND h.hour >= $2 AND h.hour < $3)
          GROUP BY 1, 2",
    )
    .bind(org)
    .bind(start)
    .bind(end)
    .fetch_all(tx.conn())
    .await?;
    let held: Vec<(Uuid, Option<String>, String)> = sqlx::query_as(
        "SELECT cluster_id, node,
                round(greatest(sum(extract(epoch FROM least(coalesce(ended_at, $4), $3, $4) - greatest(started_at, $2))
                      * fraction_num / fraction_den) / 3600, 0), 2)::text
           FROM allocation_intervals
          WHERE org_id = $1 AND started_at < least($3, $4) AND (ended_at IS NULL OR ended_at > $2)
            AND fraction_num IS NOT NULL AND node IS NOT NULL
          GROUP BY GROUPING SETS ((cluster_id, node), (cluster_id))",
    )
    .bind(org)
    .bind(start)
    .bind(end)
    .bind(now)
    .fetch_all(tx.conn())
    .await?;
    let names: HashMap<Uuid, String> =
        sqlx::query_as::<_, (Uuid, String)>("SELECT cluster_id, name FROM clusters WHERE org_id = $1")
            .bind(org)
            .fetch_all(tx.conn())
            .await?
            .into_iter()
            .collect();

    #[derive(Default)]
    struct Acc {
        gpus: i64,
        instances: i64,
        gpu_ms: i64,
        windows: i64,
        hour_rows: i64,
        block_bytes: i64,
        last_hour: Option<OffsetDateTime>,
        /// Hours per mean window length (s).
        lengths: BTreeMap<i64, i64>,
        held: Option<String>,
    }
    let mut acc: BTreeMap<(Uuid, Option<String>), Acc> = BTreeMap::new();
    for (cluster, node, len_s, _whole_hours, gpu_ms, windows, hours, bytes, _ms, last) in groups {
        for key in [(cluster, Some(node.clone())), (cluster, None)] {
            let a = acc.entry(key).or_default();
            a.gpu_ms += gpu_ms;
            a.windows += windows;
            a.hour_rows += hours;
            a.block_bytes += bytes;
            a.last_hour = a.last_hour.max(last);
            *a.lengths.entry(len_s).or_default() += hours;
        }
    }
    for (cluster, node, gpus, instances) in devices {
        for key in [(cluster, Some(node.clone())), (cluster, None)] {
            let a = acc.entry(key).or_default();
            a.gpus += gpus;
            a.instances += instances;
        }
    }
    for (cluster, node, h) in held {
        acc.entry((cluster, node)).or_default().held = Some(h);
    }
    let median = |lengths: &BTreeMap<i64, i64>| -> Option<i64> {
        let total: i64 = lengths.values().sum();
        let mut seen = 0;
        for (len, n) in lengths {
            seen += n;
            if seen * 2 >= total {
                return Some(len * 1_000);
            }
        }
        None
    };
    let mut out: Vec<CoverageRow> = acc
        .into_iter()
        .filter_map(|((cluster_id, node), a)| {
            Some(CoverageRow {
                cluster_id,
                cluster: names.get(&cluster_id)?.clone(),
                node,
                gpus: a.gpus,
                mig_instances: a.instances,
                gpu_ms: a.gpu_ms,
                windows: a.windows,
                hour_rows: a.hour_rows,
                block_bytes: a.block_bytes,
                median_window_ms: median(&a.lengths),
                last_hour: a.last_hour,
                held_hours: a.held.unwrap_or_else(|| "0.00".to_string()),
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.cluster, &a.node).cmp(&(&b.cluster, &b.node)));
    Ok(out)
}
