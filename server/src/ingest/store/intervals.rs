//! SQL of allocation intervals: the inventory they are resolved against, the stored facts they are derived from,
//! device assignments, and the one-statement upsert of a batch's intervals.

use std::collections::BTreeMap;

use gpuledger_core::ids::{ClusterId, OrgId};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    bulk::{col, constant, text_arrays},
    db::{DbError, OrgTx},
};

/// An approved profile fraction: (kind `mig`/`vgpu`, model, profile, numerator, denominator, valid from, valid to).
pub(crate) type ProfileRow = (String, String, String, i64, i64, OffsetDateTime, Option<OffsetDateTime>);

/// An approved GPU model.
#[derive(sqlx::FromRow)]
pub(crate) struct ModelRow {
    /// The model's name as approved.
    pub(crate) model: String,
    /// From when.
    pub(crate) valid_from: OffsetDateTime,
    /// Until when (`None`: open).
    pub(crate) valid_to: Option<OffsetDateTime>,
    /// Its priced class.
    pub(crate) gpu_class: String,
    /// Its memory in MiB, if set.
    pub(crate) memory_mib: Option<i32>,
}

/// The organization's approved MIG and vGPU profile fractions.
pub(crate) async fn profile_rows(tx: &mut OrgTx) -> Result<Vec<ProfileRow>, DbError> {
    let org = tx.org().as_uuid();
    let rows: Vec<ProfileRow> = sqlx::query_as(
        "SELECT 'mig', model, profile, fraction_num, fraction_den, valid_from, valid_to FROM mig_profiles
          WHERE org_id = $1
         UNION ALL
         SELECT 'vgpu', model, profile, fraction_num, fraction_den, valid_from, valid_to FROM vgpu_profiles
          WHERE org_id = $1",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// The organization's approved GPU models.
pub(crate) async fn model_rows(tx: &mut OrgTx) -> Result<Vec<ModelRow>, DbError> {
    let org = tx.org().as_uuid();
    let rows: Vec<ModelRow> =
        sqlx::query_as("SELECT model, valid_from, valid_to, gpu_class, memory_mib FROM gpu_models WHERE org_id = $1")
            .bind(org)
            .fetch_all(tx.conn())
            .await?;
    Ok(rows)
}

/// The share-basis versions of `cluster` and of the organization, by start: (the cluster's own, basis, valid from,
/// valid to).
pub(crate) async fn share_basis_rows(
    tx: &mut OrgTx,
    cluster: ClusterId,
) -> Result<Vec<(bool, String, OffsetDateTime, Option<OffsetDateTime>)>, DbError> {
    let rows = sqlx::query_as(
        "SELECT cluster_id IS NOT NULL, basis, valid_from, valid_to FROM share_bases
          WHERE org_id = $1 AND (cluster_id IS NULL OR cluster_id = $2) ORDER BY valid_from",
    )
    .bind(tx.org().as_uuid())
    .bind(cluster.as_uuid())
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Takes the transaction-scoped advisory lock `key`.
pub(crate) async fn advisory_xact_lock(tx: &mut OrgTx, key: i64) -> Result<(), DbError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(key).execute(tx.conn()).await?;
    Ok(())
}

/// The latest assignment of each pod container and resource, as columns.
pub(crate) struct AssignedColumns<'a> {
    /// Pod UIDs (matched by UID).
    pub(crate) uids: Vec<Option<Uuid>>,
    /// Namespaces (matched by name).
    pub(crate) namespaces: Vec<&'a str>,
    /// Pod names (matched by name).
    pub(crate) pods: Vec<&'a str>,
    /// Containers.
    pub(crate) containers: Vec<&'a str>,
    /// Resources.
    pub(crate) resources: Vec<&'a str>,
    /// Device IDs (JSON arrays).
    pub(crate) devices: Vec<Value>,
    /// When each was assigned.
    pub(crate) ats: Vec<OffsetDateTime>,
}

/// Puts assignments on their intervals, matched by pod UID (`by_uid`) or by namespace and pod name, where the
/// interval's devices came from an earlier assignment or there were none.
pub(crate) async fn update_assigned_devices(
    tx: &mut OrgTx,
    cluster: ClusterId,
    by_uid: bool,
    a: &AssignedColumns<'_>,
) -> Result<(), DbError> {
    let match_sql =
        if by_uid { "a.holder_uid = u.pod_uid" } else { "a.namespace = u.namespace AND a.holder_name = u.pod" };
    let org = tx.org().as_uuid();
    sqlx::query(&format!(
        "UPDATE allocation_intervals a
            SET device_ids = ARRAY(SELECT jsonb_array_elements_text(u.devices)), devices_assigned_at = u.at,
                updated_at = now()
           FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::timestamptz[])
                AS u(pod_uid, namespace, pod, container, resource, devices, at)
          WHERE a.org_id = $9 AND a.cluster_id = $1 AND {match_sql} AND a.container = u.container
            AND a.resource = u.resource
            AND ((a.devices_assigned_at IS NULL AND cardinality(a.device_ids) = 0) OR a.devices_assigned_at < u.at)"
    ))
    .bind(cluster.as_uuid())
    .bind(&a.uids)
    .bind(&a.namespaces)
    .bind(&a.pods)
    .bind(&a.containers)
    .bind(&a.resources)
    .bind(&a.devices)
    .bind(&a.ats)
    .bind(org)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A container interval still without devices.
#[derive(sqlx::FromRow)]
pub(crate) struct AwaitingDevices {
    /// The pod's UID.
    pub(crate) holder_uid: Uuid,
    /// Its namespace.
    pub(crate) namespace: String,
    /// The pod's name.
    pub(crate) holder_name: String,
    /// The container.
    pub(crate) container: String,
    /// The resource it requested.
    pub(crate) resource: String,
}

/// Of `allocation_ids`, the container intervals still without devices.
pub(crate) async fn intervals_awaiting_devices(
    tx: &mut OrgTx,
    cluster: ClusterId,
    allocation_ids: &[String],
) -> Result<Vec<AwaitingDevices>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as(
        "SELECT holder_uid, namespace, holder_name, container, resource FROM allocation_intervals
          WHERE cluster_id = $1 AND allocation_id = ANY($2) AND container IS NOT NULL
            AND cardinality(device_ids) = 0 AND devices_assigned_at IS NULL AND org_id = $3",
    )
    .bind(cluster.as_uuid())
    .bind(allocation_ids)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// The stored `device_assigned` facts about `subjects`: (subject, resource, device IDs, when).
pub(crate) async fn device_assignment_events(
    tx: &mut OrgTx,
    cluster: ClusterId,
    subjects: &[String],
) -> Result<Vec<(String, Option<String>, Value, OffsetDateTime)>, DbError> {
    let org = tx.org().as_uuid();
    let rows = sqlx::query_as(
        "SELECT subject, payload->>'resource', payload->'device_ids', occurred_at FROM allocation_events
          WHERE cluster_id = $1 AND subject = ANY($2) AND kind = 'device_assigned' AND org_id = $3",
    )
    .bind(cluster.as_uuid())
    .bind(subjects)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Intervals an inventory change from `from` may concern: (cluster, allocation, GPU model, without fraction or
/// class).
pub(crate) async fn inventory_candidates(
    tx: &mut OrgTx,
    org: OrgId,
    from: OffsetDateTime,
) -> Result<Vec<(Uuid, String, Option<String>, bool)>, DbError> {
    let rows = sqlx::query_as(
        "SELECT cluster_id, allocation_id, gpu_model, (fraction_num IS NULL OR gpu_class IS NULL)
           FROM allocation_intervals
          WHERE org_id = $2 AND (started_at >= $1 OR fraction_num IS NULL OR gpu_class IS NULL)",
    )
    .bind(from)
    .bind(org.as_uuid())
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// The soft-shared intervals on `cluster` (`None`: every cluster) started since `from` or without a fraction:
/// (cluster, allocation).
pub(crate) async fn soft_share_candidates(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: Option<Uuid>,
    from: OffsetDateTime,
) -> Result<Vec<(Uuid, String)>, DbError> {
    let rows = sqlx::query_as(
        "SELECT cluster_id, allocation_id FROM allocation_intervals
          WHERE org_id = $1 AND sharing_mode = 'soft_share' AND (started_at >= $2 OR fraction_num IS NULL)
            AND ($3::uuid IS NULL OR cluster_id = $3)",
    )
    .bind(org.as_uuid())
    .bind(from)
    .bind(cluster)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// The stored namespace facts whose labels name tenant `name`, in order: (cluster, event ID, payload).
pub(crate) async fn namespace_facts_naming(
    tx: &mut OrgTx,
    org: OrgId,
    name: &str,
) -> Result<Vec<(Uuid, String, Value)>, DbError> {
    let rows = sqlx::query_as(
        "SELECT cluster_id, event_id, payload FROM allocation_events
          WHERE org_id = $2 AND kind = 'namespace_observed' AND payload->'labels'->>'tenant' = $1
          ORDER BY occurred_at, event_id",
    )
    .bind(name)
    .bind(org.as_uuid())
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// The stored start, end and vanish facts of `allocation_ids`: (subject, event ID, payload), by subject and event.
pub(crate) async fn allocation_facts(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    allocation_ids: &[String],
) -> Result<Vec<(String, String, Value)>, DbError> {
    let rows = sqlx::query_as(
        "SELECT subject, event_id, payload FROM allocation_events
          WHERE org_id = $1 AND cluster_id = $2 AND subject = ANY($3)
            AND kind IN ('allocation_started', 'allocation_ended', 'allocation_vanished')
          ORDER BY subject, event_id",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(allocation_ids)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Each node's latest GPU product label on `cluster`.
pub(crate) async fn node_products(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
) -> Result<BTreeMap<String, String>, DbError> {
    let rows = sqlx::query_as::<_, (String, String)>(
        "SELECT DISTINCT ON (name) name, gpu_product FROM nodes
          WHERE cluster_id = $1 AND gpu_product IS NOT NULL AND org_id = $2 ORDER BY name, valid_from DESC",
    )
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .fetch_all(tx.conn())
    .await?;
    Ok(rows.into_iter().collect())
}

/// The UID of the namespace named `name` on `cluster` that existed at `at` (the latest created).
pub(crate) async fn namespace_uid_at(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    name: &str,
    at: OffsetDateTime,
) -> Result<Option<Uuid>, DbError> {
    let uid = sqlx::query_scalar(
        "SELECT namespace_uid FROM namespaces WHERE cluster_id = $1 AND name = $2 AND created_at <= $3
                   AND (deleted_at IS NULL OR deleted_at >= $3) AND org_id = $4 ORDER BY created_at DESC LIMIT 1",
    )
    .bind(cluster.as_uuid())
    .bind(name)
    .bind(at)
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    Ok(uid)
}

/// Records an `inventory_gap` finding about `allocation_id` (once).
pub(crate) async fn insert_inventory_gap_finding(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    allocation_id: &str,
    started_at: OffsetDateTime,
    details: &Value,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO data_quality_findings (org_id, cluster_id, finding_id, kind, subject, occurred_from, details)
                 VALUES ($1, $2, $3, 'inventory_gap', $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(format!("inventory-gap/{allocation_id}"))
    .bind(allocation_id)
    .bind(started_at)
    .bind(details)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Interval rows as columns, for one `unnest` upsert.
#[derive(Default)]
pub(crate) struct IntervalRows {
    pub(crate) allocation_id: Vec<String>,
    pub(crate) holder_kind: Vec<Option<String>>,
    pub(crate) holder_uid: Vec<Uuid>,
    pub(crate) holder_name: Vec<String>,
    pub(crate) namespace: Vec<String>,
    pub(crate) namespace_uid: Vec<Option<Uuid>>,
    pub(crate) container: Vec<Option<String>>,
    pub(crate) node: Vec<Option<String>>,
    pub(crate) resource: Vec<String>,
    pub(crate) units: Vec<i32>,
    pub(crate) device_ids: Vec<serde_json::Value>,
    pub(crate) gpu_model: Vec<Option<String>>,
    pub(crate) gpu_class: Vec<Option<String>>,
    pub(crate) sharing_mode: Vec<String>,
    pub(crate) profile: Vec<Option<String>>,
    pub(crate) replicas: Vec<Option<i32>>,
    pub(crate) fraction_num: Vec<Option<i64>>,
    pub(crate) fraction_den: Vec<Option<i64>>,
    pub(crate) started_at: Vec<OffsetDateTime>,
    pub(crate) ended_at: Vec<Option<OffsetDateTime>>,
    pub(crate) end_estimated: Vec<bool>,
    pub(crate) confidence: Vec<String>,
    pub(crate) inventory_gap: Vec<Option<String>>,
    pub(crate) share: Vec<Option<String>>,
    pub(crate) share_basis: Vec<Option<String>>,
    pub(crate) labels: Vec<serde_json::Value>,
}

/// Upserts a batch's intervals in one statement (a row-per-statement upsert was the slowest part of ingest).
pub(crate) async fn upsert_intervals(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    rows: &IntervalRows,
) -> Result<(), DbError> {
    let (o, c) = (org.as_uuid(), cluster.as_uuid());
    let device_arrays: Vec<Vec<String>> = rows
        .device_ids
        .iter()
        .map(|v| {
            v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
        })
        .collect();
    crate::bulk::execute(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid,
                       holder_name, namespace, namespace_uid, container, node, resource, units, device_ids, gpu_model,
                       gpu_class, sharing_mode, profile, replicas, fraction_num, fraction_den, started_at, ended_at,
                       end_estimated, confidence, inventory_gap, share, share_basis, labels)",
            row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16},
                  {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}",
            consts: &[constant("uuid", &o), constant("uuid", &c)],
            cols: &[
                col("text", &rows.allocation_id),
                col("text", &rows.holder_kind),
                col("uuid", &rows.holder_uid),
                col("text", &rows.holder_name),
                col("text", &rows.namespace),
                col("uuid", &rows.namespace_uid),
                col("text", &rows.container),
                col("text", &rows.node),
                col("text", &rows.resource),
                col("int", &rows.units),
                text_arrays(&rows.device_ids, &device_arrays),
                col("text", &rows.gpu_model),
                col("text", &rows.gpu_class),
                col("text", &rows.sharing_mode),
                col("text", &rows.profile),
                col("int", &rows.replicas),
                col("int8", &rows.fraction_num),
                col("int8", &rows.fraction_den),
                col("timestamptz", &rows.started_at),
                col("timestamptz", &rows.ended_at),
                col("bool", &rows.end_estimated),
                col("text", &rows.confidence),
                col("text", &rows.inventory_gap),
                col("text", &rows.share),
                col("text", &rows.share_basis),
                col("jsonb", &rows.labels),
            ],
            tail: "ON CONFLICT (org_id, cluster_id, allocation_id) DO UPDATE SET
                       namespace_uid = EXCLUDED.namespace_uid, gpu_class = EXCLUDED.gpu_class,
                       fraction_num = EXCLUDED.fraction_num, fraction_den = EXCLUDED.fraction_den,
                       ended_at = EXCLUDED.ended_at, end_estimated = EXCLUDED.end_estimated,
                       confidence = EXCLUDED.confidence, inventory_gap = EXCLUDED.inventory_gap, share = EXCLUDED.share,
                       share_basis = EXCLUDED.share_basis, updated_at = EXCLUDED.updated_at",
        },
    )
    .await?;
    Ok(())
}
