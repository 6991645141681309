//! Allocation intervals derived from all stored facts about an allocation: resolved fractions against the
//! inventory, device assignment, and recomputation when the inventory or a namespace naming rule changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpuledger_core::{
    confidence::Confidence,
    fraction::Fraction,
    ids::{ClusterId, OrgId},
    interval::Validity,
    sharing::{
        GapReason, Inventory, ModelMemory, ProfileFraction, ProfileKind, ShareBasis, ShareBasisVersion, SharingMode,
        resolve_fraction, resolve_share,
    },
    wire::{AllocationStart, Fact, FactBody, FlaggedFact},
};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::history::apply_namespace;
use super::store::intervals::{self as store, AssignedColumns, IntervalRows};
use crate::{db::OrgTx, error::AppError};

/// GPU model names differ by source (`NVIDIA-A100-SXM4-40GB` in node labels, `NVIDIA A100-SXM4-40GB` from the
/// driver): compare them case-insensitively with spaces and hyphens alike.
pub fn normalize_model(model: &str) -> String {
    let m = model.trim().to_ascii_lowercase().replace([' ', '_'], "-");
    // GPU Feature Discovery's product label (`nvidia.com/gpu.product`) appends `-SHARED` on time-sliced or MPS
    // nodes and `-MIG-<profile>` under the single MIG strategy: the model is what comes before.
    let m = m.strip_suffix("-shared").map_or_else(|| m.clone(), str::to_string);
    match m.find("-mig-") {
        Some(i) if i > 0 => m[..i].to_string(),
        _ => m,
    }
}

/// The organization's approved profile fractions and GPU models (small tables: loaded per batch).
pub(super) struct InventorySnapshot {
    pub(super) profiles: Inventory,
    /// normalized model → [(valid_from, valid_to, class)]
    pub(super) classes: HashMap<String, Vec<(OffsetDateTime, Option<OffsetDateTime>, String)>>,
}

impl InventorySnapshot {
    async fn load(tx: &mut OrgTx, cluster: ClusterId) -> Result<Self, AppError> {
        let rows = store::profile_rows(tx).await?;
        let mut profiles = Inventory::new();
        for (kind, model, profile, num, den, from, to) in rows {
            let entry = (|| {
                Ok::<_, gpuledger_core::error::DomainError>(ProfileFraction {
                    kind: if kind == "mig" { ProfileKind::Mig } else { ProfileKind::Vgpu },
                    gpu_model: normalize_model(&model),
                    profile,
                    fraction: Fraction::new(num.into(), den.into())?,
                    valid: Validity::new(from, to)?,
                })
            })()
            .map_err(|e| AppError::Internal(format!("inventory row is invalid: {e}")))?;
            profiles.insert(entry).map_err(|e| AppError::Internal(format!("inventory is inconsistent: {e}")))?;
        }
        let model_rows = store::model_rows(tx).await?;
        let mut classes: HashMap<String, Vec<_>> = HashMap::new();
        for store::ModelRow { model, valid_from: from, valid_to: to, gpu_class: class, memory_mib: memory } in
            model_rows
        {
            if let Some(mib) = memory.and_then(|m| u64::try_from(m).ok()) {
                let entry = Validity::new(from, to)
                    .map(|valid| ModelMemory { gpu_model: normalize_model(&model), memory_mib: mib, valid })
                    .and_then(|e| profiles.insert_memory(e));
                entry.map_err(|e| AppError::Internal(format!("inventory model memory is inconsistent: {e}")))?;
            }
            classes.entry(normalize_model(&model)).or_default().push((from, to, class));
        }
        for version in share_bases_for(tx, cluster).await? {
            profiles
                .insert_share_basis(version)
                .map_err(|e| AppError::Internal(format!("share bases are inconsistent: {e}")))?;
        }
        Ok(Self { profiles, classes })
    }

    fn only_model_for(&self, mode: &SharingMode) -> Option<String> {
        let SharingMode::Vgpu { profile } = mode else { return None };
        let models: BTreeSet<&str> = self
            .profiles
            .entries()
            .iter()
            .filter(|e| e.kind == ProfileKind::Vgpu && e.profile == profile.as_str())
            .map(|e| e.gpu_model.as_str())
            .collect();
        let mut it = models.into_iter();
        match (it.next(), it.next()) {
            (Some(only), None) => Some(only.to_string()),
            _ => None,
        }
    }

