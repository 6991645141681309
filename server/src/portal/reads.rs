//! How pages read: each [`Read`] is answered by the function its REST handler calls, as the request's caller, with
//! the handler's authorization (the capability its `Caller<…>` extractor demands, checked on the same credential)
//! and the heavy-read turn its route takes. No HTTP request, router or JSON in between; a refusal keeps the API's
//! status and detail, so a page shows what the API would have answered.

use axum::http::HeaderMap;
use gpuledger_api::{params::MonthParams, policy::Impact, states::PeriodState, tenancy::InventoryChange};
use gpuledger_core::Period;
use gpuledger_web::reads::{Answer, Read, Refusal};

use super::DbPortalData;
use crate::{
    auth::{self, Capability, Principal},
    error::AppError,
    limits::HeavyPermit,
    state::AppState,
};

/// A refusal as the API would have answered it.
pub(super) fn refusal(e: AppError) -> Refusal {
    Refusal { status: e.status().as_u16(), detail: e.detail() }
}

impl DbPortalData {
    fn services(&self) -> Result<&AppState, AppError> {
        self.state.as_ref().ok_or_else(|| AppError::Internal("the portal was built without the server's state".into()))
    }

    /// The request's caller if it may do `cap`, exactly as the `Caller<…>` extractor decides: from the request's
    /// own credential (its session cookie, or a token), 401 without one, 403 without the capability.
    async fn caller(&self, cap: Capability) -> Result<Principal, AppError> {
        let mut credential = HeaderMap::new();
        for name in [
            axum::http::header::COOKIE,
            axum::http::header::AUTHORIZATION,
            axum::http::HeaderName::from_static(auth::PEER_HEADER),
        ] {
            if let Some(v) = self.headers.get(&name) {
                credential.insert(name, v.clone());
            }
        }
        auth::require(&self.services()?.db, &credential, cap).await
    }

    /// A turn of the caller's organization among its heavy reads, as `routes::heavy_read` takes one for the
    /// operation's route; `None` for a closed month's lookup (`closed`), which needs none.
    async fn turn(&self, p: &Principal, closed: Option<Period>) -> Result<Option<HeavyPermit>, AppError> {
        let state = self.services()?;
        if let Some(period) = closed {
            let mut tx = state.db.begin_org(p.org).await?;
            let is_closed = matches!(crate::store::period_state(&mut tx, period).await, Ok(PeriodState::Closed));
            tx.commit_quiet().await?;
            if is_closed {
                return Ok(None);
            }
        }
        state.limits.heavy.acquire(p.org).await.map(Some)
    }

