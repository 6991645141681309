//! Onboarding through the API against real PostgreSQL as the app role: departments and tenants defined after the
//! facts that name them arrived (the waiting namespaces and usage are taken over), and inventory entries that close
//! inventory gaps by recomputing the allocations from their stored facts, versioned by validity.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    ids::{MigProfile, OrgId},
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationStart, AttributionLabels, Batch, Fact, FactBody, Holder, NamespaceFact, ServiceUsageFact,
        WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

const L4: &str = "NVIDIA L4";
const A100: &str = "NVIDIA A100-SXM4-40GB";

struct Env {
    app: axum::Router,
    agent: String,
    admin: String,
    export: String,
    su: sqlx::PgPool,
    _db: gpuledger_e2e::TestDatabase,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme").await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let su = common::admin_pool(&test_db).await;
    let app = app::router(AppState::new(db, None), &HttpOptions::default());
    Env { app, agent, admin, export, su, _db: test_db }
}

async fn call(env: &Env, token: &str, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let r = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = env.app.clone().oneshot(r).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn start(pod: &str, ns: Uuid, mode: SharingMode, model: &str, at: OffsetDateTime) -> Fact {
    let resource = match &mode {
        SharingMode::Mig { profile } => format!("nvidia.com/mig-{profile}"),
        _ => "nvidia.com/gpu".into(),
    };
    let allocation_id = format!("{pod}/main/{resource}");
    Fact {
        event_id: event_id("alloc-start", &[&allocation_id]),
        observed_at: at,
        body: FactBody::AllocationStarted(AllocationStart {
            allocation_id,
            holder: Holder::Pod,
            holder_uid: Uuid::new_v4(),
            holder_name: pod.into(),
            namespace: "nlp".into(),
            namespace_uid: Some(ns),
            container: Some("main".into()),
            node: Some("node-1".into()),
            resource,
            units: 1,
            mode,
            gpu_model: Some(model.into()),
            device_ids: vec![],
            started_at: at,
            labels: AttributionLabels::default(),
        }),
    }
}

async fn interval(env: &Env, pod: &str) -> (Option<String>, Option<i64>, Option<i64>) {
    sqlx::query_as("SELECT gpu_class, fraction_num, fraction_den FROM allocation_intervals WHERE holder_name = $1")
        .bind(pod)
        .fetch_one(&env.su)
        .await
        .unwrap()
}

#[tokio::test]
async fn tenants_and_inventory_defined_after_the_facts_take_them_over() {
    let env = env().await;
    let ns = Uuid::new_v4();
    let labelled = datetime!(2026-10-01 00:00 UTC);
    let t0 = datetime!(2026-10-05 00:00 UTC);
    let mig = SharingMode::Mig { profile: MigProfile::new("3g.20gb").unwrap() };
    let facts = vec![
        Fact {
            event_id: event_id("namespace", &[&ns.to_string(), "1"]),
            observed_at: labelled,
            body: FactBody::NamespaceObserved(NamespaceFact {
                namespace_uid: ns,
                name: "nlp".into(),
                created_at: datetime!(2026-09-01 00:00 UTC),
                deleted_at: None,
                labels: AttributionLabels { tenant: Some("nlp-research".into()), ..Default::default() },
                labels_since: labelled,
            }),
        },
        start("l4-pod", ns, SharingMode::Exclusive, L4, t0),
        start("mig-pod", ns, mig, A100, t0),
        Fact {
            event_id: event_id("service-usage", &["llm", "nlp-research", "m", "1"]),
            observed_at: t0 + Duration::hours(1),
            body: FactBody::ServiceUsage(ServiceUsageFact {
                endpoint: "llm".into(),
                model: "m".into(),
                tenant: "nlp-research".into(),
                window_start: t0,
                window_end: t0 + Duration::hours(1),
                requests: 3,
                input_tokens: 30,
                output_tokens: 60,
                ttft_ms_sum: None,
                ttft_count: None,
            }),
        },
    ];
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    let (status, ack) =
        call(&env, &env.agent, "POST", "/api/v1/ingest/batches", Some(serde_json::to_value(&batch).unwrap())).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert!(ack["flagged"].as_array().unwrap().len() >= 3, "unknown tenant (twice) and the MIG gap: {ack}");
    assert_eq!(interval(&env, "l4-pod").await, (None, Some(1), Some(1)), "whole GPU, but no class yet");
    assert_eq!(interval(&env, "mig-pod").await, (None, None, None), "an inventory gap");

    // Departments: refusals name the field; duplicates conflict.
    let (status, p) = call(&env, &env.admin, "POST", "/api/v1/departments", Some(json!({"name": "  "}))).await;
    assert_eq!((status, p["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("name")), "{p}");
    let (status, d) = call(&env, &env.admin, "POST", "/api/v1/departments", Some(json!({"name": "Research"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{d}");
    let (status, _) = call(&env, &env.admin, "POST", "/api/v1/departments", Some(json!({"name": "Research"}))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = call(&env, &env.export, "POST", "/api/v1/departments", Some(json!({"name": "Ops"}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "export tokens read only");

    // The tenant: its waiting namespace is owned from when the labels said, its usage is attributed.
    let (status, p) =
        call(&env, &env.admin, "POST", "/api/v1/tenants", Some(json!({"name": "nlp-research", "department": "Nope"})))
            .await;
    assert_eq!((status, p["field"].as_str()), (StatusCode::NOT_FOUND, Some("department")), "{p}");
    let (status, t) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/tenants",
        Some(json!({"name": "nlp-research", "department": "Research"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{t}");
    assert_eq!((t["namespaces_mapped"].as_u64(), t["usage_rows_attributed"].as_u64()), (Some(1), Some(1)), "{t}");
    let owner: (OffsetDateTime, Option<OffsetDateTime>, String) = sqlx::query_as(
        "SELECT o.valid_from, o.valid_to, t.name FROM namespace_ownership o JOIN tenants t USING (org_id, tenant_id)
          WHERE o.namespace_uid = $1",
    )
    .bind(ns)
    .fetch_one(&env.su)
    .await
    .unwrap();
    assert_eq!(owner, (labelled, None, "nlp-research".to_string()));
    let (_, list) = call(&env, &env.export, "GET", "/api/v1/tenants", None).await;
    assert_eq!(list["items"][0]["department"], "Research", "{list}");
    assert_eq!(list["items"][0]["namespaces"], 1, "{list}");

    // Inventory: the model's class and the MIG fraction close the gaps of the allocations already stored.
    let (status, m) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/models",
        Some(json!({"model": L4, "gpu_class": "L4", "valid_from": "2026-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{m}");
    assert!(m["recomputed_allocations"].as_u64().unwrap() >= 1, "{m}");
    assert_eq!(interval(&env, "l4-pod").await, (Some("L4".into()), Some(1), Some(1)));
    // Not the document's form: 422; more than one GPU is the inventory's rule: 409. Each names the field.
    let (invalid, refused) = (StatusCode::UNPROCESSABLE_ENTITY, StatusCode::CONFLICT);
    for (body, field, expected) in [
        (
            json!({"kind": "mig", "model": A100, "profile": "3g.20gb", "fraction": "8/7", "valid_from": "2026-01-01T00:00:00Z"}),
            "fraction",
            refused,
        ),
        (
            json!({"kind": "mig", "model": A100, "profile": "3g.20gb", "fraction": "a third", "valid_from": "2026-01-01T00:00:00Z"}),
            "fraction",
            invalid,
        ),
        (
            json!({"kind": "mig", "model": A100, "profile": "half", "fraction": "1/2", "valid_from": "2026-01-01T00:00:00Z"}),
            "profile",
            invalid,
        ),
        (
            json!({"kind": "tpu", "model": A100, "profile": "x", "fraction": "1/2", "valid_from": "2026-01-01T00:00:00Z"}),
            "kind",
            invalid,
        ),
        (
            json!({"kind": "mig", "model": A100, "profile": "3g.20gb", "fraction": "3/7", "valid_from": "yesterday"}),
            "valid_from",
            invalid,
        ),
    ] {
        let (status, p) = call(&env, &env.admin, "POST", "/api/v1/inventory/profiles", Some(body.clone())).await;
        assert_eq!(status, expected, "{body}: {p}");
        assert!(p["field"].as_str().unwrap_or_default().contains(field), "{body}: {p}");
    }
    assert_eq!(interval(&env, "mig-pod").await, (None, None, None), "refusals change nothing");
    let (status, r) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/profiles",
        Some(json!({"kind": "mig", "model": A100, "profile": "3g.20gb", "fraction": "3/7", "valid_from": "2026-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{r}");
    assert_eq!(interval(&env, "mig-pod").await, (None, Some(3), Some(7)), "3/7 of a GPU (its model has no class)");

    // Versions: a later entry ends the one in force; an earlier or equal start is refused.
    let (status, r) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/models",
        Some(json!({"model": L4, "gpu_class": "L4-premium", "valid_from": "2026-10-03T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{r}");
    assert_eq!(interval(&env, "l4-pod").await.0.as_deref(), Some("L4-premium"), "started after the change");
    let (status, _) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/models",
        Some(json!({"model": L4, "gpu_class": "L4", "valid_from": "2026-06-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (_, inv) = call(&env, &env.export, "GET", "/api/v1/inventory", None).await;
    let models = inv["models"].as_array().unwrap();
    assert_eq!(models.len(), 2, "{inv}");
    assert_eq!(models[0]["valid_to"], models[1]["valid_from"], "the old entry ends where the new one starts: {inv}");
    assert_eq!(inv["profiles"][0]["fraction"], "3/7");

    // Time-slicing declarations, per cluster.
    let (status, p) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/timeslicing",
        Some(json!({"cluster": "nowhere", "name": "l4-x4", "replicas": 4, "valid_from": "2026-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!((status, p["field"].as_str()), (StatusCode::NOT_FOUND, Some("cluster")), "{p}");
    let (status, p) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/timeslicing",
        Some(json!({"cluster": "gpu-east", "name": "l4-x4", "replicas": 4, "valid_from": "2026-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{p}");
    let (_, inv) = call(&env, &env.admin, "GET", "/api/v1/inventory", None).await;
    assert_eq!(inv["timeslicing"][0]["replicas"], 4, "{inv}");

    // Every write is audited.
    let actions: Vec<String> =
        sqlx::query_scalar("SELECT action FROM audit_log ORDER BY at").fetch_all(&env.su).await.unwrap();
    for a in ["department.create", "tenant.create", "inventory.model", "inventory.profile", "inventory.timeslicing"] {
        assert!(actions.iter().any(|x| x == a), "{a} in {actions:?}");
    }
}

/// GPU Feature Discovery labels a time-sliced node's product `NVIDIA-L4-SHARED`: the model is the L4 of the
/// inventory. A model the inventory does not know leaves its allocations unpriced — said on the month's findings
/// with the fix, not only counted in the ledger's notes — until the model is added.
#[tokio::test]
async fn shared_product_labels_are_priced_and_unpriced_allocations_are_findings() {
    let env = env().await;
    let ns = Uuid::new_v4();
    let t0 = datetime!(2026-10-05 00:00 UTC);
    let (status, v) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/models",
        Some(json!({"model": L4, "gpu_class": "L4", "valid_from": "2026-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts: vec![
            start("shared-pod", ns, SharingMode::TimeSlice { replicas: 4 }, "NVIDIA-L4-SHARED", t0),
            start("mig-single", ns, SharingMode::Exclusive, "NVIDIA-L4-MIG-1g.6gb", t0),
            start("new-pod", ns, SharingMode::Exclusive, "NVIDIA B300", t0),
        ],
    };
    let (status, ack) =
        call(&env, &env.agent, "POST", "/api/v1/ingest/batches", Some(serde_json::to_value(&batch).unwrap())).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(interval(&env, "shared-pod").await, (Some("L4".into()), Some(1), Some(4)), "the L4, a quarter");
    assert_eq!(interval(&env, "mig-single").await.0.as_deref(), Some("L4"), "the MIG suffix names the L4 too");
    assert_eq!(interval(&env, "new-pod").await.0, None);

    let (status, f) = call(&env, &env.admin, "GET", "/api/v1/periods/2026-10/findings", None).await;
    assert_eq!(status, StatusCode::OK, "{f}");
    assert_eq!(f["by_kind"]["unpriced"], 1, "{f:#}");
    let item = f["items"].as_array().unwrap().iter().find(|i| i["kind"] == "unpriced").expect("an unpriced finding");
    assert_eq!(item["subject"], "NVIDIA B300");
    assert_eq!(item["details"]["allocations"], 1);
    assert!(item["fix"].as_str().unwrap().contains("Inventory"), "{item}");
    assert_eq!(item["to"], Value::Null, "still running");

    // Fixed at the source: the model gets its class, the allocation is priced, the finding is gone.
    let (status, v) = call(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/models",
        Some(json!({"model": "NVIDIA B300", "gpu_class": "B300", "valid_from": "2026-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(interval(&env, "new-pod").await.0.as_deref(), Some("B300"));
    let (_, f) = call(&env, &env.admin, "GET", "/api/v1/periods/2026-10/findings", None).await;
    assert!(f["by_kind"].get("unpriced").is_none(), "{f:#}");
}
