//! A month's utilization per tenant over the whole organization (the read model's summaries), computed a chunk of
//! allocations at a time: the month's timelines in a temporary file ([`super::spill`]), each chunk given the hours its
//! devices held — the same sums as the analysis over the month held whole (`super::load`), in a chunk's memory
//! (docs/scaling.md: held whole, this was the server's peak at 100,000 GPUs, 16 GB).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpuledger_api::analytics as api;
use gpuledger_core::{
    Period,
    ids::TenantId,
    interval::Interval,
    utilization::{
        AllocationUtilization, DeviceTimelines, HeldAllocation, TenantUtilization, UtilizationOptions,
        UtilizationReport, analyze_timelines,
    },
};
use uuid::Uuid;

use super::{Converted, Pieces, answer_head, internal, month_so_far, pod_samples, spill, store, tenant_json};
use crate::{db::OrgTx, error::AppError};

/// Allocation rows per chunk of a month's summary (unless set otherwise): a chunk and the hours its devices held are
/// in memory, not the month.
pub const SUMMARY_CHUNK: usize = 50_000;

static CHUNK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(SUMMARY_CHUNK);

/// Sets the allocation rows per chunk of the summaries this process computes (tests cut small months into many
/// chunks with it; the figures do not depend on it).
pub fn set_summary_chunk(rows: usize) {
    CHUNK.store(rows.max(1), std::sync::atomic::Ordering::Relaxed);
}

/// Adds a chunk's per-tenant sums to the month's.
fn add_tenants(
    totals: &mut BTreeMap<Option<TenantId>, TenantUtilization>,
    tenants: Vec<TenantUtilization>,
) -> Result<(), AppError> {
    for t in tenants {
        match totals.get_mut(&t.tenant) {
            None => {
                totals.insert(t.tenant, t);
            }
            Some(into) => {
                into.allocations += t.allocations;
                into.idle_allocations += t.idle_allocations;
                into.allocated_gpu_hours =
                    into.allocated_gpu_hours.checked_add(t.allocated_gpu_hours).map_err(internal)?;
                into.active_equivalent_gpu_hours =
                    into.active_equivalent_gpu_hours.checked_add(t.active_equivalent_gpu_hours).map_err(internal)?;
                into.observed_gpu_hours =
                    into.observed_gpu_hours.checked_add(t.observed_gpu_hours).map_err(internal)?;
                into.idle_gpu_hours = into.idle_gpu_hours.checked_add(t.idle_gpu_hours).map_err(internal)?;
                into.confidence = into.confidence.combine(t.confidence);
            }
        }
    }
    Ok(())
}

/// Rows kept for an answer's pages at most (page × per_page, the most idle first): the rows of a month of a large
/// fleet are not held, only those a page can show.
pub const MAX_PAGED_ROWS: u64 = 100_000;

/// A row kept for a page, with what its rendering needs: ordered most idle first, then as the report orders rows.
struct Kept {
    row: AllocationUtilization,
    devices: Vec<String>,
    mode: String,
}

impl Kept {
    fn key(&self) -> (std::cmp::Reverse<gpuledger_core::Fraction>, &AllocationUtilization) {
        (std::cmp::Reverse(self.row.idle_gpu_hours), &self.row)
    }
}

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Kept {}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// What [`in_chunks`] gives.
pub(super) struct Chunked {
    /// Per tenant (every tenant's; the caller filters what it may see), by tenant.
    pub(super) tenants: Vec<TenantUtilization>,
    pub(super) names: HashMap<Uuid, String>,
    pub(super) without_fraction: u64,
    /// The most idle rows the caller may see, most idle first (at most the number asked for), with their stored
    /// devices and sharing modes.
    pub(super) rows: Vec<(AllocationUtilization, Vec<String>, String)>,
    /// Rows the caller may see, in all.
    pub(super) total: u64,
}

/// Rows' visibility to the caller, by tenant.
pub(super) type SeesTenant<'a> = &'a (dyn Fn(Option<TenantId>) -> bool + Sync);

/// Accumulates chunks' results.
struct Acc<'a> {
    totals: BTreeMap<Option<TenantId>, TenantUtilization>,
    keep: usize,
    kept: std::collections::BinaryHeap<Kept>,
    total: u64,
    sees: SeesTenant<'a>,
}

impl Acc<'_> {
    fn add(
        &mut self,
        report: UtilizationReport,
        info: &HashMap<String, (Vec<String>, String)>,
    ) -> Result<(), AppError> {
        add_tenants(&mut self.totals, report.tenants)?;
        for row in report.allocations {
            if !(self.sees)(row.tenant) {
                continue;
            }
            self.total += 1;
            if self.keep == 0 {
                continue;
            }
            let candidate = (std::cmp::Reverse(row.idle_gpu_hours), &row);
            if self.kept.len() >= self.keep && self.kept.peek().is_some_and(|worst| candidate >= worst.key()) {
                continue;
            }
            let (devices, mode) = info.get(&row.id).cloned().unwrap_or_default();
            self.kept.push(Kept { row, devices, mode });
            if self.kept.len() > self.keep {
                self.kept.pop();
            }
        }
        Ok(())
    }
}

