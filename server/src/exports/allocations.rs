//! The month's allocations CSV, joined and computed in Rust.
//!
//! PostgreSQL sends only the raw columns of `allocation_intervals` that overlap the month (binary protocol, no
//! joins, no per-row `numeric` arithmetic, no per-row text conversions of timestamps). What the rows are joined
//! with is small and read once per export into maps: the clusters' names and every namespace's ownership history
//! with its tenant and department (as the caller may see them). Then, per interval, exactly what the SQL plan
//! ([`super::sources::ALLOCATIONS`]'s `csv_from`, still the reference the tests compare with) does:
//!
//! - the owners whose validity overlaps the interval (`valid_from < ended_at` and `valid_to > started_at`, open
//!   ends infinite); one piece per owner, `[max(started_at, valid_from), min(ended_at, valid_to, now()))`; no
//!   overlapping owner at all: one piece without owner over the whole interval;
//! - each piece cut to the month, kept when not empty;
//! - `GpuHours` = `round(fraction_num × seconds / (fraction_den × 3600), 6)` and `Fraction` =
//!   `round(fraction_num / fraction_den, 6)` in exact integer arithmetic, rounded the way PostgreSQL's `numeric`
//!   rounds them (its division result scale, then half away from zero: [`pg_div_round6`]), never a float;
//! - the caller's scope (department-scoped callers: rows with a visible tenant only) and the department and tenant
//!   filters.
//!
//! Memory: the maps grow with namespaces, ownership changes and clusters, never with allocation rows; rows stream
//! through (one row decoded at a time, 64 KiB chunks through the caller's bounded channel).

use std::{borrow::Cow, collections::HashMap, fmt::Write as _};

use futures::TryStreamExt;
use sqlx::{PgConnection, Row, postgres::PgRow};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{
    cells::{self, Cell},
    sources::{month_floor, next_month},
};
use crate::error::AppError;

/// The CSV columns this module writes, in order (a test checks them against [`super::sources::ALLOCATIONS`]).
pub(crate) const COLUMNS: [&str; 34] = [
    "Period",
    "ClusterId",
    "Cluster",
    "AllocationId",
    "Start",
    "End",
    "GpuHours",
    "Fraction",
    "TenantId",
    "Tenant",
    "DepartmentId",
    "Department",
    "HolderKind",
    "HolderUid",
    "HolderName",
    "Namespace",
    "NamespaceUid",
    "Container",
    "Node",
    "Resource",
    "Units",
    "Devices",
    "GpuModel",
    "GpuClass",
    "SharingMode",
    "Profile",
    "Replicas",
    "Endpoint",
    "StartedAt",
    "EndedAt",
    "EndEstimated",
    "Confidence",
    "InventoryGap",
    "Share",
];

/// One owner of a namespace over `[from, to)`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Owner {
    pub from: OffsetDateTime,
    pub to: Option<OffsetDateTime>,
    pub tenant_id: Option<Uuid>,
    pub tenant: Option<String>,
    pub department_id: Option<Uuid>,
    pub department: Option<String>,
}

/// What the intervals are joined with, read once per export: proportional to clusters and namespaces.
#[derive(Debug, Default)]
pub(crate) struct Dimensions {
    /// Cluster names.
    pub clusters: HashMap<Uuid, String>,
    /// Owners by namespace UID, by `valid_from`.
    pub owners: HashMap<Uuid, Vec<Owner>>,
    /// The transaction's `now()`: where open intervals end.
    pub now: Option<OffsetDateTime>,
    /// The transaction's organization (`app.org_id`, as row-level security reads it), bound as the statements'
    /// explicit `org_id` so that they can be routed to one shard (docs/scaling.md).
    pub org: Option<Uuid>,
}

impl Dimensions {
    /// Reads them in the caller's transaction.
    pub async fn load(conn: &mut PgConnection) -> Result<Self, sqlx::Error> {
        super::store::dimensions(conn).await
    }
}

/// Which rows an export holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cut {
    /// Only months starting at or after this (a month start).
    pub from: Option<OffsetDateTime>,
    /// Only months starting before this (a month start).
    pub before: Option<OffsetDateTime>,
    /// A department-scoped caller: only rows with a (visible) tenant.
    pub scoped: bool,
    /// Only this department's rows.
    pub department: Option<Uuid>,
    /// Only this tenant's rows.
    pub tenant: Option<Uuid>,
}

