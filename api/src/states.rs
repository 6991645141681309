//! The values of answers' state, kind, scope, role, term and confidence fields, as the contract's enums (issue 33:
//! "state fields that are enums in the domain are enums in the contract"; issue 34: the fields themselves are these
//! types, so a server that writes a value outside them does not compile, and a portal page compares enums, not
//! strings).
//!
//! Where they live: the contract owns its enums rather than re-exporting core's (`gpuledger_core::Confidence`,
//! `gpuledger_core::ledger::Term`, `gpuledger_core::SharingMode`): core's types carry domain data and orderings
//! the wire has no use for (a MIG profile inside a sharing mode), and the contract's must stay stable when the domain
//! changes. Conversions from core's types are here ([`From`]). Enums that are also request parameters stay with
//! their requests (`params::Term`, `params::DisputeState`, `auth::RoleName`, `usage::AliasKind`,
//! `tenancy::ProfileKind`, `costs::CostFindingKind`, `faults::FaultCreditState`); the rest are here.
//!
//! Every variant is spelled on the wire exactly as the server wrote it when the fields were strings (the database's
//! `CHECK` constraints list the stored ones), so the JSON is unchanged. Each enum has `as_str` (that spelling),
//! [`Display`](std::fmt::Display), [`FromStr`](std::str::FromStr) (the server parses what it reads from the database; an unknown value
//! is an [`UnknownValue`], which the server answers as an internal error, never a guess) and `ALL`.
//!
//! One field of the answers stays text: the audit record's `action` (`policy.approve`, `dispute.accepted`, …). The
//! audit log has no `CHECK` on it, about fifty call sites write it (some composed, `dispute.{action}`), and a record
//! written by an older release must stay readable after an action is renamed: it is an open set.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A string that names no value of a contract enum (read from the database, or from an answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownValue {
    /// The enum's name.
    pub kind: &'static str,
    /// The string.
    pub value: String,
}

impl fmt::Display for UnknownValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a {}", self.value, self.kind)
    }
}

impl std::error::Error for UnknownValue {}

/// `as_str`, `ALL`, [`Display`](fmt::Display) and [`FromStr`](std::str::FromStr) for a contract enum, from its variants and their
/// spellings on the wire (the serde names; the api's tests check that the two agree).
macro_rules! names {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// As the wire and the database spell it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name),+
                }
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::states::UnknownValue;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok(Self::$variant),)+
                    _ => Err($crate::states::UnknownValue { kind: stringify!($ty), value: s.to_string() }),
                }
            }
        }
    };
}
pub(crate) use names;

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

names!(Confidence { Exact => "exact", Modeled => "modeled", Estimated => "estimated" });

impl From<gpuledger_core::Confidence> for Confidence {
    fn from(c: gpuledger_core::Confidence) -> Self {
        match c {
            gpuledger_core::Confidence::Exact => Self::Exact,
            gpuledger_core::Confidence::Modeled => Self::Modeled,
            gpuledger_core::Confidence::Estimated => Self::Estimated,
        }
    }
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

names!(PeriodState { Open => "open", Closing => "closing", Closed => "closed" });

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

names!(AdjustmentState {
    PendingApproval => "pending_approval",
    Approved => "approved",
    Applied => "applied",
    Rejected => "rejected",
});

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

names!(PolicyState { Draft => "draft", Approved => "approved", Superseded => "superseded" });

/// An organization's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrgState {
    /// Served.
    Active,
    /// Suspended by its operator (data kept).
    Suspended,
}

names!(OrgState { Active => "active", Suspended => "suspended" });

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

names!(TokenScope { Admin => "admin", Export => "export", Agent => "agent", Join => "join" });

/// Who is calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallerKind {
    /// A browser session.
    User,
    /// An API token.
    Token,
}

names!(CallerKind { User => "user", Token => "token" });

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

names!(ForecastConfidence { High => "high", Medium => "medium", Low => "low" });

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

names!(DeliveryState { Pending => "pending", Delivered => "delivered", Failed => "failed" });

/// The state of a month's stored figures (`read_months.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FiguresState {
    /// Computed from the open month's data as it stands: they change until the month closes.
    Provisional,
    /// The closed month's figures: final.
    Closed,
}

names!(FiguresState { Provisional => "provisional", Closed => "closed" });

/// How a month-end forecast was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ForecastMethod {
    /// The allocations still open, priced to the month's end.
    #[serde(rename = "run_rate")]
    RunRate,
    /// The run rate, and new work at the usual pace of a regular history (the larger of the two).
    #[serde(rename = "run_rate+history")]
    RunRateHistory,
    /// The month is over: its figure.
    #[serde(rename = "final")]
    Final,
}

