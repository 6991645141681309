//! The month's energy for a close or a refresh, kept out of memory: read once in one ordered pass and spilled to an
//! unnamed temporary file, each part then given only the device-hours its own records overlap (docs/scaling.md,
//! "The streamed close"). Held whole in memory it was 24 bytes a device-hour — 173 MB at 10,000 GPUs, the part of
//! the close's memory that grew with the fleet; read per part from the database it cost the month's hours for every
//! part, or an index probe per window (measured, docs/benchmarks.md run G).

use std::{
    collections::HashMap,
    fs::File,
    io::{BufWriter, Read, Seek, SeekFrom, Write},
};

use gpuledger_core::ledger::{AllocationRecord, DeviceEnergy, EnergySpan, LedgerInput};
use time::OffsetDateTime;

use crate::{db::OrgTx, error::AppError};

/// Bytes of one span in the file: start and end (Unix µs) and joules, little-endian.
const SPAN_BYTES: usize = 24;

/// A month's device energy in a temporary file, devices in the order the database gave them (by UUID), each
/// device's spans by start. The default is no energy (a policy that does not price it).
#[derive(Default)]
pub(crate) struct MonthEnergy {
    file: Option<File>,
    /// Devices in file order: UUID, first span's index, spans, first mark's index.
    devices: Vec<(String, u64, usize, usize)>,
    by_uuid: HashMap<String, usize>,
    /// Each device's spans indexed sparsely: a part reads the blocks its records' hours can reach, not the device's
    /// month (parts in start order each touch most devices of the fleet for a few hours).
    index: crate::scratch::SparseIndex,
}

/// A [`MonthEnergy`] being written, a device at a time.
struct Spill {
    w: BufWriter<File>,
    out: MonthEnergy,
    at: u64,
}

impl Spill {
    fn new() -> Result<Self, AppError> {
        Ok(Self { w: BufWriter::with_capacity(1 << 16, unnamed_file()?), out: MonthEnergy::default(), at: 0 })
    }

    /// Appends a device (its spans by start).
    fn push(&mut self, d: DeviceEnergy) -> Result<(), AppError> {
        for sp in &d.spans {
            // As the ledger checks it over the whole month's input (a part sees only the hours it overlaps).
            if sp.end_us <= sp.start_us {
                return Err(AppError::computing(gpuledger_core::error::DomainError::invalid_at(
                    "energy",
                    format!("window of {} ends before it starts", d.gpu_uuid),
                )));
            }
            for word in [sp.start_us.to_le_bytes(), sp.end_us.to_le_bytes(), sp.joules.to_le_bytes()] {
                self.w.write_all(&word).map_err(spill_error)?;
            }
        }
        let first_mark = self.out.index.mark(d.spans.iter().map(|sp| (sp.start_us, sp.end_us)));
        self.out.by_uuid.insert(d.gpu_uuid.clone(), self.out.devices.len());
        self.out.devices.push((d.gpu_uuid, self.at, d.spans.len(), first_mark));
        self.at += d.spans.len() as u64;
        Ok(())
    }

    fn finish(self) -> Result<MonthEnergy, AppError> {
        let file = self.w.into_inner().map_err(|e| spill_error(e.into_error()))?;
        Ok(MonthEnergy { file: Some(file), ..self.out })
    }
}

/// The temporary directory full or unwritable: the server's condition, not the request's (nothing was changed; the
/// operator gives the directory room, docs/operations.md).
fn spill_error(e: std::io::Error) -> AppError {
    AppError::Unavailable(format!("the month's energy or bundle in a temporary file: {e}"))
}

/// An unnamed temporary file for the close (the month's energy, the compressed bundle).
pub(super) fn unnamed_file() -> Result<File, AppError> {
    crate::scratch::unnamed_file("close").map_err(spill_error)
}

