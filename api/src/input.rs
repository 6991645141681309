//! The input classes of the REST API, one guard each (issue 33): every text, month, instant, identifier, bounded
//! integer and decimal that a request carries — in its path, its query string or its JSON body — is read through
//! one of these types. A type's `Deserialize` is the guard and its `JsonSchema` is what `/api/v1/openapi.json`
//! publishes, both written from the same pattern and bounds, so the contract says exactly what the server takes:
//! a value the document allows is never refused for its form, and one it forbids never reaches a handler (nor
//! PostgreSQL, which refuses NUL and overflows numeric columns with a 500).
//!
//! - Text ([`Line`], [`Prose`], [`Note`]): no control character (Unicode category Cc: U+0000–U+001F,
//!   U+007F–U+009F) — except tab, line feed and carriage return in prose —, at most `MAX` characters (Unicode
//!   scalar values, as JSON Schema's `maxLength` counts them), not blank where required; read trimmed.
//! - [`Month`]: `YYYY-MM` from 1970-01 to 9998-12 (a month whose end and successor exist everywhere).
//! - [`Instant`]: an RFC 3339 date-time written in the years 1970 to 9998, read in UTC.
//! - [`Id`]: a UUID in its hyphenated form.
//! - [`Int`]: a whole number within `MIN..=MAX`.
//! - Decimals ([`Money`], [`Credit`], [`Gpus`], [`Rate`], [`Weight`], [`Percent`], [`Hours`], [`Pue`]): decimal
//!   strings with at most so many digits before and after the point, bounded by what the storage and the exact
//!   arithmetic can hold.

use std::{borrow::Cow, fmt, sync::LazyLock};

use gpuledger_core::{Period, decimal::Decimal};
use regex::Regex;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};
use time::OffsetDateTime;

/// Control characters (category Cc), as a regular-expression class body.
const CONTROL: &str = r"\u0000-\u001f\u007f-\u009f";
/// Control characters less tab, line feed and carriage return (prose keeps its line breaks).
const CONTROL_BUT_LINES: &str = r"\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f";
/// What a non-blank text needs one of: neither a control character nor white space (Rust's
/// `char::is_whitespace`: the controls among it are excluded anyway).
const VISIBLE_NOT: &str = r"\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";

/// The text patterns, as published (ECMA-262, Python and Rust read them alike).
fn text_pattern(lines: bool, blank_ok: bool) -> String {
    let allowed = if lines { CONTROL_BUT_LINES } else { CONTROL };
    if blank_ok { format!("^[^{allowed}]*$") } else { format!("^[^{allowed}]*[^{VISIBLE_NOT}][^{allowed}]*$") }
}

/// Whether `c` may appear in a text of this kind.
fn allowed_char(c: char, lines: bool) -> bool {
    !c.is_control() || (lines && matches!(c, '\t' | '\n' | '\r'))
}

/// The one text guard: the reason a value is refused, or the value trimmed.
fn check_text(value: &str, max: usize, lines: bool, blank_ok: bool) -> Result<String, String> {
    if let Some(c) = value.chars().find(|c| !allowed_char(*c, lines)) {
        let allowed = if lines { " other than tab, line feed and carriage return" } else { "" };
        return Err(format!("contains the control character U+{:04X}; no control characters{allowed}", c as u32));
    }
    let chars = value.chars().count();
    if chars > max {
        return Err(format!("{chars} characters; at most {max}"));
    }
    let trimmed = value.trim();
    if trimmed.is_empty() && !blank_ok {
        return Err(format!("is required: 1 to {max} characters, not only spaces"));
    }
    Ok(trimmed.to_string())
}

fn text_schema(max: usize, lines: bool, blank_ok: bool, what: &str) -> Schema {
    let mut s = json_schema!({
        "type": "string",
        "maxLength": max,
        "pattern": text_pattern(lines, blank_ok),
        "description": what,
    });
    if !blank_ok {
        s.insert("minLength".into(), 1.into());
    }
    s
}

macro_rules! text_type {
    ($(#[$doc:meta])* $name:ident, lines: $lines:expr, blank_ok: $blank:expr, $what:literal, $example:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name<const MAX: usize>(String);

        impl<const MAX: usize> $name<MAX> {
            /// Checks a value as the guard does (trimmed when accepted).
            pub fn new(value: &str) -> Result<Self, String> {
                check_text(value, MAX, $lines, $blank).map(Self)
            }
            /// The text, trimmed.
            pub fn as_str(&self) -> &str {
                &self.0
            }
            /// The text, trimmed.
            pub fn into_inner(self) -> String {
                self.0
            }
        }

        impl<const MAX: usize> std::ops::Deref for $name<MAX> {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl<const MAX: usize> fmt::Display for $name<MAX> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<const MAX: usize> From<$name<MAX>> for String {
            fn from(v: $name<MAX>) -> String {
                v.0
            }
        }

        impl<const MAX: usize> Serialize for $name<MAX> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de, const MAX: usize> Deserialize<'de> for $name<MAX> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = Cow::<str>::deserialize(d)?;
                Self::new(&s).map_err(D::Error::custom)
            }
        }

        impl<const MAX: usize> JsonSchema for $name<MAX> {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                format!("{}{}", stringify!($name), MAX).into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                let mut s = text_schema(MAX, $lines, $blank, $what);
                s.insert("examples".into(), serde_json::json!([$example]));
                s
            }
        }
    };
}

