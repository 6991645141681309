//! Upgrading a distributed database on a real Citus cluster (issue 32; docs/scaling.md, "Upgrading a distributed
//! database"): a database migrated to an earlier migration and distributed then, with rows in it, is brought to the
//! head by `gpuledger-server migrate` (statement by statement, `gpuledger_server::citus`) and `distribute.sql` run
//! again. It must then be indistinguishable from a cluster set up fresh at the head: the tables the new migrations
//! created distributed and colocated, the same foreign keys, columns, policies and functions, `_sqlx_migrations`
//! checksums equal to the files', the earlier rows intact, and the application reading and writing through its door.
//!
//! Needs the Citus cluster of `scripts/citus-test` (its Citus job runs it with `--run-ignored only`); ignored — and
//! reported as skipped, never as passed — by the plain-PostgreSQL run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{borrow::Cow, collections::BTreeSet, path::Path};

use gpuledger_core::ids::OrgId;
use gpuledger_e2e::{TestDatabase, allow_app_login, fresh_citus_database, fresh_database, with_cluster_lock};
use gpuledger_server::{
    citus::{self, CitusState},
    db::{self, AppLogin, Database},
};
use sha2::{Digest, Sha384};
use sqlx::{Connection, PgConnection, PgPool, migrate::Migrator};
use uuid::Uuid;

