//! `GET /metrics`: the server's operational metrics and the **identity exporter**, in the Prometheus text
//! exposition format 0.0.4 (written by hand: a few gauges and counters do not need a client library).
//!
//! Behind a credential like every read (an admin or export token as Bearer, or as the password of HTTP Basic;
//! a signed-in session also works), and read through the caller's organization-scoped transaction: one token
//! shows one organization, and a department-scoped caller only its departments' workloads.
//!
//! What it shows (see docs/prometheus.md for every name):
//! - `gpuledger_workload_identity{cluster,namespace,pod,tenant,department,model,gpu_class,gpu_model,sharing_mode} 1`:
//!   one line per workload holding GPU capacity now (an open allocation interval), with bounded labels only — no
//!   request, trace or agent-session IDs. `tenant`/`department` are the namespace's owner now (empty when the
//!   namespace has no owner), `model` the workload's `gpuledger.io/model` label, `gpu_class` the priced class.
//!   Prometheus recording rules join it with DCGM Exporter's series (`deploy/prometheus/`).
//! - `gpuledger_workload_allocated_gpus{…same labels…}`: the GPU-equivalents those workloads hold (inventory
//!   fractions; workloads whose profile is missing from the inventory are left out).
//! - organization gauges from the database (open allocations, agents' last contact and lag, data-quality
//!   findings, periods by state, disputes by state, open sessions) — shown to organization-wide callers only;
//! - counters kept by this process for the caller's organization: authenticated API requests by route class
//!   and status, ingest batches and the facts they carried (received, stored, flagged);
//! - `gpuledger_build_info` and the process start time.
//!
//! Counters are per process (each replica counts its own; Prometheus sums them) and start at zero at each start.
//! They are keyed by the organization named in clear in the request's credential, and only counted when the
//! credential was accepted (the answer is not 401), so a caller cannot write into another organization's counters.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    sync::{LazyLock, Mutex, MutexGuard},
    time::SystemTime,
};

use axum::{
    Router,
    body::{Body, HttpBody as _},
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
    routing::get,
};
use base64::Engine;
use gpuledger_core::wire::BatchAck;
use uuid::Uuid;

mod store;

use crate::{
    auth::{self, Capability, session},
    db::OrgTx,
    error::AppError,
    state::AppState,
};

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Largest ingest acknowledgement the counting middleware reads (a larger one is passed on uncounted).
const ACK_LIMIT: usize = 16 * 1024 * 1024;

/// `GET /metrics`.
pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

/// What the handler takes, for the API document.
pub(crate) fn inputs() -> Vec<crate::describe::Inputs> {
    vec![crate::describe::inputs("get", "/metrics", metrics)]
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, AppError> {
    let principal = auth::require(&state.db, &headers, Capability::ReadLedger).await?;
    let org_wide = principal.departments.is_none();
    let mut tx = principal.begin(&state.db).await?;
    let workloads = workloads(&mut tx, org_wide).await?;
    let gauges = if org_wide { Some(org_gauges(&mut tx).await?) } else { None };
    tx.commit().await?;
    let counters = counters_for(principal.org.as_uuid());
    let body = render(&workloads, gauges.as_ref(), &counters);
    let mut response = body.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    Ok(response)
}

// ---------------------------------------------------------------- what is read

/// One workload holding GPU capacity now, by its bounded labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Cluster name.
    pub cluster: String,
    /// Namespace name.
    pub namespace: String,
    /// Pod (or KubeVirt VMI) name.
    pub pod: String,
    /// The namespace's owner now; empty when none.
    pub tenant: String,
    /// The owner's department; empty when none.
    pub department: String,
    /// The model served or trained (`gpuledger.io/model`); empty when not labelled.
    pub model: String,
    /// The priced GPU class; empty when the inventory has none.
    pub gpu_class: String,
    /// The GPU product.
    pub gpu_model: String,
    /// `exclusive`, `mig`, `time_slice`, `vgpu`, `passthrough`, `shared_endpoint`.
    pub sharing_mode: String,
    /// GPU-equivalents held; `None` when the inventory had no fraction for one of its allocations.
    pub allocated_gpus: Option<f64>,
}

