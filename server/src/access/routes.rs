//! Sign-in and identity endpoints: OIDC login and callback, demo login, logout, who-am-I, the organization's
//! provider settings and group → role mappings, and the audit log.
//!
//! Signing in and out writes identity rows only (sessions, users, sign-in attempts, audit records): those
//! transactions commit quietly, so a sign-in never makes the read model recompute an organization's figures.

use axum::{
    Form, Json, Router,
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use gpuledger_api::{
    auth::{
        AuditAction, AuditLog, AuditRecord, Me, Organization, Provider, ProviderBody, ProviderSettings, RoleMapping,
        RoleMappings, RoleMappingsBody,
    },
    params::{AuditParams, TokenUse},
    states::CallerKind,
};
use gpuledger_core::ids::{DepartmentId, OrgId};
use serde::Deserialize;
use serde_json::json;
use sqlx::types::Text;
use time::OffsetDateTime;

use super::store;
use crate::auth::{
    Actor, Role,
    oidc::{self, LoginError},
    session::{self, NewSession},
    source,
};
use crate::http::Params;
use crate::{
    auth::{Capability, Principal},
    db::OrgTx,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Administer, Caller, JsonBody},
    state::AppState,
};

/// What the identity administration handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/me", me),
        described("get", "/api/v1/identity/provider", get_provider),
        described("put", "/api/v1/identity/provider", put_provider),
        described("delete", "/api/v1/identity/provider", delete_provider),
        described("get", "/api/v1/identity/role-mappings", get_mappings),
        described("put", "/api/v1/identity/role-mappings", put_mappings),
        described("get", "/api/v1/audit", audit_log),
    ]
}

/// Routes of sign-in and identity administration.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/auth/login", get(login_page).post(login))
        .route("/auth/callback", get(callback))
        .route("/auth/demo", post(demo_login))
        .route("/auth/logout", post(logout))
        .route("/api/v1/me", get(me))
        .route("/api/v1/identity/provider", get(get_provider).put(put_provider).delete(delete_provider))
        .route("/api/v1/identity/role-mappings", get(get_mappings).put(put_mappings))
        .route("/api/v1/audit", get(audit_log))
        .merge(crate::access::tokens::router())
}

/// The organization a sign-in is for: `?org=SLUG`, else the installation's featured one.
async fn org_for(state: &AppState, slug: Option<&str>) -> Result<Option<OrgId>, AppError> {
    match slug.map(str::trim).filter(|s| !s.is_empty()) {
        Some(slug) => Ok(state.db.cross_org_directory().org_id_by_slug(slug).await?),
        None => Ok(state.featured_org),
    }
}

/// Where a sign-in may send the browser afterwards: a path on this site only, or `None` (then the role's landing
/// page). Accepted: a single `/` followed by anything but `/` or `\`, with no control character (tab, CR, LF…)
/// and no backslash anywhere — browsers read `//host`, `/\host` and `/<TAB>/host` as another site — and no
/// more than 2,000 characters. The same holds after one more percent-decoding, so an encoded form of those
/// (`/%5chost`, `/%2F/host`) is refused as well.
pub fn safe_next(next: Option<&str>) -> Option<String> {
    let next = next?;
    let decoded: String = percent_decode(next);
    (next.len() <= 2000 && is_site_path(next) && is_site_path(&decoded)).then(|| next.to_string())
}

fn is_site_path(path: &str) -> bool {
    let mut chars = path.chars();
    chars.next() == Some('/')
        && !matches!(chars.next(), Some('/' | '\\'))
        && !path.chars().any(|c| c.is_control() || c == '\\')
}

