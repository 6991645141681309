//! Sign-in end to end: the real server binary, a real OpenID provider process (`e2e/oidc`, node
//! `oidc-provider`) whose users' `groups` map to each role, and a real headless Chromium. Each role logs in,
//! lands on its page, and logs out (at the provider too). Then, without a browser, the refusals: wrong state,
//! wrong nonce, a replayed code, a user without a role, an expired session and a tampered cookie.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use gpuledger_e2e::{
    browser::Browser,
    fresh_database,
    oidc::{OidcProvider, confirm_logout, fill_login_form},
    oidc_walk::HttpWalker,
    process::{ServerProcess, create_token, temp_dir},
};
use reqwest::{StatusCode, header};
use serde_json::{Value, json};

const CLIENT_ID: &str = "gpuledger";
const CLIENT_SECRET: &str = "e2e-client-secret-0123456789";
/// The test provider listens on http://127.0.0.1: the server must be told to accept such an issuer.
const LOOPBACK: (&str, Option<&str>) = ("GPULEDGER_OIDC_ALLOW_HTTP_LOOPBACK", Some("true"));
const PRIVATE: (&str, Option<&str>) = ("GPULEDGER_OIDC_ALLOW_PRIVATE_ISSUER", Some("true"));

struct Setup {
    server: ServerProcess,
    provider: OidcProvider,
    admin_url: String,
    http: reqwest::Client,
}

