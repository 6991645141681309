//! `/api/v1/openapi.json`: the REST API's OpenAPI 3.1 document. Each operation is one [`Op`] line below (its summary
//! and its answer), joined to what its handler takes ([`inputs`]): the credential, the path and query parameters and
//! the JSON body come from the handler's extractors and the `gpuledger-api` types they read (their
//! `schemars::JsonSchema` derives, with the input classes of `gpuledger_api::input`), and so do the statuses those
//! extractors answer with. Requests are described as the server reads them and answers as it writes them (two
//! generators; a type that reads differently from how it is written is published twice, `…Input` for the request).
//! Tests check that every route of the server is documented with its methods and that every documented operation
//! answers.

use std::collections::{BTreeMap, BTreeSet};

use axum::{Json, Router, routing::get};
use gpuledger_api::{
    Problem, analytics,
    auth::{AuditLog, CreatedToken, Me, ProviderSettings, Revoked, RoleMappings, TokenList},
    close, disputes,
    health::{Alive, Ready},
    ingest, ledger,
    policy::{CreatedQuota, Impact, KueueImport, PolicyList, PolicyVersion, QuotaList},
    schemars::{JsonSchema, SchemaGenerator, generate::Contract, generate::SchemaSettings},
    training, usage,
};
use serde_json::{Map, Value, json};

use crate::state::AppState;

mod foresight;
mod money;
mod tenancy;

pub use crate::describe::{self as inputs, Describe, Inputs, inputs};

/// `GET /api/v1/openapi.json`.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/openapi.json", get(serve))
}

async fn serve() -> Json<Value> {
    Json(document())
}

/// A schema generator's entry point for one contract type: adds it (and what it refers to) to the components and
/// gives the `$ref` to it.
type SchemaOf = fn(&mut SchemaGenerator) -> Value;

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    g.subschema_for::<T>().to_value()
}

/// The generators of one document: answers as the server writes them, requests as it reads them.
struct Generators {
    answers: SchemaGenerator,
    requests: SchemaGenerator,
}

