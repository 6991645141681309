//! Close hash and evidence bundle: everything needed to recompute a closed period offline, and the check that the
//! recomputation matches (DESIGN.md, "Close, adjustments, reproducibility"; format in docs/bundle.md).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    error::DomainError,
    interval::Period,
    ledger::{CSV_HEADER, LedgerInput, LedgerLine, compute},
};

/// The `format` of bundles this version writes: energy records are per device and hour (the hourly tier's exact
/// joules over the span its windows covered), not per telemetry window.
pub const BUNDLE_FORMAT: &str = "gpuledger-evidence-bundle/2";
/// The format of bundles closed before the telemetry tiers (one energy record per telemetry window). Read and
/// verified as ever: the records differ in length only, the computation is the same.
pub const BUNDLE_FORMAT_V1: &str = "gpuledger-evidence-bundle/1";

/// A closed period as one JSON document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    /// [`BUNDLE_FORMAT`].
    pub format: String,
    /// Organization slug.
    pub organization: String,
    /// The month.
    pub period: Period,
    /// When it was closed (RFC 3339, UTC).
    pub closed_at: String,
    /// Who closed it.
    pub closed_by: String,
    /// Policy version that priced it.
    pub policy_version: u32,
    /// Content hash of the inventory.
    pub inventory_version: String,
    /// Hash of the previous closed period, if any.
    #[serde(default)]
    pub previous_hash: Option<String>,
    /// SHA-256 (hex) over the canonical lines, policy version, inventory version and previous hash.
    pub hash: String,
    /// The lines as closed.
    pub lines: Vec<LedgerLine>,
    /// Everything they were computed from.
    pub inputs: LedgerInput,
    /// The approved inventory the fractions came from (evidence for a reader; not needed to recompute).
    #[serde(default)]
    pub inventory: serde_json::Value,
}

/// A [`Bundle`] borrowed from its parts: serializes to exactly the same JSON, so a close writes its bundle straight
/// into the compressor without copying a month of inputs into an owned `Bundle` first.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BundleRef<'a> {
    /// [`BUNDLE_FORMAT`].
    pub format: &'a str,
    /// Organization slug.
    pub organization: &'a str,
    /// The month.
    pub period: Period,
    /// When it was closed (RFC 3339, UTC).
    pub closed_at: &'a str,
    /// Who closed it.
    pub closed_by: &'a str,
    /// Policy version that priced it.
    pub policy_version: u32,
    /// Content hash of the inventory.
    pub inventory_version: &'a str,
    /// Hash of the previous closed period, if any.
    pub previous_hash: Option<&'a str>,
    /// The close hash.
    pub hash: &'a str,
    /// The lines as closed.
    pub lines: &'a [LedgerLine],
    /// Everything they were computed from.
    pub inputs: &'a LedgerInput,
    /// The approved inventory.
    pub inventory: &'a serde_json::Value,
}

fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

/// SHA-256 (hex) of any bytes: used for the inventory version.
pub fn sha256_hex(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

/// The close hash: SHA-256 over a header naming the period, policy version, inventory version and previous
/// hash, then the CSV header and every line's canonical CSV row, each followed by `\n`.
pub fn close_hash(
    period: Period,
    policy_version: u32,
    inventory_version: &str,
    previous_hash: Option<&str>,
    lines: &[LedgerLine],
) -> String {
    let mut h = Sha256::new();
    h.update(b"gpuledger-close/1\n");
    h.update(format!("period:{period}\npolicy:{policy_version}\ninventory:{inventory_version}\n").as_bytes());
    h.update(format!("previous:{}\n", previous_hash.unwrap_or("")).as_bytes());
    h.update(CSV_HEADER.as_bytes());
    h.update(b"\n");
    for l in lines {
        h.update(l.csv_row().as_bytes());
        h.update(b"\n");
    }
    to_hex(&h.finalize())
}

/// Outcome of [`verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    /// Lines recomputed.
    pub recomputed: usize,
    /// One sentence per difference, naming the line.
    pub differences: Vec<String>,
    /// Hash over the recomputed lines.
    pub recomputed_hash: String,
}

