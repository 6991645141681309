//! `gpuledger-chaos` (run through `scripts/chaos`): the seeded fault simulation. Prints each seed's scenario, fault
//! schedule, measurements and violations; the last line is exactly `N seeds, K violations`; exits 0 only when K = 0.

use std::time::Instant;

use anyhow::Result;
use clap::Parser;
use gpuledger_e2e::{chaos, process::temp_dir};

/// Seeded fault simulation of the real agents, server and PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "gpuledger-chaos")]
struct Args {
    /// How many seeds to run: FIRST, FIRST+1, … (seeds 1..=N by default).
    #[arg(long, default_value_t = 5, conflicts_with = "seed")]
    seeds: u64,
    /// The first seed of `--seeds` (to continue a long run in parts).
    #[arg(long, default_value_t = 1, conflicts_with = "seed")]
    first: u64,
    /// Run this one seed (to reproduce a failure).
    #[arg(long)]
    seed: Option<u64>,
    /// Keep each seed's directory (logs, spools, database) even when it passes.
    #[arg(long)]
    keep: bool,
    /// Only print each seed's scenario and fault schedule (nothing runs).
    #[arg(long)]
    plan: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first..args.first.saturating_add(args.seeds)).collect(),
    };
    if args.plan {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        for seed in &seeds {
            let s = chaos::scenario::Scenario::generate(*seed, now);
            println!("seed {seed}: {}", s.describe());
            for f in chaos::faults::Schedule::generate(*seed, s.large).describe() {
                println!("  fault    {f}");
            }
        }
        return std::process::ExitCode::SUCCESS;
    }
    let started = Instant::now();
    let mut violations = 0usize;
    for seed in &seeds {
        let count = runtime.block_on(one(*seed, args.keep)).unwrap_or_else(|e| {
            println!("seed {seed}: harness error: {e:#}");
            1
        });
        violations += count;
    }
    println!("({} s in all)", started.elapsed().as_secs());
    println!("{} seeds, {violations} violations", seeds.len());
    if violations == 0 { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}

async fn one(seed: u64, keep: bool) -> Result<usize> {
    let dir = temp_dir(&format!("gpuledger-chaos-{seed}"))?;
    println!("seed {seed}: running in {}", dir.display());
    let result = chaos::run_seed(seed, &dir).await;
    let r = match result {
        Ok(r) => r,
        Err(e) => {
            println!("seed {seed}: harness error (kept {}): {e:#}", dir.display());
            return Ok(1);
        }
    };
    println!("seed {seed}: {} in {} s", if r.violations.is_empty() { "ok" } else { "VIOLATED" }, r.elapsed.as_secs());
    println!("  scenario: {}", r.scenario);
    for f in &r.schedule {
        println!("  fault    {f}");
    }
    for n in &r.notes {
        println!("  measured {n}");
    }
    for v in &r.violations {
        println!("  VIOLATION {v}");
    }
    if r.violations.is_empty() && !keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("  kept {} (reproduce: scripts/chaos --seed {seed})", dir.display());
    }
    Ok(r.violations.len())
}
