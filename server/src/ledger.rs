//! The ledger over HTTP: loads a period's inputs from the evidence store (RLS-scoped), computes the lines with
//! `gpuledger_core::ledger`, and serves them — from the frozen lines for a closed period, computed on demand for
//! an open one.

use std::collections::HashMap;

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    routing::get,
};
use gpuledger_api::{
    close::{Evidence, EvidenceAllocation, EvidenceDetail},
    ledger::{Ledger, MonthTotal, Months, Summaries},
};
use gpuledger_core::{
    Confidence, Fraction, Period,
    bundle::sha256_hex,
    decimal::Decimal,
    ids::{DepartmentId, TenantId},
    ledger::{
        AdjustmentKind, AdjustmentRecord, AllocationRecord, ClassCapacity, DepartmentRef, EndpointTotal, EnergyRecord,
        LedgerInput, QuotaHolder, QuotaRecord, TenantRef, UsageRecord,
    },
    policy::CostPolicy,
};
use serde::Deserialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    app::AppState,
    auth::Visible,
    db::OrgTx,
    error::AppError,
    http::{Caller, ReadLedger},
    policy::parse_period,
};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/ledger", get(get_ledger))
        .route("/api/v1/ledger/months", get(get_months))
        .route("/api/v1/ledger/summaries", get(get_summaries))
        .route("/api/v1/periods/{period}/evidence", get(evidence))
}

#[derive(Debug, Deserialize)]
struct MonthsQuery {
    from: Option<String>,
    to: Option<String>,
    department: Option<String>,
}

