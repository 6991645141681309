//! A full (or failing) disk under the spool holds the agent instead of ending it: the write is retried with a
//! growing pause, so the watch waits (and re-lists if its stream expires meanwhile) and nothing is lost. Found by the
//! fault simulator (`scripts/chaos`): the cluster agent used to exit on `ENOSPC`.

use std::time::Duration;

/// Runs `write` until it succeeds; an error that holds no I/O error (a poisoned lock, a bug) ends the wait.
pub async fn until_written<T>(what: &str, mut write: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let mut pause = Duration::from_millis(250);
    let mut failures = 0u32;
    loop {
        match write() {
            Ok(v) => {
                if failures > 0 {
                    tracing::info!(what, failures, "written again after the disk recovered");
                }
                return Ok(v);
            }
            Err(e) if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some()) => {
                failures += 1;
                // Once, then every 20th failure: a full disk must not fill the log too.
                if failures == 1 || failures.is_multiple_of(20) {
                    tracing::warn!(what, error = %format!("{e:#}"), failures, "cannot write; holding until the disk recovers");
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn io_errors_are_retried_and_others_end_the_wait() {
        let mut left = 3;
        let v = until_written("test", || {
            if left > 0 {
                left -= 1;
                Err(anyhow::Error::from(std::io::Error::from_raw_os_error(28)).context("spool append"))
            } else {
                Ok(7)
            }
        })
        .await
        .unwrap();
        assert_eq!((v, left), (7, 0));
        let e = until_written("test", || -> anyhow::Result<()> { Err(anyhow::anyhow!("spool lock poisoned")) }).await;
        assert!(e.unwrap_err().to_string().contains("poisoned"));
    }

    fn nearly_full(dir: &std::path::Path) -> std::sync::Arc<std::sync::Mutex<crate::spool::Spool>> {
        let cfg = crate::spool::SpoolConfig { max_bytes: 10_000, segment_bytes: 1_000 };
        let mut spool = crate::spool::Spool::open(dir, cfg).unwrap();
        for _ in 0..90 {
            spool.append(&[b'x'; 90]).unwrap();
        }
        std::sync::Arc::new(std::sync::Mutex::new(spool))
    }

    /// While deliveries progress, an append that would pass the cap waits for them instead of dropping.
    #[tokio::test]
    async fn appends_wait_for_room_while_the_server_takes_facts() {
        let dir = std::env::temp_dir().join(format!("gl-room-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spool = nearly_full(&dir);
        let used = spool.lock().unwrap().disk_bytes();
        assert!(used > 8_000, "{used}");
        let mut room = Room::new(Duration::from_secs(30));
        // A sender acknowledges everything after a moment: the wait ends then, not before.
        let s = spool.clone();
        let started = std::time::Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let mut s = s.lock().unwrap();
            let last = s.acked() + s.pending_count();
            s.ack(last).unwrap();
        });
        room.wait(&spool, 2_000).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(350), "{:?}", started.elapsed());
        assert_eq!(spool.lock().unwrap().dropped_total(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// When nothing is delivered (the server is away), the wait ends after the stall bound.
    #[tokio::test]
    async fn a_stalled_server_does_not_hold_appends_forever() {
        let dir = std::env::temp_dir().join(format!("gl-room-stalled-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spool = nearly_full(&dir);
        let mut room = Room::new(Duration::from_millis(300));
        let started = std::time::Instant::now();
        room.wait(&spool, 2_000).await.unwrap();
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3), "{waited:?}");
        // Room enough: no wait at all.
        let started = std::time::Instant::now();
        room.wait(&spool, 10).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(50));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Holds the cluster agent's appends while its spool is nearly full *and the server is taking facts*, so listing a
/// large cluster (or re-listing it after a drop) never runs ahead of delivery by more than the cap and drops facts
/// the server could have had — which, re-listed again, overflowed again: the fault simulator saw 78 drops and
/// re-lists in a row, the namespaces' owner facts (listed first, so oldest) dropped every time. When nothing has been
/// delivered for [`Room::STALLED`] (the server is away), appends go on and the cap drops the oldest, as designed.
#[derive(Debug)]
pub struct Room {
    last_acked: u64,
    last_progress: std::time::Instant,
    stalled: Duration,
}

impl Default for Room {
    fn default() -> Self {
        Self::new(Self::STALLED)
    }
}

impl Room {
    /// How long without a delivery before appends stop waiting for room.
    pub const STALLED: Duration = Duration::from_secs(20);

    /// Appends stop waiting after `stalled` without a delivery.
    pub fn new(stalled: Duration) -> Self {
        Self { last_acked: 0, last_progress: std::time::Instant::now(), stalled }
    }
    /// The share of the cap appends leave free while the server takes facts.
    const HEADROOM_PCT: u64 = 10;

    /// Waits until `needed` more bytes fit under the cap with headroom, while deliveries progress.
    pub async fn wait(&mut self, spool: &std::sync::Mutex<crate::spool::Spool>, needed: u64) -> anyhow::Result<()> {
        let mut held = false;
        loop {
            let (used, cap, acked, pending) = {
                let s = spool.lock().map_err(|_| anyhow::anyhow!("spool lock poisoned"))?;
                (s.disk_bytes(), s.max_bytes(), s.acked(), s.pending_count())
            };
            if acked != self.last_acked {
                self.last_acked = acked;
                self.last_progress = std::time::Instant::now();
            }
            let limit = cap - cap * Self::HEADROOM_PCT / 100;
            // Nothing left to deliver: what is on disk is acknowledged, and the append makes its own room.
            if used + needed <= limit || pending == 0 || self.last_progress.elapsed() > self.stalled {
                if held {
                    tracing::info!(used, cap, "room in the spool again; going on");
                }
                return Ok(());
            }
            if !held {
                tracing::info!(used, cap, needed, "spool nearly full while the server takes facts; waiting for room");
                held = true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
