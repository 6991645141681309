//! Ingest: agents post batches of facts; the server stores them idempotently and maintains the derived state
//! (allocation intervals with their resolved fractions, namespace ownership history, node and device history,
//! telemetry rollups, service usage, data-quality findings). The answer is sent only after the transaction commits.
//!
//! Order independence: every fact is stored under its deterministic event ID (`ON CONFLICT DO NOTHING`), and an
//! allocation's interval is recomputed from *all* stored facts about that allocation, so the same facts in any
//! order, any number of times, give the same state.
//!
//! This module holds the route and the storing of a batch; `measurements` stores telemetry rollups, endpoint
//! totals and service usage, `intervals` derives allocation intervals (and recomputes them when the inventory or
//! a naming rule changes), and `history` keeps namespace, node and device history.

use std::collections::{BTreeSet, HashMap};

use axum::{Json, Router, extract::State, routing::post};
use gpuledger_core::{
    ids::{ClusterId, OrgId},
    wire::{
        Batch, BatchAck, EndpointTotalsFact, Fact, FactBody, ProcessTelemetry, ServiceUsageFact, TelemetryRollup,
        TrainingProgressFact,
    },
};
use time::OffsetDateTime;

use crate::{auth, db::OrgTx, error::AppError, state::AppState};

mod decode;
mod gaps;
mod group;
mod history;
mod intervals;
mod measurements;
mod store;

pub use crate::limits::{DEFAULT_MAX_DECODED_BYTES, IngestLimits};
pub use decode::{Window, decode, validate};
pub use group::CONCURRENT_GROUPS;
use history::{apply_device, apply_namespace, apply_node};
pub use intervals::normalize_model;
use intervals::{Assigned, assign_devices, recompute_intervals};
pub(crate) use intervals::{reapply_namespaces_naming, recompute_for_inventory, recompute_soft_shares};
use measurements::{store_endpoint_totals, store_process_windows, store_service_usage, store_telemetry};

/// What the handler takes, for the API document (the batch is read by the handler itself: `Batch`).
pub(crate) fn inputs() -> Vec<crate::describe::Inputs> {
    vec![crate::describe::inputs("post", "/api/v1/ingest/batches", post_batch)]
}

/// `POST /api/v1/ingest/batches`.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/ingest/batches", post(post_batch))
}

