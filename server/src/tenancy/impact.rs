//! `POST /api/v1/inventory/impact?period=YYYY-MM`: an inventory change previewed before it is saved.
//!
//! The body is the change exactly as its save endpoint takes it, under its kind (`{"model": …}`,
//! `{"profile": …}`, `{"timeslicing": …}`). In one transaction that is always rolled back, the change is written
//! and the allocations it concerns recomputed with the save endpoint's own code, the month is computed, and then
//! the same month without the change: nothing is saved, audited or marked for the read model.

use axum::{Json, extract::State};
use gpuledger_api::{params::MonthParams, policy::Impact, tenancy::InventoryChange};

use super::{write_model, write_profile, write_timeslicing};
use crate::{
    error::AppError,
    http::{Caller, JsonBody, ManagePolicy, Params},
    state::AppState,
};

/// The preview (admin or finance, like the save endpoints). Both sides come from today's facts: an open month as
/// its provisional figures are computed (credits and late-data corrections included), a closed month recomputed
/// with its own policy (what the next close's corrections would be measured against) — `closed: true`.
pub(super) async fn inventory_impact(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    Params(q): Params<MonthParams>,
    JsonBody(change): JsonBody<InventoryChange>,
) -> Result<Json<Impact>, AppError> {
    preview_inventory(&state, &p, q, change).await.map(Json)
}

/// An inventory change's impact on a month, nothing saved (`POST /api/v1/inventory/impact`).
pub(crate) async fn preview_inventory(
    state: &AppState,
    p: &crate::auth::Principal,
    q: MonthParams,
    change: InventoryChange,
) -> Result<Impact, AppError> {
    let period = q.period.period();
    let mut tx = p.begin(&state.db).await?;
    super::store::savepoint(&mut tx, "before_change").await?;
    // Written first, so a bad body is refused (422) before any computation.
    let what = match &change {
        InventoryChange::Model(b) => {
            let w = write_model(&mut tx, b).await?;
            format!(
                "GPU model {} as {}: {} allocations recomputed",
                w.answer.model, w.answer.gpu_class, w.answer.recomputed_allocations
            )
        }
        InventoryChange::Profile(b) => {
            let w = write_profile(&mut tx, b).await?;
            format!(
                "{} profile {} of {} at {} of a GPU: {} allocations recomputed",
                w.answer.kind, w.answer.profile, w.answer.model, w.answer.fraction, w.answer.recomputed_allocations
            )
        }
        InventoryChange::Timeslicing(b) => {
            let w = write_timeslicing(&mut tx, b).await?;
            format!(
                "time-slicing {}/{} with {} replicas: a declaration for reviewers — each time-sliced allocation is \
                 priced by the replica count its agent read, so no amount changes",
                w.answer.cluster, w.answer.name, w.answer.replicas
            )
        }
    };
    let with_change = crate::impact::from_facts(&mut tx, period).await?;
    super::store::rollback_to(&mut tx, "before_change").await?;
    let now = crate::impact::from_facts(&mut tx, period).await?;
    tx.rollback().await?;
    let version = i32::try_from(now.input.policy.version).unwrap_or(i32::MAX);
    let note = format!(
        "Preview, nothing saved. {what}. {}",
        if now.closed {
            format!(
                "{period} is closed and stays as closed: saving would add the differences as corrections at the next close"
            )
        } else {
            format!("{period} is open: its figures would change as shown")
        }
    );
    let impact = crate::impact::compare(crate::impact::Comparison {
        period,
        closed: now.closed,
        version,
        approved_version: version,
        currency: &now.input.policy.currency,
        approved: &now.lines,
        draft: &with_change.lines,
        scope: p.departments.as_deref(),
        note,
    })?;
    Ok(impact)
}
