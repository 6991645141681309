//! `GET /api/v1/analytics/inference?period=YYYY-MM[&department=UUID]`: inference efficiency of shared endpoints —
//! per tenant its requests, tokens, the GPU-hours its work is attributed (the ledger's weighted-token split of the
//! endpoint's GPU-hours, so `modeled`), tokens per GPU-hour and mean time to first token; per endpoint the totals.
//! Analytics only (see `gpuledger_core::efficiency`). The current month runs to now.
//!
//! A caller limited to departments sees its tenants' rows and no endpoint totals (they include other departments'
//! work); the split itself is computed over the whole organization, like the ledger's.

use std::collections::{BTreeMap, HashMap};

use axum::{Json, extract::State};
use gpuledger_api::analytics::{EndpointInference, Inference, TenantInference, Unattributed};
use gpuledger_core::{
    Confidence, Fraction, Period,
    efficiency::{EndpointTime, EndpointUsage, inference_efficiency},
    ids::TenantId,
    ledger::unattributed_work,
};
use uuid::Uuid;

use super::store::{self, UsageRow};
use super::{confidence, internal, month_so_far, rfc3339};
use crate::http::Params;
use crate::{
    auth::Visible,
    db::OrgTx,
    error::AppError,
    http::{Caller, ReadLedger},
    state::AppState,
    store::policy_for,
};

/// Decimal places of GPU-hours in the answer.
const HOURS_SCALE: u32 = 3;

fn decimal(f: &Fraction, scale: u32) -> Result<String, AppError> {
    f.to_decimal_string(scale).map_err(internal)
}

fn opt(f: &Option<Fraction>, scale: u32) -> Result<Option<String>, AppError> {
    f.as_ref().map(|f| decimal(f, scale)).transpose()
}

pub(super) async fn inference(
    State(state): State<AppState>,
    principal: Caller<ReadLedger>,
    Params(q): Params<gpuledger_api::params::InferenceParams>,
) -> Result<Json<Inference>, AppError> {
    let period = q.period.period();
    let department = q.department.map(|d| d.uuid());
    let visible = principal.visible(&state.db).await?;
    if let Some(d) = department
        && !Visible::department(&visible, d)
    {
        return Err(AppError::unknown("department", format!("no department {d} in this organization")));
    }
    let tx = state.db.begin_org(principal.org).await?;
    Ok(Json(answer(tx, period, department, &visible).await?))
}