/// What a successful answer, or a body the handler reads itself, carries.
enum Content {
    /// JSON of a contract type.
    Json(SchemaOf),
    /// JSON described by a hand-written component (documents whose format has its own specification).
    Component(&'static str),
    /// Text of a media type (`text/csv`, Prometheus text).
    Text(&'static str),
    /// Newline-delimited JSON, one object per line (read whatever the request's content type says).
    Ndjson,
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
            Self::Ndjson => {
                let lines = json!({"type": "string", "description": "One JSON object per line"});
                Some(json!({"application/x-ndjson": {"schema": lines}, "text/plain": {"schema": lines}}))
            }
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
    query: Option<SchemaOf>,
    body: Option<Content>,
    ok: Option<(u16, &'static str, Content)>,
    errors: &'static [u16],
}

impl Op {
    fn new(method: &'static str, path: &'static str, summary: &'static str) -> Self {
        Self { method, path, summary, security: false, query: None, body: None, ok: None, errors: &[] }
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
    /// Needs a credential (token, Basic, or a session) that the handler checks itself (handlers taking a
    /// `Caller` say so through their signature).
    fn token(mut self) -> Self {
        self.security = true;
        self
    }
    /// A body the handler reads itself (gzip allowed, so no extractor declares it), as JSON of a type's schema.
    fn body_json<T: JsonSchema>(mut self) -> Self {
        self.body = Some(Content::Json(schema_of::<T>));
        self
    }
    /// A body the handler reads itself: text of a media type (a CSV file).
    fn body_text(mut self, media: &'static str) -> Self {
        self.body = Some(Content::Text(media));
        self
    }
    /// A body the handler reads itself: newline-delimited JSON.
    fn body_ndjson(mut self) -> Self {
        self.body = Some(Content::Ndjson);
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
    /// The problem statuses the handler itself may answer (those of its extractors are added from its inputs).
    fn errors(mut self, statuses: &'static [u16]) -> Self {
        self.errors = statuses;
        self
    }
    /// The query parameters of a handler whose signature is not described here (its parameters' type is `T`).
    fn query<T: JsonSchema>(mut self) -> Self {
        self.query = Some(inputs::object_of::<T>);
        self
    }

    fn render(&self, g: &mut Generators, inputs: Option<&Inputs>) -> Value {
        let mut op = Map::new();
        let needs = inputs.and_then(|i| i.capability);
        match needs {
            Some(needs) => op.insert("summary".into(), json!(format!("{} (needs {needs})", self.summary))),
            None => op.insert("summary".into(), json!(self.summary)),
        };
        let secured = self.security || needs.is_some();
        if secured {
            op.insert("security".into(), json!([{"token": []}, {"basic": []}, {"session": []}]));
        }
        let mut parameters = Vec::new();
        match inputs.and_then(|i| i.path_params) {
            Some(schema) => parameters.extend(inputs::parameters(&schema(&mut g.requests), "path")),
            // A template without typed parameters: each `{name}` a required string (the tests allow this nowhere).
            None => parameters.extend(
                path_names(self.path)
                    .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}})),
            ),
        }
        if let Some(schema) = inputs.and_then(|i| i.query).or(self.query) {
            parameters.extend(inputs::parameters(&schema(&mut g.requests), "query"));
        }
        if !parameters.is_empty() {
            op.insert("parameters".into(), Value::Array(parameters));
        }
        let body = match inputs.and_then(|i| i.body) {
            Some((schema, required)) => {
                Some((json!({"application/json": {"schema": schema(&mut g.requests)}}), required))
            }
            None => self.body.as_ref().and_then(|b| b.render(&mut g.requests)).map(|c| (money::csv_upload(c), true)),
        };
        if let Some((content, required)) = body {
            op.insert("requestBody".into(), json!({"required": required, "content": content}));
        }
        let mut responses = Map::new();
        if let Some((status, description, content)) = &self.ok {
            let content = content.render(&mut g.answers);
            let mut answer = json!({ "description": description });
            if let (Some(content), Some(answer)) = (content, answer.as_object_mut()) {
                answer.insert("content".into(), content);
            }
            responses.insert(status.to_string(), answer);
        }
        let mut errors: BTreeSet<u16> = self.errors.iter().copied().collect();
        if let Some(i) = inputs {
            errors.extend(&i.errors);
        }
        if secured {
            // Every authenticated call: no or a bad credential, not allowed (or the organization suspended), the
            // organization's request rate, the database unavailable.
            errors.extend([401, 403, 429, 503]);
        }
        let problem = schema_of::<Problem>(&mut g.answers);
        for status in errors {
            responses.insert(
                status.to_string(),
                json!({"description": problem_description(status),
                       "content": {"application/problem+json": {"schema": problem}}}),
            );
        }
        op.insert("responses".into(), Value::Object(responses));
        Value::Object(op)
    }
}

/// What a problem status means across the API.
fn problem_description(status: u16) -> &'static str {
    match status {
        401 => "No credential, or one that is not valid (problem details, RFC 9457)",
        403 => "The credential may not do this, or the organization is suspended",
        404 => "What the path (or a parameter) names does not exist, or is not the caller's to see",
        409 => "Well-formed, but refused by the organization's current data or by a rule between fields (named)",
        413 => "The body is larger than the operation takes",
        422 => "The request is not what this document says: the problem names the parameter or field and the reason",
        429 => "Too many requests, or a limit of the organization reached; Retry-After says when to try again",
        503 => "The database is not available right now; Retry-After says when to try again",
        _ => "Problem details (RFC 9457)",
    }
}

/// The `{name}`s of a path template, in order.
fn path_names(path: &str) -> impl Iterator<Item = &str> {
    path.split('{').skip(1).filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
}