    fn class_at(&self, model: &str, at: OffsetDateTime) -> Option<&str> {
        self.classes
            .get(&normalize_model(model))?
            .iter()
            .find_map(|(from, to, class)| (*from <= at && to.is_none_or(|t| at < t)).then_some(class.as_str()))
    }
}

/// The share-basis versions that apply on `cluster`: its own, and the organization's where it has none of its own
/// (an organization-wide version is cut around the cluster's versions).
async fn share_bases_for(tx: &mut OrgTx, cluster: ClusterId) -> Result<Vec<ShareBasisVersion>, AppError> {
    let rows = store::share_basis_rows(tx, cluster).await?;
    let bad = |e: gpuledger_core::error::DomainError| AppError::Internal(format!("share basis row is invalid: {e}"));
    let own: Vec<(OffsetDateTime, Option<OffsetDateTime>)> = rows.iter().filter(|r| r.0).map(|r| (r.2, r.3)).collect();
    let mut out = Vec::new();
    for (own_cluster, basis, from, to) in &rows {
        let basis: ShareBasis = basis.parse().map_err(bad)?;
        if *own_cluster {
            out.push(ShareBasisVersion { basis, valid: Validity::new(*from, *to).map_err(bad)? });
            continue;
        }
        // The organization's version minus the cluster's own versions (sorted by start); `None`: past the end of time.
        let mut cursor = Some(*from);
        for (own_from, own_to) in &own {
            let Some(at) = cursor else { break };
            if to.is_some_and(|t| *own_from >= t) {
                break;
            }
            if own_to.is_some_and(|t| t <= at) {
                continue;
            }
            if *own_from > at {
                out.push(ShareBasisVersion { basis, valid: Validity::new(at, Some(*own_from)).map_err(bad)? });
            }
            cursor = own_to.map(|t| t.max(at));
        }
        if let Some(at) = cursor
            && to.is_none_or(|t| at < t)
        {
            out.push(ShareBasisVersion { basis, valid: Validity::new(at, *to).map_err(bad)? });
        }
    }
    Ok(out)
}

/// Takes, until the transaction ends, the cluster's turn at matching device assignments with allocations. A batch
/// with a new allocation looks for assignments already stored; a batch with a new assignment looks for allocations
/// already stored. Run at once, neither saw the other's uncommitted row and the assignment was lost (seen: the same
/// demo on two databases gave 4 of 1,994 allocations different devices). With the turn, whichever runs second reads
/// after the first committed. Ingest takes it before a batch writes anything (`super::store`); the matching functions
/// take it again (a no-op then) for their other callers.
pub(super) async fn lock_assignments(tx: &mut OrgTx, cluster: ClusterId) -> Result<(), AppError> {
    let id = cluster.as_uuid();
    let b = id.as_bytes();
    let key = i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) ^ 0x6465_7669_6365_7321;
    store::advisory_xact_lock(tx, key).await?;
    Ok(())
}

/// One kubelet assignment, as [`assign_devices`] applies it.
pub(super) struct Assigned {
    pub(super) pod_uid: Option<Uuid>,
    pub(super) namespace: String,
    pub(super) pod: String,
    pub(super) container: String,
    pub(super) resource: String,
    pub(super) devices: Vec<String>,
    pub(super) at: OffsetDateTime,
}

/// Puts assignments on the intervals they belong to (pods: the cluster agent sees the request, the node agent the
/// devices): matched by pod UID, else by namespace and pod name, plus container and resource; an assignment
/// replaces the interval's devices only if they came from an earlier assignment or there were none, so the latest
/// assignment wins whatever order the facts arrive in.
pub(super) async fn assign_devices(tx: &mut OrgTx, cluster: ClusterId, assigned: &[Assigned]) -> Result<(), AppError> {
    lock_assignments(tx, cluster).await?;
    let (by_uid, by_name): (Vec<&Assigned>, Vec<&Assigned>) = assigned.iter().partition(|a| a.pod_uid.is_some());
    for (rows, matched_by_uid) in [(by_uid, true), (by_name, false)] {
        if rows.is_empty() {
            continue;
        }
        // The latest assignment of each pod container and resource, chosen here: as a `DISTINCT ON` subquery the
        // statement could not be routed to one shard on Citus (it went to every shard).
        let mut latest: HashMap<(Option<Uuid>, &str, &str, &str, &str), &Assigned> = HashMap::new();
        for r in rows {
            let key = (r.pod_uid, r.namespace.as_str(), r.pod.as_str(), r.container.as_str(), r.resource.as_str());
            match latest.get(&key) {
                Some(kept) if kept.at >= r.at => {}
                _ => {
                    latest.insert(key, r);
                }
            }
        }
        let rows: Vec<&Assigned> = latest.into_values().collect();
        let columns = AssignedColumns {
            uids: rows.iter().map(|r| r.pod_uid).collect(),
            namespaces: rows.iter().map(|r| r.namespace.as_str()).collect(),
            pods: rows.iter().map(|r| r.pod.as_str()).collect(),
            containers: rows.iter().map(|r| r.container.as_str()).collect(),
            resources: rows.iter().map(|r| r.resource.as_str()).collect(),
            devices: rows.iter().map(|r| serde_json::Value::from(r.devices.clone())).collect(),
            ats: rows.iter().map(|r| r.at).collect(),
        };
        store::update_assigned_devices(tx, cluster, matched_by_uid, &columns).await?;
    }
    Ok(())
}

