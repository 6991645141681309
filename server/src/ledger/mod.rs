//! The ledger's inputs and evidence: loads a period's inputs from the evidence store (RLS-scoped) for
//! `gpuledger_core::ledger` to compute the lines (the close and the read model's refresh worker do), and serves the
//! evidence behind them ([`evidence`]: a closed month's from the index written at close). The lines themselves are
//! served from the read model (`GET /api/v1/ledger…`, in the `readmodel` module).

use axum::{Router, routing::get};

use crate::{
    describe::{Inputs, inputs as described},
    state::AppState,
};

mod evidence;
pub mod store;
pub use crate::calendar::{charged_bounds as bounds, utc_bounds};
pub use crate::store::period_state;
pub use evidence::build_from_bundle as build_evidence_index;
pub(crate) use evidence::read_evidence;
pub use store::{approved_credits, inventory, load_allocations, load_input};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/periods/{period}/evidence", get(evidence::evidence))
}

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![described("get", "/api/v1/periods/{period}/evidence", evidence::evidence)]
}
