//! The HTTP layer shared by every feature: extractors for the caller (with the capability the operation needs)
//! and for strict JSON bodies, so a handler's signature says who may call it and what it reads:
//!
//! ```ignore
//! async fn create(caller: Caller<Administer>, JsonBody(body): JsonBody<TenantBody>) -> Result<…, AppError>
//! async fn list(caller: Caller<ReadLedger>, Params(q): Params<ListQuery>) -> Result<…, AppError>
//! ```
//!
//! The parsers every feature shares for what arrives over HTTP (bodies, query strings, months, instants) live
//! here too, so no feature imports another to read its input.

use std::{marker::PhantomData, ops::Deref};

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::request::Parts,
};
use gpuledger_core::Period;
use time::OffsetDateTime;

use crate::{
    auth::{self, Capability, Principal},
    error::AppError,
    state::AppState,
};

/// A capability an operation needs, as a type (so it is part of the handler's signature).
pub trait Need: Send + Sync + 'static {
    /// The capability.
    const CAP: Capability;
}

macro_rules! needs {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;
        impl Need for $name {
            const CAP: Capability = Capability::$name;
        }
    )*};
}

needs! {
    /// Read ledgers, periods, evidence, analytics, disputes, policies (within the caller's departments).
    ReadLedger,
    /// Write cost policies and quotas.
    ManagePolicy,
    /// Close a month.
    Close,
    /// Open disputes and comment on them.
    DisputeParticipate,
    /// Accept or reject disputes.
    DisputeResolve,
    /// Approve or refuse a dispute's credit.
    CreditApprove,
    /// Tokens, sign-in settings, tenancy, the audit log.
    Administer,
    /// Send one cluster's facts.
    Ingest,
    /// Redeem a join token.
    Join,
}

/// The authenticated caller, refused (401/403 problem) unless it may do `N`.
#[derive(Debug)]
pub struct Caller<N: Need>(pub Principal, PhantomData<N>);

impl<N: Need> Caller<N> {
    /// The principal, for code that keeps it.
    pub fn into_inner(self) -> Principal {
        self.0
    }
}

impl<N: Need> Deref for Caller<N> {
    type Target = Principal;
    fn deref(&self) -> &Principal {
        &self.0
    }
}

impl<N: Need> FromRequestParts<AppState> for Caller<N> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let principal = auth::require(&state.db, &parts.headers, N::CAP).await?;
        Ok(Self(principal, PhantomData))
    }
}

/// A JSON request body parsed strictly: at most [`MAX_API_BODY_BYTES`], its shape within the
/// API's JSON limits, unknown fields refused where the type says `deny_unknown_fields`, and every error naming
/// the field (`policy.classes[0].borrowed`) and the reason.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send> FromRequest<AppState> for JsonBody<T> {
    type Rejection = AppError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, AppError> {
        json_body(&body_bytes(request, state).await?).map(Self)
    }
}

/// A request's body, buffered within the server's limits; a body over them is a 413 problem document.
pub async fn body_bytes(request: Request, state: &AppState) -> Result<Bytes, AppError> {
    Bytes::from_request(request, state).await.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            AppError::PayloadTooLarge("the body is larger than the server takes".into())
        } else {
            AppError::invalid("body", e.body_text())
        }
    })
}

/// Largest JSON body of the REST API (agents' batches and gateways' usage records have their own limits).
pub const MAX_API_BODY_BYTES: usize = 1024 * 1024;

/// Parses a JSON request body; the error names the field (`policy.classes[0].borrowed`) and the reason. The
/// body's shape is checked first against [`crate::limits::JsonLimits::API`].
pub fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    if bytes.is_empty() {
        return Err(AppError::invalid("body", "a JSON body is required"));
    }
    if bytes.len() > MAX_API_BODY_BYTES {
        return Err(AppError::PayloadTooLarge(format!("a JSON body larger than {MAX_API_BODY_BYTES} bytes")));
    }
    crate::limits::JsonGuard::check(crate::limits::JsonLimits::API, bytes)
        .map_err(|hit| AppError::invalid(hit.at, hit.reason))?;
    // Every JSON body of the API is an object, and serde's derived structs also take the sequence form (`[]` read
    // as `{}` where every member has a default — Schemathesis' ST201 on the Kueue import): only an object is read.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(AppError::invalid("body", "the body must be a JSON object"));
    }
    let typed = || serde_path_to_error::deserialize::<_, T>(&mut serde_json::Deserializer::from_slice(bytes));
    // Read strictly from the parsed value first: a struct sent as an array is refused where it is, at any depth. A
    // body that does not parse is named by the typed read, which says where it broke.
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Err(typed().err().map_or_else(|| AppError::invalid("body", "not JSON"), named));
    };
    serde_path_to_error::deserialize::<_, T>(crate::strict_json::Strict(&value)).map_err(named)?;
    // Then from the text: a parsed value keeps only the last of a repeated member, the typed read refuses it.
    typed().map_err(named)
}

