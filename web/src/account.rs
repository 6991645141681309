//! Sign-in and the role pages: the login page (OIDC or, for a demo organization, demo accounts), the header's
//! account bar with sign-out, and each role's landing page — admin (API tokens), finance (months),
//! department manager (their tenants' charges).

use crate::ui::Awaited;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{components::Redirect, hooks::use_query_map};

use crate::{
    data::{LoginOptions, PeriodRow, PortalDataHandle, PortalError, SessionView, TokenRow},
    ui::{grouped, when, when_or},
};

fn handle() -> Option<PortalDataHandle> {
    use_context::<PortalDataHandle>()
}

fn role_label(role: &str) -> &'static str {
    match role {
        "admin" => "admin",
        "finance" => "finance",
        "department_manager" => "department manager",
        "viewer" => "viewer",
        _ => "unknown role",
    }
}

/// The header's right side: who is signed in, and the sign-out button (a POST with the CSRF token).
#[component]
pub fn UserBar() -> impl IntoView {
    let session = crate::ui::session();
    view! {
        <Awaited future=session let:session>
            {match session.clone() {
                Some(s) => {
                    let roles = s.roles.iter().map(|r| role_label(r)).collect::<Vec<_>>().join(", ");
                    view! {
                        <div class="account">
                            <span class="who">{s.name.clone()} " · " {roles} " · " {s.org_name.clone()}</span>
                            <form method="post" action="/auth/logout" class="inline">
                                <input type="hidden" name="csrf" value=s.csrf.clone() />
                                <button type="submit">"Sign out"</button>
                            </form>
                        </div>
                    }
                    .into_any()
                }
                None => view! { <div class="account"><a href="/login">"Sign in"</a></div> }.into_any(),
            }}
        </Awaited>
    }
}

fn login_error_text(code: &str) -> &'static str {
    match code {
        "state" => {
            "The sign-in could not be completed: it did not match the one this browser started. Please try again."
        }
        "no_pending_login" => "The sign-in expired or was already used. Please start again.",
        "code" => {
            "The identity provider's answer was refused (the code was invalid or already used). Please start again."
        }
        "id_token" => "The identity provider's ID token did not validate. Please start again or contact your admin.",
        "refused" => "The identity provider refused the sign-in.",
        "no_role" => {
            "You are signed in at your identity provider, but none of your groups has a role here. Ask an admin."
        }
        "provider" => "The identity provider is not reachable right now. Please try again later.",
        "no_provider" => "This organization has no identity provider configured yet.",
        "unknown_org" => "There is no organization with that name.",
        "suspended" => {
            "This organization is suspended by its operator: sign-in is refused until it is resumed. Its data is kept."
        }
        _ => "The sign-in did not succeed. Please try again.",
    }
}

/// `/login`: how to sign in to the organization (`?org=SLUG`, else the featured one).
#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let (org, error, signed_out, next) =
        query.with_untracked(|q| (q.get("org"), q.get("error"), q.get("signed_out").is_some(), q.get("next")));
    let options = {
        let org = org.clone();
        async move {
            match handle() {
                Some(h) => h.0.login_options(org).await,
                None => Err(PortalError { message: "the portal has no data source configured".into() }),
            }
        }
    };
    view! {
        <Title text="Sign in — GPU Ledger" />
        <section class="panel login">
            <h1>"Sign in"</h1>
            {signed_out.then(|| view! { <p class="notice" role="status">"You are signed out."</p> })}
            {error.map(|e| view! { <p class="error" role="alert">{login_error_text(&e)}</p> })}
            <Awaited future=options let:options>
                {match options.clone() {
                    Ok(Some(o)) => view! { <LoginChoices options=o next=next.clone() /> }.into_any(),
                    Ok(None) => view! { <OrgPicker /> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }}
            </Awaited>
        </section>
    }
}

#[component]
fn OrgPicker() -> impl IntoView {
    view! {
        <form method="get" action="/login" class="org-picker">
            <label for="org">"Organization"</label>
            <input id="org" name="org" required=true placeholder="your-organization" />
            <button type="submit">"Continue"</button>
        </form>
    }
}

