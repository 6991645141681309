//! GPU Ledger's cluster agent.
//!
//! - [`metrics`]: Prometheus text exposition parsing; DCGM Exporter and model-server metrics → facts.
//! - [`spool`]: the on-disk spool that keeps facts until the server confirms a durable commit.

pub mod metrics;
pub mod spool;
