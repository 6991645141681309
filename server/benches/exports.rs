//! Export benchmark: a month of allocation intervals (default 1,000,000) out of the real server as CSV
//! (`/api/v1/exports/allocations.csv`) and through the OData feed (`/odata/Allocations`, following
//! `@odata.nextLink` to the end), beside PostgreSQL's own `COPY (SELECT …) TO STDOUT` of the same rows (the
//! export's SQL plan, `gpuledger_server::exports::copy_statement`, which the Rust-computed rows are tested
//! against), in the same run and database.
//!
//! ```sh
//! cargo bench -p gpuledger-server --bench exports                          # 1,000,000 rows
//! GL_BENCH_ROWS=100000 cargo bench -p gpuledger-server --bench exports     # quick run
//! ```
//!
//! PostgreSQL comes from the shared test harness (`gpuledger_e2e::cluster`): the cluster a superuser `DATABASE_URL`
//! names, else a throwaway one. The bench creates its own database (dropped at the end), migrates it, bulk-loads
//! the rows with COPY as the superuser (not timed), then starts the release server binary (`serve`, as
//! `gpuledger_app`, RLS enforced) and reads from it over HTTP with an export token. The reference COPY runs as
//! `gpuledger_app` in an organization transaction too, so both pay for row-level security.
//!
//! Measured, `GL_BENCH_RUNS` times each (default 3; best and median): wall time and rows/s; the server process's
//! CPU time (`/proc/PID/stat`); its peak resident memory during each measurement (`VmHWM`, reset through
//! `/proc/PID/clear_refs` before it) against its resident memory before. `GL_BENCH_LOAD_ONLY=1` loads the data,
//! prints the database's URL and stops (the database is kept, for `EXPLAIN`). Checks that fail the bench: the CSV and
//! the OData feed return exactly the rows COPY returns (count), and the total GPU-hours of the CSV equal
//! PostgreSQL's sum.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::mix;

use std::{
    io::Write,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use futures::StreamExt;
use gpuledger_core::Period;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

const ORG: Uuid = Uuid::from_u128(0x0be0_0000_0000_4000_8000_0000_0000_0001);
const TENANTS: usize = 500;
const DEPARTMENTS: usize = 20;
const NAMESPACES: usize = 1_400;
const CLUSTERS: [&str; 2] = ["prod-east", "prod-west"];
const PERIOD: &str = "2026-09";
const MONTH_SECONDS: u64 = 30 * 86_400;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok()).unwrap_or(default)
}

fn id(kind: u128, n: usize) -> Uuid {
    Uuid::from_u128((kind << 96) | n as u128)
}

async fn copy_rows(conn: &mut PgConnection, statement: &str, rows: impl Iterator<Item = String>) -> u64 {
    let mut copy = conn.copy_in_raw(statement).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 21);
    for r in rows {
        buf.extend_from_slice(r.as_bytes());
        buf.push(b'\n');
        if buf.len() >= 1 << 20 {
            copy.send(buf.as_slice()).await.expect("COPY data");
            buf.clear();
        }
    }
    if !buf.is_empty() {
        copy.send(buf.as_slice()).await.expect("COPY data");
    }
    copy.finish().await.unwrap_or_else(|e| panic!("{statement}: {e}"))
}

