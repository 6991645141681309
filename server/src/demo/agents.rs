//! Runs the real agent code over the planned world: per cluster, one cluster agent ([`Deriver`]) fed the
//! Kubernetes objects in time order, each with the time it happened as the agent's clock, and one node agent per
//! GPU node: device inventory through the agent's DCGM parser from a simulated exporter ([`PlannedNodeSource`]),
//! hourly rollups as `NodeCollector` makes them, kubelet pod-resources assignments, and — on the node serving the
//! shared vLLM endpoint — the endpoint's per-tenant usage. Each agent's facts go through its own on-disk [`Spool`]
//! to `POST /api/v1/ingest/batches`, as a deployed agent's would (see [`Drain`]).

use std::{
    collections::HashSet,
    io::Write,
    path::{Path, PathBuf},
    sync::Mutex,
    time::Duration as StdDuration,
};

use gpuledger_agent::{
    cluster::Deriver,
    deliver::{Attempt, DeliveryConfig, Sender},
    k8s::LabelKeys,
    metrics::{
        dcgm,
        modelserver::{Counts, Server, WindowTotals, service_usage_fact, with_ttft},
    },
    node::GpuSource,
    podresources::{ContainerDevices, assignment_facts},
    scrape::totals_fact,
    spool::{Spool, SpoolConfig},
};
use gpuledger_core::wire::{AgentInfo, BatchAck, Fact, WIRE_VERSION};
use time::{Duration, OffsetDateTime, Weekday};

use super::{
    gpus::PlannedNodeSource,
    objects::{self, PodStage, VmiStage},
    plan::{ClusterPlan, ENDPOINT, ENDPOINT_MODEL, ENDPOINT_USERS, Ending, HolderKind, World, unit_noise},
};

/// What the demo's agents run as.
pub const AGENT_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "-demo");

/// One agent's identity and where it reports.
#[derive(Debug, Clone)]
pub struct AgentId {
    /// Index of its cluster in the world.
    pub cluster: usize,
    /// `None`: the cluster agent; else the node agent of this node (index in the cluster).
    pub node: Option<usize>,
}

/// Every agent of the world.
pub fn agents(world: &World) -> Vec<AgentId> {
    let mut out = Vec::new();
    for (c, cluster) in world.clusters.iter().enumerate() {
        out.push(AgentId { cluster: c, node: None });
        out.extend((0..cluster.nodes.len()).map(|n| AgentId { cluster: c, node: Some(n) }));
    }
    out
}

/// What the agent says about itself in its batches.
pub fn agent_info(world: &World, id: &AgentId) -> AgentInfo {
    match id.node {
        None => AgentInfo { version: AGENT_VERSION.into(), mode: "cluster".into(), node: None, spool: None },
        Some(n) => AgentInfo {
            version: AGENT_VERSION.into(),
            mode: "node".into(),
            node: Some(world.clusters[id.cluster].nodes[n].name.clone()),
            spool: None,
        },
    }
}

/// The facts agent `id` produces from the start of the history until `cutoff`.
pub fn facts(world: &World, id: &AgentId, cutoff: OffsetDateTime) -> Result<Vec<Fact>, String> {
    let cluster = &world.clusters[id.cluster];
    match id.node {
        None => cluster_agent(world, cluster, cutoff),
        Some(n) => Ok(node_agent(world, cluster, n, cutoff)),
    }
}

/// One thing the cluster agent's watches deliver.
enum Event {
    Namespace(usize, usize),
    Node(usize),
    Queue(usize, usize),
    Pod(usize, PodStage, bool),
    Vmi(usize, VmiStage, bool),
}

