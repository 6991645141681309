//! Dated tenancy changes by an admin, against real PostgreSQL as the app role: a namespace reassigned inside an
//! open month splits its hours exactly at `valid_from`; one reaching into a closed month leaves the month as it
//! was closed and becomes correction lines at the next close; history is closed and reopened, never lost; every
//! change is audited; bad requests name the field.
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
    readmodel::worker::{Wait, refresh},
};
use serde_json::{Value, json};
use time::{OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

struct Env {
    app: axum::Router,
    admin_token: String,
    export_token: String,
    agent_token: String,
    su: sqlx::PgPool,
    db: gpuledger_server::db::Database,
    org: OrgId,
    _db: gpuledger_e2e::TestDatabase,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let su = common::admin_pool(&test_db).await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme").await.unwrap();
    let o = org.as_uuid();
    let research = Uuid::new_v4();
    for sql in [
        "INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')",
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at)
         VALUES ($1, gen_random_uuid(), $2, 'alpha', '2025-01-01')",
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at)
         VALUES ($1, gen_random_uuid(), $2, 'beta', '2025-01-01')",
    ] {
        sqlx::query(sql).bind(o).bind(research).execute(&su).await.unwrap();
    }
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')")
        .bind(o)
        .execute(&su)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class)
         VALUES ($1, 'NVIDIA H100 80GB HBM3', '2025-01-01', 'H100-80GB')",
    )
    .bind(o)
    .execute(&su)
    .await
    .unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "c1").await.unwrap();
    let (_, agent_token) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin_token) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export_token) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let app = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    Env { app, admin_token, export_token, agent_token, su, db, org, _db: test_db }
}

async fn call(env: &Env, method: &str, uri: &str, token: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(serde_json::to_vec(&b).unwrap())))
        .unwrap();
    let response = env.app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 64 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

const NS: Uuid = Uuid::from_u128(0x5eed);

fn namespace() -> Fact {
    Fact {
        event_id: event_id("namespace", &[&NS.to_string(), "alpha"]),
        observed_at: datetime!(2026-08-01 00:00 UTC),
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: NS,
            name: "nlp".into(),
            created_at: datetime!(2026-08-01 00:00 UTC),
            deleted_at: None,
            labels: AttributionLabels { tenant: Some("alpha".into()), ..Default::default() },
            labels_since: datetime!(2026-08-01 00:00 UTC),
        }),
    }
}

