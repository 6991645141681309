//! Agents' tokens kept for a second: a fleet's node agents all send with their cluster's token, a request a node and
//! minute each — 20 a second at 10,000 GPUs, more when they catch up — and the token's check was one of the two
//! transactions of each small batch. What is kept is the principal the database gave for the credential (its
//! SHA-256), for at most [`AGENT_RECHECK`]; a token revoked, or an organization suspended, by this process ends it at
//! once (`revocations`), by another process within that second. The batch's own transaction still checks its
//! cluster's registration every time.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use axum::http::{HeaderMap, header};

use super::{Principal, authenticate, revocations, source};
use crate::{db::Database, error::AppError};

/// How long an agent's principal is used without asking the database again.
pub const AGENT_RECHECK: Duration = Duration::from_secs(1);
/// Most credentials kept (agents' tokens are one or a few per cluster); past it the stale ones are dropped, and if
/// that is not enough, all.
const MAX_KEPT: usize = 10_000;

struct Kept {
    principal: Principal,
    checked: Instant,
    epoch: u64,
}

static KEPT: Mutex<Option<HashMap<[u8; 32], Kept>>> = Mutex::new(None);

/// [`authenticate`] for the ingest endpoint: an agent token checked in the last [`AGENT_RECHECK`] (and not revoked
/// or refused here since) is not checked again. Any other credential is authenticated as usual and not kept.
pub async fn authenticate_agent(db: &Database, headers: &HeaderMap) -> Result<Principal, AppError> {
    let Some(credential) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return authenticate(db, headers).await;
    };
    let digest = revocations::digest(credential);
    {
        let guard = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(kept) = guard.as_ref().and_then(|m| m.get(&digest))
            && kept.checked.elapsed() < AGENT_RECHECK
            && revocations::live(&digest, kept.checked, kept.epoch)
        {
            return Ok(Principal { source: source(headers), ..kept.principal.clone() });
        }
    }
    // The instant and epoch from before the check: a revocation during it is not missed.
    let (checked, epoch) = (Instant::now(), revocations::epoch());
    let principal = authenticate(db, headers).await?;
    if principal.agent_cluster().is_some() {
        let mut guard = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        let map = guard.get_or_insert_with(HashMap::new);
        if map.len() >= MAX_KEPT {
            map.retain(|_, k| k.checked.elapsed() < AGENT_RECHECK);
            if map.len() >= MAX_KEPT {
                map.clear();
            }
        }
        map.insert(digest, Kept { principal: principal.clone(), checked, epoch });
    }
    Ok(principal)
}
