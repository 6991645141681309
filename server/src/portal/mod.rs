//! The portal's data source over PostgreSQL, and the portal's own form handlers (token creation and
//! revocation from the admin page).
//!
//! A data source is made per request with the request's headers: every read goes through the signed-in
//! person's organization- and department-scoped transaction. Pages' reads of the features are answered by the
//! features' own services (`reads`), as the forms' writes are (`act`).

use std::sync::Arc;

use axum::{
    Form, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Redirect, Response},
    routing::post,
};
use gpuledger_api::params::{IdPath, PeriodPath, VersionPath};
use gpuledger_core::ids::OrgId;
use gpuledger_web::{
    LoginOptions, OrgSummary, Overview, PeriodRow, PortalData, PortalError, SessionView, TokenRow,
    data::{BoxFuture, ClusterRow, InventoryRow, OwnershipRow},
    reads::{Answer, Read, Refusal},
};
use serde::Deserialize;
use time::OffsetDateTime;
use tokio::sync::OnceCell;

use crate::{
    auth::{self, Actor, Capability, Principal},
    db::{Database, DbError},
    error::AppError,
    http::{Administer, Caller, ManagePolicy, PathParams},
    state::AppState,
};
use act::act;

mod act;
mod admin_forms;
mod dispute_forms;
mod reads;
use admin_forms::{
    cost_import_form, department_form, department_update_form, inventory_form, quota_form, reassign_form, rule_form,
    settings_form, tenant_form, tenant_update_form,
};

/// [`PortalData`] backed by the database, through organization-scoped transactions.
#[derive(Clone)]
pub struct DbPortalData {
    db: Database,
    featured_org: Option<OrgId>,
    headers: HeaderMap,
    principal: Arc<OnceCell<Option<Principal>>>,
    /// The server's state, for the features' services that answer pages' reads.
    state: Option<AppState>,
    demo_mode: bool,
    markers: Option<crate::pagecache::RenderMarkers>,
    /// The request's instant: every page of one render reads the same time.
    now: OffsetDateTime,
}

fn utc(t: OffsetDateTime) -> String {
    gpuledger_core::time_fmt::rfc3339(t)
}

fn portal_error(e: impl std::fmt::Display) -> PortalError {
    tracing::error!(error = %e, "portal query failed");
    PortalError { message: "the data could not be read; the error has been logged".into() }
}

impl DbPortalData {
    /// A data source showing `featured_org` on the landing page, for a request with `headers`.
    pub fn new(db: Database, featured_org: Option<OrgId>) -> Self {
        Self::for_request(db, featured_org, HeaderMap::new())
    }

    /// A data source for one request (its cookie says who is signed in).
    pub fn for_request(db: Database, featured_org: Option<OrgId>, headers: HeaderMap) -> Self {
        Self {
            db,
            featured_org,
            headers,
            principal: Arc::new(OnceCell::new()),
            state: None,
            demo_mode: false,
            markers: None,
            now: OffsetDateTime::now_utc(),
        }
    }

    /// Renders as at `now` (tests; the server takes the request's arrival).
    pub fn at(mut self, now: OffsetDateTime) -> Self {
        self.now = now;
        self
    }

    /// The process runs `demo`: the login page may offer the demo accounts (see
    /// [`crate::access::routes::demo_login_enabled`]).
    pub fn with_demo_mode(mut self, demo_mode: bool) -> Self {
        self.demo_mode = demo_mode;
        self
    }

    /// Renders for keeping ([`crate::pagecache`]): the reader's name and CSRF token show as these markers.
    pub fn with_markers(mut self, markers: Option<crate::pagecache::RenderMarkers>) -> Self {
        self.markers = markers;
        self
    }

    /// Lets pages read through the features' services (the functions the REST handlers call), as the request's
    /// caller: same authorization, same scoping.
    pub fn with_state(mut self, state: AppState) -> Self {
        self.state = Some(state);
        self
    }

