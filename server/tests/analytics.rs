//! Utilization analytics over HTTP, against real PostgreSQL as the app role: facts go in through the real ingest
//! endpoint (allocation starts and ends, namespace owners, a MIG device, telemetry), and the numbers that come out
//! of `GET /api/v1/analytics/utilization` are checked by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    fraction::Fraction,
    ids::{MigProfile, OrgId},
    sharing::{SharingMode, SoftScheduler},
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AttributionLabels, Batch, DeviceFact, EndReason, EndpointTotalsFact,
        Fact, FactBody, Holder, MigDeviceFact, NamespaceFact, PodActivity, ProcessTelemetry, ServiceUsageFact, Stat,
        TelemetryRollup, WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
};
use serde_json::Value;
use time::{Duration, OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

const H100: &str = "NVIDIA H100 80GB HBM3";
const GPU_A: &str = "GPU-aaaaaaaa-0000-0000-0000-000000000001";
const GPU_B: &str = "GPU-bbbbbbbb-0000-0000-0000-000000000002";
const GPU_C: &str = "GPU-cccccccc-0000-0000-0000-000000000003";
const GPU_D: &str = "GPU-dddddddd-0000-0000-0000-000000000004";
const MIG_B: &str = "MIG-0b0b0b0b-1111-2222-3333-444444444444";
const ALPHA: Uuid = Uuid::from_u128(0xa1);
const BETA: Uuid = Uuid::from_u128(0xb2);

struct Env {
    app: axum::Router,
    agent: String,
    admin: String,
    export: String,
    db: gpuledger_server::db::Database,
    org: OrgId,
    _db: gpuledger_e2e::TestDatabase,
}

/// A fresh organization of its own: two tenants, one cluster, an H100 class and its 3g.40gb MIG profile (3/7).
async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "util", "Util").await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let o = org.as_uuid();
    let dept = Uuid::new_v4();
    sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')")
        .bind(o)
        .bind(dept)
        .execute(tx.conn())
        .await
        .unwrap();
    for (id, name) in [(ALPHA, "alpha"), (BETA, "beta")] {
        sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, $4)")
            .bind(o)
            .bind(id)
            .bind(dept)
            .bind(name)
            .execute(tx.conn())
            .await
            .unwrap();
    }
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')")
        .bind(o)
        .execute(tx.conn())
        .await
        .unwrap();
    let since = datetime!(2025-01-01 00:00 UTC);
    sqlx::query("INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, $2, $3, 'H100-80GB')")
        .bind(o)
        .bind(H100)
        .bind(since)
        .execute(tx.conn())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
         VALUES ($1, $2, '3g.40gb', $3, 3, 7)",
    )
    .bind(o)
    .bind(H100)
    .bind(since)
    .execute(tx.conn())
    .await
    .unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "powerbi", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let app = app::router(
        AppState::new(db.clone(), None),
        &HttpOptions { body_limit: 4 * 1024 * 1024, ..HttpOptions::default() },
    );
    Env { app, agent, admin, export, db, org, _db: test_db }
}

fn namespace(uid: Uuid, tenant: &str, since: OffsetDateTime) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), tenant]),
        observed_at: since,
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: "ml-team".into(),
            created_at: datetime!(2026-09-01 00:00 UTC),
            deleted_at: None,
            labels: AttributionLabels { tenant: Some(tenant.into()), ..Default::default() },
            labels_since: since,
        }),
    }
}

