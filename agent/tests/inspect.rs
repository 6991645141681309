//! `gpuledger-agent inspect` on every fixture in ../shared/fixtures/{k8s,dcgm,modelserver,nvidia}: the real binary,
//! real objects and metric text, concrete expectations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::PathBuf, process::Command};

use serde_json::Value;

fn fixtures(dir: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures").join(dir);
    assert!(p.is_dir(), "fixtures missing at {} (shared/ must sit beside the repository)", p.display());
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
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: not JSON: {e}: {l}", file.display())))
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
        assert!(!facts.is_empty() || !notes.is_empty(), "{}: neither facts nor notes", path.display());
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
    assert_eq!(f["device_ids"][0], "MIG-28810d46-0180-5139-a975-020bdc7f9cb1");
    assert_eq!(f["namespace"], "runai-team-a");
    // The container's own start, not the pod's scheduling time (07:56:50) or when we looked.
    assert_eq!(f["started_at"], "2023-01-19T07:56:55Z");
}

#[test]
fn runai_fractional_pod_is_a_half_share() {
    let (facts, _) = inspect("pod", &file("k8s", "pod_live_runai_fractional_gpu_0.5.yaml"), &[]);
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0]["mode"], serde_json::json!({"mode": "soft_share", "scheduler": "runai", "memory": "1/2"}));
    assert_eq!(facts[0]["resource"], "gpu-fraction");
    assert_eq!(facts[0]["started_at"], "2024-03-31T09:03:51Z");
}

// ---------------------------------------------------------------- soft sharing (the repository's own fixtures)

fn own(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/k8s").join(name)
}

/// The allocation-start facts of a file read by `inspect k8s`, by holder name.
fn starts(name: &str) -> std::collections::BTreeMap<String, Value> {
    let (facts, notes) = inspect("k8s", &own(name), &[]);
    let starts: std::collections::BTreeMap<String, Value> = facts
        .into_iter()
        .filter(|f| f["kind"] == "allocation_started")
        .map(|f| (f["holder_name"].as_str().unwrap().to_string(), f))
        .collect();
    assert!(!starts.is_empty(), "{name}: no allocations; notes: {notes}");
    starts
}

#[test]
fn hami_vgpus_are_soft_shares_with_their_devices() {
    let s = starts("hami_vgpu_pods.yaml");
    let two = &s["gpu-pod"];
    assert_eq!(
        two["mode"],
        serde_json::json!({"mode": "soft_share", "scheduler": "hami", "compute": "3/10", "memory_mib": 3000})
    );
    assert_eq!(two["units"], 2, "nvidia.com/gpu counts vGPUs");
    assert_eq!(two["resource"], "nvidia.com/gpu");
    assert_eq!(two["gpu_model"], "NVIDIA-L4");
    assert_eq!(
        two["device_ids"],
        serde_json::json!(["GPU-3b1d8f2e-6a4c-4e1b-9c7d-2f5e8a0b1c3d", "GPU-7c2e9a1b-4d3f-4a6e-8b5c-1e0d9f8a7b6c"])
    );
    let pct = &s["gpu-pod-percentage"];
    assert_eq!(
        pct["mode"],
        serde_json::json!({"mode": "soft_share", "scheduler": "hami", "compute": "1/4", "memory": "1/2"})
    );
    assert_eq!(pct["units"], 1);
}

#[test]
fn volcano_vgpus_are_soft_shares() {
    let s = starts("volcano_vgpu_pods.yaml");
    let t = &s["test1"];
    assert_eq!(
        t["mode"],
        serde_json::json!({"mode": "soft_share", "scheduler": "volcano", "compute": "1/2", "memory_mib": 3000})
    );
    assert_eq!((t["units"].as_u64(), t["resource"].as_str()), (Some(2), Some("volcano.sh/vgpu-number")));
    assert_eq!(t["gpu_model"], "NVIDIA-A100-SXM4-80GB");
}

#[test]
fn gpushare_memory_is_a_fraction_of_the_device_it_names() {
    let s = starts("gpushare_pods.yaml");
    let p = &s["binpack-1-5d9b5f7c4-abcde"];
    // 3 GiB of the 15 GiB device the scheduler extender wrote down.
    assert_eq!(p["mode"], serde_json::json!({"mode": "soft_share", "scheduler": "gpushare", "memory": "1/5"}));
    assert_eq!(p["resource"], "aliyun.com/gpu-mem");
}

