//! Disputes through the HTTP API, against real PostgreSQL as the app role: open → comment → accept with a credit →
//! finance approves it; reject; state conflicts; validation that names the field; token scopes; every step in
//! `dispute_events` and `audit_log`; another organization sees nothing (row-level security).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::ids::OrgId;
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Role, Scope, oidc, session},
};
use serde_json::{Value, json};
use tower::ServiceExt;
use uuid::Uuid;

const PERIOD: &str = "2026-10";
const BORROWED: &str = "2026-10/borrowed/alpha/H100-80GB";
const GUARANTEED: &str = "2026-10/guaranteed/alpha/H100-80GB";
const ENERGY: &str = "2026-10/energy/beta/H100-80GB";

/// kind, state, amount, currency, tenant, department, GPU class, corrects, dispute, approved by.
type AdjustmentRow = (String, String, String, String, Option<Uuid>, Uuid, String, String, Option<Uuid>, Option<String>);

struct Org {
    id: OrgId,
    /// A finance person's session (`session:<cookie>`; `call` sends it as a browser would).
    finance: String,
    /// Another finance person's.
    finance2: String,
    admin: String,
    admin_id: Uuid,
    export: String,
    agent: String,
    alpha: Uuid,
    department: Uuid,
}

struct Env {
    app: axum::Router,
    su: sqlx::PgPool,
    a: Org,
    b: Org,
}

/// An organization with a closed October 2026 (three lines) and tokens of every scope.
async fn org(db: &gpuledger_server::db::Database, su: &sqlx::PgPool, slug: &str) -> Org {
    let id = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), slug, slug).await.unwrap();
    let (department, alpha, beta) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let o = id.as_uuid();
    // Closed periods and their lines are written by the ledger close; here the superuser stands in for it.
    let setup: Vec<(&str, Vec<Uuid>)> = vec![
        ("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')", vec![o, department]),
        (
            "INSERT INTO tenants (org_id, tenant_id, department_id, name)
             VALUES ($1, $2, $4, 'alpha'), ($1, $3, $4, 'beta')",
            vec![o, alpha, beta, department],
        ),
        ("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')", vec![o]),
        (
            "INSERT INTO periods (org_id, period, state, closed_at, closed_by, policy_version, content_hash, line_count,
                                  total_amount, currency, bundle_gz)
             VALUES ($1, '2026-10-01', 'closed', now(), 'test', 1, 'sha256:00', 3, 2100.49, 'EUR', '\\x1f8b'::bytea)",
            vec![o],
        ),
        (
            "INSERT INTO ledger_lines (org_id, period, line_no, line_id, department_id, department, tenant_id, tenant,
                                       term, gpu_class, quantity, unit, rate, amount, currency, confidence,
                                       policy_version, evidence, explanation, canonical)
             VALUES ($1, '2026-10-01', 1, '2026-10/guaranteed/alpha/H100-80GB', $2, 'Research', $3, 'alpha',
                     'guaranteed', 'H100-80GB', 400, 'gpu_hours', 2.00125, 800.50, 'EUR', 'exact', 1, 'e1',
                     'guaranteed capacity', 'canonical-1'),
                    ($1, '2026-10-01', 2, '2026-10/borrowed/alpha/H100-80GB', $2, 'Research', $3, 'alpha',
                     'borrowed', 'H100-80GB', 300, 'gpu_hours', 4, 1200.00, 'EUR', 'modeled', 1, 'e2',
                     'borrowed capacity', 'canonical-2'),
                    ($1, '2026-10-01', 3, '2026-10/energy/beta/H100-80GB', $2, 'Research', $4, 'beta',
                     'energy', 'H100-80GB', 999.9, 'kwh', 0.1, 99.99, 'EUR', 'estimated', 1, 'e3',
                     'energy', 'canonical-3')",
            vec![o, department, alpha, beta],
        ),
    ];
    for (sql, binds) in setup {
        let mut q = sqlx::query(sql);
        for b in binds {
            q = q.bind(b);
        }
        q.execute(su).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let mut tx = db.begin_org(id).await.unwrap();
    let (admin_id, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-1").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let finance = finance_session(&mut tx, "fin").await;
    let finance2 = finance_session(&mut tx, "fay").await;
    tx.commit().await.unwrap();
    Org { id, finance, finance2, admin, admin_id, export, agent, alpha, department }
}

/// A browser session of `name@example.test` with the finance role.
async fn finance_session(tx: &mut gpuledger_server::db::OrgTx, name: &str) -> String {
    let email = format!("{name}@example.test");
    let user = oidc::upsert_user(tx, &format!("sub-{name}"), Some(&email), name).await.unwrap();
    let new = session::NewSession {
        user_id: user,
        roles: vec![Role::Finance],
        departments: Vec::new(),
        id_token_hint: None,
        source: "test".into(),
    };
    format!("session:{}", session::create(tx, &session::SessionSettings::default(), &new).await.unwrap())
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let su = common::admin_pool(&test_db).await;
    let a = org(&db, &su, "org-a").await;
    let b = org(&db, &su, "org-b").await;
    let app = app::router(AppState::new(db, None), &HttpOptions::default());
    Env { app, su, a, b }
}

async fn call(env: &Env, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path).header("host", "localhost");
    match token.map(|t| (t, t.strip_prefix("session:"))) {
        Some((_, Some(cookie))) => {
            req =
                req.header("cookie", format!("gl_session={cookie}")).header("x-csrf-token", session::csrf_for(cookie));
        }
        Some((t, None)) => req = req.header("authorization", format!("Bearer {t}")),
        None => {}
    }
    let body = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Body::from(serde_json::to_vec(&v).unwrap())
        }
        None => Body::empty(),
    };
    let response = env.app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    let value =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

