//! Ingest through the HTTP API, against real PostgreSQL as the app role: authentication and scoping,
//! validation that names the field and changes nothing, idempotency and order independence, fractions and
//! confidence per sharing mode, inventory gaps kept and flagged, ownership history, vanished allocations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    ids::OrgId,
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AllocationVanished, AttributionLabels, Batch, DeviceAssignment,
        EndReason, EndpointTotalsFact, Fact, FactBody, Holder, NamespaceFact, ServiceUsageFact, SpoolState, Stat,
        TelemetryRollup, TrainingProgressFact, WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
    db::Database,
    demo,
};
use serde_json::Value;
use time::{OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

struct Env {
    app: axum::Router,
    db: Database,
    org: OrgId,
    agent_token: String,
    admin: sqlx::PgPool,
    ns_uid: Uuid,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent_token) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let app = app::router(
        AppState::new(db.clone(), Some(org)),
        &HttpOptions { body_limit: 256 * 1024, ..HttpOptions::default() },
    );
    Env { app, db, org, agent_token, admin: common::admin_pool(&test_db).await, ns_uid: Uuid::new_v4() }
}

fn batch(facts: Vec<Fact>) -> Batch {
    Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    }
}

fn start(
    pod: Uuid,
    ns_uid: Uuid,
    resource: &str,
    units: u32,
    mode: SharingMode,
    model: &str,
    at: OffsetDateTime,
) -> Fact {
    let allocation_id = format!("{pod}/main/{resource}");
    Fact {
        event_id: event_id("alloc-start", &[&allocation_id]),
        observed_at: at,
        body: FactBody::AllocationStarted(AllocationStart {
            allocation_id,
            holder: Holder::Pod,
            holder_uid: pod,
            holder_name: format!("pod-{}", &pod.simple().to_string()[..6]),
            namespace: "ml-team".into(),
            namespace_uid: Some(ns_uid),
            container: Some("main".into()),
            node: Some("node-1".into()),
            resource: resource.into(),
            units,
            mode,
            gpu_model: Some(model.into()),
            device_ids: vec![],
            started_at: at,
            labels: AttributionLabels::default(),
        }),
    }
}

fn end(pod: Uuid, resource: &str, at: OffsetDateTime) -> Fact {
    let allocation_id = format!("{pod}/main/{resource}");
    Fact {
        event_id: event_id("alloc-end", &[&allocation_id]),
        observed_at: at,
        body: FactBody::AllocationEnded(AllocationEnd { allocation_id, ended_at: at, reason: EndReason::Finished }),
    }
}

async fn post(env: &Env, token: Option<&str>, body: Vec<u8>, gzip: bool) -> (StatusCode, Value) {
    let mut req = Request::post("/api/v1/ingest/batches").header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = if gzip {
        req = req.header("content-encoding", "gzip");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&body).unwrap();
        enc.finish().unwrap()
    } else {
        body
    };
    let response = env.app.clone().oneshot(req.body(Body::from(body)).unwrap()).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn send(env: &Env, b: &Batch) -> (StatusCode, Value) {
    post(env, Some(&env.agent_token), serde_json::to_vec(b).unwrap(), true).await
}

type IntervalRow =
    (String, String, Option<i64>, Option<i64>, Option<OffsetDateTime>, bool, String, Option<String>, Option<String>);

async fn intervals(env: &Env) -> Vec<IntervalRow> {
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let rows = sqlx::query_as(
        "SELECT allocation_id, sharing_mode, fraction_num, fraction_den, ended_at, end_estimated, confidence,
                inventory_gap, gpu_class
           FROM allocation_intervals WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east') ORDER BY allocation_id",
    )
    .fetch_all(tx.conn())
    .await
    .unwrap();
    tx.commit().await.unwrap();
    rows
}

const H100: &str = "NVIDIA H100 80GB HBM3";

#[tokio::test]
async fn every_sharing_mode_gets_its_fraction_and_confidence() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let (a, b, c, d, e) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let facts = vec![
        start(a, env.ns_uid, "nvidia.com/gpu", 2, SharingMode::Exclusive, H100, t0),
        start(
            b,
            env.ns_uid,
            "nvidia.com/mig-1g.10gb",
            1,
            SharingMode::Mig { profile: "1g.10gb".parse().unwrap() },
            "NVIDIA-H100-80GB-HBM3",
            t0,
        ),
        start(
            c,
            env.ns_uid,
            "nvidia.com/gpu.shared",
            1,
            SharingMode::TimeSlice { replicas: 4 },
            "NVIDIA A100-PCIE-40GB",
            t0,
        ),
        start(
            d,
            env.ns_uid,
            "nvidia.com/GRID_T4-1Q",
            1,
            SharingMode::Vgpu { profile: "GRID_T4-1Q".parse().unwrap() },
            "Tesla T4",
            t0,
        ),
        start(e, env.ns_uid, "nvidia.com/TU104GL_Tesla_T4", 1, SharingMode::Passthrough, "Tesla T4", t0),
        end(a, "nvidia.com/gpu", datetime!(2026-10-05 10:00 UTC)),
    ];
    let (status, ack) = send(&env, &batch(facts)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["received"], 6);
    assert_eq!(ack["stored"], 6);
    assert_eq!(ack["flagged"].as_array().unwrap().len(), 0, "{ack}");

    let rows = intervals(&env).await;
    let get = |pod: Uuid| rows.iter().find(|r| r.0.starts_with(&pod.to_string())).unwrap().clone();
    let ra = get(a);
    assert_eq!((ra.1.as_str(), ra.2, ra.3), ("exclusive", Some(2), Some(1)));
    assert_eq!(ra.4, Some(datetime!(2026-10-05 10:00 UTC)));
    assert_eq!((ra.6.as_str(), ra.8.as_deref()), ("exact", Some("H100-80GB")));
    let rb = get(b);
    assert_eq!((rb.1.as_str(), rb.2, rb.3, rb.6.as_str()), ("mig", Some(1), Some(7), "exact"), "model names normalize");
    let rc = get(c);
    assert_eq!((rc.1.as_str(), rc.2, rc.3, rc.6.as_str()), ("time_slice", Some(1), Some(4), "modeled"));
    let rd = get(d);
    assert_eq!((rd.1.as_str(), rd.2, rd.3, rd.6.as_str()), ("vgpu", Some(1), Some(16), "exact"));
    let re = get(e);
    assert_eq!((re.1.as_str(), re.2, re.3, re.6.as_str()), ("passthrough", Some(1), Some(1), "exact"));
    assert!(rows.iter().all(|r| r.7.is_none()));
}

#[tokio::test]
async fn the_same_facts_twice_or_reordered_give_the_same_state() {
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let pods: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    let mut facts = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        facts.push(start(
            *p,
            Uuid::nil(),
            "nvidia.com/gpu",
            1,
            SharingMode::Exclusive,
            H100,
            t0 + time::Duration::hours(i as i64),
        ));
        if i % 2 == 0 {
            facts.push(end(*p, "nvidia.com/gpu", t0 + time::Duration::hours(i as i64 + 3)));
        }
    }
    // In order, once.
    let first = env().await;
    assert_eq!(send(&first, &batch(facts.clone())).await.0, StatusCode::OK);
    let expected = intervals(&first).await;
    assert_eq!(expected.len(), 5);

    // Reversed, split in single-fact batches, each sent twice.
    let second = env().await;
    for f in facts.iter().rev() {
        for round in 0..2 {
            let (status, ack) = send(&second, &batch(vec![f.clone()])).await;
            assert_eq!(status, StatusCode::OK, "{ack}");
            assert_eq!(ack["stored"], if round == 0 { 1 } else { 0 }, "{ack}");
        }
    }
    assert_eq!(intervals(&second).await, expected);
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM allocation_events WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east')").fetch_one(&second.admin).await.unwrap();
    assert_eq!(events, facts.len() as i64, "each fact stored exactly once");
}

#[tokio::test]
async fn bad_input_names_the_field_and_changes_nothing() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let p = Uuid::new_v4();
    // End before start in one batch.
    let (status, problem) = send(
        &env,
        &batch(vec![
            start(p, env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, H100, t0),
            end(p, "nvidia.com/gpu", t0 - time::Duration::hours(1)),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["field"], "facts[1].ended_at", "{problem}");
    // A timestamp far in the future.
    let future = OffsetDateTime::now_utc() + time::Duration::days(2);
    let (status, problem) =
        send(&env, &batch(vec![start(p, env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, H100, future)])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(problem["field"].as_str().unwrap().starts_with("facts[0]."), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("future"), "{problem}");
    // A malformed UID.
    let mut json =
        serde_json::to_value(batch(vec![start(p, env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, H100, t0)]))
            .unwrap();
    json["facts"][0]["holder_uid"] = Value::from("not-a-uid");
    let (status, problem) = post(&env, Some(&env.agent_token), serde_json::to_vec(&json).unwrap(), false).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["field"], "facts[0].holder_uid", "{problem}");
    // A bad MIG profile.
    json["facts"][0]["holder_uid"] = Value::from(p.to_string());
    json["facts"][0]["mode"] = serde_json::json!({"mode": "mig", "profile": "huge"});
    let (status, problem) = post(&env, Some(&env.agent_token), serde_json::to_vec(&json).unwrap(), false).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(problem["field"].as_str().unwrap().starts_with("facts[0].mode"), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("huge"), "{problem}");
    // Too large.
    let (status, _) = post(&env, Some(&env.agent_token), vec![b' '; 300 * 1024], false).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // Nothing was stored by any of these.
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM allocation_events WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east')").fetch_one(&env.admin).await.unwrap();
    assert_eq!(events, 0);
}

#[tokio::test]
async fn credentials_decide_organization_and_cluster() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let b = batch(vec![start(Uuid::new_v4(), env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, H100, t0)]);
    let body = serde_json::to_vec(&b).unwrap();
    assert_eq!(post(&env, None, body.clone(), false).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(post(&env, Some("glt_garbage"), body.clone(), false).await.0, StatusCode::UNAUTHORIZED);
    let forged = format!("glt_{}_{}", env.org.as_uuid().simple(), "ab".repeat(32));
    assert_eq!(post(&env, Some(&forged), body.clone(), false).await.0, StatusCode::UNAUTHORIZED);
    // An export token cannot write facts.
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    let (other_cluster, _) = auth::ensure_cluster(&mut tx, "gpu-west").await.unwrap();
    let (_, west_token) =
        auth::create_token(&mut tx, &Scope::Agent { cluster: other_cluster }, "west", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(post(&env, Some(&export), body.clone(), false).await.0, StatusCode::FORBIDDEN);
    // Cluster west's token claiming to write for gpu-east: refused.
    let mut claimed = b.clone();
    claimed.cluster = Some("gpu-east".into());
    let (status, problem) = post(&env, Some(&west_token), serde_json::to_vec(&claimed).unwrap(), false).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    // The east token with the right claim works, and the rows land on east's cluster.
    let (status, _) = post(&env, Some(&env.agent_token), serde_json::to_vec(&claimed).unwrap(), false).await;
    assert_eq!(status, StatusCode::OK);
    let cluster: String =
        sqlx::query_scalar("SELECT c.name FROM allocation_intervals i JOIN clusters c USING (org_id, cluster_id) WHERE c.name <> 'demo-gpu-cluster'")
            .fetch_one(&env.admin)
            .await
            .unwrap();
    assert_eq!(cluster, "gpu-east");
}

#[tokio::test]
async fn unknown_profiles_are_kept_and_flagged() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let p = Uuid::new_v4();
    let f = start(
        p,
        env.ns_uid,
        "nvidia.com/mig-4g.40gb",
        1,
        SharingMode::Mig { profile: "4g.40gb".parse().unwrap() },
        H100,
        t0,
    );
    let (status, ack) = send(&env, &batch(vec![f])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["stored"], 1);
    let flagged = ack["flagged"].as_array().unwrap();
    assert_eq!(flagged.len(), 1, "{ack}");
    assert!(flagged[0]["reason"].as_str().unwrap().contains("4g.40gb"), "{ack}");
    let rows = intervals(&env).await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].2, rows[0].3), (None, None), "no fraction without an inventory entry");
    assert!(rows[0].7.as_deref().unwrap().contains("no approved inventory entry"));
    let findings: i64 = sqlx::query_scalar("SELECT count(*) FROM data_quality_findings WHERE kind = 'inventory_gap' AND cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east')")
        .fetch_one(&env.admin)
        .await
        .unwrap();
    assert_eq!(findings, 1);
}

