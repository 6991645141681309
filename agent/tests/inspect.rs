//! `gpuledger-agent inspect` on every fixture in ../shared/fixtures/{k8s,dcgm,modelserver}: the real binary,
//! real objects and metric text, concrete expectations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::PathBuf, process::Command};

use serde_json::Value;

fn fixtures(dir: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures")
        .join(dir);
    assert!(
        p.is_dir(),
        "fixtures missing at {} (shared/ must sit beside the repository)",
        p.display()
    );
    p
}

fn inspect(kind: &str, file: &PathBuf, extra: &[&str]) -> (Vec<Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuledger-agent"))
        .args(["inspect", kind])
        .arg(file)
        .args(["--at", "2026-11-01T00:00:00Z"])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{}: {stderr}", file.display());
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}: {l}", file.display()))
        })
        .collect();
    (lines, stderr)
}

fn file(dir: &str, name: &str) -> PathBuf {
    fixtures(dir).join(name)
}

#[test]
fn every_kubernetes_fixture_is_read() {
    let mut n = 0;
    for entry in std::fs::read_dir(fixtures("k8s")).unwrap() {
        let path = entry.unwrap().path();
        let (facts, notes) = inspect("k8s", &path, &[]);
        assert!(
            !facts.is_empty() || !notes.is_empty(),
            "{}: neither facts nor notes",
            path.display()
        );
        for f in &facts {
            assert!(f["event_id"].as_str().is_some_and(|s| !s.is_empty()));
            assert_eq!(f["observed_at"], "2026-11-01T00:00:00Z");
        }
        n += 1;
    }
    assert!(n >= 12, "{n} files");
}

#[test]
fn runai_mig_pod_from_annotations() {
    let (facts, _) = inspect("pod", &file("k8s", "pod_live_runai_mig_1g5gb.yaml"), &[]);
    assert_eq!(facts.len(), 1, "{facts:?}");
    let f = &facts[0];
    assert_eq!(f["kind"], "allocation_started");
    assert_eq!(f["holder_uid"], "cb9aaa99-97df-4c10-bfa7-c1ed024c672b");
    assert_eq!(f["mode"]["mode"], "mig");
    assert_eq!(f["mode"]["profile"], "1g.5gb");
    assert_eq!(
        f["device_ids"][0],
        "MIG-28810d46-0180-5139-a975-020bdc7f9cb1"
    );
    assert_eq!(f["namespace"], "runai-team-a");
    // The container's own start, not the pod's scheduling time (07:56:50) or when we looked.
    assert_eq!(f["started_at"], "2023-01-19T07:56:55Z");
}

#[test]
fn runai_fractional_pod_is_one_replica_of_two() {
    let (facts, _) = inspect(
        "pod",
        &file("k8s", "pod_live_runai_fractional_gpu_0.5.yaml"),
        &[],
    );
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(
        facts[0]["mode"],
        serde_json::json!({"mode": "time_slice", "replicas": 2})
    );
    assert_eq!(facts[0]["started_at"], "2024-03-31T09:03:51Z");
}

#[test]
fn templates_and_unstarted_pods_are_previewed_not_sent() {
    let (facts, notes) = inspect(
        "pod",
        &file(
            "k8s",
            "pod_mig_single_strategy_nodeselector_nvidia_docs.yaml",
        ),
        &[],
    );
    assert!(facts.is_empty());
    assert!(
        notes.contains("mig 1g.5gb"),
        "single strategy read from the node selector: {notes}"
    );
    let (_, notes) = inspect(
        "pod",
        &file("k8s", "pod_mig_mixed_strategy_mig-2g.10gb_nvidia_docs.yaml"),
        &[],
    );
    assert!(notes.contains("mig 2g.10gb"), "{notes}");
    let (_, notes) = inspect(
        "pod",
        &file("k8s", "pod_nvidia_gpu_1_k8s_device_plugin_readme.yaml"),
        &[],
    );
    assert!(notes.contains("1 × nvidia.com/gpu (exclusive)"), "{notes}");
    // gpu.shared needs a declared replica count: said clearly without one, used with one.
    let job = file("k8s", "job_timesliced_gpu_shared_7_upcloud.yaml");
    let (_, notes) = inspect("pod", &job, &[]);
    assert!(
        notes.contains("without a declared replica count"),
        "{notes}"
    );
    let (_, notes) = inspect("pod", &job, &["--timeslice-replicas", "10"]);
    assert!(
        notes.contains("7 × nvidia.com/gpu.shared (time_slice 1/10)"),
        "{notes}"
    );
}

