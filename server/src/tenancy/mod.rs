//! Onboarding an organization's structure: departments, tenants and the approved GPU inventory (models → classes,
//! MIG and vGPU profile fractions, time-slicing policies), each inventory entry versioned by its validity.
//!
//! - `GET/POST /api/v1/departments`, `GET/POST /api/v1/tenants` (writes: admins). A new tenant takes over what
//!   was waiting for it: namespaces whose labels named it get their ownership from the stored facts (as if the
//!   labels had just arrived), and service usage kept under its name is attributed to it.
//! - `GET /api/v1/inventory`, `POST /api/v1/inventory/models`, `POST /api/v1/inventory/profiles`,
//!   `POST /api/v1/inventory/timeslicing` (writes: admin or finance). A new entry starting after the one in force
//!   ends that one where it starts (history is closed, never overwritten); one that would start before or at the
//!   open entry's start is refused (409). Allocations the change concerns are recomputed from their stored facts,
//!   so inventory gaps close and later months use the new fraction or class; closed months get corrections at the
//!   next close, as with any late fact.
//! - `POST /api/v1/tenancy/reassignments`, `GET /api/v1/tenancy/ownership` (`reassign.rs`): dated ownership
//!   changes by an admin.

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, patch, post},
};
use gpuledger_api::input::MigProfileName;
use gpuledger_api::{
    Items,
    tenancy::{
        CreatedDepartment, CreatedModel, CreatedProfile, CreatedTenant, CreatedTimeslicing, Department, DepartmentBody,
        GpuClass, GpuModel, GpuProfile, Inventory, ModelBody, ProfileBody, ProfileKind, ShareBasisEntry, Tenant,
        TenantBody, Timeslicing, TimeslicingBody,
    },
};
use gpuledger_core::Fraction;
use serde_json::json;
use uuid::Uuid;

use crate::{
    auth::{Capability, Principal},
    db::OrgTx,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Administer, Caller, JsonBody, ManagePolicy, ReadLedger},
    state::AppState,
};

// Defined before the modules: `store::inventory` writes its columns with it.
/// A `timestamptz` column as the answers have always written it: PostgreSQL's JSON form
/// (`2026-10-01T00:00:00+00:00`), so the strings stay exactly what clients compare.
macro_rules! json_time {
    ($column:literal) => {
        concat!("to_jsonb(", $column, ") #>> '{}'")
    };
}

mod impact;
mod reassign;
mod rename;
mod rules;
mod sharing;
pub mod store;
pub(crate) use store::close_open_entry;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/departments", get(list_departments).post(post_department))
        .route("/api/v1/departments/{department}", patch(rename::patch_department))
        .route("/api/v1/tenants", get(list_tenants).post(post_tenant))
        .route("/api/v1/tenants/{tenant}", patch(rename::patch_tenant))
        .route("/api/v1/inventory", get(get_inventory))
        .route("/api/v1/inventory/models", post(post_model))
        .route("/api/v1/inventory/profiles", post(post_profile))
        .route("/api/v1/inventory/timeslicing", post(post_timeslicing))
        .route("/api/v1/inventory/share-basis", post(sharing::add_basis))
        .route("/api/v1/tenancy/reassignments", post(reassign::post_reassignment))
        .route("/api/v1/tenancy/ownership", get(reassign::ownership))
        .route("/api/v1/tenancy/namespace-rules", get(rules::list_rules).post(rules::post_rule))
}

/// The feature's operations, typed: the REST handlers here and the portal's forms both call these, and each checks
/// its caller's capability itself (issue 34's service layer).
pub(crate) mod service {
    pub(crate) use super::{
        add_model, add_profile, add_timeslicing, create_department, create_tenant,
        impact::preview_inventory,
        read_departments, read_tenants,
        reassign::reassign,
        rename::{update_department, update_tenant},
        rules::{add_rule, read_rules},
    };
}

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/departments", list_departments),
        described("post", "/api/v1/departments", post_department),
        described("patch", "/api/v1/departments/{department}", rename::patch_department),
        described("get", "/api/v1/tenants", list_tenants),
        described("post", "/api/v1/tenants", post_tenant),
        described("patch", "/api/v1/tenants/{tenant}", rename::patch_tenant),
        described("get", "/api/v1/inventory", get_inventory),
        described("post", "/api/v1/inventory/models", post_model),
        described("post", "/api/v1/inventory/profiles", post_profile),
        described("post", "/api/v1/inventory/timeslicing", post_timeslicing),
        described("post", "/api/v1/inventory/share-basis", sharing::add_basis),
        described("post", "/api/v1/tenancy/reassignments", reassign::post_reassignment),
        described("get", "/api/v1/tenancy/ownership", reassign::ownership),
        described("get", "/api/v1/tenancy/namespace-rules", rules::list_rules),
        described("post", "/api/v1/tenancy/namespace-rules", rules::post_rule),
        described("post", "/api/v1/inventory/impact", impact::inventory_impact),
    ]
}

