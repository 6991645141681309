//! Disputes: a ledger line of a closed period is challenged with a reason, discussed, then accepted (with a credit
//! that finance approves before it lands in the next closed period) or rejected. Every step is a `dispute_events`
//! row and an `audit_log` row, written in the same transaction as the change itself.
//!
//! States: `open` → `accepted` | `rejected` (final). An accepted dispute carries a credit adjustment:
//! `pending_approval` → `approved` (later `applied` by the ledger close) | `rejected`.

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use gpuledger_core::{Period, decimal::Decimal};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::{Date, OffsetDateTime};
use uuid::Uuid;

use crate::{
    app::AppState,
    auth::{self, Capability, Principal},
    db::{DbError, OrgTx},
    error::AppError,
};

/// Longest reason, comment or resolution, in characters (the table allows the same for a dispute's reason).
pub const MAX_TEXT: usize = 4000;
/// Most lines one dispute may name.
pub const MAX_LINES: usize = 500;
/// Largest page of the list.
pub const MAX_PER_PAGE: i64 = 100;
const DEFAULT_PER_PAGE: i64 = 20;

/// The disputes API.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/disputes", get(list).post(open))
        .route("/api/v1/disputes/{id}", get(show))
        .route("/api/v1/disputes/{id}/comments", post(comment))
        .route("/api/v1/disputes/{id}/accept", post(accept))
        .route("/api/v1/disputes/{id}/reject", post(reject))
        .route("/api/v1/disputes/{id}/credit/approve", post(approve_credit))
        .route("/api/v1/disputes/{id}/credit/reject", post(reject_credit))
}

// ---------------------------------------------------------------- who may do what

async fn caller(state: &AppState, headers: &HeaderMap, cap: Capability) -> Result<Principal, AppError> {
    auth::require(&state.db, headers, cap).await
}

