//! The SQL of organizations' lifecycle: every statement runs in the organization's own transaction; what only the
//! operator may change goes through the SECURITY DEFINER functions of migration 16.

use gpuledger_core::ids::OrgId;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::Removed;
use crate::{
    auth::{random_secret, sha256},
    db::{Database, OrgTx},
    error::AppError,
};

/// The database's own wording of a refusal raised by migration 16's functions.
fn database_message(e: &sqlx::Error) -> Option<(String, String)> {
    let d = e.as_database_error()?;
    Some((d.code().map(|c| c.to_string()).unwrap_or_default(), d.message().to_string()))
}

/// Inserts the organization row (`tx` is scoped to the new id). A slug in use, or one a deleted organization had,
/// is refused naming `slug`.
pub(super) async fn create_org(tx: &mut OrgTx, slug: &str, name: &str) -> Result<(), AppError> {
    let id = tx.org().as_uuid();
    let created = sqlx::query_scalar::<_, Uuid>("SELECT gpuledger_operator_create_org($1, $2, $3)")
        .bind(id)
        .bind(slug)
        .bind(name)
        .fetch_one(tx.conn())
        .await;
    match created {
        Ok(_) => Ok(()),
        Err(e) => match e.as_database_error().filter(|d| d.code().as_deref() == Some("23505")) {
            Some(d) if d.constraint() == Some("retired_slugs_pkey") => Err(AppError::invalid(
                "slug",
                format!("{slug:?} belonged to a deleted organization: a slug is taken once, choose another"),
            )),
            Some(_) => Err(AppError::invalid("slug", format!("{slug:?} is taken by another organization"))),
            None => Err(e.into()),
        },
    }
}

/// The settings row every organization has.
pub(super) async fn init_settings(tx: &mut OrgTx, actor: &str) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    sqlx::query("INSERT INTO org_settings (org_id, updated_by) VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .bind(org)
        .bind(actor)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// A new one-time setup link: returns the token (`gls_<org>_<secret>`, shown once) and its expiry; only the token's
/// SHA-256 is stored.
pub(super) async fn issue_setup_link(
    tx: &mut OrgTx,
    actor: &str,
    ttl: time::Duration,
) -> Result<(String, OffsetDateTime), AppError> {
    let org = tx.org();
    let token = format!("gls_{}_{}", org.as_uuid().simple(), random_secret());
    let expires_at: OffsetDateTime = sqlx::query_scalar(
        "INSERT INTO setup_links (org_id, link_id, secret_sha256, created_by, expires_at)
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) RETURNING expires_at",
    )
    .bind(org.as_uuid())
    .bind(Uuid::new_v4())
    .bind(sha256(&token))
    .bind(actor)
    .bind(ttl.whole_seconds() as f64)
    .fetch_one(tx.conn())
    .await?;
    Ok((token, expires_at))
}

/// The organization a setup token names (`gls_<org, 32 hex>_<secret, 64 hex>`), if it is well formed.
pub(super) fn setup_token_org(token: &str) -> Option<OrgId> {
    let rest = token.strip_prefix("gls_")?;
    let (org, secret) = rest.split_once('_')?;
    if secret.len() != 64 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Uuid::try_parse(org).ok().map(OrgId::from_uuid)
}

/// What became of a setup link presented once more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LinkUse {
    /// Consumed now: the link's id.
    Consumed(Uuid),
    /// Already used, at this time.
    Used(OffsetDateTime),
    /// Expired at this time, unused.
    Expired(OffsetDateTime),
    /// Not one of the organization's links.
    Unknown,
}

/// Consumes a setup link (at most once, even under concurrency: only one UPDATE can set `used_at`).
pub(super) async fn use_setup_link(tx: &mut OrgTx, token: &str, source: &str) -> Result<LinkUse, AppError> {
    let org = tx.org().as_uuid();
    let hash = sha256(token);
    let consumed: Option<Uuid> = sqlx::query_scalar(
        "UPDATE setup_links SET used_at = now(), used_from = $3
          WHERE org_id = $1 AND secret_sha256 = $2 AND used_at IS NULL AND expires_at > now()
          RETURNING link_id",
    )
    .bind(org)
    .bind(&hash)
    .bind(source)
    .fetch_optional(tx.conn())
    .await?;
    if let Some(id) = consumed {
        return Ok(LinkUse::Consumed(id));
    }
    let row: Option<(Option<OffsetDateTime>, OffsetDateTime)> =
        sqlx::query_as("SELECT used_at, expires_at FROM setup_links WHERE org_id = $1 AND secret_sha256 = $2")
            .bind(org)
            .bind(&hash)
            .fetch_optional(tx.conn())
            .await?;
    Ok(match row {
        Some((Some(used), _)) => LinkUse::Used(used),
        Some((None, expired)) => LinkUse::Expired(expired),
        None => LinkUse::Unknown,
    })
}

