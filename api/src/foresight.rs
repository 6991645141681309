//! Seeing ahead: budgets (`/api/v1/budgets`), the month-end forecast (`/api/v1/forecast`), idle reservations
//! (`/api/v1/idle`) and webhooks (`/api/v1/notifications/webhooks`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::{HttpUrl, Line, List, Money, Month, present};

/// `POST /api/v1/budgets`: a month's budget for one department or one tenant (by name or ID). Setting it again
/// replaces the amount (the history is kept and audited).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["department"]}, {"required": ["tenant"]}]))]
pub struct BudgetBody {
    /// A department's name or ID (exactly one of `department` and `tenant`).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Line<100>")]
    pub department: Option<Line<100>>,
    /// A tenant's name or ID.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Line<100>")]
    pub tenant: Option<Line<100>>,
    /// The month.
    pub period: Month,
    /// The budget in the policy's currency (`"12000.00"`).
    pub amount: Money,
}

/// One budget as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    /// Its ID (the latest setting).
    pub budget_id: String,
    /// `YYYY-MM`.
    pub period: String,
    /// The department's ID (for a tenant budget, the tenant's department).
    pub department_id: Option<String>,
    /// The department's name (the tenant's department, for a tenant budget).
    pub department: String,
    /// The tenant's ID, for a tenant budget.
    pub tenant_id: Option<String>,
    /// The tenant's name, for a tenant budget.
    pub tenant: Option<String>,
    /// Decimal string.
    pub amount: String,
    /// Who set it.
    pub created_by: String,
    /// When (RFC 3339).
    pub created_at: String,
}

/// `GET /api/v1/budgets?period=YYYY-MM`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Budgets {
    /// `YYYY-MM`.
    pub period: String,
    /// The month's budgets, departments first, by name.
    pub items: Vec<Budget>,
}

/// One department's or tenant's month: so far, at month end, against its budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForecastRow {
    /// Department ID.
    pub department_id: String,
    /// Department name.
    pub department: String,
    /// Tenant ID (tenant rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Tenant name (tenant rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Charges up to now: every allocation priced up to now (still-open ones cut at now).
    pub to_date: String,
    /// The month-end figure.
    pub forecast: String,
    /// The budget, when one is set.
    pub budget: Option<String>,
    /// The forecast passes the budget.
    pub over_budget: bool,
    /// `run_rate` (the allocations still open priced to the month's end), `run_rate+history` (and new work at the
    /// usual pace of a regular history), or `final` (the month is over).
    pub method: crate::states::ForecastMethod,
    /// `high`, `medium` or `low`.
    pub confidence: crate::states::ForecastConfidence,
    /// How the forecast was made, with its numbers.
    pub explanation: String,
}

/// `GET /api/v1/forecast?period=YYYY-MM`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Forecast {
    /// `YYYY-MM`.
    pub period: String,
    /// The moment "to date" means (RFC 3339).
    pub as_of: String,
    /// The policy's currency.
    pub currency: String,
    /// Share of the month elapsed, a decimal string from 0 to 1.
    pub elapsed: String,
    /// Per department the caller may see.
    pub departments: Vec<ForecastRow>,
    /// Per tenant the caller may see.
    pub tenants: Vec<ForecastRow>,
    /// Over the departments shown.
    pub total: ForecastTotal,
}

/// Totals of a forecast.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForecastTotal {
    /// Sum of `to_date`.
    pub to_date: String,
    /// Sum of `forecast`.
    pub forecast: String,
    /// Sum of the department budgets set (null when none is).
    pub budget: Option<String>,
}

/// An allocation holding GPUs now that has done (almost) nothing for longer than the threshold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IdleReservation {
    /// Cluster name.
    pub cluster: String,
    /// The allocation's ID in its cluster.
    pub allocation_id: String,
    /// The holder (pod or VM) as `namespace/name`.
    pub holder: String,
    /// Who owns it: its namespace's owner label, when known.
    pub owner: Option<String>,
    /// Tenant name.
    pub tenant: Option<String>,
    /// Department name.
    pub department: Option<String>,
    /// GPU class.
    pub gpu_class: Option<String>,
    /// GPU-equivalents held (exact fraction as text, e.g. `1` or `3/7`).
    pub fraction: String,
    /// Device IDs.
    pub devices: Vec<String>,
    /// Idle since (RFC 3339).
    pub idle_since: String,
    /// Hours idle, decimal string.
    pub idle_hours: String,
    /// GPU-hours held while idle, decimal string.
    pub idle_gpu_hours: String,
    /// What the idle time cost at the class's guaranteed rate (never billed separately: it is already in the
    /// ledger), decimal string; null when the class has no rate.
    pub cost_so_far: Option<String>,
    /// The policy's currency.
    pub currency: String,
}

