//! Gateways' usage records (`/api/v1/usage/records`).
