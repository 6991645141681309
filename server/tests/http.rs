//! The HTTP surface through `router().oneshot(…)`: health, readiness, the portal landing page, not-found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    db::Database,
    demo,
};
use tower::ServiceExt;

async fn get(app: &axum::Router, path: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = to_bytes(response.into_body(), 1 << 22).await.unwrap();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn router(db: Database, featured_org: Option<gpuledger_core::ids::OrgId>) -> axum::Router {
    app::router(AppState::new(db, featured_org), &HttpOptions::default())
}

#[tokio::test]
async fn health_and_readiness() {
    let (_test_db, db) = common::migrated().await;
    let app = router(db, None);
    let (status, headers, body) = get(&app, "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.contains_key("x-request-id"), "responses carry a request id");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["status"], "ok");

    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["schema_version"].as_i64(), gpuledger_server::db::latest_migration());
}

#[tokio::test]
async fn readiness_fails_when_the_schema_is_behind() {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = (SELECT max(version) FROM _sqlx_migrations)")
        .execute(&admin)
        .await
        .unwrap();
    let (status, headers, body) = get(&router(db, None), "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(body.contains("gpuledger-server migrate"), "{body}");
}

#[tokio::test]
async fn the_landing_page_shows_no_organization_data_before_sign_in() {
    let (_test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    // Seeding twice changes nothing.
    assert_eq!(demo::seed(&db).await.unwrap(), org);
    let app = router(db, Some(org));
    let (status, headers, body) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(body.contains("<title>GPU Ledger — overview</title>"), "{body}");
    assert!(body.contains(r#"href="/login""#), "{body}");
    assert!(!body.contains("Tenants"), "no counts before sign-in: {body}");
    // Every answer carries the security headers.
    assert!(headers["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["referrer-policy"], "same-origin");
}

#[tokio::test]
async fn the_login_page_without_an_organization_asks_for_one() {
    let (_test_db, db) = common::migrated().await;
    let (status, _, body) = get(&router(db, None), "/login").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"name="org""#), "{body}");
    assert!(!body.contains("Demo login"), "{body}");
}

#[tokio::test]
async fn unknown_paths_get_the_portal_not_found_page() {
    let (_test_db, db) = common::migrated().await;
    let (status, headers, body) = get(&router(db, None), "/no/such/page").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("Page not found"), "{body}");
    assert_scripts_carry_the_csp_nonce(&headers, &body);
}

#[tokio::test]
async fn unknown_api_paths_answer_problem_json_not_the_portal_page() {
    let (_test_db, db) = common::migrated().await;
    let app = router(db, None);
    for path in ["/api/v1/no-such-thing", "/api/v2/ledger", "/api/", "/api/v1/ledger/extra/segments"] {
        let (status, headers, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(headers["content-type"], "application/problem+json", "{path}");
        let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(problem["detail"].as_str().unwrap_or_default().contains("no API operation"), "{path}: {body}");
    }
    // Known operations are untouched by it.
    let (status, _, _) = get(&app, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
}

/// Every inline script carries the nonce the response's CSP allows (others would be blocked).
fn assert_scripts_carry_the_csp_nonce(headers: &axum::http::HeaderMap, body: &str) {
    let csp = headers["content-security-policy"].to_str().unwrap();
    for script in body.split("<script").skip(1) {
        let nonce = script.split("nonce=\"").nth(1).and_then(|n| n.split('"').next()).unwrap_or_default();
        assert!(!nonce.is_empty() && csp.contains(&format!("'nonce-{nonce}'")), "{csp}: {script}");
    }
}

#[tokio::test]
async fn the_openapi_document_lists_only_routes_that_answer() {
    let (_test_db, db) = common::migrated().await;
    let app = router(db, None);
    let (status, headers, body) = get(&app, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"].to_str().unwrap().starts_with("application/json"));
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 5);
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let request =
                Request::builder().method(method.to_uppercase().as_str()).uri(path).body(Body::empty()).unwrap();
            let status = app.clone().oneshot(request).await.unwrap().status();
            assert!(
                status != StatusCode::NOT_FOUND && status != StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is documented but answers {status}"
            );
        }
    }
}

/// Integrity violations are mapped once, in `AppError`'s conversion from the database error: a duplicate key, an
/// overlapping range or a missing referenced row is a 409 conflict naming the constraint (the request met the stored
/// data), a failed check a 422 — never a 500 — whichever handler met them.
#[tokio::test]
async fn database_integrity_violations_become_client_errors_in_one_place() {
    use gpuledger_server::error::AppError;
    let (test_db, _db) = common::migrated().await;
    let pool = common::admin_pool(&test_db).await;
    let mut conn = pool.acquire().await.unwrap();
    for ddl in [
        "CREATE TEMP TABLE k (id int CONSTRAINT k_pkey PRIMARY KEY)",
        "CREATE TEMP TABLE r (id int CONSTRAINT r_k_fkey REFERENCES k (id))",
        "CREATE TEMP TABLE c (v int CONSTRAINT c_positive CHECK (v > 0))",
        "CREATE TEMP TABLE o (span tstzrange, CONSTRAINT o_no_overlap EXCLUDE USING gist (span WITH &&))",
        "INSERT INTO k VALUES (1)",
        "INSERT INTO o VALUES (tstzrange('2026-10-01', '2026-11-01'))",
    ] {
        sqlx::query(ddl).execute(&mut *conn).await.unwrap();
    }
    async fn error_of(conn: &mut sqlx::PgConnection, sql: &str) -> AppError {
        AppError::from(sqlx::query(sql).execute(conn).await.unwrap_err())
    }
    let dup = error_of(&mut conn, "INSERT INTO k VALUES (1)").await;
    assert!(matches!(&dup, AppError::Conflict(m) if m.contains("k_pkey")), "{dup:?}");
    let overlap = error_of(&mut conn, "INSERT INTO o VALUES (tstzrange('2026-10-15', '2026-12-01'))").await;
    assert!(matches!(&overlap, AppError::Conflict(m) if m.contains("o_no_overlap")), "{overlap:?}");
    let missing = error_of(&mut conn, "INSERT INTO r VALUES (2)").await;
    assert!(matches!(&missing, AppError::Conflict(m) if m.contains("r_k_fkey")), "{missing:?}");
    let check = error_of(&mut conn, "INSERT INTO c VALUES (-1)").await;
    assert_eq!(check.status(), StatusCode::UNPROCESSABLE_ENTITY, "{check:?}");
    // A handler may say it in its own words; only a conflict is reworded.
    let worded = AppError::Conflict("x".into()).on_conflict(|| "a tenant named \"a\" exists".into());
    assert!(matches!(&worded, AppError::Conflict(m) if m.contains("tenant")));
    assert!(matches!(AppError::Forbidden("f".into()).on_conflict(|| "no".into()), AppError::Forbidden(_)));
}