/// One round of percent-decoding (`+` stays as it is: this is a path, not a form field).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) =
                (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn to_login(error: &str) -> Response {
    Redirect::to(&format!("/login?error={error}")).into_response()
}

fn with_cookies(mut response: Response, cookies: &[HeaderValue]) -> Response {
    for c in cookies {
        response.headers_mut().append(header::SET_COOKIE, c.clone());
    }
    response
}

#[derive(Debug, Deserialize)]
struct LoginQuery {
    org: Option<String>,
    next: Option<String>,
}

/// `GET /auth/login`: never goes to the provider (a link must not sign a visitor in to some organization); it
/// sends the browser to the `/login` page, whose button starts the sign-in with a POST.
async fn login_page(Query(q): Query<LoginQuery>) -> Response {
    let mut query = form_urlencoded::Serializer::new(String::new());
    if let Some(org) = q.org.as_deref().map(str::trim).filter(|o| !o.is_empty()) {
        query.append_pair("org", org);
    }
    if let Some(next) = safe_next(q.next.as_deref()) {
        query.append_pair("next", &next);
    }
    let query = query.finish();
    let target = if query.is_empty() { "/login".to_string() } else { format!("/login?{query}") };
    Redirect::to(&target).into_response()
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    org: Option<String>,
    next: Option<String>,
}

/// `POST /auth/login` (the `/login` page's button, Origin-checked): to the organization's provider, with state,
/// nonce and PKCE bound to this browser.
async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Result<Response, AppError> {
    state.auth.limits.check("login", &source(&headers))?;
    if !same_origin(&state, &headers) {
        return Err(AppError::Forbidden("sign-in forms are accepted from this site only (Origin mismatch)".into()));
    }
    let Some(org) = org_for(&state, form.org.as_deref()).await? else {
        return Ok(to_login("unknown_org"));
    };
    let mut tx = state.db.begin_org(org).await?;
    if crate::auth::store::suspension(&mut tx).await?.is_some() {
        return Ok(to_login("suspended"));
    }
    let Some(idp) = oidc::settings(&mut tx, state.auth.providers.secrets_dir.as_deref()).await? else {
        return Ok(to_login("no_provider"));
    };
    let redirect = format!("{}/auth/callback", state.auth.sessions.base_url(&headers));
    let return_to = safe_next(form.next.as_deref()).unwrap_or_default();
    let (url, cookie) = oidc::start(&state.auth.providers, &mut tx, &idp, &redirect, &return_to).await?;
    tx.commit_quiet().await?;
    let secure = state.auth.sessions.secure(&headers);
    let set =
        session::set_cookie(secure, session::LOGIN_SECURE_COOKIE, session::LOGIN_PLAIN_COOKIE, &cookie, Some(600));
    Ok(with_cookies(Redirect::to(&url).into_response(), &[set]))
}

#[derive(Debug, Deserialize)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

fn failure_code(e: &LoginError) -> &'static str {
    match e {
        LoginError::Provider(_) => "provider",
        LoginError::NoPendingLogin => "no_pending_login",
        LoginError::StateMismatch => "state",
        LoginError::Refused(_) => "refused",
        LoginError::CodeRefused(_) => "code",
        LoginError::InvalidIdToken(_) => "id_token",
        LoginError::NoRole(_) => "no_role",
    }
}

