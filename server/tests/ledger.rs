//! The ledger end to end against real PostgreSQL as the app role: policy draft → approved (never edited), quota,
//! facts through the ingest API, the preview of an open month, close (exactly one of two concurrent closes wins),
//! immutable lines, the evidence bundle verifying offline (and a changed number caught), a late fact becoming an
//! adjustment in the next period, and the hash chain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    bundle::{Bundle, verify},
    ids::OrgId,
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

struct Env {
    app: axum::Router,
    admin_token: String,
    /// A finance person's session cookie (credits are approved by finance, never by a token).
    finance_cookie: String,
    export_token: String,
    agent_token: String,
    admin: sqlx::PgPool,
    ns_alpha: Uuid,
    ns_beta: Uuid,
    db: gpuledger_server::db::Database,
    org: OrgId,
    _db: gpuledger_e2e::TestDatabase,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme").await.unwrap();
    let o = org.as_uuid();
    let research = Uuid::new_v4();
    for sql in [
        "INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')",
        "INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, gen_random_uuid(), $2, 'alpha')",
        "INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, gen_random_uuid(), $2, 'beta')",
    ] {
        sqlx::query(sql).bind(o).bind(research).execute(&admin).await.unwrap();
    }
    sqlx::query("UPDATE tenants SET created_at = '2025-01-01' WHERE org_id = $1")
        .bind(o)
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')")
        .bind(o)
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, 'NVIDIA H100 80GB HBM3', '2025-01-01', 'H100-80GB')",
    )
    .bind(o)
    .execute(&admin)
    .await
    .unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "c1").await.unwrap();
    let (_, agent_token) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin_token) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export_token) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    let user = oidc::upsert_user(&mut tx, "fin-subject", Some("fin@acme.invalid"), "Fin").await.unwrap();
    let new = session::NewSession {
        user_id: user,
        roles: vec![Role::Finance],
        departments: Vec::new(),
        id_token_hint: None,
        source: "test".into(),
    };
    let finance_cookie = session::create(&mut tx, &session::SessionSettings::default(), &new).await.unwrap();
    tx.commit().await.unwrap();
    let app = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    Env {
        app,
        admin_token,
        finance_cookie,
        export_token,
        agent_token,
        admin,
        ns_alpha: Uuid::new_v4(),
        ns_beta: Uuid::new_v4(),
        db: db.clone(),
        org,
        _db: test_db,
    }
}

async fn call(env: &Env, method: &str, uri: &str, token: &str, body: Option<Value>) -> (StatusCode, Value, Vec<u8>) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(serde_json::to_vec(&b).unwrap())))
        .unwrap();
    let response = env.app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 64 << 20).await.unwrap().to_vec();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), bytes)
}

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

fn pod(ns: Uuid, units: u32, from: OffsetDateTime, to: OffsetDateTime) -> Vec<Fact> {
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
                holder_name: "trainer".into(),
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
    let (status, ack, _) =
        call(env, "POST", "/api/v1/ingest/batches", &env.agent_token, Some(serde_json::to_value(&b).unwrap())).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
}

fn line<'a>(ledger: &'a Value, id: &str) -> &'a Value {
    ledger["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["line_id"] == id)
        .unwrap_or_else(|| panic!("no line {id} in {ledger:#}"))
}

