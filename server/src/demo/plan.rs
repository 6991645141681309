//! The demo world, planned from a seeded RNG: two clusters, their GPU nodes and devices, namespaces and their
//! owners, Kueue ClusterQueues, and every workload that ran (pods and KubeVirt VMs), placed on devices by a small
//! greedy scheduler. Pure: no I/O, no clock — the same anchor gives the same world, bit for bit.
//!
//! Stability over time: the world (nodes, namespaces, queues) comes from one RNG; the workloads requested in a
//! month come from an RNG seeded by that month alone, and requests are placed in order of their requested start.
//! So a later `now` only adds months at the end: everything planned before stays the same, and a fact re-derived
//! from it has the same event ID.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng, rngs::StdRng};
use time::{Date, Duration, Month, OffsetDateTime, Time, Weekday};
use uuid::Uuid;

/// The demo's RNG seed ("gpuledge").
pub const SEED: u64 = 0x6770_756c_6564_6765;

/// Label keys the demo objects carry (the agent's defaults, see `docs/agent.md`).
pub mod label {
    /// Tenant owning a namespace.
    pub const TENANT: &str = "gpuledger.io/tenant";
    /// Department owning a namespace.
    pub const DEPARTMENT: &str = "gpuledger.io/department";
    /// Shared model-serving endpoint a pod belongs to.
    pub const ENDPOINT: &str = "gpuledger.io/endpoint";
    /// Model served or trained.
    pub const MODEL: &str = "gpuledger.io/model";
}

/// The shared vLLM endpoint every product tenant calls.
pub const ENDPOINT: &str = "llm-shared";
/// The model it serves.
pub const ENDPOINT_MODEL: &str = "meta-llama/Llama-3.1-70B-Instruct";

/// A GPU model as the driver, GPU Feature Discovery and the PCI bus name it, with its power envelope.
#[derive(Debug, PartialEq)]
pub struct GpuModel {
    /// NVML / DCGM `modelName`.
    pub driver_name: &'static str,
    /// GFD `nvidia.com/gpu.product`.
    pub product_label: &'static str,
    /// KubeVirt passthrough resource (`nvidia.com/<PCI device name>`).
    pub pci_device: &'static str,
    /// Framebuffer, MiB.
    pub memory_mib: u32,
    /// GFD `nvidia.com/gpu.family`.
    pub family: &'static str,
    /// Power draw idle, W.
    pub idle_w: f64,
    /// Power draw at full load, W.
    pub max_w: f64,
}

/// NVIDIA H100 SXM 80 GB.
pub static H100: GpuModel = GpuModel {
    driver_name: "NVIDIA H100 80GB HBM3",
    product_label: "NVIDIA-H100-80GB-HBM3",
    pci_device: "GH100_H100_SXM5_80GB",
    memory_mib: 81_559,
    family: "hopper",
    idle_w: 72.0,
    max_w: 700.0,
};
/// NVIDIA A100 SXM4 80 GB.
pub static A100: GpuModel = GpuModel {
    driver_name: "NVIDIA A100-SXM4-80GB",
    product_label: "NVIDIA-A100-SXM4-80GB",
    pci_device: "GA100_A100_SXM4_80GB",
    memory_mib: 81_920,
    family: "ampere",
    idle_w: 58.0,
    max_w: 400.0,
};
/// NVIDIA L4.
pub static L4: GpuModel = GpuModel {
    driver_name: "NVIDIA L4",
    product_label: "NVIDIA-L4",
    pci_device: "AD104GL_L4",
    memory_mib: 23_034,
    family: "ada-lovelace",
    idle_w: 16.0,
    max_w: 72.0,
};
/// NVIDIA T4.
pub static T4: GpuModel = GpuModel {
    driver_name: "Tesla T4",
    product_label: "Tesla-T4",
    pci_device: "TU104GL_Tesla_T4",
    memory_mib: 15_360,
    family: "turing",
    idle_w: 10.0,
    max_w: 70.0,
};

/// How a node's GPUs are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Whole GPUs (`nvidia.com/gpu`).
    Exclusive,
    /// MIG, mixed strategy (`nvidia.com/mig-<profile>`).
    Mig,
    /// Time-slicing: the device plugin declares this many replicas per GPU (`nvidia.com/gpu`).
    TimeSlice {
        /// Replicas per GPU.
        replicas: u32,
    },
    /// KubeVirt with NVIDIA vGPU (mediated devices).
    Vgpu,
    /// KubeVirt with whole GPUs passed through.
    Passthrough,
}

/// A MIG instance.
#[derive(Debug, Clone, PartialEq)]
pub struct MigInstance {
    /// Profile, e.g. `3g.40gb`.
    pub profile: &'static str,
    /// GPU instance ID.
    pub gpu_instance_id: u32,
    /// `MIG-…` device UUID (what kubelet reports).
    pub uuid: String,
    /// Compute slices out of 7.
    pub slices: u32,
}

/// A physical GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Index on the node.
    pub index: u32,
    /// MIG instances (MIG nodes).
    pub mig: Vec<MigInstance>,
    /// vGPU type and how many fit (vGPU hosts).
    pub vgpu: Option<(&'static str, u32)>,
}

/// A GPU node.
#[derive(Debug, PartialEq)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Node UID.
    pub uid: Uuid,
    /// `metadata.creationTimestamp`.
    pub created: OffsetDateTime,
    /// Its GPUs' model.
    pub model: &'static GpuModel,
    /// How they are shared.
    pub sharing: Sharing,
    /// The GPUs.
    pub gpus: Vec<Gpu>,
}

/// A namespace and its owners over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Namespace {
    /// Name.
    pub name: &'static str,
    /// UID.
    pub uid: Uuid,
    /// `metadata.creationTimestamp`.
    pub created: OffsetDateTime,
    /// (since, tenant, department): the first from creation, later ones are relabels.
    pub owners: Vec<(OffsetDateTime, &'static str, &'static str)>,
}

/// One GPU quota of a ClusterQueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// ResourceFlavor (the GPU class, lower case: `h100-80gb`).
    pub flavor: &'static str,
    /// Resource.
    pub resource: &'static str,
    /// Nominal (guaranteed) quota.
    pub nominal: u32,
    /// Borrowing limit within the cohort.
    pub borrowing_limit: Option<u32>,
}

