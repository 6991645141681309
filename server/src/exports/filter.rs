//! OData `$filter` → SQL: a small parser for the subset Power BI folds (comparisons `eq ne gt ge lt le`, `and`,
//! `or`, `not`, `in`, parentheses, `contains`/`startswith`/`endswith`, `tolower`/`toupper`/`trim`/`length`,
//! `year`/`month`/`day`/`hour`/`minute`/`second`) on strings, numbers, dates, GUIDs and booleans. Every value is a
//! bound parameter; property names map to the source's SQL through its column table, so nothing from the URL
//! reaches the SQL text. What is not supported (arithmetic, lambdas, navigation, other functions) is refused by
//! name, never ignored.
//!
//! OData's null semantics: `X eq null` is `X IS NULL`; `X ne 'a'` is true for a null X; other comparisons with a
//! null are false — so every comparison compiles to a two-valued SQL expression and `not` is exact.

use time::{
    Date, OffsetDateTime, PrimitiveDateTime, format_description::well_known::Iso8601, macros::format_description,
};
use uuid::Uuid;

use super::{
    cells::{Column, Kind},
    sources::{Arg, Args, Source, month_floor, next_month},
};

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

// ---------------------------------------------------------------- tokens

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    Comma,
    Str(String),
    Word(String),
}

fn tokenize(s: &str) -> Result<Vec<Token>, FilterError> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => {
                out.push(Token::Open);
                i += 1;
            }
            ')' => {
                out.push(Token::Close);
                i += 1;
            }
            ',' => {
                out.push(Token::Comma);
                i += 1;
            }
            '\'' => {
                let mut value = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(bad("a string literal is not closed")),
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            value.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(ch) => {
                            value.push(*ch);
                            i += 1;
                        }
                    }
                }
                out.push(Token::Str(value));
            }
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !matches!(chars[i], '(' | ')' | ',' | '\'') {
                    i += 1;
                }
                out.push(Token::Word(chars[start..i].iter().collect()));
            }
        }
    }
    // A `+` of a time-zone offset sent unencoded arrives as a space: `2026-09-01T00:00:00 02:00`.
    let mut merged: Vec<Token> = Vec::with_capacity(out.len());
    for t in out {
        if let (Some(Token::Word(prev)), Token::Word(w)) = (merged.last_mut(), &t)
            && prev.contains('T')
            && prev.as_bytes().first().is_some_and(u8::is_ascii_digit)
            && !prev.ends_with('Z')
            && w.len() == 5
            && w.as_bytes()[2] == b':'
        {
            prev.push('+');
            prev.push_str(w);
            continue;
        }
        merged.push(t);
    }
    Ok(merged)
}

// ---------------------------------------------------------------- syntax

/// A literal value.
#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Str(String),
    Num(String),
    DateTime(OffsetDateTime),
    Date(Date),
    Guid(Uuid),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValFn {
    ToLower,
    ToUpper,
    Trim,
    Length,
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
}

