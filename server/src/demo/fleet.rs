//! A synthetic GPU fleet of any size: what `gpuledger-server demo --gpus N` seeds and what the ledger bench
//! (`server/benches/ledger.rs`) computes on. One generator for both.
//!
//! [`World::generate`] is pure: from a [`FleetSpec`] (GPU count, seed, first month, end of data) it plans
//! departments and tenants, clusters of 8-GPU nodes of the demo's GPU classes in every sharing mode (exclusive,
//! MIG, time-sliced, vGPU, passthrough, and a shared model-serving endpoint), namespaces and who owns them, jobs
//! back to back on every schedulable slot, quotas sized from what tenants hold, telemetry (utilization, power,
//! energy) and the endpoint's per-tenant token usage. The same spec gives the same world.
//!
//! [`load`] writes it as the product's ingest would have stored it — devices, nodes, namespaces and ownership,
//! allocation intervals with their fraction and confidence, telemetry rollups, `service_usage` and
//! `endpoint_totals` — in one organization-scoped transaction (as `gpuledger_app`, row-level security on) with
//! `INSERT … SELECT FROM unnest(…)` in chunks (COPY is refused on tables with row-level security), and leaves a
//! marker in the audit log in the same transaction, so a fleet is in whole or not at all.

use std::collections::{BTreeMap, HashMap};

use gpuledger_core::ids::OrgId;
use rand::{Rng, SeedableRng, rngs::StdRng, seq::SliceRandom};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use super::reference::{CATALOG_SINCE, CLASSES as CATALOG, MIG_PROFILES, VGPU_PROFILES};
use crate::db::{Database, DbError, OrgTx};

/// The audit-log action that marks a loaded fleet (its target is [`FLEET_VERSION`]).
pub const FLEET_ACTION: &str = "demo.fleet_loaded";
/// Bumped when the generated fleet changes shape.
pub const FLEET_VERSION: &str = "demo-fleet/1";
/// The smallest fleet: five nodes, enough for one of each sharing mode.
pub const MIN_GPUS: usize = 40;
/// The largest fleet `demo --gpus` accepts.
pub const MAX_GPUS: usize = 100_000;
/// The demo's seed (any value gives a different, equally valid fleet).
pub const DEMO_SEED: u64 = 0x2026_0900_1ed6_e500;
/// The shared model-serving endpoint (the name the demo's cost policy prices as a service).
pub const ENDPOINT: &str = "llm-shared";
/// Models the endpoint serves.
pub const MODELS: [&str; 2] = ["llama-3-70b", "mixtral-8x7b"];
/// Cluster names (the demo's own clusters, so a fleet lands in them).
pub const CLUSTERS: [&str; 2] = ["prod-east", "research-west"];
/// Departments, in order of creation; the first three are the demo's.
const DEPARTMENTS: [&str; 20] = [
    "Research",
    "Product",
    "Platform Engineering",
    "Search",
    "Ads",
    "Robotics",
    "Autonomy",
    "Healthcare AI",
    "Finance Analytics",
    "Security",
    "Customer Support",
    "Speech",
    "Vision",
    "Trust and Safety",
    "Marketing Science",
    "Data Engineering",
    "Core ML",
    "Infrastructure",
    "Growth",
    "Developer Tools",
];
/// The demo's own tenants (name, department index), first in every fleet.
const NAMED_TENANTS: [(&str, usize); 9] = [
    ("nlp-research", 0),
    ("vision-research", 0),
    ("speech-research", 0),
    ("search-ranking", 1),
    ("assistant-serving", 1),
    ("recommendations", 1),
    ("ml-platform", 2),
    ("analytics-vdi", 2),
    ("data-engineering", 2),
];
/// The tenant that owns the shared endpoint's namespace (`assistant-serving`).
const ENDPOINT_OWNER: u16 = 4;
/// Jobs start this long before the first month (so some cross its start).
const LEAD_S: i64 = 3 * 86_400;
/// Mean gap between two jobs on one slot is half of this.
const GAP_MAX_S: i64 = 10 * 3_600;
/// Rows per INSERT statement.
const CHUNK: usize = 20_000;

const CLUSTER_BASE: u128 = 0xf1ee_0000_0000_4000_8000_0000_0000_0000;
const DEPT_BASE: u128 = 0xf1ee_0001_0000_4000_8000_0000_0000_0000;
const TENANT_BASE: u128 = 0xf1ee_0002_0000_4000_8000_0000_0000_0000;
const NS_BASE: u128 = 0xf1ee_0003_0000_4000_8000_0000_0000_0000;
const GPU_BASE: u128 = 0xf1ee_0004_0000_4000_8000_0000_0000_0000;
const MIG_BASE: u128 = 0xf1ee_0005_0000_4000_8000_0000_0000_0000;
const JOB_BASE: u128 = 0xf1ee_0006_0000_4000_8000_0000_0000_0000;
const QUOTA_BASE: u128 = 0xf1ee_0007_0000_4000_8000_0000_0000_0000;
const NODE_BASE: u128 = 0xf1ee_0008_0000_4000_8000_0000_0000_0000;

/// How a node shares its GPUs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Whole GPUs to pods.
    Exclusive,
    /// MIG instances to pods.
    Mig,
    /// Time-slicing, 4 replicas per GPU.
    TimeSlice,
    /// vGPU desktops (KubeVirt VMs).
    Vgpu,
    /// Whole GPUs passed through to VMs.
    Passthrough,
}

impl Mode {
    /// The name `allocation_intervals.sharing_mode` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Mig => "mig",
            Mode::TimeSlice => "time_slice",
            Mode::Vgpu => "vgpu",
            Mode::Passthrough => "passthrough",
        }
    }
}

/// A GPU class of the fleet: one of the demo's catalog classes, with how it is used and its power envelope.
#[derive(Debug)]
pub struct ClassDef {
    /// Pricing class (as in the demo's catalog).
    pub name: &'static str,
    /// GPU model as the driver names it.
    pub model: &'static str,
    /// Memory, MiB.
    pub memory_mib: i64,
    /// KubeVirt passthrough resource.
    pub pci_device: &'static str,
    /// Share of the nodes.
    pub share: f64,
    /// Idle and busy power, W.
    pub idle_w: f64,
    /// Busy power, W.
    pub busy_w: f64,
}

/// The fleet's classes (indexes are used below: 0 H100, 1 A100-80GB, 2 A100-40GB, 3 L4, 4 T4).
pub const CLASSES: [ClassDef; 5] = [
    ClassDef {
        name: "H100-80GB",
        model: "NVIDIA H100 80GB HBM3",
        memory_mib: 81_559,
        pci_device: "GH100_H100_SXM5_80GB",
        share: 0.35,
        idle_w: 70.0,
        busy_w: 700.0,
    },
    ClassDef {
        name: "A100-80GB",
        model: "NVIDIA A100-SXM4-80GB",
        memory_mib: 81_920,
        pci_device: "GA100_A100_SXM4_80GB",
        share: 0.25,
        idle_w: 55.0,
        busy_w: 400.0,
    },
    ClassDef {
        name: "A100-40GB",
        model: "NVIDIA A100-PCIE-40GB",
        memory_mib: 40_960,
        pci_device: "GA100_A100_PCIE_40GB",
        share: 0.10,
        idle_w: 40.0,
        busy_w: 250.0,
    },
    ClassDef {
        name: "L4-24GB",
        model: "NVIDIA L4",
        memory_mib: 23_034,
        pci_device: "AD104GL_L4",
        share: 0.15,
        idle_w: 16.0,
        busy_w: 72.0,
    },
    ClassDef {
        name: "T4-16GB",
        model: "Tesla T4",
        memory_mib: 15_360,
        pci_device: "TU104GL_Tesla_T4",
        share: 0.15,
        idle_w: 10.0,
        busy_w: 70.0,
    },
];

