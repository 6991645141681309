//! Golden scenarios of the ledger engine (DESIGN.md, "The charge"): every expected number below was computed by
//! hand and is written out as a literal, with the arithmetic beside it. A change to the engine that moves a cent,
//! a line ID or an explanation shows up here.
//!
//! World: period 2026-09 (30 days = 720 h). Departments Research (tenants alpha, beta) and Product (tenant gamma;
//! tenant platform where a scenario needs it). Policy v3, USD:
//!   H100-80GB guaranteed 2.10 borrowed 3.00; A100-40GB 1.20 / 1.80; T4-16GB 0.30 / 0.50.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpuledger_core::{
    Confidence, Fraction, Period,
    bundle::{BUNDLE_FORMAT, BUNDLE_FORMAT_V1, Bundle, close_hash, verify},
    decimal::Decimal,
    ids::{DepartmentId, TenantId},
    ledger::{
        AdjustmentKind, AdjustmentRecord, AllocationRecord, ClassCapacity, DepartmentRef, EndpointTotal, EnergyRecord,
        LedgerInput, LedgerLine, QuotaHolder, QuotaRecord, TenantRef, Term, UsageRecord, compute, group_energy,
        late_adjustments, total,
    },
    policy::{CostPolicy, EnergyPrice, FixedCost, FixedShare, OverheadKey, ServicePricing, TokenWeight},
};
use time::{Duration, OffsetDateTime, macros::datetime};
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------------------------
// The world

const H100: &str = "H100-80GB";
const A100: &str = "A100-40GB";
const T4: &str = "T4-16GB";

// IDs are deliberately in a different order than the names, so ordering by name is really tested.
fn research() -> DepartmentId {
    DepartmentId::from_uuid(Uuid::from_u128(0xD2))
}
fn product() -> DepartmentId {
    DepartmentId::from_uuid(Uuid::from_u128(0xD1))
}
fn alpha() -> TenantId {
    TenantId::from_uuid(Uuid::from_u128(0x30))
}
fn beta() -> TenantId {
    TenantId::from_uuid(Uuid::from_u128(0x20))
}
fn gamma() -> TenantId {
    TenantId::from_uuid(Uuid::from_u128(0x10))
}
fn platform() -> TenantId {
    TenantId::from_uuid(Uuid::from_u128(0x40))
}

fn sep() -> Period {
    Period::parse("2026-09").unwrap()
}
fn aug() -> Period {
    Period::parse("2026-08").unwrap()
}

/// Hour `h` of September 2026.
fn at(h: i64) -> OffsetDateTime {
    datetime!(2026-09-01 00:00 UTC) + Duration::hours(h)
}
/// Hour `h` of August 2026.
fn at_aug(h: i64) -> OffsetDateTime {
    datetime!(2026-08-01 00:00 UTC) + Duration::hours(h)
}

fn dec(s: &str) -> Decimal {
    Decimal::parse(s).unwrap()
}
fn frac(s: &str) -> Fraction {
    s.parse().unwrap()
}

fn policy() -> CostPolicy {
    let rates = |class: &str, g: &str, b: &str| gpuledger_core::policy::ClassRates {
        gpu_class: class.into(),
        guaranteed: dec(g),
        borrowed: dec(b),
        actual_cost: false,
    };
    CostPolicy {
        version: 3,
        currency: "USD".into(),
        classes: vec![rates(H100, "2.10", "3.00"), rates(A100, "1.20", "1.80"), rates(T4, "0.30", "0.50")],
        energy: None,
        services: Vec::new(),
        token_weights: Vec::new(),
        overhead: Default::default(),
        idle: Default::default(),
        faults: Default::default(),
    }
}

fn tenant_ref(id: TenantId) -> TenantRef {
    let (name, department) = if id == alpha() {
        ("alpha", research())
    } else if id == beta() {
        ("beta", research())
    } else if id == gamma() {
        ("gamma", product())
    } else {
        ("platform", product())
    };
    TenantRef { id, name: name.into(), department }
}

/// An input for `period` with both departments and the given tenants (in that order).
fn input_for(period: Period, tenants: &[TenantId]) -> LedgerInput {
    LedgerInput {
        period,
        policy: policy(),
        inventory_version: "inv-sha256-0001".into(),
        departments: vec![
            DepartmentRef { id: research(), name: "Research".into() },
            DepartmentRef { id: product(), name: "Product".into() },
        ],
        tenants: tenants.iter().map(|t| tenant_ref(*t)).collect(),
        capacity: Vec::new(),
        quotas: Vec::new(),
        allocations: Vec::new(),
        energy: Vec::new(),
        service_usage: Vec::new(),
        endpoint_totals: Vec::new(),
        adjustments: Vec::new(),
        actual_costs: Vec::new(),
        bounds: None,
    }
}

fn input() -> LedgerInput {
    input_for(sep(), &[alpha(), beta(), gamma()])
}

/// An exact, exclusive-style allocation in September from hour `from` to hour `to`.
fn alloc(id: &str, tenant: TenantId, class: &str, fraction: &str, from: i64, to: i64) -> AllocationRecord {
    AllocationRecord {
        id: id.into(),
        tenant: Some(tenant),
        gpu_class: Some(class.into()),
        fraction: frac(fraction),
        start: at(from),
        end: Some(at(to)),
        confidence: Confidence::Exact,
        devices: Vec::new(),
        endpoint: None,
        share_basis: None,
    }
}

/// A quota valid the whole of September (open-ended, clipped to the period).
fn month_quota(id: &str, holder: QuotaHolder, class: &str, gpus: &str) -> QuotaRecord {
    QuotaRecord { id: id.into(), holder, gpu_class: class.into(), gpus: dec(gpus), valid_from: at(0), valid_to: None }
}

fn lines_of(input: &LedgerInput) -> Vec<LedgerLine> {
    compute(input).unwrap().lines
}

fn ids(lines: &[LedgerLine]) -> Vec<&str> {
    lines.iter().map(|l| l.line_id.as_str()).collect()
}

fn line<'a>(lines: &'a [LedgerLine], id: &str) -> &'a LedgerLine {
    lines.iter().find(|l| l.line_id == id).unwrap_or_else(|| panic!("no line {id}; lines: {:?}", ids(lines)))
}

fn tenant_lines<'a>(lines: &'a [LedgerLine], name: &str) -> Vec<&'a LedgerLine> {
    lines.iter().filter(|l| l.tenant == name).collect()
}

fn tenant_total(lines: &[LedgerLine], name: &str) -> String {
    let own: Vec<LedgerLine> = tenant_lines(lines, name).into_iter().cloned().collect();
    total(&own).unwrap().to_string()
}

/// Asserts the money fields of a line as they are written (scale included).
#[track_caller]
fn assert_money(l: &LedgerLine, quantity: &str, unit: &str, rate: &str, amount: &str) {
    assert_eq!(
        (l.quantity.to_string().as_str(), l.unit.as_str(), l.rate.to_string().as_str(), l.amount.to_string().as_str()),
        (quantity, unit, rate, amount),
        "line {}",
        l.line_id
    );
    assert_eq!(l.currency, "USD", "line {}", l.line_id);
}

// ---------------------------------------------------------------------------------------------------------------
// 1. Quota partly used

#[test]
fn s01_quota_partly_used_pays_the_whole_guarantee_and_borrows_nothing() {
    let mut inp = input();
    inp.quotas.push(month_quota("q-alpha", QuotaHolder::Tenant(alpha()), H100, "4"));
    // 2 H100 held for 100 h: 200 GPU-h, all inside the 4-GPU quota.
    inp.allocations.push(alloc("c1/a1", alpha(), H100, "2", 0, 100));
    let lines = lines_of(&inp);

    assert_eq!(ids(&lines), ["2026-09/guaranteed/alpha/H100-80GB/q-alpha"], "no borrowed line");
    let g = &lines[0];
    // 4 GPUs × 720 h = 2,880 GPU-h; × 2.10 = 6,048.00
    assert_money(g, "2880.000000", "GPU-hour", "2.10", "6048.00");
    assert_eq!(g.explanation, "4 H100-80GB guaranteed × 720 h × 2.10 USD = 6,048.00 USD");
    assert_eq!(g.period, sep());
    assert_eq!(g.term, Term::Guaranteed);
    assert_eq!(g.gpu_class, H100);
    assert_eq!((g.department_id, g.department.as_str()), (research(), "Research"));
    assert_eq!((g.tenant_id, g.tenant.as_str()), (Some(alpha()), "alpha"));
    assert_eq!(g.confidence, Confidence::Exact);
    assert_eq!(g.policy_version, 3);
    assert_eq!(g.evidence, "quota:q-alpha");
    assert_eq!(g.corrects, None);
    assert_eq!(tenant_total(&lines, "alpha"), "6048.00");
}

