//! The refresh worker: keeps each organization's open months' figures (the provisional snapshot) within a bounded
//! age of their facts. One refresh per organization at a time across every server replica (a PostgreSQL advisory
//! lock), so N replicas do the work once.

use std::time::{Duration, Instant};

use gpuledger_core::{Period, ids::OrgId};
use time::OffsetDateTime;

use crate::figures::LOCK_CLASS;
pub use crate::figures::lock_key;

use super::{FigState, Figures, store};
use crate::{
    db::{Database, OrgTx},
    error::AppError,
};

/// When the worker refreshes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshOptions {
    /// The staleness bound (`--snapshot-max-age-secs`): a change reaches the snapshot within it, and an answer
    /// built from a snapshot older than it while changes wait says so.
    pub max_age: Duration,
    /// How often the worker looks for work.
    pub tick: Duration,
}

impl Default for RefreshOptions {
    fn default() -> Self {
        Self { max_age: Duration::from_secs(60), tick: Duration::from_secs(5) }
    }
}

impl RefreshOptions {
    /// A change waits this long for more changes to come with it (agents send in bursts)…
    fn quiet(&self) -> Duration {
        (self.max_age / 12).max(Duration::from_millis(100))
    }

    /// …and an organization is refreshed at most this often, leaving the rest of the bound for the computation.
    fn min_interval(&self) -> Duration {
        self.max_age / 3
    }
}

/// Whether a refresh waits for another one of the same organization or gives way to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Skip when another process is refreshing (the worker).
    GiveWay,
    /// Wait for it (a read that found no figures at all).
    Block,
}

/// The open months to refresh at `now`: this month, the previous one unless closed, and any month that already
/// has provisional figures (a reader asked for it).
async fn open_months(tx: &mut OrgTx, now: OffsetDateTime, extra: Option<Period>) -> Result<Vec<Period>, AppError> {
    // This month in the organization's calendar (Tokyo's December begins nine hours before UTC's).
    let current = crate::calendar::month_of(tx, now).await?;
    let mut months = vec![current];
    months.extend(extra.filter(|p| *p != current));
    if let Ok(prev) = current.prev() {
        months.push(prev);
    }
    for d in store::provisional_months(tx).await? {
        let p = Period::from_date(d)?;
        if !months.contains(&p) {
            months.push(p);
        }
    }
    let closed = store::closed_among(tx, months.iter().map(|p| p.first_day()).collect()).await?;
    months.retain(|p| !closed.contains(&p.first_day()));
    // Months that have not begun yet have no figures.
    months.retain(|p| *p <= current);
    Ok(months)
}

/// Recomputes `org`'s open months and stores them as its provisional figures. Returns whether it ran (with
/// [`Wait::GiveWay`], `false` when another process is refreshing this organization right now).
pub async fn refresh(db: &Database, org: OrgId, wait: Wait) -> Result<bool, AppError> {
    refresh_with(db, org, wait, None).await
}

/// [`refresh`], including `extra` (an older open month a reader asked for) when it is open.
pub async fn refresh_with(db: &Database, org: OrgId, wait: Wait, extra: Option<Period>) -> Result<bool, AppError> {
    // A turn of this process's month-sized work, taken before the read model's lock (a close holding a turn may
    // wait for that lock; nothing holding the lock waits for a turn).
    let _turn = crate::limits::month_work().await?;
    let mut tx = db.begin_org(org).await?;
    // The computation reads a whole month: the export's statement limit.
    tx.allow_long_statements().await?;
    let (_, key) = lock_key(org);
    let locked: bool = match wait {
        Wait::GiveWay => store::try_lock(&mut tx, LOCK_CLASS, key).await?,
        Wait::Block => {
            tx.wait_for_turn(LOCK_CLASS, key).await?;
            true
        }
    };
    if !locked {
        return Ok(false);
    }
    if wait == Wait::Block
        && let Some(failed) = failure_standing(&mut tx).await?
    {
        // The last computation failed on the data as it stands and nothing changed since: computing again would
        // fail the same way, so the reader gets that failure (what to fix), not another month-sized computation.
        tx.commit_quiet().await?;
        return Err(failed);
    }
    if wait == Wait::Block {
        // Waited for another refresh: nothing to do when it left the figures current (no change since, and the
        // month asked for has figures).
        let month = (extra.unwrap_or_else(|| Period::containing(OffsetDateTime::now_utc()))).first_day();
        if store::figures_current(&mut tx, month).await? {
            tx.commit_quiet().await?;
            return Ok(true);
        }
    }
    // Changes committed from here on mark the organization again: the next round includes them. (Cleared in its
    // own short transaction, so ingest never waits for this computation.)
    let mut clear = db.begin_org(org).await?;
    store::clear_changed(&mut clear).await?;
    clear.commit_quiet().await?;
    let mut computing = None;
    let result = compute_and_store(&mut tx, extra, &mut computing).await;
    match result {
        Ok(()) => {
            store::clear_failure(&mut tx).await?;
            tx.commit_quiet().await?;
            Ok(true)
        }
        Err(e) => {
            drop(tx);
            record_failure(db, org, computing, &e).await;
            Err(e)
        }
    }
}

