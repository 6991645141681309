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

use std::collections::BTreeMap;
use std::str::FromStr;

use gpuledger_core::ids::MigInstance;
use gpuledger_core::wire::{DeviceFact, Fact, FactBody, MigDeviceFact};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::k8s;
use crate::metrics::dcgm;

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

fn device_facts(devices: &[DeviceFact], at: OffsetDateTime) -> Vec<Fact> {
    devices.iter().map(|d| dcgm::device_fact(d, at)).collect()
}

// ---------------------------------------------------------------------------------------------------------------
// A small XML reader: elements, attributes, text; comments, processing instructions, DOCTYPE and CDATA handled.

/// An XML element.
#[derive(Debug, Default, Clone)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Element>,
    text: String,
}

impl Element {
    fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> {
        self.children.iter().filter(move |c| c.name == name)
    }

    fn path(&self, path: &[&str]) -> Option<&Element> {
        path.iter().try_fold(self, |e, p| e.child(p))
    }

    /// The trimmed text at `path`; `None` when absent, empty or `N/A`.
    fn text_at(&self, path: &[&str]) -> Option<&str> {
        let t = self.path(path)?.text.trim();
        (!t.is_empty() && t != "N/A").then_some(t)
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn decode_entities(raw: &str) -> String {
    if !raw.contains('&') {
        return raw.to_owned();
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let decoded = after.find(';').and_then(|end| {
            let ent = &after[1..end];
            let c = match ent {
                "lt" => Some('<'),
                "gt" => Some('>'),
                "amp" => Some('&'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                _ => ent
                    .strip_prefix("#x")
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| ent.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            }?;
            Some((c, end + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &after[len..];
            }
            None => {
                out.push('&');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn parse_xml(text: &str) -> Result<Element, NvidiaError> {
    let err = |pos: usize, reason: String| NvidiaError::Xml { line: text[..pos].matches('\n').count() + 1, reason };
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut pos = 0;
    while pos < text.len() {
        let Some(lt) = text[pos..].find('<').map(|i| pos + i) else {
            if !text[pos..].trim().is_empty() {
                let reason = if root.is_some() { "text after the root element" } else { "not XML: no element" };
                return Err(err(pos, reason.into()));
            }
            break;
        };
        let between = &text[pos..lt];
        match stack.last_mut() {
            Some(top) => top.text.push_str(&decode_entities(between)),
            None if !between.trim().is_empty() => {
                return Err(err(pos, "text outside the root element".into()));
            }
            None => {}
        }
        let rest = &text[lt..];
        let skip_to = |end: &str| {
            rest.find(end)
                .map(|i| lt + i + end.len())
                .ok_or_else(|| err(lt, format!("unterminated markup (no {end:?})")))
        };
        if rest.starts_with("<?") {
            pos = skip_to("?>")?;
        } else if rest.starts_with("<!--") {
            pos = skip_to("-->")?;
        } else if let Some(cdata) = rest.strip_prefix("<![CDATA[") {
            let end = cdata.find("]]>").ok_or_else(|| err(lt, "unterminated CDATA".into()))?;
            if let Some(top) = stack.last_mut() {
                top.text.push_str(&cdata[..end]);
            }
            pos = lt + "<![CDATA[".len() + end + 3;
        } else if rest.starts_with("<!") {
            // DOCTYPE, possibly with an internal subset in brackets.
            let mut depth = 0i32;
            let mut end = None;
            for (i, b) in rest.bytes().enumerate() {
                match b {
                    b'[' => depth += 1,
                    b']' => depth -= 1,
                    b'>' if depth <= 0 => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            pos = lt + end.ok_or_else(|| err(lt, "unterminated declaration".into()))? + 1;
        } else if let Some(close) = rest.strip_prefix("</") {
            let end = close.find('>').ok_or_else(|| err(lt, "unterminated end tag".into()))?;
            let name = close[..end].trim();
            let el = stack.pop().ok_or_else(|| err(lt, format!("</{name}> without an open element")))?;
            if el.name != name {
                return Err(err(lt, format!("</{name}> closes <{}>", el.name)));
            }
            finish(el, &mut stack, &mut root);
            pos = lt + 2 + end + 1;
        } else {
            // A start tag: find its end outside quotes.
            let mut quote = None;
            let mut end = None;
            for (i, c) in rest.char_indices().skip(1) {
                match (quote, c) {
                    (None, '"' | '\'') => quote = Some(c),
                    (Some(q), c) if c == q => quote = None,
                    (None, '>') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.ok_or_else(|| err(lt, "unterminated start tag".into()))?;
            let inner = &rest[1..end];
            let (inner, empty) = match inner.strip_suffix('/') {
                Some(i) => (i, true),
                None => (inner, false),
            };
            let el = start_tag(inner).map_err(|reason| err(lt, reason))?;
            if root.is_some() && stack.is_empty() {
                return Err(err(lt, "a second root element".into()));
            }
            if empty {
                finish(el, &mut stack, &mut root);
            } else {
                stack.push(el);
            }
            pos = lt + end + 1;
        }
    }
    if let Some(open) = stack.last() {
        return Err(err(text.len(), format!("<{}> is never closed", open.name)));
    }
    root.ok_or_else(|| err(0, "no root element".into()))
}

fn finish(el: Element, stack: &mut [Element], root: &mut Option<Element>) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(el),
        None => *root = Some(el),
    }
}

fn start_tag(inner: &str) -> Result<Element, String> {
    let inner = inner.trim();
    let name_end = inner.find(char::is_whitespace).unwrap_or(inner.len());
    let name = &inner[..name_end];
    if name.is_empty() {
        return Err("a tag without a name".into());
    }
    let mut attrs = Vec::new();
    let mut rest = inner[name_end..].trim_start();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').ok_or_else(|| format!("<{name}>: attribute without a value"))?;
        let after = after.trim_start();
        let q = after
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| format!("<{name}>: unquoted attribute value"))?;
        let close = after[1..].find(q).ok_or_else(|| format!("<{name}>: unterminated attribute value"))?;
        attrs.push((key.trim().to_owned(), decode_entities(&after[1..1 + close])));
        rest = after[close + 2..].trim_start();
    }
    Ok(Element { name: name.to_owned(), attrs, ..Element::default() })
}

// ---------------------------------------------------------------------------------------------------------------
// nvidia-smi -q -x

fn leading_u64(s: &str) -> Option<u64> {
    s.split_whitespace().next()?.parse().ok()
}

fn leading_u32(s: &str) -> Option<u32> {
    s.split_whitespace().next()?.parse().ok()
}

/// Devices and processes in `nvidia-smi -q -x` output. The node is the log's `<hostname>` when present, else
/// `node_fallback`.
pub fn smi_xml(text: &str, node_fallback: &str) -> Result<(Vec<DeviceFact>, Vec<GpuProcess>), NvidiaError> {
    let root = parse_xml(strip_comments(text))?;
    if root.name != "nvidia_smi_log" {
        return Err(NvidiaError::NothingFound(format!(
            "the XML root is <{}>, not <nvidia_smi_log> (nvidia-smi -q -x)",
            root.name
        )));
    }
    let node = root.text_at(&["hostname"]).unwrap_or(node_fallback);
    let mut devices = Vec::new();
    let mut processes = Vec::new();
    for gpu in root.children_named("gpu") {
        let what = || format!("GPU {}", gpu.attr("id").unwrap_or("?"));
        let uuid = gpu
            .text_at(&["uuid"])
            .ok_or_else(|| NvidiaError::Invalid { what: what(), field: "uuid".into(), reason: "missing".into() })?
            .to_owned();
        let model = gpu.text_at(&["product_name"]).unwrap_or("").to_owned();
        let mut mig_devices = Vec::new();
        for m in gpu.child("mig_devices").into_iter().flat_map(|m| m.children_named("mig_device")) {
            let gi = m.text_at(&["gpu_instance_id"]).and_then(leading_u32).ok_or_else(|| NvidiaError::Invalid {
                what: what(),
                field: "mig_device.gpu_instance_id".into(),
                reason: "missing or not a number".into(),
            })?;
            mig_devices.push(MigDeviceFact {
                profile: m.text_at(&["profile"]).unwrap_or_default().to_owned(),
                gpu_instance_id: gi,
                compute_instance_id: m.text_at(&["compute_instance_id"]).and_then(leading_u32),
                uuid: m.text_at(&["uuid"]).map(str::to_owned),
            });
        }
        mig_devices.sort_by_key(|m| (m.gpu_instance_id, m.compute_instance_id));
        devices.push(DeviceFact {
            node: node.to_owned(),
            gpu_uuid: uuid.clone(),
            vgpu_profile: dcgm::vgpu_profile(&model),
            model,
            index: gpu.text_at(&["minor_number"]).and_then(leading_u32),
            memory_mib: gpu.text_at(&["fb_memory_usage", "total"]).and_then(leading_u64),
            mig_enabled: gpu.text_at(&["mig_mode", "current_mig"]) == Some("Enabled"),
            mig_devices,
        });
        for p in gpu.child("processes").into_iter().flat_map(|p| p.children_named("process_info")) {
            let pid = p.text_at(&["pid"]).and_then(leading_u32).ok_or_else(|| NvidiaError::Invalid {
                what: what(),
                field: "process_info.pid".into(),
                reason: "missing or not a number".into(),
            })?;
            processes.push(GpuProcess {
                gpu_uuid: uuid.clone(),
                pid,
                process_name: p.text_at(&["process_name"]).map(str::to_owned),
                process_type: p.text_at(&["type"]).map(str::to_owned),
                used_memory_mib: p.text_at(&["used_memory"]).and_then(leading_u64),
                gpu_instance_id: p.text_at(&["gpu_instance_id"]).and_then(leading_u32),
                compute_instance_id: p.text_at(&["compute_instance_id"]).and_then(leading_u32),
            });
        }
    }
    if devices.is_empty() {
        return Err(NvidiaError::NothingFound("no <gpu> in the nvidia-smi XML".into()));
    }
    Ok((devices, processes))
}

/// `nvidia-smi -q -x` → device facts, process records and notes.
pub fn inspect_smi_xml(text: &str, at: OffsetDateTime) -> Result<Found, NvidiaError> {
    let (devices, processes) = smi_xml(text, UNKNOWN_NODE)?;
    let mut found = Found { facts: device_facts(&devices, at), ..Found::default() };
    for d in &devices {
        if d.mig_devices.iter().any(|m| m.profile.is_empty()) {
            found.notes.push(format!(
                "{}: nvidia-smi -q -x names no MIG profiles; {} MIG device(s) carry GPU/compute instance IDs only",
                d.gpu_uuid,
                d.mig_devices.len()
            ));
        }
    }
    push_processes(&mut found, &processes);
    Ok(found)
}

// ---------------------------------------------------------------------------------------------------------------
// nvidia-smi --query-gpu / --query-compute-apps CSV

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

// ---------------------------------------------------------------------------------------------------------------
// nvidia-smi -L and the plain nvidia-smi table

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

// ---------------------------------------------------------------------------------------------------------------
// YAML configs: device-plugin sharing, mig-parted, KubeVirt

/// Every object holding `marker` as a key, wherever it is: at the top, nested, or inside a string value that is
/// itself YAML (a ConfigMap's `data`, a Helm value). Returns `(key of the string it came from, object)`.
fn find_embedded(
    v: &Value,
    marker: &str,
    from: Option<&str>,
    out: &mut Vec<(Option<String>, Value)>,
) -> Result<(), NvidiaError> {
    match v {
        Value::Object(o) if o.contains_key(marker) => {
            out.push((from.map(str::to_owned), v.clone()));
        }
        Value::Object(o) => {
            for (k, child) in o {
                match child {
                    Value::String(s) if s.contains(marker) => {
                        let inner: Value = serde_saphyr::from_str(s).map_err(|e| NvidiaError::Parse {
                            what: format!("the YAML under {k:?}"),
                            reason: e.to_string(),
                        })?;
                        find_embedded(&inner, marker, Some(k), out)?;
                    }
                    _ => find_embedded(child, marker, from, out)?,
                }
            }
        }
        Value::Array(items) => {
            for i in items {
                find_embedded(i, marker, from, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn documents(text: &str) -> Result<Vec<Value>, NvidiaError> {
    crate::inspect::read_documents(text)
        .map_err(|e| NvidiaError::Parse { what: "the input".into(), reason: format!("{e:#}") })
}

fn positive_u32(v: &Value, what: &str, field: &str) -> Result<u32, NvidiaError> {
    v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n >= 1).ok_or_else(|| NvidiaError::Invalid {
        what: what.to_owned(),
        field: field.to_owned(),
        reason: format!("{v} is not a whole number ≥ 1"),
    })
}

/// NVIDIA device plugin / GPU Operator sharing configs (bare, or in a ConfigMap's `data`) → one
/// `timeslice_policy` (or `mps_policy`) record per resource. Each declares that one advertised device is
/// `1/replicas` of the resource.
pub fn device_plugin_config(text: &str) -> Result<Vec<Value>, NvidiaError> {
    let mut found = Vec::new();
    for doc in documents(text)? {
        let configmap = doc["metadata"]["name"].as_str().map(str::to_owned);
        let mut configs = Vec::new();
        find_embedded(&doc, "sharing", None, &mut configs)?;
        for (name, config) in configs {
            let mig_strategy = config["flags"]["migStrategy"].as_str();
            for (section, kind) in [("timeSlicing", "timeslice_policy"), ("mps", "mps_policy")] {
                let sharing = &config["sharing"][section];
                if sharing.is_null() {
                    continue;
                }
                let what = format!("config {}: sharing.{section}", name.as_deref().unwrap_or("(unnamed)"));
                let rename_by_default = sharing["renameByDefault"].as_bool().unwrap_or(false);
                let fail_gt_one = sharing["failRequestsGreaterThanOne"].as_bool().unwrap_or(false);
                let resources = sharing["resources"].as_array().ok_or_else(|| NvidiaError::Invalid {
                    what: what.clone(),
                    field: "resources".into(),
                    reason: "missing or not a list".into(),
                })?;
                for r in resources {
                    let resource = r["name"].as_str().ok_or_else(|| NvidiaError::Invalid {
                        what: what.clone(),
                        field: "resources[].name".into(),
                        reason: "missing".into(),
                    })?;
                    let replicas = positive_u32(&r["replicas"], &what, &format!("{resource}.replicas"))?;
                    let rename = r["rename"].as_str();
                    let advertised = match rename {
                        Some(n) => n.to_owned(),
                        None if rename_by_default => format!("{resource}.shared"),
                        None => resource.to_owned(),
                    };
                    let mut rec = json!({
                        "kind": kind,
                        "config": name,
                        "resource": resource,
                        "replicas": replicas,
                        "rename": rename,
                        "renameByDefault": rename_by_default,
                        "failRequestsGreaterThanOne": fail_gt_one,
                        "advertised_resource": advertised,
                    });
                    let o = obj(&mut rec);
                    put(o, "configmap", configmap.clone().map(Value::from));
                    put(o, "migStrategy", mig_strategy.map(Value::from));
                    found.push(rec);
                }
            }
        }
    }
    if found.is_empty() {
        return Err(NvidiaError::NothingFound(
            "no sharing.timeSlicing or sharing.mps resources (NVIDIA device plugin config)".into(),
        ));
    }
    Ok(found)
}

/// mig-parted configs (`version: v1` / `mig-configs:`; bare, in a ConfigMap, or in GPU Operator Helm values) →
/// one `mig_layout` record per config entry: which devices, MIG on or off, and how many of each profile.
pub fn mig_config(text: &str) -> Result<Vec<Value>, NvidiaError> {
    let mut found = Vec::new();
    for doc in documents(text)? {
        let mut configs = Vec::new();
        find_embedded(&doc, "mig-configs", None, &mut configs)?;
        for (_, file) in configs {
            let Some(named) = file["mig-configs"].as_object() else {
                return Err(NvidiaError::Invalid {
                    what: "mig-parted config".into(),
                    field: "mig-configs".into(),
                    reason: "not a map of config names".into(),
                });
            };
            for (name, entries) in named {
                let entries = entries.as_array().ok_or_else(|| NvidiaError::Invalid {
                    what: format!("mig config {name}"),
                    field: "entries".into(),
                    reason: "not a list".into(),
                })?;
                for (i, e) in entries.iter().enumerate() {
                    let what = format!("mig config {name}[{i}]");
                    let enabled = e["mig-enabled"].as_bool().ok_or_else(|| NvidiaError::Invalid {
                        what: what.clone(),
                        field: "mig-enabled".into(),
                        reason: "missing or not true/false".into(),
                    })?;
                    let mut profiles = BTreeMap::new();
                    if let Some(devs) = e["mig-devices"].as_object() {
                        for (profile, n) in devs {
                            let n = n.as_u64().ok_or_else(|| NvidiaError::Invalid {
                                what: what.clone(),
                                field: format!("mig-devices.{profile}"),
                                reason: format!("{n} is not a whole number"),
                            })?;
                            profiles.insert(profile.clone(), n);
                        }
                    }
                    if e["devices"].is_null() {
                        return Err(NvidiaError::Invalid { what, field: "devices".into(), reason: "missing".into() });
                    }
                    let mut rec = json!({
                        "kind": "mig_layout",
                        "config": name,
                        "devices": e["devices"],
                        "mig_enabled": enabled,
                        "profiles": profiles,
                    });
                    if !e["device-filter"].is_null() {
                        obj(&mut rec).insert("device_filter".into(), e["device-filter"].clone());
                    }
                    found.push(rec);
                }
            }
        }
    }
    if found.is_empty() {
        return Err(NvidiaError::NothingFound("no mig-configs (mig-parted config)".into()));
    }
    Ok(found)
}

/// KubeVirt `permittedHostDevices` → `permitted_device` records for NVIDIA devices (PCI passthrough and mediated
/// vGPU); other vendors' devices are named in notes.
pub fn kubevirt_config(text: &str) -> Result<Found, NvidiaError> {
    let mut found = Found::default();
    let mut seen = 0;
    for doc in documents(text)? {
        let mut lists = Vec::new();
        find_embedded(&doc, "permittedHostDevices", None, &mut lists)?;
        for (_, holder) in lists {
            let permitted = &holder["permittedHostDevices"];
            for (list, selector_key, mode) in [
                ("pciHostDevices", "pciVendorSelector", "passthrough"),
                ("mediatedDevices", "mdevNameSelector", "vgpu"),
            ] {
                for d in permitted[list].as_array().into_iter().flatten() {
                    seen += 1;
                    let what = format!("permittedHostDevices.{list}[]");
                    let resource = d["resourceName"].as_str().ok_or_else(|| NvidiaError::Invalid {
                        what: what.clone(),
                        field: "resourceName".into(),
                        reason: "missing".into(),
                    })?;
                    let selector = d[selector_key].as_str().ok_or_else(|| NvidiaError::Invalid {
                        what: format!("{what} {resource}"),
                        field: selector_key.into(),
                        reason: "missing".into(),
                    })?;
                    let nvidia =
                        resource.starts_with("nvidia.com/") || selector.to_ascii_uppercase().starts_with("10DE:");
                    if !nvidia {
                        found.notes.push(format!(
                            "{resource} ({selector}): not an NVIDIA device; the agent derives nothing from it"
                        ));
                        continue;
                    }
                    let mut rec = json!({
                        "kind": "permitted_device",
                        "resourceName": resource,
                        "selector": selector,
                        "mode": mode,
                        "externalResourceProvider": d["externalResourceProvider"].as_bool().unwrap_or(false),
                    });
                    if mode == "vgpu" {
                        let profile = dcgm::vgpu_profile(selector)
                            .or_else(|| dcgm::vgpu_profile(&format!("GRID {}", selector.trim_start_matches("GRID "))));
                        put(obj(&mut rec), "vgpu_profile", profile.map(Value::from));
                    }
                    found.records.push(rec);
                }
            }
        }
    }
    if seen == 0 {
        return Err(NvidiaError::NothingFound(
            "no permittedHostDevices with pciHostDevices or mediatedDevices (KubeVirt config)".into(),
        ));
    }
    Ok(found)
}

// ---------------------------------------------------------------------------------------------------------------
// GPU Feature Discovery node labels; kubectl tables

/// GPU Feature Discovery labels (a JSON map of label → value, as `kubectl get node -o json | jq .metadata.labels`
/// prints), or a whole Node object. With a Node UID this is the `node_observed` fact the `node` kind gives; the
/// labels alone carry no UID, so they are shown as a `node_labels` record (the fact's fields less `node_uid`) and
/// a note — no UID is made up.
pub fn node_labels(text: &str, at: OffsetDateTime) -> Result<Found, NvidiaError> {
    let v: Value = serde_json::from_str(strip_comments(text))
        .map_err(|e| NvidiaError::Parse { what: "node labels JSON".into(), reason: e.to_string() })?;
    let node = if v.get("metadata").is_some() {
        v
    } else {
        let labels = v
            .as_object()
            .ok_or_else(|| NvidiaError::NothingFound("node labels: expected a JSON object of labels".into()))?;
        if let Some((k, _)) = labels.iter().find(|(_, v)| !v.is_string()) {
            return Err(NvidiaError::Invalid {
                what: "node labels".into(),
                field: k.clone(),
                reason: "label values must be strings".into(),
            });
        }
        let name = labels.get("kubernetes.io/hostname").cloned().unwrap_or_else(|| Value::from("(unnamed)"));
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
    };
    let name = node["metadata"]["name"].as_str().unwrap_or("(unnamed)").to_owned();
    let mut found = Found::default();
    if !node["metadata"]["uid"].is_null() {
        match k8s::node_fact(&node, at)? {
            Some(f) => found.facts.push(f),
            None => found.notes.push(format!("Node {name}: no NVIDIA GPU labels or resources")),
        }
        return Ok(found);
    }
    // Derive through the same code with a stand-in UID, then drop the UID: the record never carries it.
    let mut stand_in = node.clone();
    obj(&mut stand_in["metadata"]).insert("uid".into(), Value::from(uuid::Uuid::nil().to_string()));
    match k8s::node_fact(&stand_in, at)? {
        Some(Fact { body: FactBody::NodeObserved(body), .. }) => {
            let mut rec = serde_json::to_value(&body)
                .map_err(|e| NvidiaError::Parse { what: "node fact".into(), reason: e.to_string() })?;
            let o = obj(&mut rec);
            o.remove("node_uid");
            o.insert("kind".into(), Value::from("node_labels"));
            found.records.push(rec);
            found.notes.push(format!(
                "Node {name}: labels without a node UID: shown as a node_labels record, not sent (a node_observed fact needs metadata.uid)"
            ));
        }
        _ => found.notes.push(format!("Node {name}: no NVIDIA GPU labels or resources")),
    }
    Ok(found)
}

/// `kubectl get …` table output: nothing to derive (no UIDs, requests or times); a note saying what was read.
pub fn kubectl_table(text: &str) -> Result<Found, NvidiaError> {
    let mut lines = strip_comments(text).lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().unwrap_or("");
    if !header.starts_with("NAME") && !header.starts_with("NAMESPACE") {
        return Err(NvidiaError::NothingFound("not kubectl table output (no NAME header)".into()));
    }
    let columns: Vec<&str> = header.split_whitespace().collect();
    let rows = lines.count();
    Ok(Found {
        notes: vec![format!(
            "kubectl table output carries no allocation facts ({rows} row(s); columns {}); \
             use `kubectl get -o yaml` and `inspect k8s`",
            columns.join(", ")
        )],
        ..Found::default()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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