/// The cluster agent: watch events in time order through the [`Deriver`].
fn cluster_agent(world: &World, c: &ClusterPlan, cutoff: OffsetDateTime) -> Result<Vec<Fact>, String> {
    let start = world.anchor;
    let mut events: Vec<(OffsetDateTime, u32, Event)> = Vec::new();
    // The agent starts at the anchor and lists what exists: namespaces, nodes, queues.
    for (i, ns) in c.namespaces.iter().enumerate() {
        events.push((start, 0, Event::Namespace(i, 0)));
        for (v, (since, _, _)) in ns.owners.iter().enumerate().skip(1) {
            events.push((*since, 1, Event::Namespace(i, v)));
        }
    }
    for i in 0..c.nodes.len() {
        events.push((start, 0, Event::Node(i)));
    }
    for (i, q) in c.queues.iter().enumerate() {
        events.push((start, 0, Event::Queue(i, 0)));
        for (v, (since, _)) in q.versions.iter().enumerate().skip(1) {
            events.push((*since, 1, Event::Queue(i, v)));
        }
    }
    for (i, w) in c.workloads.iter().enumerate() {
        let seen = w.started + Duration::seconds(2);
        match w.holder {
            HolderKind::Pod => {
                events.push((seen, 2, Event::Pod(i, PodStage::Running, false)));
                match w.ending {
                    Ending::Deleted => {
                        events.push((w.end, 2, Event::Pod(i, PodStage::Terminating, false)));
                        events.push((w.end + Duration::seconds(30), 2, Event::Pod(i, PodStage::Deleted, true)));
                    }
                    _ => {
                        events.push((w.end + Duration::seconds(1), 2, Event::Pod(i, PodStage::Finished, false)));
                        events.push((w.end + Duration::hours(1), 2, Event::Pod(i, PodStage::Deleted, true)));
                    }
                }
            }
            HolderKind::Vmi => {
                events.push((seen, 2, Event::Vmi(i, VmiStage::Running, false)));
                events.push((w.end + Duration::seconds(1), 2, Event::Vmi(i, VmiStage::Ended, false)));
                let gone = if w.ending == Ending::Stopped { Duration::minutes(5) } else { Duration::seconds(10) };
                events.push((w.end + gone, 2, Event::Vmi(i, VmiStage::Deleted, true)));
            }
        }
    }
    events.sort_by_key(|(t, order, _)| (*t, *order));

    let mut deriver = Deriver::new(Default::default(), LabelKeys::default(), None);
    let mut out = Vec::new();
    let err = |what: &str, e: gpuledger_agent::k8s::K8sError| format!("{}: {what}: {e}", c.name);
    for (at, _, event) in events.into_iter().take_while(|(t, _, _)| *t <= cutoff) {
        match event {
            Event::Namespace(i, v) => {
                let ns = &c.namespaces[i];
                let (since, tenant, department) = ns.owners[v];
                let obj = objects::namespace(ns, tenant, department, since);
                out.extend(deriver.on_namespace(&obj, at).map_err(|e| err("namespace", e))?);
            }
            Event::Node(i) => {
                out.extend(deriver.on_node(&objects::node(&c.nodes[i], at), at).map_err(|e| err("node", e))?);
            }
            Event::Queue(i, v) => {
                let obj = objects::cluster_queue(&c.queues[i], v);
                out.extend(deriver.on_cluster_queue(&obj, at).map_err(|e| err("clusterqueue", e))?);
            }
            Event::Pod(i, stage, deleted) => {
                let obj = objects::pod(&c.workloads[i], c, stage);
                out.extend(deriver.on_pod(&obj, deleted, at).map_err(|e| err("pod", e))?);
            }
            Event::Vmi(i, stage, deleted) => {
                let obj = objects::vmi(&c.workloads[i], c, stage);
                out.extend(deriver.on_vmi(&obj, deleted, at).map_err(|e| err("vmi", e))?);
            }
        }
    }
    Ok(out)
}

/// A node agent: device inventory and hourly telemetry from the node's GPUs, kubelet's device assignments, and
/// (on the endpoint's node) the shared endpoint's usage per tenant.
fn node_agent(world: &World, c: &ClusterPlan, n: usize, cutoff: OffsetDateTime) -> Vec<Fact> {
    let node = &c.nodes[n];
    let mut out = Vec::new();
    // The node agent starts at the anchor: its first scrape reports the devices (through the agent's DCGM
    // inventory code), then hourly rollups follow until the cutoff.
    if world.anchor < cutoff {
        match PlannedNodeSource::new(c, n).scrape(world.anchor) {
            Ok(samples) => {
                for mut d in dcgm::devices(&samples, &node.name) {
                    d.node = node.name.clone();
                    out.push(dcgm::device_fact(&d, world.anchor));
                }
            }
            Err(e) => tracing::warn!(node = %node.name, error = %e, "demo scrape failed"),
        }
        out.extend(PlannedNodeSource::new(c, n).telemetry_facts(world.anchor, cutoff));
    }
    // Kubelet's pod-resources: which container holds which devices, polled right after each pod starts.
    let mut seen = HashSet::new();
    for w in c.workloads.iter().filter(|w| w.node == n && w.holder == HolderKind::Pod) {
        let at = w.started + Duration::seconds(5);
        if at > cutoff {
            continue;
        }
        let item = ContainerDevices {
            namespace: w.namespace.to_string(),
            pod: w.name.clone(),
            container: "main".into(),
            resource: w.resource.clone(),
            device_ids: w.slots.iter().map(|&s| c.slots[s].device_id.clone()).collect(),
        };
        out.extend(assignment_facts(&node.name, &[item], &mut seen, at));
    }
    let serves_endpoint = c.workloads.iter().any(|w| w.node == n && w.labels.values().any(|v| v == ENDPOINT));
    if serves_endpoint {
        let pod = c
            .workloads
            .iter()
            .find(|w| w.node == n && w.labels.values().any(|v| v == ENDPOINT))
            .map_or_else(|| "serving/vllm".to_string(), |w| format!("{}/{}", w.namespace, w.name));
        out.extend(endpoint_usage(world, cutoff, &pod));
    }
    out.sort_by_key(|f| f.observed_at);
    out
}

