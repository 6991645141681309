//! Model-server scrapes (vLLM, Triton) → per-model [`ModelServerSnapshot`]s: productive work.
//!
//! A snapshot is a plain serde struct that `inspect` prints as JSON. Two snapshots of one vLLM model, earlier and
//! later, become a `service_usage` fact for an endpoint and tenant with [`service_usage_from_snapshots`] (counter
//! deltas); [`service_usage_fact`] builds one from figures already known (a demo, a seeder, a gateway's counts).
//! Values are cumulative as the server reports them (counters since its start; gauges now); rates are the caller's
//! business. Series are summed over the labels a snapshot does not keep (vLLM `engine`, Triton `version`, failure
//! `reason`), so a data-parallel vLLM or a multi-version Triton model is one snapshot.
//!
//! vLLM (`vllm:` prefix, label `model_name`), as in the V1-engine fixture and the older V0 names that are the same:
//! `prompt_tokens_total` → input tokens, `generation_tokens_total` → output tokens, `request_success_total` by
//! `finished_reason` (`stop`, `length`, `repetition`, absent → ok; `abort`, `error` → failed), `num_requests_running`,
//! `num_requests_waiting`, the `time_to_first_token_seconds` histogram and the `request_queue_time_seconds`
//! histogram's sum and count. The V0-only throughput gauges (`avg_prompt_throughput_toks_per_s`,
//! `avg_generation_throughput_toks_per_s`) are rates over an unknown interval, not counts, and are ignored: V0 also
//! exports the token counters.
//!
//! Triton (label `model`): `nv_inference_request_success` / `nv_inference_request_failure`, `nv_inference_count`
//! (inferences, batch items included), `nv_inference_pending_request_count` → waiting, the
//! `nv_inference_first_response_histogram_ms` histogram (bucket rows may lack the `_bucket` suffix, as in Triton's
//! docs), queue time from the `nv_inference_queue_summary_us` summary's sum and count, else the
//! `nv_inference_queue_duration_us` counter (a sum without a count). Triton has no token counters.
//!
//! Older vLLM (V0 engine, up to 0.10): the same counters, plus `num_requests_swapped` (requests preempted to CPU:
//! part of the queue, kept as `swapped`), the deprecated `time_in_queue_requests` histogram (queue time when
//! `request_queue_time_seconds` is absent) and `e2e_request_latency_seconds` (its `_count`, finished requests, stands
//! in for the request count when `request_success_total` is absent, as in the oldest releases). The cache gauges
//! (`gpu_cache_usage_perc`, V1's `kv_cache_usage_perc`) are fractions, not counts, and are ignored.
//!
//! NVIDIA NIM for LLMs (`/v1/metrics`, label `model_name`, no prefix): the vLLM names without `vllm:`
//! (`prompt_tokens_total`, `generation_tokens_total`, `num_requests_running`, `num_requests_waiting`,
//! `time_to_first_token_seconds`, `e2e_request_latency_seconds`), `request_success_total` (finish reason stop or
//! length) and `request_failure_total`; `request_finish_total` by `finished_reason` is read only when neither of
//! those two is there.
//!
//! Hugging Face TGI (`tgi_` prefix, no model label: the model is the endpoint's, passed in [`ReadOptions::model`]):
//! `tgi_request_success` → ok, `tgi_request_failure` (by `err`) → failed, `tgi_request_count` → received,
//! the `_sum` of the per-request histograms `tgi_request_input_length` and `tgi_request_generated_tokens` → input
//! and output tokens, `tgi_queue_size` → waiting, `tgi_batch_current_size` → running, and
//! `tgi_request_queue_duration`'s sum and count → queue time. TGI exports no time-to-first-token metric.
//!
//! The metric names, their sources and what is confirmed are listed in `docs/agent.md`.

use std::collections::BTreeMap;

use gpuledger_core::wire::{Fact, FactBody, ServiceUsageFact, event_id};
use serde::{Deserialize, Serialize};
use time::{OffsetDateTime, UtcOffset, format_description::well_known::Rfc3339};

use super::prom::Sample;

/// Which model server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Server {
    /// vLLM.
    Vllm,
    /// NVIDIA Triton Inference Server.
    Triton,
    /// Hugging Face Text Generation Inference.
    Tgi,
    /// NVIDIA NIM for LLMs.
    Nim,
}

impl Server {
    /// Every server kind, in order.
    pub const ALL: [Server; 4] = [Server::Vllm, Server::Triton, Server::Tgi, Server::Nim];

    /// The lowercase name used in annotations, flags and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Server::Vllm => "vllm",
            Server::Triton => "triton",
            Server::Tgi => "tgi",
            Server::Nim => "nim",
        }
    }

    /// The kind named `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Server> {
        Server::ALL.into_iter().find(|s| s.name().eq_ignore_ascii_case(name.trim()))
    }
}

/// The model name given to TGI snapshots when the endpoint's configuration does not name one.
pub const UNKNOWN_MODEL: &str = "unknown";

/// How to read a scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Read only this server's metrics (default: every kind found, detected from the metric names).
    pub server: Option<Server>,
    /// The model a TGI server serves (TGI's metrics carry no model label); [`UNKNOWN_MODEL`] when `None`.
    /// Ignored for the other servers, whose metrics name their model.
    pub model: Option<String>,
}

/// A latency histogram, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// `(le, cumulative count)` in increasing `le`; the `+Inf` bucket is left out (its count is `count`), so the JSON
    /// has no infinity in it.
    pub buckets: Vec<(f64, f64)>,
    /// Sum of all observations, seconds.
    pub sum: Option<f64>,
    /// Number of observations.
    pub count: Option<f64>,
}

/// Accumulated durations, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DurationTotals {
    /// Total time, seconds.
    pub sum: f64,
    /// Number of requests it covers, when the server says.
    pub count: Option<f64>,
}

/// One model's productive-work figures from one scrape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelServerSnapshot {
    /// Which server.
    pub server: Server,
    /// Model name (`model_name` for vLLM and NIM, `model` for Triton, the endpoint's configuration for TGI).
    pub model: String,
    /// Prompt tokens processed (counter).
    pub input_tokens: Option<f64>,
    /// Tokens generated (counter).
    pub output_tokens: Option<f64>,
    /// Requests finished successfully (counter).
    pub requests_ok: Option<f64>,
    /// Requests failed or aborted (counter).
    pub requests_failed: Option<f64>,
    /// Inferences executed, batch items counted (Triton `nv_inference_count`).
    pub inferences: Option<f64>,
    /// Requests running now (gauge).
    pub running: Option<f64>,
    /// Requests waiting now (gauge).
    pub waiting: Option<f64>,
    /// Requests swapped out to CPU now (vLLM V0 gauge): waiting too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swapped: Option<f64>,
    /// Requests received, finished or not (TGI `tgi_request_count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_received: Option<f64>,
    /// Time to first token (vLLM) or first response (Triton).
    pub ttft: Option<Histogram>,
    /// Time requests spent queued.
    pub queue_time: Option<DurationTotals>,
}

