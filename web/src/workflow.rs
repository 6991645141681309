//! Disputes (list, thread, decisions), the month-end close (preview, close, hash, bundle) and the exports page.

use crate::ui::Awaited;
use gpuledger_api::{
    close::Findings,
    disputes::{DisputeDetail as Dispute, DisputePage},
    params::{DisputeListParams, DisputePath, DisputeState, PeriodPath},
    states::{AdjustmentState, FindingKind, PeriodState},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{
    components::Redirect,
    hooks::{use_params_map, use_query_map},
};

use crate::{
    data::{PortalError, SessionView},
    reads::{Read, month_ledger, param, read, whole},
    ui::{Confidence, error_panel, grouped, months_back, readable_time, session, set_status, when},
};

fn age(opened_at: &str) -> String {
    let Ok(t) = time::OffsetDateTime::parse(opened_at, &time::format_description::well_known::Rfc3339) else {
        return String::new();
    };
    let d = crate::ui::now() - t;
    if d.whole_days() >= 1 { format!("{} d", d.whole_days()) } else { format!("{} h", d.whole_hours().max(0)) }
}

/// `/disputes`: every dispute the caller may see, by state, with its age.
#[component]
pub fn DisputesPage() -> impl IntoView {
    let state = use_query_map().with_untracked(|m| m.get("state")).unwrap_or_default();
    let data = async move {
        if session().await.is_none() {
            return Err(None);
        }
        let params = DisputeListParams {
            state: if state.is_empty() { None } else { Some(param("state", &state).map_err(Some)?) },
            period: None,
            page: None,
            // The contract's largest page (it refuses more).
            per_page: Some(whole("per_page", 100).map_err(Some)?),
        };
        let list = read::<DisputePage>(Read::Disputes(params)).await.map_err(Some)?;
        Ok((state, list.items))
    };
    view! {
        <Title text="Disputes — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(None) => view! { <Redirect path="/login?next=/disputes" /> }.into_any(),
                Err(Some(e)) => error_panel(&e),
                Ok((state, items)) => view! {
                    <section class="panel">
                        <h1>"Disputes"</h1>
                        <nav class="tabs">
                            {["", "open", "accepted", "rejected"].into_iter().map(|st| {
                                let label = if st.is_empty() { "all" } else { st };
                                let href = if st.is_empty() { "/disputes".to_string() } else { format!("/disputes?state={st}") };
                                view! { <a href=href class:current=state == st>{label}</a> }
                            }).collect_view()}
                        </nav>
                        {if items.is_empty() {
                            view! { <p class="empty">"No disputes here."</p> }.into_any()
                        } else {
                            view! {
                                <table class="disputes">
                                    <thead><tr><th>"#"</th><th>"Month"</th><th>"State"</th><th>"Credit"</th><th class="num">"Disputed"</th><th>"Opened by"</th><th>"Age"</th></tr></thead>
                                    <tbody>{items.iter().map(|d| view! {
                                        <tr>
                                            <td><a href=format!("/disputes/{}", d.number)>{format!("#{}", d.number)}</a></td>
                                            <td>{d.period.clone()}</td>
                                            <td>{d.state.as_str()}</td>
                                            <td>{d.credit_state.clone().unwrap_or_default()}</td>
                                            <td class="num">{format!("{} {}", grouped(d.disputed_amount.as_deref().unwrap_or_default()), d.currency.clone().unwrap_or_default())}</td>
                                            <td>{d.opened_by.clone()}</td>
                                            <td>{let at = d.opened_at.clone(); let title = readable_time(&at).map(|t| format!("opened {t}"));
                                                view! { <time datetime=at.clone() title=title>{age(&at)}</time> }}</td>
                                        </tr>
                                    }).collect_view()}</tbody>
                                </table>
                            }.into_any()
                        }}
                    </section>
                }.into_any(),
            }}
        </Awaited>
    }
}