// ---------------------------------------------------------------------------------------------------------------
// 2. Borrowing above quota

#[test]
fn s02_allocation_above_quota_is_borrowed() {
    let mut inp = input();
    inp.quotas.push(month_quota("q-alpha", QuotaHolder::Tenant(alpha()), H100, "1"));
    inp.allocations.push(alloc("c1/a1", alpha(), H100, "3", 0, 10));
    let lines = lines_of(&inp);

    assert_eq!(
        ids(&lines),
        ["2026-09/guaranteed/alpha/H100-80GB/q-alpha", "2026-09/borrowed/alpha/H100-80GB"],
        "guaranteed before borrowed"
    );
    // 1 GPU × 720 h × 2.10 = 1,512.00
    let g = line(&lines, "2026-09/guaranteed/alpha/H100-80GB/q-alpha");
    assert_money(g, "720.000000", "GPU-hour", "2.10", "1512.00");
    assert_eq!(g.explanation, "1 H100-80GB guaranteed × 720 h × 2.10 USD = 1,512.00 USD");
    // (3 held − 1 quota) × 10 h = 20 GPU-h; × 3.00 = 60.00
    let b = line(&lines, "2026-09/borrowed/alpha/H100-80GB");
    assert_money(b, "20.000000", "GPU-hour", "3.00", "60.00");
    assert_eq!(b.term, Term::Borrowed);
    assert_eq!(b.confidence, Confidence::Exact);
    assert_eq!(
        b.explanation,
        "20.000000 H100-80GB GPU-hours above quota (of 30.000000 allocated in 1 allocations) × 3.00 USD = 60.00 USD"
    );
    assert!(b.evidence.starts_with("/api/v1/periods/2026-09/evidence?"), "{}", b.evidence);
    // 1,512.00 + 60.00
    assert_eq!(tenant_total(&lines, "alpha"), "1572.00");
}

#[test]
fn s02b_a_quota_valid_part_of_the_month_guarantees_only_that_part() {
    let mut inp = input();
    // 2 GPUs from hour 360 to hour 480: 2 × 120 h = 240 GPU-h × 2.10 = 504.00
    inp.quotas.push(QuotaRecord {
        valid_from: at(360),
        valid_to: Some(at(480)),
        ..month_quota("q", QuotaHolder::Tenant(alpha()), H100, "2")
    });
    // 3 GPUs from hour 300 to 500: [300,360) no quota → 3 × 60 = 180; [360,480) 1 above → 120;
    // [480,500) quota over → 3 × 20 = 60; total 360 GPU-h
    inp.allocations.push(alloc("c1/a1", alpha(), H100, "3", 300, 500));
    let lines = lines_of(&inp);
    let g = line(&lines, "2026-09/guaranteed/alpha/H100-80GB/q");
    assert_money(g, "240.000000", "GPU-hour", "2.10", "504.00");
    assert_eq!(g.explanation, "2 H100-80GB guaranteed × 120 h × 2.10 USD = 504.00 USD");
    // 360 × 3.00 = 1,080.00
    assert_money(line(&lines, "2026-09/borrowed/alpha/H100-80GB"), "360.000000", "GPU-hour", "3.00", "1080.00");
}

// ---------------------------------------------------------------------------------------------------------------
// 3b. Soft shares (HAMi, Volcano, Run:ai, gpushare) are priced by their share; the line names the basis

#[test]
fn s03b_soft_shares_name_their_basis_in_the_line() {
    use gpuledger_core::sharing::ShareBasis;
    let mut inp = input();
    // Two HAMi pods on T4s for gamma: the larger of 30 % compute / 50 % memory = 1/2 × 40 h, and 1/4 × 40 h → 30 GPU-h
    let soft = |id: &str, f: &str| AllocationRecord {
        confidence: Confidence::Modeled,
        share_basis: Some(ShareBasis::Larger),
        ..alloc(id, gamma(), T4, f, 0, 40)
    };
    inp.allocations.push(soft("c1/hami-a", "1/2"));
    inp.allocations.push(soft("c1/hami-b", "1/4"));
    let lines = lines_of(&inp);
    let ts = line(&lines, "2026-09/borrowed/gamma/T4-16GB");
    assert_money(ts, "30.000000", "GPU-hour", "0.50", "15.00");
    assert_eq!(ts.confidence, Confidence::Modeled);
    assert_eq!(
        ts.explanation,
        "30.000000 T4-16GB GPU-hours above quota (of 30.000000 allocated in 2 allocations) × 0.50 USD = 15.00 USD; \
         soft shares priced by the larger of the compute and memory shares"
    );
}

// ---------------------------------------------------------------------------------------------------------------
// 3. Each sharing mode priced by its fraction

#[test]
fn s03_each_sharing_mode_is_priced_by_its_fraction() {
    let mut inp = input();
    // MIG on an A100 (beta, no quota): 3/7 × 70 h = 30 GPU-h, 2/7 × 7 h = 2 GPU-h → 32 GPU-h
    inp.allocations.push(alloc("c1/mig-3g", beta(), A100, "3/7", 0, 70));
    inp.allocations.push(alloc("c1/mig-2g", beta(), A100, "2/7", 100, 107));
    // Time-slicing: 1/4 of a T4 for 40 h (gamma) → 10 GPU-h, a modeled fraction
    inp.allocations
        .push(AllocationRecord { confidence: Confidence::Modeled, ..alloc("c1/ts", gamma(), T4, "1/4", 0, 40) });
    // vGPU half an H100 for the whole month (gamma) → 1/2 × 720 = 360 GPU-h
    inp.allocations.push(alloc("c1/vgpu", gamma(), H100, "1/2", 0, 720));
    // Passthrough: a whole H100 for 24 h (alpha) → 24 GPU-h
    inp.allocations.push(alloc("c1/pt", alpha(), H100, "1", 0, 24));
    let lines = lines_of(&inp);

    assert_eq!(
        ids(&lines),
        [
            // Product (gamma) sorts before Research; within a tenant by term, then class
            "2026-09/borrowed/gamma/H100-80GB",
            "2026-09/borrowed/gamma/T4-16GB",
            "2026-09/borrowed/alpha/H100-80GB",
            "2026-09/borrowed/beta/A100-40GB",
        ]
    );
    // 32 GPU-h × 1.80 = 57.60
    let mig = line(&lines, "2026-09/borrowed/beta/A100-40GB");
    assert_money(mig, "32.000000", "GPU-hour", "1.80", "57.60");
    assert_eq!(mig.confidence, Confidence::Exact);
    assert_eq!(
        mig.explanation,
        "32.000000 A100-40GB GPU-hours above quota (of 32.000000 allocated in 2 allocations) × 1.80 USD = 57.60 USD"
    );
    // 10 GPU-h × 0.50 = 5.00, modeled because the time-slice fraction is
    let ts = line(&lines, "2026-09/borrowed/gamma/T4-16GB");
    assert_money(ts, "10.000000", "GPU-hour", "0.50", "5.00");
    assert_eq!(ts.confidence, Confidence::Modeled);
    // 360 GPU-h × 3.00 = 1,080.00
    assert_money(line(&lines, "2026-09/borrowed/gamma/H100-80GB"), "360.000000", "GPU-hour", "3.00", "1080.00");
    // 24 GPU-h × 3.00 = 72.00
    assert_money(line(&lines, "2026-09/borrowed/alpha/H100-80GB"), "24.000000", "GPU-hour", "3.00", "72.00");
    // gamma: 1,080.00 + 5.00
    assert_eq!(tenant_total(&lines, "gamma"), "1085.00");
}

#[test]
fn s03b_a_third_of_an_hour_is_rounded_once_per_line() {
    let mut inp = input();
    // 3/7 of an A100 for 1 h and for 2 h: 3/7 + 6/7 = 9/7 GPU-h = 1.285714… GPU-h
    inp.allocations.push(alloc("c1/m1", beta(), A100, "3/7", 0, 1));
    inp.allocations.push(alloc("c1/m2", beta(), A100, "3/7", 10, 12));
    let lines = lines_of(&inp);
    // one line per tenant and class, rounded once: quantity 9/7 → 1.285714; 9/7 × 1.80 = 2.314285… → 2.31
    assert_money(line(&lines, "2026-09/borrowed/beta/A100-40GB"), "1.285714", "GPU-hour", "1.80", "2.31");
}

// ---------------------------------------------------------------------------------------------------------------
// 4. Ownership change mid-month

