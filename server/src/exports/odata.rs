//! The OData v4 service Power BI's OData connector reads (`OData.Feed`): the service document, `$metadata`
//! (CSDL XML), and the entity sets of [`super::sources::SETS`] as JSON (`odata.metadata=minimal`).
//!
//! - Query options: `$select`, `$filter` ([`super::filter`]), `$orderby`, `$top`, `$skip`, `$count`, `$format=json`.
//!   `$expand`, `$search`, `$apply`, `$compute` and other options are refused with an OData error (501), never
//!   ignored; an unknown `$` option is a 400.
//! - Paging: at most [`MAX_PAGE`] entities per answer (fewer with `Prefer: odata.maxpagesize=N`), the rest
//!   behind `@odata.nextLink`. In the default order (the key) the link continues after the last key (keyset
//!   paging: each page is an index range, however deep); with `$orderby` it carries an offset.
//! - Credentials: an API token as HTTP Basic password (what Power BI's "Basic" sends), as `Bearer`, or as a Web
//!   API key (`?api_key=…` — Power BI's `ApiKeyName` — or an `X-API-Key` header). The portal's session cookie is
//!   never used here (a browser on another site could otherwise make a signed-in user's browser read the feed).
//! - Decimals are exact: JSON numbers written from PostgreSQL's text, or strings when the client asks for
//!   `IEEE754Compatible=true`.

use axum::{
    extract::{Path, RawQuery, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::Engine;
use serde_json::json;

use super::{
    allocations,
    cells::{self, Cell, Column, Kind},
    filter::{self, FilterError},
    sources::{ALLOCATIONS, Arg, Args, SETS, Select, Source, by_set},
};
use crate::{
    auth::{Capability, Principal, require},
    error::AppError,
    state::AppState,
};

/// Most entities in one answer.
pub const MAX_PAGE: i64 = 5000;

/// Query parameter names taken as a Web API key (Power BI's `ApiKeyName` names the parameter; any of these,
/// compared without case).
pub(crate) const API_KEY_PARAMS: [&str; 4] = ["api_key", "apikey", "api-key", "apikeyname"];
/// Headers taken as a Web API key.
pub(crate) const API_KEY_HEADERS: [&str; 2] = ["x-api-key", "api-key"];

// ---------------------------------------------------------------- errors

/// An OData error answer: `{"error": {"code", "message", "target"}}` with `OData-Version: 4.0`.
#[derive(Debug)]
pub struct ODataError {
    status: StatusCode,
    code: &'static str,
    message: String,
    target: Option<&'static str>,
}

impl ODataError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), target: None }
    }

    fn bad(target: &'static str, message: impl Into<String>) -> Self {
        Self { target: Some(target), ..Self::new(StatusCode::BAD_REQUEST, "BadRequest", message) }
    }

    fn unsupported(target: &'static str, message: impl Into<String>) -> Self {
        Self { target: Some(target), ..Self::new(StatusCode::NOT_IMPLEMENTED, "NotImplemented", message) }
    }

    fn filter(e: FilterError) -> Self {
        match e {
            FilterError::Bad(m) => Self::bad("$filter", m),
            FilterError::Unsupported(m) => Self::unsupported("$filter", m),
        }
    }
}

impl From<AppError> for ODataError {
    fn from(e: AppError) -> Self {
        let status = e.clone_status();
        let code = match status.as_u16() {
            400 | 422 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            503 => "ServiceUnavailable",
            _ => "InternalServerError",
        };
        let message = match &e {
            AppError::Internal(detail) => {
                tracing::error!(error = %detail, "internal error in the OData feed");
                "an internal error occurred; it has been logged".to_string()
            }
            AppError::Unauthorized => "authentication required: send an export token as the password of HTTP Basic \
                                       (any user name), as a Bearer token, or as an API key (?api_key=… or \
                                       X-API-Key); the portal's sign-in is not accepted here"
                .to_string(),
            other => other.to_string(),
        };
        let status = if status == StatusCode::UNPROCESSABLE_ENTITY { StatusCode::BAD_REQUEST } else { status };
        Self::new(status, code, message)
    }
}

