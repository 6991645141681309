//! `gpuledger-agent inspect KIND FILE`: prints, as JSON lines, exactly the facts the agent would send for one
//! input — through the same code as the live modes. Notes for people (why nothing was sent, previews of
//! workload templates) go to stderr.

use std::io::Write;

use anyhow::{Context, Result, bail};
use gpuledger_core::wire::Fact;
use serde_json::Value;
use time::OffsetDateTime;

use crate::{
    k8s::{self, LabelKeys, PodContext},
    metrics::{dcgm, modelserver, prom},
    nvidia,
};

/// What `inspect` can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Kubernetes Pods (and workload templates, previewed).
    Pod,
    /// Kubernetes Nodes.
    Node,
    /// Kubernetes Namespaces.
    Namespace,
    /// KubeVirt VirtualMachineInstances.
    Vmi,
    /// Any Kubernetes objects above, by their `kind`.
    K8s,
    /// DCGM Exporter `/metrics` text.
    Dcgm,
    /// vLLM / Triton / TGI / NIM `/metrics` text (server detected from the metric names, or `--server`).
    Modelserver,
    /// `nvidia-smi -q -x` XML: device facts per GPU (MIG layout included); processes as records.
    NvidiaSmi,
    /// `nvidia-smi --query-gpu=… --format=csv` (device facts) or `--query-compute-apps=…` CSV (process records).
    GpuCsv,
    /// `nvidia-smi -L` (device facts; MIG devices as records) or the plain `nvidia-smi` table (records).
    NvidiaSmiL,
    /// NVIDIA device plugin / GPU Operator time-slicing config, bare or in a ConfigMap: timeslice_policy records.
    DevicePluginConfig,
    /// mig-parted config (bare, ConfigMap or GPU Operator Helm values): mig_layout records.
    MigConfig,
    /// GPU Feature Discovery node labels (JSON map) or a Node: the node fact, or a record when there is no UID.
    NodeLabels,
    /// KubeVirt `permittedHostDevices`: permitted_device records (PCI passthrough, mediated vGPU).
    KubevirtConfig,
    /// `kubectl get` table output: read, but it carries no allocation facts (a note says so).
    KubectlTable,
}

/// The result of inspecting one file.
#[derive(Debug, Default)]
pub struct Output {
    /// Facts, as the agent would send them.
    pub facts: Vec<Fact>,
    /// Other JSON records, each with a `kind` (model-server snapshots, NVIDIA configs and processes: not facts yet).
    pub records: Vec<Value>,
    /// Notes for people.
    pub notes: Vec<String>,
}

