//! Delivery: facts leave the spool in compressed batches and are acknowledged only after the server confirms
//! a durable commit. Connection errors, 5xx and 429 are retried with exponential backoff and full jitter;
//! 401/403 are retried too (a credential problem is fixed by an operator, and dropping facts would lose them);
//! a fact the server refuses as invalid goes to a dead-letter file with the server's reason, and the rest of
//! its batch is sent again.

use std::{
    collections::BTreeSet,
    io::Write,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use gpuledger_core::wire::{AgentInfo, Batch, BatchAck, Fact, WIRE_VERSION};
use rand::Rng;

use crate::spool::{Spool, SpoolError};

/// Where and how to deliver.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// Server base URL, e.g. `https://ledger.example.com`.
    pub server: String,
    /// The cluster credential (agent token).
    pub token: String,
    /// The cluster name to claim (checked by the server against the credential), if known.
    pub cluster: Option<String>,
    /// Who is sending.
    pub agent: AgentInfo,
    /// Most facts per batch.
    pub max_batch_facts: usize,
    /// Most payload bytes per batch (before compression).
    pub max_batch_bytes: u64,
    /// Facts the server refused, one JSON line each with the reason.
    pub dead_letter: PathBuf,
    /// First retry delay.
    pub backoff_min: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
}

/// What one delivery attempt did.
#[derive(Debug)]
pub enum Attempt {
    /// Nothing to send.
    Idle,
    /// The server stored the batch; the spool was acknowledged up to `up_to`.
    Delivered {
        /// The server's answer.
        ack: BatchAck,
        /// Highest sequence number acknowledged.
        up_to: u64,
        /// Facts in the batch.
        facts: usize,
    },
    /// Try again later.
    Retry {
        /// Why.
        reason: String,
        /// The server's `Retry-After`, if it gave one.
        after: Option<Duration>,
    },
    /// Facts were dead-lettered; send the rest at once.
    DeadLettered {
        /// How many.
        count: usize,
    },
}

/// Delivery failures that are not the server's answer (the spool or the dead-letter file).
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The spool failed.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// The dead-letter file could not be written.
    #[error("dead-letter file {path}: {source}")]
    DeadLetter {
        /// Its path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(String),
}

/// Sends the spool's facts to the server.
pub struct Sender {
    cfg: DeliveryConfig,
    client: reqwest::Client,
    /// Dead-lettered sequence numbers not yet covered by an acknowledgement.
    skipped: BTreeSet<u64>,
    /// Batch size after a 413 (halved each time).
    batch_limit: usize,
}

impl Sender {
    /// A sender with its own HTTP client.
    pub fn new(cfg: DeliveryConfig) -> Result<Self, DeliveryError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("gpuledger-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| DeliveryError::Client(e.to_string()))?;
        let batch_limit = cfg.max_batch_facts.max(1);
        Ok(Self { cfg, client, skipped: BTreeSet::new(), batch_limit })
    }

