//! SQL of this feature: reads and writes inside the caller's organization-scoped transaction. By concern:
//! [`inventory`] (the GPU inventory), [`names`] (departments and tenants by name), [`rules`] (namespace rules).

pub(crate) mod inventory;
pub(crate) mod names;
pub(crate) mod rules;

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
    pub(crate) retired_at: Option<OffsetDateTime>,
    pub(crate) former_names: Vec<String>,
    pub(crate) cost_center: Option<String>,
    pub(crate) gl_account: Option<String>,
}

/// Every department with its tenant count, former names and journal accounts, by name.
pub(crate) async fn departments(tx: &mut OrgTx) -> Result<Vec<DepartmentRow>, AppError> {
    rows(
        tx,
        "SELECT d.department_id, d.name,
                (SELECT count(*) FROM tenants t WHERE t.org_id = $1 AND t.department_id = d.department_id) AS tenants,
                d.retired_at,
                ARRAY(SELECT r.old_name FROM renames r WHERE r.org_id = $1 AND r.object_id = d.department_id
                       ORDER BY r.renamed_at) AS former_names,
                d.cost_center, d.gl_account
           FROM departments d WHERE d.org_id = $1 ORDER BY d.name",
    )
    .await
}

/// A department's journal accounts: its cost centre and general-ledger account.
pub(crate) async fn department_accounts(
    tx: &mut OrgTx,
    department: Uuid,
) -> Result<(Option<String>, Option<String>), AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as("SELECT cost_center, gl_account FROM departments WHERE org_id = $1 AND department_id = $2")
        .bind(org)
        .bind(department)
        .fetch_one(tx.conn())
        .await?)
}

/// Sets a department's journal accounts: `None` leaves one as it is, `Some(None)` clears it. Answers both as they
/// are after the change.
pub(crate) async fn set_department_accounts(
    tx: &mut OrgTx,
    department: Uuid,
    cost_center: Option<Option<&str>>,
    gl_account: Option<Option<&str>>,
) -> Result<(Option<String>, Option<String>), AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "UPDATE departments
            SET cost_center = CASE WHEN $3 THEN $4 ELSE cost_center END,
                gl_account = CASE WHEN $5 THEN $6 ELSE gl_account END
          WHERE org_id = $1 AND department_id = $2
         RETURNING cost_center, gl_account",
    )
    .bind(org)
    .bind(department)
    .bind(cost_center.is_some())
    .bind(cost_center.flatten())
    .bind(gl_account.is_some())
    .bind(gl_account.flatten())
    .fetch_one(tx.conn())
    .await?)
}

/// A row of `GET /api/v1/tenants`.
#[derive(sqlx::FromRow)]
pub(crate) struct TenantRow {
    pub(crate) tenant_id: Uuid,
    pub(crate) name: String,
    pub(crate) department_id: Uuid,
    pub(crate) department: String,
    pub(crate) namespaces: i64,
    pub(crate) retired_at: Option<OffsetDateTime>,
    pub(crate) former_names: Vec<String>,
}

