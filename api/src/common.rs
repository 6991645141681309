//! Shapes shared by many operations: the error document and list envelopes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Problem details (RFC 9457): every error answer, `application/problem+json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Problem {
    /// Always `about:blank`: the status says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: crate::states::ProblemType,
    /// The status's reason phrase (`Unprocessable Entity`).
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong, for a person: names the field and the reason.
    pub detail: String,
    /// The offending field's path (`policy.classes[0].borrowed`) when one input was wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// A whole list: `{"items": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Items<T> {
    /// The entries, in the operation's documented order.
    pub items: Vec<T>,
}

/// One page of a longer list: `{"items", "total", "page", "per_page"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Page<T> {
    /// The entries of this page.
    pub items: Vec<T>,
    /// Entries in the whole list (all pages).
    pub total: i64,
    /// This page's number, from 1.
    pub page: i64,
    /// Entries per page.
    pub per_page: i64,
}
