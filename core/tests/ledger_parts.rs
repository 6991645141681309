//! A ledger computed in parts (`LedgerParts`, what a close of a large fleet does to hold one part of the month at a
//! time: each quota pool swept as its allocations come, in start order) gives exactly the lines and notes of
//! `compute` over the whole input (each pool swept at once), however the start-ordered allocations are cut into parts
//! — with every term in play: quotas of tenants and departments,
//! devices shared across departments with their energy, a priced shared endpoint split by tokens, hours nobody
//! owned, a class priced at actual cost, and overhead with unallocated capacity.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use gpuledger_core::{
    Confidence, Fraction, Period,
    decimal::Decimal,
    ids::{DepartmentId, TenantId},
    ledger::{
        ActualCost, AllocationRecord, ClassCapacity, DepartmentRef, DeviceEnergy, EndpointTotal, EnergySpan,
        LedgerInput, LedgerParts, QuotaHolder, QuotaRecord, TenantRef, UsageRecord, compute,
    },
    policy::{ClassRates, CostPolicy, EnergyPrice, FixedCost, OverheadKey, OverheadPolicy, ServicePricing},
};
use proptest::prelude::*;
use time::{Duration, OffsetDateTime, macros::datetime};
use uuid::Uuid;

const HOURS: i64 = 720;
const CLASSES: [&str; 2] = ["H100-80GB", "A100-40GB"];
const FRACTIONS: [&str; 4] = ["1", "1/2", "3/7", "2"];
const DEVICES: usize = 5;

#[derive(Debug, Clone)]
struct Alloc {
    /// `None`: a namespace nobody owned.
    tenant: Option<usize>,
    class: usize,
    fraction: usize,
    start: i64,
    end: Option<i64>,
    devices: Vec<usize>,
    endpoint: bool,
}

#[derive(Debug, Clone)]
struct Case {
    tenant_dept: Vec<usize>,
    departments: usize,
    allocs: Vec<Alloc>,
    /// (tenant or department, class, GPUs, from, to)
    quotas: Vec<(bool, usize, usize, u32, i64, i64)>,
    /// Joules per device-hour, by device (hours with none are left out).
    joules: Vec<Vec<Option<u32>>>,
    /// Tokens per tenant on the endpoint.
    tokens: Vec<u32>,
    bill: Option<i64>,
    equal_key: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=3, 1usize..=6).prop_flat_map(|(nd, nt)| {
        let span = (0..HOURS, 1..=HOURS, prop::bool::weighted(0.15))
            .prop_map(|(s, len, open)| (s, if open { None } else { Some((s + len).min(HOURS)) }));
        let alloc = (
            prop::option::weighted(0.85, 0..nt),
            0..CLASSES.len(),
            0..FRACTIONS.len(),
            span,
            prop::collection::btree_set(0..DEVICES, 0..=2),
            prop::bool::weighted(0.15),
        )
            .prop_map(|(tenant, class, fraction, (start, end), devices, endpoint)| Alloc {
                tenant,
                class,
                fraction,
                start,
                end,
                devices: devices.into_iter().collect(),
                endpoint,
            });
        let quota = (any::<bool>(), 0..nt.max(nd), 0..CLASSES.len(), 1u32..=3, 0..HOURS / 2, HOURS / 2..=HOURS);
        // Energy every fourth hour: enough to make shares and partial windows matter, small enough to run fast.
        let hour = prop::option::weighted(0.8, 1u32..=3_000_000);
        (
            prop::collection::vec(0..nd, nt),
            prop::collection::vec(alloc, 0..=24),
            prop::collection::vec(quota, 0..=4),
            prop::collection::vec(prop::collection::vec(hour, (HOURS / 4) as usize), DEVICES),
            prop::collection::vec(0u32..=5_000, nt),
            prop::option::of(0i64..=50_000_000),
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(move |(tenant_dept, allocs, quotas, joules, tokens, bill, equal_key, seed)| Case {
                departments: nd,
                tenant_dept,
                allocs,
                quotas: quotas
                    .into_iter()
                    .map(|(tenant, who, class, gpus, from, to)| {
                        (tenant, if tenant { who % nt } else { who % nd }, class, gpus, from, to)
                    })
                    .collect(),
                joules,
                tokens,
                bill,
                equal_key,
                seed,
            })
    })
}

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
fn device(d: usize) -> String {
    format!("GPU-{d:08}")
}

