//! The real `cluster` agent against a stand-in Kubernetes API server (real list/watch wire format) and the
//! real server on PostgreSQL: pods of every Kubernetes sharing mode start and finish, a namespace changes
//! owner, the agent is down while a pod ends and while a pod is deleted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use gpuledger_e2e::{
    fake_kube::FakeKube,
    fresh_database,
    process::{binary, create_token, signal, start_demo, temp_dir},
};
use serde_json::{Value, json};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

struct Agent(Option<Child>);

impl Agent {
    fn start(dir: &Path, server: &str, token: &str, kubeconfig: &Path, log: &str) -> Self {
        let log = std::fs::File::create(dir.join(log)).unwrap();
        let child = Command::new(binary("gpuledger-agent").unwrap())
            .args(["cluster", "--server", server, "--token", token, "--cluster-name", "e2e"])
            .arg("--spool-dir")
            .arg(dir.join("agent"))
            .args(["--poll-ms", "100", "--heartbeat-secs", "1"])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,gpuledger_agent=debug")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        Self(Some(child))
    }

    fn stop(&mut self) {
        let mut child = self.0.take().unwrap();
        signal(child.id(), "TERM").unwrap();
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(30), "agent did not stop");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ts(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap()
}

fn node(name: &str, uid: &str, labels: Value, allocatable: Value) -> Value {
    json!({"metadata": {"name": name, "uid": uid, "labels": labels}, "status": {"allocatable": allocatable}})
}

fn pod(name: &str, uid: &str, node: &str, resource: &str, units: u32, state: Value) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": {"app": name}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {"limits": {resource: units.to_string()}}}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "main", "state": state}]}
    })
}

fn namespace(tenant: &str) -> Value {
    json!({"metadata": {"name": "ml", "uid": NS_UID, "creationTimestamp": "2026-01-01T00:00:00Z",
           "labels": {"gpuledger.io/tenant": tenant}}})
}

const NS_UID: &str = "2c1e5a7b-0f4d-4d7e-9b3a-1a2b3c4d5e6f";
const P1: &str = "a1a1a1a1-0000-4000-8000-000000000001";
const P2: &str = "a1a1a1a1-0000-4000-8000-000000000002";
const P3: &str = "a1a1a1a1-0000-4000-8000-000000000003";

type Row = (String, Option<i64>, Option<i64>, String, Option<OffsetDateTime>, bool, Option<String>, Option<String>);

