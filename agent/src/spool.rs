//! The on-disk spool: every fact is written here, durably, before the agent counts it as safe, and leaves
//! only after the server confirms a durable commit ([`Spool::ack`]).
//!
//! The spool directory holds:
//! - `NNNNNNNNNNNNNNNNNNNN.seg`: append-only segments named after their first sequence number, each a run of
//!   records `[len: u32 LE][crc32 of payload: u32 LE][seq: u64 LE][payload]` with consecutive sequence
//!   numbers;
//! - `ack`: the highest acknowledged sequence number, replaced atomically;
//! - `gaps`: what each gap not yet accounted for dropped (below), replaced atomically; `gaps.bad` is one that did
//!   not read back, set aside;
//! - `lock`: locked while a [`Spool`] is open, so two processes never write one spool.
//!
//! [`Spool::open`] validates every record: a torn or corrupt tail is cut off, and records lost inside an
//! older segment are counted ([`Recovery`]). When the size cap is hit, the oldest segments go and a `gap`
//! fact takes their place, so the ledger shows the hole instead of a silent zero.
//!
//! The spool also remembers the event IDs of the non-telemetry facts each gap dropped
//! ([`Spool::remembered_gaps`]): after a re-list, [`Spool::recovery_facts`] compares them with the IDs the re-list
//! produced and says per gap what came back (a `gap_recovered` fact). The memory is capped
//! ([`MAX_REMEMBERED_IDS`], [`MAX_REMEMBERED_GAPS`]); an ID past the cap is forgotten and its fact counted lost, so
//! such a gap is never claimed recovered. It is kept in the `gaps` file (module `gaps`), rewritten at the end of an
//! append that changed it, so an agent restart between a drop and its re-list still lets the re-list account for
//! the gap, even one whose gap fact was delivered and left the spool. A `gaps` file that does not read back is set
//! aside and its gaps forgotten: they stay unrecovered.

mod gaps;

use std::collections::{HashSet, VecDeque};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use gpuledger_core::wire::{Fact, FactBody};
use time::OffsetDateTime;

use gaps::{GapMemory, GapTally};
pub use gaps::{MAX_REMEMBERED_GAPS, MAX_REMEMBERED_IDS};

/// Bytes before each payload: length, CRC and sequence number.
const HEADER: usize = 16;
/// Room kept for the gap fact written after a drop (its JSON, with a line per kind of fact dropped — at most the
/// 14 kinds of the wire format, about 110 bytes each — stays under 2 KiB).
const GAP_RESERVE: u64 = 2048;

/// Limits of a spool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolConfig {
    /// Cap on the segment bytes on disk; past it the oldest segments are dropped.
    pub max_bytes: u64,
    /// A segment is closed once the next record would take it past this size.
    pub segment_bytes: u64,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        Self { max_bytes: 256 << 20, segment_bytes: 4 << 20 }
    }
}

/// What [`Spool::open`] found damaged and removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes cut off after the last valid record of a segment (torn tails, corruption).
    pub truncated_bytes: u64,
    /// Unacknowledged records lost to corruption inside an older segment (counted from sequence numbers).
    pub corrupt_records: u64,
}

/// Why a spool operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A file operation failed.
    #[error("spool I/O on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Another process has the spool open.
    #[error("spool {0} is in use by another process")]
    Locked(PathBuf),
    /// A record too large for the spool's cap.
    #[error("a record of {len} bytes does not fit a spool capped at {max_bytes} bytes")]
    TooLarge {
        /// Payload length.
        len: usize,
        /// The cap.
        max_bytes: u64,
    },
    /// A record that was valid at open no longer reads back.
    #[error("record {seq} in {path} is corrupt")]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// The record's sequence number.
        seq: u64,
    },
    /// A fact that does not serialize.
    #[error("fact does not serialize: {0}")]
    Json(#[from] serde_json::Error),
}

/// Result of spool operations.
pub type Result<T, E = SpoolError> = std::result::Result<T, E>;

fn at(path: &Path) -> impl FnOnce(io::Error) -> SpoolError {
    let path = path.to_path_buf();
    move |source| SpoolError::Io { path, source }
}

fn seg_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(at(dir))
}

fn encode(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(HEADER + payload.len());
    // Callers check the length fits a u32 (`check_len`).
    rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    rec.extend_from_slice(&seq.to_le_bytes());
    rec.extend_from_slice(payload);
    rec
}

/// The record at the start of `buf`, if it is complete and its checksum matches: (seq, payload).
fn decode(buf: &[u8]) -> Option<(u64, &[u8])> {
    let word = |at: usize| buf.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let len = usize::try_from(word(0)?).ok()?;
    let crc = word(4)?;
    let seq = u64::from_le_bytes(buf.get(8..HEADER)?.try_into().ok()?);
    let payload = buf.get(HEADER..HEADER.checked_add(len)?)?;
    (crc32fast::hash(payload) == crc).then_some((seq, payload))
}

#[derive(Debug)]
struct Segment {
    first: u64,
    /// Byte offset of each record; record `i` has sequence number `first + i`.
    offsets: Vec<u64>,
    size: u64,
}

impl Segment {
    fn end(&self) -> u64 {
        self.first + self.offsets.len() as u64
    }
}

