//! The read model's summaries: a month's utilization, inference and training figures as the pages show them,
//! computed over the whole organization once per month figures (a close, a snapshot) by the refresh worker, stored
//! as rows that carry their department, and read under the department scope. A page never computes them.

use std::time::Instant;

use gpuledger_api::ledger::Summaries;
use gpuledger_core::{Period, ids::OrgId};
use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

use super::store;
use crate::{
    db::{Database, OrgTx},
    error::AppError,
};

/// The advisory-lock class of a summary computation (one per organization at a time, across replicas).
const LOCK_CLASS: i32 = 0x4753; // "GS"

/// The kinds of summary, in the order the pages show them.
pub const KINDS: [&str; 3] = ["utilization", "inference", "training"];

/// One row to store: its section, its department (`None`: organization-wide readers only) and its JSON.
type Row = (&'static str, Option<Uuid>, Value);

/// Computes and stores `org`'s summaries of `period` for the figures stored now. Returns `false` when another
/// process is computing this organization's summaries, or the month has no figures.
pub async fn compute(db: &Database, org: OrgId, period: Period) -> Result<bool, AppError> {
    let _turn = crate::limits::month_work().await?;
    let mut tx = db.begin_org(org).await?;
    // The computations read a whole month of telemetry: the export's statement limit.
    tx.allow_long_statements().await?;
    if !store::try_lock(&mut tx, LOCK_CLASS, super::worker::lock_key(org).1).await? {
        return Ok(false);
    }
    let Some(as_of) = store::figures_as_of(&mut tx, period.first_day()).await? else { return Ok(false) };

    let mut kinds: Vec<(&str, u64, Value, Vec<Row>)> = Vec::new();
    let started = Instant::now();
    let (head, tenants) = crate::analytics::utilization_summary(&mut tx, period).await?;
    kinds.push((
        "utilization",
        elapsed_ms(started),
        to_json(&head)?,
        tenants.into_iter().map(|(d, v)| Ok(("tenants", d, to_json(&v)?))).collect::<Result<_, AppError>>()?,
    ));

    let started = Instant::now();
    let mut answer = to_json(&crate::analytics::inference_summary(db.begin_org(org).await?, period).await?)?;
    let mut rows: Vec<Row> = Vec::new();
    if let Some(Value::Array(tenants)) = answer.get_mut("tenants").map(Value::take) {
        for t in tenants {
            let department = t.get("department_id").and_then(Value::as_str).and_then(|d| Uuid::parse_str(d).ok());
            rows.push(("tenants", department, t));
        }
    }
    if let Some(Value::Array(endpoints)) = answer.get_mut("endpoints").map(Value::take) {
        rows.extend(endpoints.into_iter().map(|e| ("endpoints", None, e)));
    }
    if let Some(unattributed) = answer.get_mut("unattributed").map(Value::take).filter(|u| !u.is_null()) {
        rows.push(("unattributed", None, unattributed));
    }
    if let Some(head) = answer.as_object_mut() {
        head.retain(|k, _| !["tenants", "endpoints", "unattributed"].contains(&k.as_str()));
    }
    kinds.push(("inference", elapsed_ms(started), answer, rows));

    let started = Instant::now();
    let (_, workloads) = crate::training::workloads(db.begin_org(org).await?, period, &None).await?;
    let head = json!({"period": period.to_string(), "basis": crate::training::TRAINING_BASIS});
    kinds.push((
        "training",
        elapsed_ms(started),
        head,
        workloads.into_iter().map(|(d, v)| Ok(("workloads", d, to_json(&v)?))).collect::<Result<_, AppError>>()?,
    ));

    store_summaries(&mut tx, period, as_of, &kinds).await?;
    tx.commit_quiet().await?;
    Ok(true)
}

/// A typed answer as the JSON the summary tables store.
fn to_json<T: serde::Serialize>(v: &T) -> Result<Value, AppError> {
    serde_json::to_value(v).map_err(|e| AppError::Internal(format!("summary to JSON: {e}")))
}

/// A stored summary (its head, rows and times put together) as its answer type.
fn parsed<T: serde::de::DeserializeOwned>(kind: &str, v: Value) -> Result<T, AppError> {
    serde_json::from_value(v).map_err(|e| AppError::Internal(format!("stored {kind} summary: {e}")))
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Replaces the stored summaries of `period` with `kinds` (each: kind, milliseconds taken, head, rows).
async fn store_summaries(
    tx: &mut OrgTx,
    period: Period,
    as_of: OffsetDateTime,
    kinds: &[(&str, u64, Value, Vec<Row>)],
) -> Result<(), AppError> {
    let start = period.first_day();
    store::delete_summaries(tx, start).await?;
    for (kind, ms, head, rows) in kinds {
        store::insert_summary(tx, start, kind, as_of, i32::try_from(*ms).unwrap_or(i32::MAX), head).await?;
        for (c, chunk) in rows.chunks(5_000).enumerate() {
            let mut no = Vec::with_capacity(chunk.len());
            let (mut section, mut department, mut body) = (Vec::new(), Vec::new(), Vec::new());
            for (i, (s, d, b)) in chunk.iter().enumerate() {
                no.push(i32::try_from(c * 5_000 + i + 1).map_err(|_| AppError::Internal("too many rows".into()))?);
                section.push(*s);
                department.push(*d);
                body.push(b);
            }
            store::insert_summary_rows(tx, start, kind, &no, &section, &department, &body).await?;
        }
    }
    Ok(())
}

/// The stored summaries of `period` as the caller of `tx` may see them (the department scope cuts the rows), as
/// one answer: per kind its answer-wide fields, its rows by section, and when it was computed; `null` for a kind
/// not computed yet (the page says so).
pub async fn read(tx: &mut OrgTx, period: Period) -> Result<Summaries, AppError> {
    let start = period.first_day();
    let heads = store::summary_heads(tx, start).await?;
    let rows = store::summary_rows(tx, start).await?;
    let figures = store::figures_as_of(tx, start).await?;
    let mut answer =
        Summaries { period: period.to_string(), pending: false, utilization: None, inference: None, training: None };
    let mut pending = false;
    for kind in KINDS {
        let Some(store::SummaryHead { as_of, computed_at, head, .. }) = heads.iter().find(|h| h.kind == kind) else {
            pending = true;
            continue;
        };
        pending |= figures.is_some_and(|f| f != *as_of);
        let mut v = head.as_object().cloned().unwrap_or_default();
        let sections: &[&str] = match kind {
            "utilization" => &["tenants"],
            "inference" => &["tenants", "endpoints"],
            _ => &["workloads"],
        };
        for section in sections {
            let list: Vec<Value> =
                rows.iter().filter(|r| r.0 == kind && r.1 == *section).map(|r| r.2.clone()).collect();
            v.insert((*section).into(), Value::Array(list));
        }
        if kind == "inference" {
            // The organization's own row: absent for a caller limited to departments (the scope hides it).
            let unattributed = rows.iter().find(|r| r.0 == kind && r.1 == "unattributed").map(|r| r.2.clone());
            v.insert("unattributed".into(), unattributed.unwrap_or(Value::Null));
        }
        v.insert("as_of".into(), json!(gpuledger_core::time_fmt::rfc3339(*as_of)));
        v.insert("computed_at".into(), json!(gpuledger_core::time_fmt::rfc3339(*computed_at)));
        let v = Value::Object(v);
        match kind {
            "utilization" => answer.utilization = Some(parsed(kind, v)?),
            "inference" => answer.inference = Some(parsed(kind, v)?),
            _ => answer.training = Some(parsed(kind, v)?),
        }
    }
    // Summaries that do not go with the month's current figures yet: the worker is on it.
    answer.pending = pending;
    Ok(answer)
}
