//! Metrics parsing (in progress).
