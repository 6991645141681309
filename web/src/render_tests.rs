//! Every portal page rendered on the server with a fake data source: the signed-out redirect, the role gate,
//! the empty state and the error state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use leptos::prelude::*;
use leptos_router::location::RequestUrl;
use serde_json::{Value, json};

use gpuledger_api::{
    auth::ProviderSettings,
    orgs::{OrganizationLimits, OrganizationSettings},
    policy::{PolicyList, QuotaList},
};

use crate::{
    App, PeriodRow, TokenRow,
    data::{
        ApiAnswer, BoxFuture, ClusterRow, InventoryRow, OwnershipRow, PortalData, PortalDataHandle, PortalError,
        ResponseStatus, SessionView,
    },
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

    fn admin_clusters(&self) -> BoxFuture<'_, Result<Vec<ClusterRow>, PortalError>> {
        let fail = self.fail;
        Box::pin(async move { if fail { Err(unavailable()) } else { Ok(Vec::new()) } })
    }

    fn admin_inventory(&self) -> BoxFuture<'_, Result<Vec<InventoryRow>, PortalError>> {
        let fail = self.fail;
        Box::pin(async move { if fail { Err(unavailable()) } else { Ok(Vec::new()) } })
    }

    fn admin_tenancy(&self) -> BoxFuture<'_, Result<Vec<OwnershipRow>, PortalError>> {
        let fail = self.fail;
        Box::pin(async move { if fail { Err(unavailable()) } else { Ok(Vec::new()) } })
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
        } else if path.starts_with("/api/v1/costs/imports") && !self.answers.iter().any(|(p, _)| path.starts_with(p)) {
            // No bill imported for the month.
            ApiAnswer { status: 404, body: json!({"detail": "period: no bill was imported"}) }
        } else {
            let body = self
                .answers
                .iter()
                .find(|(prefix, _)| path.starts_with(prefix))
                .map(|(_, v)| v.clone())
                .or_else(|| admin_answer(&path))
                .unwrap_or(json!({"items": [], "lines": [], "mappings": []}));
            ApiAnswer { status: 200, body: complete(&path, body) }
        };
        Box::pin(async move { Ok(answer) })
    }
}

