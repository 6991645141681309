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
    utilization::{DeviceTimelines, HeldAllocation, TenantUtilization, UtilizationOptions, analyze_timelines},
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

/// Analyses one chunk with the hours its devices held (off the async workers: reading them and the analysis are
/// CPU-bound).
async fn analyze_chunk(
    timelines: &std::sync::Arc<spill::Timelines>,
    chunk: Vec<HeldAllocation>,
    options: &UtilizationOptions,
    totals: &mut BTreeMap<Option<TenantId>, TenantUtilization>,
) -> Result<(), AppError> {
    if chunk.is_empty() {
        return Ok(());
    }
    let (timelines, options) = (timelines.clone(), *options);
    let report = tokio::task::spawn_blocking(move || {
        let t = timelines.for_chunk(&chunk)?;
        analyze_timelines(&chunk, t, &options, false).map_err(internal)
    })
    .await
    .map_err(internal)??;
    add_tenants(totals, report.tenants)
}

/// The month's per-tenant sums over the whole organization, a chunk of allocations at a time (the month's timelines
/// in a temporary file, `spill`): the same sums as [`analyze_timelines`] over [`load`], in a chunk's memory.
/// Returns the tenants (by tenant), their names, and the intervals without an approved fraction.
async fn summarize(
    tx: &mut OrgTx,
    window: Interval,
    options: &UtilizationOptions,
) -> Result<(Vec<TenantUtilization>, HashMap<Uuid, String>, u64), AppError> {
    use futures::TryStreamExt;
    let (from, to) = (window.start(), window.end());
    let timelines = std::sync::Arc::new(spill::Timelines::read(tx, from, to).await?);
    let pieces = Pieces::read(tx, window, None).await?;
    let size = CHUNK.load(std::sync::atomic::Ordering::Relaxed);
    let mut totals: BTreeMap<Option<TenantId>, TenantUtilization> = BTreeMap::new();
    let (mut chunk, mut soft, mut soft_pods) = (Vec::new(), Vec::new(), Vec::new());
    let mut without_fraction = 0u64;
    let mut tenant_ids: BTreeSet<Uuid> = BTreeSet::new();
    {
        let mut rows = store::held_between(tx, from, to, None);
        while let Some(row) = rows.try_next().await? {
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
            match held.soft {
                Some(pod) => {
                    soft_pods.push(pod);
                    soft.extend(held.rows);
                }
                None => chunk.extend(held.rows),
            }
            if chunk.len() >= size {
                analyze_chunk(&timelines, std::mem::take(&mut chunk), options, &mut totals).await?;
            }
        }
    }
    analyze_chunk(&timelines, chunk, options, &mut totals).await?;
    if !soft.is_empty() {
        let mut t = DeviceTimelines::new();
        t.extend(&pod_samples(tx, window, &soft_pods).await?).map_err(internal)?;
        let options = *options;
        let report = tokio::task::spawn_blocking(move || analyze_timelines(&soft, t, &options, false))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        add_tenants(&mut totals, report.tenants)?;
    }
    let tenant_ids: Vec<Uuid> = tenant_ids.into_iter().collect();
    let names: HashMap<Uuid, String> = if tenant_ids.is_empty() {
        HashMap::new()
    } else {
        store::tenant_names(tx, &tenant_ids).await?.into_iter().collect()
    };
    Ok((totals.into_values().collect(), names, without_fraction))
}

/// The month's utilization per tenant over the whole organization, for the read model's summaries: computed a chunk
/// of allocations at a time ([`summarize`]).
pub async fn utilization_summary(
    tx: &mut OrgTx,
    period: Period,
) -> Result<(api::UtilizationHead, Vec<(Option<Uuid>, api::TenantUtilization)>), AppError> {
    let (month, end) = month_so_far(period)?;
    let window = Interval::new(month.start(), end).map_err(internal)?;
    let options = UtilizationOptions::new(window);
    let (tenants, names, without_fraction) = summarize(tx, window, &options).await?;
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
