//! The `$filter` syntax: literals, operands, operators and the recursive-descent parser that builds an expression
//! tree, checking property names against the source's columns and refusing unsupported OData by name.

use time::{
    Date, OffsetDateTime, PrimitiveDateTime, format_description::well_known::Iso8601, macros::format_description,
};
use uuid::Uuid;

use super::tokens::Token;
use super::{FilterError, MAX_DEPTH, MAX_IN_LIST, MAX_TERMS, bad, unsupported};
use crate::exports::{cells::Column, sources::Source};

/// A literal value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Lit {
    Str(String),
    Num(String),
    DateTime(OffsetDateTime),
    Date(Date),
    Guid(Uuid),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValFn {
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
pub(super) enum Operand {
    Prop(&'static Column),
    Lit(Lit),
    Fn(ValFn, Box<Operand>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
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

    pub(super) fn sql(self) -> &'static str {
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
    pub(super) fn mirror(self) -> Self {
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
pub(super) enum TextFn {
    Contains,
    StartsWith,
    EndsWith,
}

/// `and`/`or` chains are flat lists (not a tree as deep as the chain is long), so the only recursion left is the
/// nesting the parser bounds ([`MAX_DEPTH`]).
#[derive(Debug, Clone)]
pub(super) enum Expr {
    Or(Vec<Expr>),
    And(Vec<Expr>),
    Not(Box<Expr>),
    Cmp(Op, Operand, Operand),
    Call(TextFn, Operand, Operand),
    Value(Operand),
}

pub(super) struct Parser<'a> {
    pub(super) tokens: Vec<Token>,
    pub(super) pos: usize,
    pub(super) source: &'a Source,
    /// Open parentheses, `not`s and function calls around the current position.
    pub(super) depth: usize,
    /// Conditions seen so far (comparisons, `in` alternatives, text functions).
    pub(super) terms: usize,
}

pub(super) const ARITHMETIC: [&str; 6] = ["add", "sub", "mul", "div", "divby", "mod"];

impl Parser<'_> {
    pub(super) fn peek(&self) -> Option<&Token> {
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

    pub(super) fn or(&mut self) -> Result<Expr, FilterError> {
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

pub(super) fn describe(t: &Token) -> String {
    match t {
        Token::Open => "`(`".into(),
        Token::Close => "`)`".into(),
        Token::Comma => "`,`".into(),
        Token::Str(s) => format!("'{s}'"),
        Token::Word(w) => format!("`{w}`"),
    }
}

pub(super) fn operand_of(e: Expr) -> Result<Operand, FilterError> {
    match e {
        Expr::Value(o) => Ok(o),
        _ => Err(bad("a condition stands where a value or a property is expected")),
    }
}

/// A literal word: `null`, `true`, `false`, a number, a date-time, a date or a GUID. `None`: not a literal.
pub(super) fn literal(w: &str) -> Result<Option<Lit>, FilterError> {
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

pub(super) fn is_number(w: &str) -> bool {
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
