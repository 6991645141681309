//! Ingest through the endpoint at a fleet's cadence (issue 31, part 6): telemetry windows of `GL_BENCH_GPUS` GPUs
//! (default 10,000) sent to `POST /api/v1/ingest/batches` of the release server — the whole path: HTTP, the agent
//! token, gzip, the JSON limits, decoding, the organization's transaction, the tiers' merge — while a reader keeps
//! asking for the organization's months. The goal: ≥ 50× real time for a 10,000-GPU fleet, ≈ 8,300 windows/s.
//!
//! ```sh
//! cargo bench -p gpuledger-server --bench ingest_http                         # 10,000 GPUs: 10 minutes, then 125 caught up
//! GL_BENCH_GPUS=2000 GL_BENCH_MINUTES=5 cargo bench -p gpuledger-server --bench ingest_http
//! ```
//!
//! The server is `demo --history false` on its own embedded PostgreSQL (a temporary directory, removed at the end):
//! only the demo organization, no history. Each request is what a node agent sends: one node's windows (8 GPUs), its
//! name and spool state. Two shapes:
//! - **node cadence**: as the agents go, one request per node and minute (8 windows), `GL_BENCH_MINUTES` minutes of
//!   the fleet (default 10; 1,440 is the issue's day);
//! - **catch-up**: every node delivering its spool after an outage, 125 minutes a request (1,000 windows),
//!   `GL_BENCH_CATCHUP_MINUTES` minutes of the fleet (default 125).
//!
//! `GL_BENCH_SENDERS` (default 32) requests are in flight at once: 1,250 agents post on their own, so at 50× real
//! time (~1,040 requests/s) and ~25 ms a request, Little's law puts ~26 of them in flight; 8 is the closed-loop
//! floor earlier runs used. `GL_BENCH_DATABASE_URL` (a superuser's URL of an
//! empty database) runs it on a PostgreSQL of your own instead, e.g. one with `pg_stat_statements` to see where the
//! time goes. The reference is real time: the fleet's own rate
//! (GPUs / 60 windows a second). Results are printed as markdown; see docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::unit;