/// The credential is checked before the body is read: a caller that may not send facts is refused (403) whatever
/// it sends, and a body over the limit is a problem document (413), like every API error.
async fn post_batch(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Json<gpuledger_api::ingest::BatchAck>, AppError> {
    let headers = request.headers().clone();
    let principal = auth::agents::authenticate_agent(&state.db, &headers).await?;
    let Some(cluster) = principal.agent_cluster() else {
        return Err(AppError::Forbidden("only agent tokens may send facts".into()));
    };
    let body = crate::http::body_bytes(request, &state).await?;
    let batch = decode(&headers, &body, &state.limits.ingest)?;
    drop(body);
    let ack = if group::joins(&batch) {
        group::submit(&state, principal.org, cluster, batch).await?
    } else {
        store_alone(&state, principal.org, cluster, &batch, false).await?
    };
    // The agents read core's ack; the contract's mirrors it field for field.
    let flagged = ack
        .flagged
        .into_iter()
        .map(|f| gpuledger_api::ingest::FlaggedFact { event_id: f.event_id, reason: f.reason })
        .collect();
    Ok(Json(gpuledger_api::ingest::BatchAck { received: ack.received, stored: ack.stored, flagged }))
}

/// The registered cluster a credential names: (name, registered at, the organization's daily ingest limit).
type Registered = (String, OffsetDateTime, Option<i64>);

async fn registered(tx: &mut OrgTx, org: OrgId, cluster: ClusterId) -> Result<Registered, AppError> {
    store::registered_cluster(tx, org, cluster)
        .await?
        .ok_or_else(|| AppError::Forbidden("this credential's cluster is not registered".into()))
}

/// Admits a batch before anything of it is stored: the cluster it claims, its facts' times, and the organization's
/// daily volume (counted here, unless `counted` already).
async fn admit(
    state: &AppState,
    org: OrgId,
    batch: &Batch,
    (name, registered_at, daily_limit): &Registered,
    counted: bool,
) -> Result<(), AppError> {
    if let Some(claimed) = &batch.cluster
        && name != claimed
    {
        return Err(AppError::Forbidden(format!("this credential belongs to cluster {name:?}, not {claimed:?}")));
    }
    let window = Window { now: OffsetDateTime::now_utc(), floor: *registered_at - state.limits.backfill };
    validate(batch, window)?;
    if let Some(limit) = daily_limit
        && !counted
    {
        check_daily_limit(state, org, batch.facts.len(), *limit).await?;
    }
    Ok(())
}

/// Admits and stores one batch in its own transaction; answers after the commit.
async fn store_alone(
    state: &AppState,
    org: OrgId,
    cluster: ClusterId,
    batch: &Batch,
    counted: bool,
) -> Result<BatchAck, AppError> {
    let mut tx = state.db.begin_org(org).await?;
    let registered = registered(&mut tx, org, cluster).await?;
    admit(state, org, batch, &registered, counted).await?;
    let ack = store(&mut tx, org, cluster, &batch.facts).await?;
    store::upsert_agent_contacts(&mut tx, cluster, &[contact(batch)]).await?;
    tx.commit().await?;
    Ok(ack)
}

/// Counts a batch against the organization's daily ingest volume (set by the operator, `org limits`); over it, the
/// batch is refused with 429 naming the limit (agents keep it in their spool and send it again later).
async fn check_daily_limit(state: &AppState, org: OrgId, facts: usize, limit: i64) -> Result<(), AppError> {
    let facts = i64::try_from(facts).unwrap_or(i64::MAX);
    match crate::orgs::count_ingest(&state.db, org, facts, limit).await? {
        crate::orgs::IngestCount::Accepted(_) => Ok(()),
        crate::orgs::IngestCount::Refused(today) => {
            let now = OffsetDateTime::now_utc();
            let midnight = now.date().next_day().map(|d| d.midnight().assume_utc()).unwrap_or(now);
            let retry_after = u64::try_from((midnight - now).whole_seconds()).unwrap_or(60).max(1);
            Err(AppError::LimitReached {
                detail: format!(
                    "ingest limit reached: this organization may send {limit} facts per UTC day \
                     (ingest_facts_per_day, set by its operator); {today} were received today and this batch of \
                     {facts} would exceed it. Nothing of the batch was stored; it is accepted again after midnight \
                     UTC or once the operator raises the limit"
                ),
                retry_after,
            })
        }
    }
}

/// The agent's contact a batch makes: version, batch size and lag (now minus the newest observation).
fn contact(batch: &Batch) -> store::AgentContact {
    let mode = if batch.agent.mode == "node" { "node" } else { "cluster" };
    let node = if mode == "node" { batch.agent.node.clone().unwrap_or_default() } else { String::new() };
    let newest = batch.facts.iter().map(|f| f.observed_at).max();
    let lag = newest.map(|t| (OffsetDateTime::now_utc() - t).whole_seconds().max(0));
    let spool = batch.agent.spool;
    let big = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    store::AgentContact {
        mode,
        node,
        version: batch.agent.version.chars().take(100).collect::<String>(),
        last_batch_facts: i32::try_from(batch.facts.len()).unwrap_or(i32::MAX),
        lag_seconds: lag,
        // What is still waiting once this batch is stored; an agent that does not report its spool leaves NULLs.
        spool_pending_facts: spool.map(|s| big(s.pending_facts.saturating_sub(batch.facts.len() as u64))),
        spool_pending_bytes: spool.map(|s| big(s.pending_bytes)),
        spool_dropped_facts: spool.map(|s| big(s.dropped_facts)),
        // Older agents report no fill level (0): unknown, not empty.
        spool_disk_bytes: spool.filter(|s| s.max_bytes > 0).map(|s| big(s.disk_bytes)),
        spool_max_bytes: spool.filter(|s| s.max_bytes > 0).map(|s| big(s.max_bytes)),
    }
}

/// What a fact is about: the key under which derived state is recomputed.
fn subject(body: &FactBody) -> String {
    match body {
        FactBody::AllocationStarted(s) => s.allocation_id.clone(),
        FactBody::AllocationEnded(e) => e.allocation_id.clone(),
        FactBody::AllocationVanished(v) => v.allocation_id.clone(),
        FactBody::NamespaceObserved(n) => n.namespace_uid.to_string(),
        FactBody::NodeObserved(n) => n.name.clone(),
        FactBody::DeviceObserved(d) => d.gpu_uuid.clone(),
        FactBody::DeviceAssigned(a) => match a.pod_uid {
            Some(uid) => format!("{uid}/{}", a.container),
            None => format!(
                "{}/{}/{}",
                a.pod_namespace.as_deref().unwrap_or("-"),
                a.pod_name.as_deref().unwrap_or("-"),
                a.container
            ),
        },
        FactBody::Telemetry(t) => t.gpu_uuid.clone(),
        FactBody::ProcessTelemetry(t) => format!("processes/{}", t.gpu_uuid),
        FactBody::Gap(_) => "gap".into(),
        // The gap it accounts for: found by it when the gap arrives later.
        FactBody::GapRecovered(r) => r.gap.clone(),
        FactBody::QuotaObserved(q) => format!("clusterqueue/{}", q.uid),
        FactBody::ServiceUsage(u) => subject_of_usage(u),
        FactBody::EndpointTotals(t) => format!("endpoint/{}/{}/{}", t.endpoint, t.pod, t.model),
        FactBody::TrainingProgress(t) => format!("training/{}/{}", t.namespace, t.workload),
        FactBody::DeviceFault(f) => format!("fault/{}", f.gpu_uuid),
    }
}

/// `service/<endpoint>/<tenant>/<model>`.
fn subject_of_usage(u: &ServiceUsageFact) -> String {
    format!("service/{}/{}/{}", u.endpoint, u.tenant, u.model)
}

fn occurred_at(fact: &Fact) -> OffsetDateTime {
    match &fact.body {
        FactBody::AllocationStarted(s) => s.started_at,
        FactBody::AllocationEnded(e) => e.ended_at,
        FactBody::AllocationVanished(v) => v.last_seen_at,
        FactBody::NamespaceObserved(n) => n.labels_since,
        FactBody::Telemetry(t) => t.window_start,
        FactBody::ProcessTelemetry(t) => t.window_start,
        FactBody::Gap(g) => g.from,
        FactBody::QuotaObserved(q) => q.since,
        FactBody::ServiceUsage(u) => u.window_start,
        FactBody::EndpointTotals(t) => t.window_start,
        FactBody::TrainingProgress(t) => t.reported_at,
        FactBody::DeviceFault(f) => f.occurred_at,
        _ => fact.observed_at,
    }
}

/// Stores a validated batch in `tx` and updates derived state. Idempotent.
pub async fn store(tx: &mut OrgTx, org: OrgId, cluster: ClusterId, facts: &[Fact]) -> Result<BatchAck, AppError> {
    let (telemetry, other): (Vec<&Fact>, Vec<&Fact>) =
        facts.iter().partition(|f| matches!(f.body, FactBody::Telemetry(_) | FactBody::ProcessTelemetry(_)));
    let mut stored = 0u64;
    let mut flagged = Vec::new();
    // Matching allocations with device assignments takes the cluster's turn (intervals::lock_assignments), before
    // this batch writes anything: taken later, two batches could each hold what the other waits for.
    if other.iter().any(|f| {
        matches!(
            f.body,
            FactBody::AllocationStarted(_)
                | FactBody::AllocationEnded(_)
                | FactBody::AllocationVanished(_)
                | FactBody::DeviceAssigned(_)
        )
    }) {
        intervals::lock_assignments(tx, cluster).await?;
    }

    // 1. The evidence record: every non-telemetry fact as delivered, once.
    let new_events: Vec<(String, String, String)> = if other.is_empty() {
        Vec::new()
    } else {
        let mut ids = Vec::with_capacity(other.len());
        let mut kinds = Vec::with_capacity(other.len());
        let mut subjects = Vec::with_capacity(other.len());
        let mut times = Vec::with_capacity(other.len());
        let mut payloads = Vec::with_capacity(other.len());
        for f in &other {
            ids.push(f.event_id.clone());
            kinds.push(f.body.kind().to_string());
            subjects.push(subject(&f.body));
            times.push(occurred_at(f));
            payloads.push(serde_json::to_value(f).map_err(|e| AppError::Internal(e.to_string()))?);
        }
        let columns = store::measurements::EventColumns {
            ids: &ids,
            kinds: &kinds,
            subjects: &subjects,
            times: &times,
            payloads: &payloads,
        };
        store::measurements::insert_events(tx, org.as_uuid(), cluster.as_uuid(), &columns).await?
    };
    stored += new_events.len() as u64;

    // 2. Telemetry goes straight to its partitioned table (idempotent by its key).
    if !telemetry.is_empty() {
        let rollups: Vec<&TelemetryRollup> = telemetry
            .iter()
            .filter_map(|f| match &f.body {
                FactBody::Telemetry(t) => Some(t),
                _ => None,
            })
            .collect();
        stored += store_telemetry(tx, cluster, &rollups).await?;
        let windows: Vec<&ProcessTelemetry> = telemetry
            .iter()
            .filter_map(|f| match &f.body {
                FactBody::ProcessTelemetry(t) => Some(t),
                _ => None,
            })
            .collect();
        stored += store_process_windows(tx, org, cluster, &windows, None).await?;
    }

    // 2b. Service usage: its own table, idempotent by its key (the events above already count it as stored).
    let usage: Vec<(&str, &ServiceUsageFact)> = other
        .iter()
        .filter_map(|f| match &f.body {
            FactBody::ServiceUsage(u) => Some((f.event_id.as_str(), u)),
            _ => None,
        })
        .collect();
    if !usage.is_empty() {
        store_service_usage(tx, org, cluster, &usage, &mut flagged).await?;
    }

    // 2c. Model servers' own totals: their own table, idempotent by its key.
    let totals: Vec<&EndpointTotalsFact> = other
        .iter()
        .filter_map(|f| match &f.body {
            FactBody::EndpointTotals(t) => Some(t),
            _ => None,
        })
        .collect();
    if !totals.is_empty() {
        store_endpoint_totals(tx, org, cluster, &totals).await?;
    }

    // 2d. Training progress from pods' annotations: the training API's table, the event ID as record ID.
    let progress: Vec<(&str, &TrainingProgressFact)> = other
        .iter()
        .filter_map(|f| match &f.body {
            FactBody::TrainingProgress(t) => Some((f.event_id.as_str(), t)),
            _ => None,
        })
        .collect();
    if !progress.is_empty() {
        crate::training::store_facts(tx, org, cluster, &progress).await?;
    }

    // 3. Derived state, for the subjects that received new facts.
    let by_id: HashMap<&str, &Fact> = other.iter().map(|f| (f.event_id.as_str(), *f)).collect();
    let mut allocations = BTreeSet::new();
    for (event_id, kind, subject) in &new_events {
        let Some(fact) = by_id.get(event_id.as_str()) else {
            continue;
        };
        match (&fact.body, kind.as_str()) {
            (_, "allocation_started" | "allocation_ended" | "allocation_vanished") => {
                allocations.insert(subject.clone());
            }
            (FactBody::NamespaceObserved(n), _) => {
                apply_namespace(tx, org, cluster, n, &fact.event_id, &mut flagged).await?;
            }
            (FactBody::NodeObserved(n), _) => apply_node(tx, org, cluster, n, fact.observed_at).await?,
            (FactBody::DeviceObserved(d), _) => apply_device(tx, org, cluster, d, fact.observed_at).await?,
            (FactBody::Gap(g), _) => gaps::store_gap(tx, org, cluster, &fact.event_id, g).await?,
            (FactBody::GapRecovered(r), _) => gaps::apply_recovery(tx, org, cluster, r, fact.observed_at).await?,
            _ => {}
        }
    }
    if !allocations.is_empty() {
        let ids: Vec<String> = allocations.into_iter().collect();
        recompute_intervals(tx, org, cluster, &ids, &mut flagged).await?;
    }
    // Devices kubelet assigned: onto the intervals they belong to (whichever of the two facts came first).
    let assigned: Vec<Assigned> = new_events
        .iter()
        .filter_map(|(event_id, _, _)| by_id.get(event_id.as_str()))
        .filter_map(|f| match &f.body {
            // Ordered by when the fact was observed, as the stored events are (`occurred_at`).
            FactBody::DeviceAssigned(a) => Some(Assigned {
                pod_uid: a.pod_uid,
                namespace: a.pod_namespace.clone().unwrap_or_default(),
                pod: a.pod_name.clone().unwrap_or_default(),
                container: a.container.clone(),
                resource: a.resource.clone(),
                devices: a.device_ids.clone(),
                at: f.observed_at,
            }),
            _ => None,
        })
        .collect();
    if !assigned.is_empty() {
        assign_devices(tx, cluster, &assigned).await?;
    }
    Ok(BatchAck { received: facts.len() as u64, stored, flagged })
}
