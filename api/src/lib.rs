//! GPU Ledger's REST contract: the request and answer types of every `/api/v1` operation.
//!
//! The server's handlers answer with these types, the portal's pages read them, the tests and fakes build them,
//! and the OpenAPI document (`/api/v1/openapi.json`) takes its schemas from their [`schemars::JsonSchema`] derives,
//! so a renamed field breaks the build, not a page at run time.
//!
//! Conventions on the wire (unchanged from the hand-written answers they replace): amounts are decimal strings
//! (`"1234.500000"`), never floats; times are RFC 3339 UTC strings; months are `YYYY-MM`; identifiers are UUID
//! strings. One module per feature, named as the server's feature folders are.
#![deny(missing_docs)]

pub mod analytics;
pub mod auth;
pub mod close;
pub mod common;
pub mod disputes;
pub mod exports;
pub mod health;
pub mod ingest;
pub mod ledger;
pub mod policy;
pub mod tenancy;
pub mod training;
pub mod usage;

pub use common::{Items, Page, Problem};
/// Re-exported so users of the contract derive and generate schemas with the same version.
pub use schemars;
