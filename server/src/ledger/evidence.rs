//! `GET /api/v1/periods/{period}/evidence`: the allocation records behind a month's lines, a page at a time.
//!
//! A closed month is read from its evidence index (`evidence_allocations`, migration 27), written by the close in
//! its own transaction — or, for a month closed before the index existed, built once from the month's bundle by the
//! first request that asks (in a transaction of its own). An open month's records are read from the store and
//! sorted here. Both give the same answer: the index stores each record's position in every order this module
//! sorts by ([`SortKey::cmp`]; the close's cursor ranks the same orders in SQL, `store::parts::AllocationParts`), and the totals come from the same
//! predicate ([`EvidenceFilter`]).

use std::{cmp::Ordering, collections::BTreeMap};

use axum::{Json, extract::State};
use gpuledger_api::{
    close::{Evidence, EvidenceAllocation},
    params::{EvidenceParams, PeriodPath},
};
use gpuledger_core::{Period, ledger::AllocationRecord};
use time::OffsetDateTime;
use uuid::Uuid;

use super::store::{self, IndexHead};
use crate::{
    auth::Visible,
    db::Database,
    error::AppError,
    http::{Caller, Params, PathParams, ReadLedger},
    state::AppState,
};

/// An order the endpoint sorts by (ascending; descending is its exact reverse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortKey {
    /// Start, then ID.
    Start,
    /// End (an open end first), then ID.
    End,
    /// Fraction (exact), then ID.
    Fraction,
    /// ID.
    Id,
}

impl SortKey {
    /// Every order, in the index's column order.
    pub(crate) const ALL: [SortKey; 4] = [SortKey::Start, SortKey::End, SortKey::Fraction, SortKey::Id];

    fn parse(name: &str) -> Option<SortKey> {
        match name {
            "start" => Some(SortKey::Start),
            "end" => Some(SortKey::End),
            "fraction" => Some(SortKey::Fraction),
            "id" => Some(SortKey::Id),
            _ => None,
        }
    }

    /// The order itself. Equal records keep their bundle order (callers sort stably), which is what makes the
    /// stored ranks a permutation.
    pub(crate) fn cmp(self, a: &AllocationRecord, b: &AllocationRecord) -> Ordering {
        match self {
            SortKey::Start => a.start.cmp(&b.start).then_with(|| a.id.cmp(&b.id)),
            SortKey::End => a.end.cmp(&b.end).then_with(|| a.id.cmp(&b.id)),
            SortKey::Fraction => a.fraction.cmp(&b.fraction).then_with(|| a.id.cmp(&b.id)),
            SortKey::Id => a.id.cmp(&b.id),
        }
    }

    /// The index column holding each record's position in this order.
    /// Its number in `evidence_orders` (`None` for `start`, the index's own key).
    pub(crate) fn order_no(self) -> Option<i16> {
        match self {
            SortKey::Start => None,
            SortKey::End => Some(1),
            SortKey::Fraction => Some(2),
            SortKey::Id => Some(3),
        }
    }

    pub(crate) fn column(self) -> &'static str {
        match self {
            SortKey::Start => "start_rank",
            SortKey::End => "end_rank",
            SortKey::Fraction => "fraction_rank",
            SortKey::Id => "id_rank",
        }
    }
}

/// Each record's 1-based position in `key`'s order over all of `records` (a stable sort: ties keep the order of
/// `records`). `None` when there are more records than an `integer` column holds.
pub(crate) fn ranks(records: &[AllocationRecord], key: SortKey) -> Option<Vec<i32>> {
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by(|&i, &j| key.cmp(&records[i], &records[j]));
    let mut ranks = vec![0i32; records.len()];
    for (position, i) in order.into_iter().enumerate() {
        ranks[i] = i32::try_from(position + 1).ok()?;
    }
    Some(ranks)
}

/// A group of records sharing what the endpoint filters on: (tenant, GPU class, endpoint).
pub(crate) type GroupKey = (Option<Uuid>, Option<String>, Option<String>);

/// How many records each (tenant, GPU class, endpoint) group has, stored with the index so a total is a sum over
/// a few thousand groups rather than a count over a million rows.
pub(crate) fn groups(records: &[AllocationRecord]) -> BTreeMap<GroupKey, u64> {
    let mut out: BTreeMap<GroupKey, u64> = BTreeMap::new();
    for a in records {
        *out.entry((a.tenant.map(|t| t.as_uuid()), a.gpu_class.clone(), a.endpoint.clone())).or_default() += 1;
    }
    out
}

