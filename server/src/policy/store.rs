//! SQL of this feature: reads and writes inside the caller's organization-scoped transaction.

use crate::{
    db::{DbError, OrgTx},
    error::AppError,
};
use gpuledger_api::policy::KueueImport;
use gpuledger_core::{
    Period,
    decimal::Decimal,
    policy::CostPolicy,
    wire::{Fact, FactBody, QuotaFact},
};
use serde_json::{Value, json};
use time::{Date, OffsetDateTime};
use uuid::Uuid;

/// Creates a draft; returns its version.
pub async fn create_draft(
    tx: &mut OrgTx,
    actor: &str,
    effective_from: Period,
    policy: &CostPolicy,
    note: &str,
) -> Result<i32, AppError> {
    let org = tx.org().as_uuid();
    // Serialize version numbers per organization.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('cost_policies:' || $1::text))")
        .bind(org)
        .execute(tx.conn())
        .await?;
    let version: i32 = sqlx::query_scalar("SELECT COALESCE(max(version), 0) + 1 FROM cost_policies WHERE org_id = $1")
        .bind(org)
        .fetch_one(tx.conn())
        .await?;
    let doc = serde_json::to_value(policy).map_err(|e| AppError::Internal(e.to_string()))?;
    sqlx::query(
        "INSERT INTO cost_policies (org_id, version, effective_from, currency, document, note, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(org)
    .bind(version)
    .bind(effective_from.first_day())
    .bind(&policy.currency)
    .bind(doc)
    .bind(note)
    .bind(actor)
    .execute(tx.conn())
    .await?;
    tx.audit(
        actor,
        "policy.create",
        &format!("policy:{version}"),
        note,
        json!({"effective_from": effective_from.to_string()}),
    )
    .await?;
    Ok(version)
}

/// Approves a draft: it prices every period from its `effective_from` until a later approved version starts.
/// An approved version with the same start is superseded. Refused when a period it would price is closed.
pub async fn approve(tx: &mut OrgTx, actor: &str, version: i32, reason: &str) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    let row: Option<(String, Date)> =
        sqlx::query_as("SELECT state, effective_from FROM cost_policies WHERE version = $1 AND org_id = $2 FOR UPDATE")
            .bind(version)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    let (st, from) = row.ok_or_else(|| AppError::NotFound(format!("cost policy version {version}")))?;
    if st != "draft" {
        return Err(AppError::Conflict(format!("cost policy version {version} is {st}, not a draft")));
    }
    let closed: Option<Date> =
        sqlx::query_scalar("SELECT max(period) FROM periods WHERE state <> 'open' AND period >= $1 AND org_id = $2")
            .bind(from)
            .bind(org)
            .fetch_one(tx.conn())
            .await?;
    if let Some(c) = closed {
        return Err(AppError::Conflict(format!(
            "period {} is already closed: a policy effective from {} would change it; choose a later effective_from",
            Period::from_date(c)?,
            Period::from_date(from)?
        )));
    }
    sqlx::query(
        "UPDATE cost_policies SET state = 'superseded', superseded_at = now()
          WHERE state = 'approved' AND effective_from = $1 AND org_id = $2",
    )
    .bind(from)
    .bind(org)
    .execute(tx.conn())
    .await?;
    sqlx::query(
        "UPDATE cost_policies SET state = 'approved', approved_at = now(), approved_by = $2
          WHERE version = $1 AND org_id = $3",
    )
    .bind(version)
    .bind(actor)
    .bind(org)
    .execute(tx.conn())
    .await?;
    tx.audit(actor, "policy.approve", &format!("policy:{version}"), reason, json!({})).await?;
    Ok(())
}

