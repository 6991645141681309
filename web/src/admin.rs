//! Admin: clusters and their agents (join tokens with the install command), API tokens, sign-in settings,
//! cost policies (diff against the approved one, approve), quotas, inventory, tenancy history, the audit log.

use crate::ui::Awaited;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{components::Redirect, hooks::use_query_map};
use serde_json::Value;

use gpuledger_api::{
    Items,
    auth::{AuditLog, ProviderSettings, RoleMappings},
    costs::CostImport,
    orgs::OrganizationSettings,
    policy::{Impact, PolicyList, QuotaList},
    tenancy::{Department, NamespaceRule, Tenant},
};

use crate::{
    account::TokensPanel,
    data::{ClusterRow, PortalDataHandle, PortalError, SessionView, TokenRow},
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

/// `GET path` of the REST API, read as the contract's answer type.
pub(crate) async fn api<T: serde::de::DeserializeOwned>(path: &str) -> Result<T, PortalError> {
    handle()?.0.api("GET", path.to_string(), None).await?.json::<T>()
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
                let provider: ProviderSettings = api("/api/v1/identity/provider").await.map_err(Err)?;
                let mappings: RoleMappings = api("/api/v1/identity/role-mappings").await.map_err(Err)?;
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

/// Line-by-line comparison of two JSON documents (the draft against the approved policy).
fn diff(old: &Value, new: &Value) -> Vec<(char, String)> {
    let a = serde_json::to_string_pretty(old).unwrap_or_default();
    let b = serde_json::to_string_pretty(new).unwrap_or_default();
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    // Longest common subsequence: small documents, quadratic is fine.
    let mut l = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            l[i][j] = if a[i] == b[j] { l[i + 1][j + 1] + 1 } else { l[i + 1][j].max(l[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push((' ', a[i].to_string()));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || l[i][j + 1] >= l[i + 1][j]) {
            out.push(('+', b[j].to_string()));
            j += 1;
        } else {
            out.push(('-', a[i].to_string()));
            i += 1;
        }
    }
    out
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

/// The month a what-if is shown for: the one asked (`?impact_period=`), else the last closed month, else the
/// previous month.
async fn impact_period(asked: Option<String>) -> String {
    if let Some(p) = asked.filter(|p| is_month(p)) {
        return p;
    }
    let closed = match handle() {
        Ok(h) => h.0.periods().await.ok().and_then(|rows| {
            rows.into_iter().filter(|r| r.state == gpuledger_api::states::PeriodState::Closed).map(|r| r.period).max()
        }),
        Err(_) => None,
    };
    closed.unwrap_or_else(previous_month)
}

/// The CSS class of a difference: up, down or the same.
fn delta_class(d: &str) -> &'static str {
    if d.starts_with('-') {
        "num delta down"
    } else if d.chars().all(|c| matches!(c, '0' | '.')) {
        "num delta same"
    } else {
        "num delta up"
    }
}

/// A what-if answer as a table: per department (and its tenants) the month as priced now, with the change, and
/// the difference; then the total and what the comparison covers. Shown for a draft policy and for an inventory
/// change before it is saved.
#[component]
pub fn ImpactTable(
    /// The comparison to show.
    impact: Impact,
) -> impl IntoView {
    let cur = impact.currency.clone();
    view! {
        <table class="impact">
            <thead><tr><th>"Department / tenant"</th><th class="num">{format!("Now ({cur})")}</th><th class="num">{format!("With the change ({cur})")}</th><th class="num">"Difference"</th></tr></thead>
            <tbody>{impact.departments.iter().map(|d| {
                let tenants: Vec<_> = impact.tenants.iter().filter(|t| t.department == d.department).cloned().collect();
                view! {
                    <tr class="department"><th scope="row">{d.department.clone()}</th><td class="num">{d.approved.clone()}</td><td class="num">{d.draft.clone()}</td><td class=delta_class(&d.delta)>{d.delta.clone()}</td></tr>
                    {tenants.into_iter().map(|t| view! {
                        <tr class="tenant"><td>{format!("\u{2003}{}", t.tenant)}</td><td class="num">{t.approved}</td><td class="num">{t.draft}</td><td class=delta_class(&t.delta)>{t.delta.clone()}</td></tr>
                    }).collect_view()}
                }
            }).collect_view()}</tbody>
            <tfoot><tr><th scope="row">"Total"</th><td class="num">{impact.total.approved.clone()}</td><td class="num">{impact.total.draft.clone()}</td><td class=delta_class(&impact.total.delta)>{impact.total.delta.clone()}</td></tr></tfoot>
        </table>
        <p class="muted">{impact.note.clone()}</p>
    }
}

/// `/admin/policies`: cost policy versions, each draft's differences from the approved one and its impact on a
/// month (`?impact_period=YYYY-MM`, by default the last closed month) above its approve button; quotas.
#[component]
pub fn PoliciesPage() -> impl IntoView {
    let asked = use_query_map().with_untracked(|m| m.get("impact_period"));
    let data = async move {
        match admin("/admin/policies").await {
            Access::Admin(session) => {
                let policies: PolicyList = api("/api/v1/policies").await.map_err(Err)?;
                let quotas: QuotaList = api("/api/v1/quotas").await.map_err(Err)?;
                let period = impact_period(asked).await;
                let mut impacts = Vec::new();
                for d in policies.items.iter().filter(|p| p.state == gpuledger_api::states::PolicyState::Draft) {
                    let answer: Result<Impact, PortalError> =
                        api(&format!("/api/v1/policies/{}/impact?period={}", d.version, q(&period))).await;
                    impacts.push((d.version, answer));
                }
                Ok((session, policies, quotas, period, impacts))
            }
            other => Err(Ok(other)),
        }
    };
    view! {
        <Title text="Cost policies — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(Ok(Access::SignIn(to))) => view! { <Redirect path=to /> }.into_any(),
                Err(Ok(_)) => forbidden("The admin pages are for admins."),
                Err(Err(e)) => error_panel(&e),
                Ok((session, policies, quotas, period, impacts)) => {
                    let items = policies.items;
                    let approved = items.iter().find(|p| p.state == gpuledger_api::states::PolicyState::Approved).cloned();
                    let quota_rows = quotas.items;
                    view! {
                        <section class="panel"><h1>"Cost policies & quotas"</h1><AdminNav /></section>
                        <section class="panel">
                            <h2>"Versions"</h2>
                            {if items.is_empty() { view! { <p class="empty">"No cost policy yet: write the first one under “New draft” below."</p> }.into_any() } else { view! {
                                <table><thead><tr><th>"Version"</th><th>"State"</th><th>"From"</th><th>"Note"</th><th>"Approved"</th><th></th></tr></thead>
                                <tbody>{items.iter().map(|p| {
                                    let draft = p.state == gpuledger_api::states::PolicyState::Draft;
                                    let version = p.version.to_string();
                                    view! {
                                        <tr>
                                            <td>{version.clone()}</td><td>{p.state.as_str()}</td><td>{when(&p.effective_from)}</td><td>{p.note.clone()}</td>
                                            <td>{when_some(&p.approved_at)} " " {p.approved_by.clone().unwrap_or_default()}</td>
                                            <td>{draft.then(|| view! { <a href=format!("#draft-{version}")>"Impact & approval"</a> })}</td>
                                        </tr>
                                    }
                                }).collect_view()}</tbody></table>
                            }.into_any() }}
                            {items.iter().filter(|p| p.state == gpuledger_api::states::PolicyState::Draft).map(|d| {
                                let base = approved.as_ref().map(|a| a.document.clone()).unwrap_or(Value::Null);
                                let version = d.version.to_string();
                                let impact = impacts.iter().find(|(v, _)| *v == d.version).map(|(_, i)| i.clone());
                                view! {
                                    <h3 id=format!("draft-{version}")>{format!("Draft v{version} against the approved version")}</h3>
                                    <details class="edit">
                                        <summary>{format!("Edit draft v{version}")}</summary>
                                        <PolicyForm action=format!("/ui/policies/{version}") csrf=session.csrf.clone()
                                            effective_from=d.effective_from.chars().take(7).collect()
                                            note=d.note.clone() document=d.document.clone() button="Save draft" />
                                    </details>
                                    <pre class="diff">{diff(&base, &d.document).into_iter().map(|(k, line)| {
                                        let class = match k { '+' => "add", '-' => "del", _ => "same" };
                                        view! { <span class=class>{format!("{k} {line}\n")}</span> }
                                    }).collect_view()}</pre>
                                    <h4 id=format!("impact-{version}")>{format!("Impact of draft v{version} on {period}")}</h4>
                                    <form method="get" action="/admin/policies" class="inline-form">
                                        <label>"Month " <input name="impact_period" value=period.clone() required=true pattern="[0-9]{4}-[0-9]{2}" placeholder="YYYY-MM" size="8" /></label>
                                        <button type="submit">"Show impact"</button>
                                    </form>
                                    {match impact {
                                        Some(Ok(i)) => view! { <ImpactTable impact=i /> }.into_any(),
                                        Some(Err(e)) => view! { <p class="error">{format!("The impact could not be computed: {}", e.message)}</p> }.into_any(),
                                        None => ().into_any(),
                                    }}
                                    <form method="post" action=format!("/ui/policies/{version}/approve") class="inline approve">
                                        <input type="hidden" name="csrf" value=session.csrf.clone() />
                                        <button type="submit">{format!("Approve draft v{version}")}</button>
                                    </form>
                                }
                            }).collect_view()}
                            <details class="edit" open=items.is_empty()>
                                <summary>"New draft"</summary>
                                <p class="muted">"Starts from the approved version. A draft prices nothing until it is approved; approving it prices every month from its first month on, except closed ones."</p>
                                <PolicyForm action="/ui/policies".into() csrf=session.csrf.clone()
                                    effective_from=next_month() note=String::new()
                                    document=approved.as_ref().map(|a| a.document.clone()).unwrap_or_else(policy_template)
                                    button="Save as draft" />
                            </details>
                        </section>
                        <section class="panel" id="quotas">
                            <h2>"Quotas (guaranteed capacity)"</h2>
                            <form method="post" action="/ui/quotas" class="inline-form" id="add-quota">
                                <input type="hidden" name="csrf" value=session.csrf.clone() />
                                <label>"Holder "
                                    <select name="holder_kind"><option value="tenant">"tenant"</option><option value="department">"department"</option></select>
                                </label>
                                <label>"Name " <input name="holder" required=true placeholder="nlp-research" /></label>
                                <label>"GPU class " <input name="gpu_class" required=true placeholder="H100-80GB" /></label>
                                <label>"GPUs " <input name="gpus" required=true inputmode="decimal" placeholder="2" size="5" /></label>
                                <label>"From " <input name="valid_from" type="date" required=true /></label>
                                <label>"Until " <input name="valid_to" type="date" /></label>
                                <button type="submit">"Add quota"</button>
                            </form>
                            {if quota_rows.is_empty() { view! { <p class="empty">"No quotas."</p> }.into_any() } else { view! {
                                <table><thead><tr><th>"Holder"</th><th>"Class"</th><th class="num">"GPUs"</th><th>"From"</th><th>"To"</th><th>"Source"</th></tr></thead>
                                <tbody>{quota_rows.iter().map(|r| {
                                    let holder = [&r.tenant, &r.department].into_iter().flatten().find(|x| !x.is_empty()).cloned().unwrap_or_default();
                                    view! {
                                        <tr><td>{holder}</td><td>{r.gpu_class.clone()}</td><td class="num">{r.gpus.clone()}</td>
                                            <td>{when(&r.valid_from)}</td><td>{when_some(&r.valid_to)}</td><td>{r.source.clone()}</td></tr>
                                    }
                                }).collect_view()}</tbody></table>
                            }.into_any() }}
                        </section>
                    }.into_any()
                }
            }}
        </Awaited>
    }
}

/// The month after this one, `YYYY-MM` (a new draft's default start).
fn next_month() -> String {
    let now = crate::ui::now();
    let (y, m) = if now.month() == time::Month::December {
        (now.year() + 1, 1)
    } else {
        (now.year(), u8::from(now.month()) + 1)
    };
    format!("{y:04}-{m:02}")
}

/// A starting point when no version exists yet (the fields the policy validator asks for).
fn policy_template() -> Value {
    serde_json::json!({
        "currency": "USD",
        "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.50", "borrowed": "3.50"}],
    })
}