/// The inventory preview: it computes a month twice, so the server puts it behind the heavy-read turns
/// (`app::api_routes`).
pub fn impact_router() -> Router<AppState> {
    Router::new().route("/api/v1/inventory/impact", post(impact::inventory_impact))
}

// ---------------------------------------------------------------- departments and tenants

async fn list_departments(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
) -> Result<Json<Items<Department>>, AppError> {
    read_departments(&state, &p).await.map(Json)
}

/// The departments with their tenant counts (`GET /api/v1/departments`).
pub(crate) async fn read_departments(
    state: &AppState,
    p: &crate::auth::Principal,
) -> Result<Items<Department>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let items = store::departments(&mut tx).await?;
    tx.commit().await?;
    let items = items
        .into_iter()
        .map(|r| Department {
            department_id: r.department_id.to_string(),
            name: r.name,
            tenants: r.tenants,
            retired_at: r.retired_at.map(gpuledger_core::time_fmt::rfc3339),
            former_names: r.former_names,
            cost_center: r.cost_center,
            gl_account: r.gl_account,
        })
        .collect();
    Ok(Items { items })
}

pub(super) async fn post_department(
    State(state): State<AppState>,
    p: Caller<Administer>,
    JsonBody(body): JsonBody<DepartmentBody>,
) -> Result<(StatusCode, Json<CreatedDepartment>), AppError> {
    Ok((StatusCode::CREATED, Json(create_department(&state, &p, body).await?)))
}

pub(crate) async fn create_department(
    state: &AppState,
    p: &Principal,
    body: DepartmentBody,
) -> Result<CreatedDepartment, AppError> {
    p.require(Capability::Administer)?;
    let name = body.name.into_inner();
    let mut tx = p.begin(&state.db).await?;
    let id = Uuid::new_v4();
    store::names::insert_department(&mut tx, id, &name)
        .await
        .map_err(|e| AppError::from(e).on_conflict(|| format!("a department named {name:?} exists")))?;
    tx.audit_by(p, "department.create", &format!("department:{id}"), "", json!({ "name": name })).await?;
    tx.commit().await?;
    Ok(CreatedDepartment { department_id: id.to_string(), name })
}

async fn list_tenants(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<Items<Tenant>>, AppError> {
    read_tenants(&state, &p).await.map(Json)
}

/// The tenants with their departments (`GET /api/v1/tenants`).
pub(crate) async fn read_tenants(state: &AppState, p: &crate::auth::Principal) -> Result<Items<Tenant>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let items = store::tenants(&mut tx).await?;
    tx.commit().await?;
    let items = items
        .into_iter()
        .map(|r| Tenant {
            tenant_id: r.tenant_id.to_string(),
            name: r.name,
            department_id: r.department_id.to_string(),
            department: r.department,
            namespaces: r.namespaces,
            retired_at: r.retired_at.map(gpuledger_core::time_fmt::rfc3339),
            former_names: r.former_names,
        })
        .collect();
    Ok(Items { items })
}

pub(super) async fn post_tenant(
    State(state): State<AppState>,
    p: Caller<Administer>,
    JsonBody(body): JsonBody<TenantBody>,
) -> Result<(StatusCode, Json<CreatedTenant>), AppError> {
    Ok((StatusCode::CREATED, Json(create_tenant(&state, &p, body).await?)))
}

pub(crate) async fn create_tenant(
    state: &AppState,
    p: &Principal,
    body: TenantBody,
) -> Result<CreatedTenant, AppError> {
    p.require(Capability::Administer)?;
    let name = body.name.into_inner();
    let mut tx = p.begin(&state.db).await?;
    let department = crate::store::lookup_id(&mut tx, "departments", "department", &body.department).await?;
    crate::store::refuse_retired(&mut tx, "departments", "department", department, time::OffsetDateTime::now_utc())
        .await?;
    let id = Uuid::new_v4();
    store::names::insert_tenant(&mut tx, id, department, &name)
        .await
        .map_err(|e| AppError::from(e).on_conflict(|| format!("a tenant named {name:?} exists")))?;
    let namespaces = crate::ingest::reapply_namespaces_naming(&mut tx, p.org, &name).await?;
    let usage = store::names::attribute_usage(&mut tx, id, &name, department).await?;
    tx.audit_by(
        p,
        "tenant.create",
        &format!("tenant:{id}"),
        "",
        json!({ "name": name, "department_id": department, "namespaces": namespaces, "usage_rows": usage }),
    )
    .await?;
    tx.commit().await?;
    Ok(CreatedTenant {
        tenant_id: id.to_string(),
        name,
        department_id: department.to_string(),
        namespaces_mapped: namespaces,
        usage_rows_attributed: usage,
    })
}

