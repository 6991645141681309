//! Month-end close: `open → closing → closed`, the close hash chain, adjustments for late facts and approved
//! credits, and the evidence bundle (`/api/v1/periods/YYYY-MM/bundle`, format in docs/bundle.md).
//!
//! The lock is the period row itself: one conditional `INSERT … ON CONFLICT DO UPDATE … WHERE state = 'open'` moves
//! it to `closing`, which only one transaction in the whole deployment can win; the winner computes and writes the
//! lines, then moves it to `closed`. A `closing` row older than [`STALE_CLOSING`] (a replica died mid-close) may be
//! taken over.

use std::io::{Read, Write};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use flate2::{Compression, read::GzDecoder, write::GzEncoder};
use gpuledger_api::close::{Finding, Findings, PeriodEntry, PeriodRecord, Periods};
use gpuledger_core::{
    Period,
    bundle::{BUNDLE_FORMAT, Bundle, close_hash},
    ledger::{AdjustmentRecord, Ledger, LedgerInput, compute, late_adjustments, total},
};
use serde_json::json;
use time::{Date, OffsetDateTime};
use uuid::Uuid;

use crate::{
    app::AppState,
    db::{Database, OrgTx},
    error::AppError,
    http::{Caller, Close, ReadLedger},
    ledger::{approved_credits, inventory, load_input},
    policy::{parse_period, policy_for},
};

/// A `closing` state older than this is considered abandoned.
pub const STALE_CLOSING: time::Duration = time::Duration::minutes(15);

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/periods", get(list_periods))
        .route("/api/v1/periods/{period}/close", post(close_handler))
        .route("/api/v1/periods/{period}/bundle", get(bundle_handler))
        .route("/api/v1/periods/{period}/findings", get(findings_handler))
}

/// `GET /api/v1/periods/{period}/findings`: what ingest flagged for the month (inventory gaps, agent gaps,
/// over-commit, unknown tenants) — counts by kind and the first 200, newest first. Organization-level facts: not
/// for a caller limited to departments.
async fn findings_handler(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Path(period): Path<String>,
) -> Result<Json<Findings>, AppError> {
    let period = parse_period("period", &period)?;
    if p.departments.is_some() {
        return Err(AppError::Forbidden("data-quality findings cover the whole organization".into()));
    }
    let from = period.first_day();
    let to = (period.next()?).first_day();
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    let counts: Vec<(String, i64)> = sqlx::query_as(
        "SELECT kind, count(*) FROM data_quality_findings
          WHERE org_id = $3
            AND COALESCE(occurred_from, created_at) < ($2::date::timestamp AT TIME ZONE 'UTC')
            AND COALESCE(occurred_to, occurred_from, created_at) >= ($1::date::timestamp AT TIME ZONE 'UTC')
          GROUP BY kind ORDER BY kind",
    )
    .bind(from)
    .bind(to)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let items: Vec<(sqlx::types::Json<Finding>,)> = sqlx::query_as(
        "SELECT jsonb_build_object('cluster', c.name, 'kind', f.kind, 'subject', f.subject,
                'from', f.occurred_from, 'to', f.occurred_to, 'details', f.details)
           FROM data_quality_findings f JOIN clusters c ON c.org_id = f.org_id AND c.cluster_id = f.cluster_id
          WHERE f.org_id = $3
            AND COALESCE(f.occurred_from, f.created_at) < ($2::date::timestamp AT TIME ZONE 'UTC')
            AND COALESCE(f.occurred_to, f.occurred_from, f.created_at) >= ($1::date::timestamp AT TIME ZONE 'UTC')
          ORDER BY COALESCE(f.occurred_from, f.created_at) DESC, f.finding_id LIMIT 200",
    )
    .bind(from)
    .bind(to)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    tx.commit().await?;
    Ok(Json(Findings {
        period: period.to_string(),
        by_kind: counts.into_iter().collect(),
        items: items.into_iter().map(|(v,)| v.0).collect(),
    }))
}