#[tokio::test]
async fn vanished_allocations_end_estimated_and_exact_ends_win() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let (p, q) = (Uuid::new_v4(), Uuid::new_v4());
    let vanished = |pod: Uuid, at| Fact {
        event_id: event_id("alloc-vanished", &[&format!("{pod}/main/nvidia.com/gpu")]),
        observed_at: at,
        body: FactBody::AllocationVanished(AllocationVanished {
            allocation_id: format!("{pod}/main/nvidia.com/gpu"),
            last_seen_at: at,
        }),
    };
    let facts = vec![
        start(p, env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, H100, t0),
        start(q, env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, H100, t0),
        vanished(p, t0 + time::Duration::hours(5)),
        vanished(q, t0 + time::Duration::hours(5)),
    ];
    assert_eq!(send(&env, &batch(facts)).await.0, StatusCode::OK);
    // q's real end arrives later (e.g. from a re-list that found its finished pod): it wins.
    assert_eq!(
        send(&env, &batch(vec![end(q, "nvidia.com/gpu", t0 + time::Duration::hours(3))])).await.0,
        StatusCode::OK
    );
    let rows = intervals(&env).await;
    let get = |pod: Uuid| rows.iter().find(|r| r.0.starts_with(&pod.to_string())).unwrap().clone();
    let rp = get(p);
    assert_eq!((rp.4, rp.5, rp.6.as_str()), (Some(t0 + time::Duration::hours(5)), true, "estimated"));
    let rq = get(q);
    assert_eq!((rq.4, rq.5, rq.6.as_str()), (Some(t0 + time::Duration::hours(3)), false, "exact"));
}

fn namespace(uid: Uuid, tenant: Option<&str>, since: OffsetDateTime, rv: &str) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), rv]),
        observed_at: since,
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: "ml-team".into(),
            created_at: datetime!(2026-09-01 00:00 UTC),
            deleted_at: None,
            labels: AttributionLabels { tenant: tenant.map(str::to_string), ..Default::default() },
            labels_since: since,
        }),
    }
}

#[tokio::test]
async fn an_owner_change_closes_the_old_mapping_in_any_order() {
    let t1 = datetime!(2026-09-01 00:00 UTC);
    let t2 = datetime!(2026-10-15 12:00 UTC);
    async fn ownership(env: &Env) -> Vec<(OffsetDateTime, Option<OffsetDateTime>, String)> {
        let mut tx = env.db.begin_org(env.org).await.unwrap();
        let rows = sqlx::query_as(
            "SELECT o.valid_from, o.valid_to, t.name FROM namespace_ownership o JOIN tenants t USING (org_id, tenant_id)
              WHERE o.namespace_uid = $1 ORDER BY o.valid_from",
        )
        .bind(env.ns_uid)
        .fetch_all(tx.conn())
        .await
        .unwrap();
        tx.commit().await.unwrap();
        rows
    }
    let expected = vec![(t1, Some(t2), "nlp-research".to_string()), (t2, None, "search-ranking".to_string())];
    for order in [[0usize, 1], [1, 0]] {
        let env = env().await;
        let facts = [
            namespace(env.ns_uid, Some("nlp-research"), t1, "1"),
            namespace(env.ns_uid, Some("search-ranking"), t2, "2"),
        ];
        for i in order {
            let (status, ack) = send(&env, &batch(vec![facts[i].clone()])).await;
            assert_eq!(status, StatusCode::OK, "{ack}");
        }
        assert_eq!(ownership(&env).await, expected, "order {order:?}");
    }
    // A tenant that does not exist is flagged, not invented.
    let env = env().await;
    let (_, ack) = send(&env, &batch(vec![namespace(env.ns_uid, Some("nobody"), t1, "1")])).await;
    assert_eq!(ack["flagged"].as_array().unwrap().len(), 1, "{ack}");
    assert!(ownership(&env).await.is_empty());
}

#[tokio::test]
async fn telemetry_lands_in_monthly_partitions_once() {
    let env = env().await;
    let rollup = |gpu: &str, minute: i64| Fact {
        event_id: event_id("telemetry", &[gpu, "-", &minute.to_string()]),
        observed_at: datetime!(2026-10-31 23:00 UTC),
        body: FactBody::Telemetry(TelemetryRollup {
            node: "node-1".into(),
            gpu_uuid: gpu.into(),
            gpu_instance_id: None,
            mig_profile: None,
            window_start: datetime!(2026-10-31 23:00 UTC) + time::Duration::minutes(minute),
            window_end: datetime!(2026-10-31 23:01 UTC) + time::Duration::minutes(minute),
            samples: 6,
            utilization_pct: Some(Stat { min: 10.0, avg: 55.5, max: 99.0 }),
            memory_used_mib: None,
            power_w: Some(Stat { min: 100.0, avg: 250.0, max: 400.0 }),
            energy_j: Some(15000.0),
            pod: None,
        }),
    };
    // Spans a month boundary: 23:00 + 90 minutes is in November.
    let facts: Vec<Fact> = (0..90).map(|m| rollup("GPU-aaaaaaaa-0000-0000-0000-000000000001", m)).collect();
    let (status, ack) = send(&env, &batch(facts.clone())).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["stored"], 90);
    let (_, ack) = send(&env, &batch(facts)).await;
    assert_eq!(ack["stored"], 0, "duplicates are ignored");
    // Per partition: (partition, rows, Σ windows) — one row per GPU-hour.
    let per_partition = |table: &'static str| {
        let admin = env.admin.clone();
        async move {
            // On Citus a row's tableoid is its shard's: the partition's name and `_<shard id>`.
            let partition = if gpuledger_e2e::citus().unwrap().is_some() {
                r"regexp_replace(tableoid::regclass::text, '_[0-9]{6,}$', '')"
            } else {
                "tableoid::regclass::text"
            };
            let rows: Vec<(String, i64, i64)> = sqlx::query_as(&format!(
                "SELECT {partition}, count(*), sum(windows)::bigint FROM {table} GROUP BY 1 ORDER BY 1"
            ))
            .fetch_all(&admin)
            .await
            .unwrap();
            rows
        }
    };
    // Ingest runs no DDL: the windows wait in the default partitions until the maintenance task makes their months.
    assert_eq!(per_partition("telemetry_gpu_hours").await, vec![("telemetry_gpu_hours_default".to_string(), 2, 90)]);
    gpuledger_server::maintenance::run_once(&env.db, datetime!(2026-11-15 00:00 UTC)).await.unwrap();
    for table in ["telemetry_gpu_hours"] {
        assert_eq!(
            per_partition(table).await,
            vec![(format!("{table}_202610"), 1, 60), (format!("{table}_202611"), 1, 30)],
            "{table}"
        );
    }
    // The hours' sums are exact: 60 windows of 15,000 J, 55.5 % each.
    let hour: (i64, i64, i64, i64, i32) = sqlx::query_as(
        "SELECT energy_j, sampled_ms::bigint, util_sum, util_ms::bigint, util_max::int FROM telemetry_gpu_hours
          WHERE hour = '2026-10-31 23:00Z'",
    )
    .fetch_one(&env.admin)
    .await
    .unwrap();
    assert_eq!(hour, (900_000, 3_600_000, 555 * 3_600_000, 3_600_000, 990));
    // A late window (and a redelivered one) in a later batch: its hour gains it, the redelivery changes nothing.
    let late = vec![
        rollup("GPU-aaaaaaaa-0000-0000-0000-000000000001", 95),
        rollup("GPU-aaaaaaaa-0000-0000-0000-000000000001", 89),
    ];
    let (_, ack) = send(&env, &batch(late)).await;
    assert_eq!(ack["stored"], 1, "{ack}");
    let nov: (i16, i64, i32) = sqlx::query_as(
        "SELECT windows, energy_j, span_to_ms FROM telemetry_gpu_hours WHERE hour = '2026-11-01 00:00Z'",
    )
    .fetch_one(&env.admin)
    .await
    .unwrap();
    assert_eq!(nov, (31, 31 * 15_000, 36 * 60_000), "the late window at 00:35 extends its hour");
    // The blocks hold every window once.
    let stored: Vec<(time::OffsetDateTime, Vec<u8>)> =
        sqlx::query_as("SELECT hour, block FROM telemetry_gpu_hours").fetch_all(&env.admin).await.unwrap();
    let in_blocks: usize = stored
        .iter()
        .map(|(h, b)| gpuledger_server::telemetry::store::unpack_gpu_hour(*h, b).unwrap()[&-1].len())
        .sum();
    assert_eq!(in_blocks, 91);
    // Retention dropped October's full resolution: a late window for that hour cannot be merged exactly, so it is
    // not kept and the hour's sums stand.
    sqlx::query("UPDATE telemetry_gpu_hours SET block = NULL WHERE hour = '2026-10-31 23:00Z'")
        .execute(&env.admin)
        .await
        .unwrap();
    // As deploy/scripts/telemetry-retention.sh does: the month's coverage keeps no block bytes.
    sqlx::query("SELECT gpuledger_telemetry_coverage_retention('2026-10-01', '2026-11-01', false)")
        .execute(&env.admin)
        .await
        .unwrap();
    let mut stale = rollup("GPU-aaaaaaaa-0000-0000-0000-000000000001", 10);
    if let FactBody::Telemetry(t) = &mut stale.body {
        t.window_start += time::Duration::seconds(30);
        t.window_end += time::Duration::seconds(30);
    }
    stale.event_id.push_str("-30s");
    let (status, ack) = send(&env, &batch(vec![stale])).await;
    assert_eq!((status, ack["stored"].as_u64()), (StatusCode::OK, Some(0)), "{ack}");
    let oct: (i16, i64) =
        sqlx::query_as("SELECT windows, energy_j FROM telemetry_gpu_hours WHERE hour = '2026-10-31 23:00Z'")
            .fetch_one(&env.admin)
            .await
            .unwrap();
    assert_eq!(oct, (60, 900_000));
    let blocks: i64 =
        sqlx::query_scalar("SELECT count(block) FROM telemetry_gpu_hours WHERE hour = '2026-10-31 23:00Z'")
            .fetch_one(&env.admin)
            .await
            .unwrap();
    assert_eq!(blocks, 0);
    // Coverage of October: the node sent 60 windows of 60 s for one GPU-hour; no allocation held it.
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let cov = gpuledger_server::telemetry::coverage(
        &mut tx,
        gpuledger_core::Period::parse("2026-10").unwrap(),
        datetime!(2026-11-15 00:00 UTC),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(cov.nodes.len(), 1, "{cov:?}");
    let node = &cov.nodes[0];
    assert_eq!(node.node.as_deref(), Some("node-1"));
    assert_eq!((node.gpus, node.windows, node.median_window_secs.as_deref()), (1, 60, Some("60")));
    assert_eq!((node.gpu_hours_with_telemetry.as_str(), node.gpu_hours_held.as_str()), ("1.00", "0.00"));
    // October's full resolution was stripped above: only its sums are kept.
    assert_eq!(node.bytes_full_resolution, 0);
    assert!(node.bytes_hourly > 0);
    assert_eq!(cov.clusters.len(), 1);
    assert_eq!(cov.clusters[0].windows, 60);
    assert_eq!(cov.starts_at, "2026-10-01T00:00:00Z");
}

