//! A cloud bill in the FinOps FOCUS format (1.0–1.3, CSV as AWS, Azure and Google Cloud export it), read line by
//! line and summed per resource as it is read — a provider's month is a line per resource and hour, millions of
//! lines, so nothing but the sums is kept (issue 35).
//!
//! Columns used: `ResourceId`, `EffectiveCost` (what the month cost after commitment discounts — what tenants
//! split), `BilledCost`, `BillingCurrency`, `ChargePeriodStart` (lines outside the month are counted, not summed),
//! `ServiceName`. Columns are found by name in any order; others are ignored. Costs are read exactly to 12
//! decimals (a longer fraction, or an exponent as some exports write, is rounded there, half away from zero).

use std::{collections::HashMap, io::BufRead};

use time::{OffsetDateTime, format_description::well_known::Rfc3339};

use crate::{decimal::Decimal, provider::ResourceKey};

/// Longest line read (bytes), and most fields in a line.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most fields in a line.
pub const MAX_FIELDS: usize = 512;
/// Most distinct resources summed one by one; beyond it, further new resources are summed together.
pub const MAX_RESOURCES: usize = 200_000;

/// What went wrong, where: the 1-based line of the file and the column (or `body`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, {column}: {reason}")]
pub struct BillError {
    /// Line of the file (1 = the header).
    pub line: u64,
    /// The column, or `body`.
    pub column: String,
    /// Why.
    pub reason: String,
}

/// One resource's sums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSum {
    /// `ResourceId` as the bill writes it (the first spelling seen); `None` for lines without one, and for the
    /// resources past [`MAX_RESOURCES`] summed together.
    pub resource_id: Option<String>,
    /// Its key, when it names a cloud VM.
    pub key: Option<ResourceKey>,
    /// `ServiceName` of its first line.
    pub service_name: String,
    /// Lines summed.
    pub lines: u64,
    /// Sum of `EffectiveCost`.
    pub effective_cost: Decimal,
    /// Sum of `BilledCost`.
    pub billed_cost: Decimal,
}

/// A bill read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillSummary {
    /// `1.0`…`1.3` as the columns tell (`ServiceProviderName` is 1.3's, `x_`-free `ChargeClass` 1.0+).
    pub focus_version: String,
    /// `BillingCurrency` (one per bill).
    pub currency: String,
    /// Data lines read.
    pub lines_read: u64,
    /// Lines whose `ChargePeriodStart` is outside the month.
    pub lines_outside: u64,
    /// Per resource, in first-seen order.
    pub resources: Vec<ResourceSum>,
}

