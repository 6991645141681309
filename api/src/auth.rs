//! Who the caller is, API tokens, the identity provider, role mappings, the audit log, agent join (`/api/v1/me`, `/api/v1/tokens`, `/api/v1/identity/…`, `/api/v1/audit`, `/api/v1/agents/join`).
