//! SQL of the utilization, idle, inference and session analytics: reads inside the caller's organization-scoped
//! transaction, returned as rows for the analysis to assemble.

use futures::stream::BoxStream;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{db::OrgTx, error::AppError};

/// A namespace's owner over `[valid_from, valid_to)`.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct OwnerRow {
    pub namespace_uid: Uuid,
    pub valid_from: OffsetDateTime,
    pub valid_to: Option<OffsetDateTime>,
    pub tenant_id: Uuid,
}

/// Every namespace ownership overlapping `[from, to)`, by namespace and start.
pub(super) async fn owners_between(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<OwnerRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT namespace_uid, valid_from, valid_to, tenant_id FROM namespace_ownership
          WHERE org_id = $3 AND valid_from < $2 AND (valid_to IS NULL OR valid_to > $1)
          ORDER BY namespace_uid, valid_from",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// Every ownership of `namespaces`, by namespace and start.
pub(super) async fn owners_of(tx: &mut OrgTx, namespaces: &[Uuid]) -> Result<Vec<OwnerRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT namespace_uid, valid_from, valid_to, tenant_id FROM namespace_ownership
          WHERE org_id = $2 AND namespace_uid = ANY($1) ORDER BY namespace_uid, valid_from",
    )
    .bind(namespaces)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// Every MIG device of the organization's GPUs: (device UUID, parent GPU UUID, GPU instance ID when known).
pub(super) async fn mig_devices(tx: &mut OrgTx) -> Result<Vec<(String, String, Option<i32>)>, AppError> {
    Ok(sqlx::query_as(
        "SELECT m->>'uuid', min(d.gpu_uuid),
                min(CASE WHEN m->>'gpu_instance_id' ~ '^[0-9]{1,6}$' THEN (m->>'gpu_instance_id')::int END)
           FROM devices d
           CROSS JOIN LATERAL jsonb_array_elements(
               CASE WHEN jsonb_typeof(d.mig_devices) = 'array' THEN d.mig_devices ELSE '[]'::jsonb END) AS m
          WHERE d.org_id = $1 AND m->>'uuid' LIKE 'MIG-%' AND m->>'uuid' NOT LIKE 'MIG-GPU-%'
          GROUP BY 1",
    )
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// An allocation interval as the utilization analysis reads it.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct HeldRow {
    pub cluster_id: Uuid,
    pub allocation_id: String,
    pub namespace_uid: Option<Uuid>,
    pub fraction_num: Option<i64>,
    pub fraction_den: Option<i64>,
    pub started_at: OffsetDateTime,
    pub ended_at: Option<OffsetDateTime>,
    pub device_ids: Vec<String>,
    pub gpu_class: Option<String>,
    pub confidence: String,
    pub sharing_mode: String,
    pub holder_uid: Uuid,
    pub node: Option<String>,
}

/// Streams the allocation intervals overlapping `[from, to)` (of `tenant`'s namespaces over that time, when given):
/// a month holds a million of them, so they are not collected.
pub(super) fn held_between(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    to: OffsetDateTime,
    tenant: Option<Uuid>,
) -> BoxStream<'_, Result<HeldRow, sqlx::Error>> {
    let org = tx.org().as_uuid();
    sqlx::query_as::<_, HeldRow>(
        "SELECT a.cluster_id, a.allocation_id, a.namespace_uid, a.fraction_num, a.fraction_den, a.started_at,
                a.ended_at, a.device_ids, a.gpu_class, a.confidence, a.sharing_mode, a.holder_uid, a.node
           FROM allocation_intervals a
          WHERE a.org_id = $4 AND a.started_at < $2 AND (a.ended_at IS NULL OR a.ended_at > $1)
            AND ($3::uuid IS NULL OR a.namespace_uid IN (
                  SELECT o.namespace_uid FROM namespace_ownership o
                   WHERE o.org_id = $4 AND o.tenant_id = $3 AND o.valid_from < $2
                     AND (o.valid_to IS NULL OR o.valid_to > $1)))",
    )
    .bind(from)
    .bind(to)
    .bind(tenant)
    .bind(org)
    .fetch(tx.conn())
}

/// A node's per-process window: (cluster, node, window start, window end, pod UID, the pod's SM %).
pub(super) type ProcessRow = (Uuid, String, OffsetDateTime, OffsetDateTime, Option<String>, Option<f64>);

