//! Machine credentials: scoped API tokens, stored as SHA-256 hashes, shown once at creation.
//!
//! A token reads `glt_<org id, 32 hex>_<secret, 64 hex>`. The organization part lets the server open the right
//! organization-scoped transaction before looking the hash up, so verifying a token never looks across
//! organizations. Human login (OIDC) comes with the identity work.

use axum::http::{HeaderMap, header};
use gpuledger_core::ids::{ClusterId, OrgId};
use rand::Rng;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{
    db::{Database, DbError, OrgTx},
    error::AppError,
};

/// What a token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Everything in its organization.
    Admin,
    /// Read-only exports (Power BI).
    Export,
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
    fn db_name(&self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Export => "export",
            Self::Agent { .. } => "agent",
            Self::Join { .. } => "join",
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Its organization.
    pub org: OrgId,
    /// The token used.
    pub token_id: Uuid,
    /// What it may do.
    pub scope: Scope,
}

impl Principal {
    /// Who did it, as written in audit trails and dispute histories. Humans (OIDC) come later; this is the one
    /// place that changes then.
    pub fn actor(&self) -> String {
        format!("token:{}", self.token_id)
    }
}

fn sha256(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// Splits a presented token into its organization and the whole token (what is hashed).
fn parse(token: &str) -> Option<OrgId> {
    let rest = token.strip_prefix("glt_")?;
    let (org, secret) = rest.split_once('_')?;
    if secret.len() != 64 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Uuid::try_parse(org).ok().map(OrgId::from_uuid)
}

/// Authenticates the `Authorization: Bearer …` header.
pub async fn authenticate(db: &Database, headers: &HeaderMap) -> Result<Principal, AppError> {
    let value = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).ok_or(AppError::Unauthorized)?;
    let token = value.strip_prefix("Bearer ").ok_or(AppError::Unauthorized)?.trim();
    let org = parse(token).ok_or(AppError::Unauthorized)?;
    let mut tx = db.begin_org(org).await?;
    // `last_used_at` is kept to the minute: a write (and its WAL flush) on every request would double the commit
    // cost of each ingest batch, which is already one transaction of its own.
    let row: Option<(Uuid, String, Option<Uuid>)> = sqlx::query_as(
        "WITH t AS (
            SELECT token_id, scope, cluster_id, last_used_at FROM api_tokens
             WHERE secret_sha256 = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())),
         touched AS (
                        UPDATE api_tokens SET last_used_at = now()
             WHERE token_id IN (SELECT token_id FROM t
                                 WHERE last_used_at IS NULL OR last_used_at < now() - interval '1 minute'))
         SELECT token_id, scope, cluster_id FROM t",
    )
    .bind(sha256(token))
    .fetch_optional(tx.conn())
    .await?;
    tx.commit().await?;
    let (token_id, scope, cluster) = row.ok_or(AppError::Unauthorized)?;
    let scope = match (scope.as_str(), cluster) {
        ("admin", _) => Scope::Admin,
        ("export", _) => Scope::Export,
        ("agent", Some(c)) => Scope::Agent { cluster: ClusterId::from_uuid(c) },
        ("join", Some(c)) => Scope::Join { cluster: ClusterId::from_uuid(c) },
        _ => return Err(AppError::Unauthorized),
    };
    Ok(Principal { org, token_id, scope })
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
) -> Result<(Uuid, String), DbError> {
    let secret: [u8; 32] = rand::rng().random();
    let token = format!("glt_{}_{}", tx.org().as_uuid().simple(), hex::encode(secret));
    let token_id = Uuid::new_v4();
    let cluster = match scope {
        Scope::Agent { cluster } | Scope::Join { cluster } => Some(cluster.as_uuid()),
        _ => None,
    };
    let expires_at = matches!(scope, Scope::Join { .. }).then(|| time::OffsetDateTime::now_utc() + JOIN_TOKEN_TTL);
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO api_tokens (org_id, token_id, scope, cluster_id, name, secret_sha256, created_by, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(org)
    .bind(token_id)
    .bind(scope.db_name())
    .bind(cluster)
    .bind(name)
    .bind(sha256(&token))
    .bind(created_by)
    .bind(expires_at)
    .execute(tx.conn())
    .await?;
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, details)
         VALUES ($1, $2, $3, 'token.create', $4, jsonb_build_object('scope', $5::text, 'cluster_id', $6::uuid, 'name', $7::text))",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(created_by)
    .bind(token_id.to_string())
    .bind(scope.db_name())
    .bind(cluster)
    .bind(name)
    .execute(tx.conn())
    .await?;
    Ok((token_id, token))
}

/// Exchanges a join token (single use: it is revoked in the same transaction) for an agent credential of its
/// cluster. Returns the new token and the cluster's name.
pub async fn redeem_join_token(db: &Database, principal: &Principal) -> Result<(String, String), AppError> {
    let Scope::Join { cluster } = principal.scope else {
        return Err(AppError::Forbidden("only a join token can be exchanged".into()));
    };
    let mut tx = db.begin_org(principal.org).await?;
    // Single use even under concurrency: only one exchange can flip revoked_at.
    let revoked = sqlx::query("UPDATE api_tokens SET revoked_at = now() WHERE token_id = $1 AND revoked_at IS NULL")
        .bind(principal.token_id)
        .execute(tx.conn())
        .await?;
    if revoked.rows_affected() != 1 {
        return Err(AppError::Unauthorized);
    }
    let name: String = sqlx::query_scalar("SELECT name FROM clusters WHERE cluster_id = $1")
        .bind(cluster.as_uuid())
        .fetch_one(tx.conn())
        .await?;
    let (_, token) = create_token(&mut tx, &Scope::Agent { cluster }, &format!("joined {name}"), "join").await?;
    tx.commit().await?;
    Ok((token, name))
}

/// `POST /api/v1/agents/join`: a join token in, the cluster credential out.
pub fn router() -> axum::Router<crate::app::AppState> {
    axum::Router::new().route("/api/v1/agents/join", axum::routing::post(join))
}

async fn join(
    axum::extract::State(state): axum::extract::State<crate::app::AppState>,
    headers: HeaderMap,
) -> Result<axum::Json<serde_json::Value>, AppError> {
    let principal = authenticate(&state.db, &headers).await?;
    let (token, cluster) = redeem_join_token(&state.db, &principal).await?;
    Ok(axum::Json(serde_json::json!({ "token": token, "cluster": cluster })))
}

/// Finds a cluster by name in `tx`'s organization, registering it when new.
pub async fn ensure_cluster(tx: &mut OrgTx, name: &str) -> Result<(ClusterId, bool), DbError> {
    let existing: Option<Uuid> = sqlx::query_scalar("SELECT cluster_id FROM clusters WHERE name = $1")
        .bind(name)
        .fetch_optional(tx.conn())
        .await?;
    if let Some(id) = existing {
        return Ok((ClusterId::from_uuid(id), false));
    }
    let id = Uuid::new_v4();
    let org = tx.org().as_uuid();
    sqlx::query("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, $3)")
        .bind(org)
        .bind(id)
        .bind(name)
        .execute(tx.conn())
        .await?;
    Ok((ClusterId::from_uuid(id), true))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

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