/// A Kueue ClusterQueue (named after its tenant) and its quotas over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Queue {
    /// Name: the tenant's name.
    pub name: &'static str,
    /// UID.
    pub uid: Uuid,
    /// Cohort.
    pub cohort: &'static str,
    /// `metadata.creationTimestamp`.
    pub created: OffsetDateTime,
    /// (since, quotas): the first from creation, later ones are edits.
    pub versions: Vec<(OffsetDateTime, Vec<Quota>)>,
}

/// What holds the capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderKind {
    /// A pod.
    Pod,
    /// A KubeVirt VirtualMachineInstance.
    Vmi,
}

/// How a workload ended (when its end is before `now`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Container exited 0 (Job done); the pod is garbage-collected an hour later.
    Succeeded,
    /// Container exited non-zero.
    Failed,
    /// Deleted while running (a user, a rollout): the end is the deletion.
    Deleted,
    /// The VM was shut down (VMI `Succeeded`), then the VMI deleted.
    Stopped,
}

/// The shape of a workload's GPU activity over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivityKind {
    /// Steady high load.
    Training,
    /// Daily traffic curve.
    Inference,
    /// Bursts in the first hours, then quiet.
    Notebook,
    /// Short, flat-out.
    Batch,
    /// Office hours on weekdays.
    Desktop,
    /// Long, high load.
    Simulation,
}

/// A workload's GPU activity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Activity {
    /// Shape.
    pub kind: ActivityKind,
    /// Typical level, percent of its share.
    pub level: f64,
    /// From then on the workload holds its GPUs but does nothing (an idle reservation).
    pub idle_from: Option<OffsetDateTime>,
    /// Share of its devices' memory it fills.
    pub memory: f64,
}

/// Who created a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    /// `Job`, `ReplicaSet`, `StatefulSet`, `VirtualMachine`.
    pub kind: &'static str,
    /// API version of the owner.
    pub api_version: &'static str,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: Uuid,
}

/// One unit of capacity a workload can hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// Node index in the cluster.
    pub node: usize,
    /// GPU index on the node.
    pub gpu: usize,
    /// Extended resource it is requested as.
    pub resource: String,
    /// Device ID as kubelet reports it (GPU or MIG UUID, `GPU-…::N` for a time-slice replica).
    pub device_id: String,
    /// Share of the physical GPU it stands for (analytics only: telemetry weights).
    pub share: f64,
    /// Kept for one Deployment's pods (by name), so batch work never takes them.
    pub reserved_for: Option<&'static str>,
    /// Free from then on (scheduling state).
    pub free_at: OffsetDateTime,
}

/// A workload that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Pod or VMI.
    pub holder: HolderKind,
    /// Object name.
    pub name: String,
    /// Object UID.
    pub uid: Uuid,
    /// Namespace.
    pub namespace: &'static str,
    /// Node index in the cluster.
    pub node: usize,
    /// GPU resource requested (`nvidia.com/gpu`, `nvidia.com/mig-3g.40gb`, `nvidia.com/GRID_T4-4Q`, …).
    pub resource: String,
    /// Units requested.
    pub units: u32,
    /// Slots it holds (indexes into [`ClusterPlan::slots`]).
    pub slots: Vec<usize>,
    /// `metadata.creationTimestamp` (earlier than `started` when it waited for capacity).
    pub created: OffsetDateTime,
    /// Container `startedAt` / VMI `Running`.
    pub started: OffsetDateTime,
    /// Planned end (may lie after `now`: then it is still running).
    pub end: OffsetDateTime,
    /// How it ends.
    pub ending: Ending,
    /// GPU activity.
    pub activity: Activity,
    /// Labels on the object.
    pub labels: BTreeMap<String, String>,
    /// Controller.
    pub owner: Owner,
    /// Container image (pods) or container disk (VMs).
    pub image: &'static str,
}

/// One cluster's plan.
#[derive(Debug, PartialEq)]
pub struct ClusterPlan {
    /// Cluster name (the agent credential's cluster).
    pub name: &'static str,
    /// GPU nodes.
    pub nodes: Vec<Node>,
    /// Namespaces.
    pub namespaces: Vec<Namespace>,
    /// Kueue ClusterQueues.
    pub queues: Vec<Queue>,
    /// Allocatable capacity units.
    pub slots: Vec<Slot>,
    /// Workloads, in order of creation.
    pub workloads: Vec<Workload>,
}

/// Hourly productive work of the shared endpoint for one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageProfile {
    /// Tenant name.
    pub tenant: &'static str,
    /// Requests per hour at the daily peak.
    pub peak_requests: u64,
    /// Mean prompt tokens per request.
    pub input_per_request: u64,
    /// Mean generated tokens per request.
    pub output_per_request: u64,
}

/// Who calls the shared endpoint, and how much.
pub const ENDPOINT_USERS: [UsageProfile; 5] = [
    UsageProfile {
        tenant: "assistant-serving",
        peak_requests: 9_000,
        input_per_request: 1_400,
        output_per_request: 380,
    },
    UsageProfile { tenant: "search-ranking", peak_requests: 16_000, input_per_request: 420, output_per_request: 60 },
    UsageProfile { tenant: "recommendations", peak_requests: 2_400, input_per_request: 900, output_per_request: 140 },
    UsageProfile { tenant: "nlp-research", peak_requests: 450, input_per_request: 3_800, output_per_request: 900 },
    UsageProfile { tenant: "analytics-vdi", peak_requests: 700, input_per_request: 2_200, output_per_request: 520 },
];

/// The whole demo world.
#[derive(Debug, PartialEq)]
pub struct World {
    /// Start of the history: the first day of the month two months before the first run's month.
    pub anchor: OffsetDateTime,
    /// The clusters.
    pub clusters: Vec<ClusterPlan>,
    /// When the shared endpoint started serving.
    pub endpoint_since: OffsetDateTime,
}

/// The first instant of `t`'s month.
pub fn month_start(t: OffsetDateTime) -> OffsetDateTime {
    let date = Date::from_calendar_date(t.year(), t.month(), 1).unwrap_or(t.date());
    date.with_time(Time::MIDNIGHT).assume_utc()
}

/// The first instant of the month `n` months after `t`'s (negative: before).
pub fn add_months(t: OffsetDateTime, n: i32) -> OffsetDateTime {
    let index = t.year() * 12 + i32::from(u8::from(t.month())) - 1 + n;
    let (year, month) = (index.div_euclid(12), index.rem_euclid(12) + 1);
    let month = Month::try_from(month as u8).unwrap_or(Month::January);
    Date::from_calendar_date(year, month, 1).map_or(t, |d| d.with_time(Time::MIDNIGHT).assume_utc())
}

