//! Waiting for a lock without polling: per-resource FIFO queues in which
//! only the head competes in Redlock, woken the moment a release is known.
//!
//! A release wakes the queue of its resource in two ways: a release through
//! this agent wakes it directly, and the release script PUBLISHes the
//! released token on the resource's channel `<key_prefix>released:<resource>`
//! on every master where a waiting voter had flagged the key (see
//! `conn::BATCH`), to which an agent subscribes ([`Subscriptions`]) while it has
//! waiters for that resource, so a release through another agent wakes this
//! one too. A release nobody waits for publishes nothing.
//!
//! One release wakes a queue once: the direct wake and each master's
//! message carry the same token, and the first of them wakes the head; the
//! others are ignored, unless the round they woke failed (the message of
//! the first master to release can come before the others have released).
//! A head woken twice by one release would only find the lock taken by the
//! waiter before it, and cost a round of votes for nothing.
//!
//! An operator's force release, on any agent, announces each value it
//! removed on one channel for the whole fleet,
//! [`force_release_channel`], to which every agent's listener subscribes
//! for as long as it runs (one more subscription on the connection it
//! keeps anyway, not one more connection): the hold of that token, on
//! whichever agent, ends with `lost` at once (see [`super::holds`]), and
//! the resource's waiters wake.
//!
//! A lock that expires instead of being released publishes nothing; for
//! that the head also votes again once the lock can have expired on a
//! quorum, as the votes that found it taken said
//! ([`crate::redlock::round::free_in`]), or after `retry_delay` plus
//! jitter where they did not say, within a budget shared by every queue of
//! the agent ([`RETRIES_PER_SECOND`]), so thousands of waiters on distinct
//! resources do not flood the masters.
//! Rounds woken by a release are never held back.
//!
//! Waiters are bounded twice: `lock.max_waiters` on the whole agent, and
//! `lock.max_waiters_per_uid` for each uid (the peer's, from the socket),
//! so one client cannot take every waiter slot and leave another uid's
//! waiting request a 503 at once. A request whose peer is unknown counts
//! only against the whole agent's bound.
//!
//! When the agent shuts down, every waiter answers at once
//! ([`WaitError::ShuttingDown`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

/// Longest a first waiter waits for its release-channel subscriptions.
pub(super) const SUBSCRIBE_WAIT: Duration = Duration::from_millis(500);

/// Timer-driven retries (a lock that may have expired; no release was
/// heard) allowed per second across every queue of one agent. A round is N
/// votes and, when it fails, N releases: at most about 10,000 commands a
/// second on five masters, whatever the number of waiters.
pub const RETRIES_PER_SECOND: f64 = 1000.0;

mod subscriptions;

pub use subscriptions::Subscriptions;

use super::budget::Budget;
use crate::metrics::Metrics;
use crate::redlock::ChannelChange;

/// One resource's queue. Each waiter has its own wake-up channel carrying
/// a generation number: only the head is woken, by a release or when it
/// becomes head, and no wake-up is lost between a check and a wait.
#[derive(Debug)]
struct Queue {
    /// Each waiter's id and wake-up channel, shared by every queue a
    /// request on several resources waits in.
    order: VecDeque<(u64, Arc<watch::Sender<u64>>)>,
    /// The last head left with the lock: the new head should wait for its
    /// release rather than try at once and find it taken.
    held: bool,
    /// The tokens of the releases that last woke this queue (the last
    /// one; a semaphore's, the last [`RECENT_RELEASES`]): the same
    /// release heard again (another master's message, or the direct wake
    /// after the messages) does not wake it twice.
    woken_by: VecDeque<String>,
    /// The token of the last release that woke the head, until a round
    /// takes it ([`Ticket::take_release`]).
    release: Option<String>,
    /// A semaphore's queue ([`Ticket::hand_offs`]): a release heard while
    /// the head is in its round, or has a release to take already, goes to
    /// the first waiter not in a round ([`Queue::hand_off`]), which
    /// competes for that permit beside the head.
    several: bool,
    /// Waiters in a round now, in a queue of `several`.
    running: Vec<u64>,
    /// Releases handed to waiters behind the head, by waiter, until their
    /// round takes them.
    handed: HashMap<u64, String>,
}