/// `GET /auth/callback`: the provider sends the browser back here. Every outcome is audited.
async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Result<Response, AppError> {
    let from = source(&headers);
    state.auth.limits.check("login", &from)?;
    let secure = state.auth.sessions.secure(&headers);
    let clear_login =
        session::set_cookie(secure, session::LOGIN_SECURE_COOKIE, session::LOGIN_PLAIN_COOKIE, "", Some(0));
    let pending_cookie = session::cookie_named(&headers, &[session::LOGIN_SECURE_COOKIE, session::LOGIN_PLAIN_COOKIE]);
    let Some((org, cookie)) = pending_cookie.as_deref().and_then(|c| session::split(c).map(|(o, _)| (o, c))) else {
        return Ok(with_cookies(to_login("no_pending_login"), &[clear_login]));
    };
    // The pending login is consumed in its own transaction: whatever happens next, it cannot be used again.
    let mut tx = state.db.begin_org(org).await?;
    let pending = oidc::consume(&mut tx, cookie).await.ok();
    // Only a cookie this organization issued (used up or not) may write to its audit log: an invented one
    // naming some organization's id is sent back to the login page without a trace there.
    let issued = pending.is_some() || oidc::was_issued(&mut tx, cookie).await?;
    let idp = oidc::settings(&mut tx, state.auth.providers.secrets_dir.as_deref()).await?;
    tx.commit_quiet().await?;
    if !issued {
        return Ok(with_cookies(to_login("no_pending_login"), &[clear_login]));
    }
    let outcome = match (pending, idp, &q) {
        (None, _, _) => Err(LoginError::NoPendingLogin),
        (_, None, _) => Err(LoginError::Provider("no identity provider is configured".into())),
        (Some(_), Some(_), CallbackQuery { error: Some(error), error_description, .. }) => Err(LoginError::Refused(
            format!("{error} {}", error_description.as_deref().unwrap_or_default()).trim().to_string(),
        )),
        (Some(pending), Some(idp), CallbackQuery { code: Some(code), state: Some(st), .. }) => {
            let redirect = format!("{}/auth/callback", state.auth.sessions.base_url(&headers));
            oidc::finish(&state.auth.providers, &idp, &redirect, pending, st, code).await.map(|v| (v, idp))
        }
        _ => Err(LoginError::Refused("the callback has no code or no state".into())),
    };
    let mut tx = state.db.begin_org(org).await?;
    let (verified, _idp) = match outcome {
        Ok(v) => v,
        Err(e) => {
            tx.audit_from(
                "anonymous",
                &from,
                "login.failure",
                "oidc",
                &e.to_string(),
                json!({"code": failure_code(&e)}),
            )
            .await?;
            tx.commit_quiet().await?;
            return Ok(with_cookies(to_login(failure_code(&e)), &[clear_login]));
        }
    };
    let who = verified.email.clone().unwrap_or_else(|| verified.subject.clone());
    if crate::auth::store::suspension(&mut tx).await?.is_some() {
        tx.audit_from(
            &format!("user:{who}"),
            &from,
            "login.denied",
            "oidc",
            "the organization is suspended by its operator",
            json!({}),
        )
        .await?;
        tx.commit_quiet().await?;
        return Ok(with_cookies(to_login("suspended"), &[clear_login]));
    }
    let (roles, departments) = oidc::roles_for(&mut tx, &verified.groups).await?;
    if roles.is_empty() {
        let e = LoginError::NoRole(who.clone());
        tx.audit_from(
            &format!("user:{who}"),
            &from,
            "login.denied",
            "oidc",
            &e.to_string(),
            json!({"groups": verified.groups}),
        )
        .await?;
        tx.commit_quiet().await?;
        return Ok(with_cookies(to_login("no_role"), &[clear_login]));
    }
    let user_id = oidc::upsert_user(&mut tx, &verified.subject, verified.email.as_deref(), &verified.name).await?;
    let new = NewSession {
        user_id,
        roles: roles.clone(),
        departments,
        id_token_hint: Some(verified.id_token.clone()),
        source: from.clone(),
    };
    let value = session::create(&mut tx, &state.auth.sessions, &new).await?;
    let role_names: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
    tx.audit_from(&format!("user:{who}"), &from, "login.success", "oidc", "", json!({"roles": role_names})).await?;
    tx.commit_quiet().await?;
    let landing = safe_next(Some(&verified.return_to)).unwrap_or_else(|| roles[0].landing().to_string());
    let set = session::set_cookie(secure, session::SECURE_COOKIE, session::PLAIN_COOKIE, &value, None);
    Ok(with_cookies(Redirect::to(&landing).into_response(), &[clear_login, set]))
}

#[derive(Debug, Deserialize)]
struct DemoForm {
    org: Option<String>,
    role: String,
    next: Option<String>,
}

/// Whether a browser form post comes from this site (login forms have no session yet, hence no CSRF token:
/// the browser's Origin header is checked instead).
fn same_origin(state: &AppState, headers: &HeaderMap) -> bool {
    let base = state.auth.sessions.base_url(headers);
    match headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) {
        Some(origin) => origin == base,
        None => headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) == Some("same-origin"),
    }
}

/// The demo accounts: one per role.
pub const DEMO_ACCOUNTS: [(Role, &str); 4] = [
    (Role::Admin, "Ada (demo admin)"),
    (Role::Finance, "Finn (demo finance)"),
    (Role::DepartmentManager, "Dana (demo manager of Research)"),
    (Role::Viewer, "Val (demo viewer)"),
];