/// The organization, its tenants and namespaces, and `rows` allocation intervals inside the month.
async fn load(conn: &mut PgConnection, rows: usize) {
    let org = ORG;
    sqlx::query("INSERT INTO organizations (org_id, slug, name) VALUES ($1, 'bench', 'Export bench')")
        .bind(org)
        .execute(&mut *conn)
        .await
        .expect("organization");
    let epoch = "2026-01-01 00:00:00+00";
    copy_rows(
        conn,
        "COPY clusters (org_id, cluster_id, name) FROM STDIN",
        CLUSTERS.iter().enumerate().map(|(c, name)| format!("{org}\t{}\t{name}", id(1, c))),
    )
    .await;
    copy_rows(
        conn,
        "COPY departments (org_id, department_id, name, created_at) FROM STDIN",
        (0..DEPARTMENTS).map(|d| format!("{org}\t{}\tdept-{d:02}\t{epoch}", id(2, d))),
    )
    .await;
    copy_rows(
        conn,
        "COPY tenants (org_id, tenant_id, department_id, name, created_at) FROM STDIN",
        (0..TENANTS).map(|t| format!("{org}\t{}\t{}\tteam-{t:03}\t{epoch}", id(3, t), id(2, t % DEPARTMENTS))),
    )
    .await;
    copy_rows(
        conn,
        "COPY gpu_classes (org_id, gpu_class) FROM STDIN",
        ["H100", "A100"].iter().map(|c| format!("{org}\t{c}")),
    )
    .await;
    copy_rows(
        conn,
        "COPY gpu_models (org_id, model, valid_from, gpu_class) FROM STDIN",
        [("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A100-SXM4-40GB", "A100")]
            .iter()
            .map(|(m, c)| format!("{org}\t{m}\t{epoch}\t{c}")),
    )
    .await;
    copy_rows(
        conn,
        "COPY namespaces (org_id, namespace_uid, cluster_id, name, created_at) FROM STDIN",
        (0..NAMESPACES).map(|n| format!("{org}\t{}\t{}\tns-{n:04}\t{epoch}", id(4, n), id(1, n % CLUSTERS.len()))),
    )
    .await;
    copy_rows(
        conn,
        "COPY namespace_ownership (org_id, namespace_uid, valid_from, tenant_id) FROM STDIN",
        (0..NAMESPACES).map(|n| format!("{org}\t{}\t{epoch}\t{}", id(4, n), id(3, n % TENANTS))),
    )
    .await;
    let start = 1_788_220_800u64; // 2026-09-01T00:00:00Z
    let loaded = copy_rows(
        conn,
        "COPY allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name, namespace,
             namespace_uid, container, node, resource, units, device_ids, gpu_model, gpu_class, sharing_mode,
             fraction_num, fraction_den, started_at, ended_at, confidence) FROM STDIN",
        (0..rows).map(|i| {
            let r = mix(i as u64);
            let n = (r % NAMESPACES as u64) as usize;
            let units = 1 + (r >> 20) % 4;
            let begin = start + (r >> 24) % (MONTH_SECONDS - 86_400);
            let end = begin + 60 + (r >> 40) % 86_000;
            let (model, class) = if r & 1 == 0 { ("NVIDIA H100 80GB HBM3", "H100") } else { ("NVIDIA A100-SXM4-40GB", "A100") };
            let devices: Vec<String> = (0..units).map(|d| format!("GPU-{:08x}-{d}", r >> 32)).collect();
            format!(
                "{org}\t{}\tpod-{i}/main/nvidia.com/gpu\tpod\t{}\ttrainer-{i}\tns-{n:04}\t{}\tmain\tnode-{:04}\tnvidia.com/gpu\t{units}\t{{{}}}\t{model}\t{class}\texclusive\t{units}\t1\t{}\t{}\texact",
                id(1, n % CLUSTERS.len()),
                id(5, i),
                id(4, n),
                (r >> 8) % 1250,
                devices.join(","),
                time::OffsetDateTime::from_unix_timestamp(begin as i64).unwrap(),
                time::OffsetDateTime::from_unix_timestamp(end as i64).unwrap(),
            )
        }),
    )
    .await;
    assert_eq!(loaded as usize, rows);
}

// ---------------------------------------------------------------- measuring

fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resets the process's `VmHWM` to its current RSS.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// User + system CPU seconds of a process.
fn cpu_s(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = s.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let tick = 100.0; // USER_HZ
    let get = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (get(11) + get(12)) / tick
}

