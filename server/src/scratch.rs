//! Scratch files for month-sized work that must not be held in memory (a close's energy and bundle, a month's
//! utilization timelines): unnamed temporary files.

use std::fs::File;

/// An unnamed file in the temporary directory: created new, its name removed at once (the open file stays until it
/// is dropped, and nothing is left behind if the process dies).
pub(crate) fn unnamed_file(what: &str) -> std::io::Result<File> {
    let path = std::env::temp_dir().join(format!("gpuledger-{what}-{}", uuid::Uuid::new_v4()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// Spans per mark of a run's sparse index.
const STRIDE: usize = if cfg!(test) { 3 } else { 64 };

/// A sparse index over runs of `[start, end)` spans kept in start order in a scratch file (a device's month): for
/// each block of `STRIDE` spans, the first one's start and the latest end of the spans before the block (`i64::MIN`
/// for the first) — so that a reader takes the blocks a few hours can reach, not the run. 16 B a mark: a month of
/// 744 hours is 12 marks at 64 spans.
#[derive(Default)]
pub(crate) struct SparseIndex {
    marks: Vec<(i64, i64)>,
}

impl SparseIndex {
    /// Marks a run (its spans in start order); returns its first mark, for [`SparseIndex::near`].
    pub(crate) fn mark(&mut self, spans: impl Iterator<Item = (i64, i64)>) -> usize {
        let first = self.marks.len();
        let mut ended = i64::MIN;
        for (i, (start, end)) in spans.enumerate() {
            if i % STRIDE == 0 {
                self.marks.push((start, ended));
            }
            ended = ended.max(end);
        }
        first
    }

    /// The spans (indexes in a run of `n` marked from `first_mark`) that can overlap `[lo, hi)`: the blocks from the
    /// last one that nothing before reaches past `lo` to the first that starts at or after `hi` — a superset.
    pub(crate) fn near(&self, first_mark: usize, n: usize, lo: i64, hi: i64) -> std::ops::Range<usize> {
        let marks = &self.marks[first_mark..first_mark + n.div_ceil(STRIDE)];
        // Blocks whose earlier spans all end by `lo` (the first block always: nothing before it).
        let from = marks.partition_point(|(_, ended)| *ended <= lo).saturating_sub(1) * STRIDE;
        // Blocks starting at or after `hi` and everything after them (spans are in start order).
        let to = (marks.partition_point(|(start, _)| *start < hi) * STRIDE).min(n);
        from..to.max(from)
    }
}

/// What a set of held spans reaches: merged, so that a scan over a run's spans in start order tests each once.
pub(crate) struct Reach {
    merged: Vec<(i64, i64)>,
    k: usize,
}

impl Reach {
    /// The spans `[start, end)` held (any order).
    pub(crate) fn new(mut spans: Vec<(i64, i64)>) -> Self {
        spans.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(spans.len());
        for (s, e) in spans {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        Self { merged, k: 0 }
    }

    /// From the first held instant to the last.
    pub(crate) fn bounds(&self) -> (i64, i64) {
        (self.merged.first().map_or(0, |m| m.0), self.merged.last().map_or(0, |m| m.1))
    }

    /// Whether `[start, end)` overlaps a held span; asked in start order.
    pub(crate) fn hits(&mut self, start: i64, end: i64) -> bool {
        while self.k < self.merged.len() && self.merged[self.k].1 <= start {
            self.k += 1;
        }
        self.k < self.merged.len() && self.merged[self.k].0 < end
    }
}
