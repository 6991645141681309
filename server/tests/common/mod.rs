//! Shared set-up: a fresh, migrated database per test, reached as the application role.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

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