/// How many releases a semaphore's queue remembers, so that another
/// master's message of one of them does not wake it again.
const RECENT_RELEASES: usize = 32;

impl Queue {
    fn wake_head(&self) {
        if let Some((_, wake)) = self.order.front() {
            wake.send_modify(|g| *g += 1);
        }
    }

    /// Hands the release of `token` to the first waiter behind a head that
    /// is in its round or has a release to take already, the first neither
    /// in a round nor handed one; `false` when the head is free or no such
    /// waiter is left (the head takes it). A release `here` (queued on the
    /// masters, not yet run there) is not handed past a head that is only
    /// in its round: that round read the permits before the release, and
    /// the head takes it next, so the first in line gets the first permit
    /// freed here.
    fn hand_off(&mut self, token: &str, here: bool) -> bool {
        let head_busy = self.release.is_some()
            || !here
                && self
                    .order
                    .front()
                    .is_some_and(|(id, _)| self.running.contains(id));
        if !self.several || !head_busy {
            return false;
        }
        let free = self
            .order
            .iter()
            .skip(1)
            .find(|(id, _)| !self.running.contains(id) && !self.handed.contains_key(id));
        let Some((id, wake)) = free else {
            return false;
        };
        self.handed.insert(*id, token.to_string());
        wake.send_modify(|g| *g += 1);
        true
    }
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
    /// Waiters per uid, without the uids that have none; changed only with
    /// `queues` locked (always taken after it).
    per_uid: Mutex<HashMap<u32, usize>>,
    /// `lock.max_waiters_per_uid`.
    max_per_uid: usize,
    metrics: Arc<Metrics>,
    /// `<key_prefix>released:`, the prefix of every release channel.
    channel_prefix: String,
    /// `<key_prefix>released: force-release`: see [`force_release_channel`].
    force_channel: String,
    /// One per master's listener: the channels to (un)subscribe as queues
    /// come and go.
    listeners: Mutex<Vec<mpsc::UnboundedSender<ChannelChange>>>,
    /// Cancelled when the agent shuts down: every waiter answers at once.
    shutdown: CancellationToken,
    /// Timer-driven retries: [`RETRIES_PER_SECOND`], with a burst of as
    /// many.
    retries: Budget,
    /// Watchers of a queue's releases and announcements that do not wait
    /// in it (an election's observers), by queue: how many, and the
    /// counter every release heard raises. Taken after `queues`.
    observers: Mutex<HashMap<String, (usize, watch::Sender<u64>)>>,
}

/// Why a request got no answer from Redlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// `lock.max_waiters` requests already wait on this agent.
    #[error("{0} requests already wait for locks on this agent (lock.max_waiters)")]
    TooManyWaiters(usize),
    /// The caller's uid already has `lock.max_waiters_per_uid` requests
    /// waiting on this agent.
    #[error(
        "uid {uid} already has {limit} requests waiting for locks on this agent, the most one uid may have (lock.max_waiters_per_uid)"
    )]
    TooManyWaitersPerUid { uid: u32, limit: usize },
    /// The agent is shutting down; the request may go to another agent.
    #[error("the agent is shutting down")]
    ShuttingDown,
}

/// How a wait for a wake-up ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    /// A release, or this ticket became the head.
    Changed,
    TimedOut,
    ShuttingDown,
    /// The caller gave up the request.
    Cancelled,
}

/// The release channel of `resource`; the release script publishes on it.
pub fn release_channel(key_prefix: &str, resource: &str) -> String {
    format!("{key_prefix}released:{resource}")
}

/// The fleet's force-release channel: an operator's force release
/// publishes `<resource>\n<value removed>` on it, on every master it
/// deleted a lock's key on, once every master has answered. Under the release channels' prefix, so the channels
/// an ACL already grants the agent (`&<key_prefix>released:*`) cover it;
/// no resource's release channel is this one, since a resource has no
/// space.
pub fn force_release_channel(key_prefix: &str) -> String {
    format!("{key_prefix}released: force-release")
}

/// What agents before the waiting flag published on every release: no
/// token, so such a message always wakes the queue.
const UNNAMED_RELEASE: &str = "released";