#[derive(Default, Clone, Copy)]
struct Sample {
    wall_s: f64,
    rows: u64,
    bytes: u64,
    server_cpu_s: f64,
    rss_before_kib: u64,
    peak_kib: u64,
    pages: u64,
}

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn measure<F, Fut>(server: &Server, f: F) -> Sample
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = (u64, u64, u64)>,
{
    let pid = server.child.id();
    let rss_before = status_kib(pid, "VmRSS:");
    assert!(reset_peak(pid), "cannot reset the server's peak memory (/proc/{pid}/clear_refs)");
    let cpu0 = cpu_s(pid);
    let t = Instant::now();
    let (rows, bytes, pages) = f().await;
    let wall_s = t.elapsed().as_secs_f64();
    Sample {
        wall_s,
        rows,
        bytes,
        server_cpu_s: cpu_s(pid) - cpu0,
        rss_before_kib: rss_before,
        peak_kib: status_kib(pid, "VmHWM:"),
        pages,
    }
}

/// `COPY (the export's SELECT) TO STDOUT` as `gpuledger_app` in an organization transaction: (rows, bytes).
async fn copy_out(app_url: &str, statement: &str) -> (u64, u64, u64) {
    let mut conn = PgConnection::connect(app_url).await.expect("connect as the app role");
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("SELECT set_config('app.org_id', $1, true), set_config('app.dept_scope', 'all', true)")
        .bind(ORG.to_string())
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SET LOCAL TimeZone = 'UTC'").execute(&mut *tx).await.unwrap();
    sqlx::query("SET LOCAL jit = off").execute(&mut *tx).await.unwrap();
    let (mut lines, mut bytes) = (0u64, 0u64);
    {
        let mut stream = tx.copy_out_raw(statement).await.expect("COPY");
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.expect("COPY data");
            bytes += chunk.len() as u64;
            lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        }
    }
    tx.commit().await.unwrap();
    (lines - 1, bytes, 0)
}

