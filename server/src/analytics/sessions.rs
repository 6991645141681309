//! `GET /api/v1/analytics/sessions?period=YYYY-MM&tenant=UUID`: showback by AI-agent session within a tenant, so
//! short-lived agent workloads stay attributable. A session is named by the `agent_session_id` of gateway usage
//! records and by the agent-session attribution label of pods (`gpuledger.io/agent-session` by default).
//!
//! Per session: requests, tokens and mean TTFT from the records; GPU-hours of the labelled allocations (split
//! where their namespace changed owner; only the tenant's pieces, clipped to the month and to now); and a cost that
//! is **modeled** from the tenant's own ledger lines of the month — its service line on each endpoint in
//! proportion to the session's weighted tokens, and its guaranteed + borrowed lines per GPU class at their average
//! rate (amount ÷ GPU-hours) for the session's GPU-hours. Energy, overhead and credits are not apportioned.

use std::collections::{BTreeMap, BTreeSet};

use axum::{Json, extract::State};
use gpuledger_api::analytics::{SessionRow, Sessions};
use gpuledger_core::{Fraction, NANOS_PER_HOUR, ledger::Term};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{internal, month_so_far, rfc3339, split_by_owner, store};
use crate::http::Params;
use crate::{
    auth::Visible,
    error::AppError,
    http::{Caller, ReadLedger},
    state::AppState,
};

#[derive(Default)]
struct Session {
    requests: u64,
    input: u64,
    output: u64,
    ttft_sum: u64,
    ttft_count: u64,
    /// endpoint → weighted tokens (policy weights).
    weighted: BTreeMap<String, Fraction>,
    /// GPU class → GPU-nanoseconds.
    gpu_nanos: BTreeMap<String, Fraction>,
    allocations: u64,
}

fn frac(d: &gpuledger_core::decimal::Decimal) -> Result<Fraction, AppError> {
    d.to_string().parse::<Fraction>().map_err(internal)
}

fn dec(f: &Fraction, scale: u32) -> Result<String, AppError> {
    f.to_decimal_string(scale).map_err(internal)
}

pub(super) async fn sessions(
    State(state): State<AppState>,
    principal: Caller<ReadLedger>,
    Params(q): Params<gpuledger_api::params::SessionsParams>,
) -> Result<Json<Sessions>, AppError> {
    read_sessions(&state, &principal, q).await.map(Json)
}

