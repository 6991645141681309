//! The network between the agents and the server: a loopback HTTP proxy that, as the fault schedule says, passes,
//! refuses (a load balancer's 502 with no server behind it), holds requests and times them out (504), delays,
//! duplicates (the server gets a batch twice), cuts answers (the server stored the batch, the agent never gets a
//! readable acknowledgement) — and records, for the checks, every batch whose acknowledgement it relayed intact.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result};
use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, Method, StatusCode},
    response::{IntoResponse, Response},
};
use gpuledger_core::wire::{Batch, FactBody};

use super::rng::Rng;

/// What the network does to each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every request passes.
    Pass,
    /// Nothing reaches the server: 502 at once.
    Down,
    /// Requests hang for a while, then 504 (a silent partition).
    Blackhole,
    /// Some requests are delayed, some refused, some sent twice, some answers cut, out of order between agents.
    Flaky,
}

/// A fact the server acknowledged and the agent received the acknowledgement for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Acked {
    /// Stored in `allocation_events` under its event ID (allocations, owners, nodes, devices, gaps).
    Event(String),
    /// A telemetry window: GPU UUID, GPU instance (-1: whole GPU), window start (Unix seconds).
    Window(String, i64, i64),
    /// A per-process window: GPU UUID, window start.
    Processes(String, i64),
}

/// An ingest request as the agent sent it (for re-sending later).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Headers (authorization, content type and encoding).
    pub headers: HeaderMap,
    /// The body as sent (gzip).
    pub body: Bytes,
}

struct Shared {
    upstream: Mutex<String>,
    mode: Mutex<Mode>,
    rng: Mutex<Rng>,
    acked: Mutex<Vec<Acked>>,
    recorded: Mutex<Vec<Recorded>>,
    stats: Mutex<Stats>,
    client: reqwest::Client,
}

/// What the proxy did.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Requests passed through.
    pub passed: u64,
    /// Requests refused (502) or timed out (504) without reaching the server.
    pub refused: u64,
    /// Requests the server got twice.
    pub duplicated: u64,
    /// Answers cut after the server handled the request.
    pub cut: u64,
    /// Requests delayed.
    pub delayed: u64,
}

/// A running proxy.
#[derive(Clone)]
pub struct Proxy {
    /// `http://127.0.0.1:PORT`: where the agents send.
    pub url: String,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Starts a proxy to `upstream` (`http://127.0.0.1:PORT`), its randomness from `rng`.
    pub async fn start(upstream: &str, rng: Rng) -> Result<Self> {
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream.to_string()),
            mode: Mutex::new(Mode::Pass),
            rng: Mutex::new(rng),
            acked: Mutex::new(Vec::new()),
            recorded: Mutex::new(Vec::new()),
            stats: Mutex::new(Stats::default()),
            client: reqwest::Client::builder()
                .no_gzip()
                .timeout(Duration::from_secs(60))
                .build()
                .context("building the proxy's client")?,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let app = Router::new().fallback(forward).with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url: format!("http://{addr}"), shared })
    }

    /// From now on the network behaves as `mode`.
    pub fn set_mode(&self, mode: Mode) {
        if let Ok(mut m) = self.shared.mode.lock() {
            *m = mode;
        }
    }

    /// Every fact acknowledged so far.
    pub fn acked(&self) -> Vec<Acked> {
        self.shared.acked.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Every ingest request forwarded so far.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.shared.recorded.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// What the proxy did so far.
    pub fn stats(&self) -> Stats {
        self.shared.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Sends `batches` again, straight to the server, in the order given; the number the server acknowledged.
    pub async fn resend(&self, batches: &[Recorded]) -> usize {
        let mut ok = 0;
        for b in batches {
            if let Ok(r) = send(&self.shared, &Method::POST, "/api/v1/ingest/batches", &b.headers, b.body.clone()).await
                && r.0.is_success()
            {
                ok += 1;
            }
        }
        ok
    }
}

fn stat(shared: &Shared, f: impl FnOnce(&mut Stats)) {
    if let Ok(mut s) = shared.stats.lock() {
        f(&mut s);
    }
}

/// What to do with one request, drawn under `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Pass,
    Refuse,
    Hang(u64),
    Delay(u64),
    Duplicate,
    Cut,
}