async fn open(env: &Env, token: &str, lines: &[&str], reason: &str) -> (StatusCode, Value) {
    call(
        env,
        "POST",
        "/api/v1/disputes",
        Some(token),
        Some(json!({"period": PERIOD, "line_ids": lines, "reason": reason})),
    )
    .await
}

fn path(dispute: &Value, rest: &str) -> String {
    format!("/api/v1/disputes/{}{rest}", dispute["id"].as_str().unwrap())
}

/// Not what the API document says (422), naming the field.
fn assert_invalid(status: StatusCode, body: &Value, field: &str) {
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["field"], field, "{body}");
}

/// Well-formed, but refused by a rule or the stored data (409), naming the field.
fn assert_refused(status: StatusCode, body: &Value, field: &str) {
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["field"], field, "{body}");
}

/// Well-formed, but what the field names does not exist (404), naming the field.
fn assert_unknown(status: StatusCode, body: &Value, field: &str) {
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["field"], field, "{body}");
}

#[tokio::test]
async fn open_comment_accept_and_approve_a_credit() {
    let env = env().await;
    let admin = env.a.admin.as_str();
    let actor = format!("token:{}", env.a.admin_id);

    let (status, d) = open(&env, admin, &[BORROWED, GUARANTEED], "borrowed hours include a drained node").await;
    assert_eq!(status, StatusCode::CREATED, "{d}");
    assert_eq!(d["number"], 1);
    assert_eq!(d["state"], "open");
    assert_eq!(d["period"], PERIOD);
    assert_eq!(d["opened_by"], actor.as_str());
    assert_eq!(d["disputed_amount"], "2000.50");
    assert_eq!(d["currency"], "EUR");
    assert_eq!(d["resolved_at"], Value::Null);
    assert_eq!(d["credit"], Value::Null);
    let lines = d["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["line_id"], BORROWED, "lines come in the order named");
    assert_eq!(lines[0]["amount"], "1200.00");
    assert_eq!(lines[1]["rate"], "2.001250000000");
    assert_eq!(d["events"].as_array().unwrap().len(), 1);
    assert_eq!(d["events"][0]["action"], "opened");
    let opened_at =
        time::OffsetDateTime::parse(d["opened_at"].as_str().unwrap(), &time::format_description::well_known::Rfc3339)
            .unwrap();
    assert_eq!(opened_at.offset(), time::UtcOffset::UTC);
    assert!(d["opened_at"].as_str().unwrap().ends_with('Z'), "{}", d["opened_at"]);

    let (status, d2) =
        call(&env, "POST", &path(&d, "/comments"), Some(admin), Some(json!({"body": "node n7 was cordoned"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{d2}");
    assert_eq!(d2["events"][1]["action"], "commented");
    assert_eq!(d2["events"][1]["body"], "node n7 was cordoned");

    // More than the lines are worth, or no credit at all: refused, nothing changes.
    let (status, body) = call(
        &env,
        "POST",
        &path(&d, "/accept"),
        Some(admin),
        Some(json!({"reason": "ok", "credit_amount": "2000.51"})),
    )
    .await;
    assert_refused(status, &body, "credit_amount");
    assert!(body["detail"].as_str().unwrap().contains("2000.50"), "{body}");
    let (status, body) = call(&env, "POST", &path(&d, "/accept"), Some(admin), Some(json!({"reason": "ok"}))).await;
    assert_invalid(status, &body, "credit_amount");

    let (status, d3) = call(
        &env,
        "POST",
        &path(&d, "/accept"),
        Some(admin),
        Some(json!({"reason": "node was drained for 40 hours", "credit_amount": "160.00"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{d3}");
    assert_eq!(d3["state"], "accepted");
    assert_eq!(d3["resolution"], "node was drained for 40 hours");
    assert_eq!(d3["resolved_by"], actor.as_str());
    assert_eq!(d3["credit_amount"], "160.00");
    assert_eq!(d3["credit_state"], "pending_approval");
    assert_eq!(d3["credit"]["amount"], "-160.00");
    assert_eq!(d3["credit"]["state"], "pending_approval");
    assert_eq!(d3["credit"]["corrects"], BORROWED);

    // Accepting twice, or rejecting an accepted dispute, conflicts and names the state.
    let (status, body) = call(
        &env,
        "POST",
        &path(&d, "/accept"),
        Some(admin),
        Some(json!({"reason": "again", "credit_amount": "1.00"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("accepted"), "{body}");
    let (status, _) = call(&env, "POST", &path(&d, "/reject"), Some(admin), Some(json!({"reason": "no"}))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = call(&env, "POST", &path(&d, "/comments"), Some(admin), Some(json!({"body": "late"}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("only while a dispute is open"), "{body}");
    // The disputed lines are covered by the credit: a second dispute on one of them is refused.
    let (status, body) = open(&env, admin, &[GUARANTEED], "again").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("#1"), "{body}");

    // The admin token that accepted does not approve (no token scope approves credits).
    let (status, body) = call(&env, "POST", &path(&d, "/credit/approve"), Some(admin), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Finance approves (no reason needed); approving twice conflicts.
    let finance = env.a.finance.as_str();
    let approver = "user:fin@example.test";
    let (status, d4) = call(&env, "POST", &path(&d, "/credit/approve"), Some(finance), None).await;
    assert_eq!(status, StatusCode::OK, "{d4}");
    assert_eq!(d4["credit"]["state"], "approved");
    assert_eq!(d4["credit"]["approved_by"], approver);
    let (status, body) = call(&env, "POST", &path(&d, "/credit/approve"), Some(finance), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, _) =
        call(&env, "POST", &path(&d, "/credit/reject"), Some(finance), Some(json!({"reason": "x"}))).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // The adjustment as the ledger close will read it.
    let id = Uuid::parse_str(d["id"].as_str().unwrap()).unwrap();
    let row: AdjustmentRow = sqlx::query_as(
        "SELECT kind, state, amount::text, currency::text, tenant_id, department_id, gpu_class, corrects, dispute_id,
                approved_by
           FROM adjustments WHERE org_id = $1",
    )
    .bind(env.a.id.as_uuid())
    .fetch_one(&env.su)
    .await
    .unwrap();
    let (kind, state, amount, currency, tenant, department, class, corrects, dispute_id, approved_by) = row;
    assert_eq!(
        (kind.as_str(), state.as_str(), amount.as_str(), currency.as_str(), class.as_str(), corrects.as_str()),
        ("credit", "approved", "-160.00", "EUR", "H100-80GB", BORROWED)
    );
    assert_eq!((tenant, department, dispute_id), (Some(env.a.alpha), env.a.department, Some(id)));
    assert_eq!(approved_by.as_deref(), Some(approver));
    let (credit_amount, adjustment): (String, Option<Uuid>) =
        sqlx::query_as("SELECT credit_amount::text, adjustment_id FROM disputes WHERE dispute_id = $1")
            .bind(id)
            .fetch_one(&env.su)
            .await
            .unwrap();
    assert_eq!(credit_amount, "160.00");
    assert!(adjustment.is_some());

    // Every step: one dispute event and one audit record, with who and why.
    let events: Vec<(String, String, String)> =
        sqlx::query_as("SELECT action, actor, body FROM dispute_events WHERE dispute_id = $1 ORDER BY at, event_id")
            .bind(id)
            .fetch_all(&env.su)
            .await
            .unwrap();
    let actions: Vec<&str> = events.iter().map(|(a, _, _)| a.as_str()).collect();
    assert_eq!(actions, ["opened", "commented", "accepted", "credit_approved"]);
    assert!(events[..3].iter().all(|(_, who, _)| *who == actor) && events[3].1 == approver);
    assert_eq!(events[2].2, "node was drained for 40 hours");
    let audit: Vec<(String, String, String, Value)> =
        sqlx::query_as("SELECT action, actor, reason, details FROM audit_log WHERE target = $1 ORDER BY at, audit_id")
            .bind(format!("dispute:{id}"))
            .fetch_all(&env.su)
            .await
            .unwrap();
    let audited: Vec<&str> = audit.iter().map(|(a, _, _, _)| a.as_str()).collect();
    assert_eq!(audited, ["dispute.opened", "dispute.commented", "dispute.accepted", "dispute.credit_approved"]);
    assert!(audit[..3].iter().all(|(_, who, _, _)| *who == actor) && audit[3].1 == approver);
    assert_eq!(audit[0].2, "borrowed hours include a drained node");
    assert_eq!(audit[2].3["credit_amount"], "160.00");
    assert_eq!(audit[2].3["number"], 1);
    // Every event carries its dispute's department (what department managers see it under; no subquery policy).
    let (events, with_department): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE e.department_id IS NOT DISTINCT FROM d.department_id
                                             AND d.department_id IS NOT NULL)
           FROM dispute_events e JOIN disputes d USING (org_id, dispute_id) WHERE e.dispute_id = $1",
    )
    .bind(id)
    .fetch_one(&env.su)
    .await
    .unwrap();
    assert_eq!((events, with_department), (4, 4));

    // The full record, by ID or by number.
    let (status, by_number) = call(&env, "GET", "/api/v1/disputes/1", Some(admin), None).await;
    assert_eq!(status, StatusCode::OK, "{by_number}");
    assert_eq!(by_number["id"], d["id"]);
    assert_eq!(by_number["events"].as_array().unwrap().len(), 4);
    assert_eq!(by_number["credit"]["state"], "approved");
}

/// Separation of duties: the finance person who accepted a dispute (and so set its credit) cannot approve that
/// credit; the refusal is audited; another finance person can.
#[tokio::test]
async fn whoever_accepted_a_dispute_cannot_approve_its_credit() {
    let env = env().await;
    let (fin, fay) = (env.a.finance.as_str(), env.a.finance2.as_str());
    let (_, d) = open(&env, fin, &[BORROWED], "the node was drained").await;
    let (status, body) =
        call(&env, "POST", &path(&d, "/accept"), Some(fin), Some(json!({"reason": "yes", "credit_amount": "5.00"})))
            .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(&env, "POST", &path(&d, "/credit/approve"), Some(fin), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("separation of duties"), "{body}");
    assert_eq!(body["status"], 403, "a problem+json answer: {body}");
    let (_, after) = call(&env, "GET", &path(&d, ""), Some(fin), None).await;
    assert_eq!(after["credit"]["state"], "pending_approval", "{after}");
    let refused: Vec<(String, Value)> =
        sqlx::query_as("SELECT actor, details FROM audit_log WHERE action = 'dispute.credit_approval_refused'")
            .fetch_all(&env.su)
            .await
            .unwrap();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].0, "user:fin@example.test");
    assert_eq!(refused[0].1["accepted_by"], "user:fin@example.test");
    // The one who accepted may still refuse the credit; here someone else approves it.
    let (status, body) = call(&env, "POST", &path(&d, "/credit/approve"), Some(fay), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["credit"]["approved_by"], "user:fay@example.test");
}

#[tokio::test]
async fn reject_and_credit_rejection() {
    let env = env().await;
    let admin = env.a.admin.as_str();
    let (_, d) = open(&env, admin, &[ENERGY], "energy estimate too high").await;

    let (status, body) = call(&env, "POST", &path(&d, "/reject"), Some(admin), Some(json!({"reason": "  "}))).await;
    assert_invalid(status, &body, "reason");
    // The body is required (the document says so): without one, the problem names it.
    let (status, body) = call(&env, "POST", &path(&d, "/reject"), Some(admin), None).await;
    assert_invalid(status, &body, "body");
    let finance = env.a.finance.as_str();
    let (status, body) = call(&env, "POST", &path(&d, "/credit/approve"), Some(finance), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "no credit before acceptance: {body}");

    let (status, r) =
        call(&env, "POST", &path(&d, "/reject"), Some(admin), Some(json!({"reason": "metered, not estimated"}))).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["state"], "rejected");
    assert_eq!(r["resolution"], "metered, not estimated");
    assert!(r["resolved_at"].is_string());
    assert_eq!(r["credit"], Value::Null);
    let (status, body) = call(
        &env,
        "POST",
        &path(&d, "/accept"),
        Some(admin),
        Some(json!({"reason": "changed my mind", "credit_amount": "1.00"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("rejected"), "{body}");

    // A rejected dispute does not hold its lines: a new one may be opened (and gets the next number).
    let (status, d2) = open(&env, admin, &[ENERGY], "new evidence: meter readings").await;
    assert_eq!(status, StatusCode::CREATED, "{d2}");
    assert_eq!(d2["number"], 2);
    let (status, _) = call(
        &env,
        "POST",
        &path(&d2, "/accept"),
        Some(admin),
        Some(json!({"reason": "yes", "credit_amount": "99.99"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&env, "POST", &path(&d2, "/credit/reject"), Some(finance), None).await;
    assert_invalid(status, &body, "body");
    let (status, body) =
        call(&env, "POST", &path(&d2, "/credit/reject"), Some(finance), Some(json!({"reason": " "}))).await;
    assert_invalid(status, &body, "reason");
    let (status, c) =
        call(&env, "POST", &path(&d2, "/credit/reject"), Some(finance), Some(json!({"reason": "budget closed"}))).await;
    assert_eq!(status, StatusCode::OK, "{c}");
    assert_eq!(c["state"], "accepted");
    assert_eq!(c["credit"]["state"], "rejected");
    assert_eq!(c["events"].as_array().unwrap().last().unwrap()["action"], "credit_rejected");

    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT e.action, e.actor, e.body FROM dispute_events e JOIN disputes d USING (org_id, dispute_id)
          WHERE d.org_id = $1 ORDER BY d.number, e.at",
    )
    .bind(env.a.id.as_uuid())
    .fetch_all(&env.su)
    .await
    .unwrap();
    let actions: Vec<&str> = rows.iter().map(|(a, _, _)| a.as_str()).collect();
    assert_eq!(actions, ["opened", "rejected", "opened", "accepted", "credit_rejected"]);
    assert_eq!(rows[1].2, "metered, not estimated");
    let audit: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, reason FROM audit_log WHERE org_id = $1 AND action LIKE 'dispute.%' ORDER BY at, audit_id",
    )
    .bind(env.a.id.as_uuid())
    .fetch_all(&env.su)
    .await
    .unwrap();
    assert_eq!(audit.len(), 5);
    assert!(audit.contains(&("dispute.rejected".into(), "metered, not estimated".into())));
    assert!(audit.contains(&("dispute.credit_rejected".into(), "budget closed".into())));
}

#[tokio::test]
async fn opening_validates_and_names_the_field() {
    let env = env().await;
    let admin = env.a.admin.as_str();
    let (status, body) = open(&env, admin, &[BORROWED, "2026-10/borrowed/nobody/H100-80GB"], "why").await;
    assert_unknown(status, &body, "line_ids[1]");
    assert!(body["detail"].as_str().unwrap().contains("nobody"), "{body}");
    let (status, body) = open(&env, admin, &[BORROWED], "   ").await;
    assert_invalid(status, &body, "reason");
    let (status, body) = open(&env, admin, &[], "why").await;
    assert_invalid(status, &body, "line_ids");
    let (status, body) = open(&env, admin, &[BORROWED, BORROWED], "why").await;
    assert_invalid(status, &body, "line_ids[1]");
    let (status, body) = call(
        &env,
        "POST",
        "/api/v1/disputes",
        Some(admin),
        Some(json!({"period": "2026-13", "line_ids": [BORROWED], "reason": "x"})),
    )
    .await;
    assert_invalid(status, &body, "period");
    let (status, body) = call(
        &env,
        "POST",
        "/api/v1/disputes",
        Some(admin),
        Some(json!({"period": "2026-11", "line_ids": ["2026-11/borrowed/alpha/H100-80GB"], "reason": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("not closed"), "{body}");
    let (status, body) = call(&env, "POST", "/api/v1/disputes", Some(admin), None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) =
        call(&env, "POST", "/api/v1/disputes", Some(admin), Some(json!(["not", "an", "object"]))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

    // Nothing was written by the refusals.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM disputes").fetch_one(&env.su).await.unwrap();
    assert_eq!(n, 0);

    let (status, d) = open(&env, admin, &[BORROWED], "why").await;
    assert_eq!(status, StatusCode::CREATED, "{d}");
    let (status, body) = open(&env, admin, &[GUARANTEED, BORROWED], "twice").await;
    assert_eq!(status, StatusCode::CONFLICT, "a line in an open dispute: {body}");
    for (credit, why) in
        [(json!("0"), "zero"), (json!("-5"), "negative"), (json!("1.001"), "sub-cent"), (json!(12.5), "a number")]
    {
        let (status, body) = call(
            &env,
            "POST",
            &path(&d, "/accept"),
            Some(admin),
            Some(json!({"reason": "ok", "credit_amount": credit})),
        )
        .await;
        assert_eq!(body["field"], "credit_amount", "{why}: {body}");
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{why}");
    }
    let (status, body) =
        call(&env, "POST", &path(&d, "/comments"), Some(admin), Some(json!({"body": "x", "extra": 1}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "unknown fields are refused: {body}");
    let (status, _) = call(&env, "GET", "/api/v1/disputes/not-a-dispute", Some(admin), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &env,
        "POST",
        &format!("/api/v1/disputes/{}/accept", Uuid::new_v4()),
        Some(admin),
        Some(json!({"reason": "x", "credit_amount": "1"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn scopes_decide_who_may_read_and_change() {
    let env = env().await;
    let (status, _) = call(&env, "GET", "/api/v1/disputes", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = call(&env, "POST", "/api/v1/disputes", Some("glt_nonsense"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, body) = open(&env, &env.a.export, &[BORROWED], "export tokens are read-only").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = open(&env, &env.a.agent, &[BORROWED], "agents neither").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let (_, d) = open(&env, &env.a.admin, &[BORROWED], "admin may").await;
    let (status, list) = call(&env, "GET", "/api/v1/disputes", Some(&env.a.export), None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["total"], 1);
    let (status, _) = call(&env, "GET", &path(&d, ""), Some(&env.a.export), None).await;
    assert_eq!(status, StatusCode::OK);
    for (action, body) in [
        ("/comments", json!({"body": "x"})),
        ("/accept", json!({"reason": "x", "credit_amount": "1.00"})),
        ("/reject", json!({"reason": "x"})),
        ("/credit/approve", json!({})),
        ("/credit/reject", json!({"reason": "x"})),
    ] {
        let (status, _) = call(&env, "POST", &path(&d, action), Some(&env.a.export), Some(body)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "export token on {action}");
    }
    let (status, _) = call(&env, "GET", &path(&d, ""), Some(&env.a.agent), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, after) = call(&env, "GET", &path(&d, ""), Some(&env.a.admin), None).await;
    assert_eq!(after["events"].as_array().unwrap().len(), 1, "refused calls left no trace");
}

#[tokio::test]
async fn another_organization_sees_nothing() {
    let env = env().await;
    let (_, d) = open(&env, &env.a.admin, &[BORROWED], "ours").await;
    let other = env.b.admin.as_str();
    let (status, _) = call(&env, "GET", &path(&d, ""), Some(other), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&env, "GET", "/api/v1/disputes/1", Some(other), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) =
        call(&env, "POST", &path(&d, "/accept"), Some(other), Some(json!({"reason": "x", "credit_amount": "1.00"})))
            .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&env, "POST", &path(&d, "/comments"), Some(other), Some(json!({"body": "hi"}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = call(&env, "GET", "/api/v1/disputes", Some(other), None).await;
    assert_eq!(list["total"], 0);

    // Numbers are per organization: B's first dispute is its #1 too, on its own lines.
    let (status, mine) = open(&env, other, &[BORROWED], "theirs").await;
    assert_eq!(status, StatusCode::CREATED, "{mine}");
    assert_eq!(mine["number"], 1);
    let (_, theirs) = call(&env, "GET", "/api/v1/disputes/1", Some(&env.a.admin), None).await;
    assert_eq!(theirs["id"], d["id"]);
    assert_eq!(theirs["events"].as_array().unwrap().len(), 1, "B's writes did not touch A's dispute");
}

#[tokio::test]
async fn list_filters_and_pages_newest_first() {
    let env = env().await;
    let admin = env.a.admin.as_str();
    let (_, first) = open(&env, admin, &[BORROWED], "one").await;
    let (_, second) = open(&env, admin, &[GUARANTEED], "two").await;
    let (_, third) = open(&env, admin, &[ENERGY], "three").await;
    let (status, _) = call(&env, "POST", &path(&second, "/reject"), Some(admin), Some(json!({"reason": "no"}))).await;
    assert_eq!(status, StatusCode::OK);

    let (status, all) = call(&env, "GET", "/api/v1/disputes", Some(admin), None).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(all["total"], 3);
    assert_eq!(all["page"], 1);
    assert_eq!(all["per_page"], 20);
    let numbers: Vec<i64> = all["items"].as_array().unwrap().iter().map(|d| d["number"].as_i64().unwrap()).collect();
    assert_eq!(numbers, [3, 2, 1]);
    assert_eq!(all["items"][0]["disputed_amount"], "99.99");

    let (_, open_ones) = call(&env, "GET", "/api/v1/disputes?state=open&per_page=1&page=2", Some(admin), None).await;
    assert_eq!(open_ones["total"], 2);
    assert_eq!(open_ones["items"].as_array().unwrap().len(), 1);
    assert_eq!(open_ones["items"][0]["id"], first["id"]);
    let (_, page3) = call(&env, "GET", "/api/v1/disputes?state=open&per_page=1&page=3", Some(admin), None).await;
    assert_eq!(page3["items"].as_array().unwrap().len(), 0);
    assert_eq!(page3["total"], 2);
    let (_, rejected) = call(&env, "GET", "/api/v1/disputes?state=rejected&period=2026-10", Some(admin), None).await;
    assert_eq!(rejected["total"], 1);
    assert_eq!(rejected["items"][0]["id"], second["id"]);
    let (_, other_month) = call(&env, "GET", "/api/v1/disputes?period=2026-09", Some(admin), None).await;
    assert_eq!(other_month["total"], 0);
    assert_eq!(third["state"], "open");

    for (query, field) in [
        ("state=closed", "state"),
        ("period=10-2026", "period"),
        ("per_page=0", "per_page"),
        ("per_page=101", "per_page"),
        ("page=x", "page"),
        ("sort=asc", "sort"),
    ] {
        let (status, body) = call(&env, "GET", &format!("/api/v1/disputes?{query}"), Some(admin), None).await;
        assert_invalid(status, &body, field);
    }
}

#[tokio::test]
async fn concurrent_openings_and_decisions_serialize() {
    let env = env().await;
    let admin = env.a.admin.as_str();
    let (a, b, c) = tokio::join!(
        open(&env, admin, &[BORROWED], "one"),
        open(&env, admin, &[GUARANTEED], "two"),
        open(&env, admin, &[ENERGY], "three"),
    );
    let mut numbers: Vec<i64> = [&a, &b, &c]
        .iter()
        .map(|(status, d)| {
            assert_eq!(*status, StatusCode::CREATED, "{d}");
            d["number"].as_i64().unwrap()
        })
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2, 3], "numbers stay dense and unique");

    let d = &a.1;
    let accept_path = path(d, "/accept");
    let reject_path = path(d, "/reject");
    let (accepted, rejected) = tokio::join!(
        call(&env, "POST", &accept_path, Some(admin), Some(json!({"reason": "yes", "credit_amount": "10.00"}))),
        call(&env, "POST", &reject_path, Some(admin), Some(json!({"reason": "no"}))),
    );
    let mut statuses = [accepted.0, rejected.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "{} / {}", accepted.1, rejected.1);
    let (_, after) = call(&env, "GET", &path(d, ""), Some(admin), None).await;
    assert_eq!(after["events"].as_array().unwrap().len(), 2, "one decision only: {after}");
    let adjustments: i64 = sqlx::query_scalar("SELECT count(*) FROM adjustments WHERE org_id = $1")
        .bind(env.a.id.as_uuid())
        .fetch_one(&env.su)
        .await
        .unwrap();
    assert_eq!(adjustments, i64::from(accepted.0 == StatusCode::OK));
}