fn build(case: &Case) -> LedgerInput {
    let allocations = case
        .allocs
        .iter()
        .enumerate()
        .map(|(i, a)| AllocationRecord {
            id: format!("c1/a{i}"),
            tenant: a.tenant.map(tid),
            gpu_class: Some(CLASSES[a.class].into()),
            fraction: FRACTIONS[a.fraction].parse::<Fraction>().unwrap(),
            start: at(a.start),
            end: a.end.map(at),
            confidence: if a.fraction == 3 { Confidence::Modeled } else { Confidence::Exact },
            devices: a.devices.iter().map(|d| device(*d)).collect(),
            endpoint: a.endpoint.then(|| "llm".to_string()),
            share_basis: None,
        })
        .collect();
    let us = |h: i64| at(h).unix_timestamp() * 1_000_000;
    let energy = case
        .joules
        .iter()
        .enumerate()
        .map(|(d, hours)| DeviceEnergy {
            gpu_uuid: device(d),
            spans: hours
                .iter()
                .enumerate()
                .filter_map(|(k, j)| {
                    let h = 4 * k as i64;
                    // 50 minutes of each fourth hour: allocations starting or ending inside take part of it.
                    j.map(|j| EnergySpan { start_us: us(h), end_us: us(h) + 3_000_000_000, joules: u64::from(j) })
                })
                .collect(),
        })
        .collect();
    let model = "m";
    LedgerInput {
        period: Period::parse("2026-09").unwrap(),
        policy: CostPolicy {
            version: 1,
            currency: "USD".into(),
            classes: CLASSES
                .iter()
                .enumerate()
                .map(|(i, c)| ClassRates {
                    gpu_class: (*c).into(),
                    guaranteed: dec(["2.10", "1.20"][i]),
                    borrowed: dec(["3.00", "1.80"][i]),
                    actual_cost: i == 1,
                })
                .collect(),
            energy: Some(EnergyPrice { per_kwh: dec("0.137"), pue: Some(dec("1.3")) }),
            services: vec![ServicePricing { endpoint: "llm".into(), per_million_weighted_tokens: None }],
            token_weights: Vec::new(),
            overhead: OverheadPolicy {
                fixed: vec![FixedCost { name: "platform".into(), amount: dec("1234.56") }],
                unallocated_capacity: true,
                key: if case.equal_key { OverheadKey::Equal } else { OverheadKey::AllocatedGpuHours },
            },
            idle: Default::default(),
            faults: Default::default(),
        },
        inventory_version: "inv".into(),
        departments: (0..case.departments).map(|d| DepartmentRef { id: did(d), name: format!("dept-{d}") }).collect(),
        tenants: case
            .tenant_dept
            .iter()
            .enumerate()
            .map(|(i, d)| TenantRef { id: tid(i), name: format!("tenant-{i}"), department: did(*d) })
            .collect(),
        capacity: CLASSES.iter().map(|c| ClassCapacity { gpu_class: (*c).into(), gpus: 8 }).collect(),
        quotas: case
            .quotas
            .iter()
            .enumerate()
            .map(|(i, (tenant, who, class, gpus, from, to))| QuotaRecord {
                id: format!("q{i}"),
                holder: if *tenant { QuotaHolder::Tenant(tid(*who)) } else { QuotaHolder::Department(did(*who)) },
                gpu_class: CLASSES[*class].into(),
                gpus: Decimal::from_integer(i128::from(*gpus)).unwrap(),
                valid_from: at(*from),
                valid_to: Some(at(*to)),
            })
            .collect(),
        allocations,
        energy,
        service_usage: case
            .tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| **t > 0)
            .map(|(i, t)| UsageRecord {
                endpoint: "llm".into(),
                model: model.into(),
                tenant: tid(i),
                requests: u64::from(*t / 10 + 1),
                input_tokens: u64::from(*t) * 100,
                output_tokens: u64::from(*t) * 7,
            })
            .collect(),
        endpoint_totals: vec![EndpointTotal {
            endpoint: "llm".into(),
            model: model.into(),
            requests: 1_000_000,
            input_tokens: 600_000_000,
            output_tokens: 40_000_000,
        }],
        adjustments: Vec::new(),
        actual_costs: case
            .bill
            .map(|c| ActualCost {
                gpu_class: CLASSES[1].into(),
                cost: Decimal::from_scaled(i128::from(c), 2).unwrap(),
                nodes: 2,
            })
            .into_iter()
            .collect(),
        bounds: None,
    }
}

