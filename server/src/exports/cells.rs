//! Typed cells and how they are written: as CSV (RFC 4180 quoting, formula injection neutralized) and as OData
//! JSON. One place decides every format detail, so the CSV files, the FOCUS file and the OData feed agree.

use std::{borrow::Cow, io::Write};

use sqlx::{Row, postgres::PgRow};
use time::{Date, OffsetDateTime, UtcOffset};
use uuid::Uuid;

/// What a column holds; decides the SQL cast it is read with, its EDM type and its text forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Free or enumerated text.
    Text,
    /// A month, `YYYY-MM` (an `Edm.String` in OData; compared as a month).
    Month,
    /// An exact decimal, read from PostgreSQL as its text form (never a float).
    Decimal,
    /// 32-bit integer.
    Int32,
    /// 64-bit integer.
    Int64,
    /// An instant, written in UTC as ISO 8601 (`2026-09-01T00:00:00Z`).
    DateTime,
    /// A UUID.
    Guid,
    /// true / false.
    Bool,
}

impl Kind {
    /// The OData (EDM) type.
    pub fn edm(self) -> &'static str {
        match self {
            Self::Text | Self::Month => "Edm.String",
            Self::Decimal => "Edm.Decimal",
            Self::Int32 => "Edm.Int32",
            Self::Int64 => "Edm.Int64",
            Self::DateTime => "Edm.DateTimeOffset",
            Self::Guid => "Edm.Guid",
            Self::Bool => "Edm.Boolean",
        }
    }

    /// The PostgreSQL type a value of this kind is selected as.
    pub fn select_type(self) -> &'static str {
        match self {
            Self::Text | Self::Decimal => "text",
            Self::Month => "date",
            Self::Int32 => "int4",
            Self::Int64 => "int8",
            Self::DateTime => "timestamptz",
            Self::Guid => "uuid",
            Self::Bool => "bool",
        }
    }
}

/// One column of an export: its OData property name (PascalCase; the CSV header is its snake_case form), kind
/// and SQL expression.
#[derive(Debug)]
pub struct Column {
    /// OData property name.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// SQL expression over the source's `FROM`, of the natural type (numeric for decimals, date for months).
    pub sql: &'static str,
    /// Whether it can be null.
    pub nullable: bool,
    /// Whether the CSV file has it (OData has every column).
    pub csv: bool,
    /// What department-scoped callers see instead (organization-wide figures are withheld from them).
    pub scoped_sql: Option<&'static str>,
}

impl Column {
    /// A column in both the CSV and OData.
    pub const fn new(name: &'static str, kind: Kind, sql: &'static str) -> Self {
        Self { name, kind, sql, nullable: false, csv: true, scoped_sql: None }
    }

    /// Nullable.
    pub const fn null(mut self) -> Self {
        self.nullable = true;
        self
    }

    /// Only in OData.
    pub const fn odata_only(mut self) -> Self {
        self.csv = false;
        self
    }

    /// What department-scoped callers see instead.
    pub const fn scoped(mut self, sql: &'static str) -> Self {
        self.scoped_sql = Some(sql);
        self
    }

    /// The CSV header: `GpuHours` → `gpu_hours`.
    pub fn csv_name(&self) -> String {
        snake(self.name)
    }
}

