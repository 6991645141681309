//! Issue 33's input classes on every route that takes them, generated from the API document and the route scan —
//! never listed by hand, so a new operation or page is covered the day it is added:
//!
//! - **text**: a control character (NUL, BEL, line feed) in every path parameter, every query parameter and every
//!   string of every JSON body answers 422 problem+json naming it — before any handler, query or URI is built;
//! - **numbers**: every integer and every decimal string of every body, far beyond its bound, answers 422;
//! - **path segments**: a segment that is not UTF-8, or holds a control character, answers 422 on the API and
//!   400 on every other route (portal pages and forms, sign-in, setup links, OData); one with a space, a quote, a
//!   slash or SQL is never a 5xx;
//! - **forms**: a control character in any field of any form is refused (422) before the form's handler;
//! - agents' bodies (a batch, NDJSON records): a NUL in any string answers 422.
//!
//! None of them may answer 5xx, and none may change anything (the audit log stays as it was).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use gpuledger_server::{
    app::{self, HttpOptions},
    auth::{self, Scope},
    demo,
    state::AppState,
};
use serde_json::{Value, json};

use common::{Answer, routes, send};

/// How a request authenticates.
#[derive(Clone)]
enum Who {
    Token(String),
    Session(String),
}

fn request(who: &Who, method: &str, uri: &str, body: Option<&Value>) -> Request<Body> {
    let mut r = Request::builder().method(method).uri(uri).header(header::HOST, "localhost");
    match who {
        Who::Token(t) => r = r.header(header::AUTHORIZATION, format!("Bearer {t}")),
        Who::Session(c) => {
            r = r
                .header(header::COOKIE, format!("gl_session={c}"))
                .header("x-csrf-token", auth::session::csrf_for(c))
                .header(header::ORIGIN, "http://localhost");
        }
    }
    match body {
        Some(b) => r.header(header::CONTENT_TYPE, "application/json").body(Body::from(b.to_string())).unwrap(),
        None => r.body(Body::empty()).unwrap(),
    }
}

/// The component a `$ref` names.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/")) {
        Some(name) => resolve(doc, &doc["components"]["schemas"][name]),
        None => schema,
    }
}

/// A value the schema allows, from its examples where it has them (every input class publishes one); objects
/// with their required members (and those of the first `oneOf` or `anyOf` branch), lists with one item.
fn example(doc: &Value, schema: &Value) -> Value {
    let schema = resolve(doc, schema);
    if let Some(first) = schema["examples"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.iter().find(|v| !v.is_null())) {
        return first.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema[key].as_array()
            && schema.get("properties").is_none()
        {
            let branch = branches.iter().find(|b| b["type"] != "null").unwrap_or(&branches[0]);
            return example(doc, branch);
        }
    }
    let ty = match &schema["type"] {
        Value::Array(types) => types.iter().find(|t| *t != "null").cloned().unwrap_or(Value::Null),
        other => other.clone(),
    };
    match ty.as_str().unwrap_or("object") {
        "object" => {
            let mut required: Vec<String> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r.as_str().map(String::from))
                .collect();
            for key in ["oneOf", "anyOf"] {
                if let Some(first) = schema[key].as_array().and_then(|b| b.first()) {
                    required.extend(
                        first["required"].as_array().into_iter().flatten().filter_map(|r| r.as_str().map(String::from)),
                    );
                }
            }
            let mut out = serde_json::Map::new();
            for name in required {
                out.insert(name.clone(), example(doc, &schema["properties"][&name]));
            }
            Value::Object(out)
        }
        "array" => Value::Array(vec![example(doc, &schema["items"])]),
        "integer" => schema["minimum"].clone().as_i64().map_or(json!(1), Value::from),
        "number" => json!(1),
        "boolean" => json!(false),
        _ => json!("x"),
    }
}

/// Every leaf of a JSON value with its path (object keys and array indices).
fn leaves(v: &Value, path: &mut Vec<Value>, out: &mut Vec<(Vec<Value>, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.push(json!(k));
                leaves(x, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(json!(i));
                leaves(x, path, out);
                path.pop();
            }
        }
        leaf => out.push((path.clone(), leaf.clone())),
    }
}