#[derive(Debug, Clone)]
enum Operand {
    Prop(&'static Column),
    Lit(Lit),
    Fn(ValFn, Box<Operand>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Op {
    fn parse(w: &str) -> Option<Self> {
        Some(match w {
            "eq" => Self::Eq,
            "ne" => Self::Ne,
            "gt" => Self::Gt,
            "ge" => Self::Ge,
            "lt" => Self::Lt,
            "le" => Self::Le,
            _ => return None,
        })
    }

    fn sql(self) -> &'static str {
        match self {
            Self::Eq => "=",
            Self::Ne => "<>",
            Self::Gt => ">",
            Self::Ge => ">=",
            Self::Lt => "<",
            Self::Le => "<=",
        }
    }

    /// `a op b` ⇔ `b mirror(op) a`.
    fn mirror(self) -> Self {
        match self {
            Self::Gt => Self::Lt,
            Self::Ge => Self::Le,
            Self::Lt => Self::Gt,
            Self::Le => Self::Ge,
            other => other,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextFn {
    Contains,
    StartsWith,
    EndsWith,
}

/// `and`/`or` chains are flat lists (not a tree as deep as the chain is long), so the only recursion left is the
/// nesting the parser bounds ([`MAX_DEPTH`]).
#[derive(Debug, Clone)]
enum Expr {
    Or(Vec<Expr>),
    And(Vec<Expr>),
    Not(Box<Expr>),
    Cmp(Op, Operand, Operand),
    Call(TextFn, Operand, Operand),
    Value(Operand),
}

struct Parser<'a> {
    tokens: Vec<Token>,
    pos: usize,
    source: &'a Source,
    /// Open parentheses, `not`s and function calls around the current position.
    depth: usize,
    /// Conditions seen so far (comparisons, `in` alternatives, text functions).
    terms: usize,
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

const ARITHMETIC: [&str; 6] = ["add", "sub", "mul", "div", "divby", "mod"];

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_word(&self) -> Option<&str> {
        match self.peek() {
            Some(Token::Word(w)) => Some(w.as_str()),
            _ => None,
        }
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn expect(&mut self, t: &Token, what: &str) -> Result<(), FilterError> {
        match self.next() {
            Some(ref got) if got == t => Ok(()),
            Some(got) => Err(bad(format!("expected {what}, found {}", describe(&got)))),
            None => Err(bad(format!("expected {what} at the end"))),
        }
    }

    /// Enters one level of nesting; refused past [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<(), FilterError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(bad(format!("$filter nests deeper than {MAX_DEPTH} levels (parentheses, not, functions)")));
        }
        Ok(())
    }

    /// Counts one condition; refused past [`MAX_TERMS`].
    fn term(&mut self) -> Result<(), FilterError> {
        self.terms += 1;
        if self.terms > MAX_TERMS {
            return Err(bad(format!("$filter has more than {MAX_TERMS} conditions")));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut parts = vec![self.and()?];
        while self.peek_word() == Some("or") {
            self.pos += 1;
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 { parts.remove(0) } else { Expr::Or(parts) })
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut parts = vec![self.not()?];
        while self.peek_word() == Some("and") {
            self.pos += 1;
            parts.push(self.not()?);
        }
        Ok(if parts.len() == 1 { parts.remove(0) } else { Expr::And(parts) })
    }

    fn not(&mut self) -> Result<Expr, FilterError> {
        if self.peek_word() == Some("not") {
            self.pos += 1;
            self.enter()?;
            let inner = self.not()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, FilterError> {
        let left = self.primary()?;
        let Some(w) = self.peek_word().map(str::to_string) else {
            self.term()?;
            return Ok(left);
        };
        if let Some(op) = Op::parse(&w) {
            self.pos += 1;
            self.term()?;
            let a = operand_of(left)?;
            let b = operand_of(self.primary()?)?;
            return Ok(Expr::Cmp(op, a, b));
        }
        if w == "in" {
            self.pos += 1;
            let a = operand_of(left)?;
            self.expect(&Token::Open, "`(` after `in`")?;
            let mut alternatives: Vec<Expr> = Vec::new();
            loop {
                if alternatives.len() == MAX_IN_LIST {
                    return Err(bad(format!("the list after `in` has more than {MAX_IN_LIST} values")));
                }
                self.term()?;
                let b = operand_of(self.primary()?)?;
                alternatives.push(Expr::Cmp(Op::Eq, a.clone(), b));
                match self.next() {
                    Some(Token::Comma) => {}
                    Some(Token::Close) => break,
                    _ => return Err(bad("expected `,` or `)` in the list after `in`")),
                }
            }
            return match alternatives.len() {
                0 => Err(bad("empty list after `in`")),
                1 => Ok(alternatives.remove(0)),
                _ => Ok(Expr::Or(alternatives)),
            };
        }
        if ARITHMETIC.contains(&w.as_str()) || w == "has" {
            return Err(unsupported(format!("the `{w}` operator is not supported in $filter")));
        }
        self.term()?;
        Ok(left)
    }

    fn primary(&mut self) -> Result<Expr, FilterError> {
        match self.next() {
            None => Err(bad("the expression ends too early")),
            Some(Token::Open) => {
                self.enter()?;
                let e = self.or()?;
                self.expect(&Token::Close, "`)`")?;
                self.depth -= 1;
                Ok(e)
            }
            Some(Token::Str(s)) => Ok(Expr::Value(Operand::Lit(Lit::Str(s)))),
            Some(t @ (Token::Close | Token::Comma)) => Err(bad(format!("unexpected {}", describe(&t)))),
            Some(Token::Word(w)) => {
                if self.peek() == Some(&Token::Open) {
                    return self.call(&w);
                }
                if let Some(lit) = literal(&w)? {
                    return Ok(Expr::Value(Operand::Lit(lit)));
                }
                Ok(Expr::Value(self.property(&w)?))
            }
        }
    }

    fn property(&self, w: &str) -> Result<Operand, FilterError> {
        if w.contains('/') || w.starts_with('$') {
            return Err(unsupported(format!(
                "`{w}`: navigation, lambda operators and `$it`/`$root` are not supported in $filter"
            )));
        }
        if Op::parse(w).is_some() || matches!(w, "and" | "or" | "not" | "in") || ARITHMETIC.contains(&w) {
            return Err(bad(format!("`{w}` is an operator, expected a property or a value")));
        }
        self.source
            .column(w)
            .map(Operand::Prop)
            .ok_or_else(|| bad(format!("`{w}` is not a property of {}", self.source.entity)))
    }

    fn call(&mut self, name: &str) -> Result<Expr, FilterError> {
        let text_fn = match name {
            "contains" => Some(TextFn::Contains),
            "startswith" => Some(TextFn::StartsWith),
            "endswith" => Some(TextFn::EndsWith),
            _ => None,
        };
        let val_fn = match name {
            "tolower" => Some(ValFn::ToLower),
            "toupper" => Some(ValFn::ToUpper),
            "trim" => Some(ValFn::Trim),
            "length" => Some(ValFn::Length),
            "year" => Some(ValFn::Year),
            "month" => Some(ValFn::Month),
            "day" => Some(ValFn::Day),
            "hour" => Some(ValFn::Hour),
            "minute" => Some(ValFn::Minute),
            "second" => Some(ValFn::Second),
            _ => None,
        };
        if text_fn.is_none() && val_fn.is_none() {
            return Err(unsupported(format!("the function `{name}` is not supported in $filter")));
        }
        self.expect(&Token::Open, "`(`")?;
        self.enter()?;
        let first = operand_of(self.or()?)?;
        if let Some(f) = text_fn {
            self.term()?;
            self.expect(&Token::Comma, &format!("`,` in {name}()"))?;
            let second = operand_of(self.or()?)?;
            self.expect(&Token::Close, "`)`")?;
            self.depth -= 1;
            return Ok(Expr::Call(f, first, second));
        }
        self.expect(&Token::Close, "`)`")?;
        self.depth -= 1;
        Ok(Expr::Value(Operand::Fn(val_fn.unwrap_or(ValFn::Trim), Box::new(first))))
    }
}

fn describe(t: &Token) -> String {
    match t {
        Token::Open => "`(`".into(),
        Token::Close => "`)`".into(),
        Token::Comma => "`,`".into(),
        Token::Str(s) => format!("'{s}'"),
        Token::Word(w) => format!("`{w}`"),
    }
}

fn operand_of(e: Expr) -> Result<Operand, FilterError> {
    match e {
        Expr::Value(o) => Ok(o),
        _ => Err(bad("a condition stands where a value or a property is expected")),
    }
}

/// A literal word: `null`, `true`, `false`, a number, a date-time, a date or a GUID. `None`: not a literal.
fn literal(w: &str) -> Result<Option<Lit>, FilterError> {
    match w {
        "null" => return Ok(Some(Lit::Null)),
        "true" => return Ok(Some(Lit::Bool(true))),
        "false" => return Ok(Some(Lit::Bool(false))),
        _ => {}
    }
    let b = w.as_bytes();
    if w.len() == 36
        && b[8] == b'-'
        && b[13] == b'-'
        && let Ok(u) = Uuid::try_parse(w)
    {
        return Ok(Some(Lit::Guid(u)));
    }
    let first = b.first().copied().unwrap_or(b' ');
    if !(first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.') {
        return Ok(None);
    }
    if is_number(w) {
        return Ok(Some(Lit::Num(w.trim_start_matches('+').to_string())));
    }
    if w.len() == 10
        && let Ok(d) = Date::parse(w, format_description!("[year]-[month]-[day]"))
    {
        return Ok(Some(Lit::Date(d)));
    }
    if w.contains('T') {
        if let Ok(t) = OffsetDateTime::parse(w, &Iso8601::DEFAULT) {
            return Ok(Some(Lit::DateTime(t)));
        }
        if let Ok(t) = PrimitiveDateTime::parse(w, &Iso8601::DEFAULT) {
            return Ok(Some(Lit::DateTime(t.assume_utc())));
        }
    }
    Err(bad(format!("`{w}` is not a valid number, date, date-time or GUID")))
}

fn is_number(w: &str) -> bool {
    let s = w.strip_prefix(['-', '+']).unwrap_or(w);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    digits(int)
        && frac.is_none_or(digits)
        && exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)) && e.len() <= 4)
}

// ---------------------------------------------------------------- SQL

/// Value types the comparison rules know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Text,
    Num,
    Time,
    Guid,
    Bool,
    Month,
}

fn ty_of(k: Kind) -> Ty {
    match k {
        Kind::Text => Ty::Text,
        Kind::Month => Ty::Month,
        Kind::Decimal | Kind::Int32 | Kind::Int64 => Ty::Num,
        Kind::DateTime => Ty::Time,
        Kind::Guid => Ty::Guid,
        Kind::Bool => Ty::Bool,
    }
}

fn ty_name(t: Ty) -> &'static str {
    match t {
        Ty::Text => "a string",
        Ty::Num => "a number",
        Ty::Time => "a date-time",
        Ty::Guid => "a GUID",
        Ty::Bool => "a boolean",
        Ty::Month => "a month ('YYYY-MM')",
    }
}

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

struct Compiler<'a> {
    scoped: bool,
    args: &'a mut Args,
}

