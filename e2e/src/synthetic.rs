//! A synthetic GPU cluster for scale tests of the cluster agent: Namespaces, GPU Nodes and Pods shaped like the
//! live objects in `shared/fixtures/k8s/` (Run:ai and GPU Operator pods, a GFD-labelled node) and the demo's
//! objects (`fixtures/src/objects.rs`): owner references, managed fields, CNI annotations, several containers
//! with environment and volume mounts, conditions and container statuses — a few kilobytes each, as the API
//! server sends them, so list pages weigh what real ones do.
//!
//! Deterministic: the same `pods` and `now` give the same objects (UIDs included).

use serde_json::{Value, json};

/// How many pods share a node (eight GPUs per node).
pub const PODS_PER_NODE: usize = 8;
/// How many namespaces the pods are spread over.
pub const NAMESPACES: usize = 50;

/// Sharing of a node's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sharing {
    /// Whole GPUs (`nvidia.com/gpu`).
    Exclusive,
    /// MIG, mixed strategy (`nvidia.com/mig-1g.10gb`).
    Mig,
    /// Time-slicing, four replicas per GPU (`nvidia.com/gpu` on a node labelled `gpu.replicas=4`).
    TimeSlice,
}

/// Node `i`'s sharing: most nodes whole-GPU, every fifth MIG, every seventh time-sliced.
fn sharing(node: usize) -> Sharing {
    if node % 7 == 3 {
        Sharing::TimeSlice
    } else if node % 5 == 1 {
        Sharing::Mig
    } else {
        Sharing::Exclusive
    }
}

/// A UUID-shaped string from a kind tag and an index (version-4 layout, so the agent's parser takes it).
fn uid(tag: u16, i: usize) -> String {
    let h = mix((u64::from(tag) << 48) ^ i as u64);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        tag as u32 | 0x5ca1_0000,
        i % 0x1_0000,
        h & 0xfff,
        (h >> 12) & 0xfff,
        i
    )
}

