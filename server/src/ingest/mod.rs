//! Ingest: agents post batches of facts; the server stores them idempotently and maintains the derived state
//! (allocation intervals with their resolved fractions, namespace ownership history, node and device history,
//! telemetry rollups, service usage, data-quality findings). The answer is sent only after the transaction commits.
//!
//! Order independence: every fact is stored under its deterministic event ID (`ON CONFLICT DO NOTHING`), and an
//! allocation's interval is recomputed from *all* stored facts about that allocation, so the same facts in any
//! order, any number of times, give the same state.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::{Json, Router, body::Bytes, extract::State, http::HeaderMap, routing::post};
use gpuledger_core::{
    confidence::Confidence,
    fraction::Fraction,
    ids::{ClusterId, OrgId},
    interval::Validity,
    sharing::{Inventory, ProfileFraction, ProfileKind, SharingMode, resolve_fraction},
    wire::{
        AllocationStart, Batch, BatchAck, EndpointTotalsFact, Fact, FactBody, FlaggedFact, ServiceUsageFact,
        TelemetryRollup, TrainingProgressFact,
    },
};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    app::AppState,
    auth,
    db::{DbError, OrgTx},
    error::AppError,
};

mod decode;

pub use decode::{DEFAULT_MAX_DECODED_BYTES, IngestLimits, Window, decode, validate};

/// `POST /api/v1/ingest/batches`.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/ingest/batches", post(post_batch))
}

async fn post_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<BatchAck>, AppError> {
    let principal = auth::authenticate(&state.db, &headers).await?;
    let Some(cluster) = principal.agent_cluster() else {
        return Err(AppError::Forbidden("only agent tokens may send facts".into()));
    };
    let batch = decode(&headers, &body, &state.limits.ingest)?;
    drop(body);
    let mut tx = state.db.begin_org(principal.org).await?;
    let registered: Option<(String, OffsetDateTime)> =
        sqlx::query_as("SELECT name, created_at FROM clusters WHERE cluster_id = $1 AND org_id = $2")
            .bind(cluster.as_uuid())
            .bind(principal.org.as_uuid())
            .fetch_optional(tx.conn())
            .await?;
    let Some((name, registered_at)) = registered else {
        return Err(AppError::Forbidden("this credential's cluster is not registered".into()));
    };
    if let Some(claimed) = &batch.cluster
        && name != *claimed
    {
        return Err(AppError::Forbidden(format!("this credential belongs to cluster {name:?}, not {claimed:?}")));
    }
    let window = Window { now: OffsetDateTime::now_utc(), floor: registered_at - state.limits.backfill };
    validate(&batch, window)?;
    let ack = store(&mut tx, principal.org, cluster, &batch.facts).await?;
    record_contact(&mut tx, cluster, &batch).await?;
    tx.commit().await?;
    Ok(Json(ack))
}

/// Remembers the agent's contact: version, batch size and lag (now minus the newest observation).
async fn record_contact(tx: &mut OrgTx, cluster: ClusterId, batch: &Batch) -> Result<(), AppError> {
    let mode = if batch.agent.mode == "node" { "node" } else { "cluster" };
    let node = if mode == "node" { batch.agent.node.clone().unwrap_or_default() } else { String::new() };
    let newest = batch.facts.iter().map(|f| f.observed_at).max();
    let lag = newest.map(|t| (OffsetDateTime::now_utc() - t).whole_seconds().max(0));
    let org = tx.org().as_uuid();
    let spool = batch.agent.spool;
    let big = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO agent_contacts (org_id, cluster_id, mode, node, version, last_batch_facts, lag_seconds,
                spool_pending_facts, spool_pending_bytes, spool_dropped_facts)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (org_id, cluster_id, mode, node) DO UPDATE
            SET version = EXCLUDED.version, last_seen_at = now(), last_batch_facts = EXCLUDED.last_batch_facts,
                lag_seconds = EXCLUDED.lag_seconds, spool_pending_facts = EXCLUDED.spool_pending_facts,
                spool_pending_bytes = EXCLUDED.spool_pending_bytes, spool_dropped_facts = EXCLUDED.spool_dropped_facts",
    )
    .bind(org)
    .bind(cluster.as_uuid())
    .bind(mode)
    .bind(node)
    .bind(batch.agent.version.chars().take(100).collect::<String>())
    .bind(i32::try_from(batch.facts.len()).unwrap_or(i32::MAX))
    .bind(lag)
    // What is still waiting once this batch is stored; an agent that does not report its spool leaves NULLs.
    .bind(spool.map(|s| big(s.pending_facts.saturating_sub(batch.facts.len() as u64))))
    .bind(spool.map(|s| big(s.pending_bytes)))
    .bind(spool.map(|s| big(s.dropped_facts)))
    .execute(tx.conn())
    .await?;
    Ok(())
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
        FactBody::Gap(_) => "gap".into(),
        FactBody::QuotaObserved(q) => format!("clusterqueue/{}", q.uid),
        FactBody::ServiceUsage(u) => subject_of_usage(u),
        FactBody::EndpointTotals(t) => format!("endpoint/{}/{}/{}", t.endpoint, t.pod, t.model),
        FactBody::TrainingProgress(t) => format!("training/{}/{}", t.namespace, t.workload),
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
        FactBody::Gap(g) => g.from,
        FactBody::QuotaObserved(q) => q.since,
        FactBody::ServiceUsage(u) => u.window_start,
        FactBody::EndpointTotals(t) => t.window_start,
        FactBody::TrainingProgress(t) => t.reported_at,
        _ => fact.observed_at,
    }
}

