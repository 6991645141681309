//! Webhooks: `POST/GET /api/v1/notifications/webhooks`, `GET /api/v1/notifications/webhooks/{id}/deliveries`,
//! `POST /api/v1/notifications/webhooks/{id}/disable` (admin or finance role; audited).
//!
//! Events (`budget.forecast_exceeded`, `idle.reservation`, `period.closed`, `dispute.opened`, `dispute.resolved`)
//! are queued by [`crate::notify::enqueue`] in the transaction that makes them true, and delivered by the
//! [`worker`]: a JSON body (or a Slack-compatible `{"text"}` one) signed with the webhook's secret
//! (`X-GPULedger-Signature: sha256=<hex HMAC-SHA256 of the body>`), retried with backoff, each try in the delivery
//! log. Targets follow the identity provider's rule: https only, never a loopback, private or link-local address,
//! unless the operator allows it ([`OutboundPolicy`]); `demo` allows loopback.

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, post},
};
use gpuledger_api::{
    Items,
    foresight::{CreatedWebhook, Delivery, Webhook, WebhookBody, WebhookFormat},
    params::IdPath,
    states::DeliveryState,
};
use serde_json::json;
use uuid::Uuid;

use crate::{
    db::OrgTx,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, JsonBody, ManagePolicy, PathParams},
    notify::EVENTS,
    state::AppState,
};

mod store;
pub mod worker;

pub use crate::limits::OutboundPolicy;

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/notifications/webhooks", list),
        described("post", "/api/v1/notifications/webhooks", create),
        described("get", "/api/v1/notifications/webhooks/{id}/deliveries", deliveries),
        described("post", "/api/v1/notifications/webhooks/{id}/disable", disable),
    ]
}

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/notifications/webhooks", get(list).post(create))
        .route("/api/v1/notifications/webhooks/{id}/deliveries", get(deliveries))
        .route("/api/v1/notifications/webhooks/{id}/disable", post(disable))
}

fn new_secret() -> String {
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    format!("whsec_{}", hex::encode(bytes))
}

async fn create(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<WebhookBody>,
) -> Result<(StatusCode, Json<CreatedWebhook>), AppError> {
    let url = body.url.as_str().to_string();
    // The URL's form is the contract's (422, read by `WebhookUrl`); where it may point is the operator's rule.
    state.limits.outbound.check(&url).await.map_err(|reason| AppError::refused("url", reason))?;
    let mut events: Vec<String> = Vec::new();
    for e in body.events.iter().map(|e| e.as_str()) {
        debug_assert!(EVENTS.contains(&e));
        if !events.iter().any(|x| x == e) {
            events.push(e.to_string());
        }
    }
    let format = match body.format {
        None | Some(WebhookFormat::Json) => "json",
        Some(WebhookFormat::Slack) => "slack",
    };
    let secret = new_secret();
    let mut tx = p.begin(&state.db).await?;
    if store::active_webhooks(&mut tx).await? >= 20 {
        return Err(AppError::Conflict("an organization has at most 20 active webhooks; disable one first".into()));
    }
    let id = store::insert_webhook(&mut tx, &url, &events, format, &secret, &p.actor()).await?;
    tx.audit_by(
        &p,
        "webhook.create",
        &format!("webhook:{id}"),
        "",
        json!({ "url": url, "events": events, "format": format }),
    )
    .await?;
    let webhook =
        webhooks(&mut tx, Some(id)).await?.into_iter().next().ok_or_else(|| AppError::NotFound("webhook".into()))?;
    tx.commit_quiet().await?;
    Ok((StatusCode::CREATED, Json(CreatedWebhook { webhook, secret })))
}

async fn list(State(state): State<AppState>, p: Caller<ManagePolicy>) -> Result<Json<Items<Webhook>>, AppError> {
    read_webhooks(&state, &p).await.map(Json)
}

/// The organization's webhooks (`GET /api/v1/notifications/webhooks`).
pub(crate) async fn read_webhooks(state: &AppState, p: &crate::auth::Principal) -> Result<Items<Webhook>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let items = webhooks(&mut tx, None).await?;
    tx.commit_quiet().await?;
    Ok(Items { items })
}