/// The database is distributed after this migration; the ones after it (the evidence index's tables, the
/// PL/pgSQL doors, the per-GPU telemetry hours and `organizations.id`) are the upgrade.
const DISTRIBUTED_AFTER: i64 = 20261204000026;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `deploy/citus/distribute.sql` as it stood when the database was at `DISTRIBUTED_AFTER`: the file lists every
/// tenant table once its migration exists, so the lines for tables not created yet are the ones that came later.
async fn distribute(test_db: &TestDatabase, pool: &PgPool, only_existing: bool, must_create: &[&str]) {
    let file = std::fs::read_to_string(repo().join("deploy/citus/distribute.sql")).unwrap();
    let mut sql = String::new();
    let mut left_out = Vec::new();
    for line in file.lines() {
        if only_existing && let Some(rest) = line.strip_prefix("SELECT pg_temp.distribute('") {
            let table = rest.split('\'').next().unwrap();
            let exists: bool =
                sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL").bind(table).fetch_one(pool).await.unwrap();
            if !exists {
                left_out.push(table.to_string());
                continue;
            }
        }
        sql.push_str(line);
        sql.push('\n');
    }
    if only_existing {
        assert!(
            must_create.iter().all(|t| left_out.iter().any(|l| l == t)),
            "the upgrade must create tables {must_create:?}: {left_out:?}"
        );
    }
    let path = std::env::temp_dir().join(format!("{}-distribute.sql", test_db.name));
    std::fs::write(&path, sql).unwrap();
    let out = std::process::Command::new(gpuledger_e2e::find_program("psql").unwrap())
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", &test_db.admin_url, "-f"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).ok();
    assert!(out.status.success(), "distribute.sql failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// What must agree between the upgraded database and a fresh one.
async fn shape(pool: &PgPool) -> Vec<(&'static str, BTreeSet<String>)> {
    let queries: [(&'static str, &str); 6] = [
        (
            "distributed tables (table, method, colocated with departments)",
            "SELECT p.logicalrelid::regclass::text || ' ' || p.partmethod::text || ' ' ||
                    (p.colocationid = (SELECT colocationid FROM pg_dist_partition
                                        WHERE logicalrelid = 'departments'::regclass))::text
               FROM pg_dist_partition p",
        ),
        (
            "foreign keys",
            "SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
               FROM pg_constraint WHERE contype = 'f' AND connamespace = 'public'::regnamespace",
        ),
        (
            "columns",
            "SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' ||
                    coalesce(column_default, '') || ' ' || coalesce(generation_expression, '')
               FROM information_schema.columns WHERE table_schema = 'public'",
        ),
        (
            "policies",
            "SELECT tablename || ' ' || policyname || ' ' || permissive || ' ' || cmd || ' ' || array_to_string(roles, ',') || ' ' ||
                    coalesce(qual, '') || ' ' || coalesce(with_check, '')
               FROM pg_policies WHERE schemaname = 'public'",
        ),
        (
            "functions",
            "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || p.prosecdef || ' ' ||
                    md5(p.prosrc) || ' ' || pg_get_userbyid(p.proowner)
               FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace",
        ),
        (
            "grants",
            "SELECT table_name || ' ' || grantee || ' ' || privilege_type
               FROM information_schema.role_table_grants WHERE table_schema = 'public'",
        ),
    ];
    let mut out = Vec::new();
    for (what, query) in queries {
        let rows: Vec<String> = sqlx::query_scalar(query).fetch_all(pool).await.unwrap();
        out.push((what, rows.into_iter().collect()));
    }
    out
}

/// Foreign keys on the shards of the worker `worker` in database `name` (shard names differ between databases;
/// their number must not).
async fn shard_foreign_keys(worker: &str, name: &str) -> i64 {
    let mut conn = PgConnection::connect(&format!("{worker}/{name}")).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_constraint WHERE contype = 'f'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    n
}

/// From migration 26 (before the evidence index's tables, the PL/pgSQL doors, the per-GPU telemetry hours and
/// `organizations.id`), then from 39 (before the evidence orders — 40: a backfill `INSERT … SELECT` from a
/// distributed table into a local one, through policies created and dropped in its file — and the bundle chunks —
/// 41: a check constraint of the distributed `periods` dropped and added), with a closed month's evidence index and
/// bundle in place. One after the other: two fresh Citus databases made at once on the same nodes collide.
#[tokio::test]
#[ignore = "needs the Citus cluster of scripts/citus-test, whose Citus job runs it"]
async fn a_database_distributed_migrations_ago_upgrades_to_the_head() {
    upgrade_from(DISTRIBUTED_AFTER, &["evidence_months", "telemetry_gpu_hours"]).await;
    upgrade_from(20261206000039, &["evidence_orders", "period_bundle_chunks"]).await;
}

async fn upgrade_from(distributed_after: i64, must_create: &[&str]) {
    let citus_cluster = gpuledger_e2e::citus().unwrap().expect("GL_TEST_CITUS_*: run scripts/citus-test");
    let test_db = fresh_citus_database().await.unwrap();
    let admin = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&test_db.admin_url).await.unwrap();

    // 1. Migrated to `distributed_after` on the coordinator (a fresh coordinator: nothing distributed yet), then
    //    distributed with the file of that time.
    let all = Migrator::new(repo().join("migrations")).await.unwrap();
    let head = all.iter().map(|m| m.version).max().unwrap();
    let later: Vec<i64> = all.iter().map(|m| m.version).filter(|v| *v > distributed_after).collect();
    assert!(!later.is_empty(), "the upgrade must apply migrations: {later:?}");
    let mut earlier = Migrator::new(repo().join("migrations")).await.unwrap();
    earlier.migrations = Cow::Owned(all.iter().filter(|m| m.version <= distributed_after).cloned().collect());
    with_cluster_lock(async {
        let mut conn = PgConnection::connect(&test_db.admin_url).await?;
        assert_eq!(citus::state(&mut conn).await?, CitusState::Coordinator);
        citus::migrate(&mut conn, &earlier, CitusState::Coordinator).await?;
        conn.close().await?;
        Ok(())
    })
    .await
    .unwrap();
    distribute(&test_db, &admin, true, must_create).await;

    // 2. Rows in, of two organizations, while at the earlier migration.
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    for (org, slug) in [(a, "upgrade-a"), (b, "upgrade-b")] {
        sqlx::query("SELECT gpuledger_create_org($1, $2, $3)")
            .bind(org)
            .bind(slug)
            .bind(slug)
            .execute(&admin)
            .await
            .unwrap();
        let department = Uuid::new_v4();
        sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')")
            .bind(org)
            .bind(department)
            .execute(&admin)
            .await
            .unwrap();
        let tenant = Uuid::new_v4();
        sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, 'nlp')")
            .bind(org)
            .bind(tenant)
            .bind(department)
            .execute(&admin)
            .await
            .unwrap();
        if distributed_after >= 20261204000027 && org == a {
            closed_month_with_evidence(&admin, org, tenant).await;
        }
        sqlx::query("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, 'gpu-1')")
            .bind(org)
            .bind(Uuid::new_v4())
            .execute(&admin)
            .await
            .unwrap();
    }
    let distributed_before: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_dist_partition").fetch_one(&admin).await.unwrap();
    assert!(distributed_before >= 40, "distributed at the earlier migration: {distributed_before}");

    // 3. The upgrade: `gpuledger-server migrate` (db::migrate), then distribute.sql again, whole.
    with_cluster_lock(async {
        let mut conn = PgConnection::connect(&test_db.admin_url).await?;
        assert_eq!(citus::state(&mut conn).await?, CitusState::Distributed);
        conn.close().await?;
        Ok(db::migrate(&test_db.admin_url).await?)
    })
    .await
    .unwrap();
    distribute(&test_db, &admin, false, &[]).await;

    // 4. As a cluster set up fresh at the head (a copy of scripts/citus-test's template: migrate + distribute).
    let fresh = fresh_database().await.unwrap();
    let fresh_admin = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&fresh.admin_url).await.unwrap();
    let (upgraded_shape, fresh_shape) = (shape(&admin).await, shape(&fresh_admin).await);
    for ((what, upgraded), (_, fresh)) in upgraded_shape.iter().zip(&fresh_shape) {
        assert!(!fresh.is_empty(), "{what}: none on the fresh cluster");
        let missing: Vec<&String> = fresh.difference(upgraded).collect();
        let extra: Vec<&String> = upgraded.difference(fresh).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{what} differ after the upgrade: missing {missing:?}, extra {extra:?}"
        );
    }
    for table in
        ["evidence_months", "evidence_allocations", "telemetry_gpu_hours", "evidence_orders", "period_bundle_chunks"]
    {
        let shards: i64 = sqlx::query_scalar("SELECT count(*) FROM citus_shards WHERE table_name = $1::regclass")
            .bind(table)
            .fetch_one(&admin)
            .await
            .unwrap();
        assert_eq!(shards, 32, "{table}: a table the upgrade created must be distributed in 32 shards");
    }
    for worker in &citus_cluster.workers {
        let (upgraded, fresh_keys) =
            (shard_foreign_keys(worker, &test_db.name).await, shard_foreign_keys(worker, &fresh.name).await);
        assert!(fresh_keys > 0, "{worker}: no foreign keys on the shards of a fresh cluster");
        assert_eq!(upgraded, fresh_keys, "{worker}: foreign keys on the shards after the upgrade");
    }

    // 5. sqlx's bookkeeping: one successful row per file, with the file's SHA-384.
    let recorded: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&admin)
            .await
            .unwrap();
    let mut files: Vec<(i64, Vec<u8>)> = std::fs::read_dir(repo().join("migrations"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .map(|p| {
            let version = p.file_name().unwrap().to_str().unwrap().split('_').next().unwrap().parse().unwrap();
            (version, Sha384::digest(std::fs::read(&p).unwrap()).to_vec())
        })
        .collect();
    files.sort();
    assert_eq!(recorded.last().map(|r| r.0), Some(head));
    assert_eq!(
        recorded.iter().map(|(v, c, ok)| (*v, c.clone(), *ok)).collect::<Vec<_>>(),
        files.iter().map(|(v, c)| (*v, c.clone(), true)).collect::<Vec<_>>(),
        "_sqlx_migrations must hold each file's SHA-384"
    );
    // A plain `Migrator::run` (what a non-Citus deployment runs) finds nothing to do and no mismatch.
    let mut conn = PgConnection::connect(&test_db.admin_url).await.unwrap();
    citus::migrate(&mut conn, &all, CitusState::Distributed).await.unwrap();
    conn.close().await.unwrap();

    // 6. Through the application's door: the rows of before (and only its own organization's), a write to a table
    //    distributed before the upgrade, a read of one the upgrade created, and a new organization (the reference
    //    table with the generated column the upgrade added).
    allow_app_login(&test_db).await.unwrap();
    let app = Database::connect(&test_db.app_url, AppLogin::Direct, 4).await.unwrap();
    for (org, other) in [(a, b), (b, a)] {
        let mut tx = app.begin_org(OrgId::from_uuid(org)).await.unwrap();
        let seen: (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM departments WHERE org_id = $1), (SELECT count(*) FROM tenants WHERE org_id = $1),
                    (SELECT count(*) FROM clusters WHERE org_id = $1)",
        )
        .bind(org)
        .fetch_one(tx.conn())
        .await
        .unwrap();
        assert_eq!(seen, (1, 1, 1), "the rows written before the upgrade");
        let theirs: i64 = sqlx::query_scalar("SELECT count(*) FROM clusters WHERE org_id = $1")
            .bind(other)
            .fetch_one(tx.conn())
            .await
            .unwrap();
        assert_eq!(theirs, 0, "isolation after the upgrade");
        sqlx::query("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, 'gpu-2')")
            .bind(org)
            .bind(Uuid::new_v4())
            .execute(tx.conn())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let c = OrgId::from_uuid(Uuid::new_v4());
    let c = app.cross_org_directory().create_org(c, "upgrade-c", "Upgrade C").await.unwrap();
    let mut tx = app.begin_org(c).await.unwrap();
    sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Platform')")
        .bind(c.as_uuid())
        .bind(Uuid::new_v4())
        .execute(tx.conn())
        .await
        .unwrap();
    let evidence: i64 = sqlx::query_scalar("SELECT count(*) FROM evidence_months WHERE org_id = $1")
        .bind(c.as_uuid())
        .fetch_one(tx.conn())
        .await
        .unwrap();
    assert_eq!(evidence, 0);
    tx.commit().await.unwrap();
    let (clusters, ids): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM clusters), (SELECT count(*) FROM organizations WHERE id = org_id)",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!((clusters, ids), (4, 3), "two clusters per earlier organization; organizations.id filled for all three");
    if distributed_after >= 20261204000027 {
        // Migration 40 filled the month's orders from its ranks; 41 kept its bundle where it was.
        let mut tx = app.begin_org(OrgId::from_uuid(a)).await.unwrap();
        let orders: Vec<(i16, i32, Vec<i32>)> = sqlx::query_as(
            "SELECT sort, chunk, start_ranks FROM evidence_orders WHERE org_id = $1 ORDER BY sort, chunk",
        )
        .bind(a)
        .fetch_all(tx.conn())
        .await
        .unwrap();
        assert_eq!(orders, vec![(1, 0, vec![2, 3, 1]), (2, 0, vec![3, 1, 2]), (3, 0, vec![1, 3, 2])]);
        let bundle: (Option<Vec<u8>>, Option<i32>) =
            sqlx::query_as("SELECT bundle_gz, bundle_chunks FROM periods WHERE org_id = $1 AND period = '2026-01-01'")
                .bind(a)
                .fetch_one(tx.conn())
                .await
                .unwrap();
        assert_eq!(bundle, (Some(b"\x1f\x8b".to_vec()), None));
        tx.commit().await.unwrap();
    }
}

