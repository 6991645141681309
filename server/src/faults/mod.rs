//! Credits when the hardware failed (issue 35 item 4; docs/finance.md): a node agent reports the device faults it
//! sees (`device_fault` facts: an XID error, a GPU gone from the bus, retired memory pages, and the recovery); for
//! each allocation holding a faulted GPU the hours from the fault (plus the policy's grace) until the allocation
//! ended or the device recovered are lost, and a credit for them — that GPU's share of the allocation × hours × the
//! class's borrowed rate — is proposed to finance with its evidence (the fault fact, the GPU, the pod). Finance
//! approves or rejects it like a dispute's credit; an approved credit is an adjustment the next close applies.
//!
//! Proposals are computed from the facts whenever they are read (a late recovery fact shortens them); only the
//! decisions are stored.

use std::collections::{BTreeMap, HashMap};

use axum::{
    Json, Router,
    extract::State,
    routing::{get, post},
};
use gpuledger_api::faults::{FaultCredit, FaultCreditDecision, FaultCreditState, FaultCredits, FaultCreditsParams};
use gpuledger_core::{
    Fraction, Period,
    decimal::Decimal,
    faults::{FaultEvent, describe_xid, lost_window, outages},
    time_fmt::rfc3339,
    wire::{DeviceFaultKind, Fact, FactBody},
};
use serde_json::json;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use crate::{
    auth::Principal,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, CreditApprove, JsonBody, Params, ReadLedger},
    state::AppState,
};

pub mod store;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/faults/credits", get(list_credits))
        .route("/api/v1/faults/credits/approve", post(approve))
        .route("/api/v1/faults/credits/reject", post(reject))
}

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/faults/credits", list_credits),
        described("post", "/api/v1/faults/credits/approve", approve),
        described("post", "/api/v1/faults/credits/reject", reject),
    ]
}

/// A proposal before it is answered: what approval needs beside the answer.
struct Proposal {
    answer: FaultCredit,
    tenant_id: Option<Uuid>,
    department_id: Option<Uuid>,
    period: Period,
}

/// `GET /api/v1/faults/credits?period=`: the month's device faults, the hours they took from allocations and the
/// credits proposed (organization-wide: not for a caller limited to departments).
async fn list_credits(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<FaultCreditsParams>,
) -> Result<Json<FaultCredits>, AppError> {
    if p.departments.is_some() {
        return Err(AppError::Forbidden("device faults cover the whole organization".into()));
    }
    let period = q.period.period();
    let mut tx = p.begin(&state.db).await?;
    let answer = credits(&mut tx, period, OffsetDateTime::now_utc()).await?;
    tx.commit_quiet().await?;
    Ok(Json(answer))
}

/// The month's fault credits as of `now` (the service the REST handler calls).
pub async fn credits(tx: &mut crate::db::OrgTx, period: Period, now: OffsetDateTime) -> Result<FaultCredits, AppError> {
    let policy = crate::store::policy_for(tx, period).await?.unwrap_or_else(|| gpuledger_core::policy::CostPolicy {
        version: 0,
        currency: "USD".into(),
        classes: Vec::new(),
        energy: None,
        services: Vec::new(),
        token_weights: Vec::new(),
        overhead: Default::default(),
        idle: Default::default(),
        faults: Default::default(),
    });
    let proposals = proposals(tx, period, now, &policy).await?;
    Ok(FaultCredits {
        period: period.to_string(),
        xids: policy.faults.xids.clone(),
        grace_minutes: policy.faults.grace_minutes,
        auto_propose: policy.faults.auto_propose,
        items: proposals.into_iter().map(|p| p.answer).collect(),
    })
}

