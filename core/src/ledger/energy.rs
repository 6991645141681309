//! Variable energy charge: device energy × the allocation's share of the device × PUE × price.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{
    AllocationRecord, DERIVED_RATE_SCALE, EnergySpan, Term,
    allocations::Gathered,
    arith::{clip, money, qty},
    context::Ctx,
};
use crate::{
    confidence::Confidence, decimal::Decimal, error::DomainError, fraction::Fraction, ids::TenantId, interval::Interval,
};

/// A (tenant, class)'s energy so far: its allocations' millijoules summed per device share (each allocation's rounded
/// to whole millijoules), and the weakest confidence among the allocations that drew any. Sums of parts merge
/// exactly: the joules are computed from the merged sums.
#[derive(Clone)]
pub(super) struct SlotEnergy {
    sums: Vec<(Fraction, i128)>,
    conf: Confidence,
}

impl Default for SlotEnergy {
    fn default() -> Self {
        Self { sums: Vec::new(), conf: Confidence::Exact }
    }
}

impl SlotEnergy {
    fn add(&mut self, share: Fraction, mj: i128, conf: Confidence) -> Result<(), DomainError> {
        match self.sums.iter_mut().find(|(s, _)| *s == share) {
            Some((_, sum)) => *sum = sum.checked_add(mj).ok_or_else(|| DomainError::overflow("energy"))?,
            None => self.sums.push((share, mj)),
        }
        self.conf = self.conf.combine(conf);
        Ok(())
    }

    /// Adds another part's energy of the same (tenant, class).
    pub(super) fn merge(&mut self, other: SlotEnergy) -> Result<(), DomainError> {
        for (share, mj) in other.sums {
            self.add(share, mj, other.conf)?;
        }
        self.conf = self.conf.combine(other.conf);
        Ok(())
    }
}

/// Attributes the devices' energy to the allocations of `gathered`: per usage slot (in `slot_keys` order), and the
/// kWh of each priced shared endpoint. Nothing when the policy does not price energy.
#[allow(clippy::type_complexity)]
pub(super) fn attribute(
    ctx: &Ctx<'_>,
    period: Interval,
    gathered: &Gathered<'_>,
    priced_endpoints: &BTreeSet<&str>,
) -> Result<(Vec<SlotEnergy>, BTreeMap<String, Fraction>), DomainError> {
    let input = ctx.input;
    let policy = &input.policy;
    let slot_keys = &gathered.slot_keys;
    let energy_share = &gathered.energy_share;
    let mut endpoint_energy_kwh: BTreeMap<String, Fraction> = BTreeMap::new();
    let mut per_slot: Vec<SlotEnergy> = Vec::new();
    if policy.energy.is_some() {
        // Per device: its spans by start, read in place (a month of a large fleet is millions of device-hours: no
        // copy of them is made unless a device's spans come out of order, e.g. from a hand-edited bundle).
        let mut by_device: HashMap<&str, std::borrow::Cow<'_, [EnergySpan]>> = HashMap::new();
        for d in ctx.energy {
            for sp in &d.spans {
                if sp.end_us <= sp.start_us {
                    return Err(DomainError::invalid_at(
                        "energy",
                        format!("window of {} ends before it starts", d.gpu_uuid),
                    ));
                }
            }
            match by_device.get_mut(d.gpu_uuid.as_str()) {
                // The same device listed twice: its spans together.
                Some(spans) => spans.to_mut().extend_from_slice(&d.spans),
                None => {
                    by_device.insert(d.gpu_uuid.as_str(), std::borrow::Cow::Borrowed(d.spans.as_slice()));
                }
            }
        }
        for spans in by_device.values_mut() {
            if !spans.is_sorted_by_key(|w| w.start_us) {
                spans.to_mut().sort_by_key(|w| w.start_us);
            }
        }
        // The allocation's device energy in whole millijoules (before its share).
        let attribute = |a: &AllocationRecord| -> Result<i128, DomainError> {
            let Some((s, e)) = clip(a.start, a.end, &period) else { return Ok(0) };
            let mut mj = 0_i128;
            for d in &a.devices {
                let Some(windows) = by_device.get(d.as_str()) else { continue };
                let first = windows.partition_point(|w| i128::from(w.end_us) * 1_000 <= s);
                for w in &windows[first..] {
                    let (ws, we, joules) = (i128::from(w.start_us) * 1_000, i128::from(w.end_us) * 1_000, w.joules);
                    if ws >= e {
                        break;
                    }
                    let overlap = we.min(e) - ws.max(s);
                    if overlap <= 0 {
                        continue;
                    }
                    // Rounded to whole millijoules (half up): kept exact, windows of irregular length (scrape jitter)
                    // give every partial window its own denominator and the sum overflows i128.
                    let overflow = || DomainError::overflow("energy");
                    let part = if overlap == we - ws {
                        i128::from(joules).checked_mul(1000).ok_or_else(overflow)?
                    } else {
                        let num = i128::from(joules).checked_mul(overlap).and_then(|v| v.checked_mul(1000));
                        let num = num.ok_or_else(overflow)?;
                        let (q, r) = (num / (we - ws), num % (we - ws));
                        if 2 * r >= we - ws { q + 1 } else { q }
                    };
                    mj = mj.checked_add(part).ok_or_else(overflow)?;
                }
            }
            Ok(mj)
        };
        // Per (tenant, class): millijoules summed per distinct per-device share, then converted once (exactly
        // Σ millijoules / 1000 × share over its allocations).
        per_slot = vec![SlotEnergy::default(); slot_keys.len()];
        for (idx, share, slot) in energy_share {
            let a = &ctx.allocations[*idx];
            let mj = attribute(a)?;
            if mj == 0 {
                continue;
            }
            per_slot[*slot].add(*share, mj, a.confidence)?;
        }
        for a in ctx.allocations {
            if let (Some(ep), Some(_)) = (a.endpoint.as_deref().filter(|e| priced_endpoints.contains(e)), &a.gpu_class)
                && !a.devices.is_empty()
            {
                let share = a.fraction.checked_div(Fraction::from_integer(a.devices.len() as i128)?)?;
                let j = Fraction::new(attribute(a)?, 1000)?.checked_mul(share)?;
                let v = endpoint_energy_kwh.entry(ep.to_string()).or_insert(Fraction::ZERO);
                *v = v.checked_add(j.checked_div(Fraction::from_integer(3_600_000)?)?)?;
            }
        }
    }
    Ok((per_slot, endpoint_energy_kwh))
}

