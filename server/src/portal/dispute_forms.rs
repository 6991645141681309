//! The dispute forms: opening a dispute on a closed month's lines, and what may happen to it (a comment,
//! acceptance, rejection, finance's decision on its credit), each through the dispute service.

use axum::{extract::State, http::HeaderMap, response::Response};
use gpuledger_api::input::Line;
use serde::Deserialize;

use super::{act::act, field, pairs};
use crate::{
    disputes::service as disputes,
    error::AppError,
    http::{Caller, PathParams, ReadLedger},
    state::AppState,
};

/// `/ui/disputes/{id}/{action}`: a dispute (UUID or number) and what the form does to it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DisputeActionPath {
    id: Line<100>,
    action: DisputeAction,
}

/// The dispute forms.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum DisputeAction {
    Comment,
    Accept,
    Reject,
    CreditApprove,
    CreditReject,
}

pub(super) async fn open_dispute_form(
    State(state): State<AppState>,
    caller: Result<Caller<ReadLedger>, AppError>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let lines: Vec<String> = f.iter().filter(|(k, _)| k == "line").map(|(_, v)| v.clone()).collect();
    let period = field(&f, "period");
    let back = headers
        .get(axum::http::header::REFERER)
        .and_then(|r| r.to_str().ok())
        .and_then(|r| r.find("/tenants/").map(|i| r[i..].to_string()))
        .unwrap_or_else(|| "/departments".into());
    let request = serde_json::json!({"period": period, "line_ids": lines, "reason": field(&f, "reason")});
    act(
        caller,
        &back,
        request,
        |p, body| async move { disputes::open_dispute(&state, &p, body).await },
        |d: &gpuledger_api::disputes::DisputeDetail| format!("/disputes/{}", d.dispute.number),
    )
    .await
}

/// A dispute's forms: each action's service checks who may (a participant comments, a resolver accepts or rejects,
/// finance decides a credit).
pub(super) async fn dispute_action_form(
    State(state): State<AppState>,
    caller: Result<Caller<ReadLedger>, AppError>,
    PathParams(target): PathParams<DisputeActionPath>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let id = target.id.into_inner();
    let back = format!("/disputes/{id}");
    let reason = || serde_json::json!({"reason": field(&f, "reason")});
    let next = |_: &gpuledger_api::disputes::DisputeDetail| back.clone();
    match target.action {
        DisputeAction::Comment => {
            let request = serde_json::json!({"body": field(&f, "body")});
            act(caller, &back, request, |p, b| async move { disputes::add_comment(&state, &p, &id, b).await }, next)
                .await
        }
        DisputeAction::Accept => {
            let request =
                serde_json::json!({"reason": field(&f, "reason"), "credit_amount": field(&f, "credit_amount")});
            act(caller, &back, request, |p, b| async move { disputes::accept_dispute(&state, &p, &id, b).await }, next)
                .await
        }
        DisputeAction::Reject => {
            act(caller, &back, reason(), |p, b| async move { disputes::reject_dispute(&state, &p, &id, b).await }, next)
                .await
        }
        DisputeAction::CreditApprove => {
            act(
                caller,
                &back,
                reason(),
                |p, b| async move { disputes::approve_credit_of(&state, &p, &id, b).await },
                next,
            )
            .await
        }
        DisputeAction::CreditReject => {
            act(
                caller,
                &back,
                reason(),
                |p, b| async move { disputes::reject_credit_of(&state, &p, &id, b).await },
                next,
            )
            .await
        }
    }
}