/// Stores a validated batch in `tx` and updates derived state. Idempotent.
pub async fn store(tx: &mut OrgTx, org: OrgId, cluster: ClusterId, facts: &[Fact]) -> Result<BatchAck, AppError> {
    let (telemetry, other): (Vec<&Fact>, Vec<&Fact>) =
        facts.iter().partition(|f| matches!(f.body, FactBody::Telemetry(_)));
    let mut stored = 0u64;
    let mut flagged = Vec::new();

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
        sqlx::query_as(
            "INSERT INTO allocation_events (org_id, cluster_id, event_id, kind, subject, occurred_at, payload)
             SELECT $1, $2, * FROM unnest($3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::jsonb[])
             ON CONFLICT DO NOTHING
             RETURNING event_id, kind, subject",
        )
        .bind(org.as_uuid())
        .bind(cluster.as_uuid())
        .bind(&ids)
        .bind(&kinds)
        .bind(&subjects)
        .bind(&times)
        .bind(&payloads)
        .fetch_all(tx.conn())
        .await?
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
        stored += store_telemetry(tx, org, cluster, &rollups).await?;
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
            (FactBody::Gap(g), _) => {
                sqlx::query(
                    "INSERT INTO data_quality_findings
                        (org_id, cluster_id, finding_id, kind, subject, occurred_from, occurred_to, details)
                     VALUES ($1, $2, $3, 'agent_gap', 'agent spool', $4, $5, $6) ON CONFLICT DO NOTHING",
                )
                .bind(org.as_uuid())
                .bind(cluster.as_uuid())
                .bind(&fact.event_id)
                .bind(g.from)
                .bind(g.to)
                .bind(json!({ "dropped": g.dropped }))
                .execute(tx.conn())
                .await?;
            }
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

async fn store_telemetry(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    rollups: &[&TelemetryRollup],
) -> Result<u64, DbError> {
    // No DDL here: partitions are made ahead by the maintenance task; a window of a month without one waits in
    // the default partition until the task makes it.
    let n = rollups.len();
    let mut gpu = Vec::with_capacity(n);
    let mut gi = Vec::with_capacity(n);
    let mut start = Vec::with_capacity(n);
    let mut end = Vec::with_capacity(n);
    let mut node = Vec::with_capacity(n);
    let mut profile: Vec<Option<String>> = Vec::with_capacity(n);
    let mut samples = Vec::with_capacity(n);
    let mut stats: [Vec<Option<f32>>; 9] = Default::default();
    let mut energy: Vec<Option<f64>> = Vec::with_capacity(n);
    let mut pod_ns: Vec<Option<String>> = Vec::with_capacity(n);
    let mut pod_name: Vec<Option<String>> = Vec::with_capacity(n);
    let mut pod_uid: Vec<Option<Uuid>> = Vec::with_capacity(n);
    for t in rollups {
        gpu.push(t.gpu_uuid.clone());
        gi.push(t.gpu_instance_id.map_or(-1, |v| v as i32));
        start.push(t.window_start);
        end.push(t.window_end);
        node.push(t.node.clone());
        profile.push(t.mig_profile.clone());
        samples.push(t.samples as i32);
        for (k, stat) in [t.utilization_pct, t.memory_used_mib, t.power_w].iter().enumerate() {
            stats[k * 3].push(stat.map(|s| s.min as f32));
            stats[k * 3 + 1].push(stat.map(|s| s.avg as f32));
            stats[k * 3 + 2].push(stat.map(|s| s.max as f32));
        }
        energy.push(t.energy_j);
        pod_ns.push(t.pod.as_ref().map(|p| p.namespace.clone()));
        pod_name.push(t.pod.as_ref().map(|p| p.name.clone()));
        pod_uid.push(t.pod.as_ref().and_then(|p| p.uid));
    }
    let done = sqlx::query(
        "INSERT INTO telemetry_rollups (org_id, cluster_id, gpu_uuid, gpu_instance_id, window_start, window_end, node,
            mig_profile, samples, util_min, util_avg, util_max, mem_used_min, mem_used_avg, mem_used_max,
            power_min, power_avg, power_max, energy_j, pod_namespace, pod_name, pod_uid)
         SELECT $1, $2, * FROM unnest($3::text[], $4::int[], $5::timestamptz[], $6::timestamptz[], $7::text[],
            $8::text[], $9::int[], $10::real[], $11::real[], $12::real[], $13::real[], $14::real[], $15::real[],
            $16::real[], $17::real[], $18::real[], $19::float8[], $20::text[], $21::text[], $22::uuid[])
         ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&gpu)
    .bind(&gi)
    .bind(&start)
    .bind(&end)
    .bind(&node)
    .bind(&profile)
    .bind(&samples)
    .bind(&stats[0])
    .bind(&stats[1])
    .bind(&stats[2])
    .bind(&stats[3])
    .bind(&stats[4])
    .bind(&stats[5])
    .bind(&stats[6])
    .bind(&stats[7])
    .bind(&stats[8])
    .bind(&energy)
    .bind(&pod_ns)
    .bind(&pod_name)
    .bind(&pod_uid)
    .execute(tx.conn())
    .await?;
    Ok(done.rows_affected())
}

/// Stores `endpoint_totals` rows in one statement (validated: counts fit in i64, TTFT both or neither).
async fn store_endpoint_totals(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    totals: &[&EndpointTotalsFact],
) -> Result<(), AppError> {
    let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let col = |f: &dyn Fn(&EndpointTotalsFact) -> String| totals.iter().map(|t| f(t)).collect::<Vec<String>>();
    let num = |f: &dyn Fn(&EndpointTotalsFact) -> u64| totals.iter().map(|t| count(f(t))).collect::<Vec<i64>>();
    let ttft: Vec<(Option<i64>, Option<i64>)> =
        totals.iter().map(|t| t.ttft_ms_sum.zip(t.ttft_count).map(|(s, c)| (count(s), count(c))).unzip()).collect();
    sqlx::query(
        "INSERT INTO endpoint_totals (org_id, cluster_id, endpoint, model, server, pod, window_start, window_end,
                requests, input_tokens, output_tokens, ttft_ms_sum, ttft_count, queue_depth, restarted)
         SELECT $1, $2, r.* FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
                $8::timestamptz[], $9::int8[], $10::int8[], $11::int8[], $12::int8[], $13::int8[], $14::float8[],
                $15::bool[])
                AS r(endpoint, model, server, pod, window_start, window_end, requests, input_tokens, output_tokens,
                     ttft_ms_sum, ttft_count, queue_depth, restarted)
         ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(col(&|t| t.endpoint.clone()))
    .bind(col(&|t| t.model.clone()))
    .bind(col(&|t| t.server.clone()))
    .bind(col(&|t| t.pod.clone()))
    .bind(totals.iter().map(|t| t.window_start).collect::<Vec<_>>())
    .bind(totals.iter().map(|t| t.window_end).collect::<Vec<_>>())
    .bind(num(&|t| t.requests))
    .bind(num(&|t| t.input_tokens))
    .bind(num(&|t| t.output_tokens))
    .bind(ttft.iter().map(|p| p.0).collect::<Vec<_>>())
    .bind(ttft.iter().map(|p| p.1).collect::<Vec<_>>())
    .bind(totals.iter().map(|t| t.queue_depth).collect::<Vec<_>>())
    .bind(totals.iter().map(|t| t.restarted).collect::<Vec<_>>())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Stores `service_usage` rows in one statement; a tenant name that is not defined is kept with no tenant ID and
