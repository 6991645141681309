//! Pages.

use crate::ui::Awaited;
use leptos::prelude::*;
use leptos_meta::Title;

use crate::data::{OrgSummary, Overview, PortalDataHandle, PortalError};

/// The landing page: what GPU Ledger is, and the state of this installation.
#[component]
pub fn HomePage() -> impl IntoView {
    let data = use_context::<PortalDataHandle>();
    // Nothing about an organization is shown before sign-in.
    let overview = async move {
        match data {
            Some(handle) => match handle.0.session().await {
                Some(_) => handle.0.overview().await.map(Some),
                None => Ok(None),
            },
            None => Err(PortalError { message: "the portal has no data source configured".into() }),
        }
    };
    view! {
        <Title text="GPU Ledger — overview" />
        <section class="intro">
            <h1>"Who used the GPU, and what do they owe?"</h1>
            <p>
                "GPU Ledger records who held GPU capacity and when — whole GPUs, MIG instances, time-sliced "
                "replicas, vGPU and passthrough VMs, shared model servers — and turns it into ledgers that "
                "finance can reproduce, managers can understand and engineers can trace to the objects they came from."
            </p>
        </section>
        <Awaited future=overview let:result>
            {match result.clone() {
                Ok(Some(overview)) => view! { <OverviewPanel overview /> }.into_any(),
                Ok(None) => view! {
                    <section class="panel signin">
                        <h2>"Sign in to see your organization"</h2>
                        <p><a class="button primary" href="/login">"Sign in"</a></p>
                    </section>
                }.into_any(),
                Err(error) => view! {
                    <section class="panel error" role="alert">
                        <h2>"The overview could not be loaded"</h2>
                        <p>{error.message}</p>
                    </section>
                }.into_any(),
            }}
        </Awaited>
    }
}

/// System status and the visible organization's contents.
#[component]
pub fn OverviewPanel(
    /// The system's status and the organization's summary.
    overview: Overview,
) -> impl IntoView {
    let schema = overview.schema_version.map(|v| v.to_string()).unwrap_or_else(|| "none applied".into());
    view! {
        <section class="panel status">
            <h2>"This installation"</h2>
            <dl>
                <dt>"Database"</dt>
                <dd class:ok=overview.database_ok class:bad=!overview.database_ok>
                    {if overview.database_ok { "reachable" } else { "unreachable" }}
                </dd>
                <dt>"Schema version"</dt>
                <dd>{schema}</dd>
            </dl>
        </section>
        {match overview.organization {
            Some(org) => view! { <OrgPanel org /> }.into_any(),
            None => view! {
                <section class="panel empty">
                    <h2>"No organization yet"</h2>
                    <p>"An administrator creates an organization and onboards its first cluster. "
                       "Run " <code>"gpuledger-server demo"</code> " to explore with sample data."</p>
                </section>
            }.into_any(),
        }}
    }
}

/// What one organization holds.
#[component]
pub fn OrgPanel(
    /// The organization's counts.
    org: OrgSummary,
) -> impl IntoView {
    let rows = [
        ("Departments", org.departments),
        ("Tenants", org.tenants),
        ("Clusters", org.clusters),
        ("Approved GPU models", org.gpu_models),
        ("Allocation intervals", org.allocation_intervals),
    ];
    view! {
        <section class="panel org">
            <h2>{org.name} " " <span class="slug">{format!("({})", org.slug)}</span></h2>
            <table>
                <tbody>
                    {rows
                        .into_iter()
                        .map(|(label, n)| view! { <tr><th scope="row">{label}</th><td class="num">{n}</td></tr> })
                        .collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// Any path the portal does not know.
#[component]
pub fn NotFound() -> impl IntoView {
    if let Some(status) = use_context::<crate::data::ResponseStatus>() {
        status.set(404);
    }
    view! {
        <Title text="Not found — GPU Ledger" />
        <section class="panel">
            <h1>"Page not found"</h1>
            <p>"There is nothing at this address. " <a href="/">"Back to the overview"</a></p>
        </section>
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::data::{BoxFuture, PortalData};
    use futures::StreamExt;

    struct Fake(Result<Overview, PortalError>);

    impl PortalData for Fake {
        fn overview(&self) -> BoxFuture<'_, Result<Overview, PortalError>> {
            let result = self.0.clone();
            Box::pin(async move { result })
        }

        fn session(&self) -> BoxFuture<'_, Option<crate::SessionView>> {
            Box::pin(async {
                Some(crate::SessionView {
                    name: "ada@example.test".into(),
                    roles: vec!["viewer".into()],
                    org_name: "Acme AI".into(),
                    csrf: "c".into(),
                    departments: None,
                })
            })
        }
    }

    fn org() -> OrgSummary {
        OrgSummary {
            slug: "acme".into(),
            name: "Acme AI".into(),
            departments: 3,
            tenants: 7,
            clusters: 2,
            gpu_models: 4,
            allocation_intervals: 12345,
        }
    }

    /// Renders the home page with a fake data source, awaiting its data like the server does.
    async fn render_home(data: Fake) -> String {
        let _ = any_spawner::Executor::init_tokio();
        let owner = Owner::new();
        let stream = owner.with(|| {
            provide_context(PortalDataHandle::new(data));
            view! { <HomePage /> }.to_html_stream_in_order()
        });
        stream.collect::<Vec<String>>().await.concat()
    }

    #[tokio::test]
    async fn home_page_shows_the_organization_counts() {
        let html =
            render_home(Fake(Ok(Overview { database_ok: true, schema_version: Some(42), organization: Some(org()) })))
                .await;
        assert!(html.contains("Acme AI"), "{html}");
        assert!(html.contains(r#"<span class="slug">(acme)</span>"#), "{html}");
        assert!(html.contains(r#"<th scope="row">Allocation intervals</th><td class="num">12345</td>"#), "{html}");
        assert!(html.contains(">42<"), "{html}");
        assert!(html.contains(r#"class="ok""#), "{html}");
    }

    #[tokio::test]
    async fn home_page_says_when_data_cannot_be_loaded() {
        let html = render_home(Fake(Err(PortalError { message: "database is down for maintenance".into() }))).await;
        assert!(html.contains(r#"role="alert""#), "{html}");
        assert!(html.contains("database is down for maintenance"), "{html}");
        assert!(!html.contains("Allocation intervals"), "{html}");
    }

    #[tokio::test]
    async fn home_page_without_a_data_source_reports_it() {
        let _ = any_spawner::Executor::init_tokio();
        let html =
            Owner::new().with(|| view! { <HomePage /> }.to_html_stream_in_order()).collect::<Vec<_>>().await.concat();
        assert!(html.contains("no data source configured"), "{html}");
    }

    #[test]
    fn overview_panel_marks_an_unreachable_database_and_the_empty_state() {
        let html = view! {
            <OverviewPanel overview=Overview { database_ok: false, schema_version: None, organization: None } />
        }
        .to_html();
        assert!(html.contains("unreachable"), "{html}");
        assert!(html.contains(r#"class="bad""#), "{html}");
        assert!(html.contains("none applied"), "{html}");
        assert!(html.contains("No organization yet"), "{html}");
    }
}
