//! Moving telemetry stored in earlier forms into one row per GPU-hour: `telemetry_rollups` (before migration 26,
//! one row per window) and `telemetry_hours` / `telemetry_windows` (migrations 26–30, one row per device-hour). The
//! server's upkeep calls these a chunk per transaction (the `maintenance` module), deleting what it moved.

use std::collections::{BTreeMap, HashMap};

use gpuledger_core::{
    ids::ClusterId,
    telemetry::{HourSums, MAX_GPU_INSTANCE_ID, Window, WindowError},
};
use time::OffsetDateTime;
use uuid::Uuid;

use super::store::{
    GpuHourRows, SeriesWindows, insert_gpu_hours,
    legacy::{self, OldHour},
    series_ids, store_windows, unix_ms, unpack,
};
use crate::db::{DbError, OrgTx};

/// Moves up to `limit` rows stored before the tiers into them (same merge as ingest; the moved rows are deleted in
/// the same transaction). Returns how many rows it moved.
pub async fn move_legacy(tx: &mut OrgTx, limit: i64) -> Result<u64, DbError> {
    let rows = legacy::take_legacy_rows(tx, limit).await?;
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

impl OldHour {
    fn sums(&self) -> HourSums {
        HourSums {
            windows: i64::from(self.windows),
            samples: i64::from(self.samples),
            sampled_ms: i64::from(self.sampled_ms),
            span_from_ms: i64::from(self.span_from_ms),
            span_to_ms: i64::from(self.span_to_ms),
            util_ms: i64::from(self.util_ms),
            util_sum: self.util_sum,
            util_max: i64::from(self.util_max),
            mem_max: i64::from(self.mem_max),
            power_max: i64::from(self.power_max),
            energy_ms: i64::from(self.energy_ms),
            energy_j: self.energy_j,
        }
    }
}

/// Moves up to `limit` device-hours stored one row per device (migrations 26–30: `telemetry_hours` and its blocks
/// in `telemetry_windows`) into `telemetry_gpu_hours`, deleting them in the same transaction. An hour with its
/// block goes through the same merge as ingest (exact, whatever is already there); an hour whose block retention
/// had dropped keeps its sums (where its GPU-hour is not stored yet: else the newer row stands and a warning says
/// so). Returns how many device-hours it moved.
pub async fn move_tiers(tx: &mut OrgTx, limit: i64) -> Result<u64, DbError> {
    let hours = legacy::take_old_hours(tx, limit).await?;
    if hours.is_empty() {
        return Ok(0);
    }
    let (keys_s, keys_h): (Vec<i64>, Vec<OffsetDateTime>) = hours.iter().map(|h| (h.series_id, h.hour)).unzip();
    let blocks = legacy::take_old_blocks(tx, &keys_s, &keys_h).await?;
    let series = legacy::series_keys(tx, &keys_s).await?;
    let moved = hours.len() as u64;
    // With blocks: windows through the merge, per cluster. Without: sums, per GPU-hour.
    let mut with_blocks: BTreeMap<Uuid, BTreeMap<(String, i32), SeriesWindows>> = BTreeMap::new();
    let mut sums_only: BTreeMap<(Uuid, String, i64), BTreeMap<i32, HourSums>> = BTreeMap::new();
    let mut nodes: HashMap<(Uuid, String), String> = HashMap::new();
    for h in &hours {
        let Some((cluster, gpu, gi, node, profile)) = series.get(&h.series_id) else { continue };
        if !(-1..=MAX_GPU_INSTANCE_ID).contains(gi) {
            continue;
        }
        let hour_ms = unix_ms(h.hour);
        nodes.insert((*cluster, gpu.clone()), node.clone());
        match blocks.get(&(h.series_id, hour_ms)) {
            Some(block) => {
                let windows = unpack(h.hour, block)?;
                with_blocks
                    .entry(*cluster)
                    .or_default()
                    .entry((gpu.clone(), *gi))
                    .or_insert_with(|| SeriesWindows {
                        gpu_uuid: gpu.clone(),
                        gpu_instance_id: *gi,
                        node: node.clone(),
                        mig_profile: profile.clone(),
                        windows: Vec::new(),
                    })
                    .windows
                    .extend(windows);
            }
            None => {
                sums_only.entry((*cluster, gpu.clone(), hour_ms)).or_default().insert(*gi, h.sums());
            }
        }
    }
    for (cluster, devices) in with_blocks {
        store_windows(tx, ClusterId::from_uuid(cluster), devices.into_values().collect()).await?;
    }
    if !sums_only.is_empty() {
        let mut by_cluster: BTreeMap<Uuid, Vec<(String, String)>> = BTreeMap::new();
        for (cluster, gpu, _) in sums_only.keys() {
            let node = nodes.get(&(*cluster, gpu.clone())).cloned().unwrap_or_default();
            by_cluster.entry(*cluster).or_default().push((gpu.clone(), node));
        }
        let mut gpu_id: HashMap<(Uuid, String), i64> = HashMap::new();
        for (cluster, mut gpus) in by_cluster {
            gpus.sort();
            gpus.dedup_by(|a, b| a.0 == b.0);
            let devices: Vec<(&str, i32, &str, Option<&str>)> =
                gpus.iter().map(|(g, n)| (g.as_str(), -1, n.as_str(), None)).collect();
            // A GPU's own series keeps its node; one made here takes its instances'.
            let ids = series_ids_keeping(tx, ClusterId::from_uuid(cluster), &devices).await?;
            for ((g, _), id) in gpus.iter().zip(ids) {
                gpu_id.insert((cluster, g.clone()), id);
            }
        }
        let mut rows = GpuHourRows::default();
        for ((cluster, gpu, hour_ms), mut devs) in sums_only {
            let Some(id) = gpu_id.get(&(cluster, gpu)) else { continue };
            let own = devs.remove(&-1).unwrap_or_default();
            rows.push_sums(*id, hour_ms, own, &devs, None)?;
        }
        let inserted = insert_gpu_hours(tx, &rows, true).await?.len();
        if inserted < rows.len() {
            tracing::warn!(
                hours = rows.len() - inserted,
                "hours kept as sums only (full resolution dropped) whose GPU-hour is already stored: the stored one stands"
            );
        }
    }
    Ok(moved)
}

/// [`series_ids`] for GPUs named without a node of their own: an existing series keeps its node.
async fn series_ids_keeping(
    tx: &mut OrgTx,
    cluster: ClusterId,
    devices: &[(&str, i32, &str, Option<&str>)],
) -> Result<Vec<i64>, DbError> {
    let gpu: Vec<&str> = devices.iter().map(|d| d.0).collect();
    let stored = legacy::whole_gpu_series(tx, cluster, &gpu).await?;
    let named: Vec<(&str, i32, &str, Option<&str>)> = devices
        .iter()
        .map(|d| match stored.get(d.0) {
            Some((_, n)) => (d.0, d.1, n.as_str(), d.3),
            None => *d,
        })
        .collect();
    series_ids(tx, cluster, &named).await
}