/// Whether `org` offers the demo login: the process runs `demo` (`demo_mode`, a runtime mode no database row can
/// switch on), and the organization is a demo one (`organizations.demo_login`) without a configured provider.
pub async fn demo_login_enabled(demo_mode: bool, tx: &mut OrgTx) -> Result<bool, AppError> {
    if !demo_mode {
        return Ok(false);
    }
    Ok(store::demo_login_on(tx).await?.unwrap_or(false))
}

/// `POST /auth/demo`: signs in as one of the demo accounts (only while the organization has no provider).
async fn demo_login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<DemoForm>,
) -> Result<Response, AppError> {
    let from = source(&headers);
    state.auth.limits.check("login", &from)?;
    if !state.auth.demo_mode {
        // Not a refusal that depends on the organization: under `serve` this route does not exist. Someone trying
        // it against a real organization is a denied sign-in its admins see (the login rate limit bounds how often).
        if let Ok(Some(org)) = org_for(&state, form.org.as_deref()).await {
            let mut tx = state.db.begin_org(org).await?;
            tx.audit_from(
                "anonymous",
                &from,
                "login.denied",
                "demo",
                "the demo sign-in exists only while the server runs `demo`",
                json!({"role": form.role.chars().take(40).collect::<String>()}),
            )
            .await?;
            tx.commit_quiet().await?;
        }
        return Err(AppError::NotFound("the demo sign-in exists only while the server runs `demo`".into()));
    }
    if !same_origin(&state, &headers) {
        return Err(AppError::Forbidden("sign-in forms are accepted from this site only (Origin mismatch)".into()));
    }
    let role = Role::parse(form.role.trim())
        .ok_or_else(|| AppError::invalid("role", "one of admin, finance, department_manager, viewer"))?;
    let Some(org) = org_for(&state, form.org.as_deref()).await? else {
        return Err(AppError::invalid("org", "no such organization"));
    };
    let mut tx = state.db.begin_org(org).await?;
    crate::auth::store::ensure_active(&mut tx).await?;
    if !demo_login_enabled(state.auth.demo_mode, &mut tx).await? {
        return Err(AppError::Forbidden(
            "the demo login is off for this organization (it has an identity provider, or is not a demo)".into(),
        ));
    }
    let name = DEMO_ACCOUNTS.iter().find(|(r, _)| *r == role).map(|(_, n)| *n).unwrap_or("demo");
    let email = format!("{}@demo.invalid", role.as_str().replace('_', "-"));
    let user_id = oidc::upsert_user(&mut tx, &format!("demo:{}", role.as_str()), Some(&email), name).await?;
    let departments = if role == Role::DepartmentManager {
        let research = store::demo_manager_department(&mut tx).await?;
        research.map(DepartmentId::from_uuid).into_iter().collect()
    } else {
        Vec::new()
    };
    let new = NewSession { user_id, roles: vec![role], departments, id_token_hint: None, source: from.clone() };
    let value = session::create(&mut tx, &state.auth.sessions, &new).await?;
    tx.audit_from(&format!("user:{email}"), &from, "login.success", "demo", "", json!({"roles": [role.as_str()]}))
        .await?;
    tx.commit_quiet().await?;
    let secure = state.auth.sessions.secure(&headers);
    let set = session::set_cookie(secure, session::SECURE_COOKIE, session::PLAIN_COOKIE, &value, None);
    let landing = safe_next(form.next.as_deref()).unwrap_or_else(|| role.landing().to_string());
    Ok(with_cookies(Redirect::to(&landing).into_response(), &[set]))
}

