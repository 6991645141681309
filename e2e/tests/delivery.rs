//! Delivery from the agent's spool to the server, whole-system: the agent library's `Sender` against the real
//! `gpuledger-server` killed with SIGKILL mid-stream (nothing lost, nothing doubled, the same ledger as a
//! fault-free run), and against a scripted stand-in that answers 503, 429 and 422.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use gpuledger_agent::{
    deliver::{DeliveryConfig, Sender},
    spool::{Spool, SpoolConfig},
};
use gpuledger_core::{
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AllocationVanished, AttributionLabels, EndReason, Fact, FactBody,
        Holder, Stat, TelemetryRollup, event_id,
    },
};
use gpuledger_e2e::{
    fresh_database,
    process::{binary, free_port, http_get, signal, temp_dir},
    stub::{Reply, StubIngest},
    with_cluster_lock,
};
use time::{OffsetDateTime, macros::datetime};
use uuid::Uuid;

const T0: OffsetDateTime = datetime!(2026-10-01 00:00 UTC);
const GPUS: usize = 8;

fn minutes(n: usize) -> time::Duration {
    time::Duration::minutes(n as i64)
}

/// Telemetry rollup number `k`: GPU `k % 8`, minute `k / 8` after [`T0`].
fn telemetry(k: usize) -> Fact {
    let g = k % GPUS;
    let node = if g < 4 { "h100-a" } else { "a100-b" };
    let gpu_uuid = format!("GPU-00000000-0000-4000-8000-{g:012}");
    let start = T0 + minutes(k / GPUS);
    let util = (k % 50) as f64;
    Fact {
        event_id: event_id("telemetry", &[&gpu_uuid, &start.unix_timestamp().to_string()]),
        observed_at: start + time::Duration::minutes(1),
        body: FactBody::Telemetry(TelemetryRollup {
            node: node.into(),
            gpu_uuid,
            gpu_instance_id: None,
            mig_profile: None,
            window_start: start,
            window_end: start + time::Duration::minutes(1),
            samples: 60,
            utilization_pct: Some(Stat { min: util, avg: util + 10.0, max: util + 20.0 }),
            memory_used_mib: None,
            power_w: Some(Stat { min: 100.0, avg: 200.0 + util, max: 350.0 }),
            energy_j: Some(12_000.0 + util),
            pod: None,
        }),
    }
}

/// Allocation fact number `j`: even ones start allocation `j / 2`, odd ones end it (every tenth vanishes,
/// an estimated end). Exclusive H100s, MIG 1g.10gb on H100s and 4-way time-sliced A100s, by turns.
fn allocation(j: usize) -> Fact {
    let a = j / 2;
    let uid = Uuid::from_u128(0xa1a1_a1a1_0000_4000_8000_0000_0000_0000 + a as u128);
    let (resource, mode, model, units, node) = match a % 3 {
        0 => ("nvidia.com/gpu", SharingMode::Exclusive, "NVIDIA H100 80GB HBM3", 1 + (a % 2) as u32, "h100-a"),
        1 => (
            "nvidia.com/mig-1g.10gb",
            SharingMode::Mig { profile: "1g.10gb".parse().unwrap() },
            "NVIDIA H100 80GB HBM3",
            1,
            "h100-a",
        ),
        _ => ("nvidia.com/gpu", SharingMode::TimeSlice { replicas: 4 }, "NVIDIA A100-PCIE-40GB", 1, "a100-b"),
    };
    let uid_s = uid.to_string();
    let allocation_id = format!("{uid}/main/{resource}");
    let started_at = T0 + minutes(a);
    let ended_at = started_at + minutes(30 + a % 60);
    let (transition, observed_at, body) = if j.is_multiple_of(2) {
        (
            "alloc-start",
            started_at,
            FactBody::AllocationStarted(AllocationStart {
                allocation_id,
                holder: Holder::Pod,
                holder_uid: uid,
                holder_name: format!("job-{a:04}"),
                namespace: "ml".into(),
                namespace_uid: None,
                container: Some("main".into()),
                node: Some(node.into()),
                resource: resource.into(),
                units,
                mode,
                gpu_model: Some(model.into()),
                device_ids: Vec::new(),
                started_at,
                labels: AttributionLabels::default(),
            }),
        )
    } else if a % 10 == 9 {
        (
            "alloc-vanished",
            ended_at,
            FactBody::AllocationVanished(AllocationVanished { allocation_id, last_seen_at: ended_at }),
        )
    } else {
        (
            "alloc-end",
            ended_at,
            FactBody::AllocationEnded(AllocationEnd { allocation_id, ended_at, reason: EndReason::Finished }),
        )
    };
    Fact { event_id: event_id(transition, &[&uid_s, "main", resource]), observed_at, body }
}