/// MIG layouts per class (compute slices of each instance, out of 7); empty where the class is not partitioned.
fn mig_layouts(class: usize) -> &'static [&'static [u8]] {
    match class {
        0 => &[&[3, 2, 1, 1], &[1, 1, 1, 1, 1, 1, 1], &[3, 3], &[2, 2, 2, 1]],
        1 => &[&[4, 3], &[3, 2, 1, 1], &[1, 1, 1, 1, 1, 1, 1], &[2, 2, 3]],
        2 => &[&[3, 3], &[3, 1, 1, 1, 1], &[1, 1, 1, 1, 1, 1, 1]],
        _ => &[],
    }
}

/// The MIG profile of `slices` compute slices on `class` (names as in the approved inventory).
pub fn mig_profile(class: usize, slices: u8) -> &'static str {
    match (class, slices) {
        (2, 1) => "1g.5gb",
        (2, _) => "3g.20gb",
        (_, 1) => "1g.10gb",
        (_, 2) => "2g.20gb",
        (_, 3) => "3g.40gb",
        (_, 4) => "4g.40gb",
        _ => "7g.80gb",
    }
}

/// vGPU types the T4 nodes are set up with: (profile, VMs per board).
const VGPU_TYPES: [(&str, i64); 3] = [("GRID_T4-2Q", 8), ("GRID_T4-4Q", 4), ("GRID_T4-8Q", 2)];

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetSpec {
    /// GPUs (whole nodes of 8, at least [`MIN_GPUS`]).
    pub gpus: usize,
    /// Seed of the random choices.
    pub seed: u64,
    /// Start of the first month (UTC midnight of its first day): data runs from here (jobs start a little earlier).
    pub start: OffsetDateTime,
    /// End of the data (exclusive): jobs still running then are open.
    pub through: OffsetDateTime,
    /// Telemetry rollup window, hours (1 as the agents send; longer windows keep very large fleets quick to load).
    pub window_h: i64,
}

impl FleetSpec {
    /// A spec for `gpus` GPUs (rounded up to whole nodes, at least [`MIN_GPUS`]); hourly telemetry up to 2,000
    /// GPUs, 4-hour windows above (an hourly month of 10,000 GPUs is 7 million rows).
    pub fn new(gpus: usize, seed: u64, start: OffsetDateTime, through: OffsetDateTime) -> Self {
        let gpus = gpus.clamp(MIN_GPUS, MAX_GPUS).div_ceil(8) * 8;
        Self { gpus, seed, start, through, window_h: if gpus <= 2_000 { 1 } else { 4 } }
    }

    /// When namespaces, ownership, devices and quotas begin (well before the data).
    pub fn epoch(&self) -> OffsetDateTime {
        self.start - Duration::days(60)
    }
}

/// A node of 8 GPUs.
#[derive(Debug)]
pub struct Node {
    /// Index into [`CLASSES`].
    pub class: usize,
    /// How it shares its GPUs.
    pub mode: Mode,
    /// Index into [`CLUSTERS`].
    pub cluster: usize,
    /// vGPU nodes: index into the vGPU types.
    pub vgpu: Option<usize>,
}

/// A MIG instance.
#[derive(Debug)]
pub struct MigInstance {
    /// Its GPU.
    pub gpu: u32,
    /// Compute slices (of 7).
    pub slices: u8,
    /// GPU instance ID.
    pub gi: u8,
}

/// Something that runs one job at a time: a set of whole GPUs, a MIG instance, a time-slice replica, a vGPU.
#[derive(Debug)]
pub struct Lane {
    /// Its node.
    pub node: u32,
    /// The node's mode.
    pub mode: Mode,
    /// Its GPUs.
    pub gpus: Vec<u32>,
    /// Its MIG instance.
    pub mig: Option<u32>,
    /// Time-slice replica number.
    pub replica: u8,
    /// GPU-equivalents held: numerator.
    pub num: i64,
    /// GPU-equivalents held: denominator.
    pub den: i64,
    /// Serves the shared endpoint.
    pub endpoint: bool,
}

/// A job (pod or VM) on a lane.
#[derive(Debug)]
pub struct Job {
    /// Its lane.
    pub lane: u32,
    /// Its namespace.
    pub ns: u32,
    /// Start, Unix seconds.
    pub start: i64,
    /// End, Unix seconds; `None` while running.
    pub end: Option<i64>,
    /// The end was inferred (the pod vanished).
    pub estimated: bool,
}

/// Who owned a namespace when.
#[derive(Debug)]
pub struct Owner {
    /// From, Unix seconds.
    pub from: i64,
    /// To, Unix seconds.
    pub to: Option<i64>,
    /// Tenant index.
    pub tenant: u16,
}

/// A namespace.
#[derive(Debug)]
pub struct Namespace {
    /// Cluster index.
    pub cluster: usize,
    /// Name.
    pub name: String,
    /// Owners, in order (none: unowned).
    pub owners: Vec<Owner>,
}

/// A tenant.
#[derive(Debug)]
pub struct TenantDef {
    /// Name.
    pub name: String,
    /// Department index.
    pub dept: usize,
    /// The class it mostly uses.
    pub primary: usize,
    /// Popularity (how many jobs it runs, relatively).
    pub weight: f64,
}

/// Who holds a quota.
#[derive(Debug)]
pub enum Holder {
    /// A tenant (index).
    Tenant(u16),
    /// A department (index).
    Dept(u16),
}

/// A quota.
#[derive(Debug)]
pub struct QuotaDef {
    /// Holder.
    pub holder: Holder,
    /// Class index.
    pub class: usize,
    /// GPUs, as a decimal.
    pub gpus: String,
    /// From, Unix seconds.
    pub from: i64,
    /// To, Unix seconds.
    pub to: Option<i64>,
}

/// One tenant's use of the shared endpoint in one hour.
#[derive(Debug)]
pub struct UsageRow {
    /// Tenant index.
    pub tenant: u16,
    /// Model.
    pub model: &'static str,
    /// Hour index from the spec's start.
    pub hour: u32,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
}

/// The generated fleet (compact; strings are made when rows are written).
#[derive(Debug)]
pub struct World {
    /// What it was generated from.
    pub spec: FleetSpec,
    /// Department names.
    pub departments: Vec<&'static str>,
    /// Tenants.
    pub tenants: Vec<TenantDef>,
    /// Nodes (GPU `g` is on node `g / 8`).
    pub nodes: Vec<Node>,
    /// MIG instances.
    pub migs: Vec<MigInstance>,
    /// Lanes.
    pub lanes: Vec<Lane>,
    /// Jobs, lane by lane.
    pub jobs: Vec<Job>,
    /// Namespaces.
    pub namespaces: Vec<Namespace>,
    /// Namespaces that change owner.
    pub ownership_changes: usize,
    /// Namespaces nobody owns.
    pub unowned_namespaces: usize,
    /// Quotas.
    pub quotas: Vec<QuotaDef>,
    /// Shared-endpoint usage.
    pub usage: Vec<UsageRow>,
    /// Tenants with endpoint usage.
    pub usage_tenants: usize,
}

fn unix(t: OffsetDateTime) -> i64 {
    t.unix_timestamp()
}

/// Unix seconds as a time (the generator only makes times between its spec's bounds).
pub fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(secs).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// GPU `g`'s UUID.
pub fn gpu_uuid(g: u32) -> String {
    format!("GPU-{}", Uuid::from_u128(GPU_BASE | u128::from(g)))
}

/// MIG instance `m`'s UUID.
pub fn mig_uuid(m: u32) -> String {
    format!("MIG-{}", Uuid::from_u128(MIG_BASE | u128::from(m)))
}

/// Cluster `c`'s ID (where the organization does not have a cluster of that name already).
pub fn cluster_id(c: usize) -> Uuid {
    Uuid::from_u128(CLUSTER_BASE | c as u128)
}

/// Department `d`'s ID (likewise).
pub fn dept_id(d: usize) -> Uuid {
    Uuid::from_u128(DEPT_BASE | d as u128)
}

/// Tenant `t`'s ID (likewise).
pub fn tenant_id(t: usize) -> Uuid {
    Uuid::from_u128(TENANT_BASE | t as u128)
}

/// Namespace `n`'s UID.
pub fn ns_id(n: usize) -> Uuid {
    Uuid::from_u128(NS_BASE | n as u128)
}

