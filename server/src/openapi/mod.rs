//! `/api/v1/openapi.json`: the REST API's OpenAPI 3.1 document. Each operation is one [`Op`] line below; its
//! request and answer schemas are generated from the `gpuledger-api` types the handlers use (their
//! `schemars::JsonSchema` derives), so a field renamed in the contract is renamed here too. Tests check that
//! every route of the server is documented with its methods and that every documented operation answers.

use axum::{Json, Router, routing::get};
use gpuledger_api::{
    Problem, analytics,
    auth::{
        AuditLog, CreatedToken, Me, NewToken, ProviderBody, ProviderSettings, Revoked, RoleMappings, RoleMappingsBody,
        TokenList,
    },
    close, disputes,
    health::{Alive, Ready},
    ingest, ledger,
    policy::{CreatedQuota, Impact, KueueImport, PolicyBody, PolicyList, PolicyVersion, QuotaBody, QuotaList},
    schemars::{JsonSchema, SchemaGenerator, generate::Contract, generate::SchemaSettings},
    training, usage,
};
use serde_json::{Map, Value, json};

use crate::app::AppState;

mod foresight;
mod tenancy;

/// `GET /api/v1/openapi.json`.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/openapi.json", get(|| async { Json(document()) }))
}

/// A schema generator's entry point for one contract type: adds it (and what it refers to) to the components and
/// gives the `$ref` to it.
type SchemaOf = fn(&mut SchemaGenerator) -> Value;

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    g.subschema_for::<T>().to_value()
}

