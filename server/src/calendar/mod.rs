//! The organization's calendar (issue 35 item 1): a period `YYYY-MM` is the calendar month of the organization's IANA
//! time zone (`org_settings.time_zone`, default `UTC`), from local midnight of the 1st to local midnight of the next
//! 1st — a DST month has 743 or 745 hours. The zone database is PostgreSQL's own (`AT TIME ZONE`, validated against
//! `pg_timezone_names`), so the server needs none of its own.
//!
//! A closed month keeps the instants it closed with (`periods.starts_at`/`ends_at`, and the bundle's ledger input):
//! a later change of zone never moves it. A change applies from the next open month: that month is the new zone's
//! calendar month (its `starts_at` is local midnight of the 1st), and when the closed month before it ended at
//! another instant, its charges **continue from** that instant (`continues_from`) — so the change leaves neither a
//! gap nor an overlap: hours the closed month charged are not charged again, hours it did not are not lost.

use gpuledger_core::{Period, ledger::MonthBounds};
use time::OffsetDateTime;

use crate::{db::OrgTx, error::AppError};

mod store;

/// The default zone.
pub const UTC: &str = "UTC";
/// Longest zone name kept (IANA names are at most ~30 characters).
pub const MAX_ZONE: usize = 64;

/// A month's instants in the organization's calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// The zone they were computed in.
    pub time_zone: String,
    /// First instant.
    pub start: OffsetDateTime,
    /// First instant after the month.
    pub end: OffsetDateTime,
    /// Where the charges begin when it is not `start`: the previous month closed at this instant (in another zone).
    pub continues_from: Option<OffsetDateTime>,
}

impl Bounds {
    /// The instants charged: from `continues_from` (else `start`) to `end`.
    pub fn charged(&self) -> (OffsetDateTime, OffsetDateTime) {
        (self.continues_from.unwrap_or(self.start), self.end)
    }
}

impl Bounds {
    /// As the ledger input carries them: `None` for UTC's own month (so a UTC organization's bundles hash as
    /// before).
    pub fn for_input(&self, period: Period) -> Result<Option<MonthBounds>, AppError> {
        let utc = period.interval()?;
        if self.start == utc.start() && self.end == utc.end() && self.time_zone == UTC && self.continues_from.is_none()
        {
            return Ok(None);
        }
        Ok(Some(MonthBounds {
            time_zone: self.time_zone.clone(),
            starts_at: self.start,
            ends_at: self.end,
            continues_from: self.continues_from,
        }))
    }
}

/// `period`'s instants for `tx`'s organization: a closed month's stored ones, else local midnight of the 1st (or
/// the previous closed month's end) to local midnight of the next 1st in the organization's zone.
pub async fn bounds(tx: &mut OrgTx, period: Period) -> Result<Bounds, AppError> {
    let (time_zone, start, end, prev_end) = store::month_instants(tx, period.first_day()).await?;
    // Only a previous month that ended elsewhere makes this one continue from it.
    let continues_from = prev_end.filter(|p| *p != start);
    if end <= start || continues_from.is_some_and(|c| c >= end) {
        return Err(AppError::Internal(format!("{period} in {time_zone} has no instants ({start} to {end})")));
    }
    Ok(Bounds { time_zone, start, end, continues_from })
}

/// The organization's zone now.
pub async fn zone(tx: &mut OrgTx) -> Result<String, AppError> {
    Ok(store::zone(tx).await?.unwrap_or_else(|| UTC.to_string()))
}

/// The month containing `at` in the organization's calendar (its zone now).
pub async fn month_of(tx: &mut OrgTx, at: OffsetDateTime) -> Result<Period, AppError> {
    let day = store::local_day(tx, at).await?;
    Ok(Period::new(day.year(), day.month())?)
}

/// Whether PostgreSQL knows `name` as a time zone (IANA names such as `Europe/Berlin`, and `UTC`). A name it does not
/// know is well-formed text refused by the zone database: 409 naming `field` (a field of the wrong type is 422).
pub async fn check_zone(tx: &mut OrgTx, field: &str, name: &str) -> Result<(), AppError> {
    let plausible = !name.is_empty()
        && name.len() <= MAX_ZONE
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'+'));
    let known = plausible && store::zone_known(tx, name).await?;
    if !known {
        return Err(AppError::refused(
            field,
            format!("{name:?} is not an IANA time zone (such as Europe/Berlin or UTC)"),
        ));
    }
    Ok(())
}

/// `[start, end)` of `period` as UTC's calendar month: for what is keyed by UTC months (the exports' month keys,
/// the synthetic fleet's start), not for what a month charges (see [`charged_bounds`]).
pub fn utc_bounds(period: Period) -> Result<(OffsetDateTime, OffsetDateTime), AppError> {
    let i = period.interval()?;
    Ok((i.start(), i.end()))
}

/// `[start, end)` of what `period` charges in `tx`'s organization's calendar: its zone's month,
/// continuing from where the previous closed month ended after a change of zone.
pub async fn charged_bounds(tx: &mut OrgTx, period: Period) -> Result<(OffsetDateTime, OffsetDateTime), AppError> {
    Ok(bounds(tx, period).await?.charged())
}