    /// The signed-in person (sessions only: the portal is for people), looked up once per request.
    async fn principal(&self) -> Option<Principal> {
        self.principal
            .get_or_init(|| async {
                auth::session::cookie_value(&self.headers)?;
                let p = auth::authenticate(&self.db, &self.headers).await.ok()?;
                matches!(p.actor, Actor::User { .. }).then_some(p)
            })
            .await
            .clone()
    }

    async fn session_view(&self) -> Result<Option<SessionView>, DbError> {
        let Some(p) = self.principal().await else { return Ok(None) };
        let Actor::User { name, roles, csrf, .. } = &p.actor else { return Ok(None) };
        let mut tx = p.begin(&self.db).await?;
        let org = tx.org().as_uuid();
        let org_name: String = sqlx::query_scalar("SELECT name FROM organizations").fetch_one(tx.conn()).await?;
        let departments: Vec<String> =
            sqlx::query_scalar("SELECT name FROM departments WHERE org_id = $1 ORDER BY name")
                .bind(org)
                .fetch_all(tx.conn())
                .await?;
        tx.commit().await?;
        let (name, csrf) = match &self.markers {
            Some(m) => (m.name.clone(), m.csrf.clone()),
            None => (name.clone(), csrf.clone()),
        };
        Ok(Some(SessionView {
            name,
            roles: roles.iter().map(|r| r.as_str().to_string()).collect(),
            org_name,
            csrf,
            departments: p.departments.is_some().then_some(departments),
        }))
    }

