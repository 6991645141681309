//! What-if before approval (issue 21), through the router against real PostgreSQL as the app role: a draft cost
//! policy's impact on a closed and an open month (`GET /api/v1/policies/{version}/impact`), and an inventory change
//! previewed before it is saved (`POST /api/v1/inventory/impact`). Amounts are checked to the cent against what the
//! ledger's own terms give by hand, deltas add up exactly, and a preview leaves every table as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    decimal::Decimal,
    ids::{DepartmentId, MigProfile, OrgId},
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
use time::{OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";

struct Env {
    app: axum::Router,
    admin: String,
    export: String,
    export_platform: String,
    agent: String,
    other_admin: String,
    su: sqlx::PgPool,
    org: Uuid,
    _db: gpuledger_e2e::TestDatabase,
}

async fn call(env: &Env, token: Option<&str>, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut b = Request::builder().method(method).uri(uri).header("content-type", "application/json");
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    let r = b.body(body.map_or_else(Body::empty, |v| Body::from(v.to_string()))).unwrap();
    let response = env.app.clone().oneshot(r).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 24).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn ok(env: &Env, token: &str, method: &str, uri: &str, body: Option<Value>) -> Value {
    let (status, v) = call(env, Some(token), method, uri, body).await;
    assert!(status.is_success(), "{method} {uri}: {status} {v}");
    v
}

fn dec(v: &Value) -> Decimal {
    Decimal::parse(v.as_str().unwrap_or_else(|| panic!("{v} is not a decimal string"))).unwrap()
}

fn sum<'a>(items: impl IntoIterator<Item = &'a Value>, key: &str) -> Decimal {
    items.into_iter().fold(Decimal::parse("0").unwrap(), |a, x| a.checked_add(&dec(&x[key])).unwrap())
}

/// The answer's arithmetic: `delta = draft − approved` on every row and the total, the departments add up to it.
fn assert_exact(i: &Value) {
    let departments = i["departments"].as_array().unwrap();
    for row in departments.iter().chain(i["tenants"].as_array().unwrap()).chain([&i["total"]]) {
        assert_eq!(dec(&row["draft"]).checked_sub(&dec(&row["approved"])).unwrap(), dec(&row["delta"]), "{row}");
    }
    for k in ["approved", "draft", "delta"] {
        assert_eq!(sum(departments, k), dec(&i["total"][k]), "departments' {k} add up to the total: {i}");
    }
}

/// `(department or tenant name, delta)` of an answer's rows.
fn deltas(i: &Value, rows: &str, name: &str) -> Vec<(String, String)> {
    i[rows]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[name].as_str().unwrap().to_string(), r["delta"].as_str().unwrap().to_string()))
        .collect()
}

fn namespace(uid: Uuid, tenant: &str) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), "1"]),
        observed_at: datetime!(2026-08-01 00:00 UTC),
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: format!("{tenant}-ns"),
            created_at: datetime!(2026-08-01 00:00 UTC),
            deleted_at: None,
            labels: AttributionLabels { tenant: Some(tenant.into()), ..Default::default() },
            labels_since: datetime!(2026-08-01 00:00 UTC),
        }),
    }
}

/// A pod holding `units` whole H100s, or one MIG 1g.10gb instance of an A100, from `from` to `to`.
fn pod(ns: Uuid, units: u32, mig: bool, from: OffsetDateTime, to: OffsetDateTime) -> Vec<Fact> {
    let pod = Uuid::new_v4();
    let (mode, resource, model) = if mig {
        let profile = MigProfile::new("1g.10gb").unwrap();
        (SharingMode::Mig { profile }, "nvidia.com/mig-1g.10gb", A100)
    } else {
        (SharingMode::Exclusive, "nvidia.com/gpu", H100)
    };
    let allocation_id = format!("{pod}/main/{resource}");
    vec![
        Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at: from,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Pod,
                holder_uid: pod,
                holder_name: format!("pod-{pod}"),
                namespace: "ns".into(),
                namespace_uid: Some(ns),
                container: Some("main".into()),
                node: Some("node-1".into()),
                resource: resource.into(),
                units,
                mode,
                gpu_model: Some(model.into()),
                device_ids: vec![],
                started_at: from,
                labels: AttributionLabels::default(),
            }),
        },
        Fact {
            event_id: event_id("alloc-end", &[&allocation_id]),
            observed_at: to,
            body: FactBody::AllocationEnded(AllocationEnd { allocation_id, ended_at: to, reason: EndReason::Finished }),
        },
    ]
}