/// The shared endpoint's hourly productive work per calling tenant, from its first full hour to the cutoff, and
/// what its model server counted itself (the scraped `endpoint_totals`): a few percent more than the tenants'
/// usage — health checks and internal traffic no gateway attributes — which the ledger reports as unattributed.
fn endpoint_usage(world: &World, cutoff: OffsetDateTime, pod: &str) -> Vec<Fact> {
    let mut out = Vec::new();
    let first = world.endpoint_since + Duration::hours(1);
    let mut hour = first.replace_time(time::Time::from_hms(first.hour(), 0, 0).unwrap_or(time::Time::MIDNIGHT));
    while hour + Duration::hours(1) <= cutoff {
        let end = hour + Duration::hours(1);
        let h = f64::from(hour.hour());
        let day = 0.5 - 0.5 * (std::f64::consts::TAU * (h - 2.0) / 24.0).cos();
        let weekend = matches!(hour.weekday(), Weekday::Saturday | Weekday::Sunday);
        let mut counted = [0u64; 3];
        for (i, u) in ENDPOINT_USERS.iter().enumerate() {
            let noise = unit_noise(i as u64 + 77, hour.unix_timestamp() as u64);
            let load = (0.12 + 0.88 * day) * if weekend { 0.45 } else { 1.0 } * (0.85 + 0.3 * noise);
            let requests = (u.peak_requests as f64 * load).round() as u64;
            let tokens = |per: u64, salt: u64| {
                let spread = 0.8 + 0.4 * unit_noise(salt ^ i as u64, hour.unix_timestamp() as u64);
                (requests as f64 * per as f64 * spread).round() as u64
            };
            let input = tokens(u.input_per_request, 0x1);
            let output = tokens(u.output_per_request, 0x2);
            for (slot, n) in counted.iter_mut().zip([requests, input, output]) {
                *slot += n;
            }
            let fact = service_usage_fact(
                ENDPOINT,
                ENDPOINT_MODEL,
                u.tenant,
                hour,
                end,
                requests,
                input,
                output,
                end + Duration::seconds(15),
            );
            // Time to first token grows with the prompt and with the endpoint's load (queueing at peak hours).
            let per_request_ms = 60.0 + 0.08 * u.input_per_request as f64 + 220.0 * load;
            out.push(with_ttft(fact, (requests as f64 * per_request_ms).round() as u64, requests));
        }
        let extra = 0.04 + 0.03 * unit_noise(0x5eed, hour.unix_timestamp() as u64);
        let more = |n: u64| n + (n as f64 * extra).round() as u64;
        let totals = WindowTotals {
            server: Server::Vllm,
            model: ENDPOINT_MODEL.into(),
            window_start: hour,
            window_end: end,
            counts: Counts {
                requests: more(counted[0]),
                input_tokens: more(counted[1]),
                output_tokens: more(counted[2]),
            },
            ttft_ms_sum: None,
            ttft_count: None,
            queue_depth: None,
            running: None,
            restarted: false,
        };
        out.push(totals_fact(ENDPOINT, pod, &totals, end + Duration::seconds(20)));
        hour = end;
    }
    out
}

/// Totals of one agent's delivery.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delivered {
    /// Facts sent.
    pub sent: u64,
    /// Facts the server stored as new.
    pub stored: u64,
    /// Facts the server flagged (kept with a data-quality finding).
    pub flagged: u64,
}

/// How an agent's spool is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// The agent's own [`Sender`] (it parses each record and re-encodes the batch): the cluster agents.
    Sender,
    /// The records as spooled, spliced into the same request the Sender makes (gzip JSON batch, bearer agent token,
    /// cluster claim) without parsing them again: the node agents' bulk telemetry, which a debug build would
    /// otherwise spend most of its time re-encoding.
    Forward,
}

