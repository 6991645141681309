//! An organization's standing as its credentials meet it (suspended or not, its API request rate), and the SQL of
//! credentials: API tokens, browser sessions, pending OIDC sign-ins, users and their role mappings.

use gpuledger_core::ids::OrgId;
use uuid::Uuid;

use crate::{
    db::{DbError, OrgTx},
    error::AppError,
};

/// (slug, state) of `tx`'s organization, if it exists.
pub(crate) async fn state(tx: &mut OrgTx) -> Result<Option<(String, String)>, AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as("SELECT slug, state FROM organizations WHERE org_id = $1")
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// Counts one API request of `org` against its operator-set rate limit (a fixed one-minute window per organization,
/// in this process's memory: with N replicas an organization may get up to N × the limit, like the sign-in limits).
pub fn check_rate(org: OrgId, per_minute: i32) -> Result<(), AppError> {
    use std::{
        collections::HashMap,
        sync::{Mutex, OnceLock, PoisonError},
        time::{Duration, Instant},
    };
    const WINDOW: Duration = Duration::from_secs(60);
    static COUNTS: OnceLock<Mutex<HashMap<OrgId, (Instant, u32)>>> = OnceLock::new();
    let now = Instant::now();
    let mut counts = COUNTS.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if counts.len() > 100_000 {
        counts.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
    }
    let entry = counts.entry(org).or_insert((now, 0));
    if now.duration_since(entry.0) >= WINDOW {
        *entry = (now, 0);
    }
    entry.1 = entry.1.saturating_add(1);
    let limit = u32::try_from(per_minute.max(1)).unwrap_or(1);
    if entry.1 > limit {
        let wait = WINDOW.saturating_sub(now.duration_since(entry.0)).as_secs().max(1);
        return Err(AppError::LimitReached {
            detail: format!(
                "API rate limit reached: this organization may make {limit} requests per minute \
                 (rate_limit_per_minute, set by its operator); try again in {wait} s"
            ),
            retry_after: wait,
        });
    }
    Ok(())
}

/// Refuses (403, naming the suspension) when `tx`'s organization is suspended: sign-in and setup links check it.
pub async fn ensure_active(tx: &mut OrgTx) -> Result<(), AppError> {
    match state(tx).await? {
        Some((slug, state)) if state != "active" => Err(AppError::Suspended(slug)),
        _ => Ok(()),
    }
}

/// The error for a credential of a suspended organization, when it is one (`None`: the organization is active or
/// unknown, so the credential was simply not valid).
pub async fn suspension(tx: &mut OrgTx) -> Result<Option<AppError>, AppError> {
    Ok(ensure_active(tx).await.err().filter(|e| matches!(e, AppError::Suspended(_))))
}

/// (department ids, tenant ids) that `tx`'s scope lets it see.
pub(crate) async fn visible_ids(tx: &mut OrgTx) -> Result<(Vec<Uuid>, Vec<Uuid>), DbError> {
    let org = tx.org().as_uuid();
    let departments: Vec<Uuid> = sqlx::query_scalar("SELECT department_id FROM departments WHERE org_id = $1")
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
    let tenants: Vec<Uuid> =
        sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE org_id = $1").bind(org).fetch_all(tx.conn()).await?;
    Ok((departments, tenants))
}

/// A live token found by its hash: (token id, scope, cluster, departments, the organization's API rate limit,
/// whether its last use is a minute old).
pub(crate) type FoundToken = (Uuid, String, Option<Uuid>, Vec<Uuid>, Option<i32>, bool);

