//! Ingest benchmark: sustained ingest of telemetry rows and allocation facts into PostgreSQL with durable commits
//! and row-level security, by batch size, beside PostgreSQL's own limit measured in the same run (COPY of the
//! same rows into a bare table: no primary key, no index, no RLS).
//!
//! ```sh
//! cargo bench -p gpuledger-server --bench ingest
//! ```
//!
//! It starts its own throwaway PostgreSQL cluster from the machine's `initdb`/`pg_ctl` (as the `postgres` OS user
//! when run as root) with PostgreSQL's durable defaults — `fsync=on`, `synchronous_commit=on`,
//! `full_page_writes=on` — and stops it at the end (also on panic; a watchdog stops it if the process is killed).
//! The cluster lives under `GPULEDGER_BENCH_DIR` when set, else the system temporary directory: put it on the disk
//! you want measured (a tmpfs makes `fsync` free and the numbers meaningless; the bench says which it got).
//!
//! The ingest path measured is what `POST /api/v1/ingest/batches` does after decoding: one `begin_org`
//! transaction per batch (as `gpuledger_app`, RLS enforced), `ingest::store`, `commit`. Decoding (gzip + JSON) is
//! measured separately, in process. Results are printed as a markdown table; see `docs/benchmarks.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::unit;

use std::{
    io::Write,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::http::{HeaderMap, HeaderValue, header};
use gpuledger_core::{
    ids::{ClusterId, OrgId},
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AttributionLabels, Batch, EndReason, Fact, FactBody, Holder, PodRef,
        Stat, TelemetryRollup, WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    auth,
    db::{self, AppLogin, Database},
    demo,
    embedded::{find_program, is_root},
    ingest,
};
use sqlx::{Connection, PgConnection};
use time::{OffsetDateTime, format_description::well_known::Rfc3339, macros::datetime};
use uuid::Uuid;

/// Telemetry rows per batch size (the run stops earlier if it takes longer than [`BUDGET`]).
const ROWS_PER_SIZE: usize = 200_000;
/// Most time spent on one measurement.
const BUDGET: Duration = Duration::from_secs(15);
/// Batch sizes measured for telemetry.
const BATCH_SIZES: [usize; 3] = [100, 1_000, 5_000];
/// Concurrent writers for the concurrent telemetry line (the app pool has as many connections).
const WRITERS: usize = 4;
/// Allocation facts measured (start + end pairs), in batches of [`ALLOCATION_BATCH`].
const ALLOCATION_FACTS: usize = 40_000;
const ALLOCATION_BATCH: usize = 1_000;
/// GPUs reporting one telemetry row per minute each.
const GPUS: usize = 1_000;
const GPUS_PER_NODE: usize = 8;
/// Telemetry windows start here (one month, so one partition; the partition is created before timing).
const BASE: OffsetDateTime = datetime!(2025-06-01 00:00 UTC);
const GPU_MODEL: &str = "NVIDIA H100 80GB HBM3";
const APP_PASSWORD: &str = "gpuledger-bench-app";

fn main() {
    let pg = Postgres::start();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(run(&pg));
    drop(runtime);
    drop(pg); // stops the cluster and removes its directory
}

// ---------------------------------------------------------------------------------------------------------------
// The throwaway cluster.

struct Postgres {
    dir: PathBuf,
    pgdata: PathBuf,
    pg_ctl: PathBuf,
    root: bool,
    port: u16,
    /// Stops the cluster if this process dies without running `Drop` (its stdin closes on exit).
    watchdog: Option<(Child, ChildStdin)>,
}

impl Postgres {
    fn start() -> Self {
        let find = |name: &str| {
            find_program(name, None)
                .unwrap_or_else(|| panic!("{name} not found: install PostgreSQL 15+ server binaries"))
        };
        let initdb = find("initdb");
        let pg_ctl = find("pg_ctl");
        let root = is_root();
        let parent = std::env::var_os("GPULEDGER_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
        let dir = parent.join(format!("gpuledger-bench-pg-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("creating the cluster directory");
        if root {
            let ok = Command::new("chown").arg("postgres").arg(&dir).status().expect("chown");
            assert!(ok.success(), "cannot chown {} to the postgres OS user (initdb refuses root)", dir.display());
        }
        let pgdata = dir.join("data");
        let out = runner(root, &initdb)
            .arg("-D")
            .arg(&pgdata)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"])
            .output()
            .expect("running initdb");
        assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        let port = TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("port").port();
        // Durable defaults: nothing here touches fsync, synchronous_commit or full_page_writes.
        let options = format!("-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=");
        let out = runner(root, &pg_ctl)
            .arg("-D")
            .arg(&pgdata)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .expect("running pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(dir.join("log")).unwrap_or_default()
        );
        let stop = format!(
            "cat >/dev/null; {} {} -D '{}' -m immediate stop >/dev/null 2>&1; rm -rf '{}'",
            if root { "runuser -u postgres --" } else { "" },
            pg_ctl.display(),
            pgdata.display(),
            dir.display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &stop])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the cluster watchdog");
        let mut stdin = child.stdin.take().expect("watchdog stdin");
        stdin.flush().expect("watchdog stdin");
        Self { dir, pgdata, pg_ctl, root, port, watchdog: Some((child, stdin)) }
    }

    fn superuser_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn app_url(&self) -> String {
        format!("postgres://gpuledger_app:{APP_PASSWORD}@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = runner(self.root, &self.pg_ctl).arg("-D").arg(&self.pgdata).args(["-m", "fast", "-w", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

fn runner(root: bool, program: &Path) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("({program} failed: {e})"))
}

// ---------------------------------------------------------------------------------------------------------------
// Test data.

struct Fleet {
    gpus: Vec<String>,
    nodes: Vec<String>,
    pod_uids: Vec<Uuid>,
}

impl Fleet {
    fn new() -> Self {
        Self {
            gpus: (0..GPUS)
                .map(|g| format!("GPU-{}", Uuid::from_u128(0x5a17_0000_0000_4000_8000_0000_0000_0000 | g as u128)))
                .collect(),
            nodes: (0..GPUS).map(|g| format!("gpu-node-{:04}", g / GPUS_PER_NODE)).collect(),
            pod_uids: (0..GPUS)
                .map(|g| Uuid::from_u128(0x90d0_0000_0000_4000_8000_0000_0000_0000 | g as u128))
                .collect(),
        }
    }

    /// The `seq`-th telemetry row: GPU `seq % GPUS`, minute `seq / GPUS` (unique keys for every `seq`).
    fn telemetry(&self, seq: usize) -> Fact {
        let g = seq % GPUS;
        let minute = (seq / GPUS) as i64;
        let start = BASE + time::Duration::minutes(minute);
        let r = seq as u64 * 16;
        let util = 35.0 + 60.0 * unit(r);
        let mem = 20_000.0 + 55_000.0 * unit(r + 1);
        let power = 150.0 + 500.0 * unit(r + 2);
        let stat = |avg: f64, spread: f64, lo: f64, hi: f64| Stat {
            min: (avg - spread).max(lo),
            avg,
            max: (avg + spread).min(hi),
        };
        // Three GPUs in four are busy with a pod the exporter names.
        let pod = (g % 4 != 3).then(|| PodRef {
            namespace: "nlp-research".into(),
            name: format!("train-llm-{}-worker-{}", g / GPUS_PER_NODE, g % GPUS_PER_NODE),
            uid: Some(self.pod_uids[g]),
            container: Some("main".into()),
        });
        Fact {
            event_id: format!("telemetry/{}/-1/{minute}", self.gpus[g]),
            observed_at: start + time::Duration::seconds(62),
            body: FactBody::Telemetry(TelemetryRollup {
                node: self.nodes[g].clone(),
                gpu_uuid: self.gpus[g].clone(),
                gpu_instance_id: None,
                mig_profile: None,
                window_start: start,
                window_end: start + time::Duration::minutes(1),
                samples: 4,
                utilization_pct: Some(stat(util, 20.0 * unit(r + 3), 0.0, 100.0)),
                memory_used_mib: Some(stat(mem, 2_000.0 * unit(r + 4), 0.0, 81_559.0)),
                power_w: Some(stat(power, 80.0 * unit(r + 5), 60.0, 700.0)),
                energy_j: Some(power * 60.0),
                pod,
            }),
        }
    }

    fn telemetry_range(&self, from: usize, n: usize) -> Vec<Fact> {
        (from..from + n).map(|s| self.telemetry(s)).collect()
    }

    /// The `seq`-th allocation: a start and an end (exclusive H100, 37 minutes), both with their real event IDs.
    fn allocation(&self, seq: usize) -> [Fact; 2] {
        let g = seq % GPUS;
        let uid = Uuid::from_u128(0xa110_0000_0000_4000_8000_0000_0000_0000 | seq as u128);
        let uid_s = uid.to_string();
        let resource = "nvidia.com/gpu";
        let allocation_id = format!("{uid_s}/main/{resource}");
        let started_at = BASE + time::Duration::minutes((seq / GPUS) as i64 * 40);
        let ended_at = started_at + time::Duration::minutes(37);
        let start = Fact {
            event_id: event_id("alloc-start", &[&uid_s, "main", resource]),
            observed_at: started_at + time::Duration::seconds(1),
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Pod,
                holder_uid: uid,
                holder_name: format!("train-llm-{seq}-worker-0"),
                namespace: "nlp-research".into(),
                namespace_uid: Some(Uuid::from_u128(0x5ace_0000_0000_4000_8000_0000_0000_0001)),
                container: Some("main".into()),
                node: Some(self.nodes[g].clone()),
                resource: resource.into(),
                units: 1,
                mode: SharingMode::Exclusive,
                gpu_model: Some(GPU_MODEL.into()),
                device_ids: vec![self.gpus[g].clone()],
                started_at,
                labels: AttributionLabels {
                    tenant: Some("nlp-research".into()),
                    model: Some("llama-3-70b".into()),
                    ..AttributionLabels::default()
                },
            }),
        };
        let end = Fact {
            event_id: event_id("alloc-end", &[&uid_s, "main", resource]),
            observed_at: ended_at + time::Duration::seconds(1),
            body: FactBody::AllocationEnded(AllocationEnd { allocation_id, ended_at, reason: EndReason::Finished }),
        };
        [start, end]
    }
}

/// The telemetry rows as `COPY … (FORMAT csv)` text, with the offsets where each row starts (plus the end).
fn csv_rows(facts: &[Fact], org: OrgId, cluster: ClusterId) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::with_capacity(facts.len() * 400);
    let mut offsets = Vec::with_capacity(facts.len() + 1);
    let opt = |v: Option<f32>| v.map(|v| v.to_string()).unwrap_or_default();
    for f in facts {
        offsets.push(out.len());
        let FactBody::Telemetry(t) = &f.body else { unreachable!("telemetry only") };
        let stats = [t.utilization_pct, t.memory_used_mib, t.power_w];
        let mut cols: Vec<String> = vec![
            org.as_uuid().to_string(),
            cluster.as_uuid().to_string(),
            t.gpu_uuid.clone(),
            t.gpu_instance_id.map_or(-1, |v| v as i32).to_string(),
            t.window_start.format(&Rfc3339).expect("rfc3339"),
            t.window_end.format(&Rfc3339).expect("rfc3339"),
            t.node.clone(),
            t.mig_profile.clone().unwrap_or_default(),
            t.samples.to_string(),
        ];
        for s in stats {
            cols.push(opt(s.map(|s| s.min as f32)));
            cols.push(opt(s.map(|s| s.avg as f32)));
            cols.push(opt(s.map(|s| s.max as f32)));
        }
        cols.push(t.energy_j.map(|e| e.to_string()).unwrap_or_default());
        cols.push(t.pod.as_ref().map(|p| p.namespace.clone()).unwrap_or_default());
        cols.push(t.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default());
        cols.push(t.pod.as_ref().and_then(|p| p.uid).map(|u| u.to_string()).unwrap_or_default());
        out.extend_from_slice(cols.join(",").as_bytes());
        out.push(b'\n');
    }
    offsets.push(out.len());
    (out, offsets)
}

// ---------------------------------------------------------------------------------------------------------------
// Measurements.

struct Measured {
    items: usize,
    elapsed: Duration,
    /// Per-batch wall time (begin → commit), sorted.
    latencies: Vec<Duration>,
    flagged: usize,
}

impl Measured {
    fn rate(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * p).round() as usize;
        self.latencies[i]
    }
}

