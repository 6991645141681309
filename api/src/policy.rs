//! Cost policies and quotas (`/api/v1/policies/…`, `/api/v1/quotas/…`).
