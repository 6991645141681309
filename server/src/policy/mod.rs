//! Cost policies (versioned: draft → approved → superseded) and quotas (guaranteed capacity, set by admins or
//! imported from the Kueue ClusterQueues the agents report).

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, post},
};
use gpuledger_api::{
    params::{MonthParams, QuotaParams, VersionPath},
    policy::{
        ApproveBody, CreatedQuota, Impact, ImportKueueBody, KueueImport, PolicyBody, PolicyList, PolicyVersion, Quota,
        QuotaBody, QuotaList,
    },
};
use gpuledger_core::{Period, policy::CostPolicy, time_fmt::rfc3339};
use serde_json::json;
use uuid::Uuid;

use crate::http::Params;
use crate::{
    auth::{Capability, Principal},
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, JsonBody, ManagePolicy, OptionalJsonBody, PathParams, ReadLedger},
    state::AppState,
    store::lookup_id,
};

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/policies", list_policies),
        described("post", "/api/v1/policies", post_policy),
        described("get", "/api/v1/policies/{version}", get_policy),
        described("put", "/api/v1/policies/{version}", put_policy),
        described("post", "/api/v1/policies/{version}/approve", post_approval),
        described("get", "/api/v1/policies/{version}/impact", policy_impact),
        described("get", "/api/v1/quotas", list_quotas),
        described("post", "/api/v1/quotas", post_quota),
        described("post", "/api/v1/quotas/import-kueue", import_kueue),
    ]
}

/// A version from its path, as the store keys it.
fn version_of(path: &VersionPath) -> i32 {
    i32::try_from(path.version.get()).unwrap_or(i32::MAX)
}

pub mod store;
pub(crate) use store::holder_department;
pub use store::{approve, create_draft, import_kueue_quotas};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/policies", get(list_policies).post(post_policy))
        .route("/api/v1/policies/{version}", get(get_policy).put(put_policy))
        .route("/api/v1/policies/{version}/approve", post(post_approval))
        .route("/api/v1/quotas", get(list_quotas).post(post_quota))
        .route("/api/v1/quotas/import-kueue", post(import_kueue))
}

/// The what-if route: it computes a month twice, so the server puts it behind the heavy-read turns
/// (`app::api_routes`).
pub fn impact_router() -> Router<AppState> {
    Router::new().route("/api/v1/policies/{version}/impact", get(policy_impact))
}

// ---------------------------------------------------------------- policies

fn policy_view(r: store::PolicyRow) -> Result<PolicyVersion, AppError> {
    Ok(PolicyVersion {
        version: r.version,
        state: r.state.parse()?,
        effective_from: Period::from_date(r.effective_from)?.to_string(),
        currency: r.currency,
        note: r.note,
        document: r.document,
        created_at: rfc3339(r.created_at),
        created_by: r.created_by,
        approved_at: r.approved_at.map(rfc3339),
        approved_by: r.approved_by,
        superseded_at: r.superseded_at.map(rfc3339),
    })
}

/// The draft's month and policy. The document's form is the contract's (`PolicyDocument`, read by `JsonBody`);
/// what remains are the policy's rules across entries (a class listed twice, shares adding up to zero): 409.
fn parse_policy(body: &PolicyBody) -> Result<(Period, CostPolicy), AppError> {
    let from = body.effective_from.period();
    let document = serde_json::to_value(&body.policy).map_err(|e| AppError::Internal(e.to_string()))?;
    let mut policy: CostPolicy = serde_json::from_value(document)
        .map_err(|e| AppError::Internal(format!("a policy the contract reads does not make a CostPolicy: {e}")))?;
    policy.version = 0;
    policy.validate().map_err(|e| match e.field() {
        Some(f) => AppError::refused(format!("policy.{f}"), e.to_string()),
        None => AppError::from(e),
    })?;
    Ok((from, policy))
}

async fn list_policies(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<PolicyList>, AppError> {
    read_policies(&state, &p).await.map(Json)
}

/// The cost policy versions (`GET /api/v1/policies`).
pub(crate) async fn read_policies(state: &AppState, p: &crate::auth::Principal) -> Result<PolicyList, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let rows = store::policies(&mut tx).await?;
    tx.commit().await?;
    let items = rows.into_iter().map(policy_view).collect::<Result<Vec<_>, _>>()?;
    Ok(PolicyList { total: items.len(), items })
}

