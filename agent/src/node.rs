//! `node` mode (a DaemonSet on GPU nodes): device inventory and utilization samples, rolled up on the node
//! (per minute: min/avg/max; energy as counter deltas) before they are spooled and sent.
//!
//! Every source — NVML, a DCGM Exporter endpoint, or a simulated device set — yields DCGM-shaped samples
//! (`DCGM_FI_DEV_GPU_UTIL{UUID=…}` …), so inventory and rollups go through one code path
//! ([`crate::metrics::dcgm`]) whatever the source; CI runs the simulated set through the same code.

use std::collections::{BTreeMap, HashMap};

use gpuledger_core::wire::Fact;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::metrics::{
    dcgm::{self, SampleRollup, field},
    prom::{self, Sample},
};

/// Why a GPU source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// NVML could not start (no driver, no GPU).
    #[error(
        "no NVIDIA GPU found: NVML could not be initialized ({0}). On a GPU node, check that the driver is \
         installed and libnvidia-ml.so.1 is visible to the container (NVIDIA container toolkit); elsewhere use \
         --source simulated or --source dcgm"
    )]
    NoGpu(String),
    /// A query failed.
    #[error("{0}")]
    Query(String),
}

/// Something that can be sampled: returns DCGM-shaped samples, one series per device and metric.
pub trait GpuSource: Send {
    /// One sample of every device.
    fn scrape(&mut self, at: OffsetDateTime) -> Result<Vec<Sample>, GpuError>;

    /// Processes running on each GPU: (GPU UUID, PID). Sources that cannot see processes return none.
    fn processes(&mut self) -> Vec<(String, u32)> {
        Vec::new()
    }

    /// Each GPU's processes' activity since the previous call, for the GPUs whose driver reports it (a GPU listed
    /// with no process was sampled and nothing ran). Sources without per-process samples return none.
    fn process_activity(&mut self) -> Vec<GpuProcesses> {
        Vec::new()
    }
}

/// One GPU's processes' activity over the time since the previous reading.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuProcesses {
    /// GPU UUID.
    pub gpu_uuid: String,
    /// (PID, SM %, memory-bandwidth %) per process that showed activity, averaged over the driver's samples.
    pub processes: Vec<(u32, f64, f64)>,
}

/// NVML's per-process samples of one GPU → each process's mean SM and memory activity (the driver reports a
/// process only in the sample periods where it did something; the sampling code counts the rest as zero).
pub fn mean_per_process(samples: &[(u32, u32, u32)]) -> Vec<(u32, f64, f64)> {
    let mut by_pid: BTreeMap<u32, (f64, f64, u32)> = BTreeMap::new();
    for &(pid, sm, mem) in samples {
        let e = by_pid.entry(pid).or_insert((0.0, 0.0, 0));
        e.0 += f64::from(sm.min(100));
        e.1 += f64::from(mem.min(100));
        e.2 += 1;
    }
    by_pid.into_iter().map(|(pid, (sm, mem, n))| (pid, sm / f64::from(n), mem / f64::from(n))).collect()
}

#[derive(Debug, Default)]
struct PodAcc {
    /// Samplings in which the pod's processes showed, and their sums and extremes.
    seen: u32,
    sm: (f64, f64, f64),
    mem: (f64, f64, f64),
}

#[derive(Debug, Default)]
struct GpuWindow {
    samplings: u32,
    pods: BTreeMap<Uuid, PodAcc>,
}

/// Rolls per-process activity up per GPU and window into `process_telemetry` facts: each pod's SM activity summed
/// over its processes per sampling, then min/avg/max over the window's samplings (a sampling without the pod is 0).
pub struct ProcessRollup {
    node: String,
    window_s: i64,
    current: Option<OffsetDateTime>,
    gpus: BTreeMap<String, GpuWindow>,
}

impl ProcessRollup {
    /// A rollup for `node` with `window_secs`-second windows (the same as the device rollups').
    pub fn new(node: impl Into<String>, window_secs: u32) -> Self {
        Self { node: node.into(), window_s: i64::from(window_secs.max(1)), current: None, gpus: BTreeMap::new() }
    }

    fn window_start(&self, at: OffsetDateTime) -> Option<OffsetDateTime> {
        let t = at.unix_timestamp();
        OffsetDateTime::from_unix_timestamp(t - t.rem_euclid(self.window_s)).ok()
    }

