//! Pods (and the DRA ResourceClaims they use) → allocation facts.

use std::collections::BTreeMap;

use gpuledger_core::{
    ids::MigProfile,
    sharing::SharingMode,
    wire::{AllocationEnd, AllocationStart, EndReason, Fact, FactBody, Holder, event_id},
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{GpuRequest, K8sError, LabelKeys, NodeSharing, Pod, parse_time, quantity_units, required_uid};

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
