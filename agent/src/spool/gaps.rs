//! Gaps: what the size cap dropped ([`GapTally`], spooled as a `gap` fact) and what the spool remembers of each gap
//! until a re-list accounts for it ([`GapMemory`]).
//!
//! The memory lives in the spool directory's `gaps` file, so that an agent restart between a drop and its re-list
//! does not forget it (the gap fact itself may long be delivered and gone from the spool). The file is a header line
//! `gpuledger-spool-gaps <version> <crc32 of the body, 8 hex digits> <body length>` and a JSON body
//! `{"gaps": {<gap fact's event ID>: {"ids", "kinds", "forgotten", "unaccounted", "folded", "taken_over"}}}`
//! ([`Lost`]). It is rewritten whole — temporary file, fsync, rename, directory fsync — only when the memory
//! changed, at the end of the append that remembered a drop or that spooled a re-list's accounts; it is removed when
//! nothing is left to remember. Its size follows the caps: at most [`MAX_REMEMBERED_IDS`] IDs and
//! [`MAX_REMEMBERED_GAPS`] gaps.
//!
//! A file that does not read back (unreadable, truncated, checksum, version or shape wrong, past the caps) is
//! logged, renamed `gaps.bad` and its gaps forgotten: a forgotten gap is never claimed recovered, which is the
//! conservative outcome (its months need an acknowledgement).

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use gpuledger_core::wire::{
    EVENT_ID_MAX, Fact, FactBody, GapFact, GapKind, GapKindRecovery, GapRecovery, TELEMETRY_KINDS, event_id,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Most event IDs of dropped facts the spool remembers, all gaps together (about 100 bytes each: some 50 MB, in
/// memory and in the `gaps` file).
pub const MAX_REMEMBERED_IDS: usize = 500_000;

/// Most gaps the spool remembers (a gap past it stays unrecovered). Bounds the file with [`MAX_REMEMBERED_IDS`], and
/// the time an account takes: a re-list's accounts walk each gap's chain of gaps taken over.
pub const MAX_REMEMBERED_GAPS: usize = 4096;

/// The memory file, beside the segments.
const FILE: &str = "gaps";
/// Where the next version is written before it replaces the file.
const TMP: &str = "gaps.tmp";
/// Where a file that does not read back is set aside (for whoever investigates; never read again).
const BAD: &str = "gaps.bad";
/// First word of the header line.
const MAGIC: &str = "gpuledger-spool-gaps";
/// Format version; a file of another version is set aside (its gaps forgotten), never guessed at.
const VERSION: u32 = 1;
/// Longest kind name read back (the wire format's are under 20 bytes).
const KIND_MAX: usize = 64;
/// Largest file read back: the caps' worth of the longest IDs, and room per gap for its counts and the gaps it took
/// over. A larger file is not one this code wrote (but for IDs full of characters JSON escapes, which event IDs made
/// from Kubernetes names and UIDs do not hold; such a file would be set aside, its gaps forgotten).
const MAX_FILE_BYTES: u64 = (MAX_REMEMBERED_IDS * (EVENT_ID_MAX + 8) + MAX_REMEMBERED_GAPS * 8192) as u64;

/// What one gap dropped, for the re-list's comparison.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Lost {
    /// Per kind: the event ID of each non-telemetry fact this gap dropped itself (a fact dropped twice is here
    /// twice, as it is counted); those of the gaps it took over stay with them.
    ids: BTreeMap<String, Vec<String>>,
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

impl Lost {
    fn id_count(&self) -> usize {
        self.ids.values().map(Vec::len).sum()
    }
}

/// The file's body, as written.
#[derive(Serialize)]
struct BodyRef<'a> {
    gaps: &'a BTreeMap<String, Lost>,
}

/// The file's body, as read back.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    gaps: BTreeMap<String, Lost>,
}

/// Per gap fact (event ID) not yet accounted for by a re-list: what it dropped; kept in the spool directory.
#[derive(Debug)]
pub(super) struct GapMemory {
    dir: PathBuf,
    lost: BTreeMap<String, Lost>,
    /// IDs held in `lost`, all gaps together.
    remembered: usize,
    /// Cap on `remembered` ([`MAX_REMEMBERED_IDS`]; 0: nothing is remembered).
    cap: usize,
    /// Cap on the gaps in `lost` ([`MAX_REMEMBERED_GAPS`]).
    max_gaps: usize,
    /// `lost` differs from the file: written at the end of the next append.
    dirty: bool,
    /// The last write failed (warned once, retried at each later append).
    failing: bool,
}