/// The spool: a directory of checksummed, fsynced records awaiting the server's acknowledgement.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    cfg: SpoolConfig,
    segments: VecDeque<Segment>,
    /// Open handle on the last segment while appending to it; `None` makes the next record start a new one.
    active: Option<File>,
    next_seq: u64,
    acked: u64,
    disk_bytes: u64,
    dropped_total: u64,
    recovery: Recovery,
    /// The node whose agent this is (node mode), named in gap facts.
    node: Option<String>,
    /// What each gap not yet accounted for by a re-list dropped, kept in the `gaps` file.
    gaps: GapMemory,
    _lock: File,
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, validating every record and cutting off damaged tails.
    pub fn open(dir: impl AsRef<Path>, cfg: SpoolConfig) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(at(&dir))?;
        let lock_path = dir.join("lock");
        let lock = File::create(&lock_path).map_err(at(&lock_path))?;
        // A lock can outlive its holder by a moment: a process forked while the spool was open holds a copy of
        // the descriptor until it execs. Retry briefly before declaring the spool in use.
        let mut attempts = 0;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if attempts < 40 => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(TryLockError::WouldBlock) => return Err(SpoolError::Locked(dir)),
                Err(TryLockError::Error(e)) => return Err(at(&lock_path)(e)),
            }
        }
        let acked = read_ack(&dir)?;
        let mut firsts = Vec::new();
        for entry in fs::read_dir(&dir).map_err(at(&dir))? {
            let name = entry.map_err(at(&dir))?.file_name();
            let first = name.to_str().and_then(|n| n.strip_suffix(".seg")).and_then(|n| n.parse::<u64>().ok());
            firsts.extend(first);
        }
        firsts.sort_unstable();

        let mut recovery = Recovery::default();
        let mut segments = VecDeque::new();
        for (i, &first) in firsts.iter().enumerate() {
            let path = seg_path(&dir, first);
            let data = fs::read(&path).map_err(at(&path))?;
            let (mut offsets, mut pos) = (Vec::new(), 0);
            while let Some((seq, payload)) = decode(&data[pos..])
                && seq == first + offsets.len() as u64
            {
                offsets.push(pos as u64);
                pos += HEADER + payload.len();
            }
            if pos < data.len() {
                let next = first + offsets.len() as u64;
                // Sequence numbers tell how many records the next segment's name skips over.
                let lost = firsts.get(i + 1).map_or(0, |&n| n.saturating_sub(next.max(acked + 1)));
                let cut = (data.len() - pos) as u64;
                tracing::warn!(segment = %path.display(), cut_bytes = cut, lost_records = lost,
                    "spool: cutting off a torn or corrupt segment tail");
                recovery.truncated_bytes += cut;
                recovery.corrupt_records += lost;
                let f = OpenOptions::new().write(true).open(&path).map_err(at(&path))?;
                f.set_len(pos as u64).and_then(|()| f.sync_all()).map_err(at(&path))?;
            }
            let seg = Segment { first, offsets, size: pos as u64 };
            // Empty or fully acknowledged (a crash between writing `ack` and deleting): not needed.
            if seg.offsets.is_empty() || seg.end() <= acked + 1 {
                fs::remove_file(&path).map_err(at(&path))?;
            } else {
                segments.push_back(seg);
            }
        }
        // Never reuse an acknowledged sequence number, even if its record was cut off.
        let next_seq = segments.back().map_or(1, Segment::end).max(acked + 1);
        let disk_bytes = segments.iter().map(|s| s.size).sum();
        let gaps = GapMemory::open(&dir);
        Ok(Self {
            dir,
            cfg,
            segments,
            active: None,
            next_seq,
            acked,
            disk_bytes,
            dropped_total: 0,
            recovery,
            node: None,
            gaps,
            _lock: lock,
        })
    }

    /// Names the node in the gap facts this spool writes (node agents).
    pub fn set_node(&mut self, node: Option<String>) {
        self.node = node;
    }

    /// Caps how many dropped facts' event IDs the spool remembers (default and most: [`MAX_REMEMBERED_IDS`]); IDs
    /// read back past a lower cap are forgotten (counted lost). 0 remembers no gap at all and removes the `gaps` file
    /// at the next append: for node agents, which send no account.
    pub fn set_remember_cap(&mut self, cap: usize) {
        self.gaps.set_cap(cap);
    }

    /// The gaps (event IDs of their gap facts) whose dropped facts the spool remembers — in this process or, through
    /// the `gaps` file, an earlier one — and no re-list has accounted for yet.
    pub fn remembered_gaps(&self) -> Vec<String> {
        self.gaps.gaps()
    }

    /// One `gap_recovered` fact for each of `gaps` still remembered: per kind it dropped, how many facts a re-list
    /// derived again (their event IDs are among `produced`) and how many stay lost (telemetry windows always do).
    /// The gaps are forgotten: each is accounted for once. The `gaps` file forgets them at the end of the next
    /// append — the one spooling these facts — so a restart before they are spooled accounts for them again (same
    /// event IDs, stored once).
    pub fn recovery_facts(&mut self, gaps: &[String], produced: &HashSet<String>, now: OffsetDateTime) -> Vec<Fact> {
        self.gaps.recovery_facts(gaps, produced, now)
    }

    /// What opening found damaged.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Appends one record and fsyncs it: once this returns, the record survives a crash. Returns its
    /// sequence number.
    pub fn append(&mut self, payload: &[u8]) -> Result<u64> {
        Ok(self.append_batch(&[payload])?.first().copied().unwrap_or(0))
    }

    /// Appends records with one fsync at the end. Returns their sequence numbers (a gap fact written to make
    /// room may come between them).
    pub fn append_batch<P: AsRef<[u8]>>(&mut self, payloads: &[P]) -> Result<Vec<u64>> {
        for p in payloads {
            self.check_len(p.as_ref().len())?;
        }
        let mut seqs = Vec::with_capacity(payloads.len());
        for p in payloads {
            let p = p.as_ref();
            self.make_room((HEADER + p.len()) as u64)?;
            seqs.push(self.write_record(p)?);
        }
        if let Some(f) = &self.active {
            let last = self.segments.back().map_or(0, |s| s.first);
            f.sync_data().map_err(at(&seg_path(&self.dir, last)))?;
        }
        // Only once the records are durable: the gap fact before the memory of it, the accounts before the gaps
        // they account for are forgotten. Nothing is written unless the memory changed.
        self.gaps.persist();
        Ok(seqs)
    }

    /// Appends one fact as JSON; see [`Spool::append`].
    pub fn append_fact(&mut self, fact: &Fact) -> Result<u64> {
        self.append(&serde_json::to_vec(fact)?)
    }

    /// Appends facts with one fsync; see [`Spool::append_batch`].
    pub fn append_facts(&mut self, facts: &[Fact]) -> Result<Vec<u64>> {
        let payloads = facts.iter().map(serde_json::to_vec).collect::<Result<Vec<_>, _>>()?;
        self.append_batch(&payloads)
    }

    /// The oldest unacknowledged records, in sequence order: at most `max_records`, and at most `max_bytes`
    /// of payload (but always at least one record while any is pending).
    pub fn pending(&self, max_records: usize, max_bytes: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for seg in &self.segments {
            if !self.read_segment(seg, max_records, max_bytes, &mut out, &mut bytes)? {
                break;
            }
        }
        Ok(out)
    }

    /// [`Spool::pending`], decoded as facts; a record that is no fact is skipped (and goes with the next
    /// ack).
    pub fn pending_facts(&self, max_records: usize, max_bytes: u64) -> Result<Vec<(u64, Fact)>> {
        let records = self.pending(max_records, max_bytes)?;
        Ok(records
            .into_iter()
            // Empty records are tombstones of compacted facts.
            .filter(|(_, p)| !p.is_empty())
            .filter_map(|(seq, p)| match serde_json::from_slice(&p) {
                Ok(fact) => Some((seq, fact)),
                Err(e) => {
                    tracing::warn!(seq, error = %e, "spool: skipping a record that is not a fact");
                    None
                }
            })
            .collect())
    }

    /// Records that the server durably committed everything up to `up_to_seq`, and deletes segments that
    /// hold nothing else. Lower values than an earlier ack are ignored.
    pub fn ack(&mut self, up_to_seq: u64) -> Result<()> {
        // Acknowledging a number not yet issued would silently acknowledge future records.
        let up_to = up_to_seq.min(self.next_seq - 1);
        if up_to <= self.acked {
            return Ok(());
        }
        let tmp = self.dir.join("ack.tmp");
        let path = self.dir.join("ack");
        File::create(&tmp)
            .and_then(|mut f| f.write_all(format!("{up_to}\n").as_bytes()).and_then(|()| f.sync_all()))
            .and_then(|()| fs::rename(&tmp, &path))
            .map_err(at(&path))?;
        sync_dir(&self.dir)?;
        self.acked = up_to;
        while let Some(seg) = self.segments.front()
            && seg.end() <= up_to + 1
        {
            let path = seg_path(&self.dir, seg.first);
            fs::remove_file(&path).map_err(at(&path))?;
            self.disk_bytes -= seg.size;
            self.segments.pop_front();
            if self.segments.is_empty() {
                self.active = None;
            }
        }
        Ok(())
    }

    /// The highest acknowledged sequence number (0: none).
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Records awaiting acknowledgement.
    pub fn pending_count(&self) -> u64 {
        let from = self.acked + 1;
        self.segments.iter().map(|s| s.end().saturating_sub(s.first.max(from))).sum()
    }

    /// Bytes on disk (headers included) of records awaiting acknowledgement.
    pub fn pending_bytes(&self) -> u64 {
        let from = self.acked + 1;
        let unacked = |s: &Segment| match s.offsets.get(from.saturating_sub(s.first) as usize) {
            Some(off) => s.size - off,
            None => 0,
        };
        self.segments.iter().map(unacked).sum()
    }

    /// Bytes of all segments on disk (what the cap limits).
    pub fn disk_bytes(&self) -> u64 {
        self.disk_bytes
    }

    /// Unacknowledged records dropped by the size cap since open.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_total
    }

    /// The cap on the spool's bytes on disk.
    pub fn max_bytes(&self) -> u64 {
        self.cfg.max_bytes
    }

    fn check_len(&self, len: usize) -> Result<()> {
        if u32::try_from(len).is_err() || (HEADER + len) as u64 + GAP_RESERVE > self.cfg.max_bytes {
            return Err(SpoolError::TooLarge { len, max_bytes: self.cfg.max_bytes });
        }
        Ok(())
    }

    /// Makes room for a record of `need` bytes (and the gap fact) under the cap, money before analytics: first the
    /// closed segments are compacted oldest first — records already delivered and undelivered telemetry become
    /// empty tombstones (their sequence numbers stay, so nothing else moves) — and only then are the oldest
    /// segments dropped whole.
    fn make_room(&mut self, need: u64) -> Result<()> {
        if self.disk_bytes + need <= self.cfg.max_bytes {
            return Ok(());
        }
        let mut gap = GapTally::for_node(self.node.clone());
        // The last segment is the one being written: left alone.
        for i in 0..self.segments.len().saturating_sub(1) {
            if self.disk_bytes + need + GAP_RESERVE <= self.cfg.max_bytes {
                break;
            }
            self.compact(i, &mut gap)?;
        }
        while self.disk_bytes + need + GAP_RESERVE > self.cfg.max_bytes
            && let Some(seg) = self.segments.pop_front()
        {
            if self.segments.is_empty() {
                // It was the segment being written: the next record starts a new one.
                self.active = None;
            }
            let from = seg.first.max(self.acked + 1);
            let mut count = seg.end().saturating_sub(from);
            if count > 0 {
                let (mut recs, mut bytes) = (Vec::new(), 0);
                // Read only for the time range: an unreadable segment still counts whole.
                match self.read_segment(&seg, usize::MAX, u64::MAX, &mut recs, &mut bytes) {
                    // Tombstones of compacted facts were counted when they were compacted.
                    Ok(_) => count = recs.iter().filter(|(_, p)| !p.is_empty()).count() as u64,
                    Err(e) => tracing::warn!(error = %e, "spool: dropping a segment that does not read back"),
                }
                gap.add(from, seg.end() - 1, count, &recs);
            }
            let path = seg_path(&self.dir, seg.first);
            fs::remove_file(&path).map_err(at(&path))?;
            self.disk_bytes -= seg.size;
            self.dropped_total += count;
            tracing::warn!(segment = %path.display(), records = count, "spool: full, dropped oldest segment");
        }
        if let Some(fact) = gap.fact() {
            self.write_record(&serde_json::to_vec(&fact)?)?;
            self.gaps.remember(&fact.event_id, gap);
        }
        Ok(())
    }

    /// Rewrites closed segment `i` with delivered records and undelivered telemetry replaced by empty tombstones
    /// (counted in `gap`); the file is replaced atomically (written beside, fsynced, renamed).
    fn compact(&mut self, i: usize, gap: &mut GapTally) -> Result<()> {
        let Some(seg) = self.segments.get(i) else { return Ok(()) };
        let path = seg_path(&self.dir, seg.first);
        let data = fs::read(&path).map_err(at(&path))?;
        let mut out = Vec::with_capacity(data.len() / 4);
        let mut offsets = Vec::with_capacity(seg.offsets.len());
        let mut changed = false;
        for (k, &off) in seg.offsets.iter().enumerate() {
            let seq = seg.first + k as u64;
            let end = seg.offsets.get(k + 1).copied().unwrap_or(seg.size);
            let Some((s, payload)) = data.get(off as usize..end as usize).and_then(decode) else {
                return Err(SpoolError::Corrupt { path, seq });
            };
            if s != seq {
                return Err(SpoolError::Corrupt { path, seq });
            }
            let keep = if payload.is_empty() {
                true
            } else if seq <= self.acked {
                false
            } else {
                match serde_json::from_slice::<Fact>(payload) {
                    Ok(f) if matches!(f.body, FactBody::Telemetry(_) | FactBody::ProcessTelemetry(_)) => {
                        gap.add_fact(seq, &f);
                        self.dropped_total += 1;
                        false
                    }
                    // An earlier gap fact is folded into the one this compaction writes: one gap stands for all.
                    Ok(Fact { event_id, body: FactBody::Gap(g), .. }) => {
                        gap.fold(seq, &event_id, &g);
                        false
                    }
                    _ => true,
                }
            };
            changed |= !keep;
            offsets.push(out.len() as u64);
            out.extend_from_slice(&encode(seq, if keep { payload } else { &[] }));
        }
        if !changed {
            return Ok(());
        }
        let tmp = path.with_extension("compact");
        {
            let mut f = File::create(&tmp).map_err(at(&tmp))?;
            f.write_all(&out).map_err(at(&tmp))?;
            f.sync_data().map_err(at(&tmp))?;
        }
        fs::rename(&tmp, &path).map_err(at(&path))?;
        sync_dir(&self.dir)?;
        let size = out.len() as u64;
        if let Some(seg) = self.segments.get_mut(i) {
            self.disk_bytes = self.disk_bytes - seg.size + size;
            seg.offsets = offsets;
            seg.size = size;
        }
        tracing::warn!(segment = %path.display(), bytes = size, "spool: full, compacted (telemetry and delivered records dropped)");
        Ok(())
    }

    /// Writes one record (no fsync), starting a new segment when needed.
    fn write_record(&mut self, payload: &[u8]) -> Result<u64> {
        let seq = self.next_seq;
        let len = (HEADER + payload.len()) as u64;
        let full = |s: &Segment| s.size > 0 && s.size + len > self.cfg.segment_bytes;
        if self.active.is_none() || self.segments.back().is_none_or(full) {
            if let Some(old) = self.active.take() {
                let last = self.segments.back().map_or(0, |s| s.first);
                old.sync_data().map_err(at(&seg_path(&self.dir, last)))?;
            }
            let path = seg_path(&self.dir, seq);
            let file = OpenOptions::new().append(true).create_new(true).open(&path).map_err(at(&path))?;
            sync_dir(&self.dir)?;
            self.segments.push_back(Segment { first: seq, offsets: Vec::new(), size: 0 });
            self.active = Some(file);
        }
        let (Some(file), Some(seg)) = (self.active.as_mut(), self.segments.back_mut()) else {
            return Err(at(&self.dir)(io::Error::other("no segment to append to")));
        };
        let path = seg_path(&self.dir, seg.first);
        if let Err(e) = file.write_all(&encode(seq, payload)) {
            // A partial record must not be followed by more: cut it off and continue in a new segment.
            let _ = file.set_len(seg.size);
            self.active = None;
            if seg.offsets.is_empty() {
                let _ = fs::remove_file(&path);
                self.segments.pop_back();
            }
            return Err(at(&path)(e));
        }
        seg.offsets.push(seg.size);
        seg.size += len;
        self.disk_bytes += len;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Appends `seg`'s unacknowledged records to `out` within the limits; false once a limit stops it.
    fn read_segment(
        &self,
        seg: &Segment,
        max_records: usize,
        max_bytes: u64,
        out: &mut Vec<(u64, Vec<u8>)>,
        bytes: &mut u64,
    ) -> Result<bool> {
        let start = seg.first.max(self.acked + 1);
        if start >= seg.end() {
            return Ok(true);
        }
        let path = seg_path(&self.dir, seg.first);
        let mut file = BufReader::new(File::open(&path).map_err(at(&path))?);
        let i0 = (start - seg.first) as usize;
        file.seek(SeekFrom::Start(seg.offsets[i0])).map_err(at(&path))?;
        for i in i0..seg.offsets.len() {
            let seq = seg.first + i as u64;
            let len = seg.offsets.get(i + 1).copied().unwrap_or(seg.size) - seg.offsets[i];
            let payload_len = len - HEADER as u64;
            if out.len() >= max_records || (!out.is_empty() && *bytes + payload_len > max_bytes) {
                return Ok(false);
            }
            let mut buf = vec![0; len as usize];
            file.read_exact(&mut buf).map_err(at(&path))?;
            match decode(&buf) {
                Some((s, p)) if s == seq && p.len() as u64 == payload_len => out.push((seq, p.to_vec())),
                _ => return Err(SpoolError::Corrupt { path, seq }),
            }
            *bytes += payload_len;
        }
        Ok(true)
    }
}