/// recorded as an `unknown_tenant` finding (once: only rows new to the table are flagged).
async fn store_service_usage(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    usage: &[(&str, &ServiceUsageFact)],
    flagged: &mut Vec<FlaggedFact>,
) -> Result<(), AppError> {
    let n = usage.len();
    let mut endpoint = Vec::with_capacity(n);
    let mut model = Vec::with_capacity(n);
    let mut tenant = Vec::with_capacity(n);
    let mut start = Vec::with_capacity(n);
    let mut end = Vec::with_capacity(n);
    let mut requests = Vec::with_capacity(n);
    let mut input = Vec::with_capacity(n);
    let mut output = Vec::with_capacity(n);
    let mut ttft_sum: Vec<Option<i64>> = Vec::with_capacity(n);
    let mut ttft_count: Vec<Option<i64>> = Vec::with_capacity(n);
    // Counts were checked against i64::MAX by `validate`; saturate rather than wrap if a caller skipped it.
    let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for (_, u) in usage {
        endpoint.push(u.endpoint.clone());
        model.push(u.model.clone());
        tenant.push(u.tenant.clone());
        start.push(u.window_start);
        end.push(u.window_end);
        requests.push(count(u.requests));
        input.push(count(u.input_tokens));
        output.push(count(u.output_tokens));
        // Both or neither (validated), so the mean is always over the requests the sum covers.
        let pair = u.ttft_ms_sum.zip(u.ttft_count);
        ttft_sum.push(pair.map(|(s, _)| count(s)));
        ttft_count.push(pair.map(|(_, c)| count(c)));
    }
    // Rows new to the table whose tenant is not defined.
    let unknown: Vec<(String, String, String, OffsetDateTime)> = sqlx::query_as(
        "WITH inserted AS (
            INSERT INTO service_usage (org_id, cluster_id, endpoint, model, tenant_name, tenant_id, window_start,
                window_end, requests, input_tokens, output_tokens, ttft_ms_sum, ttft_count)
            SELECT $1, $2, r.endpoint, r.model, r.tenant_name, t.tenant_id, r.window_start, r.window_end,
                   r.requests, r.input_tokens, r.output_tokens, r.ttft_ms_sum, r.ttft_count
              FROM unnest($3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::int8[],
                          $9::int8[], $10::int8[], $11::int8[], $12::int8[])
                AS r(endpoint, model, tenant_name, window_start, window_end, requests, input_tokens, output_tokens,
                     ttft_ms_sum, ttft_count)
              LEFT JOIN tenants t ON t.org_id = $1 AND t.name = r.tenant_name
            ON CONFLICT DO NOTHING
            RETURNING endpoint, model, tenant_name, window_start, tenant_id)
         SELECT endpoint, model, tenant_name, window_start FROM inserted WHERE tenant_id IS NULL",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&endpoint)
    .bind(&model)
    .bind(&tenant)
    .bind(&start)
    .bind(&end)
    .bind(&requests)
    .bind(&input)
    .bind(&output)
    .bind(&ttft_sum)
    .bind(&ttft_count)
    .fetch_all(tx.conn())
    .await?;
    if unknown.is_empty() {
        return Ok(());
    }
    let mut unknown: BTreeSet<(String, String, String, OffsetDateTime)> = unknown.into_iter().collect();
    let mut ids = Vec::with_capacity(unknown.len());
    let mut subjects = Vec::with_capacity(unknown.len());
    let mut froms = Vec::with_capacity(unknown.len());
    let mut tos = Vec::with_capacity(unknown.len());
    let mut details = Vec::with_capacity(unknown.len());
    for (event_id, u) in usage {
        // The first fact with a key is the one stored; later ones in the batch with that key were conflicts.
        if !unknown.remove(&(u.endpoint.clone(), u.model.clone(), u.tenant.clone(), u.window_start)) {
            continue;
        }
        let reason = format!(
            "service usage of endpoint {:?} names tenant {:?}, which is not defined; kept without a tenant",
            u.endpoint, u.tenant
        );
        ids.push(format!("unknown-tenant/{event_id}"));
        subjects.push(subject_of_usage(u));
        froms.push(u.window_start);
        tos.push(u.window_end);
        details.push(json!({ "reason": reason, "endpoint": u.endpoint, "model": u.model, "tenant": u.tenant }));
        flagged.push(FlaggedFact { event_id: (*event_id).to_string(), reason });
    }
    sqlx::query(
        "INSERT INTO data_quality_findings
            (org_id, cluster_id, finding_id, kind, subject, occurred_from, occurred_to, details)
         SELECT $1, $2, f.finding_id, 'unknown_tenant', f.subject, f.occurred_from, f.occurred_to, f.details
           FROM unnest($3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::jsonb[])
             AS f(finding_id, subject, occurred_from, occurred_to, details)
         ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&ids)
    .bind(&subjects)
    .bind(&froms)
    .bind(&tos)
    .bind(&details)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// GPU model names differ by source (`NVIDIA-A100-SXM4-40GB` in node labels, `NVIDIA A100-SXM4-40GB` from the
/// driver): compare them case-insensitively with spaces and hyphens alike.
pub fn normalize_model(model: &str) -> String {
    model.trim().to_ascii_lowercase().replace([' ', '_'], "-")
}

/// The organization's approved profile fractions and GPU models (small tables: loaded per batch).
struct InventorySnapshot {
    profiles: Inventory,
    /// normalized model → [(valid_from, valid_to, class)]
    classes: HashMap<String, Vec<(OffsetDateTime, Option<OffsetDateTime>, String)>>,
}

impl InventorySnapshot {
    async fn load(tx: &mut OrgTx) -> Result<Self, AppError> {
        type Row = (String, String, String, i64, i64, OffsetDateTime, Option<OffsetDateTime>);
        let org = tx.org().as_uuid();
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT 'mig', model, profile, fraction_num, fraction_den, valid_from, valid_to FROM mig_profiles
              WHERE org_id = $1
             UNION ALL
             SELECT 'vgpu', model, profile, fraction_num, fraction_den, valid_from, valid_to FROM vgpu_profiles
              WHERE org_id = $1",
        )
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
        let mut profiles = Inventory::new();
        for (kind, model, profile, num, den, from, to) in rows {
            let entry = (|| {
                Ok::<_, gpuledger_core::error::DomainError>(ProfileFraction {
                    kind: if kind == "mig" { ProfileKind::Mig } else { ProfileKind::Vgpu },
                    gpu_model: normalize_model(&model),
                    profile,
                    fraction: Fraction::new(num.into(), den.into())?,
                    valid: Validity::new(from, to)?,
                })
            })()
            .map_err(|e| AppError::Internal(format!("inventory row is invalid: {e}")))?;
            profiles.insert(entry).map_err(|e| AppError::Internal(format!("inventory is inconsistent: {e}")))?;
        }
        let model_rows: Vec<(String, OffsetDateTime, Option<OffsetDateTime>, String)> =
            sqlx::query_as("SELECT model, valid_from, valid_to, gpu_class FROM gpu_models WHERE org_id = $1")
                .bind(org)
                .fetch_all(tx.conn())
                .await?;
        let mut classes: HashMap<String, Vec<_>> = HashMap::new();
        for (model, from, to, class) in model_rows {
            classes.entry(normalize_model(&model)).or_default().push((from, to, class));
        }
        Ok(Self { profiles, classes })
    }

    fn only_model_for(&self, mode: &SharingMode) -> Option<String> {
        let SharingMode::Vgpu { profile } = mode else { return None };
        let models: BTreeSet<&str> = self
            .profiles
            .entries()
            .iter()
            .filter(|e| e.kind == ProfileKind::Vgpu && e.profile == profile.as_str())
            .map(|e| e.gpu_model.as_str())
            .collect();
        let mut it = models.into_iter();
        match (it.next(), it.next()) {
            (Some(only), None) => Some(only.to_string()),
            _ => None,
        }
    }

    fn class_at(&self, model: &str, at: OffsetDateTime) -> Option<&str> {
        self.classes
            .get(&normalize_model(model))?
            .iter()
            .find_map(|(from, to, class)| (*from <= at && to.is_none_or(|t| at < t)).then_some(class.as_str()))
    }
}

