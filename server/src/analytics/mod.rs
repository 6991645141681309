//! Utilization analytics over HTTP: idle reservations and active-equivalent GPU-hours beside allocated hours.
//!
//! **Analytics only, never billed** (DESIGN.md, "Four measurements"): nothing here reaches the ledger. The
//! numbers come from `gpuledger_core::utilization` (see its documentation for the exact definitions); this module
//! loads the inputs through the organization-scoped door and renders the report.
//!
//! `GET /api/v1/analytics/utilization?period=YYYY-MM[&tenant=UUID][&idle_threshold_pct=5][&min_idle_hours=1]
//! [&page=1&per_page=100]` (admin or export token).
//!
//! Inputs:
//! - allocation intervals overlapping the period, clipped to it (and to now, for the current month), split where
//!   their namespace changed owner (ownership validity is `[valid_from, valid_to)`); time no ownership covers is a
//!   piece without a tenant. An idle stretch is judged per piece, so one crossing an owner change counts for each
//!   owner only if its part is long enough. Intervals without an approved fraction (inventory gaps) cannot be
//!   measured in GPU-hours and are only counted (`without_fraction`).
//! - device IDs: `MIG-…` device UUIDs are resolved to their parent GPU through the `devices` table's
//!   `mig_devices`, and legacy `MIG-GPU-…/gi/ci` names by their parent part; whole-GPU telemetry rows
//!   (`gpu_instance_id = -1`) then apply to every allocation on that GPU.
//! - telemetry windows that start at most one day before the period (rollup windows are minutes long).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::{Json, Router, extract::State, routing::get};
use gpuledger_api::analytics as api;
use gpuledger_core::{
    Confidence, Fraction, NANOS_PER_HOUR, Period,
    ids::{GpuClass, MigInstance, TenantId},
    interval::Interval,
    utilization::{
        ActivitySample, AllocationUtilization, DeviceTimelines, HeldAllocation, TenantUtilization, Utilization,
        UtilizationOptions,
    },
};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    auth::Visible,
    db::OrgTx,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, ReadLedger},
    state::AppState,
};

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/analytics/utilization", utilization),
        described("get", "/api/v1/idle", idle::idle),
        described("get", "/api/v1/analytics/inference", inference::inference),
        described("get", "/api/v1/analytics/sessions", sessions::sessions),
    ]
}

mod idle;
mod spill;
mod summary;
pub(crate) use idle::{idle_now, read_idle};
pub(crate) use sessions::read_sessions;
pub use summary::utilization_summary;
pub use summary::{SUMMARY_CHUNK, set_summary_chunk};
mod inference;
mod sessions;
mod store;

/// Decimal places of the hour figures in the answer.
const HOURS_SCALE: u32 = 6;

/// `GET /api/v1/analytics/utilization`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/analytics/utilization", get(utilization))
        .route("/api/v1/idle", get(idle::idle))
        .route("/api/v1/analytics/inference", get(inference::inference))
        .route("/api/v1/analytics/sessions", get(sessions::sessions))
}

/// The query, validated.
#[derive(Debug, Clone, PartialEq)]
struct UtilizationParams {
    period: Period,
    tenant: Option<TenantId>,
    threshold_pct: f64,
    min_idle_nanos: i128,
    page: u64,
    per_page: u64,
}

/// A month as analysed: its bounds, and its end cut to now (the current month runs to now; a future one is empty).
pub(crate) fn month_so_far(period: Period) -> Result<(Interval, OffsetDateTime), AppError> {
    let month = period.interval().map_err(|e| AppError::invalid("period", e.to_string()))?;
    let to = month.end().min(OffsetDateTime::now_utc()).max(month.start());
    Ok((month, to))
}