/// `/disputes/:id`: the disputed lines, the whole history, and the forms the caller's role allows.
#[component]
pub fn DisputePage() -> impl IntoView {
    let id = use_params_map().with_untracked(|p| p.get("id")).unwrap_or_default();
    let data = async move {
        let Some(session) = session().await else { return Err(None) };
        let d = match param("id", &id) {
            Ok(id) => read::<Dispute>(Read::Dispute(DisputePath { id })).await,
            Err(e) => Err(e),
        };
        match d {
            Ok(d) => Ok((session, d)),
            Err(_) => {
                // Not found or not visible: the same answer, which names nothing.
                set_status(404);
                Err(Some(PortalError { message: "No such dispute (or not one you can see).".into() }))
            }
        }
    };
    view! {
        <Title text="Dispute — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(None) => view! { <Redirect path="/login?next=/disputes" /> }.into_any(),
                Err(Some(e)) => error_panel(&e),
                Ok((session, d)) => view! { <DisputeDetail session d /> }.into_any(),
            }}
        </Awaited>
    }
}

#[component]
fn DisputeDetail(session: SessionView, d: Dispute) -> impl IntoView {
    let number = d.dispute.number.to_string();
    let open = d.dispute.state == DisputeState::Open;
    let decides = session.has("finance") || session.has("admin");
    let approves = session.has("finance");
    let participates = decides || session.has("department_manager");
    let credit_pending = d.credit.as_ref().is_some_and(|c| c.state == AdjustmentState::PendingApproval);
    let action = |what: &str| format!("/ui/disputes/{number}/{what}");
    let csrf = session.csrf.clone();
    let (lines, events, credit) = (d.lines.clone(), d.events.clone(), d.credit.clone());
    let d = d.dispute;
    view! {
        <section class="panel">
            <p><a href="/disputes">"← Disputes"</a></p>
            <h1>{format!("Dispute #{number}")}</h1>
            <dl>
                <dt>"State"</dt><dd id="dispute-state">{d.state.as_str()}</dd>
                <dt>"Month"</dt><dd>{d.period.clone()}</dd>
                <dt>"Opened"</dt><dd>{when(&d.opened_at)} " by " {d.opened_by.clone()}</dd>
                <dt>"Reason"</dt><dd>{d.reason.clone()}</dd>
                <dt>"Disputed"</dt><dd>{format!("{} {}", grouped(d.disputed_amount.as_deref().unwrap_or_default()), d.currency.clone().unwrap_or_default())}</dd>
                {credit.map(|c| view! {
                    <dt>"Credit"</dt>
                    <dd id="credit-state">{format!("{} {} — {}", grouped(&c.amount), c.currency, c.state)}
                        {c.applied_period.clone().filter(|p| !p.is_empty()).map(|p| format!(" (applied in {p})"))}</dd>
                })}
            </dl>
        </section>
        <section class="panel">
            <h2>"Disputed lines"</h2>
            <table class="lines"><thead><tr><th>"Tenant"</th><th>"Term"</th><th class="num">"Amount"</th><th>"Confidence"</th><th>"Explanation"</th></tr></thead>
                <tbody>{lines.iter().map(|l| view! {
                    <tr><td>{l.tenant.clone()}</td><td>{l.term.as_str()}</td><td class="num">{grouped(&l.amount)}</td>
                        <td><Confidence level=l.confidence /></td><td>{l.explanation.clone()}</td></tr>
                }).collect_view()}</tbody>
            </table>
        </section>
        <section class="panel">
            <h2>"History"</h2>
            <ol class="thread">{events.iter().map(|e| view! {
                <li><strong>{e.action.as_str()}</strong> " · " {e.actor.clone()} " · " {when(&e.at)}
                    {let b = e.body.clone(); (!b.is_empty()).then(|| view! { <p>{b.clone()}</p> })}</li>
            }).collect_view()}</ol>
            {(open && participates).then(|| view! {
                <form method="post" action=action("comment") class="stack">
                    <input type="hidden" name="csrf" value=csrf.clone() />
                    <label>"Comment "<textarea name="body" required=true rows="2"></textarea></label>
                    <button type="submit">"Add comment"</button>
                </form>
            })}
        </section>
        {(open && decides).then(|| view! {
            <section class="panel">
                <h2>"Decide"</h2>
                <form method="post" action=action("accept") class="stack" id="accept-form">
                    <input type="hidden" name="csrf" value=csrf.clone() />
                    <label>"Credit amount " <input name="credit_amount" required=true inputmode="decimal" placeholder="120.00" /></label>
                    <label>"Reason "<textarea name="reason" required=true rows="2"></textarea></label>
                    <button type="submit">"Accept with this credit"</button>
                </form>
                <form method="post" action=action("reject") class="stack">
                    <input type="hidden" name="csrf" value=csrf.clone() />
                    <label>"Reason "<textarea name="reason" required=true rows="2"></textarea></label>
                    <button type="submit">"Reject"</button>
                </form>
            </section>
        })}
        {(credit_pending && approves).then(|| view! {
            <section class="panel">
                <h2>"Credit awaiting finance's approval"</h2>
                <form method="post" action=action("credit-approve") class="stack" id="approve-form">
                    <input type="hidden" name="csrf" value=csrf.clone() />
                    <label>"Note "<input name="reason" /></label>
                    <button type="submit">"Approve the credit"</button>
                </form>
                <form method="post" action=action("credit-reject") class="stack">
                    <input type="hidden" name="csrf" value=csrf.clone() />
                    <label>"Reason "<input name="reason" required=true /></label>
                    <button type="submit">"Refuse the credit"</button>
                </form>
            </section>
        })}
    }
}

