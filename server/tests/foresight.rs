//! Finance sees ahead, against real PostgreSQL as the app role: budgets (validation, audit, latest wins), the
//! month-end forecast (to date, run rate, a regular history), idle reservations now, and webhooks — created under
//! the outbound rule, events queued once per condition, delivered signed to a real HTTP receiver, retried.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU16, Ordering},
};

use axum::{
    body::{Body, to_bytes},
    http::{HeaderMap, Request, StatusCode},
};
use gpuledger_core::{
    Period,
    decimal::Decimal,
    ids::OrgId,
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationStart, AttributionLabels, Batch, Fact, FactBody, Holder, NamespaceFact, Stat,
        TelemetryRollup, WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
    db::Database,
    limits::ServerLimits,
    notifications::{OutboundPolicy, worker},
};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};
use tower::ServiceExt;
use uuid::Uuid;

const H100: &str = "NVIDIA H100 80GB HBM3";
const RESEARCH: Uuid = Uuid::from_u128(0xd1);
const PLATFORM: Uuid = Uuid::from_u128(0xd2);
const NLP: Uuid = Uuid::from_u128(0xa1);
const INFRA: Uuid = Uuid::from_u128(0xb2);

struct Env {
    app: axum::Router,
    strict: axum::Router,
    db: Database,
    org: OrgId,
    agent: String,
    admin: String,
    export: String,
    test_db: gpuledger_e2e::TestDatabase,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "fs", "Foresight").await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let o = org.as_uuid();
    for (id, name) in [(RESEARCH, "Research"), (PLATFORM, "Platform")] {
        sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, $3)")
            .bind(o)
            .bind(id)
            .bind(name)
            .execute(tx.conn())
            .await
            .unwrap();
    }
    for (id, dept, name) in [(NLP, RESEARCH, "nlp"), (INFRA, PLATFORM, "infra")] {
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
    sqlx::query(
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, $2, '2025-01-01', 'H100-80GB')",
    )
    .bind(o)
    .bind(H100)
    .execute(tx.conn())
    .await
    .unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "powerbi", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let http = HttpOptions::default();
    let loopback = ServerLimits {
        outbound: OutboundPolicy { allow_loopback: true, allow_private: false },
        ..ServerLimits::default()
    };
    let app = app::router(AppState::new(db.clone(), None).with_limits(loopback), &http);
    let strict = app::router(AppState::new(db.clone(), None), &http);
    let env = Env { app, strict, db, org, agent, admin, export, test_db };
    // Rates: borrowed H100 time at 2.00 an hour (no quotas: all of it is borrowed).
    let (s, v) = call(&env, "POST", "/api/v1/policies", &env.admin, Some(json!({
        "effective_from": "2026-01", "note": "rates",
        "policy": {"currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "3.00", "borrowed": "2.00"}]}
    }))).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = call(&env, "POST", "/api/v1/policies/1/approve", &env.admin, Some(json!({"reason": "ok"}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    env
}

async fn call_on(app: &axum::Router, method: &str, uri: &str, token: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn call(env: &Env, method: &str, uri: &str, token: &str, body: Option<Value>) -> (StatusCode, Value) {
    call_on(&env.app, method, uri, token, body).await
}

async fn send(env: &Env, facts: Vec<Fact>) {
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    let (s, v) =
        call(env, "POST", "/api/v1/ingest/batches", &env.agent, Some(serde_json::to_value(&batch).unwrap())).await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

fn namespace(uid: Uuid, name: &str, tenant: &str) -> Fact {
    // A namespace older than the month (within the cluster's backfill window).
    let since = OffsetDateTime::now_utc() - Duration::days(100);
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), tenant]),
        observed_at: since,
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: name.into(),
            created_at: since,
            deleted_at: None,
            labels: AttributionLabels { tenant: Some(tenant.into()), ..Default::default() },
            labels_since: since,
        }),
    }
}

/// An allocation of one whole H100 that is still open.
fn open(pod: &str, ns: (Uuid, &str), device: &str, from: OffsetDateTime) -> Fact {
    let allocation_id = format!("{pod}/main/nvidia.com/gpu");
    Fact {
        event_id: event_id("alloc-start", &[&allocation_id]),
        observed_at: from,
        body: FactBody::AllocationStarted(AllocationStart {
            allocation_id,
            holder: Holder::Pod,
            holder_uid: Uuid::new_v4(),
            holder_name: pod.into(),
            namespace: ns.1.into(),
            namespace_uid: Some(ns.0),
            container: Some("main".into()),
            node: Some("node-1".into()),
            resource: "nvidia.com/gpu".into(),
            units: 1,
            mode: SharingMode::Exclusive,
            gpu_model: Some(H100.into()),
            device_ids: vec![device.into()],
            started_at: from,
            labels: AttributionLabels::default(),
        }),
    }
}