/// `POST /auth/logout`: ends the server-side session, clears the cookie, and signs out at the provider too
/// when it supports RP-initiated logout. (The CSRF guard checked the form's token.)
async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, AppError> {
    let secure = state.auth.sessions.secure(&headers);
    let clear = session::set_cookie(secure, session::SECURE_COOKIE, session::PLAIN_COOKIE, "", Some(0));
    let after = format!("{}/login?signed_out=1", state.auth.sessions.base_url(&headers));
    let Some(cookie) = session::cookie_value(&headers) else {
        return Ok(with_cookies(Redirect::to("/login?signed_out=1").into_response(), &[clear]));
    };
    let principal = session::principal(&state.db, &cookie).await.ok();
    state.pages.forget_session(&cookie);
    let ended = session::end(&state.db, &cookie).await?;
    let mut target = "/login?signed_out=1".to_string();
    if let (Some(p), Some(hint)) = (principal, ended) {
        let mut tx = state.db.begin_org(p.org).await?;
        tx.audit_from(&p.actor(), &source(&headers), "logout", "session", "", json!({})).await?;
        let idp = oidc::settings(&mut tx, state.auth.providers.secrets_dir.as_deref()).await?;
        tx.commit_quiet().await?;
        if let (Some(idp), Some(hint)) = (idp, hint)
            && let Some(url) = state.auth.providers.logout_url(&idp, &hint, &after).await
        {
            target = url;
        }
    }
    Ok(with_cookies(Redirect::to(&target).into_response(), &[clear]))
}

/// `GET /api/v1/me`: who the caller is and what it may do.
async fn me(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Me>, AppError> {
    let p = crate::auth::authenticate(&state.db, &headers).await?;
    let mut tx = p.begin(&state.db).await?;
    let (slug, name) = store::organization(&mut tx).await?;
    let departments = store::department_names(&mut tx).await?;
    tx.commit_quiet().await?;
    let (kind, roles, csrf) = match &p.actor {
        Actor::Token { scope, .. } => (CallerKind::Token, vec![scope.db_name().to_string()], None),
        Actor::User { roles, csrf, .. } => {
            (CallerKind::User, roles.iter().map(|r| r.as_str().to_string()).collect(), Some(csrf.clone()))
        }
    };
    Ok(Json(Me {
        organization: Organization { slug, name },
        actor: p.actor(),
        kind,
        roles,
        departments: p.departments.is_some().then_some(departments),
        csrf_token: csrf,
    }))
}

// ---------------------------------------------------------------- provider settings

async fn get_provider(
    State(state): State<AppState>,
    p: Caller<Administer>,
    headers: HeaderMap,
) -> Result<Json<ProviderSettings>, AppError> {
    provider_settings(&state, &p, &headers).await.map(Json)
}

/// The settings as admins see them; `headers` give the redirect URI's site.
pub(crate) async fn provider_settings(
    state: &AppState,
    p: &crate::auth::Principal,
    headers: &HeaderMap,
) -> Result<ProviderSettings, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let idp = oidc::settings(&mut tx, state.auth.providers.secrets_dir.as_deref()).await?;
    let demo = demo_login_enabled(state.auth.demo_mode, &mut tx).await?;
    tx.commit_quiet().await?;
    Ok(ProviderSettings {
        provider: idp.map(|i| Provider {
            issuer: i.issuer,
            client_id: i.client_id,
            client_secret_set: true,
            client_secret_source: i.client_secret_source.to_string(),
            groups_claim: i.groups_claim,
            scopes: i.scopes,
        }),
        demo_login: demo,
        redirect_uri: format!("{}/auth/callback", state.auth.sessions.base_url(headers)),
    })
}

/// What is stored as the client secret of a provider whose secret lives in the mounted directory only.
const MOUNTED_SECRET_MARKER: &str = "(mounted: --oidc-secrets-dir)";

async fn put_provider(
    State(state): State<AppState>,
    p: Caller<Administer>,
    headers: HeaderMap,
    JsonBody(r): JsonBody<ProviderBody>,
) -> Result<Json<ProviderSettings>, AppError> {
    Ok(Json(save_provider(&state, &p, &headers, r).await?))
}