fn mix(x: &mut u64) -> u64 {
    *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *x >> 33
}

/// The allocations in start order (as the close's cursor gives them; ties in a shuffled order) cut into parts of
/// random sizes — a quota pool's allocations across many parts — each part with the energy of only the devices it
/// uses.
fn parts(case: &Case, input: &LedgerInput) -> Vec<(Vec<AllocationRecord>, Vec<DeviceEnergy>)> {
    let mut seed = case.seed;
    let period_start = input.interval().unwrap().start();
    let mut order: Vec<(OffsetDateTime, u64, usize)> =
        input.allocations.iter().enumerate().map(|(i, a)| (a.start.max(period_start), mix(&mut seed), i)).collect();
    order.sort();
    let mut out = Vec::new();
    let mut at = 0;
    while at < order.len() {
        let n = 1 + (mix(&mut seed) as usize) % 6;
        let allocations: Vec<AllocationRecord> =
            order[at..(at + n).min(order.len())].iter().map(|(_, _, i)| input.allocations[*i].clone()).collect();
        at += n;
        let used: BTreeSet<&str> = allocations.iter().flat_map(|a| a.devices.iter().map(String::as_str)).collect();
        let energy = input.energy.iter().filter(|d| used.contains(d.gpu_uuid.as_str())).cloned().collect();
        out.push((allocations, energy));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_ledger_computed_in_parts_is_the_ledger_of_the_whole(case in case()) {
        let input = build(&case);
        let whole = compute(&input);
        let mut header = input.clone();
        header.allocations.clear();
        header.energy.clear();
        let in_parts = (|| {
            let mut ledger = LedgerParts::new(&header)?;
            for (allocations, energy) in parts(&case, &input) {
                ledger.add(&allocations, &energy)?;
            }
            ledger.finish()
        })();
        match (whole, in_parts) {
            (Ok(whole), Ok(in_parts)) => {
                prop_assert!(!whole.lines.is_empty());
                prop_assert_eq!(whole, in_parts);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "whole {:?} but in parts {:?}", a.map(|l| l.lines.len()), b.map(|l| l.lines.len())),
        }
    }
}

#[test]
fn a_pools_allocations_out_of_start_order_are_refused() {
    let case = Case {
        tenant_dept: vec![0, 0],
        departments: 1,
        allocs: [(10, 20), (5, 30)]
            .into_iter()
            .enumerate()
            .map(|(t, (start, end))| Alloc {
                tenant: Some(t),
                class: 0,
                fraction: 0,
                start,
                end: Some(end),
                devices: vec![],
                endpoint: false,
            })
            .collect(),
        quotas: vec![(false, 0, 0, 1, 0, HOURS)],
        joules: vec![vec![None; (HOURS / 4) as usize]; DEVICES],
        tokens: vec![0, 0],
        bill: None,
        equal_key: true,
        seed: 0,
    };
    let input = build(&case);
    let whole: BTreeMap<String, Decimal> =
        compute(&input).unwrap().lines.into_iter().map(|l| (l.line_id, l.amount)).collect();
    // The department's quota pools both tenants: the second allocation started before the first.
    let mut ledger = LedgerParts::new(&input).unwrap();
    ledger.add(&input.allocations[..1], &[]).unwrap();
    let err = ledger.add(&input.allocations[1..], &[]).unwrap_err().to_string();
    assert!(err.contains("start order"), "{err}");
    // In start order, in one part or in two, the lines are the whole's.
    let lines = |parts: &[&[AllocationRecord]]| -> BTreeMap<String, Decimal> {
        let mut ledger = LedgerParts::new(&input).unwrap();
        for p in parts {
            ledger.add(p, &[]).unwrap();
        }
        ledger.finish().unwrap().lines.into_iter().map(|l| (l.line_id, l.amount)).collect()
    };
    let ordered = [input.allocations[1].clone(), input.allocations[0].clone()];
    assert_eq!(lines(&[&ordered]), whole);
    assert_eq!(lines(&[&ordered[..1], &ordered[1..]]), whole);
    assert!(whole.keys().any(|k| k.contains("/borrowed/")), "the pool borrowed: {whole:?}");
}
