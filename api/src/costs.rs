//! The cloud bill in (issue 35): GPU nodes with the provider ID the bill names them by, and a month's FOCUS bill
//! imported and matched to them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::{Line, Month};

/// `GET /api/v1/inventory/nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodesParams {
    /// Only this cluster's nodes (name).
    pub cluster: Option<Line<200>>,
}

/// A GPU node as its agent last reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InventoryNode {
    /// The cluster's name.
    pub cluster: String,
    /// The node's name.
    pub name: String,
    /// The node's UID.
    pub node_uid: String,
    /// `nvidia.com/gpu.product`.
    pub gpu_product: Option<String>,
    /// `nvidia.com/gpu.count`.
    pub gpu_count: Option<i32>,
    /// `spec.providerID` (`aws:///zone/i-…`, `azure:///subscriptions/…`, `gce://project/zone/name`); `null` on
    /// premises.
    pub provider_id: Option<String>,
    /// The cloud the provider ID names (`aws`, `azure`, `gcp`); `null` when it names none the bill matching knows.
    pub cloud: Option<String>,
    /// The key a bill line's `ResourceId` is matched on (`aws:i-…`, `azure:/subscriptions/…`, `gcp:p/z/n`).
    pub resource_key: Option<String>,
    /// Since when it looks like this (RFC 3339).
    pub since: String,
}

/// `POST /api/v1/costs/imports` and `GET /api/v1/costs/imports`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    /// The month the bill is for (`YYYY-MM`).
    pub period: Month,
}

/// A month's imported bill, matched to the GPU nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CostImport {
    /// The month.
    pub period: String,
    /// Imported after the month closed: its closed figures stand; where the policy prices a GPU class by the bill,
    /// the next close books the difference as a late-data correction (the open month shows it now).
    pub after_close: bool,
    /// When it was imported (RFC 3339), and by whom.
    pub imported_at: String,
    /// Who imported it.
    pub imported_by: String,
    /// The FOCUS version its columns say (`1.0+`, `1.1+`, `1.3`).
    pub focus_version: String,
    /// Its `BillingCurrency`.
    pub currency: String,
    /// Data lines read.
    pub lines_read: i64,
    /// Lines whose charge period is not in the month (in no sum).
    pub lines_outside_period: i64,
    /// EffectiveCost of the lines that matched a GPU node, a decimal string.
    pub matched_cost: String,
    /// EffectiveCost of every other line of the month, a decimal string.
    pub unmatched_cost: String,
    /// The resources that matched a node.
    pub matched: Vec<MatchedResource>,
    /// The costliest resources no node claims (at most 50; `unmatched_cost` counts them all).
    pub unmatched: Vec<UnmatchedResource>,
    /// What a person should look at: bill lines for VMs no node claims, GPU nodes with a provider ID and no bill
    /// line. Each with its fix.
    pub findings: Vec<CostFinding>,
}

/// A bill resource that matched a GPU node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MatchedResource {
    /// `ResourceId` as the bill writes it.
    pub resource_id: String,
    /// The matching key.
    pub resource_key: String,
    /// The node's cluster.
    pub cluster: String,
    /// The node.
    pub node: String,
    /// Bill lines.
    pub lines: i64,
    /// Sum of EffectiveCost, a decimal string.
    pub effective_cost: String,
    /// Sum of BilledCost, a decimal string.
    pub billed_cost: String,
}

/// A bill resource no GPU node claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UnmatchedResource {
    /// `ResourceId` (`null`: lines without one, or the resources past the import's limit, summed together).
    pub resource_id: Option<String>,
    /// `ServiceName`.
    pub service_name: String,
    /// Bill lines.
    pub lines: i64,
    /// Sum of EffectiveCost, a decimal string.
    pub effective_cost: String,
}

/// Something in the import a person should look at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CostFinding {
    /// `unclaimed_vm` (a VM on the bill that no GPU node names) or `node_without_bill_line`.
    pub kind: CostFindingKind,
    /// The resource or node.
    pub subject: String,
    /// What was found, with its numbers.
    pub detail: String,
    /// What to do.
    pub fix: String,
}

/// The kinds of [`CostFinding`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CostFindingKind {
    /// A VM on the bill that no GPU node names.
    UnclaimedVm,
    /// A GPU node with a provider ID and no line on the bill.
    NodeWithoutBillLine,
}

crate::states::names!(CostFindingKind { UnclaimedVm => "unclaimed_vm", NodeWithoutBillLine => "node_without_bill_line" });