#[tokio::test]
async fn policy_quota_close_bundle_and_late_fact() {
    // Bundles stored in chunks of 256 bytes: this small month's cross several (a month of a large fleet's do).
    gpuledger_server::close::set_bundle_chunk_bytes(256);
    let env = env().await;
    let t = &env.admin_token;

    // -- policy: a draft, refused when invalid (field named), editable, then approved and frozen
    let mut body = json!({"effective_from": "2026-09", "note": "FY26 rates", "policy": {
        "currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "-3.00"}],
        "overhead": {"fixed": [{"name": "platform team", "amount": "100.00"}], "key": {"kind": "equal"}}
    }});
    let (s, v, _) = call(&env, "POST", "/api/v1/policies", t, Some(body.clone())).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["field"], "policy.classes[0].borrowed", "{v}");
    body["policy"]["classes"][0]["borrowed"] = json!("3.00");
    let (s, v, _) = call(&env, "POST", "/api/v1/policies", &env.export_token, Some(body.clone())).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "an export token cannot write policies: {v}");
    let (s, v, _) = call(&env, "POST", "/api/v1/policies", t, Some(body.clone())).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!((v["version"].as_i64(), v["state"].as_str()), (Some(1), Some("draft")));
    let (s, v, _) = call(&env, "GET", "/api/v1/ledger?period=2026-09", t, None).await;
    assert_eq!(s, StatusCode::CONFLICT, "no approved policy yet: {v}");
    let (s, v, _) =
        call(&env, "POST", "/api/v1/policies/1/approve", t, Some(json!({"reason": "board approved"}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "approved");
    let (s, _, _) = call(&env, "PUT", "/api/v1/policies/1", t, Some(body.clone())).await;
    assert_eq!(s, StatusCode::CONFLICT, "an approved version is never edited");
    let edit = sqlx::query("UPDATE cost_policies SET document = '{}' WHERE version = 1").execute(&env.admin).await;
    assert!(edit.is_err(), "the database refuses editing an approved version too");

    // -- quota: alpha is guaranteed 1 H100 from September
    let (s, v, _) = call(
        &env,
        "POST",
        "/api/v1/quotas",
        t,
        Some(json!({"tenant": "nobody", "gpu_class": "H100-80GB",
        "gpus": "1", "valid_from": "2026-09-01T00:00:00Z"})),
    )
    .await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::NOT_FOUND, Some("tenant")), "{v}");
    let (s, v, _) = call(
        &env,
        "POST",
        "/api/v1/quotas",
        t,
        Some(json!({"tenant": "alpha", "gpu_class": "H100-80GB",
        "gpus": "1", "valid_from": "2026-09-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");

    // -- facts: alpha holds 2 GPUs for 10 h (1 above quota), beta 1 GPU for 24 h
    let mut facts = vec![namespace(env.ns_alpha, "alpha-ns", "alpha"), namespace(env.ns_beta, "beta-ns", "beta")];
    facts.extend(pod(env.ns_alpha, 2, datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-10 10:00 UTC)));
    facts.extend(pod(env.ns_beta, 1, datetime!(2026-09-20 00:00 UTC), datetime!(2026-09-21 00:00 UTC)));
    ingest(&env, facts).await;

    // -- the open month's preview, by hand:
    //    alpha guaranteed 1 × 720 h × 2.00 = 1,440.00; alpha borrowed (2 − 1) × 10 h × 3.00 = 30.00;
    //    beta borrowed 1 × 24 h × 3.00 = 72.00; overhead 100.00 in equal shares = 50.00 each → 1,642.00
    let (s, sept, _) = call(&env, "GET", "/api/v1/ledger?period=2026-09", &env.export_token, None).await;
    assert_eq!(s, StatusCode::OK, "{sept}");
    assert_eq!(sept["state"], "open");
    assert_eq!(sept["total"], "1642.00", "{sept:#}");
    let guaranteed = sept["lines"].as_array().unwrap().iter().find(|l| l["term"] == "guaranteed").unwrap();
    assert_eq!(guaranteed["amount"], "1440.00");
    assert_eq!(guaranteed["explanation"], "1 H100-80GB guaranteed × 720 h × 2.00 USD = 1,440.00 USD");
    assert_eq!(guaranteed["tenant"], "alpha");
    assert_eq!(line(&sept, "2026-09/borrowed/alpha/H100-80GB")["amount"], "30.00");
    assert_eq!(line(&sept, "2026-09/borrowed/alpha/H100-80GB")["quantity"], "10.000000");
    assert_eq!(line(&sept, "2026-09/borrowed/beta/H100-80GB")["amount"], "72.00");
    assert_eq!(line(&sept, "2026-09/overhead/alpha")["amount"], "50.00");
    assert_eq!(sept["totals_by_term"]["borrowed"], "102.00");

    // -- a close that stopped holds the month until its lease runs out: the answer says since when and until when
    sqlx::query(
        "INSERT INTO periods (org_id, period, state, closing_by, closing_since)
              VALUES ($1, '2026-09-01', 'closing', 'a stopped close', now() - interval '5 minutes')
         ON CONFLICT (org_id, period) DO UPDATE SET state = 'closing', closing_by = EXCLUDED.closing_by,
                                                    closing_since = EXCLUDED.closing_since",
    )
    .bind(env.org.as_uuid())
    .execute(&env.admin)
    .await
    .unwrap();
    let (s, v, _) = call(&env, "POST", "/api/v1/periods/2026-09/close", t, None).await;
    let detail = v["detail"].as_str().unwrap_or_default();
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(
        detail.contains("being closed by a stopped close since ") && detail.contains("can be closed again from "),
        "{v}"
    );
    sqlx::query("UPDATE periods SET state = 'open', closing_by = NULL, closing_since = NULL WHERE org_id = $1 AND period = '2026-09-01'")
        .bind(env.org.as_uuid())
        .execute(&env.admin)
        .await
        .unwrap();

    // -- two concurrent closes: exactly one wins, the other is told why
    let close = || call(&env, "POST", "/api/v1/periods/2026-09/close", t, None);
    let ((s1, v1, _), (s2, v2, _)) = tokio::join!(close(), close());
    let mut statuses = [s1, s2];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "{v1} {v2}");
    let summary = if s1 == StatusCode::OK { v1 } else { v2 };
    assert_eq!(summary["lines"], 5);
    assert_eq!(summary["total"], "1642.00");
    assert!(summary["previous_hash"].is_null());
    let (s, v, _) = call(&env, "POST", "/api/v1/periods/2026-09/close", t, None).await;
    assert_eq!(s, StatusCode::CONFLICT, "closing twice: {v}");
    assert!(v["detail"].as_str().unwrap().contains("already closed"), "{v}");
    let (s, v, _) = call(&env, "POST", "/api/v1/periods/2026-12/close", t, None).await;
    assert_eq!(s, StatusCode::CONFLICT, "a month that has not ended: {v}");

    // -- closed lines are immutable, even for the database owner
    for sql in [
        "UPDATE ledger_lines SET amount = 0",
        "DELETE FROM ledger_lines",
        "UPDATE periods SET content_hash = 'x' WHERE state = 'closed'",
    ] {
        let r = sqlx::query(sql).execute(&env.admin).await;
        assert!(r.is_err(), "{sql} must be refused");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_lines").fetch_one(&env.admin).await.unwrap();
    assert_eq!(n, 5);

    // -- the bundle verifies offline; a changed number is caught and the line named
    let (s, _, raw) = call(&env, "GET", "/api/v1/periods/2026-09/bundle", &env.export_token, None).await;
    assert_eq!(s, StatusCode::OK);
    let bundle: Bundle = serde_json::from_slice(&raw).unwrap();
    assert_eq!(bundle.hash, summary["hash"].as_str().unwrap());
    assert!(verify(&bundle).unwrap().ok(), "{:?}", verify(&bundle).unwrap().differences);
    let mut tampered = bundle.clone();
    tampered.inputs.allocations[0].fraction = gpuledger_core::Fraction::from_integer(3).unwrap();
    let v = verify(&tampered).unwrap();
    assert!(!v.ok());
    assert!(v.differences.iter().any(|d| d.contains("2026-09/borrowed/")), "{:?}", v.differences);
    let (s, _, _) = call(&env, "GET", "/api/v1/periods/2026-10/bundle", t, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "an open month has no bundle");

    // -- a policy may no longer change September
    let (_, v, _) = call(&env, "POST", "/api/v1/policies", t, Some(body.clone())).await;
    let version = v["version"].as_i64().unwrap();
    let (s, v, _) = call(&env, "POST", &format!("/api/v1/policies/{version}/approve"), t, None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");

    // -- a dispute on alpha's borrowed line, accepted with a 10.00 credit that finance approves → a credit line in
    //    the next open period pointing at the disputed line
    let (s, d, _) = call(
        &env,
        "POST",
        "/api/v1/disputes",
        t,
        Some(json!({"period": "2026-09",
        "line_ids": ["2026-09/borrowed/alpha/H100-80GB"], "reason": "the job was stuck for 3 hours"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{d}");
    let id = d["id"].as_str().unwrap().to_string();
    let (s, d, _) = call(
        &env,
        "POST",
        &format!("/api/v1/disputes/{id}/accept"),
        t,
        Some(json!({"reason": "3 stuck hours × 3.00 = 9.00, rounded up as goodwill", "credit_amount": "10.00"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let (_, pending, _) = call(&env, "GET", "/api/v1/ledger?period=2026-10", t, None).await;
    assert!(pending["lines"].as_array().unwrap().iter().all(|l| l["term"] != "credit"), "not before finance approves");
    // Finance approves (no token scope does): as a finance person's session, with its CSRF token.
    let req = Request::post(format!("/api/v1/disputes/{id}/credit/approve"))
        .header("host", "localhost")
        .header("cookie", format!("gl_session={}", env.finance_cookie))
        .header("x-csrf-token", session::csrf_for(&env.finance_cookie))
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let response = env.app.clone().oneshot(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // -- a late fact for September (beta, 1 GPU × 10 h) becomes an adjustment in October: 10 × 3.00 = 30.00
    ingest(&env, pod(env.ns_beta, 1, datetime!(2026-09-25 00:00 UTC), datetime!(2026-09-25 10:00 UTC))).await;
    // October is open: its figures are the read model's snapshot, which says when it was computed; the new fact
    // and the approved credit reach it at the refresh worker's next round (run here at once).
    let (_, snapshot, _) = call(&env, "GET", "/api/v1/ledger?period=2026-10", t, None).await;
    assert_eq!(snapshot["provisional"], true, "{snapshot}");
    assert!(snapshot["as_of"].as_str().is_some_and(|s| s.ends_with('Z')), "{snapshot}");
    assert!(snapshot["lines"].as_array().unwrap().iter().all(|l| l["term"] != "adjustment"), "not before the refresh");
    let marked: i64 = sqlx::query_scalar("SELECT count(*) FROM read_dirty WHERE org_id = $1")
        .bind(env.org.as_uuid())
        .fetch_one(&env.admin)
        .await
        .unwrap();
    assert_eq!(marked, 1, "the ingest marked the organization's open months as changed");
    assert!(
        gpuledger_server::readmodel::worker::refresh(
            &env.db,
            env.org,
            gpuledger_server::readmodel::worker::Wait::Block
        )
        .await
        .unwrap()
    );
    let (s, oct, _) = call(&env, "GET", "/api/v1/ledger?period=2026-10", t, None).await;
    assert_eq!(s, StatusCode::OK, "{oct}");
    let adj = oct["lines"].as_array().unwrap().iter().find(|l| l["term"] == "adjustment").expect("an adjustment");
    assert_eq!(adj["amount"], "30.00", "{adj:#}");
    assert_eq!(adj["corrects"], "2026-09/borrowed/beta/H100-80GB");
    assert_eq!(adj["tenant"], "beta");
    let credit = oct["lines"].as_array().unwrap().iter().find(|l| l["term"] == "credit").expect("a credit line");
    assert_eq!(credit["amount"], "-10.00", "{credit:#}");
    assert_eq!(credit["corrects"], "2026-09/borrowed/alpha/H100-80GB");
    assert_eq!(credit["tenant"], "alpha");
    // The closed month itself did not change.
    let (_, sept_again, _) = call(&env, "GET", "/api/v1/ledger?period=2026-09", t, None).await;
    assert_eq!(sept_again["total"], "1642.00");
    assert_eq!(sept_again["state"], "closed");

    // -- closing October applies it once and chains the hash
    let (s, oct_close, _) = call(&env, "POST", "/api/v1/periods/2026-10/close", t, None).await;
    assert_eq!(s, StatusCode::OK, "{oct_close}");
    assert_eq!(oct_close["previous_hash"], summary["hash"]);
    let (_, _, raw) = call(&env, "GET", "/api/v1/periods/2026-10/bundle", t, None).await;
    let oct_bundle: Bundle = serde_json::from_slice(&raw).unwrap();
    assert!(verify(&oct_bundle).unwrap().ok());
    assert_eq!(oct_bundle.inputs.adjustments.len(), 2, "the late-data correction and the credit");
    // The close changed what the open months are computed from (applied adjustments): the next refresh shows it.
    gpuledger_server::readmodel::worker::refresh(&env.db, env.org, gpuledger_server::readmodel::worker::Wait::Block)
        .await
        .unwrap();
    let (s, nov, _) = call(&env, "GET", "/api/v1/ledger?period=2026-11", t, None).await;
    assert_eq!(s, StatusCode::OK, "{nov}");
    assert!(
        nov["lines"].as_array().unwrap().iter().all(|l| l["term"] != "adjustment"),
        "an applied correction is not repeated: {nov:#}"
    );
    assert!(nov["lines"].as_array().unwrap().iter().all(|l| l["term"] != "credit"), "a credit lands once");

    // -- the period list shows both closed months with their hashes
    let (_, periods, _) = call(&env, "GET", "/api/v1/periods", t, None).await;
    let items = periods["items"].as_array().unwrap();
    let sep = items.iter().find(|p| p["period"] == "2026-09").unwrap();
    assert_eq!((sep["state"].as_str(), sep["hash"].as_str()), (Some("closed"), summary["hash"].as_str()));

    // -- the bundle is stored in chunks, read back in order; a month closed before chunks (its bundle in the
    //    period's row, migration 41) is served the same
    let (chunks, bytes): (Option<i32>, Option<i64>) =
        sqlx::query_as("SELECT bundle_chunks, bundle_bytes FROM periods WHERE period = '2026-09-01'")
            .fetch_one(&env.admin)
            .await
            .unwrap();
    let (rows, gz): (i64, Vec<u8>) = sqlx::query_as(
        "SELECT count(*), string_agg(bytes, ''::bytea ORDER BY seq) FROM period_bundle_chunks WHERE period = '2026-09-01'",
    )
    .fetch_one(&env.admin)
    .await
    .unwrap();
    assert!(rows > 2, "{rows} chunks");
    assert_eq!((chunks, bytes), (Some(rows as i32), Some(gz.len() as i64)));
    let (s, _, sep_raw) = call(&env, "GET", "/api/v1/periods/2026-09/bundle", t, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(serde_json::from_slice::<Bundle>(&sep_raw).unwrap(), bundle);
    sqlx::query(
        "INSERT INTO periods (org_id, period, state, closed_at, content_hash, bundle_gz)
         SELECT org_id, '2026-08-01', 'closed', closed_at, content_hash, $1 FROM periods WHERE period = '2026-09-01'",
    )
    .bind(&gz)
    .execute(&env.admin)
    .await
    .unwrap();
    let (s, _, aug_raw) = call(&env, "GET", "/api/v1/periods/2026-08/bundle", t, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(aug_raw, sep_raw, "the same stream, stored whole");
}

#[tokio::test]
async fn reads_come_from_stored_figures_and_replicas_refresh_once() {
    use gpuledger_server::readmodel::worker::{Wait, lock_key, refresh};
    use std::sync::atomic::Ordering;
    let env = env().await;
    let t = &env.admin_token;
    let policy = json!({"effective_from": "2026-09", "note": "rates", "policy": {
        "currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}],
        "overhead": {"fixed": [], "key": {"kind": "equal"}}}});
    let (s, v, _) = call(&env, "POST", "/api/v1/policies", t, Some(policy)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v, _) = call(&env, "POST", &format!("/api/v1/policies/{}/approve", v["version"]), t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    ingest(&env, vec![namespace(env.ns_alpha, "alpha-ns", "alpha"), namespace(env.ns_beta, "beta-ns", "beta")]).await;
    ingest(&env, pod(env.ns_alpha, 2, datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-11 00:00 UTC))).await;
    let (s, v, _) = call(&env, "POST", "/api/v1/periods/2026-09/close", t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // (a) A closed month is read, never recomputed — even after a late fact for it arrives.
    ingest(&env, pod(env.ns_beta, 1, datetime!(2026-09-20 00:00 UTC), datetime!(2026-09-20 05:00 UTC))).await;
    let before = gpuledger_server::close::COMPUTATIONS.load(Ordering::Relaxed);
    let (s, sept, _) = call(&env, "GET", "/api/v1/ledger?period=2026-09", &env.export_token, None).await;
    assert_eq!(s, StatusCode::OK, "{sept}");
    let (_, trend, _) = call(&env, "GET", "/api/v1/ledger?period=2026-09&per_page=1&term=borrowed", t, None).await;
    assert_eq!(gpuledger_server::close::COMPUTATIONS.load(Ordering::Relaxed), before, "a closed month was recomputed");
    assert_eq!(sept["state"], "closed");
    assert_eq!(sept["provisional"], false);
    assert_eq!(sept["total"], "144.00", "48 borrowed GPU-hours × 3.00; the late fact is not in it: {sept:#}");
    assert_eq!(trend["count"], 1);
    assert_eq!(trend["total"], "144.00");
    assert_eq!(trend["lines"].as_array().unwrap().len(), 1);

    // (c) Two servers: while one holds the organization's refresh lock, the other gives way; afterwards it runs.
    let other = gpuledger_server::db::Database::connect(&env._db.app_url, gpuledger_server::db::AppLogin::Direct, 2)
        .await
        .unwrap();
    let mut holder = other.begin_org(env.org).await.unwrap();
    let (class, key) = lock_key(env.org);
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2)").bind(class).bind(key).execute(holder.conn()).await.unwrap();
    assert!(!refresh(&env.db, env.org, Wait::GiveWay).await.unwrap(), "refreshed while another replica was");
    holder.rollback().await.unwrap();
    let before = gpuledger_server::close::COMPUTATIONS.load(Ordering::Relaxed);
    let (a, b) = tokio::join!(refresh(&env.db, env.org, Wait::GiveWay), refresh(&other, env.org, Wait::GiveWay));
    let ran = [a.unwrap(), b.unwrap()].iter().filter(|r| **r).count();
    assert!(ran >= 1);
    // Each refresh computes the open months (this one and the last, September being closed): at most once per
    // replica that got the lock, never concurrently.
    let computed = gpuledger_server::close::COMPUTATIONS.load(Ordering::Relaxed) - before;
    assert!(computed <= 2 * ran as u64, "computed {computed} times for {ran} refreshes");
    // The open month's figures say when they were computed.
    let (s, oct, _) = call(&env, "GET", "/api/v1/ledger?period=2026-10", t, None).await;
    assert_eq!(s, StatusCode::OK, "{oct}");
    assert_eq!(oct["provisional"], true);
    assert!(oct["as_of"].as_str().is_some(), "{oct}");
}

/// Issue 17: a month's utilization, inference and training summaries are computed once per month figures by the
/// worker, read as stored rows (no ledger computation, no analytics on the read), and cut by the department scope.
/// Pages of stored figures are rendered once per reader scope and generation, each reader seeing their own name and
/// CSRF token, and rendered again when the figures change.
#[tokio::test]
async fn summaries_and_pages_are_stored_once_and_cut_by_department() {
    use gpuledger_core::ids::DepartmentId;
    use std::sync::atomic::Ordering;
    let env = env().await;
    let t = &env.admin_token;
    let o = env.org.as_uuid();
    let ops = Uuid::new_v4();
    sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Ops')")
        .bind(o)
        .bind(ops)
        .execute(&env.admin)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at) VALUES ($1, gen_random_uuid(), $2, 'gamma', '2025-01-01')",
    )
    .bind(o)
    .bind(ops)
    .execute(&env.admin)
    .await
    .unwrap();
    let research: Uuid =
        sqlx::query_scalar("SELECT department_id FROM departments WHERE org_id = $1 AND name = 'Research'")
            .bind(o)
            .fetch_one(&env.admin)
            .await
            .unwrap();
    let policy = json!({"effective_from": "2026-09", "note": "rates", "policy": {
        "currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}],
        "overhead": {"fixed": [], "key": {"kind": "equal"}}}});
    let (s, v, _) = call(&env, "POST", "/api/v1/policies", t, Some(policy)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v, _) = call(&env, "POST", &format!("/api/v1/policies/{}/approve", v["version"]), t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ns_gamma = Uuid::new_v4();
    ingest(&env, vec![namespace(env.ns_alpha, "alpha-ns", "alpha"), namespace(ns_gamma, "gamma-ns", "gamma")]).await;
    ingest(&env, pod(env.ns_alpha, 2, datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-11 00:00 UTC))).await;
    ingest(&env, pod(ns_gamma, 1, datetime!(2026-09-12 00:00 UTC), datetime!(2026-09-12 10:00 UTC))).await;
    let (s, v, _) = call(&env, "POST", "/api/v1/periods/2026-09/close", t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // Before the worker has run: the stored summaries say they are pending, never computed on the read.
    let (s, v, _) = call(&env, "GET", "/api/v1/ledger/summaries?period=2026-09", t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["pending"], true, "{v}");
    assert!(v["utilization"].is_null(), "{v}");
    gpuledger_server::readmodel::worker::summarize_due(&env.db).await;
    let before = gpuledger_server::close::COMPUTATIONS.load(Ordering::Relaxed);
    let (s, all, _) = call(&env, "GET", "/api/v1/ledger/summaries?period=2026-09", t, None).await;
    assert_eq!(s, StatusCode::OK, "{all}");
    assert_eq!(all["pending"], false, "{all}");
    let tenants = all["utilization"]["tenants"].as_array().unwrap();
    let names: Vec<&str> = tenants.iter().filter_map(|t| t["tenant_name"].as_str()).collect();
    assert!(names.contains(&"alpha") && names.contains(&"gamma"), "{all:#}");
    let alpha = tenants.iter().find(|t| t["tenant_name"] == "alpha").unwrap();
    assert_eq!(alpha["allocated_gpu_hours"], "48.000000", "2 GPUs × 24 h: {alpha}");
    assert!(all["inference"]["unattributed"].is_object(), "organization-wide readers see the remainder: {all:#}");
    assert!(all["utilization"]["as_of"].is_string() && all["training"]["workloads"].is_array(), "{all:#}");
    assert_eq!(gpuledger_server::close::COMPUTATIONS.load(Ordering::Relaxed), before, "a stored read computed");

    // (d) A reader limited to Ops sees Ops's rows only, and none of the organization's own rows.
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (_, ops_token) = auth::create_token(
        &mut tx,
        &Scope::Export { departments: vec![DepartmentId::from_uuid(ops)] },
        "ops-bi",
        "test",
        None,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let (s, scoped, _) = call(&env, "GET", "/api/v1/ledger/summaries?period=2026-09", &ops_token, None).await;
    assert_eq!(s, StatusCode::OK, "{scoped}");
    let names: Vec<&str> =
        scoped["utilization"]["tenants"].as_array().unwrap().iter().filter_map(|t| t["tenant_name"].as_str()).collect();
    assert_eq!(names, vec!["gamma"], "{scoped:#}");
    assert!(scoped["inference"]["unattributed"].is_null(), "{scoped:#}");
    assert_eq!(scoped["inference"]["endpoints"], json!([]), "{scoped:#}");
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM read_summary_rows WHERE org_id = $1 AND department_id = $2")
            .bind(o)
            .bind(research)
            .fetch_one(&env.admin)
            .await
            .unwrap();
    assert!(rows >= 1, "Research's rows are stored, only hidden from Ops");

    // Pages: two readers of the same scope get one render, each with their own name and token.
    let state = AppState::new(env.db.clone(), None);
    let pages = state.pages.clone();
    let app = app::router(state, &HttpOptions::default());
    let mut cookies = Vec::new();
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    for who in ["ann", "bob"] {
        let user = oidc::upsert_user(&mut tx, who, Some(&format!("{who}@acme.invalid")), who).await.unwrap();
        let new = session::NewSession {
            user_id: user,
            roles: vec![Role::Finance],
            departments: Vec::new(),
            id_token_hint: None,
            source: "test".into(),
        };
        cookies.push(session::create(&mut tx, &session::SessionSettings::default(), &new).await.unwrap());
    }
    tx.commit().await.unwrap();
    let page = |cookie: String| {
        let app = app.clone();
        async move {
            let req = Request::builder()
                .uri("/departments?period=2026-09")
                .header("cookie", format!("{}={cookie}", session::PLAIN_COOKIE))
                .body(Body::empty())
                .unwrap();
            let response = app.oneshot(req).await.unwrap();
            let status = response.status();
            let csp = response.headers()["content-security-policy"].to_str().unwrap().to_string();
            let body = String::from_utf8(to_bytes(response.into_body(), 64 << 20).await.unwrap().to_vec()).unwrap();
            (status, csp, body)
        }
    };
    let (s, csp_a, ann) = page(cookies[0].clone()).await;
    assert_eq!(s, StatusCode::OK, "{ann}");
    let renders = pages.renders.load(Ordering::Relaxed);
    let (s, csp_b, bob) = page(cookies[1].clone()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(pages.renders.load(Ordering::Relaxed), renders, "the second reader of the scope got the kept page");
    assert!(pages.hits.load(Ordering::Relaxed) >= 1);
    assert!(ann.contains("ann@acme.invalid") && !ann.contains("bob@acme.invalid"), "{ann}");
    assert!(bob.contains("bob@acme.invalid") && !bob.contains("ann@acme.invalid"), "{bob}");
    let csrf = |c: &str| session::csrf_for(c);
    assert!(bob.contains(&csrf(&cookies[1])) && !bob.contains(&csrf(&cookies[0])), "each reader's own token");
    assert!(!bob.contains("glpc"), "no marker is left in a page");
    assert_ne!(csp_a, csp_b, "a fresh nonce per answer");
    let nonce = csp_b.split("'nonce-").nth(1).unwrap().split('\'').next().unwrap();
    assert!(bob.contains(&format!("nonce=\"{nonce}\"")), "the page's scripts carry the answer's nonce");
    assert!(bob.contains("Closed figures as of"), "{bob}");

    // New figures (a snapshot of the open month stored by this process): the next read renders again.
    gpuledger_server::readmodel::worker::refresh(&env.db, env.org, gpuledger_server::readmodel::worker::Wait::Block)
        .await
        .unwrap();
    let renders = pages.renders.load(Ordering::Relaxed);
    let (s, _, _) = page(cookies[0].clone()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(pages.renders.load(Ordering::Relaxed), renders + 1, "a new generation is rendered again");

    // An ended session gets no kept page: the page sends it to sign in.
    session::end(&env.db, &cookies[1]).await.unwrap();
    pages.forget_session(&cookies[1]);
    let (s, _, body) = page(cookies[1].clone()).await;
    assert!(!body.contains("bob@acme.invalid"), "{s} {body}");
}

/// Issue 33 item 4: a kept answer ends at once on the replica that learns a credential ended — a token revoked
/// here, or a token revoked elsewhere and then refused here on any path.
#[tokio::test]
async fn revoked_tokens_lose_their_kept_answers_at_once() {
    let env = env().await;
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let (elsewhere_id, elsewhere) = auth::create_token(&mut tx, &Scope::export(), "bi-2", "test", None).await.unwrap();
    let (here_id, here) = auth::create_token(&mut tx, &Scope::export(), "bi-3", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    for token in [&elsewhere, &here] {
        let (s, v, _) = call(&env, "GET", "/api/v1/periods", token, None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }

    // Revoked by another replica (straight in the database), then refused here on a path that keeps nothing.
    common::revoke_elsewhere(&env.admin, env.org.as_uuid(), elsewhere_id).await;
    let (s, _, _) = call(&env, "GET", "/api/v1/analytics/utilization?period=2026-09", &elsewhere, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, v, _) = call(&env, "GET", "/api/v1/periods", &elsewhere, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "a credential refused here drops its kept identity: {v}");

    // Revoked through this replica: its kept answers end with the revocation.
    let (s, v, _) = call(&env, "POST", &format!("/api/v1/tokens/{here_id}/revoke"), &env.admin_token, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v, _) = call(&env, "GET", "/api/v1/periods", &here, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "a token revoked here is refused at once: {v}");
    // A live token is still served.
    let (s, v, _) = call(&env, "GET", "/api/v1/periods", &env.export_token, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

/// Issue 33 item 3: a stored value the computation cannot hold never poisons the read model's worker — the refresh
/// failure is recorded for the admin (API and portal), the last good figures stay (marked stale), nothing is
/// retried until something changes, and a correction clears it.
#[tokio::test]
async fn a_refresh_that_cannot_compute_is_a_finding_and_keeps_the_last_good_figures() {
    use gpuledger_server::readmodel::worker::{self, Wait};
    let env = env().await;
    let t = &env.admin_token;
    let o = env.org.as_uuid();
    let month = gpuledger_core::Period::containing(OffsetDateTime::now_utc()).prev().unwrap();
    let start = month.start();
    let policy = json!({"effective_from": month.to_string(), "note": "rates", "policy": {
        "currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}],
        "overhead": {"fixed": [], "key": {"kind": "equal"}}}});
    let (s, v, _) = call(&env, "POST", "/api/v1/policies", t, Some(policy)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v, _) = call(&env, "POST", &format!("/api/v1/policies/{}/approve", v["version"]), t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    ingest(&env, vec![namespace(env.ns_alpha, "alpha-ns", "alpha")]).await;
    ingest(&env, pod(env.ns_alpha, 2, start, start + time::Duration::hours(10))).await;
    assert!(worker::refresh(&env.db, env.org, Wait::Block).await.unwrap());
    let uri = format!("/api/v1/ledger?period={month}");
    let (s, good, _) = call(&env, "GET", &uri, t, None).await;
    assert_eq!(s, StatusCode::OK, "{good}");
    assert!(good.get("refresh_failure").is_none(), "{good}");
    assert_eq!(good["total"], "60.00", "2 GPUs × 10 h × 3.00 (no quota: borrowed): {good}");

    // A policy stored before the door refused such rates (edited past the append-only guard, as the superuser).
    let poison = |rate: &'static str| {
        let admin = env.admin.clone();
        async move {
            // SET LOCAL in a transaction: on Citus only transaction-local settings reach the workers
            // (citus.propagate_set_commands = 'local'), where the guard trigger runs.
            let mut c = admin.begin().await.unwrap();
            sqlx::query("SET LOCAL session_replication_role = replica").execute(&mut *c).await.unwrap();
            sqlx::query(
                "UPDATE cost_policies SET document = jsonb_set(document, '{classes,0,borrowed}', to_jsonb($2::text))
                  WHERE org_id = $1 AND state = 'approved'",
            )
            .bind(o)
            .bind(rate)
            .execute(&mut *c)
            .await
            .unwrap();
            c.commit().await.unwrap();
            sqlx::query("INSERT INTO read_dirty (org_id) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(o)
                .execute(&admin)
                .await
                .unwrap();
        }
    };
    poison("100000000000000000000000000000000000.00").await;
    let e = worker::refresh(&env.db, env.org, Wait::GiveWay).await.expect_err("the month cannot be computed");
    assert_ne!(e.status(), StatusCode::INTERNAL_SERVER_ERROR, "{e}");
    let (attempts, field): (i32, String) =
        sqlx::query_as("SELECT attempts, field FROM read_failures WHERE org_id = $1")
            .bind(o)
            .fetch_one(&env.admin)
            .await
            .unwrap();
    assert_eq!(attempts, 1);
    assert!(!field.is_empty());
    let due = env
        .db
        .cross_org_maintenance()
        .read_refresh_due(std::time::Duration::ZERO, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert!(!due.contains(&env.org), "a lasting failure is not retried until something changes");

    // The last good figures, marked stale, with the finding and its fix.
    let (s, v, _) = call(&env, "GET", &uri, t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["total"], good["total"], "{v}");
    assert_eq!(v["stale"], true, "{v}");
    let failure = &v["refresh_failure"];
    assert_eq!(failure["attempts"], 1, "{v}");
    // The open months are computed newest first: the current one fails first (the policy prices it too).
    let current = gpuledger_core::Period::containing(OffsetDateTime::now_utc()).to_string();
    assert!(failure["period"] == current || failure["period"] == month.to_string(), "{v}");
    assert!(failure["reason"].as_str().is_some_and(|r| !r.is_empty()) && failure["fix"].is_string(), "{v}");
    // The admin page shows it.
    let cookie = {
        let mut tx = env.db.begin_org(env.org).await.unwrap();
        let user = oidc::upsert_user(&mut tx, "adm", Some("adm@acme.invalid"), "Adm").await.unwrap();
        let new = session::NewSession {
            user_id: user,
            roles: vec![Role::Admin],
            departments: Vec::new(),
            id_token_hint: None,
            source: "test".into(),
        };
        let c = session::create(&mut tx, &session::SessionSettings::default(), &new).await.unwrap();
        tx.commit().await.unwrap();
        c
    };
    let req = Request::builder()
        .uri("/admin")
        .header("cookie", format!("{}={cookie}", session::PLAIN_COOKIE))
        .body(Body::empty())
        .unwrap();
    let page = env.app.clone().oneshot(req).await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = String::from_utf8(to_bytes(page.into_body(), 16 << 20).await.unwrap().to_vec()).unwrap();
    assert!(html.contains("id=\"refresh-failure\"") && html.contains("could not be brought up to date"), "{html}");

    // Corrected: the next change computes again, and the finding goes.
    poison("3.00").await;
    assert!(worker::refresh(&env.db, env.org, Wait::GiveWay).await.unwrap());
    let (s, v, _) = call(&env, "GET", &uri, t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v.get("refresh_failure").is_none() && v["stale"] == false, "{v}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM read_failures WHERE org_id = $1")
        .bind(o)
        .fetch_one(&env.admin)
        .await
        .unwrap();
    assert_eq!(left, 0);
}
