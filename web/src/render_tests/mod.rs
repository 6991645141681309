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
        BoxFuture, ClusterRow, InventoryRow, OwnershipRow, PortalData, PortalDataHandle, PortalError, ResponseStatus,
        SessionView,
    },
    reads::{Answer, Read, Refusal},
};

/// Answers reads by the prefix of the REST path each stands for; `fail` makes every read answer 500.
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

    fn read(&self, read: Read) -> BoxFuture<'_, Result<Answer, Refusal>> {
        let answer = self.answer(&path_of(&read)).and_then(|body| typed(&read, body));
        Box::pin(async move { answer })
    }

    fn inventory_impact(
        &self,
        period: gpuledger_api::params::MonthParams,
        _change: Value,
    ) -> BoxFuture<'_, Result<gpuledger_api::policy::Impact, Refusal>> {
        let answer = self
            .answer(&format!("/api/v1/inventory/impact?period={}", period.period))
            .and_then(|body| serde_json::from_value(body).map_err(|e| Refusal { status: 500, detail: e.to_string() }));
        Box::pin(async move { answer })
    }
}

impl Fake {
    /// The JSON body the REST API would answer at `path`.
    fn answer(&self, path: &str) -> Result<Value, Refusal> {
        if self.fail {
            Err(Refusal { status: 500, detail: "the database is unavailable".into() })
        } else if path.starts_with("/api/v1/costs/imports") && !self.answers.iter().any(|(p, _)| path.starts_with(p)) {
            // No bill imported for the month.
            Err(Refusal { status: 404, detail: "period: no bill was imported".into() })
        } else {
            let body = self
                .answers
                .iter()
                .find(|(prefix, _)| path.starts_with(prefix))
                .map(|(_, v)| v.clone())
                .or_else(|| admin_answer(path))
                .unwrap_or(json!({"items": [], "lines": [], "mappings": []}));
            Ok(complete(path, body))
        }
    }
}

/// The REST path (with its query) a read stands for: the key the fakes' answers are listed by.
fn path_of(read: &Read) -> String {
    let opt = |name: &str, v: Option<String>| v.map(|v| format!("&{name}={v}")).unwrap_or_default();
    match read {
        Read::Periods() => "/api/v1/periods".to_string(),
        Read::Ledger(p) => format!(
            "/api/v1/ledger?period={}{}{}",
            p.period,
            opt("tenant", p.tenant.as_ref().map(ToString::to_string)),
            opt("per_page", p.per_page.map(|n| n.get().to_string()))
        ),
        Read::Months(p) => format!(
            "/api/v1/ledger/months?from={}&to={}{}",
            p.from,
            p.to,
            opt("department", p.department.as_ref().map(ToString::to_string))
        ),
        Read::Summaries(p) => format!("/api/v1/ledger/summaries?period={}", p.period),
        Read::Forecast(p) => format!("/api/v1/forecast?{}", opt("period", p.period.map(|m| m.to_string()))),
        Read::Idle() => "/api/v1/idle".to_string(),
        Read::Evidence(path, p) => format!(
            "/api/v1/periods/{}/evidence?{}{}",
            path.period,
            opt("tenant", p.tenant.as_ref().map(ToString::to_string)),
            opt("gpu_class", p.gpu_class.as_ref().map(ToString::to_string))
        ),
        Read::Sessions(p) => format!("/api/v1/analytics/sessions?period={}&tenant={}", p.period, p.tenant),
        Read::Budgets(_) => "/api/v1/budgets".to_string(),
        Read::Webhooks() => "/api/v1/notifications/webhooks".to_string(),
        Read::Deliveries(p) => format!("/api/v1/notifications/webhooks/{}/deliveries", p.id),
        Read::Disputes(p) => format!("/api/v1/disputes?per_page={}", p.per_page.map_or(20, |n| n.get())),
        Read::Dispute(p) => format!("/api/v1/disputes/{}", p.id),
        Read::Findings(p) => format!("/api/v1/periods/{}/findings", p.period),
        Read::Tenants() => "/api/v1/tenants".to_string(),
        Read::Departments() => "/api/v1/departments".to_string(),
        Read::NamespaceRules() => "/api/v1/tenancy/namespace-rules".to_string(),
        Read::Policies() => "/api/v1/policies".to_string(),
        Read::Quotas(_) => "/api/v1/quotas".to_string(),
        Read::PolicyImpact(v, p) => format!("/api/v1/policies/{}/impact?period={}", v.version.get(), p.period),
        Read::Settings() => "/api/v1/organization/settings".to_string(),
        Read::CostImport(p) => format!("/api/v1/costs/imports?period={}", p.period),
        Read::Provider() => "/api/v1/identity/provider".to_string(),
        Read::RoleMappings() => "/api/v1/identity/role-mappings".to_string(),
        Read::Audit(_) => "/api/v1/audit".to_string(),
        Read::Coverage(p) => {
            format!("/api/v1/telemetry/coverage{}", p.as_ref().map(|p| format!("?period={p}")).unwrap_or_default())
        }
    }
}

/// `body` as `read`'s typed answer; one that does not match the contract is an error, as the server's would be.
fn typed(read: &Read, body: Value) -> Result<Answer, Refusal> {
    Answer::from_json(read, body).map_err(|e| Refusal {
        status: 500,
        detail: format!("the server's answer (HTTP 200) did not match the API contract: {e}"),
    })
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

mod foresight;
mod showback;
mod times;