/// `total` facts: every twentieth an allocation fact, the rest telemetry.
fn stream(total: usize) -> Vec<Fact> {
    let (mut t, mut a) = (0, 0);
    (0..total)
        .map(|i| {
            if i % 20 == 10 {
                a += 1;
                allocation(a - 1)
            } else {
                t += 1;
                telemetry(t - 1)
            }
        })
        .collect()
}

/// A spool in `dir` holding `facts`, and a `Sender::run` task delivering it to `server`.
struct Delivery {
    spool: Arc<Mutex<Spool>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    dead_letter: PathBuf,
}

impl Delivery {
    fn start(server: &str, token: &str, dir: &Path, facts: &[Fact], batch: usize) -> Self {
        let mut spool = Spool::open(dir.join("spool"), SpoolConfig::default()).unwrap();
        let seqs = spool.append_facts(facts).unwrap();
        assert_eq!((seqs.first(), seqs.last()), (Some(&1), Some(&(facts.len() as u64))));
        let spool = Arc::new(Mutex::new(spool));
        let dead_letter = dir.join("dead-letter.jsonl");
        let sender = Sender::new(DeliveryConfig {
            server: server.into(),
            token: token.into(),
            cluster: Some("deliv".into()),
            agent: AgentInfo { version: "e2e".into(), mode: "cluster".into(), node: None, spool: None },
            max_batch_facts: batch,
            max_batch_bytes: 4 << 20,
            dead_letter: dead_letter.clone(),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        })
        .unwrap();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(sender.run(spool.clone(), stop_rx, Duration::from_millis(50)));
        Self { spool, stop, task, dead_letter }
    }

    fn acked(&self) -> u64 {
        self.spool.lock().unwrap().acked()
    }

    fn pending(&self) -> u64 {
        self.spool.lock().unwrap().pending_count()
    }

