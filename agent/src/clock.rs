//! The agent's clock: the system clock, shifted by `--clock-skew-secs` so the fault simulator (`scripts/chaos`) can
//! run an agent whose clock is off, as on a node whose NTP is broken. Every time the agent stamps comes from here.

use std::sync::atomic::{AtomicI64, Ordering};

use time::{Duration, OffsetDateTime};

static SKEW_SECS: AtomicI64 = AtomicI64::new(0);

/// Shifts this process's clock by `secs` (positive: ahead of the real time).
pub fn set_skew(secs: i64) {
    SKEW_SECS.store(secs, Ordering::Relaxed);
}

/// Now, as this agent's clock reads it (UTC).
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc() + Duration::seconds(SKEW_SECS.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skew_shifts_the_clock() {
        let real = OffsetDateTime::now_utc();
        set_skew(-120);
        let skewed = now();
        set_skew(0);
        let d = (real - skewed).whole_seconds();
        assert!((119..=121).contains(&d), "{d}");
        assert!((now() - OffsetDateTime::now_utc()).whole_seconds().abs() <= 1);
    }
}
