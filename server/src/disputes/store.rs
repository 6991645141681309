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
const SUMMARY_SELECT: &str = "
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

/// The state of period `day` (`None`: the period has no row yet).
pub(super) async fn period_state(tx: &mut OrgTx, day: Date) -> Result<Option<String>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT state FROM periods WHERE period = $1 AND org_id = $2")
        .bind(day)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// (line id, currency, department) of those of `line_ids` in the ledger of period `day`, by line id.
pub(super) async fn ledger_lines(
    tx: &mut OrgTx,
    day: Date,
    line_ids: &[String],
) -> Result<Vec<(String, String, Uuid)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT line_id, currency::text, department_id FROM ledger_lines
          WHERE period = $1 AND line_id = ANY ($2) AND org_id = $3
          ORDER BY line_id",
    )
    .bind(day)
    .bind(line_ids)
    .bind(org)
    .fetch_all(tx.conn())
    .await?)
}

/// Waits for the organization's dispute-opening lock (held until the transaction ends).
pub(super) async fn lock_openings(tx: &mut OrgTx) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('gpuledger.disputes:' || $1::text, 0))")
        .bind(org)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// The first dispute that still holds one of `line_ids` of period `day` (open, or accepted with a credit not
/// rejected): (number, state, credit state, the line).
pub(super) async fn dispute_holding_lines(
    tx: &mut OrgTx,
    day: Date,
    line_ids: &[String],
) -> Result<Option<(i32, String, Option<String>, String)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT d.number, d.state, a.state, u.line_id
           FROM disputes d
           LEFT JOIN adjustments a ON a.org_id = d.org_id AND a.adjustment_id = d.adjustment_id
          CROSS JOIN LATERAL unnest(d.line_ids) AS u (line_id)
          WHERE d.org_id = $3 AND d.period = $1 AND u.line_id = ANY ($2)
            AND (d.state = 'open' OR (d.state = 'accepted' AND a.state IS DISTINCT FROM 'rejected'))
          ORDER BY d.number
          LIMIT 1",
    )
    .bind(day)
    .bind(line_ids)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// Takes the organization's next dispute number.
pub(super) async fn next_number(tx: &mut OrgTx) -> Result<i32, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "INSERT INTO dispute_numbers (org_id, last_number) VALUES ($1, 1)
         ON CONFLICT (org_id) DO UPDATE SET last_number = dispute_numbers.last_number + 1
         RETURNING last_number",
    )
    .bind(org)
    .fetch_one(tx.conn())
    .await?)
}

/// A new dispute's stored columns.
pub(super) struct NewDispute<'a> {
    /// Its id.
    pub id: Uuid,
    /// Its number.
    pub number: i32,
    /// The period's first day.
    pub period: Date,
    /// The disputed lines.
    pub line_ids: &'a [String],
    /// Why.
    pub reason: &'a str,
    /// Who opened it.
    pub opened_by: &'a str,
    /// The lines' department.
    pub department: Uuid,
}

/// Inserts an open dispute.
pub(super) async fn insert_dispute(tx: &mut OrgTx, d: &NewDispute<'_>) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO disputes (org_id, dispute_id, number, period, line_ids, reason, opened_by, department_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(org)
    .bind(d.id)
    .bind(d.number)
    .bind(d.period)
    .bind(d.line_ids)
    .bind(d.reason)
    .bind(d.opened_by)
    .bind(d.department)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The number of disputes in `state` (any when `None`) of `period` (any when `None`).
pub(super) async fn count_disputes(tx: &mut OrgTx, state: Option<&str>, period: Option<Date>) -> Result<i64, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(&format!("SELECT count(*) FROM disputes d WHERE d.org_id = $1 {LIST_FILTER}"))
        .bind(org)
        .bind(state)
        .bind(period)
        .fetch_one(tx.conn())
        .await?)
}

/// The filter of a list of disputes: `$2` the state, `$3` the period.
const LIST_FILTER: &str = "AND ($2::text IS NULL OR d.state = $2) AND ($3::date IS NULL OR d.period = $3)";

/// One page of disputes in `state` of `period` (any when `None`), newest first.
pub(super) async fn dispute_page(
    tx: &mut OrgTx,
    state: Option<&str>,
    period: Option<Date>,
    per_page: i64,
    offset: i64,
) -> Result<Vec<SummaryRow>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(&format!(
        "{SUMMARY_SELECT} {LIST_FILTER} ORDER BY d.opened_at DESC, d.number DESC LIMIT $4 OFFSET $5"
    ))
    .bind(org)
    .bind(state)
    .bind(period)
    .bind(per_page)
    .bind(offset)
    .fetch_all(tx.conn())
    .await?)
}