/// The report's parameters from its query (each bounded by the contract's types).
fn parse_params(q: &gpuledger_api::params::UtilizationParams) -> Result<UtilizationParams, AppError> {
    let threshold_pct = match &q.idle_threshold_pct {
        None => f64::from(gpuledger_core::utilization::DEFAULT_IDLE_THRESHOLD_PERMILLE) / 10.0,
        Some(v) => v.decimal().to_string().parse::<f64>().map_err(internal)?,
    };
    let min_idle_nanos = match &q.min_idle_hours {
        None => gpuledger_core::utilization::DEFAULT_MIN_IDLE_NANOS,
        Some(v) => {
            let nanos = v.decimal().value().checked_mul_int(NANOS_PER_HOUR)?;
            nanos.numer() / nanos.denom()
        }
    };
    Ok(UtilizationParams {
        period: q.period.period(),
        tenant: q.tenant.map(|t| TenantId::from_uuid(t.uuid())),
        threshold_pct,
        min_idle_nanos,
        page: q.page.map_or(1, |n| u64::try_from(n.get()).unwrap_or(1)),
        per_page: q.per_page.map_or(100, |n| u64::try_from(n.get()).unwrap_or(100)),
    })
}

fn internal(e: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("utilization analytics: {e}"))
}

fn hours(f: &Fraction) -> Result<String, AppError> {
    f.to_decimal_string(HOURS_SCALE).map_err(internal)
}

fn rfc3339(t: OffsetDateTime) -> Result<String, AppError> {
    Ok(gpuledger_core::time_fmt::try_rfc3339(t)?)
}

fn confidence(s: &str) -> Result<Confidence, AppError> {
    match s {
        "exact" => Ok(Confidence::Exact),
        "modeled" => Ok(Confidence::Modeled),
        "estimated" => Ok(Confidence::Estimated),
        other => Err(internal(format!("unknown confidence {other:?}"))),
    }
}

/// A per-mille value as a percentage with one decimal, e.g. 50 → `"5.0"`.
fn pct(u: Utilization) -> String {
    format!("{}.{}", u.permille() / 10, u.permille() % 10)
}

/// What the analysis needs, read in one organization-scoped transaction.
struct Loaded {
    allocations: Vec<HeldAllocation>,
    /// Telemetry by device (hourly sums; soft-shared pods' own samples).
    timelines: DeviceTimelines,
    /// Core ID (`<cluster>/<allocation>`) → device IDs as stored.
    devices: HashMap<String, Vec<String>>,
}

/// Splits `[start, end)` at the owners' validity boundaries: each piece with its tenant, `None` where no
/// ownership row covers the time. `owners` are sorted by `valid_from` and do not overlap.
fn split_by_owner(
    start: OffsetDateTime,
    end: OffsetDateTime,
    owners: &[(OffsetDateTime, Option<OffsetDateTime>, Uuid)],
) -> Vec<(OffsetDateTime, OffsetDateTime, Option<TenantId>)> {
    let mut pieces = Vec::new();
    let mut cursor = start;
    for &(from, to, tenant) in owners {
        let (lo, hi) = (from.max(cursor), to.map_or(end, |t| t.min(end)));
        if lo >= hi {
            continue;
        }
        if cursor < lo {
            pieces.push((cursor, lo, None));
        }
        pieces.push((lo, hi, Some(TenantId::from_uuid(tenant))));
        cursor = hi;
    }
    if cursor < end {
        pieces.push((cursor, end, None));
    }
    pieces
}

/// A device ID as the allocation recorded it → the key its telemetry is kept under: the physical GPU, or
/// `<parent GPU>#<GPU instance>` for a MIG instance whose instance ID is known (DCGM's `GPU_I_ID` rows measure each
/// instance's own activity; the parent's rows would credit one instance with its neighbours' work).
fn telemetry_key(device: &str, mig: &HashMap<String, (String, Option<i32>)>) -> String {
    // Time-sliced replicas are named `<GPU>::<n>` by the device plugin; telemetry knows the GPU.
    let device = device.split_once("::").map_or(device, |(gpu, _)| gpu);
    if let Some((parent, gi)) = mig.get(device) {
        return match gi {
            Some(gi) => format!("{parent}#{gi}"),
            None => parent.clone(),
        };
    }
    if device.starts_with("MIG-GPU-")
        && let Ok(m) = device.parse::<MigInstance>()
    {
        return format!("{}#{}", m.parent.as_str(), m.gpu_instance_id);
    }
    device.to_string()
}

