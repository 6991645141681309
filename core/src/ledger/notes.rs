//! Findings that are not money (unattributed hours, unpriced allocations, unattributed service work): shown beside
//! the ledger, never silently dropped.

use serde::{Deserialize, Serialize};

use crate::decimal::Decimal;

/// What the computation noticed that is not money: shown beside the ledger, never silently dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerNotes {
    /// GPU-hours held in namespaces no tenant owned.
    pub unattributed_gpu_hours: Vec<(String, Decimal)>,
    /// GPU-hours whose profile had no inventory entry (no class → not priced).
    pub unpriced_allocations: usize,
    /// Allocations that were open at the end of the period (counted to the period end).
    pub open_allocations: usize,
    /// Shared endpoints' work that no tenant's usage accounts for (their model servers counted more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unattributed_service: Vec<UnattributedService>,
    /// Classes the policy prices at actual cost for which the month has no imported bill: priced at the policy's
    /// fallback rates instead (a finding: import the month's bill).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actual_cost_missing: Vec<String>,
}

/// A shared endpoint's unattributed remainder in the period: what its model servers counted beyond the usage
/// attributed to tenants (per counter, floored at zero).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnattributedService {
    /// Endpoint.
    pub endpoint: String,
    /// Requests nobody was attributed.
    pub requests: u64,
    /// Input tokens nobody was attributed.
    pub input_tokens: u64,
    /// Output tokens nobody was attributed.
    pub output_tokens: u64,
    /// Their weighted tokens, in millions.
    pub million_weighted_tokens: Decimal,
    /// The part of the endpoint's cost they stand for, moved to the overhead pool (0 when the endpoint has a price
    /// per million weighted tokens: then nobody is charged for them).
    pub amount: Decimal,
    /// Counters (`requests`, `input_tokens`, `output_tokens`) for which the tenants' usage exceeds what the servers
    /// counted: the usage or the scrapes are wrong. Empty when they agree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub over_attributed: Vec<String>,
}
