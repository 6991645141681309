//! The organization's own settings (`/api/v1/organization/settings`): what its admins keep (display name, default
//! currency, data retention) and, read-only, the limits its operator set.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    input::{Currency, Int, Line},
    tenancy::MAX_ACCOUNT,
};

/// `GET /api/v1/organization/settings` (and the answer of `PUT`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OrganizationSettings {
    /// The organization's slug (set by the operator at creation; never changes).
    pub slug: String,
    /// Its display name.
    pub display_name: String,
    /// The currency new cost policies default to (ISO 4217: three uppercase letters, e.g. `EUR`).
    pub default_currency: String,
    /// How many months of history the organization keeps (12 to 120).
    pub retention_months: i32,
    /// `active` or `suspended`.
    pub state: crate::states::OrgState,
    /// Limits the operator set (read-only here).
    pub limits: OrganizationLimits,
    /// The platform's own cost centre: the month's journal credits the recovered GPU cost to it (none: not set).
    #[serde(default)]
    pub platform_cost_center: Option<String>,
    /// The platform's own general-ledger account the journal credits (none: not set; the journal says so).
    #[serde(default)]
    pub platform_gl_account: Option<String>,
    /// The IANA time zone whose calendar months are the organization's periods (default `UTC`): a period runs from
    /// local midnight of the 1st. A change applies from the next open month; closed months keep theirs.
    pub time_zone: String,
    /// When the settings last changed (RFC 3339).
    pub updated_at: String,
    /// Who changed them last.
    pub updated_by: String,
}

/// The organization's limits, set by the operator (`gpuledger-server org limits`); `null` is no limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OrganizationLimits {
    /// API requests per minute (tokens and sessions; agents' ingest is bounded by the daily volume instead).
    pub rate_limit_per_minute: Option<i64>,
    /// Facts the organization's agents may send per UTC day; batches beyond it get 429 naming the limit.
    pub ingest_facts_per_day: Option<i64>,
    /// Facts received today (UTC), counted while an ingest limit is set.
    pub ingest_facts_today: i64,
}

/// The limits of a GET answer sent back in a settings PUT: read strictly (the same three members, numbers or
/// `null`) and then ignored — the operator sets them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsSentBack {
    /// As in the GET answer.
    #[serde(default)]
    pub rate_limit_per_minute: Option<AnyWhole>,
    /// As in the GET answer.
    #[serde(default)]
    pub ingest_facts_per_day: Option<AnyWhole>,
    /// As in the GET answer.
    #[serde(default)]
    pub ingest_facts_today: Option<AnyWhole>,
}

/// Any whole number a GET answer can hold (`2.0` included, as JSON Schema's integers are).
pub type AnyWhole = crate::input::Int<{ i64::MIN }, { i64::MAX }>;

/// `PUT /api/v1/organization/settings`: the settings admins keep (the first three always, as the form sends them;
/// the platform's accounts left out: unchanged, `null`: cleared).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsBody {
    /// Display name.
    pub display_name: Line<200>,
    /// ISO 4217 code: three uppercase letters.
    pub default_currency: Currency,
    /// Months of history to keep.
    pub retention_months: Int<12, 120>,
    /// The platform's cost centre the month's journal credits (`null` clears it).
    #[serde(default, deserialize_with = "crate::input::clearable", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Line<MAX_ACCOUNT>>")]
    pub platform_cost_center: Option<Option<Line<MAX_ACCOUNT>>>,
    /// The platform's general-ledger account the month's journal credits (`null` clears it).
    #[serde(default, deserialize_with = "crate::input::clearable", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Line<MAX_ACCOUNT>>")]
    pub platform_gl_account: Option<Option<Line<MAX_ACCOUNT>>>,
    /// IANA time zone (`Europe/Berlin`, `Asia/Tokyo`, `UTC`); left out: unchanged. Applies from the next open month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<Line<64>>,
    /// Read-only, accepted so that a GET answer can be sent back changed: must be the organization's own slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slug: Option<Line<100>>,
    /// Read-only (set by the operator), accepted so that a GET answer can be sent back: must be the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::states::OrgState>")]
    pub state: Option<Line<20>>,
    /// Read-only (set by the operator): ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSentBack>,
    /// Read-only: ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<crate::input::Note<64>>,
    /// Read-only: ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<crate::input::Note<400>>,
}