    /// Takes one sampling at `at`: `activity` from the source, `running` its (GPU, PID) list (a running process
    /// without samples did nothing), `cgroups` to find each process's pod. Returns the facts of windows that closed.
    pub fn observe(
        &mut self,
        activity: &[GpuProcesses],
        running: &[(String, u32)],
        cgroups: &dyn CgroupReader,
        at: OffsetDateTime,
    ) -> Vec<Fact> {
        let window = self.window_start(at);
        let mut facts = Vec::new();
        if self.current.is_some() && window != self.current {
            facts = self.drain(at);
        }
        self.current = window;
        let mut pods_of: HashMap<u32, Option<Uuid>> = HashMap::new();
        let mut pod_of = |pid: u32| -> Option<Uuid> {
            *pods_of.entry(pid).or_insert_with(|| cgroups.cgroup(pid).as_deref().and_then(pod_from_cgroup).map(|p| p.0))
        };
        for gpu in activity {
            let mut this: BTreeMap<Uuid, (f64, f64)> = BTreeMap::new();
            for (g, pid) in running {
                if *g == gpu.gpu_uuid
                    && let Some(pod) = pod_of(*pid)
                {
                    this.entry(pod).or_insert((0.0, 0.0));
                }
            }
            for &(pid, sm, mem) in &gpu.processes {
                // A process outside any pod (the node's own) is nobody's allocation.
                let Some(pod) = pod_of(pid) else { continue };
                let e = this.entry(pod).or_insert((0.0, 0.0));
                e.0 += sm;
                e.1 += mem;
            }
            let w = self.gpus.entry(gpu.gpu_uuid.clone()).or_default();
            w.samplings += 1;
            for (pod, (sm, mem)) in this {
                let (sm, mem) = (sm.clamp(0.0, 100.0), mem.clamp(0.0, 100.0));
                let acc = w.pods.entry(pod).or_default();
                if acc.seen == 0 {
                    acc.sm = (sm, sm, sm);
                    acc.mem = (mem, mem, mem);
                } else {
                    acc.sm = (acc.sm.0 + sm, acc.sm.1.min(sm), acc.sm.2.max(sm));
                    acc.mem = (acc.mem.0 + mem, acc.mem.1.min(mem), acc.mem.2.max(mem));
                }
                acc.seen += 1;
            }
        }
        facts
    }

    /// Closes the current window (also at shutdown): one fact per GPU sampled in it.
    pub fn drain(&mut self, at: OffsetDateTime) -> Vec<Fact> {
        use gpuledger_core::wire::{FactBody, PodActivity, ProcessTelemetry, Stat, event_id};
        let Some(start) = self.current.take() else {
            self.gpus.clear();
            return Vec::new();
        };
        let end = start + time::Duration::seconds(self.window_s);
        let stat = |(sum, min, max): (f64, f64, f64), seen: u32, samplings: u32| {
            let avg = (sum / f64::from(samplings.max(1))).clamp(0.0, 100.0);
            // Samplings without the pod were zeros.
            let min = if seen < samplings { 0.0 } else { min.min(avg) };
            Stat { min, avg, max: max.max(avg) }
        };
        let mut facts = Vec::new();
        for (gpu, w) in std::mem::take(&mut self.gpus) {
            if w.samplings == 0 {
                continue;
            }
            let pods = w
                .pods
                .into_iter()
                .map(|(pod_uid, acc)| PodActivity {
                    pod_uid,
                    sm_pct: stat(acc.sm, acc.seen, w.samplings),
                    memory_pct: Some(stat(acc.mem, acc.seen, w.samplings)),
                })
                .collect();
            let Ok(stamp) = start.format(&time::format_description::well_known::Rfc3339) else { continue };
            facts.push(Fact {
                event_id: event_id("process-window", &[&self.node, &gpu, &stamp]),
                observed_at: at,
                body: FactBody::ProcessTelemetry(ProcessTelemetry {
                    node: self.node.clone(),
                    gpu_uuid: gpu,
                    window_start: start,
                    window_end: end,
                    samples: w.samplings,
                    pods,
                }),
            });
        }
        facts
    }
}

/// A process's pod and container, from its cgroup path. Both systemd (`kubepods-burstable-pod<uid with _>.slice/
/// cri-containerd-<id>.scope`) and cgroupfs (`/kubepods/burstable/pod<uid>/<id>`) layouts are understood.
pub fn pod_from_cgroup(cgroup: &str) -> Option<(Uuid, Option<String>)> {
    for line in cgroup.lines() {
        let path = line.rsplit(':').next().unwrap_or(line);
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            let Some(at) = part.rfind("pod") else { continue };
            let rest = part[at + 3..].trim_end_matches(".slice");
            let Ok(uid) = Uuid::parse_str(&rest.replace('_', "-")) else { continue };
            let container = parts.get(i + 1).map(|c| {
                let c = c.trim_end_matches(".scope");
                c.rsplit('-').next().unwrap_or(c).to_string()
            });
            return Some((uid, container));
        }
    }
    None
}

