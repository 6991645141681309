//! Model-server scraping end to end: the real `cluster` agent finds a vLLM pod by its annotations on a stand-in
//! Kubernetes API, scrapes real vLLM metric text from a local listener every second and sends `endpoint_totals`
//! facts to the real server; a gateway attributes part of the endpoint's work to one tenant; the ledger charges that
//! tenant its share of the endpoint's cost and reports the rest as the unattributed remainder (moved to the overhead
//! pool), never dropped: the tenant's line and the remainder add up to the endpoint's cost. A training job's pod
//! keeps its progress in annotations: the agent sends it and the training analytics show the work per GPU-hour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Router, extract::State, routing::get};
use gpuledger_e2e::{
    fake_kube::FakeKube,
    fresh_database,
    process::{binary, create_token, start_demo, temp_dir},
};
use serde_json::{Value, json};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real vLLM V1 scrape from the fixtures (every counter 0) with the token and request counters set.
fn vllm(prompt: u64, generation: u64, stop: u64) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/modelserver/vllm_v1_qwen2.5-0.5b_kops.txt");
    let mut text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let m = r#"model_name="Qwen/Qwen2.5-0.5B-Instruct"}"#;
    for (series, value) in [
        (format!(r#"vllm:prompt_tokens_total{{engine="0",{m}"#), prompt),
        (format!(r#"vllm:generation_tokens_total{{engine="0",{m}"#), generation),
        (format!(r#"vllm:request_success_total{{engine="0",finished_reason="stop",{m}"#), stop),
    ] {
        let old = format!("{series} 0.0\n");
        assert!(text.contains(&old), "fixture has no {series}");
        text = text.replace(&old, &format!("{series} {value}\n"));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_totals_beyond_the_gateways_records_are_the_unattributed_remainder() {
    let dir = temp_dir("gl-e2e-scrape").unwrap();
    let db = fresh_database().await.unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let base = server.base.clone();
    let admin = create_token(&db.admin_url, "admin").unwrap();
    let agent_token = create_token(&db.admin_url, "agent:scrape-e2e").unwrap();
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    let http = reqwest::Client::new();
    let now = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    let period = format!("{}-{:02}", now.year(), u8::from(now.month()));

    // This month's policy prices the endpoint by its own cost: its GPU-hours at the guaranteed rate.
    let policy = json!({"effective_from": period, "note": "scrape e2e", "policy": {"currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.50", "borrowed": "3.50"}],
        "services": [{"endpoint": "llm-scrape"}]}});
    let r = http.post(format!("{base}/api/v1/policies")).bearer_auth(&admin).json(&policy).send().await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let version = r.json::<Value>().await.unwrap()["version"].as_i64().unwrap();
    let r = http
        .post(format!("{base}/api/v1/policies/{version}/approve"))
        .bearer_auth(&admin)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    // The model server: real vLLM metric text whose counters the test moves.
    let metrics = Arc::new(Mutex::new(vllm(0, 0, 0)));
    let app = Router::new()
        .route("/metrics", get(|State(m): State<Arc<Mutex<String>>>| async move { m.lock().unwrap().clone() }))
        .with_state(metrics.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // The cluster: an H100 node and the endpoint's vLLM pod, annotated for scraping, its IP on loopback.
    let kube = FakeKube::start().await.unwrap();
    kube.apply(
        "nodes",
        json!({"metadata": {"name": "h100-a", "uid": "b0000000-0000-4000-8000-0000000000a1",
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}}}),
    )
    .unwrap();
    kube.apply(
        "namespaces",
        json!({"metadata": {"name": "serving", "uid": "2c1e5a7b-0f4d-4d7e-9b3a-00000000aa01",
        "creationTimestamp": "2026-01-01T00:00:00Z"}}),
    )
    .unwrap();
    let started = (now - time::Duration::hours(1)).format(&Rfc3339).unwrap();
    kube.apply("pods", json!({
        "metadata": {"name": "vllm-0", "namespace": "serving", "uid": "a1a1a1a1-0000-4000-8000-0000000000b1",
                     "labels": {"gpuledger.io/endpoint": "llm-scrape"},
                     "annotations": {"gpuledger.io/modelserver": "vllm", "gpuledger.io/metrics-port": port.to_string()}},
        "spec": {"nodeName": "h100-a", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "podIP": "127.0.0.1",
                   "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": started}}}]}
    }))
    .unwrap();
    // A training job's pod that keeps its progress in annotations (one H100).
    let trainer = |steps: &str| {
        json!({
            "metadata": {"name": "llm-pretrain-x7k2p", "namespace": "serving", "uid": "a1a1a1a1-0000-4000-8000-0000000000c1",
                         "labels": {"batch.kubernetes.io/job-name": "llm-pretrain"},
                         "annotations": {"gpuledger.io/training-steps": steps}},
            "spec": {"nodeName": "h100-a", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running",
                       "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": started.clone()}}}]}
        })
    };
    kube.apply("pods", trainer("100")).unwrap();
    let kubeconfig = kube.kubeconfig(&dir).unwrap();
    let log = std::fs::File::create(dir.join("agent.log")).unwrap();
    let _agent = Agent(
        Command::new(binary("gpuledger-agent").unwrap())
            .args(["cluster", "--server", &base, "--token", &agent_token, "--cluster-name", "scrape-e2e"])
            .arg("--spool-dir")
            .arg(dir.join("agent"))
            .args(["--poll-ms", "100", "--scrape-secs", "1"])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info,gpuledger_agent=debug")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap(),
    );
    let totals = async || -> (i64, i64, i64, i64) {
        sqlx::query_as(
            "SELECT count(*), coalesce(sum(requests), 0)::bigint, coalesce(sum(input_tokens), 0)::bigint,
                    coalesce(sum(output_tokens), 0)::bigint FROM endpoint_totals WHERE endpoint = 'llm-scrape'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let wait = async |what: &str, done: &dyn Fn((i64, i64, i64, i64)) -> bool| {
        let t = Instant::now();
        loop {
            let v = totals().await;
            if done(v) {
                return v;
            }
            if t.elapsed() > Duration::from_secs(60) {
                let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
                panic!("timed out waiting for {what}: {v:?}\nagent log:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    // Windows of no work arrive first (the first scrape is the baseline)…
    wait("a first window", &|(n, ..)| n >= 1).await;
    // …then 12 requests, 9,000 prompt and 3,000 generated tokens are served.
    *metrics.lock().unwrap() = vllm(9_000, 3_000, 12);
    let (_, requests, input, output) = wait("the work's window", &|(_, _, i, _)| i >= 9_000).await;
    assert_eq!((requests, input, output), (12, 9_000, 3_000), "counted once, as deltas");

    // The gateway attributes 4 of those requests (3,000 + 1,000 tokens) to nlp-research.
    let records: Vec<String> = (0..4)
        .map(|i| {
            json!({"record_id": format!("scrape-{i}"), "endpoint": "llm-scrape", "model": "Qwen/Qwen2.5-0.5B-Instruct",
                   "tenant": "nlp-research", "started_at": now.format(&Rfc3339).unwrap(),
                   "input_tokens": 750, "output_tokens": 250})
            .to_string()
        })
        .collect();
    let r = http
        .post(format!("{base}/api/v1/usage/records"))
        .bearer_auth(&agent_token)
        .header("content-type", "application/x-ndjson")
        .body(records.join("\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let r = http
        .get(format!("{base}/api/v1/ledger?period={period}&term=service&per_page=500"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ledger: Value = r.json().await.unwrap();
    let remainder = ledger["notes"]["unattributed_service"]
        .as_array()
        .and_then(|a| a.iter().find(|u| u["endpoint"] == "llm-scrape"))
        .unwrap_or_else(|| panic!("no remainder for llm-scrape: {:#}", ledger["notes"]))
        .clone();
    // 12 − 4 requests, 9,000 − 3,000 input and 3,000 − 1,000 output tokens are nobody's.
    assert_eq!(
        (remainder["requests"].as_u64(), remainder["input_tokens"].as_u64(), remainder["output_tokens"].as_u64()),
        (Some(8), Some(6_000), Some(2_000)),
        "{remainder}"
    );
    let line = ledger["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["line_id"].as_str().unwrap_or_default().ends_with("/nlp-research/llm-scrape"))
        .unwrap_or_else(|| panic!("no service line for nlp-research: {ledger:#}"))
        .clone();
    // The tenant's share is a third (4,000 of 12,000 weighted tokens); with the remainder it is the whole cost.
    let explanation = line["explanation"].as_str().unwrap();
    assert!(explanation.contains("0.004000 of 0.012000 million weighted tokens"), "{explanation}");
    let cents = |s: &str| s.replace([',', '.'], "").parse::<i64>().unwrap();
    let cost = explanation.split("of its cost ").nth(1).and_then(|s| s.split(' ').next()).unwrap();
    let (tenant, rest) = (cents(line["amount"].as_str().unwrap()), cents(remainder["amount"].as_str().unwrap()));
    assert!(tenant > 0 && rest > 0, "{line} {remainder}");
    assert_eq!(tenant + rest, cents(cost), "the tenant's line and the remainder add up to the endpoint's cost");

    // The training job advances: its pod's annotation goes from 100 to 400 steps; the analytics show 300 steps
    // over its pod's GPU-hours.
    kube.apply("pods", trainer("400")).unwrap();
    let t = Instant::now();
    let row = loop {
        let v: Value = http
            .get(format!("{base}/api/v1/analytics/training?period={period}"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let row = v["workloads"].as_array().and_then(|w| w.iter().find(|r| r["workload"] == "llm-pretrain").cloned());
        if let Some(row) = row.filter(|r| r["steps"] == 300) {
            break row;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "training progress never arrived: {v:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(row["namespace"], "serving");
    let hours: f64 = row["gpu_hours"].as_str().unwrap().parse().unwrap();
    assert!(hours > 0.9, "the job's pod held its GPU for about an hour: {row}");
    let _ = std::fs::remove_dir_all(&dir);
}
