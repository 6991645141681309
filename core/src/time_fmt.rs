//! Formatting instants the way answers, exports and evidence carry them: RFC 3339 in UTC.
//!
//! One place for it, so every caller writes the same form (`2026-10-01T00:00:00Z`, fractional seconds only when
//! there are any) and none needs its own `unwrap_or_default` around a formatter.

use time::{OffsetDateTime, UtcOffset, format_description::well_known::Rfc3339};

use crate::error::DomainError;

/// `t` in UTC as RFC 3339, or an error when it cannot be written so (a year outside 0000..=9999).
pub fn try_rfc3339(t: OffsetDateTime) -> Result<String, DomainError> {
    t.to_offset(UtcOffset::UTC)
        .format(&Rfc3339)
        .map_err(|e| DomainError::invalid("time", format!("{t} cannot be written as RFC 3339: {e}")))
}

/// `t` in UTC as RFC 3339. Never panics: a year RFC 3339 cannot hold (outside 0000..=9999) is written in `time`'s
/// own display form instead, so the instant is still shown rather than lost.
pub fn rfc3339(t: OffsetDateTime) -> String {
    try_rfc3339(t).unwrap_or_else(|_| t.to_offset(UtcOffset::UTC).to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use time::{Duration, macros::datetime};

    use super::*;

    #[test]
    fn utc_with_z_and_fractions_only_when_present() {
        assert_eq!(rfc3339(datetime!(2026-10-01 00:00 UTC)), "2026-10-01T00:00:00Z");
        assert_eq!(rfc3339(datetime!(2026-10-01 02:30 +02:00)), "2026-10-01T00:30:00Z");
        assert_eq!(rfc3339(datetime!(2026-12-31 23:30 -01:00)), "2027-01-01T00:30:00Z");
        assert_eq!(rfc3339(datetime!(2026-10-01 10:00:00.5 UTC)), "2026-10-01T10:00:00.5Z");
        assert_eq!(try_rfc3339(datetime!(2026-10-01 00:00 UTC)).unwrap(), "2026-10-01T00:00:00Z");
    }

    #[test]
    fn round_trips_through_the_parser() {
        let t = datetime!(2026-02-28 23:59:59.123456789 UTC);
        let s = rfc3339(t);
        assert_eq!(OffsetDateTime::parse(&s, &Rfc3339).unwrap(), t);
    }

    #[test]
    fn out_of_range_years_do_not_panic() {
        let before_year_zero = datetime!(0000-01-01 00:00 UTC) - Duration::days(1);
        assert!(try_rfc3339(before_year_zero).is_err());
        assert!(!rfc3339(before_year_zero).is_empty());
        assert!(!rfc3339(OffsetDateTime::new_utc(time::Date::MIN, time::Time::MIDNIGHT)).is_empty());
    }
}
