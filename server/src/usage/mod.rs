//! Usage records from gateways and model servers (issue 8).
//!
//! `POST /api/v1/usage/records` (an agent token: the cluster the gateway runs in), `Content-Type:
//! application/x-ndjson`, one JSON record per line — a request, or a minute's totals (`window_end` and
//! `requests`). Idempotent by `record_id`. The tenant is the record's `tenant` if such a tenant exists, else what
//! the endpoint's aliases map its `gateway_key` or `team` to (`PUT /api/v1/endpoints/{endpoint}/aliases`, admins);
//! a record that resolves to nobody is kept and reported (`unknown`), never dropped, and is attributed once the
//! tenant or alias exists. One bad line refuses the whole body (the problem names `line N: field`), so a gateway's
//! retry after fixing it cannot half-apply.
//!
//! The ledger prices an endpoint's service term from these records when it has any in the month (they are the
//! per-tenant attribution), otherwise from the agents' model-server `service_usage` facts.

use std::collections::{BTreeMap, HashMap};

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{post, put},
};
use gpuledger_api::{
    params::EndpointPath,
    usage::{Alias, Aliases, AliasesRequest, AliasesSet, UnknownCaller, UsageAck},
};
use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

mod store;

use crate::{
    auth,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Administer, Caller, JsonBody, PathParams},
    state::AppState,
};

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("post", "/api/v1/usage/records", post_records),
        described("get", "/api/v1/endpoints/{endpoint}/aliases", get_aliases),
        described("put", "/api/v1/endpoints/{endpoint}/aliases", put_aliases),
    ]
}

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/usage/records", post(post_records))
        .route("/api/v1/endpoints/{endpoint}/aliases", put(put_aliases).get(get_aliases))
}

/// Most records in one body.
pub const MAX_RECORDS: usize = 10_000;
const MAX_TEXT: usize = 200;

/// One usage record as a gateway sends it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageRecord {
    /// The sender's unique ID for this record (a retry sends the same).
    pub record_id: String,
    /// Endpoint name (the `endpoint` attribution label of its pods).
    pub endpoint: String,
    /// Model.
    pub model: String,
    /// Model version, when the gateway knows it.
    #[serde(default)]
    pub model_version: Option<String>,
    /// Tenant name.
    #[serde(default)]
    pub tenant: Option<String>,
    /// The caller's gateway key (an alias of the endpoint maps it to a tenant).
    #[serde(default)]
    pub gateway_key: Option<String>,
    /// The caller's team (an alias of the endpoint maps it to a tenant).
    #[serde(default)]
    pub team: Option<String>,
    /// When the request started (or the aggregated window's start).
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// End of a pre-aggregated window; absent for one request.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub window_end: Option<OffsetDateTime>,
    /// Requests the record covers (1 for a single request).
    #[serde(default = "one")]
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// `ok`, `error` or `cancelled`.
    #[serde(default = "ok")]
    pub status: String,
    /// End-to-end latency, milliseconds.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// Time to first token, milliseconds (for a window, the mean over its requests).
    #[serde(default)]
    pub ttft_ms: Option<u64>,
    /// Trace ID (kept for disputes; never a metric label).
    #[serde(default)]
    pub trace_id: Option<String>,
    /// The AI-agent session this request belongs to.
    #[serde(default)]
    pub agent_session_id: Option<String>,
}

fn one() -> u64 {
    1
}

fn ok() -> String {
    "ok".into()
}

/// Parses and checks an NDJSON body: every error names the line (1-based) and the field.
pub fn parse_records(body: &[u8], now: OffsetDateTime) -> Result<Vec<UsageRecord>, AppError> {
    parse_ndjson(body, MAX_RECORDS, "records", |r| check(r, now))
}

/// Shape of one NDJSON record (a usage record or a training report: a flat object of a dozen short fields).
const RECORD_LIMITS: crate::limits::JsonLimits =
    crate::limits::JsonLimits { max_depth: 4, max_string_bytes: 4096, max_items: 200, max_values: 1_000 };

