//! Browser sessions end to end through the router: demo login, cookies, CSRF, role pages, tokens made in the
//! portal, logout, expiry, tampering, and the audit trail they leave.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    demo,
};

use common::{csrf_of, demo_login, form, get, send};

#[tokio::test]
async fn demo_accounts_sign_in_land_on_their_role_page_and_sign_out() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());

    let login = send(&app, get("/login", None)).await;
    assert!(login.body.contains("Demo login"), "{}", login.body);
    for role in ["admin", "finance", "department_manager", "viewer"] {
        assert!(login.body.contains(&format!(r#"id="demo-{role}""#)), "{role}: {}", login.body);
    }

    // A sign-in form posted from another site is refused.
    let forged = send(&app, form("/auth/demo", None, "org=demo&role=admin", Some("http://evil.example"))).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);

    let (admin, landing) = demo_login(&app, "admin").await;
    assert_eq!(landing, "/admin");
    let (viewer, landing) = demo_login(&app, "viewer").await;
    assert_eq!(landing, "/");
    let (manager, landing) = demo_login(&app, "department_manager").await;
    assert_eq!(landing, "/departments");
    let (finance, landing) = demo_login(&app, "finance").await;
    assert_eq!(landing, "/finance");
    assert_ne!(admin, viewer, "every login gets a new session");

    // The overview shows the organization once signed in.
    let home = send(&app, get("/", Some(&viewer))).await;
    assert!(home.body.contains(r#"<th scope="row">Tenants</th><td class="num">9</td>"#), "{}", home.body);
    assert!(home.body.contains("Sign out"), "{}", home.body);
    // Pages are whole without JavaScript: no streamed fragments swapped in by scripts.
    for page in [&home.body, &login.body] {
        assert!(!page.contains("<template"), "{page}");
    }

    // Role pages: the right role gets in, others get 403, anonymous visitors are sent to sign in.
    let page = send(&app, get("/admin", Some(&admin))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("API tokens"), "{}", page.body);
    assert!(page.body.contains(r#"<form method="post" action="/auth/logout""#), "{}", page.body);
    assert_eq!(send(&app, get("/admin", Some(&viewer))).await.status, StatusCode::FORBIDDEN);
    let anonymous = send(&app, get("/admin", None)).await;
    assert!(anonymous.status.is_redirection(), "{}", anonymous.status);
    assert_eq!(anonymous.headers[header::LOCATION], "/login?next=/admin");
    let fin = send(&app, get("/finance", Some(&finance))).await;
    assert_eq!(fin.status, StatusCode::OK);
    assert!(fin.body.contains("Months"), "{}", fin.body);

    // A department manager's showback is their department's (no charges yet: an empty state, not an error).
    let dept = send(&app, get("/departments", Some(&manager))).await;
    assert_eq!(dept.status, StatusCode::OK, "{}", dept.body);
    assert!(dept.body.contains(r#"<option value="Research" selected"#), "{}", dept.body);
    assert!(!dept.body.contains("Product"), "{}", dept.body);
    assert!(dept.body.contains("No charges for this month and department."), "{}", dept.body);

    // Tokens made in the portal: without the CSRF token refused; with it shown once and usable.
    let csrf = csrf_of(&page.body);
    let refused = send(&app, form("/admin/tokens", Some(&admin), "name=bi&scope=export", None)).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let wrong = send(&app, form("/admin/tokens", Some(&admin), "csrf=0000&name=bi&scope=export", None)).await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    let made = send(
        &app,
        form(
            "/admin/tokens",
            Some(&admin),
            &format!("csrf={csrf}&name=powerbi&scope=export&departments=Research"),
            None,
        ),
    )
    .await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.body);
    let at = made.body.find("glt_").expect("the token is shown once");
    let token: String = made.body[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    let me = send(
        &app,
        Request::get("/api/v1/me")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(me.status, StatusCode::OK, "{}", me.body);
    let me: serde_json::Value = serde_json::from_str(&me.body).unwrap();
    assert_eq!(me["roles"], serde_json::json!(["export"]));
    assert_eq!(me["departments"], serde_json::json!(["Research"]));
    let bad_form =
        send(&app, form("/admin/tokens", Some(&admin), &format!("csrf={csrf}&name=&scope=export"), None)).await;
    assert_eq!(bad_form.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad_form.body.contains("name:"), "{}", bad_form.body);

    // The admin page lists it (never its secret); revoking takes effect at once.
    let page = send(&app, get("/admin", Some(&admin))).await;
    assert!(page.body.contains("powerbi") && !page.body.contains(&token), "{}", page.body);
    let me_json = send(&app, get("/api/v1/me", Some(&admin))).await;
    let id_at = page.body.find("/admin/tokens/").unwrap() + "/admin/tokens/".len();
    let id: String = page.body[id_at..].chars().take(36).collect();
    let revoked =
        send(&app, form(&format!("/admin/tokens/{id}/revoke"), Some(&admin), &format!("csrf={csrf}"), None)).await;
    assert_eq!(revoked.status, StatusCode::SEE_OTHER, "{}", revoked.body);
    let after = send(
        &app,
        Request::get("/api/v1/me")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    let me_json: serde_json::Value = serde_json::from_str(&me_json.body).unwrap();
    assert_eq!(me_json["csrf_token"], serde_json::json!(csrf));

    // JSON APIs with the cookie need the X-CSRF-Token header for writes.
    let no_header = send(
        &app,
        Request::post("/api/v1/tokens")
            .header(header::COOKIE, format!("gl_session={admin}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"name":"x","scope":"export"}"#))
            .unwrap(),
    )
    .await;
    assert_eq!(no_header.status, StatusCode::FORBIDDEN);
    let with_header = send(
        &app,
        Request::post("/api/v1/tokens")
            .header(header::COOKIE, format!("gl_session={admin}"))
            .header("x-csrf-token", &csrf)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"name":"x","scope":"export"}"#))
            .unwrap(),
    )
    .await;
    assert_eq!(with_header.status, StatusCode::CREATED, "{}", with_header.body);

    // A tampered cookie is nobody.
    let mut tampered = admin.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == '0' { '1' } else { '0' });
    assert_eq!(send(&app, get("/api/v1/me", Some(&tampered))).await.status, StatusCode::UNAUTHORIZED);

    // An expired session (absolute or idle timeout) is refused.
    let admin_db = common::admin_pool(&test_db).await;
    sqlx::query("UPDATE sessions SET expires_at = now() - interval '1 second' WHERE 'finance' = ANY(roles)")
        .execute(&admin_db)
        .await
        .unwrap();
    assert_eq!(send(&app, get("/api/v1/me", Some(&finance))).await.status, StatusCode::UNAUTHORIZED);
    sqlx::query("UPDATE sessions SET last_seen_at = now() - interval '31 minutes' WHERE 'viewer' = ANY(roles)")
        .execute(&admin_db)
        .await
        .unwrap();
    assert_eq!(send(&app, get("/api/v1/me", Some(&viewer))).await.status, StatusCode::UNAUTHORIZED);

    // Logout needs the CSRF token, ends the server-side session and clears the cookie.
    assert_eq!(send(&app, form("/auth/logout", Some(&admin), "", None)).await.status, StatusCode::FORBIDDEN);
    let out = send(&app, form("/auth/logout", Some(&admin), &format!("csrf={csrf}"), None)).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.headers[header::LOCATION], "/login?signed_out=1");
    assert!(out.headers[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(send(&app, get("/api/v1/me", Some(&admin))).await.status, StatusCode::UNAUTHORIZED);

    // The audit log has the logins, the token's life and the logout, with where they came from.
    let actions: Vec<(String, String, String)> =
        sqlx::query_as("SELECT action, actor, source FROM audit_log ORDER BY at, action")
            .fetch_all(&admin_db)
            .await
            .unwrap();
    let has = |a: &str| actions.iter().any(|(x, _, _)| x == a);
    assert!(has("login.success") && has("token.create") && has("token.revoke") && has("logout"), "{actions:?}");
    assert!(actions.iter().filter(|(a, _, _)| a == "login.success").all(|(_, _, s)| s == "local"), "{actions:?}");
    // The audit log refuses changes, whoever asks.
    let err = sqlx::query("UPDATE audit_log SET actor = 'someone else'").execute(&admin_db).await.unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
}

#[tokio::test]
async fn demo_login_is_off_once_an_identity_provider_is_configured() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());
    let admin_db = common::admin_pool(&test_db).await;
    sqlx::query(
        "INSERT INTO idp_settings (org_id, issuer, client_id, client_secret, updated_by)
         VALUES ($1, 'https://idp.example', 'gpuledger', 'secret', 'test')",
    )
    .bind(org.as_uuid())
    .execute(&admin_db)
    .await
    .unwrap();
    let login = send(&app, get("/login", None)).await;
    assert!(!login.body.contains("Demo login"), "{}", login.body);
    assert!(login.body.contains("Sign in with your identity provider"), "{}", login.body);
    let refused = send(&app, form("/auth/demo", None, "org=demo&role=admin", Some("http://localhost"))).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    // A callback without this browser's pending sign-in goes back to the login page, audited nowhere (no org).
    let cb = send(&app, get("/auth/callback?code=x&state=y", None)).await;
    assert_eq!(cb.headers[header::LOCATION], "/login?error=no_pending_login");
}

#[tokio::test]
async fn sign_in_attempts_are_rate_limited() {
    let (_test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let mut auth = gpuledger_server::auth::AuthState { demo_mode: true, ..Default::default() };
    auth.limits = gpuledger_server::auth::limits::RateLimits::new(3, std::time::Duration::from_secs(60));
    let app = app::router(AppState::with_auth(db, Some(org), auth), &HttpOptions::default());
    for _ in 0..3 {
        let a = send(&app, form("/auth/demo", None, "org=demo&role=viewer", Some("http://localhost"))).await;
        assert_eq!(a.status, StatusCode::SEE_OTHER);
    }
    let limited = send(&app, form("/auth/demo", None, "org=demo&role=viewer", Some("http://localhost"))).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.headers.contains_key(header::RETRY_AFTER));
}
