//! GPU Feature Discovery node labels; kubectl tables.

use gpuledger_core::wire::{Fact, FactBody};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::{Found, NvidiaError, obj, strip_comments};
use crate::k8s;

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
