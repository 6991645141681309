//! The demo's GPUs as a DCGM exporter would show them: a [`GpuSource`] for one node whose utilization, memory
//! and power follow the workloads the plan placed on each device, with an energy counter that integrates the
//! power it reports. The agent's [`NodeCollector`] scrapes it and rolls the samples up per hour, so the telemetry
//! and device facts are the agent's own.

use std::collections::BTreeMap;

use gpuledger_agent::{
    metrics::{dcgm::field, prom::Sample},
    node::{GpuError, GpuSource},
};
use time::{Duration, OffsetDateTime};

use super::plan::{Activity, ClusterPlan, Node, unit_noise};

/// One workload's hold on one GPU: when, how much of it, doing what.
#[derive(Debug, Clone)]
struct Hold {
    from: OffsetDateTime,
    to: OffsetDateTime,
    /// GPU share × burst factor.
    weight: f64,
    /// Share of the GPU's memory.
    memory: f64,
    activity: Activity,
    key: u64,
}

/// A node's devices as DCGM sees them.
pub struct PlannedNodeSource {
    node: String,
    model: &'static str,
    memory_mib: f64,
    idle_w: f64,
    max_w: f64,
    gpus: Vec<GpuState>,
    last: Option<OffsetDateTime>,
}

struct GpuState {
    uuid: String,
    index: u32,
    /// (profile, GPU instance ID) of each MIG instance.
    mig: Vec<(&'static str, u32)>,
    holds: Vec<Hold>,
    /// Next hold (by start) not yet active, and the holds active at the last scrape.
    next: usize,
    active: Vec<usize>,
    energy_mj: f64,
}

impl PlannedNodeSource {
    /// The source for node `n` of cluster `c`.
    pub fn new(c: &ClusterPlan, n: usize) -> Self {
        let node: &Node = &c.nodes[n];
        let mut gpus: Vec<GpuState> = node
            .gpus
            .iter()
            .map(|g| GpuState {
                uuid: g.uuid.clone(),
                index: g.index,
                mig: g.mig.iter().map(|m| (m.profile, m.gpu_instance_id)).collect(),
                holds: Vec::new(),
                next: 0,
                active: Vec::new(),
                // Counters start at what months of prior uptime left them at.
                energy_mj: 4.0e11 + 1.0e9 * f64::from(g.index),
            })
            .collect();
        for w in c.workloads.iter().filter(|w| w.node == n) {
            for &s in &w.slots {
                let slot = &c.slots[s];
                if let Some(g) = gpus.get_mut(slot.gpu) {
                    g.holds.push(Hold {
                        from: w.started,
                        to: w.end,
                        weight: slot.share * Activity::burst(node.sharing),
                        memory: slot.share * w.activity.memory,
                        activity: w.activity,
                        key: w.uid.as_u128() as u64,
                    });
                }
            }
        }
        for g in &mut gpus {
            g.holds.sort_by_key(|h| h.from);
        }
        Self {
            node: node.name.clone(),
            model: node.model.driver_name,
            memory_mib: f64::from(node.model.memory_mib),
            idle_w: node.model.idle_w,
            max_w: node.model.max_w,
            gpus,
            last: None,
        }
    }
}

impl GpuState {
    /// (utilization %, memory used MiB) of this GPU at `at` (scrapes come in time order), from the workloads
    /// holding it then.
    fn load(&mut self, at: OffsetDateTime, memory_mib: f64) -> (f64, f64) {
        while let Some(h) = self.holds.get(self.next)
            && h.from <= at
        {
            self.active.push(self.next);
            self.next += 1;
        }
        let holds = &self.holds;
        self.active.retain(|&i| holds[i].to > at);
        let hour = at.replace_time(time::Time::from_hms(at.hour(), 0, 0).unwrap_or(time::Time::MIDNIGHT));
        let (mut util, mut memory) = (0.0, 0.0);
        for &i in &self.active {
            let h = &self.holds[i];
            util += h.weight * h.activity.utilization(h.key, hour);
            memory += h.memory;
        }
        let jitter = unit_noise(u64::from(self.index) ^ 0x5eed, at.unix_timestamp() as u64) - 0.5;
        let util = if util > 0.0 { (util * (1.0 + 0.08 * jitter)).clamp(0.0, 100.0) } else { 0.0 };
        let used = if memory > 0.0 { (memory.min(0.97) * memory_mib + 420.0).round() } else { 3.0 };
        (util.round(), used.min(memory_mib))
    }
}

fn sample(name: &str, labels: &BTreeMap<String, String>, value: f64) -> Sample {
    Sample { name: name.to_string(), labels: labels.clone(), value, timestamp_ms: None }
}

impl GpuSource for PlannedNodeSource {
    fn scrape(&mut self, at: OffsetDateTime) -> Result<Vec<Sample>, GpuError> {
        let dt = self.last.map_or(0.0, |l| (at - l).as_seconds_f64().max(0.0));
        self.last = Some(at);
        let mut out = Vec::with_capacity(self.gpus.len() * 6);
        let memory_mib = self.memory_mib;
        for g in &mut self.gpus {
            let (util, used) = g.load(at, memory_mib);
            let power = self.idle_w + (self.max_w - self.idle_w) * (util / 100.0).powf(0.9);
            let power = (power * 1000.0).round() / 1000.0;
            // The power reported now is the draw since the previous scrape: the counter integrates it.
            g.energy_mj += power * dt * 1000.0;
            let labels: BTreeMap<String, String> = [
                ("gpu", g.index.to_string()),
                ("UUID", g.uuid.clone()),
                ("device", format!("nvidia{}", g.index)),
                ("modelName", self.model.to_string()),
                ("Hostname", self.node.clone()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            out.push(sample(field::GPU_UTIL, &labels, util));
            out.push(sample(field::FB_USED, &labels, used));
            out.push(sample(field::FB_FREE, &labels, self.memory_mib - used));
            out.push(sample(field::POWER_USAGE, &labels, power));
            out.push(sample(field::TOTAL_ENERGY, &labels, g.energy_mj.round()));
            // MIG instances: DCGM labels them with the parent's UUID plus GPU_I_PROFILE / GPU_I_ID. The demo exports
            // only their free framebuffer, so the inventory shows the layout while telemetry stays per physical GPU.
            for (profile, gi) in &g.mig {
                let mut labels = labels.clone();
                labels.insert("GPU_I_PROFILE".into(), (*profile).to_string());
                labels.insert("GPU_I_ID".into(), gi.to_string());
                out.push(sample(field::FB_FREE, &labels, 0.0));
            }
        }
        Ok(out)
    }
}

/// The scrape times of the demo's node agents: once when they start at `from`, then twice an hour (at :29:59 and
/// :59:59), so each hourly window holds two samples and the energy counter's deltas cover the window's hour.
pub fn scrape_times(from: OffsetDateTime, until: OffsetDateTime) -> impl Iterator<Item = OffsetDateTime> {
    let first = from + Duration::seconds(1799);
    std::iter::once(from).chain((0..).map(move |i| first + Duration::seconds(1800 * i))).take_while(move |t| *t < until)
}
