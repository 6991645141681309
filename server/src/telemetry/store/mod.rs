//! SQL of the telemetry tiers: series, full-resolution blocks per device-hour, and the hours' exact sums.

use std::collections::{BTreeMap, HashMap, HashSet};

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use gpuledger_core::{
    ids::ClusterId,
    telemetry::{
        GpuHour, HourSums, MAX_GPU_INSTANCE_ID, Window, decode, decode_gpu_hour, decode_instance_sums, encode_gpu_hour,
        encode_instance_sums, merge,
    },
};
use time::OffsetDateTime;

use crate::db::{DbError, OrgTx};

mod coverage;
mod energy;
pub(crate) mod legacy;

use coverage::{CoverageDelta, HourCoverage};
pub use coverage::{CoverageRow, coverage};
pub use energy::{energy_hours, energy_hours_each, utilization_hours_each};

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

thread_local! {
    // A compressor's state is ~300 KB (its dictionary and hash chains) and a decompressor's ~40 KB: made anew for
    // each block, they were allocated, zeroed and freed once per GPU-hour written or read — at a fleet's cadence a
    // large part of ingest's CPU. One of each per thread, reset between blocks.
    static COMPRESS: std::cell::RefCell<Compress> = std::cell::RefCell::new(Compress::new(Compression::fast(), false));
    static DECOMPRESS: std::cell::RefCell<Decompress> = std::cell::RefCell::new(Decompress::new(false));
}

fn deflate(raw: &[u8]) -> Result<Vec<u8>, DbError> {
    COMPRESS.with(|c| {
        let mut c = c.borrow_mut();
        c.reset();
        let mut out = Vec::with_capacity(raw.len() / 2 + 64);
        loop {
            let read = usize::try_from(c.total_in()).unwrap_or(usize::MAX).min(raw.len());
            let status = c
                .compress_vec(&raw[read..], &mut out, FlushCompress::Finish)
                .map_err(|e| DbError::Data(format!("compressing a telemetry block: {e}")))?;
            match status {
                Status::StreamEnd => return Ok(out),
                // The output is full: room for more, and go on.
                Status::Ok | Status::BufError => out.reserve(out.capacity().max(64)),
            }
        }
    })
}
/// Decompresses and decodes a block stored one per device-hour (`telemetry_windows`, before migration 31).
pub fn unpack(hour: OffsetDateTime, block: &[u8]) -> Result<Vec<Window>, DbError> {
    let raw = inflate(hour, block)?;
    decode(unix_ms(hour), &raw).map_err(|e| DbError::Data(format!("telemetry block of {hour}: {e}")))
}

/// Decompresses and decodes a stored GPU-hour block (the GPU's windows and its MIG instances').
pub fn unpack_gpu_hour(hour: OffsetDateTime, block: &[u8]) -> Result<GpuHour, DbError> {
    let raw = inflate(hour, block)?;
    decode_gpu_hour(unix_ms(hour), &raw).map_err(|e| DbError::Data(format!("telemetry block of {hour}: {e}")))
}

fn inflate(hour: OffsetDateTime, block: &[u8]) -> Result<Vec<u8>, DbError> {
    let damaged = |why: &str| DbError::Data(format!("telemetry block of {hour}: {why}"));
    DECOMPRESS.with(|d| {
        let mut d = d.borrow_mut();
        d.reset(false);
        let mut raw = Vec::with_capacity(block.len().saturating_mul(3).clamp(256, 64 << 10));
        loop {
            let read = usize::try_from(d.total_in()).unwrap_or(usize::MAX).min(block.len());
            let before = (d.total_in(), d.total_out());
            let status = d
                .decompress_vec(&block[read..], &mut raw, FlushDecompress::None)
                .map_err(|e| damaged(&e.to_string()))?;
            if status == Status::StreamEnd {
                return Ok(raw);
            }
            if raw.len() as u64 >= MAX_BLOCK_BYTES {
                return Err(damaged("larger than a block can be"));
            }
            if raw.len() == raw.capacity() {
                let room = raw.capacity().max(256).min((MAX_BLOCK_BYTES as usize).saturating_sub(raw.len()));
                raw.reserve(room);
            } else if (d.total_in(), d.total_out()) == before {
                // Room left, nothing read or written: the input ended before the stream did.
                return Err(damaged("ends early"));
            }
        }
    })
}

