//! Months and their close: periods, close, evidence, findings (`/api/v1/periods/…`).
