//! Real Kubernetes objects from ../shared/fixtures/k8s served by the stand-in API server and watched by the real
//! `cluster` agent: a Run:ai MIG pod on its live MIG node, and a Run:ai fractional pod.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use gpuledger_e2e::{
    fake_kube::FakeKube,
    fresh_database,
    process::{binary, create_token, signal, start_demo, temp_dir},
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
    let log = std::fs::File::create(dir.join("agent.log")).unwrap();
    let mut agent = Command::new(binary("gpuledger-agent").unwrap())
        .args([
            "cluster",
            "--server",
            &server.base,
            "--token",
            &token,
            "--cluster-name",
            "fixtures",
            "--poll-ms",
            "100",
        ])
        .arg("--spool-dir")
        .arg(dir.join("agent"))
        .env("KUBECONFIG", kube.kubeconfig(&dir).unwrap())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();

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
    assert_eq!((frac.1.as_str(), frac.3, frac.4, frac.5.as_str()), ("time_slice", Some(1), Some(2), "modeled"));
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
