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
            "/api/v1/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}}
        }
    })
}
