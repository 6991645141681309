//! Group commit of agents' telemetry (`ingest::group`), against real PostgreSQL as the app role: batches that arrive
//! while their cluster's previous group is being stored are stored together, each credited with its own new windows
//! and answered after the commit; a refused batch is refused alone; a group whose transaction fails is stored batch
//! by batch, so only the failing batch fails; a sender that hangs up does not stop the others.
//!
//! The cluster's tasks are held on purpose: the test locks some nodes' `agent_contacts` rows from another session,
//! so the groups storing them wait while the others queue (`Groups::waiting`), then lets them go.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{io::Write, time::Duration};

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    ids::OrgId,
    wire::{
        AgentInfo, Batch, Fact, FactBody, PodActivity, ProcessTelemetry, Stat, TelemetryRollup, WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
    demo,
};
use serde_json::Value;
use time::{OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

struct Env {
    app: axum::Router,
    state: AppState,
    org: OrgId,
    token: String,
    admin: sqlx::PgPool,
    _db: gpuledger_e2e::TestDatabase,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, token) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let state = AppState::new(db.clone(), Some(org));
    let app = app::router(state.clone(), &HttpOptions { body_limit: 256 * 1024, ..HttpOptions::default() });
    let admin = common::admin_pool(&test_db).await;
    Env { app, state, org, token, admin, _db: test_db }
}

const HOUR: OffsetDateTime = datetime!(2026-11-02 09:00 UTC);

fn window(gpu: &str, minute: i64) -> Fact {
    Fact {
        event_id: event_id("telemetry", &[gpu, "-", &minute.to_string()]),
        observed_at: HOUR + Duration::from_secs(3600),
        body: FactBody::Telemetry(TelemetryRollup {
            node: "node".into(),
            gpu_uuid: gpu.into(),
            gpu_instance_id: None,
            mig_profile: None,
            window_start: HOUR + time::Duration::minutes(minute),
            window_end: HOUR + time::Duration::minutes(minute + 1),
            samples: 6,
            utilization_pct: Some(Stat { min: 50.0, avg: 50.0, max: 50.0 }),
            memory_used_mib: None,
            power_w: Some(Stat { min: 200.0, avg: 200.0, max: 200.0 }),
            energy_j: Some(12_000.0),
            pod: None,
        }),
    }
}

fn process_window(node: &str, gpu: &str, minute: i64) -> Fact {
    Fact {
        event_id: event_id("process-window", &[node, gpu, &minute.to_string()]),
        observed_at: HOUR + Duration::from_secs(3600),
        body: FactBody::ProcessTelemetry(ProcessTelemetry {
            node: node.into(),
            gpu_uuid: gpu.into(),
            window_start: HOUR + time::Duration::minutes(minute),
            window_end: HOUR + time::Duration::minutes(minute + 1),
            samples: 6,
            pods: vec![PodActivity {
                pod_uid: Uuid::from_u128(7),
                sm_pct: Stat { min: 10.0, avg: 20.0, max: 30.0 },
                memory_pct: None,
            }],
        }),
    }
}

/// A node's minute as its agent sends it: two GPUs' windows of minutes `minutes` and one process window per GPU.
fn node_facts(node: &str, minutes: std::ops::Range<i64>) -> Vec<Fact> {
    let mut facts = Vec::new();
    for g in 0..2 {
        let gpu = format!("GPU-{node}-{g}");
        for m in minutes.clone() {
            facts.push(window(&gpu, m));
        }
        facts.push(process_window(node, &gpu, minutes.start));
    }
    facts
}

fn batch(node: &str, facts: Vec<Fact>) -> Batch {
    Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "node".into(), node: Some(node.into()), spool: None },
        cluster: None,
        facts,
    }
}

/// Sends a batch as the agent (gzip, as agents do), from a task of its own; its (status, answer).
fn send(env: &Env, b: &Batch) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&serde_json::to_vec(b).unwrap()).unwrap();
    let request = Request::post("/api/v1/ingest/batches")
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .header("authorization", format!("Bearer {}", env.token))
        .body(Body::from(enc.finish().unwrap()))
        .unwrap();
    let app = env.app.clone();
    tokio::spawn(async move {
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    })
}