/// An allocation that started and ended, as two facts.
fn held(
    pod: &str,
    ns: Uuid,
    mode: SharingMode,
    device: &str,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> (String, [Fact; 2]) {
    let resource = match &mode {
        SharingMode::Mig { profile } => format!("nvidia.com/mig-{profile}"),
        _ => "nvidia.com/gpu".into(),
    };
    let allocation_id = format!("{pod}/main/{resource}");
    let start = Fact {
        event_id: event_id("alloc-start", &[&allocation_id]),
        observed_at: from,
        body: FactBody::AllocationStarted(AllocationStart {
            allocation_id: allocation_id.clone(),
            holder: Holder::Pod,
            holder_uid: Uuid::new_v4(),
            holder_name: pod.into(),
            namespace: "ml-team".into(),
            namespace_uid: Some(ns),
            container: Some("main".into()),
            node: Some("node-1".into()),
            resource,
            units: 1,
            mode,
            gpu_model: Some(H100.into()),
            device_ids: vec![device.into()],
            started_at: from,
            labels: AttributionLabels::default(),
        }),
    };
    let end = Fact {
        event_id: event_id("alloc-end", &[&allocation_id]),
        observed_at: to,
        body: FactBody::AllocationEnded(AllocationEnd {
            allocation_id: allocation_id.clone(),
            ended_at: to,
            reason: EndReason::Finished,
        }),
    };
    (allocation_id, [start, end])
}

/// Hourly whole-GPU rollups at `pct` over `[from, to)`.
fn telemetry(gpu: &str, from: OffsetDateTime, to: OffsetDateTime, pct: f64) -> Vec<Fact> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        out.push(Fact {
            event_id: event_id("telemetry", &[gpu, "-", &t.unix_timestamp().to_string()]),
            observed_at: t + Duration::hours(1),
            body: FactBody::Telemetry(TelemetryRollup {
                node: "node-1".into(),
                gpu_uuid: gpu.into(),
                gpu_instance_id: None,
                mig_profile: None,
                window_start: t,
                window_end: t + Duration::hours(1),
                samples: 360,
                utilization_pct: Some(Stat { min: pct, avg: pct, max: pct }),
                memory_used_mib: None,
                power_w: None,
                energy_j: None,
                pod: None,
            }),
        });
        t += Duration::hours(1);
    }
    out
}

async fn send(env: &Env, facts: Vec<Fact>) {
    let ack = post_batch(env, facts).await;
    assert_eq!(ack["flagged"].as_array().map(Vec::len), Some(0), "{ack}");
}