/// Reads a FOCUS CSV bill, keeping the lines whose charge period starts in `[from, to)`.
pub fn read(input: impl BufRead, from: OffsetDateTime, to: OffsetDateTime) -> Result<BillSummary, BillError> {
    let mut rows = CsvRows::new(input);
    let header = rows.next_row()?.ok_or_else(|| err(1, "body", "empty: a FOCUS CSV starts with its header line"))?;
    let find = |name: &str| header.iter().position(|h| h.trim().trim_start_matches('\u{feff}') == name);
    let need = |name: &str| find(name).ok_or_else(|| err(1, name, "missing: a FOCUS 1.0–1.3 bill has this column"));
    let (c_resource, c_effective, c_billed, c_currency) =
        (need("ResourceId")?, need("EffectiveCost")?, need("BilledCost")?, need("BillingCurrency")?);
    let c_start = find("ChargePeriodStart");
    let c_service = find("ServiceName");
    let focus_version = if find("ServiceProviderName").is_some() {
        "1.3"
    } else if find("CapacityReservationId").is_some() || find("CommitmentDiscountQuantity").is_some() {
        "1.1+"
    } else {
        "1.0+"
    }
    .to_string();
    let mut currency: Option<String> = None;
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut resources: Vec<ResourceSum> = Vec::new();
    let (mut read, mut outside) = (0u64, 0u64);
    while let Some(row) = rows.next_row()? {
        let line = rows.line;
        if row.len() == 1 && row[0].trim().is_empty() {
            continue; // a blank line (a trailing newline twice)
        }
        read += 1;
        // RFC 4180: every record has the header's fields. A record with more or fewer has lost its alignment (an
        // unquoted comma in a cost, a cut line): reading on would put values under the wrong columns.
        if row.len() != header.len() {
            return Err(err(
                line,
                "body",
                format!("{} fields where the header has {} (an unquoted comma or quote?)", row.len(), header.len()),
            ));
        }
        let field = |c: usize| row.get(c).map(String::as_str).unwrap_or("");
        if let Some(c) = c_start {
            let start = field(c).trim();
            if !start.is_empty() {
                let at =
                    parse_instant(start).ok_or_else(|| err(line, "ChargePeriodStart", "not an RFC 3339 instant"))?;
                if at < from || at >= to {
                    outside += 1;
                    continue;
                }
            }
        }
        let cur = field(c_currency).trim();
        if cur.len() != 3 || !cur.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(err(line, "BillingCurrency", "an ISO 4217 code (USD, EUR…)"));
        }
        match &currency {
            None => currency = Some(cur.to_string()),
            Some(c) if c != cur => {
                return Err(err(line, "BillingCurrency", format!("{cur} after {c}: one currency per import")));
            }
            Some(_) => {}
        }
        let effective = cost(field(c_effective)).map_err(|r| err(line, "EffectiveCost", r))?;
        let billed = cost(field(c_billed)).map_err(|r| err(line, "BilledCost", r))?;
        let rid = field(c_resource).trim();
        if rid.len() > crate::provider::MAX_RESOURCE_ID || rid.chars().any(char::is_control) {
            return Err(err(line, "ResourceId", "at most 1024 characters, no control characters"));
        }
        let slot = if rid.is_empty() {
            ""
        } else if index.contains_key(rid) || index.len() < MAX_RESOURCES {
            rid
        } else {
            "\u{0}others" // past the cap: summed together (a NUL cannot be in an accepted ResourceId)
        };
        let i = match index.get(slot) {
            Some(i) => *i,
            None => {
                let named = !slot.is_empty() && !slot.starts_with('\u{0}');
                resources.push(ResourceSum {
                    resource_id: named.then(|| rid.to_string()),
                    key: if named { ResourceKey::from_resource_id(rid) } else { None },
                    service_name: c_service.map(|c| field(c).trim().chars().take(400).collect()).unwrap_or_default(),
                    lines: 0,
                    effective_cost: Decimal::ZERO,
                    billed_cost: Decimal::ZERO,
                });
                index.insert(slot.to_string(), resources.len() - 1);
                resources.len() - 1
            }
        };
        let r = &mut resources[i];
        r.lines += 1;
        r.effective_cost =
            r.effective_cost.checked_add(&effective).map_err(|e| err(line, "EffectiveCost", e.to_string()))?;
        r.billed_cost = r.billed_cost.checked_add(&billed).map_err(|e| err(line, "BilledCost", e.to_string()))?;
    }
    Ok(BillSummary {
        focus_version,
        currency: currency.unwrap_or_else(|| "USD".into()),
        lines_read: read,
        lines_outside: outside,
        resources,
    })
}

fn err(line: u64, column: &str, reason: impl Into<String>) -> BillError {
    BillError { line, column: column.to_string(), reason: reason.into() }
}

fn parse_instant(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok().or_else(|| {
        // Some exports write `2026-11-01 00:00:00` or `2026-11-01T00:00:00` (UTC by FOCUS's rule).
        let t = s.replace(' ', "T");
        let t = if t.len() == 19 { format!("{t}Z") } else { t };
        OffsetDateTime::parse(&t, &Rfc3339).ok()
    })
}

