//! Every portal page rendered on the server with a fake data source: the signed-out redirect, the role gate,
//! the empty state and the error state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use leptos::prelude::*;
use leptos_router::location::RequestUrl;
use serde_json::{Value, json};

use crate::{
    App,
    data::{ApiAnswer, BoxFuture, PortalData, PortalDataHandle, PortalError, ResponseStatus, SessionView},
};

/// Answers API calls by path prefix; `fail` makes every call answer 500.
struct Fake {
    roles: Option<Vec<&'static str>>,
    fail: bool,
    answers: Vec<(&'static str, Value)>,
}

impl PortalData for Fake {
    fn overview(&self) -> BoxFuture<'_, Result<crate::Overview, PortalError>> {
        Box::pin(async { Err(PortalError { message: "overview down".into() }) })
    }

    fn session(&self) -> BoxFuture<'_, Option<SessionView>> {
        let roles = self.roles.clone();
        Box::pin(async move {
            roles.map(|r| SessionView {
                name: "pat@example.test".into(),
                roles: r.into_iter().map(String::from).collect(),
                org_name: "Acme".into(),
                csrf: "tok".into(),
                departments: None,
            })
        })
    }

    fn admin_data(&self, _what: &str) -> BoxFuture<'_, Result<Value, PortalError>> {
        let fail = self.fail;
        Box::pin(async move {
            if fail { Err(PortalError { message: "the database is unavailable".into() }) } else { Ok(json!([])) }
        })
    }

    fn tokens(&self) -> BoxFuture<'_, Result<Vec<crate::TokenRow>, PortalError>> {
        let fail = self.fail;
        Box::pin(async move {
            if fail { Err(PortalError { message: "the database is unavailable".into() }) } else { Ok(Vec::new()) }
        })
    }

    fn api(&self, _method: &str, path: String, _body: Option<String>) -> BoxFuture<'_, Result<ApiAnswer, PortalError>> {
        let answer = if self.fail {
            ApiAnswer { status: 500, body: json!({"detail": "the database is unavailable"}) }
        } else {
            let body = self
                .answers
                .iter()
                .find(|(prefix, _)| path.starts_with(prefix))
                .map(|(_, v)| v.clone())
                .unwrap_or(json!({"items": [], "lines": [], "mappings": []}));
            ApiAnswer { status: 200, body }
        };
        Box::pin(async move { Ok(answer) })
    }
}

fn signed_in(roles: Vec<&'static str>) -> Fake {
    Fake { roles: Some(roles), fail: false, answers: Vec::new() }
}

async fn render(path: &str, data: Fake) -> (String, Option<u16>) {
    let _ = any_spawner::Executor::init_tokio();
    let status = Arc::new(Mutex::new(None));
    let sink = Arc::clone(&status);
    let owner = Owner::new();
    let stream = owner.with(|| {
        provide_context(RequestUrl::new(&format!("http://localhost{path}")));
        provide_context(PortalDataHandle::new(data));
        provide_context(ResponseStatus(Arc::new(move |code| *sink.lock().unwrap() = Some(code))));
        view! { <App /> }.to_html_stream_in_order()
    });
    let html = stream.collect::<Vec<String>>().await.concat();
    let code = *status.lock().unwrap();
    (html, code)
}

const PAGES: [&str; 11] = [
    "/departments",
    "/tenants/00000000-0000-0000-0000-000000000001",
    "/disputes",
    "/disputes/7",
    "/close/2026-10",
    "/exports",
    "/admin",
    "/admin/identity",
    "/admin/policies",
    "/admin/inventory",
    "/admin/audit",
];

#[tokio::test]
async fn signed_out_visitors_see_no_data_on_any_page() {
    for path in PAGES {
        let (html, _) = render(path, Fake { roles: None, fail: false, answers: Vec::new() }).await;
        assert!(!html.contains("<table"), "{path} shows a table to a signed-out visitor: {html}");
        assert!(!html.contains("Sign out"), "{path}: {html}");
    }
}

#[tokio::test]
async fn every_page_has_an_empty_state() {
    let cases = [
        ("/departments", "No charges for this month and department."),
        ("/tenants/00000000-0000-0000-0000-000000000001", "Nothing to show"),
        ("/disputes", "No disputes here."),
        ("/exports", "OData feed"),
        ("/admin", "No cluster yet"),
        ("/admin/identity", "OpenID provider"),
        ("/admin/policies", "No cost policy yet"),
        ("/admin/inventory", "Nothing approved yet."),
        ("/admin/audit", "No records."),
    ];
    for (path, text) in cases {
        let (html, _) = render(path, signed_in(vec!["admin", "finance"])).await;
        assert!(html.contains(text), "{path} should say {text:?}: {html}");
    }
    let (html, status) = render("/tenants/00000000-0000-0000-0000-000000000001", signed_in(vec!["viewer"])).await;
    assert!(html.contains("Nothing to show"), "{html}");
    assert_eq!(status, Some(404), "an invisible tenant is not found");
}