    async fn login_options_for(&self, slug: Option<String>) -> Result<Option<LoginOptions>, AppError> {
        let org = match slug.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            Some(slug) => self.db.cross_org_directory().org_id_by_slug(slug).await?,
            None => self.featured_org,
        };
        let Some(org) = org else { return Ok(None) };
        let mut tx = self.db.begin_org(org).await?;
        let (slug, name): (String, String) =
            sqlx::query_as("SELECT slug, name FROM organizations").fetch_one(tx.conn()).await?;
        let provider = auth::oidc::settings(&mut tx, None).await?.map(|s| s.issuer);
        let demo = crate::access::routes::demo_login_enabled(self.demo_mode, &mut tx).await?;
        tx.commit().await?;
        let demo_accounts = if demo {
            crate::access::routes::DEMO_ACCOUNTS
                .iter()
                .map(|(r, label)| (r.as_str().to_string(), label.to_string()))
                .collect()
        } else {
            Vec::new()
        };
        Ok(Some(LoginOptions { org_slug: slug, org_name: name, provider, demo_accounts }))
    }

    async fn tokens_for(&self) -> Result<Vec<TokenRow>, AppError> {
        let p = self.principal().await.ok_or(AppError::Unauthorized)?;
        p.require(Capability::Administer)?;
        let mut tx = p.begin(&self.db).await?;
        let tokens = crate::access::tokens::list_tokens(&mut tx).await?;
        tx.commit().await?;
        Ok(tokens
            .into_iter()
            .map(|t| TokenRow {
                id: t.token_id.to_string(),
                name: t.name,
                scope: t.scope.0.as_str().to_string(),
                cluster: t.cluster,
                departments: t.departments,
                created_by: t.created_by,
                created_at: utc(t.created_at),
                expires_at: t.expires_at.map(utc),
                last_used_at: t.last_used_at.map(utc),
                revoked: t.revoked_at.is_some(),
            })
            .collect())
    }

    async fn periods_for(&self) -> Result<Vec<PeriodRow>, AppError> {
        let p = self.principal().await.ok_or(AppError::Unauthorized)?;
        p.require(Capability::ReadLedger)?;
        let mut tx = p.begin(&self.db).await?;
        let org = tx.org().as_uuid();
        type Row = (
            time::Date,
            sqlx::types::Text<gpuledger_api::states::PeriodState>,
            Option<String>,
            Option<String>,
            Option<OffsetDateTime>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT period, state, total_amount::text, currency::text, closed_at FROM periods
              WHERE org_id = $1 ORDER BY period DESC",
        )
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
        tx.commit().await?;
        let scoped = p.departments.is_some();
        Ok(rows
            .into_iter()
            .map(|(period, state, total, currency, closed_at)| PeriodRow {
                period: format!("{:04}-{:02}", period.year(), u8::from(period.month())),
                state: state.0,
                total: if scoped { None } else { total },
                currency,
                closed_at: closed_at.map(utc),
            })
            .collect())
    }

    /// Rows of an admin view read straight from the store (organization-wide; admins only); `$1` in `sql` is
    /// the organization. Times are selected as PostgreSQL writes them in JSON (`…+00:00`), as the pages show them.
    async fn admin_rows<R>(&self, sql: &str) -> Result<Vec<R>, AppError>
    where
        R: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
    {
        let p = self.principal().await.ok_or(AppError::Unauthorized)?;
        p.require(Capability::Administer)?;
        let mut tx = p.begin(&self.db).await?;
        let org = tx.org().as_uuid();
        let rows = sqlx::query_as(sql).bind(org).fetch_all(tx.conn()).await?;
        tx.commit().await?;
        Ok(rows)
    }

    async fn admin_clusters_for(&self) -> Result<Vec<ClusterRow>, AppError> {
        type Row = (
            String,
            String,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i32>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
        );
        let rows: Vec<Row> = self
            .admin_rows(
                "SELECT c.name, to_jsonb(c.created_at) #>> '{}', to_jsonb(c.retired_at) #>> '{}', a.mode, a.node,
                        a.version, to_jsonb(a.last_seen_at) #>> '{}', a.last_batch_facts, a.lag_seconds,
                        a.spool_pending_facts, a.spool_pending_bytes, a.spool_dropped_facts, a.spool_disk_bytes,
                        a.spool_max_bytes
                   FROM clusters c
                   LEFT JOIN agent_contacts a ON a.org_id = c.org_id AND a.cluster_id = c.cluster_id
                  WHERE c.org_id = $1
                  ORDER BY c.name, a.mode, a.node",
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| ClusterRow {
                name: r.0,
                created_at: r.1,
                retired_at: r.2,
                mode: r.3,
                node: r.4,
                version: r.5,
                last_seen_at: r.6,
                last_batch_facts: r.7.map(i64::from),
                lag_seconds: r.8,
                spool_pending_facts: r.9,
                spool_pending_bytes: r.10,
                spool_dropped_facts: r.11,
                spool_disk_bytes: r.12,
                spool_max_bytes: r.13,
            })
            .collect())
    }

    async fn admin_inventory_for(&self) -> Result<Vec<InventoryRow>, AppError> {
        type Row = (String, String, Option<String>, Option<String>, String, Option<String>);
        // Ordered by the stored start, not by its text.
        let rows: Vec<Row> = self
            .admin_rows(
                "SELECT kind, name, class, fraction, to_jsonb(valid_from) #>> '{}', to_jsonb(valid_to) #>> '{}' FROM (
                   SELECT 'model' AS kind, m.model AS name, m.gpu_class AS class, NULL::text AS fraction, m.valid_from, m.valid_to
                     FROM gpu_models m WHERE m.org_id = $1
                   UNION ALL
                   SELECT 'mig', p.model || ' ' || p.profile, NULL, p.fraction_num || '/' || p.fraction_den, p.valid_from, p.valid_to
                     FROM mig_profiles p WHERE p.org_id = $1
                   UNION ALL
                   SELECT 'vgpu', v.model || ' ' || v.profile, NULL, v.fraction_num || '/' || v.fraction_den, v.valid_from, v.valid_to
                     FROM vgpu_profiles v WHERE v.org_id = $1
                   UNION ALL
                   SELECT 'time-slicing', c.name || ' ' || t.name, NULL, '1/' || t.replicas, t.valid_from, t.valid_to
                     FROM timeslice_policies t JOIN clusters c ON c.org_id = t.org_id AND c.cluster_id = t.cluster_id
                    WHERE t.org_id = $1) r
                 ORDER BY kind, name, r.valid_from",
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|(kind, name, class, fraction, valid_from, valid_to)| InventoryRow {
                kind,
                name,
                class,
                fraction,
                valid_from,
                valid_to,
            })
            .collect())
    }

    async fn admin_tenancy_for(&self) -> Result<Vec<OwnershipRow>, AppError> {
        type Row = (String, String, String, String, String, Option<String>, String);
        let rows: Vec<Row> = self
            .admin_rows(
                "SELECT d.name, t.name, c.name, n.name, to_jsonb(o.valid_from) #>> '{}', to_jsonb(o.valid_to) #>> '{}',
                        o.source
                   FROM namespace_ownership o
                   JOIN tenants t ON t.org_id = o.org_id AND t.tenant_id = o.tenant_id
                   JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
                   JOIN namespaces n ON n.org_id = o.org_id AND n.namespace_uid = o.namespace_uid
                   JOIN clusters c ON c.org_id = n.org_id AND c.cluster_id = n.cluster_id
                  WHERE o.org_id = $1
                  ORDER BY d.name, t.name, n.name, o.valid_from",
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|(department, tenant, cluster, namespace, valid_from, valid_to, source)| OwnershipRow {
                department,
                tenant,
                cluster,
                namespace,
                valid_from,
                valid_to,
                source,
            })
            .collect())
    }

    async fn org_summary(&self, org: OrgId) -> Result<Option<OrgSummary>, DbError> {
        let mut tx = self.db.begin_org(org).await?;
        let org = tx.org().as_uuid();
        let row: Option<(String, String, i64, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT o.slug, o.name,
                    (SELECT count(*) FROM departments WHERE org_id = $1),
                    (SELECT count(*) FROM tenants WHERE org_id = $1),
                    (SELECT count(*) FROM clusters WHERE org_id = $1),
                    (SELECT count(DISTINCT model) FROM gpu_models WHERE org_id = $1),
                    (SELECT count(*) FROM allocation_intervals WHERE org_id = $1)
               FROM organizations o WHERE o.org_id = $1",
        )
        .bind(org)
        .fetch_optional(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(row.map(|(slug, name, departments, tenants, clusters, gpu_models, allocation_intervals)| OrgSummary {
            slug,
            name,
            departments,
            tenants,
            clusters,
            gpu_models,
            allocation_intervals,
        }))
    }
}

