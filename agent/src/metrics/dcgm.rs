//! DCGM Exporter scrapes → what the node agent reports: the devices it sees and per-window utilization.
//!
//! Label handling (exporters differ across versions):
//! - the device is the `UUID` label (`GPU-…`); MIG rows (`GPU_I_PROFILE`, `GPU_I_ID`) carry the PARENT GPU's UUID,
//!   there is no MIG UUID in DCGM output;
//! - the node is the `Hostname` label, or `hostname`, else the agent's own node name (`node_fallback`);
//! - pod labels `pod`/`namespace`/`container` (older exporters: `pod_name`/`pod_namespace`/`container_name`),
//!   `pod_uid` in newer ones; an empty value (`container=""`) is the same as an absent label.
//!
//! Utilization is analytics only: nothing here becomes money by itself.

use std::collections::BTreeMap;

use gpuledger_core::wire::{DeviceFact, Fact, FactBody, MigDeviceFact, PodRef, Stat, TelemetryRollup, event_id};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use super::prom::Sample;

/// DCGM field names this module reads.
pub mod field {
    /// GPU utilization, percent (not reported for MIG instances).
    pub const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
    /// Graphics engine activity, ratio 0..1 (reported for MIG instances).
    pub const GR_ENGINE_ACTIVE: &str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";
    /// Framebuffer free, MiB.
    pub const FB_FREE: &str = "DCGM_FI_DEV_FB_FREE";
    /// Framebuffer used, MiB.
    pub const FB_USED: &str = "DCGM_FI_DEV_FB_USED";
    /// Framebuffer reserved by the driver, MiB (newer exporters).
    pub const FB_RESERVED: &str = "DCGM_FI_DEV_FB_RESERVED";
    /// Power draw, W.
    pub const POWER_USAGE: &str = "DCGM_FI_DEV_POWER_USAGE";
    /// Energy since boot, mJ (a counter).
    pub const TOTAL_ENERGY: &str = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
}

/// The default rollup window: one minute, aligned to the minute.
pub const DEFAULT_WINDOW_SECONDS: u32 = 60;

/// Which device (or MIG instance) a row is about.
struct RowId<'a> {
    uuid: &'a str,
    gpu_instance_id: Option<u32>,
    profile: Option<&'a str>,
}

/// `None` for rows without a `UUID`, or with a `GPU_I_ID` that is not a number.
fn row_id(s: &Sample) -> Option<RowId<'_>> {
    let uuid = s.label("UUID")?;
    let gpu_instance_id = match s.label("GPU_I_ID") {
        Some(gi) => Some(gi.parse().ok()?),
        None => None,
    };
    Some(RowId { uuid, gpu_instance_id, profile: s.label("GPU_I_PROFILE") })
}

fn node_of<'a>(s: &'a Sample, fallback: &'a str) -> &'a str {
    s.label("Hostname").or_else(|| s.label("hostname")).unwrap_or(fallback)
}

fn pod_ref(s: &Sample) -> Option<PodRef> {
    let name = s.label("pod").or_else(|| s.label("pod_name"))?;
    let namespace = s.label("namespace").or_else(|| s.label("pod_namespace"))?;
    Some(PodRef {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: s.label("pod_uid").and_then(|u| Uuid::parse_str(u).ok()),
        container: s.label("container").or_else(|| s.label("container_name")).map(str::to_owned),
    })
}

/// The vGPU profile of a guest device, from its model name.
///
/// Rule: a vGPU guest's driver reports the vGPU type as the model, `GRID <board>-<framebuffer GB><series>`
/// (newer releases: `NVIDIA <board>-…`), the series being `A`, `B`, `C` or `Q` — e.g. `GRID A100-40C`. Physical
/// boards never end in `-<digits><one series letter>` (`NVIDIA A100-SXM4-40GB`, `Tesla T4`, `NVIDIA L4`). The
/// profile is the type without the vendor prefix (`A100-40C`), the name NVIDIA's vGPU type tables use, because the
/// prefix changed between vGPU releases while the type did not.
pub fn vgpu_profile(model: &str) -> Option<String> {
    let ty = model.strip_prefix("GRID ").or_else(|| model.strip_prefix("NVIDIA "))?;
    if ty.contains(char::is_whitespace) {
        return None;
    }
    let (board, size) = ty.rsplit_once('-')?;
    let digits = size.strip_suffix(['A', 'B', 'C', 'Q'])?;
    let valid = !board.is_empty() && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    valid.then(|| ty.to_owned())
}

