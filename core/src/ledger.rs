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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{
    confidence::Confidence,
    decimal::{Decimal, floor_scaled, round_scaled},
    error::DomainError,
    fraction::Fraction,
    ids::{DepartmentId, TenantId},
    interval::{Interval, NANOS_PER_HOUR, Period},
    policy::{CostPolicy, OverheadKey},
};

/// Decimals of money amounts.
pub const AMOUNT_SCALE: u32 = 2;
/// Decimals of quantities (GPU-hours, kWh, million tokens).
pub const QUANTITY_SCALE: u32 = 6;
/// Decimals of derived rates (a split endpoint's cost per million tokens, overhead per share).
pub const DERIVED_RATE_SCALE: u32 = 6;

/// Everything a period's ledger is computed from; also the `inputs` of an evidence bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerInput {
    /// The month.
    pub period: Period,
    /// The approved policy that prices it.
    pub policy: CostPolicy,
    /// Content hash of the approved inventory the allocation fractions came from.
    pub inventory_version: String,
    /// Departments.
    pub departments: Vec<DepartmentRef>,
    /// Tenants.
    pub tenants: Vec<TenantRef>,
    /// Physical GPUs per class (for the cost of unallocated capacity).
    #[serde(default)]
    pub capacity: Vec<ClassCapacity>,
    /// Guaranteed capacity.
    #[serde(default)]
    pub quotas: Vec<QuotaRecord>,
    /// Who held which capacity, when (split at ownership changes).
    #[serde(default)]
    pub allocations: Vec<AllocationRecord>,
    /// Energy per device and window.
    #[serde(default)]
    pub energy: Vec<EnergyRecord>,
    /// Productive work of shared endpoints per tenant (period totals).
    #[serde(default)]
    pub service_usage: Vec<UsageRecord>,
    /// What shared endpoints' model servers counted themselves (period totals per endpoint and model, from the
    /// agent's scrapes). Work beyond the tenants' usage is the endpoint's unattributed remainder: its share of the
    /// endpoint's cost joins the overhead pool instead of being split among the tenants that were attributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_totals: Vec<EndpointTotal>,
    /// Credits and corrections that land in this period.
    #[serde(default)]
    pub adjustments: Vec<AdjustmentRecord>,
}

/// A department.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepartmentRef {
    /// ID.
    pub id: DepartmentId,
    /// Name.
    pub name: String,
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRef {
    /// ID.
    pub id: TenantId,
    /// Name.
    pub name: String,
    /// Department.
    pub department: DepartmentId,
}

/// Number of physical GPUs of a class in the period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCapacity {
    /// GPU class.
    pub gpu_class: String,
    /// GPUs.
    pub gpus: u32,
}

/// Who a quota guarantees capacity to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum QuotaHolder {
    /// One tenant.
    Tenant(TenantId),
    /// A department: its tenants without their own quota for the class share it.
    Department(DepartmentId),
}

/// A guarantee: `gpus` of a class for a validity period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaRecord {
    /// Stable ID (evidence reference).
    pub id: String,
    /// Tenant or department.
    pub holder: QuotaHolder,
    /// GPU class.
    pub gpu_class: String,
    /// Guaranteed GPUs (may be fractional).
    pub gpus: Decimal,
    /// From (inclusive).
    #[serde(with = "time::serde::rfc3339")]
    pub valid_from: OffsetDateTime,
    /// To (exclusive), open when absent.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub valid_to: Option<OffsetDateTime>,
}

/// One allocation (or the part of it under one owner).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationRecord {
    /// Cluster and allocation ID (with a `#n` suffix when split at an ownership change).
    pub id: String,
    /// Owner; `None` when no tenant owned the namespace (never charged, reported).
    pub tenant: Option<TenantId>,
    /// Pricing class; `None` while the inventory has no entry (never charged, reported).
    pub gpu_class: Option<String>,
    /// GPU-equivalents held (exact).
    pub fraction: Fraction,
    /// Start.
    #[serde(with = "time::serde::rfc3339")]
    pub start: OffsetDateTime,
    /// End; open when absent.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub end: Option<OffsetDateTime>,
    /// Confidence of the interval and its fraction.
    pub confidence: Confidence,
    /// Physical GPU UUIDs it held capacity on (parents of MIG instances).
    #[serde(default)]
    pub devices: Vec<String>,
    /// Shared endpoint it serves, if its pods carry the endpoint label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// Energy a device used in a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyRecord {
    /// Physical GPU UUID.
    pub gpu_uuid: String,
    /// Window start.
    #[serde(with = "time::serde::rfc3339")]
    pub start: OffsetDateTime,
    /// Window end.
    #[serde(with = "time::serde::rfc3339")]
    pub end: OffsetDateTime,
    /// Joules (whole joules).
    pub joules: u64,
}

/// A tenant's use of a shared endpoint in the period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// Endpoint.
    pub endpoint: String,
    /// Model.
    pub model: String,
    /// Tenant.
    pub tenant: TenantId,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl UsageRecord {
    /// Its requests, input and output tokens.
    pub fn work(&self) -> Work {
        [self.requests, self.input_tokens, self.output_tokens]
    }
}

/// What a shared endpoint's model servers counted for one model in the period (all tenants, attributed or not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointTotal {
    /// Endpoint.
    pub endpoint: String,
    /// Model.
    pub model: String,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl EndpointTotal {
    /// Its requests, input and output tokens.
    pub fn work(&self) -> Work {
        [self.requests, self.input_tokens, self.output_tokens]
    }
}

