//! Organizations as a product (issue 19): created once per slug with a one-time setup link for the first admin,
//! suspended and resumed, exported and deleted without a trace in any table, and their settings kept by their own
//! admins only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode, header},
};
use gpuledger_core::{
    ids::OrgId,
    wire::{AgentInfo, Batch, Fact, FactBody, GapFact, WIRE_VERSION, event_id},
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
    db::Database,
    error::AppError,
    orgs::{self, LimitChange},
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tower::ServiceExt;
use uuid::Uuid;

const OP: &str = "operator:test";

async fn create(db: &Database, slug: &str) -> orgs::Created {
    orgs::create(db, OrgId::from_uuid(Uuid::new_v4()), slug, &format!("Org {slug}"), OP).await.unwrap()
}

/// An agent token (of a new cluster) and an admin token of `org`.
async fn tokens(db: &Database, org: OrgId) -> (String, String) {
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "automation", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    (agent, admin)
}

fn router(db: &Database) -> axum::Router {
    app::router(AppState::new(db.clone(), None), &HttpOptions::default())
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

async fn call(app: &axum::Router, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Answer {
    let mut r = Request::builder().method(method).uri(path).header(header::HOST, "localhost");
    if let Some(t) = token {
        r = r.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match body {
        Some(v) => {
            r = r.header(header::CONTENT_TYPE, "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    let response = app.clone().oneshot(r.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    Answer { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() }
}

/// A batch of `n` gap facts (the simplest facts there are).
fn gaps(n: usize) -> Value {
    let now = OffsetDateTime::now_utc();
    let facts: Vec<Fact> = (0..n)
        .map(|_| Fact {
            event_id: event_id("gap", &[&Uuid::new_v4().to_string()]),
            observed_at: now,
            body: FactBody::Gap(GapFact {
                from: now - time::Duration::hours(1),
                to: now,
                dropped: 1,
                kinds: Vec::new(),
                node: None,
            }),
        })
        .collect();
    let batch = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster: None,
        facts,
    };
    serde_json::to_value(batch).unwrap()
}

async fn ingest(app: &axum::Router, token: &str, n: usize) -> Answer {
    call(app, "POST", "/api/v1/ingest/batches", Some(token), Some(gaps(n))).await
}

/// The session cookie a setup link's answer sets.
fn session_cookie(a: &Answer) -> String {
    let set = a.headers[header::SET_COOKIE].to_str().unwrap();
    set.trim_start_matches("gl_session=").split(';').next().unwrap().to_string()
}

async fn page(app: &axum::Router, path: &str, cookie: Option<&str>) -> Answer {
    let mut r = Request::get(path).header(header::HOST, "localhost").header(header::ACCEPT, "text/html");
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, format!("gl_session={c}"));
    }
    let response = app.clone().oneshot(r.body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    Answer { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() }
}

fn field_of(err: &AppError) -> &str {
    match err {
        AppError::Invalid { field, .. } => field,
        other => panic!("expected a refused field, got {other}"),
    }
}

#[tokio::test]
async fn a_slug_is_validated_and_taken_once_and_creation_is_audited_twice() {
    let (test_db, db) = common::migrated().await;
    let acme = create(&db, "acme").await;
    assert!(acme.setup_token.starts_with("gls_"), "{}", acme.setup_token);
    let hours = (acme.setup_expires_at - OffsetDateTime::now_utc()).whole_minutes();
    assert!((23 * 60..=24 * 60).contains(&hours), "valid 24 h: {hours} min");

    let again = orgs::create(&db, OrgId::from_uuid(Uuid::new_v4()), "acme", "Again", OP).await.unwrap_err();
    assert_eq!(field_of(&again), "slug");
    assert!(again.to_string().contains("taken"), "{again}");
    for bad in ["Acme", "-acme", "acme_corp", ""] {
        let err = orgs::create(&db, OrgId::from_uuid(Uuid::new_v4()), bad, "Bad", OP).await.unwrap_err();
        assert_eq!(field_of(&err), "slug", "{bad}: {err}");
    }
    let err = orgs::create(&db, OrgId::from_uuid(Uuid::new_v4()), "fine", " ", OP).await.unwrap_err();
    assert_eq!(field_of(&err), "name");

    let listed = orgs::list(&db).await.unwrap();
    assert_eq!(listed.iter().map(|l| l.org.slug.as_str()).collect::<Vec<_>>(), ["acme"]);
    assert_eq!(listed[0].org.state, "active");
    assert_eq!((listed[0].clusters, listed[0].users, listed[0].last_ingest), (0, 0, None));

    // Audited in the organization's log and in the operator log; only the link's hash is stored.
    let admin = common::admin_pool(&test_db).await;
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'org.create' AND actor = $2")
            .bind(acme.org.as_uuid())
            .bind(OP)
            .fetch_one(&admin)
            .await
            .unwrap();
    assert_eq!(audited, 1);
    let log = db.cross_org_operator().log(Some("acme"), 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!((log[0].action.as_str(), log[0].actor.as_str(), log[0].org), ("org.create", OP, Some(acme.org)));
    let stored: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT secret_sha256 FROM setup_links").fetch_all(&admin).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert!(!stored[0].windows(8).any(|w| acme.setup_token.as_bytes().windows(8).any(|t| t == w)));

    // `demo` creates its organization through the same path (audited, with settings), idempotently.
    let demo = gpuledger_server::demo::seed(&db).await.unwrap();
    assert_eq!(gpuledger_server::demo::seed(&db).await.unwrap(), demo);
    let demo_log = db.cross_org_operator().log(Some("demo"), 10).await.unwrap();
    assert_eq!(demo_log.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["org.create"]);
    let settings: i64 = sqlx::query_scalar("SELECT count(*) FROM org_settings WHERE org_id = $1")
        .bind(demo.as_uuid())
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(settings, 1);
}

#[tokio::test]
async fn the_setup_link_signs_the_first_admin_in_once_and_used_or_expired_links_say_so() {
    let (test_db, db) = common::migrated().await;
    let acme = create(&db, "acme").await;
    let app = router(&db);
    let link = format!("/setup/{}", acme.setup_token);

    let used = page(&app, &link, None).await;
    assert_eq!(used.status, StatusCode::SEE_OTHER, "{}", used.body);
    assert_eq!(used.headers[header::LOCATION], "/admin/identity");
    let cookie = session_cookie(&used);
    // The first admin configures sign-in on the existing admin pages.
    let identity = page(&app, "/admin/identity", Some(&cookie)).await;
    assert_eq!(identity.status, StatusCode::OK, "{}", identity.body);
    assert!(identity.body.contains("OpenID provider") && identity.body.contains("Groups → roles"));
    assert_eq!(page(&app, "/admin", Some(&cookie)).await.status, StatusCode::OK);

    // Never a success twice.
    let again = page(&app, &link, None).await;
    assert_eq!(again.status, StatusCode::GONE, "{}", again.body);
    assert!(again.body.contains("already used"), "{}", again.body);
    assert!(again.headers.get(header::SET_COOKIE).is_none());

    // An expired link says so; an unknown or malformed one is not known.
    let second = orgs::new_setup_link(&db, "acme", OP).await.unwrap();
    let admin = common::admin_pool(&test_db).await;
    sqlx::query(
        "UPDATE setup_links SET created_at = now() - interval '2 days', expires_at = now() - interval '1 day'
          WHERE used_at IS NULL",
    )
    .execute(&admin)
    .await
    .unwrap();
    let expired = page(&app, &format!("/setup/{}", second.setup_token), None).await;
    assert_eq!(expired.status, StatusCode::GONE, "{}", expired.body);
    assert!(expired.body.contains("expired"), "{}", expired.body);
    let forged = format!("/setup/gls_{}_{}", acme.org.as_uuid().simple(), "ab".repeat(32));
    assert_eq!(page(&app, &forged, None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(page(&app, "/setup/nonsense", None).await.status, StatusCode::NOT_FOUND);

    let actions: Vec<String> =
        sqlx::query_scalar("SELECT action || ':' || reason FROM audit_log WHERE action LIKE 'setup.%' ORDER BY at")
            .fetch_all(&admin)
            .await
            .unwrap();
    assert_eq!(actions, ["setup.used:", "setup.refused:used", "setup.refused:expired"]);
}

#[tokio::test]
async fn a_suspended_organization_refuses_ingest_tokens_and_sign_in_keeps_its_data_and_resumes() {
    let (_test_db, db) = common::migrated().await;
    let acme = create(&db, "acme").await;
    let other = create(&db, "other").await;
    let (agent, admin_token) = tokens(&db, acme.org).await;
    let (other_agent, _) = tokens(&db, other.org).await;
    let app = router(&db);
    let session = session_cookie(&page(&app, &format!("/setup/{}", acme.setup_token), None).await);

    assert_eq!(ingest(&app, &agent, 2).await.status, StatusCode::OK);
    assert!(orgs::set_state(&db, "acme", true, "unpaid invoice", OP).await.unwrap());
    assert!(!orgs::set_state(&db, "acme", true, "", OP).await.unwrap(), "already suspended: nothing to do");

    let refused = ingest(&app, &agent, 1).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert_eq!(refused.headers[header::CONTENT_TYPE], "application/problem+json");
    assert!(refused.json()["detail"].as_str().unwrap().contains("\"acme\" is suspended"), "{}", refused.body);
    let me = call(&app, "GET", "/api/v1/me", Some(&admin_token), None).await;
    assert_eq!(me.status, StatusCode::FORBIDDEN);
    assert!(me.body.contains("suspended"), "{}", me.body);
    let mut r = Request::get("/api/v1/me").header(header::HOST, "localhost");
    r = r.header(header::COOKIE, format!("gl_session={session}"));
    let by_session = app.clone().oneshot(r.body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(by_session.status(), StatusCode::FORBIDDEN);
    let link = orgs::new_setup_link(&db, "acme", OP).await.unwrap_err();
    assert!(matches!(link, AppError::Suspended(_)), "{link}");
    let login = Request::post("/auth/login")
        .header(header::HOST, "localhost")
        .header(header::ORIGIN, "http://localhost")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("org=acme"))
        .unwrap();
    let login = app.clone().oneshot(login).await.unwrap();
    assert_eq!(login.headers()[header::LOCATION], "/login?error=suspended");
    let shown = page(&app, "/login?org=acme&error=suspended", None).await;
    assert!(shown.body.contains("suspended by its operator"), "{}", shown.body);
    // Another organization is not affected.
    assert_eq!(ingest(&app, &other_agent, 1).await.status, StatusCode::OK);

    assert!(orgs::set_state(&db, "acme", false, "", OP).await.unwrap());
    assert_eq!(ingest(&app, &agent, 1).await.status, StatusCode::OK);
    assert_eq!(call(&app, "GET", "/api/v1/me", Some(&admin_token), None).await.status, StatusCode::OK);
    let mut r = Request::get("/api/v1/me").header(header::HOST, "localhost");
    r = r.header(header::COOKIE, format!("gl_session={session}"));
    assert_eq!(app.clone().oneshot(r.body(Body::empty()).unwrap()).await.unwrap().status(), StatusCode::OK);

    // The data was kept all along: three batches of gaps.
    let mut tx = db.begin_org(acme.org).await.unwrap();
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM allocation_events").fetch_one(tx.conn()).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(kept, 3);
    let actions: Vec<String> =
        db.cross_org_operator().log(Some("acme"), 10).await.unwrap().into_iter().map(|e| e.action).collect();
    assert_eq!(actions, ["org.resume", "org.suspend", "org.create"]);
}

/// Rows of `org` in every table the catalog says has an `org_id` column.
async fn rows_left(admin: &sqlx::PgPool, org: OrgId) -> Vec<(String, i64)> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
          WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
            AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id'
                        AND NOT a.attisdropped)
          ORDER BY 1",
    )
    .fetch_all(admin)
    .await
    .unwrap();
    assert!(tables.len() > 40, "{tables:?}");
    let mut out = Vec::new();
    for t in tables {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{t}\" WHERE org_id = $1"))
            .bind(org.as_uuid())
            .fetch_one(admin)
            .await
            .unwrap();
        out.push((t, n));
    }
    out
}

#[tokio::test]
async fn export_then_delete_leaves_no_row_of_the_organization_in_any_table() {
    let (test_db, db) = common::migrated().await;
    let acme = create(&db, "acme").await;
    let other = create(&db, "other").await;
    let (agent, admin_token) = tokens(&db, acme.org).await;
    let (other_agent, _) = tokens(&db, other.org).await;
    let app = router(&db);
    let session = session_cookie(&page(&app, &format!("/setup/{}", acme.setup_token), None).await);
    assert_eq!(ingest(&app, &agent, 3).await.status, StatusCode::OK);
    assert_eq!(ingest(&app, &other_agent, 1).await.status, StatusCode::OK);
    let dept =
        call(&app, "POST", "/api/v1/departments", Some(&admin_token), Some(json!({"name": "acme-secret"}))).await;
    assert_eq!(dept.status, StatusCode::CREATED, "{}", dept.body);
    assert_eq!(page(&app, "/admin", Some(&session)).await.status, StatusCode::OK);
    let admin = common::admin_pool(&test_db).await;
    // The organization holds rows of many kinds now (including closed-month guards and append-only tables).
    sqlx::query(
        "INSERT INTO periods (org_id, period, state, content_hash, bundle_gz, closed_at, closed_by)
         VALUES ($1, '2026-01-01', 'closed', 'h', '\\x00', now(), 'test')",
    )
    .bind(acme.org.as_uuid())
    .execute(&admin)
    .await
    .unwrap();

    let dir = std::env::temp_dir().join(format!("gl-export-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("acme.jsonl");

    // Refused: confirmation, active, never exported.
    let err = orgs::delete(&db, "acme", "acm", OP).await.unwrap_err();
    assert_eq!(field_of(&err), "confirm");
    let err = orgs::delete(&db, "acme", "acme", OP).await.unwrap_err();
    assert!(err.to_string().contains("suspend it first"), "{err}");
    orgs::set_state(&db, "acme", true, "leaving", OP).await.unwrap();
    let err = orgs::delete(&db, "acme", "acme", OP).await.unwrap_err();
    assert!(err.to_string().contains("never exported"), "{err}");

    // The export: a header, one line per row, an end line; credentials withheld.
    let exported = orgs::export::export(&db, "acme", &file, OP).await.unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["format"], "gpuledger-organization-export");
    assert_eq!(lines[0]["organization"]["slug"], "acme");
    assert_eq!(lines.last().unwrap()["end"], true);
    assert_eq!(lines.len() as i64, exported.rows + 2);
    let rows = &lines[1..lines.len() - 1];
    for (table, count) in lines[0]["tables"].as_object().unwrap() {
        let n = rows.iter().filter(|r| r["table"] == *table).count() as u64;
        assert_eq!(Some(n), count.as_u64(), "{table}");
        assert!(rows.iter().filter(|r| r["table"] == *table).all(|r| r["row"]["org_id"] == json!(acme.org.as_uuid())));
    }
    let kinds = |t: &str| rows.iter().filter(|r| r["table"] == t).count();
    assert!(kinds("organizations") == 1 && kinds("allocation_events") == 3 && kinds("departments") == 1);
    assert!(kinds("sessions") == 1 && kinds("api_tokens") == 2 && kinds("periods") == 1);
    assert!(rows.iter().any(|r| r["table"] == "audit_log" && r["row"]["action"] == "org.export"), "self-recorded");
    for r in rows.iter().filter(|r| ["api_tokens", "sessions", "setup_links"].contains(&r["table"].as_str().unwrap())) {
        assert_eq!(r["row"]["secret_sha256"], Value::Null, "{r}");
        assert!(r["row"].as_object().unwrap().contains_key("secret_sha256"));
    }
    assert!(!text.contains("other"), "nothing of another organization");

    // A change after the export: the delete is refused until it is exported again.
    sqlx::query("UPDATE departments SET name = 'renamed' WHERE org_id = $1")
        .bind(acme.org.as_uuid())
        .execute(&admin)
        .await
        .unwrap();
    let err = orgs::delete(&db, "acme", "acme", OP).await.unwrap_err();
    assert!(err.to_string().contains("changed since its last export"), "{err}");
    orgs::export::export(&db, "acme", &file, OP).await.unwrap();

    let removed = orgs::delete(&db, "acme", "acme", OP).await.unwrap();
    assert!(removed.iter().any(|r| r.table == "organizations" && r.rows == 1), "{removed:?}");
    let left: Vec<_> = rows_left(&admin, acme.org).await.into_iter().filter(|(_, n)| *n > 0).collect();
    assert!(left.is_empty(), "rows of the deleted organization remain: {left:?}");
    // The other organization is untouched.
    let kept: i64 = rows_left(&admin, other.org).await.iter().map(|(_, n)| n).sum();
    assert!(kept > 5, "{kept}");
    assert_eq!(ingest(&app, &other_agent, 1).await.status, StatusCode::OK);
    // The deleted organization's credentials are dead; its slug is never given out again.
    assert_eq!(ingest(&app, &agent, 1).await.status, StatusCode::UNAUTHORIZED);
    let err = orgs::create(&db, OrgId::from_uuid(Uuid::new_v4()), "acme", "Acme again", OP).await.unwrap_err();
    assert!(err.to_string().contains("taken once"), "{err}");
    assert!(db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "acme", "x").await.is_err());
    let log: Vec<String> =
        db.cross_org_operator().log(Some("acme"), 20).await.unwrap().into_iter().map(|e| e.action).collect();
    assert_eq!(log[0], "org.delete");
    assert_eq!(log.iter().filter(|a| *a == "org.export").count(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn settings_are_validated_naming_the_field_audited_and_never_seen_across_organizations() {
    let (test_db, db) = common::migrated().await;
    let acme = create(&db, "acme").await;
    let globex = create(&db, "globex").await;
    let (_, acme_admin) = tokens(&db, acme.org).await;
    let (_, globex_admin) = tokens(&db, globex.org).await;
    let export = {
        let mut tx = db.begin_org(acme.org).await.unwrap();
        let (_, t) = auth::create_token(&mut tx, &Scope::export(), "bi", "test", None).await.unwrap();
        tx.commit().await.unwrap();
        t
    };
    let app = router(&db);
    let path = "/api/v1/organization/settings";

    let before = call(&app, "GET", path, Some(&acme_admin), None).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.body);
    let v = before.json();
    assert_eq!(
        (v["slug"].as_str(), v["default_currency"].as_str(), v["retention_months"].as_i64()),
        (Some("acme"), Some("USD"), Some(84))
    );
    assert_eq!(
        v["limits"],
        json!({"rate_limit_per_minute": null, "ingest_facts_per_day": null, "ingest_facts_today": 0})
    );

    let good = json!({"display_name": "Acme Europe", "default_currency": "EUR", "retention_months": 36});
    let put = call(&app, "PUT", path, Some(&acme_admin), Some(good.clone())).await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    assert_eq!(put.json()["display_name"], "Acme Europe");
    assert_eq!(put.json()["default_currency"], "EUR");

    for (body, field) in [
        (json!({"display_name": "", "default_currency": "EUR", "retention_months": 36}), "display_name"),
        (json!({"display_name": "A", "default_currency": "eur", "retention_months": 36}), "default_currency"),
        (json!({"display_name": "A", "default_currency": "EURO", "retention_months": 36}), "default_currency"),
        (json!({"display_name": "A", "default_currency": "EUR", "retention_months": 6}), "retention_months"),
        (json!({"display_name": "A", "default_currency": "EUR", "retention_months": 600}), "retention_months"),
    ] {
        let a = call(&app, "PUT", path, Some(&acme_admin), Some(body.clone())).await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {}", a.body);
        assert_eq!(a.json()["field"], field, "{body}: {}", a.body);
    }
    let unknown = call(
        &app,
        "PUT",
        path,
        Some(&acme_admin),
        Some(json!({"display_name": "A", "default_currency": "EUR",
        "retention_months": 36, "rate_limit_per_minute": 1})),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::UNPROCESSABLE_ENTITY, "admins do not set limits: {}", unknown.body);
    // Readers read, only admins write.
    assert_eq!(call(&app, "GET", path, Some(&export), None).await.status, StatusCode::OK);
    assert_eq!(call(&app, "PUT", path, Some(&export), Some(good.clone())).await.status, StatusCode::FORBIDDEN);
    assert_eq!(call(&app, "GET", path, None, None).await.status, StatusCode::UNAUTHORIZED);

    // Globex sees its own, unchanged; nothing of Acme's.
    let theirs = call(&app, "GET", path, Some(&globex_admin), None).await;
    assert_eq!(theirs.json()["slug"], "globex");
    assert_eq!(theirs.json()["default_currency"], "USD");
    assert!(!theirs.body.contains("Acme"), "{}", theirs.body);
    let ours = call(&app, "GET", path, Some(&acme_admin), None).await;
    assert_eq!(ours.json()["retention_months"], 36);
    assert_eq!(ours.json()["updated_by"].as_str().unwrap().split(':').next(), Some("token"));

    let admin = common::admin_pool(&test_db).await;
    let audited: Vec<(Uuid, Value)> =
        sqlx::query_as("SELECT org_id, details FROM audit_log WHERE action = 'organization.settings'")
            .fetch_all(&admin)
            .await
            .unwrap();
    assert_eq!(audited.len(), 1, "one change, one record (refusals change nothing)");
    assert_eq!(audited[0].0, acme.org.as_uuid());
    assert_eq!(audited[0].1["before"]["default_currency"], "USD");
    assert_eq!(audited[0].1["after"]["default_currency"], "EUR");

    // The portal's page shows the settings, with the operator's limits read-only.
    let session = session_cookie(&page(&app, &format!("/setup/{}", acme.setup_token), None).await);
    let p = page(&app, "/admin/organization", Some(&session)).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(
        p.body.contains(r#"value="EUR""#) && p.body.contains("Acme Europe") && p.body.contains("no limit"),
        "{}",
        p.body
    );
}

#[tokio::test]
async fn the_daily_ingest_limit_refuses_batches_beyond_it_with_a_429_naming_the_limit() {
    let (_test_db, db) = common::migrated().await;
    let acme = create(&db, "acme").await;
    let (agent, admin_token) = tokens(&db, acme.org).await;
    let app = router(&db);
    let (rate, ingest_limit) =
        orgs::set_limits(&db, "acme", LimitChange::Set(600), LimitChange::Set(3), OP).await.unwrap();
    assert_eq!((rate, ingest_limit), (Some(600), Some(3)));

    assert_eq!(ingest(&app, &agent, 2).await.status, StatusCode::OK);
    let over = ingest(&app, &agent, 2).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS, "{}", over.body);
    assert!(over.headers.contains_key(header::RETRY_AFTER));
    let detail = over.json()["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("3 facts per UTC day") && detail.contains("ingest_facts_per_day"), "{detail}");
    assert_eq!(ingest(&app, &agent, 1).await.status, StatusCode::OK, "what fits is accepted");

    let s = call(&app, "GET", "/api/v1/organization/settings", Some(&admin_token), None).await.json();
    assert_eq!(s["limits"], json!({"rate_limit_per_minute": 600, "ingest_facts_per_day": 3, "ingest_facts_today": 3}));
    // `none` lifts it.
    orgs::set_limits(&db, "acme", LimitChange::Keep, LimitChange::Unlimited, OP).await.unwrap();
    assert_eq!(ingest(&app, &agent, 5).await.status, StatusCode::OK);
}

#[tokio::test]
async fn the_api_rate_limit_answers_429_naming_it_and_leaves_agents_to_their_daily_volume() {
    let (_test_db, db) = common::migrated().await;
    let acme = create(&db, "acme").await;
    let (agent, admin_token) = tokens(&db, acme.org).await;
    let app = router(&db);
    orgs::set_limits(&db, "acme", LimitChange::Set(2), LimitChange::Keep, OP).await.unwrap();
    assert_eq!(call(&app, "GET", "/api/v1/me", Some(&admin_token), None).await.status, StatusCode::OK);
    assert_eq!(call(&app, "GET", "/api/v1/me", Some(&admin_token), None).await.status, StatusCode::OK);
    let over = call(&app, "GET", "/api/v1/me", Some(&admin_token), None).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS, "{}", over.body);
    assert!(over.json()["detail"].as_str().unwrap().contains("2 requests per minute"), "{}", over.body);
    for _ in 0..3 {
        assert_eq!(ingest(&app, &agent, 1).await.status, StatusCode::OK);
    }
}

/// A state the contract does not name, found in the database (here a token scope written past its `CHECK`), is an
/// internal error: the answer is a 500 whose detail stays in the log, never a list with a guessed scope.
#[tokio::test]
async fn a_stored_value_the_contract_does_not_name_is_an_internal_error() {
    let (test_db, db) = common::migrated().await;
    let app = router(&db);
    let acme = create(&db, "acme").await;
    let (_, admin_token) = tokens(&db, acme.org).await;
    let listed = call(&app, "GET", "/api/v1/tokens", Some(&admin_token), None).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    assert!(listed.json()["tokens"].as_array().unwrap().iter().any(|t| t["scope"] == "agent"));
    let admin = common::admin_pool(&test_db).await;
    sqlx::query("ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_scope_check").execute(&admin).await.unwrap();
    sqlx::query("UPDATE api_tokens SET scope = 'auditor', cluster_id = NULL WHERE org_id = $1 AND name = 'agent'")
        .bind(acme.org.as_uuid())
        .execute(&admin)
        .await
        .unwrap();
    let poisoned = call(&app, "GET", "/api/v1/tokens", Some(&admin_token), None).await;
    assert_eq!(poisoned.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", poisoned.body);
    assert!(!poisoned.body.contains("auditor"), "the detail stays in the log: {}", poisoned.body);
}