impl GapMemory {
    /// Reads the memory kept in `dir` (the spool's lock held). A file that does not read back is set aside and
    /// nothing is remembered; opening never fails because of it, the memory being an improvement, not a need.
    pub(super) fn open(dir: &Path) -> Self {
        // A write cut short by a crash: the file it was to replace is still whole.
        let _ = fs::remove_file(dir.join(TMP));
        let path = dir.join(FILE);
        let (lost, dirty) = match read(&path) {
            Ok(lost) => (lost, false),
            Err(reason) => (BTreeMap::new(), !set_aside(dir, &reason)),
        };
        let remembered = lost.values().map(Lost::id_count).sum();
        if !lost.is_empty() {
            tracing::info!(gaps = lost.len(), ids = remembered, "spool: remembered gaps read back");
        }
        Self {
            dir: dir.to_path_buf(),
            lost,
            remembered,
            cap: MAX_REMEMBERED_IDS,
            max_gaps: MAX_REMEMBERED_GAPS,
            dirty,
            failing: false,
        }
    }

    /// Caps the IDs remembered (at most [`MAX_REMEMBERED_IDS`]); IDs read back past a lower cap are forgotten
    /// (counted lost). 0 remembers nothing.
    pub(super) fn set_cap(&mut self, cap: usize) {
        // Never above the default: a reader refuses a file past it.
        let cap = cap.min(MAX_REMEMBERED_IDS);
        self.cap = cap;
        if cap == 0 {
            self.dirty |= !self.lost.is_empty();
            self.lost.clear();
            self.remembered = 0;
            return;
        }
        let mut excess = self.remembered.saturating_sub(cap);
        if excess == 0 {
            return;
        }
        // The newest gaps' IDs go first, as at a drop past the cap.
        for l in self.lost.values_mut().rev() {
            for ids in l.ids.values_mut() {
                let n = excess.min(ids.len());
                ids.truncate(ids.len() - n);
                l.forgotten = l.forgotten.saturating_add(n as u64);
                excess -= n;
            }
            l.ids.retain(|_, ids| !ids.is_empty());
            if excess == 0 {
                break;
            }
        }
        self.remembered = cap;
        self.dirty = true;
    }

    #[cfg(test)]
    pub(super) fn set_max_gaps(&mut self, max: usize) {
        self.max_gaps = max;
    }

