//! `cluster` mode: watches Namespaces, Nodes and Pods, derives allocation facts, and puts them in the spool.
//!
//! [`Deriver`] is the pure part (objects in, facts out, state kept), so it is tested without a cluster; [`run`]
//! feeds it from kube-rs watchers. Times come from the objects; the agent's clock only stamps `observed_at`, the
//! time a namespace's owner change was seen, and the last moment an allocation was known to exist (the estimated
//! end when it vanishes while nobody watched).

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{FutureExt, StreamExt};
use gpuledger_core::wire::{AllocationVanished, Fact, FactBody, event_id};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    discovery::Discovery,
    runtime::watcher::{self, Event},
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    k8s::{self, LabelKeys, NodeSharing, PodContext},
    scrape::Scraper,
    spool::Spool,
    training::ProgressWatch,
};

/// An allocation the agent saw start and not yet end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenAllocation {
    /// The pod (or VMI) holding it.
    pub pod_uid: Uuid,
    /// Held by a KubeVirt VMI rather than a pod.
    #[serde(default)]
    pub vmi: bool,
    /// The last time the agent knew the pod existed.
    #[serde(with = "time::serde::rfc3339")]
    pub last_seen: OffsetDateTime,
}

/// What survives an agent restart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Open allocations by allocation ID.
    pub open: BTreeMap<String, OpenAllocation>,
    /// Each namespace's last reported owner (`tenant|department`).
    pub owners: BTreeMap<Uuid, String>,
    /// Each ClusterQueue's last reported quotas (content digest).
    #[serde(default)]
    pub queues: BTreeMap<Uuid, String>,
    /// Since when each namespace's last reported owner holds (Unix nanoseconds, as in the fact sent): a re-list
    /// sends that very fact again (same event ID). Missing in state files of older agents.
    #[serde(default)]
    pub owners_since: BTreeMap<Uuid, i64>,
    /// Since when each ClusterQueue's last reported quotas hold (Unix nanoseconds), likewise.
    #[serde(default)]
    pub queues_since: BTreeMap<Uuid, i64>,
}

fn nanos(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos()).unwrap_or(i64::MAX)
}

fn from_nanos(n: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(n)).ok()
}

impl State {
    /// Loads the state file (empty state when missing).
    pub fn load(path: &Path) -> std::io::Result<Self> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// Saves atomically (temp file, fsync, rename).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    }
}

/// Objects in, facts out.
#[derive(Debug, Default)]
pub struct Deriver {
    /// Persisted state.
    pub state: State,
    keys: LabelKeys,
    default_replicas: Option<u32>,
    namespaces: BTreeMap<String, Uuid>,
    nodes: BTreeMap<String, NodeSharing>,
    /// Event IDs already spooled in this run (the server deduplicates too; this saves the bandwidth).
    sent: HashSet<String>,
    /// Holders seen during a re-list, by kind (false: pods, true: VMIs).
    relist: BTreeMap<bool, BTreeSet<Uuid>>,
    /// DRA: allocated NVIDIA devices by (namespace, claim name).
    claims: BTreeMap<(String, String), Vec<k8s::ClaimDevice>>,
    /// DRA: each pod that uses claims, as read (the fields classification needs, not the whole object).
    claim_pods: BTreeMap<Uuid, k8s::Pod>,
    /// A re-list after a spool drop: namespaces and queues whose last reported fact `state` remembers are sent
    /// again (the dropped copy may have been that fact), not skipped as unchanged.
    resend: bool,
}

impl Deriver {
    /// A deriver starting from `state`.
    pub fn new(state: State, keys: LabelKeys, default_replicas: Option<u32>) -> Self {
        Self { state, keys, default_replicas, ..Self::default() }
    }

    /// A deriver for a re-list after a spool drop: like [`Deriver::new`], but what `state` says was already
    /// reported (namespace owners, queue quotas) is reported again, with the same event IDs.
    pub fn relisting(state: State, keys: LabelKeys, default_replicas: Option<u32>) -> Self {
        Self { resend: true, ..Self::new(state, keys, default_replicas) }
    }

    fn fresh(&mut self, facts: Vec<Fact>) -> Vec<Fact> {
        facts.into_iter().filter(|f| self.sent.insert(f.event_id.clone())).collect()
    }

    /// A namespace was added or changed.
    pub fn on_namespace(&mut self, v: &Value, now: OffsetDateTime) -> Result<Vec<Fact>, k8s::K8sError> {
        // First sight with no remembered owner: the labels are taken to hold since creation. A later change is
        // dated when it was seen.
        let probe = k8s::namespace_fact(v, &self.keys, None, now)?;
        let FactBody::NamespaceObserved(n) = &probe.body else {
            return Ok(vec![]);
        };
        self.namespaces.insert(n.name.clone(), n.namespace_uid);
        let owner =
            format!("{}|{}", n.labels.tenant.as_deref().unwrap_or("-"), n.labels.department.as_deref().unwrap_or("-"));
        let uid = n.namespace_uid;
        let fact = match self.state.owners.get(&uid) {
            None => probe.clone(),
            Some(known) if *known == owner => {
                // The fact last sent, again — only when its date is known (older state files do not have it: a
                // fact dated otherwise would be another fact, and would rewrite the owner's history).
                match self.state.owners_since.get(&uid).copied().and_then(from_nanos) {
                    Some(since) if self.resend => k8s::namespace_fact(v, &self.keys, Some(since), now)?,
                    _ => return Ok(vec![]),
                }
            }
            Some(_) => k8s::namespace_fact(v, &self.keys, Some(now), now)?,
        };
        if let FactBody::NamespaceObserved(sent) = &fact.body {
            self.state.owners_since.insert(uid, nanos(sent.labels_since));
        }
        self.state.owners.insert(uid, owner);
        Ok(self.fresh(vec![fact]))
    }