/// Interval rows as columns, for one `unnest` upsert.
#[derive(Default)]
struct IntervalRows {
    allocation_id: Vec<String>,
    holder_kind: Vec<Option<String>>,
    holder_uid: Vec<Uuid>,
    holder_name: Vec<String>,
    namespace: Vec<String>,
    namespace_uid: Vec<Option<Uuid>>,
    container: Vec<Option<String>>,
    node: Vec<Option<String>>,
    resource: Vec<String>,
    units: Vec<i32>,
    device_ids: Vec<serde_json::Value>,
    gpu_model: Vec<Option<String>>,
    gpu_class: Vec<Option<String>>,
    sharing_mode: Vec<String>,
    profile: Vec<Option<String>>,
    replicas: Vec<Option<i32>>,
    fraction_num: Vec<Option<i64>>,
    fraction_den: Vec<Option<i64>>,
    started_at: Vec<OffsetDateTime>,
    ended_at: Vec<Option<OffsetDateTime>>,
    end_estimated: Vec<bool>,
    confidence: Vec<String>,
    inventory_gap: Vec<Option<String>>,
    labels: Vec<serde_json::Value>,
}

/// One kubelet assignment, as [`assign_devices`] applies it.
struct Assigned {
    pod_uid: Option<Uuid>,
    namespace: String,
    pod: String,
    container: String,
    resource: String,
    devices: Vec<String>,
    at: OffsetDateTime,
}

/// Puts assignments on the intervals they belong to (pods: the cluster agent sees the request, the node agent the
/// devices): matched by pod UID, else by namespace and pod name, plus container and resource; an assignment
/// replaces the interval's devices only if they came from an earlier assignment or there were none, so the latest
/// assignment wins whatever order the facts arrive in.
async fn assign_devices(tx: &mut OrgTx, cluster: ClusterId, assigned: &[Assigned]) -> Result<(), AppError> {
    let (by_uid, by_name): (Vec<&Assigned>, Vec<&Assigned>) = assigned.iter().partition(|a| a.pod_uid.is_some());
    for (rows, match_sql) in
        [(by_uid, "a.holder_uid = u.pod_uid"), (by_name, "a.namespace = u.namespace AND a.holder_name = u.pod")]
    {
        if rows.is_empty() {
            continue;
        }
        let uids: Vec<Option<Uuid>> = rows.iter().map(|r| r.pod_uid).collect();
        let namespaces: Vec<&str> = rows.iter().map(|r| r.namespace.as_str()).collect();
        let pods: Vec<&str> = rows.iter().map(|r| r.pod.as_str()).collect();
        let containers: Vec<&str> = rows.iter().map(|r| r.container.as_str()).collect();
        let resources: Vec<&str> = rows.iter().map(|r| r.resource.as_str()).collect();
        let devices: Vec<serde_json::Value> = rows.iter().map(|r| serde_json::Value::from(r.devices.clone())).collect();
        let ats: Vec<OffsetDateTime> = rows.iter().map(|r| r.at).collect();
        let org = tx.org().as_uuid();
        sqlx::query(&format!(
            "UPDATE allocation_intervals a
                SET device_ids = ARRAY(SELECT jsonb_array_elements_text(u.devices)), devices_assigned_at = u.at,
                    updated_at = now()
               FROM (SELECT DISTINCT ON (pod_uid, namespace, pod, container, resource) *
                       FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
                                   $8::timestamptz[]) AS r(pod_uid, namespace, pod, container, resource, devices, at)
                      ORDER BY pod_uid, namespace, pod, container, resource, at DESC) u
              WHERE a.org_id = $9 AND a.cluster_id = $1 AND {match_sql} AND a.container = u.container
                AND a.resource = u.resource
                AND ((a.devices_assigned_at IS NULL AND cardinality(a.device_ids) = 0) OR a.devices_assigned_at < u.at)"
        ))
        .bind(cluster.as_uuid())
        .bind(&uids)
        .bind(&namespaces)
        .bind(&pods)
        .bind(&containers)
        .bind(&resources)
        .bind(&devices)
        .bind(&ats)
        .bind(org)
        .execute(tx.conn())
        .await?;
    }
    Ok(())
}