impl PortalData for DbPortalData {
    fn now(&self) -> OffsetDateTime {
        self.now
    }

    fn read(&self, read: Read) -> BoxFuture<'_, Result<Answer, Refusal>> {
        Box::pin(async move { self.answer(read).await.map_err(reads::refusal) })
    }

    fn inventory_impact(
        &self,
        period: gpuledger_api::params::MonthParams,
        change: serde_json::Value,
    ) -> BoxFuture<'_, Result<gpuledger_api::policy::Impact, Refusal>> {
        Box::pin(async move { self.preview(period, change).await.map_err(reads::refusal) })
    }

    fn session(&self) -> BoxFuture<'_, Option<SessionView>> {
        Box::pin(async move { self.session_view().await.map_err(portal_error).ok().flatten() })
    }

    fn login_options(&self, org: Option<String>) -> BoxFuture<'_, Result<Option<LoginOptions>, PortalError>> {
        Box::pin(async move { self.login_options_for(org).await.map_err(portal_error) })
    }

    fn admin_clusters(&self) -> BoxFuture<'_, Result<Vec<ClusterRow>, PortalError>> {
        Box::pin(async move { self.admin_clusters_for().await.map_err(portal_error) })
    }

    fn admin_inventory(&self) -> BoxFuture<'_, Result<Vec<InventoryRow>, PortalError>> {
        Box::pin(async move { self.admin_inventory_for().await.map_err(portal_error) })
    }

    fn admin_tenancy(&self) -> BoxFuture<'_, Result<Vec<OwnershipRow>, PortalError>> {
        Box::pin(async move { self.admin_tenancy_for().await.map_err(portal_error) })
    }

    fn tokens(&self) -> BoxFuture<'_, Result<Vec<TokenRow>, PortalError>> {
        Box::pin(async move { self.tokens_for().await.map_err(portal_error) })
    }

    fn refresh_failure(&self) -> BoxFuture<'_, Result<Option<gpuledger_api::ledger::RefreshFailure>, PortalError>> {
        Box::pin(async move {
            async {
                let p = self.principal().await.ok_or(AppError::Unauthorized)?;
                p.require(Capability::Administer)?;
                let mut tx = p.begin(&self.db).await?;
                let failure = crate::figures::failure(&mut tx).await?;
                tx.commit_quiet().await?;
                Ok::<_, AppError>(failure)
            }
            .await
            .map_err(portal_error)
        })
    }

    fn periods(&self) -> BoxFuture<'_, Result<Vec<PeriodRow>, PortalError>> {
        Box::pin(async move { self.periods_for().await.map_err(portal_error) })
    }

    fn overview(&self) -> BoxFuture<'_, Result<Overview, PortalError>> {
        Box::pin(async move {
            let readiness = self.db.readiness().await;
            // The signed-in person's organization (the featured one is only a sign-in hint now).
            let org = self.principal().await.map(|p| p.org);
            let organization = match (readiness.reachable, org) {
                (true, Some(org)) => self.org_summary(org).await.map_err(|e| {
                    tracing::error!(error = %e, "portal overview failed");
                    PortalError { message: "the organization's summary could not be read".into() }
                })?,
                _ => None,
            };
            Ok(Overview { database_ok: readiness.reachable, schema_version: readiness.applied, organization })
        })
    }
}

