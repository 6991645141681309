//! SQL of this feature: reads and writes inside the caller's organization-scoped transaction.

use super::bounds;

pub(crate) mod parts;
use crate::{db::OrgTx, error::AppError};
use gpuledger_api::{
    close::EvidenceDetail,
    states::{Confidence as ConfidenceAnswer, SharingModeName},
};
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
use sqlx::types::Text;
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

/// MIG device UUID → its physical GPU's, for every device the organization has seen (a MIG UUID listed under two
/// GPUs goes to the first by UUID, the same every time, not to whichever row came last).
pub(crate) async fn mig_parents(tx: &mut OrgTx) -> Result<HashMap<String, String>, AppError> {
    Ok(sqlx::query_as::<_, (String, String)>(
        "SELECT DISTINCT ON (m->>'uuid') m->>'uuid', d.gpu_uuid FROM devices d, jsonb_array_elements(d.mig_devices) m
          WHERE d.org_id = $1 AND m ? 'uuid'
          ORDER BY m->>'uuid', d.gpu_uuid",
    )
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .collect())
}

/// The select list of an allocation record's row ([`AllocRow`]), over `allocation_intervals a`, `clusters c` and the
/// owner `namespace_ownership o`.
pub(crate) const ALLOC_COLUMNS: &str = "c.name, a.allocation_id, a.fraction_num, a.fraction_den, a.gpu_class,
    a.started_at, a.ended_at, a.confidence,
    -- The allocation's devices, or kubelet's latest assignment kept on the interval by ingest.
    a.device_ids,
    a.labels->>'endpoint', o.tenant_id, o.valid_from, o.valid_to, a.share_basis";

/// Where the month's allocation rows come from: `$1`/`$2` the month's charged bounds, `$3` the organization; a row
/// per allocation and owner overlapping it (none: one row without owner).
pub(crate) const ALLOC_FROM: &str = "FROM allocation_intervals a
           JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
           LEFT JOIN namespace_ownership o ON o.org_id = a.org_id AND o.namespace_uid = a.namespace_uid
                 AND tstzrange(o.valid_from, o.valid_to) && tstzrange(a.started_at, a.ended_at)
          WHERE a.org_id = $3 AND a.fraction_num IS NOT NULL
            AND a.started_at < $2 AND (a.ended_at IS NULL OR a.ended_at > $1)";

/// One row as its record (ID without the `#n` of a later owner's part), with the length of its cluster's name and
/// its owner's start (what orders the parts of one allocation).
pub(crate) fn to_record(
    row: AllocRow,
    mig_parent: &HashMap<String, String>,
) -> Result<(AllocationRecord, u32, Option<OffsetDateTime>), AppError> {
    let (cluster, alloc, num, den, class, s, e, conf, devices, endpoint, tenant, of, ot, basis) = row;
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
    devices.shrink_to_fit();
    let record = AllocationRecord {
        id: format!("{cluster}/{alloc}"),
        tenant: tenant.map(TenantId::from_uuid),
        gpu_class: class,
        fraction: Fraction::new(i128::from(num), i128::from(den))?,
        start: s2,
        end: e2,
        confidence: confidence(&conf),
        devices,
        endpoint,
        share_basis: basis.and_then(|b| b.parse().ok()),
    };
    Ok((record, u32::try_from(cluster.len()).unwrap_or(u32::MAX), of))
}

