//! The agent ↔ server wire format: what an agent sends (a [`Batch`] of [`Fact`]s) and what the server answers.
//!
//! JSON, versioned by [`WIRE_VERSION`]. Every fact carries a deterministic `event_id` built from immutable
//! identifiers and the transition it records (see [`event_id`]), so a fact sent twice, or by two agents, is
//! stored once. Times are UTC and come from the control plane's own timestamps wherever one exists.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::sharing::SharingMode;

mod gaps;
mod telemetry;
mod usage;
pub use gaps::*;
pub use telemetry::*;
pub use usage::*;

/// Version of this wire format; the server refuses batches of another major version.
pub const WIRE_VERSION: u32 = 1;

/// Largest number of facts in one batch the server accepts.
pub const MAX_FACTS_PER_BATCH: usize = 10_000;

/// What an agent sends in one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Batch {
    /// [`WIRE_VERSION`] of the sender.
    #[cfg_attr(feature = "schema", schemars(range(min = WIRE_VERSION, max = WIRE_VERSION)))]
    pub wire_version: u32,
    /// Who sent it (for logs and diagnostics; the cluster comes from the credential, never from here).
    pub agent: AgentInfo,
    /// The cluster name the agent believes it speaks for; when present it must match the credential's
    /// cluster (a mismatch is refused with 403 rather than written anywhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The facts, in any order.
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_FACTS_PER_BATCH)))]
    pub facts: Vec<Fact>,
}

/// The sending agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentInfo {
    /// Agent version.
    pub version: String,
    /// `cluster` or `node`.
    pub mode: String,
    /// Node name, for node agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The agent's spool when it sent this batch (facts and bytes waiting, this batch included, and facts it ever
    /// had to drop): the admin page shows each agent's backlog. Absent from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool: Option<SpoolState>,
}

/// An agent's spool, as reported with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SpoolState {
    /// Facts waiting to be delivered, this batch included.
    pub pending_facts: u64,
    /// Bytes those facts take in the spool.
    pub pending_bytes: u64,
    /// Facts dropped since the spool was created (it was full).
    #[serde(default)]
    pub dropped_facts: u64,
    /// Bytes of the spool on disk (acknowledged records not yet reclaimed included): with `max_bytes`, how full
    /// it is. 0 from older agents.
    #[serde(default)]
    pub disk_bytes: u64,
    /// The spool's cap (`--spool-max-mib`); past it the oldest facts are dropped. 0 from older agents.
    #[serde(default)]
    pub max_bytes: u64,
}

/// One fact: its identity, when the agent observed it, and what it says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Fact {
    /// Deterministic ID: the same transition of the same object always gets the same ID.
    pub event_id: String,
    /// When the agent observed it (informational; intervals use the object's own timestamps).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub observed_at: OffsetDateTime,
    /// The content.
    #[serde(flatten)]
    pub body: FactBody,
}

/// The kinds of fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FactBody {
    /// A workload started holding GPU capacity.
    AllocationStarted(AllocationStart),
    /// A workload stopped holding it (time from the object's own timestamps).
    AllocationEnded(AllocationEnd),
    /// After a watch gap, an open allocation's object no longer exists: the server ends it as `estimated`.
    AllocationVanished(AllocationVanished),
    /// A namespace, with its owner labels; an owner change is a new fact.
    NamespaceObserved(NamespaceFact),
    /// A GPU node and how its device plugin shares GPUs.
    NodeObserved(NodeFact),
    /// A physical GPU (and its MIG instances) seen on a node.
    DeviceObserved(DeviceFact),
    /// Kubelet's record of which container holds which devices.
    DeviceAssigned(DeviceAssignment),
    /// Rolled-up utilization samples of one device (or MIG instance) over a window.
    Telemetry(TelemetryRollup),
    /// Per-process utilization of one GPU over a window, summed per pod (NVML process samples): how much of a
    /// soft-shared GPU each pod used.
    ProcessTelemetry(ProcessTelemetry),
    /// The agent dropped data (spool full): the ledger shows the hole instead of a silent zero.
    Gap(GapFact),
    /// What a re-list after a gap brought back: per kind of the gap's dropped facts, how many were derived again
    /// (same event IDs) and how many stay lost.
    GapRecovered(GapRecovery),
    /// A Kueue ClusterQueue's nominal quotas (imported as guaranteed capacity by the ledger).
    QuotaObserved(QuotaFact),
    /// Productive work a shared model-serving endpoint did for one tenant over a window (splits its cost).
    ServiceUsage(ServiceUsageFact),
    /// What one model-server pod of a shared endpoint counted over a window, all tenants together (scraped): the
    /// server reconciles it with the tenants' usage and reports the unattributed remainder.
    EndpointTotals(EndpointTotalsFact),
    /// A training job's cumulative progress, from its pod's annotations (the server shows work per GPU-hour).
    TrainingProgress(TrainingProgressFact),
    /// A device fault the node agent saw (an XID error, a GPU gone from the bus, retired memory pages) or the end of
    /// one (the device back): the server proposes credits for the hours allocations lost on it.
    DeviceFault(DeviceFaultFact),
}