fn policy(h100: (&str, &str), a100: (&str, &str), currency: &str) -> Value {
    json!({"currency": currency,
           "classes": [{"gpu_class": "H100-80GB", "guaranteed": h100.0, "borrowed": h100.1},
                       {"gpu_class": "A100-80GB", "guaranteed": a100.0, "borrowed": a100.1}],
           "overhead": {"fixed": [{"name": "platform team", "amount": "100.00"}], "key": {"kind": "equal"}}})
}

/// Acme: Research (alpha: 2 H100 × 10 h in September, 1 × 5 h in October; beta: a 1g.10gb MIG slice = 1/7 of an
/// A100, 14 h in September, 7 h in October) and Platform (ops: 1 H100 × 24 h in September). Policy v1: H100
/// 2.00/3.00, A100 1.00/1.50, a 100.00 overhead split equally; no quotas, so all GPU time is borrowed. September is
/// closed, October open. Another organization has five policy versions.
async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let su = common::admin_pool(&test_db).await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme").await.unwrap();
    let other = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "other", "Other").await.unwrap();
    let o = org.as_uuid();
    let (research, platform) = (Uuid::new_v4(), Uuid::new_v4());
    sqlx::query(
        "INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research'), ($1, $3, 'Platform')",
    )
    .bind(o)
    .bind(research)
    .bind(platform)
    .execute(&su)
    .await
    .unwrap();
    for (dept, name) in [(research, "alpha"), (research, "beta"), (platform, "ops")] {
        sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at) VALUES ($1, $2, $3, $4, '2025-01-01')")
            .bind(o)
            .bind(Uuid::new_v4())
            .bind(dept)
            .bind(name)
            .execute(&su)
            .await
            .unwrap();
    }
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB'), ($1, 'A100-80GB')")
        .bind(o)
        .execute(&su)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class)
         VALUES ($1, $2, '2025-01-01', 'H100-80GB'), ($1, $3, '2025-01-01', 'A100-80GB')",
    )
    .bind(o)
    .bind(H100)
    .bind(A100)
    .execute(&su)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
         VALUES ($1, $2, '1g.10gb', '2025-01-01', 1, 7)",
    )
    .bind(o)
    .bind(A100)
    .execute(&su)
    .await
    .unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "c1").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    let platform_only = Scope::Export { departments: vec![DepartmentId::from_uuid(platform)] };
    let (_, export_platform) = auth::create_token(&mut tx, &platform_only, "bi-platform", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = db.begin_org(other).await.unwrap();
    let (_, other_admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let app = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    let env = Env { app, admin, export, export_platform, agent, other_admin, su, org: o, _db: test_db };

    let v1 = json!({"effective_from": "2026-08", "note": "rates", "policy": policy(("2.00", "3.00"), ("1.00", "1.50"), "USD")});
    ok(&env, &env.admin, "POST", "/api/v1/policies", Some(v1.clone())).await;
    ok(&env, &env.admin, "POST", "/api/v1/policies/1/approve", Some(json!({"reason": "approved"}))).await;
    for _ in 0..5 {
        ok(&env, &env.other_admin, "POST", "/api/v1/policies", Some(v1.clone())).await;
    }

    let (alpha, beta, ops) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut facts = vec![namespace(alpha, "alpha"), namespace(beta, "beta"), namespace(ops, "ops")];
    facts.extend(pod(alpha, 2, false, datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-10 10:00 UTC)));
    facts.extend(pod(beta, 1, true, datetime!(2026-09-12 00:00 UTC), datetime!(2026-09-12 14:00 UTC)));
    facts.extend(pod(ops, 1, false, datetime!(2026-09-20 00:00 UTC), datetime!(2026-09-21 00:00 UTC)));
    facts.extend(pod(alpha, 1, false, datetime!(2026-10-03 00:00 UTC), datetime!(2026-10-03 05:00 UTC)));
    facts.extend(pod(beta, 1, true, datetime!(2026-10-02 00:00 UTC), datetime!(2026-10-02 07:00 UTC)));
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    ok(&env, &env.agent, "POST", "/api/v1/ingest/batches", Some(serde_json::to_value(&batch).unwrap())).await;
    ok(&env, &env.admin, "POST", "/api/v1/periods/2026-09/close", Some(json!({}))).await;
    env
}