    /// A node was added or changed.
    pub fn on_node(&mut self, v: &Value, now: OffsetDateTime) -> Result<Vec<Fact>, k8s::K8sError> {
        if let (Some(name), Some(labels)) = (v["metadata"]["name"].as_str(), v["metadata"]["labels"].as_object()) {
            let labels: BTreeMap<String, String> =
                labels.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect();
            self.nodes.insert(name.to_string(), NodeSharing::from_labels(&labels));
        }
        Ok(self.fresh(k8s::node_fact(v, now)?.into_iter().collect()))
    }

    /// A pod was added, changed (`deleted == false`) or deleted.
    pub fn on_pod(&mut self, v: &Value, deleted: bool, now: OffsetDateTime) -> Result<Vec<Fact>, k8s::K8sError> {
        // Read from the borrowed object: no copy of the whole pod.
        let pod = k8s::Pod::deserialize(v).map_err(|e| k8s::K8sError::Invalid {
            kind: "Pod".into(),
            name: v["metadata"]["name"].as_str().unwrap_or("?").into(),
            field: String::new(),
            reason: e.to_string(),
        })?;
        self.derive_pod(pod, deleted, now)
    }

    /// A pod as read: its facts, the open allocations and DRA bookkeeping updated.
    fn derive_pod(&mut self, pod: k8s::Pod, deleted: bool, now: OffsetDateTime) -> Result<Vec<Fact>, k8s::K8sError> {
        let Some(uid) = pod.metadata.uid.as_deref().and_then(|u| Uuid::parse_str(u).ok()) else {
            return Ok(vec![]);
        };
        if let Some(seen) = self.relist.get_mut(&false) {
            seen.insert(uid);
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        // Pods using DRA claims are remembered, so a claim allocated after the pod was seen re-derives it.
        let claim_names = pod.claim_names();
        if claim_names.is_empty() || deleted {
            self.claim_pods.remove(&uid);
        } else {
            self.claim_pods.insert(uid, pod.clone());
        }
        let claims = claim_names
            .iter()
            .filter_map(|c| self.claims.get(&(namespace.clone(), c.clone())).map(|d| (c.clone(), d.clone())))
            .collect();
        let ctx = PodContext {
            node: pod.node_name().and_then(|n| self.nodes.get(n)).cloned(),
            namespace_uid: self.namespaces.get(&namespace).copied(),
            default_replicas: self.default_replicas,
            claims,
        };
        let (facts, problems) = k8s::pod_facts(&pod, &ctx, &self.keys, now)?;
        for p in problems {
            tracing::warn!(pod = ?pod.metadata.name, problem = %p, "GPU request not classified");
        }
        Ok(self.track_open(facts, uid, false, deleted, now))
    }

    /// The pod (`vmi == false`) or VMI watch is (re)listing: facts about holders missing from the list come at
    /// [`Deriver::relist_done`].
    pub fn relist_begin(&mut self, vmi: bool) {
        self.relist.insert(vmi, BTreeSet::new());
    }

    /// The re-list is complete: every open allocation whose pod was not listed vanished while nobody watched.
    /// Its end is estimated as the last time the agent knew it existed.
    pub fn relist_done(&mut self, vmi: bool, now: OffsetDateTime) -> Vec<Fact> {
        let Some(seen) = self.relist.remove(&vmi) else {
            return vec![];
        };
        let gone: Vec<(String, OffsetDateTime)> = self
            .state
            .open
            .iter()
            .filter(|(_, o)| o.vmi == vmi && !seen.contains(&o.pod_uid))
            .map(|(id, o)| (id.clone(), o.last_seen))
            .collect();
        let mut out = Vec::new();
        for (id, last_seen) in gone {
            self.state.open.remove(&id);
            out.push(vanished(&id, last_seen, now));
        }
        for o in self.state.open.values_mut().filter(|o| o.vmi == vmi) {
            o.last_seen = now;
        }
        self.fresh(out)
    }

    /// A KubeVirt VMI was added, changed or deleted.
    pub fn on_vmi(&mut self, v: &Value, deleted: bool, now: OffsetDateTime) -> Result<Vec<Fact>, k8s::K8sError> {
        let Some(uid) = v["metadata"]["uid"].as_str().and_then(|u| Uuid::parse_str(u).ok()) else {
            return Ok(vec![]);
        };
        if let Some(seen) = self.relist.get_mut(&true) {
            seen.insert(uid);
        }
        let mut facts = k8s::vmi_facts(v, &self.keys, now)?;
        let namespace_uid = v["metadata"]["namespace"].as_str().and_then(|n| self.namespaces.get(n)).copied();
        for f in &mut facts {
            if let FactBody::AllocationStarted(s) = &mut f.body {
                s.namespace_uid = namespace_uid;
            }
        }
        Ok(self.track_open(facts, uid, true, deleted, now))
    }

    /// Keeps the open-allocation state in step with a holder's facts: starts open (or re-confirm) an allocation,
    /// ends close it; a deleted holder whose allocations show no end (a force delete) gets inferred ends.
    fn track_open(
        &mut self,
        mut facts: Vec<Fact>,
        holder: Uuid,
        vmi: bool,
        deleted: bool,
        now: OffsetDateTime,
    ) -> Vec<Fact> {
        let mut ended = BTreeSet::new();
        for f in &facts {
            match &f.body {
                FactBody::AllocationStarted(s) => {
                    self.state
                        .open
                        .entry(s.allocation_id.clone())
                        .and_modify(|o| o.last_seen = now)
                        .or_insert(OpenAllocation { pod_uid: holder, vmi, last_seen: now });
                }
                FactBody::AllocationEnded(e) => {
                    ended.insert(e.allocation_id.clone());
                }
                _ => {}
            }
        }
        if deleted {
            let still_open: Vec<String> = self
                .state
                .open
                .iter()
                .filter(|(id, o)| o.vmi == vmi && o.pod_uid == holder && !ended.contains(*id))
                .map(|(id, _)| id.clone())
                .collect();
            for id in still_open {
                facts.push(vanished(&id, now, now));
                ended.insert(id);
            }
        }
        for id in &ended {
            self.state.open.remove(id);
        }
        self.fresh(facts)
    }

    /// A DRA ResourceClaim was added, changed or deleted: its allocated devices; pods it is reserved for are
    /// derived again (a claim is often allocated after its pod is first seen).
    pub fn on_claim(&mut self, v: &Value, deleted: bool, now: OffsetDateTime) -> Result<Vec<Fact>, k8s::K8sError> {
        let Some((namespace, name, devices, reserved)) = k8s::claim_devices(v) else {
            return Ok(vec![]);
        };
        if deleted {
            self.claims.remove(&(namespace, name));
            return Ok(vec![]);
        }
        self.claims.insert((namespace, name), devices);
        let mut out = Vec::new();
        for pod_uid in reserved {
            if let Some(pod) = self.claim_pods.get(&pod_uid).cloned() {
                out.extend(self.derive_pod(pod, false, now)?);
            }
        }
        Ok(out)
    }

    /// A Kueue ClusterQueue was added or changed: its GPU quotas, when they change.
    pub fn on_cluster_queue(&mut self, v: &Value, now: OffsetDateTime) -> Result<Vec<Fact>, k8s::K8sError> {
        let Some(probe) = k8s::cluster_queue_fact(v, None, now)? else {
            return Ok(vec![]);
        };
        let FactBody::QuotaObserved(q) = &probe.body else {
            return Ok(vec![]);
        };
        let digest = serde_json::to_string(&q.quotas).unwrap_or_default();
        let uid = q.uid;
        let since = match self.state.queues.get(&uid) {
            None => None,
            Some(known) if *known == digest => match self.state.queues_since.get(&uid).copied().and_then(from_nanos) {
                // Re-listing: the fact last sent, again (see `on_namespace`).
                Some(since) if self.resend => Some(since),
                _ => return Ok(vec![]),
            },
            Some(_) => Some(now),
        };
        let fact = match since {
            None => probe.clone(),
            Some(since) => match k8s::cluster_queue_fact(v, Some(since), now)? {
                Some(f) => f,
                None => return Ok(vec![]),
            },
        };
        if let FactBody::QuotaObserved(sent) = &fact.body {
            self.state.queues_since.insert(uid, nanos(sent.since));
        }
        self.state.queues.insert(uid, digest);
        Ok(self.fresh(vec![fact]))
    }

    /// The watch is healthy: every open allocation is known to exist now.
    pub fn heartbeat(&mut self, now: OffsetDateTime) {
        for o in self.state.open.values_mut() {
            o.last_seen = now;
        }
    }
}

fn vanished(allocation_id: &str, last_seen_at: OffsetDateTime, observed_at: OffsetDateTime) -> Fact {
    Fact {
        event_id: event_id("alloc-vanished", &[allocation_id]),
        observed_at,
        body: FactBody::AllocationVanished(AllocationVanished {
            allocation_id: allocation_id.to_string(),
            last_seen_at,
        }),
    }
}

/// Options of the cluster watcher.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Where the state file lives.
    pub state_path: PathBuf,
    /// How often open allocations are confirmed while the watch is healthy.
    pub heartbeat: Duration,
    /// Model-server scraping; `None`: off.
    pub scrape: Option<ScrapeOptions>,
    /// Most objects per list request (`limit`; the API server hands the rest out page by page); `None`: the
    /// whole list in one answer.
    pub list_page_size: Option<u32>,
}

