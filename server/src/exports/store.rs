//! SQL of the exports: the journal's accounts, the allocations' raw intervals and what they are joined with, and
//! the statements that run a [`super::sources::Select`] (whose SELECTs are built from the column lists).

use std::collections::{BTreeMap, HashMap};

use futures::{TryStreamExt, stream::BoxStream};
use sqlx::{PgConnection, Row, postgres::PgRow};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{
    allocations::{Dimensions, Owner},
    sources::Args,
};
use crate::{db::OrgTx, error::AppError};

/// The raw columns of the organization `$3`'s intervals overlapping `[$1, $2)` (month start, next month start).
pub(crate) const INTERVALS_SQL: &str = "SELECT a.cluster_id, a.allocation_id, a.started_at, a.ended_at, a.fraction_num,
       a.fraction_den, a.holder_kind, a.holder_uid, a.holder_name, a.namespace, a.namespace_uid, a.container, a.node,
       a.resource, a.units, a.device_ids, a.gpu_model, a.gpu_class, a.sharing_mode, a.profile, a.replicas,
       a.labels->>'endpoint', a.end_estimated, a.confidence, a.inventory_gap, a.share
  FROM allocation_intervals a
 WHERE a.org_id = $3 AND a.started_at < $2::timestamptz AND (a.ended_at IS NULL OR a.ended_at > $1::timestamptz)";

/// Every namespace's owners, with tenant and department as the caller may see them (PostgreSQL's row-level
/// security applies to each table, as in the SQL plan); `$1` is the organization.
const OWNERS_SQL: &str =
    "SELECT x.namespace_uid, x.valid_from, x.valid_to, t.tenant_id, t.name, d.department_id, d.name
  FROM namespace_ownership x
  LEFT JOIN tenants t ON t.org_id = x.org_id AND t.tenant_id = x.tenant_id
  LEFT JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
 WHERE x.org_id = $1
 ORDER BY x.namespace_uid, x.valid_from";

/// Sets an export's transaction up: UTC as its session time zone, and JIT off.
pub(crate) async fn export_session(tx: &mut OrgTx) -> Result<(), AppError> {
    sqlx::query("SET LOCAL TimeZone = 'UTC'").execute(tx.conn()).await?;
    sqlx::query("SET LOCAL jit = off").execute(tx.conn()).await?;
    Ok(())
}

/// Streams the rows of a source's SELECT (`sql`, with its `args`).
pub(crate) fn select_stream<'a>(
    conn: &'a mut PgConnection,
    sql: &'a str,
    args: &'a Args,
) -> BoxStream<'a, Result<PgRow, sqlx::Error>> {
    args.bind(sqlx::query(sql)).fetch(conn)
}

/// The rows of a source's SELECT (`sql`, with its `args`).
pub(crate) async fn select_rows(conn: &mut PgConnection, sql: &str, args: &Args) -> Result<Vec<PgRow>, sqlx::Error> {
    args.bind(sqlx::query(sql)).fetch_all(conn).await
}

/// The count a source's counting SELECT (`sql`, with its `args`) returns.
pub(crate) async fn select_count(conn: &mut PgConnection, sql: &str, args: &Args) -> Result<i64, sqlx::Error> {
    args.bind(sqlx::query(sql)).fetch_one(conn).await.and_then(|r| r.try_get::<i64, _>(0))
}

/// The organization's name.
pub(crate) async fn org_name(tx: &mut OrgTx) -> Result<String, AppError> {
    Ok(sqlx::query_scalar("SELECT name FROM organizations WHERE org_id = $1")
        .bind(tx.org().as_uuid())
        .fetch_one(tx.conn())
        .await?)
}