async fn proposals(
    tx: &mut crate::db::OrgTx,
    period: Period,
    now: OffsetDateTime,
    policy: &gpuledger_core::policy::CostPolicy,
) -> Result<Vec<Proposal>, AppError> {
    let (start, end) = crate::ledger::bounds(tx, period).await?;
    let now = now.min(end);
    // Every fault fact up to the month's end, per device (cluster, GPU): an outage may have begun before the month.
    let mut by_device: BTreeMap<(Uuid, String), (String, String, Vec<FaultEvent>)> = BTreeMap::new();
    for (cluster_id, cluster, payload) in store::fault_facts(tx, end).await? {
        let Ok(fact) = serde_json::from_value::<Fact>(payload) else { continue };
        let FactBody::DeviceFault(f) = fact.body else { continue };
        let entry =
            by_device.entry((cluster_id, f.gpu_uuid.clone())).or_insert_with(|| (cluster, f.node.clone(), Vec::new()));
        entry.2.push(FaultEvent { event_id: fact.event_id, kind: f.fault, xid: f.xid, at: f.occurred_at });
    }
    if by_device.is_empty() {
        return Ok(Vec::new());
    }
    let parents: HashMap<String, String> = store::mig_parents(tx).await?.into_iter().collect();
    let mut wanted: Vec<String> = by_device.keys().map(|(_, g)| g.clone()).collect();
    wanted.extend(parents.iter().filter(|(_, p)| by_device.keys().any(|(_, g)| g == *p)).map(|(m, _)| m.clone()));
    let allocations = store::allocations_on(tx, &wanted, start, end).await?;
    let decided: HashMap<(String, String), (FaultCreditState, Option<Uuid>)> =
        store::decisions(tx).await?.into_iter().map(|(f, a, d, adj)| ((f, a), (d.0, adj))).collect();
    let grace = Duration::minutes(i64::from(policy.faults.grace_minutes));
    let mut out = Vec::new();
    for ((cluster_id, gpu), (cluster, node, events)) in &by_device {
        for outage in outages(&policy.faults, events) {
            for a in allocations.iter().filter(|a| a.cluster_id == *cluster_id) {
                // The GPUs it holds, as physical GPUs: this fault's share of the allocation is one of them.
                let physical: Vec<&str> =
                    a.device_ids.iter().map(|d| parents.get(d).map_or(d.as_str(), String::as_str)).collect();
                let on_it = physical.iter().filter(|d| **d == gpu.as_str()).count();
                if on_it == 0 || a.fraction_den <= 0 {
                    continue;
                }
                // Clipped to the month: what the month's ledger charged.
                let Some((from, to)) =
                    lost_window(&outage, grace, a.started_at.max(start), a.ended_at.map(|e| e.min(end)), now)
                else {
                    continue;
                };
                let share = Fraction::new(i128::from(a.fraction_num), i128::from(a.fraction_den))?
                    .checked_mul_int(i128::try_from(on_it).unwrap_or(1))?
                    .checked_div(Fraction::from_integer(i128::try_from(physical.len().max(1)).unwrap_or(1))?)?;
                let nanos = Fraction::from_integer((to - from).whole_nanoseconds())?;
                let gpu_hours =
                    share.checked_mul(nanos.checked_div(Fraction::from_integer(gpuledger_core::NANOS_PER_HOUR)?)?)?;
                let class = a.gpu_class.clone().unwrap_or_default();
                let rate = policy.rates(&class).map(|r| r.borrowed);
                let amount = match rate {
                    Some(r) => Decimal::round(gpu_hours.checked_mul(r.value())?, 2)?,
                    None => Decimal::from_scaled(0, 2)?,
                };
                let provisional = outage.recovered_at.is_none_or(|r| r > now) && a.ended_at.is_none_or(|e| e > now);
                let key = format!("{cluster}/{}", a.allocation_id);
                let (state, adjustment) = match decided.get(&(outage.fault.event_id.clone(), key.clone())) {
                    Some((d, adj)) => (*d, adj.map(|u| u.to_string())),
                    None if policy.faults.auto_propose && rate.is_some() && a.tenant_id.is_some() => {
                        (FaultCreditState::Proposed, None)
                    }
                    None => (FaultCreditState::Listed, None),
                };
                let description = match (outage.fault.kind, outage.fault.xid) {
                    (DeviceFaultKind::Xid, Some(x)) => {
                        format!("XID {x}{}", describe_xid(x).map(|d| format!(": {d}")).unwrap_or_default())
                    }
                    (DeviceFaultKind::DeviceLost, _) => "GPU lost (gone from the bus)".into(),
                    (DeviceFaultKind::RetiredPages, _) => "memory pages retired (double-bit ECC)".into(),
                    (k, _) => k.as_str().into(),
                };
                out.push(Proposal {
                    answer: FaultCredit {
                        state,
                        fault_event_id: outage.fault.event_id.clone(),
                        fault_kind: outage.fault.kind.as_str().into(),
                        xid: outage.fault.xid,
                        description,
                        cluster: cluster.clone(),
                        node: node.clone(),
                        gpu_uuid: gpu.clone(),
                        fault_at: rfc3339(outage.fault.at),
                        recovered_at: outage.recovered_at.map(rfc3339),
                        allocation_id: key,
                        holder: a.holder.clone(),
                        tenant: a.tenant.clone().unwrap_or_default(),
                        gpu_class: class,
                        lost_from: rfc3339(from),
                        lost_to: rfc3339(to),
                        gpu_hours: Decimal::round(gpu_hours, 6)?.to_string(),
                        rate: rate.map(|r| r.to_string()).unwrap_or_default(),
                        amount: amount.to_string(),
                        currency: policy.currency.clone(),
                        provisional,
                        adjustment_id: adjustment,
                    },
                    tenant_id: a.tenant_id,
                    department_id: a.department_id,
                    period,
                });
            }
        }
    }
    out.sort_by(|a, b| {
        (&a.answer.fault_at, &a.answer.allocation_id).cmp(&(&b.answer.fault_at, &b.answer.allocation_id))
    });
    Ok(out)
}

