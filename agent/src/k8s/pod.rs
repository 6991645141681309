//! Pods (and the DRA ResourceClaims they use) → allocation facts.

use std::collections::BTreeMap;

use gpuledger_core::{
    fraction::Fraction,
    ids::MigProfile,
    sharing::{SharingMode, SoftScheduler},
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

/// Resources a soft-sharing scheduler consumes itself: never classified again as whole GPUs.
const SOFT_KEYS: [&str; 13] = [
    "nvidia.com/gpucores",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-cores",
    "volcano.sh/vgpu-memory",
    "volcano.sh/vgpu-memory-percentage",
    "volcano.sh/gpu-memory",
    "aliyun.com/gpu-mem",
    "aliyun.com/gpu-core.percentage",
    "aliyun.com/gpu-count",
    "alibabacloud.com/gpu-mem",
    "alibabacloud.com/gpu-count",
];

/// A percentage (`"30"`) as a fraction of one GPU; zero means "not limited" to these schedulers (HAMi's default).
fn percent_share(key: &str, v: &Value) -> Result<Option<Fraction>, String> {
    let n = quantity_units(v).ok_or_else(|| format!("{key}: {v} is not a whole percentage"))?;
    match n {
        0 => Ok(None),
        1..=100 => Fraction::new(n.into(), 100).map(Some).map_err(|e| e.to_string()),
        _ => Err(format!("{key}: {n} is above 100 %")),
    }
}

/// Reads one container's soft-sharing declaration as HAMi, Volcano vGPU or Alibaba gpushare write it: the
/// resource it is recorded under, the number of (virtual) GPUs, and the share of each. `None`: no soft sharing.
/// `ann` are the pod's annotations (gpushare's extender writes the device's memory there).
fn soft_share(
    resources: &BTreeMap<String, Value>,
    ann: &BTreeMap<String, String>,
) -> Option<Result<(String, u32, SharingMode), String>> {
    let get = |k: &str| resources.get(k);
    let mib = |k: &str, scale: u64| -> Result<Option<u64>, String> {
        get(k).map_or(Ok(None), |v| {
            quantity_units(v)
                .map(|n| Some(u64::from(n) * scale))
                .ok_or_else(|| format!("{k}: {v} is not a whole number"))
        })
    };
    let pct = |k: &str| get(k).map_or(Ok(None), |v| percent_share(k, v));
    let read = || -> Result<Option<(String, u32, SharingMode)>, String> {
        // HAMi: `nvidia.com/gpu` counts vGPUs; cores and memory are per vGPU.
        if ["nvidia.com/gpucores", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage"].iter().any(|k| get(k).is_some())
        {
            let units = get("nvidia.com/gpu").and_then(quantity_units).unwrap_or(1);
            let mode = SharingMode::SoftShare {
                scheduler: SoftScheduler::Hami,
                compute: pct("nvidia.com/gpucores")?,
                memory: pct("nvidia.com/gpumem-percentage")?,
                memory_mib: mib("nvidia.com/gpumem", 1)?,
            };
            return Ok(Some(("nvidia.com/gpu".into(), units, mode)));
        }
        // Volcano vGPU (HAMi-core underneath): `vgpu-number` vGPUs, each with cores and memory.
        if let Some(number) = get("volcano.sh/vgpu-number") {
            let units =
                quantity_units(number).ok_or_else(|| format!("volcano.sh/vgpu-number: {number} is not a count"))?;
            let (compute, memory, memory_mib) = (
                pct("volcano.sh/vgpu-cores")?,
                pct("volcano.sh/vgpu-memory-percentage")?,
                mib("volcano.sh/vgpu-memory", 1)?,
            );
            let mode = if compute.is_none() && memory.is_none() && memory_mib.is_none() {
                SharingMode::Exclusive // a vGPU with no limits is the whole device
            } else {
                SharingMode::SoftShare { scheduler: SoftScheduler::Volcano, compute, memory, memory_mib }
            };
            return Ok(Some(("volcano.sh/vgpu-number".into(), units, mode)));
        }
        // Volcano's older GPU sharing: memory in MiB on one GPU.
        if get("volcano.sh/gpu-memory").is_some() {
            let mode = SharingMode::SoftShare {
                scheduler: SoftScheduler::Volcano,
                compute: None,
                memory: None,
                memory_mib: mib("volcano.sh/gpu-memory", 1)?,
            };
            return Ok(Some(("volcano.sh/gpu-memory".into(), 1, mode)));
        }
        // Alibaba gpushare: memory in GiB per GPU (`gpu-count` GPUs), optionally a compute percentage (cGPU).
        for prefix in ["aliyun.com", "alibabacloud.com"] {
            let mem_key = format!("{prefix}/gpu-mem");
            if get(&mem_key).is_some() || get(&format!("{prefix}/gpu-core.percentage")).is_some() {
                let units =
                    get(&format!("{prefix}/gpu-count")).and_then(quantity_units).filter(|n| *n > 0).unwrap_or(1);
                let memory_mib = mib(&mem_key, 1024)?;
                // With the device's memory (`ALIYUN_COM_GPU_MEM_DEV`, GiB) the share is a fraction without the
                // inventory.
                let device_gib =
                    ann.get("ALIYUN_COM_GPU_MEM_DEV").and_then(|v| v.trim().parse::<u64>().ok()).filter(|d| *d > 0);
                let memory = memory_mib
                    .zip(device_gib)
                    .and_then(|(m, d)| Fraction::new(i128::from(m), i128::from(d) * 1024).ok())
                    .filter(|f| *f <= Fraction::ONE);
                let mode = SharingMode::SoftShare {
                    scheduler: SoftScheduler::Gpushare,
                    compute: pct(&format!("{prefix}/gpu-core.percentage"))?,
                    memory,
                    memory_mib: if memory.is_some() { None } else { memory_mib },
                };
                return Ok(Some((mem_key, units, mode)));
            }
        }
        Ok(None)
    };
    read().transpose()
}

/// Run:ai's fraction annotations: `gpu-fraction` (a decimal such as `"0.5"`, or `1/N`) of `gpu-fraction-num-devices`
/// GPUs, or `gpu-memory` in MiB. Both are memory fractions to Run:ai; compute is time-shared.
fn runai_share(ann: &BTreeMap<String, String>) -> Option<Result<(String, u32, SharingMode), String>> {
    let units = ann.get("gpu-fraction-num-devices").and_then(|n| n.trim().parse::<u32>().ok()).filter(|n| *n > 0);
    if let Some(raw) = ann.get("gpu-fraction") {
        let parsed = raw.trim().parse::<Fraction>().ok().filter(|f| !f.is_zero() && *f <= Fraction::ONE);
        return Some(match parsed {
            Some(f) => Ok((
                "gpu-fraction".into(),
                units.unwrap_or(1),
                SharingMode::SoftShare {
                    scheduler: SoftScheduler::Runai,
                    compute: None,
                    memory: Some(f),
                    memory_mib: None,
                },
            )),
            None => Err(format!("gpu-fraction {raw:?} is not a fraction in (0, 1] such as 0.5 or 1/4")),
        });
    }
    let raw = ann.get("gpu-memory")?;
    Some(match raw.trim().parse::<u64>() {
        Ok(m) if m > 0 => Ok((
            "gpu-memory".into(),
            units.unwrap_or(1),
            SharingMode::SoftShare {
                scheduler: SoftScheduler::Runai,
                compute: None,
                memory: None,
                memory_mib: Some(m),
            },
        )),
        _ => Err(format!("gpu-memory {raw:?} is not a whole number of MiB")),
    })
}

/// The GPU UUIDs HAMi assigned to container `index`, from its `hami.io/vgpu-devices-allocated` annotation
/// (`UUID,TYPE,MEM,CORES:` per device, `;` between containers).
fn hami_devices(ann: &BTreeMap<String, String>, index: usize) -> Vec<String> {
    let Some(all) = ann.get("hami.io/vgpu-devices-allocated") else { return vec![] };
    all.split(';')
        .nth(index)
        .into_iter()
        .flat_map(|c| c.split(':'))
        .filter_map(|d| d.split(',').next().map(str::trim))
        .filter(|uuid| uuid.starts_with("GPU-") && uuid.len() <= 64)
        .map(str::to_string)
        .take(16)
        .collect()
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
        for (index, c) in self.spec.containers.iter().enumerate() {
            // Extended resources: limits are required and requests, when given, must equal them.
            let mut resources = c.resources.requests.clone();
            resources.extend(c.resources.limits.clone());
            match soft_share(&resources, &self.metadata.annotations) {
                Some(Ok((resource, units, mode))) => {
                    if units > 0 {
                        let device_ids = hami_devices(&self.metadata.annotations, index);
                        out.push(GpuRequest { container: c.name.clone(), resource, units, mode, device_ids });
                    }
                    continue;
                }
                Some(Err(reason)) => {
                    problems.push(format!("container {}: {reason}", c.name));
                    continue;
                }
                None => {}
            }
            for (resource, qty) in resources {
                if SOFT_KEYS.contains(&resource.as_str()) {
                    continue;
                }
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
            match runai_share(ann) {
                Some(Ok((resource, units, mode))) => {
                    out.push(GpuRequest { container: first, resource, units, mode, device_ids: vec![] })
                }
                Some(Err(reason)) => problems.push(reason),
                None => {}
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn requests(limits: Value, annotations: Value) -> (Vec<GpuRequest>, Vec<String>) {
        let pod = Pod::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "6a0f4b1c-8d2e-4f3a-9b5c-0e1d2f3a4b5c", "annotations": annotations},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "resources": {"limits": limits}}]}
        }))
        .unwrap();
        pod.gpu_requests(&NodeSharing::default(), None)
    }

    fn soft(compute: Option<&str>, memory: Option<&str>, memory_mib: Option<u64>, s: SoftScheduler) -> SharingMode {
        SharingMode::SoftShare {
            scheduler: s,
            compute: compute.map(|c| c.parse().unwrap()),
            memory: memory.map(|m| m.parse().unwrap()),
            memory_mib,
        }
    }

    #[test]
    fn every_scheduler_form_is_read() {
        // Alibaba gpushare with a compute percentage (cGPU), no device memory annotation: MiB for the inventory.
        let (r, p) = requests(json!({"aliyun.com/gpu-mem": "4", "aliyun.com/gpu-core.percentage": "30"}), json!({}));
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(r[0].mode, soft(Some("3/10"), None, Some(4096), SoftScheduler::Gpushare));
        // The newer alibabacloud.com names, two GPUs.
        let (r, _) = requests(json!({"alibabacloud.com/gpu-mem": "8", "alibabacloud.com/gpu-count": "2"}), json!({}));
        assert_eq!((r[0].units, r[0].resource.as_str()), (2, "alibabacloud.com/gpu-mem"));
        // Run:ai as 1/N.
        let (r, _) = requests(json!({}), json!({"gpu-fraction": "1/4"}));
        assert_eq!(r[0].mode, soft(None, Some("1/4"), None, SoftScheduler::Runai));
        // HAMi: 0 % cores is "not limited" (HAMi's default), so only memory is declared.
        let (r, _) = requests(
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0", "nvidia.com/gpumem": "2048"}),
            json!({}),
        );
        assert_eq!(r[0].mode, soft(None, None, Some(2048), SoftScheduler::Hami));
        // Volcano: a vGPU with no limits is the whole device; memory as a percentage.
        let (r, _) = requests(json!({"volcano.sh/vgpu-number": "1"}), json!({}));
        assert_eq!(r[0].mode, SharingMode::Exclusive);
        let (r, _) =
            requests(json!({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory-percentage": "25"}), json!({}));
        assert_eq!(r[0].mode, soft(None, Some("1/4"), None, SoftScheduler::Volcano));
        // Volcano's older GPU sharing in MiB.
        let (r, _) = requests(json!({"volcano.sh/gpu-memory": "1024"}), json!({}));
        assert_eq!(r[0].mode, soft(None, None, Some(1024), SoftScheduler::Volcano));
        // A plain GPU stays exclusive, and is counted once (the soft keys are not GPUs of their own).
        let (r, _) = requests(json!({"nvidia.com/gpu": "2"}), json!({}));
        assert_eq!((r.len(), r[0].units, &r[0].mode), (1, 2, &SharingMode::Exclusive));
    }

    #[test]
    fn malformed_shares_are_problems_never_whole_gpus() {
        for (limits, annotations, says) in [
            (json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "abc"}), json!({}), "is not a whole percentage"),
            (json!({"aliyun.com/gpu-core.percentage": "101"}), json!({}), "above 100 %"),
            (json!({}), json!({"gpu-fraction": "1.5"}), "not a fraction in (0, 1]"),
            (json!({}), json!({"gpu-fraction": "0"}), "not a fraction in (0, 1]"),
            (json!({}), json!({"gpu-memory": "-5"}), "not a whole number of MiB"),
        ] {
            let (r, p) = requests(limits, annotations);
            assert!(r.is_empty(), "{r:?}");
            assert!(p.iter().any(|p| p.contains(says)), "{p:?} should say {says}");
        }
    }
}