/// What a successful answer carries.
enum Content {
    /// JSON of a contract type.
    Json(SchemaOf),
    /// JSON described by a hand-written component (documents whose format has its own specification).
    Component(&'static str),
    /// Text of a media type (`text/csv`, Prometheus text).
    Text(&'static str),
    /// No body (204).
    Nothing,
}

impl Content {
    /// The `content` object of a request body or an answer (`None`: no body).
    fn render(&self, g: &mut SchemaGenerator) -> Option<Value> {
        match self {
            Self::Json(schema) => Some(json!({"application/json": {"schema": schema(g)}})),
            Self::Component(name) => {
                Some(json!({"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}))
            }
            Self::Text(media) => Some(json!({ *media: {"schema": {"type": "string"}}})),
            Self::Nothing => None,
        }
    }
}

/// One operation of the document.
pub struct Op {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    security: bool,
    parameters: Vec<Value>,
    body: Option<Content>,
    ok: Option<(u16, &'static str, Content)>,
    errors: &'static [u16],
}

impl Op {
    fn new(method: &'static str, path: &'static str, summary: &'static str) -> Self {
        Self { method, path, summary, security: false, parameters: Vec::new(), body: None, ok: None, errors: &[] }
    }
    fn get(path: &'static str, summary: &'static str) -> Self {
        Self::new("get", path, summary)
    }
    fn post(path: &'static str, summary: &'static str) -> Self {
        Self::new("post", path, summary)
    }
    fn put(path: &'static str, summary: &'static str) -> Self {
        Self::new("put", path, summary)
    }
    fn delete(path: &'static str, summary: &'static str) -> Self {
        Self::new("delete", path, summary)
    }
    fn patch(path: &'static str, summary: &'static str) -> Self {
        Self::new("patch", path, summary)
    }
    /// Needs a credential (token, Basic, or a session).
    fn token(mut self) -> Self {
        self.security = true;
        self
    }
    /// The JSON request body's type.
    fn body<T: JsonSchema>(mut self) -> Self {
        self.body = Some(Content::Json(schema_of::<T>));
        self
    }
    /// The JSON request body, described by the named hand-written component.
    fn body_document(mut self, component: &'static str) -> Self {
        self.body = Some(Content::Component(component));
        self
    }
    /// The successful answer: `status` with a `T` as JSON.
    fn answers<T: JsonSchema>(mut self, status: u16, description: &'static str) -> Self {
        self.ok = Some((status, description, Content::Json(schema_of::<T>)));
        self
    }
    /// The successful answer: a document with its own specification, as the named hand-written component.
    fn answers_document(mut self, status: u16, description: &'static str, component: &'static str) -> Self {
        self.ok = Some((status, description, Content::Component(component)));
        self
    }
    /// The successful answer: text of `media`.
    fn answers_text(mut self, status: u16, description: &'static str, media: &'static str) -> Self {
        self.ok = Some((status, description, Content::Text(media)));
        self
    }
    /// The successful answer has no body.
    fn answers_nothing(mut self, status: u16, description: &'static str) -> Self {
        self.ok = Some((status, description, Content::Nothing));
        self
    }
    /// The problem statuses it may answer.
    fn errors(mut self, statuses: &'static [u16]) -> Self {
        self.errors = statuses;
        self
    }
    /// One parameter object, as written in OpenAPI.
    fn parameter(mut self, parameter: Value) -> Self {
        self.parameters.push(parameter);
        self
    }

    fn render(&self, g: &mut SchemaGenerator) -> Value {
        let mut op = Map::new();
        op.insert("summary".into(), json!(self.summary));
        if self.security {
            op.insert("security".into(), json!([{"token": []}, {"basic": []}, {"session": []}]));
        }
        // Every `{name}` of the path is a required path parameter (a string; the handler says what it must be).
        let mut parameters: Vec<Value> = path_names(self.path)
            .filter(|name| !self.parameters.iter().any(|p| p["name"] == *name && p["in"] == "path"))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        parameters.extend(self.parameters.iter().cloned());
        if !parameters.is_empty() {
            op.insert("parameters".into(), Value::Array(parameters));
        }
        if let Some(content) = self.body.as_ref().and_then(|b| b.render(g)) {
            op.insert("requestBody".into(), json!({"required": true, "content": content}));
        }
        let mut responses = Map::new();
        if let Some((status, description, content)) = &self.ok {
            let content = content.render(g);
            let mut answer = json!({ "description": description });
            if let (Some(content), Some(answer)) = (content, answer.as_object_mut()) {
                answer.insert("content".into(), content);
            }
            responses.insert(status.to_string(), answer);
        }
        let problem = schema_of::<Problem>(g);
        for status in self.errors {
            responses.insert(
                status.to_string(),
                json!({"description": "Problem details (RFC 9457) naming the field and the reason",
                       "content": {"application/problem+json": {"schema": problem}}}),
            );
        }
        op.insert("responses".into(), Value::Object(responses));
        Value::Object(op)
    }
}

/// The `{name}`s of a path template, in order.
fn path_names(path: &str) -> impl Iterator<Item = &str> {
    path.split('{').skip(1).filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
}

/// The document.
pub fn document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    // Answers dominate the document: describe what the server writes.
    settings.contract = Contract::Serialize;
    let mut g = SchemaGenerator::new(settings);
    let mut paths = Map::new();
    for op in operations() {
        let rendered = op.render(&mut g);
        if let Some(item) = paths.entry(op.path).or_insert_with(|| json!({})).as_object_mut() {
            item.insert(op.method.to_string(), rendered);
        }
    }
    let mut schemas = g.take_definitions(true);
    schemas.extend(documents());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "GPU Ledger API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Who used the GPU, and what do they owe. Agents push facts; people and BI tools read ledgers. \
                            Amounts are decimal strings, times RFC 3339 UTC, months YYYY-MM."
        },
        "servers": [{"url": "/"}],
        "components": {
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer",
                          "description": "An API token from `gpuledger-server token create` (glt_…)."},
                "basic": {"type": "http", "scheme": "basic",
                          "description": "The same token as the password of HTTP Basic (any user name): what Power BI sends."},
                "session": {"type": "apiKey", "in": "cookie", "name": "__Host-gl_session",
                            "description": "A browser session after sign-in (`gl_session` on plain-HTTP loopback). State-changing requests also need the X-CSRF-Token header."}
            },
            "schemas": schemas,
        },
        "paths": paths,
    })
}

