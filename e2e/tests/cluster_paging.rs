//! Paged lists: the stand-in API server pages as the real one does (`limit`, `continue`, `410 Gone` for a token
//! older than the data), and the real `cluster` agent, listing in small pages, delivers every pod's facts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use gpuledger_e2e::{
    fake_kube::FakeKube,
    fresh_database,
    process::{create_token, signal, start_cluster_agent, start_demo, temp_dir},
    synthetic,
};
use serde_json::{Value, json};

async fn get(url: &str) -> (u16, Value) {
    let r = reqwest::get(url).await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap())
}

fn uids(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|o| o["metadata"]["uid"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn the_stand_in_pages_lists_like_the_api_server() {
    let kube = FakeKube::start().await.unwrap();
    let now = 1_796_083_199;
    for i in 0..5 {
        kube.apply("pods", synthetic::pod(i, now)).unwrap();
    }
    let base = format!("{}/api/v1/pods", kube.url);

    // Unpaged: everything, no continue token.
    let (code, all) = get(&base).await;
    assert_eq!(code, 200);
    assert_eq!(uids(&all).len(), 5);
    assert!(all["metadata"].get("continue").is_none());

    // Pages of two: 2 + 2 + 1, each page consistent with the first (same resourceVersion), no object twice.
    let mut seen = Vec::new();
    let (_, first) = get(&format!("{base}?limit=2")).await;
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    assert_eq!(first["metadata"]["remainingItemCount"], json!(3));
    seen.extend(uids(&first));
    let mut token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let mut pages = 1;
    loop {
        let (code, page) = get(&format!("{base}?limit=2&continue={token}")).await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["metadata"]["resourceVersion"].as_str(), Some(rv.as_str()));
        pages += 1;
        seen.extend(uids(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) => token = t.to_string(),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 5);
    assert_eq!(seen.iter().collect::<BTreeSet<_>>(), uids(&all).iter().collect::<BTreeSet<_>>());

    // resourceVersion=0 is the watch cache: the limit is ignored on a first page, as the real server does.
    let (_, cached) = get(&format!("{base}?limit=2&resourceVersion=0")).await;
    assert_eq!(uids(&cached).len(), 5);

    // A change between pages: the old token is refused with 410 Gone (reason Expired), so a client lists again.
    let (_, first) = get(&format!("{base}?limit=2")).await;
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    kube.apply("pods", synthetic::pod(5, now)).unwrap();
    let (code, status) = get(&format!("{base}?limit=2&continue={token}")).await;
    assert_eq!(code, 410, "{status}");
    assert_eq!(status["reason"], json!("Expired"));
    let (code, _) = get(&format!("{base}?limit=2&continue=not-a-token")).await;
    assert_eq!(code, 400);

    let requests = kube.list_requests("pods");
    assert_eq!(requests.iter().filter(|r| r.continued).count(), 2, "{requests:?}");
    assert_eq!(requests[1], gpuledger_e2e::fake_kube::ListRequest { limit: Some(2), continued: false, items: 2 });
}

/// As the real server's watch cache: a watch from a list's resourceVersion gets what changed in between (a change
/// between a client's list and its watch is not lost — the fault simulator lost a pod to exactly that), and a
/// resourceVersion older than the kept history is answered with a 410 `Expired` event, so the client re-lists.
#[tokio::test]
async fn a_watch_replays_changes_since_its_resource_version() {
    let kube = FakeKube::start().await.unwrap();
    let now = 1_796_083_199;
    kube.apply("pods", synthetic::pod(0, now)).unwrap();
    let (_, list) = get(&format!("{}/api/v1/pods", kube.url)).await;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    // A change after the list, before the watch starts.
    kube.apply("pods", synthetic::pod(1, now)).unwrap();
    let first_event = |url: String| async move {
        let mut r = reqwest::get(url).await.unwrap();
        let mut buf = Vec::new();
        while !buf.contains(&b'\n') {
            let chunk = tokio::time::timeout(Duration::from_secs(10), r.chunk()).await.unwrap().unwrap().unwrap();
            buf.extend_from_slice(&chunk);
        }
        let line = buf.split(|b| *b == b'\n').next().unwrap().to_vec();
        serde_json::from_slice::<Value>(&line).unwrap()
    };
    let ev = first_event(format!("{}/api/v1/pods?watch=true&resourceVersion={rv}", kube.url)).await;
    assert_eq!(ev["type"], "ADDED", "{ev}");
    assert_eq!(ev["object"]["metadata"]["uid"], synthetic::pod(1, now)["metadata"]["uid"]);
    // Past the kept history: 410 Expired.
    for i in 2..5_010 {
        kube.apply("namespaces", synthetic::namespace(i % 50, now)).unwrap();
    }
    let ev = first_event(format!("{}/api/v1/pods?watch=true&resourceVersion={rv}", kube.url)).await;
    assert_eq!((ev["type"].as_str(), ev["object"]["code"].as_i64()), (Some("ERROR"), Some(410)), "{ev}");
}

/// The objects the stand-in serves, as one JSON array (what `inspect k8s` reads).
async fn served(kube: &FakeKube) -> String {
    let mut all = Vec::new();
    for resource in ["namespaces", "nodes", "pods"] {
        let (_, list) = get(&format!("{}/api/v1/{resource}", kube.url)).await;
        all.extend(list["items"].as_array().unwrap().iter().cloned());
    }
    serde_json::to_string(&all).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_many_pages_yields_every_pods_facts() {
    let dir = temp_dir("gl-e2e-paging").unwrap();
    let db = fresh_database().await.unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let token = create_token(&db.admin_url, "agent:paging").unwrap();
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();

    // 100 pods on 13 nodes in 50 namespaces, listed 7 at a time: 15 pages of pods, 8 of namespaces.
    let pods = 100;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let kube = FakeKube::start().await.unwrap();
    for (resource, object) in synthetic::cluster(pods, now) {
        kube.apply_silently(resource, object).unwrap();
    }
    // What the agent must send: the same objects through the same derivation (`inspect k8s`).
    let expected: BTreeSet<String> = gpuledger_agent::inspect::inspect(
        gpuledger_agent::inspect::Kind::K8s,
        &served(&kube).await,
        time::OffsetDateTime::now_utc(),
        None,
    )
    .unwrap()
    .facts
    .into_iter()
    .map(|f| f.event_id)
    .collect();
    // The lists just made for `served` are not the agent's.
    let (pods_before, namespaces_before) = (kube.list_requests("pods").len(), kube.list_requests("namespaces").len());
    let finished = (0..pods).filter(|i| synthetic::finished(*i)).count();
    assert_eq!(
        expected.iter().filter(|e| e.starts_with("alloc-start/")).count(),
        pods,
        "one GPU allocation per pod: {expected:?}"
    );
    assert_eq!(expected.iter().filter(|e| e.starts_with("alloc-end/")).count(), finished);

    let kubeconfig = kube.kubeconfig(&dir).unwrap();
    let extra = ["--list-page-size", "7", "--scrape-secs", "0"];
    let mut agent = start_cluster_agent(&dir, &server.base, &token, "paging", &kubeconfig, &extra).unwrap();

    let started = Instant::now();
    let stored: BTreeSet<String> = loop {
        let stored: Vec<String> = sqlx::query_scalar(
            "SELECT event_id FROM allocation_events
              WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'paging')",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if stored.len() >= expected.len() {
            break stored.into_iter().collect();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} of {} facts stored\n{}",
            stored.len(),
            expected.len(),
            std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    signal(agent.id(), "TERM").unwrap();
    let _ = agent.wait();
    assert_eq!(stored, expected);
    let intervals: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM allocation_intervals WHERE cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'paging')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(intervals, pods as i64);

    // The agent really paged: first pages asked for 7, and every later page was a continuation.
    let requests = kube.list_requests("pods").split_off(pods_before);
    assert!(requests.len() >= pods.div_ceil(7), "{requests:?}");
    assert!(requests.iter().all(|r| r.limit == Some(7) && r.items <= 7), "{requests:?}");
    assert!(requests.iter().filter(|r| r.continued).count() >= pods.div_ceil(7) - 1, "{requests:?}");
    let namespaces = kube.list_requests("namespaces").split_off(namespaces_before);
    assert!(namespaces.len() >= synthetic::NAMESPACES.div_ceil(7), "{namespaces:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits until the agent's log (`dir/agent.log`) says `what`, failing with the log after `timeout`.
async fn wait_for_log(dir: &std::path::Path, what: &str, timeout: Duration) {
    let started = Instant::now();
    loop {
        let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
        if log.contains(what) {
            return;
        }
        assert!(started.elapsed() < timeout, "the agent never logged {what:?}:\n{log}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The server "comes back": loopback `port`, where nothing listened, is forwarded to `base` from now on.
async fn forward(port: u16, base: &str) {
    let target = base.trim_start_matches("http://").to_string();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

/// A spool overflow while the server is unreachable, with every object still in the API (issue 23, case a): the
/// cluster agent lists a cluster bigger than its 1 MiB spool, drops the oldest facts (a gap), and once the server is
/// back and the backlog is delivered, re-lists the cluster: every pod's facts are stored — the same set a
/// fault-free run stores — and the agent's account of each gap marks its findings recovered, so closing the months
/// they touch needs no acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_spool_overflow_a_re_list_recovers_what_the_cluster_still_holds() {
    let dir = temp_dir("gl-e2e-overflow").unwrap();
    let db = fresh_database().await.unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let token = create_token(&db.admin_url, "agent:overflow").unwrap();
    let admin = create_token(&db.admin_url, "admin").unwrap();
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    let pods = 3000;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let kube = FakeKube::start().await.unwrap();
    for (resource, object) in synthetic::cluster(pods, now) {
        kube.apply_silently(resource, object).unwrap();
    }
    let expected: BTreeSet<String> = gpuledger_agent::inspect::inspect(
        gpuledger_agent::inspect::Kind::K8s,
        &served(&kube).await,
        time::OffsetDateTime::now_utc(),
        None,
    )
    .unwrap()
    .facts
    .into_iter()
    .map(|f| f.event_id)
    .filter(|e| e.starts_with("alloc-"))
    .collect();
    // The server is "down": the agent talks to a port nobody listens on until the test forwards it.
    let port = gpuledger_e2e::process::free_port().unwrap();
    let kubeconfig = kube.kubeconfig(&dir).unwrap();
    let extra = ["--spool-max-mib", "1", "--heartbeat-secs", "1", "--scrape-secs", "0"];
    let mut agent =
        start_cluster_agent(&dir, &format!("http://127.0.0.1:{port}"), &token, "overflow", &kubeconfig, &extra)
            .unwrap();
    let log = || std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    wait_for_log(&dir, "spool: full", Duration::from_secs(120)).await;
    // The server comes back: forward the port to it.
    forward(port, &server.base).await;
    let started = Instant::now();
    let stored: BTreeSet<String> = loop {
        let stored: Vec<String> = sqlx::query_scalar(
            "SELECT event_id FROM allocation_events
              WHERE kind IN ('allocation_started', 'allocation_ended')
                AND cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'overflow')",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let stored: BTreeSet<String> = stored.into_iter().collect();
        if stored.len() >= expected.len() || started.elapsed() > Duration::from_secs(180) {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let missing: Vec<&String> = expected.difference(&stored).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} of {} allocation facts missing, e.g. {missing:?}\n{}",
        expected.len() - expected.intersection(&stored).count(),
        expected.len(),
        log()
    );
    assert!(log().contains("re-listing the cluster to recover them"), "{}", log());
    // The drop is on record (the gaps, on the months their facts were about), and once the re-list is done the agent
    // says what came back: everything, so every month of every gap reads recovered.
    let started = Instant::now();
    let findings: Vec<(String, Value)> = loop {
        let findings: Vec<(String, Value)> = sqlx::query_as(
            "SELECT to_char(occurred_from, 'YYYY-MM'), details FROM data_quality_findings WHERE kind = 'agent_gap'
              ORDER BY occurred_from",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if !findings.is_empty() && findings.iter().all(|(_, d)| d["recovered"] == true) {
            break findings;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "gaps not (all) recovered: {findings:?}\n{}", log());
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    signal(agent.id(), "TERM").unwrap();
    let _ = agent.wait();
    let mut recovered_starts = 0;
    for (month, d) in &findings {
        let kinds = d["recovery"]["kinds"].as_array().unwrap_or_else(|| panic!("{month}: no account: {d}"));
        assert!(kinds.iter().all(|k| k["lost"] == 0), "{month}: {d}");
        recovered_starts += kinds.iter().filter(|k| k["kind"] == "allocation_started").count();
    }
    assert!(recovered_starts > 0, "the gaps had dropped allocation starts: {findings:?}");
    // Closing those months asks for no acknowledgement: the findings stay, recovered.
    let http = reqwest::Client::new();
    let this_month = {
        let t = time::OffsetDateTime::now_utc();
        format!("{:04}-{:02}", t.year(), u8::from(t.month()))
    };
    let months: BTreeSet<String> = findings.iter().map(|(m, _)| m.clone()).collect();
    // Closing needs an approved policy covering the months: rates for the classes the allocations hold.
    let classes: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT gpu_class FROM allocation_intervals WHERE gpu_class IS NOT NULL")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(!classes.is_empty());
    let rates: Vec<Value> =
        classes.iter().map(|c| json!({"gpu_class": c, "guaranteed": "2.00", "borrowed": "3.00"})).collect();
    let document = json!({"currency": "USD", "classes": rates});
    let first = months.iter().next().unwrap();
    let r = http
        .post(format!("{}/api/v1/policies", server.base))
        .bearer_auth(&admin)
        .json(&json!({"effective_from": first, "note": "e2e: the months the gap touched", "policy": document}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let version = r.json::<Value>().await.unwrap()["version"].as_i64().unwrap();
    let r = http
        .post(format!("{}/api/v1/policies/{version}/approve", server.base))
        .bearer_auth(&admin)
        .json(&json!({"reason": "e2e"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let mut closed = 0;
    for month in months.iter().filter(|m| **m < this_month) {
        let f: Value = http
            .get(format!("{}/api/v1/periods/{month}/findings", server.base))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(f["by_kind"]["agent_gap"].as_i64().unwrap_or(0) >= 1, "{month}: the gap is still shown: {f}");
        assert_eq!(f["needs_acknowledgement"], json!([]), "{month}: {f}");
        let r = http
            .post(format!("{}/api/v1/periods/{month}/close", server.base))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert_eq!(status, 200, "{month}: {}", r.text().await.unwrap());
        closed += 1;
    }
    assert!(closed > 0, "the gaps touch past months: {months:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 23, case b: the same overflow, but the pods are gone from the API before the server comes back (deleted
/// while nobody watched). Nothing can be re-listed: every month the lost facts were about shows the agent gap with
/// its counts, and closing such a month asks for an acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_re_list_cannot_recover_is_a_gap_on_every_month_it_touches() {
    let dir = temp_dir("gl-e2e-lost").unwrap();
    let db = fresh_database().await.unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let token = create_token(&db.admin_url, "agent:lost").unwrap();
    let admin = create_token(&db.admin_url, "admin").unwrap();
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    let pods = 3000;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let kube = FakeKube::start().await.unwrap();
    for (resource, object) in synthetic::cluster(pods, now) {
        kube.apply_silently(resource, object).unwrap();
    }
    let port = gpuledger_e2e::process::free_port().unwrap();
    let kubeconfig = kube.kubeconfig(&dir).unwrap();
    let extra = ["--spool-max-mib", "1", "--heartbeat-secs", "1", "--scrape-secs", "0"];
    let mut agent =
        start_cluster_agent(&dir, &format!("http://127.0.0.1:{port}"), &token, "lost", &kubeconfig, &extra).unwrap();
    wait_for_log(&dir, "spool: full", Duration::from_secs(120)).await;
    // Every pod is deleted while the agent cannot deliver (and nobody tells it).
    for i in 0..pods {
        let pod = synthetic::pod(i, now);
        kube.delete_silently("pods", pod["metadata"]["uid"].as_str().unwrap()).unwrap();
    }
    forward(port, &server.base).await;
    wait_for_log(&dir, "re-listing the cluster to recover them", Duration::from_secs(180)).await;
    // The agent's account of each gap follows the re-list: wait until every finding carries it.
    let started = Instant::now();
    loop {
        let findings: Vec<(Value,)> =
            sqlx::query_as("SELECT details FROM data_quality_findings WHERE kind = 'agent_gap'")
                .fetch_all(&pool)
                .await
                .unwrap();
        if !findings.is_empty() && findings.iter().all(|(d,)| d["recovery"].is_object()) {
            break;
        }
        let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
        assert!(started.elapsed() < Duration::from_secs(120), "no account of the gaps: {findings:?}\n{log}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    signal(agent.id(), "TERM").unwrap();
    let _ = agent.wait();
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM allocation_events WHERE kind = 'allocation_started'
            AND cluster_id = (SELECT cluster_id FROM clusters WHERE name = 'lost')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(stored < pods as i64, "some pods' starts are lost for good: {stored}");
    let findings: Vec<(String, serde_json::Value)> = sqlx::query_as(
        "SELECT to_char(occurred_from, 'YYYY-MM'), details FROM data_quality_findings WHERE kind = 'agent_gap'
          ORDER BY occurred_from",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(!findings.is_empty());
    let lost_starts: u64 = findings
        .iter()
        .flat_map(|(_, d)| d["kinds"].as_array().cloned().unwrap_or_default())
        .filter(|k| k["kind"] == "allocation_started")
        .map(|k| k["count"].as_u64().unwrap())
        .max()
        .unwrap_or(0);
    assert!(lost_starts > 0, "the gap names the lost allocation starts: {findings:?}");
    let http = reqwest::Client::new();
    let months: BTreeSet<String> = findings.iter().map(|(m, _)| m.clone()).collect();
    let this_month = {
        let t = time::OffsetDateTime::now_utc();
        format!("{:04}-{:02}", t.year(), u8::from(t.month()))
    };
    let mut named_starts = false;
    for month in &months {
        let f: Value = http
            .get(format!("{}/api/v1/periods/{month}/findings", server.base))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // A month the lost allocations touch names them and asks for an acknowledgement; one whose dropped facts all
        // came back (the namespaces' owner facts, their labels holding since creation months ago, and the nodes
        // are sent again by the re-list) reads recovered and asks for none.
        let needs = f["needs_acknowledgement"].to_string();
        let lost = findings.iter().any(|(m, d)| m == month && d["recovered"] != true);
        assert_eq!(needs.contains("agent gap(s)"), lost, "{month}: {f}");
        named_starts |= needs.contains("allocation_started");
        if lost && *month < this_month {
            let r = http
                .post(format!("{}/api/v1/periods/{month}/close", server.base))
                .bearer_auth(&admin)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 409);
            let body: Value = r.json().await.unwrap();
            assert!(body["detail"].as_str().unwrap().contains("agent gap"), "{body}");
        }
    }
    assert!(named_starts, "the months the pods ran in name their lost allocation starts: {months:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
