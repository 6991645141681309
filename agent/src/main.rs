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
    /// Watch the cluster (one per cluster): pods, namespaces and nodes → allocation facts → the server.
    Cluster(ClusterArgs),
    /// Sample this node's GPUs (DaemonSet): inventory and per-minute utilization rollups → the server.
    Node(NodeArgs),
    /// Exchange a one-time join token for this cluster's credential and store it.
    Join {
        /// GPU Ledger server URL.
        #[arg(long, env = "GPULEDGER_SERVER")]
        server: String,
        /// The join token an admin created (`gpuledger-server token create --scope join:CLUSTER`).
        #[arg(long, env = "GPULEDGER_JOIN_TOKEN", hide_env_values = true)]
        token: String,
        /// Write the credential to this file (mode 0600).
        #[arg(long, required_unless_present = "secret")]
        output: Option<PathBuf>,
        /// Store the credential in this Kubernetes Secret (`NAMESPACE/NAME`, key `token`).
        #[arg(long, conflicts_with = "output")]
        secret: Option<String>,
    },
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
        /// modelserver: read only this server's metrics (default: detected from the metric names).
        #[arg(long, value_parser = ["vllm", "triton", "tgi", "nim"])]
        server: Option<String>,
        /// modelserver: the model a TGI server serves (TGI's metrics carry no model name).
        #[arg(long)]
        model: Option<String>,
    },
}

/// Where facts go: shared by `cluster` and `node`.
#[derive(Debug, clap::Args)]
struct DeliveryArgs {
    /// GPU Ledger server URL.
    #[arg(long, env = "GPULEDGER_SERVER")]
    server: String,
    /// The cluster credential (an agent token).
    #[arg(long, env = "GPULEDGER_TOKEN", hide_env_values = true, conflicts_with = "token_file")]
    token: Option<String>,
    /// A file holding the cluster credential (e.g. a mounted Secret, or what `join` wrote).
    #[arg(long, env = "GPULEDGER_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// The cluster's name, checked by the server against the credential.
    #[arg(long, env = "GPULEDGER_CLUSTER")]
    cluster_name: Option<String>,
    /// Where the spool, the dead-letter file and the watcher's state live.
    #[arg(long, env = "GPULEDGER_SPOOL_DIR", default_value = "/var/lib/gpuledger-agent")]
    spool_dir: PathBuf,
    /// Spool size cap in MiB; past it the oldest facts are dropped and a gap fact is sent.
    #[arg(long, env = "GPULEDGER_SPOOL_MAX_MIB", default_value_t = 256)]
    spool_max_mib: u64,
    /// Most facts per batch.
    #[arg(long, env = "GPULEDGER_BATCH_FACTS", default_value_t = 1000)]
    batch_facts: usize,
    /// How often to look for new facts to send, in milliseconds.
    #[arg(long, env = "GPULEDGER_POLL_MS", default_value_t = 1000)]
    poll_ms: u64,
    /// Testing only: shift this agent's clock by this many seconds (the fault simulator's clock skew).
    #[arg(long, env = "GPULEDGER_CLOCK_SKEW_SECS", default_value_t = 0, allow_negative_numbers = true, hide = true)]
    clock_skew_secs: i64,
}

