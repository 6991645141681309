//! Time: half-open UTC intervals, open-ended validity periods and calendar-month periods.
//!
//! All instants are normalised to UTC on construction, so comparisons and Display never
//! depend on the offset a caller happened to use. Durations are kept as exact `i128`
//! nanoseconds: an hour split seven ways must stay exact until it is priced.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use time::{Date, Month, OffsetDateTime, Time, UtcOffset};

use crate::error::DomainError;

/// Nanoseconds in one hour.
pub const NANOS_PER_HOUR: i128 = 3_600_000_000_000;
/// Nanoseconds in one second.
pub const NANOS_PER_SECOND: i128 = 1_000_000_000;

fn utc(t: OffsetDateTime) -> OffsetDateTime {
    t.to_offset(UtcOffset::UTC)
}

/// A half-open interval `[start, end)` in UTC. `start == end` is allowed and is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "IntervalRepr")]
pub struct Interval {
    #[serde(with = "time::serde::rfc3339")]
    start: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    end: OffsetDateTime,
}

#[derive(Deserialize)]
struct IntervalRepr {
    #[serde(with = "time::serde::rfc3339")]
    start: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    end: OffsetDateTime,
}

impl TryFrom<IntervalRepr> for Interval {
    type Error = DomainError;

    fn try_from(r: IntervalRepr) -> Result<Self, Self::Error> {
        Self::new(r.start, r.end)
    }
}

impl Interval {
    /// Builds `[start, end)`, converting both to UTC. Rejects `end < start`.
    pub fn new(start: OffsetDateTime, end: OffsetDateTime) -> Result<Self, DomainError> {
        let (start, end) = (utc(start), utc(end));
        if end < start {
            return Err(DomainError::invalid("interval", format!("end {end} is before start {start}")));
        }
        Ok(Self { start, end })
    }

    /// Inclusive start (UTC).
    pub const fn start(&self) -> OffsetDateTime {
        self.start
    }

    /// Exclusive end (UTC).
    pub const fn end(&self) -> OffsetDateTime {
        self.end
    }

    /// True when the interval holds no instant.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Exact length in nanoseconds (never negative).
    pub fn duration_nanos(&self) -> i128 {
        (self.end - self.start).whole_nanoseconds()
    }

    /// Whether `t` lies in `[start, end)`.
    pub fn contains(&self, t: OffsetDateTime) -> bool {
        self.start <= t && t < self.end
    }

    /// The common part of two intervals, or `None` when it would be empty.
    pub fn intersect(&self, other: &Interval) -> Option<Interval> {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        (start < end).then_some(Interval { start, end })
    }

    /// Whether the two intervals share at least one instant.
    pub fn overlaps(&self, other: &Interval) -> bool {
        self.intersect(other).is_some()
    }

    /// Splits at `t` into `[start, t)` and `[t, end)`; `None` unless `start < t < end`.
    pub fn split_at(&self, t: OffsetDateTime) -> Option<(Interval, Interval)> {
        let t = utc(t);
        (self.start < t && t < self.end)
            .then_some((Interval { start: self.start, end: t }, Interval { start: t, end: self.end }))
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}

/// The validity of a relationship or inventory entry: `[from, to)`, open-ended while `to` is
/// `None`. Relationships are closed by setting `to`, never overwritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "ValidityRepr")]
pub struct Validity {
    #[serde(with = "time::serde::rfc3339")]
    from: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    to: Option<OffsetDateTime>,
}

#[derive(Deserialize)]
struct ValidityRepr {
    #[serde(with = "time::serde::rfc3339")]
    from: OffsetDateTime,
    #[serde(default, with = "time::serde::rfc3339::option")]
    to: Option<OffsetDateTime>,
}

impl TryFrom<ValidityRepr> for Validity {
    type Error = DomainError;

    fn try_from(r: ValidityRepr) -> Result<Self, Self::Error> {
        Self::new(r.from, r.to)
    }
}

impl Validity {
    /// Builds `[from, to)` in UTC; rejects `to < from`.
    pub fn new(from: OffsetDateTime, to: Option<OffsetDateTime>) -> Result<Self, DomainError> {
        let from = utc(from);
        let to = to.map(utc);
        if let Some(to) = to
            && to < from
        {
            return Err(DomainError::invalid("validity", format!("to {to} is before from {from}")));
        }
        Ok(Self { from, to })
    }

    /// Open-ended validity starting at `from`.
    pub fn open(from: OffsetDateTime) -> Self {
        Self { from: utc(from), to: None }
    }