// ---------------------------------------------------------------- inventory

async fn get_inventory(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<Inventory>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let classes = store::inventory::gpu_classes(&mut tx).await?;
    let models = store::inventory::gpu_models(&mut tx).await?;
    let profiles = store::inventory::profiles(&mut tx).await?;
    let timeslicing = store::inventory::timeslicing(&mut tx).await?;
    let share_bases = store::inventory::share_bases(&mut tx).await?;
    tx.commit().await?;
    Ok(Json(Inventory {
        share_bases: share_bases
            .into_iter()
            .map(|(cluster, basis, valid_from, valid_to)| ShareBasisEntry { cluster, basis, valid_from, valid_to })
            .collect(),
        classes: classes.into_iter().map(|(gpu_class, description)| GpuClass { gpu_class, description }).collect(),
        models: models
            .into_iter()
            .map(|r| GpuModel {
                model: r.model,
                gpu_class: r.gpu_class,
                memory_mib: r.memory_mib,
                valid_from: r.valid_from,
                valid_to: r.valid_to,
            })
            .collect(),
        profiles: profiles
            .into_iter()
            .map(|r| GpuProfile {
                kind: r.kind.0,
                model: r.model,
                profile: r.profile,
                fraction: r.fraction,
                valid_from: r.valid_from,
                valid_to: r.valid_to,
            })
            .collect(),
        timeslicing: timeslicing
            .into_iter()
            .map(|r| Timeslicing {
                cluster: r.cluster,
                name: r.name,
                replicas: r.replicas,
                valid_from: r.valid_from,
                valid_to: r.valid_to,
            })
            .collect(),
    }))
}

/// What a saved inventory change writes to the audit log: its target and details.
struct Written<T> {
    answer: T,
    target: String,
    details: serde_json::Value,
}

pub(super) async fn post_model(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<ModelBody>,
) -> Result<(StatusCode, Json<CreatedModel>), AppError> {
    Ok((StatusCode::CREATED, Json(add_model(&state, &p, body).await?)))
}

pub(crate) async fn add_model(state: &AppState, p: &Principal, body: ModelBody) -> Result<CreatedModel, AppError> {
    p.require(Capability::ManagePolicy)?;
    let mut tx = p.begin(&state.db).await?;
    let w = write_model(&mut tx, &body).await?;
    tx.audit_by(p, "inventory.model", &w.target, "", w.details).await?;
    tx.commit().await?;
    Ok(w.answer)
}

/// Validates and writes a GPU model entry in `tx` (recomputing the allocations it concerns), neither audited nor
/// committed: the save and its preview ([`impact`]) share it.
async fn write_model(tx: &mut OrgTx, body: &ModelBody) -> Result<Written<CreatedModel>, AppError> {
    let valid_from = body.valid_from.at();
    let model = body.model.to_string();
    let class = body.gpu_class.to_string();
    let memory_mib = body.memory_mib.map(|m| i32::try_from(m.get()).unwrap_or(i32::MAX));
    let org = tx.org();
    store::inventory::ensure_gpu_class(tx, &class).await?;
    close_open_entry(tx, "gpu_models", &[("model", model.clone())], valid_from).await?;
    store::inventory::insert_model(tx, &model, valid_from, &class, memory_mib).await?;
    let recomputed = crate::ingest::recompute_for_inventory(tx, org, &model, valid_from).await?;
    Ok(Written {
        target: format!("gpu_model:{model}"),
        details: json!({ "gpu_class": class, "valid_from": valid_from.unix_timestamp(), "recomputed": recomputed }),
        answer: CreatedModel { model, gpu_class: class, recomputed_allocations: recomputed },
    })
}

pub(super) async fn post_profile(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<ProfileBody>,
) -> Result<(StatusCode, Json<CreatedProfile>), AppError> {
    Ok((StatusCode::CREATED, Json(add_profile(&state, &p, body).await?)))
}

pub(crate) async fn add_profile(
    state: &AppState,
    p: &Principal,
    body: ProfileBody,
) -> Result<CreatedProfile, AppError> {
    p.require(Capability::ManagePolicy)?;
    let mut tx = p.begin(&state.db).await?;
    let w = write_profile(&mut tx, &body).await?;
    tx.audit_by(p, "inventory.profile", &w.target, "", w.details).await?;
    tx.commit().await?;
    Ok(w.answer)
}

