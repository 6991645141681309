//! The server's own upkeep, off the request path: telemetry partitions are made ahead of the months they hold
//! (and for months whose windows arrived early or late and wait in the default partition), so no request ever
//! runs DDL on a table every organization shares.

use std::time::Duration;

use time::{Date, OffsetDateTime};

use crate::db::{Database, DbError};

/// How often the upkeep runs.
pub const INTERVAL: Duration = Duration::from_secs(600);

/// Months ahead of the current one whose partitions exist at all times.
pub const MONTHS_AHEAD: u8 = 2;

/// One round: the partitions of last month through [`MONTHS_AHEAD`] months ahead, plus any month waiting in the
/// default partition. Returns how many partitions it made.
pub async fn run_once(db: &Database, now: OffsetDateTime) -> Result<i32, DbError> {
    let this_month = now.date().replace_day(1).unwrap_or(now.date());
    let from = add_months(this_month, -1);
    let through = add_months(this_month, i32::from(MONTHS_AHEAD));
    db.cross_org_maintenance().telemetry_partitions(from, through).await
}

/// The first day of the month `n` months from `d`'s (core's month arithmetic; a year out of range keeps `d`).
fn add_months(d: Date, n: i32) -> Date {
    gpuledger_core::Period::from_date(d).and_then(|p| p.add_months(n)).map_or(d, |p| p.first_day())
}

/// Runs [`run_once`] now and every [`INTERVAL`] until the returned handle is dropped. A failed round is logged and
/// retried at the next one (ingest does not depend on it: a window without its partition waits in the default).
pub fn spawn(db: Database) -> Maintenance {
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match run_once(&db, OffsetDateTime::now_utc()).await {
                Ok(0) => {}
                Ok(made) => tracing::info!(made, "telemetry partitions made"),
                Err(e) => tracing::warn!(error = %e, "telemetry partition upkeep failed; retrying at the next round"),
            }
        }
    });
    Maintenance(task)
}

/// The running upkeep; stops when dropped.
pub struct Maintenance(tokio::task::JoinHandle<()>);

impl Drop for Maintenance {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::date;

    #[test]
    fn months_move_across_years() {
        assert_eq!(add_months(date!(2026 - 12 - 01), 1), date!(2027 - 01 - 01));
        assert_eq!(add_months(date!(2026 - 01 - 01), -1), date!(2025 - 12 - 01));
        assert_eq!(add_months(date!(2026 - 11 - 01), 2), date!(2027 - 01 - 01));
    }
}
