//! `/admin/policies`: cost-policy drafts against the approved one, their impact, approval; quotas.

use super::*;

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
                let policies: PolicyList = read(Read::Policies()).await.map_err(Err)?;
                let quotas: QuotaList = read(Read::Quotas(QuotaParams { at: None })).await.map_err(Err)?;
                let period = impact_period(asked).await;
                let mut impacts = Vec::new();
                for d in policies.items.iter().filter(|p| p.state == gpuledger_api::states::PolicyState::Draft) {
                    let answer: Result<Impact, PortalError> = async {
                        let version = VersionPath { version: whole("version", i64::from(d.version))? };
                        read(Read::PolicyImpact(version, MonthParams { period: param("period", &period)? })).await
                    }
                    .await;
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
