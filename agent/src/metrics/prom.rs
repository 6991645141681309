//! Prometheus text exposition format 0.0.4, parsed in a single pass without regular expressions.
//!
//! Accepted: `# HELP name text` and `# TYPE name type` (other `#` lines are comments), blank lines, samples
//! `name{label="value",...} value [timestamp_ms]` with blanks or tabs between tokens, label values with the
//! escapes `\\`, `\"` and `\n`, empty label values, a trailing comma in a label set, blanks around label names
//! and values, `NaN` / `+Inf` / `-Inf` (any float Rust reads, case-insensitively for the special values), and
//! `\r\n` line ends. Histogram and summary series are plain samples (`_bucket` with `le`, `_sum`, `_count`,
//! `quantile`); [`Exposition::type_of`] finds the family type of such a series.
//!
//! Refused, with the 1-based line number: bad names, unterminated or badly escaped label values, duplicate
//! labels, non-float values, non-integer timestamps and text after the timestamp. A `# TYPE` naming a type
//! this format does not know (e.g. OpenMetrics `info`) is read as [`MetricType::Untyped`] rather than refused.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{ParseError, ParseErrorReason};

/// One sample line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Series name, as written (`foo_bucket`, not the family name `foo`).
    pub name: String,
    /// Labels; values unescaped. An empty value (`container=""`) is kept as an empty string.
    pub labels: BTreeMap<String, String>,
    /// The value (may be NaN or ±infinity).
    pub value: f64,
    /// Optional timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// A label's value, `None` when absent or empty (exporters write both for "no value").
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }
}

/// The type a `# TYPE` line declares for a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricType {
    /// Monotonic counter.
    Counter,
    /// Gauge.
    Gauge,
    /// Histogram (`_bucket`, `_sum`, `_count`).
    Histogram,
    /// Summary (`quantile`, `_sum`, `_count`).
    Summary,
    /// `untyped`, or a type name this format does not define.
    Untyped,
}

impl MetricType {
    fn from_word(word: &str) -> Self {
        match word {
            "counter" => Self::Counter,
            "gauge" => Self::Gauge,
            "histogram" => Self::Histogram,
            "summary" => Self::Summary,
            _ => Self::Untyped,
        }
    }
}

/// A parsed scrape.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Exposition {
    /// Samples in the order they appear.
    pub samples: Vec<Sample>,
    /// Family name → declared type.
    pub types: BTreeMap<String, MetricType>,
    /// Family name → help text (unescaped).
    pub help: BTreeMap<String, String>,
}

impl Exposition {
    /// The declared type of the family a series belongs to: the series name itself, or the name without a
    /// `_bucket`, `_sum`, `_count`, `_total` or `_created` suffix.
    pub fn type_of(&self, series: &str) -> Option<MetricType> {
        if let Some(t) = self.types.get(series) {
            return Some(*t);
        }
        ["_bucket", "_sum", "_count", "_total", "_created"]
            .iter()
            .filter_map(|suffix| series.strip_suffix(suffix))
            .find_map(|family| self.types.get(family).copied())
    }
}

