//! Ledger benchmark: a month's ledger for a large fleet (default 10,000 GPUs × 2026-09, about a million
//! allocation intervals, 500 tenants), timed three ways in one run:
//!
//! 1. `gpuledger_core::ledger::compute` on the input built in memory (no database);
//! 2. the server path: `ledger::load_input` through `Database::begin_org` (as `gpuledger_app`, RLS enforced),
//!    then `compute`;
//! 3. the reference: the per-tenant GPU-hour totals a user would write by hand in SQL, in the same database.
//!
//! ```sh
//! cargo bench -p gpuledger-server --bench ledger                      # 10,000 GPUs
//! GL_BENCH_GPUS=1000 cargo bench -p gpuledger-server --bench ledger   # quick run
//! ```
//!
//! The fleet is the one `gpuledger-server demo --gpus N` seeds: `gpuledger_server::demo::fleet` generates it
//! (seeded, deterministic: the demo's GPU classes in every sharing mode, a shared endpoint with token usage and
//! model-server totals, quotas, telemetry) and writes it with `fleet::load` (as `gpuledger_app` in one
//! organization-scoped transaction, chunked `INSERT … SELECT FROM unnest`); none of that is timed.
//! `GL_BENCH_ENERGY_WINDOW_HOURS` (default 4) sets the telemetry windows (one per GPU and window; hourly windows
//! for 10,000 GPUs would be 7.2 M rows). `GL_BENCH_PHASE=compute GL_BENCH_DUMP_INPUT=FILE` writes the generated
//! input as JSON and exits (a profiling aid).
//!
//! PostgreSQL comes from the shared test harness (`gpuledger_e2e::cluster`): the cluster `DATABASE_URL` names (a
//! superuser URL), else a throwaway cluster started from the machine's `initdb`/`pg_ctl`. The bench creates its
//! own database in it (dropped at the end) and migrates it with `db::migrate`. Compute-only and server-path runs
//! each happen in a fresh child process (this binary again, `GL_BENCH_PHASE=compute|full`) so that their peak
//! memory (`VmHWM`) is their own.
//!
//! Checks that fail the bench: the input loaded by the server equals the one built in memory (sha256 of its
//! canonical JSON), both give the same ledger (sha256 of its lines), and the per-tenant allocated GPU-hours of the
//! ledger input equal the SQL reference to 6 decimals.
//!
//! Besides wall time, CPU time is read from `/proc/PID/stat` (the bench's own process; PostgreSQL's backend plus
//! the parallel workers the postmaster reaped, when PostgreSQL runs on this machine), so that a run on a busy
//! machine still gives comparable numbers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, io::Write, process::Command, time::Instant};

use gpuledger_core::{
    Confidence, Fraction, NANOS_PER_HOUR, Period,
    decimal::Decimal,
    ids::{DepartmentId, TenantId},
    ledger::{
        AllocationRecord, ClassCapacity, DepartmentRef, EndpointTotal, EnergyRecord, Ledger, LedgerInput, QuotaHolder,
        QuotaRecord, TenantRef, UsageRecord, compute, group_energy,
    },
    policy::CostPolicy,
};
use gpuledger_server::{
    db::{self, AppLogin, Database},
    demo::fleet::{
        self, CLASSES, CLUSTERS as FLEET_CLUSTERS, ENDPOINT, FleetSpec, Holder, Job, World, at, dept_id, gpu_uuid,
        quota_id, tenant_id,
    },
    ledger::{load_allocations, load_input},
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection};
use time::{OffsetDateTime, macros::datetime};
use uuid::Uuid;

const PERIOD: &str = "2026-09";
const PERIOD_START: OffsetDateTime = datetime!(2026-09-01 00:00 UTC);
const PERIOD_END: OffsetDateTime = datetime!(2026-10-01 00:00 UTC);
const SEED: u64 = 0x2026_0900_1ed6_e500;
/// Timed repetitions of each measurement (best and median are reported).
const RUNS: usize = 3;
const TARGET_S: f64 = 10.0;

const ORG: Uuid = Uuid::from_u128(0x0b3e_0000_0000_4000_8000_0000_0000_0001);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok()).unwrap_or(default)
}

/// Size of the run: the demo's fleet generator (`demo::fleet`) over the period.
type Spec = FleetSpec;

fn spec_from_env() -> Spec {
    let gpus = env_usize("GL_BENCH_GPUS", 10_000);
    let window_h = env_usize("GL_BENCH_ENERGY_WINDOW_HOURS", 4).clamp(1, 24) as i64;
    assert!(24 % window_h == 0, "GL_BENCH_ENERGY_WINDOW_HOURS must divide 24");
    FleetSpec { window_h, ..FleetSpec::new(gpus, SEED, PERIOD_START, PERIOD_END) }
}

fn unix(t: OffsetDateTime) -> i64 {
    t.unix_timestamp()
}

/// The bench's view of the generated world: its ledger input built in memory, and the policy.
trait BenchWorld {
    fn policy() -> CostPolicy;
    fn in_period(j: &Job) -> bool;
    fn ledger_input(&self) -> LedgerInput;
}

