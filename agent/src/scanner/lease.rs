//! The fleet's scan lock: one agent of all those with the same
//! `lock.key_prefix` on the same masters holds it and scans for them all.
//!
//! It is the agent's own Redlock on the reserved resource
//! [`Resource::leak_scan`] (a name no client may use), taken with a fenced
//! grant, so every holder has a fence above its predecessors' (see
//! [`crate::redlock::fence`]): the masters refuse a paused holder's
//! repairs and reports with it (see [`crate::node::leak::Fenced`]).
//!
//! Held, not taken per round: the holder extends it every third of its
//! TTL, while it scans and between scans, for as long as it lives. Taken
//! per round, the lock would be free after each scan, and another agent,
//! its interval out of phase, would take it and scan again within the same
//! interval; held, the fleet scans exactly once per interval, and a
//! standby's single look per interval sees the lock taken. The TTL is the
//! scan interval (at least [`MIN_TTL`], at most `lock.max_ttl`): short
//! enough that a dead holder's lock is free within one interval, so
//! another agent takes over within two; never above `max_ttl`, so a
//! master's delayed restart (`max_ttl` + extra) outlasts it as it does any
//! lock, and quorum intersection still holds across restarts. The
//! extensions' period is a third of the TTL, as Redisson's watchdog (a
//! ninth after a failure), so several may fail before the lock's validity
//! runs out.
//!
//! ## Behavior
//! - [`Lease::held`] is this agent's own view: not lost, not superseded,
//!   and within the validity of its last grant or extension by its
//!   monotonic clock. A pause (GC, SIGSTOP) past that validity is seen as
//!   soon as the agent runs again, but a pause right after the look goes
//!   unseen; the fence, checked by each master, covers that one.
//! - The keeper stops when the masters say the lock is gone (`Lost`), or
//!   when extensions keep failing until its validity has run out.
//! - [`Lease::release`] stops the keeper and releases the lock on the
//!   masters (the agent's drain does it), so another agent takes over at
//!   its next look instead of after the TTL. Dropping a lease stops its
//!   keeper and releases it in the background, when a runtime is still
//!   there to run the release.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::Locks;
use crate::redlock::{Acquire, Extend, Resource, Store, Token};

/// The shortest TTL of the scan lock, whatever the interval: with a TTL
/// of a few hundred milliseconds, two slow extensions on a busy host would
/// hand the fleet's scan from agent to agent.
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// The scan lock's TTL for a scan `interval` and `lock.max_ttl`: the
/// interval, at least [`MIN_TTL`], at most `max_ttl`.
pub fn ttl(interval: Duration, max_ttl: Duration) -> Duration {
    interval.max(MIN_TTL).min(max_ttl)
}

/// Why the scan lock was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    #[error("another agent holds it")]
    Taken,
    #[error("{0}")]
    NoQuorum(String),
}

/// What the keeper and the scanner share.
#[derive(Debug)]
struct State {
    /// Until when the lock is held for sure, by this agent's monotonic
    /// clock: the validity of the last grant or extension.
    valid_until: Instant,
    /// The masters said it is gone, or one refused this holder's fence.
    lost: bool,
}

/// This agent's hold of the fleet's scan lock.
#[derive(Debug)]
pub struct Lease<M: Store> {
    locks: Arc<Locks<M>>,
    resource: Resource,
    token: Token,
    fence: u64,
    state: Arc<Mutex<State>>,
    keeper: tokio::task::JoinHandle<()>,
    /// Released already: nothing left to do when dropped.
    released: bool,
}