/// A cost-policy draft: first month, note and the policy as JSON.
#[component]
fn PolicyForm(
    action: String,
    csrf: String,
    effective_from: String,
    note: String,
    document: Value,
    button: &'static str,
) -> impl IntoView {
    let text = serde_json::to_string_pretty(&document).unwrap_or_default();
    let rows = text.lines().count().clamp(8, 40).to_string();
    view! {
        <form method="post" action=action class="policy-form">
            <input type="hidden" name="csrf" value=csrf />
            <label>"First month " <input name="effective_from" value=effective_from required=true pattern="[0-9]{4}-[0-9]{2}" placeholder="YYYY-MM" /></label>
            <label>"Note " <input name="note" value=note size="50" /></label>
            <label class="block">"Policy (JSON: currency, classes with guaranteed and borrowed rates, energy, services, token weights, overhead)"
                <textarea name="document" rows=rows spellcheck="false">{text}</textarea>
            </label>
            <button type="submit">{button}</button>
        </form>
    }
}

/// An inventory change the page was asked to preview (`?preview=models|profiles|timeslicing&…fields`): the form,
/// its fields, the month it is shown for and the body of `POST /api/v1/inventory/impact`.
#[derive(Clone)]
struct Preview {
    what: String,
    fields: Vec<(String, String)>,
    period: String,
    body: Value,
}