/// Options of `cluster`.
#[derive(Debug, clap::Args)]
struct ClusterArgs {
    #[command(flatten)]
    delivery: DeliveryArgs,
    /// Declared replicas per GPU for time-sliced resources when node labels do not say.
    #[arg(long, env = "GPULEDGER_TIMESLICE_REPLICAS")]
    timeslice_replicas: Option<u32>,
    /// How often open allocations are confirmed while the watch is healthy, in seconds.
    #[arg(long, env = "GPULEDGER_HEARTBEAT_SECS", default_value_t = 30)]
    heartbeat_secs: u64,
    /// Label (or annotation) keys naming the tenant, tried in order; comma-separated.
    #[arg(long, env = "GPULEDGER_LABEL_TENANT", value_delimiter = ',', default_value = "gpuledger.io/tenant")]
    label_tenant: Vec<String>,
    /// Keys naming the department.
    #[arg(long, env = "GPULEDGER_LABEL_DEPARTMENT", value_delimiter = ',', default_value = "gpuledger.io/department")]
    label_department: Vec<String>,
    /// Keys naming an autonomous AI agent session.
    #[arg(
        long,
        env = "GPULEDGER_LABEL_AGENT_SESSION",
        value_delimiter = ',',
        default_value = "gpuledger.io/agent-session"
    )]
    label_agent_session: Vec<String>,
    /// Keys naming a model-serving endpoint.
    #[arg(long, env = "GPULEDGER_LABEL_ENDPOINT", value_delimiter = ',', default_value = "gpuledger.io/endpoint")]
    label_endpoint: Vec<String>,
    /// Keys naming the model.
    #[arg(long, env = "GPULEDGER_LABEL_MODEL", value_delimiter = ',', default_value = "gpuledger.io/model")]
    label_model: Vec<String>,
    /// How often pods annotated `gpuledger.io/modelserver` are scraped, in seconds (each window between two
    /// scrapes becomes one `endpoint_totals` fact per pod and model); 0 turns scraping off.
    #[arg(long, env = "GPULEDGER_SCRAPE_SECS", default_value_t = 60)]
    scrape_secs: u64,
    /// Longest wait for one model server's metrics, in seconds.
    #[arg(long, env = "GPULEDGER_SCRAPE_TIMEOUT_SECS", default_value_t = 10)]
    scrape_timeout_secs: u64,
    /// Most objects per list request when (re-)listing; the API server hands out the rest page by page, so the
    /// agent holds at most one page of objects at a time. 0: whole lists in one answer (more memory).
    #[arg(long, env = "GPULEDGER_LIST_PAGE_SIZE", default_value_t = gpuledger_agent::cluster::DEFAULT_LIST_PAGE_SIZE)]
    list_page_size: u32,
}

/// Where `node` reads devices from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Source {
    /// NVML on this node (production).
    Nvml,
    /// A DCGM Exporter endpoint (--dcgm-url).
    Dcgm,
    /// A simulated device set (tests, demos, benchmarks).
    Simulated,
}

/// Options of `node`.
#[derive(Debug, clap::Args)]
struct NodeArgs {
    #[command(flatten)]
    delivery: DeliveryArgs,
    /// This node's name (the DaemonSet passes spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// Device source.
    #[arg(long, env = "GPULEDGER_SOURCE", value_enum, default_value_t = Source::Nvml)]
    source: Source,
    /// DCGM Exporter metrics URL, with --source dcgm.
    #[arg(long, env = "GPULEDGER_DCGM_URL")]
    dcgm_url: Option<String>,
    /// Number of simulated GPUs, with --source simulated.
    #[arg(long, default_value_t = 8)]
    simulate_gpus: u32,
    /// Model of the simulated GPUs.
    #[arg(long, default_value = "NVIDIA H100 80GB HBM3")]
    simulate_model: String,
    /// Seconds between samples.
    #[arg(long, env = "GPULEDGER_SAMPLE_SECS", default_value_t = 10)]
    sample_secs: u64,
    /// Rollup window in seconds.
    #[arg(long, env = "GPULEDGER_WINDOW_SECS", default_value_t = 60)]
    window_secs: u32,
    /// kubelet's pod-resources socket (which container holds which device); skipped when absent.
    #[arg(long, env = "GPULEDGER_POD_RESOURCES_SOCKET", default_value = gpuledger_agent::podresources::DEFAULT_SOCKET)]
    pod_resources_socket: PathBuf,
    /// The node's proc file system, where GPU processes' cgroups say which pod they belong to (`/host/proc` when
    /// the host's is mounted there instead of running with hostPID).
    #[arg(long, env = "GPULEDGER_HOST_PROC", default_value = "/proc")]
    host_proc: PathBuf,
    /// Simulated GPU processes, with --source simulated: `GPU:PID:SM%` (comma-separated or repeated); their pods
    /// come from `<host-proc>/<PID>/cgroup`, as on a real node.
    #[arg(long, value_delimiter = ',', value_parser = parse_simulated_process)]
    simulate_process: Vec<(u32, u32, f64)>,
}

/// `GPU:PID:SM%` → (GPU index, PID, SM %).
fn parse_simulated_process(s: &str) -> Result<(u32, u32, f64), String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [gpu, pid, sm] = parts.as_slice() else {
        return Err(format!("{s:?}: expected GPU:PID:SM% (e.g. 0:4242:35)"));
    };
    let gpu = gpu.parse().map_err(|_| format!("{s:?}: the GPU index {gpu:?} is not a number"))?;
    let pid = pid.parse().map_err(|_| format!("{s:?}: the PID {pid:?} is not a number"))?;
    let sm: f64 = sm.parse().map_err(|_| format!("{s:?}: the SM percentage {sm:?} is not a number"))?;
    if !(0.0..=100.0).contains(&sm) {
        return Err(format!("{s:?}: the SM percentage must be from 0 to 100"));
    }
    Ok((gpu, pid, sm))
}

