//! `scripts/chaos`: a seeded fault simulation of the real agents, the real server and a real PostgreSQL.
//!
//! For each seed, a [`scenario::Scenario`] (fleet, pods over two past months and this one, an ownership change,
//! late pods) runs twice from the same seeded database: once with no faults (the reference) and once under the
//! seed's [`faults::Schedule`] (kills of server, agents and PostgreSQL, partitions through [`proxy::Proxy`], a full
//! spool disk, clock skew, re-sent batches, two replicas closing one month while a credit is approved). Then the
//! checks: conservation (every acknowledged fact stored once; the month's allocations equal the reference's unless
//! an unrecovered gap says why), identical close, immutability of closed months (late data lands as adjustments in
//! the open month), liveness (ready and drained within bounds after the faults stop), nothing dead-lettered.

pub mod faults;
pub mod pg;
pub mod proxy;
pub mod rng;
pub mod scenario;
mod world;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Result;

use self::{faults::Schedule, scenario::Scenario, world::Outcome};

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct SeedResult {
    /// The seed.
    pub seed: u64,
    /// What the scenario was.
    pub scenario: String,
    /// The fault schedule, one fault per line.
    pub schedule: Vec<String>,
    /// What was measured (drain times, counts, what the proxy did).
    pub notes: Vec<String>,
    /// Broken properties, each with its evidence.
    pub violations: Vec<String>,
    /// Wall time of the seed.
    pub elapsed: Duration,
}

/// Runs seed `seed` in `root` (a fresh directory): the reference run, the faulty run, the checks.
pub async fn run_seed(seed: u64, root: &Path) -> Result<SeedResult> {
    let started = Instant::now();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let scenario = Scenario::generate(seed, now);
    let schedule = Schedule::generate(seed, scenario.large);
    let pg = pg::Postgres::create(root)?;
    let seeded = world::prepare(&pg, &scenario, root).await?;
    let reference = world::run(&pg, &seeded, &scenario, None, &root.join("reference")).await?;
    let faulty = world::run(&pg, &seeded, &scenario, Some(&schedule), &root.join("faulty")).await?;
    pg.stop();
    let mut violations = Vec::new();
    violations.extend(reference.violations.iter().map(|v| format!("reference run: {v}")));
    violations.extend(faulty.violations.iter().cloned());
    compare(&scenario, &reference, &faulty, &mut violations);
    let mut notes = reference.notes.iter().map(|n| format!("reference: {n}")).collect::<Vec<_>>();
    notes.extend(faulty.notes.iter().map(|n| format!("faulty: {n}")));
    Ok(SeedResult {
        seed,
        scenario: scenario.describe(),
        schedule: schedule.describe(),
        notes,
        violations,
        elapsed: started.elapsed(),
    })
}

/// The properties that compare the faulty run with the reference.
fn compare(s: &Scenario, reference: &Outcome, faulty: &Outcome, violations: &mut Vec<String>) {
    // 1. Conservation: the closed month's allocations (every row of the month's allocations export).
    if reference.month_allocations != faulty.month_allocations {
        let missing: Vec<&String> = reference.month_allocations.difference(&faulty.month_allocations).take(3).collect();
        let extra: Vec<&String> = faulty.month_allocations.difference(&reference.month_allocations).take(3).collect();
        if faulty.unrecovered_gaps.is_empty() {
            violations.push(format!(
                "conservation: {}'s allocations differ from the fault-free run's ({} vs {} rows) with no gap to say \
                 why; missing e.g. {missing:?}; extra e.g. {extra:?}",
                s.month.name,
                faulty.month_allocations.len(),
                reference.month_allocations.len()
            ));
        } else if !faulty.gaps_on_close_page {
            violations.push(format!(
                "conservation: {} lost allocations to a gap ({:?}) that its close page does not show",
                s.month.name, faulty.unrecovered_gaps
            ));
        }
    }
    // 2. Identical close: the earlier month exactly; the raced month too, unless the racing credit landed in it.
    if reference.earlier_hash != faulty.earlier_hash && faulty.unrecovered_gaps.is_empty() {
        violations.push(format!(
            "identical close: {} closed with hash {:?}, the fault-free run with {:?}",
            s.earlier.name, faulty.earlier_hash, reference.earlier_hash
        ));
    }
    if faulty.credit_in_month {
        if reference.month_lines_without_credits != faulty.month_lines_without_credits {
            violations.push(format!(
                "identical close: {}'s lines other than the racing credit differ from the fault-free run's",
                s.month.name
            ));
        }
    } else if reference.month_hash != faulty.month_hash && faulty.unrecovered_gaps.is_empty() {
        violations.push(format!(
            "identical close: {} closed with hash {:?}, the fault-free run with {:?}",
            s.month.name, faulty.month_hash, reference.month_hash
        ));
    }
    // 3. Late data: the same adjustments in the open month.
    if reference.late_adjustments != faulty.late_adjustments {
        violations.push(format!(
            "late data: the open month's adjustments for {} are {:?}, the fault-free run's {:?}",
            s.month.name, faulty.late_adjustments, reference.late_adjustments
        ));
    }
}