/// The sign-in choices. Each one is a form posted to this site (the server checks the Origin): a link alone never
/// starts a sign-in. `next` travels along; the server accepts it only as a path on this site.
#[component]
fn LoginChoices(options: LoginOptions, next: Option<String>) -> impl IntoView {
    let slug = options.org_slug.clone();
    let next_field = move || next.clone().map(|n| view! { <input type="hidden" name="next" value=n /> });
    let provider = options.provider.clone().map(|issuer| {
        view! {
            <form method="post" action="/auth/login">
                <input type="hidden" name="org" value=slug.clone() />
                {next_field()}
                <button type="submit" class="button primary" id="sign-in-oidc">
                    "Sign in with your identity provider"
                </button>
            </form>
            <p class="muted">"Provider: " {issuer}</p>
        }
    });
    let none = options.provider.is_none() && options.demo_accounts.is_empty();
    let demo = (!options.demo_accounts.is_empty()).then(|| {
        let slug = slug.clone();
        view! {
            <div class="demo-login">
                <h2>"Demo login"</h2>
                <p class="muted">
                    "This is sample data. Pick an account to see the portal as that role. Demo login is switched "
                    "off as soon as an identity provider is configured."
                </p>
                <ul>
                    {options
                        .demo_accounts
                        .into_iter()
                        .map(|(role, label)| {
                            let id = format!("demo-{role}");
                            view! {
                                <li>
                                    <form method="post" action="/auth/demo">
                                        <input type="hidden" name="org" value=slug.clone() />
                                        <input type="hidden" name="role" value=role.clone() />
                                        {next_field()}
                                        <button type="submit" id=id>{format!("Sign in as {label}")}</button>
                                    </form>
                                </li>
                            }
                        })
                        .collect_view()}
                </ul>
            </div>
        }
    });
    view! {
        <p>"Organization: " <strong>{options.org_name}</strong></p>
        {provider}
        {demo}
        {none.then(|| view! {
            <p class="empty">"No sign-in method is configured for this organization. An admin sets up the identity provider with an admin token (see the README)."</p>
        })}
    }
}

/// What a role page shows when the visitor is not allowed.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
enum Gate {
    SignIn(String),
    Forbidden(String),
    Allowed(SessionView),
}

