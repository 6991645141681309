//! `migrate` and `serve` against an outside PostgreSQL named by DATABASE_URL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{process::Command, time::Duration};

use gpuledger_e2e::{
    allow_app_login, fresh_database,
    process::{ServerProcess, binary, http_get, temp_dir},
    with_cluster_lock,
};

fn migrate(url: &str) -> std::process::Output {
    Command::new(binary("gpuledger-server").unwrap()).arg("migrate").env("DATABASE_URL", url).output().unwrap()
}

#[tokio::test]
async fn migrate_is_idempotent_and_serve_runs_as_the_app_role() {
    let db = fresh_database().await.unwrap();
    let dir = temp_dir("gl-e2e-url").unwrap();

    let out = with_cluster_lock(async { Ok(migrate(&db.admin_url)) }).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = with_cluster_lock(async { Ok(migrate(&db.admin_url)) }).await.unwrap();
    assert!(out.status.success(), "second migrate: {}", String::from_utf8_lossy(&out.stderr));
    allow_app_login(&db).await.unwrap();

    let mut server =
        ServerProcess::start(&["serve"], &[("DATABASE_URL", Some(&db.app_url))], None, &dir.join("serve.log")).unwrap();
    server.wait_ready(Duration::from_secs(60)).unwrap();
    let (status, login) = http_get(&format!("{}/login", server.base)).unwrap();
    assert_eq!(status, 200);
    assert!(login.contains(r#"name="org""#), "no featured organization: the login page asks for one: {login}");
    assert!(server.stop("TERM", Duration::from_secs(30)).unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn serve_reports_not_ready_until_migrated() {
    let db = fresh_database().await.unwrap();
    let other = fresh_database().await.unwrap();
    // Make sure the roles exist (they are cluster-wide) by migrating another database.
    let out = with_cluster_lock(async { Ok(migrate(&other.admin_url)) }).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    allow_app_login(&db).await.unwrap();
    let dir = temp_dir("gl-e2e-unmigrated").unwrap();
    let mut server =
        ServerProcess::start(&["serve"], &[("DATABASE_URL", Some(&db.app_url))], None, &dir.join("serve.log")).unwrap();
    // It starts (liveness) but is not ready, and says why.
    let mut live = false;
    for _ in 0..120 {
        if let Ok((200, _)) = http_get(&format!("{}/healthz", server.base)) {
            live = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(live, "{}", server.log_text());
    let (status, body) = http_get(&format!("{}/readyz", server.base)).unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("migrate"), "{body}");
    assert!(server.stop("INT", Duration::from_secs(30)).unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `serve` refuses a DATABASE_URL that logs in as a superuser (it would bypass row-level security) unless
/// `--allow-superuser-database-url` says this is development; `demo` needs no flag.
#[tokio::test]
async fn serve_refuses_a_superuser_url_unless_explicitly_allowed() {
    let db = fresh_database().await.unwrap();
    let dir = temp_dir("gl-e2e-superuser").unwrap();
    let env = [("DATABASE_URL", Some(db.admin_url.as_str())), ("GPULEDGER_ALLOW_SUPERUSER_DATABASE_URL", None)];
    let mut refused = ServerProcess::start(&["serve"], &env, None, &dir.join("refused.log")).unwrap();
    let status = refused.wait_exit(Duration::from_secs(60)).unwrap();
    assert!(!status.success(), "{}", refused.log_text());
    assert!(refused.log_text().contains("--allow-superuser-database-url"), "{}", refused.log_text());
    let mut allowed =
        ServerProcess::start(&["serve", "--allow-superuser-database-url"], &env, None, &dir.join("allowed.log"))
            .unwrap();
    allowed.wait_ready(Duration::from_secs(60)).unwrap();
    assert!(allowed.stop("TERM", Duration::from_secs(30)).unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}
