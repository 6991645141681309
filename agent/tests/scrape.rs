//! The cluster agent's model-server scraping over real HTTP: a pod object (a real live pod from the fixtures,
//! annotated and pointed at a local listener) becomes a target, the listener serves real vLLM metric text whose
//! counters move between scrapes, and each window becomes one `endpoint_totals` fact with the counter deltas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use gpuledger_agent::{inspect::read_documents, k8s::LabelKeys, scrape::Scraper};
use gpuledger_core::wire::FactBody;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

fn fixture(dir: &str, name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures").join(dir).join(name);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (shared/ must sit beside the repository)", p.display()))
}

/// The real vLLM V1 scrape (every counter 0) with some counters set.
fn vllm(prompt: u64, generation: u64, stop: u64, abort: u64, ttft_sum: f64, ttft_count: u64, waiting: u64) -> String {
    let m = r#"model_name="Qwen/Qwen2.5-0.5B-Instruct"}"#;
    let mut text = fixture("modelserver", "vllm_v1_qwen2.5-0.5b_kops.txt");
    for (series, value) in [
        (format!(r#"vllm:prompt_tokens_total{{engine="0",{m}"#), prompt.to_string()),
        (format!(r#"vllm:generation_tokens_total{{engine="0",{m}"#), generation.to_string()),
        (format!(r#"vllm:request_success_total{{engine="0",finished_reason="stop",{m}"#), stop.to_string()),
        (format!(r#"vllm:request_success_total{{engine="0",finished_reason="abort",{m}"#), abort.to_string()),
        (format!(r#"vllm:time_to_first_token_seconds_sum{{engine="0",{m}"#), ttft_sum.to_string()),
        (format!(r#"vllm:time_to_first_token_seconds_count{{engine="0",{m}"#), ttft_count.to_string()),
        (format!(r#"vllm:num_requests_waiting{{engine="0",{m}"#), waiting.to_string()),
    ] {
        let old = format!("{series} 0.0\n");
        assert!(text.contains(&old), "fixture has no {series}");
        text = text.replace(&old, &format!("{series} {value}\n"));
    }
    text
}

/// A minimal HTTP/1.1 server answering every request with the current text (or 503 when it is `None`).
async fn serve(body: Arc<Mutex<Option<String>>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = sock.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let request = String::from_utf8_lossy(&got).into_owned();
                assert!(request.starts_with("GET /metrics HTTP/1.1"), "{request}");
                let current = body.lock().unwrap().clone();
                let response = match current {
                    Some(text) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\
                         connection: close\r\n\r\n{text}",
                        text.len()
                    ),
                    None => "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
                };
                sock.write_all(response.as_bytes()).await.unwrap();
                sock.shutdown().await.ok();
            });
        }
    });
    port
}

/// The real live pod, annotated as a vLLM server of endpoint `llm-shared` listening on `port` of loopback.
fn pod(port: u16) -> Value {
    let mut pod = read_documents(&fixture("k8s", "pod_live_runai_mig_1g5gb.yaml")).unwrap().remove(0);
    pod["metadata"]["annotations"]["gpuledger.io/modelserver"] = json!("vllm");
    pod["metadata"]["annotations"]["gpuledger.io/metrics-port"] = json!(port.to_string());
    pod["metadata"]["labels"]["gpuledger.io/endpoint"] = json!("llm-shared");
    pod["status"]["podIP"] = json!("127.0.0.1");
    pod
}

#[tokio::test]
async fn each_window_between_two_scrapes_is_one_endpoint_totals_fact() {
    let body = Arc::new(Mutex::new(Some(vllm(0, 0, 0, 0, 0.0, 0, 0))));
    let port = serve(body.clone()).await;
    let pod = pod(port);
    let key =
        format!("{}/{}", pod["metadata"]["namespace"].as_str().unwrap(), pod["metadata"]["name"].as_str().unwrap());
    let mut scraper = Scraper::new(LabelKeys::default());
    scraper.on_pod(&pod, false).unwrap();
    let targets: Vec<String> = scraper.targets().map(|(k, t)| format!("{k} {}", t.url)).collect();
    assert_eq!(targets, [format!("{key} http://127.0.0.1:{port}/metrics")]);
    let client = reqwest::Client::new();
    let timeout = Duration::from_secs(5);

    // The first scrape is the baseline: no window yet.
    let (facts, errors) = scraper.scrape_all(&client, timeout).await;
    assert!(facts.is_empty() && errors.is_empty(), "{facts:?} {errors:?}");

    // Work happens: 1,200 prompt and 300 generated tokens, 4 finished + 1 aborted request, TTFT 0.5 s over 5.
    *body.lock().unwrap() = Some(vllm(1_200, 300, 4, 1, 0.5, 5, 2));
    let (facts, errors) = scraper.scrape_all(&client, timeout).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(facts.len(), 1);
    let FactBody::EndpointTotals(t) = &facts[0].body else { panic!("{:?}", facts[0]) };
    assert_eq!(
        (t.endpoint.as_str(), t.model.as_str(), t.server.as_str()),
        ("llm-shared", "Qwen/Qwen2.5-0.5B-Instruct", "vllm")
    );
    assert_eq!(t.pod, key);
    assert_eq!((t.requests, t.input_tokens, t.output_tokens), (5, 1_200, 300));
    assert_eq!((t.ttft_ms_sum, t.ttft_count, t.queue_depth), (Some(500), Some(5), Some(2.0)));
    assert!(!t.restarted && t.window_end > t.window_start);
    let first_end = t.window_end;
    // On the wire it is the `endpoint_totals` kind.
    assert_eq!(serde_json::to_value(&facts[0]).unwrap()["kind"], "endpoint_totals");

    // The server is unreachable for a window: an error naming the pod, and the baseline is kept…
    *body.lock().unwrap() = None;
    let (facts, errors) = scraper.scrape_all(&client, timeout).await;
    assert!(facts.is_empty());
    assert_eq!(errors.len(), 1);
    assert!(errors[0].to_string().contains(&key) && errors[0].to_string().contains("503"), "{}", errors[0]);

    // …so the next success covers both windows: the deltas since the last good scrape.
    *body.lock().unwrap() = Some(vllm(2_000, 500, 7, 1, 0.8, 8, 0));
    let (facts, errors) = scraper.scrape_all(&client, timeout).await;
    assert!(errors.is_empty(), "{errors:?}");
    let FactBody::EndpointTotals(t) = &facts[0].body else { panic!() };
    assert_eq!((t.requests, t.input_tokens, t.output_tokens), (3, 800, 200));
    assert_eq!(t.window_start, first_end);
    assert_eq!((t.ttft_ms_sum, t.ttft_count), (Some(300), Some(3)));

    // The server restarts (counters back near zero): the later values are the window's work.
    *body.lock().unwrap() = Some(vllm(100, 10, 1, 0, 0.1, 1, 0));
    let (facts, _) = scraper.scrape_all(&client, timeout).await;
    let FactBody::EndpointTotals(t) = &facts[0].body else { panic!() };
    assert!(t.restarted);
    assert_eq!((t.requests, t.input_tokens, t.output_tokens), (1, 100, 10));

    // Text that is not Prometheus exposition is an error, not a zero.
    *body.lock().unwrap() = Some("<html>login</html>".into());
    let (facts, errors) = scraper.scrape_all(&client, timeout).await;
    assert!(facts.is_empty());
    assert!(errors[0].to_string().contains("not Prometheus text"), "{}", errors[0]);

    // The pod is deleted: no longer scraped.
    scraper.on_pod(&pod, true).unwrap();
    assert_eq!(scraper.targets().count(), 0);
    let (facts, errors) = scraper.scrape_all(&client, timeout).await;
    assert!(facts.is_empty() && errors.is_empty());
}

#[tokio::test]
async fn a_pod_that_is_not_running_or_badly_annotated_is_not_scraped() {
    let mut scraper = Scraper::new(LabelKeys::default());
    let mut pending = pod(9);
    pending["status"]["phase"] = json!("Pending");
    scraper.on_pod(&pending, false).unwrap();
    assert_eq!(scraper.targets().count(), 0);

    let mut bad = pod(9);
    bad["metadata"]["annotations"]["gpuledger.io/metrics-port"] = json!("http");
    let e = scraper.on_pod(&bad, false).unwrap_err();
    assert!(e.to_string().contains("gpuledger.io/metrics-port"), "{e}");
    assert_eq!(scraper.targets().count(), 0);

    // Running and well annotated: a target; then its annotation is removed: not any more.
    let good = pod(9);
    scraper.on_pod(&good, false).unwrap();
    assert_eq!(scraper.targets().count(), 1);
    let mut plain = good.clone();
    plain["metadata"]["annotations"].as_object_mut().unwrap().remove("gpuledger.io/modelserver");
    scraper.on_pod(&plain, false).unwrap();
    assert_eq!(scraper.targets().count(), 0);
}

#[tokio::test]
async fn baselines_survive_an_agent_restart_but_not_another_pod_or_a_long_outage() {
    let body = Arc::new(Mutex::new(Some(vllm(100, 10, 1, 0, 0.1, 1, 0))));
    let port = serve(body.clone()).await;
    let pod = pod(port);
    let client = reqwest::Client::new();
    let timeout = Duration::from_secs(5);
    let dir = std::env::temp_dir().join(format!("gl-scrape-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("scrape.json");

    // The baseline, saved; then the agent "restarts" and the server does work meanwhile.
    let mut first = Scraper::new(LabelKeys::default());
    first.on_pod(&pod, false).unwrap();
    let (facts, _) = first.scrape_all(&client, timeout).await;
    assert!(facts.is_empty());
    first.save(&state).unwrap();
    drop(first);
    *body.lock().unwrap() = Some(vllm(700, 110, 6, 0, 0.6, 6, 0));

    let now = time::OffsetDateTime::now_utc();
    let mut again = Scraper::load(LabelKeys::default(), &state, now);
    again.on_pod(&pod, false).unwrap();
    let (facts, errors) = again.scrape_all(&client, timeout).await;
    assert!(errors.is_empty(), "{errors:?}");
    let FactBody::EndpointTotals(t) = &facts[0].body else { panic!("{facts:?}") };
    assert_eq!((t.requests, t.input_tokens, t.output_tokens), (5, 600, 100), "the work across the restart");

    // Another pod under the same name (new UID): its counters are not diffed against the old process's.
    again.save(&state).unwrap();
    let mut other = pod.clone();
    other["metadata"]["uid"] = json!("00000000-0000-4000-8000-00000000ffff");
    let mut third = Scraper::load(LabelKeys::default(), &state, now);
    third.on_pod(&other, false).unwrap();
    let (facts, _) = third.scrape_all(&client, timeout).await;
    assert!(facts.is_empty(), "a new baseline: {facts:?}");

    // A baseline older than the limit is not used either.
    let late = Scraper::load(LabelKeys::default(), &state, now + gpuledger_agent::scrape::MAX_BASELINE_AGE * 2);
    let mut late = late;
    late.on_pod(&pod, false).unwrap();
    let (facts, _) = late.scrape_all(&client, timeout).await;
    assert!(facts.is_empty(), "{facts:?}");

    // A damaged file is a fresh start, not an error.
    std::fs::write(&state, "{not json").unwrap();
    let mut fresh = Scraper::load(LabelKeys::default(), &state, now);
    fresh.on_pod(&pod, false).unwrap();
    let (facts, errors) = fresh.scrape_all(&client, timeout).await;
    assert!(facts.is_empty() && errors.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
