//! The notifier's SQL: webhooks, their delivery log, and the worker's leases and outcomes.

use gpuledger_api::states::DeliveryState;
use serde_json::Value;
use time::{Date, OffsetDateTime};
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// The number of active webhooks of the organization.
pub(super) async fn active_webhooks(tx: &mut OrgTx) -> Result<i64, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT count(*) FROM webhooks WHERE org_id = $1 AND disabled_at IS NULL")
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// Inserts a webhook; its id.
pub(super) async fn insert_webhook(
    tx: &mut OrgTx,
    url: &str,
    events: &[String],
    format: &str,
    secret: &str,
    created_by: &str,
) -> Result<Uuid, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "INSERT INTO webhooks (org_id, url, events, format, secret, created_by) VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING webhook_id",
    )
    .bind(org)
    .bind(url)
    .bind(events)
    .bind(format)
    .bind(secret)
    .bind(created_by)
    .fetch_one(tx.conn())
    .await?)
}

/// Disables active webhook `id`; the number of rows changed (0: no such active webhook).
pub(super) async fn disable_webhook(tx: &mut OrgTx, id: Uuid) -> Result<u64, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query(
        "UPDATE webhooks SET disabled_at = now() WHERE org_id = $1 AND webhook_id = $2 AND disabled_at IS NULL",
    )
    .bind(org)
    .bind(id)
    .execute(tx.conn())
    .await?
    .rows_affected())
}

/// Fails what webhook `id` still had pending.
pub(super) async fn fail_pending_deliveries(tx: &mut OrgTx, id: Uuid) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE webhook_deliveries SET state = 'failed', last_error = 'webhook disabled'
          WHERE org_id = $1 AND webhook_id = $2 AND state = 'pending'",
    )
    .bind(org)
    .bind(id)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A webhook with its delivery counts: (id, URL, events, format, created by, created at, disabled at, delivered,
/// pending, failed).
pub(super) type WebhookRow =
    (Uuid, String, Vec<String>, String, String, OffsetDateTime, Option<OffsetDateTime>, i64, i64, i64);

/// The organization's webhooks (or one), active first, newest first, with their delivery counts.
pub(super) async fn webhooks(tx: &mut OrgTx, one: Option<Uuid>) -> Result<Vec<WebhookRow>, DbError> {
    Ok(sqlx::query_as(
        "SELECT w.webhook_id, w.url, w.events, w.format, w.created_by, w.created_at, w.disabled_at,
                count(d.*) FILTER (WHERE d.state = 'delivered'), count(d.*) FILTER (WHERE d.state = 'pending'),
                count(d.*) FILTER (WHERE d.state = 'failed')
           FROM webhooks w
           LEFT JOIN webhook_deliveries d ON d.org_id = w.org_id AND d.webhook_id = w.webhook_id
          WHERE w.org_id = $1 AND ($2::uuid IS NULL OR w.webhook_id = $2)
          GROUP BY w.webhook_id, w.url, w.events, w.format, w.created_by, w.created_at, w.disabled_at
          ORDER BY w.disabled_at IS NOT NULL, w.created_at DESC",
    )
    .bind(tx.org().as_uuid())
    .bind(one)
    .fetch_all(tx.conn())
    .await?)
}

/// Whether webhook `id` exists (active or not).
pub(super) async fn webhook_exists(tx: &mut OrgTx, id: Uuid) -> Result<bool, DbError> {
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM webhooks WHERE org_id = $1 AND webhook_id = $2)")
        .bind(tx.org().as_uuid())
        .bind(id)
        .fetch_one(tx.conn())
        .await?)
}

/// A delivery as logged.
#[derive(sqlx::FromRow)]
pub(super) struct DeliveryRow {
    pub(super) delivery_id: Uuid,
    pub(super) event: String,
    pub(super) state: sqlx::types::Text<DeliveryState>,
    pub(super) attempts: i32,
    pub(super) last_status: Option<i32>,
    pub(super) last_error: Option<String>,
    pub(super) created_at: OffsetDateTime,
    pub(super) delivered_at: Option<OffsetDateTime>,
    pub(super) next_attempt_at: OffsetDateTime,
    pub(super) payload: Value,
}

