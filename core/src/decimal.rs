//! Exact decimal numbers for money, rates and quantities.
//!
//! A [`Decimal`] is an exact rational whose denominator is a power of ten, written with a fixed number of digits
//! after the point. Inputs (rates, prices, quotas) are parsed exactly; computed values are exact [`Fraction`]s
//! until they are rounded **once**, half away from zero, when a ledger line is written. Never a float.

use std::{cmp::Ordering, fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::{error::DomainError, fraction::Fraction};

/// An exact, signed decimal with a display scale (`"2.10"` keeps its two digits): `units / 10^scale`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Decimal {
    units: i128,
    scale: u32,
}

const FIELD: &str = "decimal";
/// Most digits after the point a decimal may carry.
pub const MAX_SCALE: u32 = 12;

fn pow10(scale: u32) -> Result<i128, DomainError> {
    10_i128.checked_pow(scale).ok_or_else(|| DomainError::overflow("decimal scale"))
}

impl Decimal {
    /// Zero at scale 0.
    pub const ZERO: Decimal = Decimal { units: 0, scale: 0 };

    /// Parses `-?digits(.digits)?` exactly (no exponent, no thousands separators), at most [`MAX_SCALE`] decimals.
    pub fn parse(s: &str) -> Result<Self, DomainError> {
        let bad = |why: &str| DomainError::invalid(FIELD, format!("{s:?} is not a decimal number: {why}"));
        let t = s.trim();
        let (neg, body) = match t.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("expected digits with an optional '.' and decimals"));
        }
        if body.ends_with('.') {
            return Err(bad("no digits after the '.'"));
        }
        let scale = u32::try_from(frac.len()).map_err(|_| bad("too many decimals"))?;
        if scale > MAX_SCALE {
            return Err(bad("more than 12 decimals"));
        }
        if int.len() > 24 {
            return Err(bad("too large"));
        }
        let den = pow10(scale)?;
        let int_v: i128 = int.parse().map_err(|_| bad("too large"))?;
        let frac_v: i128 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| bad("too large"))? };
        let units = int_v.checked_mul(den).and_then(|v| v.checked_add(frac_v)).ok_or_else(|| bad("too large"))?;
        Ok(Self { units: if neg { -units } else { units }, scale })
    }

    /// Rounds an exact (non-negative) value to `scale` decimals, half away from zero.
    pub fn round(value: Fraction, scale: u32) -> Result<Self, DomainError> {
        Ok(Self { units: round_scaled(value, scale)?, scale })
    }

    /// An integer at scale 0.
    pub fn from_integer(n: i128) -> Result<Self, DomainError> {
        Ok(Self { units: n, scale: 0 })
    }

    /// From a number of minor units (`cents` at scale 2).
    pub fn from_scaled(units: i128, scale: u32) -> Result<Self, DomainError> {
        pow10(scale)?;
        Ok(Self { units, scale })
    }

    /// The magnitude as an exact fraction (for a negative decimal, check [`Decimal::is_negative`]).
    pub fn value(&self) -> Fraction {
        // |units| / 10^scale with scale <= MAX_SCALE cannot fail.
        Fraction::new(self.units.abs(), 10_i128.pow(self.scale)).unwrap_or(Fraction::ZERO)
    }

    /// Digits after the point when displayed.
    pub const fn scale(&self) -> u32 {
        self.scale
    }

    /// The value in minor units at this decimal's scale.
    pub const fn scaled_units(&self) -> i128 {
        self.units
    }

    /// True when the value is negative.
    pub const fn is_negative(&self) -> bool {
        self.units < 0
    }

    /// Units at a larger or equal scale (exact).
    fn units_at(&self, scale: u32) -> Result<i128, DomainError> {
        let f = pow10(scale.saturating_sub(self.scale))?;
        self.units.checked_mul(f).ok_or_else(|| DomainError::overflow("decimal rescale"))
    }

    /// Exact signed sum (at the larger scale).
    pub fn checked_add(&self, other: &Decimal) -> Result<Decimal, DomainError> {
        let scale = self.scale.max(other.scale);
        let units = self
            .units_at(scale)?
            .checked_add(other.units_at(scale)?)
            .ok_or_else(|| DomainError::overflow("decimal add"))?;
        Ok(Self { units, scale })
    }

    /// Exact signed difference (at the larger scale).
    pub fn checked_sub(&self, other: &Decimal) -> Result<Decimal, DomainError> {
        self.checked_add(&Self { units: -other.units, scale: other.scale })
    }

    /// The same value shown with `scale` decimals (must not lose digits).
    pub fn with_scale(&self, scale: u32) -> Result<Self, DomainError> {
        if scale >= self.scale {
            return Ok(Self { units: self.units_at(scale)?, scale });
        }
        let f = pow10(self.scale - scale)?;
        if self.units % f != 0 {
            return Err(DomainError::invalid(FIELD, format!("{self} has more than {scale} decimals")));
        }
        Ok(Self { units: self.units / f, scale })
    }

    /// The same value with trailing zero decimals dropped (`1.0000` → `1`, `2.50` → `2.5`).
    pub fn normalized(&self) -> Self {
        let mut d = *self;
        while d.scale > 0 && d.units % 10 == 0 {
            d.units /= 10;
            d.scale -= 1;
        }
        d
    }

    /// Written with thousands separators (`6,048.00`) for explanations meant for people.
    pub fn grouped(&self) -> String {
        let plain = self.to_string();
        let (sign, rest) = plain.strip_prefix('-').map_or(("", plain.as_str()), |r| ("-", r));
        let (int, frac) = rest.split_once('.').map_or((rest, None), |(i, f)| (i, Some(f)));
        let mut out = String::with_capacity(plain.len() + int.len() / 3);
        out.push_str(sign);
        for (i, c) in int.chars().enumerate() {
            if i > 0 && (int.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if let Some(f) = frac {
            out.push('.');
            out.push_str(f);
        }
        out
    }

    fn cmp_value(&self, other: &Self) -> Ordering {
        let scale = self.scale.max(other.scale);
        match (self.units_at(scale), other.units_at(scale)) {
            (Ok(a), Ok(b)) => a.cmp(&b),
            // Only reachable near i128's limits; fall back to the normalized forms.
            _ => {
                let (a, b) = (self.normalized(), other.normalized());
                (a.units.signum(), a.scale, a.units).cmp(&(b.units.signum(), b.scale, b.units))
            }
        }
    }
}

/// `value × 10^scale` rounded to an integer, half away from zero.
pub fn round_scaled(value: Fraction, scale: u32) -> Result<i128, DomainError> {
    let op = "decimal rounding";
    let pow = 10_i128.checked_pow(scale).ok_or_else(|| DomainError::overflow(op))?;
    let num = value.numer().checked_mul(pow).ok_or_else(|| DomainError::overflow(op))?;
    let den = value.denom();
    let q = num / den;
    let r = num % den;
    // |r| * 2 >= den → away from zero. den > 0 and |r| < den, so doubling cannot overflow.
    Ok(if r.unsigned_abs() * 2 >= den.unsigned_abs() { if num < 0 { q - 1 } else { q + 1 } } else { q })
}

/// `value × 10^scale` rounded down (toward negative infinity), and the exact remainder in units.
pub fn floor_scaled(value: Fraction, scale: u32) -> Result<(i128, Fraction), DomainError> {
    let op = "decimal floor";
    let pow = 10_i128.checked_pow(scale).ok_or_else(|| DomainError::overflow(op))?;
    let scaled = value.checked_mul_int(pow)?;
    let q = scaled.numer().div_euclid(scaled.denom());
    let rem = scaled.checked_sub(Fraction::from_integer(q)?)?;
    Ok((q, rem))
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.units.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let padded =
            if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
        let (int, frac) = padded.split_at(padded.len() - scale);
        if self.units < 0 {
            f.write_str("-")?;
        }
        f.write_str(int)?;
        if scale > 0 {
            f.write_str(".")?;
            f.write_str(frac)?;
        }
        Ok(())
    }
}

