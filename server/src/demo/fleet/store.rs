//! SQL of the synthetic fleet: its reference rows, inventory, allocations, usage and marker, as column vectors for
//! `INSERT … SELECT FROM unnest(…)` (COPY is refused on tables with row-level security).

use std::{collections::HashMap, ops::Range};

use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// Device rows as columns: (cluster, GPU UUID, node, model, memory MiB, MIG enabled, MIG devices as JSON text).
pub(super) type DeviceCols = (Vec<Uuid>, Vec<String>, Vec<String>, Vec<String>, Vec<i64>, Vec<bool>, Vec<String>);

/// Node rows as columns: (cluster, name, node UID, GPU product).
pub(super) type NodeCols = (Vec<Uuid>, Vec<String>, Vec<Uuid>, Vec<String>);

/// Nodes' sharing as columns: (MIG strategy, sharing strategy, replicas).
pub(super) type NodeStrategyCols = (Vec<Option<String>>, Vec<Option<String>>, Vec<Option<i32>>);

/// Namespace ownership as columns: (namespace UID, valid from, valid to, tenant).
pub(super) type OwnershipCols = (Vec<Uuid>, Vec<OffsetDateTime>, Vec<Option<OffsetDateTime>>, Vec<Uuid>);

/// Quota rows as columns: (quota, tenant, department, scope department, GPU class, GPUs as text).
pub(super) type QuotaCols = (Vec<Uuid>, Vec<Option<Uuid>>, Vec<Option<Uuid>>, Vec<Uuid>, Vec<String>, Vec<String>);

/// Quotas' validity as columns: (valid from, valid to).
pub(super) type QuotaTimes = (Vec<OffsetDateTime>, Vec<Option<OffsetDateTime>>);

/// Service usage as columns: (model, tenant name, tenant, window start, window end).
pub(super) type UsageCols<'a> = (Vec<&'a str>, Vec<String>, Vec<Uuid>, Vec<OffsetDateTime>, Vec<OffsetDateTime>);

/// Service usage counts as columns: (requests, input tokens, output tokens, time-to-first-token sum).
pub(super) type UsageNums = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);

/// Endpoint totals as columns: (model, pod, window start, window end).
pub(super) type TotalCols<'a> = (Vec<&'a str>, Vec<String>, Vec<OffsetDateTime>, Vec<OffsetDateTime>);

/// Endpoint totals' counts as columns: (requests, input tokens, output tokens).
pub(super) type TotalNums = (Vec<i64>, Vec<i64>, Vec<i64>);

/// Telemetry series keys as columns: (cluster, GPU UUID, GPU instance, node, MIG profile).
pub(super) type SeriesCols<'a> = (Vec<Uuid>, Vec<String>, Vec<i32>, Vec<String>, Vec<Option<&'a str>>);

/// The details of the latest marker `action`/`target` in the audit log.
pub(super) async fn latest_marker(
    tx: &mut OrgTx,
    org: Uuid,
    action: &str,
    target: &str,
) -> Result<Option<Value>, DbError> {
    let marker: Option<Value> = sqlx::query_scalar(
        "SELECT details FROM audit_log WHERE org_id = $1 AND action = $2 AND target = $3 ORDER BY at DESC LIMIT 1",
    )
    .bind(org)
    .bind(action)
    .bind(target)
    .fetch_optional(tx.conn())
    .await?;
    Ok(marker)
}

/// Inserts departments `ids`/`names` (a name defined already keeps its ID) and returns every name's ID.
pub(super) async fn upsert_departments(
    tx: &mut OrgTx,
    org: Uuid,
    ids: &[Uuid],
    names: &[String],
    epoch: OffsetDateTime,
) -> Result<HashMap<String, Uuid>, DbError> {
    sqlx::query(
        "INSERT INTO departments (org_id, department_id, name, created_at)
         SELECT $1, u.id, u.name, $4 FROM unnest($2::uuid[], $3::text[]) AS u(id, name) ON CONFLICT DO NOTHING",
    )
    .bind(org)
    .bind(ids)
    .bind(names)
    .bind(epoch)
    .execute(tx.conn())
    .await?;
    let rows: Vec<(String, Uuid)> =
        sqlx::query_as("SELECT name, department_id FROM departments WHERE org_id = $1 AND name = ANY($2)")
            .bind(org)
            .bind(names)
            .fetch_all(tx.conn())
            .await?;
    Ok(rows.into_iter().collect())
}

