//! A stand-in for the server's ingest endpoint (`POST /api/v1/ingest/batches`) whose answers a test scripts:
//! it records every batch it is sent (decompressed with the system's `gzip`) and answers what the test's
//! policy says, so delivery can be tested against 5xx, 429 and 422 without the real server.

use std::{
    io::Write,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
};

use anyhow::{Context, Result};
use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};

/// What the stub answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with a `BatchAck` saying every fact was received and stored.
    Ack,
    /// Any other answer: status, extra headers, body (sent as `application/problem+json`).
    Status {
        /// HTTP status.
        status: u16,
        /// Extra headers, e.g. `("retry-after", "0")`.
        headers: Vec<(&'static str, String)>,
        /// Body.
        body: String,
    },
}

/// One request the stub received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The `Authorization` header.
    pub authorization: String,
    /// The batch's facts' `event_id`s, in order.
    pub event_ids: Vec<String>,
    /// The status the stub answered.
    pub status: u16,
}

/// Decides the answer from the request's number (0-based) and its event IDs.
pub type Policy = Arc<dyn Fn(usize, &[String]) -> Reply + Send + Sync>;

#[derive(Clone)]
struct StubState {
    policy: Policy,
    received: Arc<Mutex<Vec<Received>>>,
}

/// The running stub; stops when dropped.
pub struct StubIngest {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StubIngest {
    /// Starts the stub on a free loopback port.
    pub async fn start(policy: Policy) -> Result<Self> {
        let received = Arc::new(Mutex::new(Vec::new()));
        let state = StubState { policy, received: received.clone() };
        let app = Router::new().route("/api/v1/ingest/batches", post(ingest)).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { base, received, task })
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for StubIngest {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn ingest(State(state): State<StubState>, headers: HeaderMap, body: Bytes) -> Response {
    let batch = match decode(&headers, &body) {
        Ok(b) => b,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("stub cannot read the batch: {e:#}")).into_response();
        }
    };
    let event_ids: Vec<String> = batch["facts"]
        .as_array()
        .map(|facts| facts.iter().map(|f| f["event_id"].as_str().unwrap_or_default().to_string()).collect())
        .unwrap_or_default();
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let Ok(mut received) = state.received.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let reply = (state.policy)(received.len(), &event_ids);
    let (status, response) = match reply {
        Reply::Ack => {
            let ack = json!({"received": event_ids.len(), "stored": event_ids.len(), "flagged": []});
            (200, axum::Json(ack).into_response())
        }
        Reply::Status { status, headers, body } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = (code, body).into_response();
            let h = response.headers_mut();
            h.insert("content-type", HeaderValue::from_static("application/problem+json"));
            for (k, v) in headers {
                if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(&v)) {
                    h.insert(k, v);
                }
            }
            (status, response)
        }
    };
    received.push(Received { authorization, event_ids, status });
    response
}

fn decode(headers: &HeaderMap, body: &[u8]) -> Result<Value> {
    let gzipped = headers.get("content-encoding").is_some_and(|v| v.as_bytes() == b"gzip");
    let json = if gzipped { gunzip(body)? } else { body.to_vec() };
    Ok(serde_json::from_slice(&json)?)
}

/// Decompresses with the system's `gzip` (the test crate has no compression library of its own).
fn gunzip(body: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("running gzip")?;
    let mut stdin = child.stdin.take().context("gzip stdin")?;
    let input = body.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer.join().map_err(|_| anyhow::anyhow!("gzip writer panicked"))??;
    anyhow::ensure!(out.status.success(), "gzip -dc failed");
    Ok(out.stdout)
}