impl Cut {
    fn keeps(&self, owner: Option<&Owner>) -> bool {
        let tenant = owner.and_then(|o| o.tenant_id);
        let department = owner.and_then(|o| o.department_id);
        (!self.scoped || tenant.is_some())
            && self.department.is_none_or(|d| department == Some(d))
            && self.tenant.is_none_or(|t| tenant == Some(t))
    }
}

/// One row: an interval's piece held by one owner (or none) inside one month.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Piece<'o> {
    pub owner: Option<&'o Owner>,
    /// The month's first instant.
    pub month: OffsetDateTime,
    pub start: OffsetDateTime,
    pub end: OffsetDateTime,
}

/// The pieces of the interval `[started, ended)` (open: up to `now`) in the months of `cut`, split by `owners`
/// exactly as the SQL plan splits it (see the module's documentation), in order of their start. Appends to `out`.
pub(crate) fn split<'o>(
    owners: &'o [Owner],
    started: OffsetDateTime,
    ended: Option<OffsetDateTime>,
    now: OffsetDateTime,
    cut: &Cut,
    out: &mut Vec<Piece<'o>>,
) {
    let mut push = |owner: Option<&'o Owner>, s: OffsetDateTime, e: OffsetDateTime| {
        let mut month = month_floor(s);
        if let Some(from) = cut.from {
            month = month.max(from);
        }
        while month < e && cut.before.is_none_or(|b| month < b) {
            let next = next_month(month);
            let (start, end) = (s.max(month), e.min(next));
            if end > start {
                out.push(Piece { owner, month, start, end });
            }
            month = next;
        }
    };
    let end = ended.map_or(now, |e| e.min(now));
    let mut any = false;
    for o in owners {
        let overlaps = ended.is_none_or(|e| o.from < e) && o.to.is_none_or(|t| t > started);
        if !overlaps {
            continue;
        }
        any = true;
        push(Some(o), started.max(o.from), o.to.map_or(end, |t| t.min(end)));
    }
    if !any {
        push(None, started, end);
    }
}

// ---------------------------------------------------------------- exact decimals as PostgreSQL computes them

/// `10^n`, if it fits.
fn pow10(n: u32) -> Option<i128> {
    10_i128.checked_pow(n)
}

/// `round(a / b)`, half away from zero, for `a >= 0`, `b > 0`.
fn div_round(a: i128, b: i128) -> i128 {
    let (q, r) = (a / b, a % b);
    if r >= b - r { q + 1 } else { q }
}

/// The weight and first digit of `n / 10^scale` (`n >= 0`) in PostgreSQL's base-10000 `numeric` digits.
fn weight_first(n: i128, scale: u32) -> Option<(i32, i128)> {
    if n == 0 {
        return Some((0, 0));
    }
    let digits = i32::try_from(n.ilog10()).ok()? + 1;
    let exponent = digits - 1 - i32::try_from(scale).ok()?;
    let weight = exponent.div_euclid(4);
    let shift = i32::try_from(scale).ok()? + 4 * weight;
    let first = if shift >= 0 { n / pow10(shift.unsigned_abs())? } else { n * pow10(shift.unsigned_abs())? };
    Some((weight, first))
}

/// `round(n::numeric(scale) / d, 6)` as PostgreSQL computes it, in millionths: the quotient is rounded (half away
/// from zero) to the result scale PostgreSQL's `numeric` division picks (at least 16 significant digits, at least
/// the dividend's scale: `select_div_scale`), then to 6 decimals. For `n >= 0`, `d > 0`; `None` if an
/// intermediate does not fit 128 bits (never for real GPU fractions and month-long pieces).
pub(crate) fn pg_div_round6(n: i128, scale: u32, d: i128) -> Option<i128> {
    if n < 0 || d <= 0 {
        return None;
    }
    let (w1, f1) = weight_first(n, scale)?;
    let (w2, f2) = weight_first(d, 0)?;
    let qweight = w1 - w2 - i32::from(f1 <= f2);
    let rscale = (16 - 4 * qweight).max(i32::try_from(scale).ok()?).clamp(0, 1000).unsigned_abs();
    // round(n / (d × 10^scale), rscale), in units of 10^-rscale
    let q = if rscale >= scale {
        div_round(n.checked_mul(pow10(rscale - scale)?)?, d)
    } else {
        div_round(n, d.checked_mul(pow10(scale - rscale)?)?)
    };
    if rscale >= 6 { Some(div_round(q, pow10(rscale - 6)?)) } else { q.checked_mul(pow10(6 - rscale)?) }
}

