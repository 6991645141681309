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
    pub state: gpuledger_api::states::PeriodState,
    /// Total of a closed month.
    pub total: Option<String>,
    /// Its currency.
    pub currency: Option<String>,
    /// When it was closed (UTC).
    pub closed_at: Option<String>,
}

/// A cluster and one of its agents' last contact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRow {
    /// The cluster's name.
    pub name: String,
    /// When it was registered (ISO 8601).
    pub created_at: String,
    /// When it was retired, if it was.
    pub retired_at: Option<String>,
    /// The agent's mode, `cluster` or `node`; `None`: no agent made contact yet.
    pub mode: Option<String>,
    /// A node agent's node.
    pub node: Option<String>,
    /// The agent's version.
    pub version: Option<String>,
    /// Its last contact (ISO 8601).
    pub last_seen_at: Option<String>,
    /// Facts in its last batch.
    pub last_batch_facts: Option<i64>,
    /// How far behind it reported itself, in seconds.
    pub lag_seconds: Option<i64>,
    /// Facts waiting in its spool (agents that report it).
    pub spool_pending_facts: Option<i64>,
    /// The spool's size in bytes.
    pub spool_pending_bytes: Option<i64>,
    /// Facts it ever dropped.
    pub spool_dropped_facts: Option<i64>,
    /// The spool's bytes on disk, and its cap (agents that report them): how full it is.
    #[serde(default)]
    pub spool_disk_bytes: Option<i64>,
    /// The spool's cap in bytes.
    #[serde(default)]
    pub spool_max_bytes: Option<i64>,
}

impl ClusterRow {
    /// How full the agent's spool is, in percent (agents that report it).
    pub fn spool_fill_pct(&self) -> Option<f64> {
        match (self.spool_disk_bytes, self.spool_max_bytes) {
            (Some(d), Some(m)) if m > 0 => Some(d as f64 * 100.0 / m as f64),
            _ => None,
        }
    }
}

/// One entry of the approved inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryRow {
    /// `model`, `mig`, `vgpu` or `time-slicing`.
    pub kind: String,
    /// The model, profile (`MODEL PROFILE`) or time-slicing policy (`CLUSTER NAME`).
    pub name: String,
    /// A model's price class.
    pub class: Option<String>,
    /// A profile's or time-slicing's fraction of a GPU (`3/7`).
    pub fraction: Option<String>,
    /// Start of the validity (ISO 8601).
    pub valid_from: String,
    /// End of the validity; `None`: in force.
    pub valid_to: Option<String>,
}

/// A namespace's owner over a validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnershipRow {
    /// The tenant's department.
    pub department: String,
    /// The owner tenant.
    pub tenant: String,
    /// The namespace's cluster.
    pub cluster: String,
    /// The namespace.
    pub namespace: String,
    /// Start of the ownership (ISO 8601).
    pub valid_from: String,
    /// End of the ownership; `None`: now.
    pub valid_to: Option<String>,
    /// What established it (`label`, …).
    pub source: String,
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

    /// The instant this request is rendered at: pages read the time from here, never from the wall clock, so a
    /// render is reproducible (the server fixes it once per request).
    fn now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
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

    /// Clusters with their agents' last contact (admins; read from the store, no REST operation answers it).
    fn admin_clusters(&self) -> BoxFuture<'_, Result<Vec<ClusterRow>, PortalError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// The approved inventory as one list (admins).
    fn admin_inventory(&self) -> BoxFuture<'_, Result<Vec<InventoryRow>, PortalError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Namespace ownership with its history (admins).
    fn admin_tenancy(&self) -> BoxFuture<'_, Result<Vec<OwnershipRow>, PortalError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Why the open months' figures could not be brought up to date, if the last refresh failed (admins).
    fn refresh_failure(&self) -> BoxFuture<'_, Result<Option<gpuledger_api::ledger::RefreshFailure>, PortalError>> {
        Box::pin(async { Ok(None) })
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
