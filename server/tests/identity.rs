//! Identity hardening through the router: the demo sign-in exists only in the `demo` runtime mode, `next` never
//! leaves the site, starting an OIDC sign-in needs a POST from this site, issuer URLs are checked, only the
//! deployment's cookie name is read and HSTS is sent over https, and `X-Forwarded-For` is believed only from
//! trusted proxies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use axum::{
    body::Body,
    extract::ConnectInfo,
    http::{Request, StatusCode, header},
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, AuthState, Scope, net::Cidr, oidc, session::SessionSettings},
    demo,
};
use serde_json::{Value, json};

use common::{form, get, send};

#[tokio::test]
async fn the_demo_sign_in_needs_the_demo_runtime_mode_whatever_the_database_says() {
    let (_test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    // The same database as `demo` left it (organizations.demo_login is set), served as `serve` serves it.
    let app = app::router(AppState::new(db.clone(), Some(org)), &HttpOptions::default());
    for role in ["admin", "viewer"] {
        let a = send(&app, form("/auth/demo", None, &format!("org=demo&role={role}"), Some("http://localhost"))).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{role}: {}", a.body);
        assert!(!a.headers.contains_key(header::SET_COOKIE) && !a.headers.contains_key(header::LOCATION));
    }
    for path in ["/login", "/login?org=demo"] {
        let login = send(&app, get(path, None)).await;
        assert_eq!(login.status, StatusCode::OK);
        assert!(!login.body.contains(r#"action="/auth/demo""#), "{path}: {}", login.body);
        assert!(!login.body.contains("Demo login"), "{path}: {}", login.body);
    }
    // The same database in the demo mode offers it.
    let demo_app = app::router(AppState::demo(db, org), &HttpOptions::default());
    assert!(send(&demo_app, get("/login?org=demo", None)).await.body.contains(r#"action="/auth/demo""#));
    let a = send(&demo_app, form("/auth/demo", None, "org=demo&role=viewer", Some("http://localhost"))).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn after_a_sign_in_next_stays_on_this_site() {
    let (_test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());
    // What a browser would send for `/%09/evil.example`, `/%5cevil.example` … (decoded once, then form-encoded).
    for next in ["/\t/evil.example", "//evil.example", "/\\evil.example", "https://evil.example/", "/%5cevil.example"] {
        let body = format!("org=demo&role=viewer&next={}", urlencode(next));
        let a = send(&app, form("/auth/demo", None, &body, Some("http://localhost"))).await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{next:?}: {}", a.body);
        assert_eq!(a.headers[header::LOCATION], "/", "{next:?}: the viewer's landing page instead");
    }
    let body = format!("org=demo&role=viewer&next={}", urlencode("/departments?period=2026-10"));
    let a = send(&app, form("/auth/demo", None, &body, Some("http://localhost"))).await;
    assert_eq!(a.headers[header::LOCATION], "/departments?period=2026-10");
    // The login page passes `next` on to the sign-in forms.
    let login = send(&app, get("/login?next=/finance", None)).await;
    assert!(login.body.contains(r#"<input type="hidden" name="next" value="/finance""#), "{}", login.body);
}

#[tokio::test]
async fn an_oidc_sign_in_starts_only_with_a_post_from_this_site() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let su = common::admin_pool(&test_db).await;
    sqlx::query(
        "INSERT INTO idp_settings (org_id, issuer, client_id, client_secret, updated_by)
         VALUES ($1, 'https://idp.invalid', 'gpuledger', 'secret', 'test')",
    )
    .bind(org.as_uuid())
    .execute(&su)
    .await
    .unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());

    // A link (GET) lands on the login page, never at the provider, and starts nothing.
    let a = send(&app, get("/auth/login?org=demo&next=/admin", None)).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    assert_eq!(a.headers[header::LOCATION], "/login?org=demo&next=%2Fadmin");
    assert!(!a.headers.contains_key(header::SET_COOKIE), "no pending sign-in from a link");
    let evil = send(&app, get("/auth/login?org=demo&next=//evil.example", None)).await;
    assert_eq!(evil.headers[header::LOCATION], "/login?org=demo");
    let page = send(&app, get("/login?org=demo", None)).await;
    assert!(page.body.contains(r#"<form method="post" action="/auth/login">"#), "{}", page.body);
    assert!(!page.body.contains(r#"href="/auth/login"#), "{}", page.body);

    // A POST from another site (or with no Origin at all) is refused.
    for origin in [Some("http://evil.example"), None] {
        let a = send(&app, form("/auth/login", None, "org=demo", origin)).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{origin:?}: {}", a.body);
        assert!(!a.headers.contains_key(header::SET_COOKIE));
    }
    // From this site it goes on to the provider; this one cannot be reached, and the answer does not say why.
    let a = send(&app, form("/auth/login", None, "org=demo", Some("http://localhost"))).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    let detail: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(detail["detail"], "service unavailable: the identity provider is not available right now");
}

async fn put_issuer(app: &axum::Router, token: &str, issuer: &str) -> (StatusCode, Value) {
    let r = Request::put("/api/v1/identity/provider")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({"issuer": issuer, "client_id": "gl", "client_secret": "s"}).to_string()))
        .unwrap();
    let a = send(app, r).await;
    (a.status, serde_json::from_str(&a.body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn issuers_must_be_https_and_public_unless_the_operator_allows_otherwise() {
    let (_test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let strict = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    // Not a URL of the document's form: 422; a well-formed one the operator's issuer rule refuses: 409.
    let (invalid, refused) = (StatusCode::UNPROCESSABLE_ENTITY, StatusCode::CONFLICT);
    for (issuer, says, expected) in [
        ("http://idp.example.com", "https", refused),
        ("http://127.0.0.1:1", "--oidc-allow-http-loopback", refused),
        ("ftp://idp.example.com", "https", invalid),
        ("https://127.0.0.1:1", "--oidc-allow-private-issuer", refused),
        ("https://10.1.2.3", "private", refused),
        ("https://169.254.169.254", "link-local", refused),
        ("https://[fd00::1]", "private", refused),
        ("https://[::ffff:192.168.0.1]", "private", refused),
        ("https://localhost:1", "--oidc-allow-private-issuer", refused),
    ] {
        let (status, body) = put_issuer(&strict, &admin, issuer).await;
        assert_eq!(status, expected, "{issuer}: {body}");
        assert_eq!(body["field"], "issuer", "{issuer}: {body}");
        assert!(body["detail"].as_str().unwrap().contains(says), "{issuer}: {body}");
    }
    // Allowed by the operator, the loopback issuer passes the policy; discovery then fails (nothing listens),
    // and the caller gets a generic sentence (the details are in the server log).
    let auth = AuthState {
        providers: oidc::Providers::new(None, oidc::IssuerPolicy { allow_http_loopback: true, allow_private: true }),
        ..AuthState::default()
    };
    let lenient = app::router(AppState::with_auth(db, None, auth), &HttpOptions::default());
    let (status, body) = put_issuer(&lenient, &admin, "http://127.0.0.1:1").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["detail"], "issuer: OpenID discovery at this issuer failed (the server log says why)");
}

#[tokio::test]
async fn only_the_deployments_cookie_name_is_read_and_https_gets_hsts() {
    let (_test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let https = AuthState {
        sessions: SessionSettings { public_url: Some("https://ledger.example".into()), ..SessionSettings::default() },
        demo_mode: true,
        ..AuthState::default()
    };
    let app = app::router(AppState::with_auth(db.clone(), Some(org), https), &HttpOptions::default());
    let health = send(&app, get("/healthz", None)).await;
    assert_eq!(health.headers[header::STRICT_TRANSPORT_SECURITY], "max-age=31536000; includeSubDomains");
    let a = send(&app, form("/auth/demo", None, "org=demo&role=viewer", Some("https://ledger.example"))).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert!(a.headers.contains_key(header::STRICT_TRANSPORT_SECURITY));
    let set = a.headers[header::SET_COOKIE].to_str().unwrap();
    let value = set.strip_prefix("__Host-gl_session=").expect("the __Host- cookie").split(';').next().unwrap();
    let me = |cookie: String| Request::get("/api/v1/me").header(header::COOKIE, cookie).body(Body::empty()).unwrap();
    assert_eq!(send(&app, me(format!("__Host-gl_session={value}"))).await.status, StatusCode::OK);
    // The same secret under the plain name (say, planted over http or by a sibling subdomain) is not read.
    assert_eq!(send(&app, me(format!("gl_session={value}"))).await.status, StatusCode::UNAUTHORIZED);

    // Plain HTTP on loopback: no HSTS, and the __Host- name is not read there.
    let plain = app::router(AppState::demo(db, org), &HttpOptions::default());
    let health = send(&plain, get("/healthz", None)).await;
    assert!(!health.headers.contains_key(header::STRICT_TRANSPORT_SECURITY));
    let (cookie, _) = common::demo_login(&plain, "viewer").await;
    let me = |c: String| {
        Request::get("/api/v1/me")
            .header(header::HOST, "localhost")
            .header(header::COOKIE, c)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(send(&plain, me(format!("gl_session={cookie}"))).await.status, StatusCode::OK);
    assert_eq!(send(&plain, me(format!("__Host-gl_session={cookie}"))).await.status, StatusCode::UNAUTHORIZED);
}

/// A demo sign-in from TCP peer `peer` with `X-Forwarded-For: xff`.
fn from_peer(peer: &str, xff: Option<&str>) -> Request<Body> {
    let mut r = form("/auth/demo", None, "org=demo&role=viewer", Some("http://localhost"));
    r.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
    if let Some(x) = xff {
        r.headers_mut().insert("x-forwarded-for", x.parse().unwrap());
    }
    r
}

#[tokio::test]
async fn forwarded_for_names_the_client_only_behind_a_trusted_proxy() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let auth = AuthState {
        demo_mode: true,
        trusted_proxies: Cidr::parse_list("10.0.0.0/8").unwrap(),
        limits: auth::limits::RateLimits::new(1, std::time::Duration::from_secs(60)),
        ..AuthState::default()
    };
    let app = app::router(AppState::with_auth(db, Some(org), auth), &HttpOptions::default());
    // Two clients behind the same proxy each have their own rate-limit allowance…
    let spoofed = "6.6.6.6, 198.51.100.7";
    assert_eq!(send(&app, from_peer("10.0.0.2:4000", Some(spoofed))).await.status, StatusCode::SEE_OTHER);
    assert_eq!(send(&app, from_peer("10.0.0.2:4001", Some("198.51.100.8"))).await.status, StatusCode::SEE_OTHER);
    // …and the first one's second attempt is over its own.
    let again = send(&app, from_peer("10.0.0.3:4002", Some("7.7.7.7, 198.51.100.7"))).await;
    assert_eq!(again.status, StatusCode::TOO_MANY_REQUESTS);
    // An untrusted peer is itself, whatever it forwards.
    assert_eq!(send(&app, from_peer("203.0.113.5:4003", Some("198.51.100.9"))).await.status, StatusCode::SEE_OTHER);
    let su = common::admin_pool(&test_db).await;
    let sources: Vec<String> =
        sqlx::query_scalar("SELECT source FROM audit_log WHERE action = 'login.success' ORDER BY at, audit_id")
            .fetch_all(&su)
            .await
            .unwrap();
    assert_eq!(sources, ["198.51.100.7", "198.51.100.8", "203.0.113.5"]);
}