fn read_ack(dir: &Path) -> Result<u64> {
    let path = dir.join("ack");
    match fs::read_to_string(&path) {
        Ok(s) => Ok(s.trim().parse().unwrap_or_else(|_| {
            // Resending is safe (the server deduplicates by event ID); refusing to start is not.
            tracing::warn!(path = %path.display(), "spool: unreadable ack file, resending everything");
            0
        })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(at(&path)(e)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use gpuledger_core::wire::{
        AllocationVanished, EVENT_ID_MAX, GapFact, GapKind, GapKindRecovery, GapRecovery, event_id,
    };
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicU64, Ordering};
    use time::macros::datetime;

    /// A scratch directory, removed on drop.
    pub(super) struct TempDir(pub(super) PathBuf);

    impl TempDir {
        pub(super) fn new(name: &str) -> Self {
            static N: AtomicU64 = AtomicU64::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("gpuledger-spool-{}-{name}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            Self(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn fact(i: u64) -> Fact {
        let t = datetime!(2026-11-01 00:00 UTC) + time::Duration::seconds(i as i64);
        Fact {
            event_id: event_id("vanished", &[&i.to_string()]),
            observed_at: t,
            body: FactBody::AllocationVanished(AllocationVanished { allocation_id: format!("a{i}"), last_seen_at: t }),
        }
    }

    /// Fixed-size payloads: every record is 16 + 11 = 27 bytes.
    fn rec(i: u64) -> Vec<u8> {
        format!("record-{i:04}").into_bytes()
    }

    fn all(s: &Spool) -> Vec<(u64, Vec<u8>)> {
        s.pending(usize::MAX, u64::MAX).unwrap()
    }

    fn seqs(s: &Spool) -> Vec<u64> {
        all(s).into_iter().map(|(q, _)| q).collect()
    }

    fn seg_files(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "seg"))
            .collect();
        v.sort();
        v
    }

    const SMALL: SpoolConfig = SpoolConfig { max_bytes: 1 << 20, segment_bytes: 1024 };

    #[test]
    fn round_trip_ack_and_reopen() {
        let dir = TempDir::new("rt");
        let facts: Vec<Fact> = (0..40).map(fact).collect();
        let mut s = Spool::open(&dir.0, SMALL).unwrap();
        for f in &facts[..10] {
            s.append_fact(f).unwrap();
        }
        assert_eq!(s.append_facts(&facts[10..]).unwrap(), (11..=40).collect::<Vec<_>>());
        drop(s);

        let mut s = Spool::open(&dir.0, SMALL).unwrap();
        assert_eq!(s.recovery(), &Recovery::default());
        let got = s.pending_facts(usize::MAX, u64::MAX).unwrap();
        assert_eq!(got.iter().map(|(q, _)| *q).collect::<Vec<_>>(), (1..=40).collect::<Vec<_>>());
        assert_eq!(got.into_iter().map(|(_, f)| f).collect::<Vec<_>>(), facts);
        assert_eq!(s.pending_count(), 40);
        assert_eq!(s.pending(5, u64::MAX).unwrap().len(), 5);
        assert_eq!(s.pending(usize::MAX, 1).unwrap().len(), 1, "one record even past the byte limit");
        let files = seg_files(&dir.0).len();
        assert!(files > 2, "{files} segments");

        s.ack(20).unwrap();
        s.ack(3).unwrap(); // lower: ignored
        drop(s);
        let mut s = Spool::open(&dir.0, SMALL).unwrap();
        assert_eq!(s.acked(), 20);
        assert_eq!(seqs(&s), (21..=40).collect::<Vec<_>>());
        assert!(seg_files(&dir.0).len() < files, "acknowledged segments deleted");
        assert!(s.pending_bytes() < s.disk_bytes() || seg_files(&dir.0).len() == 1);

        s.ack(1000).unwrap(); // clamped to the last issued number
        assert!(seg_files(&dir.0).is_empty());
        assert_eq!((s.pending_count(), s.pending_bytes(), s.disk_bytes()), (0, 0, 0));
        drop(s);
        let mut s = Spool::open(&dir.0, SMALL).unwrap();
        assert_eq!(s.append(b"next").unwrap(), 41, "sequence numbers survive restarts");
    }

    /// Damages the last record of a 10-record segment; reopening keeps `kept` records and cuts `cut` bytes.
    fn torn_tail(name: &str, damage: impl Fn(&mut Vec<u8>), kept: u64, cut: u64) {
        let dir = TempDir::new(name);
        let mut s = Spool::open(&dir.0, SMALL).unwrap();
        s.append_batch(&(0..10).map(rec).collect::<Vec<_>>()).unwrap();
        drop(s);
        let path = &seg_files(&dir.0)[0];
        let mut data = fs::read(path).unwrap();
        damage(&mut data);
        fs::write(path, data).unwrap();

        let mut s = Spool::open(&dir.0, SMALL).unwrap();
        let want = Recovery { truncated_bytes: cut, corrupt_records: 0 };
        assert_eq!(s.recovery(), &want, "{name}");
        let records: Vec<_> = (0..kept).map(|i| (i + 1, rec(i))).collect();
        assert_eq!(all(&s), records, "{name}");
        assert_eq!(s.append(b"after").unwrap(), kept + 1, "{name}");
        drop(s);
        let s = Spool::open(&dir.0, SMALL).unwrap();
        assert_eq!(s.recovery(), &Recovery::default(), "{name}");
        assert_eq!(all(&s).last().unwrap(), &(kept + 1, b"after".to_vec()), "{name}");
        assert_eq!(s.pending_count(), kept + 1, "{name}");
    }

    #[test]
    fn torn_tail_is_cut_off_and_appending_resumes() {
        torn_tail("truncated", |d| d.truncate(10 * 27 - 5), 9, 22);
        torn_tail("garbage", |d| d.extend_from_slice(b"garbage!garbage"), 10, 15);
        torn_tail("flipped", |d| d[10 * 27 - 2] ^= 0x40, 9, 27);
    }

    #[test]
    fn corrupt_record_in_an_older_segment_loses_only_the_rest_of_it() {
        let dir = TempDir::new("mid");
        let cfg = SpoolConfig { max_bytes: 1 << 20, segment_bytes: 3 * 27 };
        let mut s = Spool::open(&dir.0, cfg).unwrap();
        for i in 0..12 {
            s.append(&rec(i)).unwrap();
        }
        drop(s);
        let files = seg_files(&dir.0);
        assert_eq!(files.len(), 4);
        let mut d = fs::read(&files[1]).unwrap(); // seqs 4, 5, 6
        d[27 + HEADER + 3] ^= 1; // seq 5's payload
        fs::write(&files[1], d).unwrap();

        let s = Spool::open(&dir.0, cfg).unwrap();
        assert_eq!(s.recovery(), &Recovery { truncated_bytes: 2 * 27, corrupt_records: 2 });
        assert_eq!(seqs(&s), [1, 2, 3, 4, 7, 8, 9, 10, 11, 12]);
        assert_eq!(all(&s)[4], (7, rec(6)));
        assert_eq!(fs::metadata(&files[1]).unwrap().len(), 27);
    }

    #[test]
    fn size_cap_drops_the_oldest_and_spools_a_gap() {
        let dir = TempDir::new("cap");
        let cfg = SpoolConfig { max_bytes: 4096, segment_bytes: 1024 };
        let facts: Vec<Fact> = (0..200).map(fact).collect();
        let mut s = Spool::open(&dir.0, cfg).unwrap();
        for f in &facts {
            s.append_fact(f).unwrap();
            assert!(s.disk_bytes() <= cfg.max_bytes, "{} bytes", s.disk_bytes());
        }
        let on_disk: u64 = seg_files(&dir.0).iter().map(|p| fs::metadata(p).unwrap().len()).sum();
        assert_eq!(on_disk, s.disk_bytes());
        assert!(on_disk > cfg.max_bytes / 2, "{on_disk} bytes: the cap is used");
        assert!(s.dropped_total() > 0);
        drop(s);

        let s = Spool::open(&dir.0, cfg).unwrap();
        let pending = s.pending_facts(usize::MAX, u64::MAX).unwrap();
        assert_eq!(pending.len() as u64, s.pending_count());
        let (gaps, kept): (Vec<_>, Vec<_>) = pending.into_iter().map(|(_, f)| f).partition(|f| f.body.kind() == "gap");
        let first_kept = 200 - kept.len();
        assert!(first_kept > 0);
        assert_eq!(kept, facts[first_kept..], "the newest facts survive, in order");
        let gaps: Vec<GapFact> = gaps
            .into_iter()
            .map(|f| match f.body {
                FactBody::Gap(g) => {
                    assert!(f.event_id.starts_with("gap/"));
                    assert_eq!(f.observed_at, g.to);
                    g
                }
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(gaps.iter().map(|g| g.dropped).sum::<u64>(), first_kept as u64, "every dropped fact counted once");
        assert_eq!(gaps.iter().map(|g| g.from).min().unwrap(), facts[0].observed_at);
        assert_eq!(gaps.iter().map(|g| g.to).max().unwrap(), facts[first_kept - 1].observed_at);
    }

    #[test]
    fn a_gap_says_per_kind_what_it_lost_and_which_times_the_facts_were_about() {
        use gpuledger_core::wire::{Stat, TelemetryRollup};
        let dir = TempDir::new("kinds");
        let cfg = SpoolConfig { max_bytes: 16 * 1024, segment_bytes: 2048 };
        // Observed on 1 December, about June (allocations ending) and July (telemetry windows): the gap must name
        // the facts' own months, not the day they were read.
        let seen = datetime!(2026-12-01 12:00 UTC);
        let facts: Vec<Fact> = (0..400u64)
            .map(|i| {
                let own = datetime!(2026-06-01 00:00 UTC) + time::Duration::hours(i as i64);
                let body = if i % 2 == 0 {
                    FactBody::AllocationVanished(AllocationVanished {
                        allocation_id: format!("a{i}"),
                        last_seen_at: own,
                    })
                } else {
                    FactBody::Telemetry(TelemetryRollup {
                        node: "n1".into(),
                        gpu_uuid: "GPU-1".into(),
                        gpu_instance_id: None,
                        mig_profile: None,
                        window_start: own,
                        window_end: own + time::Duration::minutes(1),
                        samples: 6,
                        utilization_pct: Some(Stat { min: 1.0, avg: 2.0, max: 3.0 }),
                        memory_used_mib: None,
                        power_w: None,
                        energy_j: None,
                        pod: None,
                    })
                };
                Fact { event_id: event_id("k", &[&i.to_string()]), observed_at: seen, body }
            })
            .collect();
        let mut s = Spool::open(&dir.0, cfg).unwrap();
        s.set_node(Some("gpu-node-7".into()));
        for f in &facts {
            s.append_fact(f).unwrap();
        }
        assert!(s.dropped_total() > 0);
        let pending = s.pending_facts(usize::MAX, u64::MAX).unwrap();
        let gaps: Vec<GapFact> = pending
            .iter()
            .filter_map(|(_, f)| match &f.body {
                FactBody::Gap(g) => Some(g.clone()),
                _ => None,
            })
            .collect();
        assert!(!gaps.is_empty());
        assert!(gaps.iter().all(|g| g.node.as_deref() == Some("gpu-node-7")));
        // Facts lost: those not among the records still pending (dropped gap records are not facts).
        let dropped = facts.len() as u64 - (pending.len() - gaps.len()) as u64;
        assert_eq!(gaps.iter().map(|g| g.dropped).sum::<u64>(), dropped, "every dropped fact counted once");
        let per_kind = |kind: &str| -> (u64, OffsetDateTime, OffsetDateTime) {
            let ks: Vec<&GapKind> = gaps.iter().flat_map(|g| g.kinds.iter()).filter(|k| k.kind == kind).collect();
            (
                ks.iter().map(|k| k.count).sum(),
                ks.iter().map(|k| k.from).min().unwrap(),
                ks.iter().map(|k| k.to).max().unwrap(),
            )
        };
        let (vanished, telemetry) = (per_kind("allocation_vanished"), per_kind("telemetry"));
        assert_eq!(vanished.0 + telemetry.0, dropped, "{gaps:?}");
        let first = datetime!(2026-06-01 00:00 UTC);
        assert_eq!(vanished.1, first, "the oldest allocation's own time");
        assert_eq!(telemetry.1, first + time::Duration::hours(1));
        assert!(vanished.2 < datetime!(2026-08-01 00:00 UTC) && telemetry.2 < datetime!(2026-08-01 00:00 UTC));
        let gap = &gaps[0];
        // When they were read is still the gap's from/to.
        assert_eq!((gap.from, gap.to), (seen, seen));
    }

    /// `n` facts observed now, about June: allocation facts (even `i`) and telemetry windows (odd `i`).
    fn mixed_facts(n: u64) -> Vec<Fact> {
        use gpuledger_core::wire::{Stat, TelemetryRollup};
        let seen = datetime!(2026-12-01 12:00 UTC);
        (0..n)
            .map(|i| {
                let own = datetime!(2026-06-01 00:00 UTC) + time::Duration::hours(i as i64);
                let body = if i % 2 == 0 {
                    FactBody::AllocationVanished(AllocationVanished {
                        allocation_id: format!("a{i}"),
                        last_seen_at: own,
                    })
                } else {
                    FactBody::Telemetry(TelemetryRollup {
                        node: "n1".into(),
                        gpu_uuid: "GPU-1".into(),
                        gpu_instance_id: None,
                        mig_profile: None,
                        window_start: own,
                        window_end: own + time::Duration::minutes(1),
                        samples: 6,
                        utilization_pct: Some(Stat { min: 1.0, avg: 2.0, max: 3.0 }),
                        memory_used_mib: None,
                        power_w: None,
                        energy_j: None,
                        pod: None,
                    })
                };
                Fact { event_id: event_id("k", &[&i.to_string()]), observed_at: seen, body }
            })
            .collect()
    }

    /// Overflows a small spool with `facts` (nothing delivered): the event IDs of the facts it dropped, and the
    /// pending gap facts. One batch: room is made record by record all the same, with one fsync instead of hundreds.
    fn overflow(s: &mut Spool, facts: &[Fact]) -> (HashSet<String>, Vec<(String, GapFact)>) {
        s.append_facts(facts).unwrap();
        let pending = s.pending_facts(usize::MAX, u64::MAX).unwrap();
        let kept: HashSet<&str> = pending.iter().map(|(_, f)| f.event_id.as_str()).collect();
        let dropped = facts.iter().map(|f| f.event_id.clone()).filter(|id| !kept.contains(id.as_str())).collect();
        let gaps = pending
            .into_iter()
            .filter_map(|(_, f)| match f.body {
                FactBody::Gap(g) => Some((f.event_id, g)),
                _ => None,
            })
            .collect();
        (dropped, gaps)
    }

    fn recoveries(facts: &[Fact]) -> Vec<GapRecovery> {
        facts
            .iter()
            .map(|f| match &f.body {
                FactBody::GapRecovered(r) => {
                    assert_eq!(f.event_id, event_id("gap-recovered", &[&r.gap]));
                    r.clone()
                }
                other => panic!("not an account of a gap: {other:?}"),
            })
            .collect()
    }

    /// The spool remembers, per gap, the IDs of the non-telemetry facts it dropped (folded gaps' memory moves to the
    /// gap that took them over), and after a re-list says per gap and kind what came back: the re-derived
    /// allocation facts recovered, those of objects gone from the API lost, telemetry windows always lost.
    #[test]
    fn a_re_list_accounts_for_each_gap_by_the_ids_it_produced() {
        let dir = TempDir::new("recovery");
        let mut s = Spool::open(&dir.0, SpoolConfig { max_bytes: 16 * 1024, segment_bytes: 2048 }).unwrap();
        let facts = mixed_facts(400);
        let (dropped, gaps) = overflow(&mut s, &facts);
        assert!(!gaps.is_empty() && !dropped.is_empty());
        // Exactly the gap facts still to deliver are remembered: earlier ones were folded into them.
        let remembered = s.remembered_gaps();
        let mut pending_gaps: Vec<String> = gaps.iter().map(|(id, _)| id.clone()).collect();
        pending_gaps.sort();
        assert_eq!(remembered, pending_gaps);
        // The re-list derives every allocation fact again but those of every fourth object (gone from the API).
        let gone = |f: &Fact| f.event_id.ends_with('0') || f.event_id.ends_with('4') || f.event_id.ends_with('8');
        let produced: HashSet<String> = facts
            .iter()
            .filter(|f| matches!(f.body, FactBody::AllocationVanished(_)) && !gone(f))
            .map(|f| f.event_id.clone())
            .collect();
        let now = datetime!(2026-12-02 08:00 UTC);
        let all = recoveries(&s.recovery_facts(&remembered, &produced, now));
        // The gaps still to deliver, and each gap fact they took over (it may have reached the server before).
        let accounts: Vec<GapRecovery> = all.iter().filter(|r| pending_gaps.contains(&r.gap)).cloned().collect();
        assert_eq!(accounts.len(), gaps.len());
        for taken_over in all.iter().filter(|r| !pending_gaps.contains(&r.gap)) {
            assert!(taken_over.kinds.iter().all(|k| k.kind != "telemetry" || k.recovered == 0), "{taken_over:?}");
        }
        let sum = |kind: &str, f: fn(&GapKindRecovery) -> u64| -> u64 {
            accounts.iter().flat_map(|r| r.kinds.iter()).filter(|k| k.kind == kind).map(f).sum()
        };
        let dropped_facts: Vec<&Fact> = facts.iter().filter(|f| dropped.contains(&f.event_id)).collect();
        let allocations: Vec<&&Fact> =
            dropped_facts.iter().filter(|f| matches!(f.body, FactBody::AllocationVanished(_))).collect();
        let lost_allocations = allocations.iter().filter(|f| gone(f)).count() as u64;
        assert!(lost_allocations > 0 && lost_allocations < allocations.len() as u64);
        assert_eq!(sum("allocation_vanished", |k| k.lost), lost_allocations);
        assert_eq!(sum("allocation_vanished", |k| k.recovered), allocations.len() as u64 - lost_allocations);
        assert_eq!(sum("telemetry", |k| k.recovered), 0, "telemetry never comes back");
        assert_eq!(sum("telemetry", |k| k.lost), (dropped_facts.len() - allocations.len()) as u64);
        // Each account covers its gap's kinds and counts.
        for (id, g) in &gaps {
            let r = accounts.iter().find(|r| r.gap == *id).unwrap();
            for k in &g.kinds {
                let a = r.kinds.iter().find(|a| a.kind == k.kind).unwrap();
                assert_eq!(a.recovered + a.lost, k.count, "{id} {}", k.kind);
            }
            assert_eq!((r.forgotten, r.unaccounted), (0, 0));
        }
        // Accounted for once: the memory is gone.
        assert!(s.remembered_gaps().is_empty());
        assert!(s.recovery_facts(&remembered, &produced, now).is_empty());
    }

    /// Past the memory cap, IDs are forgotten and their facts counted lost (said in `forgotten`): such a gap is never
    /// claimed recovered, even when the re-list produced every fact.
    #[test]
    fn past_the_memory_cap_a_gap_is_never_claimed_recovered() {
        let dir = TempDir::new("recovery-cap");
        let mut s = Spool::open(&dir.0, SpoolConfig { max_bytes: 16 * 1024, segment_bytes: 2048 }).unwrap();
        s.set_remember_cap(5);
        let facts = mixed_facts(400);
        let (dropped, gaps) = overflow(&mut s, &facts);
        let produced: HashSet<String> = facts.iter().map(|f| f.event_id.clone()).collect();
        let allocations = facts
            .iter()
            .filter(|f| dropped.contains(&f.event_id) && matches!(f.body, FactBody::AllocationVanished(_)))
            .count() as u64;
        assert!(allocations > 5);
        let accounts: Vec<GapRecovery> =
            recoveries(&s.recovery_facts(&s.remembered_gaps(), &produced, datetime!(2026-12-02 08:00 UTC)))
                .into_iter()
                .filter(|r| gaps.iter().any(|(id, _)| *id == r.gap))
                .collect();
        assert_eq!(accounts.len(), gaps.len());
        let recovered: u64 = accounts.iter().flat_map(|r| r.kinds.iter()).map(|k| k.recovered).sum();
        let lost: u64 =
            accounts.iter().flat_map(|r| r.kinds.iter()).filter(|k| k.kind != "telemetry").map(|k| k.lost).sum();
        let forgotten: u64 = accounts.iter().map(|r| r.forgotten).sum();
        assert_eq!(recovered, 5, "only the IDs kept can be checked");
        assert_eq!((lost, forgotten), (allocations - 5, allocations - 5));
        assert!(accounts.iter().any(|r| r.forgotten > 0));
    }

    const GAPS_CFG: SpoolConfig = SpoolConfig { max_bytes: 16 * 1024, segment_bytes: 2048 };
    const RE_LIST_AT: OffsetDateTime = datetime!(2026-12-02 08:00 UTC);

    /// The event IDs of the allocation facts among `facts`: what a re-list that finds every object again produces.
    fn allocation_ids(facts: &[Fact]) -> HashSet<String> {
        facts.iter().filter(|f| matches!(f.body, FactBody::AllocationVanished(_))).map(|f| f.event_id.clone()).collect()
    }

    /// Allocation facts the accounts of `heads` (gaps not taken over) say came back.
    fn recovered_allocations(facts: &[Fact], heads: &[String]) -> u64 {
        recoveries(facts)
            .iter()
            .filter(|r| heads.contains(&r.gap))
            .flat_map(|r| r.kinds.iter())
            .filter(|k| k.kind == "allocation_vanished")
            .map(|k| k.recovered)
            .sum()
    }

    /// The memory of a drop survives a restart, also once the gap facts were delivered and left the spool: the
    /// re-list after the restart accounts for each gap exactly as the process that dropped would have.
    #[test]
    fn remembered_gaps_survive_a_restart_after_their_gap_facts_were_delivered() {
        let facts = mixed_facts(400);
        let produced = allocation_ids(&facts);
        // The same drops in a spool never restarted: what the accounts must say.
        let twin = TempDir::new("gaps-twin");
        let mut t = Spool::open(&twin.0, GAPS_CFG).unwrap();
        overflow(&mut t, &facts);
        let want = t.recovery_facts(&t.remembered_gaps(), &produced, RE_LIST_AT);

        let dir = TempDir::new("gaps-restart");
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        let (dropped, _) = overflow(&mut s, &facts);
        let remembered = s.remembered_gaps();
        assert!(!remembered.is_empty());
        // Delivered and acknowledged: the gap facts leave the spool.
        s.ack(u64::MAX).unwrap();
        assert_eq!(s.pending_count(), 0);
        drop(s);

        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        assert_eq!(s.remembered_gaps(), remembered);
        let got = s.recovery_facts(&remembered, &produced, RE_LIST_AT);
        assert_eq!(got, want);
        let dropped_allocations = dropped.intersection(&produced).count() as u64;
        assert!(dropped_allocations > 0);
        assert_eq!(recovered_allocations(&got, &remembered), dropped_allocations, "every dropped allocation came back");
    }

    /// A gap a re-list accounted for is forgotten across a restart once its accounts are spooled, and only that gap;
    /// a restart before they are spooled still remembers it (the accounts are given again, same event IDs).
    #[test]
    fn an_accounted_gap_is_forgotten_across_a_restart_once_its_accounts_are_spooled() {
        let dir = TempDir::new("gaps-accounted");
        let file = dir.0.join("gaps");
        let facts = mixed_facts(800);
        let produced = allocation_ids(&facts);
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        overflow(&mut s, &facts[..400]);
        let first = s.remembered_gaps();
        assert!(!first.is_empty() && file.exists());
        // Delivered, then more drops: gaps of their own (nothing left to take over).
        s.ack(u64::MAX).unwrap();
        overflow(&mut s, &facts[400..]);
        let all = s.remembered_gaps();
        let second: Vec<String> = all.iter().filter(|g| !first.contains(g)).cloned().collect();
        assert!(!second.is_empty() && first.iter().all(|g| all.contains(g)), "{first:?} {all:?}");

        // Accounted for, but the process ends before the accounts are spooled.
        let accounts = s.recovery_facts(&first, &produced, RE_LIST_AT);
        assert!(!accounts.is_empty());
        assert_eq!(s.remembered_gaps(), second);
        drop(s);
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        assert_eq!(s.remembered_gaps(), all, "not yet forgotten on disk");
        let again = s.recovery_facts(&first, &produced, RE_LIST_AT);
        assert_eq!(again, accounts);
        // Spooled this time (the backlog delivered first, so spooling them drops nothing).
        s.ack(u64::MAX).unwrap();
        s.append_facts(&again).unwrap();
        drop(s);
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        assert_eq!(s.remembered_gaps(), second, "only the gaps accounted for are forgotten");
        assert!(s.recovery_facts(&first, &produced, RE_LIST_AT).is_empty());
        let rest = s.recovery_facts(&second, &produced, RE_LIST_AT);
        assert!(!rest.is_empty());
        s.ack(u64::MAX).unwrap();
        s.append_facts(&rest).unwrap();
        assert!(!file.exists(), "nothing left to remember");
        drop(s);
        let s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        assert!(s.remembered_gaps().is_empty());
    }

    /// A `gaps` file that does not read back never stops the spool: it is set aside as `gaps.bad` (as it was), its
    /// gaps are forgotten (never claimed recovered), and the memory works again from the next drop.
    #[test]
    fn a_damaged_gaps_file_is_set_aside_and_its_gaps_forgotten() {
        use super::gaps::frame;
        fn hostile(gaps: serde_json::Value) -> Vec<u8> {
            frame(&serde_json::to_vec(&serde_json::json!({ "gaps": gaps })).unwrap())
        }
        fn lost(ids: Vec<String>, folded: Vec<String>) -> serde_json::Value {
            let n = ids.len();
            serde_json::json!({"ids": {"allocation_vanished": ids}, "kinds": {"allocation_vanished": n},
                "forgotten": 0, "unaccounted": 0, "folded": folded, "taken_over": false})
        }
        fn replace(d: &mut Vec<u8>, from: &str, to: &str) {
            let s = String::from_utf8(d.clone()).unwrap();
            assert!(s.contains(from), "{from} not in {s:.200}");
            *d = s.replacen(from, to, 1).into_bytes();
        }
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let damages: Vec<(&str, Damage)> = vec![
            ("truncated", Box::new(|d| d.truncate(d.len() - 7))),
            ("truncated in the header", Box::new(|d| d.truncate(12))),
            ("empty", Box::new(|d| d.clear())),
            ("a bit flipped", Box::new(|d| *d.last_mut().unwrap() ^= 0x01)),
            ("a count changed", Box::new(|d| replace(d, "\"forgotten\":0", "\"forgotten\":1"))),
            ("an ID changed", Box::new(|d| replace(d, "\"k/", "\"K/"))),
            ("garbage", Box::new(|d| *d = b"\x00\xff\xfe garbage\n{{{".to_vec())),
            ("another version", Box::new(|d| replace(d, "gpuledger-spool-gaps 1 ", "gpuledger-spool-gaps 2 "))),
            ("another magic", Box::new(|d| replace(d, "gpuledger-spool-gaps", "gpuledger-spool-gapz"))),
            ("checksummed but not the JSON", Box::new(|d| *d = frame(b"{\"gaps\": [1, 2"))),
            ("an unknown field", Box::new(|d| *d = frame(br#"{"gaps":{},"extra":1}"#))),
            ("a field missing", Box::new(|d| *d = hostile(serde_json::json!({"gap/1/2": {"ids": {}}})))),
            ("a negative count", Box::new(|d| replace(d, "\"unaccounted\":0", "\"unaccounted\":-1"))),
            (
                "more IDs than the cap",
                Box::new(|d| {
                    // Written out by hand: half a million JSON values take long to build in a debug build.
                    let ids: Vec<String> = (0..=MAX_REMEMBERED_IDS).map(|i| format!("\"v/{i}\"")).collect();
                    let body = format!(
                        r#"{{"gaps":{{"gap/1/2":{{"ids":{{"allocation_vanished":[{}]}},"kinds":{{}},"forgotten":0,"unaccounted":0,"folded":[],"taken_over":false}}}}}}"#,
                        ids.join(",")
                    );
                    *d = frame(body.as_bytes());
                }),
            ),
            (
                "more gaps than the cap",
                Box::new(|d| {
                    let gaps: serde_json::Map<String, serde_json::Value> =
                        (0..=MAX_REMEMBERED_GAPS).map(|i| (format!("gap/{i}/{i}"), lost(vec![], vec![]))).collect();
                    *d = hostile(serde_json::Value::Object(gaps));
                }),
            ),
            (
                "an event ID too long",
                Box::new(|d| *d = hostile(serde_json::json!({ "gap/1/2": lost(vec!["x".repeat(10_000)], vec![]) }))),
            ),
        ];
        let facts = mixed_facts(800);
        let produced: HashSet<String> = facts.iter().map(|f| f.event_id.clone()).collect();
        // One overflowed spool, copied for each damage (overflowing takes hundreds of fsyncs).
        let template = TempDir::new("gaps-bad-template");
        let mut s = Spool::open(&template.0, GAPS_CFG).unwrap();
        overflow(&mut s, &facts[..400]);
        let remembered = s.remembered_gaps();
        assert!(!remembered.is_empty());
        drop(s);
        for (name, damage) in damages {
            let dir = TempDir::new("gaps-bad");
            fs::create_dir_all(&dir.0).unwrap();
            for entry in fs::read_dir(&template.0).unwrap() {
                let path = entry.unwrap().path();
                fs::copy(&path, dir.0.join(path.file_name().unwrap())).unwrap();
            }
            let file = dir.0.join("gaps");
            let mut data = fs::read(&file).unwrap();
            damage(&mut data);
            fs::write(&file, &data).unwrap();

            let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
            assert!(s.remembered_gaps().is_empty(), "{name}");
            assert!(s.recovery_facts(&remembered, &produced, RE_LIST_AT).is_empty(), "{name}: never claimed recovered");
            assert!(!file.exists(), "{name}");
            assert!(fs::read(dir.0.join("gaps.bad")).unwrap() == data, "{name}: set aside as it was");
            // The memory works again: later drops are remembered, across a restart too.
            s.ack(u64::MAX).unwrap();
            overflow(&mut s, &facts[400..]);
            let later = s.remembered_gaps();
            assert!(!later.is_empty(), "{name}");
            drop(s);
            assert_eq!(Spool::open(&dir.0, GAPS_CFG).unwrap().remembered_gaps(), later, "{name}");
        }
    }

    /// The memory cap holds across a restart: the IDs read back count against it (later drops add none past it), a
    /// lower cap trims them, and the file holds what the memory does.
    #[test]
    fn the_memory_cap_holds_across_a_restart() {
        let dir = TempDir::new("gaps-cap");
        let facts = mixed_facts(800);
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        s.set_remember_cap(5);
        overflow(&mut s, &facts[..400]);
        assert_eq!(s.gaps.remembered_ids(), 5);
        drop(s);

        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        s.set_remember_cap(5);
        assert_eq!(s.gaps.remembered_ids(), 5);
        let dropped_before = s.dropped_total();
        overflow(&mut s, &facts[400..]);
        assert!(s.dropped_total() > dropped_before, "more drops after the restart");
        assert_eq!(s.gaps.remembered_ids(), 5, "the IDs read back count against the cap");
        drop(s);

        // Read back under the default cap: still 5, and a re-list producing every fact gets exactly those back.
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        assert_eq!(s.gaps.remembered_ids(), 5);
        let heads = s.remembered_gaps();
        let accounts = s.recovery_facts(&heads, &allocation_ids(&facts), RE_LIST_AT);
        assert_eq!(recovered_allocations(&accounts, &heads), 5, "only the IDs kept can be checked");
        let forgotten: u64 = recoveries(&accounts).iter().filter(|r| heads.contains(&r.gap)).map(|r| r.forgotten).sum();
        assert!(forgotten > 0);
        drop(s);

        // A lower cap trims what was read back, on disk too.
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        assert_eq!(s.gaps.remembered_ids(), 5, "the accounts were never spooled");
        s.set_remember_cap(2);
        assert_eq!(s.gaps.remembered_ids(), 2);
        s.append_fact(&fact(10_000)).unwrap();
        drop(s);
        let s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        assert_eq!(s.gaps.remembered_ids(), 2);
    }

    /// An event ID longer than the wire format makes them is forgotten (counted lost) rather than written: a reader
    /// would refuse the whole file for it.
    #[test]
    fn an_id_the_file_could_not_hold_is_forgotten_not_written() {
        let dir = TempDir::new("gaps-long-id");
        let mut facts = mixed_facts(400);
        for f in facts.iter_mut().filter(|f| matches!(f.body, FactBody::AllocationVanished(_))).take(3) {
            f.event_id = "x".repeat(EVENT_ID_MAX + 1);
        }
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        let (dropped, _) = overflow(&mut s, &facts);
        assert!(dropped.contains(&"x".repeat(EVENT_ID_MAX + 1)), "the long IDs are among the dropped");
        let ids = s.gaps.remembered_ids();
        assert!(ids > 0);
        drop(s);
        let s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        assert!(!dir.0.join("gaps.bad").exists());
        assert_eq!(s.gaps.remembered_ids(), ids);
        let heads = s.remembered_gaps();
        let mut s = s;
        let accounts = s.recovery_facts(&heads, &allocation_ids(&facts), RE_LIST_AT);
        let forgotten: u64 = recoveries(&accounts).iter().filter(|r| heads.contains(&r.gap)).map(|r| r.forgotten).sum();
        assert_eq!(forgotten, 3);
    }

    /// Node agents send no account: with a cap of 0 nothing is remembered and no file is kept.
    #[test]
    fn with_a_cap_of_zero_nothing_is_remembered_or_written() {
        let dir = TempDir::new("gaps-none");
        let file = dir.0.join("gaps");
        let facts = mixed_facts(800);
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        overflow(&mut s, &facts[..400]);
        assert!(file.exists());
        drop(s);
        // A file from before: forgotten, and removed at the next append.
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        s.set_remember_cap(0);
        assert!(s.remembered_gaps().is_empty());
        overflow(&mut s, &facts[400..]);
        assert!(s.remembered_gaps().is_empty());
        assert!(!file.exists());
        drop(s);
        assert!(Spool::open(&dir.0, GAPS_CFG).unwrap().remembered_gaps().is_empty());
    }

    /// Past the cap on gaps, a new gap is not remembered (it stays unrecovered) and the gaps it took over keep their
    /// own memory, each accounted for alone.
    #[test]
    fn past_the_gap_cap_a_new_gap_stays_unrecovered() {
        let dir = TempDir::new("gaps-max");
        let facts = mixed_facts(800);
        let mut s = Spool::open(&dir.0, GAPS_CFG).unwrap();
        overflow(&mut s, &facts[..400]);
        let first = s.remembered_gaps();
        // Full: every gap held (those taken over included).
        s.gaps.set_max_gaps(s.gaps.len());
        overflow(&mut s, &facts[400..]);
        assert_eq!(s.remembered_gaps(), first, "the new gap is not remembered; the old ones are not taken over");
    }

    /// At the cap, telemetry goes before allocation facts (money before analytics), oldest first; the gap counts
    /// it by kind; tombstones are never handed out as facts.
    #[test]
    fn at_the_cap_telemetry_goes_first_and_allocations_survive() {
        use gpuledger_core::wire::{Stat, TelemetryRollup};
        let dir = TempDir::new("telemetry-first");
        let cfg = SpoolConfig { max_bytes: 24 * 1024, segment_bytes: 2048 };
        let t0 = datetime!(2026-11-01 00:00 UTC);
        let telemetry = |i: u64| Fact {
            event_id: event_id("telemetry", &[&i.to_string()]),
            observed_at: t0 + time::Duration::minutes(i as i64),
            body: FactBody::Telemetry(TelemetryRollup {
                node: "n1".into(),
                gpu_uuid: "GPU-1".into(),
                gpu_instance_id: None,
                mig_profile: None,
                window_start: t0 + time::Duration::minutes(i as i64),
                window_end: t0 + time::Duration::minutes(i as i64 + 1),
                samples: 6,
                utilization_pct: Some(Stat { min: 1.0, avg: 2.0, max: 3.0 }),
                memory_used_mib: Some(Stat { min: 100.0, avg: 200.0, max: 300.0 }),
                power_w: None,
                energy_j: None,
                pod: None,
            }),
        };
        let mut s = Spool::open(&dir.0, cfg).unwrap();
        // Interleaved: one allocation fact per four telemetry rollups, far past the cap.
        let mut allocations = Vec::new();
        for i in 0..400u64 {
            if i % 5 == 0 {
                let f = fact(i);
                allocations.push(f.clone());
                s.append_fact(&f).unwrap();
            } else {
                s.append_fact(&telemetry(i)).unwrap();
            }
            assert!(s.disk_bytes() <= cfg.max_bytes, "{} bytes", s.disk_bytes());
        }
        assert!(s.dropped_total() > 0);
        let pending: Vec<Fact> = s.pending_facts(usize::MAX, u64::MAX).unwrap().into_iter().map(|(_, f)| f).collect();
        let kept: Vec<Fact> = pending.iter().filter(|f| f.body.kind() == "allocation_vanished").cloned().collect();
        assert_eq!(kept, allocations, "every allocation fact survives, in order");
        let gaps: Vec<GapFact> = pending
            .iter()
            .filter_map(|f| match &f.body {
                FactBody::Gap(g) => Some(g.clone()),
                _ => None,
            })
            .collect();
        let lost_telemetry = 320 - pending.iter().filter(|f| f.body.kind() == "telemetry").count() as u64;
        assert!(lost_telemetry > 0);
        assert_eq!(gaps.iter().map(|g| g.dropped).sum::<u64>(), lost_telemetry, "{gaps:?}");
        assert!(gaps.iter().flat_map(|g| g.kinds.iter()).all(|k| k.kind == "telemetry"), "{gaps:?}");
        // The oldest telemetry went first: what is left is the newest.
        let first_left = pending.iter().find(|f| f.body.kind() == "telemetry").map(|f| f.observed_at).unwrap();
        assert!(first_left > t0 + time::Duration::minutes(200), "{first_left}");
        // Reopened, the compacted segments read back the same.
        drop(s);
        let s = Spool::open(&dir.0, cfg).unwrap();
        assert_eq!(s.recovery(), &Recovery::default());
        let again: Vec<Fact> = s.pending_facts(usize::MAX, u64::MAX).unwrap().into_iter().map(|(_, f)| f).collect();
        assert_eq!(again, pending);
    }

    const CHILD_ENV: &str = "SPOOL_CHILD_DIR";
    const CHILD_CFG: SpoolConfig = SpoolConfig { max_bytes: 1 << 30, segment_bytes: 8192 };

    fn child_payload(i: u64) -> Vec<u8> {
        format!("record-{i}-{}", "x".repeat((i % 300) as usize)).into_bytes()
    }

    /// Writer for `survives_kill_9_mid_write`; does nothing unless that test runs it.
    #[test]
    fn child_writer() {
        let Some(dir) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let mut s = Spool::open(dir, CHILD_CFG).unwrap();
        let mut out = io::stdout().lock();
        for i in 0..1_000_000 {
            let seq = s.append(&child_payload(i)).unwrap();
            writeln!(out, "durable {seq} {i}").unwrap();
            out.flush().unwrap();
        }
    }

    #[test]
    fn survives_kill_9_mid_write() {
        let dir = TempDir::new("kill");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "spool::tests::child_writer", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir.0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kept open until the kill, so the child is killed while writing, not by a closed pipe.
        let mut lines = io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut durable = Vec::new();
        while durable.len() < 300
            && let Some(line) = lines.next()
        {
            if let Some((_, rest)) = line.unwrap().split_once("durable ") {
                let (seq, i) = rest.split_once(' ').unwrap();
                durable.push((seq.parse::<u64>().unwrap(), i.parse::<u64>().unwrap()));
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        drop(lines);
        assert_eq!(durable.len(), 300, "the child stopped early");

        let mut s = Spool::open(&dir.0, CHILD_CFG).unwrap();
        let got: HashMap<u64, Vec<u8>> = all(&s).into_iter().collect();
        for (seq, i) in &durable {
            assert_eq!(got.get(seq), Some(&child_payload(*i)), "seq {seq}");
        }
        let seq = s.append(b"after").unwrap();
        assert!(seq > durable.last().unwrap().0);
        drop(s);
        let s = Spool::open(&dir.0, CHILD_CFG).unwrap();
        assert_eq!(all(&s).last().unwrap(), &(seq, b"after".to_vec()));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append(Vec<Vec<u8>>),
        Ack(u64),
        Reopen,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..4).prop_map(Op::Append),
            2 => (0u64..8).prop_map(Op::Ack),
            1 => Just(Op::Reopen),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Never loses an unacknowledged record, never returns an acknowledged one.
        #[test]
        fn append_ack_reopen_keeps_exactly_the_unacknowledged(ops in prop::collection::vec(op(), 1..30)) {
            let dir = TempDir::new("prop");
            let cfg = SpoolConfig { max_bytes: 1 << 20, segment_bytes: 128 };
            let mut s = Spool::open(&dir.0, cfg).unwrap();
            let (mut model, mut acked, mut issued) = (Vec::new(), 0, 0);
            for op in ops {
                match op {
                    Op::Append(ps) => {
                        let seqs = match &ps[..] {
                            [one] => vec![s.append(one).unwrap()],
                            _ => s.append_batch(&ps).unwrap(),
                        };
                        for (q, p) in seqs.into_iter().zip(ps) {
                            prop_assert!(q > issued);
                            issued = q;
                            model.push((q, p));
                        }
                    }
                    Op::Ack(k) => {
                        s.ack(acked + k).unwrap();
                        acked = (acked + k).min(issued).max(acked);
                    }
                    Op::Reopen => {
                        drop(s);
                        s = Spool::open(&dir.0, cfg).unwrap();
                        prop_assert_eq!(s.recovery(), &Recovery::default());
                    }
                }
                let want: Vec<_> = model.iter().filter(|(q, _)| *q > acked).cloned().collect();
                prop_assert_eq!(s.pending_count(), want.len() as u64);
                prop_assert_eq!(all(&s), want);
            }
        }
    }
}
