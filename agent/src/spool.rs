//! The on-disk spool: every fact is written here, durably, before the agent counts it as safe, and leaves
//! only after the server confirms a durable commit ([`Spool::ack`]).
//!
//! The spool directory holds:
//! - `NNNNNNNNNNNNNNNNNNNN.seg`: append-only segments named after their first sequence number, each a run of
//!   records `[len: u32 LE][crc32 of payload: u32 LE][seq: u64 LE][payload]` with consecutive sequence
//!   numbers;
//! - `ack`: the highest acknowledged sequence number, replaced atomically;
//! - `lock`: locked while a [`Spool`] is open, so two processes never write one spool.
//!
//! [`Spool::open`] validates every record: a torn or corrupt tail is cut off, and records lost inside an
//! older segment are counted ([`Recovery`]). When the size cap is hit, the oldest segments go and a `gap`
//! fact takes their place, so the ledger shows the hole instead of a silent zero.
//!
//! The spool also remembers, in memory only, the event IDs of the non-telemetry facts each gap dropped
//! ([`Spool::remembered_gaps`]): after a re-list, [`Spool::recovery_facts`] compares them with the IDs the re-list
//! produced and says per gap what came back (a `gap_recovered` fact). The memory is capped
//! ([`MAX_REMEMBERED_IDS`]); an ID past the cap is forgotten and its fact counted lost, so such a gap is never
//! claimed recovered. An agent restart forgets everything: its gaps stay unrecovered.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use gpuledger_core::wire::{Fact, FactBody, GapFact, GapKind, GapKindRecovery, GapRecovery, TELEMETRY_KINDS, event_id};
use time::OffsetDateTime;

/// Bytes before each payload: length, CRC and sequence number.
const HEADER: usize = 16;
/// Room kept for the gap fact written after a drop (its JSON, with a line per kind of fact dropped — at most the
/// 14 kinds of the wire format, about 110 bytes each — stays under 2 KiB).
const GAP_RESERVE: u64 = 2048;

/// Most event IDs of dropped facts the spool remembers, all gaps together (about 100 bytes each: some 50 MB).
pub const MAX_REMEMBERED_IDS: usize = 500_000;

