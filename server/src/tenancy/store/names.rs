//! Departments and tenants by name: creating them, renaming and retiring them, and attributing the usage that
//! waited for a tenant of that name.

use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// Inserts department `id` named `name`.
pub(crate) async fn insert_department(tx: &mut OrgTx, id: Uuid, name: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, $3)")
        .bind(org)
        .bind(id)
        .bind(name)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Inserts tenant `id` named `name` in `department`.
pub(crate) async fn insert_tenant(tx: &mut OrgTx, id: Uuid, department: Uuid, name: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, $4)")
        .bind(org)
        .bind(id)
        .bind(department)
        .bind(name)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Gives tenant `id` (of `department`) the service usage and usage records that named it before it existed; the
/// number of rows attributed.
pub(crate) async fn attribute_usage(tx: &mut OrgTx, id: Uuid, name: &str, department: Uuid) -> Result<u64, DbError> {
    let org = tx.org().as_uuid();
    let mut usage = sqlx::query(
        "UPDATE service_usage SET tenant_id = $1 WHERE tenant_name = $2 AND tenant_id IS NULL AND org_id = $3",
    )
    .bind(id)
    .bind(name)
    .bind(org)
    .execute(tx.conn())
    .await?
    .rows_affected();
    // Usage records also carry the tenant's department (what department managers see them under).
    usage += sqlx::query(
        "UPDATE usage_records SET tenant_id = $1, department_id = $4
          WHERE tenant_name = $2 AND tenant_id IS NULL AND org_id = $3",
    )
    .bind(id)
    .bind(name)
    .bind(org)
    .bind(department)
    .execute(tx.conn())
    .await?
    .rows_affected();
    Ok(usage)
}

/// The name of tenant `id`.
pub(crate) async fn tenant_name(tx: &mut OrgTx, id: Uuid) -> Result<String, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT name FROM tenants WHERE tenant_id = $1 AND org_id = $2")
        .bind(id)
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// (name, retired at) of department or tenant `id` (`table` and its id column's `word`), locked for the change.
pub(crate) async fn lock_named(
    tx: &mut OrgTx,
    table: &str,
    word: &str,
    id: Uuid,
) -> Result<(String, Option<OffsetDateTime>), DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(&format!("SELECT name, retired_at FROM {table} WHERE {word}_id = $1 AND org_id = $2 FOR UPDATE"))
        .bind(id)
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// Renames department or tenant `id` to `new`.
pub(crate) async fn set_name(tx: &mut OrgTx, table: &str, word: &str, id: Uuid, new: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(&format!("UPDATE {table} SET name = $1 WHERE {word}_id = $2 AND org_id = $3"))
        .bind(new)
        .bind(id)
        .bind(org)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Records that `word` `id` was renamed from `old` to `new` by `by`.
pub(crate) async fn insert_rename(
    tx: &mut OrgTx,
    word: &str,
    id: Uuid,
    old: &str,
    new: &str,
    by: &str,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO renames (org_id, rename_id, kind, object_id, old_name, new_name, renamed_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(word)
    .bind(id)
    .bind(old)
    .bind(new)
    .bind(by)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Retires department or tenant `id` from `from`.
pub(crate) async fn set_retired(
    tx: &mut OrgTx,
    table: &str,
    word: &str,
    id: Uuid,
    from: OffsetDateTime,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(&format!("UPDATE {table} SET retired_at = $1 WHERE {word}_id = $2 AND org_id = $3"))
        .bind(from)
        .bind(id)
        .bind(org)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Up to ten names of the namespaces tenant `id` still owns after `from`.
pub(crate) async fn namespaces_owned_after(
    tx: &mut OrgTx,
    id: Uuid,
    from: OffsetDateTime,
) -> Result<Vec<String>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "SELECT DISTINCT n.name FROM namespace_ownership o
                   JOIN namespaces n ON n.org_id = o.org_id AND n.namespace_uid = o.namespace_uid
                  WHERE o.tenant_id = $1 AND o.org_id = $2 AND (o.valid_to IS NULL OR o.valid_to > $3)
                    AND (n.deleted_at IS NULL OR n.deleted_at > $3)
                  ORDER BY 1 LIMIT 10",
    )
    .bind(id)
    .bind(org)
    .bind(from)
    .fetch_all(tx.conn())
    .await?)
}

/// Up to ten names of department `id`'s tenants still active after `from`.
pub(crate) async fn tenants_active_after(
    tx: &mut OrgTx,
    id: Uuid,
    from: OffsetDateTime,
) -> Result<Vec<String>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "SELECT name FROM tenants WHERE department_id = $1 AND org_id = $2
                    AND (retired_at IS NULL OR retired_at > $3) ORDER BY 1 LIMIT 10",
    )
    .bind(id)
    .bind(org)
    .bind(from)
    .fetch_all(tx.conn())
    .await?)
}
