//! Queuing notification events (shared by the features that raise them: close, disputes, and the notifier's own
//! budget and idle checks). An event becomes one pending delivery per active webhook subscribed to it, in the
//! caller's transaction — so it is sent exactly when what it reports is committed, and a condition seen again
//! (same `key`) is never queued twice. The `notifications` feature delivers them.

use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::{db::OrgTx, error::AppError};

mod store;

/// The events a webhook may subscribe to.
pub const EVENTS: [&str; 5] =
    ["budget.forecast_exceeded", "idle.reservation", "period.closed", "dispute.opened", "dispute.resolved"];

/// Queues `event` for every active webhook of the organization subscribed to it; `key` identifies the condition
/// (a second call with the same key queues nothing); `summary` is one human sentence (Slack's text); `data` the
/// event's details. Returns how many deliveries were queued.
pub async fn enqueue(
    tx: &mut OrgTx,
    event: &str,
    key: &str,
    summary: &str,
    data: Value,
    at: OffsetDateTime,
) -> Result<u64, AppError> {
    let payload = json!({
        "event": event,
        "occurred_at": gpuledger_core::time_fmt::rfc3339(at),
        "summary": summary,
        "data": data,
    });
    Ok(store::insert_deliveries(tx, event, key, &payload).await?)
}

/// Whether any active webhook of the organization wants `event` (so costly checks are skipped when none does).
pub async fn wanted(tx: &mut OrgTx, event: &str) -> Result<bool, AppError> {
    Ok(store::any_webhook_wants(tx, event).await?)
}
