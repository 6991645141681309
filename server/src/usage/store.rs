//! SQL of the gateway's usage records and the endpoints' aliases.

use std::collections::HashMap;

use gpuledger_api::usage::AliasKind;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// The gateway-key and team aliases of `endpoints`: (endpoint, kind, alias) → tenant.
pub(super) async fn caller_aliases(
    tx: &mut OrgTx,
    org: Uuid,
    endpoints: &[&str],
) -> Result<HashMap<(String, String, String), Uuid>, DbError> {
    let rows = sqlx::query_as::<_, (String, String, String, Uuid)>(
        "SELECT endpoint, kind, alias, tenant_id FROM endpoint_aliases
          WHERE org_id = $1 AND endpoint = ANY($2) AND kind IN ('gateway_key', 'team')",
    )
    .bind(org)
    .bind(endpoints)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows.into_iter().map(|(e, k, a, t)| ((e, k, a), t)).collect())
}

/// The tenants named `names` or with IDs `ids`: (tenant, name, department).
pub(super) async fn tenants_named_or_with_ids(
    tx: &mut OrgTx,
    org: Uuid,
    names: &[&str],
    ids: &[Uuid],
) -> Result<Vec<(Uuid, String, Uuid)>, DbError> {
    let rows = sqlx::query_as(
        "SELECT tenant_id, name, department_id FROM tenants
          WHERE org_id = $1 AND (name = ANY($2) OR tenant_id = ANY($3))",
    )
    .bind(org)
    .bind(names)
    .bind(ids)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Usage records as columns, for one insert.
pub(super) struct RecordColumns {
    /// The sender's record IDs.
    pub(super) record_id: Vec<Option<String>>,
    /// Endpoints.
    pub(super) endpoint: Vec<Option<String>>,
    /// Models.
    pub(super) model: Vec<Option<String>>,
    /// Model versions.
    pub(super) model_version: Vec<Option<String>>,
    /// Tenant names as sent.
    pub(super) tenant: Vec<Option<String>>,
    /// Gateway keys.
    pub(super) gateway_key: Vec<Option<String>>,
    /// Teams.
    pub(super) team: Vec<Option<String>>,
    /// The tenants resolved.
    pub(super) tenant_ids: Vec<Option<Uuid>>,
    /// Their departments.
    pub(super) department_ids: Vec<Option<Uuid>>,
    /// Starts.
    pub(super) starts: Vec<OffsetDateTime>,
    /// Window ends.
    pub(super) ends: Vec<Option<OffsetDateTime>>,
    /// Requests.
    pub(super) requests: Vec<Option<i64>>,
    /// Input tokens.
    pub(super) input_tokens: Vec<Option<i64>>,
    /// Output tokens.
    pub(super) output_tokens: Vec<Option<i64>>,
    /// Statuses.
    pub(super) status: Vec<Option<String>>,
    /// Latencies.
    pub(super) latency_ms: Vec<Option<i64>>,
    /// Times to first token.
    pub(super) ttft_ms: Vec<Option<i64>>,
    /// Trace IDs.
    pub(super) trace_id: Vec<Option<String>>,
    /// Agent session IDs.
    pub(super) agent_session_id: Vec<Option<String>>,
}

/// Inserts the records new to the table and returns (record ID, tenant) of each inserted.
pub(super) async fn insert_records(
    tx: &mut OrgTx,
    org: Uuid,
    cluster_id: Uuid,
    r: &RecordColumns,
) -> Result<Vec<(String, Option<Uuid>)>, DbError> {
    use crate::bulk::{col, constant};
    crate::bulk::returning(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO usage_records (org_id, record_id, cluster_id, endpoint, model, model_version,
                           tenant_name, gateway_key, team, tenant_id, department_id, started_at, window_end, requests,
                           input_tokens, output_tokens, status, latency_ms, ttft_ms, trace_id, agent_session_id)",
            row: "$1, {0}, $2, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15},
                      {16}, {17}, {18}",
            consts: &[constant("uuid", &org), constant("uuid", &cluster_id)],
            cols: &[
                col("text", &r.record_id),
                col("text", &r.endpoint),
                col("text", &r.model),
                col("text", &r.model_version),
                col("text", &r.tenant),
                col("text", &r.gateway_key),
                col("text", &r.team),
                col("uuid", &r.tenant_ids),
                col("uuid", &r.department_ids),
                col("timestamptz", &r.starts),
                col("timestamptz", &r.ends),
                col("int8", &r.requests),
                col("int8", &r.input_tokens),
                col("int8", &r.output_tokens),
                col("text", &r.status),
                col("int8", &r.latency_ms),
                col("int8", &r.ttft_ms),
                col("text", &r.trace_id),
                col("text", &r.agent_session_id),
            ],
            tail: "ON CONFLICT (org_id, record_id) DO NOTHING RETURNING record_id, tenant_id",
        },
    )
    .await
}

