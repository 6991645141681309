//! Renaming and retiring departments and tenants: `PATCH /api/v1/departments/{department}` and
//! `PATCH /api/v1/tenants/{tenant}` (admins), `{name?, retired_from?, reason}`; a department's also sets its journal
//! accounts, `{cost_center?, gl_account?}` (`null` clears one; the month's journal debits the department to them).
//!
//! A rename applies from now on: closed months keep the names frozen in their evidence bundles, open months are
//! recomputed with the new one, and `renames` keeps every former name (append-only). A retired department or
//! tenant keeps its history; from `retired_from` on nothing new is given to it (ownership, quotas, new tenants).
//! Retiring is refused while something still depends on it after that instant: a tenant that owns a namespace, a
//! department with an active tenant.

use axum::{Json, extract::State};
use gpuledger_api::{
    params::{DepartmentPath, TenantPath},
    tenancy::{DepartmentUpdate, RenameOrRetire, Updated},
};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::store::names;
use crate::{
    auth::{Capability, Principal},
    db::OrgTx,
    error::AppError,
    http::{Administer, Caller, JsonBody, PathParams},
    state::AppState,
};

/// What is being renamed or retired.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Department,
    Tenant,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Department => "department",
            Kind::Tenant => "tenant",
        }
    }
    fn table(self) -> &'static str {
        match self {
            Kind::Department => "departments",
            Kind::Tenant => "tenants",
        }
    }
}

pub(super) async fn patch_department(
    State(state): State<AppState>,
    p: Caller<Administer>,
    PathParams(path): PathParams<DepartmentPath>,
    JsonBody(body): JsonBody<DepartmentUpdate>,
) -> Result<Json<Updated>, AppError> {
    update_department(&state, &p, &path.department, body).await.map(Json)
}

/// Renames or retires a department, or sets its journal accounts (admins).
pub(crate) async fn update_department(
    state: &AppState,
    p: &Principal,
    department: &str,
    body: DepartmentUpdate,
) -> Result<Updated, AppError> {
    p.require(Capability::Administer)?;
    let change = Change {
        name: body.name.map(String::from),
        retired_from: body.retired_from.map(|t| t.at()),
        reason: body.reason.into_inner(),
        cost_center: body.cost_center.map(|v| v.map(String::from)),
        gl_account: body.gl_account.map(|v| v.map(String::from)),
    };
    apply(state, p, Kind::Department, department, change).await
}

pub(super) async fn patch_tenant(
    State(state): State<AppState>,
    p: Caller<Administer>,
    PathParams(path): PathParams<TenantPath>,
    JsonBody(body): JsonBody<RenameOrRetire>,
) -> Result<Json<Updated>, AppError> {
    update_tenant(&state, &p, &path.tenant, body).await.map(Json)
}

/// Renames or retires a tenant (admins).
pub(crate) async fn update_tenant(
    state: &AppState,
    p: &Principal,
    tenant: &str,
    body: RenameOrRetire,
) -> Result<Updated, AppError> {
    p.require(Capability::Administer)?;
    let change = Change {
        name: body.name.map(String::from),
        retired_from: body.retired_from.map(|t| t.at()),
        reason: body.reason.into_inner(),
        cost_center: None,
        gl_account: None,
    };
    apply(state, p, Kind::Tenant, tenant, change).await
}

/// One change, as both bodies read: the accounts are a department's only (`None`: unchanged, `Some(None)`: clear).
struct Change {
    name: Option<String>,
    retired_from: Option<OffsetDateTime>,
    reason: String,
    cost_center: Option<Option<String>>,
    gl_account: Option<Option<String>>,
}

async fn apply(state: &AppState, p: &Principal, kind: Kind, key: &str, c: Change) -> Result<Updated, AppError> {
    let reason = c.reason.as_str();
    let (name, retired_from) = (c.name, c.retired_from);
    let accounts = c.cost_center.is_some() || c.gl_account.is_some();
    if name.is_none() && retired_from.is_none() && !accounts {
        return Err(AppError::invalid(
            "body",
            match kind {
                Kind::Department => "give a new name, retired_from, cost_center or gl_account",
                Kind::Tenant => "give a new name, retired_from, or both",
            },
        ));
    }
    let mut tx = p.begin(&state.db).await?;
    let id = crate::store::lookup_id(&mut tx, kind.table(), kind.word(), key)
        .await
        .map_err(|_| AppError::NotFound(format!("no {} {key:?} in this organization", kind.word())))?;
    let (current, retired) = names::lock_named(&mut tx, kind.table(), kind.word(), id).await?;
    let mut details = json!({ "id": id.to_string(), "name": current });
    if let Some(new) = name.filter(|n| *n != current) {
        names::set_name(&mut tx, kind.table(), kind.word(), id, &new)
            .await
            .map_err(|e| AppError::from(e).on_conflict(|| format!("a {} named {new:?} exists", kind.word())))?;
        names::insert_rename(&mut tx, kind.word(), id, &current, &new, &p.actor()).await?;
        details["renamed_to"] = json!(new);
    }
    if let Some(from) = retired_from {
        if let Some(already) = retired {
            return Err(AppError::Conflict(format!(
                "the {} is retired since {}",
                kind.word(),
                gpuledger_core::time_fmt::rfc3339(already)
            )));
        }
        still_needed(&mut tx, kind, id, from).await?;
        names::set_retired(&mut tx, kind.table(), kind.word(), id, from).await?;
        details["retired_from"] = json!(gpuledger_core::time_fmt::rfc3339(from));
    }
    let mut after_accounts = (None, None);
    if accounts {
        let before = crate::tenancy::store::department_accounts(&mut tx, id).await?;
        let after = crate::tenancy::store::set_department_accounts(
            &mut tx,
            id,
            c.cost_center.as_ref().map(Option::as_deref),
            c.gl_account.as_ref().map(Option::as_deref),
        )
        .await?;
        details["accounts"] = json!({
            "before": {"cost_center": before.0, "gl_account": before.1},
            "after": {"cost_center": after.0, "gl_account": after.1},
        });
        after_accounts = after;
    }
    let action = format!("{}.update", kind.word());
    tx.audit_by(p, &action, &format!("{}:{id}", kind.word()), reason, details.clone()).await?;
    if details.get("renamed_to").is_none() && details.get("retired_from").is_none() {
        // Only the journal accounts changed: no figure of any month does, so the open months are not recomputed.
        tx.commit_quiet().await?;
    } else {
        tx.commit().await?;
    }
    Ok(Updated {
        id: id.to_string(),
        name: current,
        renamed_to: details["renamed_to"].as_str().map(str::to_string),
        retired_from: details["retired_from"].as_str().map(str::to_string),
        cost_center: after_accounts.0,
        gl_account: after_accounts.1,
    })
}

/// Refuses retiring while something still depends on it after `from`.
async fn still_needed(tx: &mut OrgTx, kind: Kind, id: Uuid, from: OffsetDateTime) -> Result<(), AppError> {
    let blocking = match kind {
        Kind::Tenant => names::namespaces_owned_after(tx, id, from).await?,
        Kind::Department => names::tenants_active_after(tx, id, from).await?,
    };
    if blocking.is_empty() {
        return Ok(());
    }
    let what = match kind {
        Kind::Tenant => "it still owns namespaces after retired_from (reassign them first)",
        Kind::Department => "it still has active tenants after retired_from (retire or move them first)",
    };
    Err(AppError::Conflict(format!("{what}: {}", blocking.join(", "))))
}
