//! Machine credentials: scoped API tokens, stored as SHA-256 hashes, shown once at creation.
//!
//! A token reads `glt_<org id, 32 hex>_<secret, 64 hex>`. The organization part lets the server open the right
//! organization-scoped transaction before looking the hash up, so verifying a token never looks across
//! organizations. Human login (OIDC) comes with the identity work.

//! Who is calling, and what they may do.
//!
//! Two kinds of credentials reach the API: **API tokens** (machines: agents, Power BI, automation) in an
//! `Authorization: Bearer …` header — or as the password of HTTP Basic, which is what Power BI sends — and
//! **browser sessions** (people, after an OIDC or demo login) in an HttpOnly cookie. Both carry the
//! organization in clear next to the secret, so the server opens the right organization-scoped transaction
//! before looking the hash up: verifying a credential never looks across organizations.
//!
//! A token reads `glt_<org id, 32 hex>_<secret, 64 hex>`; a session cookie `<org id, 32 hex>.<secret, 64 hex>`.
//! Only SHA-256 hashes of either are stored. See docs/security.md.

pub mod agents;
pub mod limits;
pub mod net;
pub mod oidc;
pub mod revocations;
pub mod session;
pub mod store;

use axum::http::{HeaderMap, header};
use base64::Engine;
use gpuledger_core::ids::{ClusterId, DepartmentId, OrgId};
use rand::Rng;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{
    db::{Database, DbError, OrgTx},
    error::AppError,
};

/// Header set by the server itself (any incoming value is removed first) to the client's address, so that
/// audit records say where an action came from.
pub const PEER_HEADER: &str = "x-gpuledger-peer";

/// Sign-in configuration and in-memory helpers shared by the handlers.
#[derive(Debug, Default)]
pub struct AuthState {
    /// Session timeouts and the public URL.
    pub sessions: session::SessionSettings,
    /// Login and token endpoint rate limits.
    pub limits: limits::RateLimits,
    /// OpenID provider metadata cache and HTTP client.
    pub providers: oidc::Providers,
    /// The process runs `demo`: only then is the demo sign-in offered (and only to an organization the database
    /// marks as a demo without a provider). `serve` never offers it, whatever the database says.
    pub demo_mode: bool,
    /// Proxies whose `X-Forwarded-For` is believed (`--trusted-proxies`); empty: the TCP peer is the client.
    pub trusted_proxies: Vec<net::Cidr>,
}

/// What a token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Everything in its organization (automation).
    Admin,
    /// Read-only exports (Power BI): the whole organization, or only `departments` when not empty.
    Export {
        /// The departments it may read; empty is the whole organization.
        departments: Vec<DepartmentId>,
    },
    /// Write one cluster's facts, nothing else.
    Agent {
        /// The cluster the agent speaks for.
        cluster: ClusterId,
    },
    /// Exchange once, before it expires, for an agent credential of one cluster (`gpuledger-agent join`).
    Join {
        /// The cluster to join.
        cluster: ClusterId,
    },
}

impl Scope {
    /// The name stored and shown (`admin`, `export`, `agent`, `join`).
    pub fn db_name(&self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Export { .. } => "export",
            Self::Agent { .. } => "agent",
            Self::Join { .. } => "join",
        }
    }

    /// The scope as the contract answers it.
    pub fn contract(&self) -> gpuledger_api::states::TokenScope {
        use gpuledger_api::states::TokenScope as S;
        match self {
            Self::Admin => S::Admin,
            Self::Export { .. } => S::Export,
            Self::Agent { .. } => S::Agent,
            Self::Join { .. } => S::Join,
        }
    }

    /// An export token of the whole organization.
    pub fn export() -> Self {
        Self::Export { departments: Vec::new() }
    }
}

/// A person's role in an organization, from the IdP's groups (or a demo account).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Onboarding, identity settings, tokens, inventory, policies.
    Admin,
    /// Policies, close, dispute resolution, credit approval.
    Finance,
    /// Their departments' showback; opens and comments on disputes for them.
    DepartmentManager,
    /// Reads the whole organization's showback.
    Viewer,
}

impl Role {
    /// Every role, most powerful first (the order landing pages are chosen in).
    pub const ALL: [Role; 4] = [Role::Admin, Role::Finance, Role::DepartmentManager, Role::Viewer];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Finance => "finance",
            Self::DepartmentManager => "department_manager",
            Self::Viewer => "viewer",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Whether the role covers the whole organization (every role but department manager).
    pub fn org_wide(self) -> bool {
        self != Self::DepartmentManager
    }