#[test]
fn s04_an_ownership_change_splits_the_charge_at_the_change() {
    let mut inp = input();
    // One allocation, namespace moved from alpha to beta at hour 100; the store splits it in two records.
    inp.allocations.push(alloc("c1/a7#1", alpha(), H100, "1", 0, 100));
    inp.allocations.push(alloc("c1/a7#2", beta(), H100, "1", 100, 200));
    let lines = lines_of(&inp);
    assert_eq!(ids(&lines), ["2026-09/borrowed/alpha/H100-80GB", "2026-09/borrowed/beta/H100-80GB"]);
    // 1 × 100 h × 3.00 = 300.00 each; nobody pays for the other's part
    for name in ["alpha", "beta"] {
        let l = line(&lines, &format!("2026-09/borrowed/{name}/H100-80GB"));
        assert_money(l, "100.000000", "GPU-hour", "3.00", "300.00");
        assert!(l.explanation.contains("of 100.000000 allocated in 1 allocations"), "{}", l.explanation);
        assert_eq!(tenant_total(&lines, name), "300.00");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 5. Department quota

#[test]
fn s05_a_department_quota_is_shared_by_its_tenants() {
    let mut inp = input();
    inp.quotas.push(month_quota("q-research", QuotaHolder::Department(research()), H100, "2"));
    inp.allocations.push(alloc("c1/a", alpha(), H100, "2", 10, 20));
    inp.allocations.push(alloc("c1/b", beta(), H100, "2", 10, 20));
    let lines = lines_of(&inp);
    assert_eq!(
        ids(&lines),
        [
            // department-level line (tenant "") sorts first within Research
            "2026-09/guaranteed/department:Research/H100-80GB/q-research",
            "2026-09/borrowed/alpha/H100-80GB",
            "2026-09/borrowed/beta/H100-80GB",
        ]
    );
    // 2 GPUs × 720 h × 2.10 = 3,024.00, charged to the department, not to a tenant
    let d = line(&lines, "2026-09/guaranteed/department:Research/H100-80GB/q-research");
    assert_money(d, "1440.000000", "GPU-hour", "2.10", "3024.00");
    assert_eq!((d.tenant_id, d.tenant.as_str()), (None, ""));
    assert_eq!((d.department_id, d.department.as_str()), (research(), "Research"));
    assert_eq!(d.explanation, "2 H100-80GB guaranteed × 720 h × 2.10 USD = 3,024.00 USD");
    // (2 + 2 held − 2 quota) × 10 h = 20 GPU-h above quota, split by what each holds (2 : 2) → 10 GPU-h each
    // 10 × 3.00 = 30.00
    for name in ["alpha", "beta"] {
        let l = line(&lines, &format!("2026-09/borrowed/{name}/H100-80GB"));
        assert_money(l, "10.000000", "GPU-hour", "3.00", "30.00");
        assert_eq!(tenant_total(&lines, name), "30.00");
    }
    // Everything: 3,024.00 + 30.00 + 30.00
    assert_eq!(total(&lines).unwrap().to_string(), "3084.00");
}

#[test]
fn s05b_a_tenant_with_its_own_quota_does_not_draw_on_the_department_quota() {
    let mut inp = input();
    inp.quotas.push(month_quota("q-research", QuotaHolder::Department(research()), H100, "2"));
    inp.quotas.push(month_quota("q-alpha", QuotaHolder::Tenant(alpha()), H100, "1"));
    // alpha holds 2 against its own 1 → 1 × 10 h = 10 GPU-h borrowed; beta holds 2 within the department's 2 → 0
    inp.allocations.push(alloc("c1/a", alpha(), H100, "2", 10, 20));
    inp.allocations.push(alloc("c1/b", beta(), H100, "2", 10, 20));
    let lines = lines_of(&inp);
    assert_money(line(&lines, "2026-09/borrowed/alpha/H100-80GB"), "10.000000", "GPU-hour", "3.00", "30.00");
    assert!(lines.iter().all(|l| l.line_id != "2026-09/borrowed/beta/H100-80GB"), "{:?}", ids(&lines));
    // 1 × 720 × 2.10 = 1,512.00
    assert_money(
        line(&lines, "2026-09/guaranteed/alpha/H100-80GB/q-alpha"),
        "720.000000",
        "GPU-hour",
        "2.10",
        "1512.00",
    );
}

// ---------------------------------------------------------------------------------------------------------------
// 6. Overhead under each key

fn overhead_input(key: OverheadKey) -> LedgerInput {
    // Tenants listed out of name order on purpose.
    let mut inp = input_for(sep(), &[gamma(), beta(), alpha()]);
    inp.policy.overhead.fixed = vec![FixedCost { name: "platform team".into(), amount: dec("1000.00") }];
    inp.policy.overhead.key = key;
    inp
}

fn overhead_lines(lines: &[LedgerLine]) -> Vec<(&str, String)> {
    lines.iter().filter(|l| l.term == Term::Overhead).map(|l| (l.tenant.as_str(), l.amount.to_string())).collect()
}

#[test]
fn s06a_equal_overhead_gives_the_odd_cent_to_the_first_tenant_by_name() {
    let lines = lines_of(&overhead_input(OverheadKey::Equal));
    // 1,000.00 / 3 = 333.333…: 333.33 each leaves 0.01, remainders tie → the earliest name (alpha)
    assert_eq!(
        overhead_lines(&lines),
        [("gamma", "333.33".into()), ("alpha", "333.34".into()), ("beta", "333.33".into())]
    );
    let a = line(&lines, "2026-09/overhead/alpha");
    assert_money(a, "0.333333", "share", "1000.00", "333.34");
    assert_eq!(a.confidence, Confidence::Modeled);
    assert_eq!((a.tenant_id, a.department_id), (Some(alpha()), research()));
    assert_eq!(a.evidence, "policy:v3/overhead");
    assert_eq!(
        a.explanation,
        "33.3333% of the shared overhead pool 1,000.00 USD (platform team 1,000.00) by equal shares = 333.34 USD"
    );
    assert_eq!(total(&lines).unwrap().to_string(), "1000.00");
}

#[test]
fn s06b_overhead_by_allocated_gpu_hours() {
    let mut inp = overhead_input(OverheadKey::AllocatedGpuHours);
    inp.allocations.push(alloc("c1/a", alpha(), H100, "3", 0, 10)); // 30 GPU-h
    inp.allocations.push(alloc("c1/b", beta(), H100, "1", 0, 10)); // 10 GPU-h
    let lines = lines_of(&inp);
    // 1,000.00 × 30/40 = 750.00, × 10/40 = 250.00; gamma held nothing → no line at all
    assert_eq!(overhead_lines(&lines), [("alpha", "750.00".into()), ("beta", "250.00".into())]);
    assert_money(line(&lines, "2026-09/overhead/alpha"), "0.750000", "share", "1000.00", "750.00");
    assert!(line(&lines, "2026-09/overhead/beta").explanation.contains("by allocated GPU-hours = 250.00 USD"));
    // alpha: borrowed 30 × 3.00 = 90.00 + 750.00
    assert_eq!(tenant_total(&lines, "alpha"), "840.00");
}

#[test]
fn s06c_overhead_by_fixed_shares() {
    let shares = vec![FixedShare { tenant: alpha(), share: dec("1") }, FixedShare { tenant: beta(), share: dec("3") }];
    let lines = lines_of(&overhead_input(OverheadKey::FixedShares { shares }));
    // 1,000.00 × 1/4 = 250.00, × 3/4 = 750.00; gamma has no share → no line
    assert_eq!(overhead_lines(&lines), [("alpha", "250.00".into()), ("beta", "750.00".into())]);
    assert_money(line(&lines, "2026-09/overhead/beta"), "0.750000", "share", "1000.00", "750.00");
}

#[test]
fn s06d_unallocated_capacity_goes_into_the_pool() {
    let mut inp = input_for(sep(), &[alpha(), beta()]);
    inp.policy.overhead.unallocated_capacity = true;
    inp.policy.overhead.key = OverheadKey::Equal;
    inp.capacity.push(ClassCapacity { gpu_class: H100.into(), gpus: 2 });
    inp.quotas.push(month_quota("q-alpha", QuotaHolder::Tenant(alpha()), H100, "1"));
    inp.allocations.push(alloc("c1/b", beta(), H100, "1", 0, 360));
    let lines = lines_of(&inp);
    // capacity 2 × 720 = 1,440 GPU-h; reserved by alpha's quota 720, held by beta 360 → idle 360 GPU-h
    // pool 360 × 2.10 = 756.00; equal shares → 378.00 each
    assert_eq!(overhead_lines(&lines), [("alpha", "378.00".into()), ("beta", "378.00".into())]);
    let a = line(&lines, "2026-09/overhead/alpha");
    assert_money(a, "0.500000", "share", "756.00", "378.00");
    assert_eq!(
        a.explanation,
        "50.0000% of the shared overhead pool 756.00 USD (unallocated 360.000000 H100-80GB GPU-h × 2.10) by equal \
         shares = 378.00 USD"
    );
    // alpha: 1 × 720 × 2.10 = 1,512.00 + 378.00; beta: 360 × 3.00 = 1,080.00 + 378.00
    assert_eq!(tenant_total(&lines, "alpha"), "1890.00");
    assert_eq!(tenant_total(&lines, "beta"), "1458.00");

    // The same 2 GPUs listed as 1 + 1 (two clusters) are the same capacity.
    inp.capacity =
        vec![ClassCapacity { gpu_class: H100.into(), gpus: 1 }, ClassCapacity { gpu_class: H100.into(), gpus: 1 }];
    assert_eq!(lines_of(&inp), lines);
}

// ---------------------------------------------------------------------------------------------------------------
// 7. Shared endpoint

fn endpoint_input(per_million: Option<&str>) -> LedgerInput {
    let mut inp = input_for(sep(), &[alpha(), beta(), gamma(), platform()]);
    inp.policy.services =
        vec![ServicePricing { endpoint: "llm-shared".into(), per_million_weighted_tokens: per_million.map(dec) }];
    inp.policy.token_weights = vec![TokenWeight { model: "*".into(), input: dec("1"), output: dec("4") }];
    inp.allocations.push(AllocationRecord {
        endpoint: Some("llm-shared".into()),
        ..alloc("c1/vllm", platform(), H100, "1", 0, 720)
    });
    let usage = |tenant, i, o| UsageRecord {
        endpoint: "llm-shared".into(),
        model: "llama-3-70b".into(),
        tenant,
        requests: 1_000,
        input_tokens: i,
        output_tokens: o,
    };
    inp.service_usage.push(usage(alpha(), 1_000_000, 250_000));
    inp.service_usage.push(usage(gamma(), 2_000_000, 500_000));
    inp
}

#[test]
fn s07a_a_shared_endpoint_is_split_by_weighted_tokens() {
    let lines = lines_of(&endpoint_input(None));
    // The platform tenant holds the endpoint's GPU but pays nothing for it: the users do.
    assert_eq!(ids(&lines), ["2026-09/service/gamma/llm-shared", "2026-09/service/alpha/llm-shared"]);
    // cost: 1 H100 × 720 h × 2.10 (guaranteed rate) = 1,512.00
    // weighted: alpha 1,000,000 + 4 × 250,000 = 2,000,000; gamma 2,000,000 + 4 × 500,000 = 4,000,000; total 6 M
    // alpha 1,512.00 × 2/6 = 504.00; gamma 1,512.00 × 4/6 = 1,008.00; rate 1,512.00 / 6 M = 252 per M
    let a = line(&lines, "2026-09/service/alpha/llm-shared");
    assert_money(a, "2.000000", "million weighted tokens", "252.000000", "504.00");
    assert_eq!(a.term, Term::Service);
    assert_eq!(a.gpu_class, "");
    assert_eq!(a.confidence, Confidence::Modeled);
    assert_eq!(
        a.explanation,
        "2.000000 of 6.000000 million weighted tokens on llm-shared (share 33.33%) of its cost 1,512.00 USD \
         (720.000000 H100-80GB GPU-h × 2.10) = 504.00 USD"
    );
    let c = line(&lines, "2026-09/service/gamma/llm-shared");
    assert_money(c, "4.000000", "million weighted tokens", "252.000000", "1008.00");
    assert_eq!(c.confidence, Confidence::Modeled);
    assert!(tenant_lines(&lines, "platform").is_empty(), "platform pays no borrowed line for the endpoint");
    assert_eq!(total(&lines).unwrap().to_string(), "1512.00");
}

#[test]
fn s07b_a_shared_endpoint_at_a_price_per_million_weighted_tokens() {
    let lines = lines_of(&endpoint_input(Some("0.50")));
    // alpha 2 M × 0.50 = 1.00; gamma 4 M × 0.50 = 2.00
    let a = line(&lines, "2026-09/service/alpha/llm-shared");
    assert_money(a, "2.000000", "million weighted tokens", "0.50", "1.00");
    assert_eq!(a.explanation, "2.000000 million weighted tokens on llm-shared × 0.50 USD = 1.00 USD");
    assert_money(
        line(&lines, "2026-09/service/gamma/llm-shared"),
        "4.000000",
        "million weighted tokens",
        "0.50",
        "2.00",
    );
    assert!(tenant_lines(&lines, "platform").is_empty());
}

#[test]
fn s07c_work_the_servers_counted_beyond_the_tenants_usage_goes_to_the_overhead_pool() {
    let mut inp = endpoint_input(None);
    // The model server counted 3,000 requests, 4 M input and 1 M output tokens; the tenants account for
    // 2,000 requests, 3 M input and 0.75 M output: 1,000 requests, 1 M input and 0.25 M output are nobody's.
    inp.endpoint_totals.push(EndpointTotal {
        endpoint: "llm-shared".into(),
        model: "llama-3-70b".into(),
        requests: 3_000,
        input_tokens: 4_000_000,
        output_tokens: 1_000_000,
    });
    let ledger = compute(&inp).unwrap();
    // weighted: alpha 2 M, gamma 4 M, remainder 1 M + 4 × 0.25 M = 2 M; total 8 M; cost 1,512.00
    // alpha 1,512.00 × 2/8 = 378.00; gamma × 4/8 = 756.00; remainder × 2/8 = 378.00 → overhead pool
    let a = line(&ledger.lines, "2026-09/service/alpha/llm-shared");
    assert_money(a, "2.000000", "million weighted tokens", "189.000000", "378.00");
    assert_eq!(
        a.explanation,
        "2.000000 of 8.000000 million weighted tokens on llm-shared (share 25.00%) of its cost 1,512.00 USD \
         (720.000000 H100-80GB GPU-h × 2.10) = 378.00 USD"
    );
    assert_money(
        line(&ledger.lines, "2026-09/service/gamma/llm-shared"),
        "4.000000",
        "million weighted tokens",
        "189.000000",
        "756.00",
    );
    let r = &ledger.notes.unattributed_service;
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].endpoint.as_str(), r[0].requests, r[0].input_tokens, r[0].output_tokens),
        ("llm-shared", 1_000, 1_000_000, 250_000)
    );
    assert_eq!(
        (r[0].million_weighted_tokens.to_string(), r[0].amount.to_string()),
        ("2.000000".into(), "378.00".into())
    );
    assert!(r[0].over_attributed.is_empty());
    // The remainder is not lost: the overhead lines carry it, and everything still adds up to the endpoint's cost.
    let overhead: Vec<&LedgerLine> = ledger.lines.iter().filter(|l| l.term == Term::Overhead).collect();
    assert!(!overhead.is_empty());
    assert!(overhead.iter().all(|l| l.explanation.contains("unattributed work on llm-shared 378.00")), "{overhead:?}");
    assert_eq!(total(&ledger.lines).unwrap().to_string(), "1512.00");
}

