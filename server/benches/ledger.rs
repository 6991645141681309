//! Ledger benchmark: a month's ledger for a large fleet (default 10,000 GPUs × 2026-09, about 1,000,000
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
//! `GL_BENCH_ENERGY_WINDOW_HOURS` (default 4) sets the energy windows (one per GPU and window; hourly windows for
//! 10,000 GPUs would be 7.2 M rows). `GL_BENCH_PHASE=compute GL_BENCH_DUMP_INPUT=FILE` writes the generated input
//! as JSON and exits (a profiling aid).
//!
//! PostgreSQL comes from the shared test harness (`gpuledger_e2e::cluster`): the cluster `DATABASE_URL` names (a
//! superuser URL), else a throwaway cluster started from the machine's `initdb`/`pg_ctl`. The bench creates its
//! own database in it (dropped at the end), migrates it with `db::migrate` and bulk-loads the data with COPY as the
//! superuser; none of that is timed. Compute-only and server-path runs each happen in a fresh child process (this
//! binary again, `GL_BENCH_PHASE=compute|full`) so that their peak memory (`VmHWM`) is their own.
//!
//! The data is deterministic (seeded `StdRng`). Checks that fail the bench: the input loaded by the server equals
//! the one built in memory (sha256 of its canonical JSON), both give the same ledger (sha256 of its lines), and
//! the per-tenant allocated GPU-hours of the ledger input equal the SQL reference to 6 decimals.
//!
//! Besides wall time, CPU time is read from `/proc/PID/stat` (the bench's own process; PostgreSQL's backend plus
//! the parallel workers the postmaster reaped, when PostgreSQL runs on this machine), so that a run on a busy
//! machine still gives comparable numbers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, HashMap},
    io::Write,
    process::Command,
    time::Instant,
};

use gpuledger_core::{
    Confidence, Fraction, NANOS_PER_HOUR, Period,
    decimal::Decimal,
    ids::{DepartmentId, TenantId},
    ledger::{
        AllocationRecord, ClassCapacity, DepartmentRef, EnergyRecord, Ledger, LedgerInput, QuotaHolder, QuotaRecord,
        TenantRef, UsageRecord, compute,
    },
    policy::CostPolicy,
};
use gpuledger_server::{
    db::{self, AppLogin, Database},
    ledger::{load_allocations, load_input},
};
use rand::{Rng, SeedableRng, rngs::StdRng, seq::SliceRandom};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection};
use time::{OffsetDateTime, macros::datetime};
use uuid::Uuid;

const PERIOD: &str = "2026-09";
const PERIOD_START: OffsetDateTime = datetime!(2026-09-01 00:00 UTC);
const PERIOD_END: OffsetDateTime = datetime!(2026-10-01 00:00 UTC);
/// Inventory, ownership, quotas and tenants are valid from here (before the period).
const EPOCH: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);
const SEED: u64 = 0x2026_0900_1ed6_e500;
const TENANTS: usize = 500;
const DEPARTMENTS: usize = 20;
/// Tenants with usage of the shared endpoint.
const USAGE_TENANTS: usize = 50;
const ENDPOINT: &str = "llm-shared";
const CLUSTERS: [&str; 2] = ["prod-east", "prod-west"];
/// Timed repetitions of each measurement (best and median are reported).
const RUNS: usize = 3;
/// Jobs start this long before the period (so some cross its start).
const LEAD_S: i64 = 3 * 86_400;
/// Mean gap between two jobs on one lane is half of this.
const GAP_MAX_S: i64 = 10 * 3_600;
const TARGET_S: f64 = 10.0;

const ORG: Uuid = Uuid::from_u128(0x0b3e_0000_0000_4000_8000_0000_0000_0001);
const CLUSTER_BASE: u128 = 0xc105_0000_0000_4000_8000_0000_0000_0000;
const DEPT_BASE: u128 = 0xde90_0000_0000_4000_8000_0000_0000_0000;
const TENANT_BASE: u128 = 0x7e4a_0000_0000_4000_8000_0000_0000_0000;
const NS_BASE: u128 = 0x4a3e_0000_0000_4000_8000_0000_0000_0000;
const GPU_BASE: u128 = 0x6b00_0000_0000_4000_8000_0000_0000_0000;
const MIG_BASE: u128 = 0x3160_0000_0000_4000_8000_0000_0000_0000;
const JOB_BASE: u128 = 0xa110_0000_0000_4000_8000_0000_0000_0000;
const QUOTA_BASE: u128 = 0x9007_0000_0000_4000_8000_0000_0000_0000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Exclusive,
    Mig,
    TimeSlice,
    Vgpu,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Mig => "mig",
            Mode::TimeSlice => "time_slice",
            Mode::Vgpu => "vgpu",
        }
    }
}

struct ClassDef {
    name: &'static str,
    model: &'static str,
    memory_mib: u32,
    /// Share of the nodes.
    share: f64,
    /// Share of this class's nodes in each sharing mode (exclusive gets the rest).
    mig: f64,
    time_slice: f64,
    vgpu: f64,
    guaranteed: &'static str,
    borrowed: &'static str,
    idle_w: f64,
    busy_w: f64,
}