/// `POST /api/v1/faults/credits/approve`: finance approves a proposed credit; it becomes an adjustment of the
/// tenant's borrowed line that the next close applies. Refused while the hours still grow (`provisional`).
async fn approve(
    State(state): State<AppState>,
    p: Caller<CreditApprove>,
    JsonBody(body): JsonBody<FaultCreditDecision>,
) -> Result<Json<FaultCredit>, AppError> {
    decide(&state, &p, &body, true).await.map(Json)
}

/// `POST /api/v1/faults/credits/reject`: finance rejects a proposed credit (recorded with the reason).
async fn reject(
    State(state): State<AppState>,
    p: Caller<CreditApprove>,
    JsonBody(body): JsonBody<FaultCreditDecision>,
) -> Result<Json<FaultCredit>, AppError> {
    decide(&state, &p, &body, false).await.map(Json)
}

/// Approves or rejects one proposal (the service both doors call).
pub async fn decide(
    state: &AppState,
    p: &Principal,
    body: &FaultCreditDecision,
    approve: bool,
) -> Result<FaultCredit, AppError> {
    let fault_id = body.fault_event_id.to_string();
    let allocation = body.allocation_id.to_string();
    let now = OffsetDateTime::now_utc();
    let mut tx = p.begin(&state.db).await?;
    // The month of the fault's lost hours: look in this month and the last few (credits are decided soon after).
    let mut found: Option<Proposal> = None;
    let mut period = Period::containing(now);
    for _ in 0..4 {
        let policy = crate::store::policy_for(&mut tx, period).await?;
        if let Some(policy) = policy {
            let list = proposals(&mut tx, period, now, &policy).await?;
            if let Some(hit) =
                list.into_iter().find(|x| x.answer.fault_event_id == fault_id && x.answer.allocation_id == allocation)
            {
                found = Some(hit);
                break;
            }
        }
        period = period.prev()?;
    }
    let Some(mut proposal) = found else {
        return Err(AppError::unknown(
            "fault_event_id",
            format!("no credit for fault {fault_id} and allocation {allocation} in the last four months"),
        ));
    };
    let verb = if approve { "approve" } else { "reject" };
    if proposal.answer.state != FaultCreditState::Proposed {
        return Err(AppError::refused(
            "fault_event_id",
            format!("this credit is {}: only a proposed credit can be {verb}d", proposal.answer.state),
        ));
    }
    if approve && proposal.answer.provisional {
        return Err(AppError::refused(
            "fault_event_id",
            "the allocation still runs on a device that has not recovered: its lost hours still grow; approve once it \
             ended or the device recovered",
        ));
    }
    let month_state = crate::store::period_state(&mut tx, proposal.period).await?;
    let (Some(tenant), Some(department)) = (proposal.tenant_id, proposal.department_id) else {
        return Err(AppError::refused("allocation_id", "the allocation has no tenant: nobody was charged for it"));
    };
    let who = p.actor();
    let a = &proposal.answer;
    let reason = format!(
        "{} on {} ({}/{}) at {}: {} GPU-hours of {} ({}) lost from {} to {} × {} {}{}",
        a.description,
        a.gpu_uuid,
        a.cluster,
        a.node,
        a.fault_at,
        a.gpu_hours,
        a.holder,
        a.allocation_id,
        a.lost_from,
        a.lost_to,
        a.rate,
        a.currency,
        if body.reason.is_empty() { String::new() } else { format!(" — {}", body.reason) }
    );
    let adjustment = approve.then(Uuid::new_v4);
    if let Some(id) = adjustment {
        // A credit is negative on the tenant's borrowed line of the month the hours were lost in.
        let corrects = format!("{}/borrowed/{}/{}", proposal.period, a.tenant, a.gpu_class);
        let amount = format!("-{}", a.amount);
        store::insert_credit(
            &mut tx,
            id,
            tenant,
            department,
            &a.gpu_class,
            &amount,
            &a.currency,
            &corrects,
            &reason,
            &who,
        )
        .await?;
    }
    let recorded = store::decide(
        &mut tx,
        &store::NewDecision {
            fault_event_id: &fault_id,
            allocation_key: &allocation,
            decision: if approve { "approved" } else { "rejected" },
            decided_by: &who,
            reason: &body.reason.to_string(),
            gpu_hours: &a.gpu_hours,
            amount: &a.amount,
            adjustment_id: adjustment,
        },
    )
    .await?;
    if !recorded {
        return Err(AppError::Conflict("this credit was decided a moment ago by someone else".into()));
    }
    tx.audit_by(
        p,
        if approve { "fault_credit.approved" } else { "fault_credit.rejected" },
        &format!("fault:{fault_id}"),
        &body.reason.to_string(),
        json!({ "allocation": allocation, "gpu_hours": a.gpu_hours, "amount": a.amount, "currency": a.currency,
                "adjustment_id": adjustment, "month": proposal.period.to_string(), "month_state": month_state }),
    )
    .await?;
    tx.commit().await?;
    proposal.answer.state = if approve { FaultCreditState::Approved } else { FaultCreditState::Rejected };
    proposal.answer.adjustment_id = adjustment.map(|u| u.to_string());
    Ok(proposal.answer)
}