/// Components written by hand: documents with a specification of their own, and shapes not yet in the contract.
fn documents() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "OpenApiDocument".into(),
        json!({"type": "object", "description": "An OpenAPI 3.1 document (https://spec.openapis.org/oas/v3.1.0)",
               "required": ["openapi", "info", "paths"]}),
    );
    m.insert(
        "Batch".into(),
        json!({"type": "object", "required": ["wire_version", "agent", "facts"], "properties": {
            "wire_version": {"type": "integer", "const": gpuledger_core::wire::WIRE_VERSION},
            "agent": {"type": "object"},
            "cluster": {"type": "string", "description": "Must match the credential's cluster when given."},
            "facts": {"type": "array", "maxItems": gpuledger_core::wire::MAX_FACTS_PER_BATCH,
                      "items": {"type": "object", "required": ["event_id", "observed_at", "kind"]}}}}),
    );
    m
}

/// Every operation, grouped as the feature folders are.
fn operations() -> Vec<Op> {
    let mut ops = vec![
        Op::get("/healthz", "Liveness (never touches the database)").answers::<Alive>(200, "alive"),
        Op::get("/readyz", "Readiness: database reachable and schema current")
            .answers::<Ready>(200, "ready")
            .errors(&[503]),
        Op::get("/api/v1/openapi.json", "This document").answers_document(200, "OpenAPI 3.1", "OpenApiDocument"),
        Op::get(
            "/metrics",
            "Prometheus text exposition 0.0.4: operational metrics and the identity exporter \
             (gpuledger_workload_identity, one line per workload holding GPU capacity now). Admin or export token \
             (Bearer or Basic); one organization per token",
        )
        .token()
        .answers_text(200, "Prometheus text, version 0.0.4", "text/plain")
        .errors(&[401, 403]),
    ];
    ops.extend(ingest_ops());
    ops.extend(admin_ops());
    ops.extend(organization_ops());
    ops.extend(policy_ops());
    ops.extend(ledger_ops());
    ops.extend(dispute_ops());
    ops.extend(tenancy::operations());
    ops.extend(usage_ops());
    ops.extend(export_ops());
    ops.extend(foresight::operations());
    ops
}

/// Agents: batches and joining.
fn ingest_ops() -> Vec<Op> {
    vec![
        Op::post(
            "/api/v1/ingest/batches",
            "Agents' facts (gzip allowed); acknowledged after the commit; idempotent by event ID. 429 when the \
             organization's daily ingest limit is reached; 403 while the organization is suspended",
        )
        .token()
        .body_document("Batch")
        .answers::<ingest::BatchAck>(200, "stored")
        .errors(&[401, 403, 413, 422, 429]),
        Op::post("/api/v1/agents/join", "Exchange a one-time join token for the cluster's agent credential")
            .token()
            .answers::<gpuledger_api::auth::Joined>(200, "the credential, shown once")
            .errors(&[401, 403]),
    ]
}

/// Who the caller is, tokens, sign-in settings, the audit log.
fn admin_ops() -> Vec<Op> {
    vec![
        Op::get("/api/v1/me", "Who the caller is: organization, roles, department scope, CSRF token of a session")
            .token()
            .answers::<Me>(200, "The caller")
            .errors(&[401]),
        Op::get("/api/v1/tokens", "API tokens of the organization (never their secrets); admins")
            .token()
            .answers::<TokenList>(200, "Tokens")
            .errors(&[401, 403]),
        Op::post(
            "/api/v1/tokens",
            "Create a token: {name, scope: admin|export|agent:CLUSTER|join:CLUSTER, departments?, \
             expires_in_days?}; the answer shows it once",
        )
        .token()
        .body::<NewToken>()
        .answers::<CreatedToken>(201, "The token")
        .errors(&[401, 403, 422, 429]),
        Op::post("/api/v1/tokens/{id}/revoke", "Revoke a token, effective at once")
            .token()
            .answers::<Revoked>(200, "Revoked")
            .errors(&[401, 403, 404]),
        Op::get(
            "/api/v1/identity/provider",
            "The organization's OpenID provider settings (the secret is never returned) and the redirect URI to \
             register",
        )
        .token()
        .answers::<ProviderSettings>(200, "Settings")
        .errors(&[401, 403]),
        Op::put(
            "/api/v1/identity/provider",
            "Set the provider: {issuer, client_id, client_secret, groups_claim?, scopes?}; discovery is checked. \
             Switches demo login off.",
        )
        .token()
        .body::<ProviderBody>()
        .answers::<ProviderSettings>(200, "Settings")
        .errors(&[401, 403, 422]),
        Op::delete("/api/v1/identity/provider", "Remove the provider")
            .token()
            .answers_nothing(204, "Removed")
            .errors(&[401, 403, 404]),
        Op::get("/api/v1/identity/role-mappings", "Group → role mappings")
            .token()
            .answers::<RoleMappings>(200, "Mappings")
            .errors(&[401, 403]),
        Op::put("/api/v1/identity/role-mappings", "Replace the mappings: {mappings: [{group, role, department?}]}")
            .token()
            .body::<RoleMappingsBody>()
            .answers::<RoleMappings>(200, "Mappings")
            .errors(&[401, 403, 422]),
        Op::get("/api/v1/audit", "The audit log, newest first: ?limit=&before=RFC3339&action=")
            .token()
            .answers::<AuditLog>(200, "Audit records")
            .errors(&[401, 403, 422]),
    ]
}