async fn intervals(pool: &sqlx::PgPool) -> Vec<Row> {
    sqlx::query_as(
        "SELECT holder_name, fraction_num, fraction_den, confidence, ended_at, end_estimated, gpu_class,
                namespace_uid::text
                      FROM allocation_intervals
          WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'e2e')
          ORDER BY holder_name",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn wait_for<F: Fn(&[Row]) -> bool>(pool: &sqlx::PgPool, what: &str, dir: &Path, f: F) -> Vec<Row> {
    let started = Instant::now();
    loop {
        let rows = intervals(pool).await;
        if f(&rows) {
            return rows;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let logs: String = ["agent1.log", "agent2.log", "agent3.log"]
                .iter()
                .map(|l| std::fs::read_to_string(dir.join(l)).unwrap_or_default())
                .collect();
            panic!("timed out waiting for {what}; rows: {rows:?}\nagent logs:\n{logs}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_agent_end_to_end() {
    let dir = temp_dir("gl-e2e-agent").unwrap();
    let db = fresh_database().await.unwrap();
    // The demo seeds organization `demo` (tenants, approved inventory); DATABASE_URL is a superuser URL here,
    // so it migrates and serves as gpuledger_app.
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let token = create_token(&db.admin_url, "agent:e2e").unwrap();
    assert!(token.starts_with("glt_"), "{token}");
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();

    let now = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    let t0 = now - time::Duration::hours(3);
    let kube = FakeKube::start().await.unwrap();
    kube.apply(
        "nodes",
        node(
            "h100-a",
            "b0000000-0000-4000-8000-000000000001",
            json!({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}),
            json!({"nvidia.com/gpu": "8"}),
        ),
    )
    .unwrap();
    kube.apply(
        "nodes",
        node(
            "a100-mig",
            "b0000000-0000-4000-8000-000000000002",
            json!({"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB", "nvidia.com/mig.strategy": "mixed"}),
            json!({"nvidia.com/mig-1g.5gb": "7"}),
        ),
    )
    .unwrap();
    kube.apply("nodes", node("a100-shared", "b0000000-0000-4000-8000-000000000003",
        json!({"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB", "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}),
        json!({"nvidia.com/gpu": "16"}))).unwrap();
    kube.apply("namespaces", namespace("nlp-research")).unwrap();
    let running = json!({"running": {"startedAt": ts(t0)}});
    kube.apply("pods", pod("p1-exclusive", P1, "h100-a", "nvidia.com/gpu", 2, running.clone())).unwrap();
    kube.apply("pods", pod("p2-mig", P2, "a100-mig", "nvidia.com/mig-1g.5gb", 1, running.clone())).unwrap();
    kube.apply("pods", pod("p3-timeslice", P3, "a100-shared", "nvidia.com/gpu", 1, running.clone())).unwrap();
    kube.apply(
        "pods",
        json!({"metadata": {"name": "web", "namespace": "ml", "uid": "a1a1a1a1-0000-4000-8000-0000000000ff"},
        "spec": {"containers": [{"name": "web"}]}, "status": {"phase": "Running"}}),
    )
    .unwrap();
    // A KubeVirt VM with a vGPU, and a Kueue ClusterQueue: optional APIs the agent discovers.
    kube.apply("virtualmachineinstances", json!({
        "metadata": {"name": "vdi-1", "namespace": "ml", "uid": "c0000000-0000-4000-8000-000000000001"},
        "spec": {"domain": {"devices": {"gpus": [{"name": "gpu1", "deviceName": "nvidia.com/GRID_T4-1Q"}]}}},
        "status": {"nodeName": "t4-host", "phaseTransitionTimestamps": [{"phase": "Running", "phaseTransitionTimestamp": ts(t0)}]}
    })).unwrap();
    kube.apply("clusterqueues", json!({
        "metadata": {"name": "team-nlp", "uid": "d0000000-0000-4000-8000-000000000001", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"cohort": "research", "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [
            {"name": "h100", "resources": [{"name": "cpu", "nominalQuota": "64"}, {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4}]}]}]}
    })).unwrap();
    // A DRA pod: its claim (generated from a template) is allocated one whole H100.
    kube.apply("pods", json!({
        "metadata": {"name": "p4-dra", "namespace": "ml", "uid": "a1a1a1a1-0000-4000-8000-000000000004"},
        "spec": {"nodeName": "h100-a", "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                 "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]},
        "status": {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p4-dra-gpu-abcde"}],
                   "containerStatuses": [{"name": "main", "state": running.clone()}]}
    })).unwrap();
    kube.apply("resourceclaims", json!({
        "metadata": {"name": "p4-dra-gpu-abcde", "namespace": "ml", "uid": "e0000000-0000-4000-8000-000000000004"},
        "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "h100-a", "device": "gpu-3"}]}},
                   "reservedFor": [{"resource": "pods", "name": "p4-dra", "uid": "a1a1a1a1-0000-4000-8000-000000000004"}]}
    })).unwrap();
    let kubeconfig = kube.kubeconfig(&dir).unwrap();

    let mut agent = Agent::start(&dir, &server.base, &token, &kubeconfig, "agent1.log");
    let rows = wait_for(&pool, "five intervals", &dir, |r| r.len() == 5).await;
    assert_eq!(rows[3].0, "p4-dra");
    assert_eq!(
        (rows[3].1, rows[3].2, rows[3].3.as_str(), rows[3].6.as_deref()),
        (Some(1), Some(1), "exact", Some("H100-80GB")),
        "a DRA claim's whole GPU"
    );
    assert_eq!(rows[4].0, "vdi-1");
    assert_eq!(
        (rows[4].1, rows[4].2, rows[4].3.as_str(), rows[4].6.as_deref()),
        (Some(1), Some(16), "exact", Some("T4-16GB")),
        "vGPU GRID_T4-1Q is 1/16 of a T4, model inferred from the approved profile"
    );
    let quota: serde_json::Value =
        sqlx::query_scalar("SELECT payload FROM allocation_events WHERE kind = 'quota_observed'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(quota["cluster_queue"], "team-nlp");
    assert_eq!(
        quota["quotas"],
        json!([{"flavor": "h100", "resource": "nvidia.com/gpu", "nominal": 8, "borrowing_limit": 4}])
    );
    assert_eq!(rows[0].0, "p1-exclusive");
    assert_eq!(
        (rows[0].1, rows[0].2, rows[0].3.as_str(), rows[0].6.as_deref()),
        (Some(2), Some(1), "exact", Some("H100-80GB"))
    );
    assert_eq!((rows[1].1, rows[1].2, rows[1].3.as_str()), (Some(1), Some(7), "exact"), "MIG 1g.5gb on an A100 is 1/7");
    assert_eq!((rows[2].1, rows[2].2, rows[2].3.as_str()), (Some(1), Some(4), "modeled"), "one replica of four");
    assert!(rows.iter().all(|r| r.7.as_deref() == Some(NS_UID)), "namespace UID resolved: {rows:?}");

    // A pod finishes while the agent watches: the end is the container's own finishedAt.
    let t1 = now - time::Duration::hours(2);
    kube.apply(
        "pods",
        pod(
            "p1-exclusive",
            P1,
            "h100-a",
            "nvidia.com/gpu",
            2,
            json!({"terminated": {"startedAt": ts(t0), "finishedAt": ts(t1)}}),
        ),
    )
    .unwrap();
    wait_for(&pool, "p1 ended at its finishedAt", &dir, |r| r[0].4 == Some(t1) && !r[0].5).await;

    // The namespace changes owner: the old mapping is closed, a new one opened.
    kube.apply("namespaces", namespace("search-ranking")).unwrap();
    let started = Instant::now();
    loop {
        let owners: Vec<(String, Option<OffsetDateTime>)> = sqlx::query_as(
            "SELECT t.name, o.valid_to FROM namespace_ownership o JOIN tenants t USING (org_id, tenant_id)
              WHERE o.namespace_uid = $1::uuid ORDER BY o.valid_from",
        )
        .bind(NS_UID)
        .fetch_all(&pool)
        .await
        .unwrap();
        if owners.len() == 2 {
            assert_eq!(owners[0].0, "nlp-research");
            assert!(owners[0].1.is_some());
            assert_eq!((owners[1].0.as_str(), owners[1].1), ("search-ranking", None));
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "ownership: {owners:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_hours_split_at_the_owner_change(&pool, t0).await;

    // The agent is down while a pod ends: after restart, the end still comes from the pod's timestamps.
    agent.stop();
    let t2 = now - time::Duration::minutes(90);
    kube.apply_silently(
        "pods",
        pod(
            "p2-mig",
            P2,
            "a100-mig",
            "nvidia.com/mig-1g.5gb",
            1,
            json!({"terminated": {"startedAt": ts(t0), "finishedAt": ts(t2)}}),
        ),
    )
    .unwrap();
    let mut agent = Agent::start(&dir, &server.base, &token, &kubeconfig, "agent2.log");
    wait_for(&pool, "p2 ended at its finishedAt", &dir, |r| r[1].4 == Some(t2) && !r[1].5 && r[1].3 == "exact").await;

    // The agent is down while a pod is deleted: the end is inferred, marked estimated.
    agent.stop();
    kube.delete_silently("pods", P3).unwrap();
    let _agent = Agent::start(&dir, &server.base, &token, &kubeconfig, "agent3.log");
    let rows = wait_for(&pool, "p3 vanished", &dir, |r| r[2].4.is_some()).await;
    assert!(rows[2].5, "end inferred: {rows:?}");
    assert_eq!(rows[2].3, "estimated");
    let end = rows[2].4.unwrap();
    assert!(end >= t0 && end <= OffsetDateTime::now_utc(), "{end}");

    // Every fact was stored once.
    let dup: i64 = sqlx::query_scalar("SELECT count(*) - count(DISTINCT event_id) FROM allocation_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(dup, 0);
    drop(server);
    if std::env::var_os("KEEP_E2E").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("kept {}", dir.display());
    }
}

/// The DRA pod (one whole H100, still running) spans the owner change: the core ledger math over the stored
/// interval and ownership history gives each tenant exactly its side of the boundary.
async fn assert_hours_split_at_the_owner_change(pool: &sqlx::PgPool, t0: OffsetDateTime) {
    use gpuledger_core::{
        allocation::{Allocation, Attribution, Ownership, allocated_hours},
        confidence::Confidence,
        fraction::{Fraction, Quantity},
        ids::{ClusterId, GpuClass, NamespaceUid, TenantId},
        interval::{Interval, Validity},
        sharing::SharingMode,
    };
    let owners: Vec<(uuid::Uuid, OffsetDateTime, Option<OffsetDateTime>, String)> = sqlx::query_as(
        "SELECT o.tenant_id, o.valid_from, o.valid_to, t.name FROM namespace_ownership o
           JOIN tenants t USING (org_id, tenant_id) WHERE o.namespace_uid = $1::uuid ORDER BY o.valid_from",
    )
    .bind(NS_UID)
    .fetch_all(pool)
    .await
    .unwrap();
    let change = owners[1].1;
    let (cluster, started_at): (uuid::Uuid, OffsetDateTime) =
        sqlx::query_as("SELECT cluster_id, started_at FROM allocation_intervals WHERE holder_name = 'p4-dra'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(started_at, t0);
    let end = change + time::Duration::minutes(30);
    let ns = NamespaceUid::from_uuid(NS_UID.parse().unwrap());
    let allocation = Allocation {
        id: "p4-dra".into(),
        cluster: ClusterId::from_uuid(cluster),
        namespace: ns,
        pod: None,
        vm: None,
        gpu: None,
        gpu_class: GpuClass::new("H100-80GB").unwrap(),
        mode: SharingMode::Exclusive,
        fraction: Fraction::ONE,
        interval: Interval::new(started_at, end).unwrap(),
        end_estimated: false,
        confidence: Confidence::Exact,
    };
    let ownerships: Vec<Ownership> = owners
        .iter()
        .map(|(tenant, from, to, _)| Ownership {
            namespace: ns,
            tenant: TenantId::from_uuid(*tenant),
            valid: Validity::new(*from, *to).unwrap(),
        })
        .collect();
    let usage = allocated_hours(&[allocation], &ownerships, Interval::new(t0, end).unwrap()).unwrap();
    let of = |i: usize| {
        usage
            .iter()
            .find(|u| u.attribution == Attribution::Tenant { tenant: TenantId::from_uuid(owners[i].0) })
            .map(|u| u.gpu_time)
            .unwrap()
    };
    let nanos = |d: time::Duration| d.whole_nanoseconds();
    assert_eq!(of(0), Quantity::held(Fraction::ONE, nanos(change - t0)).unwrap(), "before the change: {}", owners[0].3);
    assert_eq!(of(1), Quantity::held(Fraction::ONE, nanos(end - change)).unwrap(), "after the change: {}", owners[1].3);
}