    /// Where a person with this role lands after signing in.
    pub fn landing(self) -> &'static str {
        match self {
            Self::Admin => "/admin",
            Self::Finance => "/finance",
            Self::DepartmentManager => "/departments",
            Self::Viewer => "/",
        }
    }

    fn allows(self, cap: Capability) -> bool {
        use Capability as C;
        match self {
            Self::Admin => !matches!(cap, C::CreditApprove | C::Ingest | C::Join),
            Self::Finance => matches!(
                cap,
                C::ReadLedger
                    | C::ManagePolicy
                    | C::Close
                    | C::DisputeParticipate
                    | C::DisputeResolve
                    | C::CreditApprove
            ),
            Self::DepartmentManager => matches!(cap, C::ReadLedger | C::DisputeParticipate),
            Self::Viewer => matches!(cap, C::ReadLedger),
        }
    }
}

/// Something a caller may be allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Read ledgers, periods, evidence, analytics, disputes, policies (within the caller's departments).
    ReadLedger,
    /// Write cost policies and quotas, import Kueue quotas, approve policies.
    ManagePolicy,
    /// Close a month.
    Close,
    /// Open disputes and comment on them.
    DisputeParticipate,
    /// Accept or reject disputes.
    DisputeResolve,
    /// Approve or refuse the credit of an accepted dispute.
    CreditApprove,
    /// Tokens, identity provider settings, role mappings, the audit log.
    Administer,
    /// Send one cluster's facts.
    Ingest,
    /// Redeem a join token.
    Join,
}

impl Capability {
    /// Who has it, for people (refusals and the API document say it).
    pub fn needs(self) -> &'static str {
        match self {
            Self::ReadLedger => "a signed-in user, an admin token or an export token",
            Self::ManagePolicy => "the admin or finance role (or an admin token)",
            Self::Close => "the admin or finance role (or an admin token)",
            Self::DisputeParticipate => "a signed-in manager, finance or admin user (or an admin token)",
            Self::DisputeResolve => "the admin or finance role (or an admin token)",
            Self::CreditApprove => "the finance role (admins and admin tokens do not approve credits)",
            Self::Administer => "the admin role (or an admin token)",
            Self::Ingest => "an agent token",
            Self::Join => "a join token",
        }
    }
}

/// Who acts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// A machine, by its token.
    Token {
        /// The token's id.
        token_id: Uuid,
        /// What it may do.
        scope: Scope,
    },
    /// A person in a browser session.
    User {
        /// The user's id.
        user_id: Uuid,
        /// The session's id.
        session_id: Uuid,
        /// E-mail or subject: what histories show.
        name: String,
        /// The roles granted at login.
        roles: Vec<Role>,
        /// The session's CSRF token (forms and `X-CSRF-Token`).
        csrf: String,
    },
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Its organization.
    pub org: OrgId,
    /// The token or the person.
    pub actor: Actor,
    /// `None`: the whole organization; otherwise only these departments (PostgreSQL enforces it).
    pub departments: Option<Vec<DepartmentId>>,
    /// Where the request came from (client address), for the audit log.
    pub source: String,
    /// The organization's API rate limit (requests per minute) set by its operator, if any.
    pub rate_limit_per_minute: Option<i32>,
}

impl Principal {
    /// A principal for a token (tests and in-process callers such as the demo).
    pub fn for_token(org: OrgId, token_id: Uuid, scope: Scope) -> Self {
        let departments = match &scope {
            Scope::Export { departments } if !departments.is_empty() => Some(departments.clone()),
            _ => None,
        };
        Self {
            org,
            actor: Actor::Token { token_id, scope },
            departments,
            source: String::new(),
            rate_limit_per_minute: None,
        }
    }

    /// Who did it, as written in audit trails and dispute histories: `token:<id>` or `user:<e-mail>`.
    pub fn actor(&self) -> String {
        match &self.actor {
            Actor::Token { token_id, .. } => format!("token:{token_id}"),
            Actor::User { name, .. } => format!("user:{name}"),
        }
    }