/// `TenantId` → `tenant_id`.
pub fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// One value.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell<'a> {
    /// No value: an empty CSV cell, JSON `null`.
    Null,
    /// Text.
    Text(Cow<'a, str>),
    /// An exact decimal in its text form (`-12.50`).
    Num(Cow<'a, str>),
    /// An integer.
    Int(i64),
    /// A month.
    Month(Date),
    /// An instant.
    Time(OffsetDateTime),
    /// A UUID.
    Guid(Uuid),
    /// A boolean.
    Bool(bool),
}

impl<'a> Cell<'a> {
    /// Text, or null when empty.
    pub fn text_or_null(s: &'a str) -> Self {
        if s.is_empty() { Self::Null } else { Self::Text(Cow::Borrowed(s)) }
    }

    /// Borrowed text.
    pub fn text(s: &'a str) -> Self {
        Self::Text(Cow::Borrowed(s))
    }
}

/// Reads column `i` of a row selected as [`Kind::select_type`].
pub fn decode(row: &PgRow, i: usize, kind: Kind) -> Result<Cell<'_>, sqlx::Error> {
    Ok(match kind {
        Kind::Text => row.try_get::<Option<&str>, _>(i)?.map_or(Cell::Null, |s| Cell::Text(Cow::Borrowed(s))),
        Kind::Decimal => row.try_get::<Option<&str>, _>(i)?.map_or(Cell::Null, |s| Cell::Num(Cow::Borrowed(s))),
        Kind::Month => row.try_get::<Option<Date>, _>(i)?.map_or(Cell::Null, Cell::Month),
        Kind::Int32 => row.try_get::<Option<i32>, _>(i)?.map_or(Cell::Null, |v| Cell::Int(i64::from(v))),
        Kind::Int64 => row.try_get::<Option<i64>, _>(i)?.map_or(Cell::Null, Cell::Int),
        Kind::DateTime => row.try_get::<Option<OffsetDateTime>, _>(i)?.map_or(Cell::Null, Cell::Time),
        Kind::Guid => row.try_get::<Option<Uuid>, _>(i)?.map_or(Cell::Null, Cell::Guid),
        Kind::Bool => row.try_get::<Option<bool>, _>(i)?.map_or(Cell::Null, Cell::Bool),
    })
}