/// The organization's settings.
fn organization_ops() -> Vec<Op> {
    use gpuledger_api::orgs::{OrganizationSettings, SettingsBody};
    vec![
        Op::get(
            "/api/v1/organization/settings",
            "The organization's settings (display name, default currency, data retention) and the limits its operator \
             set (read-only)",
        )
        .token()
        .answers::<OrganizationSettings>(200, "Settings")
        .errors(&[401, 403]),
        Op::put(
            "/api/v1/organization/settings",
            "Change the settings admins keep: {display_name, default_currency (ISO 4217), retention_months (12 to \
             120)}; audited. Limits are the operator's (`gpuledger-server org limits`).",
        )
        .token()
        .body::<SettingsBody>()
        .answers::<OrganizationSettings>(200, "Settings")
        .errors(&[401, 403, 422]),
    ]
}

/// Cost policies and quotas.
fn policy_ops() -> Vec<Op> {
    vec![
        Op::get("/api/v1/policies", "Cost policy versions, newest first (admin or export token)")
            .token()
            .answers::<PolicyList>(200, "{items, total}")
            .errors(&[401, 403]),
        Op::post(
            "/api/v1/policies",
            "Create a draft: {effective_from: YYYY-MM, note, policy: {currency, classes[{gpu_class, guaranteed, \
             borrowed}], energy{per_kwh, pue}, services[{endpoint, per_million_weighted_tokens?}], \
             token_weights[{model, input, output}], overhead{fixed[{name, amount}], unallocated_capacity, \
             key{kind: allocated_gpu_hours|equal|fixed_shares, shares?}}}} — decimals as strings. Admin token",
        )
        .token()
        .body::<PolicyBody>()
        .answers::<PolicyVersion>(201, "the draft")
        .errors(&[401, 403, 422]),
        Op::get("/api/v1/policies/{version}", "One version")
            .token()
            .answers::<PolicyVersion>(200, "the policy")
            .errors(&[401, 404]),
        Op::put("/api/v1/policies/{version}", "Edit a draft (an approved version is never edited: 409)")
            .token()
            .body::<PolicyBody>()
            .answers::<PolicyVersion>(200, "the draft")
            .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/policies/{version}/approve",
            "Finance approves a draft: it prices every month from effective_from until a later approved version; \
             one approved earlier with the same start is superseded; refused if it would reprice a closed month",
        )
        .token()
        .answers::<PolicyVersion>(200, "approved")
        .errors(&[401, 403, 404, 409]),
        Op::get(
            "/api/v1/policies/{version}/impact",
            "What-if: ?period=YYYY-MM priced with this version in place of the approved one, per department and \
             tenant {approved, draft, delta} and total (delta = draft − approved exactly; departments add up). Any \
             version; closed months from their frozen inputs (closed: true). 409: no approved policy, other currency",
        )
        .token()
        .answers::<Impact>(200, "the comparison")
        .errors(&[401, 403, 404, 409, 422]),
        Op::get(
            "/api/v1/quotas",
            "Quotas (guaranteed GPUs per class per tenant or department, with validity); ?at=RFC3339",
        )
        .token()
        .answers::<QuotaList>(200, "{items, total}")
        .errors(&[401]),
        Op::post("/api/v1/quotas", "Add a quota: {tenant | department, gpu_class, gpus, valid_from, valid_to?}")
            .token()
            .body::<QuotaBody>()
            .answers::<CreatedQuota>(201, "created")
            .errors(&[401, 403, 409, 422]),
        Op::post(
            "/api/v1/quotas/import-kueue",
            "Import the nominal GPU quotas of the Kueue ClusterQueues the agents reported (ClusterQueue → tenant or \
             department by name, or {mappings}; flavor → GPU class by name)",
        )
        .token()
        .answers::<KueueImport>(200, "{imported, skipped}")
        .errors(&[401, 403]),
    ]
}

