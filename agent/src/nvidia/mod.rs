//! NVIDIA tool outputs and configs → what the agent can say about them (`gpuledger-agent inspect`).
//!
//! Device inventories become the same `device_observed` facts the node agent sends
//! ([`crate::metrics::dcgm::device_fact`]); everything that is not a fact yet (processes, declared sharing and MIG
//! layouts, permitted KubeVirt devices, tables without UUIDs) is returned as JSON records with a `kind` field.
//!
//! Rules (each one a quirk of the real outputs in `shared/fixtures/nvidia/`):
//! - leading `#` lines (the fixtures' `# SOURCE:` line) are dropped before parsing XML, CSV, JSON and text;
//! - `nvidia-smi -q -x`: the index is `<minor_number>` (the XML has no other index); MIG devices carry GPU and
//!   compute instance IDs but no profile name, so their `profile` is empty (as with DCGM rows that lack one);
//! - `nvidia-smi -L`: new drivers print opaque `MIG-<uuid>` names with a device index, which is not the GPU instance
//!   ID; such MIG devices are records (`mig_device`), never guessed into the device fact. Legacy
//!   `MIG-GPU-<uuid>/<gi>/<ci>` names carry the IDs and do go into the fact;
//! - the plain `nvidia-smi` table has no UUIDs: its rows are records, not device facts;
//! - CSV cells such as `[N/A]` or `[Requested functionality has been deprecated]` are absent values; numbers are
//!   read from the cell's first word (`81559 MiB`).

use gpuledger_core::wire::{DeviceFact, Fact};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::k8s;
use crate::metrics::dcgm;

mod config;
mod csv;
mod labels;
mod text;
mod xml;

pub use config::{device_plugin_config, kubevirt_config, mig_config};
pub use csv::{compute_apps_csv, gpu_csv, inspect_gpu_csv};
pub use labels::{kubectl_table, node_labels};
pub use text::{ListedMig, SmiTable, inspect_smi_text, smi_list, smi_table};
pub use xml::{inspect_smi_xml, smi_xml};

/// The node name used when the input does not name one.
pub const UNKNOWN_NODE: &str = "unknown-node";

/// What is wrong with an NVIDIA tool output or config.
#[derive(Debug, thiserror::Error)]
pub enum NvidiaError {
    /// Malformed XML.
    #[error("nvidia-smi XML, line {line}: {reason}")]
    Xml {
        /// 1-based line (after dropping leading `#` lines).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Malformed CSV.
    #[error("nvidia-smi CSV, line {line}: {reason}")]
    Csv {
        /// 1-based line (after dropping leading `#` lines).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A required field is missing or malformed.
    #[error("{what}: {field}: {reason}")]
    Invalid {
        /// The thing being read (a GPU, a config entry).
        what: String,
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// JSON or YAML that does not parse.
    #[error("{what}: {reason}")]
    Parse {
        /// What was being parsed.
        what: String,
        /// The parser's message.
        reason: String,
    },
    /// The input holds nothing of the expected shape.
    #[error("{0}")]
    NothingFound(String),
}

impl From<k8s::K8sError> for NvidiaError {
    fn from(e: k8s::K8sError) -> Self {
        Self::Parse { what: "Node".into(), reason: e.to_string() }
    }
}

/// What one input yields.
#[derive(Debug, Default)]
pub struct Found {
    /// Facts, as the agent would send them.
    pub facts: Vec<Fact>,
    /// Other JSON records (not facts yet), each with a `kind`.
    pub records: Vec<Value>,
    /// Notes for people.
    pub notes: Vec<String>,
}

/// A GPU process as `nvidia-smi` reports it (not a fact yet: processes are not mapped to pods).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProcess {
    /// The GPU's UUID (the PARENT GPU for processes on MIG devices).
    pub gpu_uuid: String,
    /// Process ID (in the host's PID namespace).
    pub pid: u32,
    /// Process name, when given.
    pub process_name: Option<String>,
    /// `C`, `G` or `C+G`, when given.
    pub process_type: Option<String>,
    /// Used GPU memory, MiB.
    pub used_memory_mib: Option<u64>,
    /// GPU instance ID (MIG), when given.
    pub gpu_instance_id: Option<u32>,
    /// Compute instance ID (MIG), when given.
    pub compute_instance_id: Option<u32>,
}

impl GpuProcess {
    fn record(&self) -> Value {
        let mut r = json!({
            "kind": "gpu_process",
            "gpu_uuid": self.gpu_uuid,
            "pid": self.pid,
        });
        let o = obj(&mut r);
        put(o, "process_name", self.process_name.clone().map(Value::from));
        put(o, "type", self.process_type.clone().map(Value::from));
        put(o, "used_memory_mib", self.used_memory_mib.map(Value::from));
        put(o, "gpu_instance_id", self.gpu_instance_id.map(Value::from));
        put(o, "compute_instance_id", self.compute_instance_id.map(Value::from));
        r
    }

    fn note(&self) -> String {
        let name = self.process_name.as_deref().unwrap_or("?");
        let mem = self.used_memory_mib.map_or_else(|| "unknown memory".to_owned(), |m| format!("{m} MiB"));
        format!(
            "process {} ({name}) uses {mem} on {}: processes are not facts yet (shown, not sent)",
            self.pid, self.gpu_uuid
        )
    }
}

fn obj(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(o) => o,
        _ => unreachable!("made an object above"),
    }
}

fn put(o: &mut Map<String, Value>, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        o.insert(key.to_owned(), v);
    }
}