/// Failures in a row after which a passing cause (the database, a timeout) is no longer retried on every tick but
/// waits, like a lasting one, for the next change.
const RETRIES: i32 = 3;

/// Whether `e` is the data's own (the same data fails the same way) rather than a passing cause.
fn lasting(e: &AppError) -> bool {
    matches!(
        e,
        AppError::Refused { .. }
            | AppError::Invalid { .. }
            | AppError::Unknown { .. }
            | AppError::Conflict(_)
            | AppError::NotFound(_)
    )
}

/// Records why `org`'s open months could not be refreshed (an admin sees it with the figures; the last good
/// snapshot stays, marked stale). A passing cause is retried on the next tick, at most [`RETRIES`] times in a row;
/// a lasting one, and a passing one after that, only once something changes.
async fn record_failure(db: &Database, org: OrgId, period: Option<Period>, e: &AppError) {
    let (field, reason) = match e {
        AppError::Refused { field, reason }
        | AppError::Invalid { field, reason }
        | AppError::Unknown { field, reason } => (field.clone(), reason.clone()),
        AppError::Conflict(reason) | AppError::NotFound(reason) => ("figures".to_string(), reason.clone()),
        // Details of an unexpected failure are for the server log, not the page.
        AppError::Unavailable(_) => {
            ("figures".to_string(), "the database was not available; it is tried again on its own".to_string())
        }
        _ => (
            "figures".to_string(),
            "an unexpected error stopped the computation (details in the server log)".to_string(),
        ),
    };
    tracing::warn!(org = %org, period = ?period.map(|p| p.to_string()), error = %e, "read model refresh failed");
    let recorded = async {
        let mut tx = db.begin_org(org).await?;
        let attempts = store::record_failure(&mut tx, period.map(|p| p.first_day()), &field, &reason).await?;
        if !lasting(e) && attempts < RETRIES {
            super::mark_changed(&mut tx).await?;
        }
        tx.commit_quiet().await?;
        Ok::<(), AppError>(())
    };
    if let Err(again) = recorded.await {
        // Nothing could be written (the database is away): the organization stays due so nothing is lost.
        tracing::warn!(org = %org, error = %again, "read model failure not recorded");
        if let Ok(mut tx) = db.begin_org(org).await {
            let _ = super::mark_changed(&mut tx).await;
            let _ = tx.commit_quiet().await;
        }
    }
}

/// The recorded failure of the last refresh when nothing changed since (computing again would fail the same way).
async fn failure_standing(tx: &mut OrgTx) -> Result<Option<AppError>, AppError> {
    Ok(store::standing_failure(tx).await?.map(|(field, reason)| AppError::refused(field, reason)))
}