const CLASSES: [ClassDef; 4] = [
    ClassDef {
        name: "H100",
        model: "NVIDIA H100 80GB HBM3",
        memory_mib: 81_559,
        share: 0.40,
        mig: 0.40,
        time_slice: 0.0,
        vgpu: 0.0,
        guaranteed: "2.10",
        borrowed: "3.00",
        idle_w: 70.0,
        busy_w: 700.0,
    },
    ClassDef {
        name: "H200",
        model: "NVIDIA H200",
        memory_mib: 143_771,
        share: 0.15,
        mig: 0.0,
        time_slice: 0.0,
        vgpu: 0.0,
        guaranteed: "2.90",
        borrowed: "4.10",
        idle_w: 80.0,
        busy_w: 700.0,
    },
    ClassDef {
        name: "A100",
        model: "NVIDIA A100-SXM4-80GB",
        memory_mib: 81_920,
        share: 0.25,
        mig: 0.60,
        time_slice: 0.0,
        vgpu: 0.0,
        guaranteed: "1.40",
        borrowed: "2.00",
        idle_w: 55.0,
        busy_w: 400.0,
    },
    ClassDef {
        name: "L40S",
        model: "NVIDIA L40S",
        memory_mib: 46_068,
        share: 0.20,
        mig: 0.0,
        time_slice: 0.5,
        vgpu: 0.5,
        guaranteed: "0.90",
        borrowed: "1.30",
        idle_w: 35.0,
        busy_w: 350.0,
    },
];
/// MIG layouts (compute slices of each instance, out of 7).
const MIG_LAYOUTS: [&[u8]; 4] = [&[3, 2, 1, 1], &[4, 3], &[1, 1, 1, 1, 1, 1, 1], &[2, 2, 3]];
const VGPU_PROFILE: &str = "L40S-24Q";
const MODELS: [&str; 2] = ["llama-3-70b", "mixtral-8x7b"];

fn mig_profile(slices: u8) -> &'static str {
    match slices {
        1 => "1g.10gb",
        2 => "2g.20gb",
        3 => "3g.40gb",
        4 => "4g.40gb",
        _ => "7g.80gb",
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok()).unwrap_or(default)
}

/// Size of the run.
#[derive(Clone, Copy)]
struct Spec {
    gpus: usize,
    /// Length of the energy windows (hours).
    energy_window_h: i64,
}

impl Spec {
    fn from_env() -> Self {
        let gpus = env_usize("GL_BENCH_GPUS", 10_000).max(8).div_ceil(8) * 8;
        let energy_window_h = env_usize("GL_BENCH_ENERGY_WINDOW_HOURS", 4).clamp(1, 24) as i64;
        assert!(24 % energy_window_h == 0, "GL_BENCH_ENERGY_WINDOW_HOURS must divide 24");
        Self { gpus, energy_window_h }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The generated world (compact; strings are made when rows or records are written).

struct Node {
    class: usize,
    mode: Mode,
    cluster: usize,
}

struct MigInstance {
    gpu: u32,
    slices: u8,
    gi: u8,
}

struct Lane {
    node: u32,
    mode: Mode,
    gpus: Vec<u32>,
    mig: Option<u32>,
    num: i64,
    den: i64,
    endpoint: bool,
}

struct Job {
    lane: u32,
    ns: u32,
    start: i64,
    end: Option<i64>,
    estimated: bool,
}

struct Owner {
    from: i64,
    to: Option<i64>,
    tenant: u16,
}

struct Namespace {
    cluster: usize,
    name: String,
    owners: Vec<Owner>,
}

struct TenantDef {
    name: String,
    dept: usize,
    primary: usize,
    weight: f64,
}

enum Holder {
    Tenant(u16),
    Dept(u16),
}

struct QuotaDef {
    holder: Holder,
    class: usize,
    gpus: String,
    from: i64,
    to: Option<i64>,
}

struct UsageRow {
    tenant: u16,
    model: &'static str,
    hour: u32,
    requests: u64,
    input: u64,
    output: u64,
}

struct World {
    spec: Spec,
    nodes: Vec<Node>,
    migs: Vec<MigInstance>,
    lanes: Vec<Lane>,
    jobs: Vec<Job>,
    tenants: Vec<TenantDef>,
    namespaces: Vec<Namespace>,
    ownership_changes: usize,
    unowned_namespaces: usize,
    quotas: Vec<QuotaDef>,
    usage: Vec<UsageRow>,
}

fn unix(t: OffsetDateTime) -> i64 {
    t.unix_timestamp()
}

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(secs).expect("timestamp")
}

/// A timestamp as PostgreSQL reads it in COPY.
fn pg_ts(secs: i64) -> String {
    let t = at(secs);
    format!("{} {:02}:{:02}:{:02}+00", t.date(), t.hour(), t.minute(), t.second())
}

fn gpu_uuid(g: u32) -> String {
    format!("GPU-{}", Uuid::from_u128(GPU_BASE | u128::from(g)))
}

fn mig_uuid(m: u32) -> String {
    format!("MIG-{}", Uuid::from_u128(MIG_BASE | u128::from(m)))
}

fn cluster_id(c: usize) -> Uuid {
    Uuid::from_u128(CLUSTER_BASE | c as u128)
}

fn dept_id(d: usize) -> Uuid {
    Uuid::from_u128(DEPT_BASE | d as u128)
}

fn tenant_id(t: usize) -> Uuid {
    Uuid::from_u128(TENANT_BASE | t as u128)
}

fn ns_id(n: usize) -> Uuid {
    Uuid::from_u128(NS_BASE | n as u128)
}

fn quota_id(q: usize) -> Uuid {
    Uuid::from_u128(QUOTA_BASE | q as u128)
}

fn node_name(n: u32) -> String {
    format!("gpu-node-{n:05}")
}

/// splitmix64, for values derived from an index (energy), independent of the generation order.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn unit(x: u64) -> f64 {
    (mix(x) >> 11) as f64 / (1u64 << 53) as f64
}