// ---------------------------------------------------------------- requests

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct OpenRequest {
    period: String,
    line_ids: Vec<String>,
    reason: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct CommentRequest {
    body: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct AcceptRequest {
    reason: String,
    credit_amount: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ReasonRequest {
    reason: String,
}

/// Parses a JSON body; an empty body reads as `{}` so that missing fields are named by the checks that follow.
fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    crate::policy::json_body(if body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { body })
}

/// A required free text: trimmed, not empty, at most [`MAX_TEXT`] characters.
fn required_text(field: &str, value: &str) -> Result<String, AppError> {
    let t = value.trim();
    if t.is_empty() {
        return Err(AppError::invalid(field, "is required and must not be empty"));
    }
    optional_text(field, t)
}

fn optional_text(field: &str, value: &str) -> Result<String, AppError> {
    let t = value.trim();
    let chars = t.chars().count();
    if chars > MAX_TEXT {
        return Err(AppError::invalid(field, format!("{chars} characters; at most {MAX_TEXT}")));
    }
    Ok(t.to_string())
}

fn parse_period(field: &str, value: &str) -> Result<Period, AppError> {
    Period::parse(value).map_err(|_| AppError::invalid(field, format!("{value:?} is not a month in YYYY-MM form")))
}

fn first_day(period: Period) -> Result<Date, AppError> {
    Date::from_calendar_date(period.year(), period.month(), 1)
        .map_err(|e| AppError::Internal(format!("period {period} has no first day: {e}")))
}

fn check_line_ids(line_ids: &[String]) -> Result<(), AppError> {
    if line_ids.is_empty() {
        return Err(AppError::invalid("line_ids", "name at least one ledger line"));
    }
    if line_ids.len() > MAX_LINES {
        return Err(AppError::invalid("line_ids", format!("{} lines; at most {MAX_LINES}", line_ids.len())));
    }
    for (i, id) in line_ids.iter().enumerate() {
        if id.trim().is_empty() {
            return Err(AppError::invalid(format!("line_ids[{i}]"), "must not be empty"));
        }
        if let Some(j) = line_ids[..i].iter().position(|other| other == id) {
            return Err(AppError::invalid(format!("line_ids[{i}]"), format!("{id:?} is already listed at [{j}]")));
        }
    }
    Ok(())
}

/// A positive amount with at most two decimals.
fn parse_credit(value: Option<&str>) -> Result<Decimal, AppError> {
    let field = "credit_amount";
    let value = value.ok_or_else(|| {
        AppError::invalid(field, "is required: the credit to grant, a decimal string such as \"123.45\"")
    })?;
    let amount = Decimal::parse(value)
        .map_err(|_| AppError::invalid(field, format!("{value:?} is not a decimal number such as \"123.45\"")))?;
    if amount <= Decimal::ZERO {
        return Err(AppError::invalid(field, format!("{value} must be greater than zero")));
    }
    amount.with_scale(2).map_err(|_| AppError::invalid(field, format!("{value} has more than 2 decimals")))
}

// ---------------------------------------------------------------- views

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

/// Binds the organization as `$1`; a caller appends `AND …` conditions (from `$2`) and the rest of the statement.
const SUMMARY_SELECT: &str = "
    SELECT d.dispute_id AS id, d.number, to_char(d.period, 'YYYY-MM') AS period, d.line_ids, d.state, d.reason,
           d.opened_by, d.opened_at, d.resolved_by, d.resolved_at, d.resolution,
           d.credit_amount::text AS credit_amount, d.adjustment_id, a.state AS credit_state,
           s.amount AS disputed_amount, s.currency
      FROM disputes d
      LEFT JOIN adjustments a ON a.org_id = d.org_id AND a.adjustment_id = d.adjustment_id
     CROSS JOIN LATERAL (
           SELECT sum(l.amount)::text AS amount, min(l.currency)::text AS currency
             FROM ledger_lines l
            WHERE l.org_id = d.org_id AND l.org_id = $1 AND l.period = d.period AND l.line_id = ANY (d.line_ids)) s
     WHERE d.org_id = $1";

/// Reads one dispute with its lines, events and credit (`None`: not visible in this organization).
pub async fn load(tx: &mut OrgTx, id: Uuid) -> Result<Option<DisputeDetail>, DbError> {
    let org = tx.org().as_uuid();
    let dispute: Option<DisputeSummary> = sqlx::query_as(&format!("{SUMMARY_SELECT} AND d.dispute_id = $2"))
        .bind(org)
        .bind(id)
        .fetch_optional(tx.conn())
        .await?;
    let Some(dispute) = dispute else {
        return Ok(None);
    };
    let lines: Vec<DisputedLine> = sqlx::query_as(
        "SELECT l.line_id, l.line_no, l.department_id, l.department, l.tenant_id, l.tenant, l.term, l.gpu_class,
                l.quantity::text AS quantity, l.unit, l.rate::text AS rate, l.amount::text AS amount,
                l.currency::text AS currency, l.confidence, l.explanation
           FROM disputes d
          CROSS JOIN LATERAL unnest(d.line_ids) WITH ORDINALITY AS u (line_id, ord)
           JOIN ledger_lines l ON l.org_id = d.org_id AND l.period = d.period AND l.line_id = u.line_id
          WHERE d.dispute_id = $1 AND d.org_id = $2
          ORDER BY u.ord",
    )
    .bind(id)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let events: Vec<DisputeEvent> = sqlx::query_as(
        "SELECT event_id AS id, at, actor, action, body, details FROM dispute_events
          WHERE dispute_id = $1 AND org_id = $2 ORDER BY at, event_id",
    )
    .bind(id)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let credit: Option<Credit> = match dispute.adjustment_id {
        None => None,
        Some(adjustment) => {
            sqlx::query_as(
                "SELECT adjustment_id AS id, state, amount::text AS amount, currency::text AS currency, tenant_id,
                        department_id, gpu_class, corrects, reason, created_at, created_by, approved_at, approved_by,
                        to_char(applied_period, 'YYYY-MM') AS applied_period
                   FROM adjustments WHERE adjustment_id = $1 AND org_id = $2",
            )
            .bind(adjustment)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?
        }
    };
    Ok(Some(DisputeDetail { dispute, lines, events, credit }))
}

// ---------------------------------------------------------------- history

/// Appends a step to the dispute's history and to the audit log, in the caller's transaction.
async fn record(
    tx: &mut OrgTx,
    actor: &str,
    dispute: &Locked,
    action: &str,
    body: &str,
    details: Value,
) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    // The event carries its dispute's department: what department managers see it under.
    let department: Option<Uuid> =
        sqlx::query_scalar("SELECT department_id FROM disputes WHERE org_id = $1 AND dispute_id = $2")
            .bind(org)
            .bind(dispute.id)
            .fetch_one(tx.conn())
            .await?;
    sqlx::query(
        "INSERT INTO dispute_events (org_id, event_id, dispute_id, actor, action, body, details, department_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(dispute.id)
    .bind(actor)
    .bind(action)
    .bind(body)
    .bind(&details)
    .bind(department)
    .execute(tx.conn())
    .await?;
    let mut audit_details = json!({ "number": dispute.number, "event": action });
    if let (Some(all), Value::Object(extra)) = (audit_details.as_object_mut(), details) {
        all.extend(extra);
    }
    crate::policy::audit(
        tx,
        actor,
        &format!("dispute.{action}"),
        &format!("dispute:{}", dispute.id),
        body,
        audit_details,
    )
    .await
}

/// The columns of a dispute a transition needs, read under a row lock.
#[derive(Debug, sqlx::FromRow)]
struct Locked {
    id: Uuid,
    number: i32,
    period: Date,
    line_ids: Vec<String>,
    state: String,
    adjustment_id: Option<Uuid>,
}

/// Finds a dispute by its ID or its number (`/disputes/7`) and locks it for the rest of the transaction.
async fn lock(tx: &mut OrgTx, key: &str) -> Result<Locked, AppError> {
    let not_found = || AppError::NotFound(format!("no dispute {key:?}"));
    let org = tx.org().as_uuid();
    let row: Option<Locked> = if let Ok(id) = Uuid::try_parse(key) {
        sqlx::query_as(
            "SELECT dispute_id AS id, number, period, line_ids, state, adjustment_id FROM disputes
              WHERE dispute_id = $1 AND org_id = $2 FOR UPDATE",
        )
        .bind(id)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?
    } else if let Some(number) = parse_number(key) {
        sqlx::query_as(
            "SELECT dispute_id AS id, number, period, line_ids, state, adjustment_id FROM disputes
              WHERE number = $1 AND org_id = $2 FOR UPDATE",
        )
        .bind(number)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?
    } else {
        None
    };
    row.ok_or_else(not_found)
}

fn parse_number(key: &str) -> Option<i32> {
    let digits = key.strip_prefix('#').unwrap_or(key);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n >= 1)
}

async fn resolve_id(tx: &mut OrgTx, key: &str) -> Result<Uuid, AppError> {
    let org = tx.org().as_uuid();
    let id: Option<Uuid> = if let Ok(id) = Uuid::try_parse(key) {
        Some(id)
    } else if let Some(number) = parse_number(key) {
        sqlx::query_scalar("SELECT dispute_id FROM disputes WHERE number = $1 AND org_id = $2")
            .bind(number)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?
    } else {
        None
    };
    id.ok_or_else(|| AppError::NotFound(format!("no dispute {key:?}")))
}

fn require_open(dispute: &Locked, what: &str) -> Result<(), AppError> {
    if dispute.state == "open" {
        return Ok(());
    }
    Err(AppError::Conflict(format!(
        "dispute #{} is {}, not open: only an open dispute can be {what}",
        dispute.number, dispute.state
    )))
}

async fn reply(mut tx: OrgTx, id: Uuid, status: StatusCode) -> Result<Response, AppError> {
    let detail = load(&mut tx, id).await?.ok_or_else(|| AppError::Internal(format!("dispute {id} vanished")))?;
    tx.commit().await?;
    let mut response = (status, Json(detail)).into_response();
    if status == StatusCode::CREATED
        && let Ok(location) = HeaderValue::from_str(&format!("/api/v1/disputes/{id}"))
    {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

// ---------------------------------------------------------------- handlers

/// `POST /api/v1/disputes`: opens a dispute on lines of a closed period.
async fn open(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Result<Response, AppError> {
    let principal = caller(&state, &headers, Capability::DisputeParticipate).await?;
    let request: OpenRequest = parse_body(&body)?;
    let period = parse_period("period", &request.period)?;
    check_line_ids(&request.line_ids)?;
    let reason = required_text("reason", &request.reason)?;
    let day = first_day(period)?;
    let who = principal.actor();
    let mut tx = principal.begin(&state.db).await?;
    let org = tx.org().as_uuid();

    let period_state: Option<String> =
        sqlx::query_scalar("SELECT state FROM periods WHERE period = $1 AND org_id = $2")
            .bind(day)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    match period_state.as_deref() {
        Some("closed") => {}
        Some(other) => {
            return Err(AppError::Conflict(format!(
                "period {period} is {other}, not closed: only lines of a closed period can be disputed"
            )));
        }
        None => {
            return Err(AppError::Conflict(format!(
                "period {period} is not closed yet: only lines of a closed period can be disputed"
            )));
        }
    }
    let found: Vec<(String, String, Uuid)> = sqlx::query_as(
        "SELECT line_id, currency::text, department_id FROM ledger_lines
          WHERE period = $1 AND line_id = ANY ($2) AND org_id = $3
          ORDER BY line_id",
    )
    .bind(day)
    .bind(&request.line_ids)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    for (i, id) in request.line_ids.iter().enumerate() {
        if !found.iter().any(|(line, _, _)| line == id) {
            return Err(AppError::invalid(
                format!("line_ids[{i}]"),
                format!("no line {id:?} in the ledger of period {period}"),
            ));
        }
    }
    let mut departments: Vec<Uuid> = found.iter().map(|(_, _, d)| *d).collect();
    departments.sort_unstable();
    departments.dedup();
    let [department] = departments[..] else {
        return Err(AppError::invalid(
            "line_ids",
            "the lines belong to different departments; dispute each department's lines separately",
        ));
    };
    let mut currencies: Vec<&str> = found.iter().map(|(_, c, _)| c.as_str()).collect();
    currencies.sort_unstable();
    currencies.dedup();
    if currencies.len() > 1 {
        return Err(AppError::invalid(
            "line_ids",
            format!("the lines are in different currencies ({}); dispute them separately", currencies.join(", ")),
        ));
    }

    // One opening at a time per organization: numbers stay dense and a line cannot be disputed twice at once.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('gpuledger.disputes:' || $1::text, 0))")
        .bind(principal.org.as_uuid())
        .execute(tx.conn())
        .await?;
    let busy: Option<(i32, String, Option<String>, String)> = sqlx::query_as(
        "SELECT d.number, d.state, a.state, u.line_id
           FROM disputes d
           LEFT JOIN adjustments a ON a.org_id = d.org_id AND a.adjustment_id = d.adjustment_id
          CROSS JOIN LATERAL unnest(d.line_ids) AS u (line_id)
          WHERE d.org_id = $3 AND d.period = $1 AND u.line_id = ANY ($2)
            AND (d.state = 'open' OR (d.state = 'accepted' AND a.state IS DISTINCT FROM 'rejected'))
          ORDER BY d.number
          LIMIT 1",
    )
    .bind(day)
    .bind(&request.line_ids)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    if let Some((number, dispute_state, credit_state, line)) = busy {
        let why = if dispute_state == "open" {
            "which is still open".to_string()
        } else {
            format!("which was accepted with a credit ({})", credit_state.as_deref().unwrap_or("none"))
        };
        return Err(AppError::Conflict(format!("line {line:?} is already disputed in dispute #{number}, {why}")));
    }
    // The counter is organization-level: a department-scoped caller does not see other departments' disputes.
    let number: i32 = sqlx::query_scalar(
        "INSERT INTO dispute_numbers (org_id, last_number) VALUES ($1, 1)
         ON CONFLICT (org_id) DO UPDATE SET last_number = dispute_numbers.last_number + 1
         RETURNING last_number",
    )
    .bind(principal.org.as_uuid())
    .fetch_one(tx.conn())
    .await?;
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO disputes (org_id, dispute_id, number, period, line_ids, reason, opened_by, department_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(principal.org.as_uuid())
    .bind(id)
    .bind(number)
    .bind(day)
    .bind(&request.line_ids)
    .bind(&reason)
    .bind(&who)
    .bind(department)
    .execute(tx.conn())
    .await?;
    let locked = Locked {
        id,
        number,
        period: day,
        line_ids: request.line_ids.clone(),
        state: "open".into(),
        adjustment_id: None,
    };
    record(
        &mut tx,
        &who,
        &locked,
        "opened",
        &reason,
        json!({ "period": period.to_string(), "line_ids": request.line_ids }),
    )
    .await?;
    reply(tx, id, StatusCode::CREATED).await
}

/// Filters of the list.
#[derive(Debug, Default)]
struct ListQuery {
    state: Option<String>,
    period: Option<String>,
    page: Option<String>,
    per_page: Option<String>,
}

fn parse_count(field: &str, value: Option<&str>, default: i64, max: i64) -> Result<i64, AppError> {
    let Some(value) = value else {
        return Ok(default);
    };
    value
        .parse::<i64>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| AppError::invalid(field, format!("{value:?} is not a whole number from 1 to {max}")))
}

/// `GET /api/v1/disputes?state=&period=&page=&per_page=`: newest first.
async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(raw): Query<Vec<(String, String)>>,
) -> Result<Json<DisputePage>, AppError> {
    let principal = caller(&state, &headers, Capability::ReadLedger).await?;
    let mut query = ListQuery::default();
    for (key, value) in raw {
        let slot = match key.as_str() {
            "state" => &mut query.state,
            "period" => &mut query.period,
            "page" => &mut query.page,
            "per_page" => &mut query.per_page,
            other => {
                return Err(AppError::invalid(other, "unknown parameter; use state, period, page or per_page"));
            }
        };
        *slot = Some(value);
    }
    let state_filter = match query.state.as_deref() {
        None | Some("") => None,
        Some(s @ ("open" | "accepted" | "rejected")) => Some(s.to_string()),
        Some(other) => {
            return Err(AppError::invalid("state", format!("{other:?} is not one of open, accepted, rejected")));
        }
    };
    let period_filter = match query.period.as_deref() {
        None | Some("") => None,
        Some(p) => Some(first_day(parse_period("period", p)?)?),
    };
    let page = parse_count("page", query.page.as_deref(), 1, 1_000_000)?;
    let per_page = parse_count("per_page", query.per_page.as_deref(), DEFAULT_PER_PAGE, MAX_PER_PAGE)?;

    let mut tx = principal.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let filter = "AND ($2::text IS NULL OR d.state = $2) AND ($3::date IS NULL OR d.period = $3)";
    let total: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM disputes d WHERE d.org_id = $1 {filter}"))
        .bind(org)
        .bind(&state_filter)
        .bind(period_filter)
        .fetch_one(tx.conn())
        .await?;
    let items: Vec<DisputeSummary> = sqlx::query_as(&format!(
        "{SUMMARY_SELECT} {filter} ORDER BY d.opened_at DESC, d.number DESC LIMIT $4 OFFSET $5"
    ))
    .bind(org)
    .bind(&state_filter)
    .bind(period_filter)
    .bind(per_page)
    .bind((page - 1) * per_page)
    .fetch_all(tx.conn())
    .await?;
    tx.commit().await?;
    Ok(Json(DisputePage { items, total, page, per_page }))
}

/// `GET /api/v1/disputes/{id}` (the UUID, or the number).
async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Json<DisputeDetail>, AppError> {
    let principal = caller(&state, &headers, Capability::ReadLedger).await?;
    let mut tx = principal.begin(&state.db).await?;
    let id = resolve_id(&mut tx, &key).await?;
    let detail = load(&mut tx, id).await?.ok_or_else(|| AppError::NotFound(format!("no dispute {key:?}")))?;
    tx.commit().await?;
    Ok(Json(detail))
}

/// `POST /api/v1/disputes/{id}/comments`: adds to the discussion while the dispute is open.
async fn comment(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Response, AppError> {
    let principal = caller(&state, &headers, Capability::DisputeParticipate).await?;
    let request: CommentRequest = parse_body(&body)?;
    let text = required_text("body", &request.body)?;
    let mut tx = principal.begin(&state.db).await?;
    let dispute = lock(&mut tx, &key).await?;
    if dispute.state != "open" {
        return Err(AppError::Conflict(format!(
            "dispute #{} is {}: comments are taken only while a dispute is open (its history stays readable)",
            dispute.number, dispute.state
        )));
    }
    record(&mut tx, &principal.actor(), &dispute, "commented", &text, json!({})).await?;
    reply(tx, dispute.id, StatusCode::CREATED).await
}

/// `POST /api/v1/disputes/{id}/accept`: accepts with a credit that finance must then approve.
async fn accept(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Response, AppError> {
    let principal = caller(&state, &headers, Capability::DisputeResolve).await?;
    let request: AcceptRequest = parse_body(&body)?;
    let reason = required_text("reason", &request.reason)?;
    let credit = parse_credit(request.credit_amount.as_deref())?;
    let who = principal.actor();
    let mut tx = principal.begin(&state.db).await?;
    let dispute = lock(&mut tx, &key).await?;
    require_open(&dispute, "accepted")?;
    let org = tx.org().as_uuid();

    let total: Option<String> = sqlx::query_scalar(
        "SELECT sum(amount)::text FROM ledger_lines WHERE period = $1 AND line_id = ANY ($2) AND org_id = $3",
    )
    .bind(dispute.period)
    .bind(&dispute.line_ids)
    .bind(org)
    .fetch_one(tx.conn())
    .await?;
    let first = dispute.line_ids.first().ok_or_else(|| AppError::Internal("a dispute without lines".into()))?;
    let line: Option<(Option<Uuid>, Uuid, String, String)> = sqlx::query_as(
        "SELECT tenant_id, department_id, gpu_class, currency::text FROM ledger_lines
          WHERE period = $1 AND line_id = $2 AND org_id = $3",
    )
    .bind(dispute.period)
    .bind(first)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    let (Some(total), Some((tenant, department, gpu_class, currency))) = (total, line) else {
        return Err(AppError::Internal(format!("the lines of dispute #{} are missing", dispute.number)));
    };
    let total = Decimal::parse(&total).map_err(|e| AppError::Internal(format!("disputed total {total:?}: {e}")))?;
    if credit > total {
        return Err(AppError::invalid(
            "credit_amount",
            format!("{credit} {currency} is more than the disputed lines' total of {total} {currency}"),
        ));
    }

    let adjustment = Uuid::new_v4();
    let credit_text = credit.to_string();
    sqlx::query(
        "INSERT INTO adjustments (org_id, adjustment_id, kind, state, tenant_id, department_id, gpu_class, amount,
                                  currency, corrects, dispute_id, reason, created_by)
         VALUES ($1, $2, 'credit', 'pending_approval', $3, $4, $5, -($6::numeric), $7, $8, $9, $10, $11)",
    )
    .bind(principal.org.as_uuid())
    .bind(adjustment)
    .bind(tenant)
    .bind(department)
    .bind(&gpu_class)
    .bind(&credit_text)
    .bind(&currency)
    .bind(first)
    .bind(dispute.id)
    .bind(&reason)
    .bind(&who)
    .execute(tx.conn())
    .await?;
    sqlx::query(
        "UPDATE disputes SET state = 'accepted', resolved_by = $2, resolved_at = now(), resolution = $3,
                credit_amount = $4::numeric, adjustment_id = $5
          WHERE dispute_id = $1 AND org_id = $6",
    )
    .bind(dispute.id)
    .bind(&who)
    .bind(&reason)
    .bind(&credit_text)
    .bind(adjustment)
    .bind(org)
    .execute(tx.conn())
    .await?;
    record(
        &mut tx,
        &who,
        &dispute,
        "accepted",
        &reason,
        json!({ "credit_amount": credit_text, "currency": currency, "adjustment_id": adjustment }),
    )
    .await?;
    reply(tx, dispute.id, StatusCode::OK).await
}

/// `POST /api/v1/disputes/{id}/reject`: rejects with a reason.
async fn reject(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Response, AppError> {
    let principal = caller(&state, &headers, Capability::DisputeResolve).await?;
    let request: ReasonRequest = parse_body(&body)?;
    let reason = required_text("reason", &request.reason)?;
    let who = principal.actor();
    let mut tx = principal.begin(&state.db).await?;
    let dispute = lock(&mut tx, &key).await?;
    require_open(&dispute, "rejected")?;
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE disputes SET state = 'rejected', resolved_by = $2, resolved_at = now(), resolution = $3
          WHERE dispute_id = $1 AND org_id = $4",
    )
    .bind(dispute.id)
    .bind(&who)
    .bind(&reason)
    .bind(org)
    .execute(tx.conn())
    .await?;
    record(&mut tx, &who, &dispute, "rejected", &reason, json!({})).await?;
    reply(tx, dispute.id, StatusCode::OK).await
}

/// Finance's decision on an accepted dispute's credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreditDecision {
    Approve,
    Reject,
}

async fn decide_credit(
    state: &AppState,
    headers: &HeaderMap,
    key: &str,
    body: &[u8],
    decision: CreditDecision,
) -> Result<Response, AppError> {
    let principal = caller(state, headers, Capability::CreditApprove).await?;
    let request: ReasonRequest = parse_body(body)?;
    let reason = match decision {
        CreditDecision::Approve => optional_text("reason", &request.reason)?,
        CreditDecision::Reject => required_text("reason", &request.reason)?,
    };
    let verb = match decision {
        CreditDecision::Approve => "approve",
        CreditDecision::Reject => "reject",
    };
    let who = principal.actor();
    let mut tx = principal.begin(&state.db).await?;
    let dispute = lock(&mut tx, key).await?;
    let Some(adjustment) = dispute.adjustment_id else {
        return Err(AppError::Conflict(format!(
            "dispute #{} is {}: it has no credit to {verb} (a credit comes with acceptance)",
            dispute.number, dispute.state
        )));
    };
    let org = tx.org().as_uuid();
    let credit: Option<(String, String, String)> = sqlx::query_as(
        "SELECT state, amount::text, created_by FROM adjustments WHERE adjustment_id = $1 AND org_id = $2 FOR UPDATE",
    )
    .bind(adjustment)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    let Some((credit_state, amount, accepted_by)) = credit else {
        return Err(AppError::Internal(format!("the credit of dispute #{} is missing", dispute.number)));
    };
    if credit_state != "pending_approval" {
        return Err(AppError::Conflict(format!(
            "the credit of dispute #{} is {credit_state}: only a credit pending approval can be {verb}d",
            dispute.number
        )));
    }
    // Separation of duties: whoever accepted the dispute (and so set the credit) does not approve its money.
    // The refusal is audited (nothing else was changed in this transaction).
    if decision == CreditDecision::Approve && accepted_by == who {
        crate::policy::audit_by(
            &mut tx,
            &principal,
            "dispute.credit_approval_refused",
            &format!("dispute:{}", dispute.id),
            "separation of duties: the credit was set by the same person or token",
            json!({ "number": dispute.number, "adjustment_id": adjustment, "accepted_by": accepted_by }),
        )
        .await?;
        tx.commit().await?;
        return Err(AppError::Forbidden(format!(
            "dispute #{} was accepted by {who}: its credit must be approved by someone else (separation of duties)",
            dispute.number
        )));
    }
    let action = match decision {
        CreditDecision::Approve => {
            sqlx::query(
                "UPDATE adjustments SET state = 'approved', approved_by = $2, approved_at = now()
                  WHERE adjustment_id = $1 AND org_id = $3",
            )
            .bind(adjustment)
            .bind(&who)
            .bind(org)
            .execute(tx.conn())
            .await?;
            "credit_approved"
        }
        CreditDecision::Reject => {
            sqlx::query("UPDATE adjustments SET state = 'rejected' WHERE adjustment_id = $1 AND org_id = $2")
                .bind(adjustment)
                .bind(org)
                .execute(tx.conn())
                .await?;
            "credit_rejected"
        }
    };
    record(&mut tx, &who, &dispute, action, &reason, json!({ "adjustment_id": adjustment, "amount": amount })).await?;
    reply(tx, dispute.id, StatusCode::OK).await
}

/// `POST /api/v1/disputes/{id}/credit/approve`: finance approves the credit; the next close applies it.
async fn approve_credit(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Response, AppError> {
    decide_credit(&state, &headers, &key, &body, CreditDecision::Approve).await
}

/// `POST /api/v1/disputes/{id}/credit/reject`: finance refuses the credit (the dispute stays accepted).
async fn reject_credit(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Response, AppError> {
    decide_credit(&state, &headers, &key, &body, CreditDecision::Reject).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn credits_are_positive_cents() {
        assert_eq!(parse_credit(Some("123.45")).unwrap().to_string(), "123.45");
        assert_eq!(parse_credit(Some("7")).unwrap().to_string(), "7.00");
        for bad in ["0", "0.00", "-1", "1.234", "1e3", "abc", ""] {
            let err = parse_credit(Some(bad)).unwrap_err();
            assert!(matches!(&err, AppError::Invalid { field, .. } if field == "credit_amount"), "{bad}: {err}");
        }
        assert!(parse_credit(None).is_err());
    }

    #[test]
    fn line_ids_are_checked_by_position() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_line_ids(&ids(&["a", "b"])).is_ok());
        let err = check_line_ids(&[]).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids"));
        let err = check_line_ids(&ids(&["a", " "])).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids[1]"));
        let err = check_line_ids(&ids(&["a", "b", "a"])).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids[2]"));
    }

    #[test]
    fn bodies_name_the_field() {
        let err = parse_body::<AcceptRequest>(br#"{"reason": "x", "credit_amount": 12.5}"#).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "credit_amount"), "{err}");
        let ok = parse_body::<ReasonRequest>(b"").unwrap();
        assert_eq!(ok.reason, "");
        assert!(required_text("reason", "  ").is_err());
        assert_eq!(required_text("reason", " why ").unwrap(), "why");
        assert!(required_text("reason", &"x".repeat(MAX_TEXT + 1)).is_err());
    }

    #[test]
    fn keys_are_ids_or_numbers() {
        assert_eq!(parse_number("7"), Some(7));
        assert_eq!(parse_number("#12"), Some(12));
        assert_eq!(parse_number("0"), None);
        assert_eq!(parse_number("{id}"), None);
        assert_eq!(parse_number("-1"), None);
        assert_eq!(parse_number("99999999999"), None);
    }
}