/// A typed read's error as a 422 naming the member.
fn named(e: serde_path_to_error::Error<serde_json::Error>) -> AppError {
    {
        let path = e.path().to_string();
        let reason = e.inner().to_string();
        // serde reports a missing or repeated field at the object that holds it; name the field itself.
        let missing = ["missing field `", "duplicate field `"]
            .iter()
            .find_map(|prefix| reason.strip_prefix(prefix))
            .and_then(|r| r.split('`').next());
        let field = match (path.as_str(), missing) {
            (".", Some(name)) => name.to_string(),
            (_, Some(name)) => format!("{path}.{name}"),
            // `?`: a syntax error before any member was read.
            (".", None) | ("?", None) => "body".to_string(),
            _ => path,
        };
        AppError::invalid(field, reason)
    }
}

/// Longest query string an API operation reads; longer ones are refused before parsing.
pub const MAX_QUERY_BYTES: usize = 4096;
/// Most parameters in one query string.
pub const MAX_QUERY_PARAMS: usize = 32;

/// A query string parsed strictly into `T` (declare it `#[serde(deny_unknown_fields)]`): at most
/// [`MAX_QUERY_BYTES`] and [`MAX_QUERY_PARAMS`], an unknown or repeated parameter refused, and every error a
/// 422 problem naming the parameter and the reason.
#[derive(Debug)]
pub struct Params<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, AppError> {
        query_params(parts.uri.query().unwrap_or_default()).map(Self)
    }
}

/// Parses a query string as [`Params`] does.
pub fn query_params<T: serde::de::DeserializeOwned>(query: &str) -> Result<T, AppError> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(AppError::invalid("query", format!("longer than {MAX_QUERY_BYTES} bytes")));
    }
    let pairs: Vec<_> = form_urlencoded::parse(query.as_bytes()).collect();
    if pairs.len() > MAX_QUERY_PARAMS {
        return Err(AppError::invalid("query", format!("more than {MAX_QUERY_PARAMS} parameters")));
    }
    for (i, (key, _)) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|(k, _)| k == key) {
            return Err(AppError::invalid(key.to_string(), "given more than once"));
        }
    }
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let reason = e.inner().to_string();
        let path = e.path().to_string();
        // serde reports an unknown or a missing parameter at the struct's root; name the parameter itself.
        let named = reason.strip_prefix("unknown field `").or_else(|| reason.strip_prefix("missing field `"));
        let field = match (path.as_str(), named) {
            (".", Some(rest)) => rest.split('`').next().unwrap_or("query").to_string(),
            (".", None) => "query".to_string(),
            _ => path,
        };
        let reason = match reason.split_once(", expected ") {
            Some((_, expected)) if reason.starts_with("unknown field") => {
                format!("unknown parameter; expected {}", expected.replace('`', ""))
            }
            _ => reason,
        };
        AppError::invalid(field, reason)
    })
}

/// A path's `{name}` segments parsed strictly into `T` (a struct whose fields are named as the segments), before
/// any handler runs: each value percent-decoded, then read by its field's type (the input classes of
/// `gpuledger_api::input`), and every error a 422 problem naming the segment and the reason — a segment that is not
/// UTF-8, holds a control character, or is not what its type says never reaches a handler, a query or a URI.
#[derive(Debug)]
pub struct PathParams<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParams<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        let raw = axum::extract::RawPathParams::from_request_parts(parts, state).await.map_err(|e| {
            let field = match &e {
                axum::extract::rejection::RawPathParamsRejection::InvalidUtf8InPathParam(inner) => {
                    inner.body_text().split('`').nth(1).unwrap_or("path").to_string()
                }
                _ => "path".to_string(),
            };
            AppError::invalid(field, "not UTF-8 text once percent-decoded")
        })?;
        path_params(raw.iter()).map(Self)
    }
}

/// Parses a path's `(name, value)` segments as [`PathParams`] does.
pub fn path_params<'a, T: serde::de::DeserializeOwned>(
    segments: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<T, AppError> {
    // The segments are read as a query string is, so that numbers, months and texts parse by one set of rules.
    let encoded = form_urlencoded::Serializer::new(String::new()).extend_pairs(segments).finish();
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(encoded.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        AppError::invalid(if path == "." { "path".to_string() } else { path }, e.inner().to_string())
    })
}

/// A JSON request body that may be absent: an empty body (or only white space) reads as `T::default()`; otherwise
/// as [`JsonBody`] reads it.
#[derive(Debug)]
pub struct OptionalJsonBody<T>(pub T);