fn pod(from: OffsetDateTime, to: OffsetDateTime) -> Vec<Fact> {
    let uid = Uuid::new_v4();
    let allocation_id = format!("{uid}/main/nvidia.com/gpu");
    vec![
        Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at: from,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Pod,
                holder_uid: uid,
                holder_name: "trainer".into(),
                namespace: "nlp".into(),
                namespace_uid: Some(NS),
                container: Some("main".into()),
                node: Some("node-1".into()),
                resource: "nvidia.com/gpu".into(),
                units: 1,
                mode: SharingMode::Exclusive,
                gpu_model: Some("NVIDIA H100 80GB HBM3".into()),
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
    let (s, ack) =
        call(env, "POST", "/api/v1/ingest/batches", &env.agent_token, Some(serde_json::to_value(&b).unwrap())).await;
    assert_eq!(s, StatusCode::OK, "{ack}");
}

/// The month's figures as the caller reads them, after the read model caught up with every change.
async fn ledger(env: &Env, period: &str) -> Value {
    refresh(&env.db, env.org, Wait::Block).await.unwrap();
    let (s, v) =
        call(env, "GET", &format!("/api/v1/ledger?period={period}&per_page=500"), &env.admin_token, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

fn amount(ledger: &Value, line_id: &str) -> Option<String> {
    ledger["lines"].as_array().unwrap().iter().find(|l| l["line_id"] == line_id).map(|l| l["amount"].to_string())
}

fn reassignment(tenant: &str, from: &str) -> Value {
    json!({"cluster": "c1", "namespace": "nlp", "tenant": tenant, "valid_from": from, "reason": "team moved to beta"})
}

#[tokio::test]
async fn a_reassignment_splits_an_open_month_and_corrects_a_closed_one_at_the_next_close() {
    // Every close, refresh and late-data recomputation a part (one department) at a time: the figures are the same.
    gpuledger_server::close::set_part_records(1);
    let env = env().await;
    let t = &env.admin_token;
    let policy = json!({"effective_from": "2026-09", "note": "rates", "policy": {
        "currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}],
        "overhead": {"fixed": [], "key": {"kind": "equal"}}
    }});
    let (s, v) = call(&env, "POST", "/api/v1/policies", t, Some(policy)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = call(&env, "POST", "/api/v1/policies/1/approve", t, Some(json!({"reason": "ok"}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // alpha's namespace holds 1 GPU for 48 h, 10 Sep 00:00 → 12 Sep 00:00.
    let mut facts = vec![namespace()];
    facts.extend(pod(datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-12 00:00 UTC)));
    ingest(&env, facts).await;
    let before = ledger(&env, "2026-09").await;
    assert_eq!(amount(&before, "2026-09/borrowed/alpha/H100-80GB").as_deref(), Some("\"144.00\""), "{before:#}");

    // -- bad requests name the field and change nothing: not the document's form (422), naming what does not exist
    // (404), or before the namespace existed (409)
    let (invalid, unknown, refused) = (StatusCode::UNPROCESSABLE_ENTITY, StatusCode::NOT_FOUND, StatusCode::CONFLICT);
    for (body, field, expected) in [
        (reassignment("gamma", "2026-09-11T06:00:00Z"), "tenant", unknown),
        (reassignment("beta", "2026-07-01T00:00:00Z"), "valid_from", refused),
        (reassignment("beta", "11 Sep 2026"), "valid_from", invalid),
        (
            json!({"cluster": "c9", "namespace": "nlp", "tenant": "beta", "valid_from": "2026-09-11T06:00:00Z",
                "reason": "x"}),
            "cluster",
            unknown,
        ),
        (
            json!({"cluster": "c1", "namespace": "nope", "tenant": "beta", "valid_from": "2026-09-11T06:00:00Z",
                "reason": "x"}),
            "namespace",
            unknown,
        ),
        (
            json!({"cluster": "c1", "namespace": "nlp", "tenant": "beta", "valid_from": "2026-09-11T06:00:00Z",
                "reason": "  "}),
            "reason",
            invalid,
        ),
        (
            json!({"cluster": "c1", "namespace": "nlp", "tenant": "beta", "valid_from": "2026-09-11T06:00:00Z",
                "reason": "x", "colour": "blue"}),
            "colour",
            invalid,
        ),
    ] {
        let (s, v) = call(&env, "POST", "/api/v1/tenancy/reassignments", t, Some(body)).await;
        assert_eq!((s, v["field"].as_str()), (expected, Some(field)), "{v}");
    }
    let (s, _) = call(
        &env,
        "POST",
        "/api/v1/tenancy/reassignments",
        &env.export_token,
        Some(reassignment("beta", "2026-09-11T06:00:00Z")),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "an export token cannot reassign");
    let (s, v) =
        call(&env, "POST", "/api/v1/tenancy/reassignments", t, Some(reassignment("alpha", "2026-09-11T06:00:00Z")))
            .await;
    assert_eq!(s, StatusCode::CONFLICT, "already alpha's: {v}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM namespace_ownership").fetch_one(&env.su).await.unwrap();
    assert_eq!(rows, 1, "refused requests changed nothing");

    // -- inside the open month: the hours split exactly at valid_from (alpha 30 h, beta 18 h)
    let (s, v) =
        call(&env, "POST", "/api/v1/tenancy/reassignments", t, Some(reassignment("beta", "2026-09-11T06:00:00+00:00")))
            .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["previous_tenant"], "alpha");
    assert_eq!(v["valid_from"], "2026-09-11T06:00:00Z");
    assert_eq!(v["valid_to"], Value::Null);
    assert_eq!(v["corrected_at_next_close"], json!([]), "nothing closed yet");
    let sept = ledger(&env, "2026-09").await;
    assert_eq!(amount(&sept, "2026-09/borrowed/alpha/H100-80GB").as_deref(), Some("\"90.00\""), "{sept:#}");
    assert_eq!(amount(&sept, "2026-09/borrowed/beta/H100-80GB").as_deref(), Some("\"54.00\""), "{sept:#}");
    assert_eq!(sept["total"], before["total"], "moved, not created or lost");

    // History is closed and reopened; the agent re-sending the labels it saw does not undo the change.
    ingest(&env, vec![namespace()]).await;
    let (s, h) = call(&env, "GET", "/api/v1/tenancy/ownership?cluster=c1&namespace=nlp", &env.export_token, None).await;
    assert_eq!(s, StatusCode::OK, "{h}");
    let entries: Vec<(String, String, Value, String)> = h["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["tenant"].as_str().unwrap().into(),
                e["valid_from"].as_str().unwrap().into(),
                e["valid_to"].clone(),
                e["source"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        vec![
            ("alpha".into(), "2026-08-01T00:00:00Z".into(), json!("2026-09-11T06:00:00Z"), "label".into()),
            ("beta".into(), "2026-09-11T06:00:00Z".into(), Value::Null, "admin".into()),
        ]
    );
    let (s, v) = call(&env, "GET", "/api/v1/tenancy/ownership?cluster=c1&namespace=nlp&x=1", t, None).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("x")), "{v}");

    // -- into a closed month: September stays as closed; October's close books the difference
    let (s, closed) = call(&env, "POST", "/api/v1/periods/2026-09/close", t, None).await;
    assert_eq!(s, StatusCode::OK, "{closed}");
    let sept_closed = ledger(&env, "2026-09").await;
    let (s, v) =
        call(&env, "POST", "/api/v1/tenancy/reassignments", t, Some(reassignment("alpha", "2026-09-11T18:00:00Z")))
            .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["previous_tenant"], "beta");
    assert_eq!(v["corrected_at_next_close"], json!(["2026-09"]));
    let sept_after = ledger(&env, "2026-09").await;
    assert_eq!(sept_after["lines"], sept_closed["lines"], "a closed month never changes");
    assert_eq!(sept_after["state"], "closed");
    // beta keeps 06:00 → 18:00 (12 h); the last 6 h go back to alpha: 6 h × 3.00 = 18.00 each way.
    let oct = ledger(&env, "2026-10").await;
    let corrections: Vec<(String, String, String)> = oct["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["term"] == "adjustment")
        .map(|l| {
            (
                l["corrects"].as_str().unwrap().into(),
                l["tenant"].as_str().unwrap().into(),
                l["amount"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        corrections.iter().collect::<std::collections::BTreeSet<_>>(),
        [
            ("2026-09/borrowed/alpha/H100-80GB".to_string(), "alpha".to_string(), "18.00".to_string()),
            ("2026-09/borrowed/beta/H100-80GB".to_string(), "beta".to_string(), "-18.00".to_string()),
        ]
        .iter()
        .collect(),
        "{oct:#}"
    );
    let (s, v) = call(&env, "POST", "/api/v1/periods/2026-10/close", t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM adjustments WHERE kind = 'late_data'")
        .fetch_one(&env.su)
        .await
        .unwrap();
    assert_eq!(applied, 2, "the two corrections, booked once");

    // -- every change is in the audit log with who and why
    let audited: Vec<(String, String, String)> =
        sqlx::query_as("SELECT actor, target, reason FROM audit_log WHERE action = 'tenancy.reassign' ORDER BY at")
            .fetch_all(&env.su)
            .await
            .unwrap();
    assert_eq!(audited.len(), 2, "{audited:?}");
    assert!(audited.iter().all(|(actor, target, reason)| actor.starts_with("token:")
        && target == "c1/nlp"
        && reason == "team moved to beta"));
}

#[tokio::test]
async fn renamed_and_retired_tenants_keep_their_history() {
    let env = env().await;
    let t = &env.admin_token;
    let policy = json!({"effective_from": "2026-09", "note": "rates", "policy": {
        "currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}],
        "overhead": {"fixed": [], "key": {"kind": "equal"}}
    }});
    assert_eq!(call(&env, "POST", "/api/v1/policies", t, Some(policy)).await.0, StatusCode::CREATED);
    let (s, _) = call(&env, "POST", "/api/v1/policies/1/approve", t, Some(json!({"reason": "ok"}))).await;
    assert_eq!(s, StatusCode::OK);
    let mut facts = vec![namespace()];
    facts.extend(pod(datetime!(2026-09-10 00:00 UTC), datetime!(2026-09-10 10:00 UTC)));
    ingest(&env, facts).await;
    let (s, v) = call(&env, "POST", "/api/v1/periods/2026-09/close", t, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // -- refusals name the field or the reason, and change nothing
    let (s, v) = call(&env, "PATCH", "/api/v1/tenants/alpha", t, Some(json!({"reason": "tidy"}))).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("body")), "{v}");
    let (s, v) = call(&env, "PATCH", "/api/v1/tenants/alpha", t, Some(json!({"name": "alpha-2"}))).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("reason")), "{v}");
    let (s, v) = call(&env, "PATCH", "/api/v1/tenants/gamma", t, Some(json!({"name": "x", "reason": "r"}))).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = call(&env, "PATCH", "/api/v1/tenants/alpha", t, Some(json!({"name": "beta", "reason": "r"}))).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (s, _) =
        call(&env, "PATCH", "/api/v1/tenants/alpha", &env.export_token, Some(json!({"name": "x", "reason": "r"})))
            .await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    // -- a rename: from now on; the closed month keeps the name it was closed with; the former name is kept
    let (s, v) =
        call(&env, "PATCH", "/api/v1/tenants/alpha", t, Some(json!({"name": "alpha-2", "reason": "team renamed"})))
            .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!((v["name"].as_str(), v["renamed_to"].as_str()), (Some("alpha"), Some("alpha-2")));
    let (_, tenants) = call(&env, "GET", "/api/v1/tenants", t, None).await;
    let renamed = tenants["items"].as_array().unwrap().iter().find(|x| x["name"] == "alpha-2").unwrap().clone();
    assert_eq!(renamed["former_names"], json!(["alpha"]), "{tenants}");
    let sept = ledger(&env, "2026-09").await;
    assert!(amount(&sept, "2026-09/borrowed/alpha/H100-80GB").is_some(), "closed with the old name: {sept:#}");
    assert!(sept["lines"].as_array().unwrap().iter().all(|l| l["tenant"] != "alpha-2"), "{sept:#}");

    // -- retiring: refused while it still owns a namespace; then nothing new is given to it
    let retire = json!({"retired_from": "2026-10-01T00:00:00Z", "reason": "team dissolved"});
    let (s, v) = call(&env, "PATCH", "/api/v1/tenants/alpha-2", t, Some(retire.clone())).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("nlp"), "{v}");
    let (s, v) =
        call(&env, "POST", "/api/v1/tenancy/reassignments", t, Some(reassignment("beta", "2026-10-01T00:00:00Z")))
            .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = call(&env, "PATCH", "/api/v1/tenants/alpha-2", t, Some(retire)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["retired_from"], "2026-10-01T00:00:00Z");
    let (s, v) =
        call(&env, "POST", "/api/v1/tenancy/reassignments", t, Some(reassignment("alpha-2", "2026-10-15T00:00:00Z")))
            .await;
    // A retired tenant takes nothing new: the organization's data refuses it (409).
    assert_eq!((s, v["field"].as_str()), (StatusCode::CONFLICT, Some("tenant")), "{v}");
    let quota =
        json!({"tenant": "alpha-2", "gpu_class": "H100-80GB", "gpus": "1", "valid_from": "2026-10-15T00:00:00Z"});
    let (s, v) = call(&env, "POST", "/api/v1/quotas", t, Some(quota)).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::CONFLICT, Some("tenant")), "no quota after: {v}");
    let (s, v) = call(
        &env,
        "PATCH",
        "/api/v1/departments/Research",
        t,
        Some(json!({"retired_from": "2026-10-01T00:00:00Z", "reason": "reorg"})),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "beta is still active: {v}");
    let (_, tenants) = call(&env, "GET", "/api/v1/tenants", t, None).await;
    let retired = tenants["items"].as_array().unwrap().iter().find(|x| x["name"] == "alpha-2").unwrap().clone();
    assert_eq!(retired["retired_at"], "2026-10-01T00:00:00Z");
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'tenant.update' AND reason <> ''")
            .fetch_one(&env.su)
            .await
            .unwrap();
    assert_eq!(audited, 2, "the rename and the retirement");
}

fn unlabelled(uid: Uuid, name: &str) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), "-"]),
        observed_at: datetime!(2026-08-01 00:00 UTC),
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: name.into(),
            created_at: datetime!(2026-08-01 00:00 UTC),
            deleted_at: None,
            labels: AttributionLabels::default(),
            labels_since: datetime!(2026-08-01 00:00 UTC),
        }),
    }
}

