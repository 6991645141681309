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

/// The input's members other than its allocations and energy, as [`LedgerInput`] serializes them.
#[derive(Serialize)]
struct InputHead<'a> {
    period: Period,
    policy: &'a crate::policy::CostPolicy,
    inventory_version: &'a str,
    departments: &'a [crate::ledger::DepartmentRef],
    tenants: &'a [crate::ledger::TenantRef],
    capacity: &'a [crate::ledger::ClassCapacity],
    quotas: &'a [crate::ledger::QuotaRecord],
    service_usage: &'a [crate::ledger::UsageRecord],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    endpoint_totals: &'a [crate::ledger::EndpointTotal],
    adjustments: &'a [crate::ledger::AdjustmentRecord],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    actual_costs: &'a [crate::ledger::ActualCost],
    #[serde(skip_serializing_if = "Option::is_none")]
    bounds: Option<&'a crate::ledger::MonthBounds>,
}

/// What a bundle holds besides its inputs, written once the lines are known ([`BundleStream::finish`]).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BundleTail<'a> {
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
    /// The approved inventory.
    pub inventory: &'a serde_json::Value,
}

/// A [`Bundle`] written as its parts become known, so that a close never holds a month's inputs: the input's header,
/// then its allocations part by part, then its energy device by device, then the lines and the hash. The document
/// reads as the [`Bundle`] that [`BundleRef`] writes (JSON members have no order for a reader).
pub struct BundleStream<W: std::io::Write> {
    out: W,
    allocations: usize,
    energy: Option<usize>,
}

fn write_err(e: impl std::fmt::Display) -> DomainError {
    DomainError::invalid_at("bundle", format!("writing the bundle: {e}"))
}

impl<W: std::io::Write> BundleStream<W> {
    /// Starts the document with `header`'s members (its `allocations` and `energy` are not read).
    pub fn begin(mut out: W, header: &LedgerInput) -> Result<Self, DomainError> {
        let head = InputHead {
            period: header.period,
            policy: &header.policy,
            inventory_version: &header.inventory_version,
            departments: &header.departments,
            tenants: &header.tenants,
            capacity: &header.capacity,
            quotas: &header.quotas,
            service_usage: &header.service_usage,
            endpoint_totals: &header.endpoint_totals,
            adjustments: &header.adjustments,
            actual_costs: &header.actual_costs,
            bounds: header.bounds.as_ref(),
        };
        let json = serde_json::to_vec(&head).map_err(write_err)?;
        // `{…}` without its closing brace, then the allocations' array is opened.
        let members = json.get(..json.len().saturating_sub(1)).unwrap_or_default();
        out.write_all(b"{\"inputs\":").map_err(write_err)?;
        out.write_all(members).map_err(write_err)?;
        out.write_all(b",\"allocations\":[").map_err(write_err)?;
        Ok(Self { out, allocations: 0, energy: None })
    }

    /// Appends allocation records (before any energy).
    pub fn allocations(&mut self, records: &[crate::ledger::AllocationRecord]) -> Result<(), DomainError> {
        if self.energy.is_some() {
            return Err(DomainError::invalid_at("bundle", "allocations after energy"));
        }
        for r in records {
            if self.allocations > 0 {
                self.out.write_all(b",").map_err(write_err)?;
            }
            serde_json::to_writer(&mut self.out, r).map_err(write_err)?;
            self.allocations += 1;
        }
        Ok(())
    }

    /// Appends one device's energy (after the last allocation; each device once).
    pub fn energy(&mut self, device: &crate::ledger::DeviceEnergy) -> Result<(), DomainError> {
        let n = match self.energy {
            None => {
                self.out.write_all(b"],\"energy\":[").map_err(write_err)?;
                0
            }
            Some(n) => {
                self.out.write_all(b",").map_err(write_err)?;
                n
            }
        };
        serde_json::to_writer(&mut self.out, device).map_err(write_err)?;
        self.energy = Some(n + 1);
        Ok(())
    }

