//! Gap facts: what an agent had to drop, and what a re-list recovered.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Data the agent had to drop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GapFact {
    /// Start of the dropped range.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub from: OffsetDateTime,
    /// End of the dropped range.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub to: OffsetDateTime,
    /// Facts dropped.
    pub dropped: u64,
    /// Per kind of dropped fact: how many, and the range of the facts' own times (an allocation's start or end, a
    /// telemetry or usage window) — so the server can say which months lost data. Empty from older agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<GapKind>,
    /// The node whose agent dropped them (node agents), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// One kind of fact a gap lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GapKind {
    /// The facts' `kind` (`allocation_started`, `telemetry`, …).
    pub kind: String,
    /// How many.
    pub count: u64,
    /// Earliest own time of those facts.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub from: OffsetDateTime,
    /// Latest own time of those facts (the end of a window).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub to: OffsetDateTime,
}

/// Kinds of fact that are measurement windows: once dropped they are gone (no re-list derives them again). Energy
/// comes from `telemetry` windows, so a lost one can make a month's energy charge short.
pub const TELEMETRY_KINDS: [&str; 2] = ["telemetry", "process_telemetry"];

/// A re-list's account of one earlier gap: which of its dropped facts the agent derived again.
///
/// The agent remembers the event IDs of the non-telemetry facts a gap dropped (in memory, capped) and compares them
/// with the IDs a re-list produced. It sends this once per gap; after an agent restart the memory is gone and no
/// account comes (the gap stays unrecovered).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GapRecovery {
    /// The gap fact's event ID.
    pub gap: String,
    /// Per kind the gap listed: recovered and lost counts (telemetry windows are always lost).
    pub kinds: Vec<GapKindRecovery>,
    /// Dropped non-telemetry facts whose IDs the agent no longer held (its memory cap): already counted in their
    /// kinds' `lost` — the agent cannot say whether they came back, so it says they did not.
    #[serde(default)]
    pub forgotten: u64,
    /// Dropped records that did not read back as facts (no kind, no ID): lost, and in no kind's count.
    #[serde(default)]
    pub unaccounted: u64,
}

/// One kind of a gap's dropped facts after a re-list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GapKindRecovery {
    /// The facts' `kind`, as in the gap's [`GapKind`].
    pub kind: String,
    /// Dropped facts whose event IDs the re-list produced again (they are stored, or stored once more).
    pub recovered: u64,
    /// Dropped facts that stay lost.
    pub lost: u64,
}