names!(ForecastMethod { RunRate => "run_rate", RunRateHistory => "run_rate+history", Final => "final" });

/// How an allocation holds its GPU (`allocation_intervals.sharing_mode`; the names of core's
/// `gpuledger_core::SharingMode`, without their data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SharingModeName {
    /// A whole GPU held by one pod.
    Exclusive,
    /// A MIG instance.
    Mig,
    /// One replica of a declared time-slicing policy.
    TimeSlice,
    /// A VM with a vGPU profile.
    Vgpu,
    /// A VM with a whole device passed through.
    Passthrough,
    /// A pod of a shared inference endpoint.
    SharedEndpoint,
    /// A share of one GPU as a soft-sharing scheduler declares it.
    SoftShare,
}

names!(SharingModeName {
    Exclusive => "exclusive",
    Mig => "mig",
    TimeSlice => "time_slice",
    Vgpu => "vgpu",
    Passthrough => "passthrough",
    SharedEndpoint => "shared_endpoint",
    SoftShare => "soft_share",
});

impl From<&gpuledger_core::SharingMode> for SharingModeName {
    fn from(m: &gpuledger_core::SharingMode) -> Self {
        use gpuledger_core::SharingMode as M;
        match m {
            M::Exclusive => Self::Exclusive,
            M::Mig { .. } => Self::Mig,
            M::TimeSlice { .. } => Self::TimeSlice,
            M::Vgpu { .. } => Self::Vgpu,
            M::Passthrough => Self::Passthrough,
            M::SharedEndpoint { .. } => Self::SharedEndpoint,
            M::SoftShare { .. } => Self::SoftShare,
        }
    }
}

/// What a data-quality finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A GPU model without a class, or a profile without a fraction, in the approved inventory.
    InventoryGap,
    /// An agent dropped data while the server was unreachable.
    AgentGap,
    /// A device's shares summed above its capacity.
    Overcommit,
    /// A namespace no tenant claims.
    UnknownTenant,
    /// Allocations on a GPU model the approved inventory gives no class: not priced.
    Unpriced,
    /// No cloud bill for a month whose classes are priced at actual cost.
    CloudBillMissing,
    /// A VM on the cloud bill that no GPU node names.
    UnclaimedVm,
    /// A GPU node with a provider ID and no line on the cloud bill.
    NodeWithoutBillLine,
}

names!(FindingKind {
    InventoryGap => "inventory_gap",
    AgentGap => "agent_gap",
    Overcommit => "overcommit",
    UnknownTenant => "unknown_tenant",
    Unpriced => "unpriced",
    CloudBillMissing => "cloud_bill_missing",
    UnclaimedVm => "unclaimed_vm",
    NodeWithoutBillLine => "node_without_bill_line",
});

impl From<crate::costs::CostFindingKind> for FindingKind {
    fn from(k: crate::costs::CostFindingKind) -> Self {
        match k {
            crate::costs::CostFindingKind::UnclaimedVm => Self::UnclaimedVm,
            crate::costs::CostFindingKind::NodeWithoutBillLine => Self::NodeWithoutBillLine,
        }
    }
}

/// A step of a dispute's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DisputeAction {
    /// The dispute was opened.
    Opened,
    /// Someone commented.
    Commented,
    /// Finance accepted it (a credit is proposed).
    Accepted,
    /// Finance rejected it.
    Rejected,
    /// Its credit was approved.
    CreditApproved,
    /// Its credit was rejected.
    CreditRejected,
}

names!(DisputeAction {
    Opened => "opened",
    Commented => "commented",
    Accepted => "accepted",
    Rejected => "rejected",
    CreditApproved => "credit_approved",
    CreditRejected => "credit_rejected",
});

/// A problem document's `type`: always `about:blank`, the status says what kind of problem it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ProblemType {
    /// `about:blank` (RFC 9457 §4.2.1).
    #[serde(rename = "about:blank")]
    AboutBlank,
}

names!(ProblemType { AboutBlank => "about:blank" });

/// `GET /healthz`'s status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AliveStatus {
    /// The process answers.
    Ok,
}

names!(AliveStatus { Ok => "ok" });

/// `GET /readyz`'s status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadyStatus {
    /// The database answers with the expected schema.
    Ready,
}