/// Open allocations grouped by their bounded labels. A department-scoped caller sees only workloads of tenants it
/// may see (PostgreSQL hides the others' tenant rows; unattributed workloads are left out for it).
async fn workloads(tx: &mut OrgTx, org_wide: bool) -> Result<Vec<Workload>, AppError> {
    let rows = store::open_workloads(tx, org_wide).await?;
    Ok(rows
        .into_iter()
        .map(|(cluster, namespace, pod, tenant, department, model, gpu_class, gpu_model, sharing_mode, gpus, gap)| {
            Workload {
                cluster,
                namespace,
                pod,
                tenant,
                department,
                model,
                gpu_class,
                gpu_model,
                sharing_mode,
                allocated_gpus: if gap { None } else { gpus },
            }
        })
        .collect())
}

/// Organization gauges read from the database.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrgGauges {
    /// Open allocation intervals by (cluster, sharing mode).
    pub open_allocations: Vec<(String, String, i64)>,
    /// Newest contact of any agent by (cluster, mode), Unix seconds.
    pub agent_last_seen: Vec<(String, String, f64)>,
    /// Largest reported lag by (cluster, mode), seconds.
    pub agent_lag: Vec<(String, String, i64)>,
    /// Data-quality findings by (cluster, kind).
    pub findings: Vec<(String, String, i64)>,
    /// Periods by state.
    pub periods: Vec<(String, i64)>,
    /// Disputes by state.
    pub disputes: Vec<(String, i64)>,
    /// Browser sessions not ended, expired or idle too long.
    pub open_sessions: i64,
    /// This month's department budgets (the latest setting), by department.
    pub budgets: Vec<(String, f64)>,
    /// This month's figure per department as the open month prices it (allocations still open to its end).
    pub projected: Vec<(String, f64)>,
    /// Webhook deliveries by state.
    pub deliveries: Vec<(String, i64)>,
    /// How full each agent's spool is, 0–1, by (cluster, mode, node).
    pub spool_fill: Vec<(String, String, String, f64)>,
}

/// The organization's gauges, read in `tx`.
async fn org_gauges(tx: &mut OrgTx) -> Result<OrgGauges, AppError> {
    let open_allocations = store::open_allocations(tx).await?;
    let contacts = store::agent_contacts(tx).await?;
    let findings = store::findings_by_kind(tx).await?;
    let periods = store::periods_by_state(tx).await?;
    let disputes = store::disputes_by_state(tx).await?;
    let open_sessions = store::open_sessions(tx).await?;
    let month = gpuledger_core::Period::containing(time::OffsetDateTime::now_utc()).first_day();
    let budgets = store::department_budgets(tx, month).await?;
    let projected = store::projected_totals(tx, month).await?;
    let deliveries = store::deliveries_by_state(tx).await?;
    let spool_fill = store::spool_fill(tx).await?;
    Ok(OrgGauges {
        spool_fill,
        budgets,
        projected,
        deliveries,
        open_allocations,
        agent_last_seen: contacts.iter().map(|(c, m, t, _)| (c.clone(), m.clone(), *t)).collect(),
        agent_lag: contacts.iter().filter_map(|(c, m, _, l)| l.map(|l| (c.clone(), m.clone(), l))).collect(),
        findings,
        periods,
        disputes,
        open_sessions,
    })
}

// ---------------------------------------------------------------- counters kept by the process

/// Counters of one organization.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrgCounters {
    /// Authenticated API requests by (route class, status code).
    pub requests: BTreeMap<(&'static str, u16), u64>,
    /// Ingest batches by status code.
    pub batches: BTreeMap<u16, u64>,
    /// Facts in acknowledged batches.
    pub facts_received: u64,
    /// Facts newly stored (the rest were duplicates).
    pub facts_stored: u64,
    /// Facts stored with a data-quality flag.
    pub facts_flagged: u64,
    /// Transactions of telemetry batches stored together (ingest's group commit).
    pub ingest_groups: u64,
    /// Batches stored in those transactions.
    pub ingest_grouped_batches: u64,
}

static COUNTERS: LazyLock<Mutex<HashMap<Uuid, OrgCounters>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
static STARTED: LazyLock<SystemTime> = LazyLock::new(SystemTime::now);

fn counters() -> MutexGuard<'static, HashMap<Uuid, OrgCounters>> {
    // A panic while holding the lock leaves plain numbers behind: still usable.
    COUNTERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counts a group commit of `batches` telemetry batches for `org`.
pub fn count_ingest_group(org: Uuid, batches: usize) {
    let mut all = counters();
    let c = all.entry(org).or_default();
    c.ingest_groups += 1;
    c.ingest_grouped_batches += batches as u64;
}

/// A copy of an organization's counters (zero when it made no request yet).
pub fn counters_for(org: Uuid) -> OrgCounters {
    counters().get(&org).cloned().unwrap_or_default()
}

