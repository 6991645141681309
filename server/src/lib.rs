//! GPU Ledger's server: HTTP application, database door, embedded default database, and CLI commands.

pub mod app;
pub mod auth;
pub mod cli;
pub mod db;
pub mod demo;
pub mod embedded;
pub mod error;
pub mod health;
pub mod ingest;
pub mod openapi;
pub mod portal;
