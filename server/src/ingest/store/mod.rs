//! Ingest's SQL: the batch's cluster and agent contact, agent gaps, and (in submodules) the cluster's history and
//! allocation intervals.

pub(crate) mod history;
pub(crate) mod intervals;
pub(crate) mod measurements;

use std::collections::HashMap;

use gpuledger_core::ids::{ClusterId, OrgId};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// The registered cluster a credential names: (name, registered at, the organization's daily ingest limit).
pub(crate) async fn registered_cluster(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
) -> Result<Option<(String, OffsetDateTime, Option<i64>)>, DbError> {
    let registered = sqlx::query_as(
        "SELECT c.name, c.created_at, o.ingest_facts_per_day
           FROM clusters c JOIN organizations o ON o.org_id = c.org_id
          WHERE c.cluster_id = $1 AND c.org_id = $2",
    )
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    Ok(registered)
}

/// An agent's latest contact, as [`upsert_agent_contact`] records it.
pub(crate) struct AgentContact {
    /// `node` or `cluster`.
    pub(crate) mode: &'static str,
    /// The node agent's node (empty for the cluster agent).
    pub(crate) node: String,
    /// The agent's version.
    pub(crate) version: String,
    /// Facts in the batch.
    pub(crate) last_batch_facts: i32,
    /// Now minus the newest observation, in seconds.
    pub(crate) lag_seconds: Option<i64>,
    /// Facts still waiting in the spool.
    pub(crate) spool_pending_facts: Option<i64>,
    /// Bytes still waiting in the spool.
    pub(crate) spool_pending_bytes: Option<i64>,
    /// Facts the spool dropped.
    pub(crate) spool_dropped_facts: Option<i64>,
    /// The spool's size on disk.
    pub(crate) spool_disk_bytes: Option<i64>,
    /// The spool's limit.
    pub(crate) spool_max_bytes: Option<i64>,
}

/// Records agents' contacts with `cluster` (one row per agent, replaced), in one statement. The contacts are of
/// different agents (`mode`, `node`): a statement may not update one row twice.
pub(crate) async fn upsert_agent_contacts(
    tx: &mut OrgTx,
    cluster: ClusterId,
    contacts: &[AgentContact],
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    let cluster_id = cluster.as_uuid();
    let text = |f: fn(&AgentContact) -> &str| contacts.iter().map(f).collect::<Vec<&str>>();
    let big = |f: fn(&AgentContact) -> Option<i64>| contacts.iter().map(f).collect::<Vec<Option<i64>>>();
    let (mode, node, version) = (text(|c| c.mode), text(|c| &c.node), text(|c| &c.version));
    let facts: Vec<i32> = contacts.iter().map(|c| c.last_batch_facts).collect();
    let (lag, pending, pending_bytes) =
        (big(|c| c.lag_seconds), big(|c| c.spool_pending_facts), big(|c| c.spool_pending_bytes));
    let (dropped, disk, max) =
        (big(|c| c.spool_dropped_facts), big(|c| c.spool_disk_bytes), big(|c| c.spool_max_bytes));
    crate::bulk::execute(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO agent_contacts (org_id, cluster_id, mode, node, version, last_batch_facts, lag_seconds,
                    spool_pending_facts, spool_pending_bytes, spool_dropped_facts, spool_disk_bytes, spool_max_bytes)",
            row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}",
            consts: &[crate::bulk::constant("uuid", &org), crate::bulk::constant("uuid", &cluster_id)],
            cols: &[
                crate::bulk::col("text", &mode),
                crate::bulk::col("text", &node),
                crate::bulk::col("text", &version),
                crate::bulk::col("int", &facts),
                crate::bulk::col("bigint", &lag),
                crate::bulk::col("bigint", &pending),
                crate::bulk::col("bigint", &pending_bytes),
                crate::bulk::col("bigint", &dropped),
                crate::bulk::col("bigint", &disk),
                crate::bulk::col("bigint", &max),
            ],
            tail: "ON CONFLICT (org_id, cluster_id, mode, node) DO UPDATE
            SET version = EXCLUDED.version, last_seen_at = EXCLUDED.last_seen_at, last_batch_facts = EXCLUDED.last_batch_facts,
                lag_seconds = EXCLUDED.lag_seconds, spool_pending_facts = EXCLUDED.spool_pending_facts,
                spool_pending_bytes = EXCLUDED.spool_pending_bytes, spool_dropped_facts = EXCLUDED.spool_dropped_facts,
                spool_disk_bytes = EXCLUDED.spool_disk_bytes, spool_max_bytes = EXCLUDED.spool_max_bytes",
        },
    )
    .await?;
    Ok(())
}

/// Records an `agent_gap` finding (once per finding ID).
#[allow(clippy::too_many_arguments)] // one column each
pub(crate) async fn insert_agent_gap_finding(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    finding_id: &str,
    subject: &str,
    from: OffsetDateTime,
    to: OffsetDateTime,
    details: &Value,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO data_quality_findings
            (org_id, cluster_id, finding_id, kind, subject, occurred_from, occurred_to, details)
         VALUES ($1, $2, $3, 'agent_gap', $4, $5, $6, $7) ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(finding_id)
    .bind(subject)
    .bind(from)
    .bind(to)
    .bind(details)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The stored `gap_recovered` fact about gap `gap_event`, if one came first.
pub(crate) async fn gap_recovered_fact(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    gap_event: &str,
) -> Result<Option<(sqlx::types::Json<gpuledger_core::wire::Fact>,)>, DbError> {
    let stored = sqlx::query_as(
        "SELECT payload FROM allocation_events
          WHERE org_id = $1 AND cluster_id = $2 AND subject = $3 AND kind = 'gap_recovered' LIMIT 1",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(gap_event)
    .fetch_optional(tx.conn())
    .await?;
    Ok(stored)
}

/// The `agent_gap` findings of gap `gap` (its own, or its months' `<gap>@YYYY-MM`): (finding ID, details).
pub(crate) async fn agent_gap_findings(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    gap: &str,
) -> Result<Vec<(String, Value)>, DbError> {
    // Compared by prefix rather than LIKE, whose wildcards an event ID may contain.
    let findings = sqlx::query_as(
        "SELECT finding_id, details FROM data_quality_findings
          WHERE org_id = $1 AND cluster_id = $2 AND kind = 'agent_gap'
            AND (finding_id = $3 OR left(finding_id, length($3) + 1) = $3 || '@')",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(gap)
    .fetch_all(tx.conn())
    .await?;
    Ok(findings)
}

/// Replaces the details of `agent_gap` finding `finding_id`.
pub(crate) async fn update_agent_gap_details(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    finding_id: &str,
    details: &Value,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE data_quality_findings SET details = $4
          WHERE org_id = $1 AND cluster_id = $2 AND finding_id = $3 AND kind = 'agent_gap'",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(finding_id)
    .bind(details)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The IDs of the tenants among `names` that are defined.
pub(crate) async fn tenants_named(
    tx: &mut OrgTx,
    org: OrgId,
    names: &[&str],
) -> Result<HashMap<String, Uuid>, DbError> {
    let rows =
        sqlx::query_as::<_, (String, Uuid)>("SELECT name, tenant_id FROM tenants WHERE org_id = $1 AND name = ANY($2)")
            .bind(org.as_uuid())
            .bind(names)
            .fetch_all(tx.conn())
            .await?;
    Ok(rows.into_iter().collect())
}
