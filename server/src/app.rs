//! The HTTP application: routes, middleware, state, and the serve loop with graceful shutdown.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    extract::{ConnectInfo, Request, State},
    http::{HeaderName, HeaderValue, Method, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use gpuledger_web::{App, PortalDataHandle, ResponseStatus, shell};
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, ResponseOptions, generate_route_list};
use tower_http::{
    limit::RequestBodyLimitLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    set_header::SetResponseHeaderLayer,
    timeout::TimeoutLayer,
    trace::TraceLayer,
};

pub use crate::routes::api_routes;
pub use crate::state::{AppState, leptos_options};
use crate::{
    auth::{self, AuthState, session},
    error::AppError,
    health,
    pagecache::csp,
    portal::DbPortalData,
};

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

/// What every portal render gets in context: the data source and a way to set the response status.
fn portal_context(state: &AppState) -> impl Fn() + Clone + Send + Sync + 'static {
    let (db, featured, demo_mode) = (state.db.clone(), state.featured_org, state.auth.demo_mode);
    let services = state.clone();
    move || {
        // Per request: the data source reads as the person the request's session cookie names.
        let parts = use_context::<axum::http::request::Parts>();
        // A page rendered for keeping shows markers where the reader's own name and token go (crate::pagecache).
        let markers = parts.as_ref().and_then(|p| p.extensions.get::<crate::pagecache::RenderMarkers>().cloned());
        let headers = parts.map(|p| p.headers).unwrap_or_default();
        provide_context(PortalDataHandle::new(
            DbPortalData::for_request(db.clone(), featured, headers)
                .with_state(services.clone())
                .with_demo_mode(demo_mode)
                .with_markers(markers),
        ));
        // Leptos adds small inline scripts (resource bookkeeping); they run only with this response's nonce.
        if let (Some(nonce), Some(options)) = (leptos::nonce::use_nonce(), use_context::<ResponseOptions>())
            && let Ok(value) = HeaderValue::from_str(&csp(Some(nonce.as_inner())))
        {
            options.insert_header(header::CONTENT_SECURITY_POLICY, value);
        }
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
    let auth = state.auth.clone();
    Router::new()
        .merge(health::router())
        .merge(api_routes(&state))
        .merge(crate::portal::router())
        .merge(crate::orgs::setup::router())
        .merge(portal)
        // An API path no operation answers: problem+json, as every API error (not the portal's HTML page).
        .route("/api", axum::routing::any(api_not_found))
        .route("/api/", axum::routing::any(api_not_found))
        .route("/api/{*rest}", axum::routing::any(api_not_found))
        // Unknown paths render the portal's own not-found page (status 404).
        .fallback(leptos_axum::render_app_to_stream_with_context(portal_context(&state), move || {
            shell(fallback_options.clone())
        }))
        .layer(middleware::from_fn_with_state((state.db.clone(), state.pages.clone()), crate::pagecache::pages))
        .with_state(state)
        .layer(middleware::from_fn(csrf_guard))
        .layer(middleware::from_fn(form_limits))
        .layer(middleware::from_fn(uri_guard))
        .layer(RequestBodyLimitLayer::new(http.body_limit))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, http.request_timeout))
        .layer(middleware::from_fn(crate::metrics::track))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
            let request_id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("-");
            tracing::info_span!("http", method = %request.method(), path = %request.uri().path(), request_id)
        }))
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(middleware::from_fn_with_state(auth, peer))
        .layer(security_headers())
}

/// 404 in problem+json for an `/api/…` path that no operation answers.
async fn api_not_found(uri: axum::http::Uri) -> AppError {
    AppError::NotFound(format!("no API operation at {}; the operations are listed at /api/v1/openapi.json", uri.path()))
}

type SetHeader = SetResponseHeaderLayer<HeaderValue>;
type SecurityHeaders = tower::layer::util::Stack<
    SetHeader,
    tower::layer::util::Stack<
        SetHeader,
        tower::layer::util::Stack<SetHeader, tower::layer::util::Stack<SetHeader, SetHeader>>,
    >,
>;

