//! Analytics, never billed: utilization, inference efficiency, agent sessions (`/api/v1/analytics/…`).
