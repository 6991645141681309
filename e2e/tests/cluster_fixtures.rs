//! Real Kubernetes objects from ../shared/fixtures/k8s served by the stand-in API server and watched by the real
//! `cluster` agent: a Run:ai MIG pod on its live MIG node, and a Run:ai fractional pod; and the repository's own
//! soft-sharing objects (HAMi, Volcano vGPU, Alibaba gpushare, GFD time-slicing and MPS nodes) priced by their share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use gpuledger_e2e::{
    fake_kube::FakeKube,
    fresh_database,
    process::{create_token, signal, start_cluster_agent, start_demo, temp_dir},
};
use serde_json::json;
use time::{OffsetDateTime, macros::datetime};

fn fixture(name: &str) -> Vec<serde_json::Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/k8s").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    gpuledger_agent::inspect::read_documents(&text).unwrap()
}

type Row =
    (String, String, Option<String>, Option<i64>, Option<i64>, String, OffsetDateTime, Vec<String>, Option<String>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runai_fixture_pods_on_their_live_node() {
    let dir = temp_dir("gl-e2e-fixtures").unwrap();
    let db = fresh_database().await.unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    // The approved inventory gets the fixture node's model: A100-SXM4-40GB, where 1g.5gb is 1/7.
    for statement in [
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class)
           SELECT org_id, 'NVIDIA A100-SXM4-40GB', '2020-01-01Z', 'A100-40GB' FROM organizations",
        "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
           SELECT org_id, 'NVIDIA A100-SXM4-40GB', '1g.5gb', '2020-01-01Z', 1, 7 FROM organizations",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    let token = create_token(&db.admin_url, "agent:fixtures").unwrap();

    let kube = FakeKube::start().await.unwrap();
    for doc in fixture("node_live_runai_mig_3_instances.yaml") {
        kube.apply("nodes", doc).unwrap();
    }
    for (ns, uid, tenant) in [
        ("runai-team-a", "3a000000-0000-4000-8000-000000000001", "vision-research"),
        ("runai-pa", "3a000000-0000-4000-8000-000000000002", "search-ranking"),
    ] {
        kube.apply(
            "namespaces",
            json!({"metadata": {"name": ns, "uid": uid, "creationTimestamp": "2023-01-01T00:00:00Z",
            "labels": {"gpuledger.io/tenant": tenant}}}),
        )
        .unwrap();
    }
    for file in ["pod_live_runai_mig_1g5gb.yaml", "pod_live_runai_fractional_gpu_0.5.yaml"] {
        for doc in fixture(file) {
            kube.apply("pods", doc).unwrap();
        }
    }
    let mut agent =
        start_cluster_agent(&dir, &server.base, &token, "fixtures", &kube.kubeconfig(&dir).unwrap(), &[]).unwrap();

    let started = Instant::now();
    let rows: Vec<Row> = loop {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT holder_name, sharing_mode, profile, fraction_num, fraction_den, confidence, started_at, device_ids,
                    namespace_uid::text
               FROM allocation_intervals WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'fixtures')
              ORDER BY holder_name",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if rows.len() == 2 {
            break rows;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{rows:?}\n{}",
            std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    signal(agent.id(), "TERM").unwrap();
    let _ = agent.wait();

    let frac = &rows[0];
    assert_eq!(frac.0, "frac-1-0-0");
    // Run:ai's gpu-fraction "0.5" is a soft share of half a GPU.
    assert_eq!((frac.1.as_str(), frac.3, frac.4, frac.5.as_str()), ("soft_share", Some(1), Some(2), "modeled"));
    assert_eq!(frac.6, datetime!(2024-03-31 09:03:51 UTC));
    assert_eq!(frac.8.as_deref(), Some("3a000000-0000-4000-8000-000000000002"));
    let mig = &rows[1];
    assert_eq!(mig.0, "job-2-0-0");
    assert_eq!(
        (mig.1.as_str(), mig.2.as_deref(), mig.3, mig.4, mig.5.as_str()),
        ("mig", Some("1g.5gb"), Some(1), Some(7), "exact")
    );
    assert_eq!(mig.6, datetime!(2023-01-19 07:56:55 UTC));
    assert_eq!(mig.7, vec!["MIG-28810d46-0180-5139-a975-020bdc7f9cb1".to_string()]);
    // The live node's labels were recorded too.
    let (strategy, product): (Option<String>, Option<String>) =
        sqlx::query_as("SELECT mig_strategy, gpu_product FROM nodes WHERE name = 'qa-mig-worker-gpu-a100'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((strategy.as_deref(), product.as_deref()), (Some("mixed"), Some("NVIDIA-A100-SXM4-40GB")));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// HAMi, Volcano vGPU, Alibaba gpushare and GFD-labelled time-slicing/MPS objects as those projects write them,
/// watched by the real cluster agent, stored with the fraction each pays under the default share basis (the larger
/// of compute and memory) and the explanation of how it was made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_sharing_objects_are_priced_by_their_share() {
    let dir = temp_dir("gl-e2e-soft").unwrap();
    let db = fresh_database().await.unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    let token = create_token(&db.admin_url, "agent:soft").unwrap();
    let kube = FakeKube::start().await.unwrap();
    kube.apply(
        "namespaces",
        json!({"metadata": {"name": "nlp-research", "uid": "5b0c8a9e-1111-4c1e-9d7a-000000000001",
        "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"gpuledger.io/tenant": "nlp-research"}}}),
    )
    .unwrap();
    let own = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/fixtures/k8s");
    let mut pods = 0;
    for file in ["hami_vgpu_pods.yaml", "volcano_vgpu_pods.yaml", "gpushare_pods.yaml", "gfd_mps_and_timeslicing.yaml"]
    {
        let text = std::fs::read_to_string(own.join(file)).unwrap();
        for doc in gpuledger_agent::inspect::read_documents(&text).unwrap() {
            match doc["kind"].as_str() {
                Some("Node") => kube.apply("nodes", doc).unwrap(),
                Some("Pod") => {
                    pods += 1;
                    kube.apply("pods", doc).unwrap()
                }
                other => panic!("{file}: unexpected {other:?}"),
            }
        }
    }
    let mut agent =
        start_cluster_agent(&dir, &server.base, &token, "soft", &kube.kubeconfig(&dir).unwrap(), &[]).unwrap();
    type SoftRow = (String, String, Option<i64>, Option<i64>, Option<String>, Option<String>);
    let started = Instant::now();
    let rows: Vec<SoftRow> = loop {
        let rows: Vec<SoftRow> = sqlx::query_as(
            "SELECT holder_name, sharing_mode, fraction_num, fraction_den, gpu_class, share
               FROM allocation_intervals WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'soft')
              ORDER BY holder_name",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if rows.len() == pods {
            break rows;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{rows:?}\n{}",
            std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    signal(agent.id(), "TERM").unwrap();
    let _ = agent.wait();
    let get = |name: &str| rows.iter().find(|r| r.0 == name).unwrap_or_else(|| panic!("{name}: {rows:?}"));
    // HAMi: 2 vGPUs × the larger of 30 % compute and 3000 of 23,034 MiB (13 %) = 3/5 of an L4.
    let hami = get("gpu-pod");
    assert_eq!((hami.1.as_str(), hami.2, hami.3, hami.4.as_deref()), ("soft_share", Some(3), Some(5), Some("L4-24GB")));
    assert_eq!(
        hami.5.as_deref(),
        Some(
            "hami: compute 30 %, memory 3000 MiB of 23034 MiB = 13.02 % → the larger of the compute and memory shares: 30 %"
        )
    );
    let pct = get("gpu-pod-percentage");
    assert_eq!((pct.2, pct.3), (Some(1), Some(2)));
    // Volcano: 2 vGPUs × the larger of 50 % and 3000 of 81,920 MiB = 1 A100.
    let volcano = get("test1");
    assert_eq!((volcano.2, volcano.3, volcano.4.as_deref()), (Some(1), Some(1), Some("A100-80GB")));
    // gpushare: 3 of the device's 15 GiB = 1/5 (GFD's Tesla-T4 label is the inventory's "Tesla T4").
    let share = get("binpack-1-5d9b5f7c4-abcde");
    assert_eq!((share.2, share.3, share.4.as_deref()), (Some(1), Some(5), Some("T4-16GB")));
    // GFD: MPS with 10 replicas and time-slicing with 4.
    let mps = get("mps-client-0");
    assert_eq!((mps.1.as_str(), mps.2, mps.3), ("time_slice", Some(1), Some(10)));
    let ts = get("time-slicing-verification-0");
    assert_eq!((ts.1.as_str(), ts.2, ts.3, ts.4.as_deref()), ("time_slice", Some(1), Some(4), Some("L4-24GB")));

    // Utilization of a soft share from its own processes: the real node agent on gpu-node-7 (simulated GPUs, the
    // NVML code path) sees PID 4242 of the running HAMi pod at 20 % of GPU 0's SMs — 40 % of its half — and a host
    // process at 70 % that is nobody's. Pods are found from the processes' cgroups under --host-proc.
    const RUNNING: &str = "6a0f4b1c-8d2e-4f3a-9b5c-0e1d2f3a4b5d";
    let proc_root = dir.join("proc");
    std::fs::create_dir_all(proc_root.join("4242")).unwrap();
    std::fs::write(
        proc_root.join("4242/cgroup"),
        format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-0f3e.scope\n",
            RUNNING.replace('-', "_")
        ),
    )
    .unwrap();
    std::fs::create_dir_all(proc_root.join("777")).unwrap();
    std::fs::write(proc_root.join("777/cgroup"), "0::/system.slice/nvidia-persistenced.service\n").unwrap();
    let node_log = std::fs::File::create(dir.join("node.log")).unwrap();
    let mut node = std::process::Command::new(gpuledger_e2e::process::binary("gpuledger-agent").unwrap())
        .args(["node", "--source", "simulated", "--simulate-gpus", "2", "--simulate-model", "NVIDIA L4"])
        .args(["--node-name", "gpu-node-7", "--simulate-process", "0:4242:20,1:777:70", "--server", &server.base])
        .args(["--token", &token, "--sample-secs", "1", "--window-secs", "2", "--poll-ms", "200"])
        .arg("--host-proc")
        .arg(&proc_root)
        .arg("--spool-dir")
        .arg(dir.join("node-spool"))
        .stdout(std::process::Stdio::from(node_log.try_clone().unwrap()))
        .stderr(std::process::Stdio::from(node_log))
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let windows: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM process_windows WHERE node = 'gpu-node-7' AND gpu_uuid LIKE '%000000000000'
                AND pods @> jsonb_build_array(jsonb_build_object('pod_uid', $1::text))",
        )
        .bind(RUNNING)
        .fetch_one(&pool)
        .await
        .unwrap();
        if windows >= 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{windows} process windows\n{}",
            std::fs::read_to_string(dir.join("node.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    signal(node.id(), "TERM").unwrap();
    let _ = node.wait();
    // GPU 1 was sampled too, with nobody's work on it (the host process is no pod).
    let other: Vec<serde_json::Value> = sqlx::query_scalar(
        "SELECT pods FROM process_windows WHERE node = 'gpu-node-7' AND gpu_uuid LIKE '%000000000001'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(!other.is_empty() && other.iter().all(|p| p == &json!([])), "{other:?}");
    let admin = create_token(&db.admin_url, "admin").unwrap();
    let month = OffsetDateTime::now_utc();
    let report: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/api/v1/analytics/utilization", server.base))
        .query(&[("period", format!("{}-{:02}", month.year(), u8::from(month.month())))])
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let row = report["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["allocation_id"].as_str().is_some_and(|a| a.starts_with(RUNNING)))
        .unwrap_or_else(|| panic!("no row for the running HAMi pod: {report:#}"));
    assert_eq!(row["not_measured"], serde_json::Value::Null, "{row:#}");
    let observed: f64 = row["observed_gpu_hours"].as_str().unwrap().parse().unwrap();
    let active: f64 = row["active_equivalent_gpu_hours"].as_str().unwrap().parse().unwrap();
    assert!(observed > 0.0, "{row:#}");
    // 20 % of the GPU is 40 % of the pod's half (utilization is kept in permille).
    assert!((active / observed - 0.4).abs() < 0.01, "active {active} of observed {observed}: {row:#}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
