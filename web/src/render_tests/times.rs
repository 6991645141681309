//! Pages that print instants (tokens, months, agents, disputes) and the close page's findings.

use super::*;

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

    fn read(&self, read: Read) -> BoxFuture<'_, Result<Answer, Refusal>> {
        let path = path_of(&read);
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
        let answer = typed(&read, body);
        Box::pin(async move { answer })
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