/// New intervals whose assignment arrived before them: the latest stored assignment of each. Two plain queries
/// (the intervals, then their subjects' events by the subject index) rather than a join PostgreSQL plans per row.
async fn assign_stored_devices(tx: &mut OrgTx, cluster: ClusterId, allocation_ids: &[String]) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    let waiting: Vec<(Uuid, String, String, String, String)> = sqlx::query_as(
        "SELECT holder_uid, namespace, holder_name, container, resource FROM allocation_intervals
          WHERE cluster_id = $1 AND allocation_id = ANY($2) AND container IS NOT NULL
            AND cardinality(device_ids) = 0 AND devices_assigned_at IS NULL AND org_id = $3",
    )
    .bind(cluster.as_uuid())
    .bind(allocation_ids)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    if waiting.is_empty() {
        return Ok(());
    }
    let mut subjects = Vec::with_capacity(waiting.len() * 2);
    for (uid, namespace, pod, container, _) in &waiting {
        subjects.push(format!("{uid}/{container}"));
        subjects.push(format!("{namespace}/{pod}/{container}"));
    }
    let events: Vec<(String, Option<String>, serde_json::Value, OffsetDateTime)> = sqlx::query_as(
        "SELECT subject, payload->>'resource', payload->'device_ids', occurred_at FROM allocation_events
          WHERE cluster_id = $1 AND subject = ANY($2) AND kind = 'device_assigned' AND org_id = $3",
    )
    .bind(cluster.as_uuid())
    .bind(&subjects)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    // (subject, resource) → the latest assignment.
    let mut latest: HashMap<(String, String), (OffsetDateTime, serde_json::Value)> = HashMap::new();
    for (subject, resource, devices, at) in events {
        let slot = latest.entry((subject, resource.unwrap_or_default())).or_insert((at, devices.clone()));
        if at > slot.0 {
            *slot = (at, devices);
        }
    }
    let mut assigned = Vec::new();
    for (uid, namespace, pod, container, resource) in waiting {
        let found = [format!("{uid}/{container}"), format!("{namespace}/{pod}/{container}")]
            .into_iter()
            .filter_map(|s| latest.get(&(s, resource.clone())))
            .max_by_key(|(at, _)| *at);
        if let Some((at, devices)) = found {
            assigned.push(Assigned {
                pod_uid: Some(uid),
                namespace: String::new(),
                pod: String::new(),
                container,
                resource,
                devices: serde_json::from_value(devices.clone()).unwrap_or_default(),
                at: *at,
            });
        }
    }
    assign_devices(tx, cluster, &assigned).await
}

/// After the inventory changed for `model` from `from`: recomputes, from their stored facts, the allocations it may
/// concern — on that model and started at or after `from` (class and fraction are taken at the start), and any
/// still without a fraction or class (an inventory gap the change may close). Returns how many.
pub(crate) async fn recompute_for_inventory(
    tx: &mut OrgTx,
    org: OrgId,
    model: &str,
    from: OffsetDateTime,
) -> Result<u64, AppError> {
    let candidates: Vec<(Uuid, String, Option<String>, bool)> = sqlx::query_as(
        "SELECT cluster_id, allocation_id, gpu_model, (fraction_num IS NULL OR gpu_class IS NULL)
           FROM allocation_intervals
          WHERE org_id = $2 AND (started_at >= $1 OR fraction_num IS NULL OR gpu_class IS NULL)",
    )
    .bind(from)
    .bind(org.as_uuid())
    .fetch_all(tx.conn())
    .await?;
    let wanted = normalize_model(model);
    let mut by_cluster: BTreeMap<Uuid, Vec<String>> = BTreeMap::new();
    for (cluster, allocation, gpu_model, gap) in candidates {
        let same_model = gpu_model.as_deref().is_some_and(|m| normalize_model(m) == wanted);
        // Without a model (vGPU VMs, passthrough) the model is found at recompute time: retry the gaps.
        if same_model || (gap && gpu_model.is_none()) {
            by_cluster.entry(cluster).or_default().push(allocation);
        }
    }
    let mut n = 0u64;
    let mut flagged = Vec::new();
    for (cluster, ids) in by_cluster {
        n += ids.len() as u64;
        for chunk in ids.chunks(5_000) {
            recompute_intervals(tx, org, ClusterId::from_uuid(cluster), chunk, &mut flagged).await?;
        }
    }
    Ok(n)
}

/// After tenant `name` was defined: applies again, in their order, the stored namespace facts whose labels name
/// it, so namespaces labelled before the tenant existed are owned from when their labels said so. Returns how many
/// namespaces it concerned.
pub(crate) async fn reapply_namespaces_naming(tx: &mut OrgTx, org: OrgId, name: &str) -> Result<u64, AppError> {
    let rows: Vec<(Uuid, String, serde_json::Value)> = sqlx::query_as(
        "SELECT cluster_id, event_id, payload FROM allocation_events
          WHERE org_id = $2 AND kind = 'namespace_observed' AND payload->'labels'->>'tenant' = $1
          ORDER BY occurred_at, event_id",
    )
    .bind(name)
    .bind(org.as_uuid())
    .fetch_all(tx.conn())
    .await?;
    let mut namespaces = BTreeSet::new();
    let mut flagged = Vec::new();
    for (cluster, event_id, payload) in rows {
        let fact: Fact = serde_json::from_value(payload)
            .map_err(|e| AppError::Internal(format!("stored fact {event_id} no longer parses: {e}")))?;
        if let FactBody::NamespaceObserved(n) = &fact.body {
            namespaces.insert(n.namespace_uid);
            apply_namespace(tx, org, ClusterId::from_uuid(cluster), n, &event_id, &mut flagged).await?;
        }
    }
    Ok(namespaces.len() as u64)
}

