//! Group commit: agents' telemetry batches of one cluster that arrive together are stored in one transaction.
//!
//! At the agents' cadence every node sends one small batch a minute (its GPUs' windows of the last minute). Stored
//! one transaction each, most of a batch's cost was the database's work per statement — planning statements on
//! partitioned tables for their parameters, starting executors, the commit — paid again for 8 windows. Here a batch
//! made only of telemetry (GPU windows, per-process windows) is queued under its (organization, cluster); one task
//! per queue stores what has gathered while the previous group was being stored: one transaction, one pass of the
//! tiers' statements over all of them. A lone batch is stored at once (nothing waits for company), so a quiet
//! cluster sees no delay and a busy one gets bigger groups.
//!
//! What each sender sees is what it would have seen alone: its batch is admitted on its own (the claimed cluster,
//! the facts' times, the organization's daily volume), it is answered only after the group's commit, and it is
//! credited with the windows that were new of its own (a window two batches of a group both carry counts for the
//! first, as it would for the first of two transactions). If the group's transaction fails, each batch is stored
//! again alone, so one batch's failure stays its own. The work runs in a task of its own, not in a request's: a
//! sender that hangs up does not stop the others' batches.

use std::collections::{HashMap, HashSet, hash_map::Entry as Slot};

use gpuledger_core::{
    ids::{ClusterId, OrgId},
    wire::{Batch, BatchAck, FactBody, ProcessTelemetry, TelemetryRollup},
};
use tokio::sync::oneshot;

use super::measurements::{process_window_key, store_process_windows, store_telemetry_noting, window_key};
use crate::{
    db::OrgTx,
    error::AppError,
    groups::{Key, Queue, Waiting, lock},
    state::AppState,
};

/// Batches of at most this many facts join a group (a node's minute is a few dozen; a spool's backlog is stored
/// alone: it is a group by itself).
pub const JOIN_MAX_FACTS: usize = 512;
/// A group stores at most this many facts (what is left waits for the next group).
pub const GROUP_MAX_FACTS: usize = 4_096;

/// Groups of one cluster stored at once, each by a task of its own: a single task leaves the machine idle while its
/// transaction waits on the database (a round trip per statement), and the waiting batches with it; one task per
/// batch groups nothing. Measured (docs/benchmarks.md, 10,000 GPUs at node cadence, 2 cores): 1 task 24.9× real
/// time, 2 33.3×, **4 43.7×**, 8 31.4×, one per batch 31.8× with 8 requests in flight; with 32 in flight 4 tasks
/// 62.7×, 8 59.9×, one per batch 32.8×.
pub const CONCURRENT_GROUPS: usize = 4;

/// Whether `batch` is stored in its cluster's group: telemetry only, and small.
pub fn joins(batch: &Batch) -> bool {
    !batch.facts.is_empty()
        && batch.facts.len() <= JOIN_MAX_FACTS
        && batch.facts.iter().all(|f| matches!(f.body, FactBody::Telemetry(_) | FactBody::ProcessTelemetry(_)))
}

/// Stores `batch` (decoded, not yet admitted) with whatever else its cluster sends meanwhile; answers once the
/// group is committed.
pub async fn submit(state: &AppState, org: OrgId, cluster: ClusterId, batch: Batch) -> Result<BatchAck, AppError> {
    let (reply, answer) = oneshot::channel();
    let start = {
        let mut queues = lock(&state.ingest);
        let queue = queues.entry((org, cluster)).or_default();
        queue.waiting.push_back(Waiting { batch, reply });
        let start = queue.running < CONCURRENT_GROUPS;
        queue.running += usize::from(start);
        start
    };
    if start {
        tokio::spawn(drain(state.clone(), (org, cluster)));
    }
    answer.await.unwrap_or_else(|_| {
        Err(AppError::Unavailable("the server stopped storing this batch before it was stored; send it again".into()))
    })
}

/// Ends a task's part in its queue however the task ends: if it panicked, the queue's last task answers the
/// batches still waiting (their senders dropped: "send it again") instead of leaving them waiting forever, and the
/// next batch starts a new task.
struct Running<'a> {
    state: &'a AppState,
    key: Key,
    ended: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.ended {
            leave(&mut lock(&self.state.ingest), &self.key);
        }
    }
}

/// A task leaves `key`'s queue — under the lock that saw the queue empty, so a batch pushed after it starts a task
/// of its own; the queue goes with its last task.
fn leave(queues: &mut HashMap<Key, Queue>, key: &Key) {
    if let Some(queue) = queues.get_mut(key) {
        queue.running = queue.running.saturating_sub(1);
        if queue.running == 0 {
            queues.remove(key);
        }
    }
}

