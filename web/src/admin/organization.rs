//! `/admin/organization` (the organization's settings and its operator's limits) and `/admin/costs` (the cloud bill).

use super::*;

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
                let settings: OrganizationSettings = read(Read::Settings()).await.map_err(Err)?;
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
                let params = ImportParams { period: param("period", &period).map_err(Err)? };
                let import: Option<CostImport> = read_found(Read::CostImport(params)).await.map_err(Err)?;
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
