//! A month read in parts for the close (docs/scaling.md, "The streamed close"): allocation records in parts of whole
//! departments from a cursor in the close's transaction, and the evidence index staged part by part and ranked once.

use std::collections::{HashMap, VecDeque};

use gpuledger_core::{Period, ledger::AllocationRecord};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{ALLOC_COLUMNS, ALLOC_FROM, AllocRow, mig_parents, to_record};
use crate::{db::OrgTx, error::AppError};

const CURSOR: &str = "gl_close_allocations";
/// Rows per `FETCH`.
const FETCH: usize = 5_000;

/// A row of the cursor: the owner's department, the part number of the allocation under this owner, the record's row.
type PartRow = (
    Option<Uuid>,
    i64,
    String,
    String,
    i64,
    i64,
    Option<String>,
    OffsetDateTime,
    Option<OffsetDateTime>,
    String,
    Vec<String>,
    Option<String>,
    Option<Uuid>,
    Option<OffsetDateTime>,
    Option<OffsetDateTime>,
    Option<String>,
);

/// A month's allocation records in parts of whole departments (every quota pool in one part), read from a cursor
/// in the caller's transaction so that other statements run between parts. Records arrive ordered by department
/// (unowned first), cluster and allocation; an allocation split at an ownership change is numbered `#1`, `#2`, …
/// in its owners' order, as [`super::load_allocations`] numbers it.
pub(crate) struct AllocationParts {
    mig_parent: HashMap<String, String>,
    pending: VecDeque<(Option<Uuid>, AllocationRecord)>,
    exhausted: bool,
    target: usize,
}

fn literal(t: OffsetDateTime) -> String {
    format!("'{}'::timestamptz", gpuledger_core::time_fmt::rfc3339(t))
}

impl AllocationParts {
    /// Opens the cursor over `period`'s allocations; parts hold about `target` records (a department larger than
    /// that is one part).
    pub(crate) async fn open(tx: &mut OrgTx, period: Period, target: usize) -> Result<Self, AppError> {
        let (start, end) = crate::ledger::bounds(tx, period).await?;
        let mig_parent = mig_parents(tx).await?;
        sqlx::query("SET LOCAL jit = off").execute(tx.conn()).await?;
        let (joins, filter) = ALLOC_FROM.split_once("WHERE").unwrap_or((ALLOC_FROM, "true"));
        // A cursor takes no parameters: `$1`–`$3` are replaced by the month's bounds and the organization as literals
        // (values of ours, never a caller's text).
        let sql = format!(
            "DECLARE {CURSOR} NO SCROLL CURSOR FOR
             SELECT t.department_id,
                    row_number() OVER (PARTITION BY c.name, a.allocation_id ORDER BY o.valid_from NULLS FIRST) - 1,
                    {ALLOC_COLUMNS}
               {joins}
               LEFT JOIN tenants t ON t.org_id = $3 AND t.tenant_id = o.tenant_id
              WHERE {filter}
              ORDER BY t.department_id NULLS FIRST, c.name COLLATE \"C\", a.allocation_id COLLATE \"C\",
                       o.valid_from NULLS FIRST"
        )
        .replace("$1", &literal(start))
        .replace("$2", &literal(end))
        .replace("$3", &format!("'{}'::uuid", tx.org().as_uuid()));
        sqlx::query(&sql).execute(tx.conn()).await?;
        Ok(Self { mig_parent, pending: VecDeque::new(), exhausted: false, target: target.max(1) })
    }

    /// The next part, or `None` after the last (the cursor is then closed).
    pub(crate) async fn next(&mut self, tx: &mut OrgTx) -> Result<Option<Vec<AllocationRecord>>, AppError> {
        let mut part: Vec<AllocationRecord> = Vec::new();
        let mut department: Option<Option<Uuid>> = None;
        loop {
            while let Some((d, _)) = self.pending.front() {
                if part.len() >= self.target && department != Some(*d) {
                    return Ok(Some(part));
                }
                if let Some((d, r)) = self.pending.pop_front() {
                    department = Some(d);
                    part.push(r);
                }
            }
            if self.exhausted {
                return Ok((!part.is_empty()).then_some(part));
            }
            let rows: Vec<PartRow> =
                sqlx::query_as(&format!("FETCH {FETCH} FROM {CURSOR}")).fetch_all(tx.conn()).await?;
            if rows.len() < FETCH {
                self.exhausted = true;
                sqlx::query(&format!("CLOSE {CURSOR}")).execute(tx.conn()).await?;
            }
            for (d, n, cluster, alloc, num, den, class, s, e, conf, devices, endpoint, tenant, of, ot, basis) in rows {
                let row: AllocRow =
                    (cluster, alloc, num, den, class, s, e, conf, devices, endpoint, tenant, of, ot, basis);
                let (mut record, _, _) = to_record(row, &self.mig_parent)?;
                if n > 0 {
                    record.id = format!("{}#{n}", record.id);
                }
                self.pending.push_back((d, record));
            }
        }
    }
}

/// Ranks a record holds until the month is ranked: above any final rank (a month has fewer records), so the
/// table's unique ranks hold at every step.
const UNRANKED: i64 = 1_000_000_000;

/// The evidence index of a month being closed, written part by part (each record at a provisional rank) and ranked
/// once at the end: the ranks are the table's keys and need the whole month. (Staging in a temporary table does not
/// work on Citus: a distributed `INSERT … SELECT` from a local table is a `COPY`, which row-level security refuses.)
pub(crate) struct EvidenceStage {
    records: i64,
    groups: std::collections::BTreeMap<crate::ledger::evidence::GroupKey, u64>,
}