fn gz(bytes: &[u8]) -> Result<Vec<u8>, AppError> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(bytes).map_err(|e| AppError::Internal(e.to_string()))?;
    e.finish().map_err(|e| AppError::Internal(e.to_string()))
}

fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, AppError> {
    let mut out = Vec::new();
    GzDecoder::new(bytes).read_to_end(&mut out).map_err(|e| AppError::Internal(format!("stored bundle: {e}")))?;
    Ok(out)
}

/// The stored bundle of a closed period, as JSON bytes.
pub async fn stored_bundle_json(tx: &mut OrgTx, period: Period) -> Result<Option<Vec<u8>>, AppError> {
    let org = tx.org().as_uuid();
    let gz: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT bundle_gz FROM periods WHERE period = $1 AND state = 'closed' AND org_id = $2")
            .bind(period.first_day())
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    gz.map(|g| gunzip(&g)).transpose()
}

/// The stored bundle of a closed period.
pub async fn stored_bundle(tx: &mut OrgTx, period: Period) -> Result<Option<Bundle>, AppError> {
    let Some(json) = stored_bundle_json(tx, period).await? else { return Ok(None) };
    serde_json::from_slice(&json).map(Some).map_err(|e| AppError::Internal(format!("stored bundle of {period}: {e}")))
}

/// An open period's ledger as it would close now.
pub struct Preview {
    /// Its inputs (adjustments included).
    pub input: LedgerInput,
    /// Its lines.
    pub ledger: Ledger,
    /// Approved credits it includes (adjustment IDs).
    pub credits: Vec<Uuid>,
    /// Late-data adjustments it includes, with the closed period each corrects.
    pub late: Vec<(Period, AdjustmentRecord)>,
}

