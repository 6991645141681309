//! A closed month's showback as balanced double-entry journal lines (`GET /api/v1/exports/journal.csv`), for
//! finance to import into its general ledger (docs/finance.md).
//!
//! Read from the month's stored lines (the read model's `read_lines`, written by the close; the department scope
//! applies in PostgreSQL), never recomputed: one row per department (`by=tenant`: per tenant within its
//! department, department-level lines on the department's own row) and currency, netting its lines — a positive net
//! is a **debit** to the department's cost centre and GL account, a negative one (credits above its charges) a
//! **credit** — and one balancing row per currency to the platform's own account (a credit, or a debit when the
//! departments' net is negative). So debits = credits, and the department rows' net is the month's total as the
//! caller sees it (`GET /api/v1/ledger` `total`). A group whose lines net to exactly zero has no row.
//!
//! Money is never dropped: a department (or the platform) without a cost centre or GL account keeps its row, with
//! the empty cell and a memo that says what is missing, and the answer lists each such gap in the
//! `X-GpuLedger-Findings` header (for scripts; the memo is what a reviewer reading the file sees).

use std::collections::BTreeMap;

use axum::{
    extract::State,
    http::{HeaderName, HeaderValue},
    response::Response,
};
use gpuledger_api::params::{JournalBy, JournalParams};
use gpuledger_core::{Period, decimal::Decimal, ledger::LedgerLine};
use serde_json::json;
use uuid::Uuid;

use super::{
    audit_export,
    cells::{self, Cell},
    csv_response,
    store::{self, Accounts},
};
use crate::http::{Caller, Params, ReadLedger};
use crate::{error::AppError, state::AppState};

/// The journal's columns, in order (a fixed name: importers map them).
pub const COLUMNS: [&str; 10] = [
    "entry_date",
    "account",
    "cost_center",
    "department",
    "tenant",
    "debit",
    "credit",
    "currency",
    "memo",
    "close_hash",
];

/// The response header that lists the journal's findings (accounts missing), `; `-separated.
pub const FINDINGS_HEADER: &str = "x-gpuledger-findings";

/// Findings listed in the header at most (the rest are counted; every one is in its row's memo anyway).
const MAX_LISTED: usize = 20;

/// One row of the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The GL account (empty: not set).
    pub account: Option<String>,
    /// The cost centre (empty: not set).
    pub cost_center: Option<String>,
    /// The department's name as the month closed with it (empty on the platform's row).
    pub department: String,
    /// The tenant's name (`by=tenant`; empty on department-level and platform rows).
    pub tenant: String,
    /// Debit amount, or none.
    pub debit: Option<Decimal>,
    /// Credit amount, or none.
    pub credit: Option<Decimal>,
    /// ISO 4217 currency.
    pub currency: String,
    /// What the row is, and what is missing.
    pub memo: String,
}

/// A journal: its rows and its findings (`department <id> (no gl_account, …)`, `platform (…)`).
#[derive(Debug, Default)]
pub struct Journal {
    /// Rows, departments first (by name, tenant, currency), then the platform's balancing rows (by currency).
    pub rows: Vec<Row>,
    /// One per account gap, as the header lists it.
    pub findings: Vec<String>,
}

/// A group of lines: department name and ID, tenant name (by tenant), currency.
type Key = (String, Uuid, String, String);

/// What is missing of an account pair, as the memo and the header say it.
fn missing(a: &Accounts) -> Vec<&'static str> {
    let mut m = Vec::new();
    if a.gl_account.is_none() {
        m.push("no gl_account");
    }
    if a.cost_center.is_none() {
        m.push("no cost_center");
    }
    m
}

/// A net amount on the side it belongs: (debit, credit).
fn sides(net: Decimal) -> Result<(Option<Decimal>, Option<Decimal>), AppError> {
    if net.is_negative() {
        Ok((None, Some(Decimal::ZERO.checked_sub(&net).map_err(AppError::computing)?)))
    } else {
        Ok((Some(net), None))
    }
}

