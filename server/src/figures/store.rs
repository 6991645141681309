//! SQL of the read model: a month's stored figures (head, lines, totals, idle reservations), the refresh's failure
//! and dirty mark, and stored analytics answers.

use std::collections::BTreeMap;

use gpuledger_core::{Period, decimal::Decimal, time_fmt::rfc3339};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{Answer, FigState, Figures, LineFilter, LinePage, MonthHead, StoredIdle};
use crate::{db::OrgTx, error::AppError};

/// Replaces a month's stored figures with `f` in `tx` (the whole organization's: `tx` must see every department).
pub async fn store(tx: &mut OrgTx, f: &Figures<'_>) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    let start = f.period.first_day();
    // A provisional snapshot never replaces a closed month's figures (a close that committed while the snapshot
    // was computed wins); a close replaces whatever was there.
    let replace = match f.state {
        FigState::Closed => "DELETE FROM read_months WHERE org_id = $1 AND period = $2",
        FigState::Provisional => "DELETE FROM read_months WHERE org_id = $1 AND period = $2 AND state = 'provisional'",
    };
    sqlx::query(replace).bind(org).bind(start).execute(tx.conn()).await?;
    let inserted = sqlx::query(
        "INSERT INTO read_months (org_id, period, state, as_of, compute_ms, policy_version, currency, content_hash,
                                  line_count, notes, to_date, idle)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (org_id, period) DO NOTHING",
    )
    .bind(org)
    .bind(start)
    .bind(f.state.as_str())
    .bind(f.as_of)
    .bind(i32::try_from(f.compute_ms).unwrap_or(i32::MAX))
    .bind(i32::try_from(f.policy_version).unwrap_or(i32::MAX))
    .bind(f.currency)
    .bind(f.hash)
    .bind(i32::try_from(f.lines.len()).unwrap_or(i32::MAX))
    .bind(&f.notes)
    .bind(&f.to_date)
    .bind(&f.idle)
    .execute(tx.conn())
    .await?;
    if inserted.rows_affected() == 0 {
        return Ok(());
    }
    // Set-based, in chunks (a month at 10,000 GPUs has thousands of lines).
    for (c, chunk) in f.lines.chunks(5_000).enumerate() {
        let n = chunk.len();
        let (mut no, mut dept_id, mut dept, mut tenant_id, mut tenant, mut term, mut amount, mut line) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (i, l) in chunk.iter().enumerate() {
            no.push(i32::try_from(c * 5_000 + i + 1).map_err(|_| AppError::Internal("too many lines".into()))?);
            dept_id.push(l.department_id.as_uuid());
            dept.push(l.department.clone());
            tenant_id.push(l.tenant_id.map(|t| t.as_uuid()));
            tenant.push(l.tenant.clone());
            term.push(l.term.as_str().to_string());
            amount.push(l.amount.to_string());
            line.push(serde_json::to_value(l).map_err(|e| AppError::Internal(e.to_string()))?);
        }
        use crate::bulk::{col, constant};
        crate::bulk::execute(
            tx,
            &crate::bulk::Insert {
                into: "INSERT INTO read_lines (org_id, period, line_no, department_id, department, tenant_id, tenant,
                           term, amount, line)",
                row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}, {6}::numeric, {7}",
                consts: &[constant("uuid", &org), constant("date", &start)],
                cols: &[
                    col("int", &no),
                    col("uuid", &dept_id),
                    col("text", &dept),
                    col("uuid", &tenant_id),
                    col("text", &tenant),
                    col("text", &term),
                    col("text", &amount),
                    col("jsonb", &line),
                ],
                tail: "",
            },
        )
        .await?;
    }
    sqlx::query(
        "INSERT INTO read_totals (org_id, period, department_id, department, total)
         SELECT org_id, period, department_id, min(department), sum(amount) FROM read_lines
          WHERE org_id = $1 AND period = $2 GROUP BY org_id, period, department_id",
    )
    .bind(org)
    .bind(start)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The stored figures of `period`, if any.
