//! SQL lookups several features share (kept here so no feature imports another's handlers for them). Every
//! function runs inside the caller's organization-scoped transaction.

use flate2::read::GzDecoder;
use gpuledger_core::{Period, bundle::Bundle, policy::CostPolicy};
use serde_json::Value;
use uuid::Uuid;

use crate::{db::OrgTx, error::AppError};

/// The approved policy that prices `period`, with its version filled in.
pub async fn policy_for(tx: &mut OrgTx, period: Period) -> Result<Option<CostPolicy>, AppError> {
    let org = tx.org().as_uuid();
    let row: Option<(i32, Value)> = sqlx::query_as(
        "SELECT version, document FROM cost_policies WHERE state = 'approved' AND effective_from <= $1 AND org_id = $2
         ORDER BY effective_from DESC LIMIT 1",
    )
    .bind(period.first_day())
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    let Some((version, doc)) = row else { return Ok(None) };
    let mut policy: CostPolicy = serde_json::from_value(doc).map_err(|e| {
        AppError::refused(
            "policy",
            format!("cost policy {version} as stored cannot be read ({e}): approve a corrected policy for the month"),
        )
    })?;
    policy.version = u32::try_from(version).map_err(|_| AppError::Internal("negative policy version".into()))?;
    Ok(Some(policy))
}

/// A tenant's or department's ID from its name or ID (`table` is `tenants` or `departments`); the error names
/// `field`.
pub async fn lookup_id(tx: &mut OrgTx, table: &str, field: &str, name_or_id: &str) -> Result<Uuid, AppError> {
    let sql = match table {
        "tenants" => "SELECT tenant_id FROM tenants WHERE (name = $1 OR tenant_id::text = $1) AND org_id = $2",
        _ => "SELECT department_id FROM departments WHERE (name = $1 OR department_id::text = $1) AND org_id = $2",
    };
    let org = tx.org().as_uuid();
    let id: Option<Uuid> = sqlx::query_scalar(sql).bind(name_or_id).bind(org).fetch_optional(tx.conn()).await?;
    id.ok_or_else(|| AppError::unknown(field, format!("{name_or_id:?} is not a known {}", &table[..table.len() - 1])))
}

/// Gives a namespace owners from the rules for namespaces without labels, wherever its history has no owner:
/// for each matching rule, most specific first (an exact name before a prefix, a longer prefix before a shorter, a
/// cluster's rule before an organization-wide one), the spans of the rule's validity within the namespace's life
/// that no entry covers get a `rule` entry. Labels and admin reassignments are never overwritten; a later label
/// still wins from its own instant. Allocations in the filled spans are marked updated, so closed months they
/// touch are corrected at the next close. Returns how many entries were added.
pub async fn fill_from_rules(tx: &mut OrgTx, namespace_uid: Uuid) -> Result<u64, AppError> {
    use time::OffsetDateTime;
    let org = tx.org().as_uuid();
    let ns: Option<(Uuid, String, OffsetDateTime, Option<OffsetDateTime>)> = sqlx::query_as(
        "SELECT cluster_id, name, created_at, deleted_at FROM namespaces WHERE namespace_uid = $1 AND org_id = $2",
    )
    .bind(namespace_uid)
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    let Some((cluster, name, created, deleted)) = ns else { return Ok(0) };
    let rules: Vec<(Uuid, OffsetDateTime, Option<OffsetDateTime>)> = sqlx::query_as(
        "SELECT tenant_id, valid_from, valid_to FROM namespace_rules
          WHERE org_id = $1 AND (cluster_id IS NULL OR cluster_id = $2)
            AND ((match = 'exact' AND pattern = $3) OR (match = 'prefix' AND starts_with($3, pattern)))
          ORDER BY (match = 'exact') DESC, length(pattern) DESC, (cluster_id IS NULL), valid_from",
    )
    .bind(org)
    .bind(cluster)
    .bind(&name)
    .fetch_all(tx.conn())
    .await?;
    let mut added = 0;
    for (tenant, from, to) in rules {
        let start = from.max(created);
        let end = match (to, deleted) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if end.is_some_and(|e| e <= start) {
            continue;
        }
        let taken: Vec<(OffsetDateTime, Option<OffsetDateTime>)> = sqlx::query_as(
            "SELECT valid_from, valid_to FROM namespace_ownership WHERE namespace_uid = $1 AND org_id = $2
              ORDER BY valid_from",
        )
        .bind(namespace_uid)
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
        for (gap_from, gap_to) in gaps(start, end, &taken) {
            sqlx::query(
                "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source)
                 VALUES ($1, $2, $3, $4, $5, 'rule')",
            )
            .bind(org)
            .bind(namespace_uid)
            .bind(gap_from)
            .bind(gap_to)
            .bind(tenant)
            .execute(tx.conn())
            .await?;
            touch_allocations(tx, namespace_uid, gap_from, gap_to).await?;
            added += 1;
        }
    }
    Ok(added)
}