/// The inference answer for `period` as `visible` may see it (`None`: the whole organization, which the read model
/// stores as the month's summary), cut to `department` when given.
pub(crate) async fn answer(
    mut tx: OrgTx,
    period: Period,
    department: Option<Uuid>,
    visible: &Option<Visible>,
) -> Result<Inference, AppError> {
    let (month, to) = month_so_far(period)?;
    let from = month.start();
    if let Some(d) = department
        && store::department_id(&mut tx, d).await?.is_none()
    {
        return Err(AppError::unknown("department", format!("no department {d} in this organization")));
    }
    let allocations = store::endpoint_allocations(&mut tx, from, to).await?;
    let usage: Vec<UsageRow> = store::tenant_usage(&mut tx, from, month.end()).await?;
    let (unattributed_requests, unattributed_tokens) = store::unattributed_usage(&mut tx, from, month.end()).await?;
    // What the endpoints' model servers counted themselves (the agents' scrapes), for the unattributed remainder.
    let counted = store::endpoint_counts(&mut tx, from, month.end()).await?;
    let names: HashMap<Uuid, (String, Uuid, String)> = store::tenants_with_departments(&mut tx)
        .await?
        .into_iter()
        .map(|t| (t.tenant_id, (t.tenant, t.department_id, t.department)))
        .collect();
    let policy = policy_for(&mut tx, period).await?;
    tx.commit().await?;

    let mut endpoints: BTreeMap<String, EndpointTime> = BTreeMap::new();
    for (endpoint, num, den, start, end, conf) in allocations {
        let (s, e) = (start.max(from), end.map_or(to, |e| e.min(to)));
        if s >= e {
            continue;
        }
        let nanos = (e - s).whole_nanoseconds();
        let gpu_nanos = Fraction::new(
            nanos.checked_mul(i128::from(num)).ok_or_else(|| internal("GPU time overflows"))?,
            i128::from(den),
        )
        .map_err(internal)?;
        let t = endpoints
            .entry(endpoint)
            .or_insert(EndpointTime { gpu_nanos: Fraction::ZERO, confidence: Confidence::Exact });
        t.gpu_nanos = t.gpu_nanos.checked_add(gpu_nanos).map_err(internal)?;
        t.confidence = t.confidence.combine(confidence(&conf)?);
    }
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    let usage: Vec<EndpointUsage> = usage
        .into_iter()
        .map(|(endpoint, model, tenant, r, i, o, ts, tc)| EndpointUsage {
            tenant: TenantId::from_uuid(tenant),
            endpoint,
            model,
            requests: count(r),
            input_tokens: count(i),
            output_tokens: count(o),
            ttft_ms_sum: count(ts),
            ttft_count: count(tc),
        })
        .collect();
    // The remainder (what the servers counted beyond the tenants' usage, per endpoint and model, floored at 0)
    // takes its share of the endpoint's GPU-hours like the ledger's service term: under no tenant (the nil ID),
    // reported with the unattributed figures.
    let counted: Vec<(String, String, [u64; 3])> =
        counted.into_iter().map(|(e, m, r, i, o)| (e, m, [count(r), count(i), count(o)])).collect();
    let remainders: Vec<EndpointUsage> = unattributed_work(
        usage.iter().map(|u| (u.endpoint.as_str(), u.model.as_str(), [u.requests, u.input_tokens, u.output_tokens])),
        counted.iter().map(|(e, m, w)| (e.as_str(), m.as_str(), *w)),
    )
    .into_iter()
    .filter(|(_, (left, _))| left.iter().any(|n| *n > 0))
    .map(|((endpoint, model), (left, _))| EndpointUsage {
        tenant: TenantId::from_uuid(Uuid::nil()),
        endpoint: endpoint.to_owned(),
        model: model.to_owned(),
        requests: left[0],
        input_tokens: left[1],
        output_tokens: left[2],
        ttft_ms_sum: 0,
        ttft_count: 0,
    })
    .collect();
    let (remainder_requests, remainder_tokens) = remainders.iter().fold((0u64, 0u64), |a, u| {
        (a.0.saturating_add(u.requests), a.1.saturating_add(u.input_tokens).saturating_add(u.output_tokens))
    });
    let mut usage = usage;
    usage.extend(remainders);
    let report = inference_efficiency(&endpoints, &usage, |model| {
        policy.as_ref().map_or((Fraction::ONE, Fraction::ONE), |p| p.token_weight(model))
    })
    .map_err(internal)?;

    let mut tenants = Vec::new();
    let mut remainder_hours = Fraction::ZERO;
    for t in &report.tenants {
        let id = t.tenant.as_uuid();
        if id.is_nil() {
            remainder_hours = remainder_hours.checked_add(t.gpu_hours).map_err(internal)?;
            continue;
        }
        let (name, dept_id, dept) = names.get(&id).cloned().unwrap_or_default();
        if !Visible::tenant(visible, Some(id)) || department.is_some_and(|d| d != dept_id) {
            continue;
        }
        let reason = match t.confidence {
            Confidence::Modeled => format!(
                "modeled: {} split {}'s GPU-hours between its tenants by weighted tokens",
                if policy.is_some() { "the approved cost policy's token weights" } else { "equal token weights" },
                t.endpoint
            ),
            _ => format!("{}: some of {}'s allocations are not exact", t.confidence.as_str(), t.endpoint),
        };
        tenants.push(TenantInference {
            tenant_id: id.to_string(),
            tenant_name: name,
            department_id: dept_id.to_string(),
            department: dept,
            endpoint: t.endpoint.clone(),
            models: t.models.clone(),
            requests: t.requests,
            input_tokens: t.input_tokens,
            output_tokens: t.output_tokens,
            share_pct: decimal(&t.share.checked_mul_int(100).map_err(internal)?, 2)?,
            gpu_hours: decimal(&t.gpu_hours, HOURS_SCALE)?,
            tokens_per_gpu_hour: opt(&t.tokens_per_gpu_hour, 0)?,
            output_tokens_per_gpu_hour: opt(&t.output_tokens_per_gpu_hour, 0)?,
            mean_ttft_ms: opt(&t.mean_ttft_ms, 0)?,
            confidence: t.confidence.into(),
            confidence_reason: reason,
        });
    }
    // Endpoint totals include every tenant's work: only for callers who see the whole organization.
    let endpoints = if visible.is_some() || department.is_some() {
        Vec::new()
    } else {
        report
            .endpoints
            .iter()
            .map(|e| {
                Ok(EndpointInference {
                    endpoint: e.endpoint.clone(),
                    gpu_hours: decimal(&e.gpu_hours, HOURS_SCALE)?,
                    requests: e.requests,
                    tokens: e.tokens,
                    tokens_per_gpu_hour: opt(&e.tokens_per_gpu_hour, 0)?,
                    mean_ttft_ms: opt(&e.mean_ttft_ms, 0)?,
                    confidence: e.confidence.into(),
                })
            })
            .collect::<Result<Vec<_>, AppError>>()?
    };
    let whole_org = visible.is_none() && department.is_none();
    let unattributed = if whole_org {
        Some(Unattributed {
            requests: count(unattributed_requests).saturating_add(remainder_requests),
            tokens: count(unattributed_tokens).saturating_add(remainder_tokens),
            gpu_hours: decimal(&remainder_hours, HOURS_SCALE)?,
        })
    } else {
        None
    };
    Ok(Inference {
        period: period.to_string(),
        from: rfc3339(from)?,
        to: rfc3339(to)?,
        basis: "analytics only: GPU-hours attributed by weighted tokens, never billed from here".into(),
        endpoints,
        tenants,
        unattributed,
    })
}
