//! Disputes: a ledger line of a closed period is challenged with a reason, discussed, then accepted (with a credit
//! that finance approves before it lands in the next closed period) or rejected. Every step is a `dispute_events`
//! row and an `audit_log` row, written in the same transaction as the change itself.
//!
//! States: `open` → `accepted` | `rejected` (final). An accepted dispute carries a credit adjustment:
//! `pending_approval` → `approved` (later `applied` by the ledger close) | `rejected`.
//!
//! This module holds the router and the request handlers; `requests` parses and checks bodies, `views` holds
//! what the API answers, `store` reads, locks and records disputes, and `credits` is finance's decision on a
//! credit.

mod credits;
mod requests;
mod store;
mod views;

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    response::Response,
    routing::{get, post},
};
use gpuledger_api::params::{DisputeListParams, DisputePath};
use gpuledger_core::decimal::Decimal;
use serde_json::json;
use uuid::Uuid;

use crate::{
    auth::{Capability, Principal},
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, DisputeParticipate, DisputeResolve, JsonBody, PathParams, ReadLedger},
    state::AppState,
};

use crate::http::Params;
use credits::{approve_credit, reject_credit};
pub use gpuledger_api::disputes::{Credit, DisputeDetail, DisputeEvent, DisputePage, DisputeSummary, DisputedLine};
use requests::{AcceptRequest, CommentRequest, OpenRequest, ReasonRequest, check_line_ids, credit_of};
pub use store::load;
use store::{Locked, finish, lock, record, require_open, resolve_id};

pub use gpuledger_api::disputes::{MAX_LINES, MAX_TEXT};
const DEFAULT_PER_PAGE: i64 = 20;

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/disputes", list),
        described("post", "/api/v1/disputes", open),
        described("get", "/api/v1/disputes/{id}", show),
        described("post", "/api/v1/disputes/{id}/comments", comment),
        described("post", "/api/v1/disputes/{id}/accept", accept),
        described("post", "/api/v1/disputes/{id}/reject", reject),
        described("post", "/api/v1/disputes/{id}/credit/approve", credits::approve_credit),
        described("post", "/api/v1/disputes/{id}/credit/reject", credits::reject_credit),
    ]
}

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

// ---------------------------------------------------------------- handlers