impl IntoResponse for ODataError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(t) = self.target {
            error["target"] = json!(t);
        }
        let mut response = (self.status, json!({"error": error}).to_string()).into_response();
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json;odata.metadata=minimal"));
        h.insert("odata-version", HeaderValue::from_static("4.0"));
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(r#"Basic realm="GPU Ledger OData""#));
        }
        response
    }
}

trait StatusOf {
    fn clone_status(&self) -> StatusCode;
}

impl StatusOf for AppError {
    fn clone_status(&self) -> StatusCode {
        self.status()
    }
}

impl From<sqlx::Error> for ODataError {
    fn from(e: sqlx::Error) -> Self {
        AppError::from(e).into()
    }
}

impl From<crate::db::DbError> for ODataError {
    fn from(e: crate::db::DbError) -> Self {
        AppError::from(e).into()
    }
}

// ---------------------------------------------------------------- options

/// Longest value of a query option other than `$filter` (which has its own limits, [`filter::MAX_FILTER_CHARS`]).
const MAX_OPTION_CHARS: usize = 4096;
/// Largest `$top` (pages are at most the server's page size anyway).
const MAX_TOP: i64 = 1_000_000_000;
/// Largest `$skip`: beyond any table this service holds for one organization; the statement timeout bounds the rest.
const MAX_SKIP: i64 = 1_000_000_000;
/// Most items in `$select` or `$orderby`.
const MAX_LIST_ITEMS: usize = 64;

/// The query options of a request.
#[derive(Debug, Default)]
struct Options {
    filter: Option<String>,
    select: Option<String>,
    orderby: Option<String>,
    top: Option<i64>,
    skip: Option<i64>,
    count: bool,
    skiptoken: Option<String>,
    format: Option<String>,
    api_key: Option<String>,
}

impl Options {
    fn parse(raw: Option<&str>) -> Result<Self, ODataError> {
        let mut o = Self::default();
        let mut seen: Vec<String> = Vec::new();
        for (k, v) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            let (k, v) = (k.into_owned(), v.into_owned());
            if API_KEY_PARAMS.iter().any(|n| n.eq_ignore_ascii_case(&k)) {
                o.api_key = Some(v);
                continue;
            }
            if !k.starts_with('$') {
                continue; // custom query options are allowed and ignored
            }
            if seen.contains(&k) {
                return Err(ODataError::bad("query", format!("{k} is given twice")));
            }
            seen.push(k.clone());
            let number = |name: &'static str, v: &str, max: i64| -> Result<i64, ODataError> {
                let n = v.trim().parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    ODataError::bad(name, format!("{name} must be a non-negative integer, not `{v}`"))
                })?;
                if n > max {
                    return Err(ODataError::bad(name, format!("{name} may be at most {max}")));
                }
                Ok(n)
            };
            if k != "$filter" && v.chars().count() > MAX_OPTION_CHARS {
                return Err(ODataError::bad("query", format!("{k} is longer than {MAX_OPTION_CHARS} characters")));
            }
            match k.as_str() {
                "$filter" => o.filter = Some(v),
                "$select" => o.select = Some(v),
                "$orderby" => o.orderby = Some(v),
                "$top" => o.top = Some(number("$top", &v, MAX_TOP)?),
                "$skip" => o.skip = Some(number("$skip", &v, MAX_SKIP)?),
                "$count" => {
                    o.count = match v.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(ODataError::bad("$count", "$count must be true or false")),
                    }
                }
                "$skiptoken" => o.skiptoken = Some(v),
                "$format" => o.format = Some(v),
                "$expand" | "$search" | "$apply" | "$compute" | "$levels" | "$deltatoken" | "$schemaversion"
                | "$index" | "$id" => {
                    return Err(ODataError::unsupported(
                        "query",
                        format!("the query option {k} is not supported by this service"),
                    ));
                }
                _ => return Err(ODataError::bad("query", format!("unknown system query option {k}"))),
            }
        }
        if let Some(f) = &o.format {
            let f = f.to_ascii_lowercase();
            if !(f == "json" || f.starts_with("application/json")) {
                return Err(ODataError::unsupported("$format", "only JSON is offered ($format=json)"));
            }
        }
        Ok(o)
    }

    /// Whether decimals and 64-bit integers go out as strings (`IEEE754Compatible=true` in `Accept` or
    /// `$format`).
    fn ieee754(&self, headers: &HeaderMap) -> bool {
        let asks = |s: &str| s.to_ascii_lowercase().replace(' ', "").contains("ieee754compatible=true");
        self.format.as_deref().is_some_and(asks)
            || headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(asks)
    }
}

