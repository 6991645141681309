//! Nodes, namespaces, KubeVirt VMIs, workload templates and Kueue ClusterQueues → facts.

use std::collections::BTreeMap;

use gpuledger_core::{
    ids::VgpuProfile,
    sharing::SharingMode,
    wire::{AllocationEnd, AllocationStart, EndReason, Fact, FactBody, Holder, NamespaceFact, NodeFact, event_id},
};
use serde::Deserialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::{
    GpuRequest, K8sError, LabelKeys, Meta, NodeSharing, Pod, invalid, parse_time, quantity_units, required_uid,
};

/// A node's sharing configuration as a fact.
pub fn node_fact(v: &Value, observed_at: OffsetDateTime) -> Result<Option<Fact>, K8sError> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct NodeObj {
        metadata: Meta,
        spec: NodeSpec,
        status: NodeStatus,
    }
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct NodeSpec {
        #[serde(rename = "providerID")]
        provider_id: Option<String>,
    }
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct NodeStatus {
        allocatable: BTreeMap<String, Value>,
    }
    let node = NodeObj::deserialize(v).map_err(|e| invalid("Node", "?", "", e))?;
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
        // How the cloud bill names the machine (absent on premises); an empty one is no ID.
        provider_id: node.spec.provider_id.filter(|p| !p.trim().is_empty()),
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
    let ns = NsObj::deserialize(v).map_err(|e| invalid("Namespace", "?", "", e))?;
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