impl FromStr for Decimal {
    type Err = DomainError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for Decimal {
    type Error = DomainError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Decimal> for String {
    fn from(d: Decimal) -> Self {
        d.to_string()
    }
}

/// Equal when the values are equal, whatever the scale (`2.1 == 2.10`).
impl PartialEq for Decimal {
    fn eq(&self, other: &Self) -> bool {
        self.cmp_value(other) == Ordering::Equal
    }
}
impl Eq for Decimal {}
impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        self.cmp_value(other)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn parses_and_prints_exactly() {
        for s in ["2.10", "0", "-0.05", "6048.00", "0.000001", "123456789012.123456"] {
            assert_eq!(Decimal::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(Decimal::parse("2.10").unwrap(), Decimal::parse("2.1").unwrap());
        for bad in ["", "1e3", "1.", ".5", "1,000", "abc", "--1", "1.0000000000001"] {
            assert!(Decimal::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rounds_half_away_from_zero() {
        let r = |n, d, s| Decimal::round(Fraction::new(n, d).unwrap(), s).unwrap().to_string();
        assert_eq!(r(1, 8, 2), "0.13");
        assert_eq!(r(1, 7, 6), "0.142857");
        assert_eq!(r(6048, 1, 2), "6048.00");
    }

    #[test]
    fn normalizes() {
        assert_eq!(Decimal::parse("1.0000").unwrap().normalized().to_string(), "1");
        assert_eq!(Decimal::parse("2.50").unwrap().normalized().to_string(), "2.5");
        assert_eq!(Decimal::parse("0.000").unwrap().normalized().to_string(), "0");
    }

    #[test]
    fn groups_thousands() {
        assert_eq!(Decimal::parse("6048.00").unwrap().grouped(), "6,048.00");
        assert_eq!(Decimal::parse("-1234567.5").unwrap().grouped(), "-1,234,567.5");
        assert_eq!(Decimal::parse("720").unwrap().grouped(), "720");
    }

    #[test]
    fn floor_keeps_the_remainder() {
        let (q, rem) = floor_scaled(Fraction::new(1, 3).unwrap(), 2).unwrap();
        assert_eq!(q, 33);
        assert_eq!(rem, Fraction::new(1, 3).unwrap());
        let d = Decimal::parse("-25.00").unwrap();
        assert!(d.is_negative());
        assert_eq!(d.checked_add(&Decimal::parse("30").unwrap()).unwrap().to_string(), "5.00");
        assert_eq!(Decimal::parse("-0.5").unwrap().with_scale(2).unwrap().to_string(), "-0.50");
        assert!(Decimal::parse("-1").unwrap() < Decimal::parse("0.5").unwrap());
    }
}