/// GPU-hours of `micros` microseconds at `num / den` GPUs, in millionths (the SQL plan's
/// `round(num::numeric * extract(epoch FROM pe - ps) / (den * 3600), 6)`).
pub(crate) fn gpu_hours_micro(num: i64, den: i64, micros: i128) -> Option<i128> {
    let n = i128::from(num).checked_mul(micros)?;
    pg_div_round6(n, 6, i128::from(den).checked_mul(3600)?)
}

/// The fraction `num / den` in millionths (`round(num::numeric / den, 6)`).
pub(crate) fn fraction_micro(num: i64, den: i64) -> Option<i128> {
    pg_div_round6(i128::from(num), 0, i128::from(den))
}

/// Writes millionths as a decimal with six digits after the point (`12.000000`).
pub(crate) fn write_micro(out: &mut String, v: i128) {
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs();
    let _ = write!(out, "{sign}{}.{:06}", a / 1_000_000, a % 1_000_000);
}

// ---------------------------------------------------------------- rows

/// `text[]` in PostgreSQL's binary array format, its non-null elements joined by a space (what
/// `array_to_string(a, ' ')` gives).
fn join_text_array(row: &PgRow, i: usize, out: &mut String) -> Result<(), AppError> {
    use sqlx::ValueRef;
    let bad = || AppError::Internal("device_ids: not a binary text[]".into());
    let raw = row.try_get_raw(i)?;
    if raw.is_null() {
        return Ok(());
    }
    if raw.format() != sqlx::postgres::PgValueFormat::Binary {
        return Err(bad());
    }
    let b = raw.as_bytes().map_err(|_| bad())?;
    let int = |at: usize| -> Result<i32, AppError> {
        b.get(at..at + 4).and_then(|s| <[u8; 4]>::try_from(s).ok()).map(i32::from_be_bytes).ok_or_else(bad)
    };
    let ndim = usize::try_from(int(0)?).map_err(|_| bad())?;
    let mut count: usize = if ndim == 0 { 0 } else { 1 };
    let mut at = 12;
    for _ in 0..ndim {
        count = count.checked_mul(usize::try_from(int(at)?).map_err(|_| bad())?).ok_or_else(bad)?;
        at += 8;
    }
    let mut first = true;
    for _ in 0..count {
        let len = int(at)?;
        at += 4;
        let Ok(len) = usize::try_from(len) else { continue }; // NULL (-1): skipped
        let s = b.get(at..at + len).and_then(|s| std::str::from_utf8(s).ok()).ok_or_else(bad)?;
        at += len;
        if !first {
            out.push(' ');
        }
        out.push_str(s);
        first = false;
    }
    Ok(())
}

fn text(row: &PgRow, i: usize) -> Result<Cell<'_>, sqlx::Error> {
    Ok(row.try_get_unchecked::<Option<&str>, _>(i)?.map_or(Cell::Null, Cell::text))
}

/// One interval as PostgreSQL sent it ([`super::store::INTERVALS_SQL`]), and its cells that do not depend on the
/// piece.
struct Interval<'r> {
    cluster_id: Uuid,
    allocation_id: &'r str,
    started_at: OffsetDateTime,
    ended_at: Option<OffsetDateTime>,
    fraction: Option<(i64, i64)>,
    namespace_uid: Option<Uuid>,
    /// `Fraction` and `HolderKind` … `InventoryGap`.
    tail: [Cell<'r>; 23],
}