/// The total of `line_ids` in the ledger of period `day`, as text (`None`: no such lines).
pub(super) async fn lines_total(tx: &mut OrgTx, day: Date, line_ids: &[String]) -> Result<Option<String>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "SELECT sum(amount)::text FROM ledger_lines WHERE period = $1 AND line_id = ANY ($2) AND org_id = $3",
    )
    .bind(day)
    .bind(line_ids)
    .bind(org)
    .fetch_one(tx.conn())
    .await?)
}

/// (tenant, department, GPU class, currency) of ledger line `line_id` of period `day`.
pub(super) async fn line_owner(
    tx: &mut OrgTx,
    day: Date,
    line_id: &str,
) -> Result<Option<(Option<Uuid>, Uuid, String, String)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT tenant_id, department_id, gpu_class, currency::text FROM ledger_lines
          WHERE period = $1 AND line_id = $2 AND org_id = $3",
    )
    .bind(day)
    .bind(line_id)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// A credit adjustment pending approval, as an accepted dispute creates it.
pub(super) struct NewCredit<'a> {
    /// The adjustment's id.
    pub adjustment: Uuid,
    /// The disputed line's tenant.
    pub tenant: Option<Uuid>,
    /// Its department.
    pub department: Uuid,
    /// Its GPU class.
    pub gpu_class: &'a str,
    /// The credit (positive; stored negated).
    pub amount: &'a str,
    /// Its currency.
    pub currency: &'a str,
    /// The line it corrects.
    pub corrects: &'a str,
    /// The dispute.
    pub dispute: Uuid,
    /// Why.
    pub reason: &'a str,
    /// Who accepted.
    pub created_by: &'a str,
}

/// Inserts the credit adjustment of an accepted dispute.
pub(super) async fn insert_credit(tx: &mut OrgTx, c: &NewCredit<'_>) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO adjustments (org_id, adjustment_id, kind, state, tenant_id, department_id, gpu_class, amount,
                                  currency, corrects, dispute_id, reason, created_by)
         VALUES ($1, $2, 'credit', 'pending_approval', $3, $4, $5, -($6::numeric), $7, $8, $9, $10, $11)",
    )
    .bind(org)
    .bind(c.adjustment)
    .bind(c.tenant)
    .bind(c.department)
    .bind(c.gpu_class)
    .bind(c.amount)
    .bind(c.currency)
    .bind(c.corrects)
    .bind(c.dispute)
    .bind(c.reason)
    .bind(c.created_by)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Marks dispute `id` accepted by `who` with a credit of `credit` (adjustment `adjustment`).
pub(super) async fn mark_accepted(
    tx: &mut OrgTx,
    id: Uuid,
    who: &str,
    resolution: &str,
    credit: &str,
    adjustment: Uuid,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE disputes SET state = 'accepted', resolved_by = $2, resolved_at = now(), resolution = $3,
                credit_amount = $4::numeric, adjustment_id = $5
          WHERE dispute_id = $1 AND org_id = $6",
    )
    .bind(id)
    .bind(who)
    .bind(resolution)
    .bind(credit)
    .bind(adjustment)
    .bind(org)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Marks dispute `id` rejected by `who`.
pub(super) async fn mark_rejected(tx: &mut OrgTx, id: Uuid, who: &str, resolution: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE disputes SET state = 'rejected', resolved_by = $2, resolved_at = now(), resolution = $3
          WHERE dispute_id = $1 AND org_id = $4",
    )
    .bind(id)
    .bind(who)
    .bind(resolution)
    .bind(org)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// (state, amount, created by) of credit adjustment `adjustment`, locked for the decision.
pub(super) async fn lock_credit(tx: &mut OrgTx, adjustment: Uuid) -> Result<Option<(String, String, String)>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT state, amount::text, created_by FROM adjustments WHERE adjustment_id = $1 AND org_id = $2 FOR UPDATE",
    )
    .bind(adjustment)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// Marks credit adjustment `adjustment` approved by `who`.
pub(super) async fn mark_credit_approved(tx: &mut OrgTx, adjustment: Uuid, who: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE adjustments SET state = 'approved', approved_by = $2, approved_at = now()
                  WHERE adjustment_id = $1 AND org_id = $3",
    )
    .bind(adjustment)
    .bind(who)
    .bind(org)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Marks credit adjustment `adjustment` rejected.
pub(super) async fn mark_credit_rejected(tx: &mut OrgTx, adjustment: Uuid) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query("UPDATE adjustments SET state = 'rejected' WHERE adjustment_id = $1 AND org_id = $2")
        .bind(adjustment)
        .bind(org)
        .execute(tx.conn())
        .await?;
    Ok(())
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
