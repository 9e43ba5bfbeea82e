//! When the lock service is idle, and the wake-ups when it gets work again.
//!
//! A sidecar spends most of its life with nothing to do, and a fleet of
//! them shares one set of masters: whatever an idle agent sends a master
//! is multiplied by the fleet. So an agent with no grant, hold or waiter,
//! and no lock request for [`IDLE_AFTER`], is idle:
//! - its health tasks probe every `health.idle_interval` instead of every
//!   `health.interval` (see [`crate::health::watch`]): the votes check the
//!   incarnation marker and the eviction count themselves, and a restart
//!   breaks the connection a vote goes on, so what an idle agent no longer
//!   sees between probes cannot make it grant a lock twice;
//! - its pub/sub subscribers close their connections (see
//!   `crate::node::subscriber`): with nothing held or awaited here, no
//!   release or force release concerns it.
//!
//! An agent starts idle. The first request after an idle spell wakes both
//! at once ([`Activity::touch`]):
//! the probes go back to `health.interval` and the subscribers connect
//! while the request's votes are under way.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long after its last lock request an agent with no grant, hold or
/// waiter counts as idle. Also how long a subscriber keeps its connection
/// once nothing needs it.
pub const IDLE_AFTER: Duration = Duration::from_secs(30);

/// When the lock service last had a request.
#[derive(Debug)]
pub struct Activity {
    // A std Mutex: a timestamp read or swapped, never across an await.
    last: Mutex<Instant>,
}

/// An agent starts idle: until its first lock request, nothing it holds
/// or awaits needs the masters probed often or a pub/sub connection.
impl Default for Activity {
    fn default() -> Activity {
        let now = Instant::now();
        Activity {
            last: Mutex::new(now.checked_sub(IDLE_AFTER).unwrap_or(now)),
        }
    }
}

impl Activity {
    /// Records a request now; true when the service was idle until now
    /// (its last request [`IDLE_AFTER`] ago or more), so the caller wakes
    /// what idleness slowed down.
    pub fn touch(&self) -> bool {
        let now = Instant::now();
        let was = std::mem::replace(&mut *self.lock(), now);
        now.duration_since(was) >= IDLE_AFTER
    }

    /// Time since the last request.
    pub fn since(&self) -> Duration {
        self.lock().elapsed()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touch_says_whether_the_service_was_idle_until_then() {
        let activity = Activity::default();
        assert!(activity.since() >= IDLE_AFTER, "an agent starts idle");
        assert!(activity.touch(), "its first request wakes");
        assert!(!activity.touch(), "the next one finds it busy");
        *activity.lock() = Instant::now() - IDLE_AFTER;
        assert!(activity.touch(), "a request after IDLE_AFTER wakes");
        assert!(activity.since() < IDLE_AFTER);
        assert!(!activity.touch(), "the next one finds it busy");
    }
}