/// The ledger, its months, their close and analytics.
fn ledger_ops() -> Vec<Op> {
    vec![
        Op::get(
            "/api/v1/ledger",
            "A month's ledger lines from the stored figures: frozen for a closed month, the open month's snapshot \
             (as_of, provisional, stale) otherwise; ?period=YYYY-MM (required), tenant, department, term, page, \
             per_page (≤ 10000); with totals by term",
        )
        .token()
        .answers::<ledger::Ledger>(200, "A page of the month's lines with its totals")
        .errors(&[401, 409, 422]),
        Op::get(
            "/api/v1/ledger/months",
            "Each month's total as the caller may see it, from the stored figures; ?from=YYYY-MM&to=YYYY-MM (at \
             most 36 months), department; a month without figures has total null",
        )
        .token()
        .answers::<ledger::Months>(200, "Each month's total")
        .errors(&[401, 422]),
        Op::get(
            "/api/v1/ledger/summaries",
            "The month's stored utilization, inference and training summaries as the caller may see them \
             (computed once per month figures, never on a read); ?period=YYYY-MM. A kind not computed yet is \
             null; pending says newer figures are being summarized",
        )
        .token()
        .answers::<ledger::Summaries>(200, "The stored summaries")
        .errors(&[401, 422]),
        Op::get("/api/v1/periods", "Months with their state (open, closing, closed), hash chain and totals")
            .token()
            .answers::<close::Periods>(200, "Months, newest first")
            .errors(&[401]),
        Op::post(
            "/api/v1/periods/{period}/close",
            "Close an ended month: exactly one concurrent caller wins (409 for the others); freezes the lines, \
             stores the bundle and the hash chain, applies approved credits and late-data corrections. A month with \
             unpriced allocations needs {\"acknowledge\": \"why\"} (409 without it; recorded and audited)",
        )
        .token()
        .body::<close::CloseRequest>()
        .answers::<close::CloseSummary>(200, "What the close produced")
        .errors(&[401, 403, 409, 422]),
        Op::get(
            "/api/v1/periods/{period}/bundle",
            "The evidence bundle of a closed month (JSON, docs/bundle.md); verify offline with `gpuledger-server \
             verify`",
        )
        .token()
        .answers::<close::Bundle>(200, "The bundle (docs/bundle.md)")
        .errors(&[401, 404]),
        Op::get(
            "/api/v1/periods/{period}/evidence",
            "The allocation records behind a line (?tenant=UUID, gpu_class, endpoint, page, per_page)",
        )
        .token()
        .answers::<close::Evidence>(200, "A page of allocation records")
        .errors(&[401, 422]),
        Op::get(
            "/api/v1/periods/{period}/findings",
            "Data-quality findings of a month (inventory gaps, agent gaps, over-commit, unknown tenants): counts by \
             kind and the newest 200",
        )
        .token()
        .answers::<close::Findings>(200, "Findings")
        .errors(&[401, 403]),
        Op::get(
            "/api/v1/analytics/utilization",
            "Idle reservations and active-equivalent GPU-hours (analytics, never billed): ?period=YYYY-MM, tenant, \
             idle_threshold_pct (percent, default 5), min_idle_hours (default 1), page, per_page",
        )
        .token()
        .answers::<analytics::Utilization>(200, "Per tenant and a page of allocations")
        .errors(&[401, 422]),
        Op::get(
            "/api/v1/analytics/inference",
            "Inference efficiency of shared endpoints (analytics, never billed): ?period=YYYY-MM, department. Per \
             tenant: requests, tokens, GPU-hours attributed by weighted tokens (modeled), tokens per GPU-hour, mean \
             time to first token; per endpoint the totals (whole-organization callers only)",
        )
        .token()
        .answers::<analytics::Inference>(200, "Per endpoint and tenant")
        .errors(&[401, 422]),
        Op::get(
            "/api/v1/analytics/sessions",
            "Showback by AI-agent session within a tenant: ?period=YYYY-MM&tenant=UUID; requests, tokens, mean \
             TTFT, GPU-hours of session-labelled pods, and a cost modeled from the tenant's ledger lines (analytics)",
        )
        .token()
        .answers::<analytics::Sessions>(200, "Per session, costliest first")
        .errors(&[401, 422]),
        Op::get(
            "/api/v1/analytics/training",
            "Work per GPU-hour of training workloads: ?period=YYYY-MM; steps and samples done in the month over the \
             GPU-hours of the workload's pods (analytics)",
        )
        .token()
        .answers::<training::Training>(200, "Per workload")
        .errors(&[401, 422]),
    ]
}

