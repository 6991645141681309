//! `gpuledger-agent`: see `gpuledger-agent --help` and `docs/agent.md`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use gpuledger_agent::inspect;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

/// GPU Ledger cluster agent: allocation facts from Kubernetes and devices.
#[derive(Debug, Parser)]
#[command(name = "gpuledger-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print, as JSON lines, exactly the facts the agent would send for one object or metrics file.
    Inspect {
        /// What the file holds.
        #[arg(value_enum)]
        kind: inspect::Kind,
        /// The file (`-` for standard input).
        file: PathBuf,
        /// Observation time to stamp on the facts (RFC 3339; default: now), for reproducible output.
        #[arg(long)]
        at: Option<String>,
        /// Declared replicas per GPU for time-sliced resources when the objects do not say.
        #[arg(long, env = "GPULEDGER_TIMESLICE_REPLICAS")]
        timeslice_replicas: Option<u32>,
    },
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Inspect {
            kind,
            file,
            at,
            timeslice_replicas,
        } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?
            };
            let at = match at {
                Some(s) => OffsetDateTime::parse(&s, &Rfc3339)
                    .with_context(|| format!("--at: {s:?} is not RFC 3339"))?,
                None => OffsetDateTime::now_utc(),
            };
            let out = inspect::inspect(kind, &text, at, timeslice_replicas)
                .with_context(|| format!("{}", file.display()))?;
            inspect::print(
                &out,
                &mut std::io::stdout().lock(),
                &mut std::io::stderr().lock(),
            )
        }
    }
}
