//! Shared set-up: a fresh, migrated database per test, reached as the application role.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod routes;

use gpuledger_e2e::{TestDatabase, allow_app_login, fresh_database, with_cluster_lock};
use gpuledger_server::db::{self, AppLogin, Database};

/// A migrated database and the application's door to it (as `gpuledger_app`).
pub async fn migrated() -> (TestDatabase, Database) {
    let test_db = fresh_database().await.expect("fresh database");
    with_cluster_lock(async { Ok(db::migrate(&test_db.admin_url).await?) }).await.expect("migrate");
    allow_app_login(&test_db).await.expect("app login");
    let database = Database::connect(&test_db.app_url, AppLogin::Direct, 4).await.expect("connect as app role");
    (test_db, database)
}

/// A plain connection pool as the application role, for probing the database without the door.
pub async fn app_pool(test_db: &TestDatabase, max: u32) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new().max_connections(max).connect(&test_db.app_url).await.expect("app pool")
}

/// A superuser pool (RLS does not apply): set-up and catalog queries only.
pub async fn admin_pool(test_db: &TestDatabase) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&test_db.admin_url).await.expect("admin pool")
}

/// Revokes token `token_id` of organization `org` straight in the database, as another replica (or the operator's
/// CLI) does: this process is not told.
pub async fn revoke_elsewhere(admin: &sqlx::PgPool, org: uuid::Uuid, token_id: uuid::Uuid) {
    sqlx::query("UPDATE api_tokens SET revoked_at = now() WHERE org_id = $1 AND token_id = $2")
        .bind(org)
        .bind(token_id)
        .execute(admin)
        .await
        .unwrap();
}

// ---- a browser's requests through the router (portal pages, forms, demo sign-in)

use axum::{
    body::{Body, to_bytes},
    http::{HeaderMap, Request, StatusCode, header},
};
use tower::ServiceExt;

/// A response, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

pub async fn send(app: &axum::Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    Answer { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

pub fn get(path: &str, cookie: Option<&str>) -> Request<Body> {
    // As a browser asks for pages.
    let mut r = Request::get(path).header(header::HOST, "localhost").header(header::ACCEPT, "text/html");
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, format!("gl_session={c}"));
    }
    r.body(Body::empty()).unwrap()
}

pub fn form(path: &str, cookie: Option<&str>, body: &str, origin: Option<&str>) -> Request<Body> {
    let mut r = Request::post(path)
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, format!("gl_session={c}"));
    }
    if let Some(o) = origin {
        r = r.header(header::ORIGIN, o);
    }
    r.body(Body::from(body.to_string())).unwrap()
}

/// Signs in as a demo account; returns the session cookie's value and where the browser was sent.
pub async fn demo_login(app: &axum::Router, role: &str) -> (String, String) {
    let a = send(app, form("/auth/demo", None, &format!("org=demo&role={role}"), Some("http://localhost"))).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let set = a.headers[header::SET_COOKIE].to_str().unwrap().to_string();
    assert!(set.starts_with("gl_session="), "{set}");
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Lax") && set.contains("Path=/"), "{set}");
    assert!(!set.contains("Secure"), "plain HTTP on loopback: not Secure ({set})");
    let value = set.trim_start_matches("gl_session=").split(';').next().unwrap().to_string();
    (value, a.headers[header::LOCATION].to_str().unwrap().to_string())
}

pub fn csrf_of(html: &str) -> String {
    let at = html.find(r#"name="csrf" value=""#).expect("a csrf field") + r#"name="csrf" value=""#.len();
    html[at..].split('"').next().unwrap().to_string()
}
