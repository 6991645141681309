//! Decoding and checking an agent's batch before anything is stored: the JSON's shape bounded while it inflates
//! ([`JsonGuard`]), the typed batch (fact by fact from its raw text when something is wrong, to name the field), and
//! what serde cannot check — versions, sizes, time order, times outside the cluster's window.

use std::{collections::HashMap, io::Read};

use axum::http::{HeaderMap, header};
use gpuledger_core::{
    sharing::SharingMode,
    wire::{
        Batch, EndpointTotalsFact, Fact, FactBody, GapRecovery, MAX_FACTS_PER_BATCH, MAX_PODS_PER_PROCESS_WINDOW,
        ProcessTelemetry, ServiceUsageFact, TELEMETRY_KINDS, WIRE_VERSION,
    },
};
use time::{Duration, OffsetDateTime};

use crate::{
    error::AppError,
    limits::{IngestLimits, JsonGuard, LimitHit},
};

/// How far in the future a timestamp may be (clock skew between agent and server).
const MAX_FUTURE_SKEW: Duration = Duration::minutes(10);

/// Decompresses (gzip) and parses a batch; errors name the offending field. The JSON's shape is checked while it
/// is inflated ([`JsonGuard`]), so a small body that expands to millions of values is refused after the first
/// few kilobytes, and no JSON value is materialised for the refused part.
pub fn decode(headers: &HeaderMap, body: &[u8], limits: &IngestLimits) -> Result<Batch, AppError> {
    let encoding = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("identity");
    let mut guard = JsonGuard::new(limits.json);
    let too_large = || {
        AppError::PayloadTooLarge(format!(
            "the batch is larger than {} bytes once decompressed (--ingest-max-decoded-bytes)",
            limits.max_decoded_bytes
        ))
    };
    let inflated: Vec<u8>;
    let json: &[u8] = match encoding {
        "gzip" => {
            let mut out = Vec::new();
            let mut decoder = flate2::read::GzDecoder::new(body);
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let n =
                    decoder.read(&mut chunk).map_err(|e| AppError::invalid("body", format!("not valid gzip: {e}")))?;
                if n == 0 {
                    break;
                }
                if (out.len() + n) as u64 > limits.max_decoded_bytes {
                    return Err(too_large());
                }
                guard.feed(&chunk[..n]).map_err(limit_error)?;
                out.extend_from_slice(&chunk[..n]);
            }
            inflated = out;
            &inflated
        }
        "identity" => {
            if body.len() as u64 > limits.max_decoded_bytes {
                return Err(too_large());
            }
            guard.feed(body).map_err(limit_error)?;
            body
        }
        other => {
            return Err(AppError::invalid("content-encoding", format!("unsupported encoding {other:?}")));
        }
    };
    // Fast path: one pass straight into the typed batch. Only a batch that fails is parsed again, fact by fact
    // from its raw text (never as a tree of values), to name exactly what is wrong: the envelope first, then each
    // fact by its kind (a flattened, internally tagged enum would lose the path inside a fact).
    if let Ok(batch) = serde_json::from_slice::<Batch>(json) {
        return Ok(batch);
    }
    let raw: RawBatch<'_> = parse_at("", &mut serde_json::Deserializer::from_slice(json))?;
    let mut facts = Vec::with_capacity(raw.facts.len());
    for (i, value) in raw.facts.into_iter().enumerate() {
        let at = format!("facts[{i}]");
        let text = value.get();
        if !text.starts_with('{') {
            return Err(AppError::invalid(at, "must be an object"));
        }
        let head: FactHead = parse_at(&at, &mut serde_json::Deserializer::from_str(text))?;
        let head_field = |name: &str, v: Option<serde_json::Value>| -> Result<serde_json::Value, AppError> {
            v.ok_or_else(|| AppError::invalid(format!("{at}.{name}"), "missing"))
        };
        let event_id: String = serde_json::from_value(head_field("event_id", head.event_id)?)
            .map_err(|e| AppError::invalid(format!("{at}.event_id"), e.to_string()))?;
        let observed_at: TimeField = serde_json::from_value(head_field("observed_at", head.observed_at)?)
            .map_err(|e| AppError::invalid(format!("{at}.observed_at"), e.to_string()))?;
        let kind: String = serde_json::from_value(head_field("kind", head.kind)?)
            .map_err(|e| AppError::invalid(format!("{at}.kind"), e.to_string()))?;
        let de = || serde_json::Deserializer::from_str(text);
        let body = match kind.as_str() {
            "allocation_started" => FactBody::AllocationStarted(parse_at(&at, &mut de())?),
            "allocation_ended" => FactBody::AllocationEnded(parse_at(&at, &mut de())?),
            "allocation_vanished" => FactBody::AllocationVanished(parse_at(&at, &mut de())?),
            "namespace_observed" => FactBody::NamespaceObserved(parse_at(&at, &mut de())?),
            "node_observed" => FactBody::NodeObserved(parse_at(&at, &mut de())?),
            "device_observed" => FactBody::DeviceObserved(parse_at(&at, &mut de())?),
            "device_assigned" => FactBody::DeviceAssigned(parse_at(&at, &mut de())?),
            "telemetry" => FactBody::Telemetry(parse_at(&at, &mut de())?),
            "process_telemetry" => FactBody::ProcessTelemetry(parse_at(&at, &mut de())?),
            "gap" => FactBody::Gap(parse_at(&at, &mut de())?),
            "gap_recovered" => FactBody::GapRecovered(parse_at(&at, &mut de())?),
            "quota_observed" => FactBody::QuotaObserved(parse_at(&at, &mut de())?),
            "service_usage" => FactBody::ServiceUsage(parse_at(&at, &mut de())?),
            "endpoint_totals" => FactBody::EndpointTotals(parse_at(&at, &mut de())?),
            "training_progress" => FactBody::TrainingProgress(parse_at(&at, &mut de())?),
            "device_fault" => FactBody::DeviceFault(parse_at(&at, &mut de())?),
            other => {
                return Err(AppError::invalid(format!("{at}.kind"), format!("unknown kind {other:?}")));
            }
        };
        facts.push(Fact { event_id, observed_at: observed_at.0, body });
    }
    Ok(Batch { wire_version: raw.wire_version, agent: raw.agent, cluster: raw.cluster, facts })
}