/// Recomputes the intervals of `allocation_ids` from every stored fact about them.
async fn recompute_intervals(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    allocation_ids: &[String],
    flagged: &mut Vec<FlaggedFact>,
) -> Result<(), AppError> {
    let rows: Vec<(String, String, serde_json::Value)> = sqlx::query_as(
        "SELECT subject, event_id, payload FROM allocation_events
          WHERE org_id = $1 AND cluster_id = $2 AND subject = ANY($3)
            AND kind IN ('allocation_started', 'allocation_ended', 'allocation_vanished')
          ORDER BY subject, event_id",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(allocation_ids)
    .fetch_all(tx.conn())
    .await?;
    #[derive(Default)]
    struct Facts {
        start: Option<(String, AllocationStart)>,
        ended: Option<OffsetDateTime>,
        vanished: Option<OffsetDateTime>,
    }
    let mut by_allocation: BTreeMap<String, Facts> = BTreeMap::new();
    for (subject, event_id, payload) in rows {
        let fact: Fact = serde_json::from_value(payload)
            .map_err(|e| AppError::Internal(format!("stored fact {event_id} no longer parses: {e}")))?;
        let entry = by_allocation.entry(subject).or_default();
        match fact.body {
            // Deterministic: the lowest event ID wins if several starts were recorded.
            FactBody::AllocationStarted(s) if entry.start.is_none() => entry.start = Some((event_id, s)),
            FactBody::AllocationEnded(e) => entry.ended = Some(entry.ended.map_or(e.ended_at, |t| t.min(e.ended_at))),
            FactBody::AllocationVanished(v) => {
                entry.vanished = Some(entry.vanished.map_or(v.last_seen_at, |t| t.min(v.last_seen_at)))
            }
            _ => {}
        }
    }
    if by_allocation.values().all(|f| f.start.is_none()) {
        return Ok(()); // ends that arrived before their starts wait for them
    }
    let inventory = InventorySnapshot::load(tx).await?;
    // A passthrough VM's allocation names a PCI device resource, not a model: its node's GPU product label does.
    let node_products: BTreeMap<String, String> = sqlx::query_as::<_, (String, String)>(
        "SELECT DISTINCT ON (name) name, gpu_product FROM nodes
          WHERE cluster_id = $1 AND gpu_product IS NOT NULL AND org_id = $2 ORDER BY name, valid_from DESC",
    )
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .collect();
    let mut rows = IntervalRows::default();
    for (allocation_id, facts) in by_allocation {
        let Some((start_event, start)) = facts.start else {
            continue;
        };
        // An exact end wins over an inferred one; an inferred end makes the interval `estimated`.
        let (mut ended_at, estimated) = match (facts.ended, facts.vanished) {
            (Some(t), _) => (Some(t), false),
            (None, Some(t)) => (Some(t), true),
            (None, None) => (None, false),
        };
        if let Some(end) = ended_at
            && end < start.started_at
        {
            flagged.push(FlaggedFact {
                event_id: start_event.clone(),
                reason: format!("end {end} is before start {}; end ignored", start.started_at),
            });
            ended_at = None;
        }
        // A VM's vGPU profile names its board (`GRID_T4-1Q`): when the agent could not say the model, take the one
        // model the approved inventory lists that profile for.
        let model = start
            .gpu_model
            .clone()
            .or_else(|| inventory.only_model_for(&start.mode))
            .or_else(|| match start.mode {
                SharingMode::Passthrough => start.node.as_ref().and_then(|n| node_products.get(n)).cloned(),
                _ => None,
            })
            .unwrap_or_default();
        let gpu_class = (!model.is_empty()).then(|| inventory.class_at(&model, start.started_at)).flatten();
        let (fraction, mut confidence, gap) =
            match resolve_fraction(&start.mode, &normalize_model(&model), start.started_at, &inventory.profiles) {
                Ok((per_unit, confidence)) => {
                    let total = per_unit.checked_mul_int(start.units.into()).ok();
                    (total, confidence, None)
                }
                Err(gap) => {
                    let reason = format!(
                        "{} on GPU model {:?} has no approved inventory entry ({:?}); kept without a fraction",
                        start.mode,
                        if model.is_empty() { "unknown" } else { &model },
                        gap.reason
                    );
                    flagged.push(FlaggedFact { event_id: start_event.clone(), reason: reason.clone() });
                    (None, start.mode.base_confidence(), Some(reason))
                }
            };
        if estimated {
            confidence = confidence.min(Confidence::Estimated);
        }
        let (profile, replicas) = match &start.mode {
            SharingMode::Mig { profile } => (Some(profile.as_str().to_string()), None),
            SharingMode::Vgpu { profile } => (Some(profile.as_str().to_string()), None),
            SharingMode::TimeSlice { replicas } => (None, Some(*replicas as i32)),
            _ => (None, None),
        };
        let namespace_uid = match start.namespace_uid {
            Some(uid) => Some(uid),
            None => {
                sqlx::query_scalar(
                    "SELECT namespace_uid FROM namespaces WHERE cluster_id = $1 AND name = $2 AND created_at <= $3
                   AND (deleted_at IS NULL OR deleted_at >= $3) AND org_id = $4 ORDER BY created_at DESC LIMIT 1",
                )
                .bind(cluster.as_uuid())
                .bind(&start.namespace)
                .bind(start.started_at)
                .bind(org.as_uuid())
                .fetch_optional(tx.conn())
                .await?
            }
        };
        if let Some(reason) = &gap {
            sqlx::query(
                "INSERT INTO data_quality_findings (org_id, cluster_id, finding_id, kind, subject, occurred_from, details)
                 VALUES ($1, $2, $3, 'inventory_gap', $4, $5, $6) ON CONFLICT DO NOTHING",
            )
            .bind(org.as_uuid())
            .bind(cluster.as_uuid())
            .bind(format!("inventory-gap/{allocation_id}"))
            .bind(&allocation_id)
            .bind(start.started_at)
            .bind(json!({ "reason": reason, "gpu_model": start.gpu_model, "mode": start.mode }))
            .execute(tx.conn())
            .await?;
        }
        rows.allocation_id.push(allocation_id);
        rows.holder_kind.push(serde_json::to_value(start.holder).ok().and_then(|v| v.as_str().map(str::to_string)));
        rows.holder_uid.push(start.holder_uid);
        rows.holder_name.push(start.holder_name.clone());
        rows.namespace.push(start.namespace.clone());
        rows.namespace_uid.push(namespace_uid);
        rows.container.push(start.container.clone());
        rows.node.push(start.node.clone());
        rows.resource.push(start.resource.clone());
        rows.units.push(start.units as i32);
        rows.device_ids.push(serde_json::Value::from(start.device_ids.clone()));
        rows.gpu_model.push(start.gpu_model.clone());
        rows.gpu_class.push(gpu_class.map(str::to_string));
        rows.sharing_mode.push(start.mode.name().to_string());
        rows.profile.push(profile);
        rows.replicas.push(replicas);
        rows.fraction_num.push(fraction.as_ref().map(|f| i64::try_from(f.numer()).unwrap_or(i64::MAX)));
        rows.fraction_den.push(fraction.as_ref().map(|f| i64::try_from(f.denom()).unwrap_or(i64::MAX)));
        rows.started_at.push(start.started_at);
        rows.ended_at.push(ended_at);
        rows.end_estimated.push(estimated);
        rows.confidence.push(confidence.to_string());
        rows.inventory_gap.push(gap);
        rows.labels.push(serde_json::to_value(&start.labels).unwrap_or_default());
    }
    if rows.allocation_id.is_empty() {
        return Ok(());
    }
    // One statement for the whole batch (a row-per-statement upsert was the slowest part of ingest).
    sqlx::query(
        "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name,
            namespace, namespace_uid, container, node, resource, units, device_ids, gpu_model, gpu_class,
            sharing_mode, profile, replicas, fraction_num, fraction_den, started_at, ended_at, end_estimated,
            confidence, inventory_gap, labels)
         SELECT $1, $2, r.allocation_id, r.holder_kind, r.holder_uid, r.holder_name, r.namespace, r.namespace_uid,
                r.container, r.node, r.resource, r.units, ARRAY(SELECT jsonb_array_elements_text(r.device_ids)),
                r.gpu_model, r.gpu_class, r.sharing_mode, r.profile, r.replicas, r.fraction_num, r.fraction_den,
                r.started_at, r.ended_at, r.end_estimated, r.confidence, r.inventory_gap, r.labels
           FROM unnest($3::text[], $4::text[], $5::uuid[], $6::text[], $7::text[], $8::uuid[], $9::text[],
                       $10::text[], $11::text[], $12::int[], $13::jsonb[], $14::text[], $15::text[], $16::text[],
                       $17::text[], $18::int[], $19::int8[], $20::int8[], $21::timestamptz[], $22::timestamptz[],
                       $23::bool[], $24::text[], $25::text[], $26::jsonb[])
             AS r(allocation_id, holder_kind, holder_uid, holder_name, namespace, namespace_uid, container, node,
                  resource, units, device_ids, gpu_model, gpu_class, sharing_mode, profile, replicas, fraction_num,
                  fraction_den, started_at, ended_at, end_estimated, confidence, inventory_gap, labels)
         ON CONFLICT (org_id, cluster_id, allocation_id) DO UPDATE SET
            namespace_uid = EXCLUDED.namespace_uid, gpu_class = EXCLUDED.gpu_class,
            fraction_num = EXCLUDED.fraction_num, fraction_den = EXCLUDED.fraction_den,
            ended_at = EXCLUDED.ended_at, end_estimated = EXCLUDED.end_estimated,
            confidence = EXCLUDED.confidence, inventory_gap = EXCLUDED.inventory_gap, updated_at = now()",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&rows.allocation_id)
    .bind(&rows.holder_kind)
    .bind(&rows.holder_uid)
    .bind(&rows.holder_name)
    .bind(&rows.namespace)
    .bind(&rows.namespace_uid)
    .bind(&rows.container)
    .bind(&rows.node)
    .bind(&rows.resource)
    .bind(&rows.units)
    .bind(&rows.device_ids)
    .bind(&rows.gpu_model)
    .bind(&rows.gpu_class)
    .bind(&rows.sharing_mode)
    .bind(&rows.profile)
    .bind(&rows.replicas)
    .bind(&rows.fraction_num)
    .bind(&rows.fraction_den)
    .bind(&rows.started_at)
    .bind(&rows.ended_at)
    .bind(&rows.end_estimated)
    .bind(&rows.confidence)
    .bind(&rows.inventory_gap)
    .bind(&rows.labels)
    .execute(tx.conn())
    .await?;
    assign_stored_devices(tx, cluster, &rows.allocation_id).await?;
    Ok(())
}

/// Records a namespace and its owner. Ownership is history: a change closes the row in force at that time and
/// opens a new one; facts may arrive in any order.
async fn apply_namespace(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &gpuledger_core::wire::NamespaceFact,
    event_id: &str,
    flagged: &mut Vec<FlaggedFact>,
) -> Result<(), AppError> {
    sqlx::query(
        "INSERT INTO namespaces (org_id, namespace_uid, cluster_id, name, created_at, deleted_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (org_id, namespace_uid) DO UPDATE SET deleted_at = coalesce(EXCLUDED.deleted_at, namespaces.deleted_at)",
    )
    .bind(org.as_uuid())
    .bind(n.namespace_uid)
    .bind(cluster.as_uuid())
    .bind(&n.name)
    .bind(n.created_at)
    .bind(n.deleted_at)
    .execute(tx.conn())
    .await?;
    // Allocations that arrived before their namespace (watchers race; batches reorder) get its UID now, so the
    // result does not depend on arrival order.
    sqlx::query(
        "UPDATE allocation_intervals SET namespace_uid = $2, updated_at = now()
          WHERE cluster_id = $1 AND namespace = $3 AND namespace_uid IS NULL AND started_at >= $4
            AND ($5::timestamptz IS NULL OR started_at < $5) AND org_id = $6",
    )
    .bind(cluster.as_uuid())
    .bind(n.namespace_uid)
    .bind(&n.name)
    .bind(n.created_at)
    .bind(n.deleted_at)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
    let tenant: Option<Uuid> = match &n.labels.tenant {
        None => None,
        Some(name) => {
            let id: Option<Uuid> = sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE name = $1 AND org_id = $2")
                .bind(name)
                .bind(org.as_uuid())
                .fetch_optional(tx.conn())
                .await?;
            if id.is_none() {
                let reason = format!("namespace {:?} names tenant {name:?}, which is not defined", n.name);
                sqlx::query(
                    "INSERT INTO data_quality_findings (org_id, cluster_id, finding_id, kind, subject, occurred_from, details)
                     VALUES ($1, $2, $3, 'unknown_tenant', $4, $5, $6) ON CONFLICT DO NOTHING",
                )
                .bind(org.as_uuid())
                .bind(cluster.as_uuid())
                .bind(format!("unknown-tenant/{event_id}"))
                .bind(n.namespace_uid.to_string())
                .bind(n.labels_since)
                .bind(json!({ "reason": reason }))
                .execute(tx.conn())
                .await?;
                flagged.push(FlaggedFact { event_id: event_id.to_string(), reason });
            }
            id
        }
    };
    let since = n.labels_since;
    // The row in force at `since`, and the first row after it.
    let current: Option<(OffsetDateTime, Option<OffsetDateTime>, Uuid)> = sqlx::query_as(
        "SELECT valid_from, valid_to, tenant_id FROM namespace_ownership
          WHERE namespace_uid = $1 AND valid_from <= $2 AND (valid_to IS NULL OR valid_to > $2) AND org_id = $3",
    )
    .bind(n.namespace_uid)
    .bind(since)
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    let next_from: Option<OffsetDateTime> = sqlx::query_scalar(
        "SELECT min(valid_from) FROM namespace_ownership WHERE namespace_uid = $1 AND valid_from > $2 AND org_id = $3",
    )
    .bind(n.namespace_uid)
    .bind(since)
    .bind(org.as_uuid())
    .fetch_one(tx.conn())
    .await?;
    let until = match &current {
        Some((_, to, current_tenant)) => {
            if Some(*current_tenant) == tenant {
                return Ok(()); // nothing changes
            }
            // Close the row in force at `since` (closed, never overwritten).
            sqlx::query(
                "UPDATE namespace_ownership SET valid_to = $3
                  WHERE namespace_uid = $1 AND valid_from = $2 AND org_id = $4",
            )
            .bind(n.namespace_uid)
            .bind(current.as_ref().map(|c| c.0))
            .bind(since)
            .bind(org.as_uuid())
            .execute(tx.conn())
            .await?;
            *to
        }
        None => next_from,
    };
    if let Some(tenant) = tenant
        && current.as_ref().is_none_or(|(from, _, _)| *from < since)
    {
        sqlx::query(
            "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source)
             VALUES ($1, $2, $3, $4, $5, 'label')",
        )
        .bind(org.as_uuid())
        .bind(n.namespace_uid)
        .bind(since)
        .bind(until)
        .bind(tenant)
        .execute(tx.conn())
        .await?;
    } else if let (Some(tenant), Some((from, _, _))) = (tenant, &current) {
        // Same start instant, new owner: the closed row would be empty; replace its owner in place.
        sqlx::query(
            "UPDATE namespace_ownership SET tenant_id = $3, valid_to = $4
              WHERE namespace_uid = $1 AND valid_from = $2 AND org_id = $5",
        )
        .bind(n.namespace_uid)
        .bind(from)
        .bind(tenant)
        .bind(until)
        .bind(org.as_uuid())
        .execute(tx.conn())
        .await?;
    }
    Ok(())
}

async fn apply_node(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &gpuledger_core::wire::NodeFact,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    let allocatable = serde_json::to_value(&n.allocatable).unwrap_or_default();
    let same: Option<bool> = sqlx::query_scalar(
        "SELECT node_uid = $2 AND gpu_product IS NOT DISTINCT FROM $3 AND gpu_count IS NOT DISTINCT FROM $4
                AND mig_strategy IS NOT DISTINCT FROM $5 AND sharing_strategy IS NOT DISTINCT FROM $6
                AND replicas IS NOT DISTINCT FROM $7 AND allocatable = $8
           FROM nodes WHERE cluster_id = $9 AND name = $1 AND valid_to IS NULL AND org_id = $10",
    )
    .bind(&n.name)
    .bind(n.node_uid)
    .bind(&n.gpu_product)
    .bind(n.gpu_count.map(|v| v as i32))
    .bind(&n.mig_strategy)
    .bind(&n.sharing_strategy)
    .bind(n.replicas.map(|v| v as i32))
    .bind(&allocatable)
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    if same == Some(true) {
        return Ok(());
    }
    sqlx::query(
        "UPDATE nodes SET valid_to = $3
          WHERE cluster_id = $1 AND name = $2 AND valid_to IS NULL AND valid_from < $3 AND org_id = $4",
    )
    .bind(cluster.as_uuid())
    .bind(&n.name)
    .bind(at)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
    sqlx::query(
        "INSERT INTO nodes (org_id, cluster_id, name, valid_from, node_uid, gpu_product, gpu_count, mig_strategy,
            sharing_strategy, replicas, allocatable)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&n.name)
    .bind(at)
    .bind(n.node_uid)
    .bind(&n.gpu_product)
    .bind(n.gpu_count.map(|v| v as i32))
    .bind(&n.mig_strategy)
    .bind(&n.sharing_strategy)
    .bind(n.replicas.map(|v| v as i32))
    .bind(&allocatable)
    .execute(tx.conn())
    .await?;
    Ok(())
}

