//! Isolation proven in the database, as the application role: with organization A set, nothing of B's can be
//! read, changed, deleted or created, in any table — not even when asked for by its key; with no organization set
//! nothing is visible; a setting made in a rolled-back transaction does not leak to the next user of the pooled
//! connection. Inside an organization, the department scope (`app.dept_scope`) hides and protects the other
//! departments' rows, and a scope that is unset, empty or malformed shows no department's rows at all.
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
    let webhook = Uuid::new_v4();
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
        // Telemetry in tiers (migration 26).
        (
            "INSERT INTO telemetry_series (org_id, series_id, cluster_id, gpu_uuid, node) VALUES ($1, 900001, $2, 'GPU-1', 'n1')",
            vec![o, cluster],
        ),
        (
            "INSERT INTO telemetry_hours (org_id, series_id, hour, windows, samples, sampled_ms, span_from_ms, span_to_ms, util_ms, util_sum, util_max, mem_max, power_max, energy_ms, energy_j) VALUES ($1, 900001, '2026-01-01 10:00Z', 1, 6, 60000, 0, 60000, 60000, 600000, 10, 0, 0, 0, 0)",
            vec![o],
        ),
        (
            "INSERT INTO telemetry_windows (org_id, series_id, hour, windows, block) VALUES ($1, 900001, '2026-01-01 10:00Z', 1, '\\x00')",
            vec![o],
        ),
        // One row per GPU-hour (migration 31).
        (
            "INSERT INTO telemetry_gpu_hours (org_id, series_id, hour, util_sum, energy_j, samples, sampled_ms, span_from_ms, span_to_ms, util_ms, mem_max, power_max, energy_ms, windows, util_max, block) VALUES ($1, 900001, '2026-01-01 10:00Z', 600000, 0, 6, 60000, 0, 60000, 60000, 0, 0, 0, 1, 10, '\\x00')",
            vec![o],
        ),
        // Coverage per GPU and day (migration 39).
        (
            "INSERT INTO telemetry_coverage_days (org_id, series_id, windows, gpu_ms, block_bytes, inst_bytes, instances, last_hour, day, len_s, hours, device_hours, own) VALUES ($1, 900001, 1, 60000, 1, 0, 0, '2026-01-01 10:00Z', '2026-01-01', 60, 1, 1, true)",
            vec![o],
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
        // Agents' last contact (migration 7).
        (
            "INSERT INTO agent_contacts (org_id, cluster_id, mode, version) VALUES ($1, $2, 'cluster', '0.1.0')",
            vec![o, cluster],
        ),
        ("INSERT INTO dispute_numbers (org_id, last_number) VALUES ($1, 0)", vec![o]),
        // Model servers' own totals (migration 11).
        (
            "INSERT INTO endpoint_totals (org_id, cluster_id, endpoint, model, server, pod, window_start, window_end, requests, input_tokens, output_tokens) VALUES ($1, $2, 'llm-shared', 'llama-3-8b', 'vllm', 'serving/vllm-0', '2026-01-01 10:00Z', '2026-01-01 10:01Z', 3, 30, 60)",
            vec![o, cluster],
        ),
        // The read model (migration 14).
        (
            "INSERT INTO read_months (org_id, period, state, as_of) VALUES ($1, '2026-01-01', 'provisional', now())",
            vec![o],
        ),
        (
            "INSERT INTO read_lines (org_id, period, line_no, department_id, department, tenant_id, tenant, term, amount, line) VALUES ($1, '2026-01-01', 1, $2, 'd', $3, 't', 'borrowed', 1.00, '{}')",
            vec![o, dept, tenant],
        ),
        ("INSERT INTO read_dirty (org_id) VALUES ($1) ON CONFLICT DO NOTHING", vec![o]),
        // Why a refresh failed (migration 32).
        (
            "INSERT INTO read_failures (org_id, first_failed_at, failed_at, attempts, field, reason) VALUES ($1, now(), now(), 1, 'policy', 'r')",
            vec![o],
        ),
        // Former names of departments and tenants (migration 17).
        (
            "INSERT INTO renames (org_id, rename_id, kind, object_id, old_name, new_name, renamed_by) VALUES ($1, gen_random_uuid(), 'tenant', $2, 'old', 'new', 'test')",
            vec![o, tenant],
        ),
        // Rules for namespaces without labels (migration 18).
        (
            "INSERT INTO namespace_rules (org_id, rule_id, match, pattern, tenant_id, valid_from, created_by) VALUES ($1, gen_random_uuid(), 'prefix', 'ml-', $2, '2026-01-01', 'test')",
            vec![o, tenant],
        ),
        // Share bases for soft-shared GPUs (migration 19).
        (
            "INSERT INTO share_bases (org_id, valid_from, basis, created_by) VALUES ($1, '2026-01-01', 'compute', 'test')",
            vec![o],
        ),
        (
            "INSERT INTO close_acknowledgements (org_id, period, acknowledged_by, reason, what) VALUES ($1, '2026-01-01', 'test', 'known', '{}')",
            vec![o],
        ),
        // Per-process GPU utilization (migration 20).
        (
            "INSERT INTO process_windows (org_id, cluster_id, node, gpu_uuid, window_start, window_end, samples, pods) VALUES ($1, $2, 'n1', 'GPU-1', '2026-01-01 10:00Z', '2026-01-01 10:01Z', 4, '[]')",
            vec![o, cluster],
        ),
        // Budgets and webhooks (migration 22).
        (
            "INSERT INTO budgets (org_id, period, department_id, amount, created_by) VALUES ($1, '2026-01-01', $2, 100.00, 'test')",
            vec![o, dept],
        ),
        (
            "INSERT INTO webhooks (org_id, webhook_id, url, events, secret, created_by) VALUES ($1, $2, 'https://hooks.example/x', '{period.closed}', 'whsec_0123456789abcdef0123456789abcdef', 'test')",
            vec![o, webhook],
        ),
        (
            "INSERT INTO webhook_deliveries (org_id, webhook_id, event, dedupe_key, payload) VALUES ($1, $2, 'period.closed', 'k', '{}')",
            vec![o, webhook],
        ),
        // The read model's summaries and month totals (migration 15).
        (
            "INSERT INTO read_totals (org_id, period, department_id, department, total) VALUES ($1, '2026-01-01', $2, 'd', 1.00)",
            vec![o, dept],
        ),
        (
            "INSERT INTO read_summaries (org_id, period, kind, as_of) VALUES ($1, '2026-01-01', 'inference', now())",
            vec![o],
        ),
        (
            "INSERT INTO read_summary_rows (org_id, period, kind, row_no, section, department_id, body) VALUES ($1, '2026-01-01', 'inference', 1, 'tenants', $2, '{}')",
            vec![o, dept],
        ),
        (
            "INSERT INTO read_answers (org_id, period, request, scope, as_of, body) VALUES ($1, '2026-01-01', '/api/v1/analytics/inference?period=2026-01', 'all', now(), '\\x7b7d')",
            vec![o],
        ),
        // The evidence index of closed months (migration 27).
        (
            "INSERT INTO evidence_months (org_id, period, allocations, source) VALUES ($1, '2026-01-01', 1, 'close')",
            vec![o],
        ),
        (
            "INSERT INTO evidence_allocations (org_id, period, start_rank, end_rank, fraction_rank, id_rank, allocation, tenant_id, fraction, starts_at, confidence) VALUES ($1, '2026-01-01', 1, 1, 1, 1, 'c/a', $2, '1', now(), 'exact')",
            vec![o, tenant],
        ),
        // Its orders (migration 40).
        (
            "INSERT INTO evidence_orders (org_id, period, sort, chunk, start_ranks) VALUES ($1, '2026-01-01', 1, 0, '{1}')",
            vec![o],
        ),
        // Closed months' bundles in chunks (migration 41).
        (
            "INSERT INTO period_bundle_chunks (org_id, period, seq, bytes) VALUES ($1, '2026-01-01', 0, '\\x1f8b')",
            vec![o],
        ),
        // Organizations' settings, setup links, exports and daily ingest counts (migration 16).
        ("INSERT INTO org_settings (org_id, updated_by) VALUES ($1, 'test') ON CONFLICT DO NOTHING", vec![o]),
        (
            "INSERT INTO setup_links (org_id, link_id, secret_sha256, created_by, expires_at) VALUES ($1, $2, sha256($2::text::bytea), 'test', now() + interval '1 day')",
            vec![o, Uuid::new_v4()],
        ),
        (
            "INSERT INTO org_exports (org_id, export_id, exported_by, row_count, table_count, fingerprint, file_sha256) VALUES ($1, $2, 'test', 0, 0, 'f', 's')",
            vec![o, Uuid::new_v4()],
        ),
        ("INSERT INTO ingest_daily (org_id, day, facts) VALUES ($1, '2026-01-01', 1)", vec![o]),
        // Training progress (migration 10).
        (
            "INSERT INTO training_progress (org_id, record_id, cluster_id, namespace, workload, reported_at, steps) VALUES ($1, 'p-1', $2, 'ml', 'llm-pretrain', '2026-01-01 10:00Z', 10)",
            vec![o, cluster],
        ),
        // Gateways' usage records and endpoint aliases (migration 9).
        (
            "INSERT INTO usage_records (org_id, record_id, cluster_id, endpoint, model, tenant_name, tenant_id, started_at, requests, input_tokens, output_tokens, status, department_id) VALUES ($1, 'req-1', $2, 'llm-shared', 'llama-3-8b', 'nlp', $3, '2026-01-01 10:00Z', 1, 10, 20, 'ok', $4)",
            vec![o, cluster, tenant, dept],
        ),
        (
            "INSERT INTO endpoint_aliases (org_id, endpoint, kind, alias, tenant_id) VALUES ($1, 'llm-shared', 'team', 'nlp-team', $2)",
            vec![o, tenant],
        ),
        // The ledger (migration 4).
        (
            "INSERT INTO cost_policies (org_id, version, effective_from, currency, document, created_by) VALUES ($1, 1, '2026-01-01', 'USD', '{}', 'test')",
            vec![o],
        ),
        (
            "INSERT INTO quotas (org_id, quota_id, tenant_id, gpu_class, gpus, valid_from, created_by, scope_department_id) VALUES ($1, $2, $3, 'H100-80GB', 2, '2026-01-01Z', 'test', $4)",
            vec![o, Uuid::new_v4(), tenant, dept],
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
            "INSERT INTO disputes (org_id, dispute_id, number, period, line_ids, reason, opened_by, department_id) VALUES ($1, $2, 1, '2026-01-01', '{2026-01/borrowed/nlp/H100-80GB}', 'too high', 'test', $3)",
            vec![o, user, dept],
        ),
        (
            "INSERT INTO dispute_events (org_id, event_id, dispute_id, actor, action, department_id) VALUES ($1, $2, $3, 'test', 'opened', $4)",
            vec![o, Uuid::new_v4(), user, dept],
        ),
        // Identity (migration 6).
        (
            "INSERT INTO idp_settings (org_id, issuer, client_id, client_secret, updated_by) VALUES ($1, 'https://idp.example', 'client', 'secret', 'test')",
            vec![o],
        ),
        (
            "INSERT INTO role_mappings (org_id, mapping_id, group_name, role, department_id) VALUES ($1, $2, 'managers', 'department_manager', $3)",
            vec![o, Uuid::new_v4(), dept],
        ),
        (
            "INSERT INTO sessions (org_id, session_id, secret_sha256, user_id, roles, csrf_token, expires_at) VALUES ($1, $2, sha256($2::text::bytea), $3, '{admin}', 'csrf', now() + interval '1 hour')",
            vec![o, Uuid::new_v4(), user],
        ),
        (
            "INSERT INTO oidc_logins (org_id, login_id, secret_sha256, state, nonce, pkce_verifier) VALUES ($1, $2, sha256($2::text::bytea), 's', 'n', 'v')",
            vec![o, Uuid::new_v4()],
        ),
        (
            "INSERT INTO cost_imports (org_id, period, import_id, imported_by, focus_version, currency, lines_read, lines_outside, matched_cost, unmatched_cost) VALUES ($1, '2026-01-01', $2, 'test', '1.2', 'USD', 1, 0, 1.00, 0)",
            vec![o, Uuid::new_v4()],
        ),
        (
            "INSERT INTO cost_import_resources (org_id, period, row_no, resource_id, resource_key, lines, effective_cost, billed_cost, cluster_id, node) VALUES ($1, '2026-01-01', 1, 'i-1', 'aws:i-1', 1, 1.00, 1.00, $2, 'n1')",
            vec![o, cluster],
        ),
        (
            "INSERT INTO fault_credit_decisions (org_id, fault_event_id, allocation_key, decision, decided_by, gpu_hours, amount) VALUES ($1, 'f1', 'c/a1', 'rejected', 'test', 1, 3.00)",
            vec![o],
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

/// On Citus an `INSERT … SELECT` whose rows are gathered on the coordinator is sent to the shards with COPY, which
/// PostgreSQL refuses under row-level security (0A000) before any row is written. Never accepted on PostgreSQL.
fn citus_refuses_copying_under_rls(err: &sqlx::Error) -> bool {
    gpuledger_e2e::citus().unwrap().is_some()
        && sqlstate(err).as_deref() == Some("0A000")
        && err.to_string().contains("COPY FROM not supported with row-level security")
}

/// On Citus (scripts/citus-test) an UPDATE that changes `org_id`, the distribution column, is refused before any
/// policy is asked: "modifying the partition value of rows is not allowed" (0A000). Never accepted on PostgreSQL.
fn citus_refuses_moving_a_row(err: &sqlx::Error) -> bool {
    gpuledger_e2e::citus().unwrap().is_some()
        && sqlstate(err).as_deref() == Some("0A000")
        && err.to_string().contains("modifying the partition value of rows is not allowed")
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
            matches!(sqlstate(&moved).as_deref(), Some("42501") | Some("23503")) || citus_refuses_moving_a_row(&moved),
            "{table}: unexpected error {moved}"
        );
        tx.rollback().await.unwrap();

        // INSERT a copy of A's own row labelled as B's: refused. (Generated columns are left to PostgreSQL.)
        let mut tx = db.begin_org(a).await.unwrap();
        let cols: String = sqlx::query_scalar(
            "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
              WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated = ''",
        )
        .bind(format!("public.{table}"))
        .fetch_one(tx.conn())
        .await
        .unwrap();
        let inserted = sqlx::query(&format!(
            "INSERT INTO {table} ({cols}) SELECT {cols} FROM (SELECT (jsonb_populate_record(NULL::{table},
                 to_jsonb(t) || jsonb_build_object('org_id', $1::uuid))).* FROM {table} t LIMIT 1) r"
        ))
        .bind(b.as_uuid())
        .execute(tx.conn())
        .await
        .expect_err("inserting a row for another organization must fail");
        assert!(
            sqlstate(&inserted).as_deref() == Some("42501") || citus_refuses_copying_under_rls(&inserted),
            "{table}: {inserted}"
        );
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
    set_local(&mut tx, "app.org_id", "").await;
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
        set_local(&mut tx, "app.org_id", &a.as_uuid().to_string()).await;
        set_local(&mut tx, "app.dept_scope", "all").await;
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM departments").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(n, 1, "inside the transaction A's row is visible");
        tx.rollback().await.unwrap();
    }
    let pid_after: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&app).await.unwrap();
    assert_eq!(pid_before, pid_after, "the test must reuse the same session");
    for name in ["app.org_id", "app.dept_scope"] {
        let setting: Option<String> =
            sqlx::query_scalar("SELECT current_setting($1, true)").bind(name).fetch_one(&app).await.unwrap();
        assert!(setting.as_deref().unwrap_or("").is_empty(), "{name} leaked: {setting:?}");
    }
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
    // The evidence index is written once, at its final ranks, by the close (migration 38).
    for table in ["allocation_events", "audit_log", "evidence_allocations", "evidence_orders", "period_bundle_chunks"] {
        let update = match table {
            "evidence_allocations" => "UPDATE evidence_allocations SET start_rank = start_rank".to_string(),
            _ => format!("UPDATE {table} SET org_id = org_id"),
        };
        for statement in [update, format!("DELETE FROM {table}")] {
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

/// The key of a row of `table` without its organization — the primary-key columns other than `org_id` (every
/// column but `org_id` when the table has no primary key) — as a jsonb expression over the alias `t`.
async fn key_expr(admin: &sqlx::PgPool, table: &str) -> String {
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_index i
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
          WHERE i.indrelid = $1::regclass AND i.indisprimary AND a.attname <> 'org_id'
          ORDER BY a.attnum",
    )
    .bind(table)
    .fetch_all(admin)
    .await
    .unwrap();
    if columns.is_empty() {
        "(to_jsonb(t) - 'org_id')".to_string()
    } else {
        let pairs: Vec<String> = columns.iter().map(|c| format!("'{c}', t.{c}")).collect();
        format!("jsonb_build_object({})", pairs.join(", "))
    }
}

/// A transaction of the plain application role with the organization and (when given) the department scope set
/// by hand, as a handler bypassing the door would.
async fn app_tx<'c>(
    app: &'c sqlx::PgPool,
    org: OrgId,
    dept_scope: Option<&str>,
) -> sqlx::Transaction<'c, sqlx::Postgres> {
    let mut tx = app.begin().await.unwrap();
    set_local(&mut tx, "app.org_id", &org.as_uuid().to_string()).await;
    if let Some(scope) = dept_scope {
        set_local(&mut tx, "app.dept_scope", scope).await;
    }
    tx
}