/// The history's start for a first run at `now`: the first day of the month two months earlier.
pub fn anchor_for(now: OffsetDateTime) -> OffsetDateTime {
    add_months(month_start(now), -2)
}

/// A deterministic 64-bit mix (SplitMix64), for noise that needs no RNG state.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Deterministic noise in [0, 1) from two keys.
pub fn unit_noise(a: u64, b: u64) -> f64 {
    (mix(a ^ mix(b)) >> 11) as f64 / (1u64 << 53) as f64
}

fn uuid(rng: &mut StdRng) -> Uuid {
    uuid::Builder::from_random_bytes(rng.random()).into_uuid()
}

/// Kubernetes-style random suffix (`x7k2p`).
fn suffix(rng: &mut StdRng, len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..len).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

fn hex(rng: &mut StdRng, len: usize) -> String {
    (0..len).map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0')).collect()
}

impl Activity {
    /// Utilization (percent of the workload's share) during the hour starting at `hour`.
    pub fn utilization(&self, key: u64, hour: OffsetDateTime) -> f64 {
        if self.idle_from.is_some_and(|t| hour >= t) {
            return 0.5 + 2.0 * unit_noise(key, hour.unix_timestamp() as u64);
        }
        let n = unit_noise(key, hour.unix_timestamp() as u64) - 0.5; // −0.5 … 0.5
        let h = f64::from(hour.hour());
        let weekend = matches!(hour.weekday(), Weekday::Saturday | Weekday::Sunday);
        let value = match self.kind {
            ActivityKind::Training | ActivityKind::Simulation => self.level + 10.0 * n,
            ActivityKind::Batch => self.level + 6.0 * n,
            ActivityKind::Inference => {
                // Peak at 14:00 UTC, trough at 02:00; weekends lighter.
                let day = 0.5 - 0.5 * (std::f64::consts::TAU * (h - 2.0) / 24.0).cos();
                let level = self.level * (0.3 + 0.7 * day) * if weekend { 0.65 } else { 1.0 };
                level * (1.0 + 0.2 * n)
            }
            ActivityKind::Notebook => 22.0 + 40.0 * n,
            ActivityKind::Desktop => {
                if !weekend && (8.0..18.0).contains(&h) {
                    self.level + 20.0 * n
                } else {
                    1.5 + n
                }
            }
        };
        value.clamp(0.0, 100.0)
    }

    /// How much of a GPU-percent one unit of this workload uses on a device it shares by `share` (time-sliced
    /// and vGPU workloads burst beyond their nominal share when neighbours are idle).
    pub fn burst(sharing: Sharing) -> f64 {
        match sharing {
            Sharing::TimeSlice { .. } => 2.2,
            Sharing::Vgpu => 1.6,
            _ => 1.0,
        }
    }
}

/// A workload asked for (before placement).
struct Request {
    holder: HolderKind,
    namespace: &'static str,
    name: String,
    resource: String,
    units: u32,
    created: OffsetDateTime,
    duration: Duration,
    /// How long it may wait for capacity (Kueue queues it); past that it is dropped.
    max_wait: Duration,
    ending: Ending,
    activity: Activity,
    labels: BTreeMap<String, String>,
    owner: Owner,
    image: &'static str,
    uid: Uuid,
    /// Seconds from creation to container start once placed (image pull).
    startup_s: i64,
    /// Pin to nodes whose name starts with this (e.g. `l4-`), when several pools offer the resource.
    pool: Option<&'static str>,
    /// Only slots reserved for this Deployment (and unreserved slots only when `None`).
    reservation: Option<&'static str>,
}

impl ClusterPlan {
    fn build_slots(&mut self, from: OffsetDateTime) {
        let mut slots = Vec::new();
        for (n, node) in self.nodes.iter().enumerate() {
            for (g, gpu) in node.gpus.iter().enumerate() {
                let slot = |resource: String, device_id: String, share: f64| Slot {
                    node: n,
                    gpu: g,
                    resource,
                    device_id,
                    share,
                    reserved_for: None,
                    free_at: from,
                };
                match node.sharing {
                    Sharing::Exclusive => slots.push(slot("nvidia.com/gpu".into(), gpu.uuid.clone(), 1.0)),
                    Sharing::Mig => {
                        for m in &gpu.mig {
                            slots.push(slot(
                                format!("nvidia.com/mig-{}", m.profile),
                                m.uuid.clone(),
                                f64::from(m.slices) / 7.0,
                            ));
                        }
                    }
                    Sharing::TimeSlice { replicas } => {
                        for r in 0..replicas {
                            slots.push(slot(
                                "nvidia.com/gpu".into(),
                                format!("{}::{r}", gpu.uuid),
                                1.0 / f64::from(replicas),
                            ));
                        }
                    }
                    Sharing::Vgpu => {
                        if let Some((profile, count)) = gpu.vgpu {
                            for i in 0..count {
                                slots.push(slot(
                                    format!("nvidia.com/{profile}"),
                                    format!("{}/vgpu-{i}", gpu.uuid),
                                    1.0 / f64::from(count),
                                ));
                            }
                        }
                    }
                    Sharing::Passthrough => {
                        slots.push(slot(format!("nvidia.com/{}", node.model.pci_device), gpu.uuid.clone(), 1.0))
                    }
                }
            }
        }
        self.slots = slots;
    }

    /// Keeps the first `count` free `resource` slots of node `node` for Deployment `deployment`.
    fn reserve(&mut self, deployment: &'static str, node: &str, resource: &str, count: usize) {
        let Some(n) = self.nodes.iter().position(|x| x.name == node) else { return };
        for s in self
            .slots
            .iter_mut()
            .filter(|s| s.node == n && s.resource == resource && s.reserved_for.is_none())
            .take(count)
        {
            s.reserved_for = Some(deployment);
        }
    }