    /// Gaps held, those taken over included.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lost.len()
    }

    /// IDs remembered, all gaps together.
    #[cfg(test)]
    pub(super) fn remembered_ids(&self) -> usize {
        self.remembered
    }

    /// The gaps not accounted for yet, but for those taken over (accounted for with the gap that took them over).
    pub(super) fn gaps(&self) -> Vec<String> {
        self.lost.iter().filter(|(_, l)| !l.taken_over).map(|(id, _)| id.clone()).collect()
    }

    /// Files what a gap dropped under its gap fact's ID; the earlier gap facts it folded are marked taken over.
    pub(super) fn remember(&mut self, gap_id: &str, tally: GapTally) {
        // Nothing to remember for (node agents send no account).
        if self.cap == 0 {
            return;
        }
        if self.lost.len() >= self.max_gaps && !self.lost.contains_key(gap_id) {
            // The gaps it folded keep their own memory (not marked taken over) and are accounted for alone.
            tracing::warn!(
                gap = gap_id,
                max = self.max_gaps,
                "spool: too many gaps remembered; this one stays unrecovered"
            );
            return;
        }
        let mut lost = Lost {
            kinds: tally.kinds.iter().map(|(k, v)| (k.clone(), v.0)).collect(),
            unaccounted: tally.unaccounted,
            folded: tally.folded,
            ..Lost::default()
        };
        let mut room = self.cap.saturating_sub(self.remembered);
        for (kind, id) in tally.ids {
            // An ID the file could not hold (a reader refuses the whole file) is forgotten like one past the cap.
            if room == 0 || !sane_id(&id) {
                lost.forgotten += 1;
            } else {
                lost.ids.entry(kind.to_string()).or_default().push(id);
                room -= 1;
            }
        }
        // A folded gap that is not remembered (past the caps, or its file set aside) has no memory: its facts are in
        // the kinds' counts and among no IDs, so they count as lost.
        for old in &lost.folded {
            if let Some(o) = self.lost.get_mut(old) {
                o.taken_over = true;
            }
        }
        self.remembered += lost.id_count();
        // Gap event IDs name their sequence numbers, which are never reused; a repeat replaces the earlier entry.
        if let Some(old) = self.lost.insert(gap_id.to_string(), lost) {
            self.remembered -= old.id_count();
        }
        self.dirty = true;
    }

    /// `gap` and every remembered gap fact it took over, directly or not.
    fn family<'a>(&'a self, gap: &'a str) -> Vec<&'a str> {
        let mut family = vec![gap];
        let mut seen: HashSet<&str> = HashSet::from([gap]);
        let mut i = 0;
        while let Some(id) = family.get(i) {
            if let Some(l) = self.lost.get(*id) {
                for f in &l.folded {
                    // `seen` also stops a cycle, which only a damaged file could hold.
                    if self.lost.contains_key(f) && seen.insert(f) {
                        family.push(f);
                    }
                }
            }
            i += 1;
        }
        family
    }

    /// See [`super::Spool::recovery_facts`]. The memory of the gaps accounted for goes from the file at the end of
    /// the next append (the one that spools these accounts): until then a restart accounts for them again.
    pub(super) fn recovery_facts(
        &mut self,
        gaps: &[String],
        produced: &HashSet<String>,
        now: OffsetDateTime,
    ) -> Vec<Fact> {
        let mut out = Vec::new();
        for gap in gaps {
            if !self.lost.contains_key(gap) {
                continue;
            }
            // Each gap fact of the family, with what it dropped itself and what the gaps it took over dropped.
            let family: Vec<String> = self.family(gap).into_iter().map(str::to_string).collect();
            for member in &family {
                let Some(lost) = self.lost.get(member) else { continue };
                let (mut recovered, mut forgotten, mut unaccounted): (BTreeMap<&str, u64>, u64, u64) =
                    (BTreeMap::new(), 0, 0);
                for part in self.family(member) {
                    let Some(p) = self.lost.get(part) else { continue };
                    for (kind, ids) in &p.ids {
                        let back = ids.iter().filter(|id| produced.contains(*id)).count() as u64;
                        *recovered.entry(kind.as_str()).or_default() += back;
                    }
                    // Saturating: counts read back from a file are not trusted to add up.
                    forgotten = forgotten.saturating_add(p.forgotten);
                    unaccounted = unaccounted.saturating_add(p.unaccounted);
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
                    self.remembered -= l.id_count();
                    self.dirty = true;
                }
            }
        }
        out
    }

    /// Writes the memory if it changed (called at the end of an append, once its records are durable). A failure
    /// is logged, not returned: the records are safe, and the next append tries again.
    pub(super) fn persist(&mut self) {
        if !self.dirty {
            return;
        }
        match self.write() {
            Ok(()) => {
                if self.failing {
                    tracing::info!(dir = %self.dir.display(), "spool: remembered gaps written again");
                }
                self.dirty = false;
                self.failing = false;
            }
            Err(e) => {
                if !self.failing {
                    tracing::warn!(dir = %self.dir.display(), error = %e,
                        "spool: cannot write the remembered gaps; a restart before the next write forgets them");
                }
                self.failing = true;
            }
        }
    }

    fn write(&self) -> io::Result<()> {
        let path = self.dir.join(FILE);
        if self.lost.is_empty() {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        } else {
            let body = serde_json::to_vec(&BodyRef { gaps: &self.lost })?;
            let tmp = self.dir.join(TMP);
            let mut f = File::create(&tmp)?;
            f.write_all(header(&body).as_bytes())?;
            f.write_all(&body)?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, &path)?;
        }
        File::open(&self.dir)?.sync_all()
    }
}

/// The header line for `body`.
fn header(body: &[u8]) -> String {
    format!("{MAGIC} {VERSION} {:08x} {}\n", crc32fast::hash(body), body.len())
}

/// A whole file for `body` (tests write damaged and hostile ones).
#[cfg(test)]
pub(super) fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = header(body).into_bytes();
    out.extend_from_slice(body);
    out
}

