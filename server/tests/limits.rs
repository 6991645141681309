//! Bounded work per request (issue 16), against real PostgreSQL as the app role: statement timeouts (and the
//! export's longer one), pool exhaustion answered at once with 503 + Retry-After, one organization's heavy reads
//! limited without touching another's, telemetry partitions made by the maintenance task (never by ingest), and
//! fact times refused before the cluster's backfill window.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode, header},
};
use gpuledger_core::ids::OrgId;
use gpuledger_e2e::TestDatabase;
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
    db::{AppLogin, Database, DbOptions},
    limits::{HeavyReads, ServerLimits},
    maintenance,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tower::ServiceExt;
use uuid::Uuid;

async fn org_with_token(db: &Database, slug: &str, scope: &str) -> (OrgId, String) {
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), slug, slug).await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let scope = match scope {
        "admin" => Scope::Admin,
        cluster => {
            let (cluster, _) = auth::ensure_cluster(&mut tx, cluster).await.unwrap();
            Scope::Agent { cluster }
        }
    };
    let (_, token) = auth::create_token(&mut tx, &scope, "t", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    (org, token)
}

async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value, Option<String>) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry = response.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_string());
    let bytes = to_bytes(response.into_body(), 1 << 24).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), retry)
}

async fn connect(test_db: &TestDatabase, options: DbOptions) -> Database {
    Database::connect_with(&test_db.app_url, AppLogin::Direct, options).await.unwrap()
}

#[tokio::test]
async fn statements_are_bounded_in_time_and_exports_get_the_longer_bound() {
    let (test_db, _) = common::migrated().await;
    let db = connect(
        &test_db,
        DbOptions {
            statement_timeout: Duration::from_millis(300),
            export_statement_timeout: Duration::from_secs(5),
            ..DbOptions::default()
        },
    )
    .await;
    let (org, _) = org_with_token(&db, "timeouts", "admin").await;
    let mut tx = db.begin_org(org).await.unwrap();
    let err = sqlx::query("SELECT pg_sleep(1)").execute(tx.conn()).await.unwrap_err();
    assert!(err.to_string().contains("statement timeout"), "{err}");
    drop(tx);
    let mut tx = db.begin_org(org).await.unwrap();
    tx.allow_long_statements().await.unwrap();
    sqlx::query("SELECT pg_sleep(1)").execute(tx.conn()).await.unwrap();
    tx.commit().await.unwrap();
}

/// A request blocked on a lock (a Citus shard moved with `block_writes` holds its writers like this) gives up after
/// `lock_timeout` with 503 + Retry-After — well before the HTTP request timeout — and a turn taken on purpose
/// (the read model's refresh lock) waits past `lock_timeout` for whoever holds it.
#[tokio::test]
async fn a_request_waiting_on_a_lock_gets_503_and_retry_after_and_turns_wait() {
    let (test_db, _) = common::migrated().await;
    let db = connect(
        &test_db,
        DbOptions {
            statement_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_millis(200),
            ..DbOptions::default()
        },
    )
    .await;
    let (org, token) = org_with_token(&db, "locked", "admin").await;
    let app = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    let su = common::admin_pool(&test_db).await;
    let mut holder = su.begin().await.unwrap();
    sqlx::query("LOCK TABLE departments IN SHARE MODE").execute(&mut *holder).await.unwrap();
    let started = Instant::now();
    let (status, body, retry) =
        call(&app, "POST", "/api/v1/departments", &token, Some(json!({"name": "Research"}))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry.as_deref(), Some("2"));
    assert!(body["detail"].as_str().unwrap().contains("locked"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(3), "answered after {:?}", started.elapsed());
    holder.rollback().await.unwrap();
    let (status, body, _) = call(&app, "POST", "/api/v1/departments", &token, Some(json!({"name": "Research"}))).await;
    assert_eq!(status, StatusCode::CREATED, "nothing was half-done by the refused try: {body}");

    // A turn: another transaction holds the advisory lock for 600 ms (three lock timeouts); the waiter gets it.
    let (class, key) = (7, 42);
    let mut holder = su.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2)").bind(class).bind(key).execute(&mut *holder).await.unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        holder.rollback().await.unwrap();
    });
    let started = Instant::now();
    let mut tx = db.begin_org(org).await.unwrap();
    tx.wait_for_turn(class, key).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(500), "it waited for the holder: {:?}", started.elapsed());
    // …and the statements after it are bound by lock_timeout again.
    let lock_timeout: String = sqlx::query_scalar("SHOW lock_timeout").fetch_one(tx.conn()).await.unwrap();
    assert_eq!(lock_timeout, "200ms");
    tx.commit().await.unwrap();
    release.await.unwrap();
}