pub async fn head(tx: &mut OrgTx, period: Period) -> Result<Option<MonthHead>, AppError> {
    let org = tx.org().as_uuid();
    type Row =
        (String, OffsetDateTime, Option<i32>, Option<String>, Option<String>, i32, Value, Option<OffsetDateTime>);
    let row: Option<Row> = sqlx::query_as(
        "SELECT m.state, m.as_of, m.policy_version, m.currency::text, m.content_hash, m.line_count, m.notes,
                (SELECT d.since FROM read_dirty d WHERE d.org_id = $1 AND m.state = 'provisional')
           FROM read_months m WHERE m.org_id = $1 AND m.period = $2",
    )
    .bind(org)
    .bind(period.first_day())
    .fetch_optional(tx.conn())
    .await?;
    Ok(row.map(|(state, as_of, policy_version, currency, hash, line_count, notes, changed_since)| MonthHead {
        state: if state == "closed" { FigState::Closed } else { FigState::Provisional },
        as_of,
        policy_version,
        currency,
        hash,
        line_count,
        notes,
        changed_since,
    }))
}

/// Why the last refresh of the organization's open months failed, if it did (`read_failures`, written by the
/// worker; gone once a refresh succeeds).
pub async fn failure(tx: &mut OrgTx) -> Result<Option<gpuledger_api::ledger::RefreshFailure>, AppError> {
    type Row = (OffsetDateTime, OffsetDateTime, i32, Option<time::Date>, String, String);
    let row: Option<Row> = sqlx::query_as(
        "SELECT first_failed_at, failed_at, attempts, period, field, reason FROM read_failures WHERE org_id = $1",
    )
    .bind(tx.org().as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    Ok(row.map(|(since, last, attempts, period, field, reason)| gpuledger_api::ledger::RefreshFailure {
        since: rfc3339(since),
        last_attempt: rfc3339(last),
        attempts,
        period: period.and_then(|d| Period::from_date(d).ok()).map(|p| p.to_string()),
        fix: format!(
            "Correct what `{field}` names (for a cost policy: approve a corrected one covering the month; for a \
             quota or a setting: change it to a value within its limits). The figures are computed again at the next \
             change; until then these are the last good figures."
        ),
        field,
        reason,
    }))
}

/// The idle reservations stored with `period`'s provisional snapshot, if the worker computed them.
pub async fn stored_idle(tx: &mut OrgTx, period: Period) -> Result<Option<StoredIdle>, AppError> {
    let idle: Option<Option<sqlx::types::Json<StoredIdle>>> =
        sqlx::query_scalar("SELECT idle FROM read_months WHERE org_id = $1 AND period = $2 AND state = 'provisional'")
            .bind(tx.org().as_uuid())
            .bind(period.first_day())
            .fetch_optional(tx.conn())
            .await?;
    Ok(idle.flatten().map(|j| j.0))
}

/// Reads a page of `period`'s stored lines.
pub async fn lines(
    tx: &mut OrgTx,
    period: Period,
    filter: &LineFilter,
    offset: i64,
    limit: i64,
) -> Result<LinePage, AppError> {
    let org = tx.org().as_uuid();
    let start = period.first_day();
    // (`org_id = $1` is written in each statement, where the routing audit can see it.)
    const WHERE: &str = "period = $2
         AND ($3::text IS NULL OR tenant = $3 OR tenant_id::text = $3)
         AND ($4::text IS NULL OR department = $4 OR department_id::text = $4)
         AND ($5::text IS NULL OR term = $5)
         AND ($6::uuid[] IS NULL OR department_id = ANY($6))";
    let sums: Vec<(String, String, i64)> = sqlx::query_as(&format!(
        "SELECT term, sum(amount)::text, count(*) FROM read_lines
          WHERE org_id = $1 AND {WHERE} GROUP BY term ORDER BY term"
    ))
    .bind(org)
    .bind(start)
    .bind(&filter.tenant)
    .bind(&filter.department)
    .bind(&filter.term)
    .bind(&filter.scope)
    .fetch_all(tx.conn())
    .await?;
    let mut total = Decimal::from_scaled(0, 2)?;
    let mut count = 0;
    let mut totals_by_term = BTreeMap::new();
    for (term, sum, n) in sums {
        let amount = Decimal::parse(&sum).map_err(|e| AppError::Internal(format!("stored amount {sum}: {e}")))?;
        total = total.checked_add(&amount)?;
        count += n;
        totals_by_term.insert(term, amount.to_string());
    }
    let lines: Vec<sqlx::types::Json<gpuledger_api::ledger::LedgerLine>> = if limit > 0 && offset < count {
        sqlx::query_scalar(&format!(
            "SELECT line FROM read_lines WHERE org_id = $1 AND {WHERE} ORDER BY line_no LIMIT $7 OFFSET $8"
        ))
        .bind(org)
        .bind(start)
        .bind(&filter.tenant)
        .bind(&filter.department)
        .bind(&filter.term)
        .bind(&filter.scope)
        .bind(limit)
        .bind(offset)
        .fetch_all(tx.conn())
        .await?
    } else {
        Vec::new()
    };
    let lines = lines.into_iter().map(|l| l.0).collect();
    Ok(LinePage { lines, count, totals_by_term, total: total.to_string() })
}

/// Marks `tx`'s organization's open months as changed (the refresh worker recomputes them). [`OrgTx::commit`]
/// does this for every transaction that wrote; this is for callers that must say so explicitly.
pub async fn mark_changed(tx: &mut OrgTx) -> Result<(), AppError> {
    let org: Uuid = tx.org().as_uuid();
    sqlx::query("INSERT INTO read_dirty (org_id) VALUES ($1) ON CONFLICT (org_id) DO NOTHING")
        .bind(org)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Looks up the answer to `request` for `scope` valid for `period`'s current figures.
pub async fn answer(
    db: &crate::db::Database,
    org: gpuledger_core::ids::OrgId,
    period: Period,
    request: &str,
    scope: &str,
) -> Result<Answer, AppError> {
    let mut tx = db.begin_org(org).await?;
    let row: Option<(OffsetDateTime, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT m.as_of, a.body FROM read_months m
           LEFT JOIN read_answers a ON a.org_id = m.org_id AND a.period = m.period AND a.request = $3
                                   AND a.scope = $4 AND a.as_of = m.as_of
          WHERE m.org_id = $1 AND m.period = $2",
    )
    .bind(org.as_uuid())
    .bind(period.first_day())
    .bind(request)
    .bind(scope)
    .fetch_optional(tx.conn())
    .await?;
    tx.commit_quiet().await?;
    Ok(match row {
        None => Answer::NoFigures,
        Some((_, Some(body))) => Answer::Hit(body),
        Some((as_of, None)) => Answer::Miss(as_of),
    })
}

/// Stores the answer to `request` for `scope`, computed after the figures of `as_of`.
pub async fn store_answer(
    db: &crate::db::Database,
    org: gpuledger_core::ids::OrgId,
    period: Period,
    request: &str,
    scope: &str,
    as_of: OffsetDateTime,
    body: &[u8],
) -> Result<(), AppError> {
    let mut tx = db.begin_org(org).await?;
    sqlx::query(
        "INSERT INTO read_answers (org_id, period, request, scope, as_of, body)
         SELECT $1, $2, $3, $4, $5, $6
          WHERE EXISTS (SELECT 1 FROM read_months m WHERE m.org_id = $1 AND m.period = $2 AND m.as_of = $5)
         ON CONFLICT (org_id, period, request, scope) DO UPDATE SET as_of = EXCLUDED.as_of, body = EXCLUDED.body",
    )
    .bind(org.as_uuid())
    .bind(period.first_day())
    .bind(request)
    .bind(scope)
    .bind(as_of)
    .bind(body)
    .execute(tx.conn())
    .await?;
    tx.commit_quiet().await?;
    Ok(())
}
