//! SQL of budgets and the forecast: reads and writes inside the caller's organization-scoped transaction.

use time::{Date, OffsetDateTime};
use uuid::Uuid;

use crate::{db::OrgTx, error::AppError};

/// Stores a budget of the month starting `start` for a department or a tenant; returns its ID.
pub(super) async fn insert_budget(
    tx: &mut OrgTx,
    start: Date,
    department_id: Option<Uuid>,
    tenant_id: Option<Uuid>,
    amount: &str,
    created_by: &str,
) -> Result<Uuid, AppError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO budgets (org_id, period, department_id, tenant_id, amount, created_by)
         VALUES ($1, $2, $3, $4, $5::numeric, $6) RETURNING budget_id",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .bind(department_id)
    .bind(tenant_id)
    .bind(amount)
    .bind(created_by)
    .fetch_one(tx.conn())
    .await?)
}

/// A budget as stored: (ID, department ID, tenant ID, department, tenant, amount, set by, set at).
pub(super) type BudgetRow = (Uuid, Option<Uuid>, Option<Uuid>, String, Option<String>, String, String, OffsetDateTime);

/// The latest budget per department and tenant of the month starting `start`.
pub(super) async fn latest_budgets(tx: &mut OrgTx, start: Date) -> Result<Vec<BudgetRow>, AppError> {
    Ok(sqlx::query_as(
        "SELECT DISTINCT ON (COALESCE(b.department_id, b.tenant_id))
                b.budget_id, COALESCE(b.department_id, t.department_id), b.tenant_id, d.name, t.name,
                b.amount::text, b.created_by, b.created_at
           FROM budgets b
           LEFT JOIN tenants t ON t.org_id = b.org_id AND t.tenant_id = b.tenant_id
           JOIN departments d ON d.org_id = b.org_id AND d.department_id = COALESCE(b.department_id, t.department_id)
          WHERE b.org_id = $1 AND b.period = $2
          ORDER BY COALESCE(b.department_id, b.tenant_id), b.created_at DESC",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .fetch_all(tx.conn())
    .await?)
}

/// The provisional snapshot of the month starting `start`, when it has its "to date": (as of, to date's sums).
pub(super) async fn snapshot_to_date(
    tx: &mut OrgTx,
    start: Date,
) -> Result<Option<(OffsetDateTime, serde_json::Value)>, AppError> {
    Ok(sqlx::query_as(
        "SELECT as_of, to_date FROM read_months
          WHERE org_id = $1 AND period = $2 AND state = 'provisional' AND to_date IS NOT NULL",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .fetch_optional(tx.conn())
    .await?)
}

/// A stored month's total of one department and tenant (or of the department's lines without a tenant).
#[derive(Debug, sqlx::FromRow)]
pub(super) struct LineSum {
    /// The department's ID.
    pub department_id: Uuid,
    /// The department's name.
    pub department: String,
    /// The tenant's ID (`None`: lines of no tenant).
    pub tenant_id: Option<Uuid>,
    /// The tenant's name.
    pub tenant: String,
    /// The lines' total amount, as text.
    pub sum: String,
}

/// The stored lines' totals of the month starting `start` by department and tenant.
pub(super) async fn line_sums(tx: &mut OrgTx, start: Date) -> Result<Vec<LineSum>, AppError> {
    Ok(sqlx::query_as(
        "SELECT department_id, department, tenant_id, tenant, sum(amount)::text FROM read_lines
          WHERE org_id = $1 AND period = $2 GROUP BY 1, 2, 3, 4",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .fetch_all(tx.conn())
    .await?)
}

/// The currency of the closed month starting `start`; `None` when it has no stored closed figures.
pub(super) async fn closed_currency(tx: &mut OrgTx, start: Date) -> Result<Option<Option<String>>, AppError> {
    Ok(sqlx::query_scalar(
        "SELECT currency::text FROM read_months WHERE org_id = $1 AND period = $2 AND state = 'closed'",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .fetch_optional(tx.conn())
    .await?)
}

/// The currency of the stored figures of the month starting `start` (which must exist).
pub(super) async fn figures_currency(tx: &mut OrgTx, start: Date) -> Result<Option<String>, AppError> {
    Ok(sqlx::query_scalar("SELECT currency::text FROM read_months WHERE org_id = $1 AND period = $2")
        .bind(tx.org().as_uuid())
        .bind(start)
        .fetch_one(tx.conn())
        .await?)
}

/// Each department's stored total of the closed months in `[from, before)` (first days), oldest first.
pub(super) async fn closed_department_totals(
    tx: &mut OrgTx,
    from: Date,
    before: Date,
) -> Result<Vec<(Uuid, String)>, AppError> {
    Ok(sqlx::query_as(
        "SELECT t.department_id, t.total::text FROM read_totals t
           JOIN read_months m ON m.org_id = t.org_id AND m.period = t.period AND m.state = 'closed'
          WHERE t.org_id = $1 AND t.period >= $2 AND t.period < $3
          ORDER BY t.period",
    )
    .bind(tx.org().as_uuid())
    .bind(from)
    .bind(before)
    .fetch_all(tx.conn())
    .await?)
}