/// Why [`run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Asked to stop, or the watch streams ended.
    Stopped,
    /// The spool dropped facts and has since delivered everything it held: run again, re-listing every object, so
    /// what the cluster still holds is derived and sent again (the server stores duplicates once).
    Relist,
}

/// Default of `--list-page-size`: client-go's (and kube-rs's) page size.
pub const DEFAULT_LIST_PAGE_SIZE: u32 = 500;

/// Most watch events taken in one round (one spool append, one state save). Ready events are taken without
/// waiting, so a list page (at most [`DEFAULT_LIST_PAGE_SIZE`] objects, already in memory) is handled in one or
/// two rounds, while a quiet watch still handles each event at once.
const MAX_EVENTS_PER_ROUND: usize = 512;

/// How model servers are scraped (see [`crate::scrape`]).
#[derive(Debug, Clone)]
pub struct ScrapeOptions {
    /// Window length: the time between two scrapes.
    pub every: Duration,
    /// Longest wait for one server's metrics.
    pub timeout: Duration,
    /// Attribution keys (endpoint and model names).
    pub keys: LabelKeys,
    /// Where the scrape baselines are kept across restarts (`SPOOL_DIR/scrape.json`).
    pub state_path: PathBuf,
}

enum Ev {
    Namespace(Box<Event<Namespace>>),
    Node(Box<Event<k8s::WatchedNode>>),
    Pod(Box<Event<k8s::WatchedPod>>),
    Vmi(Box<Event<DynamicObject>>),
    Queue(Box<Event<DynamicObject>>),
    Claim(Box<Event<DynamicObject>>),
    Error(String),
}

