//! The audit log, written one way by every feature: a method of the organization's transaction, so the record
//! commits (or rolls back) with the change it describes.

use serde_json::Value;
use uuid::Uuid;

use crate::{auth::Principal, db::OrgTx, error::AppError};

mod store;

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
        store::insert_record(self, Uuid::new_v4(), actor, source, action, target, reason, details).await
    }
}
