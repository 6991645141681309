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
//!
//! It stays in the server and writes to the database directly, unlike the agents' history (`gpuledger-fixtures`,
//! delivered over HTTP): 10,000 GPUs × a month through the REST ingest API would miss the 300 s readiness bound.
//! [`World::generate`] is in `generate`, [`load`] in `write`.

use std::collections::{BTreeMap, HashMap};

use gpuledger_core::ids::OrgId;
use rand::{Rng, SeedableRng, rngs::StdRng, seq::SliceRandom};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use super::reference::{CATALOG_SINCE, CLASSES as CATALOG, MIG_PROFILES, VGPU_PROFILES};
use crate::db::{Database, DbError, OrgTx};

mod generate;
mod store;
mod telemetry;
mod write;

pub use write::{Loaded, grouped, load, loaded_marker};

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
    /// Hours before this instant keep their sums only, no full-resolution block (what the retention job leaves
    /// past `--full-resolution-days`); `None`: every hour keeps its block.
    pub full_resolution_from: Option<OffsetDateTime>,
}

impl FleetSpec {
    /// A spec for `gpus` GPUs (rounded up to whole nodes, at least [`MIN_GPUS`]); hourly telemetry up to 2,000
    /// GPUs, 4-hour windows above (an hourly month of 10,000 GPUs is 7 million rows).
    pub fn new(gpus: usize, seed: u64, start: OffsetDateTime, through: OffsetDateTime) -> Self {
        let gpus = gpus.clamp(MIN_GPUS, MAX_GPUS).div_ceil(8) * 8;
        Self { gpus, seed, start, through, window_h: if gpus <= 2_000 { 1 } else { 4 }, full_resolution_from: None }
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
