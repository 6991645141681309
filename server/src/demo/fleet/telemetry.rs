//! The fleet's telemetry at the agents' own cadence: one 60 s window per GPU (and MIG instance) per minute, written
//! into the same tiers ingest fills (`telemetry_series`, `telemetry_windows`, `telemetry_hours`) — directly, for
//! speed, with the same block encoding and sums (`crate::telemetry::store::pack`, core `HourSums`).
//!
//! A GPU's hour is shaped by how much of it was held that hour (the jobs' occupancy) and a busy level per job and
//! hour; each minute's activity and power vary around it by ±5 % (noise a real exporter shows), memory stays where
//! the job put it — so the blocks compress as real ones would, not as constants. MIG instances report utilization and memory (no energy: DCGM has none per instance).

use std::sync::Arc;

use gpuledger_core::telemetry::{GpuHour, MS_PER_HOUR, Triple, Window};

use super::*;
use crate::telemetry::store::{GpuHourRows, insert_gpu_hours};

/// The agents' window.
pub const WINDOW_MS: i64 = 60_000;
/// GPU-hours (each with its MIG instances) generated and written per statement.
const HOURS_PER_CHUNK: usize = 2_000;

/// One series of the fleet: a whole GPU (`gi` -1) or a MIG instance.
#[derive(Clone)]
struct Series {
    gpu: u32,
    gi: i32,
    profile: Option<&'static str>,
    /// Share of the parent's compute (1 for a whole GPU).
    share: f64,
}

/// What generating telemetry needs, owned, so chunks are made on the blocking pool while the last one is written.
pub struct Plan {
    series: Vec<Series>,
    class_of: Vec<usize>,
    hours: u32,
    start_ms: i64,
    seed: u64,
    /// Share of each GPU held in each hour (GPU-major).
    occupancy: Vec<f32>,
    /// Each GPU's series (its own, then its MIG instances').
    of_gpu: Vec<Vec<usize>>,
    /// Hours from this one on keep their full-resolution block (earlier ones their sums only).
    first_block_hour: u32,
}

/// A chunk ready to insert: its GPU-hours (blocks and sums, as ingest stores them) and how many windows.
#[derive(Default)]
pub struct Chunk {
    rows: GpuHourRows,
    count: u64,
}

impl Plan {
    /// The plan of `w`'s telemetry (hourly occupancy from its jobs).
    pub fn of(w: &World) -> Plan {
        let mut series: Vec<Series> =
            (0..w.spec.gpus as u32).map(|g| Series { gpu: g, gi: -1, profile: None, share: 1.0 }).collect();
        for mi in &w.migs {
            let class = w.nodes[(mi.gpu / 8) as usize].class;
            series.push(Series {
                gpu: mi.gpu,
                gi: i32::from(mi.gi),
                profile: Some(mig_profile(class, mi.slices)),
                share: f64::from(mi.slices) / 7.0,
            });
        }
        let mut of_gpu: Vec<Vec<usize>> = vec![Vec::new(); w.spec.gpus];
        for (i, s) in series.iter().enumerate() {
            of_gpu[s.gpu as usize].push(i);
        }
        Plan {
            of_gpu,
            series,
            class_of: (0..w.spec.gpus as u32).map(|g| w.nodes[(g / 8) as usize].class).collect(),
            hours: w.hours(),
            start_ms: unix(w.spec.start) * 1_000,
            seed: w.spec.seed,
            occupancy: w.occupancy_hourly(),
            first_block_hour: w.spec.full_resolution_from.map_or(0, |from| {
                let h = (from - w.spec.start).whole_hours().max(0);
                u32::try_from(h).unwrap_or(u32::MAX)
            }),
        }
    }

    /// Series (whole GPUs, then MIG instances).
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// GPU-hours in all.
    pub fn gpu_hours(&self) -> usize {
        self.of_gpu.len() * self.hours as usize
    }

    /// GPU-hours per chunk.
    pub fn chunk_len(&self) -> usize {
        HOURS_PER_CHUNK
    }

    /// Series `i`: (GPU index, GPU instance ID, MIG profile).
    pub fn series_key(&self, i: usize) -> (u32, i32, Option<&'static str>) {
        let s = &self.series[i];
        (s.gpu, s.gi, s.profile)
    }

    /// The `c`-th chunk of GPU-hours (GPU-major), with `ids` the series' stored IDs.
    pub fn chunk(&self, c: usize, ids: &[i64]) -> Result<Chunk, DbError> {
        let hours = self.hours as usize;
        let mut out = Chunk::default();
        let first = c * HOURS_PER_CHUNK;
        let last = (first + HOURS_PER_CHUNK).min(self.gpu_hours());
        let mut hour = GpuHour::new();
        for k in first..last {
            let (g, h) = (k / hours, (k % hours) as u32);
            let hour_ms = self.start_ms + i64::from(h) * MS_PER_HOUR;
            hour.clear();
            for &si in &self.of_gpu[g] {
                let s = &self.series[si];
                let windows = hour.entry(s.gi).or_insert_with(|| Vec::with_capacity(60));
                self.hour_windows(s, h, hour_ms, windows);
                out.count += windows.len() as u64;
            }
            // A GPU's own series is its first (whole GPUs come first in the plan).
            if h >= self.first_block_hour {
                out.rows.push(ids[g], hour_ms, &hour)?;
            } else {
                out.rows.push_without_block(ids[g], hour_ms, &hour)?;
            }
        }
        Ok(out)
    }