/// The portal's form handlers (the CSRF guard has checked the form's token before they run).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/admin/tokens", post(create_token_form))
        .route("/admin/tokens/{id}/revoke", post(revoke_token_form))
        .route("/ui/disputes", post(dispute_forms::open_dispute_form))
        .route("/ui/disputes/{id}/{action}", post(dispute_forms::dispute_action_form))
        .route("/ui/periods/{period}/close", post(close_form))
        .route("/ui/clusters", post(cluster_form))
        .route("/ui/identity/provider", post(provider_form))
        .route("/ui/identity/role-mappings", post(mappings_form))
        .route("/ui/policies/{version}/approve", post(approve_policy_form))
        .route("/ui/policies", post(new_policy_form))
        .route("/ui/policies/{version}", post(save_policy_form))
        .route("/ui/quotas", post(quota_form))
        .route("/ui/departments", post(department_form))
        .route("/ui/tenants", post(tenant_form))
        .route("/ui/inventory/{what}", post(inventory_form))
        .route("/ui/tenancy/reassign", post(reassign_form))
        .route("/ui/tenancy/rules", post(rule_form))
        .route("/ui/tenancy/tenant", post(tenant_update_form))
        .route("/ui/tenancy/department", post(department_update_form))
        .route("/ui/organization/settings", post(settings_form))
        .route("/ui/costs/import", post(cost_import_form))
}

/// A refused form: the reason, naming the field, and the way back (the browser keeps what was typed).
fn form_refused(detail: &str, back: &str) -> Response {
    act::refused_with(StatusCode::UNPROCESSABLE_ENTITY, detail, back)
}

/// A draft's fields as the policies API takes them; the document is the policy as JSON text.
fn policy_request(f: &[(String, String)]) -> Result<serde_json::Value, String> {
    let document: serde_json::Value = serde_json::from_str(&field(f, "document"))
        .map_err(|e| format!("document: not valid JSON ({e}); the policy is the JSON object shown in the box"))?;
    Ok(serde_json::json!({
        "effective_from": field(f, "effective_from"),
        "note": field(f, "note"),
        "policy": document,
    }))
}

async fn new_policy_form(
    State(state): State<AppState>,
    caller: Result<Caller<ManagePolicy>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let request = match policy_request(&pairs(&body)) {
        Ok(r) => r,
        Err(detail) => return form_refused(&detail, "/admin/policies"),
    };
    act(
        caller,
        "/admin/policies",
        request,
        |p, body| async move { crate::policy::create_policy(&state, &p, body).await },
        |v: &gpuledger_api::policy::PolicyVersion| format!("/admin/policies#draft-{}", v.version),
    )
    .await
}

