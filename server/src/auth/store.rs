//! An organization's standing as its credentials meet it: suspended or not, and its API request rate.

use gpuledger_core::ids::OrgId;

use crate::{db::OrgTx, error::AppError};

/// (slug, state) of `tx`'s organization, if it exists.
pub(crate) async fn state(tx: &mut OrgTx) -> Result<Option<(String, String)>, AppError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_as("SELECT slug, state FROM organizations WHERE org_id = $1")
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// Counts one API request of `org` against its operator-set rate limit (a fixed one-minute window per organization,
/// in this process's memory: with N replicas an organization may get up to N × the limit, like the sign-in limits).
pub fn check_rate(org: OrgId, per_minute: i32) -> Result<(), AppError> {
    use std::{
        collections::HashMap,
        sync::{Mutex, OnceLock, PoisonError},
        time::{Duration, Instant},
    };
    const WINDOW: Duration = Duration::from_secs(60);
    static COUNTS: OnceLock<Mutex<HashMap<OrgId, (Instant, u32)>>> = OnceLock::new();
    let now = Instant::now();
    let mut counts = COUNTS.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if counts.len() > 100_000 {
        counts.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
    }
    let entry = counts.entry(org).or_insert((now, 0));
    if now.duration_since(entry.0) >= WINDOW {
        *entry = (now, 0);
    }
    entry.1 = entry.1.saturating_add(1);
    let limit = u32::try_from(per_minute.max(1)).unwrap_or(1);
    if entry.1 > limit {
        let wait = WINDOW.saturating_sub(now.duration_since(entry.0)).as_secs().max(1);
        return Err(AppError::LimitReached {
            detail: format!(
                "API rate limit reached: this organization may make {limit} requests per minute \
                 (rate_limit_per_minute, set by its operator); try again in {wait} s"
            ),
            retry_after: wait,
        });
    }
    Ok(())
}

/// Refuses (403, naming the suspension) when `tx`'s organization is suspended: sign-in and setup links check it.
pub async fn ensure_active(tx: &mut OrgTx) -> Result<(), AppError> {
    match state(tx).await? {
        Some((slug, state)) if state != "active" => Err(AppError::Suspended(slug)),
        _ => Ok(()),
    }
}

/// The error for a credential of a suspended organization, when it is one (`None`: the organization is active or
/// unknown, so the credential was simply not valid).
pub async fn suspension(tx: &mut OrgTx) -> Result<Option<AppError>, AppError> {
    Ok(ensure_active(tx).await.err().filter(|e| matches!(e, AppError::Suspended(_))))
}
