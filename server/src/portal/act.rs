//! How a portal form acts: as the signed-in person, through its feature's service — the function the REST
//! handler calls — with the form's fields read as the API's typed body, so the checks and the field-named errors
//! are the API's own. Nothing goes through the HTTP router again.

use std::future::Future;

use axum::{
    http::StatusCode,
    response::{Html, IntoResponse, Redirect, Response},
};

use crate::{
    auth::Principal,
    error::AppError,
    http::{Caller, Need},
};

/// Runs `run` with the caller and the form's `request` read as the body type `B`; on success redirects to
/// `next(answer)`, otherwise shows the refusal with a way `back` (a visitor without a session signs in first).
pub(super) async fn act<N, B, R, Fut>(
    caller: Result<Caller<N>, AppError>,
    back: &str,
    request: serde_json::Value,
    run: impl FnOnce(Principal, B) -> Fut,
    next: impl FnOnce(&R) -> String,
) -> Response
where
    N: Need,
    B: serde::de::DeserializeOwned,
    Fut: Future<Output = Result<R, AppError>>,
{
    let principal = match caller {
        Ok(c) => c.into_inner(),
        Err(e) => return refused(e, back),
    };
    let body = serde_json::to_vec(&request)
        .map_err(|e| AppError::Internal(format!("a form's body: {e}")))
        .and_then(|bytes| crate::http::json_body::<B>(&bytes));
    let answer = match body {
        Ok(body) => run(principal, body).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(answer) => Redirect::to(&next(&answer)).into_response(),
        Err(e) => refused(e, back),
    }
}

/// A refusal as the portal shows it: sign in first (401); otherwise the problem's status and detail, with a way
/// back.
pub(super) fn refused(e: AppError, back: &str) -> Response {
    if matches!(e, AppError::Unauthorized) {
        return Redirect::to(&format!("/login?next={back}")).into_response();
    }
    refused_with(e.status(), &e.detail(), back)
}

/// A refusal page with `status`.
pub(super) fn refused_with(status: StatusCode, detail: &str, back: &str) -> Response {
    (status, Html(gpuledger_web::account::form_error_document(detail, back))).into_response()
}
