//! The GPU Ledger portal: Leptos components rendered on the server by the same process.
//!
//! Pages get their data through [`PortalData`], a small trait the server places in Leptos context, so every
//! page renders in a test with a fake and no database. Every page works without JavaScript.
#![deny(missing_docs)]

pub mod data;
pub mod pages;
pub mod reads;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Title, provide_meta_context};
use leptos_router::{
    ParamSegment, SsrMode, StaticSegment,
    components::{Route, Router, Routes},
};

pub mod account;
pub mod admin;
pub mod foresight;
pub mod showback;
pub mod telemetry;
pub mod ui;
pub mod workflow;

pub use data::{
    LoginOptions, OrgSummary, Overview, PeriodRow, PortalData, PortalDataHandle, PortalError, ResponseStatus,
    SessionView, TokenRow,
};

/// The portal's stylesheet, inlined so the portal needs no asset pipeline.
pub const STYLESHEET: &str = include_str!("../style/portal.css");

/// The HTML document around the app: what the server streams for every portal route.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    let _ = options;
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <style>{STYLESHEET}</style>
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The portal's routes.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Title text="GPU Ledger" />
        <header class="top">
            <a class="brand" href="/">"GPU Ledger"</a>
            <nav>
                <a href="/">"Overview"</a>
                <a href="/departments">"Showback"</a>
                <a href="/disputes">"Disputes"</a>
                <a href="/finance">"Close"</a>
                <a href="/exports">"Exports"</a>
                <a href="/admin">"Admin"</a>
                <a href="/api/v1/openapi.json">"API"</a>
            </nav>
            <account::UserBar />
        </header>
        <Router>
            <main>
                <Routes fallback=pages::NotFound>
                    <Route path=StaticSegment("") view=pages::HomePage ssr=SsrMode::Async />
                    // Role pages answer only once their data is in, so a 403 or a redirect to sign-in can still
                    // set the status line.
                    <Route path=StaticSegment("login") view=account::LoginPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("admin") view=admin::AdminPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("identity")) view=admin::IdentityPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("policies")) view=admin::PoliciesPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("inventory")) view=admin::InventoryPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("audit")) view=admin::AuditPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("costs")) view=admin::CostsPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("telemetry")) view=telemetry::TelemetryPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("organization")) view=admin::OrganizationPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("notifications")) view=foresight::NotificationsPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("finance") view=account::FinancePage ssr=SsrMode::Async />
                    <Route path=StaticSegment("departments") view=showback::ShowbackPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("tenants"), ParamSegment("id")) view=showback::TenantPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("disputes") view=workflow::DisputesPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("disputes"), ParamSegment("id")) view=workflow::DisputePage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("close"), ParamSegment("period")) view=workflow::ClosePage ssr=SsrMode::Async />
                    <Route path=StaticSegment("exports") view=workflow::ExportsPage ssr=SsrMode::Async />
                </Routes>
            </main>
        </Router>
        <footer>"GPU Ledger " {env!("CARGO_PKG_VERSION")} " · who used the GPU, and what do they owe"</footer>
    }
}

#[cfg(test)]
mod render_tests;
