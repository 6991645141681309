//! SQL of the read model's worker, summaries and ledger reads: statements inside the caller's organization-scoped
//! transaction (the stored figures themselves are [`crate::figures`]'s).

use gpuledger_api::states::FiguresState;
use gpuledger_core::ledger::LedgerLine;
use serde_json::Value;
use time::{Date, OffsetDateTime};
use uuid::Uuid;

use crate::{db::OrgTx, error::AppError};

/// Takes the transaction-scoped advisory lock (`class`, `key`) when it is free; `false` when another holds it.
pub(super) async fn try_lock(tx: &mut OrgTx, class: i32, key: i32) -> Result<bool, AppError> {
    Ok(sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1, $2)")
        .bind(class)
        .bind(key)
        .fetch_one(tx.conn())
        .await?)
}

/// The months that have provisional figures (first days).
pub(super) async fn provisional_months(tx: &mut OrgTx) -> Result<Vec<Date>, AppError> {
    Ok(sqlx::query_scalar("SELECT period FROM read_months WHERE org_id = $1 AND state = 'provisional'")
        .bind(tx.org().as_uuid())
        .fetch_all(tx.conn())
        .await?)
}

/// Which of `months` (first days) are closed.
pub(super) async fn closed_among(tx: &mut OrgTx, months: Vec<Date>) -> Result<Vec<Date>, AppError> {
    Ok(sqlx::query_scalar("SELECT period FROM periods WHERE org_id = $1 AND state = 'closed' AND period = ANY($2)")
        .bind(tx.org().as_uuid())
        .bind(months)
        .fetch_all(tx.conn())
        .await?)
}

/// Whether nothing changed since the last refresh and `month` (a first day) has figures.
pub(super) async fn figures_current(tx: &mut OrgTx, month: Date) -> Result<bool, AppError> {
    Ok(sqlx::query_scalar(
        "SELECT NOT EXISTS (SELECT 1 FROM read_dirty WHERE org_id = $1)
                AND EXISTS (SELECT 1 FROM read_months WHERE org_id = $1 AND period = $2)",
    )
    .bind(tx.org().as_uuid())
    .bind(month)
    .fetch_one(tx.conn())
    .await?)
}

/// Clears the organization's "changed since the last refresh" mark.
pub(super) async fn clear_changed(tx: &mut OrgTx) -> Result<(), AppError> {
    sqlx::query("DELETE FROM read_dirty WHERE org_id = $1").bind(tx.org().as_uuid()).execute(tx.conn()).await?;
    Ok(())
}

/// Forgets the organization's recorded refresh failure.
pub(super) async fn clear_failure(tx: &mut OrgTx) -> Result<(), AppError> {
    sqlx::query("DELETE FROM read_failures WHERE org_id = $1").bind(tx.org().as_uuid()).execute(tx.conn()).await?;
    Ok(())
}

/// Records a refresh failure (`period`: the month being computed) and returns the failures in a row so far.
pub(super) async fn record_failure(
    tx: &mut OrgTx,
    period: Option<Date>,
    field: &str,
    reason: &str,
) -> Result<i32, AppError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO read_failures (org_id, first_failed_at, failed_at, attempts, period, field, reason)
             VALUES ($1, now(), now(), 1, $2, left($3, 200), left($4, 2000))
             ON CONFLICT (org_id) DO UPDATE SET failed_at = EXCLUDED.failed_at, attempts = read_failures.attempts + 1,
                 period = EXCLUDED.period, field = EXCLUDED.field, reason = EXCLUDED.reason
             RETURNING attempts",
    )
    .bind(tx.org().as_uuid())
    .bind(period)
    .bind(field)
    .bind(reason)
    .fetch_one(tx.conn())
    .await?)
}

/// The recorded failure (field, reason) when nothing changed since it.
pub(super) async fn standing_failure(tx: &mut OrgTx) -> Result<Option<(String, String)>, AppError> {
    Ok(sqlx::query_as(
        "SELECT f.field, f.reason FROM read_failures f
          WHERE f.org_id = $1 AND NOT EXISTS (SELECT 1 FROM read_dirty d WHERE d.org_id = $1)",
    )
    .bind(tx.org().as_uuid())
    .fetch_optional(tx.conn())
    .await?)
}

/// When the stored figures of the month starting `start` were computed (`None`: no figures).
pub(super) async fn figures_as_of(tx: &mut OrgTx, start: Date) -> Result<Option<OffsetDateTime>, AppError> {
    Ok(sqlx::query_scalar("SELECT as_of FROM read_months WHERE org_id = $1 AND period = $2")
        .bind(tx.org().as_uuid())
        .bind(start)
        .fetch_optional(tx.conn())
        .await?)
}

/// When the closed month starting `start` was closed (`None`: a close that recorded no time).
pub(super) async fn closed_at(tx: &mut OrgTx, start: Date) -> Result<Option<OffsetDateTime>, AppError> {
    Ok(sqlx::query_scalar("SELECT closed_at FROM periods WHERE org_id = $1 AND period = $2")
        .bind(tx.org().as_uuid())
        .bind(start)
        .fetch_one(tx.conn())
        .await?)
}