/// Which records a request wants, and which the caller may see.
#[derive(Debug, Clone, Default)]
pub(crate) struct EvidenceFilter {
    /// Only this tenant's.
    pub tenant: Option<Uuid>,
    /// Only this GPU class's.
    pub gpu_class: Option<String>,
    /// Only this endpoint's.
    pub endpoint: Option<String>,
    /// The tenants a caller limited to departments may see (`None`: the whole organization); a record with no
    /// tenant is not visible to such a caller ([`Visible::tenant`]).
    pub visible: Option<Visible>,
}

impl EvidenceFilter {
    /// Whether a record with these attributes is wanted and visible.
    pub(crate) fn matches(&self, tenant: Option<Uuid>, gpu_class: Option<&str>, endpoint: Option<&str>) -> bool {
        Visible::tenant(&self.visible, tenant)
            && self.tenant.is_none_or(|t| tenant == Some(t))
            && self.gpu_class.as_deref().is_none_or(|c| gpu_class == Some(c))
            && self.endpoint.as_deref().is_none_or(|e| endpoint == Some(e))
    }

    /// Whether it keeps every record (no filter, the whole organization): pages are then ranges of ranks.
    pub(crate) fn is_everything(&self) -> bool {
        self.visible.is_none() && self.tenant.is_none() && self.gpu_class.is_none() && self.endpoint.is_none()
    }
}

/// The sort as the answer names it (`-start`).
fn sort_name(key: &str, descending: bool) -> String {
    if descending { format!("-{key}") } else { key.to_string() }
}

/// The allocation records behind a line: from the evidence index for a closed period, from the store for an open
/// one.
pub(super) async fn evidence(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    PathParams(path): PathParams<PeriodPath>,
    Params(q): Params<EvidenceParams>,
) -> Result<axum::response::Response, AppError> {
    let (answer, closed) = read_evidence(&state, &p, path, q).await?;
    let answer = Json(answer);
    // A closed month's records never change: its answer may be kept (`crate::pagecache`). An open month's are
    // read live from the facts, which change without a new read-model generation: never kept.
    Ok(if closed {
        axum::response::IntoResponse::into_response(answer)
    } else {
        axum::response::IntoResponse::into_response((
            [(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("private, no-store"))],
            answer,
        ))
    })
}

/// A page of the month's allocation records (`GET /api/v1/periods/{period}/evidence`), and whether the month is
/// closed (its records then never change).
pub(crate) async fn read_evidence(
    state: &AppState,
    p: &crate::auth::Principal,
    path: PeriodPath,
    q: EvidenceParams,
) -> Result<(Evidence, bool), AppError> {
    let period = path.period.period();
    // Bounded by the contract: 1..=1000 records per page, pages from 1.
    let per_page = q.per_page.map_or(100, |n| usize::try_from(n.get()).unwrap_or(100));
    let page = q.page.map_or(1, |n| usize::try_from(n.get()).unwrap_or(1));
    let visible = p.visible(&state.db).await?;
    let tenant = q.tenant.map(|t| t.uuid());
    let (name, descending) = q.sort.map_or(("start", false), |s| s.key());
    let key = SortKey::parse(name).ok_or_else(|| AppError::Internal(format!("sort key {name} has no order")))?;
    let filter = EvidenceFilter {
        tenant,
        gpu_class: q.gpu_class.as_ref().map(ToString::to_string),
        endpoint: q.endpoint.as_ref().map(ToString::to_string),
        visible,
    };
    let offset = (page - 1).saturating_mul(per_page);

    // One transaction for the usual read (a closed, indexed month): its state, the index's head, the page and its
    // details.
    let mut tx = state.db.begin_org(p.org).await?;
    let closed = crate::store::period_state(&mut tx, period).await? == gpuledger_api::states::PeriodState::Closed;
    let mut head = if closed { store::evidence_head(&mut tx, period).await? } else { None };
    if closed && head.is_none() {
        // Closed before the index existed: built once from the bundle, then read like any other closed month. In a
        // task of its own, so a build that outlasts this request's timeout (a million records) still completes and
        // the next reader finds it rather than starting over.
        tx.commit_quiet().await?;
        let (db, org) = (state.db.clone(), p.org);
        tokio::spawn(async move { build_from_bundle(&db, org, period).await })
            .await
            .map_err(|e| AppError::Internal(format!("building the evidence index: {e}")))??;
        tx = state.db.begin_org(p.org).await?;
        head = store::evidence_head(&mut tx, period).await?;
    }
    let (total, rows) = match head {
        Some(head) => from_index(&mut tx, period, &head, &filter, key, descending, offset, per_page).await?,
        None => {
            // An open month (or a closed one the index could not hold exactly): the records, sorted here.
            tx.allow_long_statements().await?;
            let records = match crate::store::stored_bundle(&mut tx, period).await? {
                Some(b) => b.inputs.allocations,
                None => store::load_allocations(&mut tx, period).await?,
            };
            in_memory(&records, &filter, key, descending, offset, per_page)
        }
    };
    let ids: Vec<&str> = rows.iter().map(|a| a.id.as_str()).collect();
    let details = store::evidence_details(&mut tx, &ids).await?;
    tx.commit_quiet().await?;
    let allocations = rows
        .into_iter()
        .map(|mut a| {
            a.detail = details.get(&a.id).cloned();
            a
        })
        .collect();
    let answer =
        Evidence { period: period.to_string(), total, page, per_page, sort: sort_name(name, descending), allocations };
    Ok((answer, closed))
}

