//! SQL of this feature: reads and writes inside the caller's organization-scoped transaction.

use super::bounds;
use crate::{db::OrgTx, error::AppError};
use gpuledger_api::close::EvidenceDetail;
use gpuledger_core::{
    Confidence, Fraction, Period,
    bundle::sha256_hex,
    decimal::Decimal,
    ids::{DepartmentId, TenantId},
    ledger::{
        AdjustmentKind, AdjustmentRecord, AllocationRecord, ClassCapacity, DepartmentRef, EndpointTotal, LedgerInput,
        QuotaHolder, QuotaRecord, TenantRef, UsageRecord,
    },
    policy::CostPolicy,
};
use serde_json::Value;
use std::collections::HashMap;
use time::OffsetDateTime;
use uuid::Uuid;

/// The approved inventory as a canonical JSON document, and its content hash (the inventory version).
pub async fn inventory(tx: &mut OrgTx) -> Result<(Value, String), AppError> {
    let org = tx.org().as_uuid();
    let doc: Value = sqlx::query_scalar(
        "SELECT jsonb_build_object(
            'gpu_classes', (SELECT COALESCE(jsonb_agg(jsonb_build_object('gpu_class', gpu_class, 'description', description)
                                ORDER BY gpu_class), '[]') FROM gpu_classes WHERE org_id = $1),
            'gpu_models', (SELECT COALESCE(jsonb_agg(jsonb_build_object('model', model, 'gpu_class', gpu_class,
                                'valid_from', valid_from, 'valid_to', valid_to) ORDER BY model, valid_from), '[]') FROM gpu_models WHERE org_id = $1),
            'mig_profiles', (SELECT COALESCE(jsonb_agg(jsonb_build_object('model', model, 'profile', profile,
                                'fraction', fraction_num || '/' || fraction_den, 'valid_from', valid_from, 'valid_to', valid_to)
                                ORDER BY model, profile, valid_from), '[]') FROM mig_profiles WHERE org_id = $1),
            'vgpu_profiles', (SELECT COALESCE(jsonb_agg(jsonb_build_object('model', model, 'profile', profile,
                                'fraction', fraction_num || '/' || fraction_den, 'valid_from', valid_from, 'valid_to', valid_to)
                                ORDER BY model, profile, valid_from), '[]') FROM vgpu_profiles WHERE org_id = $1),
            'timeslice_policies', (SELECT COALESCE(jsonb_agg(jsonb_build_object('cluster_id', cluster_id, 'name', name,
                                'replicas', replicas, 'valid_from', valid_from, 'valid_to', valid_to)
                                ORDER BY cluster_id, name, valid_from), '[]') FROM timeslice_policies WHERE org_id = $1))",
    )
    .bind(org)
    .fetch_one(tx.conn())
    .await?;
    // jsonb prints keys in a fixed order, so its text is canonical.
    let text = doc.to_string();
    Ok((doc, sha256_hex(text.as_bytes())[..16].to_string()))
}

pub(crate) type AllocRow = (
    String,
    String,
    i64,
    i64,
    Option<String>,
    OffsetDateTime,
    Option<OffsetDateTime>,
    String,
    Vec<String>,
    Option<String>,
    Option<Uuid>,
    Option<OffsetDateTime>,
    Option<OffsetDateTime>,
    Option<String>,
);

pub(crate) fn confidence(s: &str) -> Confidence {
    match s {
        "exact" => Confidence::Exact,
        "modeled" => Confidence::Modeled,
        _ => Confidence::Estimated,
    }
}