pub(crate) fn unix_ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The instant of Unix milliseconds `ms` (clamped to the representable range).
pub fn at_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// The stored series of these (GPU, MIG instance) keys: (GPU, instance, series ID, node, MIG profile).
async fn lookup_series<'a>(
    tx: &mut OrgTx,
    cluster: ClusterId,
    keys: impl Iterator<Item = (&'a str, i32)>,
) -> Result<Vec<(String, i32, i64, String, Option<String>)>, DbError> {
    let (gpu, gi): (Vec<&str>, Vec<i32>) = keys.unzip();
    Ok(sqlx::query_as(
        "SELECT k.g, k.i, s.series_id, s.node, s.mig_profile
           FROM unnest($3::text[], $4::int[]) AS k(g, i)
           CROSS JOIN LATERAL (SELECT series_id, node, mig_profile FROM telemetry_series s
                                WHERE s.org_id = $1 AND s.cluster_id = $2 AND s.gpu_uuid = k.g
                                  AND s.gpu_instance_id = k.i
                               -- Not flattened into a join: without statistics the planner scanned every
                               -- series once per key; kept apart, it is one probe of the unique key per device.
                               OFFSET 0) s",
    )
    .bind(tx.org().as_uuid())
    .bind(cluster.as_uuid())
    .bind(&gpu)
    .bind(&gi)
    .fetch_all(tx.conn())
    .await?)
}