async fn post_batch(env: &Env, facts: Vec<Fact>) -> Value {
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    let req = Request::post("/api/v1/ingest/batches")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", env.agent))
        .body(Body::from(serde_json::to_vec(&batch).unwrap()))
        .unwrap();
    let response = env.app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

async fn get(env: &Env, token: Option<&str>, query: &str) -> (StatusCode, String, Value) {
    get_at(env, token, &format!("/api/v1/analytics/utilization?{query}")).await
}

async fn get_at(env: &Env, token: Option<&str>, uri: &str) -> (StatusCode, String, Value) {
    let mut req = Request::get(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let response = env.app.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    (status, content_type, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn row<'a>(report: &'a Value, allocation_id: &str, tenant: &str) -> &'a Value {
    report["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["allocation_id"] == allocation_id && r["tenant_name"] == tenant)
        .unwrap_or_else(|| panic!("no row {allocation_id} for {tenant} in {report:#}"))
}

fn numbers(r: &Value) -> [&str; 5] {
    ["allocated_gpu_hours", "active_equivalent_gpu_hours", "observed_hours", "observed_gpu_hours", "idle_gpu_hours"]
        .map(|k| r[k].as_str().unwrap_or_else(|| panic!("{k} missing in {r}")))
}

#[tokio::test]
async fn idle_reservations_and_active_equivalent_hours_by_hand() {
    let env = env().await;
    let ns = Uuid::new_v4();
    let at =
        |d: u8, h: u8| datetime!(2026-10-01 00:00 UTC) + Duration::days(i64::from(d) - 1) + Duration::hours(h.into());

    // Owners: alpha from September, beta from 10 October 00:00.
    let mut facts = vec![namespace(ns, "alpha", datetime!(2026-09-01 00:00 UTC)), namespace(ns, "beta", at(10, 0))];
    // The H100 with a 3g.40gb MIG device whose UUID the allocation names.
    facts.push(Fact {
        event_id: event_id("device", &[GPU_B, "1"]),
        observed_at: datetime!(2026-09-15 00:00 UTC),
        body: FactBody::DeviceObserved(DeviceFact {
            node: "node-1".into(),
            gpu_uuid: GPU_B.into(),
            model: H100.into(),
            index: Some(1),
            memory_mib: Some(81_559),
            mig_enabled: true,
            mig_devices: vec![MigDeviceFact {
                profile: "3g.40gb".into(),
                gpu_instance_id: 2,
                compute_instance_id: Some(0),
                uuid: Some(MIG_B.into()),
            }],
            vgpu_profile: None,
        }),
    });
    // A: an idle notebook, one GPU for 10 h at 2 %.
    let (a, f) = held("notebook", ns, SharingMode::Exclusive, GPU_A, at(5, 0), at(5, 10));
    facts.extend(f);
    facts.extend(telemetry(GPU_A, at(5, 0), at(5, 10), 2.0));
    // B: a 3/7 MIG slice, 7 h, its GPU busy at 70 %.
    let mig = SharingMode::Mig { profile: MigProfile::new("3g.40gb").unwrap() };
    let (b, f) = held("trainer", ns, mig, MIG_B, at(6, 0), at(6, 7));
    facts.extend(f);
    // DCGM's GPU-instance rows (GPU_I_ID 2) say the slice is busy at 70 %; the parent's own row (10 %) measures the
    // whole GPU, neighbours included, and must not be credited to the slice.
    let mut instance = telemetry(GPU_B, at(6, 0), at(6, 7), 70.0);
    for f in &mut instance {
        if let FactBody::Telemetry(t) = &mut f.body {
            t.gpu_instance_id = Some(2);
            t.mig_profile = Some("3g.40gb".into());
        }
        f.event_id = event_id("telemetry-gi", &[&f.event_id]);
    }
    facts.extend(instance);
    facts.extend(telemetry(GPU_B, at(6, 0), at(6, 7), 10.0));
    // C: crosses into October (30 Sep 22:00 → 1 Oct 02:00), idle throughout: two hours count.
    let (c, f) = held("overnight", ns, SharingMode::Exclusive, GPU_C, at(1, 0) - Duration::hours(2), at(1, 2));
    facts.extend(f);
    facts.extend(telemetry(GPU_C, at(1, 0) - Duration::hours(2), at(1, 2), 0.0));
    // D: no telemetry, 9 Oct 20:00 → 10 Oct 04:00, split by the owner change: 4 h each.
    let (d, f) = held("dark", ns, SharingMode::Exclusive, GPU_D, at(9, 20), at(10, 4));
    facts.extend(f);
    // E: a quiet first hour (1 %), then a busy one (90 %). Analytics read the hourly tier, so an idle stretch is
    // whole hours: one hour, as long as the default minimum.
    let (e, f) = held("bursty", ns, SharingMode::Exclusive, GPU_A, at(12, 0), at(12, 2));
    facts.extend(f);
    facts.extend(telemetry(GPU_A, at(12, 0), at(12, 1), 1.0));
    facts.extend(telemetry(GPU_A, at(12, 1), at(12, 2), 90.0));
    send(&env, facts).await;

    let (status, _, report) = get(&env, Some(&env.admin), "period=2026-10").await;
    assert_eq!(status, StatusCode::OK, "{report:#}");
    assert_eq!(report["period"], "2026-10");
    assert_eq!(report["threshold"], "5.0");
    assert_eq!(report["min_idle_hours"], "1.000000");
    assert_eq!(report["total"], 6, "{report:#}");
    assert_eq!(report["without_fraction"], 0);

    // [allocated, active-equivalent, observed h, observed GPU-h, idle]
    let ra = row(&report, &a, "alpha");
    assert_eq!(numbers(ra), ["10.000000", "0.200000", "10.000000", "10.000000", "10.000000"]);
    assert_eq!(ra["idle"], true);
    assert_eq!(ra["idle_stretches"][0]["from"], "2026-10-05T00:00:00Z");
    assert_eq!(ra["idle_stretches"][0]["to"], "2026-10-05T10:00:00Z");
    assert_eq!(ra["gpu_class"], "H100-80GB");
    assert_eq!(ra["fraction"], "1");

    let rb = row(&report, &b, "alpha");
    // 3/7 × 7 h = 3; × 0.7 = 2.1; the instance's own telemetry, found through the MIG device's parent and GPU_I_ID.
    assert_eq!(numbers(rb), ["3.000000", "2.100000", "7.000000", "3.000000", "0.000000"]);
    assert_eq!(rb["fraction"], "3/7");
    assert_eq!(rb["devices"][0], MIG_B);
    assert_eq!(rb["idle"], false);

    let rc = row(&report, &c, "alpha");
    assert_eq!(numbers(rc), ["2.000000", "0.000000", "2.000000", "2.000000", "2.000000"]);
    assert_eq!(rc["from"], "2026-10-01T00:00:00Z");

    let rd_alpha = row(&report, &d, "alpha");
    let rd_beta = row(&report, &d, "beta");
    for r in [rd_alpha, rd_beta] {
        assert_eq!(numbers(r), ["4.000000", "0.000000", "0.000000", "0.000000", "0.000000"]);
        assert_eq!(r["idle"], false, "no telemetry is not idle");
        let why = r["not_measured"].as_str().unwrap();
        assert!(why.starts_with("no telemetry for GPU-") && why.contains("DCGM exporter"), "{why}");
    }
    assert_eq!(rb["not_measured"], Value::Null, "measured: no reason");
    assert_eq!(rd_alpha["to"], "2026-10-10T00:00:00Z");
    assert_eq!(rd_beta["from"], "2026-10-10T00:00:00Z");

    let re = row(&report, &e, "beta");
    // 1 h × 0.01 + 1 h × 0.9 = 0.91; the quiet hour is an idle stretch of the default minimum (1 h).
    assert_eq!(numbers(re), ["2.000000", "0.910000", "2.000000", "2.000000", "1.000000"]);
    assert_eq!(re["idle_stretches"][0]["from"], "2026-10-12T00:00:00Z");
    assert_eq!(re["idle_stretches"][0]["to"], "2026-10-12T01:00:00Z");

    // Most idle first.
    let order: Vec<&str> =
        report["allocations"].as_array().unwrap().iter().map(|r| r["allocation_id"].as_str().unwrap()).collect();
    assert_eq!(&order[..2], [a.as_str(), c.as_str()]);

    // Tenants: alpha = A + B + C + D's first half; beta = D's second half + E.
    let tenants = report["tenants"].as_array().unwrap();
    let alpha = tenants.iter().find(|t| t["tenant_name"] == "alpha").unwrap();
    assert_eq!(alpha["tenant_id"], ALPHA.to_string());
    assert_eq!((alpha["allocations"].as_u64(), alpha["idle_allocations"].as_u64()), (Some(4), Some(2)));
    assert_eq!(alpha["allocated_gpu_hours"], "19.000000");
    assert_eq!(alpha["active_equivalent_gpu_hours"], "2.300000");
    assert_eq!(alpha["observed_gpu_hours"], "15.000000");
    assert_eq!(alpha["idle_gpu_hours"], "12.000000");
    let beta = tenants.iter().find(|t| t["tenant_name"] == "beta").unwrap();
    assert_eq!((beta["allocations"].as_u64(), beta["idle_allocations"].as_u64()), (Some(2), Some(1)));
    assert_eq!(beta["allocated_gpu_hours"], "6.000000");
    assert_eq!(beta["active_equivalent_gpu_hours"], "0.910000");
    assert_eq!(beta["idle_gpu_hours"], "1.000000");
    assert_eq!(tenants.len(), 2);

    // With a 90-minute minimum, E's quiet hour is no idle stretch.
    let (_, _, r) = get(&env, Some(&env.export), "period=2026-10&min_idle_hours=1.5").await;
    assert_eq!(row(&r, &e, "beta")["idle_gpu_hours"], "0.000000");
    assert_eq!(row(&r, &a, "alpha")["idle_gpu_hours"], "10.000000");
    assert_eq!(r["min_idle_hours"], "1.500000");
    // A threshold under 2 % leaves the notebook busy.
    let (_, _, r) = get(&env, Some(&env.export), "period=2026-10&idle_threshold_pct=1.5").await;
    assert_eq!(row(&r, &a, "alpha")["idle"], false);
    assert_eq!(r["threshold"], "1.5");

    // One tenant, paged.
    let (status, _, r) = get(&env, Some(&env.export), &format!("period=2026-10&tenant={BETA}&per_page=1&page=2")).await;
    assert_eq!(status, StatusCode::OK, "{r:#}");
    assert_eq!((r["total"].as_u64(), r["page"].as_u64(), r["per_page"].as_u64()), (Some(2), Some(2), Some(1)));
    assert_eq!(r["allocations"].as_array().unwrap().len(), 1);
    assert_eq!(r["tenants"].as_array().unwrap().len(), 1);
    assert_eq!(r["tenants"][0]["tenant_name"], "beta");

    // September sees only C's first two hours.
    let (_, _, r) = get(&env, Some(&env.admin), "period=2026-09").await;
    assert_eq!(r["total"], 1);
    assert_eq!(numbers(row(&r, &c, "alpha")), ["2.000000", "0.000000", "2.000000", "2.000000", "2.000000"]);

    summaries_equal_the_report(&env, &report).await;
}

/// The month's report and its summary per tenant (the read model's) are computed a chunk of allocations at a time,
/// with the hours of their devices from a temporary file: the same answers however the month is cut (`report` was
/// asked for in one chunk), and pages reach the 100,000 most idle rows.
async fn summaries_equal_the_report(env: &Env, report: &Value) {
    let (status, _, refused) = get(env, Some(&env.admin), "period=2026-10&page=1001&per_page=100").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["field"], "page", "{refused}");
    for chunk in [1, 2, 50_000] {
        gpuledger_server::analytics::set_summary_chunk(chunk);
        for query in ["period=2026-10", "period=2026-10&per_page=1&page=2"] {
            let (status, _, again) = get(env, Some(&env.admin), query).await;
            assert_eq!(status, StatusCode::OK, "{again}");
            let (_, _, whole) = {
                gpuledger_server::analytics::set_summary_chunk(1_000_000);
                let w = get(env, Some(&env.admin), query).await;
                gpuledger_server::analytics::set_summary_chunk(chunk);
                w
            };
            assert_eq!(again, whole, "{query} in chunks of {chunk}");
        }
        let (_, _, again) = get(env, Some(&env.admin), "period=2026-10").await;
        assert_eq!(&again, report, "chunks of {chunk}");
        let mut tx = env.db.begin_org(env.org).await.unwrap();
        let (head, rows) = gpuledger_server::analytics::utilization_summary(
            &mut tx,
            gpuledger_core::Period::parse("2026-10").unwrap(),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let tenants: Vec<Value> = rows.into_iter().map(|(_, t)| serde_json::to_value(t).unwrap()).collect();
        assert_eq!(Value::Array(tenants), report["tenants"], "chunks of {chunk}");
        assert_eq!(serde_json::to_value(&head).unwrap()["without_fraction"], report["without_fraction"]);
    }
}

/// A soft share of `pct` % of a GPU's compute, held by pod `uid` on `node`.
fn soft(
    pod: &str,
    uid: Uuid,
    node: &str,
    ns: Uuid,
    pct: i128,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> (String, [Fact; 2]) {
    let mode = SharingMode::SoftShare {
        scheduler: SoftScheduler::Hami,
        compute: Some(Fraction::new(pct, 100).unwrap()),
        memory: None,
        memory_mib: None,
    };
    let (id, [mut start, end]) = held(pod, ns, mode, GPU_C, from, to);
    if let FactBody::AllocationStarted(s) = &mut start.body {
        s.holder_uid = uid;
        s.node = Some(node.into());
    }
    (id, [start, end])
}

/// One GPU's per-process window as the node agent reports it.
fn processes(node: &str, gpu: &str, from: OffsetDateTime, to: OffsetDateTime, pods: &[(Uuid, f64)]) -> Fact {
    Fact {
        event_id: event_id("process-window", &[node, gpu, &from.unix_timestamp().to_string()]),
        observed_at: to,
        body: FactBody::ProcessTelemetry(ProcessTelemetry {
            node: node.into(),
            gpu_uuid: gpu.into(),
            window_start: from,
            window_end: to,
            samples: 360,
            pods: pods
                .iter()
                .map(|&(pod_uid, pct)| PodActivity {
                    pod_uid,
                    sm_pct: Stat { min: pct, avg: pct, max: pct },
                    memory_pct: None,
                })
                .collect(),
        }),
    }
}

#[tokio::test]
async fn soft_shared_pods_are_measured_by_their_own_processes() {
    let env = env().await;
    let ns = Uuid::new_v4();
    let (p1, p2, p3) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (from, to) = (datetime!(2026-10-06 00:00 UTC), datetime!(2026-10-06 04:00 UTC));
    let mut facts = vec![namespace(ns, "alpha", datetime!(2026-09-01 00:00 UTC))];
    let (a, fa) = soft("notebook-a", p1, "node-1", ns, 30, from, to);
    let (b, fb) = soft("notebook-b", p2, "node-1", ns, 50, from, to);
    let (c, fc) = soft("notebook-c", p3, "node-2", ns, 25, from, to);
    facts.extend(fa);
    facts.extend(fb);
    facts.extend(fc);
    // The GPU itself is 90 % busy: that is everyone's work, never credited to one soft share.
    facts.extend(telemetry(GPU_C, from, to, 90.0));
    // node-1's processes sampled for three of the four hours: A keeps 15 % of the SMs busy throughout; B nothing in
    // the first hour (absent), then 60 % — more than its 50 % share.
    for h in 0..3 {
        let w = from + Duration::hours(h);
        let mut pods = vec![(p1, 15.0)];
        if h > 0 {
            pods.push((p2, 60.0));
        }
        // A pod of another node is ignored here.
        pods.push((Uuid::new_v4(), 5.0));
        facts.push(processes("node-1", GPU_C, w, w + Duration::hours(1), &pods));
    }
    send(&env, facts.clone()).await;
    // Re-sent windows are stored once.
    let again =
        post_batch(&env, facts.iter().filter(|f| f.body.kind() == "process_telemetry").cloned().collect()).await;
    assert_eq!(again["stored"], 0, "{again}");

    let (status, _, report) = get(&env, Some(&env.admin), "period=2026-10").await;
    assert_eq!(status, StatusCode::OK, "{report}");
    // A: 0.3 × 4 h = 1.2 allocated; 3 h observed (0.9 GPU-h); 15 % of the GPU is 50 % of its share: 0.45 active.
    let ra = row(&report, &a, "alpha");
    assert_eq!(&numbers(ra)[..4], ["1.200000", "0.450000", "3.000000", "0.900000"]);
    assert_eq!(ra["not_measured"], Value::Null);
    // B: 0.5 × 4 = 2; hour 0 idle, hours 1–2 capped at its whole share: 0.5 × 2 h = 1.0 active.
    let rb = row(&report, &b, "alpha");
    assert_eq!(&numbers(rb)[..4], ["2.000000", "1.000000", "3.000000", "1.500000"]);
    // C: node-2 reported no processes: not measured, with the reason; never the GPU's 90 %.
    let rc = row(&report, &c, "alpha");
    assert_eq!(numbers(rc), ["1.000000", "0.000000", "0.000000", "0.000000", "0.000000"]);
    let why = rc["not_measured"].as_str().unwrap();
    assert!(why.contains("per-process samples"), "{why}");
    summaries_equal_the_report(&env, &report).await;
}

#[tokio::test]
async fn malformed_process_windows_are_refused_by_field() {
    let env = env().await;
    let (from, to) = (datetime!(2026-10-06 00:00 UTC), datetime!(2026-10-06 01:00 UTC));
    let pod = Uuid::new_v4();
    let cases: Vec<(Fact, &str)> = vec![
        (processes("node-1", GPU_C, from, to, &[(pod, 130.0)]), "pods[0].sm_pct"),
        (processes("node-1", GPU_C, from, to, &[(pod, 10.0), (pod, 20.0)]), "pods[1].pod_uid"),
        (processes("node-1", GPU_C, to, from, &[]), "window_end"),
        (processes("", GPU_C, from, to, &[]), "node"),
        (processes("node-1", GPU_C, from, to, &(0..300).map(|_| (Uuid::new_v4(), 0.1)).collect::<Vec<_>>()), "pods"),
    ];
    for (fact, field) in cases {
        let batch = Batch {
            wire_version: WIRE_VERSION,
            agent: AgentInfo { version: "test".into(), mode: "node".into(), node: None, spool: None },
            cluster: None,
            facts: vec![fact],
        };
        let req = Request::post("/api/v1/ingest/batches")
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {}", env.agent))
            .body(Body::from(serde_json::to_vec(&batch).unwrap()))
            .unwrap();
        let response = env.app.clone().oneshot(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body: Value = serde_json::from_slice(&to_bytes(response.into_body(), 1 << 20).await.unwrap()).unwrap();
        let named = body.to_string();
        assert!(named.contains(&format!("facts[0].{field}")), "{field}: {named}");
    }
}

#[tokio::test]
async fn who_may_ask_and_what_is_refused() {
    let env = env().await;
    assert_eq!(get(&env, None, "period=2026-10").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(&env, Some(&env.agent), "period=2026-10").await.0, StatusCode::FORBIDDEN);
    let (status, _, empty) = get(&env, Some(&env.export), "period=2026-10").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((empty["total"].as_u64(), empty["tenants"].as_array().map(Vec::len)), (Some(0), Some(0)));
    // Not what the document says: 422 naming the parameter; a tenant the organization does not have: 404.
    let stranger = format!("period=2026-10&tenant={}", Uuid::new_v4());
    for (query, field, expected) in [
        ("", "period", StatusCode::UNPROCESSABLE_ENTITY),
        ("period=2026-13", "period", StatusCode::UNPROCESSABLE_ENTITY),
        ("period=2026-10&tenant=x", "tenant", StatusCode::UNPROCESSABLE_ENTITY),
        (stranger.as_str(), "tenant", StatusCode::NOT_FOUND),
        ("period=2026-10&idle_threshold_pct=120", "idle_threshold_pct", StatusCode::UNPROCESSABLE_ENTITY),
        ("period=2026-10&min_idle_hours=soon", "min_idle_hours", StatusCode::UNPROCESSABLE_ENTITY),
        ("period=2026-10&per_page=0", "per_page", StatusCode::UNPROCESSABLE_ENTITY),
        ("period=2026-10&colour=red", "colour", StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let (status, content_type, problem) = get(&env, Some(&env.admin), query).await;
        assert_eq!(status, expected, "{query}: {problem}");
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(problem["field"], field, "{query}: {problem}");
    }
}

fn usage(tenant: &str, start: OffsetDateTime, counts: (u64, u64, u64), ttft: Option<(u64, u64)>) -> Fact {
    let end = start + Duration::hours(1);
    Fact {
        event_id: event_id("service-usage", &["llm-shared", tenant, "m", &start.unix_timestamp().to_string()]),
        observed_at: end,
        body: FactBody::ServiceUsage(ServiceUsageFact {
            endpoint: "llm-shared".into(),
            model: "m".into(),
            tenant: tenant.into(),
            window_start: start,
            window_end: end,
            requests: counts.0,
            input_tokens: counts.1,
            output_tokens: counts.2,
            ttft_ms_sum: ttft.map(|t| t.0),
            ttft_count: ttft.map(|t| t.1),
        }),
    }
}

/// Inference efficiency by hand: an endpoint's pods hold 1 whole H100 for 10 h and a 3/7 MIG slice for 7 h
/// (13 GPU-hours); alpha sent 2,000 tokens, beta 6,000 (equal weights without a policy) → 3.25 and 9.75 GPU-hours,
/// 615 tokens per GPU-hour each; TTFT 2.5 s over 10 requests → 250 ms, 9 s over 30 → 300 ms.
#[tokio::test]
async fn inference_efficiency_by_hand() {
    let env = env().await;
    let ns = Uuid::new_v4();
    let t0 = datetime!(2026-09-10 00:00 UTC);
    let mut facts = vec![namespace(ns, "alpha", datetime!(2026-09-01 00:00 UTC))];
    let (_, whole) = held("vllm-0", ns, SharingMode::Exclusive, GPU_A, t0, t0 + Duration::hours(10));
    let (_, mig) = held(
        "vllm-1",
        ns,
        SharingMode::Mig { profile: MigProfile::new("3g.40gb").unwrap() },
        MIG_B,
        t0,
        t0 + Duration::hours(7),
    );
    for mut f in whole.into_iter().chain(mig) {
        if let FactBody::AllocationStarted(s) = &mut f.body {
            s.labels.endpoint = Some("llm-shared".into());
        }
        facts.push(f);
    }
    send(&env, facts).await;
    let at = |h: i64| t0 + Duration::hours(h);
    send(
        &env,
        vec![
            usage("alpha", at(1), (4, 400, 600), Some((1000, 4))),
            usage("alpha", at(2), (6, 600, 400), Some((1500, 6))),
            usage("beta", at(1), (30, 3000, 3000), Some((9000, 30))),
        ],
    )
    .await;
    // A tenant nobody defined: kept and reported, not attributed. A window without TTFT adds tokens, not latency.
    let ack = post_batch(&env, vec![usage("ghost", at(3), (5, 50, 50), None)]).await;
    assert_eq!(ack["flagged"].as_array().map(Vec::len), Some(1), "{ack}");

    let (status, _, r) = get_at(&env, Some(&env.export), "/api/v1/analytics/inference?period=2026-09").await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let tenant = |name: &str| {
        r["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tenant_name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{r:#}"))
    };
    let (a, b) = (tenant("alpha"), tenant("beta"));
    let figures = |t: &Value| {
        ["share_pct", "gpu_hours", "tokens_per_gpu_hour", "output_tokens_per_gpu_hour", "mean_ttft_ms"]
            .map(|k| t[k].as_str().unwrap_or("null").to_string())
    };
    assert_eq!(figures(&a), ["25.00", "3.250", "615", "308", "250"].map(String::from));
    assert_eq!(figures(&b), ["75.00", "9.750", "615", "308", "300"].map(String::from));
    assert_eq!(
        (a["requests"].as_u64(), a["input_tokens"].as_u64(), a["output_tokens"].as_u64()),
        (Some(10), Some(1000), Some(1000))
    );
    assert_eq!((a["confidence"].as_str(), a["department"].as_str()), (Some("modeled"), Some("Research")));
    assert!(a["confidence_reason"].as_str().unwrap().contains("equal token weights"), "{a}");
    assert_eq!(r["tenants"].as_array().unwrap().len(), 2, "the undefined tenant gets no row");
    let e = &r["endpoints"][0];
    assert_eq!(
        (e["endpoint"].as_str(), e["gpu_hours"].as_str(), e["tokens"].as_u64(), e["mean_ttft_ms"].as_str()),
        (Some("llm-shared"), Some("13.000"), Some(8000), Some("288")),
        "{e}"
    );
    assert_eq!((r["unattributed"]["requests"].as_i64(), r["unattributed"]["tokens"].as_i64()), (Some(5), Some(100)));
    // The attributed hours add up to the endpoint's.
    let sum: f64 = ["3.250", "9.750"].iter().map(|h| h.parse::<f64>().unwrap()).sum();
    assert_eq!(format!("{sum:.3}"), e["gpu_hours"].as_str().unwrap());

    // The model server counted more than the tenants' usage (50 requests, 4,000 input and 5,000 output tokens):
    // the remainder (10 requests, 0 + 1,000 tokens) takes 1,000 of 9,000 weighted tokens' share of the hours.
    let counted = Fact {
        event_id: "endpoint-totals/llm-shared/serving/vllm-0/m".into(),
        observed_at: at(4),
        body: FactBody::EndpointTotals(EndpointTotalsFact {
            endpoint: "llm-shared".into(),
            model: "m".into(),
            server: "vllm".into(),
            pod: "serving/vllm-0".into(),
            window_start: at(0),
            window_end: at(4),
            requests: 50,
            input_tokens: 4_000,
            output_tokens: 5_000,
            ttft_ms_sum: None,
            ttft_count: None,
            queue_depth: None,
            restarted: false,
        }),
    };
    send(&env, vec![counted]).await;
    let (_, _, r) = get_at(&env, Some(&env.admin), "/api/v1/analytics/inference?period=2026-09").await;
    let hours = |name: &str| {
        r["tenants"].as_array().unwrap().iter().find(|t| t["tenant_name"] == name).unwrap()["gpu_hours"].clone()
    };
    // 13 × 2/9 = 2.889, 13 × 6/9 = 8.667, remainder 13 × 1/9 = 1.444
    assert_eq!((hours("alpha"), hours("beta")), (Value::from("2.889"), Value::from("8.667")), "{r:#}");
    assert_eq!(r["tenants"].as_array().unwrap().len(), 2, "the remainder is no tenant's row");
    assert_eq!(
        (
            r["unattributed"]["requests"].as_u64(),
            r["unattributed"]["tokens"].as_u64(),
            r["unattributed"]["gpu_hours"].as_str()
        ),
        (Some(5 + 10), Some(100 + 1_000), Some("1.444")),
        "{r:#}"
    );
    assert_eq!(r["endpoints"][0]["tokens"].as_u64(), Some(9_000), "the endpoint's totals are what it counted");

    // A month without any: empty lists, not an error.
    let (status, _, empty) = get_at(&env, Some(&env.admin), "/api/v1/analytics/inference?period=2026-07").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (empty["tenants"].as_array().map(Vec::len), empty["endpoints"].as_array().map(Vec::len)),
        (Some(0), Some(0))
    );

    // Refusals name the field.
    for (query, field) in [
        ("", "period"),
        ("period=2026-13", "period"),
        ("period=2026-09&tenant=x", "tenant"),
        ("period=2026-09&department=nope", "department"),
    ] {
        let (status, content_type, problem) =
            get_at(&env, Some(&env.admin), &format!("/api/v1/analytics/inference?{query}")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {problem}");
        assert_eq!(content_type, "application/problem+json");
        assert!(problem.to_string().contains(field), "{query}: {problem}");
    }
    let (status, _, _) = get_at(&env, None, "/api/v1/analytics/inference?period=2026-09").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