text_type!(
    /// One line of text (a name, a key, a label): no control characters, 1 to `MAX` characters, not only spaces;
    /// read trimmed.
    Line,
    lines: false,
    blank_ok: false,
    "One line of text: no control characters, not only spaces (read trimmed)",
    "research"
);
text_type!(
    /// Free text that may span lines (a reason, a comment): tab, line feed and carriage return allowed, no other
    /// control character, 1 to `MAX` characters, not only white space; read trimmed.
    Prose,
    lines: true,
    blank_ok: false,
    "Free text, line breaks allowed, no other control characters, not only white space (read trimmed)",
    "what happened and why"
);
text_type!(
    /// Optional free text (a note): like [`Prose`] but it may be empty.
    Note,
    lines: true,
    blank_ok: true,
    "Free text, may be empty; line breaks allowed, no other control characters (read trimmed)",
    "why this version"
);

impl<const MAX: usize> Default for Note<MAX> {
    /// The empty note (a note may be empty).
    fn default() -> Self {
        Self(String::new())
    }
}

/// A compiled pattern of this module; `None` only if a constant pattern did not compile, which the tests rule out
/// (and which refuses every value rather than accepting one).
fn compiled(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

/// Years a month or an instant may be written in: 1970 to 9998.
#[cfg(test)]
const YEAR: &str = "(19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])";

/// `YYYY-MM`, 1970-01 to 9998-12.
pub const MONTH_PATTERN: &str = "^(19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-(0[1-9]|1[0-2])$";
static MONTH_RE: LazyLock<Option<Regex>> = LazyLock::new(|| compiled(MONTH_PATTERN));

/// A calendar month, `YYYY-MM`, from 1970-01 to 9998-12.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month(pub Period);

impl Month {
    /// Checks a value as the guard does.
    pub fn parse(s: &str) -> Result<Self, String> {
        let shaped = MONTH_RE.as_ref().is_some_and(|re| re.is_match(s));
        let period = Period::parse(s).ok().filter(|_| shaped);
        period.map(Self).ok_or_else(|| format!("{s:?} is not a month in YYYY-MM form from 1970-01 to 9998-12"))
    }
    /// The month.
    pub const fn period(self) -> Period {
        self.0
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Month {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Month {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        Self::parse(&s).map_err(D::Error::custom)
    }
}

impl JsonSchema for Month {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Month".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": MONTH_PATTERN,
            "description": "A calendar month, YYYY-MM (1970-01 to 9998-12)",
            "examples": ["2026-11"],
        })
    }
}

/// The year of an RFC 3339 date-time as written: 1970 to 9998 (the date-time format says the rest).
pub const INSTANT_YEAR_PATTERN: &str = "^(19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-";
static INSTANT_YEAR_RE: LazyLock<Option<Regex>> = LazyLock::new(|| compiled(INSTANT_YEAR_PATTERN));

/// An instant, RFC 3339 (`2026-11-01T00:00:00Z`, any offset) written in the years 1970 to 9998; read in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub OffsetDateTime);

impl Instant {
    /// Checks a value as the guard does.
    pub fn parse(s: &str) -> Result<Self, String> {
        if !INSTANT_YEAR_RE.as_ref().is_some_and(|re| re.is_match(s)) {
            return Err(format!("{s:?} is not an RFC 3339 time in the years 1970 to 9998"));
        }
        let t = OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
            .map_err(|e| format!("{s:?} is not an RFC 3339 time: {e}"))?;
        t.checked_to_offset(time::UtcOffset::UTC).map(Self).ok_or_else(|| format!("{s:?} is out of range"))
    }
    /// The instant, in UTC.
    pub const fn at(self) -> OffsetDateTime {
        self.0
    }
}

impl Serialize for Instant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&gpuledger_core::time_fmt::rfc3339(self.0))
    }
}

impl<'de> Deserialize<'de> for Instant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        Self::parse(&s).map_err(D::Error::custom)
    }
}

impl JsonSchema for Instant {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Instant".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "date-time",
            "pattern": INSTANT_YEAR_PATTERN,
            "description": "An instant, RFC 3339 with any offset, written in the years 1970 to 9998",
            "examples": ["2026-11-01T00:00:00Z"],
        })
    }
}

/// A UUID in its hyphenated form (`8-4-4-4-12` hexadecimal digits, either case).
pub const UUID_PATTERN: &str = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
static UUID_RE: LazyLock<Option<Regex>> = LazyLock::new(|| compiled(UUID_PATTERN));