/// Kind of adjustment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdjustmentKind {
    /// A credit approved after an accepted dispute.
    Credit,
    /// A correction for facts that arrived after their period closed.
    LateData,
}

/// An adjustment landing in this period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdjustmentRecord {
    /// Stable ID.
    pub id: String,
    /// Credit or late data.
    pub kind: AdjustmentKind,
    /// Tenant (none for a department-level line).
    pub tenant: Option<TenantId>,
    /// Department.
    pub department: DepartmentId,
    /// GPU class of the corrected line, if any.
    #[serde(default)]
    pub gpu_class: String,
    /// Signed amount (a credit is negative).
    pub amount: Decimal,
    /// What it corrects (`PERIOD/line_id`, or a dispute).
    pub corrects: String,
    /// Why, in words.
    pub reason: String,
}

/// Charge terms, in the order lines are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Term {
    /// Committed quota × hours × guaranteed rate.
    Guaranteed,
    /// Allocation above quota × borrowed rate.
    Borrowed,
    /// Attributed energy × price.
    Energy,
    /// Share of a shared endpoint.
    Service,
    /// Share of the platform overhead.
    Overhead,
    /// Approved credit.
    Credit,
    /// Correction of a closed period.
    Adjustment,
}

impl Term {
    /// Name as written in lines and exports.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Term::Guaranteed => "guaranteed",
            Term::Borrowed => "borrowed",
            Term::Energy => "energy",
            Term::Service => "service",
            Term::Overhead => "overhead",
            Term::Credit => "credit",
            Term::Adjustment => "adjustment",
        }
    }
}

/// One ledger line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLine {
    /// `PERIOD/term/holder/detail`, unique in the period.
    pub line_id: String,
    /// Month.
    pub period: Period,
    /// Department.
    pub department_id: DepartmentId,
    /// Department name.
    pub department: String,
    /// Tenant (none for a department-level guarantee).
    pub tenant_id: Option<TenantId>,
    /// Tenant name (empty for a department-level line).
    pub tenant: String,
    /// Charge term.
    pub term: Term,
    /// GPU class (empty when not class-specific).
    pub gpu_class: String,
    /// Quantity.
    pub quantity: Decimal,
    /// Unit of the quantity.
    pub unit: String,
    /// Rate per unit.
    pub rate: Decimal,
    /// Amount (rounded to cents).
    pub amount: Decimal,
    /// Currency.
    pub currency: String,
    /// Weakest confidence of its inputs.
    pub confidence: Confidence,
    /// Policy version that priced it.
    pub policy_version: u32,
    /// Where its evidence is.
    pub evidence: String,
    /// What it corrects, for credits and adjustments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrects: Option<String>,
    /// One sentence with its numbers.
    pub explanation: String,
}

/// CSV header of [`LedgerLine::csv_row`].
pub const CSV_HEADER: &str = "line_id,period,department_id,department,tenant_id,tenant,term,gpu_class,quantity,unit,\
rate,amount,currency,confidence,policy_version,evidence,corrects,explanation";

fn csv_field(out: &mut String, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&s.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(s);
    }
}

impl LedgerLine {
    /// The line as one CSV row (no newline), columns as in [`CSV_HEADER`]; also its canonical form for the hash.
    pub fn csv_row(&self) -> String {
        let fields = [
            self.line_id.clone(),
            self.period.to_string(),
            self.department_id.to_string(),
            self.department.clone(),
            self.tenant_id.map(|t| t.to_string()).unwrap_or_default(),
            self.tenant.clone(),
            self.term.as_str().to_string(),
            self.gpu_class.clone(),
            self.quantity.to_string(),
            self.unit.clone(),
            self.rate.to_string(),
            self.amount.to_string(),
            self.currency.clone(),
            self.confidence.as_str().to_string(),
            self.policy_version.to_string(),
            self.evidence.clone(),
            self.corrects.clone().unwrap_or_default(),
            self.explanation.clone(),
        ];
        let mut out = String::with_capacity(256);
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            csv_field(&mut out, f);
        }
        out
    }
}

/// What the computation noticed that is not money: shown beside the ledger, never silently dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerNotes {
    /// GPU-hours held in namespaces no tenant owned.
    pub unattributed_gpu_hours: Vec<(String, Decimal)>,
    /// GPU-hours whose profile had no inventory entry (no class → not priced).
    pub unpriced_allocations: usize,
    /// Allocations that were open at the end of the period (counted to the period end).
    pub open_allocations: usize,
    /// Shared endpoints' work that no tenant's usage accounts for (their model servers counted more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unattributed_service: Vec<UnattributedService>,
}

/// A shared endpoint's unattributed remainder in the period: what its model servers counted beyond the usage
/// attributed to tenants (per counter, floored at zero).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnattributedService {
    /// Endpoint.
    pub endpoint: String,
    /// Requests nobody was attributed.
    pub requests: u64,
    /// Input tokens nobody was attributed.
    pub input_tokens: u64,
    /// Output tokens nobody was attributed.
    pub output_tokens: u64,
    /// Their weighted tokens, in millions.
    pub million_weighted_tokens: Decimal,
    /// The part of the endpoint's cost they stand for, moved to the overhead pool (0 when the endpoint has a price
    /// per million weighted tokens: then nobody is charged for them).
    pub amount: Decimal,
    /// Counters (`requests`, `input_tokens`, `output_tokens`) for which the tenants' usage exceeds what the servers
    /// counted: the usage or the scrapes are wrong. Empty when they agree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub over_attributed: Vec<String>,
}

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

