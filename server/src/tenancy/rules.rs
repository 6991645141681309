//! Rules for namespaces without labels: `POST/GET /api/v1/tenancy/namespace-rules` (write: admins). An exact name
//! or a prefix gives a tenant to namespaces that neither labels nor an admin reassignment give an owner, dated like
//! every tenancy fact; what a rule gives is recorded in the ownership history with source `rule`
//! (`crate::store::fill_from_rules`), so the ledger reads one history and closed months get corrections.
//!
//! At any instant the most specific rule in force decides (an exact name before a prefix, a longer prefix before a
//! shorter, a cluster's rule before an organization-wide one); labels and reassignments always beat rules. Adding
//! a rule from `valid_from` re-decides the matching namespaces from that instant.

use axum::{Json, extract::State, http::StatusCode};
use gpuledger_api::{
    Items,
    tenancy::{NamespaceRule, NamespaceRuleBody},
};
use gpuledger_core::time_fmt::rfc3339;
use serde_json::json;
use uuid::Uuid;

use super::{close_open_entry, store::rules};
use crate::{
    auth::{Capability, Principal},
    error::AppError,
    http::{Administer, Caller, JsonBody, ReadLedger},
    state::AppState,
};

pub(super) async fn post_rule(
    State(state): State<AppState>,
    p: Caller<Administer>,
    JsonBody(body): JsonBody<NamespaceRuleBody>,
) -> Result<(StatusCode, Json<NamespaceRule>), AppError> {
    Ok((StatusCode::CREATED, Json(add_rule(&state, &p, body).await?)))
}

pub(crate) async fn add_rule(
    state: &AppState,
    p: &Principal,
    body: NamespaceRuleBody,
) -> Result<NamespaceRule, AppError> {
    p.require(Capability::Administer)?;
    let match_kind = body.match_kind.as_str().to_string();
    let pattern = body.pattern.to_string();
    let from = body.valid_from.at();
    let reason = body.reason.as_str();
    let mut tx = p.begin(&state.db).await?;
    let cluster = match body.cluster.as_deref() {
        None => None,
        Some(c) => Some(super::store::cluster_by_key(&mut tx, c).await?),
    };
    let tenant_id = crate::store::lookup_id(&mut tx, "tenants", "tenant", &body.tenant).await?;
    crate::store::refuse_retired(&mut tx, "tenants", "tenant", tenant_id, from).await?;
    let tenant = super::store::names::tenant_name(&mut tx, tenant_id).await?;
    let cluster_key = cluster.as_ref().map_or_else(|| "*".to_string(), |(id, _)| id.to_string());
    close_open_entry(
        &mut tx,
        "namespace_rules",
        &[
            ("coalesce(cluster_id::text, '*')", cluster_key),
            ("match", match_kind.clone()),
            ("pattern", pattern.clone()),
        ],
        from,
    )
    .await?;
    let rule_id = Uuid::new_v4();
    let new = rules::NewRule {
        rule_id,
        cluster: cluster.as_ref().map(|c| c.0),
        match_kind: &match_kind,
        pattern: &pattern,
        tenant: tenant_id,
        valid_from: from,
        created_by: &p.actor(),
    };
    rules::insert_rule(&mut tx, &new).await?;
    let namespaces = rules::namespaces_matching(&mut tx, cluster.as_ref().map(|c| c.0), &match_kind, &pattern).await?;
    // From its start the new rule competes with the rules in force: what a rule gave from before `from` is
    // closed there and the gap is filled again, most specific rule first.
    rules::end_rule_ownership(&mut tx, &namespaces, from).await?;
    let mut given = 0;
    for ns in namespaces {
        if crate::store::fill_from_rules(&mut tx, ns).await? > 0 {
            given += 1;
        }
    }
    let rule = NamespaceRule {
        rule_id: rule_id.to_string(),
        cluster: cluster.map(|c| c.1),
        match_kind,
        pattern,
        tenant,
        valid_from: rfc3339(from),
        valid_to: None,
        namespaces_given: given,
    };
    tx.audit_by(
        p,
        "tenancy.namespace_rule",
        &format!("rule:{rule_id}"),
        reason,
        json!({ "cluster": rule.cluster, "match": rule.match_kind, "pattern": rule.pattern, "tenant": rule.tenant,
                "valid_from": rule.valid_from, "namespaces_given": given }),
    )
    .await?;
    tx.commit().await?;
    Ok(rule)
}

pub(super) async fn list_rules(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
) -> Result<Json<Items<NamespaceRule>>, AppError> {
    read_rules(&state, &p).await.map(Json)
}

/// The namespace rules (`GET /api/v1/tenancy/namespace-rules`).
pub(crate) async fn read_rules(state: &AppState, p: &crate::auth::Principal) -> Result<Items<NamespaceRule>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let rows = rules::rules(&mut tx).await?;
    tx.commit_quiet().await?;
    let items = rows
        .into_iter()
        .map(|(id, cluster, match_kind, pattern, tenant, from, to)| NamespaceRule {
            rule_id: id.to_string(),
            cluster,
            match_kind,
            pattern,
            tenant,
            valid_from: rfc3339(from),
            valid_to: to.map(rfc3339),
            namespaces_given: 0,
        })
        .collect();
    Ok(Items { items })
}
