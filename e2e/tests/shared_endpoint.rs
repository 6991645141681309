//! A shared model endpoint with three tenants, end to end through the real server binary (demo organization on the
//! run's PostgreSQL): the endpoint's pod arrives through the agents' ingest API, three tenants' requests through
//! the gateway usage-records API (one by name, one by a gateway key, one by a team alias configured after its
//! records arrived), and their service lines add up to exactly the endpoint's cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpuledger_core::{
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AttributionLabels, Batch, EndReason, Fact, FactBody, Holder,
        NamespaceFact, WIRE_VERSION, event_id,
    },
};
use gpuledger_e2e::{
    fresh_database,
    process::{create_token, start_demo, temp_dir},
};
use serde_json::{Value, json};
use time::{Duration, macros::datetime};
use uuid::Uuid;

const H100: &str = "NVIDIA H100 80GB HBM3";

#[tokio::test]
async fn three_tenants_service_lines_add_up_to_the_endpoints_cost() {
    let db = fresh_database().await.unwrap();
    let dir = temp_dir("gl-e2e-endpoint").unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let base = server.base.clone();
    let admin = create_token(&db.admin_url, "admin").unwrap();
    let gateway = create_token(&db.admin_url, "agent:gateway-e2e").unwrap();
    let http = reqwest::Client::new();
    let send = async |token: &str, method: reqwest::Method, path: &str, body: String, ndjson: bool| -> (u16, Value) {
        let r = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(token)
            .header("content-type", if ndjson { "application/x-ndjson" } else { "application/json" })
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    };
    use reqwest::Method;

    // A policy for October that prices the endpoint by its own cost (GPU-hours at the guaranteed rate).
    let policy = json!({"effective_from": "2026-10", "note": "e2e", "policy": {"currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.50", "borrowed": "3.50"}],
        "services": [{"endpoint": "llm-e2e"}]}});
    let (status, v) = send(&admin, Method::POST, "/api/v1/policies", policy.to_string(), false).await;
    assert_eq!(status, 201, "{v}");
    let version = v["version"].as_i64().unwrap();
    let (status, v) =
        send(&admin, Method::POST, &format!("/api/v1/policies/{version}/approve"), "{}".into(), false).await;
    assert_eq!(status, 200, "{v}");

    // The endpoint's pod: 2 H100s for 5 hours = 10 GPU-hours → 25.00 USD.
    let ns = Uuid::new_v4();
    let t0 = datetime!(2026-10-20 08:00 UTC);
    let allocation_id = "vllm-e2e-0/main/nvidia.com/gpu".to_string();
    let facts = vec![
        Fact {
            event_id: event_id("namespace", &[&ns.to_string()]),
            observed_at: t0,
            body: FactBody::NamespaceObserved(NamespaceFact {
                namespace_uid: ns,
                name: "serving-e2e".into(),
                created_at: datetime!(2026-09-01 00:00 UTC),
                deleted_at: None,
                labels: AttributionLabels::default(),
                labels_since: t0,
            }),
        },
        Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at: t0,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Pod,
                holder_uid: Uuid::new_v4(),
                holder_name: "vllm-e2e-0".into(),
                namespace: "serving-e2e".into(),
                namespace_uid: Some(ns),
                container: Some("main".into()),
                node: Some("node-1".into()),
                resource: "nvidia.com/gpu".into(),
                units: 2,
                mode: SharingMode::Exclusive,
                gpu_model: Some(H100.into()),
                device_ids: vec![],
                started_at: t0,
                labels: AttributionLabels { endpoint: Some("llm-e2e".into()), ..Default::default() },
            }),
        },
        Fact {
            event_id: event_id("alloc-end", &[&allocation_id]),
            observed_at: t0 + Duration::hours(5),
            body: FactBody::AllocationEnded(AllocationEnd {
                allocation_id,
                ended_at: t0 + Duration::hours(5),
                reason: EndReason::Finished,
            }),
        },
    ];
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "e2e".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    let (status, v) =
        send(&gateway, Method::POST, "/api/v1/ingest/batches", serde_json::to_string(&batch).unwrap(), false).await;
    assert_eq!(status, 200, "{v}");

    // The gateway's records: by name, by gateway key (aliased), by a team nobody mapped yet.
    let aliases = json!({"aliases": [{"kind": "gateway_key", "alias": "key-search", "tenant": "search-ranking"}]});
    let (status, v) = send(&admin, Method::PUT, "/api/v1/endpoints/llm-e2e/aliases", aliases.to_string(), false).await;
    assert_eq!(status, 200, "{v}");
    let record = |id: &str, who: (&str, &str), input: u64, output: u64| {
        json!({"record_id": id, "endpoint": "llm-e2e", "model": "llama-3-8b", who.0: who.1,
               "started_at": "2026-10-20T09:00:00Z", "input_tokens": input, "output_tokens": output})
        .to_string()
    };
    let body = [
        record("e2e-1", ("tenant", "nlp-research"), 1000, 1000),
        record("e2e-2", ("gateway_key", "key-search"), 2500, 1500),
        record("e2e-3", ("team", "recsys-team"), 3000, 3000),
    ]
    .join("\n");
    let (status, v) = send(&gateway, Method::POST, "/api/v1/usage/records", body.clone(), true).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["stored"].as_u64(), v["unknown"][0]["record_id"].as_str()), (Some(3), Some("e2e-3")), "{v}");
    let (status, v) = send(&gateway, Method::POST, "/api/v1/usage/records", body, true).await;
    assert_eq!((status, v["duplicates"].as_u64()), (200, Some(3)), "a retry stores nothing: {v}");
    let aliases = json!({"aliases": [{"kind": "gateway_key", "alias": "key-search", "tenant": "search-ranking"},
                                     {"kind": "team", "alias": "recsys-team", "tenant": "recommendations"}]});
    let (status, v) = send(&admin, Method::PUT, "/api/v1/endpoints/llm-e2e/aliases", aliases.to_string(), false).await;
    assert_eq!((status, v["attributed"].as_u64()), (200, Some(1)), "{v}");

    // 2,000 + 4,000 + 6,000 weighted tokens of 12,000: 1/6, 1/3 and 1/2 of 25.00.
    let (status, ledger) =
        send(&admin, Method::GET, "/api/v1/ledger?period=2026-10&term=service&per_page=100", String::new(), false)
            .await;
    assert_eq!(status, 200, "{ledger}");
    let mut lines: Vec<(String, String)> = ledger["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["line_id"].as_str().unwrap_or_default().ends_with("/llm-e2e"))
        .map(|l| (l["tenant"].as_str().unwrap().to_string(), l["amount"].as_str().unwrap().to_string()))
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            ("nlp-research".to_string(), "4.17".to_string()),
            ("recommendations".to_string(), "12.50".to_string()),
            ("search-ranking".to_string(), "8.33".to_string()),
        ],
        "{ledger:#}"
    );
    let cents: i64 = lines.iter().map(|(_, a)| a.replace('.', "").parse::<i64>().unwrap()).sum();
    assert_eq!(cents, 2500, "the service lines add up to the endpoint's 10 GPU-hours × 2.50");
    let _ = std::fs::remove_dir_all(&dir);
}