async fn get_policy(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    PathParams(path): PathParams<VersionPath>,
) -> Result<Json<PolicyVersion>, AppError> {
    let version = version_of(&path);
    let mut tx = p.begin(&state.db).await?;
    let row = store::find_policy(&mut tx, version).await?;
    tx.commit().await?;
    Ok(Json(policy_view(row.ok_or_else(|| AppError::NotFound(format!("cost policy version {version}")))?)?))
}

async fn post_policy(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<PolicyBody>,
) -> Result<(StatusCode, Json<PolicyVersion>), AppError> {
    Ok((StatusCode::CREATED, Json(create_policy(&state, &p, body).await?)))
}

pub(crate) async fn create_policy(
    state: &AppState,
    p: &Principal,
    body: PolicyBody,
) -> Result<PolicyVersion, AppError> {
    p.require(Capability::ManagePolicy)?;
    let (from, policy) = parse_policy(&body)?;
    let mut tx = p.begin(&state.db).await?;
    let version = create_draft(&mut tx, &p.actor(), from, &policy, body.note.as_str()).await?;
    let row = store::policy_row(&mut tx, version).await?;
    tx.commit().await?;
    policy_view(row)
}

async fn put_policy(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    PathParams(path): PathParams<VersionPath>,
    JsonBody(body): JsonBody<PolicyBody>,
) -> Result<Json<PolicyVersion>, AppError> {
    Ok(Json(update_policy(&state, &p, path, body).await?))
}

pub(crate) async fn update_policy(
    state: &AppState,
    p: &Principal,
    path: VersionPath,
    body: PolicyBody,
) -> Result<PolicyVersion, AppError> {
    p.require(Capability::ManagePolicy)?;
    let version = version_of(&path);
    let (from, policy) = parse_policy(&body)?;
    let mut tx = p.begin(&state.db).await?;
    let current = store::lock_policy_state(&mut tx, version).await?;
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
    store::update_draft(&mut tx, version, doc, from.first_day(), &policy.currency, body.note.as_str()).await?;
    tx.audit_by(p, "policy.update", &format!("policy:{version}"), body.note.as_str(), json!({})).await?;
    let row = store::policy_row(&mut tx, version).await?;
    tx.commit().await?;
    policy_view(row)
}

/// The body is optional here.
async fn post_approval(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    PathParams(path): PathParams<VersionPath>,
    OptionalJsonBody(body): OptionalJsonBody<ApproveBody>,
) -> Result<Json<PolicyVersion>, AppError> {
    Ok(Json(approve_policy(&state, &p, path, body).await?))
}

pub(crate) async fn approve_policy(
    state: &AppState,
    p: &Principal,
    path: VersionPath,
    body: ApproveBody,
) -> Result<PolicyVersion, AppError> {
    p.require(Capability::ManagePolicy)?;
    let version = version_of(&path);
    let mut tx = p.begin(&state.db).await?;
    approve(&mut tx, &p.actor(), version, body.reason.as_str()).await?;
    let row = store::policy_row(&mut tx, version).await?;
    tx.commit().await?;
    policy_view(row)
}

/// `GET /api/v1/policies/{version}/impact?period=YYYY-MM`: the month computed with version `version` in place of
/// the approved policy that prices it, beside the month as it stands, per department and tenant. Any version may
/// be asked about (a draft is the point; the version that prices the month answers all deltas zero). A closed
/// month is computed from the inputs its close froze and answers `closed: true`: a what-if, nothing changes.
/// Readers of the policies may call it; a caller limited to departments sees those departments (and a total of
/// them). The version is looked up as the caller (another organization's is not found); the month is computed for
/// the whole organization (overhead is split across every tenant).
async fn policy_impact(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    PathParams(path): PathParams<VersionPath>,
    Params(q): Params<MonthParams>,
) -> Result<Json<Impact>, AppError> {
    read_impact(&state, &p, path, q).await.map(Json)
}

