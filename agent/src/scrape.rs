//! The `cluster` mode's model-server scraping: pods annotated `gpuledger.io/modelserver` (see
//! [`crate::metrics::discovery`]) are scraped every window; the difference between two scrapes of a pod's model is
//! one `endpoint_totals` fact (what the server counted, all tenants together). The server reconciles those totals
//! with the tenants' usage (gateway records or per-tenant facts) and reports the unattributed remainder.
//!
//! [`Scraper`] is pure but for [`Scraper::scrape_all`]: targets come from pod events, each scrape's text goes
//! through [`Scraper::observe`], so the window arithmetic is tested without a network.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use gpuledger_core::wire::{EndpointTotalsFact, Fact, FactBody, event_id};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::{OffsetDateTime, UtcOffset, format_description::well_known::Rfc3339};

use crate::k8s::LabelKeys;
use crate::metrics::discovery::{DiscoveryError, ScrapeTarget, scrape_target};
use crate::metrics::modelserver::{self, ModelServerSnapshot, ReadOptions, UsageError};
use crate::metrics::prom;

/// Why one scrape gave no facts.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The metrics could not be fetched.
    #[error("{pod}: GET {url}: {reason}")]
    Fetch {
        /// `namespace/name`.
        pod: String,
        /// What was fetched.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// The metrics text is not Prometheus text exposition.
    #[error("{pod}: {url} is not Prometheus text: {reason}")]
    Parse {
        /// `namespace/name`.
        pod: String,
        /// What was fetched.
        url: String,
        /// The parser's message.
        reason: String,
    },
    /// The scrape names no model of the declared server kind.
    #[error("{pod}: {url} has no {server} metrics")]
    NoMetrics {
        /// `namespace/name`.
        pod: String,
        /// What was fetched.
        url: String,
        /// The declared server kind.
        server: &'static str,
    },
    /// Two scrapes of a model gave no window (e.g. Triton: no token counters).
    #[error("{pod}: model {model}: {source}")]
    Window {
        /// `namespace/name`.
        pod: String,
        /// The model.
        model: String,
        /// Why.
        source: UsageError,
    },
}

/// The pods to scrape and each pod's model's previous scrape.
#[derive(Debug, Default)]
pub struct Scraper {
    keys: LabelKeys,
    /// By `namespace/name`.
    targets: BTreeMap<String, ScrapeTarget>,
    /// (pod, model) → the previous scrape and when it was taken.
    previous: BTreeMap<(String, String), (ModelServerSnapshot, OffsetDateTime)>,
    /// Pod → (UID, URL) of the process the baselines were taken from.
    identity: BTreeMap<String, (Option<String>, String)>,
}

/// The longest gap a saved baseline may cover after an agent restart: beyond it the first scrape starts a new
/// baseline, so a long outage's work is not dated at its start (possibly in an already closed month).
pub const MAX_BASELINE_AGE: time::Duration = time::Duration::hours(1);

/// One saved baseline (`SPOOL_DIR/scrape.json`).
#[derive(Debug, Serialize, Deserialize)]
struct SavedBaseline {
    pod: String,
    uid: Option<String>,
    url: String,
    #[serde(with = "time::serde::rfc3339")]
    taken_at: OffsetDateTime,
    snapshot: ModelServerSnapshot,
}

impl Scraper {
    /// A scraper reading endpoint and model names with the agent's attribution keys.
    pub fn new(keys: LabelKeys) -> Self {
        Self { keys, ..Self::default() }
    }

