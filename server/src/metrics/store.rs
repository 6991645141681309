//! SQL of the Prometheus gauges: open workloads and the organization's counts read from the database.

use time::Date;

use crate::db::{DbError, OrgTx};

/// An open workload: (cluster, namespace, pod, tenant, department, model, GPU class, GPU model, sharing mode,
/// GPU-equivalents, whether a fraction is missing).
pub(super) type WorkloadRow =
    (String, String, String, String, String, String, String, String, String, Option<f64>, bool);

/// Open allocations grouped by their bounded labels (`org_wide`: also those no tenant owns).
pub(super) async fn open_workloads(tx: &mut OrgTx, org_wide: bool) -> Result<Vec<WorkloadRow>, DbError> {
    let org = tx.org().as_uuid();
    let rows: Vec<WorkloadRow> = sqlx::query_as(
        "SELECT c.name, a.namespace, a.holder_name, COALESCE(t.name, ''), COALESCE(d.name, ''),
                COALESCE(a.labels->>'model', ''), COALESCE(a.gpu_class, ''), COALESCE(a.gpu_model, ''),
                a.sharing_mode,
                sum(a.fraction_num::float8 / a.fraction_den::float8),
                bool_or(a.fraction_num IS NULL)
           FROM allocation_intervals a
           JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
           LEFT JOIN namespace_ownership o ON o.org_id = a.org_id AND o.namespace_uid = a.namespace_uid
                 AND o.valid_from <= now() AND (o.valid_to IS NULL OR o.valid_to > now())
           LEFT JOIN tenants t ON t.org_id = o.org_id AND t.tenant_id = o.tenant_id
           LEFT JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
          WHERE a.org_id = $2 AND a.ended_at IS NULL AND ($1 OR t.tenant_id IS NOT NULL)
          GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
          ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9",
    )
    .bind(org_wide)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Open allocation intervals by (cluster, sharing mode).
pub(super) async fn open_allocations(tx: &mut OrgTx) -> Result<Vec<(String, String, i64)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as(
        "SELECT c.name, a.sharing_mode, count(*) FROM allocation_intervals a
           JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
          WHERE a.org_id = $1 AND a.ended_at IS NULL GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Agents' newest contact (Unix seconds) and largest lag by (cluster, mode).
pub(super) async fn agent_contacts(tx: &mut OrgTx) -> Result<Vec<(String, String, f64, Option<i64>)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as(
        "SELECT c.name, g.mode, extract(epoch FROM max(g.last_seen_at))::float8, max(g.lag_seconds)
           FROM agent_contacts g JOIN clusters c ON c.org_id = g.org_id AND c.cluster_id = g.cluster_id
          WHERE g.org_id = $1
          GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Data-quality findings by (cluster, kind).
pub(super) async fn findings_by_kind(tx: &mut OrgTx) -> Result<Vec<(String, String, i64)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as(
        "SELECT c.name, f.kind, count(*) FROM data_quality_findings f
           JOIN clusters c ON c.org_id = f.org_id AND c.cluster_id = f.cluster_id
          WHERE f.org_id = $1
          GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Periods by state.
pub(super) async fn periods_by_state(tx: &mut OrgTx) -> Result<Vec<(String, i64)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as("SELECT state, count(*) FROM periods WHERE org_id = $1 GROUP BY 1 ORDER BY 1")
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
    Ok(rows)
}

/// Disputes by state.
pub(super) async fn disputes_by_state(tx: &mut OrgTx) -> Result<Vec<(String, i64)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as("SELECT state, count(*) FROM disputes WHERE org_id = $1 GROUP BY 1 ORDER BY 1")
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
    Ok(rows)
}

/// Browser sessions not ended, expired or idle too long.
pub(super) async fn open_sessions(tx: &mut OrgTx) -> Result<i64, DbError> {
    let org = tx.org().as_uuid();
    let n = sqlx::query_scalar(
        "SELECT count(*) FROM sessions
          WHERE org_id = $1 AND ended_at IS NULL AND expires_at > now() AND last_seen_at + idle_timeout > now()",
    )
    .bind(org)
    .fetch_one(tx.conn())
    .await?;
    Ok(n)
}

/// The department budgets of the month starting `month` (the latest setting of each), by department name.
pub(super) async fn department_budgets(tx: &mut OrgTx, month: Date) -> Result<Vec<(String, f64)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as(
        "SELECT DISTINCT ON (b.department_id) d.name, b.amount::float8 FROM budgets b
           JOIN departments d ON d.org_id = b.org_id AND d.department_id = b.department_id
          WHERE b.org_id = $1 AND b.period = $2 AND b.department_id IS NOT NULL
          ORDER BY b.department_id, b.created_at DESC",
    )
    .bind(org)
    .bind(month)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// The provisional figure of the month starting `month` per department.
pub(super) async fn projected_totals(tx: &mut OrgTx, month: Date) -> Result<Vec<(String, f64)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as(
        "SELECT t.department, sum(t.total)::float8 FROM read_totals t
           JOIN read_months m ON m.org_id = t.org_id AND m.period = t.period AND m.state = 'provisional'
          WHERE t.org_id = $1 AND t.period = $2 GROUP BY 1 ORDER BY 1",
    )
    .bind(org)
    .bind(month)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Webhook deliveries by state.
pub(super) async fn deliveries_by_state(tx: &mut OrgTx) -> Result<Vec<(String, i64)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as("SELECT state, count(*) FROM webhook_deliveries WHERE org_id = $1 GROUP BY 1 ORDER BY 1")
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
    Ok(rows)
}

/// How full each agent's spool is, 0–1, by (cluster, mode, node), where the agent reports it.
pub(super) async fn spool_fill(tx: &mut OrgTx) -> Result<Vec<(String, String, String, f64)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as(
        "SELECT c.name, g.mode, g.node, g.spool_disk_bytes::float8 / g.spool_max_bytes
           FROM agent_contacts g JOIN clusters c ON c.org_id = g.org_id AND c.cluster_id = g.cluster_id
          WHERE g.org_id = $1 AND g.spool_max_bytes > 0 AND g.spool_disk_bytes IS NOT NULL
          ORDER BY 1, 2, 3",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}
