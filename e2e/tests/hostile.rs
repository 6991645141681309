//! Hostile input against the real binary (issue 16): one organization's tokens throw every attack the issue names
//! — a `$filter` nested thousands deep, an `in` list of 1,500, a gzip bomb of 30 million JSON values, a JSON body
//! nested 100 deep, telemetry from years 0001 and 1970, forged tokens, a flood of OData reads — and the server
//! stays up (`/healthz`), its peak memory stays bounded, every refusal names its limit, no partition is made for
//! the refused months, and the other organization's data and reads are unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use gpuledger_e2e::{
    allow_app_login, fresh_database,
    process::{ServerProcess, create_token, create_token_in, start_demo, temp_dir},
};
use serde_json::{Value, json};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};
use uuid::Uuid;

/// The server's peak resident memory so far (VmHWM), MiB.
fn peak_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
}

async fn alive(http: &reqwest::Client, base: &str, after: &str) {
    let r =
        http.get(format!("{base}/healthz")).send().await.unwrap_or_else(|e| panic!("server down after {after}: {e}"));
    assert_eq!(r.status(), 200, "after {after}");
}

/// A request's status and problem document.
async fn answer(r: reqwest::RequestBuilder) -> (u16, Value) {
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn telemetry_batch(start: &str, end: &str) -> Value {
    json!({"wire_version": 1, "agent": {"version": "x", "mode": "node"}, "facts": [{
        "event_id": format!("telemetry/GPU-x/-/{start}"), "observed_at": OffsetDateTime::now_utc().format(&Rfc3339).unwrap(),
        "kind": "telemetry", "node": "n", "gpu_uuid": "GPU-x", "window_start": start, "window_end": end, "samples": 1,
        "utilization_pct": {"min": 0, "avg": 40, "max": 80}, "memory_used_mib": {"min": 0, "avg": 1, "max": 2},
        "power_w": {"min": 1, "avg": 1, "max": 1}}]})
}

/// What the victim organization holds, as one comparable value.
async fn digest(su: &sqlx::PgPool, org: Uuid) -> (i64, i64, String, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM allocation_events WHERE org_id = $1),
                (SELECT count(*) FROM telemetry_gpu_hours WHERE org_id = $1),
                coalesce((SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM telemetry_gpu_hours t WHERE org_id = $1), ''),
                (SELECT count(*) FROM tenants WHERE org_id = $1)",
    )
    .bind(org)
    .fetch_one(su)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_is_refused_by_name_and_the_server_and_the_other_organization_are_unharmed() {
    let db = fresh_database().await.unwrap();
    let dir = temp_dir("gl-e2e-hostile").unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let base = server.base.clone();
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(120)).build().unwrap();
    let su = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&db.admin_url).await.unwrap();

    // The victim (the demo organization) has data of its own, sent through the real ingest path.
    let victim: Uuid =
        sqlx::query_scalar("SELECT org_id FROM organizations WHERE slug = 'demo'").fetch_one(&su).await.unwrap();
    let victim_agent = create_token(&db.admin_url, "agent:victim-east").unwrap();
    let victim_export = create_token(&db.admin_url, "export").unwrap();
    let now = OffsetDateTime::now_utc();
    let hour = |h: i64| (now - time::Duration::hours(h)).replace_nanosecond(0).unwrap().format(&Rfc3339).unwrap();
    let (status, body) = answer(
        http.post(format!("{base}/api/v1/ingest/batches"))
            .bearer_auth(&victim_agent)
            .json(&telemetry_batch(&hour(2), &hour(1))),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let before = digest(&su, victim).await;
    assert_eq!(before.1, 1, "the victim's telemetry is stored");

    // The attacker: another organization with its own admin, export and agent tokens.
    sqlx::query("SELECT gpuledger_create_org($1, 'attacker', 'Attacker Inc')")
        .bind(Uuid::new_v4())
        .execute(&su)
        .await
        .unwrap();
    let admin = create_token_in(&db.admin_url, "attacker", "admin").unwrap();
    let export = create_token_in(&db.admin_url, "attacker", "export").unwrap();
    let agent = create_token_in(&db.admin_url, "attacker", "agent:attack-east").unwrap();
    let pid = server.pid();

    // 1. OData: nesting, long `in` lists, long filters, option ranges — each a 400 naming its limit.
    let odata = |query: Vec<(&'static str, String)>| {
        http.get(format!("{base}/odata/LedgerLines")).bearer_auth(&export).query(&query)
    };
    for (n, limit) in [(300, "deeper than 32"), (2_500, "deeper than 32"), (3_000, "deeper than 32")] {
        let f = format!("{}BilledCost gt 1{}", "(".repeat(n), ")".repeat(n));
        let (status, body) = answer(odata(vec![("$filter", f)])).await;
        alive(&http, &base, &format!("$filter nested {n} deep")).await;
        assert_eq!(status, 400, "{body}");
        assert!(body.to_string().contains(limit), "{body}");
    }
    let list = (0..1500).map(|i| format!("'x{i}'")).collect::<Vec<_>>().join(",");
    let (status, body) = answer(odata(vec![("$filter", format!("LineId in ({list})"))])).await;
    alive(&http, &base, "an `in` list of 1,500").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("more than 500 values"), "{body}");
    let (status, body) = answer(odata(vec![("$filter", format!("Tenant eq '{}'", "a".repeat(20_000)))])).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("longer than 16384"), "{body}");
    let (status, _) = answer(odata(vec![("$top", "-1".into())])).await;
    assert_eq!(status, 400);
    let (status, body) = answer(odata(vec![("$orderby", vec!["Tenant"; 100].join(","))])).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("more than 64 items"), "{body}");

    // 2. A gzip bomb: ~30 KB that inflates to 60 MB of `0,` — refused while inflating; memory stays bounded.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(br#"{"wire_version":1,"agent":{"version":"x","mode":"cluster"},"facts":["#).unwrap();
    let chunk = b"0,".repeat(1_000_000);
    for _ in 0..30 {
        gz.write_all(&chunk).unwrap();
    }
    gz.write_all(b"0]}").unwrap();
    let bomb = gz.finish().unwrap();
    let (status, body) = answer(
        http.post(format!("{base}/api/v1/ingest/batches"))
            .bearer_auth(&agent)
            .header("Content-Type", "application/json")
            .header("Content-Encoding", "gzip")
            .body(bomb),
    )
    .await;
    alive(&http, &base, "the gzip bomb").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["field"], "facts", "{body}");
    let peak = peak_mib(pid);
    assert!(peak <= 512, "peak memory {peak} MiB after the gzip bomb");

    // 3. REST bodies: nested 100 deep, and a megabyte-long name.
    let deep = format!("{{\"name\":{}1{}}}", "[".repeat(100), "]".repeat(100));
    let (status, body) = answer(
        http.post(format!("{base}/api/v1/departments"))
            .bearer_auth(&admin)
            .header("Content-Type", "application/json")
            .body(deep),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("nested deeper than 16"), "{body}");
    let (status, body) = answer(
        http.post(format!("{base}/api/v1/departments")).bearer_auth(&admin).json(&json!({"name": "n".repeat(2 << 20)})),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    alive(&http, &base, "the REST bodies").await;

    // 4. Telemetry from years 0001 and 1970: refused by name, and no partition is made for them.
    for year in ["0001", "1970"] {
        let batch = telemetry_batch(&format!("{year}-01-01T00:00:00Z"), &format!("{year}-01-01T00:01:00Z"));
        let (status, body) =
            answer(http.post(format!("{base}/api/v1/ingest/batches")).bearer_auth(&agent).json(&batch)).await;
        assert_eq!(status, 422, "{year}: {body}");
        assert_eq!(body["field"], "facts[0].window_start", "{body}");
        for table in ["telemetry_rollups", "telemetry_gpu_hours"] {
            let part: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
                .bind(format!("{table}_{year}01"))
                .fetch_one(&su)
                .await
                .unwrap();
            assert_eq!(part, None, "a partition of {table} was made for {year}");
        }
    }

    // 5. Forged tokens naming the victim's organization: 401, and the victim's audit log says so.
    let forged = format!("glt_{}_{}", victim.simple(), "a".repeat(64));
    for _ in 0..5 {
        let (status, _) = answer(http.get(format!("{base}/api/v1/ledger?period=2026-11")).bearer_auth(&forged)).await;
        assert_eq!(status, 401);
    }
    let refused: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'token.refused'")
            .bind(victim)
            .fetch_one(&su)
            .await
            .unwrap();
    assert!(refused >= 1, "forged tokens leave no audit record");

    // 6. A flood of the attacker's OData reads while the victim reads: the victim is served; the attacker gets
    //    answers or 503 with Retry-After, never anything else.
    let flood = (0..40).map(|_| {
        let r = http.get(format!("{base}/odata/Allocations")).bearer_auth(&export);
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.headers().contains_key("retry-after"))
        }
    });
    let victim_read = async {
        let r = http.get(format!("{base}/odata/Allocations")).bearer_auth(&victim_export).send().await.unwrap();
        r.status().as_u16()
    };
    let (answers, victim_status) = tokio::join!(futures::future::join_all(flood), victim_read);
    assert_eq!(victim_status, 200);
    for (status, retry_after) in answers {
        assert!(status == 200 || (status == 503 && retry_after), "flood answered {status}");
    }
    alive(&http, &base, "the flood").await;

    // The victim's data is what it was, and its reads still work.
    assert_eq!(digest(&su, victim).await, before);
    let (status, _) = answer(http.get(format!("{base}/odata/Allocations")).bearer_auth(&victim_export)).await;
    assert_eq!(status, 200);
    let peak = peak_mib(pid);
    assert!(peak <= 512, "peak memory {peak} MiB after every attack");
    eprintln!("server peak memory after every attack: {peak} MiB");

    // 7. After sign-in, `next` never leaves the site (the demo's sign-in; the OIDC one shares the check).
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    for next in [
        "/\tevil.example",
        "//evil.example",
        "/\\evil.example",
        "https://evil.example/",
        "/%5cevil.example",
        "/%2F/evil.example",
    ] {
        let r = no_redirects
            .post(format!("{base}/auth/demo"))
            .header("Origin", &base)
            .form(&[("org", "demo"), ("role", "viewer"), ("next", next)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "{next}");
        let location = r.headers()["location"].to_str().unwrap().to_string();
        let path = location.strip_prefix(&base).unwrap_or(&location);
        assert!(
            path.starts_with('/')
                && !path.starts_with("//")
                && !path.starts_with("/\\")
                && !path.contains("evil.example"),
            "next={next:?} sent the browser to {location:?}"
        );
    }

    // 8. The same database served by `serve`: no demo sign-in, whatever the database says — and the attempt is a
    //    denied sign-in the organization's admins see.
    allow_app_login(&db).await.unwrap();
    let mut served =
        ServerProcess::start(&["serve"], &[("DATABASE_URL", Some(&db.app_url))], None, &dir.join("serve.log")).unwrap();
    served.wait_ready(std::time::Duration::from_secs(60)).unwrap();
    let r = no_redirects
        .post(format!("{}/auth/demo", served.base))
        .header("Origin", &served.base)
        .form(&[("org", "demo"), ("role", "admin")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "serve offers the demo sign-in");
    assert!(r.headers().get("set-cookie").is_none());
    let login = http.get(format!("{}/login?org=demo", served.base)).send().await.unwrap().text().await.unwrap();
    assert!(!login.contains(r#"action="/auth/demo""#), "serve's /login shows demo accounts");
    let denied: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'login.denied' AND target = 'demo'",
    )
    .bind(victim)
    .fetch_one(&su)
    .await
    .unwrap();
    assert_eq!(denied, 1, "the refused demo sign-in is audited");
    alive(&http, &served.base, "the demo sign-in under serve").await;
    drop(served);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