/// Allocation records of a period (split at namespace ownership changes) with devices resolved to physical GPUs.
pub async fn load_allocations(tx: &mut OrgTx, period: Period) -> Result<Vec<AllocationRecord>, AppError> {
    let (start, end) = bounds(tx, period).await?;
    let org = tx.org().as_uuid();
    let mig_parent = mig_parents(tx).await?;
    // JIT compiles ~100 functions for these queries and costs more than it saves at this size.
    sqlx::query("SET LOCAL jit = off").execute(tx.conn()).await?;
    use futures::TryStreamExt;
    let sql = format!("SELECT {ALLOC_COLUMNS} {ALLOC_FROM}");
    let mut rows = sqlx::query_as::<_, AllocRow>(&sql).bind(start).bind(end).bind(org).fetch(tx.conn());
    // Each row becomes its record as it arrives (a month at 10,000 GPUs is over a million rows: never held twice);
    // beside it, what orders it: the length of its cluster's name (the ID's prefix) and its owner's start.
    let mut out: Vec<AllocationRecord> = Vec::new();
    let mut keys: Vec<(u32, Option<OffsetDateTime>)> = Vec::new();
    while let Some(row) = rows.try_next().await? {
        let (record, cluster_len, owner_from) = to_record(row, &mig_parent)?;
        keys.push((cluster_len, owner_from));
        out.push(record);
    }
    drop(rows);
    // Ordered here rather than in SQL (a million-row sort spills to disk in PostgreSQL, not in memory here): by
    // cluster, allocation, then owner, through a permutation so the records are never copied.
    let key = |i: u32| {
        let (n, of) = keys[i as usize];
        let id = out[i as usize].id.as_str();
        (id.get(..n as usize).unwrap_or_default(), id.get(n as usize + 1..).unwrap_or_default(), of)
    };
    let mut order: Vec<u32> =
        (0..u32::try_from(out.len()).map_err(|_| AppError::Internal("too many allocations".into()))?).collect();
    order.sort_unstable_by(|&x, &y| key(x).cmp(&key(y)));
    drop(keys);
    permute(&mut out, &mut order);
    // The parts of one allocation under successive owners are `#1`, `#2`, ….
    let mut last_id = String::new();
    let mut part = 0;
    for a in &mut out {
        if a.id == last_id {
            part += 1;
            a.id = format!("{}#{part}", a.id);
        } else {
            part = 0;
            last_id.clone_from(&a.id);
        }
    }
    // Ownership rows that start after the allocation leave its earlier part unowned: not charged (shown in notes).
    Ok(out)
}

/// Reorders `v` in place so that its `p`-th element is the one that was at `order[p]` (`order` a permutation of
/// `0..v.len()`; left as the identity).
fn permute<T>(v: &mut [T], order: &mut [u32]) {
    for i in 0..v.len().min(order.len()) {
        let mut j = i;
        while order[j] as usize != i {
            let k = order[j] as usize;
            v.swap(j, k);
            order[j] = j as u32;
            j = k;
        }
        order[j] = j as u32;
    }
}

/// Everything the ledger of `period` is computed from, read now. Credits and late-data adjustments are added by
/// the caller ([`pending_adjustments`]).
#[allow(clippy::type_complexity)] // row tuples of plain queries
pub async fn load_input(tx: &mut OrgTx, period: Period, policy: CostPolicy) -> Result<LedgerInput, AppError> {
    let mut input = load_header(tx, period, policy).await?;
    input.allocations = load_allocations(tx, period).await?;
    if input.policy.energy.is_some() {
        // One span per device-hour (bundle format 2): the hour's exact joules over the span its windows cover.
        let (start, end) = bounds(tx, period).await?;
        input.energy = crate::telemetry::store::energy_hours(tx, start, end).await?;
    }
    Ok(input)
}

/// [`load_input`] without its allocations and energy (what a close in parts reads part by part).
#[allow(clippy::type_complexity)] // row tuples of plain queries
pub async fn load_header(tx: &mut OrgTx, period: Period, policy: CostPolicy) -> Result<LedgerInput, AppError> {
    let calendar = crate::calendar::bounds(tx, period).await?;
    let (start, end) = calendar.charged();
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
    let actual_costs = if policy.classes.iter().any(|c| c.actual_cost) {
        actual_costs(tx, period, start, end).await?
    } else {
        Vec::new()
    };
    Ok(LedgerInput {
        period,
        policy,
        inventory_version,
        departments,
        tenants,
        capacity,
        quotas,
        allocations: Vec::new(),
        energy: Vec::new(),
        service_usage,
        endpoint_totals,
        adjustments: Vec::new(),
        actual_costs,
        bounds: calendar.for_input(period)?,
    })
}