/// The aliases of `endpoint` with their tenants' names: (kind, alias, tenant).
pub(super) async fn endpoint_aliases(
    tx: &mut OrgTx,
    org: Uuid,
    endpoint: &str,
) -> Result<Vec<(sqlx::types::Text<AliasKind>, String, String)>, DbError> {
    let rows = sqlx::query_as(
        "SELECT a.kind, a.alias, t.name FROM endpoint_aliases a JOIN tenants t USING (org_id, tenant_id)
          WHERE a.endpoint = $1 AND a.org_id = $2 ORDER BY a.kind, a.alias",
    )
    .bind(endpoint)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows)
}

/// Deletes the aliases of `endpoint`.
pub(super) async fn delete_aliases(tx: &mut OrgTx, org: Uuid, endpoint: &str) -> Result<(), DbError> {
    sqlx::query("DELETE FROM endpoint_aliases WHERE endpoint = $1 AND org_id = $2")
        .bind(endpoint)
        .bind(org)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// The tenant named `name_or_id` (or with that ID).
pub(super) async fn tenant_by_name_or_id(tx: &mut OrgTx, org: Uuid, name_or_id: &str) -> Result<Option<Uuid>, DbError> {
    let tenant: Option<Uuid> =
        sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE (name = $1 OR tenant_id::text = $1) AND org_id = $2")
            .bind(name_or_id)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    Ok(tenant)
}

/// Inserts an alias of `endpoint` for `tenant`.
pub(super) async fn insert_alias(
    tx: &mut OrgTx,
    org: Uuid,
    endpoint: &str,
    kind: &str,
    alias: &str,
    tenant: Uuid,
) -> Result<(), DbError> {
    sqlx::query("INSERT INTO endpoint_aliases (org_id, endpoint, kind, alias, tenant_id) VALUES ($1, $2, $3, $4, $5)")
        .bind(org)
        .bind(endpoint)
        .bind(kind)
        .bind(alias)
        .bind(tenant)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Attributes `endpoint`'s records kept without a tenant that its aliases now resolve; how many.
pub(super) async fn attribute_by_aliases(tx: &mut OrgTx, org: Uuid, endpoint: &str) -> Result<u64, DbError> {
    let attributed = sqlx::query(
        "UPDATE usage_records r SET tenant_id = a.tenant_id, department_id = t.department_id
           FROM endpoint_aliases a JOIN tenants t ON t.org_id = a.org_id AND t.tenant_id = a.tenant_id
          WHERE r.tenant_id IS NULL AND r.endpoint = $1 AND r.org_id = $2 AND a.org_id = r.org_id
            AND a.endpoint = r.endpoint
            AND ((a.kind = 'gateway_key' AND a.alias = r.gateway_key) OR (a.kind = 'team' AND a.alias = r.team))",
    )
    .bind(endpoint)
    .bind(org)
    .execute(tx.conn())
    .await?
    .rows_affected();
    Ok(attributed)
}