/// New intervals whose assignment arrived before them: the latest stored assignment of each. Two plain queries
/// (the intervals, then their subjects' events by the subject index) rather than a join PostgreSQL plans per row.
pub(super) async fn assign_stored_devices(
    tx: &mut OrgTx,
    cluster: ClusterId,
    allocation_ids: &[String],
) -> Result<(), AppError> {
    lock_assignments(tx, cluster).await?;
    let waiting = store::intervals_awaiting_devices(tx, cluster, allocation_ids).await?;
    if waiting.is_empty() {
        return Ok(());
    }
    let mut subjects = Vec::with_capacity(waiting.len() * 2);
    for store::AwaitingDevices { holder_uid: uid, namespace, holder_name: pod, container, .. } in &waiting {
        subjects.push(format!("{uid}/{container}"));
        subjects.push(format!("{namespace}/{pod}/{container}"));
    }
    let events = store::device_assignment_events(tx, cluster, &subjects).await?;
    // (subject, resource) → the latest assignment.
    let mut latest: HashMap<(String, String), (OffsetDateTime, serde_json::Value)> = HashMap::new();
    for (subject, resource, devices, at) in events {
        let slot = latest.entry((subject, resource.unwrap_or_default())).or_insert((at, devices.clone()));
        if at > slot.0 {
            *slot = (at, devices);
        }
    }
    let mut assigned = Vec::new();
    for store::AwaitingDevices { holder_uid: uid, namespace, holder_name: pod, container, resource } in waiting {
        let found = [format!("{uid}/{container}"), format!("{namespace}/{pod}/{container}")]
            .into_iter()
            .filter_map(|s| latest.get(&(s, resource.clone())))
            .max_by_key(|(at, _)| *at);
        if let Some((at, devices)) = found {
            assigned.push(Assigned {
                pod_uid: Some(uid),
                namespace: String::new(),
                pod: String::new(),
                container,
                resource,
                devices: serde_json::from_value(devices.clone()).unwrap_or_default(),
                at: *at,
            });
        }
    }
    assign_devices(tx, cluster, &assigned).await
}

/// After the inventory changed for `model` from `from`: recomputes, from their stored facts, the allocations it may
/// concern — on that model and started at or after `from` (class and fraction are taken at the start), and any
/// still without a fraction or class (an inventory gap the change may close). Returns how many.
pub(crate) async fn recompute_for_inventory(
    tx: &mut OrgTx,
    org: OrgId,
    model: &str,
    from: OffsetDateTime,
) -> Result<u64, AppError> {
    let candidates = store::inventory_candidates(tx, org, from).await?;
    let wanted = normalize_model(model);
    let concerned = candidates.into_iter().filter_map(|(cluster, allocation, gpu_model, gap)| {
        let same_model = gpu_model.as_deref().is_some_and(|m| normalize_model(m) == wanted);
        // Without a model (vGPU VMs, passthrough) the model is found at recompute time: retry the gaps.
        (same_model || (gap && gpu_model.is_none())).then_some((cluster, allocation))
    });
    recompute_by_cluster(tx, org, concerned).await
}

/// After a share-basis version from `from` on `cluster` (`None`: every cluster): prices again the soft-shared
/// allocations that started since. Returns how many.
pub(crate) async fn recompute_soft_shares(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: Option<Uuid>,
    from: OffsetDateTime,
) -> Result<u64, AppError> {
    let candidates = store::soft_share_candidates(tx, org, cluster, from).await?;
    recompute_by_cluster(tx, org, candidates).await
}