/// `GET /api/v1/ledger/months?from=YYYY-MM&to=YYYY-MM[&department=]`: each month's total as the caller may see it,
/// from the stored per-department totals (one query for a whole trend); a month without figures says so
/// (`total: null`).
async fn get_months(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Query(q): Query<MonthsQuery>,
) -> Result<Json<Months>, AppError> {
    let from =
        parse_period("from", q.from.as_deref().ok_or_else(|| AppError::invalid("from", "is required (YYYY-MM)"))?)?;
    let to = parse_period("to", q.to.as_deref().ok_or_else(|| AppError::invalid("to", "is required (YYYY-MM)"))?)?;
    let (start, end) = (from.first_day(), to.first_day());
    if end < start {
        return Err(AppError::invalid("to", "is before from"));
    }
    if (end.year() - start.year()) * 12 + i32::from(u8::from(end.month())) - i32::from(u8::from(start.month())) >= 36 {
        return Err(AppError::invalid("to", "at most 36 months at once"));
    }
    let mut tx = p.begin(&state.db).await?;
    type MonthRow = (time::Date, Option<String>, Option<String>, Option<time::OffsetDateTime>);
    let rows: Vec<MonthRow> = sqlx::query_as(
        "SELECT g.period::date, m.state, (SELECT sum(t.total)::text FROM read_totals t
                                         WHERE t.org_id = $1 AND t.period = m.period
                                           AND ($4::text IS NULL OR t.department = $4 OR t.department_id::text = $4)
                                           AND ($5::uuid[] IS NULL OR t.department_id = ANY($5))),
                m.as_of
           FROM generate_series($2::date, $3::date, interval '1 month') AS g(period)
           LEFT JOIN read_months m ON m.org_id = $1 AND m.period = g.period::date
          ORDER BY 1",
    )
    .bind(p.org.as_uuid())
    .bind(start)
    .bind(end)
    .bind(&q.department)
    .bind(p.departments.as_ref().map(|d| d.iter().map(|d| d.as_uuid()).collect::<Vec<_>>()))
    .fetch_all(tx.conn())
    .await?;
    tx.commit_quiet().await?;
    let months = rows
        .into_iter()
        .map(|(d, state, total, as_of)| {
            let period = Period::from_date(d).map(|p| p.to_string()).unwrap_or_default();
            // A month with figures but no line the caller sees totals 0.00; a month without figures has no total.
            let total = state.as_ref().map(|_| total.unwrap_or_else(|| "0.00".into()));
            let as_of = as_of.map(gpuledger_core::time_fmt::rfc3339);
            MonthTotal { period, state, total, as_of }
        })
        .collect();
    Ok(Json(Months { months }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SummariesQuery {
    period: Option<String>,
}

/// `GET /api/v1/ledger/summaries?period=YYYY-MM`: the month's stored utilization, inference and training
/// summaries as the caller may see them (the department scope cuts the rows; endpoint totals and unattributed work
/// are for organization-wide readers only), each with the `as_of` of the figures it goes with. A kind not computed
/// yet is `null`, and `pending` says the worker has newer figures to summarize.
async fn get_summaries(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    query: Result<Query<SummariesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Summaries>, AppError> {
    let Query(q) = query.map_err(|e| AppError::invalid("query", e.body_text()))?;
    let period = parse_period(
        "period",
        q.period.as_deref().ok_or_else(|| AppError::invalid("period", "is required (YYYY-MM)"))?,
    )?;
    let mut tx = p.begin(&state.db).await?;
    let answer = crate::readmodel::summaries::read(&mut tx, period).await?;
    tx.commit_quiet().await?;
    Ok(Json(answer))
}

/// `[start, end)` of a period as timestamps.
pub fn bounds(period: Period) -> Result<(OffsetDateTime, OffsetDateTime), AppError> {
    let i = period.interval()?;
    Ok((i.start(), i.end()))
}

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

type AllocRow = (
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
);

fn confidence(s: &str) -> Confidence {
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
                a.labels->>'endpoint', o.tenant_id, o.valid_from, o.valid_to
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
    for (cluster, alloc, num, den, class, s, e, conf, devices, endpoint, tenant, of, ot) in rows {
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
    let mut energy = if policy.energy.is_some() {
        sqlx::query_as::<_, (String, OffsetDateTime, OffsetDateTime, i64)>(
            "SELECT gpu_uuid, window_start, window_end, round(energy_j)::bigint FROM telemetry_rollups
              WHERE org_id = $3 AND gpu_instance_id = -1 AND energy_j IS NOT NULL AND energy_j >= 0
                AND window_start < $2 AND window_end > $1",
        )
        .bind(start)
        .bind(end)
        .bind(org)
        .fetch_all(tx.conn())
        .await?
        .into_iter()
        .map(|(gpu_uuid, start, end, j)| EnergyRecord { gpu_uuid, start, end, joules: u64::try_from(j).unwrap_or(0) })
        .collect::<Vec<_>>()
    } else {
        Vec::new()
    };
    energy
        .sort_unstable_by(|a, b| (&a.gpu_uuid, a.start, a.end, a.joules).cmp(&(&b.gpu_uuid, b.start, b.end, b.joules)));
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

#[derive(Debug, Deserialize)]
struct LedgerQuery {
    period: Option<String>,
    tenant: Option<String>,
    department: Option<String>,
    term: Option<String>,
    page: Option<u32>,
    per_page: Option<u32>,
}

async fn get_ledger(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Query(q): Query<LedgerQuery>,
) -> Result<Json<Ledger>, AppError> {
    let period = parse_period(
        "period",
        q.period.as_deref().ok_or_else(|| AppError::invalid("period", "is required (YYYY-MM)"))?,
    )?;
    let per_page = q.per_page.unwrap_or(1000);
    if per_page == 0 || per_page > 10_000 {
        return Err(AppError::invalid("per_page", "must be 1..=10000"));
    }
    let page = q.page.unwrap_or(1).max(1);
    // Read, never recomputed: a closed month's figures were written by its close, an open month's are the refresh
    // worker's snapshot (computed for the whole organization — overhead is split across every tenant — and cut
    // here to the departments PostgreSQL shows the caller).
    let mut tx = p.begin(&state.db).await?;
    let st = period_state(&mut tx, period).await?;
    let mut head = crate::readmodel::head(&mut tx, period).await?;
    if head.is_none() {
        // No figures of this month yet (a new month, a fresh start, a month closed before the read model): made once.
        tx.commit_quiet().await?;
        crate::readmodel::ensure(&state.db, p.org, period).await?;
        tx = p.begin(&state.db).await?;
        head = crate::readmodel::head(&mut tx, period).await?;
    }
    let Some(head) = head else {
        if st == "closed" {
            return Err(AppError::Internal(format!("closed period {period} has no stored figures")));
        }
        // Still nothing: no approved policy covers the month.
        return Err(AppError::Conflict(format!(
            "no approved cost policy covers {period}: approve one effective from {period} or earlier"
        )));
    };
    let filter = crate::readmodel::LineFilter {
        scope: p.departments.as_ref().map(|d| d.iter().map(|d| d.as_uuid()).collect()),
        tenant: q.tenant.clone(),
        department: q.department.clone(),
        term: q.term.clone(),
    };
    let offset = i64::from(page - 1) * i64::from(per_page);
    let found = crate::readmodel::lines(&mut tx, period, &filter, offset, i64::from(per_page)).await?;
    tx.commit_quiet().await?;
    // The notes count the whole organization's data: not for a caller limited to departments.
    let notes = if p.departments.is_some() || head.state == crate::readmodel::FigState::Closed {
        None
    } else {
        Some(head.notes.clone()).filter(|n| !n.is_null())
    };
    let max_age = state.limits.snapshot_max_age;
    let now = time::OffsetDateTime::now_utc();
    let stale = head.state == crate::readmodel::FigState::Provisional
        && head.changed_since.is_some()
        && now - head.as_of > max_age;
    Ok(Json(Ledger {
        period: period.to_string(),
        state: st,
        policy_version: head.policy_version,
        currency: if head.line_count > 0 { head.currency.clone() } else { None },
        hash: head.hash,
        as_of: gpuledger_core::time_fmt::rfc3339(head.as_of),
        provisional: head.state == crate::readmodel::FigState::Provisional,
        stale,
        total: found.total,
        totals_by_term: found.totals_by_term,
        notes,
        count: found.count,
        page,
        per_page,
        lines: found.lines,
    }))
}

#[derive(Debug, Deserialize)]
struct EvidenceQuery {
    tenant: Option<String>,
    gpu_class: Option<String>,
    endpoint: Option<String>,
    /// `start` (default), `end`, `fraction`, `id`; `-` in front for descending.
    sort: Option<String>,
    page: Option<u32>,
    per_page: Option<u32>,
}

/// What the store says about the workloads behind a page of evidence: pod or VM, namespace, node, devices,
/// profile — keyed by `cluster/allocation`.
async fn evidence_details(tx: &mut OrgTx, ids: &[&str]) -> Result<HashMap<String, EvidenceDetail>, AppError> {
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

/// The allocation records behind a line: from the bundle for a closed period, from the store for an open one.
async fn evidence(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Path(period): Path<String>,
    Query(q): Query<EvidenceQuery>,
) -> Result<Json<Evidence>, AppError> {
    let period = parse_period("period", &period)?;
    let per_page = q.per_page.unwrap_or(100).clamp(1, 1000) as usize;
    let page = q.page.unwrap_or(1).max(1) as usize;
    let visible = p.visible(&state.db).await?;
    let mut tx = state.db.begin_org(p.org).await?;
    let allocations = match crate::close::stored_bundle(&mut tx, period).await? {
        Some(b) => b.inputs.allocations,
        None => load_allocations(&mut tx, period).await?,
    };
    tx.commit().await?;
    let tenant = q
        .tenant
        .as_deref()
        .map(|t| Uuid::parse_str(t).map_err(|_| AppError::invalid("tenant", "is not a UUID")))
        .transpose()?;
    let mut rows: Vec<&AllocationRecord> = allocations
        .iter()
        .filter(|a| Visible::tenant(&visible, a.tenant.map(|x| x.as_uuid())))
        .filter(|a| tenant.is_none_or(|t| a.tenant.map(|x| x.as_uuid()) == Some(t)))
        .filter(|a| q.gpu_class.as_deref().is_none_or(|c| a.gpu_class.as_deref() == Some(c)))
        .filter(|a| q.endpoint.as_deref().is_none_or(|e| a.endpoint.as_deref() == Some(e)))
        .collect();
    let sort = q.sort.as_deref().unwrap_or("start");
    let (descending, key) = match sort.strip_prefix('-') {
        Some(k) => (true, k),
        None => (false, sort),
    };
    match key {
        "start" => rows.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.id.cmp(&b.id))),
        "end" => rows.sort_by(|a, b| a.end.cmp(&b.end).then_with(|| a.id.cmp(&b.id))),
        "fraction" => rows.sort_by(|a, b| a.fraction.cmp(&b.fraction).then_with(|| a.id.cmp(&b.id))),
        "id" => rows.sort_by(|a, b| a.id.cmp(&b.id)),
        other => {
            return Err(AppError::invalid(
                "sort",
                format!("start, end, fraction or id (with - for descending), not {other:?}"),
            ));
        }
    }
    if descending {
        rows.reverse();
    }
    let page_rows: Vec<&&AllocationRecord> = rows.iter().skip((page - 1) * per_page).take(per_page).collect();
    let ids: Vec<&str> = page_rows.iter().map(|a| a.id.as_str()).collect();
    let mut tx = state.db.begin_org(p.org).await?;
    let details = evidence_details(&mut tx, &ids).await?;
    tx.commit().await?;
    let rfc3339 = |t: OffsetDateTime| gpuledger_core::time_fmt::rfc3339(t);
    let allocations = page_rows
        .iter()
        .map(|a| EvidenceAllocation {
            id: a.id.clone(),
            tenant: a.tenant.map(|t| t.to_string()),
            gpu_class: a.gpu_class.clone(),
            fraction: String::from(a.fraction),
            start: rfc3339(a.start),
            end: a.end.map(rfc3339),
            confidence: a.confidence.as_str().to_string(),
            devices: a.devices.clone(),
            endpoint: a.endpoint.clone(),
            detail: details.get(&a.id).cloned(),
        })
        .collect();
    Ok(Json(Evidence {
        period: period.to_string(),
        total: rows.len(),
        page,
        per_page,
        sort: sort.to_string(),
        allocations,
    }))
}