fn usage(tenant: &str, model: &str, start: OffsetDateTime, minutes: i64, counts: (u64, u64, u64)) -> Fact {
    let rfc3339 = start.format(&time::format_description::well_known::Rfc3339).unwrap();
    Fact {
        event_id: event_id("service-usage", &["llm-shared", tenant, model, &rfc3339]),
        observed_at: start + time::Duration::minutes(minutes),
        body: FactBody::ServiceUsage(ServiceUsageFact {
            endpoint: "llm-shared".into(),
            model: model.into(),
            tenant: tenant.into(),
            window_start: start,
            window_end: start + time::Duration::minutes(minutes),
            requests: counts.0,
            input_tokens: counts.1,
            output_tokens: counts.2,
            ttft_ms_sum: None,
            ttft_count: None,
        }),
    }
}

type UsageRow = (String, String, String, Option<String>, OffsetDateTime, OffsetDateTime, i64, i64, i64);

/// gpu-east's service usage rows, with the defined tenant's name when the row has one.
async fn usage_rows(env: &Env) -> Vec<UsageRow> {
    sqlx::query_as(
        "SELECT u.endpoint, u.model, u.tenant_name, t.name, u.window_start, u.window_end, u.requests, u.input_tokens,
                u.output_tokens
           FROM service_usage u LEFT JOIN tenants t USING (org_id, tenant_id)
          WHERE u.cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east')
          ORDER BY u.tenant_name, u.window_start",
    )
    .fetch_all(&env.admin)
    .await
    .unwrap()
}

async fn count_where(env: &Env, sql: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {sql} AND cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east')"
    ))
    .fetch_one(&env.admin)
    .await
    .unwrap()
}

#[tokio::test]
async fn service_usage_is_stored_once() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let facts = vec![
        usage("nlp-research", "llama-3-8b", t0, 5, (12, 4_000, 9_000)),
        usage("search-ranking", "llama-3-8b", t0, 5, (3, 1_000, 500)),
        usage("nlp-research", "llama-3-8b", t0 + time::Duration::minutes(5), 5, (7, 2_100, 4_400)),
    ];
    let (status, ack) = send(&env, &batch(facts.clone())).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!((ack["received"].as_u64(), ack["stored"].as_u64()), (Some(3), Some(3)), "{ack}");
    assert_eq!(ack["flagged"].as_array().unwrap().len(), 0, "{ack}");
    let expected = vec![
        (
            "llm-shared".to_string(),
            "llama-3-8b".to_string(),
            "nlp-research".to_string(),
            Some("nlp-research".to_string()),
            t0,
            t0 + time::Duration::minutes(5),
            12,
            4_000,
            9_000,
        ),
        (
            "llm-shared".to_string(),
            "llama-3-8b".to_string(),
            "nlp-research".to_string(),
            Some("nlp-research".to_string()),
            t0 + time::Duration::minutes(5),
            t0 + time::Duration::minutes(10),
            7,
            2_100,
            4_400,
        ),
        (
            "llm-shared".to_string(),
            "llama-3-8b".to_string(),
            "search-ranking".to_string(),
            Some("search-ranking".to_string()),
            t0,
            t0 + time::Duration::minutes(5),
            3,
            1_000,
            500,
        ),
    ];
    assert_eq!(usage_rows(&env).await, expected);
    // The evidence record has each fact once, under its subject and window start.
    let events: Vec<(String, OffsetDateTime)> = sqlx::query_as(
        "SELECT subject, occurred_at FROM allocation_events WHERE kind = 'service_usage'
            AND cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east') ORDER BY subject, occurred_at",
    )
    .fetch_all(&env.admin)
    .await
    .unwrap();
    assert_eq!(
        events,
        vec![
            ("service/llm-shared/nlp-research/llama-3-8b".to_string(), t0),
            ("service/llm-shared/nlp-research/llama-3-8b".to_string(), t0 + time::Duration::minutes(5)),
            ("service/llm-shared/search-ranking/llama-3-8b".to_string(), t0),
        ]
    );

    // The same batch again, and again reversed and uncompressed: nothing new.
    let (status, ack) = send(&env, &batch(facts.clone())).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["stored"], 0, "{ack}");
    let reversed: Vec<Fact> = facts.iter().rev().cloned().collect();
    let (status, ack) = post(&env, Some(&env.agent_token), serde_json::to_vec(&batch(reversed)).unwrap(), false).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["stored"], 0, "{ack}");
    assert_eq!(usage_rows(&env).await, expected);
    assert_eq!(count_where(&env, "allocation_events WHERE kind = 'service_usage'").await, 3);
}

#[tokio::test]
async fn service_usage_for_an_unknown_tenant_is_kept_and_flagged() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let fact = usage("nobody", "llama-3-8b", t0, 5, (2, 300, 700));
    let (status, ack) = send(&env, &batch(vec![fact.clone()])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["stored"], 1, "{ack}");
    let flagged = ack["flagged"].as_array().unwrap();
    assert_eq!(flagged.len(), 1, "{ack}");
    assert_eq!(flagged[0]["event_id"].as_str(), Some(fact.event_id.as_str()), "{ack}");
    assert!(flagged[0]["reason"].as_str().unwrap().contains("\"nobody\""), "{ack}");
    // Kept, with its figures and no tenant.
    let rows = usage_rows(&env).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].2.as_str(), rows[0].3.as_deref(), rows[0].6, rows[0].7, rows[0].8),
        ("nobody", None, 2, 300, 700)
    );
    let findings: Vec<(String, String, Option<OffsetDateTime>, Option<OffsetDateTime>)> = sqlx::query_as(
        "SELECT finding_id, subject, occurred_from, occurred_to FROM data_quality_findings WHERE kind = 'unknown_tenant'
            AND cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east')",
    )
    .fetch_all(&env.admin)
    .await
    .unwrap();
    assert_eq!(
        findings,
        vec![(
            format!("unknown-tenant/{}", fact.event_id),
            "service/llm-shared/nobody/llama-3-8b".to_string(),
            Some(t0),
            Some(t0 + time::Duration::minutes(5))
        )]
    );
    // Sent again: nothing new stored or flagged.
    let (status, ack) = send(&env, &batch(vec![fact])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!((ack["stored"].as_u64(), ack["flagged"].as_array().map(Vec::len)), (Some(0), Some(0)), "{ack}");
    assert_eq!(count_where(&env, "data_quality_findings WHERE kind = 'unknown_tenant'").await, 1);
}

#[tokio::test]
async fn bad_service_usage_names_the_field_and_stores_nothing() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let good = usage("nlp-research", "llama-3-8b", t0, 5, (1, 1, 1));
    // A window that ends where it starts, after a good fact: the whole batch is refused.
    let mut empty = usage("search-ranking", "llama-3-8b", t0, 5, (1, 1, 1));
    if let FactBody::ServiceUsage(u) = &mut empty.body {
        u.window_end = u.window_start;
    }
    let (status, problem) = send(&env, &batch(vec![good.clone(), empty])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "facts[1].window_end", "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("window_start"), "{problem}");
    // A window in the future.
    // (observed now, so the window is what is refused)
    let mut future =
        usage("nlp-research", "llama-3-8b", OffsetDateTime::now_utc() + time::Duration::days(1), 5, (1, 1, 1));
    future.observed_at = OffsetDateTime::now_utc();
    let (status, problem) = send(&env, &batch(vec![future])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "facts[0].window_end", "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("future"), "{problem}");
    // Empty and over-long names.
    for (field, value) in [("endpoint", " ".to_string()), ("model", String::new()), ("tenant", "x".repeat(201))] {
        let mut f = good.clone();
        if let FactBody::ServiceUsage(u) = &mut f.body {
            match field {
                "endpoint" => u.endpoint = value,
                "model" => u.model = value,
                _ => u.tenant = value,
            }
        }
        let (status, problem) = send(&env, &batch(vec![f])).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {problem}");
        assert_eq!(problem["field"], format!("facts[0].{field}"), "{problem}");
    }
    // Counts too large for the table, and a negative count (refused while decoding).
    let mut huge = good.clone();
    if let FactBody::ServiceUsage(u) = &mut huge.body {
        u.output_tokens = u64::MAX;
    }
    let (status, problem) = send(&env, &batch(vec![huge])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "facts[0].output_tokens", "{problem}");
    let mut json = serde_json::to_value(batch(vec![good.clone()])).unwrap();
    json["facts"][0]["requests"] = Value::from(-1);
    let (status, problem) = post(&env, Some(&env.agent_token), serde_json::to_vec(&json).unwrap(), false).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "facts[0].requests", "{problem}");
    // A missing window start, found by the field-naming decoder.
    let mut json = serde_json::to_value(batch(vec![good])).unwrap();
    json["facts"][0].as_object_mut().unwrap().remove("window_start");
    let (status, problem) = post(&env, Some(&env.agent_token), serde_json::to_vec(&json).unwrap(), false).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert!(problem["field"].as_str().unwrap().starts_with("facts[0]"), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("window_start"), "{problem}");
    // Nothing was stored by any of these.
    assert_eq!(count_where(&env, "allocation_events WHERE true").await, 0);
    assert!(usage_rows(&env).await.is_empty());
}

