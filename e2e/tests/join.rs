//! `gpuledger-agent join`: a one-time join token is exchanged for the cluster's credential, once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{os::unix::fs::PermissionsExt, process::Command};

use gpuledger_e2e::{
    fresh_database,
    process::{binary, create_token, start_demo, temp_dir},
};

fn join(base: &str, token: &str, output: &std::path::Path) -> std::process::Output {
    Command::new(binary("gpuledger-agent").unwrap())
        .args(["join", "--server", base, "--token", token])
        .arg("--output")
        .arg(output)
        .output()
        .unwrap()
}

// Multi-threaded: the stand-in API server runs on this runtime while the test waits on a child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_token_works_once_and_yields_a_working_credential() {
    let dir = temp_dir("gl-e2e-join").unwrap();
    let db = fresh_database().await.unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let join_token = create_token(&db.admin_url, "join:east-1").unwrap();

    let credential_path = dir.join("credential");
    let out = join(&server.base, &join_token, &credential_path);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let credential = std::fs::read_to_string(&credential_path).unwrap();
    assert!(credential.starts_with("glt_") && credential != join_token);
    assert_eq!(std::fs::metadata(&credential_path).unwrap().permissions().mode() & 0o777, 0o600);

    // Single use.
    let again = join(&server.base, &join_token, &dir.join("again"));
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("refused the join token"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // The credential writes facts for cluster east-1; the join token cannot.
    let batch = r#"{"wire_version":1,"agent":{"version":"t","mode":"cluster"},"cluster":"east-1","facts":[]}"#;
    let post = |t: &str| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H", "content-type: application/json"])
            .args(["-H", &format!("authorization: Bearer {t}"), "-d", batch])
            .arg(format!("{}/api/v1/ingest/batches", server.base))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(post(&credential), "200");
    assert_eq!(post(&join_token), "401");

    // Stored in a Kubernetes Secret instead (server-side apply), as the onboarding manifest does.
    let kube = gpuledger_e2e::fake_kube::FakeKube::start().await.unwrap();
    let second = create_token(&db.admin_url, "join:east-1").unwrap();
    let out = Command::new(binary("gpuledger-agent").unwrap())
        .args(["join", "--server", &server.base, "--token", &second, "--secret", "gpuledger/agent-credential"])
        .env("KUBECONFIG", kube.kubeconfig(&dir).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let secret = kube.stored("secrets", "gpuledger", "agent-credential").unwrap();
    let stored = secret["stringData"]["token"].as_str().unwrap();
    assert!(stored.starts_with("glt_") && stored != credential && stored != second);
    assert_eq!(secret["stringData"]["cluster"], "east-1");
    assert_eq!(post(stored), "200");

    // An expired join token is refused.
    let expired = create_token(&db.admin_url, "join:east-1").unwrap();
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    sqlx::query(
        "UPDATE api_tokens SET expires_at = now() - interval '1 minute' WHERE scope = 'join' AND revoked_at IS NULL",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert!(!join(&server.base, &expired, &dir.join("late")).status.success());
    // Every exchange is audited.
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'token.create' AND actor = 'join'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(audited, 2);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