/// Reads a preview request from the page's query (what the "Preview impact" button sends back).
fn preview_request(get: impl Fn(&str) -> Option<String>) -> Option<Preview> {
    let what = get("preview")?;
    let names: &[&str] = match what.as_str() {
        "models" => &["model", "gpu_class", "valid_from"],
        "profiles" => &["kind", "model", "profile", "fraction", "valid_from"],
        "timeslicing" => &["cluster", "name", "replicas", "valid_from"],
        _ => return None,
    };
    let fields: Vec<(String, String)> = names.iter().map(|n| (n.to_string(), get(n).unwrap_or_default())).collect();
    let value = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap_or_default();
    let from = value("valid_from");
    let instant = if from.len() == 10 { format!("{from}T00:00:00Z") } else { from.clone() };
    let period = from.get(..7).filter(|m| is_month(m)).map_or_else(previous_month, str::to_string);
    let body = match what.as_str() {
        "models" => {
            serde_json::json!({"model": {"model": value("model"), "gpu_class": value("gpu_class"), "valid_from": instant}})
        }
        "profiles" => serde_json::json!({"profile": {"kind": value("kind"), "model": value("model"),
            "profile": value("profile"), "fraction": value("fraction"), "valid_from": instant}}),
        _ => serde_json::json!({"timeslicing": {"cluster": value("cluster"), "name": value("name"),
            "replicas": value("replicas").parse::<i64>().unwrap_or(0), "valid_from": instant}}),
    };
    Some(Preview { what, fields, period, body })
}

