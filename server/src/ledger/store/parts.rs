//! A month read in parts for the close (docs/scaling.md, "The streamed close"): allocation records in start order, in
//! parts of a fixed size, from a cursor in the close's transaction — with, for the close, each record's position in the evidence
//! index's four orders over the whole month, ranked by PostgreSQL in the same query — and the index written part by
//! part at those final ranks.

use std::collections::{HashMap, VecDeque};

use gpuledger_core::{Period, ledger::AllocationRecord};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{ALLOC_COLUMNS, ALLOC_FROM, AllocRow, mig_parents, to_record};
use crate::{db::OrgTx, error::AppError};

/// The cursors, one name per shape: the driver keeps a `FETCH`'s row description by its text, per connection, so
/// the same name with other columns would be read with the first shape's.
const CURSOR: &str = "gl_close_allocations";
const CURSOR_RANKED: &str = "gl_close_allocations_ranked";
/// Rows per `FETCH`.
const FETCH: usize = 5_000;
/// Start ranks per row of `evidence_orders` (a row stays under PostgreSQL's 2 kB out-of-line threshold; at most
/// 256, the table's check).
static ORDER_CHUNK: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(256);

/// Start ranks per row of `evidence_orders` written and read by this process.
pub(crate) fn order_chunk() -> i32 {
    ORDER_CHUNK.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sets the start ranks per row of `evidence_orders` (1 to 256) for this process: tests cut small months' orders
/// into many chunks with it, so that pages cross chunks. The answers do not depend on it.
pub fn set_order_chunk(ranks: i32) {
    ORDER_CHUNK.store(ranks.clamp(1, 256), std::sync::atomic::Ordering::Relaxed);
}

/// A month's allocation records in parts of `target` records, in start order (the record's start: the allocation's,
/// or its owner's from when the namespace changed hands) — what `LedgerParts` needs to sweep each quota pool as its
/// allocations come — read from a cursor in the caller's transaction so that other statements run between parts. An
/// allocation split at an ownership change is numbered `#1`, `#2`, … in its owners' order, as
/// [`super::load_allocations`] numbers it. (Cut by department and class before, a part was the largest
/// department's class: at 100,000 GPUs half a million records, the close's memory growing with the fleet.)
pub(crate) struct AllocationParts {
    mig_parent: HashMap<String, String>,
    pending: VecDeque<(AllocationRecord, Ranks)>,
    exhausted: bool,
    target: usize,
    cursor: &'static str,
}

/// A record's 1-based positions over the whole month in the evidence index's orders (`evidence::SortKey::ALL`:
/// start, end, fraction, ID); zeros when the parts were opened without them.
pub(crate) type Ranks = [i32; 4];

/// The four orders of `evidence::SortKey::cmp` over the cursor's rows `q` (a record's ID, start and end as
/// `to_record` makes them; IDs byte for byte, an open end first, fractions by value — PostgreSQL's numeric division
/// keeps at least 16 significant digits, the exact order for any fraction a record holds).
const RANKS: &str = "ARRAY[
    row_number() OVER (ORDER BY greatest(q.started_at, q.valid_from), q.record_id COLLATE \"C\"),
    row_number() OVER (ORDER BY least(q.ended_at, q.valid_to) NULLS FIRST, q.record_id COLLATE \"C\"),
    row_number() OVER (ORDER BY q.fraction_num::numeric / q.fraction_den::numeric, q.record_id COLLATE \"C\"),
    row_number() OVER (ORDER BY q.record_id COLLATE \"C\")]::int4[]";

fn literal(t: OffsetDateTime) -> String {
    format!("'{}'::timestamptz", gpuledger_core::time_fmt::rfc3339(t))
}

impl AllocationParts {
    /// Opens the cursor over `period`'s allocations; parts hold `target` records (the last fewer). With `ranked`, each record comes with its [`Ranks`] (five sorts of the month in
    /// PostgreSQL instead of one: the close's evidence index, written once at its final ranks).
    pub(crate) async fn open(tx: &mut OrgTx, period: Period, target: usize, ranked: bool) -> Result<Self, AppError> {
        let (start, end) = crate::ledger::bounds(tx, period).await?;
        let mig_parent = mig_parents(tx).await?;
        sqlx::query("SET LOCAL jit = off").execute(tx.conn()).await?;
        if ranked {
            // The month's sorts (a million rows at 10,000 GPUs) in memory rather than in temporary files.
            sqlx::query("SET LOCAL work_mem = '256MB'").execute(tx.conn()).await?;
        }
        let (joins, filter) = ALLOC_FROM.split_once("WHERE").unwrap_or((ALLOC_FROM, "true"));
        // The record's ID: `cluster/allocation`, and `#n` for the part under a later owner (`to_record` and `next`).
        let rows = format!(
            "SELECT {ALLOC_COLUMNS},
                    row_number() OVER (PARTITION BY c.name, a.allocation_id ORDER BY o.valid_from NULLS FIRST) - 1 AS n
               {joins}
              WHERE {filter}"
        );
        // Start order (the ranked cursor's start rank, so that PostgreSQL sorts once for both).
        let select = if ranked {
            format!(
                "SELECT q.*, {RANKS}
                   FROM (SELECT r.*, r.name || '/' || r.allocation_id
                                     || CASE WHEN r.n > 0 THEN '#' || r.n ELSE '' END AS record_id
                           FROM ({rows}) r) q
                  ORDER BY greatest(q.started_at, q.valid_from), q.record_id COLLATE \"C\""
            )
        } else {
            format!(
                "SELECT q.* FROM ({rows}) q
                  ORDER BY greatest(q.started_at, q.valid_from), q.name COLLATE \"C\", q.allocation_id COLLATE \"C\",
                           q.valid_from NULLS FIRST"
            )
        };
        // A cursor takes no parameters: `$1`–`$3` are replaced by the month's bounds and the organization as literals
        // (values of ours, never a caller's text).
        let cursor = if ranked { CURSOR_RANKED } else { CURSOR };
        let sql = format!("DECLARE {cursor} NO SCROLL CURSOR FOR {select}")
            .replace("$1", &literal(start))
            .replace("$2", &literal(end))
            .replace("$3", &format!("'{}'::uuid", tx.org().as_uuid()));
        sqlx::query(&sql).execute(tx.conn()).await?;
        Ok(Self { mig_parent, pending: VecDeque::new(), exhausted: false, target: target.max(1), cursor })
    }

    /// Reads the cursor's next rows into the queue (the first call waits for the month's sorts; it may run while
    /// another connection reads something else, see `close::store::in_parts`).
    pub(crate) async fn fetch(&mut self, tx: &mut OrgTx) -> Result<(), AppError> {
        use sqlx::{FromRow, Row};
        if self.exhausted {
            return Ok(());
        }
        let rows = sqlx::query(&format!("FETCH {FETCH} FROM {}", self.cursor)).fetch_all(tx.conn()).await?;
        if rows.len() < FETCH {
            self.exhausted = true;
            sqlx::query(&format!("CLOSE {}", self.cursor)).execute(tx.conn()).await?;
        }
        for row in rows {
            // The record's columns, then its `#n`.
            let alloc_row = AllocRow::from_row(&row)?;
            let n: i64 = row.try_get(14)?;
            // The ranks follow those (and the record's ID) when the cursor has them.
            let k: Ranks = match self.cursor {
                CURSOR_RANKED => {
                    let k: Vec<i32> = row.try_get(16)?;
                    k.try_into().map_err(|_| AppError::Internal("a record without its four ranks".into()))?
                }
                _ => [0; 4],
            };
            let (mut record, _, _) = to_record(alloc_row, &self.mig_parent)?;
            if n > 0 {
                record.id = format!("{}#{n}", record.id);
            }
            self.pending.push_back((record, k));
        }
        Ok(())
    }

    /// The next part, or `None` after the last (the cursor is then closed).
    pub(crate) async fn next(&mut self, tx: &mut OrgTx) -> Result<Option<Vec<AllocationRecord>>, AppError> {
        Ok(self.next_ranked(tx).await?.map(|(part, _)| part))
    }

    /// The next part with each record's [`Ranks`], or `None` after the last (the cursor is then closed).
    pub(crate) async fn next_ranked(
        &mut self,
        tx: &mut OrgTx,
    ) -> Result<Option<(Vec<AllocationRecord>, Vec<Ranks>)>, AppError> {
        let mut part: Vec<AllocationRecord> = Vec::new();
        let mut ranks: Vec<Ranks> = Vec::new();
        loop {
            while part.len() < self.target
                && let Some((r, k)) = self.pending.pop_front()
            {
                part.push(r);
                ranks.push(k);
            }
            if part.len() >= self.target {
                return Ok(Some((part, ranks)));
            }
            if self.exhausted {
                return Ok((!part.is_empty()).then_some((part, ranks)));
            }
            self.fetch(tx).await?;
        }
    }
}

/// The evidence index of a month being closed, written part by part at each record's final ranks (the ranks are the
/// table's keys and need the whole month: the close's cursor computes them, [`AllocationParts::open`]). Tried before:
/// staging in a temporary table (a distributed `INSERT … SELECT` from a local table is a `COPY`, which row-level
/// security refuses on Citus), and provisional ranks set by one `UPDATE` at the end (every row written twice through
/// six indexes: 49 s for 1.1 M records, past the statement limit).
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

    /// Writes one part's records at their ranks (`ranks[i]` is `records[i]`'s).
    pub(crate) async fn add(
        &mut self,
        tx: &mut OrgTx,
        period: Period,
        records: &[AllocationRecord],
        ranks: &[Ranks],
    ) -> Result<(), AppError> {
        if ranks.len() != records.len() || ranks.iter().flatten().any(|r| *r < 1) {
            return Err(AppError::Internal("evidence records without their ranks".into()));
        }
        for (key, n) in crate::ledger::evidence::groups(records) {
            *self.groups.entry(key).or_default() += n;
        }
        let (org, start) = (tx.org().as_uuid(), period.first_day());
        const CHUNK: usize = 10_000;
        for (chunk, ranks) in records.chunks(CHUNK).zip(ranks.chunks(CHUNK)) {
            use crate::bulk::{col, constant};
            let rank = |k: usize| ranks.iter().map(|r| r[k]).collect::<Vec<i32>>();
            let (by_start, by_end, by_fraction, by_id) = (rank(0), rank(1), rank(2), rank(3));
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
                    row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}",
                    consts: &[constant("uuid", &org), constant("date", &start)],
                    cols: &[
                        col("int", &by_start),
                        col("int", &by_end),
                        col("int", &by_fraction),
                        col("int", &by_id),
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

    /// Sets the month's counts and writes its orders other than `start` (`evidence_orders`: each order's start
    /// ranks, [`ORDER_CHUNK`] to a row) from the ranks just written — one pass over the month's records per order,
    /// in place of three unique indexes kept up record by record (migration 40).
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
        for key in super::super::evidence::SortKey::ALL {
            let Some(sort) = key.order_no() else { continue };
            let sql = format!(
                // The organization and month from the rows themselves, grouped by: on Citus an `INSERT … SELECT`
                // that fills the distribution column from its source stays on the organization's shard; filled from
                // a parameter it goes through the coordinator as a COPY, which row-level security refuses.
                "INSERT INTO evidence_orders (org_id, period, sort, chunk, start_ranks)
                 SELECT org_id, period, $3, ({col} - 1) / $4, array_agg(start_rank ORDER BY {col})
                   FROM evidence_allocations WHERE org_id = $1 AND period = $2
                  GROUP BY org_id, period, ({col} - 1) / $4",
                col = key.column()
            );
            sqlx::query(&sql).bind(org).bind(start).bind(sort).bind(order_chunk()).execute(tx.conn()).await?;
        }
        Ok(())
    }
}
