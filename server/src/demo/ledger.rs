//! The demo's finance side, done through the same functions the REST API calls: a cost policy approved by
//! "finance", quotas imported from the Kueue ClusterQueues the agents reported, the last two full months closed
//! (hash-chained), and one open dispute on last month's ledger. Idempotent.

use gpuledger_core::{Period, ids::OrgId, policy::CostPolicy};
use serde_json::json;
use time::OffsetDateTime;

use super::store;
use crate::{
    close::close_period,
    db::Database,
    error::AppError,
    policy::{approve, create_draft, import_kueue_quotas},
    store::period_state,
};

/// Who the demo says did it, in audit trails.
pub const DEMO_ACTOR: &str = "demo-seed";

/// Rates per GPU-hour (guaranteed, borrowed) by class name prefix; plausible list prices for a private cloud.
fn rates(class: &str) -> (&'static str, &'static str) {
    let c = class.to_ascii_uppercase();
    if c.starts_with("H100") || c.starts_with("H200") {
        ("2.10", "3.15")
    } else if c.starts_with("A100") {
        ("1.20", "1.80")
    } else if c.starts_with("L40") {
        ("0.90", "1.35")
    } else if c.starts_with("L4") {
        ("0.45", "0.70")
    } else if c.starts_with("T4") {
        ("0.25", "0.40")
    } else {
        ("1.00", "1.50")
    }
}

/// The demo's cost policy for the classes in its inventory.
pub fn demo_policy(classes: &[String]) -> Result<CostPolicy, AppError> {
    let classes: Vec<_> = classes
        .iter()
        .map(|c| {
            let (g, b) = rates(c);
            json!({"gpu_class": c, "guaranteed": g, "borrowed": b})
        })
        .collect();
    let policy: CostPolicy = serde_json::from_value(json!({
        "currency": "USD",
        "classes": classes,
        "energy": {"per_kwh": "0.14", "pue": "1.35"},
        "services": [{"endpoint": "llm-shared"}],
        "token_weights": [{"model": "*", "input": "1", "output": "4"}],
        "overhead": {
            "fixed": [{"name": "platform team", "amount": "18000.00"}, {"name": "storage and network", "amount": "4500.00"}],
            "unallocated_capacity": true,
            "key": {"kind": "allocated_gpu_hours"}
        }
    }))
    .map_err(|e| AppError::Internal(format!("demo policy: {e}")))?;
    policy.validate()?;
    Ok(policy)
}

/// Approves the policy (from two months back), imports quotas, closes the last two full months.
pub async fn approve_import_close(db: &Database, org: OrgId, now: OffsetDateTime) -> Result<Vec<Period>, AppError> {
    let current = Period::containing(now);
    let last = current.prev()?;
    let first = last.prev()?;
    approve_and_close(db, org, now, &[first, last], true).await
}

/// Approves the demo policy effective from the first of `periods` (unless one is approved), imports the Kueue
/// quotas the agents reported when `import_quotas` (once), and closes each of `periods` not closed yet, in order.
pub async fn approve_and_close(
    db: &Database,
    org: OrgId,
    now: OffsetDateTime,
    periods: &[Period],
    import_quotas: bool,
) -> Result<Vec<Period>, AppError> {
    let first = *periods.first().ok_or_else(|| AppError::Internal("no period to close".into()))?;
    let mut tx = db.begin_org(org).await?;
    let org_id = tx.org().as_uuid();
    let approved = store::approved_policy_exists(&mut tx, org_id).await?;
    if !approved {
        let classes = store::gpu_classes(&mut tx, org_id).await?;
        let policy = demo_policy(&classes)?;
        let version = create_draft(&mut tx, DEMO_ACTOR, first, &policy, "Demo rates (sample data)").await?;
        approve(&mut tx, DEMO_ACTOR, version, "approved by finance for the demo").await?;
    }
    let imported = store::kueue_quotas_exist(&mut tx, org_id).await?;
    if import_quotas && !imported {
        import_kueue_quotas(&mut tx, DEMO_ACTOR, &Default::default()).await?;
    }
    tx.commit().await?;
    let mut closed = Vec::new();
    for &p in periods {
        let mut tx = db.begin_org(org).await?;
        let state = period_state(&mut tx, p).await?;
        tx.commit().await?;
        if state != gpuledger_api::states::PeriodState::Closed {
            // Closed now, after the history was written: a close stamped with the demo's start would take every fact
            // written since for a late one, and each refresh of the open month would recompute the closed month.
            let at = now.max(OffsetDateTime::now_utc());
            close_period(db, org, crate::demo::DEMO_SLUG, p, DEMO_ACTOR, at).await?;
        }
        closed.push(p);
    }
    Ok(closed)
}

/// Opens the demo's one dispute (a department manager questioning last month's largest borrowed line) through the
/// real REST handler, unless one exists already.
pub async fn open_demo_dispute(db: &Database, org: OrgId, last: Period) -> Result<(), AppError> {
    use axum::{body::Body, http::Request};
    use tower::ServiceExt;

    let mut tx = db.begin_org(org).await?;
    let org_id = tx.org().as_uuid();
    let exists = store::dispute_exists(&mut tx, org_id).await?;
    if exists {
        tx.commit().await?;
        return Ok(());
    }
    let line = store::largest_borrowed_line(&mut tx, org_id, last).await?;
    let Some(line) = line else {
        tx.commit().await?;
        return Ok(());
    };
    let (token_id, token) =
        crate::auth::create_token(&mut tx, &crate::auth::Scope::Admin, "demo dispute", DEMO_ACTOR, None).await?;
    tx.commit().await?;
    let state = crate::state::AppState::new(db.clone(), Some(org));
    let app = crate::app::router(state, &crate::app::HttpOptions::default());
    let body = json!({
        "period": last.to_string(),
        "line_ids": [line],
        "reason": "Our training job was stuck in a crash loop for two days and held its GPUs without running; \
                   we ask to be charged only for the hours it actually trained."
    });
    let request = Request::post("/api/v1/disputes")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .map_err(|e| AppError::Internal(e.to_string()))?;
    let response = app.oneshot(request).await.map_err(|e| AppError::Internal(e.to_string()))?;
    let status = response.status();
    let mut tx = db.begin_org(org).await?;
    store::revoke_token(&mut tx, org.as_uuid(), token_id).await?;
    tx.commit().await?;
    crate::auth::revocations::revoked();
    if !status.is_success() {
        return Err(AppError::Internal(format!("opening the demo dispute answered {status}")));
    }
    Ok(())
}
