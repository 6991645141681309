//! OData `$filter` → SQL: a small parser for the subset Power BI folds (comparisons `eq ne gt ge lt le`, `and`,
//! `or`, `not`, `in`, parentheses, `contains`/`startswith`/`endswith`, `tolower`/`toupper`/`trim`/`length`,
//! `year`/`month`/`day`/`hour`/`minute`/`second`) on strings, numbers, dates, GUIDs and booleans. Every value is a
//! bound parameter; property names map to the source's SQL through its column table, so nothing from the URL
//! reaches the SQL text. What is not supported (arithmetic, lambdas, navigation, other functions) is refused by
//! name, never ignored.
//!
//! OData's null semantics: `X eq null` is `X IS NULL`; `X ne 'a'` is true for a null X; other comparisons with a
//! null are false — so every comparison compiles to a two-valued SQL expression and `not` is exact.
//!
//! This module holds the entry point, [`compile`], its limits and errors; `tokens` splits the text into tokens,
//! `parse` builds the expression tree (checking names and types against the source's columns), and `sql`
//! turns the tree into a SQL condition and the month range it implies.

mod parse;
mod sql;
mod tokens;

use time::OffsetDateTime;

use super::sources::{Args, Source};
use parse::{ARITHMETIC, Parser, describe};
use sql::{Compiler, month_bounds, months_only};
use tokens::{Token, tokenize};

/// Why a filter was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterError {
    /// Malformed or ill-typed (400).
    Bad(String),
    /// Valid OData this server does not implement (501).
    Unsupported(String),
}

fn bad(s: impl Into<String>) -> FilterError {
    FilterError::Bad(s.into())
}

fn unsupported(s: impl Into<String>) -> FilterError {
    FilterError::Unsupported(s.into())
}

/// Longest `$filter`, in characters. Power BI's incremental refresh sends about 100; a slicer folded into a long
/// `or` chain of 200 names stays under 10,000.
pub const MAX_FILTER_CHARS: usize = 16 * 1024;
/// Deepest nesting of parentheses, `not` and functions. Power BI nests a handful of levels.
pub const MAX_DEPTH: usize = 32;
/// Most conditions in one filter (each alternative of an `in` list counts).
pub const MAX_TERMS: usize = 500;
/// Most values in one `in` list.
pub const MAX_IN_LIST: usize = 500;

/// A compiled filter: the SQL condition (its parameters were added to the query's), and the month range the
/// filter implies (for the planner: rows outside it cannot match).
#[derive(Debug)]
pub struct Compiled {
    /// The condition.
    pub sql: String,
    /// Only months starting at or after this (a month start).
    pub month_from: Option<OffsetDateTime>,
    /// Only months starting before this (a month start).
    pub month_before: Option<OffsetDateTime>,
    /// The filter says nothing but `[month_from, month_before)`: comparisons of `Period` or of `PeriodStart` with a
    /// month start, joined by `and` (so the month range alone selects exactly the rows the condition selects).
    pub months_only: bool,
}

