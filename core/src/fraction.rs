//! Exact non-negative rationals and GPU-time quantities.
//!
//! Money is computed from these, so nothing here rounds or wraps: a 1g.10gb MIG slice is
//! exactly 1/7 of a GPU until a price is applied, and every operation that could exceed
//! `i128` returns [`DomainError::Overflow`] instead of panicking.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::DomainError;
use crate::interval::{NANOS_PER_HOUR, NANOS_PER_SECOND};

const FIELD: &str = "fraction";

const fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// An exact non-negative rational number, always stored in lowest terms with a positive
/// denominator (so derived equality is value equality).
///
/// Serialized as a string, `"n/d"` or `"n"`, because JSON numbers cannot carry `i128`
/// exactly to every consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Fraction {
    num: i128,
    den: i128,
}

impl Fraction {
    /// Zero.
    pub const ZERO: Fraction = Fraction { num: 0, den: 1 };
    /// One.
    pub const ONE: Fraction = Fraction { num: 1, den: 1 };

    /// Builds `num / den` in lowest terms. Rejects a zero denominator and negative values;
    /// two negative parts are accepted as a positive value.
    pub fn new(num: i128, den: i128) -> Result<Self, DomainError> {
        if den == 0 {
            return Err(DomainError::invalid(FIELD, "denominator is zero"));
        }
        if num != 0 && (num < 0) != (den < 0) {
            return Err(DomainError::invalid(FIELD, format!("{num}/{den} is negative")));
        }
        Self::from_unsigned(num.unsigned_abs(), den.unsigned_abs())
    }

    fn from_unsigned(num: u128, den: u128) -> Result<Self, DomainError> {
        let g = gcd(num, den);
        let (num, den) = if g > 1 { (num / g, den / g) } else { (num, den) };
        let den = if num == 0 { 1 } else { den };
        Ok(Self {
            num: i128::try_from(num).map_err(|_| DomainError::overflow("fraction new"))?,
            den: i128::try_from(den).map_err(|_| DomainError::overflow("fraction new"))?,
        })
    }

    /// A whole number; rejects negatives.
    pub fn from_integer(n: i128) -> Result<Self, DomainError> {
        Self::new(n, 1)
    }

    /// Numerator (lowest terms, `>= 0`).
    pub const fn numer(&self) -> i128 {
        self.num
    }

    /// Denominator (lowest terms, `> 0`).
    pub const fn denom(&self) -> i128 {
        self.den
    }

    /// Whether the value is zero.
    pub const fn is_zero(&self) -> bool {
        self.num == 0
    }

    /// `self + other`, exactly.
    pub fn checked_add(self, other: Fraction) -> Result<Fraction, DomainError> {
        const OP: &str = "fraction add";
        let g = gcd(self.den.unsigned_abs(), other.den.unsigned_abs()) as i128;
        let num = self
            .num
            .checked_mul(other.den / g)
            .and_then(|a| other.num.checked_mul(self.den / g).and_then(|b| a.checked_add(b)))
            .ok_or_else(|| DomainError::overflow(OP))?;
        let den = self.den.checked_mul(other.den / g).ok_or_else(|| DomainError::overflow(OP))?;
        Self::new(num, den)
    }

    /// `self - other`, exactly; an error if the result would be negative.
    pub fn checked_sub(self, other: Fraction) -> Result<Fraction, DomainError> {
        const OP: &str = "fraction sub";
        if other > self {
            return Err(DomainError::invalid(FIELD, format!("{self} - {other} would be negative")));
        }
        let g = gcd(self.den.unsigned_abs(), other.den.unsigned_abs()) as i128;
        let num = self
            .num
            .checked_mul(other.den / g)
            .and_then(|a| other.num.checked_mul(self.den / g).and_then(|b| a.checked_sub(b)))
            .ok_or_else(|| DomainError::overflow(OP))?;
        let den = self.den.checked_mul(other.den / g).ok_or_else(|| DomainError::overflow(OP))?;
        Self::new(num, den)
    }

    /// `max(0, self - other)`, exactly.
    pub fn sub_or_zero(self, other: Fraction) -> Result<Fraction, DomainError> {
        if other >= self { Ok(Self::ZERO) } else { self.checked_sub(other) }
    }