fn replaced(v: &Value, path: &[Value], with: Value) -> Value {
    let mut v = v.clone();
    let mut at = &mut v;
    for step in path {
        at = match step {
            Value::String(k) => &mut at[k.as_str()],
            Value::Number(i) => &mut at[usize::try_from(i.as_u64().unwrap()).unwrap()],
            _ => unreachable!(),
        };
    }
    *at = with;
    v
}

fn fill(template: &str, values: &[(String, String)]) -> String {
    let mut out = template.to_string();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20")
}

/// The refusal a class must get: `expected`, as problem+json; never a 5xx.
fn refused(what: &str, answer: &Answer, expected: StatusCode, failures: &mut Vec<String>) {
    if answer.status != expected || !answer.headers[header::CONTENT_TYPE].to_str().unwrap().contains("problem+json") {
        failures.push(format!("{what}: expected {expected} problem+json, got {}: {:.300}", answer.status, answer.body));
    }
}

#[tokio::test]
async fn every_input_class_is_refused_on_every_route_that_takes_it() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());
    let (finance, _) = common::demo_login(&app, "finance").await;
    let su = common::admin_pool(&test_db).await;

    let doc = gpuledger_server::openapi::document();
    let credentials = [Who::Token(admin.clone()), Who::Session(finance.clone())];
    let mut failures = Vec::new();
    let (mut operations, mut requests) = (0, 0);
    let mut untested = Vec::new();
    for (template, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let method = method.to_uppercase();
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let in_path: Vec<&Value> = params.iter().filter(|p| p["in"] == "path").collect();
            let in_query: Vec<&Value> = params.iter().filter(|p| p["in"] == "query").collect();
            let json_body = op["requestBody"]["content"].get("application/json").map(|c| &c["schema"]);
            if in_path.is_empty() && in_query.is_empty() && json_body.is_none() {
                continue; // nothing to take
            }
            let path_values: Vec<(String, String)> = in_path
                .iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap().to_string(),
                        example(&doc, &p["schema"])
                            .as_str()
                            .map_or_else(|| example(&doc, &p["schema"]).to_string(), String::from),
                    )
                })
                .collect();
            let base_query: Vec<(String, String)> = in_query
                .iter()
                .filter(|p| p["required"] == true)
                .map(|p| {
                    let v = example(&doc, &p["schema"]);
                    (p["name"].as_str().unwrap().to_string(), v.as_str().map_or_else(|| v.to_string(), String::from))
                })
                .collect();
            let base_body = json_body.map(|s| example(&doc, s));
            let uri = |path: &[(String, String)], query: &[(String, String)]| {
                let path = fill(template, &path.iter().map(|(k, v)| (k.clone(), enc(v))).collect::<Vec<_>>());
                let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect();
                if query.is_empty() { path } else { format!("{path}?{}", query.join("&")) }
            };
            // A credential the operation lets in (the classes are refused after the capability is checked).
            let mut who = None;
            for w in &credentials {
                let probe = send(&app, request(w, &method, &uri(&path_values, &base_query), base_body.as_ref())).await;
                if !matches!(probe.status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                    who = Some(w.clone());
                    break;
                }
            }
            let Some(who) = who else {
                untested.push(format!("{method} {template}"));
                continue;
            };
            operations += 1;
            let audit_before: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log").fetch_one(&su).await.unwrap();
            let mut ask = |uri: String, body: Option<&Value>| {
                requests += 1;
                let who = who.clone();
                let method = method.clone();
                let body = body.cloned();
                let app = app.clone();
                async move { send(&app, request(&who, &method, &uri, body.as_ref())).await }
            };
            let text = ["a\u{0}b", "a\u{7}b", "a\nb"];
            // Text and path segments in the path.
            for (i, (name, _)) in path_values.iter().enumerate() {
                for bad in text {
                    let mut values = path_values.clone();
                    values[i].1 = bad.to_string();
                    let a = ask(uri(&values, &base_query), base_body.as_ref()).await;
                    refused(
                        &format!("{method} {template}: path {name}={bad:?}"),
                        &a,
                        StatusCode::UNPROCESSABLE_ENTITY,
                        &mut failures,
                    );
                }
                let raw = fill(template, &[(name.clone(), "a%FFb".into())]);
                let raw = fill(&raw, &path_values.iter().map(|(k, v)| (k.clone(), enc(v))).collect::<Vec<_>>());
                let a = ask(raw, base_body.as_ref()).await;
                refused(
                    &format!("{method} {template}: path {name} not UTF-8"),
                    &a,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &mut failures,
                );
                for odd in ["a b", "a\"b", "a/b", "'; --"] {
                    let mut values = path_values.clone();
                    values[i].1 = odd.to_string();
                    let a = ask(uri(&values, &base_query), base_body.as_ref()).await;
                    if a.status.is_server_error() {
                        failures.push(format!("{method} {template}: path {name}={odd:?} answered {}", a.status));
                    }
                }
            }
            // Text in every query parameter; numbers beyond any bound in the numeric ones.
            for p in &in_query {
                let name = p["name"].as_str().unwrap();
                let sample = example(&doc, &p["schema"]);
                let numeric = sample.is_number()
                    || sample
                        .as_str()
                        .is_some_and(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.'));
                let huge = format!("1{}", "0".repeat(30));
                let mut values: Vec<&str> = text.to_vec();
                if numeric {
                    values.push(&huge);
                }
                for bad in values {
                    let mut query: Vec<(String, String)> =
                        base_query.iter().filter(|(k, _)| k != name).cloned().collect();
                    query.push((name.to_string(), bad.to_string()));
                    let a = ask(uri(&path_values, &query), base_body.as_ref()).await;
                    refused(
                        &format!("{method} {template}: query {name}={bad:?}"),
                        &a,
                        StatusCode::UNPROCESSABLE_ENTITY,
                        &mut failures,
                    );
                }
            }
            // Text and numbers in every leaf of the body.
            if let Some(body) = &base_body {
                let mut found = Vec::new();
                leaves(body, &mut Vec::new(), &mut found);
                for (at, leaf) in found {
                    let mut bad: Vec<Value> = Vec::new();
                    match &leaf {
                        Value::String(s) => {
                            // Line breaks are prose's to take; NUL and BEL no text takes.
                            bad.extend(text.iter().filter(|t| !t.contains('\n')).map(|t| json!(t)));
                            if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.') {
                                bad.push(json!(format!("1{}", "0".repeat(30))));
                            }
                        }
                        Value::Number(_) => bad.extend([json!(1_000_000_000_000_i64), json!(-1_000_000_000_000_i64)]),
                        _ => {}
                    }
                    for b in bad {
                        let mutated = replaced(body, &at, b.clone());
                        let a = ask(uri(&path_values, &base_query), Some(&mutated)).await;
                        refused(
                            &format!("{method} {template}: body {at:?} = {b}"),
                            &a,
                            StatusCode::UNPROCESSABLE_ENTITY,
                            &mut failures,
                        );
                    }
                }
            }
            let audit_after: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log").fetch_one(&su).await.unwrap();
            if audit_after != audit_before {
                failures.push(format!("{method} {template}: a refused request changed something (audit log)"));
            }
        }
    }
    // The agents' own bodies: a NUL anywhere is refused.
    let agent = Who::Token(agent);
    let batch = json!({"wire_version": gpuledger_core::wire::WIRE_VERSION, "agent": {"name": "x", "version": "1\u{0}"}, "facts": []});
    let a = send(&app, request(&agent, "POST", "/api/v1/ingest/batches", Some(&batch))).await;
    refused(
        "POST /api/v1/ingest/batches: a NUL in the agent's version",
        &a,
        StatusCode::UNPROCESSABLE_ENTITY,
        &mut failures,
    );
    for path in ["/api/v1/usage/records", "/api/v1/training/progress"] {
        let line = json!({"record_id": "r\u{0}"}).to_string();
        let r = Request::post(path)
            .header(header::HOST, "localhost")
            .header(
                header::AUTHORIZATION,
                format!(
                    "Bearer {}",
                    match &agent {
                        Who::Token(t) => t.as_str(),
                        Who::Session(_) => "",
                    }
                ),
            )
            .header(header::CONTENT_TYPE, "application/x-ndjson")
            .body(Body::from(format!("{line}\n")))
            .unwrap();
        let a = send(&app, r).await;
        refused(&format!("POST {path}: a NUL in a record"), &a, StatusCode::UNPROCESSABLE_ENTITY, &mut failures);
    }

    // Every route outside the REST API: path segments and queries (400), form fields (422), with and without a
    // session.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut others = routes::server_routes(root);
    others.extend(routes::portal_routes(root));
    let mut outside = 0;
    for (method, template, _) in others.iter().filter(|(_, p, _)| !p.starts_with("/api")) {
        outside += 1;
        let names: Vec<String> = template
            .split('{')
            .skip(1)
            .filter_map(|r| r.split_once('}').map(|(n, _)| n.trim_start_matches('*').to_string()))
            .collect();
        let method = if method == "ANY" { "GET" } else { method.as_str() };
        for session in [None, Some(finance.as_str())] {
            for bad in ["a%00b", "a%0Ab", "a%FFb"] {
                let path = names.iter().fold(template.clone(), |p, n| {
                    p.replace(&format!("{{{n}}}"), bad).replace(&format!("{{*{n}}}"), bad)
                });
                let (path, query) =
                    if names.is_empty() { (template.clone(), format!("?q={bad}")) } else { (path, String::new()) };
                let mut r =
                    Request::builder().method(method).uri(format!("{path}{query}")).header(header::HOST, "localhost");
                if let Some(c) = session {
                    r = r.header(header::COOKIE, format!("gl_session={c}"));
                }
                let a = send(&app, r.body(Body::empty()).unwrap()).await;
                refused(
                    &format!("{method} {template} with {bad} (session: {})", session.is_some()),
                    &a,
                    StatusCode::BAD_REQUEST,
                    &mut failures,
                );
            }
            // A space, a quote, a slash: never a 5xx (a portal form once built an invalid URI from them).
            // Each segment in turn, the others a value their handler takes (so the odd one reaches the handler).
            let sample = |n: &str| match n {
                "action" => "comment",
                "period" | "month" => "2026-10",
                "version" => "1",
                "what" => "models",
                _ => "1",
            };
            let mut odd_paths: Vec<String> = Vec::new();
            for odd in ["a%20b", "a%22b", "2026%2011", "a%2Fb"] {
                for target in &names {
                    odd_paths.push(names.iter().fold(template.clone(), |p, n| {
                        let v = if n == target { odd } else { sample(n) };
                        p.replace(&format!("{{{n}}}"), v).replace(&format!("{{*{n}}}"), v)
                    }));
                }
            }
            for path in odd_paths {
                let odd = path.clone();
                let mut r = Request::builder().method(method).uri(path).header(header::HOST, "localhost");
                if let Some(c) = session {
                    r = r
                        .header(header::COOKIE, format!("gl_session={c}"))
                        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                        .header(header::ORIGIN, "http://localhost");
                }
                let body = session.map_or_else(String::new, |c| format!("csrf={}", auth::session::csrf_for(c)));
                let a = send(&app, r.body(Body::from(body)).unwrap()).await;
                if a.status.is_server_error() {
                    failures.push(format!("{method} {template} with {odd}: {} {:.200}", a.status, a.body));
                }
            }
            if method == "POST" {
                let path = names.iter().fold(template.clone(), |p, n| p.replace(&format!("{{{n}}}"), "x"));
                let mut r = Request::post(path)
                    .header(header::HOST, "localhost")
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .header(header::ORIGIN, "http://localhost");
                if let Some(c) = session {
                    r = r.header(header::COOKIE, format!("gl_session={c}"));
                }
                let a = send(&app, r.body(Body::from("org=demo&name=a%00b&reason=x%07y")).unwrap()).await;
                refused(
                    &format!("POST {template}: a control character in a form field (session: {})", session.is_some()),
                    &a,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &mut failures,
                );
            }
        }
    }

    eprintln!(
        "input classes: {operations} API operations, {requests} requests; {outside} other routes; untested (only agent or join credentials): {untested:?}"
    );
    assert!(operations >= 55, "only {operations} operations were reached");
    for op in &untested {
        assert!(
            [
                "POST /api/v1/agents/join",
                "POST /api/v1/ingest/batches",
                "POST /api/v1/usage/records",
                "POST /api/v1/training/progress"
            ]
            .contains(&op.as_str()),
            "{op} let no credential in"
        );
    }
    assert!(outside >= 30, "the route scan found only {outside} routes outside the API");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
