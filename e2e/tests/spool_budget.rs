//! The agents' spool budget (issue 23): bytes per fact kind as they are spooled (record header + JSON), measured on a
//! synthetic 10,000-pod cluster's first sync (the same derivation as the cluster agent, through `inspect k8s`) and on
//! 24 hours of one 8-GPU node's telemetry (the node agent's simulated source at the production sampling: every 10 s,
//! 60 s windows, with per-process samples of 4 pods per GPU). Asserts the default cap holds both with room to spare
//! and prints the table written down in docs/agent.md. Run: `cargo nextest run -p gpuledger-e2e --test spool_budget
//! --no-capture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use gpuledger_agent::{
    node::{GpuSource, NodeCollector, ProcessRollup, SimulatedSource},
    spool::SpoolConfig,
};
use gpuledger_core::wire::Fact;
use gpuledger_e2e::synthetic;

/// A spool record's header: length, checksum, sequence number.
const HEADER: u64 = 16;

fn tally(facts: &[Fact], into: &mut BTreeMap<&'static str, (u64, u64)>) -> u64 {
    let mut total = 0;
    for f in facts {
        let bytes = serde_json::to_vec(f).unwrap().len() as u64 + HEADER;
        let e = into.entry(f.body.kind()).or_insert((0, 0));
        e.0 += 1;
        e.1 += bytes;
        total += bytes;
    }
    total
}

fn table(title: &str, kinds: &BTreeMap<&'static str, (u64, u64)>) {
    eprintln!("{title}");
    for (kind, (n, bytes)) in kinds {
        eprintln!("  {kind:<20} {n:>9} facts {:>12} bytes  {:>6} bytes/fact", bytes, bytes / n.max(&1));
    }
}

struct Cgroups;
impl gpuledger_agent::node::CgroupReader for Cgroups {
    fn cgroup(&self, pid: u32) -> Option<String> {
        // Four pods per GPU: PIDs 1000 + 10 × pod.
        let pod = pid / 10;
        Some(format!("0::/kubepods/burstable/pod00000000-0000-4000-8000-{pod:012x}/c{pid}"))
    }
}

#[test]
fn the_default_spool_holds_a_10000_pod_first_sync_and_a_day_of_a_nodes_telemetry() {
    let cap = SpoolConfig::default().max_bytes;
    // ---- the cluster agent: a 10,000-pod cluster's first sync
    let now = 1_796_083_199;
    let objects: Vec<serde_json::Value> = synthetic::cluster(10_000, now)
        .into_iter()
        .map(|(resource, mut o)| {
            let kind = match resource {
                "namespaces" => "Namespace",
                "nodes" => "Node",
                _ => "Pod",
            };
            o["kind"] = kind.into();
            o["apiVersion"] = "v1".into();
            o
        })
        .collect();
    let text = serde_json::to_string(&objects).unwrap();
    let at = time::OffsetDateTime::from_unix_timestamp(now).unwrap();
    let facts = gpuledger_agent::inspect::inspect(gpuledger_agent::inspect::Kind::K8s, &text, at, None).unwrap().facts;
    let mut cluster_kinds = BTreeMap::new();
    let first_sync = tally(&facts, &mut cluster_kinds);
    table(&format!("cluster agent, 10,000 pods' first sync: {first_sync} bytes"), &cluster_kinds);

    // ---- a node agent: 24 h of an 8-GPU node, sampled every 10 s, 60 s windows, 4 pods per GPU
    let processes: Vec<(u32, u32, f64)> = (0..8u32)
        .flat_map(|g| (0..4u32).map(move |p| (g, 1000 + 10 * (g * 4 + p), 10.0 + f64::from(p) * 5.0)))
        .collect();
    let mut source = SimulatedSource::new("gpu-node-1", "NVIDIA H100 80GB HBM3", 8).with_processes(processes);
    let mut collector = NodeCollector::new("gpu-node-1", 60);
    let mut rollup = ProcessRollup::new("gpu-node-1", 60);
    let start = at;
    let mut node_facts = Vec::new();
    for i in 0..(24 * 360) {
        let t = start + time::Duration::seconds(10 * i);
        let samples = source.scrape(t).unwrap();
        node_facts.extend(collector.observe(&samples, t));
        let running = source.processes();
        let activity = source.process_activity();
        node_facts.extend(rollup.observe(&activity, &running, &Cgroups, t));
    }
    let mut node_kinds = BTreeMap::new();
    let day = tally(&node_facts, &mut node_kinds);
    table(&format!("node agent, 24 h of 8 GPUs: {day} bytes"), &node_kinds);

    let per_1000_pods = first_sync / 10;
    let per_gpu_day = day / 8;
    eprintln!(
        "per 1,000 pods: {per_1000_pods} bytes ({:.1} MiB); per GPU-day: {per_gpu_day} bytes ({:.2} MiB); default cap \
         {} MiB",
        per_1000_pods as f64 / 1048576.0,
        per_gpu_day as f64 / 1048576.0,
        cap >> 20
    );
    // The cluster agent's first sync of 10,000 pods fits the default cap with room for the backlog that follows.
    assert!(first_sync * 4 <= cap, "{first_sync} bytes: the default cap of {cap} is too small");
    // A node agent holds at least a week of its node's telemetry before it has to drop the oldest.
    assert!(day * 7 <= cap, "{day} bytes a day: the default cap of {cap} holds less than a week");
    // Allocation facts dominate the cluster's sync; telemetry dominates the node's day.
    assert!(cluster_kinds.get("allocation_started").is_some_and(|(n, _)| *n == 10_000), "{cluster_kinds:?}");
    assert!(node_kinds.get("telemetry").is_some_and(|(n, _)| *n >= 8 * 1439), "{node_kinds:?}");
}