impl FactBody {
    /// The `kind` tag as written on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::AllocationStarted(_) => "allocation_started",
            Self::AllocationEnded(_) => "allocation_ended",
            Self::AllocationVanished(_) => "allocation_vanished",
            Self::NamespaceObserved(_) => "namespace_observed",
            Self::NodeObserved(_) => "node_observed",
            Self::DeviceObserved(_) => "device_observed",
            Self::DeviceAssigned(_) => "device_assigned",
            Self::Telemetry(_) => "telemetry",
            Self::ProcessTelemetry(_) => "process_telemetry",
            Self::Gap(_) => "gap",
            Self::GapRecovered(_) => "gap_recovered",
            Self::QuotaObserved(_) => "quota_observed",
            Self::ServiceUsage(_) => "service_usage",
            Self::EndpointTotals(_) => "endpoint_totals",
            Self::TrainingProgress(_) => "training_progress",
            Self::DeviceFault(_) => "device_fault",
        }
    }
}

/// Labels that carry attribution (keys configurable in the agent; values as found).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AttributionLabels {
    /// Tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Department.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub department: Option<String>,
    /// Autonomous AI agent session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session: Option<String>,
    /// Model-serving endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Model served or trained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// What kind of object holds the capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Holder {
    /// A Kubernetes Pod.
    Pod,
    /// A KubeVirt VirtualMachineInstance.
    Vmi,
    /// A DRA ResourceClaim.
    ResourceClaim,
}

/// A workload started holding GPU capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AllocationStart {
    /// Stable ID of this allocation: holder UID, container or device name, and resource.
    pub allocation_id: String,
    /// Pod, VMI or claim.
    pub holder: Holder,
    /// The holder's UID.
    pub holder_uid: Uuid,
    /// The holder's name (for people; never used as identity).
    pub holder_name: String,
    /// Namespace name.
    pub namespace: String,
    /// Namespace UID, when the agent knows it (the cluster watcher always does; `inspect` on a lone file not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_uid: Option<Uuid>,
    /// Container (pods) or device entry name (VMIs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Node the holder runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The extended resource or device name, e.g. `nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`.
    pub resource: String,
    /// How many units of the resource.
    pub units: u32,
    /// How the GPU is shared, as declared (the fraction comes from the approved inventory on the server).
    pub mode: SharingMode,
    /// GPU model when the node says (`nvidia.com/gpu.product`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    /// Physical GPU UUIDs (or MIG device UUIDs) when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_ids: Vec<String>,
    /// When it started holding the capacity (pod `status.startTime` or container `startedAt`).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub started_at: OffsetDateTime,
    /// Attribution labels found on the holder.
    #[serde(default)]
    pub labels: AttributionLabels,
}

/// Why an allocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The container or VM finished (successfully or not).
    Finished,
    /// The holder was deleted.
    Deleted,
}

/// A workload stopped holding the capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AllocationEnd {
    /// The allocation that ended.
    pub allocation_id: String,
    /// From the object's own timestamps (`finishedAt`, `deletionTimestamp`).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub ended_at: OffsetDateTime,
    /// Why.
    pub reason: EndReason,
}

/// An open allocation whose object vanished while no agent watched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AllocationVanished {
    /// The allocation.
    pub allocation_id: String,
    /// The last time the agent knew it existed: the estimated end.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub last_seen_at: OffsetDateTime,
}

/// A namespace and its owner labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NamespaceFact {
    /// Namespace UID.
    pub namespace_uid: Uuid,
    /// Namespace name.
    pub name: String,
    /// `metadata.creationTimestamp`.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub created_at: OffsetDateTime,
    /// `metadata.deletionTimestamp`, when being deleted.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("format" = "date-time")))]
    pub deleted_at: Option<OffsetDateTime>,
    /// Owner labels (tenant, department).
    #[serde(default)]
    pub labels: AttributionLabels,
    /// Since when these labels hold (the observation time of the change).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub labels_since: OffsetDateTime,
}

