//! Set-based inserts that run on PostgreSQL and on a Citus coordinator alike.
//!
//! On PostgreSQL a batch is one `INSERT … SELECT … FROM unnest($a::t[], …)`: one statement, a handful of parameters,
//! whatever the batch's size. Citus cannot push such a statement to a shard (its source is a function, not a
//! distributed table): it runs the `SELECT` on the coordinator and sends the rows to the shards with `COPY`, which
//! PostgreSQL refuses on a table with row-level security for a role that does not bypass it (`COPY FROM not
//! supported with row-level security`) — and the application role never bypasses it. So on a distributed database
//! the same rows go as multi-row `INSERT … VALUES (…), (…)`, which Citus routes to the organization's shard (every
//! row carries the same organization), chunked under PostgreSQL's 65,535-parameter limit.
//!
//! Two more rules every insert keeps for Citus: `ON CONFLICT … DO UPDATE SET` takes `EXCLUDED` values, never
//! `now()` (Citus refuses functions that are not immutable there: a column's `DEFAULT now()` shows up in `EXCLUDED`),
//! and no subquery inside the row (`subqueries are not supported within INSERT queries`).

use sqlx::{
    Arguments, Encode, Postgres, Type,
    postgres::{PgArguments, PgHasArrayType, PgRow},
};

use crate::db::{DbError, OrgTx};

/// Most parameters one statement binds (PostgreSQL's limit is 65,535).
const MAX_PARAMS: usize = 60_000;

/// Values of one column (or one constant: a slice of one).
pub trait Values: Sync + Send {
    /// How many.
    fn count(&self) -> usize;
    /// Binds them all as one array.
    fn add_all(&self, args: &mut PgArguments) -> Result<(), DbError>;
    /// Binds value `i`.
    fn add_at(&self, i: usize, args: &mut PgArguments) -> Result<(), DbError>;
}

struct Slice<'a, T>(&'a [T]);

impl<'a, T> Values for Slice<'a, T>
where
    T: Encode<'a, Postgres> + Type<Postgres> + PgHasArrayType + Sync,
{
    fn count(&self) -> usize {
        self.0.len()
    }
    fn add_all(&self, args: &mut PgArguments) -> Result<(), DbError> {
        <PgArguments as Arguments<'a>>::add(args, self.0).map_err(|e| DbError::Data(e.to_string()))
    }
    fn add_at(&self, i: usize, args: &mut PgArguments) -> Result<(), DbError> {
        let v: &'a T =
            self.0.get(i).ok_or_else(|| DbError::Data("bulk insert: column shorter than the others".into()))?;
        <PgArguments as Arguments<'a>>::add(args, v).map_err(|e| DbError::Data(e.to_string()))
    }
}

/// Values bound one row at a time only (arrays per row, which `unnest` cannot take).
struct PerRow<'a, T>(&'a [T]);

impl<'a, T> Values for PerRow<'a, T>
where
    T: Encode<'a, Postgres> + Type<Postgres> + Sync,
{
    fn count(&self) -> usize {
        self.0.len()
    }
    fn add_all(&self, _args: &mut PgArguments) -> Result<(), DbError> {
        Err(DbError::Data("bulk insert: a per-row column bound as one array".into()))
    }
    fn add_at(&self, i: usize, args: &mut PgArguments) -> Result<(), DbError> {
        let v: &'a T =
            self.0.get(i).ok_or_else(|| DbError::Data("bulk insert: column shorter than the others".into()))?;
        <PgArguments as Arguments<'a>>::add(args, v).map_err(|e| DbError::Data(e.to_string()))
    }
}

/// A column (or constant) of a set-based insert: its SQL type and its values.
pub struct Col<'a> {
    ty: &'static str,
    values: Box<dyn Values + Send + 'a>,
    /// On a distributed database: the same column bound per row with another type, and the `unnest` form's
    /// expression around the column (`{}`).
    per_row: Option<(&'static str, Box<dyn Values + Send + 'a>, &'static str)>,
}

