//! The close's evidence index written beside it: on the close's second connection (the one that read the month's
//! energy), in a transaction of its own, while the close goes on reading, pricing and bundling the next parts.
//! Written in the close's own transaction, the index's 1.1 M rows and six indexes at 10,000 GPUs took 40 s of the
//! close's 94 (docs/benchmarks.md, run I), one statement after another with everything else.
//!
//! The index commits right after the close (still within the close's turn of month-sized work, which a reader
//! that finds a closed month without its index waits for before building it from the bundle): a reader never sees
//! an index of a month that did not close. Should the index fail, the close stands and the first reader builds the
//! index from the bundle (`ledger::evidence::build_from_bundle`), as for a month closed before indexes existed.

use gpuledger_core::{Period, ledger::AllocationRecord};
use tokio::sync::mpsc;

use crate::{
    db::OrgTx,
    error::AppError,
    ledger::store::parts::{EvidenceStage, Ranks},
};

/// Parts queued for the writer at most (the close waits beyond that: memory stays a few parts).
const QUEUED_PARTS: usize = 2;

/// What the close hands its evidence writer.
pub(super) enum Msg {
    Part(Vec<AllocationRecord>, Vec<Ranks>),
    Finish,
}

/// Where the close's evidence index goes: its own transaction (no connection to spare), a writer beside it fed
/// with the close's parts, or one `INSERT … SELECT` beside it that reads the month itself.
pub(super) enum EvidenceSink {
    /// In the close's transaction, part by part.
    Inline(EvidenceStage),
    /// A task writing on the second connection.
    Beside { parts: mpsc::Sender<Msg>, done: tokio::task::JoinHandle<Result<(OrgTx, std::time::Duration), AppError>> },
    /// A task whose transaction reads the month in SQL, at the snapshot of the close's cursor (`in_sql`).
    InSql { done: Aborting<Result<(OrgTx, i64, std::time::Duration), AppError>> },
}

/// A task stopped when its handle is dropped: a close that fails or whose request goes away stops the statement
/// beside it at once (rolled back), instead of leaving it to run on for the month.
pub(super) struct Aborting<T>(Option<tokio::task::JoinHandle<T>>);

impl<T> Aborting<T> {
    async fn join(mut self) -> Result<T, String> {
        match self.0.take() {
            Some(handle) => handle.await.map_err(|e| e.to_string()),
            None => Err("joined twice".into()),
        }
    }
}

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        if let Some(handle) = &self.0 {
            handle.abort();
        }
    }
}

/// How long the close waits for each extra connection before it goes on without.
const SPARE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The index after the month's last part: to finish in the close's transaction, or written beside it and waiting
/// to commit (`None`: its writer failed; the first reader builds it from the bundle).
pub(super) enum EvidenceDone {
    Inline(EvidenceStage),
    Beside(Option<OrgTx>),
}

/// A connection of the pool within [`SPARE_WAIT`], or none (a failure logged).
async fn spare<T>(period: Period, f: impl Future<Output = Result<T, crate::db::DbError>>) -> Option<T> {
    match tokio::time::timeout(SPARE_WAIT, f).await {
        Ok(Ok(t)) => Some(t),
        Ok(Err(e)) => {
            tracing::warn!(period = %period, error = %e, "close: no connection for the evidence index beside it");
            None
        }
        Err(_) => None,
    }
}

impl EvidenceSink {
    /// Starts the index of `period` in PostgreSQL beside the close (`EvidenceStage::fill_from_month`): the month's
    /// records are made, ranked and written by one statement while the close reads the same month from the returned
    /// transaction, which sees the writer's exported snapshot — so both read exactly the same rows, whatever ingest
    /// commits meanwhile. The close then reads its parts from that transaction, without ranks (two sorts instead of
    /// six), and no record passes to the writer. `None` on a Citus coordinator (an exported snapshot does not reach
    /// the workers) or when the pool has no two connections to spare within [`SPARE_WAIT`]: the close then ranks
    /// and hands its parts to a writer ([`EvidenceSink::begin`]).
    pub(super) async fn in_sql(db: &crate::db::Database, tx: &OrgTx, period: Period) -> Option<(Self, OrgTx)> {
        if db.distributed() {
            return None;
        }
        let org = tx.org();
        let (mut wtx, snapshot) = spare(period, db.begin_org_exporting(org)).await?;
        let mut reader = spare(period, db.begin_org_at_snapshot(org, &snapshot)).await?;
        // The close's statement limit, on both.
        if let Err(e) = async {
            wtx.allow_long_statements().await?;
            reader.allow_long_statements().await
        }
        .await
        {
            tracing::warn!(period = %period, error = %e, "close: the evidence index's connections refused their settings");
            return None;
        }
        let done = tokio::spawn(async move {
            let t = std::time::Instant::now();
            let mut stage = EvidenceStage::begin(&mut wtx, period, "close").await?;
            let written = stage.fill_from_month(&mut wtx, period).await?;
            stage.finish(&mut wtx, period).await?;
            Ok((wtx, written, t.elapsed()))
        });
        Some((EvidenceSink::InSql { done: Aborting(Some(done)) }, reader))
    }

