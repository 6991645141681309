//! Storing measurements: telemetry rollups, endpoint totals and service usage reported by agents.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use gpuledger_core::{
    ids::{ClusterId, OrgId},
    telemetry::Window,
    wire::{EndpointTotalsFact, FlaggedFact, ProcessTelemetry, ServiceUsageFact, TelemetryRollup},
};
use serde_json::json;
use time::OffsetDateTime;

use super::{store::measurements as store, subject_of_usage};
use crate::{
    db::OrgTx,
    error::AppError,
    telemetry::store::{SeriesWindows, WindowKey, store_windows_noting},
};

/// Stores telemetry windows in the tiers (`crate::telemetry::store`); returns how many were new.
pub(super) async fn store_telemetry(
    tx: &mut OrgTx,
    cluster: ClusterId,
    rollups: &[&TelemetryRollup],
) -> Result<u64, AppError> {
    store_telemetry_noting(tx, cluster, rollups, None).await
}

/// A rollup's window key, as [`store_windows_noting`] notes the new ones.
pub(super) fn window_key(t: &TelemetryRollup) -> Result<WindowKey, AppError> {
    let window = Window::from_rollup(t).map_err(|e| AppError::invalid("window", e.to_string()))?;
    Ok((t.gpu_uuid.clone(), instance(t), window.start_ms))
}

fn instance(t: &TelemetryRollup) -> i32 {
    t.gpu_instance_id.map_or(-1, |v| i32::try_from(v).unwrap_or(i32::MAX))
}

/// [`store_telemetry`], noting the keys of the windows that were new.
pub(super) async fn store_telemetry_noting(
    tx: &mut OrgTx,
    cluster: ClusterId,
    rollups: &[&TelemetryRollup],
    new: Option<&mut HashSet<WindowKey>>,
) -> Result<u64, AppError> {
    // One entry per device; the node and MIG profile of its latest window.
    let mut series: BTreeMap<(&str, i32), SeriesWindows> = BTreeMap::new();
    for t in rollups {
        // Checked when the batch was decoded; a window that still does not fit is refused with its field there.
        let window = Window::from_rollup(t).map_err(|e| AppError::invalid("window", e.to_string()))?;
        let gi = instance(t);
        let s = series.entry((t.gpu_uuid.as_str(), gi)).or_insert_with(|| SeriesWindows {
            gpu_uuid: t.gpu_uuid.clone(),
            gpu_instance_id: gi,
            node: t.node.clone(),
            mig_profile: t.mig_profile.clone(),
            windows: Vec::new(),
        });
        if s.windows.last().is_none_or(|l| l.start_ms <= window.start_ms) {
            s.node.clone_from(&t.node);
            s.mig_profile.clone_from(&t.mig_profile);
        }
        s.windows.push(window);
    }
    Ok(store_windows_noting(tx, cluster, series.into_values().collect(), new).await?)
}

/// Stores per-process GPU windows (one row per GPU and window; the pods as JSON), idempotent by key.
pub(super) async fn store_process_windows(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    windows: &[&ProcessTelemetry],
    new: Option<&mut HashSet<(String, i128)>>,
) -> Result<u64, AppError> {
    if windows.is_empty() {
        return Ok(0);
    }
    let mut pods = Vec::with_capacity(windows.len());
    for w in windows {
        pods.push(serde_json::to_value(&w.pods).map_err(|e| AppError::Internal(e.to_string()))?);
    }
    let nodes: Vec<String> = windows.iter().map(|w| w.node.clone()).collect();
    let gpus: Vec<String> = windows.iter().map(|w| w.gpu_uuid.clone()).collect();
    let starts: Vec<OffsetDateTime> = windows.iter().map(|w| w.window_start).collect();
    let ends: Vec<OffsetDateTime> = windows.iter().map(|w| w.window_end).collect();
    let samples: Vec<i32> = windows.iter().map(|w| i32::try_from(w.samples).unwrap_or(i32::MAX)).collect();
    let columns = store::ProcessWindowColumns {
        nodes: &nodes,
        gpus: &gpus,
        starts: &starts,
        ends: &ends,
        samples: &samples,
        pods: &pods,
    };
    Ok(store::insert_process_windows(tx, org.as_uuid(), cluster.as_uuid(), &columns, new).await?)
}

/// A process window's key as stored: (GPU UUID, start in Unix µs — what the database keeps of the instant).
pub(super) fn process_window_key(t: &ProcessTelemetry) -> (String, i128) {
    (t.gpu_uuid.clone(), store::unix_us(t.window_start))
}