    /// Places a request: on the node with the fewest (but enough) free matching slots, at its creation time or
    /// as soon as capacity frees up within its allowed wait. Returns false when it had to be dropped.
    fn place(&mut self, r: Request) -> bool {
        let mut by_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, s) in self.slots.iter().enumerate() {
            let in_pool = r.pool.is_none_or(|p| self.nodes[s.node].name.starts_with(p));
            if s.resource == r.resource && in_pool && s.reserved_for == r.reservation {
                by_node.entry(s.node).or_default().push(i);
            }
        }
        let units = r.units as usize;
        // Each node's earliest time with `units` free slots, and those slots.
        let mut best: Option<(OffsetDateTime, usize, usize, Vec<usize>)> = None;
        for (node, mut slots) in by_node {
            if slots.len() < units {
                continue;
            }
            slots.sort_by_key(|&i| (self.slots[i].free_at.max(r.created), i));
            let chosen: Vec<usize> = slots[..units].to_vec();
            let ready = chosen.iter().map(|&i| self.slots[i].free_at).max().unwrap_or(r.created).max(r.created);
            let free_now = slots.iter().filter(|&&i| self.slots[i].free_at <= ready).count();
            let candidate = (ready, free_now, node, chosen);
            let better = match &best {
                None => true,
                Some((t, free, n, _)) => (candidate.0, candidate.1, candidate.2) < (*t, *free, *n),
            };
            if better {
                best = Some(candidate);
            }
        }
        let Some((ready, _, node, chosen)) = best else { return false };
        if ready - r.created > r.max_wait {
            return false;
        }
        let started = ready + Duration::seconds(r.startup_s);
        let end = started + r.duration;
        for &i in &chosen {
            self.slots[i].free_at = end + Duration::seconds(20);
        }
        let activity =
            Activity { idle_from: r.activity.idle_from.map(|offset| started + (offset - r.created)), ..r.activity };
        self.workloads.push(Workload {
            holder: r.holder,
            name: r.name,
            uid: r.uid,
            namespace: r.namespace,
            node,
            resource: r.resource,
            units: r.units,
            slots: chosen,
            created: r.created,
            started,
            end,
            ending: r.ending,
            activity,
            labels: r.labels,
            owner: r.owner,
            image: r.image,
        });
        true
    }
}

/// Builds the world for a history that starts at `anchor` and is planned through the month of `now`.
pub fn world(anchor: OffsetDateTime, now: OffsetDateTime) -> World {
    let anchor = month_start(anchor);
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut clusters = vec![prod_east(&mut rng, anchor), research_west(&mut rng, anchor)];
    let endpoint_since = anchor + Duration::minutes(12);
    let mut month = anchor;
    while month <= now {
        let month_no = (month.year() as u64) * 12 + u64::from(u8::from(month.month()));
        let next = add_months(month, 1);
        for (c, cluster) in clusters.iter_mut().enumerate() {
            let mut rng = StdRng::seed_from_u64(mix(SEED ^ mix(month_no) ^ (c as u64 + 1)));
            let mut requests = match c {
                0 => prod_east_month(&mut rng, month, next),
                _ => research_west_month(&mut rng, month, next),
            };
            requests.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
            for r in requests {
                cluster.place(r);
            }
        }
        month = next;
    }
    for c in &mut clusters {
        c.workloads.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    }
    World { anchor, clusters, endpoint_since }
}

fn gpus(rng: &mut StdRng, count: u32) -> Vec<Gpu> {
    (0..count).map(|index| Gpu { uuid: format!("GPU-{}", uuid(rng)), index, mig: vec![], vgpu: None }).collect()
}

fn node(rng: &mut StdRng, name: &str, created: OffsetDateTime, model: &'static GpuModel, sharing: Sharing) -> Node {
    let uid = uuid(rng);
    Node { name: name.into(), uid, created, model, sharing, gpus: gpus(rng, 8) }
}

fn namespace(
    rng: &mut StdRng,
    name: &'static str,
    created: OffsetDateTime,
    tenant: &'static str,
    department: &'static str,
) -> Namespace {
    Namespace { name, uid: uuid(rng), created, owners: vec![(created, tenant, department)] }
}

fn quota(flavor: &'static str, resource: &'static str, nominal: u32, borrowing_limit: Option<u32>) -> Quota {
    Quota { flavor, resource, nominal, borrowing_limit }
}

fn queue(rng: &mut StdRng, name: &'static str, cohort: &'static str, created: OffsetDateTime, q: Vec<Quota>) -> Queue {
    Queue { name, uid: uuid(rng), cohort, created, versions: vec![(created, q)] }
}

/// Cluster `prod-east`: H100s (the shared vLLM endpoint, product inference and training), time-sliced L4s, and
/// a KubeVirt pool of T4s (vGPU desktops and passthrough VMs).
fn prod_east(rng: &mut StdRng, anchor: OffsetDateTime) -> ClusterPlan {
    let built = anchor - Duration::days(75);
    let mut nodes = vec![
        node(rng, "h100-e-01", built, &H100, Sharing::Exclusive),
        node(rng, "h100-e-02", built, &H100, Sharing::Exclusive),
        node(rng, "l4-e-01", built + Duration::days(9), &L4, Sharing::TimeSlice { replicas: 4 }),
        node(rng, "t4-vdi-e-01", built + Duration::days(20), &T4, Sharing::Vgpu),
        node(rng, "t4-pt-e-01", built + Duration::days(20), &T4, Sharing::Passthrough),
    ];
    for n in nodes.iter_mut().filter(|n| std::ptr::eq(n.model, &T4)) {
        n.gpus.truncate(4);
    }
    // vGPU types are per physical GPU: two boards of 4Q desktops, one of 2Q, one of 8Q workstations.
    let layout = [("GRID_T4-4Q", 4), ("GRID_T4-4Q", 4), ("GRID_T4-2Q", 8), ("GRID_T4-8Q", 2)];
    for (gpu, vgpu) in nodes[3].gpus.iter_mut().zip(layout) {
        gpu.vgpu = Some(vgpu);
    }
    let ns_created = anchor - Duration::days(60);
    let namespaces = vec![
        namespace(rng, "llm-platform", ns_created, "ml-platform", "platform"),
        namespace(rng, "assistant-prod", ns_created, "assistant-serving", "product"),
        namespace(rng, "search-train", ns_created, "search-ranking", "product"),
        namespace(rng, "recsys", ns_created, "recommendations", "product"),
        Namespace {
            // Handed from recommendations to search-ranking in the middle of the second month.
            owners: vec![
                (ns_created + Duration::days(5), "recommendations", "product"),
                (
                    add_months(anchor, 1) + Duration::days(14) + Duration::hours(10) + Duration::minutes(30),
                    "search-ranking",
                    "product",
                ),
            ],
            ..namespace(rng, "recsys-experiments", ns_created + Duration::days(5), "recommendations", "product")
        },
        namespace(rng, "vdi", ns_created, "analytics-vdi", "platform"),
        namespace(rng, "sim-vms", ns_created, "data-engineering", "platform"),
    ];
    let q_created = anchor - Duration::days(30);
    let queues = vec![
        queue(rng, "ml-platform", "product", q_created, vec![quota("h100-80gb", "nvidia.com/gpu", 8, None)]),
        queue(
            rng,
            "assistant-serving",
            "product",
            q_created,
            vec![quota("h100-80gb", "nvidia.com/gpu", 2, Some(2)), quota("l4-24gb", "nvidia.com/gpu", 4, Some(4))],
        ),
        queue(
            rng,
            "search-ranking",
            "product",
            q_created,
            vec![quota("h100-80gb", "nvidia.com/gpu", 4, Some(4)), quota("l4-24gb", "nvidia.com/gpu", 8, None)],
        ),
        queue(
            rng,
            "recommendations",
            "product",
            q_created,
            vec![quota("h100-80gb", "nvidia.com/gpu", 2, Some(2)), quota("l4-24gb", "nvidia.com/gpu", 8, Some(4))],
        ),
    ];
    let mut c = ClusterPlan { name: "prod-east", nodes, namespaces, queues, slots: vec![], workloads: vec![] };
    c.build_slots(anchor);
    // Long-running services own their devices: the shared endpoint all of h100-e-01, the assistant's ranker two
    // GPUs of h100-e-02, the recommendation ranker two L4s' worth of time-slices.
    c.reserve(ENDPOINT, "h100-e-01", "nvidia.com/gpu", 8);
    c.reserve("assistant-ranker", "h100-e-02", "nvidia.com/gpu", 2);
    c.reserve("ranker-lite", "l4-e-01", "nvidia.com/gpu", 8);
    c
}