/// Result of [`compute`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Lines, in canonical order.
    pub lines: Vec<LedgerLine>,
    /// What was not charged and why.
    pub notes: LedgerNotes,
}

/// Least common multiple of two positive integers.
fn lcm(a: i128, b: i128) -> Result<i128, DomainError> {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    (a / x).checked_mul(b).ok_or_else(|| DomainError::overflow("lcm"))
}

fn hours(nanos: Fraction) -> Result<Fraction, DomainError> {
    nanos.checked_div(Fraction::from_integer(NANOS_PER_HOUR)?)
}

fn clip(start: OffsetDateTime, end: Option<OffsetDateTime>, p: &Interval) -> Option<(i128, i128)> {
    let s = start.max(p.start());
    let e = end.map_or(p.end(), |e| e.min(p.end()));
    (e > s).then(|| (s.unix_timestamp_nanos(), e.unix_timestamp_nanos()))
}

struct Ctx<'a> {
    input: &'a LedgerInput,
    tenants: BTreeMap<TenantId, &'a TenantRef>,
    departments: BTreeMap<DepartmentId, &'a DepartmentRef>,
    lines: Vec<LedgerLine>,
}

impl Ctx<'_> {
    fn base_line(
        &self,
        term: Term,
        tenant: Option<TenantId>,
        department: DepartmentId,
        gpu_class: &str,
        key: &str,
    ) -> Result<LedgerLine, DomainError> {
        let tenant_name = tenant.and_then(|t| self.tenants.get(&t)).map(|t| t.name.clone()).unwrap_or_default();
        let department_name =
            self.departments.get(&department).map(|d| d.name.clone()).ok_or_else(|| {
                DomainError::invalid_at("departments", format!("department {department} is not listed"))
            })?;
        let holder = if tenant.is_some() { tenant_name.clone() } else { format!("department:{department_name}") };
        let mut line_id = format!("{}/{}/{holder}", self.input.period, term.as_str());
        if !key.is_empty() {
            line_id.push('/');
            line_id.push_str(key);
        }
        Ok(LedgerLine {
            line_id,
            period: self.input.period,
            department_id: department,
            department: department_name,
            tenant_id: tenant,
            tenant: tenant_name,
            term,
            gpu_class: gpu_class.to_string(),
            quantity: Decimal::ZERO,
            unit: String::new(),
            rate: Decimal::ZERO,
            amount: Decimal::ZERO,
            currency: self.input.policy.currency.clone(),
            confidence: Confidence::Exact,
            policy_version: self.input.policy.version,
            evidence: String::new(),
            corrects: None,
            explanation: String::new(),
        })
    }

    fn department_of(&self, tenant: TenantId) -> Result<DepartmentId, DomainError> {
        self.tenants
            .get(&tenant)
            .map(|t| t.department)
            .ok_or_else(|| DomainError::invalid_at("tenants", format!("tenant {tenant} is not listed")))
    }

    fn evidence(&self, query: &str) -> String {
        format!("/api/v1/periods/{}/evidence?{query}", self.input.period)
    }
}

/// Per (tenant, class) sums gathered while sweeping.
#[derive(Default, Clone)]
struct Usage {
    allocated_ns: Fraction,
    borrowed_ns: Fraction,
    confidence: Option<Confidence>,
    count: usize,
}

fn money(value: Fraction) -> Result<Decimal, DomainError> {
    Decimal::round(value, AMOUNT_SCALE)
}

fn qty(value: Fraction) -> Result<Decimal, DomainError> {
    Decimal::round(value, QUANTITY_SCALE)
}

/// Splits `total` (rounded to cents) among `weights` by the largest-remainder method: the parts add up to the
/// rounded total exactly; ties go to the earlier weight.
pub fn distribute(total: Fraction, weights: &[Fraction]) -> Result<Vec<Decimal>, DomainError> {
    let total_cents = round_scaled(total, AMOUNT_SCALE)?;
    let sum = weights.iter().try_fold(Fraction::ZERO, |a, w| a.checked_add(*w))?;
    if weights.is_empty() || sum.is_zero() {
        return Ok(vec![Decimal::from_scaled(0, AMOUNT_SCALE)?; weights.len()]);
    }
    let total_exact = Fraction::from_integer(total_cents)?;
    let mut parts = Vec::with_capacity(weights.len());
    let mut given = 0_i128;
    for w in weights {
        let share = total_exact.checked_mul(*w)?.checked_div(sum)?;
        let (floor, rem) = floor_scaled(share, 0)?;
        given += floor;
        parts.push((floor, rem));
    }
    let mut left = total_cents - given;
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|a, b| parts[*b].1.cmp(&parts[*a].1).then(a.cmp(b)));
    let step = if left < 0 { -1 } else { 1 };
    let mut i = 0;
    while left != 0 && !order.is_empty() {
        parts[order[i % order.len()]].0 += step;
        left -= step;
        i += 1;
    }
    parts.into_iter().map(|(c, _)| Decimal::from_scaled(c, AMOUNT_SCALE)).collect()
}