/// The per-process windows of `nodes` in `clusters` overlapping `[from, to)` (from a day before, windows being
/// short): one row per pod of `pod_uids` in a window, or one with no pod for a window none of them appears in.
pub(super) async fn process_windows(
    tx: &mut OrgTx,
    clusters: &[Uuid],
    nodes: &[String],
    from: OffsetDateTime,
    pod_uids: &[String],
    to: OffsetDateTime,
) -> Result<Vec<ProcessRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT w.cluster_id, w.node, w.window_start, w.window_end, p->>'pod_uid',
                CASE WHEN jsonb_typeof(p->'sm_pct'->'avg') = 'number' THEN (p->'sm_pct'->>'avg')::float8 END
           FROM process_windows w
           LEFT JOIN LATERAL jsonb_array_elements(w.pods) AS p ON p->>'pod_uid' = ANY($5)
          WHERE w.org_id = $1 AND w.cluster_id = ANY($2) AND w.node = ANY($3)
            AND w.window_start >= $4 - interval '1 day' AND w.window_start < $6 AND w.window_end > $4",
    )
    .bind(tx.org().as_uuid())
    .bind(clusters)
    .bind(nodes)
    .bind(from)
    .bind(pod_uids)
    .bind(to)
    .fetch_all(tx.conn())
    .await?)
}

/// The names of `tenants`: (tenant, name).
pub(super) async fn tenant_names(tx: &mut OrgTx, tenants: &[Uuid]) -> Result<Vec<(Uuid, String)>, AppError> {
    Ok(sqlx::query_as::<_, (Uuid, String)>(
        "SELECT tenant_id, name FROM tenants WHERE org_id = $2 AND tenant_id = ANY($1)",
    )
    .bind(tenants)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// `tenant` when the organization has it.
pub(super) async fn tenant_id(tx: &mut OrgTx, tenant: Uuid) -> Result<Option<Uuid>, AppError> {
    Ok(sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE org_id = $2 AND tenant_id = $1")
        .bind(tenant)
        .bind(tx.org().as_uuid())
        .fetch_optional(tx.conn())
        .await?)
}

/// `tenant`'s name, when the organization has it.
pub(super) async fn tenant_name(tx: &mut OrgTx, tenant: Uuid) -> Result<Option<String>, AppError> {
    Ok(sqlx::query_scalar("SELECT name FROM tenants WHERE org_id = $2 AND tenant_id = $1")
        .bind(tenant)
        .bind(tx.org().as_uuid())
        .fetch_optional(tx.conn())
        .await?)
}

/// Every tenant's department: (tenant, department).
pub(super) async fn tenant_departments(tx: &mut OrgTx) -> Result<Vec<(Uuid, Uuid)>, AppError> {
    Ok(sqlx::query_as::<_, (Uuid, Uuid)>("SELECT tenant_id, department_id FROM tenants WHERE org_id = $1")
        .bind(tx.org().as_uuid())
        .fetch_all(tx.conn())
        .await?)
}

/// A tenant with its department.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct TenantRow {
    pub tenant_id: Uuid,
    pub tenant: String,
    pub department_id: Uuid,
    pub department: String,
}

/// Every tenant with its department.
pub(super) async fn tenants_with_departments(tx: &mut OrgTx) -> Result<Vec<TenantRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT t.tenant_id, t.name AS tenant, d.department_id, d.name AS department
           FROM tenants t JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
          WHERE t.org_id = $1",
    )
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// `department` when the organization has it.
pub(super) async fn department_id(tx: &mut OrgTx, department: Uuid) -> Result<Option<Uuid>, AppError> {
    Ok(sqlx::query_scalar("SELECT department_id FROM departments WHERE org_id = $2 AND department_id = $1")
        .bind(department)
        .bind(tx.org().as_uuid())
        .fetch_optional(tx.conn())
        .await?)
}

/// An open allocation: (cluster, cluster name, allocation, `namespace/holder`, resource, GPU class).
pub(super) type OpenRow = (Uuid, String, String, String, String, Option<String>);

/// The allocations open at `now` that have a fraction (only those can be measured).
pub(super) async fn open_allocations(tx: &mut OrgTx, now: OffsetDateTime) -> Result<Vec<OpenRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT a.cluster_id, c.name, a.allocation_id, a.namespace || '/' || a.holder_name, a.resource, a.gpu_class
           FROM allocation_intervals a JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
          WHERE a.org_id = $1 AND a.ended_at IS NULL AND a.started_at < $2 AND a.fraction_num IS NOT NULL",
    )
    .bind(tx.org().as_uuid())
    .bind(now)
    .fetch_all(tx.conn())
    .await?)
}

/// An endpoint's allocation: (endpoint, fraction numerator, denominator, start, end, confidence).
pub(super) type EndpointAllocationRow = (String, i64, i64, OffsetDateTime, Option<OffsetDateTime>, String);

