//! Variable service charge: a shared endpoint's cost split by weighted tokens, or weighted tokens × a service rate;
//! the work nobody was attributed goes to the notes (and its share of the cost to the overhead pool).

use std::collections::{BTreeMap, BTreeSet};

use super::{
    AMOUNT_SCALE, DERIVED_RATE_SCALE, LedgerNotes, QUANTITY_SCALE, Term, UnattributedService,
    allocations::Gathered,
    arith::{distribute, hours, money, qty},
    context::Ctx,
};
use crate::{confidence::Confidence, decimal::Decimal, error::DomainError, fraction::Fraction, ids::TenantId};

/// Requests, input tokens and output tokens of one model on one endpoint.
pub type Work = [u64; 3];

/// What shared endpoints' model servers counted beyond the work attributed to tenants, per (endpoint, model): each
/// counter `counted − attributed` floored at 0, and which counters the attributed work exceeds. Only endpoints with
/// counted totals have entries; their models are those counted and those only the attributed work names (counted as
/// zero). The ledger's service term and the inference analytics both reconcile with this.
pub fn unattributed_work<'a>(
    attributed: impl IntoIterator<Item = (&'a str, &'a str, Work)>,
    counted: impl IntoIterator<Item = (&'a str, &'a str, Work)>,
) -> BTreeMap<(&'a str, &'a str), (Work, [bool; 3])> {
    let add = |map: &mut BTreeMap<(&'a str, &'a str), Work>, key, work: Work| {
        let slot = map.entry(key).or_default();
        for (s, n) in slot.iter_mut().zip(work) {
            *s = s.saturating_add(n);
        }
    };
    let mut counts: BTreeMap<(&'a str, &'a str), Work> = BTreeMap::new();
    for (endpoint, model, work) in counted {
        add(&mut counts, (endpoint, model), work);
    }
    let endpoints: BTreeSet<&str> = counts.keys().map(|(e, _)| *e).collect();
    let mut attributed_counts: BTreeMap<(&'a str, &'a str), Work> = BTreeMap::new();
    for (endpoint, model, work) in attributed.into_iter().filter(|(e, _, _)| endpoints.contains(e)) {
        add(&mut attributed_counts, (endpoint, model), work);
    }
    let keys: BTreeSet<(&'a str, &'a str)> = counts.keys().chain(attributed_counts.keys()).copied().collect();
    keys.into_iter()
        .map(|key| {
            let c = counts.get(&key).copied().unwrap_or_default();
            let a = attributed_counts.get(&key).copied().unwrap_or_default();
            (key, (std::array::from_fn(|i| c[i].saturating_sub(a[i])), std::array::from_fn(|i| a[i] > c[i])))
        })
        .collect()
}

