//! What the disputes API answers: a dispute as listed, its lines, events and credit, and a page of the list.

use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// A dispute as listed.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct DisputeSummary {
    /// Its ID.
    pub id: Uuid,
    /// Its number in the organization (1, 2, …).
    pub number: i32,
    /// The closed period of its lines (`YYYY-MM`).
    pub period: String,
    /// The disputed lines.
    pub line_ids: Vec<String>,
    /// `open`, `accepted` or `rejected`.
    pub state: String,
    /// Why it was opened.
    pub reason: String,
    /// Who opened it.
    pub opened_by: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub opened_at: OffsetDateTime,
    /// Who accepted or rejected it.
    pub resolved_by: Option<String>,
    /// When.
    #[serde(with = "time::serde::rfc3339::option")]
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
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct DisputedLine {
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
    pub term: String,
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
    pub confidence: String,
    /// One sentence with its numbers.
    pub explanation: String,
}

/// One step of a dispute's history.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct DisputeEvent {
    /// Its ID.
    pub id: Uuid,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Who.
    pub actor: String,
    /// `opened`, `commented`, `accepted`, `rejected`, `credit_approved` or `credit_rejected`.
    pub action: String,
    /// Why (the reason or the comment).
    pub body: String,
    /// What else changed.
    pub details: Value,
}

/// The credit adjustment of an accepted dispute.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct Credit {
    /// The adjustment's ID.
    pub id: Uuid,
    /// `pending_approval`, `approved`, `applied` or `rejected`.
    pub state: String,
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
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Who created it.
    pub created_by: String,
    /// When finance approved it.
    #[serde(with = "time::serde::rfc3339::option")]
    pub approved_at: Option<OffsetDateTime>,
    /// Who approved it.
    pub approved_by: Option<String>,
    /// The closed period it landed in (`YYYY-MM`).
    pub applied_period: Option<String>,
}

/// A dispute with its lines, its whole history and its credit.
#[derive(Debug, Serialize)]
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

/// A page of disputes.
#[derive(Debug, Serialize)]
pub struct DisputePage {
    /// The disputes, newest first.
    pub items: Vec<DisputeSummary>,
    /// How many match the filters.
    pub total: i64,
    /// This page (from 1).
    pub page: i64,
    /// Page size.
    pub per_page: i64,
}