impl EvidenceStage {
    /// Writes the month's head (its counts are set by [`EvidenceStage::finish`]).
    pub(crate) async fn begin(tx: &mut OrgTx, period: Period, source: &str) -> Result<Self, AppError> {
        sqlx::query(
            "INSERT INTO evidence_months (org_id, period, allocations, groups, source) VALUES ($1, $2, 0, '[]', $3)",
        )
        .bind(tx.org().as_uuid())
        .bind(period.first_day())
        .bind(source)
        .execute(tx.conn())
        .await?;
        Ok(Self { records: 0, groups: Default::default() })
    }

    /// Writes one part's records.
    pub(crate) async fn add(
        &mut self,
        tx: &mut OrgTx,
        period: Period,
        records: &[AllocationRecord],
    ) -> Result<(), AppError> {
        for (key, n) in crate::ledger::evidence::groups(records) {
            *self.groups.entry(key).or_default() += n;
        }
        let (org, start) = (tx.org().as_uuid(), period.first_day());
        const CHUNK: usize = 10_000;
        for chunk in records.chunks(CHUNK) {
            use crate::bulk::{col, constant};
            let first = UNRANKED + self.records;
            let ranks: Vec<i32> =
                (0..chunk.len())
                    .map(|i| i32::try_from(first + i as i64))
                    .collect::<Result<_, _>>()
                    .map_err(|_| AppError::Internal("more allocation records than the evidence index ranks".into()))?;
            self.records += i64::try_from(chunk.len()).unwrap_or(i64::MAX);
            let ids: Vec<&str> = chunk.iter().map(|a| a.id.as_str()).collect();
            let tenants: Vec<Option<Uuid>> = chunk.iter().map(|a| a.tenant.map(|t| t.as_uuid())).collect();
            let classes: Vec<Option<&str>> = chunk.iter().map(|a| a.gpu_class.as_deref()).collect();
            let endpoints: Vec<Option<&str>> = chunk.iter().map(|a| a.endpoint.as_deref()).collect();
            let fractions: Vec<String> = chunk.iter().map(|a| String::from(a.fraction)).collect();
            let starts: Vec<OffsetDateTime> = chunk.iter().map(|a| a.start).collect();
            let ends: Vec<Option<OffsetDateTime>> = chunk.iter().map(|a| a.end).collect();
            let confidences: Vec<&str> = chunk.iter().map(|a| a.confidence.as_str()).collect();
            let devices: Vec<serde_json::Value> = chunk.iter().map(|a| serde_json::json!(a.devices)).collect();
            crate::bulk::execute(
                tx,
                &crate::bulk::Insert {
                    into: "INSERT INTO evidence_allocations (org_id, period, start_rank, end_rank, fraction_rank, id_rank,
                               allocation, tenant_id, gpu_class, endpoint, fraction, starts_at, ends_at, confidence, devices)",
                    row: "$1, $2, {0}, {0}, {0}, {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}",
                    consts: &[constant("uuid", &org), constant("date", &start)],
                    cols: &[
                        col("int", &ranks),
                        col("text", &ids),
                        col("uuid", &tenants),
                        col("text", &classes),
                        col("text", &endpoints),
                        col("text", &fractions),
                        col("timestamptz", &starts),
                        col("timestamptz", &ends),
                        col("text", &confidences),
                        col("jsonb", &devices),
                    ],
                    tail: "",
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Sets the month's counts and every record's ranks: the orders of `evidence::SortKey::cmp` — IDs compared byte
    /// for byte (`COLLATE "C"`), an open end first, fractions by value (PostgreSQL's numeric division keeps at least
    /// 16 significant digits: the exact order for any fraction a record holds).
    pub(crate) async fn finish(self, tx: &mut OrgTx, period: Period) -> Result<(), AppError> {
        let count = i32::try_from(self.records)
            .map_err(|_| AppError::Internal("more allocation records than the evidence index counts".into()))?;
        let groups: Vec<super::StoredGroup> = self.groups.into_iter().map(|((t, c, e), n)| (t, c, e, n)).collect();
        let (org, start) = (tx.org().as_uuid(), period.first_day());
        sqlx::query("UPDATE evidence_months SET allocations = $3, groups = $4 WHERE org_id = $1 AND period = $2")
            .bind(org)
            .bind(start)
            .bind(count)
            .bind(sqlx::types::Json(&groups))
            .execute(tx.conn())
            .await?;
        sqlx::query(
            "UPDATE evidence_allocations e
                SET start_rank = r.s, end_rank = r.en, fraction_rank = r.f, id_rank = r.i
               FROM (SELECT allocation,
                            (row_number() OVER (ORDER BY starts_at, allocation COLLATE \"C\"))::int AS s,
                            (row_number() OVER (ORDER BY ends_at NULLS FIRST, allocation COLLATE \"C\"))::int AS en,
                            (row_number() OVER (ORDER BY split_part(fraction, '/', 1)::numeric
                                 / coalesce(nullif(split_part(fraction, '/', 2), ''), '1')::numeric,
                                 allocation COLLATE \"C\"))::int AS f,
                            (row_number() OVER (ORDER BY allocation COLLATE \"C\"))::int AS i
                       FROM evidence_allocations WHERE org_id = $1 AND period = $2) r
              WHERE e.org_id = $1 AND e.period = $2 AND e.allocation = r.allocation",
        )
        .bind(org)
        .bind(start)
        .execute(tx.conn())
        .await?;
        Ok(())
    }
}
