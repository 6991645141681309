//! Kubernetes objects → allocation facts. The same code serves the live `cluster` mode and `inspect`.
//!
//! Objects are read through small serde views of the fields we need (not the full OpenAPI types), so any
//! source — a watch event, `kubectl get -o json`, a YAML manifest — goes through one path.

use std::collections::BTreeMap;

use gpuledger_core::{
    ids::{MigProfile, VgpuProfile},
    sharing::SharingMode,
    wire::{
        AllocationEnd, AllocationStart, AttributionLabels, EndReason, Fact, FactBody, Holder, NamespaceFact, NodeFact,
        event_id,
    },
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};
use uuid::Uuid;

/// Why an object could not be read.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// The object lacks a field we need or has a malformed one.
    #[error("{kind} {name}: {field}: {reason}")]
    Invalid {
        /// Object kind.
        kind: String,
        /// Object name (or `?`).
        name: String,
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// Which labels (or annotations) carry attribution. Defaults are documented in `docs/agent.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelKeys {
    /// Tenant.
    pub tenant: Vec<String>,
    /// Department.
    pub department: Vec<String>,
    /// AI agent session.
    pub agent_session: Vec<String>,
    /// Model-serving endpoint.
    pub endpoint: Vec<String>,
    /// Model.
    pub model: Vec<String>,
}

impl Default for LabelKeys {
    fn default() -> Self {
        Self {
            tenant: vec!["gpuledger.io/tenant".into()],
            department: vec!["gpuledger.io/department".into()],
            agent_session: vec!["gpuledger.io/agent-session".into()],
            endpoint: vec!["gpuledger.io/endpoint".into()],
            model: vec!["gpuledger.io/model".into()],
        }
    }
}

impl LabelKeys {
    fn read(&self, meta: &Meta) -> AttributionLabels {
        let find = |keys: &[String]| {
            keys.iter()
                .find_map(|k| meta.labels.get(k).or_else(|| meta.annotations.get(k)).filter(|v| !v.is_empty()))
                .cloned()
        };
        AttributionLabels {
            tenant: find(&self.tenant),
            department: find(&self.department),
            agent_session: find(&self.agent_session),
            endpoint: find(&self.endpoint),
            model: find(&self.model),
        }
    }
}

