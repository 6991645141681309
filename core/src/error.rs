//! The crate's single error type.

use thiserror::Error;

/// Why a domain value could not be built or a computation could not finish.
///
/// Every variant names the field or operation concerned, so a message shown to an
/// operator or returned by an API says what was wrong without a stack trace.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DomainError {
    /// A value failed validation.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field or value kind that was rejected (e.g. `period`, `gpu_uuid`).
        field: &'static str,
        /// What was wrong with it, in words.
        reason: String,
    },
    /// A value inside a document failed validation; `path` locates it (e.g. `classes[1].borrowed`).
    #[error("invalid {path}: {reason}")]
    InvalidAt {
        /// Where in the document.
        path: String,
        /// What was wrong with it, in words.
        reason: String,
    },
    /// Exact arithmetic would have exceeded the range of its integers.
    ///
    /// Returned instead of panicking or silently wrapping: a charge must never be
    /// computed from a wrapped number.
    #[error("arithmetic overflow in {operation}")]
    Overflow {
        /// The operation that overflowed (e.g. `fraction add`).
        operation: &'static str,
    },
}

impl DomainError {
    /// Shorthand for [`DomainError::Invalid`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid { field, reason: reason.into() }
    }

    /// Shorthand for [`DomainError::InvalidAt`].
    pub fn invalid_at(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidAt { path: path.into(), reason: reason.into() }
    }

    /// The field or path the error names, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => Some(field),
            Self::InvalidAt { path, .. } => Some(path),
            Self::Overflow { .. } => None,
        }
    }

    /// Shorthand for [`DomainError::Overflow`].
    pub fn overflow(operation: &'static str) -> Self {
        Self::Overflow { operation }
    }
}
