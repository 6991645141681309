//! Property tests of the ledger engine over random small months: the terms add up, borrowed time matches a
//! brute-force hour-by-hour integral, nobody pays for another tenant's allocation, the overhead distributed equals
//! the pool, and the output does not depend on the order of the inputs.
//!
//! Months: 1–5 tenants in 1–2 departments, 1–2 GPU classes, 0–20 allocations with fractions from
//! {1, 1/2, 1/4, 3/7, 2} and whole-hour times in September 2026 (720 h; some left open), 0–3 quotas of whole
//! GPUs with hour-aligned validity (held by a tenant or a department), optionally a fixed overhead pool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use gpuledger_core::{
    Confidence, Fraction, Period,
    decimal::{Decimal, floor_scaled},
    ids::{DepartmentId, TenantId},
    ledger::{
        ActualCost, AllocationRecord, DepartmentRef, Ledger, LedgerInput, LedgerLine, QuotaHolder, QuotaRecord,
        TenantRef, Term, compute, total,
    },
    policy::{ClassRates, CostPolicy, FixedCost, FixedShare, OverheadKey, OverheadPolicy},
};
use proptest::prelude::*;
use time::{Duration, OffsetDateTime, macros::datetime};
use uuid::Uuid;

const HOURS: i64 = 720;
/// (class, guaranteed, borrowed)
const CLASSES: [(&str, &str, &str); 2] = [("H100-80GB", "2.10", "3.00"), ("A100-40GB", "1.20", "1.80")];
const FRACTIONS: [&str; 5] = ["1", "1/2", "1/4", "3/7", "2"];

// ---------------------------------------------------------------------------------------------------------------
// Random months

