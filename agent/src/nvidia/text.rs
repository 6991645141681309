//! `nvidia-smi -L` and the plain `nvidia-smi` table.

use std::str::FromStr;

use gpuledger_core::ids::MigInstance;
use gpuledger_core::wire::{DeviceFact, MigDeviceFact};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::{Found, NvidiaError, UNKNOWN_NODE, device_facts, obj, strip_comments};
use crate::metrics::dcgm;

/// One `MIG …` line of `nvidia-smi -L`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedMig {
    /// The parent GPU's UUID.
    pub gpu_uuid: String,
    /// Profile, e.g. `3g.40gb`.
    pub profile: String,
    /// The MIG device index (`Device N`), which is NOT the GPU instance ID.
    pub device_index: u32,
    /// The MIG device UUID as printed.
    pub uuid: String,
}

/// Devices and MIG lines of `nvidia-smi -L`. MIG devices whose names carry GPU/compute instance IDs
/// (`MIG-GPU-<uuid>/<gi>/<ci>`) are in the device's `mig_devices`; all are in the returned list.
pub fn smi_list(text: &str, node: &str) -> Result<(Vec<DeviceFact>, Vec<ListedMig>), NvidiaError> {
    let mut devices: Vec<DeviceFact> = Vec::new();
    let mut migs = Vec::new();
    for (i, raw) in strip_comments(text).lines().enumerate() {
        let line = raw.trim();
        let bad = |reason: String| NvidiaError::Invalid {
            what: format!("nvidia-smi -L line {}", i + 1),
            field: line.to_owned(),
            reason,
        };
        if let Some(rest) = line.strip_prefix("GPU ") {
            let (idx, rest) = rest.split_once(": ").ok_or_else(|| bad("not `GPU N: NAME (UUID: …)`".into()))?;
            let (name, uuid) = rest.rsplit_once(" (UUID: ").ok_or_else(|| bad("no `(UUID: …)`".into()))?;
            let uuid = uuid.trim_end_matches(')').trim();
            devices.push(DeviceFact {
                node: node.to_owned(),
                gpu_uuid: uuid.to_owned(),
                model: name.trim().to_owned(),
                index: Some(idx.trim().parse().map_err(|_| bad(format!("GPU index {idx:?} is not a number")))?),
                memory_mib: None,
                mig_enabled: false,
                mig_devices: Vec::new(),
                vgpu_profile: dcgm::vgpu_profile(name.trim()),
            });
        } else if let Some(rest) = line.strip_prefix("MIG ") {
            let gpu = devices.last_mut().ok_or_else(|| bad("a MIG line before any GPU line".into()))?;
            let (before, uuid) = rest.rsplit_once("(UUID: ").ok_or_else(|| bad("no `(UUID: …)`".into()))?;
            let uuid = uuid.trim_end_matches(')').trim().to_owned();
            let words: Vec<&str> = before.split_whitespace().collect();
            let (profile, device_index) = match words.as_slice() {
                [profile, "Device", n] => (
                    *profile,
                    n.trim_end_matches(':').parse().map_err(|_| bad(format!("device index {n:?} is not a number")))?,
                ),
                _ => return Err(bad("not `MIG PROFILE Device N: (UUID: …)`".into())),
            };
            gpu.mig_enabled = true;
            if let Ok(inst) = MigInstance::from_str(&uuid)
                && inst.parent.to_string() == gpu.gpu_uuid
            {
                gpu.mig_devices.push(MigDeviceFact {
                    profile: profile.to_owned(),
                    gpu_instance_id: inst.gpu_instance_id,
                    compute_instance_id: Some(inst.compute_instance_id),
                    uuid: Some(uuid.clone()),
                });
            }
            migs.push(ListedMig { gpu_uuid: gpu.gpu_uuid.clone(), profile: profile.to_owned(), device_index, uuid });
        } else if !line.is_empty() {
            return Err(bad("neither a `GPU` nor a `MIG` line".into()));
        }
    }
    for d in &mut devices {
        d.mig_devices.sort_by_key(|m| (m.gpu_instance_id, m.compute_instance_id));
    }
    Ok((devices, migs))
}

/// Rows of the plain `nvidia-smi` table (no UUIDs there).
#[derive(Debug, Default)]
pub struct SmiTable {
    /// The driver version from the banner.
    pub driver_version: Option<String>,
    /// `gpu_table_row` records: index, name (may be cut short by the table), bus ID, memory.
    pub gpus: Vec<Value>,
    /// `mig_table_row` records: GPU, GPU instance, compute instance, MIG device, memory.
    pub migs: Vec<Value>,
    /// Processes (their GPU is an index, not a UUID, so `gpu_uuid` holds `index:N`).
    pub processes: Vec<Value>,
}

/// `12MiB / 15109MiB` → (used, total).
fn mib_pair(cell: &str) -> Option<(u64, u64)> {
    let (used, total) = cell.split_once('/')?;
    let num = |s: &str| s.trim().strip_suffix("MiB")?.trim().parse().ok();
    Some((num(used)?, num(total)?))
}

