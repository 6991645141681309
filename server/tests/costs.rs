//! The cloud bill in (issue 35), against real PostgreSQL as the app role: nodes report `spec.providerID` through the
//! ingest API, the inventory lists them with their resource keys, and a month's FOCUS bill — in the forms the
//! providers write (an EC2 ARN, a bare instance ID, an Azure ARM path in other case) — is matched to them, exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    Period,
    ids::OrgId,
    wire::{AgentInfo, Batch, Fact, FactBody, NodeFact, WIRE_VERSION, event_id},
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tower::ServiceExt;
use uuid::Uuid;

const AWS_1: &str = "aws:///us-east-1a/i-0abc123def4567890";
const AWS_2: &str = "aws:///us-east-1b/i-0fedcba9876543210";
const AWS_IDLE: &str = "aws:///us-east-1b/i-01111111111111111";
const AZURE: &str = "azure:///subscriptions/6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b/resourceGroups/MC_research/providers/Microsoft.Compute/virtualMachineScaleSets/aks-h100-31415926-vmss/virtualMachines/1";

struct Env {
    app: axum::Router,
    admin: String,
    export: String,
    agent: String,
    pool: sqlx::PgPool,
    org: OrgId,
    db: gpuledger_server::db::Database,
    _db: gpuledger_e2e::TestDatabase,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let pool = common::admin_pool(&test_db).await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme").await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    sqlx::query("UPDATE clusters SET created_at = now() - interval '90 days' WHERE org_id = $1")
        .bind(org.as_uuid())
        .execute(&pool)
        .await
        .unwrap();
    let app = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    Env { app, admin, export, agent, pool, org, db, _db: test_db }
}

async fn send(env: &Env, req: Request<Body>) -> (StatusCode, Value) {
    let response = env.app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 16 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn get(uri: &str, token: &str) -> Request<Body> {
    Request::get(uri).header("authorization", format!("Bearer {token}")).body(Body::empty()).unwrap()
}

fn post_csv(uri: &str, token: &str, body: Vec<u8>, gzip: bool) -> Request<Body> {
    let mut r =
        Request::post(uri).header("authorization", format!("Bearer {token}")).header("content-type", "text/csv");
    if gzip {
        r = r.header("content-encoding", "gzip");
    }
    r.body(Body::from(body)).unwrap()
}

fn node(name: &str, provider_id: Option<&str>, at: OffsetDateTime) -> Fact {
    Fact {
        event_id: event_id("node", &[name, "1"]),
        observed_at: at,
        body: FactBody::NodeObserved(NodeFact {
            name: name.into(),
            node_uid: Uuid::new_v4(),
            gpu_product: Some("NVIDIA-H100-80GB-HBM3".into()),
            gpu_count: Some(8),
            gpu_memory_mib: None,
            mig_strategy: None,
            sharing_strategy: None,
            replicas: None,
            allocatable: [("nvidia.com/gpu".to_string(), 8)].into_iter().collect(),
            provider_id: provider_id.map(str::to_string),
        }),
    }
}

async fn nodes(env: &Env, at: OffsetDateTime) {
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts: vec![
            node("h100-e-01", Some(AWS_1), at),
            node("h100-e-02", Some(AWS_2), at),
            node("h100-e-03", Some(AWS_IDLE), at),
            node("h100-w-02", Some(AZURE), at),
            node("t4-pt-01", None, at),
        ],
    };
    let req = Request::post("/api/v1/ingest/batches")
        .header("authorization", format!("Bearer {}", env.agent))
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&batch).unwrap()))
        .unwrap();
    let (status, ack) = send(env, req).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
}

/// A FOCUS 1.2 bill for `month`, as the acceptance check writes it, plus lines a real export has.
fn bill(month: Period) -> String {
    let start = month.start().date();
    let end = month.add_months(1).unwrap().start().date();
    let mut out = String::from(
        "BillingAccountId,BillingCurrency,BillingPeriodStart,BillingPeriodEnd,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,\
         BilledCost,EffectiveCost,ListCost,ResourceId,ResourceName,ServiceName,ProviderName,ChargeDescription\n",
    );
    let mut line = |start_at: String, rid: &str, cost: &str, service: &str, description: &str| {
        out.push_str(&format!(
            "123456789012,USD,{start}T00:00:00Z,{end}T00:00:00Z,{start_at},{end}T00:00:00Z,Usage,{cost},{cost},{cost},{rid},x,{service},AWS,\"{description}\"\n"
        ));
    };
    let at = |day: u8| format!("{}T{:02}:00:00Z", start.replace_day(day).unwrap(), day % 24);
    line(
        at(1),
        "arn:aws:ec2:us-east-1:123456789012:instance/i-0abc123def4567890",
        "71234.56",
        "Amazon Elastic Compute Cloud",
        "p5.48xlarge, On Demand",
    );
    line(at(2), "i-0fedcba9876543210", "1000.01", "Amazon Elastic Compute Cloud", "p5.48xlarge");
    line(at(3), "i-0FEDCBA9876543210", "0.000000000004", "Amazon Elastic Compute Cloud", "rounding");
    line(at(4), &AZURE["azure://".len()..].to_lowercase(), "52000.10", "Virtual Machines", "ND H100 v5");
    line(
        at(5),
        "arn:aws:ec2:us-east-1:123456789012:instance/i-0deadbeefcafe0001",
        "999.99",
        "Amazon Elastic Compute Cloud",
        "another team's VM",
    );
    line(at(6), "arn:aws:s3:::training-data", "12.34", "Amazon Simple Storage Service", "storage");
    line(at(7), "", "100", "AWS Support (Business)", "support, \"business\"");
    line(
        format!("{end}T00:00:00Z"),
        "i-0abc123def4567890",
        "5555",
        "Amazon Elastic Compute Cloud",
        "next month: not counted",
    );
    out
}