#[tokio::test]
async fn time_to_first_token_is_stored_as_a_pair_and_half_a_pair_is_refused() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let with = |ttft: (Option<u64>, Option<u64>)| {
        let mut f = usage("nlp-research", "llama-3-8b", t0, 5, (4, 10, 20));
        if let FactBody::ServiceUsage(u) = &mut f.body {
            (u.ttft_ms_sum, u.ttft_count) = ttft;
        }
        f
    };
    for (ttft, field) in [((Some(900), None), "ttft_count"), ((None, Some(3)), "ttft_ms_sum")] {
        let (status, problem) = send(&env, &batch(vec![with(ttft)])).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["field"], format!("facts[0].{field}"), "{problem}");
    }
    assert!(usage_rows(&env).await.is_empty(), "nothing stored by a refused batch");
    let (status, ack) = send(&env, &batch(vec![with((Some(900), Some(3)))])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let stored: (Option<i64>, Option<i64>) =
        sqlx::query_as("SELECT ttft_ms_sum, ttft_count FROM service_usage").fetch_one(&env.admin).await.unwrap();
    assert_eq!(stored, (Some(900), Some(3)));
}

#[tokio::test]
async fn each_agents_spool_backlog_is_remembered_from_its_batches() {
    let env = env().await;
    let contact = async || -> (Option<i64>, Option<i64>, Option<i64>, i32) {
        sqlx::query_as(
            "SELECT spool_pending_facts, spool_pending_bytes, spool_dropped_facts, last_batch_facts FROM agent_contacts
              WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'gpu-east')",
        )
        .fetch_one(&env.admin)
        .await
        .unwrap()
    };
    let t0 = datetime!(2026-10-05 08:00 UTC);
    // An agent that reports its spool: 2 facts sent out of 1,002 waiting → 1,000 left.
    let mut b = batch(vec![
        usage("nlp-research", "llama-3-8b", t0, 5, (1, 1, 1)),
        usage("nlp-research", "llama-3-8b", t0 + time::Duration::minutes(5), 5, (1, 1, 1)),
    ]);
    b.agent.spool = Some(SpoolState {
        pending_facts: 1002,
        pending_bytes: 640_000,
        dropped_facts: 7,
        disk_bytes: 900_000,
        max_bytes: 1_048_576,
    });
    let (status, ack) = send(&env, &b).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(contact().await, (Some(1000), Some(640_000), Some(7), 2));
    let fill: (Option<i64>, Option<i64>) =
        sqlx::query_as("SELECT spool_disk_bytes, spool_max_bytes FROM agent_contacts")
            .fetch_one(&env.admin)
            .await
            .unwrap();
    assert_eq!(fill, (Some(900_000), Some(1_048_576)));
    // An older agent that does not: the backlog is unknown again, not left stale.
    let (status, ack) = send(&env, &batch(vec![usage("nlp-research", "llama-3-8b", t0, 5, (1, 1, 1))])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(contact().await, (None, None, None, 1));
}

fn assigned(pod: Option<Uuid>, name: Option<&str>, devices: &[&str], at: OffsetDateTime) -> Fact {
    let a = DeviceAssignment {
        node: "node-1".into(),
        pod_uid: pod,
        pod_namespace: name.map(|_| "ml-team".to_string()),
        pod_name: name.map(str::to_string),
        container: "main".into(),
        resource: "nvidia.com/gpu".into(),
        device_ids: devices.iter().map(|d| d.to_string()).collect(),
        observed_at: at,
    };
    let key = pod.map_or_else(|| name.unwrap_or_default().to_string(), |p| p.to_string());
    Fact {
        event_id: event_id("assigned", &[&key, &devices.join(","), &at.unix_timestamp().to_string()]),
        observed_at: at,
        body: FactBody::DeviceAssigned(a),
    }
}

