//! Kubernetes objects → allocation facts. The same code serves the live `cluster` mode and `inspect`.
//!
//! Objects are read through small serde views of the fields we need (not the full OpenAPI types), so any
//! source — a watch event, `kubectl get -o json`, a YAML manifest — goes through one path.

use std::collections::BTreeMap;

use gpuledger_core::{sharing::SharingMode, wire::AttributionLabels};
use serde::Deserialize;
use serde_json::Value;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};
use uuid::Uuid;

mod objects;
mod pod;
mod watched;

pub use objects::{cluster_queue_fact, namespace_fact, node_fact, pod_template, vmi_facts, vmi_requests};
pub use pod::{ClaimDevice, PodContext, claim_devices, pod_facts};
pub use watched::{
    WatchedContainer, WatchedContainerStatus, WatchedNode, WatchedNodeStatus, WatchedPod, WatchedPodSpec,
    WatchedPodStatus,
};

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

fn invalid(kind: &str, name: &str, field: &str, e: impl std::fmt::Display) -> K8sError {
    K8sError::Invalid { kind: kind.into(), name: name.into(), field: field.into(), reason: e.to_string() }
}