/// The CSV export over HTTP: (rows, bytes). With `sum`, also the total of the `gpu_hours` column in millionths.
async fn csv(http: &reqwest::Client, base: &str, token: &str, sum: Option<&mut i128>) -> (u64, u64, u64) {
    let r = http
        .get(format!("{base}/api/v1/exports/allocations.csv?period={PERIOD}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "allocations.csv");
    let (mut lines, mut bytes) = (0u64, 0u64);
    let mut r = r;
    let mut text = sum.is_some().then(Vec::<u8>::new);
    while let Some(chunk) = r.chunk().await.expect("body") {
        bytes += chunk.len() as u64;
        lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        if let Some(t) = text.as_mut() {
            t.extend_from_slice(&chunk);
        }
    }
    if let (Some(total), Some(text)) = (sum, text) {
        let text = String::from_utf8(text).unwrap();
        let mut rows = text.split("\r\n");
        let header: Vec<&str> = rows.next().unwrap().split(',').collect();
        let col = header.iter().position(|h| *h == "gpu_hours").unwrap();
        for row in rows.filter(|r| !r.is_empty()) {
            let cell = row.split(',').nth(col).unwrap();
            let (int, frac) = cell.split_once('.').unwrap_or((cell, "0"));
            *total += int.parse::<i128>().unwrap() * 1_000_000 + format!("{frac:0<6}").parse::<i128>().unwrap();
        }
    }
    (lines - 1, bytes, 0)
}

/// The OData feed, following `@odata.nextLink` to the end: (rows, bytes, pages).
async fn odata(http: &reqwest::Client, base: &str, token: &str) -> (u64, u64, u64) {
    let mut next = Some(format!("{base}/odata/Allocations?$filter=Period%20eq%20'{PERIOD}'"));
    let (mut rows, mut bytes, mut pages) = (0u64, 0u64, 0u64);
    let marker = b"\"Period\":";
    let link = "\"@odata.nextLink\":\"";
    while let Some(url) = next.take() {
        let r = http.get(&url).basic_auth("powerbi", Some(token)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        let body = r.bytes().await.unwrap();
        if pages == 0 {
            let v: serde_json::Value = serde_json::from_slice(&body).expect("the first page is JSON");
            assert!(v["value"].is_array());
        }
        pages += 1;
        bytes += body.len() as u64;
        // entities: each starts with `{"Period":` (found from the `{` bytes: a cheap scan, the bench shares the CPUs)
        rows +=
            body.iter().enumerate().filter(|(i, b)| **b == b'{' && body[i + 1..].starts_with(marker)).count() as u64;
        let text = std::str::from_utf8(&body[body.len().saturating_sub(4096)..]).unwrap_or_default();
        next = text.rfind(link).map(|i| {
            let rest = &text[i + link.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        });
    }
    (rows, bytes, pages)
}

fn best_median(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (s[0], s[s.len() / 2])
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let rows = env_usize("GL_BENCH_ROWS", 1_000_000);
    let runs = env_usize("GL_BENCH_RUNS", 3).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let t0 = Instant::now();
        let test_db = gpuledger_e2e::fresh_database().await.expect("database");
        gpuledger_e2e::with_cluster_lock(async { Ok(gpuledger_server::db::migrate(&test_db.admin_url).await?) })
            .await
            .expect("migrate");
        gpuledger_e2e::allow_app_login(&test_db).await.expect("app login");
        let mut admin = PgConnection::connect(&test_db.admin_url).await.expect("connect");
        load(&mut admin, rows).await;
        sqlx::query("VACUUM ANALYZE").execute(&mut admin).await.expect("vacuum analyze");
        let mut settings = Vec::new();
        for name in ["server_version", "shared_buffers", "work_mem", "max_parallel_workers_per_gather"] {
            let v: String = sqlx::query_scalar(&format!("SHOW {name}")).fetch_one(&mut admin).await.unwrap();
            settings.push(format!("{name}={v}"));
        }
        let expected_micro: String = sqlx::query_scalar(
            "SELECT sum(round(fraction_num::numeric * extract(epoch FROM ended_at - started_at) / (fraction_den * 3600), 6)
                        * 1000000)::bigint::text FROM allocation_intervals",
        )
        .fetch_one(&mut admin)
        .await
        .unwrap();
        eprintln!("loaded {rows} allocation intervals in {:.1} s ({})", t0.elapsed().as_secs_f64(), settings.join(", "));
        if std::env::var_os("GL_BENCH_LOAD_ONLY").is_some() {
            // For looking at plans by hand; drop the database when done.
            println!("loaded, kept: {} (organization {ORG})", test_db.app_url);
            return;
        }

        // The server, as gpuledger_app, and an export token.
        let exe = env!("CARGO_BIN_EXE_gpuledger-server");
        let out = Command::new(exe)
            .args(["token", "create", "--org", "bench", "--scope", "export"])
            .env("DATABASE_URL", &test_db.admin_url)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let port = free_port();
        let child = Command::new(exe)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .env("DATABASE_URL", &test_db.app_url)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let server = Server { child, base: format!("http://127.0.0.1:{port}") };
        let http = reqwest::Client::builder().timeout(Duration::from_secs(3600)).build().unwrap();
        let ready = Instant::now();
        loop {
            if let Ok(r) = http.get(format!("{}/readyz", server.base)).send().await
                && r.status() == 200
            {
                break;
            }
            assert!(ready.elapsed() < Duration::from_secs(60), "the server did not get ready");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // Correctness first: the three give the same rows, and the CSV's GPU-hours are PostgreSQL's.
        let statement =
            gpuledger_server::exports::copy_statement("Allocations", Period::parse(PERIOD).unwrap()).unwrap();
        if std::env::var_os("GL_BENCH_EXPLAIN").is_some() {
            let select = statement.trim_start_matches("COPY (").split(") TO STDOUT").next().unwrap().to_string();
            let mut conn = PgConnection::connect(&test_db.app_url).await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            sqlx::query("SELECT set_config('app.org_id', $1, true), set_config('app.dept_scope', 'all', true)")
                .bind(ORG.to_string())
                .execute(&mut *tx)
                .await
                .unwrap();
            sqlx::query("SET LOCAL TimeZone = 'UTC'").execute(&mut *tx).await.unwrap();
            let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN (ANALYZE, BUFFERS) {select}"))
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            eprintln!("{}", plan.join("\n"));
        }
        let (copy_rows_n, _, _) = copy_out(&test_db.app_url, &statement).await;
        let mut total: i128 = 0;
        let (csv_rows, _, _) = csv(&http, &server.base, &token, Some(&mut total)).await;
        let (odata_rows, _, _) = odata(&http, &server.base, &token).await;
        assert_eq!(copy_rows_n as usize, rows, "COPY rows");
        assert_eq!(csv_rows, copy_rows_n, "CSV rows");
        assert_eq!(odata_rows, copy_rows_n, "OData rows");
        assert_eq!(total.to_string(), expected_micro, "GPU-hours of the CSV (millionths) against PostgreSQL's sum");
        eprintln!("checked: {rows} rows from COPY, the CSV and OData; CSV GPU-hours equal PostgreSQL's sum");

        let mut results: Vec<(&str, Vec<Sample>)> = vec![("copy", vec![]), ("csv", vec![]), ("odata", vec![])];
        for run in 0..runs {
            let s = measure(&server, || copy_out(&test_db.app_url, &statement)).await;
            results[0].1.push(s);
            let s = measure(&server, || csv(&http, &server.base, &token, None)).await;
            results[1].1.push(s);
            let s = measure(&server, || odata(&http, &server.base, &token)).await;
            results[2].1.push(s);
            eprintln!(
                "run {}: COPY {:.2} s, CSV {:.2} s, OData {:.2} s",
                run + 1,
                results[0].1[run].wall_s,
                results[1].1[run].wall_s,
                results[2].1[run].wall_s
            );
        }
        let (copy_best, copy_median) = best_median(&results[0].1.iter().map(|s| s.wall_s).collect::<Vec<_>>());
        let mut out = std::io::stdout().lock();
        writeln!(out, "\n{rows} allocation rows of {PERIOD}, {runs} runs; {}", settings.join(", ")).unwrap();
        writeln!(
            out,
            "| path | wall best s | wall median s | rows/s (best) | ÷ COPY rate (best) | server CPU s (best run) | MB out | server RSS before MiB | server peak MiB | pages |"
        )
        .unwrap();
        writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|").unwrap();
        for (name, samples) in &results {
            let walls: Vec<f64> = samples.iter().map(|s| s.wall_s).collect();
            let (best, median) = best_median(&walls);
            let b = samples.iter().find(|s| s.wall_s == best).copied().unwrap_or_default();
            let rate = b.rows as f64 / best;
            let peak = samples.iter().map(|s| s.peak_kib).max().unwrap_or(0);
            writeln!(
                out,
                "| {name} | {best:.2} | {median:.2} | {:.0} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {} |",
                rate,
                copy_best / best,
                b.server_cpu_s,
                b.bytes as f64 / 1e6,
                mib(b.rss_before_kib),
                mib(peak),
                b.pages
            )
            .unwrap();
        }
        writeln!(out, "COPY median {copy_median:.2} s. Server peak is VmHWM during the measurement (reset before it).")
            .unwrap();
        let csv_rate = rows as f64 / best_median(&results[1].1.iter().map(|s| s.wall_s).collect::<Vec<_>>()).0;
        let csv_ratio = copy_best / best_median(&results[1].1.iter().map(|s| s.wall_s).collect::<Vec<_>>()).0;
        writeln!(
            out,
            "targets: CSV ≥ 100,000 rows/s: {} ({csv_rate:.0}); CSV ≥ 0.5 × COPY rate: {} ({csv_ratio:.2})",
            if csv_rate >= 100_000.0 { "met" } else { "NOT met" },
            if csv_ratio >= 0.5 { "met" } else { "NOT met" }
        )
        .unwrap();
        drop(server);
        admin.close().await.ok();
        if let Ok(cluster) = gpuledger_e2e::cluster() {
            let mut conn = PgConnection::connect(&cluster.url("postgres")).await.expect("connect");
            let _ = sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", test_db.name)).execute(&mut conn).await;
            let _ = conn.close().await;
        }
    });
}
