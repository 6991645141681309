//! The ledger's lines over HTTP, read from the read model: `GET /api/v1/ledger` (a month's lines, from the frozen
//! figures of a closed month or the refresh worker's snapshot of an open one, made once when a month has none yet),
//! `/ledger/months` (each month's total) and `/ledger/summaries`.

use axum::{Json, Router, extract::State, routing::get};
use gpuledger_api::{
    ledger::{Ledger, MonthTotal, Months, Summaries},
    params::{LedgerParams, MonthParams, MonthsParams},
};
use gpuledger_core::Period;

use crate::{
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, Params, ReadLedger},
    state::AppState,
    store::period_state,
};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/ledger", get(get_ledger))
        .route("/api/v1/ledger/months", get(get_months))
        .route("/api/v1/ledger/summaries", get(get_summaries))
}

/// What this module's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/ledger", get_ledger),
        described("get", "/api/v1/ledger/months", get_months),
        described("get", "/api/v1/ledger/summaries", get_summaries),
    ]
}

/// `GET /api/v1/ledger/months?from=YYYY-MM&to=YYYY-MM[&department=]`: each month's total as the caller may see it,
/// from the stored per-department totals (one query for a whole trend); a month without figures says so
/// (`total: null`).
async fn get_months(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<MonthsParams>,
) -> Result<Json<Months>, AppError> {
    read_months(&state, &p, q).await.map(Json)
}

/// Stored month totals (`GET /api/v1/ledger/months`).
pub(crate) async fn read_months(
    state: &AppState,
    p: &crate::auth::Principal,
    q: MonthsParams,
) -> Result<Months, AppError> {
    let (from, to) = (q.from.period(), q.to.period());
    let (start, end) = (from.first_day(), to.first_day());
    if end < start {
        return Err(AppError::refused("to", "is before from"));
    }
    if (end.year() - start.year()) * 12 + i32::from(u8::from(end.month())) - i32::from(u8::from(start.month())) >= 36 {
        return Err(AppError::refused("to", "at most 36 months at once"));
    }
    let mut tx = p.begin(&state.db).await?;
    let scope = p.departments.as_ref().map(|d| d.iter().map(|d| d.as_uuid()).collect::<Vec<_>>());
    let rows = super::store::month_totals(&mut tx, start, end, q.department.as_deref(), scope).await?;
    tx.commit_quiet().await?;
    let months = rows
        .into_iter()
        .map(|(d, state, total, as_of)| {
            let period = Period::from_date(d).map(|p| p.to_string()).unwrap_or_default();
            // A month with figures but no line the caller sees totals 0.00; a month without figures has no total.
            let total = state.as_ref().map(|_| total.unwrap_or_else(|| "0.00".into()));
            let as_of = as_of.map(gpuledger_core::time_fmt::rfc3339);
            MonthTotal { period, state: state.map(|s| s.0), total, as_of }
        })
        .collect();
    Ok(Months { months })
}

/// `GET /api/v1/ledger/summaries?period=YYYY-MM`: the month's stored utilization, inference and training
/// summaries as the caller may see them (the department scope cuts the rows; endpoint totals and unattributed work
/// are for organization-wide readers only), each with the `as_of` of the figures it goes with. A kind not computed
/// yet is `null`, and `pending` says the worker has newer figures to summarize.
async fn get_summaries(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<MonthParams>,
) -> Result<Json<Summaries>, AppError> {
    read_summaries(&state, &p, q).await.map(Json)
}

/// The month's stored summaries (`GET /api/v1/ledger/summaries`).
pub(crate) async fn read_summaries(
    state: &AppState,
    p: &crate::auth::Principal,
    q: MonthParams,
) -> Result<Summaries, AppError> {
    let period = q.period.period();
    let mut tx = p.begin(&state.db).await?;
    let answer = super::summaries::read(&mut tx, period).await?;
    tx.commit_quiet().await?;
    Ok(answer)
}

