//! SQL of this feature: reads and writes inside the caller's organization-scoped transaction.

mod energy;
mod evidence;
mod gz;
pub(crate) mod periods;
mod preview;
mod stored;

pub(crate) use preview::{PartsPreview, preview_in_parts};
pub use stored::{BUNDLE_CHUNK_BYTES, set_bundle_chunk_bytes};
use stored::{by_id, finish_bundle, store_bundle};

use super::Preview;
use crate::store::stored_as;
pub use crate::store::stored_bundle;
use crate::{
    db::{Database, OrgTx},
    error::AppError,
    ledger::inventory,
};
pub use gpuledger_api::close::CloseSummary;
use gpuledger_core::{
    Period,
    bundle::{BUNDLE_FORMAT, BundleStream, BundleTail, close_hash},
    ledger::{AdjustmentRecord, LedgerParts, late_adjustments, total},
};
use serde_json::json;
use time::{Date, OffsetDateTime};
use uuid::Uuid;

/// A closed period's bundle, its lines and policy only (the month's inputs are skipped as they are read, not held:
/// at 10,000 GPUs they are a million allocation records).
#[derive(serde::Deserialize)]
struct StoredLines {
    lines: Vec<gpuledger_core::ledger::LedgerLine>,
    inputs: StoredPolicy,
}

#[derive(serde::Deserialize)]
struct StoredPolicy {
    policy: gpuledger_core::policy::CostPolicy,
}

/// Late-data adjustments for every closed period before `period` whose facts (or cloud bill) changed after it
/// closed.
pub(crate) async fn late_data(tx: &mut OrgTx, period: Period) -> Result<Vec<(Period, AdjustmentRecord)>, AppError> {
    let org = tx.org().as_uuid();
    let closed: Vec<(Date, OffsetDateTime)> = sqlx::query_as(
        "SELECT p.period, p.closed_at FROM periods p
          WHERE p.org_id = $2 AND p.state = 'closed' AND p.period < $1
            AND (EXISTS (SELECT 1 FROM allocation_intervals a
                          WHERE a.org_id = $2 AND a.updated_at > p.closed_at
                            AND a.started_at < p.period + interval '1 month'
                            AND (a.ended_at IS NULL OR a.ended_at > p.period))
                 -- The month's cloud bill came after its close (actual-cost classes are repriced).
                 OR EXISTS (SELECT 1 FROM cost_imports c
                             WHERE c.org_id = $2 AND c.period = p.period AND c.imported_at > p.closed_at))
          ORDER BY p.period",
    )
    .bind(period.first_day())
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let mut out = Vec::new();
    for (d, _) in closed {
        let q = Period::from_date(d)?;
        let Some(bundle) = stored_as::<StoredLines>(tx, q).await? else { continue };
        // Recompute the closed month with its own policy and today's facts, a part at a time (a late fact for a
        // month of a large fleet costs a part's memory, not the month's).
        let mut header = crate::ledger::store::load_header(tx, q, bundle.inputs.policy).await?;
        header.adjustments.clear();
        let recomputed = preview::price_in_parts(tx, q, &header, None).await?.0.lines;
        let prefix = format!("{q}/");
        let already: Vec<AdjustmentRecord> = sqlx::query_as::<_, (String, String, Uuid, Option<Uuid>, String)>(
            "SELECT corrects, amount::text, department_id, tenant_id, gpu_class FROM adjustments
              WHERE kind = 'late_data' AND starts_with(corrects, $1) AND org_id = $2",
        )
        .bind(&prefix)
        .bind(org)
        .fetch_all(tx.conn())
        .await?
        .into_iter()
        .map(|(corrects, amount, d, t, gpu_class)| {
            Ok(AdjustmentRecord {
                id: String::new(),
                kind: gpuledger_core::ledger::AdjustmentKind::LateData,
                tenant: t.map(gpuledger_core::ids::TenantId::from_uuid),
                department: gpuledger_core::ids::DepartmentId::from_uuid(d),
                gpu_class,
                amount: gpuledger_core::decimal::Decimal::parse(&amount)?,
                corrects,
                reason: String::new(),
            })
        })
        .collect::<Result<_, AppError>>()?;
        for adj in late_adjustments(&bundle.lines, &already, &recomputed)? {
            out.push((q, adj));
        }
    }
    Ok(out)
}

