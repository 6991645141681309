//! The ledger: a period's charge lines per tenant, computed from allocation facts, quotas, energy, service usage and
//! an approved cost policy (DESIGN.md, "The charge").
//!
//! ```text
//! tenant charge = guaranteed (quota × hours × guaranteed rate, used or not)
//!               + borrowed   (∫ max(0, allocated(t) − quota(t)) dt × borrowed rate)
//!               + energy     (device kWh over the allocation × its fraction × PUE × price)
//!               + service    (a shared endpoint's cost split by weighted tokens, or tokens × a service rate)
//!               + overhead   (the platform pool distributed by the policy's key)
//!               − credits and adjustments
//! ```
//!
//! [`compute`] is a pure function of a [`LedgerInput`]: the same input gives byte-identical lines (sorted, exact
//! rationals rounded once per line, half away from zero, to cents). Amounts that distribute a total (overhead, an
//! endpoint's cost) use the largest-remainder method so the distributed cents add up to the total exactly.
//!
//! [`compute`] runs one module per term (each adds its lines to a shared context): `guaranteed`; then per part of
//! the allocations (`parts`, [`LedgerParts`]) `allocations` (clips and pools the allocations the later terms read),
//! `borrowed` (swept per quota pool) and `energy`; then over the parts' exact sums `actual` (a class priced at actual
//! cost: its cloud bill spread over its charged hours), `service`, `overhead` and `adjustments`. `input`, `line` and
//! `notes` hold the public types, `arith` the shared arithmetic (hours, clip, money, qty, distribute, lcm),
//! `context` the shared state.

mod actual;
mod adjustments;
mod allocations;
mod arith;
mod borrowed;
mod context;
mod energy;
mod guaranteed;
mod input;
mod line;
mod notes;
mod overhead;
mod parts;
mod service;

use serde::{Deserialize, Serialize};

pub use adjustments::late_adjustments;
pub use arith::distribute;
pub use input::{
    ActualCost, AdjustmentKind, AdjustmentRecord, AllocationRecord, ClassCapacity, DepartmentRef, DeviceEnergy,
    EndpointTotal, EnergyRecord, EnergySpan, LedgerInput, MonthBounds, QuotaHolder, QuotaRecord, TenantRef,
    UsageRecord, group_energy,
};
pub use line::{CSV_HEADER, LedgerLine, Term};
pub use notes::{LedgerNotes, UnattributedService};
pub use parts::LedgerParts;
pub use service::{Work, unattributed_work};

use crate::{decimal::Decimal, error::DomainError};

/// Decimals of money amounts.
pub const AMOUNT_SCALE: u32 = 2;
/// Decimals of quantities (GPU-hours, kWh, million tokens).
pub const QUANTITY_SCALE: u32 = 6;
/// Decimals of derived rates (a split endpoint's cost per million tokens, overhead per share).
pub const DERIVED_RATE_SCALE: u32 = 6;

/// Result of [`compute`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Lines, in canonical order.
    pub lines: Vec<LedgerLine>,
    /// What was not charged and why.
    pub notes: LedgerNotes,
}

/// Computes a period's ledger. Errors name the input that made it impossible (e.g. a class with no rate). The
/// input's allocations are one part of [`LedgerParts`]: a caller that cannot hold the month at once adds them in
/// parts and gets the same lines.
pub fn compute(input: &LedgerInput) -> Result<Ledger, DomainError> {
    let mut parts = LedgerParts::new(input)?;
    parts.add_whole(&input.allocations, &input.energy)?;
    parts.finish()
}

/// Sum of the amounts of some lines (signed: credits are negative).
pub fn total(lines: &[LedgerLine]) -> Result<Decimal, DomainError> {
    let mut sum = Decimal::from_scaled(0, AMOUNT_SCALE)?;
    for l in lines {
        sum = sum.checked_add(&l.amount)?;
    }
    sum.with_scale(AMOUNT_SCALE.max(sum.scale()))
}
