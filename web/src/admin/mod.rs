//! Admin: clusters and their agents (join tokens with the install command), API tokens, sign-in settings,
//! cost policies (diff against the approved one, approve), quotas, inventory, tenancy history, the audit log.

mod inventory;
mod organization;
mod policies;
pub use inventory::InventoryPage;
pub use organization::{CostsPage, OrganizationPage};
pub use policies::{ImpactTable, PoliciesPage};

use crate::ui::Awaited;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{components::Redirect, hooks::use_query_map};
use serde_json::Value;

use gpuledger_api::{
    Items,
    auth::{AuditLog, ProviderSettings, RoleMappings},
    costs::{CostImport, ImportParams},
    orgs::OrganizationSettings,
    params::{AuditParams, MonthParams, QuotaParams, TokenUse, VersionPath},
    policy::{Impact, PolicyList, QuotaList},
    tenancy::{Department, NamespaceRule, Tenant},
};

use crate::{
    account::TokensPanel,
    data::{ClusterRow, PortalDataHandle, PortalError, SessionView, TokenRow},
    reads::{Read, param, read, read_found, whole},
    ui::{error_panel, forbidden, q, when},
};

#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) enum Access {
    SignIn(String),
    Forbidden,
    Admin(SessionView),
}

pub(crate) async fn admin(next: &str) -> Access {
    match crate::ui::session().await {
        None => Access::SignIn(format!("/login?next={next}")),
        Some(s) if s.has("admin") => Access::Admin(s),
        Some(_) => Access::Forbidden,
    }
}

fn handle() -> Result<PortalDataHandle, PortalError> {
    use_context::<PortalDataHandle>()
        .ok_or_else(|| PortalError { message: "the portal has no data source configured".into() })
}

/// A time cell of an optional time (empty when absent).
fn when_some(raw: &Option<String>) -> AnyView {
    when(raw.as_deref().unwrap_or_default())
}