/// An identifier: a UUID in its hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(pub uuid::Uuid);

impl Id {
    /// Checks a value as the guard does.
    pub fn parse(s: &str) -> Result<Self, String> {
        let shaped = UUID_RE.as_ref().is_some_and(|re| re.is_match(s));
        let id = uuid::Uuid::try_parse(s).ok().filter(|_| shaped);
        id.map(Self).ok_or_else(|| format!("{s:?} is not a UUID (8-4-4-4-12 hexadecimal digits)"))
    }
    /// The UUID.
    pub const fn uuid(self) -> uuid::Uuid {
        self.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        Self::parse(&s).map_err(D::Error::custom)
    }
}

impl JsonSchema for Id {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Id".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "uuid",
            "pattern": UUID_PATTERN,
            "examples": ["0d3e0000-0000-4000-8000-000000000001"],
        })
    }
}

/// A whole number within `MIN..=MAX` (in a query string, its decimal digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Int<const MIN: i64, const MAX: i64>(i64);

impl<const MIN: i64, const MAX: i64> Int<MIN, MAX> {
    /// Checks a value as the guard does.
    pub fn new(v: i64) -> Result<Self, String> {
        if (MIN..=MAX).contains(&v) { Ok(Self(v)) } else { Err(format!("{v} is not a whole number in {MIN}..={MAX}")) }
    }
    /// The number.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl<const MIN: i64, const MAX: i64> Serialize for Int<MIN, MAX> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(self.0)
    }
}

impl<'de, const MIN: i64, const MAX: i64> Deserialize<'de> for Int<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// JSON Schema's integers: `2.0` is the integer 2 (JSON numbers have one type).
        struct Whole;
        impl serde::de::Visitor<'_> for Whole {
            type Value = i64;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i64, E> {
                Ok(v)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i64, E> {
                i64::try_from(v).map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<i64, E> {
                // Whole and within ±2^53, where every float is the integer it spells.
                if v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_992.0 {
                    Ok(v as i64)
                } else {
                    Err(E::custom(format!("{v} is not a whole number")))
                }
            }
        }
        let v = d.deserialize_i64(Whole)?;
        Self::new(v).map_err(D::Error::custom)
    }
}

impl<const MIN: i64, const MAX: i64> JsonSchema for Int<MIN, MAX> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("Int{MIN}to{MAX}").into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "integer", "minimum": MIN, "maximum": MAX})
    }
}

/// The pattern of a decimal string: an integer part of 1 to `int` digits without leading zeros, then optionally a
/// point and 1 to `frac` digits; `positive`: not zero.
pub fn decimal_pattern(int: usize, frac: usize, positive: bool) -> String {
    let fraction = if frac == 0 { String::new() } else { format!("(\\.[0-9]{{1,{frac}}})?") };
    if !positive {
        return format!("^(0|[1-9][0-9]{{0,{}}}){fraction}$", int - 1);
    }
    // A whole part above zero, or zero and a fraction with a non-zero digit (after k zeros).
    let mut branches = vec![format!("[1-9][0-9]{{0,{}}}{fraction}", int - 1)];
    for k in 0..frac {
        branches.push(format!("0\\.0{{{k}}}[1-9][0-9]{{0,{}}}", frac - 1 - k));
    }
    format!("^({})$", branches.join("|"))
}

/// `0.` and a fraction of 1 to `frac` digits that is not zero.
fn small_fraction(frac: usize) -> String {
    let branches: Vec<String> = (0..frac).map(|k| format!("0{{{k}}}[1-9][0-9]{{0,{}}}", frac - 1 - k)).collect();
    format!("0\\.({})", branches.join("|"))
}

/// More than 0 and at most 100, with at most 4 decimals.
fn percent_pattern() -> String {
    format!("^(100(\\.0{{1,4}})?|[1-9][0-9]?(\\.[0-9]{{1,4}})?|{})$", small_fraction(4))
}

/// More than 0 and at most 744 (the hours of a 31-day month), with at most 4 decimals.
fn month_hours_pattern() -> String {
    format!(
        "^(744(\\.0{{1,4}})?|([1-9]|[1-9][0-9]|[1-6][0-9]{{2}}|7[0-3][0-9]|74[0-3])(\\.[0-9]{{1,4}})?|{})$",
        small_fraction(4)
    )
}

/// 0 to 100, with at most 4 decimals.
fn threshold_pattern() -> String {
    "^(100(\\.0{1,4})?|(0|[1-9][0-9]?)(\\.[0-9]{1,4})?)$".to_string()
}

/// 0 to 8784 (the hours of a leap year), with at most 4 decimals.
fn year_hours_pattern() -> String {
    "^(8784(\\.0{1,4})?|(0|[1-9][0-9]{0,2}|[1-7][0-9]{3}|8[0-6][0-9]{2}|87[0-7][0-9]|878[0-3])(\\.[0-9]{1,4})?)$"
        .to_string()
}