/// The details of a finding the close page explains, read as the server writes them (`ingest`, `ledger`): an
/// unpriced finding's reason and first allocations, an agent gap's dropped and recovered kinds.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct FindingDetails {
    reason: String,
    first: Vec<String>,
    allocations: Option<i64>,
    telemetry_lost: u64,
    recovered: bool,
    recovery: Option<GapRecovery>,
    kinds: Vec<KindCounts>,
    dropped: u64,
}

/// What a re-list brought back of an agent gap.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct GapRecovery {
    kinds: Vec<KindCounts>,
}

/// One kind of fact of an agent gap, with its counts.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct KindCounts {
    kind: String,
    count: u64,
    lost: u64,
    recovered: u64,
}

/// A finding's reason for people, with the first allocations it names (at most three, then how many more); an
/// agent gap says whether what it dropped came back.
fn finding_why(kind: FindingKind, details: &serde_json::Value) -> String {
    // Details the page cannot read are shown as no reason rather than hiding the finding.
    let d: FindingDetails = serde_json::from_value(details.clone()).unwrap_or_default();
    if kind == FindingKind::AgentGap {
        return gap_why(&d);
    }
    if d.first.is_empty() {
        return d.reason;
    }
    let named = &d.first;
    let total = d.allocations.unwrap_or(named.len() as i64);
    let shown = named.iter().take(3).map(String::as_str).collect::<Vec<_>>().join(", ");
    let more = total - named.len().min(3) as i64;
    let reason = &d.reason;
    if more > 0 { format!("{reason} — {shown} and {more} more") } else { format!("{reason} — {shown}") }
}

/// An agent gap for people: recovered (nothing to acknowledge; telemetry windows lost named) or not (what stays
/// lost, which closing the month must acknowledge).
fn gap_why(d: &FindingDetails) -> String {
    // `kind: n` for each kind whose count (chosen by `field`) is above 0.
    let list = |kinds: &[KindCounts], field: fn(&KindCounts) -> u64| -> Vec<String> {
        kinds.iter().filter(|k| field(k) > 0).map(|k| format!("{}: {}", k.kind, field(k))).collect()
    };
    let windows = d.telemetry_lost;
    let telemetry = if windows > 0 {
        format!("; {windows} telemetry window(s) lost for good (utilization, and energy where it is priced)")
    } else {
        String::new()
    };
    let recovery = d.recovery.as_ref().map(|r| r.kinds.as_slice());
    if d.recovered {
        if let Some(kinds) = recovery {
            let back = list(kinds, |k| k.recovered);
            format!("Recovered: a re-list stored the dropped facts again ({}){telemetry}", back.join(", "))
        } else {
            format!("Recovered: only telemetry windows were dropped{telemetry}")
        }
    } else if let Some(kinds) = recovery {
        let lost = list(kinds, |k| k.lost);
        let back = list(kinds, |k| k.recovered);
        let back = if back.is_empty() { String::new() } else { format!("; recovered {}", back.join(", ")) };
        format!(
            "Not recovered: a re-list did not bring back {}{back} — closing needs an acknowledgement",
            lost.join(", ")
        )
    } else {
        let dropped = list(&d.kinds, |k| k.count);
        let what = if dropped.is_empty() { format!("{} fact(s)", d.dropped) } else { dropped.join(", ") };
        format!("Not recovered: the agent dropped {what} — closing needs an acknowledgement")
    }
}

