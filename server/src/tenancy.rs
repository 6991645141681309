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

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::{get, post},
};
use gpuledger_core::Fraction;
use serde::Deserialize;
use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    app::AppState,
    auth::{Capability, require},
    db::OrgTx,
    error::AppError,
    policy::{audit_by, json_body, manager, reader},
};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/departments", get(list_departments).post(create_department))
        .route("/api/v1/tenants", get(list_tenants).post(create_tenant))
        .route("/api/v1/inventory", get(get_inventory))
        .route("/api/v1/inventory/models", post(add_model))
        .route("/api/v1/inventory/profiles", post(add_profile))
        .route("/api/v1/inventory/timeslicing", post(add_timeslicing))
}

/// Longest department, tenant, class or policy name.
const MAX_NAME: usize = 100;

fn name_field(field: &str, value: &str) -> Result<String, AppError> {
    let v = value.trim();
    if v.is_empty() || v.chars().count() > MAX_NAME {
        return Err(AppError::invalid(field, format!("must be 1 to {MAX_NAME} characters")));
    }
    if v.chars().any(char::is_control) {
        return Err(AppError::invalid(field, "must not contain control characters"));
    }
    Ok(v.to_string())
}

fn unique_violation(e: &sqlx::Error, code: &str) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some(code))
}

/// Rows of `sql` as JSON objects; `$1` in `sql` is the transaction's organization (each statement filters on it).
async fn rows(tx: &mut OrgTx, sql: &str) -> Result<Vec<Value>, AppError> {
    let org = tx.org().as_uuid();
    let rows: Vec<(Value,)> =
        sqlx::query_as(&format!("SELECT to_jsonb(r) FROM ({sql}) r")).bind(org).fetch_all(tx.conn()).await?;
    Ok(rows.into_iter().map(|(v,)| v).collect())
}

// ---------------------------------------------------------------- departments and tenants

async fn list_departments(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, AppError> {
    let p = reader(&state, &headers).await?;
    let mut tx = p.begin(&state.db).await?;
    let items = rows(
        &mut tx,
        "SELECT d.department_id, d.name,
                (SELECT count(*) FROM tenants t WHERE t.org_id = $1 AND t.department_id = d.department_id) AS tenants
           FROM departments d WHERE d.org_id = $1 ORDER BY d.name",
    )
    .await?;
    tx.commit().await?;
    Ok(Json(json!({ "items": items })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DepartmentBody {
    name: String,
}

async fn create_department(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), AppError> {
    let p = require(&state.db, &headers, Capability::Administer).await?;
    let body: DepartmentBody = json_body(&body)?;
    let name = name_field("name", &body.name)?;
    let mut tx = p.begin(&state.db).await?;
    let id = Uuid::new_v4();
    let result = sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, $3)")
        .bind(p.org.as_uuid())
        .bind(id)
        .bind(&name)
        .execute(tx.conn())
        .await;
    if let Err(e) = &result
        && unique_violation(e, "23505")
    {
        return Err(AppError::Conflict(format!("a department named {name:?} exists")));
    }
    result?;
    audit_by(&mut tx, &p, "department.create", &format!("department:{id}"), "", json!({ "name": name })).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(json!({ "department_id": id, "name": name }))))
}

async fn list_tenants(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, AppError> {
    let p = reader(&state, &headers).await?;
    let mut tx = p.begin(&state.db).await?;
    let items = rows(
        &mut tx,
        "SELECT t.tenant_id, t.name, d.department_id, d.name AS department,
                (SELECT count(*) FROM namespace_ownership o
                  WHERE o.org_id = $1 AND o.tenant_id = t.tenant_id AND o.valid_to IS NULL) AS namespaces
           FROM tenants t JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
          WHERE t.org_id = $1
          ORDER BY d.name, t.name",
    )
    .await?;
    tx.commit().await?;
    Ok(Json(json!({ "items": items })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantBody {
    name: String,
    /// Department name or ID.
    department: String,
}

async fn create_tenant(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), AppError> {
    let p = require(&state.db, &headers, Capability::Administer).await?;
    let body: TenantBody = json_body(&body)?;
    let name = name_field("name", &body.name)?;
    let mut tx = p.begin(&state.db).await?;
    let department = crate::policy::lookup_id(&mut tx, "departments", "department", body.department.trim()).await?;
    let id = Uuid::new_v4();
    let result = sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, $4)")
        .bind(p.org.as_uuid())
        .bind(id)
        .bind(department)
        .bind(&name)
        .execute(tx.conn())
        .await;
    if let Err(e) = &result
        && unique_violation(e, "23505")
    {
        return Err(AppError::Conflict(format!("a tenant named {name:?} exists")));
    }
    result?;
    let namespaces = crate::ingest::reapply_namespaces_naming(&mut tx, p.org, &name).await?;
    let org = tx.org().as_uuid();
    let mut usage = sqlx::query(
        "UPDATE service_usage SET tenant_id = $1 WHERE tenant_name = $2 AND tenant_id IS NULL AND org_id = $3",
    )
    .bind(id)
    .bind(&name)
    .bind(org)
    .execute(tx.conn())
    .await?
    .rows_affected();
    // Usage records also carry the tenant's department (what department managers see them under).
    usage += sqlx::query(
        "UPDATE usage_records SET tenant_id = $1, department_id = $4
          WHERE tenant_name = $2 AND tenant_id IS NULL AND org_id = $3",
    )
    .bind(id)
    .bind(&name)
    .bind(org)
    .bind(department)
    .execute(tx.conn())
    .await?
    .rows_affected();
    audit_by(
        &mut tx,
        &p,
        "tenant.create",
        &format!("tenant:{id}"),
        "",
        json!({ "name": name, "department_id": department, "namespaces": namespaces, "usage_rows": usage }),
    )
    .await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "tenant_id": id, "name": name, "department_id": department,
            "namespaces_mapped": namespaces, "usage_rows_attributed": usage,
        })),
    ))
}