/// Builds the journal of `lines` (already cut to what the caller may see): `departments` holds the departments'
/// accounts by ID, `platform` the organization's own.
pub fn build(
    period: Period,
    lines: &[LedgerLine],
    by_tenant: bool,
    departments: &BTreeMap<Uuid, Accounts>,
    platform: &Accounts,
) -> Result<Journal, AppError> {
    let mut groups: BTreeMap<Key, Decimal> = BTreeMap::new();
    for l in lines {
        let tenant = if by_tenant { l.tenant.clone() } else { String::new() };
        let key = (l.department.clone(), l.department_id.as_uuid(), tenant, l.currency.clone());
        let sum = groups.entry(key).or_insert(Decimal::ZERO);
        *sum = sum.checked_add(&l.amount).map_err(AppError::computing)?;
    }
    let mut journal = Journal::default();
    let mut per_currency: BTreeMap<String, Decimal> = BTreeMap::new();
    let mut flagged: Vec<Uuid> = Vec::new();
    let none = Accounts::default();
    for ((department, id, tenant, currency), net) in groups {
        if net.scaled_units() == 0 {
            continue;
        }
        let total = per_currency.entry(currency.clone()).or_insert(Decimal::ZERO);
        *total = total.checked_add(&net).map_err(AppError::computing)?;
        let accounts = departments.get(&id).unwrap_or(&none);
        let gaps = missing(accounts);
        let mut memo = format!("GPU showback {period}: {department}");
        if by_tenant {
            memo.push_str(if tenant.is_empty() { " (department-level charges)" } else { " / " });
            memo.push_str(&tenant);
        }
        if !gaps.is_empty() {
            memo.push_str(&format!(
                "; FINDING: the department has {}: set them on the department and export again",
                gaps.join(" and ")
            ));
            if !flagged.contains(&id) {
                flagged.push(id);
                journal.findings.push(format!("department {id} ({})", gaps.join(", ")));
            }
        }
        let (debit, credit) = sides(net)?;
        journal.rows.push(Row {
            account: accounts.gl_account.clone(),
            cost_center: accounts.cost_center.clone(),
            department,
            tenant,
            debit,
            credit,
            currency,
            memo,
        });
    }
    let gaps = missing(platform);
    for (currency, net) in per_currency {
        if net.scaled_units() == 0 {
            continue; // the departments' rows balance each other
        }
        // The balancing row takes the other side of the departments' net.
        let (credit, debit) = sides(net)?;
        let mut memo = format!("GPU showback {period}: recovered by the platform");
        if !gaps.is_empty() {
            memo.push_str(&format!(
                "; FINDING: the platform has {}: set them in the organization settings and export again",
                gaps.join(" and ")
            ));
            if journal.findings.iter().all(|f| !f.starts_with("platform")) {
                journal.findings.push(format!("platform ({})", gaps.join(", ")));
            }
        }
        journal.rows.push(Row {
            account: platform.gl_account.clone(),
            cost_center: platform.cost_center.clone(),
            department: String::new(),
            tenant: String::new(),
            debit,
            credit,
            currency,
            memo,
        });
    }
    Ok(journal)
}

/// The journal as CSV: [`COLUMNS`], RFC 4180, CRLF, text cells that would start a formula neutralized.
pub fn write(period: Period, close_hash: &str, journal: &Journal) -> Vec<u8> {
    let mut out = Vec::with_capacity(200 * (journal.rows.len() + 1));
    cells::csv_header(&mut out, COLUMNS);
    let entry_date = period.last_day().to_string();
    for r in &journal.rows {
        let (debit, credit) = (r.debit.map(|d| d.to_string()), r.credit.map(|d| d.to_string()));
        let row = [
            Cell::text(&entry_date),
            r.account.as_deref().map_or(Cell::Null, Cell::text),
            r.cost_center.as_deref().map_or(Cell::Null, Cell::text),
            Cell::text_or_null(&r.department),
            Cell::text_or_null(&r.tenant),
            debit.as_deref().map_or(Cell::Null, |d| Cell::Num(d.into())),
            credit.as_deref().map_or(Cell::Null, |c| Cell::Num(c.into())),
            Cell::text(&r.currency),
            Cell::text(&r.memo),
            Cell::text(close_hash),
        ];
        cells::csv_row(&mut out, row.iter());
    }
    out
}

