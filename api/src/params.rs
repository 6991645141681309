//! The path and query parameters of every operation, one type per operation (or per path shape), read by the
//! server's `Params<T>` and `PathParams<T>` extractors and published as the operations' parameters: a field is a
//! parameter, its type's guard (`crate::input`) is the parameter's schema. Unknown query parameters are refused.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::{CommaList, Id, Instant, Int, Line, Month};

/// A page number, from 1.
pub type PageNumber = Int<1, 1_000_000>;

// ---------------------------------------------------------------- paths

/// `/api/v1/periods/{period}/…`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeriodPath {
    /// The month.
    pub period: Month,
}

/// `/api/v1/policies/{version}…`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionPath {
    /// The policy version (1, 2, …).
    pub version: Int<1, 2_147_483_647>,
}

/// A path naming a thing by its UUID (`/api/v1/tokens/{id}/revoke`, `/api/v1/notifications/webhooks/{id}/…`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdPath {
    /// Its ID.
    pub id: Id,
}

/// `/api/v1/disputes/{id}…`: a dispute by its UUID or its number.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DisputePath {
    /// The dispute's ID (UUID) or number (1, 2, …); anything else names no dispute (404).
    pub id: Line<100>,
}

/// `/api/v1/departments/{department}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DepartmentPath {
    /// The department's name or ID.
    pub department: Line<100>,
}

/// `/api/v1/tenants/{tenant}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantPath {
    /// The tenant's name or ID.
    pub tenant: Line<100>,
}

/// `/api/v1/endpoints/{endpoint}/aliases`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointPath {
    /// The shared endpoint's name.
    pub endpoint: Line<200>,
}

// ---------------------------------------------------------------- the ledger and its months

/// A ledger line's term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Term {
    /// Committed quota × hours × guaranteed rate.
    Guaranteed,
    /// Allocation above quota × borrowed rate.
    Borrowed,
    /// Attributed energy × price.
    Energy,
    /// Share of a shared endpoint.
    Service,
    /// Share of the platform overhead.
    Overhead,
    /// Approved credit.
    Credit,
    /// Correction of a closed month.
    Adjustment,
}

crate::states::names!(Term {
    Guaranteed => "guaranteed",
    Borrowed => "borrowed",
    Energy => "energy",
    Service => "service",
    Overhead => "overhead",
    Credit => "credit",
    Adjustment => "adjustment",
});

impl From<gpuledger_core::ledger::Term> for Term {
    fn from(t: gpuledger_core::ledger::Term) -> Self {
        use gpuledger_core::ledger::Term as T;
        match t {
            T::Guaranteed => Self::Guaranteed,
            T::Borrowed => Self::Borrowed,
            T::Energy => Self::Energy,
            T::Service => Self::Service,
            T::Overhead => Self::Overhead,
            T::Credit => Self::Credit,
            T::Adjustment => Self::Adjustment,
        }
    }
}

/// `GET /api/v1/ledger`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LedgerParams {
    /// The month.
    pub period: Month,
    /// Only this tenant's lines (name or ID).
    pub tenant: Option<Line<100>>,
    /// Only this department's lines (name or ID).
    pub department: Option<Line<100>>,
    /// Only this term's lines.
    pub term: Option<Term>,
    /// The page (default 1).
    pub page: Option<PageNumber>,
    /// Lines per page (default 1000).
    pub per_page: Option<Int<1, 10_000>>,
}

/// `GET /api/v1/ledger/months`: at most 36 months, `to` not before `from` (409 otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MonthsParams {
    /// The first month.
    pub from: Month,
    /// The last month.
    pub to: Month,
    /// Only this department's totals (name or ID).
    pub department: Option<Line<100>>,
}

/// A query of one required month (`GET /api/v1/ledger/summaries`, `/analytics/training`, the impact previews).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MonthParams {
    /// The month.
    pub period: Month,
}

/// A query of an optional month (`GET /api/v1/budgets`, `/forecast`, `/telemetry/coverage`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OptionalMonthParams {
    /// The month (default: this month).
    pub period: Option<Month>,
}

/// How evidence records are sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum EvidenceSort {
    /// Start, oldest first (the default).
    #[serde(rename = "start")]
    Start,
    /// Start, newest first.
    #[serde(rename = "-start")]
    StartDescending,
    /// End, earliest first.
    #[serde(rename = "end")]
    End,
    /// End, latest first.
    #[serde(rename = "-end")]
    EndDescending,
    /// GPU fraction, smallest first.
    #[serde(rename = "fraction")]
    Fraction,
    /// GPU fraction, largest first.
    #[serde(rename = "-fraction")]
    FractionDescending,
    /// Allocation ID, ascending.
    #[serde(rename = "id")]
    Id,
    /// Allocation ID, descending.
    #[serde(rename = "-id")]
    IdDescending,
}

impl EvidenceSort {
    /// The key's name and whether it is descending.
    pub const fn key(self) -> (&'static str, bool) {
        match self {
            Self::Start => ("start", false),
            Self::StartDescending => ("start", true),
            Self::End => ("end", false),
            Self::EndDescending => ("end", true),
            Self::Fraction => ("fraction", false),
            Self::FractionDescending => ("fraction", true),
            Self::Id => ("id", false),
            Self::IdDescending => ("id", true),
        }
    }
}