/// A `text[]` column: `unnest` cannot take an array of arrays, so the rows come as JSON arrays (`json`, made into
/// `text[]` in SQL) on PostgreSQL and as `arrays` bound per row on a distributed database (Citus refuses the
/// subquery that turns JSON into an array inside `VALUES`).
pub fn text_arrays<'a>(json: &'a [serde_json::Value], arrays: &'a [Vec<String>]) -> Col<'a> {
    Col {
        ty: "jsonb",
        values: Box::new(Slice(json)),
        per_row: Some(("text[]", Box::new(PerRow(arrays)), "ARRAY(SELECT jsonb_array_elements_text({}))")),
    }
}

/// Column `values` of SQL type `ty` (`text`, `uuid`, `bigint`, `timestamptz`, `jsonb`, …).
pub fn col<'a, T>(ty: &'static str, values: &'a [T]) -> Col<'a>
where
    T: Encode<'a, Postgres> + Type<Postgres> + PgHasArrayType + Sync,
{
    Col { ty, values: Box::new(Slice(values)), per_row: None }
}

/// A constant bound once (`$1`, `$2`, … in the row), of SQL type `ty`.
pub fn constant<'a, T>(ty: &'static str, value: &'a T) -> Col<'a>
where
    T: Encode<'a, Postgres> + Type<Postgres> + PgHasArrayType + Sync,
{
    Col { ty, values: Box::new(Slice(std::slice::from_ref(value))), per_row: None }
}

/// One set-based insert.
pub struct Insert<'a> {
    /// `INSERT INTO t (a, b, c)`.
    pub into: &'a str,
    /// The row's expressions, in the insert's column order: `$1`, `$2`, … for the constants, `{0}`, `{1}`, … for the
    /// columns (e.g. `$1, $2, {0}, {1}`).
    pub row: &'a str,
    /// The constants, bound once as `$1`, `$2`, ….
    pub consts: &'a [Col<'a>],
    /// The columns, all of one length: the rows.
    pub cols: &'a [Col<'a>],
    /// What follows the rows: `ON CONFLICT …`, `RETURNING …`.
    pub tail: &'a str,
}

impl Insert<'_> {
    /// Rows.
    pub fn rows(&self) -> usize {
        self.cols.first().map_or(0, |c| c.values.count())
    }

    /// The statements that insert the rows: one on PostgreSQL, one per chunk of rows on a distributed database.
    /// None when there are no rows.
    pub fn statements(&self, distributed: bool) -> Result<Vec<(String, PgArguments)>, DbError> {
        let n = self.rows();
        if self.cols.iter().any(|c| c.values.count() != n || c.per_row.as_ref().is_some_and(|p| p.1.count() != n)) {
            return Err(DbError::Data(format!("bulk insert into {}: columns of different lengths", self.into)));
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let k = self.consts.len();
        let consts = |args: &mut PgArguments| -> Result<(), DbError> {
            for c in self.consts {
                c.values.add_at(0, args)?;
            }
            Ok(())
        };
        if !distributed {
            let mut args = PgArguments::default();
            consts(&mut args)?;
            let mut row = self.row.to_string();
            let mut sources = Vec::with_capacity(self.cols.len());
            let mut names = Vec::with_capacity(self.cols.len());
            for (i, c) in self.cols.iter().enumerate() {
                c.values.add_all(&mut args)?;
                let expr = match &c.per_row {
                    Some((_, _, wrap)) => wrap.replace("{}", &format!("u.c{i}")),
                    None => format!("u.c{i}"),
                };
                row = row.replace(&format!("{{{i}}}"), &expr);
                sources.push(format!("${}::{}[]", k + i + 1, c.ty));
                names.push(format!("c{i}"));
            }
            let sql = format!(
                "{} SELECT {row} FROM unnest({}) AS u({}) {}",
                self.into,
                sources.join(", "),
                names.join(", "),
                self.tail
            );
            return Ok(vec![(sql, args)]);
        }
        let per_row = self.cols.len().max(1);
        let chunk = ((MAX_PARAMS - k) / per_row).max(1);
        let mut out = Vec::with_capacity(n.div_ceil(chunk));
        for start in (0..n).step_by(chunk) {
            let end = (start + chunk).min(n);
            let mut args = PgArguments::default();
            consts(&mut args)?;
            let mut sql = format!("{} VALUES ", self.into);
            let mut p = k;
            for r in start..end {
                let mut row = self.row.to_string();
                for (i, c) in self.cols.iter().enumerate() {
                    p += 1;
                    let ty = match &c.per_row {
                        Some((ty, values, _)) => {
                            values.add_at(r, &mut args)?;
                            ty
                        }
                        None => {
                            c.values.add_at(r, &mut args)?;
                            c.ty
                        }
                    };
                    row = row.replace(&format!("{{{i}}}"), &format!("${p}::{ty}"));
                }
                if r > start {
                    sql.push_str(", ");
                }
                sql.push('(');
                sql.push_str(&row);
                sql.push(')');
            }
            sql.push(' ');
            sql.push_str(self.tail);
            out.push((sql, args));
        }
        Ok(out)
    }
}

