//! The real `node` agent on a simulated 8-GPU node (the same code path as NVML) → the real server → PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use gpuledger_e2e::{
    fresh_database,
    process::{binary, create_token, signal, start_demo, temp_dir},
};

#[tokio::test]
async fn simulated_node_delivers_inventory_and_rollups() {
    let dir = temp_dir("gl-e2e-node").unwrap();
    let db = fresh_database().await.unwrap();
    let server = start_demo(&db.admin_url, &dir.join("server.log")).unwrap();
    let token = create_token(&db.admin_url, "agent:e2e-node").unwrap();
    let log = std::fs::File::create(dir.join("node.log")).unwrap();
    let mut agent = Command::new(binary("gpuledger-agent").unwrap())
        .args(["node", "--source", "simulated", "--simulate-gpus", "8", "--node-name", "gpu-node-7"])
        .args([
            "--server",
            &server.base,
            "--token",
            &token,
            "--sample-secs",
            "1",
            "--window-secs",
            "2",
            "--poll-ms",
            "200",
        ])
        .arg("--spool-dir")
        .arg(dir.join("agent"))
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let pool = sqlx::PgPool::connect(&db.admin_url).await.unwrap();
    let started = Instant::now();
    loop {
        let (devices, windows): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM devices WHERE node = 'gpu-node-7'),
                    (SELECT count(DISTINCT window_start) FROM telemetry_rollups WHERE node = 'gpu-node-7')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if devices == 8 && windows >= 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "devices {devices}, windows {windows}\n{}",
            std::fs::read_to_string(dir.join("node.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    signal(agent.id(), "TERM").unwrap();
    let status = agent.wait().unwrap();
    assert!(status.success(), "{}", std::fs::read_to_string(dir.join("node.log")).unwrap_or_default());
    // Every window has all 8 GPUs, with samples, utilization within 0–100 and positive energy.
    let rows: Vec<(i64, i32, f32, f64)> = sqlx::query_as(
        "SELECT count(*), min(samples), max(util_max), min(energy_j) FROM telemetry_rollups
          WHERE node = 'gpu-node-7' AND energy_j IS NOT NULL GROUP BY window_start HAVING count(*) = 8",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(!rows.is_empty());
    for (n, samples, util_max, energy) in rows {
        assert_eq!(n, 8);
        assert!(samples >= 1 && util_max <= 100.0 && energy > 0.0, "{samples} {util_max} {energy}");
    }
    let models: Vec<String> = sqlx::query_scalar("SELECT DISTINCT model FROM devices").fetch_all(&pool).await.unwrap();
    assert_eq!(models, vec!["NVIDIA H100 80GB HBM3".to_string()]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