/// Creates a draft of `policy` effective from 2026-08; returns its version.
async fn draft(env: &Env, policy: Value) -> i64 {
    let d = ok(
        env,
        &env.admin,
        "POST",
        "/api/v1/policies",
        Some(json!({"effective_from": "2026-08", "note": "what-if", "policy": policy})),
    )
    .await;
    assert_eq!(d["state"], "draft");
    d["version"].as_i64().unwrap()
}

#[tokio::test]
async fn a_draft_with_every_rate_doubled_raises_the_bill_by_exactly_the_borrowed_hours() {
    let env = env().await;
    let v = draft(&env, policy(("4.00", "6.00"), ("2.00", "3.00"), "USD")).await;

    // -- September (closed): the approved side is the closed month, to the cent
    let i = ok(&env, &env.export, "GET", &format!("/api/v1/policies/{v}/impact?period=2026-09"), None).await;
    assert_exact(&i);
    assert_eq!(
        (i["period"].as_str(), i["version"].as_i64(), i["approved_version"].as_i64()),
        (Some("2026-09"), Some(v), Some(1))
    );
    assert_eq!((i["closed"].as_bool(), i["currency"].as_str()), (Some(true), Some("USD")));
    let ledger = ok(&env, &env.admin, "GET", "/api/v1/ledger?period=2026-09", None).await;
    assert_eq!(i["total"]["approved"], ledger["total"], "the approved side is the month as closed");
    // Borrowed GPU-hours at 3.00 more (H100) or 1.50 more (A100); the overhead pool (100.00, equal) is unchanged:
    // alpha 20 H100-h → +60.00, beta 14 h × 1/7 = 2 A100-h → +3.00, ops 24 H100-h → +72.00.
    assert_eq!(
        deltas(&i, "tenants", "tenant"),
        [("ops".into(), "72.00".into()), ("alpha".into(), "60.00".into()), ("beta".into(), "3.00".into())],
        "by department, then tenant"
    );
    assert_eq!(
        deltas(&i, "departments", "department"),
        [("Platform".into(), "72.00".into()), ("Research".into(), "63.00".into())]
    );
    assert_eq!(i["total"]["delta"], "135.00");
    assert!(dec(&i["total"]["draft"]) > dec(&i["total"]["approved"]));

    // -- October (open): computed from today's facts, not closed; alpha 5 H100-h, beta 1 A100-h
    let i = ok(&env, &env.admin, "GET", &format!("/api/v1/policies/{v}/impact?period=2026-10"), None).await;
    assert_exact(&i);
    assert_eq!(i["closed"], false);
    assert_eq!(i["total"]["delta"], "16.50");

    // -- a reader limited to Platform sees Platform only, and a total of it
    let i = ok(&env, &env.export_platform, "GET", &format!("/api/v1/policies/{v}/impact?period=2026-09"), None).await;
    assert_exact(&i);
    assert_eq!(deltas(&i, "departments", "department"), [("Platform".into(), "72.00".into())]);
    assert_eq!(deltas(&i, "tenants", "tenant"), [("ops".into(), "72.00".into())]);
    assert_eq!(i["total"]["delta"], "72.00");

    // -- the approved version in its own place: allowed, every delta zero
    let i = ok(&env, &env.admin, "GET", "/api/v1/policies/1/impact?period=2026-09", None).await;
    assert_exact(&i);
    assert!(
        i["departments"]
            .as_array()
            .unwrap()
            .iter()
            .chain(i["tenants"].as_array().unwrap())
            .all(|r| r["delta"] == "0.00")
    );

    // -- nothing was approved or changed by asking
    let p = ok(&env, &env.admin, "GET", &format!("/api/v1/policies/{v}"), None).await;
    assert_eq!(p["state"], "draft");
}