    /// Starts the index of `period`: in `tx` (the close's), or on `beside` when there is a second connection.
    pub(super) async fn begin(tx: &mut OrgTx, beside: Option<OrgTx>, period: Period) -> Result<Self, AppError> {
        let Some(mut etx) = beside else {
            return Ok(EvidenceSink::Inline(EvidenceStage::begin(tx, period, "close").await?));
        };
        let mut stage = EvidenceStage::begin(&mut etx, period, "close").await?;
        let (parts, mut queue) = mpsc::channel::<Msg>(QUEUED_PARTS);
        let done = tokio::spawn(async move {
            let mut busy = std::time::Duration::ZERO;
            loop {
                match queue.recv().await {
                    Some(Msg::Part(records, ranks)) => {
                        let t = std::time::Instant::now();
                        stage.add(&mut etx, period, &records, &ranks).await?;
                        busy += t.elapsed();
                    }
                    Some(Msg::Finish) => {
                        let t = std::time::Instant::now();
                        stage.finish(&mut etx, period).await?;
                        busy += t.elapsed();
                        return Ok((etx, busy));
                    }
                    // The close gave up (an error, or its request went away): nothing is committed.
                    None => return Err(AppError::Internal("the close ended before its evidence index".into())),
                }
            }
        });
        Ok(EvidenceSink::Beside { parts, done })
    }

    /// Adds a part's records at their ranks (handing them to the writer, or writing them in `tx`).
    pub(super) async fn add(
        &mut self,
        tx: &mut OrgTx,
        period: Period,
        records: Vec<AllocationRecord>,
        ranks: Vec<Ranks>,
    ) -> Result<(), AppError> {
        match self {
            EvidenceSink::Inline(stage) => stage.add(tx, period, &records, &ranks).await,
            EvidenceSink::Beside { parts, .. } => {
                // A writer that stopped has its error waiting in `finish`; the parts after it are dropped here.
                let _ = parts.send(Msg::Part(records, ranks)).await;
                Ok(())
            }
            // The statement beside the close reads the month itself.
            EvidenceSink::InSql { .. } => Ok(()),
        }
    }

    /// After the last part (`records` the month's, as the close read them): the writer's index complete and ready
    /// to commit.
    pub(super) async fn finish(self, period: Period, records: usize) -> EvidenceDone {
        match self {
            EvidenceSink::Inline(stage) => EvidenceDone::Inline(stage),
            EvidenceSink::InSql { done } => match done.join().await {
                Ok(Ok((etx, written, took))) if usize::try_from(written).ok() == Some(records) => {
                    tracing::info!(period = %period, ms = took.as_millis() as u64, records = written,
                                   "close: evidence index written beside it, in SQL");
                    EvidenceDone::Beside(Some(etx))
                }
                // The same snapshot gives the same rows; a difference would be a record made otherwise in SQL than
                // in the server. The month then gets the index built from its bundle.
                Ok(Ok((_, written, _))) => {
                    tracing::warn!(period = %period, written, records,
                                   "close: evidence index in SQL does not count the close's records; not kept (the first reader builds it from the bundle)");
                    EvidenceDone::Beside(None)
                }
                Ok(Err(e)) => {
                    tracing::warn!(period = %period, error = %e, "close: evidence index not written (the first reader builds it from the bundle)");
                    EvidenceDone::Beside(None)
                }
                Err(e) => {
                    tracing::warn!(period = %period, error = %e, "close: evidence index writer stopped (the first reader builds it from the bundle)");
                    EvidenceDone::Beside(None)
                }
            },
            EvidenceSink::Beside { parts, done } => {
                let _ = parts.send(Msg::Finish).await;
                drop(parts);
                match done.await {
                    Ok(Ok((etx, busy))) => {
                        tracing::info!(period = %period, ms = busy.as_millis() as u64, "close: evidence index written beside it");
                        EvidenceDone::Beside(Some(etx))
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(period = %period, error = %e, "close: evidence index not written (the first reader builds it from the bundle)");
                        EvidenceDone::Beside(None)
                    }
                    Err(e) => {
                        tracing::warn!(period = %period, error = %e, "close: evidence index writer stopped (the first reader builds it from the bundle)");
                        EvidenceDone::Beside(None)
                    }
                }
            }
        }
    }
}

impl EvidenceDone {
    /// Before the close commits: an index written in its transaction gets its counts.
    pub(super) async fn before_commit(&mut self, tx: &mut OrgTx, period: Period) -> Result<(), AppError> {
        if matches!(self, EvidenceDone::Inline(_))
            && let EvidenceDone::Inline(stage) = std::mem::replace(self, EvidenceDone::Beside(None))
        {
            stage.finish(tx, period).await?;
        }
        Ok(())
    }

    /// After the close committed: the index written beside it commits too (a failure leaves the month to the
    /// bundle-built index, logged).
    pub(super) async fn after_commit(self, period: Period) {
        if let EvidenceDone::Beside(Some(etx)) = self
            && let Err(e) = etx.commit_quiet().await
        {
            tracing::warn!(period = %period, error = %e, "close: evidence index not committed (the first reader builds it from the bundle)");
        }
    }
}
