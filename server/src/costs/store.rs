//! SQL of the cloud bill: the GPU nodes' provider IDs, and a month's import.

use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// A node as the bill matching sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NodeRow {
    /// The cluster's ID.
    pub cluster_id: Uuid,
    /// The cluster's name.
    pub cluster: String,
    /// The node's name.
    pub name: String,
    /// Its UID.
    pub node_uid: Uuid,
    /// `nvidia.com/gpu.product`.
    pub gpu_product: Option<String>,
    /// `nvidia.com/gpu.count`.
    pub gpu_count: Option<i32>,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// Since when it looks like this.
    pub valid_from: OffsetDateTime,
}

/// The nodes as they are now (optionally one cluster's), by cluster and name.
pub async fn current_nodes(tx: &mut OrgTx, cluster: Option<&str>) -> Result<Vec<NodeRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT n.cluster_id, c.name AS cluster, n.name, n.node_uid, n.gpu_product, n.gpu_count, n.provider_id,
                n.valid_from
           FROM nodes n JOIN clusters c ON c.org_id = n.org_id AND c.cluster_id = n.cluster_id
          WHERE n.org_id = $1 AND c.org_id = $1 AND n.valid_to IS NULL AND ($2::text IS NULL OR c.name = $2)
          ORDER BY c.name, n.name",
    )
    .bind(org)
    .bind(cluster)
    .fetch_all(tx.conn())
    .await?)
}

/// The nodes that existed during `[from, to)` with a provider ID (each node's latest such entry in the window).
pub async fn nodes_during(tx: &mut OrgTx, from: OffsetDateTime, to: OffsetDateTime) -> Result<Vec<NodeRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT DISTINCT ON (n.cluster_id, n.name)
                n.cluster_id, c.name AS cluster, n.name, n.node_uid, n.gpu_product, n.gpu_count, n.provider_id,
                n.valid_from
           FROM nodes n JOIN clusters c ON c.org_id = n.org_id AND c.cluster_id = n.cluster_id
          WHERE n.org_id = $1 AND c.org_id = $1 AND n.provider_id IS NOT NULL
            AND n.valid_from < $3 AND (n.valid_to IS NULL OR n.valid_to > $2)
          ORDER BY n.cluster_id, n.name, n.valid_from DESC",
    )
    .bind(org)
    .bind(from)
    .bind(to)
    .fetch_all(tx.conn())
    .await?)
}

/// A month's import, as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ImportRow {
    /// When.
    pub imported_at: OffsetDateTime,
    /// Who.
    pub imported_by: String,
    /// FOCUS version.
    pub focus_version: String,
    /// Currency.
    pub currency: String,
    /// Lines read.
    pub lines_read: i64,
    /// Lines outside the month.
    pub lines_outside: i64,
    /// Imported after the month closed.
    pub after_close: bool,
    /// Matched EffectiveCost (text: exact).
    pub matched_cost: String,
    /// Unmatched EffectiveCost.
    pub unmatched_cost: String,
}

/// One stored resource of an import.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ResourceRow {
    /// `ResourceId`.
    pub resource_id: Option<String>,
    /// Its key.
    pub resource_key: Option<String>,
    /// `ServiceName`.
    pub service_name: String,
    /// Lines.
    pub lines: i64,
    /// EffectiveCost (text).
    pub effective_cost: String,
    /// BilledCost (text).
    pub billed_cost: String,
    /// The matched node's cluster name and node.
    pub cluster: Option<String>,
    /// The matched node.
    pub node: Option<String>,
}

/// The stored import of `period` (its first day), if any.
pub async fn import(tx: &mut OrgTx, period: time::Date) -> Result<Option<ImportRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT imported_at, imported_by, focus_version, currency::text AS currency, lines_read, lines_outside,
                matched_cost::text AS matched_cost, unmatched_cost::text AS unmatched_cost,
                EXISTS (SELECT 1 FROM periods p
                         WHERE p.org_id = c.org_id AND p.period = c.period AND p.state = 'closed'
                           AND p.closed_at < c.imported_at) AS after_close
           FROM cost_imports c WHERE c.org_id = $1 AND c.period = $2",
    )
    .bind(org)
    .bind(period)
    .fetch_optional(tx.conn())
    .await?)
}

/// The stored resources of `period`'s import: matched first (by cluster, node), then unmatched by cost.
pub async fn resources(tx: &mut OrgTx, period: time::Date) -> Result<Vec<ResourceRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT r.resource_id, r.resource_key, r.service_name, r.lines, r.effective_cost::text AS effective_cost,
                r.billed_cost::text AS billed_cost, c.name AS cluster, r.node
           FROM cost_import_resources r
           LEFT JOIN clusters c ON c.org_id = r.org_id AND c.cluster_id = r.cluster_id
          WHERE r.org_id = $1 AND r.period = $2
          ORDER BY r.node IS NULL, c.name, r.node, r.effective_cost DESC, r.row_no",
    )
    .bind(org)
    .bind(period)
    .fetch_all(tx.conn())
    .await?)
}

