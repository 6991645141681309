//! The audit log, written one way by every feature: a method of the organization's transaction, so the record
//! commits (or rolls back) with the change it describes.

use serde_json::Value;
use uuid::Uuid;

use crate::{auth::Principal, db::OrgTx, error::AppError};

impl OrgTx {
    /// Writes an audit record for `actor` (`token:<id>`, `user:<e-mail>`, `demo`, …).
    pub async fn audit(
        &mut self,
        actor: &str,
        action: &str,
        target: &str,
        reason: &str,
        details: Value,
    ) -> Result<(), AppError> {
        self.audit_from(actor, "", action, target, reason, details).await
    }

    /// Writes an audit record for a principal: who and from where.
    pub async fn audit_by(
        &mut self,
        p: &Principal,
        action: &str,
        target: &str,
        reason: &str,
        details: Value,
    ) -> Result<(), AppError> {
        self.audit_from(&p.actor(), &p.source, action, target, reason, details).await
    }

    /// Writes an audit record with its source address.
    pub async fn audit_from(
        &mut self,
        actor: &str,
        source: &str,
        action: &str,
        target: &str,
        reason: &str,
        details: Value,
    ) -> Result<(), AppError> {
        let org = self.org().as_uuid();
        sqlx::query(
            "INSERT INTO audit_log (org_id, audit_id, actor, action, target, reason, details, source)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(org)
        .bind(Uuid::new_v4())
        .bind(actor)
        .bind(action)
        .bind(target)
        .bind(reason)
        .bind(details)
        .bind(source)
        .execute(self.conn())
        .await?;
        Ok(())
    }
}