/// The stored lines of the month starting `start` that the transaction may see, in order.
pub(super) async fn visible_lines(tx: &mut OrgTx, start: Date) -> Result<Vec<LedgerLine>, AppError> {
    let rows: Vec<sqlx::types::Json<LedgerLine>> =
        sqlx::query_scalar("SELECT line FROM read_lines WHERE org_id = $1 AND period = $2 ORDER BY line_no")
            .bind(tx.org().as_uuid())
            .bind(start)
            .fetch_all(tx.conn())
            .await?;
    Ok(rows.into_iter().map(|j| j.0).collect())
}

/// A month of a trend: its first day, its figures' state, the total the caller sees and when it was computed.
pub(super) type MonthRow = (Date, Option<sqlx::types::Text<FiguresState>>, Option<String>, Option<OffsetDateTime>);

/// Each month from `start` to `end` (first days) with its stored total over the lines of `department` (name or ID)
/// within `scope` (department IDs; `None`: every one).
pub(super) async fn month_totals(
    tx: &mut OrgTx,
    start: Date,
    end: Date,
    department: Option<&str>,
    scope: Option<Vec<Uuid>>,
) -> Result<Vec<MonthRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT g.period::date, m.state, (SELECT sum(t.total)::text FROM read_totals t
                                         WHERE t.org_id = $1 AND t.period = m.period
                                           AND ($4::text IS NULL OR t.department = $4 OR t.department_id::text = $4)
                                           AND ($5::uuid[] IS NULL OR t.department_id = ANY($5))),
                m.as_of
           FROM generate_series($2::date, $3::date, interval '1 month') AS g(period)
           LEFT JOIN read_months m ON m.org_id = $1 AND m.period = g.period::date
          ORDER BY 1",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .bind(end)
    .bind(department)
    .bind(scope)
    .fetch_all(tx.conn())
    .await?)
}

/// Removes the stored summaries of the month starting `start` (their rows go with them).
pub(super) async fn delete_summaries(tx: &mut OrgTx, start: Date) -> Result<(), AppError> {
    sqlx::query("DELETE FROM read_summaries WHERE org_id = $1 AND period = $2")
        .bind(tx.org().as_uuid())
        .bind(start)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Stores a summary's head: its kind, the figures it goes with, how long it took, and its answer-wide fields.
pub(super) async fn insert_summary(
    tx: &mut OrgTx,
    start: Date,
    kind: &str,
    as_of: OffsetDateTime,
    compute_ms: i32,
    head: &Value,
) -> Result<(), AppError> {
    sqlx::query(
        "INSERT INTO read_summaries (org_id, period, kind, as_of, compute_ms, head) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .bind(kind)
    .bind(as_of)
    .bind(compute_ms)
    .bind(head)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Stores rows of a summary, column by column (row numbers, sections, departments, bodies), in one statement.
pub(super) async fn insert_summary_rows(
    tx: &mut OrgTx,
    start: Date,
    kind: &str,
    no: &[i32],
    section: &[&str],
    department: &[Option<Uuid>],
    body: &[&Value],
) -> Result<(), AppError> {
    use crate::bulk::{col, constant};
    let org = tx.org().as_uuid();
    crate::bulk::execute(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO read_summary_rows (org_id, period, kind, row_no, section, department_id, body)",
            row: "$1, $2, $3, {0}, {1}, {2}, {3}",
            consts: &[constant("uuid", &org), constant("date", &start), constant("text", &kind)],
            cols: &[col("int", no), col("text", section), col("uuid", department), col("jsonb", body)],
            tail: "",
        },
    )
    .await?;
    Ok(())
}

/// A stored summary's head.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct SummaryHead {
    /// `utilization`, `inference` or `training`.
    pub kind: String,
    /// The `as_of` of the figures it was computed from.
    pub as_of: OffsetDateTime,
    /// When it was computed.
    pub computed_at: OffsetDateTime,
    /// Its answer-wide fields.
    pub head: Value,
}

/// The stored summaries' heads of the month starting `start`.
pub(super) async fn summary_heads(tx: &mut OrgTx, start: Date) -> Result<Vec<SummaryHead>, AppError> {
    Ok(sqlx::query_as("SELECT kind, as_of, computed_at, head FROM read_summaries WHERE org_id = $1 AND period = $2")
        .bind(tx.org().as_uuid())
        .bind(start)
        .fetch_all(tx.conn())
        .await?)
}

/// The stored summaries' rows of the month starting `start` the transaction may see: (kind, section, body), in order.
pub(super) async fn summary_rows(tx: &mut OrgTx, start: Date) -> Result<Vec<(String, String, Value)>, AppError> {
    Ok(sqlx::query_as(
        "SELECT kind, section, body FROM read_summary_rows WHERE org_id = $1 AND period = $2 ORDER BY kind, row_no",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .fetch_all(tx.conn())
    .await?)
}