/// Disputes and their credits.
fn dispute_ops() -> Vec<Op> {
    vec![
        Op::get(
            "/api/v1/disputes",
            "Disputes, newest first; filters state (open|accepted|rejected) and period (YYYY-MM); page, per_page \
             (≤ 100). Admin or export token",
        )
        .token()
        .answers::<disputes::DisputePage>(200, "a page")
        .errors(&[401, 403, 422]),
        Op::post("/api/v1/disputes", "Dispute lines of a closed period: {period, line_ids, reason}. Admin token")
            .token()
            .body::<disputes::OpenDispute>()
            .answers::<disputes::DisputeDetail>(201, "opened")
            .errors(&[401, 403, 409, 422]),
        Op::get("/api/v1/disputes/{id}", "A dispute (by UUID or number) with its lines, history and credit")
            .token()
            .answers::<disputes::DisputeDetail>(200, "the dispute")
            .errors(&[401, 403, 404]),
        Op::post("/api/v1/disputes/{id}/comments", "Comment on an open dispute: {body}")
            .token()
            .body::<disputes::CommentRequest>()
            .answers::<disputes::DisputeDetail>(201, "the dispute")
            .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/disputes/{id}/accept",
            "Accept an open dispute with a credit awaiting finance's approval: {reason, credit_amount}",
        )
        .token()
        .body::<disputes::AcceptRequest>()
        .answers::<disputes::DisputeDetail>(200, "the dispute")
        .errors(&[401, 403, 404, 409, 422]),
        Op::post("/api/v1/disputes/{id}/reject", "Reject an open dispute: {reason}")
            .token()
            .body::<disputes::ReasonRequest>()
            .answers::<disputes::DisputeDetail>(200, "the dispute")
            .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/disputes/{id}/credit/approve",
            "Finance approves the credit; the next period close applies it: {reason?}",
        )
        .token()
        .body::<disputes::ReasonRequest>()
        .answers::<disputes::DisputeDetail>(200, "the dispute")
        .errors(&[401, 403, 404, 409]),
        Op::post("/api/v1/disputes/{id}/credit/reject", "Finance refuses the credit: {reason}")
            .token()
            .body::<disputes::ReasonRequest>()
            .answers::<disputes::DisputeDetail>(200, "the dispute")
            .errors(&[401, 403, 404, 409, 422]),
    ]
}

/// Gateways' usage records and training progress (NDJSON in, a count out).
fn usage_ops() -> Vec<Op> {
    vec![
        Op::post(
            "/api/v1/usage/records",
            "Gateways' usage records, NDJSON (one request or a minute's totals per line): record_id, endpoint, \
             model, model_version?, tenant | gateway_key | team, started_at, window_end?, requests?, input_tokens, \
             output_tokens, status?, latency_ms?, ttft_ms?, trace_id?, agent_session_id?. Idempotent by record_id; \
             unknown callers kept and reported. Agent token",
        )
        .token()
        .answers::<usage::UsageAck>(200, "What was kept")
        .errors(&[401, 403, 422]),
        Op::post(
            "/api/v1/training/progress",
            "Training progress, NDJSON: record_id, namespace, workload, reported_at, steps? samples? (cumulative). \
             Idempotent by record_id. Agent token",
        )
        .token()
        .answers::<training::ProgressAck>(200, "What was kept")
        .errors(&[401, 403, 422]),
    ]
}