/// Every tenant with its department, namespace count and former names, by department and name.
pub(crate) async fn tenants(tx: &mut OrgTx) -> Result<Vec<TenantRow>, AppError> {
    rows(
        tx,
        "SELECT t.tenant_id, t.name, d.department_id, d.name AS department,
                (SELECT count(*) FROM namespace_ownership o
                  WHERE o.org_id = $1 AND o.tenant_id = t.tenant_id AND o.valid_to IS NULL) AS namespaces,
                t.retired_at,
                ARRAY(SELECT r.old_name FROM renames r WHERE r.org_id = $1 AND r.object_id = t.tenant_id
                       ORDER BY r.renamed_at) AS former_names
           FROM tenants t JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
          WHERE t.org_id = $1
          ORDER BY d.name, t.name",
    )
    .await
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
    pub(crate) kind: sqlx::types::Text<gpuledger_api::tenancy::ProfileKind>,
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

/// A registered cluster by name or ID: (ID, name); the error names `cluster`.
pub(crate) async fn cluster_by_key(tx: &mut OrgTx, key: &str) -> Result<(Uuid, String), AppError> {
    let org = tx.org().as_uuid();
    sqlx::query_as("SELECT cluster_id, name FROM clusters WHERE (name = $1 OR cluster_id::text = $1) AND org_id = $2")
        .bind(key)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?
        .ok_or_else(|| AppError::unknown("cluster", format!("{key:?} is not a registered cluster")))
}

/// Appends a share-basis version for `cluster` (`None`: the organization's default) from `from`, closing the one
/// in force; like every inventory fact, history is appended, not rewritten.
pub(crate) async fn add_share_basis(
    tx: &mut OrgTx,
    cluster: Option<Uuid>,
    basis: gpuledger_core::sharing::ShareBasis,
    from: OffsetDateTime,
    actor: &str,
) -> Result<(), AppError> {
    // The organization-wide scope is keyed `*`, as namespace rules are.
    let scope = cluster.map_or_else(|| "*".to_string(), |c| c.to_string());
    close_open_entry(tx, "share_bases", &[("coalesce(cluster_id::text, '*')", scope)], from).await?;
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO share_bases (org_id, cluster_id, valid_from, basis, created_by) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(org)
    .bind(cluster)
    .bind(from)
    .bind(basis.name())
    .bind(actor)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A namespace as a reassignment finds it.
pub(crate) struct NamespaceAt {
    pub(crate) uid: Uuid,
    pub(crate) cluster: String,
    pub(crate) name: String,
    pub(crate) created_at: OffsetDateTime,
    pub(crate) deleted_at: Option<OffsetDateTime>,
}

/// The namespace called `name` in `cluster` (name or ID) that lived at `at` — or, when none did, the newest of
/// that name (so the caller can say why `at` does not fit it). Locked for the rest of the transaction, so two
/// reassignments of one namespace run one after the other.
pub(crate) async fn namespace_at(
    tx: &mut OrgTx,
    cluster: &str,
    name: &str,
    at: OffsetDateTime,
) -> Result<NamespaceAt, AppError> {
    let org = tx.org().as_uuid();
    let (cluster_id, cluster_name) = cluster_by_key(tx, cluster).await?;
    let row: Option<(Uuid, OffsetDateTime, Option<OffsetDateTime>)> = sqlx::query_as(
        "SELECT namespace_uid, created_at, deleted_at FROM namespaces
          WHERE cluster_id = $1 AND name = $2 AND org_id = $4
          ORDER BY (created_at <= $3 AND (deleted_at IS NULL OR deleted_at > $3)) DESC, created_at DESC
          LIMIT 1 FOR UPDATE",
    )
    .bind(cluster_id)
    .bind(name)
    .bind(at)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    let Some((uid, created_at, deleted_at)) = row else {
        return Err(AppError::unknown(
            "namespace",
            format!("no namespace {name:?} in cluster {cluster_name:?} has been reported by its agent"),
        ));
    };
    Ok(NamespaceAt { uid, cluster: cluster_name, name: name.to_string(), created_at, deleted_at })
}

/// The ownership entry in force at `at`: (start, end, tenant ID, tenant name).
type Entry = (OffsetDateTime, Option<OffsetDateTime>, Uuid, String);

/// Opens an `admin` ownership entry for `ns` from `from`: the entry in force then is closed at `from` (or, when it
/// starts exactly at `from`, given the new owner — the audit record keeps the old one); the new entry runs to the
/// next entry's start. Allocations of the namespace in the changed span are marked updated, so closed months they
/// touch are recomputed into corrections at the next close. Returns (previous owner, end of the new entry, closed
/// months touched).
pub(crate) async fn reassign_namespace(
    tx: &mut OrgTx,
    ns: Uuid,
    tenant: Uuid,
    from: OffsetDateTime,
) -> Result<(Option<String>, Option<OffsetDateTime>, Vec<time::Date>), AppError> {
    let org = tx.org().as_uuid();
    let current: Option<Entry> = sqlx::query_as(
        "SELECT o.valid_from, o.valid_to, o.tenant_id, t.name FROM namespace_ownership o
           JOIN tenants t ON t.org_id = o.org_id AND t.tenant_id = o.tenant_id
          WHERE o.namespace_uid = $1 AND o.valid_from <= $2 AND (o.valid_to IS NULL OR o.valid_to > $2)
            AND o.org_id = $3",
    )
    .bind(ns)
    .bind(from)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    if let Some((since, _, owner, name)) = &current
        && *owner == tenant
    {
        return Err(AppError::Conflict(format!(
            "the namespace already belongs to {name:?} at valid_from (since {}): nothing to change",
            gpuledger_core::time_fmt::rfc3339(*since)
        )));
    }
    let until: Option<OffsetDateTime> = match &current {
        Some((_, to, _, _)) => *to,
        None => sqlx::query_scalar(
            "SELECT min(valid_from) FROM namespace_ownership WHERE namespace_uid = $1 AND valid_from > $2 AND org_id = $3",
        )
        .bind(ns)
        .bind(from)
        .bind(org)
        .fetch_one(tx.conn())
        .await?,
    };
    // A close running over the span would freeze figures from before or after the change, unknowably.
    let closing: Option<time::Date> = sqlx::query_scalar(
        "SELECT period FROM periods WHERE state = 'closing' AND org_id = $3
            AND period + interval '1 month' > $1 AND ($2::timestamptz IS NULL OR period < $2) LIMIT 1",
    )
    .bind(from)
    .bind(until)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    if let Some(p) = closing {
        return Err(AppError::Conflict(format!(
            "{} is being closed right now; reassign once the close has finished",
            gpuledger_core::Period::from_date(p)?
        )));
    }
    match &current {
        Some((since, _, _, _)) if *since == from => {
            sqlx::query(
                "UPDATE namespace_ownership SET tenant_id = $3, source = 'admin'
                  WHERE namespace_uid = $1 AND valid_from = $2 AND org_id = $4",
            )
            .bind(ns)
            .bind(from)
            .bind(tenant)
            .bind(org)
            .execute(tx.conn())
            .await?;
        }
        _ => {
            if let Some((since, _, _, _)) = &current {
                sqlx::query(
                    "UPDATE namespace_ownership SET valid_to = $3 WHERE namespace_uid = $1 AND valid_from = $2 AND org_id = $4",
                )
                .bind(ns)
                .bind(since)
                .bind(from)
                .bind(org)
                .execute(tx.conn())
                .await?;
            }
            sqlx::query(
                "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source)
                 VALUES ($1, $2, $3, $4, $5, 'admin')",
            )
            .bind(org)
            .bind(ns)
            .bind(from)
            .bind(until)
            .bind(tenant)
            .execute(tx.conn())
            .await?;
        }
    }
    crate::store::touch_allocations(tx, ns, from, until).await?;
    let closed: Vec<time::Date> = sqlx::query_scalar(
        "SELECT period FROM periods WHERE state = 'closed' AND org_id = $3
            AND period + interval '1 month' > $1 AND ($2::timestamptz IS NULL OR period < $2) ORDER BY period",
    )
    .bind(from)
    .bind(until)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok((current.map(|c| c.3), until, closed))
}

/// A namespace's ownership history, oldest first: (tenant, department, start, end, source).
pub(crate) async fn ownership_history(
    tx: &mut OrgTx,
    ns: Uuid,
) -> Result<Vec<(String, String, OffsetDateTime, Option<OffsetDateTime>, String)>, AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT t.name, d.name, o.valid_from, o.valid_to, o.source FROM namespace_ownership o
           JOIN tenants t ON t.org_id = o.org_id AND t.tenant_id = o.tenant_id
           JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
          WHERE o.namespace_uid = $1 AND o.org_id = $2 ORDER BY o.valid_from",
    )
    .bind(ns)
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// `SAVEPOINT name` in `tx` (a preview writes a change, computes, and goes back to it).
pub(super) async fn savepoint(tx: &mut OrgTx, name: &str) -> Result<(), AppError> {
    sqlx::query(&format!("SAVEPOINT {name}")).execute(tx.conn()).await?;
    Ok(())
}

/// `ROLLBACK TO SAVEPOINT name` in `tx`: what was written since [`savepoint`] is gone.
pub(super) async fn rollback_to(tx: &mut OrgTx, name: &str) -> Result<(), AppError> {
    sqlx::query(&format!("ROLLBACK TO SAVEPOINT {name}")).execute(tx.conn()).await?;
    Ok(())
}