/// At least 1 and below 100, with at most 4 decimals.
fn multiplier_pattern() -> String {
    "^[1-9][0-9]?(\\.[0-9]{1,4})?$".to_string()
}

macro_rules! decimal_type {
    ($(#[$doc:meta])* $name:ident, $pattern:expr, $what:literal, $example:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name(Decimal);

        impl $name {
            /// Checks a value as the guard does.
            pub fn parse(s: &str) -> Result<Self, String> {
                static RE: LazyLock<Option<Regex>> = LazyLock::new(|| compiled(&$pattern));
                let shaped = RE.as_ref().is_some_and(|re| re.is_match(s));
                let d = Decimal::parse(s).ok().filter(|_| shaped);
                d.map(Self).ok_or_else(|| {
                    format!("{s:?} is not {} (a decimal string matching {})", $what, $pattern)
                })
            }
            /// The amount, exactly as written.
            pub fn decimal(&self) -> Decimal {
                self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = Cow::<str>::deserialize(d)?;
                Self::parse(&s).map_err(D::Error::custom)
            }
        }

        impl JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({
                    "type": "string",
                    "pattern": $pattern,
                    "description": format!("{}, a decimal string", $what),
                    "examples": [$example],
                })
            }
        }
    };
}

decimal_type!(
    /// An amount of money (a budget): not negative, at most 12 digits before the point and 2 after it.
    Money, decimal_pattern(12, 2, false), "an amount not below zero, at most 12 digits before the point and 2 after it", "12000.00"
);
decimal_type!(
    /// A credit: more than zero, at most 12 digits before the point and 2 after it.
    Credit, decimal_pattern(12, 2, true), "an amount above zero, at most 12 digits before the point and 2 after it", "120.50"
);
decimal_type!(
    /// A number of GPUs (a quota): not negative, stored as `numeric(12,4)`: at most 8 digits before the point and
    /// 4 after it.
    Gpus, decimal_pattern(8, 4, false), "a number of GPUs not below zero, at most 8 digits before the point and 4 after it", "8"
);
decimal_type!(
    /// A price (per GPU-hour, per kWh, per million tokens): not negative, at most 9 digits before the point and 6
    /// after it, so that a month of a 100,000-GPU fleet at that price stays within the ledger's amounts
    /// (`numeric(20,2)`) and its rates (`numeric(24,12)`).
    Rate, decimal_pattern(9, 6, false), "a price not below zero, at most 9 digits before the point and 6 after it", "2.10"
);
decimal_type!(
    /// A weight or a share: not negative, at most 6 digits before the point and 6 after it.
    Weight, decimal_pattern(6, 6, false), "a weight not below zero, at most 6 digits before the point and 6 after it", "4"
);
decimal_type!(
    /// A percentage above 0 and at most 100, with at most 4 decimals.
    Percent, percent_pattern(), "a percentage above 0 and at most 100, at most 4 decimals", "5"
);
decimal_type!(
    /// A number of hours above 0 and at most 744 (a 31-day month), with at most 4 decimals.
    Hours, month_hours_pattern(), "a number of hours above 0 and at most 744, at most 4 decimals", "2"
);
decimal_type!(
    /// A power usage effectiveness multiplier: at least 1 and below 100, with at most 4 decimals.
    Pue, multiplier_pattern(), "a multiplier of at least 1 and below 100, at most 4 decimals", "1.3"
);

decimal_type!(
    /// A threshold in percent: 0 to 100, with at most 4 decimals.
    Threshold, threshold_pattern(), "a percentage from 0 to 100, at most 4 decimals", "5"
);
decimal_type!(
    /// A number of hours from 0 to 8784 (a leap year), with at most 4 decimals.
    IdleHours, year_hours_pattern(), "a number of hours from 0 to 8784, at most 4 decimals", "1"
);

/// A comma-separated list of at most `ITEMS` items of at most `LEN` characters each, no control characters; read
/// as its items trimmed, empty ones left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommaList<const ITEMS: usize, const LEN: usize>(Vec<String>);

impl<const ITEMS: usize, const LEN: usize> CommaList<ITEMS, LEN> {
    fn pattern() -> String {
        format!("^[^,{CONTROL}]{{0,{LEN}}}(,[^,{CONTROL}]{{0,{LEN}}}){{0,{}}}$", ITEMS - 1)
    }
    /// Checks a value as the guard does.
    pub fn parse(s: &str) -> Result<Self, String> {
        let items: Vec<&str> = s.split(',').collect();
        if items.len() > ITEMS {
            return Err(format!("{} items; at most {ITEMS}, comma-separated", items.len()));
        }
        let mut out = Vec::new();
        for item in items {
            let kept = check_text(item, LEN, false, true)?;
            if !kept.is_empty() {
                out.push(kept);
            }
        }
        Ok(Self(out))
    }
    /// The items.
    pub fn items(&self) -> &[String] {
        &self.0
    }
}

