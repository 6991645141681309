//! Finance's decision on an accepted dispute's credit: approve it (never by whoever accepted the dispute) or reject it.

use axum::{extract::State, http::StatusCode, response::Response};
use gpuledger_api::disputes::DisputeDetail;
use gpuledger_api::params::DisputePath;
use serde_json::json;

use super::{
    requests::{ApprovalRequest, ReasonRequest},
    respond,
    store::{self, finish, lock, record},
};
use crate::{
    auth::{Capability, Principal},
    error::AppError,
    http::{Caller, CreditApprove, JsonBody, OptionalJsonBody, PathParams},
    state::AppState,
};

/// Finance's decision on an accepted dispute's credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreditDecision {
    Approve,
    Reject,
}

async fn decide_credit(
    state: &AppState,
    principal: &Principal,
    key: &str,
    reason: String,
    decision: CreditDecision,
) -> Result<DisputeDetail, AppError> {
    principal.require(Capability::CreditApprove)?;
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
    let credit = store::lock_credit(&mut tx, adjustment).await?;
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
        tx.audit_by(
            principal,
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
            store::mark_credit_approved(&mut tx, adjustment, &who).await?;
            "credit_approved"
        }
        CreditDecision::Reject => {
            store::mark_credit_rejected(&mut tx, adjustment).await?;
            "credit_rejected"
        }
    };
    record(&mut tx, &who, &dispute, action, &reason, json!({ "adjustment_id": adjustment, "amount": amount })).await?;
    finish(tx, dispute.id).await
}

/// `POST /api/v1/disputes/{id}/credit/approve`: finance approves the credit; the next close applies it.
pub(super) async fn approve_credit(
    State(state): State<AppState>,
    principal: Caller<CreditApprove>,
    PathParams(path): PathParams<DisputePath>,
    OptionalJsonBody(request): OptionalJsonBody<ApprovalRequest>,
) -> Result<Response, AppError> {
    Ok(respond(approve_credit_of(&state, &principal, &path.id, request).await?, StatusCode::OK))
}

/// Finance approves an accepted dispute's credit (someone other than who accepted it).
pub(crate) async fn approve_credit_of(
    state: &AppState,
    principal: &Principal,
    key: &str,
    request: ApprovalRequest,
) -> Result<DisputeDetail, AppError> {
    decide_credit(state, principal, key, request.reason.into_inner(), CreditDecision::Approve).await
}

/// `POST /api/v1/disputes/{id}/credit/reject`: finance refuses the credit (the dispute stays accepted).
pub(super) async fn reject_credit(
    State(state): State<AppState>,
    principal: Caller<CreditApprove>,
    PathParams(path): PathParams<DisputePath>,
    JsonBody(request): JsonBody<ReasonRequest>,
) -> Result<Response, AppError> {
    Ok(respond(reject_credit_of(&state, &principal, &path.id, request).await?, StatusCode::OK))
}

/// Finance refuses an accepted dispute's credit (the dispute stays accepted).
pub(crate) async fn reject_credit_of(
    state: &AppState,
    principal: &Principal,
    key: &str,
    request: ReasonRequest,
) -> Result<DisputeDetail, AppError> {
    decide_credit(state, principal, key, request.reason.into_inner(), CreditDecision::Reject).await
}