impl<M: Store> Lease<M> {
    /// One fenced Redlock round on the scan lock with `ttl`, through the
    /// engine of `locks` (not the lock service's bookkeeping: the scan
    /// lock is no client's, and counts in no lock metric); when granted,
    /// its keeper starts.
    ///
    /// # Errors
    /// When another agent holds it, or fewer than a quorum of masters
    /// answered (or confirmed the fence).
    pub async fn take(locks: Arc<Locks<M>>, ttl: Duration) -> Result<Lease<M>, TakeError> {
        let engine = locks.engine();
        let resource = Resource::leak_scan();
        let key = engine.key(&resource);
        let token = Token::generate(&key, engine.settings().agent_name.as_deref(), None);
        let started = Instant::now();
        let grant = match engine
            .acquire_once(&resource, ttl, &token, true, false)
            .await
        {
            Acquire::Granted(grant) => grant,
            Acquire::Taken { .. } => return Err(TakeError::Taken),
            Acquire::NoQuorum(message) => return Err(TakeError::NoQuorum(message)),
        };
        // A fenced grant always carries its fence.
        let fence = grant.fence.unwrap_or_default();
        let state = Arc::new(Mutex::new(State {
            valid_until: started + grant.validity,
            lost: false,
        }));
        let keeper = tokio::spawn(keep(
            Arc::clone(&locks),
            resource.clone(),
            token.clone(),
            ttl,
            Arc::clone(&state),
        ));
        Ok(Lease {
            locks,
            resource,
            token,
            fence,
            state,
            keeper,
            released: false,
        })
    }

    /// Stops the keeper and releases the lock on every master, waiting for
    /// a quorum's answer (or the masters' timeouts).
    pub async fn release(mut self) {
        self.keeper.abort();
        self.released = true;
        self.locks
            .engine()
            .release(&self.resource, &self.token)
            .await;
    }

    /// The fence of this hold's grant: above every earlier holder's.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Held as far as this agent can tell (see the module's Behavior).
    pub fn held(&self) -> bool {
        let state = self.state();
        !state.lost && Instant::now() < state.valid_until
    }

    /// A master refused this holder's fence: another agent holds the lock
    /// now. From here on [`Lease::held`] is false.
    pub fn supersede(&self) {
        self.state().lost = true;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Poisoning needs a panic while held; the sections only assign.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<M: Store> Drop for Lease<M> {
    fn drop(&mut self) {
        self.keeper.abort();
        if self.released {
            return;
        }
        // A compare-and-delete with this hold's token: it removes nothing
        // another agent holds.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (locks, resource, token) = (
                Arc::clone(&self.locks),
                self.resource.clone(),
                self.token.clone(),
            );
            runtime.spawn(async move {
                locks.engine().release(&resource, &token).await;
            });
        }
    }
}