/// The preview of an inventory change: its impact on the month it starts in, and the button that saves it.
#[component]
fn PreviewPanel(csrf: String, preview: Preview, impact: Result<Impact, PortalError>) -> impl IntoView {
    let what = preview.what.clone();
    view! {
        <section class="panel" id="preview">
            <h2>{format!("Preview: impact on {} before saving", preview.period)}</h2>
            {match impact {
                Ok(i) => view! { <ImpactTable impact=i /> }.into_any(),
                Err(e) => view! { <p class="error">{format!("The change could not be previewed: {}", e.message)}</p> }.into_any(),
            }}
            <form method="post" action=format!("/ui/inventory/{what}") class="inline-form" id="save-previewed">
                <input type="hidden" name="csrf" value=csrf />
                {preview.fields.into_iter().map(|(k, v)| view! { <input type="hidden" name=k value=v /> }).collect_view()}
                <button type="submit">"Save this change"</button>
                " " <a href="/admin/inventory#inventory">"Discard"</a>
            </form>
        </section>
    }
}

/// `/admin/inventory`: approved GPU models, MIG / vGPU fractions, time-slicing policies (with validity), and the
/// namespace → tenant mapping with its history.
#[component]
pub fn InventoryPage() -> impl IntoView {
    let preview = use_query_map().with_untracked(|m| preview_request(|k| m.get(k)));
    let data = async move {
        match admin("/admin/inventory").await {
            Access::Admin(session) => {
                let preview = match preview {
                    Some(p) => {
                        let path = format!("/api/v1/inventory/impact?period={}", q(&p.period));
                        let impact = match handle() {
                            Ok(h) => match h.0.api("POST", path, Some(p.body.to_string())).await {
                                Ok(a) => a.json::<Impact>(),
                                Err(e) => Err(e),
                            },
                            Err(e) => Err(e),
                        };
                        Some((p, impact))
                    }
                    None => None,
                };
                let h = handle().map_err(Err)?;
                let inventory = h.0.admin_inventory().await.map_err(Err)?;
                let tenancy = h.0.admin_tenancy().await.map_err(Err)?;
                let tenants: Items<Tenant> = api("/api/v1/tenants").await.map_err(Err)?;
                let departments: Items<Department> = api("/api/v1/departments").await.map_err(Err)?;
                let rules: Items<NamespaceRule> = api("/api/v1/tenancy/namespace-rules").await.map_err(Err)?;
                Ok((session.csrf, inventory, tenancy, tenants.items, departments.items, rules.items, preview))
            }
            other => Err(Ok(other)),
        }
    };
    view! {
        <Title text="Inventory — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(Ok(Access::SignIn(to))) => view! { <Redirect path=to /> }.into_any(),
                Err(Ok(_)) => forbidden("The admin pages are for admins."),
                Err(Err(e)) => error_panel(&e),
                Ok((csrf, inventory, tenancy, tenants, departments, rules, preview)) => view! {
                    <section class="panel"><h1>"Inventory & tenancy"</h1><AdminNav /></section>
                    {preview.map(|(p, impact)| view! { <PreviewPanel csrf=csrf.clone() preview=p impact /> })}
                    <section class="panel" id="tenancy">
                        <h2>"Departments and tenants"</h2>
                        <p class="muted">"Namespaces are mapped to tenants by their labels. A tenant added after its namespaces were labelled takes them over from when the labels said so."</p>
                        <form method="post" action="/ui/departments" class="inline-form" id="add-department">
                            <input type="hidden" name="csrf" value=csrf.clone() />
                            <label>"Department " <input name="name" required=true placeholder="Research" /></label>
                            <button type="submit">"Add department"</button>
                        </form>
                        {if departments.is_empty() {
                            view! { <p class="empty">"No department yet: add one, then its tenants."</p> }.into_any()
                        } else { view! {
                            <form method="post" action="/ui/tenants" class="inline-form" id="add-tenant">
                                <input type="hidden" name="csrf" value=csrf.clone() />
                                <label>"Tenant " <input name="name" required=true placeholder="nlp-research" /></label>
                                <label>"in " <select name="department">{departments.iter().map(|d| view! {
                                    <option value=d.name.clone()>{d.name.clone()}</option>
                                }).collect_view()}</select></label>
                                <button type="submit">"Add tenant"</button>
                            </form>
                        }.into_any() }}
                        {(!departments.is_empty()).then(|| view! {
                            <h3>"Journal accounts"</h3>
                            <p class="muted">"Each department's cost centre and GL account: the month's journal (" <code>"/api/v1/exports/journal.csv"</code> ") debits its showback to them. Empty: not set (its journal row keeps the money, with the account empty and a finding)."</p>
                            <table id="department-accounts"><thead><tr><th>"Department"</th><th class="num">"Tenants"</th><th>"Cost centre"</th><th>"GL account"</th><th>"Why"</th><th></th></tr></thead>
                            <tbody>{departments.iter().map(|d| {
                                let form = format!("accounts-{}", d.department_id);
                                view! {
                                    <tr>
                                        <td>{d.name.clone()}{d.retired_at.is_some().then_some(" (retired)")}</td>
                                        <td class="num">{d.tenants}</td>
                                        <td><input form=form.clone() name="cost_center" maxlength="64" size="12" value=d.cost_center.clone().unwrap_or_default() /></td>
                                        <td><input form=form.clone() name="gl_account" maxlength="64" size="12" value=d.gl_account.clone().unwrap_or_default() /></td>
                                        <td><input form=form.clone() name="reason" required=true size="16" placeholder="new chart of accounts" /></td>
                                        <td><form method="post" action="/ui/tenancy/department" id=form.clone()>
                                            <input type="hidden" name="csrf" value=csrf.clone() />
                                            <input type="hidden" name="department" value=d.department_id.clone() />
                                            <button type="submit">"Save accounts"</button>
                                        </form></td>
                                    </tr>
                                }
                            }).collect_view()}</tbody></table>
                        })}
                        {(!tenants.is_empty()).then(|| view! {
                            <table><thead><tr><th>"Department"</th><th>"Tenant"</th><th class="num">"Namespaces now"</th><th>"Retired from"</th><th>"Formerly"</th></tr></thead>
                            <tbody>{tenants.iter().map(|t| view! {
                                <tr><td>{t.department.clone()}</td><td>{t.name.clone()}</td><td class="num">{t.namespaces}</td><td>{when_some(&t.retired_at)}</td><td>{t.former_names.join(", ")}</td></tr>
                            }).collect_view()}</tbody></table>
                            <form method="post" action="/ui/tenancy/tenant" class="inline-form" id="rename-tenant">
                                <input type="hidden" name="csrf" value=csrf.clone() />
                                <label>"Tenant " <select name="tenant">{tenants.iter().map(|t| view! {
                                    <option value=t.name.clone()>{t.name.clone()}</option>
                                }).collect_view()}</select></label>
                                <label>"new name " <input name="name" placeholder="(unchanged)" size="14" /></label>
                                <label>"retire from " <input name="retired_from" type="date" /></label>
                                <label>"Why " <input name="reason" required=true size="20" /></label>
                                <button type="submit">"Rename / retire"</button>
                            </form>
                        })}
                    </section>
                    <section class="panel" id="inventory">
                        <h2>"Approved inventory"</h2>
                        <p class="muted">"An entry applies from its start date; a later entry for the same model or profile ends the one in force (history is kept). Allocations it concerns are recomputed; closed months get corrections at the next close. “Preview impact” shows what the change does to the month it starts in, per department and tenant, before anything is saved."</p>
                        <form method="post" action="/ui/inventory/models" class="inline-form" id="add-model">
                            <input type="hidden" name="csrf" value=csrf.clone() />
                            <label>"GPU model " <input name="model" required=true placeholder="NVIDIA H100 80GB HBM3" /></label>
                            <label>"Class " <input name="gpu_class" required=true placeholder="H100-80GB" /></label>
                            <label>"From " <input name="valid_from" type="date" required=true /></label>
                            <button type="submit">"Add model"</button>
                            <button type="submit" name="intent" value="preview">"Preview impact"</button>
                        </form>
                        <form method="post" action="/ui/inventory/profiles" class="inline-form" id="add-profile">
                            <input type="hidden" name="csrf" value=csrf.clone() />
                            <label>"Kind " <select name="kind"><option value="mig">"MIG"</option><option value="vgpu">"vGPU"</option></select></label>
                            <label>"GPU model " <input name="model" required=true placeholder="NVIDIA A100-SXM4-40GB" /></label>
                            <label>"Profile " <input name="profile" required=true placeholder="3g.20gb" /></label>
                            <label>"Fraction of a GPU " <input name="fraction" required=true placeholder="3/7" size="6" /></label>
                            <label>"From " <input name="valid_from" type="date" required=true /></label>
                            <button type="submit">"Add profile"</button>
                            <button type="submit" name="intent" value="preview">"Preview impact"</button>
                        </form>
                        <form method="post" action="/ui/inventory/timeslicing" class="inline-form" id="add-timeslicing">
                            <input type="hidden" name="csrf" value=csrf.clone() />
                            <label>"Cluster " <input name="cluster" required=true placeholder="prod-west" /></label>
                            <label>"Time-slicing config " <input name="name" required=true placeholder="l4-x4" /></label>
                            <label>"Replicas " <input name="replicas" type="number" min="1" max="1024" required=true size="4" /></label>
                            <label>"From " <input name="valid_from" type="date" required=true /></label>
                            <button type="submit">"Add time-slicing"</button>
                            <button type="submit" name="intent" value="preview">"Preview impact"</button>
                        </form>
                        {if inventory.is_empty() { view! { <p class="empty">"Nothing approved yet."</p> }.into_any() } else { view! {
                            <table><thead><tr><th>"Kind"</th><th>"Name"</th><th>"Class"</th><th>"GPU fraction"</th><th>"Valid from"</th><th>"Valid to"</th></tr></thead>
                            <tbody>{inventory.iter().map(|r| view! {
                                <tr><td>{r.kind.clone()}</td><td>{r.name.clone()}</td><td>{r.class.clone().unwrap_or_default()}</td><td>{r.fraction.clone().unwrap_or_default()}</td><td>{when(&r.valid_from)}</td><td>{when_some(&r.valid_to)}</td></tr>
                            }).collect_view()}</tbody></table>
                        }.into_any() }}
                    </section>
                    <section class="panel" id="ownership">
                        <h2>"Namespaces → tenants, with history"</h2>
                        <p class="muted">"Reassign a namespace from a date and time (UTC): the owner in force then keeps everything before it. Open months change at once; a closed month stays as closed and the next close adds correction lines."</p>
                        {(!tenants.is_empty()).then(|| view! {
                            <form method="post" action="/ui/tenancy/reassign" class="inline-form" id="reassign">
                                <input type="hidden" name="csrf" value=csrf.clone() />
                                <label>"Cluster " <input name="cluster" required=true placeholder="prod-west" size="12" /></label>
                                <label>"Namespace " <input name="namespace" required=true placeholder="nlp-train" size="14" /></label>
                                <label>"to " <select name="tenant">{tenants.iter().map(|t| view! {
                                    <option value=t.name.clone()>{format!("{} ({})", t.name, t.department)}</option>
                                }).collect_view()}</select></label>
                                <label>"from (UTC) " <input name="valid_from" type="datetime-local" required=true /></label>
                                <label>"Why " <input name="reason" required=true placeholder="team moved on the 16th" size="24" /></label>
                                <button type="submit">"Reassign from…"</button>
                            </form>
                        })}
                        <h3>"Namespaces without labels"</h3>
                        <p class="muted">"A namespace that neither its labels nor a reassignment give an owner takes the most specific rule in force: an exact name before a prefix, a longer prefix first."</p>
                        {(!tenants.is_empty()).then(|| view! {
                            <form method="post" action="/ui/tenancy/rules" class="inline-form" id="add-rule">
                                <input type="hidden" name="csrf" value=csrf.clone() />
                                <label>"Cluster " <input name="cluster" placeholder="(every cluster)" size="12" /></label>
                                <label>"Name " <select name="match"><option value="prefix">"starts with"</option><option value="exact">"is"</option></select></label>
                                <input name="pattern" required=true placeholder="ml-" size="12" />
                                <label>"→ " <select name="tenant">{tenants.iter().map(|t| view! {
                                    <option value=t.name.clone()>{t.name.clone()}</option>
                                }).collect_view()}</select></label>
                                <label>"From " <input name="valid_from" type="date" required=true /></label>
                                <label>"Why " <input name="reason" required=true size="20" /></label>
                                <button type="submit">"Add rule"</button>
                            </form>
                        })}
                        {if rules.is_empty() { view! { <p class="empty">"No rules: namespaces are owned through their labels."</p> }.into_any() } else { view! {
                            <table><thead><tr><th>"Cluster"</th><th>"Name"</th><th>"Tenant"</th><th>"From"</th><th>"To"</th></tr></thead>
                            <tbody>{rules.iter().map(|r| view! {
                                <tr><td>{r.cluster.clone().unwrap_or_else(|| "every cluster".into())}</td><td>{format!("{} {}", if r.match_kind == "exact" { "is" } else { "starts with" }, r.pattern)}</td><td>{r.tenant.clone()}</td><td>{when(&r.valid_from)}</td><td>{when_some(&r.valid_to)}</td></tr>
                            }).collect_view()}</tbody></table>
                        }.into_any() }}
                        <h3>"History"</h3>
                        {if tenancy.is_empty() { view! { <p class="empty">"No namespace is owned yet."</p> }.into_any() } else { view! {
                            <table><thead><tr><th>"Department"</th><th>"Tenant"</th><th>"Cluster"</th><th>"Namespace"</th><th>"From"</th><th>"To"</th><th>"Source"</th></tr></thead>
                            <tbody>{tenancy.iter().map(|r| view! {
                                <tr><td>{r.department.clone()}</td><td>{r.tenant.clone()}</td><td>{r.cluster.clone()}</td><td>{r.namespace.clone()}</td><td>{when(&r.valid_from)}</td><td>{when_some(&r.valid_to)}</td><td>{r.source.clone()}</td></tr>
                            }).collect_view()}</tbody></table>
                        }.into_any() }}
                    </section>
                }.into_any(),
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
                let mut url = "/api/v1/audit?limit=100".to_string();
                match action.clone().filter(|a| !a.is_empty()) {
                    Some(a) => url.push_str(&format!("&action={}", q(&a))),
                    // Agents' once-a-minute token use would push everything else off the first page: one row per
                    // token and day, with a count, unless every use is asked for.
                    None if !routine => url.push_str("&token_use=fold"),
                    None => {}
                }
                if let Some(b) = before.filter(|b| !b.is_empty()) {
                    url.push_str(&format!("&before={}", q(&b)));
                }
                let mut log: AuditLog = api(&url).await.map_err(Err)?;
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
                                    <tr><td>{match &r.first_at { Some(first) if r.count > 1 => view! { {when(first)} " – " {when(&r.at)} }.into_any(), _ => when(&r.at) }}</td><td>{r.actor.clone()}</td><td>{r.action.clone()}{(r.count > 1).then(|| format!(" × {}", r.count))}</td><td>{r.target.clone()}</td><td>{r.reason.clone()}</td><td>{r.source.clone()}</td></tr>
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

/// A limit as the settings page shows it.
fn limit(v: Option<i64>, unit: &str) -> String {
    v.map(|n| format!("{n} {unit}")).unwrap_or_else(|| "no limit".into())
}

/// `/admin/organization`: the organization's settings (display name, default currency, data retention, the platform's
/// journal account) and, read-only, the limits its operator set.
#[component]
pub fn OrganizationPage() -> impl IntoView {
    let data = async move {
        match admin("/admin/organization").await {
            Access::Admin(session) => {
                let settings: OrganizationSettings = api("/api/v1/organization/settings").await.map_err(Err)?;
                Ok((session, settings))
            }
            other => Err(Ok(other)),
        }
    };
    view! {
        <Title text="Organization settings — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(Ok(Access::SignIn(to))) => view! { <Redirect path=to /> }.into_any(),
                Err(Ok(_)) => forbidden("The admin pages are for admins."),
                Err(Err(e)) => error_panel(&e),
                Ok((session, s)) => view! {
                    <section class="panel"><h1>"Organization"</h1><AdminNav /></section>
                    <section class="panel">
                        <h2>"Settings"</h2>
                        <p class="muted">"Organization " <code>{s.slug.clone()}</code> " (" {s.state.as_str()} "). "
                            {(!s.updated_by.is_empty()).then(|| format!("Last changed by {} at {} UTC.", s.updated_by, s.updated_at))}</p>
                        <form method="post" action="/ui/organization/settings" class="stack" id="settings-form">
                            <input type="hidden" name="csrf" value=session.csrf.clone() />
                            <label>"Display name " <input name="display_name" required=true maxlength="200" value=s.display_name.clone() /></label>
                            <label>"Default currency (ISO 4217) " <input name="default_currency" required=true pattern="[A-Z]{3}" maxlength="3"
                                title="three uppercase letters, such as USD or EUR" value=s.default_currency.clone() /></label>
                            <label>"Data retention (months, 12 to 120) " <input name="retention_months" type="number" required=true min="12" max="120"
                                value=s.retention_months.to_string() /></label>
                            <label>"Time zone (IANA, e.g. Europe/Berlin) " <input name="time_zone" id="time-zone" maxlength="64" required=true
                                pattern="[A-Za-z0-9/_+-]+" title="an IANA time zone such as Asia/Tokyo, Europe/Berlin or UTC" value=s.time_zone.clone() /></label>
                            <p class="muted">"A period is this zone's calendar month, from local midnight of the 1st. A change applies from the next open month; closed months keep theirs (the first month after a change continues from where the last closed month ended, so no hour is charged twice or lost)."</p>
                            <fieldset>
                                <legend>"Platform account (journal credits)"</legend>
                                <p class="muted">"The month's journal (" <code>"/api/v1/exports/journal.csv"</code> ") debits each department's account and credits the platform's with what it recovered. Empty: not set (the journal still balances and says what is missing)."</p>
                                <label>"GL account " <input name="platform_gl_account" maxlength="64" placeholder="4900-GPU-RECOVERY"
                                    value=s.platform_gl_account.clone().unwrap_or_default() /></label>
                                <label>"Cost centre " <input name="platform_cost_center" maxlength="64" placeholder="CC-PLATFORM"
                                    value=s.platform_cost_center.clone().unwrap_or_default() /></label>
                            </fieldset>
                            <button type="submit">"Save settings"</button>
                        </form>
                    </section>
                    <section class="panel">
                        <h2>"Limits"</h2>
                        <p class="muted">"Set by your operator; ask them to change these."</p>
                        <table class="limits">
                            <tbody>
                                <tr><th>"API requests per minute"</th><td>{limit(s.limits.rate_limit_per_minute, "per minute")}</td></tr>
                                <tr><th>"Ingest volume per day (UTC)"</th><td>{limit(s.limits.ingest_facts_per_day, "facts per day")}</td></tr>
                                <tr><th>"Facts received today"</th><td class="num">{s.limits.ingest_facts_today}</td></tr>
                            </tbody>
                        </table>
                    </section>
                }.into_any(),
            }}
        </Awaited>
    }
}