/// The memory in `path` (none if there is no file), or why it does not read back.
fn read(path: &Path) -> Result<BTreeMap<String, Lost>, String> {
    let mut data = Vec::new();
    match File::open(path) {
        Ok(f) => f.take(MAX_FILE_BYTES + 1).read_to_end(&mut data).map_err(|e| format!("unreadable: {e}"))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(format!("unreadable: {e}")),
    };
    if data.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    let newline = data.iter().position(|&b| b == b'\n').ok_or("no header line")?;
    let (head, body) = (&data[..newline], &data[newline + 1..]);
    let head = std::str::from_utf8(head).map_err(|_| "header is not text")?;
    let fields: Vec<&str> = head.split(' ').collect();
    let [magic, version, crc, len] = fields[..] else { return Err(format!("header {head:?} is not one")) };
    if magic != MAGIC {
        return Err(format!("header {head:?} is not one"));
    }
    if version != VERSION.to_string() {
        return Err(format!("format version {version:?}, this agent reads {VERSION}"));
    }
    if len != body.len().to_string() {
        return Err(format!("body of {} bytes, the header says {len} (truncated?)", body.len()));
    }
    if crc != format!("{:08x}", crc32fast::hash(body)) {
        return Err("checksum mismatch (garbled)".into());
    }
    let Body { gaps } = serde_json::from_slice(body).map_err(|e| format!("not the expected JSON: {e}"))?;
    check(&gaps)?;
    Ok(gaps)
}

/// What the writer guarantees, checked on what was read: within the caps, event IDs and kinds of sane length.
fn check(gaps: &BTreeMap<String, Lost>) -> Result<(), String> {
    if gaps.len() > MAX_REMEMBERED_GAPS {
        return Err(format!("{} gaps, more than {MAX_REMEMBERED_GAPS}", gaps.len()));
    }
    let ids: usize = gaps.values().map(Lost::id_count).sum();
    if ids > MAX_REMEMBERED_IDS {
        return Err(format!("{ids} IDs, more than {MAX_REMEMBERED_IDS}"));
    }
    let id_ok = |id: &String| sane_id(id);
    let kind_ok = |k: &String| !k.is_empty() && k.len() <= KIND_MAX;
    for (gap, l) in gaps {
        let sane = id_ok(gap)
            && l.folded.iter().all(id_ok)
            && l.kinds.keys().all(kind_ok)
            && l.ids.iter().all(|(k, ids)| kind_ok(k) && ids.iter().all(id_ok));
        if !sane {
            return Err(format!(
                "gap {:?}: an event ID or kind is empty or too long",
                gap.chars().take(80).collect::<String>()
            ));
        }
    }
    Ok(())
}

/// An event ID as the wire format makes them ([`event_id`] keeps them within [`EVENT_ID_MAX`]).
fn sane_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= EVENT_ID_MAX
}

/// Renames the file that does not read back to `gaps.bad`; false if it could not be moved.
fn set_aside(dir: &Path, reason: &str) -> bool {
    let (path, bad) = (dir.join(FILE), dir.join(BAD));
    let moved = fs::rename(&path, &bad).and_then(|()| File::open(dir)?.sync_all());
    // Forgotten, those gaps stay unrecovered: never claimed recovered on the word of a damaged file.
    match &moved {
        Ok(()) => tracing::warn!(path = %path.display(), set_aside = %bad.display(), reason,
            "spool: remembered gaps unreadable, file set aside; those gaps are forgotten"),
        Err(e) => tracing::warn!(path = %path.display(), reason, error = %e,
            "spool: remembered gaps unreadable, cannot set the file aside (replaced at the next write); forgotten"),
    }
    moved.is_ok()
}

/// What the size cap dropped, for the gap fact.
#[derive(Default)]
pub(super) struct GapTally {
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
    /// A tally for a drop in the spool of `node`'s agent (named in the gap fact; none for the cluster agent).
    pub(super) fn for_node(node: Option<String>) -> Self {
        Self { node, ..Self::default() }
    }

    pub(super) fn add(&mut self, first: u64, last: u64, count: u64, records: &[(u64, Vec<u8>)]) {
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
    pub(super) fn fold(&mut self, seq: u64, event_id: &str, g: &GapFact) {
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
    pub(super) fn add_fact(&mut self, seq: u64, fact: &Fact) {
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

    pub(super) fn fact(&self) -> Option<Fact> {
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