/// A crossed JSON limit as the answer names it: too many facts is the `facts` field's own refusal.
fn limit_error(hit: LimitHit) -> AppError {
    let is_fact_count = hit.at.strip_prefix("facts[").is_some_and(|rest| rest.ends_with(']') && !rest.contains('['))
        && hit.reason.contains("items in one array");
    if is_fact_count {
        return AppError::invalid(
            "facts",
            format!("more than {MAX_FACTS_PER_BATCH} facts; at most {MAX_FACTS_PER_BATCH} per batch"),
        );
    }
    AppError::invalid(hit.at, hit.reason)
}

#[derive(serde::Deserialize)]
struct RawBatch<'a> {
    wire_version: u32,
    agent: gpuledger_core::wire::AgentInfo,
    #[serde(default)]
    cluster: Option<String>,
    #[serde(borrow)]
    facts: Vec<&'a serde_json::value::RawValue>,
}

/// The fields every fact has; the rest of the object is skipped here and read by its kind's type.
#[derive(serde::Deserialize)]
struct FactHead {
    event_id: Option<serde_json::Value>,
    observed_at: Option<serde_json::Value>,
    kind: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct TimeField(#[serde(with = "time::serde::rfc3339")] OffsetDateTime);

/// Deserializes `de`, reporting errors at `prefix` + the path inside.
fn parse_at<'de, T: serde::Deserialize<'de>, D: serde::Deserializer<'de>>(prefix: &str, de: D) -> Result<T, AppError>
where
    D::Error: std::fmt::Display,
{
    serde_path_to_error::deserialize(de).map_err(|e| {
        let inner = e.path().to_string();
        let field = match (prefix.is_empty(), inner.as_str()) {
            (true, ".") => "body".to_string(),
            (true, _) => inner,
            (false, ".") => prefix.to_string(),
            (false, _) => format!("{prefix}.{inner}"),
        };
        AppError::invalid(field, e.into_inner().to_string())
    })
}

/// The times a batch's facts may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The server's clock: nothing may lie more than [`MAX_FUTURE_SKEW`] after it.
    pub now: OffsetDateTime,
    /// The earliest start of a measured window (telemetry, model-server and training figures) and the earliest
    /// observation: the cluster's registration minus the backfill window. Allocation starts may be older (a pod
    /// running since before the cluster joined is still charged from when the period began).
    pub floor: OffsetDateTime,
}

impl Window {
    /// Any time up to now is acceptable (tools and tests that build batches by hand).
    pub fn open(now: OffsetDateTime) -> Self {
        Self { now, floor: OffsetDateTime::UNIX_EPOCH + Duration::days(365 * 30) }
    }
}

/// Checks what serde cannot: versions, sizes, time order, times from the future or from before the cluster's
/// backfill window.
pub fn validate(batch: &Batch, window: Window) -> Result<(), AppError> {
    let Window { now, floor } = window;
    if batch.wire_version != WIRE_VERSION {
        return Err(AppError::invalid(
            "wire_version",
            format!("this server speaks version {WIRE_VERSION}, got {}", batch.wire_version),
        ));
    }
    if batch.facts.len() > MAX_FACTS_PER_BATCH {
        return Err(AppError::invalid(
            "facts",
            format!("{} facts; at most {MAX_FACTS_PER_BATCH} per batch", batch.facts.len()),
        ));
    }
    let latest = now + MAX_FUTURE_SKEW;
    for (i, fact) in batch.facts.iter().enumerate() {
        let field = |name: &str| format!("facts[{i}].{name}");
        let future = |name: &str, t: OffsetDateTime| -> Result<(), AppError> {
            if t > latest {
                return Err(AppError::invalid(field(name), format!("{t} is in the future (server time {now})")));
            }
            Ok(())
        };
        if fact.event_id.trim().is_empty() || fact.event_id.len() > 300 {
            return Err(AppError::invalid(field("event_id"), "must be 1 to 300 characters"));
        }
        future("observed_at", fact.observed_at)?;
        let past = |name: &str, t: OffsetDateTime| -> Result<(), AppError> {
            if t < floor {
                return Err(AppError::invalid(
                    field(name),
                    format!(
                        "{t} is before {floor}, the earliest time this cluster may report (its registration minus \
                         the backfill window, --ingest-backfill-days)"
                    ),
                ));
            }
            Ok(())
        };
        past("observed_at", fact.observed_at)?;
        match &fact.body {
            FactBody::AllocationStarted(s) => {
                future("started_at", s.started_at)?;
                if s.units == 0 {
                    return Err(AppError::invalid(field("units"), "must be at least 1"));
                }
                if s.allocation_id.is_empty() || s.allocation_id.len() > 300 {
                    return Err(AppError::invalid(field("allocation_id"), "must be 1 to 300 characters"));
                }
                if let SharingMode::TimeSlice { replicas: 0 } = s.mode {
                    return Err(AppError::invalid(field("mode.replicas"), "must be at least 1"));
                }
            }
            FactBody::AllocationEnded(e) => future("ended_at", e.ended_at)?,
            FactBody::AllocationVanished(v) => future("last_seen_at", v.last_seen_at)?,
            FactBody::NamespaceObserved(n) => {
                future("labels_since", n.labels_since)?;
                if let Some(d) = n.deleted_at
                    && d < n.created_at
                {
                    return Err(AppError::invalid(field("deleted_at"), "is before created_at"));
                }
            }
            FactBody::Telemetry(t) => {
                if t.window_end <= t.window_start {
                    return Err(AppError::invalid(field("window_end"), "must be after window_start"));
                }
                if t.gpu_instance_id.is_some_and(|g| g > gpuledger_core::telemetry::MAX_GPU_INSTANCE_ID as u32) {
                    return Err(AppError::invalid(
                        field("gpu_instance_id"),
                        format!(
                            "is past {}: NVML numbers a GPU's MIG instances from 0 and no GPU has that many",
                            gpuledger_core::telemetry::MAX_GPU_INSTANCE_ID
                        ),
                    ));
                }
                future("window_end", t.window_end)?;
                past("window_start", t.window_start)?;
                gpuledger_core::telemetry::Window::from_rollup(t).map_err(|e| match e {
                    gpuledger_core::telemetry::WindowError::Value(name) => {
                        AppError::invalid(field(name), e.to_string())
                    }
                    _ => AppError::invalid(field("window_end"), e.to_string()),
                })?;
            }
            FactBody::ProcessTelemetry(t) => {
                if t.window_end <= t.window_start {
                    return Err(AppError::invalid(field("window_end"), "must be after window_start"));
                }
                future("window_end", t.window_end)?;
                past("window_start", t.window_start)?;
                validate_process_telemetry(t).map_err(|(name, reason)| AppError::invalid(field(&name), reason))?;
            }
            FactBody::Gap(g) => {
                if g.to < g.from {
                    return Err(AppError::invalid(field("to"), "is before from"));
                }
                future("to", g.to)?;
                if g.kinds.len() > MAX_GAP_KINDS {
                    return Err(AppError::invalid(field("kinds"), format!("at most {MAX_GAP_KINDS} kinds")));
                }
                if g.node.as_ref().is_some_and(|n| n.is_empty() || n.len() > 253) {
                    return Err(AppError::invalid(field("node"), "must be 1 to 253 characters"));
                }
                for (k, kind) in g.kinds.iter().enumerate() {
                    let at = |name: &str| field(&format!("kinds[{k}].{name}"));
                    if kind.kind.is_empty() || kind.kind.len() > 64 {
                        return Err(AppError::invalid(at("kind"), "must be 1 to 64 characters"));
                    }
                    if kind.to < kind.from {
                        return Err(AppError::invalid(at("to"), "is before from"));
                    }
                    if kind.to > latest {
                        return Err(AppError::invalid(
                            at("to"),
                            format!("{} is in the future (server time {now})", kind.to),
                        ));
                    }
                    if (kind.to - kind.from) > Duration::days(31 * i64::from(MAX_GAP_MONTHS - 1)) {
                        return Err(AppError::invalid(
                            at("from"),
                            format!("a range longer than {MAX_GAP_MONTHS} months is not a spool's"),
                        ));
                    }
                }
            }
            FactBody::GapRecovered(r) => {
                validate_gap_recovery(r).map_err(|(name, reason)| AppError::invalid(field(&name), reason))?
            }
            FactBody::QuotaObserved(q) => future("since", q.since)?,
            FactBody::ServiceUsage(u) => {
                validate_service_usage(u, &field, &future)?;
                past("window_start", u.window_start)?;
            }
            FactBody::EndpointTotals(t) => {
                validate_endpoint_totals(t, &field, &future)?;
                past("window_start", t.window_start)?;
            }
            FactBody::TrainingProgress(t) => {
                crate::training::check_fact(t, &fact.event_id, now)
                    .map_err(|(name, reason)| AppError::invalid(field(name), reason))?;
                past("reported_at", t.reported_at)?;
            }
            FactBody::NodeObserved(n) => {
                // Any form is kept (a cloud the matching does not know yet), but bounded and one line.
                if let Some(p) = &n.provider_id
                    && (p.is_empty()
                        || p.len() > gpuledger_core::provider::MAX_RESOURCE_ID
                        || p.chars().any(char::is_control))
                {
                    return Err(AppError::invalid(
                        field("provider_id"),
                        format!(
                            "1 to {} characters without control characters (spec.providerID as Kubernetes has it)",
                            gpuledger_core::provider::MAX_RESOURCE_ID
                        ),
                    ));
                }
            }
            FactBody::DeviceFault(f) => {
                let one_line =
                    |v: &str, max: usize| !v.is_empty() && v.len() <= max && !v.chars().any(char::is_control);
                if !one_line(&f.gpu_uuid, 128) {
                    return Err(AppError::invalid(field("gpu_uuid"), "1 to 128 characters, one line (GPU-…)"));
                }
                if !one_line(&f.node, 253) {
                    return Err(AppError::invalid(field("node"), "1 to 253 characters, one line"));
                }
                match (f.fault, f.xid) {
                    (gpuledger_core::wire::DeviceFaultKind::Xid, Some(1..=65_535)) => {}
                    (gpuledger_core::wire::DeviceFaultKind::Xid, _) => {
                        return Err(AppError::invalid(field("xid"), "an XID fault needs its code (1 to 65535)"));
                    }
                    (_, Some(_)) => {
                        return Err(AppError::invalid(field("xid"), "only an XID fault has a code"));
                    }
                    (_, None) => {}
                }
                if f.detail
                    .as_deref()
                    .is_some_and(|d| d.chars().count() > 1_000 || d.chars().any(|c| c.is_control() && c != '\t'))
                {
                    return Err(AppError::invalid(field("detail"), "at most 1,000 characters on one line"));
                }
                future("occurred_at", f.occurred_at)?;
                past("occurred_at", f.occurred_at)?;
            }
            FactBody::DeviceObserved(_) | FactBody::DeviceAssigned(_) => {}
        }
    }
    // An end before its start inside one batch is refused up front (across batches it is flagged on store).
    let starts: HashMap<&str, OffsetDateTime> = batch
        .facts
        .iter()
        .filter_map(|f| match &f.body {
            FactBody::AllocationStarted(s) => Some((s.allocation_id.as_str(), s.started_at)),
            _ => None,
        })
        .collect();
    for (i, fact) in batch.facts.iter().enumerate() {
        if let FactBody::AllocationEnded(e) = &fact.body
            && let Some(start) = starts.get(e.allocation_id.as_str())
            && e.ended_at < *start
        {
            return Err(AppError::invalid(
                format!("facts[{i}].ended_at"),
                format!("{} is before the allocation's start {start}", e.ended_at),
            ));
        }
    }
    Ok(())
}

/// Longest endpoint, model or tenant name in a `service_usage` fact (the table's CHECKs say the same).
const MAX_SERVICE_NAME_CHARS: usize = 200;

fn validate_service_usage(
    u: &ServiceUsageFact,
    field: &dyn Fn(&str) -> String,
    future: &dyn Fn(&str, OffsetDateTime) -> Result<(), AppError>,
) -> Result<(), AppError> {
    validate_work(
        field,
        future,
        &[("endpoint", &u.endpoint), ("model", &u.model), ("tenant", &u.tenant)],
        (u.window_start, u.window_end),
        (u.ttft_ms_sum, u.ttft_count),
        &[("requests", u.requests), ("input_tokens", u.input_tokens), ("output_tokens", u.output_tokens)],
    )
}

/// Most kinds one gap may list (the wire format has 14).
pub const MAX_GAP_KINDS: usize = 32;
/// Most months one kind of a gap may span.
pub const MAX_GAP_MONTHS: u32 = 60;

/// What serde cannot say about a re-list's account of a gap: the gap's ID as event IDs are, at most
/// [`MAX_GAP_KINDS`] kinds, each named once, counts that add up without overflow, forgotten facts among the lost.
fn validate_gap_recovery(r: &GapRecovery) -> Result<(), (String, String)> {
    if r.gap.is_empty() || r.gap.len() > 300 {
        return Err(("gap".into(), "must be 1 to 300 characters (an event ID)".into()));
    }
    if r.kinds.len() > MAX_GAP_KINDS {
        return Err(("kinds".into(), format!("at most {MAX_GAP_KINDS} kinds")));
    }
    let mut lost = 0u64;
    let mut seen = std::collections::BTreeSet::new();
    for (k, kind) in r.kinds.iter().enumerate() {
        if kind.kind.is_empty() || kind.kind.len() > 64 {
            return Err((format!("kinds[{k}].kind"), "must be 1 to 64 characters".into()));
        }
        if !seen.insert(kind.kind.as_str()) {
            return Err((format!("kinds[{k}].kind"), format!("{:?} is named twice", kind.kind)));
        }
        if kind.recovered.checked_add(kind.lost).is_none() {
            return Err((format!("kinds[{k}].lost"), "recovered and lost do not add up to a count".into()));
        }
        if !TELEMETRY_KINDS.contains(&kind.kind.as_str()) {
            lost = lost.saturating_add(kind.lost);
        }
    }
    if r.forgotten > lost {
        return Err(("forgotten".into(), format!("{} is more than the {lost} facts lost", r.forgotten)));
    }
    Ok(())
}

/// What serde cannot say about a GPU's per-process window: names within limits, at most
/// [`MAX_PODS_PER_PROCESS_WINDOW`] pods, each once, percentages that are percentages.
fn validate_process_telemetry(t: &ProcessTelemetry) -> Result<(), (String, String)> {
    if t.node.is_empty() || t.node.len() > 253 {
        return Err(("node".into(), "must be 1 to 253 characters".into()));
    }
    if t.gpu_uuid.is_empty() || t.gpu_uuid.len() > 200 {
        return Err(("gpu_uuid".into(), "must be 1 to 200 characters".into()));
    }
    if t.pods.len() > MAX_PODS_PER_PROCESS_WINDOW {
        return Err((
            "pods".into(),
            format!("{} pods; at most {MAX_PODS_PER_PROCESS_WINDOW} on one GPU", t.pods.len()),
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(t.pods.len());
    for (i, p) in t.pods.iter().enumerate() {
        if !seen.insert(p.pod_uid) {
            return Err((format!("pods[{i}].pod_uid"), format!("{} is listed twice", p.pod_uid)));
        }
        // Summed over a pod's processes a percentage stays one: the driver's SM activity of all processes on a
        // GPU is at most 100 %. A little slack for rounding between the driver's samples.
        for (name, stat) in [("sm_pct", Some(&p.sm_pct)), ("memory_pct", p.memory_pct.as_ref())] {
            let Some(stat) = stat else { continue };
            let ok = |v: f64| v.is_finite() && (0.0..=100.5).contains(&v);
            if !(ok(stat.min) && ok(stat.avg) && ok(stat.max))
                || stat.min > stat.avg + 1e-6
                || stat.avg > stat.max + 1e-6
            {
                return Err((
                    format!("pods[{i}].{name}"),
                    "must be percentages from 0 to 100 with min <= avg <= max".into(),
                ));
            }
        }
    }
    Ok(())
}

/// Server kinds an `endpoint_totals` fact may name (the agent reads these; the table's CHECK says the same).
const MODEL_SERVERS: [&str; 4] = ["vllm", "triton", "tgi", "nim"];

fn validate_endpoint_totals(
    t: &EndpointTotalsFact,
    field: &dyn Fn(&str) -> String,
    future: &dyn Fn(&str, OffsetDateTime) -> Result<(), AppError>,
) -> Result<(), AppError> {
    validate_work(
        field,
        future,
        &[("endpoint", &t.endpoint), ("model", &t.model)],
        (t.window_start, t.window_end),
        (t.ttft_ms_sum, t.ttft_count),
        &[("requests", t.requests), ("input_tokens", t.input_tokens), ("output_tokens", t.output_tokens)],
    )?;
    if !MODEL_SERVERS.contains(&t.server.as_str()) {
        return Err(AppError::invalid(
            field("server"),
            format!("{:?} is not one of {}", t.server, MODEL_SERVERS.join(", ")),
        ));
    }
    if t.pod.split_once('/').is_none_or(|(ns, name)| ns.is_empty() || name.is_empty()) || t.pod.chars().count() > 507 {
        return Err(AppError::invalid(field("pod"), "must be namespace/name"));
    }
    if let Some(q) = t.queue_depth
        && !(q.is_finite() && q >= 0.0)
    {
        return Err(AppError::invalid(field("queue_depth"), "must be a finite number, 0 or more"));
    }
    Ok(())
}

/// What productive-work facts (`service_usage`, `endpoint_totals`) have in common: names of 1 to
/// [`MAX_SERVICE_NAME_CHARS`] characters, a window that ends after it starts and not in the future, time to first
/// token as a pair (sum and count), and counts that fit the tables' bigint columns.
fn validate_work(
    field: &dyn Fn(&str) -> String,
    future: &dyn Fn(&str, OffsetDateTime) -> Result<(), AppError>,
    names: &[(&str, &String)],
    (start, end): (OffsetDateTime, OffsetDateTime),
    (ttft_ms_sum, ttft_count): (Option<u64>, Option<u64>),
    counts: &[(&str, u64)],
) -> Result<(), AppError> {
    for (name, value) in names {
        if value.trim().is_empty() || value.chars().count() > MAX_SERVICE_NAME_CHARS {
            return Err(AppError::invalid(field(name), format!("must be 1 to {MAX_SERVICE_NAME_CHARS} characters")));
        }
    }
    if end <= start {
        return Err(AppError::invalid(field("window_end"), "must be after window_start"));
    }
    future("window_end", end)?;
    match (ttft_ms_sum, ttft_count) {
        (Some(_), None) => return Err(AppError::invalid(field("ttft_count"), "required with ttft_ms_sum")),
        (None, Some(_)) => return Err(AppError::invalid(field("ttft_ms_sum"), "required with ttft_count")),
        _ => {}
    }
    let ttft = [("ttft_ms_sum", ttft_ms_sum.unwrap_or(0)), ("ttft_count", ttft_count.unwrap_or(0))];
    for (name, value) in counts.iter().chain(&ttft) {
        if i64::try_from(*value).is_err() {
            return Err(AppError::invalid(field(name), format!("{value} is larger than {}", i64::MAX)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use axum::http::HeaderValue;
    use proptest::prelude::*;
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn gzip_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        h
    }

    fn refusal(r: Result<Batch, AppError>) -> (String, String) {
        match r {
            Err(AppError::Invalid { field, reason }) => (field, reason),
            Err(AppError::PayloadTooLarge(reason)) => ("413".into(), reason),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    const ENVELOPE: &str = r#"{"wire_version":1,"agent":{"version":"x","mode":"cluster"},"facts":["#;

    #[test]
    fn a_gzip_bomb_of_tiny_values_is_refused_while_inflating() {
        // 30 MB of `0,` in ~30 KB of gzip: refused at the 10,001st fact, long before it is all inflated.
        let mut json = ENVELOPE.as_bytes().to_vec();
        json.extend(std::iter::repeat_n(b"0,".as_slice(), 15_000_000).flatten());
        json.extend_from_slice(b"0]}");
        let body = gzip(&json);
        assert!(body.len() < 100_000, "{}", body.len());
        let (field, reason) = refusal(decode(&gzip_headers(), &body, &IngestLimits::default()));
        assert_eq!(field, "facts");
        assert!(reason.contains("at most 10000 per batch"), "{reason}");
    }

    #[test]
    fn decoded_size_nesting_and_string_limits_are_named() {
        let limits = IngestLimits { max_decoded_bytes: 1024 * 1024, ..IngestLimits::default() };
        let strings = vec![format!("\"{}\"", "x".repeat(300)); 8_000].join(",");
        let big = format!("{ENVELOPE}{strings}]}}");
        let (field, reason) = refusal(decode(&gzip_headers(), &gzip(big.as_bytes()), &limits));
        assert_eq!(field, "413");
        assert!(reason.contains("larger than 1048576 bytes once decompressed"), "{reason}");
        let (field, _) = refusal(decode(&HeaderMap::new(), big.as_bytes(), &limits));
        assert_eq!(field, "413", "the same limit without compression");
        let deep = format!("{ENVELOPE}{{\"labels\":{}1{}}}]}}", "[".repeat(40), "]".repeat(40));
        let (field, reason) = refusal(decode(&HeaderMap::new(), deep.as_bytes(), &limits));
        assert!(field.starts_with("facts[0].labels"), "{field}");
        assert!(reason.contains("nested deeper than 16"), "{reason}");
        let long = format!("{ENVELOPE}{{\"event_id\":\"{}\"}}]}}", "e".repeat(70_000));
        let (field, reason) = refusal(decode(&HeaderMap::new(), long.as_bytes(), &limits));
        assert_eq!(field, "facts[0].event_id");
        assert!(reason.contains("longer than 65536"), "{reason}");
    }

    #[test]
    fn a_bad_fact_is_named_without_parsing_the_batch_as_a_tree() {
        let body = format!(
            "{ENVELOPE}{{\"event_id\":\"a\",\"observed_at\":\"2026-11-01T00:00:00Z\",\"kind\":\"gap\",\"from\":\"2026-11-01T00:00:00Z\",\"to\":\"2026-11-01T00:01:00Z\",\"dropped\":1}},\
             {{\"event_id\":\"b\",\"observed_at\":\"2026-11-01T00:00:00Z\",\"kind\":\"gap\",\"from\":\"yesterday\"}}]}}"
        );
        let (field, _) = refusal(decode(&HeaderMap::new(), body.as_bytes(), &IngestLimits::default()));
        assert_eq!(field, "facts[1].from");
        let body =
            format!("{ENVELOPE}{{\"event_id\":\"a\",\"observed_at\":\"2026-11-01T00:00:00Z\",\"kind\":\"nope\"}}]}}");
        let (field, reason) = refusal(decode(&HeaderMap::new(), body.as_bytes(), &IngestLimits::default()));
        assert_eq!((field.as_str(), reason.contains("unknown kind")), ("facts[0].kind", true));
        let body = format!("{ENVELOPE}{{\"observed_at\":\"2026-11-01T00:00:00Z\",\"kind\":\"gap\"}}]}}");
        let (field, reason) = refusal(decode(&HeaderMap::new(), body.as_bytes(), &IngestLimits::default()));
        assert_eq!((field.as_str(), reason.as_str()), ("facts[0].event_id", "missing"));
        let body = format!("{ENVELOPE}7]}}");
        let (field, reason) = refusal(decode(&HeaderMap::new(), body.as_bytes(), &IngestLimits::default()));
        assert_eq!((field.as_str(), reason.as_str()), ("facts[0]", "must be an object"));
    }

    #[test]
    fn windows_before_the_backfill_floor_or_in_the_future_are_refused_by_name() {
        let now = OffsetDateTime::now_utc();
        let window = Window { now, floor: now - Duration::days(30) };
        let telemetry = |start: OffsetDateTime| {
            let json = format!(
                "{ENVELOPE}{{\"event_id\":\"t\",\"observed_at\":\"{o}\",\"kind\":\"telemetry\",\"node\":\"n\",\"gpu_uuid\":\"GPU-x\",\
                 \"window_start\":\"{s}\",\"window_end\":\"{e}\",\"samples\":1,\"utilization_pct\":{{\"min\":0,\"avg\":0,\"max\":0}},\
                 \"memory_used_mib\":{{\"min\":0,\"avg\":0,\"max\":0}},\"power_w\":{{\"min\":1,\"avg\":1,\"max\":1}}}}]}}",
                o = now.format(&time::format_description::well_known::Rfc3339).unwrap(),
                s = start.format(&time::format_description::well_known::Rfc3339).unwrap(),
                e = (start + Duration::minutes(1)).format(&time::format_description::well_known::Rfc3339).unwrap(),
            );
            decode(&HeaderMap::new(), json.as_bytes(), &IngestLimits::default()).unwrap()
        };
        validate(&telemetry(now - Duration::days(29)), window).unwrap();
        for start in [
            time::macros::datetime!(0001-01-01 00:00 UTC),
            time::macros::datetime!(1970-01-01 00:00 UTC),
            now - Duration::days(31),
        ] {
            match validate(&telemetry(start), window) {
                Err(AppError::Invalid { field, reason }) => {
                    assert_eq!(field, "facts[0].window_start");
                    assert!(reason.contains("--ingest-backfill-days"), "{reason}");
                }
                other => panic!("{start}: {other:?}"),
            }
        }
        match validate(&telemetry(now + Duration::hours(1)), window) {
            Err(AppError::Invalid { field, .. }) => assert_eq!(field, "facts[0].window_end"),
            other => panic!("{other:?}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        /// Any bytes, plain or gzipped: decoded or refused (400/413/422), never a panic.
        #[test]
        fn any_body_is_answered(bytes in proptest::collection::vec(any::<u8>(), 0..1024), zip in any::<bool>()) {
            let (headers, body) = if zip { (gzip_headers(), gzip(&bytes)) } else { (HeaderMap::new(), bytes) };
            match decode(&headers, &body, &IngestLimits::default()) {
                Ok(_) | Err(AppError::Invalid { .. } | AppError::PayloadTooLarge(_)) => {}
                Err(other) => prop_assert!(false, "{other:?}"),
            }
        }

        /// Batches assembled from the wire's own pieces in any order: answered, never a panic; a batch that
        /// decodes has at most the facts allowed.
        #[test]
        fn any_piece_soup_is_answered(parts in proptest::collection::vec(proptest::sample::select(vec![
            "{", "}", "[", "]", ",", ":", "\"facts\"", "\"wire_version\"", "1", "\"agent\"", "{\"version\":\"x\",\"mode\":\"node\"}",
            "\"event_id\"", "\"e\"", "\"observed_at\"", "\"2026-11-01T00:00:00Z\"", "\"kind\"", "\"gap\"", "\"telemetry\"",
            "\"from\"", "\"to\"", "\"dropped\"", "null", "\"\\u0000\"", "\"\\\"\"", "-0.5e99",
        ]), 0..80)) {
            let text = parts.concat();
            if let Ok(b) = decode(&HeaderMap::new(), text.as_bytes(), &IngestLimits::default()) {
                prop_assert!(b.facts.len() <= MAX_FACTS_PER_BATCH);
            }
        }
    }
}
