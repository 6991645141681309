//! SQL of the fault credits: the device-fault facts (kept in `allocation_events` like every fact), the allocations on
//! the faulted GPUs, and finance's decisions.

use gpuledger_api::faults::FaultCreditState;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// Most fault facts read for one month (faults are rare; a flapping device past this is summarized by its first).
pub const MAX_FAULT_FACTS: i64 = 20_000;

/// A stored `device_fault` fact: cluster ID, cluster name, the fact as JSON.
pub async fn fault_facts(
    tx: &mut OrgTx,
    before: OffsetDateTime,
) -> Result<Vec<(Uuid, String, serde_json::Value)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT e.cluster_id, c.name, e.payload FROM allocation_events e
           JOIN clusters c ON c.org_id = e.org_id AND c.cluster_id = e.cluster_id
          WHERE e.org_id = $1 AND c.org_id = $1 AND e.kind = 'device_fault' AND e.occurred_at < $2
          ORDER BY e.occurred_at, e.event_id LIMIT $3",
    )
    .bind(org)
    .bind(before)
    .bind(MAX_FAULT_FACTS)
    .fetch_all(tx.conn())
    .await?)
}

/// MIG instance UUID → its GPU's UUID (allocations of MIG instances name the instance).
pub async fn mig_parents(tx: &mut OrgTx) -> Result<Vec<(String, String)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT DISTINCT m->>'uuid', d.gpu_uuid FROM devices d, jsonb_array_elements(d.mig_devices) m
          WHERE d.org_id = $1 AND m ? 'uuid'",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// An allocation on one of the faulted devices.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AllocationOnDevice {
    /// Cluster ID.
    pub cluster_id: Uuid,
    /// Allocation ID.
    pub allocation_id: String,
    /// `namespace/holder`.
    pub holder: String,
    /// GPU class (`None`: unpriced).
    pub gpu_class: Option<String>,
    /// Fraction held (GPU-equivalents).
    pub fraction_num: i64,
    /// Denominator.
    pub fraction_den: i64,
    /// The devices it holds.
    pub device_ids: Vec<String>,
    /// Start.
    pub started_at: OffsetDateTime,
    /// End.
    pub ended_at: Option<OffsetDateTime>,
    /// Owner during the allocation (the latest ownership overlapping it).
    pub tenant_id: Option<Uuid>,
    /// Its name.
    pub tenant: Option<String>,
    /// Its department.
    pub department_id: Option<Uuid>,
}

/// Allocations holding any of `devices` that overlap `[from, to)`.
pub async fn allocations_on(
    tx: &mut OrgTx,
    devices: &[String],
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<AllocationOnDevice>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT DISTINCT ON (a.cluster_id, a.allocation_id)
                a.cluster_id, a.allocation_id, a.namespace || '/' || a.holder_name AS holder, a.gpu_class,
                a.fraction_num, a.fraction_den, a.device_ids, a.started_at, a.ended_at,
                o.tenant_id, t.name AS tenant, t.department_id
           FROM allocation_intervals a
           LEFT JOIN namespace_ownership o ON o.org_id = a.org_id AND o.namespace_uid = a.namespace_uid
                 AND tstzrange(o.valid_from, o.valid_to) && tstzrange(a.started_at, a.ended_at)
           LEFT JOIN tenants t ON t.org_id = o.org_id AND t.tenant_id = o.tenant_id
          WHERE a.org_id = $1 AND a.fraction_num IS NOT NULL AND a.device_ids && $2::text[]
            AND a.started_at < $4 AND (a.ended_at IS NULL OR a.ended_at > $3)
          ORDER BY a.cluster_id, a.allocation_id, o.valid_from DESC NULLS LAST",
    )
    .bind(org)
    .bind(devices)
    .bind(from)
    .bind(to)
    .fetch_all(tx.conn())
    .await?)
}

/// Finance's decision on one (fault, allocation): state, adjustment.
pub async fn decisions(
    tx: &mut OrgTx,
) -> Result<Vec<(String, String, sqlx::types::Text<FaultCreditState>, Option<Uuid>)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT fault_event_id, allocation_key, decision, adjustment_id FROM fault_credit_decisions WHERE org_id = $1",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// One decision to record.
pub struct NewDecision<'a> {
    /// The fault fact.
    pub fault_event_id: &'a str,
    /// The allocation as listed.
    pub allocation_key: &'a str,
    /// `approved` or `rejected`.
    pub decision: &'a str,
    /// Who.
    pub decided_by: &'a str,
    /// Why.
    pub reason: &'a str,
    /// GPU-hours credited (decimal text).
    pub gpu_hours: &'a str,
    /// The amount (decimal text).
    pub amount: &'a str,
    /// The adjustment when approved.
    pub adjustment_id: Option<Uuid>,
}

/// Records a decision; `false` when one was recorded already (a decision is made once).
pub async fn decide(tx: &mut OrgTx, d: &NewDecision<'_>) -> Result<bool, DbError> {
    let org = tx.org().as_uuid();
    let done = sqlx::query(
        "INSERT INTO fault_credit_decisions (org_id, fault_event_id, allocation_key, decision, decided_by, reason,
                                             gpu_hours, amount, adjustment_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, $9) ON CONFLICT DO NOTHING",
    )
    .bind(org)
    .bind(d.fault_event_id)
    .bind(d.allocation_key)
    .bind(d.decision)
    .bind(d.decided_by)
    .bind(d.reason)
    .bind(d.gpu_hours)
    .bind(d.amount)
    .bind(d.adjustment_id)
    .execute(tx.conn())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Inserts the approved credit as an adjustment the next close applies.
#[allow(clippy::too_many_arguments)]
pub async fn insert_credit(
    tx: &mut OrgTx,
    adjustment_id: Uuid,
    tenant: Uuid,
    department: Uuid,
    gpu_class: &str,
    amount: &str,
    currency: &str,
    corrects: &str,
    reason: &str,
    by: &str,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO adjustments (org_id, adjustment_id, kind, state, tenant_id, department_id, gpu_class, amount,
                                  currency, corrects, reason, created_by, approved_at, approved_by)
         VALUES ($1, $2, 'credit', 'approved', $3, $4, $5, $6::numeric, $7, $8, $9, 'gpuledger:faults', now(), $10)",
    )
    .bind(org)
    .bind(adjustment_id)
    .bind(tenant)
    .bind(department)
    .bind(gpu_class)
    .bind(amount)
    .bind(currency)
    .bind(corrects)
    .bind(reason)
    .bind(by)
    .execute(tx.conn())
    .await?;
    Ok(())
}