/// Parses and compiles `$filter` for `source`; parameters are appended to `args`.
pub fn compile(source: &'static Source, scoped: bool, filter: &str, args: &mut Args) -> Result<Compiled, FilterError> {
    if filter.chars().count() > MAX_FILTER_CHARS {
        return Err(bad(format!("$filter is longer than {MAX_FILTER_CHARS} characters")));
    }
    let tokens = tokenize(filter)?;
    if tokens.is_empty() {
        return Err(bad("$filter is empty"));
    }
    let mut parser = Parser { tokens, pos: 0, source, depth: 0, terms: 0 };
    let expr = parser.or()?;
    if let Some(t) = parser.peek() {
        return Err(match t {
            Token::Word(w) if ARITHMETIC.contains(&w.as_str()) => {
                unsupported(format!("the `{w}` operator is not supported in $filter"))
            }
            t => bad(format!("unexpected {} after the expression", describe(t))),
        });
    }
    let sql = Compiler { scoped, args }.expr(&expr)?;
    let (mut month_from, mut month_before) = (None, None);
    month_bounds(&expr, &mut month_from, &mut month_before);
    Ok(Compiled { sql, month_from, month_before, months_only: months_only(&expr) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::exports::sources::{ALLOCATIONS, Arg, LEDGER_LINES};
    use time::macros::datetime;

    fn sql(f: &str) -> (String, Vec<Arg>) {
        let mut args = Args::default();
        let c = compile(&LEDGER_LINES, false, f, &mut args).unwrap_or_else(|e| panic!("{f}: {e:?}"));
        (c.sql, args.0)
    }

    #[test]
    fn comparisons_and_logic() {
        let (s, a) = sql("Period eq '2026-09' and (Amount gt -1.5 or not (Tenant ne 'it''s'))");
        assert_eq!(
            s,
            "(((l.period) = $1::date) AND (((l.amount) > $2::numeric) OR (NOT ((l.tenant) IS DISTINCT FROM $3::text))))"
        );
        assert_eq!(
            a,
            vec![Arg::Date(time::macros::date!(2026 - 09 - 01)), Arg::Numeric("-1.5".into()), Arg::Text("it's".into())]
        );
        // A nullable column: comparisons are two-valued, `eq null` is IS NULL.
        let (s, _) = sql("TenantId eq null or Corrects ge 'a' or 5 lt PolicyVersion");
        assert_eq!(
            s,
            "(((l.tenant_id) IS NULL) OR COALESCE((l.corrects) >= $1::text, false) OR ((l.policy_version) > $2::numeric))"
        );
        let (s, a) = sql("PeriodStart ge 2026-09-01T00:00:00Z and PeriodStart lt 2026-10-01T02:00:00+02:00");
        assert!(s.contains(">= $1::timestamptz") && s.contains("< $2::timestamptz"), "{s}");
        assert_eq!(a[1], Arg::Time(datetime!(2026-10-01 00:00 UTC)));
        // `+` of an offset decoded as a space
        let (_, a) = sql("PeriodStart lt 2026-10-01T02:00:00 02:00");
        assert_eq!(a[0], Arg::Time(datetime!(2026-10-01 00:00 UTC)));
        let (s, _) = sql("contains(Tenant,'a') and startswith(tolower(Term), 'b') and endswith(LineId, 'c')");
        assert!(s.contains("strpos((l.tenant), $1::text) > 0"), "{s}");
        assert!(s.contains("starts_with(lower((l.term)), $2::text)"), "{s}");
        assert!(s.contains("right((l.line_id), char_length($3::text)) = $3::text"), "{s}");
        let (s, _) = sql("Term in ('energy', 'service') and year(PeriodStart) eq 2026");
        assert!(s.contains(" OR ") && s.contains("extract(year FROM"), "{s}");
        let (_, a) = sql("DepartmentId eq 0f8fad5b-d9cb-469f-a165-70867728950e");
        assert!(matches!(a[0], Arg::Uuid(_)));
    }

    #[test]
    fn month_bounds_from_period_filters() {
        let mut args = Args::default();
        let c = compile(
            &ALLOCATIONS,
            false,
            "PeriodStart ge 2026-09-01T00:00:00Z and PeriodStart lt 2026-11-01T00:00:00Z",
            &mut args,
        )
        .unwrap();
        assert_eq!(c.month_from, Some(datetime!(2026-09-01 00:00 UTC)));
        assert_eq!(c.month_before, Some(datetime!(2026-11-01 00:00 UTC)));
        let c = compile(&ALLOCATIONS, false, "Period eq '2026-09'", &mut args).unwrap();
        assert_eq!(
            (c.month_from, c.month_before),
            (Some(datetime!(2026-09-01 00:00 UTC)), Some(datetime!(2026-10-01 00:00 UTC)))
        );
        let c = compile(&ALLOCATIONS, false, "Period eq '2026-09' or Period eq '2026-10'", &mut args).unwrap();
        assert_eq!((c.month_from, c.month_before), (None, None), "OR does not narrow");
        let c = compile(&ALLOCATIONS, false, "PeriodStart lt 2026-10-15T00:00:00Z", &mut args).unwrap();
        assert_eq!(c.month_before, Some(datetime!(2026-11-01 00:00 UTC)), "a mid-month bound keeps that month");
        assert!(!c.months_only, "a mid-month bound is not exactly a month range");
        for (f, only) in [
            ("Period eq '2026-09'", true),
            ("Period ge '2026-09' and Period le '2026-10'", true),
            ("PeriodStart ge 2026-09-01T00:00:00Z and PeriodStart lt 2026-11-01T00:00:00Z", true),
            ("2026-09-01T00:00:00Z le PeriodStart", true),
            ("PeriodStart gt 2026-09-01T00:00:00Z", false),
            ("Period ne '2026-09'", false),
            ("Period eq '2026-09' or Period eq '2026-10'", false),
            ("Period eq '2026-09' and Tenant eq 'a'", false),
        ] {
            assert_eq!(compile(&ALLOCATIONS, false, f, &mut args).unwrap().months_only, only, "{f}");
        }
    }

    #[test]
    fn refusals_are_named() {
        let mut args = Args::default();
        let err = |f: &str| compile(&LEDGER_LINES, false, f, &mut Args::default()).unwrap_err();
        assert!(matches!(err("Amount add 1 gt 2"), FilterError::Unsupported(m) if m.contains("add")));
        assert!(matches!(err("Lines/any(l: l eq 1)"), FilterError::Unsupported(_)));
        assert!(matches!(err("substringof('a', Tenant)"), FilterError::Unsupported(m) if m.contains("substringof")));
        assert!(matches!(err("Nope eq 1"), FilterError::Bad(m) if m.contains("Nope")));
        assert!(matches!(err("Amount eq 'x'"), FilterError::Bad(_)));
        assert!(matches!(err("Period eq '2026-13'"), FilterError::Bad(_)));
        assert!(matches!(err("Tenant eq 'a"), FilterError::Bad(_)));
        assert!(matches!(err("Tenant eq 'a' and"), FilterError::Bad(_)));
        assert!(matches!(err("Tenant"), FilterError::Bad(_)));
        assert!(matches!(err("1 eq 1"), FilterError::Bad(_)));
        assert!(matches!(err("Tenant eq 'a' Term"), FilterError::Bad(_)));
        assert!(compile(&LEDGER_LINES, false, "", &mut args).is_err());
    }

    #[test]
    fn limits_are_named_and_nothing_overflows() {
        let err = |f: &str| compile(&LEDGER_LINES, false, f, &mut Args::default()).unwrap_err();
        for n in [MAX_DEPTH + 1, 300, 3000, 100_000 / 2] {
            let f = format!("{}PolicyVersion gt 1{}", "(".repeat(n), ")".repeat(n));
            let e = err(&f);
            assert!(
                matches!(&e, FilterError::Bad(m) if m.contains("deeper than 32") || m.contains("longer than")),
                "depth {n}: {e:?}"
            );
        }
        let ok = format!("{}PolicyVersion gt 1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        compile(&LEDGER_LINES, false, &ok, &mut Args::default()).unwrap();
        let nots = format!("{}PolicyVersion gt 1", "not ".repeat(MAX_DEPTH + 1));
        assert!(matches!(err(&nots), FilterError::Bad(m) if m.contains("deeper")));
        let list = |n: usize| (0..n).map(|i| format!("'x{i}'")).collect::<Vec<_>>().join(",");
        assert!(
            matches!(err(&format!("LineId in ({})", list(1500))), FilterError::Bad(m) if m.contains("more than 500 values"))
        );
        compile(&LEDGER_LINES, false, &format!("LineId in ({})", list(MAX_IN_LIST)), &mut Args::default()).unwrap();
        let chain = (0..=MAX_TERMS).map(|i| format!("Tenant eq 't{i}'")).collect::<Vec<_>>().join(" or ");
        assert!(matches!(err(&chain), FilterError::Bad(m) if m.contains("more than 500 conditions")));
        let long = format!("Tenant eq '{}'", "a".repeat(MAX_FILTER_CHARS));
        assert!(matches!(err(&long), FilterError::Bad(m) if m.contains("longer than 16384")));
        // A long flat chain within the limits compiles to one flat SQL list, not a nested one.
        let chain = (0..MAX_TERMS).map(|i| format!("Tenant eq 't{i}'")).collect::<Vec<_>>().join(" or ");
        let (s, args) = sql(&chain);
        assert_eq!(args.len(), MAX_TERMS);
        assert!(s.starts_with("((l.tenant)") || s.starts_with("(("), "{}", &s[..40]);
        assert_eq!(s.matches('(').count(), s.matches(')').count());
    }

    mod fuzz {
        #![allow(clippy::unwrap_used)]
        use super::super::*;
        use crate::exports::sources::LEDGER_LINES;
        use proptest::prelude::*;

        fn token() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("(".to_string()),
                Just(")".to_string()),
                Just(",".to_string()),
                Just(" ".to_string()),
                Just("'".to_string()),
                Just("''".to_string()),
                prop::sample::select(vec![
                    "and",
                    "or",
                    "not",
                    "in",
                    "eq",
                    "ne",
                    "gt",
                    "ge",
                    "lt",
                    "le",
                    "add",
                    "has",
                    "null",
                    "true",
                    "BilledCost",
                    "PolicyVersion",
                    "Tenant",
                    "Period",
                    "PeriodStart",
                    "LineId",
                    "contains",
                    "tolower",
                    "year",
                    "length",
                    "1",
                    "-2.5e3",
                    "2026-09-01",
                    "2026-09-01T00:00:00Z",
                    "'2026-09'",
                    "'x'",
                    "$it",
                    "a/b",
                    "0f8fad5b-d9cb-469f-a165-70867728950e",
                    "\u{0}",
                    "é",
                ])
                .prop_map(str::to_string),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]
            /// Any sequence of OData-ish tokens: compiles or is refused, never panics; what compiles has balanced
            /// parentheses and one bound parameter per placeholder.
            #[test]
            fn any_token_soup_is_answered(tokens in proptest::collection::vec(token(), 0..60)) {
                let f = tokens.join(" ");
                let mut args = Args::default();
                if let Ok(c) = compile(&LEDGER_LINES, false, &f, &mut args) {
                    prop_assert_eq!(c.sql.matches('(').count(), c.sql.matches(')').count());
                    for i in 1..=args.0.len() {
                        let placeholder = format!("${i}");
                        prop_assert!(c.sql.contains(&placeholder));
                    }
                }
            }

            /// Arbitrary text (any characters) up to twice the length limit: answered, never a panic.
            #[test]
            fn any_text_is_answered(f in ".{0,400}") {
                let _ = compile(&LEDGER_LINES, false, &f, &mut Args::default());
            }

            /// Nesting of any depth, with any mix of parentheses, `not` and functions: refused past the limit,
            /// never a stack overflow.
            #[test]
            fn any_nesting_is_bounded(depth in 0usize..5000, kind in 0u8..3) {
                let (open, close) = match kind {
                    0 => ("(", ")"),
                    1 => ("not (", ")"),
                    _ => ("tolower(", ")"),
                };
                let inner = if kind == 2 { "Tenant" } else { "PolicyVersion gt 1" };
                let mut f = open.repeat(depth) + inner + &close.repeat(depth);
                if kind == 2 { f.push_str(" eq 'a'"); }
                let r = compile(&LEDGER_LINES, false, &f, &mut Args::default());
                if depth > MAX_DEPTH { prop_assert!(r.is_err()); }
            }
        }
    }
}
