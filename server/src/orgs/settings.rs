//! `GET|PUT /api/v1/organization/settings`: display name, default currency, data retention and the platform's own
//! journal accounts (admins write them), with the limits the operator set shown read-only. The portal's form is
//! `/admin/organization`.

use axum::{Json, Router, extract::State, routing::get};
use gpuledger_api::{
    input::Line,
    orgs::{OrganizationLimits, OrganizationSettings, SettingsBody},
    tenancy::MAX_ACCOUNT,
};
use gpuledger_core::time_fmt::rfc3339;
use serde_json::json;

use super::store;
use crate::{
    auth::{Capability, Principal},
    db::OrgTx,
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Administer, Caller, JsonBody, ReadLedger},
    state::AppState,
};

/// Routes of the organization's settings.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/organization/settings", get(read).put(put_settings))
}

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/organization/settings", read),
        described("put", "/api/v1/organization/settings", put_settings),
    ]
}

/// The settings of `tx`'s organization (defaults when its settings row is missing).
pub async fn load(tx: &mut OrgTx) -> Result<OrganizationSettings, AppError> {
    // Today's ingest count in a statement of its own: on Citus a correlated subquery is refused next to the reference
    // table `organizations` (docs/scaling.md), and this page failed there with 500.
    let row = store::settings(tx).await?.ok_or_else(|| AppError::NotFound("no such organization".into()))?;
    let today = store::ingested_today(tx).await?;
    let (
        slug,
        name,
        state,
        rate,
        ingest,
        currency,
        retention,
        updated_at,
        updated_by,
        _,
        cost_center,
        gl_account,
        zone,
    ) = row;
    let today = today.unwrap_or(0);
    Ok(OrganizationSettings {
        slug,
        display_name: name,
        default_currency: currency.unwrap_or_else(|| "USD".into()),
        retention_months: retention.unwrap_or(84),
        state: state.0,
        limits: OrganizationLimits {
            rate_limit_per_minute: rate.map(i64::from),
            ingest_facts_per_day: ingest,
            ingest_facts_today: today,
        },
        platform_cost_center: cost_center,
        platform_gl_account: gl_account,
        time_zone: zone.unwrap_or_else(|| crate::calendar::UTC.to_string()),
        updated_at: updated_at.map(rfc3339).unwrap_or_default(),
        updated_by: updated_by.unwrap_or_default(),
    })
}

async fn read(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<OrganizationSettings>, AppError> {
    read_settings(&state, &p).await.map(Json)
}

/// The organization's settings (`GET /api/v1/organization/settings`).
pub(crate) async fn read_settings(
    state: &AppState,
    p: &crate::auth::Principal,
) -> Result<OrganizationSettings, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let settings = load(&mut tx).await?;
    tx.rollback().await?;
    Ok(settings)
}

pub(super) async fn put_settings(
    State(state): State<AppState>,
    p: Caller<Administer>,
    JsonBody(body): JsonBody<SettingsBody>,
) -> Result<Json<OrganizationSettings>, AppError> {
    Ok(Json(save(&state, &p, body).await?))
}