/// What every feature's handlers take, by (method, path).
fn handler_inputs() -> BTreeMap<(&'static str, &'static str), Inputs> {
    let lists = [
        vec![inputs("get", "/api/v1/openapi.json", serve)],
        crate::health::inputs(),
        crate::metrics::inputs(),
        crate::ingest::inputs(),
        crate::access::inputs(),
        crate::orgs::settings::inputs(),
        crate::policy::inputs(),
        crate::ledger::inputs(),
        crate::readmodel::inputs(),
        crate::close::inputs(),
        crate::analytics::inputs(),
        crate::training::inputs(),
        crate::disputes::inputs(),
        crate::tenancy::inputs(),
        crate::usage::inputs(),
        crate::costs::inputs(),
        crate::faults::inputs(),
        crate::exports::inputs(),
        crate::budgets::inputs(),
        crate::notifications::inputs(),
    ];
    lists.into_iter().flatten().map(|i| ((i.method, i.path), i)).collect()
}

fn settings(contract: Contract) -> SchemaSettings {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    settings.contract = contract;
    settings
}

/// Every `$ref` to a renamed component in `v`, renamed.
fn rename_refs(v: &mut Value, renamed: &BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "$ref"
                    && let Some(name) = x.as_str().and_then(|r| r.strip_prefix("#/components/schemas/"))
                    && let Some(new) = renamed.get(name)
                {
                    *x = json!(format!("#/components/schemas/{new}"));
                } else {
                    rename_refs(x, renamed);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rename_refs(x, renamed)),
        _ => {}
    }
}

/// The document.
pub fn document() -> Value {
    let mut g = Generators {
        answers: SchemaGenerator::new(settings(Contract::Serialize)),
        requests: SchemaGenerator::new(settings(Contract::Deserialize)),
    };
    let handlers = handler_inputs();
    let mut paths = Map::new();
    for op in operations() {
        let rendered = op.render(&mut g, handlers.get(&(op.method, op.path)));
        if let Some(item) = paths.entry(op.path).or_insert_with(|| json!({})).as_object_mut() {
            item.insert(op.method.to_string(), rendered);
        }
    }
    let mut schemas = g.answers.take_definitions(true);
    // A request type that reads differently from how its answer twin is written gets a name of its own.
    let mut requests = g.requests.take_definitions(true);
    let renamed: BTreeMap<String, String> = requests
        .iter()
        .filter(|(name, schema)| schemas.get(*name).is_some_and(|answer| answer != *schema))
        .map(|(name, _)| (name.clone(), format!("{name}Input")))
        .collect();
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for op in item.values_mut().filter_map(Value::as_object_mut) {
            for part in ["parameters", "requestBody"] {
                if let Some(v) = op.get_mut(part) {
                    rename_refs(v, &renamed);
                }
            }
        }
    }
    for (name, mut schema) in std::mem::take(&mut requests) {
        rename_refs(&mut schema, &renamed);
        let name = renamed.get(&name).cloned().unwrap_or(name);
        schemas.insert(name, schema);
    }
    schemas.extend(documents());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "GPU Ledger API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Who used the GPU, and what do they owe. Agents push facts; people and BI tools read ledgers. \
                            Amounts are decimal strings, times RFC 3339 UTC, months YYYY-MM. A request that is not what \
                            this document says is refused with 422 naming the parameter or field; a well-formed one \
                            that the organization's data refuses with 409 (or 404 for what does not exist)."
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
    ops.extend(money::operations());
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
        .body_json::<gpuledger_core::wire::Batch>()
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
        .answers::<CreatedToken>(201, "The token")
        .errors(&[401, 403, 404, 409, 422, 429]),
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
        .answers::<ProviderSettings>(200, "Settings")
        .errors(&[401, 403, 409, 422]),
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
            .answers::<RoleMappings>(200, "Mappings")
            .errors(&[401, 403, 404, 409, 422]),
        Op::get("/api/v1/audit", "The audit log, newest first: ?limit=&before=RFC3339&action=")
            .token()
            .answers::<AuditLog>(200, "Audit records")
            .errors(&[401, 403, 422]),
    ]
}