/// The month's imported cloud bill per GPU class: each matched node's EffectiveCost goes to the class of its GPUs
/// (split by GPU count in the rare node holding two classes, the last class taking the rounding remainder so the
/// node's cost is kept exactly).
async fn actual_costs(
    tx: &mut OrgTx,
    period: Period,
    start: OffsetDateTime,
    end: OffsetDateTime,
) -> Result<Vec<gpuledger_core::ledger::ActualCost>, AppError> {
    let rows = crate::costs::store::billed_node_classes(tx, period.first_day(), start, end).await?;
    let mut by_class: std::collections::BTreeMap<String, (Decimal, u32)> = std::collections::BTreeMap::new();
    let mut i = 0;
    while i < rows.len() {
        let (cluster, node) = (rows[i].3, &rows[i].4);
        let mut j = i;
        while j < rows.len() && rows[j].3 == cluster && &rows[j].4 == node {
            j += 1;
        }
        let node_rows = &rows[i..j];
        let cost = Decimal::parse(&node_rows[0].1)?;
        let gpus: i64 = node_rows.iter().map(|r| r.2.max(0)).sum();
        let mut given = Decimal::ZERO;
        for (k, (class, _, n, _, _)) in node_rows.iter().enumerate() {
            let part = if k + 1 == node_rows.len() || gpus == 0 {
                cost.checked_sub(&given)?
            } else {
                Decimal::round(
                    cost.value()
                        .checked_mul_int(i128::from(*n))?
                        .checked_div(gpuledger_core::Fraction::from_integer(i128::from(gpus))?)?,
                    cost.scale().max(6),
                )?
            };
            given = given.checked_add(&part)?;
            let e = by_class.entry(class.clone()).or_insert((Decimal::ZERO, 0));
            e.0 = e.0.checked_add(&part)?;
            e.1 = e.1.saturating_add(1);
        }
        i = j;
    }
    Ok(by_class
        .into_iter()
        .map(|(gpu_class, (cost, nodes))| gpuledger_core::ledger::ActualCost { gpu_class, cost, nodes })
        .collect())
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

/// What the store says about the workloads behind a page of evidence: pod or VM, namespace, node, devices,
/// profile — keyed by `cluster/allocation`.
pub(crate) async fn evidence_details(
    tx: &mut OrgTx,
    ids: &[&str],
) -> Result<HashMap<String, EvidenceDetail>, AppError> {
    let org = tx.org().as_uuid();
    // A record's ID is `<cluster name>/<allocation>` (`#n` after it for the part under the n-th later owner); the
    // analytics' IDs carry the cluster's UUID instead. Either resolves.
    let (mut keys, mut clusters, mut allocations) = (Vec::new(), Vec::new(), Vec::new());
    for id in ids {
        let base = match id.rsplit_once('#') {
            Some((b, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => b,
            _ => id,
        };
        if let Some((c, a)) = base.split_once('/') {
            keys.push(id.to_string());
            clusters.push(c.to_string());
            allocations.push(a.to_string());
        }
    }
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    type Row = (
        String,
        String,
        String,
        String,
        Option<String>,
        Option<String>,
        Vec<String>,
        Text<SharingModeName>,
        Option<String>,
        Option<String>,
        String,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT k.key, i.holder_kind, i.holder_name, i.namespace, i.container, i.node,
                i.device_ids, i.sharing_mode, i.profile, i.gpu_model, c.name
           FROM unnest($1::text[], $2::text[], $4::text[]) AS k (key, cluster, allocation_id)
           JOIN clusters c ON c.org_id = $3 AND (c.name = k.cluster OR c.cluster_id::text = k.cluster)
           JOIN allocation_intervals i ON i.org_id = $3 AND i.cluster_id = c.cluster_id
                AND i.allocation_id = k.allocation_id",
    )
    .bind(&keys)
    .bind(&clusters)
    .bind(org)
    .bind(&allocations)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(key, kind, name, namespace, container, node, devices, Text(mode), profile, model, cluster_name)| {
            (
                key,
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
        })
        .collect())
}

// ---- the evidence index of closed months (migration 27; `super::evidence`)

/// A group as `evidence_months.groups` stores it: [tenant, GPU class, endpoint, records].
type StoredGroup = (Option<Uuid>, Option<String>, Option<String>, u64);

/// What is stored about a month's evidence index.
#[derive(Debug, Clone)]
pub(crate) struct IndexHead {
    /// Records of the whole month.
    pub allocations: i64,
    /// Records per (tenant, GPU class, endpoint).
    pub groups: Vec<(super::evidence::GroupKey, u64)>,
}

/// The head of `period`'s evidence index, when it has one.
pub(crate) async fn evidence_head(tx: &mut OrgTx, period: Period) -> Result<Option<IndexHead>, AppError> {
    let row: Option<(i32, sqlx::types::Json<Vec<StoredGroup>>)> =
        sqlx::query_as("SELECT allocations, groups FROM evidence_months WHERE org_id = $1 AND period = $2")
            .bind(tx.org().as_uuid())
            .bind(period.first_day())
            .fetch_optional(tx.conn())
            .await?;
    Ok(row.map(|(allocations, groups)| IndexHead {
        allocations: i64::from(allocations),
        groups: groups.0.into_iter().map(|(t, c, e, n)| ((t, c, e), n)).collect(),
    }))
}

/// Waits for any other transaction building `period`'s evidence index (held until this transaction ends).
pub(crate) async fn lock_evidence_build(tx: &mut OrgTx, period: Period) -> Result<(), AppError> {
    // Class "GE"; the key mixes the organization and the month (a collision only makes two builds take turns).
    let month = period.first_day();
    let key = (tx.org().as_uuid().as_u128() as i32) ^ (month.year() * 12 + i32::from(u8::from(month.month())));
    tx.wait_for_turn(0x4745_i32, key).await?;
    Ok(())
}

/// Writes `period`'s evidence index from the month's allocation records (the bundle's `inputs.allocations`, in
/// bundle order), `source` being `close` or `bundle`. Returns `false`, writing nothing, when a record cannot be
/// stored exactly (an instant finer than PostgreSQL's microseconds, more records than an `integer` counts): reads
/// of that month then decode the bundle as before.
pub(crate) async fn write_evidence_index(
    tx: &mut OrgTx,
    period: Period,
    records: &[AllocationRecord],
    source: &str,
) -> Result<bool, AppError> {
    let whole_micros = |t: OffsetDateTime| t.nanosecond().is_multiple_of(1_000);
    if !records.iter().all(|a| whole_micros(a.start) && a.end.is_none_or(whole_micros)) {
        tracing::warn!(period = %period, "evidence index not written: an instant finer than microseconds");
        return Ok(false);
    }
    if i32::try_from(records.len()).is_err() {
        return Ok(false);
    }
    // The close's own path, in one part; the ranks from the records in memory (the bundle holds them all here).
    let mut ranks: Vec<parts::Ranks> = vec![[0; 4]; records.len()];
    for (k, key) in super::evidence::SortKey::ALL.into_iter().enumerate() {
        let Some(by_key) = super::evidence::ranks(records, key) else { return Ok(false) };
        for (r, rank) in ranks.iter_mut().zip(by_key) {
            r[k] = rank;
        }
    }
    let mut stage = parts::EvidenceStage::begin(tx, period, source).await?;
    stage.add(tx, period, records, &ranks).await?;
    stage.finish(tx, period).await?;
    Ok(true)
}

/// A page of a closed month's evidence index.
pub(crate) struct PageRequest<'a> {
    /// What to keep.
    pub filter: &'a super::evidence::EvidenceFilter,
    /// The order.
    pub key: super::evidence::SortKey,
    /// Reversed.
    pub descending: bool,
    /// Records of the whole month (the index's head).
    pub month_records: i64,
    /// Records to skip.
    pub offset: i64,
    /// Records to return.
    pub limit: i64,
}

/// Reads a page of `period`'s evidence index, as the endpoint answers it (details not filled in).
pub(crate) async fn evidence_page(
    tx: &mut OrgTx,
    period: Period,
    r: &PageRequest<'_>,
) -> Result<Vec<gpuledger_api::close::EvidenceAllocation>, AppError> {
    let f = r.filter;
    let col = r.key.column();
    let dir = if r.descending { "DESC" } else { "ASC" };
    // Only the predicates a request has are written: one plan per shape, each able to use its index (a generic
    // `($n IS NULL OR …)` plan could not). The parameters keep their numbers either way.
    let mut predicates = String::new();
    if f.tenant.is_some() {
        predicates.push_str(" AND tenant_id = $3");
    }
    if f.gpu_class.is_some() {
        predicates.push_str(" AND gpu_class = $4");
    }
    if f.endpoint.is_some() {
        predicates.push_str(" AND endpoint = $5");
    }
    if f.visible.is_some() {
        predicates.push_str(" AND tenant_id = ANY($6)");
    }
    const COLS: &str = "e.allocation, e.tenant_id, e.gpu_class, e.fraction, e.starts_at, e.ends_at, e.confidence,
                        e.devices, e.endpoint";
    // Orders other than `start` are chunks of a permutation (`evidence_orders`, migration 40): each entry a start
    // rank, the primary key of the record. `$11` is the order, `$12`–`$13` a range of its ranks.
    const ORDERED: &str =
        "evidence_orders o CROSS JOIN LATERAL unnest(o.start_ranks) WITH ORDINALITY AS u (start_rank, i)
                           JOIN evidence_allocations e
                             ON e.org_id = $1 AND e.period = o.period AND e.start_rank = u.start_rank";
    let chunk = i64::from(parts::order_chunk());
    let (mut lo, mut hi) = (0_i64, 0_i64);
    let filtered = || {
        format!(
            "SELECT {COLS} FROM evidence_allocations e WHERE org_id = $1 AND period = $2{predicates}
              ORDER BY {col} {dir} LIMIT $9 OFFSET $10"
        )
    };
    let sql = match (r.key.order_no(), f.is_everything()) {
        // With nothing filtered the ranks are 1..n in each order, so a page is a range of ranks (no rows skipped).
        (None, true) => {
            let bound = if r.descending { format!(" AND {col} <= $7 - $8") } else { format!(" AND {col} > $8") };
            format!(
                "SELECT {COLS} FROM evidence_allocations e WHERE org_id = $1 AND period = $2{bound} ORDER BY {col} {dir} LIMIT $9"
            )
        }
        (Some(_), true) => {
            (lo, hi) = if r.descending {
                ((r.month_records - r.offset - r.limit + 1).max(1), r.month_records - r.offset)
            } else {
                (r.offset + 1, (r.offset + r.limit).min(r.month_records))
            };
            format!(
                "SELECT {COLS} FROM {ORDERED}
                  WHERE o.org_id = $1 AND o.period = $2 AND o.sort = $11
                    AND o.chunk BETWEEN ($12 - 1) / {chunk} AND ($13 - 1) / {chunk}
                    AND o.chunk * {chunk} + u.i BETWEEN $12 AND $13
                  ORDER BY o.chunk {dir}, u.i {dir}"
            )
        }
        // By start, the primary key's order; a tenant's or an endpoint's records (few) found by their index and
        // sorted.
        (None, false) => filtered(),
        (Some(_), false) if f.tenant.is_some() || f.endpoint.is_some() => filtered(),
        // A GPU class or a department's tenants are a large share of the month: its order walked chunk by chunk
        // (an incremental sort within each chunk), stopping once the page is full.
        (Some(_), false) => format!(
            "SELECT {COLS} FROM {ORDERED}
              WHERE o.org_id = $1 AND o.period = $2 AND o.sort = $11{predicates}
              ORDER BY o.chunk {dir}, u.i {dir} LIMIT $9 OFFSET $10"
        ),
    };
    type Row = (
        String,
        Option<Uuid>,
        Option<String>,
        String,
        OffsetDateTime,
        Option<OffsetDateTime>,
        Text<ConfidenceAnswer>,
        sqlx::types::Json<Vec<String>>,
        Option<String>,
    );
    let visible: Option<Vec<Uuid>> = f.visible.as_ref().map(|v| v.tenants.iter().copied().collect());
    let rows: Vec<Row> = sqlx::query_as(&sql)
        .bind(tx.org().as_uuid())
        .bind(period.first_day())
        .bind(f.tenant)
        .bind(&f.gpu_class)
        .bind(&f.endpoint)
        .bind(visible)
        .bind(r.month_records)
        .bind(r.offset)
        .bind(r.limit)
        .bind(r.offset)
        .bind(r.key.order_no().unwrap_or(0))
        .bind(lo)
        .bind(hi)
        .fetch_all(tx.conn())
        .await?;
    let rfc3339 = gpuledger_core::time_fmt::rfc3339;
    Ok(rows
        .into_iter()
        .map(|(id, tenant, gpu_class, fraction, start, end, Text(confidence), devices, endpoint)| {
            gpuledger_api::close::EvidenceAllocation {
                id,
                tenant: tenant.map(|t| t.to_string()),
                gpu_class,
                fraction,
                start: rfc3339(start),
                end: end.map(rfc3339),
                confidence,
                devices: devices.0,
                endpoint,
                detail: None,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::permute;

    #[test]
    fn permute_applies_any_order_in_place() {
        for n in 0..7_u32 {
            // Every rotation and the reversal of 0..n.
            let mut orders: Vec<Vec<u32>> = (0..n).map(|r| (0..n).map(|i| (i + r) % n).collect()).collect();
            orders.push((0..n).rev().collect());
            for order in orders {
                let mut v: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
                let want: Vec<String> = order.iter().map(|&i| format!("v{i}")).collect();
                let mut o = order.clone();
                permute(&mut v, &mut o);
                assert_eq!(v, want, "order {order:?}");
                assert!(o.iter().enumerate().all(|(i, &x)| x as usize == i));
            }
        }
        // A permutation of several cycles.
        let mut v = vec!['a', 'b', 'c', 'd', 'e', 'f'];
        permute(&mut v, &mut [2, 0, 1, 5, 4, 3]);
        assert_eq!(v, vec!['c', 'a', 'b', 'f', 'e', 'd']);
    }
}