async fn save_policy_form(
    State(state): State<AppState>,
    caller: Result<Caller<ManagePolicy>, AppError>,
    PathParams(path): PathParams<VersionPath>,
    body: axum::body::Bytes,
) -> Response {
    let request = match policy_request(&pairs(&body)) {
        Ok(r) => r,
        Err(detail) => return form_refused(&detail, "/admin/policies"),
    };
    let next = format!("/admin/policies#draft-{}", path.version.get());
    act(
        caller,
        "/admin/policies",
        request,
        |p, body| async move { crate::policy::update_policy(&state, &p, path, body).await },
        |_| next,
    )
    .await
}

async fn provider_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let mut request = serde_json::json!({
        "issuer": field(&f, "issuer"), "client_id": field(&f, "client_id"), "groups_claim": field(&f, "groups_claim"),
    });
    let secret = field(&f, "client_secret");
    if !secret.is_empty() {
        request["client_secret"] = serde_json::Value::String(secret);
    }
    act(
        caller,
        "/admin/identity",
        request,
        |p, body| async move { crate::access::routes::save_provider(&state, &p, &headers, body).await },
        |_| "/admin/identity".into(),
    )
    .await
}

/// `GROUP = ROLE [DEPARTMENT]` per line.
fn parse_mappings(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (group, rest) = l.split_once('=').unwrap_or((l, ""));
            let rest = rest.trim();
            let (role, department) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let department = department.trim();
            let mut m = serde_json::json!({"group": group.trim(), "role": role.trim()});
            if !department.is_empty() {
                m["department"] = serde_json::Value::String(department.to_string());
            }
            m
        })
        .collect()
}

async fn mappings_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let request = serde_json::json!({ "mappings": parse_mappings(&field(&f, "mappings")) });
    act(
        caller,
        "/admin/identity",
        request,
        |p, body| async move { crate::access::routes::save_mappings(&state, &p, body).await },
        |_| "/admin/identity".into(),
    )
    .await
}

async fn approve_policy_form(
    State(state): State<AppState>,
    caller: Result<Caller<ManagePolicy>, AppError>,
    PathParams(path): PathParams<VersionPath>,
) -> Response {
    act(
        caller,
        "/admin/policies",
        serde_json::json!({}),
        |p, body| async move { crate::policy::approve_policy(&state, &p, path, body).await },
        |_| "/admin/policies".into(),
    )
    .await
}

/// A form's fields, repeated keys kept (checkbox lists).
fn pairs(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

fn field(pairs: &[(String, String)], name: &str) -> String {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.trim().to_string()).unwrap_or_default()
}

async fn close_form(
    State(state): State<AppState>,
    caller: Result<Caller<crate::http::Close>, AppError>,
    PathParams(path): PathParams<PeriodPath>,
    body: axum::body::Bytes,
) -> Response {
    let period = path.period;
    let back = format!("/close/{period}");
    let target = back.clone();
    let f = pairs(&body);
    let acknowledge = field(&f, "acknowledge");
    let request = if acknowledge.trim().is_empty() {
        serde_json::json!({})
    } else {
        serde_json::json!({ "acknowledge": acknowledge })
    };
    act(
        caller,
        &back,
        request,
        |p, body| async move { crate::close::close_month(&state, &p, path, body).await },
        move |_| target,
    )
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn role_mapping_lines_become_the_api_body() {
        let m = parse_mappings("gl-admins = admin\n\n# comment\nleads = department_manager Platform Engineering\n");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0], serde_json::json!({"group": "gl-admins", "role": "admin"}));
        assert_eq!(m[1]["department"], "Platform Engineering");
        let f = pairs(b"line=a&line=b%2Fc&reason=x+y");
        assert_eq!(f.iter().filter(|(k, _)| k == "line").count(), 2);
        assert_eq!(field(&f, "reason"), "x y");
    }
}

#[derive(Debug, Deserialize)]
struct ClusterForm {
    name: String,
}