/// One [`DeviceFact`] per physical GPU UUID in a scrape, sorted by node, index and UUID.
///
/// - `model` is the `modelName` label, empty when no row carries one (the NVIDIA docs' MIG sample has none);
/// - `memory_mib` is `FB_FREE + FB_USED (+ FB_RESERVED)` from the whole-GPU rows; `None` when only MIG rows are
///   exported (their framebuffer figures are the instances', not the GPU's);
/// - `mig_enabled` is true when MIG rows exist (a MIG-enabled GPU without instances cannot be told apart);
///   `mig_devices` are sorted by GPU instance ID, without compute instance or UUID (DCGM gives neither);
/// - `vgpu_profile` follows [`vgpu_profile`].
pub fn devices(samples: &[Sample], node_fallback: &str) -> Vec<DeviceFact> {
    struct Building {
        fact: DeviceFact,
        /// free, used, reserved.
        fb: [Option<f64>; 3],
    }
    let mut found: BTreeMap<&str, Building> = BTreeMap::new();
    for s in samples {
        let Some(id) = row_id(s) else { continue };
        let b = found.entry(id.uuid).or_insert_with(|| Building {
            fact: DeviceFact {
                node: node_of(s, node_fallback).to_owned(),
                gpu_uuid: id.uuid.to_owned(),
                model: String::new(),
                index: None,
                memory_mib: None,
                mig_enabled: false,
                mig_devices: Vec::new(),
                vgpu_profile: None,
            },
            fb: [None; 3],
        });
        if b.fact.model.is_empty()
            && let Some(model) = s.label("modelName")
        {
            b.fact.model = model.to_owned();
        }
        if b.fact.index.is_none() {
            b.fact.index = s.label("gpu").and_then(|g| g.parse().ok());
        }
        match id.gpu_instance_id {
            Some(gi) => {
                if !b.fact.mig_devices.iter().any(|m| m.gpu_instance_id == gi) {
                    b.fact.mig_devices.push(MigDeviceFact {
                        profile: id.profile.unwrap_or_default().to_owned(),
                        gpu_instance_id: gi,
                        compute_instance_id: None,
                        uuid: None,
                    });
                }
            }
            None => {
                let slot = match s.name.as_str() {
                    field::FB_FREE => 0,
                    field::FB_USED => 1,
                    field::FB_RESERVED => 2,
                    _ => continue,
                };
                if b.fb[slot].is_none() && s.value.is_finite() && s.value >= 0.0 {
                    b.fb[slot] = Some(s.value);
                }
            }
        }
    }
    let mut out: Vec<DeviceFact> = found
        .into_values()
        .map(|mut b| {
            if let [Some(free), Some(used), reserved] = b.fb {
                b.fact.memory_mib = Some((free + used + reserved.unwrap_or(0.0)).round() as u64);
            }
            b.fact.mig_devices.sort_by_key(|m| m.gpu_instance_id);
            b.fact.mig_enabled = !b.fact.mig_devices.is_empty();
            b.fact.vgpu_profile = vgpu_profile(&b.fact.model);
            b.fact
        })
        .collect();
    out.sort_by(|a, b| (&a.node, a.index, &a.gpu_uuid).cmp(&(&b.node, b.index, &b.gpu_uuid)));
    out
}

/// Running min / sum / max.
#[derive(Debug, Clone, Copy, Default)]
struct StatAcc {
    min: f64,
    max: f64,
    sum: f64,
    n: u32,
}

impl StatAcc {
    fn add(&mut self, v: Option<f64>) {
        let Some(v) = v.filter(|v| v.is_finite()) else {
            return;
        };
        if self.n == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.sum += v;
        self.n += 1;
    }

    fn stat(&self) -> Option<Stat> {
        (self.n > 0).then(|| Stat { min: self.min, avg: self.sum / f64::from(self.n), max: self.max })
    }
}

/// The pod label seen for one key over a window.
#[derive(Debug, Clone, Default)]
enum PodSeen {
    #[default]
    None,
    One(PodRef),
    /// Several pods (time-sliced copies, or pod churn): no single answer.
    Ambiguous,
}

impl PodSeen {
    fn see(&mut self, pod: &PodRef) {
        match self {
            Self::None => *self = Self::One(pod.clone()),
            Self::One(p) if p == pod => {}
            _ => *self = Self::Ambiguous,
        }
    }
}

/// One key's accumulated window.
#[derive(Debug, Clone)]
struct WindowAcc {
    node: String,
    mig_profile: Option<String>,
    samples: u32,
    util: StatAcc,
    memory: StatAcc,
    power: StatAcc,
    energy_mj: Option<f64>,
    pod: PodSeen,
}

/// One key's reading in one scrape: the first row wins for each metric.
#[derive(Debug, Default)]
struct Reading<'a> {
    node: &'a str,
    profile: Option<&'a str>,
    gpu_util: Option<f64>,
    engine_ratio: Option<f64>,
    memory: Option<f64>,
    power: Option<f64>,
    energy_mj: Option<f64>,
    pods: Vec<PodRef>,
}

