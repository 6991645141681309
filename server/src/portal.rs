//! The portal's data source over PostgreSQL.

use gpuledger_core::ids::OrgId;
use gpuledger_web::{OrgSummary, Overview, PortalData, PortalError, data::BoxFuture};

use crate::db::{Database, DbError};

/// [`PortalData`] backed by the database, through organization-scoped transactions.
#[derive(Clone)]
pub struct DbPortalData {
    db: Database,
    featured_org: Option<OrgId>,
}

impl DbPortalData {
    /// A data source showing `featured_org` on the landing page.
    pub fn new(db: Database, featured_org: Option<OrgId>) -> Self {
        Self { db, featured_org }
    }

    async fn org_summary(&self, org: OrgId) -> Result<Option<OrgSummary>, DbError> {
        let mut tx = self.db.begin_org(org).await?;
        let row: Option<(String, String, i64, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT o.slug, o.name,
                    (SELECT count(*) FROM departments),
                    (SELECT count(*) FROM tenants),
                    (SELECT count(*) FROM clusters),
                    (SELECT count(DISTINCT model) FROM gpu_models),
                    (SELECT count(*) FROM allocation_intervals)
               FROM organizations o",
        )
        .fetch_optional(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(row.map(|(slug, name, departments, tenants, clusters, gpu_models, allocation_intervals)| OrgSummary {
            slug,
            name,
            departments,
            tenants,
            clusters,
            gpu_models,
            allocation_intervals,
        }))
    }
}

impl PortalData for DbPortalData {
    fn overview(&self) -> BoxFuture<'_, Result<Overview, PortalError>> {
        Box::pin(async move {
            let readiness = self.db.readiness().await;
            let organization = match (readiness.reachable, self.featured_org) {
                (true, Some(org)) => self.org_summary(org).await.map_err(|e| {
                    tracing::error!(error = %e, "portal overview failed");
                    PortalError { message: "the organization's summary could not be read".into() }
                })?,
                _ => None,
            };
            Ok(Overview { database_ok: readiness.reachable, schema_version: readiness.applied, organization })
        })
    }
}
