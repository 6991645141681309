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

/// The signed-in person, as the header and role pages show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    /// E-mail or name.
    pub name: String,
    /// Role names (`admin`, `finance`, `department_manager`, `viewer`).
    pub roles: Vec<String>,
    /// The organization's display name.
    pub org_name: String,
    /// The session's CSRF token, for forms.
    pub csrf: String,
    /// The departments a department manager is limited to (`None`: the whole organization).
    pub departments: Option<Vec<String>>,
}

impl SessionView {
    /// Whether the person has `role`.
    pub fn has(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// How one can sign in to an organization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginOptions {
    /// Organization slug.
    pub org_slug: String,
    /// Display name.
    pub org_name: String,
    /// The configured OpenID provider's issuer, if any.
    pub provider: Option<String>,
    /// Demo accounts (only for a demo organization without a provider): (role, label).
    pub demo_accounts: Vec<(String, String)>,
}

/// An API token as the admin page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRow {
    /// Id.
    pub id: String,
    /// Label.
    pub name: String,
    /// admin, export, agent, join.
    pub scope: String,
    /// Cluster of agent and join tokens.
    pub cluster: Option<String>,
    /// Departments of a limited export token.
    pub departments: Vec<String>,
    /// Creator.
    pub created_by: String,
    /// Creation time (UTC).
    pub created_at: String,
    /// Expiry (UTC), if any.
    pub expires_at: Option<String>,
    /// Last use (UTC), if any.
    pub last_used_at: Option<String>,
    /// Whether it was revoked.
    pub revoked: bool,
}

/// A month as the finance page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeriodRow {
    /// `YYYY-MM`.
    pub period: String,
    /// open, closing, closed.
    pub state: String,
    /// Total of a closed month.
    pub total: Option<String>,
    /// Its currency.
    pub currency: Option<String>,
    /// When it was closed (UTC).
    pub closed_at: Option<String>,
}

/// What the REST API answered to a page's in-process call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiAnswer {
    /// HTTP status.
    pub status: u16,
    /// The JSON body (a problem document on errors); a string for non-JSON answers.
    pub body: serde_json::Value,
}

impl ApiAnswer {
    /// The body when the call succeeded, else the problem's detail as a [`PortalError`].
    pub fn ok(self) -> Result<serde_json::Value, PortalError> {
        if (200..300).contains(&self.status) {
            Ok(self.body)
        } else {
            let detail = serde_json::from_value::<gpuledger_api::Problem>(self.body)
                .map(|p| p.detail)
                .unwrap_or_else(|_| format!("HTTP {}", self.status));
            Err(PortalError { message: detail })
        }
    }

    /// The body as the contract's answer type `T` when the call succeeded, else the problem's detail. An answer
    /// that does not match the contract is an error the page shows, never a page of blanks.
    pub fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, PortalError> {
        let status = self.status;
        serde_json::from_value(self.ok()?).map_err(|e| PortalError {
            message: format!("the server's answer (HTTP {status}) did not match the API contract: {e}"),
        })
    }
}

/// A boxed, sendable future, so the trait stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where pages get their data. The server implements it over PostgreSQL; tests use a fake.
pub trait PortalData: Send + Sync + 'static {
    /// The landing page's overview.
    fn overview(&self) -> BoxFuture<'_, Result<Overview, PortalError>>;

    /// Calls the REST API in-process as the signed-in person: `GET /api/v1/ledger?period=…` and so on. Pages
    /// are thin clients of the same API as everyone else, with the same authorization and scoping.
    fn api(&self, method: &str, path: String, body: Option<String>) -> BoxFuture<'_, Result<ApiAnswer, PortalError>> {
        let _ = (method, path, body);
        Box::pin(async { Err(PortalError { message: "the portal has no API configured".into() }) })
    }

    /// The signed-in person, if any.
    fn session(&self) -> BoxFuture<'_, Option<SessionView>> {
        Box::pin(async { None })
    }

    /// How to sign in to `org` (a slug; `None`: the installation's featured organization).
    fn login_options(&self, org: Option<String>) -> BoxFuture<'_, Result<Option<LoginOptions>, PortalError>> {
        let _ = org;
        Box::pin(async { Ok(None) })
    }

    /// An admin view as JSON rows: `clusters` (with their agents' last contact), `inventory`, `tenancy`.
    fn admin_data(&self, what: &str) -> BoxFuture<'_, Result<serde_json::Value, PortalError>> {
        let _ = what;
        Box::pin(async { Ok(serde_json::Value::Array(Vec::new())) })
    }

    /// The organization's API tokens (admins).
    fn tokens(&self) -> BoxFuture<'_, Result<Vec<TokenRow>, PortalError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// The organization's months (finance).
    fn periods(&self) -> BoxFuture<'_, Result<Vec<PeriodRow>, PortalError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
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

/// `GET path` of the REST API, in process, read as the contract's answer type `T` (a problem's detail, or an
/// answer that does not match the contract, is the error).
pub async fn api_json<T: serde::de::DeserializeOwned>(path: String) -> Result<T, PortalError> {
    let handle = leptos::prelude::use_context::<PortalDataHandle>()
        .ok_or_else(|| PortalError { message: "the portal has no data source configured".into() })?;
    handle.0.api("GET", path, None).await?.json::<T>()
}
