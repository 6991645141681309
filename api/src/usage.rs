//! Gateways' usage records (`/api/v1/usage/records`) and endpoints' aliases (`/api/v1/endpoints/{endpoint}/aliases`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::{Line, List};

/// A record kept without a tenant: its caller is not known yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UnknownCaller {
    /// Its line in the request (from 1).
    pub line: usize,
    /// Its record_id.
    pub record_id: String,
    /// Why it has no tenant.
    pub reason: String,
}

/// `POST /api/v1/usage/records`: what was kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UsageAck {
    /// Records in the request.
    pub received: usize,
    /// Records newly stored.
    pub stored: usize,
    /// Records already stored (same record_id).
    pub duplicates: usize,
    /// Newly stored records whose caller no tenant or alias names.
    pub unknown: Vec<UnknownCaller>,
}

/// One alias of an endpoint's callers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Alias {
    /// `gateway_key` or `team`.
    pub kind: AliasKind,
    /// The gateway key or team name as the records carry it.
    pub alias: String,
    /// The tenant (name; in a request, a name or an ID).
    pub tenant: String,
}

/// `GET /api/v1/endpoints/{endpoint}/aliases`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Aliases {
    /// The endpoint.
    pub endpoint: String,
    /// Its aliases, by kind and alias.
    pub aliases: Vec<Alias>,
}

/// `PUT /api/v1/endpoints/{endpoint}/aliases`: the endpoint's new aliases (replacing all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AliasesRequest {
    /// Every alias of the endpoint (an alias given twice: 409).
    pub aliases: List<AliasBody, 0, 1000>,
}

/// One alias of [`AliasesRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AliasBody {
    /// What the records carry.
    pub kind: AliasKind,
    /// The gateway key or team name as the records carry it.
    pub alias: Line<200>,
    /// The tenant (name or ID).
    pub tenant: Line<100>,
}

/// What an alias names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AliasKind {
    /// A gateway key.
    GatewayKey,
    /// A team.
    Team,
}

crate::states::names!(AliasKind { GatewayKey => "gateway_key", Team => "team" });

/// `PUT /api/v1/endpoints/{endpoint}/aliases`: what changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AliasesSet {
    /// The endpoint.
    pub endpoint: String,
    /// Aliases it has now.
    pub aliases: usize,
    /// Records kept without a tenant that the aliases attributed.
    pub attributed: u64,
}