async fn disable(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    PathParams(path): PathParams<IdPath>,
) -> Result<Json<Webhook>, AppError> {
    let id = path.id.uuid();
    let mut tx = p.begin(&state.db).await?;
    if store::disable_webhook(&mut tx, id).await? == 0 {
        return Err(AppError::NotFound(format!("no active webhook {id}")));
    }
    // What was still waiting is not sent after the webhook is off.
    store::fail_pending_deliveries(&mut tx, id).await?;
    tx.audit_by(&p, "webhook.disable", &format!("webhook:{id}"), "", json!({})).await?;
    let webhook =
        webhooks(&mut tx, Some(id)).await?.into_iter().next().ok_or_else(|| AppError::NotFound("webhook".into()))?;
    tx.commit_quiet().await?;
    Ok(Json(webhook))
}

/// The delivery log of one webhook, newest first (the last 200).
async fn deliveries(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    PathParams(path): PathParams<IdPath>,
) -> Result<Json<Items<Delivery>>, AppError> {
    read_deliveries(&state, &p, path).await.map(Json)
}

/// One webhook's delivery log (`GET /api/v1/notifications/webhooks/{id}/deliveries`).
pub(crate) async fn read_deliveries(
    state: &AppState,
    p: &crate::auth::Principal,
    path: IdPath,
) -> Result<Items<Delivery>, AppError> {
    let id = path.id.uuid();
    let mut tx = p.begin(&state.db).await?;
    let items = delivery_log(&mut tx, id).await?;
    tx.commit_quiet().await?;
    Ok(Items { items })
}

/// The organization's webhooks (or one), active first, newest first, with their delivery counts.
pub(crate) async fn webhooks(tx: &mut OrgTx, one: Option<Uuid>) -> Result<Vec<Webhook>, AppError> {
    let rows = store::webhooks(tx, one).await?;
    Ok(rows
        .into_iter()
        .map(|(id, url, events, format, by, at, disabled, delivered, pending, failed)| Webhook {
            webhook_id: id.to_string(),
            url,
            events,
            format,
            created_by: by,
            created_at: gpuledger_core::time_fmt::rfc3339(at),
            disabled_at: disabled.map(gpuledger_core::time_fmt::rfc3339),
            delivered: u64::try_from(delivered).unwrap_or(0),
            pending: u64::try_from(pending).unwrap_or(0),
            failed: u64::try_from(failed).unwrap_or(0),
        })
        .collect())
}

/// One webhook's last 200 deliveries, newest first.
pub(crate) async fn delivery_log(tx: &mut OrgTx, id: Uuid) -> Result<Vec<Delivery>, AppError> {
    if !store::webhook_exists(tx, id).await? {
        return Err(AppError::NotFound(format!("no webhook {id}")));
    }
    let rows = store::deliveries(tx, id).await?;
    Ok(rows
        .into_iter()
        .map(|r| Delivery {
            delivery_id: r.delivery_id.to_string(),
            next_attempt_at: (r.state.0 == DeliveryState::Pending)
                .then(|| gpuledger_core::time_fmt::rfc3339(r.next_attempt_at)),
            event: r.event,
            state: r.state.0,
            attempts: u32::try_from(r.attempts).unwrap_or(0),
            last_status: r.last_status.and_then(|s| u16::try_from(s).ok()),
            last_error: r.last_error,
            created_at: gpuledger_core::time_fmt::rfc3339(r.created_at),
            delivered_at: r.delivered_at.map(gpuledger_core::time_fmt::rfc3339),
            payload: r.payload,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn targets_follow_the_issuer_rule() {
        let strict = OutboundPolicy::default();
        assert!(strict.check_url("https://hooks.example.com/x").is_ok());
        for (url, why) in [
            ("http://hooks.example.com/x", "https"),
            ("http://127.0.0.1:9000/hook", "https"),
            ("https://127.0.0.1/hook", "loopback"),
            ("https://169.254.169.254/latest", "link-local"),
            ("https://10.0.0.5/hook", "private"),
            ("https://[::1]/hook", "loopback"),
            ("https://user:pw@hooks.example.com/", "credentials"),
            ("ftp://hooks.example.com/", "https"),
            ("not a url", "URL"),
        ] {
            let e = strict.check_url(url).unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
        let demo = OutboundPolicy { allow_loopback: true, allow_private: false };
        assert!(demo.check_url("http://127.0.0.1:9000/hook").is_ok());
        assert!(demo.check_url("http://localhost:9000/hook").is_ok());
        assert!(demo.check_url("https://10.0.0.5/hook").is_err(), "loopback is not private");
        let private = OutboundPolicy { allow_loopback: false, allow_private: true };
        assert!(private.check_url("https://10.0.0.5/hook").is_ok());
        assert!(private.check_url("http://10.0.0.5/hook").is_err(), "still https");
    }

    #[test]
    fn secrets_are_long_and_different() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with("whsec_") && a.len() == 6 + 64);
    }
}