    /// A scraper that continues from the baselines saved at `path` by [`Scraper::save`] (an agent restart then
    /// loses no window), keeping those at most [`MAX_BASELINE_AGE`] old at `now`. A missing file is a fresh start;
    /// an unreadable one is logged and ignored.
    pub fn load(keys: LabelKeys, path: &Path, now: OffsetDateTime) -> Self {
        let mut scraper = Self::new(keys);
        let read = match std::fs::read(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            r => r.map_err(|e| e.to_string()).and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string())),
        };
        let saved: Vec<SavedBaseline> = read.unwrap_or_else(|e| {
            tracing::warn!(path = %path.display(), error = %e, "scrape baselines unreadable; starting afresh");
            Vec::new()
        });
        for b in saved.into_iter().filter(|b| now - b.taken_at <= MAX_BASELINE_AGE && b.taken_at <= now) {
            scraper.identity.insert(b.pod.clone(), (b.uid, b.url));
            scraper.previous.insert((b.pod, b.snapshot.model.clone()), (b.snapshot, b.taken_at));
        }
        scraper
    }

    /// Saves the baselines to `path` (written to a temporary file, then renamed: a crash leaves the old file).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let saved: Vec<SavedBaseline> = self
            .previous
            .iter()
            .filter_map(|((pod, _), (snapshot, taken_at))| {
                let (uid, url) = self.identity.get(pod)?.clone();
                Some(SavedBaseline { pod: pod.clone(), uid, url, taken_at: *taken_at, snapshot: snapshot.clone() })
            })
            .collect();
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&saved).map_err(std::io::Error::other)?)?;
        std::fs::rename(&tmp, path)
    }

    /// The pods scraped now, by `namespace/name`.
    pub fn targets(&self) -> impl Iterator<Item = (&String, &ScrapeTarget)> {
        self.targets.iter()
    }

    /// A pod was added, changed or deleted: it becomes, stays or stops being a target. A pod that stops (deleted,
    /// no longer running, annotation removed) forgets its previous scrapes: a later pod of the same name starts a
    /// new baseline rather than diffing against another process's counters.
    pub fn on_pod(&mut self, pod: &Value, deleted: bool) -> Result<(), DiscoveryError> {
        let meta = &pod["metadata"];
        let key = format!("{}/{}", meta["namespace"].as_str().unwrap_or("-"), meta["name"].as_str().unwrap_or("-"));
        let target = if deleted { Ok(None) } else { scrape_target(pod, &self.keys) };
        match target {
            Ok(Some(t)) => {
                // A new pod UID or URL under the same name is another process: start again.
                if self.identity.get(&key).is_some_and(|(uid, url)| *uid != t.pod_uid || *url != t.url) {
                    self.forget(&key);
                }
                self.targets.insert(key, t);
                Ok(())
            }
            Ok(None) => {
                self.forget(&key);
                Ok(())
            }
            Err(e) => {
                self.forget(&key);
                Err(e)
            }
        }
    }

    fn forget(&mut self, key: &str) {
        self.targets.remove(key);
        self.identity.remove(key);
        self.previous.retain(|(pod, _), _| pod != key);
    }

    /// One scrape of a target, taken at `now`: an `endpoint_totals` fact per model seen in the previous scrape of
    /// this pod too (the first scrape is the baseline and gives none). The scrape becomes the next baseline.
    pub fn observe(&mut self, key: &str, text: &str, now: OffsetDateTime) -> Result<Vec<Fact>, Vec<ScrapeError>> {
        let Some(target) = self.targets.get(key).cloned() else {
            return Ok(Vec::new());
        };
        let exposition = prom::parse(text).map_err(|e| {
            vec![ScrapeError::Parse { pod: key.to_owned(), url: target.url.clone(), reason: e.to_string() }]
        })?;
        let options = ReadOptions { server: Some(target.server), model: target.model.clone() };
        let snapshots = modelserver::read(&exposition.samples, &options);
        if snapshots.is_empty() {
            return Err(vec![ScrapeError::NoMetrics {
                pod: key.to_owned(),
                url: target.url.clone(),
                server: target.server.name(),
            }]);
        }
        let mut facts = Vec::new();
        let mut errors = Vec::new();
        let seen: BTreeSet<String> = snapshots.iter().map(|s| s.model.clone()).collect();
        for later in snapshots {
            let slot = (key.to_owned(), later.model.clone());
            if let Some((earlier, then)) = self.previous.get(&slot) {
                match modelserver::window_totals(earlier, *then, &later, now) {
                    Ok(w) => facts.push(totals_fact(&target.endpoint, key, &w, now)),
                    Err(source) => {
                        errors.push(ScrapeError::Window { pod: key.to_owned(), model: later.model.clone(), source })
                    }
                }
            }
            self.previous.insert(slot, (later, now));
        }
        self.identity.insert(key.to_owned(), (target.pod_uid.clone(), target.url.clone()));
        // A model no longer served by this pod has no next window.
        self.previous.retain(|(pod, model), _| pod != key || seen.contains(model));
        if facts.is_empty() && !errors.is_empty() {
            Err(errors)
        } else {
            for e in &errors {
                tracing::warn!(error = %e, "model skipped");
            }
            Ok(facts)
        }
    }

    /// Fetches every target's metrics (concurrently, each within `timeout`) and returns the facts of this window
    /// and what went wrong, per pod. A failed fetch keeps the pod's baseline: the next success covers both windows.
    pub async fn scrape_all(&mut self, client: &reqwest::Client, timeout: Duration) -> (Vec<Fact>, Vec<ScrapeError>) {
        let fetches = self.targets.iter().map(|(key, t)| {
            let (key, url) = (key.clone(), t.url.clone());
            async move {
                let body = async {
                    let resp = client.get(&url).timeout(timeout).send().await.map_err(|e| e.to_string())?;
                    let status = resp.status();
                    if !status.is_success() {
                        return Err(format!("HTTP {status}"));
                    }
                    read_bounded(resp, prom::MAX_BODY_BYTES).await
                }
                .await;
                (key, url, body, crate::clock::now())
            }
        });
        let results = futures::future::join_all(fetches).await;
        let (mut facts, mut errors) = (Vec::new(), Vec::new());
        for (key, url, body, at) in results {
            match body {
                Ok(text) => match self.observe(&key, &text, at) {
                    Ok(f) => facts.extend(f),
                    Err(e) => errors.extend(e),
                },
                Err(reason) => errors.push(ScrapeError::Fetch { pod: key, url, reason }),
            }
        }
        (facts, errors)
    }
}

