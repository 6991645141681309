//! `GET /api/v1/idle`: allocations holding GPUs right now that have done (almost) nothing for longer than the
//! policy's idle setting (default: below 5 % activity for 2 hours). A nudge, never a charge: what the idle time
//! cost is shown at the class's guaranteed rate, and it is already in the ledger as the capacity held.
//!
//! An allocation is idle now when its last idle stretch (from the same utilization analysis as
//! `/api/v1/analytics/utilization`, over the last seven days) reaches the latest telemetry, which is recent (15
//! minutes), and lasts at least the setting. Open allocations without telemetry are counted as `not_measured`, never
//! listed as idle.

use std::collections::{HashMap, HashSet};

use axum::{Json, extract::State};
use gpuledger_api::foresight::{IdleList, IdleReservation};
use gpuledger_core::{
    Fraction, NANOS_PER_HOUR, Period, decimal::Decimal, interval::Interval, utilization::UtilizationOptions,
    utilization::analyze_timelines,
};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use super::{hours, internal, rfc3339};
use crate::{
    db::OrgTx,
    error::AppError,
    http::{Caller, ReadLedger},
    state::AppState,
};

/// How far back the analysis looks: an allocation idle for longer shows "idle since" at most this long ago.
const LOOKBACK: Duration = Duration::days(7);
/// The latest telemetry must be this recent for "idle now".
const RECENT: Duration = Duration::minutes(15);