/// SplitMix64: cheap, well-spread, deterministic.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// RFC 3339, UTC, seconds, from Unix seconds (the civil-from-days algorithm; no time crate needed here).
fn ts(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

fn namespace_name(i: usize) -> String {
    format!("team-{i:02}")
}

fn node_name(i: usize) -> String {
    format!("gpu-node-{i:04}")
}

/// Every object of a cluster with `pods` pods, as `(resource, object)`: namespaces, nodes, then pods. `now` is
/// Unix seconds; pods started within the last six days, so a server accepts their facts.
pub fn cluster(pods: usize, now: i64) -> Vec<(&'static str, Value)> {
    let nodes = pods.div_ceil(PODS_PER_NODE).max(1);
    let mut out = Vec::with_capacity(NAMESPACES + nodes + pods);
    out.extend((0..NAMESPACES).map(|i| ("namespaces", namespace(i, now))));
    out.extend((0..nodes).map(|i| ("nodes", node(i, now))));
    out.extend((0..pods).map(|i| ("pods", pod(i, now))));
    out
}

/// Namespace `i`: owner labels for tenant and department.
pub fn namespace(i: usize, now: i64) -> Value {
    let name = namespace_name(i);
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": uid(1, i),
            "creationTimestamp": ts(now - 90 * 86_400),
            "labels": {
                "kubernetes.io/metadata.name": name,
                "gpuledger.io/tenant": format!("tenant-{:02}", i % 25),
                "gpuledger.io/department": if i.is_multiple_of(2) { "Research" } else { "Engineering" },
            },
            "annotations": {"scheduler.alpha.kubernetes.io/node-selector": "nvidia.com/gpu.present=true"},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// Node `i`: eight GPUs, GPU Feature Discovery and Node Feature Discovery labels, capacity, conditions, images.
pub fn node(i: usize, now: i64) -> Value {
    let name = node_name(i);
    let s = sharing(i);
    let (product, family) = match s {
        Sharing::Exclusive => ("NVIDIA-H100-80GB-HBM3", "hopper"),
        Sharing::Mig => ("NVIDIA-A100-SXM4-80GB", "ampere"),
        Sharing::TimeSlice => ("NVIDIA-L4", "ada-lovelace"),
    };
    let mut labels = serde_json::Map::new();
    for (k, v) in [
        ("beta.kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
        ("node.kubernetes.io/instance-type", "bare-metal"),
        ("topology.kubernetes.io/zone", if i.is_multiple_of(2) { "zone-a" } else { "zone-b" }),
        ("feature.node.kubernetes.io/pci-10de.present", "true"),
        ("feature.node.kubernetes.io/cpu-cpuid.AVX512F", "true"),
        ("feature.node.kubernetes.io/cpu-hardware_multithreading", "true"),
        ("feature.node.kubernetes.io/kernel-version.full", "5.15.0-122-generic"),
        ("feature.node.kubernetes.io/system-os_release.ID", "ubuntu"),
        ("feature.node.kubernetes.io/system-os_release.VERSION_ID", "22.04"),
        ("nvidia.com/cuda.driver.major", "550"),
        ("nvidia.com/cuda.driver.minor", "127"),
        ("nvidia.com/cuda.driver.rev", "05"),
        ("nvidia.com/cuda.runtime.major", "12"),
        ("nvidia.com/cuda.runtime.minor", "4"),
        ("nvidia.com/gpu.count", "8"),
        ("nvidia.com/gpu.deploy.container-toolkit", "true"),
        ("nvidia.com/gpu.deploy.dcgm-exporter", "true"),
        ("nvidia.com/gpu.deploy.device-plugin", "true"),
        ("nvidia.com/gpu.deploy.gpu-feature-discovery", "true"),
        ("nvidia.com/gpu.family", family),
        ("nvidia.com/gpu.machine", "SYS-821GE-TNHR"),
        ("nvidia.com/gpu.present", "true"),
        ("nvidia.com/gpu.product", product),
        ("nvidia.com/mig.capable", if s == Sharing::TimeSlice { "false" } else { "true" }),
    ] {
        labels.insert(k.into(), json!(v));
    }
    labels.insert("kubernetes.io/hostname".into(), json!(name));
    labels.insert("nvidia.com/gfd.timestamp".into(), json!((now - 3600).to_string()));
    let mut allocatable = serde_json::Map::new();
    for (k, v) in [("cpu", "126"), ("memory", "1056335120Ki"), ("pods", "110"), ("ephemeral-storage", "3690622340Ki")] {
        allocatable.insert(k.into(), json!(v));
    }
    match s {
        Sharing::Exclusive => {
            labels.insert("nvidia.com/gpu.replicas".into(), json!("1"));
            labels.insert("nvidia.com/mig.strategy".into(), json!("none"));
            allocatable.insert("nvidia.com/gpu".into(), json!("8"));
        }
        Sharing::TimeSlice => {
            labels.insert("nvidia.com/gpu.replicas".into(), json!("4"));
            labels.insert("nvidia.com/gpu.sharing-strategy".into(), json!("time-slicing"));
            labels.insert("nvidia.com/mig.strategy".into(), json!("none"));
            allocatable.insert("nvidia.com/gpu".into(), json!("32"));
        }
        Sharing::Mig => {
            labels.insert("nvidia.com/mig.strategy".into(), json!("mixed"));
            labels.insert("nvidia.com/mig.config".into(), json!("all-1g.10gb"));
            labels.insert("nvidia.com/mig.config.state".into(), json!("success"));
            labels.insert("nvidia.com/mig-1g.10gb.count".into(), json!("56"));
            labels.insert("nvidia.com/mig-1g.10gb.memory".into(), json!("9984"));
            labels.insert("nvidia.com/mig-1g.10gb.multiprocessors".into(), json!("14"));
            labels.insert("nvidia.com/mig-1g.10gb.product".into(), json!(format!("{product}-MIG-1g.10gb")));
            allocatable.insert("nvidia.com/mig-1g.10gb".into(), json!("56"));
        }
    }
    let images: Vec<Value> = [
        ("nvcr.io/nvidia/pytorch", "24.08-py3", 9_876_543_210u64),
        ("nvcr.io/nvidia/tritonserver", "24.08-py3", 7_654_321_098),
        ("vllm/vllm-openai", "v0.6.3", 5_432_109_876),
        ("nvcr.io/nvidia/k8s-device-plugin", "v0.16.2", 123_456_789),
        ("nvcr.io/nvidia/k8s/dcgm-exporter", "3.3.8-3.6.0-ubuntu22.04", 345_678_901),
        ("registry.k8s.io/kube-proxy", "v1.31.4", 30_123_456),
    ]
    .iter()
    .map(|(image, tag, size)| {
        json!({"names": [format!("{image}@sha256:{:016x}{:016x}", mix(*size), mix(*size ^ 1)), format!("{image}:{tag}")],
               "sizeBytes": size})
    })
    .collect();
    let conditions: Vec<Value> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        .iter()
        .map(|c| {
            json!({
                "type": c, "status": if *c == "Ready" { "True" } else { "False" },
                "reason": if *c == "Ready" { "KubeletReady".to_string() } else { format!("KubeletHasNo{c}") },
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": ts(now - 30), "lastTransitionTime": ts(now - 60 * 86_400),
            })
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": uid(2, i),
            "creationTimestamp": ts(now - 60 * 86_400),
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "nfd.node.kubernetes.io/feature-labels": "cpu-cpuid.AVX512F,cpu-hardware_multithreading,kernel-version.full,pci-10de.present,system-os_release.ID,system-os_release.VERSION_ID",
                "projectcalico.org/IPv4Address": format!("10.0.{}.{}/16", i / 250, i % 250 + 2),
            },
        },
        "spec": {
            "podCIDR": format!("10.{}.{}.0/24", 64 + i / 250, i % 250),
            "taints": [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "present"}],
        },
        "status": {
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 250, i % 250 + 2)},
                          {"type": "Hostname", "address": name}],
            "allocatable": Value::Object(allocatable.clone()),
            "capacity": Value::Object(allocatable),
            "conditions": conditions,
            "images": images,
            "nodeInfo": {
                "architecture": "amd64", "bootID": uid(3, i), "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "5.15.0-122-generic", "kubeProxyVersion": "v1.31.4", "kubeletVersion": "v1.31.4",
                "machineID": format!("{:016x}{:016x}", mix(i as u64), mix(!(i as u64))), "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS", "systemUUID": uid(4, i),
            },
        },
    })
}