/// `metadata`, the parts we read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    /// Name.
    pub name: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// UID.
    pub uid: Option<String>,
    /// Resource version (changes with every update).
    pub resource_version: Option<String>,
    /// Creation time.
    pub creation_timestamp: Option<String>,
    /// Deletion request time.
    pub deletion_timestamp: Option<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PodSpec {
    containers: Vec<Container>,
    node_name: Option<String>,
    node_selector: BTreeMap<String, String>,
    resource_claims: Vec<PodClaim>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Container {
    name: String,
    resources: Resources,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Resources {
    limits: BTreeMap<String, Value>,
    requests: BTreeMap<String, Value>,
    /// DRA: the pod-level claims this container uses.
    claims: Vec<NamedRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct NamedRef {
    name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PodClaim {
    name: String,
    resource_claim_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PodStatus {
    phase: Option<String>,
    start_time: Option<String>,
    container_statuses: Vec<ContainerStatus>,
    /// DRA: claims generated from templates, by pod-level claim name.
    resource_claim_statuses: Vec<PodClaim>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ContainerStatus {
    name: String,
    state: ContainerState,
    last_state: ContainerState,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct ContainerState {
    running: Option<StateTimes>,
    terminated: Option<StateTimes>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct StateTimes {
    started_at: Option<String>,
    finished_at: Option<String>,
}

/// A pod as we read it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Pod {
    /// Metadata.
    pub metadata: Meta,
    spec: PodSpec,
    status: Option<PodStatus>,
}

/// How a node's device plugin shares GPUs, from its labels (GPU Feature Discovery) or configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSharing {
    /// `nvidia.com/gpu.product`, MIG suffix removed.
    pub gpu_model: Option<String>,
    /// MIG single strategy: the profile every `nvidia.com/gpu` on this node is.
    pub single_mig_profile: Option<String>,
    /// Time-slicing replicas per GPU (`nvidia.com/gpu.replicas` > 1, or a configured policy).
    pub timeslice_replicas: Option<u32>,
}

impl NodeSharing {
    /// Reads a node's sharing from its labels.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        let product = labels.get("nvidia.com/gpu.product").cloned();
        let (gpu_model, single_mig_profile) = match product {
            Some(p) => match p.split_once("-MIG-") {
                Some((model, profile)) => (Some(model.to_string()), Some(profile.to_string())),
                None => (Some(p), None),
            },
            None => (None, None),
        };
        let replicas = labels.get("nvidia.com/gpu.replicas").and_then(|r| r.parse::<u32>().ok()).filter(|r| *r > 1);
        let time_slicing = labels.get("nvidia.com/gpu.sharing-strategy").is_some_and(|s| s == "time-slicing");
        let timeslice_replicas = match (replicas, time_slicing) {
            (Some(r), _) => Some(r),
            (None, _) => None,
        };
        Self { gpu_model, single_mig_profile, timeslice_replicas }
    }
}

/// One GPU request of one container, classified.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRequest {
    /// Container name.
    pub container: String,
    /// Extended resource (or annotation) it came from.
    pub resource: String,
    /// Units requested.
    pub units: u32,
    /// Sharing mode.
    pub mode: SharingMode,
    /// Physical or MIG device IDs, when the object says (Run:ai annotations).
    pub device_ids: Vec<String>,
}

fn quantity_units(v: &Value) -> Option<u32> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Classifies one extended resource. `None`: not a GPU resource.
fn classify(resource: &str, node: &NodeSharing, default_replicas: Option<u32>) -> Option<Result<SharingMode, String>> {
    let replicas = || node.timeslice_replicas.or(default_replicas);
    if resource == "nvidia.com/gpu" {
        if let Some(profile) = &node.single_mig_profile {
            return Some(
                MigProfile::new(profile.clone()).map(|profile| SharingMode::Mig { profile }).map_err(|e| e.to_string()),
            );
        }
        return Some(Ok(match replicas() {
            Some(replicas) => SharingMode::TimeSlice { replicas },
            None => SharingMode::Exclusive,
        }));
    }
    if resource == "nvidia.com/gpu.shared" {
        return Some(match replicas() {
            Some(replicas) => Ok(SharingMode::TimeSlice { replicas }),
            None => Err("nvidia.com/gpu.shared on a node without a declared replica count (label \
                         nvidia.com/gpu.replicas or --timeslice-replicas)"
                .into()),
        });
    }
    if let Some(profile) = resource.strip_prefix("nvidia.com/mig-") {
        let profile = profile.trim_end_matches(".shared");
        return Some(MigProfile::new(profile).map(|profile| SharingMode::Mig { profile }).map_err(|e| e.to_string()));
    }
    None
}

impl Pod {
    /// Parses a pod from JSON.
    pub fn from_value(v: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(v)
    }

    /// The node's sharing as the pod itself reveals it (a MIG single-strategy node selector), for when the node
    /// object is not at hand.
    pub fn implied_sharing(&self) -> NodeSharing {
        NodeSharing::from_labels(&self.spec.node_selector)
    }

    /// The node the pod is bound to.
    pub fn node_name(&self) -> Option<&str> {
        self.spec.node_name.as_deref()
    }

    /// Its GPU requests, classified against the node's sharing.
    pub fn gpu_requests(&self, node: &NodeSharing, default_replicas: Option<u32>) -> (Vec<GpuRequest>, Vec<String>) {
        let mut out = Vec::new();
        let mut problems = Vec::new();
        for c in &self.spec.containers {
            // Extended resources: limits are required and requests, when given, must equal them.
            let mut resources = c.resources.requests.clone();
            resources.extend(c.resources.limits.clone());
            for (resource, qty) in resources {
                let Some(mode) = classify(&resource, node, default_replicas) else {
                    continue;
                };
                let units = quantity_units(&qty).unwrap_or(0);
                if units == 0 {
                    continue;
                }
                match mode {
                    Ok(mode) => {
                        out.push(GpuRequest { container: c.name.clone(), resource, units, mode, device_ids: vec![] })
                    }
                    Err(reason) => problems.push(format!("container {}: {resource}: {reason}", c.name)),
                }
            }
        }
        // Run:ai expresses MIG and fractions in annotations rather than container resources.
        if out.is_empty() {
            let ann = &self.metadata.annotations;
            let first = self.spec.containers.first().map(|c| c.name.clone()).unwrap_or_default();
            for (key, value) in ann.iter().filter(|(k, _)| k.starts_with("nvidia.com/mig-")) {
                let units = value.trim().parse::<u32>().unwrap_or(0);
                if let (Some(Ok(mode)), true) = (classify(key, node, None), units > 0) {
                    let device_ids = ann
                        .get("runai-mig-device")
                        .and_then(|j| serde_json::from_str::<Value>(j).ok())
                        .and_then(|j| j.get("instanceid").and_then(Value::as_str).map(str::to_string))
                        .into_iter()
                        .collect();
                    out.push(GpuRequest { container: first.clone(), resource: key.clone(), units, mode, device_ids });
                }
            }
            if let Some(fraction) = ann.get("gpu-fraction").and_then(|f| f.trim().parse::<f64>().ok()) {
                // A declared fraction 1/N is one replica of N; other fractions cannot be expressed exactly.
                let n = (1.0 / fraction).round();
                if fraction > 0.0 && fraction <= 1.0 && ((1.0 / fraction) - n).abs() < 1e-9 {
                    out.push(GpuRequest {
                        container: first,
                        resource: "gpu-fraction".into(),
                        units: 1,
                        mode: SharingMode::TimeSlice { replicas: n as u32 },
                        device_ids: vec![],
                    });
                } else {
                    problems.push(format!("gpu-fraction {fraction} is not 1/N; not expressible as a replica"));
                }
            }
        }
        (out, problems)
    }

    /// When the pod's containers started holding devices: the earliest container start, else `status.startTime`.
    fn container_start(&self, container: &str) -> Option<OffsetDateTime> {
        let status = self.status.as_ref()?;
        let cs = status.container_statuses.iter().find(|c| c.name == container);
        let starts = cs.into_iter().flat_map(|c| {
            [&c.state.running, &c.state.terminated, &c.last_state.terminated]
                .into_iter()
                .flatten()
                .filter_map(|t| t.started_at.as_deref().and_then(parse_time))
        });
        starts.min().or_else(|| status.start_time.as_deref().and_then(parse_time))
    }

    /// When the container stopped holding devices, and why; `None` while it runs.
    fn container_end(&self, container: &str) -> Option<(OffsetDateTime, EndReason)> {
        let status = self.status.as_ref();
        let terminated = status
            .and_then(|s| s.container_statuses.iter().find(|c| c.name == container))
            .and_then(|c| c.state.terminated.as_ref())
            .and_then(|t| t.finished_at.as_deref().and_then(parse_time));
        let pod_done = status.and_then(|s| s.phase.as_deref()).is_some_and(|p| p == "Succeeded" || p == "Failed");
        match (terminated, self.metadata.deletion_timestamp.as_deref().and_then(parse_time)) {
            (Some(t), _) if pod_done || self.metadata.deletion_timestamp.is_some() => Some((t, EndReason::Finished)),
            (Some(t), None) => Some((t, EndReason::Finished)),
            (None, Some(deleted)) => Some((deleted, EndReason::Deleted)),
            (Some(t), Some(_)) => Some((t, EndReason::Finished)),
            (None, None) => None,
        }
    }
}

/// Parses an RFC 3339 timestamp as UTC.
pub fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok().map(|t| t.to_offset(time::UtcOffset::UTC))
}

fn required_uid(meta: &Meta, kind: &str) -> Result<Uuid, K8sError> {
    let name = meta.name.clone().unwrap_or_else(|| "?".into());
    let raw = meta.uid.as_deref().ok_or_else(|| K8sError::Invalid {
        kind: kind.into(),
        name: name.clone(),
        field: "metadata.uid".into(),
        reason: "missing".into(),
    })?;
    Uuid::parse_str(raw).map_err(|e| K8sError::Invalid {
        kind: kind.into(),
        name,
        field: "metadata.uid".into(),
        reason: e.to_string(),
    })
}

/// Context the cluster watcher knows beyond the pod itself.
#[derive(Debug, Clone, Default)]
pub struct PodContext {
    /// The pod's node, as read from the Node object.
    pub node: Option<NodeSharing>,
    /// UID of the pod's namespace.
    pub namespace_uid: Option<Uuid>,
    /// Declared replicas for time-sliced GPUs when the node does not say.
    pub default_replicas: Option<u32>,
    /// DRA: allocated devices of the ResourceClaims in the pod's namespace, by claim name.
    pub claims: BTreeMap<String, Vec<ClaimDevice>>,
}

/// One device a DRA ResourceClaim was allocated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimDevice {
    /// The request it satisfies.
    pub request: String,
    /// DRA driver, e.g. `gpu.nvidia.com`.
    pub driver: String,
    /// Pool (usually the node).
    pub pool: String,
    /// Device name within the pool, e.g. `gpu-0` or `gpu-0-mig-1g.10gb-0`.
    pub device: String,
}

/// A ResourceClaim's namespace, name, allocated NVIDIA devices, and the pods it is reserved for.
pub fn claim_devices(v: &Value) -> Option<(String, String, Vec<ClaimDevice>, Vec<Uuid>)> {
    let namespace = v["metadata"]["namespace"].as_str()?.to_string();
    let name = v["metadata"]["name"].as_str()?.to_string();
    let devices = v["status"]["allocation"]["devices"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some(ClaimDevice {
                request: r["request"].as_str().unwrap_or_default().to_string(),
                driver: r["driver"].as_str()?.to_string(),
                pool: r["pool"].as_str().unwrap_or_default().to_string(),
                device: r["device"].as_str()?.to_string(),
            })
        })
        .filter(|d| d.driver.ends_with("nvidia.com"))
        .collect();
    let reserved = v["status"]["reservedFor"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["resource"].as_str() == Some("pods"))
        .filter_map(|r| r["uid"].as_str().and_then(|u| Uuid::parse_str(u).ok()))
        .collect();
    Some((namespace, name, devices, reserved))
}

/// A DRA device's sharing mode: a MIG device names its profile (`…-mig-1g.10gb-…`); otherwise a whole GPU.
fn dra_mode(device: &ClaimDevice) -> SharingMode {
    device
        .device
        .split('-')
        .find_map(|part| MigProfile::new(part).ok().filter(|_| device.device.contains("mig")))
        .map_or(SharingMode::Exclusive, |profile| SharingMode::Mig { profile })
}

impl Pod {
    /// Names of the ResourceClaims this pod uses (direct, or generated from a template).
    pub fn claim_names(&self) -> Vec<String> {
        let generated = self.status.as_ref().map(|s| s.resource_claim_statuses.clone()).unwrap_or_default();
        self.spec.resource_claims.iter().chain(generated.iter()).filter_map(|c| c.resource_claim_name.clone()).collect()
    }

    /// GPU requests satisfied by DRA claims.
    fn dra_requests(&self, claims: &BTreeMap<String, Vec<ClaimDevice>>) -> Vec<GpuRequest> {
        let generated = self.status.as_ref().map(|s| s.resource_claim_statuses.clone()).unwrap_or_default();
        let actual = |pod_claim: &str| {
            generated
                .iter()
                .chain(self.spec.resource_claims.iter())
                .find(|c| c.name == pod_claim && c.resource_claim_name.is_some())
                .and_then(|c| c.resource_claim_name.clone())
        };
        let mut out = Vec::new();
        for c in &self.spec.containers {
            for used in &c.resources.claims {
                let Some(claim) = actual(&used.name) else { continue };
                for d in claims.get(&claim).into_iter().flatten() {
                    out.push(GpuRequest {
                        container: c.name.clone(),
                        resource: format!("dra:{claim}/{}/{}", d.driver, d.device),
                        units: 1,
                        mode: dra_mode(d),
                        device_ids: vec![format!("{}/{}", d.pool, d.device)],
                    });
                }
            }
        }
        out
    }
}

/// The facts a pod yields: a start for every GPU request of a started container, an end for every finished one.
/// Problems (unclassifiable requests) come back beside the facts; nothing is dropped silently.
pub fn pod_facts(
    pod: &Pod,
    ctx: &PodContext,
    keys: &LabelKeys,
    observed_at: OffsetDateTime,
) -> Result<(Vec<Fact>, Vec<String>), K8sError> {
    let uid = required_uid(&pod.metadata, "Pod")?;
    let sharing = ctx.node.clone().unwrap_or_else(|| pod.implied_sharing());
    let (mut requests, problems) = pod.gpu_requests(&sharing, ctx.default_replicas);
    requests.extend(pod.dra_requests(&ctx.claims));
    let labels = keys.read(&pod.metadata);
    let mut facts = Vec::new();
    for r in requests {
        let Some(started_at) = pod.container_start(&r.container) else {
            continue;
        };
        let allocation_id = format!("{uid}/{}/{}", r.container, r.resource);
        facts.push(Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Pod,
                holder_uid: uid,
                holder_name: pod.metadata.name.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
                namespace_uid: ctx.namespace_uid,
                container: Some(r.container.clone()),
                node: pod.spec.node_name.clone(),
                resource: r.resource.clone(),
                units: r.units,
                mode: r.mode.clone(),
                gpu_model: sharing.gpu_model.clone(),
                device_ids: r.device_ids.clone(),
                started_at,
                labels: labels.clone(),
            }),
        });
        if let Some((ended_at, reason)) = pod.container_end(&r.container) {
            facts.push(Fact {
                event_id: event_id("alloc-end", &[&allocation_id]),
                observed_at,
                body: FactBody::AllocationEnded(AllocationEnd {
                    allocation_id,
                    ended_at: ended_at.max(started_at),
                    reason,
                }),
            });
        }
    }
    Ok((facts, problems))
}

