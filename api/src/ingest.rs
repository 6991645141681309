//! Agents' batches of facts (`/api/v1/ingest/batches`).