impl<T: serde::de::DeserializeOwned + Default + Send> FromRequest<AppState> for OptionalJsonBody<T> {
    type Rejection = AppError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, AppError> {
        let bytes = body_bytes(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(T::default()));
        }
        json_body(&bytes).map(Self)
    }
}

/// Parses a `YYYY-MM` parameter; the error names `field`.
pub fn parse_period(field: &str, s: &str) -> Result<Period, AppError> {
    Period::parse(s).map_err(|e| AppError::invalid(field, e.to_string()))
}

/// Parses an RFC 3339 instant; the error names `field`.
pub fn instant(field: &str, value: &str) -> Result<OffsetDateTime, AppError> {
    OffsetDateTime::parse(value, &time::format_description::well_known::Rfc3339)
        .map_err(|e| AppError::invalid(field, format!("{value:?} is not an RFC 3339 time: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Q {
        period: Option<String>,
        page: Option<u32>,
    }

    fn field(e: AppError) -> (String, String) {
        match e {
            AppError::Invalid { field, reason } => (field, reason),
            other => panic!("not a 422: {other:?}"),
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct B {
        name: String,
        inner: Option<Inner>,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        amount: String,
    }

    #[test]
    fn a_body_error_names_the_missing_field() {
        assert_eq!(field(json_body::<B>(b"{}").unwrap_err()).0, "name");
        assert_eq!(field(json_body::<B>(br#"{"name":"x","inner":{}}"#).unwrap_err()).0, "inner.amount");
        assert_eq!(field(json_body::<B>(br#"{"name":1}"#).unwrap_err()).0, "name");
        assert_eq!(field(json_body::<B>(b"[]").unwrap_err()).0, "body");
        // serde would read `inner` positionally from an array; the contract says object.
        let (at, reason) = field(json_body::<B>(br#"{"name":"x","inner":["1"]}"#).unwrap_err());
        assert_eq!((at.as_str(), reason.contains("expected a JSON object")), ("inner", true), "{reason}");
        assert_eq!(field(json_body::<B>(br#"{"name":"x","name":"y"}"#).unwrap_err()).0, "name");
        // Refused as an array where it is, not as a failed positional read inside it (`inner[0]`).
        let (at, reason) = field(json_body::<B>(br#"{"name":"x","inner":[1]}"#).unwrap_err());
        assert_eq!((at.as_str(), reason.contains("expected a JSON object")), ("inner", true), "{reason}");
        let (at, reason) = field(json_body::<B>(br#"{"name":"x","inner":{"amount":"1"}"#).unwrap_err());
        assert!(reason.contains("EOF") && at == "body", "{at}: {reason}");
        let (at, reason) = field(json_body::<B>(br#"{"name":"x","inner":{"amount":"1"},}"#).unwrap_err());
        assert!(reason.contains("trailing comma") && at == "body", "{at}: {reason}");
        // A struct whose members all have defaults is still not read from an array (serde's sequence form).
        #[derive(Debug, serde::Deserialize)]
        struct AllDefault {
            #[serde(default)]
            #[allow(dead_code)]
            mappings: std::collections::BTreeMap<String, String>,
        }
        for bad in [&b"[]"[..], b" [ ]", b"[{}]", b"null", b"1"] {
            assert_eq!(field(json_body::<AllDefault>(bad).unwrap_err()).0, "body", "{}", String::from_utf8_lossy(bad));
        }
        assert!(json_body::<AllDefault>(b" {}").is_ok());
    }

    #[test]
    fn a_strict_query_reads_known_parameters() {
        let q: Q = query_params("period=2026-11&page=2").unwrap();
        assert_eq!((q.period.as_deref(), q.page), (Some("2026-11"), Some(2)));
        let q: Q = query_params("").unwrap();
        assert_eq!((q.period, q.page), (None, None));
    }

    #[test]
    fn a_strict_query_names_the_parameter_it_refuses() {
        let (f, r) = field(query_params::<Q>("period=2026-11&perod=x").unwrap_err());
        assert_eq!(f, "perod");
        assert!(r.contains("unknown parameter") && r.contains("period") && r.contains("page"), "{r}");
        let (f, r) = field(query_params::<Q>("page=two").unwrap_err());
        assert_eq!(f, "page");
        assert!(r.contains("invalid"), "{r}");
        let (f, r) = field(query_params::<Q>("page=1&page=2").unwrap_err());
        assert_eq!((f.as_str(), r.as_str()), ("page", "given more than once"));
        let long = format!("period={}", "x".repeat(MAX_QUERY_BYTES));
        assert_eq!(field(query_params::<Q>(&long).unwrap_err()).0, "query");
        let many = (0..40).map(|i| format!("p{i}=1")).collect::<Vec<_>>().join("&");
        assert_eq!(field(query_params::<Q>(&many).unwrap_err()).0, "query");
    }
}