fn main() -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
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
        Command::Cluster(args) => {
            // Two workers (the watch loop and delivery) whatever the host's core count: each thread that
            // allocates gets its own malloc arena, and arenas are what a many-core node would add to memory.
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            runtime.block_on(cluster(args))
        }
        Command::Node(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
            runtime.block_on(node(args))
        }
        Command::Join { server, token, output, secret } => {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(join(server, token, output, secret))
        }
        Command::Inspect { kind, file, at, timeslice_replicas, server, model } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?
            };
            let at = match at {
                Some(s) => {
                    OffsetDateTime::parse(&s, &Rfc3339).with_context(|| format!("--at: {s:?} is not RFC 3339"))?
                }
                None => gpuledger_agent::clock::now(),
            };
            let options = gpuledger_agent::metrics::modelserver::ReadOptions {
                server: server.as_deref().and_then(gpuledger_agent::metrics::modelserver::Server::from_name),
                model,
            };
            let out = inspect::inspect_with(kind, &text, at, timeslice_replicas, &options)
                .with_context(|| format!("{}", file.display()))?;
            inspect::print(&out, &mut std::io::stdout().lock(), &mut std::io::stderr().lock())
        }
    }
}

type SharedSpool = std::sync::Arc<std::sync::Mutex<gpuledger_agent::spool::Spool>>;

/// Opens the spool and builds the sender.
fn delivery(
    args: &DeliveryArgs,
    mode: &str,
    node: Option<String>,
) -> anyhow::Result<(SharedSpool, gpuledger_agent::deliver::Sender)> {
    use gpuledger_agent::{deliver, spool};
    if args.clock_skew_secs != 0 {
        gpuledger_agent::clock::set_skew(args.clock_skew_secs);
        tracing::warn!(secs = args.clock_skew_secs, "this agent's clock is shifted (--clock-skew-secs, testing only)");
    }
    let token = match (&args.token, &args.token_file) {
        (Some(t), _) => t.trim().to_string(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("--token-file {}", f.display()))?.trim().to_string()
        }
        (None, None) => anyhow::bail!("--token or --token-file is required (the cluster credential from `join`)"),
    };
    std::fs::create_dir_all(&args.spool_dir).with_context(|| format!("--spool-dir {}", args.spool_dir.display()))?;
    let mut spool = spool::Spool::open(
        args.spool_dir.join("spool"),
        spool::SpoolConfig { max_bytes: args.spool_max_mib * 1024 * 1024, ..spool::SpoolConfig::default() },
    )?;
    spool.set_node(node.clone());
    if node.is_some() {
        // Node agents send no account of their gaps (docs/agent.md, "Recovered or lost"): remembering what they
        // dropped would only fill the spool directory's `gaps` file.
        spool.set_remember_cap(0);
    }
    let recovery = spool.recovery();
    if recovery.truncated_bytes > 0 || recovery.corrupt_records > 0 {
        tracing::warn!(
            truncated_bytes = recovery.truncated_bytes,
            corrupt_records = recovery.corrupt_records,
            "spool recovered from damage"
        );
    }
    tracing::info!(pending = spool.pending_count(), "spool open");
    let sender = deliver::Sender::new(deliver::DeliveryConfig {
        server: args.server.clone(),
        token,
        cluster: args.cluster_name.clone(),
        agent: gpuledger_core::wire::AgentInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            mode: mode.into(),
            node,
            spool: None,
        },
        max_batch_facts: args.batch_facts,
        max_batch_bytes: 8 * 1024 * 1024,
        dead_letter: args.spool_dir.join("dead-letter.jsonl"),
        backoff_min: std::time::Duration::from_millis(200),
        backoff_max: std::time::Duration::from_secs(60),
    })?;
    Ok((std::sync::Arc::new(std::sync::Mutex::new(spool)), sender))
}