/// Quota `q`'s ID.
pub fn quota_id(q: usize) -> Uuid {
    Uuid::from_u128(QUOTA_BASE | q as u128)
}

/// Job `j`'s pod or VM UID.
pub fn job_uid(j: usize) -> Uuid {
    Uuid::from_u128(JOB_BASE | j as u128)
}

/// Node `n`'s name.
pub fn node_name(n: u32) -> String {
    format!("gpu-node-{n:05}")
}

/// splitmix64, for values derived from an index (telemetry), independent of the generation order.
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

fn slug(name: &str) -> String {
    name.to_ascii_lowercase().replace(' ', "-")
}

/// The class and mode of a node picked at random (MIG on the large classes, time-slicing on L4s, vGPU and
/// passthrough on T4s, whole GPUs otherwise).
fn pick_node(rng: &mut StdRng) -> (usize, Mode) {
    let class = pick_class(rng);
    let x: f64 = rng.random();
    let mode = match class {
        0 if x < 0.3 => Mode::Mig,
        1 if x < 0.5 => Mode::Mig,
        2 if x < 0.4 => Mode::Mig,
        3 if x < 0.7 => Mode::TimeSlice,
        4 if x < 0.6 => Mode::Vgpu,
        4 => Mode::Passthrough,
        _ => Mode::Exclusive,
    };
    (class, mode)
}