/// Analyses one chunk with the hours its devices held (off the async workers: reading them and the analysis are
/// CPU-bound).
async fn analyze_chunk(
    timelines: &std::sync::Arc<spill::Timelines>,
    chunk: Vec<HeldAllocation>,
    options: &UtilizationOptions,
    rows: bool,
) -> Result<UtilizationReport, AppError> {
    let (timelines, options) = (timelines.clone(), *options);
    tokio::task::spawn_blocking(move || {
        let t = timelines.for_chunk(&chunk)?;
        analyze_timelines(&chunk, t, &options, rows).map_err(internal)
    })
    .await
    .map_err(internal)?
}

/// The window's analysis (of `tenant`'s namespaces, when given) a chunk of allocations at a time (the window's
/// timelines in a temporary file, `spill`): the per-tenant sums and the `keep` most idle rows `sees` lets through,
/// as [`analyze_timelines`] over [`super::load`] gives them, in a chunk's memory.
pub(super) async fn in_chunks(
    tx: &mut OrgTx,
    window: Interval,
    tenant: Option<TenantId>,
    options: &UtilizationOptions,
    keep: usize,
    sees: SeesTenant<'_>,
) -> Result<Chunked, AppError> {
    use futures::TryStreamExt;
    let (from, to) = (window.start(), window.end());
    let timelines = std::sync::Arc::new(spill::Timelines::read(tx, from, to).await?);
    let pieces = Pieces::read(tx, window, tenant).await?;
    let size = CHUNK.load(std::sync::atomic::Ordering::Relaxed);
    let rows = keep > 0;
    let mut acc = Acc { totals: BTreeMap::new(), keep, kept: Default::default(), total: 0, sees };
    let (mut chunk, mut soft, mut soft_pods) = (Vec::new(), Vec::new(), Vec::new());
    // Devices and modes of the chunk's allocations (of the soft shares', kept to the end), for the kept rows.
    let (mut info, mut soft_info) = (HashMap::new(), HashMap::new());
    let mut without_fraction = 0u64;
    let mut tenant_ids: BTreeSet<Uuid> = BTreeSet::new();
    {
        let mut stream = store::held_between(tx, from, to, tenant.map(|t| t.as_uuid()));
        while let Some(row) = stream.try_next().await? {
            let held = match pieces.held(row)? {
                Converted::WithoutFraction => {
                    without_fraction += 1;
                    continue;
                }
                Converted::Outside => continue,
                Converted::Held(h) => *h,
            };
            tenant_ids.extend(held.rows.iter().filter_map(|a| a.tenant.map(|t| t.as_uuid())));
            // Soft shares are measured by their pods' own samples, read at the end (few).
            let (into, into_info) = match held.soft {
                Some(pod) => {
                    soft_pods.push(pod);
                    (&mut soft, &mut soft_info)
                }
                None => (&mut chunk, &mut info),
            };
            into.extend(held.rows);
            if rows {
                into_info.insert(held.id, (held.device_ids, held.mode));
            }
            if chunk.len() >= size {
                let report = analyze_chunk(&timelines, std::mem::take(&mut chunk), options, rows).await?;
                acc.add(report, &info)?;
                info.clear();
            }
        }
    }
    if !chunk.is_empty() {
        let report = analyze_chunk(&timelines, chunk, options, rows).await?;
        acc.add(report, &info)?;
    }
    if !soft.is_empty() {
        let mut t = DeviceTimelines::new();
        t.extend(&pod_samples(tx, window, &soft_pods).await?).map_err(internal)?;
        let options = *options;
        let report = tokio::task::spawn_blocking(move || analyze_timelines(&soft, t, &options, rows))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        acc.add(report, &soft_info)?;
    }
    let tenant_ids: Vec<Uuid> = tenant_ids.into_iter().collect();
    let names: HashMap<Uuid, String> = if tenant_ids.is_empty() {
        HashMap::new()
    } else {
        store::tenant_names(tx, &tenant_ids).await?.into_iter().collect()
    };
    let mut kept = acc.kept.into_vec();
    kept.sort_unstable();
    Ok(Chunked {
        tenants: acc.totals.into_values().collect(),
        names,
        without_fraction,
        rows: kept.into_iter().map(|k| (k.row, k.devices, k.mode)).collect(),
        total: acc.total,
    })
}

/// The month's utilization per tenant over the whole organization, for the read model's summaries: computed a chunk
/// of allocations at a time ([`in_chunks`]).
pub async fn utilization_summary(
    tx: &mut OrgTx,
    period: Period,
) -> Result<(api::UtilizationHead, Vec<(Option<Uuid>, api::TenantUtilization)>), AppError> {
    let (month, end) = month_so_far(period)?;
    let window = Interval::new(month.start(), end).map_err(internal)?;
    let options = UtilizationOptions::new(window);
    let Chunked { tenants, names, without_fraction, .. } = in_chunks(tx, window, None, &options, 0, &|_| true).await?;
    let departments: HashMap<Uuid, Uuid> = store::tenant_departments(tx).await?.into_iter().collect();
    let mut tenants: Vec<&TenantUtilization> = tenants.iter().collect();
    tenants.sort_by_key(|t| std::cmp::Reverse(t.idle_gpu_hours));
    let rows = tenants
        .iter()
        .map(|t| {
            let department = t.tenant.and_then(|id| departments.get(&id.as_uuid()).copied());
            Ok((department, tenant_json(t, &names)?))
        })
        .collect::<Result<Vec<_>, AppError>>()?;
    Ok((answer_head(period, window, &options, without_fraction)?, rows))
}