impl<'de, const ITEMS: usize, const LEN: usize> Deserialize<'de> for CommaList<ITEMS, LEN> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        Self::parse(&s).map_err(D::Error::custom)
    }
}

impl<const ITEMS: usize, const LEN: usize> JsonSchema for CommaList<ITEMS, LEN> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("CommaList{ITEMS}x{LEN}").into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": Self::pattern(), "examples": ["token.use,login.success"]})
    }
}

macro_rules! pattern_type {
    ($(#[$doc:meta])* $name:ident, $pattern:expr, $what:literal, $example:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// The published pattern.
            pub const PATTERN: &'static str = $pattern;
            /// Checks a value as the guard does.
            pub fn parse(s: &str) -> Result<Self, String> {
                static RE: LazyLock<Option<Regex>> = LazyLock::new(|| compiled($pattern));
                if RE.as_ref().is_some_and(|re| re.is_match(s)) {
                    Ok(Self(s.to_string()))
                } else {
                    Err(format!("{s:?} is not {} ({})", $what, $pattern))
                }
            }
            /// The text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = Cow::<str>::deserialize(d)?;
                Self::parse(&s).map_err(D::Error::custom)
            }
        }

        impl JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({"type": "string", "pattern": $pattern, "description": $what, "examples": [$example]})
            }
        }
    };
}

pattern_type!(
    /// A namespace name or prefix: 1 to 63 lowercase letters, digits or `-` (a namespace name's characters).
    NamespacePattern,
    "^[a-z0-9-]{1,63}$",
    "1 to 63 lowercase letters, digits or '-'",
    "team-a"
);
pattern_type!(
    /// A MIG profile's name: `<g>g.<m>gb` or `<c>c.<g>g.<m>gb`, optionally one lowercase `+tag` (`3g.40gb`,
    /// `1c.2g.20gb`, `1g.10gb+me`) — what the inventory's table accepts (`mig_profiles.profile`'s check); the pattern
    /// once allowed several tags with capitals and digits, which the table then refused as a 422 naming no field.
    MigProfileName,
    "^([1-9][0-9]{0,5}c\\.)?[1-9][0-9]{0,5}g\\.[1-9][0-9]{0,5}gb(\\+[a-z]{1,16})?$",
    "a MIG profile such as 3g.40gb",
    "3g.40gb"
);
pattern_type!(
    /// A share of one GPU, exact: `n/d` or a decimal (`3/7`, `1/2`, `0.25`); more than 0 and at most 1 is the
    /// inventory's rule (409).
    FractionText,
    "^((0|[1-9][0-9]{0,8})/[1-9][0-9]{0,8}|(0|[1-9][0-9]{0,8})(\\.[0-9]{1,9})?)$",
    "a fraction n/d or a decimal",
    "3/7"
);
pattern_type!(
    /// A token's scope: `admin`, `export`, `agent:CLUSTER` or `join:CLUSTER` (a cluster name of 1 to 200
    /// characters without spaces or control characters; a new name registers the cluster).
    TokenScope,
    "^(admin|export|(agent|join):[^\\u0000-\\u0020\\u007f-\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]{1,200})$",
    "admin, export, agent:CLUSTER or join:CLUSTER",
    "export"
);
pattern_type!(
    /// OpenID scopes, space-separated, one of them `openid` (at most 1,000 characters, no control characters).
    OidcScopes,
    "^([^\\u0000-\\u001f\\u007f-\\u009f]{0,993}[ \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000])?openid([ \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\u0000-\\u001f\\u007f-\\u009f]{0,993})?$",
    "space-separated OpenID scopes including openid",
    "openid email profile groups"
);
pattern_type!(
    /// An ISO 4217 currency code: three uppercase letters.
    Currency,
    "^[A-Z]{3}$",
    "three uppercase letters (ISO 4217)",
    "USD"
);

/// `#[serde(default, deserialize_with = "present")]`: an optional field that, when present, must hold a value
/// (`null` is refused, as the document — which describes the field as the value's own schema — says).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `#[serde(default, deserialize_with = "clearable")]` on an `Option<Option<T>>`: a field a change may leave out
/// (`None`: unchanged), clear (`null`: `Some(None)`) or set (`Some(Some(value))`), as JSON merge patch reads it.
/// Serde alone reads `null` as absent; this keeps the two apart.
pub fn clearable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A list of `MIN` to `MAX` items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List<T, const MIN: usize, const MAX: usize>(Vec<T>);

