//! The `redlock` crate driver. The crate is synchronous and opens a new
//! connection to every master for every command, one master after another;
//! each client runs its calls on a blocking thread, as a threaded
//! application would.
//!
//! Waiting is the crate's own `acquire()` loop (call `lock()`, which makes
//! `retry_count` rounds with a random 0..`retry_delay` sleep after each,
//! until it wins), bounded here by the window's end.

use std::sync::Arc;
use std::time::Instant;

use redlock::{Lock, RedLock};

use super::{Acquired, Client};

/// The crate's defaults (`DEFAULT_RETRY_COUNT`, `DEFAULT_RETRY_DELAY` ms).
const DEFAULT: (u32, u32) = (3, 200);
/// Tuned for a hot key with a short critical section.
const TUNED: (u32, u32) = (3, 10);

pub fn manager(masters: &[String], tuned: bool) -> (Arc<RedLock>, String) {
    let mut manager = RedLock::new(masters.to_vec());
    let (count, delay) = if tuned { TUNED } else { DEFAULT };
    manager.set_retry(count, delay);
    let settings = format!(
        "{}: retry_count {count}, retry_delay rand(0..{delay}ms), lock() called until granted",
        if tuned { "tuned" } else { "defaults" }
    );
    (Arc::new(manager), settings)
}

pub struct RedlockClient {
    pub manager: Arc<RedLock>,
}

/// A granted lock, owned (the crate's `Lock` borrows its manager).
pub struct Held {
    resource: Vec<u8>,
    value: Vec<u8>,
}

impl Client for RedlockClient {
    type Held = Held;

    async fn acquire(&mut self, resource: &str, ttl_ms: u64, deadline: Instant) -> Acquired<Held> {
        let manager = Arc::clone(&self.manager);
        let resource = resource.as_bytes().to_vec();
        let attempt = tokio::task::spawn_blocking(move || loop {
            match manager.lock(&resource, ttl_ms as usize) {
                Ok(Some(lock)) => {
                    return Acquired::Granted(Held {
                        resource: lock.resource,
                        value: lock.val,
                    })
                }
                Ok(None) if Instant::now() >= deadline => return Acquired::TimedOut,
                Ok(None) => {}
                Err(e) => return Acquired::Failed(format!("acquire: {e}")),
            }
        });
        match attempt.await {
            Ok(outcome) => outcome,
            Err(e) => Acquired::Failed(format!("acquire thread: {e}")),
        }
    }

    async fn release(&mut self, held: Held) -> Result<(), String> {
        let manager = Arc::clone(&self.manager);
        tokio::task::spawn_blocking(move || {
            manager.unlock(&Lock {
                resource: held.resource,
                val: held.value,
                validity_time: 0,
                lock_manager: &manager,
            });
        })
        .await
        .map_err(|e| format!("release thread: {e}"))
    }
}