/// Inserts clusters `ids`/`names` (a name defined already keeps its ID) and returns every name's ID.
pub(super) async fn upsert_clusters(
    tx: &mut OrgTx,
    org: Uuid,
    ids: &[Uuid],
    names: &[String],
    epoch: OffsetDateTime,
) -> Result<HashMap<String, Uuid>, DbError> {
    sqlx::query(
        "INSERT INTO clusters (org_id, cluster_id, name, created_at)
         SELECT $1, u.id, u.name, $4 FROM unnest($2::uuid[], $3::text[]) AS u(id, name) ON CONFLICT DO NOTHING",
    )
    .bind(org)
    .bind(ids)
    .bind(names)
    .bind(epoch)
    .execute(tx.conn())
    .await?;
    let rows: Vec<(String, Uuid)> =
        sqlx::query_as("SELECT name, cluster_id FROM clusters WHERE org_id = $1 AND name = ANY($2)")
            .bind(org)
            .bind(names)
            .fetch_all(tx.conn())
            .await?;
    Ok(rows.into_iter().collect())
}

/// Inserts tenants (a name defined already is left alone).
pub(super) async fn insert_tenants(
    tx: &mut OrgTx,
    org: Uuid,
    ids: &[Uuid],
    departments: &[Uuid],
    names: &[String],
    epoch: OffsetDateTime,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at)
         SELECT $1, u.id, u.dept, u.name, $5 FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS u(id, dept, name)
         ON CONFLICT DO NOTHING",
    )
    .bind(org)
    .bind(ids)
    .bind(departments)
    .bind(names)
    .bind(epoch)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The tenants named `names`: (name, tenant, department).
pub(super) async fn tenants_named(
    tx: &mut OrgTx,
    org: Uuid,
    names: &[String],
) -> Result<Vec<(String, Uuid, Uuid)>, DbError> {
    let rows =
        sqlx::query_as("SELECT name, tenant_id, department_id FROM tenants WHERE org_id = $1 AND name = ANY($2)")
            .bind(org)
            .bind(names)
            .fetch_all(tx.conn())
            .await?;
    Ok(rows)
}

/// Inserts devices valid from `epoch`, with their vGPU profiles.
pub(super) async fn insert_devices(
    tx: &mut OrgTx,
    org: Uuid,
    epoch: OffsetDateTime,
    cols: &DeviceCols,
    vgpu: &[Option<String>],
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO devices (org_id, cluster_id, gpu_uuid, valid_from, node, model, memory_mib, mig_enabled,
                              mig_devices, vgpu_profile)
         SELECT $1, u.c, u.g, $2, u.n, u.m, u.mem, u.mig, u.migs::jsonb, u.vgpu
           FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bool[], $9::text[],
                       $10::text[]) AS u(c, g, n, m, mem, mig, migs, vgpu)",
    )
    .bind(org)
    .bind(epoch)
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .bind(&cols.4)
    .bind(&cols.5)
    .bind(&cols.6)
    .bind(vgpu)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts nodes (8 GPUs each) valid from `epoch`.
pub(super) async fn insert_nodes(
    tx: &mut OrgTx,
    org: Uuid,
    epoch: OffsetDateTime,
    cols: &NodeCols,
    strategy: &NodeStrategyCols,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO nodes (org_id, cluster_id, name, valid_from, node_uid, gpu_product, gpu_count, mig_strategy,
                            sharing_strategy, replicas)
         SELECT $1, u.c, u.n, $2, u.uid, u.p, 8, u.mig, u.s, u.r
           FROM unnest($3::uuid[], $4::text[], $5::uuid[], $6::text[], $7::text[], $8::text[], $9::int[])
             AS u(c, n, uid, p, mig, s, r)",
    )
    .bind(org)
    .bind(epoch)
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .bind(&strategy.0)
    .bind(&strategy.1)
    .bind(&strategy.2)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts namespaces created at `epoch`.
pub(super) async fn insert_namespaces(
    tx: &mut OrgTx,
    org: Uuid,
    ids: &[Uuid],
    clusters: &[Uuid],
    names: &[String],
    epoch: OffsetDateTime,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO namespaces (org_id, namespace_uid, cluster_id, name, created_at)
         SELECT $1, u.id, u.c, u.n, $5 FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS u(id, c, n)",
    )
    .bind(org)
    .bind(ids)
    .bind(clusters)
    .bind(names)
    .bind(epoch)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts namespace ownership from labels.