/// Adds the service lines; returns the unattributed remainders' shares of their endpoints' cost (endpoint, amount),
/// for the overhead pool.
pub(super) fn lines(
    ctx: &mut Ctx<'_>,
    gathered: &Gathered<'_>,
    endpoint_energy_kwh: &BTreeMap<String, Fraction>,
    spread: &mut super::actual::Spread,
    notes: &mut LedgerNotes,
) -> Result<Vec<(String, Decimal)>, DomainError> {
    let input = ctx.input;
    let policy = &input.policy;
    let endpoint_ns = &gathered.endpoint_ns;
    let endpoint_conf = &gathered.endpoint_conf;
    let million = Fraction::from_integer(1_000_000)?;
    // The unattributed remainders' shares of their endpoints' cost: (endpoint, amount), for the overhead pool.
    let mut service_remainders: Vec<(String, Decimal)> = Vec::new();
    let remainders = unattributed_work(
        input.service_usage.iter().map(|u| (u.endpoint.as_str(), u.model.as_str(), u.work())),
        input.endpoint_totals.iter().map(|t| (t.endpoint.as_str(), t.model.as_str(), t.work())),
    );
    for svc in &policy.services {
        let weight = |model: &str, input_tokens: u64, output_tokens: u64| -> Result<Fraction, DomainError> {
            let (wi, wo) = policy.token_weight(model);
            wi.checked_mul_int(i128::from(input_tokens))?.checked_add(wo.checked_mul_int(i128::from(output_tokens))?)
        };
        let mut weighted: BTreeMap<TenantId, Fraction> = BTreeMap::new();
        for u in input.service_usage.iter().filter(|u| u.endpoint == svc.endpoint) {
            let w = weight(&u.model, u.input_tokens, u.output_tokens)?;
            let v = weighted.entry(u.tenant).or_insert(Fraction::ZERO);
            *v = v.checked_add(w)?;
        }
        let total_w = weighted.values().try_fold(Fraction::ZERO, |a, w| a.checked_add(*w))?;
        // The endpoint's remainder over its models: figures, weighted tokens, counters the usage exceeds.
        let mut remainder: Option<(UnattributedService, Fraction)> = None;
        let mut over_any = [false; 3];
        for ((_, model), (left, over)) in remainders.iter().filter(|((e, _), _)| *e == svc.endpoint) {
            let (r, rw) = match remainder.as_mut() {
                Some((r, rw)) => (r, rw),
                None => {
                    let r = UnattributedService {
                        endpoint: svc.endpoint.clone(),
                        requests: 0,
                        input_tokens: 0,
                        output_tokens: 0,
                        million_weighted_tokens: Decimal::from_scaled(0, QUANTITY_SCALE)?,
                        amount: Decimal::from_scaled(0, AMOUNT_SCALE)?,
                        over_attributed: Vec::new(),
                    };
                    let (r, rw) = remainder.insert((r, Fraction::ZERO));
                    (r, rw)
                }
            };
            r.requests = r.requests.saturating_add(left[0]);
            r.input_tokens = r.input_tokens.saturating_add(left[1]);
            r.output_tokens = r.output_tokens.saturating_add(left[2]);
            *rw = rw.checked_add(weight(model, left[1], left[2])?)?;
            for (any, o) in over_any.iter_mut().zip(over) {
                *any |= *o;
            }
        }
        if let Some((r, rw)) = remainder.as_mut() {
            r.million_weighted_tokens = qty(rw.checked_div(million)?)?;
            r.over_attributed = ["requests", "input_tokens", "output_tokens"]
                .iter()
                .zip(over_any)
                .filter(|(_, o)| *o)
                .map(|(n, _)| (*n).to_string())
                .collect();
        }
        let remainder_w = remainder.as_ref().map_or(Fraction::ZERO, |(_, w)| *w);
        let split_w = total_w.checked_add(remainder_w)?;
        // The endpoint's own cost: its GPU-hours at the guaranteed rate of their class, plus their energy.
        let mut cost = Fraction::ZERO;
        let mut cost_text = Vec::new();
        // The endpoint's part of cloud bills (classes priced at actual cost): when nobody's work can carry it (no
        // usage, or the endpoint is priced per token) it joins the overhead pool, so the bill is never lost.
        let mut bill_part = Fraction::ZERO;
        for (class, ns) in endpoint_ns.get(&svc.endpoint).into_iter().flatten() {
            if let Some(part) = spread.endpoint_cost.get(&(svc.endpoint.clone(), class.clone())) {
                cost = cost.checked_add(part.value())?;
                bill_part = bill_part.checked_add(part.value())?;
                cost_text.push(format!("{} {class} GPU-h of the cloud bill {}", qty(hours(*ns)?)?.grouped(), part));
                continue;
            }
            let rates = policy.rates(class).ok_or_else(|| {
                DomainError::invalid_at(
                    "policy.classes",
                    format!("no rate for GPU class {class} (endpoint {})", svc.endpoint),
                )
            })?;
            let h = hours(*ns)?;
            cost = cost.checked_add(h.checked_mul(rates.guaranteed.value())?)?;
            cost_text.push(format!("{} {class} GPU-h × {}", qty(h)?.grouped(), rates.guaranteed));
        }
        if let (Some(price), Some(kwh)) = (&policy.energy, endpoint_energy_kwh.get(&svc.endpoint)) {
            let pue = price.pue.map_or(Fraction::ONE, |p| p.value());
            cost = cost.checked_add(kwh.checked_mul(price.per_kwh.value())?.checked_mul(pue)?)?;
            cost_text.push(format!("{} kWh", qty(*kwh)?.grouped()));
        }
        if !bill_part.is_zero() && (split_w.is_zero() || svc.per_million_weighted_tokens.is_some()) {
            spread.pool.push((
                format!("{}'s part of the cloud bill (not split by its work)", svc.endpoint),
                money(bill_part)?,
            ));
        }
        if split_w.is_zero() {
            if let Some((r, _)) = remainder {
                notes.unattributed_service.push(r);
            }
            continue;
        }
        let tenants: Vec<TenantId> = weighted.keys().copied().collect();
        let mut weights: Vec<Fraction> = tenants.iter().map(|t| weighted[t]).collect();
        let total_m = split_w.checked_div(million)?;
        let (mut amounts, rate) = match &svc.per_million_weighted_tokens {
            Some(r) => {
                let amounts = weights
                    .iter()
                    .map(|w| money(w.checked_div(million)?.checked_mul(r.value())?))
                    .collect::<Result<Vec<_>, _>>()?;
                (amounts, *r)
            }
            None => {
                // The remainder takes its share like a tenant would, so the tenants' lines and the remainder add
                // up to the endpoint's cost exactly; its amount goes to the overhead pool.
                weights.push(remainder_w);
                let mut amounts = distribute(cost, &weights)?;
                weights.pop();
                let rest = amounts.pop().ok_or_else(|| DomainError::invalid_at("service", "no remainder share"))?;
                if let Some((r, _)) = remainder.as_mut() {
                    r.amount = rest;
                    if !rest.value().is_zero() {
                        service_remainders.push((svc.endpoint.clone(), rest));
                    }
                }
                (amounts, Decimal::round(cost.checked_div(total_m)?, DERIVED_RATE_SCALE)?)
            }
        };
        if let Some((r, _)) = remainder {
            notes.unattributed_service.push(r);
        }
        amounts.truncate(tenants.len());
        for ((tenant, w), amount) in tenants.iter().zip(&weights).zip(amounts) {
            let department = ctx.department_of(*tenant)?;
            let mut line = ctx.base_line(Term::Service, Some(*tenant), department, "", &svc.endpoint)?;
            let m = w.checked_div(million)?;
            line.quantity = qty(m)?;
            line.unit = "million weighted tokens".into();
            line.rate = rate;
            line.amount = amount;
            line.confidence =
                Confidence::Modeled.combine(endpoint_conf.get(&svc.endpoint).copied().unwrap_or(Confidence::Exact));
            line.evidence = ctx.evidence(&format!("tenant={tenant}&endpoint={}", svc.endpoint));
            line.explanation = match &svc.per_million_weighted_tokens {
                Some(r) => format!(
                    "{} million weighted tokens on {} × {r} {} = {} {}",
                    line.quantity.grouped(),
                    svc.endpoint,
                    policy.currency,
                    amount.grouped(),
                    policy.currency
                ),
                None => format!(
                    "{} of {} million weighted tokens on {} (share {}%) of its cost {} {} ({}) = {} {}",
                    line.quantity.grouped(),
                    qty(total_m)?.grouped(),
                    svc.endpoint,
                    Decimal::round(w.checked_mul_int(100)?.checked_div(split_w)?, 2)?,
                    money(cost)?.grouped(),
                    policy.currency,
                    cost_text.join(" + "),
                    amount.grouped(),
                    policy.currency
                ),
            };
            ctx.lines.push(line);
        }
    }
    Ok(service_remainders)
}