#[allow(clippy::type_complexity)] // column vectors for one UNNEST insert
pub(crate) async fn freeze(
    db: &Database,
    org: gpuledger_core::ids::OrgId,
    slug: &str,
    period: Period,
    actor: &str,
    now: OffsetDateTime,
) -> Result<CloseSummary, AppError> {
    let start = period.first_day();
    // Before any lock: whoever holds a turn never waits for one (no cycle with the read model's lock).
    let _turn = crate::limits::month_work().await?;
    let mut tx = db.begin_org(org).await?;
    // Month-sized statements (the month's energy in one pass: ~30 s at 10,000 GPUs on a busy machine): the export's
    // statement limit, as the read model's refresh has.
    tx.allow_long_statements().await?;
    let previous_hash: Option<String> = sqlx::query_scalar(
        "SELECT content_hash FROM periods WHERE state = 'closed' AND period < $1 AND org_id = $2
          ORDER BY period DESC LIMIT 1",
    )
    .bind(start)
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    let (inventory_doc, _) = inventory(&mut tx).await?;
    let closed_at = gpuledger_core::time_fmt::rfc3339(now);
    // The month is read, priced, written into its bundle and indexed a part at a time ([`PART_RECORDS`] allocation
    // records in start order): the memory is the part's, not the month's (docs/scaling.md).
    let closing = in_parts(db, &mut tx, period).await?;
    let header = &closing.header;
    let lines = &closing.ledger.lines;
    let policy_version = header.policy.version;
    let inventory_version = header.inventory_version.clone();
    let hash = close_hash(period, policy_version, &inventory_version, previous_hash.as_deref(), lines);
    let tail = BundleTail {
        format: BUNDLE_FORMAT,
        organization: slug,
        period,
        closed_at: &closed_at,
        closed_by: actor,
        policy_version,
        inventory_version: &inventory_version,
        previous_hash: previous_hash.as_deref(),
        hash: &hash,
        lines,
        inventory: &inventory_doc,
    };
    let (bundle_file, bundle_bytes) = finish_bundle(closing.bundle, &tail)?;
    drop(inventory_doc);
    let bundle_chunks = store_bundle(&mut tx, period, bundle_file, bundle_bytes).await?;
    tracing::info!(period = %period, allocations = closing.records, bundle_bytes, bundle_chunks,
                   rss_mib = crate::health::rss_mib(), peak_mib = crate::health::peak_rss_mib(), "close: lines computed, bundle written");
    let preview =
        Preview { input: closing.header, ledger: closing.ledger, credits: closing.credits, late: closing.late };
    let lines = &preview.ledger.lines;
    let total_amount = total(lines)?;
    let currency = preview.input.policy.currency.clone();

    // Lines, set-based.
    let mut cols: (Vec<i32>, Vec<String>, Vec<Uuid>, Vec<String>, Vec<Option<Uuid>>, Vec<String>, Vec<String>) =
        Default::default();
    let mut cols2: (Vec<String>, Vec<String>, Vec<String>, Vec<String>, Vec<String>, Vec<String>, Vec<String>) =
        Default::default();
    let mut cols3: (Vec<Option<String>>, Vec<String>, Vec<String>) = Default::default();
    for (i, l) in lines.iter().enumerate() {
        cols.0.push(i32::try_from(i + 1).map_err(|_| AppError::Internal("too many lines".into()))?);
        cols.1.push(l.line_id.clone());
        cols.2.push(l.department_id.as_uuid());
        cols.3.push(l.department.clone());
        cols.4.push(l.tenant_id.map(|t| t.as_uuid()));
        cols.5.push(l.tenant.clone());
        cols.6.push(l.term.as_str().to_string());
        cols2.0.push(l.gpu_class.clone());
        cols2.1.push(l.quantity.to_string());
        cols2.2.push(l.unit.clone());
        cols2.3.push(l.rate.to_string());
        cols2.4.push(l.amount.to_string());
        cols2.5.push(l.confidence.as_str().to_string());
        cols2.6.push(l.evidence.clone());
        cols3.0.push(l.corrects.clone());
        cols3.1.push(l.explanation.clone());
        cols3.2.push(l.csv_row());
    }
    {
        use crate::bulk::{col, constant};
        let (o, version) = (org.as_uuid(), i32::try_from(policy_version).unwrap_or(i32::MAX));
        crate::bulk::execute(
            &mut tx,
            &crate::bulk::Insert {
                into:
                    "INSERT INTO ledger_lines (org_id, period, line_no, line_id, department_id, department, tenant_id,
                           tenant, term, gpu_class, quantity, unit, rate, amount, currency, confidence, policy_version,
                           evidence, corrects, explanation, canonical)",
                row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}::numeric, {9}, {10}::numeric, {11}::numeric,
                      $3, {12}, $4, {13}, {14}, {15}, {16}",
                consts: &[
                    constant("uuid", &o),
                    constant("date", &start),
                    constant("text", &currency),
                    constant("int", &version),
                ],
                cols: &[
                    col("int", &cols.0),
                    col("text", &cols.1),
                    col("uuid", &cols.2),
                    col("text", &cols.3),
                    col("uuid", &cols.4),
                    col("text", &cols.5),
                    col("text", &cols.6),
                    col("text", &cols2.0),
                    col("text", &cols2.1),
                    col("text", &cols2.2),
                    col("text", &cols2.3),
                    col("text", &cols2.4),
                    col("text", &cols2.5),
                    col("text", &cols2.6),
                    col("text", &cols3.0),
                    col("text", &cols3.1),
                    col("text", &cols3.2),
                ],
                tail: "",
            },
        )
        .await?;
    }
    // The month's figures for every later read (pages, REST, exports): final, in the close's own transaction, taken
    // in turn with the read model's refreshes of this organization (so a snapshot computed meanwhile cannot race it).
    let (class, key) = crate::figures::lock_key(org);
    tx.wait_for_turn(class, key).await?;
    crate::figures::store(
        &mut tx,
        &crate::figures::Figures {
            period,
            state: crate::figures::FigState::Closed,
            as_of: now,
            compute_ms: 0,
            policy_version,
            currency: &currency,
            hash: Some(&hash),
            lines,
            notes: serde_json::to_value(&preview.ledger.notes).unwrap_or_default(),
            to_date: None,
            idle: None,
        },
    )
    .await?;
    // The evidence behind the lines, indexed for paging (`GET /api/v1/periods/{period}/evidence`): the bundle's
    // own allocation records, finished here or committed right after the close (`evidence`).
    let mut evidence = closing.evidence;
    evidence.before_commit(&mut tx, period).await?;
    // Credits land here; late-data corrections are recorded as applied adjustments pointing at what they correct.
    if !preview.credits.is_empty() {
        sqlx::query(
            "UPDATE adjustments SET state = 'applied', applied_period = $2 WHERE adjustment_id = ANY($1) AND org_id = $3",
        )
        .bind(&preview.credits)
        .bind(start)
        .bind(org.as_uuid())
            .execute(tx.conn())
            .await?;
    }
    for (_, adj) in &preview.late {
        sqlx::query(
            "INSERT INTO adjustments (org_id, adjustment_id, kind, state, tenant_id, department_id, gpu_class, amount,
                                      currency, corrects, reason, created_by, applied_period)
             VALUES ($1, $2, 'late_data', 'applied', $3, $4, $5, $6::numeric, $7, $8, $9, $10, $11)",
        )
        .bind(org.as_uuid())
        .bind(Uuid::new_v4())
        .bind(adj.tenant.map(|t| t.as_uuid()))
        .bind(adj.department.as_uuid())
        .bind(&adj.gpu_class)
        .bind(adj.amount.to_string())
        .bind(&currency)
        .bind(&adj.corrects)
        .bind(&adj.reason)
        .bind(actor)
        .bind(start)
        .execute(tx.conn())
        .await?;
    }
    // The instants the month closed with, as its bundle's input holds them (a UTC month: UTC's).
    let (zone, starts_at, ends_at, continues_from) = match &preview.input.bounds {
        Some(b) => (b.time_zone.clone(), b.starts_at, b.ends_at, b.continues_from),
        None => {
            let (s, e) = crate::ledger::utc_bounds(period)?;
            (crate::calendar::UTC.to_string(), s, e, None)
        }
    };
    sqlx::query(
        "UPDATE periods SET state = 'closed', closed_at = $2, closed_by = $3, policy_version = $4, inventory_version = $5,
                previous_hash = $6, content_hash = $7, line_count = $8, total_amount = $9::numeric, currency = $10,
                bundle_chunks = $11, bundle_bytes = $17, time_zone = $13, starts_at = $14, ends_at = $15,
                continues_from = $16
          WHERE period = $1 AND state = 'closing' AND org_id = $12",
    )
    .bind(start)
    .bind(now)
    .bind(actor)
    .bind(i32::try_from(policy_version).unwrap_or(i32::MAX))
    .bind(&inventory_version)
    .bind(&previous_hash)
    .bind(&hash)
    .bind(i32::try_from(lines.len()).unwrap_or(i32::MAX))
    .bind(total_amount.to_string())
    .bind(&currency)
    .bind(bundle_chunks)
    .bind(org.as_uuid())
    .bind(&zone)
    .bind(starts_at)
    .bind(ends_at)
    .bind(continues_from)
    .bind(i64::try_from(bundle_bytes).unwrap_or(i64::MAX))
    .execute(tx.conn())
    .await?;
    tx.audit(actor,
        "period.close",
        &format!("period:{period}"),
        "",
        json!({"hash": hash, "lines": lines.len(), "total": total_amount.to_string(), "late_adjustments": preview.late.len(),
               "credits": preview.credits.len()}),
    )
    .await?;
    // Subscribed webhooks hear of it exactly when the close is committed.
    crate::notify::enqueue(
        &mut tx,
        "period.closed",
        &format!("period/{period}"),
        &format!("{period} was closed by {actor}: {} lines, {} {currency}", lines.len(), total_amount),
        json!({"period": period.to_string(), "hash": hash, "lines": lines.len(), "total": total_amount.to_string(),
               "currency": currency, "policy_version": policy_version, "closed_by": actor}),
        now,
    )
    .await?;
    tx.commit().await?;
    evidence.after_commit(period).await;
    Ok(CloseSummary {
        period: period.to_string(),
        lines: lines.len(),
        total: total_amount.to_string(),
        currency,
        hash,
        previous_hash,
        policy_version,
        inventory_version,
    })
}