impl ModelServerSnapshot {
    /// Queue depth now: requests waiting plus requests swapped out (vLLM V0), `None` when the server says neither.
    pub fn queue_depth(&self) -> Option<f64> {
        match (self.waiting, self.swapped) {
            (None, None) => None,
            (w, s) => Some(w.unwrap_or(0.0) + s.unwrap_or(0.0)),
        }
    }
}

#[derive(Debug, Default)]
struct Building {
    input_tokens: Option<f64>,
    output_tokens: Option<f64>,
    requests_ok: Option<f64>,
    requests_failed: Option<f64>,
    inferences: Option<f64>,
    running: Option<f64>,
    waiting: Option<f64>,
    ttft_buckets: Vec<(f64, f64)>,
    ttft_inf: Option<f64>,
    ttft_sum: Option<f64>,
    ttft_count: Option<f64>,
    queue_sum: Option<f64>,
    queue_count: Option<f64>,
    /// Triton's plain queue counter, used when there is no summary.
    queue_counter: Option<f64>,
    swapped: Option<f64>,
    requests_received: Option<f64>,
    /// NIM `request_finish_total` by reason: requests when there is no success/failure counter.
    finished_ok: Option<f64>,
    finished_failed: Option<f64>,
    /// `e2e_request_latency_seconds_count`: requests when there is no success counter at all.
    e2e_count: Option<f64>,
    /// vLLM V0's deprecated `time_in_queue_requests`: queue time when `request_queue_time_seconds` is absent.
    legacy_queue_sum: Option<f64>,
    legacy_queue_count: Option<f64>,
}

fn add(slot: &mut Option<f64>, v: f64) {
    if v.is_finite() {
        *slot = Some(slot.unwrap_or(0.0) + v);
    }
}

impl Building {
    /// A histogram bucket; `scale` converts `le` to seconds.
    fn bucket(&mut self, s: &Sample, scale: f64) {
        let Some(le) = s.labels.get("le").and_then(|le| le.trim().parse::<f64>().ok()) else {
            return;
        };
        if le == f64::INFINITY {
            add(&mut self.ttft_inf, s.value);
        } else if le.is_finite() && s.value.is_finite() {
            let le = le * scale;
            match self.ttft_buckets.iter_mut().find(|(b, _)| *b == le) {
                Some((_, count)) => *count += s.value,
                None => self.ttft_buckets.push((le, s.value)),
            }
        }
    }

    fn finish(mut self, server: Server, model: String) -> ModelServerSnapshot {
        self.ttft_buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let ttft = (!self.ttft_buckets.is_empty()
            || self.ttft_inf.is_some()
            || self.ttft_sum.is_some()
            || self.ttft_count.is_some())
        .then(|| Histogram {
            buckets: self.ttft_buckets,
            sum: self.ttft_sum,
            count: self.ttft_count.or(self.ttft_inf),
        });
        let queue_time = match (self.queue_sum, self.legacy_queue_sum, self.queue_counter) {
            (Some(sum), _, _) => Some(DurationTotals { sum, count: self.queue_count }),
            (None, Some(sum), _) => Some(DurationTotals { sum, count: self.legacy_queue_count }),
            (None, None, Some(sum)) => Some(DurationTotals { sum, count: None }),
            (None, None, None) => None,
        };
        // Finished requests: the success/failure counters; else NIM's per-reason finish counter; else the count of
        // the end-to-end latency histogram (one observation per finished request).
        let (requests_ok, requests_failed) = match (self.requests_ok, self.requests_failed) {
            (None, None) => match (self.finished_ok, self.finished_failed) {
                (None, None) => (self.e2e_count, None),
                found => found,
            },
            found => found,
        };
        ModelServerSnapshot {
            server,
            model,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            requests_ok,
            requests_failed,
            inferences: self.inferences,
            running: self.running,
            waiting: self.waiting,
            swapped: self.swapped,
            requests_received: self.requests_received,
            ttft,
            queue_time,
        }
    }
}

/// vLLM's series (after `vllm:`) and NIM's, which are the same names without the prefix plus two of its own.
/// Returns whether the series was one it reads.
fn vllm_like(series: &str, s: &Sample, b: &mut Building) -> bool {
    let v = s.value;
    let failed_reason = matches!(s.label("finished_reason"), Some("abort" | "error"));
    match series {
        "prompt_tokens_total" => add(&mut b.input_tokens, v),
        "generation_tokens_total" => add(&mut b.output_tokens, v),
        "request_success_total" if failed_reason => add(&mut b.requests_failed, v),
        "request_success_total" => add(&mut b.requests_ok, v),
        // NIM.
        "request_failure_total" => add(&mut b.requests_failed, v),
        "request_finish_total" if failed_reason => add(&mut b.finished_failed, v),
        "request_finish_total" => add(&mut b.finished_ok, v),
        "num_requests_running" => add(&mut b.running, v),
        "num_requests_waiting" => add(&mut b.waiting, v),
        // vLLM V0.
        "num_requests_swapped" => add(&mut b.swapped, v),
        "time_to_first_token_seconds_bucket" => b.bucket(s, 1.0),
        "time_to_first_token_seconds_sum" => add(&mut b.ttft_sum, v),
        "time_to_first_token_seconds_count" => add(&mut b.ttft_count, v),
        "request_queue_time_seconds_sum" => add(&mut b.queue_sum, v),
        "request_queue_time_seconds_count" => add(&mut b.queue_count, v),
        "time_in_queue_requests_sum" => add(&mut b.legacy_queue_sum, v),
        "time_in_queue_requests_count" => add(&mut b.legacy_queue_count, v),
        "e2e_request_latency_seconds_count" => add(&mut b.e2e_count, v),
        _ => return false,
    }
    true
}

/// TGI's series. Returns whether the series was one it reads.
fn tgi(series: &str, s: &Sample, b: &mut Building) -> bool {
    let v = s.value;
    match series {
        "tgi_request_success" => add(&mut b.requests_ok, v),
        "tgi_request_failure" => add(&mut b.requests_failed, v),
        "tgi_request_count" => add(&mut b.requests_received, v),
        "tgi_request_input_length_sum" => add(&mut b.input_tokens, v),
        "tgi_request_generated_tokens_sum" => add(&mut b.output_tokens, v),
        "tgi_queue_size" => add(&mut b.waiting, v),
        "tgi_batch_current_size" => add(&mut b.running, v),
        "tgi_request_queue_duration_sum" => add(&mut b.queue_sum, v),
        "tgi_request_queue_duration_count" => add(&mut b.queue_count, v),
        _ => return false,
    }
    true
}