/// Quarter GPUs, at least a quarter, written as a decimal.
fn quarters(x: f64) -> String {
    let q = ((x * 4.0).round() as i64).max(1);
    format!("{}.{:02}", q / 4, (q % 4) * 25)
}

fn pick_class(rng: &mut StdRng) -> usize {
    let x: f64 = rng.random();
    let mut acc = 0.0;
    for (i, c) in CLASSES.iter().enumerate() {
        acc += c.share;
        if x < acc {
            return i;
        }
    }
    CLASSES.len() - 1
}

/// A job's length: minutes (40 %), hours (40 %) or days (20 %), log-uniform within each.
fn duration(rng: &mut StdRng) -> i64 {
    let r: f64 = rng.random();
    let (lo, hi) = if r < 0.4 {
        (300.0_f64, 3_600.0_f64)
    } else if r < 0.8 {
        (3_600.0, 43_200.0)
    } else {
        (43_200.0, 345_600.0)
    };
    (lo * (hi / lo).powf(rng.random::<f64>())) as i64
}

impl World {
    fn generate(spec: Spec) -> Self {
        let mut rng = StdRng::seed_from_u64(SEED);
        let (p_start, p_end) = (unix(PERIOD_START), unix(PERIOD_END));
        // Tenants: popularity follows a Zipf-like law over a shuffled rank; each has a primary GPU class.
        let mut ranks: Vec<usize> = (0..TENANTS).collect();
        ranks.shuffle(&mut rng);
        let tenants: Vec<TenantDef> = (0..TENANTS)
            .map(|t| TenantDef {
                name: if t == 0 { "platform-serving".to_string() } else { format!("team-{t:03}") },
                dept: t % DEPARTMENTS,
                primary: pick_class(&mut rng),
                weight: 1.0 / ((ranks[t] + 1) as f64).powf(0.8),
            })
            .collect();

        // Nodes of 8 GPUs; the first 1 % serve the shared endpoint (H100, one GPU per pod).
        let n_nodes = spec.gpus / 8;
        let endpoint_nodes = (n_nodes / 100).max(1);
        let mut nodes = Vec::with_capacity(n_nodes);
        let mut migs = Vec::new();
        let mut lanes = Vec::new();
        for n in 0..n_nodes {
            let endpoint = n < endpoint_nodes;
            let class = if endpoint { 0 } else { pick_class(&mut rng) };
            let c = &CLASSES[class];
            let x: f64 = rng.random();
            let mode = if endpoint {
                Mode::Exclusive
            } else if x < c.mig {
                Mode::Mig
            } else if x < c.mig + c.time_slice {
                Mode::TimeSlice
            } else if x < c.mig + c.time_slice + c.vgpu {
                Mode::Vgpu
            } else {
                Mode::Exclusive
            };
            nodes.push(Node { class, mode, cluster: n % CLUSTERS.len() });
            let first = (n * 8) as u32;
            let lane = |gpus: Vec<u32>, mig: Option<u32>, num: i64, den: i64| Lane {
                node: n as u32,
                mode,
                gpus,
                mig,
                num,
                den,
                endpoint,
            };
            match mode {
                Mode::Exclusive => {
                    // Whole GPUs: the node runs jobs of 1, 2, 4 or 8 GPUs (one size per node).
                    let k = if endpoint { 1 } else { [1u32, 2, 4, 8][rng.random_range(0..4)] };
                    for l in 0..8 / k {
                        lanes.push(lane((first + l * k..first + (l + 1) * k).collect(), None, i64::from(k), 1));
                    }
                }
                Mode::Mig => {
                    for g in first..first + 8 {
                        let layout = MIG_LAYOUTS[rng.random_range(0..MIG_LAYOUTS.len())];
                        for (gi, &slices) in layout.iter().enumerate() {
                            let m = migs.len() as u32;
                            migs.push(MigInstance { gpu: g, slices, gi: gi as u8 + 1 });
                            lanes.push(lane(vec![g], Some(m), i64::from(slices), 7));
                        }
                    }
                }
                Mode::TimeSlice => {
                    for g in first..first + 8 {
                        for _ in 0..4 {
                            lanes.push(lane(vec![g], None, 1, 4));
                        }
                    }
                }
                Mode::Vgpu => {
                    for g in first..first + 8 {
                        for _ in 0..2 {
                            lanes.push(lane(vec![g], None, 1, 2));
                        }
                    }
                }
            }
        }

        // Namespaces: 1–2 per tenant and cluster, a few nobody owns, one for the shared endpoint.
        let mut namespaces = Vec::new();
        let epoch = unix(EPOCH);
        for (t, td) in tenants.iter().enumerate() {
            for cluster in 0..CLUSTERS.len() {
                let n = 1 + usize::from(rng.random_bool(0.4));
                for k in 0..n {
                    namespaces.push(Namespace {
                        cluster,
                        name: format!("{}-{k}", td.name),
                        owners: vec![Owner { from: epoch, to: None, tenant: t as u16 }],
                    });
                }
            }
        }
        let owned = namespaces.len();
        let unowned_namespaces = 5 * CLUSTERS.len();
        for i in 0..unowned_namespaces {
            namespaces.push(Namespace {
                cluster: i % CLUSTERS.len(),
                name: format!("scratch-{i}"),
                owners: Vec::new(),
            });
        }
        let endpoint_ns = namespaces.len() as u32;
        namespaces.push(Namespace {
            cluster: 0,
            name: "llm-serving".into(),
            owners: vec![Owner { from: epoch, to: None, tenant: 0 }],
        });
        // Twenty namespaces change owner during the month (allocations across the change are split).
        let ownership_changes = 20;
        let mut changed = 0;
        while changed < ownership_changes {
            let ns = rng.random_range(0..owned);
            if namespaces[ns].owners.len() > 1 {
                continue;
            }
            let old = namespaces[ns].owners[0].tenant;
            let new = loop {
                let t = rng.random_range(1..TENANTS) as u16;
                if t != old {
                    break t;
                }
            };
            let when = p_start + rng.random_range(3 * 86_400..27 * 86_400);
            namespaces[ns].owners[0].to = Some(when);
            namespaces[ns].owners.push(Owner { from: when, to: None, tenant: new });
            changed += 1;
        }

        // Where a job on (class, cluster) runs: tenants mostly use their primary class.
        let mut tables: Vec<(Vec<f64>, Vec<u32>)> = Vec::new();
        for class in 0..CLASSES.len() {
            for cluster in 0..CLUSTERS.len() {
                let mut per_tenant_ns: HashMap<u16, usize> = HashMap::new();
                for ns in &namespaces[..owned] {
                    if ns.cluster == cluster {
                        *per_tenant_ns.entry(ns.owners[0].tenant).or_default() += 1;
                    }
                }
                let (mut cum, mut ids, mut acc) = (Vec::new(), Vec::new(), 0.0);
                for (i, ns) in namespaces[..owned].iter().enumerate() {
                    if ns.cluster != cluster {
                        continue;
                    }
                    let t = ns.owners[0].tenant;
                    let td = &tenants[t as usize];
                    let affinity = if td.primary == class { 1.0 } else { 0.06 };
                    acc += td.weight * affinity / per_tenant_ns[&t] as f64;
                    cum.push(acc);
                    ids.push(i as u32);
                }
                let scratch = acc * 0.001;
                for (i, ns) in namespaces.iter().enumerate().skip(owned).take(unowned_namespaces) {
                    if ns.cluster == cluster {
                        acc += scratch;
                        cum.push(acc);
                        ids.push(i as u32);
                    }
                }
                tables.push((cum, ids));
            }
        }

        // Jobs: each lane runs jobs back to back with gaps, from before the period to its end.
        let mut jobs = Vec::new();
        for (l, lane) in lanes.iter().enumerate() {
            let node = &nodes[lane.node as usize];
            let (cum, ids) = &tables[node.class * CLUSTERS.len() + node.cluster];
            let mut t = p_start - LEAD_S + rng.random_range(0..43_200);
            loop {
                let gap = if lane.endpoint { rng.random_range(0..1_800) } else { rng.random_range(0..=GAP_MAX_S) };
                let start = t + gap;
                if start >= p_end {
                    break;
                }
                let dur = if lane.endpoint { rng.random_range(2 * 86_400..10 * 86_400) } else { duration(&mut rng) };
                let end = start + dur.max(60);
                // Half of the jobs still running when the month ends are open (no end yet).
                let open = end > p_end && rng.random_bool(0.5);
                let ns = if lane.endpoint {
                    endpoint_ns
                } else {
                    let x = rng.random::<f64>() * cum[cum.len() - 1];
                    ids[cum.partition_point(|c| *c <= x).min(ids.len() - 1)]
                };
                let estimated = !open && rng.random_bool(0.01);
                jobs.push(Job { lane: l as u32, ns, start, end: (!open).then_some(end), estimated });
                if open {
                    break;
                }
                t = end;
            }
        }

        let mut world = World {
            spec,
            nodes,
            migs,
            lanes,
            jobs,
            tenants,
            namespaces,
            ownership_changes,
            unowned_namespaces,
            quotas: Vec::new(),
            usage: Vec::new(),
        };

        // Quotas sized from what each tenant actually holds: most tenants have one on their primary class (some
        // change during the month), some a second one; tenants of 8 departments without their own quota share a
        // department quota.
        let mut held = vec![[0.0_f64; CLASSES.len()]; TENANTS];
        for j in &world.jobs {
            let lane = &world.lanes[j.lane as usize];
            if lane.endpoint {
                continue;
            }
            let class = world.nodes[lane.node as usize].class;
            for (tenant, s, e) in world.parts(j) {
                let (s, e) = (s.max(p_start), e.unwrap_or(p_end).min(p_end));
                if let Some(t) = tenant
                    && e > s
                {
                    held[t as usize][class] += (e - s) as f64 * lane.num as f64 / lane.den as f64;
                }
            }
        }
        let month_s = (p_end - p_start) as f64;
        let mut quotas = Vec::new();
        let mut has_quota = vec![[false; CLASSES.len()]; TENANTS];
        for t in 0..TENANTS {
            if !rng.random_bool(0.8) {
                continue;
            }
            let class = world.tenants[t].primary;
            let avg = held[t][class] / month_s;
            let gpus = avg * rng.random_range(0.5..1.1);
            has_quota[t][class] = true;
            if rng.random_bool(0.1) {
                let when = p_start + rng.random_range(5 * 86_400..25 * 86_400);
                quotas.push(QuotaDef {
                    holder: Holder::Tenant(t as u16),
                    class,
                    gpus: quarters(gpus),
                    from: epoch,
                    to: Some(when),
                });
                let later = gpus * rng.random_range(0.7..1.4);
                quotas.push(QuotaDef {
                    holder: Holder::Tenant(t as u16),
                    class,
                    gpus: quarters(later),
                    from: when,
                    to: None,
                });
            } else {
                quotas.push(QuotaDef {
                    holder: Holder::Tenant(t as u16),
                    class,
                    gpus: quarters(gpus),
                    from: epoch,
                    to: None,
                });
            }
            if rng.random_bool(0.15) {
                let second = (0..CLASSES.len())
                    .filter(|c| *c != class)
                    .max_by(|a, b| held[t][*a].total_cmp(&held[t][*b]))
                    .expect("another class");
                let gpus = held[t][second] / month_s * rng.random_range(0.5..1.1);
                has_quota[t][second] = true;
                quotas.push(QuotaDef {
                    holder: Holder::Tenant(t as u16),
                    class: second,
                    gpus: quarters(gpus),
                    from: epoch,
                    to: None,
                });
            }
        }
        for d in (0..DEPARTMENTS).filter(|d| d % 5 < 2) {
            let pooled = |c: usize| -> f64 {
                (0..TENANTS).filter(|t| t % DEPARTMENTS == d && !has_quota[*t][c]).map(|t| held[t][c]).sum::<f64>()
            };
            let class = (0..CLASSES.len()).max_by(|a, b| pooled(*a).total_cmp(&pooled(*b))).expect("a class");
            let avg = pooled(class) / month_s;
            if avg > 0.0 {
                quotas.push(QuotaDef {
                    holder: Holder::Dept(d as u16),
                    class,
                    gpus: quarters(avg * 0.8),
                    from: epoch,
                    to: None,
                });
            }
        }
        world.quotas = quotas;

        // Shared-endpoint usage: 50 tenants, hourly windows, one or two models each.
        let mut users: Vec<u16> = (1..TENANTS as u16).collect();
        users.shuffle(&mut rng);
        users.truncate(USAGE_TENANTS);
        users.sort_unstable();
        let hours = ((p_end - p_start) / 3_600) as u32;
        for &t in &users {
            let x: f64 = rng.random();
            let models: &[&'static str] = if x < 0.7 {
                &MODELS[..1]
            } else if x < 0.9 {
                &MODELS[1..]
            } else {
                &MODELS[..]
            };
            let scale = rng.random_range(20..600u64);
            for hour in 0..hours {
                for &model in models {
                    let requests = rng.random_range(1..=scale);
                    world.usage.push(UsageRow {
                        tenant: t,
                        model,
                        hour,
                        requests,
                        input: requests * rng.random_range(300..2_000u64),
                        output: requests * rng.random_range(50..600u64),
                    });
                }
            }
        }
        world
    }

