//! A stand-in Kubernetes API server for whole-system tests: it speaks the real wire format — list responses
//! and `?watch=true` streams of newline-delimited watch events — for core/v1 resources, so the agent's real
//! kube-rs watcher runs against it unchanged. Objects are changed by the test while agents watch.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use anyhow::Result;
use axum::{
    Router,
    body::Body,
    extract::{Path as UrlPath, Query, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::{Value, json};
use tokio::sync::broadcast;

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<(String, u64, Value)>,
}

struct Inner {
    rv: u64,
    /// resource → uid → object
    objects: BTreeMap<String, BTreeMap<String, Value>>,
    /// resource → the list requests answered, in order.
    lists: BTreeMap<String, Vec<ListRequest>>,
    /// The last [`HISTORY`] watch events (resource, resourceVersion, event): a watch from a resourceVersion replays
    /// what came after it, as the real server's watch cache does, so a change between a client's list and its watch
    /// is not lost.
    history: std::collections::VecDeque<(String, u64, Value)>,
    /// The resourceVersion of the newest event dropped from `history`: a watch from before it is answered 410.
    history_floor: u64,
}

/// Watch events kept for replay.
const HISTORY: usize = 5_000;

/// The watch event the real server sends for a resourceVersion older than its watch cache: the client re-lists.
fn expired_event() -> Value {
    json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version", "reason": "Expired", "code": 410}})
}

fn event_line(event: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(event).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A running fake API server.
pub struct FakeKube {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

fn kind_of(resource: &str) -> &'static str {
    match resource {
        "pods" => "Pod",
        "nodes" => "Node",
        "namespaces" => "Namespace",
        "virtualmachineinstances" => "VirtualMachineInstance",
        "clusterqueues" => "ClusterQueue",
        "resourceclaims" => "ResourceClaim",
        _ => "Unknown",
    }
}

fn api_version_of(resource: &str) -> &'static str {
    match resource {
        "virtualmachineinstances" => "kubevirt.io/v1",
        "clusterqueues" => "kueue.x-k8s.io/v1beta1",
        "resourceclaims" => "resource.k8s.io/v1",
        _ => "v1",
    }
}

/// The optional API groups this server offers: (group, version, plural, kind, namespaced).
const GROUPS: &[(&str, &str, &str, &str, bool)] = &[
    ("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance", true),
    ("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", false),
    ("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", true),
];

async fn api_groups() -> axum::Json<Value> {
    let groups: Vec<Value> = GROUPS
        .iter()
        .map(|(g, v, _, _, _)| {
            let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
            json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    axum::Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

async fn api_resources(UrlPath((group, version)): UrlPath<(String, String)>) -> Response {
    match GROUPS.iter().find(|(g, v, _, _, _)| *g == group && *v == version) {
        Some((g, v, plural, kind, namespaced)) => axum::Json(json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{g}/{v}"),
            "resources": [{"name": plural, "singularName": kind.to_lowercase(), "namespaced": namespaced,
                           "kind": kind, "verbs": ["get", "list", "watch"]}]
        }))
        .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn group_list_or_watch(
    state: State<Shared>,
    UrlPath((_group, _version, resource)): UrlPath<(String, String, String)>,
    query: Query<BTreeMap<String, String>>,
) -> Response {
    list_or_watch(state, UrlPath(resource), query).await
}

impl FakeKube {
    /// Starts serving on a free loopback port.
    pub async fn start() -> Result<Self> {
        Self::start_on("127.0.0.1:0").await
    }

    /// Starts serving on `addr` (`HOST:PORT`; port 0 picks a free one).
    pub async fn start_on(addr: &str) -> Result<Self> {
        let (events, _) = broadcast::channel(1024);
        let shared = Shared {
            inner: Arc::new(Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                lists: BTreeMap::new(),
                history: std::collections::VecDeque::new(),
                history_floor: 0,
            })),
            events,
        };
        let app = Router::new()
            .route("/api/v1/{resource}", get(list_or_watch))
            .route("/api", get(|| async { axum::Json(json!({"kind": "APIVersions", "versions": ["v1"]})) }))
            .route("/apis", get(api_groups))
            .route("/api/v1/namespaces/{namespace}/{resource}/{name}", axum::routing::patch(apply_patch))
            .route("/apis/{group}/{version}", get(api_resources))
            .route("/apis/{group}/{version}/{resource}", get(group_list_or_watch))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, shared, task })
    }

    fn change(&self, resource: &str, kind: &str, mut object: Value) -> Result<()> {
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let mut inner = self.shared.inner.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        inner.rv += 1;
        let rv = inner.rv;
        object["metadata"]["resourceVersion"] = Value::from(rv.to_string());
        object["apiVersion"] = Value::from(api_version_of(resource));
        object["kind"] = Value::from(kind_of(resource));
        let objects = inner.objects.entry(resource.to_string()).or_default();
        let event_type = match kind {
            "DELETED" => {
                objects.remove(&uid);
                "DELETED"
            }
            _ if objects.contains_key(&uid) => {
                objects.insert(uid, object.clone());
                "MODIFIED"
            }
            _ => {
                objects.insert(uid, object.clone());
                "ADDED"
            }
        };
        let event = json!({"type": event_type, "object": object});
        inner.history.push_back((resource.to_string(), rv, event.clone()));
        if inner.history.len() > HISTORY
            && let Some((_, old, _)) = inner.history.pop_front()
        {
            inner.history_floor = old;
        }
        drop(inner);
        let _ = self.shared.events.send((resource.to_string(), rv, event));
        Ok(())
    }

    /// Adds or replaces an object (`resource`: `pods`, `nodes`, `namespaces`).
    pub fn apply(&self, resource: &str, object: Value) -> Result<()> {
        self.change(resource, "APPLY", object)
    }

    /// Deletes an object (the watch sees the final object).
    pub fn delete(&self, resource: &str, object: Value) -> Result<()> {
        self.change(resource, "DELETED", object)
    }

    /// Changes an object while nobody is told: what a cluster does while the agent is down. The next list
    /// shows the new state.
    pub fn apply_silently(&self, resource: &str, mut object: Value) -> Result<()> {
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let mut inner = self.shared.inner.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        inner.rv += 1;
        object["metadata"]["resourceVersion"] = Value::from(inner.rv.to_string());
        object["apiVersion"] = Value::from(api_version_of(resource));
        object["kind"] = Value::from(kind_of(resource));
        inner.objects.entry(resource.to_string()).or_default().insert(uid, object);
        Ok(())
    }

    /// Deletes an object while nobody is told.
    pub fn delete_silently(&self, resource: &str, uid: &str) -> Result<()> {
        let mut inner = self.shared.inner.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        inner.rv += 1;
        if let Some(o) = inner.objects.get_mut(resource) {
            o.remove(uid);
        }
        Ok(())
    }

    /// The list requests answered for `resource` so far, oldest first.
    pub fn list_requests(&self, resource: &str) -> Vec<ListRequest> {
        self.shared.inner.lock().ok().and_then(|i| i.lists.get(resource).cloned()).unwrap_or_default()
    }

    /// An object stored by a server-side apply (`PATCH`), by `namespace/name`.
    pub fn stored(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let inner = self.shared.inner.lock().ok()?;
        inner.objects.get(resource)?.get(&format!("{namespace}/{name}")).cloned()
    }

    /// Writes a kubeconfig pointing at this server and returns its path.
    pub fn kubeconfig(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join("kubeconfig.yaml");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n",
                self.url
            ),
        )?;
        Ok(path)
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn list_or_watch(
    State(shared): State<Shared>,
    UrlPath(resource): UrlPath<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    if kind_of(&resource) == "Unknown" {
        return (StatusCode::NOT_FOUND, axum::Json(json!({"kind": "Status", "status": "Failure", "code": 404})))
            .into_response();
    }
    if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let from: u64 = query.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        // Subscribed before the history is read: an event in between comes both ways and is sent once (by rv).
        let rx = shared.events.subscribe();
        let (replay, expired) = match shared.inner.lock() {
            Ok(inner) if from > 0 && from < inner.history_floor => (Vec::new(), true),
            Ok(inner) => (
                inner
                    .history
                    .iter()
                    .filter(|(r, rv, _)| *r == resource && *rv > from)
                    .map(|(_, rv, e)| (*rv, e.clone()))
                    .collect::<Vec<_>>(),
                false,
            ),
            Err(_) => (Vec::new(), true),
        };
        let last = replay.last().map_or(from, |(rv, _)| *rv);
        let first: Vec<Result<Vec<u8>, std::io::Error>> = if expired {
            vec![Ok(event_line(&expired_event()))]
        } else {
            replay.iter().map(|(_, e)| Ok(event_line(e))).collect()
        };
        let live = futures::stream::unfold(
            (if expired { None } else { Some(rx) }, resource, last),
            |(rx, resource, last)| async move {
                let mut rx = rx?;
                loop {
                    match rx.recv().await {
                        Ok((r, rv, event)) if r == resource && rv > last => {
                            return Some((Ok::<_, std::io::Error>(event_line(&event)), (Some(rx), resource, rv)));
                        }
                        Ok(_) => continue,
                        // Events were missed: as the real server, say the resourceVersion is too old; the client
                        // re-lists. (Silently skipping them would lose changes.)
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            return Some((Ok(event_line(&expired_event())), (None, resource, last)));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            },
        );
        let stream = futures::StreamExt::chain(futures::stream::iter(first), live);
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .unwrap_or_default();
    }
    list(&shared, &resource, &query)
}

/// One list request as the server saw it (for tests that check the client pages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// The `limit` asked for.
    pub limit: Option<usize>,
    /// Whether a `continue` token was sent.
    pub continued: bool,
    /// Objects in the answer.
    pub items: usize,
}