impl Compiler<'_> {
    fn column_sql(&self, c: &Column) -> String {
        let expr = match c.scoped_sql {
            Some(s) if self.scoped => s,
            _ => c.sql,
        };
        format!("({expr})")
    }

    /// SQL of a non-literal operand, its type, and whether it can be null.
    fn operand(&mut self, o: &Operand) -> Result<(String, Ty, bool), FilterError> {
        match o {
            Operand::Prop(c) => Ok((self.column_sql(c), ty_of(c.kind), c.nullable)),
            Operand::Lit(_) => Err(bad("a value stands where a property is expected")),
            Operand::Fn(f, inner) => {
                let (sql, ty, nullable) = self.operand(inner)?;
                let text = |sql: String, ty: Ty| -> Result<String, FilterError> {
                    match ty {
                        Ty::Text => Ok(sql),
                        Ty::Month => Ok(format!("to_char({sql}, 'YYYY-MM')")),
                        other => Err(bad(format!("this function takes a string, not {}", ty_name(other)))),
                    }
                };
                let time = |sql: String, ty: Ty, part: &str| -> Result<String, FilterError> {
                    match ty {
                        Ty::Time => Ok(format!("extract({part} FROM {sql})")),
                        Ty::Month if matches!(part, "year" | "month") => Ok(format!("extract({part} FROM {sql})")),
                        other => Err(bad(format!("{part}() takes a date-time, not {}", ty_name(other)))),
                    }
                };
                Ok(match f {
                    ValFn::ToLower => (format!("lower({})", text(sql, ty)?), Ty::Text, nullable),
                    ValFn::ToUpper => (format!("upper({})", text(sql, ty)?), Ty::Text, nullable),
                    ValFn::Trim => (format!("btrim({})", text(sql, ty)?), Ty::Text, nullable),
                    ValFn::Length => (format!("char_length({})", text(sql, ty)?), Ty::Num, nullable),
                    ValFn::Year => (time(sql, ty, "year")?, Ty::Num, nullable),
                    ValFn::Month => (time(sql, ty, "month")?, Ty::Num, nullable),
                    ValFn::Day => (time(sql, ty, "day")?, Ty::Num, nullable),
                    ValFn::Hour => (time(sql, ty, "hour")?, Ty::Num, nullable),
                    ValFn::Minute => (time(sql, ty, "minute")?, Ty::Num, nullable),
                    ValFn::Second => (format!("floor({})", time(sql, ty, "second")?), Ty::Num, nullable),
                })
            }
        }
    }

    /// A literal as a parameter of type `ty`.
    fn value(&mut self, lit: &Lit, ty: Ty) -> Result<String, FilterError> {
        let mismatch = || bad(format!("{} cannot be compared with {lit:?}", ty_name(ty)));
        let arg = match (ty, lit) {
            (Ty::Text, Lit::Str(s)) => Arg::Text(s.clone()),
            (Ty::Num, Lit::Num(n)) => Arg::Numeric(n.clone()),
            (Ty::Time, Lit::DateTime(t)) => Arg::Time(*t),
            (Ty::Time, Lit::Date(d)) => Arg::Time(d.midnight().assume_utc()),
            (Ty::Guid, Lit::Guid(u)) => Arg::Uuid(*u),
            (Ty::Guid, Lit::Str(s)) => Arg::Uuid(Uuid::try_parse(s).map_err(|_| bad(format!("'{s}' is not a GUID")))?),
            (Ty::Bool, Lit::Bool(b)) => Arg::Bool(*b),
            (Ty::Month, Lit::Str(s)) => Arg::Date(parse_month(s)?),
            (Ty::Month, Lit::Date(d)) if d.day() == 1 => Arg::Date(*d),
            _ => return Err(mismatch()),
        };
        Ok(self.args.push(arg))
    }

    fn join(&mut self, parts: &[Expr], with: &str) -> Result<String, FilterError> {
        let sql = parts.iter().map(|p| self.expr(p)).collect::<Result<Vec<_>, _>>()?;
        Ok(format!("({})", sql.join(with)))
    }

    fn expr(&mut self, e: &Expr) -> Result<String, FilterError> {
        Ok(match e {
            Expr::Or(parts) => self.join(parts, " OR ")?,
            Expr::And(parts) => self.join(parts, " AND ")?,
            Expr::Not(a) => format!("(NOT {})", self.expr(a)?),
            Expr::Value(Operand::Lit(Lit::Bool(b))) => if *b { "TRUE" } else { "FALSE" }.to_string(),
            Expr::Value(o) => {
                let (sql, ty, _) = self.operand(o)?;
                if ty != Ty::Bool {
                    return Err(bad("a condition is expected, not a value"));
                }
                format!("COALESCE({sql}, false)")
            }
            Expr::Call(f, a, b) => {
                let (sql, ty, _) = self.operand(a)?;
                let sql = match ty {
                    Ty::Text => sql,
                    Ty::Month => format!("to_char({sql}, 'YYYY-MM')"),
                    other => return Err(bad(format!("{f:?} takes a string, not {}", ty_name(other)))),
                };
                let p = match b {
                    Operand::Lit(l @ Lit::Str(_)) => self.value(l, Ty::Text)?,
                    _ => return Err(bad(format!("the second argument of {f:?} must be a string"))),
                };
                match f {
                    TextFn::Contains => format!("COALESCE(strpos({sql}, {p}) > 0, false)"),
                    TextFn::StartsWith => format!("COALESCE(starts_with({sql}, {p}), false)"),
                    TextFn::EndsWith => format!("COALESCE(right({sql}, char_length({p})) = {p}, false)"),
                }
            }
            Expr::Cmp(op, a, b) => {
                let (op, a, b) = match (a, b) {
                    (Operand::Lit(_), Operand::Lit(_)) => return Err(bad("compare a property with a value")),
                    (Operand::Lit(_), _) => (op.mirror(), b, a),
                    _ => (*op, a, b),
                };
                let (left, ty, nullable) = self.operand(a)?;
                match b {
                    Operand::Lit(Lit::Null) => match op {
                        Op::Eq => format!("({left} IS NULL)"),
                        Op::Ne => format!("({left} IS NOT NULL)"),
                        _ => "FALSE".to_string(),
                    },
                    Operand::Lit(lit) => {
                        let right = self.value(lit, ty)?;
                        match op {
                            Op::Ne => format!("({left} IS DISTINCT FROM {right})"),
                            _ if nullable => format!("COALESCE({left} {} {right}, false)", op.sql()),
                            _ => format!("({left} {} {right})", op.sql()),
                        }
                    }
                    other => {
                        let (right, ty2, nullable2) = self.operand(other)?;
                        if ty != ty2 {
                            return Err(bad(format!("{} cannot be compared with {}", ty_name(ty), ty_name(ty2))));
                        }
                        match op {
                            Op::Eq => format!("({left} IS NOT DISTINCT FROM {right})"),
                            Op::Ne => format!("({left} IS DISTINCT FROM {right})"),
                            _ if nullable || nullable2 => format!("COALESCE({left} {} {right}, false)", op.sql()),
                            _ => format!("({left} {} {right})", op.sql()),
                        }
                    }
                }
            }
        })
    }
}