    fn class_of_lane(&self, lane: &Lane) -> &'static ClassDef {
        &CLASSES[self.nodes[lane.node as usize].class]
    }

    /// The job split at ownership changes, exactly as `load_allocations` does: one part per ownership row that
    /// overlaps it (ordered by `valid_from`), or one part with no tenant.
    fn parts(&self, j: &Job) -> Vec<(Option<u16>, i64, Option<i64>)> {
        let owners: Vec<&Owner> = self.namespaces[j.ns as usize]
            .owners
            .iter()
            .filter(|o| o.from < j.end.unwrap_or(i64::MAX) && j.start < o.to.unwrap_or(i64::MAX))
            .collect();
        if owners.is_empty() {
            return vec![(None, j.start, j.end)];
        }
        owners
            .into_iter()
            .map(|o| {
                let e = match (j.end, o.to) {
                    (Some(e), Some(ot)) => Some(e.min(ot)),
                    (Some(e), None) => Some(e),
                    (None, ot) => ot,
                };
                (Some(o.tenant), j.start.max(o.from), e)
            })
            .collect()
    }

    fn in_period(j: &Job) -> bool {
        j.start < unix(PERIOD_END) && j.end.is_none_or(|e| e > unix(PERIOD_START))
    }

    fn resource(&self, lane: &Lane) -> String {
        match lane.mode {
            Mode::Exclusive | Mode::TimeSlice => "nvidia.com/gpu".into(),
            Mode::Mig => format!("nvidia.com/mig-{}", mig_profile(self.migs[lane.mig.expect("mig") as usize].slices)),
            Mode::Vgpu => format!("nvidia.com/NVIDIA_{VGPU_PROFILE}"),
        }
    }

    fn allocation_id(&self, idx: usize, lane: &Lane) -> String {
        format!("{}/main/{}", Uuid::from_u128(JOB_BASE | idx as u128), self.resource(lane))
    }

    fn confidence(lane: &Lane, j: &Job) -> Confidence {
        if j.estimated {
            Confidence::Estimated
        } else if lane.mode == Mode::TimeSlice {
            Confidence::Modeled
        } else {
            Confidence::Exact
        }
    }

    fn energy_windows(&self) -> usize {
        self.spec.gpus * ((unix(PERIOD_END) - unix(PERIOD_START)) / (self.spec.energy_window_h * 3_600)) as usize
    }

    /// Joules of GPU `g` in window `w` (whole joules).
    fn joules(&self, g: u32, w: u32) -> u64 {
        let c = &CLASSES[self.nodes[(g / 8) as usize].class];
        let power = c.idle_w + (c.busy_w - c.idle_w) * unit((u64::from(g) << 20) ^ u64::from(w) ^ SEED);
        (power * (self.spec.energy_window_h * 3_600) as f64).round() as u64
    }

    fn policy() -> CostPolicy {
        let classes: Vec<Value> = CLASSES
            .iter()
            .map(|c| json!({"gpu_class": c.name, "guaranteed": c.guaranteed, "borrowed": c.borrowed}))
            .collect();
        serde_json::from_value(json!({
            "version": 1,
            "currency": "USD",
            "classes": classes,
            "energy": {"per_kwh": "0.12", "pue": "1.3"},
            "services": [{"endpoint": ENDPOINT}],
            "token_weights": [
                {"model": "*", "input": "1", "output": "4"},
                {"model": "mixtral-8x7b", "input": "0.5", "output": "2"}
            ],
            "overhead": {
                "fixed": [{"name": "platform team", "amount": "180000.00"}, {"name": "storage and network", "amount": "42000.00"}],
                "unallocated_capacity": true,
                "key": {"kind": "allocated_gpu_hours"}
            }
        }))
        .expect("policy")
    }

    /// The period's ledger input, built in memory the way `load_input` would read it from the database.
    fn ledger_input(&self) -> LedgerInput {
        let (p_start, p_end) = (unix(PERIOD_START), unix(PERIOD_END));
        let departments = (0..DEPARTMENTS)
            .map(|d| DepartmentRef { id: DepartmentId::from_uuid(dept_id(d)), name: format!("dept-{d:02}") })
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
            let class = self.class_of_lane(lane);
            let node = &self.nodes[lane.node as usize];
            let id = format!("{}/{}", CLUSTERS[node.cluster], self.allocation_id(idx, lane));
            let devices: Vec<String> = lane.gpus.iter().map(|g| gpu_names[*g as usize].clone()).collect();
            for (part, (tenant, s, e)) in self.parts(j).into_iter().enumerate() {
                allocations.push(AllocationRecord {
                    id: if part == 0 { id.clone() } else { format!("{id}#{part}") },
                    tenant: tenant.map(|t| TenantId::from_uuid(tenant_id(t as usize))),
                    gpu_class: Some(class.name.into()),
                    fraction: Fraction::new(i128::from(lane.num), i128::from(lane.den)).expect("fraction"),
                    start: at(s),
                    end: e.map(at),
                    confidence: Self::confidence(lane, j),
                    devices: devices.clone(),
                    endpoint: lane.endpoint.then(|| ENDPOINT.to_string()),
                });
            }
        }
        let window = self.spec.energy_window_h * 3_600;
        let windows = ((p_end - p_start) / window) as u32;
        let mut energy = Vec::with_capacity(self.energy_windows());
        for g in 0..self.spec.gpus as u32 {
            for w in 0..windows {
                let s = p_start + i64::from(w) * window;
                energy.push(EnergyRecord {
                    gpu_uuid: gpu_names[g as usize].clone(),
                    start: at(s),
                    end: at(s + window),
                    joules: self.joules(g, w),
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
        LedgerInput {
            period: Period::parse(PERIOD).expect("period"),
            policy: Self::policy(),
            inventory_version: String::new(),
            departments,
            tenants,
            capacity,
            quotas,
            allocations,
            energy,
            service_usage,
            endpoint_totals: Vec::new(),
            adjustments: Vec::new(),
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
    input.energy.sort_by(|a, b| (&a.gpu_uuid, a.start).cmp(&(&b.gpu_uuid, b.start)));
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
        "energy": input.energy.len(),
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
                counts = json!({"allocations": input.allocations.len(), "energy": input.energy.len(), "lines": ledger.lines.len()});
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
// Set-up: the world into PostgreSQL through the real schema, as the superuser (COPY; not timed).

async fn copy_rows(conn: &mut PgConnection, statement: &str, rows: impl Iterator<Item = String>) -> u64 {
    let mut copy = conn.copy_in_raw(statement).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 21);
    for r in rows {
        buf.extend_from_slice(r.as_bytes());
        buf.push(b'\n');
        if buf.len() >= 1 << 20 {
            copy.send(buf.as_slice()).await.expect("COPY data");
            buf.clear();
        }
    }
    if !buf.is_empty() {
        copy.send(buf.as_slice()).await.expect("COPY data");
    }
    copy.finish().await.unwrap_or_else(|e| panic!("{statement}: {e}"))
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "\\N".to_string(), |v| v.to_string())
}

async fn load_world(conn: &mut PgConnection, w: &World) -> u64 {
    let org = ORG.to_string();
    let epoch = pg_ts(unix(EPOCH));
    sqlx::query("INSERT INTO organizations (org_id, slug, name) VALUES ($1, 'bench', 'Ledger bench')")
        .bind(ORG)
        .execute(&mut *conn)
        .await
        .expect("organization");
    copy_rows(
        conn,
        "COPY clusters (org_id, cluster_id, name) FROM STDIN",
        CLUSTERS.iter().enumerate().map(|(c, name)| format!("{org}\t{}\t{name}", cluster_id(c))),
    )
    .await;
    copy_rows(
        conn,
        "COPY departments (org_id, department_id, name, created_at) FROM STDIN",
        (0..DEPARTMENTS).map(|d| format!("{org}\t{}\tdept-{d:02}\t{epoch}", dept_id(d))),
    )
    .await;
    copy_rows(
        conn,
        "COPY tenants (org_id, tenant_id, department_id, name, created_at) FROM STDIN",
        w.tenants
            .iter()
            .enumerate()
            .map(|(t, td)| format!("{org}\t{}\t{}\t{}\t{epoch}", tenant_id(t), dept_id(td.dept), td.name)),
    )
    .await;
    // Inventory.
    copy_rows(
        conn,
        "COPY gpu_classes (org_id, gpu_class, description) FROM STDIN",
        CLASSES.iter().map(|c| format!("{org}\t{}\t{}", c.name, c.model)),
    )
    .await;
    copy_rows(
        conn,
        "COPY gpu_models (org_id, model, valid_from, gpu_class, memory_mib) FROM STDIN",
        CLASSES.iter().map(|c| format!("{org}\t{}\t{epoch}\t{}\t{}", c.model, c.name, c.memory_mib)),
    )
    .await;
    copy_rows(
        conn,
        "COPY mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den) FROM STDIN",
        CLASSES.iter().filter(|c| c.mig > 0.0 || c.name == "H100").flat_map(|c| {
            let epoch = epoch.clone();
            let org = org.clone();
            [1u8, 2, 3, 4, 7]
                .into_iter()
                .map(move |k| format!("{org}\t{}\t{}\t{epoch}\t{k}\t7", c.model, mig_profile(k)))
        }),
    )
    .await;
    copy_rows(
        conn,
        "COPY vgpu_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den) FROM STDIN",
        std::iter::once(format!("{org}\tNVIDIA L40S\t{VGPU_PROFILE}\t{epoch}\t1\t2")),
    )
    .await;
    copy_rows(
        conn,
        "COPY timeslice_policies (org_id, cluster_id, name, valid_from, replicas) FROM STDIN",
        (0..CLUSTERS.len()).map(|c| format!("{org}\t{}\tshared-4\t{epoch}\t4", cluster_id(c))),
    )
    .await;
    // Devices, with their MIG instances.
    let mut mig_of: Vec<Vec<u32>> = vec![Vec::new(); w.spec.gpus];
    for (m, mi) in w.migs.iter().enumerate() {
        mig_of[mi.gpu as usize].push(m as u32);
    }
    copy_rows(
        conn,
        "COPY devices (org_id, cluster_id, gpu_uuid, valid_from, node, model, memory_mib, mig_enabled, mig_devices, vgpu_profile) FROM STDIN",
        (0..w.spec.gpus as u32).map(|g| {
            let node = &w.nodes[(g / 8) as usize];
            let c = &CLASSES[node.class];
            let migs: Vec<Value> = mig_of[g as usize]
                .iter()
                .map(|m| {
                    let mi = &w.migs[*m as usize];
                    json!({"uuid": mig_uuid(*m), "profile": mig_profile(mi.slices), "gpu_instance_id": mi.gi})
                })
                .collect();
            format!(
                "{org}\t{}\t{}\t{epoch}\t{}\t{}\t{}\t{}\t{}\t{}",
                cluster_id(node.cluster),
                gpu_uuid(g),
                node_name(g / 8),
                c.model,
                c.memory_mib,
                node.mode == Mode::Mig,
                Value::Array(migs),
                if node.mode == Mode::Vgpu { VGPU_PROFILE } else { "\\N" }
            )
        }),
    )
    .await;
    // Namespaces and who owned them.
    copy_rows(
        conn,
        "COPY namespaces (org_id, namespace_uid, cluster_id, name, created_at) FROM STDIN",
        w.namespaces
            .iter()
            .enumerate()
            .map(|(i, ns)| format!("{org}\t{}\t{}\t{}\t{epoch}", ns_id(i), cluster_id(ns.cluster), ns.name)),
    )
    .await;
    copy_rows(
        conn,
        "COPY namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source) FROM STDIN",
        w.namespaces.iter().enumerate().flat_map(|(i, ns)| {
            let org = org.clone();
            ns.owners.iter().map(move |o| {
                format!(
                    "{org}\t{}\t{}\t{}\t{}\tlabel",
                    ns_id(i),
                    pg_ts(o.from),
                    opt(o.to.map(pg_ts)),
                    tenant_id(o.tenant as usize)
                )
            })
        }),
    )
    .await;
    copy_rows(
        conn,
        "COPY quotas (org_id, quota_id, tenant_id, department_id, gpu_class, gpus, valid_from, valid_to, created_by) FROM STDIN",
        w.quotas.iter().enumerate().map(|(i, q)| {
            let (t, d) = match q.holder {
                Holder::Tenant(t) => (tenant_id(t as usize).to_string(), "\\N".to_string()),
                Holder::Dept(d) => ("\\N".to_string(), dept_id(d as usize).to_string()),
            };
            format!(
                "{org}\t{}\t{t}\t{d}\t{}\t{}\t{}\t{}\tbench",
                quota_id(i),
                CLASSES[q.class].name,
                q.gpus,
                pg_ts(q.from),
                opt(q.to.map(pg_ts))
            )
        }),
    )
    .await;
    // Allocation intervals: every job, including those wholly before the period.
    let gpu_names: Vec<String> = (0..w.spec.gpus as u32).map(gpu_uuid).collect();
    let intervals = copy_rows(
        conn,
        "COPY allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name, namespace,
             namespace_uid, container, node, resource, units, device_ids, gpu_model, gpu_class, sharing_mode, profile,
             replicas, fraction_num, fraction_den, started_at, ended_at, end_estimated, confidence, labels) FROM STDIN",
        w.jobs.iter().enumerate().map(|(idx, j)| {
            let lane = &w.lanes[j.lane as usize];
            let node = &w.nodes[lane.node as usize];
            let c = &CLASSES[node.class];
            let ns = &w.namespaces[j.ns as usize];
            let devices = match lane.mig {
                Some(m) => mig_uuid(m),
                None => lane.gpus.iter().map(|g| gpu_names[*g as usize].as_str()).collect::<Vec<_>>().join(","),
            };
            let (kind, container) = if lane.mode == Mode::Vgpu { ("vmi", "\\N") } else { ("pod", "main") };
            let profile = match lane.mode {
                Mode::Mig => mig_profile(w.migs[lane.mig.expect("mig") as usize].slices),
                Mode::Vgpu => VGPU_PROFILE,
                _ => "\\N",
            };
            let labels = if lane.endpoint {
                format!(r#"{{"endpoint": "{ENDPOINT}", "model": "llama-3-70b"}}"#)
            } else {
                "{}".to_string()
            };
            format!(
                "{org}\t{}\t{}\t{kind}\t{}\tjob-{idx}\t{}\t{}\t{container}\t{}\t{}\t{}\t{{{devices}}}\t{}\t{}\t{}\t{profile}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{labels}",
                cluster_id(node.cluster),
                w.allocation_id(idx, lane),
                Uuid::from_u128(JOB_BASE | idx as u128),
                ns.name,
                ns_id(j.ns as usize),
                node_name(lane.node),
                w.resource(lane),
                if lane.mode == Mode::Exclusive { lane.num } else { 1 },
                c.model,
                c.name,
                lane.mode.as_str(),
                if lane.mode == Mode::TimeSlice { "4" } else { "\\N" },
                lane.num,
                lane.den,
                pg_ts(j.start),
                opt(j.end.map(pg_ts)),
                j.estimated,
                World::confidence(lane, j).as_str(),
            )
        }),
    )
    .await;
    // Energy: one whole-GPU row per device and window, in the month's partition.
    sqlx::query("SELECT gpuledger_ensure_telemetry_partition($1::date)")
        .bind(PERIOD_START.date())
        .execute(&mut *conn)
        .await
        .expect("partition");
    let window = w.spec.energy_window_h * 3_600;
    let windows = ((unix(PERIOD_END) - unix(PERIOD_START)) / window) as u32;
    copy_rows(
        conn,
        "COPY telemetry_rollups (org_id, cluster_id, gpu_uuid, gpu_instance_id, window_start, window_end, node, samples,
             power_avg, energy_j) FROM STDIN",
        (0..w.spec.gpus as u32).flat_map(|g| {
            let org = org.clone();
            let node = &w.nodes[(g / 8) as usize];
            let (cluster, name, uuid) = (cluster_id(node.cluster), node_name(g / 8), gpu_names[g as usize].clone());
            (0..windows).map(move |i| {
                let s = unix(PERIOD_START) + i64::from(i) * window;
                let j = w.joules(g, i);
                format!(
                    "{org}\t{cluster}\t{uuid}\t-1\t{}\t{}\t{name}\t{}\t{}\t{j}",
                    pg_ts(s),
                    pg_ts(s + window),
                    window / 10,
                    j as f64 / window as f64
                )
            })
        }),
    )
    .await;
    copy_rows(
        conn,
        "COPY service_usage (org_id, cluster_id, endpoint, model, tenant_name, tenant_id, window_start, window_end,
             requests, input_tokens, output_tokens) FROM STDIN",
        w.usage.iter().map(|u| {
            let s = unix(PERIOD_START) + i64::from(u.hour) * 3_600;
            format!(
                "{org}\t{}\t{ENDPOINT}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                cluster_id(0),
                u.model,
                w.tenants[u.tenant as usize].name,
                tenant_id(u.tenant as usize),
                pg_ts(s),
                pg_ts(s + 3_600),
                u.requests,
                u.input,
                u.output
            )
        }),
    )
    .await;
    intervals
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
    let spec = Spec::from_env();
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
    let input_records = (input.allocations.len(), input.energy.len(), input.quotas.len(), input.service_usage.len());
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
        let mut admin = PgConnection::connect(&test_db.admin_url).await.expect("connect");
        let rows = load_world(&mut admin, &world).await;
        assert_eq!(rows as usize, world.jobs.len());
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
        TENANTS,
        DEPARTMENTS,
        input_records.2,
        dept_quotas,
        grouped(input_records.1),
        spec.energy_window_h,
        grouped(world.usage.len()),
        USAGE_TENANTS,
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
