//! The access feature's SQL: the organization's provider settings, role mappings, API tokens as admins see them,
//! and the audit log's pages.

use sqlx::types::Text;
use time::OffsetDateTime;
use uuid::Uuid;

use gpuledger_api::auth::RoleName;

use crate::db::{DbError, OrgTx};

/// Whether `tx`'s organization is a demo one without a configured provider (`None`: no such organization).
pub(crate) async fn demo_login_on(tx: &mut OrgTx) -> Result<Option<bool>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "SELECT o.demo_login AND NOT EXISTS (SELECT 1 FROM idp_settings i WHERE i.org_id = $1)
           FROM organizations o WHERE o.org_id = $1",
    )
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// The department a demo manager gets: Research when there is one, else the first by name.
pub(crate) async fn demo_manager_department(tx: &mut OrgTx) -> Result<Option<Uuid>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "SELECT department_id FROM departments WHERE org_id = $1 ORDER BY (name = 'Research') DESC, name LIMIT 1",
    )
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// (slug, name) of the organization `tx` sees.
pub(crate) async fn organization(tx: &mut OrgTx) -> Result<(String, String), DbError> {
    Ok(sqlx::query_as("SELECT slug, name FROM organizations").fetch_one(tx.conn()).await?)
}

/// The slug of the organization `tx` sees.
pub(crate) async fn organization_slug(tx: &mut OrgTx) -> Result<String, DbError> {
    Ok(sqlx::query_scalar("SELECT slug FROM organizations").fetch_one(tx.conn()).await?)
}

/// Names of the departments `tx` sees, sorted.
pub(crate) async fn department_names(tx: &mut OrgTx) -> Result<Vec<String>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT name FROM departments WHERE org_id = $1 ORDER BY name")
        .bind(org)
        .fetch_all(tx.conn())
        .await?)
}

/// The id of the department named `name`, if any.
pub(crate) async fn department_by_name(tx: &mut OrgTx, name: &str) -> Result<Option<Uuid>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT department_id FROM departments WHERE org_id = $2 AND name = $1")
        .bind(name)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// The stored client secret of the organization's provider, if one is configured.
pub(crate) async fn stored_client_secret(tx: &mut OrgTx) -> Result<Option<String>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT client_secret FROM idp_settings WHERE org_id = $1")
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// A provider's settings as written.
pub(crate) struct ProviderRow<'a> {
    /// The issuer URL.
    pub issuer: &'a str,
    /// The client id.
    pub client_id: &'a str,
    /// The client secret (or the mounted-secret marker).
    pub client_secret: &'a str,
    /// The groups claim.
    pub groups_claim: &'a str,
    /// Requested scopes.
    pub scopes: &'a str,
    /// Who saved them.
    pub updated_by: String,
}

/// Inserts or replaces the organization's provider settings.
pub(crate) async fn upsert_provider(tx: &mut OrgTx, row: &ProviderRow<'_>) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO idp_settings (org_id, issuer, client_id, client_secret, groups_claim, scopes, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (org_id) DO UPDATE SET issuer = EXCLUDED.issuer, client_id = EXCLUDED.client_id,
             client_secret = EXCLUDED.client_secret, groups_claim = EXCLUDED.groups_claim, scopes = EXCLUDED.scopes,
             updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by",
    )
    .bind(org)
    .bind(row.issuer)
    .bind(row.client_id)
    .bind(row.client_secret)
    .bind(row.groups_claim)
    .bind(row.scopes)
    .bind(&row.updated_by)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Deletes the organization's provider settings; the number of rows removed.
pub(crate) async fn delete_provider(tx: &mut OrgTx) -> Result<u64, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query("DELETE FROM idp_settings WHERE org_id = $1").bind(org).execute(tx.conn()).await?.rows_affected())
}

/// (group, role, department name) of every role mapping, by group, role and department.
pub(crate) async fn role_mappings(tx: &mut OrgTx) -> Result<Vec<(String, Text<RoleName>, Option<String>)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT m.group_name, m.role, d.name FROM role_mappings m
           LEFT JOIN departments d ON d.org_id = m.org_id AND d.department_id = m.department_id
          WHERE m.org_id = $1
          ORDER BY m.group_name, m.role, d.name",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// Deletes every role mapping of the organization.
pub(crate) async fn delete_role_mappings(tx: &mut OrgTx) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query("DELETE FROM role_mappings WHERE org_id = $1").bind(org).execute(tx.conn()).await?;
    Ok(())
}