/// Optional APIs found by discovery.
struct Optional {
    vmi: Option<ApiResource>,
    queue: Option<ApiResource>,
    claim: Option<ApiResource>,
}

/// Optional APIs, found by discovery: KubeVirt VMIs, Kueue ClusterQueues, DRA ResourceClaims.
async fn discover(client: &Client) -> Optional {
    let groups = ["kubevirt.io", "kueue.x-k8s.io", "resource.k8s.io"];
    let discovery = match Discovery::new(client.clone()).filter(&groups).run().await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "API discovery failed; watching core objects only");
            return Optional { vmi: None, queue: None, claim: None };
        }
    };
    let find = |group: &str, plural: &str| {
        discovery
            .get(group)
            .and_then(|g| g.recommended_resources().into_iter().find(|(ar, _)| ar.plural == plural).map(|(ar, _)| ar))
    };
    let found = Optional {
        vmi: find("kubevirt.io", "virtualmachineinstances"),
        queue: find("kueue.x-k8s.io", "clusterqueues"),
        claim: find("resource.k8s.io", "resourceclaims"),
    };
    tracing::info!(
        kubevirt = found.vmi.is_some(),
        kueue = found.queue.is_some(),
        dra = found.claim.is_some(),
        "optional APIs discovered"
    );
    found
}

