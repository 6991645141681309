//! Actual-cost pricing (a class with `actual_cost` in the policy): the month's cloud bill for the nodes holding the
//! class's GPUs is spread over every GPU-hour of the class that the ledger charges — tenants' guaranteed and borrowed
//! lines, shared endpoints' hours (which become part of the endpoint's cost) and hours nobody owned (which join the
//! overhead pool) — by the largest-remainder method, so the parts add up to the bill to the cent. Idle capacity is
//! therefore borne by those who used the class, in proportion: the bill is split, not priced.
//!
//! Runs after `borrowed` (the lines exist, priced at the policy's fallback rates) and before `service` and `overhead`,
//! which read what this step hands them. A class with `actual_cost` but no bill for the month keeps its fallback
//! rates and is noted (the server shows it as a finding).

use std::collections::{BTreeMap, BTreeSet};

use super::{
    ActualCost, LedgerNotes, Term,
    allocations::Gathered,
    arith::{distribute, hours, qty},
    context::Ctx,
};
use crate::{decimal::Decimal, error::DomainError, fraction::Fraction};

/// What the spread hands the later terms.
#[derive(Default)]
pub(super) struct Spread {
    /// Classes priced from a bill this period (overhead leaves their idle capacity out: the spread already holds it).
    pub(super) classes: BTreeSet<String>,
    /// (endpoint, class) → the endpoint's part of the class's bill (replaces hours × guaranteed rate in its cost).
    pub(super) endpoint_cost: BTreeMap<(String, String), Decimal>,
    /// Parts for the overhead pool: (what, amount) — hours nobody owned, or a bill nobody's hours could carry.
    pub(super) pool: Vec<(String, Decimal)>,
}

/// Bills per class, summed over the input's entries (a class may come from several clusters' nodes).
fn bills(input: &[ActualCost]) -> Result<BTreeMap<&str, (Fraction, u32)>, DomainError> {
    let mut by: BTreeMap<&str, (Fraction, u32)> = BTreeMap::new();
    for (i, a) in input.iter().enumerate() {
        if a.cost.is_negative() {
            return Err(DomainError::invalid_at(format!("actual_costs[{i}].cost"), format!("{} is negative", a.cost)));
        }
        let e = by.entry(a.gpu_class.as_str()).or_insert((Fraction::ZERO, 0));
        e.0 = e.0.checked_add(a.cost.value())?;
        e.1 = e.1.saturating_add(a.nodes);
    }
    Ok(by)
}

pub(super) fn apply(
    ctx: &mut Ctx<'_>,
    gathered: &Gathered<'_>,
    notes: &mut LedgerNotes,
) -> Result<Spread, DomainError> {
    let input = ctx.input;
    let policy = &input.policy;
    let bills = bills(&input.actual_costs)?;
    let mut spread = Spread::default();
    for class in policy.classes.iter().filter(|c| c.actual_cost) {
        let name = class.gpu_class.as_str();
        let Some((cost, nodes)) = bills.get(name).copied() else {
            notes.actual_cost_missing.push(name.to_string());
            continue;
        };
        spread.classes.insert(name.to_string());
        // The class's charged hours, in a fixed order: its lines (canonical order is applied later, so sort by ID
        // here), then endpoints by name, then hours nobody owned.
        let mut line_idx: Vec<usize> = (0..ctx.lines.len())
            .filter(|&i| {
                let l = &ctx.lines[i];
                matches!(l.term, Term::Guaranteed | Term::Borrowed) && l.gpu_class == name
            })
            .collect();
        line_idx.sort_by(|a, b| ctx.lines[*a].line_id.cmp(&ctx.lines[*b].line_id));
        let mut weights: Vec<Fraction> = line_idx.iter().map(|&i| ctx.lines[i].quantity.value()).collect();
        let endpoints: Vec<(&String, Fraction)> = gathered
            .endpoint_ns
            .iter()
            .filter_map(|(ep, m)| m.get(name).map(|ns| (ep, *ns)))
            .filter(|(_, ns)| !ns.is_zero())
            .collect();
        for (_, ns) in &endpoints {
            weights.push(qty(hours(*ns)?)?.value());
        }
        let unowned = gathered.unattributed.get(name).copied().unwrap_or(Fraction::ZERO);
        let unowned_h = qty(hours(unowned)?)?;
        if !unowned.is_zero() {
            weights.push(unowned_h.value());
        }
        let total_h = weights.iter().try_fold(Fraction::ZERO, |a, w| a.checked_add(*w))?;
        let bill = crate::ledger::arith::money(cost)?;
        if total_h.is_zero() {
            // Nobody held the class this month: the bill cannot be spread over hours; it joins the overhead pool
            // (and the server's finding names it), so it is neither dropped nor charged to one tenant by accident.
            spread.pool.push((format!("{name} cloud bill with no GPU-hours used"), bill));
            continue;
        }
        let parts = distribute(cost, &weights)?;
        let rate = Decimal::round(cost.checked_div(total_h)?, super::DERIVED_RATE_SCALE)?;
        let total_q = Decimal::round(total_h, super::QUANTITY_SCALE)?;
        let mut parts = parts.into_iter();
        for &i in &line_idx {
            let amount = parts.next().ok_or_else(|| DomainError::overflow("actual cost parts"))?;
            let line = &mut ctx.lines[i];
            line.rate = rate;
            line.amount = amount;
            line.explanation = format!(
                "{} {name} GPU-hours ({}) of {} charged this month share the {name} cloud bill {} {} ({} node{}, \
                 by EffectiveCost) = {} {} (actual cost, {} {} per GPU-hour)",
                line.quantity.grouped(),
                line.term.as_str(),
                total_q.grouped(),
                bill.grouped(),
                policy.currency,
                nodes,
                if nodes == 1 { "" } else { "s" },
                amount.grouped(),
                policy.currency,
                rate,
                policy.currency
            );
        }
        for (ep, _) in &endpoints {
            let amount = parts.next().ok_or_else(|| DomainError::overflow("actual cost parts"))?;
            spread.endpoint_cost.insert(((*ep).clone(), name.to_string()), amount);
        }
        if !unowned.is_zero() {
            let amount = parts.next().ok_or_else(|| DomainError::overflow("actual cost parts"))?;
            spread.pool.push((format!("{name} cloud bill for {} GPU-h nobody owned", unowned_h.grouped()), amount));
        }
    }
    Ok(spread)
}