#[tokio::test]
async fn an_identical_draft_changes_nothing_and_refusals_are_clear() {
    let env = env().await;
    let v = draft(&env, policy(("2.00", "3.00"), ("1.00", "1.50"), "USD")).await;
    for period in ["2026-09", "2026-10"] {
        let i = ok(&env, &env.admin, "GET", &format!("/api/v1/policies/{v}/impact?period={period}"), None).await;
        assert_exact(&i);
        let rows: Vec<&Value> = i["departments"]
            .as_array()
            .unwrap()
            .iter()
            .chain(i["tenants"].as_array().unwrap())
            .chain([&i["total"]])
            .collect();
        assert!(rows.len() >= 4, "{i}");
        assert!(rows.iter().all(|r| r["delta"] == "0.00" && r["approved"] == r["draft"]), "{period}: {i}");
        assert!(dec(&i["total"]["approved"]) > Decimal::parse("100").unwrap(), "{i}");
    }
    // Bad or missing period: 422 naming `period`; an unknown parameter is named too.
    for q in ["period=2026-13", "period=last", "", "period=2026-09&periodx=1"] {
        let (status, p) = call(&env, Some(&env.admin), "GET", &format!("/api/v1/policies/{v}/impact?{q}"), None).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{q}: {p}");
        let named = if q.contains("periodx") { "periodx" } else { "period" };
        assert_eq!(p["field"], named, "{q}: {p}");
    }
    // Unknown version, and another organization's (it has versions 1 to 5; Acme has 1 and 2): not found.
    for version in [99, 5] {
        let (status, p) =
            call(&env, Some(&env.admin), "GET", &format!("/api/v1/policies/{version}/impact?period=2026-09"), None)
                .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{version}: {p}");
    }
    let (status, _) = call(&env, Some(&env.other_admin), "GET", "/api/v1/policies/5/impact?period=2026-09", None).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "the other organization's own version: no approved policy covers its month"
    );
    let (status, _) = call(&env, None, "GET", &format!("/api/v1/policies/{v}/impact?period=2026-09"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A draft in another currency does not compare with the month's amounts.
    let eur = draft(&env, policy(("2.00", "3.00"), ("1.00", "1.50"), "EUR")).await;
    let (status, p) =
        call(&env, Some(&env.admin), "GET", &format!("/api/v1/policies/{eur}/impact?period=2026-09"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("EUR"), "{p}");
}

/// What the inventory preview must leave as it was.
async fn snapshot(env: &Env) -> (Value, i64, i64, Vec<(i64, i64)>, i64) {
    let inventory = ok(env, &env.admin, "GET", "/api/v1/inventory", None).await;
    let audit: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE org_id = $1 AND action LIKE 'inventory.%'")
            .bind(env.org)
            .fetch_one(&env.su)
            .await
            .unwrap();
    let profiles: i64 = sqlx::query_scalar("SELECT count(*) FROM mig_profiles WHERE org_id = $1")
        .bind(env.org)
        .fetch_one(&env.su)
        .await
        .unwrap();
    let fractions: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT fraction_num, fraction_den FROM allocation_intervals WHERE org_id = $1 ORDER BY started_at",
    )
    .bind(env.org)
    .fetch_all(&env.su)
    .await
    .unwrap();
    let timeslicing: i64 = sqlx::query_scalar("SELECT count(*) FROM timeslice_policies WHERE org_id = $1")
        .bind(env.org)
        .fetch_one(&env.su)
        .await
        .unwrap();
    (inventory, audit, profiles, fractions, timeslicing)
}

#[tokio::test]
async fn an_inventory_preview_shows_the_change_and_saves_nothing() {
    let env = env().await;
    let before = snapshot(&env).await;
    assert!(before.3.contains(&(1, 7)), "{:?}", before.3);
    let profile = |from: &str| json!({"profile": {"kind": "mig", "model": A100, "profile": "1g.10gb", "fraction": "2/7", "valid_from": from}});

    // -- 1g.10gb at 2/7 from October: beta's 7 h hold 2 A100-h instead of 1, borrowed at 1.50
    let i =
        ok(&env, &env.admin, "POST", "/api/v1/inventory/impact?period=2026-10", Some(profile("2026-10-01T00:00:00Z")))
            .await;
    assert_exact(&i);
    assert_eq!(i["closed"], false);
    assert_eq!(i["version"], 1);
    assert_eq!(
        deltas(&i, "tenants", "tenant"),
        [("ops".into(), "0.00".into()), ("alpha".into(), "0.00".into()), ("beta".into(), "1.50".into())]
    );
    assert_eq!(i["total"]["delta"], "1.50");
    assert!(i["note"].as_str().unwrap().contains("nothing saved"), "{i}");
    // -- from September, previewed on closed September: beta 2 → 4 A100-h; the month stays as closed
    let i =
        ok(&env, &env.admin, "POST", "/api/v1/inventory/impact?period=2026-09", Some(profile("2026-09-01T00:00:00Z")))
            .await;
    assert_exact(&i);
    assert_eq!((i["closed"].as_bool(), i["total"]["delta"].as_str()), (Some(true), Some("3.00")));

    // -- a time-slicing declaration prices nothing (each allocation carries its own replica count)
    let ts =
        json!({"timeslicing": {"cluster": "c1", "name": "l4-x4", "replicas": 4, "valid_from": "2026-10-01T00:00:00Z"}});
    let i = ok(&env, &env.admin, "POST", "/api/v1/inventory/impact?period=2026-10", Some(ts)).await;
    assert_exact(&i);
    assert_eq!(i["total"]["delta"], "0.00");
    assert!(i["note"].as_str().unwrap().contains("no amount changes"), "{i}");

    // -- refusals name the field; an export token may not preview; no period is a 422. More than one GPU is the
    // inventory's rule (409); a fraction that is not one is the document's (422).
    let bad = json!({"profile": {"kind": "mig", "model": A100, "profile": "1g.10gb", "fraction": "9/7", "valid_from": "2026-10-01T00:00:00Z"}});
    let (status, p) = call(&env, Some(&env.admin), "POST", "/api/v1/inventory/impact?period=2026-10", Some(bad)).await;
    assert_eq!((status, p["field"].as_str()), (StatusCode::CONFLICT, Some("fraction")), "{p}");
    let bad = json!({"profile": {"kind": "mig", "model": A100, "profile": "1g.10gb", "fraction": "1/0", "valid_from": "2026-10-01T00:00:00Z"}});
    let (status, p) = call(&env, Some(&env.admin), "POST", "/api/v1/inventory/impact?period=2026-10", Some(bad)).await;
    assert_eq!((status, p["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("profile.fraction")), "{p}");
    let (status, p) =
        call(&env, Some(&env.admin), "POST", "/api/v1/inventory/impact?period=2026-10", Some(json!({"quota": {}})))
            .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    let (status, p) =
        call(&env, Some(&env.admin), "POST", "/api/v1/inventory/impact", Some(profile("2026-10-01T00:00:00Z"))).await;
    assert_eq!((status, p["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("period")), "{p}");
    let (status, _) = call(
        &env,
        Some(&env.export),
        "POST",
        "/api/v1/inventory/impact?period=2026-10",
        Some(profile("2026-10-01T00:00:00Z")),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // -- nothing was saved, audited or recomputed
    assert_eq!(snapshot(&env).await, before);

    // -- saving the same change does what the preview showed
    ok(
        &env,
        &env.admin,
        "POST",
        "/api/v1/inventory/profiles",
        Some(profile("2026-10-01T00:00:00Z")["profile"].clone()),
    )
    .await;
    let after = snapshot(&env).await;
    assert_eq!(after.2, before.2 + 1, "saved this time");
    assert!(after.3.contains(&(2, 7)), "{:?}", after.3);
}