// ---------------------------------------------------------------- inventory

async fn get_inventory(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, AppError> {
    let p = reader(&state, &headers).await?;
    let mut tx = p.begin(&state.db).await?;
    let classes =
        rows(&mut tx, "SELECT gpu_class, description FROM gpu_classes WHERE org_id = $1 ORDER BY gpu_class").await?;
    let models = rows(
        &mut tx,
        "SELECT model, gpu_class, memory_mib, valid_from, valid_to FROM gpu_models WHERE org_id = $1
          ORDER BY model, valid_from",
    )
    .await?;
    let profiles = rows(
        &mut tx,
        "SELECT 'mig' AS kind, model, profile, fraction_num || '/' || fraction_den AS fraction, valid_from, valid_to
           FROM mig_profiles WHERE org_id = $1
         UNION ALL
         SELECT 'vgpu', model, profile, fraction_num || '/' || fraction_den, valid_from, valid_to FROM vgpu_profiles
          WHERE org_id = $1
         ORDER BY 1, 2, 3, 5",
    )
    .await?;
    let timeslicing = rows(
        &mut tx,
        "SELECT c.name AS cluster, t.name, t.replicas, t.valid_from, t.valid_to
           FROM timeslice_policies t JOIN clusters c ON c.org_id = t.org_id AND c.cluster_id = t.cluster_id
          WHERE t.org_id = $1
          ORDER BY 1, 2, 4",
    )
    .await?;
    tx.commit().await?;
    Ok(Json(json!({ "classes": classes, "models": models, "profiles": profiles, "timeslicing": timeslicing })))
}

/// Ends the entry in force (`valid_to IS NULL`) of one key where the new one starts. Refused (409) when an entry
/// of that key starts at or after `from`, or a closed one covers it: history is appended, never rewritten.
async fn close_open_entry(
    tx: &mut OrgTx,
    table: &str,
    keys: &[(&str, String)],
    from: OffsetDateTime,
) -> Result<(), AppError> {
    let cond = keys
        .iter()
        .enumerate()
        .map(|(i, (column, _))| format!("{column}::text = ${}", i + 2))
        .collect::<Vec<_>>()
        .join(" AND ");
    // The organization is the parameter after the keys.
    let org = tx.org().as_uuid();
    let org_param = keys.len() + 2;
    let conflict = format!(
        "SELECT EXISTS (SELECT 1 FROM {table} WHERE {cond} AND org_id = ${org_param}
            AND (valid_from >= $1 OR (valid_to IS NOT NULL AND valid_to > $1)))"
    );
    let mut q = sqlx::query_scalar::<_, bool>(&conflict).bind(from);
    for (_, v) in keys {
        q = q.bind(v);
    }
    q = q.bind(org);
    if q.fetch_one(tx.conn()).await? {
        return Err(AppError::Conflict(
            "an entry for this key starts at or after valid_from (or a closed one covers it): history is \
             appended, not rewritten; choose a later valid_from"
                .into(),
        ));
    }
    let update =
        format!("UPDATE {table} SET valid_to = $1 WHERE {cond} AND org_id = ${org_param} AND valid_to IS NULL");
    let mut q = sqlx::query(&update).bind(from);
    for (_, v) in keys {
        q = q.bind(v);
    }
    q = q.bind(org);
    q.execute(tx.conn()).await?;
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelBody {
    /// The GPU model as the node labels and NVML name it (`NVIDIA H100 80GB HBM3`).
    model: String,
    /// Its price class; created if new (a policy must still price it).
    gpu_class: String,
    #[serde(default)]
    memory_mib: Option<i32>,
    #[serde(with = "time::serde::rfc3339")]
    valid_from: OffsetDateTime,
}

async fn add_model(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), AppError> {
    let p = manager(&state, &headers).await?;
    let body: ModelBody = json_body(&body)?;
    let model = name_field("model", &body.model)?;
    let class = name_field("gpu_class", &body.gpu_class)?;
    if body.memory_mib.is_some_and(|m| m <= 0) {
        return Err(AppError::invalid("memory_mib", "must be positive"));
    }
    let mut tx = p.begin(&state.db).await?;
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .bind(p.org.as_uuid())
        .bind(&class)
        .execute(tx.conn())
        .await?;
    close_open_entry(&mut tx, "gpu_models", &[("model", model.clone())], body.valid_from).await?;
    sqlx::query(
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class, memory_mib) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(p.org.as_uuid())
    .bind(&model)
    .bind(body.valid_from)
    .bind(&class)
    .bind(body.memory_mib)
    .execute(tx.conn())
    .await?;
    let recomputed = crate::ingest::recompute_for_inventory(&mut tx, p.org, &model, body.valid_from).await?;
    audit_by(
        &mut tx,
        &p,
        "inventory.model",
        &format!("gpu_model:{model}"),
        "",
        json!({ "gpu_class": class, "valid_from": body.valid_from.unix_timestamp(), "recomputed": recomputed }),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(json!({ "model": model, "gpu_class": class, "recomputed_allocations": recomputed }))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileBody {
    /// `mig` or `vgpu`.
    kind: String,
    model: String,
    /// MIG (`3g.40gb`) or vGPU (`GRID_A100-40C`) profile.
    profile: String,
    /// The share of the whole GPU, exact: `3/7`, `1/2`, `0.25`.
    fraction: String,
    #[serde(with = "time::serde::rfc3339")]
    valid_from: OffsetDateTime,
}

async fn add_profile(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), AppError> {
    let p = manager(&state, &headers).await?;
    let body: ProfileBody = json_body(&body)?;
    let table = match body.kind.as_str() {
        "mig" => "mig_profiles",
        "vgpu" => "vgpu_profiles",
        other => return Err(AppError::invalid("kind", format!("{other:?} is not mig or vgpu"))),
    };
    let model = name_field("model", &body.model)?;
    let profile = name_field("profile", &body.profile)?;
    if body.kind == "mig" && profile.parse::<gpuledger_core::ids::MigProfile>().is_err() {
        return Err(AppError::invalid("profile", format!("{profile:?} is not a MIG profile such as 3g.40gb")));
    }
    let fraction: Fraction = body
        .fraction
        .trim()
        .parse()
        .map_err(|_| AppError::invalid("fraction", format!("{:?} is not a fraction such as 3/7", body.fraction)))?;
    if fraction.is_zero() || fraction > Fraction::ONE {
        return Err(AppError::invalid("fraction", "must be more than 0 and at most 1 (of one GPU)"));
    }
    let (num, den) = (i64::try_from(fraction.numer()), i64::try_from(fraction.denom()));
    let (Ok(num), Ok(den)) = (num, den) else {
        return Err(AppError::invalid("fraction", "numerator and denominator are too large"));
    };
    let mut tx = p.begin(&state.db).await?;
    close_open_entry(&mut tx, table, &[("model", model.clone()), ("profile", profile.clone())], body.valid_from)
        .await?;
    sqlx::query(&format!(
        "INSERT INTO {table} (org_id, model, profile, valid_from, fraction_num, fraction_den)
         VALUES ($1, $2, $3, $4, $5, $6)"
    ))
    .bind(p.org.as_uuid())
    .bind(&model)
    .bind(&profile)
    .bind(body.valid_from)
    .bind(num)
    .bind(den)
    .execute(tx.conn())
    .await?;
    let recomputed = crate::ingest::recompute_for_inventory(&mut tx, p.org, &model, body.valid_from).await?;
    audit_by(
        &mut tx,
        &p,
        "inventory.profile",
        &format!("{}:{model}/{profile}", body.kind),
        "",
        json!({ "fraction": format!("{num}/{den}"), "valid_from": body.valid_from.unix_timestamp(), "recomputed": recomputed }),
    )
    .await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "kind": body.kind, "model": model, "profile": profile, "fraction": format!("{num}/{den}"),
                     "recomputed_allocations": recomputed })),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TimeslicingBody {
    cluster: String,
    /// The sharing configuration's name (the device plugin's config).
    name: String,
    replicas: i32,
    #[serde(with = "time::serde::rfc3339")]
    valid_from: OffsetDateTime,
}

/// Declared time-slicing policies (what a cluster's device plugin was configured with, for reviewers; each
/// allocation carries the replica count its agent read, which is what prices it).
async fn add_timeslicing(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), AppError> {
    let p = manager(&state, &headers).await?;
    let body: TimeslicingBody = json_body(&body)?;
    let name = name_field("name", &body.name)?;
    if !(1..=1024).contains(&body.replicas) {
        return Err(AppError::invalid("replicas", "must be 1 to 1024"));
    }
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let cluster: Option<Uuid> = sqlx::query_scalar("SELECT cluster_id FROM clusters WHERE name = $1 AND org_id = $2")
        .bind(body.cluster.trim())
        .bind(org)
        .fetch_optional(tx.conn())
        .await?;
    let Some(cluster) = cluster else {
        return Err(AppError::invalid("cluster", format!("no cluster named {:?}", body.cluster.trim())));
    };
    close_open_entry(
        &mut tx,
        "timeslice_policies",
        &[("cluster_id", cluster.to_string()), ("name", name.clone())],
        body.valid_from,
    )
    .await?;
    sqlx::query(
        "INSERT INTO timeslice_policies (org_id, cluster_id, name, valid_from, replicas) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(p.org.as_uuid())
    .bind(cluster)
    .bind(&name)
    .bind(body.valid_from)
    .bind(body.replicas)
    .execute(tx.conn())
    .await?;
    audit_by(
        &mut tx,
        &p,
        "inventory.timeslicing",
        &format!("timeslicing:{}/{name}", body.cluster.trim()),
        "",
        json!({ "replicas": body.replicas, "valid_from": body.valid_from.unix_timestamp() }),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(json!({ "cluster": body.cluster.trim(), "name": name, "replicas": body.replicas }))))
}
