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
//! [`compute`] runs one module per term, in this order (each adds its lines to a shared context):
//! `guaranteed` → `allocations` (clips and pools the allocations the later terms read) → `borrowed` → `actual`
//! (a class priced at actual cost: its cloud bill spread over its charged hours) → `energy` → `service` → `overhead` → `adjustments`. `input`, `line` and `notes` hold the public types,
//! `arith` the shared arithmetic (hours, clip, money, qty, distribute, lcm), `context` the shared state.

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
mod service;

use std::collections::BTreeSet;

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
pub use service::{Work, unattributed_work};

use crate::{decimal::Decimal, error::DomainError};
use context::Ctx;

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

/// Computes a period's ledger. Errors name the input that made it impossible (e.g. a class with no rate).
pub fn compute(input: &LedgerInput) -> Result<Ledger, DomainError> {
    input.policy.validate()?;
    let period = input.interval()?;
    let mut ctx = Ctx {
        input,
        tenants: input.tenants.iter().map(|t| (t.id, t)).collect(),
        departments: input.departments.iter().map(|d| (d.id, d)).collect(),
        lines: Vec::new(),
    };
    for t in &input.tenants {
        if !ctx.departments.contains_key(&t.department) {
            return Err(DomainError::invalid_at(
                format!("tenants[{}].department", t.name),
                format!("department {} is not listed", t.department),
            ));
        }
    }
    let policy = &input.policy;
    let priced_endpoints: BTreeSet<&str> = policy.services.iter().map(|s| s.endpoint.as_str()).collect();
    let mut notes = LedgerNotes::default();

    guaranteed::lines(&mut ctx, period)?;
    let mut gathered = allocations::gather(&ctx, period, &priced_endpoints, &mut notes)?;
    let charged_ns = borrowed::lines(&mut ctx, period, &mut gathered)?;
    let mut spread = actual::apply(&mut ctx, &gathered, &mut notes)?;
    let endpoint_energy_kwh = energy::lines(&mut ctx, period, &gathered, &priced_endpoints)?;
    let service_remainders = service::lines(&mut ctx, &gathered, &endpoint_energy_kwh, &mut spread, &mut notes)?;
    overhead::lines(&mut ctx, period, &gathered, &charged_ns, &service_remainders, &spread)?;
    adjustments::lines(&mut ctx)?;

    let mut lines = ctx.lines;
    lines.sort_by(|a, b| {
        (&a.department, &a.tenant, a.term, &a.gpu_class, &a.line_id).cmp(&(
            &b.department,
            &b.tenant,
            b.term,
            &b.gpu_class,
            &b.line_id,
        ))
    });
    for w in lines.windows(2) {
        if w[0].line_id == w[1].line_id {
            return Err(DomainError::invalid_at("lines", format!("two lines have the ID {}", w[0].line_id)));
        }
    }
    Ok(Ledger { lines, notes })
}

/// Sum of the amounts of some lines (signed: credits are negative).
pub fn total(lines: &[LedgerLine]) -> Result<Decimal, DomainError> {
    let mut sum = Decimal::from_scaled(0, AMOUNT_SCALE)?;
    for l in lines {
        sum = sum.checked_add(&l.amount)?;
    }
    sum.with_scale(AMOUNT_SCALE.max(sum.scale()))
}