async fn compute_and_store(
    tx: &mut OrgTx,
    extra: Option<Period>,
    computing: &mut Option<Period>,
) -> Result<(), AppError> {
    // Whole microseconds, as PostgreSQL keeps `as_of`: what is computed "as of" it (the idle answer's own `as_of`)
    // then says the same instant as the stored figures.
    let now = OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(now.nanosecond() / 1_000 * 1_000).unwrap_or(now);
    for period in open_months(tx, now, extra).await? {
        *computing = Some(period);
        let started = Instant::now();
        // A part (in start order) at a time, the month and its "to date" cut from the same reads: the memory
        // is a part's, not the month's (docs/scaling.md, "The streamed close").
        let preview = match crate::close::preview_in_parts(tx, period, now).await {
            Ok(p) => p,
            // No approved policy covers the month: there is nothing to show but that (the pages say so).
            Err(AppError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        };
        let priced_ms = started.elapsed().as_millis() as u64;
        let notes = serde_json::to_value(&preview.ledger.notes).unwrap_or_default();
        let crate::close::PartsPreview { header, ledger, to_date } = preview;
        let (policy_version, currency) = (header.policy.version, header.policy.currency.clone());
        let to_date = Some(crate::figures::sums_json(&to_date)?);
        // This month's idle reservations at the snapshot's time, so `GET /api/v1/idle` is a lookup too. Not worth
        // failing the snapshot for: without them the endpoint computes, as before.
        let idle = if period == Period::containing(now) {
            match crate::analytics::idle_now(tx, now).await {
                Ok((list, departments)) => Some(
                    serde_json::to_value(super::StoredIdle { list, departments })
                        .map_err(|e| AppError::Internal(e.to_string()))?,
                ),
                Err(e) => {
                    tracing::warn!(period = %period, error = %e, "read model: idle reservations not stored");
                    None
                }
            }
        } else {
            None
        };
        let idle_ms = started.elapsed().as_millis() as u64 - priced_ms;
        super::store(
            tx,
            &Figures {
                period,
                state: FigState::Provisional,
                as_of: now,
                compute_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                policy_version,
                currency: &currency,
                hash: None,
                lines: &ledger.lines,
                notes,
                to_date,
                idle,
            },
        )
        .await?;
        tracing::info!(period = %period, priced_ms, idle_ms, stored_ms = started.elapsed().as_millis() as u64 - priced_ms - idle_ms,
                       "read model: month computed");
    }
    Ok(())
}

/// Runs the worker until the returned handle is dropped: every `tick`, refreshes the organizations that are due.
pub fn spawn(db: Database, options: RefreshOptions) -> Worker {
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(options.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let due = match db.cross_org_maintenance().read_refresh_due(options.quiet(), options.min_interval()).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "read model: could not list the organizations to refresh");
                    continue;
                }
            };
            for org in due {
                let started = Instant::now();
                match refresh(&db, org, Wait::GiveWay).await {
                    Ok(true) => {
                        tracing::info!(org = %org, ms = started.elapsed().as_millis() as u64, "read model refreshed")
                    }
                    Ok(false) => {}
                    // Recorded for the organization's admin (`read_failures`); retried as `record_failure` says.
                    Err(_) => {}
                }
            }
            summarize_due(&db).await;
        }
    });
    Worker(task)
}

/// Computes the summaries of the months whose figures changed (a snapshot, a close, a backfill), newest first.
pub async fn summarize_due(db: &Database) {
    let due = match db.cross_org_maintenance().read_summaries_due(16).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(error = %e, "read model: could not list the summaries to compute");
            return;
        }
    };
    for (org, month) in due {
        let Ok(period) = Period::from_date(month) else { continue };
        let started = Instant::now();
        match super::summaries::compute(db, org, period).await {
            Ok(true) => tracing::info!(
                org = %org, period = %period, ms = started.elapsed().as_millis() as u64, "read model summaries computed"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!(org = %org, period = %period, error = %e, "read model summaries failed; retrying"),
        }
    }
}

/// Brings `org`'s read model up to date now: its open months refreshed and the summaries of every month with
/// figures computed. The demo does this before it says it is ready, so its first readers find everything stored.
pub async fn settle(db: &Database, org: OrgId) -> Result<(), AppError> {
    refresh(db, org, Wait::Block).await?;
    // Bounded: each round computes what is due or waits for the process that is computing it.
    for _ in 0..600 {
        let due: Vec<time::Date> = db
            .cross_org_maintenance()
            .read_summaries_due(1_000)
            .await?
            .into_iter()
            .filter(|(o, _)| *o == org)
            .map(|(_, p)| p)
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let mut progressed = false;
        for month in due {
            progressed |= super::summaries::compute(db, org, Period::from_date(month)?).await?;
        }
        if !progressed {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Err(AppError::Internal("the read model's summaries did not settle".into()))
}

/// The running worker; stops when dropped.
pub struct Worker(tokio::task::JoinHandle<()>);

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.abort();
    }
}
