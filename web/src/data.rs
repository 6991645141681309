//! What pages read, and the trait through which the server supplies it.

use std::{future::Future, pin::Pin, sync::Arc};

use serde::{Deserialize, Serialize};

/// Why the portal could not load its data; shown to the user as is, so it must be safe to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortalError {
    /// A short, user-facing explanation.
    pub message: String,
}

impl std::fmt::Display for PortalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The landing page's picture of the system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    /// Whether the database answered.
    pub database_ok: bool,
    /// The newest schema migration applied, if any.
    pub schema_version: Option<i64>,
    /// The organization this server shows without sign-in (the demo), if any.
    pub organization: Option<OrgSummary>,
}

/// Counts that tell an admin what an organization holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrgSummary {
    /// URL-safe organization name.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// Departments defined.
    pub departments: i64,
    /// Tenants defined.
    pub tenants: i64,
    /// Clusters registered (retired ones included).
    pub clusters: i64,
    /// GPU models in the approved inventory.
    pub gpu_models: i64,
    /// Allocation intervals recorded, open or closed.
    pub allocation_intervals: i64,
}

/// A boxed, sendable future, so the trait stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where pages get their data. The server implements it over PostgreSQL; tests use a fake.
pub trait PortalData: Send + Sync + 'static {
    /// The landing page's overview.
    fn overview(&self) -> BoxFuture<'_, Result<Overview, PortalError>>;
}

/// The handle placed in Leptos context (context values must be `Clone`).
#[derive(Clone)]
pub struct PortalDataHandle(pub Arc<dyn PortalData>);

impl PortalDataHandle {
    /// Wraps an implementation.
    pub fn new(data: impl PortalData) -> Self {
        Self(Arc::new(data))
    }
}

/// Lets a page set the HTTP status of the response it renders in (e.g. 404), without the portal
/// depending on the web framework: the server places one in context per request.
#[derive(Clone)]
pub struct ResponseStatus(pub Arc<dyn Fn(u16) + Send + Sync>);

impl ResponseStatus {
    /// Sets the response's status code.
    pub fn set(&self, code: u16) {
        (self.0)(code)
    }
}