/// The route class a path is counted under; `None` for public paths (health, documents, portal pages, sign-in),
/// which are not counted for any organization.
pub fn route_class(path: &str) -> Option<&'static str> {
    if path == "/metrics" {
        Some("metrics")
    } else if path.starts_with("/api/v1/ingest/") {
        Some("ingest")
    } else if path == "/api/v1/agents/join" {
        Some("join")
    } else if path.starts_with("/api/v1/exports/") {
        Some("exports")
    } else if path == "/odata" || path.starts_with("/odata/") {
        Some("odata")
    } else if path == "/api/v1/openapi.json" {
        None
    } else if path.starts_with("/api/v1/") {
        Some("api")
    } else {
        None
    }
}

/// The organization a request's credential names in clear (API token or session cookie). Not verified here: the
/// count is only kept when the handler accepted the credential.
pub fn claimed_org(headers: &HeaderMap) -> Option<Uuid> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let token = if let Some(t) = value.strip_prefix("Bearer ") {
            t.trim().to_string()
        } else {
            let decoded =
                base64::engine::general_purpose::STANDARD.decode(value.strip_prefix("Basic ")?.trim()).ok()?;
            String::from_utf8(decoded).ok()?.split_once(':')?.1.to_string()
        };
        let (org, _) = token.strip_prefix("glt_")?.split_once('_')?;
        return Uuid::try_parse(org).ok();
    }
    let cookie = session::cookie_value(headers)?;
    Uuid::try_parse(cookie.split_once('.')?.0).ok()
}

/// Middleware counting authenticated API requests by organization, route class and status, and the facts of
/// acknowledged ingest batches (read from the acknowledgement, so ingest itself needs no change).
pub async fn track(request: Request, next: Next) -> Response {
    let class = route_class(request.uri().path());
    let org = class.and(claimed_org(request.headers()));
    let response = next.run(request).await;
    let (Some(class), Some(org)) = (class, org) else {
        return response;
    };
    let status = response.status();
    if status == StatusCode::UNAUTHORIZED {
        return response;
    }
    {
        let mut all = counters();
        let c = all.entry(org).or_default();
        *c.requests.entry((class, status.as_u16())).or_default() += 1;
        if class == "ingest" {
            *c.batches.entry(status.as_u16()).or_default() += 1;
        }
    }
    if class != "ingest" || status != StatusCode::OK {
        return response;
    }
    // Only a body of known, bounded size is read (a JSON acknowledgement is one buffer); anything else passes
    // through uncounted rather than being consumed.
    if response.body().size_hint().upper().is_none_or(|n| n > ACK_LIMIT as u64) {
        return response;
    }
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, ACK_LIMIT).await {
        Ok(bytes) => {
            if let Ok(ack) = serde_json::from_slice::<BatchAck>(&bytes) {
                let mut all = counters();
                let c = all.entry(org).or_default();
                c.facts_received += ack.received;
                c.facts_stored += ack.stored;
                c.facts_flagged += ack.flagged.len() as u64;
            }
            Response::from_parts(parts, Body::from(bytes))
        }
        // The body failed while being read: the client would have got an error either way.
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "acknowledgement could not be relayed").into_response(),
    }
}

// ---------------------------------------------------------------- rendering

/// Escapes a label value (backslash, double quote, line feed).
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A sample value: integers without a fraction, `NaN`/`+Inf`/`-Inf` as the format spells them.
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

/// Writes the exposition, family by family.
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(val));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", value(v));
    }
}

