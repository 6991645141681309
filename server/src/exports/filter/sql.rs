//! From the expression tree to SQL: type rules for comparisons, the condition text with bound parameters, and the
//! month range a filter implies (so the planner can skip months that cannot match).

use time::{Date, OffsetDateTime};
use uuid::Uuid;

use super::{
    FilterError, bad,
    parse::{Expr, Lit, Op, Operand, TextFn, ValFn},
};
use crate::exports::{
    cells::{Column, Kind},
    sources::{Arg, Args, month_floor, next_month},
};

/// Value types the comparison rules know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    Text,
    Num,
    Time,
    Guid,
    Bool,
    Month,
}

pub(super) fn ty_of(k: Kind) -> Ty {
    match k {
        Kind::Text => Ty::Text,
        Kind::Month => Ty::Month,
        Kind::Decimal | Kind::Int32 | Kind::Int64 => Ty::Num,
        Kind::DateTime => Ty::Time,
        Kind::Guid => Ty::Guid,
        Kind::Bool => Ty::Bool,
    }
}

pub(super) fn ty_name(t: Ty) -> &'static str {
    match t {
        Ty::Text => "a string",
        Ty::Num => "a number",
        Ty::Time => "a date-time",
        Ty::Guid => "a GUID",
        Ty::Bool => "a boolean",
        Ty::Month => "a month ('YYYY-MM')",
    }
}

pub(super) struct Compiler<'a> {
    pub(super) scoped: bool,
    pub(super) args: &'a mut Args,
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

    pub(super) fn expr(&mut self, e: &Expr) -> Result<String, FilterError> {
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

pub(super) fn parse_month(s: &str) -> Result<Date, FilterError> {
    gpuledger_core::Period::parse(s)
        .ok()
        .and_then(|p| Date::from_calendar_date(p.year(), p.month(), 1).ok())
        .ok_or_else(|| bad(format!("'{s}' is not a month (YYYY-MM)")))
}

/// Narrows `[from, before)` (month starts) by the top-level conjuncts on `Period` / `PeriodStart`.
pub(super) fn month_bounds(e: &Expr, from: &mut Option<OffsetDateTime>, before: &mut Option<OffsetDateTime>) {
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
pub(super) fn months_only(e: &Expr) -> bool {
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