impl World {
    /// Generates the fleet of `spec`.
    pub fn generate(spec: FleetSpec) -> Self {
        let mut rng = StdRng::seed_from_u64(spec.seed);
        let (p_start, p_end) = (unix(spec.start), unix(spec.through));
        let n_tenants = (spec.gpus / 20).clamp(12, 500);
        let n_depts = (n_tenants / 10).clamp(3, DEPARTMENTS.len());
        let departments = DEPARTMENTS[..n_depts].to_vec();
        // Tenants: popularity follows a Zipf-like law over a shuffled rank; each has a primary GPU class.
        let mut ranks: Vec<usize> = (0..n_tenants).collect();
        ranks.shuffle(&mut rng);
        let tenants: Vec<TenantDef> = (0..n_tenants)
            .map(|t| {
                let (name, dept) = match NAMED_TENANTS.get(t) {
                    Some((name, dept)) => ((*name).to_string(), *dept),
                    None => (format!("{}-{t:03}", slug(departments[t % n_depts])), t % n_depts),
                };
                // Research is the largest consumer, as on most GPU platforms (its manager sees a real share).
                let boost = if dept == 0 { 2.5 } else { 1.0 };
                TenantDef {
                    name,
                    dept,
                    primary: pick_class(&mut rng),
                    weight: boost / ((ranks[t] + 1) as f64).powf(0.8),
                }
            })
            .collect();

        // Nodes of 8 GPUs; the first 1 % serve the shared endpoint (H100, one GPU per pod); the next four are one
        // of each other sharing mode, so that even the smallest fleet has them all.
        let n_nodes = spec.gpus / 8;
        let endpoint_nodes = (n_nodes / 100).max(1);
        let forced = [(1, Mode::Mig), (3, Mode::TimeSlice), (4, Mode::Vgpu), (4, Mode::Passthrough)];
        let mut nodes = Vec::with_capacity(n_nodes);
        let mut migs = Vec::new();
        let mut lanes = Vec::new();
        for n in 0..n_nodes {
            let endpoint = n < endpoint_nodes;
            let (class, mode) = if endpoint {
                (0, Mode::Exclusive)
            } else if let Some(f) = forced.get(n - endpoint_nodes) {
                *f
            } else {
                pick_node(&mut rng)
            };
            let vgpu = (mode == Mode::Vgpu).then(|| rng.random_range(0..VGPU_TYPES.len()));
            nodes.push(Node { class, mode, cluster: n % CLUSTERS.len(), vgpu });
            let first = (n * 8) as u32;
            let lane = |gpus: Vec<u32>, mig: Option<u32>, replica: u8, num: i64, den: i64| Lane {
                node: n as u32,
                mode,
                gpus,
                mig,
                replica,
                num,
                den,
                endpoint,
            };
            match mode {
                Mode::Exclusive | Mode::Passthrough => {
                    // Whole GPUs: the node runs jobs of 1, 2, 4 or 8 GPUs (one size per node; VMs get 1 to 4).
                    let k = match (endpoint, mode) {
                        (true, _) => 1,
                        (_, Mode::Passthrough) => [1u32, 2, 4][rng.random_range(0..3)],
                        _ => [1u32, 2, 4, 8][rng.random_range(0..4)],
                    };
                    for l in 0..8 / k {
                        lanes.push(lane((first + l * k..first + (l + 1) * k).collect(), None, 0, i64::from(k), 1));
                    }
                }
                Mode::Mig => {
                    let layouts = mig_layouts(class);
                    for g in first..first + 8 {
                        let layout = layouts[rng.random_range(0..layouts.len())];
                        for (gi, &slices) in layout.iter().enumerate() {
                            let m = migs.len() as u32;
                            migs.push(MigInstance { gpu: g, slices, gi: gi as u8 + 1 });
                            lanes.push(lane(vec![g], Some(m), 0, i64::from(slices), 7));
                        }
                    }
                }
                Mode::TimeSlice => {
                    for g in first..first + 8 {
                        for r in 0..4 {
                            lanes.push(lane(vec![g], None, r, 1, 4));
                        }
                    }
                }
                Mode::Vgpu => {
                    let per_board = VGPU_TYPES[vgpu.unwrap_or(0)].1;
                    for g in first..first + 8 {
                        for _ in 0..per_board {
                            lanes.push(lane(vec![g], None, 0, 1, per_board));
                        }
                    }
                }
            }
        }

        // Namespaces: 1–2 per tenant and cluster, a few nobody owns, one for the shared endpoint.
        let mut namespaces = Vec::new();
        let epoch = unix(spec.epoch());
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
        let unowned_namespaces = 2 * CLUSTERS.len();
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
            owners: vec![Owner { from: epoch, to: None, tenant: ENDPOINT_OWNER }],
        });
        // A few namespaces change owner during the first month (allocations across the change are split).
        let ownership_changes = (owned / 20).min(20);
        let span = (p_end - p_start).clamp(2 * 86_400, 30 * 86_400);
        let mut changed = 0;
        while changed < ownership_changes {
            let ns = rng.random_range(0..owned);
            if namespaces[ns].owners.len() > 1 {
                continue;
            }
            let old = namespaces[ns].owners[0].tenant;
            let new = loop {
                let t = rng.random_range(0..n_tenants) as u16;
                if t != old {
                    break t;
                }
            };
            let when = p_start + rng.random_range(span / 10..span * 9 / 10);
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

        // Jobs: each lane runs jobs back to back with gaps, from before the first month up to `through`; those
        // still running then have no end yet.
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
                let open = end > p_end;
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
            departments,
            tenants,
            nodes,
            migs,
            lanes,
            jobs,
            namespaces,
            ownership_changes,
            unowned_namespaces,
            quotas: Vec::new(),
            usage: Vec::new(),
            usage_tenants: 0,
        };
        world.quotas = world.plan_quotas(&mut rng);
        world.plan_usage(&mut rng);
        world
    }

    /// Quotas sized from what each tenant actually holds: most tenants have one on their primary class (some
    /// change during the first month), some a second one; tenants of some departments without their own quota
    /// share a department quota.
    fn plan_quotas(&self, rng: &mut StdRng) -> Vec<QuotaDef> {
        let (p_start, p_end) = (unix(self.spec.start), unix(self.spec.through));
        let n_tenants = self.tenants.len();
        let mut held = vec![[0.0_f64; CLASSES.len()]; n_tenants];
        for j in &self.jobs {
            let lane = &self.lanes[j.lane as usize];
            if lane.endpoint {
                continue;
            }
            let class = self.nodes[lane.node as usize].class;
            let (s, e) = (j.start.max(p_start), j.end.unwrap_or(p_end).min(p_end));
            if let Some(o) = self.namespaces[j.ns as usize].owners.first()
                && e > s
            {
                held[o.tenant as usize][class] += (e - s) as f64 * lane.num as f64 / lane.den as f64;
            }
        }
        let span = (p_end - p_start).max(1) as f64;
        let epoch = unix(self.spec.epoch());
        let mut quotas = Vec::new();
        let mut has_quota = vec![[false; CLASSES.len()]; n_tenants];
        for t in 0..n_tenants {
            if !rng.random_bool(0.8) {
                continue;
            }
            let class = self.tenants[t].primary;
            let gpus = held[t][class] / span * rng.random_range(0.5..1.1);
            has_quota[t][class] = true;
            if rng.random_bool(0.1) {
                let when = p_start + rng.random_range((p_end - p_start) / 6..(p_end - p_start).max(7) * 5 / 6);
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
                    .unwrap_or((class + 1) % CLASSES.len());
                let gpus = held[t][second] / span * rng.random_range(0.5..1.1);
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
        for d in (0..self.departments.len()).filter(|d| d % 5 < 2) {
            let pooled = |c: usize| -> f64 {
                (0..n_tenants)
                    .filter(|t| self.tenants[*t].dept == d && !has_quota[*t][c])
                    .map(|t| held[t][c])
                    .sum::<f64>()
            };
            let Some(class) = (0..CLASSES.len()).max_by(|a, b| pooled(*a).total_cmp(&pooled(*b))) else { continue };
            let avg = pooled(class) / span;
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
        quotas
    }

    /// Shared-endpoint usage: up to 50 tenants, hourly windows, one or two models each.
    fn plan_usage(&mut self, rng: &mut StdRng) {
        let n_tenants = self.tenants.len();
        let mut users: Vec<u16> = (0..n_tenants as u16).filter(|t| *t != ENDPOINT_OWNER).collect();
        users.shuffle(rng);
        users.truncate((n_tenants / 4).clamp(3, 50));
        users.sort_unstable();
        self.usage_tenants = users.len();
        let hours = self.hours();
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
                    self.usage.push(UsageRow {
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
    }

    /// Whole hours from the start to `through`.
    pub fn hours(&self) -> u32 {
        u32::try_from((unix(self.spec.through) - unix(self.spec.start)).max(0) / 3_600).unwrap_or(0)
    }

    /// Whole telemetry windows from the start to `through` (a window still in progress is not reported yet).
    pub fn windows(&self) -> u32 {
        let w = self.spec.window_h * 3_600;
        u32::try_from((unix(self.spec.through) - unix(self.spec.start)).max(0) / w).unwrap_or(0)
    }

    /// The class of a lane.
    pub fn class_of(&self, lane: &Lane) -> &'static ClassDef {
        &CLASSES[self.nodes[lane.node as usize].class]
    }

    /// The job split at ownership changes, as `ledger::load_allocations` splits it: one part per ownership row that
    /// overlaps it (ordered by `valid_from`), or one part with no tenant.
    pub fn parts(&self, j: &Job) -> Vec<(Option<u16>, i64, Option<i64>)> {
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

    /// The device-plugin resource a lane's jobs request.
    pub fn resource(&self, lane: &Lane) -> String {
        let node = &self.nodes[lane.node as usize];
        match lane.mode {
            Mode::Exclusive | Mode::TimeSlice => "nvidia.com/gpu".into(),
            Mode::Mig => format!("nvidia.com/mig-{}", self.profile(lane).unwrap_or_default()),
            Mode::Vgpu => format!("nvidia.com/{}", VGPU_TYPES[node.vgpu.unwrap_or(0)].0),
            Mode::Passthrough => format!("nvidia.com/{}", CLASSES[node.class].pci_device),
        }
    }

    /// The MIG or vGPU profile of a lane.
    pub fn profile(&self, lane: &Lane) -> Option<&'static str> {
        let node = &self.nodes[lane.node as usize];
        match lane.mode {
            Mode::Mig => lane.mig.map(|m| mig_profile(node.class, self.migs[m as usize].slices)),
            Mode::Vgpu => Some(VGPU_TYPES[node.vgpu.unwrap_or(0)].0),
            _ => None,
        }
    }

    /// Job `idx`'s allocation ID, as the agents make it (`UID/container/resource` for pods, `UID/resource` for VMs).
    pub fn allocation_id(&self, idx: usize, lane: &Lane) -> String {
        match lane.mode {
            Mode::Vgpu | Mode::Passthrough => format!("{}/{}", job_uid(idx), self.resource(lane)),
            _ => format!("{}/main/{}", job_uid(idx), self.resource(lane)),
        }
    }

    /// The devices an allocation names: GPU UUIDs, a MIG instance, or a time-slice replica (`UUID::N`).
    pub fn device_ids(&self, lane: &Lane) -> Vec<String> {
        match (lane.mode, lane.mig) {
            (Mode::Mig, Some(m)) => vec![mig_uuid(m)],
            (Mode::TimeSlice, _) => lane.gpus.iter().map(|g| format!("{}::{}", gpu_uuid(*g), lane.replica)).collect(),
            _ => lane.gpus.iter().map(|g| gpu_uuid(*g)).collect(),
        }
    }

    /// How sure the fraction is: modeled for time-slicing, estimated where the end was inferred.
    pub fn confidence(lane: &Lane, j: &Job) -> &'static str {
        if j.estimated {
            "estimated"
        } else if lane.mode == Mode::TimeSlice {
            "modeled"
        } else {
            "exact"
        }
    }

    /// Share of each GPU held in each telemetry window (GPU-major), from the jobs.
    pub fn occupancy(&self) -> Vec<f32> {
        let windows = self.windows() as usize;
        let w = self.spec.window_h * 3_600;
        let start = unix(self.spec.start);
        let mut occ = vec![0.0_f32; self.spec.gpus * windows];
        if windows == 0 {
            return occ;
        }
        for j in &self.jobs {
            let lane = &self.lanes[j.lane as usize];
            let per_gpu = lane.num as f64 / lane.den as f64 / lane.gpus.len() as f64;
            let (s, e) = (j.start.max(start), j.end.unwrap_or(i64::MAX).min(start + w * windows as i64));
            if e <= s {
                continue;
            }
            let (first, last) = (((s - start) / w) as usize, ((e - 1 - start) / w) as usize);
            for win in first..=last.min(windows - 1) {
                let (ws, we) = (start + win as i64 * w, start + (win as i64 + 1) * w);
                let overlap = (e.min(we) - s.max(ws)) as f64 / w as f64;
                for g in &lane.gpus {
                    occ[*g as usize * windows + win] += (overlap * per_gpu) as f32;
                }
            }
        }
        occ
    }

    /// Utilization (%) of GPU `g` in window `w` held to `occupancy`: busy work varies by job and hour, and some of
    /// what is held sits idle (hung jobs, notebooks left open).
    pub fn utilization(&self, g: u32, w: u32, occupancy: f32) -> f32 {
        let x = unit((u64::from(g) << 24) ^ u64::from(w) ^ self.spec.seed);
        let busy = if x < 0.08 { 0.02 } else { 0.35 + 0.6 * x };
        (f64::from(occupancy.min(1.0)) * busy * 100.0) as f32
    }

    /// Average power (W) of GPU `g` at utilization `util` (%).
    pub fn power(&self, g: u32, util: f32) -> f64 {
        let c = &CLASSES[self.nodes[(g / 8) as usize].class];
        c.idle_w + (c.busy_w - c.idle_w) * f64::from(util) / 100.0
    }

    /// Whole joules GPU `g` used in window `win`, held to `occupancy`.
    pub fn energy_j(&self, g: u32, win: u32, occupancy: f32) -> f64 {
        let power = self.power(g, self.utilization(g, win, occupancy));
        (power * (self.spec.window_h * 3_600) as f64).round()
    }

    /// What the endpoint's model servers counted, per hour, model and pod: the tenants' usage split over a few
    /// pods, 2 % more in all (requests nobody could attribute).
    pub fn endpoint_totals(&self) -> Vec<EndpointTotalRow> {
        let mut totals: BTreeMap<(u32, &'static str), (u64, u64, u64)> = BTreeMap::new();
        for u in &self.usage {
            let t = totals.entry((u.hour, u.model)).or_default();
            t.0 += u.requests;
            t.1 += u.input;
            t.2 += u.output;
        }
        let pods = self.lanes.iter().filter(|l| l.endpoint).count().clamp(1, 4) as u64;
        let mut out = Vec::with_capacity(totals.len() * pods as usize);
        for ((hour, model), (r, i, o)) in totals {
            for pod in 0..pods {
                let share = |v: u64| v * 102 / 100 / pods + u64::from(pod == 0) * (v * 102 / 100 % pods);
                out.push(EndpointTotalRow {
                    hour,
                    model,
                    pod: pod as u32,
                    requests: share(r),
                    input: share(i),
                    output: share(o),
                });
            }
        }
        out
    }
}

/// One model server's counters for one hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointTotalRow {
    /// Hour index from the spec's start.
    pub hour: u32,
    /// Model.
    pub model: &'static str,
    /// Pod number.
    pub pod: u32,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
}

/// What [`load`] stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Loaded {
    /// GPUs (devices).
    pub gpus: u64,
    /// Allocation intervals.
    pub allocations: u64,
    /// Telemetry rollups.
    pub telemetry: u64,
    /// Shared-endpoint usage rows.
    pub usage: u64,
    /// Tenants.
    pub tenants: u64,
    /// Quotas.
    pub quotas: u64,
}

/// Whether organization `org` already holds a fleet: the details of its marker.
pub async fn loaded_marker(db: &Database, org: OrgId) -> Result<Option<Value>, DbError> {
    let mut tx = db.begin_org(org).await?;
    let marker: Option<Value> = sqlx::query_scalar(
        "SELECT details FROM audit_log WHERE org_id = $1 AND action = $2 AND target = $3 ORDER BY at DESC LIMIT 1",
    )
    .bind(org.as_uuid())
    .bind(FLEET_ACTION)
    .bind(FLEET_VERSION)
    .fetch_optional(tx.conn())
    .await?;
    tx.commit().await?;
    Ok(marker)
}

/// `n` with thousands separators (`10,000`).
pub fn grouped(n: usize) -> String {
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

/// Writes `world` into organization `org` in one transaction, with the marker [`loaded_marker`] reads, and logs
/// its progress. Names already defined in the organization (the demo's departments, tenants, clusters, catalog)
/// are reused; everything else is new. Makes the telemetry partitions of the months it writes first.
#[allow(clippy::type_complexity)] // column vectors for UNNEST inserts
pub async fn load(db: &Database, org: OrgId, world: &World, actor: &str) -> Result<Loaded, DbError> {
    let spec = &world.spec;
    let label = format!("seeding {} GPUs", grouped(spec.gpus));
    db.cross_org_maintenance().telemetry_partitions(spec.start.date(), spec.through.date()).await?;
    let mut tx = db.begin_org(org).await?;
    tx.allow_long_statements().await?;
    let o = org.as_uuid();
    let epoch = spec.epoch();
    let mut loaded = Loaded::default();

    tracing::info!("{label}: departments, tenants, clusters, inventory…");
    let depts = upsert_named(
        &mut tx,
        "INSERT INTO departments (org_id, department_id, name, created_at)
         SELECT $1, u.id, u.name, $4 FROM unnest($2::uuid[], $3::text[]) AS u(id, name) ON CONFLICT DO NOTHING",
        "SELECT name, department_id FROM departments WHERE org_id = $1 AND name = ANY($2)",
        o,
        (0..world.departments.len()).map(dept_id).collect(),
        world.departments.iter().map(|d| d.to_string()).collect(),
        epoch,
    )
    .await?;
    let dept_of: Vec<Uuid> = world.departments.iter().map(|d| depts.get(*d).copied().unwrap_or_default()).collect();
    sqlx::query(
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at)
         SELECT $1, u.id, u.dept, u.name, $5 FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS u(id, dept, name)
         ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind((0..world.tenants.len()).map(tenant_id).collect::<Vec<_>>())
    .bind(world.tenants.iter().map(|t| dept_of[t.dept]).collect::<Vec<_>>())
    .bind(world.tenants.iter().map(|t| t.name.clone()).collect::<Vec<_>>())
    .bind(epoch)
    .execute(tx.conn())
    .await?;
    let tenant_rows: Vec<(String, Uuid, Uuid)> =
        sqlx::query_as("SELECT name, tenant_id, department_id FROM tenants WHERE org_id = $1 AND name = ANY($2)")
            .bind(o)
            .bind(world.tenants.iter().map(|t| t.name.clone()).collect::<Vec<_>>())
            .fetch_all(tx.conn())
            .await?;
    let by_name: HashMap<String, (Uuid, Uuid)> = tenant_rows.into_iter().map(|(n, t, d)| (n, (t, d))).collect();
    // (tenant ID, its department) per tenant index.
    let tenant_of: Vec<(Uuid, Uuid)> =
        world.tenants.iter().map(|t| by_name.get(&t.name).copied().unwrap_or_default()).collect();
    loaded.tenants = tenant_of.len() as u64;
    let clusters = upsert_named(
        &mut tx,
        "INSERT INTO clusters (org_id, cluster_id, name, created_at)
         SELECT $1, u.id, u.name, $4 FROM unnest($2::uuid[], $3::text[]) AS u(id, name) ON CONFLICT DO NOTHING",
        "SELECT name, cluster_id FROM clusters WHERE org_id = $1 AND name = ANY($2)",
        o,
        (0..CLUSTERS.len()).map(cluster_id).collect(),
        CLUSTERS.iter().map(|c| c.to_string()).collect(),
        epoch,
    )
    .await?;
    let cluster_of: Vec<Uuid> = CLUSTERS.iter().map(|c| clusters.get(*c).copied().unwrap_or_default()).collect();
    insert_catalog(&mut tx, o, &cluster_of).await?;

    tracing::info!("{label}: devices and nodes…");
    let mut mig_of: Vec<Vec<u32>> = vec![Vec::new(); spec.gpus];
    for (m, mi) in world.migs.iter().enumerate() {
        mig_of[mi.gpu as usize].push(m as u32);
    }
    for chunk in (0..spec.gpus as u32).collect::<Vec<_>>().chunks(CHUNK) {
        let mut cols: (Vec<Uuid>, Vec<String>, Vec<String>, Vec<String>, Vec<i64>, Vec<bool>, Vec<String>) =
            Default::default();
        let mut vgpu: Vec<Option<String>> = Vec::new();
        for &g in chunk {
            let node = &world.nodes[(g / 8) as usize];
            let c = &CLASSES[node.class];
            let migs: Vec<Value> = mig_of[g as usize]
                .iter()
                .map(|m| {
                    let mi = &world.migs[*m as usize];
                    json!({"uuid": mig_uuid(*m), "profile": mig_profile(node.class, mi.slices), "gpu_instance_id": mi.gi})
                })
                .collect();
            cols.0.push(cluster_of[node.cluster]);
            cols.1.push(gpu_uuid(g));
            cols.2.push(node_name(g / 8));
            cols.3.push(c.model.to_string());
            cols.4.push(c.memory_mib);
            cols.5.push(node.mode == Mode::Mig);
            cols.6.push(Value::Array(migs).to_string());
            vgpu.push(node.vgpu.map(|v| VGPU_TYPES[v].0.to_string()));
        }
        sqlx::query(
            "INSERT INTO devices (org_id, cluster_id, gpu_uuid, valid_from, node, model, memory_mib, mig_enabled,
                                  mig_devices, vgpu_profile)
             SELECT $1, u.c, u.g, $2, u.n, u.m, u.mem, u.mig, u.migs::jsonb, u.vgpu
               FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bool[], $9::text[],
                           $10::text[]) AS u(c, g, n, m, mem, mig, migs, vgpu)",
        )
        .bind(o)
        .bind(epoch)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .bind(&cols.5)
        .bind(&cols.6)
        .bind(&vgpu)
        .execute(tx.conn())
        .await?;
        loaded.gpus += chunk.len() as u64;
    }
    {
        let n = world.nodes.len();
        let mut cols: (Vec<Uuid>, Vec<String>, Vec<Uuid>, Vec<String>) = Default::default();
        let mut strategy: (Vec<Option<String>>, Vec<Option<String>>, Vec<Option<i32>>) = Default::default();
        for (i, node) in world.nodes.iter().enumerate() {
            cols.0.push(cluster_of[node.cluster]);
            cols.1.push(node_name(i as u32));
            cols.2.push(Uuid::from_u128(NODE_BASE | i as u128));
            cols.3.push(CLASSES[node.class].model.replace(' ', "-"));
            strategy.0.push((node.mode == Mode::Mig).then(|| "mixed".to_string()));
            strategy.1.push((node.mode == Mode::TimeSlice).then(|| "time-slicing".to_string()));
            strategy.2.push((node.mode == Mode::TimeSlice).then_some(4));
        }
        sqlx::query(
            "INSERT INTO nodes (org_id, cluster_id, name, valid_from, node_uid, gpu_product, gpu_count, mig_strategy,
                                sharing_strategy, replicas)
             SELECT $1, u.c, u.n, $2, u.uid, u.p, 8, u.mig, u.s, u.r
               FROM unnest($3::uuid[], $4::text[], $5::uuid[], $6::text[], $7::text[], $8::text[], $9::int[])
                 AS u(c, n, uid, p, mig, s, r)",
        )
        .bind(o)
        .bind(epoch)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&strategy.0)
        .bind(&strategy.1)
        .bind(&strategy.2)
        .execute(tx.conn())
        .await?;
        tracing::debug!(nodes = n, "fleet nodes written");
    }

    tracing::info!("{label}: namespaces, owners, quotas…");
    sqlx::query(
        "INSERT INTO namespaces (org_id, namespace_uid, cluster_id, name, created_at)
         SELECT $1, u.id, u.c, u.n, $5 FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS u(id, c, n)",
    )
    .bind(o)
    .bind((0..world.namespaces.len()).map(ns_id).collect::<Vec<_>>())
    .bind(world.namespaces.iter().map(|n| cluster_of[n.cluster]).collect::<Vec<_>>())
    .bind(world.namespaces.iter().map(|n| n.name.clone()).collect::<Vec<_>>())
    .bind(epoch)
    .execute(tx.conn())
    .await?;
    {
        let mut cols: (Vec<Uuid>, Vec<OffsetDateTime>, Vec<Option<OffsetDateTime>>, Vec<Uuid>) = Default::default();
        for (i, ns) in world.namespaces.iter().enumerate() {
            for ow in &ns.owners {
                cols.0.push(ns_id(i));
                cols.1.push(at(ow.from));
                cols.2.push(ow.to.map(at));
                cols.3.push(tenant_of[ow.tenant as usize].0);
            }
        }
        sqlx::query(
            "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source)
             SELECT $1, u.ns, u.f, u.t, u.tenant, 'label'
               FROM unnest($2::uuid[], $3::timestamptz[], $4::timestamptz[], $5::uuid[]) AS u(ns, f, t, tenant)",
        )
        .bind(o)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .execute(tx.conn())
        .await?;
    }
    {
        let mut cols: (Vec<Uuid>, Vec<Option<Uuid>>, Vec<Option<Uuid>>, Vec<Uuid>, Vec<String>, Vec<String>) =
            Default::default();
        let mut times: (Vec<OffsetDateTime>, Vec<Option<OffsetDateTime>>) = Default::default();
        for (i, q) in world.quotas.iter().enumerate() {
            let (t, d, scope) = match q.holder {
                Holder::Tenant(t) => {
                    let (tid, did) = tenant_of[t as usize];
                    (Some(tid), None, did)
                }
                Holder::Dept(d) => (None, Some(dept_of[d as usize]), dept_of[d as usize]),
            };
            cols.0.push(quota_id(i));
            cols.1.push(t);
            cols.2.push(d);
            cols.3.push(scope);
            cols.4.push(CLASSES[q.class].name.to_string());
            cols.5.push(q.gpus.clone());
            times.0.push(at(q.from));
            times.1.push(q.to.map(at));
        }
        sqlx::query(
            "INSERT INTO quotas (org_id, quota_id, tenant_id, department_id, scope_department_id, gpu_class, gpus,
                                 valid_from, valid_to, source, created_by)
             SELECT $1, u.id, u.t, u.d, u.s, u.c, u.g::numeric, u.f, u.e, 'admin', $10
               FROM unnest($2::uuid[], $3::uuid[], $4::uuid[], $5::uuid[], $6::text[], $7::text[], $8::timestamptz[],
                           $9::timestamptz[]) AS u(id, t, d, s, c, g, f, e)",
        )
        .bind(o)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .bind(&cols.5)
        .bind(&times.0)
        .bind(&times.1)
        .bind(actor)
        .execute(tx.conn())
        .await?;
        loaded.quotas = world.quotas.len() as u64;
    }

    // Allocation intervals: every job, including those wholly before the first month.
    let total = world.jobs.len();
    let mut next_log = 0;
    for (c, chunk) in world.jobs.chunks(CHUNK).enumerate() {
        if c * CHUNK >= next_log {
            tracing::info!("{label}: allocations {}/{}", grouped(c * CHUNK), grouped(total));
            next_log += (total / 10).max(CHUNK);
        }
        insert_allocations(&mut tx, o, world, &cluster_of, c * CHUNK, chunk).await?;
        loaded.allocations += chunk.len() as u64;
    }
    tracing::info!("{label}: allocations {}/{}", grouped(total), grouped(total));

    // Telemetry: one whole-GPU rollup per device and window.
    let occupancy = world.occupancy();
    let windows = world.windows();
    let rows = spec.gpus * windows as usize;
    let per_chunk = (CHUNK / windows.max(1) as usize).max(1);
    let mut next_log = 0;
    for first in (0..spec.gpus).step_by(per_chunk) {
        if first * windows as usize >= next_log {
            tracing::info!("{label}: telemetry {}/{}", grouped(first * windows as usize), grouped(rows));
            next_log += (rows / 10).max(CHUNK);
        }
        let gpus = first as u32..(first + per_chunk).min(spec.gpus) as u32;
        loaded.telemetry += insert_telemetry(&mut tx, o, world, &cluster_of, gpus, &occupancy).await?;
    }
    tracing::info!("{label}: telemetry {}/{}", grouped(rows), grouped(rows));

    tracing::info!("{label}: shared endpoint usage…");
    loaded.usage = insert_usage(&mut tx, o, world, &cluster_of, &tenant_of).await?;

    let fmt = |t: OffsetDateTime| t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, reason, details)
         VALUES ($1, $2, $3, $4, $5, 'synthetic demo fleet', $6)",
    )
    .bind(o)
    .bind(Uuid::new_v4())
    .bind(actor)
    .bind(FLEET_ACTION)
    .bind(FLEET_VERSION)
    .bind(json!({
        "gpus": spec.gpus, "seed": spec.seed, "start": fmt(spec.start), "through": fmt(spec.through),
        "window_hours": spec.window_h, "loaded": loaded,
    }))
    .execute(tx.conn())
    .await?;
    tracing::info!("{label}: committing…");
    tx.commit().await?;
    Ok(loaded)
}