fn first(slot: &mut Option<f64>, v: f64) {
    if slot.is_none() && v.is_finite() {
        *slot = Some(v);
    }
}

/// Accumulates successive DCGM scrapes into per-window [`TelemetryRollup`]s, one per physical GPU and one per MIG
/// instance (key: GPU UUID, GPU instance ID).
///
/// - Windows are [`DEFAULT_WINDOW_SECONDS`] long unless set with [`SampleRollup::with_window`], aligned to
///   multiples of the length since the Unix epoch (so 60 s windows start on the minute).
/// - Utilization: `DCGM_FI_DEV_GPU_UTIL` for a whole GPU (falling back to `DCGM_FI_PROF_GR_ENGINE_ACTIVE` × 100 when
///   the exporter has no GPU_UTIL for it, as on a MIG-enabled GPU); for a MIG instance always GR_ENGINE_ACTIVE × 100
///   (GPU_UTIL is not reported per instance). Memory: `DCGM_FI_DEV_FB_USED`, MiB.
/// - Power and energy are device-level quantities: they are rolled up on the whole-GPU key only, never per MIG
///   instance. When a scrape has only MIG rows for a GPU, the first MIG row's power and energy (the exporter copies the
///   device's values onto each instance) feed the whole-GPU key.
/// - Energy is the increase of the `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` counter (mJ → J). Each interval between
///   two consecutive readings of a GPU counts in the window of the later reading, so no energy is lost between
///   windows; within a window that is the delta between its first and last scrape. A decrease is a counter reset
///   (driver reload): the new value is the energy since the restart and is added as is, never a negative delta.
///   An interval longer than two windows is not counted (the agent did not watch).
/// - De-duplication: with time-slicing the exporter may repeat a device's row once per sharing pod; each scrape
///   contributes ONE value per key per metric (the first row's), and counts as one sample.
/// - Pod: the [`PodRef`] is kept only when exactly one distinct pod was labelled on the key during the whole window;
///   several (time-sliced copies, or churn) or none give `None`. It is informational: time-sliced usage is split by
///   allocation on the server, never by this label.
/// - A scrape older than the end of the last drained window is ignored (its window was already reported).
#[derive(Debug, Clone)]
pub struct SampleRollup {
    node_fallback: String,
    window_s: i64,
    windows: BTreeMap<(OffsetDateTime, String, Option<u32>), WindowAcc>,
    last_energy: BTreeMap<String, (OffsetDateTime, f64)>,
    drained_until: Option<OffsetDateTime>,
}

impl SampleRollup {
    /// A rollup with 60-second windows; `node_fallback` names the node for rows without a hostname label.
    pub fn new(node_fallback: impl Into<String>) -> Self {
        Self {
            node_fallback: node_fallback.into(),
            window_s: i64::from(DEFAULT_WINDOW_SECONDS),
            windows: BTreeMap::new(),
            last_energy: BTreeMap::new(),
            drained_until: None,
        }
    }

    /// Sets the window length in seconds (at least 1).
    pub fn with_window(mut self, seconds: u32) -> Self {
        self.window_s = i64::from(seconds.max(1));
        self
    }

    /// The start of the window `at` falls in.
    pub fn window_start(&self, at: OffsetDateTime) -> Option<OffsetDateTime> {
        let t = at.unix_timestamp();
        OffsetDateTime::from_unix_timestamp(t - t.rem_euclid(self.window_s)).ok()
    }

