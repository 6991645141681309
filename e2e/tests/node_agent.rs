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
                    (SELECT coalesce(sum(h.windows), 0) / 8 FROM telemetry_gpu_hours h
                       JOIN telemetry_series s ON s.org_id = h.org_id AND s.series_id = h.series_id
                      WHERE s.node = 'gpu-node-7')::int8",
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
    // Every hour has all 8 GPUs, with samples, utilization within 0–100 % (stored in 0.1 %) and positive energy.
    let rows: Vec<(i64, i32, i16, i64)> = sqlx::query_as(
        "SELECT count(*), min(h.samples), max(h.util_max), min(h.energy_j) FROM telemetry_gpu_hours h
           JOIN telemetry_series s ON s.org_id = h.org_id AND s.series_id = h.series_id
          WHERE s.node = 'gpu-node-7' AND h.energy_ms > 0 GROUP BY h.hour HAVING count(*) = 8",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(!rows.is_empty());
    for (n, samples, util_max, energy) in rows {
        assert_eq!(n, 8);
        assert!(samples >= 1 && util_max <= 1_000 && energy > 0, "{samples} {util_max} {energy}");
    }
    let models: Vec<String> = sqlx::query_scalar("SELECT DISTINCT model FROM devices").fetch_all(&pool).await.unwrap();
    assert_eq!(models, vec!["NVIDIA H100 80GB HBM3".to_string()]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