/// Allocation records per part of a close (in start order) unless set otherwise.
pub const PART_RECORDS: usize = 50_000;

static PART_SIZE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(PART_RECORDS);

/// Sets the records per part of the closes this process runs (tests cut small months into many parts with it; the
/// lines do not depend on it).
pub fn set_part_records(records: usize) {
    PART_SIZE.store(records.max(1), std::sync::atomic::Ordering::Relaxed);
}

type BundleWriter = gz::ThreadedGz;

/// A month computed in parts: its header (the input without allocations and energy), lines, the bundle written so
/// far, the staged evidence index.
struct Closing {
    header: gpuledger_core::ledger::LedgerInput,
    ledger: gpuledger_core::ledger::Ledger,
    bundle: BundleStream<BundleWriter>,
    evidence: evidence::EvidenceDone,
    records: usize,
    credits: Vec<Uuid>,
    late: Vec<(Period, AdjustmentRecord)>,
}

fn bundle_error(e: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("writing the bundle: {e}"))
}

/// An open month's header as the close and the refresh price it: the approved policy covering it, the input
/// without allocations and energy, approved credits and late-data adjustments added (returned beside it too).
#[allow(clippy::type_complexity)]
async fn priced_header(
    tx: &mut OrgTx,
    period: Period,
) -> Result<
    (gpuledger_core::ledger::LedgerInput, Vec<(Uuid, AdjustmentRecord)>, Vec<(Period, AdjustmentRecord)>),
    AppError,