/// A cost as FOCUS writes it (`12.5`, `-0.000001`, `1.2E-5`, empty = 0), exact to 12 decimals.
pub fn cost(s: &str) -> Result<Decimal, String> {
    let t = s.trim();
    if t.is_empty() {
        return Ok(Decimal::ZERO);
    }
    if t.len() > 64 {
        return Err("a number of at most 64 characters".into());
    }
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].parse::<i32>().map_err(|_| format!("{t:?} is not a number"))?),
        None => (t, 0),
    };
    if !(-40..=40).contains(&exp) {
        return Err(format!("{t:?}: exponent out of range"));
    }
    let (neg, m) = match mantissa.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, mantissa.strip_prefix('+').unwrap_or(mantissa)),
    };
    let (int, frac) = m.split_once('.').unwrap_or((m, ""));
    if (int.is_empty() && frac.is_empty()) || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(format!("{t:?} is not a number"));
    }
    // Digits and the position of the point after shifting by the exponent.
    let digits: String = format!("{int}{frac}");
    let point = i64::try_from(int.len()).unwrap_or(0) + i64::from(exp);
    let (int_part, frac_part): (String, String) = if point <= 0 {
        (String::from("0"), format!("{}{digits}", "0".repeat(usize::try_from(-point).unwrap_or(0))))
    } else if point as usize >= digits.len() {
        (format!("{digits}{}", "0".repeat(point as usize - digits.len())), String::new())
    } else {
        (digits[..point as usize].to_string(), digits[point as usize..].to_string())
    };
    let int_part = int_part.trim_start_matches('0');
    let int_part = if int_part.is_empty() { "0" } else { int_part };
    if int_part.len() > 24 {
        return Err(format!("{t:?} is too large"));
    }
    let scale = crate::decimal::MAX_SCALE as usize;
    let (kept, rest) = if frac_part.len() > scale { frac_part.split_at(scale) } else { (frac_part.as_str(), "") };
    let text = if kept.is_empty() { int_part.to_string() } else { format!("{int_part}.{kept}") };
    let mut d = Decimal::parse(&text).map_err(|e| e.to_string())?;
    if rest.as_bytes().first().is_some_and(|b| *b >= b'5') {
        let ulp = Decimal::from_scaled(1, u32::try_from(kept.len()).unwrap_or(0)).map_err(|e| e.to_string())?;
        d = d.checked_add(&ulp).map_err(|e| e.to_string())?;
    }
    if neg {
        d = Decimal::ZERO.checked_sub(&d).map_err(|e| e.to_string())?;
    }
    Ok(d)
}

