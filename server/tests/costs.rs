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
use serde_json::Value;
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
    let app = app::router(AppState::new(db, None), &HttpOptions::default());
    Env { app, admin, export, agent, pool, org, _db: test_db }
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
    let mut r = Request::post(uri).header("authorization", format!("Bearer {token}")).header("content-type", "text/csv");
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
    line(at(1), "arn:aws:ec2:us-east-1:123456789012:instance/i-0abc123def4567890", "71234.56", "Amazon Elastic Compute Cloud", "p5.48xlarge, On Demand");
    line(at(2), "i-0fedcba9876543210", "1000.01", "Amazon Elastic Compute Cloud", "p5.48xlarge");
    line(at(3), "i-0FEDCBA9876543210", "0.000000000004", "Amazon Elastic Compute Cloud", "rounding");
    line(at(4), &AZURE["azure://".len()..].to_lowercase(), "52000.10", "Virtual Machines", "ND H100 v5");
    line(at(5), "arn:aws:ec2:us-east-1:123456789012:instance/i-0notinthiscluster0", "999.99", "Amazon Elastic Compute Cloud", "another team's VM");
    line(at(6), "arn:aws:s3:::training-data", "12.34", "Amazon Simple Storage Service", "storage");
    line(at(7), "", "100", "AWS Support (Business)", "support, \"business\"");
    line(format!("{end}T00:00:00Z"), "i-0abc123def4567890", "5555", "Amazon Elastic Compute Cloud", "next month: not counted");
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
    let kinds = |k: &str| findings.iter().filter(|f| f["kind"] == k).map(|f| f["subject"].as_str().unwrap()).collect::<Vec<_>>();
    assert_eq!(kinds("unclaimed_vm"), vec!["arn:aws:ec2:us-east-1:123456789012:instance/i-0notinthiscluster0"], "{imp:#}");
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
    let (s, p) = send(&env, post_csv(&format!("/api/v1/costs/imports?period={next}"), &env.admin, bill(next).into_bytes(), false)).await;
    assert_eq!((s, p["field"].as_str()), (StatusCode::CONFLICT, Some("period")), "{p}");
    sqlx::query("INSERT INTO periods (org_id, period, state, closed_at, closed_by) VALUES ($1, $2, 'closed', now(), 'test')")
        .bind(env.org.as_uuid())
        .bind(month.first_day())
        .execute(&env.pool)
        .await
        .unwrap();
    let (s, p) = send(&env, post_csv(&uri, &env.admin, bill(month).into_bytes(), false)).await;
    assert_eq!((s, p["field"].as_str()), (StatusCode::CONFLICT, Some("period")), "a closed month never changes: {p}");
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