impl BenchWorld for World {
    fn policy() -> CostPolicy {
        let classes: Vec<String> = CLASSES.iter().map(|c| c.name.to_string()).collect();
        gpuledger_server::demo::ledger::demo_policy(&classes).expect("policy")
    }

    fn in_period(j: &Job) -> bool {
        j.start < unix(PERIOD_END) && j.end.is_none_or(|e| e > unix(PERIOD_START))
    }

    /// The period's ledger input, built in memory the way `load_input` would read it from the database.
    fn ledger_input(&self) -> LedgerInput {
        let departments = self
            .departments
            .iter()
            .enumerate()
            .map(|(d, name)| DepartmentRef { id: DepartmentId::from_uuid(dept_id(d)), name: name.to_string() })
            .collect();
        let tenants = self
            .tenants
            .iter()
            .enumerate()
            .map(|(t, td)| TenantRef {
                id: TenantId::from_uuid(tenant_id(t)),
                name: td.name.clone(),
                department: DepartmentId::from_uuid(dept_id(td.dept)),
            })
            .collect();
        let mut gpus_per_class = [0u32; CLASSES.len()];
        for n in &self.nodes {
            gpus_per_class[n.class] += 8;
        }
        let capacity = CLASSES
            .iter()
            .zip(gpus_per_class)
            .filter(|(_, n)| *n > 0)
            .map(|(c, gpus)| ClassCapacity { gpu_class: c.name.into(), gpus })
            .collect();
        let quotas = self
            .quotas
            .iter()
            .enumerate()
            .map(|(i, q)| QuotaRecord {
                id: quota_id(i).to_string(),
                holder: match q.holder {
                    Holder::Tenant(t) => QuotaHolder::Tenant(TenantId::from_uuid(tenant_id(t as usize))),
                    Holder::Dept(d) => QuotaHolder::Department(DepartmentId::from_uuid(dept_id(d as usize))),
                },
                gpu_class: CLASSES[q.class].name.into(),
                gpus: Decimal::parse(&q.gpus).expect("quota").normalized(),
                valid_from: at(q.from),
                valid_to: q.to.map(at),
            })
            .filter(|q| q.valid_from < PERIOD_END && q.valid_to.is_none_or(|t| t > PERIOD_START))
            .collect();
        let gpu_names: Vec<String> = (0..self.spec.gpus as u32).map(gpu_uuid).collect();
        let mut allocations = Vec::with_capacity(self.jobs.len());
        for (idx, j) in self.jobs.iter().enumerate() {
            if !Self::in_period(j) {
                continue;
            }
            let lane = &self.lanes[j.lane as usize];
            let class = self.class_of(lane);
            let node = &self.nodes[lane.node as usize];
            let id = format!("{}/{}", FLEET_CLUSTERS[node.cluster], self.allocation_id(idx, lane));
            let devices: Vec<String> = lane.gpus.iter().map(|g| gpu_names[*g as usize].clone()).collect();
            let confidence = match World::confidence(lane, j) {
                "exact" => Confidence::Exact,
                "modeled" => Confidence::Modeled,
                _ => Confidence::Estimated,
            };
            for (part, (tenant, s, e)) in self.parts(j).into_iter().enumerate() {
                allocations.push(AllocationRecord {
                    id: if part == 0 { id.clone() } else { format!("{id}#{part}") },
                    tenant: tenant.map(|t| TenantId::from_uuid(tenant_id(t as usize))),
                    gpu_class: Some(class.name.into()),
                    fraction: Fraction::new(i128::from(lane.num), i128::from(lane.den)).expect("fraction"),
                    start: at(s),
                    end: e.map(at),
                    confidence,
                    devices: devices.clone(),
                    endpoint: lane.endpoint.then(|| ENDPOINT.to_string()),
                    share_basis: None,
                });
            }
        }
        let window = self.spec.window_h * 3_600;
        let windows = self.windows();
        let occupancy = self.occupancy();
        let mut energy = Vec::with_capacity(self.spec.gpus * windows as usize);
        for g in 0..self.spec.gpus as u32 {
            for w in 0..windows {
                let s = unix(PERIOD_START) + i64::from(w) * window;
                let occ = occupancy[g as usize * windows as usize + w as usize];
                energy.push(EnergyRecord {
                    gpu_uuid: gpu_names[g as usize].clone(),
                    start: at(s),
                    end: at(s + window),
                    joules: self.energy_j(g, w, occ) as u64,
                });
            }
        }
        let mut usage: BTreeMap<(&str, u16), (u64, u64, u64)> = BTreeMap::new();
        for u in &self.usage {
            let v = usage.entry((u.model, u.tenant)).or_default();
            v.0 += u.requests;
            v.1 += u.input;
            v.2 += u.output;
        }
        let service_usage = usage
            .into_iter()
            .map(|((model, t), (requests, input_tokens, output_tokens))| UsageRecord {
                endpoint: ENDPOINT.into(),
                model: model.into(),
                tenant: TenantId::from_uuid(tenant_id(t as usize)),
                requests,
                input_tokens,
                output_tokens,
            })
            .collect();
        let mut totals: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
        for t in self.endpoint_totals() {
            let v = totals.entry(t.model).or_default();
            v.0 += t.requests;
            v.1 += t.input;
            v.2 += t.output;
        }
        let endpoint_totals = totals
            .into_iter()
            .map(|(model, (requests, input_tokens, output_tokens))| EndpointTotal {
                endpoint: ENDPOINT.into(),
                model: model.into(),
                requests,
                input_tokens,
                output_tokens,
            })
            .collect();
        LedgerInput {
            period: Period::parse(PERIOD).expect("period"),
            policy: Self::policy(),
            inventory_version: String::new(),
            departments,
            tenants,
            capacity,
            quotas,
            allocations,
            energy: group_energy(energy),
            service_usage,
            endpoint_totals,
            adjustments: Vec::new(),
            actual_costs: Vec::new(),
            bounds: None,
        }
    }
}

