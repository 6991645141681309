//! Isolation proven in the database, as the application role: with organization A set, nothing of B's can be
//! read, changed, deleted or created, in any table; with no organization set nothing is visible; a setting made
//! in a rolled-back transaction does not leak to the next user of the pooled connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use gpuledger_core::ids::OrgId;
use gpuledger_server::db::{Database, OrgTx};
use uuid::Uuid;

/// One row in every tenant table for `org`, written through the organization door.
async fn seed(db: &Database, slug: &str) -> OrgId {
    let org = db
        .cross_org_directory()
        .create_org(OrgId::from_uuid(Uuid::new_v4()), slug, &format!("Org {slug}"))
        .await
        .unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let o = org.as_uuid();
    let (dept, tenant, cluster, ns, user) =
        (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let statements: Vec<(&str, Vec<Uuid>)> = vec![
        ("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research')", vec![o, dept]),
        (
            "INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, 'nlp')",
            vec![o, tenant, dept],
        ),
        ("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, 'gpu-1')", vec![o, cluster]),
        (
            "INSERT INTO namespaces (org_id, namespace_uid, cluster_id, name, created_at) VALUES ($1, $2, $3, 'ml', now())",
            vec![o, ns, cluster],
        ),
        (
            "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, tenant_id) VALUES ($1, $2, '2026-01-01Z', $3)",
            vec![o, ns, tenant],
        ),
        ("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, 'H100-80GB')", vec![o]),
        (
            "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, 'NVIDIA H100 80GB HBM3', '2026-01-01Z', 'H100-80GB')",
            vec![o],
        ),
        (
            "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den) VALUES ($1, 'NVIDIA H100 80GB HBM3', '1g.10gb', '2026-01-01Z', 1, 7)",
            vec![o],
        ),
        (
            "INSERT INTO vgpu_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den) VALUES ($1, 'Tesla T4', 'GRID_T4-1Q', '2026-01-01Z', 1, 16)",
            vec![o],
        ),
        (
            "INSERT INTO timeslice_policies (org_id, cluster_id, name, valid_from, replicas) VALUES ($1, $2, 'shared-4', '2026-01-01Z', 4)",
            vec![o, cluster],
        ),
        (
            "INSERT INTO allocation_events (org_id, cluster_id, event_id, kind, subject, occurred_at, payload) VALUES ($1, $2, 'pod-start-1', 'allocation_started', 'alloc-1', now(), '{}')",
            vec![o, cluster],
        ),
        (
            "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name, namespace, namespace_uid, resource, units, sharing_mode, fraction_num, fraction_den, started_at, confidence) VALUES ($1, $2, 'alloc-1', 'pod', $3, 'p', 'ml', $3, 'nvidia.com/gpu', 1, 'exclusive', 1, 1, now(), 'exact')",
            vec![o, cluster, ns],
        ),
        ("INSERT INTO users (org_id, user_id, oidc_subject) VALUES ($1, $2, 'sub-1')", vec![o, user]),
        (
            "INSERT INTO user_roles (org_id, grant_id, user_id, role, department_id) VALUES ($1, $2, $3, 'department_manager', $4)",
            vec![o, Uuid::new_v4(), user, dept],
        ),
        (
            "INSERT INTO api_tokens (org_id, token_id, scope, secret_sha256, created_by) VALUES ($1, $2, 'export', sha256($2::text::bytea), 'test')",
            vec![o, Uuid::new_v4()],
        ),
        (
            "INSERT INTO devices (org_id, cluster_id, gpu_uuid, valid_from, node, model) VALUES ($1, $2, 'GPU-1', '2026-01-01Z', 'n1', 'NVIDIA H100 80GB HBM3')",
            vec![o, cluster],
        ),
        (
            "INSERT INTO nodes (org_id, cluster_id, name, valid_from, node_uid) VALUES ($1, $2, 'n1', '2026-01-01Z', $3)",
            vec![o, cluster, ns],
        ),
        (
            "INSERT INTO telemetry_rollups (org_id, cluster_id, gpu_uuid, window_start, window_end, node, samples) VALUES ($1, $2, 'GPU-1', '2026-01-01 10:00Z', '2026-01-01 10:01Z', 'n1', 6)",
            vec![o, cluster],
        ),
        (
            "INSERT INTO data_quality_findings (org_id, cluster_id, finding_id, kind, subject) VALUES ($1, $2, 'f1', 'agent_gap', 'spool')",
            vec![o, cluster],
        ),
        (
            "INSERT INTO service_usage (org_id, cluster_id, endpoint, model, tenant_name, tenant_id, window_start, window_end, requests, input_tokens, output_tokens) VALUES ($1, $2, 'llm-shared', 'llama-3-8b', 'nlp', $3, '2026-01-01 10:00Z', '2026-01-01 10:05Z', 2, 100, 300)",
            vec![o, cluster, tenant],
        ),
        (
            "INSERT INTO audit_log (org_id, audit_id, actor, action) VALUES ($1, $2, 'test', 'seed')",
            vec![o, Uuid::new_v4()],
        ),
        // The ledger (migration 4).
        (
            "INSERT INTO cost_policies (org_id, version, effective_from, currency, document, created_by) VALUES ($1, 1, '2026-01-01', 'USD', '{}', 'test')",
            vec![o],
        ),
        (
            "INSERT INTO quotas (org_id, quota_id, tenant_id, gpu_class, gpus, valid_from, created_by) VALUES ($1, $2, $3, 'H100-80GB', 2, '2026-01-01Z', 'test')",
            vec![o, Uuid::new_v4(), tenant],
        ),
        ("INSERT INTO periods (org_id, period, state) VALUES ($1, '2026-01-01', 'open')", vec![o]),
        (
            "INSERT INTO ledger_lines (org_id, period, line_no, line_id, department_id, department, tenant_id, tenant, term, gpu_class, quantity, unit, rate, amount, currency, confidence, policy_version, evidence, explanation, canonical) VALUES ($1, '2026-01-01', 1, '2026-01/borrowed/nlp/H100-80GB', $2, 'Research', $3, 'nlp', 'borrowed', 'H100-80GB', 1, 'GPU-hour', 3, 3, 'USD', 'exact', 1, '', '', '')",
            vec![o, dept, tenant],
        ),
        (
            "INSERT INTO adjustments (org_id, adjustment_id, kind, state, tenant_id, department_id, amount, currency, corrects, reason, created_by) VALUES ($1, $2, 'credit', 'pending_approval', $3, $4, -1, 'USD', '2026-01/borrowed/nlp/H100-80GB', 'test', 'test')",
            vec![o, Uuid::new_v4(), tenant, dept],
        ),
        (
            "INSERT INTO disputes (org_id, dispute_id, number, period, line_ids, reason, opened_by) VALUES ($1, $2, 1, '2026-01-01', '{2026-01/borrowed/nlp/H100-80GB}', 'too high', 'test')",
            vec![o, user],
        ),
        (
            "INSERT INTO dispute_events (org_id, event_id, dispute_id, actor, action) VALUES ($1, $2, $3, 'test', 'opened')",
            vec![o, Uuid::new_v4(), user],
        ),
    ];
    for (sql, binds) in statements {
        let mut q = sqlx::query(sql);
        for b in binds {
            q = q.bind(b);
        }
        q.execute(tx.conn()).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    tx.commit().await.unwrap();
    org
}

/// Every table holding organization rows, read from the catalog so a new table is covered automatically.
async fn tenant_tables(admin: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
          WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
            AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id')
          ORDER BY 1",
    )
    .fetch_all(admin)
    .await
    .unwrap()
}

fn sqlstate(err: &sqlx::Error) -> Option<String> {
    err.as_database_error().and_then(|e| e.code()).map(|c| c.to_string())
}

async fn count(tx: &mut OrgTx, table: &str, org: OrgId) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE org_id = $1"))
        .bind(org.as_uuid())
        .fetch_one(tx.conn())
        .await
        .unwrap()
}