/// Validates and writes a MIG or vGPU profile entry in `tx` (recomputing the allocations it concerns), neither
/// audited nor committed: the save and its preview ([`impact`]) share it.
async fn write_profile(tx: &mut OrgTx, body: &ProfileBody) -> Result<Written<CreatedProfile>, AppError> {
    let valid_from = body.valid_from.at();
    let table = match body.kind {
        ProfileKind::Mig => "mig_profiles",
        ProfileKind::Vgpu => "vgpu_profiles",
    };
    let model = body.model.to_string();
    let profile = body.profile.to_string();
    if body.kind == ProfileKind::Mig {
        // The name's form is the contract's (422); a compute part larger than its GPU instance is the profile's rule.
        MigProfileName::parse(&profile).map_err(|reason| AppError::invalid("profile", reason))?;
        profile.parse::<gpuledger_core::ids::MigProfile>().map_err(|e| AppError::refused("profile", e.to_string()))?;
    }
    let fraction: Fraction =
        body.fraction.parse().map_err(|e: gpuledger_core::DomainError| AppError::refused("fraction", e.to_string()))?;
    if fraction.is_zero() || fraction > Fraction::ONE {
        return Err(AppError::refused("fraction", "must be more than 0 and at most 1 (of one GPU)"));
    }
    let (num, den) = (i64::try_from(fraction.numer()), i64::try_from(fraction.denom()));
    let (Ok(num), Ok(den)) = (num, den) else {
        return Err(AppError::refused("fraction", "numerator and denominator are too large"));
    };
    let org = tx.org();
    close_open_entry(tx, table, &[("model", model.clone()), ("profile", profile.clone())], valid_from).await?;
    store::inventory::insert_profile(tx, table, &model, &profile, valid_from, num, den).await?;
    let recomputed = crate::ingest::recompute_for_inventory(tx, org, &model, valid_from).await?;
    Ok(Written {
        target: format!("{}:{model}/{profile}", body.kind.as_str()),
        details: json!({ "fraction": format!("{num}/{den}"), "valid_from": valid_from.unix_timestamp(), "recomputed": recomputed }),
        answer: CreatedProfile {
            kind: body.kind,
            model,
            profile,
            fraction: format!("{num}/{den}"),
            recomputed_allocations: recomputed,
        },
    })
}

/// Declared time-slicing policies (what a cluster's device plugin was configured with, for reviewers; each
/// allocation carries the replica count its agent read, which is what prices it).
pub(super) async fn post_timeslicing(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<TimeslicingBody>,
) -> Result<(StatusCode, Json<CreatedTimeslicing>), AppError> {
    Ok((StatusCode::CREATED, Json(add_timeslicing(&state, &p, body).await?)))
}

pub(crate) async fn add_timeslicing(
    state: &AppState,
    p: &Principal,
    body: TimeslicingBody,
) -> Result<CreatedTimeslicing, AppError> {
    p.require(Capability::ManagePolicy)?;
    let mut tx = p.begin(&state.db).await?;
    let w = write_timeslicing(&mut tx, &body).await?;
    tx.audit_by(p, "inventory.timeslicing", &w.target, "", w.details).await?;
    tx.commit().await?;
    Ok(w.answer)
}

/// Validates and writes a time-slicing declaration in `tx`, neither audited nor committed: the save and its
/// preview ([`impact`]) share it.
async fn write_timeslicing(tx: &mut OrgTx, body: &TimeslicingBody) -> Result<Written<CreatedTimeslicing>, AppError> {
    let valid_from = body.valid_from.at();
    let name = body.name.to_string();
    let replicas = i32::try_from(body.replicas.get()).unwrap_or(i32::MAX);
    let Some(cluster) = store::inventory::cluster_id_by_name(tx, body.cluster.as_str()).await? else {
        return Err(AppError::unknown("cluster", format!("no cluster named {:?}", body.cluster.as_str())));
    };
    close_open_entry(
        tx,
        "timeslice_policies",
        &[("cluster_id", cluster.to_string()), ("name", name.clone())],
        valid_from,
    )
    .await?;
    store::inventory::insert_timeslicing(tx, cluster, &name, valid_from, replicas).await?;
    Ok(Written {
        target: format!("timeslicing:{}/{name}", body.cluster.as_str()),
        details: json!({ "replicas": replicas, "valid_from": valid_from.unix_timestamp() }),
        answer: CreatedTimeslicing { cluster: body.cluster.to_string(), name, replicas },
    })
}
