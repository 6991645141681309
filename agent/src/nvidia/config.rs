//! YAML configs: device-plugin sharing, mig-parted, KubeVirt.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Found, NvidiaError, obj, put};
use crate::metrics::dcgm;

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