/// Writes the operator log (the operator's table, through its SECURITY DEFINER function), in `tx`.
pub(super) async fn operator_log(
    tx: &mut OrgTx,
    actor: &str,
    action: &str,
    slug: &str,
    details: Value,
) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    sqlx::query("SELECT gpuledger_operator_log($1, $2, $3, $4, $5)")
        .bind(actor)
        .bind(action)
        .bind(slug)
        .bind(org)
        .bind(details)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// (clusters, users, newest agent contact) of `tx`'s organization.
pub(super) async fn counts(tx: &mut OrgTx) -> Result<(i64, i64, Option<OffsetDateTime>), AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT (SELECT count(*) FROM clusters WHERE org_id = $1), (SELECT count(*) FROM users WHERE org_id = $1),
                (SELECT max(last_seen_at) FROM agent_contacts WHERE org_id = $1)",
    )
    .bind(org)
    .fetch_one(tx.conn())
    .await?)
}

/// Sets the state (operator's function); returns the previous one.
pub(super) async fn set_state(tx: &mut OrgTx, state: &str, reason: &str) -> Result<String, AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT gpuledger_operator_set_state($1, $2, $3)")
        .bind(org)
        .bind(state)
        .bind(reason)
        .fetch_one(tx.conn())
        .await?)
}

/// (API requests per minute, ingest facts per day) in force.
pub(super) async fn limits(tx: &mut OrgTx) -> Result<(Option<i64>, Option<i64>), AppError> {
    let org = tx.org().as_uuid();
    let (rate, ingest): (Option<i32>, Option<i64>) =
        sqlx::query_as("SELECT rate_limit_per_minute, ingest_facts_per_day FROM organizations WHERE org_id = $1")
            .bind(org)
            .fetch_one(tx.conn())
            .await?;
    Ok((rate.map(i64::from), ingest))
}

/// Sets the limits (operator's function).
pub(super) async fn set_limits(tx: &mut OrgTx, rate: Option<i64>, ingest: Option<i64>) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    let rate = rate.map(|r| i32::try_from(r).unwrap_or(i32::MAX));
    sqlx::query("SELECT gpuledger_operator_set_limits($1, $2, $3)")
        .bind(org)
        .bind(rate)
        .bind(ingest)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// (state, time of the newest export) before a delete.
pub(super) async fn delete_preconditions(tx: &mut OrgTx) -> Result<(String, Option<OffsetDateTime>), AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT o.state, (SELECT max(e.exported_at) FROM org_exports e WHERE e.org_id = $1)
           FROM organizations o WHERE o.org_id = $1",
    )
    .bind(org)
    .fetch_one(tx.conn())
    .await?)
}

/// The fingerprint of every row the organization holds (see migration 16).
pub(super) async fn fingerprint(tx: &mut OrgTx) -> Result<String, AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT gpuledger_org_fingerprint($1)").bind(org).fetch_one(tx.conn()).await?)
}

/// Keeps the slug from ever being given out again.
pub(super) async fn retire_slug(tx: &mut OrgTx, slug: &str, actor: &str) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    sqlx::query("SELECT gpuledger_operator_retire_slug($1, $2, $3)")
        .bind(org)
        .bind(slug)
        .bind(actor)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Removes every row of the organization (see `gpuledger_org_erase`); a refusal of the database (not suspended,
/// never exported, changed since the export) is a conflict in its words.
pub(super) async fn erase(tx: &mut OrgTx) -> Result<Vec<Removed>, AppError> {
    let org = tx.org().as_uuid();
    let rows: Result<Vec<(String, i64)>, sqlx::Error> =
        sqlx::query_as("SELECT table_name, removed FROM gpuledger_org_erase($1)").bind(org).fetch_all(tx.conn()).await;
    match rows {
        Ok(rows) => Ok(rows.into_iter().map(|(table, rows)| Removed { table, rows }).collect()),
        Err(e) => match database_message(&e) {
            Some((code, message)) if code == "55000" => Err(AppError::Conflict(message)),
            _ => Err(e.into()),
        },
    }
}

/// The tables that hold an organization's rows, from the catalog (every table with an `org_id` column).
pub(super) async fn org_tables(tx: &mut OrgTx) -> Result<Vec<String>, AppError> {
    Ok(sqlx::query_scalar("SELECT table_name FROM gpuledger_org_tables()").fetch_all(tx.conn()).await?)
}

/// A table's columns, in order, and its primary key's columns, in key order.
pub(super) async fn columns(tx: &mut OrgTx, table: &str) -> Result<(Vec<String>, Vec<String>), AppError> {
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_attribute a
          WHERE a.attrelid = to_regclass(format('public.%I', $1::text)) AND a.attnum > 0 AND NOT a.attisdropped
          ORDER BY a.attnum",
    )
    .bind(table)
    .fetch_all(tx.conn())
    .await?;
    let key: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_index i
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey::int2[])
          WHERE i.indrelid = to_regclass(format('public.%I', $1::text)) AND i.indisprimary
          ORDER BY array_position(i.indkey::int2[], a.attnum)",
    )
    .bind(table)
    .fetch_all(tx.conn())
    .await?;
    Ok((columns, key))
}