/// `over`'s fields on top of `base`'s: a fake names what its test is about, the rest is a neutral default.
fn with(base: Value, over: &Value) -> Value {
    let mut base = base;
    if let (Some(b), Some(o)) = (base.as_object_mut(), over.as_object()) {
        for (k, v) in o {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

/// Each entry of `over[key]` completed by `item`.
fn each(over: &Value, key: &str, item: impl Fn(&Value) -> Value) -> Value {
    Value::Array(over[key].as_array().into_iter().flatten().map(item).collect())
}

/// A fake's answer for the ledger's pages completed to the contract's shape (the pages read it typed).
fn complete(path: &str, over: Value) -> Value {
    let period = "2026-10";
    let window = json!({"period": period, "from": "2026-10-01T00:00:00Z", "to": "2026-11-01T00:00:00Z", "basis": "b",
                        "as_of": "2026-11-01T00:00:00Z", "computed_at": "2026-11-01T00:00:00Z"});
    let line = |l: &Value| {
        with(
            json!({"line_id": "", "period": "2026-10", "department_id": "d1", "department": "", "tenant": "", "term": "",
                   "gpu_class": "", "quantity": "0", "unit": "GPU-hour", "rate": "0", "amount": "0.00",
                   "currency": "USD", "confidence": "exact", "policy_version": 1, "evidence": "", "explanation": ""}),
            l,
        )
    };
    if path.starts_with("/api/v1/ledger/months") {
        with(json!({"months": []}), &over)
    } else if path.starts_with("/api/v1/idle") {
        with(
            json!({"as_of": "2026-12-01T12:00:00Z", "threshold_pct": "5", "min_idle_hours": "2", "items": [],
                   "not_measured": 0}),
            &over,
        )
    } else if path.starts_with("/api/v1/budgets") {
        with(json!({"period": "2026-12", "items": []}), &over)
    } else if path.starts_with("/api/v1/forecast") {
        with(
            json!({"period": "2026-12", "as_of": "2026-12-15T00:00:00Z", "currency": "USD", "elapsed": "0.5",
                   "departments": [], "tenants": [], "total": {"to_date": "0.00", "forecast": "0.00", "budget": null}}),
            &over,
        )
    } else if path.starts_with("/api/v1/ledger/summaries") {
        let mut v = with(json!({"period": period, "pending": false}), &over);
        if over["utilization"].is_object() {
            let u = &over["utilization"];
            v["utilization"] = with(
                with(
                    window.clone(),
                    &json!({"threshold": "5", "min_idle_hours": "1",
                "without_fraction": 0}),
                ),
                u,
            );
            v["utilization"]["tenants"] = each(u, "tenants", |t| {
                with(
                    json!({"allocations": 0, "idle_allocations": 0,
                "allocated_gpu_hours": "0", "active_equivalent_gpu_hours": "0", "observed_gpu_hours": "0",
                "idle_gpu_hours": "0", "confidence": "exact"}),
                    t,
                )
            });
        }
        if over["inference"].is_object() {
            let i = &over["inference"];
            v["inference"] = with(window.clone(), i);
            v["inference"]["tenants"] = each(i, "tenants", |t| {
                with(
                    json!({"tenant_id": "t", "tenant_name": "",
                "department_id": "d", "department": "", "endpoint": "", "models": [], "requests": 0,
                "input_tokens": 0, "output_tokens": 0, "share_pct": "0", "gpu_hours": "0", "confidence": "exact",
                "confidence_reason": ""}),
                    t,
                )
            });
            v["inference"]["endpoints"] = each(i, "endpoints", |e| {
                with(
                    json!({"endpoint": "", "gpu_hours": "0",
                "requests": 0, "tokens": 0, "confidence": "exact"}),
                    e,
                )
            });
        }
        if over["training"].is_object() {
            let t = &over["training"];
            v["training"] = with(window.clone(), t);
            v["training"]["workloads"] =
                each(t, "workloads", |w| with(json!({"namespace": "", "workload": "", "gpu_hours": "0"}), w));
        }
        v
    } else if path.starts_with("/api/v1/ledger") {
        let mut v = with(
            json!({"period": period, "state": "open", "starts_at": "2026-10-01T00:00:00Z", "ends_at": "2026-11-01T00:00:00Z",
                   "time_zone": "UTC", "as_of": "2026-11-01T00:00:00Z", "provisional": false,
            "stale": false, "total": "0.00", "totals_by_term": {}, "count": 0, "page": 1, "per_page": 10000}),
            &over,
        );
        v["lines"] = each(&over, "lines", line);
        v
    } else if path.starts_with("/api/v1/periods/") && path.contains("/evidence") {
        with(
            json!({"period": period, "total": 0, "page": 1, "per_page": 25, "sort": "start", "allocations": []}),
            &over,
        )
    } else if path.starts_with("/api/v1/periods/") && path.contains("/findings") {
        with(json!({"period": period, "by_kind": {}, "items": []}), &over)
    } else if path.starts_with("/api/v1/periods") {
        with(json!({"total": over["items"].as_array().map_or(0, Vec::len), "items": []}), &over)
    } else if path.starts_with("/api/v1/disputes?") {
        with(json!({"items": [], "total": 0, "page": 1, "per_page": 200}), &over)
    } else if path.starts_with("/api/v1/analytics/sessions") {
        let mut v = with(with(window, &json!({"tenant_id": "t1", "tenant_name": "", "currency": "USD"})), &over);
        v["sessions"] = each(&over, "sessions", |x| {
            with(
                json!({"session": "", "requests": 0, "input_tokens": 0,
            "output_tokens": 0, "allocations": 0, "gpu_hours": "0", "confidence": "modeled"}),
                x,
            )
        });
        v
    } else {
        over
    }
}

fn unavailable() -> PortalError {
    PortalError { message: "the database is unavailable".into() }
}

/// The admin pages' empty answers, as the contract's types (what a new organization answers).
fn admin_answer(path: &str) -> Option<Value> {
    let v = if path.starts_with("/api/v1/identity/provider") {
        serde_json::to_value(ProviderSettings {
            provider: None,
            demo_login: false,
            redirect_uri: "http://localhost/auth/callback".into(),
        })
    } else if path.starts_with("/api/v1/organization/settings") {
        serde_json::to_value(OrganizationSettings {
            slug: "acme".into(),
            display_name: "Acme Corp".into(),
            default_currency: "USD".into(),
            retention_months: 84,
            state: gpuledger_api::states::OrgState::Active,
            limits: OrganizationLimits {
                rate_limit_per_minute: None,
                ingest_facts_per_day: Some(1000),
                ingest_facts_today: 3,
            },
            platform_cost_center: None,
            platform_gl_account: Some("4900-GPU".into()),
            time_zone: "Europe/Berlin".into(),
            updated_at: String::new(),
            updated_by: String::new(),
        })
    } else if path.starts_with("/api/v1/telemetry/coverage") {
        serde_json::to_value(gpuledger_api::telemetry::Coverage {
            period: "2026-10".into(),
            starts_at: "2026-10-01T00:00:00Z".into(),
            ends_at: "2026-11-01T00:00:00Z".into(),
            clusters: Vec::new(),
            nodes: Vec::new(),
        })
    } else if path.starts_with("/api/v1/policies") {
        serde_json::to_value(PolicyList { items: Vec::new(), total: 0 })
    } else if path.starts_with("/api/v1/quotas") {
        serde_json::to_value(QuotaList { items: Vec::new(), total: 0 })
    } else {
        return None;
    };
    Some(v.unwrap())
}

fn signed_in(roles: Vec<&'static str>) -> Fake {
    Fake { roles: Some(roles), fail: false, answers: Vec::new() }
}

async fn render(path: &str, data: impl PortalData) -> (String, Option<u16>) {
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

const PAGES: [&str; 14] = [
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
    "/admin/organization",
    "/admin/notifications",
    "/admin/telemetry",
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
        ("/admin/organization", "1000 facts per day"),
        ("/admin/organization", "value=\"Europe/Berlin\""),
        ("/admin/costs", "No bill imported for"),
        ("/admin/notifications", "No webhooks yet."),
        ("/admin/telemetry", "No telemetry and no allocations this month."),
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
    for path in [
        "/admin",
        "/admin/identity",
        "/admin/policies",
        "/admin/inventory",
        "/admin/audit",
        "/admin/organization",
        "/admin/telemetry",
        "/close/2026-10",
    ] {
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
    assert!(
        html.contains(r#"Unattributed: 1,200 requests, 34,567 tokens, <span title="0.412 GPU-hours" class="hours">0.4</span> GPU-h"#),
        "{html}"
    );
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

/// The `<svg class="chart…">` start tags of a page.
fn chart_tags(html: &str) -> Vec<&str> {
    html.match_indices("<svg ")
        .map(|(i, _)| {
            let rest = &html[i..];
            &rest[..rest.find('>').unwrap() + 1]
        })
        .filter(|tag| attr(tag, "class").split(' ').any(|c| c == "chart"))
        .collect()
}

/// An attribute's value in a start tag.
fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let key = format!(" {name}=\"");
    let start = tag.find(&key).unwrap_or_else(|| panic!("no {name} in {tag}")) + key.len();
    let len = tag[start..].find('"').unwrap();
    &tag[start..start + len]
}

/// The `<g>…</g>` of the trend chart whose `<title>` starts with `month`.
fn trend_group<'a>(html: &'a str, month: &str) -> &'a str {
    let trend = &html[html.find(chart_tags(html).into_iter().find(|t| t.contains("chart trend")).unwrap()).unwrap()..];
    let trend = &trend[..trend.find("</svg>").unwrap()];
    let at = trend.find(&format!("<title>{month}:")).unwrap_or_else(|| panic!("no {month} in {trend}"));
    let start = trend[..at].rfind("<g>").unwrap();
    let end = at + trend[at..].find("</g>").unwrap();
    &trend[start..end]
}

fn showback_fake(lines: Value, extra: Vec<(&'static str, Value)>) -> Fake {
    let mut answers = extra;
    answers.extend([
        ("/api/v1/periods", json!({"items": [{"period": "2026-10", "state": "closed"}]})),
        (
            "/api/v1/ledger/months",
            json!({"months": [{"period": "2026-08", "total": "1250.00"}, {"period": "2026-09", "total": "0.00"}]}),
        ),
        ("/api/v1/ledger", json!({"lines": lines, "total": "1500.50", "currency": "USD", "state": "closed"})),
    ]);
    Fake { roles: Some(vec!["viewer"]), fail: false, answers }
}

#[tokio::test]
async fn chart_text_is_at_least_12px_at_the_portals_width_and_long_labels_are_cut_with_their_full_text_kept() {
    let long_class = "NVIDIA-H100-80GB-HBM3-SXM5-partitioned";
    let lines = json!([
        {"line_id": "a", "tenant": "nlp", "tenant_id": "t1", "department": "Research and Development", "term": "guaranteed",
         "gpu_class": long_class, "amount": "1000.25", "confidence": "exact", "explanation": "x"},
        {"line_id": "b", "tenant": "nlp", "tenant_id": "t1", "department": "Research and Development", "term": "borrowed",
         "gpu_class": "L4", "amount": "500.25", "confidence": "exact", "explanation": "y"},
    ]);
    let (html, _) = render("/departments?period=2026-10", showback_fake(lines, Vec::new())).await;
    let charts = chart_tags(&html);
    assert_eq!(charts.len(), 3, "two bar charts and the trend: {html}");
    // The width a chart gets at the portal's normal width: a 64rem (1024px) main column less its 2rem padding
    // holds a panel whose content box is 960 - 2 (border) - 40 (padding) = 918px; the showback grid puts two
    // bar charts side by side in it, (918 - 24 gap) / 2 = 447px each.
    for tag in charts {
        let available = if tag.contains("trend") { 918.0 } else { 447.0 };
        let view_box: Vec<f64> = attr(tag, "viewBox").split(' ').map(|x| x.parse().unwrap()).collect();
        let width: f64 = attr(tag, "width").parse().unwrap();
        let font: f64 = attr(tag, "font-size").parse().unwrap();
        assert_eq!(width, view_box[2], "drawn 1:1, one user unit per CSS pixel: {tag}");
        assert_eq!(attr(tag, "height").parse::<f64>().unwrap(), view_box[3], "{tag}");
        let rendered = width.min(available);
        let px = font * rendered / view_box[2];
        assert!(px >= 12.0, "chart text renders at {px:.1}px: {tag}");
    }
    // The stylesheet neither shrinks the chart text nor stretches the charts.
    let css = crate::STYLESHEET;
    let chart_rules: Vec<&str> = css.lines().filter(|l| l.starts_with("svg.chart")).collect();
    assert!(chart_rules.iter().all(|l| !l.contains("font-size")), "{chart_rules:?}");
    assert!(chart_rules.iter().any(|l| l.contains("max-width: 100%") && l.contains("height: auto")), "{chart_rules:?}");
    // A long GPU class is cut with an ellipsis; its bar's title holds the full name.
    assert!(html.contains(r#"class="label">NVIDIA-H100-80G…</text>"#), "{html}");
    assert!(html.contains(&format!("<title>{long_class}: 1,000.25 USD</title>")), "{html}");
    assert!(html.contains(r#"class="label">L4</text>"#), "a short label stays whole: {html}");
}

#[tokio::test]
async fn a_trend_month_without_data_is_a_gap_that_says_no_data_not_zero() {
    let lines = json!([{"line_id": "a", "tenant": "nlp", "tenant_id": "t1", "department": "Research",
        "term": "guaranteed", "gpu_class": "H100", "amount": "1500.50", "confidence": "exact", "explanation": "x"}]);
    let (html, _) = render("/departments?period=2026-10", showback_fake(lines, Vec::new())).await;
    // 2026-05 precedes any data: no bar, the words "no data", never 0.00.
    let gap = trend_group(&html, "2026-05");
    assert!(!gap.contains("<rect"), "no bar for a month without data: {gap}");
    assert!(
        gap.contains(r#"class="nodata">no data</text>"#) && gap.contains("<title>2026-05: no data</title>"),
        "{gap}"
    );
    assert!(!gap.contains("0.00"), "{gap}");
    let label = attr(chart_tags(&html).into_iter().find(|t| t.contains("trend")).unwrap(), "aria-label");
    assert!(label.contains("2026-05: no data;") && !label.contains("2026-05: 0"), "{label}");
    // A month whose total is 0.00 is a figure: it keeps its (flat) bar and its amount.
    let zero = trend_group(&html, "2026-09");
    assert!(zero.contains("<rect") && zero.contains("<title>2026-09: 0.00 USD</title>"), "{zero}");
    let data = trend_group(&html, "2026-08");
    assert!(data.contains("<rect") && data.contains("<title>2026-08: 1,250.00 USD</title>"), "{data}");
    // The table beside it says the same.
    let table = &html[html.find(r#"<table class="trend">"#).unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.contains(r#"<th scope="row">2026-05</th><td class="num">no data</td>"#), "{table}");
    assert!(table.contains(r#"<th scope="row">2026-10</th><td class="num">1,500.50</td>"#), "{table}");
}

#[tokio::test]
async fn gpu_hours_read_rounded_with_the_exact_figure_one_hover_away() {
    let lines = json!([{"line_id": "a", "tenant": "nlp", "tenant_id": "t1", "department": "Research",
        "term": "guaranteed", "gpu_class": "H100", "amount": "1234.56", "confidence": "exact", "explanation": "x"},
        {"line_id": "b", "tenant": "mig-team", "tenant_id": "t2", "department": "Research",
        "term": "guaranteed", "gpu_class": "A100-1g", "amount": "10.00", "confidence": "modeled", "explanation": "y"}]);
    let extra = vec![(
        "/api/v1/ledger/summaries",
        json!({"pending": false,
            "utilization": {"tenants": [{"tenant_name": "nlp", "tenant_id": "t1", "allocated_gpu_hours": "12345.678901",
                "active_equivalent_gpu_hours": "12.345678", "observed_gpu_hours": "12345.678901",
                "idle_gpu_hours": "0.000004", "confidence": "exact"},
                {"tenant_name": "mig-team", "tenant_id": "t2", "allocated_gpu_hours": "70.000000",
                "active_equivalent_gpu_hours": "0", "observed_gpu_hours": "0.000000", "idle_gpu_hours": "0",
                "confidence": "modeled"}]},
            "training": {"workloads": [{"namespace": "ml", "workload": "w", "tenant": "nlp", "department": "Research",
                "steps": 10, "samples": null, "gpu_hours": "99.950000", "steps_per_gpu_hour": "0.1",
                "samples_per_gpu_hour": null}]}}),
    )];
    let (html, _) = render("/departments?period=2026-10", showback_fake(lines, extra)).await;
    for (exact, shown) in
        [("12345.678901", "12,345.7"), ("12.345678", "12.3"), ("0.000004", "&lt; 0.1"), ("99.950000", "100.0")]
    {
        let cell = format!(r#"<span title="{exact} GPU-hours" class="hours">{shown}</span>"#);
        assert!(html.contains(&cell), "{cell} in {html}");
    }
    // Money keeps its exact two decimals.
    assert!(html.contains(">1,234.56 USD<"), "{html}");
    // Held but never observed (MIG, vGPU, passthrough): unknown, not 0.0 active and 0.0 idle.
    let table = html.split(r#"class="utilization""#).nth(1).unwrap_or_default();
    let row = |tenant: &str| {
        table.split(&format!("<td>{tenant}</td>")).nth(1).unwrap_or_default().split("</tr>").next().unwrap_or_default()
    };
    assert!(row("mig-team").contains("no telemetry"), "{table}");
    assert!(!row("nlp").contains("no telemetry"), "observed hours are shown: {table}");
}

/// A data source for the pages that print timestamps (tokens, months, agents).
struct Times;

const RAW: &str = "2026-12-01T14:05:09.123456Z";

impl PortalData for Times {
    /// Five days and an hour after [`RAW`]: a dispute opened then is "5 d" old, whenever the test runs.
    fn now(&self) -> time::OffsetDateTime {
        time::macros::datetime!(2026-12-06 15:05:09 UTC)
    }

    fn overview(&self) -> BoxFuture<'_, Result<crate::Overview, PortalError>> {
        Box::pin(async { Err(PortalError { message: "overview down".into() }) })
    }

    fn session(&self) -> BoxFuture<'_, Option<SessionView>> {
        Box::pin(async {
            Some(SessionView {
                name: "pat@example.test".into(),
                roles: vec!["admin".into(), "finance".into()],
                org_name: "Acme".into(),
                csrf: "tok".into(),
                departments: None,
            })
        })
    }

    fn admin_clusters(&self) -> BoxFuture<'_, Result<Vec<ClusterRow>, PortalError>> {
        Box::pin(async {
            Ok(vec![ClusterRow {
                name: "prod".into(),
                created_at: RAW.into(),
                retired_at: None,
                mode: Some("cluster".into()),
                node: Some(String::new()),
                version: Some("1".into()),
                last_seen_at: Some(RAW.into()),
                last_batch_facts: Some(3),
                lag_seconds: Some(1),
                spool_pending_facts: Some(12),
                spool_pending_bytes: Some(4096),
                spool_dropped_facts: None,
                // 86 % full: the admin page warns.
                spool_disk_bytes: Some(900_000),
                spool_max_bytes: Some(1_048_576),
            }])
        })
    }

    fn tokens(&self) -> BoxFuture<'_, Result<Vec<TokenRow>, PortalError>> {
        Box::pin(async {
            Ok(vec![TokenRow {
                id: "k1".into(),
                name: "bi".into(),
                scope: "export".into(),
                cluster: None,
                departments: Vec::new(),
                created_by: "pat".into(),
                created_at: RAW.into(),
                expires_at: Some("2027-01-02T03:04:05+00:00".into()),
                last_used_at: None,
                revoked: false,
            }])
        })
    }

    fn periods(&self) -> BoxFuture<'_, Result<Vec<PeriodRow>, PortalError>> {
        Box::pin(async {
            Ok(vec![PeriodRow {
                period: "2026-11".into(),
                state: gpuledger_api::states::PeriodState::Closed,
                total: Some("123456.70".into()),
                currency: Some("USD".into()),
                closed_at: Some(RAW.into()),
            }])
        })
    }

    fn api(&self, _method: &str, path: String, _body: Option<String>) -> BoxFuture<'_, Result<ApiAnswer, PortalError>> {
        let body = if path.starts_with("/api/v1/audit") {
            json!({"items": [{"at": RAW, "actor": "pat", "action": "login.success", "target": "", "reason": "",
                              "details": {}, "source": "10.0.0.1"}], "next_before": null})
        } else if path.starts_with("/api/v1/disputes?") {
            json!({"items": [{"id": "d7", "number": 7, "state": "open", "period": "2026-11", "line_ids": [],
                              "opened_at": RAW, "opened_by": "pat", "reason": "r", "disputed_amount": "10.00",
                              "currency": "USD", "credit": null}],
                   "total": 1, "page": 1, "per_page": 200})
        } else if path.starts_with("/api/v1/disputes/") {
            json!({"id": "d7", "number": 7, "state": "open", "period": "2026-11", "line_ids": [],
                   "opened_at": "2026-12-01T15:05:09+01:00", "opened_by": "pat", "reason": "r",
                   "disputed_amount": "10.00", "currency": "USD", "credit": null, "lines": [],
                   "events": [{"id": "e1", "action": "opened", "actor": "pat", "at": RAW, "body": "", "details": {}}]})
        } else {
            json!({"items": []})
        };
        Box::pin(async move { Ok(ApiAnswer { status: 200, body }) })
    }
}

/// Pages read the time from their data source, not the wall clock: the same render gives the same page.
#[tokio::test]
async fn pages_read_the_time_of_the_request_not_the_wall_clock() {
    let (html, _) = render("/disputes", Times).await;
    assert!(
        html.contains(&format!(r#"<time datetime="{RAW}" title="opened 2026-12-01 14:05 UTC">5 d</time>"#)),
        "{html}"
    );
    assert_eq!(html, render("/disputes", Times).await.0);
}

#[tokio::test]
async fn timestamps_read_as_date_hour_minute_utc_with_the_exact_value_kept() {
    let readable = format!(r#"<time datetime="{RAW}" title="{RAW}">2026-12-01 14:05 UTC</time>"#);
    for path in ["/admin", "/finance", "/admin/audit", "/disputes/7"] {
        let (html, _) = render(path, Times).await;
        assert!(html.contains(&readable), "{path} prints {readable}: {html}");
    }
    let (html, _) = render("/admin", Times).await;
    assert!(html.contains(">2027-01-02 03:04 UTC</time>") && html.contains(">never<"), "token expiry: {html}");
    assert!(html.contains("Agent spool nearly full — prod (cluster): 86 %"), "{html}");
    assert!(html.contains("12 facts waiting; spool 4 KiB (86 % full)"), "{html}");
    let (html, _) = render("/finance", Times).await;
    assert!(html.contains(">123,456.70 USD<"), "{html}");
    // Another offset is converted to UTC.
    let (html, _) = render("/disputes/7", Times).await;
    assert!(
        html.contains(r#"<time datetime="2026-12-01T15:05:09+01:00" title="2026-12-01T15:05:09+01:00">2026-12-01 14:05 UTC</time>"#),
        "{html}"
    );
}

#[tokio::test]
async fn the_close_page_asks_for_an_acknowledgement_and_names_what_is_unpriced() {
    let findings = json!({
        "period": "2026-10",
        "by_kind": {"unpriced": 5},
        "needs_acknowledgement": ["5 unpriced allocation(s): their GPU model has no class in the approved inventory"],
        "acknowledgements": [{"by": "user:fay", "at": "2026-11-02T09:00:00Z", "reason": "lab cards are free",
                              "covered": ["2 unpriced allocation(s)"]}],
        "items": [{"cluster": "prod-east", "kind": "unpriced", "subject": "Mystery GPU", "from": null, "to": null,
                   "details": {"allocations": 5, "reason": "5 exclusive allocation(s) on GPU model \"Mystery GPU\"",
                               "first": ["ml/a (x1)", "ml/b (x2)", "ml/c (x3)", "ml/d (x4)"]},
                   "fix": "add \"Mystery GPU\" under Admin → Inventory"}]
    });
    let fake = Fake {
        roles: Some(vec!["finance"]),
        fail: false,
        answers: vec![("/api/v1/periods/2026-10/findings", findings)],
    };
    let (html, _) = render("/close/2026-10", fake).await;
    assert!(html.contains(r#"id="needs-acknowledgement""#) && html.contains(r#"name="acknowledge""#), "{html}");
    assert!(html.contains("ml/a (x1), ml/b (x2), ml/c (x3) and 2 more"), "{html}");
    assert!(html.contains(r#"id="acknowledgements""#) && html.contains("lab cards are free"), "{html}");
}

/// An agent gap reads as recovered when the re-list brought its facts back (no acknowledgement asked), and as
/// not recovered, naming what stays lost, when it did not.
#[tokio::test]
async fn the_close_page_says_whether_an_agent_gap_was_recovered() {
    let gap = |recovered: bool, lost: u64| {
        json!({"cluster": "prod-east", "kind": "agent_gap", "subject": "agent spool", "from": null, "to": null,
               "details": {"dropped": 50, "recovered": recovered, "telemetry_lost": 0,
                           "kinds": [{"kind": "allocation_started", "count": 50}],
                           "recovery": {"kinds": [{"kind": "allocation_started", "recovered": 50 - lost, "lost": lost}],
                                        "forgotten": 0, "unaccounted": 0}},
               "fix": null})
    };
    let page = |item: Value, needs: Vec<&str>| Fake {
        roles: Some(vec!["finance"]),
        fail: false,
        answers: vec![(
            "/api/v1/periods/2026-10/findings",
            json!({"period": "2026-10", "by_kind": {"agent_gap": 1}, "needs_acknowledgement": needs,
                   "acknowledgements": [], "items": [item]}),
        )],
    };
    let (html, _) = render("/close/2026-10", page(gap(true, 0), vec![])).await;
    assert!(html.contains("Recovered: a re-list stored the dropped facts again (allocation_started: 50)"), "{html}");
    assert!(!html.contains(r#"id="needs-acknowledgement""#), "{html}");
    let needs =
        vec!["1 agent gap(s): an agent dropped facts about this month (allocation_started: 3) that did not come back"];
    let (html, _) = render("/close/2026-10", page(gap(false, 3), needs)).await;
    assert!(html.contains("Not recovered: a re-list did not bring back allocation_started: 3"), "{html}");
    assert!(html.contains(r#"id="needs-acknowledgement""#), "{html}");
}

/// This month, as the pages compute it.
fn this_month() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!("{:04}-{:02}", now.year(), u8::from(now.month()))
}

#[tokio::test]
async fn showback_of_the_open_month_shows_to_date_forecast_and_budget_and_warns_when_over() {
    let month = this_month();
    let row = |dept: &str, to_date: &str, forecast: &str, budget: Value, over: bool| {
        json!({"department_id": dept, "department": dept, "to_date": to_date, "forecast": forecast, "budget": budget,
               "over_budget": over, "method": "run_rate", "confidence": "medium", "explanation": "to date …"})
    };
    let fake = Fake {
        roles: Some(vec!["finance"]),
        fail: false,
        answers: vec![
            ("/api/v1/periods", json!({"items": [{"period": month, "state": "open"}]})),
            (
                "/api/v1/forecast",
                json!({"departments": [
                    row("Research", "400.00", "1200.00", json!("1000.00"), true),
                    row("Platform", "100.00", "300.00", Value::Null, false),
                ]}),
            ),
            (
                "/api/v1/idle",
                json!({"items": [{"cluster": "gpu-east", "allocation_id": "a", "holder": "research/nb",
                "owner": "nlp", "tenant": "nlp", "department": "Research", "gpu_class": "H100-80GB", "fraction": "1",
                "devices": ["GPU-1"], "idle_since": "2026-12-01T08:00:00Z", "idle_hours": "3.000000",
                "idle_gpu_hours": "3.000000", "cost_so_far": "9.00", "currency": "USD"}]}),
            ),
        ],
    };
    let (html, _) = render(&format!("/departments?period={month}"), fake).await;
    assert!(html.contains(r#"id="forecast""#), "{html}");
    assert!(html.contains("Forecast over budget: Research (1,200.00 of 1,000.00 USD)."), "{html}");
    assert!(html.contains(r#"class="budget-mark""#), "the budget is marked on the bar: {html}");
    assert!(html.contains("none set"), "Platform has no budget: {html}");
    assert!(html.contains("research/nb (gpu-east)") && html.contains("9.00 USD"), "idle now: {html}");
    // A closed month does not look ahead.
    let fake = Fake {
        roles: Some(vec!["finance"]),
        fail: false,
        answers: vec![("/api/v1/periods", json!({"items": [{"period": "2026-10", "state": "closed"}]}))],
    };
    let (html, _) = render("/departments?period=2026-10", fake).await;
    assert!(!html.contains(r#"id="forecast""#), "{html}");
}

#[tokio::test]
async fn the_notifications_page_shows_idle_reservations_budgets_and_each_webhooks_deliveries() {
    let fake = Fake {
        roles: Some(vec!["admin"]),
        fail: false,
        answers: vec![
            ("/api/v1/idle", json!({"not_measured": 2})),
            (
                "/api/v1/budgets",
                json!({"items": [{"budget_id": "b", "period": "2026-12", "department_id": "d",
                "department": "Research", "tenant_id": null, "tenant": null, "amount": "12000.00",
                "created_by": "fin@example.test", "created_at": "2026-12-01T09:00:00Z"}]}),
            ),
            (
                "/api/v1/notifications/webhooks/w1/deliveries",
                json!({"items": [
                {"delivery_id": "x", "event": "budget.forecast_exceeded", "state": "pending", "attempts": 2,
                 "last_status": 503, "last_error": "the receiver answered 503", "created_at": "2026-12-01T10:00:00Z",
                 "delivered_at": null, "next_attempt_at": "2026-12-01T10:12:00Z", "payload": {}}]}),
            ),
            (
                "/api/v1/notifications/webhooks",
                json!({"items": [{"webhook_id": "w1", "url": "https://hooks.example.test/gl",
                "events": ["budget.forecast_exceeded"], "format": "slack", "created_by": "admin", "created_at": "2026-12-01T09:00:00Z",
                "disabled_at": null, "delivered": 3, "pending": 1, "failed": 0}]}),
            ),
        ],
    };
    let (html, _) = render("/admin/notifications", fake).await;
    assert!(html.contains("https://hooks.example.test/gl"), "{html}");
    assert!(html.contains("3 delivered, 1 pending, 0 failed"), "{html}");
    assert!(html.contains("the receiver answered 503"), "{html}");
    assert!(html.contains("12,000.00"), "{html}");
    assert!(html.contains("2 open allocation(s) have no telemetry"), "{html}");
    assert!(html.contains("No idle reservations right now."), "{html}");
    let (html, _) = render("/admin/notifications", signed_in(vec!["viewer"])).await;
    assert!(html.contains("for admins and finance"), "{html}");
}

/// A what-if answer as the API gives it: Research up, Platform down.
fn impact_answer() -> Value {
    json!({"period": "2026-10", "version": 2, "approved_version": 1, "closed": true, "currency": "USD",
           "departments": [
               {"department": "Platform", "department_id": "d2", "approved": "100.00", "draft": "90.00", "delta": "-10.00"},
               {"department": "Research", "department_id": "d1", "approved": "200.00", "draft": "260.50", "delta": "60.50"}],
           "tenants": [{"tenant": "nlp", "tenant_id": "t1", "department": "Research", "approved": "150.00",
                        "draft": "210.50", "delta": "60.50"}],
           "total": {"approved": "300.00", "draft": "350.50", "delta": "50.50"},
           "note": "2026-10 is closed: nothing is changed"})
}

#[tokio::test]
async fn a_drafts_impact_is_shown_before_its_approve_button() {
    let policy = |v: i32, state: &str| {
        json!({"version": v, "state": state, "effective_from": "2026-10", "currency": "USD", "note": "", "document": {},
               "created_at": "2026-10-01T00:00:00Z", "created_by": "x", "approved_at": null, "approved_by": null,
               "superseded_at": null})
    };
    let fake = Fake {
        roles: Some(vec!["admin"]),
        fail: false,
        answers: vec![
            ("/api/v1/policies/2/impact?period=2026-10", impact_answer()),
            ("/api/v1/policies", json!({"items": [policy(2, "draft"), policy(1, "approved")], "total": 2})),
            ("/api/v1/quotas", json!({"items": [], "total": 0})),
        ],
    };
    let (html, _) = render("/admin/policies?impact_period=2026-10", fake).await;
    assert!(html.contains("Impact of draft v2 on 2026-10"), "{html}");
    let table = html.find(r#"<table class="impact""#).expect("an impact table");
    let approve = html.find(r#"action="/ui/policies/2/approve""#).expect("the approve form");
    assert!(table < approve, "impact first, then approval: {html}");
    for text in ["Research", "nlp", "260.50", "60.50", "-10.00", "350.50", "50.50", "nothing is changed"] {
        assert!(html.contains(text), "{text}: {html}");
    }
    assert!(html.contains(r#"class="num delta down""#) && html.contains(r#"class="num delta up""#), "{html}");
    assert!(!html.contains(r#"action="/ui/policies/1/approve""#), "an approved version has no approve button");
}

#[tokio::test]
async fn an_inventory_change_is_previewed_with_a_save_button() {
    let fake = Fake {
        roles: Some(vec!["admin"]),
        fail: false,
        answers: vec![("/api/v1/inventory/impact?period=2026-10", impact_answer())],
    };
    let path =
        "/admin/inventory?preview=profiles&kind=mig&model=A100&profile=1g.10gb&fraction=2%2F7&valid_from=2026-10-01";
    let (html, _) = render(path, fake).await;
    assert!(html.contains("Preview: impact on 2026-10 before saving"), "{html}");
    assert!(html.contains(r#"<table class="impact""#) && html.contains("50.50"), "{html}");
    assert!(html.contains(r#"action="/ui/inventory/profiles""#) && html.contains(r#"value="2/7""#), "{html}");
    assert!(html.contains("Save this change"), "{html}");
    // Without a preview in the query there is no preview panel.
    let (html, _) = render("/admin/inventory", signed_in(vec!["admin"])).await;
    assert!(!html.contains("Save this change") && html.contains(r#"value="preview""#), "{html}");
}

/// The coverage page lists the nodes that need a look first, with what to do, and pages the rest.
#[tokio::test]
async fn telemetry_coverage_puts_silent_nodes_first_with_their_fix() {
    let row = |node: &str, status: &str, fix: Option<&str>| {
        json!({"cluster_id": "c", "cluster": "prod-east", "node": node, "gpus": 8, "mig_instances": 0,
               "gpu_hours_held": "100.00", "gpu_hours_with_telemetry": if status == "silent" { "0.00" } else { "100.00" },
               "windows": if status == "silent" { 0 } else { 6000 }, "median_window_secs": "60",
               "bytes_full_resolution": 2_500_000, "bytes_hourly": 120_000, "status": status, "fix": fix})
    };
    let mut nodes: Vec<Value> = (0..150).map(|i| row(&format!("gpu-node-{i:03}"), "reporting", None)).collect();
    nodes.push(row("gpu-node-zzz", "silent", Some("run the node agent")));
    let coverage = json!({"period": "2026-10", "starts_at": "2026-10-01T00:00:00Z", "ends_at": "2026-11-01T00:00:00Z",
                          "clusters": [row("x", "partial", Some("check the node agent"))], "nodes": nodes});
    let fake =
        Fake { roles: Some(vec!["admin"]), fail: false, answers: vec![("/api/v1/telemetry/coverage", coverage)] };
    let (html, status) = render("/admin/telemetry?period=2026-10", fake).await;
    assert_eq!(status, None, "{html}");
    assert!(html.contains("Nodes (151; 1 need a look)"), "{html}");
    let silent = html.find("gpu-node-zzz").expect("the silent node is on the first page");
    let first_reporting = html.find("gpu-node-000").expect("reporting nodes follow");
    assert!(silent < first_reporting, "silent first");
    assert!(html.contains("run the node agent") && html.contains("2.5 MB"), "{html}");
    assert!(html.contains("page 1 of 2") && html.contains("page=2"), "{html}");
    assert!(!html.contains("gpu-node-120"), "the second page's nodes are not on the first");
}