/// Reads a process's cgroup (`/proc/<pid>/cgroup` in production; a fake in tests).
pub trait CgroupReader: Send {
    /// The cgroup file's content, if the process exists.
    fn cgroup(&self, pid: u32) -> Option<String>;
}

/// Reads the node's `/proc` (the DaemonSet runs with `hostPID: true` so it sees the node's processes; or the
/// host's `/proc` mounted elsewhere, `--host-proc`).
pub struct ProcCgroups {
    /// The proc file system's root, usually `/proc`.
    pub root: std::path::PathBuf,
}

impl CgroupReader for ProcCgroups {
    fn cgroup(&self, pid: u32) -> Option<String> {
        // A cgroup file is a few lines; more than 64 KiB is not one.
        use std::io::Read;
        let file = std::fs::File::open(self.root.join(pid.to_string()).join("cgroup")).ok()?;
        let mut text = String::new();
        file.take(64 * 1024).read_to_string(&mut text).ok()?;
        Some(text)
    }
}

/// GPU processes mapped to pods: `device_assigned` facts (resource `process`), each sent once per
/// (device, pod, container).
pub fn process_facts(
    node: &str,
    processes: &[(String, u32)],
    cgroups: &dyn CgroupReader,
    seen: &mut std::collections::HashSet<String>,
    at: OffsetDateTime,
) -> Vec<Fact> {
    use gpuledger_core::wire::{DeviceAssignment, FactBody, event_id};
    let mut out = Vec::new();
    for (gpu, pid) in processes {
        let Some((pod_uid, container)) = cgroups.cgroup(*pid).as_deref().and_then(pod_from_cgroup) else { continue };
        let container = container.unwrap_or_default();
        let id = event_id("device-process", &[node, gpu, &pod_uid.to_string(), &container]);
        if !seen.insert(id.clone()) {
            continue;
        }
        out.push(Fact {
            event_id: id,
            observed_at: at,
            body: FactBody::DeviceAssigned(DeviceAssignment {
                node: node.to_string(),
                pod_uid: Some(pod_uid),
                pod_namespace: None,
                pod_name: None,
                container,
                resource: "process".into(),
                device_ids: vec![gpu.clone()],
                observed_at: at,
            }),
        });
    }
    out
}

