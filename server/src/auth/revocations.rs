//! What this process learned about credentials ending, for the answers it keeps (the page cache): a token
//! revoked here ends every kept identity at once; a credential refused here (revoked or ended elsewhere, expired)
//! ends its own kept identity at once, whichever path refused it. Other replicas learn within
//! the page cache's `SESSION_RECHECK` by asking the database again.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// Bumped whenever this process revokes a credential (tokens are kept by credential, not by id, so every kept
/// identity is checked again — revocations are rare).
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Credentials (their SHA-256) refused by this process, with when.
static REFUSED: Mutex<Option<HashMap<[u8; 32], Instant>>> = Mutex::new(None);
/// Most refusals remembered: beyond it, the list is emptied and every kept identity checked again (a flood of bad
/// credentials costs re-checks, never a stale answer).
const MAX_REFUSED: usize = 10_000;
/// How long a refusal is remembered: longer than any kept identity lives unchecked.
const REMEMBER: Duration = Duration::from_secs(10);

/// The SHA-256 of a credential as presented (the `Authorization` header's value, or the session cookie's).
pub fn digest(credential: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(credential.as_bytes()).into()
}

/// The revocation epoch now: a kept identity checked under another epoch is checked again.
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// This process revoked a credential (a token, a join token exchanged).
pub fn revoked() {
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// This process refused `credential` (its digest): its kept identity, if any, ends now.
pub fn refused(credential: [u8; 32]) {
    let mut guard = REFUSED.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if map.len() >= MAX_REFUSED {
        map.retain(|_, at| at.elapsed() < REMEMBER);
        if map.len() >= MAX_REFUSED {
            map.clear();
            revoked();
        }
    }
    map.insert(credential, Instant::now());
}

/// Whether an identity kept for `credential`, checked at `checked` under revocation epoch `epoch`, may still be used:
/// no revocation by this process since, and the credential not refused here since.
pub fn live(credential: &[u8; 32], checked: Instant, epoch: u64) -> bool {
    epoch == self::epoch() && !refused_since(credential, checked)
}

/// Whether `credential` was refused by this process at or after `since`.
pub fn refused_since(credential: &[u8; 32], since: Instant) -> bool {
    let guard = REFUSED.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().and_then(|m| m.get(credential)).is_some_and(|at| *at >= since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_after_a_check_is_seen_and_one_before_is_not() {
        let credential = digest("Bearer glt_example");
        let before = Instant::now();
        refused(credential);
        assert!(refused_since(&credential, before));
        let after = Instant::now() + Duration::from_millis(1);
        assert!(!refused_since(&credential, after), "a check made after the refusal stands");
        assert!(!refused_since(&digest("Bearer other"), before));
    }

    #[test]
    fn a_revocation_moves_the_epoch() {
        let e = epoch();
        revoked();
        assert!(epoch() > e);
    }
}
