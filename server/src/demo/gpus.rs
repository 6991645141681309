//! The demo's GPUs as a DCGM exporter would show them: a [`GpuSource`] for one node whose utilization, memory
//! and power follow the workloads the plan placed on each device, with an energy counter that integrates the
//! power it reports. The agent's [`NodeCollector`] scrapes it and rolls the samples up per hour, so the telemetry
//! and device facts are the agent's own.

use std::collections::BTreeMap;

use gpuledger_agent::{
    metrics::{
        dcgm::{self, field},
        prom::Sample,
    },
    node::{GpuError, GpuSource},
};
use gpuledger_core::wire::{Fact, Stat, TelemetryRollup};
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

/// One GPU's figures at one scrape.
#[derive(Debug, Clone, Copy)]
struct Reading {
    util: f64,
    used: f64,
    power: f64,
    /// The energy counter as exported (whole millijoules).
    energy_mj: f64,
}

impl PlannedNodeSource {
    /// Every GPU's figures at `at` (called in time order; the energy counters integrate the power in between).
    fn read(&mut self, at: OffsetDateTime) -> Vec<Reading> {
        let dt = self.last.map_or(0.0, |l| (at - l).as_seconds_f64().max(0.0));
        self.last = Some(at);
        let (idle_w, max_w, memory_mib) = (self.idle_w, self.max_w, self.memory_mib);
        self.gpus
            .iter_mut()
            .map(|g| {
                let (util, used) = g.load(at, memory_mib);
                let power = idle_w + (max_w - idle_w) * (util / 100.0).powf(0.9);
                let power = (power * 1000.0).round() / 1000.0;
                // The power reported now is the draw since the previous scrape: the counter integrates it.
                g.energy_mj += power * dt * 1000.0;
                Reading { util, used, power, energy_mj: g.energy_mj.round() }
            })
            .collect()
    }

    /// The telemetry facts the node agent's [`gpuledger_agent::node::NodeCollector`] (hourly windows) sends when
    /// it scrapes this source at [`scrape_times`]`(from, until)` and flushes at `until` — computed the way its
    /// rollup computes them (min / mean / max of the scraped values, energy as counter deltas), without building
    /// every scrape's Prometheus samples, and made into facts by the agent's [`dcgm::telemetry_fact`]. A test
    /// checks both give the same facts.
    pub fn telemetry_facts(&mut self, from: OffsetDateTime, until: OffsetDateTime) -> Vec<Fact> {
        #[derive(Clone, Copy, Default)]
        struct Acc {
            samples: u32,
            stats: [(f64, f64, f64, u32); 3],
            energy_mj: Option<f64>,
        }
        fn add(s: &mut (f64, f64, f64, u32), v: f64) {
            if s.3 == 0 {
                (s.0, s.2) = (v, v);
            } else {
                s.0 = s.0.min(v);
                s.2 = s.2.max(v);
            }
            s.1 += v;
            s.3 += 1;
        }
        fn stat(s: (f64, f64, f64, u32)) -> Option<Stat> {
            (s.3 > 0).then(|| Stat { min: s.0, avg: s.1 / f64::from(s.3), max: s.2 })
        }
        let mut out = Vec::new();
        let mut accs = vec![Acc::default(); self.gpus.len()];
        let mut last_energy: Vec<Option<(OffsetDateTime, f64)>> = vec![None; self.gpus.len()];
        let mut window: Option<OffsetDateTime> = None;
        // The collector's rollups come out sorted by GPU UUID within a window.
        let mut order: Vec<usize> = (0..self.gpus.len()).collect();
        order.sort_by(|&a, &b| self.gpus[a].uuid.cmp(&self.gpus[b].uuid));
        let emit = |out: &mut Vec<Fact>, accs: &mut Vec<Acc>, start: OffsetDateTime, at: OffsetDateTime, me: &Self| {
            for &i in &order {
                let (g, acc) = (&me.gpus[i], &mut accs[i]);
                if acc.samples == 0 {
                    continue;
                }
                let rollup = TelemetryRollup {
                    node: me.node.clone(),
                    gpu_uuid: g.uuid.clone(),
                    gpu_instance_id: None,
                    mig_profile: None,
                    window_start: start,
                    window_end: start + Duration::HOUR,
                    samples: acc.samples,
                    utilization_pct: stat(acc.stats[0]),
                    memory_used_mib: stat(acc.stats[1]),
                    power_w: stat(acc.stats[2]),
                    energy_j: acc.energy_mj.map(|mj| mj / 1000.0),
                    pod: None,
                };
                out.push(dcgm::telemetry_fact(&rollup, at));
                *acc = Acc::default();
            }
        };
        for at in scrape_times(from, until) {
            let t = at.unix_timestamp();
            let start = OffsetDateTime::from_unix_timestamp(t - t.rem_euclid(3600)).unwrap_or(at);
            if let Some(previous) = window
                && start > previous
            {
                emit(&mut out, &mut accs, previous, at, self);
            }
            window = Some(start);
            let readings = self.read(at);
            for ((r, acc), last) in readings.iter().zip(accs.iter_mut()).zip(last_energy.iter_mut()) {
                acc.samples += 1;
                add(&mut acc.stats[0], r.util);
                add(&mut acc.stats[1], r.used);
                add(&mut acc.stats[2], r.power);
                if let Some((t, prev)) = *last
                    && at - t <= Duration::hours(2)
                {
                    let delta = if r.energy_mj >= prev { r.energy_mj - prev } else { r.energy_mj };
                    *acc.energy_mj.get_or_insert(0.0) += delta;
                }
                *last = Some((at, r.energy_mj));
            }
        }
        if let Some(previous) = window {
            emit(&mut out, &mut accs, previous, until, self);
        }
        out
    }
}

