//! Cost policies (versioned: draft → approved → superseded) and quotas (guaranteed capacity, set by admins or
//! imported from the Kueue ClusterQueues the agents report).

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    routing::{get, post},
};
use gpuledger_api::policy::{
    ApproveBody, CreatedQuota, ImportKueueBody, KueueImport, PolicyBody, PolicyList, PolicyVersion, Quota, QuotaBody,
    QuotaList,
};
use gpuledger_core::{
    Period,
    decimal::Decimal,
    policy::CostPolicy,
    time_fmt::rfc3339,
    wire::{Fact, FactBody, QuotaFact},
};
use serde::Deserialize;
use serde_json::{Value, json};
use time::{Date, OffsetDateTime};
use uuid::Uuid;

use crate::{
    app::AppState,
    auth::{Capability, Principal, require},
    db::OrgTx,
    error::AppError,
    http::{Caller, JsonBody, ManagePolicy, ReadLedger},
};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/policies", get(list_policies).post(create_policy))
        .route("/api/v1/policies/{version}", get(get_policy).put(update_policy))
        .route("/api/v1/policies/{version}/approve", post(approve_policy))
        .route("/api/v1/quotas", get(list_quotas).post(create_quota))
        .route("/api/v1/quotas/import-kueue", post(import_kueue))
}

/// Requires a caller that may read the ledger (any signed-in user, an admin or export token).
pub async fn reader(state: &AppState, headers: &HeaderMap) -> Result<Principal, AppError> {
    require(&state.db, headers, Capability::ReadLedger).await
}

/// Requires a caller that may change cost policies and quotas (admin or finance, or an admin token).
pub async fn manager(state: &AppState, headers: &HeaderMap) -> Result<Principal, AppError> {
    require(&state.db, headers, Capability::ManagePolicy).await
}

/// Largest JSON body of the REST API (agents' batches and gateways' usage records have their own limits).
pub const MAX_API_BODY_BYTES: usize = 1024 * 1024;

/// Parses a JSON request body; the error names the field (`policy.classes[0].borrowed`) and the reason. The
/// body's shape is checked first against [`crate::limits::JsonLimits::API`].
pub fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    if bytes.is_empty() {
        return Err(AppError::invalid("body", "a JSON body is required"));
    }
    if bytes.len() > MAX_API_BODY_BYTES {
        return Err(AppError::PayloadTooLarge(format!("a JSON body larger than {MAX_API_BODY_BYTES} bytes")));
    }
    crate::limits::JsonGuard::check(crate::limits::JsonLimits::API, bytes)
        .map_err(|hit| AppError::invalid(hit.at, hit.reason))?;
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        AppError::invalid(if path == "." { "body".to_string() } else { path }, e.inner().to_string())
    })
}

/// Parses a `YYYY-MM` parameter.
pub fn parse_period(field: &str, s: &str) -> Result<Period, AppError> {
    Period::parse(s).map_err(|e| AppError::invalid(field, e.to_string()))
}

// ---------------------------------------------------------------- policies

type PolicyRow = (
    i32,
    String,
    Date,
    String,
    String,
    Value,
    OffsetDateTime,
    String,
    Option<OffsetDateTime>,
    Option<String>,
    Option<OffsetDateTime>,
);

const POLICY_COLUMNS: &str = "version, state, effective_from, currency::text, note, document, created_at, created_by, \
                              approved_at, approved_by, superseded_at";

fn policy_view(r: PolicyRow) -> Result<PolicyVersion, AppError> {
    Ok(PolicyVersion {
        version: r.0,
        state: r.1,
        effective_from: Period::from_date(r.2)?.to_string(),
        currency: r.3,
        note: r.4,
        document: r.5,
        created_at: rfc3339(r.6),
        created_by: r.7,
        approved_at: r.8.map(rfc3339),
        approved_by: r.9,
        superseded_at: r.10.map(rfc3339),
    })
}

fn parse_policy(body: &PolicyBody) -> Result<(Period, CostPolicy), AppError> {
    let from = parse_period("effective_from", &body.effective_from)?;
    let mut policy: CostPolicy = serde_path_to_error::deserialize(body.policy.clone())
        .map_err(|e| AppError::invalid(format!("policy.{}", e.path()), e.inner().to_string()))?;
    policy.version = 0;
    policy.validate().map_err(|e| match e.field() {
        Some(f) => AppError::invalid(format!("policy.{f}"), e.to_string()),
        None => AppError::from(e),
    })?;
    Ok((from, policy))
}

async fn list_policies(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<PolicyList>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let rows: Vec<PolicyRow> =
        sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM cost_policies WHERE org_id = $1 ORDER BY version DESC"))
            .bind(org)
            .fetch_all(tx.conn())
            .await?;
    tx.commit().await?;
    let items = rows.into_iter().map(policy_view).collect::<Result<Vec<_>, _>>()?;
    Ok(Json(PolicyList { total: items.len(), items }))
}

