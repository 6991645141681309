//! The read model's stored figures (issue 17): what pages and API reads show for a month, stored so that a read
//! is an indexed lookup under row-level security and the department scope, never a computation over raw facts.
//!
//! - A **closed** month's figures are written by the close, in its transaction ([`store`] from `close::freeze`),
//!   and never change.
//! - The **open** months' figures are a provisional snapshot the refresh worker (`readmodel::worker`) writes with
//!   the same `compute` as a close, after a transaction that changed their inputs marked the organization dirty
//!   ([`crate::db::OrgTx::commit`] does that for any transaction that wrote, through `read_dirty`).
//!
//! This is the storage every feature shares (reads, writes, the refresh's lock key, the forecast's sums stored with a
//! snapshot); the worker that computes the open months, and the reads that wait for it, are `readmodel`'s.

use std::collections::BTreeMap;

use gpuledger_core::{
    Period,
    decimal::Decimal,
    ids::OrgId,
    ledger::{Ledger, LedgerInput, LedgerLine},
};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::AppError;

mod store;
pub use store::{answer, failure, head, lines, mark_changed, store, store_answer, stored_idle};

/// Whether a month's stored figures are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FigState {
    /// Written by the close.
    Closed,
    /// The open month's snapshot.
    Provisional,
}

impl FigState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Provisional => "provisional",
        }
    }
}

/// A month's figures to store.
pub struct Figures<'a> {
    /// The month.
    pub period: Period,
    /// Final or provisional.
    pub state: FigState,
    /// When they were computed.
    pub as_of: OffsetDateTime,
    /// How long the computation took.
    pub compute_ms: u64,
    /// The policy that priced them.
    pub policy_version: u32,
    /// The policy's currency.
    pub currency: &'a str,
    /// The close hash (closed months).
    pub hash: Option<&'a str>,
    /// The lines, in order.
    pub lines: &'a [LedgerLine],
    /// The computation's organization-wide notes.
    pub notes: Value,
    /// The open month's charges up to `as_of` per department and tenant (the forecast's `to_date`); `None` for
    /// closed months.
    pub to_date: Option<Value>,
    /// The open month's idle reservations at `as_of` ([`StoredIdle`] as JSON: `GET /api/v1/idle` reads them);
    /// `None` for closed months and earlier open ones.
    pub idle: Option<Value>,
}

/// What is stored about a month.
#[derive(Debug, Clone)]
pub struct MonthHead {
    /// Final or provisional.
    pub state: FigState,
    /// When the figures were computed.
    pub as_of: OffsetDateTime,
    /// The pricing policy.
    pub policy_version: Option<i32>,
    /// The currency (of the month's lines).
    pub currency: Option<String>,
    /// The close hash.
    pub hash: Option<String>,
    /// Lines of the whole organization.
    pub line_count: i32,
    /// Organization-wide notes.
    pub notes: Value,
    /// Whether something changed since `as_of` (the next refresh will include it).
    pub changed_since: Option<OffsetDateTime>,
}

/// The idle reservations stored with an open month's snapshot: the answer of `GET /api/v1/idle` for the whole
/// organization at the snapshot's time, and each item's department (callers limited to departments see theirs).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredIdle {
    /// The answer (its `as_of` is the snapshot's).
    pub list: gpuledger_api::foresight::IdleList,
    /// The department of each item, in order (`None`: no tenant owns it).
    pub departments: Vec<Option<Uuid>>,
}

/// Which lines a read wants.
#[derive(Debug, Clone, Default)]
pub struct LineFilter {
    /// The caller's departments (`None`: the whole organization). PostgreSQL's department scope hides the others
    /// anyway; naming them lets the index on (organization, month, department) find the caller's lines directly.
    pub scope: Option<Vec<Uuid>>,
    /// A tenant's name or id.
    pub tenant: Option<String>,
    /// A department's name or id.
    pub department: Option<String>,
    /// A term.
    pub term: Option<String>,
}

