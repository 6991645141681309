//! SQL of the cluster's history as agents report it: namespaces and their owners, nodes and devices (a change closes
//! the row in force and opens a new one).

use gpuledger_core::{
    ids::{ClusterId, OrgId},
    wire::{DeviceFact, NamespaceFact, NodeFact},
};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// Records namespace `n`; a deletion time, once known, is kept.
pub(crate) async fn upsert_namespace(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &NamespaceFact,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO namespaces (org_id, namespace_uid, cluster_id, name, created_at, deleted_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (org_id, namespace_uid) DO UPDATE SET deleted_at = coalesce(EXCLUDED.deleted_at, namespaces.deleted_at)",
    )
    .bind(org.as_uuid())
    .bind(n.namespace_uid)
    .bind(cluster.as_uuid())
    .bind(&n.name)
    .bind(n.created_at)
    .bind(n.deleted_at)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Gives namespace `n`'s UID to the allocations in it (by name, within its lifetime) that have none yet.
pub(crate) async fn set_namespace_uid_of_allocations(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &NamespaceFact,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE allocation_intervals SET namespace_uid = $2, updated_at = now()
          WHERE cluster_id = $1 AND namespace = $3 AND namespace_uid IS NULL AND started_at >= $4
            AND ($5::timestamptz IS NULL OR started_at < $5) AND org_id = $6",
    )
    .bind(cluster.as_uuid())
    .bind(n.namespace_uid)
    .bind(&n.name)
    .bind(n.created_at)
    .bind(n.deleted_at)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The ID of the tenant named `name`, if defined.
pub(crate) async fn tenant_named(tx: &mut OrgTx, org: OrgId, name: &str) -> Result<Option<Uuid>, DbError> {
    let id: Option<Uuid> = sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE name = $1 AND org_id = $2")
        .bind(name)
        .bind(org.as_uuid())
        .fetch_optional(tx.conn())
        .await?;
    Ok(id)
}

/// Records an `unknown_tenant` finding about namespace `subject` (once per finding ID).
pub(crate) async fn insert_unknown_tenant_finding(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    finding_id: &str,
    subject: &str,
    from: OffsetDateTime,
    details: &Value,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO data_quality_findings (org_id, cluster_id, finding_id, kind, subject, occurred_from, details)
         VALUES ($1, $2, $3, 'unknown_tenant', $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(finding_id)
    .bind(subject)
    .bind(from)
    .bind(details)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The ownership row of namespace `ns` in force at `at`: (valid from, valid to, tenant).
pub(crate) async fn ownership_at(
    tx: &mut OrgTx,
    org: OrgId,
    ns: Uuid,
    at: OffsetDateTime,
) -> Result<Option<(OffsetDateTime, Option<OffsetDateTime>, Uuid)>, DbError> {
    let row = sqlx::query_as(
        "SELECT valid_from, valid_to, tenant_id FROM namespace_ownership
          WHERE namespace_uid = $1 AND valid_from <= $2 AND (valid_to IS NULL OR valid_to > $2) AND org_id = $3",
    )
    .bind(ns)
    .bind(at)
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    Ok(row)
}

/// When the first ownership row of namespace `ns` after `at` starts.
pub(crate) async fn next_ownership_from(
    tx: &mut OrgTx,
    org: OrgId,
    ns: Uuid,
    at: OffsetDateTime,
) -> Result<Option<OffsetDateTime>, DbError> {
    let from: Option<OffsetDateTime> = sqlx::query_scalar(
        "SELECT min(valid_from) FROM namespace_ownership WHERE namespace_uid = $1 AND valid_from > $2 AND org_id = $3",
    )
    .bind(ns)
    .bind(at)
    .bind(org.as_uuid())
    .fetch_one(tx.conn())
    .await?;
    Ok(from)
}

/// Closes at `to` the ownership row of namespace `ns` that starts at `from`.
pub(crate) async fn close_ownership(
    tx: &mut OrgTx,
    org: OrgId,
    ns: Uuid,
    from: Option<OffsetDateTime>,
    to: OffsetDateTime,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE namespace_ownership SET valid_to = $3
          WHERE namespace_uid = $1 AND valid_from = $2 AND org_id = $4",
    )
    .bind(ns)
    .bind(from)
    .bind(to)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Opens an ownership row of namespace `ns` by `tenant` (from its labels) over `from`..`until`.
pub(crate) async fn insert_ownership(
    tx: &mut OrgTx,
    org: OrgId,
    ns: Uuid,
    from: OffsetDateTime,
    until: Option<OffsetDateTime>,
    tenant: Uuid,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source)
         VALUES ($1, $2, $3, $4, $5, 'label')",
    )
    .bind(org.as_uuid())
    .bind(ns)
    .bind(from)
    .bind(until)
    .bind(tenant)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Gives the ownership row of namespace `ns` that starts at `from` a new owner and end.
pub(crate) async fn replace_owner(
    tx: &mut OrgTx,
    org: OrgId,
    ns: Uuid,
    from: OffsetDateTime,
    tenant: Uuid,
    until: Option<OffsetDateTime>,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE namespace_ownership SET tenant_id = $3, valid_to = $4
          WHERE namespace_uid = $1 AND valid_from = $2 AND org_id = $5",
    )
    .bind(ns)
    .bind(from)
    .bind(tenant)
    .bind(until)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Whether the node row in force says what `n` says (`None`: no row in force).
pub(crate) async fn node_unchanged(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &NodeFact,
    allocatable: &Value,
) -> Result<Option<bool>, DbError> {
    let same: Option<bool> = sqlx::query_scalar(
        "SELECT node_uid = $2 AND gpu_product IS NOT DISTINCT FROM $3 AND gpu_count IS NOT DISTINCT FROM $4
                AND mig_strategy IS NOT DISTINCT FROM $5 AND sharing_strategy IS NOT DISTINCT FROM $6
                AND replicas IS NOT DISTINCT FROM $7 AND allocatable = $8 AND provider_id IS NOT DISTINCT FROM $11
           FROM nodes WHERE cluster_id = $9 AND name = $1 AND valid_to IS NULL AND org_id = $10",
    )
    .bind(&n.name)
    .bind(n.node_uid)
    .bind(&n.gpu_product)
    .bind(n.gpu_count.map(|v| v as i32))
    .bind(&n.mig_strategy)
    .bind(&n.sharing_strategy)
    .bind(n.replicas.map(|v| v as i32))
    .bind(allocatable)
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .bind(&n.provider_id)
    .fetch_optional(tx.conn())
    .await?;
    Ok(same)
}

/// Closes at `at` the node row in force named `name` (if it started before).
pub(crate) async fn close_node(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    name: &str,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE nodes SET valid_to = $3
          WHERE cluster_id = $1 AND name = $2 AND valid_to IS NULL AND valid_from < $3 AND org_id = $4",
    )
    .bind(cluster.as_uuid())
    .bind(name)
    .bind(at)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Opens a node row from `at` with what `n` says.
pub(crate) async fn insert_node(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &NodeFact,
    at: OffsetDateTime,
    allocatable: &Value,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO nodes (org_id, cluster_id, name, valid_from, node_uid, gpu_product, gpu_count, mig_strategy,
            sharing_strategy, replicas, allocatable, provider_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&n.name)
    .bind(at)
    .bind(n.node_uid)
    .bind(&n.gpu_product)
    .bind(n.gpu_count.map(|v| v as i32))
    .bind(&n.mig_strategy)
    .bind(&n.sharing_strategy)
    .bind(n.replicas.map(|v| v as i32))
    .bind(allocatable)
    .bind(&n.provider_id)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Whether the device row in force says what `d` says (`None`: no row in force).
pub(crate) async fn device_unchanged(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    d: &DeviceFact,
    mig: &Value,
) -> Result<Option<bool>, DbError> {
    let same: Option<bool> = sqlx::query_scalar(
        "SELECT node = $2 AND model = $3 AND memory_mib IS NOT DISTINCT FROM $4 AND mig_enabled = $5
                AND mig_devices = $6 AND vgpu_profile IS NOT DISTINCT FROM $7
           FROM devices WHERE cluster_id = $8 AND gpu_uuid = $1 AND valid_to IS NULL AND org_id = $9",
    )
    .bind(&d.gpu_uuid)
    .bind(&d.node)
    .bind(&d.model)
    .bind(d.memory_mib.map(|v| v as i64))
    .bind(d.mig_enabled)
    .bind(mig)
    .bind(&d.vgpu_profile)
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    Ok(same)
}

/// Closes at `at` the device row in force of `gpu_uuid` (if it started before).
pub(crate) async fn close_device(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    gpu_uuid: &str,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE devices SET valid_to = $3
          WHERE cluster_id = $1 AND gpu_uuid = $2 AND valid_to IS NULL AND valid_from < $3 AND org_id = $4",
    )
    .bind(cluster.as_uuid())
    .bind(gpu_uuid)
    .bind(at)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Opens a device row from `at` with what `d` says.
pub(crate) async fn insert_device(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    d: &DeviceFact,
    at: OffsetDateTime,
    mig: &Value,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO devices (org_id, cluster_id, gpu_uuid, valid_from, node, model, memory_mib, mig_enabled,
            mig_devices, vgpu_profile)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&d.gpu_uuid)
    .bind(at)
    .bind(&d.node)
    .bind(&d.model)
    .bind(d.memory_mib.map(|v| v as i64))
    .bind(d.mig_enabled)
    .bind(mig)
    .bind(&d.vgpu_profile)
    .execute(tx.conn())
    .await?;
    Ok(())
}