async fn cluster(args: ClusterArgs) -> anyhow::Result<()> {
    use gpuledger_agent::{cluster, k8s::LabelKeys};
    let (spool, sender) = delivery(&args.delivery, "cluster", None)?;
    let state_path = args.delivery.spool_dir.join("state.json");
    let state = cluster::State::load(&state_path).with_context(|| format!("{}", state_path.display()))?;
    let keys = LabelKeys {
        tenant: args.label_tenant.clone(),
        department: args.label_department.clone(),
        agent_session: args.label_agent_session.clone(),
        endpoint: args.label_endpoint.clone(),
        model: args.label_model.clone(),
    };
    let scrape = (args.scrape_secs > 0).then(|| cluster::ScrapeOptions {
        every: std::time::Duration::from_secs(args.scrape_secs),
        timeout: std::time::Duration::from_secs(args.scrape_timeout_secs.max(1)),
        keys: keys.clone(),
        state_path: args.delivery.spool_dir.join("scrape.json"),
    });
    let replicas = args.timeslice_replicas;
    // Every start re-sends the owner and quota facts it knows (same event IDs: stored once). Cheap, and a start may
    // follow a spool drop the killed process never re-listed for: its owner facts would otherwise stay lost (the
    // fault simulator found namespaces' owners missing after a kill -9 between a drop and its re-list). The gaps such
    // a drop left are remembered in the spool directory, so this start's re-list also accounts for them.
    let deriver = cluster::Deriver::relisting(state, keys.clone(), replicas);
    let client =
        kube::Client::try_default().await.context("connecting to the Kubernetes API (in-cluster or KUBECONFIG)")?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let delivery = tokio::spawn(sender.run(
        spool.clone(),
        stop_rx.clone(),
        std::time::Duration::from_millis(args.delivery.poll_ms),
    ));
    let opts = cluster::WatchOptions {
        state_path: state_path.clone(),
        heartbeat: std::time::Duration::from_secs(args.heartbeat_secs),
        scrape,
        list_page_size: (args.list_page_size > 0).then_some(args.list_page_size),
    };
    let mut watch = tokio::spawn(async move {
        let mut deriver = deriver;
        loop {
            match cluster::run(client.clone(), deriver, spool.clone(), opts.clone(), stop_rx.clone()).await? {
                cluster::Ended::Stopped => return anyhow::Ok(()),
                // A fresh deriver forgets what it sent, so the re-list sends everything the cluster holds again
                // (namespace owners and queue quotas too, though the state file says they were sent).
                cluster::Ended::Relist => {
                    deriver = cluster::Deriver::relisting(cluster::State::load(&state_path)?, keys.clone(), replicas);
                }
            }
        }
    });
    tracing::info!(server = %args.delivery.server, "watching the cluster");
    let watch_result = tokio::select! {
        _ = shutdown_signal() => None,
        r = &mut watch => Some(r),
    };
    let _ = stop_tx.send(true);
    let watch_result = match watch_result {
        Some(r) => r,
        None => watch.await,
    };
    // Give delivery a moment to drain; what is left stays in the spool for the next start.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), delivery).await;
    watch_result??;
    tracing::info!("stopped");
    Ok(())
}