#[test]
fn runai_decimal_fractions_over_devices_and_memory_in_mib() {
    let s = starts("runai_fractions.yaml");
    let q = &s["frac-quarter-0-0"];
    assert_eq!(q["mode"], serde_json::json!({"mode": "soft_share", "scheduler": "runai", "memory": "1/4"}));
    assert_eq!(q["units"], 2, "gpu-fraction-num-devices");
    let m = &s["mem-5gb-0-0"];
    assert_eq!(m["mode"], serde_json::json!({"mode": "soft_share", "scheduler": "runai", "memory_mib": 5120}));
}

#[test]
fn gfd_shared_nodes_split_by_replicas_for_time_slicing_and_mps() {
    let s = starts("gfd_mps_and_timeslicing.yaml");
    let mps = &s["mps-client-0"];
    assert_eq!(mps["mode"], serde_json::json!({"mode": "time_slice", "replicas": 10}));
    assert_eq!(mps["gpu_model"], "NVIDIA-A10-SHARED");
    let ts = &s["time-slicing-verification-0"];
    assert_eq!(ts["mode"], serde_json::json!({"mode": "time_slice", "replicas": 4}));
}

#[test]
fn an_impossible_share_is_a_problem_not_a_whole_gpu() {
    let dir = std::env::temp_dir().join(format!("gl-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.yaml");
    let pod = std::fs::read_to_string(own("hami_vgpu_pods.yaml"))
        .unwrap()
        .replace("nvidia.com/gpucores: 25", "nvidia.com/gpucores: 250");
    std::fs::write(&f, pod).unwrap();
    let (facts, notes) = inspect("k8s", &f, &[]);
    assert!(notes.contains("nvidia.com/gpucores: 250 is above 100 %"), "{notes}");
    assert!(!facts.iter().any(|f| f["holder_name"] == "gpu-pod-percentage" && f["kind"] == "allocation_started"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn templates_and_unstarted_pods_are_previewed_not_sent() {
    let (facts, notes) = inspect("pod", &file("k8s", "pod_mig_single_strategy_nodeselector_nvidia_docs.yaml"), &[]);
    assert!(facts.is_empty());
    assert!(notes.contains("mig 1g.5gb"), "single strategy read from the node selector: {notes}");
    let (_, notes) = inspect("pod", &file("k8s", "pod_mig_mixed_strategy_mig-2g.10gb_nvidia_docs.yaml"), &[]);
    assert!(notes.contains("mig 2g.10gb"), "{notes}");
    let (_, notes) = inspect("pod", &file("k8s", "pod_nvidia_gpu_1_k8s_device_plugin_readme.yaml"), &[]);
    assert!(notes.contains("1 × nvidia.com/gpu (exclusive)"), "{notes}");
    // gpu.shared needs a declared replica count: said clearly without one, used with one.
    let job = file("k8s", "job_timesliced_gpu_shared_7_upcloud.yaml");
    let (_, notes) = inspect("pod", &job, &[]);
    assert!(notes.contains("without a declared replica count"), "{notes}");
    let (_, notes) = inspect("pod", &job, &["--timeslice-replicas", "10"]);
    assert!(notes.contains("7 × nvidia.com/gpu.shared (time_slice 1/10)"), "{notes}");
}

#[test]
fn kubevirt_gpus_split_into_vgpu_and_passthrough() {
    let (facts, notes) = inspect("vmi", &file("k8s", "kubevirt_vmi_gpus_and_hostdevices_user_guide.yaml"), &[]);
    assert!(facts.is_empty(), "a fragment without status is not running");
    assert!(notes.contains("nvidia.com/GRID_T4-1Q (vgpu GRID_T4-1Q)"), "{notes}");
    assert!(notes.contains("nvidia.com/TU104GL_Tesla_T4 (passthrough)"), "{notes}");
}

#[test]
fn mig_node_labels_become_a_node_fact() {
    let (facts, _) = inspect("node", &file("k8s", "node_live_runai_mig_3_instances.yaml"), &[]);
    assert_eq!(facts.len(), 1);
    let f = &facts[0];
    assert_eq!(f["kind"], "node_observed");
    assert_eq!(f["name"], "qa-mig-worker-gpu-a100");
    assert_eq!(f["gpu_product"], "NVIDIA-A100-SXM4-40GB");
    assert_eq!(f["gpu_memory_mib"], 40960);
    assert_eq!(f["mig_strategy"], "mixed");
    assert!(f["allocatable"].as_object().unwrap().keys().any(|k| k.starts_with("nvidia.com/mig-")), "{f}");
    // A kind cluster's node names no cloud machine: no provider ID (issue 35).
    assert!(f.get("provider_id").is_none(), "{f}");
}

/// The same live node as an EKS node would be: `spec.providerID` is read as the cloud bill's name for the machine.
#[test]
fn a_cloud_nodes_provider_id_is_read() {
    let text = std::fs::read_to_string(file("k8s", "node_live_runai_mig_3_instances.yaml")).unwrap();
    assert!(text.contains("\nspec:\n"), "the fixture has a spec");
    let eks = text.replacen("\nspec:\n", "\nspec:\n  providerID: aws:///us-west-2a/i-0f3c2b1a09d8e7f65\n", 1);
    let dir = std::env::temp_dir().join(format!("gl-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node_eks.yaml");
    std::fs::write(&path, eks).unwrap();
    let (facts, _) = inspect("node", &path, &[]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0]["provider_id"], "aws:///us-west-2a/i-0f3c2b1a09d8e7f65", "{}", facts[0]);
}

#[test]
fn every_dcgm_fixture_yields_devices_and_telemetry() {
    for entry in std::fs::read_dir(fixtures("dcgm")).unwrap() {
        let path = entry.unwrap().path();
        let (facts, _) = inspect("dcgm", &path, &[]);
        let devices = facts.iter().filter(|f| f["kind"] == "device_observed").count();
        let telemetry = facts.iter().filter(|f| f["kind"] == "telemetry").count();
        assert!(devices >= 1 && telemetry >= 1, "{}: {devices} devices, {telemetry} rollups", path.display());
        for f in facts.iter().filter(|f| f["kind"] == "device_observed") {
            assert!(f["gpu_uuid"].as_str().unwrap().starts_with("GPU-"), "{f}");
        }
    }
    let (facts, _) = inspect("dcgm", &file("dcgm", "vgpu_grid_a100_40c_vks.txt"), &[]);
    assert!(facts.iter().any(|f| f["vgpu_profile"] == "A100-40C"), "{facts:?}");
    let (facts, _) = inspect("dcgm", &file("dcgm", "mig_a100_4_active_workloads_runai.txt"), &[]);
    let device = facts.iter().find(|f| f["kind"] == "device_observed").unwrap();
    assert_eq!(device["mig_enabled"], true);
    assert_eq!(device["mig_devices"].as_array().unwrap().len(), 4, "{device}");
}

#[test]
fn every_model_server_fixture_yields_snapshots() {
    for entry in std::fs::read_dir(fixtures("modelserver")).unwrap() {
        let path = entry.unwrap().path();
        let (records, notes) = inspect("modelserver", &path, &[]);
        assert!(!records.is_empty(), "{}: {notes}", path.display());
    }
    let (records, _) = inspect("modelserver", &file("modelserver", "vllm_v1_qwen2.5-0.5b_kops.txt"), &[]);
    assert_eq!(records[0]["server"], "vllm");
    assert!(records[0]["model"].as_str().unwrap().contains("Qwen"), "{:?}", records[0]);
}

/// TGI and NIM text (short inputs in those servers' format: see the sources cited in `metrics/modelserver.rs`):
/// detected from the names; TGI's model from `--model`.
#[test]
fn tgi_and_nim_metrics_are_detected_and_tgi_takes_its_model_from_the_flag() {
    let dir = std::env::temp_dir().join(format!("gl-inspect-ms-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tgi = dir.join("tgi.txt");
    std::fs::write(
        &tgi,
        "# TYPE tgi_request_success counter\ntgi_request_success 11\ntgi_queue_size 3\n\
         tgi_request_input_length_sum 2210\ntgi_request_generated_tokens_sum 3300\n",
    )
    .unwrap();
    let (records, notes) = inspect("modelserver", &tgi, &[]);
    assert_eq!((records[0]["server"].as_str(), records[0]["model"].as_str()), (Some("tgi"), Some("unknown")));
    assert!(notes.contains("--model"), "{notes}");
    let (records, _) = inspect("modelserver", &tgi, &["--server", "tgi", "--model", "bigscience/bloom-560m"]);
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(
        (r["kind"].as_str(), r["model"].as_str()),
        (Some("modelserver_snapshot"), Some("bigscience/bloom-560m"))
    );
    assert_eq!((r["input_tokens"].as_f64(), r["output_tokens"].as_f64()), (Some(2210.0), Some(3300.0)));
    assert_eq!((r["requests_ok"].as_f64(), r["queue_depth"].as_f64()), (Some(11.0), Some(3.0)));
    // Another server forced: nothing of it found, said so.
    let (records, notes) = inspect("modelserver", &tgi, &["--server", "nim"]);
    assert!(records.is_empty() && notes.contains("no nim metrics"), "{notes}");

    let nim = dir.join("nim.txt");
    std::fs::write(
        &nim,
        "prompt_tokens_total{model_name=\"meta/llama-3.1-8b-instruct\"} 109.0\n\
         generation_tokens_total{model_name=\"meta/llama-3.1-8b-instruct\"} 174.0\n\
         request_success_total{model_name=\"meta/llama-3.1-8b-instruct\"} 5.0\n\
         request_failure_total{model_name=\"meta/llama-3.1-8b-instruct\"} 0.0\n",
    )
    .unwrap();
    let (records, _) = inspect("modelserver", &nim, &[]);
    assert_eq!(records.len(), 1);
    assert_eq!((records[0]["server"].as_str(), records[0]["output_tokens"].as_f64()), (Some("nim"), Some(174.0)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("gl-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "gpu_util{gpu=\"0\" 12\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpuledger-agent")).args(["inspect", "dcgm"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------------------------
// fixtures/nvidia

/// Every file in fixtures/nvidia and the kind that reads it. A new file must be added here.
const NVIDIA_FIXTURES: &[(&str, &str)] = &[
    ("device_plugin_timeslicing_rename_upcloud.yaml", "device-plugin-config"),
    ("gpu_operator_docs_custom-mig-config.yaml", "mig-config"),
    ("gpu_operator_docs_mig-cm-values.yaml", "mig-config"),
    ("gpu_operator_docs_output_mig-get-pods.txt", "kubectl-table"),
    ("gpu_operator_docs_output_mig-mixed-node-labels.json", "node-labels"),
    ("gpu_operator_docs_output_mig-mixed-nvidia-smi.txt", "nvidia-smi-l"),
    ("gpu_operator_docs_output_mig-node-labels.json", "node-labels"),
    ("gpu_operator_docs_output_mig-nvidia-smi.txt", "nvidia-smi-l"),
    ("gpu_operator_docs_time-slicing-config-all.yaml", "device-plugin-config"),
    ("gpu_operator_docs_time-slicing-config-fine.yaml", "device-plugin-config"),
    ("kubevirt_permitted_host_devices_user_guide.yaml", "kubevirt-config"),
    ("mig_parted_config_default.yaml", "mig-config"),
    ("mig_parted_examples_config.yaml", "mig-config"),
    ("nvidia_smi_L_h100_mig_capture.txt", "nvidia-smi-l"),
    ("nvidia_smi_q_x_a100_sxm4_mig_enabled_telegraf.xml", "nvidia-smi"),
    ("nvidia_smi_q_x_rtx4000_sff_ada_v13_telegraf.xml", "nvidia-smi"),
    ("nvidia_smi_q_x_tesla_t4_2_processes_telegraf.xml", "nvidia-smi"),
    ("nvidia_smi_query_compute_apps_csv_h100_mig_load.csv", "gpu-csv"),
    ("nvidia_smi_query_gpu_all_fields_csv_h100_mig_load.csv", "gpu-csv"),
    ("nvidia_smi_table_t4_container_toolkit_docs.txt", "nvidia-smi-l"),
];

fn nvidia(name: &str) -> (Vec<Value>, String) {
    let kind = NVIDIA_FIXTURES
        .iter()
        .find(|(f, _)| *f == name)
        .map(|(_, k)| *k)
        .unwrap_or_else(|| panic!("{name} is not in NVIDIA_FIXTURES"));
    inspect(kind, &file("nvidia", name), &[])
}

fn of_kind<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["kind"] == kind).collect()
}

#[test]
fn every_nvidia_fixture_is_read() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(fixtures("nvidia")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some((_, kind)) = NVIDIA_FIXTURES.iter().find(|(f, _)| *f == name) else {
            panic!("{name}: a new fixture: add it to NVIDIA_FIXTURES with the kind that reads it");
        };
        let (lines, notes) = inspect(kind, &path, &[]);
        assert!(!lines.is_empty() || !notes.is_empty(), "{name}: neither output nor notes");
        for l in &lines {
            assert!(l["kind"].as_str().is_some_and(|k| !k.is_empty()), "{name}: {l}");
            if l.get("event_id").is_some() {
                assert_eq!(l["observed_at"], "2026-11-01T00:00:00Z", "{name}");
            }
        }
        seen.push(name);
    }
    for (f, _) in NVIDIA_FIXTURES {
        assert!(seen.iter().any(|s| s == f), "{f} is listed but missing");
    }
    assert_eq!(seen.len(), NVIDIA_FIXTURES.len());
}

#[test]
fn nvidia_fixtures_fail_under_the_wrong_kind() {
    for (name, kind) in [
        ("gpu_operator_docs_custom-mig-config.yaml", "nvidia-smi"),
        ("nvidia_smi_table_t4_container_toolkit_docs.txt", "mig-config"),
        ("mig_parted_examples_config.yaml", "device-plugin-config"),
        ("device_plugin_timeslicing_rename_upcloud.yaml", "mig-config"),
        ("gpu_operator_docs_output_mig-get-pods.txt", "gpu-csv"),
        ("nvidia_smi_query_gpu_all_fields_csv_h100_mig_load.csv", "nvidia-smi-l"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuledger-agent"))
            .args(["inspect", kind])
            .arg(file("nvidia", name))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{name} read as {kind}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(name), "the error names the file: {stderr}");
    }
}

#[test]
fn nvidia_smi_xml_a100_mig_enabled() {
    let (lines, notes) = nvidia("nvidia_smi_q_x_a100_sxm4_mig_enabled_telegraf.xml");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let d = &lines[0];
    assert_eq!(d["kind"], "device_observed");
    assert_eq!(d["gpu_uuid"], "GPU-513536b6-7d19-9063-b049-1e69664bb298");
    assert_eq!(d["model"], "NVIDIA A100-SXM4-80GB");
    assert_eq!(d["node"], "unknown-node");
    assert_eq!(d["index"], 1); // <minor_number>
    assert_eq!(d["memory_mib"], 81920);
    assert_eq!(d["mig_enabled"], true);
    let gis: Vec<u64> =
        d["mig_devices"].as_array().unwrap().iter().map(|m| m["gpu_instance_id"].as_u64().unwrap()).collect();
    assert_eq!(gis, [3, 4, 5, 6]);
    assert!(d["mig_devices"].as_array().unwrap().iter().all(|m| m["compute_instance_id"] == 0));
    assert!(
        d["event_id"].as_str().unwrap().starts_with("device/unknown-node/GPU-513536b6-7d19-9063-b049-1e69664bb298/")
    );
    assert!(notes.contains("names no MIG profiles"), "{notes}");
}

#[test]
fn nvidia_smi_xml_processes_are_records_and_notes() {
    let (lines, notes) = nvidia("nvidia_smi_q_x_tesla_t4_2_processes_telegraf.xml");
    let d = of_kind(&lines, "device_observed");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["gpu_uuid"], "GPU-d37e67a5-91dd-3774-a5cb-99096249601a");
    assert_eq!(d[0]["model"], "Tesla T4");
    assert_eq!(d[0]["memory_mib"], 15360);
    assert_eq!(d[0]["mig_enabled"], false);
    let p = of_kind(&lines, "gpu_process");
    let got: Vec<(u64, u64)> =
        p.iter().map(|p| (p["pid"].as_u64().unwrap(), p["used_memory_mib"].as_u64().unwrap())).collect();
    assert_eq!(got, [(675, 22), (5762, 1005)]);
    assert!(p.iter().all(|p| p["gpu_uuid"] == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"));
    assert!(notes.contains("process 5762 (python) uses 1005 MiB"), "{notes}");

    let (lines, _) = nvidia("nvidia_smi_q_x_rtx4000_sff_ada_v13_telegraf.xml");
    let d = of_kind(&lines, "device_observed");
    assert_eq!(d[0]["gpu_uuid"], "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026");
    assert_eq!(d[0]["model"], "NVIDIA RTX 4000 SFF Ada Generation");
    assert_eq!(d[0]["memory_mib"], 20475);
    let pids: Vec<u64> = of_kind(&lines, "gpu_process").iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids, [1842, 3190, 4937, 34626]);
    assert_eq!(of_kind(&lines, "gpu_process")[3]["type"], "C+G");
}

#[test]
fn query_gpu_and_compute_apps_csv() {
    let (lines, notes) = nvidia("nvidia_smi_query_gpu_all_fields_csv_h100_mig_load.csv");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let d = &lines[0];
    assert_eq!(d["kind"], "device_observed");
    assert_eq!(d["gpu_uuid"], "GPU-00000000-0000-0000-0000-000000000000");
    assert_eq!(d["model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(d["index"], 0);
    assert_eq!(d["memory_mib"], 81559);
    assert_eq!(d["mig_enabled"], true);
    assert_eq!(d["node"], "unknown-node", "hostname is [N/A]");
    assert!(notes.contains("no MIG instances"), "{notes}");

    let (lines, notes) = nvidia("nvidia_smi_query_compute_apps_csv_h100_mig_load.csv");
    let got: Vec<(u64, u64, &str)> = lines
        .iter()
        .map(|p| {
            assert_eq!(p["kind"], "gpu_process");
            assert_eq!(p["gpu_uuid"], "GPU-00000000-0000-0000-0000-000000000000");
            (p["pid"].as_u64().unwrap(), p["used_memory_mib"].as_u64().unwrap(), p["process_name"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        got,
        [(21180, 2296, "/root/tools/memhog"), (21181, 1272, "/root/tools/memhog"), (21198, 7484, "./gpu_burn")]
    );
    assert!(notes.contains("parent GPU UUID"), "{notes}");
}

#[test]
fn nvidia_smi_list_gives_devices_and_mig_records() {
    let (lines, notes) = nvidia("gpu_operator_docs_output_mig-mixed-nvidia-smi.txt");
    let d = of_kind(&lines, "device_observed");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["gpu_uuid"], "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4");
    assert_eq!(d[0]["model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(d[0]["index"], 0);
    assert_eq!(d[0]["mig_enabled"], true);
    // Opaque MIG UUIDs carry a device index, not a GPU instance ID: never guessed into the fact.
    assert!(d[0].get("mig_devices").is_none(), "{:?}", d[0]);
    let migs = of_kind(&lines, "mig_device");
    let got: Vec<(&str, u64, &str)> = migs
        .iter()
        .map(|m| (m["profile"].as_str().unwrap(), m["device_index"].as_u64().unwrap(), m["mig_uuid"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("3g.40gb", 0, "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"),
            ("2g.20gb", 1, "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0"),
            ("1g.10gb", 2, "MIG-9d14fb21-4ae1-546f-a636-011582899c39"),
            ("1g.10gb", 3, "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b"),
        ]
    );
    assert!(notes.contains("not a GPU instance ID"), "{notes}");

    let (lines, _) = nvidia("gpu_operator_docs_output_mig-nvidia-smi.txt");
    let migs = of_kind(&lines, "mig_device");
    assert_eq!(migs.len(), 7);
    assert!(migs.iter().all(|m| m["profile"] == "1g.10gb"));
    assert_eq!(migs[6]["mig_uuid"], "MIG-981c86e9-3607-57d7-9426-295347e4b925");

    let (lines, _) = nvidia("nvidia_smi_L_h100_mig_capture.txt");
    let profiles: Vec<&str> = of_kind(&lines, "mig_device").iter().map(|m| m["profile"].as_str().unwrap()).collect();
    assert_eq!(profiles, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]);
    assert_eq!(of_kind(&lines, "device_observed")[0]["gpu_uuid"], "GPU-00000000-0000-0000-0000-000000000000");
}

#[test]
fn plain_nvidia_smi_table_is_rows_not_facts() {
    let (lines, notes) = nvidia("nvidia_smi_table_t4_container_toolkit_docs.txt");
    assert!(of_kind(&lines, "device_observed").is_empty());
    assert_eq!(lines.len(), 1, "{lines:?}");
    let r = &lines[0];
    assert_eq!(r["kind"], "gpu_table_row");
    assert_eq!(r["index"], 0);
    assert_eq!(r["name"], "Tesla T4");
    assert_eq!(r["bus_id"], "00000000:00:1E.0");
    assert_eq!(r["memory_total_mib"], 15109);
    assert_eq!(r["memory_used_mib"], 0);
    assert!(notes.contains("driver 535.86.10"), "{notes}");
    assert!(notes.contains("no GPU UUIDs"), "{notes}");
}

#[test]
fn device_plugin_time_slicing_policies() {
    let (lines, _) = nvidia("device_plugin_timeslicing_rename_upcloud.yaml");
    assert_eq!(lines.len(), 1);
    let p = &lines[0];
    assert_eq!(p["kind"], "timeslice_policy");
    assert_eq!(p["resource"], "nvidia.com/gpu");
    assert_eq!(p["replicas"], 10);
    assert_eq!(p["renameByDefault"], true);
    assert_eq!(p["rename"], Value::Null);
    assert_eq!(p["failRequestsGreaterThanOne"], false);
    assert_eq!(p["advertised_resource"], "nvidia.com/gpu.shared");

    let (lines, _) = nvidia("gpu_operator_docs_time-slicing-config-all.yaml");
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["config"], "any");
    assert_eq!(lines[0]["configmap"], "time-slicing-config-all");
    assert_eq!(lines[0]["replicas"], 4);
    assert_eq!(lines[0]["advertised_resource"], "nvidia.com/gpu");

    let (lines, _) = nvidia("gpu_operator_docs_time-slicing-config-fine.yaml");
    let got: Vec<(&str, &str, u64)> = lines
        .iter()
        .map(|p| (p["config"].as_str().unwrap(), p["resource"].as_str().unwrap(), p["replicas"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("a100-40gb", "nvidia.com/gpu", 8),
            ("a100-40gb", "nvidia.com/mig-1g.5gb", 2),
            ("a100-40gb", "nvidia.com/mig-2g.10gb", 2),
            ("a100-40gb", "nvidia.com/mig-3g.20gb", 3),
            ("a100-40gb", "nvidia.com/mig-7g.40gb", 7),
            ("tesla-t4", "nvidia.com/gpu", 4),
        ]
    );
    assert_eq!(lines[0]["migStrategy"], "mixed");
}

fn layout<'a>(lines: &'a [Value], config: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["config"] == config).collect()
}

#[test]
fn mig_parted_layouts() {
    let (lines, _) = nvidia("mig_parted_examples_config.yaml");
    assert!(lines.iter().all(|l| l["kind"] == "mig_layout"));
    assert_eq!(layout(&lines, "all-1g.5gb")[0]["profiles"], serde_json::json!({"1g.5gb": 7}));
    assert_eq!(
        layout(&lines, "all-balanced")[0]["profiles"],
        serde_json::json!({"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    );
    let custom = layout(&lines, "custom-config");
    assert_eq!(custom.len(), 5);
    assert_eq!(custom[0]["devices"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(custom[0]["mig_enabled"], false);
    assert_eq!(custom[2]["devices"], serde_json::json!([5]));
    assert_eq!(custom[2]["profiles"], serde_json::json!({"2g.10gb": 3}));
    assert_eq!(layout(&lines, "all-disabled")[0]["mig_enabled"], false);

    let (lines, _) = nvidia("mig_parted_config_default.yaml");
    assert_eq!(lines.len(), 94);
    let one_g = layout(&lines, "all-1g.10gb");
    assert_eq!(one_g.len(), 2, "two device filters");
    assert_eq!(one_g[0]["profiles"], serde_json::json!({"1g.10gb": 7}));
    assert_eq!(one_g[0]["device_filter"][0], "0x233010DE");
    assert_eq!(one_g[1]["profiles"], serde_json::json!({"1g.10gb": 4}));
    assert_eq!(layout(&lines, "all-7g.141gb")[0]["profiles"], serde_json::json!({"7g.141gb": 1}));
    let balanced = layout(&lines, "all-balanced");
    let h200 = balanced.iter().find(|l| l["device_filter"][0] == "0x233510DE").unwrap();
    assert_eq!(h200["profiles"], serde_json::json!({"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}));
    // A single string filter (A30) is kept as written.
    assert!(balanced.iter().any(|l| l["device_filter"] == "0x20B710DE"));

    let (lines, _) = nvidia("gpu_operator_docs_custom-mig-config.yaml");
    assert_eq!(layout(&lines, "five-1g-one-2g")[0]["profiles"], serde_json::json!({"1g.10gb": 5, "2g.20gb": 1}));

    let (lines, _) = nvidia("gpu_operator_docs_mig-cm-values.yaml");
    let custom = layout(&lines, "custom-mig");
    assert_eq!(custom.len(), 4);
    assert_eq!(custom[3]["devices"], serde_json::json!([3]));
    assert_eq!(custom[3]["profiles"], serde_json::json!({"3g.40gb": 1, "4g.40gb": 1}));
}

#[test]
fn gfd_node_labels_without_uid_are_a_record() {
    let (lines, notes) = nvidia("gpu_operator_docs_output_mig-mixed-node-labels.json");
    assert_eq!(lines.len(), 1);
    let r = &lines[0];
    assert_eq!(r["kind"], "node_labels", "no uid: not a fact");
    assert!(r.get("node_uid").is_none() && r.get("event_id").is_none());
    assert_eq!(r["name"], "s4124-0073");
    assert_eq!(r["gpu_product"], "NVIDIA-H100-80GB-HBM3");
    assert_eq!(r["gpu_count"], 1);
    assert_eq!(r["gpu_memory_mib"], 81559);
    assert_eq!(r["mig_strategy"], "mixed");
    assert_eq!(r["sharing_strategy"], "none");
    assert!(notes.contains("without a node UID"), "{notes}");

    let (lines, _) = nvidia("gpu_operator_docs_output_mig-node-labels.json");
    assert_eq!(lines[0]["mig_strategy"], "single");
}

#[test]
fn gfd_node_labels_with_a_uid_are_the_node_fact() {
    let dir = std::env::temp_dir().join(format!("gpuledger-nvidia-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.json");
    let text = std::fs::read_to_string(file("nvidia", "gpu_operator_docs_output_mig-mixed-node-labels.json")).unwrap();
    let labels: Value = serde_json::from_str(text.split_once('\n').unwrap().1).unwrap();
    let node = serde_json::json!({
        "kind": "Node",
        "metadata": {"name": "s4124-0073", "uid": "6f9d4f0a-1111-4a2b-8c3d-0123456789ab",
                     "resourceVersion": "42", "labels": labels},
    });
    std::fs::write(&path, node.to_string()).unwrap();
    let (lines, _) = inspect("node-labels", &path, &[]);
    let (same, _) = inspect("node", &path, &[]);
    assert_eq!(lines, same, "the same fact the node kind gives");
    assert_eq!(lines[0]["kind"], "node_observed");
    assert_eq!(lines[0]["node_uid"], "6f9d4f0a-1111-4a2b-8c3d-0123456789ab");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kubevirt_permitted_devices() {
    let (lines, notes) = nvidia("kubevirt_permitted_host_devices_user_guide.yaml");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["kind"], "permitted_device");
    assert_eq!(lines[0]["resourceName"], "nvidia.com/TU104GL_Tesla_T4");
    assert_eq!(lines[0]["selector"], "10DE:1EB8");
    assert_eq!(lines[0]["mode"], "passthrough");
    assert_eq!(lines[1]["resourceName"], "nvidia.com/GRID_T4-1Q");
    assert_eq!(lines[1]["selector"], "GRID T4-1Q");
    assert_eq!(lines[1]["mode"], "vgpu");
    assert_eq!(lines[1]["vgpu_profile"], "T4-1Q");
    assert!(notes.contains("intel.com/qat"), "{notes}");
}

#[test]
fn kubectl_table_carries_no_facts() {
    let (lines, notes) = nvidia("gpu_operator_docs_output_mig-get-pods.txt");
    assert!(lines.is_empty());
    assert!(notes.contains("kubectl table output carries no allocation facts"), "{notes}");
    assert!(notes.contains("12 row(s)"), "{notes}");
}

#[test]
fn help_lists_the_nvidia_kinds() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuledger-agent")).args(["inspect", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for k in [
        "nvidia-smi",
        "gpu-csv",
        "nvidia-smi-l",
        "device-plugin-config",
        "mig-config",
        "node-labels",
        "kubevirt-config",
        "kubectl-table",
    ] {
        assert!(help.contains(k), "{k} missing from:\n{help}");
    }
}

/// Nodes, a Namespace and Pods in one file are read as the cluster agent reads a cluster: each pod with its node's
/// model and time-slicing (GPU Feature Discovery's labels) and its namespace's UID.
#[test]
fn pods_are_classified_with_their_node_and_namespace_from_the_same_file() {
    let yaml = r#"apiVersion: v1
kind: Node
metadata:
  name: l4-node
  uid: 0b0e8f6a-6a1d-4c37-9d43-6c1e8b7a0f11
  labels:
    nvidia.com/gpu.product: NVIDIA-L4-SHARED
    nvidia.com/gpu.count: "1"
    nvidia.com/gpu.replicas: "4"
    nvidia.com/gpu.sharing-strategy: time-slicing
status:
  allocatable:
    nvidia.com/gpu: "4"
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  uid: 7d4e1c2b-3f5a-4b6c-8d7e-9f0a1b2c3d4e
  creationTimestamp: "2026-10-01T00:00:00Z"
---
apiVersion: v1
kind: Pod
metadata:
  name: infer-0
  namespace: team-a
  uid: 1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b
  creationTimestamp: "2026-10-31T23:00:00Z"
spec:
  nodeName: l4-node
  containers:
  - name: main
    image: example/infer
    resources:
      limits:
        nvidia.com/gpu: 1
status:
  phase: Running
  startTime: "2026-10-31T23:00:00Z"
  containerStatuses:
  - name: main
    ready: true
    restartCount: 0
    image: example/infer
    imageID: ""
    state:
      running:
        startedAt: "2026-10-31T23:00:05Z"
"#;
    let path = std::env::temp_dir().join(format!("gl-inspect-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).unwrap();
    let (facts, notes) = inspect("k8s", &path, &[]);
    let _ = std::fs::remove_file(&path);
    let start = facts
        .iter()
        .find(|f| f["kind"] == "allocation_started")
        .unwrap_or_else(|| panic!("no allocation in {facts:?}; notes: {notes}"));
    assert_eq!(start["mode"]["mode"], "time_slice", "{start}");
    assert_eq!(start["mode"]["replicas"], 4, "{start}");
    assert!(start["gpu_model"].as_str().unwrap_or_default().starts_with("NVIDIA-L4"), "{start}");
    assert_eq!(start["namespace_uid"], "7d4e1c2b-3f5a-4b6c-8d7e-9f0a1b2c3d4e", "{start}");
}