> {
    super::COMPUTATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let policy = crate::store::policy_for(tx, period).await?.ok_or_else(|| {
        AppError::Conflict(format!(
            "no approved cost policy covers {period}: approve one effective from {period} or earlier"
        ))
    })?;
    let mut header = crate::ledger::store::load_header(tx, period, policy).await?;
    let credits = crate::ledger::approved_credits(tx).await?;
    let late = late_data(tx, period).await?;
    header.adjustments.extend(credits.iter().map(|(_, a)| a.clone()));
    header.adjustments.extend(late.iter().map(|(_, a)| a.clone()));
    Ok((header, credits, late))
}

/// Where a close's time went (its log line): the cursor's reads, the energy (the month's pass and each part's
/// hours), pricing, the bundle's writing, the evidence index's writing. The first two overlap (the energy is read on
/// another connection while the cursor's first rows are sorted) and the bundle is compressed on its own thread, so
/// they add up to more than the wall time (`ms`).
#[derive(Default)]
struct Took {
    read: std::time::Duration,
    energy: std::time::Duration,
    price: std::time::Duration,
    bundle: std::time::Duration,
    evidence: std::time::Duration,
}

/// `period`'s allocation records in parts of the size this process closes with (`ranked`: with their evidence ranks).
async fn month_parts(
    tx: &mut OrgTx,
    period: Period,
    ranked: bool,
) -> Result<crate::ledger::store::parts::AllocationParts, AppError> {
    crate::ledger::store::parts::AllocationParts::open(
        tx,
        period,
        PART_SIZE.load(std::sync::atomic::Ordering::Relaxed),
        ranked,
    )
    .await
}