use std::{
    io::Write,
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use gpuledger_core::wire::{AgentInfo, Batch, Fact, FactBody, SpoolState, Stat, TelemetryRollup, WIRE_VERSION};
use time::OffsetDateTime;
use uuid::Uuid;

const GPUS_PER_NODE: usize = 8;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The server process and its directory, stopped and removed on drop.
struct Server {
    child: Child,
    dir: PathBuf,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM lets it stop its embedded PostgreSQL.
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `DATABASE_URL` for the server, when `GL_BENCH_DATABASE_URL` names a database of the caller's.
fn database() -> Option<(&'static str, String)> {
    std::env::var("GL_BENCH_DATABASE_URL").ok().map(|url| ("DATABASE_URL", url))
}

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_gpuledger-server")
}

fn start() -> Server {
    let dir = std::env::temp_dir().join(format!("gl-ingest-http-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let child = Command::new(exe())
        .args(["demo", "--history", "false", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir.join("data"))
        .env_remove("DATABASE_URL")
        .envs(database())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Server { child, dir, base: format!("http://127.0.0.1:{port}") }
}

fn token(server: &Server, scope: &str) -> String {
    let out = Command::new(exe())
        .args(["token", "create", "--org", "demo", "--scope", scope, "--data-dir"])
        .arg(server.dir.join("data"))
        .env_remove("DATABASE_URL")
        .envs(database())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "token create {scope} failed");
    String::from_utf8(out.stdout).unwrap().lines().last().unwrap().trim().to_string()
}

/// One window of GPU `g`, minute `m` (values vary like a busy fleet's).
fn window(base: OffsetDateTime, g: usize, m: usize) -> Fact {
    let start = base + time::Duration::minutes(m as i64);
    let r = ((m * 1_000_003 + g) as u64) * 8;
    let (util, mem, power) = (35.0 + 60.0 * unit(r), 20_000.0 + 55_000.0 * unit(r + 1), 150.0 + 500.0 * unit(r + 2));
    let stat = |avg: f64, spread: f64, lo: f64, hi: f64| Stat {
        min: (avg - spread).max(lo),
        avg,
        max: (avg + spread).min(hi),
    };
    let gpu = format!("GPU-{}", Uuid::from_u128(0x5a17_0000_0000_4000_8000_0000_0000_0000 | g as u128));
    Fact {
        event_id: format!("telemetry/{gpu}/-1/{}", start.unix_timestamp() / 60),
        observed_at: start + time::Duration::seconds(62),
        body: FactBody::Telemetry(TelemetryRollup {
            node: format!("gpu-node-{:05}", g / GPUS_PER_NODE),
            gpu_uuid: gpu,
            gpu_instance_id: None,
            mig_profile: None,
            window_start: start,
            window_end: start + time::Duration::minutes(1),
            samples: 6,
            utilization_pct: Some(stat(util, 5.0, 0.0, 100.0)),
            memory_used_mib: Some(stat(mem, 0.0, 0.0, 81_559.0)),
            power_w: Some(stat(power, 20.0, 60.0, 700.0)),
            energy_j: Some((power * 60.0).round()),
            pod: None,
        }),
    }
}

/// A node agent's request: its node's windows, with its name and spool as the agent reports them.
fn body(node: usize, facts: Vec<Fact>, pending: usize) -> Vec<u8> {
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo {
            version: "bench".into(),
            mode: "node".into(),
            node: Some(format!("gpu-node-{node:05}")),
            spool: Some(SpoolState {
                pending_facts: pending as u64,
                pending_bytes: pending as u64 * 400,
                dropped_facts: 0,
                disk_bytes: 64 << 20,
                max_bytes: 512 << 20,
            }),
        },
        cluster: None,
        facts,
    };
    let json = serde_json::to_vec(&batch).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&json).unwrap();
    gz.finish().unwrap()
}

struct Shape {
    name: &'static str,
    /// Minutes of each node's windows per request: 1 as an agent sends as it goes, more when it delivers its spool.
    minutes_per_request: usize,
    /// Minutes of the fleet sent.
    minutes: usize,
}

struct Outcome {
    windows: usize,
    requests: usize,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    failed: usize,
}

/// Sends minutes `[from, from + shape.minutes)` of `gpus` GPUs as their nodes' agents would: each request one node's
/// GPUs over `shape.minutes_per_request` minutes, the fleet's nodes taking turns, `senders` requests at a time.
async fn send(
    base_url: &str,
    token: &str,
    gpus: usize,
    base: OffsetDateTime,
    from: usize,
    shape: &Shape,
    senders: usize,
) -> Outcome {
    // The requests, as (node, first minute, minutes): prepared before timing.
    let mut jobs: Vec<(usize, usize, usize)> = Vec::new();
    let mut m = from;
    while m < from + shape.minutes {
        let n = shape.minutes_per_request.min(from + shape.minutes - m);
        for node in 0..gpus / GPUS_PER_NODE {
            jobs.push((node, m, n));
        }
        m += n;
    }
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        jobs.iter()
            .map(|&(node, m, n)| {
                let facts = (m..m + n)
                    .flat_map(|m| (node * GPUS_PER_NODE..(node + 1) * GPUS_PER_NODE).map(move |g| window(base, g, m)))
                    .collect::<Vec<_>>();
                let pending = (from + shape.minutes - m) * GPUS_PER_NODE;
                body(node, facts, pending)
            })
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let client = reqwest::Client::builder().pool_max_idle_per_host(senders).build().unwrap();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..senders {
        let (bodies, next, failed, client) = (bodies.clone(), next.clone(), failed.clone(), client.clone());
        let url = format!("{base_url}/api/v1/ingest/batches");
        let auth = format!("Bearer {token}");
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(b) = bodies.get(i) else { break };
                let t = Instant::now();
                // Retried as an agent would (503 with Retry-After while the server is busy), timed as a whole.
                loop {
                    let r = client
                        .post(&url)
                        .header("authorization", &auth)
                        .header("content-type", "application/json")
                        .header("content-encoding", "gzip")
                        .body(b.clone())
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status().is_success() => break,
                        Ok(r) if r.status().as_u16() == 503 || r.status().as_u16() == 429 => {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Ok(r) => {
                            let status = r.status();
                            let text = r.text().await.unwrap_or_default();
                            eprintln!("request {i}: {status} {}", text.chars().take(300).collect::<String>());
                            failed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Err(e) => {
                            eprintln!("request {i}: {e}");
                            failed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                }
                latencies.push(t.elapsed().as_secs_f64() * 1_000.0);
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    Outcome {
        windows: gpus * shape.minutes,
        requests: jobs.len(),
        seconds,
        p50_ms: pick(0.5),
        p99_ms: pick(0.99),
        failed: failed.load(Ordering::Relaxed),
    }
}

fn main() {
    let gpus = env_usize("GL_BENCH_GPUS", 10_000).div_ceil(GPUS_PER_NODE) * GPUS_PER_NODE;
    let minutes = env_usize("GL_BENCH_MINUTES", 10).max(1);
    let senders = env_usize("GL_BENCH_SENDERS", 32).max(1);
    let catch_up = env_usize("GL_BENCH_CATCHUP_MINUTES", 125).max(1);
    let server = start();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let ready = Instant::now();
        loop {
            if let Ok(r) = client.get(format!("{}/readyz", server.base)).send().await
                && r.status().is_success()
            {
                break;
            }
            assert!(ready.elapsed() < Duration::from_secs(300), "the server did not get ready (see its log)");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let agent = token(&server, "agent:bench-fleet");
    let admin = token(&server, "admin");
    // Windows of the last hours before now (this month's and last month's partitions exist from the start).
    let now = OffsetDateTime::now_utc();
    let base = (now - time::Duration::minutes((minutes + catch_up + 60) as i64))
        .replace_minute(0)
        .unwrap()
        .replace_second(0)
        .unwrap()
        .replace_nanosecond(0)
        .unwrap();
    runtime.block_on(async {
        // A reader asking for the organization's months all along (a stored read, as the portal's pages make; the
        // organization has no policy, so the ledger itself would answer 409).
        let reading = Arc::new(AtomicBool::new(true));
        let reads = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (reading, reads) = (reading.clone(), reads.clone());
            let url = format!("{}/api/v1/periods", server.base);
            let auth = format!("Bearer {admin}");
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut bad = 0;
                while reading.load(Ordering::Relaxed) {
                    match client.get(&url).header("authorization", &auth).send().await {
                        Ok(r) if r.status().is_success() => {
                            let _ = r.bytes().await;
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => {
                            if bad == 0 {
                                eprintln!("read answered {}", r.status());
                            }
                            bad += 1;
                        }
                        Err(e) => {
                            if bad == 0 {
                                eprintln!("read failed: {e}");
                            }
                            bad += 1;
                        }
                    }
                }
                bad
            })
        };
        println!(
            "\n{gpus} GPUs ({} nodes), {minutes} minutes of the fleet at node cadence, {catch_up} caught up, {senders} requests in flight; real time is {:.0} windows/s\n",
            gpus / GPUS_PER_NODE,
            gpus as f64 / 60.0
        );
        println!("| shape | windows | requests | seconds | windows/s | × real time | request p50 ms | p99 ms | failed |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let shapes = [
            Shape { name: "node cadence (a node's 8 windows a request)", minutes_per_request: 1, minutes },
            Shape { name: "catch-up (a node's spool: 125 minutes, 1,000 windows a request)", minutes_per_request: 125, minutes: catch_up },
        ];
        let read_started = Instant::now();
        let mut from = 0;
        for shape in &shapes {
            let o = send(&server.base, &agent, gpus, base, from, shape, senders).await;
            from += shape.minutes;
            let rate = o.windows as f64 / o.seconds;
            println!(
                "| {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {} |",
                shape.name,
                o.windows,
                o.requests,
                o.seconds,
                rate,
                rate / (gpus as f64 / 60.0),
                o.p50_ms,
                o.p99_ms,
                o.failed
            );
            assert_eq!(o.failed, 0, "requests failed (see above)");
        }
        reading.store(false, Ordering::Relaxed);
        let bad = reader.await.unwrap();
        println!(
            "\nreads of /api/v1/periods meanwhile: {} ({:.0}/s), failed {bad}",
            reads.load(Ordering::Relaxed),
            reads.load(Ordering::Relaxed) as f64 / read_started.elapsed().as_secs_f64()
        );
        assert_eq!(bad, 0, "reads failed while ingesting");
    });
}
