//! SQL of the organization's calendar: its zone, and month instants as PostgreSQL's zone database computes them.

use time::{Date, OffsetDateTime};

use crate::{db::OrgTx, error::AppError};

/// The instants of the month starting `start` (a first day): (zone, first instant, first instant after, the end of
/// the closed month before it). A closed month's are its stored ones (UTC for one closed before calendars existed);
/// an open month's are local midnights in the organization's zone now.
pub(super) async fn month_instants(
    tx: &mut OrgTx,
    start: Date,
) -> Result<(String, OffsetDateTime, OffsetDateTime, Option<OffsetDateTime>), AppError> {
    Ok(sqlx::query_as(
        // A month closed before calendars existed has no stored instants: it closed under UTC.
        "WITH z AS (SELECT COALESCE((SELECT time_zone FROM org_settings WHERE org_id = $1), 'UTC') AS tz),
              closed AS (SELECT COALESCE(time_zone, 'UTC') AS time_zone, continues_from,
                                COALESCE(starts_at, period::timestamp AT TIME ZONE 'UTC') AS starts_at,
                                COALESCE(ends_at, (period + interval '1 month')::timestamp AT TIME ZONE 'UTC') AS ends_at
                           FROM periods WHERE org_id = $1 AND period = $2 AND state = 'closed'),
              prev AS (SELECT COALESCE(ends_at, (period + interval '1 month')::timestamp AT TIME ZONE 'UTC') AS ends_at
                         FROM periods
                        WHERE org_id = $1 AND period = ($2::date - interval '1 month')::date AND state = 'closed')
         SELECT COALESCE((SELECT time_zone FROM closed), z.tz),
                COALESCE((SELECT starts_at FROM closed), ($2::date::timestamp AT TIME ZONE z.tz)),
                COALESCE((SELECT ends_at FROM closed), (($2::date + interval '1 month')::timestamp AT TIME ZONE z.tz)),
                CASE WHEN EXISTS (SELECT 1 FROM closed) THEN (SELECT continues_from FROM closed)
                     ELSE (SELECT ends_at FROM prev) END
           FROM z",
    )
    .bind(tx.org().as_uuid())
    .bind(start)
    .fetch_one(tx.conn())
    .await?)
}

/// The organization's zone setting (`None`: never set).
pub(super) async fn zone(tx: &mut OrgTx) -> Result<Option<String>, AppError> {
    Ok(sqlx::query_scalar("SELECT time_zone FROM org_settings WHERE org_id = $1")
        .bind(tx.org().as_uuid())
        .fetch_optional(tx.conn())
        .await?)
}

/// The day `at` falls on in the organization's zone now.
pub(super) async fn local_day(tx: &mut OrgTx, at: OffsetDateTime) -> Result<Date, AppError> {
    Ok(sqlx::query_scalar(
        "SELECT ($1::timestamptz AT TIME ZONE COALESCE((SELECT time_zone FROM org_settings WHERE org_id = $2), 'UTC'))::date",
    )
    .bind(at)
    .bind(tx.org().as_uuid())
    .fetch_one(tx.conn())
    .await?)
}

/// Whether PostgreSQL's zone database knows `name`.
pub(super) async fn zone_known(tx: &mut OrgTx, name: &str) -> Result<bool, AppError> {
    Ok(sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $1)")
        .bind(name)
        .fetch_one(tx.conn())
        .await?)
}