fn parse_month(s: &str) -> Result<Date, FilterError> {
    gpuledger_core::Period::parse(s)
        .ok()
        .and_then(|p| Date::from_calendar_date(p.year(), p.month(), 1).ok())
        .ok_or_else(|| bad(format!("'{s}' is not a month (YYYY-MM)")))
}

/// Narrows `[from, before)` (month starts) by the top-level conjuncts on `Period` / `PeriodStart`.
fn month_bounds(e: &Expr, from: &mut Option<OffsetDateTime>, before: &mut Option<OffsetDateTime>) {
    match e {
        Expr::And(parts) => {
            for p in parts {
                month_bounds(p, from, before);
            }
        }
        Expr::Cmp(op, a, b) => {
            let (op, prop, lit) = match (a, b) {
                (Operand::Prop(c), Operand::Lit(l)) => (*op, c, l),
                (Operand::Lit(l), Operand::Prop(c)) => (op.mirror(), c, l),
                _ => return,
            };
            // (lowest month start allowed, first month start excluded)
            let (lo, hi) = match (prop.name, prop.kind, lit) {
                ("Period", Kind::Month, Lit::Str(s)) => {
                    let Ok(d) = parse_month(s) else { return };
                    let m = d.midnight().assume_utc();
                    match op {
                        Op::Eq => (Some(m), Some(next_month(m))),
                        Op::Ge => (Some(m), None),
                        Op::Gt => (Some(next_month(m)), None),
                        Op::Le => (None, Some(next_month(m))),
                        Op::Lt => (None, Some(m)),
                        Op::Ne => return,
                    }
                }
                ("PeriodStart", Kind::DateTime, Lit::DateTime(_) | Lit::Date(_)) => {
                    let t = match lit {
                        Lit::DateTime(t) => *t,
                        Lit::Date(d) => d.midnight().assume_utc(),
                        _ => return,
                    };
                    let floor = month_floor(t);
                    match op {
                        Op::Eq => (Some(floor), Some(next_month(floor))),
                        Op::Ge | Op::Gt => (Some(floor), None),
                        Op::Le => (None, Some(next_month(floor))),
                        Op::Lt => (None, Some(if floor == t { t } else { next_month(floor) })),
                        Op::Ne => return,
                    }
                }
                _ => return,
            };
            if let Some(lo) = lo {
                *from = Some(from.map_or(lo, |f| f.max(lo)));
            }
            if let Some(hi) = hi {
                *before = Some(before.map_or(hi, |b| b.min(hi)));
            }
        }
        _ => {}
    }
}

/// Whether `e` is exactly what [`month_bounds`] makes of it (see [`Compiled::months_only`]).
fn months_only(e: &Expr) -> bool {
    match e {
        Expr::And(parts) => parts.iter().all(months_only),
        Expr::Cmp(op, a, b) => {
            let (op, prop, lit) = match (a, b) {
                (Operand::Prop(c), Operand::Lit(l)) => (*op, c, l),
                (Operand::Lit(l), Operand::Prop(c)) => (op.mirror(), c, l),
                _ => return false,
            };
            match (prop.name, prop.kind, lit) {
                ("Period", Kind::Month, Lit::Str(s)) => parse_month(s).is_ok() && op != Op::Ne,
                ("PeriodStart", Kind::DateTime, Lit::DateTime(_) | Lit::Date(_)) => {
                    let t = match lit {
                        Lit::DateTime(t) => *t,
                        Lit::Date(d) => d.midnight().assume_utc(),
                        _ => return false,
                    };
                    month_floor(t) == t && matches!(op, Op::Eq | Op::Ge | Op::Lt | Op::Le)
                }
                _ => false,
            }
        }
        _ => false,
    }
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
    use crate::exports::sources::{ALLOCATIONS, LEDGER_LINES};
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