/// The allocations labelled with an endpoint that overlap `[from, to)` and have a fraction.
pub(super) async fn endpoint_allocations(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<EndpointAllocationRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT labels->>'endpoint', fraction_num, fraction_den, started_at, ended_at, confidence
           FROM allocation_intervals
          WHERE org_id = $3 AND labels ? 'endpoint' AND fraction_num IS NOT NULL AND fraction_den IS NOT NULL
            AND started_at < $2 AND (ended_at IS NULL OR ended_at > $1)",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// Attributed usage of an endpoint's model by a tenant: (endpoint, model, tenant, requests, input tokens, output
/// tokens, TTFT sum in ms, requests with a TTFT).
pub(super) type UsageRow = (String, String, Uuid, i64, i64, i64, i64, i64);

/// The tenants' usage of `[from, before)` by endpoint, model and tenant, from the ledger's source: an endpoint's
/// usage records when it has any in that time, else its service usage.
pub(super) async fn tenant_usage(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    before: OffsetDateTime,
) -> Result<Vec<UsageRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT endpoint, model, tenant_id, sum(requests)::bigint, sum(input_tokens)::bigint,
                sum(output_tokens)::bigint, coalesce(sum(ttft_sum), 0)::bigint, coalesce(sum(ttft_count), 0)::bigint
           FROM (SELECT endpoint, model, tenant_id, requests, input_tokens, output_tokens,
                        ttft_ms * requests AS ttft_sum, CASE WHEN ttft_ms IS NULL THEN 0 ELSE requests END AS ttft_count
                   FROM usage_records
                  WHERE org_id = $3 AND tenant_id IS NOT NULL AND started_at >= $1 AND started_at < $2
                 UNION ALL
                 SELECT endpoint, model, tenant_id, requests, input_tokens, output_tokens, ttft_ms_sum, ttft_count
                   FROM service_usage s
                  WHERE s.org_id = $3 AND tenant_id IS NOT NULL AND window_start >= $1 AND window_start < $2
                    AND NOT EXISTS (SELECT 1 FROM usage_records r
                                     WHERE r.org_id = $3 AND r.endpoint = s.endpoint
                                       AND r.started_at >= $1 AND r.started_at < $2)) u
          GROUP BY endpoint, model, tenant_id ORDER BY endpoint, model, tenant_id",
    )
    .bind(from)
    .bind(before)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// Service usage of `[from, before)` no tenant is known for: (requests, tokens).
pub(super) async fn unattributed_usage(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    before: OffsetDateTime,
) -> Result<(i64, i64), AppError> {
    Ok(sqlx::query_as(
        "SELECT coalesce(sum(requests), 0)::bigint, coalesce(sum(input_tokens + output_tokens), 0)::bigint
           FROM service_usage WHERE org_id = $3 AND tenant_id IS NULL AND window_start >= $1 AND window_start < $2",
    )
    .bind(from)
    .bind(before)
    .bind(tx.org().as_uuid())
    .fetch_one(tx.conn())
    .await?)
}

/// What the endpoints' model servers counted themselves in `[from, before)`: (endpoint, model, requests, input
/// tokens, output tokens).
pub(super) async fn endpoint_counts(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    before: OffsetDateTime,
) -> Result<Vec<(String, String, i64, i64, i64)>, AppError> {
    Ok(sqlx::query_as(
        "SELECT endpoint, model, sum(requests)::bigint, sum(input_tokens)::bigint, sum(output_tokens)::bigint
           FROM endpoint_totals WHERE org_id = $3 AND window_start >= $1 AND window_start < $2
          GROUP BY endpoint, model",
    )
    .bind(from)
    .bind(before)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// A tenant's usage record of an agent session.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct RecordRow {
    pub agent_session_id: String,
    pub endpoint: String,
    pub model: String,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub ttft_ms: Option<i64>,
}

/// `tenant`'s usage records with an agent session that started in `[from, before)`.
pub(super) async fn session_records(
    tx: &mut OrgTx,
    tenant: Uuid,
    from: OffsetDateTime,
    before: OffsetDateTime,
) -> Result<Vec<RecordRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT agent_session_id, endpoint, model, requests, input_tokens, output_tokens, ttft_ms
           FROM usage_records
          WHERE org_id = $4 AND tenant_id = $1 AND agent_session_id IS NOT NULL
            AND started_at >= $2 AND started_at < $3",
    )
    .bind(tenant)
    .bind(from)
    .bind(before)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// An allocation of an agent session: (session, namespace, fraction numerator, denominator, GPU class, start, end).
pub(super) type SessionAllocationRow =
    (String, Option<Uuid>, i64, i64, Option<String>, OffsetDateTime, Option<OffsetDateTime>);

/// The allocations labelled with an agent session that overlap `[from, to)` and have a fraction.
pub(super) async fn session_allocations(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<SessionAllocationRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT labels->>'agent_session', namespace_uid, fraction_num, fraction_den, gpu_class, started_at, ended_at
           FROM allocation_intervals
          WHERE org_id = $3 AND labels->>'agent_session' IS NOT NULL
            AND fraction_num IS NOT NULL AND fraction_den IS NOT NULL
            AND started_at < $2 AND (ended_at IS NULL OR ended_at > $1)",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}
