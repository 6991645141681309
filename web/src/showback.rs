//! Showback (the department manager's home) and the tenant drill-down to the evidence.

use std::collections::BTreeMap;

use crate::ui::Awaited;
use gpuledger_api::{
    analytics::{EndpointInference, SessionRow, Sessions, TenantInference, TenantUtilization, Unattributed},
    close::{Evidence, EvidenceAllocation, PeriodEntry, Periods},
    foresight::{Forecast, ForecastRow, IdleList, IdleReservation},
    ledger::{LedgerLine, Months, Summaries},
    params::{MonthParams, MonthsParams, OptionalMonthParams, SessionsParams},
    states::{Confidence as ConfidenceLevel, PeriodState},
    training::TrainingWorkload,
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{
    components::Redirect,
    hooks::{use_params_map, use_query_map},
};

use crate::{
    data::{PortalError, SessionView},
    reads::{Read, month_ledger, param, read, tenant_evidence},
    ui::{
        BarChart, CHART_FONT_PX, Confidence, TrendChart, clipped, error_panel, grouped, hours, months_back, q,
        readable_time, session, set_status, sum_decimals, when,
    },
};

/// The month to show: `?period=`, else the latest closed month, else the newest month with data.
async fn default_period(asked: Option<String>) -> Result<(String, Vec<PeriodEntry>), PortalError> {
    let items = read::<Periods>(Read::Periods()).await?.items;
    let chosen = asked.filter(|p| !p.is_empty()).or_else(|| {
        items.iter().find(|p| p.state == PeriodState::Closed).or_else(|| items.first()).map(|p| p.period.clone())
    });
    let now = crate::ui::now();
    let current = format!("{:04}-{:02}", now.year(), u8::from(now.month()));
    Ok((chosen.unwrap_or(current), items))
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Showback {
    period: String,
    periods: Vec<String>,
    department: Option<String>,
    departments: Vec<String>,
    state: String,
    hash: Option<String>,
    currency: String,
    total: String,
    lines: Vec<LedgerLine>,
    by_term: Vec<(String, String)>,
    by_tenant: Vec<(String, String, String, ConfidenceLevel)>,
    by_class: Vec<(String, String)>,
    trend: Vec<(String, String)>,
    utilization: Vec<TenantUtilization>,
    inference: Vec<TenantInference>,
    endpoints: Vec<EndpointInference>,
    /// Work no tenant's usage accounts for (organization-wide views only).
    unattributed: Option<Unattributed>,
    training: Vec<TrainingWorkload>,
    not_exact: usize,
    notice: Option<String>,
    /// When the figures were computed (the read model's `as_of`), as people read it.
    as_of: Option<String>,
    /// The open month's snapshot, not final figures.
    provisional: bool,
    /// Older than the staleness bound while changes wait.
    stale: bool,
    /// Why the figures could not be brought up to date (the last good ones are shown).
    refresh_failure: Option<gpuledger_api::ledger::RefreshFailure>,
    /// The utilization, inference and training summaries do not go with these figures yet.
    summaries_pending: bool,
    /// The open month's month-end forecast per department (in scope), with budgets.
    forecast: Vec<ForecastRow>,
    /// The forecast's currency (the policy's).
    forecast_currency: String,
    /// Idle reservations now (in scope; only on the current month's page).
    idle: Vec<IdleReservation>,
}

async fn load_showback(
    period: Option<String>,
    department: Option<String>,
    s_: &SessionView,
) -> Result<Showback, PortalError> {
    let (period, items) = default_period(period).await?;
    // A month no approved policy prices yet has no charges: say so, rather than fail the page.
    let (ledger, notice) = match month_ledger(&period, None, 10_000).await {
        Ok(v) => (Some(v), None),
        Err(e) if e.message.contains("no approved cost policy") => (None, Some(e.message)),
        Err(e) => return Err(e),
    };
    let all: &[LedgerLine] = ledger.as_ref().map_or(&[], |l| l.lines.as_slice());
    let mut departments: Vec<String> = all.iter().map(|l| l.department.clone()).collect();
    if let Some(mine) = &s_.departments {
        departments.extend(mine.iter().cloned());
    }
    departments.sort();
    departments.dedup();
    // Managers default to their (first) department; organization-wide roles to everything.
    let department =
        department.filter(|d| !d.is_empty()).or_else(|| s_.departments.as_ref().and_then(|d| d.first().cloned()));
    // One read of the month: the department is cut here (the API already cut what the caller may not see).
    let lines: Vec<LedgerLine> =
        all.iter().filter(|l| department.as_ref().is_none_or(|d| l.department == *d)).cloned().collect();
    let currency = ledger.as_ref().and_then(|l| l.currency.clone()).unwrap_or_default();
    let exact_sum = |amounts: Vec<String>| {
        if amounts.is_empty() { "0.00".to_string() } else { sum_decimals(amounts.iter().map(String::as_str)) }
    };
    let mut terms: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in &lines {
        terms.entry(l.term.as_str().to_string()).or_default().push(l.amount.clone());
    }
    let by_term: Vec<(String, String)> = terms.into_iter().map(|(k, v)| (k, exact_sum(v))).collect();
    let total = exact_sum(lines.iter().map(|l| l.amount.clone()).collect());
    let mut tenants: BTreeMap<(String, String), (Vec<String>, ConfidenceLevel)> = BTreeMap::new();
    let mut classes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let rank = |c: ConfidenceLevel| match c {
        ConfidenceLevel::Estimated => 2,
        ConfidenceLevel::Modeled => 1,
        ConfidenceLevel::Exact => 0,
    };
    for l in &lines {
        let key = (l.tenant.clone(), l.tenant_id.clone().unwrap_or_default());
        let e = tenants.entry(key).or_insert((Vec::new(), ConfidenceLevel::Exact));
        e.0.push(l.amount.clone());
        if rank(l.confidence) > rank(e.1) {
            e.1 = l.confidence;
        }
        if !l.gpu_class.is_empty() {
            classes.entry(l.gpu_class.clone()).or_default().push(l.amount.clone());
        }
    }
    let by_tenant = tenants
        .into_iter()
        .map(|((name, id), (amounts, conf))| (name, id, sum_decimals(amounts.iter().map(String::as_str)), conf))
        .collect();
    let by_class = classes.into_iter().map(|(k, v)| (k, sum_decimals(v.iter().map(String::as_str)))).collect();
    // The trend: one read of the stored month totals; a month without figures says "no data", never 0.00.
    let back = months_back(&period, 6);
    let stored = match (back.first(), back.last()) {
        (Some(first), Some(last)) => {
            let months = async {
                let params = MonthsParams {
                    from: param("from", first)?,
                    to: param("to", last)?,
                    department: department.as_deref().map(|d| param("department", d)).transpose()?,
                };
                read::<Months>(Read::Months(params)).await
            };
            months.await.map(|m| m.months).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let mut trend = Vec::new();
    for month in back {
        if month == period {
            trend.push((month, total.clone()));
            continue;
        }
        let total = stored.iter().find(|m| m.period == month).and_then(|m| m.total.clone()).unwrap_or_default();
        trend.push((month, if total.is_empty() { "no data".into() } else { total }));
    }
    // The month's utilization, inference and training figures: stored summaries (computed once per month figures
    // by the server's worker, never on this read), cut to what the caller may see.
    let summaries = match param("period", &period) {
        Ok(period) => read::<Summaries>(Read::Summaries(MonthParams { period })).await.ok(),
        Err(_) => None,
    };
    let in_department = |d: Option<&String>| department.as_ref().is_none_or(|want| d.is_none_or(|d| d == want));
    let utilization: Vec<TenantUtilization> = summaries
        .as_ref()
        .and_then(|s| s.utilization.as_ref())
        .map(|u| u.tenants.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|t| {
            // Utilization rows name tenants only: keep those of the department's lines.
            department.is_none()
                || lines.iter().any(|l| l.tenant_id.as_deref().unwrap_or("") == t.tenant_id.as_deref().unwrap_or(""))
        })
        .cloned()
        .collect();
    let inference = summaries.as_ref().and_then(|s| s.inference.as_ref()).map(|i| &i.inference);
    let inference_rows: Vec<TenantInference> = inference
        .map(|i| i.tenants.iter().filter(|t| in_department(Some(&t.department))).cloned().collect())
        .unwrap_or_default();
    // Endpoint totals include every department's work: shown on the organization-wide view only.
    let endpoints = match (inference, &department) {
        (Some(i), None) => i.endpoints.clone(),
        _ => Vec::new(),
    };
    let unattributed = if department.is_none() { inference.and_then(|i| i.unattributed.clone()) } else { None };
    let training: Vec<TrainingWorkload> = summaries
        .as_ref()
        .and_then(|s| s.training.as_ref())
        .map(|t| t.training.workloads.iter().filter(|w| in_department(w.department.as_ref())).cloned().collect())
        .unwrap_or_default();
    let summaries_pending = summaries.as_ref().is_none_or(|s| s.pending);
    // The open month looks ahead: month-end forecast against budgets, and what is idle right now.
    let now = crate::ui::now();
    let current = format!("{:04}-{:02}", now.year(), u8::from(now.month()));
    let (forecast, forecast_currency, idle) = if period == current {
        let forecast = async {
            read::<Forecast>(Read::Forecast(OptionalMonthParams { period: Some(param("period", &period)?) })).await
        };
        let (rows, currency) = forecast.await.map(|f| (f.departments, f.currency)).unwrap_or_default();
        let forecast = rows.into_iter().filter(|r| department.as_ref().is_none_or(|d| r.department == *d)).collect();
        let idle = read::<IdleList>(Read::Idle())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|i| department.as_ref().is_none_or(|d| i.department.as_ref() == Some(d)))
            .collect();
        (forecast, currency, idle)
    } else {
        (Vec::new(), String::new(), Vec::new())
    };
    let not_exact = lines.iter().filter(|l| l.confidence != ConfidenceLevel::Exact).count();
    Ok(Showback {
        periods: items.iter().map(|p| p.period.clone()).collect(),
        period,
        department,
        departments,
        state: ledger.as_ref().map(|l| l.state.as_str().to_string()).unwrap_or_default(),
        hash: ledger.as_ref().and_then(|l| l.hash.clone()),
        currency,
        total,
        lines,
        by_term,
        by_tenant,
        by_class,
        trend,
        utilization,
        inference: inference_rows,
        endpoints,
        unattributed,
        training,
        not_exact,
        notice,
        as_of: ledger.as_ref().and_then(|l| readable_time(&l.as_of)),
        provisional: ledger.as_ref().is_some_and(|l| l.provisional),
        stale: ledger.as_ref().is_some_and(|l| l.stale),
        refresh_failure: ledger.as_ref().and_then(|l| l.refresh_failure.clone()),
        summaries_pending,
        forecast,
        forecast_currency,
        idle,
    })
}

/// `/departments`: showback for a month and a department.
#[component]
pub fn ShowbackPage() -> impl IntoView {
    let query = use_query_map();
    let (period, department) = query.with_untracked(|m| (m.get("period"), m.get("department")));
    let data = async move {
        match session().await {
            None => Err(None),
            Some(s_) => load_showback(period, department, &s_).await.map_err(Some),
        }
    };
    view! {
        <Title text="Showback — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(None) => view! { <Redirect path="/login?next=/departments" /> }.into_any(),
                Err(Some(e)) => error_panel(&e),
                Ok(sb) => view! { <ShowbackView sb /> }.into_any(),
            }}
        </Awaited>
    }
}

#[component]
fn ShowbackView(sb: Showback) -> impl IntoView {
    let cur = sb.currency.clone();
    let scope = sb.department.clone().unwrap_or_else(|| "All departments".into());
    let tenant_names: Vec<String> = sb.by_tenant.iter().map(|t| t.0.clone()).collect();
    let util: Vec<TenantUtilization> = sb
        .utilization
        .iter()
        .filter(|u| tenant_names.contains(&u.tenant_name.clone().unwrap_or_default()))
        .cloned()
        .collect();
    let period = sb.period.clone();
    view! {
        <section class="panel">
            <h1>"Showback"</h1>
            <form method="get" action="/departments" class="filters">
                <label>"Month "
                    <select name="period">
                        {sb.periods.iter().map(|p| view! {
                            <option value=p.clone() selected=*p == sb.period>{p.clone()}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label>"Department "
                    <select name="department">
                        {sb.departments.iter().map(|d| view! {
                            <option value=d.clone() selected=Some(d) == sb.department.as_ref()>{d.clone()}</option>
                        }).collect_view()}
                    </select>
                </label>
                <button type="submit">"Show"</button>
            </form>
            <p class="total" id="showback-total">
                <span class="muted">{scope} " · " {sb.period.clone()} " · " {sb.state.clone()}</span>
                <strong>{format!("{} {}", grouped(&sb.total), cur)}</strong>
            </p>
            {sb.as_of.clone().map(|t| {
                let what = if sb.provisional {
                    "Provisional figures (the month is open) as of "
                } else {
                    "Closed figures as of "
                };
                let stale = (sb.stale && sb.refresh_failure.is_none())
                    .then_some(" — changes since then are being included; this page will show them shortly");
                // `as_of` is already as people read it (`2026-12-01 14:05 UTC`); the element keeps it for machines too.
                let datetime = t.strip_suffix(" UTC").map(|x| format!("{}Z", x.replacen(' ', "T", 1))).unwrap_or_default();
                view! { <p class="muted as-of" id="as-of">{what}<time datetime=datetime>{t}</time>{stale}</p> }
            })}
            {sb.refresh_failure.clone().map(|f| view! {
                <div class="notice warning" id="refresh-failure" role="alert">
                    <p><strong>"These figures could not be brought up to date"</strong>
                        {format!(" (since {}, {} attempt{}): ", readable_time(&f.since).unwrap_or(f.since.clone()),
                            f.attempts, if f.attempts == 1 { "" } else { "s" })}
                        {format!("{}: {}", f.field, f.reason)}</p>
                    <p class="muted">{f.fix}</p>
                </div>
            })}
            {sb.summaries_pending.then(|| view! {
                <p class="muted" id="summaries-pending">
                    "Utilization, inference and training figures for these figures are being computed; \
                     they appear here within a minute."
                </p>
            })}
            {sb.hash.clone().map(|h| view! { <p class="muted">"Closed; close hash " <code>{h}</code></p> })}
            {sb.notice.clone().map(|n| view! { <p class="notice">{n}</p> })}
            {(sb.not_exact > 0).then(|| view! {
                <p class="notice">{format!("{} line(s) are not exact: look for the marks below.", sb.not_exact)}</p>
            })}
        </section>
        {(!sb.forecast.is_empty()).then(|| view! { <crate::foresight::ForecastPanel rows=sb.forecast.clone() unit=sb.forecast_currency.clone() /> })}
        {if sb.lines.is_empty() {
            view! { <section class="panel empty"><p>"No charges for this month and department."</p></section> }.into_any()
        } else {
            view! {
                <section class="panel grid">
                    <div>
                        <h2>"By term"</h2>
                        <BarChart title="Charges by term".into() rows=sb.by_term.clone() unit=cur.clone() />
                        <table><tbody>{sb.by_term.iter().map(|(t, a)| view! {
                            <tr><th scope="row">{t.clone()}</th><td class="num">{grouped(a)}</td></tr>
                        }).collect_view()}</tbody></table>
                    </div>
                    <div>
                        <h2>"By GPU class"</h2>
                        <BarChart title="Charges by GPU class".into() rows=sb.by_class.clone() unit=cur.clone() />
                    </div>
                </section>
                <section class="panel">
                    <h2>"By tenant"</h2>
                    <table class="tenants">
                        <thead><tr><th>"Tenant"</th><th class="num">"Charged"</th><th>"Confidence"</th></tr></thead>
                        <tbody>{sb.by_tenant.iter().map(|(name, id, amount, conf)| {
                            let href = format!("/tenants/{id}?period={}", period);
                            view! {
                                <tr>
                                    <td class="tenant">{if id.is_empty() {
                                        view! { <span>{name.clone()}</span> }.into_any()
                                    } else {
                                        view! { <a href=href>{name.clone()}</a> }.into_any()
                                    }}</td>
                                    <td class="num">{format!("{} {}", grouped(amount), cur)}</td>
                                    <td><Confidence level=*conf /></td>
                                </tr>
                            }
                        }).collect_view()}</tbody>
                    </table>
                </section>
            }.into_any()
        }}
        <section class="panel">
            <h2>"Trend, last 6 months"</h2>
            <TrendChart title="Monthly charges".into() points=sb.trend.clone() unit=cur.clone() />
            <table class="trend"><tbody>{sb.trend.iter().map(|(m, t)| view! {
                <tr><th scope="row">{m.clone()}</th><td class="num">{grouped(t)}</td></tr>
            }).collect_view()}</tbody></table>
        </section>
        <section class="panel">
            <h2>"Allocated vs. active GPU-hours, idle reservations"</h2>
            <p class="muted">"Analytics only: utilization is never billed. Idle = held while the GPU did (almost) nothing."</p>
            {if util.is_empty() {
                view! { <p class="empty">"No utilization data for these tenants this month."</p> }.into_any()
            } else {
                view! {
                    <table class="utilization">
                        <thead><tr><th>"Tenant"</th><th class="num">"Allocated GPU-h"</th><th class="num">"Active-equivalent GPU-h"</th><th class="num">"Idle GPU-h"</th><th>"Confidence"</th></tr></thead>
                        <tbody>{util.iter().map(|u| view! {
                            <tr>
                                <td>{u.tenant_name.clone().unwrap_or_default()}</td>
                                <td class="num">{hours(&u.allocated_gpu_hours)}</td>
                                {if no_telemetry(u) {
                                    view! { <td class="muted" colspan="2" title="No utilization samples for these allocations: MIG instances, vGPUs and passthrough GPUs have no per-instance telemetry here, or no node agent reports this node. Not zero: unknown.">"no telemetry"</td> }.into_any()
                                } else {
                                    view! {
                                        <td class="num">{hours(&u.active_equivalent_gpu_hours)}</td>
                                        <td class="num">{hours(&u.idle_gpu_hours)}</td>
                                    }.into_any()
                                }}
                                <td><Confidence level=u.confidence /></td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
        {(!sb.forecast.is_empty() || !sb.idle.is_empty()).then(|| view! { <crate::foresight::IdlePanel items=sb.idle.clone() /> })}
        <InferencePanel tenants=sb.inference.clone() endpoints=sb.endpoints.clone() unattributed=sb.unattributed.clone() />
        <section class="panel" id="training">
            <h2>"Training progress"</h2>
            <p class="muted">"Analytics only: the steps and samples jobs reported this month over the GPU-hours of their pods."</p>
            {if sb.training.is_empty() {
                view! { <p class="empty">"No training progress reported this month."</p> }.into_any()
            } else {
                let count_or_dash = |v: Option<i64>| v.map_or_else(|| "—".to_string(), |n| grouped(&n.to_string()));
                let or_dash = |v: &Option<String>| v.as_deref().map_or_else(|| "—".to_string(), grouped);
                view! {
                    <table class="training">
                        <thead><tr><th>"Tenant"</th><th>"Workload"</th><th class="num">"GPU-h"</th><th class="num">"Steps"</th><th class="num">"Steps per GPU-h"</th><th class="num">"Samples"</th><th class="num">"Samples per GPU-h"</th></tr></thead>
                        <tbody>{sb.training.iter().map(|w| view! {
                            <tr>
                                <td>{w.tenant.clone().unwrap_or_default()}</td>
                                <td>{format!("{}/{}", w.namespace, w.workload)}</td>
                                <td class="num">{hours(&w.gpu_hours)}</td>
                                <td class="num">{count_or_dash(w.steps)}</td>
                                <td class="num">{or_dash(&w.steps_per_gpu_hour)}</td>
                                <td class="num">{count_or_dash(w.samples)}</td>
                                <td class="num">{or_dash(&w.samples_per_gpu_hour)}</td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

/// Milliseconds, or "—" where the model server did not report time to first token.
fn ms(v: &Option<String>) -> String {
    match v {
        Some(x) => format!("{} ms", grouped(x)),
        None => "—".into(),
    }
}

/// Inference efficiency of shared endpoints: work, attributed GPU-hours, tokens per GPU-hour, time to first token.
#[component]
fn InferencePanel(
    tenants: Vec<TenantInference>,
    endpoints: Vec<EndpointInference>,
    unattributed: Option<Unattributed>,
) -> impl IntoView {
    let count = |n: u64| grouped(&n.to_string());
    let unattributed = unattributed.filter(|u| u.requests > 0 || u.tokens > 0);
    let or_dash = |v: &Option<String>| v.as_deref().map_or_else(|| "—".to_string(), grouped);
    view! {
        <section class="panel" id="inference">
            <h2>"Inference efficiency (shared endpoints)"</h2>
            <p class="muted">"Analytics only. An endpoint's GPU-hours are split between its tenants by weighted tokens, as the service charge is; TTFT = mean time to first token."</p>
            {if tenants.is_empty() {
                view! { <p class="empty">"No inference tenants on shared endpoints this month."</p> }.into_any()
            } else {
                view! {
                    <table class="inference">
                        <thead><tr><th>"Tenant"</th><th>"Endpoint"</th><th class="num">"Requests"</th><th class="num">"Tokens in / out"</th><th class="num">"GPU-h"</th><th class="num">"Tokens per GPU-h"</th><th class="num">"Mean TTFT"</th><th>"Confidence"</th></tr></thead>
                        <tbody>{tenants.iter().map(|t| view! {
                            <tr>
                                <td>{t.tenant_name.clone()}</td>
                                <td>{t.endpoint.clone()}</td>
                                <td class="num">{count(t.requests)}</td>
                                <td class="num">{format!("{} / {}", count(t.input_tokens), count(t.output_tokens))}</td>
                                <td class="num">{hours(&t.gpu_hours)}</td>
                                <td class="num">{or_dash(&t.tokens_per_gpu_hour)}</td>
                                <td class="num">{ms(&t.mean_ttft_ms)}</td>
                                <td><Confidence level=t.confidence reason=t.confidence_reason.clone() /></td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
            {(!endpoints.is_empty()).then(|| view! {
                <table class="endpoints">
                    <caption>"Endpoints"</caption>
                    <thead><tr><th>"Endpoint"</th><th class="num">"GPU-h"</th><th class="num">"Requests"</th><th class="num">"Tokens"</th><th class="num">"Tokens per GPU-h"</th><th class="num">"Mean TTFT"</th><th>"Confidence"</th></tr></thead>
                    <tbody>{endpoints.iter().map(|e| view! {
                        <tr>
                            <td>{e.endpoint.clone()}</td>
                            <td class="num">{hours(&e.gpu_hours)}</td>
                            <td class="num">{count(e.requests)}</td>
                            <td class="num">{count(e.tokens)}</td>
                            <td class="num">{or_dash(&e.tokens_per_gpu_hour)}</td>
                            <td class="num">{ms(&e.mean_ttft_ms)}</td>
                            <td><Confidence level=e.confidence /></td>
                        </tr>
                    }).collect_view()}</tbody>
                </table>
            })}
            {unattributed.map(|u| view! {
                <p class="unattributed">
                    {format!("Unattributed: {} requests, {} tokens, ", count(u.requests), count(u.tokens))}
                    {hours(&u.gpu_hours)}
                    " GPU-h — work the endpoints counted that no tenant's usage accounts for; its share of the endpoints' cost is in the overhead pool."
                </p>
            })}
        </section>
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct TenantView {
    tenant_id: String,
    tenant: String,
    period: String,
    currency: String,
    total: String,
    state: String,
    lines: Vec<LedgerLine>,
    /// `None` when there are no lines to show evidence of.
    evidence: Option<Evidence>,
    class: String,
    sort: String,
    can_dispute: bool,
    csrf: String,
    sessions: Vec<SessionRow>,
}

/// `/tenants/:id`: a tenant's lines with their explanations, and the allocations behind them.
#[component]
pub fn TenantPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let id = params.with_untracked(|p| p.get("id")).unwrap_or_default();
    let (period, page, class, sort) =
        query.with_untracked(|m| (m.get("period"), m.get("page"), m.get("class"), m.get("sort")));
    let data = async move {
        let Some(session) = session().await else { return Err(None) };
        let (period, _) = default_period(period).await.map_err(Some)?;
        let ledger = month_ledger(&period, Some(&id), 10_000).await.map_err(Some)?;
        let lines = ledger.lines.clone();
        if lines.is_empty() {
            // Not visible (another organization's or department's) or no charges this month: one answer, which
            // names nothing (the page's data is serialized into it).
            set_status(404);
            return Err(Some(PortalError {
                message: format!("Nothing to show: no charges you can see for this tenant in {period}."),
            }));
        }
        let page = page.and_then(|p| p.parse::<u32>().ok()).unwrap_or(1).max(1);
        let class = class.unwrap_or_default();
        let sort = sort.filter(|s| !s.is_empty()).unwrap_or_else(|| "start".into());
        let evidence = if lines.is_empty() {
            None
        } else {
            Some(tenant_evidence(&period, &id, &class, &sort, page).await.map_err(Some)?)
        };
        // Agent sessions are analytics: a failure leaves the table out rather than the page.
        let sessions = async {
            let params = SessionsParams { period: param("period", &period)?, tenant: param("tenant", &id)? };
            read::<Sessions>(Read::Sessions(params)).await
        };
        let sessions = sessions.await.map(|v| v.sessions).unwrap_or_default();
        let can_dispute = session.roles.iter().any(|r| r == "department_manager" || r == "finance" || r == "admin")
            && ledger.state == PeriodState::Closed;
        Ok(TenantView {
            tenant: lines.first().map(|l| l.tenant.clone()).unwrap_or_default(),
            tenant_id: id,
            period,
            currency: ledger.currency.clone().unwrap_or_default(),
            total: ledger.total.clone(),
            state: ledger.state.as_str().to_string(),
            lines,
            evidence,
            class,
            sort,
            can_dispute,
            csrf: session.csrf.clone(),
            sessions,
        })
    };
    view! {
        <Title text="Tenant — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(None) => view! { <Redirect path="/login" /> }.into_any(),
                Err(Some(e)) => error_panel(&e),
                Ok(t) if t.lines.is_empty() => view! {
                    <section class="panel empty"><h1>"Nothing to show"</h1>
                    <p>"This tenant has no charges you can see for " {t.period.clone()} ". " <a href="/departments">"Back to showback"</a></p></section>
                }.into_any(),
                Ok(t) => view! { <TenantDetail t /> }.into_any(),
            }}
        </Awaited>
    }
}

#[component]
fn TenantDetail(t: TenantView) -> impl IntoView {
    let base = format!("/tenants/{}?period={}", t.tenant_id, t.period);
    let total_rows = t.evidence.as_ref().map_or(0, |e| e.total);
    let page = t.evidence.as_ref().map_or(1, |e| e.page);
    let per_page = t.evidence.as_ref().map_or(25, |e| e.per_page).max(1);
    let pages = total_rows.div_ceil(per_page).max(1);
    let allocations: Vec<EvidenceAllocation> = t.evidence.as_ref().map(|e| e.allocations.clone()).unwrap_or_default();
    let nav = |p: usize| format!("{base}&page={p}&class={}&sort={}", q(&t.class), q(&t.sort));
    let sort_link = |key: &str| {
        let next = if t.sort == key { format!("-{key}") } else { key.to_string() };
        format!("{base}&class={}&sort={}", q(&t.class), q(&next))
    };
    let devices = timeline(&allocations);
    view! {
        <section class="panel">
            <p><a href=format!("/departments?period={}", t.period)>"← Showback"</a></p>
            <h1>{t.tenant.clone()}</h1>
            <p class="total"><span class="muted">{t.period.clone()} " · " {t.state.clone()}</span>
               <strong>{format!("{} {}", grouped(&t.total), t.currency)}</strong></p>
        </section>
        <section class="panel">
            <h2>"Ledger lines"</h2>
            <form method="post" action="/ui/disputes" id="dispute-form">
                <input type="hidden" name="csrf" value=t.csrf.clone() />
                <input type="hidden" name="period" value=t.period.clone() />
                <table class="lines">
                    <thead><tr>{t.can_dispute.then(|| view! { <th>"Dispute"</th> })}<th>"Term"</th><th>"Class"</th><th class="num">"Amount"</th><th>"Confidence"</th><th>"Explanation"</th></tr></thead>
                    <tbody>{t.lines.iter().map(|l| {
                        let id = l.line_id.clone();
                        view! {
                            <tr>
                                {t.can_dispute.then(|| view! {
                                    <td><input type="checkbox" name="line" value=id.clone() aria-label=format!("dispute {id}") /></td>
                                })}
                                <td>{l.term.as_str()}</td>
                                <td>{l.gpu_class.clone()}</td>
                                <td class="num">{grouped(&l.amount)}</td>
                                <td><Confidence level=l.confidence /></td>
                                <td class="explanation">{l.explanation.clone()}<br /><small class="muted">{id.clone()}</small></td>
                            </tr>
                        }
                    }).collect_view()}</tbody>
                </table>
                {t.can_dispute.then(|| view! {
                    <label>"Why are these lines wrong? "<textarea name="reason" required=true rows="3"></textarea></label>
                    <button type="submit">"Open a dispute on the selected lines"</button>
                })}
            </form>
        </section>
        <section class="panel">
            <h2>"Evidence: the allocations behind these lines"</h2>
            <form method="get" action=format!("/tenants/{}", t.tenant_id) class="filters">
                <input type="hidden" name="period" value=t.period.clone() />
                <label>"GPU class " <input name="class" value=t.class.clone() /></label>
                <button type="submit">"Filter"</button>
            </form>
            <p class="muted">{format!("{total_rows} allocation(s); page {page} of {pages}")}</p>
            <table class="evidence">
                <thead><tr>
                    <th>"Workload"</th><th>"Namespace"</th><th>"Node"</th><th>"Devices"</th>
                    <th><a href=sort_link("start")>"Start"</a></th><th><a href=sort_link("end")>"End"</a></th>
                    <th class="num"><a href=sort_link("fraction")>"GPUs"</a></th><th>"Confidence"</th>
                </tr></thead>
                <tbody>{allocations.iter().map(|a| {
                    let (holder_kind, holder, cluster, namespace, node, devices, profile) = match &a.detail {
                        Some(d) => (
                            d.holder_kind.clone(),
                            d.holder.clone(),
                            d.cluster.clone(),
                            d.namespace.clone(),
                            d.node.clone().unwrap_or_default(),
                            d.device_ids.join(", "),
                            d.profile.clone().unwrap_or_default(),
                        ),
                        None => Default::default(),
                    };
                    view! {
                        <tr>
                            <td>{format!("{holder_kind} {holder}")}<br /><small class="muted">{cluster}</small></td>
                            <td>{namespace}</td>
                            <td>{node}</td>
                            <td><small>{devices}</small>{(!profile.is_empty()).then(|| view! { <br /><small>{profile.clone()}</small> })}</td>
                            <td>{when(&a.start)}</td>
                            <td>{match &a.end { None => view! { "running" }.into_any(), Some(e) => when(e) }}</td>
                            <td class="num">{a.fraction.clone()}</td>
                            <td><Confidence level=a.confidence /></td>
                        </tr>
                    }
                }).collect_view()}</tbody>
            </table>
            <nav class="pager" aria-label="Evidence pages">
                {(page > 1).then(|| view! { <a href=nav(page - 1) rel="prev">"← Previous"</a> })}
                {(page < pages).then(|| view! { <a href=nav(page + 1) rel="next">"Next →"</a> })}
            </nav>
            <h3>"Timeline per device (this page)"</h3>
            {devices}
        </section>
        <section class="panel" id="sessions">
            <h2>"AI-agent sessions"</h2>
            <p class="muted">"Work and GPU time per agent session (from gateway records and session-labelled pods); the cost is modeled from this tenant's service and GPU lines of the month."</p>
            {if t.sessions.is_empty() {
                view! { <p class="empty">"No agent sessions this month."</p> }.into_any()
            } else {
                let count = |n: u64| grouped(&n.to_string());
                view! {
                    <table class="sessions">
                        <thead><tr><th>"Session"</th><th class="num">"Requests"</th><th class="num">"Tokens in / out"</th><th class="num">"Mean TTFT"</th><th class="num">"GPU-h"</th><th class="num">"Cost"</th><th>"Confidence"</th></tr></thead>
                        <tbody>{t.sessions.iter().map(|x| view! {
                            <tr>
                                <td><code>{x.session.clone()}</code></td>
                                <td class="num">{count(x.requests)}</td>
                                <td class="num">{format!("{} / {}", count(x.input_tokens), count(x.output_tokens))}</td>
                                <td class="num">{ms(&x.mean_ttft_ms)}</td>
                                <td class="num">{hours(&x.gpu_hours)}</td>
                                <td class="num">{x.cost.as_deref().map_or_else(|| "—".to_string(), |c| format!("{} {}", grouped(c), t.currency))}</td>
                                <td><Confidence level=x.confidence reason="Modeled: the tenant's service line is shared by weighted tokens and its GPU lines by GPU-hours at their average rate; energy, overhead and credits are not apportioned.".to_string() /></td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

/// A small SVG timeline: one row per device, one bar per allocation on this page.
fn timeline(allocations: &[EvidenceAllocation]) -> AnyView {
    let parse = |t: &str| time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok();
    let mut rows: BTreeMap<String, Vec<(time::OffsetDateTime, time::OffsetDateTime, String)>> = BTreeMap::new();
    let now = crate::ui::now();
    for a in allocations {
        let Some(start) = parse(&a.start) else { continue };
        let end = a.end.as_deref().and_then(parse).unwrap_or(now);
        let label = a.detail.as_ref().map(|d| format!("{} {}", d.holder_kind, d.holder)).unwrap_or_else(|| " ".into());
        let devices = a.devices.clone();
        for d in if devices.is_empty() { vec!["(no device)".to_string()] } else { devices } {
            rows.entry(d).or_default().push((start, end, label.clone()));
        }
    }
    if rows.is_empty() {
        return view! { <p class="empty">"No allocations on this page."</p> }.into_any();
    }
    let min = rows.values().flatten().map(|r| r.0).min().unwrap_or(now);
    let max = rows.values().flatten().map(|r| r.1).max().unwrap_or(now);
    let span = ((max - min).whole_seconds().max(1)) as f64;
    let height = rows.len() * 24 + 10;
    let readable = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .ok()
            .and_then(|x| readable_time(&x))
            .unwrap_or_default()
    };
    view! {
        // Drawn at its own size (one user unit = one CSS pixel); it only shrinks on narrower screens.
        <svg class="chart timeline" role="img" aria-label="Allocations over time per device"
             viewBox=format!("0 0 800 {height}") width="800" height=height font-size=CHART_FONT_PX
             preserveAspectRatio="xMinYMin meet" focusable="false">
            <title>"Allocations over time per device"</title>
            {rows.into_iter().enumerate().map(|(i, (device, bars))| {
                let y = 5 + i * 24;
                // Device IDs differ at their end: a long one keeps its last characters, the full ID in its title.
                let short = clipped(&device, 22).map(|_| {
                    let tail: Vec<char> = device.chars().rev().take(21).collect();
                    format!("…{}", tail.into_iter().rev().collect::<String>())
                });
                view! {
                    <g>
                        <text x="0" y=y + 15 class="label"><title>{device.clone()}</title>{short.unwrap_or_else(|| device.clone())}</text>
                        {bars.into_iter().map(|(a, b, label)| {
                            let x = 200.0 + (a - min).whole_seconds() as f64 / span * 590.0;
                            let w = ((b - a).whole_seconds() as f64 / span * 590.0).max(2.0);
                            let title = format!("{label}: {} – {}", readable(a), readable(b));
                            view! { <rect x=format!("{x:.1}") y=y width=format!("{w:.1}") height="18" class="bar"><title>{title}</title></rect> }
                        }).collect_view()}
                    </g>
                }
            }).collect_view()}
        </svg>
    }
    .into_any()
}

/// A tenant row with GPU-hours held but none observed: its active and idle hours are unknown, not zero.
fn no_telemetry(u: &TenantUtilization) -> bool {
    let zero = |s: &str| s.trim().chars().all(|c| c == '0' || c == '.');
    zero(&u.observed_gpu_hours) && !zero(&u.allocated_gpu_hours)
}