impl Verification {
    /// True when every line and the hash match.
    pub fn ok(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Recomputes a bundle's lines from its inputs and compares them, field by field, with its lines and hash.
pub fn verify(bundle: &Bundle) -> Result<Verification, DomainError> {
    if bundle.format != BUNDLE_FORMAT && bundle.format != BUNDLE_FORMAT_V1 {
        return Err(DomainError::invalid_at(
            "format",
            format!("{:?} is not {BUNDLE_FORMAT} or {BUNDLE_FORMAT_V1}", bundle.format),
        ));
    }
    let mut differences = Vec::new();
    if bundle.inputs.period != bundle.period {
        differences
            .push(format!("inputs.period {} is not the bundle's period {}", bundle.inputs.period, bundle.period));
    }
    if bundle.inputs.policy.version != bundle.policy_version {
        differences.push(format!(
            "inputs.policy.version {} is not the bundle's policy_version {}",
            bundle.inputs.policy.version, bundle.policy_version
        ));
    }
    if bundle.inputs.inventory_version != bundle.inventory_version {
        differences.push("inputs.inventory_version differs from the bundle's inventory_version".to_string());
    }
    let recomputed = compute(&bundle.inputs)?.lines;
    let by_id: std::collections::BTreeMap<&str, &LedgerLine> =
        bundle.lines.iter().map(|l| (l.line_id.as_str(), l)).collect();
    let recomputed_ids: std::collections::BTreeSet<&str> = recomputed.iter().map(|l| l.line_id.as_str()).collect();
    for line in &recomputed {
        match by_id.get(line.line_id.as_str()) {
            None => differences.push(format!("line {}: recomputed but missing from the bundle", line.line_id)),
            Some(stored) => {
                for (field, a, b) in [
                    ("amount", stored.amount.to_string(), line.amount.to_string()),
                    ("quantity", stored.quantity.to_string(), line.quantity.to_string()),
                    ("rate", stored.rate.to_string(), line.rate.to_string()),
                ] {
                    if stored_value_differs(&a, &b) {
                        differences
                            .push(format!("line {}: {field} is {a} in the bundle, {b} recomputed", line.line_id));
                    }
                }
                if stored.csv_row() != line.csv_row()
                    && stored.amount == line.amount
                    && stored.quantity == line.quantity
                    && stored.rate == line.rate
                {
                    differences
                        .push(format!("line {}: differs from the recomputed line (text or identity)", line.line_id));
                }
            }
        }
    }
    for stored in &bundle.lines {
        if !recomputed_ids.contains(stored.line_id.as_str()) {
            differences.push(format!("line {}: in the bundle but not recomputed", stored.line_id));
        }
    }
    let recomputed_hash = close_hash(
        bundle.period,
        bundle.policy_version,
        &bundle.inventory_version,
        bundle.previous_hash.as_deref(),
        &recomputed,
    );
    if recomputed_hash != bundle.hash {
        differences.push(format!("hash: {} in the bundle, {recomputed_hash} recomputed", bundle.hash));
    }
    Ok(Verification { recomputed: recomputed.len(), differences, recomputed_hash })
}

fn stored_value_differs(a: &str, b: &str) -> bool {
    match (crate::decimal::Decimal::parse(a), crate::decimal::Decimal::parse(b)) {
        (Ok(x), Ok(y)) => x != y,
        _ => a != b,
    }
}

/// Recomputed lines as CSV (header + rows), for `gpuledger-server recompute`.
pub fn recompute_csv(inputs: &LedgerInput) -> Result<String, DomainError> {
    let lines = compute(inputs)?.lines;
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for l in &lines {
        out.push_str(&l.csv_row());
        out.push('\n');
    }
    Ok(out)
}
