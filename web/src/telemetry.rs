//! `/admin/telemetry`: which clusters and nodes send telemetry, at what cadence, and what keeping it costs
//! (`GET /api/v1/telemetry/coverage`). Nodes that are silent or partial come first, with what to do.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{components::Redirect, hooks::use_query_map};

use gpuledger_api::telemetry::{Coverage, CoverageRow, CoverageStatus};

use crate::{
    admin::{Access, AdminNav, admin},
    reads::{Read, read},
    ui::{Awaited, error_panel, forbidden, q, when},
};

/// Nodes shown per page.
const PER_PAGE: usize = 100;

fn status(s: CoverageStatus) -> &'static str {
    match s {
        CoverageStatus::Reporting => "reporting",
        CoverageStatus::Partial => "partial",
        CoverageStatus::Silent => "silent",
    }
}

/// Bytes as people read them (MB / GB, decimal).
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{:.1} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b => format!("{:.0} kB", b as f64 / 1e3),
    }
}

fn row_view(r: &CoverageRow, with_node: bool) -> impl IntoView + use<> {
    let state = status(r.status);
    view! {
        <tr class=format!("coverage-{state}")>
            <td>{r.cluster.clone()}</td>
            {with_node.then(|| view! { <td>{r.node.clone().unwrap_or_default()}</td> })}
            <td class="num">{r.gpus}</td>
            <td class="num">{r.mig_instances}</td>
            <td class="num">{r.gpu_hours_held.clone()}</td>
            <td class="num">{r.gpu_hours_with_telemetry.clone()}</td>
            <td class="num">{r.windows}</td>
            <td class="num">{r.median_window_secs.clone().unwrap_or_else(|| "—".into())}</td>
            <td class="num">{size(r.bytes_full_resolution)}</td>
            <td class="num">{size(r.bytes_hourly)}</td>
            <td>{when(r.last_hour.as_deref().unwrap_or_default())}</td>
            <td>{state}{r.fix.clone().map(|f| view! { <br /><span class="muted">{f}</span> })}</td>
        </tr>
    }
}

/// `/admin/telemetry?period=YYYY-MM&page=N`.
#[component]
pub fn TelemetryPage() -> impl IntoView {
    let (period, page) = use_query_map().with_untracked(|m| {
        (m.get("period").filter(|p| !p.is_empty()), m.get("page").and_then(|p| p.parse::<usize>().ok()).unwrap_or(1))
    });
    let data = async move {
        match admin("/admin/telemetry").await {
            Access::Admin(_) => {
                let mut c: Coverage = read(Read::Coverage(period.clone())).await.map_err(Err)?;
                // Nodes that need a look first, then by cluster and node.
                c.nodes.sort_by_key(|r| (r.status == CoverageStatus::Reporting, r.cluster.clone(), r.node.clone()));
                Ok(c)
            }
            other => Err(Ok(other)),
        }
    };
    view! {
        <Title text="Telemetry coverage — GPU Ledger" />
        <Awaited future=data let:data>
            {match data.clone() {
                Err(Ok(Access::SignIn(to))) => view! { <Redirect path=to /> }.into_any(),
                Err(Ok(_)) => forbidden("The admin pages are for admins."),
                Err(Err(e)) => error_panel(&e),
                Ok(c) => {
                    let attention = c.nodes.iter().filter(|r| r.status != CoverageStatus::Reporting).count();
                    let pages = c.nodes.len().div_ceil(PER_PAGE).max(1);
                    let page = page.clamp(1, pages);
                    let shown: Vec<CoverageRow> = c.nodes.iter().skip((page - 1) * PER_PAGE).take(PER_PAGE).cloned().collect();
                    let total = c.nodes.len();
                    let link = |p: usize| format!("/admin/telemetry?period={}&page={p}", q(&c.period));
                    let (prev, next) = ((page > 1).then(|| link(page - 1)), (page < pages).then(|| link(page + 1)));
                    view! {
                        <section class="panel"><h1>"Telemetry coverage"</h1><AdminNav />
                            <form method="get" action="/admin/telemetry" class="filters">
                                <label>"Month " <input name="period" value=c.period.clone() placeholder="YYYY-MM" /></label>
                                <button type="submit">"Show"</button>
                            </form>
                            <p class="muted">{format!("{} to {} (UTC). Windows are what the node agents sent; GPU-hours held come from the allocations. Sizes are what the database keeps: full-resolution blocks and hourly sums.", c.starts_at, c.ends_at)}</p>
                            {if c.clusters.is_empty() { view! {
                                <p class="empty">"No telemetry and no allocations this month. Install the node agent (gpuledger-agent node) on your GPU nodes, or point it at DCGM Exporter."</p>
                            }.into_any() } else { view! {
                                <h2>"Clusters"</h2>
                                <table class="coverage"><thead><tr><th>"Cluster"</th><th>"GPUs"</th><th>"MIG instances"</th><th>"GPU-hours held"</th><th>"GPU-hours with telemetry"</th><th>"Windows"</th><th>"Median window (s)"</th><th>"Full resolution"</th><th>"Hourly"</th><th>"Latest hour"</th><th>"Status"</th></tr></thead>
                                <tbody>{c.clusters.iter().map(|r| row_view(r, false)).collect_view()}</tbody></table>
                                <h2>{format!("Nodes ({total}; {attention} need a look)")}</h2>
                                <table class="coverage"><thead><tr><th>"Cluster"</th><th>"Node"</th><th>"GPUs"</th><th>"MIG instances"</th><th>"GPU-hours held"</th><th>"GPU-hours with telemetry"</th><th>"Windows"</th><th>"Median window (s)"</th><th>"Full resolution"</th><th>"Hourly"</th><th>"Latest hour"</th><th>"Status"</th></tr></thead>
                                <tbody>{shown.iter().map(|r| row_view(r, true)).collect_view()}</tbody></table>
                                <nav class="pager">
                                    {prev.map(|h| view! { <a href=h rel="prev">"← Previous"</a> })}
                                    <span>{format!(" page {page} of {pages} ")}</span>
                                    {next.map(|h| view! { <a href=h rel="next">"Next →"</a> })}
                                </nav>
                            }.into_any() }}
                        </section>
                    }.into_any()
                }
            }}
        </Awaited>
    }
}