/// What a new import stores.
pub struct NewImport<'a> {
    /// The month (first day).
    pub period: time::Date,
    /// Who.
    pub imported_by: &'a str,
    /// FOCUS version.
    pub focus_version: &'a str,
    /// Currency.
    pub currency: &'a str,
    /// Lines read.
    pub lines_read: i64,
    /// Lines outside the month.
    pub lines_outside: i64,
    /// Matched EffectiveCost (decimal text).
    pub matched_cost: String,
    /// Unmatched EffectiveCost (decimal text).
    pub unmatched_cost: String,
}

/// One resource row of a new import.
pub struct NewResource {
    /// `ResourceId`.
    pub resource_id: Option<String>,
    /// Its key.
    pub resource_key: Option<String>,
    /// `ServiceName`.
    pub service_name: String,
    /// Lines.
    pub lines: i64,
    /// EffectiveCost (decimal text).
    pub effective_cost: String,
    /// BilledCost (decimal text).
    pub billed_cost: String,
    /// The matched node (cluster ID, name).
    pub node: Option<(Uuid, String)>,
}

/// Replaces `period`'s import with `import` and its resources. Returns whether one was replaced.
pub async fn replace(tx: &mut OrgTx, import: &NewImport<'_>, rows: &[NewResource]) -> Result<bool, DbError> {
    let org = tx.org().as_uuid();
    let replaced = sqlx::query("DELETE FROM cost_imports WHERE org_id = $1 AND period = $2")
        .bind(org)
        .bind(import.period)
        .execute(tx.conn())
        .await?
        .rows_affected()
        > 0;
    sqlx::query(
        "INSERT INTO cost_imports (org_id, period, import_id, imported_by, focus_version, currency, lines_read,
                                   lines_outside, matched_cost, unmatched_cost)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::numeric, $10::numeric)",
    )
    .bind(org)
    .bind(import.period)
    .bind(Uuid::new_v4())
    .bind(import.imported_by)
    .bind(import.focus_version)
    .bind(import.currency)
    .bind(import.lines_read)
    .bind(import.lines_outside)
    .bind(&import.matched_cost)
    .bind(&import.unmatched_cost)
    .execute(tx.conn())
    .await?;
    if rows.is_empty() {
        return Ok(replaced);
    }
    let no: Vec<i32> = (1..=rows.len()).map(|i| i32::try_from(i).unwrap_or(i32::MAX)).collect();
    let rid: Vec<Option<String>> = rows.iter().map(|r| r.resource_id.clone()).collect();
    let key: Vec<Option<String>> = rows.iter().map(|r| r.resource_key.clone()).collect();
    let service: Vec<String> = rows.iter().map(|r| r.service_name.clone()).collect();
    let lines: Vec<i64> = rows.iter().map(|r| r.lines).collect();
    let effective: Vec<String> = rows.iter().map(|r| r.effective_cost.clone()).collect();
    let billed: Vec<String> = rows.iter().map(|r| r.billed_cost.clone()).collect();
    let cluster: Vec<Option<Uuid>> = rows.iter().map(|r| r.node.as_ref().map(|n| n.0)).collect();
    let node: Vec<Option<String>> = rows.iter().map(|r| r.node.as_ref().map(|n| n.1.clone())).collect();
    use crate::bulk::{col, constant};
    crate::bulk::execute(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO cost_import_resources (org_id, period, row_no, resource_id, resource_key, service_name,
                       lines, effective_cost, billed_cost, cluster_id, node)",
            row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}::numeric, {6}::numeric, {7}, {8}",
            consts: &[constant("uuid", &org), constant("date", &import.period)],
            cols: &[
                col("int", &no),
                col("text", &rid),
                col("text", &key),
                col("text", &service),
                col("bigint", &lines),
                col("text", &effective),
                col("text", &billed),
                col("uuid", &cluster),
                col("text", &node),
            ],
            tail: "",
        },
    )
    .await?;
    Ok(replaced)
}

/// One matched node of `period`'s import with the GPU class(es) of its devices during `[from, to)`: (class,
/// effective cost of the node, the node's GPUs of that class, cluster ID, node). A node whose devices have no class
/// in the inventory is left out (its allocations are unpriced findings already).
pub async fn billed_node_classes(
    tx: &mut OrgTx,
    period: time::Date,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<(String, String, i64, Uuid, String)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT m.gpu_class, r.effective_cost::text, count(DISTINCT d.gpu_uuid), r.cluster_id, r.node
           FROM cost_import_resources r
           JOIN devices d ON d.org_id = r.org_id AND d.cluster_id = r.cluster_id AND d.node = r.node
           JOIN gpu_models m ON m.org_id = d.org_id AND m.model = d.model
                AND tstzrange(m.valid_from, m.valid_to) && tstzrange(d.valid_from, d.valid_to)
          WHERE r.org_id = $1 AND d.org_id = $1 AND m.org_id = $1 AND r.period = $2 AND r.cluster_id IS NOT NULL
            AND d.valid_from < $4 AND (d.valid_to IS NULL OR d.valid_to > $3)
          GROUP BY m.gpu_class, r.effective_cost, r.cluster_id, r.node, r.row_no
          ORDER BY r.cluster_id, r.node, m.gpu_class",
    )
    .bind(org)
    .bind(period)
    .bind(from)
    .bind(to)
    .fetch_all(tx.conn())
    .await?)
}