async fn get_ledger(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<LedgerParams>,
) -> Result<Json<Ledger>, AppError> {
    read_ledger(&state, &p, q).await.map(Json)
}

/// A page of the month's lines with its totals (`GET /api/v1/ledger`), as the caller may see them.
pub(crate) async fn read_ledger(
    state: &AppState,
    p: &crate::auth::Principal,
    q: LedgerParams,
) -> Result<Ledger, AppError> {
    let period = q.period.period();
    // Bounded by the contract: 1..=10000 lines per page, pages from 1.
    let per_page = q.per_page.map_or(1000, |n| u32::try_from(n.get()).unwrap_or(1000));
    let page = q.page.map_or(1, |n| u32::try_from(n.get()).unwrap_or(1));
    // Read, never recomputed: a closed month's figures were written by its close, an open month's are the refresh
    // worker's snapshot (computed for the whole organization — overhead is split across every tenant — and cut
    // here to the departments PostgreSQL shows the caller).
    let mut tx = p.begin(&state.db).await?;
    let st = period_state(&mut tx, period).await?;
    let calendar = crate::calendar::bounds(&mut tx, period).await?;
    let mut head = super::head(&mut tx, period).await?;
    if head.is_none() {
        // No figures of this month yet (a new month, a fresh start, a month closed before the read model): made once.
        tx.commit_quiet().await?;
        super::ensure(&state.db, p.org, period).await?;
        tx = p.begin(&state.db).await?;
        head = super::head(&mut tx, period).await?;
    }
    let Some(head) = head else {
        if st == gpuledger_api::states::PeriodState::Closed {
            return Err(AppError::Internal(format!("closed period {period} has no stored figures")));
        }
        // Still nothing: no approved policy covers the month.
        return Err(AppError::Conflict(format!(
            "no approved cost policy covers {period}: approve one effective from {period} or earlier"
        )));
    };
    let filter = super::LineFilter {
        scope: p.departments.as_ref().map(|d| d.iter().map(|d| d.as_uuid()).collect()),
        tenant: q.tenant.as_ref().map(ToString::to_string),
        department: q.department.as_ref().map(ToString::to_string),
        term: q.term.map(|t| t.as_str().to_string()),
    };
    let offset = i64::from(page - 1) * i64::from(per_page);
    let found = super::lines(&mut tx, period, &filter, offset, i64::from(per_page)).await?;
    let refresh_failure =
        if head.state == super::FigState::Provisional { super::failure(&mut tx).await? } else { None };
    tx.commit_quiet().await?;
    // The notes count the whole organization's data: not for a caller limited to departments.
    let notes = if p.departments.is_some() || head.state == super::FigState::Closed {
        None
    } else {
        Some(head.notes.clone()).filter(|n| !n.is_null())
    };
    let max_age = state.limits.snapshot_max_age;
    let now = time::OffsetDateTime::now_utc();
    let stale = head.state == super::FigState::Provisional
        && (refresh_failure.is_some() || (head.changed_since.is_some() && now - head.as_of > max_age));
    Ok(Ledger {
        period: period.to_string(),
        state: st,
        starts_at: gpuledger_core::time_fmt::rfc3339(calendar.start),
        ends_at: gpuledger_core::time_fmt::rfc3339(calendar.end),
        time_zone: calendar.time_zone,
        continues_from: calendar.continues_from.map(gpuledger_core::time_fmt::rfc3339),
        policy_version: head.policy_version,
        currency: if head.line_count > 0 { head.currency.clone() } else { None },
        hash: head.hash,
        as_of: gpuledger_core::time_fmt::rfc3339(head.as_of),
        provisional: head.state == super::FigState::Provisional,
        stale,
        refresh_failure,
        total: found.total,
        totals_by_term: found.totals_by_term,
        notes,
        count: found.count,
        page,
        per_page,
        lines: found.lines,
    })
}