/// A policy version's impact on a month (`GET /api/v1/policies/{version}/impact`).
pub(crate) async fn read_impact(
    state: &AppState,
    p: &crate::auth::Principal,
    path: VersionPath,
    q: MonthParams,
) -> Result<Impact, AppError> {
    let version = version_of(&path);
    let period = q.period.period();
    let mut tx = p.begin(&state.db).await?;
    let policy = store::policy_document(&mut tx, version).await?;
    tx.commit_quiet().await?;
    let policy = policy.ok_or_else(|| AppError::NotFound(format!("cost policy version {version}")))?;
    let mut tx = state.db.begin_org(p.org).await?;
    let month = crate::impact::frozen_or_open(&mut tx, period).await?;
    if policy.currency != month.input.policy.currency {
        return Err(AppError::Conflict(format!(
            "cost policy version {version} prices in {}, {period} in {}: amounts in two currencies do not compare",
            policy.currency, month.input.policy.currency
        )));
    }
    let draft = crate::impact::with_policy(&mut tx, &month, policy).await?;
    tx.commit_quiet().await?;
    let approved_version = i32::try_from(month.input.policy.version).unwrap_or(i32::MAX);
    let note = if month.closed {
        format!(
            "{period} is closed: both sides are computed from the inputs its close froze, so `approved` is its closed \
             figures; nothing is changed"
        )
    } else {
        format!(
            "{period} is open: both sides are computed from today's facts, approved credits and late-data \
             corrections, as the month's provisional figures are"
        )
    };
    let impact = crate::impact::compare(crate::impact::Comparison {
        period,
        closed: month.closed,
        version,
        approved_version,
        currency: &month.input.policy.currency,
        approved: &month.lines,
        draft: &draft,
        scope: p.departments.as_deref(),
        note,
    })?;
    Ok(impact)
}

// ---------------------------------------------------------------- quotas

async fn list_quotas(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<QuotaParams>,
) -> Result<Json<QuotaList>, AppError> {
    read_quotas(&state, &p, q).await.map(Json)
}

/// The quotas (`GET /api/v1/quotas`).
pub(crate) async fn read_quotas(
    state: &AppState,
    p: &crate::auth::Principal,
    q: QuotaParams,
) -> Result<QuotaList, AppError> {
    let at = q.at.map(|t| t.at());
    let mut tx = p.begin(&state.db).await?;
    let rows = store::quotas(&mut tx, at).await?;
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
    Ok(QuotaList { total: items.len(), items })
}

pub(super) async fn post_quota(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<QuotaBody>,
) -> Result<(StatusCode, Json<CreatedQuota>), AppError> {
    Ok((StatusCode::CREATED, Json(create_quota(&state, &p, body).await?)))
}

/// Adds a quota (admin or finance).
pub(crate) async fn create_quota(state: &AppState, p: &Principal, body: QuotaBody) -> Result<CreatedQuota, AppError> {
    p.require(Capability::ManagePolicy)?;
    let valid_from = body.valid_from.at();
    let valid_to = body.valid_to.map(|t| t.at());
    let gpus = body.gpus.decimal();
    if let Some(to) = valid_to
        && to <= valid_from
    {
        return Err(AppError::refused("valid_to", "must be after valid_from"));
    }
    let mut tx = p.begin(&state.db).await?;
    let (tenant, department) = match (body.tenant.as_deref(), body.department.as_deref()) {
        (Some(t), None) => (Some(lookup_id(&mut tx, "tenants", "tenant", t).await?), None),
        (None, Some(d)) => (None, Some(lookup_id(&mut tx, "departments", "department", d).await?)),
        _ => return Err(AppError::invalid("tenant", "give exactly one of tenant or department")),
    };
    if let Some(t) = tenant {
        crate::store::refuse_retired(&mut tx, "tenants", "tenant", t, valid_from).await?;
    }
    if let Some(d) = department {
        crate::store::refuse_retired(&mut tx, "departments", "department", d, valid_from).await?;
    }
    if !store::gpu_class_known(&mut tx, body.gpu_class.as_str()).await? {
        return Err(AppError::refused(
            "gpu_class",
            format!("{:?} is not in the approved inventory", body.gpu_class.as_str()),
        ));
    }
    let id = Uuid::new_v4();
    let scope = holder_department(&mut tx, tenant, department).await?;
    let quota = store::NewQuota {
        id,
        tenant,
        department,
        gpu_class: body.gpu_class.as_str(),
        gpus: gpus.to_string(),
        valid_from,
        valid_to,
        created_by: p.actor(),
        scope,
    };
    store::insert_quota(&mut tx, &quota).await.map_err(|e| {
        AppError::from(e)
            .on_conflict(|| "an existing quota for this holder and class overlaps that validity; end it first".into())
    })?;
    tx.audit_by(p, "quota.create", &format!("quota:{id}"), "", json!({"gpus": gpus.to_string()})).await?;
    tx.commit().await?;
    Ok(CreatedQuota { quota_id: id.to_string() })
}

/// The body is optional here.
async fn import_kueue(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    OptionalJsonBody(body): OptionalJsonBody<ImportKueueBody>,
) -> Result<Json<KueueImport>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let out = import_kueue_quotas(&mut tx, &p.actor(), &body.mappings.0).await?;
    tx.commit().await?;
    Ok(Json(out))
}