/// Watches the cluster until `stop` is set, spooling every new fact.
pub async fn run(
    client: Client,
    mut deriver: Deriver,
    spool: Arc<Mutex<Spool>>,
    opts: WatchOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Ended> {
    // Drops the spool made before this run are another run's business (it re-listed already, or will at start).
    // Gaps whose dropped facts the spool remembers: once this run's lists are done, the IDs they produced say which
    // of those facts came back (a re-list after a drop; on a start, the gaps an earlier process left in the spool
    // directory, whose drops it may not have re-listed for).
    let (dropped_at_start, recovering) = {
        let spool = spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?;
        (spool.dropped_total(), spool.remembered_gaps())
    };
    let mut produced: Option<HashSet<String>> = (!recovering.is_empty()).then(HashSet::new);
    // The watcher hands a list out object by object (`Init`, `InitApply`…, `InitDone`) and holds one page at a
    // time, so the page size bounds what a (re-)list keeps in memory; Pods and Nodes are read down to the fields
    // the agent uses (`k8s::WatchedPod`, `k8s::WatchedNode`), which bounds what each object of a page weighs.
    let cfg = watcher::Config { page_size: opts.list_page_size, ..watcher::Config::default() };
    let ns = watcher::watcher(Api::<Namespace>::all(client.clone()), cfg.clone()).map(|e| match e {
        Ok(e) => Ev::Namespace(Box::new(e)),
        Err(e) => Ev::Error(format!("namespaces: {e}")),
    });
    let nodes = watcher::watcher(Api::<k8s::WatchedNode>::all(client.clone()), cfg.clone()).map(|e| match e {
        Ok(e) => Ev::Node(Box::new(e)),
        Err(e) => Ev::Error(format!("nodes: {e}")),
    });
    let pods = watcher::watcher(Api::<k8s::WatchedPod>::all(client.clone()), cfg.clone()).map(|e| match e {
        Ok(e) => Ev::Pod(Box::new(e)),
        Err(e) => Ev::Error(format!("pods: {e}")),
    });
    // Pods are classified against their node and namespace: the pod watcher starts (lists) only once namespaces,
    // nodes (and DRA claims) have been listed, rather than having its events held meanwhile — holding them
    // would keep a whole first list of pods in memory.
    let mut pods = Some(pods.boxed());
    let mut streams = vec![ns.boxed(), nodes.boxed()];
    let optional = discover(&client).await;
    // Pods wait for claims too (when DRA exists), so a pod's devices are known when it is first derived.
    let mut claims_ready = optional.claim.is_none();
    let (mut pods_ready, mut vmis_ready, mut queues_ready) = (false, optional.vmi.is_none(), optional.queue.is_none());
    // One watcher per discovered optional API, each event tagged with its kind.
    let dynamic = |ar: &ApiResource, what: &'static str, tag: fn(Box<Event<DynamicObject>>) -> Ev| {
        watcher::watcher(Api::<DynamicObject>::all_with(client.clone(), ar), cfg.clone())
            .map(move |e| match e {
                Ok(e) => tag(Box::new(e)),
                Err(e) => Ev::Error(format!("{what}: {e}")),
            })
            .boxed()
    };
    for (ar, what, tag) in [
        (&optional.claim, "resourceclaims", Ev::Claim as fn(Box<Event<DynamicObject>>) -> Ev),
        (&optional.vmi, "virtualmachineinstances", Ev::Vmi),
        (&optional.queue, "clusterqueues", Ev::Queue),
    ] {
        if let Some(ar) = ar {
            streams.push(dynamic(ar, what, tag));
        }
    }
    let mut events = futures::stream::select_all(streams);
    let (mut ns_ready, mut nodes_ready) = (false, false);
    let mut healthy = false;
    let mut heartbeat = tokio::time::interval(opts.heartbeat);
    let mut scraper = opts.scrape.as_ref().map(|o| Scraper::load(o.keys.clone(), &o.state_path, crate::clock::now()));
    let mut progress = ProgressWatch::default();
    let mut room = crate::backpressure::Room::default();
    let scrape_every = opts.scrape.as_ref().map_or(Duration::from_secs(3600), |o| o.every);
    let scrape_timeout = opts.scrape.as_ref().map_or(Duration::from_secs(10), |o| o.timeout);
    let mut scrape_tick = tokio::time::interval(scrape_every);
    scrape_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
    loop {
        let ev = tokio::select! {
            _ = scrape_tick.tick(), if scraper.is_some() => {
                if let Some(scraper) = scraper.as_mut() {
                    let (facts, errors) = scraper.scrape_all(&http, scrape_timeout).await;
                    for e in &errors {
                        tracing::warn!(error = %e, "model server not scraped");
                    }
                    if !facts.is_empty() {
                        crate::backpressure::until_written("spool", || {
                            let mut spool = spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?;
                            Ok(spool.append_facts(&facts)?)
                        })
                        .await?;
                        tracing::debug!(facts = facts.len(), "model-server totals spooled");
                    }
                    // Saved after the facts are spooled: a crash in between re-sends that window's start with more counts, and
                    // the server keeps the first (same event ID), so at most its tail is lost, nothing is counted twice.
                    if let Some(o) = &opts.scrape
                        && let Err(e) = scraper.save(&o.state_path)
                    {
                        tracing::warn!(path = %o.state_path.display(), error = %e, "scrape baselines not saved");
                    }
                }
                continue;
            }
            ev = events.next() => match ev { Some(ev) => ev, None => break },
            _ = heartbeat.tick() => {
                if healthy {
                    deriver.heartbeat(crate::clock::now());
                    crate::backpressure::until_written("watch state", || Ok(deriver.state.save(&opts.state_path)?))
                        .await?;
                }
                healthy = true;
                // After a drop, once the backlog is delivered: re-list, to recover what the cluster still holds.
                let (dropped, pending) = {
                    let spool = spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?;
                    (spool.dropped_total(), spool.pending_count())
                };
                if dropped > dropped_at_start && pending == 0 {
                    tracing::warn!(dropped = dropped - dropped_at_start, "the spool dropped facts; re-listing the cluster to recover them");
                    crate::backpressure::until_written("watch state", || Ok(deriver.state.save(&opts.state_path)?))
                        .await?;
                    return Ok(Ended::Relist);
                }
                continue;
            }
            _ = stop.changed() => break,
        };
        let now = crate::clock::now();
        let mut facts = Vec::new();
        // This event and the ones already waiting (the rest of a list page): one spool append (one fsync) and one
        // state save for all of them, instead of one per object.
        let mut round = vec![ev];
        while round.len() < MAX_EVENTS_PER_ROUND {
            match events.next().now_or_never() {
                Some(Some(ev)) => round.push(ev),
                _ => break,
            }
        }
        for ev in round {
            match ev {
                Ev::Namespace(e) => match *e {
                    Event::Apply(o) | Event::InitApply(o) => facts.extend(deriver.on_namespace(&to_value(&o)?, now)?),
                    Event::InitDone => ns_ready = true,
                    _ => {}
                },
                Ev::Node(e) => match *e {
                    Event::Apply(o) | Event::InitApply(o) => facts.extend(deriver.on_node(&to_value(&o)?, now)?),
                    Event::InitDone => nodes_ready = true,
                    _ => {}
                },
                Ev::Pod(e) => match *e {
                    Event::Init => deriver.relist_begin(false),
                    Event::InitApply(o) | Event::Apply(o) => {
                        let v = to_value(&o)?;
                        drop(o);
                        discover_target(scraper.as_mut(), &v, false);
                        facts.extend(training_progress(&mut progress, &v, false, now));
                        facts.extend(log_err(deriver.on_pod(&v, false, now)))
                    }
                    Event::Delete(o) => {
                        let v = to_value(&o)?;
                        drop(o);
                        discover_target(scraper.as_mut(), &v, true);
                        facts.extend(training_progress(&mut progress, &v, true, now));
                        facts.extend(log_err(deriver.on_pod(&v, true, now)))
                    }
                    Event::InitDone => {
                        facts.extend(deriver.relist_done(false, now));
                        healthy = true;
                        pods_ready = true;
                    }
                },
                Ev::Vmi(e) => match *e {
                    Event::Init => deriver.relist_begin(true),
                    Event::InitApply(o) | Event::Apply(o) => {
                        facts.extend(log_err(deriver.on_vmi(&to_value(&o)?, false, now)))
                    }
                    Event::Delete(o) => facts.extend(log_err(deriver.on_vmi(&to_value(&o)?, true, now))),
                    Event::InitDone => {
                        facts.extend(deriver.relist_done(true, now));
                        vmis_ready = true;
                    }
                },
                Ev::Claim(e) => match *e {
                    Event::InitApply(o) | Event::Apply(o) => {
                        facts.extend(log_err(deriver.on_claim(&to_value(&o)?, false, now)))
                    }
                    Event::Delete(o) => facts.extend(log_err(deriver.on_claim(&to_value(&o)?, true, now))),
                    Event::InitDone => claims_ready = true,
                    Event::Init => {}
                },
                Ev::Queue(e) => match *e {
                    Event::InitApply(o) | Event::Apply(o) => {
                        facts.extend(log_err(deriver.on_cluster_queue(&to_value(&o)?, now)))
                    }
                    Event::InitDone => queues_ready = true,
                    _ => {}
                },
                Ev::Error(e) => {
                    healthy = false;
                    tracing::warn!(error = %e, "watch interrupted; it will re-list");
                }
            }
        }
        if ns_ready
            && nodes_ready
            && claims_ready
            && let Some(pods) = pods.take()
        {
            tracing::info!("namespaces and nodes listed; listing pods");
            events.push(pods);
        }
        if let Some(ids) = produced.as_mut() {
            ids.extend(facts.iter().map(|f| f.event_id.clone()));
        }
        if !facts.is_empty() {
            let needed: u64 = facts.iter().map(|f| serde_json::to_vec(f).map_or(0, |v| v.len() as u64 + 16)).sum();
            room.wait(&spool, needed).await?;
            crate::backpressure::until_written("spool", || {
                let mut spool = spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?;
                Ok(spool.append_facts(&facts)?)
            })
            .await?;
            tracing::debug!(facts = facts.len(), "spooled");
        }
        let listed = ns_ready && nodes_ready && claims_ready && pods_ready && vmis_ready && queues_ready;
        if listed && let Some(ids) = produced.take() {
            account_for_gaps(&spool, &recovering, &ids, dropped_at_start, now)?;
        }
        crate::backpressure::until_written("watch state", || Ok(deriver.state.save(&opts.state_path)?)).await?;
    }
    deriver.state.save(&opts.state_path)?;
    Ok(Ended::Stopped)
}