/// Webhook `id`'s last 200 deliveries, newest first.
pub(super) async fn deliveries(tx: &mut OrgTx, id: Uuid) -> Result<Vec<DeliveryRow>, DbError> {
    Ok(sqlx::query_as(
        "SELECT delivery_id, event, state, attempts, last_status, last_error, created_at, delivered_at,
                next_attempt_at, payload
           FROM webhook_deliveries WHERE org_id = $1 AND webhook_id = $2 ORDER BY created_at DESC LIMIT 200",
    )
    .bind(tx.org().as_uuid())
    .bind(id)
    .fetch_all(tx.conn())
    .await?)
}

/// Whether a budget was created after `since`.
pub(super) async fn budget_created_since(tx: &mut OrgTx, since: OffsetDateTime) -> Result<bool, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM budgets WHERE org_id = $1 AND created_at > $2)")
        .bind(org)
        .bind(since)
        .fetch_one(tx.conn())
        .await?)
}

/// Whether the month starting `first_day` has any budget.
pub(super) async fn month_has_budget(tx: &mut OrgTx, first_day: Date) -> Result<bool, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM budgets WHERE org_id = $1 AND period = $2)")
        .bind(org)
        .bind(first_day)
        .fetch_one(tx.conn())
        .await?)
}

/// A delivery due now, with where and how to send it.
#[derive(sqlx::FromRow)]
pub(super) struct Due {
    pub(super) delivery_id: Uuid,
    pub(super) event: String,
    pub(super) payload: Value,
    pub(super) attempts: i32,
    pub(super) url: String,
    pub(super) secret: String,
    pub(super) format: String,
}

/// Up to 50 pending deliveries due now to active webhooks, oldest due first, locked (others' locked ones skipped).
pub(super) async fn lock_due_deliveries(tx: &mut OrgTx) -> Result<Vec<Due>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT d.delivery_id, d.event, d.payload, d.attempts, w.url, w.secret, w.format
           FROM webhook_deliveries d JOIN webhooks w ON w.org_id = d.org_id AND w.webhook_id = d.webhook_id
          WHERE d.org_id = $1 AND d.state = 'pending' AND d.next_attempt_at <= now() AND w.disabled_at IS NULL
          ORDER BY d.next_attempt_at LIMIT 50
          FOR UPDATE OF d SKIP LOCKED",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// Puts the next attempt of deliveries `ids` `lease_secs` seconds from now.
pub(super) async fn lease_deliveries(tx: &mut OrgTx, ids: &[Uuid], lease_secs: f64) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE webhook_deliveries SET next_attempt_at = now() + make_interval(secs => $3)
          WHERE org_id = $1 AND delivery_id = ANY($2)",
    )
    .bind(org)
    .bind(ids)
    .bind(lease_secs)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Records delivery `id` delivered on attempt `attempts` with HTTP `status`.
pub(super) async fn mark_delivered(tx: &mut OrgTx, id: Uuid, attempts: i32, status: i32) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE webhook_deliveries SET state = 'delivered', attempts = $3, last_status = $4,
                            last_error = NULL, delivered_at = now()
                      WHERE org_id = $1 AND delivery_id = $2",
    )
    .bind(org)
    .bind(id)
    .bind(attempts)
    .bind(status)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Records a failed attempt of delivery `id`: failed for good when `give_up`, else pending again in `wait_secs`.
pub(super) async fn mark_attempt_failed(
    tx: &mut OrgTx,
    id: Uuid,
    attempts: i32,
    status: Option<i32>,
    give_up: bool,
    error: &str,
    wait_secs: f64,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE webhook_deliveries
                        SET state = CASE WHEN $5 THEN 'failed' ELSE 'pending' END, attempts = $3, last_status = $4,
                            last_error = left($6, 1000), next_attempt_at = now() + make_interval(secs => $7)
                      WHERE org_id = $1 AND delivery_id = $2",
    )
    .bind(org)
    .bind(id)
    .bind(attempts)
    .bind(status)
    .bind(give_up)
    .bind(error)
    .bind(wait_secs)
    .execute(tx.conn())
    .await?;
    Ok(())
}