impl GpuSource for PlannedNodeSource {
    fn scrape(&mut self, at: OffsetDateTime) -> Result<Vec<Sample>, GpuError> {
        let readings = self.read(at);
        let mut out = Vec::with_capacity(self.gpus.len() * 6);
        for (g, r) in self.gpus.iter().zip(readings) {
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
            out.push(sample(field::GPU_UTIL, &labels, r.util));
            out.push(sample(field::FB_USED, &labels, r.used));
            out.push(sample(field::FB_FREE, &labels, self.memory_mib - r.used));
            out.push(sample(field::POWER_USAGE, &labels, r.power));
            out.push(sample(field::TOTAL_ENERGY, &labels, r.energy_mj));
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use gpuledger_agent::node::NodeCollector;
    use gpuledger_core::wire::FactBody;
    use time::macros::datetime;

    use super::*;
    use crate::demo::plan;

    /// The shortcut gives exactly the telemetry facts the node agent's collector gives from the same scrapes.
    #[test]
    fn hourly_rollups_equal_the_node_collectors() {
        let now = datetime!(2026-11-20 15:42 UTC);
        let world = plan::world(plan::anchor_for(now), now);
        for (c, n) in [(0, 1), (0, 2), (1, 2)] {
            let cluster = &world.clusters[c];
            // A stretch with workloads coming and going, from the agent's start.
            let (from, until) = (world.anchor, world.anchor + Duration::hours(30));
            let mut source = PlannedNodeSource::new(cluster, n);
            let mut collector = NodeCollector::new(cluster.nodes[n].name.clone(), 3600);
            let mut expected = Vec::new();
            for at in scrape_times(from, until) {
                expected.extend(collector.observe(&source.scrape(at).unwrap(), at));
            }
            expected.extend(collector.flush(until));
            let devices: Vec<_> = expected.iter().filter(|f| matches!(f.body, FactBody::DeviceObserved(_))).collect();
            assert_eq!(devices.len(), cluster.nodes[n].gpus.len());
            if let FactBody::DeviceObserved(d) = &devices[0].body {
                assert_eq!(d.mig_enabled, !cluster.nodes[n].gpus[0].mig.is_empty(), "{d:?}");
                assert!(d.memory_mib.is_some());
            }
            expected.retain(|f| matches!(f.body, FactBody::Telemetry(_)));
            let fast = PlannedNodeSource::new(cluster, n).telemetry_facts(from, until);
            assert_eq!(fast.len(), 30 * cluster.nodes[n].gpus.len());
            assert_eq!(fast.len(), expected.len());
            for (a, b) in fast.iter().zip(&expected) {
                assert_eq!(a, b, "node {}", cluster.nodes[n].name);
            }
        }
    }
}