/// An optional number as a cell (empty when absent).
fn num(n: Option<i64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

#[component]
pub(crate) fn AdminNav() -> impl IntoView {
    view! {
        <nav class="tabs" aria-label="Admin sections">
            <a href="/admin">"Clusters & tokens"</a>
            <a href="/admin/identity">"Sign-in"</a>
            <a href="/admin/policies">"Cost policies & quotas"</a>
            <a href="/admin/costs">"Cloud bill"</a>
            <a href="/admin/inventory">"Inventory & tenancy"</a>
            <a href="/admin/notifications">"Idle & notifications"</a>
            <a href="/admin/telemetry">"Telemetry coverage"</a>
            <a href="/admin/audit">"Audit log"</a>
            <a href="/admin/organization">"Organization"</a>
        </nav>
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Home {
    session: SessionView,
    clusters: Vec<ClusterRow>,
    tokens: Vec<TokenRow>,
    /// The read model's last refresh failure, if any.
    failure: Option<gpuledger_api::ledger::RefreshFailure>,
}

/// `/admin`: clusters with their agents' last contact, adding a cluster (join token + install command), tokens.
#[component]
pub fn AdminPage() -> impl IntoView {
    let data = async move {
        match admin("/admin").await {
            Access::Admin(session) => {
                let h = use_context::<PortalDataHandle>();
                let tokens = match &h {
                    Some(h) => h.0.tokens().await,
                    None => Ok(Vec::new()),
                };
                let clusters = match handle() {
                    Ok(h) => h.0.admin_clusters().await,
                    Err(e) => Err(e),
                };
                // Not worth failing the page for: the showback page says it too.
                let failure = match &h {
                    Some(h) => h.0.refresh_failure().await.ok().flatten(),
                    None => None,
                };
                match (tokens, clusters) {
                    (Ok(tokens), Ok(clusters)) => Ok(Home { session, clusters, tokens, failure }),
                    (Err(e), _) | (_, Err(e)) => Err(Err(e)),
                }
            }
            other => Err(Ok(other)),
        }
    };
    view! {
        <Title text="Admin — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(Ok(Access::SignIn(to))) => view! { <Redirect path=to /> }.into_any(),
                Err(Ok(_)) => forbidden("The admin pages are for admins."),
                Err(Err(e)) => error_panel(&e),
                Ok(home) => view! {
                    <section class="panel"><h1>"Admin"</h1><AdminNav /></section>
                    {home.failure.clone().map(|f| view! {
                        <section class="panel">
                            <p class="notice warning" id="refresh-failure" role="alert">
                                <strong>"The open month's figures could not be brought up to date"</strong>
                                {format!(" since {} ({} attempt{}; month {}): {}: {} ", f.since, f.attempts,
                                    if f.attempts == 1 { "" } else { "s" }, f.period.clone().unwrap_or_default(),
                                    f.field, f.reason)}
                                <br />{f.fix.clone()}
                            </p>
                        </section>
                    })}
                    <ClustersPanel csrf=home.session.csrf.clone() rows=home.clusters />
                    <TokensPanel session=home.session tokens=home.tokens />
                }.into_any(),
            }}
        </Awaited>
    }
}

#[component]
fn ClustersPanel(csrf: String, rows: Vec<ClusterRow>) -> impl IntoView {
    let empty = rows.is_empty();
    // Agents whose spool is at least 80 % full: past the cap the oldest facts are dropped (and the months they
    // were about need an acknowledgement to close).
    let filling: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let pct = r.spool_fill_pct().filter(|p| *p >= 80.0)?;
            let who = match r.node.as_deref() {
                Some(n) if !n.is_empty() => format!("{} (node {n})", r.name),
                _ => format!("{} ({})", r.name, r.mode.clone().unwrap_or_default()),
            };
            Some(format!("{who}: {pct:.0} %"))
        })
        .collect();
    view! {
        <section class="panel">
            <h2>"Clusters and agents"</h2>
            {(!filling.is_empty()).then(|| view! {
                <p class="notice warning" id="spool-filling" role="alert">{format!(
                    "Agent spool nearly full — {}. The agents cannot reach this server fast enough; past the cap the \
                     oldest facts are dropped (see docs/agent.md, spool).",
                    filling.join(", ")
                )}</p>
            })}
            <form method="post" action="/ui/clusters" class="inline-form" id="add-cluster">
                <input type="hidden" name="csrf" value=csrf />
                <label>"New cluster name " <input name="name" required=true pattern="[^\\s]+" placeholder="prod-west" /></label>
                <button type="submit">"Add cluster and get a join token"</button>
            </form>
            {if empty {
                view! { <p class="empty">"No cluster yet: add one, then run the join command it shows."</p> }.into_any()
            } else {
                view! {
                    <table class="clusters">
                        <thead><tr><th>"Cluster"</th><th>"Agent"</th><th>"Version"</th><th>"Last contact (UTC)"</th><th class="num">"Facts in last batch"</th><th class="num">"Lag (s)"</th><th class="num" title="Facts waiting in the agent's spool after its last batch">"Spool backlog"</th></tr></thead>
                        <tbody>{rows.iter().map(|r| {
                            let agent = match (r.mode.as_deref().unwrap_or_default(), r.node.as_deref().unwrap_or_default()) {
                                ("", _) => "no contact yet".to_string(),
                                ("node", n) => format!("node {n}"),
                                (m, _) => m.to_string(),
                            };
                            view! {
                                <tr>
                                    <td>{r.name.clone()}{r.retired_at.is_some().then_some(" (retired)")}</td>
                                    <td>{agent}</td>
                                    <td>{r.version.clone().unwrap_or_default()}</td>
                                    <td>{when_some(&r.last_seen_at)}</td>
                                    <td class="num">{num(r.last_batch_facts)}</td>
                                    <td class="num">{num(r.lag_seconds)}</td>
                                    <td class="num">{backlog(r)}</td>
                                </tr>
                            }
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

/// An agent's spool backlog: facts waiting (and their size), and facts ever dropped; "not reported" for agents
/// that do not send it.
fn backlog(r: &ClusterRow) -> String {
    let Some(facts) = r.spool_pending_facts else {
        return if r.mode.as_deref().unwrap_or_default().is_empty() { String::new() } else { "not reported".into() };
    };
    let bytes = r.spool_pending_bytes.unwrap_or(0);
    let size = if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{} KiB", (bytes + 1023) / 1024)
    };
    // The size is the spool's before the batch was taken from it (the agent cannot know the rest in advance).
    let mut out = format!("{facts} facts waiting; spool {size}");
    if let Some(pct) = r.spool_fill_pct() {
        out.push_str(&format!(" ({pct:.0} % full)"));
    }
    if let Some(d) = r.spool_dropped_facts.filter(|d| *d > 0) {
        out.push_str(&format!(", {d} dropped"));
    }
    out
}

/// `/admin/identity`: the OpenID provider and the group → role mappings.
#[component]
pub fn IdentityPage() -> impl IntoView {
    let data = async move {
        match admin("/admin/identity").await {
            Access::Admin(session) => {
                let provider: ProviderSettings = read(Read::Provider()).await.map_err(Err)?;
                let mappings: RoleMappings = read(Read::RoleMappings()).await.map_err(Err)?;
                Ok((session, provider, mappings))
            }
            other => Err(Ok(other)),
        }
    };
    view! {
        <Title text="Sign-in settings — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(Ok(Access::SignIn(to))) => view! { <Redirect path=to /> }.into_any(),
                Err(Ok(_)) => forbidden("The admin pages are for admins."),
                Err(Err(e)) => error_panel(&e),
                Ok((session, provider, mappings)) => {
                    let p = provider.provider.clone();
                    let lines = mappings.mappings.iter().map(|m| match m.department.as_deref().filter(|d| !d.is_empty()) {
                        None => format!("{} = {}", m.group, m.role),
                        Some(d) => format!("{} = {} {}", m.group, m.role, d),
                    }).collect::<Vec<_>>().join("\n");
                    let field = |f: fn(&gpuledger_api::auth::Provider) -> &String| p.as_ref().map(f).cloned().unwrap_or_default();
                    view! {
                        <section class="panel"><h1>"Sign-in"</h1><AdminNav /></section>
                        <section class="panel">
                            <h2>"OpenID provider"</h2>
                            <p class="muted">"Register a confidential client with the redirect URI " <code>{provider.redirect_uri.clone()}</code>
                               ". Saving switches the demo login off." {provider.demo_login.then_some(" (The demo login is on now.)")}</p>
                            <form method="post" action="/ui/identity/provider" class="stack" id="provider-form">
                                <input type="hidden" name="csrf" value=session.csrf.clone() />
                                <label>"Issuer URL " <input name="issuer" required=true value=field(|p| &p.issuer) /></label>
                                <label>"Client ID " <input name="client_id" required=true value=field(|p| &p.client_id) /></label>
                                <label>"Client secret " <input name="client_secret" type="password" autocomplete="off"
                                    placeholder=if p.is_none() { "required" } else { "unchanged when empty" } /></label>
                                <label>"Groups claim " <input name="groups_claim" value={let g = field(|p| &p.groups_claim); if g.is_empty() { "groups".to_string() } else { g }} /></label>
                                <button type="submit">"Save provider"</button>
                            </form>
                        </section>
                        <section class="panel">
                            <h2>"Groups → roles"</h2>
                            <p class="muted">"One mapping per line: " <code>"GROUP = ROLE [DEPARTMENT]"</code> " with ROLE one of admin, finance, department_manager (with its department), viewer."</p>
                            <form method="post" action="/ui/identity/role-mappings" class="stack" id="mappings-form">
                                <input type="hidden" name="csrf" value=session.csrf.clone() />
                                <textarea name="mappings" rows="8">{lines}</textarea>
                                <button type="submit">"Save mappings"</button>
                            </form>
                        </section>
                    }.into_any()
                }
            }}
        </Awaited>
    }
}

/// `/admin/audit`: the audit log, newest first, filtered by action, paged back by time.
#[component]
pub fn AuditPage() -> impl IntoView {
    let (action, before, routine) = use_query_map()
        .with_untracked(|m| (m.get("action"), m.get("before"), m.get("routine").is_some_and(|r| r == "1")));
    let data = async move {
        match admin("/admin/audit").await {
            Access::Admin(_) => {
                let mut params = AuditParams {
                    limit: Some(whole("limit", 100).map_err(Err)?),
                    before: None,
                    action: None,
                    exclude: None,
                    token_use: None,
                };
                match action.clone().filter(|a| !a.is_empty()) {
                    Some(a) => params.action = Some(param("action", &a).map_err(Err)?),
                    // Agents' once-a-minute token use would push everything else off the first page: one row per
                    // token and day, with a count, unless every use is asked for.
                    None if !routine => params.token_use = Some(TokenUse::Fold),
                    None => {}
                }
                if let Some(b) = before.filter(|b| !b.is_empty()) {
                    params.before = Some(param("before", &b).map_err(Err)?);
                }
                let mut log: AuditLog = read(Read::Audit(params)).await.map_err(Err)?;
                // Only what the page shows travels with it (the page's data is serialized into the HTML).
                for item in &mut log.items {
                    item.details = Value::Null;
                }
                Ok((action.unwrap_or_default(), routine, log))
            }
            other => Err(Ok(other)),
        }
    };
    view! {
        <Title text="Audit log — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(Ok(Access::SignIn(to))) => view! { <Redirect path=to /> }.into_any(),
                Err(Ok(_)) => forbidden("The admin pages are for admins."),
                Err(Err(e)) => error_panel(&e),
                Ok((action, routine, log)) => {
                    let items = log.items;
                    let next = log.next_before.unwrap_or_default();
                    let keep = if routine { "&routine=1" } else { "" };
                    view! {
                        <section class="panel"><h1>"Audit log"</h1><AdminNav />
                            <form method="get" action="/admin/audit" class="filters">
                                <label>"Action " <input name="action" value=action.clone() placeholder="login.failure" /></label>
                                <label><input type="checkbox" name="routine" value="1" checked=routine />" include routine token use"</label>
                                <button type="submit">"Filter"</button>
                            </form>
                            {(!routine && action.is_empty()).then(|| view! {
                                <p class="muted" id="routine-hidden">"Routine token use (agents and exports, once a minute per token) is folded into one row per token and day, with a count; tick the box to see every use."</p>
                            })}
                            {if items.is_empty() { view! { <p class="empty">"No records."</p> }.into_any() } else { view! {
                                <table class="audit"><thead><tr><th>"When (UTC)"</th><th>"Who"</th><th>"What"</th><th>"On"</th><th>"Why"</th><th>"From"</th></tr></thead>
                                <tbody>{items.iter().map(|r| view! {
                                    <tr><td>{match &r.first_at { Some(first) if r.count > 1 => view! { {when(first)} " – " {when(&r.at)} }.into_any(), _ => when(&r.at) }}</td><td>{r.actor.clone()}</td><td>{r.action.to_string()}{(r.count > 1).then(|| format!(" × {}", r.count))}</td><td>{r.target.clone()}</td><td>{r.reason.clone()}</td><td>{r.source.clone()}</td></tr>
                                }).collect_view()}</tbody></table>
                            }.into_any() }}
                            {(!next.is_empty()).then(|| view! {
                                <a href=format!("/admin/audit?action={}&before={}{keep}", q(&action), q(&next)) rel="next">"Older →"</a>
                            })}
                        </section>
                    }.into_any()
                }
            }}
        </Awaited>
    }
}

/// `YYYY-MM` with a month from 01 to 12.
fn is_month(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 7
        && b[4] == b'-'
        && b[..4].iter().chain(&b[5..]).all(u8::is_ascii_digit)
        && matches!(s[5..].parse::<u8>(), Ok(1..=12))
}

/// The month before this one, `YYYY-MM`.
fn previous_month() -> String {
    let now = crate::ui::now();
    let (y, m) = if now.month() == time::Month::January {
        (now.year() - 1, 12)
    } else {
        (now.year(), u8::from(now.month()) - 1)
    };
    format!("{y:04}-{m:02}")
}