/// `GET /api/v1/idle`: idle reservations now, longest idle first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IdleList {
    /// When it was computed (RFC 3339).
    pub as_of: String,
    /// Activity below this percentage is idle.
    pub threshold_pct: String,
    /// For at least this many hours.
    pub min_idle_hours: String,
    /// The reservations.
    pub items: Vec<IdleReservation>,
    /// Open allocations without telemetry to tell (not measured; never listed as idle).
    pub not_measured: u64,
}

/// `POST /api/v1/notifications/webhooks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookBody {
    /// Where to POST. Where it may point is the operator's rule (409): https, public addresses only, unless the
    /// server allows loopback or private receivers.
    pub url: HttpUrl,
    /// The events to send (repeats are sent once).
    pub events: List<WebhookEvent, 1, 20>,
    /// `json` (default: the event as JSON, signed) or `slack` (a Slack-compatible `{"text": …}` body, also signed).
    #[serde(default)]
    pub format: Option<WebhookFormat>,
}

/// An event a webhook can be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WebhookEvent {
    /// A department's or tenant's forecast passes its budget.
    #[serde(rename = "budget.forecast_exceeded")]
    BudgetForecastExceeded,
    /// A reservation has stayed idle.
    #[serde(rename = "idle.reservation")]
    IdleReservation,
    /// A month was closed.
    #[serde(rename = "period.closed")]
    PeriodClosed,
    /// A dispute was opened.
    #[serde(rename = "dispute.opened")]
    DisputeOpened,
    /// A dispute was decided.
    #[serde(rename = "dispute.resolved")]
    DisputeResolved,
}

impl WebhookEvent {
    /// As deliveries name it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BudgetForecastExceeded => "budget.forecast_exceeded",
            Self::IdleReservation => "idle.reservation",
            Self::PeriodClosed => "period.closed",
            Self::DisputeOpened => "dispute.opened",
            Self::DisputeResolved => "dispute.resolved",
        }
    }
}

/// How a webhook's body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// The event as JSON.
    Json,
    /// A Slack-compatible `{"text": …}` body.
    Slack,
}

/// A webhook as listed (its secret is never shown again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Webhook {
    /// ID.
    pub webhook_id: String,
    /// Target URL.
    pub url: String,
    /// Events sent.
    pub events: Vec<String>,
    /// `json` or `slack`.
    pub format: String,
    /// Who made it.
    pub created_by: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// When it was turned off (nothing is sent after), if it was.
    pub disabled_at: Option<String>,
    /// Deliveries made.
    pub delivered: u64,
    /// Waiting for a (re)try.
    pub pending: u64,
    /// Given up after every retry.
    pub failed: u64,
}

/// `POST /api/v1/notifications/webhooks` (201): the webhook and its signing secret, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedWebhook {
    /// The webhook.
    #[serde(flatten)]
    pub webhook: Webhook,
    /// HMAC-SHA256 key of the `X-GPULedger-Signature: sha256=<hex>` header over each body.
    pub secret: String,
}

/// One delivery of one event to one webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Delivery {
    /// ID (also the `X-GPULedger-Delivery` header).
    pub delivery_id: String,
    /// Event name.
    pub event: String,
    /// `pending`, `delivered` or `failed`.
    pub state: crate::states::DeliveryState,
    /// Tries so far.
    pub attempts: u32,
    /// The last HTTP status received.
    pub last_status: Option<u16>,
    /// The last error, when it failed.
    pub last_error: Option<String>,
    /// When it was queued (RFC 3339).
    pub created_at: String,
    /// When it was delivered.
    pub delivered_at: Option<String>,
    /// The next try, while pending.
    pub next_attempt_at: Option<String>,
    /// The event as sent.
    pub payload: serde_json::Value,
}
