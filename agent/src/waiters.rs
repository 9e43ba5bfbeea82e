//! Waiting for a lock without polling: per-resource FIFO queues in which
//! only the head competes in Redlock, woken the moment a release is known.
//!
//! A release wakes the queue of its resource in two ways: a release through
//! this agent wakes it directly, and the release script PUBLISHes the key on
//! `<key_prefix>released` on every master, which every agent subscribes to
//! ([`listen`]), so a release through another agent wakes this one too. A
//! lock that expires instead of being released publishes nothing; for that
//! the head also retries after `retry_delay` plus jitter.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::redlock::{Acquire, Node, Redlock, Resource};

/// One resource's queue. `wake` carries a generation number: every release
/// or change of head bumps it, and a waiter that saw the old number is
/// woken, so no wake-up is lost between a check and a wait.
#[derive(Debug)]
struct Queue {
    order: VecDeque<u64>,
    wake: watch::Sender<u64>,
    /// The last head left with the lock: the new head should wait for its
    /// release rather than try at once and find it taken.
    held: bool,
}

/// Every resource's queue of waiters on this agent.
#[derive(Debug)]
pub struct Waiters {
    // A std Mutex: short critical sections, never across an await.
    queues: Mutex<HashMap<String, Queue>>,
    next_id: std::sync::atomic::AtomicU64,
    /// Waiters in every queue; changed only with `queues` locked.
    total: std::sync::atomic::AtomicUsize,
    max: usize,
    metrics: Arc<Metrics>,
    key_prefix: String,
}

/// `lock.max_waiters` requests already wait on this agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} requests already wait for locks on this agent (lock.max_waiters)")]
pub struct TooManyWaiters(pub usize);

/// A place in a queue; leaving (drop) wakes the next waiter.
struct Ticket<'a> {
    waiters: &'a Waiters,
    resource: String,
    id: u64,
    wake: watch::Receiver<u64>,
    /// Leaving with the lock: the next head waits for its release.
    granted: bool,
}

