//! SQL lookups several features share (kept here so no feature imports another's handlers for them). Every
//! function runs inside the caller's organization-scoped transaction.

use gpuledger_core::{Period, policy::CostPolicy};
use serde_json::Value;
use uuid::Uuid;

use crate::{db::OrgTx, error::AppError};

/// The approved policy that prices `period`, with its version filled in.
pub async fn policy_for(tx: &mut OrgTx, period: Period) -> Result<Option<CostPolicy>, AppError> {
    let org = tx.org().as_uuid();
    let row: Option<(i32, Value)> = sqlx::query_as(
        "SELECT version, document FROM cost_policies WHERE state = 'approved' AND effective_from <= $1 AND org_id = $2
         ORDER BY effective_from DESC LIMIT 1",
    )
    .bind(period.first_day())
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    let Some((version, doc)) = row else { return Ok(None) };
    let mut policy: CostPolicy = serde_json::from_value(doc)
        .map_err(|e| AppError::Internal(format!("stored cost policy {version} does not parse: {e}")))?;
    policy.version = u32::try_from(version).map_err(|_| AppError::Internal("negative policy version".into()))?;
    Ok(Some(policy))
}

/// A tenant's or department's ID from its name or ID (`table` is `tenants` or `departments`); the error names
/// `field`.
pub async fn lookup_id(tx: &mut OrgTx, table: &str, field: &str, name_or_id: &str) -> Result<Uuid, AppError> {
    let sql = match table {
        "tenants" => "SELECT tenant_id FROM tenants WHERE (name = $1 OR tenant_id::text = $1) AND org_id = $2",
        _ => "SELECT department_id FROM departments WHERE (name = $1 OR department_id::text = $1) AND org_id = $2",
    };
    let org = tx.org().as_uuid();
    let id: Option<Uuid> = sqlx::query_scalar(sql).bind(name_or_id).bind(org).fetch_optional(tx.conn()).await?;
    id.ok_or_else(|| AppError::invalid(field, format!("{name_or_id:?} is not a known {}", &table[..table.len() - 1])))
}