#[derive(Debug, Clone)]
struct AllocSpec {
    tenant: usize,
    class: usize,
    fraction: usize,
    start: i64,
    /// `None`: still open at the end of the month.
    end: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Holder {
    Tenant(usize),
    Department(usize),
}

#[derive(Debug, Clone)]
struct QuotaSpec {
    holder: Holder,
    class: usize,
    gpus: u32,
    from: i64,
    to: Option<i64>,
}

#[derive(Debug, Clone)]
enum Key {
    Equal,
    Allocated,
    Fixed(Vec<u32>),
}

#[derive(Debug, Clone)]
struct Case {
    departments: usize,
    tenant_dept: Vec<usize>,
    classes: usize,
    allocs: Vec<AllocSpec>,
    quotas: Vec<QuotaSpec>,
    /// Fixed pool in cents, and the key.
    overhead: Option<(i64, Key)>,
    /// Shares for the fixed-shares key when a property tries every key.
    shares: Vec<u32>,
    /// One more allocation (for "nobody pays for another's allocation").
    extra: AllocSpec,
    /// Seed of the shuffle.
    seed: u64,
}

impl Case {
    fn tenants(&self) -> usize {
        self.tenant_dept.len()
    }
}

/// `[start, end)` in whole hours, inside the month; 1 in 10 left open.
fn span() -> impl Strategy<Value = (i64, Option<i64>)> {
    (0..HOURS, 1..=HOURS, prop::bool::weighted(0.1))
        .prop_map(|(s, len, open)| (s, if open { None } else { Some((s + len).min(HOURS)) }))
}

fn shares(nt: usize) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0u32..=3, nt).prop_map(|mut v| {
        if v.iter().all(|s| *s == 0) {
            v[0] = 1;
        }
        v
    })
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=2, 1usize..=5, 1usize..=2).prop_flat_map(|(nd, nt, nc)| {
        let alloc =
            move || {
                (0..nt, 0..nc, 0..FRACTIONS.len(), span()).prop_map(|(tenant, class, fraction, (start, end))| {
                    AllocSpec { tenant, class, fraction, start, end }
                })
            };
        let holder = prop_oneof![(0..nt).prop_map(Holder::Tenant), (0..nd).prop_map(Holder::Department)];
        let quota = (holder, 0..nc, 1u32..=3, span()).prop_map(|(holder, class, gpus, (from, to))| QuotaSpec {
            holder,
            class,
            gpus,
            from,
            to,
        });
        let key = prop_oneof![Just(Key::Equal), Just(Key::Allocated), shares(nt).prop_map(Key::Fixed)];
        (
            prop::collection::vec(0..nd, nt),
            prop::collection::vec(alloc(), 0..=20),
            prop::collection::vec(quota, 0..=3),
            prop::option::of((0i64..=500_000, key)),
            shares(nt),
            alloc(),
            any::<u64>(),
        )
            .prop_map(move |(tenant_dept, allocs, quotas, overhead, shares, extra, seed)| Case {
                departments: nd,
                tenant_dept,
                classes: nc,
                allocs,
                quotas,
                overhead,
                shares,
                extra,
                seed,
            })
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Building the input

fn tid(i: usize) -> TenantId {
    TenantId::from_uuid(Uuid::from_u128(0x100 + i as u128))
}
fn did(d: usize) -> DepartmentId {
    DepartmentId::from_uuid(Uuid::from_u128(0x200 + d as u128))
}
fn at(h: i64) -> OffsetDateTime {
    datetime!(2026-09-01 00:00 UTC) + Duration::hours(h)
}
fn dec(s: &str) -> Decimal {
    Decimal::parse(s).unwrap()
}
fn frac(s: &str) -> Fraction {
    s.parse().unwrap()
}
fn int(n: i64) -> Fraction {
    Fraction::from_integer(i128::from(n)).unwrap()
}

fn key_of(case: &Case, key: &Key) -> OverheadKey {
    match key {
        Key::Equal => OverheadKey::Equal,
        Key::Allocated => OverheadKey::AllocatedGpuHours,
        Key::Fixed(shares) => OverheadKey::FixedShares {
            shares: shares
                .iter()
                .enumerate()
                .take(case.tenants())
                .map(|(i, s)| FixedShare { tenant: tid(i), share: Decimal::from_integer(i128::from(*s)).unwrap() })
                .collect(),
        },
    }
}

fn alloc_record(i: usize, a: &AllocSpec) -> AllocationRecord {
    AllocationRecord {
        id: format!("c1/a{i}"),
        tenant: Some(tid(a.tenant)),
        gpu_class: Some(CLASSES[a.class].0.into()),
        fraction: frac(FRACTIONS[a.fraction]),
        start: at(a.start),
        end: a.end.map(at),
        confidence: if a.fraction == 2 { Confidence::Modeled } else { Confidence::Exact },
        devices: Vec::new(),
        endpoint: None,
        share_basis: None,
    }
}

fn build(case: &Case) -> LedgerInput {
    let overhead = match &case.overhead {
        None => OverheadPolicy::default(),
        Some((cents, key)) => OverheadPolicy {
            fixed: vec![FixedCost {
                name: "platform".into(),
                amount: Decimal::from_scaled(i128::from(*cents), 2).unwrap(),
            }],
            unallocated_capacity: false,
            key: key_of(case, key),
        },
    };
    LedgerInput {
        period: Period::parse("2026-09").unwrap(),
        policy: CostPolicy {
            version: 1,
            currency: "USD".into(),
            classes: CLASSES
                .iter()
                .map(|(c, g, b)| ClassRates {
                    gpu_class: (*c).into(),
                    guaranteed: dec(g),
                    borrowed: dec(b),
                    actual_cost: false,
                })
                .collect(),
            energy: None,
            services: Vec::new(),
            token_weights: Vec::new(),
            overhead,
            idle: Default::default(),
            faults: Default::default(),
        },
        inventory_version: "inv".into(),
        departments: (0..case.departments).map(|d| DepartmentRef { id: did(d), name: format!("dept-{d}") }).collect(),
        tenants: case
            .tenant_dept
            .iter()
            .enumerate()
            // names in the reverse order of the IDs
            .map(|(i, d)| TenantRef { id: tid(i), name: format!("tenant-{}", 9 - i), department: did(*d) })
            .collect(),
        capacity: Vec::new(),
        quotas: case
            .quotas
            .iter()
            .enumerate()
            .map(|(i, q)| QuotaRecord {
                id: format!("q{i}"),
                holder: match q.holder {
                    Holder::Tenant(t) => QuotaHolder::Tenant(tid(t)),
                    Holder::Department(d) => QuotaHolder::Department(did(d)),
                },
                gpu_class: CLASSES[q.class].0.into(),
                gpus: Decimal::from_integer(i128::from(q.gpus)).unwrap(),
                valid_from: at(q.from),
                valid_to: q.to.map(at),
            })
            .collect(),
        allocations: case.allocs.iter().enumerate().map(|(i, a)| alloc_record(i, a)).collect(),
        energy: Vec::new(),
        service_usage: Vec::new(),
        endpoint_totals: Vec::new(),
        adjustments: Vec::new(),
        actual_costs: Vec::new(),
        bounds: None,
    }
}

fn run(input: &LedgerInput) -> Ledger {
    compute(input).unwrap_or_else(|e| panic!("compute failed: {e}"))
}

// ---------------------------------------------------------------------------------------------------------------
// The brute-force model: hour by hour

/// Whose quota an allocation of `tenant` in `class` is measured against (the engine's rule): the tenant's own
/// quota for the class if it has one, else its department's, else none (a pool of its own).
fn pool_of(case: &Case, tenant: usize, class: usize) -> Holder {
    let dept = Holder::Department(case.tenant_dept[tenant]);
    if case.quotas.iter().any(|q| q.holder == Holder::Tenant(tenant) && q.class == class) {
        Holder::Tenant(tenant)
    } else if case.quotas.iter().any(|q| q.holder == dept && q.class == class) {
        dept
    } else {
        Holder::Tenant(tenant)
    }
}

fn quota_at(case: &Case, holder: Holder, class: usize, h: i64) -> Fraction {
    case.quotas
        .iter()
        .filter(|q| q.holder == holder && q.class == class && q.from <= h && h < q.to.unwrap_or(HOURS))
        .fold(Fraction::ZERO, |a, q| a.checked_add(int(i64::from(q.gpus))).unwrap())
}

struct Model {
    /// Exact borrowed GPU-hours per (tenant, class).
    borrowed: BTreeMap<(usize, usize), Fraction>,
    /// Exact allocated GPU-hours per (tenant, class).
    allocated: BTreeMap<(usize, usize), Fraction>,
    /// ∫ max(held(t), quota(t)) dt per pool, in GPU-hours.
    charged: BTreeMap<(Holder, usize), Fraction>,
}

fn model(case: &Case) -> Model {
    let (nt, nc) = (case.tenants(), case.classes);
    let mut held = vec![vec![vec![Fraction::ZERO; HOURS as usize]; nc]; nt];
    let mut allocated = BTreeMap::new();
    for a in &case.allocs {
        let f = frac(FRACTIONS[a.fraction]);
        let end = a.end.unwrap_or(HOURS);
        for h in a.start..end {
            let v = &mut held[a.tenant][a.class][h as usize];
            *v = v.checked_add(f).unwrap();
        }
        let e = allocated.entry((a.tenant, a.class)).or_insert(Fraction::ZERO);
        *e = e.checked_add(f.checked_mul(int(end - a.start)).unwrap()).unwrap();
    }
    let mut pools: BTreeMap<(Holder, usize), Vec<usize>> = BTreeMap::new();
    for t in 0..nt {
        for c in 0..nc {
            pools.entry((pool_of(case, t, c), c)).or_default().push(t);
        }
    }
    let mut borrowed = BTreeMap::new();
    let mut charged = BTreeMap::new();
    for ((holder, c), members) in &pools {
        let state = |h: i64| -> (Vec<Fraction>, Fraction) {
            (members.iter().map(|t| held[*t][*c][h as usize]).collect(), quota_at(case, *holder, *c, h))
        };
        let mut integral = Fraction::ZERO;
        let mut parts = vec![Fraction::ZERO; members.len()];
        let mut h = 0;
        while h < HOURS {
            // a run of identical hours (keeps the exact sums small)
            let (held_now, quota) = state(h);
            let mut len = 1;
            while h + len < HOURS && state(h + len) == (held_now.clone(), quota) {
                len += 1;
            }
            let all = held_now.iter().fold(Fraction::ZERO, |a, v| a.checked_add(*v).unwrap());
            integral = integral.checked_add(all.max(quota).checked_mul(int(len)).unwrap()).unwrap();
            let excess = all.sub_or_zero(quota).unwrap();
            if !excess.is_zero() {
                // each member borrows in proportion to what it holds
                for (i, v) in held_now.iter().enumerate() {
                    let mut part =
                        excess.checked_mul(*v).unwrap().checked_mul(int(len)).unwrap().checked_div(all).unwrap();
                    if members.len() > 1 {
                        // kept exact, a shared pool's shares outgrow i128 here too: 1e-12 GPU-h (rounded down) is plenty
                        part = Fraction::new(floor_scaled(part, 12).unwrap().0, 1_000_000_000_000).unwrap();
                    }
                    parts[i] = parts[i].checked_add(part).unwrap();
                }
            }
            h += len;
        }
        charged.insert((*holder, *c), integral);
        for (i, t) in members.iter().enumerate() {
            borrowed.insert((*t, *c), parts[i]);
        }
    }
    Model { borrowed, allocated, charged }
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers over lines

fn round(v: Fraction, scale: u32) -> Decimal {
    Decimal::round(v, scale).unwrap()
}

fn of_tenant(lines: &[LedgerLine], t: usize) -> Vec<LedgerLine> {
    lines.iter().filter(|l| l.tenant_id == Some(tid(t))).cloned().collect()
}

fn find(lines: &[LedgerLine], term: Term, t: usize, class: usize) -> Option<&LedgerLine> {
    lines.iter().find(|l| l.term == term && l.tenant_id == Some(tid(t)) && l.gpu_class == CLASSES[class].0)
}

fn sum(values: impl IntoIterator<Item = Fraction>) -> Fraction {
    values.into_iter().fold(Fraction::ZERO, |a, v| a.checked_add(v).unwrap())
}

/// Guaranteed GPU-hours and amount of one quota.
fn quota_hours(q: &QuotaSpec) -> Fraction {
    int(i64::from(q.gpus) * (q.to.unwrap_or(HOURS) - q.from))
}

/// |a − b| ≤ n/d
fn near(a: Fraction, b: Fraction, (n, d): (i128, i128)) -> bool {
    let gap = if a >= b { a.checked_sub(b) } else { b.checked_sub(a) }.unwrap();
    gap <= Fraction::new(n, d).unwrap()
}

fn shuffle<T>(v: &mut [T], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

/// Checks the overhead lines of `lines` against a pool of `cents` and per-tenant weights.
fn check_overhead(lines: &[LedgerLine], cents: i64, weights: &[Fraction]) -> Result<(), TestCaseError> {
    let overhead: Vec<&LedgerLine> = lines.iter().filter(|l| l.term == Term::Overhead).collect();
    let distributed = sum(overhead.iter().map(|l| l.amount.value()));
    let pool = Fraction::new(i128::from(cents), 100).unwrap();
    if cents == 0 {
        prop_assert!(overhead.is_empty(), "an empty pool gives no lines");
        return Ok(());
    }
    prop_assert_eq!(distributed, pool, "the overhead distributed equals the pool");
    let total_w = sum(weights.iter().copied());
    for (t, w) in weights.iter().enumerate() {
        let line = lines.iter().find(|l| l.term == Term::Overhead && l.tenant_id == Some(tid(t)));
        if w.is_zero() {
            prop_assert!(line.is_none(), "no overhead line for a tenant with no weight");
            continue;
        }
        let line = line.expect("an overhead line for a tenant with a weight");
        // within one cent of the exact share
        let exact = pool.checked_mul(*w).unwrap().checked_div(total_w).unwrap();
        let amount = line.amount.value();
        let gap = if amount >= exact { amount.checked_sub(exact) } else { exact.checked_sub(amount) }.unwrap();
        prop_assert!(gap < Fraction::new(1, 100).unwrap(), "{} vs exact {}", line.amount, exact);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Each line is its term recomputed by brute force; a tenant's lines add up to its total; the guaranteed and
    /// borrowed GPU-hours of a tenant-level pool are ∫ max(held, quota).
    #[test]
    fn the_terms_add_up_to_the_total(case in case()) {
        let ledger = run(&build(&case));
        let lines = &ledger.lines;
        let m = model(&case);
        let mut tenant_totals = Fraction::ZERO;
        for t in 0..case.tenants() {
            let own = of_tenant(lines, t);
            let mut expected = Fraction::ZERO;
            // guaranteed: one line per quota, gpus × valid hours × guaranteed rate
            for (i, q) in case.quotas.iter().enumerate().filter(|(_, q)| q.holder == Holder::Tenant(t)) {
                let l = own.iter().find(|l| l.term == Term::Guaranteed && l.line_id.ends_with(&format!("/q{i}")));
                let l = l.expect("a guaranteed line per quota");
                let amount = round(quota_hours(q).checked_mul(dec(CLASSES[q.class].1).value()).unwrap(), 2);
                prop_assert_eq!(l.quantity, round(quota_hours(q), 6));
                prop_assert_eq!(l.amount, amount);
                expected = expected.checked_add(amount.value()).unwrap();
            }
            // borrowed: the brute-force share × borrowed rate, one line per class with any
            for (c, (_, _, rate)) in CLASSES.iter().enumerate().take(case.classes) {
                let b = m.borrowed.get(&(t, c)).copied().unwrap_or(Fraction::ZERO);
                let line = find(lines, Term::Borrowed, t, c);
                if b.is_zero() {
                    prop_assert!(line.is_none(), "no borrowed line without borrowing");
                    continue;
                }
                let l = line.expect("a borrowed line");
                let amount = round(b.checked_mul(dec(rate).value()).unwrap(), 2);
                if matches!(pool_of(&case, t, c), Holder::Tenant(_)) {
                    prop_assert_eq!(l.quantity, round(b, 6), "borrowed GPU-h of tenant {} class {}", t, c);
                    prop_assert_eq!(l.amount, amount);
                } else {
                    // A department pool's split is rounded to whole GPU-nanoseconds per stretch of time: the 6th
                    // decimal of the GPU-hours (3.6 ms) or the cent may come out one off at a tie, no more.
                    prop_assert!(near(l.quantity.value(), round(b, 6).value(), (1, 1_000_000)), "{} vs {}", l.quantity, b);
                    prop_assert!(near(l.amount.value(), amount.value(), (1, 100)), "{} vs {}", l.amount, amount);
                }
                expected = expected.checked_add(l.amount.value()).unwrap();
                // never more than what it held
                let held = m.allocated.get(&(t, c)).copied().unwrap_or(Fraction::ZERO);
                prop_assert!(b <= held);
                prop_assert!(l.quantity <= round(held, 6), "borrowed {} > allocated {}", l.quantity, held);
            }
            if let Some(l) = own.iter().find(|l| l.term == Term::Overhead) {
                expected = expected.checked_add(l.amount.value()).unwrap();
            }
            let terms = [Term::Guaranteed, Term::Borrowed, Term::Overhead];
            prop_assert!(own.iter().all(|l| terms.contains(&l.term)), "only these terms without energy or services");
            let tenant_total = total(&own).unwrap();
            prop_assert_eq!(tenant_total.value(), expected, "tenant {} total", t);
            tenant_totals = tenant_totals.checked_add(tenant_total.value()).unwrap();
        }
        // tenant-level pools: guaranteed + borrowed GPU-hours = ∫ max(held, quota)
        for ((holder, c), integral) in &m.charged {
            let Holder::Tenant(t) = *holder else { continue };
            let guaranteed = sum(case.quotas.iter().filter(|q| q.holder == *holder && q.class == *c).map(quota_hours));
            let borrowed = find(lines, Term::Borrowed, t, *c).map_or(Fraction::ZERO, |l| l.quantity.value());
            prop_assert_eq!(guaranteed.checked_add(borrowed).unwrap(), round(*integral, 6).value(), "pool of tenant {}", t);
        }
        // department pools: the members' borrowed GPU-hours add up to ∫ max(0, held − quota)
        for ((holder, c), integral) in &m.charged {
            let Holder::Department(_) = *holder else { continue };
            let members: Vec<usize> = (0..case.tenants()).filter(|t| pool_of(&case, *t, *c) == *holder).collect();
            let reserved = (0..HOURS).fold(Fraction::ZERO, |a, h| a.checked_add(quota_at(&case, *holder, *c, h)).unwrap());
            let above = integral.checked_sub(reserved).unwrap();
            let lent = sum(members.iter().filter_map(|t| find(lines, Term::Borrowed, *t, *c)).map(|l| l.quantity.value()));
            let slack = i128::try_from(members.len()).unwrap();
            prop_assert!(near(lent, above, (slack, 1_000_000)), "department pool: {} vs {}", lent, above);
        }
        // department-level lines and the grand total
        let department_lines: Vec<LedgerLine> = lines.iter().filter(|l| l.tenant_id.is_none()).cloned().collect();
        prop_assert!(department_lines.iter().all(|l| l.term == Term::Guaranteed && l.tenant.is_empty()));
        let dept_quotas = case.quotas.iter().filter(|q| matches!(q.holder, Holder::Department(_))).count();
        prop_assert_eq!(department_lines.len(), dept_quotas);
        prop_assert_eq!(
            total(lines).unwrap().value(),
            tenant_totals.checked_add(total(&department_lines).unwrap().value()).unwrap()
        );
    }

    /// Adding an allocation for tenant X changes no other tenant's lines (overhead by equal shares or none). The
    /// one exception is a department quota X shares with others: their borrowed time can only grow.
    #[test]
    fn no_tenant_pays_for_another_tenants_allocation(mut case in case()) {
        if let Some((_, key @ Key::Allocated)) = &mut case.overhead {
            *key = Key::Equal;
        }
        let before = run(&build(&case)).lines;
        let mut input = build(&case);
        input.allocations.push(alloc_record(99, &case.extra));
        let after = run(&input).lines;
        let x = case.extra.tenant;
        let class = case.extra.class;
        let shared = match pool_of(&case, x, class) {
            pool @ Holder::Department(_) => Some(pool),
            Holder::Tenant(_) => None,
        };
        for y in (0..case.tenants()).filter(|y| *y != x) {
            let (b, a) = (of_tenant(&before, y), of_tenant(&after, y));
            if shared.is_some() && shared == Some(pool_of(&case, y, class)) {
                let strip = |lines: &[LedgerLine]| -> Vec<LedgerLine> {
                    lines.iter().filter(|l| !(l.term == Term::Borrowed && l.gpu_class == CLASSES[class].0)).cloned().collect()
                };
                prop_assert_eq!(strip(&b), strip(&a), "tenant {}'s other lines", y);
                let q = |lines: &[LedgerLine]| find(lines, Term::Borrowed, y, class).map_or(Fraction::ZERO, |l| l.quantity.value());
                prop_assert!(q(&a) >= q(&b), "sharing a department quota, borrowed can only grow");
            } else {
                prop_assert_eq!(b, a, "tenant {} is unaffected by tenant {}'s allocation", y, x);
            }
        }
        let dept = |lines: &[LedgerLine]| -> Vec<LedgerLine> { lines.iter().filter(|l| l.tenant_id.is_none()).cloned().collect() };
        prop_assert_eq!(dept(&before), dept(&after), "department-level lines are unaffected");
    }

    /// The overhead lines add up to the pool exactly (to the cent), under each key, each within a cent of its
    /// exact share; tenants with no weight get no line.
    #[test]
    fn the_overhead_distributed_equals_the_pool(case in case(), cents in 1i64..=10_000_000) {
        let m = model(&case);
        for key in [Key::Equal, Key::Allocated, Key::Fixed(case.shares.clone())] {
            let mut c = case.clone();
            c.overhead = Some((cents, key.clone()));
            let lines = run(&build(&c)).lines;
            let weights: Vec<Fraction> = match &key {
                Key::Equal => vec![Fraction::ONE; case.tenants()],
                Key::Fixed(s) => s.iter().map(|s| int(i64::from(*s))).collect(),
                Key::Allocated => {
                    let w: Vec<Fraction> = (0..case.tenants())
                        .map(|t| sum((0..case.classes).map(|c| m.allocated.get(&(t, c)).copied().unwrap_or(Fraction::ZERO))))
                        .collect();
                    if w.iter().all(Fraction::is_zero) { vec![Fraction::ONE; case.tenants()] } else { w }
                }
            };
            check_overhead(&lines, cents, &weights)?;
            for l in lines.iter().filter(|l| l.term == Term::Overhead) {
                prop_assert_eq!(l.rate.value(), Fraction::new(i128::from(cents), 100).unwrap(), "the rate is the pool");
                prop_assert_eq!(l.confidence, Confidence::Modeled);
            }
        }
    }

    /// A class priced at actual cost splits its bill to the cent: its guaranteed and borrowed lines add up to the
    /// bill (rounded to cents) when anyone held the class, each within a cent of its hours' exact share; a bill no
    /// hours could carry goes to the overhead pool; so the whole month (no other overhead) is the sum of the bills.
    #[test]
    fn actual_cost_splits_each_bill_to_the_cent(mut case in case(), bills in prop::array::uniform2(0i64..=100_000_000_000)) {
        case.overhead = None;
        let mut input = build(&case);
        for c in &mut input.policy.classes {
            c.actual_cost = true;
        }
        // Bills with 6 decimals (a FOCUS EffectiveCost has more than cents).
        input.actual_costs = (0..CLASSES.len())
            .map(|c| ActualCost { gpu_class: CLASSES[c].0.into(), cost: Decimal::from_scaled(i128::from(bills[c]), 6).unwrap(), nodes: 2 })
            .collect();
        let ledger = run(&input);
        prop_assert!(ledger.notes.actual_cost_missing.is_empty());
        let mut expected = Fraction::ZERO;
        for c in 0..CLASSES.len() {
            let bill = round(Fraction::new(i128::from(bills[c]), 1_000_000).unwrap(), 2).value();
            expected = expected.checked_add(bill).unwrap();
            let class_lines: Vec<&LedgerLine> = ledger
                .lines
                .iter()
                .filter(|l| matches!(l.term, Term::Guaranteed | Term::Borrowed) && l.gpu_class == CLASSES[c].0)
                .collect();
            let hours = sum(class_lines.iter().map(|l| l.quantity.value()));
            if hours.is_zero() {
                continue;
            }
            prop_assert_eq!(sum(class_lines.iter().map(|l| l.amount.value())), bill, "class {} lines = its bill", c);
            for l in class_lines {
                let exact = bill.checked_mul(l.quantity.value()).unwrap().checked_div(hours).unwrap();
                prop_assert!(near(l.amount.value(), exact, (1, 100)), "{} is not within a cent of {:?}", l.amount, exact);
                prop_assert!(l.explanation.contains("cloud bill"), "{}", l.explanation);
            }
        }
        prop_assert_eq!(total(&ledger.lines).unwrap().value(), expected, "the month is the bills");
        // Without a bill the class keeps the policy's rates, and says so.
        let mut no_bill = input.clone();
        no_bill.actual_costs.clear();
        let fallback = run(&no_bill);
        prop_assert_eq!(fallback.notes.actual_cost_missing.len(), CLASSES.len());
        let mut plain = no_bill.clone();
        for c in &mut plain.policy.classes {
            c.actual_cost = false;
        }
        prop_assert_eq!(&run(&plain).lines, &fallback.lines);
    }

    /// The same facts in any order give the same lines, notes and canonical rows.
    #[test]
    fn output_is_independent_of_input_order(case in case()) {
        let input = build(&case);
        let once = run(&input);
        let mut shuffled = input.clone();
        let mut seed = case.seed | 1;
        shuffle(&mut shuffled.allocations, &mut seed);
        shuffle(&mut shuffled.quotas, &mut seed);
        shuffle(&mut shuffled.tenants, &mut seed);
        shuffle(&mut shuffled.departments, &mut seed);
        if let OverheadKey::FixedShares { shares } = &mut shuffled.policy.overhead.key {
            shuffle(shares, &mut seed);
        }
        let again = run(&shuffled);
        prop_assert_eq!(&once, &again);
        let rows = |l: &Ledger| l.lines.iter().map(LedgerLine::csv_row).collect::<Vec<_>>();
        prop_assert_eq!(rows(&once), rows(&again));
        // line IDs are unique and the lines come sorted
        let mut ids: Vec<&str> = once.lines.iter().map(|l| l.line_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), once.lines.len());
        prop_assert_eq!(once.notes.open_allocations, case.allocs.iter().filter(|a| a.end.is_none()).count());
    }
}