/// Holds every task a cluster's groups may have at once (`ingest::CONCURRENT_GROUPS`): nodes `hold-*` report
/// once, then their contact rows are locked by another session and each sends again — each batch taken by a task
/// of its own, whose transaction then waits on the lock — until the returned transaction ends. Their answers.
async fn hold(
    env: &Env,
) -> (sqlx::Transaction<'static, sqlx::Postgres>, Vec<tokio::task::JoinHandle<(StatusCode, Value)>>) {
    let nodes: Vec<String> = (0..gpuledger_server::ingest::CONCURRENT_GROUPS).map(|i| format!("hold-{i}")).collect();
    for node in &nodes {
        let (status, ack) = send(env, &batch(node, node_facts(node, 0..1))).await.unwrap();
        assert_eq!((status, ack["stored"].as_u64()), (StatusCode::OK, Some(4)), "{ack}");
    }
    let mut lock = env.admin.begin().await.unwrap();
    let held: Vec<(String,)> = sqlx::query_as("SELECT node FROM agent_contacts WHERE node = ANY($1) FOR UPDATE")
        .bind(&nodes)
        .fetch_all(&mut *lock)
        .await
        .unwrap();
    assert_eq!(held.len(), nodes.len());
    let mut held = Vec::new();
    for node in &nodes {
        held.push(send(env, &batch(node, node_facts(node, 1..2))));
        // Taken by a task of its own before the next is sent, so every task is held.
        until(env, held.len(), 0).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    (lock, held)
}

/// The held batches' answers: each stored its 4 windows.
async fn released(held: Vec<tokio::task::JoinHandle<(StatusCode, Value)>>) {
    for h in held {
        let (status, ack) = h.await.unwrap();
        assert_eq!((status, ack["stored"].as_u64()), (StatusCode::OK, Some(4)), "{ack}");
    }
}

/// Waits until `running` tasks store groups and `waiting` batches wait for theirs.
async fn until(env: &Env, running: usize, waiting: usize) {
    let now = || (env.state.ingest.running(), env.state.ingest.waiting());
    for _ in 0..400 {
        if now() == (running, waiting) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("(tasks, batches waiting) = {:?}, not {:?}", now(), (running, waiting));
}

async fn count(env: &Env, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql).fetch_one(&env.admin).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_that_arrive_together_are_stored_together_and_each_credited_with_its_own_windows() {
    let env = env().await;
    let org = env.org.as_uuid();
    let before = gpuledger_server::metrics::counters_for(org);
    let (lock, held) = hold(&env).await;
    let k = held.len();

    // Twelve nodes meanwhile. node-02 also carries one of node-01's windows (the same window twice in the group);
    // node-03 carries one of its own windows twice; node-04 redelivers one of hold-0's stored windows.
    let mut batches: Vec<(String, Vec<Fact>)> = (1..=12)
        .map(|i| {
            let node = format!("node-{i:02}");
            let facts = node_facts(&node, 0..3);
            (node, facts)
        })
        .collect();
    batches[1].1.push(window("GPU-node-01-0", 0));
    let again = batches[2].1[0].clone();
    batches[2].1.push(again);
    batches[3].1.push(window("GPU-hold-0-0", 0));
    let mut senders: Vec<_> = batches.iter().map(|(node, facts)| send(&env, &batch(node, facts.clone()))).collect();
    until(&env, k, 12).await;
    // node-12's sender hangs up while it waits: its batch is stored all the same.
    senders.pop().unwrap().abort();
    lock.commit().await.unwrap();

    released(held).await;
    let mut acks = Vec::new();
    for s in senders {
        let (status, ack) = s.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{ack}");
        acks.push((ack["received"].as_u64().unwrap(), ack["stored"].as_u64().unwrap()));
    }
    // Each node's own 8 windows: 6 GPU windows (2 GPUs × 3 minutes) and 2 process windows.
    assert_eq!(acks[0].0, 8);
    assert_eq!((acks[1].0, acks[2].0, acks[3].0), (9, 9, 9));
    assert_eq!(acks[0].1 + acks[1].1, 16, "node-01's window sent twice is credited once: {acks:?}");
    assert!(acks[0].1 >= 7 && acks[1].1 >= 8, "each keeps its own windows: {acks:?}");
    assert_eq!(acks[2].1, 8, "a window twice in one batch counts once");
    assert_eq!(acks[3].1, 8, "a window stored before is not new");
    for (i, ack) in acks.iter().enumerate().skip(4) {
        assert_eq!(*ack, (8, 8), "node-{:02}", i + 1);
    }

    // Stored once each: the held nodes' GPU windows (2 GPUs × 2 minutes each; the others 2 × 3), process windows.
    let windows = count(&env, "SELECT sum(windows)::bigint FROM telemetry_gpu_hours").await;
    assert_eq!(windows, 4 * k as i64 + 12 * 6);
    assert_eq!(count(&env, "SELECT count(*) FROM process_windows").await, 4 * k as i64 + 12 * 2);
    assert_eq!(
        count(&env, "SELECT count(*) FROM process_windows WHERE gpu_uuid LIKE 'GPU-node-12-%'").await,
        2,
        "the hung-up sender's batch is stored"
    );
    // Every agent's contact is its own batch's.
    let contacts: Vec<(String, i32)> = sqlx::query_as(
        "SELECT node, last_batch_facts FROM agent_contacts WHERE mode = 'node' AND node LIKE 'node-%' ORDER BY node",
    )
    .fetch_all(&env.admin)
    .await
    .unwrap();
    let mut expected = Vec::new();
    expected.extend((1..=12).map(|i| (format!("node-{i:02}"), if (2..=4).contains(&i) { 9 } else { 8 })));
    assert_eq!(contacts, expected);
    // The held nodes' transactions (each a first report, then a held one), then the twelve together.
    let after = gpuledger_server::metrics::counters_for(org);
    assert_eq!(after.ingest_groups - before.ingest_groups, 2 * k as u64 + 1);
    assert_eq!(after.ingest_grouped_batches - before.ingest_grouped_batches, 2 * k as u64 + 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_failing_batch_fails_alone_and_its_group_is_stored() {
    let env = env().await;
    let org = env.org.as_uuid();
    // A window the database refuses after the batch was admitted: a constraint added for the test.
    sqlx::query("ALTER TABLE process_windows ADD CONSTRAINT no_poison CHECK (gpu_uuid <> 'GPU-poison') NOT VALID")
        .execute(&env.admin)
        .await
        .unwrap();
    let before = gpuledger_server::metrics::counters_for(org);
    let (lock, held) = hold(&env).await;
    let k = held.len() as u64;

    let good_a = send(&env, &batch("node-a", node_facts("node-a", 0..2)));
    let mut wrong_cluster = batch("node-b", node_facts("node-b", 0..2));
    wrong_cluster.cluster = Some("gpu-west".into());
    let wrong_cluster = send(&env, &wrong_cluster);
    let good_c = send(&env, &batch("node-c", node_facts("node-c", 0..2)));
    let mut future = node_facts("node-d", 0..1);
    future.push(window("GPU-node-d-0", 60 * 24 * 365 * 3));
    let future = send(&env, &batch("node-d", future));
    let mut poison = node_facts("node-e", 0..2);
    poison.push(process_window("node-e", "GPU-poison", 0));
    let poison = send(&env, &batch("node-e", poison));
    until(&env, k as usize, 5).await;
    lock.commit().await.unwrap();

    released(held).await;
    let (status, ack) = good_a.await.unwrap();
    assert_eq!((status, ack["stored"].as_u64()), (StatusCode::OK, Some(6)), "{ack}");
    let (status, ack) = good_c.await.unwrap();
    assert_eq!((status, ack["stored"].as_u64()), (StatusCode::OK, Some(6)), "{ack}");
    let (status, problem) = wrong_cluster.await.unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("gpu-west"), "{problem}");
    let (status, problem) = future.await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    let (status, problem) = poison.await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("no_poison"), "{problem}");

    // The good batches are stored; nothing of the refused or failed ones (their GPU windows included).
    for (node, windows) in [("node-a", 4), ("node-c", 4), ("node-b", 0), ("node-d", 0), ("node-e", 0)] {
        let sql = format!(
            "SELECT coalesce(sum(h.windows), 0)::bigint FROM telemetry_gpu_hours h
               JOIN telemetry_series s USING (org_id, series_id) WHERE s.gpu_uuid LIKE 'GPU-{node}-%'"
        );
        assert_eq!(count(&env, &sql).await, windows, "{node}");
    }
    assert_eq!(count(&env, "SELECT count(*) FROM process_windows WHERE node IN ('node-a', 'node-c')").await, 4);
    assert_eq!(
        count(&env, "SELECT count(*) FROM process_windows WHERE node IN ('node-b', 'node-d', 'node-e')").await,
        0
    );
    assert_eq!(
        count(&env, "SELECT count(*) FROM agent_contacts WHERE node IN ('node-b', 'node-d', 'node-e')").await,
        0,
        "a batch not stored leaves no contact"
    );
    // The held nodes' groups were stored; the failed group was not: its batches were stored one by one.
    let after = gpuledger_server::metrics::counters_for(org);
    assert_eq!(after.ingest_groups - before.ingest_groups, 2 * k);
    assert_eq!(after.ingest_grouped_batches - before.ingest_grouped_batches, 2 * k);
}