/// Cluster `research-west`: H100s for large training and A100s partitioned with MIG (mixed profiles).
fn research_west(rng: &mut StdRng, anchor: OffsetDateTime) -> ClusterPlan {
    let built = anchor - Duration::days(120);
    let mut nodes = vec![
        node(rng, "h100-w-01", built, &H100, Sharing::Exclusive),
        node(rng, "h100-w-02", built, &H100, Sharing::Exclusive),
        node(rng, "a100-w-01", built, &A100, Sharing::Mig),
        node(rng, "a100-w-02", built, &A100, Sharing::Mig),
    ];
    // (profile, compute slices); GPU instance IDs as nvidia-smi numbers them for these placements.
    let layouts: [&[(&str, u32, u32)]; 4] = [
        &[("3g.40gb", 3, 1), ("3g.40gb", 3, 2)],
        &[("2g.20gb", 2, 3), ("2g.20gb", 2, 4), ("2g.20gb", 2, 5), ("1g.10gb", 1, 13)],
        &[
            ("1g.10gb", 1, 7),
            ("1g.10gb", 1, 8),
            ("1g.10gb", 1, 9),
            ("1g.10gb", 1, 10),
            ("1g.10gb", 1, 11),
            ("1g.10gb", 1, 12),
            ("1g.10gb", 1, 13),
        ],
        &[("3g.40gb", 3, 2), ("2g.20gb", 2, 3), ("1g.10gb", 1, 9), ("1g.10gb", 1, 10)],
    ];
    for (n, node) in nodes.iter_mut().enumerate().skip(2) {
        for gpu in &mut node.gpus {
            let layout = layouts[(n - 2) * 2 + (gpu.index as usize) / 4];
            gpu.mig = layout
                .iter()
                .map(|&(profile, slices, gpu_instance_id)| MigInstance {
                    profile,
                    gpu_instance_id,
                    uuid: format!("MIG-{}", uuid(rng)),
                    slices,
                })
                .collect();
        }
    }
    let ns_created = anchor - Duration::days(90);
    let namespaces = vec![
        namespace(rng, "nlp", ns_created, "nlp-research", "research"),
        namespace(rng, "nlp-notebooks", ns_created, "nlp-research", "research"),
        namespace(rng, "vision", ns_created, "vision-research", "research"),
        namespace(rng, "speech", ns_created + Duration::days(31), "speech-research", "research"),
        namespace(rng, "data-pipelines", ns_created, "data-engineering", "platform"),
    ];
    let q_created = anchor - Duration::days(30);
    let mut nlp = queue(
        rng,
        "nlp-research",
        "research",
        q_created,
        vec![
            quota("h100-80gb", "nvidia.com/gpu", 8, Some(8)),
            quota("a100-80gb", "nvidia.com/mig-3g.40gb", 4, Some(4)),
            quota("a100-80gb", "nvidia.com/mig-1g.10gb", 6, None),
        ],
    );
    // The research board raised NLP's H100 guarantee at the start of the second month.
    nlp.versions.push((
        add_months(anchor, 1) + Duration::hours(9),
        vec![
            quota("h100-80gb", "nvidia.com/gpu", 12, Some(4)),
            quota("a100-80gb", "nvidia.com/mig-3g.40gb", 4, Some(4)),
            quota("a100-80gb", "nvidia.com/mig-1g.10gb", 6, None),
        ],
    ));
    let queues = vec![
        nlp,
        queue(
            rng,
            "vision-research",
            "research",
            q_created,
            vec![
                quota("h100-80gb", "nvidia.com/gpu", 6, Some(4)),
                quota("a100-80gb", "nvidia.com/mig-2g.20gb", 6, Some(4)),
            ],
        ),
        queue(
            rng,
            "speech-research",
            "research",
            q_created,
            vec![
                quota("a100-80gb", "nvidia.com/mig-2g.20gb", 4, Some(2)),
                quota("a100-80gb", "nvidia.com/mig-3g.40gb", 2, Some(2)),
                quota("a100-80gb", "nvidia.com/mig-1g.10gb", 4, None),
            ],
        ),
        queue(
            rng,
            "data-engineering",
            "research",
            q_created,
            vec![quota("a100-80gb", "nvidia.com/mig-1g.10gb", 8, None)],
        ),
    ];
    let mut c = ClusterPlan { name: "research-west", nodes, namespaces, queues, slots: vec![], workloads: vec![] };
    c.build_slots(anchor);
    c.reserve("detector-serving", "a100-w-02", "nvidia.com/mig-2g.20gb", 4);
    c.reserve("embed-serving", "a100-w-02", "nvidia.com/mig-1g.10gb", 6);
    c.reserve("rag-reranker", "a100-w-01", "nvidia.com/mig-3g.40gb", 2);
    c
}

/// Helpers to build requests within one month.
struct MonthGen<'a> {
    rng: &'a mut StdRng,
    start: OffsetDateTime,
    end: OffsetDateTime,
}

/// Kinds of request templates.
struct Spec {
    namespace: &'static str,
    prefix: &'static str,
    resource: &'static str,
    units: u32,
    hours: (f64, f64),
    max_wait_h: f64,
    activity: ActivityKind,
    level: (f64, f64),
    memory: f64,
    image: &'static str,
    pool: Option<&'static str>,
}

