//! Training progress records and work per GPU-hour (`/api/v1/training/progress`, `/api/v1/analytics/training`).
