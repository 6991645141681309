//! Month-end close: `open → closing → closed`, the close hash chain, adjustments for late facts and approved
//! credits, and the evidence bundle (`/api/v1/periods/YYYY-MM/bundle`, format in docs/bundle.md).
//!
//! The lock is the period row itself: one conditional `INSERT … ON CONFLICT DO UPDATE … WHERE state = 'open'` moves
//! it to `closing`, which only one transaction in the whole deployment can win; the winner computes and writes the
//! lines, then moves it to `closed`. A `closing` row older than [`STALE_CLOSING`] (a replica died mid-close) may be
//! taken over.

use axum::{
    Json, Router,
    extract::State,
    response::Response,
    routing::{get, post},
};
use gpuledger_api::{
    close::{CloseRequest, Finding, Findings, PeriodEntry, PeriodRecord, Periods},
    params::PeriodPath,
    states::{FindingKind, PeriodState},
};
use gpuledger_core::{
    Period,
    ledger::{AdjustmentRecord, Ledger, LedgerInput, compute},
};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    auth::{Capability, Principal},
    db::{Database, OrgTx},
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, Close, OptionalJsonBody, PathParams, ReadLedger},
    ledger::{approved_credits, load_input},
    state::AppState,
    store::policy_for,
};

/// A `closing` state older than this is considered abandoned.
pub const STALE_CLOSING: time::Duration = time::Duration::minutes(15);

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/periods", list_periods),
        described("post", "/api/v1/periods/{period}/close", post_close),
        described("get", "/api/v1/periods/{period}/bundle", bundle_handler),
        described("get", "/api/v1/periods/{period}/findings", findings_handler),
    ]
}

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/periods", get(list_periods))
        .route("/api/v1/periods/{period}/close", post(post_close))
        .route("/api/v1/periods/{period}/bundle", get(bundle_handler))
        .route("/api/v1/periods/{period}/findings", get(findings_handler))
}

/// `GET /api/v1/periods/{period}/findings`: what ingest flagged for the month (inventory gaps, agent gaps,
/// over-commit, unknown tenants) — counts by kind and the first 200, newest first. Organization-level facts: not
/// for a caller limited to departments.
async fn findings_handler(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    PathParams(path): PathParams<PeriodPath>,
) -> Result<Json<Findings>, AppError> {
    read_findings(&state, &p, path).await.map(Json)
}

/// The month's data-quality findings (`GET /api/v1/periods/{period}/findings`).
pub(crate) async fn read_findings(
    state: &AppState,
    p: &crate::auth::Principal,
    path: PeriodPath,
) -> Result<Findings, AppError> {
    let period = path.period.period();
    if p.departments.is_some() {
        return Err(AppError::Forbidden("data-quality findings cover the whole organization".into()));
    }
    let mut tx = p.begin(&state.db).await?;
    let (from, to) = crate::ledger::bounds(&mut tx, period).await?;
    let counts = periods::finding_counts(&mut tx, from, to).await?;
    let mut items = periods::findings(&mut tx, from, to).await?;
    // Allocations with no GPU class are not priced: said here, live (they leave the list once the inventory names
    // their model), never only as a count in the ledger's notes.
    let unpriced = periods::unpriced(&mut tx, from, to).await?;
    let overcommit = soft_overcommit(&mut tx, period, OffsetDateTime::now_utc()).await?;
    let bill = crate::costs::findings(&mut tx, period).await?;
    let needs_acknowledgement = needs_acknowledgement(&mut tx, period).await?;
    let acknowledgements = acknowledgements(&mut tx, period).await?;
    tx.commit().await?;
    let mut by_kind: std::collections::BTreeMap<String, i64> = counts.into_iter().collect();
    for (cluster, model, mode, n, first, last, named) in unpriced {
        *by_kind.entry("unpriced".into()).or_default() += n;
        let (reason, fix) = if model.is_empty() {
            (
                format!("{n} {mode} allocation(s) with no GPU model: the agent could not say which GPU they hold"),
                "check the node's labels (nvidia.com/gpu.product) or the node agent on that node".to_string(),
            )
        } else {
            (
                format!("{n} {mode} allocation(s) on GPU model {model:?}, which the approved inventory gives no class"),
                format!("add {model:?} under Admin → Inventory (GPU model → class); the allocations are priced again"),
            )
        };
        items.insert(
            0,
            Finding {
                cluster,
                kind: FindingKind::Unpriced,
                subject: if model.is_empty() { "unknown GPU model".into() } else { model },
                from: Some(gpuledger_core::time_fmt::rfc3339(first)),
                to: last.map(gpuledger_core::time_fmt::rfc3339),
                // The first 20 allocations by start, named (namespace/holder (allocation ID)).
                details: serde_json::json!({ "allocations": n, "reason": reason, "first": named }),
                fix: Some(fix),
            },
        );
    }
    for f in overcommit {
        *by_kind.entry("overcommit".into()).or_default() += 1;
        items.insert(0, f);
    }
    for f in bill.into_iter().rev() {
        *by_kind.entry(f.kind.as_str().to_string()).or_default() += 1;
        items.insert(0, f);
    }
    Ok(Findings {
        period: period.to_string(),
        needs_acknowledgement,
        acknowledgements,
        by_kind: by_kind.into_iter().collect(),
        items,
    })
}