impl<T, const MAX: usize> Default for List<T, 0, MAX> {
    /// The empty list (where a list may be empty).
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T, const MIN: usize, const MAX: usize> List<T, MIN, MAX> {
    /// Checks a list as the guard does.
    pub fn new(items: Vec<T>) -> Result<Self, String> {
        if (MIN..=MAX).contains(&items.len()) {
            Ok(Self(items))
        } else {
            Err(format!("{} items; {MIN} to {MAX}", items.len()))
        }
    }
    /// The items.
    pub fn items(&self) -> &[T] {
        &self.0
    }
    /// The items.
    pub fn into_inner(self) -> Vec<T> {
        self.0
    }
}

impl<T, const MIN: usize, const MAX: usize> std::ops::Deref for List<T, MIN, MAX> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: Serialize, const MIN: usize, const MAX: usize> Serialize for List<T, MIN, MAX> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>, const MIN: usize, const MAX: usize> Deserialize<'de> for List<T, MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::new(Vec::<T>::deserialize(d)?).map_err(D::Error::custom)
    }
}

impl<T: JsonSchema, const MIN: usize, const MAX: usize> JsonSchema for List<T, MIN, MAX> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("List{MIN}to{MAX}of{}", T::schema_name()).into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "array", "items": g.subschema_for::<T>(), "minItems": MIN, "maxItems": MAX})
    }
}

/// A label of a host name: letters, digits, inner hyphens (never two in a row, so never an `xn--` label).
const HOST_LABEL: &str = "[A-Za-z0-9]+(-[A-Za-z0-9]+)*";
/// The last label starts with a letter (a numeric one would make the name an IPv4 address).
const HOST_TOP: &str = "[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9]+)*";
const IPV4_OCTET: &str = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
const H16: &str = "[0-9a-fA-F]{1,4}";
const PORT: &str = "([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
const URL_CHARS: &str = "[A-Za-z0-9._~!$&'()*+,;=:@%/-]";

/// An IPv6 address in brackets: the eight groups, every `::` compression, and the forms that end in an IPv4
/// address (`::ffff:192.0.2.1`, `64:ff9b::192.0.2.1`, `::192.0.2.1`). Zone identifiers are not taken.
fn ipv6_pattern() -> String {
    let v4 = format!("({IPV4_OCTET}\\.){{3}}{IPV4_OCTET}");
    let forms = [
        format!("({H16}:){{7}}{H16}"),
        format!("({H16}:){{1,7}}:"),
        format!("({H16}:){{1,6}}:{H16}"),
        format!("({H16}:){{1,5}}(:{H16}){{1,2}}"),
        format!("({H16}:){{1,4}}(:{H16}){{1,3}}"),
        format!("({H16}:){{1,3}}(:{H16}){{1,4}}"),
        format!("({H16}:){{1,2}}(:{H16}){{1,5}}"),
        format!("{H16}:(:{H16}){{1,6}}"),
        format!(":((:{H16}){{1,7}}|:)"),
        format!("({H16}:){{6}}{v4}"),
        format!("::(ffff(:0{{1,4}})?:)?{v4}"),
        format!("({H16}:){{1,4}}:{v4}"),
    ];
    format!("\\[({})\\]", forms.join("|"))
}

/// The form of an outbound URL (a webhook's target, an identity provider's issuer): `http` or `https`, a host name,
/// an IPv4 address or a bracketed IPv6 address, an optional port, path and query, no credentials or fragment, at
/// most 2,000 characters. Where it may point (https only, public addresses only, unless the operator allows more)
/// is the operator's rule, checked after (409).
pub fn url_pattern() -> String {
    format!(
        "^https?://(({HOST_LABEL}\\.)*{HOST_TOP}|({IPV4_OCTET}\\.){{3}}{IPV4_OCTET}|{})(:{PORT})?(/{URL_CHARS}*)?(\\?({URL_CHARS}|\\?)*)?$",
        ipv6_pattern()
    )
}

/// A URL of the form [`url_pattern`] describes (a webhook's target, an identity provider's issuer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl(String);

impl HttpUrl {
    /// Longest URL.
    pub const MAX: usize = 2000;
    /// Checks a value as the guard does.
    pub fn parse(s: &str) -> Result<Self, String> {
        static RE: LazyLock<Option<Regex>> = LazyLock::new(|| compiled(&url_pattern()));
        if s.chars().count() > Self::MAX {
            return Err(format!("is longer than {} characters", Self::MAX));
        }
        if RE.as_ref().is_some_and(|re| re.is_match(s)) {
            Ok(Self(s.to_string()))
        } else {
            Err("is not an https (or http) URL with a host name or an IP address, an optional port, path and query"
                .into())
        }
    }
    /// The URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for HttpUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        Self::parse(&s).map_err(D::Error::custom)
    }
}

