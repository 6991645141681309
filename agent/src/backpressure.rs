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
}