/// The findings as one header value (ASCII: IDs and fixed words only).
fn findings_header(findings: &[String]) -> Option<HeaderValue> {
    if findings.is_empty() {
        return None;
    }
    let mut listed = findings.iter().take(MAX_LISTED).cloned().collect::<Vec<_>>().join("; ");
    if findings.len() > MAX_LISTED {
        listed.push_str(&format!("; and {} more (see the memos)", findings.len() - MAX_LISTED));
    }
    HeaderValue::from_str(&listed).ok()
}

/// `GET /api/v1/exports/journal.csv?period=YYYY-MM[&by=tenant]`: the closed month's journal (409 naming `period`
/// while the month is not closed).
pub(super) async fn journal_csv(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<JournalParams>,
) -> Result<Response, AppError> {
    let period = q.period.period();
    let by_tenant = q.by == Some(JournalBy::Tenant);
    let mut tx = p.begin(&state.db).await?;
    let month_state = crate::store::period_state(&mut tx, period).await?;
    let (_, end) = crate::ledger::bounds(&mut tx, period).await?;
    tx.commit_quiet().await?;
    if month_state != gpuledger_api::states::PeriodState::Closed {
        let why = if end > time::OffsetDateTime::now_utc() {
            format!(
                "{period} has not ended yet; it can be closed from {}, and its journal read then",
                gpuledger_core::time_fmt::rfc3339(end)
            )
        } else if month_state == gpuledger_api::states::PeriodState::Closing {
            format!("{period} is being closed: read its journal once the close has finished")
        } else {
            format!(
                "{period} is {month_state}: close it first (POST /api/v1/periods/{period}/close); a journal is written \
                 only from a closed month's frozen lines"
            )
        };
        return Err(AppError::refused("period", why));
    }
    let Some((head, lines)) = crate::readmodel::visible_lines(&state.db, &p, period).await? else {
        return Err(AppError::Internal(format!("closed period {period} has no stored figures")));
    };
    let mut tx = p.begin(&state.db).await?;
    let (departments, platform) = store::journal_accounts(&mut tx).await?;
    tx.commit_quiet().await?;
    let journal = build(period, &lines, by_tenant, &departments, &platform)?;
    audit_export(
        &state.db,
        &p,
        "export.journal_csv",
        &period.to_string(),
        json!({"period": period.to_string(), "by": if by_tenant { "tenant" } else { "department" },
               "rows": journal.rows.len(), "findings": journal.findings}),
    )
    .await?;
    let body = write(period, head.hash.as_deref().unwrap_or_default(), &journal);
    let mut response = csv_response(body.into(), "journal", period);
    if let Some(v) = findings_header(&journal.findings) {
        response.headers_mut().insert(HeaderName::from_static(FINDINGS_HEADER), v);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use gpuledger_core::{
        confidence::Confidence,
        ids::{DepartmentId, TenantId},
        ledger::Term,
    };

    fn line(dept: Uuid, department: &str, tenant: &str, amount: &str) -> LedgerLine {
        LedgerLine {
            line_id: format!("2026-09/x/{department}/{tenant}/{amount}"),
            period: Period::parse("2026-09").unwrap(),
            department_id: DepartmentId::from_uuid(dept),
            department: department.into(),
            tenant_id: (!tenant.is_empty()).then(|| TenantId::from_uuid(Uuid::new_v4())),
            tenant: tenant.into(),
            term: Term::Borrowed,
            gpu_class: "H100-80GB".into(),
            quantity: Decimal::parse("1").unwrap(),
            unit: "GPU-hour".into(),
            rate: Decimal::parse("1").unwrap(),
            amount: Decimal::parse(amount).unwrap(),
            currency: "USD".into(),
            confidence: Confidence::Exact,
            policy_version: 1,
            evidence: String::new(),
            corrects: None,
            explanation: String::new(),
        }
    }

    fn accounts(gl: &str, cc: &str) -> Accounts {
        Accounts { gl_account: Some(gl.into()), cost_center: Some(cc.into()) }
    }

    fn sum(rows: &[Row], debit: bool) -> Decimal {
        rows.iter()
            .filter_map(|r| if debit { r.debit } else { r.credit })
            .fold(Decimal::ZERO, |a, b| a.checked_add(&b).unwrap())
    }

    #[test]
    fn debits_equal_credits_and_a_negative_department_is_a_credit() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let lines = [
            line(a, "Research", "alpha", "100.25"),
            line(a, "Research", "beta", "0.75"),
            line(b, "Platform", "ops", "10.00"),
            line(b, "Platform", "ops", "-30.50"),
        ];
        let depts = BTreeMap::from([(a, accounts("6100", "CC-1")), (b, accounts("6200", "CC-2"))]);
        let p = Period::parse("2026-09").unwrap();
        let j = build(p, &lines, false, &depts, &accounts("4900", "CC-P")).unwrap();
        assert_eq!(j.rows.len(), 3, "{:?}", j.rows);
        let platform = j.rows.iter().find(|r| r.department == "Platform").unwrap();
        assert_eq!((platform.debit, platform.credit.map(|c| c.to_string())), (None, Some("20.50".into())));
        let credit = j.rows.last().unwrap();
        assert_eq!(credit.account.as_deref(), Some("4900"));
        assert_eq!(credit.credit.unwrap().to_string(), "80.50"); // 101.00 − 20.50, the month's total
        assert_eq!(sum(&j.rows, true), sum(&j.rows, false));
        assert!(j.findings.is_empty());
        // by tenant: three department rows, same balance
        let t = build(p, &lines, true, &depts, &accounts("4900", "CC-P")).unwrap();
        assert_eq!(t.rows.len(), 4);
        assert_eq!(sum(&t.rows, true), sum(&t.rows, false));
        assert_eq!(sum(&t.rows, true).to_string(), "101.00");
    }

    #[test]
    fn a_missing_account_keeps_the_row_and_is_a_finding() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let lines = [line(a, "Research", "alpha", "5.00"), line(b, "Ops", "", "7.00"), line(b, "Ops", "", "-7.00")];
        let depts = BTreeMap::from([(a, Accounts { gl_account: None, cost_center: Some("CC-1".into()) })]);
        let j = build(Period::parse("2026-09").unwrap(), &lines, false, &depts, &Accounts::default()).unwrap();
        // Ops nets to zero: no row; Research keeps its 5.00 with no account.
        assert_eq!(j.rows.len(), 2, "{:?}", j.rows);
        assert_eq!((j.rows[0].account.as_deref(), j.rows[0].debit.unwrap().to_string()), (None, "5.00".into()));
        assert!(j.rows[0].memo.contains("FINDING: the department has no gl_account"), "{}", j.rows[0].memo);
        assert!(j.rows[1].memo.contains("no gl_account and no cost_center"), "{}", j.rows[1].memo);
        assert_eq!(
            j.findings,
            [format!("department {a} (no gl_account)"), "platform (no gl_account, no cost_center)".into()]
        );
        let h = findings_header(&j.findings).unwrap();
        assert!(h.to_str().unwrap().contains(&a.to_string()));
    }

    #[test]
    fn cells_are_neutralized_and_amounts_exact() {
        let a = Uuid::new_v4();
        let lines = [line(a, "=cmd|' /C calc'!A0", "", "0.10"), line(a, "=cmd|' /C calc'!A0", "", "0.20")];
        let depts = BTreeMap::from([(a, accounts("=SUM(A1:A9)", "+CC"))]);
        let j = build(Period::parse("2026-02").unwrap(), &lines, false, &depts, &accounts("-4900", "@P")).unwrap();
        let text = String::from_utf8(write(Period::parse("2026-02").unwrap(), "abc", &j)).unwrap();
        let mut rows = text.split("\r\n");
        assert_eq!(rows.next(), Some(COLUMNS.join(",").as_str()));
        let first = rows.next().unwrap();
        assert!(
            first.starts_with("2026-02-28,\"'=SUM(A1:A9)\",\"'+CC\",\"'=cmd|' /C calc'!A0\",,0.30,,USD,"),
            "{first}"
        );
        let second = rows.next().unwrap();
        assert!(second.starts_with("2026-02-28,\"'-4900\",\"'@P\",,,,0.30,USD,"), "{second}");
        assert!(second.ends_with(",abc"), "{second}");
    }
}