async fn get_policy(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Path(version): Path<i32>,
) -> Result<Json<PolicyVersion>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let row: Option<PolicyRow> =
        sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM cost_policies WHERE version = $1 AND org_id = $2"))
            .bind(version)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    tx.commit().await?;
    Ok(Json(policy_view(row.ok_or_else(|| AppError::NotFound(format!("cost policy version {version}")))?)?))
}

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

async fn create_policy(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<PolicyBody>,
) -> Result<(StatusCode, Json<PolicyVersion>), AppError> {
    let (from, policy) = parse_policy(&body)?;
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let version = create_draft(&mut tx, &p.actor(), from, &policy, &body.note).await?;
    let row: PolicyRow =
        sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM cost_policies WHERE version = $1 AND org_id = $2"))
            .bind(version)
            .bind(org)
            .fetch_one(tx.conn())
            .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(policy_view(row)?)))
}

async fn update_policy(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    Path(version): Path<i32>,
    JsonBody(body): JsonBody<PolicyBody>,
) -> Result<Json<PolicyVersion>, AppError> {
    let (from, policy) = parse_policy(&body)?;
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let current: Option<String> =
        sqlx::query_scalar("SELECT state FROM cost_policies WHERE version = $1 AND org_id = $2 FOR UPDATE")
            .bind(version)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    match current.as_deref() {
        None => return Err(AppError::NotFound(format!("cost policy version {version}"))),
        Some("draft") => {}
        Some(s) => {
            return Err(AppError::Conflict(format!(
                "cost policy version {version} is {s}: an approved version is never edited; create a new draft"
            )));
        }
    }
    let doc = serde_json::to_value(&policy).map_err(|e| AppError::Internal(e.to_string()))?;
    sqlx::query(
        "UPDATE cost_policies SET document = $2, effective_from = $3, currency = $4, note = $5
          WHERE version = $1 AND org_id = $6",
    )
    .bind(version)
    .bind(doc)
    .bind(from.first_day())
    .bind(&policy.currency)
    .bind(&body.note)
    .bind(org)
    .execute(tx.conn())
    .await?;
    tx.audit_by(&p, "policy.update", &format!("policy:{version}"), &body.note, json!({})).await?;
    let row: PolicyRow =
        sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM cost_policies WHERE version = $1 AND org_id = $2"))
            .bind(version)
            .bind(org)
            .fetch_one(tx.conn())
            .await?;
    tx.commit().await?;
    Ok(Json(policy_view(row)?))
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

/// The body is optional here, so it is read as bytes rather than with [`JsonBody`].
async fn approve_policy(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    Path(version): Path<i32>,
    body: axum::body::Bytes,
) -> Result<Json<PolicyVersion>, AppError> {
    let body: ApproveBody = if body.is_empty() { ApproveBody::default() } else { json_body(&body)? };
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    approve(&mut tx, &p.actor(), version, &body.reason).await?;
    let row: PolicyRow =
        sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM cost_policies WHERE version = $1 AND org_id = $2"))
            .bind(version)
            .bind(org)
            .fetch_one(tx.conn())
            .await?;
    tx.commit().await?;
    Ok(Json(policy_view(row)?))
}

/// The approved policy that prices `period`, with its version filled in.
pub async fn policy_for(tx: &mut OrgTx, period: Period) -> Result<Option<CostPolicy>, AppError> {
    let org = tx.org().as_uuid();
    let row: Option<(i32, Value)> = sqlx::query_as(
        "SELECT version, document FROM cost_policies WHERE state = 'approved' AND effective_from <= $1 AND org_id = $2
         ORDER BY effective_from DESC LIMIT 1",
    )
    .bind(period.first_day())
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    let Some((version, doc)) = row else { return Ok(None) };
    let mut policy: CostPolicy = serde_json::from_value(doc)
        .map_err(|e| AppError::Internal(format!("stored cost policy {version} does not parse: {e}")))?;
    policy.version = u32::try_from(version).map_err(|_| AppError::Internal("negative policy version".into()))?;
    Ok(Some(policy))
}

// ---------------------------------------------------------------- quotas

type QuotaRow = (
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

#[derive(Debug, Deserialize)]
struct QuotaQuery {
    #[serde(default)]
    at: Option<String>,
}

async fn list_quotas(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Query(q): Query<QuotaQuery>,
) -> Result<Json<QuotaList>, AppError> {
    let at = match q.at.as_deref() {
        Some(s) => Some(
            OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map_err(|e| AppError::invalid("at", format!("{s:?} is not an RFC 3339 time: {e}")))?,
        ),
        None => None,
    };
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let rows: Vec<QuotaRow> = sqlx::query_as(
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
    .await?;
    tx.commit().await?;
    let items: Vec<Quota> = rows
        .into_iter()
        .map(|r| Quota {
            quota_id: r.0.to_string(),
            tenant_id: r.1.map(|id| id.to_string()),
            tenant: r.2,
            department_id: r.3.map(|id| id.to_string()),
            department: r.4,
            gpu_class: r.5,
            gpus: r.6,
            valid_from: rfc3339(r.7),
            valid_to: r.8.map(rfc3339),
            source: r.9,
            source_ref: r.10,
        })
        .collect();
    Ok(Json(QuotaList { total: items.len(), items }))
}

/// An RFC 3339 `field` of a request body; the error names the field.
pub(crate) fn instant(field: &str, value: &str) -> Result<OffsetDateTime, AppError> {
    OffsetDateTime::parse(value, &time::format_description::well_known::Rfc3339)
        .map_err(|e| AppError::invalid(field, format!("{value:?} is not an RFC 3339 time: {e}")))
}

pub(crate) async fn lookup_id(tx: &mut OrgTx, table: &str, field: &str, name_or_id: &str) -> Result<Uuid, AppError> {
    let sql = match table {
        "tenants" => "SELECT tenant_id FROM tenants WHERE (name = $1 OR tenant_id::text = $1) AND org_id = $2",
        _ => "SELECT department_id FROM departments WHERE (name = $1 OR department_id::text = $1) AND org_id = $2",
    };
    let org = tx.org().as_uuid();
    let id: Option<Uuid> = sqlx::query_scalar(sql).bind(name_or_id).bind(org).fetch_optional(tx.conn()).await?;
    id.ok_or_else(|| AppError::invalid(field, format!("{name_or_id:?} is not a known {}", &table[..table.len() - 1])))
}

async fn create_quota(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<QuotaBody>,
) -> Result<(StatusCode, Json<CreatedQuota>), AppError> {
    let valid_from = instant("valid_from", &body.valid_from)?;
    let valid_to = body.valid_to.as_deref().map(|t| instant("valid_to", t)).transpose()?;
    let gpus = Decimal::parse(&body.gpus).map_err(|e| AppError::invalid("gpus", e.to_string()))?;
    if gpus.is_negative() {
        return Err(AppError::invalid("gpus", "must not be negative"));
    }
    if gpus.scale() > 4 {
        return Err(AppError::invalid("gpus", "at most 4 decimals"));
    }
    if let Some(to) = valid_to
        && to <= valid_from
    {
        return Err(AppError::invalid("valid_to", "must be after valid_from"));
    }
    let mut tx = p.begin(&state.db).await?;
    let (tenant, department) = match (&body.tenant, &body.department) {
        (Some(t), None) => (Some(lookup_id(&mut tx, "tenants", "tenant", t).await?), None),
        (None, Some(d)) => (None, Some(lookup_id(&mut tx, "departments", "department", d).await?)),
        _ => return Err(AppError::invalid("tenant", "give exactly one of tenant or department")),
    };
    let known: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM gpu_classes WHERE gpu_class = $1 AND org_id = $2)")
            .bind(&body.gpu_class)
            .bind(p.org.as_uuid())
            .fetch_one(tx.conn())
            .await?;
    if !known {
        return Err(AppError::invalid("gpu_class", format!("{:?} is not in the approved inventory", body.gpu_class)));
    }
    let id = Uuid::new_v4();
    let scope = holder_department(&mut tx, tenant, department).await?;
    sqlx::query(
        "INSERT INTO quotas (org_id, quota_id, tenant_id, department_id, gpu_class, gpus, valid_from, valid_to, created_by,
                             scope_department_id)
         VALUES ($1, $2, $3, $4, $5, $6::numeric, $7, $8, $9, $10)",
    )
    .bind(p.org.as_uuid())
    .bind(id)
    .bind(tenant)
    .bind(department)
    .bind(&body.gpu_class)
    .bind(gpus.to_string())
    .bind(valid_from)
    .bind(valid_to)
    .bind(p.actor())
    .bind(scope)
    .execute(tx.conn())
    .await
    .map_err(|e| {
        AppError::from(e)
            .on_conflict(|| "an existing quota for this holder and class overlaps that validity; end it first".into())
    })?;
    tx.audit_by(&p, "quota.create", &format!("quota:{id}"), "", json!({"gpus": gpus.to_string()})).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(CreatedQuota { quota_id: id.to_string() })))
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
async fn holder_department(
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

/// The body is optional here, so it is read as bytes rather than with [`JsonBody`].
async fn import_kueue(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    body: axum::body::Bytes,
) -> Result<Json<KueueImport>, AppError> {
    let body: ImportKueueBody = if body.is_empty() { ImportKueueBody::default() } else { json_body(&body)? };
    let mut tx = p.begin(&state.db).await?;
    let out = import_kueue_quotas(&mut tx, &p.actor(), &body.mappings).await?;
    tx.commit().await?;
    Ok(Json(out))
}
