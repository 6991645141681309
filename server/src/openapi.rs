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
    json!({
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
                          "description": "An API token from `gpuledger-server token create` (glt_…)."}
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
                    "flagged": {"type": "array", "items": {"type": "object"}}}}
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
            "/api/v1/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}}
        }
    })
}