#[tokio::test]
async fn an_exhausted_pool_is_answered_at_once_with_503_and_retry_after() {
    let (test_db, _) = common::migrated().await;
    let db = connect(
        &test_db,
        DbOptions { max_connections: 1, acquire_timeout: Duration::from_millis(200), ..DbOptions::default() },
    )
    .await;
    let (_org, token) = org_with_token(&db, "pool", "admin").await;
    let app = app::router(AppState::new(db.clone(), None), &HttpOptions::default());
    let (status, _, _) = call(&app, "GET", "/api/v1/departments", &token, None).await;
    assert_eq!(status, StatusCode::OK);
    let held = db.begin_org(_org).await.unwrap();
    let started = Instant::now();
    let (status, body, retry) = call(&app, "GET", "/api/v1/departments", &token, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry.as_deref(), Some("2"));
    assert!(started.elapsed() < Duration::from_secs(3), "answered after {:?}", started.elapsed());
    drop(held);
    let (status, _, _) = call(&app, "GET", "/api/v1/departments", &token, None).await;
    assert_eq!(status, StatusCode::OK, "the pool recovers");
}

#[tokio::test]
async fn one_organizations_heavy_reads_do_not_hold_up_another() {
    let (_test_db, db) = common::migrated().await;
    let (busy, busy_token) = org_with_token(&db, "busy", "admin").await;
    let (_quiet, quiet_token) = org_with_token(&db, "quiet", "admin").await;
    let limits = ServerLimits { heavy: HeavyReads::new(1, Duration::from_millis(200)), ..ServerLimits::default() };
    let state = AppState::new(db.clone(), None).with_limits(limits);
    let app = app::router(state.clone(), &HttpOptions::default());
    let period = OffsetDateTime::now_utc().date().replace_day(1).unwrap();
    // An export: heavy work (reads of the read model's stored figures take no turn).
    let ledger = format!("/api/v1/exports/allocations.csv?period={}", &period.to_string()[..7]);
    let (status, body, _) = call(&app, "GET", &ledger, &busy_token, None).await;
    assert_ne!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    // The busy organization's only turn is taken (a long export, say).
    let turn = state.limits.heavy.acquire(busy).await.unwrap();
    assert_eq!(state.limits.heavy.running(busy), 1);
    let (status, body, retry) = call(&app, "GET", &ledger, &busy_token, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("heavy reads"), "{body}");
    assert_eq!(retry.as_deref(), Some("2"));
    let (status, body, _) = call(&app, "GET", &ledger, &quiet_token, None).await;
    assert_ne!(status, StatusCode::SERVICE_UNAVAILABLE, "another organization is not held up: {body}");
    // Light requests of the busy organization are not limited either.
    let (status, _, _) = call(&app, "GET", "/api/v1/departments", &busy_token, None).await;
    assert_eq!(status, StatusCode::OK);
    drop(turn);
    let (status, body, _) = call(&app, "GET", &ledger, &busy_token, None).await;
    assert_ne!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(state.limits.heavy.running(busy), 0, "a finished read gives its turn back");
}

