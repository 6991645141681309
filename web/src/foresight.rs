//! `/admin/notifications`: idle reservations across the organization, the month's budgets, and each webhook with
//! its delivery log (what was sent, when, how many tries, the receiver's last answer).

use gpuledger_api::{
    Items,
    foresight::{Budgets, Delivery, IdleList, Webhook},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Redirect;

use crate::{
    data::{PortalError, api_json},
    showback::IdlePanel,
    ui::{Awaited, error_panel, forbidden, grouped, readable_time, session},
};

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
    let idle = api_json::<IdleList>("/api/v1/idle".into()).await.map_err(Access::Error)?;
    let budgets = api_json::<Budgets>("/api/v1/budgets".into()).await.map_err(Access::Error)?;
    let hooks = api_json::<Items<Webhook>>("/api/v1/notifications/webhooks".into()).await.map_err(Access::Error)?;
    let mut webhooks = Vec::with_capacity(hooks.items.len());
    for w in hooks.items {
        let log = api_json::<Items<Delivery>>(format!("/api/v1/notifications/webhooks/{}/deliveries", w.webhook_id))
            .await
            .map_err(Access::Error)?;
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
                                    <tr class=d.state.clone()>
                                        <td>{time_of(&d.created_at)}</td>
                                        <td>{d.event.clone()}</td>
                                        <td>{d.state.clone()}</td>
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