async fn apply_device(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    d: &gpuledger_core::wire::DeviceFact,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    let mig = serde_json::to_value(&d.mig_devices).unwrap_or_default();
    let same: Option<bool> = sqlx::query_scalar(
        "SELECT node = $2 AND model = $3 AND memory_mib IS NOT DISTINCT FROM $4 AND mig_enabled = $5
                AND mig_devices = $6 AND vgpu_profile IS NOT DISTINCT FROM $7
           FROM devices WHERE cluster_id = $8 AND gpu_uuid = $1 AND valid_to IS NULL AND org_id = $9",
    )
    .bind(&d.gpu_uuid)
    .bind(&d.node)
    .bind(&d.model)
    .bind(d.memory_mib.map(|v| v as i64))
    .bind(d.mig_enabled)
    .bind(&mig)
    .bind(&d.vgpu_profile)
    .bind(cluster.as_uuid())
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    if same == Some(true) {
        return Ok(());
    }
    sqlx::query(
        "UPDATE devices SET valid_to = $3
          WHERE cluster_id = $1 AND gpu_uuid = $2 AND valid_to IS NULL AND valid_from < $3 AND org_id = $4",
    )
    .bind(cluster.as_uuid())
    .bind(&d.gpu_uuid)
    .bind(at)
    .bind(org.as_uuid())
    .execute(tx.conn())
    .await?;
    sqlx::query(
        "INSERT INTO devices (org_id, cluster_id, gpu_uuid, valid_from, node, model, memory_mib, mig_enabled,
            mig_devices, vgpu_profile)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
    )
    .bind(org.as_uuid())
    .bind(cluster.as_uuid())
    .bind(&d.gpu_uuid)
    .bind(at)
    .bind(&d.node)
    .bind(&d.model)
    .bind(d.memory_mib.map(|v| v as i64))
    .bind(d.mig_enabled)
    .bind(&mig)
    .bind(&d.vgpu_profile)
    .execute(tx.conn())
    .await?;
    Ok(())
}
