//! The one error type handlers return, rendered as `application/problem+json` (RFC 9457).

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

/// Everything a handler can fail with. Each variant maps to one HTTP status and a problem document.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The request is malformed; `field` names what was wrong and `reason` why.
    #[error("{field}: {reason}")]
    Invalid {
        /// JSON pointer or parameter name of the offending input.
        field: String,
        /// Why it was refused.
        reason: String,
    },
    /// A well-formed request (one the API document allows) that a rule refuses: a rule between two of its fields
    /// (`valid_to` after `valid_from`), or the organization's current data (a retired department, a month that has
    /// not started). 409, naming the field.
    #[error("{field}: {reason}")]
    Refused {
        /// The field or parameter the rule is about.
        field: String,
        /// The rule, and what to do.
        reason: String,
    },
    /// What a field or parameter of a well-formed request names does not exist (or is not the caller's to see).
    /// 404, naming the field.
    #[error("{field}: {reason}")]
    Unknown {
        /// The field or parameter that names it.
        field: String,
        /// What was not found.
        reason: String,
    },
    /// No credentials, or credentials that are not valid.
    #[error("authentication required")]
    Unauthorized,
    /// Valid credentials that do not allow this.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The thing asked for does not exist (or is not visible to the caller).
    #[error("not found: {0}")]
    NotFound(String),
    /// The request conflicts with the current state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The body is larger than allowed; the reason names the limit.
    #[error("payload too large: {0}")]
    PayloadTooLarge(String),
    /// Too many attempts from this client; try again after the given number of seconds.
    #[error("too many requests: try again in {0} s")]
    TooManyRequests(u64),
    /// A limit the operator set for the organization is reached; `detail` names the limit, and the request may be
    /// tried again after `retry_after` seconds.
    #[error("{detail}")]
    LimitReached {
        /// What limit, its value, and what happens next.
        detail: String,
        /// Seconds until the limit's window resets.
        retry_after: u64,
    },
    /// The organization is suspended by its operator: sign-in, API tokens and agent ingest are refused (its data is
    /// kept).
    #[error(
        "organization {0:?} is suspended by its operator: sign-in, API tokens and agent ingest are refused until it \
         is resumed; its data is kept"
    )]
    Suspended(String),
    /// A dependency (the database) is not available right now.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// A bug or an unexpected failure; the detail goes to the log, not to the client.
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    /// A validation error naming the field and the reason.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), reason: reason.into() }
    }

    /// A well-formed request refused by a rule between its fields or by the organization's data (409).
    pub fn refused(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Refused { field: field.into(), reason: reason.into() }
    }

    /// What `field` names does not exist (404).
    pub fn unknown(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Unknown { field: field.into(), reason: reason.into() }
    }

    /// A ledger computation's refusal of the organization's stored data (a GPU class without a rate, an amount
    /// beyond what the ledger holds): the data's conflict, not the request's form — 409, naming what to fix.
    pub fn computing(e: gpuledger_core::DomainError) -> Self {
        let (field, reason) = match &e {
            gpuledger_core::DomainError::Invalid { field, reason } => ((*field).to_string(), reason.clone()),
            gpuledger_core::DomainError::InvalidAt { path, reason } => (path.clone(), reason.clone()),
            gpuledger_core::DomainError::Overflow { .. } => ("ledger".to_string(), e.to_string()),
        };
        Self::refused(
            field,
            format!("the month cannot be computed from the organization's data as it stands: {reason}"),
        )
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Refused { .. } => StatusCode::CONFLICT,
            Self::Unknown { .. } => StatusCode::NOT_FOUND,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooManyRequests(_) | Self::LimitReached { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Suspended(_) => StatusCode::FORBIDDEN,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The one place database errors become answers: an unavailable pool is 503, and integrity violations are the
/// client's conflict or mistake, not a server error — a duplicate key (23505), an overlapping range (23P01) or a
/// referenced row that is gone (23503) is 409 (the request met the stored data), a failed check (23514) 422 (a
/// value the input classes should have refused). Handlers that can say it better replace the
/// wording with [`AppError::on_conflict`] / [`AppError::on_invalid`] without matching SQLSTATE codes themselves.
impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
                Self::Unavailable("database unavailable".into())
            }
            sqlx::Error::Database(d) if node_unavailable(d.code().as_deref(), d.message()) => {
                tracing::warn!(error = %d.message(), "a database node is unavailable; answering 503");
                Self::Unavailable("database unavailable".into())
            }
            // A lock not granted within `lock_timeout` (another transaction's row, a Citus shard being moved with
            // `block_writes`), or a statement past `statement_timeout`: the database is busy, not the request wrong —
            // 503 with Retry-After, which agents honour by re-delivering (docs/scaling.md, "A worker added").
            sqlx::Error::Database(d) if d.code().as_deref() == Some("55P03") => {
                tracing::warn!(error = %d.message(), "a lock was not granted in time; answering 503");
                Self::Unavailable("the organization's data is locked for a moment; try again".into())
            }
            sqlx::Error::Database(d) if d.code().as_deref() == Some("57014") => {
                tracing::warn!(error = %d.message(), "a statement ran out of time; answering 503");
                Self::Unavailable("the database took too long to answer; try again".into())
            }
            sqlx::Error::Database(d) => {
                let constraint = d.constraint().unwrap_or("a constraint").to_string();
                match d.code().as_deref() {
                    Some("23505") => Self::Conflict(format!("an entry with the same key exists ({constraint})")),
                    Some("23P01") => Self::Conflict(format!("it overlaps an existing entry ({constraint})")),
                    Some("23503") => {
                        Self::Conflict(format!("it refers to something that does not exist ({constraint})"))
                    }
                    Some("23514") => {
                        Self::invalid("body", format!("a value is out of its allowed range ({constraint})"))
                    }
                    _ => Self::Internal(e.to_string()),
                }
            }
            _ => Self::Internal(e.to_string()),
        }
    }
}

