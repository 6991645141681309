//! `GET /metrics` against real PostgreSQL as the app role: facts go in through the real ingest endpoint, and the
//! exposition that comes out is parsed line by line — the identity gauge has one line per open workload with its
//! owner, bounded labels only, one organization per token, a department-scoped token sees its departments only,
//! and the ingest counters match the acknowledgements.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use base64::Engine;
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
    auth::{self, Scope},
    db::Database,
};
use serde_json::Value;
use time::{OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

const H100: &str = "NVIDIA H100 80GB HBM3";
const SINCE: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);

/// The labels the identity gauge may carry: all bounded.
const IDENTITY_LABELS: [&str; 9] =
    ["cluster", "namespace", "pod", "tenant", "department", "model", "gpu_class", "gpu_model", "sharing_mode"];

struct Org {
    agent: String,
    admin: String,
    export: String,
    /// An export token limited to the Product department.
    export_product: String,
}

struct Env {
    app: axum::Router,
    a: Org,
    b: Org,
    _db: gpuledger_e2e::TestDatabase,
}

/// Creates an organization with Research (tenant `<p>-nlp`) and Product (tenant `<p>-search`), an H100 class with
/// its 3g.40gb MIG profile (3/7), a cluster `<p>-east`, and its tokens.
async fn org(db: &Database, p: &str) -> Org {
    let org = db
        .cross_org_directory()
        .create_org(OrgId::from_uuid(Uuid::new_v4()), &format!("org-{p}"), &format!("Org {p}"))
        .await
        .unwrap();
    let o = org.as_uuid();
    let mut tx = db.begin_org(org).await.unwrap();
    let (research, product) = (Uuid::new_v4(), Uuid::new_v4());
    for (id, name) in [(research, "Research"), (product, "Product")] {
        sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, $3)")
            .bind(o)
            .bind(id)
            .bind(name)
            .execute(tx.conn())
            .await
            .unwrap();
    }
    for (dept, name) in [(research, format!("{p}-nlp")), (product, format!("{p}-search"))] {
        sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, $4)")
            .bind(o)
            .bind(Uuid::new_v4())
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
    sqlx::query("INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, $2, $3, 'H100-80GB')")
        .bind(o)
        .bind(H100)
        .bind(SINCE)
        .execute(tx.conn())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
         VALUES ($1, $2, '3g.40gb', $3, 3, 7)",
    )
    .bind(o)
    .bind(H100)
    .bind(SINCE)
    .execute(tx.conn())
    .await
    .unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, &format!("{p}-east")).await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (_, export) = auth::create_token(&mut tx, &Scope::export(), "prometheus", "test", None).await.unwrap();
    let scope = Scope::Export { departments: vec![DepartmentId::from_uuid(product)] };
    let (_, export_product) = auth::create_token(&mut tx, &scope, "product", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    Org { agent, admin, export, export_product }
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let a = org(&db, "a").await;
    let b = org(&db, "b").await;
    let app = app::router(AppState::new(db, None), &HttpOptions::default());
    Env { app, a, b, _db: test_db }
}

fn namespace(uid: Uuid, name: &str, tenant: Option<String>) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&uid.to_string()]),
        observed_at: SINCE,
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: name.into(),
            created_at: SINCE,
            deleted_at: None,
            labels: AttributionLabels { tenant, ..Default::default() },
            labels_since: SINCE,
        }),
    }
}

/// A pod holding GPUs since `SINCE` (still running), labelled with a model and an agent session.
fn running(pod: &str, ns: Uuid, ns_name: &str, mode: SharingMode, units: u32, model: Option<&str>) -> Fact {
    let resource = match &mode {
        SharingMode::Mig { profile } => format!("nvidia.com/mig-{profile}"),
        _ => "nvidia.com/gpu".into(),
    };
    let allocation_id = format!("{pod}/main/{resource}");
    Fact {
        event_id: event_id("alloc-start", &[&allocation_id]),
        observed_at: SINCE,
        body: FactBody::AllocationStarted(AllocationStart {
            allocation_id,
            holder: Holder::Pod,
            holder_uid: Uuid::new_v4(),
            holder_name: pod.into(),
            namespace: ns_name.into(),
            namespace_uid: Some(ns),
            container: Some("main".into()),
            node: Some("node-1".into()),
            resource,
            units,
            mode,
            gpu_model: Some(H100.into()),
            device_ids: vec![],
            started_at: SINCE,
            labels: AttributionLabels {
                model: model.map(str::to_string),
                // Unbounded: must never become a label.
                agent_session: Some(format!("session-{pod}-7f3a9c")),
                ..Default::default()
            },
        }),
    }
}

