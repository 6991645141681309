//! Dated tenancy changes by an admin: `POST /api/v1/tenancy/reassignments` moves a namespace to another tenant
//! from an instant; `GET /api/v1/tenancy/ownership` shows a namespace's history.
//!
//! Ownership is history: the entry in force at `valid_from` is closed there and an `admin` entry opened, running
//! to the next entry's start (a later label change still wins from its own instant). Open months change at once
//! (the read model recomputes them); closed months never change — the allocations the change touches are marked
//! updated, so the next close recomputes those months and books the difference as correction lines, as it does
//! for late data.

use axum::{Json, extract::State, http::StatusCode};
use gpuledger_api::{
    params::OwnershipParams,
    tenancy::{NamespaceOwnership, OwnershipEntry, Reassignment, ReassignmentBody},
};
use gpuledger_core::{Period, time_fmt::rfc3339};
use serde_json::json;

use super::store;
use crate::{
    auth::{Capability, Principal},
    error::AppError,
    http::{Administer, Caller, JsonBody, Params, ReadLedger},
    state::AppState,
};

/// How far ahead a change may be dated (a planned reorganization), in days.
const MAX_DAYS_AHEAD: i64 = 366;

pub(super) async fn post_reassignment(
    State(state): State<AppState>,
    p: Caller<Administer>,
    JsonBody(body): JsonBody<ReassignmentBody>,
) -> Result<(StatusCode, Json<Reassignment>), AppError> {
    Ok((StatusCode::CREATED, Json(reassign(&state, &p, body).await?)))
}

pub(crate) async fn reassign(
    state: &AppState,
    p: &Principal,
    body: ReassignmentBody,
) -> Result<Reassignment, AppError> {
    p.require(Capability::Administer)?;
    let from = body.valid_from.at();
    if from > time::OffsetDateTime::now_utc() + time::Duration::days(MAX_DAYS_AHEAD) {
        return Err(AppError::refused("valid_from", format!("more than {MAX_DAYS_AHEAD} days ahead")));
    }
    let reason = body.reason.as_str();
    let mut tx = p.begin(&state.db).await?;
    let ns = store::namespace_at(&mut tx, &body.cluster, &body.namespace, from).await?;
    if from < ns.created_at {
        return Err(AppError::refused(
            "valid_from",
            format!("is before namespace {:?} was created ({})", ns.name, rfc3339(ns.created_at)),
        ));
    }
    if let Some(deleted) = ns.deleted_at.filter(|d| *d <= from) {
        return Err(AppError::refused(
            "valid_from",
            format!("is after namespace {:?} was deleted ({})", ns.name, rfc3339(deleted)),
        ));
    }
    let tenant_id = crate::store::lookup_id(&mut tx, "tenants", "tenant", &body.tenant).await?;
    crate::store::refuse_retired(&mut tx, "tenants", "tenant", tenant_id, from).await?;
    let tenant = store::names::tenant_name(&mut tx, tenant_id).await?;
    let (previous, until, closed) = store::reassign_namespace(&mut tx, ns.uid, tenant_id, from).await?;
    let closed =
        closed.into_iter().map(|d| Period::from_date(d).map(|p| p.to_string())).collect::<Result<Vec<_>, _>>()?;
    let answer = Reassignment {
        cluster: ns.cluster.clone(),
        namespace: ns.name.clone(),
        namespace_uid: ns.uid.to_string(),
        tenant,
        previous_tenant: previous,
        valid_from: rfc3339(from),
        valid_to: until.map(rfc3339),
        corrected_at_next_close: closed,
    };
    tx.audit_by(
        p,
        "tenancy.reassign",
        &format!("{}/{}", ns.cluster, ns.name),
        reason,
        json!({ "namespace_uid": answer.namespace_uid, "tenant": answer.tenant,
                "previous_tenant": answer.previous_tenant, "valid_from": answer.valid_from,
                "valid_to": answer.valid_to, "corrected_at_next_close": answer.corrected_at_next_close }),
    )
    .await?;
    tx.commit().await?;
    Ok(answer)
}

pub(super) async fn ownership(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<OwnershipParams>,
) -> Result<Json<NamespaceOwnership>, AppError> {
    let (cluster, namespace) = (q.cluster.as_str(), q.namespace.as_str());
    let mut tx = p.begin(&state.db).await?;
    let ns = store::namespace_at(&mut tx, cluster, namespace, time::OffsetDateTime::now_utc()).await?;
    let entries = store::ownership_history(&mut tx, ns.uid).await?;
    tx.commit_quiet().await?;
    Ok(Json(NamespaceOwnership {
        cluster: ns.cluster,
        namespace: ns.name,
        namespace_uid: ns.uid.to_string(),
        entries: entries
            .into_iter()
            .map(|(tenant, department, from, to, source)| OwnershipEntry {
                tenant,
                department,
                valid_from: rfc3339(from),
                valid_to: to.map(rfc3339),
                source,
            })
            .collect(),
    }))
}
