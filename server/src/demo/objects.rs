//! The demo's Kubernetes objects as the API server returns them (`kubectl get -o json`): Namespaces, Nodes with
//! GPU Feature Discovery labels, Pods at each stage of their life, KubeVirt VirtualMachineInstances, and Kueue
//! ClusterQueues. The agent reads them exactly as it reads a watch event.

use serde_json::{Value, json};
use time::{Duration, OffsetDateTime, format_description::well_known::Rfc3339};

use super::plan::{ClusterPlan, Ending, Namespace, Node, Queue, Sharing, Workload, mix};

/// RFC 3339 in UTC, seconds precision, as the API server writes timestamps.
pub fn ts(t: OffsetDateTime) -> String {
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// A resourceVersion that grows with time (etcd revisions do).
fn rv(t: OffsetDateTime, salt: u64) -> String {
    ((t.unix_timestamp().max(1_600_000_000) - 1_600_000_000) as u64 * 8 + (mix(salt) % 8)).to_string()
}

/// A namespace with the owner labels in force since `since`.
pub fn namespace(ns: &Namespace, tenant: &str, department: &str, since: OffsetDateTime) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": ns.name,
            "uid": ns.uid.to_string(),
            "resourceVersion": rv(since, ns.uid.as_u128() as u64),
            "creationTimestamp": ts(ns.created),
            "labels": {
                "kubernetes.io/metadata.name": ns.name,
                super::plan::label::TENANT: tenant,
                super::plan::label::DEPARTMENT: department,
            },
        },
        "spec": { "finalizers": ["kubernetes"] },
        "status": { "phase": "Active" },
    })
}

/// A GPU node: GFD labels, allocatable extended resources, conditions.
pub fn node(n: &Node, observed: OffsetDateTime) -> Value {
    let m = n.model;
    let mut labels = json!({
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": n.name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "bare-metal",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "127",
        "nvidia.com/cuda.driver.rev": "05",
        "nvidia.com/gfd.timestamp": n.created.unix_timestamp().to_string(),
        "nvidia.com/gpu.count": n.gpus.len().to_string(),
        "nvidia.com/gpu.family": m.family,
        "nvidia.com/gpu.memory": m.memory_mib.to_string(),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": m.product_label,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": if m.family == "hopper" || m.family == "ampere" { "true" } else { "false" },
        "nvidia.com/mig.strategy": "none",
    });
    let mut allocatable = serde_json::Map::new();
    allocatable.insert("cpu".into(), json!("126"));
    allocatable.insert("memory".into(), json!("1056335120Ki"));
    allocatable.insert("pods".into(), json!("110"));
    allocatable.insert("ephemeral-storage".into(), json!("3690622340Ki"));
    let count = n.gpus.len() as u32;
    match n.sharing {
        Sharing::Exclusive => {
            allocatable.insert("nvidia.com/gpu".into(), json!(count.to_string()));
        }
        Sharing::TimeSlice { replicas } => {
            labels["nvidia.com/gpu.replicas"] = json!(replicas.to_string());
            labels["nvidia.com/gpu.sharing-strategy"] = json!("time-slicing");
            allocatable.insert("nvidia.com/gpu".into(), json!((count * replicas).to_string()));
        }
        Sharing::Mig => {
            labels["nvidia.com/mig.strategy"] = json!("mixed");
            labels["nvidia.com/mig.config"] = json!("custom-mixed");
            labels["nvidia.com/mig.config.state"] = json!("success");
            let mut per_profile: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
            for g in &n.gpus {
                for i in &g.mig {
                    *per_profile.entry(i.profile).or_default() += 1;
                }
            }
            for (profile, c) in per_profile {
                labels[format!("nvidia.com/mig-{profile}.count")] = json!(c.to_string());
                labels[format!("nvidia.com/mig-{profile}.product")] =
                    json!(format!("{}-MIG-{profile}", m.product_label));
                allocatable.insert(format!("nvidia.com/mig-{profile}"), json!(c.to_string()));
            }
        }
        Sharing::Vgpu => {
            labels["nvidia.com/gpu.workload.config"] = json!("vm-vgpu");
            labels["nvidia.com/vgpu.present"] = json!("true");
            let mut per_type: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
            for g in &n.gpus {
                if let Some((profile, c)) = g.vgpu {
                    *per_type.entry(profile).or_default() += c;
                }
            }
            for (profile, c) in per_type {
                allocatable.insert(format!("nvidia.com/{profile}"), json!(c.to_string()));
            }
        }
        Sharing::Passthrough => {
            labels["nvidia.com/gpu.workload.config"] = json!("vm-passthrough");
            allocatable.insert(format!("nvidia.com/{}", m.pci_device), json!(count.to_string()));
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n.name,
            "uid": n.uid.to_string(),
            "resourceVersion": rv(n.created, n.uid.as_u128() as u64),
            "creationTimestamp": ts(n.created),
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "taints": [{ "effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "present" }],
        },
        "status": {
            "allocatable": Value::Object(allocatable.clone()),
            "capacity": Value::Object(allocatable),
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": ts(observed), "lastTransitionTime": ts(n.created),
            }],
            "nodeInfo": {
                "architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "5.15.0-122-generic", "kubeletVersion": "v1.31.4",
                "operatingSystem": "linux", "osImage": "Ubuntu 22.04.5 LTS",
            },
        },
    })
}