fn sample(name: &str, labels: &[(&str, String)], value: f64) -> Sample {
    Sample {
        name: name.to_string(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        value,
        timestamp_ms: None,
    }
}

/// A simulated device set: deterministic load patterns, for CI and benchmarks (no GPU needed).
pub struct SimulatedSource {
    node: String,
    model: String,
    gpus: u32,
    memory_mib: f64,
    /// Energy counters, millijoules.
    energy_mj: Vec<f64>,
    last: Option<OffsetDateTime>,
    /// Simulated processes: (GPU index, PID, SM %).
    processes: Vec<(u32, u32, f64)>,
}

impl SimulatedSource {
    /// `gpus` devices of `model` on `node`.
    pub fn new(node: impl Into<String>, model: impl Into<String>, gpus: u32) -> Self {
        Self {
            node: node.into(),
            model: model.into(),
            gpus,
            memory_mib: 81_559.0,
            energy_mj: vec![1_000_000_000.0; gpus as usize],
            last: None,
            processes: Vec::new(),
        }
    }

    /// Adds simulated processes `(GPU index, PID, SM %)`; their pods come from the cgroup reader, as on a node.
    pub fn with_processes(mut self, processes: Vec<(u32, u32, f64)>) -> Self {
        self.processes = processes.into_iter().filter(|p| p.0 < self.gpus).collect();
        self
    }

    /// The simulated device UUID of GPU `i`.
    pub fn uuid(i: u32) -> String {
        format!("GPU-5a1e0000-0000-4000-8000-{:012x}", i)
    }
}

impl GpuSource for SimulatedSource {
    fn processes(&mut self) -> Vec<(String, u32)> {
        self.processes.iter().map(|&(gpu, pid, _)| (Self::uuid(gpu), pid)).collect()
    }

    fn process_activity(&mut self) -> Vec<GpuProcesses> {
        if self.processes.is_empty() {
            return Vec::new();
        }
        (0..self.gpus)
            .map(|gpu| GpuProcesses {
                gpu_uuid: Self::uuid(gpu),
                processes: self
                    .processes
                    .iter()
                    .filter(|p| p.0 == gpu && p.2 > 0.0)
                    .map(|&(_, pid, sm)| (pid, sm.min(100.0), sm.min(100.0) / 2.0))
                    .collect(),
            })
            .collect()
    }

    fn scrape(&mut self, at: OffsetDateTime) -> Result<Vec<Sample>, GpuError> {
        let dt = self.last.map_or(0.0, |l| (at - l).as_seconds_f64().max(0.0));
        self.last = Some(at);
        let t = at.unix_timestamp() as f64;
        let mut out = Vec::with_capacity(self.gpus as usize * 5);
        for i in 0..self.gpus {
            // Each GPU has its own phase; even GPUs busy, odd ones mostly idle (an idle reservation).
            let phase = f64::from(i) * 0.7;
            let util = if i % 2 == 0 {
                70.0 + 25.0 * (t / 300.0 + phase).sin()
            } else {
                2.0 + 2.0 * (t / 60.0 + phase).sin().abs()
            };
            let power = 80.0 + util * 5.5;
            self.energy_mj[i as usize] += power * dt * 1000.0;
            let labels = [
                ("gpu", i.to_string()),
                ("UUID", Self::uuid(i)),
                ("modelName", self.model.clone()),
                ("Hostname", self.node.clone()),
            ];
            let used = self.memory_mib * (0.1 + util / 150.0);
            out.push(sample(field::GPU_UTIL, &labels, util.round()));
            out.push(sample(field::FB_USED, &labels, used.round()));
            out.push(sample(field::FB_FREE, &labels, (self.memory_mib - used).round()));
            out.push(sample(field::POWER_USAGE, &labels, power));
            out.push(sample(field::TOTAL_ENERGY, &labels, self.energy_mj[i as usize].round()));
        }
        Ok(out)
    }
}

/// NVML on this node (the production source). Loads `libnvidia-ml.so.1` at run time.
pub struct NvmlSource {
    nvml: nvml_wrapper::Nvml,
    node: String,
    /// Per GPU, the driver timestamp of the last per-process sample read (the next read starts after it).
    last_process_sample: HashMap<String, u64>,
}

impl NvmlSource {
    /// Initializes NVML; without a driver this fails with [`GpuError::NoGpu`].
    pub fn new(node: impl Into<String>) -> Result<Self, GpuError> {
        let nvml = nvml_wrapper::Nvml::init().map_err(|e| GpuError::NoGpu(e.to_string()))?;
        Ok(Self { nvml, node: node.into(), last_process_sample: HashMap::new() })
    }
}

impl GpuSource for NvmlSource {
    fn processes(&mut self) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        for i in 0..self.nvml.device_count().unwrap_or(0) {
            let Ok(d) = self.nvml.device_by_index(i) else { continue };
            let Ok(uuid) = d.uuid() else { continue };
            for p in d.running_compute_processes().unwrap_or_default() {
                out.push((uuid.clone(), p.pid));
            }
        }
        out
    }

    fn process_activity(&mut self) -> Vec<GpuProcesses> {
        use nvml_wrapper::error::NvmlError;
        let mut out = Vec::new();
        for i in 0..self.nvml.device_count().unwrap_or(0) {
            let Ok(d) = self.nvml.device_by_index(i) else { continue };
            let Ok(uuid) = d.uuid() else { continue };
            let since = self.last_process_sample.get(&uuid).copied();
            let samples = match d.process_utilization_stats(since) {
                Ok(s) => s,
                // No sample since `since`: sampled, and no process did anything.
                Err(NvmlError::NotFound) => Vec::new(),
                // Not supported (MIG mode, vGPU guests, old GPUs) or failed: not measured, never zero.
                Err(e) => {
                    tracing::debug!(gpu = %uuid, error = %e, "no per-process utilization");
                    continue;
                }
            };
            if let Some(latest) = samples.iter().map(|s| s.timestamp).max() {
                self.last_process_sample.insert(uuid.clone(), latest);
            } else if since.is_none() {
                // First read with nothing buffered: start from now on the next one.
                self.last_process_sample.insert(uuid.clone(), 0);
            }
            // The first read returns everything the driver buffered (seconds, from before the agent started):
            // it is kept, as the window it falls in is the current one.
            let triples: Vec<(u32, u32, u32)> = samples.iter().map(|s| (s.pid, s.sm_util, s.mem_util)).collect();
            out.push(GpuProcesses { gpu_uuid: uuid, processes: mean_per_process(&triples) });
        }
        out
    }

    fn scrape(&mut self, _at: OffsetDateTime) -> Result<Vec<Sample>, GpuError> {
        let q = |e: nvml_wrapper::error::NvmlError| GpuError::Query(e.to_string());
        let mut out = Vec::new();
        for i in 0..self.nvml.device_count().map_err(q)? {
            let d = self.nvml.device_by_index(i).map_err(q)?;
            let uuid = d.uuid().map_err(q)?;
            let model = d.name().map_err(q)?;
            let labels = [
                ("gpu", i.to_string()),
                ("UUID", uuid.clone()),
                ("modelName", model.clone()),
                ("Hostname", self.node.clone()),
            ];
            if let Ok(u) = d.utilization_rates() {
                out.push(sample(field::GPU_UTIL, &labels, f64::from(u.gpu)));
            }
            if let Ok(m) = d.memory_info() {
                out.push(sample(field::FB_USED, &labels, (m.used / (1024 * 1024)) as f64));
                out.push(sample(field::FB_FREE, &labels, (m.free / (1024 * 1024)) as f64));
            }
            if let Ok(p) = d.power_usage() {
                out.push(sample(field::POWER_USAGE, &labels, f64::from(p) / 1000.0));
            }
            if let Ok(e) = d.total_energy_consumption() {
                out.push(sample(field::TOTAL_ENERGY, &labels, e as f64));
            }
            // MIG instances: profile from the MIG device's name ("… MIG 1g.10gb"); NVML's wrapper does not expose
            // the GPU-instance ID, so the MIG device index stands in for it.
            if d.mig_mode().is_ok_and(|m| m.current == 1) {
                let count = d.mig_device_count().unwrap_or(0);
                for m in 0..count {
                    let Ok(mig) = d.mig_device_by_index(m) else {
                        continue;
                    };
                    let profile =
                        mig.name().ok().and_then(|n| n.rsplit(' ').next().map(str::to_string)).unwrap_or_default();
                    let mut labels = labels.to_vec();
                    labels.push(("GPU_I_PROFILE", profile));
                    labels.push(("GPU_I_ID", m.to_string()));
                    if let Ok(mem) = mig.memory_info() {
                        out.push(sample(field::FB_USED, &labels, (mem.used / (1024 * 1024)) as f64));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// A DCGM Exporter endpoint (`http://…:9400/metrics`).
pub struct DcgmSource {
    url: String,
    client: reqwest::blocking::Client,
}

impl DcgmSource {
    /// Scrapes `url`.
    pub fn new(url: impl Into<String>) -> Result<Self, GpuError> {
        let client = reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| GpuError::Query(e.to_string()))?;
        Ok(Self { url: url.into(), client })
    }
}

impl GpuSource for DcgmSource {
    fn scrape(&mut self, _at: OffsetDateTime) -> Result<Vec<Sample>, GpuError> {
        let text = self
            .client
            .get(&self.url)
            .send()
            .and_then(|r| r.error_for_status())
            .map_err(|e| GpuError::Query(format!("{}: {e}", self.url)))
            .and_then(|r| {
                use std::io::Read;
                let mut text = String::new();
                r.take(prom::MAX_BODY_BYTES as u64 + 1)
                    .read_to_string(&mut text)
                    .map_err(|e| GpuError::Query(format!("{}: {e}", self.url)))?;
                if text.len() > prom::MAX_BODY_BYTES {
                    return Err(GpuError::Query(format!(
                        "{}: the metrics are larger than {} bytes",
                        self.url,
                        prom::MAX_BODY_BYTES
                    )));
                }
                Ok(text)
            })?;
        Ok(prom::parse(&text).map_err(|e| GpuError::Query(format!("{}: {e}", self.url)))?.samples)
    }
}

/// Samples a source, rolls the samples up per window, and turns them into facts.
pub struct NodeCollector {
    node: String,
    rollup: SampleRollup,
    window: time::Duration,
    /// Device facts already produced (by content), so an unchanged inventory is not re-sent.
    devices: HashMap<String, String>,
    current_window: Option<OffsetDateTime>,
    /// XID, retired-page and presence state of each GPU between scrapes (device faults).
    faults: crate::metrics::faults::FaultWatch,
}

impl NodeCollector {
    /// A collector for `node` with `window_secs`-second rollups.
    pub fn new(node: impl Into<String>, window_secs: u32) -> Self {
        let node = node.into();
        Self {
            rollup: SampleRollup::new(node.clone()).with_window(window_secs),
            node,
            window: time::Duration::seconds(i64::from(window_secs)),
            devices: HashMap::new(),
            current_window: None,
            faults: crate::metrics::faults::FaultWatch::new(),
        }
    }

    /// Takes one scrape taken at `at`; returns the facts that became final: device facts that changed, and the
    /// rollups of windows that closed before `at`.
    pub fn observe(&mut self, samples: &[Sample], at: OffsetDateTime) -> Vec<Fact> {
        let mut facts = Vec::new();
        let window = self.rollup.window_start(at);
        if let (Some(previous), Some(now)) = (self.current_window, window)
            && now > previous
        {
            let rollups = self.rollup.drain(now);
            facts.extend(rollups.iter().map(|r| dcgm::telemetry_fact(r, at)));
        }
        self.current_window = window;
        for mut d in dcgm::devices(samples, &self.node) {
            // The node agent knows its node; exporters' Hostname can be the exporter pod's name.
            d.node = self.node.clone();
            let tag = dcgm::device_content_tag(&d);
            if self.devices.get(&d.gpu_uuid) != Some(&tag) {
                self.devices.insert(d.gpu_uuid.clone(), tag);
                facts.push(dcgm::device_fact(&d, at));
            }
        }
        for f in self.faults.observe(&self.node, samples, at) {
            facts.push(crate::metrics::faults::fault_fact(&f, at));
        }
        self.rollup.observe(samples, at);
        facts
    }

    /// Forgets which device facts were sent, so the next scrape sends the whole inventory again (after the spool
    /// dropped facts: the server stores duplicates once).
    pub fn resend_inventory(&mut self) {
        self.devices.clear();
    }

    /// Closes the current window (at shutdown): its partial rollup is sent rather than lost.
    pub fn flush(&mut self, at: OffsetDateTime) -> Vec<Fact> {
        let end = self.current_window.map_or(at, |w| w + self.window);
        self.rollup.drain(end).iter().map(|r| dcgm::telemetry_fact(r, at)).collect()
    }
}

/// Per-device counts, for logs.
pub fn summarize(facts: &[Fact]) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for f in facts {
        *m.entry(f.body.kind()).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use gpuledger_core::wire::FactBody;
    use time::macros::datetime;

    #[test]
    fn a_simulated_8_gpu_node_yields_inventory_once_and_a_rollup_per_gpu_per_minute() {
        let mut source = SimulatedSource::new("gpu-node-1", "NVIDIA H100 80GB HBM3", 8);
        let mut collector = NodeCollector::new("gpu-node-1", 60);
        let start = datetime!(2026-10-01 10:00 UTC);
        let mut facts = Vec::new();
        // 3 minutes of samples every 10 s, then one more to close the third minute.
        for s in 0..=18 {
            let at = start + time::Duration::seconds(10 * s);
            let samples = source.scrape(at).unwrap();
            facts.extend(collector.observe(&samples, at));
        }
        let counts = summarize(&facts);
        assert_eq!(counts.get("device_observed"), Some(&8), "{counts:?}");
        assert_eq!(counts.get("telemetry"), Some(&24), "3 closed minutes × 8 GPUs: {counts:?}");
        let first = facts
            .iter()
            .find_map(|f| match &f.body {
                FactBody::Telemetry(t) if t.gpu_uuid == SimulatedSource::uuid(0) => Some(t.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(first.window_start, start);
        assert_eq!(first.window_end, start + time::Duration::minutes(1));
        assert_eq!(first.samples, 6);
        let u = first.utilization_pct.unwrap();
        assert!(u.min <= u.avg && u.avg <= u.max && u.max <= 100.0, "{u:?}");
        // Energy: counter deltas, positive, about power × 60 s.
        let e = first.energy_j.unwrap();
        let p = first.power_w.unwrap().avg;
        assert!(e > 0.0 && (e - p * 60.0).abs() / (p * 60.0) < 0.25, "energy {e} J vs power {p} W");
        // Idle odd GPUs are visibly idle.
        let idle = facts.iter().any(|f| matches!(&f.body, FactBody::Telemetry(t) if t.gpu_uuid == SimulatedSource::uuid(1) && t.utilization_pct.unwrap().max < 5.0));
        assert!(idle);
        let tail = collector.flush(start + time::Duration::seconds(185));
        assert_eq!(tail.len(), 8, "the open window is flushed at shutdown");
    }

    #[test]
    fn pods_are_found_from_both_cgroup_layouts() {
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6d4c1f62_27a5_4f67_9c39_2f6b4c1d0a11.slice/cri-containerd-3f1e2d.scope\n";
        let (uid, container) = pod_from_cgroup(systemd).unwrap();
        assert_eq!(uid.to_string(), "6d4c1f62-27a5-4f67-9c39-2f6b4c1d0a11");
        assert_eq!(container.as_deref(), Some("3f1e2d"));
        let cgroupfs = "12:memory:/kubepods/besteffort/pod0b7f2d8e-8d1c-4a8e-9a51-7b1f0e6a2c33/9a8b7c\n11:cpu:/kubepods/besteffort/pod0b7f2d8e-8d1c-4a8e-9a51-7b1f0e6a2c33/9a8b7c";
        let (uid, container) = pod_from_cgroup(cgroupfs).unwrap();
        assert_eq!(uid.to_string(), "0b7f2d8e-8d1c-4a8e-9a51-7b1f0e6a2c33");
        assert_eq!(container.as_deref(), Some("9a8b7c"));
        assert_eq!(pod_from_cgroup("0::/system.slice/sshd.service"), None, "not a pod");
    }

    #[test]
    fn gpu_processes_become_device_assignments_once() {
        struct Fake;
        impl CgroupReader for Fake {
            fn cgroup(&self, pid: u32) -> Option<String> {
                match pid {
                    100 => Some("0::/kubepods/burstable/pod6d4c1f62-27a5-4f67-9c39-2f6b4c1d0a11/abc".into()),
                    _ => Some("0::/user.slice/session-1.scope".into()),
                }
            }
        }
        let procs = vec![("GPU-1".to_string(), 100), ("GPU-1".to_string(), 200), ("GPU-2".to_string(), 100)];
        let mut seen = std::collections::HashSet::new();
        let at = datetime!(2026-10-01 10:00 UTC);
        let facts = process_facts("n1", &procs, &Fake, &mut seen, at);
        assert_eq!(facts.len(), 2, "a host process maps to no pod");
        assert!(
            matches!(&facts[0].body, FactBody::DeviceAssigned(a) if a.device_ids == ["GPU-1"] && a.container == "abc")
        );
        assert!(process_facts("n1", &procs, &Fake, &mut seen, at).is_empty(), "sent once");
    }

    struct TwoPods;
    impl CgroupReader for TwoPods {
        fn cgroup(&self, pid: u32) -> Option<String> {
            match pid {
                // Pod A has two processes (systemd layout), pod B one (cgroupfs layout).
                100 | 101 => Some(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6d4c1f62_27a5_4f67_9c39_2f6b4c1d0a11.slice/cri-containerd-abc.scope"
                        .into(),
                ),
                200 => Some("0::/kubepods/besteffort/pod0b7e8a55-1f0e-4c6a-9a51-5d8d2f0c9e01/def".into()),
                _ => Some("0::/user.slice/session-1.scope".into()),
            }
        }
    }

    #[test]
    fn nvml_samples_average_per_process() {
        let means = mean_per_process(&[(100, 40, 10), (100, 20, 30), (200, 5, 1), (100, 250, 0)]);
        assert_eq!(means.len(), 2);
        assert_eq!(means[0].0, 100);
        assert!((means[0].1 - (40.0 + 20.0 + 100.0) / 3.0).abs() < 1e-9, "clamped at 100: {:?}", means[0]);
        assert_eq!(means[1], (200, 5.0, 1.0));
    }

    #[test]
    fn per_process_activity_rolls_up_per_pod_and_window() {
        use gpuledger_core::wire::ProcessTelemetry;
        let a: Uuid = "6d4c1f62-27a5-4f67-9c39-2f6b4c1d0a11".parse().unwrap();
        let b: Uuid = "0b7e8a55-1f0e-4c6a-9a51-5d8d2f0c9e01".parse().unwrap();
        let mut r = ProcessRollup::new("n1", 60);
        let running = vec![("GPU-1".to_string(), 100), ("GPU-1".to_string(), 101), ("GPU-1".to_string(), 200)];
        let gpu = |procs: Vec<(u32, f64, f64)>| vec![GpuProcesses { gpu_uuid: "GPU-1".into(), processes: procs }];
        // Sampling 1: pod A's two processes 20 % + 10 %, pod B 40 %, a host process 50 % (nobody's).
        assert!(
            r.observe(
                &gpu(vec![(100, 20.0, 4.0), (101, 10.0, 2.0), (200, 40.0, 8.0), (999, 50.0, 0.0)]),
                &running,
                &TwoPods,
                datetime!(2026-10-01 10:00:10 UTC),
            )
            .is_empty()
        );
        // Sampling 2: only pod A's first process did anything; B is running but idle.
        assert!(
            r.observe(&gpu(vec![(100, 30.0, 6.0)]), &running, &TwoPods, datetime!(2026-10-01 10:00:40 UTC)).is_empty()
        );
        // Sampling 3 is in the next window: the first one closes.
        let facts = r.observe(&gpu(vec![]), &[], &TwoPods, datetime!(2026-10-01 10:01:05 UTC));
        assert_eq!(facts.len(), 1);
        let FactBody::ProcessTelemetry(ProcessTelemetry { window_start, window_end, samples, pods, gpu_uuid, .. }) =
            &facts[0].body
        else {
            panic!("{:?}", facts[0].body)
        };
        assert_eq!((gpu_uuid.as_str(), *samples), ("GPU-1", 2));
        assert_eq!((*window_start, *window_end), (datetime!(2026-10-01 10:00 UTC), datetime!(2026-10-01 10:01 UTC)));
        assert_eq!(pods.len(), 2, "the host process is no pod's: {pods:?}");
        let pa = pods.iter().find(|p| p.pod_uid == a).unwrap();
        assert_eq!((pa.sm_pct.min, pa.sm_pct.avg, pa.sm_pct.max), (30.0, 30.0, 30.0), "20 + 10, then 30");
        let pb = pods.iter().find(|p| p.pod_uid == b).unwrap();
        assert_eq!((pb.sm_pct.min, pb.sm_pct.avg, pb.sm_pct.max), (0.0, 20.0, 40.0), "40, then idle but running");
        // The same window again has the same event ID (re-sent windows are stored once).
        let mut again = ProcessRollup::new("n1", 60);
        again.observe(&gpu(vec![]), &[], &TwoPods, datetime!(2026-10-01 10:00:30 UTC));
        let second = again.drain(datetime!(2026-10-01 10:02 UTC));
        assert_eq!(second[0].event_id, facts[0].event_id);
        // The window that was open at shutdown is sent by drain: one sampling, nobody active.
        let tail = r.drain(datetime!(2026-10-01 10:01:30 UTC));
        assert!(matches!(&tail[0].body, FactBody::ProcessTelemetry(t) if t.samples == 1 && t.pods.is_empty()));
    }

    #[test]
    fn simulated_processes_are_reported_per_gpu() {
        let mut s = SimulatedSource::new("n1", "NVIDIA L4", 2).with_processes(vec![(0, 4242, 35.0), (5, 1, 1.0)]);
        assert_eq!(s.processes(), vec![(SimulatedSource::uuid(0), 4242)], "a GPU the node lacks is ignored");
        let activity = s.process_activity();
        assert_eq!(activity.len(), 2, "both GPUs sampled");
        assert_eq!(activity[0].processes, vec![(4242, 35.0, 17.5)]);
        assert!(activity[1].processes.is_empty());
        assert!(SimulatedSource::new("n1", "NVIDIA L4", 2).process_activity().is_empty(), "no processes: no samples");
    }

    #[test]
    fn cgroups_are_read_under_the_configured_proc_root() {
        let dir = std::env::temp_dir().join(format!("gl-proc-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("4242")).unwrap();
        std::fs::write(dir.join("4242/cgroup"), "0::/kubepods/burstable/pod6d4c1f62-27a5-4f67-9c39-2f6b4c1d0a11/abc\n")
            .unwrap();
        let proc = ProcCgroups { root: dir.clone() };
        assert!(proc.cgroup(4242).is_some_and(|c| c.contains("kubepods")));
        assert!(proc.cgroup(4243).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dcgm_exporter_endpoint_is_scraped_over_http() {
        use std::io::{Read, Write};
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/dcgm/mig_a100_4_active_workloads_runai.txt");
        let text = std::fs::read_to_string(&fixture).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).unwrap();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                text.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(text.as_bytes()).unwrap();
        });
        let mut source = DcgmSource::new(url).unwrap();
        let samples = source.scrape(datetime!(2026-10-01 10:00 UTC)).unwrap();
        server.join().unwrap();
        let devices = dcgm::devices(&samples, "n1");
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].mig_devices.len(), 4);
        // An unreachable endpoint is an error naming it, not a panic.
        let err =
            DcgmSource::new("http://127.0.0.1:1/metrics").unwrap().scrape(datetime!(2026-10-01 10:00 UTC)).unwrap_err();
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    }

    #[test]
    fn nvml_without_a_driver_says_so() {
        // CI machines have no NVIDIA driver: the error must say what to do. On a GPU machine, the same code reads
        // at least one device.
        match NvmlSource::new("n") {
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("no NVIDIA GPU found") && text.contains("--source simulated"), "{text}");
            }
            Ok(mut nvml) => {
                let samples = nvml.scrape(datetime!(2026-10-01 10:00 UTC)).unwrap();
                assert!(!dcgm::devices(&samples, "n").is_empty());
            }
        }
    }
}