/// One order for both inputs (the database's text collation may differ from byte order), without the
/// inventory hash.
fn canonicalize(input: &mut LedgerInput) {
    input.inventory_version.clear();
    input.departments.sort_by(|a, b| a.name.cmp(&b.name));
    input.tenants.sort_by(|a, b| a.name.cmp(&b.name));
    input.capacity.sort_by(|a, b| a.gpu_class.cmp(&b.gpu_class));
    input.quotas.sort_by(|a, b| a.id.cmp(&b.id));
    input.allocations.sort_by(|a, b| a.id.cmp(&b.id));
    input.energy.sort_by(|a, b| a.gpu_uuid.cmp(&b.gpu_uuid));
    input.service_usage.sort_by(|a, b| (&a.endpoint, &a.model, a.tenant).cmp(&(&b.endpoint, &b.model, b.tenant)));
}

struct HashWriter(Sha256);

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn input_digest(input: &LedgerInput) -> String {
    let mut w = HashWriter(Sha256::new());
    serde_json::to_writer(&mut w, input).expect("serialize input");
    hex::encode(w.0.finalize())
}

fn ledger_digest(ledger: &Ledger) -> String {
    let mut h = Sha256::new();
    for l in &ledger.lines {
        h.update(l.csv_row().as_bytes());
        h.update(b"\n");
    }
    h.update(serde_json::to_vec(&ledger.notes).expect("notes"));
    hex::encode(h.finalize())
}

