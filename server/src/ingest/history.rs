//! History of what agents report about the cluster: namespace ownership, nodes and devices, each change closing
//! the row in force and opening a new one, whatever order facts arrive in.

use gpuledger_core::{
    ids::{ClusterId, OrgId},
    wire::FlaggedFact,
};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    db::{DbError, OrgTx},
    error::AppError,
};

/// Records a namespace and its owner. Ownership is history: a change closes the row in force at that time and
/// opens a new one; facts may arrive in any order.
pub(super) async fn apply_namespace(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &gpuledger_core::wire::NamespaceFact,
    event_id: &str,
    flagged: &mut Vec<FlaggedFact>,
) -> Result<(), AppError> {
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
    // Allocations that arrived before their namespace (watchers race; batches reorder) get its UID now, so the
    // result does not depend on arrival order.
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
    let tenant: Option<Uuid> = match &n.labels.tenant {
        None => None,
        Some(name) => {
            let id: Option<Uuid> = sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE name = $1 AND org_id = $2")
                .bind(name)
                .bind(org.as_uuid())
                .fetch_optional(tx.conn())
                .await?;
            if id.is_none() {
                let reason = format!("namespace {:?} names tenant {name:?}, which is not defined", n.name);
                sqlx::query(
                    "INSERT INTO data_quality_findings (org_id, cluster_id, finding_id, kind, subject, occurred_from, details)
                     VALUES ($1, $2, $3, 'unknown_tenant', $4, $5, $6) ON CONFLICT DO NOTHING",
                )
                .bind(org.as_uuid())
                .bind(cluster.as_uuid())
                .bind(format!("unknown-tenant/{event_id}"))
                .bind(n.namespace_uid.to_string())
                .bind(n.labels_since)
                .bind(json!({ "reason": reason }))
                .execute(tx.conn())
                .await?;
                flagged.push(FlaggedFact { event_id: event_id.to_string(), reason });
            }
            id
        }
    };
    let since = n.labels_since;
    // The row in force at `since`, and the first row after it.
    let current: Option<(OffsetDateTime, Option<OffsetDateTime>, Uuid)> = sqlx::query_as(
        "SELECT valid_from, valid_to, tenant_id FROM namespace_ownership
          WHERE namespace_uid = $1 AND valid_from <= $2 AND (valid_to IS NULL OR valid_to > $2) AND org_id = $3",
    )
    .bind(n.namespace_uid)
    .bind(since)
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    let next_from: Option<OffsetDateTime> = sqlx::query_scalar(
        "SELECT min(valid_from) FROM namespace_ownership WHERE namespace_uid = $1 AND valid_from > $2 AND org_id = $3",
    )
    .bind(n.namespace_uid)
    .bind(since)
    .bind(org.as_uuid())
    .fetch_one(tx.conn())
    .await?;
    let until = match &current {
        Some((_, to, current_tenant)) => {
            if Some(*current_tenant) == tenant {
                return Ok(()); // nothing changes
            }
            // Close the row in force at `since` (closed, never overwritten).
            sqlx::query(
                "UPDATE namespace_ownership SET valid_to = $3
                  WHERE namespace_uid = $1 AND valid_from = $2 AND org_id = $4",
            )
            .bind(n.namespace_uid)
            .bind(current.as_ref().map(|c| c.0))
            .bind(since)
            .bind(org.as_uuid())
            .execute(tx.conn())
            .await?;
            *to
        }
        None => next_from,
    };
    if let Some(tenant) = tenant
        && current.as_ref().is_none_or(|(from, _, _)| *from < since)
    {
        sqlx::query(
            "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source)
             VALUES ($1, $2, $3, $4, $5, 'label')",
        )
        .bind(org.as_uuid())
        .bind(n.namespace_uid)
        .bind(since)
        .bind(until)
        .bind(tenant)
        .execute(tx.conn())
        .await?;
    } else if let (Some(tenant), Some((from, _, _))) = (tenant, &current) {
        // Same start instant, new owner: the closed row would be empty; replace its owner in place.
        sqlx::query(
            "UPDATE namespace_ownership SET tenant_id = $3, valid_to = $4
              WHERE namespace_uid = $1 AND valid_from = $2 AND org_id = $5",
        )
        .bind(n.namespace_uid)
        .bind(from)
        .bind(tenant)
        .bind(until)
        .bind(org.as_uuid())
        .execute(tx.conn())
        .await?;
    }
    if tenant.is_none() {
        // No owner from the labels: the rules for namespaces without labels fill what no entry covers.
        crate::store::fill_from_rules(tx, n.namespace_uid).await?;
    }
    Ok(())
}

pub(super) async fn apply_node(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &gpuledger_core::wire::NodeFact,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    let allocatable = serde_json::to_value(&n.allocatable).unwrap_or_default();
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
    .bind(&allocatable)
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .bind(&n.provider_id)
    .fetch_optional(tx.conn())
    .await?;
    if same == Some(true) {
        return Ok(());
    }
    sqlx::query(
        "UPDATE nodes SET valid_to = $3
          WHERE cluster_id = $1 AND name = $2 AND valid_to IS NULL AND valid_from < $3 AND org_id = $4",
    )
    .bind(cluster.as_uuid())
    .bind(&n.name)
    .bind(at)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
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
    .bind(&allocatable)
    .bind(&n.provider_id)
    .execute(tx.conn())
    .await?;
    Ok(())
}

pub(super) async fn apply_device(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    d: &gpuledger_core::wire::DeviceFact,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    let mig = serde_json::to_value(&d.mig_devices).unwrap_or_default();
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
    .bind(&mig)
    .bind(&d.vgpu_profile)
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    if same == Some(true) {
        return Ok(());
    }
    sqlx::query(
        "UPDATE devices SET valid_to = $3
          WHERE cluster_id = $1 AND gpu_uuid = $2 AND valid_to IS NULL AND valid_from < $3 AND org_id = $4",
    )
    .bind(cluster.as_uuid())
    .bind(&d.gpu_uuid)
    .bind(at)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
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
    .bind(&mig)
    .bind(&d.vgpu_profile)
    .execute(tx.conn())
    .await?;
    Ok(())
}