fn telemetry(start: OffsetDateTime) -> Value {
    let f = |t: OffsetDateTime| t.format(&time::format_description::well_known::Rfc3339).unwrap();
    json!({"wire_version": 1, "agent": {"version": "x", "mode": "node"}, "facts": [{
        "event_id": format!("telemetry/GPU-x/-/{}", f(start)), "observed_at": f(OffsetDateTime::now_utc()),
        "kind": "telemetry", "node": "n", "gpu_uuid": "GPU-x", "window_start": f(start),
        "window_end": f(start + time::Duration::minutes(1)), "samples": 1,
        "utilization_pct": {"min": 0, "avg": 1, "max": 2}, "memory_used_mib": {"min": 0, "avg": 1, "max": 2},
        "power_w": {"min": 1, "avg": 1, "max": 1}}]})
}

#[tokio::test]
async fn ingest_makes_no_partition_and_refuses_windows_before_the_backfill() {
    let (test_db, db) = common::migrated().await;
    let su = common::admin_pool(&test_db).await;
    let (_org, agent) = org_with_token(&db, "backfill", "east").await;
    let limits = ServerLimits { backfill: time::Duration::days(200), ..ServerLimits::default() };
    let app = app::router(AppState::new(db.clone(), None).with_limits(limits), &HttpOptions::default());
    let partitions = || async {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent IN ('telemetry_rollups'::regclass, 'telemetry_gpu_hours'::regclass) ORDER BY 1",
        )
        .fetch_all(&su)
        .await
        .unwrap();
        names
    };
    let before = partitions().await;
    // Five months back: inside the window; stored, in the default partition (no DDL on the request path).
    let old = OffsetDateTime::now_utc() - time::Duration::days(150);
    let (status, body, _) = call(&app, "POST", "/api/v1/ingest/batches", &agent, Some(telemetry(old))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(partitions().await, before, "ingest made a partition");
    let in_default: i64 =
        sqlx::query_scalar("SELECT count(*) FROM telemetry_gpu_hours_default").fetch_one(&su).await.unwrap();
    assert_eq!(in_default, 1);
    // Before the window, and in years 0001 / 1970: refused by name.
    for start in [
        OffsetDateTime::now_utc() - time::Duration::days(201),
        time::macros::datetime!(1970-01-01 00:00 UTC),
        time::macros::datetime!(0001-01-01 00:00 UTC),
    ] {
        let (status, body, _) = call(&app, "POST", "/api/v1/ingest/batches", &agent, Some(telemetry(start))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{start}: {body}");
        assert_eq!(body["field"], "facts[0].window_start");
        assert!(body["detail"].as_str().unwrap().contains("--ingest-backfill-days"), "{body}");
    }
    // The maintenance task makes the months ahead and the waiting month, and moves its row there.
    let made = maintenance::run_once(&db, OffsetDateTime::now_utc()).await.unwrap();
    assert!(made >= 4, "made {made}");
    let after = partitions().await;
    let now = OffsetDateTime::now_utc();
    for table in ["telemetry_rollups", "telemetry_gpu_hours"] {
        let month = |t: OffsetDateTime| format!("{table}_{:04}{:02}", t.year(), u8::from(t.month()));
        for t in [old, now, now + time::Duration::days(62)] {
            assert!(after.contains(&month(t)), "{} missing from {after:?}", month(t));
        }
    }
    for table in ["telemetry_gpu_hours"] {
        let in_default: i64 =
            sqlx::query_scalar(&format!("SELECT count(*) FROM {table}_default")).fetch_one(&su).await.unwrap();
        assert_eq!(in_default, 0, "{table}: the waiting row moved to its month");
        let total: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&su).await.unwrap();
        assert_eq!(total, 1, "{table}");
    }
    assert_eq!(maintenance::run_once(&db, now).await.unwrap(), 0, "a second round has nothing to do");
}