impl<'r> Interval<'r> {
    /// Decodes a row of [`super::store::INTERVALS_SQL`]; `fraction` and `devices` hold the text of those cells.
    /// (Without sqlx's type check per value: the statement is this feature's own and its column types are fixed by
    /// the schema; values are still decoded and validated.)
    fn decode(row: &'r PgRow, fraction: &'r mut String, devices: &'r mut String) -> Result<Self, AppError> {
        let num: Option<i64> = row.try_get_unchecked(4)?;
        let den: Option<i64> = row.try_get_unchecked(5)?;
        let frac = match (num, den) {
            (Some(n), Some(d)) => Some((n, d)),
            _ => None,
        };
        fraction.clear();
        if let Some((n, d)) = frac {
            write_micro(fraction, fraction_micro(n, d).ok_or_else(|| overflow(n, d))?);
        }
        let fraction: &'r String = fraction;
        devices.clear();
        join_text_array(row, 15, devices)?;
        let devices: &'r String = devices;
        let started_at: OffsetDateTime = row.try_get_unchecked(2)?;
        let ended_at: Option<OffsetDateTime> = row.try_get_unchecked(3)?;
        let namespace_uid: Option<Uuid> = row.try_get_unchecked(10)?;
        let tail = [
            if frac.is_some() { Cell::Num(Cow::Borrowed(fraction.as_str())) } else { Cell::Null },
            text(row, 6)?,
            Cell::Guid(row.try_get_unchecked(7)?),
            text(row, 8)?,
            text(row, 9)?,
            namespace_uid.map_or(Cell::Null, Cell::Guid),
            text(row, 11)?,
            text(row, 12)?,
            text(row, 13)?,
            Cell::Int(i64::from(row.try_get_unchecked::<i32, _>(14)?)),
            Cell::text(devices.as_str()),
            text(row, 16)?,
            text(row, 17)?,
            text(row, 18)?,
            text(row, 19)?,
            row.try_get_unchecked::<Option<i32>, _>(20)?.map_or(Cell::Null, |v| Cell::Int(i64::from(v))),
            text(row, 21)?,
            Cell::Time(started_at),
            ended_at.map_or(Cell::Null, Cell::Time),
            Cell::Bool(row.try_get_unchecked(22)?),
            text(row, 23)?,
            text(row, 24)?,
            text(row, 25)?,
        ];
        Ok(Self {
            cluster_id: row.try_get_unchecked(0)?,
            allocation_id: row.try_get_unchecked(1)?,
            started_at,
            ended_at,
            fraction: frac,
            namespace_uid,
            tail,
        })
    }

    /// The pieces of this interval the export holds.
    fn pieces<'o>(&self, dims: &'o Dimensions, cut: &Cut, out: &mut Vec<Piece<'o>>) -> Result<(), AppError> {
        const NONE: &[Owner] = &[];
        let now = dims.now.ok_or_else(|| AppError::Internal("dimensions without now()".into()))?;
        let owners = self.namespace_uid.and_then(|n| dims.owners.get(&n)).map_or(NONE, Vec::as_slice);
        out.clear();
        split(owners, self.started_at, self.ended_at, now, cut, out);
        out.retain(|p| cut.keeps(p.owner));
        Ok(())
    }

    /// Every column of the set (the CSV's 34, then `PeriodStart`) for one piece; `hours` holds `GpuHours`' text.
    fn cells<'c>(&'c self, cluster: &'c str, p: &Piece<'c>, hours: &'c mut String) -> Result<[Cell<'c>; 35], AppError> {
        if let Some((n, d)) = self.fraction {
            let micros = (p.end - p.start).whole_microseconds();
            hours.clear();
            write_micro(hours, gpu_hours_micro(n, d, micros).ok_or_else(|| overflow(n, d))?);
        }
        let hours: &'c String = hours;
        let gpu_hours = if self.fraction.is_some() { Cell::Num(Cow::Borrowed(hours.as_str())) } else { Cell::Null };
        let o = p.owner;
        let t = &self.tail;
        Ok([
            Cell::Month(p.month.date()),
            Cell::Guid(self.cluster_id),
            Cell::text(cluster),
            Cell::text(self.allocation_id),
            Cell::Time(p.start),
            Cell::Time(p.end),
            gpu_hours,
            t[0].clone(),
            o.and_then(|o| o.tenant_id).map_or(Cell::Null, Cell::Guid),
            o.and_then(|o| o.tenant.as_deref()).map_or(Cell::Null, Cell::text),
            o.and_then(|o| o.department_id).map_or(Cell::Null, Cell::Guid),
            o.and_then(|o| o.department.as_deref()).map_or(Cell::Null, Cell::text),
            t[1].clone(),
            t[2].clone(),
            t[3].clone(),
            t[4].clone(),
            t[5].clone(),
            t[6].clone(),
            t[7].clone(),
            t[8].clone(),
            t[9].clone(),
            t[10].clone(),
            t[11].clone(),
            t[12].clone(),
            t[13].clone(),
            t[14].clone(),
            t[15].clone(),
            t[16].clone(),
            t[17].clone(),
            t[18].clone(),
            t[19].clone(),
            t[20].clone(),
            t[21].clone(),
            t[22].clone(),
            Cell::Time(p.month),
        ])
    }
}

