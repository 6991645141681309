//! The portal's data source over PostgreSQL, and the portal's own form handlers (token creation and
//! revocation from the admin page).
//!
//! A data source is made per request with the request's headers: every read goes through the signed-in
//! person's organization- and department-scoped transaction.

use std::sync::Arc;

use axum::{
    Form, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Redirect, Response},
    routing::post,
};
use gpuledger_core::ids::OrgId;
use gpuledger_web::{
    LoginOptions, OrgSummary, Overview, PeriodRow, PortalData, PortalError, SessionView, TenantRow, TokenRow,
    data::BoxFuture,
};
use serde::Deserialize;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};
use tokio::sync::OnceCell;

use crate::{
    app::AppState,
    auth::{self, Actor, Capability, Principal},
    db::{Database, DbError},
    error::AppError,
};

/// [`PortalData`] backed by the database, through organization-scoped transactions.
#[derive(Clone)]
pub struct DbPortalData {
    db: Database,
    featured_org: Option<OrgId>,
    headers: HeaderMap,
    principal: Arc<OnceCell<Option<Principal>>>,
}

fn utc(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
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
        Self { db, featured_org, headers, principal: Arc::new(OnceCell::new()) }
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
        let org_name: String = sqlx::query_scalar("SELECT name FROM organizations").fetch_one(tx.conn()).await?;
        let departments: Vec<String> =
            sqlx::query_scalar("SELECT name FROM departments ORDER BY name").fetch_all(tx.conn()).await?;
        tx.commit().await?;
        Ok(Some(SessionView {
            name: name.clone(),
            roles: roles.iter().map(|r| r.as_str().to_string()).collect(),
            org_name,
            csrf: csrf.clone(),
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
        let provider = auth::oidc::settings(&mut tx).await?.map(|s| s.issuer);
        let demo = auth::routes::demo_login_enabled(&mut tx).await?;
        tx.commit().await?;
        let demo_accounts = if demo {
            auth::routes::DEMO_ACCOUNTS.iter().map(|(r, label)| (r.as_str().to_string(), label.to_string())).collect()
        } else {
            Vec::new()
        };
        Ok(Some(LoginOptions { org_slug: slug, org_name: name, provider, demo_accounts }))
    }

    async fn tokens_for(&self) -> Result<Vec<TokenRow>, AppError> {
        let p = self.principal().await.ok_or(AppError::Unauthorized)?;
        p.require(Capability::Administer)?;
        let mut tx = p.begin(&self.db).await?;
        let tokens = auth::tokens::list_tokens(&mut tx).await?;
        tx.commit().await?;
        Ok(tokens
            .into_iter()
            .map(|t| TokenRow {
                id: t.token_id.to_string(),
                name: t.name,
                scope: t.scope,
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
        type Row = (time::Date, String, Option<String>, Option<String>, Option<OffsetDateTime>);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT period, state, total_amount::text, currency::text, closed_at FROM periods ORDER BY period DESC",
        )
        .fetch_all(tx.conn())
        .await?;
        tx.commit().await?;
        let scoped = p.departments.is_some();
        Ok(rows
            .into_iter()
            .map(|(period, state, total, currency, closed_at)| PeriodRow {
                period: format!("{:04}-{:02}", period.year(), u8::from(period.month())),
                state,
                total: if scoped { None } else { total },
                currency,
                closed_at: closed_at.map(utc),
            })
            .collect())
    }

    async fn tenant_totals_for(&self) -> Result<Vec<TenantRow>, AppError> {
        let p = self.principal().await.ok_or(AppError::Unauthorized)?;
        p.require(Capability::ReadLedger)?;
        // Under the caller's department scope: PostgreSQL shows a manager only their departments' tenants
        // and ledger lines.
        let mut tx = p.begin(&self.db).await?;
        type Row = (String, String, Option<time::Date>, Option<String>, Option<String>);
        let rows: Vec<Row> = sqlx::query_as(
            "WITH last AS (SELECT max(period) AS period FROM periods WHERE state = 'closed')
             SELECT d.name, t.name, last.period, sum(l.amount)::text, max(l.currency)::text
               FROM tenants t
               JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
               CROSS JOIN last
               LEFT JOIN ledger_lines l ON l.org_id = t.org_id AND l.tenant_id = t.tenant_id AND l.period = last.period
              GROUP BY d.name, t.name, last.period
              ORDER BY d.name, t.name",
        )
        .fetch_all(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .map(|(department, tenant, period, amount, currency)| TenantRow {
                department,
                tenant,
                period: period.map(|d| format!("{:04}-{:02}", d.year(), u8::from(d.month()))),
                amount,
                currency,
            })
            .collect())
    }

    async fn org_summary(&self, org: OrgId) -> Result<Option<OrgSummary>, DbError> {
        let mut tx = self.db.begin_org(org).await?;
        let row: Option<(String, String, i64, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT o.slug, o.name,
                    (SELECT count(*) FROM departments),
                    (SELECT count(*) FROM tenants),
                    (SELECT count(*) FROM clusters),
                    (SELECT count(DISTINCT model) FROM gpu_models),
                    (SELECT count(*) FROM allocation_intervals)
               FROM organizations o",
        )
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
    fn session(&self) -> BoxFuture<'_, Option<SessionView>> {
        Box::pin(async move { self.session_view().await.map_err(portal_error).ok().flatten() })
    }

    fn login_options(&self, org: Option<String>) -> BoxFuture<'_, Result<Option<LoginOptions>, PortalError>> {
        Box::pin(async move { self.login_options_for(org).await.map_err(portal_error) })
    }

    fn tokens(&self) -> BoxFuture<'_, Result<Vec<TokenRow>, PortalError>> {
        Box::pin(async move { self.tokens_for().await.map_err(portal_error) })
    }

    fn periods(&self) -> BoxFuture<'_, Result<Vec<PeriodRow>, PortalError>> {
        Box::pin(async move { self.periods_for().await.map_err(portal_error) })
    }

    fn tenant_totals(&self) -> BoxFuture<'_, Result<Vec<TenantRow>, PortalError>> {
        Box::pin(async move { self.tenant_totals_for().await.map_err(portal_error) })
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
        auth::tokens::create_for(&state, &p, &form.name, scope, &departments, days).await
    }
    .await;
    match result {
        Ok(created) => {
            let field = |k: &str| created[k].as_str().unwrap_or_default().to_string();
            Html(gpuledger_web::account::token_created_document(&field("name"), &field("scope"), &field("token")))
                .into_response()
        }
        Err(AppError::Unauthorized) => Redirect::to("/login?next=/admin").into_response(),
        Err(e @ AppError::Invalid { .. }) => form_error(StatusCode::UNPROCESSABLE_ENTITY, &e),
        Err(e @ AppError::Forbidden(_)) => form_error(StatusCode::FORBIDDEN, &e),
        Err(e) => e.into_response(),
    }
}

async fn revoke_token_form(State(state): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let result = async {
        let p = auth::require(&state.db, &headers, Capability::Administer).await?;
        auth::tokens::revoke_for(&state, &p, &id).await
    }
    .await;
    match result {
        Ok(()) => Redirect::to("/admin").into_response(),
        Err(AppError::Unauthorized) => Redirect::to("/login?next=/admin").into_response(),
        Err(e @ AppError::Forbidden(_)) => form_error(StatusCode::FORBIDDEN, &e),
        Err(e) => e.into_response(),
    }
}