/// A node's sharing configuration as a fact.
pub fn node_fact(v: &Value, observed_at: OffsetDateTime) -> Result<Option<Fact>, K8sError> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct NodeObj {
        metadata: Meta,
        status: NodeStatus,
    }
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct NodeStatus {
        allocatable: BTreeMap<String, Value>,
    }
    let node: NodeObj = serde_json::from_value(v.clone()).map_err(|e| invalid("Node", "?", "", e))?;
    let uid = required_uid(&node.metadata, "Node")?;
    let labels = &node.metadata.labels;
    let allocatable: BTreeMap<String, u32> = node
        .status
        .allocatable
        .iter()
        .filter(|(k, _)| k.starts_with("nvidia.com/"))
        .filter_map(|(k, v)| quantity_units(v).map(|n| (k.clone(), n)))
        .collect();
    if allocatable.is_empty() && !labels.keys().any(|k| k.starts_with("nvidia.com/gpu")) {
        return Ok(None); // not a GPU node
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let sharing = NodeSharing::from_labels(labels);
    let body = NodeFact {
        name: name.clone(),
        node_uid: uid,
        gpu_product: labels.get("nvidia.com/gpu.product").cloned(),
        gpu_count: labels.get("nvidia.com/gpu.count").and_then(|c| c.parse().ok()),
        gpu_memory_mib: labels.get("nvidia.com/gpu.memory").and_then(|c| c.parse().ok()),
        mig_strategy: labels.get("nvidia.com/mig.strategy").cloned(),
        sharing_strategy: labels.get("nvidia.com/gpu.sharing-strategy").cloned(),
        replicas: sharing.timeslice_replicas,
        allocatable,
    };
    let rv = node.metadata.resource_version.clone().unwrap_or_default();
    Ok(Some(Fact {
        event_id: event_id("node", &[&uid.to_string(), &rv]),
        observed_at,
        body: FactBody::NodeObserved(body),
    }))
}