/// A page from the index, with the number of records the filter keeps.
#[allow(clippy::too_many_arguments)]
async fn from_index(
    tx: &mut crate::db::OrgTx,
    period: Period,
    head: &IndexHead,
    filter: &EvidenceFilter,
    key: SortKey,
    descending: bool,
    offset: usize,
    per_page: usize,
) -> Result<(usize, Vec<EvidenceAllocation>), AppError> {
    let total: u64 = head
        .groups
        .iter()
        .filter(|((t, c, e), _)| filter.matches(*t, c.as_deref(), e.as_deref()))
        .map(|(_, n)| *n)
        .sum();
    let total = usize::try_from(total).map_err(|_| AppError::Internal("evidence count overflows".into()))?;
    if offset >= total {
        return Ok((total, Vec::new()));
    }
    let request = store::PageRequest {
        filter,
        key,
        descending,
        month_records: head.allocations,
        offset: i64::try_from(offset).unwrap_or(i64::MAX),
        limit: i64::try_from(per_page).unwrap_or(i64::MAX),
    };
    Ok((total, store::evidence_page(tx, period, &request).await?))
}

/// A page of records held in memory, filtered and sorted as the index would.
fn in_memory(
    records: &[AllocationRecord],
    filter: &EvidenceFilter,
    key: SortKey,
    descending: bool,
    offset: usize,
    per_page: usize,
) -> (usize, Vec<EvidenceAllocation>) {
    let mut rows: Vec<&AllocationRecord> = records
        .iter()
        .filter(|a| filter.matches(a.tenant.map(|t| t.as_uuid()), a.gpu_class.as_deref(), a.endpoint.as_deref()))
        .collect();
    rows.sort_by(|a, b| key.cmp(a, b));
    if descending {
        rows.reverse();
    }
    let page = rows.iter().skip(offset).take(per_page).map(|a| answer(a)).collect();
    (rows.len(), page)
}

/// A record as the endpoint shows it (details added by the caller).
pub(crate) fn answer(a: &AllocationRecord) -> EvidenceAllocation {
    let rfc3339 = |t: OffsetDateTime| gpuledger_core::time_fmt::rfc3339(t);
    EvidenceAllocation {
        id: a.id.clone(),
        tenant: a.tenant.map(|t| t.to_string()),
        gpu_class: a.gpu_class.clone(),
        fraction: String::from(a.fraction),
        start: rfc3339(a.start),
        end: a.end.map(rfc3339),
        confidence: a.confidence.into(),
        devices: a.devices.clone(),
        endpoint: a.endpoint.clone(),
        detail: None,
    }
}