fn ended(pod: &str) -> Fact {
    let allocation_id = format!("{pod}/main/nvidia.com/gpu");
    Fact {
        event_id: event_id("alloc-end", &[&allocation_id]),
        observed_at: datetime!(2026-01-02 00:00 UTC),
        body: FactBody::AllocationEnded(AllocationEnd {
            allocation_id,
            ended_at: datetime!(2026-01-02 00:00 UTC),
            reason: EndReason::Finished,
        }),
    }
}

/// Sends a batch; returns the acknowledgement.
async fn send(app: &axum::Router, agent: &str, facts: Vec<Fact>) -> Value {
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    let req = Request::post("/api/v1/ingest/batches")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {agent}"))
        .body(Body::from(serde_json::to_vec(&batch).unwrap()))
        .unwrap();
    let response = app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// Org `p`'s world: Research's namespace with a trainer (2 GPUs, a model label), a MIG notebook and a finished pod;
/// Product's namespace with a ranker; an unowned namespace with a pod. Returns the acknowledgements.
async fn load(app: &axum::Router, agent: &str, p: &str) -> Vec<Value> {
    let (research, product, free) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mig = SharingMode::Mig { profile: "3g.40gb".parse().unwrap() };
    let first = vec![
        namespace(research, &format!("{p}-research"), Some(format!("{p}-nlp"))),
        namespace(product, &format!("{p}-product"), Some(format!("{p}-search"))),
        namespace(free, &format!("{p}-scratch"), None),
    ];
    let second = vec![
        running(
            &format!("{p}-trainer-0"),
            research,
            &format!("{p}-research"),
            SharingMode::Exclusive,
            2,
            Some("llama"),
        ),
        running(&format!("{p}-notebook"), research, &format!("{p}-research"), mig, 1, None),
        running(&format!("{p}-finished"), research, &format!("{p}-research"), SharingMode::Exclusive, 1, None),
        ended(&format!("{p}-finished")),
        running(&format!("{p}-ranker"), product, &format!("{p}-product"), SharingMode::Exclusive, 1, Some("bge")),
        running(&format!("{p}-loose"), free, &format!("{p}-scratch"), SharingMode::Exclusive, 1, None),
    ];
    vec![send(app, agent, first).await, send(app, agent, second).await]
}

/// One sample of the exposition.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

/// Parses the text exposition format 0.0.4 strictly: every line is `# HELP`, `# TYPE` or `name{labels} value`;
/// label values are unescaped; each family has one HELP and one TYPE before its samples.
fn parse(text: &str) -> Vec<Sample> {
    assert!(text.ends_with('\n'), "the exposition ends with a line feed");
    let mut samples = Vec::new();
    let mut typed = BTreeSet::new();
    let mut helped = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(is_name(name, true) && helped.insert(name.to_string()), "HELP once per family: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            assert!(is_name(name, true) && typed.insert(name.to_string()), "TYPE once per family: {line}");
            if kind == "counter" {
                assert!(name.ends_with("_total"), "counters end in _total: {line}");
            }
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "not a sample: {line:?}");
        let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("no value: {line}"));
        let name = &line[..name_end];
        assert!(is_name(name, true), "bad metric name in {line}");
        assert!(typed.contains(name), "sample before its TYPE: {line}");
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let consumed;
            loop {
                let start = chars.peek().map(|(i, _)| *i).unwrap();
                if body[start..].starts_with('}') {
                    consumed = start + 1;
                    break;
                }
                let eq = body[start..].find("=\"").map(|i| start + i).unwrap_or_else(|| panic!("{line}"));
                let key = &body[start..eq];
                assert!(is_name(key, false), "bad label name {key:?} in {line}");
                while chars.peek().is_some_and(|(i, _)| *i <= eq + 1) {
                    chars.next();
                }
                let mut value = String::new();
                loop {
                    let (_, c) = chars.next().unwrap_or_else(|| panic!("unterminated value in {line}"));
                    match c {
                        '"' => break,
                        '\\' => match chars.next().unwrap().1 {
                            'n' => value.push('\n'),
                            '\\' => value.push('\\'),
                            '"' => value.push('"'),
                            other => panic!("bad escape \\{other} in {line}"),
                        },
                        '\n' => panic!("raw line feed in {line}"),
                        c => value.push(c),
                    }
                }
                assert!(labels.insert(key.to_string(), value).is_none(), "label repeated in {line}");
                match chars.next() {
                    Some((_, ',')) => {}
                    Some((i, '}')) => {
                        consumed = i + 1;
                        break;
                    }
                    other => panic!("unexpected {other:?} in {line}"),
                }
            }
            rest = &body[consumed..];
        }
        let value = rest.strip_prefix(' ').unwrap_or_else(|| panic!("no space before the value: {line}"));
        let value: f64 = match value {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        samples.push(Sample { name: name.to_string(), labels, value });
    }
    assert_eq!(typed, helped, "every family has HELP and TYPE");
    // No two samples with the same name and labels (Prometheus rejects the scrape).
    let keys: BTreeSet<String> = samples.iter().map(|s| format!("{}{:?}", s.name, s.labels)).collect();
    assert_eq!(keys.len(), samples.len(), "duplicate series");
    samples
}