#[test]
fn s07d_usage_beyond_what_the_servers_counted_is_flagged_and_nothing_is_moved() {
    let mut inp = endpoint_input(None);
    // The servers counted fewer output tokens and requests than the tenants' usage says.
    inp.endpoint_totals.push(EndpointTotal {
        endpoint: "llm-shared".into(),
        model: "llama-3-70b".into(),
        requests: 1_500,
        input_tokens: 3_000_000,
        output_tokens: 700_000,
    });
    let ledger = compute(&inp).unwrap();
    let r = &ledger.notes.unattributed_service[0];
    assert_eq!((r.requests, r.input_tokens, r.output_tokens), (0, 0, 0));
    assert_eq!(r.over_attributed, ["requests", "output_tokens"]);
    assert_eq!(r.amount.to_string(), "0.00");
    // The split is the one without totals.
    assert_money(
        line(&ledger.lines, "2026-09/service/alpha/llm-shared"),
        "2.000000",
        "million weighted tokens",
        "252.000000",
        "504.00",
    );
    assert!(ledger.lines.iter().all(|l| l.term != Term::Overhead));
    // An endpoint with a price per million: the remainder is reported, charged to nobody.
    let mut priced = endpoint_input(Some("0.50"));
    priced.endpoint_totals.push(EndpointTotal {
        endpoint: "llm-shared".into(),
        model: "llama-3-70b".into(),
        requests: 3_000,
        input_tokens: 4_000_000,
        output_tokens: 1_000_000,
    });
    let ledger = compute(&priced).unwrap();
    assert_money(
        line(&ledger.lines, "2026-09/service/alpha/llm-shared"),
        "2.000000",
        "million weighted tokens",
        "0.50",
        "1.00",
    );
    let r = &ledger.notes.unattributed_service[0];
    assert_eq!((r.million_weighted_tokens.to_string(), r.amount.to_string()), ("2.000000".into(), "0.00".into()));
    assert!(ledger.lines.iter().all(|l| l.term != Term::Overhead));
}

