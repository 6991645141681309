//! The close's memory does not grow with the fleet (issue 31, part 3): the same month of a fleet and of one ten times
//! larger, closed in parts of the same size, peak at about the same heap. Measured by this test binary's own
//! allocator, which counts every byte the process holds — the close's task, the evidence writer beside it and the
//! bundle's compression thread included (the database's memory is PostgreSQL's, not ours).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A global allocator is an unsafe trait: this binary's only unsafe code, each call passed to the system allocator.
#![allow(unsafe_code)]

mod common;

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
};

use gpuledger_core::Period;
use gpuledger_server::{close, demo};
use time::macros::datetime;

/// Bytes held now, and the most held since the last reset.
static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

fn grew(by: usize) {
    let now = HELD.fetch_add(by, Relaxed) + by;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is the system allocator's, with the same arguments; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                HELD.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Parts of this many records: small against both fleets' months.
const PART: usize = 500;

/// (The heap the close of October added at its peak, October's allocation records, its bundle's bytes.)
async fn close_october(gpus: usize) -> (usize, i64, i64) {
    let (_test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let now = datetime!(2026-11-02 09:42:10 UTC);
    // Hourly sums only (what the retention job leaves of older hours): the close reads hours, never blocks.
    demo::load_fleet(&db, org, gpus, Some(0), now).await.unwrap();
    let october = Period::parse("2026-10").unwrap();
    let base = HELD.load(Relaxed);
    PEAK.store(base, Relaxed);
    demo::ledger::approve_and_close(&db, org, now, &[october], false).await.unwrap();
    let peak = PEAK.load(Relaxed).saturating_sub(base);
    let mut tx = db.begin_org(org).await.unwrap();
    let (records, bundle): (i32, i64) = sqlx::query_as(
        "SELECT e.allocations, p.bundle_bytes FROM evidence_months e JOIN periods p USING (org_id, period)
          WHERE e.period = '2026-10-01'",
    )
    .fetch_one(tx.conn())
    .await
    .unwrap();
    tx.commit().await.unwrap();
    (peak, i64::from(records), bundle)
}

#[tokio::test]
async fn the_closes_memory_stays_flat_as_the_fleet_grows_tenfold() {
    close::set_part_records(PART);
    // Both months are larger than a fetch of the close's cursor (5,000 rows), whose buffers are the same for both.
    let (small, small_records, small_bundle) = close_october(160).await;
    let (large, large_records, large_bundle) = close_october(1_600).await;
    eprintln!(
        "close of October: {small_records} records, bundle {small_bundle} B, peak +{small} B heap; \
         {large_records} records, bundle {large_bundle} B, peak +{large} B heap"
    );
    assert!(large_records >= 8 * small_records, "{large_records} vs {small_records} records: ten times the fleet");
    assert!(large_bundle >= 8 * small_bundle, "{large_bundle} vs {small_bundle} bytes of bundle");
    // A close holding its month adds ~700 B a record (its records, their segments, the bundle); flat, what grows
    // with the fleet is per GPU or tenant (the devices' index of the month's energy, the MIG parents, the pools'
    // running allocations, the inventory in the bundle's tail, the lines): measured 13 B per added record.
    let added = (large_records - small_records) as usize;
    let per_record = large.saturating_sub(small) / added;
    assert!(
        per_record < 40,
        "the close's peak grew from {small} to {large} bytes for {small_records} → {large_records} records: \
         {per_record} B per record"
    );
}
