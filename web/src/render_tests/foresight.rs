//! The open month's forecast and budgets, notifications, a change's impact before it is saved, telemetry coverage.

use super::*;

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
                "/api/v1/notifications/webhooks/00000000-0000-0000-0000-0000000000b1/deliveries",
                json!({"items": [
                {"delivery_id": "x", "event": "budget.forecast_exceeded", "state": "pending", "attempts": 2,
                 "last_status": 503, "last_error": "the receiver answered 503", "created_at": "2026-12-01T10:00:00Z",
                 "delivered_at": null, "next_attempt_at": "2026-12-01T10:12:00Z", "payload": {}}]}),
            ),
            (
                "/api/v1/notifications/webhooks",
                json!({"items": [{"webhook_id": "00000000-0000-0000-0000-0000000000b1", "url": "https://hooks.example.test/gl",
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