/// Hourly rollups of `gpu` at `pct` over `[from, to)`.
fn telemetry(gpu: &str, from: OffsetDateTime, to: OffsetDateTime, pct: f64) -> Vec<Fact> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let end = (t + Duration::hours(1)).min(to);
        out.push(Fact {
            event_id: event_id("telemetry", &[gpu, &t.unix_timestamp().to_string()]),
            observed_at: end,
            body: FactBody::Telemetry(TelemetryRollup {
                node: "node-1".into(),
                gpu_uuid: gpu.into(),
                gpu_instance_id: None,
                mig_profile: None,
                window_start: t,
                window_end: end,
                samples: 360,
                utilization_pct: Some(Stat { min: pct, avg: pct, max: pct }),
                memory_used_mib: None,
                power_w: None,
                energy_j: None,
                pod: None,
            }),
        });
        t = end;
    }
    out
}

fn dec(v: &Value) -> Decimal {
    Decimal::parse(v.as_str().unwrap_or_else(|| panic!("not a decimal string: {v}"))).unwrap()
}

fn hours_f(from: OffsetDateTime, to: OffsetDateTime) -> f64 {
    (to - from).as_seconds_f64() / 3600.0
}

#[tokio::test]
async fn budgets_are_validated_audited_and_the_latest_counts() {
    let env = env().await;
    let period = Period::containing(OffsetDateTime::now_utc()).to_string();
    // Not what the document says: 422; a department or tenant the organization does not have: 404.
    let (invalid, unknown) = (StatusCode::UNPROCESSABLE_ENTITY, StatusCode::NOT_FOUND);
    for (body, field, expected) in [
        (json!({"department": "Research", "period": period, "amount": "-1"}), "amount", invalid),
        (json!({"department": "Research", "period": period, "amount": "1.234"}), "amount", invalid),
        (json!({"department": "Research", "period": period, "amount": "lots"}), "amount", invalid),
        (json!({"department": "Nowhere", "period": period, "amount": "1"}), "department", unknown),
        (json!({"tenant": "nobody", "period": period, "amount": "1"}), "tenant", unknown),
        (json!({"department": "Research", "tenant": "nlp", "period": period, "amount": "1"}), "tenant", invalid),
        (json!({"period": period, "amount": "1"}), "department", invalid),
        (json!({"department": "Research", "period": "2026-13", "amount": "1"}), "period", invalid),
    ] {
        let (s, v) = call(&env, "POST", "/api/v1/budgets", &env.admin, Some(body.clone())).await;
        assert_eq!(s, expected, "{body}: {v}");
        assert_eq!(v["field"], field, "{body}: {v}");
    }
    let (s, _) = call(
        &env,
        "POST",
        "/api/v1/budgets",
        &env.export,
        Some(json!({"department": "Research", "period": period, "amount": "1"})),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "an export token sets no budgets");
    let (s, _) = call(&env, "GET", "/api/v1/budgets", &env.admin, None).await;
    assert_eq!(s, StatusCode::OK);

    for amount in ["500", "750.50"] {
        let (s, v) = call(
            &env,
            "POST",
            "/api/v1/budgets",
            &env.admin,
            Some(json!({"department": "Research", "period": period, "amount": amount})),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/budgets",
        &env.admin,
        Some(json!({"tenant": "infra", "period": period, "amount": "10"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!((v["tenant"].as_str(), v["department"].as_str()), (Some("infra"), Some("Platform")));
    let (s, v) = call(&env, "GET", &format!("/api/v1/budgets?period={period}"), &env.export, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "the latest per department and tenant: {v}");
    assert_eq!((items[0]["department"].as_str(), items[0]["amount"].as_str()), (Some("Research"), Some("750.50")));
    assert_eq!(items[1]["tenant"], "infra");
    let audited: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'budget.set'")
        .fetch_one(&common::admin_pool(&env.test_db).await)
        .await
        .unwrap();
    assert_eq!(audited, 3);
}

#[tokio::test]
async fn the_forecast_prices_open_allocations_to_the_month_end_and_adds_a_regular_history() {
    let env = env().await;
    let now = OffsetDateTime::now_utc();
    let period = Period::containing(now);
    let start = period.start();
    let end = period.next().unwrap().start();
    let (ns_r, ns_p) = (Uuid::new_v4(), Uuid::new_v4());
    send(
        &env,
        vec![
            namespace(ns_r, "research", "nlp"),
            namespace(ns_p, "platform", "infra"),
            open("trainer", (ns_r, "research"), "GPU-1", start),
            open("infra-svc", (ns_p, "platform"), "GPU-2", start),
        ],
    )
    .await;
    // Platform's last three closed months were regular (3,000 ± 5 %); Research has no history.
    let su = common::admin_pool(&env.test_db).await;
    for (i, total) in [(1, "3100.00"), (2, "2950.00"), (3, "2950.00")] {
        let month = period.add_months(-i).unwrap().first_day();
        sqlx::query("INSERT INTO read_months (org_id, period, state, as_of) VALUES ($1, $2, 'closed', now())")
            .bind(env.org.as_uuid())
            .bind(month)
            .execute(&su)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO read_totals (org_id, period, department_id, department, total) VALUES ($1, $2, $3, 'Platform', $4::numeric)",
        )
        .bind(env.org.as_uuid())
        .bind(month)
        .bind(PLATFORM)
        .bind(total)
        .execute(&su)
        .await
        .unwrap();
    }
    let (s, _) = call(
        &env,
        "POST",
        "/api/v1/budgets",
        &env.admin,
        Some(json!({"department": "Research", "period": period.to_string(), "amount": "1.00"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let before = OffsetDateTime::now_utc();
    let (s, f) = call(&env, "GET", &format!("/api/v1/forecast?period={period}"), &env.export, None).await;
    let after = OffsetDateTime::now_utc();
    assert_eq!(s, StatusCode::OK, "{f}");
    assert_eq!(f["currency"], "USD");
    let row =
        |name: &str| f["departments"].as_array().unwrap().iter().find(|d| d["department"] == name).cloned().unwrap();
    let research = row("Research");
    // To date: 2.00 an hour since the month began; forecast: the open allocation priced to the month's end.
    let to_date = dec(&research["to_date"]).value().to_f64_lossy();
    assert!(
        to_date >= 2.0 * hours_f(start, before) - 0.01 && to_date <= 2.0 * hours_f(start, after) + 0.01,
        "{research}"
    );
    let month_end =
        Decimal::round(gpuledger_core::Fraction::new(i128::from((end - start).whole_hours()) * 2, 1).unwrap(), 2)
            .unwrap();
    assert_eq!(dec(&research["forecast"]), month_end, "{research}");
    assert_eq!((research["method"].as_str(), research["budget"].as_str()), (Some("run_rate"), Some("1.00")));
    assert_eq!(research["over_budget"], true);
    // Platform: the same run rate, but a regular 3,000 a month says new work comes at that pace.
    let platform = row("Platform");
    assert_eq!(platform["method"], "run_rate+history", "{platform}");
    assert_eq!(platform["confidence"], "high");
    assert_eq!(platform["budget"], Value::Null);
    assert_eq!(platform["over_budget"], false, "no budget, never over it");
    let elapsed = dec(&f["elapsed"]).value().to_f64_lossy();
    let expected = (dec(&platform["to_date"]).value().to_f64_lossy() + 3000.0 * (1.0 - elapsed))
        .max(month_end.value().to_f64_lossy());
    let forecast = dec(&platform["forecast"]).value().to_f64_lossy();
    assert!((forecast - expected).abs() < 0.5, "{forecast} vs {expected}: {platform}");
    // Tenants are forecast too; totals add the departments exactly.
    let nlp = f["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "nlp").unwrap();
    assert_eq!(dec(&nlp["forecast"]), month_end);
    let sum = dec(&research["forecast"]).checked_add(&dec(&platform["forecast"])).unwrap();
    assert_eq!(dec(&f["total"]["forecast"]), sum);
    // With the read model's snapshot of the open month, the forecast is a lookup as of the snapshot: the same
    // method, the run rate unchanged, "to date" at the snapshot's time.
    gpuledger_server::readmodel::worker::refresh(&env.db, env.org, gpuledger_server::readmodel::worker::Wait::Block)
        .await
        .unwrap();
    let (s, g) = call(&env, "GET", &format!("/api/v1/forecast?period={period}"), &env.export, None).await;
    assert_eq!(s, StatusCode::OK, "{g}");
    let as_of =
        OffsetDateTime::parse(g["as_of"].as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap();
    assert!(as_of >= after && as_of <= OffsetDateTime::now_utc(), "the snapshot's time: {g}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (_, again) = call(&env, "GET", &format!("/api/v1/forecast?period={period}"), &env.export, None).await;
    assert_eq!(again["as_of"], g["as_of"], "read from the snapshot, not computed again");
    let research = g["departments"].as_array().unwrap().iter().find(|d| d["department"] == "Research").unwrap();
    assert_eq!(dec(&research["forecast"]), month_end, "{research}");
    let to_date = dec(&research["to_date"]).value().to_f64_lossy();
    assert!((to_date - 2.0 * hours_f(start, as_of)).abs() < 0.01, "{to_date} at {as_of}: {research}");
    assert_eq!(research["over_budget"], true);
    let platform = g["departments"].as_array().unwrap().iter().find(|d| d["department"] == "Platform").unwrap();
    assert_eq!(platform["method"], "run_rate+history");
    // A month that has not started (409: the month's state), and a malformed one (422), are refused by field.
    let (s, v) =
        call(&env, "GET", &format!("/api/v1/forecast?period={}", period.next().unwrap()), &env.export, None).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::CONFLICT, Some("period")), "{v}");
    let (s, v) = call(&env, "GET", "/api/v1/forecast?period=soon", &env.export, None).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("period")), "{v}");
}

#[tokio::test]
async fn idle_reservations_are_listed_with_their_cost_and_unmeasured_ones_are_not() {
    let env = env().await;
    let now = OffsetDateTime::now_utc();
    let now_min = now - Duration::seconds(i64::from(now.second())) - Duration::nanoseconds(i64::from(now.nanosecond()));
    let ns = Uuid::new_v4();
    let since = now_min - Duration::hours(5);
    let mut facts = vec![
        namespace(ns, "research", "nlp"),
        open("notebook", (ns, "research"), "GPU-idle", since),
        open("trainer", (ns, "research"), "GPU-busy", since),
        open("unmeasured", (ns, "research"), "GPU-dark", since),
    ];
    // The notebook was busy, then has done nothing for the last three hours; the trainer is busy throughout.
    facts.extend(telemetry("GPU-idle", since, now_min - Duration::hours(3), 60.0));
    facts.extend(telemetry("GPU-idle", now_min - Duration::hours(3), now_min, 1.0));
    facts.extend(telemetry("GPU-busy", since, now_min, 85.0));
    send(&env, facts).await;
    let (s, v) = call(&env, "GET", "/api/v1/idle", &env.export, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!((v["threshold_pct"].as_str(), v["min_idle_hours"].as_str()), (Some("5"), Some("2")));
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{v}");
    let item = &items[0];
    assert_eq!(item["holder"], "research/notebook");
    assert_eq!((item["tenant"].as_str(), item["department"].as_str()), (Some("nlp"), Some("Research")));
    assert_eq!(item["devices"], json!(["GPU-idle"]));
    assert_eq!(item["idle_hours"], "3.000000");
    // Three idle hours of one H100 at its guaranteed rate.
    assert_eq!((item["cost_so_far"].as_str(), item["currency"].as_str()), (Some("9.00"), Some("USD")));
    assert_eq!(v["not_measured"], 1, "the GPU without telemetry is not called idle");
}

/// What a receiver got: (headers, body) per request.
type Seen = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

/// A webhook receiver: records (headers, body) and answers with the status set.
async fn receiver() -> (String, Seen, Arc<AtomicU16>) {
    let seen: Seen = Arc::default();
    let status = Arc::new(AtomicU16::new(204));
    let (s2, st2) = (seen.clone(), status.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (seen, status) = (s2.clone(), st2.clone());
            async move {
                seen.lock().unwrap().push((headers, body.to_vec()));
                StatusCode::from_u16(status.load(Ordering::SeqCst)).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen, status)
}

#[tokio::test]
async fn webhooks_are_checked_signed_sent_once_and_retried() {
    let env = env().await;
    let (url, seen, status) = receiver().await;
    // The outbound rule: a loopback receiver only where the operator allows it; events by name.
    let (s, v) = call_on(
        &env.strict,
        "POST",
        "/api/v1/notifications/webhooks",
        &env.admin,
        Some(json!({"url": url, "events": ["period.closed"]})),
    )
    .await;
    // A well-formed URL the operator's outbound rule does not allow: 409, naming the field.
    assert_eq!((s, v["field"].as_str()), (StatusCode::CONFLICT, Some("url")), "{v}");
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/notifications/webhooks",
        &env.admin,
        Some(json!({"url": url, "events": ["budget.exceeded"]})),
    )
    .await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("events[0]")), "{v}");
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/notifications/webhooks",
        &env.export,
        Some(json!({"url": url, "events": ["period.closed"]})),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, hook) = call(
        &env,
        "POST",
        "/api/v1/notifications/webhooks",
        &env.admin,
        Some(json!({"url": url, "events": ["budget.forecast_exceeded", "idle.reservation", "period.closed"]})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{hook}");
    let secret = hook["secret"].as_str().unwrap().to_string();
    let id = hook["webhook_id"].as_str().unwrap().to_string();
    let (_, list) = call(&env, "GET", "/api/v1/notifications/webhooks", &env.admin, None).await;
    assert!(list.to_string().find(&secret).is_none(), "the secret is shown once");

    // Research will pass its budget of 1.00.
    let now = OffsetDateTime::now_utc();
    let period = Period::containing(now);
    let ns = Uuid::new_v4();
    send(&env, vec![namespace(ns, "research", "nlp"), open("trainer", (ns, "research"), "GPU-1", period.start())])
        .await;
    let (s, _) = call(
        &env,
        "POST",
        "/api/v1/budgets",
        &env.admin,
        Some(json!({"department": "Research", "period": period.to_string(), "amount": "1.00"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let policy = OutboundPolicy { allow_loopback: true, allow_private: false };
    let client = worker::client(policy);
    assert_eq!(worker::check_conditions(&env.db, env.org, now).await.unwrap(), 1);
    assert_eq!(worker::check_conditions(&env.db, env.org, now).await.unwrap(), 0, "one event per condition");
    assert_eq!(worker::deliver_due(&env.db, env.org, &client, policy).await.unwrap(), 1);
    {
        let got = seen.lock().unwrap();
        assert_eq!(got.len(), 1);
        let (headers, body) = &got[0];
        assert_eq!(headers["x-gpuledger-event"], "budget.forecast_exceeded");
        assert_eq!(headers["x-gpuledger-signature"].to_str().unwrap(), worker::signature(&secret, body));
        let event: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(event["data"]["department"], "Research");
        assert_eq!(event["data"]["budget"], "1.00");
        assert!(dec(&event["data"]["forecast"]) > dec(&event["data"]["budget"]));
    }
    assert_eq!(worker::deliver_due(&env.db, env.org, &client, policy).await.unwrap(), 0, "sent once");
    // The notifier's rounds: conditions are checked again only after a while, or when a budget was set since.
    let mut checked = std::collections::HashMap::new();
    worker::run_once(&env.db, &client, policy, now, &mut checked).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "nothing new");
    let (s, _) = call(
        &env,
        "POST",
        "/api/v1/budgets",
        &env.admin,
        Some(json!({"department": "Research", "period": period.to_string(), "amount": "2.00"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    worker::run_once(&env.db, &client, policy, now + Duration::seconds(30), &mut checked).await;
    assert_eq!(seen.lock().unwrap().len(), 2, "a budget set since the last check is looked at on the next round");
    let (_, last) = seen.lock().unwrap()[1].clone();
    assert_eq!(serde_json::from_slice::<Value>(&last).unwrap()["data"]["budget"], "2.00");

    // A receiver that fails: the try is logged and retried later, not lost.
    status.store(500, Ordering::SeqCst);
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let queued = gpuledger_server::notify::enqueue(&mut tx, "period.closed", "period/test", "closed", json!({}), now)
        .await
        .unwrap();
    tx.commit_quiet().await.unwrap();
    assert_eq!(queued, 1);
    assert_eq!(worker::deliver_due(&env.db, env.org, &client, policy).await.unwrap(), 0);
    let (s, log) =
        call(&env, "GET", &format!("/api/v1/notifications/webhooks/{id}/deliveries"), &env.admin, None).await;
    assert_eq!(s, StatusCode::OK, "{log}");
    let failed = &log["items"][0];
    assert_eq!((failed["event"].as_str(), failed["state"].as_str()), (Some("period.closed"), Some("pending")), "{log}");
    assert_eq!((failed["attempts"].as_u64(), failed["last_status"].as_u64()), (Some(1), Some(500)));
    assert!(failed["next_attempt_at"].is_string());
    assert_eq!(log["items"][1]["state"], "delivered");
    assert_eq!(log["items"][2]["state"], "delivered");
    assert_eq!(worker::deliver_due(&env.db, env.org, &client, policy).await.unwrap(), 0, "not due again yet");
    assert_eq!(seen.lock().unwrap().len(), 3);
    // Disabled: pending deliveries stop.
    let (s, v) = call(&env, "POST", &format!("/api/v1/notifications/webhooks/{id}/disable"), &env.admin, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["disabled_at"].is_string());
    let (_, log) =
        call(&env, "GET", &format!("/api/v1/notifications/webhooks/{id}/deliveries"), &env.admin, None).await;
    assert_eq!(log["items"][0]["state"], "failed");
    let (s, _) =
        call(&env, "GET", &format!("/api/v1/notifications/webhooks/{}/deliveries", Uuid::new_v4()), &env.admin, None)
            .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}