    /// Ends the inputs and writes the rest of the bundle; returns the writer.
    pub fn finish(mut self, tail: &BundleTail<'_>) -> Result<W, DomainError> {
        if self.energy.is_none() {
            self.out.write_all(b"],\"energy\":[").map_err(write_err)?;
        }
        let json = serde_json::to_vec(tail).map_err(write_err)?;
        // The tail's members without its opening brace: they continue the bundle's object after the inputs.
        self.out.write_all(b"]},").map_err(write_err)?;
        self.out.write_all(json.get(1..).unwrap_or_default()).map_err(write_err)?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::ledger::{
        ActualCost, AllocationRecord, ClassCapacity, DepartmentRef, DeviceEnergy, EndpointTotal, EnergySpan,
        MonthBounds, TenantRef, UsageRecord,
    };
    use crate::{Confidence, Fraction, ids::TenantId};

    fn input() -> LedgerInput {
        let d = crate::ids::DepartmentId::from_uuid(uuid::Uuid::from_u128(1));
        let t = TenantId::from_uuid(uuid::Uuid::from_u128(2));
        let at = time::macros::datetime!(2026-09-03 00:00 UTC);
        let record = |i: u32| AllocationRecord {
            id: format!("c/a{i}"),
            tenant: Some(t),
            gpu_class: Some("H100".into()),
            fraction: "3/7".parse::<Fraction>().unwrap(),
            start: at,
            end: i.is_multiple_of(2).then_some(at + time::Duration::hours(3)),
            confidence: Confidence::Exact,
            devices: vec![format!("GPU-{i}")],
            endpoint: (i == 1).then(|| "llm".into()),
            share_basis: None,
        };
        let mut policy: crate::policy::CostPolicy = serde_json::from_str(
            r#"{"version":3,"currency":"EUR","classes":[{"gpu_class":"H100","guaranteed":"2","borrowed":"3"}]}"#,
        )
        .unwrap();
        policy.energy =
            Some(crate::policy::EnergyPrice { per_kwh: crate::decimal::Decimal::parse("0.2").unwrap(), pue: None });
        LedgerInput {
            period: Period::parse("2026-09").unwrap(),
            policy,
            inventory_version: "inv".into(),
            departments: vec![DepartmentRef { id: d, name: "R&D \"x\"".into() }],
            tenants: vec![TenantRef { id: t, name: "t".into(), department: d }],
            capacity: vec![ClassCapacity { gpu_class: "H100".into(), gpus: 4 }],
            quotas: Vec::new(),
            allocations: (0..3).map(record).collect(),
            energy: (0..2)
                .map(|i| DeviceEnergy {
                    gpu_uuid: format!("GPU-{i}"),
                    spans: vec![EnergySpan {
                        start_us: 1_788_393_600_000_000,
                        end_us: 1_788_397_200_000_000,
                        joules: 7 + i,
                    }],
                })
                .collect(),
            service_usage: vec![UsageRecord {
                endpoint: "llm".into(),
                model: "m".into(),
                tenant: t,
                requests: 1,
                input_tokens: 2,
                output_tokens: 3,
            }],
            endpoint_totals: vec![EndpointTotal {
                endpoint: "llm".into(),
                model: "m".into(),
                requests: 1,
                input_tokens: 2,
                output_tokens: 3,
            }],
            adjustments: Vec::new(),
            actual_costs: vec![ActualCost {
                gpu_class: "H100".into(),
                cost: crate::decimal::Decimal::parse("10.00").unwrap(),
                nodes: 1,
            }],
            bounds: Some(MonthBounds {
                time_zone: "Europe/Berlin".into(),
                starts_at: time::macros::datetime!(2026-08-31 22:00 UTC),
                ends_at: time::macros::datetime!(2026-09-30 22:00 UTC),
                continues_from: None,
            }),
        }
    }

    #[test]
    fn a_streamed_bundle_reads_as_the_bundle_written_whole() {
        let input = input();
        let lines = compute(&input).unwrap().lines;
        let inventory = serde_json::json!({"models": [1, 2]});
        let hash = close_hash(input.period, 3, "inv", Some("abc"), &lines);
        let tail = BundleTail {
            format: BUNDLE_FORMAT,
            organization: "demo",
            period: input.period,
            closed_at: "2026-10-01T00:00:00Z",
            closed_by: "me",
            policy_version: 3,
            inventory_version: "inv",
            previous_hash: Some("abc"),
            hash: &hash,
            lines: &lines,
            inventory: &inventory,
        };
        let whole = serde_json::to_vec(&BundleRef {
            format: tail.format,
            organization: tail.organization,
            period: tail.period,
            closed_at: tail.closed_at,
            closed_by: tail.closed_by,
            policy_version: tail.policy_version,
            inventory_version: tail.inventory_version,
            previous_hash: tail.previous_hash,
            hash: tail.hash,
            lines: &lines,
            inputs: &input,
            inventory: &inventory,
        })
        .unwrap();
        let mut stream = BundleStream::begin(Vec::new(), &input).unwrap();
        stream.allocations(&input.allocations[..1]).unwrap();
        stream.allocations(&[]).unwrap();
        stream.allocations(&input.allocations[1..]).unwrap();
        for d in &input.energy {
            stream.energy(d).unwrap();
        }
        let streamed = stream.finish(&tail).unwrap();
        // The same document, member for member; and the same bundle to a reader.
        let as_value = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
        assert_eq!(as_value(&streamed), as_value(&whole));
        let read: Bundle = serde_json::from_slice(&streamed).unwrap();
        assert_eq!(read, serde_json::from_slice::<Bundle>(&whole).unwrap());
        let verified = verify(&read).unwrap();
        assert!(verified.ok() && verified.recomputed > 0, "{verified:?}");
        assert!(stream_is_refused_out_of_order(&input));
    }

    fn stream_is_refused_out_of_order(input: &LedgerInput) -> bool {
        let mut stream = BundleStream::begin(Vec::new(), input).unwrap();
        stream.energy(&input.energy[0]).unwrap();
        stream.allocations(&input.allocations).is_err()
    }

    #[test]
    fn a_streamed_bundle_without_allocations_or_energy_is_still_a_bundle() {
        let mut input = input();
        input.allocations.clear();
        input.energy.clear();
        let inventory = serde_json::Value::Null;
        let tail = BundleTail {
            format: BUNDLE_FORMAT,
            organization: "o",
            period: input.period,
            closed_at: "2026-10-01T00:00:00Z",
            closed_by: "me",
            policy_version: 3,
            inventory_version: "inv",
            previous_hash: None,
            hash: "h",
            lines: &[],
            inventory: &inventory,
        };
        let streamed = BundleStream::begin(Vec::new(), &input).unwrap().finish(&tail).unwrap();
        let read: Bundle = serde_json::from_slice(&streamed).unwrap();
        assert_eq!(read.inputs, input);
    }
}