/// Allocation records of a period (split at namespace ownership changes) with devices resolved to physical GPUs.
pub async fn load_allocations(tx: &mut OrgTx, period: Period) -> Result<Vec<AllocationRecord>, AppError> {
    let (start, end) = bounds(period)?;
    let org = tx.org().as_uuid();
    let mig_parent: HashMap<String, String> = sqlx::query_as::<_, (String, String)>(
        "SELECT DISTINCT m->>'uuid', d.gpu_uuid FROM devices d, jsonb_array_elements(d.mig_devices) m
          WHERE d.org_id = $1 AND m ? 'uuid'",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .collect();
    // JIT compiles ~100 functions for these queries and costs more than it saves at this size.
    sqlx::query("SET LOCAL jit = off").execute(tx.conn()).await?;
    let rows: Vec<AllocRow> = sqlx::query_as(
        "SELECT c.name, a.allocation_id, a.fraction_num, a.fraction_den, a.gpu_class, a.started_at, a.ended_at,
                a.confidence,
                -- The allocation's devices, or kubelet's latest assignment kept on the interval by ingest.
                a.device_ids,
                a.labels->>'endpoint', o.tenant_id, o.valid_from, o.valid_to, a.share_basis
           FROM allocation_intervals a
           JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
           LEFT JOIN namespace_ownership o ON o.org_id = a.org_id AND o.namespace_uid = a.namespace_uid
                 AND tstzrange(o.valid_from, o.valid_to) && tstzrange(a.started_at, a.ended_at)
          WHERE a.org_id = $3 AND a.fraction_num IS NOT NULL
            AND a.started_at < $2 AND (a.ended_at IS NULL OR a.ended_at > $1)",
    )
    .bind(start)
    .bind(end)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    // Ordered here rather than in SQL: a million-row sort spills to disk in PostgreSQL, not in memory here.
    let mut rows = rows;
    rows.sort_unstable_by(|x, y| (&x.0, &x.1, x.11).cmp(&(&y.0, &y.1, y.11)));
    let mut out = Vec::with_capacity(rows.len());
    let mut last_id = String::new();
    let mut part = 0;
    for (cluster, alloc, num, den, class, s, e, conf, devices, endpoint, tenant, of, ot, basis) in rows {
        let id = format!("{cluster}/{alloc}");
        if id == last_id {
            part += 1;
        } else {
            part = 0;
            last_id.clone_from(&id);
        }
        // The part of the allocation under this owner.
        let (s2, e2) = match of {
            Some(of) => (
                s.max(of),
                match (e, ot) {
                    (Some(e), Some(ot)) => Some(e.min(ot)),
                    (Some(e), None) => Some(e),
                    (None, ot) => ot,
                },
            ),
            None => (s, e),
        };
        // Time-sliced replicas are named `UUID::N`; MIG devices resolve to their physical GPU.
        let mut devices: Vec<String> = devices
            .into_iter()
            .map(|d| d.split("::").next().unwrap_or_default().to_string())
            .map(|d| mig_parent.get(&d).cloned().unwrap_or(d))
            .collect();
        devices.sort();
        devices.dedup();
        out.push(AllocationRecord {
            id: if part == 0 { id } else { format!("{id}#{part}") },
            tenant: tenant.map(TenantId::from_uuid),
            gpu_class: class,
            fraction: Fraction::new(i128::from(num), i128::from(den))?,
            start: s2,
            end: e2,
            confidence: confidence(&conf),
            devices,
            endpoint,
            share_basis: basis.and_then(|b| b.parse().ok()),
        });
    }
    // Ownership rows that start after the allocation leave its earlier part unowned: not charged (shown in notes).
    Ok(out)
}

/// Everything the ledger of `period` is computed from, read now. Credits and late-data adjustments are added by
/// the caller ([`pending_adjustments`]).
#[allow(clippy::type_complexity)] // row tuples of plain queries
pub async fn load_input(tx: &mut OrgTx, period: Period, policy: CostPolicy) -> Result<LedgerInput, AppError> {
    let (start, end) = bounds(period)?;
    let org = tx.org().as_uuid();
    let departments = sqlx::query_as::<_, (Uuid, String)>(
        "SELECT department_id, name FROM departments WHERE org_id = $1 ORDER BY name",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(id, name)| DepartmentRef { id: DepartmentId::from_uuid(id), name })
    .collect();
    let tenants = sqlx::query_as::<_, (Uuid, String, Uuid)>(
        "SELECT tenant_id, name, department_id FROM tenants WHERE org_id = $1 ORDER BY name",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(id, name, d)| TenantRef { id: TenantId::from_uuid(id), name, department: DepartmentId::from_uuid(d) })
    .collect();
    let capacity = sqlx::query_as::<_, (String, i64)>(
        "SELECT m.gpu_class, count(DISTINCT d.gpu_uuid)
           FROM devices d
           JOIN gpu_models m ON m.org_id = d.org_id AND m.model = d.model
                AND tstzrange(m.valid_from, m.valid_to) && tstzrange(d.valid_from, d.valid_to)
          WHERE d.org_id = $3 AND d.valid_from < $2 AND (d.valid_to IS NULL OR d.valid_to > $1)
          GROUP BY m.gpu_class ORDER BY m.gpu_class",
    )
    .bind(start)
    .bind(end)
    .bind(org)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(gpu_class, n)| ClassCapacity { gpu_class, gpus: u32::try_from(n).unwrap_or(u32::MAX) })
    .collect();
    let quotas = sqlx::query_as::<
        _,
        (Uuid, Option<Uuid>, Option<Uuid>, String, String, OffsetDateTime, Option<OffsetDateTime>),
    >(
        "SELECT quota_id, tenant_id, department_id, gpu_class, gpus::text, valid_from, valid_to FROM quotas
          WHERE org_id = $3 AND valid_from < $2 AND (valid_to IS NULL OR valid_to > $1) AND gpus > 0
          ORDER BY quota_id",
    )
    .bind(start)
    .bind(end)
    .bind(org)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(id, t, d, gpu_class, gpus, valid_from, valid_to)| {
        let holder = match (t, d) {
            (Some(t), _) => QuotaHolder::Tenant(TenantId::from_uuid(t)),
            (None, Some(d)) => QuotaHolder::Department(DepartmentId::from_uuid(d)),
            (None, None) => return Err(AppError::Internal(format!("quota {id} has no holder"))),
        };
        Ok(QuotaRecord {
            id: id.to_string(),
            holder,
            gpu_class,
            gpus: Decimal::parse(&gpus)?.normalized(),
            valid_from,
            valid_to,
        })
    })
    .collect::<Result<Vec<_>, AppError>>()?;
    let allocations = load_allocations(tx, period).await?;
    let energy = if policy.energy.is_some() {
        // One span per device-hour (bundle format 2): the hour's exact joules over the span its windows cover.
        crate::telemetry::store::energy_hours(tx, start, end).await?
    } else {
        Vec::new()
    };
    let service_usage = sqlx::query_as::<_, (String, String, Uuid, i64, i64, i64)>(
        // An endpoint's gateway usage records, when it has any this month, are its per-tenant attribution;
        // otherwise the agents' model-server `service_usage` facts are.
        "SELECT endpoint, model, tenant_id, sum(requests)::bigint, sum(input_tokens)::bigint, sum(output_tokens)::bigint
           FROM (SELECT endpoint, model, tenant_id, requests, input_tokens, output_tokens FROM usage_records
                  WHERE org_id = $3 AND tenant_id IS NOT NULL AND started_at >= $1 AND started_at < $2
                 UNION ALL
                 SELECT endpoint, model, tenant_id, requests, input_tokens, output_tokens FROM service_usage s
                  WHERE s.org_id = $3 AND tenant_id IS NOT NULL AND window_start >= $1 AND window_start < $2
                    AND NOT EXISTS (SELECT 1 FROM usage_records r
                                     WHERE r.org_id = $3 AND r.endpoint = s.endpoint
                                       AND r.started_at >= $1 AND r.started_at < $2)) u
          GROUP BY endpoint, model, tenant_id ORDER BY endpoint, model, tenant_id",
    )
    .bind(start)
    .bind(end)
    .bind(org)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(endpoint, model, t, r, i, o)| UsageRecord {
        endpoint,
        model,
        tenant: TenantId::from_uuid(t),
        requests: u64::try_from(r).unwrap_or(0),
        input_tokens: u64::try_from(i).unwrap_or(0),
        output_tokens: u64::try_from(o).unwrap_or(0),
    })
    .collect();
    // What the endpoints' model servers counted themselves, per endpoint and model (all pods, all clusters).
    let endpoint_totals = sqlx::query_as::<_, (String, String, i64, i64, i64)>(
        "SELECT endpoint, model, sum(requests)::bigint, sum(input_tokens)::bigint, sum(output_tokens)::bigint
           FROM endpoint_totals WHERE org_id = $3 AND window_start >= $1 AND window_start < $2
          GROUP BY endpoint, model ORDER BY endpoint, model",
    )
    .bind(start)
    .bind(end)
    .bind(org)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .map(|(endpoint, model, r, i, o)| EndpointTotal {
        endpoint,
        model,
        requests: u64::try_from(r).unwrap_or(0),
        input_tokens: u64::try_from(i).unwrap_or(0),
        output_tokens: u64::try_from(o).unwrap_or(0),
    })
    .collect();
    let (_, inventory_version) = inventory(tx).await?;
    Ok(LedgerInput {
        period,
        policy,
        inventory_version,
        departments,
        tenants,
        capacity,
        quotas,
        allocations,
        energy,
        service_usage,
        endpoint_totals,
        adjustments: Vec::new(),
    })
}