/// An open period's ledger as it would close now.
pub struct Preview {
    /// Its inputs (adjustments included).
    pub input: LedgerInput,
    /// Its lines.
    pub ledger: Ledger,
    /// Approved credits it includes (adjustment IDs).
    pub credits: Vec<Uuid>,
    /// Late-data adjustments it includes, with the closed period each corrects.
    pub late: Vec<(Period, AdjustmentRecord)>,
}

/// How many ledger computations this process ran ([`preview`]): the read model's tests check that reads do not.
pub static COMPUTATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Computes an open period's ledger with the approved policy, approved credits and late-data adjustments.
pub async fn preview(tx: &mut OrgTx, period: Period) -> Result<Preview, AppError> {
    COMPUTATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let policy = policy_for(tx, period).await?.ok_or_else(|| {
        AppError::Conflict(format!(
            "no approved cost policy covers {period}: approve one effective from {period} or earlier"
        ))
    })?;
    let mut input = load_input(tx, period, policy).await?;
    let credits = approved_credits(tx).await?;
    let late = late_data(tx, period).await?;
    input.adjustments.extend(credits.iter().map(|(_, a)| a.clone()));
    input.adjustments.extend(late.iter().map(|(_, a)| a.clone()));
    let ledger = compute(&input).map_err(AppError::computing)?;
    Ok(Preview { input, ledger, credits: credits.into_iter().map(|(id, _)| id).collect(), late })
}

/// What a close produced (the contract's answer of the close).
pub use gpuledger_api::close::CloseSummary;

mod download;
pub mod store;
pub use crate::ledger::store::parts::set_order_chunk as set_evidence_order_chunk;
use store::periods;
pub use store::{BUNDLE_CHUNK_BYTES, PART_RECORDS, org_slug, set_bundle_chunk_bytes, set_part_records, stored_bundle};
pub(crate) use store::{
    PartsPreview, acknowledgements, freeze, late_data, needs_acknowledgement, preview_in_parts, record_acknowledgement,
    soft_overcommit,
};

/// Closes a period. Exactly one of several concurrent callers (on any replica) wins; the others get a conflict.
pub async fn close_period(
    db: &Database,
    org: gpuledger_core::ids::OrgId,
    slug: &str,
    period: Period,
    actor: &str,
    now: OffsetDateTime,
) -> Result<CloseSummary, AppError> {
    let start = period.first_day();
    // Step 1: take the lock (open → closing) in its own committed transaction, so others see it.
    let mut tx = db.begin_org(org).await?;
    // The month ends at local midnight of the next 1st in the organization's calendar.
    let (_, end) = crate::ledger::bounds(&mut tx, period).await?;
    if end > now {
        return Err(AppError::Conflict(format!(
            "{period} has not ended yet; it can be closed from {}",
            gpuledger_core::time_fmt::rfc3339(end)
        )));
    }
    let later = periods::later_closed(&mut tx, start).await?;
    if let Some(l) = later {
        return Err(AppError::Conflict(format!(
            "{} is already closed; {period} can no longer be closed",
            Period::from_date(l)?
        )));
    }
    // The stale cutoff by the database's clock, computed first: Citus refuses anything but immutable functions in the
    // ON CONFLICT clause (`now()`, and timestamptz − interval, which depends on the time zone).
    let stale_before = periods::database_time_ago(&mut tx, STALE_CLOSING).await?;
    let won = periods::take_closing(&mut tx, start, actor, stale_before).await?;
    if won.is_none() {
        let (st, by, since) = periods::state_and_closer(&mut tx, start).await?;
        tx.rollback().await?;
        let rfc3339 = gpuledger_core::time_fmt::rfc3339;
        return Err(AppError::Conflict(match (st.as_str(), since) {
            ("closed", _) => format!("{period} is already closed"),
            // A close that stopped (its process ended) holds the month until the lease runs out: say when.
            (_, Some(since)) => format!(
                "{period} is being closed by {} since {}; if that close stopped, the month can be closed again from {}",
                by.unwrap_or_default(),
                rfc3339(since),
                rfc3339(since + STALE_CLOSING)
            ),
            _ => format!("{period} is being closed by {} right now", by.unwrap_or_default()),
        }));
    }
    tx.commit().await?;
    // Step 2: compute and freeze. On failure the period goes back to open.
    match freeze(db, org, slug, period, actor, now).await {
        Ok(s) => Ok(s),
        Err(e) => {
            if let Ok(mut tx) = db.begin_org(org).await {
                let _ = periods::reopen_closing(&mut tx, start).await;
                let _ = tx.commit().await;
            }
            Err(e)
        }
    }
}