/// Stages of a pod the agent sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodStage {
    /// Running.
    Running,
    /// Its container exited (Job done or failed); phase Succeeded / Failed.
    Finished,
    /// Deletion requested while running (graceful termination under way).
    Terminating,
    /// The object as the final delete event carries it.
    Deleted,
}

fn container_id(w: &Workload) -> String {
    format!(
        "containerd://{:016x}{:016x}{:016x}{:016x}",
        mix(w.uid.as_u128() as u64),
        mix(1),
        mix(w.uid.as_u128() as u64 ^ 2),
        mix(3)
    )
}

/// A pod of workload `w` on `node` at `stage`.
pub fn pod(w: &Workload, c: &ClusterPlan, stage: PodStage) -> Value {
    let node = &c.nodes[w.node];
    let gpu_qty = w.units.to_string();
    let mut limits = serde_json::Map::new();
    limits.insert("cpu".into(), json!(format!("{}", 4 * w.units.max(1))));
    limits.insert("memory".into(), json!(format!("{}Gi", 32 * w.units.max(1))));
    limits.insert(w.resource.clone(), json!(gpu_qty));
    let mut selector = serde_json::Map::new();
    selector.insert("nvidia.com/gpu.product".into(), json!(node.model.product_label));
    let started = ts(w.started);
    let failed = w.ending == Ending::Failed;
    let (phase, state, deletion) = match stage {
        PodStage::Running => ("Running", json!({ "running": { "startedAt": started } }), None),
        PodStage::Finished => (
            if failed { "Failed" } else { "Succeeded" },
            json!({ "terminated": {
                "exitCode": if failed { 1 } else { 0 },
                "reason": if failed { "Error" } else { "Completed" },
                "startedAt": started, "finishedAt": ts(w.end), "containerID": container_id(w),
            }}),
            None,
        ),
        PodStage::Terminating => ("Running", json!({ "running": { "startedAt": started } }), Some(w.end)),
        PodStage::Deleted => {
            let grace_end = w.end + Duration::seconds(27);
            if w.ending == Ending::Deleted {
                (
                    "Running",
                    json!({ "terminated": {
                        "exitCode": 143, "reason": "Error", "startedAt": started,
                        "finishedAt": ts(grace_end), "containerID": container_id(w),
                    }}),
                    Some(w.end),
                )
            } else {
                (
                    if failed { "Failed" } else { "Succeeded" },
                    json!({ "terminated": {
                        "exitCode": if failed { 1 } else { 0 },
                        "reason": if failed { "Error" } else { "Completed" },
                        "startedAt": started, "finishedAt": ts(w.end), "containerID": container_id(w),
                    }}),
                    Some(w.end + Duration::hours(1)),
                )
            }
        }
    };
    let ready = matches!(stage, PodStage::Running | PodStage::Terminating);
    let mut metadata = json!({
        "name": w.name,
        "namespace": w.namespace,
        "uid": w.uid.to_string(),
        "resourceVersion": rv(w.started, w.uid.as_u128() as u64 ^ stage as u64),
        "creationTimestamp": ts(w.created),
        "labels": w.labels,
        "ownerReferences": [{
            "apiVersion": w.owner.api_version, "kind": w.owner.kind, "name": w.owner.name,
            "uid": w.owner.uid.to_string(), "controller": true, "blockOwnerDeletion": true,
        }],
    });
    if let Some(d) = deletion {
        metadata["deletionTimestamp"] = json!(ts(d));
        metadata["deletionGracePeriodSeconds"] = json!(30);
    }
    let pod_ip = format!(
        "10.{}.{}.{}",
        40 + w.node,
        (mix(w.uid.as_u128() as u64) % 250) + 1,
        (mix(w.uid.as_u128() as u64 ^ 7) % 250) + 2
    );
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node.name,
            "nodeSelector": Value::Object(selector),
            "restartPolicy": if w.owner.kind == "Job" { "Never" } else { "Always" },
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{ "effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists" }],
            "containers": [{
                "name": "main",
                "image": w.image,
                "imagePullPolicy": "IfNotPresent",
                "resources": { "limits": Value::Object(limits.clone()), "requests": Value::Object(limits) },
            }],
        },
        "status": {
            "phase": phase,
            "hostIP": format!("10.0.{}.{}", 10 + w.node, 11 + w.node),
            "podIP": pod_ip,
            "qosClass": "Guaranteed",
            "startTime": ts(w.created.max(w.started - Duration::seconds(60))),
            "conditions": [
                { "type": "PodScheduled", "status": "True", "lastTransitionTime": ts(w.started - Duration::seconds(60)) },
                { "type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": started },
            ],
            "containerStatuses": [{
                "name": "main",
                "image": w.image,
                "imageID": format!("{}@sha256:{:016x}{:016x}", w.image.split(':').next().unwrap_or(w.image), mix(9), mix(10)),
                "containerID": container_id(w),
                "ready": ready,
                "started": ready,
                "restartCount": 0,
                "state": state,
            }],
        },
    })
}

