//! Gateways' usage records against real PostgreSQL, as the app role, through the real endpoints: NDJSON in,
//! idempotent by record ID, tenants by name or by the endpoint's gateway-key / team aliases, unknown callers kept
//! and reported then attributed once an alias names them; and the shared endpoint's service lines — three
//! tenants split by weighted tokens — add up to the endpoint's own cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    ids::OrgId,
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AttributionLabels, Batch, EndReason, Fact, FactBody, Holder,
        NamespaceFact, WIRE_VERSION, event_id,
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

const H100: &str = "NVIDIA H100 80GB HBM3";

struct Env {
    app: axum::Router,
    agent: String,
    admin: String,
    su: sqlx::PgPool,
    _db: gpuledger_e2e::TestDatabase,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme").await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "gateway", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let su = common::admin_pool(&test_db).await;
    let app = app::router(AppState::new(db, None), &HttpOptions::default());
    Env { app, agent, admin, su, _db: test_db }
}

async fn call(env: &Env, token: &str, method: &str, uri: &str, body: String) -> (StatusCode, Value) {
    let r = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", if uri.contains("/usage/") { "application/x-ndjson" } else { "application/json" })
        .body(Body::from(body))
        .unwrap();
    let response = env.app.clone().oneshot(r).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn namespace(ns: Uuid, name: &str, tenant: Option<&str>, since: OffsetDateTime) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&ns.to_string()]),
        observed_at: since,
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: ns,
            name: name.into(),
            created_at: datetime!(2026-09-01 00:00 UTC),
            deleted_at: None,
            labels: AttributionLabels { tenant: tenant.map(String::from), ..Default::default() },
            labels_since: since,
        }),
    }
}

/// A pod `name` holding `units` whole H100s from `from` for `hours`, as its start and end facts.
fn pod(
    name: &str,
    ns: Uuid,
    ns_name: &str,
    units: u32,
    labels: AttributionLabels,
    from: OffsetDateTime,
    hours: i64,
) -> [Fact; 2] {
    let allocation_id = format!("{name}/main/nvidia.com/gpu");
    let to = from + Duration::hours(hours);
    [
        Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at: from,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Pod,
                holder_uid: Uuid::new_v4(),
                holder_name: name.into(),
                namespace: ns_name.into(),
                namespace_uid: Some(ns),
                container: Some("main".into()),
                node: Some("node-1".into()),
                resource: "nvidia.com/gpu".into(),
                units,
                mode: SharingMode::Exclusive,
                gpu_model: Some(H100.into()),
                device_ids: vec![],
                started_at: from,
                labels,
            }),
        },
        Fact {
            event_id: event_id("alloc-end", &[&allocation_id]),
            observed_at: to,
            body: FactBody::AllocationEnded(AllocationEnd { allocation_id, ended_at: to, reason: EndReason::Finished }),
        },
    ]
}