/// Pods' devices come from the node agent's kubelet assignment, a separate fact: whichever arrives first, the
/// interval ends up with the latest assignment's devices, and keeps them when the allocation is recomputed.
#[tokio::test]
async fn kubelet_assignments_land_on_their_intervals_in_any_order() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let (early, late) = (Uuid::new_v4(), Uuid::new_v4());
    let devices = async |pod: Uuid| -> Vec<String> {
        sqlx::query_scalar("SELECT device_ids FROM allocation_intervals WHERE holder_uid = $1")
            .bind(pod)
            .fetch_one(&env.admin)
            .await
            .unwrap()
    };
    // The assignment first (by pod UID), then the allocation.
    let (status, ack) = send(&env, &batch(vec![assigned(Some(early), None, &["GPU-aaa"], t0)])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let (status, ack) =
        send(&env, &batch(vec![start(early, env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, H100, t0)])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(devices(early).await, vec!["GPU-aaa".to_string()]);
    // The allocation first, then its assignment by pod name (kubelet's pod-resources API names pods).
    let started = start(late, env.ns_uid, "nvidia.com/gpu", 2, SharingMode::Exclusive, H100, t0);
    let name = match &started.body {
        FactBody::AllocationStarted(s) => s.holder_name.clone(),
        _ => unreachable!(),
    };
    let (status, _) = send(&env, &batch(vec![started])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(devices(late).await.is_empty());
    let (status, _) = send(&env, &batch(vec![assigned(None, Some(&name), &["GPU-bbb", "GPU-ccc"], t0)])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(devices(late).await, vec!["GPU-bbb".to_string(), "GPU-ccc".to_string()]);
    // A later assignment wins; the end of the allocation (a recompute) keeps it.
    let later = t0 + time::Duration::hours(1);
    let (status, _) = send(&env, &batch(vec![assigned(None, Some(&name), &["GPU-ddd", "GPU-ccc"], later)])).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = send(&env, &batch(vec![end(late, "nvidia.com/gpu", later + time::Duration::hours(1))])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(devices(late).await, vec!["GPU-ddd".to_string(), "GPU-ccc".to_string()]);
    assert_eq!(devices(early).await, vec!["GPU-aaa".to_string()], "another pod's assignment changes nothing here");
}

fn totals(pod: &str, start: OffsetDateTime, counts: (u64, u64, u64)) -> Fact {
    Fact {
        event_id: event_id("endpoint-totals", &["llm-shared", pod, "llama-3-8b", &start.to_string()]),
        observed_at: start + time::Duration::minutes(1),
        body: FactBody::EndpointTotals(EndpointTotalsFact {
            endpoint: "llm-shared".into(),
            model: "llama-3-8b".into(),
            server: "vllm".into(),
            pod: pod.into(),
            window_start: start,
            window_end: start + time::Duration::minutes(1),
            requests: counts.0,
            input_tokens: counts.1,
            output_tokens: counts.2,
            ttft_ms_sum: Some(1_200),
            ttft_count: Some(counts.0),
            queue_depth: Some(3.0),
            restarted: false,
        }),
    }
}

#[tokio::test]
async fn endpoint_totals_are_stored_once_and_bad_ones_name_the_field() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let good = vec![
        totals("serving/vllm-0", t0, (4, 100, 50)),
        totals("serving/vllm-1", t0, (6, 200, 70)),
        totals("serving/vllm-0", t0 + time::Duration::minutes(1), (1, 10, 5)),
    ];
    // Each bad value, after good facts: the whole batch is refused, naming the field.
    type Spoil = fn(&mut EndpointTotalsFact);
    let cases: [(&str, Spoil); 5] = [
        ("server", |t| t.server = "sglang".into()),
        ("pod", |t| t.pod = "vllm-0".into()),
        ("ttft_count", |t| t.ttft_count = None),
        ("queue_depth", |t| t.queue_depth = Some(-1.0)),
        ("window_end", |t| t.window_end = t.window_start),
    ];
    for (field, spoil) in cases {
        let mut bad = totals("serving/vllm-2", t0, (1, 1, 1));
        if let FactBody::EndpointTotals(t) = &mut bad.body {
            spoil(t);
        }
        let mut facts = good.clone();
        facts.push(bad);
        let (status, problem) = send(&env, &batch(facts)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {problem}");
        assert_eq!(problem["field"], format!("facts[3].{field}"), "{problem}");
    }
    assert_eq!(count_where(&env, "endpoint_totals WHERE true").await, 0, "refused batches store nothing");
    // Twice: stored once.
    for _ in 0..2 {
        let (status, ack) = send(&env, &batch(good.clone())).await;
        assert_eq!(status, StatusCode::OK, "{ack}");
    }
    let sums: (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), sum(requests)::bigint, sum(input_tokens)::bigint, sum(output_tokens)::bigint,
                sum(ttft_ms_sum)::bigint FROM endpoint_totals",
    )
    .fetch_one(&env.admin)
    .await
    .unwrap();
    assert_eq!(sums, (3, 11, 310, 125, 3_600));
}

#[tokio::test]
async fn training_progress_facts_land_in_the_training_table_once() {
    let env = env().await;
    let at = datetime!(2026-10-05 08:00 UTC);
    let fact = |id: &str, steps: Option<u64>, samples: Option<u64>| Fact {
        event_id: id.into(),
        observed_at: at,
        body: FactBody::TrainingProgress(TrainingProgressFact {
            namespace: "ml".into(),
            workload: "llm-pretrain".into(),
            reported_at: at,
            steps,
            samples,
        }),
    };
    let (status, problem) = send(&env, &batch(vec![fact("t-1", Some(5), None), fact("t-2", None, None)])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "facts[1].steps", "{problem}");
    assert_eq!(count_where(&env, "training_progress WHERE true").await, 0);
    for _ in 0..2 {
        let (status, ack) = send(&env, &batch(vec![fact("t-1", Some(5), None), fact("t-2", Some(9), Some(90))])).await;
        assert_eq!(status, StatusCode::OK, "{ack}");
    }
    let rows: Vec<(String, Option<i64>, Option<i64>)> =
        sqlx::query_as("SELECT record_id, steps, samples FROM training_progress ORDER BY record_id")
            .fetch_all(&env.admin)
            .await
            .unwrap();
    assert_eq!(rows, vec![("t-1".into(), Some(5), None), ("t-2".into(), Some(9), Some(90))]);
}

/// Soft shares (HAMi, Volcano, Run:ai, gpushare) are priced by the inventory's share basis: the larger by default,
/// then what an approved version for the cluster says, with the explanation on the allocation; a memory share in
/// MiB on a model without memory is a gap naming the fix, never a whole GPU.
#[tokio::test]
async fn soft_shares_follow_the_share_basis_of_the_inventory() {
    use gpuledger_core::sharing::SoftScheduler;
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let hami = SharingMode::SoftShare {
        scheduler: SoftScheduler::Hami,
        compute: Some("3/10".parse().unwrap()),
        memory: None,
        memory_mib: Some(11_517),
    };
    let runai = SharingMode::SoftShare {
        scheduler: SoftScheduler::Runai,
        compute: None,
        memory: Some("1/4".parse().unwrap()),
        memory_mib: None,
    };
    let unknown_memory = SharingMode::SoftShare {
        scheduler: SoftScheduler::Volcano,
        compute: None,
        memory: None,
        memory_mib: Some(3000),
    };
    let facts = vec![
        start(a, env.ns_uid, "nvidia.com/gpu", 2, hami, "NVIDIA-L4", t0),
        start(b, env.ns_uid, "gpu-fraction", 1, runai, "NVIDIA-L4-SHARED", t0),
        start(c, env.ns_uid, "volcano.sh/vgpu-number", 1, unknown_memory, "Mystery GPU 9000", t0),
    ];
    let (status, ack) = send(&env, &batch(facts)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["flagged"].as_array().unwrap().len(), 1, "{ack}");
    assert!(ack["flagged"][0]["reason"].as_str().unwrap().contains("add memory_mib to the model"), "{ack}");

    let share = |pod: Uuid| {
        let db = env.db.clone();
        let org = env.org;
        async move {
            let mut tx = db.begin_org(org).await.unwrap();
            let row: (String, Option<i64>, Option<i64>, String, Option<String>, Option<String>) = sqlx::query_as(
                "SELECT sharing_mode, fraction_num, fraction_den, confidence, share, gpu_class FROM allocation_intervals
                  WHERE allocation_id LIKE $1",
            )
            .bind(format!("{pod}/%"))
            .fetch_one(tx.conn())
            .await
            .unwrap();
            tx.commit().await.unwrap();
            row
        }
    };
    // 2 vGPUs × the larger of 30 % compute and 11,517 of 23,034 MiB (50 %) = 1 GPU.
    let ra = share(a).await;
    assert_eq!((ra.0.as_str(), ra.1, ra.2, ra.3.as_str()), ("soft_share", Some(1), Some(1), "modeled"));
    assert_eq!(
        ra.4.as_deref(),
        Some(
            "hami: compute 30 %, memory 11517 MiB of 23034 MiB = 50 % → the larger of the compute and memory shares: 50 %"
        )
    );
    assert_eq!(ra.5.as_deref(), Some("L4-24GB"));
    let rb = share(b).await;
    assert_eq!((rb.1, rb.2, rb.5.as_deref()), (Some(1), Some(4), Some("L4-24GB")), "GFD's -SHARED suffix is the model");
    let rc = share(c).await;
    assert_eq!((rc.1, rc.2), (None, None), "no fraction invented");

    // Finance approves "compute" for this cluster from October: HAMi pays 2 × 30 %; Run:ai's memory share stands in.
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let call = |body: Value| {
        let app = env.app.clone();
        let admin = admin.clone();
        async move {
            let req = Request::post("/api/v1/inventory/share-basis")
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {admin}"))
                .body(Body::from(body.to_string()))
                .unwrap();
            let response = app.oneshot(req).await.unwrap();
            let status = response.status();
            let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let (status, bad) =
        call(serde_json::json!({"cluster": "gpu-east", "basis": "cheapest", "valid_from": "2026-10-01T00:00:00Z"}))
            .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    assert_eq!(bad["field"], "basis");
    let (status, made) =
        call(serde_json::json!({"cluster": "gpu-east", "basis": "compute", "valid_from": "2026-10-01T00:00:00Z"}))
            .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["recomputed_allocations"], 3);
    let ra = share(a).await;
    assert_eq!((ra.1, ra.2), (Some(3), Some(5)));
    assert!(ra.4.unwrap().ends_with("→ the compute share: 30 %"));
    assert_eq!((share(b).await.1, share(b).await.2), (Some(1), Some(4)));
    // History is appended: an earlier start for the same scope is refused.
    let (status, _) =
        call(serde_json::json!({"cluster": "gpu-east", "basis": "memory", "valid_from": "2026-09-01T00:00:00Z"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    // An organization-wide default does not override the cluster's own version.
    let (status, _) = call(serde_json::json!({"basis": "memory", "valid_from": "2026-09-01T00:00:00Z"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!((share(a).await.1, share(a).await.2), (Some(3), Some(5)));
}

/// A month with allocations the ledger cannot price is not closed in silence: 409 naming them, an empty
/// acknowledgement is refused naming the field, and an acknowledged close is recorded, audited and shown with the
/// findings.
#[tokio::test]
async fn closing_a_month_with_unpriced_allocations_needs_an_acknowledgement() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let pod = Uuid::new_v4();
    let facts = vec![
        start(pod, env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, "Mystery GPU 9000", t0),
        end(pod, "nvidia.com/gpu", datetime!(2026-10-05 10:00 UTC)),
    ];
    let (status, ack) = send(&env, &batch(facts)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let call = |method: &str, path: &str, body: Option<Value>| {
        let app = env.app.clone();
        let mut req = Request::builder().method(method).uri(path).header("authorization", format!("Bearer {admin}"));
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(body.map_or_else(Body::empty, |b| Body::from(b.to_string()))).unwrap();
        async move {
            let response = app.oneshot(req).await.unwrap();
            let status = response.status();
            let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let (status, findings) = call("GET", "/api/v1/periods/2026-10/findings", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        findings["needs_acknowledgement"],
        serde_json::json!(["1 unpriced allocation(s): their GPU model has no class in the approved inventory"])
    );
    let unpriced = findings["items"].as_array().unwrap().iter().find(|f| f["kind"] == "unpriced").unwrap();
    let named = unpriced["details"]["first"][0].as_str().unwrap();
    assert!(named.starts_with("ml-team/pod-") && named.contains(&pod.to_string()), "{unpriced}");
    assert!(unpriced["fix"].as_str().unwrap().contains("Mystery GPU 9000"), "{unpriced}");
    let (status, refused) = call("POST", "/api/v1/periods/2026-10/close", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("1 unpriced allocation(s)"), "{refused}");
    let (status, refused) =
        call("POST", "/api/v1/periods/2026-10/close", Some(serde_json::json!({"acknowledge": "  "}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["field"], "acknowledge");
    let (status, refused) =
        call("POST", "/api/v1/periods/2026-10/close", Some(serde_json::json!({"acknowledged": "x"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let (status, periods) = call("GET", "/api/v1/periods", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!periods.to_string().contains("\"closed_by\":\"admin"), "nothing was closed: {periods}");

    let policy = serde_json::json!({"effective_from": "2026-09", "note": "rates", "policy": {
        "currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}]}});
    let (status, made) = call("POST", "/api/v1/policies", Some(policy)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let (status, approved) =
        call("POST", "/api/v1/policies/1/approve", Some(serde_json::json!({"reason": "ok"}))).await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    let reason = "The Mystery GPU 9000 is a lab card finance does not charge for; inventory entry follows in December.";
    let (status, closed) =
        call("POST", "/api/v1/periods/2026-10/close", Some(serde_json::json!({"acknowledge": reason}))).await;
    assert_eq!(status, StatusCode::OK, "{closed}");
    let (_, findings) = call("GET", "/api/v1/periods/2026-10/findings", None).await;
    let acks = findings["acknowledgements"].as_array().unwrap();
    assert_eq!(acks.len(), 1, "{findings}");
    assert_eq!(acks[0]["reason"], reason);
    assert!(acks[0]["covered"][0].as_str().unwrap().starts_with("1 unpriced"));
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'period.acknowledge' AND org_id = $1")
            .bind(env.org.as_uuid())
            .fetch_one(&env.admin)
            .await
            .unwrap();
    assert_eq!(audited, 1);
}

/// A spool overflow's gap names each dropped kind with its count and the facts' own times: the server puts an
/// `agent_gap` finding on every month those times touch (not the day of the drop), and closing such a month needs an
/// acknowledgement. A malformed gap is refused by field.
#[tokio::test]
async fn a_gap_is_a_finding_in_every_month_its_facts_were_about_and_closing_them_needs_an_acknowledgement() {
    use gpuledger_core::wire::{GapFact, GapKind};
    let env = env().await;
    let dropped_at = datetime!(2026-11-20 14:05 UTC);
    let gap = |kinds: Vec<GapKind>, node: Option<&str>| Fact {
        event_id: event_id("gap", &["1", "9"]),
        observed_at: dropped_at,
        body: FactBody::Gap(GapFact {
            from: dropped_at,
            to: dropped_at,
            dropped: 130,
            kinds,
            node: node.map(Into::into),
        }),
    };
    let kind =
        |k: &str, count: u64, from: OffsetDateTime, to: OffsetDateTime| GapKind { kind: k.into(), count, from, to };
    // Refusals, by field; nothing stored.
    for (bad, field) in [
        (
            gap(vec![kind("telemetry", 1, datetime!(2026-09-02 00:00 UTC), datetime!(2026-09-01 00:00 UTC))], None),
            "facts[0].kinds[0].to",
        ),
        (
            gap(vec![kind("", 1, datetime!(2026-09-01 00:00 UTC), datetime!(2026-09-01 00:00 UTC))], None),
            "facts[0].kinds[0].kind",
        ),
        (
            gap(vec![kind("telemetry", 1, datetime!(2020-01-01 00:00 UTC), datetime!(2026-09-01 00:00 UTC))], None),
            "facts[0].kinds[0].from",
        ),
        (gap(vec![], Some("")), "facts[0].node"),
    ] {
        let (status, v) = send(&env, &batch(vec![bad])).await;
        assert_eq!((status, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some(field)), "{v}");
    }
    assert_eq!(count_where(&env, "data_quality_findings WHERE kind = 'agent_gap'").await, 0);
    let fact = gap(
        vec![
            kind("allocation_ended", 120, datetime!(2026-08-30 10:00 UTC), datetime!(2026-09-14 00:00 UTC)),
            kind("telemetry", 10, datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-10 01:00 UTC)),
        ],
        Some("gpu-node-7"),
    );
    let (status, ack) = send(&env, &batch(vec![fact.clone()])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let (status, _) = send(&env, &batch(vec![fact])).await;
    assert_eq!(status, StatusCode::OK);
    let rows: Vec<(String, String, OffsetDateTime, OffsetDateTime, Value)> = sqlx::query_as(
        "SELECT finding_id, subject, occurred_from, occurred_to, details FROM data_quality_findings
          WHERE kind = 'agent_gap' ORDER BY occurred_from",
    )
    .fetch_all(&env.admin)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2, "August and September, once each: {rows:?}");
    assert!(rows[0].0.ends_with("@2026-08") && rows[1].0.ends_with("@2026-09"), "{rows:?}");
    assert_eq!(rows[0].1, "agent spool on gpu-node-7");
    assert_eq!(
        (rows[0].2, rows[0].3),
        (datetime!(2026-08-30 10:00 UTC), datetime!(2026-09-01 00:00 UTC) - time::Duration::microseconds(1))
    );
    assert_eq!((rows[1].2, rows[1].3), (datetime!(2026-09-01 00:00 UTC), datetime!(2026-09-14 00:00 UTC)));
    assert_eq!(rows[0].4["kinds"].as_array().unwrap().len(), 1, "only the allocations touch August");
    assert_eq!(rows[1].4["kinds"].as_array().unwrap().len(), 2);
    assert_eq!(
        count_where(&env, "data_quality_findings WHERE occurred_from >= '2026-11-01'").await,
        0,
        "not the day of the drop"
    );

    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let call = |method: &str, path: &str, body: Option<Value>| {
        let app = env.app.clone();
        let mut req = Request::builder().method(method).uri(path).header("authorization", format!("Bearer {admin}"));
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(body.map_or_else(Body::empty, |b| Body::from(b.to_string()))).unwrap();
        async move {
            let response = app.oneshot(req).await.unwrap();
            let status = response.status();
            let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let (_, findings) = call("GET", "/api/v1/periods/2026-09/findings", None).await;
    let needs = findings["needs_acknowledgement"].to_string();
    assert!(
        needs.contains("1 agent gap(s)") && needs.contains("allocation_ended: 120") && needs.contains("telemetry: 10"),
        "{findings}"
    );
    let policy = serde_json::json!({"effective_from": "2026-08", "note": "rates", "policy": {
        "currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}]}});
    assert_eq!(call("POST", "/api/v1/policies", Some(policy)).await.0, StatusCode::CREATED);
    assert_eq!(
        call("POST", "/api/v1/policies/1/approve", Some(serde_json::json!({"reason": "ok"}))).await.0,
        StatusCode::OK
    );
    let (status, refused) = call("POST", "/api/v1/periods/2026-08/close", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("agent gap"), "{refused}");
    let (status, closed) = call(
        "POST",
        "/api/v1/periods/2026-08/close",
        Some(serde_json::json!({"acknowledge": "The agent was cut off during the migration; August is known short."})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{closed}");
}

/// A re-list's account of a gap marks the months whose dropped facts all came back recovered: they close without an
/// acknowledgement, while a month with a fact that stays lost still asks for one, and lost telemetry windows ask for
/// one only where the month's policy prices energy. Either fact may come first; re-sent, each is stored once; a
/// malformed account is refused by field.
#[tokio::test]
async fn a_re_list_account_marks_a_gaps_months_recovered_and_only_what_stays_lost_needs_an_acknowledgement() {
    use gpuledger_core::wire::{GapFact, GapKind, GapKindRecovery, GapRecovery};
    let env = env().await;
    let dropped_at = datetime!(2026-11-20 14:05 UTC);
    let kind =
        |k: &str, count: u64, from: OffsetDateTime, to: OffsetDateTime| GapKind { kind: k.into(), count, from, to };
    let gap = |id: &str, kinds: Vec<GapKind>| Fact {
        event_id: id.into(),
        observed_at: dropped_at,
        body: FactBody::Gap(GapFact {
            from: dropped_at,
            to: dropped_at,
            dropped: kinds.iter().map(|k| k.count).sum(),
            kinds,
            node: None,
        }),
    };
    let account = |gap: &str, kinds: &[(&str, u64, u64)], forgotten: u64| Fact {
        event_id: event_id("gap-recovered", &[gap]),
        observed_at: datetime!(2026-11-20 15:00 UTC),
        body: FactBody::GapRecovered(GapRecovery {
            gap: gap.into(),
            kinds: kinds
                .iter()
                .map(|(k, recovered, lost)| GapKindRecovery { kind: (*k).into(), recovered: *recovered, lost: *lost })
                .collect(),
            forgotten,
            unaccounted: 0,
        }),
    };
    // Refusals, by field; nothing stored.
    for (bad, field) in [
        (account("", &[], 0), "facts[0].gap"),
        (
            account("gap/1/9", &[("allocation_started", 1, 0), ("allocation_started", 0, 1)], 0),
            "facts[0].kinds[1].kind",
        ),
        (account("gap/1/9", &[("allocation_started", u64::MAX, 1)], 0), "facts[0].kinds[0].lost"),
        (account("gap/1/9", &[("allocation_started", 3, 1), ("telemetry", 0, 5)], 2), "facts[0].forgotten"),
    ] {
        let (status, v) = send(&env, &batch(vec![bad])).await;
        assert_eq!((status, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some(field)), "{v}");
    }
    assert_eq!(count_where(&env, "allocation_events WHERE kind = 'gap_recovered'").await, 0);

    // Gap 1: July lost namespace facts, August–September allocation starts, September telemetry windows.
    let first = gap(
        "gap/1/9",
        vec![
            kind("namespace_observed", 2, datetime!(2026-07-03 00:00 UTC), datetime!(2026-07-04 00:00 UTC)),
            kind("allocation_started", 120, datetime!(2026-08-30 10:00 UTC), datetime!(2026-09-14 00:00 UTC)),
            kind("telemetry", 10, datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-10 01:00 UTC)),
        ],
    );
    let (status, ack) = send(&env, &batch(vec![first])).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let details = |month: &'static str| {
        let admin = env.admin.clone();
        async move {
            let (d,): (Value,) = sqlx::query_as(
                "SELECT details FROM data_quality_findings WHERE kind = 'agent_gap' AND finding_id = 'gap/1/9@' || $1",
            )
            .bind(month)
            .fetch_one(&admin)
            .await
            .unwrap();
            d
        }
    };
    assert_eq!(details("2026-08").await["recovered"], false);
    // The re-list derived every start again and one of the two namespace facts; telemetry never comes back.
    let report =
        account("gap/1/9", &[("allocation_started", 120, 0), ("namespace_observed", 1, 1), ("telemetry", 0, 10)], 0);
    let (status, ack) = send(&env, &batch(vec![report.clone()])).await;
    assert_eq!((status, ack["stored"].as_u64()), (StatusCode::OK, Some(1)), "{ack}");
    let (july, august, september) = (details("2026-07").await, details("2026-08").await, details("2026-09").await);
    assert_eq!(july["recovered"], false, "a namespace fact stays lost: {july}");
    assert_eq!(
        july["recovery"]["kinds"],
        serde_json::json!([{"kind": "namespace_observed", "recovered": 1, "lost": 1}])
    );
    assert_eq!(august["recovered"], true, "{august}");
    assert_eq!((september["recovered"].as_bool(), september["telemetry_lost"].as_u64()), (Some(true), Some(10)));
    assert_eq!(september["dropped"], 132, "the rest of the finding stays as it was");
    // Re-sent: stored once, the findings unchanged.
    let (status, ack) = send(&env, &batch(vec![report])).await;
    assert_eq!((status, ack["stored"].as_u64()), (StatusCode::OK, Some(0)), "{ack}");
    assert_eq!(details("2026-09").await, september);

    // Gap 2, October: its account arrives before the gap itself.
    let second = gap(
        "gap/20/29",
        vec![kind("allocation_ended", 4, datetime!(2026-10-02 00:00 UTC), datetime!(2026-10-03 00:00 UTC))],
    );
    let (status, _) = send(&env, &batch(vec![account("gap/20/29", &[("allocation_ended", 4, 0)], 0)])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(count_where(&env, "data_quality_findings WHERE finding_id LIKE 'gap/20/29%'").await, 0);
    let (status, _) = send(&env, &batch(vec![second])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        count_where(
            &env,
            "data_quality_findings WHERE finding_id = 'gap/20/29@2026-10' AND details->'recovered' = 'true'::jsonb"
        )
        .await,
        1
    );

    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let call = |method: &str, path: &str, body: Option<Value>| {
        let app = env.app.clone();
        let mut req = Request::builder().method(method).uri(path).header("authorization", format!("Bearer {admin}"));
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(body.map_or_else(Body::empty, |b| Body::from(b.to_string()))).unwrap();
        async move {
            let response = app.oneshot(req).await.unwrap();
            let status = response.status();
            let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    // Rates from July; from September energy is priced too.
    let classes = serde_json::json!([{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}]);
    for (n, from, policy) in [
        (1, "2026-07", serde_json::json!({"currency": "USD", "classes": classes})),
        (
            2,
            "2026-09",
            serde_json::json!({"currency": "USD", "classes": classes, "energy": {"per_kwh": "0.12", "pue": "1.3"}}),
        ),
    ] {
        let body = serde_json::json!({"effective_from": from, "note": "rates", "policy": policy});
        let (status, created) = call("POST", "/api/v1/policies", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let (status, approved) =
            call("POST", &format!("/api/v1/policies/{n}/approve"), Some(serde_json::json!({"reason": "ok"}))).await;
        assert_eq!(status, StatusCode::OK, "{approved}");
    }
    let needs = |f: &Value| f["needs_acknowledgement"].as_array().cloned().unwrap_or_default();
    let (_, july) = call("GET", "/api/v1/periods/2026-07/findings", None).await;
    assert_eq!(needs(&july).len(), 1, "{july}");
    assert!(needs(&july)[0].as_str().unwrap().contains("namespace_observed: 1"), "{july}");
    let (_, september) = call("GET", "/api/v1/periods/2026-09/findings", None).await;
    assert_eq!(needs(&september).len(), 1, "{september}");
    assert!(needs(&september)[0].as_str().unwrap().contains("10 telemetry window(s)"), "{september}");
    for month in ["2026-08", "2026-10"] {
        let (_, f) = call("GET", &format!("/api/v1/periods/{month}/findings"), None).await;
        assert_eq!(needs(&f), Vec::<Value>::new(), "{f}");
        assert_eq!(f["by_kind"]["agent_gap"], 1, "the recovered gap is still shown: {f}");
        let item = f["items"].as_array().unwrap().iter().find(|i| i["kind"] == "agent_gap").unwrap();
        assert!(item["fix"].as_str().unwrap().starts_with("nothing to do"), "{item}");
    }
    let (status, closed) = call("POST", "/api/v1/periods/2026-08/close", None).await;
    assert_eq!(status, StatusCode::OK, "{closed}");
    let (status, refused) = call("POST", "/api/v1/periods/2026-07/close", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("agent gap"), "{refused}");
}

/// Soft shares on one GPU that sum above it are an over-commit finding naming the device and the pods.
#[tokio::test]
async fn soft_shares_above_one_gpu_are_an_overcommit_finding() {
    use gpuledger_core::sharing::SoftScheduler;
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let gpu = "GPU-3b1d8f2e-6a4c-4e1b-9c7d-2f5e8a0b1c3d";
    let share = |c: &str| SharingMode::SoftShare {
        scheduler: SoftScheduler::Hami,
        compute: Some(c.parse().unwrap()),
        memory: None,
        memory_mib: None,
    };
    let mut facts = Vec::new();
    let pods: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    for (pod, c) in pods.iter().zip(["1/2", "3/10", "2/5"]) {
        let mut f = start(*pod, env.ns_uid, "nvidia.com/gpu", 1, share(c), "NVIDIA L4", t0);
        if let FactBody::AllocationStarted(s) = &mut f.body {
            s.device_ids = vec![gpu.into()];
        }
        facts.push(f);
        facts.push(end(*pod, "nvidia.com/gpu", datetime!(2026-10-05 10:00 UTC)));
    }
    let (status, ack) = send(&env, &batch(facts)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let req = Request::get("/api/v1/periods/2026-10/findings")
        .header("authorization", format!("Bearer {admin}"))
        .body(Body::empty())
        .unwrap();
    let response = env.app.clone().oneshot(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let findings: Value = serde_json::from_slice(&to_bytes(response.into_body(), 1 << 22).await.unwrap()).unwrap();
    assert_eq!(findings["by_kind"]["overcommit"], 1, "{findings}");
    let f = findings["items"].as_array().unwrap().iter().find(|f| f["kind"] == "overcommit").unwrap();
    assert_eq!(f["subject"], gpu);
    assert_eq!(f["details"]["peak"], "1.200");
    assert_eq!(f["details"]["allocations"].as_array().unwrap().len(), 3);
    assert_eq!((f["from"].as_str(), f["to"].as_str()), (Some("2026-10-05T08:00:00Z"), Some("2026-10-05T10:00:00Z")));
    assert!(f["fix"].as_str().unwrap().contains("scheduler"));
}

/// The audit log can leave routine actions out (the portal hides agents' once-a-minute `token.use` by default).
#[tokio::test]
async fn routine_token_use_can_be_left_out_of_the_audit_log() {
    let env = env().await;
    let (status, _) = send(&env, &batch(vec![])).await;
    assert_eq!(status, StatusCode::OK);
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let get = |q: &str| {
        let req = Request::get(format!("/api/v1/audit?{q}")).header("authorization", format!("Bearer {admin}"));
        let app = env.app.clone();
        let req = req.body(Body::empty()).unwrap();
        async move {
            let response = app.oneshot(req).await.unwrap();
            let status = response.status();
            let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let actions = |log: &Value| -> Vec<String> {
        log["items"].as_array().unwrap().iter().map(|i| i["action"].as_str().unwrap().to_string()).collect()
    };
    let (status, all) = get("limit=1000").await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert!(actions(&all).iter().any(|a| a == "token.use"), "{all}");
    let (_, quiet) = get("limit=1000&exclude=token.use").await;
    assert!(!actions(&quiet).iter().any(|a| a == "token.use"));
    assert_eq!(actions(&quiet).len(), actions(&all).iter().filter(|a| *a != "token.use").count());
    let many = (0..11).map(|i| format!("a{i}")).collect::<Vec<_>>().join(",");
    let (status, bad) = get(&format!("exclude={many}")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bad["field"], "exclude");
    let (status, bad) = get("token_use=sometimes").await;
    assert_eq!((status, bad["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("token_use")), "{bad}");

    // Folded (issue 33 item 7): one row per token and UTC day with a count, each day once however the pages fall.
    for (at, actor, action) in [
        ("2025-01-01T10:00:00Z", "token:a", "token.use"),
        ("2025-01-01T11:00:00Z", "token:a", "token.use"),
        ("2025-01-01T12:00:00Z", "token:a", "token.use"),
        ("2025-01-01T11:30:00Z", "token:b", "token.use"),
        ("2025-01-01T11:45:00Z", "user:ada", "policy.approve"),
        ("2025-01-02T09:00:00Z", "token:a", "token.use"),
        ("2025-01-02T23:59:00Z", "token:a", "token.use"),
    ] {
        sqlx::query(
            "INSERT INTO audit_log (org_id, audit_id, at, actor, action, target, source)
             VALUES ($1, gen_random_uuid(), $2::timestamptz, $3, $4, $3, '192.0.2.1')",
        )
        .bind(env.org.as_uuid())
        .bind(at)
        .bind(actor)
        .bind(action)
        .execute(&env.admin)
        .await
        .unwrap();
    }
    let rows = |log: &Value| -> Vec<(String, String, i64)> {
        log["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (i["at"].as_str().unwrap().into(), i["actor"].as_str().unwrap().into(), i["count"].as_i64().unwrap())
            })
            .collect()
    };
    let (status, folded) = get("limit=1000&token_use=fold&before=2025-02-01T00:00:00Z").await;
    assert_eq!(status, StatusCode::OK, "{folded}");
    let r = |at: &str, who: &str, n: i64| (at.to_string(), who.to_string(), n);
    let want = vec![
        r("2025-01-02T23:59:00Z", "token:a", 2),
        r("2025-01-01T12:00:00Z", "token:a", 3),
        r("2025-01-01T11:45:00Z", "user:ada", 1),
        r("2025-01-01T11:30:00Z", "token:b", 1),
    ];
    assert_eq!(rows(&folded), want, "{folded}");
    assert_eq!(folded["items"][1]["first_at"], "2025-01-01T10:00:00Z", "{folded}");
    // Two per page: the day of token a is not split by the cursor, nor shown twice.
    let (_, first) = get("limit=2&token_use=fold&before=2025-02-01T00:00:00Z").await;
    assert_eq!(rows(&first), want[..2].to_vec(), "{first}");
    let next = first["next_before"].as_str().unwrap().to_string();
    let (_, second) = get(&format!("limit=2&token_use=fold&before={next}")).await;
    assert_eq!(rows(&second), want[2..].to_vec(), "{second}");
    // Hidden, and every record (the default).
    let (_, hidden) = get("limit=1000&token_use=hide&before=2025-02-01T00:00:00Z").await;
    assert_eq!(rows(&hidden), vec![r("2025-01-01T11:45:00Z", "user:ada", 1)], "{hidden}");
    let (_, each) = get("limit=1000&before=2025-02-01T00:00:00Z").await;
    assert_eq!(rows(&each).len(), 7, "{each}");
}

/// Telemetry stored before the tiers (migration 26) is moved into them by the upkeep, through the same merge as
/// ingest: nothing lost, nothing counted twice, the old rows deleted, and a second round finds nothing to do.
#[tokio::test]
async fn telemetry_stored_before_the_tiers_moves_into_them() {
    let env = env().await;
    // 90 one-minute windows (as agents sent them before), one of them with a value the tiers refuse (150 %).
    sqlx::query(
        "INSERT INTO telemetry_rollups (org_id, cluster_id, gpu_uuid, gpu_instance_id, window_start, window_end, node,
             samples, util_min, util_avg, util_max, power_min, power_avg, power_max, energy_j)
         SELECT $1, c.cluster_id, 'GPU-legacy', -1, t, t + interval '1 minute', 'node-9', 6,
                10, CASE WHEN m = 7 THEN 150 ELSE 40 END, 80, 100, 200, 300, 12000.4
           FROM clusters c, generate_series(0, 89) m, LATERAL (SELECT timestamptz '2026-10-31 23:00Z' + m * interval '1 minute') AS x(t)
          WHERE c.org_id = $1 AND c.name = 'gpu-east'",
    )
    .bind(env.org.as_uuid())
    .execute(&env.admin)
    .await
    .unwrap();
    let moved = gpuledger_server::maintenance::move_legacy_telemetry(&env.db).await.unwrap();
    assert_eq!(moved, 90);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM telemetry_rollups").fetch_one(&env.admin).await.unwrap();
    assert_eq!(left, 0);
    let (windows, energy, util_ms): (i64, i64, i64) = sqlx::query_as(
        "SELECT sum(h.windows)::bigint, sum(h.energy_j)::bigint, sum(h.util_ms)::bigint FROM telemetry_gpu_hours h
           JOIN telemetry_series s ON s.org_id = h.org_id AND s.series_id = h.series_id WHERE s.gpu_uuid = 'GPU-legacy'",
    )
    .fetch_one(&env.admin)
    .await
    .unwrap();
    // Every window kept, energy rounded to joules per window; the one with 150 % keeps its window without its
    // utilization.
    assert_eq!((windows, energy, util_ms), (90, 90 * 12_000, 89 * 60_000));
    assert_eq!(gpuledger_server::maintenance::move_legacy_telemetry(&env.db).await.unwrap(), 0);
}

fn mig_window(gpu: &str, gi: Option<u32>, minute: i64, util: f64) -> Fact {
    let gi_text = gi.map_or("-".to_string(), |g| g.to_string());
    Fact {
        event_id: event_id("telemetry", &[gpu, &gi_text, &minute.to_string()]),
        observed_at: datetime!(2026-11-02 10:00 UTC),
        body: FactBody::Telemetry(TelemetryRollup {
            node: "node-7".into(),
            gpu_uuid: gpu.into(),
            gpu_instance_id: gi,
            mig_profile: gi.map(|_| "1g.10gb".to_string()),
            window_start: datetime!(2026-11-02 09:00 UTC) + time::Duration::minutes(minute),
            window_end: datetime!(2026-11-02 09:01 UTC) + time::Duration::minutes(minute),
            samples: 6,
            utilization_pct: Some(Stat { min: util, avg: util, max: util }),
            memory_used_mib: Some(Stat { min: 1000.0, avg: 1000.0, max: 1000.0 }),
            power_w: gi.is_none().then_some(Stat { min: 200.0, avg: 200.0, max: 200.0 }),
            energy_j: gi.is_none().then_some(12_000.0),
            pod: None,
        }),
    }
}

/// A MIG GPU's instances live in their GPU's row (one row per GPU-hour): each instance's windows and sums are its
/// own, the GPU's energy stays the GPU's, late windows of one instance leave the others alone, coverage counts the
/// instances, an instance past the mask is refused at the door, and an instance whose GPU never reported gets
/// its GPU's series.
#[tokio::test]
async fn mig_instances_share_their_gpus_row() {
    let env = env().await;
    let gpu = "GPU-bbbbbbbb-0000-0000-0000-000000000007";
    let mut facts: Vec<Fact> = (0..60).map(|m| mig_window(gpu, None, m, 0.0)).collect();
    facts.extend((0..60).map(|m| mig_window(gpu, Some(1), m, 50.0)));
    facts.extend((0..30).map(|m| mig_window(gpu, Some(9), m, 20.0)));
    let (status, ack) = send(&env, &batch(facts)).await;
    assert_eq!((status, ack["stored"].as_u64()), (StatusCode::OK, Some(150)), "{ack}");
    // Late windows of instance 9 and a redelivery of instance 1's.
    let late = vec![mig_window(gpu, Some(9), 40, 20.0), mig_window(gpu, Some(1), 3, 50.0)];
    let (_, ack) = send(&env, &batch(late)).await;
    assert_eq!(ack["stored"], 1, "{ack}");
    #[allow(clippy::type_complexity)]
    let rows: Vec<(i16, i64, i32, i64, i32, Vec<u8>, Vec<u8>, time::OffsetDateTime)> = sqlx::query_as(
        "SELECT windows, energy_j, inst_windows, instances, inst_sampled_ms, inst_sums, block, hour FROM telemetry_gpu_hours",
    )
    .fetch_all(&env.admin)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "one row for the GPU and its instances");
    let (windows, energy, inst_windows, mask, inst_ms, inst, block, hour) = rows.into_iter().next().unwrap();
    assert_eq!((windows, energy, inst_windows, mask, inst_ms), (60, 720_000, 91, (1 << 1) | (1 << 9), 91 * 60_000));
    let sums = gpuledger_core::telemetry::decode_instance_sums(&inst).unwrap();
    assert_eq!(
        sums.iter().map(|(gi, s)| (*gi, s.windows, s.util_avg_pct())).collect::<Vec<_>>(),
        vec![(1, 60, Some(50.0)), (9, 31, Some(20.0))]
    );
    let kept = gpuledger_server::telemetry::store::unpack_gpu_hour(hour, &block).unwrap();
    assert_eq!(kept.iter().map(|(gi, ws)| (*gi, ws.len())).collect::<Vec<_>>(), vec![(-1, 60), (1, 60), (9, 31)]);
    // Coverage: one GPU, two instances, every window.
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let cov = gpuledger_server::telemetry::coverage(
        &mut tx,
        gpuledger_core::Period::parse("2026-11").unwrap(),
        datetime!(2026-11-15 00:00 UTC),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let node = cov.nodes.iter().find(|n| n.node.as_deref() == Some("node-7")).unwrap();
    assert_eq!((node.gpus, node.mig_instances, node.windows), (1, 2, 151), "{node:?}");
    // An instance past the mask is refused by name.
    let (status, ack) = send(&env, &batch(vec![mig_window(gpu, Some(64), 0, 1.0)])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{ack}");
    assert!(ack["field"].as_str().unwrap().ends_with("gpu_instance_id"), "{ack}");
    // Instances of a GPU that never reported itself: the GPU's series is made, its own columns stay empty.
    let other = "GPU-bbbbbbbb-0000-0000-0000-000000000008";
    let (_, ack) = send(&env, &batch(vec![mig_window(other, Some(2), 0, 30.0)])).await;
    assert_eq!(ack["stored"], 1, "{ack}");
    let (windows, mask, gi): (i16, i64, i32) = sqlx::query_as(
        "SELECT h.windows, h.instances, s.gpu_instance_id FROM telemetry_gpu_hours h
           JOIN telemetry_series s USING (org_id, series_id) WHERE s.gpu_uuid = $1",
    )
    .bind(other)
    .fetch_one(&env.admin)
    .await
    .unwrap();
    assert_eq!((windows, mask, gi), (0, 1 << 2, -1));
}

/// Telemetry stored one row per device-hour (migrations 26–30) moves into one row per GPU-hour: blocks through the
/// merge (exact, nothing counted twice), an hour whose block retention dropped as its sums, the old rows deleted.
#[tokio::test]
async fn device_hours_stored_before_move_into_gpu_hours() {
    use std::io::Write;
    let env = env().await;
    let org = env.org.as_uuid();
    let cluster: uuid::Uuid =
        sqlx::query_scalar("SELECT cluster_id FROM clusters WHERE org_id = $1 AND name = 'gpu-east'")
            .bind(org)
            .fetch_one(&env.admin)
            .await
            .unwrap();
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO telemetry_series (org_id, cluster_id, gpu_uuid, gpu_instance_id, node, mig_profile)
         VALUES ($1, $2, 'GPU-old', -1, 'node-3', NULL), ($1, $2, 'GPU-old', 4, 'node-3', '3g.40gb')
         RETURNING series_id",
    )
    .bind(org)
    .bind(cluster)
    .fetch_all(&env.admin)
    .await
    .unwrap();
    let hour = datetime!(2026-11-03 05:00 UTC);
    let hour_ms = hour.unix_timestamp() * 1000;
    let windows: Vec<gpuledger_core::telemetry::Window> = (0..60)
        .map(|m| gpuledger_core::telemetry::Window {
            start_ms: hour_ms + m * 60_000,
            end_ms: hour_ms + (m + 1) * 60_000,
            samples: 6,
            util: Some(gpuledger_core::telemetry::Triple { min: 400, avg: 400, max: 400 }),
            mem: None,
            power: Some(gpuledger_core::telemetry::Triple { min: 2000, avg: 2000, max: 2000 }),
            energy_j: Some(12_000),
            pod: None,
        })
        .collect();
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&gpuledger_core::telemetry::encode(hour_ms, &windows)).unwrap();
    let block = z.finish().unwrap();
    let s = gpuledger_core::telemetry::HourSums::of(hour_ms, &windows);
    // The GPU's hour with its block; the instance's hour (two hours later) as sums only.
    for (series, h, with_block) in [(ids[0], hour, true), (ids[1], hour + time::Duration::hours(2), false)] {
        sqlx::query(
            "INSERT INTO telemetry_hours (org_id, series_id, hour, windows, samples, sampled_ms, span_from_ms, span_to_ms,
                 util_ms, util_sum, util_max, mem_max, power_max, energy_ms, energy_j, block_bytes)
             VALUES ($1, $2, $3, $4, $5, $6, 0, $6, $6, $7, 400, 0, 2000, $6, $8, 0)",
        )
        .bind(org)
        .bind(series)
        .bind(h)
        .bind(s.windows as i16)
        .bind(s.samples as i32)
        .bind(s.sampled_ms as i32)
        .bind(s.util_sum)
        .bind(s.energy_j)
        .execute(&env.admin)
        .await
        .unwrap();
        if with_block {
            sqlx::query(
                "INSERT INTO telemetry_windows (org_id, series_id, hour, windows, block) VALUES ($1, $2, $3, 60, $4)",
            )
            .bind(org)
            .bind(series)
            .bind(h)
            .bind(&block)
            .execute(&env.admin)
            .await
            .unwrap();
        }
    }
    gpuledger_server::maintenance::run_once(&env.db, datetime!(2026-11-15 00:00 UTC)).await.unwrap();
    assert_eq!(gpuledger_server::maintenance::move_old_tiers(&env.db).await.unwrap(), 2);
    let left: i64 =
        sqlx::query_scalar("SELECT (SELECT count(*) FROM telemetry_hours) + (SELECT count(*) FROM telemetry_windows)")
            .fetch_one(&env.admin)
            .await
            .unwrap();
    assert_eq!(left, 0);
    let rows: Vec<(time::OffsetDateTime, i16, i64, i64, i32, bool)> = sqlx::query_as(
        "SELECT hour, windows, energy_j, instances, inst_windows, block IS NOT NULL FROM telemetry_gpu_hours
          WHERE series_id = $1 ORDER BY hour",
    )
    .bind(ids[0])
    .fetch_all(&env.admin)
    .await
    .unwrap();
    assert_eq!(rows, vec![(hour, 60, 720_000, 0, 0, true), (hour + time::Duration::hours(2), 0, 0, 1 << 4, 60, false)]);
    assert_eq!(gpuledger_server::maintenance::move_old_tiers(&env.db).await.unwrap(), 0);
}

/// An agent's token is kept for a second (`auth::agents`): revoked through this process it is refused at once, an
/// organization suspended here refuses at once, and a token revoked by another process (straight in the database) is
/// refused once the second is over — never later.
#[tokio::test]
async fn a_kept_agent_token_ends_with_its_revocation() {
    let env = env().await;
    let t0 = datetime!(2026-10-05 08:00 UTC);
    let body = |i: u128| {
        let b =
            batch(vec![start(Uuid::from_u128(i), env.ns_uid, "nvidia.com/gpu", 1, SharingMode::Exclusive, H100, t0)]);
        serde_json::to_vec(&b).unwrap()
    };
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (elsewhere_id, elsewhere) =
        auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent-2", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    for token in [&env.agent_token, &elsewhere] {
        assert_eq!(post(&env, Some(token), body(1), false).await.0, StatusCode::OK);
    }

    // Revoked by another process: refused after at most `AGENT_RECHECK`, whatever it was answered before.
    common::revoke_elsewhere(&env.admin, env.org.as_uuid(), elsewhere_id).await;
    tokio::time::sleep(auth::agents::AGENT_RECHECK + std::time::Duration::from_millis(100)).await;
    let (status, problem) = post(&env, Some(&elsewhere), body(2), false).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{problem}");

    // Suspended by this process: the kept token is asked about again at once.
    assert_eq!(post(&env, Some(&env.agent_token), body(3), false).await.0, StatusCode::OK);
    let slug: String = sqlx::query_scalar("SELECT slug FROM organizations WHERE org_id = $1")
        .bind(env.org.as_uuid())
        .fetch_one(&env.admin)
        .await
        .unwrap();
    assert!(gpuledger_server::orgs::set_state(&env.db, &slug, true, "test", "operator").await.unwrap());
    let (status, problem) = post(&env, Some(&env.agent_token), body(4), false).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    assert!(gpuledger_server::orgs::set_state(&env.db, &slug, false, "", "operator").await.unwrap());
    assert_eq!(post(&env, Some(&env.agent_token), body(5), false).await.0, StatusCode::OK);

    // Revoked through this process: refused at once.
    let token_id: Uuid = sqlx::query_scalar(
        "SELECT token_id FROM api_tokens WHERE org_id = $1 AND name = 'agent' AND revoked_at IS NULL",
    )
    .bind(env.org.as_uuid())
    .fetch_one(&env.admin)
    .await
    .unwrap();
    let admin = gpuledger_server::auth::Principal::for_token(env.org, Uuid::new_v4(), Scope::Admin);
    let state = AppState::new(env.db.clone(), Some(env.org));
    gpuledger_server::access::tokens::revoke_for(&state, &admin, &token_id.to_string()).await.unwrap();
    let (status, problem) = post(&env, Some(&env.agent_token), body(6), false).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{problem}");
}