fn action(shared: &Shared) -> Action {
    let mode = shared.mode.lock().map(|m| *m).unwrap_or(Mode::Pass);
    let Ok(mut rng) = shared.rng.lock() else { return Action::Pass };
    match mode {
        Mode::Pass => Action::Pass,
        Mode::Down => Action::Refuse,
        Mode::Blackhole => Action::Hang(rng.range(500, 3000) as u64),
        Mode::Flaky => match rng.range(0, 99) {
            0..=19 => Action::Refuse,
            20..=39 => Action::Delay(rng.range(50, 1500) as u64),
            40..=54 => Action::Duplicate,
            55..=69 => Action::Cut,
            _ => Action::Pass,
        },
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let ingest = parts.method == Method::POST && path.starts_with("/api/v1/ingest/batches");
    let act = action(&shared);
    match act {
        Action::Refuse => {
            stat(&shared, |s| s.refused += 1);
            return (StatusCode::BAD_GATEWAY, "no upstream").into_response();
        }
        Action::Hang(ms) => {
            stat(&shared, |s| s.refused += 1);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            return (StatusCode::GATEWAY_TIMEOUT, "upstream timed out").into_response();
        }
        Action::Delay(ms) => {
            stat(&shared, |s| s.delayed += 1);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Action::Duplicate | Action::Cut | Action::Pass => {}
    }
    if ingest && let Ok(mut r) = shared.recorded.lock() {
        r.push(Recorded { headers: parts.headers.clone(), body: body.clone() });
    }
    if act == Action::Duplicate {
        stat(&shared, |s| s.duplicated += 1);
        let _ = send(&shared, &parts.method, &path, &parts.headers, body.clone()).await;
    }
    let (status, headers, answer) = match send(&shared, &parts.method, &path, &parts.headers, body.clone()).await {
        Ok(r) => r,
        Err(_) => {
            stat(&shared, |s| s.refused += 1);
            return (StatusCode::BAD_GATEWAY, "upstream unreachable").into_response();
        }
    };
    if act == Action::Cut {
        stat(&shared, |s| s.cut += 1);
        // The server handled it; the agent gets half an answer.
        let half = answer.slice(..answer.len() / 2);
        let mut response = Response::new(Body::from(half));
        *response.status_mut() = status;
        return response;
    }
    stat(&shared, |s| s.passed += 1);
    if ingest && status.is_success() {
        record_acked(&shared, &body);
    }
    let mut response = Response::new(Body::from(answer));
    *response.status_mut() = status;
    for (k, v) in &headers {
        if k != "content-length" && k != "transfer-encoding" && k != "connection" {
            response.headers_mut().append(k, v.clone());
        }
    }
    response
}

async fn send(
    shared: &Shared,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, HeaderMap, Bytes)> {
    let upstream = shared.upstream.lock().map(|u| u.clone()).unwrap_or_default();
    let mut req = shared.client.request(method.clone(), format!("{upstream}{path}")).body(body);
    for (k, v) in headers {
        if k != "host" && k != "content-length" && k != "connection" {
            req = req.header(k, v);
        }
    }
    let r = req.send().await?;
    let status = r.status();
    let headers = r.headers().clone();
    let bytes = r.bytes().await?;
    Ok((status, headers, bytes))
}

/// Decodes an acknowledged batch (gzip JSON) and records its facts.
fn record_acked(shared: &Shared, body: &Bytes) {
    use std::io::Read;
    let mut json = Vec::new();
    let decoded = if body.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut json).map(|_| json)
    } else {
        Ok(body.to_vec())
    };
    let Ok(batch) = decoded.map_err(anyhow::Error::from).and_then(|j| Ok(serde_json::from_slice::<Batch>(&j)?)) else {
        return;
    };
    let Ok(mut acked) = shared.acked.lock() else { return };
    for f in batch.facts {
        acked.push(match &f.body {
            FactBody::Telemetry(t) => Acked::Window(
                t.gpu_uuid.clone(),
                t.gpu_instance_id.map_or(-1, i64::from),
                t.window_start.unix_timestamp(),
            ),
            FactBody::ProcessTelemetry(t) => Acked::Processes(t.gpu_uuid.clone(), t.window_start.unix_timestamp()),
            _ => Acked::Event(f.event_id.clone()),
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;

    use axum::{Json, routing::post};
    use serde_json::json;

    use super::*;

    fn gzip_batch(event: &str) -> Vec<u8> {
        let batch = json!({
            "wire_version": 1,
            "agent": {"version": "t", "mode": "cluster"},
            "facts": [{"event_id": event, "observed_at": "2026-11-02T00:00:00Z", "kind": "gap",
                       "from": "2026-11-01T00:00:00Z", "to": "2026-11-01T00:01:00Z", "dropped": 1}],
        });
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(batch.to_string().as_bytes()).unwrap();
        gz.finish().unwrap()
    }

    /// Only an acknowledgement relayed intact counts; a refused request or a cut answer does not.
    #[tokio::test]
    async fn acknowledged_batches_are_recorded_and_refusals_and_cut_answers_are_not() {
        let hits = Arc::new(Mutex::new(0u32));
        let h = hits.clone();
        let upstream = Router::new().route(
            "/api/v1/ingest/batches",
            post(move || {
                let h = h.clone();
                async move {
                    *h.lock().unwrap() += 1;
                    Json(json!({"received": 1, "stored": 1}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, upstream).await });
        let proxy = Proxy::start(&format!("http://{addr}"), Rng::new(1, 1)).await.unwrap();
        let client = reqwest::Client::new();
        let post = |event: &str| {
            client
                .post(format!("{}/api/v1/ingest/batches", proxy.url))
                .header("content-encoding", "gzip")
                .header("content-type", "application/json")
                .body(gzip_batch(event))
                .send()
        };
        let r = post("e-1").await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<serde_json::Value>().await.unwrap()["stored"], 1);
        assert_eq!(proxy.acked(), vec![Acked::Event("e-1".into())]);

        proxy.set_mode(Mode::Down);
        assert_eq!(post("e-2").await.unwrap().status(), 502);
        assert_eq!(*hits.lock().unwrap(), 1, "a refused request never reaches the server");

        // Flaky: over many requests, some are cut or refused; every acknowledged one reached the server.
        proxy.set_mode(Mode::Flaky);
        let mut intact = 0;
        for i in 0..60 {
            if let Ok(r) = post(&format!("f-{i}")).await
                && r.status() == 200
                && r.json::<serde_json::Value>().await.is_ok()
            {
                intact += 1;
            }
        }
        let st = proxy.stats();
        assert!(st.cut > 0 && st.refused > 1 && st.duplicated > 0, "{st:?}");
        assert_eq!(proxy.acked().len(), 1 + intact, "{st:?}");
        assert_eq!(proxy.recorded().len() as u64, 1 + 60 - (st.refused - 1));
        // Every forwarded request reached the server once, a duplicated one twice.
        assert_eq!(u64::from(*hits.lock().unwrap()), proxy.recorded().len() as u64 + st.duplicated);
    }
}