    /// `self × other`, exactly (cross-reduced first to keep intermediates small).
    pub fn checked_mul(self, other: Fraction) -> Result<Fraction, DomainError> {
        const OP: &str = "fraction mul";
        let g1 = gcd(self.num.unsigned_abs(), other.den.unsigned_abs()).max(1) as i128;
        let g2 = gcd(other.num.unsigned_abs(), self.den.unsigned_abs()).max(1) as i128;
        let num = (self.num / g1).checked_mul(other.num / g2).ok_or_else(|| DomainError::overflow(OP))?;
        let den = (self.den / g2).checked_mul(other.den / g1).ok_or_else(|| DomainError::overflow(OP))?;
        Self::new(num, den)
    }

    /// `self ÷ other`, exactly; an error when `other` is zero.
    pub fn checked_div(self, other: Fraction) -> Result<Fraction, DomainError> {
        if other.is_zero() {
            return Err(DomainError::invalid("divisor", "division by zero"));
        }
        self.checked_mul(Fraction { num: other.den, den: other.num })
    }

    /// Multiplies by a non-negative integer.
    pub fn checked_mul_int(self, n: i128) -> Result<Fraction, DomainError> {
        self.checked_mul(Self::from_integer(n)?)
    }

    /// Decimal rendering with exactly `scale` digits after the point, rounded **half-up**
    /// (ties away from zero, which for non-negative values means ties round up), e.g. 1/7 at
    /// scale 6 is `"0.142857"` and 1/8 at scale 2 is `"0.13"`. Scale 0 has no decimal point.
    pub fn to_decimal_string(&self, scale: u32) -> Result<String, DomainError> {
        const OP: &str = "fraction to decimal";
        let num = self.num.unsigned_abs();
        let den = self.den.unsigned_abs();
        let mut int_part = num / den;
        let mut rem = num % den;
        let mut digits: Vec<u8> = Vec::with_capacity(scale as usize);
        for _ in 0..scale {
            rem = rem.checked_mul(10).ok_or_else(|| DomainError::overflow(OP))?;
            digits.push((rem / den) as u8);
            rem %= den;
        }
        // rem < den <= i128::MAX, so doubling it fits in u128.
        if rem * 2 >= den {
            let mut carry = true;
            for d in digits.iter_mut().rev() {
                if *d == 9 {
                    *d = 0;
                } else {
                    *d += 1;
                    carry = false;
                    break;
                }
            }
            if carry {
                int_part = int_part.checked_add(1).ok_or_else(|| DomainError::overflow(OP))?;
            }
        }
        let mut out = int_part.to_string();
        if scale > 0 {
            out.push('.');
            out.extend(digits.iter().map(|d| char::from(b'0' + d)));
        }
        Ok(out)
    }

    /// Nearest `f64`, for charts and logs only — never for money.
    pub fn to_f64_lossy(&self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

/// Compares `a/b` with `c/d` (b, d > 0) by continued-fraction expansion, which never
/// multiplies and therefore cannot overflow.
fn cmp_ratio(mut a: u128, mut b: u128, mut c: u128, mut d: u128) -> Ordering {
    let mut flipped = false;
    loop {
        let (q1, r1) = (a / b, a % b);
        let (q2, r2) = (c / d, c % d);
        let ord = match q1.cmp(&q2) {
            Ordering::Equal => match (r1 == 0, r2 == 0) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Less,
                (false, true) => Ordering::Greater,
                (false, false) => {
                    // r1/b vs r2/d has the opposite order of b/r1 vs d/r2.
                    (a, b, c, d) = (b, r1, d, r2);
                    flipped = !flipped;
                    continue;
                }
            },
            o => o,
        };
        return if flipped { ord.reverse() } else { ord };
    }
}

impl Ord for Fraction {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_ratio(self.num.unsigned_abs(), self.den.unsigned_abs(), other.num.unsigned_abs(), other.den.unsigned_abs())
    }
}

impl PartialOrd for Fraction {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Default for Fraction {
    fn default() -> Self {
        Self::ZERO
    }
}

impl From<u32> for Fraction {
    fn from(n: u32) -> Self {
        Self { num: i128::from(n), den: 1 }
    }
}

impl From<u64> for Fraction {
    fn from(n: u64) -> Self {
        Self { num: i128::from(n), den: 1 }
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 { write!(f, "{}", self.num) } else { write!(f, "{}/{}", self.num, self.den) }
    }
}

impl FromStr for Fraction {
    type Err = DomainError;