/// The `endpoint_totals` fact of one pod's model's window; event ID
/// `endpoint-totals/<endpoint>/<pod>/<model>/<window start>`, so a window is stored once however often it is sent.
pub fn totals_fact(endpoint: &str, pod: &str, w: &modelserver::WindowTotals, observed_at: OffsetDateTime) -> Fact {
    let utc = w.window_start.to_offset(UtcOffset::UTC);
    let start = utc.format(&Rfc3339).unwrap_or_else(|_| utc.unix_timestamp().to_string());
    Fact {
        event_id: event_id("endpoint-totals", &[endpoint, pod, &w.model, &start]),
        observed_at,
        body: FactBody::EndpointTotals(EndpointTotalsFact {
            endpoint: endpoint.to_owned(),
            model: w.model.clone(),
            server: w.server.name().to_owned(),
            pod: pod.to_owned(),
            window_start: w.window_start,
            window_end: w.window_end,
            requests: w.counts.requests,
            input_tokens: w.counts.input_tokens,
            output_tokens: w.counts.output_tokens,
            ttft_ms_sum: w.ttft_ms_sum.zip(w.ttft_count).map(|(s, _)| s),
            ttft_count: w.ttft_ms_sum.zip(w.ttft_count).map(|(_, c)| c),
            queue_depth: w.queue_depth.filter(|q| q.is_finite() && *q >= 0.0),
            restarted: w.restarted,
        }),
    }
}

/// A response body as text, refused once it passes `max` bytes (a model server's metrics are a few hundred KiB;
/// a broken or hostile one must not make the agent hold gigabytes).
pub async fn read_bounded(mut resp: reqwest::Response, max: usize) -> Result<String, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > max {
            return Err(format!("the metrics are larger than {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|e| format!("the metrics are not UTF-8: {e}"))
}