/// Marks a namespace's allocations in `[from, until)` (`until` none: open) as updated after an ownership change,
/// so the next close recomputes the closed months they touch into corrections, as it does for late data.
pub async fn touch_allocations(
    tx: &mut OrgTx,
    namespace_uid: Uuid,
    from: time::OffsetDateTime,
    until: Option<time::OffsetDateTime>,
) -> Result<(), AppError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "UPDATE allocation_intervals SET updated_at = now()
          WHERE namespace_uid = $1 AND org_id = $4
            AND ($3::timestamptz IS NULL OR started_at < $3) AND (ended_at IS NULL OR ended_at > $2)",
    )
    .bind(namespace_uid)
    .bind(from)
    .bind(until)
    .bind(org)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The parts of `[start, end)` (`end` none: open) that no entry of `taken` (sorted by start) covers.
fn gaps(
    start: time::OffsetDateTime,
    end: Option<time::OffsetDateTime>,
    taken: &[(time::OffsetDateTime, Option<time::OffsetDateTime>)],
) -> Vec<(time::OffsetDateTime, Option<time::OffsetDateTime>)> {
    let mut out = Vec::new();
    let mut cursor = Some(start);
    for (from, to) in taken {
        let Some(c) = cursor else { break };
        if end.is_some_and(|e| *from >= e) {
            break;
        }
        if *from > c {
            out.push((c, Some(end.map_or(*from, |e| e.min(*from)))));
        }
        cursor = to.as_ref().map(|t| c.max(*t));
    }
    if let Some(c) = cursor
        && end.is_none_or(|e| c < e)
    {
        out.push((c, end));
    }
    out
}

/// Refuses giving something new to a retired tenant or department (`table`: `tenants` or `departments`) from `at`
/// on; the error names `field`.
pub async fn refuse_retired(
    tx: &mut OrgTx,
    table: &str,
    field: &str,
    id: Uuid,
    at: time::OffsetDateTime,
) -> Result<(), AppError> {
    let sql = match table {
        "tenants" => "SELECT retired_at FROM tenants WHERE tenant_id = $1 AND org_id = $2",
        _ => "SELECT retired_at FROM departments WHERE department_id = $1 AND org_id = $2",
    };
    let retired: Option<time::OffsetDateTime> =
        sqlx::query_scalar(sql).bind(id).bind(tx.org().as_uuid()).fetch_one(tx.conn()).await?;
    match retired {
        Some(r) if r <= at => {
            Err(AppError::refused(field, format!("is retired since {}", gpuledger_core::time_fmt::rfc3339(r))))
        }
        _ => Ok(()),
    }
}

/// A period's state: `open`, `closing` or `closed`.
pub async fn period_state(tx: &mut OrgTx, period: Period) -> Result<gpuledger_api::states::PeriodState, AppError> {
    let org = tx.org().as_uuid();
    let s: Option<sqlx::types::Text<gpuledger_api::states::PeriodState>> =
        sqlx::query_scalar("SELECT state FROM periods WHERE period = $1 AND org_id = $2")
            .bind(period.first_day())
            .bind(org)
            .fetch_optional(tx.conn())
            .await?;
    Ok(s.map_or(gpuledger_api::states::PeriodState::Open, |s| s.0))
}

/// How a closed period's bundle is stored: in the period's row (months closed before migration 41), or in chunks
/// (`period_bundle_chunks`, written by the close from its temporary file so that its memory does not grow with the
/// fleet).
pub(crate) enum StoredBundle {
    /// The whole gzip stream.
    Inline(Vec<u8>),
    /// `chunks` rows `0..chunks` of the gzip stream, `bytes` in all.
    Chunks { chunks: i32, bytes: i64 },
}