    /// Whether the caller may do `cap`.
    pub fn may(&self, cap: Capability) -> bool {
        match &self.actor {
            Actor::Token { scope, .. } => match scope {
                // Like the admin role, an admin token decides disputes but never approves their credits: no
                // single credential holds both halves of that separation of duties.
                Scope::Admin => !matches!(cap, Capability::Ingest | Capability::Join | Capability::CreditApprove),
                Scope::Export { .. } => cap == Capability::ReadLedger,
                Scope::Agent { .. } => cap == Capability::Ingest,
                Scope::Join { .. } => cap == Capability::Join,
            },
            Actor::User { roles, .. } => roles.iter().any(|r| r.allows(cap)),
        }
    }

    /// `Ok` when the caller may do `cap`, else 403 naming what is needed.
    pub fn require(&self, cap: Capability) -> Result<(), AppError> {
        if self.may(cap) { Ok(()) } else { Err(AppError::Forbidden(format!("this needs {}", cap.needs()))) }
    }

    /// The cluster an agent token speaks for.
    pub fn agent_cluster(&self) -> Option<ClusterId> {
        match &self.actor {
            Actor::Token { scope: Scope::Agent { cluster }, .. } => Some(*cluster),
            _ => None,
        }
    }

    /// The caller's organization-scoped transaction, restricted to its departments when it has a department
    /// scope. Every read on behalf of a caller goes through here.
    pub async fn begin(&self, db: &Database) -> Result<OrgTx, DbError> {
        db.begin_scoped(self.org, self.departments.as_deref()).await
    }

    /// The departments and tenants PostgreSQL lets the caller see, when it is limited to departments (`None`:
    /// the whole organization). Computations that need the whole organization (a month's ledger splits
    /// overhead across every tenant) run organization-wide and then show the caller only these.
    pub async fn visible(&self, db: &Database) -> Result<Option<Visible>, DbError> {
        if self.departments.is_none() {
            return Ok(None);
        }
        let mut tx = self.begin(db).await?;
        let (departments, tenants) = store::visible_ids(&mut tx).await?;
        tx.commit_quiet().await?;
        Ok(Some(Visible { departments: departments.into_iter().collect(), tenants: tenants.into_iter().collect() }))
    }

    /// Whether a department is visible to the caller.
    pub fn sees_department(&self, department: DepartmentId) -> bool {
        self.departments.as_ref().is_none_or(|d| d.contains(&department))
    }

    /// The session's CSRF token, for a browser session.
    pub fn csrf(&self) -> Option<&str> {
        match &self.actor {
            Actor::User { csrf, .. } => Some(csrf),
            Actor::Token { .. } => None,
        }
    }
}

/// What a department-scoped caller may see (read under its scope, so PostgreSQL decided it).
#[derive(Debug, Clone, Default)]
pub struct Visible {
    /// Visible departments.
    pub departments: std::collections::HashSet<Uuid>,
    /// Visible tenants.
    pub tenants: std::collections::HashSet<Uuid>,
}

impl Visible {
    /// Whether a department is visible (`None` = whole organization).
    pub fn department(v: &Option<Visible>, id: Uuid) -> bool {
        v.as_ref().is_none_or(|v| v.departments.contains(&id))
    }

    /// Whether a tenant is visible (`None` = whole organization; an unattributed `None` tenant is not, to a
    /// scoped caller).
    pub fn tenant(v: &Option<Visible>, id: Option<Uuid>) -> bool {
        v.as_ref().is_none_or(|v| id.is_some_and(|t| v.tenants.contains(&t)))
    }
}

pub(crate) fn sha256(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// 256 random bits as 64 hex digits.
pub(crate) fn random_secret() -> String {
    let secret: [u8; 32] = rand::rng().random();
    hex::encode(secret)
}

/// Splits a presented token into its organization (the whole token is what is hashed).
fn parse(token: &str) -> Option<OrgId> {
    let rest = token.strip_prefix("glt_")?;
    let (org, secret) = rest.split_once('_')?;
    if secret.len() != 64 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Uuid::try_parse(org).ok().map(OrgId::from_uuid)
}

/// The token in an `Authorization` header: `Bearer TOKEN`, or HTTP Basic with the token as the password (any
/// user name) — how Power BI and other OData clients send credentials.
fn presented_token(value: &str) -> Option<String> {
    if let Some(token) = value.strip_prefix("Bearer ") {
        return Some(token.trim().to_string());
    }
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_string())
}