/// Recomputes the given (cluster, allocation) intervals from their stored facts, per cluster in chunks. Returns how
/// many.
async fn recompute_by_cluster(
    tx: &mut OrgTx,
    org: OrgId,
    allocations: impl IntoIterator<Item = (Uuid, String)>,
) -> Result<u64, AppError> {
    let mut by_cluster: BTreeMap<Uuid, Vec<String>> = BTreeMap::new();
    for (cluster, allocation) in allocations {
        by_cluster.entry(cluster).or_default().push(allocation);
    }
    let mut n = 0u64;
    let mut flagged = Vec::new();
    for (cluster, ids) in by_cluster {
        n += ids.len() as u64;
        // The cluster's turn before its intervals are rewritten (see lock_assignments).
        lock_assignments(tx, ClusterId::from_uuid(cluster)).await?;
        for chunk in ids.chunks(5_000) {
            recompute_intervals(tx, org, ClusterId::from_uuid(cluster), chunk, &mut flagged).await?;
        }
    }
    Ok(n)
}

/// After tenant `name` was defined: applies again, in their order, the stored namespace facts whose labels name
/// it, so namespaces labelled before the tenant existed are owned from when their labels said so. Returns how many
/// namespaces it concerned.
pub(crate) async fn reapply_namespaces_naming(tx: &mut OrgTx, org: OrgId, name: &str) -> Result<u64, AppError> {
    let rows = store::namespace_facts_naming(tx, org, name).await?;
    let mut namespaces = BTreeSet::new();
    let mut flagged = Vec::new();
    for (cluster, event_id, payload) in rows {
        let fact: Fact = serde_json::from_value(payload)
            .map_err(|e| AppError::Internal(format!("stored fact {event_id} no longer parses: {e}")))?;
        if let FactBody::NamespaceObserved(n) = &fact.body {
            namespaces.insert(n.namespace_uid);
            apply_namespace(tx, org, ClusterId::from_uuid(cluster), n, &event_id, &mut flagged).await?;
        }
    }
    Ok(namespaces.len() as u64)
}

