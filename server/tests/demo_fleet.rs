//! `demo --gpus N`: a small synthetic fleet seeded into a throwaway database through the same function the CLI
//! calls — every sharing mode stored, last month closed with a hash, this month's preview priced for several
//! departments, and a second run storing nothing new.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use axum::http::StatusCode;
use gpuledger_core::Period;
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    close,
    db::Database,
    demo,
};
use time::{OffsetDateTime, macros::datetime};

/// Row counts of everything the fleet and its close write.
async fn counts(db: &Database, org: gpuledger_core::ids::OrgId) -> Vec<(String, i64)> {
    let mut tx = db.begin_org(org).await.unwrap();
    let mut out = Vec::new();
    for table in [
        "departments",
        "tenants",
        "devices",
        "nodes",
        "namespaces",
        "namespace_ownership",
        "quotas",
        "allocation_intervals",
        "telemetry_series",
        "telemetry_gpu_hours",
        "service_usage",
        "endpoint_totals",
        "cost_policies",
        "periods",
        "ledger_lines",
        "disputes",
    ] {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(tx.conn()).await.unwrap();
        out.push((table.to_string(), n));
    }
    tx.commit().await.unwrap();
    out
}

#[tokio::test]
async fn a_small_fleet_has_every_mode_a_closed_last_month_and_loads_once() {
    let (_test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let now = datetime!(2026-11-20 15:42:10 UTC);
    demo::prepare_fleet(&db, org, 40, None, now).await.unwrap();

    let mut tx = db.begin_org(org).await.unwrap();
    let modes: Vec<String> = sqlx::query_scalar("SELECT DISTINCT sharing_mode FROM allocation_intervals ORDER BY 1")
        .fetch_all(tx.conn())
        .await
        .unwrap();
    assert_eq!(modes, ["exclusive", "mig", "passthrough", "time_slice", "vgpu"]);
    let endpoint: i64 =
        sqlx::query_scalar("SELECT count(*) FROM allocation_intervals WHERE labels->>'endpoint' = 'llm-shared'")
            .fetch_one(tx.conn())
            .await
            .unwrap();
    assert!(endpoint > 0, "the shared endpoint's pods are there");
    let unpriced: i64 =
        sqlx::query_scalar("SELECT count(*) FROM allocation_intervals WHERE fraction_num IS NULL OR gpu_class IS NULL")
            .fetch_one(tx.conn())
            .await
            .unwrap();
    assert_eq!(unpriced, 0);
    let open_in_future: i64 =
        sqlx::query_scalar("SELECT count(*) FROM allocation_intervals WHERE ended_at > $1 OR started_at > $1")
            .bind(now)
            .fetch_one(tx.conn())
            .await
            .unwrap();
    assert_eq!(open_in_future, 0, "nothing after now");
    let (state, hash): (String, Option<String>) =
        sqlx::query_as("SELECT state, content_hash FROM periods WHERE period = '2026-10-01'")
            .fetch_one(tx.conn())
            .await
            .unwrap();
    assert_eq!(state, "closed");
    assert_eq!(hash.map(|h| h.len()), Some(64), "closed with a hash");
    let bundle = close::stored_bundle(&mut tx, Period::parse("2026-10").unwrap()).await.unwrap().unwrap();
    assert!(bundle.inputs.allocations.len() > 100);
    // Telemetry at the agents' cadence: every GPU-hour holds 60 windows of 60 s for the GPU and each of its MIG
    // instances, and each hour's stored sums are those of its full-resolution block.
    let (hours, min_w, max_w, mig_hours): (i64, i16, i16, i64) = sqlx::query_as(
        "SELECT count(*), min(windows), max(windows), count(*) FILTER (WHERE instances <> 0)
           FROM telemetry_gpu_hours WHERE hour >= '2026-11-01'",
    )
    .fetch_one(tx.conn())
    .await
    .unwrap();
    assert!(hours > 0 && mig_hours > 0, "{hours} hours, {mig_hours} with MIG instances");
    assert_eq!((min_w, max_w), (60, 60));
    #[allow(clippy::type_complexity)]
    let sample: Vec<(OffsetDateTime, Vec<u8>, i64, i64, i64, i32, i64, i32, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT hour, block, energy_j, util_sum, sampled_ms::bigint, mem_max, instances, inst_windows, inst_sums
           FROM telemetry_gpu_hours ORDER BY instances <> 0 DESC, series_id, hour LIMIT 500",
    )
    .fetch_all(tx.conn())
    .await
    .unwrap();
    assert_eq!(sample.len(), 500);
    for (hour, block, energy_j, util_sum, sampled_ms, mem_max, mask, inst_windows, inst) in sample {
        let devices = gpuledger_server::telemetry::store::unpack_gpu_hour(hour, &block).unwrap();
        let hour_ms = (hour.unix_timestamp_nanos() / 1_000_000) as i64;
        let sums = gpuledger_core::telemetry::HourSums::of(hour_ms, &devices[&-1]);
        assert_eq!(
            (sums.energy_j, sums.util_sum, sums.sampled_ms, sums.mem_max),
            (energy_j, util_sum, sampled_ms, i64::from(mem_max)),
            "{hour}"
        );
        let stored: Vec<(i32, gpuledger_core::telemetry::HourSums)> =
            inst.map(|b| gpuledger_core::telemetry::decode_instance_sums(&b).unwrap()).unwrap_or_default();
        let from_block: Vec<(i32, gpuledger_core::telemetry::HourSums)> = devices
            .iter()
            .filter(|(gi, _)| **gi >= 0)
            .map(|(gi, ws)| (*gi, gpuledger_core::telemetry::HourSums::of(hour_ms, ws)))
            .collect();
        assert_eq!(stored, from_block, "{hour}");
        assert_eq!(from_block.iter().fold(0_i64, |m, (gi, _)| m | 1 << gi), mask);
        assert_eq!(from_block.iter().map(|(_, s)| s.windows).sum::<i64>(), i64::from(inst_windows));
        assert!(devices.values().flatten().all(|w| w.end_ms - w.start_ms == 60_000));
    }

    // This month: open, with lines for several departments, Research among them, and nothing unpriced.
    let preview = close::preview(&mut tx, Period::parse("2026-11").unwrap()).await.unwrap();
    tx.commit().await.unwrap();
    let departments: BTreeSet<&str> = preview.ledger.lines.iter().map(|l| l.department.as_str()).collect();
    assert!(departments.len() >= 3 && departments.contains("Research"), "{departments:?}");
    assert_eq!(preview.ledger.notes.unpriced_allocations, 0);
    assert!(!preview.input.service_usage.is_empty() && !preview.input.energy.is_empty());
    assert!(preview.input.quotas.len() >= 5);

    // The demo accounts still sign in; the manager lands on Research's page.
    let portal = app::router(AppState::demo(db.clone(), org), &HttpOptions::default());
    let (manager, landing) = common::demo_login(&portal, "department_manager").await;
    assert_eq!(landing, "/departments");
    let page = common::send(&portal, common::get(&format!("{landing}?period=2026-10"), Some(&manager))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Research") && page.body.contains("nlp-research"), "{}", page.body);
    for role in ["admin", "finance", "viewer"] {
        let (cookie, landing) = common::demo_login(&portal, role).await;
        assert_eq!(common::send(&portal, common::get(&landing, Some(&cookie))).await.status, StatusCode::OK);
    }

    // A second start finds the fleet: nothing new is stored.
    let before = counts(&db, org).await;
    demo::prepare_fleet(&db, org, 40, None, now + time::Duration::hours(3)).await.unwrap();
    assert_eq!(counts(&db, org).await, before);
    // The agents' history is not mixed into a fleet.
    let refused = demo::load_history(&db, org, "http://127.0.0.1:9", now, false).await.unwrap_err();
    assert!(refused.to_string().contains("synthetic demo fleet"), "{refused}");
}

/// October's closed lines: (tenant's name, term, amount) as text, in order.
async fn october_lines(db: &Database, org: gpuledger_core::ids::OrgId) -> Vec<(String, String, String)> {
    let mut tx = db.begin_org(org).await.unwrap();
    let lines: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT coalesce(t.name, '-'), l.term, l.amount::text
           FROM ledger_lines l LEFT JOIN tenants t USING (org_id, tenant_id)
          WHERE l.period = '2026-10-01' ORDER BY 1, 2, 3",
    )
    .fetch_all(tx.conn())
    .await
    .unwrap();
    tx.commit().await.unwrap();
    lines
}

#[tokio::test]
async fn full_resolution_days_keeps_blocks_of_the_last_days_only_and_prices_the_same() {
    let now = datetime!(2026-11-20 15:42:10 UTC);
    let (_a, full) = common::migrated().await;
    let org = demo::seed(&full).await.unwrap();
    demo::prepare_fleet(&full, org, 40, None, now).await.unwrap();
    let (_b, short) = common::migrated().await;
    assert_eq!(demo::seed(&short).await.unwrap(), org);
    demo::prepare_fleet(&short, org, 40, Some(3), now).await.unwrap();

    // Hours from three days before the fleet's last hour keep their block; earlier ones their sums only, as the
    // retention job leaves them.
    let from = datetime!(2026-11-17 15:00 UTC);
    let mut tx = short.begin_org(org).await.unwrap();
    let (old_blocks, old_hours, new_missing, new_hours, min_w): (i64, i64, i64, i64, i16) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE hour < $1 AND block IS NOT NULL), count(*) FILTER (WHERE hour < $1),
                count(*) FILTER (WHERE hour >= $1 AND block IS NULL), count(*) FILTER (WHERE hour >= $1),
                min(windows)
           FROM telemetry_gpu_hours",
    )
    .bind(from)
    .fetch_one(tx.conn())
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(old_blocks, 0);
    assert!(old_hours > 0 && new_hours > 0, "{old_hours} older hours, {new_hours} recent ones");
    assert_eq!(new_missing, 0);
    assert_eq!(min_w, 60, "every hour keeps its sums");
    // The close reads hours, never blocks: October is priced the same.
    let lines = october_lines(&full, org).await;
    assert!(!lines.is_empty());
    assert_eq!(october_lines(&short, org).await, lines);
}
