//! A month's utilization timelines kept out of memory for the month's summary of a large fleet: read once, a GPU at
//! a time, into an unnamed temporary file (18 bytes a device-hour, each device's hours contiguous, a sparse index of
//! every 64th), and each chunk of allocations given only the hours its own allocations overlap on their devices.
//! Held whole, the month's timelines and allocations were the server's peak at 100,000 GPUs (16 GB, docs/scaling.md).
//!
//! A chunk's timelines are the same analysis's input as the month's: `analyze_one` reads, per device, only the
//! sealed segments overlapping the allocation, and a segment left out overlaps none of the chunk's allocations on its
//! device — so it ends before any of them starts and trims nothing they read.

use std::{
    collections::{BTreeMap, HashMap},
    fs::File,
    io::{BufWriter, Read, Seek, SeekFrom, Write},
};

use gpuledger_core::{
    interval::Interval,
    utilization::{DeviceTimelines, HeldAllocation, Utilization},
};
use time::OffsetDateTime;

use crate::{db::OrgTx, error::AppError};

/// Bytes of a segment in the file: start and end (Unix ms), per-mille utilization, little-endian.
const SEG_BYTES: usize = 18;

fn spill_error(e: std::io::Error) -> AppError {
    AppError::Unavailable(format!("the month's utilization in its temporary file: {e}"))
}

/// The month's device timelines in a temporary file.
#[derive(Default)]
pub(super) struct Timelines {
    file: Option<File>,
    /// Telemetry key (`uuid`, `uuid#gi`) → first segment, segments, first mark.
    keys: HashMap<String, (u64, usize, usize)>,
    /// Each key's segments indexed sparsely.
    index: crate::scratch::SparseIndex,
}

/// Milliseconds since the epoch, rounded down.
fn ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000)).unwrap_or(i64::MAX)
}

impl Timelines {
    /// Every device's hours in `[from, to)` (whole GPUs and MIG instances), as `analytics::load` reads them.
    pub(super) async fn read(tx: &mut OrgTx, from: OffsetDateTime, to: OffsetDateTime) -> Result<Self, AppError> {
        let file = crate::scratch::unnamed_file("utilization").map_err(spill_error)?;
        let mut w = BufWriter::with_capacity(1 << 16, file);
        let mut out = Timelines::default();
        let mut at: u64 = 0;
        let mut failed: Option<AppError> = None;
        crate::telemetry::store::utilization_hours_each(tx, from, to, |uuid, rows| {
            if failed.is_some() {
                return Ok(());
            }
            // The GPU's and each instance's segments, by start.
            let mut by_key: BTreeMap<i32, Vec<(i64, i64, u16)>> = BTreeMap::new();
            for r in rows {
                let Some(util) = r.util_avg_pct else { continue };
                // As `load` takes them: a NaN average is no sample, an empty window nothing.
                let Some(u) = Utilization::from_pct_f32(util as f32) else { continue };
                if r.from >= r.to {
                    continue;
                }
                by_key.entry(r.gpu_instance_id).or_default().push((ms(r.from), ms(r.to), u.permille()));
            }
            for (gi, mut segs) in by_key {
                segs.sort_unstable();
                let key = if gi < 0 { uuid.to_string() } else { format!("{uuid}#{gi}") };
                let first_mark = out.index.mark(segs.iter().map(|(s, e, _)| (*s, *e)));
                for (s, e, p) in &segs {
                    let mut rec = [0_u8; SEG_BYTES];
                    rec[..8].copy_from_slice(&s.to_le_bytes());
                    rec[8..16].copy_from_slice(&e.to_le_bytes());
                    rec[16..].copy_from_slice(&p.to_le_bytes());
                    if let Err(e) = w.write_all(&rec) {
                        failed = Some(spill_error(e));
                        return Ok(());
                    }
                }
                // One UUID under two clusters: its series' hours come together, as one device's (as `load` files them).
                match out.keys.get_mut(&key) {
                    Some(_) => {
                        failed = Some(AppError::Internal(format!("telemetry key {key} met twice in the month's pass")));
                        return Ok(());
                    }
                    None => {
                        out.keys.insert(key, (at, segs.len(), first_mark));
                    }
                }
                at += segs.len() as u64;
            }
            Ok(())
        })
        .await?;
        if let Some(e) = failed {
            return Err(e);
        }
        out.file = Some(w.into_inner().map_err(|e| spill_error(e.into_error()))?);
        Ok(out)
    }

    /// The segments of `key` that can overlap `[lo, hi)` (ms): a superset, by the sparse index.
    fn near(&self, key: &str, lo: i64, hi: i64, buf: &mut Vec<u8>) -> Result<Vec<(i64, i64, u16)>, AppError> {
        let (Some(file), Some((first, n, first_mark))) = (self.file.as_ref(), self.keys.get(key)) else {
            return Ok(Vec::new());
        };
        let std::ops::Range { start: from, end: to } = self.index.near(*first_mark, *n, lo, hi);
        if from >= to {
            return Ok(Vec::new());
        }
        buf.resize((to - from) * SEG_BYTES, 0);
        let mut f = file;
        f.seek(SeekFrom::Start((first + from as u64) * SEG_BYTES as u64)).map_err(spill_error)?;
        f.read_exact(buf).map_err(spill_error)?;
        Ok(buf
            .chunks_exact(SEG_BYTES)
            .map(|c| {
                let word = |i: usize| {
                    let mut b = [0_u8; 8];
                    b.copy_from_slice(&c[i..i + 8]);
                    i64::from_le_bytes(b)
                };
                (word(0), word(8), u16::from_le_bytes([c[16], c[17]]))
            })
            .collect())
    }

    /// The timelines `chunk` reads: for each device its allocations hold, the segments overlapping one of them.
    pub(super) fn for_chunk(&self, chunk: &[HeldAllocation]) -> Result<DeviceTimelines, AppError> {
        // Per device: the allocations' spans on it, [start, end) in ms (start rounded down, end up).
        let mut held: HashMap<&str, Vec<(i64, i64)>> = HashMap::new();
        for a in chunk {
            let end = a.end.map_or(i64::MAX, |e| ms(e + time::Duration::nanoseconds(999_999)));
            for d in &a.devices {
                held.entry(d.as_str()).or_default().push((ms(a.start), end));
            }
        }
        let mut out = DeviceTimelines::new();
        let mut buf = Vec::new();
        for (device, spans) in held {
            let mut reach = crate::scratch::Reach::new(spans);
            let (lo, hi) = reach.bounds();
            for (s, e, p) in self.near(device, lo, hi, &mut buf)? {
                if reach.hits(s, e) {
                    let window = Interval::new(at(s)?, at(e)?).map_err(super::internal)?;
                    let u = Utilization::from_permille(p).map_err(super::internal)?;
                    out.push(device, window, u).map_err(super::internal)?;
                }
            }
        }
        Ok(out)
    }
}

fn at(ms: i64) -> Result<OffsetDateTime, AppError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).map_err(super::internal)
}
