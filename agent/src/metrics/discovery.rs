//! Model-server endpoints discovered from pod annotations: a pure function from a Pod (JSON, as the cluster watch
//! and `kubectl get -o json` give it) to the [`ScrapeTarget`] the agent would scrape. The scheme is documented in
//! `docs/agent.md`:
//!
//! | annotation | meaning | default |
//! |---|---|---|
//! | `gpuledger.io/modelserver` | `vllm`, `triton`, `tgi` or `nim`: scrape this pod | none: not scraped |
//! | `gpuledger.io/metrics-port` | metrics port (1–65535) | vLLM 8000, Triton 8002, TGI 80, NIM 8000 |
//! | `gpuledger.io/metrics-path` | metrics path | `/v1/metrics` for NIM, else `/metrics` |
//! | `gpuledger.io/endpoint` | the shared endpoint's name | the pod's endpoint attribution label |
//! | `gpuledger.io/model` | the model served (needed for TGI, whose metrics carry none) | the model label |
//!
//! The endpoint and model are read like the other attribution keys (labels first, then annotations, with the keys
//! the agent is configured with), so a pod labelled `gpuledger.io/endpoint: llm-shared` needs no extra annotation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::modelserver::Server;
use crate::k8s::{LabelKeys, Meta};

/// Annotation naming the server kind; its presence is what makes a pod a scrape target.
pub const ANNOTATION_SERVER: &str = "gpuledger.io/modelserver";
/// Annotation naming the metrics port.
pub const ANNOTATION_PORT: &str = "gpuledger.io/metrics-port";
/// Annotation naming the metrics path.
pub const ANNOTATION_PATH: &str = "gpuledger.io/metrics-path";

/// Where a server kind serves its metrics by default: (port, path).
///
/// vLLM's OpenAI server listens on 8000 and serves `/metrics`; Triton serves metrics on its own port 8002; the TGI
/// container image listens on 80 (`PORT=80`; the bare launcher's default is 3000); NIM for LLMs serves
/// `/v1/metrics` on 8000.
pub fn default_port_and_path(server: Server) -> (u16, &'static str) {
    match server {
        Server::Vllm => (8000, "/metrics"),
        Server::Triton => (8002, "/metrics"),
        Server::Tgi => (80, "/metrics"),
        Server::Nim => (8000, "/v1/metrics"),
    }
}

/// One model-server pod to scrape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScrapeTarget {
    /// `http://<pod IP>:<port><path>`.
    pub url: String,
    /// Server kind.
    pub server: Server,
    /// The shared endpoint's name (the `endpoint` of its `service_usage` facts).
    pub endpoint: String,
    /// The model, when the pod says (required by TGI's reading; the other servers name it in their metrics).
    pub model: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Pod name.
    pub pod: Option<String>,
    /// Pod UID.
    pub pod_uid: Option<String>,
}

/// A pod asks to be scraped but its annotations cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// `gpuledger.io/modelserver` names no server this agent reads.
    #[error("pod {pod}: {ANNOTATION_SERVER}={value:?} is not one of vllm, triton, tgi, nim")]
    UnknownServer {
        /// `namespace/name`.
        pod: String,
        /// The annotation's value.
        value: String,
    },
    /// `gpuledger.io/metrics-port` is not a port number.
    #[error("pod {pod}: {ANNOTATION_PORT}={value:?} is not a port number (1-65535)")]
    BadPort {
        /// `namespace/name`.
        pod: String,
        /// The annotation's value.
        value: String,
    },
    /// `gpuledger.io/metrics-path` does not start with `/` or holds blanks.
    #[error("pod {pod}: {ANNOTATION_PATH}={value:?} must be a path starting with '/'")]
    BadPath {
        /// `namespace/name`.
        pod: String,
        /// The annotation's value.
        value: String,
    },
    /// No endpoint name: neither the endpoint label nor the annotation is set.
    #[error("pod {pod}: a model server needs an endpoint name (label or annotation {keys})")]
    NoEndpoint {
        /// `namespace/name`.
        pod: String,
        /// The keys looked for, comma-separated.
        keys: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PodView {
    metadata: Meta,
    status: StatusView,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct StatusView {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
}

fn find<'a>(
    keys: &[String],
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
) -> Option<&'a str> {
    keys.iter().find_map(|k| labels.get(k).or_else(|| annotations.get(k)).map(|v| v.trim()).filter(|v| !v.is_empty()))
}