pub(crate) async fn save_provider(
    state: &AppState,
    p: &Principal,
    headers: &HeaderMap,
    r: ProviderBody,
) -> Result<ProviderSettings, AppError> {
    p.require(Capability::Administer)?;
    // The form is the contract's (the body's types); where an issuer may be and whether discovery works there are
    // the operator's rule and the provider's state: 409.
    let issuer = r.issuer.as_str().trim_end_matches('/').to_string();
    state.auth.providers.check_issuer(&issuer).await.map_err(|reason| AppError::refused("issuer", reason))?;
    let groups_claim = r.groups_claim.map_or_else(|| "groups".to_string(), |g| g.into_inner());
    let scopes = r.scopes.map_or_else(|| "openid email profile groups".to_string(), |s| s.as_str().trim().to_string());
    // What went wrong stays in the server log: the answer does not probe the network on the caller's behalf.
    state
        .auth
        .providers
        .check(&issuer)
        .await
        .map_err(|_| AppError::refused("issuer", "OpenID discovery at this issuer failed (the server log says why)"))?;
    let mut tx = p.begin(&state.db).await?;
    // The stored secret only: a secret read from the mounted directory is never copied into the database.
    let stored = store::stored_client_secret(&mut tx).await?;
    let slug = store::organization_slug(&mut tx).await?;
    let mounted = oidc::mounted_secret(state.auth.providers.secrets_dir.as_deref(), &slug).is_some();
    let secret = match (r.client_secret.map(|s| s.into_inner()), stored) {
        (Some(s), _) => s,
        (None, Some(s)) => s,
        // Nothing stored, but the mounted directory has this organization's secret: store a marker, not it.
        (None, None) if mounted => MOUNTED_SECRET_MARKER.to_string(),
        (None, None) => {
            return Err(AppError::refused(
                "client_secret",
                format!("is required the first time (or mount it as `{slug}` in the server's --oidc-secrets-dir)"),
            ));
        }
    };
    let row = store::ProviderRow {
        issuer: &issuer,
        client_id: r.client_id.as_str(),
        client_secret: &secret,
        groups_claim: &groups_claim,
        scopes: &scopes,
        updated_by: p.actor(),
    };
    store::upsert_provider(&mut tx, &row).await?;
    // The secret is never written to the audit log.
    tx.audit_by(p, "identity.provider.update", "idp", "", json!({"issuer": issuer, "client_id": r.client_id.as_str()}))
        .await?;
    tx.commit().await?;
    provider_settings(state, p, headers).await
}

async fn delete_provider(State(state): State<AppState>, p: Caller<Administer>) -> Result<StatusCode, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let removed = store::delete_provider(&mut tx).await?;
    if removed == 0 {
        return Err(AppError::NotFound("no identity provider is configured".into()));
    }
    tx.audit_by(&p, "identity.provider.delete", "idp", "", json!({})).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------- role mappings

async fn get_mappings(State(state): State<AppState>, p: Caller<Administer>) -> Result<Json<RoleMappings>, AppError> {
    role_mappings(&state, &p).await.map(Json)
}

/// The mappings, by group, role and department.
pub(crate) async fn role_mappings(state: &AppState, p: &crate::auth::Principal) -> Result<RoleMappings, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let rows = store::role_mappings(&mut tx).await?;
    tx.commit().await?;
    let mappings =
        rows.into_iter().map(|(group, Text(role), department)| RoleMapping { group, role, department }).collect();
    Ok(RoleMappings { mappings })
}

async fn put_mappings(
    State(state): State<AppState>,
    p: Caller<Administer>,
    JsonBody(r): JsonBody<RoleMappingsBody>,
) -> Result<Json<RoleMappings>, AppError> {
    Ok(Json(save_mappings(&state, &p, r).await?))
}

pub(crate) async fn save_mappings(
    state: &AppState,
    p: &Principal,
    r: RoleMappingsBody,
) -> Result<RoleMappings, AppError> {
    p.require(Capability::Administer)?;
    let mut tx = p.begin(&state.db).await?;
    let mut rows = Vec::new();
    for (i, m) in r.mappings.iter().enumerate() {
        let group = m.group.as_str();
        let role = Role::parse(m.role.as_str())
            .ok_or_else(|| AppError::Internal(format!("role {:?} has no Role", m.role.as_str())))?;
        let department = match (role, m.department.as_deref()) {
            (Role::DepartmentManager, Some(name)) => {
                let id = store::department_by_name(&mut tx, name).await?;
                Some(id.ok_or_else(|| {
                    AppError::unknown(format!("mappings[{i}].department"), format!("no department named {name:?}"))
                })?)
            }
            (Role::DepartmentManager, None) => {
                return Err(AppError::refused(
                    format!("mappings[{i}].department"),
                    "a department manager needs a department",
                ));
            }
            (_, Some(_)) => {
                return Err(AppError::refused(
                    format!("mappings[{i}].department"),
                    "only department managers have a department",
                ));
            }
            (_, None) => None,
        };
        rows.push((group.to_string(), role, department));
    }
    store::delete_role_mappings(&mut tx).await?;
    for (group, role, department) in &rows {
        store::insert_role_mapping(&mut tx, group, role.as_str(), *department).await?;
    }
    tx.audit_by(p, "identity.role_mappings.update", "role_mappings", "", json!({"count": rows.len()})).await?;
    tx.commit().await?;
    role_mappings(state, p).await
}

