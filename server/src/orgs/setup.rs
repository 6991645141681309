//! `GET /setup/{token}`: the first admin's way in. `org create` prints a one-time link; opening it signs its holder
//! in as the organization's admin for one browser session and sends them to the sign-in settings, where they
//! configure the identity provider and the group → role mappings. After that, people sign in through the provider.
//!
//! The link is single use (consumed in the transaction that creates the session), valid 24 hours, and only its
//! SHA-256 is stored. A used or expired link answers 410 with a page that says so, an unknown one 404: never a
//! success twice. Attempts are rate limited like sign-ins and audited in the organization's log.

use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{Html, IntoResponse, Redirect, Response},
    routing::get,
};
use gpuledger_core::time_fmt::rfc3339;
use serde_json::json;

use super::store::{self, LinkUse};
use crate::{
    auth::{
        Role, oidc,
        session::{self, NewSession},
        source,
    },
    error::AppError,
    state::AppState,
};

/// Where the first admin lands: the sign-in settings (identity provider, role mappings).
pub const LANDING: &str = "/admin/identity";

/// `GET /setup/{token}`.
pub fn router() -> Router<AppState> {
    Router::new().route("/setup/{token}", get(use_link))
}

fn page(status: StatusCode, title: &str, message: &str) -> Response {
    let mut response =
        (status, Html(gpuledger_web::account::notice_document(title, message, ("/login", "Go to sign-in"))))
            .into_response();
    // The link is a credential: no cache keeps the answer, no referrer carries it.
    response.headers_mut().insert(header::REFERRER_POLICY, axum::http::HeaderValue::from_static("no-referrer"));
    response
}

fn unknown() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Unknown setup link",
        "This setup link is not known. Check that you copied all of it, or ask your operator for a new one \
         (gpuledger-server org setup-link SLUG).",
    )
}

async fn use_link(State(state): State<AppState>, headers: HeaderMap, Path(token): Path<String>) -> Response {
    match consume(&state, &headers, &token).await {
        Ok(response) => response,
        Err(AppError::Suspended(slug)) => page(
            StatusCode::FORBIDDEN,
            "Organization suspended",
            &format!(
                "Organization {slug:?} is suspended by its operator: sign-in and setup links are refused until it is \
                 resumed. Its data is kept."
            ),
        ),
        Err(e @ AppError::TooManyRequests(_)) => e.into_response(),
        Err(e) => {
            tracing::error!(error = %e, "setup link failed");
            page(StatusCode::INTERNAL_SERVER_ERROR, "Setup failed", "The setup link could not be used; try again.")
        }
    }
}

async fn consume(state: &AppState, headers: &HeaderMap, token: &str) -> Result<Response, AppError> {
    let from = source(headers);
    state.auth.limits.check("setup", &from)?;
    let Some(org) = store::setup_token_org(token) else {
        return Ok(unknown());
    };
    let mut tx = state.db.begin_org(org).await?;
    if crate::auth::store::state(&mut tx).await?.is_none() {
        return Ok(unknown());
    }
    super::ensure_active(&mut tx).await?;
    let link = match store::use_setup_link(&mut tx, token, &from).await? {
        LinkUse::Consumed(link) => link,
        refused => {
            let (reason, title, message) = match refused {
                LinkUse::Used(at) => (
                    "used",
                    "Setup link already used",
                    format!(
                        "This setup link was already used ({} UTC). It works once: sign in through your \
                         organization's identity provider, or ask your operator for a new link.",
                        rfc3339(at)
                    ),
                ),
                LinkUse::Expired(at) => (
                    "expired",
                    "Setup link expired",
                    format!(
                        "This setup link expired ({} UTC) before it was used. Ask your operator for a new one \
                         (gpuledger-server org setup-link SLUG).",
                        rfc3339(at)
                    ),
                ),
                _ => return Ok(unknown()),
            };
            tx.audit_from("anonymous", &from, "setup.refused", "setup_link", reason, json!({})).await?;
            tx.commit_quiet().await?;
            return Ok(page(StatusCode::GONE, title, &message));
        }
    };
    // The first admin: a local account of this link, admin for this one session.
    let subject = format!("setup:{link}");
    let user_id = oidc::upsert_user(&mut tx, &subject, None, "First administrator (setup link)").await?;
    let new = NewSession {
        user_id,
        roles: vec![Role::Admin],
        departments: Vec::new(),
        id_token_hint: None,
        source: from.clone(),
    };
    let value = session::create(&mut tx, &state.auth.sessions, &new).await?;
    tx.audit_from(&format!("user:{subject}"), &from, "setup.used", "setup_link", "", json!({"link_id": link})).await?;
    tx.audit_from(&format!("user:{subject}"), &from, "login.success", "setup", "", json!({"roles": ["admin"]})).await?;
    tx.commit_quiet().await?;
    let secure = state.auth.sessions.secure(headers);
    let cookie = session::set_cookie(secure, session::SECURE_COOKIE, session::PLAIN_COOKIE, &value, None);
    let mut response = Redirect::to(LANDING).into_response();
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response.headers_mut().insert(header::REFERRER_POLICY, axum::http::HeaderValue::from_static("no-referrer"));
    Ok(response)
}
