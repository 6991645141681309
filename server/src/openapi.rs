//! `/api/v1/openapi.json`: the REST API's OpenAPI 3.1 document, written by hand beside the handlers it describes
//! (the test checks that every documented path answers, so the document cannot drift from the router unnoticed).

use axum::{Json, Router, routing::get};
use serde_json::{Value, json};

use crate::app::AppState;

/// `GET /api/v1/openapi.json`.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/openapi.json", get(|| async { Json(document()) }))
}

fn problem() -> Value {
    json!({"description": "Problem details (RFC 9457) naming the field and the reason",
           "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}})
}

/// The document.
pub fn document() -> Value {
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "GPU Ledger API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Who used the GPU, and what do they owe. Agents push facts; people and BI tools read ledgers."
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
            "schemas": {
                "Problem": {"type": "object", "required": ["type", "title", "status", "detail"], "properties": {
                    "type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"},
                    "detail": {"type": "string"}, "field": {"type": "string"}}},
                "Batch": {"type": "object", "required": ["wire_version", "agent", "facts"], "properties": {
                    "wire_version": {"type": "integer", "const": gpuledger_core::wire::WIRE_VERSION},
                    "agent": {"type": "object"},
                    "cluster": {"type": "string", "description": "Must match the credential's cluster when given."},
                    "facts": {"type": "array", "maxItems": gpuledger_core::wire::MAX_FACTS_PER_BATCH,
                              "items": {"type": "object", "required": ["event_id", "observed_at", "kind"]}}}},
                "BatchAck": {"type": "object", "required": ["received", "stored"], "properties": {
                    "received": {"type": "integer"}, "stored": {"type": "integer"},
                    "flagged": {"type": "array", "items": {"type": "object"}}}},
                "Dispute": {"type": "object", "description": "Amounts are decimal strings, times RFC 3339 UTC.",
                    "required": ["id", "number", "period", "line_ids", "state", "reason", "opened_by", "opened_at"],
                    "properties": {
                    "id": {"type": "string", "format": "uuid"}, "number": {"type": "integer"},
                    "period": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"},
                    "line_ids": {"type": "array", "items": {"type": "string"}},
                    "state": {"enum": ["open", "accepted", "rejected"]}, "reason": {"type": "string"},
                    "opened_by": {"type": "string"}, "opened_at": {"type": "string", "format": "date-time"},
                    "resolved_by": {"type": ["string", "null"]}, "resolved_at": {"type": ["string", "null"], "format": "date-time"},
                    "resolution": {"type": ["string", "null"]}, "credit_amount": {"type": ["string", "null"]},
                    "adjustment_id": {"type": ["string", "null"], "format": "uuid"},
                    "credit_state": {"enum": ["pending_approval", "approved", "applied", "rejected", null]},
                    "disputed_amount": {"type": ["string", "null"]}, "currency": {"type": ["string", "null"]}}},
                "DisputeDetail": {"allOf": [{"$ref": "#/components/schemas/Dispute"}, {"type": "object", "properties": {
                    "lines": {"type": "array", "items": {"type": "object", "description": "The disputed ledger lines"}},
                    "events": {"type": "array", "items": {"type": "object", "required": ["id", "at", "actor", "action", "body", "details"]}},
                    "credit": {"type": ["object", "null"], "description": "The credit adjustment (amount negative)"}}}]},
                "DisputePage": {"type": "object", "required": ["items", "total", "page", "per_page"], "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/components/schemas/Dispute"}},
                    "total": {"type": "integer"}, "page": {"type": "integer"}, "per_page": {"type": "integer"}}}
            }
        },
        "paths": {
            "/healthz": {"get": {"summary": "Liveness (never touches the database)",
                                 "responses": {"200": {"description": "alive"}}}},
            "/readyz": {"get": {"summary": "Readiness: database reachable and schema current",
                                "responses": {"200": {"description": "ready"}, "503": problem()}}},
            "/api/v1/ingest/batches": {"post": {
                "summary": "Agents' facts (gzip allowed); acknowledged after the commit; idempotent by event ID",
                "security": [{"token": []}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Batch"}}}},
                "responses": {"200": {"description": "stored", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BatchAck"}}}},
                              "401": problem(), "403": problem(), "413": problem(), "422": problem()}}},
            "/api/v1/agents/join": {"post": {
                "summary": "Exchange a one-time join token for the cluster's agent credential",
                "security": [{"token": []}],
                "responses": {"200": {"description": "the credential, shown once"}, "401": problem(), "403": problem()}}},
            "/api/v1/policies": {
                "get": {"summary": "Cost policy versions, newest first (admin or export token)", "security": [{"token": []}],
                        "responses": {"200": {"description": "{items, total}"}, "401": problem(), "403": problem()}},
                "post": {"summary": "Create a draft: {effective_from: YYYY-MM, note, policy: {currency, classes[{gpu_class, guaranteed, borrowed}], energy{per_kwh, pue}, services[{endpoint, per_million_weighted_tokens?}], token_weights[{model, input, output}], overhead{fixed[{name, amount}], unallocated_capacity, key{kind: allocated_gpu_hours|equal|fixed_shares, shares?}}}} — decimals as strings. Admin token",
                         "security": [{"token": []}],
                         "responses": {"201": {"description": "the draft"}, "401": problem(), "403": problem(), "422": problem()}}},
            "/api/v1/policies/{version}": {
                "get": {"summary": "One version", "security": [{"token": []}],
                        "responses": {"200": {"description": "the policy"}, "401": problem(), "404": problem()}},
                "put": {"summary": "Edit a draft (an approved version is never edited: 409)", "security": [{"token": []}],
                        "responses": {"200": {"description": "the draft"}, "409": problem(), "422": problem()}}},
            "/api/v1/policies/{version}/approve": {"post": {
                "summary": "Finance approves a draft: it prices every month from effective_from until a later approved version; one approved earlier with the same start is superseded; refused if it would reprice a closed month",
                "security": [{"token": []}],
                "responses": {"200": {"description": "approved"}, "409": problem(), "404": problem()}}},
            "/api/v1/quotas": {
                "get": {"summary": "Quotas (guaranteed GPUs per class per tenant or department, with validity); ?at=RFC3339", "security": [{"token": []}],
                        "responses": {"200": {"description": "{items, total}"}, "401": problem()}},
                "post": {"summary": "Add a quota: {tenant | department, gpu_class, gpus, valid_from, valid_to?}", "security": [{"token": []}],
                         "responses": {"201": {"description": "created"}, "409": problem(), "422": problem()}}},
            "/api/v1/quotas/import-kueue": {"post": {
                "summary": "Import the nominal GPU quotas of the Kueue ClusterQueues the agents reported (ClusterQueue → tenant or department by name, or {mappings}; flavor → GPU class by name)",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{imported, skipped}"}, "401": problem(), "403": problem()}}},
            "/api/v1/ledger": {"get": {
                "summary": "A month's ledger lines from the stored figures: frozen for a closed month, the open month's snapshot (as_of, provisional, stale) otherwise; ?period=YYYY-MM (required), tenant, department, term, page, per_page (≤ 10000); with totals by term",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{period, state, policy_version, currency, hash, as_of, provisional, stale, total, totals_by_term, notes, count, lines}"},
                              "409": problem(), "422": problem()}}},
            "/api/v1/periods": {"get": {"summary": "Months with their state (open, closing, closed), hash chain and totals",
                "security": [{"token": []}], "responses": {"200": {"description": "{items, total}"}, "401": problem()}}},
            "/api/v1/periods/{period}/close": {"post": {
                "summary": "Close an ended month: exactly one concurrent caller wins (409 for the others); freezes the lines, stores the bundle and the hash chain, applies approved credits and late-data corrections",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{period, lines, total, currency, hash, previous_hash, policy_version, inventory_version}"}, "409": problem()}}},
            "/api/v1/periods/{period}/bundle": {"get": {
                "summary": "The evidence bundle of a closed month (JSON, docs/bundle.md); verify offline with `gpuledger-server verify`",
                "security": [{"token": []}],
                "responses": {"200": {"description": "the bundle"}, "404": problem()}}},
            "/api/v1/periods/{period}/evidence": {"get": {
                "summary": "The allocation records behind a line (?tenant=UUID, gpu_class, endpoint, page, per_page)",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{allocations, total}"}, "401": problem()}}},
            "/api/v1/analytics/utilization": {"get": {
                "summary": "Idle reservations and active-equivalent GPU-hours (analytics, never billed): ?period=YYYY-MM, tenant, idle_threshold_pct (percent, default 5), min_idle_hours (default 1), page, per_page",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{tenants, allocations, total}"}, "401": problem(), "422": problem()}}},
            "/api/v1/disputes": {
                "get": {"summary": "Disputes, newest first; filters state (open|accepted|rejected) and period (YYYY-MM); page, per_page (≤ 100). Admin or export token",
                        "security": [{"token": []}],
                        "responses": {"200": {"description": "a page", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DisputePage"}}}},
                                      "401": problem(), "403": problem(), "422": problem()}},
                "post": {"summary": "Dispute lines of a closed period: {period, line_ids, reason}. Admin token",
                         "security": [{"token": []}],
                         "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
                             "required": ["period", "line_ids", "reason"], "properties": {"period": {"type": "string"},
                             "line_ids": {"type": "array", "items": {"type": "string"}}, "reason": {"type": "string"}}}}}},
                         "responses": {"201": {"description": "opened", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DisputeDetail"}}}},
                                       "401": problem(), "403": problem(), "409": problem(), "422": problem()}}},
            "/api/v1/disputes/{id}": {"get": {"summary": "A dispute (by UUID or number) with its lines, history and credit",
                "security": [{"token": []}],
                "responses": {"200": {"description": "the dispute", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DisputeDetail"}}}},
                              "401": problem(), "403": problem(), "404": problem()}}},
            "/api/v1/disputes/{id}/comments": {"post": {"summary": "Comment on an open dispute: {body}",
                "security": [{"token": []}],
                "responses": {"201": {"description": "the dispute"}, "401": problem(), "403": problem(), "404": problem(), "409": problem(), "422": problem()}}},
            "/api/v1/disputes/{id}/accept": {"post": {"summary": "Accept an open dispute with a credit awaiting finance's approval: {reason, credit_amount}",
                "security": [{"token": []}],
                "responses": {"200": {"description": "the dispute"}, "401": problem(), "403": problem(), "404": problem(), "409": problem(), "422": problem()}}},
            "/api/v1/disputes/{id}/reject": {"post": {"summary": "Reject an open dispute: {reason}",
                "security": [{"token": []}],
                "responses": {"200": {"description": "the dispute"}, "401": problem(), "403": problem(), "404": problem(), "409": problem(), "422": problem()}}},
            "/api/v1/disputes/{id}/credit/approve": {"post": {"summary": "Finance approves the credit; the next period close applies it: {reason?}",
                "security": [{"token": []}],
                "responses": {"200": {"description": "the dispute"}, "401": problem(), "403": problem(), "404": problem(), "409": problem()}}},
            "/api/v1/disputes/{id}/credit/reject": {"post": {"summary": "Finance refuses the credit: {reason}",
                "security": [{"token": []}],
                "responses": {"200": {"description": "the dispute"}, "401": problem(), "403": problem(), "404": problem(), "409": problem(), "422": problem()}}},
            "/api/v1/periods/{period}/findings": {"get": {"summary": "Data-quality findings of a month (inventory gaps, agent gaps, over-commit, unknown tenants): counts by kind and the newest 200",
                "responses": {"200": {"description": "Findings"}, "403": problem()}}},
            "/api/v1/me": {"get": {"summary": "Who the caller is: organization, roles, department scope, CSRF token of a session",
                "responses": {"200": {"description": "The caller"}, "401": problem()}}},
            "/api/v1/tokens": {
                "get": {"summary": "API tokens of the organization (never their secrets); admins",
                        "responses": {"200": {"description": "Tokens"}, "401": problem(), "403": problem()}},
                "post": {"summary": "Create a token: {name, scope: admin|export|agent:CLUSTER|join:CLUSTER, departments?, expires_in_days?}; the answer shows it once",
                         "responses": {"201": {"description": "The token"}, "422": problem(), "429": problem()}}},
            "/api/v1/tokens/{id}/revoke": {"post": {"summary": "Revoke a token, effective at once",
                "responses": {"200": {"description": "Revoked"}, "404": problem()}}},
            "/api/v1/identity/provider": {
                "get": {"summary": "The organization's OpenID provider settings (the secret is never returned) and the redirect URI to register",
                        "responses": {"200": {"description": "Settings"}}},
                "put": {"summary": "Set the provider: {issuer, client_id, client_secret, groups_claim?, scopes?}; discovery is checked. Switches demo login off.",
                        "responses": {"200": {"description": "Settings"}, "422": problem()}},
                "delete": {"summary": "Remove the provider", "responses": {"204": {"description": "Removed"}, "404": problem()}}},
            "/api/v1/identity/role-mappings": {
                "get": {"summary": "Group → role mappings", "responses": {"200": {"description": "Mappings"}}},
                "put": {"summary": "Replace the mappings: {mappings: [{group, role, department?}]}",
                        "responses": {"200": {"description": "Mappings"}, "422": problem()}}},
            "/api/v1/audit": {"get": {"summary": "The audit log, newest first: ?limit=&before=RFC3339&action=",
                "responses": {"200": {"description": "Audit records"}, "422": problem()}}},
            "/api/v1/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}}
        }
    });
    if let Some(paths) = doc["paths"].as_object_mut() {
        paths.extend(export_paths());
        paths.extend(tenancy_paths());
        paths.insert(
            "/api/v1/ledger/months".into(),
            json!({"get": {
                "summary": "Each month's total as the caller may see it, from the stored figures; \
                            ?from=YYYY-MM&to=YYYY-MM (at most 36 months), department; a month without figures has \
                            total null",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{months: [{period, state, total, as_of}]}"}, "422": problem()}}}),
        );
        paths.insert(
            "/api/v1/ledger/summaries".into(),
            json!({"get": {
                "summary": "The month's stored utilization, inference and training summaries as the caller may see \
                            them (computed once per month figures, never on a read); ?period=YYYY-MM. A kind not \
                            computed yet is null; pending says newer figures are being summarized",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{period, pending, utilization: {as_of, tenants}, \
                                                      inference: {as_of, tenants, endpoints, unattributed}, \
                                                      training: {as_of, workloads}}"},
                              "401": problem(), "422": problem()}}}),
        );
        paths.insert(
            "/api/v1/analytics/inference".into(),
            json!({"get": {
                "summary": "Inference efficiency of shared endpoints (analytics, never billed): ?period=YYYY-MM, \
                            department. Per tenant: requests, tokens, GPU-hours attributed by weighted tokens \
                            (modeled), tokens per GPU-hour, mean time to first token; per endpoint the totals \
                            (whole-organization callers only)",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{endpoints, tenants, unattributed}"},
                              "401": problem(), "422": problem()}}}),
        );
        paths.insert(
            "/metrics".into(),
            json!({"get": {
                "summary": "Prometheus text exposition 0.0.4: operational metrics and the identity exporter \
                            (gpuledger_workload_identity, one line per workload holding GPU capacity now). Admin or \
                            export token (Bearer or Basic); one organization per token",
                "security": [{"token": []}],
                "responses": {"200": {"description": "text/plain; version=0.0.4"}, "401": problem(), "403": problem()}}}),
        );
    }
    doc
}

/// `/api/v1/departments`, `/api/v1/tenants`, `/api/v1/inventory*` (onboarding).
fn tenancy_paths() -> Vec<(String, Value)> {
    let write = |summary: &str| {
        json!({"summary": summary, "security": [{"token": []}],
               "responses": {"201": {"description": "created"}, "401": problem(), "403": problem(),
                             "409": problem(), "422": problem()}})
    };
    let read = |summary: &str| {
        json!({"summary": summary, "security": [{"token": []}],
               "responses": {"200": {"description": "{items} or the inventory"}, "401": problem()}})
    };
    vec![
        (
            "/api/v1/departments".into(),
            json!({
            "get": read("Departments with their tenant counts"),
            "post": write("Create a department: {name}. Admins")}),
        ),
        (
            "/api/v1/tenants".into(),
            json!({
            "get": read("Tenants with their department and namespaces in force"),
            "post": write("Create a tenant: {name, department (name or ID)}; namespaces whose labels named it and \
                           usage kept under its name are taken over. Admins")}),
        ),
        (
            "/api/v1/inventory".into(),
            json!({
            "get": read("The approved GPU inventory: classes, models, MIG/vGPU profiles, time-slicing, with validity")}),
        ),
        (
            "/api/v1/inventory/models".into(),
            json!({
            "post": write("A GPU model's class from valid_from: {model, gpu_class, memory_mib?, valid_from}; ends the \
                           entry in force; recomputes the allocations it concerns. Admin or finance")}),
        ),
        (
            "/api/v1/inventory/profiles".into(),
            json!({
            "post": write("A MIG or vGPU profile's fraction: {kind: mig|vgpu, model, profile, fraction (3/7), \
                           valid_from}. Admin or finance")}),
        ),
        (
            "/api/v1/inventory/timeslicing".into(),
            json!({
            "post": write("A declared time-slicing policy: {cluster, name, replicas, valid_from}. Admin or finance")}),
        ),
        (
            "/api/v1/analytics/sessions".into(),
            json!({"get": read("Showback by AI-agent session within a tenant: ?period=YYYY-MM&tenant=UUID; requests, \
                                tokens, mean TTFT, GPU-hours of session-labelled pods, and a cost modeled from the \
                                tenant's ledger lines (analytics)")}),
        ),
        (
            "/api/v1/training/progress".into(),
            json!({"post": {
                "summary": "Training progress, NDJSON: record_id, namespace, workload, reported_at, steps? samples? \
                            (cumulative). Idempotent by record_id. Agent token",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{received, stored, duplicates}"}, "401": problem(),
                              "403": problem(), "422": problem()}}}),
        ),
        (
            "/api/v1/analytics/training".into(),
            json!({"get": read("Work per GPU-hour of training workloads: ?period=YYYY-MM; steps and samples done in \
                                the month over the GPU-hours of the workload's pods (analytics)")}),
        ),
        (
            "/api/v1/usage/records".into(),
            json!({"post": {
                "summary": "Gateways' usage records, NDJSON (one request or a minute's totals per line): record_id, \
                            endpoint, model, model_version?, tenant | gateway_key | team, started_at, window_end?, \
                            requests?, input_tokens, output_tokens, status?, latency_ms?, ttft_ms?, trace_id?, \
                            agent_session_id?. Idempotent by record_id; unknown callers kept and reported. Agent token",
                "security": [{"token": []}],
                "responses": {"200": {"description": "{received, stored, duplicates, unknown}"},
                              "401": problem(), "403": problem(), "422": problem()}}}),
        ),
        (
            "/api/v1/endpoints/{endpoint}/aliases".into(),
            json!({
                "get": read("An endpoint's gateway-key and team aliases. Admins"),
                "put": {"summary": "Replace an endpoint's aliases: {aliases: [{kind: gateway_key|team, alias, tenant}]}; \
                                    records kept without a tenant that they resolve are attributed. Admins",
                        "security": [{"token": []}],
                        "responses": {"200": {"description": "{endpoint, aliases, attributed}"}, "401": problem(),
                                      "403": problem(), "422": problem()}}}),
        ),
    ]
}

/// `/api/v1/exports/*` (one `json!` per entry: the whole document in one would pass the macro recursion limit).
fn export_paths() -> Vec<(String, Value)> {
    let csv = || {
        json!({"description": "text/csv: RFC 4180, UTF-8, CRLF, UTC ISO 8601 times, exact decimals; text cells that \
                               would start a formula are prefixed with '",
               "content": {"text/csv": {"schema": {"type": "string"}}}})
    };
    let parameters = |focus: bool| {
        let mut p = vec![
            json!({"name": "period", "in": "query", "required": true,
                   "schema": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}}),
            json!({"name": "department", "in": "query", "schema": {"type": "string", "format": "uuid"}}),
            json!({"name": "tenant", "in": "query", "schema": {"type": "string", "format": "uuid"}}),
        ];
        if focus {
            p.push(json!({"name": "version", "in": "query",
                          "schema": {"type": "string", "enum": ["1.2", "1.0"], "default": "1.2"}}));
        }
        Value::Array(p)
    };
    [
        (
            "ledger",
            "The month's ledger lines as CSV, the canonical columns (a closed month streamed from its stored \
                    lines, an open month computed now)",
        ),
        (
            "allocations",
            "Allocation intervals of the month, split at namespace-owner changes and month ends, with \
                         their GPU-hours (streamed)",
        ),
        ("usage", "Shared endpoints' productive work per tenant and window (streamed)"),
        ("disputes", "Disputes of the month's lines and how they ended (streamed)"),
        ("focus", "The month's ledger as a FinOps FOCUS dataset, version 1.2 (default) or 1.0"),
    ]
    .into_iter()
    .map(|(name, summary)| {
        let op = json!({"get": {
            "summary": summary,
            "security": [{"token": []}],
            "parameters": parameters(name == "focus"),
            "responses": {"200": csv(), "401": problem(), "403": problem(), "422": problem()}}});
        (format!("/api/v1/exports/{name}.csv"), op)
    })
    .collect()
}