#[tokio::test]
async fn a_focus_bill_is_matched_to_the_gpu_nodes_by_provider_id() {
    let env = env().await;
    let month = Period::containing(OffsetDateTime::now_utc()).prev().unwrap();
    nodes(&env, month.start() + time::Duration::days(1)).await;

    // The inventory lists each node with its provider ID and the key the bill is matched on.
    let (s, inv) = send(&env, get("/api/v1/inventory/nodes", &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{inv}");
    let items = inv["items"].as_array().unwrap();
    assert_eq!(items.len(), 5, "{inv}");
    let by_name = |n: &str| items.iter().find(|i| i["name"] == n).unwrap().clone();
    assert_eq!(by_name("h100-e-01")["provider_id"], AWS_1);
    assert_eq!(by_name("h100-e-01")["resource_key"], "aws:i-0abc123def4567890");
    assert_eq!(by_name("h100-w-02")["cloud"], "azure");
    assert!(by_name("t4-pt-01")["provider_id"].is_null() && by_name("t4-pt-01")["cloud"].is_null());
    let (s, one) = send(&env, get("/api/v1/inventory/nodes?cluster=gpu-east", &env.export)).await;
    assert_eq!((s, one["items"].as_array().unwrap().len()), (StatusCode::OK, 5), "{one}");

    // Import: matched and unmatched EffectiveCost are exact; the line of the next month is in no sum.
    let uri = format!("/api/v1/costs/imports?period={month}");
    let (s, imp) = send(&env, post_csv(&uri, &env.admin, bill(month).into_bytes(), false)).await;
    assert_eq!(s, StatusCode::OK, "{imp}");
    assert_eq!(imp["matched_cost"], "124234.670000000004", "{imp:#}");
    assert_eq!(imp["unmatched_cost"], "1112.33", "{imp:#}");
    assert_eq!((imp["lines_read"].as_i64(), imp["lines_outside_period"].as_i64()), (Some(8), Some(1)), "{imp}");
    let matched: Vec<(String, String)> = imp["matched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["node"].as_str().unwrap().to_string(), m["effective_cost"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(matched.len(), 4, "two spellings of h100-e-02 are two resources of one node: {imp:#}");
    assert!(matched.contains(&("h100-e-01".into(), "71234.56".into())), "{matched:?}");
    assert!(matched.contains(&("h100-w-02".into(), "52000.10".into())), "{matched:?}");
    let findings = imp["findings"].as_array().unwrap();
    let kinds = |k: &str| {
        findings.iter().filter(|f| f["kind"] == k).map(|f| f["subject"].as_str().unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(
        kinds("unclaimed_vm"),
        vec!["arn:aws:ec2:us-east-1:123456789012:instance/i-0deadbeefcafe0001"],
        "{imp:#}"
    );
    assert_eq!(kinds("node_without_bill_line"), vec!["gpu-east/h100-e-03"], "{imp:#}");
    assert!(findings.iter().all(|f| f["fix"].as_str().is_some_and(|x| !x.is_empty())));

    // The same bill gzipped: the same answer; the import is replaced (audited twice), not added to.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bill(month).as_bytes()).unwrap();
    let (s, again) = send(&env, post_csv(&uri, &env.admin, gz.finish().unwrap(), true)).await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!((&again["matched_cost"], &again["unmatched_cost"]), (&imp["matched_cost"], &imp["unmatched_cost"]));
    let (s, stored) = send(&env, get(&uri, &env.admin)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(stored["matched"], imp["matched"]);
    let audits: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'costs.import'")
            .bind(env.org.as_uuid())
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(audits, 2);

    // A bill that cannot be read names its line and column and changes nothing.
    let bad = bill(month).replace("1000.01", "1,000.01");
    let (s, problem) = send(&env, post_csv(&uri, &env.admin, bad.into_bytes(), false)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert!(problem["field"].as_str().unwrap().starts_with("body:line 3:"), "{problem}");
    let (_, after) = send(&env, get(&uri, &env.admin)).await;
    assert_eq!(after["matched_cost"], imp["matched_cost"], "the earlier import stands");
    let (s, problem) = send(&env, post_csv(&uri, &env.admin, b"ResourceId,EffectiveCost\nx,1\n".to_vec(), false)).await;
    assert_eq!((s, problem["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("body:line 1:BilledCost")));
    let (s, _) = send(&env, post_csv(&uri, &env.admin, vec![0x1f, 0x8b, 1, 2, 3], true)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);

    // Who may, and which months.
    let (s, _) = send(&env, post_csv(&uri, &env.export, bill(month).into_bytes(), false)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let next = month.add_months(2).unwrap();
    let (s, p) = send(
        &env,
        post_csv(&format!("/api/v1/costs/imports?period={next}"), &env.admin, bill(next).into_bytes(), false),
    )
    .await;
    assert_eq!((s, p["field"].as_str()), (StatusCode::CONFLICT, Some("period")), "{p}");
    sqlx::query(
        "INSERT INTO periods (org_id, period, state, closed_at, closed_by, content_hash, bundle_gz)
         VALUES ($1, $2, 'closed', now(), 'test', 'h', '\\x00')",
    )
    .bind(env.org.as_uuid())
    .bind(month.first_day())
    .execute(&env.pool)
    .await
    .unwrap();
    // A bill usually comes after its month closed: taken, and said so.
    let (s, p) = send(&env, post_csv(&uri, &env.admin, bill(month).into_bytes(), false)).await;
    assert_eq!((s, &p["after_close"]), (StatusCode::OK, &Value::Bool(true)), "a bill after the close: {p}");
    let earlier = month.prev().unwrap();
    sqlx::query(
        "INSERT INTO periods (org_id, period, state, closing_by, closing_since) VALUES ($1, $2, 'closing', 'test', now())",
    )
    .bind(env.org.as_uuid())
    .bind(earlier.first_day())
    .execute(&env.pool)
    .await
    .unwrap();
    let earlier_uri = format!("/api/v1/costs/imports?period={earlier}");
    let (s, p) = send(&env, post_csv(&earlier_uri, &env.admin, bill(earlier).into_bytes(), false)).await;
    assert_eq!((s, p["field"].as_str()), (StatusCode::CONFLICT, Some("period")), "a close is running: {p}");
    let (s, _) = send(&env, get(&format!("/api/v1/costs/imports?period={next}"), &env.admin)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// An agent's provider ID is bounded and one line; a node's provider ID changing is a new node entry.
#[tokio::test]
async fn provider_ids_are_bounded_and_versioned() {
    let env = env().await;
    let at = OffsetDateTime::now_utc() - time::Duration::days(2);
    let send_nodes = |facts: Vec<Fact>| {
        let batch = Batch {
            wire_version: WIRE_VERSION,
            agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
            cluster: None,
            facts,
        };
        Request::post("/api/v1/ingest/batches")
            .header("authorization", format!("Bearer {}", env.agent))
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&batch).unwrap()))
            .unwrap()
    };
    let long = format!("aws:///z/{}", "i".repeat(2000));
    let (s, p) = send(&env, send_nodes(vec![node("n1", Some(&long), at)])).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    assert!(p["field"].as_str().unwrap().ends_with("provider_id"), "{p}");
    let (s, _) = send(&env, send_nodes(vec![node("n1", Some("aws:///z/i-12345678"), at)])).await;
    assert_eq!(s, StatusCode::OK);
    let mut moved = node("n1", Some("aws:///z/i-87654321"), at + time::Duration::hours(1));
    moved.event_id = event_id("node", &["n1", "2"]);
    let (s, _) = send(&env, send_nodes(vec![moved])).await;
    assert_eq!(s, StatusCode::OK);
    let versions: Vec<Option<String>> =
        sqlx::query_scalar("SELECT provider_id FROM nodes WHERE org_id = $1 AND name = 'n1' ORDER BY valid_from")
            .bind(env.org.as_uuid())
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(versions, vec![Some("aws:///z/i-12345678".into()), Some("aws:///z/i-87654321".into())]);
}

fn namespace_fact(uid: Uuid, name: &str, tenant: &str, at: OffsetDateTime) -> Fact {
    use gpuledger_core::wire::{AttributionLabels, NamespaceFact};
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), "1"]),
        observed_at: at,
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: name.into(),
            created_at: at,
            deleted_at: None,
            labels: AttributionLabels { tenant: Some(tenant.into()), ..Default::default() },
            labels_since: at,
        }),
    }
}

fn pod_facts(ns: Uuid, node: &str, units: u32, from: OffsetDateTime, to: OffsetDateTime) -> Vec<Fact> {
    use gpuledger_core::{
        sharing::SharingMode,
        wire::{AllocationEnd, AllocationStart, AttributionLabels, EndReason, Holder},
    };
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
                node: Some(node.into()),
                resource: "nvidia.com/gpu".into(),
                units,
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

async fn ingest_facts(env: &Env, facts: Vec<Fact>) {
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    let req = Request::post("/api/v1/ingest/batches")
        .header("authorization", format!("Bearer {}", env.agent))
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&batch).unwrap()))
        .unwrap();
    let (status, ack) = send(env, req).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
}

fn json_req(method: &str, uri: &str, token: &str, body: Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// A class priced at actual cost: before the month's bill it is priced at the policy's fallback rates and a finding
/// (and the close) says so; once the bill is in — uploaded through the portal's form as a signed-in admin — the
/// matched nodes' EffectiveCost is split over the tenants' GPU-hours to the cent, and the closed month keeps it.
#[tokio::test]
async fn actual_cost_splits_the_imported_bill_over_the_gpu_hours_to_the_cent() {
    let env = env().await;
    let o = env.org.as_uuid();
    let month = Period::containing(OffsetDateTime::now_utc()).prev().unwrap();
    let t0 = month.start();
    let research = Uuid::new_v4();
    for sql in [
        "INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')",
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at) VALUES ($1, gen_random_uuid(), $2, 'alpha', '2025-01-01')",
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at) VALUES ($1, gen_random_uuid(), $2, 'beta', '2025-01-01')",
    ] {
        sqlx::query(sql).bind(o).bind(research).execute(&env.pool).await.unwrap();
    }
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')")
        .bind(o)
        .execute(&env.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, 'NVIDIA H100 80GB HBM3', '2025-01-01', 'H100-80GB')")
        .bind(o)
        .execute(&env.pool)
        .await
        .unwrap();
    nodes(&env, t0).await;
    // Each billed node holds H100s (as its device facts would say).
    for (n, node) in ["h100-e-01", "h100-e-02", "h100-e-03"].iter().enumerate() {
        for g in 0..8 {
            sqlx::query(
                "INSERT INTO devices (org_id, cluster_id, gpu_uuid, valid_from, node, model)
                 SELECT $1, cluster_id, $2, $3, $4, 'NVIDIA H100 80GB HBM3' FROM clusters WHERE org_id = $1",
            )
            .bind(o)
            .bind(format!("GPU-{n}-{g}"))
            .bind(t0)
            .bind(*node)
            .execute(&env.pool)
            .await
            .unwrap();
        }
    }
    let (ns_a, ns_b) = (Uuid::new_v4(), Uuid::new_v4());
    let mut facts = vec![namespace_fact(ns_a, "alpha-ns", "alpha", t0), namespace_fact(ns_b, "beta-ns", "beta", t0)];
    // alpha: 2 GPUs × 10 h; beta: 1 GPU × 24 h → 44 GPU-hours.
    facts.extend(pod_facts(
        ns_a,
        "h100-e-01",
        2,
        t0 + time::Duration::days(2),
        t0 + time::Duration::days(2) + time::Duration::hours(10),
    ));
    facts.extend(pod_facts(ns_b, "h100-e-02", 1, t0 + time::Duration::days(3), t0 + time::Duration::days(4)));
    ingest_facts(&env, facts).await;
    let policy = serde_json::json!({"effective_from": month.to_string(), "policy": {
        "currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00", "actual_cost": true}]
    }});
    let (s, v) = send(&env, json_req("POST", "/api/v1/policies", &env.admin, policy)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["document"]["classes"][0]["actual_cost"], true, "{v}");
    let (s, v) =
        send(&env, json_req("POST", "/api/v1/policies/1/approve", &env.admin, serde_json::json!({"reason": "bill"})))
            .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // No bill yet: the fallback rates (20 h × 3.00 + 24 h × 3.00), a finding with its fix, and the close asks.
    let ledger_uri = format!("/api/v1/ledger?period={month}");
    let (s, before) = send(&env, get(&ledger_uri, &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{before}");
    assert_eq!(before["total"], "132.00", "{before:#}");
    let (s, findings) = send(&env, get(&format!("/api/v1/periods/{month}/findings"), &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{findings}");
    let missing = findings["items"].as_array().unwrap().iter().find(|f| f["kind"] == "cloud_bill_missing").cloned();
    let missing = missing.unwrap_or_else(|| panic!("no cloud_bill_missing finding: {findings:#}"));
    assert!(missing["fix"].as_str().unwrap().contains("/api/v1/costs/imports"), "{missing}");
    assert!(
        findings["needs_acknowledgement"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("no cloud bill")),
        "{findings:#}"
    );

    // The portal's upload form, as a signed-in admin: without the CSRF token refused, with it imported.
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let user = auth::oidc::upsert_user(&mut tx, "admin-subject", Some("admin@acme.invalid"), "Admin").await.unwrap();
    let new = auth::session::NewSession {
        user_id: user,
        roles: vec![auth::Role::Admin],
        departments: Vec::new(),
        id_token_hint: None,
        source: "test".into(),
    };
    let cookie = auth::session::create(&mut tx, &auth::session::SessionSettings::default(), &new).await.unwrap();
    tx.commit().await.unwrap();
    let csv = "BillingAccountId,BillingCurrency,BillingPeriodStart,BillingPeriodEnd,ChargePeriodStart,ChargePeriodEnd,\
               ChargeCategory,BilledCost,EffectiveCost,ResourceId,ServiceName\n"
        .to_string()
        + &format!(
            "1,USD,{s},{e},{s},{e},Usage,120.00,100.00,i-0abc123def4567890,Amazon Elastic Compute Cloud\n\
             1,USD,{s},{e},{s},{e},Usage,40.00,33.330000001,arn:aws:ec2:us-east-1:1:instance/i-0fedcba9876543210,Amazon Elastic Compute Cloud\n\
             1,USD,{s},{e},{s},{e},Usage,9.99,9.99,i-0deadbeefcafe0001,Amazon Elastic Compute Cloud\n",
            s = gpuledger_core::time_fmt::rfc3339(t0),
            e = gpuledger_core::time_fmt::rfc3339(month.add_months(1).unwrap().start())
        );
    let boundary = "----glbill7MA4YWxkTrZu0gW";
    let multipart = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"bill\"; filename=\"focus.csv\"\r\nContent-Type: text/csv\r\n\r\n{csv}\r\n--{boundary}--\r\n"
    );
    let upload = |csrf: Option<String>| {
        let mut uri = format!("/ui/costs/import?period={month}");
        if let Some(c) = csrf {
            uri.push_str(&format!("&csrf={c}"));
        }
        Request::post(uri)
            .header("cookie", format!("gl_session={cookie}"))
            .header("content-type", format!("multipart/form-data; boundary={boundary}"))
            .body(Body::from(multipart.clone()))
            .unwrap()
    };
    let (s, _) = send(&env, upload(None)).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "an upload without the session's CSRF token");
    let response = env.app.clone().oneshot(upload(Some(auth::session::csrf_for(&cookie)))).await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(location, format!("/admin/costs?period={month}&imported=1"));
    let page = env
        .app
        .clone()
        .oneshot(Request::get(&location).header("cookie", format!("gl_session={cookie}")).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = String::from_utf8(to_bytes(page.into_body(), 16 << 20).await.unwrap().to_vec()).unwrap();
    assert!(html.contains("133.330000001 USD") && html.contains("9.99 USD"), "matched and unmatched on the page");
    assert!(html.contains("i-0deadbeefcafe0001") && html.contains("unclaimed_vm"), "the finding on the page");

    // The bill split over 44 GPU-hours: alpha 20/44 (6,060.45 cents) and beta 24/44 (7,272.55) of 133.33, the cent
    // left over to the larger remainder, so 60.60 + 72.73 (once the read model's
    // worker has refreshed the open month the import changed; run here at once).
    use gpuledger_server::readmodel::worker;
    assert!(worker::refresh(&env.db, env.org, worker::Wait::Block).await.unwrap());
    let (s, after) = send(&env, get(&ledger_uri, &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{after}");
    assert_eq!(after["total"], "133.33", "{after:#}");
    let amount = |tenant: &str| {
        after["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["tenant"] == tenant && l["term"] == "borrowed")
            .unwrap()
            .clone()
    };
    assert_eq!(amount("alpha")["amount"], "60.60", "{after:#}");
    assert_eq!(amount("beta")["amount"], "72.73", "{after:#}");
    assert!(amount("alpha")["explanation"].as_str().unwrap().contains("cloud bill 133.33 USD (2 nodes"), "{after:#}");
    let (_, findings) = send(&env, get(&format!("/api/v1/periods/{month}/findings"), &env.admin)).await;
    assert!(!findings["items"].as_array().unwrap().iter().any(|f| f["kind"] == "cloud_bill_missing"), "{findings:#}");
    assert!(findings["items"].as_array().unwrap().iter().any(|f| f["kind"] == "unclaimed_vm"), "{findings:#}");

    // Closed: the month keeps the split, and its bundle carries the bill it was split from.
    let (s, closed) =
        send(&env, json_req("POST", &format!("/api/v1/periods/{month}/close"), &env.admin, serde_json::json!({})))
            .await;
    assert_eq!(s, StatusCode::OK, "{closed}");
    assert_eq!(closed["total"], "133.33", "{closed}");
    let (s, bundle) = send(&env, get(&format!("/api/v1/periods/{month}/bundle"), &env.export)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(bundle["inputs"]["actual_costs"][0]["cost"], "133.330000001", "{}", bundle["inputs"]["actual_costs"]);
    let b: gpuledger_core::bundle::Bundle = serde_json::from_value(bundle).unwrap();
    gpuledger_core::bundle::verify(&b).unwrap();

    // The final bill comes after the close, 16.67 more: the closed month stands, the open month carries the
    // difference as a late-data correction (booked at its close).
    let corrected = csv.replace("40.00,33.330000001", "40.00,50.000000001");
    assert_ne!(corrected, csv, "the bill's cost is in the file");
    let import_uri = format!("/api/v1/costs/imports?period={month}");
    let (s, again) = send(&env, post_csv(&import_uri, &env.admin, corrected.into_bytes(), false)).await;
    assert_eq!((s, &again["after_close"]), (StatusCode::OK, &Value::Bool(true)), "{again}");
    assert_eq!(again["matched_cost"], "150.000000001", "{again}");
    let (_, still) = send(&env, get(&ledger_uri, &env.admin)).await;
    assert_eq!(still["total"], "133.33", "a closed month never changes: {still}");
    assert!(worker::refresh(&env.db, env.org, worker::Wait::Block).await.unwrap());
    let next = month.next().unwrap();
    let (s, open) = send(&env, get(&format!("/api/v1/ledger?period={next}"), &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{open}");
    use gpuledger_core::decimal::Decimal;
    let late = open["lines"].as_array().unwrap().iter().filter(|l| l["term"] == "adjustment");
    let sum = late
        .map(|l| Decimal::parse(l["amount"].as_str().unwrap()).unwrap())
        .fold(Decimal::parse("0").unwrap(), |a, b| a.checked_add(&b).unwrap());
    assert_eq!(sum, Decimal::parse("16.67").unwrap(), "the late-data correction in {open:#}");
}

/// Issue 35 item 4: an XID 79 the node agent reported opens an outage on its GPU; the allocation holding that GPU
/// (and another) lost one GPU's share from the fault plus the grace time until the device recovered; a credit for
/// those hours at the class's borrowed rate is proposed, approved by finance (not by an admin), and applied by the
/// month's close. A fault fact without its code is refused naming the field.
#[tokio::test]
async fn an_xid_79_produces_a_proposed_credit_for_the_right_hours() {
    use gpuledger_core::wire::{DeviceFaultFact, DeviceFaultKind};
    let env = env().await;
    let o = env.org.as_uuid();
    let month = Period::containing(OffsetDateTime::now_utc()).prev().unwrap();
    let t0 = month.start() + time::Duration::days(2);
    let research = Uuid::new_v4();
    for sql in [
        "INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')",
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at) VALUES ($1, gen_random_uuid(), $2, 'alpha', '2025-01-01')",
    ] {
        sqlx::query(sql).bind(o).bind(research).execute(&env.pool).await.unwrap();
    }
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')")
        .bind(o)
        .execute(&env.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, 'NVIDIA H100 80GB HBM3', '2025-01-01', 'H100-80GB')")
        .bind(o)
        .execute(&env.pool)
        .await
        .unwrap();
    let ns = Uuid::new_v4();
    let mut facts = vec![namespace_fact(ns, "alpha-ns", "alpha", month.start())];
    // 2 GPUs for 10 h: 08:00–18:00 of the 3rd.
    let mut pod = pod_facts(ns, "h100-e-01", 2, t0 + time::Duration::hours(8), t0 + time::Duration::hours(18));
    if let FactBody::AllocationStarted(s) = &mut pod[0].body {
        s.device_ids = vec!["GPU-aaaa".into(), "GPU-bbbb".into()];
    }
    facts.extend(pod);
    let fault = |kind: DeviceFaultKind, xid: Option<u32>, at: OffsetDateTime| Fact {
        event_id: event_id("device-fault", &["GPU-aaaa", kind.as_str(), &format!("{xid:?}"), &at.to_string()]),
        observed_at: at,
        body: FactBody::DeviceFault(DeviceFaultFact {
            node: "h100-e-01".into(),
            gpu_uuid: "GPU-aaaa".into(),
            fault: kind,
            xid,
            occurred_at: at,
            detail: Some("DCGM_FI_DEV_XID_ERRORS 0 → 79".into()),
        }),
    };
    // XID 79 at 10:00, a repeat at 10:30 (the same outage), back at 13:00; an XID 13 later is not credited.
    facts.push(fault(DeviceFaultKind::Xid, Some(79), t0 + time::Duration::hours(10)));
    facts.push(fault(DeviceFaultKind::Xid, Some(79), t0 + time::Duration::minutes(630)));
    facts.push(fault(DeviceFaultKind::Recovered, None, t0 + time::Duration::hours(13)));
    facts.push(fault(DeviceFaultKind::Xid, Some(13), t0 + time::Duration::hours(15)));
    ingest_facts(&env, facts).await;
    let bad = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "node".into(), node: Some("h100-e-01".into()), spool: None },
        cluster: None,
        facts: vec![fault(DeviceFaultKind::Xid, None, t0)],
    };
    let (s, p) = send(
        &env,
        Request::post("/api/v1/ingest/batches")
            .header("authorization", format!("Bearer {}", env.agent))
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&bad).unwrap()))
            .unwrap(),
    )
    .await;
    assert_eq!((s, p["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("facts[0].xid")), "{p}");
    let policy = serde_json::json!({"effective_from": month.to_string(), "policy": {
        "currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}]
    }});
    let (s, v) = send(&env, json_req("POST", "/api/v1/policies", &env.admin, policy)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) =
        send(&env, json_req("POST", "/api/v1/policies/1/approve", &env.admin, serde_json::json!({"reason": "ok"})))
            .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // Lost: 10:05 (5 minutes of grace) to 13:00 on one of the allocation's two GPUs = 2 h 55 min = 2.916667
    // GPU-hours × 3.00 = 8.75.
    let (s, list) = send(&env, get(&format!("/api/v1/faults/credits?period={month}"), &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one outage (the repeat is the same one; XID 13 does not count): {list:#}");
    let c = &items[0];
    assert_eq!(
        (c["state"].as_str(), c["xid"].as_u64(), c["gpu_uuid"].as_str()),
        (Some("proposed"), Some(79), Some("GPU-aaaa")),
        "{c}"
    );
    assert_eq!(c["lost_from"].as_str().unwrap(), gpuledger_core::time_fmt::rfc3339(t0 + time::Duration::minutes(605)));
    assert_eq!(c["lost_to"].as_str().unwrap(), gpuledger_core::time_fmt::rfc3339(t0 + time::Duration::hours(13)));
    assert_eq!(
        (c["gpu_hours"].as_str(), c["amount"].as_str(), c["provisional"].as_bool()),
        (Some("2.916667"), Some("8.75"), Some(false)),
        "{c}"
    );
    assert_eq!((c["tenant"].as_str(), c["holder"].as_str()), (Some("alpha"), Some("ns/trainer")), "{c}");
    assert!(c["description"].as_str().unwrap().contains("fallen off the bus"), "{c}");

    // Finance approves (an admin token may not: separation of money from administration).
    let decision = serde_json::json!({"fault_event_id": c["fault_event_id"], "allocation_id": c["allocation_id"], "reason": "node replaced"});
    let (s, _) = send(&env, json_req("POST", "/api/v1/faults/credits/approve", &env.admin, decision.clone())).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let user = auth::oidc::upsert_user(&mut tx, "fin", Some("fin@acme.invalid"), "Fin").await.unwrap();
    let new = auth::session::NewSession {
        user_id: user,
        roles: vec![auth::Role::Finance],
        departments: Vec::new(),
        id_token_hint: None,
        source: "test".into(),
    };
    let cookie = auth::session::create(&mut tx, &auth::session::SessionSettings::default(), &new).await.unwrap();
    tx.commit().await.unwrap();
    let as_finance = |uri: &str, body: &Value| {
        Request::post(uri)
            .header("cookie", format!("gl_session={cookie}"))
            .header("x-csrf-token", auth::session::csrf_for(&cookie))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let (s, approved) = send(&env, as_finance("/api/v1/faults/credits/approve", &decision)).await;
    assert_eq!(s, StatusCode::OK, "{approved}");
    assert_eq!(approved["state"], "approved");
    assert!(approved["adjustment_id"].as_str().is_some(), "{approved}");
    let (s, _) = send(&env, as_finance("/api/v1/faults/credits/approve", &decision)).await;
    assert_eq!(s, StatusCode::CONFLICT, "decided once");

    // The close applies it: 2 GPUs × 10 h × 3.00 = 60.00, less the 8.75 credit.
    let (s, closed) =
        send(&env, json_req("POST", &format!("/api/v1/periods/{month}/close"), &env.admin, serde_json::json!({})))
            .await;
    assert_eq!(s, StatusCode::OK, "{closed}");
    assert_eq!(closed["total"], "51.25", "{closed}");
    let (_, list) = send(&env, get(&format!("/api/v1/faults/credits?period={month}"), &env.admin)).await;
    assert_eq!(list["items"][0]["state"], "approved", "{list}");
}

/// Issue 35 item 1: the organization's calendar. An IANA zone in the settings (a bad name refused naming the field,
/// the change audited); the open month starts at local midnight of the 1st; a DST month has its own hours
/// (Europe/Berlin's October 2026: 745); a pod crossing local midnight of the 1st is split there; a closed month keeps
/// its instants, and the month after a change of zone continues from where it ended.
#[tokio::test]
async fn months_follow_the_organizations_time_zone() {
    let env = env().await;
    let o = env.org.as_uuid();
    let research = Uuid::new_v4();
    for sql in [
        "INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')",
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at) VALUES ($1, gen_random_uuid(), $2, 'alpha', '2025-01-01')",
    ] {
        sqlx::query(sql).bind(o).bind(research).execute(&env.pool).await.unwrap();
    }
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')")
        .bind(o)
        .execute(&env.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, 'NVIDIA H100 80GB HBM3', '2025-01-01', 'H100-80GB')")
        .bind(o)
        .execute(&env.pool)
        .await
        .unwrap();
    let policy = serde_json::json!({"effective_from": "2026-01", "policy": {
        "currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.00", "borrowed": "3.00"}]
    }});
    let (s, v) = send(&env, json_req("POST", "/api/v1/policies", &env.admin, policy)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) =
        send(&env, json_req("POST", "/api/v1/policies/1/approve", &env.admin, serde_json::json!({"reason": "ok"})))
            .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ns = Uuid::new_v4();
    // 23:00 October 31st to 02:00 November 1st in Tokyo (14:00–17:00 UTC).
    let mut facts = vec![namespace_fact(ns, "alpha-ns", "alpha", time::macros::datetime!(2026-09-01 00:00 UTC))];
    facts.extend(pod_facts(
        ns,
        "n1",
        1,
        time::macros::datetime!(2026-10-31 14:00 UTC),
        time::macros::datetime!(2026-10-31 17:00 UTC),
    ));
    ingest_facts(&env, facts).await;

    // The settings: a zone PostgreSQL does not know is refused naming the field; a GET answer sent back works.
    let (s, settings) = send(&env, get("/api/v1/organization/settings", &env.admin)).await;
    assert_eq!((s, settings["time_zone"].as_str()), (StatusCode::OK, Some("UTC")), "{settings}");
    let put = |zone: &str| {
        let mut b = settings.clone();
        b["time_zone"] = Value::String(zone.into());
        json_req("PUT", "/api/v1/organization/settings", &env.admin, b)
    };
    let (s, p) = send(&env, put("Mars/Olympus_Mons")).await;
    assert_eq!((s, p["field"].as_str()), (StatusCode::CONFLICT, Some("time_zone")), "{p}");
    let mut bad_slug = settings.clone();
    bad_slug["slug"] = Value::String("other".into());
    let (s, p) = send(&env, json_req("PUT", "/api/v1/organization/settings", &env.admin, bad_slug)).await;
    assert_eq!((s, p["field"].as_str()), (StatusCode::CONFLICT, Some("slug")), "{p}");
    // The limits sent back are read strictly (then ignored): a member the answer never has is refused by name.
    let mut extra = settings.clone();
    extra["limits"]["burst"] = Value::from(5);
    let (s, p) = send(&env, json_req("PUT", "/api/v1/organization/settings", &env.admin, extra)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("burst"), "{p}");
    // Whole numbers written as `N.0` are integers to JSON Schema (Schemathesis sends them): taken, limits and months.
    let mut floats = settings.clone();
    floats["limits"]["rate_limit_per_minute"] = json!(3652382.0);
    floats["retention_months"] = json!(settings["retention_months"].as_i64().unwrap() as f64);
    let (s, p) = send(&env, json_req("PUT", "/api/v1/organization/settings", &env.admin, floats)).await;
    assert_eq!(s, StatusCode::OK, "{p}");
    assert_eq!(p["limits"], settings["limits"], "the limits sent back are ignored");

    use gpuledger_server::readmodel::worker;
    let refresh = || worker::refresh(&env.db, env.org, worker::Wait::Block);
    let borrowed = |ledger: &Value| {
        ledger["lines"].as_array().unwrap().iter().find(|l| l["term"] == "borrowed").map(|l| l["quantity"].clone())
    };

    // Tokyo: the pod is split at local midnight — one hour in October, two in November.
    let (s, v) = send(&env, put("Asia/Tokyo")).await;
    assert_eq!((s, v["time_zone"].as_str()), (StatusCode::OK, Some("Asia/Tokyo")), "{v}");
    refresh().await.unwrap();
    let (s, oct) = send(&env, get("/api/v1/ledger?period=2026-10", &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{oct}");
    assert_eq!(
        (oct["starts_at"].as_str(), oct["ends_at"].as_str()),
        (Some("2026-09-30T15:00:00Z"), Some("2026-10-31T15:00:00Z")),
        "{oct}"
    );
    assert_eq!(borrowed(&oct), Some(Value::from("1.000000")), "{oct:#}");
    let (_, nov) = send(&env, get("/api/v1/ledger?period=2026-11", &env.admin)).await;
    assert_eq!(borrowed(&nov), Some(Value::from("2.000000")), "{nov:#}");

    // Europe/Berlin: October 2026 runs 22:00 UTC September 30th to 23:00 UTC October 31st — 745 hours; the whole
    // pod is in it.
    let (s, v) = send(&env, put("Europe/Berlin")).await;
    assert_eq!((s, v["time_zone"].as_str()), (StatusCode::OK, Some("Europe/Berlin")), "{v}");
    let (s, q) = send(
        &env,
        json_req(
            "POST",
            "/api/v1/quotas",
            &env.admin,
            serde_json::json!({"tenant": "alpha",
        "gpu_class": "H100-80GB", "gpus": "1", "valid_from": "2026-01-01T00:00:00Z"}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{q}");
    refresh().await.unwrap();
    let (s, oct) = send(&env, get("/api/v1/ledger?period=2026-10", &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{oct}");
    assert_eq!(
        (oct["starts_at"].as_str(), oct["ends_at"].as_str()),
        (Some("2026-09-30T22:00:00Z"), Some("2026-10-31T23:00:00Z")),
        "{oct}"
    );
    assert_eq!(oct["time_zone"], "Europe/Berlin");
    let guaranteed = oct["lines"].as_array().unwrap().iter().find(|l| l["term"] == "guaranteed").unwrap();
    assert_eq!(guaranteed["quantity"], "745.000000", "{guaranteed}");
    assert_eq!(borrowed(&oct), None, "inside alpha's quota: no borrowed hours");
    let audit: Value = sqlx::query_scalar(
        "SELECT details FROM audit_log WHERE org_id = $1 AND action = 'organization.settings' ORDER BY at DESC LIMIT 1",
    )
    .bind(o)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        (&audit["before"]["time_zone"], &audit["after"]["time_zone"]),
        (&Value::from("Asia/Tokyo"), &Value::from("Europe/Berlin"))
    );

    // Close October under Berlin, then move to Tokyo: November is Tokyo's calendar month (it starts at 15:00 UTC
    // October 31st) but continues from where Berlin's October ended (23:00 UTC), so no hour is charged twice.
    let (s, closed) =
        send(&env, json_req("POST", "/api/v1/periods/2026-10/close", &env.admin, serde_json::json!({}))).await;
    assert_eq!(s, StatusCode::OK, "{closed}");
    let (s, _) = send(&env, put("Asia/Tokyo")).await;
    assert_eq!(s, StatusCode::OK);
    refresh().await.unwrap();
    let (_, oct) = send(&env, get("/api/v1/ledger?period=2026-10", &env.admin)).await;
    assert_eq!(
        (oct["starts_at"].as_str(), oct["time_zone"].as_str()),
        (Some("2026-09-30T22:00:00Z"), Some("Europe/Berlin")),
        "a closed month keeps its instants: {oct}"
    );
    let (s, nov) = send(&env, get("/api/v1/ledger?period=2026-11", &env.admin)).await;
    assert_eq!(s, StatusCode::OK, "{nov}");
    assert_eq!(
        (nov["starts_at"].as_str(), nov["ends_at"].as_str(), nov["continues_from"].as_str(), nov["time_zone"].as_str()),
        (Some("2026-10-31T15:00:00Z"), Some("2026-11-30T15:00:00Z"), Some("2026-10-31T23:00:00Z"), Some("Asia/Tokyo")),
        "{nov}"
    );
    let guaranteed = nov["lines"].as_array().unwrap().iter().find(|l| l["term"] == "guaranteed").unwrap();
    assert_eq!(
        guaranteed["quantity"], "712.000000",
        "from 23:00 UTC October 31st to 15:00 UTC November 30th: {guaranteed}"
    );
    // December is Tokyo's own month from its local midnight.
    let (_, dec) = send(&env, get("/api/v1/ledger?period=2026-12", &env.admin)).await;
    if dec["starts_at"].is_string() {
        assert_eq!(dec["starts_at"], "2026-11-30T15:00:00Z", "{dec}");
        assert!(dec.get("continues_from").is_none(), "{dec}");
    }
    // The closed month's bundle carries its instants and verifies.
    let (s, bundle) = send(&env, get("/api/v1/periods/2026-10/bundle", &env.export)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(bundle["inputs"]["bounds"]["time_zone"], "Europe/Berlin", "{}", bundle["inputs"]["bounds"]);
    let b: gpuledger_core::bundle::Bundle = serde_json::from_value(bundle).unwrap();
    gpuledger_core::bundle::verify(&b).unwrap();
}