/// A tenant's agent sessions of the month (`GET /api/v1/analytics/sessions`).
pub(crate) async fn read_sessions(
    state: &AppState,
    principal: &crate::auth::Principal,
    q: gpuledger_api::params::SessionsParams,
) -> Result<Sessions, AppError> {
    let period = q.period.period();
    let tenant = q.tenant.uuid();
    let (month, to) = month_so_far(period)?;
    let from = month.start();
    let visible = principal.visible(&state.db).await?;
    let not_found = || AppError::unknown("tenant", format!("no tenant {tenant} in this organization"));
    if !Visible::tenant(&visible, Some(tenant)) {
        return Err(not_found());
    }
    let mut tx = state.db.begin_org(principal.org).await?;
    let Some(name) = store::tenant_name(&mut tx, tenant).await? else { return Err(not_found()) };
    let records = store::session_records(&mut tx, tenant, from, month.end()).await?;
    let allocations = store::session_allocations(&mut tx, from, to).await?;
    let namespaces: Vec<Uuid> = allocations.iter().filter_map(|a| a.1).collect::<BTreeSet<_>>().into_iter().collect();
    let ownership = store::owners_of(&mut tx, &namespaces).await?;
    // The tenant's lines of the month, and the policy's token weights, as the ledger has them.
    let (lines, policy) =
        if crate::store::period_state(&mut tx, period).await? == gpuledger_api::states::PeriodState::Closed {
            let b = crate::store::stored_bundle(&mut tx, period)
                .await?
                .ok_or_else(|| AppError::Internal("closed period without bundle".into()))?;
            (b.lines, Some(b.inputs.policy))
        } else {
            match crate::close::preview(&mut tx, period).await {
                Ok(p) => (p.ledger.lines, Some(p.input.policy)),
                // No approved policy yet: work and hours, no cost.
                Err(AppError::Conflict(_)) => (Vec::new(), None),
                Err(e) => return Err(e),
            }
        };
    tx.commit().await?;

    let mut owners: BTreeMap<Uuid, Vec<(OffsetDateTime, Option<OffsetDateTime>, Uuid)>> = BTreeMap::new();
    for store::OwnerRow { namespace_uid: ns, valid_from: vf, valid_to: vt, tenant_id: t } in ownership {
        owners.entry(ns).or_default().push((vf, vt, t));
    }
    let mut by: BTreeMap<String, Session> = BTreeMap::new();
    for store::RecordRow {
        agent_session_id: session,
        endpoint,
        model,
        requests: r,
        input_tokens: i,
        output_tokens: o,
        ttft_ms: ttft,
    } in records
    {
        let s = by.entry(session).or_default();
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        s.requests += count(r);
        s.input += count(i);
        s.output += count(o);
        if let Some(t) = ttft {
            s.ttft_sum += count(t).saturating_mul(count(r));
            s.ttft_count += count(r);
        }
        let (wi, wo) = policy.as_ref().map_or((Fraction::ONE, Fraction::ONE), |p| p.token_weight(&model));
        let w = wi
            .checked_mul_int(i128::from(i))
            .and_then(|a| wo.checked_mul_int(i128::from(o)).and_then(|b| a.checked_add(b)))
            .map_err(internal)?;
        let e = s.weighted.entry(endpoint).or_insert(Fraction::ZERO);
        *e = e.checked_add(w).map_err(internal)?;
    }
    let none = Vec::new();
    for (session, ns, num, den, class, start, end) in allocations {
        let (s0, e0) = (start.max(from), end.map_or(to, |e| e.min(to)));
        if s0 >= e0 {
            continue;
        }
        let fraction = Fraction::new(i128::from(num), i128::from(den)).map_err(internal)?;
        let ns_owners = ns.and_then(|n| owners.get(&n)).unwrap_or(&none);
        let mut counted = false;
        for (ps, pe, t) in split_by_owner(s0, e0, ns_owners) {
            if t.map(|t| t.as_uuid()) != Some(tenant) {
                continue;
            }
            let nanos = fraction.checked_mul_int((pe - ps).whole_nanoseconds()).map_err(internal)?;
            let s = by.entry(session.clone()).or_default();
            let c = s.gpu_nanos.entry(class.clone().unwrap_or_default()).or_insert(Fraction::ZERO);
            *c = c.checked_add(nanos).map_err(internal)?;
            counted = true;
        }
        if counted {
            by.entry(session).or_default().allocations += 1;
        }
    }

    // The tenant's average GPU rate per class, and its service amount per weighted token per endpoint.
    let mut class_amount: BTreeMap<String, (Fraction, Fraction)> = BTreeMap::new();
    let mut service: BTreeMap<String, (Fraction, Fraction)> = BTreeMap::new();
    let mut currency = String::new();
    for l in lines.iter().filter(|l| l.tenant_id.map(|t| t.as_uuid()) == Some(tenant) && l.corrects.is_none()) {
        currency.clone_from(&l.currency);
        match l.term {
            Term::Guaranteed | Term::Borrowed => {
                let e = class_amount.entry(l.gpu_class.clone()).or_insert((Fraction::ZERO, Fraction::ZERO));
                e.0 = e.0.checked_add(frac(&l.amount)?).map_err(internal)?;
                e.1 = e.1.checked_add(frac(&l.quantity)?).map_err(internal)?;
            }
            Term::Service => {
                let endpoint = l.line_id.rsplit('/').next().unwrap_or_default().to_string();
                let million = Fraction::from_integer(1_000_000).map_err(internal)?;
                let tokens = frac(&l.quantity)?.checked_mul(million).map_err(internal)?;
                service.insert(endpoint, (frac(&l.amount)?, tokens));
            }
            _ => {}
        }
    }
    let hour = Fraction::from_integer(NANOS_PER_HOUR).map_err(internal)?;
    let mut rows = Vec::new();
    for (session, s) in &by {
        let mut hours = Fraction::ZERO;
        let mut cost = Fraction::ZERO;
        for (class, nanos) in &s.gpu_nanos {
            let h = nanos.checked_div(hour).map_err(internal)?;
            hours = hours.checked_add(h).map_err(internal)?;
            if let Some((amount, qty)) = class_amount.get(class).filter(|(_, q)| !q.is_zero()) {
                let rate = amount.checked_div(*qty).map_err(internal)?;
                cost = cost.checked_add(h.checked_mul(rate).map_err(internal)?).map_err(internal)?;
            }
        }
        for (endpoint, w) in &s.weighted {
            if let Some((amount, tokens)) = service.get(endpoint).filter(|(_, t)| !t.is_zero()) {
                let share = w.checked_div(*tokens).map_err(internal)?;
                cost = cost.checked_add(amount.checked_mul(share).map_err(internal)?).map_err(internal)?;
            }
        }
        let mean_ttft = (s.ttft_count > 0)
            .then(|| Fraction::new(i128::from(s.ttft_sum), i128::from(s.ttft_count)))
            .transpose()
            .map_err(internal)?;
        rows.push((
            cost,
            SessionRow {
                session: session.clone(),
                requests: s.requests,
                input_tokens: s.input,
                output_tokens: s.output,
                mean_ttft_ms: mean_ttft.map(|m| dec(&m, 0)).transpose()?,
                allocations: s.allocations,
                gpu_hours: dec(&hours, 3)?,
                cost: if lines.is_empty() { None } else { Some(dec(&cost, 2)?) },
                confidence: gpuledger_api::states::Confidence::Modeled,
            },
        ));
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    Ok(Sessions {
        period: period.to_string(),
        from: rfc3339(from)?,
        to: rfc3339(to)?,
        tenant_id: tenant.to_string(),
        tenant_name: name,
        currency,
        basis: "modeled from the tenant's ledger lines: service by weighted tokens, GPU-hours at the tenant's \
                average guaranteed+borrowed rate per class; energy, overhead and credits not apportioned"
            .into(),
        sessions: rows.into_iter().map(|(_, v)| v).collect(),
    })
}
