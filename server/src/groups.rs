//! The queues of ingest's group commit (the ingest feature's `group` module: agents' telemetry batches of one cluster
//! stored together), held in the shared state. Here, below the features, so the state holds them without importing
//! ingest; the storing itself is ingest's.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Mutex, MutexGuard, PoisonError},
};

use gpuledger_core::{
    ids::{ClusterId, OrgId},
    wire::{Batch, BatchAck},
};
use tokio::sync::oneshot;

use crate::error::AppError;

/// A queue's key: the batches' organization and cluster.
pub(crate) type Key = (OrgId, ClusterId);

/// The queues of batches waiting for their cluster's group. A queue exists while one of its tasks runs.
#[derive(Default)]
pub struct Groups {
    queues: Mutex<HashMap<Key, Queue>>,
}

/// One cluster's queue.
#[derive(Default)]
pub(crate) struct Queue {
    /// Batches not taken by a task yet, in arrival order.
    pub(crate) waiting: VecDeque<Waiting>,
    /// Tasks storing this queue's groups.
    pub(crate) running: usize,
}

/// A batch waiting for its group, and where its answer goes.
pub(crate) struct Waiting {
    /// The batch, decoded (not yet admitted).
    pub(crate) batch: Batch,
    /// Its sender's answer.
    pub(crate) reply: oneshot::Sender<Result<BatchAck, AppError>>,
}

/// The queues, locked.
pub(crate) fn lock(groups: &Groups) -> MutexGuard<'_, HashMap<Key, Queue>> {
    // Nothing is left half-done under the lock (a push, a pop, a removal): a poisoned lock's map is whole.
    groups.queues.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Groups {
    /// Batches waiting for their group (all clusters).
    pub fn waiting(&self) -> usize {
        lock(self).values().map(|q| q.waiting.len()).sum()
    }

    /// Tasks storing groups (all clusters).
    pub fn running(&self) -> usize {
        lock(self).values().map(|q| q.running).sum()
    }
}