/// Computes a period's ledger. Errors name the input that made it impossible (e.g. a class with no rate).
pub fn compute(input: &LedgerInput) -> Result<Ledger, DomainError> {
    input.policy.validate()?;
    let period = input.period.interval()?;
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

    // ---- guaranteed: one line per quota record
    let mut quota_ns: BTreeMap<String, Fraction> = BTreeMap::new(); // per class, for unallocated capacity
    for (i, q) in input.quotas.iter().enumerate() {
        let rates = policy.rates(&q.gpu_class).ok_or_else(|| {
            DomainError::invalid_at(
                "policy.classes",
                format!("no rate for GPU class {} (quota {} needs one)", q.gpu_class, q.id),
            )
        })?;
        if q.gpus.is_negative() {
            return Err(DomainError::invalid_at(format!("quotas[{i}].gpus"), "is negative"));
        }
        let Some((s, e)) = clip(q.valid_from, q.valid_to, &period) else { continue };
        let ns = Fraction::from_integer(e - s)?;
        let gpu_ns = ns.checked_mul(q.gpus.value())?;
        let entry = quota_ns.entry(q.gpu_class.clone()).or_insert(Fraction::ZERO);
        *entry = entry.checked_add(gpu_ns)?;
        let (tenant, department) = match q.holder {
            QuotaHolder::Tenant(t) => (Some(t), ctx.department_of(t)?),
            QuotaHolder::Department(d) => (None, d),
        };
        let h = hours(ns)?;
        let quantity = hours(gpu_ns)?;
        let amount = money(quantity.checked_mul(rates.guaranteed.value())?)?;
        let mut line =
            ctx.base_line(Term::Guaranteed, tenant, department, &q.gpu_class, &format!("{}/{}", q.gpu_class, q.id))?;
        line.quantity = qty(quantity)?;
        line.unit = "GPU-hour".into();
        line.rate = rates.guaranteed;
        line.amount = amount;
        line.evidence = format!("quota:{}", q.id);
        line.explanation = format!(
            "{} {} guaranteed × {} h × {} {} = {} {}",
            q.gpus.normalized().grouped(),
            q.gpu_class,
            qty(h)?.grouped().trim_end_matches('0').trim_end_matches('.'),
            rates.guaranteed,
            policy.currency,
            amount.grouped(),
            policy.currency
        );
        ctx.lines.push(line);
    }

    // ---- allocations: clip, route endpoint allocations aside, group the rest into pools
    struct Seg {
        tenant: TenantId,
        fraction: Fraction,
        s: i128,
        e: i128,
    }
    let mut pool_of: BTreeMap<(QuotaHolder, &str), usize> = BTreeMap::new();
    let mut pool_segs: Vec<((QuotaHolder, &str), Vec<Seg>)> = Vec::new();
    let mut endpoint_ns: BTreeMap<String, BTreeMap<String, Fraction>> = BTreeMap::new(); // endpoint → class → GPU-ns
    let mut endpoint_conf: BTreeMap<String, Confidence> = BTreeMap::new();
    let mut unattributed: BTreeMap<String, Fraction> = BTreeMap::new();
    let has_tenant_quota: BTreeSet<(TenantId, &str)> = input
        .quotas
        .iter()
        .filter_map(|q| match q.holder {
            QuotaHolder::Tenant(t) => Some((t, q.gpu_class.as_str())),
            QuotaHolder::Department(_) => None,
        })
        .collect();
    let has_dept_quota: BTreeSet<(DepartmentId, &str)> = input
        .quotas
        .iter()
        .filter_map(|q| match q.holder {
            QuotaHolder::Department(d) => Some((d, q.gpu_class.as_str())),
            QuotaHolder::Tenant(_) => None,
        })
        .collect();
    let mut slot_of: HashMap<(TenantId, &str), usize> = HashMap::new();
    let mut usage_slots: Vec<((TenantId, &str), usize, Usage)> = Vec::new();
    let mut energy_share: Vec<(usize, Fraction, usize)> = Vec::new(); // allocation → per-device fraction, slot
    for (idx, a) in input.allocations.iter().enumerate() {
        if a.fraction.numer() <= 0 {
            return Err(DomainError::invalid_at(format!("allocations[{idx}].fraction"), "must be positive"));
        }
        let Some((s, e)) = clip(a.start, a.end, &period) else { continue };
        if a.end.is_none_or(|end| end > period.end()) {
            notes.open_allocations += 1;
        }
        let Some(class) = &a.gpu_class else {
            notes.unpriced_allocations += 1;
            continue;
        };
        let gpu_ns = Fraction::new(
            (e - s).checked_mul(a.fraction.numer()).ok_or_else(|| DomainError::overflow("allocation"))?,
            a.fraction.denom(),
        )?;
        if let Some(ep) = a.endpoint.as_deref().filter(|ep| priced_endpoints.contains(ep)) {
            let per_class = endpoint_ns.entry(ep.to_string()).or_default();
            let v = per_class.entry(class.clone()).or_insert(Fraction::ZERO);
            *v = v.checked_add(gpu_ns)?;
            let c = endpoint_conf.entry(ep.to_string()).or_insert(Confidence::Exact);
            *c = c.combine(a.confidence);
            continue;
        }
        let Some(tenant) = a.tenant else {
            let v = unattributed.entry(class.clone()).or_insert(Fraction::ZERO);
            *v = v.checked_add(gpu_ns)?;
            continue;
        };
        // The pool and the usage of a (tenant, class) are resolved on its first allocation.
        let slot = match slot_of.get(&(tenant, class.as_str())) {
            Some(slot) => *slot,
            None => {
                let department = ctx.department_of(tenant)?;
                if policy.rates(class).is_none() {
                    return Err(DomainError::invalid_at(
                        "policy.classes",
                        format!("no rate for GPU class {class} (allocation {} needs one)", a.id),
                    ));
                }
                let holder = if has_tenant_quota.contains(&(tenant, class.as_str())) {
                    QuotaHolder::Tenant(tenant)
                } else if has_dept_quota.contains(&(department, class.as_str())) {
                    QuotaHolder::Department(department)
                } else {
                    QuotaHolder::Tenant(tenant)
                };
                let pool = *pool_of.entry((holder, class.as_str())).or_insert_with(|| {
                    pool_segs.push(((holder, class.as_str()), Vec::new()));
                    pool_segs.len() - 1
                });
                usage_slots.push(((tenant, class.as_str()), pool, Usage::default()));
                slot_of.insert((tenant, class.as_str()), usage_slots.len() - 1);
                usage_slots.len() - 1
            }
        };
        let (_, pool, u) = &mut usage_slots[slot];
        pool_segs[*pool].1.push(Seg { tenant, fraction: a.fraction, s, e });
        u.allocated_ns = u.allocated_ns.checked_add(gpu_ns)?;
        u.confidence = Some(u.confidence.map_or(a.confidence, |c| c.combine(a.confidence)));
        u.count += 1;
        if !a.devices.is_empty() {
            let per_device = a.fraction.denom().checked_mul(a.devices.len() as i128);
            energy_share.push((
                idx,
                Fraction::new(a.fraction.numer(), per_device.ok_or_else(|| DomainError::overflow("allocation"))?)?,
                slot,
            ));
        }
    }
    let pools: BTreeMap<(QuotaHolder, &str), Vec<Seg>> = pool_segs.into_iter().collect();
    let slot_keys: Vec<(TenantId, &str)> = usage_slots.iter().map(|(key, _, _)| *key).collect();
    let mut usage: BTreeMap<(TenantId, &str), Usage> = usage_slots.into_iter().map(|(k, _, u)| (k, u)).collect();
    for (class, ns) in &unattributed {
        notes.unattributed_gpu_hours.push((class.clone(), qty(hours(*ns)?)?));
    }

    // ---- borrowed: sweep each pool; charged = ∫ max(allocated, quota)
    let mut charged_ns: BTreeMap<String, Fraction> = BTreeMap::new();
    for ((holder, class), segs) in &pools {
        let quotas: Vec<(i128, i128, Fraction)> = input
            .quotas
            .iter()
            .filter(|q| q.holder == *holder && q.gpu_class == *class)
            .filter_map(|q| clip(q.valid_from, q.valid_to, &period).map(|(s, e)| (s, e, q.gpus.value())))
            .collect();
        // Amounts as integers in units of 1/scale GPU (scale: the lcm of the pool's denominators), so that the sweep
        // adds and multiplies integers; what it sums converts back to the same exact fractions.
        let scale =
            segs.iter().map(|s| s.fraction.denom()).chain(quotas.iter().map(|q| q.2.denom())).try_fold(1_i128, lcm)?;
        let units =
            |f: Fraction| f.numer().checked_mul(scale / f.denom()).ok_or_else(|| DomainError::overflow("sweep"));
        // events: (time, tenant index or quota, signed amount in units: an end subtracts)
        let mut tenants_in_pool: Vec<TenantId> = segs.iter().map(|s| s.tenant).collect();
        tenants_in_pool.sort();
        tenants_in_pool.dedup();
        let tix: HashMap<TenantId, usize> = tenants_in_pool.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let mut events: Vec<(i128, usize, i128)> = Vec::with_capacity(segs.len() * 2 + quotas.len() * 2);
        let quota_slot = usize::MAX;
        for s in segs {
            let (i, u) = (tix[&s.tenant], units(s.fraction)?);
            events.push((s.s, i, u));
            events.push((s.e, i, -u));
        }
        for (s, e, g) in &quotas {
            let u = units(*g)?;
            events.push((*s, quota_slot, u));
            events.push((*e, quota_slot, -u));
        }
        // All events at one instant are applied before the next step, so their order does not matter.
        events.sort_unstable_by_key(|e| e.0);
        let overflow = || DomainError::overflow("sweep");
        let mut alloc = vec![0_i128; tenants_in_pool.len()];
        let mut total = 0_i128;
        let mut quota = 0_i128;
        // One tenant: units × ns, exact. Several: whole GPU-nanoseconds (rounded per step, see below).
        let mut borrowed_acc = vec![0_i128; tenants_in_pool.len()];
        let mut k = 0;
        let mut prev_t: Option<i128> = None;
        while k < events.len() {
            let t = events[k].0;
            if let Some(pt) = prev_t
                && t > pt
            {
                let dt = t - pt;
                let excess = total - quota;
                if excess > 0 {
                    let excess_dt = excess.checked_mul(dt).ok_or_else(overflow)?;
                    if tenants_in_pool.len() == 1 {
                        borrowed_acc[0] = borrowed_acc[0].checked_add(excess_dt).ok_or_else(overflow)?;
                    } else {
                        // Each tenant borrows in proportion to what it holds at the moment, rounded to whole
                        // GPU-nanoseconds (half up): kept exact, the common denominator of the shares grows with every
                        // distinct pool total and overflows i128 within a month of a shared department quota.
                        // a/scale × (excess/scale × dt) / (total/scale) = a × excess × dt / (total × scale).
                        let den = total.checked_mul(scale).ok_or_else(overflow)?;
                        for (i, a) in alloc.iter().enumerate() {
                            if *a != 0 {
                                let num = a.checked_mul(excess_dt).ok_or_else(overflow)?;
                                let (q, r) = (num / den, num % den);
                                let part = if 2 * r >= den { q + 1 } else { q };
                                borrowed_acc[i] = borrowed_acc[i].checked_add(part).ok_or_else(overflow)?;
                            }
                        }
                    }
                }
            }
            while k < events.len() && events[k].0 == t {
                let (_, who, delta) = events[k];
                if who == quota_slot {
                    quota += delta;
                } else {
                    alloc[who] += delta;
                    total += delta;
                }
                k += 1;
            }
            prev_t = Some(t);
        }
        let borrowed: Vec<Fraction> = if tenants_in_pool.len() == 1 {
            vec![Fraction::new(borrowed_acc[0], scale)?]
        } else {
            borrowed_acc.iter().map(|b| Fraction::from_integer(*b)).collect::<Result<_, _>>()?
        };
        // Quota time with no allocation at all still counts as charged (reserved) capacity.
        let quota_total = quotas.iter().try_fold(Fraction::ZERO, |acc, (s, e, g)| {
            acc.checked_add(Fraction::from_integer(e - s)?.checked_mul(*g)?)
        })?;
        let borrowed_total = borrowed.iter().try_fold(Fraction::ZERO, |a, b| a.checked_add(*b))?;
        // ∫max(A, Q) = ∫Q + ∫max(0, A − Q): reserved or held, whichever is more.
        let c = charged_ns.entry((*class).to_string()).or_insert(Fraction::ZERO);
        *c = c.checked_add(quota_total.checked_add(borrowed_total)?)?;
        for (i, t) in tenants_in_pool.iter().enumerate() {
            if let Some(u) = usage.get_mut(&(*t, *class)) {
                u.borrowed_ns = u.borrowed_ns.checked_add(borrowed[i])?;
            }
        }
    }
    // Quotas of holders with no allocation at all are reserved capacity too.
    for q in &input.quotas {
        let swept = pools.contains_key(&(q.holder, q.gpu_class.as_str()));
        if !swept && let Some((s, e)) = clip(q.valid_from, q.valid_to, &period) {
            let c = charged_ns.entry(q.gpu_class.clone()).or_insert(Fraction::ZERO);
            *c = c.checked_add(Fraction::from_integer(e - s)?.checked_mul(q.gpus.value())?)?;
        }
    }
    for ((tenant, class), u) in &usage {
        if u.borrowed_ns.is_zero() {
            continue;
        }
        let Some(rates) = policy.rates(class) else { continue };
        let quantity = hours(u.borrowed_ns)?;
        let amount = money(quantity.checked_mul(rates.borrowed.value())?)?;
        let department = ctx.department_of(*tenant)?;
        let mut line = ctx.base_line(Term::Borrowed, Some(*tenant), department, class, class)?;
        line.quantity = qty(quantity)?;
        line.unit = "GPU-hour".into();
        line.rate = rates.borrowed;
        line.amount = amount;
        line.confidence = u.confidence.unwrap_or(Confidence::Exact);
        line.evidence = ctx.evidence(&format!("tenant={tenant}&gpu_class={class}"));
        line.explanation = format!(
            "{} {class} GPU-hours above quota (of {} allocated in {} allocations) × {} {} = {} {}",
            line.quantity.grouped(),
            qty(hours(u.allocated_ns)?)?.grouped(),
            u.count,
            rates.borrowed,
            policy.currency,
            amount.grouped(),
            policy.currency
        );
        ctx.lines.push(line);
    }

    // ---- energy: device energy × the allocation's share of the device
    let mut endpoint_energy_kwh: BTreeMap<String, Fraction> = BTreeMap::new();
    if let Some(price) = &policy.energy {
        // Per device: (start ns, end ns, joules), by start.
        let mut by_device: HashMap<&str, Vec<(i128, i128, u64)>> = HashMap::new();
        for r in &input.energy {
            if r.end <= r.start {
                return Err(DomainError::invalid_at(
                    "energy",
                    format!("window of {} ends before it starts", r.gpu_uuid),
                ));
            }
            by_device.entry(r.gpu_uuid.as_str()).or_default().push((
                r.start.unix_timestamp_nanos(),
                r.end.unix_timestamp_nanos(),
                r.joules,
            ));
        }
        for v in by_device.values_mut() {
            v.sort_by_key(|w| w.0);
        }
        // The allocation's device energy in whole millijoules (before its share).
        let attribute = |a: &AllocationRecord| -> Result<i128, DomainError> {
            let Some((s, e)) = clip(a.start, a.end, &period) else { return Ok(0) };
            let mut mj = 0_i128;
            for d in &a.devices {
                let Some(windows) = by_device.get(d.as_str()) else { continue };
                let first = windows.partition_point(|w| w.1 <= s);
                for &(ws, we, joules) in &windows[first..] {
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
        let mut per_slot: Vec<(Vec<(Fraction, i128)>, Confidence)> =
            vec![(Vec::new(), Confidence::Exact); slot_keys.len()];
        for (idx, share, slot) in &energy_share {
            let a = &input.allocations[*idx];
            let mj = attribute(a)?;
            if mj == 0 {
                continue;
            }
            let (sums, conf) = &mut per_slot[*slot];
            match sums.iter_mut().find(|(s, _)| s == share) {
                Some((_, sum)) => *sum = sum.checked_add(mj).ok_or_else(|| DomainError::overflow("energy"))?,
                None => sums.push((*share, mj)),
            }
            *conf = conf.combine(a.confidence);
        }
        let mut joules: BTreeMap<(TenantId, &str), (Fraction, Confidence)> = BTreeMap::new();
        for (key, (sums, conf)) in slot_keys.iter().zip(per_slot) {
            if sums.is_empty() {
                continue;
            }
            let j = sums.iter().try_fold(Fraction::ZERO, |acc, (share, mj)| {
                acc.checked_add(Fraction::new(*mj, 1000)?.checked_mul(*share)?)
            })?;
            joules.insert(*key, (j, conf));
        }
        for a in &input.allocations {
            if let (Some(ep), Some(_)) = (a.endpoint.as_deref().filter(|e| priced_endpoints.contains(e)), &a.gpu_class)
                && !a.devices.is_empty()
            {
                let share = a.fraction.checked_div(Fraction::from_integer(a.devices.len() as i128)?)?;
                let j = Fraction::new(attribute(a)?, 1000)?.checked_mul(share)?;
                let v = endpoint_energy_kwh.entry(ep.to_string()).or_insert(Fraction::ZERO);
                *v = v.checked_add(j.checked_div(Fraction::from_integer(3_600_000)?)?)?;
            }
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

    // ---- service: shared endpoints split by weighted tokens
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
        for (class, ns) in endpoint_ns.get(&svc.endpoint).into_iter().flatten() {
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

    // ---- overhead: fixed costs + unallocated capacity, distributed by the key
    let mut pool = Fraction::ZERO;
    let mut pool_text = Vec::new();
    for f in &policy.overhead.fixed {
        pool = pool.checked_add(f.amount.value())?;
        pool_text.push(format!("{} {}", f.name, f.amount.grouped()));
    }
    for (endpoint, amount) in &service_remainders {
        pool = pool.checked_add(amount.value())?;
        pool_text.push(format!("unattributed work on {endpoint} {}", amount.grouped()));
    }
    if policy.overhead.unallocated_capacity {
        // One entry per class, in class order, whatever the order (or repetition) of the input's entries.
        let mut by_class: BTreeMap<&str, u32> = BTreeMap::new();
        for cap in &input.capacity {
            let n = by_class.entry(cap.gpu_class.as_str()).or_insert(0);
            *n = n.saturating_add(cap.gpus);
        }
        for cap in by_class.into_iter().map(|(c, gpus)| ClassCapacity { gpu_class: c.to_string(), gpus }) {
            let Some(rates) = policy.rates(&cap.gpu_class) else { continue };
            let capacity_ns = Fraction::from_integer(period.duration_nanos())?.checked_mul_int(i128::from(cap.gpus))?;
            let endpoint_class_ns = endpoint_ns
                .values()
                .filter_map(|m| m.get(&cap.gpu_class))
                .try_fold(Fraction::ZERO, |a, v| a.checked_add(*v))?;
            let used = charged_ns
                .get(&cap.gpu_class)
                .copied()
                .unwrap_or(Fraction::ZERO)
                .checked_add(endpoint_class_ns)?
                .checked_add(unattributed.get(&cap.gpu_class).copied().unwrap_or(Fraction::ZERO))?;
            let idle = capacity_ns.sub_or_zero(used)?;
            if idle.is_zero() {
                continue;
            }
            let h = hours(idle)?;
            pool = pool.checked_add(h.checked_mul(rates.guaranteed.value())?)?;
            pool_text.push(format!("unallocated {} {} GPU-h × {}", qty(h)?.grouped(), cap.gpu_class, rates.guaranteed));
        }
    }
    if !pool.is_zero() && !input.tenants.is_empty() {
        let mut tenants: Vec<&TenantRef> = input.tenants.iter().collect();
        tenants.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        let (weights, key_text): (Vec<Fraction>, &str) = match &policy.overhead.key {
            OverheadKey::Equal => (vec![Fraction::ONE; tenants.len()], "equal shares"),
            OverheadKey::FixedShares { shares } => (
                tenants
                    .iter()
                    .map(|t| shares.iter().find(|s| s.tenant == t.id).map_or(Fraction::ZERO, |s| s.share.value()))
                    .collect(),
                "fixed shares",
            ),
            OverheadKey::AllocatedGpuHours => {
                let w: Vec<Fraction> = tenants
                    .iter()
                    .map(|t| {
                        usage
                            .iter()
                            .filter(|((tid, _), _)| *tid == t.id)
                            .try_fold(Fraction::ZERO, |a, (_, u)| a.checked_add(u.allocated_ns))
                    })
                    .collect::<Result<_, _>>()?;
                if w.iter().all(Fraction::is_zero) {
                    (vec![Fraction::ONE; tenants.len()], "equal shares (nobody allocated GPUs)")
                } else {
                    (w.into_iter().map(hours).collect::<Result<_, _>>()?, "allocated GPU-hours")
                }
            }
        };
        let amounts = distribute(pool, &weights)?;
        let total_w = weights.iter().try_fold(Fraction::ZERO, |a, w| a.checked_add(*w))?;
        let pool_amount = money(pool)?;
        for ((t, w), amount) in tenants.iter().zip(&weights).zip(amounts) {
            if w.is_zero() {
                continue;
            }
            let mut line = ctx.base_line(Term::Overhead, Some(t.id), t.department, "", "")?;
            let share = w.checked_div(total_w)?;
            line.quantity = qty(share)?;
            line.unit = "share".into();
            line.rate = pool_amount;
            line.amount = amount;
            line.confidence = Confidence::Modeled;
            line.evidence = format!("policy:v{}/overhead", policy.version);
            line.explanation = format!(
                "{}% of the shared overhead pool {} {} ({}) by {key_text} = {} {}",
                Decimal::round(share.checked_mul_int(100)?, 4)?,
                pool_amount.grouped(),
                policy.currency,
                pool_text.join(" + "),
                amount.grouped(),
                policy.currency
            );
            ctx.lines.push(line);
        }
    }

    // ---- credits and adjustments
    for (i, adj) in input.adjustments.iter().enumerate() {
        if let Some(t) = adj.tenant
            && ctx.department_of(t)? != adj.department
        {
            return Err(DomainError::invalid_at(format!("adjustments[{i}].department"), "is not the tenant's"));
        }
        let term = match adj.kind {
            AdjustmentKind::Credit => Term::Credit,
            AdjustmentKind::LateData => Term::Adjustment,
        };
        let amount = adj
            .amount
            .with_scale(AMOUNT_SCALE)
            .map_err(|e| DomainError::invalid_at(format!("adjustments[{i}].amount"), e.to_string()))?;
        let mut line = ctx.base_line(term, adj.tenant, adj.department, &adj.gpu_class, &adj.id)?;
        line.quantity = Decimal::from_integer(1)?;
        line.unit = "adjustment".into();
        line.rate = amount;
        line.amount = amount;
        line.evidence = adj.corrects.clone();
        line.corrects = Some(adj.corrects.clone());
        line.explanation =
            format!("{}: {} {} correcting {}", adj.reason, amount.grouped(), policy.currency, adj.corrects);
        ctx.lines.push(line);
    }

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

/// Adjustments for a closed period whose facts changed after it closed: one per line whose recomputed amount
/// differs from what was closed plus the adjustments already issued for it, each pointing at the line it corrects
/// (`PERIOD/...` line ID). Lines that appear only in the recomputation are corrected from zero.
pub fn late_adjustments(
    closed: &[LedgerLine],
    already_adjusted: &[AdjustmentRecord],
    recomputed: &[LedgerLine],
) -> Result<Vec<AdjustmentRecord>, DomainError> {
    let zero = Decimal::from_scaled(0, AMOUNT_SCALE)?;
    let mut charged: BTreeMap<&str, Decimal> = BTreeMap::new();
    for l in closed {
        charged.insert(l.line_id.as_str(), l.amount);
    }
    let mut adjusted: BTreeMap<&str, Decimal> = BTreeMap::new();
    for a in already_adjusted.iter().filter(|a| a.kind == AdjustmentKind::LateData) {
        let v = adjusted.entry(a.corrects.as_str()).or_insert(zero);
        *v = v.checked_add(&a.amount)?;
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |line: &LedgerLine, now: Decimal| -> Result<(), DomainError> {
        let before = charged
            .get(line.line_id.as_str())
            .copied()
            .unwrap_or(zero)
            .checked_add(&adjusted.get(line.line_id.as_str()).copied().unwrap_or(zero))?;
        if now == before {
            return Ok(());
        }
        let cents = now.checked_sub(&before)?.with_scale(AMOUNT_SCALE)?.scaled_units();
        // A second late fact for the same line gets its own ID, so both can land in one period.
        let issued = already_adjusted
            .iter()
            .filter(|a| a.kind == AdjustmentKind::LateData && a.corrects == line.line_id)
            .count();
        out.push(AdjustmentRecord {
            id: if issued == 0 {
                format!("late:{}", line.line_id)
            } else {
                format!("late:{}#{}", line.line_id, issued + 1)
            },
            kind: AdjustmentKind::LateData,
            tenant: line.tenant_id,
            department: line.department_id,
            gpu_class: line.gpu_class.clone(),
            amount: Decimal::from_scaled(cents, AMOUNT_SCALE)?,
            corrects: line.line_id.clone(),
            reason: format!(
                "Facts received after {} closed change {} {} from {} to {}",
                line.period,
                line.term.as_str(),
                if line.tenant.is_empty() { line.department.as_str() } else { line.tenant.as_str() },
                before.with_scale(AMOUNT_SCALE)?,
                now.with_scale(AMOUNT_SCALE)?
            ),
        });
        Ok(())
    };
    for l in recomputed {
        // Credits and adjustments are not recomputed from facts.
        if matches!(l.term, Term::Credit | Term::Adjustment) {
            continue;
        }
        seen.insert(l.line_id.as_str());
        push(l, l.amount)?;
    }
    for l in closed {
        if !matches!(l.term, Term::Credit | Term::Adjustment) && !seen.contains(l.line_id.as_str()) {
            push(l, zero)?;
        }
    }
    Ok(out)
}
