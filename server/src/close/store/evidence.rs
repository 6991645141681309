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

/// Where the close's evidence index goes: its own transaction (no connection to spare), or a writer beside it.
pub(super) enum EvidenceSink {
    /// In the close's transaction, part by part.
    Inline(EvidenceStage),
    /// A task writing on the second connection.
    Beside { parts: mpsc::Sender<Msg>, done: tokio::task::JoinHandle<Result<(OrgTx, std::time::Duration), AppError>> },
}

/// The index after the month's last part: to finish in the close's transaction, or written beside it and waiting
/// to commit (`None`: its writer failed; the first reader builds it from the bundle).
pub(super) enum EvidenceDone {
    Inline(EvidenceStage),
    Beside(Option<OrgTx>),
}

impl EvidenceSink {
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
        }
    }

    /// After the last part: the writer's index complete and ready to commit.
    pub(super) async fn finish(self, period: Period) -> EvidenceDone {
        match self {
            EvidenceSink::Inline(stage) => EvidenceDone::Inline(stage),
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
