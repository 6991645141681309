//! SQL of the exports that is not a [`super::sources::Source`] (whose SELECTs are built from the column lists): the
//! journal's accounts.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::{db::OrgTx, error::AppError};

/// A cost centre and general-ledger account pair (either may be unset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounts {
    /// The general-ledger account.
    pub gl_account: Option<String>,
    /// The cost centre.
    pub cost_center: Option<String>,
}

/// The accounts of every department the transaction may see (a department-scoped caller: its own, by the
/// departments' row-level security), and the platform's own (the organization's settings).
pub async fn journal_accounts(tx: &mut OrgTx) -> Result<(BTreeMap<Uuid, Accounts>, Accounts), AppError> {
    let org = tx.org().as_uuid();
    let rows: Vec<(Uuid, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT department_id, gl_account, cost_center FROM departments WHERE org_id = $1")
            .bind(org)
            .fetch_all(tx.conn())
            .await?;
    let departments =
        rows.into_iter().map(|(id, gl_account, cost_center)| (id, Accounts { gl_account, cost_center })).collect();
    let platform: Option<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT platform_gl_account, platform_cost_center FROM org_settings WHERE org_id = $1")
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    let (gl_account, cost_center) = platform.unwrap_or_default();
    Ok((departments, Accounts { gl_account, cost_center }))
}