/// Records an export (its fingerprint, read in the export's own snapshot).
pub(super) async fn record_export(
    tx: &mut OrgTx,
    actor: &str,
    rows: i64,
    tables: i32,
    fingerprint: &str,
    file_sha256: &str,
) -> Result<Uuid, AppError> {
    let org = tx.org().as_uuid();
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO org_exports (org_id, export_id, exported_by, row_count, table_count, fingerprint, file_sha256)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(org)
    .bind(id)
    .bind(actor)
    .bind(rows)
    .bind(tables)
    .bind(fingerprint)
    .bind(file_sha256)
    .execute(tx.conn())
    .await?;
    Ok(id)
}

/// What the daily ingest count said about a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestCount {
    /// Within the limit: facts counted today, this batch included.
    Accepted(i64),
    /// Over the limit: facts counted today before this batch (which is not counted).
    Refused(i64),
}

/// Counts `facts` against the organization's daily ingest limit (facts received per UTC day), in a short
/// transaction of its own so concurrent batches do not wait on each other's storing. A refused batch is not
/// counted; a counted batch that later fails stays counted.
pub async fn count_ingest(db: &Database, org: OrgId, facts: i64, limit: i64) -> Result<IngestCount, AppError> {
    let mut tx = db.begin_org(org).await?;
    let counted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO ingest_daily (org_id, day, facts)
         SELECT $1, (now() AT TIME ZONE 'UTC')::date, $2 WHERE $2 <= $3
         ON CONFLICT (org_id, day) DO UPDATE SET facts = ingest_daily.facts + EXCLUDED.facts
          WHERE ingest_daily.facts + EXCLUDED.facts <= $3
         RETURNING facts",
    )
    .bind(org.as_uuid())
    .bind(facts)
    .bind(limit)
    .fetch_optional(tx.conn())
    .await?;
    let outcome = match counted {
        Some(today) => IngestCount::Accepted(today),
        None => {
            let today: Option<i64> = sqlx::query_scalar(
                "SELECT facts FROM ingest_daily WHERE org_id = $1 AND day = (now() AT TIME ZONE 'UTC')::date",
            )
            .bind(org.as_uuid())
            .fetch_optional(tx.conn())
            .await?;
            IngestCount::Refused(today.unwrap_or(0))
        }
    };
    tx.commit_quiet().await?;
    Ok(outcome)
}

/// An organization's settings as stored: (slug, name, state, rate limit, ingest limit, default currency, retention
/// months, updated at, updated by, 0, platform cost centre, platform GL account, time zone).
pub(super) type SettingsRow = (
    String,
    String,
    sqlx::types::Text<gpuledger_api::states::OrgState>,
    Option<i32>,
    Option<i64>,
    Option<String>,
    Option<i32>,
    Option<OffsetDateTime>,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// `tx`'s organization with its settings (their columns `NULL` when its settings row is missing).
pub(super) async fn settings(tx: &mut OrgTx) -> Result<Option<SettingsRow>, AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as(
        "SELECT o.slug, o.name, o.state, o.rate_limit_per_minute, o.ingest_facts_per_day,
                s.default_currency::text, s.retention_months, s.updated_at, s.updated_by, 0::bigint,
                s.platform_cost_center, s.platform_gl_account, s.time_zone
           FROM organizations o LEFT JOIN org_settings s ON s.org_id = o.org_id
          WHERE o.org_id = $1",
    )
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// The facts ingested today (UTC), if any were.
pub(super) async fn ingested_today(tx: &mut OrgTx) -> Result<Option<i64>, AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(
        "SELECT d.facts FROM ingest_daily d WHERE d.org_id = $1 AND d.day = (now() AT TIME ZONE 'UTC')::date",
    )
    .bind(org)
    .fetch_optional(tx.conn())
    .await?)
}