#[tokio::test]
async fn every_page_says_when_its_data_cannot_be_read() {
    for path in PAGES.into_iter().filter(|p| *p != "/exports") {
        let (html, _) =
            render(path, Fake { roles: Some(vec!["admin", "finance"]), fail: true, answers: Vec::new() }).await;
        assert!(html.contains(r#"role="alert""#), "{path} has no error panel: {html}");
    }
}

#[tokio::test]
async fn role_pages_refuse_the_wrong_role_with_403() {
    for path in ["/admin", "/admin/identity", "/admin/policies", "/admin/inventory", "/admin/audit", "/close/2026-10"] {
        let (html, status) = render(path, signed_in(vec!["viewer"])).await;
        assert_eq!(status, Some(403), "{path}");
        assert!(html.contains("Not available to your role") || html.contains("for finance"), "{path}: {html}");
    }
}

#[tokio::test]
async fn showback_adds_up_lines_exactly_and_marks_what_is_not_exact() {
    let lines = json!([
        {"line_id": "a", "tenant": "nlp", "tenant_id": "t1", "department": "Research", "term": "guaranteed",
         "gpu_class": "H100", "amount": "0.10", "confidence": "exact", "explanation": "x"},
        {"line_id": "b", "tenant": "nlp", "tenant_id": "t1", "department": "Research", "term": "borrowed",
         "gpu_class": "H100", "amount": "0.20", "confidence": "modeled", "explanation": "y"},
    ]);
    let fake = Fake {
        roles: Some(vec!["viewer"]),
        fail: false,
        answers: vec![
            ("/api/v1/periods", json!({"items": [{"period": "2026-10", "state": "closed"}]})),
            (
                "/api/v1/ledger",
                json!({"lines": lines, "total": "0.30", "currency": "USD", "state": "closed",
                                      "totals_by_term": {"borrowed": "0.20", "guaranteed": "0.10"}}),
            ),
        ],
    };
    let (html, _) = render("/departments?period=2026-10", fake).await;
    // 0.10 + 0.20 is 0.30 exactly (a float sum would print 0.30000000000000004).
    assert!(html.contains(">0.30 USD<"), "{html}");
    assert!(html.contains("<summary>modeled</summary>"), "the tenant carries the weakest confidence: {html}");
    assert!(html.contains(r#"role="img""#) && html.contains("<title>"), "accessible charts: {html}");
    assert!(html.contains(r#"href="/tenants/t1?period=2026-10""#), "{html}");
}

#[tokio::test]
async fn showback_shows_inference_efficiency_with_its_reason_and_an_empty_state() {
    let inference = json!({"tenants": [
        {"tenant_name": "nlp", "department": "Research", "endpoint": "llm-shared", "requests": 12345,
         "input_tokens": 1000000, "output_tokens": 250000, "gpu_hours": "3.250", "tokens_per_gpu_hour": "384615",
         "mean_ttft_ms": "287", "confidence": "modeled",
         "confidence_reason": "modeled: the approved cost policy's token weights split llm-shared's GPU-hours"},
        {"tenant_name": "ops-bot", "department": "Platform", "endpoint": "llm-shared", "requests": 5,
         "input_tokens": 10, "output_tokens": 10, "gpu_hours": "0.001", "tokens_per_gpu_hour": "20000",
         "mean_ttft_ms": null, "confidence": "modeled", "confidence_reason": "r"}],
        "endpoints": [{"endpoint": "llm-shared", "gpu_hours": "3.251", "requests": 12350, "tokens": 1250020,
                       "tokens_per_gpu_hour": "384503", "mean_ttft_ms": "287", "confidence": "exact"}]});
    let fake = |department: bool| Fake {
        roles: Some(vec!["viewer"]),
        fail: false,
        answers: vec![
            ("/api/v1/periods", json!({"items": [{"period": "2026-10", "state": "closed"}]})),
            (
                "/api/v1/ledger/summaries",
                json!({"inference": if department { inference.clone() } else { json!({"tenants": [], "endpoints": []}) },
                       "pending": false}),
            ),
        ],
    };
    let (html, _) = render("/departments?period=2026-10&department=Research", fake(true)).await;
    assert!(html.contains("Inference efficiency"), "{html}");
    assert!(html.contains(">12,345<") && html.contains(">384,615<") && html.contains(">287 ms<"), "{html}");
    assert!(
        html.contains("the approved cost policy&#x27;s token weights")
            || html.contains("the approved cost policy's token weights"),
        "the row's own reason: {html}"
    );
    assert!(!html.contains("ops-bot"), "another department's tenant is cut: {html}");
    assert!(!html.contains("<caption>Endpoints</caption>"), "no organization totals on a department's view: {html}");
    assert!(!html.contains("Unattributed:"), "no organization figures on a department's view: {html}");
    let (html, _) = render("/departments?period=2026-10", fake(false)).await;
    assert!(html.contains("No inference tenants on shared endpoints this month."), "{html}");
    // The organization-wide view names the unattributed remainder.
    let org = Fake {
        roles: Some(vec!["viewer"]),
        fail: false,
        answers: vec![
            ("/api/v1/periods", json!({"items": [{"period": "2026-10", "state": "closed"}]})),
            ("/api/v1/ledger/summaries", {
                let mut v = inference.clone();
                v["unattributed"] = json!({"requests": 1200, "tokens": 34567, "gpu_hours": "0.412"});
                json!({"inference": v, "pending": false})
            }),
        ],
    };
    let (html, _) = render("/departments?period=2026-10", org).await;
    assert!(html.contains("<caption>Endpoints</caption>"), "{html}");
    assert!(html.contains("Unattributed: 1,200 requests, 34,567 tokens, 0.412 GPU-h"), "{html}");
}

#[tokio::test]
async fn tenant_page_lists_agent_sessions_with_their_modeled_cost() {
    let ledger = json!({"lines": [{"line_id": "a", "tenant": "nlp", "tenant_id": "t1", "department": "Research",
        "term": "service", "gpu_class": "", "amount": "10.00", "confidence": "modeled", "explanation": "x"}],
        "total": "10.00", "currency": "USD", "state": "open"});
    let fake = |sessions: Value| Fake {
        roles: Some(vec!["viewer"]),
        fail: false,
        answers: vec![
            ("/api/v1/periods", json!({"items": [{"period": "2026-10", "state": "open"}]})),
            ("/api/v1/ledger", ledger.clone()),
            ("/api/v1/analytics/sessions", sessions),
        ],
    };
    let sessions = json!({"sessions": [{"session": "sess-a", "requests": 1200, "input_tokens": 200000,
        "output_tokens": 400000, "mean_ttft_ms": "150", "gpu_hours": "2.000", "cost": "13.00", "confidence": "modeled"}]});
    let (html, _) = render("/tenants/t1?period=2026-10", fake(sessions)).await;
    assert!(html.contains("AI-agent sessions") && html.contains("<code>sess-a</code>"), "{html}");
    assert!(html.contains(">13.00 USD<") && html.contains(">1,200<") && html.contains(">150 ms<"), "{html}");
    assert!(html.contains("<summary>modeled</summary>"), "{html}");
    let (html, _) = render("/tenants/t1?period=2026-10", fake(json!({"sessions": []}))).await;
    assert!(html.contains("No agent sessions this month."), "{html}");
}

#[tokio::test]
async fn showback_shows_training_work_per_gpu_hour_or_its_empty_state() {
    let training = json!({"workloads": [
        {"namespace": "ml", "workload": "llm-pretrain", "tenant": "nlp", "department": "Research", "steps": 12800,
         "samples": null, "gpu_hours": "8.000", "steps_per_gpu_hour": "1600.0", "samples_per_gpu_hour": null},
        {"namespace": "ops", "workload": "x", "tenant": "ops", "department": "Platform", "steps": 1,
         "samples": 1, "gpu_hours": "1.000", "steps_per_gpu_hour": "1.0", "samples_per_gpu_hour": "1.0"}]});
    let fake = |answer: Value| Fake {
        roles: Some(vec!["viewer"]),
        fail: false,
        answers: vec![
            ("/api/v1/periods", json!({"items": [{"period": "2026-10", "state": "closed"}]})),
            ("/api/v1/ledger/summaries", json!({"training": answer, "pending": false})),
        ],
    };
    let (html, _) = render("/departments?period=2026-10&department=Research", fake(training)).await;
    assert!(html.contains("ml/llm-pretrain") && html.contains(">12,800<") && html.contains(">1,600.0<"), "{html}");
    assert!(!html.contains("ops/x"), "another department's workload is cut: {html}");
    let (html, _) = render("/departments?period=2026-10", fake(json!({"workloads": []}))).await;
    assert!(html.contains("No training progress reported this month."), "{html}");
}
