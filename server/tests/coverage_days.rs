//! Telemetry coverage kept per GPU and day (`telemetry_coverage_days`) as GPU-hours are written, against real
//! PostgreSQL as the app role: after any sequence of batches (new hours, late windows merged into stored ones,
//! redeliveries, MIG instances, window lengths that change an hour's mean) the days hold exactly what the GPU-hours
//! sum to, and the month's coverage (UTC or another zone, whose month has partial days at its edges) equals a direct
//! sum over the month's GPU-hours.
//! Also the close's energy read from the same GPU-hours (one device per UUID, in UUID order).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use gpuledger_core::telemetry::{Triple, Window};
use gpuledger_server::{
    auth, demo,
    telemetry::store::{SeriesWindows, store_windows},
};
use time::{OffsetDateTime, macros::datetime};

/// A small deterministic generator (the test's seed is in its failure message).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn window(start_ms: i64, len_ms: i64, whole: bool, util: i64) -> Window {
    Window {
        start_ms,
        end_ms: start_ms + len_ms,
        samples: 6,
        util: Some(Triple { min: util, avg: util, max: util }),
        mem: Some(Triple { min: 100, avg: 100, max: 100 }),
        power: whole.then_some(Triple { min: 2_000, avg: 2_000, max: 2_000 }),
        energy_j: whole.then_some(12_000),
        pod: None,
    }
}

/// Additive sums per (series, day, mean window length), then what only grows per (series, day): the days against
/// the GPU-hours.
const DAYS_ADDITIVE: &str =
    "SELECT series_id, day, len_s, hours, device_hours, windows, gpu_ms, block_bytes, inst_bytes
                               FROM telemetry_coverage_days WHERE hours <> 0 ORDER BY 1, 2, 3";
const HOURS_ADDITIVE: &str = "SELECT series_id, (hour AT TIME ZONE 'UTC')::date,
           ((sampled_ms::bigint + inst_sampled_ms) / (windows + inst_windows) / 1000)::int, count(*)::int,
           sum((windows > 0)::int + bit_count(instances::bit(64)))::int, sum(windows + inst_windows)::bigint,
           sum(sampled_ms)::bigint, coalesce(sum(octet_length(block)), 0)::bigint,
           coalesce(sum(octet_length(inst_sums)), 0)::bigint
      FROM telemetry_gpu_hours GROUP BY 1, 2, 3 ORDER BY 1, 2, 3";
const DAYS_GROWING: &str = "SELECT series_id, day, bit_or(instances), max(last_hour), bool_or(own)
                              FROM telemetry_coverage_days GROUP BY 1, 2 ORDER BY 1, 2";
const HOURS_GROWING: &str = "SELECT series_id, (hour AT TIME ZONE 'UTC')::date, bit_or(instances), max(hour),
                                    bool_or(windows > 0)
                               FROM telemetry_gpu_hours GROUP BY 1, 2 ORDER BY 1, 2";

type Additive = (i64, time::Date, i32, i32, i32, i64, i64, i64, i64);
type Growing = (i64, time::Date, i64, OffsetDateTime, bool);

async fn assert_days_exact(admin: &sqlx::PgPool, context: &str) {
    let days: Vec<Additive> = sqlx::query_as(DAYS_ADDITIVE).fetch_all(admin).await.unwrap();
    let hours: Vec<Additive> = sqlx::query_as(HOURS_ADDITIVE).fetch_all(admin).await.unwrap();
    assert!(!hours.is_empty(), "{context}: no GPU-hours stored");
    assert_eq!(days, hours, "{context}: additive sums");
    let days: Vec<Growing> = sqlx::query_as(DAYS_GROWING).fetch_all(admin).await.unwrap();
    let hours: Vec<Growing> = sqlx::query_as(HOURS_GROWING).fetch_all(admin).await.unwrap();
    assert_eq!(days, hours, "{context}: masks, latest hours, own windows");
}