fn triton(series: &str, s: &Sample, b: &mut Building) {
    let v = s.value;
    match series {
        "nv_inference_request_success" => add(&mut b.requests_ok, v),
        "nv_inference_request_failure" => add(&mut b.requests_failed, v),
        "nv_inference_count" => add(&mut b.inferences, v),
        "nv_inference_pending_request_count" => add(&mut b.waiting, v),
        "nv_inference_queue_duration_us" => add(&mut b.queue_counter, v / 1e6),
        "nv_inference_queue_summary_us_sum" => add(&mut b.queue_sum, v / 1e6),
        "nv_inference_queue_summary_us_count" => add(&mut b.queue_count, v),
        "nv_inference_first_response_histogram_ms" | "nv_inference_first_response_histogram_ms_bucket" => {
            b.bucket(s, 1e-3);
        }
        "nv_inference_first_response_histogram_ms_sum" => add(&mut b.ttft_sum, v / 1e3),
        "nv_inference_first_response_histogram_ms_count" => add(&mut b.ttft_count, v),
        _ => {}
    }
}

/// One snapshot per (server, model) found in a scrape, sorted by server then model; the server is detected from
/// the metric names (`vllm:` prefix, `nv_` with a `model` label, `tgi_` prefix, or NIM's unprefixed vLLM names with
/// a `model_name` label). Samples of no server, or without a model label where one is needed, are skipped.
pub fn snapshots(samples: &[Sample]) -> Vec<ModelServerSnapshot> {
    read(samples, &ReadOptions::default())
}

/// [`snapshots`], with options: only one server's metrics, and TGI's model name.
pub fn read(samples: &[Sample], options: &ReadOptions) -> Vec<ModelServerSnapshot> {
    let wanted = |server: Server| options.server.is_none_or(|s| s == server);
    let tgi_model = options.model.as_deref().filter(|m| !m.trim().is_empty()).unwrap_or(UNKNOWN_MODEL);
    let mut found: BTreeMap<(Server, &str), Building> = BTreeMap::new();
    for s in samples {
        if let Some(series) = s.name.strip_prefix("vllm:") {
            if let Some(model) = s.label("model_name").filter(|_| wanted(Server::Vllm)) {
                vllm_like(series, s, found.entry((Server::Vllm, model)).or_default());
            }
        } else if s.name.starts_with("nv_") {
            if let Some(model) = s.label("model").filter(|_| wanted(Server::Triton)) {
                triton(&s.name, s, found.entry((Server::Triton, model)).or_default());
            }
        } else if s.name.starts_with("tgi_") {
            if wanted(Server::Tgi) {
                feed(&mut found, (Server::Tgi, tgi_model), |b| tgi(&s.name, s, b));
            }
        } else if let Some(model) = s.label("model_name").filter(|_| wanted(Server::Nim)) {
            feed(&mut found, (Server::Nim, model), |b| vllm_like(&s.name, s, b));
        }
    }
    found.into_iter().map(|((server, model), b)| b.finish(server, model.to_owned())).collect()
}

/// Feeds one sample to a model's figures, creating them only when the sample is one the reader knows (so a metric
/// that merely shares a prefix or label makes no empty snapshot).
fn feed<'a>(
    found: &mut BTreeMap<(Server, &'a str), Building>,
    key: (Server, &'a str),
    read: impl FnOnce(&mut Building) -> bool,
) {
    match found.get_mut(&key) {
        Some(b) => {
            read(b);
        }
        None => {
            let mut b = Building::default();
            if read(&mut b) {
                found.insert(key, b);
            }
        }
    }
}

/// Why two snapshots give no `service_usage` fact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// The snapshots are of different models (or servers).
    #[error("snapshots of different models: {earlier:?} then {later:?}")]
    DifferentModels {
        /// The earlier snapshot's model.
        earlier: String,
        /// The later snapshot's model.
        later: String,
    },
    /// The later snapshot lacks a counter the fact needs (Triton has no token counters).
    #[error("the later snapshot of {model:?} has no {counter} counter")]
    MissingCounter {
        /// The model.
        model: String,
        /// `input_tokens`, `output_tokens` or `requests`.
        counter: &'static str,
    },
    /// The window is empty or reversed.
    #[error("window end {end} is not after its start {start}")]
    EmptyWindow {
        /// Window start (the earlier scrape).
        start: OffsetDateTime,
        /// Window end (the later scrape).
        end: OffsetDateTime,
    },
}

/// A counter value as a whole count (counters are integers; a negative or non-finite value counts nothing).
fn whole(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 { v.round() as u64 } else { 0 }
}

/// Productive-work counts for a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Finished requests (failed and aborted included: they used the endpoint too).
    pub requests: u64,
    /// Prompt (input) tokens.
    pub input_tokens: u64,
    /// Generated (output) tokens.
    pub output_tokens: u64,
}

/// What one endpoint's model server did in a window: the difference of two cumulative scrapes of one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowTotals {
    /// Which server.
    pub server: Server,
    /// The model.
    pub model: String,
    /// Window start (the earlier scrape).
    #[serde(with = "time::serde::rfc3339")]
    pub window_start: OffsetDateTime,
    /// Window end (the later scrape).
    #[serde(with = "time::serde::rfc3339")]
    pub window_end: OffsetDateTime,
    /// Requests and tokens in the window (counter deltas).
    pub counts: Counts,
    /// Time to first token in the window: total milliseconds, when the server reports it.
    pub ttft_ms_sum: Option<u64>,
    /// Requests the TTFT sum covers.
    pub ttft_count: Option<u64>,
    /// Queue depth at the window's end (waiting + swapped, a gauge).
    pub queue_depth: Option<f64>,
    /// Requests running at the window's end (a gauge).
    pub running: Option<f64>,
    /// The server restarted between the scrapes (a counter went down): the later values are the deltas.
    pub restarted: bool,
}