impl JsonSchema for HttpUrl {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "HttpUrl".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "maxLength": Self::MAX, "pattern": url_pattern(),
                      "examples": ["https://hooks.example.com/gpu-ledger"]})
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    fn re(p: &str) -> Regex {
        Regex::new(p).unwrap()
    }

    #[test]
    fn every_pattern_compiles() {
        for lines in [false, true] {
            for blank in [false, true] {
                re(&text_pattern(lines, blank));
            }
        }
        assert!(MONTH_RE.is_some() && INSTANT_YEAR_RE.is_some() && UUID_RE.is_some());
        for (i, f) in [(12, 2), (8, 4), (12, 6), (6, 6), (3, 4), (2, 4), (5, 0)] {
            re(&decimal_pattern(i, f, false));
            re(&decimal_pattern(i, f, true));
        }
        assert!(MONTH_PATTERN.contains(YEAR) && INSTANT_YEAR_PATTERN.contains(YEAR));
        re(&CommaList::<10, 64>::pattern());
        let url = re(&url_pattern());
        for ok in [
            "https://hooks.example.com/x?a=b",
            "http://127.0.0.1:8080/hook",
            "https://localhost",
            "https://[fd00::1]",
            "https://[::ffff:192.168.0.1]/x",
            "https://[64:ff9b::192.0.2.1]:8443",
            "https://[::192.0.2.1]",
            "https://[2001:db8:0:0:0:0:0:1]",
        ] {
            assert!(url.is_match(ok), "{ok}");
        }
        for bad in [
            "ftp://a.com",
            "https://1.2.3",
            "https://u@a.com/",
            "https://a.com/#f",
            "https://xn--a.com",
            "https://[1:2:3:4:5:6:7:8:9]",
            "https://[:::1]",
            "https://[fe80::1%eth0]",
        ] {
            assert!(!url.is_match(bad), "{bad}");
        }
        for p in [
            NamespacePattern::PATTERN,
            MigProfileName::PATTERN,
            FractionText::PATTERN,
            Currency::PATTERN,
            TokenScope::PATTERN,
            OidcScopes::PATTERN,
        ] {
            re(p);
        }
        assert!(TokenScope::parse("agent:prod-a").is_ok() && TokenScope::parse("agent: a").is_err());
        assert!(OidcScopes::parse("openid").is_ok() && OidcScopes::parse("email openid").is_ok());
        assert!(OidcScopes::parse("openids").is_err() && OidcScopes::parse("email").is_err());
        assert!(MigProfileName::parse("1c.2g.20gb").is_ok() && MigProfileName::parse("1g.10gb+me").is_ok());
        // What the table's check refuses is refused here, naming the field (Schemathesis found the gap: ST202).
        for refused in ["900c.6784g.80gb+QiIh+01CzV+Ll", "1g.10gb+me+gfx", "1g.10gb+ME", "1g.10gb+m3"] {
            assert!(MigProfileName::parse(refused).is_err(), "{refused}");
        }
        assert!(FractionText::parse("3/7").is_ok() && FractionText::parse("0.25").is_ok());
        assert!(FractionText::parse("1/0").is_err() && FractionText::parse(" 1/2").is_err());
        for p in
            [percent_pattern(), month_hours_pattern(), multiplier_pattern(), threshold_pattern(), year_hours_pattern()]
        {
            re(&p);
        }
    }

    /// Characters that tell the text rules apart: controls, the allowed line breaks, every kind of white space,
    /// and ordinary letters.
    fn interesting() -> impl Strategy<Value = char> {
        prop_oneof![
            prop::sample::select(vec![
                '\0', '\t', '\n', '\r', '\u{b}', '\u{c}', '\u{1f}', ' ', '\u{7f}', '\u{85}', '\u{9f}', '\u{a0}',
                '\u{1680}', '\u{2000}', '\u{200a}', '\u{200b}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}',
                '\u{3000}', '\u{feff}', 'a', 'Z', '-', 'é', '中', '😀',
            ]),
            any::<char>(),
        ]
    }

    proptest! {
        /// The guard accepts exactly what the published pattern and length allow.
        #[test]
        fn text_guards_accept_what_their_schema_allows(s in prop::collection::vec(interesting(), 0..8)) {
            let s: String = s.into_iter().collect();
            for lines in [false, true] {
                for blank in [false, true] {
                    let by_schema = re(&text_pattern(lines, blank)).is_match(&s) && s.chars().count() <= 5;
                    let by_guard = check_text(&s, 5, lines, blank).is_ok();
                    prop_assert_eq!(by_schema, by_guard, "{:?} lines={} blank_ok={}", s, lines, blank);
                }
            }
        }

        /// Every MIG profile the API accepts, the inventory's table accepts too (its check, read from the migration
        /// that made it): a profile the pattern allows is never a 422 from the database.
        #[test]
        fn mig_profiles_the_api_accepts_the_table_accepts(
            s in "[1-9][0-9]{0,2}(c\\.[1-9][0-9]{0,2})?g\\.[0-9]{1,3}gb(\\+[a-zA-Z0-9]{0,3}){0,2}"
        ) {
            let migration = include_str!("../../migrations/20261129000002_tenancy_inventory_allocations.sql");
            let check = migration.split("profile ~ '").nth(1).and_then(|r| r.split('\'').next());
            let table = re(check.unwrap_or("^$"));
            if MigProfileName::parse(&s).is_ok() {
                prop_assert!(table.is_match(&s), "{:?} passes the API, not the table's check {:?}", s, check);
            }
        }

        #[test]
        fn comma_lists_accept_what_their_pattern_allows(s in "[a,\\x00 ]{0,12}") {
            let by_pattern = re(&CommaList::<3, 2>::pattern()).is_match(&s);
            prop_assert_eq!(by_pattern, CommaList::<3, 2>::parse(&s).is_ok(), "{:?}", s);
        }

        #[test]
        fn decimal_guards_accept_what_their_pattern_allows(s in "[0-9.+-]{0,8}|0*[1-9]?\\.?[0-9]{0,5}") {
            for positive in [false, true] {
                let by_pattern = re(&decimal_pattern(3, 2, positive)).is_match(&s);
                let (int, frac) = s.split_once('.').map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
                let by_rule = !int.is_empty() && int.len() <= 3 && int.bytes().all(|b| b.is_ascii_digit())
                    && (int == "0" || !int.starts_with('0'))
                    && frac.is_none_or(|f| (1..=2).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit()))
                    && (!positive || s.bytes().any(|b| (b'1'..=b'9').contains(&b)));
                prop_assert_eq!(by_pattern, by_rule, "{:?} positive={}", s, positive);
            }
        }
    }

    #[test]
    fn months_instants_and_ids() {
        assert!(Month::parse("2026-11").is_ok());
        for bad in ["1969-12", "9999-01", "2026-13", "2026-00", "2026-1", "2026-11\n", "0000-01", "２０２６-11"] {
            assert!(Month::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Instant::parse("2026-11-01T00:00:00Z").is_ok());
        let far = Instant::parse("9998-12-31T23:59:59-23:59").unwrap();
        assert_eq!(far.at().offset(), time::UtcOffset::UTC);
        assert_eq!(far.at().year(), 9999);
        for bad in ["1969-12-31T23:59:59Z", "9999-01-01T00:00:00Z", "2026-11-01", "2026-02-30T00:00:00Z", ""] {
            assert!(Instant::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Id::parse("0d3e0000-0000-4000-8000-00000000000A").is_ok());
        for bad in ["0d3e0000000040008000000000000001", "{0d3e0000-0000-4000-8000-000000000001}", "x"] {
            assert!(Id::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn decimals_keep_their_bounds() {
        assert!(Money::parse("12000.00").is_ok() && Money::parse("0").is_ok());
        for bad in ["-1", "1.001", "1234567890123", "+1", "1.", ".5", "1e3", " 1"] {
            assert!(Money::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Credit::parse("0.01").is_ok() && Credit::parse("7").is_ok());
        for bad in ["0", "0.00", "000.0", "007"] {
            assert!(Credit::parse(bad).is_err(), "{bad:?}");
        }
        let two: Int<1, 3> = serde_json::from_str("2.0").unwrap();
        assert_eq!(two.get(), 2);
        assert!(serde_json::from_str::<Int<1, 3>>("2.5").is_err() && serde_json::from_str::<Int<1, 3>>("4").is_err());
        assert!(Gpus::parse("99999999.9999").is_ok() && Gpus::parse("100000000").is_err());
        for (ok, bad) in [("100", "100.01"), ("0.0001", "0"), ("99.9999", "101")] {
            assert!(Percent::parse(ok).is_ok() && Percent::parse(bad).is_err(), "{ok} {bad}");
        }
        for (ok, bad) in [("744", "744.0001"), ("743.9999", "745"), ("0.5", "0.00")] {
            assert!(Hours::parse(ok).is_ok() && Hours::parse(bad).is_err(), "{ok} {bad}");
        }
        assert!(Pue::parse("1").is_ok() && Pue::parse("0.9").is_err() && Pue::parse("100").is_err());
        assert!(
            Threshold::parse("0").is_ok() && Threshold::parse("100.0").is_ok() && Threshold::parse("100.5").is_err()
        );
        assert!(
            IdleHours::parse("8784").is_ok() && IdleHours::parse("8785").is_err() && IdleHours::parse("0.5").is_ok()
        );
    }

    #[test]
    fn text_is_read_trimmed_and_names_the_rule() {
        let l: Line<10> = serde_json::from_str("\"  ab  \"").unwrap();
        assert_eq!(l.as_str(), "ab");
        let e = serde_json::from_str::<Line<10>>("\"a\\u0000b\"").unwrap_err().to_string();
        assert!(e.contains("U+0000"), "{e}");
        assert!(serde_json::from_str::<Line<10>>("\"a\\nb\"").is_err());
        assert!(serde_json::from_str::<Prose<10>>("\"a\\nb\"").is_ok());
        assert!(serde_json::from_str::<Prose<10>>("\" \\n \"").is_err());
        assert!(serde_json::from_str::<Note<10>>("\"\"").is_ok());
        assert!(serde_json::from_str::<Line<3>>("\"abcd\"").is_err());
    }
}