/// Stages of a VMI the agent sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmiStage {
    /// Running.
    Running,
    /// The guest shut down (`Succeeded`), or deletion requested (`Deleted` ending).
    Ended,
    /// The final delete event.
    Deleted,
}

/// A KubeVirt VirtualMachineInstance of workload `w`.
pub fn vmi(w: &Workload, c: &ClusterPlan, stage: VmiStage) -> Value {
    let node = &c.nodes[w.node];
    let mut transitions = vec![
        json!({ "phase": "Pending", "phaseTransitionTimestamp": ts(w.created) }),
        json!({ "phase": "Scheduling", "phaseTransitionTimestamp": ts(w.created + Duration::seconds(1)) }),
        json!({ "phase": "Scheduled", "phaseTransitionTimestamp": ts(w.started - Duration::seconds(20)) }),
        json!({ "phase": "Running", "phaseTransitionTimestamp": ts(w.started) }),
    ];
    let stopped = w.ending == Ending::Stopped && stage != VmiStage::Running;
    if stopped {
        transitions.push(json!({ "phase": "Succeeded", "phaseTransitionTimestamp": ts(w.end) }));
    }
    let deletion = match (stage, w.ending) {
        (VmiStage::Running, _) => None,
        (VmiStage::Ended, Ending::Stopped) => None,
        (VmiStage::Ended, _) => Some(w.end),
        (VmiStage::Deleted, Ending::Stopped) => Some(w.end + Duration::minutes(5)),
        (VmiStage::Deleted, _) => Some(w.end),
    };
    let passthrough = node.sharing == Sharing::Passthrough;
    let mut metadata = json!({
        "name": w.name,
        "namespace": w.namespace,
        "uid": w.uid.to_string(),
        "resourceVersion": rv(w.started, w.uid.as_u128() as u64 ^ stage as u64),
        "creationTimestamp": ts(w.created),
        "generation": 4,
        "labels": w.labels,
        "annotations": { "kubevirt.io/latest-observed-api-version": "v1", "kubevirt.io/storage-observed-api-version": "v1" },
        "finalizers": ["kubevirt.io/virtualMachineControllerFinalize", "foregroundDeleteVirtualMachine"],
        "ownerReferences": [{
            "apiVersion": w.owner.api_version, "kind": w.owner.kind, "name": w.owner.name,
            "uid": w.owner.uid.to_string(), "controller": true, "blockOwnerDeletion": true,
        }],
    });
    if let Some(d) = deletion {
        metadata["deletionTimestamp"] = json!(ts(d));
        metadata["deletionGracePeriodSeconds"] = json!(0);
    }
    let memory = if passthrough { "64Gi" } else { "16Gi" };
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": metadata,
        "spec": {
            "domain": {
                "cpu": { "cores": if passthrough { 16 } else { 4 }, "sockets": 1, "threads": 1 },
                "memory": { "guest": memory },
                "resources": { "requests": { "memory": memory } },
                "machine": { "type": "q35" },
                "firmware": { "uuid": w.owner.uid.to_string() },
                "devices": {
                    "disks": [{ "name": "rootdisk", "disk": { "bus": "virtio" } }],
                    "interfaces": [{ "name": "default", "masquerade": {} }],
                    "gpus": [{ "name": "gpu1", "deviceName": w.resource }],
                },
            },
            "networks": [{ "name": "default", "pod": {} }],
            "volumes": [{ "name": "rootdisk", "containerDisk": { "image": w.image } }],
        },
        "status": {
            "phase": if stopped { "Succeeded" } else { "Running" },
            "nodeName": node.name,
            "phaseTransitionTimestamps": transitions,
            "qosClass": "Burstable",
            "guestOSInfo": if passthrough { json!({ "id": "rhel", "name": "Red Hat Enterprise Linux", "version": "9.4" }) }
                else { json!({ "id": "mswindows", "name": "Microsoft Windows 11 Enterprise", "version": "10.0" }) },
            "conditions": [{ "type": "Ready", "status": if stopped { "False" } else { "True" }, "lastTransitionTime": ts(w.started) }],
        },
    })
}