/// The endpoint totals for a window, from two cumulative scrapes of one model: `earlier` taken at `window_start`,
/// `later` at `window_end`.
///
/// Counts are counter deltas. Requests are the finished ones (every finish reason, aborted and failed included).
/// If any counter went down the server restarted between the scrapes and every counter started again from zero,
/// so the later values are the deltas. A counter missing from the earlier scrape counts from zero; one missing from
/// the later scrape is an error (Triton has no token counters).
pub fn window_totals(
    earlier: &ModelServerSnapshot,
    window_start: OffsetDateTime,
    later: &ModelServerSnapshot,
    window_end: OffsetDateTime,
) -> Result<WindowTotals, UsageError> {
    if earlier.model != later.model || earlier.server != later.server {
        return Err(UsageError::DifferentModels { earlier: earlier.model.clone(), later: later.model.clone() });
    }
    if window_end <= window_start {
        return Err(UsageError::EmptyWindow { start: window_start, end: window_end });
    }
    let missing = |counter| UsageError::MissingCounter { model: later.model.clone(), counter };
    let requests = |s: &ModelServerSnapshot| match (s.requests_ok, s.requests_failed) {
        (None, None) => None,
        (ok, failed) => Some(ok.unwrap_or(0.0) + failed.unwrap_or(0.0)),
    };
    // (earlier, later) per counter; the request counters are compared one by one for the restart test.
    let input = (earlier.input_tokens, later.input_tokens.ok_or_else(|| missing("input_tokens"))?);
    let output = (earlier.output_tokens, later.output_tokens.ok_or_else(|| missing("output_tokens"))?);
    let total = (requests(earlier), requests(later).ok_or_else(|| missing("requests"))?);
    let restarted = [
        input,
        output,
        (earlier.requests_ok, later.requests_ok.unwrap_or(0.0)),
        (earlier.requests_failed, later.requests_failed.unwrap_or(0.0)),
        (earlier.requests_received, later.requests_received.unwrap_or(0.0)),
    ]
    .iter()
    .any(|(before, after)| before.is_some_and(|b| *after < b));
    let delta = |(before, after): (Option<f64>, f64)| {
        if restarted { whole(after) } else { whole(after - before.unwrap_or(0.0)) }
    };
    let counts = Counts { requests: delta(total), input_tokens: delta(input), output_tokens: delta(output) };
    // Time to first token: the histogram's sum and count, as deltas like the counters. Reported only when the
    // later scrape has both and they did not go down on their own (a restart resets them with the rest).
    let ttft = |s: &ModelServerSnapshot| s.ttft.as_ref().and_then(|h| Some((h.sum?, h.count?)));
    let (mut ttft_ms_sum, mut ttft_count) = (None, None);
    if let Some((sum, count)) = ttft(later) {
        let (sum0, count0) = if restarted { (0.0, 0.0) } else { ttft(earlier).unwrap_or((0.0, 0.0)) };
        if sum >= sum0 && count >= count0 {
            ttft_ms_sum = Some(whole((sum - sum0) * 1000.0));
            ttft_count = Some(whole(count - count0));
        }
    }
    Ok(WindowTotals {
        server: later.server,
        model: later.model.clone(),
        window_start,
        window_end,
        counts,
        ttft_ms_sum,
        ttft_count,
        queue_depth: later.queue_depth(),
        running: later.running,
        restarted,
    })
}

/// A `service_usage` fact for one tenant of a shared endpoint, from two cumulative scrapes of one model (see
/// [`window_totals`]); observed at `window_end`, with the window's time to first token when the server reports it.
pub fn service_usage_from_snapshots(
    endpoint: &str,
    tenant: &str,
    earlier: &ModelServerSnapshot,
    window_start: OffsetDateTime,
    later: &ModelServerSnapshot,
    window_end: OffsetDateTime,
) -> Result<Fact, UsageError> {
    let t = window_totals(earlier, window_start, later, window_end)?;
    let c = t.counts;
    let fact = service_usage_fact(
        endpoint,
        &t.model,
        tenant,
        window_start,
        window_end,
        c.requests,
        c.input_tokens,
        c.output_tokens,
        window_end,
    );
    Ok(match (t.ttft_ms_sum, t.ttft_count) {
        (Some(sum), Some(count)) => with_ttft(fact, sum, count),
        _ => fact,
    })
}

/// Adds time-to-first-token figures (total milliseconds over `count` requests) to a `service_usage` fact.
pub fn with_ttft(mut fact: Fact, ttft_ms_sum: u64, count: u64) -> Fact {
    if let FactBody::ServiceUsage(u) = &mut fact.body {
        u.ttft_ms_sum = Some(ttft_ms_sum);
        u.ttft_count = Some(count);
    }
    fact
}

