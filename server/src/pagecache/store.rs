//! SQL of the page cache: the read model's generation of an organization.

use crate::{db::OrgTx, error::AppError};

/// The read model's generation of the transaction's organization, read in the reader's own transaction: it changes
/// whenever a stored figure, summary, pending change, period or budget does (budgets are only ever added), and when
/// a refresh fails or its failure is cleared.
pub(super) async fn generation(tx: &mut OrgTx) -> Result<String, AppError> {
    Ok(sqlx::query_scalar(
        "SELECT concat_ws('|',
        (SELECT max(as_of)::text FROM read_months WHERE org_id = $1),
        (SELECT max(computed_at)::text FROM read_summaries WHERE org_id = $1),
        (SELECT since::text FROM read_dirty WHERE org_id = $1),
        (SELECT string_agg(period::text || state || coalesce(closed_at::text, ''), ',' ORDER BY period)
           FROM periods WHERE org_id = $1),
        (SELECT max(created_at)::text FROM budgets WHERE org_id = $1),
        (SELECT failed_at::text FROM read_failures WHERE org_id = $1))",
    )
    .bind(tx.org().as_uuid())
    .fetch_one(tx.conn())
    .await?)
}