pub(super) async fn insert_ownership(tx: &mut OrgTx, org: Uuid, cols: &OwnershipCols) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source)
         SELECT $1, u.ns, u.f, u.t, u.tenant, 'label'
           FROM unnest($2::uuid[], $3::timestamptz[], $4::timestamptz[], $5::uuid[]) AS u(ns, f, t, tenant)",
    )
    .bind(org)
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts quotas set by an administrator (`actor`).
pub(super) async fn insert_quotas(
    tx: &mut OrgTx,
    org: Uuid,
    cols: &QuotaCols,
    times: &QuotaTimes,
    actor: &str,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO quotas (org_id, quota_id, tenant_id, department_id, scope_department_id, gpu_class, gpus,
                             valid_from, valid_to, source, created_by)
         SELECT $1, u.id, u.t, u.d, u.s, u.c, u.g::numeric, u.f, u.e, 'admin', $10
           FROM unnest($2::uuid[], $3::uuid[], $4::uuid[], $5::uuid[], $6::text[], $7::text[], $8::timestamptz[],
                       $9::timestamptz[]) AS u(id, t, d, s, c, g, f, e)",
    )
    .bind(org)
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .bind(&cols.4)
    .bind(&cols.5)
    .bind(&times.0)
    .bind(&times.1)
    .bind(actor)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Allocation intervals as columns, for one `unnest` insert.
#[derive(Default)]
pub(super) struct AllocCols {
    pub(super) cluster: Vec<Uuid>,
    pub(super) id: Vec<String>,
    pub(super) kind: Vec<&'static str>,
    pub(super) uid: Vec<Uuid>,
    pub(super) name: Vec<String>,
    pub(super) namespace: Vec<String>,
    pub(super) ns_uid: Vec<Uuid>,
    pub(super) container: Vec<Option<&'static str>>,
    pub(super) node: Vec<String>,
    pub(super) resource: Vec<String>,
    pub(super) units: Vec<i32>,
    pub(super) devices: Vec<String>,
    pub(super) model: Vec<&'static str>,
    pub(super) class: Vec<&'static str>,
    pub(super) mode: Vec<&'static str>,
    pub(super) profile: Vec<Option<&'static str>>,
    pub(super) replicas: Vec<Option<i32>>,
    pub(super) num: Vec<i64>,
    pub(super) den: Vec<i64>,
    pub(super) start: Vec<OffsetDateTime>,
    pub(super) end: Vec<Option<OffsetDateTime>>,
    pub(super) estimated: Vec<bool>,
    pub(super) confidence: Vec<&'static str>,
    pub(super) endpoint: Vec<Option<&'static str>>,
}

/// Inserts allocation intervals; those on the shared endpoint are labelled with it and `model`.
pub(super) async fn insert_allocations(tx: &mut OrgTx, o: Uuid, c: &AllocCols, model: &str) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name,
             namespace, namespace_uid, container, node, resource, units, device_ids, gpu_model, gpu_class,
             sharing_mode, profile, replicas, fraction_num, fraction_den, started_at, ended_at, end_estimated,
             confidence, labels)
         SELECT $1, u.cluster, u.id, u.kind, u.uid, u.name, u.ns, u.ns_uid, u.container, u.node, u.resource, u.units,
                string_to_array(u.devices, ','), u.model, u.class, u.mode, u.profile, u.replicas, u.num, u.den,
                u.s, u.e, u.estimated, u.confidence,
                CASE WHEN u.endpoint IS NULL THEN '{}'::jsonb
                     ELSE jsonb_build_object('endpoint', u.endpoint, 'model', $26::text) END
           FROM unnest($2::uuid[], $3::text[], $4::text[], $5::uuid[], $6::text[], $7::text[], $8::uuid[], $9::text[],
                       $10::text[], $11::text[], $12::int[], $13::text[], $14::text[], $15::text[], $16::text[],
                       $17::text[], $18::int[], $19::bigint[], $20::bigint[], $21::timestamptz[], $22::timestamptz[],
                       $23::bool[], $24::text[], $25::text[])
             AS u(cluster, id, kind, uid, name, ns, ns_uid, container, node, resource, units, devices, model, class,
                  mode, profile, replicas, num, den, s, e, estimated, confidence, endpoint)",
    )
    .bind(o)
    .bind(&c.cluster)
    .bind(&c.id)
    .bind(&c.kind)
    .bind(&c.uid)
    .bind(&c.name)
    .bind(&c.namespace)
    .bind(&c.ns_uid)
    .bind(&c.container)
    .bind(&c.node)
    .bind(&c.resource)
    .bind(&c.units)
    .bind(&c.devices)
    .bind(&c.model)
    .bind(&c.class)
    .bind(&c.mode)
    .bind(&c.profile)
    .bind(&c.replicas)
    .bind(&c.num)
    .bind(&c.den)
    .bind(&c.start)
    .bind(&c.end)
    .bind(&c.estimated)
    .bind(&c.confidence)
    .bind(&c.endpoint)
    .bind(model)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts the tenants' usage of `endpoint` on `cluster`.