#[test]
fn kubevirt_gpus_split_into_vgpu_and_passthrough() {
    let (facts, notes) = inspect(
        "vmi",
        &file("k8s", "kubevirt_vmi_gpus_and_hostdevices_user_guide.yaml"),
        &[],
    );
    assert!(facts.is_empty(), "a fragment without status is not running");
    assert!(
        notes.contains("nvidia.com/GRID_T4-1Q (vgpu GRID_T4-1Q)"),
        "{notes}"
    );
    assert!(
        notes.contains("nvidia.com/TU104GL_Tesla_T4 (passthrough)"),
        "{notes}"
    );
}

#[test]
fn mig_node_labels_become_a_node_fact() {
    let (facts, _) = inspect(
        "node",
        &file("k8s", "node_live_runai_mig_3_instances.yaml"),
        &[],
    );
    assert_eq!(facts.len(), 1);
    let f = &facts[0];
    assert_eq!(f["kind"], "node_observed");
    assert_eq!(f["name"], "qa-mig-worker-gpu-a100");
    assert_eq!(f["gpu_product"], "NVIDIA-A100-SXM4-40GB");
    assert_eq!(f["gpu_memory_mib"], 40960);
    assert_eq!(f["mig_strategy"], "mixed");
    assert!(
        f["allocatable"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("nvidia.com/mig-")),
        "{f}"
    );
}

#[test]
fn every_dcgm_fixture_yields_devices_and_telemetry() {
    for entry in std::fs::read_dir(fixtures("dcgm")).unwrap() {
        let path = entry.unwrap().path();
        let (facts, _) = inspect("dcgm", &path, &[]);
        let devices = facts
            .iter()
            .filter(|f| f["kind"] == "device_observed")
            .count();
        let telemetry = facts.iter().filter(|f| f["kind"] == "telemetry").count();
        assert!(
            devices >= 1 && telemetry >= 1,
            "{}: {devices} devices, {telemetry} rollups",
            path.display()
        );
        for f in facts.iter().filter(|f| f["kind"] == "device_observed") {
            assert!(f["gpu_uuid"].as_str().unwrap().starts_with("GPU-"), "{f}");
        }
    }
    let (facts, _) = inspect("dcgm", &file("dcgm", "vgpu_grid_a100_40c_vks.txt"), &[]);
    assert!(
        facts.iter().any(|f| f["vgpu_profile"] == "A100-40C"),
        "{facts:?}"
    );
    let (facts, _) = inspect(
        "dcgm",
        &file("dcgm", "mig_a100_4_active_workloads_runai.txt"),
        &[],
    );
    let device = facts
        .iter()
        .find(|f| f["kind"] == "device_observed")
        .unwrap();
    assert_eq!(device["mig_enabled"], true);
    assert_eq!(
        device["mig_devices"].as_array().unwrap().len(),
        4,
        "{device}"
    );
}

#[test]
fn every_model_server_fixture_yields_snapshots() {
    for entry in std::fs::read_dir(fixtures("modelserver")).unwrap() {
        let path = entry.unwrap().path();
        let (records, notes) = inspect("modelserver", &path, &[]);
        assert!(!records.is_empty(), "{}: {notes}", path.display());
    }
    let (records, _) = inspect(
        "modelserver",
        &file("modelserver", "vllm_v1_qwen2.5-0.5b_kops.txt"),
        &[],
    );
    assert_eq!(records[0]["server"], "vllm");
    assert!(
        records[0]["model"].as_str().unwrap().contains("Qwen"),
        "{:?}",
        records[0]
    );
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("gl-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "gpu_util{gpu=\"0\" 12\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpuledger-agent"))
        .args(["inspect", "dcgm"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
