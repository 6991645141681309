//! The schema cannot forget isolation: every table that holds an organization's rows has RLS enabled and
//! forced with a policy and `org_id` leading its primary key; the application role owns nothing and cannot
//! bypass RLS. A new table that misses any of this fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

/// Tables that legitimately have no `org_id` (not tenant data): sqlx's bookkeeping, and the operator's own tables
/// (the operator log and the slugs of deleted organizations outlive the organizations they mention), which the
/// application role cannot touch at all (checked below).
const NOT_TENANT_DATA: &[&str] = &["_sqlx_migrations", "operator_log", "retired_slugs"];

/// The operator's tables: reached only through the SECURITY DEFINER functions of `gpuledger_directory`.
const OPERATOR_TABLES: &[&str] = &["operator_log", "retired_slugs"];

#[tokio::test]
async fn every_org_table_is_isolated_and_keyed_by_org() {
    let (test_db, _db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;

    let tables: Vec<(String, bool, bool, bool, Option<String>, String)> = sqlx::query_as(
        "SELECT c.relname::text, c.relrowsecurity, c.relforcerowsecurity,
                EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid),
                (SELECT a.attname::text FROM pg_index i JOIN pg_attribute a
                    ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                  WHERE i.indrelid = c.oid AND i.indisprimary),
                pg_get_userbyid(c.relowner)::text
           FROM pg_class c
          WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
            AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id'
                        AND NOT a.attisdropped)
          ORDER BY 1",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(tables.len() >= 15, "expected the tenant tables, found {}", tables.len());
    for (name, enabled, forced, has_policy, first_pk_column, owner) in &tables {
        assert!(enabled, "{name}: row-level security not enabled");
        assert!(forced, "{name}: row-level security not forced");
        assert!(has_policy, "{name}: no policy");
        assert_eq!(first_pk_column.as_deref(), Some("org_id"), "{name}: org_id must lead the primary key");
        assert_eq!(owner, "gpuledger_owner", "{name}: must be owned by gpuledger_owner");
    }

    // Every policy compares org_id with the transaction's setting (or is one of the directory's).
    let policies: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT tablename::text, policyname::text, coalesce(qual, with_check), permissive
           FROM pg_policies WHERE schemaname = 'public'",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    // A department scope ORed with the organization's policy would show other departments' rows (and, under the
    // scope 'all', other organizations'): Citus 13.2 re-creates policies without AS RESTRICTIVE when it rebuilds a
    // table (deploy/citus/distribute.sql repairs it; the Citus job runs this test on the coordinator).
    let scopes: Vec<&(String, String, String, String)> = policies.iter().filter(|p| p.1 == "dept_scope").collect();
    assert!(scopes.len() >= 10, "{scopes:?}");
    for (table, _, _, permissive) in &scopes {
        assert_eq!(permissive, "RESTRICTIVE", "{table}.dept_scope must be restrictive");
    }
    for (table, policy, expression, permissive) in &policies {
        if policy.starts_with("directory_") {
            assert_eq!(table, "organizations", "directory policies belong on organizations only");
            continue;
        }
        if policy == "refresh_worker" {
            // The read model's worker lists which organizations are due through one SECURITY DEFINER function,
            // whose owner may read these tables of figures metadata (checked below: SELECT, owner only).
            assert!(
                ["read_dirty", "read_months", "read_summaries"].contains(&table.as_str()),
                "{table}.{policy}: not a read-model table"
            );
            continue;
        }
        if policy == "notifier" {
            // The notifier lists which organizations have webhooks through one SECURITY DEFINER function (checked
            // below: SELECT, owner only).
            assert_eq!(table, "webhooks", "{table}.{policy}: not the webhooks table");
            continue;
        }
        if policy == "tier_mover" {
            // The upkeep lists which organizations still have telemetry stored one row per device-hour through one
            // SECURITY DEFINER function (migration 31): SELECT, owner only.
            assert_eq!(table, "telemetry_hours", "{table}.{policy}: not the device-hour table");
            continue;
        }
        if policy == "coverage_keeper" {
            // Telemetry retention zeroes or deletes every organization's coverage days of a month through one
            // SECURITY DEFINER function (migration 39): owner only (checked below).
            assert_eq!(table, "telemetry_coverage_days", "{table}.{policy}: not the coverage table");
            continue;
        }
        if policy == "legacy_mover" {
            // The upkeep lists which organizations still have telemetry stored before the tiers through one SECURITY
            // DEFINER function (migration 26): SELECT, owner only.
            assert_eq!(table, "telemetry_rollups", "{table}.{policy}: not the legacy telemetry table");
            continue;
        }
        if policy == "dept_scope" {
            // Department scope: an extra, restrictive policy AND-ed with the organization's.
            assert!(expression.contains("gpuledger_dept_visible"), "{table}.{policy}: unexpected policy {expression}");
            continue;
        }
        assert_eq!(permissive, "PERMISSIVE", "{table}.{policy}: only dept_scope policies are restrictive");
        assert!(
            expression.contains("current_setting('app.org_id'") && expression.contains("NULLIF"),
            "{table}.{policy}: unexpected policy {expression}"
        );
    }

    let worker: Vec<(String, String, Vec<String>)> = sqlx::query_as(
        "SELECT tablename::text, cmd::text, roles::text[] FROM pg_policies WHERE policyname = 'refresh_worker' ORDER BY 1",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(
        worker,
        vec![
            ("read_dirty".to_string(), "SELECT".to_string(), vec!["gpuledger_owner".to_string()]),
            ("read_months".to_string(), "SELECT".to_string(), vec!["gpuledger_owner".to_string()]),
            ("read_summaries".to_string(), "SELECT".to_string(), vec!["gpuledger_owner".to_string()]),
        ]
    );
    let notifier: Vec<(String, String, Vec<String>)> = sqlx::query_as(
        "SELECT tablename::text, cmd::text, roles::text[] FROM pg_policies WHERE policyname = 'notifier' ORDER BY 1",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(notifier, vec![("webhooks".to_string(), "SELECT".to_string(), vec!["gpuledger_owner".to_string()])]);
    let mover: Vec<(String, String, Vec<String>)> = sqlx::query_as(
        "SELECT tablename::text, cmd::text, roles::text[] FROM pg_policies WHERE policyname = 'legacy_mover' ORDER BY 1",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(
        mover,
        vec![("telemetry_rollups".to_string(), "SELECT".to_string(), vec!["gpuledger_owner".to_string()])]
    );
    let tier_mover: Vec<(String, String, Vec<String>)> = sqlx::query_as(
        "SELECT tablename::text, cmd::text, roles::text[] FROM pg_policies WHERE policyname = 'tier_mover' ORDER BY 1",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(
        tier_mover,
        vec![("telemetry_hours".to_string(), "SELECT".to_string(), vec!["gpuledger_owner".to_string()])]
    );
    let keeper: Vec<(String, String, Vec<String>)> = sqlx::query_as(
        "SELECT tablename::text, cmd::text, roles::text[] FROM pg_policies WHERE policyname = 'coverage_keeper'",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(
        keeper,
        vec![("telemetry_coverage_days".to_string(), "ALL".to_string(), vec!["gpuledger_owner".to_string()])]
    );
    // The migration's backfill policy lived only for its transaction.
    let backfill: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_policies WHERE policyname = 'coverage_backfill'")
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(backfill, 0);

    // No table outside the allowlist escapes org_id.
    let untenanted: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
          WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
            AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id')",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    for t in untenanted {
        assert!(NOT_TENANT_DATA.contains(&t.as_str()), "table {t} has no org_id and is not allowlisted");
    }
    for t in OPERATOR_TABLES {
        let (any, owner): (bool, String) = sqlx::query_as(
            "SELECT has_table_privilege('gpuledger_app', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES'),
                    pg_get_userbyid(c.relowner)::text
               FROM pg_class c WHERE c.relname = $1 AND c.relnamespace = 'public'::regnamespace",
        )
        .bind(t)
        .fetch_one(&admin)
        .await
        .unwrap();
        assert!(!any, "{t}: the application role must have no privilege on an operator table");
        assert_eq!(owner, "gpuledger_owner", "{t}: must be owned by gpuledger_owner");
    }
}

#[tokio::test]
async fn app_role_owns_nothing_and_cannot_bypass() {
    let (test_db, _db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    let (superuser, bypass, inherits_owner, inherits_directory): (bool, bool, bool, bool) = sqlx::query_as(
        "SELECT rolsuper, rolbypassrls,
                pg_has_role('gpuledger_app', 'gpuledger_owner', 'MEMBER'),
                pg_has_role('gpuledger_app', 'gpuledger_directory', 'MEMBER')
           FROM pg_roles WHERE rolname = 'gpuledger_app'",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(!superuser && !bypass, "gpuledger_app must be neither superuser nor BYPASSRLS");
    assert!(!inherits_owner && !inherits_directory, "gpuledger_app must not be a member of owner/directory roles");
    let owned: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM pg_class WHERE relowner = 'gpuledger_app'::regrole)
              + (SELECT count(*) FROM pg_proc WHERE proowner = 'gpuledger_app'::regrole)",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(owned, 0, "gpuledger_app must own nothing");

    // And from the inside: the app role cannot turn isolation off or become the owner.
    let app = common::app_pool(&test_db, 1).await;
    for statement in [
        "ALTER TABLE departments NO FORCE ROW LEVEL SECURITY",
        "ALTER TABLE departments DISABLE ROW LEVEL SECURITY",
        "DROP POLICY org_isolation ON departments",
        "SET ROLE gpuledger_owner",
        "SET ROLE gpuledger_directory",
        "CREATE TABLE sneaky (org_id uuid)",
    ] {
        let err = sqlx::query(statement).execute(&app).await.expect_err(statement);
        let code = err.as_database_error().and_then(|e| e.code()).map(|c| c.to_string());
        assert_eq!(code.as_deref(), Some("42501"), "{statement}: expected insufficient_privilege, got {err}");
    }
}

#[tokio::test]
async fn server_refuses_to_serve_as_a_privileged_login() {
    let (test_db, _db) = common::migrated().await;
    let err = gpuledger_server::db::Database::connect(&test_db.admin_url, gpuledger_server::db::AppLogin::Direct, 1)
        .await
        .err()
        .expect("a superuser app pool must be refused");
    assert!(err.to_string().contains("superuser"), "{err}");
    // The SET ROLE path drops to the app role and is accepted.
    let db = gpuledger_server::db::Database::connect(&test_db.admin_url, gpuledger_server::db::AppLogin::SetRole, 1)
        .await
        .expect("SET ROLE path");
    assert!(db.readiness().await.is_ready());
}

#[tokio::test]
async fn a_schema_ahead_of_the_binary_is_ready_and_migrating_it_is_refused() {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    // A newer release's migration, as its Job would have recorded it.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99991231000001, 'from the future', true, '\\x00', 1)",
    )
    .execute(&admin)
    .await
    .unwrap();
    let r = db.readiness().await;
    assert_eq!(r.applied, Some(99991231000001));
    assert!(r.is_ready(), "old replicas keep serving against the expanded schema: {r:?}");
    // This binary's `migrate` refuses: it does not know that migration.
    let err = gpuledger_server::db::migrate(&test_db.admin_url).await.expect_err("migrating backwards");
    assert!(err.to_string().contains("99991231000001"), "{err}");
}