async fn post_close(
    State(state): State<AppState>,
    p: Caller<Close>,
    PathParams(path): PathParams<PeriodPath>,
    OptionalJsonBody(request): OptionalJsonBody<CloseRequest>,
) -> Result<Json<CloseSummary>, AppError> {
    Ok(Json(close_month(&state, &p, path, request).await?))
}

pub(crate) async fn close_month(
    state: &AppState,
    p: &Principal,
    path: PeriodPath,
    request: CloseRequest,
) -> Result<CloseSummary, AppError> {
    p.require(Capability::Close)?;
    let period = path.period.period();
    // The body is optional: an empty one closes a month that needs no acknowledgement.
    let reason = request.acknowledge.map(|r| r.into_inner());
    let mut tx = state.db.begin_org(p.org).await?;
    let slug = org_slug(&mut tx).await?;
    let open = needs_acknowledgement(&mut tx, period).await?;
    tx.commit().await?;
    if !open.is_empty() && reason.is_none() {
        return Err(AppError::Conflict(format!(
            "{period} cannot be closed as it is: {}. Fix them (GET /api/v1/periods/{period}/findings says how) or \
             close with {{\"acknowledge\": \"why\"}}; the acknowledgement is recorded and audited",
            open.join("; ")
        )));
    }
    // In a task of its own: a close that outlasts the request's timeout (a large month, its evidence index) still
    // completes instead of being rolled back halfway and leaving the month `closing`.
    let (db, org, actor) = (state.db.clone(), p.org, p.actor());
    let summary =
        tokio::spawn(async move { close_period(&db, org, &slug, period, &actor, OffsetDateTime::now_utc()).await })
            .await
            .map_err(|e| AppError::Internal(format!("closing {period}: {e}")))??;
    if let Some(reason) = reason.filter(|_| !open.is_empty()) {
        let mut tx = p.begin(&state.db).await?;
        record_acknowledgement(&mut tx, period, &p.actor(), &reason, &open).await?;
        tx.audit_by(
            p,
            "period.acknowledge",
            &format!("period:{period}"),
            "",
            json!({ "reason": reason, "covered": open }),
        )
        .await?;
        tx.commit().await?;
    }
    Ok(summary)
}

async fn bundle_handler(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    PathParams(path): PathParams<PeriodPath>,
) -> Result<Response, AppError> {
    let period = path.period.period();
    if p.departments.is_some() {
        return Err(AppError::Forbidden(
            "the evidence bundle covers the whole organization; a caller limited to departments cannot take it".into(),
        ));
    }
    download::respond(&state.db, &p, period).await
}

async fn list_periods(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<Periods>, AppError> {
    read_periods(&state, &p).await.map(Json)
}

/// The months with their state and totals (`GET /api/v1/periods`), as the caller may see them.
pub(crate) async fn read_periods(state: &AppState, p: &crate::auth::Principal) -> Result<Periods, AppError> {
    // Organization totals are not shown to a caller limited to departments.
    let scoped = p.departments.is_some();
    let mut tx = p.begin(&state.db).await?;
    let rows = periods::period_rows(&mut tx).await?;
    let first = periods::first_month(&mut tx).await?;
    tx.commit().await?;
    let current = Period::containing(OffsetDateTime::now_utc());
    let mut known: std::collections::BTreeMap<Period, PeriodEntry> = std::collections::BTreeMap::new();
    for r in rows {
        let period = Period::from_date(r.period)?;
        let record = PeriodRecord {
            closed_at: r.closed_at.map(gpuledger_core::time_fmt::rfc3339),
            closed_by: r.closed_by,
            policy_version: r.policy_version,
            hash: r.content_hash,
            lines: if scoped { None } else { r.line_count },
            total: if scoped { None } else { r.total_amount },
            currency: r.currency,
            previous_hash: r.previous_hash,
            bundle: (r.state.0 == PeriodState::Closed).then(|| format!("/api/v1/periods/{period}/bundle")),
        };
        known.insert(period, PeriodEntry { period: period.to_string(), state: r.state.0, record: Some(record) });
    }
    if let Some(f) = first {
        let mut m = Period::from_date(f)?;
        while m <= current {
            // A month nothing was recorded of: its period and state only.
            known.entry(m).or_insert_with(|| PeriodEntry {
                period: m.to_string(),
                state: PeriodState::Open,
                record: None,
            });
            m = m.next()?;
        }
    }
    let items: Vec<PeriodEntry> = known.into_values().rev().collect();
    Ok(Periods { total: items.len(), items })
}