/// Inserts one role mapping (a duplicate is skipped).
pub(crate) async fn insert_role_mapping(
    tx: &mut OrgTx,
    group: &str,
    role: &str,
    department: Option<Uuid>,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO role_mappings (org_id, mapping_id, group_name, role, department_id) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(group)
    .bind(role)
    .bind(department)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// One audit-log row: (at, actor, action, target, reason, details, source, count, first at).
pub(crate) type AuditRow =
    (OffsetDateTime, String, String, String, String, serde_json::Value, String, i64, Option<OffsetDateTime>);

/// A page of the audit log, newest first: records before `before` (of `action` when set, none of `exclude`), and
/// when `fold_token_use`, one row per token and UTC day of its `token.use` records, with their count.
pub(crate) async fn audit_page(
    tx: &mut OrgTx,
    before: Option<OffsetDateTime>,
    action: Option<&str>,
    exclude: &[String],
    fold_token_use: bool,
    limit: i64,
) -> Result<Vec<AuditRow>, DbError> {
    let org = tx.org().as_uuid();
    // A folded day is one row at its latest use, counted over the whole day: it comes once, on the page where that
    // latest use falls (a day whose latest use is at or after `before` was on an earlier page), never split by the
    // cursor.
    Ok(sqlx::query_as(
        "SELECT at, actor, action, target, reason, details, source, 1::bigint, NULL::timestamptz FROM audit_log
          WHERE org_id = $4 AND ($1::timestamptz IS NULL OR at < $1) AND ($2::text IS NULL OR action = $2)
            AND action <> ALL($5)
         UNION ALL
         SELECT max(at), actor, 'token.use', target, '', '{}'::jsonb, max(source), count(*), min(at) FROM audit_log
          WHERE org_id = $4 AND $6 AND action = 'token.use'
            AND ($1::timestamptz IS NULL
                 OR at < (date_trunc('day', $1::timestamptz AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC')
          GROUP BY actor, target, date_trunc('day', at AT TIME ZONE 'UTC')
          HAVING $1::timestamptz IS NULL OR max(at) < $1
         ORDER BY 1 DESC, 2, 4 LIMIT $3",
    )
    .bind(before)
    .bind(action)
    .bind(limit)
    .bind(org)
    .bind(exclude)
    .bind(fold_token_use)
    .fetch_all(tx.conn())
    .await?)
}

/// A token as admins see it (never its secret), as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenInfo {
    /// Id.
    pub token_id: Uuid,
    /// What it is for.
    pub name: String,
    /// admin, export, agent, join (an unknown one from the database fails the query).
    pub scope: sqlx::types::Text<gpuledger_api::states::TokenScope>,
    /// The cluster of agent and join tokens.
    pub cluster: Option<String>,
    /// Departments of a limited export token.
    pub departments: Vec<String>,
    /// Who made it.
    pub created_by: String,
    /// When.
    pub created_at: OffsetDateTime,
    /// Expiry, if any.
    pub expires_at: Option<OffsetDateTime>,
    /// Last use (to the minute).
    pub last_used_at: Option<OffsetDateTime>,
    /// Revocation time, if revoked.
    pub revoked_at: Option<OffsetDateTime>,
}

/// Every token of the organization, newest first.
pub async fn list_tokens(tx: &mut OrgTx) -> Result<Vec<TokenInfo>, crate::error::AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT t.token_id, t.name, t.scope, c.name AS cluster,
                ARRAY(SELECT d.name FROM departments d
                       WHERE d.org_id = $1 AND d.department_id = ANY(t.department_ids) ORDER BY d.name) AS departments,
                t.created_by, t.created_at, t.expires_at, t.last_used_at, t.revoked_at
           FROM api_tokens t LEFT JOIN clusters c ON c.org_id = t.org_id AND c.cluster_id = t.cluster_id
          WHERE t.org_id = $1
          ORDER BY t.created_at DESC, t.token_id",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// The revocation time of token `token_id` (`None`: no such token; `Some(None)`: live).
pub(crate) async fn token_revoked_at(
    tx: &mut OrgTx,
    token_id: Uuid,
) -> Result<Option<Option<OffsetDateTime>>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT revoked_at FROM api_tokens WHERE org_id = $2 AND token_id = $1")
        .bind(token_id)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// Revokes token `token_id` now, by `revoked_by`.
pub(crate) async fn revoke_token(tx: &mut OrgTx, token_id: Uuid, revoked_by: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query("UPDATE api_tokens SET revoked_at = now(), revoked_by = $2 WHERE org_id = $3 AND token_id = $1")
        .bind(token_id)
        .bind(revoked_by)
        .bind(org)
        .execute(tx.conn())
        .await?;
    Ok(())
}