/// Stores the queue's groups until it is empty.
async fn drain(state: AppState, key: Key) {
    let mut running = Running { state: &state, key, ended: false };
    loop {
        let group: Vec<Waiting> = {
            let mut queues = lock(&state.ingest);
            let Some(queue) = queues.get_mut(&key) else {
                running.ended = true;
                return;
            };
            let mut facts = 0;
            let mut group = Vec::new();
            while let Some(next) = queue.waiting.front() {
                if !group.is_empty() && facts + next.batch.facts.len() > GROUP_MAX_FACTS {
                    break;
                }
                facts += next.batch.facts.len();
                group.extend(queue.waiting.pop_front());
            }
            if group.is_empty() {
                leave(&mut queues, &key);
                running.ended = true;
                return;
            }
            group
        };
        store_group(&state, key, group).await;
    }
}

async fn store_group(state: &AppState, (org, cluster): Key, group: Vec<Waiting>) {
    let opened = async {
        let mut tx = state.db.begin_org(org).await?;
        let registered = super::registered(&mut tx, org, cluster).await?;
        Ok::<_, AppError>((tx, registered))
    }
    .await;
    let (mut tx, registered) = match opened {
        Ok(opened) => opened,
        Err(error) => {
            // Each batch gets the answer it would get alone (a cluster deleted meanwhile: 403 each).
            tracing::debug!(%error, batches = group.len(), "telemetry group not opened; storing each alone");
            for w in group {
                let _ = w.reply.send(super::store_alone(state, org, cluster, &w.batch, false).await);
            }
            return;
        }
    };
    let mut admitted = Vec::with_capacity(group.len());
    for w in group {
        match super::admit(state, org, &w.batch, &registered, false).await {
            Ok(()) => admitted.push(w),
            Err(refused) => {
                let _ = w.reply.send(Err(refused));
            }
        }
    }
    if admitted.is_empty() {
        return;
    }
    let stored = match together(&mut tx, org, cluster, &admitted).await {
        Ok(acks) => tx.commit().await.map(|()| acks).map_err(AppError::from),
        Err(error) => {
            // Its locks go before any batch is stored again (they would wait on them).
            if let Err(e) = tx.rollback().await {
                tracing::warn!(error = %e, "a failed telemetry group was not rolled back cleanly");
            }
            Err(error)
        }
    };
    match stored {
        Ok(acks) => {
            crate::metrics::count_ingest_group(org.as_uuid(), admitted.len());
            for (w, ack) in admitted.into_iter().zip(acks) {
                let _ = w.reply.send(Ok(ack));
            }
        }
        Err(error) if admitted.len() == 1 => {
            if let Some(w) = admitted.pop() {
                let _ = w.reply.send(Err(error));
            }
        }
        Err(error) => {
            tracing::warn!(%error, batches = admitted.len(), "a group of telemetry batches failed; storing each alone");
            for w in admitted {
                // Admitted once already: the daily volume is not counted again.
                let _ = w.reply.send(super::store_alone(state, org, cluster, &w.batch, true).await);
            }
        }
    }
}

/// Stores the admitted batches' facts in `tx` and the agents' contacts; each batch's answer.
async fn together(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    group: &[Waiting],
) -> Result<Vec<BatchAck>, AppError> {
    let facts = || group.iter().flat_map(|w| w.batch.facts.iter());
    let rollups: Vec<&TelemetryRollup> = facts()
        .filter_map(|f| match &f.body {
            FactBody::Telemetry(t) => Some(t),
            _ => None,
        })
        .collect();
    let processes: Vec<&ProcessTelemetry> = facts()
        .filter_map(|f| match &f.body {
            FactBody::ProcessTelemetry(t) => Some(t),
            _ => None,
        })
        .collect();
    let mut new_windows = HashSet::new();
    if !rollups.is_empty() {
        store_telemetry_noting(tx, cluster, &rollups, Some(&mut new_windows)).await?;
    }
    let mut new_processes = HashSet::new();
    if !processes.is_empty() {
        store_process_windows(tx, org, cluster, &processes, Some(&mut new_processes)).await?;
    }
    // One contact per agent: its latest batch's (a statement may not update one row twice).
    let mut contacts = Vec::with_capacity(group.len());
    let mut agent_at: HashMap<(&str, String), usize> = HashMap::new();
    for w in group {
        let contact = super::contact(&w.batch);
        match agent_at.entry((contact.mode, contact.node.clone())) {
            Slot::Occupied(at) => contacts[*at.get()] = contact,
            Slot::Vacant(at) => {
                at.insert(contacts.len());
                contacts.push(contact);
            }
        }
    }
    super::store::upsert_agent_contacts(tx, cluster, &contacts).await?;
    // Each new window is credited once, to the first batch that carries it.
    let mut acks = Vec::with_capacity(group.len());
    for w in group {
        let mut stored = 0u64;
        for f in &w.batch.facts {
            let new = match &f.body {
                FactBody::Telemetry(t) => new_windows.remove(&window_key(t)?),
                FactBody::ProcessTelemetry(p) => new_processes.remove(&process_window_key(p)),
                _ => false,
            };
            stored += u64::from(new);
        }
        acks.push(BatchAck { received: w.batch.facts.len() as u64, stored, flagged: Vec::new() });
    }
    Ok(acks)
}
