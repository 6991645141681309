//! A ledger computed from its allocations in parts, so that a month of a large fleet need not be held at once.
//!
//! The terms that read single allocations — the allocation pass, the borrowed sweep (per quota pool) and energy (per
//! allocation and device) — run per part; what the later terms need of them is kept as exact sums: per (tenant,
//! class) usage, the shared endpoints' and unowned GPU-nanoseconds, the charged GPU-nanoseconds per class and the
//! endpoints' kWh. Sums of exact fractions do not depend on their order, and every rounding (a pool's sweep, an
//! allocation's millijoules) stays inside one part, so the lines are byte-identical to [`super::compute`] of the whole
//! input, however it is cut — as long as each quota pool's allocations are in one part (cut by department and GPU
//! class: a department's quota pools its tenants, per class), which [`LedgerParts::add`] checks.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    AllocationRecord, DeviceEnergy, Ledger, LedgerInput, LedgerNotes, QuotaHolder,
    allocations::{Gathered, Usage},
    arith::{hours, qty},
    context::Ctx,
};
use crate::{confidence::Confidence, error::DomainError, fraction::Fraction, ids::TenantId, interval::Interval};

/// What the per-part terms leave for the pooled ones, summed over the parts so far.
#[derive(Default)]
struct Sums {
    usage: BTreeMap<(TenantId, String), Usage>,
    endpoint_ns: BTreeMap<String, BTreeMap<String, Fraction>>,
    endpoint_conf: BTreeMap<String, Confidence>,
    unattributed: BTreeMap<String, Fraction>,
    charged_ns: BTreeMap<String, Fraction>,
    endpoint_energy_kwh: BTreeMap<String, Fraction>,
    /// Quota pools swept, to refuse a pool cut across parts and to find the quotas nobody's allocations used.
    pools: BTreeSet<(QuotaHolder, String)>,
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

/// A period's ledger built part by part: [`LedgerParts::new`] with the input's header (its `allocations` and
/// `energy` are not read), [`LedgerParts::add`] per part, [`LedgerParts::finish`] for the lines.
pub struct LedgerParts<'a> {
    input: &'a LedgerInput,
    period: Interval,
    priced_endpoints: BTreeSet<&'a str>,
    lines: Vec<super::LedgerLine>,
    notes: LedgerNotes,
    sums: Sums,
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
        })
    }

    /// Adds one part: some allocations — every allocation of each quota pool they open (whole departments) — and
    /// the energy of their devices. Errors name what made the part impossible, e.g. a pool already seen.
    pub fn add(&mut self, allocations: &[AllocationRecord], energy: &[DeviceEnergy]) -> Result<(), DomainError> {
        let mut ctx = Ctx::new(self.input, allocations, energy);
        let mut gathered = super::allocations::gather(&ctx, self.period, &self.priced_endpoints, &mut self.notes)?;
        for (holder, class) in gathered.pools.keys() {
            if !self.sums.pools.insert((*holder, (*class).to_string())) {
                return Err(DomainError::invalid_at(
                    "allocations",
                    format!("the quota pool of {holder:?} for {class} is in two parts: a pool's allocations go in one"),
                ));
            }
        }
        let charged_ns = super::borrowed::lines(&mut ctx, self.period, &mut gathered)?;
        let endpoint_kwh = super::energy::lines(&mut ctx, self.period, &gathered, &self.priced_endpoints)?;
        let sums = &mut self.sums;
        for (class, ns) in charged_ns {
            add_to(&mut sums.charged_ns, &class, ns)?;
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
        // A (tenant, class) belongs to one pool, and a pool to one part: its usage is whole here.
        for ((tenant, class), u) in gathered.usage {
            sums.usage.insert((tenant, class.to_string()), u);
        }
        self.lines.append(&mut ctx.lines);
        Ok(())
    }

    /// The pooled terms (actual cost, service, overhead, adjustments) over the parts' sums, and the lines in
    /// canonical order.
    pub fn finish(self) -> Result<Ledger, DomainError> {
        let Self { input, period, priced_endpoints: _, lines, mut notes, mut sums } = self;
        let pools = &sums.pools;
        let swept = |holder: &QuotaHolder, class: &str| pools.contains(&(*holder, class.to_string()));
        super::borrowed::reserved_unswept(&input.quotas, period, swept, &mut sums.charged_ns)?;
        for (class, ns) in &sums.unattributed {
            notes.unattributed_gpu_hours.push((class.clone(), qty(hours(*ns)?)?));
        }
        let gathered = Gathered {
            pools: BTreeMap::new(),
            endpoint_ns: sums.endpoint_ns,
            endpoint_conf: sums.endpoint_conf,
            unattributed: sums.unattributed,
            slot_keys: Vec::new(),
            usage: sums.usage.iter().map(|((t, c), u)| ((*t, c.as_str()), u.clone())).collect(),
            energy_share: Vec::new(),
        };
        let mut ctx = Ctx::new(input, &[], &[]);
        ctx.lines = lines;
        let mut spread = super::actual::apply(&mut ctx, &gathered, &mut notes)?;
        let remainders =
            super::service::lines(&mut ctx, &gathered, &sums.endpoint_energy_kwh, &mut spread, &mut notes)?;
        super::overhead::lines(&mut ctx, period, &gathered, &sums.charged_ns, &remainders, &spread)?;
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