    fn hour_windows(&self, s: &Series, h: u32, hour_ms: i64, out: &mut Vec<Window>) {
        let g = s.gpu;
        let class = &CLASSES[self.class_of[g as usize]];
        let occ = f64::from(self.occupancy[g as usize * self.hours as usize + h as usize]).min(1.0);
        // The hour's busy level (as `World::utilization`): some held GPUs sit idle.
        let x = unit((u64::from(g) << 24) ^ u64::from(h) ^ self.seed ^ (s.gi as u64) << 48);
        let busy = if x < 0.08 { 0.02 } else { 0.35 + 0.6 * x };
        let util = occ * busy * 100.0;
        let mem_total = class.memory_mib as f64 * s.share;
        // Memory is what the job allocated: steady through the hour, as frameworks hold it. Activity and power
        // move around the hour's level from minute to minute (±5 %).
        let mem = mem_total * occ * 0.55;
        for m in 0..60_u32 {
            let n = unit(self.seed ^ (u64::from(g) << 32) ^ (u64::from(h) << 8) ^ u64::from(m) ^ (s.gi as u64) << 56);
            let u = (util * (0.95 + 0.1 * n)).min(100.0);
            let (umin, umax) = (u * 0.8, (u * 1.1 + occ).min(100.0));
            let q = |v: f64, scale: f64| (v * scale).round() as i64;
            let power = |u: f64| class.idle_w + (class.busy_w - class.idle_w) * u / 100.0;
            let start_ms = hour_ms + i64::from(m) * WINDOW_MS;
            let whole = s.gi < 0;
            out.push(Window {
                start_ms,
                end_ms: start_ms + WINDOW_MS,
                samples: 6,
                util: Some(Triple { min: q(umin, 10.0), avg: q(u, 10.0), max: q(umax, 10.0) }),
                mem: Some(Triple { min: q(mem, 1.0), avg: q(mem, 1.0), max: q(mem, 1.0) }),
                power: whole.then(|| Triple {
                    min: q(power(umin), 10.0),
                    avg: q(power(u), 10.0),
                    max: q(power(umax), 10.0),
                }),
                energy_j: whole.then(|| (power(u) * 60.0).round() as u64),
                pod: None,
            });
        }
    }
}

/// Writes the plan's series (one statement) and returns their IDs in plan order.
#[allow(clippy::type_complexity)] // column vectors for UNNEST inserts
pub async fn insert_series(
    tx: &mut OrgTx,
    o: Uuid,
    w: &World,
    cluster_of: &[Uuid],
    plan: &Plan,
) -> Result<Vec<i64>, DbError> {
    let mut cols = super::store::SeriesCols::default();
    for i in 0..plan.series_count() {
        let (g, gi, profile) = plan.series_key(i);
        let node = &w.nodes[(g / 8) as usize];
        cols.0.push(cluster_of[node.cluster]);
        cols.1.push(gpu_uuid(g));
        cols.2.push(gi);
        cols.3.push(node_name(g / 8));
        cols.4.push(profile);
    }
    let rows = super::store::upsert_series(tx, o, &cols).await?;
    let by_key: HashMap<(Uuid, String, i32), i64> =
        rows.into_iter().map(|r| ((r.cluster_id, r.gpu_uuid, r.gpu_instance_id), r.series_id)).collect();
    let mut ids = Vec::with_capacity(cols.0.len());
    for ((c, g), i) in cols.0.into_iter().zip(cols.1).zip(cols.2) {
        ids.push(*by_key.get(&(c, g, i)).ok_or_else(|| DbError::Data("telemetry series not stored".into()))?);
    }
    Ok(ids)
}

/// Inserts a chunk (the fleet's hours are new: nothing to merge).
async fn insert_chunk(tx: &mut OrgTx, c: &Chunk) -> Result<(), DbError> {
    insert_gpu_hours(tx, &c.rows, false).await.map(|_| ())
}

/// Writes the whole plan, making the next chunk on the blocking pool while the last one is written.
pub async fn write_all(tx: &mut OrgTx, o: Uuid, w: &World, cluster_of: &[Uuid], label: &str) -> Result<u64, DbError> {
    let plan = Arc::new(Plan::of(w));
    let ids = Arc::new(insert_series(tx, o, w, cluster_of, &plan).await?);
    let chunks = plan.gpu_hours().div_ceil(plan.chunk_len());
    let make = |c: usize| {
        let (plan, ids) = (Arc::clone(&plan), Arc::clone(&ids));
        tokio::task::spawn_blocking(move || plan.chunk(c, &ids))
    };
    let mut written = 0_u64;
    let mut next = (chunks > 0).then(|| make(0));
    let mut next_log = 0;
    for c in 0..chunks {
        let Some(pending) = next.take() else { break };
        let chunk = pending.await.map_err(|e| DbError::Data(e.to_string()))??;
        if c + 1 < chunks {
            next = Some(make(c + 1));
        }
        if c * plan.chunk_len() >= next_log {
            tracing::info!(
                "{label}: telemetry {}/{} GPU-hours (60 s windows)",
                grouped(c * plan.chunk_len()),
                grouped(plan.gpu_hours())
            );
            next_log += (plan.gpu_hours() / 10).max(plan.chunk_len());
        }
        insert_chunk(tx, &chunk).await?;
        written += chunk.count;
    }
    tracing::info!("{label}: telemetry {} windows written", grouped(written as usize));
    Ok(written)
}