/// Imports the latest nominal GPU quotas of every ClusterQueue the agents reported, as quotas from the time the
/// agent saw them: ClusterQueue → tenant/department by name (or `mappings`), ResourceFlavor → GPU class when the
/// flavor name equals the class ignoring case. A changed quota ends the previous import and starts a new one.
pub async fn import_kueue_quotas(
    tx: &mut OrgTx,
    actor: &str,
    mappings: &std::collections::BTreeMap<String, String>,
) -> Result<KueueImport, AppError> {
    let org = tx.org().as_uuid();
    let facts: Vec<(Uuid, Value)> = sqlx::query_as(
        "SELECT cluster_id, payload FROM allocation_events WHERE kind = 'quota_observed' AND org_id = $1
          ORDER BY occurred_at, event_id",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let classes: Vec<String> = sqlx::query_scalar("SELECT gpu_class FROM gpu_classes WHERE org_id = $1")
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
    let mut imported = 0;
    let mut skipped = Vec::new();
    for (cluster, payload) in facts {
        let q: QuotaFact = match serde_json::from_value::<Fact>(payload) {
            Ok(Fact { body: FactBody::QuotaObserved(q), .. }) => q,
            Ok(_) => continue,
            Err(e) => {
                skipped.push(format!("unreadable quota fact: {e}"));
                continue;
            }
        };
        let holder_name = mappings.get(&q.cluster_queue).cloned().unwrap_or_else(|| q.cluster_queue.clone());
        let tenant: Option<Uuid> = sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE name = $1 AND org_id = $2")
            .bind(&holder_name)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
        let department: Option<Uuid> = if tenant.is_none() {
            sqlx::query_scalar("SELECT department_id FROM departments WHERE name = $1 AND org_id = $2")
                .bind(&holder_name)
                .bind(org)
                .fetch_optional(tx.conn())
                .await?
        } else {
            None
        };
        if tenant.is_none() && department.is_none() {
            skipped.push(format!("ClusterQueue {}: no tenant or department named {holder_name:?}", q.cluster_queue));
            continue;
        }
        let source_ref = format!("{cluster}/clusterqueue/{}", q.uid);
        let mut per_class: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
        for e in q.quotas.iter().filter(|e| e.resource.starts_with("nvidia.com/")) {
            match classes.iter().find(|c| c.eq_ignore_ascii_case(&e.flavor)) {
                Some(c) => *per_class.entry(c.clone()).or_default() += e.nominal,
                None => skipped.push(format!(
                    "ClusterQueue {}: flavor {:?} names no GPU class of the inventory",
                    q.cluster_queue, e.flavor
                )),
            }
        }
        for (class, nominal) in per_class {
            let current: Option<(Uuid, String, OffsetDateTime)> = sqlx::query_as(
                "SELECT quota_id, gpus::text, valid_from FROM quotas
                  WHERE COALESCE(tenant_id, department_id) = $1 AND gpu_class = $2 AND valid_to IS NULL
                    AND org_id = $3",
            )
            .bind(tenant.or(department))
            .bind(&class)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
            let gpus = nominal.to_string();
            if let Some((id, g, from)) = &current {
                if Decimal::parse(g).ok() == Decimal::parse(&gpus).ok() || q.since <= *from {
                    continue;
                }
                sqlx::query("UPDATE quotas SET valid_to = $2 WHERE quota_id = $1 AND org_id = $3")
                    .bind(id)
                    .bind(q.since)
                    .bind(org)
                    .execute(tx.conn())
                    .await?;
            }
            let scope = holder_department(tx, tenant, department).await?;
            sqlx::query(
                "INSERT INTO quotas (org_id, quota_id, tenant_id, department_id, gpu_class, gpus, valid_from, source,
                                     source_ref, created_by, scope_department_id)
                 VALUES ($1, $2, $3, $4, $5, $6::numeric, $7, 'kueue', $8, $9, $10)",
            )
            .bind(org)
            .bind(Uuid::new_v4())
            .bind(tenant)
            .bind(department)
            .bind(&class)
            .bind(&gpus)
            .bind(q.since)
            .bind(&source_ref)
            .bind(actor)
            .bind(scope)
            .execute(tx.conn())
            .await?;
            imported += 1;
        }
    }
    tx.audit(actor, "quota.import_kueue", "quotas", "", json!({"imported": imported, "skipped": skipped})).await?;
    Ok(KueueImport { imported, skipped })
}

/// The department a quota is seen under: its holder department, or its holder tenant's department.
pub(crate) async fn holder_department(
    tx: &mut OrgTx,
    tenant: Option<Uuid>,
    department: Option<Uuid>,
) -> Result<Option<Uuid>, AppError> {
    if department.is_some() {
        return Ok(department);
    }
    let Some(tenant) = tenant else { return Ok(None) };
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT department_id FROM tenants WHERE org_id = $1 AND tenant_id = $2")
        .bind(org)
        .bind(tenant)
        .fetch_optional(tx.conn())
        .await?)
}

/// One cost policy version's document as the ledger reads it (any state), or `None` when the organization has no
/// such version.
pub async fn policy_document(tx: &mut OrgTx, version: i32) -> Result<Option<CostPolicy>, AppError> {
    let org = tx.org().as_uuid();
    let doc: Option<Value> =
        sqlx::query_scalar("SELECT document FROM cost_policies WHERE version = $1 AND org_id = $2")
            .bind(version)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    let Some(doc) = doc else { return Ok(None) };
    let mut policy: CostPolicy = serde_json::from_value(doc)
        .map_err(|e| AppError::Internal(format!("stored cost policy {version} does not parse: {e}")))?;
    policy.version = u32::try_from(version).map_err(|_| AppError::Internal("negative policy version".into()))?;
    Ok(Some(policy))
}

/// A cost policy version as stored.
#[derive(sqlx::FromRow)]
pub(super) struct PolicyRow {
    pub(super) version: i32,
    pub(super) state: String,
    pub(super) effective_from: Date,
    pub(super) currency: String,
    pub(super) note: String,
    pub(super) document: Value,
    pub(super) created_at: OffsetDateTime,
    pub(super) created_by: String,
    pub(super) approved_at: Option<OffsetDateTime>,
    pub(super) approved_by: Option<String>,
    pub(super) superseded_at: Option<OffsetDateTime>,
}