impl MonthGen<'_> {
    fn days(&self) -> i64 {
        (self.end - self.start).whole_days()
    }

    fn random_time(&mut self) -> OffsetDateTime {
        let secs = (self.end - self.start).whole_seconds().max(1);
        self.start + Duration::seconds(self.rng.random_range(0..secs))
    }

    fn hours(&mut self, (lo, hi): (f64, f64)) -> Duration {
        Duration::seconds((self.rng.random_range(lo..=hi) * 3600.0) as i64)
    }

    fn labels(&mut self, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// A Kueue-admitted batch Job's pod.
    fn job(&mut self, spec: &Spec, created: OffsetDateTime, queue: &'static str) -> Request {
        let job = format!("{}-{}", spec.prefix, suffix(self.rng, 5));
        let name = format!("{job}-{}", suffix(self.rng, 5));
        let duration = self.hours(spec.hours);
        let failed = self.rng.random_bool(0.08);
        let level = self.rng.random_range(spec.level.0..=spec.level.1);
        let labels = self.labels(&[
            ("batch.kubernetes.io/job-name", &job),
            ("job-name", &job),
            ("kueue.x-k8s.io/queue-name", &format!("{queue}-queue")),
        ]);
        Request {
            holder: HolderKind::Pod,
            namespace: spec.namespace,
            name,
            resource: spec.resource.into(),
            units: spec.units,
            created,
            duration,
            max_wait: Duration::seconds((spec.max_wait_h * 3600.0) as i64),
            ending: if failed { Ending::Failed } else { Ending::Succeeded },
            activity: Activity { kind: spec.activity, level, idle_from: None, memory: spec.memory },
            labels,
            owner: Owner { kind: "Job", api_version: "batch/v1", name: job, uid: uuid(self.rng) },
            image: spec.image,
            uid: uuid(self.rng),
            startup_s: self.rng.random_range(20..140),
            pool: spec.pool,
            reservation: None,
        }
    }

    /// A training job that hangs some hours before its end and is then deleted by its owner: an idle reservation.
    fn hung(&mut self, mut r: Request) -> Request {
        let idle_h = self.rng.random_range(14.0..30.0);
        r.duration += Duration::seconds((idle_h * 3600.0) as i64);
        let busy = r.duration - Duration::seconds((idle_h * 3600.0) as i64);
        r.activity.idle_from = Some(r.created + busy);
        r.ending = Ending::Deleted;
        r
    }

    /// A notebook server (Kubeflow-style StatefulSet pod), deleted by its user.
    fn notebook(&mut self, spec: &Spec, created: OffsetDateTime) -> Request {
        let user =
            ["ana", "bo", "chen", "dev", "eli", "fatima", "gus", "hana", "ivan", "jo"][self.rng.random_range(0..10)];
        let set = format!("{}-{user}-{}", spec.prefix, suffix(self.rng, 4));
        let mut duration = self.hours(spec.hours);
        // One in five is left open overnight: the GPU stays reserved, doing nothing.
        let mut idle_from = None;
        if self.rng.random_bool(0.2) {
            idle_from = Some(created + duration);
            duration += self.hours((12.0, 20.0));
        }
        let labels = self.labels(&[("app", "notebook"), ("notebook-name", &set), ("statefulset", &set)]);
        Request {
            holder: HolderKind::Pod,
            namespace: spec.namespace,
            name: format!("{set}-0"),
            resource: spec.resource.into(),
            units: spec.units,
            created,
            duration,
            max_wait: Duration::seconds((spec.max_wait_h * 3600.0) as i64),
            ending: Ending::Deleted,
            activity: Activity { kind: ActivityKind::Notebook, level: 25.0, idle_from, memory: spec.memory },
            labels,
            owner: Owner { kind: "StatefulSet", api_version: "apps/v1", name: set, uid: uuid(self.rng) },
            image: spec.image,
            uid: uuid(self.rng),
            startup_s: self.rng.random_range(15..60),
            pool: spec.pool,
            reservation: None,
        }
    }

    /// `count` training jobs spread over the month; one in six hangs before it is deleted.
    fn jobs(&mut self, spec: &Spec, count: usize, queue: &'static str, out: &mut Vec<Request>) {
        for _ in 0..count {
            let created = self.random_time();
            let r = self.job(spec, created, queue);
            out.push(if self.rng.random_bool(1.0 / 6.0) { self.hung(r) } else { r });
        }
    }

    /// Notebooks opened on weekdays during office hours, `per_day` on average.
    fn notebooks(&mut self, spec: &Spec, per_day: f64, out: &mut Vec<Request>) {
        for d in 0..self.days() {
            let day = self.start + Duration::days(d);
            if matches!(day.weekday(), Weekday::Saturday | Weekday::Sunday) {
                continue;
            }
            let n = (per_day + self.rng.random_range(-1.0..=1.0)).round().max(0.0) as usize;
            for _ in 0..n {
                let created = day + Duration::seconds(self.rng.random_range(8 * 3600..16 * 3600));
                out.push(self.notebook(spec, created));
            }
        }
    }

    /// Jobs every `every_h` hours through the month (pipelines, CI), starting at `offset_h`.
    fn periodic(
        &mut self,
        spec: &Spec,
        every_h: i64,
        offset_h: i64,
        weekdays_only: bool,
        queue: &'static str,
        out: &mut Vec<Request>,
    ) {
        let mut t = self.start + Duration::hours(offset_h);
        while t < self.end {
            let weekend = matches!(t.weekday(), Weekday::Saturday | Weekday::Sunday);
            if !(weekdays_only && weekend) {
                let jitter = Duration::seconds(self.rng.random_range(0..600));
                out.push(self.job(spec, t + jitter, queue));
            }
            t += Duration::hours(every_h);
        }
    }

    /// A Deployment's pods, replaced at the start of every month (a rollout): they run until the next one.
    fn deployment(&mut self, d: &DeploymentSpec, out: &mut Vec<Request>) {
        let rollout = self.start + Duration::minutes(d.rollout_minute);
        let next = add_months(self.start, 1) + Duration::minutes(d.rollout_minute);
        let replica_set = format!("{}-{}", d.name, hex(self.rng, 10));
        let rs_uid = uuid(self.rng);
        for i in 0..d.replicas {
            let created = rollout + Duration::minutes(4 * i64::from(i));
            let mut labels = self
                .labels(&[("app.kubernetes.io/name", d.name), ("pod-template-hash", &replica_set[d.name.len() + 1..])]);
            for (k, v) in d.labels {
                labels.insert(k.to_string(), v.to_string());
            }
            out.push(Request {
                holder: HolderKind::Pod,
                namespace: d.namespace,
                name: format!("{replica_set}-{}", suffix(self.rng, 5)),
                resource: d.resource.into(),
                units: d.units,
                created,
                duration: next + Duration::minutes(4 * i64::from(i)) - created - Duration::seconds(90),
                max_wait: Duration::hours(1),
                ending: Ending::Deleted,
                activity: Activity { kind: ActivityKind::Inference, level: d.level, idle_from: None, memory: 0.92 },
                labels,
                owner: Owner { kind: "ReplicaSet", api_version: "apps/v1", name: replica_set.clone(), uid: rs_uid },
                image: d.image,
                uid: uuid(self.rng),
                startup_s: 90,
                pool: None,
                reservation: Some(d.name),
            });
        }
    }

    /// KubeVirt VMs started through the month, each running for `days`.
    fn vms(&mut self, v: &VmSpec, out: &mut Vec<Request>) {
        for _ in 0..v.count {
            let created = self.random_time();
            let duration = Duration::seconds((self.rng.random_range(v.days.0..=v.days.1) * 86_400.0) as i64);
            let resource = v.resources[self.rng.random_range(0..v.resources.len())];
            let name = format!("{}-{}", v.prefix, suffix(self.rng, 5));
            let level = self.rng.random_range(v.level.0..=v.level.1);
            let labels = self.labels(&[("kubevirt.io/domain", &name), ("kubevirt.io/vm", &name)]);
            out.push(Request {
                holder: HolderKind::Vmi,
                namespace: v.namespace,
                name: name.clone(),
                resource: resource.into(),
                units: 1,
                created,
                duration,
                max_wait: Duration::hours(8),
                ending: if self.rng.random_bool(0.7) { Ending::Stopped } else { Ending::Deleted },
                activity: Activity { kind: v.activity, level, idle_from: None, memory: 0.6 },
                labels,
                owner: Owner { kind: "VirtualMachine", api_version: "kubevirt.io/v1", name, uid: uuid(self.rng) },
                image: v.image,
                uid: uuid(self.rng),
                startup_s: 45,
                pool: None,
                reservation: None,
            });
        }
    }
}