#[tokio::test]
async fn org_a_cannot_touch_org_b_in_any_table() {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    let a = seed(&db, "org-a").await;
    let b = seed(&db, "org-b").await;
    let tables = tenant_tables(&admin).await;
    assert!(tables.len() >= 17, "{tables:?}");

    // The superuser sees both organizations' rows everywhere: the seed really wrote them.
    for table in &tables {
        let n: i64 =
            sqlx::query_scalar(&format!("SELECT count(DISTINCT org_id) FROM {table}")).fetch_one(&admin).await.unwrap();
        assert_eq!(n, 2, "{table}: seed must put rows of both organizations");
    }

    for table in &tables {
        // SELECT: A sees its own row and none of B's.
        let mut tx = db.begin_org(a).await.unwrap();
        assert!(count(&mut tx, table, a).await >= 1, "{table}: A must see its own rows");
        assert_eq!(count(&mut tx, table, b).await, 0, "{table}: A sees B's rows");
        let all: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE org_id <> $1"))
            .bind(a.as_uuid())
            .fetch_one(tx.conn())
            .await
            .unwrap();
        assert_eq!(all, 0, "{table}: A sees rows of another organization");

        // UPDATE: touches nothing of B's (or is refused outright on append-only tables).
        match sqlx::query(&format!("UPDATE {table} SET org_id = org_id WHERE org_id = $1"))
            .bind(b.as_uuid())
            .execute(tx.conn())
            .await
        {
            Ok(done) => assert_eq!(done.rows_affected(), 0, "{table}: A updated B's rows"),
            Err(e) => assert_eq!(sqlstate(&e).as_deref(), Some("42501"), "{table}: {e}"),
        }
        tx.rollback().await.unwrap();

        // DELETE: likewise.
        let mut tx = db.begin_org(a).await.unwrap();
        match sqlx::query(&format!("DELETE FROM {table} WHERE org_id = $1")).bind(b.as_uuid()).execute(tx.conn()).await
        {
            Ok(done) => assert_eq!(done.rows_affected(), 0, "{table}: A deleted B's rows"),
            Err(e) => assert_eq!(sqlstate(&e).as_deref(), Some("42501"), "{table}: {e}"),
        }
        tx.rollback().await.unwrap();

        // UPDATE that moves A's own row into B: refused by the policy's WITH CHECK.
        let mut tx = db.begin_org(a).await.unwrap();
        let moved = sqlx::query(&format!("UPDATE {table} SET org_id = $1 WHERE org_id = $2"))
            .bind(b.as_uuid())
            .bind(a.as_uuid())
            .execute(tx.conn())
            .await
            .expect_err("moving a row to another organization must fail");
        assert!(
            matches!(sqlstate(&moved).as_deref(), Some("42501") | Some("23503")),
            "{table}: unexpected error {moved}"
        );
        tx.rollback().await.unwrap();

        // INSERT a copy of A's own row labelled as B's: refused.
        let mut tx = db.begin_org(a).await.unwrap();
        let inserted = sqlx::query(&format!(
            "INSERT INTO {table} SELECT (jsonb_populate_record(NULL::{table},
                 to_jsonb(t) || jsonb_build_object('org_id', $1::uuid))).* FROM {table} t LIMIT 1"
        ))
        .bind(b.as_uuid())
        .execute(tx.conn())
        .await
        .expect_err("inserting a row for another organization must fail");
        assert_eq!(sqlstate(&inserted).as_deref(), Some("42501"), "{table}: {inserted}");
        tx.rollback().await.unwrap();
    }

    // Nothing of B's changed: the superuser still sees all of it.
    for table in &tables {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE org_id = $1"))
            .bind(b.as_uuid())
            .fetch_one(&admin)
            .await
            .unwrap();
        assert!(n >= 1, "{table}: B's rows vanished");
    }
}