/// A namespace and its owner labels as a fact. `labels_since`: when these labels were first seen (the creation
/// time on first sight, the observation time of a change).
pub fn namespace_fact(
    v: &Value,
    keys: &LabelKeys,
    labels_since: Option<OffsetDateTime>,
    observed_at: OffsetDateTime,
) -> Result<Fact, K8sError> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct NsObj {
        metadata: Meta,
    }
    let ns: NsObj = serde_json::from_value(v.clone()).map_err(|e| invalid("Namespace", "?", "", e))?;
    let uid = required_uid(&ns.metadata, "Namespace")?;
    let name = ns.metadata.name.clone().unwrap_or_default();
    let created_at =
        ns.metadata.creation_timestamp.as_deref().and_then(parse_time).ok_or_else(|| K8sError::Invalid {
            kind: "Namespace".into(),
            name: name.clone(),
            field: "metadata.creationTimestamp".into(),
            reason: "missing or not RFC 3339".into(),
        })?;
    let labels = keys.read(&ns.metadata);
    let owner = format!("{}|{}", labels.tenant.as_deref().unwrap_or("-"), labels.department.as_deref().unwrap_or("-"));
    let since = labels_since.unwrap_or(created_at).max(created_at);
    Ok(Fact {
        event_id: event_id("namespace", &[&uid.to_string(), &owner, &since.unix_timestamp().to_string()]),
        observed_at,
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name,
            created_at,
            deleted_at: ns.metadata.deletion_timestamp.as_deref().and_then(parse_time),
            labels,
            labels_since: since,
        }),
    })
}