/// Reads and prices `period` a part at a time, writing each part into the bundle and the evidence stage.
async fn in_parts(db: &Database, tx: &mut OrgTx, period: Period) -> Result<Closing, AppError> {
    let started = std::time::Instant::now();
    let (header, credits, late) = priced_header(tx, period).await?;
    // Level 6: November at 10,000 GPUs (510 MB of JSON) is 48.3 MB in ~7 s of CPU, against 57.9 MB at level 1
    // (target ≤ 50 MB; level 9 saves 3 MB more for 3× the time).
    let out = gz::ThreadedGz::new(energy::unnamed_file()?).map_err(bundle_error)?;
    let mut bundle = BundleStream::begin(out, &header).map_err(bundle_error)?;
    let (from, to) = crate::ledger::bounds(tx, period).await?;
    let mut took = Took::default();
    let mut records = 0;
    let mut parts = month_parts(tx, period, true).await?;
    // The cursor's first rows wait for the month's sorts in PostgreSQL (~25 s at 10,000 GPUs); meanwhile the month's
    // energy is read on a second connection of the organization, its sort and decoding on the other core. (Its rows
    // are as committed when it starts, a moment after the close's own reads began: the bundle holds the energy the
    // lines were priced with either way.)
    // A pool without a connection to spare (a one-connection pool, all taken): the same, one after the other.
    let second =
        tokio::time::timeout(std::time::Duration::from_secs(2), db.begin_org(tx.org())).await.ok().transpose()?;
    let first_rows = async |tx: &mut OrgTx, parts: &mut crate::ledger::store::parts::AllocationParts| {
        let t = std::time::Instant::now();
        parts.fetch(tx).await?;
        Ok::<_, AppError>(t.elapsed())
    };
    let read_energy = async |etx: &mut OrgTx| {
        let t = std::time::Instant::now();
        let energy = energy::MonthEnergy::read(etx, &header, from, to).await?;
        Ok::<_, AppError>((energy, t.elapsed()))
    };
    let (energy, first, beside) = match second {
        Some(mut etx) => {
            // The close's own statement limit (`freeze`), on this connection too.
            etx.allow_long_statements().await?;
            let (energy, first) = tokio::join!(read_energy(&mut etx), first_rows(tx, &mut parts));
            (energy?, first?, Some(etx))
        }
        None => {
            let first = first_rows(tx, &mut parts).await?;
            (read_energy(tx).await?, first, None)
        }
    };
    // The evidence index is then written on that second connection, beside the close (`evidence`).
    let mut evidence = evidence::EvidenceSink::begin(tx, beside, period).await?;
    let (energy, energy_took) = energy;
    took.energy += energy_took;
    took.read += first;
    let ledger = {
        let mut ledger = LedgerParts::new(&header).map_err(AppError::computing)?;
        loop {
            let t = std::time::Instant::now();
            let Some((part, ranks)) = parts.next_ranked(tx).await? else { break };
            took.read += t.elapsed();
            let t = std::time::Instant::now();
            let part_energy = energy.for_part(&part)?;
            took.energy += t.elapsed();
            let t = std::time::Instant::now();
            ledger.add(&part, &part_energy).map_err(AppError::computing)?;
            took.price += t.elapsed();
            // Into the bundle by ID within the part (the ledger needed them in start order): neighbours then share
            // their cluster, name and devices, and the month's bundle compresses 6–7 % smaller (measured at 10,000
            // GPUs: 53.3 → 49.7 MB with zlib at level 6) — the order of a bundle's allocations means nothing.
            let (part, ranks) = by_id(part, ranks);
            let t = std::time::Instant::now();
            bundle.allocations(&part).map_err(bundle_error)?;
            took.bundle += t.elapsed();
            records += part.len();
            let t = std::time::Instant::now();
            evidence.add(tx, period, part, ranks).await?;
            took.evidence += t.elapsed();
        }
        // The bundle's energy: every device once, as the whole month's input holds it.
        let t = std::time::Instant::now();
        energy.each(|d| bundle.energy(d).map_err(bundle_error))?;
        took.bundle += t.elapsed();
        let t = std::time::Instant::now();
        let ledger = ledger.finish().map_err(AppError::computing)?;
        took.price += t.elapsed();
        ledger
    };
    // The writer beside the close finishing its last parts (time the close waits for it, counted as the index's).
    let t = std::time::Instant::now();
    let evidence = evidence.finish(period).await;
    took.evidence += t.elapsed();
    tracing::info!(period = %period, ms = started.elapsed().as_millis() as u64, read_ms = took.read.as_millis() as u64, energy_ms = took.energy.as_millis() as u64,
                   energy_hours = energy.hours(), price_ms = took.price.as_millis() as u64,
                   bundle_ms = took.bundle.as_millis() as u64, evidence_ms = took.evidence.as_millis() as u64,
                   "close: the month's parts read, priced and written");
    Ok(Closing {
        header,
        ledger,
        bundle,
        evidence,
        records,
        credits: credits.into_iter().map(|(id, _)| id).collect(),
        late,
    })
}

