//! The `rslock` driver: the crate in-process, one `LockManager` shared by
//! every client task (it is `Clone` and meant to be shared), so the masters
//! see one multiplexed connection each, as from one application process.
//!
//! Waiting is the crate's own: `acquire_no_guard` retries `lock()` (each
//! `retry_count` rounds, sleeping a random 0..`retry_delay` between them)
//! until it wins; the driver bounds it by the window's end.

use std::time::{Duration, Instant};

use rslock::{Lock, LockManager};

use super::{Acquired, Client};

/// The crate's defaults (`DEFAULT_RETRY_COUNT`, `DEFAULT_RETRY_DELAY`).
const DEFAULT: (u32, Duration) = (3, Duration::from_millis(200));
/// Tuned for a hot key with a short critical section.
const TUNED: (u32, Duration) = (3, Duration::from_millis(10));

pub fn manager(masters: &[String], tuned: bool) -> (LockManager, String) {
    let mut manager = LockManager::new(masters.to_vec());
    let (count, delay) = if tuned { TUNED } else { DEFAULT };
    manager.set_retry(count, delay);
    let settings = format!(
        "{}: retry_count {count}, retry_delay rand(0..{}ms), acquire loops until granted",
        if tuned { "tuned" } else { "defaults" },
        delay.as_millis()
    );
    (manager, settings)
}

pub struct RslockClient {
    pub manager: LockManager,
}

impl Client for RslockClient {
    type Held = Lock;

    async fn acquire(&mut self, resource: &str, ttl_ms: u64, deadline: Instant) -> Acquired<Lock> {
        let attempt = self
            .manager
            .acquire_no_guard(resource.as_bytes(), Duration::from_millis(ttl_ms));
        match tokio::time::timeout_at(deadline.into(), attempt).await {
            Ok(Ok(lock)) => Acquired::Granted(lock),
            Ok(Err(e)) => Acquired::Failed(format!("acquire: {e}")),
            Err(_) => Acquired::TimedOut,
        }
    }

    async fn release(&mut self, lock: Lock) -> Result<(), String> {
        // `unlock` reports nothing: a failed release is invisible to the caller.
        self.manager.unlock(&lock).await;
        Ok(())
    }
}