    async fn wait_acked(&self, at_least: u64, timeout: Duration, what: &str) {
        let started = Instant::now();
        while self.acked() < at_least {
            assert!(
                started.elapsed() < timeout,
                "{what}: only {} of {at_least} acknowledged after {timeout:?}",
                self.acked()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the spool is empty, then stops the sender.
    async fn drain(self, total: u64, timeout: Duration, what: &str) -> Arc<Mutex<Spool>> {
        self.wait_acked(total, timeout, what).await;
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task).await.expect("the sender stops once drained").unwrap();
        let spool = self.spool.lock().unwrap();
        assert_eq!((spool.pending_count(), spool.acked()), (0, total), "{what}");
        drop(spool);
        self.spool
    }
}

/// `gpuledger-server demo` on a port the test chooses (so a restart comes back at the same address).
struct Server {
    child: Option<Child>,
    base: String,
    log: PathBuf,
}

impl Server {
    async fn start(port: u16, db_url: &str, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary("gpuledger-server").unwrap())
            .args(["demo", "--listen", &format!("127.0.0.1:{port}")])
            .env("DATABASE_URL", db_url)
            .env("GPULEDGER_DEMO_HISTORY", "false")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = Self { child: Some(child), base: format!("http://127.0.0.1:{port}"), log };
        let started = Instant::now();
        loop {
            let url = format!("{}/readyz", server.base);
            if let Ok((200, _)) = tokio::task::spawn_blocking(move || http_get(&url)).await.unwrap() {
                return server;
            }
            let exited = server.child.as_mut().unwrap().try_wait().unwrap();
            assert!(
                exited.is_none() && started.elapsed() < Duration::from_secs(60),
                "server not ready ({exited:?}):\n{}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kill9(&mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        signal(child.id(), "KILL").unwrap();
        child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A fresh database served by `demo` (migrations serialized across test processes), and an agent token.
async fn ledger(dir: &Path, log: &str) -> (gpuledger_e2e::TestDatabase, u16, Server, String) {
    let db = fresh_database().await.unwrap();
    let port = free_port().unwrap();
    let url = db.admin_url.clone();
    let log = dir.join(log);
    let server = with_cluster_lock(async { Ok(Server::start(port, &url, log).await) }).await.unwrap();
    let out = Command::new(binary("gpuledger-server").unwrap())
        .args(["token", "create", "--org", "demo", "--scope", "agent:deliv"])
        .env("DATABASE_URL", &db.admin_url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8_lossy(&out.stdout).lines().last().unwrap().trim().to_string();
    (db, port, server, token)
}

#[derive(Debug, PartialEq, sqlx::FromRow)]
struct IntervalRow {
    allocation_id: String,
    holder_name: String,
    units: i32,
    gpu_class: Option<String>,
    sharing_mode: String,
    profile: Option<String>,
    replicas: Option<i32>,
    fraction_num: Option<i64>,
    fraction_den: Option<i64>,
    started_at: OffsetDateTime,
    ended_at: Option<OffsetDateTime>,
    end_estimated: bool,
    confidence: String,
    inventory_gap: Option<String>,
}

/// What the ledger holds for cluster `deliv`.
#[derive(Debug, PartialEq)]
struct Ledger {
    /// Rows, distinct (GPU, window) keys, summed samples, digest of every row's content.
    telemetry: (i64, i64, i64, String),
    /// Rows, distinct event IDs, digest of every event's ID and payload.
    events: (i64, i64, String),
    intervals: Vec<IntervalRow>,
}

async fn ledger_state(url: &str) -> Ledger {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let cluster = "(SELECT cluster_id FROM clusters WHERE name = 'deliv')";
    // Windows in both tiers: the hours' counts and sums, and the full-resolution blocks (deterministic for a set of
    // windows, however and how often they arrived).
    let telemetry = sqlx::query_as(&format!(
        "SELECT coalesce(sum(h.windows + h.inst_windows), 0)::bigint, count(*), coalesce(sum(h.samples), 0)::bigint,
                coalesce(md5(string_agg(concat_ws('|', s.gpu_uuid, s.node, h.hour, h.windows, h.sampled_ms,
                    h.util_sum, h.util_max, h.power_max, h.energy_j, h.instances, h.inst_windows, md5(h.inst_sums),
                    md5(h.block)), ',' ORDER BY s.gpu_uuid, h.hour)), '')
           FROM telemetry_gpu_hours h
           JOIN telemetry_series s ON s.org_id = h.org_id AND s.series_id = h.series_id
          WHERE s.cluster_id = {cluster}"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    let events = sqlx::query_as(&format!(
        "SELECT count(*), count(DISTINCT event_id),
                coalesce(md5(string_agg(event_id || payload::text, ',' ORDER BY event_id)), '')
           FROM allocation_events WHERE cluster_id = {cluster}"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    let intervals = sqlx::query_as(&format!(
        "SELECT allocation_id, holder_name, units, gpu_class, sharing_mode, profile, replicas, fraction_num,
                fraction_den, started_at, ended_at, end_estimated, confidence, inventory_gap
           FROM allocation_intervals WHERE cluster_id = {cluster} ORDER BY allocation_id"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    Ledger { telemetry, events, intervals }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_the_server_mid_stream_loses_and_duplicates_nothing() {
    const TOTAL: usize = 20_000;
    let facts = stream(TOTAL);
    let dir = temp_dir("gl-e2e-deliv").unwrap();

    // The faulty run: SIGKILL while batches are in flight, down a while, back on the same address.
    let (db, port, mut server, token) = ledger(&dir, "server1.log").await;
    let run_started = Instant::now();
    let delivery = Delivery::start(&server.base, &token, &dir.join("faulty"), &facts, 200);
    delivery.wait_acked(4_000, Duration::from_secs(60), "before the kill").await;
    let status = server.kill9();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status}");
    // A response already in the socket when the server died may still be read: let it settle first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let acked_at_kill = delivery.acked();
    assert!(acked_at_kill < TOTAL as u64, "the server died with {acked_at_kill} of {TOTAL} acknowledged");
    // Everything acknowledged was committed; at most the one batch in flight was committed without its ack.
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    let stored_at_kill: i64 = sqlx::query_scalar(
        "SELECT (SELECT coalesce(sum(h.windows + h.inst_windows), 0) FROM telemetry_gpu_hours h JOIN telemetry_series s
                   ON s.org_id = h.org_id AND s.series_id = h.series_id WHERE s.cluster_id = c.cluster_id)
              + (SELECT count(*) FROM allocation_events WHERE cluster_id = c.cluster_id)
           FROM clusters c WHERE name = 'deliv'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    assert!(
        (acked_at_kill as i64..=acked_at_kill as i64 + 200).contains(&stored_at_kill),
        "{stored_at_kill} facts stored, {acked_at_kill} acknowledged"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(delivery.acked(), acked_at_kill, "nothing is acknowledged while the server is down");
    assert!(delivery.pending() > 0);
    let dead_letter = delivery.dead_letter.clone();
    let server2 = Server::start(port, &db.admin_url, dir.join("server2.log")).await;
    let spool = delivery.drain(TOTAL as u64, Duration::from_secs(120), "after the restart").await;
    drop(spool);
    // An agent that lost its acknowledgements sends the stretch around the kill once more: stored once.
    Delivery::start(&server2.base, &token, &dir.join("replay"), &facts[3_000..5_000], 200)
        .drain(2_000, Duration::from_secs(60), "replay")
        .await;
    let faulty = ledger_state(&db.admin_url).await;
    drop(server2);
    eprintln!(
        "faulty run: killed with {acked_at_kill} acknowledged, {stored_at_kill} stored; drained after {:?}",
        run_started.elapsed()
    );
    assert!(
        !dead_letter.exists(),
        "nothing was refused: {}",
        std::fs::read_to_string(&dead_letter).unwrap_or_default()
    );

    // The fault-free run into a fresh database.
    let (db2, _, server3, token2) = ledger(&dir, "server3.log").await;
    let run_started = Instant::now();
    let delivery = Delivery::start(&server3.base, &token2, &dir.join("clean"), &facts, 200);
    delivery.drain(TOTAL as u64, Duration::from_secs(120), "fault-free run").await;
    let clean = ledger_state(&db2.admin_url).await;
    drop(server3);
    eprintln!("fault-free run drained after {:?}", run_started.elapsed());

    // 19,000 rollups and 1,000 allocation facts for 500 allocations (50 of them vanished: estimated ends).
    // Windows and samples summed over the device-hours; the hours and their blocks equal the fault-free run's below.
    assert_eq!((faulty.telemetry.0, faulty.telemetry.2), (19_000, 19_000 * 60));
    assert!(faulty.telemetry.1 > 0);
    assert_eq!((faulty.events.0, faulty.events.1), (1_000, 1_000));
    assert_eq!(faulty.intervals.len(), 500);
    assert_eq!(faulty.intervals.iter().filter(|r| r.ended_at.is_some()).count(), 500);
    assert_eq!(faulty.intervals.iter().filter(|r| r.end_estimated).count(), 50);
    assert_eq!(
        faulty.intervals.iter().filter(|r| r.fraction_num.is_some() && r.inventory_gap.is_none()).count(),
        500,
        "every allocation priced from the demo inventory: {:?}",
        faulty.intervals.iter().find(|r| r.fraction_num.is_none())
    );
    assert_eq!(faulty.telemetry, clean.telemetry);
    assert_eq!(faulty.events, clean.events);
    assert!(faulty.intervals == clean.intervals, "intervals differ");
    let _ = std::fs::remove_dir_all(&dir);
}

fn problem(status: u16, headers: Vec<(&'static str, String)>, detail: &str) -> Reply {
    Reply::Status {
        status,
        headers,
        body: serde_json::json!({"type": "about:blank", "title": "error", "status": status, "detail": detail})
            .to_string(),
    }
}

fn ids(facts: &[Fact]) -> Vec<String> {
    facts.iter().map(|f| f.event_id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_on_503_and_429_then_delivers() {
    let facts: Vec<Fact> = (0..500).map(telemetry).collect();
    let stub = StubIngest::start(Arc::new(|n, _: &[String]| match n {
        0 | 1 => problem(503, vec![], "database unavailable"),
        2 => problem(429, vec![("retry-after", "0".into())], "slow down"),
        _ => Reply::Ack,
    }))
    .await
    .unwrap();
    let dir = temp_dir("gl-e2e-deliv-retry").unwrap();
    let started = Instant::now();
    let delivery = Delivery::start(&stub.base, "glt_stub", &dir, &facts, 200);
    let dead_letter = delivery.dead_letter.clone();
    delivery.drain(500, Duration::from_secs(20), "through 503, 503, 429").await;
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());

    let received = stub.received();
    let statuses: Vec<u16> = received.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 503, 429, 200, 200, 200]);
    let all = ids(&facts);
    for r in &received[..4] {
        assert_eq!(r.event_ids, all[..200], "the same first batch, again");
    }
    let delivered: Vec<String> = received[3..].iter().flat_map(|r| r.event_ids.clone()).collect();
    assert_eq!(delivered, all, "every fact acknowledged once, in order");
    assert!(received.iter().all(|r| r.authorization == "Bearer glt_stub"));
    assert!(!dead_letter.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_fact_is_dead_lettered_and_the_rest_delivered() {
    // 450 facts in batches of 200; the server refuses seq 202 (second in its batch) and seq 450 (the very
    // last fact, so the spool must also move past a dead-lettered record with nothing after it).
    let mut facts: Vec<Fact> = (0..450).map(telemetry).collect();
    for i in [201, 449] {
        facts[i] = Fact {
            event_id: format!("alloc-end/bad-{i}"),
            observed_at: T0,
            body: FactBody::AllocationEnded(AllocationEnd {
                allocation_id: format!("bad-{i}"),
                ended_at: T0,
                reason: EndReason::Deleted,
            }),
        };
    }
    let refused = ["alloc-end/bad-201".to_string(), "alloc-end/bad-449".to_string()];
    let policy_refused = refused.clone();
    let stub = StubIngest::start(Arc::new(move |_, ids: &[String]| {
        match ids.iter().position(|id| policy_refused.contains(id)) {
            Some(i) => Reply::Status {
                status: 422,
                headers: vec![],
                body: serde_json::json!({
                    "type": "about:blank", "title": "Unprocessable Entity", "status": 422,
                    "field": format!("facts[{i}].ended_at"),
                    "detail": format!("facts[{i}].ended_at: is before the allocation's start"),
                })
                .to_string(),
            },
            None => Reply::Ack,
        }
    }))
    .await
    .unwrap();
    let dir = temp_dir("gl-e2e-deliv-dead").unwrap();
    let delivery = Delivery::start(&stub.base, "glt_stub", &dir, &facts, 200);
    let dead_letter = delivery.dead_letter.clone();
    delivery.drain(450, Duration::from_secs(20), "past two refused facts").await;

    let received = stub.received();
    let statuses: Vec<u16> = received.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 422, 200, 422, 200]);
    let mut delivered: Vec<String> =
        received.iter().filter(|r| r.status == 200).flat_map(|r| r.event_ids.clone()).collect();
    let mut expected: Vec<String> = ids(&facts).into_iter().filter(|id| !refused.contains(id)).collect();
    assert_eq!(delivered.len(), 448);
    delivered.sort();
    expected.sort();
    assert_eq!(delivered, expected, "the rest, each exactly once");
    // The refused batches' other facts went again, without the refused one.
    assert_eq!(received[1].event_ids.len(), 200);
    assert_eq!(received[2].event_ids.len(), 200);
    assert!(received[2].event_ids.contains(&received[1].event_ids[0]));
    assert_eq!(received[3].event_ids.len(), 49);
    assert_eq!(received[4].event_ids, received[3].event_ids[..48]);

    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&dead_letter).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, (seq, index, id)) in lines.iter().zip([(202, 1, &refused[0]), (450, 48, &refused[1])]) {
        assert_eq!(line["seq"], seq);
        assert_eq!(line["status"], 422);
        assert_eq!(line["field"], format!("facts[{index}].ended_at"));
        assert_eq!(line["reason"], format!("facts[{index}].ended_at: is before the allocation's start"));
        assert_eq!(line["fact"]["event_id"], id.as_str());
        assert_eq!(line["fact"]["kind"], "allocation_ended");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unexpected_answer_keeps_every_fact() {
    // A proxy answering 404 (or a 409, or a 400 about the envelope) says nothing against the facts: they stay
    // in the spool and are delivered once the real server answers.
    let facts: Vec<Fact> = (0..300).map(telemetry).collect();
    let stub = StubIngest::start(Arc::new(|n, _: &[String]| match n {
        0 => problem(404, vec![], "no route"),
        1 => problem(409, vec![], "conflict"),
        2 => problem(400, vec![], "bad envelope"),
        _ => Reply::Ack,
    }))
    .await
    .unwrap();
    let dir = temp_dir("gl-e2e-deliv-404").unwrap();
    let delivery = Delivery::start(&stub.base, "glt_stub", &dir, &facts, 200);
    let dead_letter = delivery.dead_letter.clone();
    delivery.drain(300, Duration::from_secs(30), "through 404, 409, 400").await;
    let statuses: Vec<u16> = stub.received().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [404, 409, 400, 200, 200]);
    let delivered: Vec<String> = stub.received()[3..].iter().flat_map(|r| r.event_ids.clone()).collect();
    assert_eq!(delivered, ids(&facts));
    assert!(!dead_letter.exists(), "nothing may be dead-lettered for an answer that names no fact");
    let _ = std::fs::remove_dir_all(&dir);
}