/// Reads Kubernetes documents (JSON, or YAML with one or more documents; leading `#` lines are comments).
pub fn read_documents(text: &str) -> Result<Vec<Value>> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(trimmed).context("parsing JSON")?;
        return Ok(match v {
            Value::Array(items) => items,
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List")) => {
                o.get("items").and_then(Value::as_array).cloned().unwrap_or_default()
            }
            other => vec![other],
        });
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).context("parsing YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Inspects `text` as `kind`. `timeslice_replicas`: the declared replicas of time-sliced GPUs when the objects
/// do not say (as the live agent's `--timeslice-replicas`).
pub fn inspect(kind: Kind, text: &str, observed_at: OffsetDateTime, timeslice_replicas: Option<u32>) -> Result<Output> {
    inspect_with(kind, text, observed_at, timeslice_replicas, &modelserver::ReadOptions::default())
}

/// [`inspect`], with how to read model-server metrics (`--server`, `--model`).
pub fn inspect_with(
    kind: Kind,
    text: &str,
    observed_at: OffsetDateTime,
    timeslice_replicas: Option<u32>,
    modelserver_options: &modelserver::ReadOptions,
) -> Result<Output> {
    let mut out = Output::default();
    let keys = LabelKeys::default();
    match kind {
        Kind::Dcgm => {
            let exposition = prom::parse(text)?;
            let devices = dcgm::devices(&exposition.samples, "unknown-node");
            let mut rollup = dcgm::SampleRollup::new("unknown-node");
            rollup.observe(&exposition.samples, observed_at);
            let rollups = rollup.drain(observed_at + time::Duration::minutes(1));
            out.facts = dcgm::facts(&devices, &rollups, observed_at);
            if out.facts.is_empty() {
                out.notes.push("no DCGM device rows found".into());
            }
        }
        Kind::Modelserver => {
            let exposition = prom::parse(text)?;
            for s in modelserver::read(&exposition.samples, modelserver_options) {
                if s.server == modelserver::Server::Tgi && s.model == modelserver::UNKNOWN_MODEL {
                    out.notes.push(format!(
                        "TGI metrics carry no model name: shown as model {:?}; pass --model NAME",
                        modelserver::UNKNOWN_MODEL
                    ));
                }
                let mut record = serde_json::to_value(&s)?;
                if let Some(o) = record.as_object_mut() {
                    o.insert("kind".into(), "modelserver_snapshot".into());
                    o.insert("queue_depth".into(), serde_json::to_value(s.queue_depth())?);
                }
                out.records.push(record);
            }
            out.notes.push(
                "model-server snapshots are cumulative productive-work measurements; two scrapes make a window's \
                 service_usage facts; shown here, not sent"
                    .into(),
            );
            if out.records.is_empty() {
                out.notes.push(match modelserver_options.server {
                    Some(s) => format!("no {} metrics found", s.name()),
                    None => "no vLLM, Triton, TGI or NIM metrics found".into(),
                });
            }
        }
        Kind::NvidiaSmi
        | Kind::GpuCsv
        | Kind::NvidiaSmiL
        | Kind::DevicePluginConfig
        | Kind::MigConfig
        | Kind::NodeLabels
        | Kind::KubevirtConfig
        | Kind::KubectlTable => {
            let found = match kind {
                Kind::NvidiaSmi => nvidia::inspect_smi_xml(text, observed_at)?,
                Kind::GpuCsv => nvidia::inspect_gpu_csv(text, observed_at)?,
                Kind::NvidiaSmiL => nvidia::inspect_smi_text(text, observed_at)?,
                Kind::DevicePluginConfig => nvidia::Found {
                    records: nvidia::device_plugin_config(text)?,
                    notes: vec![
                        "time-slicing policies declare 1/replicas of a device per request; shown, not sent".into(),
                    ],
                    ..nvidia::Found::default()
                },
                Kind::MigConfig => nvidia::Found {
                    records: nvidia::mig_config(text)?,
                    notes: vec!["mig-parted layouts are declarations, not observations; shown, not sent".into()],
                    ..nvidia::Found::default()
                },
                Kind::NodeLabels => nvidia::node_labels(text, observed_at)?,
                Kind::KubevirtConfig => nvidia::kubevirt_config(text)?,
                _ => nvidia::kubectl_table(text)?,
            };
            out.facts = found.facts;
            out.records = found.records;
            out.notes = found.notes;
        }
        _ => {
            let docs = read_documents(text)?;
            // A file with Nodes and Namespaces next to its Pods is read as the cluster agent reads the cluster:
            // each pod with its node (model, MIG strategy, time-slicing) and its namespace.
            let mut around = Around::default();
            for doc in &docs {
                let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
                match doc["kind"].as_str() {
                    Some("Node") => {
                        let labels: std::collections::BTreeMap<String, String> = doc["metadata"]["labels"]
                            .as_object()
                            .map(|l| l.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
                            .unwrap_or_default();
                        around.nodes.insert(name, k8s::NodeSharing::from_labels(&labels));
                    }
                    Some("Namespace") => {
                        if let Some(uid) = doc["metadata"]["uid"].as_str().and_then(|u| uuid::Uuid::parse_str(u).ok()) {
                            around.namespaces.insert(name, uid);
                        }
                    }
                    _ => {}
                }
            }
            let mut matched = 0;
            for doc in docs {
                let doc_kind = doc["kind"].as_str().unwrap_or("").to_string();
                let wanted = match kind {
                    Kind::Pod => matches!(
                        doc_kind.as_str(),
                        "Pod" | "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" | "CronJob"
                    ),
                    Kind::Node => doc_kind == "Node",
                    Kind::Namespace => doc_kind == "Namespace",
                    Kind::Vmi => doc_kind == "VirtualMachineInstance",
                    _ => true,
                };
                if !wanted {
                    if kind == Kind::K8s && !doc_kind.is_empty() {
                        out.notes.push(format!("{doc_kind}: not an object the agent derives facts from"));
                    }
                    continue;
                }
                matched += 1;
                inspect_object(&doc, &doc_kind, &keys, observed_at, timeslice_replicas, &around, &mut out)?;
            }
            if matched == 0 {
                bail!("no {kind:?} object in the input");
            }
        }
    }
    Ok(out)
}

/// The Nodes and Namespaces of the same input, by name.
#[derive(Default)]
struct Around {
    nodes: std::collections::BTreeMap<String, k8s::NodeSharing>,
    namespaces: std::collections::BTreeMap<String, uuid::Uuid>,
}

fn inspect_object(
    doc: &Value,
    kind: &str,
    keys: &LabelKeys,
    at: OffsetDateTime,
    replicas: Option<u32>,
    around: &Around,
    out: &mut Output,
) -> Result<()> {
    let name = doc["metadata"]["name"].as_str().unwrap_or("(unnamed)").to_string();
    match kind {
        "Pod" => {
            let pod = k8s::Pod::from_value(doc.clone())?;
            let node = pod.node_name().and_then(|n| around.nodes.get(n)).cloned();
            let sharing = node.clone().unwrap_or_else(|| pod.implied_sharing());
            let (requests, problems) = pod.gpu_requests(&sharing, replicas);
            out.notes.extend(problems.into_iter().map(|p| format!("Pod {name}: {p}")));
            if requests.is_empty() {
                out.notes.push(format!("Pod {name}: requests no GPU"));
                return Ok(());
            }
            if doc["metadata"]["uid"].is_null() || doc["status"].is_null() {
                for r in &requests {
                    out.notes.push(format!(
                        "Pod {name}: not running (no uid/status): would be {} × {} ({}) for container {} once started",
                        r.units, r.resource, r.mode, r.container
                    ));
                }
                return Ok(());
            }
            let namespace_uid = doc["metadata"]["namespace"].as_str().and_then(|n| around.namespaces.get(n)).copied();
            let ctx = PodContext { node, namespace_uid, default_replicas: replicas, ..PodContext::default() };
            let (facts, _) = k8s::pod_facts(&pod, &ctx, keys, at)?;
            if facts.is_empty() {
                out.notes.push(format!("Pod {name}: no container has started yet"));
            }
            out.facts.extend(facts);
        }
        "Node" => match k8s::node_fact(doc, at)? {
            Some(f) => out.facts.push(f),
            None => out.notes.push(format!("Node {name}: no NVIDIA GPU labels or resources")),
        },
        "Namespace" => out.facts.push(k8s::namespace_fact(doc, keys, None, at)?),
        "VirtualMachineInstance" => {
            let requests = k8s::vmi_requests(doc);
            let facts = k8s::vmi_facts(doc, keys, at)?;
            if facts.is_empty() {
                for r in &requests {
                    out.notes.push(format!(
                        "VMI {name}: not running (no Running phase transition): would be {} ({}) for device {}",
                        r.resource, r.mode, r.container
                    ));
                }
                if requests.is_empty() {
                    out.notes.push(format!("VMI {name}: no NVIDIA GPU devices"));
                }
            }
            out.facts.extend(facts);
        }
        workload => match k8s::pod_template(doc) {
            Some(template) => {
                let (requests, problems) = template.gpu_requests(&template.implied_sharing(), replicas);
                out.notes.extend(problems.into_iter().map(|p| format!("{workload} {name}: {p}")));
                for r in requests {
                    out.notes.push(format!(
                        "{workload} {name}: each pod would hold {} × {} ({}) in container {}",
                        r.units, r.resource, r.mode, r.container
                    ));
                }
            }
            None => out.notes.push(format!("{workload} {name}: not an object the agent derives facts from")),
        },
    }
    Ok(())
}

/// Writes facts and records as JSON lines to `stdout`, notes to `stderr`.
pub fn print(out: &Output, stdout: &mut impl Write, stderr: &mut impl Write) -> Result<()> {
    for f in &out.facts {
        serde_json::to_writer(&mut *stdout, f)?;
        writeln!(stdout)?;
    }
    for r in &out.records {
        serde_json::to_writer(&mut *stdout, r)?;
        writeln!(stdout)?;
    }
    for n in &out.notes {
        writeln!(stderr, "note: {n}")?;
    }
    Ok(())
}