    /// Accepts `"n/d"`, `"n"` or a plain decimal such as `"1.25"` (exact: 5/4).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || DomainError::invalid(FIELD, format!("{s:?} is not n, n/d or a decimal"));
        let int = |p: &str| -> Result<i128, DomainError> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            p.parse().map_err(|_| DomainError::overflow("fraction parse"))
        };
        if let Some((n, d)) = s.split_once('/') {
            return Self::new(int(n.trim())?, int(d.trim())?);
        }
        if let Some((i, frac)) = s.split_once('.') {
            let scale = u32::try_from(frac.len()).map_err(|_| bad())?;
            let den = 10_i128.checked_pow(scale).ok_or_else(|| DomainError::overflow("fraction parse"))?;
            let num =
                int(i)?.checked_mul(den).and_then(|x| int(frac).ok().and_then(|f| x.checked_add(f))).ok_or_else(bad)?;
            return Self::new(num, den);
        }
        Self::from_integer(int(s.trim())?)
    }
}

impl TryFrom<String> for Fraction {
    type Error = DomainError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<Fraction> for String {
    fn from(f: Fraction) -> Self {
        f.to_string()
    }
}

/// GPU-equivalent time: an exact number of GPU-nanoseconds (fraction of a GPU × time held).
///
/// Kept as nanoseconds so that no unit conversion happens before pricing; convert with
/// [`Quantity::gpu_hours`] at the point a rate is applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Quantity(Fraction);

impl Quantity {
    /// No GPU time.
    pub const ZERO: Quantity = Quantity(Fraction::ZERO);

    /// `fraction` of a GPU held for `nanos` nanoseconds.
    pub fn held(fraction: Fraction, nanos: i128) -> Result<Self, DomainError> {
        fraction.checked_mul_int(nanos).map(Self)
    }

    /// GPU-nanoseconds, exactly.
    pub const fn gpu_nanos(&self) -> Fraction {
        self.0
    }

    /// GPU-seconds, exactly.
    pub fn gpu_seconds(&self) -> Result<Fraction, DomainError> {
        self.0.checked_div(Fraction::from_integer(NANOS_PER_SECOND)?)
    }

    /// GPU-hours, exactly (GPU-nanoseconds ÷ 3.6 × 10¹²).
    pub fn gpu_hours(&self) -> Result<Fraction, DomainError> {
        self.0.checked_div(Fraction::from_integer(NANOS_PER_HOUR)?)
    }

    /// Sum of two quantities.
    pub fn checked_add(self, other: Quantity) -> Result<Quantity, DomainError> {
        self.0.checked_add(other.0).map(Self)
    }

    /// Difference; an error if it would be negative.
    pub fn checked_sub(self, other: Quantity) -> Result<Quantity, DomainError> {
        self.0.checked_sub(other.0).map(Self)
    }

    /// Whether the quantity is zero.
    pub const fn is_zero(&self) -> bool {
        self.0.is_zero()
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} GPU-ns", self.0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn fr(n: i128, d: i128) -> Fraction {
        Fraction::new(n, d).unwrap()
    }

    #[test]
    fn reduces_and_rejects() {
        assert_eq!(fr(2, 4), fr(1, 2));
        assert_eq!((fr(6, 3).numer(), fr(6, 3).denom()), (2, 1));
        assert_eq!(fr(-2, -4), fr(1, 2));
        assert_eq!(fr(0, 5), Fraction::ZERO);
        assert!(matches!(Fraction::new(1, 0), Err(DomainError::Invalid { .. })));
        assert!(Fraction::new(-1, 2).is_err());
        assert!(Fraction::new(1, -2).is_err());
        assert!(matches!(Fraction::new(i128::MIN, -1), Err(DomainError::Overflow { .. })));
        assert_eq!(fr(i128::MIN, i128::MIN), Fraction::ONE);
    }