/// `/close/:period`: finance's preview of a month (totals, change from the month before, data-quality notes),
/// the close button, and after close the hash and the bundle.
#[component]
pub fn ClosePage() -> impl IntoView {
    let period = use_params_map().with_untracked(|p| p.get("period")).unwrap_or_default();
    let data = async move {
        let Some(session) = session().await else { return Err(None) };
        if !(session.has("finance") || session.has("admin")) {
            set_status(403);
            return Err(Some(PortalError { message: "The close is for finance and admins.".into() }));
        }
        // One line is enough: the totals cover every line.
        let ledger = month_ledger(&period, None, 1).await.map_err(Some)?;
        let previous = months_back(&period, 2).into_iter().next().unwrap_or_default();
        let before = month_ledger(&previous, None, 1).await.ok();
        let findings = match param("period", &period) {
            Ok(period) => read::<Findings>(Read::Findings(PeriodPath { period })).await.ok(),
            Err(_) => None,
        };
        Ok((session, period, previous, ledger, before, findings))
    };
    view! {
        <Title text="Close — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(None) => view! { <Redirect path="/login?next=/finance" /> }.into_any(),
                Err(Some(e)) => error_panel(&e),
                Ok((session, period, previous, ledger, before, findings)) => {
                    let finding_rows = findings.as_ref().map(|f| f.items.clone()).unwrap_or_default();
                    let needs_ack = findings.as_ref().map(|f| f.needs_acknowledgement.clone()).unwrap_or_default();
                    let acks = findings.as_ref().map(|f| f.acknowledgements.clone()).unwrap_or_default();
                    let finding_counts = findings.map(|f| f.by_kind).unwrap_or_default();
                    let closed = ledger.state == PeriodState::Closed;
                    let cur = ledger.currency.clone().unwrap_or_default();
                    let total = ledger.total.clone();
                    let prev_total = before.as_ref().map(|b| b.total.clone()).unwrap_or_default();
                    let notes = ledger.notes.clone();
                    view! {
                        <section class="panel">
                            <p><a href="/finance">"← Months"</a></p>
                            <h1>{format!("Close {period}")}</h1>
                            <dl>
                                <dt>"State"</dt><dd id="period-state">{ledger.state.as_str()}</dd>
                                <dt>"Total"</dt><dd>{format!("{} {cur}", grouped(&total))}</dd>
                                <dt>{format!("Total {previous}")}</dt><dd>{format!("{} {cur}", grouped(&prev_total))}</dd>
                                <dt>"Policy version"</dt><dd>{ledger.policy_version.map(|v| v.to_string()).unwrap_or_default()}</dd>
                            </dl>
                            <h2>"By term"</h2>
                            <table><tbody>{ledger.totals_by_term.clone().into_iter().map(|(k, v)| view! {
                                <tr><th scope="row">{k}</th><td class="num">{grouped(&v)}</td></tr>
                            }).collect_view()}</tbody></table>
                            <h2>"Data quality"</h2>
                            {if finding_counts.is_empty() {
                                view! { <p class="empty" id="no-findings">"No findings for this month: no inventory gaps, unpriced allocations, agent gaps, over-commit or unknown tenants."</p> }.into_any()
                            } else {
                                view! {
                                    <p>{finding_counts.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(" · ")}</p>
                                    <table class="findings"><thead><tr><th>"Kind"</th><th>"Cluster"</th><th>"Subject"</th><th>"From"</th><th>"To"</th><th>"Why"</th><th>"What to do"</th></tr></thead>
                                    <tbody>{finding_rows.iter().map(|f| view! {
                                        <tr><td>{f.kind.as_str()}</td><td>{f.cluster.clone()}</td><td>{f.subject.clone()}</td><td>{when(f.from.as_deref().unwrap_or_default())}</td><td>{when(f.to.as_deref().unwrap_or_default())}</td><td>{finding_why(f.kind, &f.details)}</td><td>{f.fix.clone().unwrap_or_default()}</td></tr>
                                    }).collect_view()}</tbody></table>
                                }.into_any()
                            }}
                            {notes.map(|notes| view! {
                                <details><summary>"Ledger notes"</summary>
                                <pre class="notes">{serde_json::to_string_pretty(&notes).unwrap_or_default()}</pre></details>
                            })}
                            {(!acks.is_empty()).then(|| view! {
                                <h2>"Acknowledged at close"</h2>
                                <ul id="acknowledgements">{acks.iter().map(|a| view! {
                                    <li>{when(&a.at)}{format!(" — {} ({}): {}", a.by, a.covered.join("; "), a.reason)}</li>
                                }).collect_view()}</ul>
                            })}
                            {if closed {
                                view! {
                                    <p>"Closed. Close hash: " <code id="close-hash">{ledger.hash.clone().unwrap_or_default()}</code></p>
                                    <p><a href=format!("/api/v1/periods/{period}/bundle")>"Download the evidence bundle"</a>
                                       " — verify it offline with " <code>"gpuledger-server verify FILE"</code></p>
                                }.into_any()
                            } else {
                                view! {
                                    <form method="post" action=format!("/ui/periods/{period}/close") id="close-form">
                                        <input type="hidden" name="csrf" value=session.csrf.clone() />
                                        <p class="muted">"Closing freezes the month's lines, computes the close hash and stores the evidence bundle. Later corrections land in the next month."</p>
                                        {(!needs_ack.is_empty()).then(|| view! {
                                            <div class="warning" id="needs-acknowledgement">
                                                <p><strong>"This month cannot be closed as it is: "</strong>{needs_ack.join("; ")}". Fix them (see Data quality above), or say why it may be closed anyway; your reason is recorded and audited."</p>
                                                <label>"Acknowledgement " <textarea name="acknowledge" required maxlength="2000" rows="3"></textarea></label>
                                            </div>
                                        })}
                                        <button type="submit">{format!("Close {period}")}</button>
                                    </form>
                                }.into_any()
                            }}
                        </section>
                    }.into_any()
                }
            }}
        </Awaited>
    }
}