    /// `read`'s answer.
    pub(super) async fn answer(&self, read: Read) -> Result<Answer, AppError> {
        use Capability::{Administer, ManagePolicy, ReadLedger};
        let state = self.services()?;
        Ok(match read {
            // Stored figures (the read model): no turn, as `routes::STORED_READS`.
            Read::Periods() => {
                Answer::Periods(crate::close::read_periods(state, &self.caller(ReadLedger).await?).await?)
            }
            Read::Ledger(q) => {
                Answer::Ledger(crate::readmodel::ledger::read_ledger(state, &self.caller(ReadLedger).await?, q).await?)
            }
            Read::Months(q) => {
                Answer::Months(crate::readmodel::ledger::read_months(state, &self.caller(ReadLedger).await?, q).await?)
            }
            Read::Summaries(q) => Answer::Summaries(
                crate::readmodel::ledger::read_summaries(state, &self.caller(ReadLedger).await?, q).await?,
            ),
            // Heavy reads: a turn first (a closed month's forecast and evidence are lookups).
            Read::Forecast(q) => {
                let p = self.caller(ReadLedger).await?;
                let month =
                    q.period.map_or_else(|| Period::containing(time::OffsetDateTime::now_utc()), |m| m.period());
                let _turn = self.turn(&p, Some(month)).await?;
                Answer::Forecast(crate::budgets::read_forecast(state, &p, q).await?)
            }
            Read::Evidence(path, q) => {
                let p = self.caller(ReadLedger).await?;
                let _turn = self.turn(&p, Some(path.period.period())).await?;
                Answer::Evidence(crate::ledger::read_evidence(state, &p, path, q).await?.0)
            }
            Read::Idle() => {
                let p = self.caller(ReadLedger).await?;
                let _turn = self.turn(&p, None).await?;
                Answer::Idle(crate::analytics::read_idle(state, &p).await?)
            }
            Read::Sessions(q) => {
                let p = self.caller(ReadLedger).await?;
                let _turn = self.turn(&p, None).await?;
                Answer::Sessions(crate::analytics::read_sessions(state, &p, q).await?)
            }
            Read::Budgets(q) => {
                let p = self.caller(ReadLedger).await?;
                let _turn = self.turn(&p, None).await?;
                Answer::Budgets(crate::budgets::read_budgets(state, &p, q).await?)
            }
            Read::Findings(path) => {
                let p = self.caller(ReadLedger).await?;
                let _turn = self.turn(&p, None).await?;
                Answer::Findings(crate::close::read_findings(state, &p, path).await?)
            }
            Read::PolicyImpact(version, q) => {
                let p = self.caller(ReadLedger).await?;
                let _turn = self.turn(&p, None).await?;
                Answer::PolicyImpact(crate::policy::read_impact(state, &p, version, q).await?)
            }
            Read::Coverage(period) => {
                let p = self.caller(Administer).await?;
                let _turn = self.turn(&p, None).await?;
                Answer::Coverage(crate::telemetry::read_coverage(state, &p, period.as_deref()).await?)
            }
            // Lookups.
            Read::Webhooks() => {
                Answer::Webhooks(crate::notifications::read_webhooks(state, &self.caller(ManagePolicy).await?).await?)
            }
            Read::Deliveries(path) => Answer::Deliveries(
                crate::notifications::read_deliveries(state, &self.caller(ManagePolicy).await?, path).await?,
            ),
            Read::Disputes(q) => {
                Answer::Disputes(crate::disputes::read_disputes(state, &self.caller(ReadLedger).await?, q).await?)
            }
            Read::Dispute(path) => {
                Answer::Dispute(crate::disputes::read_dispute(state, &self.caller(ReadLedger).await?, path).await?)
            }
            Read::Tenants() => {
                Answer::Tenants(crate::tenancy::service::read_tenants(state, &self.caller(ReadLedger).await?).await?)
            }
            Read::Departments() => Answer::Departments(
                crate::tenancy::service::read_departments(state, &self.caller(ReadLedger).await?).await?,
            ),
            Read::NamespaceRules() => Answer::NamespaceRules(
                crate::tenancy::service::read_rules(state, &self.caller(ReadLedger).await?).await?,
            ),
            Read::Policies() => {
                Answer::Policies(crate::policy::read_policies(state, &self.caller(ReadLedger).await?).await?)
            }
            Read::Quotas(q) => {
                Answer::Quotas(crate::policy::read_quotas(state, &self.caller(ReadLedger).await?, q).await?)
            }
            Read::Settings() => {
                Answer::Settings(crate::orgs::settings::read_settings(state, &self.caller(ReadLedger).await?).await?)
            }
            Read::CostImport(q) => {
                Answer::CostImport(crate::costs::read_import(state, &self.caller(ManagePolicy).await?, q).await?)
            }
            Read::Provider() => Answer::Provider(
                crate::access::routes::provider_settings(state, &self.caller(Administer).await?, &self.headers).await?,
            ),
            Read::RoleMappings() => Answer::RoleMappings(
                crate::access::routes::role_mappings(state, &self.caller(Administer).await?).await?,
            ),
            Read::Audit(q) => {
                Answer::Audit(crate::access::routes::read_audit(state, &self.caller(Administer).await?, q).await?)
            }
        })
    }

    /// An inventory change's impact, nothing saved: the change read as the API's typed body by the same parser (the
    /// same field-named refusals), then the preview the REST operation runs, in its heavy-read turn.
    pub(super) async fn preview(&self, q: MonthParams, change: serde_json::Value) -> Result<Impact, AppError> {
        let state = self.services()?;
        let p = self.caller(Capability::ManagePolicy).await?;
        let body = serde_json::to_vec(&change).map_err(|e| AppError::Internal(format!("a preview's body: {e}")))?;
        let change: InventoryChange = crate::http::json_body(&body)?;
        let _turn = self.turn(&p, None).await?;
        crate::tenancy::service::preview_inventory(state, &p, q, change).await
    }
}
