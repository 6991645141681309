//! The notifier: every tick, for each organization with an active webhook, it checks the conditions that are not
//! raised by a request (a budget the month-end forecast passes; idle reservations) and queues their events once,
//! then delivers what is due. A delivery is leased before it is sent (`FOR UPDATE SKIP LOCKED` and a later
//! `next_attempt_at`), so two replicas never send the same try; a failed try waits 30 s, 2 min, 10 min, 30 min,
//! 2 h, then 6 h, and after 7 tries the delivery is `failed` (shown in the portal's delivery log).

use std::{sync::Arc, time::Duration};

use gpuledger_core::{Period, ids::OrgId};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{OutboundPolicy, store};
use crate::{db::Database, error::AppError, notify};

/// Tries before a delivery is given up.
pub const MAX_ATTEMPTS: i32 = 7;
/// Waits after the 1st, 2nd, … failed try, in seconds.
const BACKOFF_SECS: [i64; 6] = [30, 120, 600, 1800, 7200, 21600];
/// How long a try holds its delivery (longer than a request may take).
const LEASE: time::Duration = time::Duration::seconds(60);
/// How often an organization's conditions (a month's forecast, the idle analysis: seconds of work at 10,000 GPUs)
/// are checked when nothing changed; a budget set since the last check is looked at on the next round.
pub const CONDITIONS_EVERY: time::Duration = time::Duration::minutes(5);

/// The notifier's settings.
#[derive(Debug, Clone, Copy)]
pub struct NotifyOptions {
    /// Time between rounds (`--notify-interval-secs`).
    pub tick: Duration,
    /// Where webhooks may point.
    pub policy: OutboundPolicy,
}

/// The running notifier; dropping it stops it.
pub struct Notifier(tokio::task::JoinHandle<()>);

impl Drop for Notifier {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the notifier.
pub fn spawn(db: Database, options: NotifyOptions) -> Notifier {
    let client = client(options.policy);
    Notifier(tokio::spawn(async move {
        let mut tick = tokio::time::interval(options.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checked = std::collections::HashMap::new();
        loop {
            tick.tick().await;
            run_once(&db, &client, options.policy, OffsetDateTime::now_utc(), &mut checked).await;
        }
    }))
}

/// Whether `org`'s conditions are due: never checked, checked [`CONDITIONS_EVERY`] ago, or a budget was set since.
async fn conditions_due(db: &Database, org: OrgId, last: Option<OffsetDateTime>, now: OffsetDateTime) -> bool {
    let Some(last) = last else { return true };
    if now - last >= CONDITIONS_EVERY {
        return true;
    }
    let Ok(mut tx) = db.begin_org(org).await else { return true };
    let changed = store::budget_created_since(&mut tx, last).await;
    let _ = tx.commit_quiet().await;
    changed.unwrap_or(true)
}

/// One round over every organization with webhooks; errors are logged per organization and never stop the rest.
/// `checked` remembers when each organization's conditions were last checked.
pub async fn run_once(
    db: &Database,
    client: &reqwest::Client,
    policy: OutboundPolicy,
    now: OffsetDateTime,
    checked: &mut std::collections::HashMap<OrgId, OffsetDateTime>,
) {
    let orgs = match db.cross_org_maintenance().notify_orgs().await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "notifier: listing organizations failed");
            return;
        }
    };
    for org in orgs {
        if conditions_due(db, org, checked.get(&org).copied(), now).await {
            checked.insert(org, now);
            if let Err(e) = check_conditions(db, org, now).await {
                tracing::warn!(%org, error = %e, "notifier: checking budgets and idle reservations failed");
            }
        }
        if let Err(e) = deliver_due(db, org, client, policy).await {
            tracing::warn!(%org, error = %e, "notifier: delivering failed");
        }
    }
}