/// Sends facts as the cluster's agent.
async fn ingest(env: &Env, facts: Vec<Fact>) {
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    let (status, ack) =
        call(env, &env.agent, "POST", "/api/v1/ingest/batches", serde_json::to_string(&batch).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
}

fn record(id: &str, who: (&str, &str), input: u64, output: u64) -> String {
    json!({"record_id": id, "endpoint": "llm-shared", "model": "llama-3-8b", who.0: who.1,
           "started_at": "2026-10-10T10:00:00Z", "input_tokens": input, "output_tokens": output,
           "ttft_ms": 200, "trace_id": format!("trace-{id}"), "agent_session_id": "sess-1"})
    .to_string()
}

#[tokio::test]
async fn three_tenants_share_an_endpoint_and_their_service_lines_add_up_to_its_cost() {
    let env = env().await;
    let ok = async |method: &str, uri: &str, body: Value, want: StatusCode| {
        let (status, v) = call(&env, &env.admin, method, uri, body.to_string()).await;
        assert_eq!(status, want, "{method} {uri}: {v}");
        v
    };
    ok("POST", "/api/v1/departments", json!({"name": "Research"}), StatusCode::CREATED).await;
    for t in ["nlp", "search", "vision"] {
        ok("POST", "/api/v1/tenants", json!({"name": t, "department": "Research"}), StatusCode::CREATED).await;
    }
    ok(
        "POST",
        "/api/v1/inventory/models",
        json!({"model": H100, "gpu_class": "H100-80GB", "valid_from": "2026-01-01T00:00:00Z"}),
        StatusCode::CREATED,
    )
    .await;
    let policy = json!({"effective_from": "2026-10", "policy": {"currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.50", "borrowed": "3.50"}],
        "services": [{"endpoint": "llm-shared"}]}});
    ok("POST", "/api/v1/policies", policy, StatusCode::CREATED).await;
    ok("POST", "/api/v1/policies/1/approve", json!({"reason": "test"}), StatusCode::OK).await;

    // The endpoint's pod holds 2 H100s for 5 hours: 10 GPU-hours × 2.50 = 25.00 USD to split.
    let ns = Uuid::new_v4();
    let t0 = datetime!(2026-10-10 08:00 UTC);
    let mut facts = vec![namespace(ns, "serving", None, t0)];
    let endpoint = AttributionLabels { endpoint: Some("llm-shared".into()), ..Default::default() };
    facts.extend(pod("vllm-0", ns, "serving", 2, endpoint, t0, 5));
    ingest(&env, facts).await;

    // Aliases: search calls through a gateway key, vision as a team.
    ok(
        "PUT",
        "/api/v1/endpoints/llm-shared/aliases",
        json!({"aliases": [{"kind": "gateway_key", "alias": "key-search", "tenant": "search"}]}),
        StatusCode::OK,
    )
    .await;
    // Records: nlp by name (1,000 tokens), search by key (2,000), vision by a team nobody mapped yet (2,000), and a
    // pre-aggregated minute of nlp's (requests 3, window).
    let minute = json!({"record_id": "m-1", "endpoint": "llm-shared", "model": "llama-3-8b", "tenant": "nlp",
        "started_at": "2026-10-10T10:01:00Z", "window_end": "2026-10-10T10:02:00Z", "requests": 3,
        "input_tokens": 600, "output_tokens": 400})
    .to_string();
    let body = [
        record("r-1", ("tenant", "nlp"), 300, 700),
        record("r-2", ("gateway_key", "key-search"), 1500, 500),
        record("r-3", ("team", "vision-team"), 1000, 1000),
        minute,
    ]
    .join("\n");
    let (status, first) = call(&env, &env.agent, "POST", "/api/v1/usage/records", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!((first["received"].as_u64(), first["stored"].as_u64()), (Some(4), Some(4)), "{first}");
    assert_eq!(first["unknown"][0]["line"], 3, "vision's team is not mapped yet: {first}");
    // The same body again (a gateway's retry): nothing new.
    let (status, again) = call(&env, &env.agent, "POST", "/api/v1/usage/records", body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((again["stored"].as_u64(), again["duplicates"].as_u64()), (Some(0), Some(4)), "{again}");
    // One bad line refuses the body and stores nothing of it.
    let bad = [record("r-9", ("tenant", "nlp"), 1, 1), record("r-10", ("tenant", "nlp"), 1, 1).replace("200", "-1")];
    let (status, problem) = call(&env, &env.agent, "POST", "/api/v1/usage/records", bad.join("\n")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "line 2: ttft_ms", "{problem}");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_records").fetch_one(&env.su).await.unwrap();
    assert_eq!(count, 4);
    // Only agent (gateway) tokens send records.
    let (status, _) =
        call(&env, &env.admin, "POST", "/api/v1/usage/records", record("x", ("tenant", "nlp"), 1, 1)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The team alias arrives: vision's record is attributed.
    let v = ok(
        "PUT",
        "/api/v1/endpoints/llm-shared/aliases",
        json!({"aliases": [{"kind": "gateway_key", "alias": "key-search", "tenant": "search"},
                           {"kind": "team", "alias": "vision-team", "tenant": "vision"}]}),
        StatusCode::OK,
    )
    .await;
    assert_eq!(v["attributed"], 1, "{v}");
    // Every attributed record carries its tenant's department — by name, by gateway key, and by the alias that
    // came later (what department managers see it under); the unattributed none.
    let (attributed, right_department): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE r.tenant_id IS NOT NULL),
                count(*) FILTER (WHERE r.tenant_id IS NOT NULL AND r.department_id = t.department_id)
           FROM usage_records r LEFT JOIN tenants t USING (org_id, tenant_id)",
    )
    .fetch_one(&env.su)
    .await
    .unwrap();
    assert_eq!((attributed, right_department), (4, 4));
    let (status, p) = call(
        &env,
        &env.admin,
        "PUT",
        "/api/v1/endpoints/llm-shared/aliases",
        json!({"aliases": [{"kind": "team", "alias": "x", "tenant": "nobody"}]}).to_string(),
    )
    .await;
    assert_eq!((status, p["field"].as_str()), (StatusCode::NOT_FOUND, Some("aliases[0].tenant")), "{p}");

    // The service lines: 2,000 + 2,000 + 2,000 weighted tokens of 6,000 → a third of 25.00 each, exactly.
    let ledger = ok("GET", "/api/v1/ledger?period=2026-10&term=service", Value::Null, StatusCode::OK).await;
    let lines = ledger["lines"].as_array().unwrap();
    let mut by_tenant: Vec<(String, String)> = lines
        .iter()
        .map(|l| (l["tenant"].as_str().unwrap().to_string(), l["amount"].as_str().unwrap().to_string()))
        .collect();
    by_tenant.sort();
    assert_eq!(by_tenant.len(), 3, "{ledger:#}");
    let cents: i64 = by_tenant.iter().map(|(_, a)| a.replace('.', "").parse::<i64>().unwrap()).sum();
    assert_eq!(cents, 2500, "the three service lines add up to the endpoint's 25.00: {by_tenant:?}");
    for (tenant, amount) in &by_tenant {
        assert!(["8.33", "8.34"].contains(&amount.as_str()), "{tenant}: {amount}");
    }
    assert!(lines.iter().all(|l| l["confidence"] == "modeled"), "{ledger:#}");

    // Inference efficiency reads the same records (TTFT 200 ms each where reported).
    let eff = ok("GET", "/api/v1/analytics/inference?period=2026-10", Value::Null, StatusCode::OK).await;
    let nlp = eff["tenants"].as_array().unwrap().iter().find(|t| t["tenant_name"] == "nlp").cloned().unwrap();
    assert_eq!((nlp["requests"].as_u64(), nlp["mean_ttft_ms"].as_str()), (Some(4), Some("200")), "{nlp}");
    assert_eq!(eff["endpoints"][0]["gpu_hours"], "10.000", "{eff}");
}