/// The live token of `tx`'s (active) organization whose secret hashes to `secret_sha256`.
pub(crate) async fn live_token(tx: &mut OrgTx, secret_sha256: Vec<u8>) -> Result<Option<FoundToken>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT t.token_id, t.scope, t.cluster_id, t.department_ids, o.rate_limit_per_minute,
                t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute'
           FROM api_tokens t JOIN organizations o ON o.org_id = t.org_id
          WHERE t.org_id = $2 AND o.org_id = $2 AND t.secret_sha256 = $1 AND t.revoked_at IS NULL
            AND (t.expires_at IS NULL OR t.expires_at > now()) AND o.state = 'active'",
    )
    .bind(secret_sha256)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// Records the token's use now unless it was recorded within the minute (checked under the row's lock); `Some`
/// when this call wrote it.
pub(crate) async fn touch_token_use(tx: &mut OrgTx, token_id: Uuid) -> Result<Option<Uuid>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "UPDATE api_tokens SET last_used_at = now()
          WHERE org_id = $1 AND token_id = $2 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
         RETURNING token_id",
    )
    .bind(org)
    .bind(token_id)
    .fetch_optional(tx.conn())
    .await?)
}

/// Writes the `token.use` audit record of `token_id`, from `source`.
pub(crate) async fn insert_token_use_audit(tx: &mut OrgTx, token_id: Uuid, source: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, source)
                 VALUES ($1, gen_random_uuid(), $2, 'token.use', $3, $4)",
    )
    .bind(org)
    .bind(format!("token:{token_id}"))
    .bind(token_id.to_string())
    .bind(source)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Whether `tx`'s organization exists.
pub(crate) async fn org_exists(tx: &mut OrgTx) -> Result<bool, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM organizations WHERE org_id = $1)")
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// Writes the `token.refused` audit record of a token naming `tx`'s organization that is not one of its live ones.
pub(crate) async fn insert_token_refused_audit(tx: &mut OrgTx, source: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, source, reason)
                 VALUES ($1, gen_random_uuid(), 'anonymous', 'token.refused', '', $2,
                         'a token naming this organization is not one of its live tokens (forged, revoked or expired)')",
    )
    .bind(org)
    .bind(source)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A new API token's stored columns.
pub(crate) struct NewToken<'a> {
    /// Its id.
    pub token_id: Uuid,
    /// The scope's stored name.
    pub scope: &'a str,
    /// The cluster of an agent or join token.
    pub cluster: Option<Uuid>,
    /// Its name.
    pub name: &'a str,
    /// SHA-256 of the whole token.
    pub secret_sha256: Vec<u8>,
    /// Who created it.
    pub created_by: &'a str,
    /// When it expires, if ever.
    pub expires_at: Option<time::OffsetDateTime>,
    /// An export token's departments.
    pub departments: &'a [Uuid],
}

/// Inserts `token` into `tx`'s organization.
pub(crate) async fn insert_token(tx: &mut OrgTx, token: &NewToken<'_>) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO api_tokens (org_id, token_id, scope, cluster_id, name, secret_sha256, created_by, expires_at,
                                 department_ids)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(org)
    .bind(token.token_id)
    .bind(token.scope)
    .bind(token.cluster)
    .bind(token.name)
    .bind(&token.secret_sha256)
    .bind(token.created_by)
    .bind(token.expires_at)
    .bind(token.departments)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Writes the `token.create` audit record of `token`.
pub(crate) async fn insert_token_create_audit(tx: &mut OrgTx, token: &NewToken<'_>) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, details)
         VALUES ($1, $2, $3, 'token.create', $4, jsonb_build_object('scope', $5::text, 'cluster_id', $6::uuid,
                 'name', $7::text, 'departments', $8::uuid[], 'expires_at', $9::timestamptz))",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(token.created_by)
    .bind(token.token_id.to_string())
    .bind(token.scope)
    .bind(token.cluster)
    .bind(token.name)
    .bind(token.departments)
    .bind(token.expires_at)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Revokes `token_id` unless it already is; the number of rows changed (0 or 1).
pub(crate) async fn revoke_unrevoked_token(tx: &mut OrgTx, token_id: Uuid) -> Result<u64, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query(
        "UPDATE api_tokens SET revoked_at = now() WHERE org_id = $2 AND token_id = $1 AND revoked_at IS NULL",
    )
    .bind(token_id)
    .bind(org)
    .execute(tx.conn())
    .await?
    .rows_affected())
}