/// A KubeVirt VirtualMachineInstance's GPUs: vGPU profiles (`gpus[].deviceName` naming a mediated device) and
/// passthrough devices (`gpus[]` naming a PCI device, or `hostDevices[]` of NVIDIA).
pub fn vmi_requests(v: &Value) -> Vec<GpuRequest> {
    let devices = &v["spec"]["domain"]["devices"];
    let mut out = Vec::new();
    for (list, from_gpus) in [("gpus", true), ("hostDevices", false)] {
        for d in devices[list].as_array().into_iter().flatten() {
            let Some(device) = d["deviceName"].as_str() else {
                continue;
            };
            let Some(short) = device.strip_prefix("nvidia.com/") else {
                continue;
            };
            let name = d["name"].as_str().unwrap_or(short).to_string();
            let mode = if from_gpus && is_vgpu_profile(short) {
                match VgpuProfile::new(short) {
                    Ok(profile) => SharingMode::Vgpu { profile },
                    Err(_) => continue,
                }
            } else {
                SharingMode::Passthrough
            };
            out.push(GpuRequest { container: name, resource: device.to_string(), units: 1, mode, device_ids: vec![] });
        }
    }
    out
}

/// vGPU (mediated device) type names end in `-<framebuffer GB><series letter>` (e.g. `GRID_T4-1Q`,
/// `NVIDIA_A100-4C`); PCI passthrough names are device names (e.g. `TU104GL_Tesla_T4`).
fn is_vgpu_profile(name: &str) -> bool {
    let Some((_, suffix)) = name.rsplit_once('-') else {
        return false;
    };
    let (digits, letter) = suffix.split_at(suffix.len().saturating_sub(1));
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && matches!(letter, "A" | "B" | "C" | "Q")
        && (name.starts_with("GRID") || name.starts_with("NVIDIA"))
}