/// The organization's slug (for the bundle).
pub async fn org_slug(tx: &mut OrgTx) -> Result<String, AppError> {
    let slug: Option<String> = sqlx::query_scalar("SELECT slug FROM organizations WHERE org_id = $1")
        .bind(tx.org().as_uuid())
        .fetch_optional(tx.conn())
        .await?;
    Ok(slug.unwrap_or_default())
}

/// What closing `period` needs acknowledged, for people: allocations overlapping the month that the ledger cannot
/// price (no GPU class, or no approved fraction). Empty: nothing.
pub(crate) async fn needs_acknowledgement(tx: &mut OrgTx, period: Period) -> Result<Vec<String>, AppError> {
    let (from, to) = crate::ledger::bounds(tx, period).await?;
    let rows: Vec<(bool, i64)> = sqlx::query_as(
        "SELECT gpu_class IS NULL, count(*) FROM allocation_intervals
          WHERE org_id = $3 AND (gpu_class IS NULL OR fraction_num IS NULL) AND sharing_mode <> 'shared_endpoint'
            AND started_at < $2::timestamptz
            AND (ended_at IS NULL OR ended_at > $1::timestamptz)
          GROUP BY 1 ORDER BY 1 DESC",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?;
    let mut open: Vec<String> = rows
        .into_iter()
        .map(|(no_class, n)| {
            if no_class {
                format!("{n} unpriced allocation(s): their GPU model has no class in the approved inventory")
            } else {
                format!("{n} unpriced allocation(s): no approved fraction (inventory gap)")
            }
        })
        .collect();
    // Data an agent dropped about this month (its spool overflowed) and that did not come back: the month's
    // figures may be short, and closing it says so on the record. A gap whose every fact that counts for money came
    // back (or that lost telemetry windows only) is `recovered` and stays a finding without blocking — unless the
    // month's policy prices energy and `telemetry` windows (which carry the energy) are among what stays lost.
    let findings: Vec<(serde_json::Value,)> = sqlx::query_as(
        "SELECT details FROM data_quality_findings
          WHERE org_id = $3 AND kind = 'agent_gap'
            AND COALESCE(occurred_from, created_at) < $2::timestamptz
            AND COALESCE(occurred_to, occurred_from, created_at) >= $1::timestamptz",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?;
    let policy = crate::store::policy_for(tx, period).await?;
    let energy_priced = policy.as_ref().is_some_and(|p| p.energy.is_some());
    open.extend(GapsToAcknowledge::of(findings.iter().map(|(d,)| d), energy_priced).reasons());
    // Classes priced at actual cost without the month's bill are priced at the policy's fallback rates: closing
    // says so on the record.
    if let Some(missing) = crate::costs::bill_missing(tx, period, policy.as_ref()).await? {
        open.push(missing);
    }
    Ok(open)
}

/// The agent gaps of a month that closing must have acknowledged, for people.
#[derive(Debug, Default, PartialEq, Eq)]
struct GapsToAcknowledge {
    /// Findings not recovered (facts that count for money stay lost, or nobody said they came back).
    unrecovered: usize,
    /// What they lost, `kind: count` (once the agent accounted for the gap, what stays lost).
    lost: std::collections::BTreeSet<String>,
    /// Recovered findings whose lost `telemetry` windows carry energy that the month's policy prices.
    energy: usize,
    /// Those windows.
    windows: u64,
}

impl GapsToAcknowledge {
    fn of<'a>(findings: impl Iterator<Item = &'a serde_json::Value>, energy_priced: bool) -> Self {
        let mut out = Self::default();
        for d in findings {
            // After the agent's account: what stays lost; before it: what was dropped.
            let (listed, key) = match d["recovery"]["kinds"].as_array() {
                Some(ks) => (ks.clone(), "lost"),
                None => (d["kinds"].as_array().cloned().unwrap_or_default(), "count"),
            };
            let counts = listed.iter().filter_map(|k| Some((k["kind"].as_str()?, k[key].as_u64().filter(|n| *n > 0)?)));
            if d["recovered"].as_bool() != Some(true) {
                out.unrecovered += 1;
                out.lost.extend(counts.map(|(kind, n)| format!("{kind}: {n}")));
                continue;
            }
            let windows = counts.filter(|(kind, _)| *kind == "telemetry").fold(0u64, |a, (_, n)| a.saturating_add(n));
            if energy_priced && windows > 0 {
                out.energy += 1;
                out.windows = out.windows.saturating_add(windows);
            }
        }
        out
    }

    fn reasons(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.unrecovered > 0 {
            let n = self.unrecovered;
            out.push(if self.lost.is_empty() {
                format!("{n} agent gap(s): an agent dropped facts while the server was unreachable")
            } else {
                let k = self.lost.iter().cloned().collect::<Vec<_>>().join(", ");
                format!("{n} agent gap(s): an agent dropped facts about this month ({k}) that did not come back")
            });
        }
        if self.energy > 0 {
            out.push(format!(
                "{} agent gap(s): {} telemetry window(s) about this month were lost, and the policy prices energy: \
                 the energy charges may be short",
                self.energy, self.windows
            ));
        }
        out
    }
}

/// Records an acknowledgement given to close `period`.
pub(crate) async fn record_acknowledgement(
    tx: &mut OrgTx,
    period: Period,
    by: &str,
    reason: &str,
    covered: &[String],
) -> Result<(), AppError> {
    sqlx::query(
        "INSERT INTO close_acknowledgements (org_id, period, acknowledged_by, reason, what)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(tx.org().as_uuid())
    .bind(period.first_day())
    .bind(by)
    .bind(reason)
    .bind(json!({ "covered": covered }))
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The acknowledgements given to close `period`, oldest first.
pub(crate) async fn acknowledgements(
    tx: &mut OrgTx,
    period: Period,
) -> Result<Vec<gpuledger_api::close::Acknowledgement>, AppError> {
    let rows: Vec<(String, OffsetDateTime, String, serde_json::Value)> = sqlx::query_as(
        "SELECT acknowledged_by, acknowledged_at, reason, what FROM close_acknowledgements
          WHERE org_id = $1 AND period = $2 ORDER BY acknowledged_at",
    )
    .bind(tx.org().as_uuid())
    .bind(period.first_day())
    .fetch_all(tx.conn())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(by, at, reason, what)| gpuledger_api::close::Acknowledgement {
            by,
            at: gpuledger_core::time_fmt::rfc3339(at),
            reason,
            covered: what["covered"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
        })
        .collect())
}

/// Over-committed devices among the month's soft shares: where shares held on one GPU (HAMi names the devices) or
/// on one node's GPUs (the others) sum above the capacity, a finding rather than a silent overcharge.
pub(crate) async fn soft_overcommit(
    tx: &mut OrgTx,
    period: Period,
    now: OffsetDateTime,
) -> Result<Vec<gpuledger_api::close::Finding>, AppError> {
    use gpuledger_core::{
        Fraction,
        allocation::{Holding, over_capacity},
    };
    let (from, to) = crate::ledger::bounds(tx, period).await?;
    type Row =
        (String, String, Option<String>, Vec<String>, i64, i64, OffsetDateTime, Option<OffsetDateTime>, Option<i32>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT c.name, a.allocation_id, a.node, a.device_ids, a.fraction_num, a.fraction_den, a.started_at, a.ended_at,
                (SELECT n.gpu_count FROM nodes n WHERE n.org_id = a.org_id AND n.cluster_id = a.cluster_id
                    AND n.name = a.node ORDER BY n.valid_from DESC LIMIT 1)
           FROM allocation_intervals a JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
          WHERE a.org_id = $3 AND a.sharing_mode = 'soft_share' AND a.fraction_num IS NOT NULL
            AND a.started_at < $2::timestamptz
            AND (a.ended_at IS NULL OR a.ended_at > $1::timestamptz)
          LIMIT 200000",
    )
    .bind(from)
    .bind(to)
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?;
    let mut holdings = Vec::new();
    for (cluster, id, node, devices, num, den, start, end, gpus) in rows {
        let Ok(total) = Fraction::new(i128::from(num), i128::from(den)) else { continue };
        if !devices.is_empty() {
            let Ok(each) = total.checked_div(Fraction::from_integer(devices.len() as i128).unwrap_or(Fraction::ONE))
            else {
                continue;
            };
            for d in devices {
                holdings.push(Holding {
                    pool: format!("{cluster}/{d}"),
                    capacity: Fraction::ONE,
                    id: id.clone(),
                    start,
                    end,
                    fraction: each,
                });
            }
        } else if let (Some(node), Some(gpus)) = (node, gpus.filter(|g| *g > 0)) {
            holdings.push(Holding {
                pool: format!("{cluster}/node:{node}"),
                capacity: Fraction::from_integer(i128::from(gpus)).unwrap_or(Fraction::ONE),
                id,
                start,
                end,
                fraction: total,
            });
        }
    }
    let until = now.min(to);
    let found = over_capacity(&holdings, until)?;
    Ok(found
        .into_iter()
        .take(200)
        .map(|o| {
            let (cluster, pool) = o.pool.split_once('/').map_or((String::new(), o.pool.clone()), |(c, p)| (c.to_string(), p.to_string()));
            let peak = o.peak.to_decimal_string(3).unwrap_or_else(|_| o.peak.to_string());
            let capacity = o.capacity.to_decimal_string(0).unwrap_or_else(|_| o.capacity.to_string());
            gpuledger_api::close::Finding {
                cluster,
                kind: gpuledger_api::states::FindingKind::Overcommit,
                subject: pool.clone(),
                from: Some(gpuledger_core::time_fmt::rfc3339(o.start)),
                to: Some(gpuledger_core::time_fmt::rfc3339(o.end)),
                details: json!({
                    "reason": format!("soft shares on {pool} summed to {peak} GPU(s) where it has {capacity}"),
                    "peak": peak,
                    "capacity": capacity,
                    "allocations": o.ids,
                }),
                fix: Some(
                    "check the scheduler's limits on that device (HAMi device split, Volcano or gpushare \
                     configuration); each pod is charged its own declared share, so the device is billed above its capacity"
                        .into(),
                ),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::GapsToAcknowledge;
    use serde_json::json;

    #[test]
    fn only_unrecovered_gaps_and_energy_short_months_need_an_acknowledgement() {
        let dropped = json!({"kinds": [{"kind": "allocation_started", "count": 40}, {"kind": "telemetry", "count": 7}],
                             "recovered": false});
        let partly = json!({"kinds": [{"kind": "allocation_started", "count": 40}], "recovered": false,
                            "recovery": {"kinds": [{"kind": "allocation_started", "recovered": 38, "lost": 2}]}});
        let whole = json!({"kinds": [{"kind": "allocation_started", "count": 40}, {"kind": "telemetry", "count": 7}],
                           "recovered": true,
                           "recovery": {"kinds": [{"kind": "allocation_started", "recovered": 40, "lost": 0},
                                                  {"kind": "telemetry", "recovered": 0, "lost": 7}]}});
        let old = json!({"dropped": 5});
        let g = GapsToAcknowledge::of([&dropped, &partly, &old].into_iter(), false);
        assert_eq!(g.unrecovered, 3);
        let reasons = g.reasons();
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        // Before the agent's account the dropped counts, after it what stays lost.
        assert!(reasons[0].contains("3 agent gap(s)") && reasons[0].contains("allocation_started: 40"), "{reasons:?}");
        assert!(reasons[0].contains("allocation_started: 2") && reasons[0].contains("telemetry: 7"), "{reasons:?}");
        // A recovered gap blocks nothing — unless the policy prices energy and telemetry windows stay lost.
        assert!(GapsToAcknowledge::of([&whole].into_iter(), false).reasons().is_empty());
        let reasons = GapsToAcknowledge::of([&whole].into_iter(), true).reasons();
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("7 telemetry window(s)") && reasons[0].contains("energy"), "{reasons:?}");
        let no_windows = json!({"kinds": [{"kind": "allocation_started", "count": 1}], "recovered": true});
        assert!(GapsToAcknowledge::of([&no_windows].into_iter(), true).reasons().is_empty());
    }
}
