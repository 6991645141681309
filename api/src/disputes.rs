//! Disputes of closed lines and their credits (`/api/v1/disputes/…`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::{Credit as CreditAmount, Line, List, Month, Note, Prose};

/// Longest dispute text (reason, comment).
pub const MAX_TEXT: usize = 4000;
/// Most lines in one dispute.
pub const MAX_LINES: usize = 500;

/// A dispute as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DisputeSummary {
    /// Its ID (UUID).
    pub id: String,
    /// Its number in the organization (1, 2, …).
    pub number: i32,
    /// The closed period of its lines (`YYYY-MM`).
    pub period: String,
    /// The disputed lines.
    pub line_ids: Vec<String>,
    /// `open`, `accepted` or `rejected`.
    pub state: crate::params::DisputeState,
    /// Why it was opened.
    pub reason: String,
    /// Who opened it.
    pub opened_by: String,
    /// When (RFC 3339).
    pub opened_at: String,
    /// Who accepted or rejected it.
    pub resolved_by: Option<String>,
    /// When (RFC 3339).
    pub resolved_at: Option<String>,
    /// Why it was accepted or rejected.
    pub resolution: Option<String>,
    /// The credit granted on acceptance, a decimal string (positive; the adjustment carries it negative).
    pub credit_amount: Option<String>,
    /// The credit adjustment's ID.
    pub adjustment_id: Option<String>,
    /// The credit's state: `pending_approval`, `approved`, `applied` or `rejected`.
    pub credit_state: Option<String>,
    /// Sum of the disputed lines' amounts, a decimal string.
    pub disputed_amount: Option<String>,
    /// Their currency.
    pub currency: Option<String>,
}

/// A disputed ledger line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DisputedLine {
    /// `PERIOD/term/holder/detail`.
    pub line_id: String,
    /// Position in the period's ledger.
    pub line_no: i32,
    /// The department's ID.
    pub department_id: String,
    /// The department's name.
    pub department: String,
    /// The tenant's ID (`null` for a department-level line).
    pub tenant_id: Option<String>,
    /// The tenant's name.
    pub tenant: String,
    /// Charge term.
    pub term: crate::params::Term,
    /// GPU class.
    pub gpu_class: String,
    /// Quantity, a decimal string.
    pub quantity: String,
    /// Its unit.
    pub unit: String,
    /// Rate per unit, a decimal string.
    pub rate: String,
    /// Amount, a decimal string.
    pub amount: String,
    /// Currency.
    pub currency: String,
    /// `exact`, `modeled` or `estimated`.
    pub confidence: crate::states::Confidence,
    /// One sentence with its numbers.
    pub explanation: String,
}

/// One step of a dispute's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DisputeEvent {
    /// Its ID.
    pub id: String,
    /// When (RFC 3339).
    pub at: String,
    /// Who.
    pub actor: String,
    /// `opened`, `commented`, `accepted`, `rejected`, `credit_approved` or `credit_rejected`.
    pub action: crate::states::DisputeAction,
    /// Why (the reason or the comment).
    pub body: String,
    /// What else changed.
    pub details: serde_json::Value,
}

/// The credit adjustment of an accepted dispute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Credit {
    /// The adjustment's ID.
    pub id: String,
    /// `pending_approval`, `approved`, `applied` or `rejected`.
    pub state: crate::states::AdjustmentState,
    /// Signed amount, a decimal string (negative: a credit).
    pub amount: String,
    /// Currency.
    pub currency: String,
    /// Tenant it is credited to.
    pub tenant_id: Option<String>,
    /// Department it is credited to.
    pub department_id: String,
    /// GPU class of the corrected line.
    pub gpu_class: String,
    /// The line it corrects (`PERIOD/term/holder/detail`).
    pub corrects: String,
    /// Why.
    pub reason: String,
    /// When it was created: the acceptance (RFC 3339).
    pub created_at: String,
    /// Who created it.
    pub created_by: String,
    /// When finance approved it (RFC 3339).
    pub approved_at: Option<String>,
    /// Who approved it.
    pub approved_by: Option<String>,
    /// The closed period it landed in (`YYYY-MM`).
    pub applied_period: Option<String>,
}

/// A dispute with its lines, its whole history and its credit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DisputeDetail {
    /// The dispute.
    #[serde(flatten)]
    pub dispute: DisputeSummary,
    /// Its lines, in the order they were named.
    pub lines: Vec<DisputedLine>,
    /// Every step, oldest first.
    pub events: Vec<DisputeEvent>,
    /// The credit, once accepted.
    pub credit: Option<Credit>,
}

/// `GET /api/v1/disputes`: a page of disputes, newest first.
pub type DisputePage = crate::Page<DisputeSummary>;

/// `POST /api/v1/disputes`: dispute lines of a closed period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenDispute {
    /// The closed period.
    pub period: Month,
    /// The disputed lines' IDs, each once (lines that are not in the month's ledger: 404; lines of two departments
    /// or currencies: 409).
    #[schemars(extend("uniqueItems" = true))]
    pub line_ids: List<Line<200>, 1, MAX_LINES>,
    /// Why.
    pub reason: Prose<MAX_TEXT>,
}

/// `POST /api/v1/disputes/{id}/comments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommentRequest {
    /// The comment.
    pub body: Prose<MAX_TEXT>,
}

/// `POST /api/v1/disputes/{id}/accept`: accept with a credit awaiting finance's approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptRequest {
    /// Why.
    pub reason: Prose<MAX_TEXT>,
    /// The credit (at most the disputed lines' total: else 409).
    pub credit_amount: CreditAmount,
}

/// `POST /api/v1/disputes/{id}/reject`, `…/credit/reject`: a decision with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonRequest {
    /// Why.
    pub reason: Prose<MAX_TEXT>,
}

/// `POST /api/v1/disputes/{id}/credit/approve`: the approval, with an optional reason (the body may be absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequest {
    /// Why (may be empty).
    #[serde(default)]
    pub reason: Note<MAX_TEXT>,
}
