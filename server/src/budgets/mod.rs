//! Budgets and the month-end forecast: `POST/GET /api/v1/budgets` and `GET /api/v1/forecast?period=YYYY-MM`.
//!
//! A budget is a month's amount for one department or one tenant, set by the admin or finance role (audited; setting
//! it again appends a row and the latest counts). The forecast says, per department and tenant the caller may see,
//! what the month has cost so far (`to_date`: every allocation priced up to now), what it will cost at its end
//! (`forecast`), the budget and whether the forecast passes it — see [`forecast`] for how.

use axum::{Json, Router, extract::State, http::StatusCode, routing::get};
use gpuledger_api::{
    foresight::{Budget, BudgetBody, Budgets, Forecast},
    params::OptionalMonthParams,
};
use gpuledger_core::{Period, decimal::Decimal};
use serde_json::json;
use time::OffsetDateTime;

use crate::{
    db::OrgTx,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, JsonBody, ManagePolicy, Params, ReadLedger},
    state::AppState,
    store::lookup_id,
};

pub mod forecast;
mod store;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/budgets", get(list_budgets).post(set_budget))
        .route("/api/v1/forecast", get(get_forecast))
}

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/budgets", list_budgets),
        described("post", "/api/v1/budgets", set_budget),
        described("get", "/api/v1/forecast", get_forecast),
    ]
}

fn period_of(q: &OptionalMonthParams) -> Period {
    q.period.map_or_else(|| Period::containing(OffsetDateTime::now_utc()), |m| m.period())
}

/// A budget amount at two decimals (the contract's `Money`: not negative, at most 12 digits before the point and
/// two after it).
fn amount_of(body: &BudgetBody) -> Result<Decimal, AppError> {
    body.amount.decimal().with_scale(2).map_err(|e| AppError::Internal(e.to_string()))
}

/// `POST /api/v1/budgets`.
async fn set_budget(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<BudgetBody>,
) -> Result<(StatusCode, Json<Budget>), AppError> {
    let period = body.period.period();
    let amount = amount_of(&body)?;
    let department = body.department.as_deref();
    let tenant = body.tenant.as_deref();
    let mut tx = p.begin(&state.db).await?;
    let (department_id, tenant_id) = match (department, tenant) {
        (Some(d), None) => (Some(lookup_id(&mut tx, "departments", "department", d).await?), None),
        (None, Some(t)) => (None, Some(lookup_id(&mut tx, "tenants", "tenant", t).await?)),
        (Some(_), Some(_)) => {
            return Err(AppError::invalid("tenant", "give either department or tenant, not both"));
        }
        (None, None) => return Err(AppError::invalid("department", "is required (or tenant)")),
    };
    let budget_id =
        store::insert_budget(&mut tx, period.first_day(), department_id, tenant_id, &amount.to_string(), &p.actor())
            .await?;
    tx.audit_by(
        &p,
        "budget.set",
        &format!("budget:{period}:{}", department.or(tenant).unwrap_or_default()),
        "",
        json!({ "period": period.to_string(), "department": department, "tenant": tenant, "amount": amount.to_string() }),
    )
    .await?;
    let items = budgets(&mut tx, period).await?;
    tx.commit().await?;
    let budget = items
        .into_iter()
        .find(|b| b.budget_id == budget_id.to_string())
        .ok_or_else(|| AppError::Internal("the budget just set is not listed".into()))?;
    Ok((StatusCode::CREATED, Json(budget)))
}

/// `GET /api/v1/budgets?period=YYYY-MM` (default: this month): the month's budgets the caller may see.
async fn list_budgets(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<OptionalMonthParams>,
) -> Result<Json<Budgets>, AppError> {
    read_budgets(&state, &p, q).await.map(Json)
}

/// The month's budgets the caller may see (`GET /api/v1/budgets`).
pub(crate) async fn read_budgets(
    state: &AppState,
    p: &crate::auth::Principal,
    q: OptionalMonthParams,
) -> Result<Budgets, AppError> {
    let period = period_of(&q);
    let mut tx = p.begin(&state.db).await?;
    let mut items = budgets(&mut tx, period).await?;
    tx.commit_quiet().await?;
    if let Some(scope) = &p.departments {
        let scope: Vec<String> = scope.iter().map(ToString::to_string).collect();
        items.retain(|b| b.department_id.as_ref().is_some_and(|d| scope.contains(d)));
    }
    Ok(Budgets { period: period.to_string(), items })
}

/// `GET /api/v1/forecast?period=YYYY-MM` (default: this month).
async fn get_forecast(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<OptionalMonthParams>,
) -> Result<Json<Forecast>, AppError> {
    read_forecast(&state, &p, q).await.map(Json)
}

/// The month-end forecast (`GET /api/v1/forecast`).
pub(crate) async fn read_forecast(
    state: &AppState,
    p: &crate::auth::Principal,
    q: OptionalMonthParams,
) -> Result<Forecast, AppError> {
    let period = period_of(&q);
    // The ledger is the organization's (overhead and quotas are shared out across departments): computed whole,
    // then cut to what the caller may see.
    let mut tx = state.db.begin_org(p.org).await?;
    if crate::store::period_state(&mut tx, period).await? == gpuledger_api::states::PeriodState::Closed {
        // A closed month's figures are read, never computed: stored by its close, or — closed before the read
        // model — from its bundle, once.
        tx.commit_quiet().await?;
        crate::readmodel::ensure(&state.db, p.org, period).await?;
        tx = state.db.begin_org(p.org).await?;
    }
    let mut answer = forecast::compute(&mut tx, period, OffsetDateTime::now_utc()).await?;
    tx.commit_quiet().await?;
    if let Some(scope) = &p.departments {
        let scope: Vec<String> = scope.iter().map(ToString::to_string).collect();
        answer.departments.retain(|d| scope.contains(&d.department_id));
        answer.tenants.retain(|t| scope.contains(&t.department_id));
        answer.total = forecast::total(&answer.departments)?;
    }
    Ok(answer)
}

/// The latest budget per department and tenant of `period`, departments first.
pub(crate) async fn budgets(tx: &mut OrgTx, period: Period) -> Result<Vec<Budget>, AppError> {
    let rows = store::latest_budgets(tx, period.first_day()).await?;
    let mut items: Vec<Budget> = rows
        .into_iter()
        .map(|(id, department_id, tenant_id, department, tenant, amount, by, at)| Budget {
            budget_id: id.to_string(),
            period: period.to_string(),
            department_id: department_id.map(|d| d.to_string()),
            department,
            tenant_id: tenant_id.map(|t| t.to_string()),
            tenant,
            amount,
            created_by: by,
            created_at: gpuledger_core::time_fmt::rfc3339(at),
        })
        .collect();
    items.sort_by(|a, b| {
        (a.tenant.is_some(), &a.department, &a.tenant).cmp(&(b.tenant.is_some(), &b.department, &b.tenant))
    });
    Ok(items)
}