/// Runs `insert` in `tx`; returns the rows it inserted (or updated, with `ON CONFLICT … DO UPDATE`).
pub async fn execute(tx: &mut OrgTx, insert: &Insert<'_>) -> Result<u64, DbError> {
    let mut done = 0;
    for (sql, args) in insert.statements(tx.distributed())? {
        done += sqlx::query_with(&sql, args).execute(tx.conn()).await?.rows_affected();
    }
    Ok(done)
}

/// Runs `insert` (which ends in `RETURNING …`) in `tx`; returns what it returned.
pub async fn returning<T>(tx: &mut OrgTx, insert: &Insert<'_>) -> Result<Vec<T>, DbError>
where
    T: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
{
    let mut out = Vec::new();
    for (sql, args) in insert.statements(tx.distributed())? {
        out.extend(sqlx::query_as_with::<_, T, _>(&sql, args).fetch_all(tx.conn()).await?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn sample<'a>(org: &'a uuid::Uuid, names: &'a [String], n: &'a [i64]) -> Insert<'a> {
        let consts: &'a [Col<'a>] = Box::leak(Box::new([constant("uuid", org)]));
        let cols: &'a [Col<'a>] = Box::leak(Box::new([col("text", names), col("bigint", n)]));
        Insert {
            into: "INSERT INTO t (org_id, name, n)",
            row: "$1, {0}, {1}",
            consts,
            cols,
            tail: "ON CONFLICT DO NOTHING",
        }
    }

    #[test]
    fn one_unnest_statement_on_postgresql() {
        let org = uuid::Uuid::nil();
        let names: Vec<String> = (0..3).map(|i| format!("n{i}")).collect();
        let n: Vec<i64> = (0..3).collect();
        let s = sample(&org, &names, &n).statements(false).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(
            s[0].0,
            "INSERT INTO t (org_id, name, n) SELECT $1, u.c0, u.c1 FROM unnest($2::text[], $3::bigint[]) AS u(c0, c1) \
             ON CONFLICT DO NOTHING"
        );
    }

    #[test]
    fn values_in_chunks_under_the_parameter_limit_on_citus() {
        let org = uuid::Uuid::nil();
        let rows = 70_000;
        let names: Vec<String> = (0..rows).map(|i| format!("n{i}")).collect();
        let n: Vec<i64> = (0..rows as i64).collect();
        let s = sample(&org, &names, &n).statements(true).unwrap();
        // 2 parameters a row, 1 constant: 29,999 rows a statement.
        assert_eq!(s.len(), 3);
        assert!(s[0].0.starts_with("INSERT INTO t (org_id, name, n) VALUES ($1, $2::text, $3::bigint), ($1, $4::text"));
        assert!(s[0].0.ends_with(" ON CONFLICT DO NOTHING"));
        let rows_in = |sql: &str| sql.matches("($1, ").count();
        assert_eq!(s.iter().map(|(sql, _)| rows_in(sql)).sum::<usize>(), rows);
        assert!(s.iter().all(|(sql, _)| !sql.contains(&format!("${}:", MAX_PARAMS + 1))));
    }

    #[test]
    fn no_rows_no_statement_and_ragged_columns_are_refused() {
        let org = uuid::Uuid::nil();
        assert!(sample(&org, &[], &[]).statements(true).unwrap().is_empty());
        let names = vec!["a".to_string()];
        assert!(sample(&org, &names, &[1, 2]).statements(false).is_err());
    }
}