// ---------------------------------------------------------------------------------------------------------------
// 8. Energy

#[test]
fn s08_energy_is_the_devices_energy_times_the_allocations_share() {
    let mut inp = input();
    inp.policy.energy = Some(EnergyPrice { per_kwh: dec("0.20"), pue: Some(dec("1.5")) });
    inp.allocations.push(AllocationRecord { devices: vec!["GPU-1".into()], ..alloc("c1/a", alpha(), H100, "1", 0, 2) });
    inp.allocations.push(AllocationRecord {
        devices: vec!["GPU-2".into()],
        confidence: Confidence::Modeled,
        ..alloc("c1/ts", gamma(), T4, "1/4", 0, 1)
    });
    let window =
        |gpu: &str, from, to, joules| EnergyRecord { gpu_uuid: gpu.into(), start: at(from), end: at(to), joules };
    inp.energy = group_energy([
        window("GPU-1", 1, 2, 3_600_000),
        window("GPU-1", 0, 1, 1_800_000),
        window("GPU-1", 2, 3, 999_999), // after the allocation: nobody's
        window("GPU-2", 0, 1, 720_000),
    ]);
    let lines = lines_of(&inp);

    // alpha: (1,800,000 + 3,600,000) J × 1 = 5,400,000 J = 1.5 kWh; × 0.20 × PUE 1.5 = × 0.30 → 0.45
    let a = line(&lines, "2026-09/energy/alpha/H100-80GB");
    assert_money(a, "1.500000", "kWh", "0.300000", "0.45");
    assert_eq!(a.term, Term::Energy);
    assert_eq!(a.confidence, Confidence::Exact);
    assert_eq!(
        a.explanation,
        "1.500000 kWh on H100-80GB GPUs (device energy × the allocation's share) × PUE 1.5 × 0.20 USD = 0.45 USD"
    );
    // gamma: 720,000 J × 1/4 = 180,000 J = 0.05 kWh; × 0.30 = 0.015 → 0.02 (half away from zero)
    let c = line(&lines, "2026-09/energy/gamma/T4-16GB");
    assert_money(c, "0.050000", "kWh", "0.300000", "0.02");
    assert_eq!(c.confidence, Confidence::Modeled);
    // borrowed beside it: alpha 1 × 2 h × 3.00 = 6.00; gamma 1/4 × 1 h × 0.50 = 0.125 → 0.13
    assert_money(line(&lines, "2026-09/borrowed/alpha/H100-80GB"), "2.000000", "GPU-hour", "3.00", "6.00");
    assert_money(line(&lines, "2026-09/borrowed/gamma/T4-16GB"), "0.250000", "GPU-hour", "0.50", "0.13");
    // gamma: 0.13 + 0.02
    assert_eq!(tenant_total(&lines, "gamma"), "0.15");
    assert_eq!(tenant_total(&lines, "alpha"), "6.45");
}

// ---------------------------------------------------------------------------------------------------------------
// 9. Credit after an accepted dispute

#[test]
fn s09_a_credit_points_at_what_it_corrects() {
    let mut inp = input();
    inp.allocations.push(alloc("c1/a", alpha(), H100, "1", 0, 20)); // 20 × 3.00 = 60.00
    inp.adjustments.push(AdjustmentRecord {
        id: "dispute:42".into(),
        kind: AdjustmentKind::Credit,
        tenant: Some(alpha()),
        department: research(),
        gpu_class: H100.into(),
        amount: dec("-25.00"),
        corrects: "2026-08/borrowed/alpha/H100-80GB".into(),
        reason: "Credit after an accepted dispute".into(),
    });
    let lines = lines_of(&inp);
    assert_eq!(ids(&lines), ["2026-09/borrowed/alpha/H100-80GB", "2026-09/credit/alpha/dispute:42"]);
    let c = line(&lines, "2026-09/credit/alpha/dispute:42");
    assert_eq!(c.term, Term::Credit);
    assert_money(c, "1", "adjustment", "-25.00", "-25.00");
    assert_eq!(c.corrects.as_deref(), Some("2026-08/borrowed/alpha/H100-80GB"));
    assert_eq!(c.evidence, "2026-08/borrowed/alpha/H100-80GB");
    assert_eq!(
        c.explanation,
        "Credit after an accepted dispute: -25.00 USD correcting 2026-08/borrowed/alpha/H100-80GB"
    );
    // 60.00 − 25.00
    assert_eq!(tenant_total(&lines, "alpha"), "35.00");
}

#[test]
fn s09b_a_credit_for_another_departments_tenant_is_refused() {
    let mut inp = input();
    inp.adjustments.push(AdjustmentRecord {
        id: "dispute:43".into(),
        kind: AdjustmentKind::Credit,
        tenant: Some(alpha()),
        department: product(),
        gpu_class: String::new(),
        amount: dec("5.00"),
        corrects: "dispute:43".into(),
        reason: "r".into(),
    });
    let err = compute(&inp).unwrap_err().to_string();
    assert!(err.contains("adjustments[0].department"), "{err}");
}

// ---------------------------------------------------------------------------------------------------------------
// 10. Late fact after close

fn august() -> LedgerInput {
    let mut inp = input_for(aug(), &[alpha(), beta(), gamma()]);
    inp.allocations.push(AllocationRecord {
        start: at_aug(0),
        end: Some(at_aug(20)),
        ..alloc("c1/a", alpha(), H100, "1", 0, 1)
    });
    inp
}

fn late_allocation(id: &str, from: i64, to: i64) -> AllocationRecord {
    AllocationRecord { start: at_aug(from), end: Some(at_aug(to)), ..alloc(id, alpha(), H100, "1", 0, 1) }
}

#[test]
fn s10_a_late_fact_becomes_an_adjustment_in_the_next_open_period() {
    // August as closed: 1 × 20 h × 3.00 = 60.00
    let closed = lines_of(&august());
    assert_eq!(ids(&closed), ["2026-08/borrowed/alpha/H100-80GB"]);
    assert_eq!(closed[0].amount.to_string(), "60.00");

    // A 5-hour allocation arrives after the close: August recomputed is 25 × 3.00 = 75.00
    let mut late = august();
    late.allocations.push(late_allocation("c1/late", 100, 105));
    let recomputed = lines_of(&late);
    assert_eq!(line(&recomputed, "2026-08/borrowed/alpha/H100-80GB").amount.to_string(), "75.00");

    let adjustments = late_adjustments(&closed, &[], &recomputed).unwrap();
    assert_eq!(adjustments.len(), 1, "{adjustments:?}");
    let adj = &adjustments[0];
    // 75.00 − 60.00 = +15.00
    assert_eq!(adj.kind, AdjustmentKind::LateData);
    assert_eq!(adj.amount.to_string(), "15.00");
    assert_eq!(adj.corrects, "2026-08/borrowed/alpha/H100-80GB");
    assert_eq!((adj.tenant, adj.department, adj.gpu_class.as_str()), (Some(alpha()), research(), H100));
    assert_eq!(adj.reason, "Facts received after 2026-08 closed change borrowed alpha from 60.00 to 75.00");

    // It lands in September as an adjustment line pointing at the August line.
    let mut september = input();
    september.adjustments = adjustments.clone();
    let lines = lines_of(&september);
    assert_eq!(lines.len(), 1, "{:?}", ids(&lines));
    let l = &lines[0];
    assert_eq!(l.line_id, format!("2026-09/adjustment/alpha/{}", adj.id));
    assert_eq!(l.term, Term::Adjustment);
    assert_money(l, "1", "adjustment", "15.00", "15.00");
    assert_eq!(l.corrects.as_deref(), Some("2026-08/borrowed/alpha/H100-80GB"));
    assert_eq!(
        l.explanation,
        "Facts received after 2026-08 closed change borrowed alpha from 60.00 to 75.00: 15.00 USD correcting \
         2026-08/borrowed/alpha/H100-80GB"
    );

    // Once issued, the same late fact gives nothing more.
    assert_eq!(late_adjustments(&closed, &adjustments, &recomputed).unwrap(), []);
    // Nor does a recomputation that matches what was closed.
    assert_eq!(late_adjustments(&closed, &[], &closed).unwrap(), []);
}