/// A transaction-scoped setting as the server makes it (`Database::begin_with`): `SET LOCAL`, which Citus forwards
/// to the workers (`citus.propagate_set_commands = 'local'`) — `set_config(…, true)` is the same on PostgreSQL but
/// stays on the coordinator, so a test written with it would see nothing on Citus's shards.
async fn set_local(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, name: &str, value: &str) {
    sqlx::query(&format!("SET LOCAL {name} = '{}'", value.replace('\'', "''"))).execute(&mut **tx).await.unwrap();
}

#[tokio::test]
async fn asking_for_another_organizations_rows_by_key_as_the_app_role_returns_nothing() {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    let a = seed(&db, "org-a").await;
    let b = seed(&db, "org-b").await;
    let app = common::app_pool(&test_db, 1).await;
    let tables = tenant_tables(&admin).await;
    for table in &tables {
        let key = key_expr(&admin, table).await;
        let keys_of = |org: OrgId| {
            let sql = format!("SELECT COALESCE(jsonb_agg({key}), '[]') FROM {table} t WHERE t.org_id = $1");
            let admin = admin.clone();
            async move {
                sqlx::query_scalar::<_, serde_json::Value>(&sql).bind(org.as_uuid()).fetch_one(&admin).await.unwrap()
            }
        };
        let (b_keys, a_keys) = (keys_of(b).await, keys_of(a).await);
        let by_key = format!("SELECT t.org_id FROM {table} t WHERE {key} IN (SELECT jsonb_array_elements($1::jsonb))");
        // The superuser finds B's rows by these keys: the query itself works.
        let found: Vec<Uuid> = sqlx::query_scalar(&by_key).bind(&b_keys).fetch_all(&admin).await.unwrap();
        assert!(found.contains(&b.as_uuid()), "{table}: B's rows not found by key even by the superuser");

        let mut tx = app_tx(&app, a, Some("all")).await;
        let found: Vec<Uuid> = sqlx::query_scalar(&by_key).bind(&b_keys).fetch_all(&mut *tx).await.unwrap();
        assert!(
            found.iter().all(|o| *o == a.as_uuid()),
            "{table}: with organization A set, asking for B's keys {b_keys} returned B's rows"
        );
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {table} t WHERE t.org_id = $2 AND {key} IN (SELECT jsonb_array_elements($1::jsonb))"
        ))
        .bind(&b_keys)
        .bind(b.as_uuid())
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        assert_eq!(n, 0, "{table}: B's rows by key and organization are visible to A");
        // A's own rows are found the same way.
        let own: Vec<Uuid> = sqlx::query_scalar(&by_key).bind(&a_keys).fetch_all(&mut *tx).await.unwrap();
        assert_eq!(own.len(), a_keys.as_array().unwrap().len(), "{table}: A does not find its own rows by key");
        tx.rollback().await.unwrap();
    }
}