/// Headers every answer carries unless a handler set its own: no framing, no sniffing, no referrer leaks
/// across sites, scripts and styles from this origin only (the portal's stylesheet is inline, hence
/// `'unsafe-inline'` for styles), and nothing cached by shared caches.
fn security_headers() -> SecurityHeaders {
    let set = |name: HeaderName, value: &'static str| {
        SetResponseHeaderLayer::if_not_present(name, HeaderValue::from_static(value))
    };
    tower::layer::util::Stack::new(
        SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_str(&csp(None)).unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'")),
        ),
        tower::layer::util::Stack::new(
            set(header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            tower::layer::util::Stack::new(
                set(header::REFERRER_POLICY, "same-origin"),
                tower::layer::util::Stack::new(
                    set(header::X_FRAME_OPTIONS, "DENY"),
                    set(header::CACHE_CONTROL, "no-store"),
                ),
            ),
        ),
    )
}

/// Per request, before anything else: records the client's address in [`auth::PEER_HEADER`] (replacing anything
/// the client sent) for rate limits and audit records — the TCP peer, or behind a trusted proxy
/// (`--trusted-proxies`) the right-most `X-Forwarded-For` hop that is not one; without connection info
/// (in-process calls) it is `local`. Keeps only the session cookie name this deployment uses, and adds HSTS when
/// the public URL is https.
async fn peer(State(auth): State<Arc<AuthState>>, mut request: Request, next: Next) -> Response {
    let address = match request.extensions().get::<ConnectInfo<SocketAddr>>() {
        Some(c) => {
            let forwarded = request.headers().get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok());
            auth::net::client_address(c.0.ip(), forwarded, &auth.trusted_proxies).to_string()
        }
        None => "local".to_string(),
    };
    let secure = auth.sessions.secure(request.headers());
    let headers = request.headers_mut();
    headers.remove(auth::PEER_HEADER);
    if let Ok(v) = HeaderValue::from_str(&address) {
        headers.insert(auth::PEER_HEADER, v);
    }
    session::keep_deployment_cookies(headers, secure);
    let mut response = next.run(request).await;
    if auth.sessions.https() {
        response
            .headers_mut()
            .insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000; includeSubDomains"));
    }
    response
}

/// Largest form body the CSRF guard reads to find the token.
const FORM_LIMIT: usize = 1024 * 1024;