/// Parses an NDJSON body (one JSON object per line; blank lines skipped) into at most `max` values, each checked by
/// `check`. Every refusal names `line N` and the field, so a sender can fix the line and resend the whole body.
pub(crate) fn parse_ndjson<T: serde::de::DeserializeOwned>(
    body: &[u8],
    max: usize,
    what: &str,
    check: impl Fn(&T) -> Result<(), (&'static str, String)>,
) -> Result<Vec<T>, AppError> {
    let text = std::str::from_utf8(body).map_err(|e| AppError::invalid("body", format!("not UTF-8: {e}")))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        if out.len() == max {
            return Err(AppError::invalid("body", format!("more than {max} {what}; send them in parts")));
        }
        // A record is a flat object of short fields: its shape is bounded before it is parsed.
        crate::limits::JsonGuard::check(RECORD_LIMITS, line.as_bytes())
            .map_err(|hit| AppError::invalid(format!("line {n}: {}", hit.at), hit.reason))?;
        let de = &mut serde_json::Deserializer::from_str(line);
        let value: T = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." { format!("line {n}") } else { format!("line {n}: {path}") };
            AppError::invalid(at, e.inner().to_string())
        })?;
        check(&value).map_err(|(field, reason)| AppError::invalid(format!("line {n}: {field}"), reason))?;
        out.push(value);
    }
    if out.is_empty() {
        return Err(AppError::invalid("body", format!("no {what} (one JSON object per line)")));
    }
    Ok(out)
}

fn check(r: &UsageRecord, now: OffsetDateTime) -> Result<(), (&'static str, String)> {
    let text = |field: &'static str, v: &str, required: bool| {
        if (required && v.trim().is_empty()) || v.chars().count() > MAX_TEXT || v.chars().any(char::is_control) {
            Err((field, format!("must be {}to {MAX_TEXT} printable characters", if required { "1 " } else { "up " })))
        } else {
            Ok(())
        }
    };
    text("record_id", &r.record_id, true)?;
    text("endpoint", &r.endpoint, true)?;
    text("model", &r.model, true)?;
    for (field, v) in [
        ("model_version", &r.model_version),
        ("tenant", &r.tenant),
        ("gateway_key", &r.gateway_key),
        ("team", &r.team),
        ("trace_id", &r.trace_id),
        ("agent_session_id", &r.agent_session_id),
    ] {
        if let Some(v) = v {
            text(field, v, true)?;
        }
    }
    if r.tenant.is_none() && r.gateway_key.is_none() && r.team.is_none() {
        return Err(("tenant", "one of tenant, gateway_key or team is required".into()));
    }
    if !["ok", "error", "cancelled"].contains(&r.status.as_str()) {
        return Err(("status", format!("{:?} is not ok, error or cancelled", r.status)));
    }
    if r.requests == 0 {
        return Err(("requests", "must be at least 1".into()));
    }
    if r.requests > 1 && r.window_end.is_none() {
        return Err(("window_end", "required when a record covers more than one request".into()));
    }
    if let Some(end) = r.window_end
        && end <= r.started_at
    {
        return Err(("window_end", "must be after started_at".into()));
    }
    // A little clock skew is tolerated; a record from the future is not.
    if r.started_at > now + time::Duration::minutes(5) {
        return Err(("started_at", "is in the future".into()));
    }
    for (field, v) in [
        ("requests", Some(r.requests)),
        ("input_tokens", Some(r.input_tokens)),
        ("output_tokens", Some(r.output_tokens)),
        ("latency_ms", r.latency_ms),
        ("ttft_ms", r.ttft_ms),
    ] {
        if v.is_some_and(|v| i64::try_from(v).is_err()) {
            return Err((field, format!("is larger than {}", i64::MAX)));
        }
    }
    Ok(())
}

fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