/// Registers a cluster (if new) and shows a one-time join token with the exact commands to install the agent.
async fn cluster_form(State(state): State<AppState>, headers: HeaderMap, Form(form): Form<ClusterForm>) -> Response {
    let result = async {
        state.auth.limits.check("tokens", &auth::source(&headers))?;
        let p = auth::require(&state.db, &headers, Capability::Administer).await?;
        let name = form.name.trim();
        if name.is_empty() || name.len() > 200 || name.contains(char::is_whitespace) {
            return Err(AppError::invalid("name", "a cluster name of 1 to 200 characters, without spaces"));
        }
        crate::access::tokens::create_for(&state, &p, &format!("join {name}"), &format!("join:{name}"), &[], None).await
    }
    .await;
    match result {
        Ok(created) => {
            let token = created.token;
            let server = state.auth.sessions.base_url(&headers);
            let name = form.name.trim().to_string();
            Html(gpuledger_web::account::join_token_document(&name, &token, &server)).into_response()
        }
        Err(AppError::Unauthorized) => Redirect::to("/login?next=/admin").into_response(),
        Err(e @ AppError::Invalid { .. }) => form_error(StatusCode::UNPROCESSABLE_ENTITY, &e),
        Err(e @ AppError::Forbidden(_)) => form_error(StatusCode::FORBIDDEN, &e),
        Err(e) => e.into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct TokenForm {
    name: String,
    scope: String,
    #[serde(default)]
    cluster_scope: String,
    #[serde(default)]
    departments: String,
    #[serde(default)]
    expires_in_days: String,
}

fn form_error(status: StatusCode, e: &AppError) -> Response {
    let message = match e {
        AppError::Invalid { field, reason } => format!("{field}: {reason}"),
        AppError::Internal(_) => "an internal error occurred; it has been logged".into(),
        other => other.to_string(),
    };
    (status, Html(gpuledger_web::account::token_form_error(&message))).into_response()
}

async fn create_token_form(State(state): State<AppState>, headers: HeaderMap, Form(form): Form<TokenForm>) -> Response {
    let result = async {
        state.auth.limits.check("tokens", &auth::source(&headers))?;
        let p = auth::require(&state.db, &headers, Capability::Administer).await?;
        let scope = if form.cluster_scope.trim().is_empty() { form.scope.trim() } else { form.cluster_scope.trim() };
        let departments: Vec<String> =
            form.departments.split(',').map(str::trim).filter(|d| !d.is_empty()).map(String::from).collect();
        let days = match form.expires_in_days.trim() {
            "" => None,
            d => Some(d.parse::<i64>().map_err(|_| AppError::invalid("expires_in_days", "a whole number of days"))?),
        };
        crate::access::tokens::create_for(&state, &p, &form.name, scope, &departments, days).await
    }
    .await;
    match result {
        Ok(created) => {
            Html(gpuledger_web::account::token_created_document(&created.name, created.scope.as_str(), &created.token))
                .into_response()
        }
        Err(AppError::Unauthorized) => Redirect::to("/login?next=/admin").into_response(),
        Err(e @ AppError::Invalid { .. }) => form_error(StatusCode::UNPROCESSABLE_ENTITY, &e),
        Err(e @ AppError::Forbidden(_)) => form_error(StatusCode::FORBIDDEN, &e),
        Err(e) => e.into_response(),
    }
}

async fn revoke_token_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    PathParams(path): PathParams<IdPath>,
) -> Response {
    let id = path.id.to_string();
    let result = async {
        let p = auth::require(&state.db, &headers, Capability::Administer).await?;
        crate::access::tokens::revoke_for(&state, &p, &id).await
    }
    .await;
    match result {
        Ok(()) => Redirect::to("/admin").into_response(),
        Err(AppError::Unauthorized) => Redirect::to("/login?next=/admin").into_response(),
        Err(e @ AppError::Forbidden(_)) => form_error(StatusCode::FORBIDDEN, &e),
        Err(e) => e.into_response(),
    }
}