/// Saves the organization's settings (admins); a GET answer sent back is taken (read-only fields must match).
pub(crate) async fn save(
    state: &AppState,
    p: &Principal,
    body: SettingsBody,
) -> Result<OrganizationSettings, AppError> {
    p.require(Capability::Administer)?;
    let retention_months = i32::try_from(body.retention_months.get()).unwrap_or(i32::MAX);
    let mut tx = p.begin(&state.db).await?;
    let before = load(&mut tx).await?;
    // Read-only fields sent back from a GET: the slug and state must be what they are (the operator sets them).
    if let Some(slug) = &body.slug
        && slug.as_str() != before.slug
    {
        return Err(AppError::refused("slug", format!("read-only: the organization's slug is {:?}", before.slug)));
    }
    if let Some(st) = &body.state
        && st.as_str() != before.state.as_str()
    {
        return Err(AppError::refused("state", format!("read-only: set by the operator (now {})", before.state)));
    }
    let zone = match &body.time_zone {
        Some(z) => {
            crate::calendar::check_zone(&mut tx, "time_zone", z.as_str()).await?;
            Some(z.as_str().to_string())
        }
        None => None,
    };
    store::set_display_name(&mut tx, body.display_name.as_str()).await?;
    // The platform's accounts: a field left out keeps what is stored, `null` clears it.
    let cost_center = account(body.platform_cost_center.as_ref());
    let gl_account = account(body.platform_gl_account.as_ref());
    store::upsert_settings(
        &mut tx,
        body.default_currency.as_str(),
        retention_months,
        &p.actor(),
        cost_center,
        gl_account,
    )
    .await?;
    if let Some(z) = &zone {
        // A change of zone moves the open months' instants (audited below; the open months are refreshed).
        store::set_time_zone(&mut tx, z).await?;
    }
    let after = load(&mut tx).await?;
    tx.audit_by(
        p,
        "organization.settings",
        &after.slug,
        "",
        json!({
            "before": {"display_name": before.display_name, "default_currency": before.default_currency,
                       "retention_months": before.retention_months,
                       "platform_cost_center": before.platform_cost_center,
                       "platform_gl_account": before.platform_gl_account, "time_zone": before.time_zone},
            "after": {"display_name": after.display_name, "default_currency": after.default_currency,
                      "retention_months": after.retention_months,
                      "platform_cost_center": after.platform_cost_center,
                      "platform_gl_account": after.platform_gl_account, "time_zone": after.time_zone},
        }),
    )
    .await?;
    if before.time_zone != after.time_zone {
        // The open months are cut elsewhere now: their figures are recomputed.
        tx.commit().await?;
    } else {
        // These settings change no figure of any month.
        tx.commit_quiet().await?;
    }
    Ok(after)
}

/// A clearable account field as the upsert binds it: whether to write it, and what (`None`: clear).
fn account(field: Option<&Option<Line<MAX_ACCOUNT>>>) -> (bool, Option<&str>) {
    match field {
        None => (false, None),
        Some(v) => (true, v.as_ref().map(|l| l.as_str())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn body(name: &str, currency: &str, months: i32) -> Result<SettingsBody, AppError> {
        let v = json!({"display_name": name, "default_currency": currency, "retention_months": months});
        crate::http::json_body(v.to_string().as_bytes())
    }

    fn with_account(field: &str, value: serde_json::Value) -> Result<SettingsBody, AppError> {
        let mut v = json!({"display_name": "Acme", "default_currency": "EUR", "retention_months": 24});
        v[field] = value;
        crate::http::json_body(v.to_string().as_bytes())
    }

    #[test]
    fn platform_accounts_are_left_out_cleared_or_set() {
        let left_out = body("Acme", "EUR", 24).unwrap();
        assert_eq!(account(left_out.platform_gl_account.as_ref()), (false, None));
        let cleared = with_account("platform_gl_account", serde_json::Value::Null).unwrap();
        assert_eq!(account(cleared.platform_gl_account.as_ref()), (true, None));
        let set = with_account("platform_cost_center", json!(" CC-9000 ")).unwrap();
        assert_eq!(account(set.platform_cost_center.as_ref()), (true, Some("CC-9000")));
    }

    #[test]
    fn each_bad_value_is_refused_naming_its_field() {
        let ok = body(" Acme ", "EUR", 24).unwrap();
        assert_eq!((ok.display_name.as_str(), ok.default_currency.as_str()), ("Acme", "EUR"));
        for (b, field) in [
            (body("", "EUR", 24), "display_name"),
            (body("Ac\u{7}me", "EUR", 24), "display_name"),
            (body("Acme", "eur", 24), "default_currency"),
            (body("Acme", "EURO", 24), "default_currency"),
            (body("Acme", "E1R", 24), "default_currency"),
            (body("Acme", "EUR", 11), "retention_months"),
            (body("Acme", "EUR", 121), "retention_months"),
            (with_account("platform_gl_account", json!("4100\u{7}")), "platform_gl_account"),
            (with_account("platform_cost_center", json!("x".repeat(65))), "platform_cost_center"),
            (with_account("platform_cost_center", json!(12)), "platform_cost_center"),
        ] {
            let err = b.unwrap_err();
            assert!(matches!(&err, AppError::Invalid { field: f, .. } if f == field), "{field}: {err}");
        }
    }
}