    /// Adds one scrape taken at `at`.
    pub fn observe(&mut self, samples: &[Sample], at: OffsetDateTime) {
        if self.drained_until.is_some_and(|d| at < d) {
            tracing::debug!(%at, "DCGM scrape older than the last drained window: ignored");
            return;
        }
        let Some(start) = self.window_start(at) else {
            return;
        };

        let mut readings: BTreeMap<(&str, Option<u32>), Reading<'_>> = BTreeMap::new();
        for s in samples {
            let name = s.name.as_str();
            if ![field::GPU_UTIL, field::GR_ENGINE_ACTIVE, field::FB_USED, field::POWER_USAGE, field::TOTAL_ENERGY]
                .contains(&name)
            {
                continue;
            }
            let Some(id) = row_id(s) else { continue };
            let r = readings.entry((id.uuid, id.gpu_instance_id)).or_insert_with(|| Reading {
                node: node_of(s, &self.node_fallback),
                profile: id.profile,
                ..Reading::default()
            });
            if let Some(pod) = pod_ref(s)
                && !r.pods.contains(&pod)
            {
                r.pods.push(pod);
            }
            let slot = match name {
                field::GPU_UTIL => &mut r.gpu_util,
                field::GR_ENGINE_ACTIVE => &mut r.engine_ratio,
                field::FB_USED => &mut r.memory,
                field::POWER_USAGE => &mut r.power,
                _ => &mut r.energy_mj,
            };
            first(slot, s.value);
        }

        // Device-level power and energy: from the whole-GPU row, else from the GPU's first MIG row.
        let mut device_level: Vec<(&str, Reading<'_>)> = Vec::new();
        for ((uuid, gi), r) in &readings {
            if gi.is_some() && !readings.contains_key(&(*uuid, None)) && !device_level.iter().any(|(u, _)| u == uuid) {
                let reading = Reading { node: r.node, power: r.power, energy_mj: r.energy_mj, ..Reading::default() };
                device_level.push((uuid, reading));
            }
        }
        for (uuid, r) in device_level {
            readings.insert((uuid, None), r);
        }

        for ((uuid, gi), r) in readings {
            let (util, power, energy) = match gi {
                None => (r.gpu_util.or(r.engine_ratio.map(|x| x * 100.0)), r.power, r.energy_mj),
                Some(_) => (r.engine_ratio.map(|x| x * 100.0), None, None),
            };
            let acc = self.windows.entry((start, uuid.to_owned(), gi)).or_insert_with(|| WindowAcc {
                node: r.node.to_owned(),
                mig_profile: gi.and(r.profile.map(str::to_owned)),
                samples: 0,
                util: StatAcc::default(),
                memory: StatAcc::default(),
                power: StatAcc::default(),
                energy_mj: None,
                pod: PodSeen::None,
            });
            acc.samples += 1;
            acc.util.add(util);
            acc.memory.add(r.memory);
            acc.power.add(power);
            for pod in &r.pods {
                acc.pod.see(pod);
            }
            if let Some(v) = energy {
                let max_gap = Duration::seconds(2 * self.window_s);
                match self.last_energy.get(uuid) {
                    // Out of order: neither counted nor remembered.
                    Some(&(t, _)) if at <= t => continue,
                    Some(&(t, prev)) if at - t <= max_gap => {
                        let delta = if v >= prev { v - prev } else { v };
                        *acc.energy_mj.get_or_insert(0.0) += delta;
                    }
                    _ => {}
                }
                self.last_energy.insert(uuid.to_owned(), (at, v));
            }
        }
    }

    /// Takes out every window that ended at or before `window_end`, sorted by window start, GPU UUID and instance.
    pub fn drain(&mut self, window_end: OffsetDateTime) -> Vec<TelemetryRollup> {
        let Some(cut) = self.window_start(window_end) else {
            return Vec::new();
        };
        let window = Duration::seconds(self.window_s);
        let (done, keep) = std::mem::take(&mut self.windows)
            .into_iter()
            .partition::<BTreeMap<_, _>, _>(|((start, _, _), _)| start.checked_add(window).is_some_and(|e| e <= cut));
        self.windows = keep;
        if self.drained_until.is_none_or(|d| d < cut) {
            self.drained_until = Some(cut);
        }
        let oldest_useful = cut - Duration::seconds(2 * self.window_s);
        self.last_energy.retain(|_, (t, _)| *t >= oldest_useful);
        done.into_iter()
            .filter_map(|((window_start, gpu_uuid, gpu_instance_id), acc)| {
                Some(TelemetryRollup {
                    node: acc.node,
                    gpu_uuid,
                    gpu_instance_id,
                    mig_profile: acc.mig_profile,
                    window_start,
                    window_end: window_start.checked_add(window)?,
                    samples: acc.samples,
                    utilization_pct: acc.util.stat(),
                    memory_used_mib: acc.memory.stat(),
                    power_w: acc.power.stat(),
                    energy_j: acc.energy_mj.map(|mj| mj / 1000.0),
                    pod: match acc.pod {
                        PodSeen::One(p) => Some(p),
                        PodSeen::None | PodSeen::Ambiguous => None,
                    },
                })
            })
            .collect()
    }
}

/// 64-bit FNV-1a, hex: a stable content tag (no hashing crate needed, stable across Rust versions).
fn fnv1a_hex(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A tag that changes whenever anything the fact says about the device changes (model, memory, MIG layout, vGPU).
pub fn device_content_tag(d: &DeviceFact) -> String {
    let mut canon = format!(
        "{}|{}|{}|{:?}|{:?}|{}|{:?}|",
        d.node, d.gpu_uuid, d.model, d.index, d.memory_mib, d.mig_enabled, d.vgpu_profile
    );
    for m in &d.mig_devices {
        canon.push_str(&format!("{}@{}/{:?}/{:?};", m.profile, m.gpu_instance_id, m.compute_instance_id, m.uuid));
    }
    fnv1a_hex(&canon)
}

/// A `device_observed` fact; event ID `device/<node>/<uuid>/<content tag>/<observed unix time>`. The server
/// closes a device's history row only when the content differs, so a re-sent unchanged device changes nothing.
pub fn device_fact(device: &DeviceFact, observed_at: OffsetDateTime) -> Fact {
    Fact {
        // The observation time is part of the ID: a layout that changes A → B → A must be stored three times, or
        // the server would keep B. The node agent only sends a device when its content changed.
        event_id: event_id(
            "device",
            &[&device.node, &device.gpu_uuid, &device_content_tag(device), &observed_at.unix_timestamp().to_string()],
        ),
        observed_at,
        body: FactBody::DeviceObserved(device.clone()),
    }
}

/// A `telemetry` fact; event ID `telemetry/<uuid>/<gpu instance or ->/<window start, RFC 3339>`.
pub fn telemetry_fact(rollup: &TelemetryRollup, observed_at: OffsetDateTime) -> Fact {
    let gi = rollup.gpu_instance_id.map_or_else(|| "-".to_owned(), |g| g.to_string());
    let start =
        rollup.window_start.format(&Rfc3339).unwrap_or_else(|_| rollup.window_start.unix_timestamp().to_string());
    Fact {
        event_id: event_id("telemetry", &[&rollup.gpu_uuid, &gi, &start]),
        observed_at,
        body: FactBody::Telemetry(rollup.clone()),
    }
}

/// Device facts then telemetry facts, all observed at `observed_at`.
pub fn facts(devices: &[DeviceFact], rollups: &[TelemetryRollup], observed_at: OffsetDateTime) -> Vec<Fact> {
    devices
        .iter()
        .map(|d| device_fact(d, observed_at))
        .chain(rollups.iter().map(|r| telemetry_fact(r, observed_at)))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::metrics::{fixtures, prom};
    use time::macros::datetime;

    fn scrape(text: &str) -> Vec<Sample> {
        prom::parse(text).unwrap().samples
    }

    fn fixture(file: &str) -> Vec<Sample> {
        scrape(&fixtures::read("dcgm", file))
    }

    fn one_device(file: &str) -> DeviceFact {
        let mut d = devices(&fixture(file), "fallback-node");
        assert_eq!(d.len(), 1, "{file}: {d:?}");
        d.remove(0)
    }

    #[test]
    fn plain_gpus_from_fixtures() {
        let l4 = one_device("plain_l4_kops_aws.txt");
        assert_eq!(l4.gpu_uuid, "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c");
        assert_eq!(l4.model, "NVIDIA L4");
        assert_eq!(l4.node, "i-030791dc5a37cd257");
        assert_eq!(l4.index, Some(0));
        assert_eq!(l4.memory_mib, Some(22563 + 470)); // free + used (0) + reserved
        assert!(!l4.mig_enabled && l4.mig_devices.is_empty());
        assert_eq!(l4.vgpu_profile, None);

        let l40s = one_device("plain_l40s_upcloud_uks.txt");
        assert_eq!(l40s.gpu_uuid, "GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc43");
        assert_eq!(l40s.model, "NVIDIA L40S");
        assert_eq!(l40s.node, "gpu1-wl8sg");
        assert_eq!(l40s.memory_mib, Some(45459 + 608));
    }

    #[test]
    fn mig_a100_with_four_instances_carries_the_parent_uuid() {
        let a100 = one_device("mig_a100_4_active_workloads_runai.txt");
        assert_eq!(a100.gpu_uuid, "GPU-473571f2-fb37-ef7e-50fe-9885b74a23cd");
        assert_eq!(a100.model, "NVIDIA A100-SXM4-40GB");
        assert_eq!(a100.node, "nvidia-dcgm-exporter-tl46n");
        assert!(a100.mig_enabled);
        let layout: Vec<_> = a100.mig_devices.iter().map(|m| (m.profile.as_str(), m.gpu_instance_id)).collect();
        assert_eq!(layout, [("2g.10gb", 5), ("1g.5gb", 7), ("1g.5gb", 8), ("1g.5gb", 9)]);
        assert!(a100.mig_devices.iter().all(|m| m.uuid.is_none() && m.compute_instance_id.is_none()));
        // Only MIG rows: their framebuffer figures are the instances', not the GPU's.
        assert_eq!(a100.memory_mib, None);
    }

    #[test]
    fn mig_a100_from_nvidia_docs_has_whole_gpu_rows_and_no_model() {
        let a100 = one_device("mig_a100_1g5gb_nvidia_docs.txt");
        assert_eq!(a100.gpu_uuid, "GPU-34319582-d595-d1c7-d1d2-179bcfa61660");
        assert_eq!(a100.node, "ub20-a100-k8s");
        assert_eq!(a100.model, "");
        assert_eq!(a100.memory_mib, Some(35690 + 4845));
        assert_eq!(a100.mig_devices.len(), 1);
        assert_eq!((a100.mig_devices[0].profile.as_str(), a100.mig_devices[0].gpu_instance_id), ("1g.5gb", 13));
    }

    #[test]
    fn vgpu_guest_gets_its_profile() {
        let v = one_device("vgpu_grid_a100_40c_vks.txt");
        assert_eq!(v.gpu_uuid, "GPU-0946f70c-659b-4c39-8b78-7e7600000000");
        assert_eq!(v.model, "GRID A100-40C");
        assert_eq!(v.vgpu_profile.as_deref(), Some("A100-40C"));
        assert_eq!(v.node, "test-ai-1-node-pool-40c-d5ds8-br9r6-9tb2c");
        assert_eq!(v.memory_mib, Some(37739 + 3220));
        assert!(!v.mig_enabled);

        assert_eq!(vgpu_profile("NVIDIA A10-24Q").as_deref(), Some("A10-24Q"));
        for physical in ["NVIDIA A100-SXM4-40GB", "Tesla T4", "NVIDIA L4", "NVIDIA H100 80GB HBM3", "GRID", "GRID -4C"]
        {
            assert_eq!(vgpu_profile(physical), None, "{physical}");
        }
    }

    #[test]
    fn two_t4s_sorted_by_index() {
        let d = devices(&fixture("fractional_t4_runai_reservation_pod.txt"), "x");
        let got: Vec<_> = d.iter().map(|d| (d.index, d.gpu_uuid.as_str(), d.model.as_str(), d.memory_mib)).collect();
        assert_eq!(
            got,
            [
                (Some(0), "GPU-7a2e92f2-be71-d37e-a744-541600ffc722", "Tesla T4", Some(14831 + 128)),
                (Some(1), "GPU-5f587dd4-6505-0873-c6db-8324dbfe5ba9", "Tesla T4", Some(14955 + 5)),
            ]
        );
        assert!(d.iter().all(|d| d.node == "nvidia-dcgm-exporter-s228n"));
    }

    #[test]
    fn hostname_spellings_and_the_fallback() {
        let text = fixtures::read("dcgm", "plain_l4_kops_aws.txt");
        let lower = text.replace("Hostname=", "hostname=");
        assert_eq!(devices(&scrape(&lower), "fb")[0].node, "i-030791dc5a37cd257");
        let none = text.replace("Hostname=\"i-030791dc5a37cd257\"", "Hostname=\"\"");
        assert_eq!(devices(&scrape(&none), "fb")[0].node, "fb");
    }

    const A: &str = "GPU-aaaaaaaa-0000-0000-0000-000000000001";

    /// A whole-GPU scrape of device A.
    fn gpu(util: f64, mem: f64, power: f64, energy_mj: f64) -> Vec<Sample> {
        let l = format!("{{gpu=\"0\",UUID=\"{A}\",modelName=\"NVIDIA H100\",Hostname=\"n1\"}}");
        scrape(&format!(
            "DCGM_FI_DEV_GPU_UTIL{l} {util}\nDCGM_FI_DEV_FB_USED{l} {mem}\n\
             DCGM_FI_DEV_POWER_USAGE{l} {power}\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{l} {energy_mj}\n"
        ))
    }

    #[test]
    fn min_avg_max_over_three_scrapes_in_an_aligned_window() {
        let mut r = SampleRollup::new("fb");
        r.observe(&gpu(10.0, 1000.0, 100.0, 1_000_000.0), datetime!(2026-11-01 10:00:05 UTC));
        r.observe(&gpu(40.0, 3000.0, 300.0, 1_010_000.0), datetime!(2026-11-01 10:00:20 UTC));
        r.observe(&gpu(70.0, 2000.0, 200.0, 1_030_000.0), datetime!(2026-11-01 10:00:59.9 UTC));
        assert!(r.drain(datetime!(2026-11-01 10:00:59 UTC)).is_empty(), "window not over yet");
        let out = r.drain(datetime!(2026-11-01 10:01:00 UTC));
        assert_eq!(out.len(), 1);
        let t = &out[0];
        assert_eq!((t.node.as_str(), t.gpu_uuid.as_str(), t.gpu_instance_id), ("n1", A, None));
        assert_eq!(t.window_start, datetime!(2026-11-01 10:00 UTC));
        assert_eq!(t.window_end, datetime!(2026-11-01 10:01 UTC));
        assert_eq!(t.samples, 3);
        assert_eq!(t.utilization_pct, Some(Stat { min: 10.0, avg: 40.0, max: 70.0 }));
        assert_eq!(t.memory_used_mib, Some(Stat { min: 1000.0, avg: 2000.0, max: 3000.0 }));
        assert_eq!(t.power_w, Some(Stat { min: 100.0, avg: 200.0, max: 300.0 }));
        assert_eq!(t.energy_j, Some(30.0)); // (1_030_000 - 1_000_000) mJ
        assert_eq!(t.pod, None);
        assert!(r.drain(datetime!(2026-11-01 10:05 UTC)).is_empty(), "drained once");
    }

    #[test]
    fn window_alignment_and_energy_across_windows() {
        let mut r = SampleRollup::new("fb");
        for (at, e) in [
            (datetime!(2026-11-01 10:00:50 UTC), 0.0),
            (datetime!(2026-11-01 10:01:10 UTC), 2000.0),
            (datetime!(2026-11-01 10:01:50 UTC), 5000.0),
            (datetime!(2026-11-01 10:02:10 UTC), 6000.0),
        ] {
            r.observe(&gpu(1.0, 1.0, 1.0, e), at);
        }
        let out = r.drain(datetime!(2026-11-01 10:03:30 UTC));
        let got: Vec<_> = out.iter().map(|t| (t.window_start, t.samples, t.energy_j)).collect();
        assert_eq!(
            got,
            [
                (datetime!(2026-11-01 10:00 UTC), 1, None),
                (datetime!(2026-11-01 10:01 UTC), 2, Some(5.0)),
                (datetime!(2026-11-01 10:02 UTC), 1, Some(1.0)),
            ]
        );
        // A scrape for an already reported window is ignored.
        r.observe(&gpu(1.0, 1.0, 1.0, 7000.0), datetime!(2026-11-01 10:02:40 UTC));
        assert!(r.drain(datetime!(2026-11-01 10:10 UTC)).is_empty());

        let five = SampleRollup::new("fb").with_window(300);
        assert_eq!(five.window_start(datetime!(2026-11-01 10:07:59 UTC)), Some(datetime!(2026-11-01 10:05 UTC)));
    }

    #[test]
    fn energy_counter_reset_is_a_restart_never_negative() {
        let mut r = SampleRollup::new("fb");
        let t0 = datetime!(2026-11-01 10:00 UTC);
        for (s, e) in [(0, 1000.0), (15, 3000.0), (30, 500.0), (45, 1500.0)] {
            r.observe(&gpu(1.0, 1.0, 1.0, e), t0 + Duration::seconds(s));
        }
        let out = r.drain(t0 + Duration::minutes(1));
        // 2000 before the reset, 500 since the restart, 1000 after: 3500 mJ.
        assert_eq!(out[0].energy_j, Some(3.5));
    }

    #[test]
    fn mig_rows_use_the_engine_ratio_as_percent_and_keep_power_on_the_gpu() {
        let mut r = SampleRollup::new("fb");
        let samples = fixture("mig_a100_4_active_workloads_runai.txt");
        r.observe(&samples, datetime!(2026-11-01 10:00:10 UTC));
        let out = r.drain(datetime!(2026-11-01 10:01 UTC));
        let uuid = "GPU-473571f2-fb37-ef7e-50fe-9885b74a23cd";
        let keys: Vec<_> = out.iter().map(|t| (t.gpu_instance_id, t.mig_profile.as_deref())).collect();
        assert_eq!(
            keys,
            [
                (None, None),
                (Some(5), Some("2g.10gb")),
                (Some(7), Some("1g.5gb")),
                (Some(8), Some("1g.5gb")),
                (Some(9), Some("1g.5gb"))
            ]
        );
        assert!(out.iter().all(|t| t.gpu_uuid == uuid && t.samples == 1 && t.pod.is_none()));
        let whole = &out[0];
        assert_eq!(whole.power_w.map(|s| s.avg), Some(112.252)); // the first MIG row's copy of the GPU's power
        assert_eq!(whole.utilization_pct, None);
        let gi8 = &out[3];
        let util = gi8.utilization_pct.unwrap();
        assert!((util.avg - 40.8493).abs() < 1e-9, "{util:?}");
        assert_eq!(gi8.memory_used_mib.map(|s| s.max), Some(4384.0));
        assert!(out[1..].iter().all(|t| t.power_w.is_none() && t.energy_j.is_none()));
    }

    #[test]
    fn time_sliced_copies_count_once_and_drop_the_pod() {
        let row = |pod: &str, util: f64| {
            format!(
                "DCGM_FI_DEV_GPU_UTIL{{UUID=\"{A}\",Hostname=\"n1\",namespace=\"team\",pod=\"{pod}\",container=\"main\"}} {util}\n"
            )
        };
        let mut r = SampleRollup::new("fb");
        let t0 = datetime!(2026-11-01 10:00 UTC);
        // The exporter copies the device's value to each sharing pod.
        r.observe(&scrape(&(row("p1", 30.0) + &row("p2", 30.0) + &row("p3", 30.0))), t0);
        r.observe(&scrape(&(row("p1", 60.0) + &row("p2", 60.0))), t0 + Duration::seconds(30));
        let out = r.drain(t0 + Duration::minutes(1));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].samples, 2);
        assert_eq!(out[0].utilization_pct, Some(Stat { min: 30.0, avg: 45.0, max: 60.0 }));
        assert_eq!(out[0].pod, None, "several pods: no single attribution");
    }