#[test]
fn s10b_two_late_facts_for_one_line_both_land_in_the_next_period() {
    let closed = lines_of(&august());
    let mut late = august();
    late.allocations.push(late_allocation("c1/late1", 100, 105)); // +5 h × 3.00 = +15.00
    let first = late_adjustments(&closed, &[], &lines_of(&late)).unwrap();
    late.allocations.push(late_allocation("c1/late2", 200, 201)); // +1 h × 3.00 = +3.00
    let second = late_adjustments(&closed, &first, &lines_of(&late)).unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].amount.to_string(), "3.00");
    assert_eq!(first[0].id, "late:2026-08/borrowed/alpha/H100-80GB");
    assert_eq!(second[0].id, "late:2026-08/borrowed/alpha/H100-80GB#2", "its own ID");
    assert_eq!(second[0].reason, "Facts received after 2026-08 closed change borrowed alpha from 75.00 to 78.00");

    // Both arrive before September closes: two lines, 15.00 + 3.00.
    let mut september = input();
    september.adjustments = first.into_iter().chain(second).collect();
    let lines = compute(&september).expect("two adjustments of one closed line must not collide");
    assert_eq!(lines.lines.len(), 2, "{:?}", ids(&lines.lines));
    assert_eq!(tenant_total(&lines.lines, "alpha"), "18.00");
}

#[test]
fn s10c_a_late_fact_that_lowers_a_charge_gives_a_negative_adjustment() {
    // August was closed with 20 h; the allocation really ended after 15 h: 15 × 3.00 = 45.00 → −15.00
    let closed = lines_of(&august());
    let mut corrected = august();
    corrected.allocations[0].end = Some(at_aug(15));
    let adjustments = late_adjustments(&closed, &[], &lines_of(&corrected)).unwrap();
    assert_eq!(adjustments.len(), 1);
    assert_eq!(adjustments[0].amount.to_string(), "-15.00");
    // And a line that disappears entirely is corrected to zero: −60.00
    let mut gone = august();
    gone.allocations.clear();
    let adjustments = late_adjustments(&closed, &[], &lines_of(&gone)).unwrap();
    assert_eq!(adjustments.len(), 1);
    assert_eq!(adjustments[0].amount.to_string(), "-60.00");
}

// ---------------------------------------------------------------------------------------------------------------
// 11. Determinism, close hash, bundle

/// A month with a bit of everything.
fn busy_month() -> LedgerInput {
    let mut inp = input_for(sep(), &[alpha(), beta(), gamma(), platform()]);
    inp.policy.energy = Some(EnergyPrice { per_kwh: dec("0.20"), pue: Some(dec("1.5")) });
    inp.policy.services = vec![ServicePricing { endpoint: "llm-shared".into(), per_million_weighted_tokens: None }];
    inp.policy.token_weights = vec![TokenWeight { model: "*".into(), input: dec("1"), output: dec("4") }];
    inp.policy.overhead.fixed = vec![FixedCost { name: "platform team".into(), amount: dec("1000.00") }];
    inp.policy.overhead.unallocated_capacity = true;
    inp.policy.overhead.key = OverheadKey::AllocatedGpuHours;
    inp.capacity =
        vec![ClassCapacity { gpu_class: H100.into(), gpus: 8 }, ClassCapacity { gpu_class: A100.into(), gpus: 2 }];
    inp.quotas = vec![
        month_quota("q-alpha", QuotaHolder::Tenant(alpha()), H100, "1"),
        month_quota("q-research", QuotaHolder::Department(research()), A100, "1"),
    ];
    inp.allocations = vec![
        AllocationRecord { devices: vec!["GPU-1".into(), "GPU-2".into()], ..alloc("c1/a1", alpha(), H100, "2", 0, 50) },
        alloc("c1/a2", alpha(), A100, "3/7", 10, 80),
        alloc("c1/b1", beta(), A100, "1", 20, 60),
        AllocationRecord { confidence: Confidence::Modeled, ..alloc("c1/g1", gamma(), T4, "1/4", 0, 400) },
        AllocationRecord { endpoint: Some("llm-shared".into()), ..alloc("c1/p1", platform(), H100, "1", 0, 720) },
    ];
    inp.energy = group_energy([
        EnergyRecord { gpu_uuid: "GPU-1".into(), start: at(0), end: at(10), joules: 36_000_000 },
        EnergyRecord { gpu_uuid: "GPU-2".into(), start: at(0), end: at(10), joules: 18_000_000 },
    ]);
    inp.service_usage = vec![UsageRecord {
        endpoint: "llm-shared".into(),
        model: "m".into(),
        tenant: beta(),
        requests: 10,
        input_tokens: 3_000_000,
        output_tokens: 100_000,
    }];
    inp
}

fn shuffled(mut inp: LedgerInput) -> LedgerInput {
    inp.departments.reverse();
    inp.tenants.rotate_left(1);
    inp.tenants.reverse();
    inp.quotas.reverse();
    inp.allocations.rotate_left(2);
    inp.allocations.reverse();
    inp.capacity.reverse();
    inp
}

fn bundle_of(inp: &LedgerInput, lines: Vec<LedgerLine>) -> Bundle {
    let hash = close_hash(inp.period, inp.policy.version, &inp.inventory_version, Some("prev-hash"), &lines);
    Bundle {
        format: BUNDLE_FORMAT.into(),
        organization: "demo".into(),
        period: inp.period,
        closed_at: "2026-10-02T09:00:00Z".into(),
        closed_by: "finance@example.com".into(),
        policy_version: inp.policy.version,
        inventory_version: inp.inventory_version.clone(),
        previous_hash: Some("prev-hash".into()),
        hash,
        lines,
        inputs: inp.clone(),
        inventory: serde_json::Value::Null,
    }
}

#[test]
fn s11a_the_same_facts_in_any_order_give_the_same_lines_and_hash() {
    let inp = busy_month();
    let once = compute(&inp).unwrap();
    let twice = compute(&inp).unwrap();
    let reordered = compute(&shuffled(inp.clone())).unwrap();
    assert!(once.lines.len() >= 8, "{:?}", ids(&once.lines));
    assert_eq!(once, twice);
    assert_eq!(once, reordered);
    let h = |lines: &[LedgerLine]| close_hash(inp.period, 3, &inp.inventory_version, None, lines);
    assert_eq!(h(&once.lines), h(&reordered.lines));
    assert_eq!(h(&once.lines).len(), 64);
    // The hash covers the previous period's hash and the versions.
    assert_ne!(h(&once.lines), close_hash(inp.period, 3, &inp.inventory_version, Some("x"), &once.lines));
    assert_ne!(h(&once.lines), close_hash(inp.period, 4, &inp.inventory_version, None, &once.lines));
}

#[test]
fn s11b_a_bundle_verifies_and_a_tampered_one_names_the_line() {
    let inp = busy_month();
    let lines = lines_of(&inp);
    let bundle = bundle_of(&inp, lines.clone());
    let v = verify(&bundle).unwrap();
    assert!(v.ok(), "{:?}", v.differences);
    assert_eq!(v.recomputed, lines.len());
    assert_eq!(v.recomputed_hash, bundle.hash);

    // Through JSON (what an exported bundle is) it still verifies.
    let json = serde_json::to_string(&bundle).unwrap();
    let back: Bundle = serde_json::from_str(&json).unwrap();
    assert_eq!(back, bundle);
    assert!(verify(&back).unwrap().ok());

    // A stored amount changed after the close.
    let mut tampered = bundle.clone();
    let i = tampered.lines.iter().position(|l| l.line_id == "2026-09/borrowed/beta/A100-40GB").unwrap();
    let was = tampered.lines[i].amount.to_string();
    tampered.lines[i].amount = dec("1.00");
    let v = verify(&tampered).unwrap();
    assert!(!v.ok());
    assert!(
        v.differences.iter().any(|d| d.contains("2026-09/borrowed/beta/A100-40GB")
            && d.contains("amount is 1.00 in the bundle")
            && d.contains(&format!("{was} recomputed"))),
        "{:?}",
        v.differences
    );

    // A fact in the inputs changed: alpha's H100 allocation held 3 GPUs, not 2.
    let mut tampered = bundle.clone();
    let a = tampered.inputs.allocations.iter_mut().find(|a| a.id == "c1/a1").unwrap();
    a.fraction = frac("3");
    let v = verify(&tampered).unwrap();
    assert!(!v.ok());
    assert!(v.differences.iter().any(|d| d.contains("line 2026-09/borrowed/alpha/H100-80GB:")), "{:?}", v.differences);
    assert!(v.differences.iter().any(|d| d.starts_with("hash:")), "{:?}", v.differences);
}

