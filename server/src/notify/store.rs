//! The queue's SQL: pending deliveries and the webhooks that want an event.

use serde_json::Value;

use crate::db::{DbError, OrgTx};

/// Queues `payload` as one pending delivery of `event` per active webhook subscribed to it, unless that webhook
/// already has one with `key`; how many were queued.
pub(super) async fn insert_deliveries(tx: &mut OrgTx, event: &str, key: &str, payload: &Value) -> Result<u64, DbError> {
    let done = sqlx::query(
        "INSERT INTO webhook_deliveries (org_id, webhook_id, event, dedupe_key, payload)
         SELECT org_id, webhook_id, $2, $3, $4 FROM webhooks
          WHERE org_id = $1 AND disabled_at IS NULL AND $2 = ANY(events)
         ON CONFLICT (org_id, webhook_id, dedupe_key) DO NOTHING",
    )
    .bind(tx.org().as_uuid())
    .bind(event)
    .bind(key)
    .bind(payload)
    .execute(tx.conn())
    .await?;
    Ok(done.rows_affected())
}

/// Whether any active webhook of the organization is subscribed to `event`.
pub(super) async fn any_webhook_wants(tx: &mut OrgTx, event: &str) -> Result<bool, DbError> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM webhooks WHERE org_id = $1 AND disabled_at IS NULL AND $2 = ANY(events))",
    )
    .bind(tx.org().as_uuid())
    .bind(event)
    .fetch_one(tx.conn())
    .await?)
}
