//! The rows the disputes API reads (a dispute as listed, its lines, events and credit), and how each becomes the
//! contract's answer type (IDs and times as strings). States, terms and actions are read as the contract's enums
//! ([`Text`]): a value the contract does not name fails the query (an internal error), never a guessed value.

use gpuledger_api::{
    disputes as api,
    params::{DisputeState, Term},
    states::{AdjustmentState, Confidence, DisputeAction},
};
use serde_json::Value;
use sqlx::types::Text;
use time::OffsetDateTime;
use uuid::Uuid;

/// A dispute as listed.
#[derive(Debug, sqlx::FromRow)]
pub struct SummaryRow {
    /// Its ID.
    pub id: Uuid,
    /// Its number in the organization (1, 2, …).
    pub number: i32,
    /// The closed period of its lines (`YYYY-MM`).
    pub period: String,
    /// The disputed lines.
    pub line_ids: Vec<String>,
    /// `open`, `accepted` or `rejected`.
    pub state: Text<DisputeState>,
    /// Why it was opened.
    pub reason: String,
    /// Who opened it.
    pub opened_by: String,
    /// When.
    pub opened_at: OffsetDateTime,
    /// Who accepted or rejected it.
    pub resolved_by: Option<String>,
    /// When.
    pub resolved_at: Option<OffsetDateTime>,
    /// Why it was accepted or rejected.
    pub resolution: Option<String>,
    /// The credit granted on acceptance (positive; the adjustment carries it negative).
    pub credit_amount: Option<String>,
    /// The credit adjustment.
    pub adjustment_id: Option<Uuid>,
    /// The credit's state: `pending_approval`, `approved`, `applied` or `rejected`.
    pub credit_state: Option<String>,
    /// Sum of the disputed lines' amounts.
    pub disputed_amount: Option<String>,
    /// Their currency.
    pub currency: Option<String>,
}

/// A disputed ledger line.
#[derive(Debug, sqlx::FromRow)]
pub struct LineRow {
    /// `PERIOD/term/holder/detail`.
    pub line_id: String,
    /// Position in the period's ledger.
    pub line_no: i32,
    /// Department.
    pub department_id: Uuid,
    /// Department name.
    pub department: String,
    /// Tenant (none for a department-level line).
    pub tenant_id: Option<Uuid>,
    /// Tenant name.
    pub tenant: String,
    /// Charge term.
    pub term: Text<Term>,
    /// GPU class.
    pub gpu_class: String,
    /// Quantity.
    pub quantity: String,
    /// Its unit.
    pub unit: String,
    /// Rate per unit.
    pub rate: String,
    /// Amount.
    pub amount: String,
    /// Currency.
    pub currency: String,
    /// `exact`, `modeled` or `estimated`.
    pub confidence: Text<Confidence>,
    /// One sentence with its numbers.
    pub explanation: String,
}

/// One step of a dispute's history.
#[derive(Debug, sqlx::FromRow)]
pub struct EventRow {
    /// Its ID.
    pub id: Uuid,
    /// When.
    pub at: OffsetDateTime,
    /// Who.
    pub actor: String,
    /// `opened`, `commented`, `accepted`, `rejected`, `credit_approved` or `credit_rejected`.
    pub action: Text<DisputeAction>,
    /// Why (the reason or the comment).
    pub body: String,
    /// What else changed.
    pub details: Value,
}

/// The credit adjustment of an accepted dispute.
#[derive(Debug, sqlx::FromRow)]
pub struct CreditRow {
    /// The adjustment's ID.
    pub id: Uuid,
    /// `pending_approval`, `approved`, `applied` or `rejected`.
    pub state: Text<AdjustmentState>,
    /// Signed amount (negative: a credit).
    pub amount: String,
    /// Currency.
    pub currency: String,
    /// Tenant it is credited to.
    pub tenant_id: Option<Uuid>,
    /// Department it is credited to.
    pub department_id: Uuid,
    /// GPU class of the corrected line.
    pub gpu_class: String,
    /// The line it corrects (`PERIOD/term/holder/detail`).
    pub corrects: String,
    /// Why.
    pub reason: String,
    /// When it was created (the acceptance).
    pub created_at: OffsetDateTime,
    /// Who created it.
    pub created_by: String,
    /// When finance approved it.
    pub approved_at: Option<OffsetDateTime>,
    /// Who approved it.
    pub approved_by: Option<String>,
    /// The closed period it landed in (`YYYY-MM`).
    pub applied_period: Option<String>,
}

fn rfc3339(t: OffsetDateTime) -> String {
    gpuledger_core::time_fmt::rfc3339(t)
}

impl From<SummaryRow> for api::DisputeSummary {
    fn from(r: SummaryRow) -> Self {
        Self {
            id: r.id.to_string(),
            number: r.number,
            period: r.period,
            line_ids: r.line_ids,
            state: r.state.0,
            reason: r.reason,
            opened_by: r.opened_by,
            opened_at: rfc3339(r.opened_at),
            resolved_by: r.resolved_by,
            resolved_at: r.resolved_at.map(rfc3339),
            resolution: r.resolution,
            credit_amount: r.credit_amount,
            adjustment_id: r.adjustment_id.map(|a| a.to_string()),
            credit_state: r.credit_state,
            disputed_amount: r.disputed_amount,
            currency: r.currency,
        }
    }
}

impl From<LineRow> for api::DisputedLine {
    fn from(r: LineRow) -> Self {
        Self {
            line_id: r.line_id,
            line_no: r.line_no,
            department_id: r.department_id.to_string(),
            department: r.department,
            tenant_id: r.tenant_id.map(|t| t.to_string()),
            tenant: r.tenant,
            term: r.term.0,
            gpu_class: r.gpu_class,
            quantity: r.quantity,
            unit: r.unit,
            rate: r.rate,
            amount: r.amount,
            currency: r.currency,
            confidence: r.confidence.0,
            explanation: r.explanation,
        }
    }
}

impl From<EventRow> for api::DisputeEvent {
    fn from(r: EventRow) -> Self {
        Self {
            id: r.id.to_string(),
            at: rfc3339(r.at),
            actor: r.actor,
            action: r.action.0,
            body: r.body,
            details: r.details,
        }
    }
}

impl From<CreditRow> for api::Credit {
    fn from(r: CreditRow) -> Self {
        Self {
            id: r.id.to_string(),
            state: r.state.0,
            amount: r.amount,
            currency: r.currency,
            tenant_id: r.tenant_id.map(|t| t.to_string()),
            department_id: r.department_id.to_string(),
            gpu_class: r.gpu_class,
            corrects: r.corrects,
            reason: r.reason,
            created_at: rfc3339(r.created_at),
            created_by: r.created_by,
            approved_at: r.approved_at.map(rfc3339),
            approved_by: r.approved_by,
            applied_period: r.applied_period,
        }
    }
}