/// A continue token: the resourceVersion of the list's first page and the last key served. Opaque to clients,
/// as the real server's is (base64 of JSON there too).
fn continue_token(rv: u64, last_key: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!({"rv": rv, "start": last_key}).to_string())
}

fn read_continue_token(token: &str) -> Option<(u64, String)> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    Some((v["rv"].as_u64()?, v["start"].as_str()?.to_string()))
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code.as_u16()});
    (code, axum::Json(body)).into_response()
}

/// A list, paged as the real API server pages: `limit` caps the items, `metadata.continue` (an opaque token)
/// asks for the rest, `metadata.remainingItemCount` counts it. Every page of one list is consistent with its
/// first page: the real server reads the later pages from etcd at the first page's revision. This server keeps
/// no old revisions, so a continue token issued before any change answers `410 Gone` (reason `Expired`), as the
/// real server does once that revision is compacted; clients then list again from the start.
fn list(shared: &Shared, resource: &str, query: &BTreeMap<String, String>) -> Response {
    let Ok(mut inner) = shared.inner.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let token = query.get("continue").filter(|c| !c.is_empty());
    // As the real server: `resourceVersion=0` asks for the watch cache, which ignores `limit` on a first page.
    let from_cache = token.is_none() && query.get("resourceVersion").is_some_and(|v| v == "0");
    let limit = query.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0 && !from_cache);
    let after = match token.map(|t| read_continue_token(t)) {
        None => None,
        Some(None) => return status(StatusCode::BAD_REQUEST, "BadRequest", "continue key is not valid"),
        Some(Some((rv, _))) if rv != inner.rv => {
            return status(
                StatusCode::GONE,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            );
        }
        Some(Some((_, key))) => Some(key),
    };
    let rv = inner.rv;
    let empty = BTreeMap::new();
    let objects = inner.objects.get(resource).unwrap_or(&empty);
    let mut rest: Box<dyn Iterator<Item = (&String, &Value)>> = match &after {
        Some(key) => Box::new(objects.range::<String, _>((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded))),
        None => Box::new(objects.iter()),
    };
    // The body is written item by item: a 10,000-object list is never copied as a whole.
    let mut body =
        format!(r#"{{"apiVersion":{},"kind":"{}List","items":["#, json!(api_version_of(resource)), kind_of(resource))
            .into_bytes();
    let mut served = 0usize;
    let mut last_key = None;
    for (key, object) in rest.by_ref().take(limit.unwrap_or(usize::MAX)) {
        if served > 0 {
            body.push(b',');
        }
        if serde_json::to_writer(&mut body, object).is_err() {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        served += 1;
        last_key = Some(key.clone());
    }
    let remaining = rest.count();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if remaining > 0
        && let Some(key) = &last_key
    {
        metadata["continue"] = json!(continue_token(rv, key));
        metadata["remainingItemCount"] = json!(remaining);
    }
    body.extend_from_slice(format!(r#"],"metadata":{metadata}}}"#).as_bytes());
    inner.lists.entry(resource.to_string()).or_default().push(ListRequest {
        limit,
        continued: after.is_some(),
        items: served,
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Server-side apply of a namespaced object (what `kubectl apply --server-side` and kube-rs `Patch::Apply` send):
/// stored as given, keyed by `namespace/name`.
async fn apply_patch(
    State(shared): State<Shared>,
    UrlPath((namespace, resource, name)): UrlPath<(String, String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.starts_with("application/apply-patch") || !query.contains_key("fieldManager") {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, "only server-side apply with a fieldManager").into_response();
    }
    let Ok(mut object) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "body is not JSON").into_response();
    };
    let Ok(mut inner) = shared.inner.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    inner.rv += 1;
    object["metadata"]["resourceVersion"] = Value::from(inner.rv.to_string());
    inner.objects.entry(resource).or_default().insert(format!("{namespace}/{name}"), object.clone());
    axum::Json(object).into_response()
}
