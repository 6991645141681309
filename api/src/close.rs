//! Months and their close: periods, close, bundle, evidence, findings (`/api/v1/periods/…`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::Prose;

/// What is recorded of a month that has a period row (absent for an open month nothing was recorded of).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PeriodRecord {
    /// When it was closed (RFC 3339).
    pub closed_at: Option<String>,
    /// Who closed it.
    pub closed_by: Option<String>,
    /// The cost policy version that priced it.
    pub policy_version: Option<i32>,
    /// Its close hash.
    pub hash: Option<String>,
    /// Lines (`null` for a caller limited to departments).
    pub lines: Option<i32>,
    /// Total, a decimal string (`null` for a caller limited to departments).
    pub total: Option<String>,
    /// Currency.
    pub currency: Option<String>,
    /// The previous closed month's hash: the chain.
    pub previous_hash: Option<String>,
    /// The evidence bundle's path, for a closed month.
    pub bundle: Option<String>,
}

/// One month of `GET /api/v1/periods`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PeriodEntry {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// `open`, `closing` or `closed`.
    pub state: crate::states::PeriodState,
    /// What was recorded of it.
    #[serde(flatten)]
    pub record: Option<PeriodRecord>,
}

/// `GET /api/v1/periods`: months, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Periods {
    /// Months listed.
    pub total: usize,
    /// The months.
    pub items: Vec<PeriodEntry>,
}

/// `POST /api/v1/periods/{period}/close`: what the close produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CloseSummary {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// Lines written.
    pub lines: usize,
    /// Their total, a decimal string.
    pub total: String,
    /// Currency.
    pub currency: String,
    /// The close hash.
    pub hash: String,
    /// The previous close's hash (`null` for the first).
    pub previous_hash: Option<String>,
    /// The cost policy version.
    pub policy_version: u32,
    /// The inventory version (16 hex digits).
    pub inventory_version: String,
}

/// `POST /api/v1/periods/{period}/close` body (optional): an acknowledgement of what the month could not price.
/// Without it, a month with unpriced allocations is not closed (409).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseRequest {
    /// Why the month may be closed as it is; recorded and audited.
    #[serde(default)]
    pub acknowledge: Option<Prose<2000>>,
}

/// An acknowledgement given at close.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Acknowledgement {
    /// Who gave it.
    pub by: String,
    /// When (RFC 3339).
    pub at: String,
    /// Their reason.
    pub reason: String,
    /// What it covered, for people.
    pub covered: Vec<String>,
}

/// `GET /api/v1/periods/{period}/bundle`: a closed month's evidence bundle (docs/bundle.md), top level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Bundle {
    /// `gpuledger-evidence-bundle/1`.
    pub format: String,
    /// The organization's slug.
    pub organization: String,
    /// The month (`YYYY-MM`).
    pub period: String,
    /// When it was closed (RFC 3339).
    pub closed_at: String,
    /// Who closed it.
    pub closed_by: String,
    /// The cost policy version that priced it.
    pub policy_version: u32,
    /// First 16 hex digits of SHA-256 over the approved inventory's canonical JSON.
    pub inventory_version: String,
    /// The previous closed month's hash (`null` for the first).
    pub previous_hash: Option<String>,
    /// The close hash, hex.
    pub hash: String,
    /// The lines as closed.
    pub lines: Vec<crate::ledger::LedgerLine>,
    /// The ledger's inputs (`LedgerInput`, docs/bundle.md).
    pub inputs: serde_json::Value,
    /// The approved inventory itself.
    pub inventory: serde_json::Value,
}

/// What the store says about the workload behind an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceDetail {
    /// The cluster's name.
    pub cluster: String,
    /// `pod` or `vm`.
    pub holder_kind: String,
    /// The pod's or VM's name.
    pub holder: String,
    /// Its namespace.
    pub namespace: String,
    /// The container.
    pub container: Option<String>,
    /// The node.
    pub node: Option<String>,
    /// The devices as reported.
    pub device_ids: Vec<String>,
    /// `exclusive`, `mig`, `time_slice`, `vgpu`, `passthrough`, `shared_endpoint` or `soft_share`.
    pub sharing_mode: crate::states::SharingModeName,
    /// The MIG or vGPU profile.
    pub profile: Option<String>,
    /// The GPU model.
    pub gpu_model: Option<String>,
}

/// One allocation record behind a line (as in the bundle's `inputs.allocations`) with its details.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceAllocation {
    /// `cluster/allocation`.
    pub id: String,
    /// The owning tenant's ID.
    pub tenant: Option<String>,
    /// The GPU class.
    pub gpu_class: Option<String>,
    /// The fraction of a GPU held, an exact rational (`3/7`).
    pub fraction: String,
    /// Start (RFC 3339).
    pub start: String,
    /// End (RFC 3339; `null`: still held).
    #[serde(default)]
    pub end: Option<String>,
    /// `exact`, `modeled` or `estimated`.
    pub confidence: crate::states::Confidence,
    /// The physical GPUs.
    #[serde(default)]
    pub devices: Vec<String>,
    /// The shared endpoint it serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The workload's details (`null`: not in the store).
    pub detail: Option<EvidenceDetail>,
}

/// `GET /api/v1/periods/{period}/evidence`: a page of the allocation records behind lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Evidence {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// Records matching the filters (all pages).
    pub total: usize,
    /// This page's number, from 1.
    pub page: usize,
    /// Records per page.
    pub per_page: usize,
    /// The order (`start`, `end`, `fraction`, `id`; `-` for descending).
    pub sort: String,
    /// The records of this page.
    pub allocations: Vec<EvidenceAllocation>,
}

/// One data-quality finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    /// The cluster's name.
    pub cluster: String,
    /// `inventory_gap`, `agent_gap`, `overcommit`, `unknown_tenant`, `unpriced`, `cloud_bill_missing`, `unclaimed_vm`
    /// or `node_without_bill_line`.
    pub kind: crate::states::FindingKind,
    /// What it concerns.
    pub subject: String,
    /// Since when (RFC 3339).
    pub from: Option<String>,
    /// Until when (RFC 3339).
    pub to: Option<String>,
    /// The kind's details.
    pub details: serde_json::Value,
    /// What a person does about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// `GET /api/v1/periods/{period}/findings`: counts by kind and the newest 200.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Findings {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// What closing the month needs acknowledged, for people (`"3 unpriced allocation(s)"`); empty: nothing.
    #[serde(default)]
    pub needs_acknowledgement: Vec<String>,
    /// The acknowledgements given when closing it, oldest first.
    #[serde(default)]
    pub acknowledgements: Vec<Acknowledgement>,
    /// Findings per kind.
    pub by_kind: BTreeMap<String, i64>,
    /// The newest 200, newest first.
    pub items: Vec<Finding>,
}