/// RFC 4180 rows from a reader: quoted fields (with `""` inside, and line breaks), CRLF or LF, bounded per line.
struct CsvRows<R> {
    input: R,
    /// Line of the file where the last row ended.
    line: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> CsvRows<R> {
    fn new(input: R) -> Self {
        Self { input, line: 0, buf: Vec::new() }
    }

    fn next_row(&mut self) -> Result<Option<Vec<String>>, BillError> {
        let mut fields: Vec<String> = Vec::new();
        let mut field: Vec<u8> = Vec::new();
        let mut quoted = false;
        let mut started = false;
        let mut row_bytes = 0usize;
        loop {
            self.buf.clear();
            let n = std::io::Read::take(self.input.by_ref(), MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| err(self.line + 1, "body", format!("could not be read: {e}")))?;
            if n == 0 {
                if !started {
                    return Ok(None);
                }
                if quoted {
                    return Err(err(self.line, "body", "a quoted field is not closed at the end of the file"));
                }
                break;
            }
            started = true;
            self.line += 1;
            row_bytes += n;
            if n > MAX_LINE_BYTES || row_bytes > 4 * MAX_LINE_BYTES {
                return Err(err(self.line, "body", format!("a line longer than {MAX_LINE_BYTES} bytes")));
            }
            let mut bytes = self.buf.as_slice();
            if !quoted {
                bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
                bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            }
            let mut i = 0;
            while i < bytes.len() {
                let b = bytes[i];
                if quoted {
                    if b == b'"' {
                        if bytes.get(i + 1) == Some(&b'"') {
                            field.push(b'"');
                            i += 1;
                        } else {
                            quoted = false;
                        }
                    } else {
                        field.push(b);
                    }
                } else if b == b'"' && field.is_empty() {
                    quoted = true;
                } else if b == b',' {
                    fields.push(text(&field, self.line)?);
                    field.clear();
                    if fields.len() > MAX_FIELDS {
                        return Err(err(self.line, "body", format!("more than {MAX_FIELDS} fields in a line")));
                    }
                } else if b == b'\r' || b == b'\n' {
                    // Only inside a quoted field's continuation; stripped above otherwise.
                } else {
                    field.push(b);
                }
                i += 1;
            }
            if !quoted {
                break;
            }
            // A line break inside a quoted field: the row goes on.
        }
        fields.push(text(&field, self.line)?);
        Ok(Some(fields))
    }
}

fn text(bytes: &[u8], line: u64) -> Result<String, BillError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| err(line, "body", "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::datetime;

    const NOV: (OffsetDateTime, OffsetDateTime) = (datetime!(2026-11-01 0:00 UTC), datetime!(2026-12-01 0:00 UTC));

    fn d(s: &str) -> Decimal {
        Decimal::parse(s).unwrap()
    }

    #[test]
    fn costs_read_exactly_to_twelve_decimals() {
        assert_eq!(cost("12.5").unwrap(), d("12.5"));
        assert_eq!(cost("").unwrap(), Decimal::ZERO);
        assert_eq!(cost("-0.000001").unwrap(), d("-0.000001"));
        assert_eq!(cost("1.2E-5").unwrap(), d("0.000012"));
        assert_eq!(cost("3e2").unwrap(), d("300"));
        assert_eq!(cost("0.1234567890125").unwrap(), d("0.123456789013"), "half away from zero at 12");
        assert_eq!(cost("-0.1234567890125").unwrap(), d("-0.123456789013"));
        for bad in ["abc", "1,5", "--1", "1e999", ".", "1.2.3", "NaN"] {
            assert!(cost(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bill_is_summed_per_resource_with_quotes_and_lines_outside_the_month() {
        let csv = "\u{feff}BillingCurrency,ResourceId,EffectiveCost,BilledCost,ChargePeriodStart,ServiceName,ChargeDescription\r\n\
            USD,i-0abc123def4567890,10.50,12.00,2026-11-01T00:00:00Z,Amazon Elastic Compute Cloud,\"GPU, p5\"\r\n\
            USD,arn:aws:ec2:us-east-1:1:instance/i-0abc123def4567890,0.25,0.30,2026-11-30T23:00:00Z,Amazon Elastic Compute Cloud,\"two\nlines\"\r\n\
            USD,i-0abc123def4567890,100,100,2026-12-01T00:00:00Z,Amazon Elastic Compute Cloud,next month\r\n\
            USD,,1.00,1.00,2026-11-02T00:00:00Z,Support,\"say \"\"hi\"\"\"\r\n";
        let b = read(csv.as_bytes(), NOV.0, NOV.1).unwrap();
        assert_eq!((b.lines_read, b.lines_outside, b.currency.as_str()), (4, 1, "USD"));
        assert_eq!(b.resources.len(), 3, "{b:?}");
        // The bare ID and the ARN are two spellings of one machine: one key, two resource rows.
        assert_eq!(b.resources[0].key, b.resources[1].key);
        assert_eq!(b.resources[0].effective_cost, d("10.50"));
        assert_eq!(b.resources[1].billed_cost, d("0.30"));
        assert_eq!(b.resources[2].resource_id, None);
        let total = b.resources.iter().fold(Decimal::ZERO, |a, r| a.checked_add(&r.effective_cost).unwrap());
        assert_eq!(total, d("11.75"));
    }

    #[test]
    fn what_a_bill_cannot_be_is_named_with_its_line_and_column() {
        let e = read("ResourceId,EffectiveCost\nx,1\n".as_bytes(), NOV.0, NOV.1).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (1, "BilledCost"));
        let h = "BillingCurrency,ResourceId,EffectiveCost,BilledCost\n";
        let e = read(format!("{h}USD,a,1,1\nEUR,b,1,1\n").as_bytes(), NOV.0, NOV.1).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (3, "BillingCurrency"));
        let e = read(format!("{h}USD,a,one,1\n").as_bytes(), NOV.0, NOV.1).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (2, "EffectiveCost"));
        let e = read(format!("{h}USD,\"a,1,1\n").as_bytes(), NOV.0, NOV.1).unwrap_err();
        assert_eq!(e.column, "body");
        let long = format!("{h}USD,{},1,1\n", "x".repeat(MAX_LINE_BYTES + 10));
        assert!(read(long.as_bytes(), NOV.0, NOV.1).is_err());
        assert!(read("".as_bytes(), NOV.0, NOV.1).is_err());
        let e = read(format!("{h}USD,a\u{1},1,1\n").as_bytes(), NOV.0, NOV.1).unwrap_err();
        assert_eq!(e.column, "ResourceId");
    }

    proptest::proptest! {
        /// Summing per resource loses nothing: the sums equal the sum of the lines, whatever their order.
        #[test]
        fn sums_are_exact(lines in proptest::collection::vec((0u8..5, -1_000_000i64..1_000_000), 1..60)) {
            let mut csv = String::from("BillingCurrency,ResourceId,EffectiveCost,BilledCost\n");
            let mut want = Decimal::ZERO;
            for (r, cents) in &lines {
                let c = Decimal::from_scaled(i128::from(*cents), 4).unwrap();
                want = want.checked_add(&c).unwrap();
                csv.push_str(&format!("USD,res-{r},{c},0\n"));
            }
            let b = read(csv.as_bytes(), NOV.0, NOV.1).unwrap();
            let got = b.resources.iter().fold(Decimal::ZERO, |a, r| a.checked_add(&r.effective_cost).unwrap());
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(b.lines_read, lines.len() as u64);
        }
    }
}
