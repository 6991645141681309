//! `GET|PUT /api/v1/organization/settings`: display name, default currency and data retention (admins write them),
//! with the limits the operator set shown read-only. The portal's form is `/admin/organization`.

use axum::{Json, Router, extract::State, routing::get};
use gpuledger_api::orgs::{OrganizationLimits, OrganizationSettings, SettingsBody};
use gpuledger_core::time_fmt::rfc3339;
use serde_json::json;
use time::OffsetDateTime;

use crate::{
    app::AppState,
    db::OrgTx,
    error::AppError,
    http::{Administer, Caller, JsonBody, ReadLedger},
    openapi::{Inputs, inputs as described},
};

/// Routes of the organization's settings.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/organization/settings", get(read).put(write))
}

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/organization/settings", read),
        described("put", "/api/v1/organization/settings", write),
    ]
}

type SettingsRow = (
    String,
    String,
    String,
    Option<i32>,
    Option<i64>,
    Option<String>,
    Option<i32>,
    Option<OffsetDateTime>,
    Option<String>,
    i64,
);

/// The settings of `tx`'s organization (defaults when its settings row is missing).
pub async fn load(tx: &mut OrgTx) -> Result<OrganizationSettings, AppError> {
    let org = tx.org().as_uuid();
    // Today's ingest count in a statement of its own: on Citus a correlated subquery is refused next to the reference
    // table `organizations` (docs/scaling.md), and this page failed there with 500.
    let row: SettingsRow = sqlx::query_as(
        "SELECT o.slug, o.name, o.state, o.rate_limit_per_minute, o.ingest_facts_per_day,
                s.default_currency::text, s.retention_months, s.updated_at, s.updated_by, 0::bigint
           FROM organizations o LEFT JOIN org_settings s ON s.org_id = o.org_id
          WHERE o.org_id = $1",
    )
    .bind(org)
    .fetch_optional(tx.conn())
    .await?
    .ok_or_else(|| AppError::NotFound("no such organization".into()))?;
    let today: Option<i64> = sqlx::query_scalar(
        "SELECT d.facts FROM ingest_daily d WHERE d.org_id = $1 AND d.day = (now() AT TIME ZONE 'UTC')::date",
    )
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    let (slug, name, state, rate, ingest, currency, retention, updated_at, updated_by, _) = row;
    let today = today.unwrap_or(0);
    Ok(OrganizationSettings {
        slug,
        display_name: name,
        default_currency: currency.unwrap_or_else(|| "USD".into()),
        retention_months: retention.unwrap_or(84),
        state,
        limits: OrganizationLimits {
            rate_limit_per_minute: rate.map(i64::from),
            ingest_facts_per_day: ingest,
            ingest_facts_today: today,
        },
        updated_at: updated_at.map(rfc3339).unwrap_or_default(),
        updated_by: updated_by.unwrap_or_default(),
    })
}

async fn read(State(state): State<AppState>, p: Caller<ReadLedger>) -> Result<Json<OrganizationSettings>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let settings = load(&mut tx).await?;
    tx.rollback().await?;
    Ok(Json(settings))
}

async fn write(
    State(state): State<AppState>,
    p: Caller<Administer>,
    JsonBody(body): JsonBody<SettingsBody>,
) -> Result<Json<OrganizationSettings>, AppError> {
    let retention_months = i32::try_from(body.retention_months.get()).unwrap_or(i32::MAX);
    let mut tx = p.begin(&state.db).await?;
    let before = load(&mut tx).await?;
    let org = tx.org().as_uuid();
    sqlx::query("UPDATE organizations SET name = $2 WHERE org_id = $1")
        .bind(org)
        .bind(body.display_name.as_str())
        .execute(tx.conn())
        .await?;
    sqlx::query(
        "INSERT INTO org_settings (org_id, default_currency, retention_months, updated_by) VALUES ($1, $2, $3, $4)
         ON CONFLICT (org_id) DO UPDATE SET default_currency = EXCLUDED.default_currency,
                retention_months = EXCLUDED.retention_months, updated_by = EXCLUDED.updated_by,
                updated_at = EXCLUDED.updated_at",
    )
    .bind(org)
    .bind(body.default_currency.as_str())
    .bind(retention_months)
    .bind(p.actor())
    .execute(tx.conn())
    .await?;
    let after = load(&mut tx).await?;
    tx.audit_by(
        &p,
        "organization.settings",
        &after.slug,
        "",
        json!({
            "before": {"display_name": before.display_name, "default_currency": before.default_currency,
                       "retention_months": before.retention_months},
            "after": {"display_name": after.display_name, "default_currency": after.default_currency,
                      "retention_months": after.retention_months},
        }),
    )
    .await?;
    // Settings change no figure of any month.
    tx.commit_quiet().await?;
    Ok(Json(after))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn body(name: &str, currency: &str, months: i32) -> Result<SettingsBody, AppError> {
        let v = json!({"display_name": name, "default_currency": currency, "retention_months": months});
        crate::http::json_body(v.to_string().as_bytes())
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
        ] {
            let err = b.unwrap_err();
            assert!(matches!(&err, AppError::Invalid { field: f, .. } if f == field), "{field}: {err}");
        }
    }
}
