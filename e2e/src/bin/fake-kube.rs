//! The stand-in Kubernetes API server as a program, for benchmarks of the cluster agent
//! (`scripts/bench-cluster-agent`): `generate` writes a synthetic cluster to a file, `serve` answers lists
//! (paged, as the real server) and watches of the objects in such a file until interrupted.

use std::{io::Write, path::PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use gpuledger_e2e::{fake_kube::FakeKube, synthetic};

/// A stand-in Kubernetes API server for the cluster agent's benchmarks.
#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Writes a synthetic cluster (namespaces, GPU nodes, pods) as one JSON array of objects, which
    /// `gpuledger-agent inspect k8s` also reads.
    Generate {
        /// Number of pods (eight per node, over 50 namespaces).
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
        /// Output file.
        #[arg(long)]
        out: PathBuf,
        /// "Now", Unix seconds (default: the clock); pods started within the six days before.
        #[arg(long)]
        now: Option<i64>,
    },
    /// Serves the objects of a file written by `generate` until SIGINT or SIGTERM.
    Serve {
        /// The objects (a JSON array, each with its `kind`).
        #[arg(long)]
        objects: PathBuf,
        /// Where to write a kubeconfig pointing at this server.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Listen address.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Generate { pods, out, now } => {
            let now = match now {
                Some(n) => n,
                None => i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs())?,
            };
            let file = std::fs::File::create(&out).with_context(|| format!("{}", out.display()))?;
            let mut w = std::io::BufWriter::new(file);
            // Written object by object: the array is never built whole.
            w.write_all(b"[")?;
            for (i, (_, object)) in synthetic::cluster(pods, now).iter().enumerate() {
                if i > 0 {
                    w.write_all(b",\n")?;
                }
                serde_json::to_writer(&mut w, object)?;
            }
            w.write_all(b"]\n")?;
            w.flush()?;
            Ok(())
        }
        Command::Serve { objects, kubeconfig, listen } => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
            runtime.block_on(serve(objects, kubeconfig, listen))
        }
    }
}

async fn serve(objects: PathBuf, kubeconfig: PathBuf, listen: String) -> Result<()> {
    let text = std::fs::read(&objects).with_context(|| format!("{}", objects.display()))?;
    let items: Vec<serde_json::Value> =
        serde_json::from_slice(&text).context("the objects file is not a JSON array")?;
    drop(text);
    let kube = FakeKube::start_on(&listen).await?;
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for object in items {
        let resource = match object["kind"].as_str() {
            Some("Namespace") => "namespaces",
            Some("Node") => "nodes",
            Some("Pod") => "pods",
            other => bail!("unsupported kind {other:?}"),
        };
        *counts.entry(resource).or_default() += 1;
        kube.apply_silently(resource, object)?;
    }
    let dir = kubeconfig.parent().context("--kubeconfig has no directory")?;
    let written = kube.kubeconfig(dir)?;
    if written != kubeconfig {
        std::fs::rename(&written, &kubeconfig)?;
    }
    eprintln!("serving {counts:?} at {}", kube.url);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    for resource in ["namespaces", "nodes", "pods"] {
        let lists = kube.list_requests(resource);
        eprintln!("{resource}: {} list requests, {} items", lists.len(), lists.iter().map(|l| l.items).sum::<usize>());
    }
    Ok(())
}