/// Late-data adjustments for every closed period before `period` whose facts changed after it closed.
async fn late_data(tx: &mut OrgTx, period: Period) -> Result<Vec<(Period, AdjustmentRecord)>, AppError> {
    let org = tx.org().as_uuid();
    let closed: Vec<(Date, OffsetDateTime)> = sqlx::query_as(
        "SELECT p.period, p.closed_at FROM periods p
          WHERE p.org_id = $2 AND p.state = 'closed' AND p.period < $1
            AND EXISTS (SELECT 1 FROM allocation_intervals a
                         WHERE a.org_id = $2 AND a.updated_at > p.closed_at
                           AND a.started_at < p.period + interval '1 month'
                           AND (a.ended_at IS NULL OR a.ended_at > p.period))
          ORDER BY p.period",
    )
    .bind(period.first_day())
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let mut out = Vec::new();
    for (d, _) in closed {
        let q = Period::from_date(d)?;
        let Some(bundle) = stored_bundle(tx, q).await? else { continue };
        // Recompute the closed month with its own policy and today's facts.
        let mut input = load_input(tx, q, bundle.inputs.policy.clone()).await?;
        input.adjustments.clear();
        let recomputed = compute(&input)?.lines;
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

/// How many ledger computations this process ran ([`preview`]): the read model's tests check that reads do not.
pub static COMPUTATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Computes an open period's ledger with the approved policy, approved credits and late-data adjustments.
pub async fn preview(tx: &mut OrgTx, period: Period) -> Result<Preview, AppError> {
    COMPUTATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let policy = policy_for(tx, period).await?.ok_or_else(|| {
        AppError::Conflict(format!(
            "no approved cost policy covers {period}: approve one effective from {period} or earlier"
        ))
    })?;
    let mut input = load_input(tx, period, policy).await?;
    let credits = approved_credits(tx).await?;
    let late = late_data(tx, period).await?;
    input.adjustments.extend(credits.iter().map(|(_, a)| a.clone()));
    input.adjustments.extend(late.iter().map(|(_, a)| a.clone()));
    let ledger = compute(&input)?;
    Ok(Preview { input, ledger, credits: credits.into_iter().map(|(id, _)| id).collect(), late })
}

/// What a close produced (the contract's answer of the close).
pub use gpuledger_api::close::CloseSummary;

/// Closes a period. Exactly one of several concurrent callers (on any replica) wins; the others get a conflict.
pub async fn close_period(
    db: &Database,
    org: gpuledger_core::ids::OrgId,
    slug: &str,
    period: Period,
    actor: &str,
    now: OffsetDateTime,
) -> Result<CloseSummary, AppError> {
    let (_, end) = crate::ledger::bounds(period)?;
    if end > now {
        return Err(AppError::Conflict(format!("{period} has not ended yet; it can be closed from {end}")));
    }
    let start = period.first_day();
    // Step 1: take the lock (open → closing) in its own committed transaction, so others see it.
    let mut tx = db.begin_org(org).await?;
    let later: Option<Date> =
        sqlx::query_scalar("SELECT max(period) FROM periods WHERE state = 'closed' AND period > $1 AND org_id = $2")
            .bind(start)
            .bind(org.as_uuid())
            .fetch_one(tx.conn())
            .await?;
    if let Some(l) = later {
        return Err(AppError::Conflict(format!(
            "{} is already closed; {period} can no longer be closed",
            Period::from_date(l)?
        )));
    }
    let won: Option<String> = sqlx::query_scalar(
        "INSERT INTO periods (org_id, period, state, closing_by, closing_since) VALUES ($1, $2, 'closing', $3, now())
         ON CONFLICT (org_id, period) DO UPDATE SET state = 'closing', closing_by = $3, closing_since = now()
          WHERE periods.state = 'open' OR (periods.state = 'closing' AND periods.closing_since < now() - $4::interval)
         RETURNING state",
    )
    .bind(org.as_uuid())
    .bind(start)
    .bind(actor)
    .bind(format!("{} seconds", STALE_CLOSING.whole_seconds()))
    .fetch_optional(tx.conn())
    .await?;
    if won.is_none() {
        let (st, by): (String, Option<String>) =
            sqlx::query_as("SELECT state, closing_by FROM periods WHERE period = $1 AND org_id = $2")
                .bind(start)
                .bind(org.as_uuid())
                .fetch_one(tx.conn())
                .await?;
        tx.rollback().await?;
        return Err(AppError::Conflict(match st.as_str() {
            "closed" => format!("{period} is already closed"),
            _ => format!("{period} is being closed by {} right now", by.unwrap_or_default()),
        }));
    }
    tx.commit().await?;
    // Step 2: compute and freeze. On failure the period goes back to open.
    match freeze(db, org, slug, period, actor, now).await {
        Ok(s) => Ok(s),
        Err(e) => {
            if let Ok(mut tx) = db.begin_org(org).await {
                let _ = sqlx::query(
                    "UPDATE periods SET state = 'open', closing_by = NULL, closing_since = NULL
                      WHERE period = $1 AND state = 'closing' AND org_id = $2",
                )
                .bind(start)
                .bind(org.as_uuid())
                .execute(tx.conn())
                .await;
                let _ = tx.commit().await;
            }
            Err(e)
        }
    }
}

#[allow(clippy::type_complexity)] // column vectors for one UNNEST insert
async fn freeze(
    db: &Database,
    org: gpuledger_core::ids::OrgId,
    slug: &str,
    period: Period,
    actor: &str,
    now: OffsetDateTime,
) -> Result<CloseSummary, AppError> {
    let start = period.first_day();
    let mut tx = db.begin_org(org).await?;
    let preview = preview(&mut tx, period).await?;
    let previous_hash: Option<String> = sqlx::query_scalar(
        "SELECT content_hash FROM periods WHERE state = 'closed' AND period < $1 AND org_id = $2
          ORDER BY period DESC LIMIT 1",
    )
    .bind(start)
    .bind(org.as_uuid())
    .fetch_optional(tx.conn())
    .await?;
    let lines = &preview.ledger.lines;
    let policy_version = preview.input.policy.version;
    let inventory_version = preview.input.inventory_version.clone();
    let hash = close_hash(period, policy_version, &inventory_version, previous_hash.as_deref(), lines);
    let (inventory_doc, _) = inventory(&mut tx).await?;
    let closed_at = gpuledger_core::time_fmt::rfc3339(now);
    let bundle = Bundle {
        format: BUNDLE_FORMAT.to_string(),
        organization: slug.to_string(),
        period,
        closed_at,
        closed_by: actor.to_string(),
        policy_version,
        inventory_version: inventory_version.clone(),
        previous_hash: previous_hash.clone(),
        hash: hash.clone(),
        lines: lines.clone(),
        inputs: preview.input.clone(),
        inventory: inventory_doc,
    };
    let json = serde_json::to_vec_pretty(&bundle).map_err(|e| AppError::Internal(e.to_string()))?;
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
    sqlx::query(
        "INSERT INTO ledger_lines (org_id, period, line_no, line_id, department_id, department, tenant_id, tenant, term,
                                   gpu_class, quantity, unit, rate, amount, currency, confidence, policy_version,
                                   evidence, corrects, explanation, canonical)
         SELECT $1, $2, u.line_no, u.line_id, u.department_id, u.department, u.tenant_id, u.tenant, u.term, u.gpu_class,
                u.quantity::numeric, u.unit, u.rate::numeric, u.amount::numeric, $3, u.confidence, $4, u.evidence,
                u.corrects, u.explanation, u.canonical
           FROM UNNEST($5::int[], $6::text[], $7::uuid[], $8::text[], $9::uuid[], $10::text[], $11::text[], $12::text[],
                       $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[],
                       $20::text[], $21::text[])
                AS u(line_no, line_id, department_id, department, tenant_id, tenant, term, gpu_class, quantity, unit,
                     rate, amount, confidence, evidence, corrects, explanation, canonical)",
    )
    .bind(org.as_uuid())
    .bind(start)
    .bind(&currency)
    .bind(i32::try_from(policy_version).unwrap_or(i32::MAX))
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .bind(&cols.4)
    .bind(&cols.5)
    .bind(&cols.6)
    .bind(&cols2.0)
    .bind(&cols2.1)
    .bind(&cols2.2)
    .bind(&cols2.3)
    .bind(&cols2.4)
    .bind(&cols2.5)
    .bind(&cols2.6)
    .bind(&cols3.0)
    .bind(&cols3.1)
    .bind(&cols3.2)
    .execute(tx.conn())
    .await?;
    // The month's figures for every later read (pages, REST, exports): final, in the close's own transaction, taken
    // in turn with the read model's refreshes of this organization (so a snapshot computed meanwhile cannot race it).
    let (class, key) = crate::readmodel::worker::lock_key(org);
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2)").bind(class).bind(key).execute(tx.conn()).await?;
    crate::readmodel::store(
        &mut tx,
        &crate::readmodel::Figures {
            period,
            state: crate::readmodel::FigState::Closed,
            as_of: now,
            compute_ms: 0,
            policy_version,
            currency: &currency,
            hash: Some(&hash),
            lines,
            notes: serde_json::to_value(&preview.ledger.notes).unwrap_or_default(),
        },
    )
    .await?;
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
    sqlx::query(
        "UPDATE periods SET state = 'closed', closed_at = $2, closed_by = $3, policy_version = $4, inventory_version = $5,
                previous_hash = $6, content_hash = $7, line_count = $8, total_amount = $9::numeric, currency = $10,
                bundle_gz = $11
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
    .bind(gz(&json)?)
    .bind(org.as_uuid())
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
    tx.commit().await?;
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

/// The organization's slug (for the bundle).
pub async fn org_slug(tx: &mut OrgTx) -> Result<String, AppError> {
    let slug: Option<String> = sqlx::query_scalar("SELECT slug FROM organizations WHERE org_id = $1")
        .bind(tx.org().as_uuid())
        .fetch_optional(tx.conn())
        .await?;
    Ok(slug.unwrap_or_default())
}

async fn close_handler(
    State(state): State<AppState>,
    p: Caller<Close>,
    Path(period): Path<String>,
) -> Result<Json<CloseSummary>, AppError> {
    let period = parse_period("period", &period)?;
    let mut tx = state.db.begin_org(p.org).await?;
    let slug = org_slug(&mut tx).await?;
    tx.commit().await?;
    let summary = close_period(&state.db, p.org, &slug, period, &p.actor(), OffsetDateTime::now_utc()).await?;
    Ok(Json(summary))
}

async fn bundle_handler(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Path(period): Path<String>,
) -> Result<Response, AppError> {
    let period = parse_period("period", &period)?;
    if p.departments.is_some() {
        return Err(AppError::Forbidden(
            "the evidence bundle covers the whole organization; a caller limited to departments cannot take it".into(),
        ));
    }
    let mut tx = p.begin(&state.db).await?;
    let json = stored_bundle_json(&mut tx, period).await?;
    let slug = org_slug(&mut tx).await?;
    tx.commit().await?;
    let json = json.ok_or_else(|| {
        AppError::NotFound(format!("{period} is not closed: only a closed period has an evidence bundle"))
    })?;
    let mut response = (StatusCode::OK, json).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"gpuledger-{slug}-{period}.bundle.json\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}

#[allow(clippy::type_complexity)]
async fn list_periods(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<Periods>, AppError> {
    // Organization totals are not shown to a caller limited to departments.
    let scoped = p.departments.is_some();
    let mut tx = p.begin(&state.db).await?;
    let org = tx.org().as_uuid();
    type Row = (
        Date,
        String,
        Option<OffsetDateTime>,
        Option<String>,
        Option<i32>,
        Option<String>,
        Option<i32>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT period, state, closed_at, closed_by, policy_version, content_hash, line_count, total_amount::text,
                currency::text, previous_hash
           FROM periods WHERE org_id = $1 ORDER BY period DESC",
    )
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let first: Option<Date> = sqlx::query_scalar(
        "SELECT LEAST((SELECT min(effective_from) FROM cost_policies WHERE state <> 'draft' AND org_id = $1),
                      (SELECT date_trunc('month', min(started_at))::date FROM allocation_intervals WHERE org_id = $1))",
    )
    .bind(org)
    .fetch_one(tx.conn())
    .await?;
    tx.commit().await?;
    let current = Period::containing(OffsetDateTime::now_utc());
    let mut known: std::collections::BTreeMap<Period, PeriodEntry> = std::collections::BTreeMap::new();
    for r in rows {
        let period = Period::from_date(r.0)?;
        let record = PeriodRecord {
            closed_at: r.2.map(gpuledger_core::time_fmt::rfc3339),
            closed_by: r.3,
            policy_version: r.4,
            hash: r.5,
            lines: if scoped { None } else { r.6 },
            total: if scoped { None } else { r.7 },
            currency: r.8,
            previous_hash: r.9,
            bundle: (r.1 == "closed").then(|| format!("/api/v1/periods/{period}/bundle")),
        };
        known.insert(period, PeriodEntry { period: period.to_string(), state: r.1, record: Some(record) });
    }
    if let Some(f) = first {
        let mut m = Period::from_date(f)?;
        while m <= current {
            // A month nothing was recorded of: its period and state only.
            known.entry(m).or_insert_with(|| PeriodEntry { period: m.to_string(), state: "open".into(), record: None });
            m = m.next()?;
        }
    }
    let items: Vec<PeriodEntry> = known.into_values().rev().collect();
    Ok(Json(Periods { total: items.len(), items }))
}
