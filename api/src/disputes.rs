//! Disputes of closed lines and their credits (`/api/v1/disputes/…`).