pub(super) async fn insert_service_usage(
    tx: &mut OrgTx,
    o: Uuid,
    cluster: Uuid,
    endpoint: &str,
    cols: &UsageCols<'_>,
    nums: &UsageNums,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO service_usage (org_id, cluster_id, endpoint, model, tenant_name, tenant_id, window_start,
                                    window_end, requests, input_tokens, output_tokens, ttft_ms_sum, ttft_count)
         SELECT $1, $2, $3, u.m, u.tn, u.t, u.s, u.e, u.r, u.i, u.o, u.ttft, u.r
           FROM unnest($4::text[], $5::text[], $6::uuid[], $7::timestamptz[], $8::timestamptz[], $9::bigint[],
                       $10::bigint[], $11::bigint[], $12::bigint[]) AS u(m, tn, t, s, e, r, i, o, ttft)",
    )
    .bind(o)
    .bind(cluster)
    .bind(endpoint)
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .bind(&cols.4)
    .bind(&nums.0)
    .bind(&nums.1)
    .bind(&nums.2)
    .bind(&nums.3)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts rows `r` of what the model servers of `endpoint` on `cluster` counted.
#[allow(clippy::too_many_arguments)] // the rows are a range of the columns
pub(super) async fn insert_endpoint_totals(
    tx: &mut OrgTx,
    o: Uuid,
    cluster: Uuid,
    endpoint: &str,
    cols: &TotalCols<'_>,
    nums: &TotalNums,
    r: Range<usize>,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO endpoint_totals (org_id, cluster_id, endpoint, model, server, pod, window_start, window_end,
                                      requests, input_tokens, output_tokens)
         SELECT $1, $2, $3, u.m, 'vllm', u.p, u.s, u.e, u.r, u.i, u.o
           FROM unnest($4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::bigint[], $9::bigint[],
                       $10::bigint[]) AS u(m, p, s, e, r, i, o)",
    )
    .bind(o)
    .bind(cluster)
    .bind(endpoint)
    .bind(&cols.0[r.clone()])
    .bind(&cols.1[r.clone()])
    .bind(&cols.2[r.clone()])
    .bind(&cols.3[r.clone()])
    .bind(&nums.0[r.clone()])
    .bind(&nums.1[r.clone()])
    .bind(&nums.2[r])
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Writes the fleet's marker (`action`/`target`) into the audit log.
pub(super) async fn insert_fleet_marker(
    tx: &mut OrgTx,
    o: Uuid,
    actor: &str,
    action: &str,
    target: &str,
    details: &Value,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, reason, details)
         VALUES ($1, $2, $3, $4, $5, 'synthetic demo fleet', $6)",
    )
    .bind(o)
    .bind(Uuid::new_v4())
    .bind(actor)
    .bind(action)
    .bind(target)
    .bind(details)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A telemetry series' key and ID.
#[derive(sqlx::FromRow)]
pub(super) struct SeriesRow {
    /// Cluster.
    pub(super) cluster_id: Uuid,
    /// Physical GPU.
    pub(super) gpu_uuid: String,
    /// MIG GPU instance (-1: the whole GPU).
    pub(super) gpu_instance_id: i32,
    /// The series' ID.
    pub(super) series_id: i64,
}

/// Writes telemetry series (made where new) and returns each one's key and ID.
pub(super) async fn upsert_series(tx: &mut OrgTx, o: Uuid, cols: &SeriesCols<'_>) -> Result<Vec<SeriesRow>, DbError> {
    let rows = sqlx::query_as(
        "INSERT INTO telemetry_series (org_id, cluster_id, gpu_uuid, gpu_instance_id, node, mig_profile)
         SELECT $1, * FROM unnest($2::uuid[], $3::text[], $4::int[], $5::text[], $6::text[])
         ON CONFLICT (org_id, cluster_id, gpu_uuid, gpu_instance_id) DO UPDATE SET node = EXCLUDED.node
         RETURNING cluster_id, gpu_uuid, gpu_instance_id, series_id",
    )
    .bind(o)
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .bind(&cols.4)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}
