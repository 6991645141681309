//! The Pods and Nodes the `cluster` watcher receives, read down to the fields the agent uses.
//!
//! kube-rs deserializes every object of a list page before handing the first one out, so what one object weighs
//! once read, times the page size, is what a (re-)list holds. A full `k8s_openapi` Pod is tens of kilobytes in
//! memory (every container's environment, volume mounts, probes and security context, every volume, condition and
//! managed-fields entry); these types keep only what classification, attribution, scraping and training progress
//! read — everything else in the JSON is skipped while parsing, never allocated. The kept fields have the same
//! types as in `k8s_openapi`, so they serialize exactly as the full object's do and the facts are the same.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{ContainerState, PodResourceClaim, PodResourceClaimStatus, ResourceRequirements},
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{ObjectMeta, Time},
    },
};
use serde::{Deserialize, Deserializer, Serialize};

/// `metadata`, without what the agent never reads (managed fields, owner references, finalizers…).
fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kept {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        uid: Option<String>,
        #[serde(default)]
        resource_version: Option<String>,
        #[serde(default)]
        creation_timestamp: Option<Time>,
        #[serde(default)]
        deletion_timestamp: Option<Time>,
        #[serde(default)]
        labels: Option<BTreeMap<String, String>>,
        #[serde(default)]
        annotations: Option<BTreeMap<String, String>>,
    }
    let k = Kept::deserialize(d)?;
    Ok(ObjectMeta {
        name: k.name,
        namespace: k.namespace,
        uid: k.uid,
        resource_version: k.resource_version,
        creation_timestamp: k.creation_timestamp,
        deletion_timestamp: k.deletion_timestamp,
        labels: k.labels,
        annotations: k.annotations,
        ..ObjectMeta::default()
    })
}

/// A Pod as the watcher keeps it.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct WatchedPod {
    /// Name, namespace, UID, resource version, creation and deletion times, labels, annotations.
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// The parts of the spec the agent reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<WatchedPodSpec>,
    /// The parts of the status the agent reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WatchedPodStatus>,
}

/// `spec`: containers' names and resources, the node, its selector, DRA claims.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchedPodSpec {
    /// Containers (init containers hold no allocation the agent reports).
    #[serde(default)]
    pub containers: Vec<WatchedContainer>,
    /// The node the pod is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Node selector (a MIG single-strategy product label reveals the profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// DRA: the pod's resource claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<PodResourceClaim>>,
}

/// A container: its name and resources.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct WatchedContainer {
    /// Name.
    pub name: String,
    /// Limits, requests and DRA claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// `status`: phase, start, pod IP, container states, DRA claim names.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchedPodStatus {
    /// Phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the kubelet accepted the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// The pod's IP (model-server scraping).
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// Each container's state and last state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<WatchedContainerStatus>>,
    /// DRA: claims generated from templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
}

/// A container's status: its state and last state.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchedContainerStatus {
    /// Container name.
    pub name: String,
    /// Now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
    /// Before the last restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ContainerState>,
}

impl k8s_openapi::Resource for WatchedPod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for WatchedPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A Node as the watcher keeps it: metadata (labels say how GPUs are shared) and allocatable resources — not its
/// images, addresses, conditions or system information.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct WatchedNode {
    /// Name, UID, resource version, labels, annotations.
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// Allocatable resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WatchedNodeStatus>,
}

/// A node's `status`: allocatable resources.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct WatchedNodeStatus {
    /// Allocatable resources (`nvidia.com/*` extended resources among them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<BTreeMap<String, Quantity>>,
}

impl k8s_openapi::Resource for WatchedNode {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Node";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "nodes";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for WatchedNode {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::path::PathBuf;

    use serde_json::Value;
    use time::macros::datetime;

    use super::*;
    use crate::{cluster::Deriver, inspect::read_documents};

    fn fixtures() -> Vec<Value> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/k8s");
        let mut docs = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            docs.extend(read_documents(&text).unwrap());
        }
        docs
    }

    /// Every fixture pod, on every fixture node: the facts from the slim objects are those from the full ones.
    #[test]
    fn slim_objects_give_the_same_facts_as_full_ones() {
        let docs = fixtures();
        let kind = |k: &str| -> Vec<Value> { docs.iter().filter(|d| d["kind"] == k).cloned().collect() };
        let pods = kind("Pod");
        let nodes = kind("Node");
        assert!(pods.len() >= 5 && !nodes.is_empty(), "{} pods, {} nodes", pods.len(), nodes.len());
        let now = datetime!(2026-10-01 12:00 UTC);
        let derive = |slim: bool| {
            let mut d = Deriver::default();
            let mut facts = Vec::new();
            for n in &nodes {
                let v = if slim {
                    serde_json::to_value(serde_json::from_value::<WatchedNode>(n.clone()).unwrap()).unwrap()
                } else {
                    let full: k8s_openapi::api::core::v1::Node = serde_json::from_value(n.clone()).unwrap();
                    serde_json::to_value(full).unwrap()
                };
                facts.extend(d.on_node(&v, now).unwrap());
            }
            for p in &pods {
                // Every pod bound to the fixture node, so its labels classify it.
                let mut p = p.clone();
                p["spec"]["nodeName"] = nodes[0]["metadata"]["name"].clone();
                let v = if slim {
                    serde_json::to_value(serde_json::from_value::<WatchedPod>(p).unwrap()).unwrap()
                } else {
                    let full: k8s_openapi::api::core::v1::Pod = serde_json::from_value(p).unwrap();
                    serde_json::to_value(full).unwrap()
                };
                facts.extend(d.on_pod(&v, false, now).unwrap());
            }
            facts
        };
        let full = derive(false);
        assert!(full.len() >= 3, "{full:?}");
        assert_eq!(derive(true), full);
    }

    #[test]
    fn what_is_not_read_is_not_kept() {
        let pod: WatchedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"},
                         "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
                         "ownerReferences": [{"kind": "Job", "name": "j", "uid": "x", "apiVersion": "batch/v1"}]},
            "spec": {"nodeName": "n", "volumes": [{"name": "v", "emptyDir": {}}],
                     "containers": [{"name": "main", "image": "i", "env": [{"name": "A", "value": "1"}],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "startTime": "2026-10-01T08:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let v = serde_json::to_value(&pod).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "metadata": {"name": "p", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"}},
                "spec": {"nodeName": "n", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": "Running", "podIP": "10.0.0.1", "startTime": "2026-10-01T08:00:00Z"}
            })
        );
        assert_eq!(<WatchedPod as kube::Resource>::plural(&()), "pods");
        assert_eq!(<WatchedNode as kube::Resource>::url_path(&(), None), "/api/v1/nodes");
    }
}
