//! SQL of the month's lifecycle outside the close's computation: the lock (`open → closing`, and back on failure),
//! the list of periods, and the findings a month's page shows.

use gpuledger_api::{close::Finding, states::PeriodState};
use time::{Date, OffsetDateTime};

use crate::{db::OrgTx, error::AppError};

/// The number of data-quality findings by kind that touch `[from, to)`.
pub(crate) async fn finding_counts(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<(String, i64)>, AppError> {
    Ok(sqlx::query_as(
        "SELECT kind, count(*) FROM data_quality_findings
          WHERE org_id = $3
            AND COALESCE(occurred_from, created_at) < $2::timestamptz
            AND COALESCE(occurred_to, occurred_from, created_at) >= $1::timestamptz
          GROUP BY kind ORDER BY kind",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// The first 200 data-quality findings that touch `[from, to)`, newest first, each with how to fix it.
pub(crate) async fn findings(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<Finding>, AppError> {
    let items: Vec<(sqlx::types::Json<Finding>,)> = sqlx::query_as(
        "SELECT jsonb_build_object('cluster', c.name, 'kind', f.kind, 'subject', f.subject,
                'from', f.occurred_from, 'to', f.occurred_to, 'details', f.details,
                'fix', CASE f.kind
                    WHEN 'inventory_gap' THEN 'add the GPU model''s class or the profile''s fraction under Admin → Inventory; the allocation is recomputed'
                    WHEN 'unknown_tenant' THEN 'create the tenant under Admin → Inventory & tenancy, or correct the namespace''s label'
                    WHEN 'agent_gap' THEN CASE WHEN f.details->'recovered' = 'true'::jsonb
                        THEN 'nothing to do: every dropped fact that counts for money is stored (telemetry windows lost stay lost)'
                        ELSE 'the agent dropped data while the server was unreachable and it did not come back; see docs/agent.md (spool) and the agent''s logs; closing asks for an acknowledgement' END
                    WHEN 'overcommit' THEN 'check the node''s time-slicing or MIG declaration under Admin → Inventory'
                END)
           FROM data_quality_findings f JOIN clusters c ON c.org_id = f.org_id AND c.cluster_id = f.cluster_id
          WHERE f.org_id = $3
            AND COALESCE(f.occurred_from, f.created_at) < $2::timestamptz
            AND COALESCE(f.occurred_to, f.occurred_from, f.created_at) >= $1::timestamptz
          ORDER BY COALESCE(f.occurred_from, f.created_at) DESC, f.finding_id LIMIT 200",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?;
    Ok(items.into_iter().map(|(v,)| v.0).collect())
}

/// Allocations without a GPU class, grouped: (cluster name, GPU model or empty, sharing mode, how many, first start,
/// last end (`None`: one is still open), the first 20 named `namespace/holder (allocation ID)`).
pub(crate) type Unpriced = (String, String, String, i64, OffsetDateTime, Option<OffsetDateTime>, Vec<String>);

/// The allocations overlapping `[from, to)` that have no GPU class, by cluster, model and sharing mode (at most 200
/// groups, largest first).
pub(crate) async fn unpriced(
    tx: &mut OrgTx,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<Unpriced>, AppError> {
    Ok(sqlx::query_as(
        "SELECT c.name, COALESCE(a.gpu_model, ''), a.sharing_mode, count(*), min(a.started_at),
                CASE WHEN bool_or(a.ended_at IS NULL) THEN NULL ELSE max(a.ended_at) END,
                (array_agg(a.namespace || '/' || a.holder_name || ' (' || a.allocation_id || ')'
                           ORDER BY a.started_at, a.allocation_id))[1:20]
           FROM allocation_intervals a JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
          WHERE a.org_id = $3 AND a.gpu_class IS NULL
            AND a.started_at < $2::timestamptz
            AND (a.ended_at IS NULL OR a.ended_at > $1::timestamptz)
          GROUP BY c.name, a.gpu_model, a.sharing_mode ORDER BY count(*) DESC, c.name, 2 LIMIT 200",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// The latest closed month after the one starting `start` (first day), if any.
pub(crate) async fn later_closed(tx: &mut OrgTx, start: Date) -> Result<Option<Date>, AppError> {
    Ok(sqlx::query_scalar("SELECT max(period) FROM periods WHERE state = 'closed' AND period > $1 AND org_id = $2")
        .bind(start)
        .bind(tx.org().as_uuid())
        .fetch_one(tx.conn())
        .await?)
}

/// The database's clock `age` ago.
pub(crate) async fn database_time_ago(tx: &mut OrgTx, age: time::Duration) -> Result<OffsetDateTime, AppError> {
    Ok(sqlx::query_scalar("SELECT now() - $1::interval")
        .bind(format!("{} seconds", age.whole_seconds()))
        .fetch_one(tx.conn())
        .await?)
}

/// Moves the month starting `start` to `closing` for `actor` when it is open, or `closing` since before
/// `stale_before`; `None` when another holds it or it is closed.
pub(crate) async fn take_closing(
    tx: &mut OrgTx,
    start: Date,
    actor: &str,
    stale_before: OffsetDateTime,
) -> Result<Option<String>, AppError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO periods (org_id, period, state, closing_by, closing_since) VALUES ($1, $2, 'closing', $3, now())
         ON CONFLICT (org_id, period) DO UPDATE SET state = 'closing', closing_by = $3, closing_since = EXCLUDED.closing_since
          WHERE periods.state = 'open' OR (periods.state = 'closing' AND periods.closing_since < $4)
         RETURNING state",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .bind(actor)
    .bind(stale_before)
    .fetch_optional(tx.conn())
    .await?)
}

/// The state of the month starting `start`, who is closing it and since when.
pub(crate) async fn state_and_closer(
    tx: &mut OrgTx,
    start: Date,
) -> Result<(String, Option<String>, Option<OffsetDateTime>), AppError> {
    Ok(sqlx::query_as("SELECT state, closing_by, closing_since FROM periods WHERE period = $1 AND org_id = $2")
        .bind(start)
        .bind(tx.org().as_uuid())
        .fetch_one(tx.conn())
        .await?)
}

/// Moves the month starting `start` back from `closing` to `open` (a close that failed).
pub(crate) async fn reopen_closing(tx: &mut OrgTx, start: Date) -> Result<(), AppError> {
    sqlx::query(
        "UPDATE periods SET state = 'open', closing_by = NULL, closing_since = NULL
                      WHERE period = $1 AND state = 'closing' AND org_id = $2",
    )
    .bind(start)
    .bind(tx.org().as_uuid())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A month the organization recorded.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct PeriodRow {
    /// Its first day.
    pub period: Date,
    /// Open, closing or closed.
    pub state: sqlx::types::Text<PeriodState>,
    /// When it closed.
    pub closed_at: Option<OffsetDateTime>,
    /// Who closed it.
    pub closed_by: Option<String>,
    /// The policy version it closed with.
    pub policy_version: Option<i32>,
    /// Its close hash.
    pub content_hash: Option<String>,
    /// Its number of ledger lines.
    pub line_count: Option<i32>,
    /// Its total, as text.
    pub total_amount: Option<String>,
    /// Its currency.
    pub currency: Option<String>,
    /// The close hash of the month before it in the chain.
    pub previous_hash: Option<String>,
}

/// Every month the organization recorded, newest first.
pub(crate) async fn period_rows(tx: &mut OrgTx) -> Result<Vec<PeriodRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT period, state, closed_at, closed_by, policy_version, content_hash, line_count, total_amount::text,
                currency::text, previous_hash
           FROM periods WHERE org_id = $1 ORDER BY period DESC",
    )
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// The organization's first month with anything to account for: its first non-draft policy's or its first
/// allocation's, whichever is earlier.
pub(crate) async fn first_month(tx: &mut OrgTx) -> Result<Option<Date>, AppError> {
    Ok(sqlx::query_scalar(
        "SELECT LEAST((SELECT min(effective_from) FROM cost_policies WHERE state <> 'draft' AND org_id = $1),
                      (SELECT date_trunc('month', min(started_at))::date FROM allocation_intervals WHERE org_id = $1))",
    )
    .bind(tx.org().as_uuid())
    .fetch_one(tx.conn())
    .await?)
}