#[tokio::test]
async fn days_hold_what_the_gpu_hours_sum_to_and_the_month_reads_them() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let admin = common::admin_pool(&test_db).await;
    let mut tx = db.begin_org(org).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "cov-east").await.unwrap();
    tx.commit().await.unwrap();
    sqlx::query("DELETE FROM telemetry_coverage_days").execute(&admin).await.unwrap();
    sqlx::query("DELETE FROM telemetry_gpu_hours").execute(&admin).await.unwrap();

    // Hours around a month's edges (Asia/Kolkata's November starts at 18:30 UTC on 31 October).
    let base = datetime!(2026-10-31 12:00 UTC).unix_timestamp() * 1000;
    let seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut rng = Rng(seed);
    for round in 0..40 {
        let mut series = Vec::new();
        for gpu in 0..4 {
            for gi in [-1, 0, 3, 9] {
                if rng.below(3) == 0 {
                    continue;
                }
                // 30 s or 60 s windows (an hour's mean length moves when both kinds land in it), some of them
                // again (a redelivery), the hours at random within a day and a half.
                let len = if rng.below(2) == 0 { 30_000 } else { 60_000 };
                let hour = i64::try_from(rng.below(36)).unwrap();
                let n = 1 + rng.below(6);
                let windows: Vec<Window> = (0..n)
                    .map(|_| {
                        let slot = i64::try_from(rng.below(3_600_000 / len as u64)).unwrap();
                        window(base + hour * 3_600_000 + slot * len, len, gi < 0, 400)
                    })
                    .collect();
                series.push(SeriesWindows {
                    gpu_uuid: format!("GPU-cov-{gpu}"),
                    gpu_instance_id: gi,
                    node: format!("node-{}", gpu % 2),
                    mig_profile: (gi >= 0).then(|| "1g.10gb".to_string()),
                    windows,
                });
            }
        }
        let mut tx = db.begin_org(org).await.unwrap();
        store_windows(&mut tx, cluster, series).await.unwrap();
        tx.commit().await.unwrap();
        if round % 10 == 9 {
            assert_days_exact(&admin, &format!("seed {seed:#x}, round {round}")).await;
        }
    }

    // The migration's backfill (the GPU-hours stored before it) gives the same days from the GPU-hours alone: its
    // statements, from the migration file, run as the migration runs them.
    let migration = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../migrations/20261206000039_telemetry_coverage_days.sql"),
    )
    .unwrap();
    let from = migration.find("CREATE POLICY coverage_backfill").unwrap();
    let to = migration.find("RESET ROLE;").unwrap();
    sqlx::query("DELETE FROM telemetry_coverage_days").execute(&admin).await.unwrap();
    let mut conn = admin.acquire().await.unwrap();
    sqlx::raw_sql(&format!("BEGIN; SET LOCAL ROLE gpuledger_owner; {} COMMIT;", &migration[from..to]))
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    assert_days_exact(&admin, "the migration's backfill").await;

    // The month's coverage in UTC and in a zone whose month starts and ends mid-day, against the GPU-hours summed
    // directly over the month's instants.
    for zone in ["UTC", "Asia/Kolkata"] {
        sqlx::query("UPDATE org_settings SET time_zone = $1 WHERE org_id = $2")
            .bind(zone)
            .bind(org.as_uuid())
            .execute(&admin)
            .await
            .unwrap();
        let mut tx = db.begin_org(org).await.unwrap();
        let period = gpuledger_core::Period::parse("2026-11").unwrap();
        let cov =
            gpuledger_server::telemetry::coverage(&mut tx, period, datetime!(2026-11-15 00:00 UTC)).await.unwrap();
        tx.commit().await.unwrap();
        let start = OffsetDateTime::parse(&cov.starts_at, &time::format_description::well_known::Rfc3339).unwrap();
        let end = OffsetDateTime::parse(&cov.ends_at, &time::format_description::well_known::Rfc3339).unwrap();
        let expect: (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT sum(h.windows + h.inst_windows)::bigint, coalesce(sum(octet_length(h.block)), 0)::bigint,
                    count(DISTINCT h.series_id) FILTER (WHERE h.windows > 0), count(*)
               FROM telemetry_gpu_hours h JOIN telemetry_series s USING (org_id, series_id)
              WHERE h.hour >= $1 AND h.hour < $2 AND s.cluster_id = $3",
        )
        .bind(start)
        .bind(end)
        .bind(cluster.as_uuid())
        .fetch_one(&admin)
        .await
        .unwrap();
        let c = cov.clusters.iter().find(|c| c.cluster == "cov-east").unwrap();
        let got = (
            i64::try_from(c.windows).unwrap(),
            i64::try_from(c.bytes_full_resolution).unwrap(),
            i64::try_from(c.gpus).unwrap(),
        );
        assert_eq!(got, (expect.0, expect.1, expect.2), "{zone}: {c:?}");
        assert!(expect.3 > 0, "{zone}: the month has GPU-hours");
        let nodes: u64 = cov.nodes.iter().filter(|n| n.cluster == "cov-east").map(|n| n.windows).sum();
        assert_eq!(nodes, c.windows, "{zone}: the nodes add up to their cluster");
    }

    // Retention strips October's full resolution: its days' block bytes go to 0, and they still match the hours.
    sqlx::query("UPDATE telemetry_gpu_hours SET block = NULL WHERE hour < '2026-11-01'").execute(&admin).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT gpuledger_telemetry_coverage_retention('2026-10-01', '2026-11-01', false)")
        .fetch_one(&admin)
        .await
        .unwrap();
    assert!(n > 0);
    assert_days_exact(&admin, "after the strip").await;
    // …and dropping October takes its days.
    sqlx::query("DELETE FROM telemetry_gpu_hours WHERE hour < '2026-11-01'").execute(&admin).await.unwrap();
    sqlx::query("SELECT gpuledger_telemetry_coverage_retention('2026-10-01', '2026-11-01', true)")
        .execute(&admin)
        .await
        .unwrap();
    assert_days_exact(&admin, "after the drop").await;
}