/// The month a cloud bill is imported for: the one asked (`?period=`), else the oldest open month that has begun
/// (last month, while it awaits its close), else this month.
async fn bill_period(asked: Option<String>) -> String {
    if let Some(p) = asked.filter(|p| is_month(p)) {
        return p;
    }
    let now = crate::ui::now();
    let this = format!("{:04}-{:02}", now.year(), u8::from(now.month()));
    let open = match handle() {
        Ok(h) => h.0.periods().await.ok().and_then(|rows| {
            rows.into_iter()
                .filter(|r| r.state == gpuledger_api::states::PeriodState::Open && r.period <= this)
                .map(|r| r.period)
                .min()
        }),
        Err(_) => None,
    };
    open.unwrap_or(this)
}

/// `/admin/costs`: the month's cloud bill — upload a FOCUS export (CSV or gzip), see what matched the GPU nodes by
/// provider resource ID, what did not, and the findings with their fixes.
#[component]
pub fn CostsPage() -> impl IntoView {
    let (asked, imported) =
        use_query_map().with_untracked(|m| (m.get("period"), m.get("imported").is_some_and(|v| v == "1")));
    let data = async move {
        match admin("/admin/costs").await {
            Access::Admin(session) => {
                let period = bill_period(asked).await;
                let answer = handle()
                    .map_err(Err)?
                    .0
                    .api("GET", format!("/api/v1/costs/imports?period={}", q(&period)), None)
                    .await;
                let import: Option<CostImport> = match answer {
                    Ok(a) if a.status == 404 => None,
                    Ok(a) => Some(a.json().map_err(Err)?),
                    Err(e) => return Err(Err(e)),
                };
                Ok((session, period, import))
            }
            other => Err(Ok(other)),
        }
    };
    view! {
        <Title text="Cloud bill — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(Ok(Access::SignIn(to))) => view! { <Redirect path=to /> }.into_any(),
                Err(Ok(_)) => forbidden("The admin pages are for admins."),
                Err(Err(e)) => error_panel(&e),
                Ok((session, period, import)) => view! {
                    <section class="panel"><h1>"Cloud bill"</h1><AdminNav />
                        <p class="muted">"Import the month's FOCUS export from AWS, Azure or Google Cloud (FOCUS 1.0–1.3, CSV or .csv.gz). Bill lines are matched to GPU nodes by provider resource ID (each node's "<code>"spec.providerID"</code>"); a cost policy class priced at actual cost then splits the matched nodes' EffectiveCost over its GPU-hours. Importing again replaces the month's import; a closed month is never changed."</p>
                        <form method="get" action="/admin/costs" class="filters">
                            <label>"Month " <input name="period" value=period.clone() pattern="[0-9]{4}-[0-9]{2}" maxlength="7" /></label>
                            <button type="submit">"Show"</button>
                        </form>
                        <form method="post" enctype="multipart/form-data" id="bill-upload" class="stack"
                            action=format!("/ui/costs/import?period={}&csrf={}", q(&period), q(&session.csrf))>
                            <label>"FOCUS export for " {period.clone()} " " <input type="file" name="bill" required=true accept=".csv,.gz,text/csv,application/gzip" /></label>
                            <button type="submit">"Import bill"</button>
                        </form>
                    </section>
                    {match import {
                        None => view! { <section class="panel"><p class="empty" id="no-bill">{format!("No bill imported for {period}.")}</p></section> }.into_any(),
                        Some(b) => view! {
                            <section class="panel" id="bill-summary">
                                <h2>{format!("Bill for {}", b.period)}</h2>
                                {imported.then(|| view! { <p class="notice" role="status">"Imported."</p> })}
                                <table class="limits"><tbody>
                                    <tr><th>"Imported"</th><td>{when(&b.imported_at)} " by " {b.imported_by.clone()}</td></tr>
                                    <tr><th>"FOCUS version"</th><td>{b.focus_version.clone()}</td></tr>
                                    <tr><th>"Lines read"</th><td class="num">{b.lines_read}</td></tr>
                                    <tr><th>"Lines outside the month"</th><td class="num">{b.lines_outside_period}</td></tr>
                                    <tr><th>"Matched to GPU nodes (EffectiveCost)"</th><td class="num" id="matched-cost">{format!("{} {}", b.matched_cost, b.currency)}</td></tr>
                                    <tr><th>"Not matched"</th><td class="num" id="unmatched-cost">{format!("{} {}", b.unmatched_cost, b.currency)}</td></tr>
                                </tbody></table>
                            </section>
                            <section class="panel">
                                <h2>"Findings"</h2>
                                {if b.findings.is_empty() { view! { <p class="empty">"Nothing to look at: every GPU node with a provider ID has bill lines and every virtual machine on the bill is a GPU node."</p> }.into_any() } else { view! {
                                    <ul class="findings">{b.findings.iter().map(|f| view! {
                                        <li><strong>{f.kind.as_str()}</strong>" "<code>{f.subject.clone()}</code>": "{f.detail.clone()}<br /><span class="muted">{f.fix.clone()}</span></li>
                                    }).collect_view()}</ul>
                                }.into_any() }}
                            </section>
                            <section class="panel">
                                <h2>"Matched GPU nodes"</h2>
                                {if b.matched.is_empty() { view! { <p class="empty">"No bill line names a GPU node."</p> }.into_any() } else { view! {
                                    <table id="matched"><thead><tr><th>"Cluster"</th><th>"Node"</th><th>"Resource"</th><th class="num">"Lines"</th><th class="num">"EffectiveCost"</th><th class="num">"BilledCost"</th></tr></thead>
                                    <tbody>{b.matched.iter().map(|m| view! {
                                        <tr><td>{m.cluster.clone()}</td><td>{m.node.clone()}</td><td><code>{m.resource_id.clone()}</code></td><td class="num">{m.lines}</td><td class="num">{m.effective_cost.clone()}</td><td class="num">{m.billed_cost.clone()}</td></tr>
                                    }).collect_view()}</tbody></table>
                                }.into_any() }}
                            </section>
                            <section class="panel">
                                <h2>"Not matched (costliest first)"</h2>
                                {if b.unmatched.is_empty() { view! { <p class="empty">"Everything on the bill matched a GPU node."</p> }.into_any() } else { view! {
                                    <table id="unmatched"><thead><tr><th>"Resource"</th><th>"Service"</th><th class="num">"Lines"</th><th class="num">"EffectiveCost"</th></tr></thead>
                                    <tbody>{b.unmatched.iter().map(|u| view! {
                                        <tr><td><code>{u.resource_id.clone().unwrap_or_else(|| "(no resource ID, or the rest)".into())}</code></td><td>{u.service_name.clone()}</td><td class="num">{u.lines}</td><td class="num">{u.effective_cost.clone()}</td></tr>
                                    }).collect_view()}</tbody></table>
                                }.into_any() }}
                            </section>
                        }.into_any(),
                    }}
                }.into_any(),
            }}
        </Awaited>
    }
}
