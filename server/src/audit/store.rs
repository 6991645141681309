//! SQL of the audit log.

use serde_json::Value;
use uuid::Uuid;

use crate::{db::OrgTx, error::AppError};

/// Appends the audit record `id` to the transaction's organization's log.
#[allow(clippy::too_many_arguments)]
pub(super) async fn insert_record(
    tx: &mut OrgTx,
    id: Uuid,
    actor: &str,
    source: &str,
    action: &str,
    target: &str,
    reason: &str,
    details: Value,
) -> Result<(), AppError> {
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, reason, details, source)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(tx.org().as_uuid())
    .bind(id)
    .bind(actor)
    .bind(action)
    .bind(target)
    .bind(reason)
    .bind(details)
    .bind(source)
    .execute(tx.conn())
    .await?;
    Ok(())
}
