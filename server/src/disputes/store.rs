//! Disputes in the database: reading one with its lines, events and credit, finding and locking one by ID or
//! number, recording each step in its history and the audit log, and answering with the stored state.

use serde_json::{Value, json};
use time::Date;
use uuid::Uuid;

use super::views::{CreditRow, EventRow, LineRow, SummaryRow};
use crate::{
    db::{DbError, OrgTx},
    error::AppError,
};
use gpuledger_api::disputes::DisputeDetail;

/// Binds the organization as `$1`; a caller appends `AND …` conditions (from `$2`) and the rest of the statement.
pub(super) const SUMMARY_SELECT: &str = "
    SELECT d.dispute_id AS id, d.number, to_char(d.period, 'YYYY-MM') AS period, d.line_ids, d.state, d.reason,
           d.opened_by, d.opened_at, d.resolved_by, d.resolved_at, d.resolution,
           d.credit_amount::text AS credit_amount, d.adjustment_id, a.state AS credit_state,
           s.amount AS disputed_amount, s.currency
      FROM disputes d
      LEFT JOIN adjustments a ON a.org_id = d.org_id AND a.adjustment_id = d.adjustment_id
     CROSS JOIN LATERAL (
           SELECT sum(l.amount)::text AS amount, min(l.currency)::text AS currency
             FROM ledger_lines l
            WHERE l.org_id = d.org_id AND l.org_id = $1 AND l.period = d.period AND l.line_id = ANY (d.line_ids)) s
     WHERE d.org_id = $1";

/// Reads one dispute with its lines, events and credit (`None`: not visible in this organization).
pub async fn load(tx: &mut OrgTx, id: Uuid) -> Result<Option<DisputeDetail>, DbError> {
    let org = tx.org().as_uuid();
    let dispute: Option<SummaryRow> = sqlx::query_as(&format!("{SUMMARY_SELECT} AND d.dispute_id = $2"))
        .bind(org)
        .bind(id)
        .fetch_optional(tx.conn())
        .await?;
    let Some(dispute) = dispute else {
        return Ok(None);
    };
    let lines: Vec<LineRow> = sqlx::query_as(
        "SELECT l.line_id, l.line_no, l.department_id, l.department, l.tenant_id, l.tenant, l.term, l.gpu_class,
                l.quantity::text AS quantity, l.unit, l.rate::text AS rate, l.amount::text AS amount,
                l.currency::text AS currency, l.confidence, l.explanation
           FROM disputes d
          CROSS JOIN LATERAL unnest(d.line_ids) WITH ORDINALITY AS u (line_id, ord)
           JOIN ledger_lines l ON l.org_id = d.org_id AND l.period = d.period AND l.line_id = u.line_id
          WHERE d.dispute_id = $1 AND d.org_id = $2
          ORDER BY u.ord",
    )
    .bind(id)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let events: Vec<EventRow> = sqlx::query_as(
        "SELECT event_id AS id, at, actor, action, body, details FROM dispute_events
          WHERE dispute_id = $1 AND org_id = $2 ORDER BY at, event_id",
    )
    .bind(id)
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let credit: Option<CreditRow> = match dispute.adjustment_id {
        None => None,
        Some(adjustment) => {
            sqlx::query_as(
                "SELECT adjustment_id AS id, state, amount::text AS amount, currency::text AS currency, tenant_id,
                        department_id, gpu_class, corrects, reason, created_at, created_by, approved_at, approved_by,
                        to_char(applied_period, 'YYYY-MM') AS applied_period
                   FROM adjustments WHERE adjustment_id = $1 AND org_id = $2",
            )
            .bind(adjustment)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?
        }
    };
    Ok(Some(DisputeDetail {
        dispute: dispute.into(),
        lines: lines.into_iter().map(Into::into).collect(),
        events: events.into_iter().map(Into::into).collect(),
        credit: credit.map(Into::into),
    }))
}

// ---------------------------------------------------------------- history