/// The energy lines, from each (tenant, class)'s energy.
pub(super) fn lines(ctx: &mut Ctx<'_>, energy: &BTreeMap<(TenantId, String), SlotEnergy>) -> Result<(), DomainError> {
    let policy = &ctx.input.policy;
    if let Some(price) = &policy.energy {
        let mut joules: BTreeMap<(TenantId, &str), (Fraction, Confidence)> = BTreeMap::new();
        for ((tenant, class), e) in energy {
            if e.sums.is_empty() {
                continue;
            }
            let j = e.sums.iter().try_fold(Fraction::ZERO, |acc, (share, mj)| {
                acc.checked_add(Fraction::new(*mj, 1000)?.checked_mul(*share)?)
            })?;
            joules.insert((*tenant, class.as_str()), (j, e.conf));
        }
        let pue = price.pue.map_or(Fraction::ONE, |p| p.value());
        let unit_price = price.per_kwh.value().checked_mul(pue)?;
        for ((tenant, class), (j, conf)) in &joules {
            let kwh = j.checked_div(Fraction::from_integer(3_600_000)?)?;
            let amount = money(kwh.checked_mul(unit_price)?)?;
            let department = ctx.department_of(*tenant)?;
            let mut line = ctx.base_line(Term::Energy, Some(*tenant), department, class, class)?;
            line.quantity = qty(kwh)?;
            line.unit = "kWh".into();
            line.rate = Decimal::round(unit_price, DERIVED_RATE_SCALE)?;
            line.amount = amount;
            line.confidence = *conf;
            line.evidence = ctx.evidence(&format!("tenant={tenant}&gpu_class={class}&term=energy"));
            let pue_text = price.pue.map(|p| format!(" × PUE {p}")).unwrap_or_default();
            line.explanation = format!(
                "{} kWh on {class} GPUs (device energy × the allocation's share){pue_text} × {} {} = {} {}",
                line.quantity.grouped(),
                price.per_kwh,
                policy.currency,
                amount.grouped(),
                policy.currency
            );
            ctx.lines.push(line);
        }
    }
    Ok(())
}