/// Cross-site request forgery guard: a state-changing request that relies on the session cookie (no
/// `Authorization` header) must carry the session's CSRF token, in `X-CSRF-Token` or as the `csrf` field of
/// a form. Sign-in forms have no session yet and check the Origin instead.
async fn csrf_guard(request: Request, next: Next) -> Response {
    let safe = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    // Sign-in forms check the Origin instead (the visitor may still hold an old session cookie).
    let sign_in = matches!(request.uri().path(), "/auth/demo" | "/auth/login");
    if safe || request.headers().contains_key(header::AUTHORIZATION) || sign_in {
        return next.run(request).await;
    }
    let Some(cookie) = session::cookie_value(request.headers()) else {
        return next.run(request).await;
    };
    let expected = session::csrf_for(&cookie);
    let refused = || AppError::Forbidden("the CSRF token is missing or wrong: reload the page and try again".into());
    if request.headers().get("x-csrf-token").and_then(|v| v.to_str().ok()) == Some(expected.as_str()) {
        return next.run(request).await;
    }
    let is_form = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    // A portal upload (multipart/form-data, the cloud bill) carries the token in its action's query string: the
    // guard does not read a file body to find a form field. Referrer-Policy same-origin keeps the URL on this site.
    let is_upload = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    if is_upload && request.uri().path().starts_with("/ui/") {
        let presented = request.uri().query().and_then(|q| form_urlencoded_field(q.as_bytes(), "csrf"));
        if presented.as_deref() == Some(expected.as_str()) {
            return next.run(request).await;
        }
        return refused().into_response();
    }
    if !is_form {
        return refused().into_response();
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, FORM_LIMIT).await else {
        return AppError::PayloadTooLarge(format!("a form larger than {FORM_LIMIT} bytes")).into_response();
    };
    let presented = form_urlencoded_field(&bytes, "csrf");
    if presented.as_deref() != Some(expected.as_str()) {
        return refused().into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// Most fields in one form, and the longest field value (bytes, decoded): the portal's largest form (a cost
/// policy draft with a rate per GPU class) has a few dozen fields of a few dozen bytes.
pub const FORM_MAX_FIELDS: usize = 1_000;
/// See [`FORM_MAX_FIELDS`].
pub const FORM_MAX_VALUE_BYTES: usize = 64 * 1024;

/// Bounds every form body (sign-in forms and the portal's `/ui/` forms alike): at most [`FORM_LIMIT`] bytes,
/// [`FORM_MAX_FIELDS`] fields and [`FORM_MAX_VALUE_BYTES`] per value; a form over a limit is refused with 413 or
/// 422 naming the field before any handler sees it.
async fn form_limits(request: Request, next: Next) -> Response {
    let is_form = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form || matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, FORM_LIMIT).await else {
        return AppError::PayloadTooLarge(format!("a form larger than {FORM_LIMIT} bytes")).into_response();
    };
    if let Err(e) = check_form(&bytes) {
        return e.into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// The form limits of [`form_limits`] on one body, and the text class of the API (`gpuledger_api::input`): no
/// control character in a field's name or value, except tab, line feed and carriage return in a value (a textarea).
pub fn check_form(body: &[u8]) -> Result<(), AppError> {
    for (i, (k, v)) in form_urlencoded::parse(body).enumerate() {
        if i >= FORM_MAX_FIELDS {
            return Err(AppError::invalid("form", format!("more than {FORM_MAX_FIELDS} fields")));
        }
        if k.len() > 200 {
            return Err(AppError::invalid("form", "a field name longer than 200 bytes"));
        }
        if v.len() > FORM_MAX_VALUE_BYTES {
            return Err(AppError::invalid(k.into_owned(), format!("longer than {FORM_MAX_VALUE_BYTES} bytes")));
        }
        if k.chars().any(char::is_control) {
            return Err(AppError::invalid("form", "a field name with a control character"));
        }
        if let Some(c) = v.chars().find(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) {
            return Err(AppError::invalid(
                k.into_owned(),
                format!("contains the control character U+{:04X}; no control characters", c as u32),
            ));
        }
    }
    Ok(())
}

/// The path-segment and query class outside the REST API (portal pages and forms, sign-in, setup links, OData):
/// a path or query that is not UTF-8 once percent-decoded, or holds a control character, is refused (400) before
/// any handler, page or query sees it. The REST API's own extractors (`PathParams`, `Params`) refuse them with 422
/// naming the parameter, as its document says.
async fn uri_guard(request: Request, next: Next) -> Response {
    let uri = request.uri();
    if uri.path().starts_with("/api/") {
        return next.run(request).await;
    }
    if let Err(reason) = check_uri(uri.path(), uri.query()) {
        let problem = serde_json::json!({"type": "about:blank", "title": "Bad Request", "status": 400,
                                         "detail": reason});
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"))],
            problem.to_string(),
        )
            .into_response();
    }
    next.run(request).await
}

/// Why a request target is refused by [`uri_guard`], if it is.
pub fn check_uri(path: &str, query: Option<&str>) -> Result<(), String> {
    let decoded = percent_decode(path).ok_or("the path is not UTF-8 once percent-decoded")?;
    if let Some(c) = decoded.chars().find(|c| c.is_control()) {
        return Err(format!("the path holds the control character U+{:04X}", c as u32));
    }
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if let Some(c) = k.chars().chain(v.chars()).find(|c| c.is_control() || *c == char::REPLACEMENT_CHARACTER) {
            return Err(format!(
                "the query parameter {k:?} holds U+{:04X} (a control character or bytes that are not UTF-8)",
                c as u32
            ));
        }
    }
    Ok(())
}

/// A path percent-decoded (`None` when the result is not UTF-8).
fn percent_decode(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(0));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn form_urlencoded_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
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
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown_signal())
        .await
}