    #[test]
    fn a_single_labelled_pod_is_kept_and_empty_labels_mean_none() {
        let mut r = SampleRollup::new("fb");
        r.observe(&fixture("fractional_t4_runai_reservation_pod.txt"), datetime!(2026-11-01 10:00 UTC));
        let out = r.drain(datetime!(2026-11-01 10:01 UTC));
        assert_eq!(out.len(), 2);
        let gpu0 = out.iter().find(|t| t.gpu_uuid == "GPU-7a2e92f2-be71-d37e-a744-541600ffc722").unwrap();
        assert_eq!(
            gpu0.pod,
            Some(PodRef {
                namespace: "runai-reservation".into(),
                name: "runai-reservation-gpu-qa-mig-worker-gpu-1-kvltw".into(),
                uid: None,
                container: Some("runai-reservation".into()),
            })
        );
        assert_eq!(gpu0.power_w.map(|s| s.avg), Some(28.722));
        assert_eq!(gpu0.memory_used_mib.map(|s| s.avg), Some(128.0));
        let gpu1 = out.iter().find(|t| t.gpu_uuid == "GPU-5f587dd4-6505-0873-c6db-8324dbfe5ba9").unwrap();
        assert_eq!(gpu1.pod, None);

        let uid = "0b8e6c3a-4f0e-4c59-9a55-0f1e2d3c4b5a";
        let s =
            scrape(&format!("DCGM_FI_DEV_FB_USED{{UUID=\"{A}\",namespace=\"ns\",pod=\"p\",pod_uid=\"{uid}\"}} 1\n"));
        let mut r = SampleRollup::new("fb");
        r.observe(&s, datetime!(2026-11-01 10:00 UTC));
        let pod = r.drain(datetime!(2026-11-01 10:01 UTC)).remove(0).pod.unwrap();
        assert_eq!((pod.uid, pod.container), (Some(Uuid::parse_str(uid).unwrap()), None));
    }