impl MonthEnergy {
    /// The month's energy when `header`'s policy prices it (nothing otherwise): every device-hour with energy in
    /// `[from, to)`.
    pub(crate) async fn read(
        tx: &mut OrgTx,
        header: &LedgerInput,
        from: OffsetDateTime,
        to: OffsetDateTime,
    ) -> Result<Self, AppError> {
        if header.policy.energy.is_none() {
            return Ok(Self::default());
        }
        let started = std::time::Instant::now();
        let mut spill = Spill::new()?;
        let mut failed: Option<AppError> = None;
        crate::telemetry::store::energy_hours_each(tx, from, to, |d| {
            if failed.is_none()
                && let Err(e) = spill.push(d)
            {
                failed = Some(e);
            }
            Ok(())
        })
        .await?;
        if let Some(e) = failed {
            return Err(e);
        }
        let month = spill.finish()?;
        tracing::info!(
            devices = month.devices.len(),
            hours = month.hours(),
            ms = started.elapsed().as_millis() as u64,
            "the month's energy read once, spilled to a temporary file"
        );
        Ok(month)
    }

    /// Device-hours in the file.
    pub(crate) fn hours(&self) -> u64 {
        self.devices.iter().map(|(_, _, n, _)| *n as u64).sum()
    }

    /// One device's spans, read from the file.
    fn spans(&self, device: usize, buf: &mut Vec<u8>) -> Result<Vec<EnergySpan>, AppError> {
        let n = self.devices.get(device).map_or(0, |d| d.2);
        self.spans_in(device, 0..n, buf)
    }

    /// The spans of one device that can overlap `[lo, hi)` (µs), by the sparse index — a superset, the caller filters.
    fn spans_near(&self, device: usize, lo: i64, hi: i64, buf: &mut Vec<u8>) -> Result<Vec<EnergySpan>, AppError> {
        let Some((_, _, n, first_mark)) = self.devices.get(device) else { return Ok(Vec::new()) };
        self.spans_in(device, self.index.near(*first_mark, *n, lo, hi), buf)
    }

    /// Spans `range` of one device (indexes among its spans).
    fn spans_in(
        &self,
        device: usize,
        range: std::ops::Range<usize>,
        buf: &mut Vec<u8>,
    ) -> Result<Vec<EnergySpan>, AppError> {
        let (Some(file), Some((_, first, _, _))) = (self.file.as_ref(), self.devices.get(device)) else {
            return Ok(Vec::new());
        };
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let (first, n) = (*first + range.start as u64, range.len());
        buf.resize(n * SPAN_BYTES, 0);
        let mut f = file;
        f.seek(SeekFrom::Start(first * SPAN_BYTES as u64)).map_err(spill_error)?;
        f.read_exact(buf).map_err(spill_error)?;
        Ok(buf
            .chunks_exact(SPAN_BYTES)
            .map(|c| {
                let word = |i: usize| {
                    let mut b = [0_u8; 8];
                    b.copy_from_slice(&c[i * 8..i * 8 + 8]);
                    b
                };
                EnergySpan {
                    start_us: i64::from_le_bytes(word(0)),
                    end_us: i64::from_le_bytes(word(1)),
                    joules: u64::from_le_bytes(word(2)),
                }
            })
            .collect())
    }

    /// The energy `records` can reach: for each of their devices, the spans that overlap one of the records holding
    /// it (the ledger reads no other span of an allocation's devices, so the part's lines are the month's).
    pub(crate) fn for_part(&self, records: &[AllocationRecord]) -> Result<Vec<DeviceEnergy>, AppError> {
        if self.devices.is_empty() {
            return Ok(Vec::new());
        }
        // Whole µs around the record's nanoseconds: the start rounded down, the end up.
        let us = |t: OffsetDateTime, up: i128| {
            i64::try_from((t.unix_timestamp_nanos() + up).div_euclid(1_000)).unwrap_or(i64::MAX)
        };
        // Per device (file order): the records' spans on it, [start, end) in µs.
        let mut held: std::collections::BTreeMap<usize, Vec<(i64, i64)>> = Default::default();
        for r in records {
            let (s, e) = (us(r.start, 0), r.end.map_or(i64::MAX, |t| us(t, 999)));
            for d in &r.devices {
                if let Some(i) = self.by_uuid.get(d.as_str()) {
                    held.entry(*i).or_default().push((s, e));
                }
            }
        }
        let mut buf = Vec::new();
        let mut out = Vec::with_capacity(held.len());
        for (device, spans) in held {
            let mut reach = crate::scratch::Reach::new(spans);
            let (lo, hi) = reach.bounds();
            let mut keep = self.spans_near(device, lo, hi, &mut buf)?;
            keep.retain(|sp| reach.hits(sp.start_us, sp.end_us));
            if !keep.is_empty() {
                out.push(DeviceEnergy { gpu_uuid: self.devices[device].0.clone(), spans: keep });
            }
        }
        Ok(out)
    }