/// Spools `facts` in `dir` and delivers them until the spool is empty.
pub async fn deliver(dir: &Path, facts: Vec<Fact>, config: DeliveryConfig, drain: Drain) -> Result<Delivered, String> {
    let started = std::time::Instant::now();
    let spool = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || -> Result<Spool, String> {
            let mut spool = Spool::open(&dir, SpoolConfig::default()).map_err(|e| e.to_string())?;
            for chunk in facts.chunks(4096) {
                spool.append_facts(chunk).map_err(|e| e.to_string())?;
            }
            Ok(spool)
        })
        .await
        .map_err(|e| e.to_string())??
    };
    let spooled_in = started.elapsed();
    let spool = Mutex::new(spool);
    let totals = match drain {
        Drain::Sender => send(&spool, config).await?,
        Drain::Forward => forward(&spool, &config).await?,
    };
    tracing::debug!(
        spool_s = spooled_in.as_secs_f64(),
        send_s = (started.elapsed() - spooled_in).as_secs_f64(),
        "demo agent delivered"
    );
    Ok(totals)
}

/// Drains the spool with the agent's [`Sender`].
async fn send(spool: &Mutex<Spool>, config: DeliveryConfig) -> Result<Delivered, String> {
    let dead_letter: PathBuf = config.dead_letter.clone();
    let mut sender = Sender::new(config).map_err(|e| e.to_string())?;
    let mut totals = Delivered::default();
    let mut failures = 0u32;
    loop {
        match sender.attempt(spool).await.map_err(|e| e.to_string())? {
            Attempt::Delivered { ack, facts, .. } => {
                failures = 0;
                totals.sent += facts as u64;
                totals.stored += ack.stored;
                totals.flagged += ack.flagged.len() as u64;
            }
            Attempt::Idle => return Ok(totals),
            Attempt::Retry { reason, after } => {
                failures += 1;
                if failures > 8 {
                    return Err(format!("delivery keeps failing: {reason}"));
                }
                let wait = after.unwrap_or(StdDuration::from_millis(100 * u64::from(failures)));
                tokio::time::sleep(wait.min(StdDuration::from_secs(5))).await;
            }
            Attempt::DeadLettered { count } => {
                return Err(format!(
                    "the server refused {count} demo fact(s); see {} for what and why",
                    dead_letter.display()
                ));
            }
        }
    }
}

/// Drains the spool by forwarding its records as they are, acknowledging each batch once the server committed it.
async fn forward(spool: &Mutex<Spool>, config: &DeliveryConfig) -> Result<Delivered, String> {
    let client = reqwest::Client::builder()
        .timeout(StdDuration::from_secs(120))
        .user_agent(concat!("gpuledger-agent/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("{}/api/v1/ingest/batches", config.server.trim_end_matches('/'));
    let head = serde_json::to_string(&serde_json::json!({
        "wire_version": WIRE_VERSION, "agent": config.agent, "cluster": config.cluster,
    }))
    .map_err(|e| e.to_string())?;
    let lock = || spool.lock().map_err(|_| "spool lock poisoned".to_string());
    let mut totals = Delivered::default();
    let mut failures = 0u32;
    loop {
        let records = lock()?.pending(config.max_batch_facts, config.max_batch_bytes).map_err(|e| e.to_string())?;
        let Some(up_to) = records.last().map(|(seq, _)| *seq) else { return Ok(totals) };
        // `{"wire_version":…,"agent":…,"cluster":…,"facts":[record,record,…]}`, gzipped as the Sender does.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let write =
            |gz: &mut flate2::write::GzEncoder<Vec<u8>>, bytes: &[u8]| gz.write_all(bytes).map_err(|e| e.to_string());
        write(&mut gz, &head.as_bytes()[..head.len() - 1])?;
        write(&mut gz, b",\"facts\":[")?;
        for (i, (_, record)) in records.iter().enumerate() {
            if i > 0 {
                write(&mut gz, b",")?;
            }
            write(&mut gz, record)?;
        }
        write(&mut gz, b"]}")?;
        let body = gz.finish().map_err(|e| e.to_string())?;
        let response = client
            .post(&url)
            .bearer_auth(&config.token)
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(body)
            .send()
            .await;
        let (status, text) = match response {
            Ok(r) => (r.status(), r.text().await.unwrap_or_default()),
            Err(e) => (reqwest::StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        };
        if status.is_success() {
            let ack: BatchAck = serde_json::from_str(&text).map_err(|e| format!("unreadable acknowledgement: {e}"))?;
            lock()?.ack(up_to).map_err(|e| e.to_string())?;
            failures = 0;
            totals.sent += records.len() as u64;
            totals.stored += ack.stored;
            totals.flagged += ack.flagged.len() as u64;
            continue;
        }
        if status.is_client_error() && status != reqwest::StatusCode::TOO_MANY_REQUESTS {
            return Err(format!(
                "the server refused a batch ({status}): {}",
                text.chars().take(300).collect::<String>()
            ));
        }
        failures += 1;
        if failures > 8 {
            return Err(format!("delivery keeps failing ({status}): {}", text.chars().take(300).collect::<String>()));
        }
        tokio::time::sleep(StdDuration::from_millis(200 * u64::from(failures))).await;
    }
}