/// A running VMI's facts: one allocation per GPU device, from `Running` to its end.
pub fn vmi_facts(v: &Value, keys: &LabelKeys, observed_at: OffsetDateTime) -> Result<Vec<Fact>, K8sError> {
    let meta: Meta = serde_json::from_value(v["metadata"].clone()).unwrap_or_default();
    let requests = vmi_requests(v);
    if requests.is_empty() {
        return Ok(vec![]);
    }
    let transitions: BTreeMap<String, OffsetDateTime> = v["status"]["phaseTransitionTimestamps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["phase"].as_str()?.to_string(), parse_time(t["phaseTransitionTimestamp"].as_str()?)?)))
        .collect();
    let Some(started_at) = transitions.get("Running").copied() else {
        return Ok(vec![]);
    };
    let uid = required_uid(&meta, "VirtualMachineInstance")?;
    let end = transitions
        .get("Succeeded")
        .or_else(|| transitions.get("Failed"))
        .map(|t| (*t, EndReason::Finished))
        .or_else(|| meta.deletion_timestamp.as_deref().and_then(parse_time).map(|t| (t, EndReason::Deleted)));
    let mut facts = Vec::new();
    for r in requests {
        let allocation_id = format!("vmi:{uid}/{}/{}", r.container, r.resource);
        facts.push(Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Vmi,
                holder_uid: uid,
                holder_name: meta.name.clone().unwrap_or_default(),
                namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
                namespace_uid: None,
                container: Some(r.container),
                node: v["status"]["nodeName"].as_str().map(str::to_string),
                resource: r.resource,
                units: 1,
                mode: r.mode,
                gpu_model: None,
                device_ids: vec![],
                started_at,
                labels: keys.read(&meta),
            }),
        });
        if let Some((ended_at, reason)) = end {
            facts.push(Fact {
                event_id: event_id("alloc-end", &[&allocation_id]),
                observed_at,
                body: FactBody::AllocationEnded(AllocationEnd {
                    allocation_id,
                    ended_at: ended_at.max(started_at),
                    reason,
                }),
            });
        }
    }
    Ok(facts)
}

