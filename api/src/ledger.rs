//! A month's ledger and its stored figures (`/api/v1/ledger`, `/api/v1/ledger/months`, `/api/v1/ledger/summaries`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    analytics::{Inference, TenantUtilization, UtilizationHead},
    training::Training,
};

/// One ledger line, as computed, stored and closed (docs/bundle.md, "A line").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerLine {
    /// `PERIOD/term/holder/detail`, unique in the period.
    pub line_id: String,
    /// The month (`YYYY-MM`).
    pub period: String,
    /// The department's ID.
    pub department_id: String,
    /// The department's name.
    pub department: String,
    /// The tenant's ID (`null` for a department-level line).
    pub tenant_id: Option<String>,
    /// The tenant's name (empty for a department-level line).
    pub tenant: String,
    /// `guaranteed`, `borrowed`, `energy`, `service`, `overhead`, `credit` or `adjustment`.
    pub term: crate::params::Term,
    /// The GPU class (empty when the line is not class-specific).
    pub gpu_class: String,
    /// Quantity, a decimal string (6 decimals).
    pub quantity: String,
    /// The quantity's unit (`GPU-hour`, `kWh`, `million weighted tokens`, `share`, `adjustment`).
    pub unit: String,
    /// Rate per unit, a decimal string.
    pub rate: String,
    /// Amount, a decimal string (2 decimals).
    pub amount: String,
    /// Currency (ISO 4217).
    pub currency: String,
    /// `exact`, `modeled` or `estimated`: the weakest of its inputs.
    pub confidence: crate::states::Confidence,
    /// The cost policy version that priced it.
    pub policy_version: u32,
    /// Where its evidence is (an API path, a quota ID, the policy).
    pub evidence: String,
    /// The line a credit or adjustment corrects (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrects: Option<String>,
    /// One sentence with its numbers.
    pub explanation: String,
}

/// `GET /api/v1/ledger`: a page of a month's lines from the stored figures, with the month's totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ledger {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// `open`, `closing` or `closed`.
    pub state: crate::states::PeriodState,
    /// The month's first instant in the organization's calendar (local midnight of the 1st in `time_zone`; RFC 3339,
    /// UTC). A closed month keeps the instants it closed with.
    pub starts_at: String,
    /// The first instant after the month (local midnight of the next 1st).
    pub ends_at: String,
    /// The IANA time zone the month is cut in (`UTC` by default; the organization's settings).
    pub time_zone: String,
    /// Where the month's charges begin when not at `starts_at`: the first month after a change of time zone
    /// continues from the instant the previous (closed) month ended, so no hour is charged twice or lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues_from: Option<String>,
    /// The cost policy version that priced the figures.
    pub policy_version: Option<i32>,
    /// Currency of the lines (`null` when the month has none).
    pub currency: Option<String>,
    /// The close hash of a closed month.
    pub hash: Option<String>,
    /// When the figures were computed (RFC 3339).
    pub as_of: String,
    /// The open month's snapshot, not final.
    pub provisional: bool,
    /// A provisional snapshot older than the refresh interval while facts changed since, or one the last refresh
    /// could not replace (`refresh_failure`).
    pub stale: bool,
    /// Why the open month's figures could not be brought up to date: these are the last good figures. Absent when
    /// the last refresh succeeded (and for closed months).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_failure: Option<RefreshFailure>,
    /// Sum of the lines matching the filters, a decimal string.
    pub total: String,
    /// Sum per charge term of the lines matching the filters.
    pub totals_by_term: BTreeMap<String, String>,
    /// The computation's organization-wide notes (`null` for a closed month or a caller limited to departments).
    pub notes: Option<serde_json::Value>,
    /// Lines matching the filters (all pages).
    pub count: i64,
    /// This page's number, from 1.
    pub page: u32,
    /// Lines per page.
    pub per_page: u32,
    /// The lines of this page, in ledger order.
    pub lines: Vec<LedgerLine>,
}

/// A refresh of the open months' figures that failed on the organization's data as it stands (or on a passing
/// cause that persisted): a finding for the organization's admin, with what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RefreshFailure {
    /// The first failure of this run of failures (RFC 3339).
    pub since: String,
    /// The latest attempt (RFC 3339).
    pub last_attempt: String,
    /// Attempts that failed in a row.
    pub attempts: i32,
    /// The month being computed when it failed (`YYYY-MM`), if known.
    pub period: Option<String>,
    /// The input the error names (a field, a policy, `figures` when none).
    pub field: String,
    /// Why, as the computation said.
    pub reason: String,
    /// What to do.
    pub fix: String,
}

/// One month of `GET /api/v1/ledger/months`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MonthTotal {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// The state of its figures (`provisional` or `closed`; `null`: no figures yet).
    pub state: Option<crate::states::FiguresState>,
    /// Total of the lines the caller sees, a decimal string (`null`: no figures yet).
    pub total: Option<String>,
    /// When the figures were computed (RFC 3339).
    pub as_of: Option<String>,
}

/// `GET /api/v1/ledger/months`: each month's total, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Months {
    /// One entry per month of the range.
    pub months: Vec<MonthTotal>,
}

/// When a stored summary was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Computed {
    /// The month figures it goes with (RFC 3339).
    pub as_of: String,
    /// When it was computed (RFC 3339).
    pub computed_at: String,
}

/// The month's stored utilization summary: the utilization answer's head and its tenants (default threshold).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UtilizationSummary {
    /// What the analysis covered.
    #[serde(flatten)]
    pub head: UtilizationHead,
    /// Per tenant, most idle first.
    pub tenants: Vec<TenantUtilization>,
    /// When it was made.
    #[serde(flatten)]
    pub computed: Computed,
}

/// The month's stored inference summary: the inference answer over what the caller sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InferenceSummary {
    /// The answer.
    #[serde(flatten)]
    pub inference: Inference,
    /// When it was made.
    #[serde(flatten)]
    pub computed: Computed,
}

/// The month's stored training summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TrainingSummary {
    /// The answer.
    #[serde(flatten)]
    pub training: Training,
    /// When it was made.
    #[serde(flatten)]
    pub computed: Computed,
}

/// `GET /api/v1/ledger/summaries`: the month's stored summaries as the caller may see them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Summaries {
    /// The month (`YYYY-MM`).
    pub period: String,
    /// Newer figures are being summarized (or a kind is not computed yet).
    pub pending: bool,
    /// Idle reservations (`null`: not computed yet).
    pub utilization: Option<UtilizationSummary>,
    /// Inference efficiency (`null`: not computed yet).
    pub inference: Option<InferenceSummary>,
    /// Work per GPU-hour of training (`null`: not computed yet).
    pub training: Option<TrainingSummary>,
}