/// `/api/v1/exports/*`: CSV answers.
fn export_ops() -> Vec<Op> {
    let month = || {
        json!({"name": "period", "in": "query", "required": true,
               "schema": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}})
    };
    let id = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "format": "uuid"}});
    let csv = "text/csv: RFC 4180, UTF-8, CRLF, UTC ISO 8601 times, exact decimals; text cells that would start a \
               formula are prefixed with '";
    let export = |path: &'static str, summary: &'static str| {
        Op::get(path, summary)
            .token()
            .parameter(month())
            .parameter(id("department"))
            .parameter(id("tenant"))
            .answers_text(200, csv, "text/csv")
            .errors(&[401, 403, 422])
    };
    vec![
        export(
            "/api/v1/exports/ledger.csv",
            "The month's ledger lines as CSV, the canonical columns (a closed month streamed from its stored lines, \
             an open month computed now)",
        ),
        export(
            "/api/v1/exports/allocations.csv",
            "Allocation intervals of the month, split at namespace-owner changes and month ends, with their \
             GPU-hours (streamed)",
        ),
        export("/api/v1/exports/usage.csv", "Shared endpoints' productive work per tenant and window (streamed)"),
        export("/api/v1/exports/disputes.csv", "Disputes of the month's lines and how they ended (streamed)"),
        export(
            "/api/v1/exports/focus.csv",
            "The month's ledger as a FinOps FOCUS dataset, version 1.3 (default: split cost allocation columns), 1.2 \
             or 1.0",
        )
        .parameter(json!({"name": "version", "in": "query",
                              "schema": {"type": "string", "enum": ["1.3", "1.2", "1.0"], "default": "1.3"}})),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_reference_resolves_to_a_component() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let text = doc.to_string();
        for (i, _) in text.match_indices("\"$ref\":\"#/components/schemas/") {
            let rest = &text[i + "\"$ref\":\"#/components/schemas/".len()..];
            let name = &rest[..rest.find('"').unwrap()];
            assert!(schemas.contains_key(name), "{name} is referenced but not among the components");
        }
        assert!(schemas.contains_key("Problem") && schemas.contains_key("Ready"));
    }

    /// Every operation's success answer has a schema (a contract type, a documented format, or text), and
    /// the components are the contract's types, not a handful written by hand.
    #[test]
    fn every_operation_has_a_typed_answer() {
        let doc = document();
        let mut untyped = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let ok = op["responses"].as_object().unwrap().iter().find(|(c, _)| c.starts_with('2')).unwrap().1;
                let typed = ok.get("content").is_some_and(|c| c.to_string().contains("\"schema\""))
                    || ok["description"].as_str().is_some_and(|_| op["responses"].get("204").is_some());
                if !typed {
                    untyped.push(format!("{method} {path}"));
                }
            }
        }
        assert!(untyped.is_empty(), "operations without a typed success answer: {untyped:?}");
        let schemas = doc["components"]["schemas"].as_object().unwrap().len();
        assert!(schemas >= 30, "only {schemas} schemas");
    }

    #[test]
    fn every_path_template_name_is_a_declared_path_parameter() {
        let doc = document();
        let mut checked = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            let names: Vec<&str> = path_names(path).collect();
            for (method, op) in item.as_object().unwrap() {
                let declared: Vec<&str> = op["parameters"]
                    .as_array()
                    .map(|ps| ps.iter().filter(|p| p["in"] == "path").filter_map(|p| p["name"].as_str()).collect())
                    .unwrap_or_default();
                assert_eq!(declared, names, "{method} {path}");
                checked += names.len();
            }
        }
        assert!(checked >= 10, "{checked} path parameters");
        assert_eq!(path_names("/a/{x}/b/{y}").collect::<Vec<_>>(), ["x", "y"]);
    }

    #[test]
    fn each_path_and_method_is_documented_once() {
        let mut seen = std::collections::BTreeSet::new();
        for op in operations() {
            assert!(seen.insert((op.path, op.method)), "{} {} twice", op.method, op.path);
            assert!(op.ok.is_some(), "{} {} has no success answer", op.method, op.path);
        }
    }
}