/// The HTTP client of deliveries: no redirects, 10 s per try, names resolved by the policy.
pub fn client(policy: OutboundPolicy) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .user_agent(concat!("gpuledger-webhooks/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(crate::auth::net::GuardedResolver(policy)))
        .build()
        .unwrap_or_default()
}

/// Queues `budget.forecast_exceeded` and `idle.reservation` for what is true now (once per condition).
pub async fn check_conditions(db: &Database, org: OrgId, now: OffsetDateTime) -> Result<u64, AppError> {
    let mut tx = db.begin_org(org).await?;
    let mut queued = 0;
    let period = Period::containing(now);
    if notify::wanted(&mut tx, "budget.forecast_exceeded").await? {
        let any = store::month_has_budget(&mut tx, period.first_day()).await?;
        let forecast = if any {
            match crate::budgets::forecast::compute(&mut tx, period, now).await {
                Ok(f) => Some(f),
                // No approved policy covers the month: nothing to forecast.
                Err(AppError::Conflict(_)) => None,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        let currency = forecast.as_ref().map(|f| f.currency.clone()).unwrap_or_default();
        let over: Vec<gpuledger_api::foresight::ForecastRow> = match forecast {
            Some(f) => f.departments.into_iter().chain(f.tenants).filter(|r| r.over_budget).collect(),
            None => Vec::new(),
        };
        for row in over {
            let budget = row.budget.clone().unwrap_or_default();
            let who = row.tenant.clone().unwrap_or_else(|| row.department.clone());
            let target = row.tenant_id.clone().unwrap_or_else(|| row.department_id.clone());
            queued += notify::enqueue(
                &mut tx,
                "budget.forecast_exceeded",
                // Once per budget amount: a raised budget that is passed again notifies again.
                &format!("budget/{period}/{target}/{budget}"),
                &format!(
                    "{who} is forecast to spend {} {currency} in {period}, over its budget of {budget} {currency} \
                     (to date {}; {})",
                    row.forecast, row.to_date, row.method
                ),
                json!({
                    "period": period.to_string(),
                    "department": row.department,
                    "department_id": row.department_id,
                    "tenant": row.tenant,
                    "tenant_id": row.tenant_id,
                    "to_date": row.to_date,
                    "forecast": row.forecast,
                    "budget": row.budget,
                    "currency": currency,
                    "method": row.method,
                    "confidence": row.confidence,
                    "explanation": row.explanation,
                }),
                now,
            )
            .await?;
        }
    }
    if notify::wanted(&mut tx, "idle.reservation").await? {
        let (list, _) = crate::analytics::idle_now(&mut tx, now).await?;
        for item in &list.items {
            queued += notify::enqueue(
                &mut tx,
                "idle.reservation",
                &format!("idle/{}/{}/{}", item.cluster, item.allocation_id, item.idle_since),
                &format!(
                    "{} in {} ({}) has held {} GPU(s) idle since {} ({} h)",
                    item.holder,
                    item.cluster,
                    item.tenant.as_deref().unwrap_or("no tenant"),
                    item.fraction,
                    item.idle_since,
                    item.idle_hours
                ),
                serde_json::to_value(item).map_err(|e| AppError::Internal(e.to_string()))?,
                now,
            )
            .await?;
        }
    }
    // Queued events change no figure.
    tx.commit_quiet().await?;
    Ok(queued)
}

/// Sends the organization's due deliveries (at most 50 a round).
pub async fn deliver_due(
    db: &Database,
    org: OrgId,
    client: &reqwest::Client,
    policy: OutboundPolicy,
) -> Result<u64, AppError> {
    let mut tx = db.begin_org(org).await?;
    let due = store::lock_due_deliveries(&mut tx).await?;
    if due.is_empty() {
        tx.commit_quiet().await?;
        return Ok(0);
    }
    let ids: Vec<Uuid> = due.iter().map(|d| d.delivery_id).collect();
    store::lease_deliveries(&mut tx, &ids, LEASE.as_seconds_f64()).await?;
    tx.commit_quiet().await?;

    let mut delivered = 0;
    for store::Due { delivery_id: id, event, payload, attempts, url, secret, format } in due {
        let outcome = send(client, policy, id, &event, &payload, &url, &secret, &format).await;
        let attempts = attempts + 1;
        let mut tx = db.begin_org(org).await?;
        match outcome {
            Ok(status) => {
                delivered += 1;
                store::mark_delivered(&mut tx, id, attempts, i32::from(status)).await?;
            }
            Err((status, error)) => {
                let give_up = attempts >= MAX_ATTEMPTS;
                let wait = BACKOFF_SECS[usize::try_from(attempts - 1).unwrap_or(0).min(BACKOFF_SECS.len() - 1)];
                tracing::info!(%org, delivery = %id, attempts, give_up, error, "webhook delivery failed");
                store::mark_attempt_failed(&mut tx, id, attempts, status.map(i32::from), give_up, &error, wait as f64)
                    .await?;
            }
        }
        tx.commit_quiet().await?;
    }
    Ok(delivered)
}

/// The body sent for `payload` in `format` (`slack`: `{"text"}`; else the event with its delivery ID).
pub fn body(id: Uuid, payload: &Value, format: &str) -> Vec<u8> {
    let value = if format == "slack" {
        let summary = payload["summary"].as_str().unwrap_or_default();
        let event = payload["event"].as_str().unwrap_or_default();
        json!({ "text": format!("GPU Ledger · {event}: {summary}") })
    } else {
        let mut v = payload.clone();
        if let Some(o) = v.as_object_mut() {
            o.insert("delivery_id".into(), json!(id.to_string()));
        }
        v
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

/// `sha256=<hex>` of HMAC-SHA256(`secret`, `body`).
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        // HMAC takes keys of any length; this branch cannot be reached.
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[allow(clippy::too_many_arguments)]
async fn send(
    client: &reqwest::Client,
    policy: OutboundPolicy,
    id: Uuid,
    event: &str,
    payload: &Value,
    url: &str,
    secret: &str,
    format: &str,
) -> Result<u16, (Option<u16>, String)> {
    // Checked again at each try: an address literal never reaches the resolver's check.
    policy.check_url(url).map_err(|e| (None, format!("url {e}")))?;
    let body = body(id, payload, format);
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-gpuledger-event", event)
        .header("x-gpuledger-delivery", id.to_string())
        .header("x-gpuledger-signature", signature(secret, &body))
        .body(body)
        .send()
        .await
        .map_err(|e| (None, e.to_string()))?;
    let status = response.status().as_u16();
    if response.status().is_success() {
        Ok(status)
    } else {
        Err((Some(status), format!("the receiver answered {status}")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_body() {
        // RFC 4231, test case 2.
        let sig = signature("Jefe", b"what do ya want for nothing?");
        assert_eq!(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn slack_gets_text_and_json_gets_the_event_with_its_delivery() {
        let id = Uuid::nil();
        let payload = json!({"event": "period.closed", "summary": "2026-11 closed", "data": {"period": "2026-11"}});
        let slack: Value = serde_json::from_slice(&body(id, &payload, "slack")).unwrap();
        assert_eq!(slack, json!({"text": "GPU Ledger · period.closed: 2026-11 closed"}));
        let plain: Value = serde_json::from_slice(&body(id, &payload, "json")).unwrap();
        assert_eq!(plain["delivery_id"], id.to_string());
        assert_eq!(plain["data"]["period"], "2026-11");
    }
}