struct DeploymentSpec {
    namespace: &'static str,
    name: &'static str,
    replicas: u32,
    resource: &'static str,
    units: u32,
    level: f64,
    rollout_minute: i64,
    labels: &'static [(&'static str, &'static str)],
    image: &'static str,
}

struct VmSpec {
    namespace: &'static str,
    prefix: &'static str,
    count: usize,
    resources: &'static [&'static str],
    days: (f64, f64),
    activity: ActivityKind,
    level: (f64, f64),
    image: &'static str,
}

const PYTORCH: &str = "nvcr.io/nvidia/pytorch:24.10-py3";
const NOTEBOOK: &str = "kubeflownotebookswg/jupyter-pytorch-cuda-full:v1.9.0";
const VLLM: &str = "vllm/vllm-openai:v0.6.4";
const TRITON: &str = "nvcr.io/nvidia/tritonserver:24.10-py3";

fn prod_east_month(rng: &mut StdRng, start: OffsetDateTime, end: OffsetDateTime) -> Vec<Request> {
    let mut g = MonthGen { rng, start, end };
    let mut out = Vec::new();
    g.deployment(
        &DeploymentSpec {
            namespace: "llm-platform",
            name: ENDPOINT,
            replicas: 4,
            resource: "nvidia.com/gpu",
            units: 2,
            level: 78.0,
            rollout_minute: 12,
            labels: &[
                (label::ENDPOINT, ENDPOINT),
                (label::MODEL, ENDPOINT_MODEL),
                ("kueue.x-k8s.io/queue-name", "ml-platform-queue"),
            ],
            image: VLLM,
        },
        &mut out,
    );
    g.deployment(
        &DeploymentSpec {
            namespace: "assistant-prod",
            name: "assistant-ranker",
            replicas: 2,
            resource: "nvidia.com/gpu",
            units: 1,
            level: 55.0,
            rollout_minute: 6 * 60,
            labels: &[(label::MODEL, "assistant-ranker-v7"), ("kueue.x-k8s.io/queue-name", "assistant-serving-queue")],
            image: TRITON,
        },
        &mut out,
    );
    let search_train = Spec {
        namespace: "search-train",
        prefix: "ranker-train",
        resource: "nvidia.com/gpu",
        units: 2,
        hours: (20.0, 90.0),
        max_wait_h: 48.0,
        activity: ActivityKind::Training,
        level: (78.0, 96.0),
        memory: 0.88,
        image: PYTORCH,
        pool: Some("h100-"),
    };
    g.jobs(&search_train, 6, "search-ranking", &mut out);
    g.jobs(
        &Spec { units: 4, prefix: "ranker-distill", hours: (10.0, 40.0), ..search_train },
        2,
        "search-ranking",
        &mut out,
    );
    let recsys = Spec { namespace: "recsys", prefix: "two-tower", units: 1, hours: (8.0, 60.0), ..search_train };
    g.jobs(&recsys, 6, "recommendations", &mut out);
    // Time-sliced L4s: batch scoring, embedding refreshes, CI, and notebooks.
    let l4 = Spec {
        namespace: "recsys",
        prefix: "nightly-score",
        resource: "nvidia.com/gpu",
        units: 1,
        hours: (1.5, 3.0),
        max_wait_h: 3.0,
        activity: ActivityKind::Batch,
        level: (70.0, 95.0),
        memory: 0.5,
        image: PYTORCH,
        pool: Some("l4-"),
    };
    g.deployment(
        &DeploymentSpec {
            namespace: "recsys",
            name: "ranker-lite",
            replicas: 8,
            resource: "nvidia.com/gpu",
            units: 1,
            level: 55.0,
            rollout_minute: 5 * 60,
            labels: &[(label::MODEL, "ranker-lite-v3"), ("kueue.x-k8s.io/queue-name", "recommendations-queue")],
            image: TRITON,
        },
        &mut out,
    );
    g.periodic(&Spec { units: 2, hours: (2.0, 4.0), ..l4 }, 24, 1, false, "recommendations", &mut out);
    g.periodic(
        &Spec { namespace: "search-train", prefix: "embed-refresh", units: 2, hours: (1.0, 2.0), ..l4 },
        6,
        5,
        false,
        "search-ranking",
        &mut out,
    );
    g.periodic(
        &Spec { namespace: "assistant-prod", prefix: "eval-ci", hours: (0.4, 1.5), max_wait_h: 1.0, ..l4 },
        3,
        0,
        true,
        "assistant-serving",
        &mut out,
    );
    g.notebooks(
        &Spec {
            namespace: "recsys-experiments",
            prefix: "nb",
            hours: (3.0, 9.0),
            max_wait_h: 0.5,
            activity: ActivityKind::Notebook,
            memory: 0.35,
            image: NOTEBOOK,
            ..l4
        },
        6.0,
        &mut out,
    );
    // KubeVirt: vGPU desktops for analysts, passthrough T4 VMs for a simulation toolchain.
    g.vms(
        &VmSpec {
            namespace: "vdi",
            prefix: "desktop",
            count: 12,
            resources: &[
                "nvidia.com/GRID_T4-4Q",
                "nvidia.com/GRID_T4-4Q",
                "nvidia.com/GRID_T4-2Q",
                "nvidia.com/GRID_T4-8Q",
            ],
            days: (7.0, 28.0),
            activity: ActivityKind::Desktop,
            level: (25.0, 55.0),
            image: "registry.example.com/vdi/windows11-analyst:2026.09",
        },
        &mut out,
    );
    g.vms(
        &VmSpec {
            namespace: "sim-vms",
            prefix: "cfd-sim",
            count: 4,
            resources: &["nvidia.com/TU104GL_Tesla_T4"],
            days: (6.0, 20.0),
            activity: ActivityKind::Simulation,
            level: (60.0, 92.0),
            image: "registry.example.com/sim/rhel9-cfd-toolchain:4.2",
        },
        &mut out,
    );
    out
}