/// Inserts named rows (IDs, names) that may exist already under another ID, and returns every name's ID.
#[allow(clippy::too_many_arguments)]
async fn upsert_named(
    tx: &mut OrgTx,
    insert: &str,
    select: &str,
    org: Uuid,
    ids: Vec<Uuid>,
    names: Vec<String>,
    epoch: OffsetDateTime,
) -> Result<HashMap<String, Uuid>, DbError> {
    sqlx::query(insert).bind(org).bind(&ids).bind(&names).bind(epoch).execute(tx.conn()).await?;
    let rows: Vec<(String, Uuid)> = sqlx::query_as(select).bind(org).bind(&names).fetch_all(tx.conn()).await?;
    Ok(rows.into_iter().collect())
}

/// The approved inventory the fleet needs (the demo's catalog; kept where it exists), and the time-slicing policy
/// on every cluster.
async fn insert_catalog(tx: &mut OrgTx, o: Uuid, clusters: &[Uuid]) -> Result<(), DbError> {
    for (class, description, models) in CATALOG {
        sqlx::query(
            "INSERT INTO gpu_classes (org_id, gpu_class, description) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(class)
        .bind(description)
        .execute(tx.conn())
        .await?;
        for (model, memory) in models {
            sqlx::query(
                "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class, memory_mib) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT DO NOTHING",
            )
            .bind(o)
            .bind(model)
            .bind(CATALOG_SINCE)
            .bind(class)
            .bind(memory)
            .execute(tx.conn())
            .await?;
        }
    }
    for (model, profile, num, den) in MIG_PROFILES {
        sqlx::query(
            "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(model)
        .bind(profile)
        .bind(CATALOG_SINCE)
        .bind(num)
        .bind(den)
        .execute(tx.conn())
        .await?;
    }
    for (profile, num, den) in VGPU_PROFILES {
        sqlx::query(
            "INSERT INTO vgpu_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
             VALUES ($1, 'Tesla T4', $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(profile)
        .bind(CATALOG_SINCE)
        .bind(num)
        .bind(den)
        .execute(tx.conn())
        .await?;
    }
    for c in clusters {
        sqlx::query(
            "INSERT INTO timeslice_policies (org_id, cluster_id, name, valid_from, replicas)
             VALUES ($1, $2, 'l4-time-slicing', $3, 4) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(c)
        .bind(CATALOG_SINCE)
        .execute(tx.conn())
        .await?;
    }
    Ok(())
}

#[derive(Default)]
struct AllocCols {
    cluster: Vec<Uuid>,
    id: Vec<String>,
    kind: Vec<&'static str>,
    uid: Vec<Uuid>,
    name: Vec<String>,
    namespace: Vec<String>,
    ns_uid: Vec<Uuid>,
    container: Vec<Option<&'static str>>,
    node: Vec<String>,
    resource: Vec<String>,
    units: Vec<i32>,
    devices: Vec<String>,
    model: Vec<&'static str>,
    class: Vec<&'static str>,
    mode: Vec<&'static str>,
    profile: Vec<Option<&'static str>>,
    replicas: Vec<Option<i32>>,
    num: Vec<i64>,
    den: Vec<i64>,
    start: Vec<OffsetDateTime>,
    end: Vec<Option<OffsetDateTime>>,
    estimated: Vec<bool>,
    confidence: Vec<&'static str>,
    endpoint: Vec<Option<&'static str>>,
}

async fn insert_allocations(
    tx: &mut OrgTx,
    o: Uuid,
    w: &World,
    cluster_of: &[Uuid],
    first: usize,
    jobs: &[Job],
) -> Result<(), DbError> {
    let mut c = AllocCols::default();
    for (k, j) in jobs.iter().enumerate() {
        let idx = first + k;
        let lane = &w.lanes[j.lane as usize];
        let node = &w.nodes[lane.node as usize];
        let class = &CLASSES[node.class];
        let ns = &w.namespaces[j.ns as usize];
        let vm = matches!(lane.mode, Mode::Vgpu | Mode::Passthrough);
        c.cluster.push(cluster_of[node.cluster]);
        c.id.push(w.allocation_id(idx, lane));
        c.kind.push(if vm { "vmi" } else { "pod" });
        c.uid.push(job_uid(idx));
        c.name.push(match (vm, lane.endpoint) {
            (true, _) => format!("vm-{idx:07}"),
            (_, true) => format!("{ENDPOINT}-vllm-{idx:07}"),
            _ => format!("job-{idx:07}"),
        });
        c.namespace.push(ns.name.clone());
        c.ns_uid.push(ns_id(j.ns as usize));
        c.container.push((!vm).then_some("main"));
        c.node.push(node_name(lane.node));
        c.resource.push(w.resource(lane));
        c.units.push(if matches!(lane.mode, Mode::Exclusive | Mode::Passthrough) { lane.num as i32 } else { 1 });
        c.devices.push(w.device_ids(lane).join(","));
        c.model.push(class.model);
        c.class.push(class.name);
        c.mode.push(lane.mode.as_str());
        c.profile.push(w.profile(lane));
        c.replicas.push((lane.mode == Mode::TimeSlice).then_some(4));
        c.num.push(lane.num);
        c.den.push(lane.den);
        c.start.push(at(j.start));
        c.end.push(j.end.map(at));
        c.estimated.push(j.estimated);
        c.confidence.push(World::confidence(lane, j));
        c.endpoint.push(lane.endpoint.then_some(ENDPOINT));
    }
    sqlx::query(
        "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name,
             namespace, namespace_uid, container, node, resource, units, device_ids, gpu_model, gpu_class,
             sharing_mode, profile, replicas, fraction_num, fraction_den, started_at, ended_at, end_estimated,
             confidence, labels)
         SELECT $1, u.cluster, u.id, u.kind, u.uid, u.name, u.ns, u.ns_uid, u.container, u.node, u.resource, u.units,
                string_to_array(u.devices, ','), u.model, u.class, u.mode, u.profile, u.replicas, u.num, u.den,
                u.s, u.e, u.estimated, u.confidence,
                CASE WHEN u.endpoint IS NULL THEN '{}'::jsonb
                     ELSE jsonb_build_object('endpoint', u.endpoint, 'model', $26::text) END
           FROM unnest($2::uuid[], $3::text[], $4::text[], $5::uuid[], $6::text[], $7::text[], $8::uuid[], $9::text[],
                       $10::text[], $11::text[], $12::int[], $13::text[], $14::text[], $15::text[], $16::text[],
                       $17::text[], $18::int[], $19::bigint[], $20::bigint[], $21::timestamptz[], $22::timestamptz[],
                       $23::bool[], $24::text[], $25::text[])
             AS u(cluster, id, kind, uid, name, ns, ns_uid, container, node, resource, units, devices, model, class,
                  mode, profile, replicas, num, den, s, e, estimated, confidence, endpoint)",
    )
    .bind(o)
    .bind(&c.cluster)
    .bind(&c.id)
    .bind(&c.kind)
    .bind(&c.uid)
    .bind(&c.name)
    .bind(&c.namespace)
    .bind(&c.ns_uid)
    .bind(&c.container)
    .bind(&c.node)
    .bind(&c.resource)
    .bind(&c.units)
    .bind(&c.devices)
    .bind(&c.model)
    .bind(&c.class)
    .bind(&c.mode)
    .bind(&c.profile)
    .bind(&c.replicas)
    .bind(&c.num)
    .bind(&c.den)
    .bind(&c.start)
    .bind(&c.end)
    .bind(&c.estimated)
    .bind(&c.confidence)
    .bind(&c.endpoint)
    .bind(MODELS[0])
    .execute(tx.conn())
    .await?;
    Ok(())
}

#[allow(clippy::type_complexity)] // column vectors for UNNEST inserts
async fn insert_telemetry(
    tx: &mut OrgTx,
    o: Uuid,
    w: &World,
    cluster_of: &[Uuid],
    gpus: std::ops::Range<u32>,
    occupancy: &[f32],
) -> Result<u64, DbError> {
    let windows = w.windows();
    let window = w.spec.window_h * 3_600;
    let start = unix(w.spec.start);
    let mut cols: (Vec<Uuid>, Vec<String>, Vec<OffsetDateTime>, Vec<OffsetDateTime>, Vec<String>) = Default::default();
    let mut vals: (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f64>) = Default::default();
    for g in gpus {
        let node = &w.nodes[(g / 8) as usize];
        let (uuid, name) = (gpu_uuid(g), node_name(g / 8));
        for win in 0..windows {
            let s = start + i64::from(win) * window;
            let occ = occupancy[g as usize * windows as usize + win as usize];
            let util = w.utilization(g, win, occ);
            let power = w.power(g, util);
            let energy = w.energy_j(g, win, occ);
            cols.0.push(cluster_of[node.cluster]);
            cols.1.push(uuid.clone());
            cols.2.push(at(s));
            cols.3.push(at(s + window));
            cols.4.push(name.clone());
            vals.0.push(util * 0.5);
            vals.1.push(util);
            vals.2.push((util * 1.4 + 3.0).min(100.0));
            vals.3.push((power * 0.8) as f32);
            vals.4.push(power as f32);
            vals.5.push((power * 1.25) as f32);
            vals.6.push(energy);
        }
    }
    let n = cols.0.len() as u64;
    sqlx::query(
        "INSERT INTO telemetry_rollups (org_id, cluster_id, gpu_uuid, gpu_instance_id, window_start, window_end, node,
             samples, util_min, util_avg, util_max, power_min, power_avg, power_max, energy_j)
         SELECT $1, u.c, u.g, -1, u.s, u.e, u.n, $2, u.u1, u.u2, u.u3, u.p1, u.p2, u.p3, u.j
           FROM unnest($3::uuid[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::text[], $8::real[], $9::real[],
                       $10::real[], $11::real[], $12::real[], $13::real[], $14::float8[])
             AS u(c, g, s, e, n, u1, u2, u3, p1, p2, p3, j)",
    )
    .bind(o)
    .bind(i32::try_from(window / 10).unwrap_or(i32::MAX))
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .bind(&cols.4)
    .bind(&vals.0)
    .bind(&vals.1)
    .bind(&vals.2)
    .bind(&vals.3)
    .bind(&vals.4)
    .bind(&vals.5)
    .bind(&vals.6)
    .execute(tx.conn())
    .await?;
    Ok(n)
}

/// The tenants' usage of the shared endpoint (`service_usage`, what the model servers attributed), and what the
/// model servers counted in all (`endpoint_totals`, per pod: a little more, the requests nobody could attribute).
#[allow(clippy::type_complexity)] // column vectors for UNNEST inserts
async fn insert_usage(
    tx: &mut OrgTx,
    o: Uuid,
    w: &World,
    cluster_of: &[Uuid],
    tenant_of: &[(Uuid, Uuid)],
) -> Result<u64, DbError> {
    let start = unix(w.spec.start);
    let cluster = cluster_of[w.nodes[0].cluster];
    for chunk in w.usage.chunks(CHUNK) {
        let mut cols: (Vec<&str>, Vec<String>, Vec<Uuid>, Vec<OffsetDateTime>, Vec<OffsetDateTime>) =
            Default::default();
        let mut nums: (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>) = Default::default();
        for u in chunk {
            let s = start + i64::from(u.hour) * 3_600;
            cols.0.push(u.model);
            cols.1.push(w.tenants[u.tenant as usize].name.clone());
            cols.2.push(tenant_of[u.tenant as usize].0);
            cols.3.push(at(s));
            cols.4.push(at(s + 3_600));
            nums.0.push(i64::try_from(u.requests).unwrap_or(i64::MAX));
            nums.1.push(i64::try_from(u.input).unwrap_or(i64::MAX));
            nums.2.push(i64::try_from(u.output).unwrap_or(i64::MAX));
            // Time to first token: 150–450 ms per request.
            nums.3.push(i64::try_from(u.requests * (150 + (u.input / u.requests.max(1)) % 300)).unwrap_or(0));
        }
        sqlx::query(
            "INSERT INTO service_usage (org_id, cluster_id, endpoint, model, tenant_name, tenant_id, window_start,
                                        window_end, requests, input_tokens, output_tokens, ttft_ms_sum, ttft_count)
             SELECT $1, $2, $3, u.m, u.tn, u.t, u.s, u.e, u.r, u.i, u.o, u.ttft, u.r
               FROM unnest($4::text[], $5::text[], $6::uuid[], $7::timestamptz[], $8::timestamptz[], $9::bigint[],
                           $10::bigint[], $11::bigint[], $12::bigint[]) AS u(m, tn, t, s, e, r, i, o, ttft)",
        )
        .bind(o)
        .bind(cluster)
        .bind(ENDPOINT)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .bind(&nums.0)
        .bind(&nums.1)
        .bind(&nums.2)
        .bind(&nums.3)
        .execute(tx.conn())
        .await?;
    }
    let mut cols: (Vec<&str>, Vec<String>, Vec<OffsetDateTime>, Vec<OffsetDateTime>) = Default::default();
    let mut nums: (Vec<i64>, Vec<i64>, Vec<i64>) = Default::default();
    for t in w.endpoint_totals() {
        let s = start + i64::from(t.hour) * 3_600;
        cols.0.push(t.model);
        cols.1.push(format!("llm-serving/{ENDPOINT}-vllm-{}", t.pod));
        cols.2.push(at(s));
        cols.3.push(at(s + 3_600));
        nums.0.push(i64::try_from(t.requests).unwrap_or(i64::MAX));
        nums.1.push(i64::try_from(t.input).unwrap_or(i64::MAX));
        nums.2.push(i64::try_from(t.output).unwrap_or(i64::MAX));
    }
    for k in (0..cols.0.len()).step_by(CHUNK) {
        let r = k..(k + CHUNK).min(cols.0.len());
        sqlx::query(
            "INSERT INTO endpoint_totals (org_id, cluster_id, endpoint, model, server, pod, window_start, window_end,
                                          requests, input_tokens, output_tokens)
             SELECT $1, $2, $3, u.m, 'vllm', u.p, u.s, u.e, u.r, u.i, u.o
               FROM unnest($4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::bigint[], $9::bigint[],
                           $10::bigint[]) AS u(m, p, s, e, r, i, o)",
        )
        .bind(o)
        .bind(cluster)
        .bind(ENDPOINT)
        .bind(&cols.0[r.clone()])
        .bind(&cols.1[r.clone()])
        .bind(&cols.2[r.clone()])
        .bind(&cols.3[r.clone()])
        .bind(&nums.0[r.clone()])
        .bind(&nums.1[r.clone()])
        .bind(&nums.2[r])
        .execute(tx.conn())
        .await?;
    }
    Ok(w.usage.len() as u64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeSet;

    use time::macros::datetime;

    use super::*;

    fn spec(gpus: usize) -> FleetSpec {
        FleetSpec::new(gpus, DEMO_SEED, datetime!(2026-11-01 00:00 UTC), datetime!(2026-12-14 15:00 UTC))
    }

    #[test]
    fn the_smallest_fleet_has_every_mode_and_the_same_spec_gives_the_same_fleet() {
        let a = World::generate(spec(1));
        assert_eq!(a.spec.gpus, MIN_GPUS);
        let modes: BTreeSet<&str> = a.lanes.iter().map(|l| l.mode.as_str()).collect();
        assert_eq!(modes, BTreeSet::from(["exclusive", "mig", "passthrough", "time_slice", "vgpu"]));
        assert!(a.lanes.iter().any(|l| l.endpoint));
        let b = World::generate(spec(1));
        assert_eq!(format!("{:?}", a.jobs), format!("{:?}", b.jobs));
        assert_eq!(format!("{:?}", a.quotas), format!("{:?}", b.quotas));
        // Nothing ends after `through`; what runs then is open.
        let through = unix(a.spec.through);
        assert!(a.jobs.iter().all(|j| j.end.is_none_or(|e| e <= through) && j.start < through));
        assert!(a.jobs.iter().any(|j| j.end.is_none()));
        // No slot runs two jobs at once.
        let mut last_end: HashMap<u32, i64> = HashMap::new();
        for j in &a.jobs {
            if let Some(prev) = last_end.get(&j.lane) {
                assert!(*prev <= j.start);
            }
            last_end.insert(j.lane, j.end.unwrap_or(i64::MAX));
        }
    }

    #[test]
    fn no_gpu_is_held_more_than_once() {
        let w = World::generate(spec(200));
        let occ = w.occupancy();
        assert!(occ.iter().all(|o| *o <= 1.0001), "{:?}", occ.iter().cloned().fold(0.0_f32, f32::max));
        assert!(occ.iter().any(|o| *o > 0.5));
        assert_eq!(w.departments.len(), 3);
        assert!(w.tenants.iter().filter(|t| t.dept == 0).count() >= 3);
    }
}
