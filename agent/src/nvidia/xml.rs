//! `nvidia-smi -q -x`: devices and processes from the XML log.

use gpuledger_core::wire::{DeviceFact, MigDeviceFact};
use time::OffsetDateTime;

use super::{
    Found, GpuProcess, NvidiaError, UNKNOWN_NODE, device_facts, leading_u32, leading_u64, push_processes,
    strip_comments,
};
use crate::metrics::dcgm;

/// An XML element, copied out of `roxmltree`'s borrowed tree so it can be returned from the parse; the logs are
/// small, so the copy costs nothing worth keeping the document alive for.
#[derive(Debug, Default, Clone)]
pub(super) struct Element {
    pub(super) name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Element>,
    /// The element's own text (its text and CDATA children, in order), entities decoded.
    text: String,
}

impl Element {
    pub(super) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> {
        self.children.iter().filter(move |c| c.name == name)
    }

    fn path(&self, path: &[&str]) -> Option<&Element> {
        path.iter().try_fold(self, |e, p| e.child(p))
    }

    /// The trimmed text at `path`; `None` when absent, empty or `N/A`.
    pub(super) fn text_at(&self, path: &[&str]) -> Option<&str> {
        let t = self.path(path)?.text.trim();
        (!t.is_empty() && t != "N/A").then_some(t)
    }

    pub(super) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn shell(node: roxmltree::Node<'_, '_>) -> Element {
        Element {
            name: node.tag_name().name().to_owned(),
            attrs: node.attributes().map(|a| (a.name().to_owned(), a.value().to_owned())).collect(),
            ..Element::default()
        }
    }

    /// Copies `node`'s subtree. A loop with its own stack, not recursion: a deeply nested input must not overflow
    /// the thread's stack.
    fn copy(node: roxmltree::Node<'_, '_>) -> Element {
        let mut stack = vec![(Element::shell(node), node.children())];
        loop {
            let next = stack.last_mut().map(|(_, children)| children.next());
            match next {
                Some(Some(c)) if c.is_element() => stack.push((Element::shell(c), c.children())),
                Some(Some(c)) => {
                    if let (Some(t), Some((top, _))) = (c.is_text().then(|| c.text()).flatten(), stack.last_mut()) {
                        top.text.push_str(t);
                    }
                }
                Some(None) | None => {
                    let Some((done, _)) = stack.pop() else { return Element::default() };
                    match stack.last_mut() {
                        Some((parent, _)) => parent.children.push(done),
                        None => return done,
                    }
                }
            }
        }
    }
}

/// Parses an XML document with `roxmltree`. DTDs are allowed because `nvidia-smi -q -x` starts with a
/// `<!DOCTYPE … SYSTEM "nvsmi_device_vNN.dtd">`; external DTDs are never fetched.
pub(super) fn parse_xml(text: &str) -> Result<Element, NvidiaError> {
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..roxmltree::ParsingOptions::default() };
    let doc = roxmltree::Document::parse_with_options(text, options).map_err(|e| xml_error(text, &e))?;
    Ok(Element::copy(doc.root_element()))
}

/// `roxmltree`'s error in our words, with the 1-based line it points at.
fn xml_error(text: &str, e: &roxmltree::Error) -> NvidiaError {
    use roxmltree::Error as E;
    let line = usize::try_from(e.pos().row).unwrap_or(usize::MAX);
    match e {
        E::UnexpectedCloseTag(open, close, _) => {
            NvidiaError::Xml { line, reason: format!("</{close}> closes <{open}>") }
        }
        // These carry no position; the end of the text is where the parser gave up.
        E::UnclosedRootNode | E::UnexpectedEndOfStream => {
            NvidiaError::Xml { line: text.lines().count().max(1), reason: "an element is never closed".into() }
        }
        E::NoRootNode => NvidiaError::Xml { line, reason: "not XML: no root element".into() },
        _ => NvidiaError::Xml { line, reason: e.to_string() },
    }
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
