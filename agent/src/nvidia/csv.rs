//! `nvidia-smi --query-gpu` and `--query-compute-apps` CSV.

use gpuledger_core::wire::DeviceFact;
use time::OffsetDateTime;

use super::{
    Found, GpuProcess, NvidiaError, UNKNOWN_NODE, device_facts, leading_u32, leading_u64, push_processes,
    strip_comments,
};
use crate::metrics::dcgm;

/// A CSV cell's value; `None` for empty cells and `[N/A]`-like placeholders.
fn cell(s: &str) -> Option<&str> {
    let s = s.trim();
    let placeholder = s.is_empty() || s == "N/A" || (s.starts_with('[') && s.ends_with(']'));
    (!placeholder).then_some(s)
}

struct Csv<'a> {
    columns: Vec<&'a str>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

impl Csv<'_> {
    fn get<'r>(&self, row: &'r [&str], names: &[&str]) -> Option<&'r str> {
        names
            .iter()
            .find_map(|n| self.columns.iter().position(|c| c == n))
            .and_then(|i| row.get(i))
            .and_then(|v| cell(v))
    }

    fn has(&self, name: &str) -> bool {
        self.columns.contains(&name)
    }
}

fn parse_csv(text: &str) -> Result<Csv<'_>, NvidiaError> {
    let mut lines = strip_comments(text).lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or(NvidiaError::Csv { line: 1, reason: "empty input".into() })?;
    // `memory.total [MiB]` → `memory.total`.
    let columns: Vec<&str> = header.split(',').map(|c| c.split(" [").next().unwrap_or(c).trim()).collect();
    let mut rows = Vec::new();
    for (i, line) in lines {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != columns.len() {
            return Err(NvidiaError::Csv {
                line: i + 1,
                reason: format!("{} cells under a header of {} columns", cells.len(), columns.len()),
            });
        }
        rows.push((i + 1, cells));
    }
    Ok(Csv { columns, rows })
}

/// `nvidia-smi --query-gpu=… --format=csv` → devices. Needs the header row (`uuid` at least).
pub fn gpu_csv(text: &str, node_fallback: &str) -> Result<Vec<DeviceFact>, NvidiaError> {
    let csv = parse_csv(text)?;
    if !csv.has("uuid") {
        return Err(NvidiaError::Csv {
            line: 1,
            reason: "no `uuid` column (run --query-gpu with uuid and --format=csv, not noheader)".into(),
        });
    }
    let mut out = Vec::new();
    for (line, row) in &csv.rows {
        let uuid =
            csv.get(row, &["uuid", "gpu_uuid"]).ok_or(NvidiaError::Csv { line: *line, reason: "empty uuid".into() })?;
        let model = csv.get(row, &["name", "gpu_name"]).unwrap_or("").to_owned();
        out.push(DeviceFact {
            node: csv.get(row, &["hostname"]).unwrap_or(node_fallback).to_owned(),
            gpu_uuid: uuid.to_owned(),
            vgpu_profile: dcgm::vgpu_profile(&model),
            model,
            index: csv.get(row, &["index"]).and_then(leading_u32),
            memory_mib: csv.get(row, &["memory.total"]).and_then(leading_u64),
            mig_enabled: csv.get(row, &["mig.mode.current"]) == Some("Enabled"),
            mig_devices: Vec::new(),
        });
    }
    Ok(out)
}

/// `nvidia-smi --query-compute-apps=… --format=csv` → processes (`pid` and `gpu_uuid` columns needed).
pub fn compute_apps_csv(text: &str) -> Result<Vec<GpuProcess>, NvidiaError> {
    let csv = parse_csv(text)?;
    let mut out = Vec::new();
    for (line, row) in &csv.rows {
        let bad = |reason: &str| NvidiaError::Csv { line: *line, reason: reason.into() };
        out.push(GpuProcess {
            gpu_uuid: csv.get(row, &["gpu_uuid"]).ok_or_else(|| bad("no gpu_uuid"))?.to_owned(),
            pid: csv.get(row, &["pid"]).and_then(leading_u32).ok_or_else(|| bad("pid missing or not a number"))?,
            process_name: csv.get(row, &["process_name", "name"]).map(str::to_owned),
            process_type: None,
            used_memory_mib: csv.get(row, &["used_gpu_memory", "used_memory"]).and_then(leading_u64),
            gpu_instance_id: None,
            compute_instance_id: None,
        });
    }
    Ok(out)
}

/// Either `--query-gpu` CSV (device facts) or `--query-compute-apps` CSV (process records), told apart by the
/// header (`pid` → processes).
pub fn inspect_gpu_csv(text: &str, at: OffsetDateTime) -> Result<Found, NvidiaError> {
    let csv = parse_csv(text)?;
    let mut found = Found::default();
    if csv.has("pid") {
        let processes = compute_apps_csv(text)?;
        push_processes(&mut found, &processes);
        if processes.is_empty() {
            found.notes.push("no compute processes listed".into());
        } else {
            found.notes.push(
                "with MIG enabled, nvidia-smi reports processes against the parent GPU UUID, not the MIG device".into(),
            );
        }
    } else if csv.has("uuid") {
        let devices = gpu_csv(text, UNKNOWN_NODE)?;
        found.facts = device_facts(&devices, at);
        if !csv.has("mig.mode.current") {
            found.notes.push("no mig.mode.current column: MIG mode not known, reported as disabled".into());
        }
        if devices.iter().any(|d| d.mig_enabled) {
            found
                .notes
                .push("--query-gpu lists no MIG instances: MIG-enabled GPUs are reported without their layout".into());
        }
    } else {
        return Err(NvidiaError::Csv {
            line: 1,
            reason: "the header has neither `uuid` (--query-gpu) nor `pid` (--query-compute-apps)".into(),
        });
    }
    if csv.rows.is_empty() {
        found.notes.push("the CSV has a header and no rows".into());
    }
    Ok(found)
}