/// The database (or, on Citus, the worker holding the organization's shards) cannot be reached right now: a
/// connection exception (SQLSTATE class 08), a server shutting down or starting (57P01–57P03), or Citus's own
/// words for a worker it could not reach (raised with other codes, e.g. `failure on connection marked as essential`).
/// Such a request is answered 503 with `Retry-After`, never 500: organizations on the other workers are unaffected,
/// and a retry succeeds once the worker is back (docs/scaling.md, "A worker lost").
pub fn node_unavailable(code: Option<&str>, message: &str) -> bool {
    let by_code = code.is_some_and(|c| c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03"));
    by_code
        || message.contains("connection to the remote node")
        || message.contains("failure on connection marked as essential")
        || message.contains("could not establish any connections to the node")
        || message.contains("connection not open")
}

impl AppError {
    /// A conflict (duplicate key, overlap) said in the handler's words; other errors unchanged.
    pub fn on_conflict(self, detail: impl FnOnce() -> String) -> Self {
        match self {
            Self::Conflict(_) => Self::Conflict(detail()),
            other => other,
        }
    }
}

impl From<crate::db::DbError> for AppError {
    fn from(e: crate::db::DbError) -> Self {
        match e {
            crate::db::DbError::Sqlx(e) => e.into(),
            other => Self::Internal(other.to_string()),
        }
    }
}

/// A value the database holds that the contract's enum does not name (a state, a kind): the data or this binary is
/// wrong, never the request — an internal error, never a guessed value.
impl From<gpuledger_api::states::UnknownValue> for AppError {
    fn from(e: gpuledger_api::states::UnknownValue) -> Self {
        Self::Internal(format!("the database holds a value this release does not know: {e}"))
    }
}

impl From<gpuledger_core::DomainError> for AppError {
    fn from(e: gpuledger_core::DomainError) -> Self {
        match &e {
            gpuledger_core::DomainError::Invalid { field, reason } => Self::invalid(*field, reason.clone()),
            gpuledger_core::DomainError::InvalidAt { path, reason } => Self::invalid(path.clone(), reason.clone()),
            gpuledger_core::DomainError::Overflow { .. } => Self::Internal(e.to_string()),
        }
    }
}

/// `Retry-After` of a 503: the pool waits this long for a connection before giving up, so a retry after it
/// meets a different pool.
pub const RETRY_UNAVAILABLE_SECS: u64 = 2;

/// The problem document.
#[derive(Debug, Serialize)]
struct Problem {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

impl AppError {
    /// What a person is told (the problem document's `detail`, the portal's refusal): the field and the reason,
    /// or the error's text; an internal error's cause only goes to the log, here.
    pub fn detail(&self) -> String {
        match self {
            Self::Invalid { field, reason } | Self::Refused { field, reason } | Self::Unknown { field, reason } => {
                format!("{field}: {reason}")
            }
            Self::Internal(detail) => {
                tracing::error!(error = %detail, "internal error");
                "an internal error occurred; it has been logged".to_string()
            }
            other => other.to_string(),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        let detail = self.detail();
        let field = match &self {
            Self::Invalid { field, .. } | Self::Refused { field, .. } | Self::Unknown { field, .. } => {
                Some(field.clone())
            }
            _ => None,
        };
        let problem = Problem {
            kind: "about:blank",
            title: status.canonical_reason().unwrap_or("Error"),
            status: status.as_u16(),
            detail,
            field,
        };
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        match &self {
            // Power BI and other clients ask for credentials when offered Basic.
            Self::Unauthorized => {
                headers
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(r#"Bearer, Basic realm="GPU Ledger""#));
            }
            Self::TooManyRequests(seconds) | Self::LimitReached { retry_after: seconds, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*seconds));
            }
            // Busy (the pool, or this organization's share of heavy reads): clients may try again shortly.
            Self::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_UNAVAILABLE_SECS));
            }
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test]
    async fn invalid_names_the_field_as_problem_json() {
        let response = AppError::invalid("end", "before start").into_response();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/problem+json");
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["field"], "end");
        assert_eq!(v["status"], 422);
        assert_eq!(v["detail"], "end: before start");
    }

    #[test]
    fn an_unreachable_node_is_unavailable_not_internal() {
        assert!(node_unavailable(Some("08006"), "connection to the remote node 10.0.0.2:5432 failed"));
        assert!(node_unavailable(Some("XX000"), "failure on connection marked as essential: 127.0.0.1:6433"));
        assert!(node_unavailable(Some("57P01"), "terminating connection due to administrator command"));
        assert!(!node_unavailable(Some("23505"), "duplicate key value violates unique constraint"));
        assert!(!node_unavailable(Some("XX000"), "cache lookup failed"));
    }

    #[test]
    fn a_value_the_contract_does_not_name_is_internal() {
        let unknown = "reopened".parse::<gpuledger_api::states::PeriodState>().unwrap_err();
        let e = AppError::from(unknown.clone());
        assert!(matches!(&e, AppError::Internal(d) if d.contains("\"reopened\" is not a PeriodState")), "{e}");
        // As sqlx reports a `Text<PeriodState>` column it could not decode.
        let decode = sqlx::Error::ColumnDecode { index: "\"state\"".into(), source: Box::new(unknown) };
        assert_eq!(AppError::from(decode).status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[tokio::test]
    async fn internal_hides_the_detail() {
        let response = AppError::Internal("password=hunter2".into()).into_response();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        assert!(!String::from_utf8_lossy(&body).contains("hunter2"));
    }
}