/// The organization's settings.
fn organization_ops() -> Vec<Op> {
    use gpuledger_api::orgs::OrganizationSettings;
    vec![
        Op::get(
            "/api/v1/organization/settings",
            "The organization's settings (display name, default currency, data retention, the platform's journal \
             accounts) and the limits its operator set (read-only)",
        )
        .token()
        .answers::<OrganizationSettings>(200, "Settings")
        .errors(&[401, 403]),
        Op::put(
            "/api/v1/organization/settings",
            "Change the settings admins keep: {display_name, default_currency, retention_months (12–120), platform_cost_center?, \
             platform_gl_account? (left out: unchanged, null: cleared), time_zone? (IANA, from the next open month)}; audited. \
             A GET answer may come back: slug, state must match (409); limits, updated_* ignored; limits are the operator's.",
        )
        .token()
        .answers::<OrganizationSettings>(200, "Settings")
        .errors(&[401, 403, 409, 422]),
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
        .answers::<PolicyVersion>(201, "the draft")
        .errors(&[401, 403, 409, 422]),
        Op::get("/api/v1/policies/{version}", "One version")
            .token()
            .answers::<PolicyVersion>(200, "the policy")
            .errors(&[401, 404]),
        Op::put("/api/v1/policies/{version}", "Edit a draft (an approved version is never edited: 409)")
            .token()
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
            .answers::<CreatedQuota>(201, "created")
            .errors(&[401, 403, 404, 409, 422]),
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
        .errors(&[401, 409, 422]),
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
        .errors(&[401, 404, 422]),
        Op::get(
            "/api/v1/analytics/inference",
            "Inference efficiency of shared endpoints (analytics, never billed): ?period=YYYY-MM, department. Per \
             tenant: requests, tokens, GPU-hours attributed by weighted tokens (modeled), tokens per GPU-hour, mean \
             time to first token; per endpoint the totals (whole-organization callers only)",
        )
        .token()
        .answers::<analytics::Inference>(200, "Per endpoint and tenant")
        .errors(&[401, 404, 422]),
        Op::get(
            "/api/v1/analytics/sessions",
            "Showback by AI-agent session within a tenant: ?period=YYYY-MM&tenant=UUID; requests, tokens, mean \
             TTFT, GPU-hours of session-labelled pods, and a cost modeled from the tenant's ledger lines (analytics)",
        )
        .token()
        .answers::<analytics::Sessions>(200, "Per session, costliest first")
        .errors(&[401, 404, 422]),
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
            .answers::<disputes::DisputeDetail>(201, "opened")
            .errors(&[401, 403, 404, 409, 422]),
        Op::get("/api/v1/disputes/{id}", "A dispute (by UUID or number) with its lines, history and credit")
            .token()
            .answers::<disputes::DisputeDetail>(200, "the dispute")
            .errors(&[401, 403, 404]),
        Op::post("/api/v1/disputes/{id}/comments", "Comment on an open dispute: {body}")
            .token()
            .answers::<disputes::DisputeDetail>(201, "the dispute")
            .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/disputes/{id}/accept",
            "Accept an open dispute with a credit awaiting finance's approval: {reason, credit_amount}",
        )
        .token()
        .answers::<disputes::DisputeDetail>(200, "the dispute")
        .errors(&[401, 403, 404, 409, 422]),
        Op::post("/api/v1/disputes/{id}/reject", "Reject an open dispute: {reason}")
            .token()
            .answers::<disputes::DisputeDetail>(200, "the dispute")
            .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/disputes/{id}/credit/approve",
            "Finance approves the credit; the next period close applies it: {reason?}",
        )
        .token()
        .answers::<disputes::DisputeDetail>(200, "the dispute")
        .errors(&[401, 403, 404, 409]),
        Op::post("/api/v1/disputes/{id}/credit/reject", "Finance refuses the credit: {reason}")
            .token()
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
        .body_ndjson()
        .answers::<usage::UsageAck>(200, "What was kept")
        .errors(&[401, 403, 422]),
        Op::post(
            "/api/v1/training/progress",
            "Training progress, NDJSON: record_id, namespace, workload, reported_at, steps? samples? (cumulative). \
             Idempotent by record_id. Agent token",
        )
        .token()
        .body_ndjson()
        .answers::<training::ProgressAck>(200, "What was kept")
        .errors(&[401, 403, 422]),
    ]
}