/// A page of a month's stored lines as the caller may see them (the department scope applies in PostgreSQL).
pub struct LinePage {
    /// The lines of the page, in line order.
    pub lines: Vec<gpuledger_api::ledger::LedgerLine>,
    /// Lines matching the filter.
    pub count: i64,
    /// Their total per term.
    pub totals_by_term: BTreeMap<String, String>,
    /// Their total.
    pub total: String,
}

/// A stored analytics answer, or what a new one would be stored under.
pub enum Answer {
    /// Stored for the current figures: serve it.
    Hit(Vec<u8>),
    /// Not stored yet: compute, then [`store_answer`] with this `as_of`.
    Miss(OffsetDateTime),
    /// The month has no figures: compute, do not store.
    NoFigures,
}

/// The advisory-lock key of an organization's refresh: a constant class, and the organization.
pub(crate) const LOCK_CLASS: i32 = 0x4752; // "GR"

/// The two-part advisory-lock key every replica takes to refresh `org` (`pg_advisory_xact_lock(class, key)`).
pub fn lock_key(org: OrgId) -> (i32, i32) {
    (LOCK_CLASS, org.as_uuid().as_u128() as i32)
}

/// A forecast row's key: (department ID, department, tenant (ID, name)).
pub type Key = (Uuid, String, Option<(Uuid, String)>);
/// Key → amount.
pub type Sums = BTreeMap<Key, Decimal>;

/// A ledger's amounts per department and per tenant.
pub fn sums(ledger: &Ledger) -> Result<(Sums, Sums), AppError> {
    let mut departments = Sums::new();
    let mut tenants = Sums::new();
    for l in &ledger.lines {
        let d = (l.department_id.as_uuid(), l.department.clone(), None);
        let v = departments.entry(d).or_insert(Decimal::ZERO);
        *v = v.checked_add(&l.amount).map_err(|e| AppError::Internal(e.to_string()))?;
        if let Some(t) = l.tenant_id {
            let k = (l.department_id.as_uuid(), l.department.clone(), Some((t.as_uuid(), l.tenant.clone())));
            let v = tenants.entry(k).or_insert(Decimal::ZERO);
            *v = v.checked_add(&l.amount).map_err(|e| AppError::Internal(e.to_string()))?;
        }
    }
    Ok((departments, tenants))
}

/// `input` with every allocation and quota cut at `now` (what the month has used so far). Takes the input: a month
/// of a large fleet is not copied for it.
pub fn cut_at(mut input: LedgerInput, now: OffsetDateTime) -> LedgerInput {
    cut_allocations(&mut input.allocations, now);
    input.quotas.retain(|q| q.valid_from < now);
    for q in &mut input.quotas {
        if q.valid_to.is_none_or(|e| e > now) {
            q.valid_to = Some(now);
        }
    }
    input
}

/// `allocations` cut at `now`: those begun before it, ending at it at the latest (a part of a month, as
/// [`cut_at`] cuts a whole one).
pub fn cut_allocations(allocations: &mut Vec<gpuledger_core::ledger::AllocationRecord>, now: OffsetDateTime) {
    allocations.retain(|a| a.start < now);
    for a in allocations {
        if a.end.is_none_or(|e| e > now) {
            a.end = Some(now);
        }
    }
}

/// A ledger's amounts per department and per tenant, as stored with the open month's snapshot.
pub fn sums_json(ledger: &Ledger) -> Result<serde_json::Value, AppError> {
    let (departments, tenants) = sums(ledger)?;
    let departments: serde_json::Map<String, serde_json::Value> =
        departments.iter().map(|(k, v)| (k.0.to_string(), v.to_string().into())).collect();
    let tenants: serde_json::Map<String, serde_json::Value> =
        tenants.iter().filter_map(|(k, v)| k.2.as_ref().map(|(t, _)| (t.to_string(), v.to_string().into()))).collect();
    Ok(serde_json::json!({ "departments": departments, "tenants": tenants }))
}
