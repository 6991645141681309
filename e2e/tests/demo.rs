//! The README's first command, end to end: `gpuledger-server demo` on its embedded default database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use gpuledger_e2e::process::{ServerProcess, http_get, processes_mentioning, temp_dir};

const NO_DB_URL: (&str, Option<&str>) = ("DATABASE_URL", None);

#[test]
fn demo_starts_serves_stops_cleanly_and_reuses_its_data() {
    let dir = temp_dir("gl-e2e-demo").unwrap();
    let data = dir.join("data");
    let pgdata = data.join("pg").display().to_string();

    // First run: creates the cluster, migrates, seeds, serves.
    let mut server = ServerProcess::start(&["demo"], &[NO_DB_URL], Some(&data), &dir.join("run1.log")).unwrap();
    server.wait_ready(Duration::from_secs(180)).unwrap();
    let (status, body) = http_get(&format!("{}/healthz", server.base)).unwrap();
    assert_eq!((status, body.contains("ok")), (200, true), "{body}");
    let (status, home) = http_get(&format!("{}/", server.base)).unwrap();
    assert_eq!(status, 200);
    assert!(home.contains("Demo Corp (sample data)"), "{home}");
    assert!(!processes_mentioning(&pgdata).is_empty(), "the embedded PostgreSQL should be running");
    assert!(server.log_text().contains("embedded PostgreSQL cluster created"));
    let credentials = std::fs::read_to_string(data.join("credentials.json")).unwrap();

    // Ctrl-C stops the server and its PostgreSQL.
    let status = server.stop("INT", Duration::from_secs(30)).unwrap();
    assert!(status.success(), "exit status {status}: {}", server.log_text());
    assert!(processes_mentioning(&pgdata).is_empty(), "PostgreSQL still running after the demo stopped");
    assert!(server.log_text().contains("embedded PostgreSQL stopped"));

    // Second run: same data, no new cluster, same organization; SIGTERM stops it too.
    let mut again = ServerProcess::start(&["demo"], &[NO_DB_URL], Some(&data), &dir.join("run2.log")).unwrap();
    again.wait_ready(Duration::from_secs(120)).unwrap();
    assert!(!again.log_text().contains("cluster created"), "{}", again.log_text());
    assert_eq!(std::fs::read_to_string(data.join("credentials.json")).unwrap(), credentials);
    let (_, home_again) = http_get(&format!("{}/", again.base)).unwrap();
    assert!(home_again.contains(r#"<th scope="row">Tenants</th><td class="num">4</td>"#), "{home_again}");
    let status = again.stop("TERM", Duration::from_secs(30)).unwrap();
    assert!(status.success(), "exit status {status}");
    assert!(processes_mentioning(&pgdata).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_recovers_after_being_killed() {
    let dir = temp_dir("gl-e2e-kill").unwrap();
    let data = dir.join("data");
    let mut server = ServerProcess::start(&["demo"], &[NO_DB_URL], Some(&data), &dir.join("run1.log")).unwrap();
    server.wait_ready(Duration::from_secs(180)).unwrap();
    // kill -9 leaves PostgreSQL running, orphaned; the next start must take over.
    server.stop("KILL", Duration::from_secs(10)).unwrap();
    let mut next = ServerProcess::start(&["demo"], &[NO_DB_URL], Some(&data), &dir.join("run2.log")).unwrap();
    next.wait_ready(Duration::from_secs(120)).unwrap();
    assert!(next.log_text().contains("left running"), "{}", next.log_text());
    assert!(next.stop("INT", Duration::from_secs(30)).unwrap().success());
    assert!(processes_mentioning(&data.join("pg").display().to_string()).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_postgresql_binaries_the_demo_says_what_to_install() {
    let dir = temp_dir("gl-e2e-nobin").unwrap();
    let mut server = ServerProcess::start(
        &["demo"],
        &[NO_DB_URL, ("GPULEDGER_PG_BIN_DIR", Some("/nonexistent/postgresql/bin"))],
        Some(&dir.join("data")),
        &dir.join("run.log"),
    )
    .unwrap();
    let status = server.wait_exit(Duration::from_secs(30)).unwrap();
    assert!(!status.success());
    let log = server.log_text();
    assert!(log.contains("initdb") && log.contains("Install PostgreSQL"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
