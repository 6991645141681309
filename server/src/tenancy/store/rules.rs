//! Namespace rules: an exact name or a prefix that gives a tenant to namespaces without labels.

use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// A new rule's stored columns.
pub(crate) struct NewRule<'a> {
    /// Its id.
    pub rule_id: Uuid,
    /// The cluster it is limited to (`None`: organization-wide).
    pub cluster: Option<Uuid>,
    /// `exact` or `prefix`.
    pub match_kind: &'a str,
    /// The name or prefix.
    pub pattern: &'a str,
    /// The tenant it gives.
    pub tenant: Uuid,
    /// Its start.
    pub valid_from: OffsetDateTime,
    /// Who added it.
    pub created_by: &'a str,
}

/// Inserts a namespace rule.
pub(crate) async fn insert_rule(tx: &mut OrgTx, r: &NewRule<'_>) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO namespace_rules (org_id, rule_id, cluster_id, match, pattern, tenant_id, valid_from, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(org)
    .bind(r.rule_id)
    .bind(r.cluster)
    .bind(r.match_kind)
    .bind(r.pattern)
    .bind(r.tenant)
    .bind(r.valid_from)
    .bind(r.created_by)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The namespaces (of `cluster`, or any) whose name matches `pattern` as `match_kind` says.
pub(crate) async fn namespaces_matching(
    tx: &mut OrgTx,
    cluster: Option<Uuid>,
    match_kind: &str,
    pattern: &str,
) -> Result<Vec<Uuid>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "SELECT namespace_uid FROM namespaces
          WHERE org_id = $1 AND ($2::uuid IS NULL OR cluster_id = $2)
            AND (($3 = 'exact' AND name = $4) OR ($3 = 'prefix' AND starts_with(name, $4)))",
    )
    .bind(org)
    .bind(cluster)
    .bind(match_kind)
    .bind(pattern)
    .fetch_all(tx.conn())
    .await?)
}

/// Ends at `from` what rules gave `namespaces` from before `from`.
pub(crate) async fn end_rule_ownership(
    tx: &mut OrgTx,
    namespaces: &[Uuid],
    from: OffsetDateTime,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE namespace_ownership SET valid_to = $2
          WHERE namespace_uid = ANY($1) AND source = 'rule' AND valid_from < $2 AND (valid_to IS NULL OR valid_to > $2)
            AND org_id = $3",
    )
    .bind(namespaces)
    .bind(from)
    .bind(org)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A rule as stored: (ID, cluster name, match, pattern, tenant name, start, end).
pub(crate) type RuleRow = (Uuid, Option<String>, String, String, String, OffsetDateTime, Option<OffsetDateTime>);

/// Every namespace rule, by pattern, match, cluster and start.
pub(crate) async fn rules(tx: &mut OrgTx) -> Result<Vec<RuleRow>, DbError> {
    Ok(sqlx::query_as(
        "SELECT r.rule_id, c.name, r.match, r.pattern, t.name, r.valid_from, r.valid_to
           FROM namespace_rules r
           JOIN tenants t ON t.org_id = r.org_id AND t.tenant_id = r.tenant_id
           LEFT JOIN clusters c ON c.org_id = r.org_id AND c.cluster_id = r.cluster_id
          WHERE r.org_id = $1 ORDER BY r.pattern, r.match, c.name NULLS FIRST, r.valid_from",
    )
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}