/// Showback by AI-agent session: sess-a made 600,000 weighted tokens and ran a 1-GPU pod for 2 hours, sess-b
/// 400,000 tokens; the tenant's service line (1,000,000 tokens at 10.00 per million) and borrowed line (2 GPU-h at
/// 3.50) are apportioned: sess-a 6.00 + 7.00 = 13.00, sess-b 4.00.
#[tokio::test]
async fn agent_sessions_get_their_share_of_the_tenants_lines() {
    let env = env().await;
    let ok = async |method: &str, uri: &str, body: Value, want: StatusCode| {
        let (status, v) = call(&env, &env.admin, method, uri, body.to_string()).await;
        assert_eq!(status, want, "{method} {uri}: {v}");
        v
    };
    ok("POST", "/api/v1/departments", json!({"name": "Research"}), StatusCode::CREATED).await;
    let nlp =
        ok("POST", "/api/v1/tenants", json!({"name": "nlp", "department": "Research"}), StatusCode::CREATED).await;
    let nlp = nlp["tenant_id"].as_str().unwrap().to_string();
    ok(
        "POST",
        "/api/v1/inventory/models",
        json!({"model": H100, "gpu_class": "H100-80GB", "valid_from": "2026-01-01T00:00:00Z"}),
        StatusCode::CREATED,
    )
    .await;
    let policy = json!({"effective_from": "2026-10", "policy": {"currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.50", "borrowed": "3.50"}],
        "services": [{"endpoint": "llm-shared", "per_million_weighted_tokens": "10.00"}]}});
    ok("POST", "/api/v1/policies", policy, StatusCode::CREATED).await;
    ok("POST", "/api/v1/policies/1/approve", json!({"reason": "test"}), StatusCode::OK).await;

    let ns = Uuid::new_v4();
    let t0 = datetime!(2026-10-12 09:00 UTC);
    let mut facts = vec![namespace(ns, "nlp-agents", Some("nlp"), datetime!(2026-09-01 00:00 UTC))];
    let session = AttributionLabels { agent_session: Some("sess-a".into()), ..Default::default() };
    facts.extend(pod("agent-step-1", ns, "nlp-agents", 1, session, t0, 2));
    ingest(&env, facts).await;
    let rec = |id: &str, session: &str, input: u64, output: u64| {
        json!({"record_id": id, "endpoint": "llm-shared", "model": "m", "tenant": "nlp",
               "started_at": "2026-10-12T10:00:00Z", "input_tokens": input, "output_tokens": output,
               "ttft_ms": 150, "agent_session_id": session})
        .to_string()
    };
    let body = [
        rec("a1", "sess-a", 100_000, 200_000),
        rec("a2", "sess-a", 100_000, 200_000),
        rec("b1", "sess-b", 200_000, 200_000),
    ];
    let (status, v) = call(&env, &env.agent, "POST", "/api/v1/usage/records", body.join("\n")).await;
    assert_eq!(status, StatusCode::OK, "{v}");

    let r = ok("GET", &format!("/api/v1/analytics/sessions?period=2026-10&tenant={nlp}"), Value::Null, StatusCode::OK)
        .await;
    let sessions = r["sessions"].as_array().unwrap();
    let figures = |s: &Value| {
        ["session", "gpu_hours", "cost", "mean_ttft_ms"].map(|k| s[k].as_str().unwrap_or("null").to_string())
    };
    assert_eq!(figures(&sessions[0]), ["sess-a", "2.000", "13.00", "150"].map(String::from), "{r:#}");
    assert_eq!(figures(&sessions[1]), ["sess-b", "0.000", "4.00", "150"].map(String::from), "{r:#}");
    assert_eq!((sessions[0]["requests"].as_u64(), sessions[0]["allocations"].as_u64()), (Some(2), Some(1)));
    assert_eq!(r["currency"], "USD");
    // Refusals name the field: a missing or malformed tenant (422), one the organization does not have (404).
    let stranger = format!("period=2026-10&tenant={}", Uuid::new_v4());
    for (q, expected) in [
        ("period=2026-10", StatusCode::UNPROCESSABLE_ENTITY),
        ("period=2026-10&tenant=nope", StatusCode::UNPROCESSABLE_ENTITY),
        (stranger.as_str(), StatusCode::NOT_FOUND),
    ] {
        let (status, p) =
            call(&env, &env.admin, "GET", &format!("/api/v1/analytics/sessions?{q}"), String::new()).await;
        assert_eq!((status, p["field"].as_str()), (expected, Some("tenant")), "{q}: {p}");
    }
}