/// The close's energy read from the GPU-hours: every device once, in UUID byte order, its hours by start — also
/// when one GPU UUID reports from two clusters (two series, one device) — and the same spans as one statement
/// sorting the month's hours by UUID gives.
#[tokio::test]
async fn the_months_energy_has_each_device_once_in_uuid_order() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let admin = common::admin_pool(&test_db).await;
    sqlx::query("DELETE FROM telemetry_gpu_hours").execute(&admin).await.unwrap();
    let base = datetime!(2026-11-30 20:00 UTC).unix_timestamp() * 1000;
    // Clusters and UUIDs chosen so that neither series IDs nor clusters give the UUIDs' order.
    for (cluster, uuids) in [("en-west", ["GPU-c", "GPU-b"]), ("en-east", ["GPU-b", "GPU-a"])] {
        let mut tx = db.begin_org(org).await.unwrap();
        let (cluster, _) = auth::ensure_cluster(&mut tx, cluster).await.unwrap();
        let series = uuids
            .iter()
            .enumerate()
            .map(|(i, uuid)| SeriesWindows {
                gpu_uuid: uuid.to_string(),
                gpu_instance_id: -1,
                node: "node-0".into(),
                mig_profile: None,
                // Hours on both sides of the month's end; the two clusters' windows of GPU-b interleave.
                windows: (0..7).map(|h| window(base + h * 3_600_000 + i as i64 * 60_000, 60_000, true, 400)).collect(),
            })
            .collect();
        store_windows(&mut tx, cluster, series).await.unwrap();
        tx.commit().await.unwrap();
    }
    let (start, end) = (datetime!(2026-11-01 00:00 UTC), datetime!(2026-12-01 00:00 UTC));
    let mut tx = db.begin_org(org).await.unwrap();
    let got = gpuledger_server::telemetry::store::energy_hours(&mut tx, start, end).await.unwrap();
    tx.commit().await.unwrap();
    let names: Vec<&str> = got.iter().map(|d| d.gpu_uuid.as_str()).collect();
    assert_eq!(names, ["GPU-a", "GPU-b", "GPU-c"]);
    assert_eq!(got[1].spans.len(), 2 * got[0].spans.len(), "GPU-b's hours from both clusters");
    let rows: Vec<(String, OffsetDateTime, i32, i32, i64)> = sqlx::query_as(
        "SELECT s.gpu_uuid, h.hour, h.span_from_ms, h.span_to_ms, h.energy_j
           FROM telemetry_gpu_hours h JOIN telemetry_series s USING (org_id, series_id)
          WHERE h.energy_ms > 0 AND h.hour < $2 AND h.hour + make_interval(secs => h.span_to_ms / 1000.0) > $1
          ORDER BY s.gpu_uuid COLLATE \"C\", h.hour + make_interval(secs => h.span_from_ms / 1000.0), h.span_to_ms",
    )
    .bind(start)
    .bind(end)
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(rows.len(), got.iter().map(|d| d.spans.len()).sum::<usize>());
    let flat: Vec<(String, i64, i64, u64)> =
        got.iter().flat_map(|d| d.spans.iter().map(|s| (d.gpu_uuid.clone(), s.start_us, s.end_us, s.joules))).collect();
    let expected: Vec<(String, i64, i64, u64)> = rows
        .into_iter()
        .map(|(uuid, hour, from, to, j)| {
            let h = i64::try_from(hour.unix_timestamp_nanos() / 1_000).unwrap();
            (uuid, h + i64::from(from) * 1_000, h + i64::from(to) * 1_000, u64::try_from(j).unwrap())
        })
        .collect();
    assert_eq!(flat, expected);
}