    /// Inclusive start (UTC).
    pub const fn from(&self) -> OffsetDateTime {
        self.from
    }

    /// Exclusive end (UTC), `None` while still valid.
    pub const fn to(&self) -> Option<OffsetDateTime> {
        self.to
    }

    /// Whether `t` lies in `[from, to)`.
    pub fn contains(&self, t: OffsetDateTime) -> bool {
        self.from <= t && self.to.is_none_or(|to| t < to)
    }

    /// The part of `interval` inside this validity, or `None` when empty.
    pub fn intersect(&self, interval: &Interval) -> Option<Interval> {
        let start = interval.start.max(self.from);
        let end = match self.to {
            Some(to) => interval.end.min(to),
            None => interval.end,
        };
        (start < end).then_some(Interval { start, end })
    }

    /// Whether two validities share at least one instant.
    pub fn overlaps(&self, other: &Validity) -> bool {
        let start = self.from.max(other.from);
        match (self.to, other.to) {
            (None, None) => true,
            (Some(a), None) | (None, Some(a)) => start < a,
            (Some(a), Some(b)) => start < a.min(b),
        }
    }
}

/// A calendar month in UTC, written `YYYY-MM`: the unit that is closed in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Period {
    year: i32,
    month: Month,
}

impl Period {
    /// Builds a period; the year must be in 1..=9999 so that `YYYY-MM` round-trips.
    pub fn new(year: i32, month: Month) -> Result<Self, DomainError> {
        if !(1..=9999).contains(&year) {
            return Err(DomainError::invalid("period.year", format!("{year} is outside 1..=9999")));
        }
        Ok(Self { year, month })
    }

    /// Parses `YYYY-MM` strictly (four-digit year, two-digit month).
    pub fn parse(s: &str) -> Result<Self, DomainError> {
        let bytes = s.as_bytes();
        if !s.is_ascii() || bytes.len() != 7 || bytes[4] != b'-' {
            return Err(DomainError::invalid("period", format!("{s:?} is not in YYYY-MM form")));
        }
        let digits = |part: &str, field: &'static str| -> Result<u16, DomainError> {
            if !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(DomainError::invalid(field, format!("{part:?} is not a number")));
            }
            part.parse().map_err(|_| DomainError::invalid(field, format!("{part:?} is not a number")))
        };
        let year = digits(&s[..4], "period.year")?;
        let month = digits(&s[5..], "period.month")?;
        let month = u8::try_from(month)
            .ok()
            .and_then(|m| Month::try_from(m).ok())
            .ok_or_else(|| DomainError::invalid("period.month", format!("{month} is not in 01..=12")))?;
        Self::new(i32::from(year), month)
    }

    /// The period containing instant `t` (taken in UTC).
    pub fn containing(t: OffsetDateTime) -> Self {
        let t = utc(t);
        Self { year: t.year(), month: t.month() }
    }

    /// The year.
    pub const fn year(&self) -> i32 {
        self.year
    }

    /// The month.
    pub const fn month(&self) -> Month {
        self.month
    }

    fn first_instant(year: i32, month: Month) -> Result<OffsetDateTime, DomainError> {
        Date::from_calendar_date(year, month, 1)
            .map(|d| d.with_time(Time::MIDNIGHT).assume_utc())
            .map_err(|e| DomainError::invalid("period", e.to_string()))
    }

    /// `[first instant of the month, first instant of the next month)` in UTC.
    pub fn interval(&self) -> Result<Interval, DomainError> {
        let next = self.next()?;
        Interval::new(Self::first_instant(self.year, self.month)?, Self::first_instant(next.year, next.month)?)
    }

    /// The following month.
    pub fn next(&self) -> Result<Self, DomainError> {
        match self.month {
            Month::December => Self::new(self.year + 1, Month::January),
            m => Self::new(self.year, m.next()),
        }
    }

    /// The preceding month.
    pub fn prev(&self) -> Result<Self, DomainError> {
        match self.month {
            Month::January => Self::new(self.year - 1, Month::December),
            m => Self::new(self.year, m.previous()),
        }
    }

    /// The month of a calendar date; an error when its year is outside 1..=9999 (see [`Period::new`]).
    pub fn from_date(d: Date) -> Result<Self, DomainError> {
        Self::new(d.year(), d.month())
    }

    /// The first day of the month.
    pub fn first_day(&self) -> Date {
        // A Period's year is in 1..=9999 and day 1 exists in every month, so the fallback is never taken; it only
        // keeps this infallible without a panic path.
        Date::from_calendar_date(self.year, self.month, 1).unwrap_or(Date::MIN)
    }

    /// The last day of the month (28th to 31st).
    pub fn last_day(&self) -> Date {
        let first = self.first_day();
        // Month::length gives a day that exists in that month, so the fallback is never taken either.
        first.replace_day(self.month.length(self.year)).unwrap_or(first)
    }

    /// The first instant of the month, midnight UTC on [`Period::first_day`]: the start of [`Period::interval`].
    pub fn start(&self) -> OffsetDateTime {
        self.first_day().with_time(Time::MIDNIGHT).assume_utc()
    }

    /// The month `months` after this one (negative: before); an error when that leaves years 1..=9999.
    pub fn add_months(&self, months: i32) -> Result<Self, DomainError> {
        // Months counted from January of year 0, so that the year and month fall out of one division.
        let index = i64::from(self.year) * 12 + i64::from(u8::from(self.month)) - 1 + i64::from(months);
        let year = i32::try_from(index.div_euclid(12))
            .map_err(|_| DomainError::invalid("period.year", format!("{months} months from {self} is out of range")))?;
        let month = u8::try_from(index.rem_euclid(12) + 1)
            .ok()
            .and_then(|m| Month::try_from(m).ok())
            .ok_or_else(|| DomainError::invalid("period.month", format!("{months} months from {self}")))?;
        Self::new(year, month)
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, u8::from(self.month))
    }
}

