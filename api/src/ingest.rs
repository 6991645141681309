//! Agents' batches of facts (`/api/v1/ingest/batches`). The batch itself is `gpuledger_core::wire::Batch`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A fact stored with a data-quality flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FlaggedFact {
    /// Its event ID.
    pub event_id: String,
    /// What is wrong (e.g. a profile missing from the inventory).
    pub reason: String,
}

/// `POST /api/v1/ingest/batches`: the acknowledgement, after the commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BatchAck {
    /// Facts in the batch.
    pub received: u64,
    /// Facts newly stored (the rest were duplicates).
    pub stored: u64,
    /// Facts kept but flagged.
    #[serde(default)]
    pub flagged: Vec<FlaggedFact>,
}