/// What one gap dropped, kept in memory for the re-list's comparison.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Lost {
    /// Kind and event ID of each non-telemetry fact this gap dropped itself (a fact dropped twice is here twice, as
    /// it is counted); those of the gaps it took over stay with them.
    ids: Vec<(&'static str, String)>,
    /// Per kind: how many facts the gap dropped (telemetry included), as its gap fact says (taken-over gaps' too).
    kinds: BTreeMap<String, u64>,
    /// Dropped non-telemetry facts of its own whose IDs are not in `ids` (the memory cap).
    forgotten: u64,
    /// Dropped records of its own that did not read back as facts (no kind, no ID).
    unaccounted: u64,
    /// Earlier gap facts this one took over (folded): one of them may have reached the server before it was folded
    /// (delivered, not yet acknowledged), so each is accounted for too, with this one.
    folded: Vec<String>,
    /// Taken over by a later gap fact: accounted for with it.
    taken_over: bool,
}

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
    /// Per gap fact (event ID) not yet accounted for by a re-list: what it dropped. Memory only.
    lost: BTreeMap<String, Lost>,
    /// IDs held in `lost`, all gaps together.
    remembered: usize,
    /// Cap on `remembered` ([`MAX_REMEMBERED_IDS`]).
    remember_cap: usize,
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
            lost: BTreeMap::new(),
            remembered: 0,
            remember_cap: MAX_REMEMBERED_IDS,
            _lock: lock,
        })
    }

    /// Names the node in the gap facts this spool writes (node agents).
    pub fn set_node(&mut self, node: Option<String>) {
        self.node = node;
    }

    /// Caps how many dropped facts' event IDs the spool remembers (default [`MAX_REMEMBERED_IDS`]).
    pub fn set_remember_cap(&mut self, cap: usize) {
        self.remember_cap = cap;
    }

    /// The gaps (event IDs of their gap facts) whose dropped facts this process remembers and no re-list has
    /// accounted for yet.
    pub fn remembered_gaps(&self) -> Vec<String> {
        self.lost.iter().filter(|(_, l)| !l.taken_over).map(|(id, _)| id.clone()).collect()
    }

    /// `gap` and every remembered gap fact it took over, directly or not.
    fn family(&self, gap: &str) -> Vec<String> {
        let mut family = vec![gap.to_string()];
        let mut i = 0;
        while let Some(id) = family.get(i) {
            let next: Vec<String> = self.lost.get(id).map(|l| l.folded.clone()).unwrap_or_default();
            for f in next {
                if self.lost.contains_key(&f) && !family.contains(&f) {
                    family.push(f);
                }
            }
            i += 1;
        }
        family
    }

    /// One `gap_recovered` fact for each of `gaps` still remembered: per kind it dropped, how many facts a re-list
    /// derived again (their event IDs are among `produced`) and how many stay lost (telemetry windows always do).
    /// The gaps are forgotten: each is accounted for once.
    pub fn recovery_facts(&mut self, gaps: &[String], produced: &HashSet<String>, now: OffsetDateTime) -> Vec<Fact> {
        let mut out = Vec::new();
        for gap in gaps {
            if !self.lost.contains_key(gap) {
                continue;
            }
            // Each gap fact of the family, with what it dropped itself and what the gaps it took over dropped.
            let family = self.family(gap);
            for member in &family {
                let Some(lost) = self.lost.get(member) else { continue };
                let (mut recovered, mut forgotten, mut unaccounted): (BTreeMap<&str, u64>, u64, u64) =
                    (BTreeMap::new(), 0, 0);
                for part in self.family(member) {
                    let Some(p) = self.lost.get(&part) else { continue };
                    for (kind, id) in &p.ids {
                        if produced.contains(id) {
                            *recovered.entry(*kind).or_default() += 1;
                        }
                    }
                    forgotten += p.forgotten;
                    unaccounted += p.unaccounted;
                }
                let kinds = lost
                    .kinds
                    .iter()
                    .map(|(kind, &count)| {
                        let back = recovered.get(kind.as_str()).copied().unwrap_or(0).min(count);
                        GapKindRecovery { kind: kind.clone(), recovered: back, lost: count - back }
                    })
                    .collect();
                out.push(Fact {
                    event_id: event_id("gap-recovered", &[member]),
                    observed_at: now,
                    body: FactBody::GapRecovered(GapRecovery { gap: member.clone(), kinds, forgotten, unaccounted }),
                });
            }
            for member in family {
                if let Some(l) = self.lost.remove(&member) {
                    self.remembered -= l.ids.len();
                }
            }
        }
        out
    }

    /// Files what a gap dropped under its gap fact's ID; the earlier gap facts it folded are marked taken over.
    fn remember(&mut self, gap_id: &str, tally: GapTally) {
        let mut lost = Lost {
            kinds: tally.kinds.iter().map(|(k, v)| (k.clone(), v.0)).collect(),
            unaccounted: tally.unaccounted,
            ids: tally.ids,
            ..Lost::default()
        };
        // A folded gap from before this process started has no memory: its facts are in the kinds' counts and
        // among no IDs, so they count as lost.
        for old in &tally.folded {
            if let Some(o) = self.lost.get_mut(old) {
                o.taken_over = true;
            }
        }
        lost.folded = tally.folded;
        let room = self.remember_cap.saturating_sub(self.remembered);
        if lost.ids.len() > room {
            lost.forgotten += (lost.ids.len() - room) as u64;
            lost.ids.truncate(room);
        }
        self.remembered += lost.ids.len();
        self.lost.insert(gap_id.to_string(), lost);
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
        let mut gap = GapTally { node: self.node.clone(), ..GapTally::default() };
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
            self.remember(&fact.event_id, gap);
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

/// What the size cap dropped, for the gap fact.
#[derive(Default)]
struct GapTally {
    seqs: Option<(u64, u64)>,
    dropped: u64,
    times: Option<(OffsetDateTime, OffsetDateTime)>,
    /// Per kind: (count, earliest own time, latest own time).
    kinds: BTreeMap<String, (u64, OffsetDateTime, OffsetDateTime)>,
    node: Option<String>,
    /// Kind and event ID of each dropped non-telemetry fact (for the re-list's comparison).
    ids: Vec<(&'static str, String)>,
    /// Earlier gap facts folded into this one (their remembered IDs move to it).
    folded: Vec<String>,
    /// Dropped records that did not read back as facts.
    unaccounted: u64,
}

impl GapTally {
    fn add(&mut self, first: u64, last: u64, count: u64, records: &[(u64, Vec<u8>)]) {
        self.seqs = Some(self.seqs.map_or((first, last), |(f, _)| (f, last)));
        self.dropped += count;
        let mut read = 0;
        for (_, payload) in records {
            if payload.is_empty() {
                continue;
            }
            let Ok(fact) = serde_json::from_slice::<Fact>(payload) else {
                continue;
            };
            read += 1;
            let (from, to) = match &fact.body {
                // A dropped gap fact stands for the facts it counted: fold it into this one.
                FactBody::Gap(g) => {
                    self.folded.push(fact.event_id.clone());
                    self.dropped += g.dropped.saturating_sub(1);
                    for k in &g.kinds {
                        self.kind(&k.kind, k.count, k.from, k.to);
                    }
                    if self.node.is_none() {
                        self.node.clone_from(&g.node);
                    }
                    (g.from, g.to)
                }
                _ => {
                    let (own_from, own_to) = fact.own_times();
                    self.kind(fact.body.kind(), 1, own_from, own_to);
                    self.remember(&fact);
                    (fact.observed_at, fact.observed_at)
                }
            };
            self.times = Some(self.times.map_or((from, to), |(f, t)| (f.min(from), t.max(to))));
        }
        // Records counted but not read as facts (a segment that did not read back, a record that is no fact).
        self.unaccounted += count.saturating_sub(read);
    }

    /// Keeps a dropped non-telemetry fact's ID for the re-list's comparison (telemetry never comes back).
    fn remember(&mut self, fact: &Fact) {
        let kind = fact.body.kind();
        if !TELEMETRY_KINDS.contains(&kind) {
            self.ids.push((kind, fact.event_id.clone()));
        }
    }

    /// An earlier gap fact taken over (compacted): its counts, kinds and times are this gap's too.
    fn fold(&mut self, seq: u64, event_id: &str, g: &GapFact) {
        self.folded.push(event_id.to_string());
        self.seqs = Some(self.seqs.map_or((seq, seq), |(f, l)| (f.min(seq), l.max(seq))));
        self.dropped += g.dropped;
        for k in &g.kinds {
            self.kind(&k.kind, k.count, k.from, k.to);
        }
        if self.node.is_none() {
            self.node.clone_from(&g.node);
        }
        self.times = Some(self.times.map_or((g.from, g.to), |(f, t)| (f.min(g.from), t.max(g.to))));
    }

    /// One fact dropped on its own (a compacted record).
    fn add_fact(&mut self, seq: u64, fact: &Fact) {
        self.seqs = Some(self.seqs.map_or((seq, seq), |(f, l)| (f.min(seq), l.max(seq))));
        self.dropped += 1;
        let (own_from, own_to) = fact.own_times();
        self.kind(fact.body.kind(), 1, own_from, own_to);
        self.remember(fact);
        let at = fact.observed_at;
        self.times = Some(self.times.map_or((at, at), |(f, t)| (f.min(at), t.max(at))));
    }

    fn kind(&mut self, kind: &str, count: u64, from: OffsetDateTime, to: OffsetDateTime) {
        let e = self.kinds.entry(kind.to_string()).or_insert((0, from, to));
        e.0 += count;
        e.1 = e.1.min(from);
        e.2 = e.2.max(to);
    }

    fn fact(&self) -> Option<Fact> {
        let (first, last) = self.seqs?;
        let Some((from, to)) = self.times else {
            tracing::warn!(dropped = self.dropped, "spool: dropped records without a readable time; no gap fact");
            return None;
        };
        Some(Fact {
            event_id: event_id("gap", &[&first.to_string(), &last.to_string()]),
            observed_at: to,
            body: FactBody::Gap(GapFact {
                from,
                to,
                dropped: self.dropped,
                kinds: self
                    .kinds
                    .iter()
                    .map(|(kind, (count, from, to))| GapKind {
                        kind: kind.clone(),
                        count: *count,
                        from: *from,
                        to: *to,
                    })
                    .collect(),
                node: self.node.clone(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use gpuledger_core::wire::AllocationVanished;
    use gpuledger_core::wire::GapKindRecovery;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicU64, Ordering};
    use time::macros::datetime;

    /// A scratch directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
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
    /// pending gap facts.
    fn overflow(s: &mut Spool, facts: &[Fact]) -> (HashSet<String>, Vec<(String, GapFact)>) {
        for f in facts {
            s.append_fact(f).unwrap();
        }
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
