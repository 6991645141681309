//! `/admin/inventory`: the approved GPU inventory, tenancy and ownership, with a change's impact previewed before it is saved.

use super::*;

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
                        let impact = match (handle(), param("period", &p.period)) {
                            (Ok(h), Ok(period)) => {
                                h.0.inventory_impact(MonthParams { period }, p.body.clone())
                                    .await
                                    .map_err(PortalError::from)
                            }
                            (Err(e), _) | (_, Err(e)) => Err(e),
                        };
                        Some((p, impact))
                    }
                    None => None,
                };
                let h = handle().map_err(Err)?;
                let inventory = h.0.admin_inventory().await.map_err(Err)?;
                let tenancy = h.0.admin_tenancy().await.map_err(Err)?;
                let tenants: Items<Tenant> = read(Read::Tenants()).await.map_err(Err)?;
                let departments: Items<Department> = read(Read::Departments()).await.map_err(Err)?;
                let rules: Items<NamespaceRule> = read(Read::NamespaceRules()).await.map_err(Err)?;
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
