//! The HTTP application: routes, middleware, state, and the serve loop with graceful shutdown.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, extract::FromRef, http::StatusCode};
use gpuledger_core::ids::OrgId;
use gpuledger_web::{App, PortalDataHandle, ResponseStatus, shell};
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, ResponseOptions, generate_route_list};
use tower_http::{
    limit::RequestBodyLimitLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    timeout::TimeoutLayer,
    trace::TraceLayer,
};

use crate::{auth, db::Database, health, ingest, openapi, portal::DbPortalData};

/// Limits and options of the HTTP layer.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Requests taking longer are answered 408.
    pub request_timeout: Duration,
    /// Bodies larger than this are answered 413.
    pub body_limit: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self { request_timeout: Duration::from_secs(30), body_limit: 16 * 1024 * 1024 }
    }
}

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    /// The database door.
    pub db: Database,
    /// The organization the portal shows without sign-in (the demo's), if any.
    pub featured_org: Option<OrgId>,
    /// Leptos's options (needed by its router integration).
    pub leptos: LeptosOptions,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

/// Leptos options for a server-rendered portal (no client bundle yet).
pub fn leptos_options() -> LeptosOptions {
    LeptosOptions::builder().output_name(Arc::<str>::from("gpuledger")).build()
}

/// What every portal render gets in context: the data source and a way to set the response status.
fn portal_context(state: &AppState) -> impl Fn() + Clone + Send + Sync + 'static {
    let portal_data = PortalDataHandle::new(DbPortalData::new(state.db.clone(), state.featured_org));
    move || {
        provide_context(portal_data.clone());
        provide_context(ResponseStatus(Arc::new(|code| {
            if let (Some(options), Ok(status)) = (use_context::<ResponseOptions>(), StatusCode::from_u16(code)) {
                options.set_status(status);
            }
        })));
    }
}

/// The whole application router.
pub fn router(state: AppState, http: &HttpOptions) -> Router {
    let leptos_options = state.leptos.clone();
    let portal = Router::<AppState>::new().leptos_routes_with_context(
        &state,
        generate_route_list(App),
        portal_context(&state),
        move || shell(leptos_options.clone()),
    );
    let fallback_options = state.leptos.clone();
    Router::new()
        .merge(health::router())
        .merge(ingest::router())
        .merge(crate::analytics::router())
        .merge(crate::policy::router())
        .merge(crate::ledger::router())
        .merge(crate::close::router())
        .merge(crate::disputes::router())
        .merge(auth::router())
        .merge(openapi::router())
        .merge(portal)
        // Unknown paths render the portal's own not-found page (status 404).
        .fallback(leptos_axum::render_app_to_stream_with_context(portal_context(&state), move || {
            shell(fallback_options.clone())
        }))
        .with_state(state)
        .layer(RequestBodyLimitLayer::new(http.body_limit))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, http.request_timeout))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
            let request_id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("-");
            tracing::info_span!("http", method = %request.method(), path = %request.uri().path(), request_id)
        }))
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}

/// Resolves when the process receives SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received, shutting down"),
        () = terminate => tracing::info!("SIGTERM received, shutting down"),
    }
}

/// Binds `listen` and serves until a shutdown signal; in-flight requests finish first.
pub async fn serve(listen: SocketAddr, app: Router) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let local = listener.local_addr()?;
    tracing::info!(address = %local, "listening; portal at http://{local}/");
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await
}