/// Bundles closed before the telemetry tiers (format 1: an energy record per 60 s window) still verify, and so do
/// format-2 bundles of the same month with the windows summed per device-hour; an unknown format is refused.
#[test]
fn s11d_v1_and_v2_bundles_verify() {
    let mut inp = busy_month();
    inp.policy.energy = Some(EnergyPrice { per_kwh: dec("0.20"), pue: None });
    let minute = |gpu: &str, m: i64, j: u64| EnergyRecord {
        gpu_uuid: gpu.into(),
        start: inp.period.start() + time::Duration::minutes(m),
        end: inp.period.start() + time::Duration::minutes(m + 1),
        joules: j,
    };
    let mut v1 = inp.clone();
    let minutes: Vec<EnergyRecord> = (0..180).map(|m| minute("GPU-1", m, 40_000 + (m as u64 % 7) * 1_000)).collect();
    v1.energy = group_energy(minutes.clone());
    let lines = lines_of(&v1);
    let mut bundle = bundle_of(&v1, lines);
    bundle.format = BUNDLE_FORMAT_V1.into();
    assert!(verify(&bundle).unwrap().ok());
    // As a format-1 file has it: `inputs.energy` a flat list of window records.
    let mut json = serde_json::to_value(&bundle).unwrap();
    json["inputs"]["energy"] = serde_json::to_value(&minutes).unwrap();
    assert!(json["inputs"]["energy"][0]["end"].is_string(), "a v1 record");
    let read: Bundle = serde_json::from_value(json).unwrap();
    assert_eq!(read.inputs.energy, v1.energy);
    assert!(verify(&read).unwrap().ok());
    // Format 2 writes devices with compact spans, and reads them back.
    let json = serde_json::to_value(&bundle).unwrap();
    assert_eq!(json["inputs"]["energy"][0]["spans"][1], serde_json::json!([0, 60_000_000, 41_000]));
    assert_eq!(serde_json::from_value::<Bundle>(json).unwrap(), bundle);
    // The same windows as hours (what the close writes now): the hours' joules are the windows' exact sums.
    let mut v2 = inp.clone();
    v2.energy = group_energy((0..3).map(|h| EnergyRecord {
        gpu_uuid: "GPU-1".into(),
        start: inp.period.start() + time::Duration::hours(h),
        end: inp.period.start() + time::Duration::hours(h + 1),
        joules: minutes[(h * 60) as usize..((h + 1) * 60) as usize].iter().map(|r| r.joules).sum(),
    }));
    let bundle2 = bundle_of(&v2, lines_of(&v2));
    assert_eq!(bundle2.format, BUNDLE_FORMAT);
    let energy = |b: &Bundle| -> Vec<(String, String)> {
        b.lines
            .iter()
            .filter(|l| l.line_id.contains("/energy/"))
            .map(|l| (l.line_id.clone(), l.amount.to_string()))
            .collect()
    };
    assert!(!energy(&bundle).is_empty(), "the month has energy lines");
    assert!(verify(&bundle2).unwrap().ok());
    let mut unknown = bundle2.clone();
    unknown.format = "gpuledger-evidence-bundle/9".into();
    assert!(verify(&unknown).is_err());
}

/// The close writes its bundle through [`BundleRef`] (borrowed parts, no copy of the month): byte for byte the JSON
/// of the owned [`Bundle`], which reads back equal.
#[test]
fn s11e_bundle_ref_writes_the_bundle() {
    let mut inp = busy_month();
    inp.policy.energy = Some(EnergyPrice { per_kwh: dec("0.20"), pue: None });
    inp.energy = group_energy((0..5).map(|h| EnergyRecord {
        gpu_uuid: "GPU-1".into(),
        start: inp.period.start() + time::Duration::hours(h),
        end: inp.period.start() + time::Duration::hours(h + 1),
        joules: 1_000 + h as u64,
    }));
    let mut bundle = bundle_of(&inp, lines_of(&inp));
    bundle.inventory = serde_json::json!({"gpu_models": [{"model": "H100", "class": "H100-80GB"}]});
    let borrowed = gpuledger_core::bundle::BundleRef {
        format: &bundle.format,
        organization: &bundle.organization,
        period: bundle.period,
        closed_at: &bundle.closed_at,
        closed_by: &bundle.closed_by,
        policy_version: bundle.policy_version,
        inventory_version: &bundle.inventory_version,
        previous_hash: bundle.previous_hash.as_deref(),
        hash: &bundle.hash,
        lines: &bundle.lines,
        inputs: &bundle.inputs,
        inventory: &bundle.inventory,
    };
    let written = serde_json::to_vec(&borrowed).unwrap();
    assert_eq!(written, serde_json::to_vec(&bundle).unwrap());
    let read: Bundle = serde_json::from_slice(&written).unwrap();
    assert_eq!(read, bundle);
    assert!(verify(&read).unwrap().ok());
}

#[test]
fn s11c_busy_month_golden_totals() {
    let lines = lines_of(&busy_month());
    // alpha H100: quota 1, holds 2 for 50 h → (2 − 1) × 50 = 50 GPU-h × 3.00 = 150.00
    assert_money(line(&lines, "2026-09/borrowed/alpha/H100-80GB"), "50.000000", "GPU-hour", "3.00", "150.00");
    // Research A100 pool (quota 1): alpha 3/7 over [10,80), beta 1 over [20,60).
    //   [10,20): 3/7 ≤ 1 → nothing. [20,60): 10/7 − 1 = 3/7 over 40 h = 120/7 GPU-h,
    //   split alpha 3/10, beta 7/10 → alpha 36/7 = 5.142857, beta 12 GPU-h. [60,80): 3/7 → nothing.
    //   alpha 36/7 × 1.80 = 9.257142… → 9.26; beta 12 × 1.80 = 21.60
    assert_money(line(&lines, "2026-09/borrowed/alpha/A100-40GB"), "5.142857", "GPU-hour", "1.80", "9.26");
    assert_money(line(&lines, "2026-09/borrowed/beta/A100-40GB"), "12.000000", "GPU-hour", "1.80", "21.60");
    // energy: 2 GPUs on two devices → share 2/2 = 1 of each; GPU-1 36,000,000 J + GPU-2 18,000,000 J over [0,10),
    //   all inside [0,50) → 54,000,000 J = 15 kWh × (0.20 × 1.5) = 4.50
    assert_money(line(&lines, "2026-09/energy/alpha/H100-80GB"), "15.000000", "kWh", "0.300000", "4.50");
    // service: beta is the only user → the whole endpoint cost, 720 × 2.10 = 1,512.00;
    //   weighted 3,000,000 + 4 × 100,000 = 3.4 M; rate 1,512 / 3.4 = 444.705882…
    assert_money(
        line(&lines, "2026-09/service/beta/llm-shared"),
        "3.400000",
        "million weighted tokens",
        "444.705882",
        "1512.00",
    );
    // overhead pool: 1,000.00 + unallocated
    //   H100: 8 × 720 = 5,760; used = alpha ∫max(2,1 quota) = 720 + 50 = 770, endpoint 720 → idle 4,270 × 2.10 = 8,967.00
    //   A100: 2 × 720 = 1,440; used = quota 720 + borrowed 120/7 → idle 720 − 120/7 = 4,920/7 × 1.20 = 843.428571…
    //   T4: no capacity listed → nothing
    //   pool = 1,000 + 8,967 + 843.428571… = 10,810.428571… → 10,810.43
    // key: allocated GPU-hours: alpha 2 × 50 + 3/7 × 70 = 130, beta 40, gamma 1/4 × 400 = 100, platform 0 → 270
    //   alpha 1,081,043 cents × 130/270 = 520,502.18…, beta × 40/270 = 160,154.51…, gamma × 100/270 = 400,386.29…
    //   floors 520,502 + 160,154 + 400,386 = 1,081,042 → 1 cent left → largest remainder: beta (.51)
    let overhead: Vec<(&str, String)> = overhead_lines(&lines);
    assert_eq!(
        overhead,
        [("gamma", "4003.86".into()), ("alpha", "5205.02".into()), ("beta", "1601.55".into())],
        "{overhead:?}"
    );
    assert_eq!(line(&lines, "2026-09/overhead/alpha").rate.to_string(), "10810.43");
    // the Research A100 department quota: 1 × 720 × 1.20 = 864.00
    assert_money(
        line(&lines, "2026-09/guaranteed/department:Research/A100-40GB/q-research"),
        "720.000000",
        "GPU-hour",
        "1.20",
        "864.00",
    );
    assert!(tenant_lines(&lines, "platform").is_empty());
}

// ---------------------------------------------------------------------------------------------------------------
// 12. Errors

#[test]
fn s12_a_class_without_a_rate_is_an_error_naming_policy_classes_and_the_class() {
    let mut inp = input();
    inp.allocations.push(alloc("c1/x", alpha(), "L4-24GB", "1", 0, 1));
    let err = compute(&inp).unwrap_err();
    assert_eq!(err.field(), Some("policy.classes"));
    let text = err.to_string();
    assert!(text.contains("policy.classes") && text.contains("L4-24GB") && text.contains("c1/x"), "{text}");

    let mut inp = input();
    inp.quotas.push(month_quota("q-l4", QuotaHolder::Tenant(alpha()), "L4-24GB", "1"));
    let text = compute(&inp).unwrap_err().to_string();
    assert!(text.contains("policy.classes") && text.contains("L4-24GB") && text.contains("q-l4"), "{text}");
}