/// `/exports`: download links and how to connect Power BI.
#[component]
pub fn ExportsPage() -> impl IntoView {
    let data = async move { session().await };
    view! {
        <Title text="Exports — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                None => view! { <Redirect path="/login?next=/exports" /> }.into_any(),
                Some(_) => {
                    let now = crate::ui::now();
                    let months = months_back(&format!("{:04}-{:02}", now.year(), u8::from(now.month())), 3);
                    view! {
                        <section class="panel">
                            <h1>"Exports"</h1>
                            <h2>"CSV"</h2>
                            <table class="exports"><thead><tr><th>"Month"</th><th>"Files"</th></tr></thead>
                                <tbody>{months.into_iter().rev().map(|m| view! {
                                    <tr><td>{m.clone()}</td><td>
                                        {["ledger", "allocations", "usage", "disputes", "focus"].into_iter().map(|f| view! {
                                            <a href=format!("/api/v1/exports/{f}.csv?period={m}")>{format!("{f}.csv")}</a>" "
                                        }).collect_view()}
                                    </td></tr>
                                }).collect_view()}</tbody>
                            </table>
                            <p class="muted">"UTF-8, RFC 4180, amounts with a decimal point, times in UTC. " <code>"focus.csv"</code>
                               " is the FinOps FOCUS dataset (" <code>"&version=1.0"</code> " for FOCUS 1.0)."</p>
                            <h2>"Power BI"</h2>
                            <ol>
                                <li>"Ask an admin for an export token (Admin → API tokens, scope export)."</li>
                                <li>"In Power BI Desktop: Get data → OData feed → the URL " <code id="odata-url">"/odata/"</code> " on this server (e.g. https://ledger.example.com/odata/)."</li>
                                <li>"Credentials: Basic — any user name, the token as the password."</li>
                            </ol>
                        </section>
                    }.into_any()
                }
            }}
        </Awaited>
    }
}
