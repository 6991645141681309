//! Arithmetic shared by the charge terms: hours, clipping to the period, rounding money and quantities, the
//! largest-remainder distribution.

use time::OffsetDateTime;

use super::{AMOUNT_SCALE, QUANTITY_SCALE};
use crate::{
    decimal::{Decimal, floor_scaled, round_scaled},
    error::DomainError,
    fraction::Fraction,
    interval::{Interval, NANOS_PER_HOUR},
};

/// Least common multiple of two positive integers.
pub(super) fn lcm(a: i128, b: i128) -> Result<i128, DomainError> {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    (a / x).checked_mul(b).ok_or_else(|| DomainError::overflow("lcm"))
}

pub(super) fn hours(nanos: Fraction) -> Result<Fraction, DomainError> {
    nanos.checked_div(Fraction::from_integer(NANOS_PER_HOUR)?)
}

pub(super) fn clip(start: OffsetDateTime, end: Option<OffsetDateTime>, p: &Interval) -> Option<(i128, i128)> {
    let s = start.max(p.start());
    let e = end.map_or(p.end(), |e| e.min(p.end()));
    (e > s).then(|| (s.unix_timestamp_nanos(), e.unix_timestamp_nanos()))
}

pub(super) fn money(value: Fraction) -> Result<Decimal, DomainError> {
    Decimal::round(value, AMOUNT_SCALE)
}

pub(super) fn qty(value: Fraction) -> Result<Decimal, DomainError> {
    Decimal::round(value, QUANTITY_SCALE)
}

/// Splits `total` (rounded to cents) among `weights` by the largest-remainder method: the parts add up to the
/// rounded total exactly; ties go to the earlier weight.
pub fn distribute(total: Fraction, weights: &[Fraction]) -> Result<Vec<Decimal>, DomainError> {
    let total_cents = round_scaled(total, AMOUNT_SCALE)?;
    let sum = weights.iter().try_fold(Fraction::ZERO, |a, w| a.checked_add(*w))?;
    if weights.is_empty() || sum.is_zero() {
        return Ok(vec![Decimal::from_scaled(0, AMOUNT_SCALE)?; weights.len()]);
    }
    let total_exact = Fraction::from_integer(total_cents)?;
    let mut parts = Vec::with_capacity(weights.len());
    let mut given = 0_i128;
    for w in weights {
        let share = total_exact.checked_mul(*w)?.checked_div(sum)?;
        let (floor, rem) = floor_scaled(share, 0)?;
        given += floor;
        parts.push((floor, rem));
    }
    let mut left = total_cents - given;
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|a, b| parts[*b].1.cmp(&parts[*a].1).then(a.cmp(b)));
    let step = if left < 0 { -1 } else { 1 };
    let mut i = 0;
    while left != 0 && !order.is_empty() {
        parts[order[i % order.len()]].0 += step;
        left -= step;
        i += 1;
    }
    parts.into_iter().map(|(c, _)| Decimal::from_scaled(c, AMOUNT_SCALE)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use time::macros::datetime;

    use super::*;

    #[test]
    fn lcm_of_denominators() {
        assert_eq!(lcm(4, 6).unwrap(), 12);
        assert_eq!(lcm(7, 1).unwrap(), 7);
        assert_eq!(lcm(5, 5).unwrap(), 5);
        assert!(lcm(i128::MAX, i128::MAX - 1).is_err());
    }

    #[test]
    fn clip_to_the_period() {
        let p = Interval::new(datetime!(2026-10-01 00:00 UTC), datetime!(2026-11-01 00:00 UTC)).unwrap();
        let ns = |t: OffsetDateTime| t.unix_timestamp_nanos();
        // Started before, still open: counted from the period start to its end.
        assert_eq!(clip(datetime!(2026-09-20 00:00 UTC), None, &p), Some((ns(p.start()), ns(p.end()))));
        let (s, e) = (datetime!(2026-10-02 00:00 UTC), datetime!(2026-10-03 00:00 UTC));
        assert_eq!(clip(s, Some(e), &p), Some((ns(s), ns(e))));
        // Outside or empty: nothing.
        assert_eq!(clip(datetime!(2026-09-01 00:00 UTC), Some(p.start()), &p), None);
        assert_eq!(clip(p.end(), None, &p), None);
        assert_eq!(clip(s, Some(s), &p), None);
    }

    #[test]
    fn hours_money_and_quantities() {
        assert_eq!(
            hours(Fraction::from_integer(NANOS_PER_HOUR * 3).unwrap()).unwrap(),
            Fraction::from_integer(3).unwrap()
        );
        assert_eq!(money(Fraction::new(1, 200).unwrap()).unwrap().to_string(), "0.01");
        assert_eq!(qty(Fraction::new(1, 3).unwrap()).unwrap().to_string(), "0.333333");
    }

    #[test]
    fn distribute_adds_up_and_gives_ties_to_the_earlier() {
        let third = Fraction::ONE;
        let parts = distribute(Fraction::from_integer(1).unwrap(), &[third, third, third]).unwrap();
        let cents: Vec<String> = parts.iter().map(ToString::to_string).collect();
        assert_eq!(cents, ["0.34", "0.33", "0.33"]);
        let none = distribute(Fraction::from_integer(5).unwrap(), &[Fraction::ZERO, Fraction::ZERO]).unwrap();
        assert!(none.iter().all(|d| d.value().is_zero()));
        assert!(distribute(Fraction::ONE, &[]).unwrap().is_empty());
    }
}