/// One writer: a transaction per batch, as the HTTP handler does. Stops after [`BUDGET`].
async fn ingest_batches(db: &Database, org: OrgId, cluster: ClusterId, facts: &[Fact], batch: usize) -> Measured {
    let t0 = Instant::now();
    let mut items = 0;
    let mut latencies = Vec::new();
    let mut flagged = 0;
    for chunk in facts.chunks(batch) {
        let b0 = Instant::now();
        let mut tx = db.begin_org(org).await.expect("begin");
        let ack = ingest::store(&mut tx, org, cluster, chunk).await.expect("store");
        tx.commit().await.expect("commit");
        latencies.push(b0.elapsed());
        assert_eq!(ack.stored, chunk.len() as u64, "every fact is new, so every fact is stored");
        flagged += ack.flagged.len();
        items += chunk.len();
        if t0.elapsed() > BUDGET {
            break;
        }
    }
    latencies.sort();
    Measured { items, elapsed: t0.elapsed(), latencies, flagged }
}

/// [`WRITERS`] writers taking batches from one queue, like concurrent agents.
async fn ingest_concurrent(db: &Database, org: OrgId, cluster: ClusterId, facts: Vec<Fact>, batch: usize) -> Measured {
    let facts = Arc::new(facts);
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let (db, facts, next) = (db.clone(), facts.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut items = 0;
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) * batch;
                if i >= facts.len() || t0.elapsed() > BUDGET {
                    break;
                }
                let chunk = &facts[i..(i + batch).min(facts.len())];
                let b0 = Instant::now();
                let mut tx = db.begin_org(org).await.expect("begin");
                let ack = ingest::store(&mut tx, org, cluster, chunk).await.expect("store");
                tx.commit().await.expect("commit");
                latencies.push(b0.elapsed());
                assert_eq!(ack.stored, chunk.len() as u64);
                items += chunk.len();
            }
            (items, latencies)
        }));
    }
    let mut items = 0;
    let mut latencies = Vec::new();
    for t in tasks {
        let (n, l) = t.await.expect("writer");
        items += n;
        latencies.extend(l);
    }
    latencies.sort();
    Measured { items, elapsed: t0.elapsed(), latencies, flagged: 0 }
}