/// Per-tenant allocated GPU-hours of the input's records (fraction × duration clipped to the period), exact,
/// rounded to 6 decimals.
fn tenant_gpu_hours(input: &LedgerInput) -> BTreeMap<String, String> {
    let (ps, pe) = (PERIOD_START.unix_timestamp_nanos(), PERIOD_END.unix_timestamp_nanos());
    let lcm = input.allocations.iter().fold(1_i128, |l, a| {
        let d = a.fraction.denom();
        let (mut x, mut y) = (l, d);
        while y != 0 {
            (x, y) = (y, x % y);
        }
        l / x * d
    });
    let mut units: BTreeMap<String, i128> = BTreeMap::new();
    for a in &input.allocations {
        let Some(t) = a.tenant else { continue };
        let s = a.start.unix_timestamp_nanos().max(ps);
        let e = a.end.map_or(pe, |e| e.unix_timestamp_nanos().min(pe));
        if e <= s {
            continue;
        }
        *units.entry(t.to_string()).or_default() += a.fraction.numer() * (lcm / a.fraction.denom()) * (e - s);
    }
    units
        .into_iter()
        .map(|(t, u)| {
            let h = Fraction::new(u, lcm * NANOS_PER_HOUR).expect("hours");
            (t, Decimal::round(h, 6).expect("round").to_string())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------------------------
// Memory and load.

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// Resets `VmHWM` to the current RSS (Linux ≥ 4.0), so the next peak is this phase's own.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// CPU time (user + system, clock-tick resolution) from `/proc/PID/stat`: the process's own, plus, with
/// `reaped_children`, that of its children that have exited and been waited for. `None` when the process is not
/// visible (a PostgreSQL on another machine).
fn cpu_s(pid: &str, reaped_children: bool) -> Option<f64> {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let ticks = *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    });
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name: state is [0], ppid [1], utime [11], stime [12], cutime [13], cstime [14].
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let n = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    let own = n(11)? + n(12)?;
    Some(if reaped_children { own + n(13)? + n(14)? } else { own } / ticks)
}

fn self_cpu_s() -> f64 {
    cpu_s("self", false).unwrap_or(0.0)
}

/// CPU time PostgreSQL spent for one connection: its backend's, plus that of the parallel workers the postmaster
/// has reaped (their CPU time is added to the postmaster's children time when they exit).
struct PgCpu {
    backend: String,
    postmaster: Option<String>,
}

impl PgCpu {
    async fn of(conn: &mut PgConnection) -> Self {
        let backend = sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()")
            .fetch_one(conn)
            .await
            .expect("backend pid")
            .to_string();
        let postmaster = std::fs::read_to_string(format!("/proc/{backend}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_string)));
        Self { backend, postmaster }
    }

    fn now(&self) -> Option<f64> {
        Some(cpu_s(&self.backend, false)? + cpu_s(self.postmaster.as_deref()?, true)?)
    }

    /// Reads after a short pause, so that exited parallel workers have been reaped.
    async fn after(&self) -> Option<f64> {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        self.now()
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn mib(kib: u64) -> String {
    format!("{:.0}", kib as f64 / 1024.0)
}

fn secs(d: &[f64]) -> (f64, f64) {
    let mut v = d.to_vec();
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}

fn grouped(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn emit(v: Value) {
    println!("GLBENCH-RESULT {v}");
}

// ---------------------------------------------------------------------------------------------------------------
// Child phases.

/// `compute` alone on the input built in memory, in a fresh process.
fn phase_compute(spec: Spec) {
    let rss_start = status_kib("VmRSS:");
    let world = World::generate(spec);
    let mut input = world.ledger_input();
    canonicalize(&mut input);
    drop(world);
    if let Ok(path) = std::env::var("GL_BENCH_DUMP_INPUT") {
        // A profiling aid: the exact input, as JSON, for running `compute` elsewhere.
        let file = std::io::BufWriter::new(std::fs::File::create(&path).expect("dump file"));
        serde_json::to_writer(file, &input).expect("dump");
        eprintln!("wrote the input to {path}");
        return;
    }
    let rss_input = status_kib("VmRSS:");
    let reset = reset_peak();
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut digest = String::new();
    let mut summary = json!({});
    for run in 0..RUNS {
        let (t0, c0) = (Instant::now(), self_cpu_s());
        let ledger = compute(&input).expect("compute");
        times.push(t0.elapsed().as_secs_f64());
        cpu.push(self_cpu_s() - c0);
        if run == 0 {
            digest = ledger_digest(&ledger);
            let mut by_term: BTreeMap<&str, usize> = BTreeMap::new();
            for l in &ledger.lines {
                *by_term.entry(l.term.as_str()).or_default() += 1;
            }
            let total = gpuledger_core::ledger::total(&ledger.lines).expect("total");
            summary = json!({
                "lines": ledger.lines.len(),
                "by_term": by_term,
                "total": total.grouped(),
                "open_allocations": ledger.notes.open_allocations,
                "unattributed": ledger.notes.unattributed_gpu_hours.iter().map(|(c, h)| format!("{c} {h}")).collect::<Vec<_>>(),
            });
        }
        drop(ledger);
    }
    emit(json!({
        "times": times,
        "cpu": cpu,
        "rss_start_kib": rss_start,
        "rss_input_kib": rss_input,
        "hwm_kib": status_kib("VmHWM:"),
        "peak_reset": reset,
        "ledger_digest": digest,
        "summary": summary,
        "allocations": input.allocations.len(),
        "energy": input.energy.iter().map(|d| d.spans.len()).sum::<usize>(),
    }));
}

/// The server path — `begin_org` as `gpuledger_app`, `load_input`, commit, `compute` — in a fresh process.
fn phase_full(_spec: Spec) {
    let app_url = std::env::var("GL_BENCH_APP_URL").expect("GL_BENCH_APP_URL");
    let org = gpuledger_core::ids::OrgId::from_uuid(ORG);
    let period = Period::parse(PERIOD).expect("period");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let out = runtime.block_on(async {
        // One connection, so that every transaction runs on the same backend, whose CPU time is read.
        let db = Database::connect(&app_url, AppLogin::Direct, 1).await.expect("app pool");
        let mut tx = db.begin_org(org).await.expect("begin");
        let pg = PgCpu::of(tx.conn()).await;
        tx.commit().await.expect("commit");
        let policy = World::policy();
        let rss_before = status_kib("VmRSS:");
        let reset = reset_peak();
        let (mut load, mut comp, mut total) = (Vec::new(), Vec::new(), Vec::new());
        let (mut load_cpu, mut comp_cpu, mut pg_cpu) = (Vec::new(), Vec::new(), Vec::new());
        let mut digests = (String::new(), String::new());
        let mut counts = json!({});
        for run in 0..RUNS {
            let (t0, c0, b0) = (Instant::now(), self_cpu_s(), pg.now());
            let mut tx = db.begin_org(org).await.expect("begin");
            let mut input = load_input(&mut tx, period, policy.clone()).await.expect("load_input");
            tx.commit().await.expect("commit");
            let (t1, c1) = (Instant::now(), self_cpu_s());
            let ledger = compute(&input).expect("compute");
            let (t2, c2) = (Instant::now(), self_cpu_s());
            let b1 = pg.after().await;
            load.push((t1 - t0).as_secs_f64());
            comp.push((t2 - t1).as_secs_f64());
            total.push((t2 - t0).as_secs_f64());
            load_cpu.push(c1 - c0);
            comp_cpu.push(c2 - c1);
            pg_cpu.push(b0.zip(b1).map(|(a, b)| b - a));
            if run == 0 {
                // Outside the timing; in place, so that no copy of the input adds to the peak.
                canonicalize(&mut input);
                digests = (input_digest(&input), ledger_digest(&ledger));
                counts = json!({"allocations": input.allocations.len(), "energy": input.energy.iter().map(|d| d.spans.len()).sum::<usize>(), "lines": ledger.lines.len()});
            }
        }
        let hwm = status_kib("VmHWM:");
        // The allocation query alone (once), to split the load time.
        let t0 = Instant::now();
        let mut tx = db.begin_org(org).await.expect("begin");
        let n = load_allocations(&mut tx, period).await.expect("load_allocations").len();
        tx.commit().await.expect("commit");
        let alloc_s = t0.elapsed().as_secs_f64();
        db.close().await;
        json!({
            "load": load, "compute": comp, "total": total,
            "load_cpu": load_cpu, "compute_cpu": comp_cpu, "pg_cpu": pg_cpu,
            "load_allocations_s": alloc_s, "load_allocations_rows": n,
            "rss_before_kib": rss_before, "hwm_kib": hwm, "peak_reset": reset,
            "input_digest": digests.0, "ledger_digest": digests.1, "counts": counts,
        })
    });
    emit(out);
}

fn run_child(phase: &str, env: &[(&str, &str)]) -> Value {
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = Command::new(exe);
    cmd.env("GL_BENCH_PHASE", phase);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.stderr(std::process::Stdio::inherit()).output().expect("running the child phase");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "phase {phase} failed ({}): {stdout}", out.status);
    let line = stdout.lines().find_map(|l| l.strip_prefix("GLBENCH-RESULT ")).expect("phase result");
    serde_json::from_str(line).expect("phase result JSON")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number")).collect()
}

// ---------------------------------------------------------------------------------------------------------------
// Set-up: the world into PostgreSQL through the demo's loader (`demo::fleet::load`, as gpuledger_app; not timed).

async fn load_world(test_db: &gpuledger_e2e::TestDatabase, w: &World) -> u64 {
    let mut admin = PgConnection::connect(&test_db.admin_url).await.expect("connect");
    sqlx::query("INSERT INTO organizations (org_id, slug, name) VALUES ($1, 'bench', 'Ledger bench')")
        .bind(ORG)
        .execute(&mut admin)
        .await
        .expect("organization");
    admin.close().await.expect("close");
    let db = Database::connect(&test_db.app_url, AppLogin::Direct, 2).await.expect("app pool");
    let loaded = fleet::load(&db, gpuledger_core::ids::OrgId::from_uuid(ORG), w, "bench").await.expect("load");
    db.close().await;
    loaded.allocations
}

/// The reference: per-tenant allocated GPU-hours of the period, as a user would write it by hand — fraction ×
/// the interval clipped to the period and to the namespace's ownership, summed per owning tenant.
const REFERENCE_SQL: &str = "
SELECT o.tenant_id::text,
       round(sum(a.fraction_num::numeric / a.fraction_den
                 * extract(epoch FROM least(coalesce(a.ended_at, $2), coalesce(o.valid_to, $2), $2)
                                    - greatest(a.started_at, o.valid_from, $1))) / 3600, 6)::text
  FROM allocation_intervals a
  JOIN namespace_ownership o
    ON o.namespace_uid = a.namespace_uid
   AND o.valid_from < least(coalesce(a.ended_at, $2), $2)
   AND coalesce(o.valid_to, $2) > greatest(a.started_at, $1)
 WHERE a.fraction_num IS NOT NULL
   AND a.started_at < $2 AND (a.ended_at IS NULL OR a.ended_at > $1)
 GROUP BY o.tenant_id";

/// One run of the reference: wall seconds, PostgreSQL CPU seconds (backend + parallel workers), the totals.
async fn reference(conn: &mut PgConnection) -> (f64, Option<f64>, BTreeMap<String, String>) {
    let pg = PgCpu::of(conn).await;
    let (t0, c0) = (Instant::now(), pg.now());
    let rows: Vec<(String, String)> = sqlx::query_as(REFERENCE_SQL)
        .bind(PERIOD_START)
        .bind(PERIOD_END)
        .fetch_all(&mut *conn)
        .await
        .expect("reference");
    let wall = t0.elapsed().as_secs_f64();
    (wall, c0.zip(pg.after().await).map(|(a, b)| b - a), rows.into_iter().collect())
}

// ---------------------------------------------------------------------------------------------------------------

fn main() {
    let spec = spec_from_env();
    match std::env::var("GL_BENCH_PHASE").as_deref() {
        Ok("compute") => return phase_compute(spec),
        Ok("full") => return phase_full(spec),
        _ => {}
    }
    let load_start = loadavg();
    let t_total = Instant::now();

    // The world, and the input built from it in memory (for the cross-checks).
    let t0 = Instant::now();
    let world = World::generate(spec);
    let mut input = world.ledger_input();
    canonicalize(&mut input);
    let expected_input = input_digest(&input);
    let expected_hours = tenant_gpu_hours(&input);
    let input_records = (
        input.allocations.len(),
        input.energy.iter().map(|d| d.spans.len()).sum::<usize>(),
        input.quotas.len(),
        input.service_usage.len(),
    );
    let dept_quotas = input.quotas.iter().filter(|q| matches!(q.holder, QuotaHolder::Department(_))).count();
    let split_records = input.allocations.iter().filter(|a| a.id.contains('#')).count();
    let unowned_records = input.allocations.iter().filter(|a| a.tenant.is_none()).count();
    let endpoint_records = input.allocations.iter().filter(|a| a.endpoint.is_some()).count();
    let open_records = input.allocations.iter().filter(|a| a.end.is_none()).count();
    let mut by_fraction: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_devices: BTreeMap<usize, usize> = BTreeMap::new();
    for a in &input.allocations {
        *by_fraction.entry(a.fraction.to_string()).or_default() += 1;
        *by_devices.entry(a.devices.len()).or_default() += 1;
    }
    drop(input);
    let gen_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "generated {} GPUs, {} lanes, {} jobs, {} input records in {gen_s:.1} s",
        spec.gpus,
        world.lanes.len(),
        world.jobs.len(),
        input_records.0
    );

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let (test_db, setup_s, settings, plan) = runtime.block_on(async {
        let t0 = Instant::now();
        let test_db = gpuledger_e2e::fresh_database().await.expect("database");
        gpuledger_e2e::with_cluster_lock(async { Ok(db::migrate(&test_db.admin_url).await?) }).await.expect("migrate");
        gpuledger_e2e::allow_app_login(&test_db).await.expect("app login");
        let rows = load_world(&test_db, &world).await;
        assert_eq!(rows as usize, world.jobs.len());
        let mut admin = PgConnection::connect(&test_db.admin_url).await.expect("connect");
        sqlx::query("VACUUM ANALYZE").execute(&mut admin).await.expect("vacuum analyze");
        let mut settings = Vec::new();
        for name in ["server_version", "shared_buffers", "work_mem", "max_parallel_workers_per_gather", "fsync"] {
            let v: String = sqlx::query_scalar(&format!("SHOW {name}")).fetch_one(&mut admin).await.expect("setting");
            settings.push(format!("{name}={v}"));
        }
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {REFERENCE_SQL}"))
            .bind(PERIOD_START)
            .bind(PERIOD_END)
            .fetch_all(&mut admin)
            .await
            .expect("explain");
        admin.close().await.expect("close");
        (test_db, t0.elapsed().as_secs_f64(), settings, plan)
    });
    eprintln!("loaded PostgreSQL in {setup_s:.1} s");
    let source =
        if std::env::var("DATABASE_URL").is_ok() { "DATABASE_URL" } else { "throwaway cluster (gpuledger_e2e)" };

    // (a) compute only, in a fresh process.
    let compute_only = run_child("compute", &[]);
    eprintln!("compute-only phase done");

    // (c) the SQL reference: as gpuledger_app in an org transaction (RLS on, like the server); the same without
    // parallel workers (one core, like `compute`); and as the superuser (RLS bypassed).
    let (app_runs, serial_runs, su_runs, sql_hours) = runtime.block_on(async {
        let db = Database::connect(&test_db.app_url, AppLogin::Direct, 1).await.expect("app pool");
        let org = gpuledger_core::ids::OrgId::from_uuid(ORG);
        let (mut app, mut serial) = (Vec::new(), Vec::new());
        let mut hours = BTreeMap::new();
        for _ in 0..RUNS {
            let mut tx = db.begin_org(org).await.expect("begin");
            let (t, c, h) = reference(tx.conn()).await;
            tx.commit().await.expect("commit");
            app.push((t, c));
            hours = h;
        }
        for _ in 0..RUNS {
            let mut tx = db.begin_org(org).await.expect("begin");
            sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0").execute(tx.conn()).await.expect("serial");
            let (t, c, h) = reference(tx.conn()).await;
            tx.commit().await.expect("commit");
            assert_eq!(h, hours, "the serial plan gives the same totals");
            serial.push((t, c));
        }
        db.close().await;
        let mut admin = PgConnection::connect(&test_db.admin_url).await.expect("connect");
        let mut su = Vec::new();
        for _ in 0..RUNS {
            let (t, c, h) = reference(&mut admin).await;
            assert_eq!(h, hours, "the superuser gets the same totals");
            su.push((t, c));
        }
        admin.close().await.expect("close");
        (app, serial, su, hours)
    });
    eprintln!("SQL reference done");

    // The cross-check: the ledger input's per-tenant GPU-hours equal the SQL totals to 6 decimals.
    let mismatches: Vec<String> = expected_hours
        .keys()
        .chain(sql_hours.keys())
        .filter(|t| expected_hours.get(*t) != sql_hours.get(*t))
        .take(5)
        .map(|t| format!("{t}: ledger input {:?}, SQL {:?}", expected_hours.get(t), sql_hours.get(t)))
        .collect();
    assert!(mismatches.is_empty(), "per-tenant GPU-hours differ: {mismatches:#?}");

    // (b) the server path, in a fresh process.
    let full = run_child("full", &[("GL_BENCH_APP_URL", &test_db.app_url)]);
    eprintln!("server-path phase done");
    assert_eq!(
        full["input_digest"].as_str(),
        Some(expected_input.as_str()),
        "the loaded input equals the generated one"
    );
    assert_eq!(full["ledger_digest"], compute_only["ledger_digest"], "both paths give the same ledger");

    let load_end = loadavg();
    runtime.block_on(async {
        if let Ok(cluster) = gpuledger_e2e::cluster() {
            let mut conn = PgConnection::connect(&cluster.url("postgres")).await.expect("connect");
            let _ = sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", test_db.name)).execute(&mut conn).await;
            let _ = conn.close().await;
        }
    });

    // ---- Report ----
    let (c_best, c_med) = secs(&floats(&compute_only["times"]));
    let (l_best, l_med) = secs(&floats(&full["load"]));
    let (fc_best, fc_med) = secs(&floats(&full["compute"]));
    let (t_best, t_med) = secs(&floats(&full["total"]));
    let walls = |runs: &[(f64, Option<f64>)]| secs(&runs.iter().map(|r| r.0).collect::<Vec<_>>());
    let (s_best, s_med) = walls(&app_runs);
    let (sr_best, sr_med) = walls(&serial_runs);
    let (su_best, su_med) = walls(&su_runs);
    // Best CPU seconds of a series (`None` when PostgreSQL's processes are not visible from here).
    let best_cpu =
        |v: Vec<Option<f64>>| -> Option<f64> { v.into_iter().collect::<Option<Vec<f64>>>().map(|v| secs(&v).0) };
    let json_cpu = |v: &Value| v.as_array().map_or(Vec::new(), |a| a.iter().map(Value::as_f64).collect());
    let c_cpu = best_cpu(json_cpu(&compute_only["cpu"]));
    let l_cpu = best_cpu(json_cpu(&full["load_cpu"]));
    let fc_cpu = best_cpu(json_cpu(&full["compute_cpu"]));
    let pg_cpu = best_cpu(json_cpu(&full["pg_cpu"]));
    let s_cpu = best_cpu(app_runs.iter().map(|r| r.1).collect());
    let sr_cpu = best_cpu(serial_runs.iter().map(|r| r.1).collect());
    let su_cpu = best_cpu(su_runs.iter().map(|r| r.1).collect());
    let cpu_text = |c: Option<f64>| c.map_or("n/a".to_string(), |c| format!("{c:.2}"));
    let cpu_ratio = |c: Option<f64>| c.zip(s_cpu).map_or("n/a".to_string(), |(c, s)| format!("{:.2}", c / s));
    let kib = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let mut classes = Vec::new();
    for (i, c) in CLASSES.iter().enumerate() {
        let modes: BTreeMap<&str, usize> =
            world.nodes.iter().filter(|n| n.class == i).fold(BTreeMap::new(), |mut m, n| {
                *m.entry(n.mode.as_str()).or_default() += 8;
                m
            });
        let n: usize = modes.values().sum();
        let detail = modes.iter().map(|(m, k)| format!("{m} {}", grouped(*k))).collect::<Vec<_>>().join(", ");
        classes.push(format!("{} {} ({detail})", c.name, grouped(n)));
    }
    let yes = |b: bool| if b { "yes" } else { "**no**" };
    let parallel = plan
        .iter()
        .find(|l| l.contains("Workers Planned"))
        .map_or("no parallel workers".to_string(), |l| format!("parallel, {}", l.trim().to_lowercase()));

    println!();
    println!("## Ledger benchmark: {} GPUs × {PERIOD}", grouped(spec.gpus));
    println!();
    println!(
        "Machine: {} CPUs, {} MiB memory; load average {load_start} at the start, {load_end} at the end. PostgreSQL: {source}, {}.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()))
            .map_or("?".into(), mib),
        settings.join(", ")
    );
    println!(
        "Command: `cargo bench -p gpuledger-server --bench ledger`{}",
        if spec.gpus == 10_000 { String::new() } else { format!(" with `GL_BENCH_GPUS={}`", spec.gpus) }
    );
    println!();
    println!(
        "Data (seeded): GPUs {}; {} lanes; {} allocation intervals in the database ({} in the period's input after \
         {} splits at ownership changes; {} unowned, {} on the shared endpoint, {} open); fractions {}; devices per \
         record {}; {} namespaces ({} unowned, {} change owner during the month); {} tenants in {} departments, {} quotas ({} department quotas); energy: {} windows of {} h (every \
         GPU); shared endpoint `{ENDPOINT}`: {} usage rows of {} tenants → {} records; overhead: 2 fixed costs + unallocated capacity.",
        classes.join("; "),
        grouped(world.lanes.len()),
        grouped(world.jobs.len()),
        grouped(input_records.0),
        grouped(split_records),
        grouped(unowned_records),
        grouped(endpoint_records),
        grouped(open_records),
        by_fraction.iter().map(|(f, n)| format!("{f}: {}", grouped(*n))).collect::<Vec<_>>().join(", "),
        by_devices.iter().map(|(d, n)| format!("{d}: {}", grouped(*n))).collect::<Vec<_>>().join(", "),
        grouped(world.namespaces.len()),
        world.unowned_namespaces,
        world.ownership_changes,
        world.tenants.len(),
        world.departments.len(),
        input_records.2,
        dept_quotas,
        grouped(input_records.1),
        spec.window_h,
        grouped(world.usage.len()),
        world.usage_tenants,
        input_records.3,
    );
    println!();
    println!(
        "| measurement | wall best s | wall median s | wall ÷ SQL | CPU s (best) | CPU ÷ SQL CPU | peak memory (VmHWM) | < {TARGET_S:.0} s | faster than SQL |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|:-:|:-:|");
    println!(
        "| (a) `compute`, input in memory | {c_best:.2} | {c_med:.2} | {:.2} | {} | {} | {} MiB process ({} MiB input + {} MiB for compute) | {} | {} |",
        c_best / s_best,
        cpu_text(c_cpu),
        cpu_ratio(c_cpu),
        mib(kib(&compute_only, "hwm_kib")),
        mib(kib(&compute_only, "rss_input_kib").saturating_sub(kib(&compute_only, "rss_start_kib"))),
        mib(kib(&compute_only, "hwm_kib").saturating_sub(kib(&compute_only, "rss_input_kib"))),
        yes(c_best < TARGET_S),
        yes(c_best < s_best)
    );
    let l_total_cpu = l_cpu.zip(pg_cpu).map(|(a, b)| a + b);
    println!(
        "| (b) `load_input` via `begin_org` as gpuledger_app | {l_best:.2} | {l_med:.2} | {:.2} | {} (bench {} + PostgreSQL {}) | {} | | | |",
        l_best / s_best,
        cpu_text(l_total_cpu),
        cpu_text(l_cpu),
        cpu_text(pg_cpu),
        cpu_ratio(l_total_cpu)
    );
    println!(
        "| (b) then `compute` on the loaded input | {fc_best:.2} | {fc_med:.2} | {:.2} | {} | {} | | | |",
        fc_best / s_best,
        cpu_text(fc_cpu),
        cpu_ratio(fc_cpu)
    );
    let t_cpu = l_total_cpu.zip(fc_cpu).map(|(a, b)| a + b);
    println!(
        "| (b) load + compute | {t_best:.2} | {t_med:.2} | {:.2} | {} | {} | {} MiB process | {} | {} |",
        t_best / s_best,
        cpu_text(t_cpu),
        cpu_ratio(t_cpu),
        mib(kib(&full, "hwm_kib")),
        yes(t_best < TARGET_S),
        yes(t_best < s_best)
    );
    println!(
        "| (c) SQL reference, gpuledger_app (RLS), {parallel} | {s_best:.2} | {s_med:.2} | 1.00 | {} | 1.00 | | | |",
        cpu_text(s_cpu)
    );
    println!(
        "| (c) SQL reference, gpuledger_app, no parallel workers | {sr_best:.2} | {sr_med:.2} | {:.2} | {} | {} | | | |",
        sr_best / s_best,
        cpu_text(sr_cpu),
        cpu_ratio(sr_cpu)
    );
    println!(
        "| (c) SQL reference, superuser (no RLS) | {su_best:.2} | {su_med:.2} | {:.2} | {} | {} | | | |",
        su_best / s_best,
        cpu_text(su_cpu),
        cpu_ratio(su_cpu)
    );
    println!();
    println!(
        "Load split: `load_allocations` alone {:.2} s ({} records); the rest of `load_input` (energy {} rows, quotas, \
         usage, inventory) ≈ {:.2} s. Peak reset with /proc/self/clear_refs: {}.",
        full["load_allocations_s"].as_f64().unwrap_or(0.0),
        grouped(full["load_allocations_rows"].as_u64().unwrap_or(0) as usize),
        grouped(input_records.1),
        l_best - full["load_allocations_s"].as_f64().unwrap_or(0.0),
        compute_only["peak_reset"].as_bool() == Some(true) && full["peak_reset"].as_bool() == Some(true)
    );
    println!(
        "Ledger: {} lines ({}), total {} USD; open allocations {}; unattributed {}.",
        compute_only["summary"]["lines"],
        compute_only["summary"]["by_term"].as_object().map_or(String::new(), |m| m
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")),
        compute_only["summary"]["total"].as_str().unwrap_or(""),
        compute_only["summary"]["open_allocations"],
        compute_only["summary"]["unattributed"]
    );
    println!(
        "Checks passed: the loaded input equals the generated one (sha256 {}…); both paths give the same ledger (sha256 \
         {}…); per-tenant allocated GPU-hours of the input equal the SQL reference to 6 decimals for all {} tenants.",
        &expected_input[..12],
        &compute_only["ledger_digest"].as_str().unwrap_or("")[..12],
        sql_hours.len()
    );
    println!(
        "Set-up (not timed): generation {gen_s:.0} s, PostgreSQL load {setup_s:.0} s; total {:.0} s.",
        t_total.elapsed().as_secs_f64()
    );
}