/// The name of cluster `cluster`.
pub(crate) async fn cluster_name(tx: &mut OrgTx, cluster: Uuid) -> Result<String, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT name FROM clusters WHERE org_id = $2 AND cluster_id = $1")
        .bind(cluster)
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// The id of the cluster named `name`, if registered.
pub(crate) async fn cluster_by_name(tx: &mut OrgTx, name: &str) -> Result<Option<Uuid>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT cluster_id FROM clusters WHERE org_id = $2 AND name = $1")
        .bind(name)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// Registers cluster `id` named `name`.
pub(crate) async fn insert_cluster(tx: &mut OrgTx, id: Uuid, name: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, $3)")
        .bind(org)
        .bind(id)
        .bind(name)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// The organization's provider settings as stored, with its slug.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct IdpRow {
    /// The issuer URL.
    pub issuer: String,
    /// The client id.
    pub client_id: String,
    /// The stored client secret.
    pub client_secret: String,
    /// The groups claim.
    pub groups_claim: String,
    /// Requested scopes.
    pub scopes: String,
    /// The organization's slug (names its mounted secret file).
    pub slug: String,
}

/// `tx`'s organization's provider settings, if any.
pub(crate) async fn idp_settings(tx: &mut OrgTx) -> Result<Option<IdpRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT i.issuer, i.client_id, i.client_secret, i.groups_claim, i.scopes, o.slug
           FROM idp_settings i JOIN organizations o ON o.org_id = i.org_id
          WHERE i.org_id = $1",
    )
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// Records a pending sign-in against the hash of its cookie.
pub(crate) async fn insert_pending_login(
    tx: &mut OrgTx,
    secret_sha256: Vec<u8>,
    state: &str,
    nonce: &str,
    pkce_verifier: &str,
    return_to: &str,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO oidc_logins (org_id, login_id, secret_sha256, state, nonce, pkce_verifier, return_to)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(secret_sha256)
    .bind(state)
    .bind(nonce)
    .bind(pkce_verifier)
    .bind(return_to)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Marks the pending sign-in of `secret_sha256` consumed, when it is unused and under ten minutes old; its
/// (state, nonce, verifier, return_to).
pub(crate) async fn consume_pending_login(
    tx: &mut OrgTx,
    secret_sha256: Vec<u8>,
) -> Result<Option<(String, String, String, String)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "UPDATE oidc_logins SET consumed_at = now()
          WHERE org_id = $2 AND secret_sha256 = $1 AND consumed_at IS NULL
            AND created_at > now() - interval '10 minutes'
          RETURNING state, nonce, pkce_verifier, return_to",
    )
    .bind(secret_sha256)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// Whether a sign-in with cookie hash `secret_sha256` was ever recorded (used up or expired included).
pub(crate) async fn pending_login_exists(tx: &mut OrgTx, secret_sha256: Vec<u8>) -> Result<bool, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM oidc_logins WHERE org_id = $2 AND secret_sha256 = $1)")
        .bind(secret_sha256)
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// (role, department) of every role mapping of these groups.
pub(crate) async fn role_mappings_of_groups(
    tx: &mut OrgTx,
    groups: &[String],
) -> Result<Vec<(String, Option<Uuid>)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT role, department_id FROM role_mappings WHERE org_id = $2 AND group_name = ANY($1) ORDER BY role",
    )
    .bind(groups)
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// Creates or updates the user of a subject; returns its id.
pub async fn upsert_user(tx: &mut OrgTx, subject: &str, email: Option<&str>, name: &str) -> Result<Uuid, DbError> {
    let org = tx.org().as_uuid();
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO users (org_id, user_id, oidc_subject, email, display_name, last_login_at)
         VALUES ($1, $2, $3, $4, $5, now())
         ON CONFLICT (org_id, oidc_subject) DO UPDATE
            SET email = EXCLUDED.email, display_name = EXCLUDED.display_name, last_login_at = EXCLUDED.last_login_at
         RETURNING user_id",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(subject)
    .bind(email)
    .bind(name)
    .fetch_one(tx.conn())
    .await?;
    Ok(id)
}