fn research_west_month(rng: &mut StdRng, start: OffsetDateTime, end: OffsetDateTime) -> Vec<Request> {
    let mut g = MonthGen { rng, start, end };
    let mut out = Vec::new();
    let nlp = Spec {
        namespace: "nlp",
        prefix: "llm-pretrain",
        resource: "nvidia.com/gpu",
        units: 8,
        hours: (40.0, 140.0),
        max_wait_h: 72.0,
        activity: ActivityKind::Training,
        level: (85.0, 97.0),
        memory: 0.93,
        image: PYTORCH,
        pool: None,
    };
    g.jobs(&nlp, 3, "nlp-research", &mut out);
    g.jobs(&Spec { units: 4, prefix: "sft", hours: (12.0, 48.0), ..nlp }, 4, "nlp-research", &mut out);
    g.jobs(
        &Spec {
            resource: "nvidia.com/mig-3g.40gb",
            units: 1,
            prefix: "lora-ft",
            hours: (10.0, 60.0),
            max_wait_h: 24.0,
            level: (55.0, 85.0),
            ..nlp
        },
        20,
        "nlp-research",
        &mut out,
    );
    let vision =
        Spec { namespace: "vision", prefix: "vit-train", units: 4, hours: (24.0, 80.0), level: (80.0, 95.0), ..nlp };
    g.jobs(&vision, 4, "vision-research", &mut out);
    g.jobs(
        &Spec {
            resource: "nvidia.com/mig-2g.20gb",
            units: 1,
            prefix: "detector-ft",
            hours: (8.0, 48.0),
            max_wait_h: 24.0,
            ..vision
        },
        25,
        "vision-research",
        &mut out,
    );
    let speech = Spec {
        namespace: "speech",
        prefix: "asr-train",
        resource: "nvidia.com/mig-2g.20gb",
        units: 1,
        hours: (20.0, 80.0),
        max_wait_h: 24.0,
        activity: ActivityKind::Training,
        level: (70.0, 92.0),
        memory: 0.8,
        image: PYTORCH,
        pool: None,
    };
    g.jobs(&speech, 12, "speech-research", &mut out);
    g.jobs(&Spec { resource: "nvidia.com/mig-3g.40gb", prefix: "tts-train", ..speech }, 6, "speech-research", &mut out);
    // Services on MIG slices, replaced at each month's rollout.
    for d in [
        DeploymentSpec {
            namespace: "vision",
            name: "detector-serving",
            replicas: 4,
            resource: "nvidia.com/mig-2g.20gb",
            units: 1,
            level: 50.0,
            rollout_minute: 7 * 60,
            labels: &[(label::MODEL, "yolo-detector-v11"), ("kueue.x-k8s.io/queue-name", "vision-research-queue")],
            image: TRITON,
        },
        DeploymentSpec {
            namespace: "data-pipelines",
            name: "embed-serving",
            replicas: 6,
            resource: "nvidia.com/mig-1g.10gb",
            units: 1,
            level: 45.0,
            rollout_minute: 7 * 60 + 30,
            labels: &[(label::MODEL, "bge-m3"), ("kueue.x-k8s.io/queue-name", "data-engineering-queue")],
            image: TRITON,
        },
        DeploymentSpec {
            namespace: "nlp",
            name: "rag-reranker",
            replicas: 2,
            resource: "nvidia.com/mig-3g.40gb",
            units: 1,
            level: 40.0,
            rollout_minute: 8 * 60,
            labels: &[(label::MODEL, "bge-reranker-v2"), ("kueue.x-k8s.io/queue-name", "nlp-research-queue")],
            image: TRITON,
        },
    ] {
        g.deployment(&d, &mut out);
    }
    let notebook = Spec {
        namespace: "nlp-notebooks",
        prefix: "nb",
        resource: "nvidia.com/mig-1g.10gb",
        units: 1,
        hours: (1.5, 7.0),
        max_wait_h: 0.5,
        activity: ActivityKind::Notebook,
        level: (20.0, 40.0),
        memory: 0.4,
        image: NOTEBOOK,
        pool: None,
    };
    g.notebooks(&notebook, 5.0, &mut out);
    g.notebooks(&Spec { namespace: "speech", ..notebook }, 2.0, &mut out);
    g.periodic(
        &Spec {
            namespace: "data-pipelines",
            prefix: "embed-corpus",
            resource: "nvidia.com/mig-1g.10gb",
            units: 1,
            hours: (1.0, 2.5),
            max_wait_h: 2.0,
            activity: ActivityKind::Batch,
            level: (80.0, 97.0),
            memory: 0.7,
            image: PYTORCH,
            pool: None,
        },
        4,
        2,
        false,
        "data-engineering",
        &mut out,
    );
    out
}