/// A `service_usage` fact from known figures; event ID
/// `service-usage/<endpoint>/<tenant>/<model>/<window start, RFC 3339 UTC>`, so the same window of the same
/// endpoint, tenant and model is stored once however often it is sent.
#[allow(clippy::too_many_arguments)]
pub fn service_usage_fact(
    endpoint: &str,
    model: &str,
    tenant: &str,
    window_start: OffsetDateTime,
    window_end: OffsetDateTime,
    requests: u64,
    input_tokens: u64,
    output_tokens: u64,
    observed_at: OffsetDateTime,
) -> Fact {
    let utc = window_start.to_offset(UtcOffset::UTC);
    let start = utc.format(&Rfc3339).unwrap_or_else(|_| utc.unix_timestamp().to_string());
    Fact {
        event_id: event_id("service-usage", &[endpoint, tenant, model, &start]),
        observed_at,
        body: FactBody::ServiceUsage(ServiceUsageFact {
            endpoint: endpoint.to_owned(),
            model: model.to_owned(),
            tenant: tenant.to_owned(),
            window_start,
            window_end,
            requests,
            input_tokens,
            output_tokens,
            ttft_ms_sum: None,
            ttft_count: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::metrics::{fixtures, prom};

    fn snaps(text: &str) -> Vec<ModelServerSnapshot> {
        snapshots(&prom::parse(text).unwrap().samples)
    }

    #[test]
    fn vllm_v1_fixture() {
        let s = snaps(&fixtures::read("modelserver", "vllm_v1_qwen2.5-0.5b_kops.txt"));
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!((s.server, s.model.as_str()), (Server::Vllm, "Qwen/Qwen2.5-0.5B-Instruct"));
        assert_eq!((s.input_tokens, s.output_tokens), (Some(0.0), Some(0.0)));
        assert_eq!((s.requests_ok, s.requests_failed), (Some(0.0), Some(0.0)));
        assert_eq!((s.running, s.waiting, s.inferences), (Some(0.0), Some(0.0), None));
        let ttft = s.ttft.as_ref().unwrap();
        assert_eq!(ttft.buckets.len(), 22);
        assert_eq!(ttft.buckets[0], (0.001, 0.0));
        assert_eq!(ttft.buckets[21], (2560.0, 0.0));
        assert_eq!((ttft.sum, ttft.count), (Some(0.0), Some(0.0)));
        assert_eq!(s.queue_time, Some(DurationTotals { sum: 0.0, count: Some(0.0) }));
    }

    #[test]
    fn vllm_counts_sum_over_engines_and_split_finish_reasons() {
        let m = r#"model_name="m""#;
        let text = format!(
            "vllm:prompt_tokens_total{{engine=\"0\",{m}}} 100\n\
             vllm:prompt_tokens_total{{engine=\"1\",{m}}} 50\n\
             vllm:generation_tokens_total{{engine=\"0\",{m}}} 7e3\n\
             vllm:request_success_total{{finished_reason=\"stop\",{m}}} 3\n\
             vllm:request_success_total{{finished_reason=\"length\",{m}}} 2\n\
             vllm:request_success_total{{finished_reason=\"abort\",{m}}} 1\n\
             vllm:num_requests_running{{engine=\"0\",{m}}} 4\n\
             vllm:num_requests_running{{engine=\"1\",{m}}} 1\n\
             vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"0.5\",{m}}} 2\n\
             vllm:time_to_first_token_seconds_bucket{{engine=\"1\",le=\"0.5\",{m}}} 1\n\
             vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"0.1\",{m}}} 1\n\
             vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"+Inf\",{m}}} 5\n\
             vllm:avg_prompt_throughput_toks_per_s{{{m}}} 12.5\n\
             vllm:num_requests_waiting{{model_name=\"other\"}} 9\n"
        );
        let s = snaps(&text);
        assert_eq!(s.len(), 2);
        let m = &s[0];
        assert_eq!((m.input_tokens, m.output_tokens), (Some(150.0), Some(7000.0)));
        assert_eq!((m.requests_ok, m.requests_failed), (Some(5.0), Some(1.0)));
        assert_eq!((m.running, m.waiting), (Some(5.0), None));
        let ttft = m.ttft.as_ref().unwrap();
        assert_eq!(ttft.buckets, [(0.1, 1.0), (0.5, 3.0)]);
        assert_eq!(ttft.count, Some(5.0), "from the +Inf bucket when there is no _count");
        assert_eq!((s[1].model.as_str(), s[1].waiting), ("other", Some(9.0)));
    }

    #[test]
    fn triton_first_response_histogram_without_bucket_suffix() {
        let s = snaps(&fixtures::read("modelserver", "triton_docs_first_response_histogram.txt"));
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].server, s[0].model.as_str()), (Server::Triton, "my_model"));
        let ttft = s[0].ttft.as_ref().unwrap();
        assert_eq!(ttft.buckets, [(0.1, 8.0), (0.5, 30.0), (2.0, 36.0), (5.0, 37.0)]);
        assert_eq!(ttft.count, Some(37.0));
        assert!((ttft.sum.unwrap() - 10.771).abs() < 1e-12);
        let json = serde_json::to_value(&s[0]).unwrap();
        assert_eq!(json["server"], "triton");
        assert_eq!(json["ttft"]["buckets"][0], serde_json::json!([0.1, 8.0]));
    }

    #[test]
    fn triton_queue_summary_and_counters() {
        let s = snaps(&fixtures::read("modelserver", "triton_docs_queue_summary.txt"));
        assert_eq!(s.len(), 1);
        let q = s[0].queue_time.as_ref().unwrap();
        assert!((q.sum - 0.01111).abs() < 1e-12, "{q:?}");
        assert_eq!(q.count, Some(161.0));

        let s = snaps(
            "nv_inference_request_success{model=\"r\",version=\"1\"} 10\n\
             nv_inference_request_success{model=\"r\",version=\"2\"} 5\n\
             nv_inference_request_failure{model=\"r\",reason=\"REJECTED\",version=\"1\"} 2\n\
             nv_inference_count{model=\"r\",version=\"1\"} 64\n\
             nv_inference_queue_duration_us{model=\"r\",version=\"1\"} 2500000\n\
             nv_inference_pending_request_count{model=\"r\",version=\"1\"} 3\n",
        );
        let r = &s[0];
        assert_eq!(
            (r.requests_ok, r.requests_failed, r.inferences, r.waiting),
            (Some(15.0), Some(2.0), Some(64.0), Some(3.0))
        );
        assert_eq!(r.queue_time, Some(DurationTotals { sum: 2.5, count: None }));
        assert_eq!((r.input_tokens, r.running, r.ttft.as_ref()), (None, None, None));
    }

    const QWEN: &str = "Qwen/Qwen2.5-0.5B-Instruct";

    /// The real vLLM V1 fixture (all counters zero), with some counters advanced as after serving traffic.
    fn vllm_fixture_after(prompt: f64, generated: f64, stop: f64, abort: f64) -> ModelServerSnapshot {
        let m = format!("model_name=\"{QWEN}\"");
        let text = fixtures::read("modelserver", "vllm_v1_qwen2.5-0.5b_kops.txt")
            .replace(
                &format!("vllm:prompt_tokens_total{{engine=\"0\",{m}}} 0.0"),
                &format!("vllm:prompt_tokens_total{{engine=\"0\",{m}}} {prompt:?}"),
            )
            .replace(
                &format!("vllm:generation_tokens_total{{engine=\"0\",{m}}} 0.0"),
                &format!("vllm:generation_tokens_total{{engine=\"0\",{m}}} {generated:?}"),
            )
            .replace(
                &format!("vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",{m}}} 0.0"),
                &format!("vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",{m}}} {stop:?}"),
            )
            .replace(
                &format!("vllm:request_success_total{{engine=\"0\",finished_reason=\"abort\",{m}}} 0.0"),
                &format!("vllm:request_success_total{{engine=\"0\",finished_reason=\"abort\",{m}}} {abort:?}"),
            );
        let mut s = snaps(&text);
        assert_eq!(s.len(), 1);
        s.remove(0)
    }

    fn usage(f: &Fact) -> &ServiceUsageFact {
        match &f.body {
            FactBody::ServiceUsage(u) => u,
            other => panic!("not service usage: {other:?}"),
        }
    }

    #[test]
    fn service_usage_is_the_counter_delta_between_two_vllm_scrapes() {
        use time::macros::datetime;
        let (t0, t1) = (datetime!(2026-11-01 10:00 UTC), datetime!(2026-11-01 10:05 UTC));
        let earlier = snaps(&fixtures::read("modelserver", "vllm_v1_qwen2.5-0.5b_kops.txt")).remove(0);
        let mid = vllm_fixture_after(1200.0, 3400.0, 9.0, 1.0);
        let f = service_usage_from_snapshots("llm-shared", "nlp-research", &earlier, t0, &mid, t1).unwrap();
        let u = usage(&f);
        assert_eq!((u.endpoint.as_str(), u.model.as_str(), u.tenant.as_str()), ("llm-shared", QWEN, "nlp-research"));
        assert_eq!((u.window_start, u.window_end, f.observed_at), (t0, t1, t1));
        assert_eq!((u.requests, u.input_tokens, u.output_tokens), (10, 1200, 3400), "aborted requests count");
        assert_eq!(f.event_id, format!("service-usage/llm-shared/nlp-research/{QWEN}/2026-11-01T10:00:00Z"));
        assert_eq!(f.body.kind(), "service_usage");

        // The next window: only what happened since.
        let t2 = datetime!(2026-11-01 10:10 UTC);
        let later = vllm_fixture_after(1500.0, 4000.0, 12.0, 1.0);
        let g = service_usage_from_snapshots("llm-shared", "nlp-research", &mid, t1, &later, t2).unwrap();
        assert_eq!((usage(&g).requests, usage(&g).input_tokens, usage(&g).output_tokens), (3, 300, 600));
        assert_ne!(g.event_id, f.event_id);

        // On the wire it is the `service_usage` kind and comes back equal.
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["kind"], "service_usage");
        assert_eq!(json["window_start"], "2026-11-01T10:05:00Z");
        assert_eq!(serde_json::from_value::<Fact>(json).unwrap(), g);
    }

    #[test]
    fn time_to_first_token_is_the_histogram_delta_in_milliseconds() {
        use time::macros::datetime;
        let (t0, t1, t2) =
            (datetime!(2026-11-01 10:00 UTC), datetime!(2026-11-01 10:05 UTC), datetime!(2026-11-01 10:10 UTC));
        let earlier = snaps(&fixtures::read("modelserver", "vllm_v1_qwen2.5-0.5b_kops.txt")).remove(0);
        // The fixture's histogram is all zeros: no request yet, so no mean either way (0 ms over 0 requests).
        let f = service_usage_from_snapshots("llm-shared", "nlp", &earlier, t0, &earlier, t1).unwrap();
        assert_eq!((usage(&f).ttft_ms_sum, usage(&f).ttft_count), (Some(0), Some(0)));

        let with = |sum: f64, count: f64, tokens: f64| {
            let mut s = vllm_fixture_after(tokens, tokens, count, 0.0);
            s.ttft = Some(Histogram { buckets: vec![(0.1, count / 2.0)], sum: Some(sum), count: Some(count) });
            s
        };
        let (a, b) = (with(1.25, 10.0, 100.0), with(4.75, 24.0, 300.0));
        let g = service_usage_from_snapshots("llm-shared", "nlp", &a, t1, &b, t2).unwrap();
        assert_eq!((usage(&g).ttft_ms_sum, usage(&g).ttft_count), (Some(3500), Some(14)), "3.5 s over 14 requests");
        // Restarted server: the later values are the deltas.
        let restarted = service_usage_from_snapshots("llm-shared", "nlp", &b, t1, &a, t2).unwrap();
        assert_eq!((usage(&restarted).ttft_ms_sum, usage(&restarted).ttft_count), (Some(1250), Some(10)));
        // A server without the histogram: nothing is made up.
        let mut none = b.clone();
        none.ttft = None;
        let h = service_usage_from_snapshots("llm-shared", "nlp", &a, t1, &none, t2).unwrap();
        assert_eq!((usage(&h).ttft_ms_sum, usage(&h).ttft_count), (None, None));
        // On the wire the fields are omitted when unknown, and older facts without them still parse.
        let json = serde_json::to_value(&h).unwrap();
        assert!(json.get("ttft_ms_sum").is_none(), "{json}");
        assert_eq!(serde_json::to_value(&g).unwrap()["ttft_ms_sum"], 3500);
        let k = with_ttft(h.clone(), 900, 3);
        assert_eq!(
            (usage(&k).ttft_ms_sum, usage(&k).ttft_count, usage(&k).requests),
            (Some(900), Some(3), usage(&h).requests)
        );
    }

    #[test]
    fn a_counter_that_went_down_means_a_restart_and_the_later_values_are_the_delta() {
        use time::macros::datetime;
        let (t0, t1) = (datetime!(2026-11-01 10:00 UTC), datetime!(2026-11-01 10:05 UTC));
        let before = vllm_fixture_after(50_000.0, 90_000.0, 400.0, 3.0);
        // Restarted: tokens went down, though requests already passed their old value.
        let after = vllm_fixture_after(700.0, 2_000.0, 450.0, 0.0);
        let f = service_usage_from_snapshots("llm-shared", "t", &before, t0, &after, t1).unwrap();
        let u = usage(&f);
        assert_eq!((u.requests, u.input_tokens, u.output_tokens), (450, 700, 2_000));
    }

    #[test]
    fn snapshots_that_cannot_make_a_fact_are_refused() {
        use time::macros::datetime;
        let (t0, t1) = (datetime!(2026-11-01 10:00 UTC), datetime!(2026-11-01 10:05 UTC));
        let a = vllm_fixture_after(1.0, 1.0, 1.0, 0.0);
        let mut other = a.clone();
        other.model = "other".into();
        assert!(matches!(
            service_usage_from_snapshots("e", "t", &a, t0, &other, t1),
            Err(UsageError::DifferentModels { .. })
        ));
        assert!(matches!(service_usage_from_snapshots("e", "t", &a, t1, &a, t1), Err(UsageError::EmptyWindow { .. })));
        let triton = snaps(&fixtures::read("modelserver", "triton_docs_queue_summary.txt")).remove(0);
        let err = service_usage_from_snapshots("e", "t", &triton, t0, &triton, t1).unwrap_err();
        assert!(matches!(err, UsageError::MissingCounter { counter: "input_tokens", .. }), "{err}");
        // A counter first seen in the later scrape counts from zero.
        let mut fresh = a.clone();
        fresh.input_tokens = None;
        let f = service_usage_from_snapshots("e", "t", &fresh, t0, &a, t1).unwrap();
        assert_eq!((usage(&f).input_tokens, usage(&f).output_tokens), (1, 0));
    }

    #[test]
    fn the_simple_constructor_gives_the_same_deterministic_id_for_the_same_instant() {
        use time::macros::{datetime, offset};
        let (t0, t1) = (datetime!(2026-11-01 10:00 UTC), datetime!(2026-11-01 10:05 UTC));
        let f = service_usage_fact("llm-shared", QWEN, "search", t0, t1, 4, 100, 250, t1);
        assert_eq!(f.event_id, format!("service-usage/llm-shared/search/{QWEN}/2026-11-01T10:00:00Z"));
        let u = usage(&f);
        assert_eq!((u.requests, u.input_tokens, u.output_tokens), (4, 100, 250));
        // The same instant written with another offset is the same window.
        let g = service_usage_fact("llm-shared", QWEN, "search", t0.to_offset(offset!(+2)), t1, 4, 100, 250, t1);
        assert_eq!(g.event_id, f.event_id);
        // Another tenant, model or window is another fact.
        assert_ne!(service_usage_fact("llm-shared", QWEN, "nlp", t0, t1, 4, 100, 250, t1).event_id, f.event_id);
        assert_ne!(service_usage_fact("llm-shared", "m2", "search", t0, t1, 4, 100, 250, t1).event_id, f.event_id);
        assert_ne!(
            service_usage_fact("llm-shared", QWEN, "search", t1, t1 + time::Duration::minutes(5), 4, 100, 250, t1)
                .event_id,
            f.event_id
        );
    }

    /// TGI's `/metrics` as its router exports it (metrics-exporter-prometheus: counters without `_total`, histograms
    /// with `_bucket`/`_sum`/`_count`, no model label). Names from huggingface/text-generation-inference
    /// `docs/source/reference/metrics.md`; `tgi_request_failure{err=…}` from its router (`validation`, `overloaded`,
    /// `dropped`, …). The values are made up.
    const TGI: &str = "# TYPE tgi_request_count counter\n\
tgi_request_count 14\n\
# TYPE tgi_request_success counter\n\
tgi_request_success 11\n\
# TYPE tgi_request_failure counter\n\
tgi_request_failure{err=\"validation\"} 1\n\
tgi_request_failure{err=\"overloaded\"} 1\n\
# TYPE tgi_queue_size gauge\n\
tgi_queue_size 3\n\
# TYPE tgi_batch_current_size gauge\n\
tgi_batch_current_size 4\n\
# TYPE tgi_batch_current_max_tokens gauge\n\
tgi_batch_current_max_tokens 4096\n\
# TYPE tgi_request_input_length histogram\n\
tgi_request_input_length_bucket{le=\"100\"} 5\n\
tgi_request_input_length_bucket{le=\"+Inf\"} 12\n\
tgi_request_input_length_sum 2210\n\
tgi_request_input_length_count 12\n\
# TYPE tgi_request_generated_tokens histogram\n\
tgi_request_generated_tokens_bucket{le=\"+Inf\"} 11\n\
tgi_request_generated_tokens_sum 3300\n\
tgi_request_generated_tokens_count 11\n\
# TYPE tgi_request_queue_duration histogram\n\
tgi_request_queue_duration_bucket{le=\"+Inf\"} 11\n\
tgi_request_queue_duration_sum 0.55\n\
tgi_request_queue_duration_count 11\n\
# TYPE tgi_request_duration histogram\n\
tgi_request_duration_sum 40.2\n\
tgi_request_duration_count 11\n";

    #[test]
    fn tgi_has_no_model_label_so_the_model_is_a_parameter() {
        let samples = prom::parse(TGI).unwrap().samples;
        let named = read(&samples, &ReadOptions { server: None, model: Some("bigscience/bloom-560m".into()) });
        assert_eq!(named.len(), 1);
        let t = &named[0];
        assert_eq!((t.server, t.model.as_str()), (Server::Tgi, "bigscience/bloom-560m"));
        assert_eq!((t.input_tokens, t.output_tokens), (Some(2210.0), Some(3300.0)));
        assert_eq!((t.requests_ok, t.requests_failed, t.requests_received), (Some(11.0), Some(2.0), Some(14.0)));
        assert_eq!((t.running, t.waiting, t.queue_depth()), (Some(4.0), Some(3.0), Some(3.0)));
        assert_eq!(t.queue_time, Some(DurationTotals { sum: 0.55, count: Some(11.0) }));
        assert_eq!(t.ttft, None, "TGI exports no time to first token");
        // Without a model name it is still read, under a placeholder.
        assert_eq!(snapshots(&samples)[0].model, UNKNOWN_MODEL);
        // JSON: the TGI-only field is there, the vLLM-only one is not.
        let json = serde_json::to_value(t).unwrap();
        assert_eq!((json["server"].as_str(), json["requests_received"].as_f64()), (Some("tgi"), Some(14.0)));
        assert!(json.get("swapped").is_none(), "{json}");
    }

    /// NIM for LLMs `/v1/metrics`: vLLM's names without the prefix, label `model_name`, plus its own success and
    /// failure counters. Names and labels as in NVIDIA's "Observability for NVIDIA NIM for LLMs" page and a scrape
    /// of `meta/llama-3.1-8b-instruct` published in DataDog/integrations-core `nvidia_nim/tests/fixtures/
    /// nim_metrics.txt`; shortened, values changed.
    const NIM: &str = "# TYPE python_info gauge\n\
python_info{implementation=\"CPython\",major=\"3\",minor=\"10\",patchlevel=\"12\",version=\"3.10.12\"} 1.0\n\
# TYPE num_requests_running gauge\n\
num_requests_running{model_name=\"meta/llama-3.1-8b-instruct\"} 2.0\n\
# TYPE num_requests_waiting gauge\n\
num_requests_waiting{model_name=\"meta/llama-3.1-8b-instruct\"} 1.0\n\
# TYPE num_request_max gauge\n\
num_request_max{model_name=\"meta/llama-3.1-8b-instruct\"} 64.0\n\
# TYPE gpu_cache_usage_perc gauge\n\
gpu_cache_usage_perc{model_name=\"meta/llama-3.1-8b-instruct\"} 0.0003\n\
# TYPE prompt_tokens_total counter\n\
prompt_tokens_total{model_name=\"meta/llama-3.1-8b-instruct\"} 250.0\n\
# TYPE generation_tokens_total counter\n\
generation_tokens_total{model_name=\"meta/llama-3.1-8b-instruct\"} 400.0\n\
# TYPE time_to_first_token_seconds histogram\n\
time_to_first_token_seconds_bucket{le=\"0.02\",model_name=\"meta/llama-3.1-8b-instruct\"} 2.0\n\
time_to_first_token_seconds_bucket{le=\"0.75\",model_name=\"meta/llama-3.1-8b-instruct\"} 6.0\n\
time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"meta/llama-3.1-8b-instruct\"} 7.0\n\
time_to_first_token_seconds_count{model_name=\"meta/llama-3.1-8b-instruct\"} 7.0\n\
time_to_first_token_seconds_sum{model_name=\"meta/llama-3.1-8b-instruct\"} 0.875\n\
# TYPE e2e_request_latency_seconds histogram\n\
e2e_request_latency_seconds_count{model_name=\"meta/llama-3.1-8b-instruct\"} 7.0\n\
e2e_request_latency_seconds_sum{model_name=\"meta/llama-3.1-8b-instruct\"} 3.5\n\
# TYPE request_finish_total counter\n\
request_finish_total{finished_reason=\"length\",model_name=\"meta/llama-3.1-8b-instruct\"} 5.0\n\
request_finish_total{finished_reason=\"stop\",model_name=\"meta/llama-3.1-8b-instruct\"} 1.0\n\
request_finish_total{finished_reason=\"abort\",model_name=\"meta/llama-3.1-8b-instruct\"} 1.0\n\
# TYPE request_success_total counter\n\
request_success_total{model_name=\"meta/llama-3.1-8b-instruct\"} 6.0\n\
# TYPE request_failure_total counter\n\
request_failure_total{model_name=\"meta/llama-3.1-8b-instruct\"} 1.0\n";

    #[test]
    fn nim_is_read_from_its_unprefixed_names() {
        let s = snaps(NIM);
        assert_eq!(s.len(), 1, "python_info makes no snapshot: {s:?}");
        let n = &s[0];
        assert_eq!((n.server, n.model.as_str()), (Server::Nim, "meta/llama-3.1-8b-instruct"));
        assert_eq!((n.input_tokens, n.output_tokens), (Some(250.0), Some(400.0)));
        assert_eq!((n.requests_ok, n.requests_failed), (Some(6.0), Some(1.0)), "finish counter not added on top");
        assert_eq!((n.running, n.waiting), (Some(2.0), Some(1.0)));
        let ttft = n.ttft.as_ref().unwrap();
        assert_eq!((ttft.sum, ttft.count, ttft.buckets.len()), (Some(0.875), Some(7.0), 2));
        // Without the success/failure counters, the per-reason finish counter gives the split.
        let older: String = NIM
            .lines()
            .filter(|l| !l.contains("request_success") && !l.contains("request_failure"))
            .map(|l| format!("{l}\n"))
            .collect();
        let o = &snaps(&older)[0];
        assert_eq!((o.requests_ok, o.requests_failed), (Some(6.0), Some(1.0)));
        // --server vllm reads none of it; --server nim reads it.
        let samples = prom::parse(NIM).unwrap().samples;
        assert!(read(&samples, &ReadOptions { server: Some(Server::Vllm), model: None }).is_empty());
        assert_eq!(read(&samples, &ReadOptions { server: Some(Server::Nim), model: None }).len(), 1);
    }

    /// vLLM V0 (e.g. 0.6.x): names from vLLM's `docs/source/design/v1/metrics.md` "v0 Metrics" list and the
    /// `vllm/engine/metrics.py` of those releases; `model_name` label, no `engine` label. Values are made up.
    const VLLM_V0: &str = "# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{model_name=\"facebook/opt-125m\"} 3.0\n\
# TYPE vllm:num_requests_swapped gauge\n\
vllm:num_requests_swapped{model_name=\"facebook/opt-125m\"} 2.0\n\
# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{model_name=\"facebook/opt-125m\"} 5.0\n\
# TYPE vllm:gpu_cache_usage_perc gauge\n\
vllm:gpu_cache_usage_perc{model_name=\"facebook/opt-125m\"} 0.42\n\
# TYPE vllm:avg_prompt_throughput_toks_per_s gauge\n\
vllm:avg_prompt_throughput_toks_per_s{model_name=\"facebook/opt-125m\"} 123.4\n\
# TYPE vllm:prompt_tokens_total counter\n\
vllm:prompt_tokens_total{model_name=\"facebook/opt-125m\"} 9000.0\n\
# TYPE vllm:generation_tokens_total counter\n\
vllm:generation_tokens_total{model_name=\"facebook/opt-125m\"} 21000.0\n\
# TYPE vllm:time_in_queue_requests histogram\n\
vllm:time_in_queue_requests_sum{model_name=\"facebook/opt-125m\"} 12.5\n\
vllm:time_in_queue_requests_count{model_name=\"facebook/opt-125m\"} 40.0\n\
# TYPE vllm:e2e_request_latency_seconds histogram\n\
vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"facebook/opt-125m\"} 40.0\n\
vllm:e2e_request_latency_seconds_count{model_name=\"facebook/opt-125m\"} 40.0\n\
vllm:e2e_request_latency_seconds_sum{model_name=\"facebook/opt-125m\"} 300.0\n\
# TYPE vllm:time_to_first_token_seconds histogram\n\
vllm:time_to_first_token_seconds_sum{model_name=\"facebook/opt-125m\"} 8.0\n\
vllm:time_to_first_token_seconds_count{model_name=\"facebook/opt-125m\"} 40.0\n";

    #[test]
    fn older_vllm_names_swapped_legacy_queue_and_e2e_count() {
        let s = &snaps(VLLM_V0)[0];
        assert_eq!((s.server, s.model.as_str()), (Server::Vllm, "facebook/opt-125m"));
        assert_eq!((s.input_tokens, s.output_tokens), (Some(9000.0), Some(21000.0)));
        assert_eq!((s.running, s.waiting, s.swapped, s.queue_depth()), (Some(3.0), Some(5.0), Some(2.0), Some(7.0)));
        assert_eq!(s.queue_time, Some(DurationTotals { sum: 12.5, count: Some(40.0) }), "time_in_queue_requests");
        assert_eq!((s.requests_ok, s.requests_failed), (Some(40.0), None), "no request_success_total: e2e count");
        // With request_success_total, that wins over the e2e count, and the newer queue histogram over the old one.
        let newer = format!(
            "{VLLM_V0}vllm:request_success_total{{finished_reason=\"stop\",model_name=\"facebook/opt-125m\"}} 38.0\n\
             vllm:request_queue_time_seconds_sum{{model_name=\"facebook/opt-125m\"}} 10.0\n\
             vllm:request_queue_time_seconds_count{{model_name=\"facebook/opt-125m\"}} 38.0\n"
        );
        let n = &snaps(&newer)[0];
        assert_eq!(n.requests_ok, Some(38.0));
        assert_eq!(n.queue_time, Some(DurationTotals { sum: 10.0, count: Some(38.0) }));
    }

    #[test]
    fn one_scrape_with_several_servers_is_split_by_detected_kind() {
        let text = format!("{TGI}{NIM}{VLLM_V0}{}", fixtures::read("modelserver", "triton_docs_queue_summary.txt"));
        let kinds: Vec<Server> = snaps(&text).iter().map(|s| s.server).collect();
        assert_eq!(kinds, [Server::Vllm, Server::Triton, Server::Tgi, Server::Nim]);
        assert_eq!(Server::ALL.map(|s| Server::from_name(&s.name().to_uppercase())), Server::ALL.map(Some));
    }

    #[test]
    fn tgi_window_totals_from_two_scrapes() {
        use time::macros::datetime;
        let (t0, t1) = (datetime!(2026-11-01 10:00 UTC), datetime!(2026-11-01 10:05 UTC));
        let opts = ReadOptions { server: Some(Server::Tgi), model: Some("m".into()) };
        let before = read(&prom::parse(TGI).unwrap().samples, &opts).remove(0);
        let after_text = TGI
            .replace("tgi_request_success 11", "tgi_request_success 20")
            .replace("tgi_request_count 14", "tgi_request_count 24")
            .replace("tgi_request_input_length_sum 2210", "tgi_request_input_length_sum 4210")
            .replace("tgi_request_generated_tokens_sum 3300", "tgi_request_generated_tokens_sum 6300")
            .replace("tgi_queue_size 3", "tgi_queue_size 0");
        let after = read(&prom::parse(&after_text).unwrap().samples, &opts).remove(0);
        let w = window_totals(&before, t0, &after, t1).unwrap();
        assert_eq!(w.counts, Counts { requests: 9, input_tokens: 2000, output_tokens: 3000 });
        assert_eq!((w.ttft_ms_sum, w.queue_depth, w.running, w.restarted), (None, Some(0.0), Some(4.0), false));
        // The received counter going down is a restart too.
        let restarted = read(
            &prom::parse(&after_text.replace("tgi_request_count 24", "tgi_request_count 2")).unwrap().samples,
            &opts,
        )
        .remove(0);
        assert!(window_totals(&before, t0, &restarted, t1).unwrap().restarted);
    }

    #[test]
    fn window_of_two_real_vllm_scrapes() {
        use time::macros::datetime;
        let (t0, t1) = (datetime!(2026-11-01 10:00 UTC), datetime!(2026-11-01 10:05 UTC));
        let earlier = snaps(&fixtures::read("modelserver", "vllm_v1_qwen2.5-0.5b_kops.txt")).remove(0);
        let later = vllm_fixture_after(1200.0, 3400.0, 9.0, 1.0);
        let w = window_totals(&earlier, t0, &later, t1).unwrap();
        assert_eq!(w.counts, Counts { requests: 10, input_tokens: 1200, output_tokens: 3400 });
        assert_eq!((w.ttft_ms_sum, w.ttft_count, w.queue_depth), (Some(0), Some(0), Some(0.0)));
    }
}