#[tokio::test]
async fn rules_give_owners_to_namespaces_without_labels() {
    let env = env().await;
    let t = &env.admin_token;
    let train = Uuid::from_u128(0x7a1);
    ingest(&env, vec![unlabelled(train, "ml-train")]).await;
    let history = async |name: &str| {
        let (s, h) =
            call(&env, "GET", &format!("/api/v1/tenancy/ownership?cluster=c1&namespace={name}"), t, None).await;
        assert_eq!(s, StatusCode::OK, "{h}");
        h["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{} {}..{} {}",
                    e["tenant"].as_str().unwrap(),
                    e["valid_from"].as_str().unwrap(),
                    e["valid_to"].as_str().unwrap_or(""),
                    e["source"].as_str().unwrap()
                )
            })
            .collect::<Vec<_>>()
    };
    assert!(history("ml-train").await.is_empty(), "no label, no rule: no owner");
    let rule = |m: &str, pattern: &str, tenant: &str, from: &str| json!({"match": m, "pattern": pattern, "tenant": tenant, "valid_from": from, "reason": "naming convention"});
    let (invalid, unknown) = (StatusCode::UNPROCESSABLE_ENTITY, StatusCode::NOT_FOUND);
    for (body, field, expected) in [
        (rule("glob", "ml-", "beta", "2026-09-01T00:00:00Z"), "match", invalid),
        (rule("prefix", "ML_*", "beta", "2026-09-01T00:00:00Z"), "pattern", invalid),
        (rule("prefix", "ml-", "gamma", "2026-09-01T00:00:00Z"), "tenant", unknown),
        (
            json!({"match": "prefix", "pattern": "ml-", "tenant": "beta", "valid_from": "2026-09-01T00:00:00Z"}),
            "reason",
            invalid,
        ),
    ] {
        let (s, v) = call(&env, "POST", "/api/v1/tenancy/namespace-rules", t, Some(body)).await;
        assert_eq!((s, v["field"].as_str()), (expected, Some(field)), "{v}");
    }

    // A prefix rule gives every matching namespace without an owner to beta from its start.
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/tenancy/namespace-rules",
        t,
        Some(rule("prefix", "ml-", "beta", "2026-09-01T00:00:00Z")),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["namespaces_given"], 1);
    assert_eq!(history("ml-train").await, ["beta 2026-09-01T00:00:00Z.. rule"]);
    // A namespace reported after the rule gets it at ingest.
    ingest(&env, vec![unlabelled(Uuid::from_u128(0x7a2), "ml-serve"), unlabelled(Uuid::from_u128(0x7a3), "web")]).await;
    assert_eq!(history("ml-serve").await, ["beta 2026-09-01T00:00:00Z.. rule"]);
    assert!(history("web").await.is_empty(), "no rule matches");

    // A more specific rule decides from its own start; an admin reassignment beats rules.
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/tenancy/namespace-rules",
        t,
        Some(rule("exact", "ml-train", "alpha", "2026-09-15T00:00:00Z")),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(
        history("ml-train").await,
        ["beta 2026-09-01T00:00:00Z..2026-09-15T00:00:00Z rule", "alpha 2026-09-15T00:00:00Z.. rule"]
    );
    assert_eq!(history("ml-serve").await, ["beta 2026-09-01T00:00:00Z.. rule"], "the exact rule is not its");
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/tenancy/reassignments",
        t,
        Some(json!({"cluster": "c1", "namespace": "ml-train", "tenant": "beta", "valid_from": "2026-10-01T00:00:00Z",
                    "reason": "moved"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/tenancy/namespace-rules",
        t,
        Some(rule("exact", "ml-train", "alpha", "2026-11-01T00:00:00Z")),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "a new rule for the same pattern ends the one in force: {v}");
    assert_eq!(v["namespaces_given"], 0, "the reassignment holds");
    let (_, rules) = call(&env, "GET", "/api/v1/tenancy/namespace-rules", &env.export_token, None).await;
    let exact: Vec<(Value, Value)> = rules["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["match"] == "exact")
        .map(|r| (r["valid_from"].clone(), r["valid_to"].clone()))
        .collect();
    assert_eq!(
        exact,
        vec![
            (json!("2026-09-15T00:00:00Z"), json!("2026-11-01T00:00:00Z")),
            (json!("2026-11-01T00:00:00Z"), Value::Null)
        ]
    );
}