/// `GET /api/v1/idle`: as the read model's worker stored it with this month's snapshot (its `as_of` is the
/// snapshot's, within the snapshot's staleness bound while agents report), or computed now before the month's
/// first snapshot.
pub(super) async fn idle(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<IdleList>, AppError> {
    read_idle(&state, &p).await.map(Json)
}

/// Idle reservations now, cut to the caller's departments (`GET /api/v1/idle`).
pub(crate) async fn read_idle(state: &AppState, p: &crate::auth::Principal) -> Result<IdleList, AppError> {
    let now = OffsetDateTime::now_utc();
    let mut tx = state.db.begin_org(p.org).await?;
    let (mut list, departments) = match crate::figures::stored_idle(&mut tx, Period::containing(now)).await? {
        Some(stored) => (stored.list, stored.departments),
        None => idle_now(&mut tx, now).await?,
    };
    tx.commit_quiet().await?;
    if let Some(scope) = &p.departments {
        let scope: HashSet<Uuid> = scope.iter().map(|d| d.as_uuid()).collect();
        let keep: Vec<bool> = departments.iter().map(|d| d.is_some_and(|d| scope.contains(&d))).collect();
        let mut keep = keep.into_iter();
        list.items.retain(|_| keep.next().unwrap_or(false));
    }
    Ok(list)
}

/// The organization's idle reservations now, with each item's department ID (for scoping and notifications).
pub(crate) async fn idle_now(tx: &mut OrgTx, now: OffsetDateTime) -> Result<(IdleList, Vec<Option<Uuid>>), AppError> {
    let policy = crate::store::policy_for(tx, Period::containing(now)).await?;
    let setting = policy.as_ref().map(|p| p.idle.clone()).unwrap_or_default();
    let currency = policy.as_ref().map_or_else(|| "USD".to_string(), |p| p.currency.clone());
    let min_idle_nanos = setting
        .min_hours
        .value()
        .checked_mul(Fraction::from_integer(NANOS_PER_HOUR).map_err(internal)?)
        .map_err(internal)?;
    let min_idle_nanos = min_idle_nanos.numer() / min_idle_nanos.denom();
    let lookback = LOOKBACK.max(Duration::nanoseconds_i128(min_idle_nanos.saturating_mul(2)));
    let window = Interval::new(now - lookback, now).map_err(internal)?;
    let options = UtilizationOptions::new(window)
        .with_idle_threshold_pct(setting.threshold_pct.value().to_f64_lossy())
        .map_err(internal)?;
    let options = UtilizationOptions { min_idle_nanos, ..options };
    let head = |items, not_measured| -> Result<IdleList, AppError> {
        Ok(IdleList {
            as_of: rfc3339(now)?,
            threshold_pct: setting.threshold_pct.to_string(),
            min_idle_hours: setting.min_hours.to_string(),
            items,
            not_measured,
        })
    };

    // Open allocations: who holds them, where.
    let open = super::store::open_allocations(tx, now).await?;
    if open.is_empty() {
        return Ok((head(Vec::new(), 0)?, Vec::new()));
    }
    let open: HashMap<String, (String, String, String, Option<String>)> = open
        .into_iter()
        .map(|(cluster, name, alloc, holder, _resource, class)| {
            (format!("{cluster}/{alloc}"), (name, alloc, holder, class))
        })
        .collect();
    // Only the open allocations, and their devices' hours since the earliest of them started.
    let keep = |id: &str| open.contains_key(id);
    let mut loaded = super::load(tx, window, None, Some(&keep)).await?;
    let (allocations, timelines) = (std::mem::take(&mut loaded.allocations), std::mem::take(&mut loaded.timelines));
    let report = tokio::task::spawn_blocking(move || analyze_timelines(&allocations, timelines, &options, true))
        .await
        .map_err(internal)?
        .map_err(internal)?;

    let tenants: HashMap<Uuid, (String, Uuid, String)> = super::store::tenants_with_departments(tx)
        .await?
        .into_iter()
        .map(|t| (t.tenant_id, (t.tenant, t.department_id, t.department)))
        .collect();
    let rates: HashMap<String, Decimal> = policy
        .as_ref()
        .map(|p| p.classes.iter().map(|c| (c.gpu_class.clone(), c.guaranteed)).collect())
        .unwrap_or_default();

    // The current piece of each allocation (split at ownership changes): the one that reaches now.
    let mut latest: HashMap<&str, &gpuledger_core::utilization::AllocationUtilization> = HashMap::new();
    for row in &report.allocations {
        let slot = latest.entry(row.id.as_str()).or_insert(row);
        if row.held.end() > slot.held.end() {
            *slot = row;
        }
    }
    let mut not_measured = 0u64;
    let mut found = Vec::new();
    for (id, row) in latest {
        let Some((cluster, allocation_id, holder, class)) = open.get(id) else { continue };
        if row.observed_hours == Fraction::ZERO {
            not_measured += 1;
            continue;
        }
        let Some(stretch) = row.idle_stretches.last() else { continue };
        let length = stretch.end() - stretch.start();
        if stretch.end() < now - RECENT || length.whole_nanoseconds() < min_idle_nanos {
            continue;
        }
        let idle_hours = Fraction::new(length.whole_nanoseconds(), NANOS_PER_HOUR).map_err(internal)?;
        let idle_gpu_hours = idle_hours.checked_mul(row.fraction).map_err(internal)?;
        let cost = class
            .as_ref()
            .and_then(|c| rates.get(c))
            .map(|rate| {
                Decimal::round(rate.value().checked_mul(idle_gpu_hours).map_err(internal)?, 2)
                    .map(|d| d.to_string())
                    .map_err(internal)
            })
            .transpose()?;
        let tenant = row.tenant.and_then(|t| tenants.get(&t.as_uuid()));
        found.push((
            stretch.start(),
            tenant.map(|t| t.1),
            IdleReservation {
                cluster: cluster.clone(),
                allocation_id: allocation_id.clone(),
                holder: holder.clone(),
                owner: tenant.map(|t| t.0.clone()),
                tenant: tenant.map(|t| t.0.clone()),
                department: tenant.map(|t| t.2.clone()),
                gpu_class: class.clone(),
                fraction: row.fraction.to_string(),
                devices: loaded.devices.get(id).cloned().unwrap_or_default(),
                idle_since: rfc3339(stretch.start())?,
                idle_hours: hours(&idle_hours)?,
                idle_gpu_hours: hours(&idle_gpu_hours)?,
                cost_so_far: cost,
                currency: currency.clone(),
            },
        ));
    }
    // Longest idle first; then by cluster and allocation, for a stable order.
    found.sort_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| (&a.2.cluster, &a.2.allocation_id).cmp(&(&b.2.cluster, &b.2.allocation_id)))
    });
    let departments = found.iter().map(|f| f.1).collect();
    let items = found.into_iter().map(|f| f.2).collect();
    Ok((head(items, not_measured)?, departments))
}
