//! SQL of this feature: reads and writes inside the caller's organization-scoped transaction.

use crate::{db::OrgTx, error::AppError};
use time::OffsetDateTime;
use uuid::Uuid;

/// Rows of `sql` as `R`; `$1` in `sql` is the transaction's organization (each statement filters on it).
pub(crate) async fn rows<R>(tx: &mut OrgTx, sql: &str) -> Result<Vec<R>, AppError>
where
    R: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(sql).bind(org).fetch_all(tx.conn()).await?)
}

/// A row of `GET /api/v1/departments`.
#[derive(sqlx::FromRow)]
pub(crate) struct DepartmentRow {
    pub(crate) department_id: Uuid,
    pub(crate) name: String,
    pub(crate) tenants: i64,
}

/// A row of `GET /api/v1/tenants`.
#[derive(sqlx::FromRow)]
pub(crate) struct TenantRow {
    pub(crate) tenant_id: Uuid,
    pub(crate) name: String,
    pub(crate) department_id: Uuid,
    pub(crate) department: String,
    pub(crate) namespaces: i64,
}

/// A row of the inventory's models.
#[derive(sqlx::FromRow)]
pub(crate) struct ModelRow {
    pub(crate) model: String,
    pub(crate) gpu_class: String,
    pub(crate) memory_mib: Option<i32>,
    pub(crate) valid_from: String,
    pub(crate) valid_to: Option<String>,
}

/// A row of the inventory's profiles.
#[derive(sqlx::FromRow)]
pub(crate) struct ProfileRow {
    pub(crate) kind: String,
    pub(crate) model: String,
    pub(crate) profile: String,
    pub(crate) fraction: String,
    pub(crate) valid_from: String,
    pub(crate) valid_to: Option<String>,
}

/// A row of the inventory's time-slicing policies.
#[derive(sqlx::FromRow)]
pub(crate) struct TimeslicingRow {
    pub(crate) cluster: String,
    pub(crate) name: String,
    pub(crate) replicas: i32,
    pub(crate) valid_from: String,
    pub(crate) valid_to: Option<String>,
}

/// Ends the entry in force (`valid_to IS NULL`) of one key where the new one starts. Refused (409) when an entry
/// of that key starts at or after `from`, or a closed one covers it: history is appended, never rewritten.
pub(crate) async fn close_open_entry(
    tx: &mut OrgTx,
    table: &str,
    keys: &[(&str, String)],
    from: OffsetDateTime,
) -> Result<(), AppError> {
    let cond = keys
        .iter()
        .enumerate()
        .map(|(i, (column, _))| format!("{column}::text = ${}", i + 2))
        .collect::<Vec<_>>()
        .join(" AND ");
    // The organization is the parameter after the keys.
    let org = tx.org().as_uuid();
    let org_param = keys.len() + 2;
    let conflict = format!(
        "SELECT EXISTS (SELECT 1 FROM {table} WHERE {cond} AND org_id = ${org_param}
            AND (valid_from >= $1 OR (valid_to IS NOT NULL AND valid_to > $1)))"
    );
    let mut q = sqlx::query_scalar::<_, bool>(&conflict).bind(from);
    for (_, v) in keys {
        q = q.bind(v);
    }
    q = q.bind(org);
    if q.fetch_one(tx.conn()).await? {
        return Err(AppError::Conflict(
            "an entry for this key starts at or after valid_from (or a closed one covers it): history is \
             appended, not rewritten; choose a later valid_from"
                .into(),
        ));
    }
    let update =
        format!("UPDATE {table} SET valid_to = $1 WHERE {cond} AND org_id = ${org_param} AND valid_to IS NULL");
    let mut q = sqlx::query(&update).bind(from);
    for (_, v) in keys {
        q = q.bind(v);
    }
    q = q.bind(org);
    q.execute(tx.conn()).await?;
    Ok(())
}