/// Sets the organization's display name.
pub(super) async fn set_display_name(tx: &mut OrgTx, name: &str) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    sqlx::query("UPDATE organizations SET name = $2 WHERE org_id = $1").bind(org).bind(name).execute(tx.conn()).await?;
    Ok(())
}

/// Writes the organization's settings; each platform account is (whether to set it, its value): one not set keeps
/// what is stored.
pub(super) async fn upsert_settings(
    tx: &mut OrgTx,
    currency: &str,
    retention_months: i32,
    updated_by: &str,
    (set_cost_center, cost_center): (bool, Option<&str>),
    (set_gl_account, gl_account): (bool, Option<&str>),
) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO org_settings (org_id, default_currency, retention_months, updated_by, platform_cost_center,
                                   platform_gl_account)
         VALUES ($1, $2, $3, $4, $6, $8)
         ON CONFLICT (org_id) DO UPDATE SET default_currency = EXCLUDED.default_currency,
                retention_months = EXCLUDED.retention_months, updated_by = EXCLUDED.updated_by,
                updated_at = EXCLUDED.updated_at,
                platform_cost_center = CASE WHEN $5 THEN $6 ELSE org_settings.platform_cost_center END,
                platform_gl_account = CASE WHEN $7 THEN $8 ELSE org_settings.platform_gl_account END",
    )
    .bind(org)
    .bind(currency)
    .bind(retention_months)
    .bind(updated_by)
    .bind(set_cost_center)
    .bind(cost_center)
    .bind(set_gl_account)
    .bind(gl_account)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Sets the organization's time zone.
pub(super) async fn set_time_zone(tx: &mut OrgTx, zone: &str) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    sqlx::query("UPDATE org_settings SET time_zone = $2 WHERE org_id = $1")
        .bind(org)
        .bind(zone)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// (name, created at, state) of `tx`'s organization.
pub(super) async fn organization(tx: &mut OrgTx) -> Result<(String, OffsetDateTime, String), AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as("SELECT name, created_at, state FROM organizations WHERE org_id = $1")
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// `name` as a quoted SQL identifier.
pub(super) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The organization's rows in `table`.
pub(super) async fn row_count(tx: &mut OrgTx, table: &str) -> Result<i64, AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar(&format!("SELECT count(*) FROM {} x WHERE x.org_id = $1", ident(table)))
        .bind(org)
        .fetch_one(tx.conn())
        .await?)
}

/// Hands each of the organization's rows in `table` to `each` as an export line (`{"table", "row"}`, the columns in
/// `nulls` written as they are there), in `key` order; the number of rows.
pub(super) async fn export_rows(
    tx: &mut OrgTx,
    table: &str,
    key: &[String],
    nulls: serde_json::Map<String, Value>,
    mut each: impl FnMut(&str) -> Result<(), AppError>,
) -> Result<i64, AppError> {
    use futures::TryStreamExt;
    let org = tx.org().as_uuid();
    let order = if key.is_empty() {
        String::new()
    } else {
        format!(" ORDER BY {}", key.iter().map(|k| format!("x.{}", ident(k))).collect::<Vec<_>>().join(", "))
    };
    let sql = format!(
        "SELECT json_build_object('table', $2::text, 'row', to_jsonb(x) || $3::jsonb)::text FROM {} x \
                 WHERE x.org_id = $1{order}",
        ident(table)
    );
    let mut stream =
        sqlx::query_scalar::<_, String>(&sql).bind(org).bind(table).bind(Value::Object(nulls)).fetch(tx.conn());
    let mut rows = 0i64;
    while let Some(text) = stream.try_next().await? {
        each(&text)?;
        rows += 1;
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn setup_tokens_name_their_organization() {
        let org = Uuid::new_v4();
        let token = format!("gls_{}_{}", org.simple(), "ab".repeat(32));
        assert_eq!(setup_token_org(&token), Some(OrgId::from_uuid(org)));
        assert_eq!(setup_token_org(&format!("gls_{}_{}", org.simple(), "ab")), None);
        assert_eq!(setup_token_org(&format!("glt_{}_{}", org.simple(), "ab".repeat(32))), None);
        assert_eq!(setup_token_org("gls_nope_x"), None);
    }
}
