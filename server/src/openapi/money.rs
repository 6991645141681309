//! Money's outside connections: the cloud bill in (nodes with their provider IDs, a month's FOCUS import) and credits
//! when the hardware failed.

use serde_json::{Value, json};

use super::Op;

/// A CSV request body (the cloud bill) as the document states it: its smallest acceptable form, a header line with
/// the four columns the import needs (a fuzzer's random text is no bill, and is refused with 422 naming the line
/// and column; a provider's export has more columns and a line per charge, in any order).
pub(super) fn csv_upload(mut content: Value) -> Value {
    if let Some(schema) = content.get_mut("text/csv").and_then(|m| m.get_mut("schema")) {
        *schema = json!({"type": "string", "pattern": "^BillingCurrency,BilledCost,EffectiveCost,ResourceId$",
            "description": "A FOCUS 1.0–1.3 CSV export (gzip allowed): a header line naming at least these columns, \
                            then one line per charge"});
    }
    content
}

/// The cloud bill and the fault credits.
pub(super) fn operations() -> Vec<Op> {
    let mut ops = vec![
        Op::get(
            "/api/v1/inventory/nodes",
            "The GPU nodes as their agents last reported them, with spec.providerID and the key a bill line matches",
        )
        .answers::<gpuledger_api::Items<gpuledger_api::costs::InventoryNode>>(200, "the nodes, by cluster and name"),
        Op::get(
            "/api/v1/costs/imports",
            "A month's imported cloud bill, matched to the GPU nodes (404: none imported)",
        )
        .answers::<gpuledger_api::costs::CostImport>(200, "the import")
        .errors(&[404]),
        Op::post(
            "/api/v1/costs/imports",
            "Import a month's cloud bill: a FOCUS 1.0–1.3 CSV (gzip allowed), matched to the GPU nodes by resource ID; \
             replaces the month's import. A closed month takes it too (`after_close`: its figures stand, a class priced \
             by the bill is corrected at the next close); 409 for a month not begun or being closed",
        )
        .body_text("text/csv")
        .answers::<gpuledger_api::costs::CostImport>(200, "the import, matched")
        .errors(&[409, 413, 415]),
    ];
    ops.extend([
        Op::get(
            "/api/v1/faults/credits",
            "The month's device faults (XID errors, GPUs lost) and the credits they earn the allocations that lost \
             hours, with their evidence and state",
        )
        .answers::<gpuledger_api::faults::FaultCredits>(200, "the credits, by fault time"),
        Op::post(
            "/api/v1/faults/credits/approve",
            "Finance approves a proposed fault credit: an adjustment the next close applies (409 while its hours still \
             grow, or once decided)",
        )
        .answers::<gpuledger_api::faults::FaultCredit>(200, "the credit, approved")
        .errors(&[404, 409]),
        Op::post("/api/v1/faults/credits/reject", "Finance rejects a proposed fault credit, with the reason")
            .answers::<gpuledger_api::faults::FaultCredit>(200, "the credit, rejected")
            .errors(&[404, 409]),
    ]);
    ops
}