/// `Prefer: odata.maxpagesize=N` (1..=[`MAX_PAGE`]).
fn preferred_page(headers: &HeaderMap) -> Option<i64> {
    headers.get_all("prefer").iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        (k.trim().eq_ignore_ascii_case("odata.maxpagesize")).then(|| v.trim().parse::<i64>().ok()).flatten()
    })
}

// ---------------------------------------------------------------- credentials

/// The caller, from an API token only: `Authorization` (Basic or Bearer) or a Web API key. Cookies are dropped
/// before authentication, so a browser session never reaches the feed.
async fn principal(state: &AppState, headers: &HeaderMap, api_key: Option<&str>) -> Result<Principal, ODataError> {
    let mut h = headers.clone();
    h.remove(header::COOKIE);
    if !h.contains_key(header::AUTHORIZATION) {
        let key = api_key.map(str::to_string).or_else(|| {
            API_KEY_HEADERS.iter().find_map(|n| h.get(*n).and_then(|v| v.to_str().ok()).map(str::to_string))
        });
        if let Some(key) = key.filter(|k| !k.trim().is_empty()) {
            let value = HeaderValue::from_str(&format!("Bearer {}", key.trim())).map_err(|_| AppError::Unauthorized)?;
            h.insert(header::AUTHORIZATION, value);
        }
    }
    Ok(require(&state.db, &h, Capability::ReadLedger).await?)
}

// ---------------------------------------------------------------- documents

fn json_response(body: Vec<u8>, ieee754: bool) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if ieee754 {
            "application/json;odata.metadata=minimal;odata.streaming=true;IEEE754Compatible=true"
        } else {
            "application/json;odata.metadata=minimal;odata.streaming=true;IEEE754Compatible=false"
        }),
    );
    h.insert("odata-version", HeaderValue::from_static("4.0"));
    response
}

fn service_root(state: &AppState, headers: &HeaderMap) -> String {
    format!("{}/odata/", state.auth.sessions.base_url(headers))
}