// ---------------------------------------------------------------- audit log

/// `GET /api/v1/audit`: newest first, `limit` (1..=1000, default 100), `before` (RFC 3339) to page back, `action`
/// to keep one action, `exclude` (comma-separated, at most 10) to leave routine ones out, `token_use` (`each`,
/// `fold`: one row per token and UTC day with a count — what the portal shows — or `hide`).
async fn audit_log(
    State(state): State<AppState>,
    p: Caller<Administer>,
    Params(q): Params<AuditParams>,
) -> Result<Json<AuditLog>, AppError> {
    read_audit(&state, &p, q).await.map(Json)
}

/// The audit log (`GET /api/v1/audit`).
pub(crate) async fn read_audit(
    state: &AppState,
    p: &crate::auth::Principal,
    q: AuditParams,
) -> Result<AuditLog, AppError> {
    let limit = q.limit.map_or(100, |l| l.get());
    let before = q.before.map(|b| b.at());
    let mut exclude: Vec<String> = q.exclude.as_ref().map(|e| e.items().to_vec()).unwrap_or_default();
    let token_use = q.token_use.unwrap_or(TokenUse::Each);
    let folding = token_use == TokenUse::Fold && q.action.as_deref().is_none_or(|a| a == "token.use");
    if token_use == TokenUse::Hide || folding {
        exclude.push("token.use".into());
    }
    let mut tx = p.begin(&state.db).await?;
    let rows = store::audit_page(&mut tx, before, q.action.as_deref(), &exclude, folding, limit).await?;
    tx.commit().await?;
    let rfc = |t: OffsetDateTime| gpuledger_core::time_fmt::rfc3339(t);
    let next = (rows.len() as i64 == limit).then(|| rows.last().map(|r| rfc(r.0))).flatten();
    let items = rows
        .into_iter()
        .map(|(at, actor, action, target, reason, details, source, count, first)| {
            // Only this server writes actions; one it cannot read back is the data's fault, never the caller's.
            let action =
                AuditAction::new(action).map_err(|e| AppError::Internal(format!("the audit log holds {e}")))?;
            Ok(AuditRecord {
                at: rfc(at),
                actor,
                action,
                target,
                reason,
                details,
                source,
                count,
                first_at: first.map(rfc),
            })
        })
        .collect::<Result<Vec<_>, AppError>>()?;
    Ok(AuditLog { items, next_before: next })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn next_is_a_path_on_this_site_or_nothing() {
        // The forms that browsers read as another site, as they arrive after form decoding.
        for bad in [
            "/\t/evil.example",
            "//evil.example",
            "/\\evil.example",
            "https://evil.example/",
            "/%5cevil.example",
            "/%5Cevil.example",
            "/%2F/evil.example",
            "/%09/evil.example",
            "\\\\evil.example",
            "/\r\n/evil.example",
            "/ok\\then",
            "javascript:alert(1)",
            "evil.example",
            "",
            "/x\u{7f}",
        ] {
            assert_eq!(safe_next(Some(bad)), None, "{bad:?}");
        }
        for good in ["/", "/departments?period=2026-10", "/admin/policies#draft-3", "/finance/2026-10?x=a%2Fb", "/é"] {
            assert_eq!(safe_next(Some(good)).as_deref(), Some(good), "{good:?}");
        }
        assert_eq!(safe_next(None), None);
        assert_eq!(safe_next(Some(&format!("/{}", "a".repeat(2000)))), None, "too long");
        assert_eq!(percent_decode("/a%2fb%zz%4"), "/a/b%zz%4");
    }
}