/// COPY of `rows` (CSV) into the bare table, `batch` rows per COPY statement (each its own committed
/// transaction); `None` sends everything in one statement.
async fn copy_reference(conn: &mut PgConnection, csv: &[u8], offsets: &[usize], batch: Option<usize>) -> Measured {
    let rows = offsets.len() - 1;
    let batch = batch.unwrap_or(rows);
    let t0 = Instant::now();
    let mut items = 0;
    let mut latencies = Vec::new();
    for first in (0..rows).step_by(batch) {
        let last = (first + batch).min(rows);
        let b0 = Instant::now();
        let mut copy = conn.copy_in_raw("COPY copy_reference FROM STDIN (FORMAT csv)").await.expect("COPY");
        let data = &csv[offsets[first]..offsets[last]];
        for piece in data.chunks(1 << 20) {
            copy.send(piece).await.expect("COPY data");
        }
        let n = copy.finish().await.expect("COPY finish");
        assert_eq!(n, (last - first) as u64);
        latencies.push(b0.elapsed());
        items += last - first;
        if t0.elapsed() > BUDGET {
            break;
        }
    }
    latencies.sort();
    Measured { items, elapsed: t0.elapsed(), latencies, flagged: 0 }
}

struct Decoded {
    label: &'static str,
    facts: usize,
    gzip_bytes: usize,
    json_bytes: usize,
    per_batch: Duration,
}