/// The demo server (organization only), the provider registered for it, and the organization's IdP settings
/// and role mappings made through the admin API.
async fn setup(dir: &std::path::Path) -> (Setup, gpuledger_e2e::TestDatabase) {
    let db = fresh_database().await.unwrap();
    let mut server = ServerProcess::start(
        &["demo"],
        &[("DATABASE_URL", Some(db.admin_url.as_str())), ("GPULEDGER_DEMO_HISTORY", Some("false")), LOOPBACK, PRIVATE],
        None,
        &dir.join("server.log"),
    )
    .unwrap();
    server.wait_ready(Duration::from_secs(60)).unwrap();
    let provider = OidcProvider::start(
        CLIENT_ID,
        CLIENT_SECRET,
        &[format!("{}/auth/callback", server.base)],
        &[format!("{}/login?signed_out=1", server.base)],
    )
    .unwrap();
    let admin = create_token(&db.admin_url, "admin").unwrap();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let put =
        |path: &str, body: Value| http.put(format!("{}{path}", server.base)).bearer_auth(&admin).json(&body).send();
    let r = put(
        "/api/v1/identity/provider",
        json!({"issuer": provider.issuer(), "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let r = put(
        "/api/v1/identity/role-mappings",
        json!({"mappings": [
            {"group": "gl-admins", "role": "admin"},
            {"group": "gl-finance", "role": "finance"},
            {"group": "gl-dept-research", "role": "department_manager", "department": "Research"},
            {"group": "gl-viewers", "role": "viewer"},
        ]}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    // The secret never comes back.
    let shown = http.get(format!("{}/api/v1/identity/provider", server.base)).bearer_auth(&admin).send().await.unwrap();
    let shown = shown.text().await.unwrap();
    assert!(!shown.contains(CLIENT_SECRET) && shown.contains("client_secret_set"), "{shown}");
    let admin_url = db.admin_url.clone();
    (Setup { server, provider, admin_url, http }, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_signs_in_with_the_provider_lands_on_its_page_and_signs_out() {
    let dir = temp_dir("gl-e2e-login").unwrap();
    let (s, _db) = setup(&dir).await;
    let base = s.server.base.clone();
    let browser = Browser::start().await.unwrap();
    let t = Duration::from_secs(30);
    for (login, landing, expect) in [
        ("ada", "/admin", "API tokens"),
        ("fin", "/finance", "Months"),
        ("dee", "/departments", "Showback"),
        ("vic", "/", "Departments"),
    ] {
        browser.goto(&format!("{base}/login")).await.unwrap();
        let source = browser.page_source().await.unwrap();
        assert!(!source.contains("Demo login"), "demo login is off with a provider configured");
        browser.click_css("#sign-in-oidc").await.unwrap();
        fill_login_form(&browser, login).await.unwrap();
        let url = browser.wait_for_url(|u| u == format!("{base}{landing}"), t).await;
        let url = url.unwrap_or_else(|e| panic!("{login}: {e}\n{}", s.server.log_text()));
        assert_eq!(url, format!("{base}{landing}"));
        let page = browser.page_source().await.unwrap();
        assert!(page.contains(expect), "{login} on {landing}: {page}");
        assert!(page.contains(&format!("{login}@example.test")), "{login}: the header names the user: {page}");
        // The session cookie is HttpOnly: page scripts cannot read it.
        let cookie = browser.cookie("gl_session").await.unwrap().expect("session cookie");
        assert_eq!(cookie["httpOnly"], true);
        assert_eq!(browser.execute("return document.cookie", vec![]).await.unwrap(), json!(""));

        // Sign out: the server session ends, then the provider asks to confirm its own logout.
        if let Err(e) = browser.click_css(r#"form[action="/auth/logout"] button"#).await {
            panic!("{login}: {e}: {}", browser.page_source().await.unwrap_or_default());
        }
        confirm_logout(&browser).await.unwrap();
        browser.wait_for_url(|u| u.starts_with(&format!("{base}/login?signed_out=1")), t).await.unwrap();
        assert!(browser.page_source().await.unwrap().contains("You are signed out"));
        assert!(browser.cookie("gl_session").await.unwrap().is_none(), "{login}: cookie cleared");
        browser.goto(&format!("{base}{landing}")).await.unwrap();
        if landing != "/" {
            browser.wait_for_url(|u| u.starts_with(&format!("{base}/login")), t).await.unwrap();
        }
    }
    browser.close().await.unwrap();

    // Every sign-in and sign-out was audited.
    let pool = sqlx::PgPool::connect(&s.admin_url).await.unwrap();
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action IN ('login.success', 'logout')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 8);
}

/// Starts a sign-in on the server like the login page's button does (a POST from this site); returns the provider
/// URL and the pending-login cookie.
async fn start_login(s: &Setup) -> (String, String) {
    // A link (GET) only leads to the login page.
    let r = s.http.get(format!("{}/auth/login?org=demo", s.server.base)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[header::LOCATION], "/login?org=demo");
    assert!(r.headers().get(header::SET_COOKIE).is_none());
    let r = s
        .http
        .post(format!("{}/auth/login", s.server.base))
        .header(header::ORIGIN, &s.server.base)
        .form(&[("org", "demo")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r.headers()[header::SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_string();
    assert!(cookie.starts_with("gl_login="), "{cookie}");
    (r.headers()[header::LOCATION].to_str().unwrap().to_string(), cookie)
}

/// Requests the callback with a pending-login cookie; returns where it sends the browser and the cookies set.
async fn callback(s: &Setup, url: &str, cookie: &str) -> (String, Vec<String>) {
    let r = s.http.get(url).header(header::COOKIE, cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{url}");
    let set = r.headers().get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_string()).collect();
    (r.headers()[header::LOCATION].to_str().unwrap().to_string(), set)
}

fn replace_param(url: &str, name: &str, value: &str) -> String {
    let mut u = reqwest::Url::parse(url).unwrap();
    let pairs: Vec<(String, String)> = u
        .query_pairs()
        .map(|(k, v)| (k.to_string(), if k == name { value.to_string() } else { v.to_string() }))
        .collect();
    u.query_pairs_mut().clear().extend_pairs(pairs);
    u.to_string()
}

fn session_of(set: &[String]) -> Option<String> {
    set.iter()
        .find(|c| c.starts_with("gl_session=") && !c.contains("Max-Age=0"))
        .map(|c| c.trim_start_matches("gl_session=").split(';').next().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replayed_and_expired_sign_ins_are_refused() {
    let dir = temp_dir("gl-e2e-login-refusals").unwrap();
    let (s, _db) = setup(&dir).await;
    let base = s.server.base.clone();
    let me = |cookie: Option<String>| {
        let mut r = s.http.get(format!("{base}/api/v1/me"));
        if let Some(c) = cookie {
            r = r.header(header::COOKIE, format!("gl_session={c}"));
        }
        r.send()
    };

    // Wrong state: refused, and the pending sign-in is used up (the right state no longer works either).
    let (authorize, pending) = start_login(&s).await;
    let back = HttpWalker::new().unwrap().login(&authorize, "ada").await.unwrap();
    let (to, set) = callback(&s, &replace_param(&back, "state", "forged-state"), &pending).await;
    assert_eq!(to, "/login?error=state");
    assert!(session_of(&set).is_none());
    let (to, _) = callback(&s, &back, &pending).await;
    assert_eq!(to, "/login?error=no_pending_login", "a pending sign-in is single use");

    // Wrong nonce: the provider signs the nonce it was sent; it is not the one this browser's sign-in holds.
    let (authorize, pending) = start_login(&s).await;
    let back =
        HttpWalker::new().unwrap().login(&replace_param(&authorize, "nonce", "forged-nonce"), "ada").await.unwrap();
    let (to, set) = callback(&s, &back, &pending).await;
    assert_eq!(to, "/login?error=id_token");
    assert!(session_of(&set).is_none());

    // A good sign-in, then its code replayed in a new sign-in: refused by the provider, so by us.
    let (authorize, pending) = start_login(&s).await;
    let back = HttpWalker::new().unwrap().login(&authorize, "ada").await.unwrap();
    let (to, set) = callback(&s, &back, &pending).await;
    assert_eq!(to, "/admin");
    let session = session_of(&set).expect("a session");
    assert_eq!(me(Some(session.clone())).await.unwrap().status(), StatusCode::OK);
    let (_, pending2) = start_login(&s).await;
    let state2: String =
        sqlx::query_scalar("SELECT state FROM oidc_logins WHERE consumed_at IS NULL ORDER BY created_at DESC LIMIT 1")
            .fetch_one(&sqlx::PgPool::connect(&s.admin_url).await.unwrap())
            .await
            .unwrap();
    let (to, set) = callback(&s, &replace_param(&back, "state", &state2), &pending2).await;
    assert_eq!(to, "/login?error=code");
    assert!(session_of(&set).is_none());

    // A user whose groups map to no role.
    let (authorize, pending) = start_login(&s).await;
    let back = HttpWalker::new().unwrap().login(&authorize, "zed").await.unwrap();
    assert_eq!(callback(&s, &back, &pending).await.0, "/login?error=no_role");

    // A tampered cookie is nobody; an expired session is refused.
    let mut tampered = session.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'a' { 'b' } else { 'a' });
    assert_eq!(me(Some(tampered)).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let pool = sqlx::PgPool::connect(&s.admin_url).await.unwrap();
    sqlx::query("UPDATE sessions SET expires_at = now() - interval '1 second'").execute(&pool).await.unwrap();
    assert_eq!(me(Some(session)).await.unwrap().status(), StatusCode::UNAUTHORIZED);

    // Each refusal is in the audit log with its reason.
    let failures: Vec<String> =
        sqlx::query_scalar("SELECT details->>'code' FROM audit_log WHERE action = 'login.failure' ORDER BY at")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(failures, ["state", "no_pending_login", "id_token", "code"]);
    let denied: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'login.denied'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(denied, 1);
    let log = s.server.log_text();
    assert!(!log.contains(CLIENT_SECRET) && !log.contains("glt_"), "no secret or token in the server log");
    drop(s.provider);
}

/// The client secret as a mounted file (`--oidc-secrets-dir`, one file per organization slug, as a Kubernetes
/// Secret volume gives it): the provider is configured without a secret, the database never holds it, and the
/// code exchange with the real provider uses it — with a wrong file the same sign-in is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_secret_mounted_as_a_file_signs_in_and_is_never_stored() {
    let dir = temp_dir("gl-e2e-login-mounted").unwrap();
    let secrets = dir.join("oidc-secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("demo"), format!("{CLIENT_SECRET}\n")).unwrap();
    let db = fresh_database().await.unwrap();
    let mut server = ServerProcess::start(
        &["demo"],
        &[
            ("DATABASE_URL", Some(db.admin_url.as_str())),
            ("GPULEDGER_DEMO_HISTORY", Some("false")),
            ("GPULEDGER_OIDC_SECRETS_DIR", Some(secrets.to_str().unwrap())),
            LOOPBACK,
            PRIVATE,
        ],
        None,
        &dir.join("server.log"),
    )
    .unwrap();
    server.wait_ready(Duration::from_secs(60)).unwrap();
    let provider = OidcProvider::start(
        CLIENT_ID,
        CLIENT_SECRET,
        &[format!("{}/auth/callback", server.base)],
        &[format!("{}/login?signed_out=1", server.base)],
    )
    .unwrap();
    let admin = create_token(&db.admin_url, "admin").unwrap();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = http
        .put(format!("{}/api/v1/identity/provider", server.base))
        .bearer_auth(&admin)
        .json(&json!({"issuer": provider.issuer(), "client_id": CLIENT_ID}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "no secret needed when one is mounted: {}", r.text().await.unwrap());
    let r = http
        .put(format!("{}/api/v1/identity/role-mappings", server.base))
        .bearer_auth(&admin)
        .json(&json!({"mappings": [{"group": "gl-admins", "role": "admin"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let shown: Value = http
        .get(format!("{}/api/v1/identity/provider", server.base))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["provider"]["client_secret_source"], "file", "{shown}");
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    let stored: String = sqlx::query_scalar("SELECT client_secret FROM idp_settings").fetch_one(&pool).await.unwrap();
    assert!(!stored.contains(CLIENT_SECRET), "the mounted secret is not copied into the database: {stored}");

    let s = Setup { server, provider, admin_url: db.admin_url.clone(), http };
    let (authorize, pending) = start_login(&s).await;
    let back = HttpWalker::new().unwrap().login(&authorize, "ada").await.unwrap();
    let (to, set) = callback(&s, &back, &pending).await;
    assert_eq!(to, "/admin", "{}", s.server.log_text());
    assert!(session_of(&set).is_some());

    // A wrong secret in the file: the provider refuses the code exchange, so no session.
    std::fs::write(secrets.join("demo"), "not-the-secret").unwrap();
    let (authorize, pending) = start_login(&s).await;
    let back = HttpWalker::new().unwrap().login(&authorize, "ada").await.unwrap();
    let (to, set) = callback(&s, &back, &pending).await;
    assert!(to.starts_with("/login?error="), "{to}");
    assert!(session_of(&set).is_none());
}
