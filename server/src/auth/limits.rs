//! Rate limits on login and token endpoints: a fixed window per (endpoint, client address), in memory.
//!
//! One process's memory is enough to slow down guessing and flooding; behind several replicas each counts
//! its own share (see docs/security.md).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::error::AppError;

/// (endpoint, client) → (window start, attempts in it).
type Counts = HashMap<(&'static str, String), (Instant, u32)>;

/// Attempts allowed per window, per endpoint and client.
#[derive(Debug)]
pub struct RateLimits {
    per_window: u32,
    window: Duration,
    counts: Mutex<Counts>,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self::new(30, Duration::from_secs(60))
    }
}

impl RateLimits {
    /// `per_window` attempts per `window`.
    pub fn new(per_window: u32, window: Duration) -> Self {
        Self { per_window, window, counts: Mutex::new(HashMap::new()) }
    }

    /// Counts one attempt; 429 with the seconds to wait once the window's allowance is spent.
    pub fn check(&self, endpoint: &'static str, client: &str) -> Result<(), AppError> {
        let now = Instant::now();
        let mut counts = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if counts.len() > 10_000 {
            counts.retain(|_, (start, _)| now.duration_since(*start) < self.window);
        }
        let entry = counts.entry((endpoint, client.to_string())).or_insert((now, 0));
        if now.duration_since(entry.0) >= self.window {
            *entry = (now, 0);
        }
        entry.1 += 1;
        if entry.1 > self.per_window {
            let wait = self.window.saturating_sub(now.duration_since(entry.0)).as_secs().max(1);
            return Err(AppError::TooManyRequests(wait));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_allowance_is_enforced_per_endpoint_and_client() {
        let limits = RateLimits::new(2, Duration::from_secs(60));
        assert!(limits.check("login", "a").is_ok());
        assert!(limits.check("login", "a").is_ok());
        assert!(matches!(limits.check("login", "a"), Err(AppError::TooManyRequests(s)) if (1..=60).contains(&s)));
        assert!(limits.check("login", "b").is_ok(), "another client has its own allowance");
        assert!(limits.check("tokens", "a").is_ok(), "another endpoint has its own allowance");
        let short = RateLimits::new(1, Duration::from_millis(1));
        assert!(short.check("login", "a").is_ok());
        std::thread::sleep(Duration::from_millis(5));
        assert!(short.check("login", "a").is_ok(), "a new window starts afresh");
    }
}