/// Training progress: 800 steps in October (900 at the month's last report, 100 at the last report before it) over
/// 8 GPU-hours of the job's two pods = 100 steps per GPU-hour; samples only in October (1,000 →
/// 5,000) = 500 per GPU-hour. A pod of another workload in the namespace is not counted.
#[tokio::test]
async fn training_progress_is_work_per_gpu_hour() {
    let env = env().await;
    let (status, _) =
        call(&env, &env.admin, "POST", "/api/v1/departments", json!({"name": "Research"}).to_string()).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) =
        call(&env, &env.admin, "POST", "/api/v1/tenants", json!({"name": "nlp", "department": "Research"}).to_string())
            .await;
    assert_eq!(status, StatusCode::CREATED);
    let ns = Uuid::new_v4();
    let t0 = datetime!(2026-10-05 00:00 UTC);
    let mut facts = vec![namespace(ns, "ml", Some("nlp"), datetime!(2026-09-01 00:00 UTC))];
    for name in ["llm-pretrain-0", "llm-pretrain-1", "other-0"] {
        facts.extend(pod(name, ns, "ml", 1, AttributionLabels::default(), t0, 4));
    }
    ingest(&env, facts).await;
    let report = |id: &str, at: &str, steps: u64, samples: Option<u64>| {
        let mut r = json!({"record_id": id, "namespace": "ml", "workload": "llm-pretrain", "reported_at": at,
                           "steps": steps});
        if let Some(s) = samples {
            r["samples"] = json!(s);
        }
        r.to_string()
    };
    let body = [
        report("p0", "2026-09-30T12:00:00Z", 100, None),
        report("p1", "2026-10-10T00:00:00Z", 500, Some(1000)),
        report("p2", "2026-10-20T00:00:00Z", 900, Some(5000)),
    ]
    .join("\n");
    let post = async |b: String| {
        let r = Request::post("/api/v1/training/progress")
            .header("authorization", format!("Bearer {}", env.agent))
            .header("content-type", "application/x-ndjson")
            .body(Body::from(b))
            .unwrap();
        let response = env.app.clone().oneshot(r).await.unwrap();
        let status = response.status();
        let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
    };
    let (status, v) = post(body.clone()).await;
    assert_eq!((status, v["stored"].as_u64()), (StatusCode::OK, Some(3)), "{v}");
    let (status, v) = post(body).await;
    assert_eq!((status, v["duplicates"].as_u64()), (StatusCode::OK, Some(3)), "{v}");
    let (status, v) = call(&env, &env.admin, "GET", "/api/v1/analytics/training?period=2026-10", String::new()).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let w = &v["workloads"][0];
    assert_eq!((w["workload"].as_str(), w["tenant"].as_str()), (Some("llm-pretrain"), Some("nlp")), "{v}");
    assert_eq!((w["steps"].as_i64(), w["samples"].as_i64()), (Some(800), Some(4000)), "{v}");
    assert_eq!(
        (w["gpu_hours"].as_str(), w["steps_per_gpu_hour"].as_str(), w["samples_per_gpu_hour"].as_str()),
        (Some("8.000"), Some("100.0"), Some("500.0")),
        "{v}"
    );
    assert_eq!(v["workloads"].as_array().map(Vec::len), Some(1), "{v}");
}