/// The scrape target a pod declares, from its annotations (see the module docs). `Ok(None)`: the pod does not ask
/// to be scraped, or cannot be scraped now (not `Running`, no pod IP yet, or being deleted). `keys`: the
/// attribution keys the agent is configured with (`endpoint` and `model` are read from them).
pub fn scrape_target(pod: &Value, keys: &LabelKeys) -> Result<Option<ScrapeTarget>, DiscoveryError> {
    let Ok(view) = PodView::deserialize(pod) else {
        return Ok(None);
    };
    let meta = &view.metadata;
    let Some(kind) = meta.annotations.get(ANNOTATION_SERVER).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let who = format!("{}/{}", meta.namespace.as_deref().unwrap_or("-"), meta.name.as_deref().unwrap_or("(unnamed)"));
    let server = Server::from_name(kind)
        .ok_or_else(|| DiscoveryError::UnknownServer { pod: who.clone(), value: kind.into() })?;
    let (default_port, default_path) = default_port_and_path(server);
    let port = match meta.annotations.get(ANNOTATION_PORT).map(|v| v.trim()) {
        None | Some("") => default_port,
        Some(v) => v
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| DiscoveryError::BadPort { pod: who.clone(), value: v.into() })?,
    };
    let path = match meta.annotations.get(ANNOTATION_PATH).map(|v| v.trim()) {
        None | Some("") => default_path,
        Some(v) if v.starts_with('/') && !v.contains(char::is_whitespace) => v,
        Some(v) => return Err(DiscoveryError::BadPath { pod: who, value: v.into() }),
    };
    let endpoint = find(&keys.endpoint, &meta.labels, &meta.annotations)
        .ok_or_else(|| DiscoveryError::NoEndpoint { pod: who.clone(), keys: keys.endpoint.join(",") })?;
    let model = find(&keys.model, &meta.labels, &meta.annotations).map(str::to_owned);
    let running = view.status.phase.as_deref() == Some("Running") && meta.deletion_timestamp.is_none();
    let Some(ip) = view.status.pod_ip.as_deref().map(str::trim).filter(|ip| running && !ip.is_empty()) else {
        return Ok(None);
    };
    let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_owned() };
    Ok(Some(ScrapeTarget {
        url: format!("http://{host}:{port}{path}"),
        server,
        endpoint: endpoint.to_owned(),
        model,
        namespace: meta.namespace.clone(),
        pod: meta.name.clone(),
        pod_uid: meta.uid.clone(),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;
    use crate::{inspect::read_documents, metrics::fixtures};

    /// A real running pod (Run:ai, live object with status and pod IP) with annotations added.
    fn live_pod(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Value {
        let mut pod = read_documents(&fixtures::read("k8s", "pod_live_runai_mig_1g5gb.yaml")).unwrap().remove(0);
        for (k, v) in annotations {
            pod["metadata"]["annotations"][*k] = json!(v);
        }
        for (k, v) in labels {
            pod["metadata"]["labels"][*k] = json!(v);
        }
        pod
    }

    fn target(pod: &Value) -> Result<Option<ScrapeTarget>, DiscoveryError> {
        scrape_target(pod, &LabelKeys::default())
    }

    #[test]
    fn the_fixture_is_a_running_pod_with_an_ip() {
        let pod = live_pod(&[], &[]);
        assert_eq!(pod["status"]["phase"], "Running");
        assert!(pod["status"]["podIP"].as_str().is_some_and(|ip| !ip.is_empty()), "{}", pod["status"]);
        // Without the annotation it is not a model server.
        assert_eq!(target(&pod), Ok(None));
    }

    #[test]
    fn defaults_per_server_and_endpoint_from_the_label() {
        let ip = live_pod(&[], &[])["status"]["podIP"].as_str().unwrap().to_owned();
        for (kind, url) in [
            ("vllm", format!("http://{ip}:8000/metrics")),
            ("Triton", format!("http://{ip}:8002/metrics")),
            ("tgi", format!("http://{ip}:80/metrics")),
            ("nim", format!("http://{ip}:8000/v1/metrics")),
        ] {
            let pod = live_pod(&[(ANNOTATION_SERVER, kind)], &[("gpuledger.io/endpoint", "llm-shared")]);
            let t = target(&pod).unwrap().unwrap();
            assert_eq!(t.url, url);
            assert_eq!(t.server.name(), kind.to_lowercase());
            assert_eq!(t.endpoint, "llm-shared");
            assert_eq!(t.model, None);
            assert_eq!(t.namespace.as_deref(), Some("runai-team-a"));
            assert_eq!(t.pod_uid.as_deref(), Some("cb9aaa99-97df-4c10-bfa7-c1ed024c672b"));
        }
    }

    #[test]
    fn annotations_override_port_path_endpoint_and_model() {
        let pod = live_pod(
            &[
                (ANNOTATION_SERVER, "tgi"),
                (ANNOTATION_PORT, "3000"),
                (ANNOTATION_PATH, "/internal/metrics"),
                ("gpuledger.io/endpoint", "chat"),
                ("gpuledger.io/model", "mistralai/Mistral-7B-Instruct-v0.3"),
            ],
            &[],
        );
        let t = target(&pod).unwrap().unwrap();
        assert!(t.url.ends_with(":3000/internal/metrics"), "{}", t.url);
        assert_eq!((t.endpoint.as_str(), t.model.as_deref()), ("chat", Some("mistralai/Mistral-7B-Instruct-v0.3")));
        // A label wins over the annotation, as for every attribution key.
        let mut labelled = pod.clone();
        labelled["metadata"]["labels"]["gpuledger.io/endpoint"] = json!("from-label");
        assert_eq!(target(&labelled).unwrap().unwrap().endpoint, "from-label");
        // Configured keys are honoured.
        let keys = LabelKeys { endpoint: vec!["app.kubernetes.io/instance".into()], ..LabelKeys::default() };
        let mut other = pod.clone();
        other["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("inst");
        assert_eq!(scrape_target(&other, &keys).unwrap().unwrap().endpoint, "inst");
    }

    #[test]
    fn ipv6_pod_ips_are_bracketed() {
        let mut pod = live_pod(&[(ANNOTATION_SERVER, "vllm")], &[("gpuledger.io/endpoint", "e")]);
        pod["status"]["podIP"] = json!("fd00::1");
        assert_eq!(target(&pod).unwrap().unwrap().url, "http://[fd00::1]:8000/metrics");
    }

    #[test]
    fn not_running_or_deleted_pods_are_not_scraped_yet() {
        let base = live_pod(&[(ANNOTATION_SERVER, "vllm")], &[("gpuledger.io/endpoint", "e")]);
        let mut pending = base.clone();
        pending["status"]["phase"] = json!("Pending");
        assert_eq!(target(&pending), Ok(None));
        let mut no_ip = base.clone();
        no_ip["status"].as_object_mut().unwrap().remove("podIP");
        assert_eq!(target(&no_ip), Ok(None));
        let mut deleting = base.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2023-01-19T08:00:00Z");
        assert_eq!(target(&deleting), Ok(None));
        // A manifest with no status at all (the NVIDIA docs' pod).
        let mut manifest =
            read_documents(&fixtures::read("k8s", "pod_nvidia_gpu_1_k8s_device_plugin_readme.yaml")).unwrap().remove(0);
        manifest["metadata"]["annotations"] = json!({"gpuledger.io/modelserver": "vllm", "gpuledger.io/endpoint": "e"});
        assert_eq!(target(&manifest), Ok(None));
    }

    #[test]
    fn bad_annotations_are_clear_errors() {
        let e = |a: &[(&str, &str)]| target(&live_pod(a, &[("gpuledger.io/endpoint", "e")])).unwrap_err();
        assert!(matches!(e(&[(ANNOTATION_SERVER, "ollama")]), DiscoveryError::UnknownServer { .. }));
        for port in ["0", "70000", "http", "-1"] {
            let err = e(&[(ANNOTATION_SERVER, "vllm"), (ANNOTATION_PORT, port)]);
            assert!(matches!(err, DiscoveryError::BadPort { .. }), "{port}: {err}");
        }
        let err = e(&[(ANNOTATION_SERVER, "vllm"), (ANNOTATION_PATH, "metrics")]);
        assert!(err.to_string().contains("runai-team-a/"), "{err}");
        let no_endpoint = target(&live_pod(&[(ANNOTATION_SERVER, "vllm")], &[])).unwrap_err();
        assert!(matches!(no_endpoint, DiscoveryError::NoEndpoint { .. }), "{no_endpoint}");
    }

    #[test]
    fn a_k8s_openapi_pod_goes_through_the_same_path() {
        // The cluster watch receives `k8s_openapi` Pods and hands their JSON on.
        let v = live_pod(&[(ANNOTATION_SERVER, "nim")], &[("gpuledger.io/endpoint", "nim-llama")]);
        let typed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(v.clone()).unwrap();
        let back = serde_json::to_value(&typed).unwrap();
        assert_eq!(target(&back).unwrap(), target(&v).unwrap());
        assert!(target(&back).unwrap().is_some());
    }
}