/// The series IDs of the devices, made where new; a device reported from another node (or with another MIG
/// profile) is updated to the latest.
pub async fn series_ids(
    tx: &mut OrgTx,
    cluster: ClusterId,
    devices: &[(&str, i32, &str, Option<&str>)],
) -> Result<Vec<i64>, DbError> {
    let org = tx.org().as_uuid();
    let cluster_id = cluster.as_uuid();
    // Known devices are looked up by their whole key, one index probe each (a plan that holds whatever the
    // statistics say: a young table without them once got a scan of every series per batch); only the devices not
    // found are inserted (in key order, so concurrent batches making the same series wait on each other instead of
    // deadlocking), then looked up.
    let mut rows = lookup_series(tx, cluster, devices.iter().map(|d| (d.0, d.1))).await?;
    let missing: BTreeMap<(&str, i32), (&str, Option<&str>)> = {
        let known: HashSet<(&str, i32)> = rows.iter().map(|r| (r.0.as_str(), r.1)).collect();
        devices.iter().filter(|d| !known.contains(&(d.0, d.1))).map(|d| ((d.0, d.1), (d.2, d.3))).collect()
    };
    if !missing.is_empty() {
        let s_gpu: Vec<&str> = missing.keys().map(|k| k.0).collect();
        let s_gi: Vec<i32> = missing.keys().map(|k| k.1).collect();
        let s_node: Vec<&str> = missing.values().map(|v| v.0).collect();
        let s_profile: Vec<Option<&str>> = missing.values().map(|v| v.1).collect();
        crate::bulk::execute(
            tx,
            &crate::bulk::Insert {
                into: "INSERT INTO telemetry_series (org_id, cluster_id, gpu_uuid, gpu_instance_id, node, mig_profile)",
                row: "$1, $2, {0}, {1}, {2}, {3}",
                consts: &[crate::bulk::constant("uuid", &org), crate::bulk::constant("uuid", &cluster_id)],
                cols: &[
                    crate::bulk::col("text", &s_gpu),
                    crate::bulk::col("int", &s_gi),
                    crate::bulk::col("text", &s_node),
                    crate::bulk::col("text", &s_profile),
                ],
                tail: "ON CONFLICT DO NOTHING",
            },
        )
        .await?;
        rows.extend(lookup_series(tx, cluster, missing.keys().copied()).await?);
    }
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

/// GPU-hours as column vectors, as `telemetry_gpu_hours` stores them: each physical GPU-hour's own sums, its MIG
/// instances' (a mask, totals and their encoded sums) and the block of them all.
#[derive(Default)]
pub struct GpuHourRows {
    series: Vec<i64>,
    hour: Vec<OffsetDateTime>,
    gpu: Vec<HourSums>,
    instances: Vec<i64>,
    inst_windows: Vec<i32>,
    inst_ms: Vec<i32>,
    inst_sums: Vec<Option<Vec<u8>>>,
    blocks: Vec<Option<Vec<u8>>>,
    /// Windows of each row (the GPU's and its instances').
    windows: Vec<u64>,
}

/// A GPU-hour's sums: the GPU's own (instance -1) and each MIG instance's with windows.
fn hour_sums(hour_ms: i64, hour: &GpuHour) -> (HourSums, BTreeMap<i32, HourSums>) {
    let gpu = hour.get(&-1).map(|ws| HourSums::of(hour_ms, ws)).unwrap_or_default();
    let inst = hour
        .iter()
        .filter(|(gi, ws)| **gi >= 0 && !ws.is_empty())
        .map(|(gi, ws)| (*gi, HourSums::of(hour_ms, ws)))
        .collect();
    (gpu, inst)
}

impl GpuHourRows {
    /// Adds GPU `series`'s hour `hour_ms` (its own windows under instance -1, its MIG instances' under theirs;
    /// each sorted by start, one per start).
    pub fn push(&mut self, series: i64, hour_ms: i64, hour: &GpuHour) -> Result<(), DbError> {
        let (gpu, inst) = hour_sums(hour_ms, hour);
        let block = deflate(&encode_gpu_hour(hour_ms, hour))?;
        self.push_sums(series, hour_ms, gpu, &inst, Some(block))
    }

    /// As [`push`](Self::push), keeping the hour's sums only: the row retention leaves once it dropped the
    /// hour's full resolution (the demo fleet's `--full-resolution-days`).
    pub fn push_without_block(&mut self, series: i64, hour_ms: i64, hour: &GpuHour) -> Result<(), DbError> {
        let (gpu, inst) = hour_sums(hour_ms, hour);
        self.push_sums(series, hour_ms, gpu, &inst, None)
    }

    /// Adds a GPU-hour from its sums (and its block, if it has one).
    pub(crate) fn push_sums(
        &mut self,
        series: i64,
        hour_ms: i64,
        gpu: HourSums,
        inst: &BTreeMap<i32, HourSums>,
        block: Option<Vec<u8>>,
    ) -> Result<(), DbError> {
        let mut mask = 0_i64;
        for gi in inst.keys() {
            if !(0..=MAX_GPU_INSTANCE_ID).contains(gi) {
                return Err(DbError::Data(format!("MIG instance {gi} is out of range")));
            }
            mask |= 1_i64 << gi;
        }
        if gpu.windows > i64::from(i16::MAX) {
            return Err(DbError::Data("too many windows".into()));
        }
        self.series.push(series);
        self.hour.push(at_ms(hour_ms));
        self.gpu.push(gpu);
        self.instances.push(mask);
        self.inst_windows.push(int(inst.values().map(|s| s.windows).sum()));
        self.inst_ms.push(int(inst.values().map(|s| s.sampled_ms).sum()));
        self.inst_sums.push((mask != 0).then(|| encode_instance_sums(inst)));
        self.blocks.push(block);
        self.windows.push(u64::try_from(gpu.windows + inst.values().map(|s| s.windows).sum::<i64>()).unwrap_or(0));
        Ok(())
    }

    /// GPU-hours held.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// What row `i` counts in its day's coverage, as stored.
    fn coverage(&self, i: usize) -> HourCoverage {
        let g = &self.gpu[i];
        HourCoverage {
            windows: g.windows.min(i64::from(i16::MAX)),
            inst_windows: i64::from(self.inst_windows[i]),
            sampled_ms: i64::from(int(g.sampled_ms)),
            inst_sampled_ms: i64::from(self.inst_ms[i]),
            instances: self.instances[i],
            block_bytes: self.blocks[i].as_ref().map_or(0, |b| b.len() as i64),
            inst_bytes: self.inst_sums[i].as_ref().map_or(0, |b| b.len() as i64),
        }
    }
}

fn int(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// Inserts GPU-hours; with `only_new`, those already stored are left as they are. Returns the GPU-hours inserted.
pub async fn insert_gpu_hours(
    tx: &mut OrgTx,
    rows: &GpuHourRows,
    only_new: bool,
) -> Result<Vec<(i64, OffsetDateTime)>, DbError> {
    use crate::bulk::{col, constant};
    let g = &rows.gpu;
    let col32 = |f: fn(&HourSums) -> i64| g.iter().map(|x| int(f(x))).collect::<Vec<i32>>();
    let big = |f: fn(&HourSums) -> i64| g.iter().map(f).collect::<Vec<i64>>();
    let small = |f: fn(&HourSums) -> i64| g.iter().map(|x| i16::try_from(f(x)).unwrap_or(i16::MAX)).collect::<Vec<_>>();
    let org = tx.org().as_uuid();
    let (util_sum, energy_j, samples, sampled_ms, span_from, span_to, util_ms, mem_max, power_max, energy_ms) = (
        big(|x| x.util_sum),
        big(|x| x.energy_j),
        col32(|x| x.samples),
        col32(|x| x.sampled_ms),
        col32(|x| x.span_from_ms),
        col32(|x| x.span_to_ms),
        col32(|x| x.util_ms),
        col32(|x| x.mem_max),
        col32(|x| x.power_max),
        col32(|x| x.energy_ms),
    );
    let (windows, util_max) = (small(|x| x.windows), small(|x| x.util_max));
    let inserted: Vec<(i64, OffsetDateTime)> = crate::bulk::returning(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO telemetry_gpu_hours (org_id, series_id, hour, util_sum, energy_j, instances, samples,
                       sampled_ms, span_from_ms, span_to_ms, util_ms, mem_max, power_max, energy_ms, inst_windows,
                       inst_sampled_ms, windows, util_max, inst_sums, block)",
            row: "$1, {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}",
            consts: &[constant("uuid", &org)],
            cols: &[
                col("bigint", &rows.series),
                col("timestamptz", &rows.hour),
                col("bigint", &util_sum),
                col("bigint", &energy_j),
                col("bigint", &rows.instances),
                col("int", &samples),
                col("int", &sampled_ms),
                col("int", &span_from),
                col("int", &span_to),
                col("int", &util_ms),
                col("int", &mem_max),
                col("int", &power_max),
                col("int", &energy_ms),
                col("int", &rows.inst_windows),
                col("int", &rows.inst_ms),
                col("smallint", &windows),
                col("smallint", &util_max),
                col("bytea", &rows.inst_sums),
                col("bytea", &rows.blocks),
            ],
            tail: if only_new {
                "ON CONFLICT DO NOTHING RETURNING series_id, hour"
            } else {
                "RETURNING series_id, hour"
            },
        },
    )
    .await?;
    // The days' coverage, in the same transaction.
    let at: HashMap<(i64, OffsetDateTime), usize> =
        rows.series.iter().zip(&rows.hour).enumerate().map(|(i, (s, h))| ((*s, *h), i)).collect();
    let mut delta = CoverageDelta::default();
    for (series, hour) in &inserted {
        if let Some(&i) = at.get(&(*series, *hour)) {
            delta.add(*series, *hour, &rows.coverage(i));
        }
    }
    delta.apply(tx).await?;
    Ok(inserted)
}

/// Rewrites stored GPU-hours whole (sums and block) by those of their merged windows.
async fn update_gpu_hours(tx: &mut OrgTx, rows: &GpuHourRows) -> Result<(), DbError> {
    let g = &rows.gpu;
    let col = |f: fn(&HourSums) -> i64| g.iter().map(|x| int(f(x))).collect::<Vec<i32>>();
    let big = |f: fn(&HourSums) -> i64| g.iter().map(f).collect::<Vec<i64>>();
    let small = |f: fn(&HourSums) -> i64| g.iter().map(|x| i16::try_from(f(x)).unwrap_or(i16::MAX)).collect::<Vec<_>>();
    sqlx::query(
        "UPDATE telemetry_gpu_hours t SET util_sum = u.util_sum, energy_j = u.energy_j, instances = u.instances,
                samples = u.samples, sampled_ms = u.sampled_ms, span_from_ms = u.span_from_ms, span_to_ms = u.span_to_ms,
                util_ms = u.util_ms, mem_max = u.mem_max, power_max = u.power_max, energy_ms = u.energy_ms,
                inst_windows = u.inst_windows, inst_sampled_ms = u.inst_sampled_ms, windows = u.windows,
                util_max = u.util_max, inst_sums = u.inst_sums, block = u.block
           FROM unnest($2::bigint[], $3::timestamptz[], $4::bigint[], $5::bigint[], $6::bigint[], $7::int[], $8::int[],
                $9::int[], $10::int[], $11::int[], $12::int[], $13::int[], $14::int[], $15::int[], $16::int[],
                $17::smallint[], $18::smallint[], $19::bytea[], $20::bytea[])
             AS u(series_id, hour, util_sum, energy_j, instances, samples, sampled_ms, span_from_ms, span_to_ms,
                  util_ms, mem_max, power_max, energy_ms, inst_windows, inst_sampled_ms, windows, util_max, inst_sums,
                  block)
          WHERE t.org_id = $1 AND t.series_id = u.series_id AND t.hour = u.hour
            -- The keys again as lists: an index condition on the primary key whatever the join's plan (a young
            -- partition without statistics once got every hour scanned).
            AND t.series_id = ANY($2) AND t.hour = ANY($3)",
    )
    .bind(tx.org().as_uuid())
    .bind(&rows.series)
    .bind(&rows.hour)
    .bind(big(|x| x.util_sum))
    .bind(big(|x| x.energy_j))
    .bind(&rows.instances)
    .bind(col(|x| x.samples))
    .bind(col(|x| x.sampled_ms))
    .bind(col(|x| x.span_from_ms))
    .bind(col(|x| x.span_to_ms))
    .bind(col(|x| x.util_ms))
    .bind(col(|x| x.mem_max))
    .bind(col(|x| x.power_max))
    .bind(col(|x| x.energy_ms))
    .bind(&rows.inst_windows)
    .bind(&rows.inst_ms)
    .bind(small(|x| x.windows))
    .bind(small(|x| x.util_max))
    .bind(&rows.inst_sums)
    .bind(&rows.blocks)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Stores windows: each GPU-hour's block gains the windows it did not have (a redelivered window changes nothing)
/// and its sums are those of the whole merged block. A MIG instance's windows go into its GPU's hour (the GPU's
/// series is made if only its instances reported). Returns how many windows were new.
///
/// Concurrent batches touching the same GPU-hour are serialised on its row: new hours are inserted first (a
/// concurrent insert of the same hour waits and then finds it), existing ones are locked `FOR UPDATE`, both in key
/// order.
pub async fn store_windows(tx: &mut OrgTx, cluster: ClusterId, series: Vec<SeriesWindows>) -> Result<u64, DbError> {
    store_windows_noting(tx, cluster, series, None).await
}

/// A window's identity: (GPU UUID, MIG instance or -1, start in Unix ms).
pub type WindowKey = (String, i32, i64);

/// [`store_windows`], also noting in `new` the key of every window that was new (the group commit credits each
/// request with its own).
pub async fn store_windows_noting(
    tx: &mut OrgTx,
    cluster: ClusterId,
    series: Vec<SeriesWindows>,
    mut new: Option<&mut HashSet<WindowKey>>,
) -> Result<u64, DbError> {
    let (series, out_of_range): (Vec<SeriesWindows>, Vec<SeriesWindows>) =
        series.into_iter().partition(|s| (-1..=MAX_GPU_INSTANCE_ID).contains(&s.gpu_instance_id));
    if !out_of_range.is_empty() {
        // Ingest refuses these at the door; only rows stored before the limit existed can get here.
        tracing::warn!(devices = out_of_range.len(), "telemetry of MIG instances past {MAX_GPU_INSTANCE_ID}: not kept");
    }
    if series.is_empty() {
        return Ok(0);
    }
    // The devices, and the GPUs of instances whose GPU itself sent nothing in this batch.
    let mut devices: Vec<(&str, i32, &str, Option<&str>)> = series
        .iter()
        .map(|s| (s.gpu_uuid.as_str(), s.gpu_instance_id, s.node.as_str(), s.mig_profile.as_deref()))
        .collect();
    let mut gpus: HashSet<&str> =
        series.iter().filter(|s| s.gpu_instance_id < 0).map(|s| s.gpu_uuid.as_str()).collect();
    for s in &series {
        if s.gpu_instance_id >= 0 && gpus.insert(s.gpu_uuid.as_str()) {
            devices.push((s.gpu_uuid.as_str(), -1, s.node.as_str(), None));
        }
    }
    let ids = series_ids(tx, cluster, &devices).await?;
    let gpu_id: HashMap<&str, i64> =
        devices.iter().zip(&ids).filter(|(d, _)| d.1 < 0).map(|(d, id)| (d.0, *id)).collect();
    let parent: Vec<i64> = series
        .iter()
        .map(|s| gpu_id.get(s.gpu_uuid.as_str()).copied())
        .collect::<Option<_>>()
        .ok_or_else(|| DbError::Data("telemetry series of a GPU not stored".into()))?;
    drop(devices);
    // Only when new windows are noted: a GPU series' UUID.
    let noting = new.is_some();
    let uuid_of: HashMap<i64, String> = if noting {
        series.iter().zip(&parent).map(|(s, id)| (*id, s.gpu_uuid.clone())).collect()
    } else {
        HashMap::new()
    };
    let mut note = |id: i64, gi: i32, start_ms: i64| {
        if let (Some(set), Some(uuid)) = (new.as_deref_mut(), uuid_of.get(&id)) {
            set.insert((uuid.clone(), gi, start_ms));
        }
    };
    // (GPU series, hour ms) → its devices' windows in this batch, merged (sorted, one per start).
    let mut hours: BTreeMap<(i64, i64), GpuHour> = BTreeMap::new();
    for (s, id) in series.into_iter().zip(parent) {
        for w in s.windows {
            hours.entry((id, w.hour_ms())).or_default().entry(s.gpu_instance_id).or_default().push(w);
        }
    }
    for h in hours.values_mut() {
        for ws in h.values_mut() {
            let batch = std::mem::take(ws);
            merge(ws, batch);
        }
    }

    // 1. Hours nobody stored yet: the batch's windows are the whole block.
    let mut fresh = GpuHourRows::default();
    for ((id, hour), h) in &hours {
        fresh.push(*id, *hour, h)?;
    }
    let inserted: HashSet<(i64, i64)> =
        insert_gpu_hours(tx, &fresh, true).await?.into_iter().map(|(s, h)| (s, unix_ms(h))).collect();
    let mut added: u64 = 0;
    for (i, (key, h)) in hours.iter().enumerate() {
        if inserted.contains(key) {
            added += fresh.windows[i];
            for (gi, ws) in h {
                ws.iter().for_each(|w| note(key.0, *gi, w.start_ms));
            }
        }
    }
    drop(fresh);
    if inserted.len() == hours.len() {
        return Ok(added);
    }

    // 2. Hours already stored: merge into their blocks.
    let (keep_s, keep_h): (Vec<i64>, Vec<OffsetDateTime>) =
        hours.keys().filter(|k| !inserted.contains(k)).map(|(s, h)| (*s, at_ms(*h))).unzip();
    #[allow(clippy::type_complexity)]
    let stored: Vec<(i64, OffsetDateTime, Option<Vec<u8>>, i16, i32, i32, i32, i64, Option<i32>)> = sqlx::query_as(
        // One primary-key probe per hour, in key order (the keys come sorted): locks taken in the same order by
        // every batch, and a plan that does not depend on statistics (a month's partition is young at its start).
        "SELECT t.series_id, t.hour, t.block, t.windows, t.inst_windows, t.sampled_ms, t.inst_sampled_ms, t.instances,
                t.inst_bytes
           FROM unnest($2::bigint[], $3::timestamptz[]) AS k(s, h)
           CROSS JOIN LATERAL (
                SELECT t.series_id, t.hour, t.block, t.windows, t.inst_windows, t.sampled_ms, t.inst_sampled_ms,
                       t.instances, octet_length(t.inst_sums) AS inst_bytes
                  FROM telemetry_gpu_hours t
                 WHERE t.org_id = $1 AND t.series_id = k.s AND t.hour = k.h
                   FOR UPDATE) t",
    )
    .bind(tx.org().as_uuid())
    .bind(&keep_s)
    .bind(&keep_h)
    .fetch_all(tx.conn())
    .await?;
    let mut changed = GpuHourRows::default();
    let mut coverage = CoverageDelta::default();
    let mut stale = 0_usize;
    for (id, hour, block, windows, inst_windows, sampled_ms, inst_sampled_ms, instances, inst_bytes) in stored {
        let hour_ms = unix_ms(hour);
        let Some(batch) = hours.remove(&(id, hour_ms)) else { continue };
        let Some(block) = block else {
            // The hour's full resolution was dropped by retention: its windows cannot be merged exactly (a
            // redelivery would count twice), so the hour's sums stand and the late windows are not kept.
            stale += 1;
            continue;
        };
        let mut kept = unpack_gpu_hour(hour, &block)?;
        let mut n = 0;
        for (gi, ws) in batch {
            let had = kept.entry(gi).or_default();
            if noting {
                let before: HashSet<i64> = had.iter().map(|w| w.start_ms).collect();
                ws.iter().filter(|w| !before.contains(&w.start_ms)).for_each(|w| note(id, gi, w.start_ms));
            }
            n += merge(had, ws);
        }
        if n == 0 {
            continue;
        }
        added += n as u64;
        changed.push(id, hour_ms, &kept)?;
        // The hour as it was leaves its day's coverage; as it is now, it comes in.
        coverage.remove(
            id,
            hour,
            &HourCoverage {
                windows: i64::from(windows),
                inst_windows: i64::from(inst_windows),
                sampled_ms: i64::from(sampled_ms),
                inst_sampled_ms: i64::from(inst_sampled_ms),
                instances,
                block_bytes: block.len() as i64,
                inst_bytes: i64::from(inst_bytes.unwrap_or(0)),
            },
        );
        coverage.add(id, hour, &changed.coverage(changed.len() - 1));
    }
    if stale > 0 {
        tracing::warn!(hours = stale, "late telemetry for hours whose full resolution was dropped: not kept");
    }
    if !changed.is_empty() {
        update_gpu_hours(tx, &changed).await?;
        coverage.apply(tx).await?;
    }
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
    #[allow(clippy::type_complexity)]
    let mut rows = sqlx::query_as::<_, (String, bool, OffsetDateTime, i32, i32, i64, i32, Option<Vec<u8>>)>(
        "SELECT s.gpu_uuid, h.util_ms > 0 AND s.gpu_uuid = ANY($3), h.hour, h.span_from_ms, h.span_to_ms, h.util_sum,
                h.util_ms, CASE WHEN s.gpu_uuid = ANY($4) THEN h.inst_sums END
           FROM telemetry_series s JOIN telemetry_gpu_hours h ON h.org_id = s.org_id AND h.series_id = s.series_id
          WHERE s.org_id = $5 AND h.org_id = $5 AND h.hour >= $1 - interval '1 day' AND h.hour < $2
            AND ((h.util_ms > 0 AND s.gpu_uuid = ANY($3)) OR (h.instances <> 0 AND s.gpu_uuid = ANY($4)))",
    )
    .bind(from)
    .bind(to)
    .bind(whole)
    .bind(parents)
    .bind(tx.org().as_uuid())
    .fetch(tx.conn());
    while let Some((gpu_uuid, whole, hour, f, t, sum, ms, inst)) = rows.try_next().await? {
        let h = unix_ms(hour);
        if let Some(inst) = inst {
            let inst =
                decode_instance_sums(&inst).map_err(|e| DbError::Data(format!("instance sums of {hour}: {e}")))?;
            for (gi, s) in inst {
                let row = HourRow {
                    gpu_uuid: gpu_uuid.clone(),
                    gpu_instance_id: gi,
                    from: at_ms(h + s.span_from_ms),
                    to: at_ms(h + s.span_to_ms),
                    util_avg_pct: s.util_avg_pct(),
                };
                if s.util_ms > 0 && row.to > from {
                    each(row)?;
                }
            }
        }
        if whole {
            let row = HourRow {
                gpu_uuid,
                gpu_instance_id: -1,
                from: at_ms(h + i64::from(f)),
                to: at_ms(h + i64::from(t)),
                util_avg_pct: (ms > 0).then(|| sum as f64 / f64::from(ms) / 10.0),
            };
            if row.to > from {
                each(row)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        // Compressible but varied: runs of a few values, as encoded windows are.
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                if i % 7 == 0 { (x >> 56) as u8 } else { (i % 13) as u8 }
            })
            .collect()
    }

    #[test]
    fn blocks_round_trip_through_the_reused_compressor_as_small_as_a_fresh_ones() {
        let hour = at_ms(0);
        // Sizes around the output's first capacity and past it, one after the other on the same thread's state.
        for (seed, n) in [(1, 0), (2, 1), (3, 100), (4, 5_000), (5, 200_000), (6, 37), (7, 1_000_000)] {
            let raw = bytes(seed, n);
            let packed = deflate(&raw).unwrap();
            let mut fresh = flate2::write::DeflateEncoder::new(Vec::new(), Compression::fast());
            std::io::Write::write_all(&mut fresh, &raw).unwrap();
            let fresh = fresh.finish().unwrap();
            // Not byte for byte a new encoder's stream (that one is fed in pieces), as small.
            assert!(
                packed.len() <= fresh.len() + fresh.len() / 20 + 16,
                "{n} bytes: {} vs {}",
                packed.len(),
                fresh.len()
            );
            assert_eq!(inflate(hour, &packed).unwrap(), raw, "{n} bytes");
        }
    }

    #[test]
    fn a_damaged_or_oversized_block_is_an_error_and_the_next_block_still_reads() {
        let hour = at_ms(0);
        let raw = bytes(9, 50_000);
        let packed = deflate(&raw).unwrap();
        let cut = inflate(hour, &packed[..packed.len() / 2]).unwrap_err();
        assert!(cut.to_string().contains("ends early"), "{cut}");
        assert!(inflate(hour, &[0xff, 0xff, 0xff]).is_err());
        // A block that inflates past the limit is refused, not read whole.
        let bomb = deflate(&vec![0_u8; MAX_BLOCK_BYTES as usize + 10]).unwrap();
        let big = inflate(hour, &bomb).unwrap_err();
        assert!(big.to_string().contains("larger than a block can be"), "{big}");
        assert_eq!(inflate(hour, &packed).unwrap(), raw, "the state is reset after an error");
    }
}