/// The client address the server recorded for this request (see [`PEER_HEADER`]).
pub fn source(headers: &HeaderMap) -> String {
    headers.get(PEER_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// Authenticates a request: an `Authorization` header (Bearer or Basic token) when present — a bad one is
/// refused, never passed over for a cookie — else the session cookie.
pub async fn authenticate(db: &Database, headers: &HeaderMap) -> Result<Principal, AppError> {
    let source = source(headers);
    // A credential refused here ends the identity kept for it at once (`revocations`), whichever path refused it.
    let refused = |credential: &str, e: AppError| {
        if matches!(e, AppError::Unauthorized) {
            revocations::refused(revocations::digest(credential));
        }
        e
    };
    let mut principal = if let Some(value) = headers.get(header::AUTHORIZATION) {
        let presented = value.to_str().ok();
        let token = presented.and_then(presented_token).ok_or(AppError::Unauthorized)?;
        token_principal(db, &token, &source).await.map_err(|e| refused(presented.unwrap_or_default(), e))?
    } else if let Some(cookie) = session::cookie_value(headers) {
        session::principal(db, &cookie).await.map_err(|e| refused(&cookie, e))?
    } else {
        return Err(AppError::Unauthorized);
    };
    principal.source = source;
    // The operator's API rate limit counts the organization's tokens and sessions; agents' ingest has its own daily
    // volume limit instead.
    if let Some(limit) = principal.rate_limit_per_minute
        && principal.agent_cluster().is_none()
    {
        crate::auth::store::check_rate(principal.org, limit)?;
    }
    Ok(principal)
}

/// Authenticates and checks one capability.
pub async fn require(db: &Database, headers: &HeaderMap, cap: Capability) -> Result<Principal, AppError> {
    let principal = authenticate(db, headers).await?;
    principal.require(cap)?;
    Ok(principal)
}

/// (token id, scope, cluster, departments, the organization's API rate limit) of a live token.
type TokenRow = (Uuid, String, Option<Uuid>, Vec<Uuid>, Option<i32>);

async fn token_principal(db: &Database, token: &str, source: &str) -> Result<Principal, AppError> {
    let org = parse(token).ok_or(AppError::Unauthorized)?;
    let mut tx = db.begin_org(org).await?;
    // `last_used_at` is kept to the minute, and so is the `token.use` audit record written with it: a write (and
    // its WAL flush) on every request would double the commit cost of each ingest batch.
    // Plain statements, not one statement with data-modifying CTEs: Citus runs such CTEs through intermediate results
    // and would write the audit record with COPY, which row-level security refuses (docs/scaling.md).
    // The live token, and whether its last use is a minute old (then it is touched and audited).
    let found = store::live_token(&mut tx, sha256(token)).await?;
    if let Some((token_id, _, _, _, _, true)) = &found {
        // Re-checked under the row's lock: of two requests at once, one writes the record.
        if store::touch_token_use(&mut tx, *token_id).await?.is_some() {
            store::insert_token_use_audit(&mut tx, *token_id, source).await?;
        }
    }
    let row: Option<TokenRow> = found.map(|(t, s, c, d, r, _)| (t, s, c, d, r));
    if row.is_none()
        && let Some(suspended) = crate::auth::store::suspension(&mut tx).await?
    {
        // A suspended organization's tokens are refused with the reason; nothing is written to its log.
        tx.rollback().await?;
        return Err(suspended);
    }
    if row.is_none() && refusal_due(org, source) {
        // A token naming this organization that is not one of its live tokens (forged, revoked, expired): the
        // organization's admins see it. At most one record per client address and minute, and only for an
        // organization that exists, so forged tokens cannot flood anyone's audit log.
        if store::org_exists(&mut tx).await? {
            store::insert_token_refused_audit(&mut tx, source).await?;
        }
    }
    tx.commit_identity().await?;
    let (token_id, scope, cluster, departments, rate_limit) = row.ok_or(AppError::Unauthorized)?;
    let scope = match (scope.as_str(), cluster) {
        ("admin", _) => Scope::Admin,
        ("export", _) => Scope::Export { departments: departments.into_iter().map(DepartmentId::from_uuid).collect() },
        ("agent", Some(c)) => Scope::Agent { cluster: ClusterId::from_uuid(c) },
        ("join", Some(c)) => Scope::Join { cluster: ClusterId::from_uuid(c) },
        _ => return Err(AppError::Unauthorized),
    };
    Ok(Principal { rate_limit_per_minute: rate_limit, ..Principal::for_token(org, token_id, scope) })
}

/// Whether a refused token from `source` should be audited in `org` now: once per organization, address and
/// minute (in memory, per replica; the map is emptied when it grows past 10,000 entries).
fn refusal_due(org: OrgId, source: &str) -> bool {
    use std::{
        collections::HashMap,
        sync::{Mutex, OnceLock, PoisonError},
        time::{Duration, Instant},
    };
    static LAST: OnceLock<Mutex<HashMap<(OrgId, String), Instant>>> = OnceLock::new();
    let mut last = LAST.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if last.len() > 10_000 {
        last.clear();
    }
    let now = Instant::now();
    let key = (org, source.chars().take(100).collect::<String>());
    match last.get(&key) {
        Some(at) if now.duration_since(*at) < Duration::from_secs(60) => false,
        _ => {
            last.insert(key, now);
            true
        }
    }
}

/// How long a join token stays valid.
pub const JOIN_TOKEN_TTL: time::Duration = time::Duration::hours(24);

/// Creates a token in `tx`'s organization and returns it (the only time it is visible). Audited. Join tokens
/// expire after [`JOIN_TOKEN_TTL`].
pub async fn create_token(
    tx: &mut OrgTx,
    scope: &Scope,
    name: &str,
    created_by: &str,
    expires_at: Option<time::OffsetDateTime>,
) -> Result<(Uuid, String), DbError> {
    let token = format!("glt_{}_{}", tx.org().as_uuid().simple(), random_secret());
    let token_id = Uuid::new_v4();
    let cluster = match scope {
        Scope::Agent { cluster } | Scope::Join { cluster } => Some(cluster.as_uuid()),
        _ => None,
    };
    let departments: Vec<Uuid> = match scope {
        Scope::Export { departments } => departments.iter().map(|d| d.as_uuid()).collect(),
        _ => Vec::new(),
    };
    let expires_at = match (scope, expires_at) {
        // Join tokens never outlive JOIN_TOKEN_TTL, whatever was asked.
        (Scope::Join { .. }, asked) => {
            let cap = time::OffsetDateTime::now_utc() + JOIN_TOKEN_TTL;
            Some(asked.map_or(cap, |a| a.min(cap)))
        }
        (_, asked) => asked,
    };
    let record = store::NewToken {
        token_id,
        scope: scope.db_name(),
        cluster,
        name,
        secret_sha256: sha256(&token),
        created_by,
        expires_at,
        departments: &departments,
    };
    store::insert_token(tx, &record).await?;
    store::insert_token_create_audit(tx, &record).await?;
    Ok((token_id, token))
}

/// Exchanges a join token (single use: it is revoked in the same transaction) for an agent credential of its
/// cluster. Returns the new token and the cluster's name.
pub async fn redeem_join_token(db: &Database, principal: &Principal) -> Result<(String, String), AppError> {
    let Actor::Token { token_id, scope: Scope::Join { cluster } } = &principal.actor else {
        return Err(AppError::Forbidden("only a join token can be exchanged".into()));
    };
    let (token_id, cluster) = (*token_id, *cluster);
    let mut tx = db.begin_org(principal.org).await?;
    // Single use even under concurrency: only one exchange can flip revoked_at.
    if store::revoke_unrevoked_token(&mut tx, token_id).await? != 1 {
        return Err(AppError::Unauthorized);
    }
    let name = store::cluster_name(&mut tx, cluster.as_uuid()).await?;
    let (_, token) = create_token(&mut tx, &Scope::Agent { cluster }, &format!("joined {name}"), "join", None).await?;
    tx.commit().await?;
    revocations::revoked();
    Ok((token, name))
}

/// The scope key of a caller: `all`, or its departments sorted.
pub fn scope_key(departments: Option<&[gpuledger_core::ids::DepartmentId]>) -> String {
    match departments {
        None => "all".into(),
        Some(list) => {
            let mut ids: Vec<String> = list.iter().map(|d| d.as_uuid().to_string()).collect();
            ids.sort();
            ids.join(",")
        }
    }
}

/// Finds a cluster by name in `tx`'s organization, registering it when new.
pub async fn ensure_cluster(tx: &mut OrgTx, name: &str) -> Result<(ClusterId, bool), DbError> {
    if let Some(id) = store::cluster_by_name(tx, name).await? {
        return Ok((ClusterId::from_uuid(id), false));
    }
    let id = Uuid::new_v4();
    store::insert_cluster(tx, id, name).await?;
    Ok((ClusterId::from_uuid(id), true))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn token(scope: Scope) -> Principal {
        Principal::for_token(OrgId::from_uuid(Uuid::nil()), Uuid::nil(), scope)
    }

    fn user(roles: &[Role]) -> Principal {
        Principal {
            org: OrgId::from_uuid(Uuid::nil()),
            actor: Actor::User {
                user_id: Uuid::nil(),
                session_id: Uuid::nil(),
                name: "ada@example.test".into(),
                roles: roles.to_vec(),
                csrf: String::new(),
            },
            departments: None,
            source: String::new(),
            rate_limit_per_minute: None,
        }
    }

    #[test]
    fn each_token_scope_and_role_may_do_exactly_its_share() {
        use Capability as C;
        let cluster = ClusterId::from_uuid(Uuid::nil());
        let all = [
            C::ReadLedger,
            C::ManagePolicy,
            C::Close,
            C::DisputeParticipate,
            C::DisputeResolve,
            C::CreditApprove,
            C::Administer,
            C::Ingest,
            C::Join,
        ];
        let allowed = |p: &Principal| all.iter().copied().filter(|c| p.may(*c)).collect::<Vec<_>>();
        assert_eq!(allowed(&token(Scope::Admin)).len(), 6);
        // Separation of duties: no token scope both decides disputes and approves their credits (a finance
        // person may do both, but never on the same dispute: see disputes::credits::decide_credit).
        for scope in [Scope::Admin, Scope::export(), Scope::Agent { cluster }, Scope::Join { cluster }] {
            let p = token(scope);
            assert!(!(p.may(C::DisputeResolve) && p.may(C::CreditApprove)), "{:?} holds both duties", p.actor);
        }
        assert_eq!(allowed(&token(Scope::export())), [C::ReadLedger]);
        assert_eq!(allowed(&token(Scope::Agent { cluster })), [C::Ingest]);
        assert_eq!(allowed(&token(Scope::Join { cluster })), [C::Join]);
        assert_eq!(allowed(&user(&[Role::Viewer])), [C::ReadLedger]);
        assert_eq!(allowed(&user(&[Role::DepartmentManager])), [C::ReadLedger, C::DisputeParticipate]);
        assert!(user(&[Role::Finance]).may(C::CreditApprove) && !user(&[Role::Finance]).may(C::Administer));
        assert!(user(&[Role::Admin]).may(C::Administer) && !user(&[Role::Admin]).may(C::CreditApprove));
        assert!(
            matches!(token(Scope::export()).require(C::Close), Err(AppError::Forbidden(m)) if m.contains("finance"))
        );
        assert_eq!(token(Scope::Admin).actor(), format!("token:{}", Uuid::nil()));
        assert_eq!(user(&[Role::Viewer]).actor(), "user:ada@example.test");
        let dept = DepartmentId::from_uuid(Uuid::from_u128(7));
        let limited = token(Scope::Export { departments: vec![dept] });
        assert_eq!(limited.departments, Some(vec![dept]));
        assert!(limited.sees_department(dept) && !limited.sees_department(DepartmentId::from_uuid(Uuid::nil())));
    }

    #[test]
    fn tokens_come_as_bearer_or_as_the_basic_password() {
        assert_eq!(presented_token("Bearer glt_x ").as_deref(), Some("glt_x"));
        let basic = base64::engine::general_purpose::STANDARD.encode("powerbi:glt_y");
        assert_eq!(presented_token(&format!("Basic {basic}")).as_deref(), Some("glt_y"));
        assert_eq!(presented_token("Basic !!!"), None);
        assert_eq!(presented_token("Digest abc"), None);
    }

    #[test]
    fn parse_takes_the_org_and_rejects_malformed_tokens() {
        let org = Uuid::new_v4();
        let token = format!("glt_{}_{}", org.simple(), "ab".repeat(32));
        assert_eq!(parse(&token), Some(OrgId::from_uuid(org)));
        assert_eq!(parse(&format!("glt_{}_{}", org.simple(), "zz".repeat(32))), None);
        assert_eq!(parse(&format!("glt_{}_{}", org.simple(), "ab")), None);
        assert_eq!(parse("Bearer nonsense"), None);
        assert_eq!(parse(&format!("glt_notauuid_{}", "ab".repeat(32))), None);
    }
}