    /// Sends one batch of the oldest pending facts.
    pub async fn attempt(&mut self, spool: &Mutex<Spool>) -> Result<Attempt, DeliveryError> {
        let (raw, spool_state) = {
            let spool = lock(spool)?;
            let state = gpuledger_core::wire::SpoolState {
                pending_facts: spool.pending_count(),
                pending_bytes: spool.pending_bytes(),
                dropped_facts: spool.dropped_total(),
                disk_bytes: spool.disk_bytes(),
                max_bytes: spool.max_bytes(),
            };
            (spool.pending(self.batch_limit + self.skipped.len(), self.cfg.max_batch_bytes)?, state)
        };
        // A record that no longer parses as a fact (written by another version, or damaged in a way the checksum
        // did not catch) is set aside like a refused fact, so it can never block the spool.
        let mut pending = Vec::with_capacity(raw.len());
        for (seq, bytes) in raw {
            if self.skipped.contains(&seq) {
                continue;
            }
            // A tombstone (a fact compacted away when the spool was full, counted in a gap fact): nothing to send.
            if bytes.is_empty() {
                self.skipped.insert(seq);
                continue;
            }
            match serde_json::from_slice::<Fact>(&bytes) {
                Ok(fact) => pending.push((seq, fact)),
                Err(e) => {
                    self.dead_letter_raw(seq, &bytes, &e.to_string())?;
                    self.skipped.insert(seq);
                }
            }
        }
        let pending: Vec<(u64, Fact)> =
            pending.into_iter().filter(|(seq, _)| !self.skipped.contains(seq)).take(self.batch_limit).collect();
        if pending.is_empty() {
            // Only dead-lettered records left at the head: acknowledge them so the spool moves on.
            if let Some(&last) = self.skipped.iter().next_back() {
                lock(spool)?.ack(last)?;
                self.skipped.clear();
            }
            return Ok(Attempt::Idle);
        }
        let up_to = pending.iter().map(|(s, _)| *s).max().unwrap_or(0);
        let batch = Batch {
            wire_version: WIRE_VERSION,
            agent: gpuledger_core::wire::AgentInfo { spool: Some(spool_state), ..self.cfg.agent.clone() },
            cluster: self.cfg.cluster.clone(),
            facts: pending.iter().map(|(_, f)| f.clone()).collect(),
        };
        let body = match gzip(&batch) {
            Ok(b) => b,
            Err(e) => {
                return Ok(Attempt::Retry { reason: format!("encoding batch: {e}"), after: None });
            }
        };
        let url = format!("{}/api/v1/ingest/batches", self.cfg.server.trim_end_matches('/'));
        let response = self
            .client
            .post(&url)
            .bearer_auth(&self.cfg.token)
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(body)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                return Ok(Attempt::Retry { reason: format!("{url}: {e}"), after: None });
            }
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = response.text().await.unwrap_or_default();
        if status.is_success() {
            let ack: BatchAck = match serde_json::from_str(&text) {
                Ok(a) => a,
                Err(e) => {
                    return Ok(Attempt::Retry { reason: format!("unreadable acknowledgement: {e}"), after: None });
                }
            };
            // Acknowledge also the dead-lettered records this batch passes.
            let up_to = up_to.max(self.skipped.range(..=up_to).next_back().copied().unwrap_or(0));
            lock(spool)?.ack(up_to)?;
            self.skipped.retain(|s| *s > up_to);
            self.batch_limit = self.cfg.max_batch_facts.max(1);
            for f in &ack.flagged {
                tracing::warn!(event_id = %f.event_id, reason = %f.reason, "server flagged a fact");
            }
            return Ok(Attempt::Delivered { ack, up_to, facts: pending.len() });
        }
        let retry = |reason: String| Ok(Attempt::Retry { reason, after: retry_after });
        let code = status.as_u16();
        match code {
            429 | 500..=599 | 401 | 403 | 408 => return retry(format!("server answered {status}: {}", short(&text))),
            413 if pending.len() > 1 => {
                self.batch_limit = (pending.len() / 2).max(1);
                return Ok(Attempt::Retry {
                    reason: format!("batch too large; now {} facts", self.batch_limit),
                    after: Some(Duration::ZERO),
                });
            }
            // A validation refusal (422, 400) or one fact too large (413) is about the facts themselves.
            400 | 413 | 422 => {}
            // Any other answer (a proxy's 404, a 409, …) says nothing against the facts: keep and retry.
            _ => {
                tracing::error!(%status, body = %short(&text), "unexpected answer from the server; facts kept");
                return retry(format!("server answered {status}: {}", short(&text)));
            }
        }
        // The server names the offending fact (`facts[i]…`); only that one is set aside.
        let problem: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let index = problem["field"]
            .as_str()
            .and_then(|f| f.strip_prefix("facts["))
            .and_then(|f| f.split(']').next())
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|i| *i < pending.len());
        let rejected: Vec<&(u64, Fact)> = match index {
            Some(i) => vec![&pending[i]],
            // A single fact too large, or a batch of one refused as a whole.
            None if pending.len() == 1 || code == 413 => pending.iter().collect(),
            // A refusal of the envelope, not of a fact: not the facts' fault.
            None => return retry(format!("server refused the batch ({status}): {}", short(&text))),
        };
        self.dead_letter(&rejected, code, &problem, &text)?;
        for (seq, _) in &rejected {
            self.skipped.insert(*seq);
        }
        Ok(Attempt::DeadLettered { count: rejected.len() })
    }

    fn dead_letter_raw(&self, seq: u64, bytes: &[u8], reason: &str) -> Result<(), DeliveryError> {
        let path = &self.cfg.dead_letter;
        let err = |source| DeliveryError::DeadLetter { path: path.display().to_string(), source };
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(err)?;
        let line = serde_json::json!({
            "seq": seq,
            "reason": format!("spool record is not a fact: {reason}"),
            "record": String::from_utf8_lossy(bytes),
        });
        writeln!(file, "{line}").map_err(err)?;
        file.sync_data().map_err(err)?;
        tracing::error!(seq, %reason, "unreadable spool record dead-lettered");
        Ok(())
    }

    fn dead_letter(
        &self,
        rejected: &[&(u64, Fact)],
        status: u16,
        problem: &serde_json::Value,
        text: &str,
    ) -> Result<(), DeliveryError> {
        let path = &self.cfg.dead_letter;
        let err = |source| DeliveryError::DeadLetter { path: path.display().to_string(), source };
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(err)?;
        for (seq, fact) in rejected {
            let line = serde_json::json!({
                "seq": seq,
                "status": status,
                "reason": problem.get("detail").cloned().unwrap_or_else(|| serde_json::Value::from(short(text))),
                "field": problem.get("field"),
                "fact": fact,
            });
            writeln!(file, "{line}").map_err(err)?;
            tracing::error!(seq, event_id = %fact.event_id, status, reason = %line["reason"], "fact refused by the server; dead-lettered");
        }
        file.sync_data().map_err(err)?;
        Ok(())
    }

    /// Delivers until `stop` is set and the spool is drained (or `stop` is set while the server is unreachable),
    /// waking every `poll` to look for new facts.
    pub async fn run(mut self, spool: Arc<Mutex<Spool>>, stop: tokio::sync::watch::Receiver<bool>, poll: Duration) {
        let mut failures: u32 = 0;
        loop {
            let result = self.attempt(&spool).await;
            let wait = match result {
                Ok(Attempt::Delivered { facts, up_to, .. }) => {
                    failures = 0;
                    tracing::debug!(facts, up_to, "batch delivered");
                    Duration::ZERO
                }
                Ok(Attempt::DeadLettered { .. }) => Duration::ZERO,
                Ok(Attempt::Idle) => {
                    failures = 0;
                    if *stop.borrow() {
                        return;
                    }
                    poll
                }
                Ok(Attempt::Retry { reason, after }) => {
                    failures = failures.saturating_add(1);
                    let delay = after.unwrap_or_else(|| backoff(failures, self.cfg.backoff_min, self.cfg.backoff_max));
                    tracing::warn!(%reason, retry_in_ms = delay.as_millis() as u64, "delivery failed; will retry");
                    if *stop.borrow() && failures > 3 {
                        tracing::warn!("stopping with facts still in the spool; they are sent on the next start");
                        return;
                    }
                    delay
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::error!(error = %e, "delivery error");
                    backoff(failures, self.cfg.backoff_min, self.cfg.backoff_max)
                }
            };
            if !wait.is_zero() {
                let mut stop = stop.clone();
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }
}

fn lock(spool: &Mutex<Spool>) -> Result<std::sync::MutexGuard<'_, Spool>, DeliveryError> {
    spool.lock().map_err(|_| DeliveryError::Client("spool lock poisoned".into()))
}

/// Exponential backoff with full jitter: uniform in [0, min(max, min·2^failures)].
pub fn backoff(failures: u32, min: Duration, max: Duration) -> Duration {
    let ceiling = min.saturating_mul(2u32.saturating_pow(failures.min(20))).min(max);
    let millis = ceiling.as_millis().max(1) as u64;
    Duration::from_millis(rand::rng().random_range(0..=millis))
}

fn gzip(batch: &Batch) -> std::io::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    serde_json::to_writer(&mut enc, batch)?;
    enc.finish()
}

fn short(text: &str) -> String {
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn backoff_grows_and_stays_bounded() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(5));
        for failures in 0..30 {
            let d = backoff(failures, min, max);
            assert!(d <= max, "{failures}: {d:?}");
            assert!(d <= min * 2u32.saturating_pow(failures.min(20)), "{failures}: {d:?}");
        }
        // Jitter: not always the same value.
        let samples: BTreeSet<u128> = (0..50).map(|_| backoff(10, min, max).as_millis()).collect();
        assert!(samples.len() > 10, "{samples:?}");
    }
}
