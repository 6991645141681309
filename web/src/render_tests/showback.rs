//! Showback and tenant pages: exact sums, efficiency, sessions, training work, and their charts.

use super::*;

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
    let ledger = json!({"lines": [{"line_id": "a", "tenant": "nlp", "tenant_id": "00000000-0000-0000-0000-0000000000a1",
        "department": "Research", "term": "service", "gpu_class": "", "amount": "10.00", "confidence": "modeled", "explanation": "x"}],
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
    let (html, _) = render("/tenants/00000000-0000-0000-0000-0000000000a1?period=2026-10", fake(sessions)).await;
    assert!(html.contains("AI-agent sessions") && html.contains("<code>sess-a</code>"), "{html}");
    assert!(html.contains(">13.00 USD<") && html.contains(">1,200<") && html.contains(">150 ms<"), "{html}");
    assert!(html.contains("<summary>modeled</summary>"), "{html}");
    let (html, _) =
        render("/tenants/00000000-0000-0000-0000-0000000000a1?period=2026-10", fake(json!({"sessions": []}))).await;
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