impl FromStr for Period {
    type Err = DomainError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for Period {
    type Error = DomainError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Period> for String {
    fn from(p: Period) -> Self {
        p.to_string()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::{date, datetime};

    #[test]
    fn interval_basics() {
        let i = Interval::new(datetime!(2026-10-01 10:00 UTC), datetime!(2026-10-01 12:00 UTC)).unwrap();
        assert_eq!(i.duration_nanos(), 2 * NANOS_PER_HOUR);
        assert!(i.contains(datetime!(2026-10-01 10:00 UTC)));
        assert!(!i.contains(datetime!(2026-10-01 12:00 UTC)));
        let j = Interval::new(datetime!(2026-10-01 11:00 UTC), datetime!(2026-10-01 13:00 UTC)).unwrap();
        let k = i.intersect(&j).unwrap();
        assert_eq!(k.start(), datetime!(2026-10-01 11:00 UTC));
        assert_eq!(k.end(), datetime!(2026-10-01 12:00 UTC));
        let adjacent = Interval::new(datetime!(2026-10-01 12:00 UTC), datetime!(2026-10-01 13:00 UTC)).unwrap();
        assert!(!i.overlaps(&adjacent));
        assert!(i.overlaps(&j));
        let empty = Interval::new(i.start(), i.start()).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.duration_nanos(), 0);
        assert!(Interval::new(i.end(), i.start()).is_err());
    }

    #[test]
    fn interval_normalises_to_utc() {
        let i = Interval::new(datetime!(2026-10-01 12:00 +02:00), datetime!(2026-10-01 12:00 UTC)).unwrap();
        assert_eq!(i.start().offset(), UtcOffset::UTC);
        assert_eq!(i.start(), datetime!(2026-10-01 10:00 UTC));
        assert_eq!(i.duration_nanos(), 2 * NANOS_PER_HOUR);
    }

    #[test]
    fn interval_json_round_trip_and_rejects_reversed() {
        let i = Interval::new(datetime!(2026-10-01 10:00:00.5 UTC), datetime!(2026-10-01 12:00 UTC)).unwrap();
        let json = serde_json::to_string(&i).unwrap();
        assert_eq!(serde_json::from_str::<Interval>(&json).unwrap(), i);
        let reversed = r#"{"start":"2026-10-02T00:00:00Z","end":"2026-10-01T00:00:00Z"}"#;
        assert!(serde_json::from_str::<Interval>(reversed).is_err());
    }

    #[test]
    fn validity_contains_and_intersect() {
        let v = Validity::new(datetime!(2026-10-01 12:00 UTC), Some(datetime!(2026-10-02 00:00 UTC))).unwrap();
        assert!(v.contains(datetime!(2026-10-01 12:00 UTC)));
        assert!(!v.contains(datetime!(2026-10-02 00:00 UTC)));
        let open = Validity::open(datetime!(2026-10-02 00:00 UTC));
        assert!(!v.overlaps(&open));
        assert!(open.contains(datetime!(2100-01-01 00:00 UTC)));
        let i = Interval::new(datetime!(2026-10-01 10:00 UTC), datetime!(2026-10-01 14:00 UTC)).unwrap();
        let part = v.intersect(&i).unwrap();
        assert_eq!(part.duration_nanos(), 2 * NANOS_PER_HOUR);
        assert!(open.intersect(&i).is_none());
        assert!(Validity::new(datetime!(2026-10-02 00:00 UTC), Some(datetime!(2026-10-01 00:00 UTC))).is_err());
    }

    #[test]
    fn period_parse_display_and_navigation() {
        let p = Period::parse("2026-10").unwrap();
        assert_eq!(p.to_string(), "2026-10");
        let i = p.interval().unwrap();
        assert_eq!(i.start(), datetime!(2026-10-01 00:00 UTC));
        assert_eq!(i.end(), datetime!(2026-11-01 00:00 UTC));
        assert_eq!(i.duration_nanos(), 31 * 24 * NANOS_PER_HOUR);
        assert_eq!(Period::parse("2026-12").unwrap().next().unwrap().to_string(), "2027-01");
        assert_eq!(Period::parse("2026-01").unwrap().prev().unwrap().to_string(), "2025-12");
        assert_eq!(Period::parse("2028-02").unwrap().interval().unwrap().duration_nanos(), 29 * 24 * NANOS_PER_HOUR);
        assert_eq!(Period::containing(datetime!(2026-10-31 23:30 -01:00)).to_string(), "2026-11");
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"2026-10\"");
        assert_eq!(serde_json::from_str::<Period>("\"2026-10\"").unwrap(), p);
    }

    #[test]
    fn period_days_start_and_month_arithmetic() {
        let p = Period::parse("2028-02").unwrap();
        assert_eq!(p.first_day(), date!(2028 - 02 - 01));
        assert_eq!(p.last_day(), date!(2028 - 02 - 29));
        assert_eq!(Period::parse("2026-02").unwrap().last_day(), date!(2026 - 02 - 28));
        assert_eq!(Period::parse("2026-12").unwrap().last_day(), date!(2026 - 12 - 31));
        assert_eq!(Period::parse("9999-12").unwrap().last_day(), date!(9999 - 12 - 31));
        assert_eq!(Period::parse("0001-01").unwrap().first_day(), date!(0001 - 01 - 01));
        assert_eq!(p.start(), datetime!(2028-02-01 00:00 UTC));
        assert_eq!(p.start(), p.interval().unwrap().start());
        assert_eq!(Period::from_date(date!(2026 - 10 - 17)).unwrap().to_string(), "2026-10");
        assert_eq!(Period::from_date(p.last_day()).unwrap(), p);
        assert!(Period::from_date(date!(-0001 - 06 - 01)).is_err());
        assert_eq!(Period::containing(p.start()), p);
        let q = Period::parse("2026-11").unwrap();
        assert_eq!(q.add_months(0).unwrap(), q);
        assert_eq!(q.add_months(1).unwrap(), q.next().unwrap());
        assert_eq!(q.add_months(-1).unwrap(), q.prev().unwrap());
        assert_eq!(q.add_months(2).unwrap().to_string(), "2027-01");
        assert_eq!(q.add_months(-11).unwrap().to_string(), "2025-12");
        assert_eq!(q.add_months(-23).unwrap().to_string(), "2024-12");
        assert_eq!(q.add_months(26).unwrap().to_string(), "2029-01");
        assert!(Period::parse("9999-12").unwrap().next().is_err());
        assert!(Period::parse("9999-12").unwrap().add_months(1).is_err());
        assert!(Period::parse("0001-01").unwrap().add_months(-1).is_err());
        assert!(q.add_months(i32::MAX).is_err());
        assert!(q.add_months(i32::MIN).is_err());
    }

    #[test]
    fn period_parse_errors_name_the_field() {
        let field = |s: &str| match Period::parse(s).unwrap_err() {
            DomainError::Invalid { field, .. } => field,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(field("2026-13"), "period.month");
        assert_eq!(field("2026-00"), "period.month");
        assert_eq!(field("2026-1x"), "period.month");
        assert_eq!(field("20x6-10"), "period.year");
        assert_eq!(field("0000-10"), "period.year");
        assert_eq!(field("2026/10"), "period");
        assert_eq!(field("2026-1"), "period");
        assert_eq!(field(""), "period");
        assert_eq!(field("20é-10"), "period");
        assert!(serde_json::from_str::<Period>("\"2026-13\"").is_err());
    }
}