    #[test]
    fn facts_have_deterministic_ids_that_follow_the_content() {
        let at = datetime!(2026-11-01 10:00 UTC);
        let d = one_device("mig_a100_4_active_workloads_runai.txt");
        let f = device_fact(&d, at);
        assert!(f.event_id.starts_with("device/nvidia-dcgm-exporter-tl46n/GPU-473571f2-fb37-ef7e-50fe-9885b74a23cd/"));
        assert_eq!(f.event_id, device_fact(&d.clone(), at).event_id, "same observation, same ID");
        // A → B → A: the return to A is a new fact (observed later), so the server's history ends at A.
        assert_ne!(f.event_id, device_fact(&d.clone(), at + Duration::hours(1)).event_id);
        let mut relaid = d.clone();
        relaid.mig_devices.truncate(1);
        assert_ne!(f.event_id, device_fact(&relaid, at).event_id, "a new MIG layout is a new fact");
        assert_eq!(f.body.kind(), "device_observed");

        let mut r = SampleRollup::new("fb");
        r.observe(&fixture("mig_a100_4_active_workloads_runai.txt"), at);
        let rollups = r.drain(at + Duration::minutes(1));
        let all = facts(&[d], &rollups, at);
        assert_eq!(all.len(), 6);
        assert_eq!(all[1].event_id, "telemetry/GPU-473571f2-fb37-ef7e-50fe-9885b74a23cd/-/2026-11-01T10:00:00Z");
        assert_eq!(all[2].event_id, "telemetry/GPU-473571f2-fb37-ef7e-50fe-9885b74a23cd/5/2026-11-01T10:00:00Z");
        let json = serde_json::to_value(&all[2]).unwrap();
        assert_eq!(json["kind"], "telemetry");
        assert_eq!(json["mig_profile"], "2g.10gb");
    }
}