#[tokio::test]
async fn without_an_organization_nothing_is_visible_or_writable() {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    let a = seed(&db, "org-a").await;
    let app = common::app_pool(&test_db, 1).await;
    for table in tenant_tables(&admin).await {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&app).await.unwrap();
        assert_eq!(n, 0, "{table}: rows visible with no organization set");
    }
    let err = sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'x')")
        .bind(a.as_uuid())
        .bind(Uuid::new_v4())
        .execute(&app)
        .await
        .expect_err("insert without organization");
    assert_eq!(sqlstate(&err).as_deref(), Some("42501"), "{err}");
    // An empty setting fails closed too (NULLIF), rather than erroring on a cast.
    let mut tx = app.begin().await.unwrap();
    sqlx::query("SELECT set_config('app.org_id', '', true)").execute(&mut *tx).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM departments").fetch_one(&mut *tx).await.unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn a_rolled_back_setting_does_not_leak_to_the_next_user_of_the_connection() {
    let (test_db, db) = common::migrated().await;
    let a = seed(&db, "org-a").await;
    // One connection, so the next acquire is certainly the same session.
    let app = common::app_pool(&test_db, 1).await;
    let pid_before: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&app).await.unwrap();
    {
        let mut tx = app.begin().await.unwrap();
        sqlx::query("SELECT set_config('app.org_id', $1, true)")
            .bind(a.as_uuid().to_string())
            .execute(&mut *tx)
            .await
            .unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM departments").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(n, 1, "inside the transaction A's row is visible");
        tx.rollback().await.unwrap();
    }
    let pid_after: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&app).await.unwrap();
    assert_eq!(pid_before, pid_after, "the test must reuse the same session");
    let setting: Option<String> =
        sqlx::query_scalar("SELECT current_setting('app.org_id', true)").fetch_one(&app).await.unwrap();
    assert!(setting.as_deref().unwrap_or("").is_empty(), "setting leaked: {setting:?}");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM departments").fetch_one(&app).await.unwrap();
    assert_eq!(n, 0, "rows visible after the transaction ended");

    // The same holds for the door: a dropped OrgTx (rollback) leaves nothing behind on its pooled connection.
    {
        let mut tx = db.begin_org(a).await.unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM departments").fetch_one(tx.conn()).await.unwrap();
        assert_eq!(n, 1);
    }
}