async fn post_records(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Json<UsageAck>, AppError> {
    // The credential first: a caller that may not send records is refused whatever the body is.
    let principal = auth::authenticate(&state.db, request.headers()).await?;
    let Some(cluster) = principal.agent_cluster() else {
        return Err(AppError::Forbidden("usage records are sent with an agent token (the gateway's cluster)".into()));
    };
    let body = crate::http::body_bytes(request, &state).await?;
    let records = parse_records(&body, OffsetDateTime::now_utc())?;
    let mut tx = principal.begin(&state.db).await?;
    let n = records.len();
    let mut cols: BTreeMap<&str, Vec<Option<String>>> = BTreeMap::new();
    let mut ints: BTreeMap<&str, Vec<Option<i64>>> = BTreeMap::new();
    let mut starts = Vec::with_capacity(n);
    let mut ends = Vec::with_capacity(n);
    for r in &records {
        for (k, v) in [
            ("record_id", Some(r.record_id.clone())),
            ("endpoint", Some(r.endpoint.clone())),
            ("model", Some(r.model.clone())),
            ("model_version", r.model_version.clone()),
            ("tenant", r.tenant.clone()),
            ("gateway_key", r.gateway_key.clone()),
            ("team", r.team.clone()),
            ("status", Some(r.status.clone())),
            ("trace_id", r.trace_id.clone()),
            ("agent_session_id", r.agent_session_id.clone()),
        ] {
            cols.entry(k).or_default().push(v);
        }
        for (k, v) in [
            ("requests", Some(r.requests)),
            ("input_tokens", Some(r.input_tokens)),
            ("output_tokens", Some(r.output_tokens)),
            ("latency_ms", r.latency_ms),
            ("ttft_ms", r.ttft_ms),
        ] {
            ints.entry(k).or_default().push(v.map(big));
        }
        starts.push(r.started_at);
        ends.push(r.window_end);
    }
    let col = |k: &str| cols.get(k).cloned().unwrap_or_default();
    let int = |k: &str| ints.get(k).cloned().unwrap_or_default();
    // The tenant: by name, else by the endpoint's gateway-key alias, else by its team alias; and its department
    // (what department managers see the record under). Looked up first: Citus cannot push an insert whose rows
    // join other tables to a shard (crate::bulk).
    let org = principal.org.as_uuid();
    let endpoints: Vec<&str> = records.iter().map(|r| r.endpoint.as_str()).collect();
    let aliases = store::caller_aliases(&mut tx, org, &endpoints).await?;
    let names: Vec<&str> = records.iter().filter_map(|r| r.tenant.as_deref()).collect();
    let alias_ids: Vec<Uuid> = aliases.values().copied().collect();
    let tenants = store::tenants_named_or_with_ids(&mut tx, org, &names, &alias_ids).await?;
    let by_name: HashMap<&str, Uuid> = tenants.iter().map(|(id, n, _)| (n.as_str(), *id)).collect();
    let department: HashMap<Uuid, Uuid> = tenants.iter().map(|(id, _, d)| (*id, *d)).collect();
    let alias = |r: &UsageRecord, kind: &str, value: &Option<String>| {
        value.as_ref().and_then(|v| aliases.get(&(r.endpoint.clone(), kind.to_string(), v.clone())).copied())
    };
    let tenant_ids: Vec<Option<Uuid>> = records
        .iter()
        .map(|r| {
            r.tenant
                .as_deref()
                .and_then(|n| by_name.get(n).copied())
                .or_else(|| alias(r, "gateway_key", &r.gateway_key))
                .or_else(|| alias(r, "team", &r.team))
        })
        .collect();
    let department_ids: Vec<Option<Uuid>> =
        tenant_ids.iter().map(|t| t.and_then(|t| department.get(&t).copied())).collect();
    let cluster_id = cluster.as_uuid();
    let columns = store::RecordColumns {
        record_id: col("record_id"),
        endpoint: col("endpoint"),
        model: col("model"),
        model_version: col("model_version"),
        tenant: col("tenant"),
        gateway_key: col("gateway_key"),
        team: col("team"),
        tenant_ids,
        department_ids,
        starts,
        ends,
        requests: int("requests"),
        input_tokens: int("input_tokens"),
        output_tokens: int("output_tokens"),
        status: col("status"),
        latency_ms: int("latency_ms"),
        ttft_ms: int("ttft_ms"),
        trace_id: col("trace_id"),
        agent_session_id: col("agent_session_id"),
    };
    let inserted = store::insert_records(&mut tx, org, cluster_id, &columns).await?;
    tx.commit().await?;
    let unknown: Vec<UnknownCaller> = {
        let new_unknown: std::collections::HashSet<&str> =
            inserted.iter().filter(|(_, t)| t.is_none()).map(|(id, _)| id.as_str()).collect();
        records
            .iter()
            .enumerate()
            .filter(|(_, r)| new_unknown.contains(r.record_id.as_str()))
            .map(|(i, r)| {
                // The line and record ID only: the sender has the rest (and echoing names helps nobody).
                UnknownCaller {
                    line: i + 1,
                    record_id: r.record_id.clone(),
                    reason: "no such tenant, and no alias of this endpoint maps its gateway_key or team".into(),
                }
            })
            .collect()
    };
    Ok(Json(UsageAck { received: n, stored: inserted.len(), duplicates: n - inserted.len(), unknown }))
}

async fn get_aliases(
    State(state): State<AppState>,
    p: Caller<Administer>,
    PathParams(path): PathParams<EndpointPath>,
) -> Result<Json<Aliases>, AppError> {
    let endpoint = path.endpoint.into_inner();
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let rows = store::endpoint_aliases(&mut tx, org, &endpoint).await?;
    tx.commit().await?;
    let aliases = rows.into_iter().map(|(kind, alias, tenant)| Alias { kind: kind.0, alias, tenant }).collect();
    Ok(Json(Aliases { endpoint, aliases }))
}

/// Replaces an endpoint's aliases; records kept without a tenant that the new aliases resolve are attributed.
async fn put_aliases(
    State(state): State<AppState>,
    p: Caller<Administer>,
    PathParams(path): PathParams<EndpointPath>,
    JsonBody(body): JsonBody<AliasesRequest>,
) -> Result<(StatusCode, Json<AliasesSet>), AppError> {
    let endpoint = path.endpoint.into_inner();
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    store::delete_aliases(&mut tx, org, &endpoint).await?;
    for (i, a) in body.aliases.iter().enumerate() {
        let tenant = store::tenant_by_name_or_id(&mut tx, org, a.tenant.as_str()).await?;
        let Some(tenant) = tenant else {
            return Err(AppError::unknown(
                format!("aliases[{i}].tenant"),
                format!("no tenant {:?}", a.tenant.as_str()),
            ));
        };
        store::insert_alias(&mut tx, p.org.as_uuid(), &endpoint, a.kind.as_str(), a.alias.as_str(), tenant)
            .await
            .map_err(|e| match AppError::from(e) {
                AppError::Conflict(_) => AppError::refused(format!("aliases[{i}].alias"), "given twice"),
                other => other,
            })?;
    }
    let attributed = store::attribute_by_aliases(&mut tx, org, &endpoint).await?;
    tx.audit_by(
        &p,
        "endpoint.aliases",
        &format!("endpoint:{endpoint}"),
        "",
        json!({ "aliases": body.aliases.len(), "attributed": attributed }),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::OK, Json(AliasesSet { endpoint, aliases: body.aliases.len(), attributed })))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-29 12:00 UTC);

    fn field(body: &str) -> String {
        match parse_records(body.as_bytes(), NOW).unwrap_err() {
            AppError::Invalid { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn records_parse_with_defaults_and_every_refusal_names_line_and_field() {
        let ok = r#"{"record_id":"r1","endpoint":"llm","model":"m","tenant":"nlp","started_at":"2026-11-29T10:00:00Z","input_tokens":10,"output_tokens":20}"#;
        let rs = parse_records(format!("{ok}\n\n").as_bytes(), NOW).unwrap();
        assert_eq!((rs[0].requests, rs[0].status.as_str(), rs[0].window_end), (1, "ok", None));
        let line2 = |s: &str| format!("{ok}\n{s}");
        assert_eq!(field(&line2(&ok.replace(r#""tenant":"nlp","#, ""))), "line 2: tenant");
        assert_eq!(field(&line2(&ok.replace(r#""input_tokens":10"#, r#""input_tokens":-1"#))), "line 2: input_tokens");
        assert_eq!(field(&line2(&ok.replace("}", r#","requests":5}"#))), "line 2: window_end");
        assert_eq!(field(&line2(&ok.replace("}", r#","status":"meh"}"#))), "line 2: status");
        assert_eq!(field(&line2(&ok.replace("2026-11-29T10", "2026-12-29T10"))), "line 2: started_at");
        assert_eq!(field(&line2(&ok.replace("}", r#","colour":"red"}"#))), "line 2: colour");
        assert_eq!(field(&line2("not json")), "line 2");
        assert_eq!(field(&line2(&ok.replace(r#""record_id":"r1""#, r#""record_id":"""#))), "line 2: record_id");
        assert_eq!(field(""), "body");
        let window = ok.replace("}", r#","requests":5,"window_end":"2026-11-29T10:01:00Z","ttft_ms":120}"#);
        let rs = parse_records(window.as_bytes(), NOW).unwrap();
        assert_eq!((rs[0].requests, rs[0].ttft_ms), (5, Some(120)));
    }
}