async fn gate(path: &'static str, roles: &'static [&'static str], what: &'static str) -> Gate {
    match crate::ui::session().await {
        None => Gate::SignIn(format!("/login?next={path}")),
        Some(s) if roles.iter().any(|r| s.has(r)) => Gate::Allowed(s),
        Some(_) => Gate::Forbidden(what.to_string()),
    }
}

#[component]
pub(crate) fn TokensPanel(session: SessionView, tokens: Vec<TokenRow>) -> impl IntoView {
    let empty = tokens.is_empty();
    view! {
        <section class="panel">
            <h2>"API tokens"</h2>
            <p class="muted">
                "Agents, Power BI and automation use tokens. A token is shown once, when it is made; only its hash is kept."
            </p>
            <form method="post" action="/admin/tokens" class="token-form" id="create-token">
                <input type="hidden" name="csrf" value=session.csrf.clone() />
                <label>"Name " <input name="name" required=true placeholder="Power BI finance workspace" /></label>
                <label>
                    "Scope "
                    <select name="scope">
                        <option value="export">"export (read-only)"</option>
                        <option value="admin">"admin (automation)"</option>
                    </select>
                </label>
                <label>"Or agent/join for a cluster " <input name="cluster_scope" placeholder="join:prod-east" /></label>
                <label>"Departments (export only, comma-separated) " <input name="departments" /></label>
                <label>"Expires in days " <input name="expires_in_days" type="number" min="1" max="3650" /></label>
                <button type="submit">"Create token"</button>
            </form>
            {if empty {
                view! { <p class="empty">"No tokens yet."</p> }.into_any()
            } else {
                view! {
                    <table class="tokens">
                        <thead><tr>
                            <th>"Name"</th><th>"Scope"</th><th>"Created"</th><th>"Last used"</th><th>"Expires"</th><th>"State"</th>
                        </tr></thead>
                        <tbody>
                            {tokens.into_iter().map(|t| {
                                let scope = match (&t.cluster, t.departments.is_empty()) {
                                    (Some(c), _) => format!("{}:{c}", t.scope),
                                    (None, false) => format!("{} ({})", t.scope, t.departments.join(", ")),
                                    (None, true) => t.scope.clone(),
                                };
                                let action = format!("/admin/tokens/{}/revoke", t.id);
                                let csrf = session.csrf.clone();
                                view! {
                                    <tr>
                                        <td>{t.name.clone()}</td>
                                        <td>{scope}</td>
                                        <td>{when(&t.created_at)} " by " {t.created_by.clone()}</td>
                                        <td>{when_or(t.last_used_at.as_deref(), "never")}</td>
                                        <td>{when_or(t.expires_at.as_deref(), "never")}</td>
                                        <td>
                                            {if t.revoked {
                                                view! { <span class="bad">"revoked"</span> }.into_any()
                                            } else {
                                                view! {
                                                    <form method="post" action=action class="inline">
                                                        <input type="hidden" name="csrf" value=csrf />
                                                        <button type="submit">"Revoke"</button>
                                                    </form>
                                                }.into_any()
                                            }}
                                        </td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

/// `/finance`: finance's landing page — the months, their state and totals, and their evidence bundles.
#[component]
pub fn FinancePage() -> impl IntoView {
    let data = async move {
        let g = gate("/finance", &["finance", "admin"], "The finance page is for finance and admins.").await;
        let periods = match (&g, handle()) {
            (Gate::Allowed(_), Some(h)) => Some(h.0.periods().await),
            _ => None,
        };
        (g, periods)
    };
    view! {
        <Title text="Finance — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                (Gate::SignIn(to), _) => view! { <Redirect path=to /> }.into_any(),
                (Gate::Forbidden(what), _) => crate::ui::forbidden(&what),
                (Gate::Allowed(_), Some(Ok(periods))) => view! { <PeriodsPanel periods /> }.into_any(),
                (_, Some(Err(e))) => crate::ui::error_panel(&e),
                (Gate::Allowed(_), None) => crate::ui::error_panel(&PortalError { message: "no data source".into() }),
            }}
        </Awaited>
    }
}

#[component]
fn PeriodsPanel(periods: Vec<PeriodRow>) -> impl IntoView {
    let empty = periods.is_empty();
    view! {
        <section class="panel">
            <h1>"Finance"</h1>
            <h2>"Months"</h2>
            {if empty {
                view! { <p class="empty">"No month has data yet."</p> }.into_any()
            } else {
                view! {
                    <table class="periods">
                        <thead><tr><th>"Month"</th><th>"State"</th><th class="num">"Total"</th><th>"Closed"</th><th>"Evidence"</th></tr></thead>
                        <tbody>
                            {periods.into_iter().map(|p| {
                                let bundle = (p.state == gpuledger_api::states::PeriodState::Closed).then(|| {
                                    let href = format!("/api/v1/periods/{}/bundle", p.period);
                                    view! { <a href=href>"bundle"</a> }
                                });
                                let total = match (&p.total, &p.currency) {
                                    (Some(t), Some(c)) => format!("{} {c}", grouped(t)),
                                    _ => "—".into(),
                                };
                                view! {
                                    <tr>
                                        <td><a href=format!("/close/{}", p.period)>{p.period.clone()}</a></td>
                                        <td>{p.state.as_str()}</td>
                                        <td class="num">{total}</td>
                                        <td>{when_or(p.closed_at.as_deref(), "")}</td>
                                        <td>{bundle}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

/// The page shown once after an admin creates a token in the portal: the token itself, never shown again.
pub fn token_created_document(name: &str, scope: &str, token: &str) -> String {
    let body = view! {
        <section class="panel">
            <h1>"Token created"</h1>
            <p>"Token " <strong>{name.to_string()}</strong> " (" {scope.to_string()} "). Copy it now: it is shown only once."</p>
            <pre class="token" id="new-token">{token.to_string()}</pre>
            <p><a href="/admin">"Back to admin"</a></p>
        </section>
    }
    .to_html();
    document("Token created — GPU Ledger", &body)
}

/// The page shown once after an admin adds a cluster: its join token and the exact install commands.
pub fn join_token_document(cluster: &str, token: &str, server: &str) -> String {
    let command = format!(
        "gpuledger-agent join --server {server} --token {token} --secret gpuledger/gpuledger-agent-{cluster}\n\
         # or, outside Kubernetes: gpuledger-agent join --server {server} --token {token} --output /etc/gpuledger/{cluster}.token"
    );
    let body = view! {
        <section class="panel">
            <h1>{format!("Cluster {cluster}")}</h1>
            <p>"A one-time join token, valid 24 hours. Copy it now: it is shown only once."</p>
            <pre class="token" id="join-token">{token.to_string()}</pre>
            <h2>"Install the agent"</h2>
            <p>"On a machine with access to the cluster (or as a Kubernetes Job), exchange the token for the cluster's credential:"</p>
            <pre id="join-command">{command}</pre>
            <p>"The agent stores the credential it receives and then runs " <code>"gpuledger-agent cluster"</code> " (see docs/agent.md)."</p>
            <p><a href="/admin">"Back to admin"</a></p>
        </section>
    }
    .to_html();
    document("Join a cluster — GPU Ledger", &body)
}

/// The admin token form's error page.
pub fn token_form_error(message: &str) -> String {
    form_error_document(message, "/admin")
}

/// A form's error, as a small page with a way back.
pub fn form_error_document(message: &str, back: &str) -> String {
    let body = view! {
        <section class="panel error" role="alert">
            <h1>"That did not work"</h1>
            <p>{message.to_string()}</p>
            <p><a href=back.to_string()>"Back"</a></p>
        </section>
    }
    .to_html();
    document("Error — GPU Ledger", &body)
}

/// A small page that says one thing (a used or expired setup link, a suspended organization), with one link on.
pub fn notice_document(title: &str, message: &str, link: (&str, &str)) -> String {
    let body = view! {
        <section class="panel notice" role="status">
            <h1>{title.to_string()}</h1>
            <p>{message.to_string()}</p>
            <p><a href=link.0.to_string()>{link.1.to_string()}</a></p>
        </section>
    }
    .to_html();
    document(&format!("{title} — GPU Ledger"), &body)
}

fn document(title: &str, body: &str) -> String {
    let title = view! { <title>{title.to_string()}</title> }.to_html();
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"/>{title}<style>{}</style></head><body><main>{body}</main></body></html>",
        crate::STYLESHEET
    )
}