/// Whether pod `i` has finished (its container terminated): three in ten.
pub fn finished(i: usize) -> bool {
    i % 10 >= 7
}

/// Pod `i`: on node `i / 8`, in namespace `i % 50`; a training job's worker asking one GPU (or one MIG slice, or
/// one time-slice replica, as its node offers), with a log-shipping sidecar that asks none. Seven in ten run;
/// the rest finished (Succeeded, one in six of them Failed).
pub fn pod(i: usize, now: i64) -> Value {
    let node = i / PODS_PER_NODE;
    let ns = namespace_name(i % NAMESPACES);
    let job = format!("train-{:05}", i / 4);
    let name = format!("{job}-worker-{}-{:05x}", i % 4, mix(i as u64) & 0xfffff);
    let pod_uid = uid(5, i);
    let job_uid = uid(6, i / 4);
    let h = mix(i as u64 ^ 0xabc);
    let started = now - 3600 - (h % (6 * 86_400)) as i64;
    let created = started - 20 - (h % 40) as i64;
    let resource = match sharing(node) {
        Sharing::Mig => "nvidia.com/mig-1g.10gb",
        Sharing::Exclusive | Sharing::TimeSlice => "nvidia.com/gpu",
    };
    let done = finished(i);
    let failed = done && i % 60 == 7;
    let ended = (started + 600 + (h % 7200) as i64).min(now - 60);
    let ip = format!("10.{}.{}.{}", 64 + node / 250, node % 250, i % PODS_PER_NODE + 10);
    let container_id =
        |c: u64| format!("containerd://{:016x}{:016x}{:016x}{:016x}", mix(h ^ c), mix(h ^ c ^ 1), mix(h ^ 2), mix(c));
    let main_state = if done {
        json!({"terminated": {"exitCode": if failed { 1 } else { 0 }, "reason": if failed { "Error" } else { "Completed" },
                              "startedAt": ts(started), "finishedAt": ts(ended), "containerID": container_id(1)}})
    } else {
        json!({"running": {"startedAt": ts(started)}})
    };
    let sidecar_state = if done {
        json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": ts(started - 2),
                              "finishedAt": ts(ended + 1), "containerID": container_id(2)}})
    } else {
        json!({"running": {"startedAt": ts(started - 2)}})
    };
    let phase = match (done, failed) {
        (false, _) => "Running",
        (true, false) => "Succeeded",
        (true, true) => "Failed",
    };
    let ready = if done { "False" } else { "True" };
    let volume_mounts = json!([
        {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": format!("kube-api-access-{:05x}", h & 0xfffff), "readOnly": true},
        {"mountPath": "/dev/shm", "name": "dshm"},
        {"mountPath": "/checkpoints", "name": "checkpoints"},
    ]);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": format!("{job}-worker-{}-", i % 4),
            "namespace": ns,
            "uid": pod_uid,
            "creationTimestamp": ts(created),
            "labels": {
                "app.kubernetes.io/name": "trainer",
                "app.kubernetes.io/part-of": format!("project-{:03}", i % 200),
                "batch.kubernetes.io/controller-uid": job_uid,
                "batch.kubernetes.io/job-name": job,
                "controller-uid": job_uid,
                "job-name": job,
                "batch.kubernetes.io/job-completion-index": (i % 4).to_string(),
                "training.kubeflow.org/replica-type": "worker",
            },
            "annotations": {
                "cni.projectcalico.org/containerID": format!("{:016x}{:016x}{:016x}{:016x}", mix(h), mix(h ^ 3), mix(h ^ 4), mix(h ^ 5)),
                "cni.projectcalico.org/podIP": format!("{ip}/32"),
                "cni.projectcalico.org/podIPs": format!("{ip}/32"),
                "batch.kubernetes.io/job-completion-index": (i % 4).to_string(),
                "kubectl.kubernetes.io/default-container": "main",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9400",
            },
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kube-controller-manager", "operation": "Update",
                 "time": ts(created),
                 "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:batch.kubernetes.io/job-name": {}, "f:job-name": {}},
                              "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{job_uid}\"}}"): {}}},
                              "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:name": {}, "f:resources": {}}}}}},
                {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet", "operation": "Update",
                 "subresource": "status", "time": ts(if done { ended } else { started }),
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {},
                              "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}},
            ],
        },
        "spec": {
            "nodeName": node_name(node),
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "priority": 0,
            "tolerations": [
                {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
                {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["torchrun", "--nnodes=4", "--nproc-per-node=1", "train.py"],
                    "env": [
                        {"name": "JOB_NAME", "value": job},
                        {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                        {"name": "MASTER_ADDR", "value": format!("{job}-worker-0.{ns}.svc.cluster.local")},
                        {"name": "MASTER_PORT", "value": "29500"},
                        {"name": "NCCL_DEBUG", "value": "WARN"},
                        {"name": "POD_UID", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.uid"}}},
                    ],
                    "resources": {"limits": {"cpu": "8", "memory": "64Gi", resource: "1"},
                                  "requests": {"cpu": "8", "memory": "64Gi", resource: "1"}},
                    "volumeMounts": volume_mounts,
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                },
                {
                    "name": "log-shipper",
                    "image": "fluent/fluent-bit:3.1.9",
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": {"cpu": "200m", "memory": "128Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                },
            ],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": format!("{job}-checkpoints")}},
            ],
        },
        "status": {
            "phase": phase,
            "hostIP": format!("10.0.{}.{}", node / 250, node % 250 + 2),
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "qosClass": "Burstable",
            "startTime": ts(created + 2),
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": ts(started - 5)},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": ts(created + 2)},
                {"type": "Ready", "status": ready, "lastProbeTime": null, "lastTransitionTime": ts(if done { ended } else { started })},
                {"type": "ContainersReady", "status": ready, "lastProbeTime": null, "lastTransitionTime": ts(if done { ended } else { started })},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": ts(created)},
            ],
            "containerStatuses": [
                {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                 "imageID": format!("nvcr.io/nvidia/pytorch@sha256:{:016x}{:016x}{:016x}{:016x}", mix(7), mix(8), mix(9), mix(10)),
                 "containerID": container_id(1), "ready": !done, "started": !done, "restartCount": 0, "lastState": {},
                 "state": main_state},
                {"name": "log-shipper", "image": "docker.io/fluent/fluent-bit:3.1.9",
                 "imageID": format!("docker.io/fluent/fluent-bit@sha256:{:016x}{:016x}{:016x}{:016x}", mix(11), mix(12), mix(13), mix(14)),
                 "containerID": container_id(2), "ready": !done, "started": !done, "restartCount": 0, "lastState": {},
                 "state": sidecar_state},
            ],
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(ts(0), "1970-01-01T00:00:00Z");
        assert_eq!(ts(1_796_083_199), "2026-11-30T23:59:59Z");
        assert_eq!(ts(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn objects_are_distinct_and_of_realistic_size() {
        let now = 1_796_083_199;
        let objects = cluster(80, now);
        assert_eq!(objects.iter().filter(|(r, _)| *r == "pods").count(), 80);
        assert_eq!(objects.iter().filter(|(r, _)| *r == "nodes").count(), 10);
        assert_eq!(objects.iter().filter(|(r, _)| *r == "namespaces").count(), NAMESPACES);
        let uids: std::collections::BTreeSet<&str> =
            objects.iter().map(|(_, o)| o["metadata"]["uid"].as_str().unwrap()).collect();
        assert_eq!(uids.len(), objects.len(), "UIDs are unique");
        for (_, o) in &objects {
            uuid::Uuid::parse_str(o["metadata"]["uid"].as_str().unwrap()).unwrap();
        }
        let pod = serde_json::to_string(&pod(3, now)).unwrap();
        assert!((3_000..8_000).contains(&pod.len()), "a pod is a few kilobytes: {}", pod.len());
        let meta = serde_json::to_string(&pod_meta_bytes(3, now)).unwrap();
        assert!(meta.len() >= 300, "labels and annotations weigh a few hundred bytes: {}", meta.len());
    }

    fn pod_meta_bytes(i: usize, now: i64) -> Value {
        let p = pod(i, now);
        json!({"labels": p["metadata"]["labels"], "annotations": p["metadata"]["annotations"]})
    }
}