async fn scrape(app: &axum::Router, authorization: Option<String>) -> (StatusCode, String, String) {
    let mut req = Request::get("/metrics");
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    let response = app.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body = to_bytes(response.into_body(), 1 << 24).await.unwrap();
    (status, content_type, String::from_utf8(body.to_vec()).unwrap())
}

async fn samples(app: &axum::Router, token: &str) -> (String, Vec<Sample>) {
    let (status, content_type, body) = scrape(app, Some(format!("Bearer {token}"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let parsed = parse(&body);
    (body, parsed)
}

fn identity(samples: &[Sample]) -> BTreeMap<String, BTreeMap<String, String>> {
    samples
        .iter()
        .filter(|s| s.name == "gpuledger_workload_identity")
        .map(|s| {
            assert_eq!(s.value, 1.0);
            (s.labels["pod"].clone(), s.labels.clone())
        })
        .collect()
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|s| s.value)
}

#[tokio::test]
async fn the_identity_gauge_shows_each_open_workload_of_the_callers_organization_only() {
    let env = env().await;
    let acks_a = load(&env.app, &env.a.agent, "a").await;
    load(&env.app, &env.b.agent, "b").await;

    // No credential: 401 as a problem document; an agent token may not read: 403.
    let (status, content_type, _) = scrape(&env.app, None).await;
    assert_eq!((status, content_type.as_str()), (StatusCode::UNAUTHORIZED, "application/problem+json"));
    let (status, _, _) = scrape(&env.app, Some("Bearer glt_nonsense".into())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = scrape(&env.app, Some(format!("Bearer {}", env.a.agent))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // A's admin token: one line per open workload (not the finished one), with its owner now.
    let (body, a) = samples(&env.app, &env.a.admin).await;
    let ids = identity(&a);
    assert_eq!(ids.keys().collect::<Vec<_>>(), ["a-loose", "a-notebook", "a-ranker", "a-trainer-0"], "{body}");
    let expect = |pod: &str, ns: &str, tenant: &str, dept: &str, model: &str, mode: &str| {
        let l = &ids[pod];
        assert_eq!(l.keys().map(String::as_str).collect::<BTreeSet<_>>(), IDENTITY_LABELS.into_iter().collect());
        let got: Vec<&str> =
            ["cluster", "namespace", "tenant", "department", "model", "gpu_class", "gpu_model", "sharing_mode"]
                .iter()
                .map(|k| l[*k].as_str())
                .collect();
        assert_eq!(got, ["a-east", ns, tenant, dept, model, "H100-80GB", H100, mode], "{pod}");
    };
    expect("a-trainer-0", "a-research", "a-nlp", "Research", "llama", "exclusive");
    expect("a-notebook", "a-research", "a-nlp", "Research", "", "mig");
    expect("a-ranker", "a-product", "a-search", "Product", "bge", "exclusive");
    expect("a-loose", "a-scratch", "", "", "", "exclusive");
    // Bounded labels only: no agent session, request or trace ID anywhere near the gauge.
    for line in body.lines().filter(|l| l.contains("identity")) {
        assert!(!line.contains("session-") && !line.contains("trace") && !line.contains("request_id"), "{line}");
    }
    // GPU-equivalents held: 2 GPUs, and 3/7 of one for the 3g.40gb instance.
    assert_eq!(value(&a, "gpuledger_workload_allocated_gpus", &[("pod", "a-trainer-0")]), Some(2.0));
    let mig = value(&a, "gpuledger_workload_allocated_gpus", &[("pod", "a-notebook")]).unwrap();
    assert!((mig - 3.0 / 7.0).abs() < 1e-12, "{mig}");
    // Organization gauges.
    assert_eq!(
        value(&a, "gpuledger_open_allocations", &[("cluster", "a-east"), ("sharing_mode", "exclusive")]),
        Some(3.0)
    );
    assert_eq!(value(&a, "gpuledger_open_allocations", &[("cluster", "a-east"), ("sharing_mode", "mig")]), Some(1.0));
    assert!(
        value(&a, "gpuledger_agent_last_seen_timestamp_seconds", &[("cluster", "a-east"), ("mode", "cluster")])
            .is_some_and(|t| t > 1.7e9)
    );
    assert_eq!(value(&a, "gpuledger_build_info", &[]), Some(1.0));
    // Ingest counters of this organization, as acknowledged.
    let sum = |key: &str| acks_a.iter().map(|a| a[key].as_u64().unwrap()).sum::<u64>() as f64;
    let flagged = acks_a.iter().map(|a| a["flagged"].as_array().unwrap().len()).sum::<usize>() as f64;
    assert_eq!(value(&a, "gpuledger_ingest_facts_received_total", &[]), Some(sum("received")));
    assert_eq!(value(&a, "gpuledger_ingest_facts_stored_total", &[]), Some(sum("stored")));
    assert_eq!(value(&a, "gpuledger_ingest_facts_flagged_total", &[]), Some(flagged));
    assert_eq!(value(&a, "gpuledger_ingest_batches_total", &[("code", "200")]), Some(2.0));
    assert_eq!(
        value(&a, "gpuledger_http_requests_total", &[("route_class", "ingest"), ("code", "200")]),
        Some(2.0),
        "{body}"
    );
    assert_eq!(value(&a, "gpuledger_http_requests_total", &[("route_class", "metrics"), ("code", "403")]), Some(1.0));
    // Nothing of B's: its workloads, cluster, tenants.
    for marker in ["b-east", "b-nlp", "b-search", "b-research", "b-trainer", "org-b"] {
        assert!(!body.contains(marker), "A's scrape shows {marker}: {body}");
    }

    // B's token sees B's workloads and nothing of A's.
    let (body_b, b) = samples(&env.app, &env.b.admin).await;
    assert_eq!(identity(&b).keys().collect::<Vec<_>>(), ["b-loose", "b-notebook", "b-ranker", "b-trainer-0"]);
    for marker in ["a-east", "a-nlp", "a-search", "a-research", "a-trainer", "org-a"] {
        assert!(!body_b.contains(marker), "B's scrape shows A's {marker}: {body_b}");
    }
    // A's agent token asking for /metrics was counted for A (403), not for B.
    assert_eq!(value(&b, "gpuledger_http_requests_total", &[("route_class", "metrics"), ("code", "403")]), None);

    // The export token, as Power BI would send it (HTTP Basic), reads the same as the admin token.
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("prometheus:{}", env.a.export));
    let (status, _, body) = scrape(&env.app, Some(format!("Basic {basic}"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(identity(&parse(&body)).len(), 4);

    // A token limited to Product: Product's workloads only — no Research, no unowned namespace, and no
    // organization-wide gauges.
    let (body, product) = samples(&env.app, &env.a.export_product).await;
    assert_eq!(identity(&product).keys().collect::<Vec<_>>(), ["a-ranker"], "{body}");
    for marker in ["Research", "a-nlp", "a-research", "a-scratch", "a-loose", "gpuledger_open_allocations{"] {
        assert!(!body.contains(marker), "the Product token sees {marker}: {body}");
    }
}

#[tokio::test]
async fn an_organization_without_workloads_gets_a_valid_exposition() {
    let env = env().await;
    let (body, samples) = samples(&env.app, &env.a.export).await;
    assert!(identity(&samples).is_empty(), "{body}");
    assert!(body.contains("# TYPE gpuledger_workload_identity gauge\n"));
    assert_eq!(value(&samples, "gpuledger_ingest_facts_received_total", &[]), Some(0.0));
}
