//! A month's ledger and its stored figures (`/api/v1/ledger`, `/api/v1/ledger/months`, `/api/v1/ledger/summaries`).