/// A place in a queue; leaving (drop) wakes the next waiter.
pub(super) struct Ticket<'a> {
    waiters: &'a Waiters,
    /// The queues it waits in: one, or one per resource of a lock on
    /// several.
    resources: Vec<String>,
    id: u64,
    /// The uid the ticket counts against, when the peer was known.
    uid: Option<u32>,
    wake: watch::Receiver<u64>,
    /// Leaving with the lock: the next head waits for its release.
    granted: bool,
    /// Cancelled when the caller gives up the request.
    cancel: Option<CancellationToken>,
}

impl Waiters {
    /// Queues for at most `max` waiters (`lock.max_waiters`), `max_per_uid`
    /// of them (`lock.max_waiters_per_uid`) for any one uid.
    pub fn new(
        key_prefix: String,
        max: usize,
        max_per_uid: usize,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Waiters {
        Waiters {
            shutdown,
            retries: Budget::new(RETRIES_PER_SECOND),
            queues: Mutex::new(HashMap::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
            total: std::sync::atomic::AtomicUsize::new(0),
            max,
            per_uid: Mutex::new(HashMap::new()),
            max_per_uid,
            metrics,
            channel_prefix: release_channel(&key_prefix, ""),
            force_channel: force_release_channel(&key_prefix),
            listeners: Mutex::new(Vec::new()),
            observers: Mutex::new(HashMap::new()),
        }
    }

    /// The fleet's force-release channel ([`force_release_channel`]).
    pub fn force_channel(&self) -> &str {
        &self.force_channel
    }

    /// Waiters queued here now.
    pub fn total(&self) -> usize {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Tells every master's listener that the lock service has work again:
    /// one that closed its connection while the agent was idle connects.
    pub fn wake_listeners(&self) {
        self.send_all(|| (ChannelChange::Wake(None), None));
    }

    /// Waits until every master's listener is connected and on the
    /// force-release channel, at most [`SUBSCRIBE_WAIT`]: at once where it
    /// already is. A listener that cannot connect (its master is down) is
    /// waited for no longer than that.
    pub async fn listening(&self) {
        let confirmations = self.send_all(|| {
            let (done, confirmed) = oneshot::channel();
            (ChannelChange::Wake(Some(done)), Some(confirmed))
        });
        let all = futures::future::join_all(confirmations);
        let _ = tokio::time::timeout(SUBSCRIBE_WAIT, all).await;
    }

    /// Sends `change()` to every listener still running.
    fn send_all(
        &self,
        mut change: impl FnMut() -> (ChannelChange, Option<oneshot::Receiver<()>>),
    ) -> Vec<oneshot::Receiver<()>> {
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let mut confirmations = Vec::new();
        listeners.retain(|l| {
            let (change, confirmed) = change();
            confirmations.extend(confirmed);
            l.send(change).is_ok()
        });
        confirmations
    }

    /// Tells every master's listener to subscribe to `channel`; the
    /// receivers resolve as each master confirms.
    fn subscribe(&self, channel: &str) -> Vec<oneshot::Receiver<()>> {
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let mut confirmations = Vec::with_capacity(listeners.len());
        listeners.retain(|l| {
            let (done, confirmed) = oneshot::channel();
            confirmations.push(confirmed);
            l.send(ChannelChange::Subscribe(channel.to_string(), Some(done)))
                .is_ok()
        });
        confirmations
    }

    fn unsubscribe(&self, channel: &str) {
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        listeners.retain(|l| {
            l.send(ChannelChange::Unsubscribe(channel.to_string()))
                .is_ok()
        });
    }

    /// The release channels of every resource with waiters or observers.
    fn wanted(&self) -> Vec<String> {
        let queues = self.lock();
        let observers = self.observers();
        let mut names: Vec<&String> = queues.keys().collect();
        names.extend(observers.keys().filter(|name| !queues.contains_key(*name)));
        names
            .into_iter()
            .map(|r| format!("{}{r}", self.channel_prefix))
            .collect()
    }

    fn observers(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, watch::Sender<u64>)>> {
        self.observers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Watches the releases and announcements heard for the queue `name`
    /// without waiting in it: the receiver changes with each. The agent is
    /// on the queue's channel while any watch or waiter needs it.
    pub fn observe(&self, name: &str) -> Observation<'_> {
        let queues = self.lock();
        let mut observers = self.observers();
        let entry = observers.entry(name.to_string()).or_insert_with(|| {
            if !queues.contains_key(name) {
                // Confirmations are not awaited: an observer reads the
                // state after subscribing, and its timer covers the rest.
                drop(self.subscribe(&format!("{}{name}", self.channel_prefix)));
            }
            (0, watch::channel(0).0)
        });
        entry.0 += 1;
        Observation {
            waiters: self,
            name: name.to_string(),
            changes: entry.1.subscribe(),
        }
    }

    /// Queues watched by observers now.
    pub fn observed(&self) -> usize {
        self.observers().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Queue>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn per_uid(&self) -> std::sync::MutexGuard<'_, HashMap<u32, usize>> {
        self.per_uid.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waiters of `uid` queued on this agent, over every resource.
    pub fn count_of(&self, uid: u32) -> usize {
        self.per_uid().get(&uid).copied().unwrap_or(0)
    }

    /// Waiters queued for `resource`.
    pub fn count(&self, resource: &str) -> u64 {
        self.lock()
            .get(resource)
            .map_or(0, |q| q.order.len() as u64)
    }

    /// Wakes the queue of `resource`: its lock was released, by the holder
    /// of `token` when known. A release already heard is ignored.
    pub fn released(&self, resource: &str, token: Option<&str>) {
        self.wake(resource, token, false);
    }

    /// [`Waiters::released`] for a release through this agent, as soon as
    /// it is queued on every master (see [`Queue::hand_off`]).
    pub fn released_here(&self, resource: &str, token: &str) {
        self.wake(resource, Some(token), true);
    }

    fn wake(&self, resource: &str, token: Option<&str>, here: bool) {
        if let Some((_, changes)) = self.observers().get(resource) {
            changes.send_modify(|n| *n += 1);
        }
        if let Some(queue) = self.lock().get_mut(resource) {
            if let Some(token) = token {
                if queue.woken_by.iter().any(|t| t == token) {
                    return;
                }
                let recent = if queue.several { RECENT_RELEASES } else { 1 };
                if queue.woken_by.len() >= recent {
                    queue.woken_by.pop_front();
                }
                queue.woken_by.push_back(token.to_string());
                if queue.hand_off(token, here) {
                    return;
                }
            }
            queue.release = token.map(str::to_string);
            queue.held = false;
            queue.wake_head();
        }
    }

    /// Wakes the queue whose release channel got `message` (the released
    /// token).
    fn released_on(&self, channel: &str, message: &[u8]) {
        if let Some(resource) = channel.strip_prefix(self.channel_prefix.as_str()) {
            let token = std::str::from_utf8(message)
                .ok()
                .filter(|m| *m != UNNAMED_RELEASE);
            self.released(resource, token);
        }
    }

    /// Whether any of `queue_names` has waiters on this agent: a newcomer
    /// joins the line behind them rather than overtake them.
    pub(super) fn queued<'q>(&self, mut queue_names: impl Iterator<Item = &'q str>) -> bool {
        let queues = self.lock();
        queue_names.any(|q| queues.contains_key(q))
    }

    /// Queues a waiter of `uid` (the peer's, when known) in each of
    /// `queue_names` at once, under one lock of every queue: a waiter in
    /// several queues is behind the same earlier waiters in each, so the
    /// earliest of overlapping waiters heads every queue it is in, and no
    /// two wait for each other. The first waiter of a resource also gets
    /// the confirmations of its release-channel subscriptions.
    ///
    /// # Errors
    /// When `uid` already has its share of waiters, or the agent has
    /// `lock.max_waiters`.
    #[allow(clippy::type_complexity)]
    pub(super) fn join<'q>(
        &self,
        queue_names: impl Iterator<Item = &'q str>,
        uid: Option<u32>,
    ) -> Result<(Ticket<'_>, Vec<oneshot::Receiver<()>>), WaitError> {
        use std::sync::atomic::Ordering::Relaxed;
        let id = self.next_id.fetch_add(1, Relaxed);
        let mut queues = self.lock();
        // The uid's own share first: a refusal names the limit this
        // caller can do something about.
        if let Some(uid) = uid {
            let mut per_uid = self.per_uid();
            if per_uid.get(&uid).copied().unwrap_or(0) >= self.max_per_uid {
                return Err(WaitError::TooManyWaitersPerUid {
                    uid,
                    limit: self.max_per_uid,
                });
            }
            if self.total.load(Relaxed) >= self.max {
                return Err(WaitError::TooManyWaiters(self.max));
            }
            *per_uid.entry(uid).or_default() += 1;
        } else if self.total.load(Relaxed) >= self.max {
            return Err(WaitError::TooManyWaiters(self.max));
        }
        self.total.fetch_add(1, Relaxed);
        let mut confirmations = Vec::new();
        let (sender, wake) = watch::channel(0);
        let sender = Arc::new(sender);
        let mut resources = Vec::new();
        for queue_name in queue_names {
            let queue = queues.entry(queue_name.to_string()).or_insert_with(|| {
                confirmations
                    .extend(self.subscribe(&format!("{}{queue_name}", self.channel_prefix)));
                Queue {
                    order: VecDeque::new(),
                    held: false,
                    woken_by: VecDeque::new(),
                    release: None,
                    several: false,
                    running: Vec::new(),
                    handed: HashMap::new(),
                }
            });
            if resources.is_empty() {
                crate::redlock::trail::queued(queue.order.len());
            }
            queue.order.push_back((id, Arc::clone(&sender)));
            resources.push(queue_name.to_string());
        }
        self.metrics.waiters.inc();
        let ticket = Ticket {
            waiters: self,
            resources,
            id,
            uid,
            wake,
            granted: false,
            cancel: None,
        };
        Ok((ticket, confirmations))
    }
}

impl Ticket<'_> {
    /// Gives the request up when `cancel` is cancelled.
    pub(super) fn cancel_on(&mut self, cancel: Option<&CancellationToken>) {
        self.cancel = cancel.cloned();
    }

    /// Takes the wake-ups so far as seen: a round starts.
    pub(super) fn seen(&mut self) {
        self.wake.borrow_and_update();
    }

    /// Whether a wake-up came since the round started ([`Ticket::seen`]):
    /// a release heard while the head's round ran.
    pub(super) fn woken(&self) -> bool {
        self.wake.has_changed().unwrap_or(false)
    }

    /// Leaves with the lock (when dropped): the next head waits for its
    /// release.
    pub(super) fn granted(&mut self) {
        self.granted = true;
    }

    /// Whether a timer-driven retry fits the agent's budget
    /// ([`RETRIES_PER_SECOND`]); a release's wake-up needs none.
    pub(super) fn may_retry(&self) -> bool {
        self.waiters.retries.try_take()
    }

    /// A round failed: the release that woke it may not have reached every
    /// master yet, so its later messages may wake this queue again. In a
    /// semaphore's queue only the release this round took (`token`) is
    /// forgotten: the others went to other waiters, and hearing them again
    /// would send a waiter after a permit already taken.
    pub(super) fn hear_again(&self, token: Option<&str>) {
        let mut queues = self.waiters.lock();
        for resource in &self.resources {
            if let Some(queue) = queues.get_mut(resource) {
                if queue.several {
                    queue.woken_by.retain(|t| Some(t.as_str()) != token);
                } else {
                    queue.woken_by.clear();
                }
            }
        }
    }

    /// The token of the release handed to this waiter, or (the head's) of
    /// the release that last woke the queue, unless a round took it.
    pub(super) fn take_release(&self) -> Option<String> {
        let mut queues = self.waiters.lock();
        let queue = queues.get_mut(self.resources.first()?)?;
        if let Some(token) = queue.handed.remove(&self.id) {
            return Some(token);
        }
        let head = queue.order.front().is_some_and(|(id, _)| *id == self.id);
        head.then(|| queue.release.take()).flatten()
    }

    /// Marks the queue a semaphore's: releases heard while the head's
    /// round runs are handed to the waiters behind it (see
    /// [`Ticket::may_compete`]).
    pub(super) fn hand_offs(&self) {
        let mut queues = self.waiters.lock();
        for resource in &self.resources {
            if let Some(queue) = queues.get_mut(resource) {
                queue.several = true;
            }
        }
    }

    /// Whether this waiter may run a round now: it heads its queues, or
    /// it was handed a release of its own.
    pub(super) fn may_compete(&self) -> bool {
        self.handed() || self.is_head()
    }

    /// Whether a release was handed to this waiter (see
    /// [`Ticket::hand_offs`]): it competes for that permit at once, even
    /// when the previous head just left with one.
    pub(super) fn handed(&self) -> bool {
        let queues = self.waiters.lock();
        let first = self.resources.first().and_then(|r| queues.get(r));
        first.is_some_and(|q| q.handed.contains_key(&self.id))
    }

    /// A round of this waiter starts (`true`) or ends.
    pub(super) fn running(&self, running: bool) {
        let mut queues = self.waiters.lock();
        for resource in &self.resources {
            if let Some(queue) = queues.get_mut(resource) {
                queue.running.retain(|id| *id != self.id);
                if running {
                    queue.running.push(self.id);
                }
            }
        }
    }

    /// Whether the previous head left with the lock (and clears the hint).
    pub(super) fn take_held_hint(&self) -> bool {
        let mut queues = self.waiters.lock();
        let mut held = false;
        for resource in &self.resources {
            if let Some(queue) = queues.get_mut(resource) {
                held |= std::mem::take(&mut queue.held);
            }
        }
        held
    }

    /// Whether this ticket heads every queue it waits in.
    pub(super) fn is_head(&self) -> bool {
        let queues = self.waiters.lock();
        self.resources.iter().all(|resource| {
            queues
                .get(resource)
                .is_some_and(|q| q.order.front().map(|(id, _)| *id) == Some(self.id))
        })
    }

    /// Whether the request that waits was given up by its caller.
    pub(super) fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// Waits for a wake-up until `until`, for the agent's shutdown, or for
    /// the caller to give up.
    pub(super) async fn changed_until(&mut self, until: Instant) -> Wake {
        let left = until.saturating_duration_since(Instant::now());
        let shutdown = self.waiters.shutdown.clone();
        let cancel = self.cancel.clone().unwrap_or_default();
        tokio::select! {
            () = shutdown.cancelled() => Wake::ShuttingDown,
            () = cancel.cancelled() => Wake::Cancelled,
            changed = tokio::time::timeout(left, self.wake.changed()) => match changed {
                Ok(Ok(())) => Wake::Changed,
                _ => Wake::TimedOut,
            },
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut queues = self.waiters.lock();
        self.waiters
            .total
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(uid) = self.uid {
            let mut per_uid = self.waiters.per_uid();
            if let Some(count) = per_uid.get_mut(&uid) {
                *count -= 1;
                if *count == 0 {
                    per_uid.remove(&uid);
                }
            }
        }
        for resource in &self.resources {
            let Some(queue) = queues.get_mut(resource) else {
                continue;
            };
            let was_head = queue.order.front().map(|(id, _)| *id) == Some(self.id);
            queue.order.retain(|(id, _)| *id != self.id);
            queue.running.retain(|id| *id != self.id);
            if let Some(token) = queue.handed.remove(&self.id) {
                // A release handed to a waiter that left unused: the head
                // takes it.
                queue.release = Some(token);
                queue.held = false;
                queue.wake_head();
            }
            if queue.order.is_empty() {
                queues.remove(resource);
                if !self.waiters.observers().contains_key(resource) {
                    let channel = format!("{}{}", self.waiters.channel_prefix, resource);
                    self.waiters.unsubscribe(&channel);
                }
            } else if was_head {
                queue.held = self.granted;
                queue.wake_head();
            }
        }
        self.waiters.metrics.waiters.dec();
    }
}

/// A watch of one queue's releases (see [`Waiters::observe`]); dropping
/// it ends the watch.
pub struct Observation<'a> {
    waiters: &'a Waiters,
    name: String,
    changes: watch::Receiver<u64>,
}

impl Observation<'_> {
    /// Resolves at the next release or announcement heard for the queue
    /// (at once for one heard since the last call).
    pub async fn changed(&mut self) {
        if self.changes.changed().await.is_err() {
            // The sender lives as long as this watch: never.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Observation<'_> {
    fn drop(&mut self) {
        let queues = self.waiters.lock();
        let mut observers = self.waiters.observers();
        let last = observers.get_mut(&self.name).is_some_and(|(count, _)| {
            *count -= 1;
            *count == 0
        });
        if last {
            observers.remove(&self.name);
            if !queues.contains_key(&self.name) {
                let channel = format!("{}{}", self.waiters.channel_prefix, self.name);
                self.waiters.unsubscribe(&channel);
            }
        }
    }
}

#[cfg(test)]
mod tests;