/// Where `period`'s bundle is, if the period is closed.
pub(crate) async fn bundle_layout(tx: &mut OrgTx, period: Period) -> Result<Option<StoredBundle>, AppError> {
    let org = tx.org().as_uuid();
    type Row = (Option<Vec<u8>>, Option<i32>, Option<i64>);
    let row: Option<Row> = sqlx::query_as(
        "SELECT bundle_gz, bundle_chunks, bundle_bytes FROM periods WHERE period = $1 AND state = 'closed' AND org_id = $2",
    )
    .bind(period.first_day())
    .bind(org)
    .fetch_optional(tx.conn())
    .await?;
    match row {
        None => Ok(None),
        Some((Some(gz), _, _)) => Ok(Some(StoredBundle::Inline(gz))),
        Some((None, Some(chunks), Some(bytes))) => Ok(Some(StoredBundle::Chunks { chunks, bytes })),
        Some(_) => Err(AppError::Internal(format!("closed period {period} has no bundle stored"))),
    }
}

/// Chunk `seq` of `period`'s bundle.
pub(crate) async fn bundle_chunk(tx: &mut OrgTx, period: Period, seq: i32) -> Result<Vec<u8>, AppError> {
    let org = tx.org().as_uuid();
    let chunk: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT bytes FROM period_bundle_chunks WHERE org_id = $1 AND period = $2 AND seq = $3")
            .bind(org)
            .bind(period.first_day())
            .bind(seq)
            .fetch_optional(tx.conn())
            .await?;
    chunk.ok_or_else(|| AppError::Internal(format!("the bundle of {period} lacks its chunk {seq}")))
}

/// The stored (gzipped) bundle of a closed period, whole.
async fn stored_gz(tx: &mut OrgTx, period: Period) -> Result<Option<Vec<u8>>, AppError> {
    match bundle_layout(tx, period).await? {
        None => Ok(None),
        Some(StoredBundle::Inline(gz)) => Ok(Some(gz)),
        Some(StoredBundle::Chunks { chunks, bytes }) => {
            let mut gz = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0));
            for seq in 0..chunks {
                gz.extend_from_slice(&bundle_chunk(tx, period, seq).await?);
            }
            if gz.len() as i64 != bytes {
                return Err(AppError::Internal(format!(
                    "the bundle of {period} holds {} bytes in its chunks, not the {bytes} it was closed with",
                    gz.len()
                )));
            }
            Ok(Some(gz))
        }
    }
}

/// `T` read from a stored bundle through the decompressor: the JSON of a large month is never held whole. Decoded
/// on the blocking pool: a 100,000-GPU month's bundle (460 MB compressed) takes minutes, and on a runtime thread it
/// stalled every other request of the process, time limits included (measured: a 30 s limit answered after 130 s).
pub(crate) async fn stored_as<T: serde::de::DeserializeOwned + Send + 'static>(
    tx: &mut OrgTx,
    period: Period,
) -> Result<Option<T>, AppError> {
    let Some(gz) = stored_gz(tx, period).await? else { return Ok(None) };
    tokio::task::spawn_blocking(move || {
        serde_json::from_reader(std::io::BufReader::with_capacity(1 << 16, GzDecoder::new(gz.as_slice())))
            .map(Some)
            .map_err(|e| AppError::Internal(format!("stored bundle of {period}: {e}")))
    })
    .await
    .map_err(|e| AppError::Internal(format!("stored bundle of {period}: {e}")))?
}

/// The stored bundle of a closed period.
pub async fn stored_bundle(tx: &mut OrgTx, period: Period) -> Result<Option<Bundle>, AppError> {
    stored_as(tx, period).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use time::macros::datetime;

    use super::gaps;

    #[test]
    fn gaps_are_what_no_entry_covers() {
        let d = |day: u8| {
            time::Date::from_calendar_date(2026, time::Month::September, day).unwrap().midnight().assume_utc()
        };
        assert_eq!(gaps(d(1), None, &[]), vec![(d(1), None)]);
        assert_eq!(gaps(d(1), Some(d(30)), &[(d(5), Some(d(10)))]), vec![(d(1), Some(d(5))), (d(10), Some(d(30)))]);
        assert_eq!(gaps(d(1), None, &[(d(1), None)]), vec![]);
        assert_eq!(gaps(d(5), None, &[(d(1), Some(d(10))), (d(20), None)]), vec![(d(10), Some(d(20)))]);
        assert_eq!(gaps(d(1), Some(d(8)), &[(d(10), None)]), vec![(d(1), Some(d(8)))]);
        assert_eq!(gaps(datetime!(2026-09-01 0:00 UTC), Some(d(3)), &[(d(1), Some(d(2)))]), vec![(d(2), Some(d(3)))]);
    }
}
