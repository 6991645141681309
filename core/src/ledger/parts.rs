//! A ledger computed from its allocations in parts, so that a month of a large fleet need not be held at once.
//!
//! The terms that read single allocations — the allocation pass, the borrowed sweep (per quota pool) and energy (per
//! allocation and device) — run per part; what the later terms need of them is kept as exact sums: per (tenant,
//! class) usage and energy, the shared endpoints' and unowned GPU-nanoseconds and the endpoints' kWh. Each quota
//! pool is swept as its allocations arrive ([`super::borrowed::PoolSweep`]), which holds only the allocations still
//! running: parts may cut a pool anywhere, as long as the allocations come **in start order** across the parts
//! (checked). Sums of exact fractions do not depend on their order, every rounding (a pool's step, an allocation's
//! millijoules) is the one [`super::compute`] makes, and the borrowed and energy lines are made once, from the
//! sums: the lines are byte-identical to `compute` of the whole input however it is cut (`core/tests/ledger_parts.rs`).

use std::collections::{BTreeMap, BTreeSet};

use super::{
    AllocationRecord, DeviceEnergy, Ledger, LedgerInput, LedgerNotes, QuotaHolder,
    allocations::{Gathered, Usage},
    arith::{hours, qty},
    borrowed::{PoolSweep, Swept},
    context::Ctx,
    energy::SlotEnergy,
};
use crate::{confidence::Confidence, error::DomainError, fraction::Fraction, ids::TenantId, interval::Interval};

/// What the per-part terms leave for the pooled ones, summed over the parts so far.
#[derive(Default)]
struct Sums {
    usage: BTreeMap<(TenantId, String), Usage>,
    energy: BTreeMap<(TenantId, String), SlotEnergy>,
    endpoint_ns: BTreeMap<String, BTreeMap<String, Fraction>>,
    endpoint_conf: BTreeMap<String, Confidence>,
    unattributed: BTreeMap<String, Fraction>,
    endpoint_energy_kwh: BTreeMap<String, Fraction>,
}

fn add_to(map: &mut BTreeMap<String, Fraction>, key: &str, value: Fraction) -> Result<(), DomainError> {
    match map.get_mut(key) {
        Some(v) => *v = v.checked_add(value)?,
        None => {
            map.insert(key.to_string(), value);
        }
    }
    Ok(())
}

/// A quota pool: being swept part by part, or swept whole (`compute`).
enum Pool {
    Sweeping(Box<PoolSweep>),
    Swept(Swept),
}

/// A period's ledger built part by part: [`LedgerParts::new`] with the input's header (its `allocations` and
/// `energy` are not read), [`LedgerParts::add`] per part, [`LedgerParts::finish`] for the lines.
pub struct LedgerParts<'a> {
    input: &'a LedgerInput,
    period: Interval,
    priced_endpoints: BTreeSet<&'a str>,
    lines: Vec<super::LedgerLine>,
    notes: LedgerNotes,
    sums: Sums,
    pools: BTreeMap<(QuotaHolder, String), Pool>,
}

impl<'a> LedgerParts<'a> {
    /// Checks the input's header and adds the lines that need no allocation (guaranteed capacity).
    pub fn new(input: &'a LedgerInput) -> Result<Self, DomainError> {
        input.policy.validate()?;
        let period = input.interval()?;
        let mut ctx = Ctx::new(input, &[], &[]);
        for t in &input.tenants {
            if !ctx.departments.contains_key(&t.department) {
                return Err(DomainError::invalid_at(
                    format!("tenants[{}].department", t.name),
                    format!("department {} is not listed", t.department),
                ));
            }
        }
        super::guaranteed::lines(&mut ctx, period)?;
        let priced_endpoints = input.policy.services.iter().map(|s| s.endpoint.as_str()).collect();
        Ok(Self {
            input,
            period,
            priced_endpoints,
            lines: ctx.lines,
            notes: LedgerNotes::default(),
            sums: Sums::default(),
            pools: BTreeMap::new(),
        })
    }