/// The text without its leading `#` comment lines (and leading blank lines).
pub fn strip_comments(text: &str) -> &str {
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        if let Some(after) = trimmed.strip_prefix('#') {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else {
            return trimmed;
        }
    }
}

fn push_processes(found: &mut Found, processes: &[GpuProcess]) {
    for p in processes {
        found.records.push(p.record());
        found.notes.push(p.note());
    }
}

/// The number a value starts with (`81559 MiB` → 81559), as nvidia-smi prints units after numbers.
fn leading_u64(s: &str) -> Option<u64> {
    s.split_whitespace().next()?.parse().ok()
}

/// As [`leading_u64`].
fn leading_u32(s: &str) -> Option<u32> {
    s.split_whitespace().next()?.parse().ok()
}

fn device_facts(devices: &[DeviceFact], at: OffsetDateTime) -> Vec<Fact> {
    devices.iter().map(|d| dcgm::device_fact(d, at)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::xml::parse_xml;
    use super::*;

    #[test]
    fn xml_reader_handles_markup() {
        let x = parse_xml(
            "<?xml version=\"1.0\"?>\n<!DOCTYPE a SYSTEM \"a.dtd\" [<!ENTITY x \"y\">]>\n<!-- c -->\
             <a id='1'><b>x &amp; y&#33;</b><c/><d><![CDATA[<raw>]]></d></a>",
        )
        .unwrap();
        assert_eq!(x.name, "a");
        assert_eq!(x.attr("id"), Some("1"));
        assert_eq!(x.text_at(&["b"]), Some("x & y!"));
        assert!(x.child("c").is_some());
        assert_eq!(x.text_at(&["d"]), Some("<raw>"));
        let e = parse_xml("<a>\n<b></a>").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("</a> closes <b>"), "{e}");
        assert!(parse_xml("<a>").unwrap_err().to_string().contains("never closed"));
    }

    #[test]
    fn legacy_mig_names_carry_instance_ids() {
        let text = "GPU 0: A100-SXM4-40GB (UUID: GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f)\n  \
                    MIG 1g.5gb Device 0: (UUID: MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0)\n";
        let (d, m) = smi_list(text, "n").unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(d[0].mig_devices.len(), 1);
        assert_eq!(d[0].mig_devices[0].gpu_instance_id, 7);
        assert_eq!(d[0].mig_devices[0].compute_instance_id, Some(0));
        assert_eq!(d[0].mig_devices[0].profile, "1g.5gb");
    }

    #[test]
    fn mig_table_rows_and_processes() {
        let text = "\
| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:00:09.0 Off |                   On |
| N/A   28C    P0             70W /  700W |    38MiB /  81559MiB   |     N/A      Default |
+-----------------------------------------------------------------------------------------+
| MIG devices:                                                                            |
+------------------+----------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |
|==================+==================================+===========+=======================|
|  0    1   0   0  |              38MiB / 40192MiB    | 60      0 |  3   0    3    0    3 |
|                  |               0MiB / 65535MiB    |           |                       |
+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|=========================================================================================|
|    0    1    0      12345      C   python                                       30MiB |
+-----------------------------------------------------------------------------------------+
";
        let t = smi_table(text);
        assert_eq!(t.driver_version.as_deref(), Some("550.54.15"));
        assert_eq!(t.gpus.len(), 1);
        assert_eq!(t.gpus[0]["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(t.gpus[0]["memory_total_mib"], 81559);
        assert_eq!(t.migs.len(), 1);
        assert_eq!(t.migs[0]["gpu_instance_id"], 1);
        assert_eq!(t.migs[0]["memory_total_mib"], 40192);
        assert_eq!(t.processes.len(), 1);
        assert_eq!(t.processes[0]["pid"], 12345);
        assert_eq!(t.processes[0]["used_memory_mib"], 30);
    }

    #[test]
    fn bad_inputs_name_what_is_wrong() {
        let e = gpu_csv("name, uuid\nTesla T4\n", "n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("1 cells under a header of 2"), "{e}");
        let e = device_plugin_config(
            "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("nvidia.com/gpu.replicas"), "{e}");
    }
}