/// Whether a text cell would be read as a formula by a spreadsheet (OWASP's list: `=`, `+`, `-`, `@`, tab, CR,
/// LF, and NUL).
pub fn is_formula_like(s: &str) -> bool {
    matches!(s.as_bytes().first(), Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r' | b'\n' | 0))
}

/// Writes a text cell for CSV: a formula-like cell gets a leading `'` (and quotes), and a cell holding a comma,
/// quote, CR or LF is quoted with inner quotes doubled (RFC 4180).
pub fn csv_text(out: &mut Vec<u8>, s: &str) {
    let risky = is_formula_like(s);
    let quote = risky || s.bytes().any(|b| matches!(b, b',' | b'"' | b'\r' | b'\n'));
    if !quote {
        out.extend_from_slice(s.as_bytes());
        return;
    }
    out.push(b'"');
    if risky {
        out.push(b'\'');
    }
    for b in s.bytes() {
        if b == b'"' {
            out.push(b'"');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// Writes one CSV cell (no separator). Numbers, dates and identifiers are written as they are.
pub fn csv_cell(out: &mut Vec<u8>, cell: &Cell<'_>) {
    match cell {
        Cell::Null => {}
        Cell::Text(s) => csv_text(out, s),
        Cell::Num(s) => out.extend_from_slice(s.as_bytes()),
        Cell::Int(v) => {
            let _ = write!(out, "{v}");
        }
        Cell::Month(d) => month(out, *d),
        Cell::Time(t) => instant(out, *t),
        Cell::Guid(u) => guid(out, u),
        Cell::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
    }
}

/// Writes a CSV row and its CRLF.
pub fn csv_row<'c>(out: &mut Vec<u8>, cells: impl IntoIterator<Item = &'c Cell<'c>>) {
    for (i, c) in cells.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        csv_cell(out, c);
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes a CSV header row.
pub fn csv_header<S: AsRef<str>>(out: &mut Vec<u8>, names: impl IntoIterator<Item = S>) {
    for (i, n) in names.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        csv_text(out, n.as_ref());
    }
    out.extend_from_slice(b"\r\n");
}

/// `YYYY-MM`.
pub fn month(out: &mut Vec<u8>, d: Date) {
    let _ = write!(out, "{:04}-{:02}", d.year(), u8::from(d.month()));
}

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`, in UTC. (Written digit by digit: an export writes millions of them.)
pub fn instant(out: &mut Vec<u8>, t: OffsetDateTime) {
    let t = t.to_offset(UtcOffset::UTC);
    let (h, m, s, micro) = t.to_hms_micro();
    let year = t.year();
    if !(0..=9999).contains(&year) {
        let _ = write!(out, "{year:04}");
    } else {
        digits(out, year.unsigned_abs(), 4);
    }
    out.push(b'-');
    digits(out, u32::from(u8::from(t.month())), 2);
    out.push(b'-');
    digits(out, u32::from(t.day()), 2);
    out.push(b'T');
    digits(out, u32::from(h), 2);
    out.push(b':');
    digits(out, u32::from(m), 2);
    out.push(b':');
    digits(out, u32::from(s), 2);
    if micro != 0 {
        out.push(b'.');
        digits(out, micro, 6);
    }
    out.push(b'Z');
}

/// `v` with exactly `width` decimal digits (zero-padded; `v < 10^width`).
fn digits(out: &mut Vec<u8>, mut v: u32, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for i in (start..start + width).rev() {
        // `v % 10` is a single decimal digit, so it fits a byte.
        out[i] = b'0' + u8::try_from(v % 10).unwrap_or(0);
        v /= 10;
    }
}

/// The instant as a string (see [`instant`]).
pub fn instant_string(t: OffsetDateTime) -> String {
    let mut v = Vec::with_capacity(27);
    instant(&mut v, t);
    String::from_utf8_lossy(&v).into_owned()
}

/// The month as a string (see [`month`]).
pub fn month_string(d: Date) -> String {
    let mut v = Vec::with_capacity(7);
    month(&mut v, d);
    String::from_utf8_lossy(&v).into_owned()
}

fn guid(out: &mut Vec<u8>, u: &Uuid) {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    out.extend_from_slice(u.hyphenated().encode_lower(&mut buf).as_bytes());
}

/// Writes a JSON string literal.
pub fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    if !bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\') {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        match escape {
            Some(e) => out.extend_from_slice(e),
            None => {
                let _ = write!(out, "\\u{:04x}", b);
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Writes one JSON value. With `ieee754` (the client asked for `IEEE754Compatible=true`), decimals and 64-bit
/// integers are strings; otherwise numbers, written from their exact text.
pub fn json_cell(out: &mut Vec<u8>, cell: &Cell<'_>, kind: Kind, ieee754: bool) {
    match cell {
        Cell::Null => out.extend_from_slice(b"null"),
        Cell::Text(s) => json_string(out, s),
        Cell::Num(s) => {
            if ieee754 {
                json_string(out, s);
            } else {
                out.extend_from_slice(s.as_bytes());
            }
        }
        Cell::Int(v) => {
            if ieee754 && kind == Kind::Int64 {
                let _ = write!(out, "\"{v}\"");
            } else {
                let _ = write!(out, "{v}");
            }
        }
        Cell::Month(d) => {
            out.push(b'"');
            month(out, *d);
            out.push(b'"');
        }
        Cell::Time(t) => {
            out.push(b'"');
            instant(out, *t);
            out.push(b'"');
        }
        Cell::Guid(u) => {
            out.push(b'"');
            guid(out, u);
            out.push(b'"');
        }
        Cell::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::datetime;

    fn csv(cell: Cell<'_>) -> String {
        let mut v = Vec::new();
        csv_cell(&mut v, &cell);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn formula_like_text_is_neutralized_and_numbers_are_not() {
        for (input, want) in [
            ("=SUM(A1:A9)", "\"'=SUM(A1:A9)\""),
            ("+1", "\"'+1\""),
            ("-2", "\"'-2\""),
            ("@cmd", "\"'@cmd\""),
            ("\tx", "\"'\tx\""),
            ("\rx", "\"'\rx\""),
            ("\nx", "\"'\nx\""),
            ("\0x", "\"'\0x\""),
            ("=a,\"b\"", "\"'=a,\"\"b\"\"\""),
            ("plain", "plain"),
            ("a,b", "\"a,b\""),
            ("say \"hi\"", "\"say \"\"hi\"\"\""),
            ("x=1", "x=1"),
            ("", ""),
        ] {
            assert_eq!(csv(Cell::text(input)), want, "{input:?}");
        }
        assert_eq!(csv(Cell::Num("-12.50".into())), "-12.50");
        assert_eq!(csv(Cell::Int(-3)), "-3");
    }

    #[test]
    fn instants_are_utc_iso_8601() {
        assert_eq!(instant_string(datetime!(2026-09-01 02:00 +02:00)), "2026-09-01T00:00:00Z");
        assert_eq!(instant_string(datetime!(2026-09-01 00:00:00.25 UTC)), "2026-09-01T00:00:00.250000Z");
        assert_eq!(instant_string(datetime!(0987-12-31 23:59:59.000001 UTC)), "0987-12-31T23:59:59.000001Z");
        assert_eq!(month_string(time::macros::date!(2026 - 03 - 01)), "2026-03");
    }

    #[test]
    fn json_escapes_and_decimals() {
        let mut v = Vec::new();
        json_string(&mut v, "a\"b\\c\nd\u{1}é");
        assert_eq!(String::from_utf8(v.clone()).unwrap(), r#""a\"b\\c\nd\u0001é""#);
        let parsed: String = serde_json::from_slice(&v).unwrap();
        assert_eq!(parsed, "a\"b\\c\nd\u{1}é");
        let mut v = Vec::new();
        json_cell(&mut v, &Cell::Num("12.50".into()), Kind::Decimal, false);
        v.push(b',');
        json_cell(&mut v, &Cell::Num("12.50".into()), Kind::Decimal, true);
        v.push(b',');
        json_cell(&mut v, &Cell::Int(7), Kind::Int64, true);
        assert_eq!(String::from_utf8(v).unwrap(), r#"12.50,"12.50","7""#);
    }

    #[test]
    fn snake_case_headers() {
        assert_eq!(snake("GpuHours"), "gpu_hours");
        assert_eq!(snake("LineId"), "line_id");
        assert_eq!(snake("Period"), "period");
    }

    /// Reads one RFC 4180 field back (the test's own reader, independent of the writer).
    fn read_field(bytes: &[u8]) -> Option<String> {
        if bytes.first() != Some(&b'"') {
            let s = std::str::from_utf8(bytes).ok()?;
            return (!s.contains([',', '"', '\r', '\n'])).then(|| s.to_string());
        }
        let inner = bytes.get(1..bytes.len().checked_sub(1)?)?;
        if bytes.last() != Some(&b'"') || bytes.len() < 2 {
            return None;
        }
        let mut out = Vec::new();
        let mut i = 0;
        while i < inner.len() {
            if inner[i] == b'"' {
                if inner.get(i + 1) != Some(&b'"') {
                    return None; // a lone quote inside a quoted field
                }
                i += 1;
            }
            out.push(inner[i]);
            i += 1;
        }
        String::from_utf8(out).ok()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 5000, ..Default::default() })]
        /// Any text: the cell is one well-formed CSV field that reads back as the text itself, or, when a spreadsheet
        /// would take it for a formula, as the text behind a `'`; nothing it writes starts a formula.
        #[test]
        fn any_text_is_one_safe_csv_field(s in "(\\PC|[\r\n\t\",=+@\\-]|\u{0}){0,64}") {
            let mut out = Vec::new();
            csv_cell(&mut out, &Cell::Text(std::borrow::Cow::Borrowed(&s)));
            let back = read_field(&out);
            proptest::prop_assert!(back.is_some(), "not one field: {:?}", String::from_utf8_lossy(&out));
            let back = back.unwrap_or_default();
            proptest::prop_assert!(!is_formula_like(&back), "a spreadsheet would run {:?}", back);
            if is_formula_like(&s) {
                proptest::prop_assert_eq!(back, format!("'{s}"));
            } else {
                proptest::prop_assert_eq!(&back, &s);
            }
        }

        /// Any text as a JSON string literal reads back unchanged.
        #[test]
        fn any_text_is_a_json_string(s in "(\\PC|[\\x00-\\x1f\"\\\\])*") {
            let mut out = Vec::new();
            json_string(&mut out, &s);
            let back: String = serde_json::from_slice(&out).unwrap();
            proptest::prop_assert_eq!(back, s);
        }
    }
}