/// Every list is done: spools, for each gap of `gaps`, what of its dropped facts this run derived again (`produced`).
/// Skipped when the spool dropped facts during this run (a re-sent fact may be among them): the gaps stay
/// remembered, and the re-list that drop causes accounts for them.
fn account_for_gaps(
    spool: &Mutex<Spool>,
    gaps: &[String],
    produced: &HashSet<String>,
    dropped_at_start: u64,
    now: OffsetDateTime,
) -> anyhow::Result<()> {
    let mut spool = spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?;
    if spool.dropped_total() != dropped_at_start {
        tracing::warn!("the spool dropped facts during the re-list; the earlier gaps are accounted for after the next");
        return Ok(());
    }
    let facts = spool.recovery_facts(gaps, produced, now);
    for f in &facts {
        if let FactBody::GapRecovered(r) = &f.body {
            let lost: u64 = r.kinds.iter().map(|k| k.lost).sum::<u64>() + r.unaccounted;
            let recovered: u64 = r.kinds.iter().map(|k| k.recovered).sum();
            tracing::info!(gap = %r.gap, recovered, lost, "re-list done: the gap's dropped facts accounted for");
        }
    }
    spool.append_facts(&facts)?;
    Ok(())
}

/// A pod event updates the scrape targets (a pod whose annotations cannot be used is logged, not scraped).
fn discover_target(scraper: Option<&mut Scraper>, pod: &Value, deleted: bool) {
    if let Some(scraper) = scraper
        && let Err(e) = scraper.on_pod(pod, deleted)
    {
        tracing::warn!(error = %e, "model server not scraped");
    }
}

/// A pod event's training progress (an annotation that is not a count is logged, not sent).
fn training_progress(watch: &mut ProgressWatch, pod: &Value, deleted: bool, now: OffsetDateTime) -> Option<Fact> {
    watch.on_pod(pod, deleted, now).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "training progress not read");
        None
    })
}

fn to_value<T: Serialize>(o: &T) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(o)?)
}

