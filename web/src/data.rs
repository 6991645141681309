//! What pages read, and the trait through which the server supplies it.

use std::{future::Future, pin::Pin, sync::Arc};

use gpuledger_api::params::MonthParams;
use serde::{Deserialize, Serialize};

use crate::reads::{Answer, Read, Refusal};

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

/// A boxed, sendable future, so the trait stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where pages get their data. The server implements it over PostgreSQL; tests use a fake.
pub trait PortalData: Send + Sync + 'static {
    /// The landing page's overview.
    fn overview(&self) -> BoxFuture<'_, Result<Overview, PortalError>>;

    /// Answers a page's [`Read`] as the signed-in person: the server calls the feature's own service (the function
    /// the REST handler calls), so a page sees exactly what the API would show that person — one authorization path,
    /// one department scope. A refusal carries the operation's status and detail.
    fn read(&self, read: Read) -> BoxFuture<'_, Result<Answer, Refusal>> {
        let _ = read;
        Box::pin(async { Err(Refusal { status: 500, detail: "the portal has no data source configured".into() }) })
    }

    /// The impact an inventory change would have on `period`'s figures, saving nothing (`POST
    /// /api/v1/inventory/impact`; admins' "Preview impact").
    fn inventory_impact(
        &self,
        period: MonthParams,
        change: serde_json::Value,
    ) -> BoxFuture<'_, Result<gpuledger_api::policy::Impact, Refusal>> {
        let _ = (period, change);
        Box::pin(async { Err(Refusal { status: 500, detail: "the portal has no data source configured".into() }) })
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