/// The month range of `cut` as `INTERVALS_SQL`'s conditions: `[from, before)` (or unbounded), and `$1`, `$2`
/// (`$3` is the organization, `dims.org`).
fn range_args(cut: &Cut) -> (OffsetDateTime, OffsetDateTime) {
    (
        cut.from.unwrap_or(OffsetDateTime::UNIX_EPOCH - time::Duration::days(365 * 1000)),
        cut.before.unwrap_or(OffsetDateTime::UNIX_EPOCH + time::Duration::days(365 * 8000)),
    )
}

/// Streams the rows of `cut` as CSV lines into `buf`; `flush` is called whenever `buf` holds a chunk's worth and
/// returns false when the client went away. `first` is called once the first row (or the end) came back.
pub(crate) async fn write_rows<F, Fut>(
    conn: &mut PgConnection,
    dims: &Dimensions,
    cut: &Cut,
    buf: &mut Vec<u8>,
    chunk: usize,
    mut first: impl FnMut(),
    mut flush: F,
) -> Result<(), AppError>
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(4);
    let (mut hours, mut fraction, mut devices) = (String::new(), String::new(), String::new());
    let (from, before) = range_args(cut);
    let mut rows = super::store::intervals(conn, from, before, dims.org);
    let mut started = false;
    loop {
        let row = rows.try_next().await?;
        if !started {
            started = true;
            first();
        }
        let Some(row) = row else { break };
        // The SQL plan's inner join with clusters.
        let Some(cluster) = dims.clusters.get(&row.try_get::<Uuid, _>(0)?) else { continue };
        let interval = Interval::decode(&row, &mut fraction, &mut devices)?;
        interval.pieces(dims, cut, &mut pieces)?;
        for p in &pieces {
            let cells = interval.cells(cluster, p, &mut hours)?;
            cells::csv_row(buf, cells[..COLUMNS.len()].iter());
        }
        if buf.len() >= chunk {
            let full = std::mem::replace(buf, Vec::with_capacity(chunk + 4096));
            if !flush(full).await {
                return Ok(()); // the client went away
            }
        }
    }
    Ok(())
}

/// Where an OData page continues: after this key (`ClusterId`, `AllocationId`, `Start`).
pub(crate) type Key = (Uuid, String, OffsetDateTime);

/// One page of `/odata/Allocations` in the default (key) order: at most `want` entities after `after`, written as
/// JSON objects (comma-separated) of the columns at `columns` (indexes into the set's columns) into `out`.
/// Returns how many were written and, when more follow, the last one's key. Intervals are read in key order from
/// the primary key (an index range however deep the page), `want + 1` at a time.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn odata_page(
    conn: &mut PgConnection,
    dims: &Dimensions,
    cut: &Cut,
    after: Option<Key>,
    want: usize,
    columns: &[(usize, &'static super::cells::Column)],
    ieee754: bool,
    out: &mut Vec<u8>,
) -> Result<(usize, Option<Key>), AppError> {
    let (from, before) = range_args(cut);
    let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(4);
    let (mut hours, mut fraction, mut devices) = (String::new(), String::new(), String::new());
    let names: Vec<Vec<u8>> = columns
        .iter()
        .map(|(_, c)| {
            let mut n = Vec::with_capacity(c.name.len() + 3);
            cells::json_string(&mut n, c.name);
            n.push(b':');
            n
        })
        .collect();
    let mut shown = 0usize;
    let mut last: Option<Key> = None;
    // Where the next batch of intervals starts: at the continuation's interval (inclusive), then after the last
    // interval read (exclusive).
    let mut position: Option<(Uuid, String, bool)> = after.as_ref().map(|(c, a, _)| (*c, a.clone(), true));
    let batch = i64::try_from(want + 1).unwrap_or(i64::MAX);
    loop {
        let rows = super::store::interval_batch(&mut *conn, from, before, dims.org, batch, position.as_ref()).await?;
        let fetched = rows.len();
        for row in &rows {
            let Some(cluster) = dims.clusters.get(&row.try_get::<Uuid, _>(0)?) else { continue };
            let interval = Interval::decode(row, &mut fraction, &mut devices)?;
            interval.pieces(dims, cut, &mut pieces)?;
            pieces.sort_by_key(|p| p.start);
            for p in &pieces {
                if let Some((c, a, s)) = &after
                    && *c == interval.cluster_id
                    && a == interval.allocation_id
                    && p.start <= *s
                {
                    continue;
                }
                if shown == want {
                    // one more exists: the page ends at the previous one
                    return Ok((shown, last));
                }
                let cells = interval.cells(cluster, p, &mut hours)?;
                if shown > 0 {
                    out.push(b',');
                }
                out.push(b'{');
                for (j, ((i, c), name)) in columns.iter().zip(&names).enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(name);
                    cells::json_cell(out, cells.get(*i).unwrap_or(&Cell::Null), c.kind, ieee754);
                }
                out.push(b'}');
                shown += 1;
                last = Some((interval.cluster_id, interval.allocation_id.to_string(), p.start));
            }
        }
        if i64::try_from(fetched).unwrap_or(i64::MAX) < batch {
            return Ok((shown, None)); // no more intervals
        }
        let Some(row) = rows.last() else { return Ok((shown, None)) };
        position = Some((row.try_get(0)?, row.try_get::<String, _>(1)?, false));
    }
}