/// The whole exposition for one caller.
pub fn render(workloads: &[Workload], gauges: Option<&OrgGauges>, counters: &OrgCounters) -> String {
    let mut e = Exposition { out: String::new() };
    e.family("gpuledger_build_info", "gauge", "The server's version (always 1).");
    e.sample("gpuledger_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    e.family("gpuledger_process_start_time_seconds", "gauge", "When this server process started, Unix seconds.");
    let started = STARTED.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default();
    e.sample("gpuledger_process_start_time_seconds", &[], started.floor());

    let labels = |w: &Workload| -> [(&'static str, String); 9] {
        [
            ("cluster", w.cluster.clone()),
            ("namespace", w.namespace.clone()),
            ("pod", w.pod.clone()),
            ("tenant", w.tenant.clone()),
            ("department", w.department.clone()),
            ("model", w.model.clone()),
            ("gpu_class", w.gpu_class.clone()),
            ("gpu_model", w.gpu_model.clone()),
            ("sharing_mode", w.sharing_mode.clone()),
        ]
    };
    e.family(
        "gpuledger_workload_identity",
        "gauge",
        "A workload holding GPU capacity now, with its owner (always 1; join DCGM series on cluster, namespace, pod).",
    );
    for w in workloads {
        let l = labels(w);
        let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
        e.sample("gpuledger_workload_identity", &l, 1.0);
    }
    e.family(
        "gpuledger_workload_allocated_gpus",
        "gauge",
        "GPU-equivalents a workload holds now (approved inventory fractions).",
    );
    for w in workloads {
        if let Some(gpus) = w.allocated_gpus {
            let l = labels(w);
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            e.sample("gpuledger_workload_allocated_gpus", &l, gpus);
        }
    }

    if let Some(g) = gauges {
        e.family("gpuledger_open_allocations", "gauge", "Allocation intervals open now.");
        for (cluster, mode, n) in &g.open_allocations {
            e.sample("gpuledger_open_allocations", &[("cluster", cluster), ("sharing_mode", mode)], *n as f64);
        }
        e.family(
            "gpuledger_agent_last_seen_timestamp_seconds",
            "gauge",
            "Newest batch received from a cluster's agents of a mode, Unix seconds (age: time() - this).",
        );
        for (cluster, mode, t) in &g.agent_last_seen {
            e.sample("gpuledger_agent_last_seen_timestamp_seconds", &[("cluster", cluster), ("mode", mode)], *t);
        }
        e.family(
            "gpuledger_agent_lag_seconds",
            "gauge",
            "Largest lag an agent reported with its last batch (now minus its newest observation).",
        );
        for (cluster, mode, lag) in &g.agent_lag {
            e.sample("gpuledger_agent_lag_seconds", &[("cluster", cluster), ("mode", mode)], *lag as f64);
        }
        e.family("gpuledger_data_quality_findings", "gauge", "Data-quality findings stored, by kind.");
        for (cluster, kind, n) in &g.findings {
            e.sample("gpuledger_data_quality_findings", &[("cluster", cluster), ("kind", kind)], *n as f64);
        }
        e.family("gpuledger_periods", "gauge", "Billing periods by state (open, closing, closed).");
        for (state, n) in &g.periods {
            e.sample("gpuledger_periods", &[("state", state)], *n as f64);
        }
        e.family("gpuledger_disputes", "gauge", "Disputes by state.");
        for (state, n) in &g.disputes {
            e.sample("gpuledger_disputes", &[("state", state)], *n as f64);
        }
        e.family("gpuledger_sessions_open", "gauge", "Browser sessions open now.");
        e.sample("gpuledger_sessions_open", &[], g.open_sessions as f64);
        e.family("gpuledger_budget_amount", "gauge", "This month's budget of a department, in the policy's currency.");
        for (department, amount) in &g.budgets {
            e.sample("gpuledger_budget_amount", &[("department", department)], *amount);
        }
        e.family(
            "gpuledger_month_projected_amount",
            "gauge",
            "This month's figure of a department as the open month prices it (allocations still open to its end).",
        );
        for (department, amount) in &g.projected {
            e.sample("gpuledger_month_projected_amount", &[("department", department)], *amount);
        }
        e.family(
            "gpuledger_agent_spool_fill_ratio",
            "gauge",
            "How full an agent's spool was at its last batch (bytes on disk / its cap); at 1 the oldest facts are dropped.",
        );
        for (cluster, mode, node, ratio) in &g.spool_fill {
            e.sample(
                "gpuledger_agent_spool_fill_ratio",
                &[("cluster", cluster), ("mode", mode), ("node", node)],
                *ratio,
            );
        }
        e.family("gpuledger_webhook_deliveries", "gauge", "Webhook deliveries by state (pending, delivered, failed).");
        for (state, n) in &g.deliveries {
            e.sample("gpuledger_webhook_deliveries", &[("state", state)], *n as f64);
        }
    }

    e.family(
        "gpuledger_http_requests_total",
        "counter",
        "Authenticated API requests of this organization answered by this process, by route class and status.",
    );
    for ((class, code), n) in &counters.requests {
        e.sample("gpuledger_http_requests_total", &[("route_class", class), ("code", &code.to_string())], *n as f64);
    }
    e.family("gpuledger_ingest_batches_total", "counter", "Agent batches answered by this process, by status.");
    for (code, n) in &counters.batches {
        e.sample("gpuledger_ingest_batches_total", &[("code", &code.to_string())], *n as f64);
    }
    e.family("gpuledger_ingest_facts_received_total", "counter", "Facts in acknowledged agent batches.");
    e.sample("gpuledger_ingest_facts_received_total", &[], counters.facts_received as f64);
    e.family("gpuledger_ingest_facts_stored_total", "counter", "Facts newly stored (the rest were duplicates).");
    e.sample("gpuledger_ingest_facts_stored_total", &[], counters.facts_stored as f64);
    e.family("gpuledger_ingest_facts_flagged_total", "counter", "Facts stored with a data-quality flag.");
    e.sample("gpuledger_ingest_facts_flagged_total", &[], counters.facts_flagged as f64);
    e.family(
        "gpuledger_ingest_group_commits_total",
        "counter",
        "Transactions that stored agents' telemetry batches together (group commit).",
    );
    e.sample("gpuledger_ingest_group_commits_total", &[], counters.ingest_groups as f64);
    e.family(
        "gpuledger_ingest_grouped_batches_total",
        "counter",
        "Telemetry batches stored by those transactions (÷ commits: batches per transaction).",
    );
    e.sample("gpuledger_ingest_grouped_batches_total", &[], counters.ingest_grouped_batches as f64);
    e.out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn workload(pod: &str, tenant: &str) -> Workload {
        Workload {
            cluster: "prod".into(),
            namespace: "ns".into(),
            pod: pod.into(),
            tenant: tenant.into(),
            department: "Research".into(),
            model: String::new(),
            gpu_class: "H100".into(),
            gpu_model: "NVIDIA H100 80GB HBM3".into(),
            sharing_mode: "mig".into(),
            allocated_gpus: Some(3.0 / 7.0),
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        let out = render(&[workload("we\"ird\\pod\n", "t")], None, &OrgCounters::default());
        assert!(out.contains(r#"pod="we\"ird\\pod\n""#), "{out}");
        assert!(out.lines().all(|l| !l.is_empty()));
    }

    #[test]
    fn every_line_is_a_comment_or_a_sample() {
        let mut counters = OrgCounters::default();
        counters.requests.insert(("api", 200), 3);
        counters.batches.insert(200, 2);
        counters.facts_received = 10;
        let gauges = OrgGauges {
            open_allocations: vec![("prod".into(), "mig".into(), 4)],
            agent_last_seen: vec![("prod".into(), "node".into(), 1.7e9)],
            agent_lag: vec![("prod".into(), "node".into(), 12)],
            periods: vec![("closed".into(), 2)],
            ..OrgGauges::default()
        };
        let out = render(&[workload("a", "t"), workload("b", "")], Some(&gauges), &counters);
        for line in out.lines() {
            let ok = line.starts_with("# HELP ")
                || line.starts_with("# TYPE ")
                || line.rsplit_once(' ').is_some_and(|(_, v)| v.parse::<f64>().is_ok());
            assert!(ok, "not a comment or a sample: {line}");
        }
        assert!(out.contains("gpuledger_http_requests_total{route_class=\"api\",code=\"200\"} 3\n"));
        assert!(out.contains("gpuledger_ingest_facts_received_total 10\n"));
        assert!(
            out.contains("gpuledger_agent_last_seen_timestamp_seconds{cluster=\"prod\",mode=\"node\"} 1700000000\n")
        );
        assert_eq!(out.lines().filter(|l| l.starts_with("gpuledger_workload_identity{")).count(), 2);
        assert!(out.contains("gpuledger_workload_allocated_gpus{cluster=\"prod\""));
    }

    #[test]
    fn route_classes_and_claimed_organizations() {
        assert_eq!(route_class("/metrics"), Some("metrics"));
        assert_eq!(route_class("/api/v1/ingest/batches"), Some("ingest"));
        assert_eq!(route_class("/api/v1/openapi.json"), None);
        assert_eq!(route_class("/odata/LedgerLines"), Some("odata"));
        assert_eq!(route_class("/api/v1/ledger"), Some("api"));
        assert_eq!(route_class("/healthz"), None);
        assert_eq!(route_class("/admin"), None);
        let org = Uuid::new_v4();
        let token = format!("glt_{}_{}", org.simple(), "ab".repeat(32));
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
        assert_eq!(claimed_org(&h), Some(org));
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("powerbi:{token}"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Basic {basic}")).unwrap());
        assert_eq!(claimed_org(&h), Some(org));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer nonsense"));
        assert_eq!(claimed_org(&h), None);
    }

    #[test]
    fn values_are_spelled_as_the_format_wants() {
        assert_eq!(value(1.0), "1");
        assert_eq!(value(0.5), "0.5");
        assert_eq!(value(f64::NAN), "NaN");
        assert_eq!(value(f64::INFINITY), "+Inf");
    }
}