/// Largest scrape body the agent reads (a DCGM exporter on an 8-GPU node writes ~200 KiB, vLLM ~100 KiB).
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Most samples in one scrape.
pub const MAX_SAMPLES: usize = 200_000;
/// Most labels on one sample (DCGM writes about a dozen).
pub const MAX_LABELS: usize = 64;
/// Longest line.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Parses a whole scrape, within [`MAX_BODY_BYTES`], [`MAX_SAMPLES`], [`MAX_LABELS`] and [`MAX_LINE_BYTES`].
pub fn parse(text: &str) -> Result<Exposition, ParseError> {
    let mut out = Exposition::default();
    if text.len() > MAX_BODY_BYTES {
        return Err(ParseError {
            line: 1,
            reason: ParseErrorReason::Limit(format!("the scrape is larger than {MAX_BODY_BYTES} bytes")),
        });
    }
    for (i, raw) in text.split('\n').enumerate() {
        let line_no = i + 1;
        if raw.len() > MAX_LINE_BYTES {
            let reason = ParseErrorReason::Limit(format!("a line longer than {MAX_LINE_BYTES} bytes"));
            return Err(ParseError { line: line_no, reason });
        }
        let line = raw.strip_suffix('\r').unwrap_or(raw).trim_start_matches([' ', '\t']);
        if line.trim_end_matches([' ', '\t']).is_empty() {
            continue;
        }
        let err = |reason| ParseError { line: line_no, reason };
        if let Some(comment) = line.strip_prefix('#') {
            parse_comment(comment, &mut out).map_err(err)?;
        } else {
            if out.samples.len() == MAX_SAMPLES {
                return Err(err(ParseErrorReason::Limit(format!("more than {MAX_SAMPLES} samples"))));
            }
            out.samples.push(parse_sample(line).map_err(err)?);
        }
    }
    Ok(out)
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `# HELP name text`, `# TYPE name type`; anything else after `#` is a comment.
fn parse_comment(rest: &str, out: &mut Exposition) -> Result<(), ParseErrorReason> {
    let rest = rest.trim_start_matches([' ', '\t']);
    let (keyword, rest) = split_word(rest);
    match keyword {
        "HELP" => {
            let (name, text) = split_word(rest);
            if name.is_empty() {
                return Err(ParseErrorReason::IncompleteDescriptor("HELP"));
            }
            out.help.insert(name.to_owned(), unescape_help(text));
        }
        "TYPE" => {
            let (name, rest) = split_word(rest);
            let (word, _) = split_word(rest);
            if name.is_empty() || word.is_empty() {
                return Err(ParseErrorReason::IncompleteDescriptor("TYPE"));
            }
            out.types.insert(name.to_owned(), MetricType::from_word(word));
        }
        _ => {}
    }
    Ok(())
}

/// The first blank-separated word and what follows it (leading blanks of the rest removed).
fn split_word(s: &str) -> (&str, &str) {
    let end = s.bytes().position(is_blank).unwrap_or(s.len());
    let (word, rest) = s.split_at(end);
    (word, rest.trim_start_matches([' ', '\t']))
}

fn unescape_help(text: &str) -> String {
    let text = text.trim_end_matches([' ', '\t']);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A cursor over one line.
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn rest(&self) -> &'a str {
        self.s.get(self.pos..).unwrap_or("")
    }

    fn skip_blanks(&mut self) {
        while self.peek().is_some_and(is_blank) {
            self.pos += 1;
        }
    }

    fn found(&self) -> String {
        let rest = self.rest();
        if rest.is_empty() { "end of line".to_owned() } else { rest.chars().take(24).collect() }
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*` for metrics, without `:` for labels.
    fn name(&mut self, what: &'static str) -> Result<&'a str, ParseErrorReason> {
        let colon_ok = what == "metric";
        let start = self.pos;
        while let Some(b) = self.peek() {
            let ok = b.is_ascii_alphabetic()
                || b == b'_'
                || (colon_ok && b == b':')
                || (self.pos > start && b.is_ascii_digit());
            if !ok {
                break;
            }
            self.pos += 1;
        }
        if self.pos == start {
            return Err(ParseErrorReason::InvalidName { what, found: self.found() });
        }
        Ok(self.s.get(start..self.pos).unwrap_or(""))
    }

    fn expect(&mut self, byte: u8, expected: &'static str) -> Result<(), ParseErrorReason> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(ParseErrorReason::Expected { expected, found: self.found() })
        }
    }

    /// A quoted label value, unescaped; the cursor is on the opening quote.
    fn quoted(&mut self) -> Result<String, ParseErrorReason> {
        self.expect(b'"', "'\"' opening a label value")?;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, '"')) => out.push('"'),
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, other)) => return Err(ParseErrorReason::InvalidEscape(other)),
                    None => return Err(ParseErrorReason::UnterminatedLabelValue),
                },
                c => out.push(c),
            }
        }
        Err(ParseErrorReason::UnterminatedLabelValue)
    }

    /// The next blank-delimited token.
    fn token(&mut self) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(|b| !is_blank(b)) {
            self.pos += 1;
        }
        self.s.get(start..self.pos).unwrap_or("")
    }
}

fn parse_sample(line: &str) -> Result<Sample, ParseErrorReason> {
    let mut c = Cursor { s: line, pos: 0 };
    let name = c.name("metric")?.to_owned();
    c.skip_blanks();
    let mut labels = BTreeMap::new();
    if c.peek() == Some(b'{') {
        c.pos += 1;
        loop {
            c.skip_blanks();
            if c.peek() == Some(b'}') {
                c.pos += 1;
                break;
            }
            let label = c.name("label")?.to_owned();
            c.skip_blanks();
            c.expect(b'=', "'=' after a label name")?;
            c.skip_blanks();
            let value = c.quoted()?;
            if labels.contains_key(&label) {
                return Err(ParseErrorReason::DuplicateLabel(label));
            }
            if labels.len() == MAX_LABELS {
                return Err(ParseErrorReason::Limit(format!("more than {MAX_LABELS} labels on one sample")));
            }
            labels.insert(label, value);
            c.skip_blanks();
            match c.peek() {
                Some(b',') => c.pos += 1,
                Some(b'}') => {}
                _ => {
                    return Err(ParseErrorReason::Expected { expected: "',' or '}'", found: c.found() });
                }
            }
        }
        c.skip_blanks();
    }
    let value_text = c.token();
    if value_text.is_empty() {
        return Err(ParseErrorReason::Expected { expected: "a sample value", found: c.found() });
    }
    let value = parse_value(value_text).ok_or_else(|| ParseErrorReason::InvalidValue(value_text.to_owned()))?;
    c.skip_blanks();
    let timestamp_ms = match c.token() {
        "" => None,
        ts => Some(ts.parse::<i64>().map_err(|_| ParseErrorReason::InvalidTimestamp(ts.to_owned()))?),
    };
    c.skip_blanks();
    if c.peek().is_some() {
        return Err(ParseErrorReason::TrailingText(c.found()));
    }
    Ok(Sample { name, labels, value, timestamp_ms })
}

/// A Go `ParseFloat`-like reading: decimal floats plus `NaN`, `Inf`, `+Inf`, `-Inf` in any case.
fn parse_value(text: &str) -> Option<f64> {
    text.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn one(line: &str) -> Sample {
        let mut e = parse(line).unwrap();
        assert_eq!(e.samples.len(), 1, "{line}");
        e.samples.remove(0)
    }

    #[test]
    fn plain_sample_without_labels() {
        let s = one("process_open_fds 48.0");
        assert_eq!(s.name, "process_open_fds");
        assert!(s.labels.is_empty());
        assert_eq!(s.value, 48.0);
        assert_eq!(s.timestamp_ms, None);
    }

    #[test]
    fn escapes_in_label_values() {
        let s = one(r#"m{a="back\\slash",b="say \"hi\"",c="two\nlines",d="ünï"} 1"#);
        assert_eq!(s.labels["a"], "back\\slash");
        assert_eq!(s.labels["b"], "say \"hi\"");
        assert_eq!(s.labels["c"], "two\nlines");
        assert_eq!(s.labels["d"], "ünï");
    }

    #[test]
    fn special_values_and_exponents() {
        assert!(one("m NaN").value.is_nan());
        assert_eq!(one("m +Inf").value, f64::INFINITY);
        assert_eq!(one("m -Inf").value, f64::NEG_INFINITY);
        assert_eq!(one("m 9.035190272e+09").value, 9_035_190_272.0);
        assert_eq!(one("m -0.5").value, -0.5);
    }

    #[test]
    fn timestamps_blanks_and_crlf() {
        let s = one("m{a=\"1\"}\t 3   1395066363000 \r");
        assert_eq!(s.value, 3.0);
        assert_eq!(s.timestamp_ms, Some(1_395_066_363_000));
        assert_eq!(one("m -1 -5").timestamp_ms, Some(-5));
    }

    #[test]
    fn trailing_comma_empty_values_and_spaces_in_label_sets() {
        let s = one(r#"m{ container="" , le="+Inf", } 2"#);
        assert_eq!(s.labels["container"], "");
        assert_eq!(s.label("container"), None);
        assert_eq!(s.label("le"), Some("+Inf"));
        assert_eq!(one("m{} 1").labels.len(), 0);
    }

    #[test]
    fn help_type_comments_and_blank_lines() {
        let text = "# HELP h_seconds Latency\\nwith a \\\\ backslash\n\
                    # TYPE h_seconds histogram\n\
                    # just a comment\n\
                    #\n\
                    \n\
                    h_seconds_bucket{le=\"0.1\"} 1\n\
                    h_seconds_bucket{le=\"+Inf\"} 3\n\
                    h_seconds_sum 0.7\n\
                    h_seconds_count 3\n\
                    # TYPE s summary\n\
                    s{quantile=\"0.5\"} 55\n\
                    # TYPE odd info\n";
        let e = parse(text).unwrap();
        assert_eq!(e.samples.len(), 5);
        assert_eq!(e.help["h_seconds"], "Latency\nwith a \\ backslash");
        assert_eq!(e.type_of("h_seconds_bucket"), Some(MetricType::Histogram));
        assert_eq!(e.type_of("h_seconds_count"), Some(MetricType::Histogram));
        assert_eq!(e.type_of("s"), Some(MetricType::Summary));
        assert_eq!(e.type_of("odd"), Some(MetricType::Untyped));
        assert_eq!(e.type_of("nope"), None);
        assert_eq!(e.samples[4].labels["quantile"], "0.5");
    }

    fn error(text: &str) -> ParseError {
        parse(text).expect_err(text)
    }

    #[test]
    fn malformed_lines_name_their_line_and_reason() {
        let e = error("ok 1\n\n# TYPE ok gauge\nbad{a=\"x} 1\n");
        assert_eq!(e.line, 4);
        assert_eq!(e.reason, ParseErrorReason::UnterminatedLabelValue);
        assert!(e.to_string().contains("line 4"), "{e}");

        assert_eq!(error("m{a=\"\\t\"} 1").reason, ParseErrorReason::InvalidEscape('t'));
        assert_eq!(error("a 1\nm{a=\"1\",a=\"2\"} 1").reason, ParseErrorReason::DuplicateLabel("a".into()));
        assert_eq!(error("a 1\nm{a=\"1\",a=\"2\"} 1").line, 2);
        assert_eq!(error("m twelve").reason, ParseErrorReason::InvalidValue("twelve".into()));
        assert_eq!(error("m 1 12.5").reason, ParseErrorReason::InvalidTimestamp("12.5".into()));
        assert_eq!(error("m 1 2 3").reason, ParseErrorReason::TrailingText("3".into()));
        assert!(matches!(error("m{a=\"1\"}").reason, ParseErrorReason::Expected { .. }));
        assert!(matches!(error("m{a=\"1\" b=\"2\"} 1").reason, ParseErrorReason::Expected { .. }));
        assert!(matches!(error("m{a \"1\"} 1").reason, ParseErrorReason::Expected { .. }));
        assert!(matches!(error("m{1a=\"1\"} 1").reason, ParseErrorReason::InvalidName { what: "label", .. }));
        assert!(matches!(error("9m 1").reason, ParseErrorReason::InvalidName { what: "metric", .. }));
        assert_eq!(error("# TYPE onlyname").reason, ParseErrorReason::IncompleteDescriptor("TYPE"));
    }

    #[test]
    fn limits_are_named_with_their_line() {
        let labels = (0..=MAX_LABELS).map(|i| format!("l{i}=\"x\"")).collect::<Vec<_>>().join(",");
        let e = error(&format!("# HELP m h\nm{{{labels}}} 1"));
        assert_eq!(e.line, 2);
        assert!(matches!(e.reason, ParseErrorReason::Limit(ref m) if m.contains("labels")));
        let e = error(&format!("m{{l=\"{}\"}} 1", "x".repeat(MAX_LINE_BYTES)));
        assert!(matches!(e.reason, ParseErrorReason::Limit(ref m) if m.contains("line longer")));
        let many = "m 1\n".repeat(MAX_SAMPLES + 1);
        let e = error(&many);
        assert_eq!(e.line, MAX_SAMPLES + 1);
        assert!(parse(&"m 1\n".repeat(MAX_SAMPLES)).is_ok());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]
        /// Any text at all: parsed or refused with a line number inside the text, never a panic.
        #[test]
        fn any_text_is_answered(text in "(\\PC|[\n\r\t\\\"{}=,# ]){0,300}") {
            if let Err(e) = parse(&text) {
                proptest::prop_assert!(e.line >= 1 && e.line <= text.split('\n').count());
            }
        }

        /// Lines built from the format's own pieces in any order: parsed or refused, never a panic.
        #[test]
        fn any_line_soup_is_answered(parts in proptest::collection::vec(proptest::sample::select(vec![
            "m", "m_total", "{", "}", "l=", "\"v\"", "\"\\\"\"", ",", " ", "1", "-Inf", "NaN", "1e9", "# TYPE m counter",
            "# HELP m x", "\n", "\r\n", "\t", "9", "\"", "\\", "=",
        ]), 0..80)) {
            let _ = parse(&parts.concat());
        }

        /// Any label value survives escaping and parsing unchanged.
        #[test]
        fn escaped_label_values_round_trip(v in "\\PC*", x in proptest::num::f64::NORMAL) {
            let escaped = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            let s = one(&format!("m{{l=\"{escaped}\"}} {x}"));
            proptest::prop_assert_eq!(&s.labels["l"], &v);
            proptest::prop_assert_eq!(s.value, x);
        }
    }
}