/// Builds a closed month's evidence index from its stored bundle, once: concurrent first readers wait for the one
/// that builds it (an advisory lock per organization and month) and then find it. Returns whether the month has an
/// index now (`false`: not closed, or its records cannot be stored exactly — then reads decode the bundle).
pub async fn build_from_bundle(
    db: &Database,
    org: gpuledger_core::ids::OrgId,
    period: Period,
) -> Result<bool, AppError> {
    // A month's bundle decoded: month-sized work, in turn with the close and the read model's.
    let _turn = crate::limits::month_work().await?;
    let mut tx = db.begin_org(org).await?;
    tx.allow_long_statements().await?;
    store::lock_evidence_build(&mut tx, period).await?;
    if store::evidence_head(&mut tx, period).await?.is_some() {
        tx.commit_quiet().await?;
        return Ok(true);
    }
    let Some(bundle) = crate::store::stored_bundle(&mut tx, period).await? else {
        tx.commit_quiet().await?;
        return Ok(false);
    };
    let started = std::time::Instant::now();
    let written = store::write_evidence_index(&mut tx, period, &bundle.inputs.allocations, "bundle").await?;
    // The index changes no figure: the open months need no refresh for it.
    tx.commit_quiet().await?;
    tracing::info!(
        org = %org, period = %period, records = bundle.inputs.allocations.len(), written,
        ms = started.elapsed().as_millis() as u64, "evidence index built from the bundle"
    );
    Ok(written)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use gpuledger_core::{Confidence, Fraction, ids::TenantId};
    use time::macros::datetime;

    use super::*;

    fn record(id: &str, start: OffsetDateTime, end: Option<OffsetDateTime>, f: (i128, i128)) -> AllocationRecord {
        AllocationRecord {
            id: id.into(),
            tenant: Some(TenantId::from_uuid(Uuid::from_u128(1))),
            gpu_class: Some("H100".into()),
            fraction: Fraction::new(f.0, f.1).unwrap(),
            start,
            end,
            confidence: Confidence::Exact,
            devices: vec![],
            endpoint: None,
            share_basis: None,
        }
    }

    #[test]
    fn ranks_are_the_stable_sort_and_descending_is_its_reverse() {
        let t = datetime!(2026-10-01 00:00 UTC);
        // Two records equal in every key (the same ID twice) keep their order.
        let records = vec![
            record("b", t, None, (1, 2)),
            record("a", t, Some(t + time::Duration::hours(1)), (3, 7)),
            record("b", t, None, (1, 2)),
            record("c", t - time::Duration::hours(1), Some(t), (1, 1)),
        ];
        for key in SortKey::ALL {
            let r = ranks(&records, key).unwrap();
            let mut sorted: Vec<usize> = (0..records.len()).collect();
            sorted.sort_by(|&i, &j| key.cmp(&records[i], &records[j]));
            let by_rank: Vec<usize> = {
                let mut v: Vec<usize> = (0..records.len()).collect();
                v.sort_by_key(|&i| r[i]);
                v
            };
            assert_eq!(by_rank, sorted, "{key:?}");
            let mut seen = r.clone();
            seen.sort_unstable();
            assert_eq!(seen, vec![1, 2, 3, 4], "a permutation: {key:?}");
        }
        assert_eq!(ranks(&records, SortKey::End).unwrap(), vec![1, 4, 2, 3], "open ends first, in their order");
        assert_eq!(ranks(&records, SortKey::Fraction).unwrap(), vec![2, 1, 3, 4], "3/7 < 1/2 < 1");
    }

    #[test]
    fn groups_count_what_the_filters_select() {
        let t = datetime!(2026-10-01 00:00 UTC);
        let mut records = vec![record("a", t, None, (1, 1)), record("b", t, None, (1, 1))];
        records[1].tenant = None;
        records[1].endpoint = Some("chat".into());
        let g = groups(&records);
        let f = EvidenceFilter { endpoint: Some("chat".into()), ..Default::default() };
        let n: u64 = g.iter().filter(|((t, c, e), _)| f.matches(*t, c.as_deref(), e.as_deref())).map(|(_, n)| n).sum();
        assert_eq!(n, 1);
        let scoped = EvidenceFilter { visible: Some(Visible::default()), ..Default::default() };
        assert!(!scoped.matches(None, None, None), "no tenant: not visible to a department's reader");
        assert!(EvidenceFilter::default().is_everything() && !scoped.is_everything());
    }
}