/// What turns the month's allocation intervals into analysis rows: their namespaces' owners over the window and the
/// MIG devices' parents (one row per GPU: read whole, so that the allocations can be streamed).
struct Pieces {
    from: OffsetDateTime,
    to: OffsetDateTime,
    tenant: Option<TenantId>,
    owners: HashMap<Uuid, Vec<(OffsetDateTime, Option<OffsetDateTime>, Uuid)>>,
    mig: HashMap<String, (String, Option<i32>)>,
}

/// One allocation interval as analysis rows.
struct Held {
    id: String,
    mode: String,
    device_ids: Vec<String>,
    /// The telemetry keys its rows read (`pod:…` for a soft share's own samples).
    keys: Vec<String>,
    soft: Option<SoftPod>,
    rows: Vec<HeldAllocation>,
}

/// An allocation interval read for the analysis.
enum Converted {
    /// No approved fraction: counted, not measured.
    WithoutFraction,
    /// Nothing of it in the window.
    Outside,
    Held(Box<Held>),
}

impl Pieces {
    async fn read(tx: &mut OrgTx, window: Interval, tenant: Option<TenantId>) -> Result<Self, AppError> {
        let (from, to) = (window.start(), window.end());
        let mut owners: HashMap<Uuid, Vec<(OffsetDateTime, Option<OffsetDateTime>, Uuid)>> = HashMap::new();
        for store::OwnerRow { namespace_uid: ns, valid_from, valid_to, tenant_id: tenant } in
            store::owners_between(tx, from, to).await?
        {
            owners.entry(ns).or_default().push((valid_from, valid_to, tenant));
        }
        let mig: HashMap<String, (String, Option<i32>)> =
            store::mig_devices(tx).await?.into_iter().map(|(uuid, parent, gi)| (uuid, (parent, gi))).collect();
        Ok(Self { from, to, tenant, owners, mig })
    }

    fn held(&self, row: store::HeldRow) -> Result<Converted, AppError> {
        let store::HeldRow {
            cluster_id: cluster,
            allocation_id,
            namespace_uid: ns,
            fraction_num: num,
            fraction_den: den,
            started_at,
            ended_at,
            device_ids,
            gpu_class,
            confidence: conf,
            sharing_mode: mode,
            holder_uid: holder,
            node,
        } = row;
        let (Some(num), Some(den)) = (num, den) else { return Ok(Converted::WithoutFraction) };
        let fraction = Fraction::new(i128::from(num), i128::from(den)).map_err(internal)?;
        let (start, end) = (started_at.max(self.from), ended_at.map_or(self.to, |e| e.min(self.to)));
        if start >= end {
            return Ok(Converted::Outside);
        }
        let id = format!("{cluster}/{allocation_id}");
        // A soft share's GPU is busy with every pod on it: its own activity needs per-process samples, so the
        // device's utilization is not credited to it.
        let (keys, soft) = match (mode.as_str(), node) {
            ("soft_share", Some(node)) => {
                let key = format!("pod:{cluster}/{holder}");
                (vec![key.clone()], Some(SoftPod { cluster, node, key, fraction }))
            }
            ("soft_share", None) => (Vec::new(), None),
            _ => (device_ids.iter().map(|d| telemetry_key(d, &self.mig)).collect(), None),
        };
        let confidence = confidence(&conf)?;
        let gpu_class = gpu_class.and_then(|c| GpuClass::new(c).ok());
        let no_owners = Vec::new();
        let ns_owners = ns.and_then(|ns| self.owners.get(&ns)).unwrap_or(&no_owners);
        let mut rows = Vec::new();
        for (piece_start, piece_end, piece_tenant) in split_by_owner(start, end, ns_owners) {
            if self.tenant.is_some() && piece_tenant != self.tenant {
                continue;
            }
            rows.push(HeldAllocation {
                id: id.clone(),
                tenant: piece_tenant,
                gpu_class: gpu_class.clone(),
                fraction,
                start: piece_start,
                end: Some(piece_end),
                devices: keys.clone(),
                confidence,
            });
        }
        Ok(Converted::Held(Box::new(Held { id, mode, device_ids, keys, soft, rows })))
    }
}