names!(ReadyStatus { Ready => "ready" });

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::{fmt::Debug, str::FromStr};

    use serde::{Serialize, de::DeserializeOwned};

    use super::*;
    use crate::{
        auth::RoleName,
        costs::CostFindingKind,
        faults::FaultCreditState,
        params::{DisputeState, Term},
        tenancy::ProfileKind,
        usage::AliasKind,
    };

    /// Each value serializes to exactly the string the server wrote when the field was text (and the database's
    /// `CHECK` lists), parses back from it through serde and [`FromStr`], and `as_str`/`Display` agree; nothing
    /// else parses.
    fn same_strings<T>(all: &[T], wire: &[&str])
    where
        T: Copy + Debug + PartialEq + Serialize + DeserializeOwned + FromStr<Err = UnknownValue> + fmt::Display,
    {
        assert_eq!(all.len(), wire.len(), "{all:?} against {wire:?}");
        for (v, s) in all.iter().zip(wire) {
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::Value::String((*s).to_string()));
            assert_eq!(serde_json::from_value::<T>(serde_json::json!(s)).unwrap(), *v);
            assert_eq!(s.parse::<T>().unwrap(), *v);
            assert_eq!(v.to_string(), *s);
        }
        for wrong in ["", "Open", "unknown", "run rate"] {
            assert!(wrong.parse::<T>().is_err() && serde_json::from_value::<T>(serde_json::json!(wrong)).is_err());
        }
    }

    #[test]
    fn every_enum_round_trips_to_the_strings_the_server_sends() {
        same_strings(Confidence::ALL, &["exact", "modeled", "estimated"]);
        same_strings(PeriodState::ALL, &["open", "closing", "closed"]);
        same_strings(AdjustmentState::ALL, &["pending_approval", "approved", "applied", "rejected"]);
        same_strings(PolicyState::ALL, &["draft", "approved", "superseded"]);
        same_strings(OrgState::ALL, &["active", "suspended"]);
        same_strings(TokenScope::ALL, &["admin", "export", "agent", "join"]);
        same_strings(CallerKind::ALL, &["user", "token"]);
        same_strings(ForecastConfidence::ALL, &["high", "medium", "low"]);
        same_strings(DeliveryState::ALL, &["pending", "delivered", "failed"]);
        same_strings(FiguresState::ALL, &["provisional", "closed"]);
        same_strings(ForecastMethod::ALL, &["run_rate", "run_rate+history", "final"]);
        same_strings(
            SharingModeName::ALL,
            &["exclusive", "mig", "time_slice", "vgpu", "passthrough", "shared_endpoint", "soft_share"],
        );
        same_strings(
            FindingKind::ALL,
            &[
                "inventory_gap",
                "agent_gap",
                "overcommit",
                "unknown_tenant",
                "unpriced",
                "cloud_bill_missing",
                "unclaimed_vm",
                "node_without_bill_line",
            ],
        );
        same_strings(
            DisputeAction::ALL,
            &["opened", "commented", "accepted", "rejected", "credit_approved", "credit_rejected"],
        );
        same_strings(ProblemType::ALL, &["about:blank"]);
        same_strings(AliveStatus::ALL, &["ok"]);
        same_strings(ReadyStatus::ALL, &["ready"]);
        same_strings(Term::ALL, &["guaranteed", "borrowed", "energy", "service", "overhead", "credit", "adjustment"]);
        same_strings(DisputeState::ALL, &["open", "accepted", "rejected"]);
        same_strings(RoleName::ALL, &["admin", "finance", "department_manager", "viewer"]);
        same_strings(AliasKind::ALL, &["gateway_key", "team"]);
        same_strings(ProfileKind::ALL, &["mig", "vgpu"]);
        same_strings(CostFindingKind::ALL, &["unclaimed_vm", "node_without_bill_line"]);
        same_strings(FaultCreditState::ALL, &["proposed", "approved", "rejected", "listed"]);
    }

    #[test]
    fn core_values_map_to_the_names_core_writes() {
        for c in [
            gpuledger_core::Confidence::Exact,
            gpuledger_core::Confidence::Modeled,
            gpuledger_core::Confidence::Estimated,
        ] {
            assert_eq!(Confidence::from(c).as_str(), c.as_str());
        }
        use gpuledger_core::ledger::Term as T;
        for t in [T::Guaranteed, T::Borrowed, T::Energy, T::Service, T::Overhead, T::Credit, T::Adjustment] {
            assert_eq!(Term::from(t).as_str(), t.as_str());
        }
        for k in CostFindingKind::ALL {
            assert_eq!(FindingKind::from(*k).as_str(), k.as_str());
        }
        let e = "exclusive".parse::<SharingModeName>().unwrap();
        assert_eq!(SharingModeName::from(&gpuledger_core::SharingMode::Exclusive), e);
        assert_eq!(
            SharingModeName::from(&gpuledger_core::SharingMode::TimeSlice { replicas: 4 }).as_str(),
            gpuledger_core::SharingMode::TimeSlice { replicas: 4 }.name()
        );
        let unknown = "bogus".parse::<PeriodState>().unwrap_err();
        assert_eq!(unknown.to_string(), "\"bogus\" is not a PeriodState");
    }
}
