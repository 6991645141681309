//! Seeing ahead in the portal: the open month's forecast bars and the idle list (shown on showback), and
//! `/admin/notifications`: idle reservations across the organization, the month's budgets, and each webhook with
//! its delivery log (what was sent, when, how many tries, the receiver's last answer).

use gpuledger_api::{
    Items,
    foresight::{Budgets, Delivery, ForecastRow, IdleList, IdleReservation, Webhook},
    params::{IdPath, OptionalMonthParams},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Redirect;

use crate::{
    data::PortalError,
    reads::{Read, param, read},
    ui::{Awaited, error_panel, forbidden, grouped, hours, readable_time, session},
};

/// Width of a forecast bar's drawing.
const FORECAST_WIDTH: f64 = 480.0;

/// To date, forecast and budget of one department as one bar: the solid part is what the month has cost so far,
/// the light part what the forecast adds by the month's end, the mark the budget.
#[component]
fn ForecastBar(row: ForecastRow, unit: String) -> impl IntoView {
    let to_date = crate::ui::approx(&row.to_date).max(0.0);
    let forecast = crate::ui::approx(&row.forecast).max(to_date);
    let budget = row.budget.as_deref().map(crate::ui::approx);
    let max = forecast.max(budget.unwrap_or(0.0)).max(f64::MIN_POSITIVE) * 1.05;
    let x = |v: f64| v / max * FORECAST_WIDTH;
    let said = format!(
        "{}: {} {unit} to date, {} {unit} forecast for the month's end{}",
        row.department,
        grouped(&row.to_date),
        grouped(&row.forecast),
        row.budget.as_deref().map(|b| format!(", budget {} {unit}", grouped(b))).unwrap_or_default()
    );
    let label = said.clone();
    view! {
        <svg class="chart forecast-bar" role="img" aria-label=label viewBox=format!("0 0 {FORECAST_WIDTH} 26")
             width=FORECAST_WIDTH height="26" preserveAspectRatio="xMinYMin meet" focusable="false">
            <title>{said}</title>
            <rect x="0" y="3" width=format!("{:.1}", x(forecast).max(1.0)) height="20" class="bar forecast" />
            <rect x="0" y="3" width=format!("{:.1}", x(to_date).max(1.0)) height="20" class="bar to-date" />
            {budget.map(|b| view! {
                <line x1=format!("{:.1}", x(b)) x2=format!("{:.1}", x(b)) y1="0" y2="26" class="budget-mark" />
            })}
        </svg>
    }
}

/// The month-end forecast per department against budgets; warns where the forecast passes the budget.
#[component]
pub fn ForecastPanel(
    /// Per department: to date, forecast, budget.
    rows: Vec<ForecastRow>,
    /// The currency.
    unit: String,
) -> impl IntoView {
    let over: Vec<&ForecastRow> = rows.iter().filter(|r| r.over_budget).collect();
    let warning = (!over.is_empty()).then(|| {
        let who = over
            .iter()
            .map(|r| {
                format!(
                    "{} ({} of {} {unit})",
                    r.department,
                    grouped(&r.forecast),
                    grouped(r.budget.as_deref().unwrap_or("0"))
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        view! { <p class="notice warning" id="over-budget" role="alert">{format!("Forecast over budget: {who}.")}</p> }
    });
    view! {
        <section class="panel" id="forecast">
            <h2>"This month: to date, forecast and budget"</h2>
            {warning}
            <p class="muted">"Dark: charged so far. Light: the month-end forecast (the allocations still open priced to \
                the month's end, plus new work at the usual pace where the last three months were regular). Line: budget."</p>
            <table class="forecast">
                <thead><tr><th>"Department"</th><th>"To date · forecast · budget"</th><th class="num">"To date"</th><th class="num">"Forecast"</th><th class="num">"Budget"</th><th>"Method"</th></tr></thead>
                <tbody>{rows.into_iter().map(|r| {
                    let budget = r.budget.as_deref().map_or_else(|| "none set".to_string(), grouped);
                    let class = if r.over_budget { "over" } else { "" };
                    view! {
                        <tr class=class>
                            <th scope="row">{r.department.clone()}</th>
                            <td><ForecastBar row=r.clone() unit=unit.clone() /></td>
                            <td class="num">{grouped(&r.to_date)}</td>
                            <td class="num">{grouped(&r.forecast)}</td>
                            <td class="num">{budget}</td>
                            <td title=r.explanation.clone()>{format!("{} ({})", r.method, r.confidence)}</td>
                        </tr>
                    }
                }).collect_view()}</tbody>
            </table>
        </section>
    }
}

/// Reservations holding GPUs that have done (almost) nothing for longer than the policy's idle setting.
#[component]
pub fn IdlePanel(
    /// The reservations, longest idle first.
    items: Vec<IdleReservation>,
) -> impl IntoView {
    view! {
        <section class="panel" id="idle">
            <h2>"Idle now"</h2>
            <p class="muted">"Allocations holding GPUs that have been (almost) idle for longer than the policy allows \
                (default: below 5 % for 2 hours). Never billed separately: the held capacity is already in the charges."</p>
            {if items.is_empty() {
                view! { <p class="empty">"No idle reservations right now."</p> }.into_any()
            } else {
                view! {
                    <table class="idle">
                        <thead><tr><th>"Holder"</th><th>"Tenant"</th><th>"GPUs"</th><th>"Devices"</th><th>"Idle since"</th><th class="num">"Hours"</th><th class="num">"Cost so far"</th></tr></thead>
                        <tbody>{items.into_iter().map(|i| view! {
                            <tr>
                                <td>{format!("{} ({})", i.holder, i.cluster)}</td>
                                <td>{i.tenant.clone().unwrap_or_else(|| "no tenant".into())}</td>
                                <td>{format!("{} × {}", i.fraction, i.gpu_class.clone().unwrap_or_default())}</td>
                                <td>{i.devices.join(", ")}</td>
                                <td>{readable_time(&i.idle_since).unwrap_or_else(|| i.idle_since.clone())}</td>
                                <td class="num">{hours(&i.idle_hours)}</td>
                                <td class="num">{i.cost_so_far.as_deref().map_or_else(|| "no rate".to_string(), |c| format!("{} {}", grouped(c), i.currency))}</td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Notifications {
    idle: IdleList,
    budgets: Budgets,
    webhooks: Vec<(Webhook, Vec<Delivery>)>,
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
enum Access {
    SignIn,
    Forbidden,
    Error(PortalError),
}

async fn load() -> Result<Notifications, Access> {
    let Some(s) = session().await else { return Err(Access::SignIn) };
    if !(s.has("admin") || s.has("finance")) {
        return Err(Access::Forbidden);
    }
    let idle = read::<IdleList>(Read::Idle()).await.map_err(Access::Error)?;
    let budgets = read::<Budgets>(Read::Budgets(OptionalMonthParams { period: None })).await.map_err(Access::Error)?;
    let hooks = read::<Items<Webhook>>(Read::Webhooks()).await.map_err(Access::Error)?;
    let mut webhooks = Vec::with_capacity(hooks.items.len());
    for w in hooks.items {
        let id = IdPath { id: param("id", &w.webhook_id).map_err(Access::Error)? };
        let log = read::<Items<Delivery>>(Read::Deliveries(id)).await.map_err(Access::Error)?;
        webhooks.push((w, log.items.into_iter().take(20).collect()));
    }
    Ok(Notifications { idle, budgets, webhooks })
}

/// `/admin/notifications`.
#[component]
pub fn NotificationsPage() -> impl IntoView {
    view! {
        <Title text="Idle reservations & notifications — GPU Ledger" />
        <Awaited future=load() let:data>
            {match data.clone() {
                Err(Access::SignIn) => view! { <Redirect path="/login?next=/admin/notifications" /> }.into_any(),
                Err(Access::Forbidden) => forbidden("This page is for admins and finance."),
                Err(Access::Error(e)) => error_panel(&e),
                Ok(n) => view! { <NotificationsView n /> }.into_any(),
            }}
        </Awaited>
    }
}

fn time_of(raw: &str) -> String {
    readable_time(raw).unwrap_or_else(|| raw.to_string())
}

#[component]
fn NotificationsView(n: Notifications) -> impl IntoView {
    view! {
        <section class="panel">
            <h1>"Idle reservations & notifications"</h1>
            <p class="muted">{format!(
                "Idle means activity below {} % for at least {} h (the cost policy's idle setting). As of {}.",
                n.idle.threshold_pct, n.idle.min_idle_hours, time_of(&n.idle.as_of)
            )}</p>
            {(n.idle.not_measured > 0).then(|| view! {
                <p class="notice">{format!(
                    "{} open allocation(s) have no telemetry to tell whether they are idle: they are not listed. \
                     Run the node agent or a DCGM exporter on their nodes.",
                    n.idle.not_measured
                )}</p>
            })}
        </section>
        <IdlePanel items=n.idle.items.clone() />
        <section class="panel" id="budgets">
            <h2>{format!("Budgets for {}", n.budgets.period)}</h2>
            {if n.budgets.items.is_empty() {
                view! { <p class="empty">"No budgets set for this month (POST /api/v1/budgets)."</p> }.into_any()
            } else {
                view! {
                    <table><thead><tr><th>"Department"</th><th>"Tenant"</th><th class="num">"Budget"</th><th>"Set by"</th><th>"When"</th></tr></thead>
                    <tbody>{n.budgets.items.iter().map(|b| view! {
                        <tr>
                            <td>{b.department.clone()}</td>
                            <td>{b.tenant.clone().unwrap_or_else(|| "—".into())}</td>
                            <td class="num">{grouped(&b.amount)}</td>
                            <td>{b.created_by.clone()}</td>
                            <td>{time_of(&b.created_at)}</td>
                        </tr>
                    }).collect_view()}</tbody></table>
                }.into_any()
            }}
        </section>
        <section class="panel" id="webhooks">
            <h2>"Webhooks"</h2>
            {if n.webhooks.is_empty() {
                view! { <p class="empty">"No webhooks yet. Add one with POST /api/v1/notifications/webhooks \
                    (events: budget.forecast_exceeded, idle.reservation, period.closed, dispute.opened, dispute.resolved)."</p> }.into_any()
            } else {
                n.webhooks.iter().map(|(w, log)| view! {
                    <article class="webhook">
                        <h3><code>{w.url.clone()}</code>{w.disabled_at.as_ref().map(|_| " (disabled)")}</h3>
                        <p class="muted">{format!(
                            "{} · {} · added by {} · {} delivered, {} pending, {} failed",
                            w.events.join(", "), w.format, w.created_by, w.delivered, w.pending, w.failed
                        )}</p>
                        {if log.is_empty() {
                            view! { <p class="empty">"Nothing sent yet."</p> }.into_any()
                        } else {
                            view! {
                                <table class="deliveries"><thead><tr><th>"Queued"</th><th>"Event"</th><th>"State"</th><th class="num">"Tries"</th><th>"Last answer"</th><th>"Delivered / next try"</th></tr></thead>
                                <tbody>{log.iter().map(|d| view! {
                                    <tr class=d.state.as_str()>
                                        <td>{time_of(&d.created_at)}</td>
                                        <td>{d.event.clone()}</td>
                                        <td>{d.state.as_str()}</td>
                                        <td class="num">{d.attempts}</td>
                                        <td>{match (&d.last_status, &d.last_error) {
                                            (_, Some(e)) => e.clone(),
                                            (Some(s), None) => format!("HTTP {s}"),
                                            (None, None) => "—".into(),
                                        }}</td>
                                        <td>{d.delivered_at.as_deref().or(d.next_attempt_at.as_deref()).map(time_of).unwrap_or_default()}</td>
                                    </tr>
                                }).collect_view()}</tbody></table>
                            }.into_any()
                        }}
                    </article>
                }).collect_view().into_any()
            }}
        </section>
    }
}