/// What the allocations' intervals are joined with, read in the caller's transaction: its `now()` and organization,
/// the clusters' names and every namespace's owners.
pub(crate) async fn dimensions(conn: &mut PgConnection) -> Result<Dimensions, sqlx::Error> {
    let (now, org): (OffsetDateTime, Option<Uuid>) =
        sqlx::query_as("SELECT now(), NULLIF(current_setting('app.org_id', true), '')::uuid")
            .fetch_one(&mut *conn)
            .await?;
    let mut clusters = HashMap::new();
    let rows =
        sqlx::query("SELECT cluster_id, name FROM clusters WHERE org_id = $1").bind(org).fetch_all(&mut *conn).await?;
    for r in rows {
        clusters.insert(r.try_get::<Uuid, _>(0)?, r.try_get::<String, _>(1)?);
    }
    let mut owners: HashMap<Uuid, Vec<Owner>> = HashMap::new();
    let mut rows = sqlx::query(OWNERS_SQL).bind(org).fetch(&mut *conn);
    while let Some(r) = rows.try_next().await? {
        owners.entry(r.try_get(0)?).or_default().push(Owner {
            from: r.try_get(1)?,
            to: r.try_get(2)?,
            tenant_id: r.try_get(3)?,
            tenant: r.try_get(4)?,
            department_id: r.try_get(5)?,
            department: r.try_get(6)?,
        });
    }
    Ok(Dimensions { clusters, owners, now: Some(now), org })
}

/// Streams `org`'s intervals overlapping `[from, before)` ([`INTERVALS_SQL`]'s raw rows).
pub(crate) fn intervals(
    conn: &mut PgConnection,
    from: OffsetDateTime,
    before: OffsetDateTime,
    org: Option<Uuid>,
) -> BoxStream<'_, Result<PgRow, sqlx::Error>> {
    sqlx::query(INTERVALS_SQL).bind(from).bind(before).bind(org).fetch(conn)
}

/// At most `batch` of `org`'s intervals overlapping `[from, before)` in key order (cluster, allocation), from
/// `position` on (the key, and whether that key itself is included) or from the first.
pub(crate) async fn interval_batch(
    conn: &mut PgConnection,
    from: OffsetDateTime,
    before: OffsetDateTime,
    org: Option<Uuid>,
    batch: i64,
    position: Option<&(Uuid, String, bool)>,
) -> Result<Vec<PgRow>, sqlx::Error> {
    let sql = match position {
        None => format!("{INTERVALS_SQL} ORDER BY a.cluster_id, a.allocation_id LIMIT $4"),
        Some((_, _, inclusive)) => format!(
            "{INTERVALS_SQL} AND (a.cluster_id, a.allocation_id) {} ($5::uuid, $6::text)
                     ORDER BY a.cluster_id, a.allocation_id LIMIT $4",
            if *inclusive { ">=" } else { ">" }
        ),
    };
    let mut q = sqlx::query(&sql).bind(from).bind(before).bind(org).bind(batch);
    if let Some((c, a, _)) = position {
        q = q.bind(*c).bind(a.as_str());
    }
    q.fetch_all(conn).await
}

/// A cost centre and general-ledger account pair (either may be unset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounts {
    /// The general-ledger account.
    pub gl_account: Option<String>,
    /// The cost centre.
    pub cost_center: Option<String>,
}

/// The accounts of every department the transaction may see (a department-scoped caller: its own, by the
/// departments' row-level security), and the platform's own (the organization's settings).
pub async fn journal_accounts(tx: &mut OrgTx) -> Result<(BTreeMap<Uuid, Accounts>, Accounts), AppError> {
    let org = tx.org().as_uuid();
    let rows: Vec<(Uuid, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT department_id, gl_account, cost_center FROM departments WHERE org_id = $1")
            .bind(org)
            .fetch_all(tx.conn())
            .await?;
    let departments =
        rows.into_iter().map(|(id, gl_account, cost_center)| (id, Accounts { gl_account, cost_center })).collect();
    let platform: Option<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT platform_gl_account, platform_cost_center FROM org_settings WHERE org_id = $1")
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    let (gl_account, cost_center) = platform.unwrap_or_default();
    Ok((departments, Accounts { gl_account, cost_center }))
}