/// Appends a step to the dispute's history and to the audit log, in the caller's transaction.
pub(super) async fn record(
    tx: &mut OrgTx,
    actor: &str,
    dispute: &Locked,
    action: &str,
    body: &str,
    details: Value,
) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    // The event carries its dispute's department: what department managers see it under.
    let department: Option<Uuid> =
        sqlx::query_scalar("SELECT department_id FROM disputes WHERE org_id = $1 AND dispute_id = $2")
            .bind(org)
            .bind(dispute.id)
            .fetch_one(tx.conn())
            .await?;
    sqlx::query(
        "INSERT INTO dispute_events (org_id, event_id, dispute_id, actor, action, body, details, department_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(org)
    .bind(Uuid::new_v4())
    .bind(dispute.id)
    .bind(actor)
    .bind(action)
    .bind(body)
    .bind(&details)
    .bind(department)
    .execute(tx.conn())
    .await?;
    // Opening and resolving are notified to subscribed webhooks, in this transaction.
    let event = match action {
        "opened" => Some("dispute.opened"),
        "accepted" | "rejected" => Some("dispute.resolved"),
        _ => None,
    };
    if let Some(event) = event {
        let period = time::Date::format(dispute.period, &time::macros::format_description!("[year]-[month]"))
            .unwrap_or_default();
        crate::notify::enqueue(
            tx,
            event,
            &format!("dispute/{}/{action}", dispute.id),
            &format!("Dispute #{} on {period} was {action} by {actor}: {body}", dispute.number),
            json!({ "dispute_id": dispute.id, "number": dispute.number, "period": period, "action": action,
                    "by": actor, "reason": body, "line_ids": dispute.line_ids, "details": details }),
            time::OffsetDateTime::now_utc(),
        )
        .await?;
    }
    let mut audit_details = json!({ "number": dispute.number, "event": action });
    if let (Some(all), Value::Object(extra)) = (audit_details.as_object_mut(), details) {
        all.extend(extra);
    }
    tx.audit(actor, &format!("dispute.{action}"), &format!("dispute:{}", dispute.id), body, audit_details).await
}

/// The columns of a dispute a transition needs, read under a row lock.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct Locked {
    pub(super) id: Uuid,
    pub(super) number: i32,
    pub(super) period: Date,
    pub(super) line_ids: Vec<String>,
    pub(super) state: String,
    pub(super) adjustment_id: Option<Uuid>,
}

/// Finds a dispute by its ID or its number (`/disputes/7`) and locks it for the rest of the transaction.
pub(super) async fn lock(tx: &mut OrgTx, key: &str) -> Result<Locked, AppError> {
    let not_found = || AppError::NotFound(format!("no dispute {key:?}"));
    let org = tx.org().as_uuid();
    let row: Option<Locked> = if let Ok(id) = Uuid::try_parse(key) {
        sqlx::query_as(
            "SELECT dispute_id AS id, number, period, line_ids, state, adjustment_id FROM disputes
              WHERE dispute_id = $1 AND org_id = $2 FOR UPDATE",
        )
        .bind(id)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?
    } else if let Some(number) = parse_number(key) {
        sqlx::query_as(
            "SELECT dispute_id AS id, number, period, line_ids, state, adjustment_id FROM disputes
              WHERE number = $1 AND org_id = $2 FOR UPDATE",
        )
        .bind(number)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?
    } else {
        None
    };
    row.ok_or_else(not_found)
}

pub(super) fn parse_number(key: &str) -> Option<i32> {
    let digits = key.strip_prefix('#').unwrap_or(key);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n >= 1)
}

pub(super) async fn resolve_id(tx: &mut OrgTx, key: &str) -> Result<Uuid, AppError> {
    let org = tx.org().as_uuid();
    let id: Option<Uuid> = if let Ok(id) = Uuid::try_parse(key) {
        Some(id)
    } else if let Some(number) = parse_number(key) {
        sqlx::query_scalar("SELECT dispute_id FROM disputes WHERE number = $1 AND org_id = $2")
            .bind(number)
            .bind(org)
            .fetch_optional(tx.conn())
            .await?
    } else {
        None
    };
    id.ok_or_else(|| AppError::NotFound(format!("no dispute {key:?}")))
}

pub(super) fn require_open(dispute: &Locked, what: &str) -> Result<(), AppError> {
    if dispute.state == "open" {
        return Ok(());
    }
    Err(AppError::Conflict(format!(
        "dispute #{} is {}, not open: only an open dispute can be {what}",
        dispute.number, dispute.state
    )))
}

/// Commits `tx` and answers the dispute as it now stands.
pub(super) async fn finish(mut tx: OrgTx, id: Uuid) -> Result<DisputeDetail, AppError> {
    let detail = load(&mut tx, id).await?.ok_or_else(|| AppError::Internal(format!("dispute {id} vanished")))?;
    tx.commit().await?;
    Ok(detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_ids_or_numbers() {
        assert_eq!(parse_number("7"), Some(7));
        assert_eq!(parse_number("#12"), Some(12));
        assert_eq!(parse_number("0"), None);
        assert_eq!(parse_number("{id}"), None);
        assert_eq!(parse_number("-1"), None);
        assert_eq!(parse_number("99999999999"), None);
    }
}
