//! The read model (issue 17): the figures pages and API reads show for a month ([`crate::figures`], stored so that
//! a read is an indexed lookup), kept current by the refresh worker ([`worker`]), with the reads that wait for a
//! month's first figures ([`ensure`]) and the ledger's lines served from them ([`ledger`]).
//!
//! - A **closed** month's figures are written by the close, in its transaction, and never change.
//! - The **open** months' figures are a provisional snapshot: the refresh worker recomputes them with the same
//!   `compute` as a close, after a transaction that changed their inputs marked the organization dirty. Every answer
//!   built from a snapshot says when it was computed (`as_of`) and whether it is older than the staleness bound.
//! - A close never reads the snapshot: it computes from the facts, as before.

use gpuledger_core::{Period, ledger::LedgerLine};
use serde_json::Value;
use time::OffsetDateTime;

use crate::error::AppError;
pub use crate::figures::{
    Answer, FigState, Figures, LineFilter, LinePage, MonthHead, StoredIdle, answer, failure, head, lines, mark_changed,
    store, store_answer, stored_idle,
};

pub mod ledger;
mod store;
pub mod summaries;
pub mod worker;

pub(crate) use ledger::inputs;
pub use ledger::router;

/// Stores the figures of a month closed before the read model existed, from its evidence bundle (once; later
/// reads find them).
pub async fn backfill_closed(
    db: &crate::db::Database,
    org: gpuledger_core::ids::OrgId,
    period: Period,
) -> Result<(), AppError> {
    let mut tx = db.begin_org(org).await?;
    tx.allow_long_statements().await?;
    if head(&mut tx, period).await?.is_some() {
        return Ok(());
    }
    let Some(bundle) = crate::store::stored_bundle(&mut tx, period).await? else {
        return Err(AppError::Internal(format!("closed period {period} has no bundle")));
    };
    let closed_at = store::closed_at(&mut tx, period.first_day()).await?;
    store(
        &mut tx,
        &Figures {
            period,
            state: FigState::Closed,
            as_of: closed_at.unwrap_or_else(OffsetDateTime::now_utc),
            compute_ms: 0,
            policy_version: bundle.policy_version,
            currency: &bundle.inputs.policy.currency,
            hash: Some(&bundle.hash),
            lines: &bundle.lines,
            notes: Value::Null,
            to_date: None,
            idle: None,
        },
    )
    .await?;
    tx.commit_quiet().await?;
    Ok(())
}

/// Makes sure `period` has stored figures: a month closed before the read model existed is read from its bundle; an
/// open month before its first snapshot is computed now (once for everyone asking: the refresh lock).
pub async fn ensure(db: &crate::db::Database, org: gpuledger_core::ids::OrgId, period: Period) -> Result<(), AppError> {
    let mut tx = db.begin_org(org).await?;
    let known = head(&mut tx, period).await?.is_some();
    let closed = crate::store::period_state(&mut tx, period).await? == gpuledger_api::states::PeriodState::Closed;
    tx.commit_quiet().await?;
    if known {
        return Ok(());
    }
    if closed {
        backfill_closed(db, org, period).await
    } else {
        worker::refresh_with(db, org, worker::Wait::Block, Some(period)).await.map(|_| ())
    }
}

/// Every stored line of `period` the caller may see (its department scope applies in PostgreSQL), with the month's
/// head; `None` when the month has no figures (no approved policy covers it).
pub async fn visible_lines(
    db: &crate::db::Database,
    p: &crate::auth::Principal,
    period: Period,
) -> Result<Option<(MonthHead, Vec<LedgerLine>)>, AppError> {
    ensure(db, p.org, period).await?;
    let mut tx = p.begin(db).await?;
    let Some(h) = head(&mut tx, period).await? else { return Ok(None) };
    let rows = store::visible_lines(&mut tx, period.first_day()).await?;
    tx.commit_quiet().await?;
    Ok(Some((h, rows)))
}