/// Times `ingest::decode` (gunzip + JSON, the handler's first step) on one batch, repeated for ~3 s.
fn time_decode(label: &'static str, facts: Vec<Fact>) -> Decoded {
    let n = facts.len();
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "0.1.0".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: Some("bench".into()),
        facts,
    };
    let json = serde_json::to_vec(&batch).expect("json");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&json).expect("gzip");
    let body = gz.finish().expect("gzip");
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    let decoded = ingest::decode(&headers, &body, &ingest::IngestLimits::default()).expect("decode");
    assert_eq!(decoded.facts.len(), n);
    ingest::validate(&decoded, ingest::Window::open(OffsetDateTime::now_utc())).expect("valid batch");
    let t0 = Instant::now();
    let mut iterations = 0u32;
    while t0.elapsed() < Duration::from_secs(3) {
        let b = ingest::decode(&headers, &body, &ingest::IngestLimits::default()).expect("decode");
        std::hint::black_box(b);
        iterations += 1;
    }
    Decoded { label, facts: n, gzip_bytes: body.len(), json_bytes: json.len(), per_batch: t0.elapsed() / iterations }
}

// ---------------------------------------------------------------------------------------------------------------

fn fmt_rate(r: f64) -> String {
    let r = r.round() as u64;
    let s = r.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

async fn run(pg: &Postgres) {
    let total = Instant::now();
    let super_url = pg.superuser_url();
    db::migrate(&super_url).await.expect("migrate");
    let mut admin = PgConnection::connect(&super_url).await.expect("connect");
    sqlx::query(&format!("ALTER ROLE gpuledger_app LOGIN PASSWORD '{APP_PASSWORD}'"))
        .execute(&mut admin)
        .await
        .expect("app login");
    let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(&mut admin).await.expect("version");
    let mut settings = Vec::new();
    for name in ["fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "shared_buffers", "max_wal_size"]
    {
        let v: String = sqlx::query_scalar(&format!("SHOW {name}")).fetch_one(&mut admin).await.expect("setting");
        settings.push(format!("{name}={v}"));
    }
    assert!(
        settings.contains(&"fsync=on".to_string()) && settings.contains(&"synchronous_commit=on".to_string()),
        "the benchmark must run with durable commits: {settings:?}"
    );
    let fs_type = command_output("stat", &["-f", "-c", "%T", &pg.dir.display().to_string()]);

    let db = Database::connect(&pg.app_url(), AppLogin::Direct, WRITERS as u32).await.expect("app pool");
    let org = demo::seed(&db).await.expect("seed");
    let mut tx = db.begin_org(org).await.expect("begin");
    let (cluster, _) = auth::ensure_cluster(&mut tx, "bench").await.expect("cluster");
    tx.commit().await.expect("commit");
    sqlx::query("CREATE TABLE copy_reference (LIKE telemetry_rollups)").execute(&mut admin).await.expect("bare table");

    let fleet = Fleet::new();
    // Sequence numbers: a disjoint range of rows per measurement, so every row is new.
    let mut seq = 0usize;
    // Warm-up (not timed): creates the month's partition and warms the caches and prepared statements.
    let warm = fleet.telemetry_range(seq, 2 * GPUS);
    seq += warm.len();
    ingest_batches(&db, org, cluster, &warm, GPUS).await;

    // PostgreSQL's own limit: the same kind of rows, one COPY into the bare table.
    let reference_facts = fleet.telemetry_range(seq, ROWS_PER_SIZE);
    let (csv, offsets) = csv_rows(&reference_facts, org, cluster);
    drop(reference_facts);
    let copy_limit = copy_reference(&mut admin, &csv, &offsets, None).await;

    let mut telemetry_lines = Vec::new();
    for batch in BATCH_SIZES {
        let facts = fleet.telemetry_range(seq, ROWS_PER_SIZE);
        seq += facts.len();
        let (csv, offsets) = csv_rows(&facts, org, cluster);
        let copy = copy_reference(&mut admin, &csv, &offsets, Some(batch)).await;
        let ingest = ingest_batches(&db, org, cluster, &facts, batch).await;
        telemetry_lines.push((batch, ingest, copy));
    }
    let concurrent_batch = 1_000;
    let facts = fleet.telemetry_range(seq, ROWS_PER_SIZE);
    seq += facts.len();
    let concurrent = ingest_concurrent(&db, org, cluster, facts, concurrent_batch).await;

    let allocation_facts: Vec<Fact> = (0..ALLOCATION_FACTS / 2).flat_map(|i| fleet.allocation(i)).collect();
    let allocations = ingest_batches(&db, org, cluster, &allocation_facts, ALLOCATION_BATCH).await;
    let telemetry_rows: i64 = {
        let mut tx = db.begin_org(org).await.expect("begin");
        let n = sqlx::query_scalar("SELECT count(*) FROM telemetry_rollups").fetch_one(tx.conn()).await.expect("count");
        tx.commit().await.expect("commit");
        n
    };

    let decodes = [
        time_decode("telemetry", fleet.telemetry_range(0, 1_000)),
        time_decode("allocation start/end", (0..500).flat_map(|i| fleet.allocation(i)).collect()),
    ];

    // ---- Report ----
    let limit = copy_limit.rate();
    println!();
    println!("## Ingest benchmark");
    println!();
    println!(
        "Machine: {} CPUs, {} MiB memory; PostgreSQL {version} ({}), data directory on {fs_type}.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        command_output("sh", &["-c", "free -m | awk '/^Mem:/ {print $2}'"]),
        settings.join(", ")
    );
    println!("Command: `cargo bench -p gpuledger-server --bench ingest`");
    println!();
    println!(
        "Reference (PostgreSQL's limit): COPY of {} telemetry rows (CSV) into a bare logged table, one statement: **{} rows/s**.",
        fmt_rate(copy_limit.items as f64),
        fmt_rate(limit)
    );
    println!();
    println!(
        "| telemetry ingest | rows | rows/s | vs COPY limit | COPY at this batch size, rows/s | vs COPY same batch | batch p50 ms | batch p99 ms | ≥ 20,000 rows/s | ≥ ¼ COPY |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|:-:|:-:|");
    let yes = |b: bool| if b { "yes" } else { "**no**" };
    for (batch, ingest, copy) in &telemetry_lines {
        let r = ingest.rate();
        println!(
            "| batch {}, 1 writer | {} | {} | {:.2} | {} | {:.2} | {} | {} | {} | {} |",
            fmt_rate(*batch as f64),
            fmt_rate(ingest.items as f64),
            fmt_rate(r),
            r / limit,
            fmt_rate(copy.rate()),
            r / copy.rate(),
            ms(ingest.percentile(0.5)),
            ms(ingest.percentile(0.99)),
            yes(r >= 20_000.0),
            yes(r >= limit / 4.0)
        );
    }
    let r = concurrent.rate();
    println!(
        "| batch {}, {WRITERS} writers | {} | {} | {:.2} | | | {} | {} | {} | {} |",
        fmt_rate(concurrent_batch as f64),
        fmt_rate(concurrent.items as f64),
        fmt_rate(r),
        r / limit,
        ms(concurrent.percentile(0.5)),
        ms(concurrent.percentile(0.99)),
        yes(r >= 20_000.0),
        yes(r >= limit / 4.0)
    );
    println!();
    println!(
        "| allocation ingest (start + end pairs, exclusive H100) | facts | facts/s | batch p50 ms | batch p99 ms | flagged |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| batch {}, 1 writer | {} | {} | {} | {} | {} |",
        fmt_rate(ALLOCATION_BATCH as f64),
        fmt_rate(allocations.items as f64),
        fmt_rate(allocations.rate()),
        ms(allocations.percentile(0.5)),
        ms(allocations.percentile(0.99)),
        allocations.flagged
    );
    println!();
    println!(
        "| decode (gzip + JSON, in process) | facts | gzip KiB | JSON KiB | ms/batch | facts/s | gzip MB/s | JSON MB/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for d in &decodes {
        let s = d.per_batch.as_secs_f64();
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {} | {:.1} | {:.1} |",
            d.label,
            fmt_rate(d.facts as f64),
            d.gzip_bytes as f64 / 1024.0,
            d.json_bytes as f64 / 1024.0,
            s * 1e3,
            fmt_rate(d.facts as f64 / s),
            d.gzip_bytes as f64 / s / 1e6,
            d.json_bytes as f64 / s / 1e6
        );
    }
    println!();
    println!(
        "telemetry_rollups holds {} rows at the end; sequence used {seq}; total {:.0} s.",
        fmt_rate(telemetry_rows as f64),
        total.elapsed().as_secs_f64()
    );
    db.close().await;
    admin.close().await.expect("close");
}