/// The columns of a [`PolicyRow`].
const POLICY_COLUMNS: &str = "version, state, effective_from, currency::text, note, document, created_at, created_by, \
                              approved_at, approved_by, superseded_at";

/// Every cost policy version, newest first.
pub(super) async fn policies(tx: &mut OrgTx) -> Result<Vec<PolicyRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM cost_policies WHERE org_id = $1 ORDER BY version DESC"))
        .bind(org)
        .fetch_all(tx.conn())
        .await?)
}

/// Cost policy version `version`, if it exists.
pub(super) async fn find_policy(tx: &mut OrgTx, version: i32) -> Result<Option<PolicyRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM cost_policies WHERE version = $1 AND org_id = $2"))
        .bind(version)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// Cost policy version `version`, which exists (the caller just wrote it).
pub(super) async fn policy_row(tx: &mut OrgTx, version: i32) -> Result<PolicyRow, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM cost_policies WHERE version = $1 AND org_id = $2"))
        .bind(version)
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// The state of cost policy version `version`, locked for a change (`None`: no such version).
pub(super) async fn lock_policy_state(tx: &mut OrgTx, version: i32) -> Result<Option<String>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT state FROM cost_policies WHERE version = $1 AND org_id = $2 FOR UPDATE")
        .bind(version)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// Replaces draft `version`'s document, start, currency and note.
pub(super) async fn update_draft(
    tx: &mut OrgTx,
    version: i32,
    document: Value,
    effective_from: Date,
    currency: &str,
    note: &str,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE cost_policies SET document = $2, effective_from = $3, currency = $4, note = $5
          WHERE version = $1 AND org_id = $6",
    )
    .bind(version)
    .bind(document)
    .bind(effective_from)
    .bind(currency)
    .bind(note)
    .bind(org)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A quota as listed: (id, tenant id, tenant, department id, department, GPU class, GPUs, start, end, source,
/// source reference).
pub(super) type QuotaRow = (
    Uuid,
    Option<Uuid>,
    Option<String>,
    Option<Uuid>,
    Option<String>,
    String,
    String,
    OffsetDateTime,
    Option<OffsetDateTime>,
    String,
    String,
);

/// The quotas in force at `at` (every quota when `None`), by department, tenant, class and start.
pub(super) async fn quotas(tx: &mut OrgTx, at: Option<OffsetDateTime>) -> Result<Vec<QuotaRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT q.quota_id, q.tenant_id, t.name, COALESCE(q.department_id, t.department_id), d.name, q.gpu_class,
                q.gpus::text, q.valid_from, q.valid_to, q.source, q.source_ref
           FROM quotas q
           LEFT JOIN tenants t ON t.org_id = q.org_id AND t.tenant_id = q.tenant_id
           LEFT JOIN departments d ON d.org_id = q.org_id AND d.department_id = COALESCE(q.department_id, t.department_id)
          WHERE q.org_id = $2 AND ($1::timestamptz IS NULL OR tstzrange(q.valid_from, q.valid_to) @> $1::timestamptz)
          ORDER BY d.name, t.name NULLS FIRST, q.gpu_class, q.valid_from",
    )
    .bind(at)
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// Whether GPU class `class` is in the approved inventory.
pub(super) async fn gpu_class_known(tx: &mut OrgTx, class: &str) -> Result<bool, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM gpu_classes WHERE gpu_class = $1 AND org_id = $2)")
        .bind(class)
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// A new quota's stored columns.
pub(super) struct NewQuota<'a> {
    /// Its id.
    pub id: Uuid,
    /// The tenant holding it (or …).
    pub tenant: Option<Uuid>,
    /// … the department holding it.
    pub department: Option<Uuid>,
    /// The GPU class.
    pub gpu_class: &'a str,
    /// GPUs, as a decimal.
    pub gpus: String,
    /// Its start.
    pub valid_from: OffsetDateTime,
    /// Its end, if any.
    pub valid_to: Option<OffsetDateTime>,
    /// Who added it.
    pub created_by: String,
    /// The holder's department (what department-scoped readers see it under).
    pub scope: Option<Uuid>,
}

/// Inserts a quota (an overlapping one of the same holder and class is a conflict).
pub(super) async fn insert_quota(tx: &mut OrgTx, q: &NewQuota<'_>) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO quotas (org_id, quota_id, tenant_id, department_id, gpu_class, gpus, valid_from, valid_to, created_by,
                             scope_department_id)
         VALUES ($1, $2, $3, $4, $5, $6::numeric, $7, $8, $9, $10)",
    )
    .bind(org)
    .bind(q.id)
    .bind(q.tenant)
    .bind(q.department)
    .bind(q.gpu_class)
    .bind(&q.gpus)
    .bind(q.valid_from)
    .bind(q.valid_to)
    .bind(&q.created_by)
    .bind(q.scope)
    .execute(tx.conn())
    .await?;
    Ok(())
}