/// Parses the plain `nvidia-smi` table: the GPU section, the `MIG devices:` section and `Processes:`.
pub fn smi_table(text: &str) -> SmiTable {
    #[derive(PartialEq)]
    enum Section {
        Gpus,
        Mig,
        Processes,
    }
    let mut out = SmiTable::default();
    let mut section = Section::Gpus;
    let mut in_data = false;
    for raw in strip_comments(text).lines() {
        let line = raw.trim();
        if line.contains("NVIDIA-SMI") {
            out.driver_version =
                line.split("Driver Version:").nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_owned);
            section = Section::Gpus;
            in_data = false;
            continue;
        }
        if line.contains("MIG devices:") {
            (section, in_data) = (Section::Mig, false);
            continue;
        }
        if line.contains("Processes:") {
            (section, in_data) = (Section::Processes, false);
            continue;
        }
        if line.starts_with("|=") {
            in_data = true;
            continue;
        }
        if !in_data || !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let first: Vec<&str> = cells.first().map_or_else(Vec::new, |c| c.split_whitespace().collect());
        match section {
            Section::Gpus => {
                if let [idx, name @ .., _persistence] = first.as_slice()
                    && let Ok(index) = idx.parse::<u32>()
                    && !name.is_empty()
                {
                    out.gpus.push(json!({
                        "kind": "gpu_table_row",
                        "index": index,
                        "name": name.join(" "),
                        "bus_id": cells.get(1).and_then(|c| c.split_whitespace().next()),
                    }));
                } else if let Some((used, total)) = cells.get(1).and_then(|c| mib_pair(c))
                    && let Some(last) = out.gpus.last_mut()
                    && last.get("memory_total_mib").is_none()
                {
                    let o = obj(last);
                    o.insert("memory_used_mib".into(), used.into());
                    o.insert("memory_total_mib".into(), total.into());
                }
            }
            Section::Mig => {
                let ids: Vec<u32> = first.iter().filter_map(|w| w.parse().ok()).collect();
                if let [gpu, gi, ci, dev] = ids.as_slice()
                    && first.len() == 4
                {
                    let mem = cells.get(1).and_then(|c| mib_pair(c));
                    out.migs.push(json!({
                        "kind": "mig_table_row",
                        "gpu": gpu,
                        "gpu_instance_id": gi,
                        "compute_instance_id": ci,
                        "mig_device": dev,
                        "memory_used_mib": mem.map(|m| m.0),
                        "memory_total_mib": mem.map(|m| m.1),
                    }));
                }
            }
            Section::Processes => {
                let words: Vec<&str> = line.trim_matches('|').split_whitespace().collect();
                if let [gpu, gi, ci, pid, ty, name @ .., mem] = words.as_slice()
                    && let (Ok(gpu), Ok(pid)) = (gpu.parse::<u32>(), pid.parse::<u32>())
                {
                    out.processes.push(json!({
                        "kind": "gpu_process",
                        "gpu_index": gpu,
                        "pid": pid,
                        "type": ty,
                        "process_name": name.join(" "),
                        "used_memory_mib": mem.strip_suffix("MiB").and_then(|m| m.parse::<u64>().ok()),
                        "gpu_instance_id": gi.parse::<u32>().ok(),
                        "compute_instance_id": ci.parse::<u32>().ok(),
                    }));
                }
            }
        }
    }
    out
}

/// `nvidia-smi -L` (device facts, MIG device records) or the plain `nvidia-smi` table (records and a note saying
/// what was read).
pub fn inspect_smi_text(text: &str, at: OffsetDateTime) -> Result<Found, NvidiaError> {
    let body = strip_comments(text);
    let mut found = Found::default();
    if body.lines().any(|l| l.starts_with("GPU ") && l.contains("(UUID: ")) {
        let (devices, migs) = smi_list(text, UNKNOWN_NODE)?;
        found.facts = device_facts(&devices, at);
        let unresolved = migs
            .iter()
            .filter(|m| {
                !devices.iter().any(|d| d.mig_devices.iter().any(|f| f.uuid.as_deref() == Some(m.uuid.as_str())))
            })
            .count();
        for m in &migs {
            found.records.push(json!({
                "kind": "mig_device",
                "gpu_uuid": m.gpu_uuid,
                "profile": m.profile,
                "device_index": m.device_index,
                "mig_uuid": m.uuid,
            }));
        }
        if unresolved > 0 {
            found.notes.push(format!(
                "nvidia-smi -L: {unresolved} MIG device(s) have opaque MIG UUIDs and a device index, not a GPU instance ID; \
                 they are shown as mig_device records and left out of the device facts"
            ));
        }
        return Ok(found);
    }
    if !body.contains("NVIDIA-SMI") {
        return Err(NvidiaError::NothingFound(
            "neither `nvidia-smi -L` lines (GPU N: NAME (UUID: …)) nor an nvidia-smi table".into(),
        ));
    }
    let table = smi_table(text);
    let counts = format!(
        "{} GPU row(s), {} MIG row(s), {} process(es)",
        table.gpus.len(),
        table.migs.len(),
        table.processes.len()
    );
    found.records.extend(table.gpus);
    found.records.extend(table.migs);
    found.records.extend(table.processes);
    found.notes.push(format!(
        "nvidia-smi table (driver {}): read GPU index, name (may be cut short), bus ID and memory, MIG GPU/compute \
         instance IDs and processes: {counts}; the table has no GPU UUIDs or MIG profiles, so no device facts — \
         use nvidia-smi -q -x or -L",
        table.driver_version.as_deref().unwrap_or("?")
    ));
    Ok(found)
}
