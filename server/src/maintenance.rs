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

/// Months back from the current one whose partitions the upkeep makes: the agents' backfill window, and the demo's
/// history (two months before its organization was created). On Citus a partition of a distributed table cannot be
/// made inside an organization's transaction (`begin_org`; Citus refuses the placements it touches as "modified in
/// this transaction by a different user"), so every month a request or the demo writes must come from here.
pub const MONTHS_BACK: u8 = 3;

/// One round: the partitions of [`MONTHS_BACK`] months back through [`MONTHS_AHEAD`] months ahead, plus any month
/// waiting in the default partition. Returns how many partitions it made.
pub async fn run_once(db: &Database, now: OffsetDateTime) -> Result<i32, DbError> {
    let this_month = now.date().replace_day(1).unwrap_or(now.date());
    let from = add_months(this_month, -i32::from(MONTHS_BACK));
    let through = add_months(this_month, i32::from(MONTHS_AHEAD));
    db.cross_org_maintenance().telemetry_partitions(from, through).await
}

/// Rows one upkeep transaction moves from `telemetry_rollups` into the tiers.
const LEGACY_CHUNK: i64 = 20_000;
/// Most rows one round moves per organization (the rest waits for the next round).
const LEGACY_PER_ROUND: u64 = 2_000_000;

/// Moves telemetry stored before the tiers (migration 26) into them, a chunk per transaction through the same merge
/// as ingest, deleting what it moved. Returns how many windows it moved.
pub async fn move_legacy_telemetry(db: &Database) -> Result<u64, DbError> {
    let mut moved = 0;
    for org in db.cross_org_maintenance().legacy_telemetry_orgs().await? {
        let mut this_org = 0;
        while this_org < LEGACY_PER_ROUND {
            let mut tx = db.begin_org(org).await?;
            let n = crate::telemetry::upgrade::move_legacy(&mut tx, LEGACY_CHUNK).await?;
            tx.commit().await?;
            this_org += n;
            if n == 0 {
                break;
            }
        }
        moved += this_org;
    }
    Ok(moved)
}

/// Moves telemetry stored one row per device-hour (migrations 26–30) into one row per GPU-hour, a chunk per
/// transaction, deleting what it moved. Returns how many device-hours it moved.
pub async fn move_old_tiers(db: &Database) -> Result<u64, DbError> {
    let mut moved = 0;
    for org in db.cross_org_maintenance().old_tier_orgs().await? {
        let mut this_org = 0;
        while this_org < LEGACY_PER_ROUND {
            let mut tx = db.begin_org(org).await?;
            let n = crate::telemetry::upgrade::move_tiers(&mut tx, LEGACY_CHUNK).await?;
            tx.commit().await?;
            this_org += n;
            if n == 0 {
                break;
            }
        }
        moved += this_org;
    }
    Ok(moved)
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
            match move_legacy_telemetry(&db).await {
                Ok(0) => {}
                Ok(moved) => tracing::info!(moved, "telemetry windows stored before the tiers moved into them"),
                Err(e) => {
                    tracing::warn!(error = %e, "moving telemetry into the tiers failed; retrying at the next round")
                }
            }
            match move_old_tiers(&db).await {
                Ok(0) => {}
                Ok(moved) => tracing::info!(moved, "device-hours stored before one row per GPU-hour moved"),
                Err(e) => {
                    tracing::warn!(error = %e, "moving device-hours into GPU-hours failed; retrying at the next round")
                }
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