/// Approved credits not yet applied, as adjustments landing in the next closed period.
#[allow(clippy::type_complexity)]
pub async fn approved_credits(tx: &mut OrgTx) -> Result<Vec<(Uuid, AdjustmentRecord)>, AppError> {
    let org = tx.org().as_uuid();
    let rows: Vec<(Uuid, Option<Uuid>, Uuid, String, String, String, String, Option<Uuid>)> = sqlx::query_as(
        "SELECT adjustment_id, tenant_id, department_id, gpu_class, amount::text, corrects, reason, dispute_id
           FROM adjustments WHERE org_id = $1 AND kind = 'credit' AND state = 'approved'
          ORDER BY created_at, adjustment_id",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    rows.into_iter()
        .map(|(id, t, d, class, amount, corrects, reason, dispute)| {
            Ok((
                id,
                AdjustmentRecord {
                    id: dispute.map_or_else(|| format!("credit:{id}"), |d| format!("dispute:{d}")),
                    kind: AdjustmentKind::Credit,
                    tenant: t.map(TenantId::from_uuid),
                    department: DepartmentId::from_uuid(d),
                    gpu_class: class,
                    amount: Decimal::parse(&amount)?,
                    corrects,
                    reason: if reason.is_empty() { "Credit after an accepted dispute".into() } else { reason },
                },
            ))
        })
        .collect()
}

/// A period's state: `open`, `closing` or `closed`.
pub async fn period_state(tx: &mut OrgTx, period: Period) -> Result<String, AppError> {
    let org = tx.org().as_uuid();
    let s: Option<String> = sqlx::query_scalar("SELECT state FROM periods WHERE period = $1 AND org_id = $2")
        .bind(period.first_day())
        .bind(org)
        .fetch_optional(tx.conn())
        .await?;
    Ok(s.unwrap_or_else(|| "open".into()))
}

/// What the store says about the workloads behind a page of evidence: pod or VM, namespace, node, devices,
/// profile — keyed by `cluster/allocation`.
pub(crate) async fn evidence_details(
    tx: &mut OrgTx,
    ids: &[&str],
) -> Result<HashMap<String, EvidenceDetail>, AppError> {
    let org = tx.org().as_uuid();
    let mut clusters = Vec::new();
    let mut allocations = Vec::new();
    for id in ids {
        if let Some((c, a)) = id.split_once('/')
            && let Ok(c) = Uuid::parse_str(c)
        {
            clusters.push(c);
            allocations.push(a.to_string());
        }
    }
    type Row = (
        Uuid,
        String,
        String,
        String,
        String,
        Option<String>,
        Option<String>,
        Vec<String>,
        String,
        Option<String>,
        Option<String>,
        String,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT i.cluster_id, i.allocation_id, i.holder_kind, i.holder_name, i.namespace, i.container, i.node,
                i.device_ids, i.sharing_mode, i.profile, i.gpu_model, c.name
           FROM unnest($1::uuid[], $2::text[]) AS k (cluster_id, allocation_id)
           JOIN allocation_intervals i ON i.cluster_id = k.cluster_id AND i.allocation_id = k.allocation_id
           JOIN clusters c ON c.org_id = i.org_id AND c.cluster_id = i.cluster_id
          WHERE i.org_id = $3",
    )
    .bind(&clusters)
    .bind(&allocations)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(
                cluster,
                allocation,
                kind,
                name,
                namespace,
                container,
                node,
                devices,
                mode,
                profile,
                model,
                cluster_name,
            )| {
                (
                    format!("{cluster}/{allocation}"),
                    EvidenceDetail {
                        cluster: cluster_name,
                        holder_kind: kind,
                        holder: name,
                        namespace,
                        container,
                        node,
                        device_ids: devices,
                        sharing_mode: mode,
                        profile,
                        gpu_model: model,
                    },
                )
            },
        )
        .collect())
}