async fn node(args: NodeArgs) -> anyhow::Result<()> {
    use gpuledger_agent::node::{
        DcgmSource, GpuSource, NodeCollector, NvmlSource, ProcCgroups, ProcessRollup, SimulatedSource, process_facts,
        summarize,
    };
    let mut source: Box<dyn GpuSource> = match args.source {
        Source::Nvml => Box::new(NvmlSource::new(args.node_name.clone())?),
        Source::Dcgm => {
            Box::new(DcgmSource::new(args.dcgm_url.clone().context("--dcgm-url is required with --source dcgm")?)?)
        }
        Source::Simulated => Box::new(
            SimulatedSource::new(args.node_name.clone(), args.simulate_model.clone(), args.simulate_gpus)
                .with_processes(args.simulate_process.clone()),
        ),
    };
    let (spool, sender) = delivery(&args.delivery, "node", Some(args.node_name.clone()))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let delivery =
        tokio::spawn(sender.run(spool.clone(), stop_rx, std::time::Duration::from_millis(args.delivery.poll_ms)));
    let mut collector = NodeCollector::new(args.node_name.clone(), args.window_secs);
    let mut process_rollup = ProcessRollup::new(args.node_name.clone(), args.window_secs);
    let cgroups = ProcCgroups { root: args.host_proc.clone() };
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(args.sample_secs.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(node = %args.node_name, source = ?args.source, "sampling GPUs");
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut seen_processes = std::collections::HashSet::new();
    let mut seen_assignments = std::collections::HashSet::new();
    // Facts the spool has dropped, as of the last re-send of the inventory.
    let mut dropped_seen = spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?.dropped_total();
    if !args.pod_resources_socket.exists() {
        tracing::info!(socket = %args.pod_resources_socket.display(), "no kubelet pod-resources socket; device assignments come from processes only");
    }
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => {}
        }
        let at = gpuledger_agent::clock::now();
        // After a drop, once the backlog is delivered: send the current inventory and assignments again (what was
        // dropped of them is recovered; telemetry windows that are gone stay gone).
        {
            let spool = spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?;
            if spool.dropped_total() > dropped_seen && spool.pending_count() == 0 {
                tracing::warn!("the spool dropped facts; sending the device inventory and assignments again");
                dropped_seen = spool.dropped_total();
                collector.resend_inventory();
                seen_processes.clear();
                seen_assignments.clear();
            }
        }
        let (returned, samples, processes, activity) = tokio::task::spawn_blocking(move || {
            let samples = source.scrape(at);
            let processes = source.processes();
            let activity = source.process_activity();
            (source, samples, processes, activity)
        })
        .await?;
        source = returned;
        let samples = match samples {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "sampling failed");
                continue;
            }
        };
        let mut facts = collector.observe(&samples, at);
        facts.extend(process_facts(&args.node_name, &processes, &cgroups, &mut seen_processes, at));
        facts.extend(process_rollup.observe(&activity, &processes, &cgroups, at));
        if args.pod_resources_socket.exists() {
            match gpuledger_agent::podresources::list(&args.pod_resources_socket).await {
                Ok(items) => facts.extend(gpuledger_agent::podresources::assignment_facts(
                    &args.node_name,
                    &items,
                    &mut seen_assignments,
                    at,
                )),
                // A hung or missing kubelet costs one timeout, not the loop: sampling goes on next tick.
                Err(e) => tracing::warn!(error = %e, "pod-resources not read"),
            }
        }
        if !facts.is_empty() {
            tracing::debug!(facts = ?summarize(&facts), "spooling");
            gpuledger_agent::backpressure::until_written("spool", || {
                Ok(spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?.append_facts(&facts)?)
            })
            .await?;
        }
    }
    let mut tail = collector.flush(gpuledger_agent::clock::now());
    tail.extend(process_rollup.drain(gpuledger_agent::clock::now()));
    if !tail.is_empty() {
        spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?.append_facts(&tail)?;
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), delivery).await;
    tracing::info!("stopped");
    Ok(())
}

async fn join(server: String, token: String, output: Option<PathBuf>, secret: Option<String>) -> anyhow::Result<()> {
    let url = format!("{}/api/v1/agents/join", server.trim_end_matches('/'));
    let response = reqwest::Client::new()
        .post(&url)
        .bearer_auth(token.trim())
        .send()
        .await
        .with_context(|| format!("contacting {url}"))?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    if !status.is_success() {
        anyhow::bail!(
            "the server refused the join token ({status}): {}",
            body["detail"].as_str().unwrap_or("expired, already used, or not a join token")
        );
    }
    let credential = body["token"].as_str().context("the server's answer has no token")?;
    let cluster = body["cluster"].as_str().unwrap_or("?");
    match (output, secret) {
        (Some(path), _) => {
            use std::{io::Write, os::unix::fs::OpenOptionsExt};
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("--output {}", path.display()))?;
            f.write_all(credential.as_bytes())?;
            f.sync_all()?;
            eprintln!("joined cluster {cluster:?}; credential written to {}", path.display());
        }
        (None, Some(secret)) => {
            use k8s_openapi::api::core::v1::Secret;
            let (namespace, name) = secret.split_once('/').context("--secret: expected NAMESPACE/NAME")?;
            let client = kube::Client::try_default().await.context("connecting to the Kubernetes API")?;
            let api: kube::Api<Secret> = kube::Api::namespaced(client, namespace);
            let object = serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "gpuledger-agent"}},
                "stringData": {"token": credential, "cluster": cluster},
            });
            api.patch(
                name,
                &kube::api::PatchParams::apply("gpuledger-agent").force(),
                &kube::api::Patch::Apply(object),
            )
            .await
            .with_context(|| format!("writing Secret {secret}"))?;
            eprintln!("joined cluster {cluster:?}; credential stored in Secret {secret} (key `token`)");
        }
        (None, None) => anyhow::bail!("--output or --secret is required"),
    }
    Ok(())
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