/// Which allocation intervals [`load`] keeps, by `<cluster>/<allocation>` (all of them: `None`).
type Only<'a> = Option<&'a (dyn Fn(&str) -> bool + Sync)>;

/// The window's allocations (of `tenant`'s namespaces, when given; those `only` keeps) and the hours of their devices
/// since the earliest of them started, held whole: the open month's idle reservations (its open allocations). The
/// month's report and summaries are analysed in chunks instead (`summary::in_chunks`).
async fn load(tx: &mut OrgTx, window: Interval, tenant: Option<TenantId>, only: Only<'_>) -> Result<Loaded, AppError> {
    use futures::TryStreamExt;
    let (from, to) = (window.start(), window.end());
    let tenant_uuid = tenant.map(|t| t.as_uuid());
    let pieces = Pieces::read(tx, window, tenant).await?;
    let mut rows = store::held_between(tx, from, to, tenant_uuid);
    let mut allocations = Vec::new();
    let mut devices = HashMap::new();
    // Device keys are shared: a month holds a million allocations on a few thousand devices.
    let mut keys: BTreeSet<String> = BTreeSet::new();
    // Soft-shared pods: measured by their own processes' samples, keyed `pod:<cluster>/<uid>`.
    let mut soft_pods: Vec<SoftPod> = Vec::new();
    while let Some(row) = rows.try_next().await? {
        if only.is_some_and(|keep| !keep(&format!("{}/{}", row.cluster_id, row.allocation_id))) {
            continue;
        }
        let held = match pieces.held(row)? {
            Converted::WithoutFraction | Converted::Outside => continue,
            Converted::Held(h) => *h,
        };
        soft_pods.extend(held.soft);
        for k in held.keys.iter().filter(|k| !k.starts_with("pod:")) {
            if !keys.contains(k) {
                keys.insert(k.clone());
            }
        }
        allocations.extend(held.rows);
        devices.insert(held.id, held.device_ids);
    }
    drop(rows);
    allocations.shrink_to_fit();
    // No hour before the earliest allocation kept is read (the open allocations of a month's end: days, not the month).
    let from = allocations.iter().map(|a| a.start).min().map_or(from, |s| s.max(from));

    // Whole GPUs by UUID; MIG instances by (parent, GPU instance ID).
    let (whole, instances): (Vec<String>, Vec<String>) = keys.into_iter().partition(|k| !k.contains('#'));
    let parents: Vec<String> = instances
        .iter()
        .filter_map(|k| k.split_once('#').map(|(p, _)| p.to_string()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let wanted_instances: BTreeSet<String> = instances.into_iter().collect();
    // Hourly sums (the full-resolution tier is never read here): one sample per device-hour, its average, straight
    // into the device's timeline.
    let mut timelines = DeviceTimelines::new();
    if !whole.is_empty() || !parents.is_empty() {
        let mut key = String::new();
        crate::telemetry::store::utilization_hours(tx, from, to, &whole, &parents, |r| {
            let Some(util) = r.util_avg_pct else { return Ok(()) };
            // A NaN average is no sample; a window the table's CHECK allows is always valid.
            let Some(utilization) = Utilization::from_pct_f32(util as f32) else { return Ok(()) };
            let Ok(window) = Interval::new(r.from, r.to) else { return Ok(()) };
            key.clear();
            if r.gpu_instance_id < 0 {
                key.push_str(&r.gpu_uuid);
            } else {
                use std::fmt::Write;
                let _ = write!(key, "{}#{}", r.gpu_uuid, r.gpu_instance_id);
                if !wanted_instances.contains(&key) {
                    return Ok(());
                }
            }
            timelines.push(&key, window, utilization).map_err(|e| crate::db::DbError::Data(e.to_string()))
        })
        .await?;
    }
    timelines.extend(&pod_samples(tx, window, &soft_pods).await?).map_err(internal)?;

    Ok(Loaded { allocations, timelines, devices })
}

fn tenant_json(t: &TenantUtilization, names: &HashMap<Uuid, String>) -> Result<api::TenantUtilization, AppError> {
    Ok(api::TenantUtilization {
        tenant_id: t.tenant.map(|t| t.to_string()),
        tenant_name: t.tenant.and_then(|t| names.get(&t.as_uuid()).cloned()),
        allocations: t.allocations,
        idle_allocations: t.idle_allocations,
        allocated_gpu_hours: hours(&t.allocated_gpu_hours)?,
        active_equivalent_gpu_hours: hours(&t.active_equivalent_gpu_hours)?,
        observed_gpu_hours: hours(&t.observed_gpu_hours)?,
        idle_gpu_hours: hours(&t.idle_gpu_hours)?,
        confidence: t.confidence.into(),
    })
}

/// A soft-shared pod's allocation: measured on its node by its own processes.
struct SoftPod {
    cluster: Uuid,
    node: String,
    /// `pod:<cluster>/<pod UID>`: the key its samples are filed under.
    key: String,
    /// GPU-equivalents it holds (its share): its activity is reported relative to it.
    fraction: Fraction,
}

/// Soft-shared pods' activity from the node agents' per-process windows. Each window of the pod's node that was
/// sampled is a sample: the pod's SM activity summed over the node's GPUs (0 where its processes did not show),
/// relative to the share it holds — a pod holding 30 % of a GPU and keeping 15 % of its SMs busy used half of its
/// share — capped at all of it (soft limits are not enforced by every scheduler).
async fn pod_samples(tx: &mut OrgTx, window: Interval, pods: &[SoftPod]) -> Result<Vec<ActivitySample>, AppError> {
    if pods.is_empty() {
        return Ok(Vec::new());
    }
    let clusters: Vec<Uuid> = pods.iter().map(|p| p.cluster).collect::<BTreeSet<_>>().into_iter().collect();
    let nodes: Vec<String> = pods.iter().map(|p| p.node.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let uids: Vec<String> = pods.iter().filter_map(|p| p.key.rsplit('/').next().map(str::to_string)).collect();
    // One row per pod asked about, or one with no pod for a window none of them appears in.
    let rows = store::process_windows(tx, &clusters, &nodes, window.start(), &uids, window.end()).await?;
    // (cluster, node) → window → pod UID → summed SM %.
    type Windows = BTreeMap<(OffsetDateTime, OffsetDateTime), HashMap<String, f64>>;
    let mut by_node: HashMap<(Uuid, String), Windows> = HashMap::new();
    for (cluster, node, start, end, pod, sm) in rows {
        let windows = by_node.entry((cluster, node)).or_default();
        let pods = windows.entry((start, end)).or_default();
        if let (Some(pod), Some(sm)) = (pod, sm) {
            *pods.entry(pod).or_insert(0.0) += sm;
        }
    }
    let mut out = Vec::new();
    for pod in pods {
        let Some(windows) = by_node.get(&(pod.cluster, pod.node.clone())) else { continue };
        let uid = pod.key.rsplit('/').next().unwrap_or_default();
        let share = pod.fraction.to_f64_lossy();
        if share <= 0.0 {
            continue;
        }
        for ((start, end), pods) in windows {
            let used = pods.get(uid).copied().unwrap_or(0.0);
            let Some(utilization) = Utilization::from_pct((used / share).min(100.0)) else { continue };
            let Ok(window) = Interval::new(*start, *end) else { continue };
            out.push(ActivitySample { gpu_uuid: pod.key.clone(), window, utilization });
        }
    }
    Ok(out)
}

/// Why an allocation's utilization is not measured, for people (with the way to get it measured).
fn not_measured_reason(mode: &str, devices: &[String]) -> String {
    match mode {
        "soft_share" => {
            "soft share: the GPU's utilization belongs to every pod sharing it; a pod's own activity needs \
                         per-process samples from the node agent (NVML), which none reported"
                .into()
        }
        "vgpu" | "passthrough" => {
            "the GPU is inside a virtual machine: no node agent or DCGM exporter on the host reported it".into()
        }
        _ if devices.is_empty() => {
            "no device recorded for this allocation: run the node agent on its node so kubelet's \
                                    device assignment is reported"
                .into()
        }
        "mig" => format!(
            "no DCGM GPU-instance rows (GPU_I_ID) for {}: enable DCGM's profiling metrics \
             (DCGM_FI_PROF_GR_ENGINE_ACTIVE) on the exporter",
            devices.join(", ")
        ),
        _ => format!(
            "no telemetry for {} in this window: is the DCGM exporter or node agent running on its node?",
            devices.join(", ")
        ),
    }
}

fn allocation_json(
    row: &AllocationUtilization,
    devices: &HashMap<String, Vec<String>>,
    modes: &HashMap<String, String>,
    names: &HashMap<Uuid, String>,
) -> Result<api::AllocationUtilization, AppError> {
    let (cluster_id, allocation_id) = row.id.split_once('/').unwrap_or(("", row.id.as_str()));
    let ids = devices.get(&row.id).cloned().unwrap_or_default();
    let not_measured =
        row.observed_hours.is_zero().then(|| not_measured_reason(modes.get(&row.id).map_or("", String::as_str), &ids));
    let idle_stretches = row
        .idle_stretches
        .iter()
        .map(|s| Ok(api::Stretch { from: rfc3339(s.start())?, to: rfc3339(s.end())? }))
        .collect::<Result<Vec<_>, AppError>>()?;
    Ok(api::AllocationUtilization {
        cluster_id: cluster_id.into(),
        allocation_id: allocation_id.into(),
        tenant_id: row.tenant.map(|t| t.to_string()),
        tenant_name: row.tenant.and_then(|t| names.get(&t.as_uuid()).cloned()),
        gpu_class: row.gpu_class.as_ref().map(|c| c.as_str().to_string()),
        fraction: row.fraction.to_string(),
        devices: ids,
        from: rfc3339(row.held.start())?,
        to: rfc3339(row.held.end())?,
        allocated_gpu_hours: hours(&row.allocated_gpu_hours)?,
        active_equivalent_gpu_hours: hours(&row.active_equivalent_gpu_hours)?,
        observed_hours: hours(&row.observed_hours)?,
        observed_gpu_hours: hours(&row.observed_gpu_hours)?,
        idle_gpu_hours: hours(&row.idle_gpu_hours)?,
        idle: row.idle,
        idle_stretches,
        confidence: row.confidence.into(),
        not_measured,
    })
}

async fn utilization(
    State(state): State<AppState>,
    principal: Caller<ReadLedger>,
    crate::http::Params(query): crate::http::Params<gpuledger_api::params::UtilizationParams>,
) -> Result<Json<api::Utilization>, AppError> {
    let params = parse_params(&query)?;

    let (month, end) = month_so_far(params.period)?;
    let window = Interval::new(month.start(), end).map_err(internal)?;
    let options = UtilizationOptions::new(window)
        .with_idle_threshold_pct(params.threshold_pct)
        .map_err(|e| AppError::invalid("idle_threshold_pct", e.to_string()))?;
    let options = UtilizationOptions { min_idle_nanos: params.min_idle_nanos, ..options };

    let visible = principal.visible(&state.db).await?;
    let mut tx = state.db.begin_org(principal.org).await?;
    if let Some(tenant) = params.tenant
        && Visible::tenant(&visible, Some(tenant.as_uuid()))
    {
        if store::tenant_id(&mut tx, tenant.as_uuid()).await?.is_none() {
            return Err(AppError::unknown("tenant", format!("no tenant {tenant} in this organization")));
        }
    } else if let Some(tenant) = params.tenant {
        return Err(AppError::unknown("tenant", format!("no tenant {tenant} in this organization")));
    }
    // The rows a page can show are kept, not the month's (the analysis a chunk of allocations at a time). The
    // parameters' bounds (page ≤ 1,000, per_page ≤ 100) keep this within the cap; checked again so that widening
    // either bound cannot lift it.
    let keep = params.page.saturating_mul(params.per_page);
    if keep > summary::MAX_PAGED_ROWS {
        return Err(AppError::invalid(
            "page",
            format!(
                "pages reach the {} most idle rows (page × per_page ≤ {}): ask for a tenant's rows, or a higher \
                 idle threshold, to see others",
                summary::MAX_PAGED_ROWS,
                summary::MAX_PAGED_ROWS
            ),
        ));
    }
    let sees = |t: Option<TenantId>| Visible::tenant(&visible, t.map(|t| t.as_uuid()));
    let chunked = summary::in_chunks(
        &mut tx,
        window,
        params.tenant,
        &options,
        usize::try_from(keep).unwrap_or(usize::MAX),
        &sees,
    )
    .await?;
    tx.commit().await?;

    // A caller limited to departments sees its tenants only; the most idle first.
    let mut tenants: Vec<&TenantUtilization> = chunked.tenants.iter().filter(|t| sees(t.tenant)).collect();
    tenants.sort_by_key(|t| std::cmp::Reverse(t.idle_gpu_hours));
    let skip = usize::try_from((params.page - 1).saturating_mul(params.per_page)).unwrap_or(usize::MAX);
    let page: Vec<&(AllocationUtilization, Vec<String>, String)> = chunked.rows.iter().skip(skip).collect();
    let devices: HashMap<String, Vec<String>> = page.iter().map(|(r, d, _)| (r.id.clone(), d.clone())).collect();
    let modes: HashMap<String, String> = page.iter().map(|(r, _, m)| (r.id.clone(), m.clone())).collect();
    let allocations = page
        .iter()
        .map(|(r, _, _)| allocation_json(r, &devices, &modes, &chunked.names))
        .collect::<Result<Vec<_>, AppError>>()?;
    let tenants = tenants.iter().map(|t| tenant_json(t, &chunked.names)).collect::<Result<Vec<_>, AppError>>()?;
    let total = chunked.total;
    let loaded_without_fraction = chunked.without_fraction;
    Ok(Json(api::Utilization {
        head: answer_head(params.period, window, &options, loaded_without_fraction)?,
        tenants,
        allocations,
        total,
        page: params.page,
        per_page: params.per_page,
    }))
}

/// The fields of a utilization answer that describe the analysis rather than any tenant (the API's answer and the
/// read model's stored summary share them).
fn answer_head(
    period: Period,
    window: Interval,
    options: &UtilizationOptions,
    without_fraction: u64,
) -> Result<api::UtilizationHead, AppError> {
    let min_idle_hours = Fraction::new(options.min_idle_nanos, NANOS_PER_HOUR).map_err(internal)?;
    Ok(api::UtilizationHead {
        period: period.to_string(),
        from: rfc3339(window.start())?,
        to: rfc3339(window.end())?,
        threshold: pct(options.idle_threshold),
        min_idle_hours: hours(&min_idle_hours)?,
        basis: "analytics only: utilization is never billed".into(),
        without_fraction,
    })
}

/// The month's inference answer over the whole organization (see [`inference::answer`]).
pub(crate) async fn inference_summary(tx: OrgTx, period: Period) -> Result<api::Inference, AppError> {
    inference::answer(tx, period, None, &None).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::{Duration, macros::datetime};

    type Query = gpuledger_api::params::UtilizationParams;

    fn q(s: &str) -> Query {
        crate::http::query_params(s).unwrap()
    }

    fn field(s: &str) -> String {
        match crate::http::query_params::<Query>(s).and_then(|q| parse_params(&q)).unwrap_err() {
            AppError::Invalid { field, .. } => field,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn params_default_and_validate() {
        let p = parse_params(&q("period=2026-10")).unwrap();
        assert_eq!((p.threshold_pct, p.min_idle_nanos, p.page, p.per_page), (5.0, NANOS_PER_HOUR, 1, 100));
        let p =
            parse_params(&q("period=2026-10&idle_threshold_pct=12.5&min_idle_hours=0.5&page=3&per_page=7")).unwrap();
        assert_eq!((p.threshold_pct, p.min_idle_nanos, p.page, p.per_page), (12.5, NANOS_PER_HOUR / 2, 3, 7));
        assert_eq!(field(""), "period");
        assert_eq!(field("period=2026-13"), "period");
        assert_eq!(field("period=2026-10&tenant=nope"), "tenant");
        assert_eq!(field("period=2026-10&idle_threshold_pct=101"), "idle_threshold_pct");
        assert_eq!(field("period=2026-10&idle_threshold_pct=NaN"), "idle_threshold_pct");
        assert_eq!(field("period=2026-10&min_idle_hours=-1"), "min_idle_hours");
        assert_eq!(field("period=2026-10&min_idle_hours=100000"), "min_idle_hours");
        assert_eq!(field("period=2026-10&page=0"), "page");
        assert_eq!(field("period=2026-10&per_page=5000"), "per_page");
        // Pages reach the 100,000 most idle rows, and the parameters' bounds say so (1,000 pages of 100).
        assert_eq!(field("period=2026-10&page=1001"), "page");
        assert_eq!(field("period=2026-10&per_page=101"), "per_page");
        let p = parse_params(&q("period=2026-10&page=1000&per_page=100")).unwrap();
        assert!(p.page * p.per_page <= summary::MAX_PAGED_ROWS);
        assert_eq!(field("period=2026-10&colour=blue"), "colour");
        assert_eq!(field("period=2026-10&period=2026-11"), "period");
    }

    #[test]
    fn ownership_splits_and_gaps() {
        let at = |h: i64| datetime!(2026-10-01 00:00 UTC) + Duration::hours(h);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let owners = [(at(2), Some(at(5)), a), (at(5), None, b)];
        assert_eq!(
            split_by_owner(at(0), at(8), &owners),
            vec![
                (at(0), at(2), None),
                (at(2), at(5), Some(TenantId::from_uuid(a))),
                (at(5), at(8), Some(TenantId::from_uuid(b)))
            ]
        );
        assert_eq!(split_by_owner(at(0), at(1), &owners), vec![(at(0), at(1), None)]);
        assert_eq!(split_by_owner(at(6), at(7), &owners), vec![(at(6), at(7), Some(TenantId::from_uuid(b)))]);
    }

    #[test]
    fn mig_devices_resolve_to_their_instance_or_parent() {
        let mig = HashMap::from([
            ("MIG-abc".to_string(), ("GPU-1".to_string(), Some(7))),
            ("MIG-old".to_string(), ("GPU-1".to_string(), None)),
        ]);
        assert_eq!(telemetry_key("MIG-abc", &mig), "GPU-1#7", "an instance's own DCGM rows");
        assert_eq!(telemetry_key("MIG-old", &mig), "GPU-1", "no instance ID recorded: the parent");
        assert_eq!(
            telemetry_key("MIG-GPU-aaaaaaaa-0000-0000-0000-000000000001/1/0", &mig),
            "GPU-aaaaaaaa-0000-0000-0000-000000000001#1"
        );
        assert_eq!(telemetry_key("GPU-2", &mig), "GPU-2");
        assert_eq!(telemetry_key("MIG-unknown", &mig), "MIG-unknown");
        assert_eq!(telemetry_key("GPU-3::2", &mig), "GPU-3", "a time-sliced replica is its GPU");
        assert_eq!(pct(Utilization::from_permille(50).unwrap()), "5.0");
    }
}