/// `GET /odata/`: the service document.
pub(super) async fn service_document(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let result: Result<Response, ODataError> = async {
        let o = Options::parse(raw.as_deref())?;
        principal(&state, &headers, o.api_key.as_deref()).await?;
        let sets: Vec<_> = SETS.iter().map(|s| json!({"name": s.set, "kind": "EntitySet", "url": s.set})).collect();
        let doc = json!({"@odata.context": format!("{}$metadata", service_root(&state, &headers)), "value": sets});
        Ok(json_response(doc.to_string().into_bytes(), false))
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// The CSDL document.
pub fn csdl() -> String {
    let mut xml = String::from(
        r#"<?xml version="1.0" encoding="utf-8"?><edmx:Edmx Version="4.0" xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx"><edmx:DataServices><Schema Namespace="GpuLedger" xmlns="http://docs.oasis-open.org/odata/ns/edm">"#,
    );
    for s in SETS {
        xml.push_str(&format!(r#"<EntityType Name="{}"><Key>"#, s.entity));
        for k in s.key {
            xml.push_str(&format!(r#"<PropertyRef Name="{k}"/>"#));
        }
        xml.push_str("</Key>");
        for c in s.columns {
            let nullable = if c.nullable { "" } else { r#" Nullable="false""# };
            let facets = match c.kind {
                Kind::Decimal => r#" Scale="variable""#,
                Kind::DateTime => r#" Precision="6""#,
                _ => "",
            };
            xml.push_str(&format!(r#"<Property Name="{}" Type="{}"{nullable}{facets}/>"#, c.name, c.kind.edm()));
        }
        xml.push_str("</EntityType>");
    }
    xml.push_str(r#"<EntityContainer Name="Container">"#);
    for s in SETS {
        xml.push_str(&format!(r#"<EntitySet Name="{}" EntityType="GpuLedger.{}"/>"#, s.set, s.entity));
    }
    xml.push_str("</EntityContainer></Schema></edmx:DataServices></edmx:Edmx>");
    xml
}

/// `GET /odata/$metadata`: the CSDL describing the entity sets, their keys and typed properties.
pub(super) async fn metadata(State(state): State<AppState>, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let result: Result<Response, ODataError> = async {
        let o = Options::parse(raw.as_deref())?;
        principal(&state, &headers, o.api_key.as_deref()).await?;
        let mut response = csdl().into_response();
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
        h.insert("odata-version", HeaderValue::from_static("4.0"));
        Ok(response)
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

// ---------------------------------------------------------------- collections

fn parse_select(source: &'static Source, s: &str) -> Result<Vec<&'static Column>, ODataError> {
    if s.split(',').count() > MAX_LIST_ITEMS {
        return Err(ODataError::bad("$select", format!("more than {MAX_LIST_ITEMS} items")));
    }
    let mut out: Vec<&'static Column> = Vec::new();
    for item in s.split(',').map(str::trim) {
        if item == "*" {
            return Ok(source.columns.iter().collect());
        }
        if item.contains('/') || item.contains('(') {
            return Err(ODataError::unsupported("$select", format!("`{item}`: only property names are supported")));
        }
        let c = source
            .column(item)
            .ok_or_else(|| ODataError::bad("$select", format!("`{item}` is not a property of {}", source.entity)))?;
        if !out.iter().any(|x| x.name == c.name) {
            out.push(c);
        }
    }
    Ok(out)
}

fn parse_orderby(select: &Select, s: &str) -> Result<Vec<String>, ODataError> {
    if s.split(',').count() > MAX_LIST_ITEMS {
        return Err(ODataError::bad("$orderby", format!("more than {MAX_LIST_ITEMS} items")));
    }
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim) {
        let mut words = item.split_whitespace();
        let name = words.next().ok_or_else(|| ODataError::bad("$orderby", "an empty $orderby item"))?;
        let desc = match words.next() {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(w) => return Err(ODataError::bad("$orderby", format!("`{w}`: expected asc or desc"))),
        };
        if words.next().is_some() {
            return Err(ODataError::bad("$orderby", format!("`{item}`: expected `Property [asc|desc]`")));
        }
        if name.contains('/') || name.contains('(') {
            return Err(ODataError::unsupported("$orderby", format!("`{name}`: only property names are supported")));
        }
        let c = select.source.column(name).ok_or_else(|| {
            ODataError::bad("$orderby", format!("`{name}` is not a property of {}", select.source.entity))
        })?;
        // OData sorts null before any value in ascending order.
        out.push(format!("({}) {}", select.expr(c), if desc { "DESC NULLS LAST" } else { "ASC NULLS FIRST" }));
    }
    Ok(out)
}

/// Where the next page starts.
enum Continuation {
    /// After these key values (default order).
    After(Vec<Arg>),
    /// At this offset (a client's `$orderby`).
    Offset(i64),
}

fn decode_token(token: &str, keys: &[&'static Column]) -> Result<Continuation, ODataError> {
    let invalid = || ODataError::bad("$skiptoken", "not a $skiptoken this service issued");
    if let Some(n) = token.strip_prefix('o') {
        return n.parse::<i64>().ok().filter(|n| *n >= 0).map(Continuation::Offset).ok_or_else(invalid);
    }
    let encoded = token.strip_prefix('k').ok_or_else(invalid)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded).map_err(|_| invalid())?;
    let values: Vec<serde_json::Value> = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    if values.len() != keys.len() {
        return Err(invalid());
    }
    let mut args = Vec::with_capacity(keys.len());
    for (c, v) in keys.iter().zip(values) {
        let s = v.as_str().map(str::to_string);
        let arg = match c.kind {
            Kind::Text => Arg::Text(s.ok_or_else(invalid)?),
            Kind::Decimal => Arg::Numeric(s.ok_or_else(invalid)?),
            Kind::Month => {
                let p = gpuledger_core::Period::parse(&s.ok_or_else(invalid)?).map_err(|_| invalid())?;
                Arg::Date(p.first_day())
            }
            Kind::DateTime => Arg::Time(
                time::OffsetDateTime::parse(&s.ok_or_else(invalid)?, &time::format_description::well_known::Rfc3339)
                    .map_err(|_| invalid())?,
            ),
            Kind::Guid => Arg::Uuid(uuid::Uuid::try_parse(&s.ok_or_else(invalid)?).map_err(|_| invalid())?),
            Kind::Int32 | Kind::Int64 => Arg::Int(v.as_i64().ok_or_else(invalid)?),
            Kind::Bool => Arg::Bool(v.as_bool().ok_or_else(invalid)?),
        };
        args.push(arg);
    }
    Ok(Continuation::After(args))
}

fn encode_token(cells: &[Cell<'_>]) -> String {
    let values: Vec<serde_json::Value> = cells
        .iter()
        .map(|c| match c {
            Cell::Null => serde_json::Value::Null,
            Cell::Text(s) | Cell::Num(s) => json!(s),
            Cell::Int(i) => json!(i),
            Cell::Month(d) => json!(cells::month_string(*d)),
            Cell::Time(t) => json!(cells::instant_string(*t)),
            Cell::Guid(u) => json!(u.to_string()),
            Cell::Bool(b) => json!(b),
        })
        .collect();
    let json = serde_json::to_vec(&values).unwrap_or_default();
    format!("k{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json))
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A request's source, caller and query, ready to run.
struct Request {
    p: Principal,
    o: Options,
    select: Select,
    /// `SELECT count(*)` under the filter (before paging), and its parameters.
    count: (String, Args),
    /// The filter is a month range or nothing: `[from, before)` month starts (`None`: unbounded).
    months: Option<(Option<time::OffsetDateTime>, Option<time::OffsetDateTime>)>,
}

async fn prepare(state: &AppState, set: &str, headers: &HeaderMap, raw: Option<&str>) -> Result<Request, ODataError> {
    let o = Options::parse(raw)?;
    let p = principal(state, headers, o.api_key.as_deref()).await?;
    let source = by_set(set).ok_or_else(|| {
        ODataError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!(
                "no entity set named `{set}`; the sets are {}",
                SETS.iter().map(|s| s.set).collect::<Vec<_>>().join(", ")
            ),
        )
    })?;
    let mut select = Select::new(source, p.departments.is_some(), false);
    select.organization(p.org.as_uuid());
    if let Some(s) = &o.select {
        select.columns = parse_select(source, s)?;
    }
    let mut months = Some((None, None));
    if let Some(f) = &o.filter {
        let scoped = select.scoped;
        let compiled = filter::compile(source, scoped, f, &mut select.args).map_err(ODataError::filter)?;
        select.conds.push(compiled.sql);
        select.month_range(compiled.month_from, compiled.month_before);
        months = compiled.months_only.then_some((compiled.month_from, compiled.month_before));
    }
    let count = (select.count_sql(), select.args.clone());
    Ok(Request { p, o, select, count, months })
}

/// Runs `sql` in the caller's transaction with UTC as the session time zone.
async fn begin(state: &AppState, p: &Principal) -> Result<crate::db::OrgTx, ODataError> {
    let mut tx = p.begin(&state.db).await?;
    tx.allow_long_statements().await?;
    super::store::export_session(&mut tx).await?;
    Ok(tx)
}

/// `GET /odata/{set}`: one page of the entity set.
pub(super) async fn collection(
    State(state): State<AppState>,
    Path(set): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    page(&state, &set, &headers, raw.as_deref()).await.unwrap_or_else(IntoResponse::into_response)
}

async fn page(state: &AppState, set: &str, headers: &HeaderMap, raw: Option<&str>) -> Result<Response, ODataError> {
    let Request { p, o, mut select, count, months } = prepare(state, set, headers, raw).await?;
    let source = select.source;
    let keys = source.key_columns();
    let key_exprs: Vec<String> = keys.iter().map(|c| format!("({})", select.expr(c))).collect();
    let keyset = o.orderby.is_none();
    select.order = match &o.orderby {
        Some(s) => {
            let mut order = parse_orderby(&select, s)?;
            order.extend(key_exprs.iter().cloned());
            order
        }
        None => key_exprs.clone(),
    };
    let mut offset = o.skip.unwrap_or(0);
    let mut after: Option<allocations::Key> = None;
    if let Some(token) = &o.skiptoken {
        match (decode_token(token, &keys)?, keyset) {
            (Continuation::After(values), true) => {
                if let [Arg::Uuid(c), Arg::Text(a), Arg::Time(t)] = values.as_slice() {
                    after = Some((*c, a.clone(), *t));
                }
                let placeholders: Vec<String> = values.into_iter().map(|v| select.args.push(v)).collect();
                select.conds.push(format!("({}) > ({})", key_exprs.join(", "), placeholders.join(", ")));
                // Implied by the comparison above, and what an index range can start at.
                let prefix = source.key_index_prefix;
                if prefix > 0 && prefix < key_exprs.len() {
                    select.conds.push(format!(
                        "({}) >= ({})",
                        key_exprs[..prefix].join(", "),
                        placeholders[..prefix].join(", ")
                    ));
                }
                offset = 0;
            }
            (Continuation::Offset(n), false) => offset = n,
            _ => return Err(ODataError::bad("$skiptoken", "the $skiptoken does not belong to this $orderby")),
        }
    }
    // Allocations in key order, filtered by months at most, with no offset: joined and computed in Rust per page
    // (see `allocations`): PostgreSQL reads the page's intervals from the primary key and nothing else.
    let rust = match months {
        Some((from, before)) if keyset && offset == 0 && std::ptr::eq(source, &ALLOCATIONS) => {
            let scoped = p.departments.is_some();
            Some(allocations::Cut { from, before, scoped, department: None, tenant: None })
        }
        _ => None,
    };
    let preferred = preferred_page(headers).filter(|n| (1..=MAX_PAGE).contains(n));
    let page_size = preferred.unwrap_or(MAX_PAGE);
    let want = o.top.map_or(page_size, |t| t.min(page_size));
    select.limit = Some(want + 1);
    select.offset = Some(offset);
    let extra: Vec<String> =
        keys.iter().map(|c| format!("CAST(({}) AS {})", select.expr(c), c.kind.select_type())).collect();
    let sql = select.sql(&extra);

    let ieee754 = o.ieee754(headers);
    let mut tx = begin(state, &p).await?;
    let mut values: Vec<u8> = Vec::new();
    let (_, next_key): (usize, Option<String>) = match (&rust, usize::try_from(want)) {
        (Some(cut), Ok(want)) if want > 0 => {
            let dims = allocations::Dimensions::load(tx.conn()).await?;
            let columns: Vec<(usize, &'static Column)> = select
                .columns
                .iter()
                .map(|c| (source.columns.iter().position(|x| std::ptr::eq(x, *c)).unwrap_or(usize::MAX), *c))
                .collect();
            values.reserve(want * 32 * columns.len());
            let (shown, last) =
                allocations::odata_page(tx.conn(), &dims, cut, after, want, &columns, ieee754, &mut values).await?;
            let key = last.map(|(c, a, t)| encode_token(&[Cell::Guid(c), Cell::Text(a.into()), Cell::Time(t)]));
            (shown, key)
        }
        _ => {
            let rows =
                if want == 0 { Vec::new() } else { super::store::select_rows(tx.conn(), &sql, &select.args).await? };
            let shown = rows.len().min(usize::try_from(want).unwrap_or(0));
            values.reserve(shown * 64 * select.columns.len());
            for (r, row) in rows.iter().take(shown).enumerate() {
                if r > 0 {
                    values.push(b',');
                }
                values.push(b'{');
                for (i, c) in select.columns.iter().enumerate() {
                    if i > 0 {
                        values.push(b',');
                    }
                    cells::json_string(&mut values, c.name);
                    values.push(b':');
                    cells::json_cell(&mut values, &cells::decode(row, i, c.kind)?, c.kind, ieee754);
                }
                values.push(b'}');
            }
            let next_key = if rows.len() <= shown {
                None
            } else if keyset {
                let Some(last) = rows.get(shown.saturating_sub(1)) else {
                    return Err(AppError::Internal("no last row".into()).into());
                };
                let n = select.columns.len();
                let mut key_cells = Vec::with_capacity(keys.len());
                for (j, k) in keys.iter().enumerate() {
                    key_cells.push(cells::decode(last, n + j, k.kind)?);
                }
                Some(encode_token(&key_cells))
            } else {
                Some(format!("o{}", offset + want))
            };
            (shown, next_key)
        }
    };
    let total: Option<i64> =
        if o.count { Some(super::store::select_count(tx.conn(), &count.0, &count.1).await?) } else { None };
    if o.skiptoken.is_none() {
        let details =
            json!({"filter": o.filter, "select": o.select, "orderby": o.orderby, "top": o.top, "skip": o.skip});
        tx.audit_by(&p, "export.odata", source.set, "", details).await?;
    }
    tx.commit().await?;

    let root = service_root(state, headers);
    let mut out: Vec<u8> = Vec::with_capacity(256 + values.len());
    out.extend_from_slice(b"{\"@odata.context\":");
    let context = match &o.select {
        Some(_) => format!(
            "{root}$metadata#{}({})",
            source.set,
            select.columns.iter().map(|c| c.name).collect::<Vec<_>>().join(",")
        ),
        None => format!("{root}$metadata#{}", source.set),
    };
    cells::json_string(&mut out, &context);
    if let Some(n) = total {
        out.extend_from_slice(b",\"@odata.count\":");
        out.extend_from_slice(n.to_string().as_bytes());
    }
    out.extend_from_slice(b",\"value\":[");
    out.extend_from_slice(&values);
    drop(values);
    out.push(b']');
    let remaining = o.top.map(|t| t - want);
    if let Some(next_token) = next_key.filter(|_| remaining.is_none_or(|r| r > 0)) {
        let mut params: Vec<String> = Vec::new();
        for (name, value) in [("$filter", &o.filter), ("$select", &o.select), ("$orderby", &o.orderby)] {
            if let Some(v) = value {
                params.push(format!("{name}={}", encode(v)));
            }
        }
        if o.count {
            params.push("$count=true".into());
        }
        if let Some(r) = remaining {
            params.push(format!("$top={r}"));
        }
        if let Some(f) = &o.format {
            params.push(format!("$format={}", encode(f)));
        }
        params.push(format!("$skiptoken={}", encode(&next_token)));
        out.extend_from_slice(b",\"@odata.nextLink\":");
        cells::json_string(&mut out, &format!("{root}{}?{}", source.set, params.join("&")));
    }
    out.push(b'}');
    let mut response = json_response(out, ieee754);
    if let Some(n) = preferred
        && let Ok(v) = HeaderValue::from_str(&format!("odata.maxpagesize={n}"))
    {
        response.headers_mut().insert("preference-applied", v);
    }
    Ok(response)
}

/// `GET /odata/{set}/$count`: how many entities match `$filter`, as plain text.
pub(super) async fn count(
    State(state): State<AppState>,
    Path(set): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let result: Result<Response, ODataError> = async {
        let Request { p, select, count, .. } = prepare(&state, &set, &headers, raw.as_deref()).await?;
        let mut tx = begin(&state, &p).await?;
        let n = super::store::select_count(tx.conn(), &count.0, &count.1).await?;
        tx.audit_by(&p, "export.odata", &format!("{}/$count", select.source.set), "", json!({})).await?;
        tx.commit().await?;
        let mut response = n.to_string().into_response();
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.insert("odata-version", HeaderValue::from_static("4.0"));
        Ok(response)
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn options_refuse_what_is_not_supported() {
        assert!(Options::parse(Some("$top=5&$skip=1&$count=true&api_key=x&foo=1")).is_ok());
        let o = Options::parse(Some("$filter=Tenant%20eq%20%27a%27&ApiKeyName=k")).unwrap();
        assert_eq!(o.filter.as_deref(), Some("Tenant eq 'a'"));
        assert_eq!(o.api_key.as_deref(), Some("k"));
        for (q, status) in [
            ("$expand=Lines", 501),
            ("$search=x", 501),
            ("$apply=aggregate(Amount with sum as T)", 501),
            ("$format=atom", 501),
            ("$bogus=1", 400),
            ("$top=-1", 400),
            ("$top=1&$top=2", 400),
            ("$count=yes", 400),
        ] {
            let e = Options::parse(Some(q)).unwrap_err();
            assert_eq!(e.status.as_u16(), status, "{q}");
        }
    }

    #[test]
    fn tokens_round_trip() {
        let keys = super::super::sources::ALLOCATIONS.key_columns();
        let t = time::macros::datetime!(2026-09-03 04:05:06.5 UTC);
        let u = uuid::Uuid::new_v4();
        let token = encode_token(&[Cell::Guid(u), Cell::text("pod/a,b"), Cell::Time(t)]);
        match decode_token(&token, &keys).unwrap() {
            Continuation::After(v) => {
                assert_eq!(v, vec![Arg::Uuid(u), Arg::Text("pod/a,b".into()), Arg::Time(t)]);
            }
            Continuation::Offset(_) => panic!("keyset token"),
        }
        assert!(decode_token("kAAAA", &keys).is_err());
        assert!(matches!(decode_token("o10", &keys), Ok(Continuation::Offset(10))));
    }

    #[test]
    fn metadata_lists_every_set_with_keys() {
        let xml = csdl();
        for s in SETS {
            assert!(xml.contains(&format!(r#"<EntitySet Name="{}" EntityType="GpuLedger.{}"/>"#, s.set, s.entity)));
        }
        assert!(xml.contains(r#"<Property Name="Amount" Type="Edm.Decimal" Nullable="false" Scale="variable"/>"#));
    }

    #[test]
    fn prefer_header() {
        let mut h = HeaderMap::new();
        h.insert("prefer", HeaderValue::from_static("odata.track-changes, odata.maxpagesize=250"));
        assert_eq!(preferred_page(&h), Some(250));
        assert_eq!(encode("a b'&$"), "a%20b%27%26%24");
    }
}