    /// Adds one part: some allocations — after every allocation of the parts before in start order (a quota pool's
    /// allocations are swept as they come) — and the energy of their devices over the hours they overlap. Errors
    /// name what made the part impossible, e.g. an allocation of a pool that started before the last one added.
    pub fn add(&mut self, allocations: &[AllocationRecord], energy: &[DeviceEnergy]) -> Result<(), DomainError> {
        let ctx = Ctx::new(self.input, allocations, energy);
        let mut gathered = super::allocations::gather(&ctx, self.period, &self.priced_endpoints, &mut self.notes)?;
        for ((holder, class), segs) in std::mem::take(&mut gathered.pools) {
            let pool = match self.pools.entry((holder, class.to_string())) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    let quotas = super::borrowed::pool_quotas(self.input, self.period, holder, class);
                    v.insert(Pool::Sweeping(Box::new(PoolSweep::new(quotas)?)))
                }
            };
            let Pool::Sweeping(sweep) = pool else {
                return Err(DomainError::invalid_at("allocations", "a pool swept whole cannot take more allocations"));
            };
            for seg in &segs {
                sweep.push(seg)?;
            }
        }
        self.merge(&ctx, gathered)
    }

    /// The whole input's allocations as one part, each pool swept at once (`compute`: they come in any order).
    pub(super) fn add_whole(
        &mut self,
        allocations: &[AllocationRecord],
        energy: &[DeviceEnergy],
    ) -> Result<(), DomainError> {
        let ctx = Ctx::new(self.input, allocations, energy);
        let mut gathered = super::allocations::gather(&ctx, self.period, &self.priced_endpoints, &mut self.notes)?;
        for ((holder, class), segs) in std::mem::take(&mut gathered.pools) {
            let quotas = super::borrowed::pool_quotas(self.input, self.period, holder, class);
            let swept = super::borrowed::sweep_pool(&segs, &quotas)?;
            if self.pools.insert((holder, class.to_string()), Pool::Swept(swept)).is_some() {
                return Err(DomainError::invalid_at("allocations", "a pool swept whole was already met"));
            }
        }
        self.merge(&ctx, gathered)
    }

    /// A part's per-(tenant, class) usage and energy and its endpoint and unowned sums, into the month's.
    fn merge(&mut self, ctx: &Ctx<'_>, gathered: Gathered<'_>) -> Result<(), DomainError> {
        let (slot_energy, endpoint_kwh) =
            super::energy::attribute(ctx, self.period, &gathered, &self.priced_endpoints)?;
        let sums = &mut self.sums;
        for ((tenant, class), e) in gathered.slot_keys.iter().zip(slot_energy) {
            sums.energy.entry((*tenant, (*class).to_string())).or_default().merge(e)?;
        }
        for (endpoint, kwh) in endpoint_kwh {
            add_to(&mut sums.endpoint_energy_kwh, &endpoint, kwh)?;
        }
        for (endpoint, per_class) in gathered.endpoint_ns {
            let into = sums.endpoint_ns.entry(endpoint).or_default();
            for (class, ns) in per_class {
                add_to(into, &class, ns)?;
            }
        }
        for (endpoint, conf) in gathered.endpoint_conf {
            let c = sums.endpoint_conf.entry(endpoint).or_insert(Confidence::Exact);
            *c = c.combine(conf);
        }
        for (class, ns) in gathered.unattributed {
            add_to(&mut sums.unattributed, &class, ns)?;
        }
        for ((tenant, class), u) in gathered.usage {
            let into = sums.usage.entry((tenant, class.to_string())).or_default();
            into.allocated_ns = into.allocated_ns.checked_add(u.allocated_ns)?;
            into.confidence = match (into.confidence, u.confidence) {
                (Some(a), Some(b)) => Some(a.combine(b)),
                (a, b) => a.or(b),
            };
            into.count += u.count;
            into.share_bases.extend(u.share_bases);
        }
        Ok(())
    }

    /// The pools' sweeps ended, the borrowed and energy lines, then the pooled terms (actual cost, service,
    /// overhead, adjustments) over the parts' sums; the lines in canonical order.
    pub fn finish(self) -> Result<Ledger, DomainError> {
        let Self { input, period, priced_endpoints: _, lines, mut notes, mut sums, pools } = self;
        let mut charged_ns: BTreeMap<String, Fraction> = BTreeMap::new();
        let swept: BTreeSet<(QuotaHolder, String)> = pools.keys().cloned().collect();
        for ((_, class), pool) in pools {
            let result = match pool {
                Pool::Sweeping(sweep) => sweep.finish()?,
                Pool::Swept(s) => s,
            };
            super::borrowed::add_swept(&class, result, &mut sums.usage, &mut charged_ns)?;
        }
        let is_swept = |holder: &QuotaHolder, class: &str| swept.contains(&(*holder, class.to_string()));
        super::borrowed::reserved_unswept(&input.quotas, period, is_swept, &mut charged_ns)?;
        for (class, ns) in &sums.unattributed {
            notes.unattributed_gpu_hours.push((class.clone(), qty(hours(*ns)?)?));
        }
        let mut ctx = Ctx::new(input, &[], &[]);
        ctx.lines = lines;
        super::borrowed::lines(&mut ctx, &sums.usage)?;
        super::energy::lines(&mut ctx, &sums.energy)?;
        let gathered = Gathered {
            pools: BTreeMap::new(),
            endpoint_ns: sums.endpoint_ns,
            endpoint_conf: sums.endpoint_conf,
            unattributed: sums.unattributed,
            slot_keys: Vec::new(),
            usage: sums.usage.iter().map(|((t, c), u)| ((*t, c.as_str()), u.clone())).collect(),
            energy_share: Vec::new(),
        };
        let mut spread = super::actual::apply(&mut ctx, &gathered, &mut notes)?;
        let remainders =
            super::service::lines(&mut ctx, &gathered, &sums.endpoint_energy_kwh, &mut spread, &mut notes)?;
        super::overhead::lines(&mut ctx, period, &gathered, &charged_ns, &remainders, &spread)?;
        super::adjustments::lines(&mut ctx)?;
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
}
