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
use time::OffsetDateTime;
use uuid::Uuid;

use super::close_open_entry;
use crate::{
    auth::{Capability, Principal},
    error::AppError,
    http::{Administer, Caller, JsonBody, ReadLedger},
    state::AppState,
};

/// A rule as stored: (ID, cluster name, match, pattern, tenant name, start, end).
type RuleRow = (Uuid, Option<String>, String, String, String, OffsetDateTime, Option<OffsetDateTime>);

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
    let org = tx.org().as_uuid();
    let cluster = match body.cluster.as_deref() {
        None => None,
        Some(c) => Some(super::store::cluster_by_key(&mut tx, c).await?),
    };
    let tenant_id = crate::store::lookup_id(&mut tx, "tenants", "tenant", &body.tenant).await?;
    crate::store::refuse_retired(&mut tx, "tenants", "tenant", tenant_id, from).await?;
    let tenant: String = sqlx::query_scalar("SELECT name FROM tenants WHERE tenant_id = $1 AND org_id = $2")
        .bind(tenant_id)
        .bind(org)
        .fetch_one(tx.conn())
        .await?;
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
    sqlx::query(
        "INSERT INTO namespace_rules (org_id, rule_id, cluster_id, match, pattern, tenant_id, valid_from, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(org)
    .bind(rule_id)
    .bind(cluster.as_ref().map(|c| c.0))
    .bind(&match_kind)
    .bind(&pattern)
    .bind(tenant_id)
    .bind(from)
    .bind(p.actor())
    .execute(tx.conn())
    .await?;
    let namespaces: Vec<Uuid> = sqlx::query_scalar(
        "SELECT namespace_uid FROM namespaces
          WHERE org_id = $1 AND ($2::uuid IS NULL OR cluster_id = $2)
            AND (($3 = 'exact' AND name = $4) OR ($3 = 'prefix' AND starts_with(name, $4)))",
    )
    .bind(org)
    .bind(cluster.as_ref().map(|c| c.0))
    .bind(&match_kind)
    .bind(&pattern)
    .fetch_all(tx.conn())
    .await?;
    // From its start the new rule competes with the rules in force: what a rule gave from before `from` is
    // closed there and the gap is filled again, most specific rule first.
    sqlx::query(
        "UPDATE namespace_ownership SET valid_to = $2
          WHERE namespace_uid = ANY($1) AND source = 'rule' AND valid_from < $2 AND (valid_to IS NULL OR valid_to > $2)
            AND org_id = $3",
    )
    .bind(&namespaces)
    .bind(from)
    .bind(org)
    .execute(tx.conn())
    .await?;
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
    let rows: Vec<RuleRow> = sqlx::query_as(
        "SELECT r.rule_id, c.name, r.match, r.pattern, t.name, r.valid_from, r.valid_to
           FROM namespace_rules r
           JOIN tenants t ON t.org_id = r.org_id AND t.tenant_id = r.tenant_id
           LEFT JOIN clusters c ON c.org_id = r.org_id AND c.cluster_id = r.cluster_id
          WHERE r.org_id = $1 ORDER BY r.pattern, r.match, c.name NULLS FIRST, r.valid_from",
    )
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?;
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
