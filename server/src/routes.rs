//! The REST API's routes: every feature's router, the reads that compute or stream a month behind their
//! organization's heavy-read turns. The application (the `app` module) serves them; portal pages call the same
//! read functions directly (`portal::reads`).

use axum::{
    Router,
    body::Body,
    extract::Request,
    http::{HeaderValue, Method, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};

use crate::{auth, error::AppError, ingest, openapi, state::AppState};

/// The REST API's routes. Reads that compute or stream a month (ledger, close, analytics, exports, metrics,
/// what-if impacts) take a turn of their organization's share of heavy reads first ([`heavy_read`]).
pub fn api_routes(state: &AppState) -> Router<AppState> {
    let heavy = Router::new()
        .merge(crate::analytics::router())
        .merge(crate::ledger::router())
        .merge(crate::readmodel::router())
        .merge(crate::close::router())
        .merge(crate::exports::router())
        .merge(crate::metrics::router())
        .merge(crate::training::router())
        .merge(crate::budgets::router())
        .merge(crate::policy::impact_router())
        .merge(crate::tenancy::impact_router())
        .merge(crate::telemetry::router())
        .route_layer(middleware::from_fn_with_state(state.clone(), heavy_read));
    Router::new()
        .merge(ingest::router())
        .merge(crate::policy::router())
        .merge(crate::tenancy::router())
        .merge(crate::usage::router())
        .merge(crate::costs::router())
        .merge(crate::faults::router())
        .merge(crate::disputes::router())
        .merge(crate::notifications::router())
        .merge(crate::orgs::settings::router())
        .merge(crate::access::router())
        .merge(openapi::router())
        .merge(heavy)
}

/// Waits for a turn of the caller's organization among its heavy reads ([`crate::limits::HeavyReads`]) and holds
/// it until the answer's body is sent (a streamed export holds it to its last byte). The caller is authenticated
/// here, so only a valid credential can use up an organization's turns; a request without one goes on to its
/// handler, which refuses it.
async fn heavy_read(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    // Reads of stored figures (the read model) are lookups, not heavy work: no turn needed.
    if request.method() == Method::GET && STORED_READS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let mut headers = request.headers().clone();
    // Power BI's Web API key (OData) comes as a query parameter or its own header.
    if !headers.contains_key(header::AUTHORIZATION)
        && let Some(key) = api_key(&request)
        && let Ok(value) = HeaderValue::from_str(&format!("Bearer {key}"))
    {
        headers.insert(header::AUTHORIZATION, value);
    }
    let Ok(principal) = auth::authenticate(&state.db, &headers).await else {
        return next.run(request).await;
    };
    // Analytics answers are computed once per caller scope, query and month figures, then read (the read model).
    // Only for a caller the handlers would answer (they require the ledger-reading capability): a stored answer is
    // served without running the handler, so the same check comes first. A stored answer needs no turn.
    let cacheable = request.method() == Method::GET
        && request.uri().path().starts_with("/api/v1/analytics/")
        && principal.may(auth::Capability::ReadLedger);
    let key = cacheable.then(|| analytics_key(&request)).flatten();
    let mut store_as = None;
    if let Some((period, key)) = &key {
        let scope = crate::auth::scope_key(principal.departments.as_deref());
        match crate::figures::answer(&state.db, principal.org, *period, key, &scope).await {
            Ok(crate::figures::Answer::Hit(body)) => {
                return ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response();
            }
            Ok(crate::figures::Answer::Miss(as_of)) => store_as = Some((as_of, scope)),
            Ok(crate::figures::Answer::NoFigures) => {}
            Err(e) => tracing::warn!(error = %e, "read model: analytics answer lookup failed"),
        }
    }
    // A closed month's evidence and forecast are lookups too (the evidence index and the stored figures, written at
    // close): no turn, once the month is known to be closed.
    if let Some(period) = closed_lookup_period(&request)
        && month_is_closed(&state, principal.org, period).await
    {
        return next.run(request).await;
    }
    let permit = match state.limits.heavy.acquire(principal.org).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let response = next.run(request).await;
    if let (Some((as_of, scope)), Some((period, key))) = (store_as, key)
        && response.status() == StatusCode::OK
    {
        let (parts, body) = response.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_STORED_ANSWER).await else {
            return AppError::Internal("an analytics answer too large to keep".into()).into_response();
        };
        if let Err(e) =
            crate::figures::store_answer(&state.db, principal.org, period, &key, &scope, as_of, &bytes).await
        {
            tracing::warn!(error = %e, "read model: could not keep an analytics answer");
        }
        drop(permit);
        return Response::from_parts(parts, Body::from(bytes));
    }
    let (parts, body) = response.into_parts();
    let stream = futures::StreamExt::map(body.into_data_stream(), move |chunk| {
        let _held = &permit;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// GET routes behind the heavy-read turns that read stored figures only (the read model): no turn is taken.
const STORED_READS: [&str; 4] =
    ["/api/v1/ledger", "/api/v1/ledger/months", "/api/v1/ledger/summaries", "/api/v1/periods"];

/// Largest analytics answer the read model keeps (larger ones are computed per request).
const MAX_STORED_ANSWER: usize = 16 * 1024 * 1024;

/// The month and the normalized request (path, sorted query) of an analytics read.
fn analytics_key(request: &Request) -> Option<(gpuledger_core::Period, String)> {
    let query = request.uri().query().unwrap_or_default();
    let mut pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    pairs.sort();
    let period = pairs.iter().find(|(k, _)| k == "period").and_then(|(_, v)| gpuledger_core::Period::parse(v).ok())?;
    let normalized: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(&pairs).finish();
    let key = format!("{}?{normalized}", request.uri().path());
    (key.len() <= 2000).then_some((period, key))
}

/// The month of a request that is a lookup when that month is closed: `GET /api/v1/periods/{period}/evidence` and
/// `GET /api/v1/forecast?period=…`.
fn closed_lookup_period(request: &Request) -> Option<gpuledger_core::Period> {
    if request.method() != Method::GET {
        return None;
    }
    let path = request.uri().path();
    if let Some(p) = path.strip_prefix("/api/v1/periods/").and_then(|r| r.strip_suffix("/evidence")) {
        return gpuledger_core::Period::parse(p).ok();
    }
    if path == "/api/v1/forecast" {
        let query = request.uri().query().unwrap_or_default();
        return form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "period")
            .and_then(|(_, v)| gpuledger_core::Period::parse(&v).ok());
    }
    None
}

/// Whether `org` has closed `period` (false when it cannot tell: the request then takes its turn as usual).
async fn month_is_closed(state: &AppState, org: gpuledger_core::ids::OrgId, period: gpuledger_core::Period) -> bool {
    let Ok(mut tx) = state.db.begin_org(org).await else { return false };
    let closed =
        matches!(crate::store::period_state(&mut tx, period).await, Ok(gpuledger_api::states::PeriodState::Closed));
    let _ = tx.commit_quiet().await;
    closed
}

/// An API key sent as a query parameter or header (`api_key`, `ApiKeyName`, …), as OData clients do.
fn api_key(request: &Request) -> Option<String> {
    let query = request.uri().query().unwrap_or_default();
    let from_query = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| crate::exports::odata::API_KEY_PARAMS.iter().any(|n| n.eq_ignore_ascii_case(k)))
        .map(|(_, v)| v.into_owned());
    from_query
        .or_else(|| {
            crate::exports::odata::API_KEY_HEADERS
                .iter()
                .find_map(|n| request.headers().get(*n).and_then(|v| v.to_str().ok()).map(str::to_string))
        })
        .filter(|k| !k.trim().is_empty() && k.len() < 512)
}