/// A dispute as the API answers it: `201 Created` with its `Location` (a new dispute, a new comment), or `200`.
fn respond(detail: DisputeDetail, status: StatusCode) -> Response {
    use axum::{http::header, response::IntoResponse};
    let location = format!("/api/v1/disputes/{}", detail.dispute.id);
    let mut response = (status, Json(detail)).into_response();
    if status == StatusCode::CREATED
        && let Ok(location) = axum::http::HeaderValue::from_str(&location)
    {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// The feature's operations, typed: the REST handlers here and the portal's forms call these, and each checks its
/// caller's capability itself.
pub(crate) mod service {
    pub(crate) use super::{
        accept_dispute, add_comment,
        credits::{approve_credit_of, reject_credit_of},
        open_dispute, reject_dispute,
    };
}

/// `POST /api/v1/disputes`: opens a dispute on lines of a closed period.
async fn open(
    State(state): State<AppState>,
    principal: Caller<DisputeParticipate>,
    JsonBody(request): JsonBody<OpenRequest>,
) -> Result<Response, AppError> {
    Ok(respond(open_dispute(&state, &principal, request).await?, StatusCode::CREATED))
}

pub(crate) async fn open_dispute(
    state: &AppState,
    principal: &Principal,
    request: OpenRequest,
) -> Result<DisputeDetail, AppError> {
    principal.require(Capability::DisputeParticipate)?;
    let period = request.period.period();
    let line_ids: Vec<String> = request.line_ids.iter().map(ToString::to_string).collect();
    check_line_ids(&line_ids)?;
    let reason = request.reason.as_str().to_string();
    let day = period.first_day();
    let who = principal.actor();
    let mut tx = principal.begin(&state.db).await?;

    let period_state = store::period_state(&mut tx, day).await?;
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
    let found = store::ledger_lines(&mut tx, day, &line_ids).await?;
    for (i, id) in line_ids.iter().enumerate() {
        if !found.iter().any(|(line, _, _)| line == id) {
            return Err(AppError::unknown(
                format!("line_ids[{i}]"),
                format!("no line {id:?} in the ledger of period {period}"),
            ));
        }
    }
    let mut departments: Vec<Uuid> = found.iter().map(|(_, _, d)| *d).collect();
    departments.sort_unstable();
    departments.dedup();
    let [department] = departments[..] else {
        return Err(AppError::refused(
            "line_ids",
            "the lines belong to different departments; dispute each department's lines separately",
        ));
    };
    let mut currencies: Vec<&str> = found.iter().map(|(_, c, _)| c.as_str()).collect();
    currencies.sort_unstable();
    currencies.dedup();
    if currencies.len() > 1 {
        return Err(AppError::refused(
            "line_ids",
            format!("the lines are in different currencies ({}); dispute them separately", currencies.join(", ")),
        ));
    }

    // One opening at a time per organization: numbers stay dense and a line cannot be disputed twice at once.
    store::lock_openings(&mut tx).await?;
    let busy = store::dispute_holding_lines(&mut tx, day, &line_ids).await?;
    if let Some((number, dispute_state, credit_state, line)) = busy {
        let why = if dispute_state == "open" {
            "which is still open".to_string()
        } else {
            format!("which was accepted with a credit ({})", credit_state.as_deref().unwrap_or("none"))
        };
        return Err(AppError::Conflict(format!("line {line:?} is already disputed in dispute #{number}, {why}")));
    }
    // The counter is organization-level: a department-scoped caller does not see other departments' disputes.
    let number = store::next_number(&mut tx).await?;
    let id = Uuid::new_v4();
    let new = store::NewDispute {
        id,
        number,
        period: day,
        line_ids: &line_ids,
        reason: &reason,
        opened_by: &who,
        department,
    };
    store::insert_dispute(&mut tx, &new).await?;
    let locked =
        Locked { id, number, period: day, line_ids: line_ids.clone(), state: "open".into(), adjustment_id: None };
    record(
        &mut tx,
        &who,
        &locked,
        "opened",
        &reason,
        json!({ "period": period.to_string(), "line_ids": request.line_ids }),
    )
    .await?;
    finish(tx, id).await
}

/// `GET /api/v1/disputes?state=&period=&page=&per_page=`: newest first.
async fn list(
    State(state): State<AppState>,
    principal: Caller<ReadLedger>,
    Params(query): Params<DisputeListParams>,
) -> Result<Json<DisputePage>, AppError> {
    read_disputes(&state, &principal, query).await.map(Json)
}

/// A page of the disputes the caller may see (`GET /api/v1/disputes`).
pub(crate) async fn read_disputes(
    state: &AppState,
    principal: &crate::auth::Principal,
    query: DisputeListParams,
) -> Result<DisputePage, AppError> {
    let state_filter = query.state.map(|s| s.as_str().to_string());
    let period_filter = query.period.map(|p| p.period().first_day());
    let page = query.page.map_or(1, |n| n.get());
    let per_page = query.per_page.map_or(DEFAULT_PER_PAGE, |n| n.get());

    let mut tx = principal.begin(&state.db).await?;
    let total = store::count_disputes(&mut tx, state_filter.as_deref(), period_filter).await?;
    let rows =
        store::dispute_page(&mut tx, state_filter.as_deref(), period_filter, per_page, (page - 1) * per_page).await?;
    tx.commit().await?;
    let items = rows.into_iter().map(DisputeSummary::from).collect();
    Ok(DisputePage { items, total, page, per_page })
}

/// `GET /api/v1/disputes/{id}` (the UUID, or the number).
async fn show(
    State(state): State<AppState>,
    principal: Caller<ReadLedger>,
    PathParams(path): PathParams<DisputePath>,
) -> Result<Json<DisputeDetail>, AppError> {
    read_dispute(&state, &principal, path).await.map(Json)
}

/// One dispute by UUID or number (`GET /api/v1/disputes/{id}`).
pub(crate) async fn read_dispute(
    state: &AppState,
    principal: &crate::auth::Principal,
    path: DisputePath,
) -> Result<DisputeDetail, AppError> {
    let key = path.id.into_inner();
    let mut tx = principal.begin(&state.db).await?;
    let id = resolve_id(&mut tx, &key).await?;
    let detail = load(&mut tx, id).await?.ok_or_else(|| AppError::NotFound(format!("no dispute {key:?}")))?;
    tx.commit().await?;
    Ok(detail)
}

/// `POST /api/v1/disputes/{id}/comments`: adds to the discussion while the dispute is open.
async fn comment(
    State(state): State<AppState>,
    principal: Caller<DisputeParticipate>,
    PathParams(path): PathParams<DisputePath>,
    JsonBody(request): JsonBody<CommentRequest>,
) -> Result<Response, AppError> {
    Ok(respond(add_comment(&state, &principal, &path.id, request).await?, StatusCode::CREATED))
}

pub(crate) async fn add_comment(
    state: &AppState,
    principal: &Principal,
    key: &str,
    request: CommentRequest,
) -> Result<DisputeDetail, AppError> {
    principal.require(Capability::DisputeParticipate)?;
    let text = request.body.into_inner();
    let mut tx = principal.begin(&state.db).await?;
    let dispute = lock(&mut tx, key).await?;
    if dispute.state != "open" {
        return Err(AppError::Conflict(format!(
            "dispute #{} is {}: comments are taken only while a dispute is open (its history stays readable)",
            dispute.number, dispute.state
        )));
    }
    record(&mut tx, &principal.actor(), &dispute, "commented", &text, json!({})).await?;
    finish(tx, dispute.id).await
}

/// `POST /api/v1/disputes/{id}/accept`: accepts with a credit that finance must then approve.
async fn accept(
    State(state): State<AppState>,
    principal: Caller<DisputeResolve>,
    PathParams(path): PathParams<DisputePath>,
    JsonBody(request): JsonBody<AcceptRequest>,
) -> Result<Response, AppError> {
    Ok(respond(accept_dispute(&state, &principal, &path.id, request).await?, StatusCode::OK))
}

pub(crate) async fn accept_dispute(
    state: &AppState,
    principal: &Principal,
    key: &str,
    request: AcceptRequest,
) -> Result<DisputeDetail, AppError> {
    principal.require(Capability::DisputeResolve)?;
    let reason = request.reason.as_str().to_string();
    let credit = credit_of(&request)?;
    let who = principal.actor();
    let mut tx = principal.begin(&state.db).await?;
    let dispute = lock(&mut tx, key).await?;
    require_open(&dispute, "accepted")?;

    let total = store::lines_total(&mut tx, dispute.period, &dispute.line_ids).await?;
    let first = dispute.line_ids.first().ok_or_else(|| AppError::Internal("a dispute without lines".into()))?;
    let line = store::line_owner(&mut tx, dispute.period, first).await?;
    let (Some(total), Some((tenant, department, gpu_class, currency))) = (total, line) else {
        return Err(AppError::Internal(format!("the lines of dispute #{} are missing", dispute.number)));
    };
    let total = Decimal::parse(&total).map_err(|e| AppError::Internal(format!("disputed total {total:?}: {e}")))?;
    if credit > total {
        return Err(AppError::refused(
            "credit_amount",
            format!("{credit} {currency} is more than the disputed lines' total of {total} {currency}"),
        ));
    }

    let adjustment = Uuid::new_v4();
    let credit_text = credit.to_string();
    let new = store::NewCredit {
        adjustment,
        tenant,
        department,
        gpu_class: &gpu_class,
        amount: &credit_text,
        currency: &currency,
        corrects: first,
        dispute: dispute.id,
        reason: &reason,
        created_by: &who,
    };
    store::insert_credit(&mut tx, &new).await?;
    store::mark_accepted(&mut tx, dispute.id, &who, &reason, &credit_text, adjustment).await?;
    record(
        &mut tx,
        &who,
        &dispute,
        "accepted",
        &reason,
        json!({ "credit_amount": credit_text, "currency": currency, "adjustment_id": adjustment }),
    )
    .await?;
    finish(tx, dispute.id).await
}

/// `POST /api/v1/disputes/{id}/reject`: rejects with a reason.
async fn reject(
    State(state): State<AppState>,
    principal: Caller<DisputeResolve>,
    PathParams(path): PathParams<DisputePath>,
    JsonBody(request): JsonBody<ReasonRequest>,
) -> Result<Response, AppError> {
    Ok(respond(reject_dispute(&state, &principal, &path.id, request).await?, StatusCode::OK))
}

pub(crate) async fn reject_dispute(
    state: &AppState,
    principal: &Principal,
    key: &str,
    request: ReasonRequest,
) -> Result<DisputeDetail, AppError> {
    principal.require(Capability::DisputeResolve)?;
    let reason = request.reason.into_inner();
    let who = principal.actor();
    let mut tx = principal.begin(&state.db).await?;
    let dispute = lock(&mut tx, key).await?;
    require_open(&dispute, "rejected")?;
    store::mark_rejected(&mut tx, dispute.id, &who, &reason).await?;
    record(&mut tx, &who, &dispute, "rejected", &reason, json!({})).await?;
    finish(tx, dispute.id).await
}