/// A GPU node and its sharing configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeFact {
    /// Node name.
    pub name: String,
    /// Node UID.
    pub node_uid: Uuid,
    /// `nvidia.com/gpu.product`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_product: Option<String>,
    /// `nvidia.com/gpu.count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<u32>,
    /// `nvidia.com/gpu.memory` (MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_mib: Option<u32>,
    /// `nvidia.com/mig.strategy` (`single`, `mixed`, `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_strategy: Option<String>,
    /// `nvidia.com/gpu.sharing-strategy` (`time-slicing`, `mps`, `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing_strategy: Option<String>,
    /// `nvidia.com/gpu.replicas` when above 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// Allocatable GPU-like extended resources (`nvidia.com/gpu`, `nvidia.com/mig-…`) and their counts.
    #[serde(default)]
    pub allocatable: std::collections::BTreeMap<String, u32>,
    /// `spec.providerID` (`aws:///zone/i-…`, `azure:///subscriptions/…`, `gce://project/zone/name`): how the cloud
    /// bill names this machine. Absent on premises (and from agents before it was sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = crate::provider::MAX_RESOURCE_ID)))]
    pub provider_id: Option<String>,
}

/// A MIG instance on a physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MigDeviceFact {
    /// Profile, e.g. `1g.10gb`.
    pub profile: String,
    /// GPU instance ID.
    pub gpu_instance_id: u32,
    /// Compute instance ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance_id: Option<u32>,
    /// MIG device UUID (`MIG-…`), when the source gives one (DCGM does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// A physical GPU seen on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceFact {
    /// Node (hostname).
    pub node: String,
    /// `GPU-…` UUID.
    pub gpu_uuid: String,
    /// Model name as the driver reports it.
    pub model: String,
    /// Index on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// Framebuffer memory, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// MIG mode enabled.
    #[serde(default)]
    pub mig_enabled: bool,
    /// MIG instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<MigDeviceFact>,
    /// A vGPU guest (the device is a virtual function inside a VM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vgpu_profile: Option<String>,
}

/// Which container holds which devices (kubelet pod-resources).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceAssignment {
    /// Node.
    pub node: String,
    /// Pod UID (from a process's cgroup; kubelet's pod-resources API names pods instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<Uuid>,
    /// Pod namespace, when known by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<String>,
    /// Pod name, when known by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// Container.
    pub container: String,
    /// Resource name.
    pub resource: String,
    /// Device IDs as kubelet reports them (GPU or MIG UUIDs, possibly with a `::N` replica suffix).
    pub device_ids: Vec<String>,
    /// When the assignment was observed. Written `assigned_at` on the wire: the enclosing [`Fact`] already has an
    /// `observed_at` key, and a flattened duplicate would make the fact unreadable (e.g. from the agent's spool).
    #[serde(rename = "assigned_at", with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub observed_at: OffsetDateTime,
}

impl Fact {
    /// The time range the fact is about — its own times, not when it was observed: an allocation's start or end,
    /// a measured window, a counter's reading; for inventory facts (nodes, devices, assignments), when observed.
    pub fn own_times(&self) -> (OffsetDateTime, OffsetDateTime) {
        let at = |t: OffsetDateTime| (t, t);
        match &self.body {
            FactBody::AllocationStarted(s) => at(s.started_at),
            FactBody::AllocationEnded(e) => at(e.ended_at),
            FactBody::AllocationVanished(v) => at(v.last_seen_at),
            FactBody::NamespaceObserved(n) => at(n.labels_since),
            FactBody::Telemetry(t) => (t.window_start, t.window_end),
            FactBody::ProcessTelemetry(t) => (t.window_start, t.window_end),
            FactBody::Gap(g) => (g.from, g.to),
            FactBody::GapRecovered(_) => at(self.observed_at),
            FactBody::QuotaObserved(q) => at(q.since),
            FactBody::ServiceUsage(u) => (u.window_start, u.window_end),
            FactBody::EndpointTotals(t) => (t.window_start, t.window_end),
            FactBody::TrainingProgress(t) => at(t.reported_at),
            FactBody::DeviceFault(f) => at(f.occurred_at),
            FactBody::NodeObserved(_) | FactBody::DeviceObserved(_) | FactBody::DeviceAssigned(_) => {
                at(self.observed_at)
            }
        }
    }
}