fn overflow(num: i64, den: i64) -> AppError {
    AppError::Internal(format!("GPU-hours of a {num}/{den} allocation do not fit 128-bit arithmetic"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::datetime;

    #[test]
    fn columns_are_the_csv_columns_of_the_set() {
        let set = &super::super::sources::ALLOCATIONS;
        let names: Vec<&str> = set.csv_columns().iter().map(|c| c.name).collect();
        assert_eq!(names, COLUMNS);
        // `Interval::cells` writes the CSV's columns, then `PeriodStart`: the set's columns in order
        let all: Vec<&str> = set.columns.iter().map(|c| c.name).collect();
        assert_eq!(all[..COLUMNS.len()], COLUMNS);
        assert_eq!(all[COLUMNS.len()..], ["PeriodStart"]);
    }

    fn micro(v: Option<i128>) -> String {
        let mut s = String::new();
        write_micro(&mut s, v.unwrap());
        s
    }

    #[test]
    fn decimals_round_like_postgresql() {
        // Values checked with PostgreSQL 15 (`round(x::numeric / y, 6)` and the GPU-hours expression).
        assert_eq!(micro(fraction_micro(1, 7)), "0.142857");
        assert_eq!(micro(fraction_micro(3, 7)), "0.428571");
        assert_eq!(micro(fraction_micro(5, 7)), "0.714286");
        assert_eq!(micro(fraction_micro(4, 1)), "4.000000");
        assert_eq!(micro(fraction_micro(1, 2_000_000)), "0.000001"); // 0.0000005 rounds away from zero
        assert_eq!(micro(gpu_hours_micro(2, 1, 36_000_000_000)), "20.000000");
        assert_eq!(micro(gpu_hours_micro(1, 7, 86_399_999_999)), "3.428571");
        assert_eq!(micro(gpu_hours_micro(1, 7, 1)), "0.000000");
        assert_eq!(micro(gpu_hours_micro(1, 1, 1_800)), "0.000001"); // 0.0000005 h
        assert_eq!(micro(gpu_hours_micro(1, 1, 1_799)), "0.000000");
        // PostgreSQL first rounds the quotient to its division scale (here 24 decimals: 0.00000049999999999999999999
        // → 0.000000500000000000000000), then to 6 decimals: 0.000001, where the exact value rounds down.
        assert_eq!(pg_div_round6(49_999_999_999_999_999_999, 6, 100_000_000_000_000_000_000), Some(1));
        assert_eq!(pg_div_round6(4_999_999_999_999, 6, 10_000_000_000_000), Some(0));
        assert_eq!(weight_first(25_200, 0), Some((1, 2)));
        assert_eq!(weight_first(86_399_999_999, 6), Some((1, 8)));
        assert_eq!(weight_first(1, 6), Some((-2, 100)));
    }

    fn owner(from: OffsetDateTime, to: Option<OffsetDateTime>, tenant: u128) -> Owner {
        Owner {
            from,
            to,
            tenant_id: Some(Uuid::from_u128(tenant)),
            tenant: Some(format!("t{tenant}")),
            department_id: Some(Uuid::from_u128(100 + tenant)),
            department: Some("d".into()),
        }
    }

    #[test]
    fn split_by_owner_month_and_now() {
        let (sep, oct) = (datetime!(2026-09-01 00:00 UTC), datetime!(2026-10-01 00:00 UTC));
        let now = datetime!(2026-11-15 00:00 UTC);
        let cut = |from, before| Cut { from, before, scoped: false, department: None, tenant: None };
        let september = cut(Some(sep), Some(oct));
        let owners = vec![
            owner(datetime!(2026-01-01 00:00 UTC), Some(datetime!(2026-09-20 12:00 UTC)), 1),
            owner(datetime!(2026-09-20 12:00 UTC), Some(datetime!(2026-09-25 00:00 UTC)), 2),
            owner(datetime!(2026-09-28 00:00 UTC), None, 3),
        ];
        let mut out = Vec::new();
        // crosses both month edges, two owner changes, a gap without owner (not written: owners overlap)
        split(
            &owners,
            datetime!(2026-08-30 00:00 UTC),
            Some(datetime!(2026-10-02 00:00 UTC)),
            now,
            &september,
            &mut out,
        );
        let got: Vec<_> = out.iter().map(|p| (p.owner.map(|o| o.tenant_id), p.start, p.end)).collect();
        assert_eq!(
            got,
            [
                (Some(owners[0].tenant_id), sep, datetime!(2026-09-20 12:00 UTC)),
                (Some(owners[1].tenant_id), datetime!(2026-09-20 12:00 UTC), datetime!(2026-09-25 00:00 UTC)),
                (Some(owners[2].tenant_id), datetime!(2026-09-28 00:00 UTC), oct),
            ]
        );
        // no owner at all: one piece without owner; open: up to now
        out.clear();
        split(&[], datetime!(2026-09-30 00:00 UTC), None, datetime!(2026-09-30 06:00 UTC), &september, &mut out);
        let (s, e) = (datetime!(2026-09-30 00:00 UTC), datetime!(2026-09-30 06:00 UTC));
        assert_eq!(out, [Piece { owner: None, month: sep, start: s, end: e }]);
        // every month when the range is open: each owner's piece cut at the month edges, in order
        out.clear();
        let (aug, nov) = (datetime!(2026-08-01 00:00 UTC), datetime!(2026-11-01 00:00 UTC));
        split(&owners, datetime!(2026-08-30 00:00 UTC), None, now, &cut(None, None), &mut out);
        let got: Vec<_> = out.iter().map(|p| (p.month, p.start, p.end)).collect();
        assert_eq!(
            got,
            [
                (aug, datetime!(2026-08-30 00:00 UTC), sep),
                (sep, sep, datetime!(2026-09-20 12:00 UTC)),
                (sep, datetime!(2026-09-20 12:00 UTC), datetime!(2026-09-25 00:00 UTC)),
                (sep, datetime!(2026-09-28 00:00 UTC), oct),
                (oct, oct, nov),
                (nov, nov, now),
            ]
        );
        out.clear();
        split(&owners, datetime!(2026-08-30 00:00 UTC), None, now, &cut(Some(oct), None), &mut out);
        assert_eq!(out.iter().map(|p| p.month).collect::<Vec<_>>(), [oct, nov]);
        // owners that do not overlap the interval count as none
        out.clear();
        split(
            &owners[2..],
            datetime!(2026-09-02 00:00 UTC),
            Some(datetime!(2026-09-03 00:00 UTC)),
            now,
            &september,
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert!(out[0].owner.is_none());
        // an owner starting after now: its piece is empty
        out.clear();
        let late = [owner(datetime!(2026-12-01 00:00 UTC), None, 9)];
        let november = cut(Some(datetime!(2026-11-01 00:00 UTC)), Some(datetime!(2026-12-01 00:00 UTC)));
        split(&late, datetime!(2026-11-01 00:00 UTC), None, now, &november, &mut out);
        assert!(out.is_empty());
    }
}