fn log_err(r: Result<Vec<Fact>, k8s::K8sError>) -> Vec<Fact> {
    r.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "object skipped");
        vec![]
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;
    use time::macros::datetime;

    fn pod(uid: &str, state: Value, deletion: Option<&str>) -> Value {
        json!({
            "metadata": {"name": "train-0", "namespace": "ml", "uid": uid, "deletionTimestamp": deletion},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "startTime": "2026-10-01T08:00:00Z",
                       "containerStatuses": [{"name": "main", "state": state}]}
        })
    }

    const UID: &str = "6d4c1f62-27a5-4f67-9c39-2f6b4c1d0a11";

    #[test]
    fn start_then_end_from_the_pod_timestamps_and_no_duplicates() {
        let mut d = Deriver::default();
        let now = datetime!(2026-10-01 12:00 UTC);
        let running = pod(UID, json!({"running": {"startedAt": "2026-10-01T08:00:05Z"}}), None);
        let facts = d.on_pod(&running, false, now).unwrap();
        assert_eq!(facts.len(), 1);
        assert!(
            matches!(&facts[0].body, FactBody::AllocationStarted(s) if s.started_at == datetime!(2026-10-01 08:00:05 UTC))
        );
        assert_eq!(d.on_pod(&running, false, now).unwrap().len(), 0, "an unchanged pod yields nothing new");
        assert_eq!(d.state.open.len(), 1);
        let done = pod(
            UID,
            json!({"terminated": {"startedAt": "2026-10-01T08:00:05Z", "finishedAt": "2026-10-01T11:30:00Z"}}),
            None,
        );
        let facts = d.on_pod(&done, false, now).unwrap();
        assert_eq!(facts.len(), 1);
        assert!(
            matches!(&facts[0].body, FactBody::AllocationEnded(e) if e.ended_at == datetime!(2026-10-01 11:30 UTC))
        );
        assert!(d.state.open.is_empty());
    }

    #[test]
    fn a_pod_gone_during_a_gap_vanishes_at_its_last_sighting() {
        let mut d = Deriver::default();
        let t1 = datetime!(2026-10-01 09:00 UTC);
        d.on_pod(&pod(UID, json!({"running": {"startedAt": "2026-10-01T08:00:05Z"}}), None), false, t1).unwrap();
        d.heartbeat(datetime!(2026-10-01 09:30 UTC));
        // The agent restarts (state persisted) and re-lists: the pod is gone.
        let mut d = Deriver::new(d.state.clone(), LabelKeys::default(), None);
        d.relist_begin(false);
        let facts = d.relist_done(false, datetime!(2026-10-01 13:00 UTC));
        assert_eq!(facts.len(), 1);
        match &facts[0].body {
            FactBody::AllocationVanished(v) => {
                assert_eq!(v.last_seen_at, datetime!(2026-10-01 09:30 UTC))
            }
            other => panic!("{other:?}"),
        }
        assert!(d.state.open.is_empty());
    }

    #[test]
    fn a_pod_still_listed_after_a_gap_does_not_vanish() {
        let mut d = Deriver::default();
        let p = pod(UID, json!({"running": {"startedAt": "2026-10-01T08:00:05Z"}}), None);
        d.on_pod(&p, false, datetime!(2026-10-01 09:00 UTC)).unwrap();
        d.relist_begin(false);
        d.on_pod(&p, false, datetime!(2026-10-01 10:00 UTC)).unwrap();
        assert!(d.relist_done(false, datetime!(2026-10-01 10:00 UTC)).is_empty());
        assert_eq!(d.state.open.len(), 1);
    }

    #[test]
    fn namespace_owner_changes_are_dated_when_seen() {
        let mut d = Deriver::default();
        let ns = |tenant: &str| {
            json!({"metadata": {"name": "ml", "uid": "0b7f2d8e-8d1c-4a8e-9a51-7b1f0e6a2c33",
                   "creationTimestamp": "2026-09-01T00:00:00Z", "labels": {"gpuledger.io/tenant": tenant}}})
        };
        let first = d.on_namespace(&ns("nlp"), datetime!(2026-10-01 00:00 UTC)).unwrap();
        match &first[0].body {
            FactBody::NamespaceObserved(n) => {
                assert_eq!(n.labels_since, datetime!(2026-09-01 00:00 UTC))
            }
            other => panic!("{other:?}"),
        }
        assert!(d.on_namespace(&ns("nlp"), datetime!(2026-10-02 00:00 UTC)).unwrap().is_empty());
        let change = d.on_namespace(&ns("vision"), datetime!(2026-10-15 12:00 UTC)).unwrap();
        match &change[0].body {
            FactBody::NamespaceObserved(n) => {
                assert_eq!(n.labels_since, datetime!(2026-10-15 12:00 UTC));
                assert_eq!(n.labels.tenant.as_deref(), Some("vision"));
            }
            other => panic!("{other:?}"),
        }
    }

    /// A re-list after a spool drop sends the namespace owner and queue quota facts the state says were sent again,
    /// with the dropped copies' event IDs (first sight and change alike); a plain restart does not, nor does a re-list
    /// from an older agent's state file, which lacks the dates (another date would make another fact).
    #[test]
    fn a_re_list_sends_known_owners_and_quotas_again_with_the_same_event_ids() {
        let ns = |tenant: &str| {
            json!({"metadata": {"name": "ml", "uid": "0b7f2d8e-8d1c-4a8e-9a51-7b1f0e6a2c33",
                   "creationTimestamp": "2026-09-01T00:00:00Z", "labels": {"gpuledger.io/tenant": tenant}}})
        };
        let queue = |gpus: &str| {
            json!({"metadata": {"name": "team-a", "uid": "5c1e2f3a-9b8d-4e7f-a6c5-1d2e3f4a5b6c",
                   "creationTimestamp": "2026-08-01T00:00:00Z"},
                   "spec": {"resourceGroups": [{"flavors": [{"name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}})
        };
        let (t1, t2, t3) = (
            datetime!(2026-10-01 00:00:00.5 UTC),
            datetime!(2026-10-15 12:00:00.25 UTC),
            datetime!(2026-12-02 00:00 UTC),
        );
        let mut d = Deriver::default();
        let first = d.on_namespace(&ns("nlp"), t1).unwrap();
        let quotas = d.on_cluster_queue(&queue("8"), t1).unwrap();
        let changed = d.on_namespace(&ns("vision"), t2).unwrap();
        assert_eq!((first.len(), quotas.len(), changed.len()), (1, 1, 1));
        // As the state file keeps it.
        let state: State = serde_json::from_slice(&serde_json::to_vec(&d.state).unwrap()).unwrap();
        let mut restart = Deriver::new(state.clone(), LabelKeys::default(), None);
        assert!(restart.on_namespace(&ns("vision"), t3).unwrap().is_empty());
        assert!(restart.on_cluster_queue(&queue("8"), t3).unwrap().is_empty());
        let mut relist = Deriver::relisting(state.clone(), LabelKeys::default(), None);
        let again = relist.on_namespace(&ns("vision"), t3).unwrap();
        assert_eq!(again.iter().map(|f| &f.event_id).collect::<Vec<_>>(), vec![&changed[0].event_id]);
        match &again[0].body {
            FactBody::NamespaceObserved(n) => assert_eq!(n.labels_since, t2, "dated as first sent"),
            other => panic!("{other:?}"),
        }
        let again = relist.on_cluster_queue(&queue("8"), t3).unwrap();
        assert_eq!(again.iter().map(|f| &f.event_id).collect::<Vec<_>>(), vec![&quotas[0].event_id]);
        let mut older = state;
        older.owners_since.clear();
        older.queues_since.clear();
        let mut relist = Deriver::relisting(older, LabelKeys::default(), None);
        assert!(relist.on_namespace(&ns("vision"), t3).unwrap().is_empty());
        assert!(relist.on_cluster_queue(&queue("8"), t3).unwrap().is_empty());
    }

    #[test]
    fn node_labels_decide_time_slicing() {
        let mut d = Deriver::default();
        d.on_node(
            &json!({"metadata": {"name": "n1", "uid": "1e0f7a55-4b1c-4c55-8d5c-2a7e0a9b1c44",
                    "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB", "nvidia.com/gpu.replicas": "4"}},
                    "status": {"allocatable": {"nvidia.com/gpu": "4"}}}),
            datetime!(2026-10-01 00:00 UTC),
        )
        .unwrap();
        let facts = d
            .on_pod(
                &pod(UID, json!({"running": {"startedAt": "2026-10-01T08:00:05Z"}}), None),
                false,
                datetime!(2026-10-01 09:00 UTC),
            )
            .unwrap();
        match &facts[0].body {
            FactBody::AllocationStarted(s) => {
                assert_eq!(s.mode, gpuledger_core::sharing::SharingMode::TimeSlice { replicas: 4 });
                assert_eq!(s.gpu_model.as_deref(), Some("NVIDIA-A100-PCIE-40GB"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_dra_claim_allocated_after_its_pod_was_seen_yields_the_allocation() {
        let mut d = Deriver::default();
        let pod = json!({
            "metadata": {"name": "dra-0", "namespace": "ml", "uid": UID},
            "spec": {"nodeName": "n1", "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-mig"}],
                     "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]},
            "status": {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "dra-0-gpu-x1"}],
                       "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": "2026-10-01T08:00:05Z"}}}]}
        });
        let now = datetime!(2026-10-01 09:00 UTC);
        assert!(d.on_pod(&pod, false, now).unwrap().is_empty(), "no devices known yet");
        let claim = json!({
            "metadata": {"name": "dra-0-gpu-x1", "namespace": "ml", "uid": "e0000000-0000-4000-8000-000000000001"},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0-mig-1g.10gb-3"},
                {"request": "nic", "driver": "net.example.com", "pool": "n1", "device": "eth1"}]}},
                       "reservedFor": [{"resource": "pods", "name": "dra-0", "uid": UID}]}
        });
        let facts = d.on_claim(&claim, false, now).unwrap();
        assert_eq!(facts.len(), 1, "{facts:?}");
        match &facts[0].body {
            FactBody::AllocationStarted(s) => {
                assert_eq!(s.mode, gpuledger_core::sharing::SharingMode::Mig { profile: "1g.10gb".parse().unwrap() });
                assert_eq!(s.resource, "dra:dra-0-gpu-x1/gpu.nvidia.com/gpu-0-mig-1g.10gb-3");
                assert_eq!(s.device_ids, vec!["n1/gpu-0-mig-1g.10gb-3".to_string()]);
                assert_eq!(s.started_at, datetime!(2026-10-01 08:00:05 UTC));
            }
            other => panic!("{other:?}"),
        }
        // A whole-GPU device is exclusive.
        let mut whole = claim.clone();
        whole["status"]["allocation"]["devices"]["results"][0]["device"] = json!("gpu-1");
        whole["metadata"]["name"] = json!("other");
        let (_, _, devices, _) = k8s::claim_devices(&whole).unwrap();
        assert_eq!(devices.len(), 1);
    }

    #[test]
    fn state_survives_a_save_and_load() {
        let dir = std::env::temp_dir().join(format!("gl-state-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut d = Deriver::default();
        d.on_pod(
            &pod(UID, json!({"running": {"startedAt": "2026-10-01T08:00:05Z"}}), None),
            false,
            datetime!(2026-10-01 09:00 UTC),
        )
        .unwrap();
        let path = dir.join("state.json");
        d.state.save(&path).unwrap();
        assert_eq!(State::load(&path).unwrap(), d.state);
        assert_eq!(State::load(&dir.join("missing.json")).unwrap(), State::default());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