fn invalid(kind: &str, name: &str, field: &str, e: impl std::fmt::Display) -> K8sError {
    K8sError::Invalid { kind: kind.into(), name: name.into(), field: field.into(), reason: e.to_string() }
}

/// The pod template of a workload object (Deployment, Job, …), for previews.
pub fn pod_template(v: &Value) -> Option<Pod> {
    let template = match v["kind"].as_str()? {
        "CronJob" => &v["spec"]["jobTemplate"]["spec"]["template"],
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => &v["spec"]["template"],
        _ => return None,
    };
    serde_json::from_value(template.clone()).ok()
}

/// A Kueue ClusterQueue's GPU quotas as a fact (`nvidia.com/*` resources only). `since`: when these quotas were
/// first seen to hold (creation on first sight).
pub fn cluster_queue_fact(
    v: &Value,
    since: Option<OffsetDateTime>,
    observed_at: OffsetDateTime,
) -> Result<Option<Fact>, K8sError> {
    use gpuledger_core::wire::{QuotaEntry, QuotaFact};
    let meta: Meta = serde_json::from_value(v["metadata"].clone()).unwrap_or_default();
    let uid = required_uid(&meta, "ClusterQueue")?;
    let name = meta.name.clone().unwrap_or_default();
    let mut quotas = Vec::new();
    for group in v["spec"]["resourceGroups"].as_array().into_iter().flatten() {
        for flavor in group["flavors"].as_array().into_iter().flatten() {
            let flavor_name = flavor["name"].as_str().unwrap_or("default").to_string();
            for r in flavor["resources"].as_array().into_iter().flatten() {
                let Some(resource) = r["name"].as_str().filter(|n| n.starts_with("nvidia.com/")) else { continue };
                let Some(nominal) = quantity_units(&r["nominalQuota"]) else {
                    return Err(invalid("ClusterQueue", &name, "nominalQuota", "not a whole number of units"));
                };
                quotas.push(QuotaEntry {
                    flavor: flavor_name.clone(),
                    resource: resource.to_string(),
                    nominal,
                    borrowing_limit: quantity_units(&r["borrowingLimit"]),
                });
            }
        }
    }
    if quotas.is_empty() {
        return Ok(None);
    }
    let created = meta.creation_timestamp.as_deref().and_then(parse_time);
    let since = since.or(created).unwrap_or(observed_at);
    let content = serde_json::to_string(&quotas).unwrap_or_default();
    let digest = crc32fast::hash(content.as_bytes());
    Ok(Some(Fact {
        event_id: event_id(
            "clusterqueue",
            &[&uid.to_string(), &format!("{digest:08x}"), &since.unix_timestamp().to_string()],
        ),
        observed_at,
        body: FactBody::QuotaObserved(QuotaFact {
            cluster_queue: name,
            uid,
            cohort: v["spec"]["cohort"].as_str().map(str::to_string),
            quotas,
            since,
        }),
    }))
}
