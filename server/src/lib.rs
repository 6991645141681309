//! GPU Ledger's server: HTTP application, database door, embedded default database, and CLI commands.
#![deny(missing_docs)]

pub mod analytics;
pub mod app;
pub mod audit;
pub mod auth;
pub mod budgets;
pub mod cli;
pub mod close;
pub mod db;
pub mod demo;
pub mod disputes;
pub mod embedded;
pub mod error;
pub mod exports;
pub mod health;
pub mod http;
pub mod impact;
pub mod ingest;
pub mod ledger;
pub mod limits;
pub mod maintenance;
pub mod metrics;
pub mod notifications;
pub mod notify;
pub mod openapi;
pub mod orgs;
pub mod pagecache;
pub mod policy;
pub mod portal;
pub mod readmodel;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod tenancy;
pub mod training;
pub mod usage;