/// The server's answer to a batch: sent only after the facts are durably committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BatchAck {
    /// Facts in the batch.
    pub received: u64,
    /// Facts newly stored (the rest were duplicates).
    pub stored: u64,
    /// Facts kept but flagged (e.g. a profile missing from the inventory).
    #[serde(default)]
    pub flagged: Vec<FlaggedFact>,
}

/// A fact that was stored with a data-quality flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FlaggedFact {
    /// Its event ID.
    pub event_id: String,
    /// What is wrong.
    pub reason: String,
}

/// Builds a deterministic event ID from the transition and the identifiers it concerns, e.g.
/// `event_id("alloc-start", &[pod_uid, "main", "nvidia.com/gpu"])` → `alloc-start/<uid>/main/nvidia.com/gpu`.
///
/// IDs longer than [`EVENT_ID_MAX`] (e.g. an assignment of eight GPUs, each UUID named) keep their first 200
/// bytes and end in `~` and the SHA-256 of the whole ID: still deterministic, still unique, and within what the
/// server stores.
pub fn event_id(transition: &str, parts: &[&str]) -> String {
    let mut id = String::from(transition);
    for p in parts {
        id.push('/');
        id.push_str(p);
    }
    if id.len() > EVENT_ID_MAX {
        let digest = crate::bundle::sha256_hex(id.as_bytes());
        let mut cut = 200;
        while !id.is_char_boundary(cut) {
            cut -= 1;
        }
        id.truncate(cut);
        id.push('~');
        id.push_str(&digest);
    }
    id
}

/// Longest event ID kept as is (the server accepts up to 300 bytes).
pub const EVENT_ID_MAX: usize = 280;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn long_event_ids_are_hashed_deterministically() {
        let gpus: Vec<String> = (0..8).map(|i| format!("GPU-{i:08}-c431-40bb-a36a-eaad3b097bcc")).collect();
        let joined = gpus.join(",");
        let a = event_id("device-assigned", &["node", "ns", "pod", "main", "nvidia.com/gpu", &joined]);
        assert!(a.len() <= 300, "{}", a.len());
        assert_eq!(a, event_id("device-assigned", &["node", "ns", "pod", "main", "nvidia.com/gpu", &joined]));
        let other = gpus[..7].join(",");
        assert_ne!(a, event_id("device-assigned", &["node", "ns", "pod", "main", "nvidia.com/gpu", &other]));
        assert_eq!(event_id("x", &["y"]), "x/y");
    }

    #[test]
    fn a_device_assignment_round_trips_through_json() {
        let at = time::macros::datetime!(2026-11-01 10:00 UTC);
        let fact = Fact {
            event_id: "assign/x".into(),
            observed_at: at,
            body: FactBody::DeviceAssigned(DeviceAssignment {
                node: "n1".into(),
                pod_uid: None,
                pod_namespace: Some("ml".into()),
                pod_name: Some("p".into()),
                container: "main".into(),
                resource: "nvidia.com/gpu".into(),
                device_ids: vec!["GPU-1".into()],
                observed_at: at,
            }),
        };
        let json = serde_json::to_string(&fact).unwrap();
        assert_eq!(json.matches("\"observed_at\"").count(), 1, "{json}");
        assert_eq!(serde_json::from_str::<Fact>(&json).unwrap(), fact);
    }
    use time::macros::datetime;

    #[test]
    fn facts_round_trip_with_a_kind_tag() {
        let fact = Fact {
            event_id: event_id("alloc-end", &["p1", "main", "nvidia.com/gpu"]),
            observed_at: datetime!(2026-11-01 10:00 UTC),
            body: FactBody::AllocationEnded(AllocationEnd {
                allocation_id: "p1/main/nvidia.com/gpu".into(),
                ended_at: datetime!(2026-11-01 09:59:30 UTC),
                reason: EndReason::Finished,
            }),
        };
        let json = serde_json::to_value(&fact).unwrap();
        assert_eq!(json["kind"], "allocation_ended");
        assert_eq!(json["event_id"], "alloc-end/p1/main/nvidia.com/gpu");
        assert_eq!(json["ended_at"], "2026-11-01T09:59:30Z");
        let back: Fact = serde_json::from_value(json).unwrap();
        assert_eq!(back, fact);
        assert_eq!(back.body.kind(), "allocation_ended");
    }

    #[test]
    fn unknown_kind_is_refused() {
        let err =
            serde_json::from_str::<Fact>(r#"{"event_id":"x","observed_at":"2026-11-01T00:00:00Z","kind":"teleport"}"#)
                .unwrap_err();
        assert!(err.to_string().contains("teleport"), "{err}");
    }
}