/// A new session's stored columns.
pub(crate) struct SessionRecord<'a> {
    /// SHA-256 of the cookie value.
    pub secret_sha256: Vec<u8>,
    /// The user.
    pub user_id: Uuid,
    /// Granted roles' stored names.
    pub roles: &'a [&'a str],
    /// Departments of the department-manager grants.
    pub departments: &'a [Uuid],
    /// The session's CSRF token.
    pub csrf: &'a str,
    /// The ID token, for RP-initiated logout.
    pub id_token_hint: &'a Option<String>,
    /// Client address.
    pub source: &'a str,
    /// Seconds until the absolute timeout.
    pub absolute_secs: f64,
    /// Seconds of the idle timeout.
    pub idle_secs: f64,
}

/// Inserts a session into `tx`'s organization.
pub(crate) async fn insert_session(tx: &mut OrgTx, s: &SessionRecord<'_>) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO sessions (org_id, session_id, secret_sha256, user_id, roles, department_ids, csrf_token,
                               id_token_hint, source, expires_at, idle_timeout)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now() + make_interval(secs => $10), make_interval(secs => $11))",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(&s.secret_sha256)
    .bind(s.user_id)
    .bind(s.roles)
    .bind(s.departments)
    .bind(s.csrf)
    .bind(s.id_token_hint)
    .bind(s.source)
    .bind(s.absolute_secs)
    .bind(s.idle_secs)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// (session id, user id, roles, departments, e-mail, subject, the organization's API rate limit) of a live session.
pub(crate) type SessionRow = (Uuid, Uuid, Vec<String>, Vec<Uuid>, Option<String>, String, Option<i32>);

/// The live session of cookie hash `secret_sha256` in `tx`'s (active) organization; its last use is recorded when
/// a minute old (the idle timeout is measured from it).
pub(crate) async fn live_session(tx: &mut OrgTx, secret_sha256: Vec<u8>) -> Result<Option<SessionRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "WITH s AS (
            SELECT s.session_id, s.user_id, s.roles, s.department_ids, s.last_seen_at, u.email, u.oidc_subject
              FROM sessions s JOIN users u ON u.org_id = s.org_id AND u.user_id = s.user_id
             WHERE s.org_id = $2 AND s.secret_sha256 = $1 AND s.ended_at IS NULL AND s.expires_at > now()
               AND s.last_seen_at > now() - s.idle_timeout
               AND EXISTS (SELECT 1 FROM organizations o WHERE o.org_id = $2 AND o.state = 'active')),
         touched AS (
            UPDATE sessions SET last_seen_at = now()
             WHERE org_id = $2
               AND session_id IN (SELECT session_id FROM s WHERE last_seen_at < now() - interval '1 minute'))
         SELECT session_id, user_id, roles, department_ids, email, oidc_subject,
                (SELECT o.rate_limit_per_minute FROM organizations o WHERE o.org_id = $2) FROM s",
    )
    .bind(secret_sha256)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// Ends the live session of cookie hash `secret_sha256`; `Some(its ID token)` when there was one.
pub(crate) async fn end_session(tx: &mut OrgTx, secret_sha256: Vec<u8>) -> Result<Option<Option<String>>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "UPDATE sessions SET ended_at = now()
          WHERE org_id = $2 AND secret_sha256 = $1 AND ended_at IS NULL
          RETURNING id_token_hint",
    )
    .bind(secret_sha256)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}