/// Organization A's Research department (from [`seed`]) and a Platform department with a row in every
/// department-scoped table: (research, platform, platform tenant, platform dispute).
async fn seed_platform(db: &Database, admin: &sqlx::PgPool, a: OrgId) -> (Uuid, Uuid, Uuid, Uuid) {
    let research: Uuid =
        sqlx::query_scalar("SELECT department_id FROM departments WHERE org_id = $1 AND name = 'Research'")
            .bind(a.as_uuid())
            .fetch_one(admin)
            .await
            .unwrap();
    let (platform, tenant, dispute) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let o = a.as_uuid();
    let statements: Vec<(&str, Vec<Uuid>)> = vec![
        ("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Platform')", vec![o, platform]),
        (
            "INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, 'infra')",
            vec![o, tenant, platform],
        ),
        (
            "INSERT INTO quotas (org_id, quota_id, tenant_id, gpu_class, gpus, valid_from, created_by, scope_department_id) VALUES ($1, $2, $3, 'H100-80GB', 1, '2026-01-01Z', 'test', $4)",
            vec![o, Uuid::new_v4(), tenant, platform],
        ),
        (
            "INSERT INTO quotas (org_id, quota_id, department_id, gpu_class, gpus, valid_from, created_by, scope_department_id) VALUES ($1, $2, $3, 'H100-80GB', 1, '2026-01-01Z', 'test', $3)",
            vec![o, Uuid::new_v4(), platform],
        ),
        (
            "INSERT INTO ledger_lines (org_id, period, line_no, line_id, department_id, department, tenant_id, tenant, term, gpu_class, quantity, unit, rate, amount, currency, confidence, policy_version, evidence, explanation, canonical) VALUES ($1, '2026-01-01', 2, '2026-01/borrowed/infra/H100-80GB', $2, 'Platform', $3, 'infra', 'borrowed', 'H100-80GB', 1, 'GPU-hour', 3, 3, 'USD', 'exact', 1, '', '', '')",
            vec![o, platform, tenant],
        ),
        (
            "INSERT INTO read_lines (org_id, period, line_no, department_id, department, tenant_id, tenant, term, amount, line) VALUES ($1, '2026-01-01', 2, $2, 'Platform', $3, 'infra', 'borrowed', 3, '{}')",
            vec![o, platform, tenant],
        ),
        (
            "INSERT INTO read_totals (org_id, period, department_id, department, total) VALUES ($1, '2026-01-01', $2, 'Platform', 3)",
            vec![o, platform],
        ),
        (
            "INSERT INTO read_summaries (org_id, period, kind, as_of) VALUES ($1, '2026-02-01', 'training', now())",
            vec![o],
        ),
        (
            "INSERT INTO read_summary_rows (org_id, period, kind, row_no, section, department_id, body) VALUES ($1, '2026-02-01', 'training', 1, 'workloads', $2, '{}')",
            vec![o, platform],
        ),
        (
            "INSERT INTO adjustments (org_id, adjustment_id, kind, state, tenant_id, department_id, amount, currency, corrects, reason, created_by) VALUES ($1, $2, 'credit', 'pending_approval', $3, $4, -1, 'USD', '2026-01/borrowed/infra/H100-80GB', 'test', 'test')",
            vec![o, Uuid::new_v4(), tenant, platform],
        ),
        (
            "INSERT INTO disputes (org_id, dispute_id, number, period, line_ids, reason, opened_by, department_id) VALUES ($1, $2, 2, '2026-01-01', '{2026-01/borrowed/infra/H100-80GB}', 'too high', 'test', $3)",
            vec![o, dispute, platform],
        ),
        (
            "INSERT INTO dispute_events (org_id, event_id, dispute_id, actor, action, department_id) VALUES ($1, $2, $3, 'test', 'opened', $4)",
            vec![o, Uuid::new_v4(), dispute, platform],
        ),
    ];
    let mut tx = db.begin_org(a).await.unwrap();
    for (sql, binds) in statements {
        let mut q = sqlx::query(sql);
        for b in binds {
            q = q.bind(b);
        }
        q.execute(tx.conn()).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    tx.commit().await.unwrap();
    (research, platform, tenant, dispute)
}

/// (table, condition picking exactly the Platform department's rows) for every department-scoped table.
fn platform_rows(platform: Uuid, tenant: Uuid, dispute: Uuid) -> Vec<(&'static str, String)> {
    vec![
        ("departments", format!("department_id = '{platform}'")),
        ("tenants", format!("department_id = '{platform}'")),
        ("ledger_lines", format!("department_id = '{platform}'")),
        // The read model's stored lines (issue 17): the same cut as the ledger's.
        ("read_lines", format!("department_id = '{platform}'")),
        // Its summaries: a department's rows as the lines; the organization's own rows (no department) with them.
        ("read_summary_rows", format!("department_id = '{platform}'")),
        ("read_totals", format!("department_id = '{platform}'")),
        ("adjustments", format!("department_id = '{platform}'")),
        ("disputes", format!("department_id = '{platform}'")),
        ("dispute_events", format!("dispute_id = '{dispute}'")),
        // A tenant's quota and a department's.
        ("quotas", format!("(tenant_id = '{tenant}' OR department_id = '{platform}')")),
    ]
}

#[tokio::test]
async fn a_department_scope_hides_and_protects_the_other_departments_rows() {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    let a = seed(&db, "org-a").await;
    let (research, platform, platform_tenant, platform_dispute) = seed_platform(&db, &admin, a).await;
    let app = common::app_pool(&test_db, 1).await;
    let research_scope = research.to_string();

    for (table, platform_only) in platform_rows(platform, platform_tenant, platform_dispute) {
        let rest = format!("NOT COALESCE({platform_only}, false)");
        let count = |scope: Option<String>, condition: String| {
            let app = app.clone();
            async move {
                let mut tx = app_tx(&app, a, scope.as_deref()).await;
                let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE {condition}"))
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
                n
            }
        };
        let everything = |condition: String| {
            let admin = admin.clone();
            async move {
                let n: i64 =
                    sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE org_id = $1 AND {condition}"))
                        .bind(a.as_uuid())
                        .fetch_one(&admin)
                        .await
                        .unwrap();
                n
            }
        };
        let (platform_count, rest_count) = (everything(platform_only.clone()).await, everything(rest.clone()).await);
        assert!(platform_count >= 1, "{table} WHERE {platform_only}: the seed wrote no Platform row");
        assert!(rest_count >= 1, "{table}: the seed wrote no Research row");

        // The whole organization sees the Platform rows; Research's manager sees none of them, and all of the rest.
        assert_eq!(count(Some("all".into()), platform_only.clone()).await, platform_count, "{table}: scope 'all'");
        assert_eq!(
            count(Some(research_scope.clone()), platform_only.clone()).await,
            0,
            "{table} WHERE {platform_only}: visible under the Research scope"
        );
        assert_eq!(
            count(Some(research_scope.clone()), rest.clone()).await,
            rest_count,
            "{table}: Research's own rows must stay visible under the Research scope"
        );
        // A scope naming both departments sees both.
        assert_eq!(
            count(Some(format!("{research},{platform}")), platform_only.clone()).await,
            platform_count,
            "{table}: a scope listing Platform"
        );
    }

    // Writing a Platform row under the Research scope is refused; the same write for Research is accepted.
    let o = a.as_uuid();
    let refused: Vec<(&str, Vec<Uuid>)> = vec![
        ("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Sneaky')", vec![o, Uuid::new_v4()]),
        (
            "INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, 'sneaky')",
            vec![o, Uuid::new_v4(), platform],
        ),
        (
            "INSERT INTO quotas (org_id, quota_id, tenant_id, gpu_class, gpus, valid_from, created_by, scope_department_id) VALUES ($1, $2, $3, 'H100-80GB', 1, '2030-01-01Z', 'test', $4)",
            vec![o, Uuid::new_v4(), platform_tenant, platform],
        ),
        (
            "INSERT INTO quotas (org_id, quota_id, department_id, gpu_class, gpus, valid_from, created_by, scope_department_id) VALUES ($1, $2, $3, 'H100-80GB', 1, '2030-01-01Z', 'test', $3)",
            vec![o, Uuid::new_v4(), platform],
        ),
        (
            "INSERT INTO ledger_lines (org_id, period, line_no, line_id, department_id, department, tenant_id, tenant, term, gpu_class, quantity, unit, rate, amount, currency, confidence, policy_version, evidence, explanation, canonical) VALUES ($1, '2026-01-01', 3, '2026-01/guaranteed/infra/H100-80GB', $2, 'Platform', $3, 'infra', 'guaranteed', 'H100-80GB', 1, 'GPU-hour', 3, 3, 'USD', 'exact', 1, '', '', '')",
            vec![o, platform, platform_tenant],
        ),
        (
            "INSERT INTO adjustments (org_id, adjustment_id, kind, state, tenant_id, department_id, amount, currency, corrects, reason, created_by) VALUES ($1, $2, 'credit', 'pending_approval', $3, $4, -1, 'USD', 'x', 'test', 'test')",
            vec![o, Uuid::new_v4(), platform_tenant, platform],
        ),
        (
            "INSERT INTO disputes (org_id, dispute_id, number, period, line_ids, reason, opened_by, department_id) VALUES ($1, $2, 3, '2026-01-01', '{x}', 'r', 'test', $3)",
            vec![o, Uuid::new_v4(), platform],
        ),
        (
            "INSERT INTO dispute_events (org_id, event_id, dispute_id, actor, action, department_id) VALUES ($1, $2, $3, 'test', 'commented', $4)",
            vec![o, Uuid::new_v4(), platform_dispute, platform],
        ),
        // Moving one of Research's own rows into Platform.
        ("UPDATE tenants SET department_id = $2 WHERE org_id = $1", vec![o, platform]),
        ("UPDATE adjustments SET department_id = $2 WHERE org_id = $1", vec![o, platform]),
    ];
    for (sql, binds) in refused {
        let mut tx = app_tx(&app, a, Some(&research_scope)).await;
        let mut q = sqlx::query(sql);
        for b in binds {
            q = q.bind(b);
        }
        let err = q.execute(&mut *tx).await.expect_err(sql);
        assert_eq!(sqlstate(&err).as_deref(), Some("42501"), "{sql}: {err}");
    }
    // Changing or deleting the invisible Platform rows touches nothing.
    for sql in [
        "UPDATE tenants SET name = 'renamed' WHERE tenant_id = $1",
        "DELETE FROM quotas WHERE tenant_id = $1",
        "UPDATE disputes SET reason = 'changed' WHERE department_id = $1 OR dispute_id = $1",
    ] {
        let id = if sql.contains("dispute") { platform_dispute } else { platform_tenant };
        let mut tx = app_tx(&app, a, Some(&research_scope)).await;
        let done = sqlx::query(sql).bind(id).execute(&mut *tx).await.unwrap();
        assert_eq!(done.rows_affected(), 0, "{sql}");
    }
    // The control: a Research tenant may be written under the Research scope.
    let mut tx = app_tx(&app, a, Some(&research_scope)).await;
    sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, 'fine')")
        .bind(o)
        .bind(Uuid::new_v4())
        .bind(research)
        .execute(&mut *tx)
        .await
        .expect("a Research tenant under the Research scope");
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn a_department_scope_that_is_unset_empty_or_malformed_shows_no_departments_rows() {
    let (test_db, db) = common::migrated().await;
    let admin = common::admin_pool(&test_db).await;
    let a = seed(&db, "org-a").await;
    let (research, platform, ..) = seed_platform(&db, &admin, a).await;
    let app = common::app_pool(&test_db, 1).await;
    let scoped = ["departments", "tenants", "ledger_lines", "adjustments", "disputes", "dispute_events", "quotas"];
    let research_text = research.to_string();
    let scopes: Vec<Option<String>> = vec![
        None,
        Some(String::new()),
        Some("garbage".into()),
        Some("ALL".into()),
        Some(" all".into()),
        Some("all,".into()),
        Some("*".into()),
        Some(format!("{research},")),
        Some(format!(",{research}")),
        Some(format!("{research};{platform}")),
        Some(format!("{research}, {platform}")),
        Some(format!("{research}' OR true --")),
        Some(research_text.to_uppercase()),
        Some("-".repeat(36)),
    ];
    for scope in &scopes {
        for table in scoped {
            let mut tx = app_tx(&app, a, scope.as_deref()).await;
            match sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {table}")).fetch_one(&mut *tx).await {
                Ok(n) => assert_eq!(n, 0, "{table}: rows visible with app.dept_scope = {scope:?}"),
                // A value shaped like a list of ids but not one (36 dashes) fails the cast: closed as well.
                Err(e) => assert_eq!(sqlstate(&e).as_deref(), Some("22P02"), "{table}, {scope:?}: {e}"),
            }
        }
        // The organization is still set: tables without departments show A's rows.
        let mut tx = app_tx(&app, a, scope.as_deref()).await;
        let clusters: i64 = sqlx::query_scalar("SELECT count(*) FROM clusters").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(clusters, 1, "clusters under app.dept_scope = {scope:?}");
        let err = sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'x')")
            .bind(a.as_uuid())
            .bind(Uuid::new_v4())
            .execute(&mut *tx)
            .await
            .expect_err("insert under a malformed scope");
        assert!(matches!(sqlstate(&err).as_deref(), Some("42501") | Some("22P02")), "{scope:?}: {err}");
    }
    // The control: the same queries with a well-formed scope show that department's rows.
    for (scope, expected) in [("all", 2), (research_text.as_str(), 1)] {
        let mut tx = app_tx(&app, a, Some(scope)).await;
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM departments").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(n, expected, "departments under {scope}");
    }
}