/// A Kueue ClusterQueue with the quotas of version `version`.
pub fn cluster_queue(q: &Queue, version: usize) -> Value {
    let Some((since, quotas)) = q.versions.get(version).or_else(|| q.versions.last()) else {
        return json!({});
    };
    let mut flavors: Vec<(&str, Vec<Value>)> = Vec::new();
    for quota in quotas {
        let mut r = json!({ "name": quota.resource, "nominalQuota": quota.nominal });
        if let Some(b) = quota.borrowing_limit {
            r["borrowingLimit"] = json!(b);
        }
        match flavors.iter_mut().find(|(f, _)| *f == quota.flavor) {
            Some((_, rs)) => rs.push(r),
            None => flavors.push((quota.flavor, vec![r])),
        }
    }
    let mut covered: Vec<&str> = vec!["cpu", "memory"];
    for quota in quotas {
        if !covered.contains(&quota.resource) {
            covered.push(quota.resource);
        }
    }
    let flavors: Vec<Value> = flavors
        .into_iter()
        .map(|(name, mut resources)| {
            resources.insert(0, json!({ "name": "memory", "nominalQuota": "1Ti" }));
            resources.insert(0, json!({ "name": "cpu", "nominalQuota": "256" }));
            json!({ "name": name, "resources": resources })
        })
        .collect();
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {
            "name": q.name,
            "uid": q.uid.to_string(),
            "resourceVersion": rv(*since, q.uid.as_u128() as u64),
            "generation": version + 1,
            "creationTimestamp": ts(q.created),
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "cohort": q.cohort,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": { "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority" },
            "flavorFungibility": { "whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor" },
            "resourceGroups": [{ "coveredResources": covered, "flavors": flavors }],
        },
        "status": {
            "conditions": [{ "type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads",
                             "lastTransitionTime": ts(q.created) }],
        },
    })
}