/// `GET /api/v1/periods/{period}/evidence`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceParams {
    /// Only this tenant's records.
    pub tenant: Option<Id>,
    /// Only this GPU class's records.
    pub gpu_class: Option<Line<100>>,
    /// Only this shared endpoint's records.
    pub endpoint: Option<Line<200>>,
    /// The order (default `start`).
    pub sort: Option<EvidenceSort>,
    /// The page (default 1).
    pub page: Option<PageNumber>,
    /// Records per page (default 100).
    pub per_page: Option<Int<1, 1000>>,
}

// ---------------------------------------------------------------- analytics

/// `GET /api/v1/analytics/utilization`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UtilizationParams {
    /// The month.
    pub period: Month,
    /// Only this tenant.
    pub tenant: Option<Id>,
    /// Percent of activity below which time is idle (default 5).
    pub idle_threshold_pct: Option<crate::input::Threshold>,
    /// Hours of idle time before an allocation is listed (default 1).
    pub min_idle_hours: Option<crate::input::IdleHours>,
    /// The page of allocations (default 1). Pages reach the 100,000 most idle rows (1,000 pages of 100): the
    /// month's rows are not held, only those a page can show; ask for a tenant's rows to see others.
    pub page: Option<Int<1, 1000>>,
    /// Allocations per page (default 100).
    pub per_page: Option<Int<1, 100>>,
}

/// `GET /api/v1/analytics/inference`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InferenceParams {
    /// The month.
    pub period: Month,
    /// Only this department.
    pub department: Option<Id>,
}

/// `GET /api/v1/analytics/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsParams {
    /// The month.
    pub period: Month,
    /// The tenant.
    pub tenant: Id,
}

// ---------------------------------------------------------------- disputes

/// A dispute's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DisputeState {
    /// Waiting for a decision.
    Open,
    /// Accepted (with a credit).
    Accepted,
    /// Rejected.
    Rejected,
}

crate::states::names!(DisputeState { Open => "open", Accepted => "accepted", Rejected => "rejected" });

/// `GET /api/v1/disputes`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DisputeListParams {
    /// Only disputes in this state.
    pub state: Option<DisputeState>,
    /// Only disputes of this month's lines.
    pub period: Option<Month>,
    /// The page (default 1).
    pub page: Option<PageNumber>,
    /// Disputes per page (default 20).
    pub per_page: Option<Int<1, 100>>,
}

// ---------------------------------------------------------------- administration

/// `GET /api/v1/audit`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditParams {
    /// Records at most (default 100).
    pub limit: Option<Int<1, 1000>>,
    /// Only records before this instant (the previous page's `next_before`).
    pub before: Option<Instant>,
    /// Only this action (`policy.approve`, …).
    pub action: Option<Line<64>>,
    /// Actions to leave out, comma-separated (at most 10 of at most 64 characters).
    pub exclude: Option<CommaList<10, 64>>,
    /// How the routine `token.use` records (a token's use, at most once a minute) come: `each` record (the
    /// default), `fold`ed into one row per token and UTC day with a `count`, or `hide`.
    pub token_use: Option<TokenUse>,
}

/// How `GET /api/v1/audit` shows `token.use` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenUse {
    /// Every record.
    Each,
    /// One row per token and UTC day: its latest use, with `count` and `first_at`.
    Fold,
    /// None.
    Hide,
}

/// `GET /api/v1/quotas`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaParams {
    /// Only quotas in force at this instant.
    pub at: Option<Instant>,
}

/// `GET /api/v1/tenancy/ownership`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnershipParams {
    /// The cluster (name or ID).
    pub cluster: Line<200>,
    /// The namespace's name.
    pub namespace: Line<253>,
}

// ---------------------------------------------------------------- exports

/// `GET /api/v1/exports/{ledger,allocations,usage,disputes}.csv`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CsvParams {
    /// The month.
    pub period: Month,
    /// Only this department's rows.
    pub department: Option<Id>,
    /// Only this tenant's rows.
    pub tenant: Option<Id>,
}

/// How a journal's debits are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JournalBy {
    /// One debit per department (the default).
    Department,
    /// One debit per tenant within its department (department-level lines: the department's own row).
    Tenant,
}

/// `GET /api/v1/exports/journal.csv`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JournalParams {
    /// The month (a closed one).
    pub period: Month,
    /// `department` (default) or `tenant`: one debit row per department, or per tenant within its department.
    pub by: Option<JournalBy>,
}

/// A FOCUS version the export offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum FocusVersion {
    /// FOCUS 1.3 (the default): split cost allocation columns.
    #[serde(rename = "1.3")]
    V1_3,
    /// FOCUS 1.2.
    #[serde(rename = "1.2")]
    V1_2,
    /// FOCUS 1.0.
    #[serde(rename = "1.0")]
    V1_0,
}

/// `GET /api/v1/exports/focus.csv`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FocusParams {
    /// The month.
    pub period: Month,
    /// Only this department's rows.
    pub department: Option<Id>,
    /// Only this tenant's rows.
    pub tenant: Option<Id>,
    /// The FOCUS version (default 1.3).
    pub version: Option<FocusVersion>,
}
