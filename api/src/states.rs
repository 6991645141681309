//! The values of answers' state, kind and confidence fields, as the contract's enums (issue 33: "state fields that
//! are enums in the domain are enums in the contract"). The answers still carry them as strings (issue 34 turns the
//! fields themselves into these types); `#[schemars(with = …)]` on each field publishes the enum, so an answer
//! outside it fails Schemathesis's response-conformance check and the server's own contract tests.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How exact a figure is: the weakest of its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Measured directly (a whole GPU, a MIG slice).
    Exact,
    /// Computed by a documented sharing model (time-slicing, a shared endpoint).
    Modeled,
    /// Filled in where data was missing.
    Estimated,
}

/// A month's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PeriodState {
    /// Open: figures are provisional.
    Open,
    /// A close is running.
    Closing,
    /// Closed: figures are final.
    Closed,
}

/// A credit's or adjustment's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdjustmentState {
    /// Waiting for finance.
    PendingApproval,
    /// Approved, not yet on a ledger.
    Approved,
    /// On a ledger.
    Applied,
    /// Refused.
    Rejected,
}

/// A cost policy's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyState {
    /// Editable, prices nothing.
    Draft,
    /// Prices its months.
    Approved,
    /// Replaced by a later approved version.
    Superseded,
}

/// An organization's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrgState {
    /// Served.
    Active,
    /// Suspended by its operator (data kept).
    Suspended,
}

/// An API token's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// Everything an admin may do.
    Admin,
    /// Reading figures and exports (optionally limited to departments).
    Export,
    /// A cluster's agent: ingest only.
    Agent,
    /// A one-time join token, exchanged for an agent credential.
    Join,
}

/// Who is calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallerKind {
    /// A browser session.
    User,
    /// An API token.
    Token,
}

/// How sure a forecast is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ForecastConfidence {
    /// The month is over, or its history is regular.
    High,
    /// The run rate, after the first quarter of the month.
    Medium,
    /// The run rate early in the month.
    Low,
}

/// A webhook delivery's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet (retrying).
    Pending,
    /// Accepted by the receiver.
    Delivered,
    /// Given up.
    Failed,
}