impl Waiters {
    pub fn new(key_prefix: String, max: usize, metrics: Arc<Metrics>) -> Waiters {
        Waiters {
            queues: Mutex::new(HashMap::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
            total: std::sync::atomic::AtomicUsize::new(0),
            max,
            metrics,
            key_prefix,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Queue>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waiters queued for `resource`.
    pub fn count(&self, resource: &str) -> u64 {
        self.lock()
            .get(resource)
            .map_or(0, |q| q.order.len() as u64)
    }

    /// Wakes the queue of `resource`: its lock was released.
    pub fn released(&self, resource: &str) {
        if let Some(queue) = self.lock().get_mut(resource) {
            queue.held = false;
            queue.wake.send_modify(|g| *g += 1);
        }
    }

    /// Wakes the queue of a lock key announced on the release channel.
    fn released_key(&self, key: &str) {
        if let Some(resource) = key.strip_prefix(self.key_prefix.as_str()) {
            self.released(resource);
        }
    }

    fn join(&self, resource: &Resource) -> Result<Ticket<'_>, TooManyWaiters> {
        use std::sync::atomic::Ordering::Relaxed;
        let id = self.next_id.fetch_add(1, Relaxed);
        let mut queues = self.lock();
        if self.total.load(Relaxed) >= self.max {
            return Err(TooManyWaiters(self.max));
        }
        self.total.fetch_add(1, Relaxed);
        let queue = queues
            .entry(resource.as_str().to_string())
            .or_insert_with(|| Queue {
                order: VecDeque::new(),
                wake: watch::channel(0).0,
                held: false,
            });
        queue.order.push_back(id);
        let wake = queue.wake.subscribe();
        self.metrics.waiters.inc();
        Ok(Ticket {
            waiters: self,
            resource: resource.as_str().to_string(),
            id,
            wake,
            granted: false,
        })
    }

    /// Acquires `resource`, waiting up to `wait` behind this agent's other
    /// waiters for it. `wait` zero is a single round that does not queue.
    ///
    /// # Errors
    /// When `lock.max_waiters` requests already wait.
    pub async fn acquire(
        &self,
        redlock: &Redlock,
        resource: &Resource,
        ttl: Duration,
        owner: Option<&str>,
        wait: Duration,
    ) -> Result<Acquire, TooManyWaiters> {
        if wait.is_zero() {
            return Ok(redlock.acquire_once(resource, ttl, owner).await);
        }
        let deadline = Instant::now() + wait;
        let mut ticket = self.join(resource)?;
        Ok(ticket
            .wait_for_lock(redlock, resource, ttl, owner, deadline)
            .await)
    }
}

impl Ticket<'_> {
    /// Competes for the lock whenever this ticket is the head of its queue
    /// and something changed, until granted or `deadline`.
    async fn wait_for_lock(
        &mut self,
        redlock: &Redlock,
        resource: &Resource,
        ttl: Duration,
        owner: Option<&str>,
        deadline: Instant,
    ) -> Acquire {
        let mut last = Acquire::Taken;
        loop {
            // Only the head competes; the others wait for a change of head.
            while !self.is_head() {
                if !self.changed_until(deadline).await {
                    return last;
                }
            }
            if self.take_held_hint() {
                // The previous head just got the lock: trying now would only
                // find it taken. Wait for its release (or, should it expire
                // instead, the retry delay).
                let retry = (Instant::now() + redlock.retry_delay()).min(deadline);
                self.changed_until(retry).await;
                if Instant::now() >= deadline {
                    return last;
                }
            }
            self.wake.borrow_and_update();
            last = redlock.acquire_once(resource, ttl, owner).await;
            match last {
                Acquire::Granted(_) => {
                    self.granted = true;
                    return last;
                }
                // With no quorum usable there is nothing to wait for here;
                // answer at once rather than hold the caller.
                Acquire::NoQuorum(_) if !redlock.quorum_usable() => return last,
                Acquire::Taken | Acquire::NoQuorum(_) => {}
            }
            // Wait for a release, or retry after a random delay in case the
            // lock expires instead (expiry publishes nothing).
            let retry = (Instant::now() + redlock.retry_delay()).min(deadline);
            self.changed_until(retry).await;
            if Instant::now() >= deadline {
                return last;
            }
        }
    }

    /// Whether the previous head left with the lock (and clears the hint).
    fn take_held_hint(&self) -> bool {
        self.waiters
            .lock()
            .get_mut(&self.resource)
            .is_some_and(|q| std::mem::take(&mut q.held))
    }

    fn is_head(&self) -> bool {
        self.waiters
            .lock()
            .get(&self.resource)
            .is_some_and(|q| q.order.front() == Some(&self.id))
    }

    /// Waits for a wake-up until `until`; false when the time ran out.
    async fn changed_until(&mut self, until: Instant) -> bool {
        let left = until.saturating_duration_since(Instant::now());
        matches!(
            tokio::time::timeout(left, self.wake.changed()).await,
            Ok(Ok(()))
        )
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut queues = self.waiters.lock();
        if let Some(queue) = queues.get_mut(&self.resource) {
            let was_head = queue.order.front() == Some(&self.id);
            queue.order.retain(|&id| id != self.id);
            self.waiters
                .total
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            if queue.order.is_empty() {
                queues.remove(&self.resource);
            } else if was_head {
                queue.held = self.granted;
                queue.wake.send_modify(|g| *g += 1);
            }
        }
        self.waiters.metrics.waiters.dec();
    }
}

/// Subscribes to the release channel on one master, forever, and wakes the
/// matching local queue on every message. Reconnects after failures with a
/// capped backoff; returns only when aborted.
pub async fn listen(node: Arc<Node>, channel: String, waiters: Arc<Waiters>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let subscribed = async {
            let mut pubsub = node.client().get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(Duration::from_secs(2), subscribed).await {
            Ok(Ok(pubsub)) => {
                backoff = Duration::from_millis(100);
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    if let Ok(key) = message.get_payload::<String>() {
                        waiters.released_key(&key);
                    }
                }
                tracing::debug!(node = node.name(), "release channel closed; resubscribing");
            }
            Ok(Err(e)) => {
                tracing::debug!(node = node.name(), error = %e, "cannot subscribe to the release channel")
            }
            Err(_) => tracing::debug!(
                node = node.name(),
                "subscribing to the release channel timed out"
            ),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