#[test]
fn s12b_bad_inputs_are_refused_with_the_field() {
    // a tenant nobody listed
    let mut inp = input();
    inp.allocations.push(alloc("c1/x", platform(), H100, "1", 0, 1));
    assert_eq!(compute(&inp).unwrap_err().field(), Some("tenants"));
    // an energy window that ends before it starts
    let mut inp = input();
    inp.policy.energy = Some(EnergyPrice { per_kwh: dec("0.20"), pue: None });
    inp.energy = group_energy([EnergyRecord { gpu_uuid: "GPU-1".into(), start: at(2), end: at(1), joules: 1 }]);
    assert_eq!(compute(&inp).unwrap_err().field(), Some("energy"));
    // an invalid policy
    let mut inp = input();
    inp.policy.currency = "usd".into();
    assert_eq!(compute(&inp).unwrap_err().field(), Some("currency"));
}

#[test]
fn s12c_unowned_and_unpriced_capacity_is_reported_not_charged() {
    let mut inp = input();
    inp.allocations.push(AllocationRecord { tenant: None, ..alloc("c1/orphan", alpha(), H100, "1", 0, 10) });
    inp.allocations.push(AllocationRecord { gpu_class: None, ..alloc("c1/unknown", alpha(), H100, "1", 0, 10) });
    inp.allocations.push(AllocationRecord { end: None, ..alloc("c1/open", beta(), T4, "1", 710, 720) });
    let ledger = compute(&inp).unwrap();
    assert_eq!(ids(&ledger.lines), ["2026-09/borrowed/beta/T4-16GB"]);
    assert_eq!(ledger.notes.unattributed_gpu_hours, [(H100.to_string(), dec("10"))]);
    assert_eq!(ledger.notes.unpriced_allocations, 1);
    assert_eq!(ledger.notes.open_allocations, 1);
}

#[test]
fn s05c_a_busy_department_pool_still_computes() {
    // Research shares 1 H100; alpha holds 1 all month, beta holds k GPUs during hour k for k = 1..=100.
    // In hour k: held 1 + k, above quota k, alpha's part k × 1/(1 + k), beta's k × k/(1 + k).
    let mut inp = input();
    inp.quotas.push(month_quota("q-research", QuotaHolder::Department(research()), H100, "1"));
    inp.allocations.push(alloc("c1/a", alpha(), H100, "1", 0, 720));
    for k in 1..=100 {
        inp.allocations.push(alloc(&format!("c1/b{k}"), beta(), H100, &k.to_string(), k, k + 1));
    }
    let lines = compute(&inp).expect("a month with 100 distinct pool totals must compute");
    // alpha: Σ k/(1+k) for k = 1..=100 = 100 − Σ 1/(1+k) = 101 − H(101) = 95.802721492… GPU-h; × 3.00 = 287.408164 → 287.41
    let a = line(&lines.lines, "2026-09/borrowed/alpha/H100-80GB");
    assert_money(a, "95.802721", "GPU-hour", "3.00", "287.41");
    // beta: Σ k²/(1+k) = Σ (k − 1) + Σ 1/(1+k) = 4,950 + 4.197278508 = 4,954.197278508…; × 3.00 = 14,862.591836 → 14,862.59
    let b = line(&lines.lines, "2026-09/borrowed/beta/H100-80GB");
    assert_money(b, "4954.197279", "GPU-hour", "3.00", "14862.59");
    // together: Σ k = 5,050 GPU-h above quota → 15,150.00
    assert_eq!(total(&lines.lines).unwrap().to_string(), "16662.00"); // + the quota 1 × 720 × 2.10 = 1,512.00
}

#[test]
fn s08b_energy_with_irregular_telemetry_windows_still_computes() {
    // Telemetry windows of about 30 s with millisecond jitter; 40 short allocations of 1/7 of the GPU start and end
    // on whole seconds, inside windows. Every partial window gives a fraction with its own denominator.
    let mut inp = input();
    inp.policy.energy = Some(EnergyPrice { per_kwh: dec("0.20"), pue: None });
    let base = at(0);
    let mut t = 0_i64; // ms
    let mut records = Vec::new();
    for i in 0..2_000_i64 {
        let len = 30_000 + (i * 37) % 1_000;
        records.push(EnergyRecord {
            gpu_uuid: "GPU-1".into(),
            start: base + Duration::milliseconds(t),
            end: base + Duration::milliseconds(t + len),
            joules: 9_000 + u64::try_from(i % 17).unwrap(),
        });
        t += len;
    }
    inp.energy = group_energy(records);
    for k in 0..40_i64 {
        let start = base + Duration::seconds(1_000 * k + 7);
        let end = start + Duration::seconds(600 + 13 * k);
        inp.allocations.push(AllocationRecord {
            devices: vec!["GPU-1".into()],
            start,
            end: Some(end),
            ..alloc(&format!("c1/mig{k}"), alpha(), A100, "1/7", 0, 1)
        });
    }
    let ledger = compute(&inp).expect("irregular telemetry windows must not overflow");
    let e = line(&ledger.lines, "2026-09/energy/alpha/A100-40GB");
    // about 295 W × 1/7 over Σ (600 + 13k) s = 24,000 + 10,140 = 34,140 s; summed window by window (joules ×
    // overlap / window length, computed offline with exact rationals) it is 1,440,455.3 J = 0.400126 kWh;
    // × 0.20 = 0.080025 → 0.08
    assert_money(e, "0.400126", "kWh", "0.200000", "0.08");
}

// ---------------------------------------------------------------------------------------------------------------
// The organization's calendar (issue 35 item 1): the month's instants come with the input.

/// America/New_York's March 2027 starts at 05:00 UTC on the 1st and ends at 04:00 UTC on April 1st (the clocks go
/// forward on the 14th): 743 hours, and a whole-month quota is charged 743 GPU-hours; Europe/Berlin's October 2026
/// (the clocks go back on the 25th) has 745.
#[test]
fn a_dst_month_has_its_own_hours() {
    use gpuledger_core::ledger::MonthBounds;
    let cases = [
        ("2027-03", datetime!(2027-03-01 05:00 UTC), datetime!(2027-04-01 04:00 UTC), "743.000000", "1560.30"),
        ("2026-10", datetime!(2026-09-30 22:00 UTC), datetime!(2026-10-31 23:00 UTC), "745.000000", "1564.50"),
    ];
    for (month, starts_at, ends_at, hours, amount) in cases {
        let zone = if month == "2027-03" { "America/New_York" } else { "Europe/Berlin" };
        let mut inp = input_for(Period::parse(month).unwrap(), &[alpha()]);
        inp.bounds = Some(MonthBounds { time_zone: zone.into(), starts_at, ends_at, continues_from: None });
        inp.quotas.push(QuotaRecord {
            id: "q".into(),
            holder: QuotaHolder::Tenant(alpha()),
            gpu_class: H100.into(),
            gpus: dec("1"),
            valid_from: datetime!(2026-01-01 00:00 UTC),
            valid_to: None,
        });
        let lines = lines_of(&inp);
        assert_money(&lines[0], hours, "GPU-hour", "2.10", amount);
        // UTC's month has 744.
        let mut utc = inp.clone();
        utc.bounds = None;
        assert_ne!(lines_of(&utc)[0].quantity.to_string(), hours);
    }
}

/// A pod holding a GPU from 23:00 to 02:00 in Tokyo across midnight of the 1st: October (Asia/Tokyo) charges the hour
/// before local midnight (14:00–15:00 UTC on October 31st), November the two after.
#[test]
fn a_pod_crossing_local_midnight_of_the_first_is_split_there() {
    use gpuledger_core::ledger::MonthBounds;
    let tokyo = |month: &str, s, e| {
        let mut inp = input_for(Period::parse(month).unwrap(), &[alpha()]);
        inp.bounds =
            Some(MonthBounds { time_zone: "Asia/Tokyo".into(), starts_at: s, ends_at: e, continues_from: None });
        inp.allocations.push(AllocationRecord {
            start: datetime!(2026-10-31 14:00 UTC),
            end: Some(datetime!(2026-10-31 17:00 UTC)),
            ..alloc("c1/night", alpha(), H100, "1", 0, 1)
        });
        inp
    };
    let oct = lines_of(&tokyo("2026-10", datetime!(2026-09-30 15:00 UTC), datetime!(2026-10-31 15:00 UTC)));
    let nov = lines_of(&tokyo("2026-11", datetime!(2026-10-31 15:00 UTC), datetime!(2026-11-30 15:00 UTC)));
    assert_money(line(&oct, "2026-10/borrowed/alpha/H100-80GB"), "1.000000", "GPU-hour", "3.00", "3.00");
    assert_money(line(&nov, "2026-11/borrowed/alpha/H100-80GB"), "2.000000", "GPU-hour", "3.00", "6.00");
}
