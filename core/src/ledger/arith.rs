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