/// Extends the lock every third of `ttl` (sooner after a failure) until
/// the masters say it is gone or its validity runs out without an
/// extension.
async fn keep<M: Store>(
    locks: Arc<Locks<M>>,
    resource: Resource,
    token: Token,
    ttl: Duration,
    state: Arc<Mutex<State>>,
) {
    let period = ttl / 3;
    let mut pause = period;
    loop {
        tokio::time::sleep(pause).await;
        let started = Instant::now();
        let outcome = locks.engine().extend(&resource, &token, ttl).await;
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Extend::Extended { validity, .. } => {
                state.valid_until = started + validity;
                pause = period;
            }
            Extend::Lost => {
                state.lost = true;
                tracing::info!("the fleet's scan lock is gone from the masters");
                return;
            }
            Extend::Failed | Extend::NoQuorum(_) if Instant::now() >= state.valid_until => {
                state.lost = true;
                tracing::warn!("the fleet's scan lock could not be extended in time");
                return;
            }
            Extend::Failed | Extend::NoQuorum(_) => pause = period / 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FenceMode;
    use crate::lock::waiters::Waiters;
    use crate::lock::Rules;
    use crate::metrics::Metrics;
    use crate::redlock::fence::FenceSettings;
    use crate::redlock::memory::{self, Memory};
    use crate::redlock::observe::Ignore;
    use crate::redlock::Redlock;
    use tokio_util::sync::CancellationToken;

    const TTL: Duration = Duration::from_secs(3);

    /// One agent's lock service over `masters`, named `name`.
    fn agent(masters: &[Arc<Memory>], name: &str) -> Arc<Locks<Memory>> {
        let names: Vec<String> = masters.iter().map(|m| m.name.clone()).collect();
        let metrics = Arc::new(Metrics::new(&names));
        let settings = memory::settings(Some(name), FenceSettings::default());
        let engine = Redlock::new(masters.to_vec(), settings, Arc::new(Ignore));
        let shutdown = CancellationToken::new();
        let waiters = Arc::new(Waiters::new(
            "t:".into(),
            10,
            10,
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
        let rules = Rules {
            default_ttl: TTL,
            max_ttl: Duration::from_secs(60),
            node_timeout: Duration::from_millis(50),
            max_hold: Duration::from_secs(3600),
            fence: FenceMode::OnRequest,
            loss_notice: true,
            isolate: crate::config::Isolate::None,
            reentry_keeps_ttl: true,
            reentry_trusts_pid_zero: false,
            renewals_wait_for_client: false,
            limit_kept_by_any_agent: true,
            max_streams_per_uid: 1024,
        };
        Arc::new(Locks::new(engine, rules, waiters, metrics, shutdown))
    }

    fn masters() -> Vec<Arc<Memory>> {
        (0..3).map(Memory::new).collect()
    }

    #[test]
    fn the_ttl_is_the_interval_within_bounds() {
        let max = Duration::from_secs(60);
        assert_eq!(ttl(Duration::from_secs(30), max), Duration::from_secs(30));
        assert_eq!(ttl(Duration::from_millis(100), max), MIN_TTL);
        assert_eq!(ttl(Duration::from_secs(300), max), max);
        assert_eq!(
            ttl(Duration::from_millis(100), Duration::from_secs(1)),
            Duration::from_secs(1)
        );
    }

    /// Two agents: the first takes the lock and keeps it past many TTLs;
    /// the second cannot take it meanwhile.
    #[tokio::test(start_paused = true)]
    async fn one_holder_keeps_it_and_the_others_find_it_taken() {
        let masters = masters();
        let (a, b) = (agent(&masters, "a"), agent(&masters, "b"));
        let held = Lease::take(a, TTL).await.expect("the first take");
        for _ in 0..10 {
            tokio::time::sleep(TTL).await;
            assert!(held.held());
            assert_eq!(
                Lease::take(Arc::clone(&b), TTL).await.err(),
                Some(TakeError::Taken)
            );
        }
        let key = Resource::leak_scan().key("t:");
        assert!(masters[0].holds(&key).is_some_and(|v| v.contains("@a")));
    }

    /// A holder whose lock vanished from the masters (a flush, an expiry
    /// during a pause) sees it at its next extension; another agent then
    /// takes it with a higher fence.
    #[tokio::test(start_paused = true)]
    async fn a_lost_lock_is_seen_and_the_next_holder_has_a_higher_fence() {
        let masters = masters();
        let (a, b) = (agent(&masters, "a"), agent(&masters, "b"));
        let first = Lease::take(a, TTL).await.expect("the first take");
        let key = Resource::leak_scan().key("t:");
        for master in &masters {
            master.keys.lock().unwrap().remove(&key);
        }
        tokio::time::sleep(TTL / 2).await;
        assert!(!first.held(), "the keeper saw it gone");
        let second = Lease::take(b, TTL).await.expect("free again");
        assert!(second.fence() > first.fence());
        assert!(second.held());
    }

    /// A released lease, or a dropped one, frees the lock: the next agent
    /// need not wait for its TTL.
    #[tokio::test(start_paused = true)]
    async fn a_released_or_dropped_lease_frees_the_lock() {
        let masters = masters();
        let (a, b) = (agent(&masters, "a"), agent(&masters, "b"));
        drop(
            Lease::take(Arc::clone(&a), TTL)
                .await
                .expect("the first take"),
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        let second = Lease::take(b, TTL).await.expect("free after the drop");
        second.release().await;
        assert!(Lease::take(a, TTL).await.is_ok(), "free after the release");
    }

    /// A superseded lease is no longer held, whatever its validity.
    #[tokio::test(start_paused = true)]
    async fn a_superseded_lease_is_not_held() {
        let masters = masters();
        let lease = Lease::take(agent(&masters, "a"), TTL).await.unwrap();
        lease.supersede();
        assert!(!lease.held());
    }
}