    /// Every device's energy, a device at a time in file order (the bundle's energy).
    pub(crate) fn each(&self, mut f: impl FnMut(&DeviceEnergy) -> Result<(), AppError>) -> Result<(), AppError> {
        let mut buf = Vec::new();
        for (i, (uuid, _, _, _)) in self.devices.iter().enumerate() {
            f(&DeviceEnergy { gpu_uuid: uuid.clone(), spans: self.spans(i, &mut buf)? })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use gpuledger_core::{confidence::Confidence, fraction::Fraction};
    use proptest::prelude::*;

    fn record(devices: &[&str], start_us: i64, end_us: Option<i64>) -> AllocationRecord {
        let t = |us: i64| OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1_000 + 1).unwrap();
        AllocationRecord {
            id: "c/a".into(),
            tenant: None,
            gpu_class: Some("H100".into()),
            fraction: Fraction::ONE,
            start: t(start_us),
            end: end_us.map(t),
            confidence: Confidence::Exact,
            devices: devices.iter().map(|d| d.to_string()).collect(),
            endpoint: None,
            share_basis: None,
        }
    }

    proptest! {
        /// A part gets, per device it holds, exactly the spans that overlap one of its records there — read back
        /// from the file as they were written — and the bundle's pass gives every device whole.
        #[test]
        fn a_part_gets_the_spans_its_records_overlap(
            hours in proptest::collection::vec(proptest::collection::vec((0i64..200, 1i64..10, 0u64..5_000), 0..12), 1..4),
            held in proptest::collection::vec((0usize..5, 0i64..220, proptest::option::of(0i64..40)), 0..8),
        ) {
            let names = ["GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-e"];
            let mut spill = Spill::new().unwrap();
            let mut devices = Vec::new();
            for (i, spans) in hours.iter().enumerate() {
                let mut spans: Vec<EnergySpan> = spans.iter().map(|(s, len, j)| EnergySpan {
                    start_us: s * 1_000, end_us: (s + len) * 1_000, joules: *j }).collect();
                spans.sort_by_key(|s| s.start_us);
                let d = DeviceEnergy { gpu_uuid: names[i].to_string(), spans };
                spill.push(d.clone()).unwrap();
                devices.push(d);
            }
            let month = spill.finish().unwrap();
            let records: Vec<AllocationRecord> = held.iter()
                .map(|(d, s, len)| record(&[names[*d]], s * 1_000, len.map(|l| (s + l) * 1_000)))
                .collect();
            let got = month.for_part(&records).unwrap();
            for d in &devices {
                // A record's start is 1 ns after its µs, its end too: a span ending at the start's µs is not reached,
                // one starting at the end's µs is.
                let ns = |us: i64| i128::from(us) * 1_000;
                let expected: Vec<EnergySpan> = d.spans.iter().copied().filter(|sp| records.iter().any(|r| {
                    r.devices.contains(&d.gpu_uuid)
                        && ns(sp.end_us) > r.start.unix_timestamp_nanos()
                        && r.end.is_none_or(|e| ns(sp.start_us) < e.unix_timestamp_nanos())
                })).collect();
                let found = got.iter().find(|g| g.gpu_uuid == d.gpu_uuid).map(|g| g.spans.clone()).unwrap_or_default();
                prop_assert_eq!(found, expected, "{}", d.gpu_uuid);
            }
            let mut all = Vec::new();
            month.each(|d| { all.push(d.clone()); Ok(()) }).unwrap();
            prop_assert_eq!(all, devices);
        }
    }
}
