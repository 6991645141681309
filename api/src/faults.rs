//! Credits when the hardware failed (issue 35): device faults the node agents reported, the allocations' hours they
//! took, and the credits proposed for finance's approval.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::{Line, Month, Note};

/// `GET /api/v1/faults/credits?period=YYYY-MM`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultCreditsParams {
    /// The month whose lost hours are listed (`YYYY-MM`).
    pub period: Month,
}

/// The month's device faults and the credits they earn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FaultCredits {
    /// The month.
    pub period: String,
    /// The policy's XID codes that count.
    pub xids: Vec<u32>,
    /// Minutes of grace after a fault.
    pub grace_minutes: u32,
    /// Whether credits are proposed (otherwise listed only).
    pub auto_propose: bool,
    /// The credits, by fault time.
    pub items: Vec<FaultCredit>,
}

/// What one fault took from one allocation, and the credit for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FaultCredit {
    /// `proposed` (awaiting finance), `approved` (an adjustment the next close applies), `rejected`, or `listed`
    /// (the policy proposes nothing: shown for the record).
    pub state: FaultCreditState,
    /// The fault fact's event ID (the evidence; with `allocation_id`, what approval names).
    pub fault_event_id: String,
    /// `xid`, `device_lost` or `retired_pages`.
    pub fault_kind: String,
    /// The XID code.
    pub xid: Option<u32>,
    /// What the code means, for people.
    pub description: String,
    /// The cluster.
    pub cluster: String,
    /// The node.
    pub node: String,
    /// The GPU.
    pub gpu_uuid: String,
    /// When the fault was seen (RFC 3339).
    pub fault_at: String,
    /// When the device recovered (`null`: not yet).
    pub recovered_at: Option<String>,
    /// The allocation (cluster/allocation ID).
    pub allocation_id: String,
    /// Its pod (`namespace/name`).
    pub holder: String,
    /// Its tenant.
    pub tenant: String,
    /// Its GPU class.
    pub gpu_class: String,
    /// The hours lost: from (RFC 3339).
    pub lost_from: String,
    /// To.
    pub lost_to: String,
    /// GPU-hours lost on this GPU (the allocation's share of it × hours), a decimal string.
    pub gpu_hours: String,
    /// The class's borrowed rate in the month's policy.
    pub rate: String,
    /// The credit, a decimal string (positive: what the tenant is given back).
    pub amount: String,
    /// Currency.
    pub currency: String,
    /// `true` while the allocation runs and the device has not recovered: the hours still grow, approval waits.
    pub provisional: bool,
    /// The adjustment once approved.
    pub adjustment_id: Option<String>,
}

/// The states of a [`FaultCredit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FaultCreditState {
    /// Awaiting finance.
    Proposed,
    /// Approved: an adjustment the next close applies.
    Approved,
    /// Rejected by finance.
    Rejected,
    /// The policy proposes nothing: shown for the record.
    Listed,
}

crate::states::names!(FaultCreditState {
    Proposed => "proposed",
    Approved => "approved",
    Rejected => "rejected",
    Listed => "listed",
});

/// `POST /api/v1/faults/credits/approve` and `/reject`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultCreditDecision {
    /// The fault fact's event ID.
    pub fault_event_id: Line<200>,
    /// The allocation (as listed).
    pub allocation_id: Line<600>,
    /// Why (may be empty).
    #[serde(default)]
    pub reason: Note<2000>,
}