#[tokio::test]
async fn append_only_tables_refuse_changes_even_within_the_organization() {
    let (_test_db, db) = common::migrated().await;
    let a = seed(&db, "org-a").await;
    for table in ["allocation_events", "audit_log"] {
        for statement in [format!("UPDATE {table} SET org_id = org_id"), format!("DELETE FROM {table}")] {
            let mut tx = db.begin_org(a).await.unwrap();
            let err = sqlx::query(&statement).execute(tx.conn()).await.expect_err(&statement);
            assert_eq!(sqlstate(&err).as_deref(), Some("42501"), "{statement}: {err}");
        }
    }
}

#[tokio::test]
async fn partitions_are_reachable_only_through_their_isolated_parent() {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    seed(&db, "org-a").await;
    let partitions: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
          WHERE c.relispartition AND c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(!partitions.is_empty());
    let app = common::app_pool(&test_db, 1).await;
    for p in partitions {
        let err = sqlx::query(&format!("SELECT * FROM {p}")).execute(&app).await.expect_err(&p);
        assert_eq!(sqlstate(&err).as_deref(), Some("42501"), "{p}: {err}");
    }
}

#[tokio::test]
async fn the_directory_resolves_slugs_and_nothing_else() {
    let (_test_db, db) = common::migrated().await;
    let a = seed(&db, "org-a").await;
    let directory = db.cross_org_directory();
    assert_eq!(directory.org_id_by_slug("org-a").await.unwrap(), Some(a));
    assert_eq!(directory.org_id_by_slug("nope").await.unwrap(), None);
    // Creating again with the same slug returns the existing organization.
    let again = directory.create_org(OrgId::from_uuid(Uuid::new_v4()), "org-a", "dup").await.unwrap();
    assert_eq!(again, a);
    // A bad slug is refused by the schema.
    assert!(directory.create_org(OrgId::from_uuid(Uuid::new_v4()), "Bad Slug!", "x").await.is_err());
}