/// A closed January with its bundle in the period's row and an evidence index of three records whose orders differ
/// (start ranks 1–3; by end 2, 3, 1; by fraction 3, 1, 2; by ID 1, 3, 2).
async fn closed_month_with_evidence(admin: &PgPool, org: Uuid, tenant: Uuid) {
    sqlx::query(
        "INSERT INTO periods (org_id, period, state, closed_at, content_hash, bundle_gz)
         VALUES ($1, '2026-01-01', 'closed', now(), 'h', '\\x1f8b')",
    )
    .bind(org)
    .execute(admin)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO evidence_months (org_id, period, allocations, source) VALUES ($1, '2026-01-01', 3, 'close')",
    )
    .bind(org)
    .execute(admin)
    .await
    .unwrap();
    // (start rank, end rank, fraction rank, ID rank)
    for (s, e, f, i) in [(1, 3, 2, 1), (2, 1, 3, 3), (3, 2, 1, 2)] {
        sqlx::query(
            "INSERT INTO evidence_allocations (org_id, period, start_rank, end_rank, fraction_rank, id_rank, allocation,
                                               tenant_id, fraction, starts_at, confidence)
             VALUES ($1, '2026-01-01', $2, $3, $4, $5, 'c/a' || $2, $6, '1', now(), 'exact')",
        )
        .bind(org)
        .bind(s)
        .bind(e)
        .bind(f)
        .bind(i)
        .bind(tenant)
        .execute(admin)
        .await
        .unwrap();
    }
}