/// Recomputes the intervals of `allocation_ids` from every stored fact about them.
pub(super) async fn recompute_intervals(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    allocation_ids: &[String],
    flagged: &mut Vec<FlaggedFact>,
) -> Result<(), AppError> {
    let rows = store::allocation_facts(tx, org, cluster, allocation_ids).await?;
    #[derive(Default)]
    struct Facts {
        start: Option<(String, AllocationStart)>,
        ended: Option<OffsetDateTime>,
        vanished: Option<OffsetDateTime>,
    }
    let mut by_allocation: BTreeMap<String, Facts> = BTreeMap::new();
    for (subject, event_id, payload) in rows {
        let fact: Fact = serde_json::from_value(payload)
            .map_err(|e| AppError::Internal(format!("stored fact {event_id} no longer parses: {e}")))?;
        let entry = by_allocation.entry(subject).or_default();
        match fact.body {
            // Deterministic: the lowest event ID wins if several starts were recorded.
            FactBody::AllocationStarted(s) if entry.start.is_none() => entry.start = Some((event_id, s)),
            FactBody::AllocationEnded(e) => entry.ended = Some(entry.ended.map_or(e.ended_at, |t| t.min(e.ended_at))),
            FactBody::AllocationVanished(v) => {
                entry.vanished = Some(entry.vanished.map_or(v.last_seen_at, |t| t.min(v.last_seen_at)))
            }
            _ => {}
        }
    }
    if by_allocation.values().all(|f| f.start.is_none()) {
        return Ok(()); // ends that arrived before their starts wait for them
    }
    let inventory = InventorySnapshot::load(tx, cluster).await?;
    // A passthrough VM's allocation names a PCI device resource, not a model: its node's GPU product label does.
    let node_products = store::node_products(tx, org, cluster).await?;
    let mut rows = IntervalRows::default();
    for (allocation_id, facts) in by_allocation {
        let Some((start_event, start)) = facts.start else {
            continue;
        };
        // An exact end wins over an inferred one; an inferred end makes the interval `estimated`.
        let (mut ended_at, estimated) = match (facts.ended, facts.vanished) {
            (Some(t), _) => (Some(t), false),
            (None, Some(t)) => (Some(t), true),
            (None, None) => (None, false),
        };
        if let Some(end) = ended_at
            && end < start.started_at
        {
            flagged.push(FlaggedFact {
                event_id: start_event.clone(),
                reason: format!("end {end} is before start {}; end ignored", start.started_at),
            });
            ended_at = None;
        }
        // A VM's vGPU profile names its board (`GRID_T4-1Q`): when the agent could not say the model, take the one
        // model the approved inventory lists that profile for.
        let model = start
            .gpu_model
            .clone()
            .or_else(|| inventory.only_model_for(&start.mode))
            .or_else(|| match start.mode {
                SharingMode::Passthrough => start.node.as_ref().and_then(|n| node_products.get(n)).cloned(),
                _ => None,
            })
            .unwrap_or_default();
        let gpu_class = (!model.is_empty()).then(|| inventory.class_at(&model, start.started_at)).flatten();
        let (fraction, mut confidence, gap) = match resolve_fraction(
            &start.mode,
            &normalize_model(&model),
            start.started_at,
            &inventory.profiles,
        ) {
            Ok((per_unit, confidence)) => {
                let total = per_unit.checked_mul_int(start.units.into()).ok();
                (total, confidence, None)
            }
            Err(gap) => {
                let shown = if model.is_empty() { "unknown" } else { &model };
                let reason = match gap.reason {
                    GapReason::UnknownModelMemory => format!(
                        "{} declares memory in MiB, and the approved inventory gives GPU model {shown:?} no memory \
                             (add memory_mib to the model); kept without a fraction",
                        start.mode
                    ),
                    GapReason::InvalidShare => {
                        format!("{} declares no usable compute or memory share; kept without a fraction", start.mode)
                    }
                    other => format!(
                        "{} on GPU model {shown:?} has no approved inventory entry ({other:?}); kept without a fraction",
                        start.mode
                    ),
                };
                flagged.push(FlaggedFact { event_id: start_event.clone(), reason: reason.clone() });
                (None, start.mode.base_confidence(), Some(reason))
            }
        };
        if estimated {
            confidence = confidence.min(Confidence::Estimated);
        }
        let (share, share_basis) =
            match resolve_share(&start.mode, &normalize_model(&model), start.started_at, &inventory.profiles) {
                Ok(r) => (Some(r.explanation), Some(r.basis.name().to_string())),
                Err(_) => (None, None),
            };
        let (profile, replicas) = match &start.mode {
            SharingMode::Mig { profile } => (Some(profile.as_str().to_string()), None),
            SharingMode::Vgpu { profile } => (Some(profile.as_str().to_string()), None),
            SharingMode::TimeSlice { replicas } => (None, Some(*replicas as i32)),
            _ => (None, None),
        };
        let namespace_uid = match start.namespace_uid {
            Some(uid) => Some(uid),
            None => store::namespace_uid_at(tx, org, cluster, &start.namespace, start.started_at).await?,
        };
        if let Some(reason) = &gap {
            let details = json!({ "reason": reason, "gpu_model": start.gpu_model, "mode": start.mode });
            store::insert_inventory_gap_finding(tx, org, cluster, &allocation_id, start.started_at, &details).await?;
        }
        rows.allocation_id.push(allocation_id);
        rows.holder_kind.push(serde_json::to_value(start.holder).ok().and_then(|v| v.as_str().map(str::to_string)));
        rows.holder_uid.push(start.holder_uid);
        rows.holder_name.push(start.holder_name.clone());
        rows.namespace.push(start.namespace.clone());
        rows.namespace_uid.push(namespace_uid);
        rows.container.push(start.container.clone());
        rows.node.push(start.node.clone());
        rows.resource.push(start.resource.clone());
        rows.units.push(start.units as i32);
        rows.device_ids.push(serde_json::Value::from(start.device_ids.clone()));
        rows.gpu_model.push(start.gpu_model.clone());
        rows.gpu_class.push(gpu_class.map(str::to_string));
        rows.sharing_mode.push(start.mode.name().to_string());
        rows.profile.push(profile);
        rows.replicas.push(replicas);
        rows.fraction_num.push(fraction.as_ref().map(|f| i64::try_from(f.numer()).unwrap_or(i64::MAX)));
        rows.fraction_den.push(fraction.as_ref().map(|f| i64::try_from(f.denom()).unwrap_or(i64::MAX)));
        rows.started_at.push(start.started_at);
        rows.ended_at.push(ended_at);
        rows.end_estimated.push(estimated);
        rows.confidence.push(confidence.to_string());
        rows.inventory_gap.push(gap);
        rows.share.push(share);
        rows.share_basis.push(share_basis);
        rows.labels.push(serde_json::to_value(&start.labels).unwrap_or_default());
    }
    if rows.allocation_id.is_empty() {
        return Ok(());
    }
    store::upsert_intervals(tx, org, cluster, &rows).await?;
    assign_stored_devices(tx, cluster, &rows.allocation_id).await?;
    Ok(())
}