/// `/api/v1/exports/*`: CSV answers.
fn export_ops() -> Vec<Op> {
    let csv = "text/csv: RFC 4180, UTF-8, CRLF, UTC ISO 8601 times, exact decimals; text cells that would start a \
               formula are prefixed with '";
    // The ledger's exports compute an open month's figures (409 when the data cannot be priced as it stands).
    let export = |path: &'static str, summary: &'static str, errors: &'static [u16]| {
        Op::get(path, summary).token().answers_text(200, csv, "text/csv").errors(errors)
    };
    vec![
        export(
            "/api/v1/exports/ledger.csv",
            "The month's ledger lines as CSV, the canonical columns (a closed month streamed from its stored lines, \
             an open month computed now)",
            &[409],
        ),
        export(
            "/api/v1/exports/allocations.csv",
            "Allocation intervals of the month, split at namespace-owner changes and month ends, with their \
             GPU-hours (streamed)",
            &[],
        ),
        export("/api/v1/exports/usage.csv", "Shared endpoints' productive work per tenant and window (streamed)", &[]),
        export("/api/v1/exports/disputes.csv", "Disputes of the month's lines and how they ended (streamed)", &[]),
        export(
            "/api/v1/exports/focus.csv",
            "The month's ledger as a FinOps FOCUS dataset, version 1.3 (default: split cost allocation columns), 1.2 \
             or 1.0",
            &[409],
        ),
        Op::get(
            "/api/v1/exports/journal.csv",
            "A closed month as balanced double-entry journal lines: a debit per department (by=tenant: per tenant) \
             to its cost centre and GL account, a balancing credit to the platform's; columns entry_date, account, \
             cost_center, department, tenant, debit, credit, currency, memo, close_hash. Accounts not set keep their \
             row (empty account, memo says so) and are listed in the X-GpuLedger-Findings header. 409 naming period \
             while the month is not closed",
        )
        .token()
        .answers_text(200, csv, "text/csv")
        .errors(&[409]),
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

    /// Operations whose handler the document does not read: the telemetry coverage handler lives in the
    /// telemetry feature, whose query type is described here by `OptionalMonthParams` (the same `period`).
    const DESCRIBED_BY_HAND: [(&str, &str); 1] = [("get", "/api/v1/telemetry/coverage")];

    /// Each operation's inputs come from its handler's signature (and each handler listed is documented): the
    /// parameters, body and extractor statuses cannot drift from the code.
    #[test]
    fn every_operation_reads_its_inputs_from_its_handler() {
        let handlers = handler_inputs();
        let ops: Vec<(&str, &str)> = operations().iter().map(|o| (o.method, o.path)).collect();
        for op in &ops {
            assert!(
                handlers.contains_key(op) || DESCRIBED_BY_HAND.contains(op),
                "{} {} is documented without its handler's inputs: list the handler in its feature's inputs()",
                op.0,
                op.1
            );
        }
        for key in handlers.keys() {
            assert!(ops.contains(key), "{} {} lists a handler no operation documents", key.0, key.1);
        }
        assert!(handlers.len() >= 75, "only {} handlers described", handlers.len());
    }

    /// Every path parameter has its type's schema (a pattern, a format or bounds), never a bare string; every
    /// query parameter and JSON request body is a type of the contract.
    #[test]
    fn path_parameters_and_bodies_are_typed() {
        let doc = document();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for p in op["parameters"].as_array().into_iter().flatten() {
                    let schema = &p["schema"];
                    assert_ne!(
                        *schema,
                        json!({"type": "string"}),
                        "{method} {path}: {} is an untyped string",
                        p["name"]
                    );
                    assert!(p["description"].is_string(), "{method} {path}: {} has no description", p["name"]);
                }
                if let Some(json_body) = op["requestBody"]["content"].get("application/json") {
                    let reference = json_body["schema"]["$ref"].as_str().unwrap_or_default();
                    assert!(reference.starts_with("#/components/schemas/"), "{method} {path}: {json_body}");
                }
            }
        }
        // Requests are read strictly: every request object refuses unknown members.
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in ["TenantBody", "PolicyBody", "PolicyDocument", "QuotaBody", "OpenDispute", "WebhookBody"] {
            assert_eq!(schemas[name]["additionalProperties"], json!(false), "{name}");
        }
    }

    /// The agents' protocol (`core::wire`) takes members it does not know, so that agents can be upgraded before
    /// the server; only agent tokens may send it.
    const AGENT_PROTOCOL: [&str; 3] = ["/api/v1/ingest/batches", "/api/v1/usage/records", "/api/v1/training/progress"];

    /// Every object any other request may carry, however deep, lists its members and refuses others (or is a
    /// map whose values are typed): a free-form object would let a fuzzer send, as schema-valid, strings the
    /// body guard refuses (a NUL), and would let a typo pass unnoticed.
    #[test]
    fn request_objects_are_closed() {
        fn walk(
            node: &Value,
            schemas: &Map<String, Value>,
            seen: &mut BTreeSet<String>,
            open: &mut Vec<String>,
            at: &str,
        ) {
            match node {
                Value::Object(m) => {
                    if let Some(r) = m.get("$ref").and_then(|r| r.as_str()) {
                        let name = r.trim_start_matches("#/components/schemas/").to_string();
                        if seen.insert(name.clone()) {
                            walk(&schemas[&name], schemas, seen, open, &name);
                        }
                        return;
                    }
                    let closed =
                        matches!(m.get("additionalProperties"), Some(a) if a == &json!(false) || a.is_object());
                    if (m.get("type") == Some(&json!("object")) || m.contains_key("properties")) && !closed {
                        open.push(at.to_string());
                    }
                    // A bare Rust integer (schemars writes its `format`) refuses `2.0`, which JSON Schema calls the
                    // integer 2 and Schemathesis sends: request integers are `Int`/`Whole` (no format).
                    let integer = match m.get("type") {
                        Some(Value::Array(ts)) => ts.contains(&json!("integer")),
                        t => t == Some(&json!("integer")),
                    };
                    if integer && m.contains_key("format") {
                        open.push(format!("{at}: a bare integer"));
                    }
                    for (k, v) in m {
                        // Inside a closed object, these only add conditions on its members.
                        if closed && ["anyOf", "oneOf", "allOf", "if", "then", "else"].contains(&k.as_str()) {
                            continue;
                        }
                        walk(v, schemas, seen, open, &format!("{at}.{k}"));
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| walk(v, schemas, seen, open, at)),
                _ => {}
            }
        }
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let (mut reached, mut open, mut agents) = (BTreeSet::new(), Vec::new(), Vec::new());
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let mut seen = BTreeSet::new();
                let mut found = Vec::new();
                walk(&op["requestBody"], schemas, &mut seen, &mut found, &format!("{method} {path}"));
                walk(&op["parameters"], schemas, &mut seen, &mut found, &format!("{method} {path}"));
                if AGENT_PROTOCOL.contains(&path.as_str()) {
                    agents.extend(found.into_iter().map(|f| format!("{method} {path}: {f}")));
                } else {
                    open.extend(found.into_iter().map(|f| format!("{method} {path}: {f}")));
                    reached.extend(seen);
                }
            }
        }
        assert!(reached.len() >= 20, "only {} request schemas reached", reached.len());
        assert!(reached.contains("LimitsSentBack"), "the settings body's limits are a request schema");
        assert!(open.is_empty(), "request objects that take any member, or bare integers: {open:#?}");
        // The exemption is used (else it is stale): the agents' batch is open.
        assert!(agents.iter().any(|a| a.contains("/api/v1/ingest/batches")), "{agents:?}");
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