    #[test]
    fn arithmetic_is_exact() {
        let seventh = fr(1, 7);
        let mut sum = Fraction::ZERO;
        for _ in 0..7 {
            sum = sum.checked_add(seventh).unwrap();
        }
        assert_eq!(sum, Fraction::ONE);
        assert_eq!(fr(1, 2).checked_add(fr(1, 3)).unwrap(), fr(5, 6));
        assert_eq!(fr(1, 2).checked_sub(fr(1, 3)).unwrap(), fr(1, 6));
        assert!(fr(1, 3).checked_sub(fr(1, 2)).is_err());
        assert_eq!(fr(1, 3).sub_or_zero(fr(1, 2)).unwrap(), Fraction::ZERO);
        assert_eq!(fr(2, 3).checked_mul(fr(3, 4)).unwrap(), fr(1, 2));
        assert_eq!(fr(2, 3).checked_div(fr(4, 9)).unwrap(), fr(3, 2));
        assert!(fr(2, 3).checked_div(Fraction::ZERO).is_err());
        assert_eq!(fr(3, 4).min(fr(2, 3)), fr(2, 3));
        assert_eq!(fr(3, 4).max(fr(2, 3)), fr(3, 4));
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        let big = Fraction::from_integer(i128::MAX).unwrap();
        assert!(matches!(big.checked_add(Fraction::ONE), Err(DomainError::Overflow { .. })));
        assert!(matches!(big.checked_mul(fr(2, 1)), Err(DomainError::Overflow { .. })));
        let tiny = fr(1, i128::MAX);
        assert!(matches!(tiny.checked_add(fr(1, i128::MAX - 1)), Err(DomainError::Overflow { .. })));
    }

    #[test]
    fn ordering_never_overflows() {
        let a = fr(i128::MAX - 1, i128::MAX);
        let b = fr(i128::MAX - 2, i128::MAX - 1);
        // (M-1)/M vs (M-2)/(M-1): 1 - 1/M > 1 - 1/(M-1)
        assert!(a > b);
        assert!(fr(1, 3) < fr(1, 2));
        assert!(fr(5, 3) > fr(3, 2));
        assert_eq!(fr(4, 6).cmp(&fr(2, 3)), Ordering::Equal);
        assert!(Fraction::ZERO < fr(1, i128::MAX));
        assert!(fr(7, 1) > fr(13, 2));
        let mut v = vec![fr(3, 4), fr(1, 7), Fraction::ONE, fr(2, 7), Fraction::ZERO];
        v.sort();
        assert_eq!(v, vec![Fraction::ZERO, fr(1, 7), fr(2, 7), fr(3, 4), Fraction::ONE]);
    }

    #[test]
    fn decimal_rendering_rounds_half_up() {
        assert_eq!(fr(1, 7).to_decimal_string(6).unwrap(), "0.142857");
        assert_eq!(fr(2, 3).to_decimal_string(4).unwrap(), "0.6667");
        assert_eq!(fr(1, 8).to_decimal_string(2).unwrap(), "0.13");
        assert_eq!(fr(5, 2).to_decimal_string(0).unwrap(), "3");
        assert_eq!(fr(999, 1000).to_decimal_string(2).unwrap(), "1.00");
        assert_eq!(fr(7, 1).to_decimal_string(3).unwrap(), "7.000");
        assert_eq!(Fraction::ZERO.to_decimal_string(2).unwrap(), "0.00");
    }

    #[test]
    fn text_and_json_round_trip() {
        assert_eq!(fr(1, 7).to_string(), "1/7");
        assert_eq!(fr(4, 2).to_string(), "2");
        assert_eq!("1/7".parse::<Fraction>().unwrap(), fr(1, 7));
        assert_eq!("3".parse::<Fraction>().unwrap(), fr(3, 1));
        assert_eq!("1.25".parse::<Fraction>().unwrap(), fr(5, 4));
        for bad in ["", "-1", "1/0", "a/b", "1.", ".5", "1/-2", "1.2.3"] {
            assert!(bad.parse::<Fraction>().is_err(), "{bad}");
        }
        let json = serde_json::to_string(&fr(1, 7)).unwrap();
        assert_eq!(json, "\"1/7\"");
        assert_eq!(serde_json::from_str::<Fraction>(&json).unwrap(), fr(1, 7));
    }

    #[test]
    fn mig_seventh_for_seven_hours_is_one_gpu_hour() {
        let q = Quantity::held(fr(1, 7), 7 * NANOS_PER_HOUR).unwrap();
        assert_eq!(q.gpu_hours().unwrap(), Fraction::ONE);
        let q = Quantity::held(fr(1, 7), NANOS_PER_HOUR).unwrap();
        assert_eq!(q.gpu_hours().unwrap(), fr(1, 7));
        assert_eq!(q.gpu_seconds().unwrap(), fr(3600, 7));
    }
}