/// Stores `endpoint_totals` rows in one statement (validated: counts fit in i64, TTFT both or neither).
pub(super) async fn store_endpoint_totals(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    totals: &[&EndpointTotalsFact],
) -> Result<(), AppError> {
    let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let col_of = |f: &dyn Fn(&EndpointTotalsFact) -> String| totals.iter().map(|t| f(t)).collect::<Vec<String>>();
    let num = |f: &dyn Fn(&EndpointTotalsFact) -> u64| totals.iter().map(|t| count(f(t))).collect::<Vec<i64>>();
    let ttft: Vec<(Option<i64>, Option<i64>)> =
        totals.iter().map(|t| t.ttft_ms_sum.zip(t.ttft_count).map(|(s, c)| (count(s), count(c))).unzip()).collect();
    let (endpoints, models, servers, pods) = (
        col_of(&|t| t.endpoint.clone()),
        col_of(&|t| t.model.clone()),
        col_of(&|t| t.server.clone()),
        col_of(&|t| t.pod.clone()),
    );
    let starts: Vec<OffsetDateTime> = totals.iter().map(|t| t.window_start).collect();
    let ends: Vec<OffsetDateTime> = totals.iter().map(|t| t.window_end).collect();
    let (requests, input, output) = (num(&|t| t.requests), num(&|t| t.input_tokens), num(&|t| t.output_tokens));
    let ttft_sum: Vec<Option<i64>> = ttft.iter().map(|p| p.0).collect();
    let ttft_count: Vec<Option<i64>> = ttft.iter().map(|p| p.1).collect();
    let depth: Vec<Option<f64>> = totals.iter().map(|t| t.queue_depth).collect();
    let restarted: Vec<bool> = totals.iter().map(|t| t.restarted).collect();
    let columns = store::EndpointTotalColumns {
        endpoints: &endpoints,
        models: &models,
        servers: &servers,
        pods: &pods,
        starts: &starts,
        ends: &ends,
        requests: &requests,
        input: &input,
        output: &output,
        ttft_sum: &ttft_sum,
        ttft_count: &ttft_count,
        depth: &depth,
        restarted: &restarted,
    };
    store::insert_endpoint_totals(tx, org.as_uuid(), cluster.as_uuid(), &columns).await?;
    Ok(())
}

/// Stores `service_usage` rows in one statement; a tenant name that is not defined is kept with no tenant ID and
/// recorded as an `unknown_tenant` finding (once: only rows new to the table are flagged).
pub(super) async fn store_service_usage(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    usage: &[(&str, &ServiceUsageFact)],
    flagged: &mut Vec<FlaggedFact>,
) -> Result<(), AppError> {
    let n = usage.len();
    let mut endpoint = Vec::with_capacity(n);
    let mut model = Vec::with_capacity(n);
    let mut tenant = Vec::with_capacity(n);
    let mut start = Vec::with_capacity(n);
    let mut end = Vec::with_capacity(n);
    let mut requests = Vec::with_capacity(n);
    let mut input = Vec::with_capacity(n);
    let mut output = Vec::with_capacity(n);
    let mut ttft_sum: Vec<Option<i64>> = Vec::with_capacity(n);
    let mut ttft_count: Vec<Option<i64>> = Vec::with_capacity(n);
    // Counts were checked against i64::MAX by `validate`; saturate rather than wrap if a caller skipped it.
    let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for (_, u) in usage {
        endpoint.push(u.endpoint.clone());
        model.push(u.model.clone());
        tenant.push(u.tenant.clone());
        start.push(u.window_start);
        end.push(u.window_end);
        requests.push(count(u.requests));
        input.push(count(u.input_tokens));
        output.push(count(u.output_tokens));
        // Both or neither (validated), so the mean is always over the requests the sum covers.
        let pair = u.ttft_ms_sum.zip(u.ttft_count);
        ttft_sum.push(pair.map(|(s, _)| count(s)));
        ttft_count.push(pair.map(|(_, c)| count(c)));
    }
    // Rows new to the table whose tenant is not defined.
    // The tenants named, looked up first: Citus cannot push an insert whose rows join another table to a shard.
    let names: Vec<&str> = {
        let mut n: Vec<&str> = tenant.iter().map(String::as_str).collect();
        n.sort_unstable();
        n.dedup();
        n
    };
    let known = super::store::tenants_named(tx, org, &names).await?;
    let tenant_ids: Vec<Option<uuid::Uuid>> = tenant.iter().map(|t| known.get(t).copied()).collect();
    let (o, c) = (org.as_uuid(), cluster.as_uuid());
    let columns = store::ServiceUsageColumns {
        endpoint: &endpoint,
        model: &model,
        tenant: &tenant,
        tenant_ids: &tenant_ids,
        start: &start,
        end: &end,
        requests: &requests,
        input: &input,
        output: &output,
        ttft_sum: &ttft_sum,
        ttft_count: &ttft_count,
    };
    let inserted = store::insert_service_usage(tx, o, c, &columns).await?;
    let unknown: Vec<(String, String, String, OffsetDateTime)> =
        inserted.into_iter().filter(|r| r.4.is_none()).map(|(e, m, t, w, _)| (e, m, t, w)).collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let mut unknown: BTreeSet<(String, String, String, OffsetDateTime)> = unknown.into_iter().collect();
    let mut ids = Vec::with_capacity(unknown.len());
    let mut subjects = Vec::with_capacity(unknown.len());
    let mut froms = Vec::with_capacity(unknown.len());
    let mut tos = Vec::with_capacity(unknown.len());
    let mut details = Vec::with_capacity(unknown.len());
    for (event_id, u) in usage {
        // The first fact with a key is the one stored; later ones in the batch with that key were conflicts.
        if !unknown.remove(&(u.endpoint.clone(), u.model.clone(), u.tenant.clone(), u.window_start)) {
            continue;
        }
        let reason = format!(
            "service usage of endpoint {:?} names tenant {:?}, which is not defined; kept without a tenant",
            u.endpoint, u.tenant
        );
        ids.push(format!("unknown-tenant/{event_id}"));
        subjects.push(subject_of_usage(u));
        froms.push(u.window_start);
        tos.push(u.window_end);
        details.push(json!({ "reason": reason, "endpoint": u.endpoint, "model": u.model, "tenant": u.tenant }));
        flagged.push(FlaggedFact { event_id: (*event_id).to_string(), reason });
    }
    let findings =
        store::UsageFindingColumns { ids: &ids, subjects: &subjects, froms: &froms, tos: &tos, details: &details };
    store::insert_usage_findings(tx, o, c, &findings).await?;
    Ok(())
}
