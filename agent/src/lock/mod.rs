//! The lock lifecycle, in one place: acquire (waiting in line), holds,
//! extend, release and force release. The TTL and owner rules, the
//! bookkeeping of grants, the wake-ups of waiters and the lock metrics are
//! each written once, here. Knows nothing of HTTP: [`crate::api`] maps
//! requests to [`Locks`] and its [`LockError`]s to answers.
//!
//! - [`acquire`]: the one acquire, of every kind of lock.
//! - [`grants`]: the locks this agent granted ([`Grants`]), and the
//!   process behind each.
//! - [`waiters`]: per-resource FIFO queues; only the head competes.
//! - [`multi`]: locks on several resources at once, all or none, under
//!   one token.
//! - [`budget`]: rate budgets for timer-driven work, shared by every
//!   resource of the agent.
//! - [`holds`]: locks tied to a client's connection, renewed until it ends.
//! - [`listing`]: the lock keys on the masters as operators read them.
//! - [`reentry`]: a lock acquired again by the process that holds it.
//! - [`idle`]: when the service is idle, and what wakes when it is not.
//! - [`isolation`]: tokens kept to the pod (or uid) that acquired them,
//!   for an agent that serves a whole node.
//! - [`streams`]: each uid's share of the streams served here (holds,
//!   campaigns, observers).

pub mod acquire;
pub mod budget;
pub mod elections;
pub mod events;
mod grants;
pub mod holds;
pub mod idle;
pub mod isolation;
pub mod listing;
pub mod multi;
pub mod reentry;
pub mod semaphores;
pub mod streams;
pub mod waiters;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_wire::{AcquireRequest, ForceReleaseResponse, HoldEvent, OnDisconnect};
use tokio_util::sync::CancellationToken;

use crate::config::{FenceMode, Isolate, LockConfig};
use crate::metrics::Metrics;
use crate::redlock::{token, Extend, Failure, Grant, Redlock, Release, Resource, Store, Token};
pub use grants::{Grants, Held, Holder};
use listing::Listings;
use waiters::{WaitError, Waiters};

/// The rules every lock request is held to, from `lock.*` in the config.
#[derive(Debug, Clone)]
pub struct Rules {
    pub default_ttl: Duration,
    pub max_ttl: Duration,
    pub node_timeout: Duration,
    pub max_hold: Duration,
    pub fence: FenceMode,
    /// Holds hear of a loss between renewals (see [`holds`]). Off only
    /// through the test switch `REDLOCK_TEST_NO_LOSS_NOTICE`, for control
    /// runs: holds then hear of a loss at their next renewal.
    pub loss_notice: bool,
    /// Whose tokens a caller may use (`socket.isolate`, see [`isolation`]).
    pub isolate: Isolate,
    /// A re-entry, a re-entering hold's renewal and an extension of a
    /// re-entered lock set at least the longest TTL set before for its
    /// token, so that none cuts a validity told before (see [`reentry`]).
    /// Off only through the test switch `REDLOCK_TEST_REENTRY_MAY_SHORTEN`,
    /// for control runs: each then sets the TTL it asked for.
    pub reentry_keeps_ttl: bool,
    /// Whether pid 0, what the kernel reports for a peer in a pid namespace
    /// this agent does not see, names a process that may re-enter. Never,
    /// but under the test switch `REDLOCK_TEST_REENTRY_TRUSTS_PID_ZERO`,
    /// for control runs: every such peer then passes for the same process.
    pub reentry_trusts_pid_zero: bool,
    /// Whether a renewal waits for its client to have room for `renewed`.
    /// Never, but under the test switch
    /// `REDLOCK_TEST_RENEWALS_WAIT_FOR_CLIENT`, for control runs: a client
    /// that stops reading then stops its renewals (see [`events`]).
    pub renewals_wait_for_client: bool,
    /// Every extension of a permit, through any agent, keeps its
    /// semaphore's limit note alive (see [`semaphores`]). Off only
    /// through the test switch `REDLOCK_TEST_SEMAPHORE_LIMIT_BY_GRANTER`,
    /// for control runs: only the agent that granted the permit, while it
    /// runs, keeps the note, which lapses while the permit is held.
    pub limit_kept_by_any_agent: bool,
    /// Streams (holds, campaigns, observers) one uid may have open at
    /// once (`lock.max_streams_per_uid`, see [`streams`]).
    pub max_streams_per_uid: usize,
}

impl Rules {
    /// From `lock.*` and `socket.isolate`.
    pub fn new(lock: &LockConfig, isolate: Isolate) -> Rules {
        Rules {
            default_ttl: lock.default_ttl,
            max_ttl: lock.max_ttl,
            node_timeout: lock.node_timeout,
            max_hold: lock.max_hold,
            fence: lock.fence,
            loss_notice: true,
            isolate,
            reentry_keeps_ttl: true,
            reentry_trusts_pid_zero: false,
            renewals_wait_for_client: false,
            limit_kept_by_any_agent: true,
            max_streams_per_uid: lock.max_streams_per_uid,
        }
    }

    /// The TTL asked for, or the default; refused outside twice the node
    /// timeout (below it a grant could have no validity left after a slow
    /// master and the drift allowance) to `max_ttl`.
    pub fn ttl(&self, ttl_ms: Option<u64>) -> Result<Duration, LockError> {
        let Some(ms) = ttl_ms else {
            return Ok(self.default_ttl);
        };
        let ttl = Duration::from_millis(ms);
        let min = (self.node_timeout * 2).min(self.max_ttl);
        if ttl < min || ttl > self.max_ttl {
            return Err(LockError::TtlOutOfRange {
                min: millis(min),
                max: millis(self.max_ttl),
                ms,
            });
        }
        Ok(ttl)
    }

    /// How long a hold may last: `max_hold_ms` if given, 1 to `max_hold`.
    pub fn max_hold(&self, max_hold_ms: Option<u64>) -> Result<Duration, LockError> {
        match max_hold_ms {
            None => Ok(self.max_hold),
            Some(0) => Err(LockError::Invalid("max_hold_ms must be at least 1".into())),
            Some(ms) if Duration::from_millis(ms) > self.max_hold => {
                Err(LockError::Invalid(format!(
                    "max_hold_ms is above lock.max_hold ({}ms): {ms}",
                    self.max_hold.as_millis()
                )))
            }
            Some(ms) => Ok(Duration::from_millis(ms)),
        }
    }
}

/// Why a lock request got no lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "ttl_ms must be between {min} (twice lock.node_timeout) and {max} (lock.max_ttl): {ms}"
    )]
    TtlOutOfRange { min: u64, max: u64, ms: u64 },
    #[error("owner must be 1 to 128 bytes of printable ASCII")]
    InvalidOwner,
    /// Another field out of range; the message names it.
    #[error("{0}")]
    Invalid(String),
    #[error("{0} is locked by another holder")]
    Taken(Resource),
    /// A lock on several resources, any of them held by others for all of
    /// the wait; the message names them all.
    #[error("one or more of {0} is locked by another holder")]
    TakenMany(String),
    /// Every permit of a semaphore was held by others for all of the wait.
    #[error("semaphore {semaphore} has all its permits held by others (limit {limit})")]
    Full { semaphore: Resource, limit: u32 },
    /// A semaphore asked for with another limit than its permits'.
    #[error("semaphore {semaphore} has limit {theirs} while its permits are held; this request asked for {ours}")]
    LimitMismatch {
        semaphore: Resource,
        theirs: String,
        ours: u32,
    },
    /// Fewer than a quorum of masters could be used; the message names them.
    #[error("{0}")]
    NoQuorum(String),
    /// A lock, a permit or a leadership (the message says which).
    #[error("{} was not extended on a quorum in time; it is lost", .0.what())]
    Lost(Resource),
    #[error(transparent)]
    Wait(#[from] WaitError),
    /// The caller's uid has `lock.max_streams_per_uid` streams open.
    #[error(transparent)]
    TooManyStreams(#[from] streams::TooManyStreams),
    /// A re-entry whose token is not this agent's current grant.
    #[error("{0} is not held here with this token: a re-entry takes the token of this agent's current grant of the lock (acquired here, not run out, not released, not a hold's)")]
    NotReentrant(Resource),
    /// A re-entry from another process than the grant's.
    #[error("{0} was acquired by another process: only the process that acquired a lock (the same peer pid) may re-enter it")]
    ReentryForbidden(Resource),
    /// A re-entry from a process whose pid this agent cannot see.
    #[error("{0} cannot be re-entered through this agent: the kernel reports no pid for the calling process (it runs in a pid namespace the agent does not see), so the agent cannot tell it from any other process; run the application and the agent in one pid namespace (in Kubernetes, shareProcessNamespace: true) to re-enter locks")]
    ReentryUnavailable(Resource),
    /// Under `socket.isolate`, a token that is not a grant held here for
    /// the caller's pod (or uid): another's, or none; never said which.
    #[error(
        "{resource}: this {} holds no lock, permit or leadership here with this token (socket.isolate: {}): a token is \
         used only from the {} that acquired it, through the agent that granted it, while that \
         agent holds the lock",
        .isolate.as_str(),
        .isolate.as_str(),
        .isolate.as_str()
    )]
    Isolated {
        resource: Resource,
        isolate: Isolate,
    },
}

/// What a lock request asks for: the fields every request that takes a
/// lock shares, as the wire declares them, and who asks.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    pub lock: AcquireRequest,
    /// The requesting process, as the kernel reported it.
    pub holder: Option<Holder>,
}

/// What a release came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Released on a quorum.
    Released,
    /// So many masters did not hold it that no quorum did: its validity
    /// had run out.
    NotHeld,
    /// A re-entered lock's count was lowered: still held, and it takes
    /// this many releases more.
    StillHeld(u32),
}

/// What a request that takes a lock asks for, checked ([`Locks::terms`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub ttl: Duration,
    pub wait: Duration,
    pub fence: bool,
}

/// A successful extension.
#[derive(Debug, Clone, Copy)]
pub struct Extended {
    pub validity: Duration,
    pub ttl: Duration,
}

/// The lock service: every lock operation of this agent goes through it.
#[derive(Debug)]
pub struct Locks<M: Store> {
    engine: Redlock<M>,
    rules: Rules,
    grants: Grants,
    waiters: Arc<Waiters>,
    /// The holds running here, for the force releases that end them.
    holds: holds::Registry,
    listings: Listings,
    streams: streams::Streams,
    /// Observers' timer-driven reads of a leader (see [`elections`]).
    observer_reads: budget::Budget,
    metrics: Arc<Metrics>,
    /// Cancelled when the agent starts to shut down: holds end with `lost`.
    shutdown: CancellationToken,
    activity: idle::Activity,
    /// Grants on several resources made here, by token.
    multi: multi::MultiGrants,
}

impl<M: Store> Locks<M> {
    pub fn new(
        engine: Redlock<M>,
        rules: Rules,
        waiters: Arc<Waiters>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Locks<M> {
        Locks {
            engine,
            streams: streams::Streams::new(rules.max_streams_per_uid),
            observer_reads: budget::Budget::new(elections::OBSERVER_READS_PER_SECOND),
            rules,
            grants: Grants::default(),
            waiters,
            holds: holds::Registry::default(),
            listings: Listings::default(),
            metrics,
            shutdown,
            activity: idle::Activity::default(),
            multi: multi::MultiGrants::default(),
        }
    }

    /// Records a lock request; the first after an idle spell wakes the
    /// masters' probes and the pub/sub subscribers (see [`idle`]).
    pub fn touch(&self) {
        if self.activity.touch() {
            self.engine.probe_soon();
            self.waiters.wake_listeners();
        }
    }

    /// How long the service has been without work: zero while a grant, a
    /// hold or a waiter is here, else the time since the last request.
    /// Idle at [`idle::IDLE_AFTER`].
    pub fn idle_for(&self) -> Duration {
        let busy = self.grants.any_valid(Instant::now())
            || self.waiters.total() > 0
            || self.waiters.observed() > 0
            || !self.holds.is_empty();
        if busy {
            Duration::ZERO
        } else {
            self.activity.since()
        }
    }

    pub fn engine(&self) -> &Redlock<M> {
        &self.engine
    }

    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    pub fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    pub fn listings(&self) -> &Listings {
        &self.listings
    }

    /// A slot for one more stream of the caller's uid, to keep for as long
    /// as the stream is open (see [`streams`]).
    ///
    /// # Errors
    /// [`LockError::TooManyStreams`] when the uid has its share open.
    pub fn open_stream(&self, uid: Option<u32>) -> Result<streams::Slot, LockError> {
        Ok(self.streams.open(uid)?)
    }

    pub fn holds(&self) -> &holds::Registry {
        &self.holds
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Acquires `resource` for a hold: a task renews it until the receiver
    /// of the events is dropped (the client's connection closed), it is
    /// lost, `max_hold_ms` passes or the agent shuts down (see [`holds`]).
    /// The first event, `acquired`, is already in the channel.
    ///
    /// # Errors
    /// As [`Locks::acquire`], and `max_hold_ms` out of range.
    pub async fn hold(
        self: &Arc<Self>,
        resource: Resource,
        ask: Ask,
        max_hold_ms: Option<u64>,
        on_disconnect: OnDisconnect,
    ) -> Result<events::Receiver<HoldEvent>, LockError> {
        let max_hold = self.rules.max_hold(max_hold_ms)?;
        let grant = self.acquire(&resource, ask).await?;
        let (events, _task) = self
            .start_hold(
                resource,
                grant,
                max_hold,
                on_disconnect,
                None,
                holds::Held::Lock,
            )
            .await?;
        Ok(events)
    }

    /// Starts the hold of a lock (or permit) just granted: once the
    /// subscribers are listening, and only with validity enough left to
    /// say `lost` in time (else released and answered `no_quorum`).
    pub(crate) async fn start_hold(
        self: &Arc<Self>,
        resource: Resource,
        grant: Grant,
        max_hold: Duration,
        on_disconnect: OnDisconnect,
        permit: Option<u32>,
        held: holds::Held,
    ) -> Result<
        (
            events::Receiver<HoldEvent>,
            tokio::task::JoinHandle<holds::End>,
        ),
        LockError,
    > {
        // The subscribers of an agent that was idle connect while the
        // votes are under way; a hold starts once they are on the
        // force-release channel, so a force release right after its grant
        // ends it at once rather than at its first renewal.
        self.waiters.listening().await;
        // Before anyone can know the token: a hold's grant is renewed and
        // released by its hold alone, never re-entered.
        self.grants
            .mark_hold(resource.as_str(), grant.token.as_str());
        // A grant whose masters answered so late that less validity is left
        // than a hold needs to say `lost` in time is not handed out as a
        // hold: its holder would work past the validity (released here,
        // and answered as the slow quorum it is).
        let left = grant.validity.saturating_sub(grant.granted_at.elapsed());
        let margin = holds::lost_margin(grant.ttl, self.rules.node_timeout);
        if left <= margin {
            self.release_ended(&resource, &grant.token).await;
            self.metrics.fail(Failure::NoQuorum);
            return Err(LockError::NoQuorum(format!(
                "granted with {}ms of validity left, not more than the {}ms a hold needs to say lost in time: the masters answered too slowly; retry",
                millis(left),
                millis(margin)
            )));
        }
        let (events, receiver) = events::stream::<HoldEvent>();
        let acquired = HoldEvent::Acquired {
            token: grant.token.as_str().to_string(),
            validity_ms: millis(grant.validity.saturating_sub(grant.granted_at.elapsed())),
            ttl_ms: millis(grant.ttl),
            fence: grant.fence,
            permit,
            hold_count: None,
        };
        events.first(acquired);
        let task = tokio::spawn(holds::run(
            Arc::clone(self),
            resource,
            grant,
            max_hold,
            holds::Ending::Own(on_disconnect),
            held,
            events,
        ));
        Ok((receiver, task))
    }

    /// A new TTL from now for a lock held with `token`, asked for by
    /// `caller`.
    ///
    /// # Errors
    /// Under `socket.isolate`, a token not held here for the caller's pod
    /// or uid ([`LockError::Isolated`]); the TTL out of range, the lock lost
    /// (not extended on a quorum in time), or no quorum.
    pub async fn extend(
        &self,
        resource: &Resource,
        token: &Token,
        ttl_ms: Option<u64>,
        caller: Option<&Holder>,
    ) -> Result<Extended, LockError> {
        self.touch();
        self.check_isolation(resource, token, caller)?;
        let ttl = self.rules.ttl(ttl_ms)?;
        let ttl = self.reentry_ttl(resource, token, ttl);
        match self.engine.extend(resource, token, ttl).await {
            Extend::Extended { validity, .. } => {
                self.extended(resource, token, validity, ttl);
                Ok(Extended { validity, ttl })
            }
            Extend::Lost | Extend::Failed => {
                self.metrics.extensions.with_label_values(&["lost"]).inc();
                self.metrics.fail(Failure::ExtendFailed);
                Err(LockError::Lost(resource.clone()))
            }
            Extend::NoQuorum(message) => {
                self.metrics.fail(Failure::NoQuorum);
                Err(LockError::NoQuorum(message))
            }
        }
    }

    /// Releases on every master, or lowers the count of a re-entered lock
    /// (see [`reentry`]) without touching them; asked for by `caller`.
    ///
    /// # Errors
    /// Under `socket.isolate`, a token not held here for the caller's pod
    /// or uid ([`LockError::Isolated`]). [`LockError::NoQuorum`] when
    /// neither is known: too many masters failed or timed out. The grant
    /// stays listed here until its validity ends, and a retry with the same
    /// token is safe.
    pub async fn release(
        &self,
        resource: &Resource,
        token: &Token,
        caller: Option<&Holder>,
    ) -> Result<Released, LockError> {
        self.touch();
        self.check_isolation(resource, token, caller)?;
        self.settle_closed_holds(resource, token).await;
        if let Some(left) = self.grants.release_one(resource.as_str(), token.as_str()) {
            return Ok(Released::StillHeld(left));
        }
        let wake = || self.wake_waiters(resource, token);
        match self.engine.release_then(resource, token, wake).await {
            Release::Released => {
                self.released(resource, token);
                Ok(Released::Released)
            }
            Release::NotHeld => {
                self.metrics.fail(Failure::ReleaseFailed);
                Ok(Released::NotHeld)
            }
            Release::Unconfirmed(message) => {
                self.metrics.fail(Failure::NoQuorum);
                Err(LockError::NoQuorum(message))
            }
        }
    }

    /// Releases the lock of a hold that ended, and forgets it here whether
    /// or not a quorum still held it (a lost hold's key may be gone).
    async fn release_ended(&self, resource: &Resource, token: &Token) -> Release {
        let wake = || self.wake_waiters(resource, token);
        let released = self.engine.release_then(resource, token, wake).await;
        self.released(resource, token);
        released
    }

    /// Bookkeeping of a successful extension that set `ttl`.
    fn extended(&self, resource: &Resource, token: &Token, validity: Duration, ttl: Duration) {
        self.metrics
            .extensions
            .with_label_values(&["extended"])
            .inc();
        self.grants.extended(
            resource.as_str(),
            token.as_str(),
            Instant::now() + validity,
            ttl,
        );
        // A permit's semaphore keeps its limit as long as the permit,
        // whichever agent extends it: this one's note, or the one there.
        if let Some(name) = resource.semaphore() {
            let limit = self.grants.limit(resource.as_str(), token.as_str());
            if limit.is_some() || self.rules.limit_kept_by_any_agent {
                self.keep_limit(name, limit, ttl.max(self.rules.default_ttl));
            }
        }
    }

    /// Bookkeeping of a release: the grant is forgotten and the next waiter
    /// here woken (waiters on other agents hear the release script's
    /// announcement), unless the release's queuing woke it already.
    fn released(&self, resource: &Resource, token: &Token) {
        self.grants
            .released(resource.as_str(), token.as_str(), &self.metrics);
        self.wake_waiters(resource, token);
    }

    /// Wakes the next waiter here for `resource`, released by `token`: as
    /// soon as the release is queued on every master (see
    /// [`Redlock::release_then`]), so its vote follows the release in the
    /// same batches rather than a round trip later. Waking early grants
    /// nothing: the waiter still needs a quorum of votes, each run on its
    /// master behind the release; one that finds the lock still held
    /// (the release failed there) is an ordinary refused vote.
    fn wake_waiters(&self, resource: &Resource, token: &Token) {
        self.waiters.released_here(resource.queue(), token.as_str());
    }

    /// Deletes the lock key of `resource` on every master, whoever holds it.
    /// For operators clearing a stuck lock (only on the admin socket); logged
    /// with the caller and the holder it removed, and counted. Once every
    /// master has answered, the value each removed is announced on it, on
    /// the fleet's force-release channel (see
    /// [`waiters::force_release_channel`]), so the hold of that token, on
    /// whichever agent, hears `lost` at once; one here hears it directly,
    /// as do the waiters here. Announced only after the deletes, so the
    /// hold that ends releases nothing this force release still had to
    /// delete, and `deleted` counts every key it removed.
    pub async fn force_release(
        &self,
        resource: &Resource,
        caller: Option<Holder>,
    ) -> ForceReleaseResponse {
        let key = self.engine.key(resource);
        let nodes = self.engine.nodes();
        let channel = self.waiters.force_channel();
        // Read before the delete: this agent hears its own announcement
        // and forgets the grant, perhaps before the last master answers.
        let granted_here = self.grants.current(resource.as_str());
        let results = futures::future::join_all(nodes.iter().map(|n| n.force_delete(&key))).await;
        let mut deleted = 0;
        let mut failed = Vec::new();
        // The holder, for the log: the value most masters held.
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for (node, result) in nodes.iter().zip(&results) {
            match result {
                Ok(Some(value)) => {
                    deleted += 1;
                    // A shared lock's readers, one per line.
                    for token in value.lines().filter(|t| !t.is_empty()) {
                        *votes.entry(token).or_default() += 1;
                    }
                }
                Ok(None) => {}
                Err(_) => failed.push(node.name().to_string()),
            }
        }
        let removed = votes
            .iter()
            .max_by_key(|&(value, count)| (*count, *value))
            .map(|(value, _)| (*value).to_string());
        let process = granted_here
            .filter(|(token, _)| removed.as_deref() == Some(token.as_str()))
            .and_then(|(_, holder)| holder);
        let value = removed.as_deref().unwrap_or("");
        tracing::warn!(
            %resource,
            deleted,
            failed = ?failed,
            caller_uid = %show_id(caller.map(|c| c.uid)),
            caller_pid = %show_id(caller.and_then(|c| c.pid)),
            holder_agent = token::agent_of(value).unwrap_or("-"),
            holder_owner = token::owner_of(value).unwrap_or("-"),
            holder_uid = %show_id(process.map(|p| p.uid)),
            holder_pid = %show_id(process.and_then(|p| p.pid)),
            "force release by an operator"
        );
        self.metrics.force_releases.inc();
        self.grants.forget(resource.as_str(), &self.metrics);
        let announcements = nodes.iter().zip(&results).flat_map(|(node, result)| {
            let value = result.as_ref().ok().and_then(Option::as_deref).unwrap_or("");
            value.lines().filter(|t| !t.is_empty()).map(move |token| {
                let message = format!("{resource}\n{token}");
                async move {
                    if let Err(e) = node.announce(channel, &message).await {
                        // Holds elsewhere then hear of it at their next renewal.
                        tracing::debug!(node = node.name(), error = %e, "force release not announced");
                    }
                }
            })
        });
        futures::future::join_all(announcements).await;
        for value in votes.keys() {
            self.heard_force_release(resource.as_str(), value);
        }
        if votes.is_empty() {
            // No lock's value was removed (no key, or not a lock's): the
            // waiters here are woken all the same, as before.
            self.waiters.released(resource.queue(), None);
        }
        ForceReleaseResponse { deleted, failed }
    }

    /// An operator's force release removed `value` from the key of
    /// `resource` on some master (told by this agent's own force release,
    /// or by any agent's on the fleet's channel): the hold of that token
    /// here ends with `lost` (`force_released`), the grant is forgotten,
    /// and the waiters for `resource` here are woken once.
    pub(crate) fn heard_force_release(&self, resource: &str, value: &str) {
        if self.rules.loss_notice && self.holds.force_released(resource, value) {
            tracing::info!(%resource, "the lock of a hold here was force-released by an operator");
        }
        self.grants.released(resource, value, &self.metrics);
        self.waiters
            .released(crate::redlock::resource::queue_of(resource), Some(value));
    }
}

/// Refuses an owner label that is not 1 to 128 bytes of printable ASCII.
pub(crate) fn check_owner(owner: Option<&str>) -> Result<(), LockError> {
    match owner {
        Some(o) if !token::valid_owner(o) => Err(LockError::InvalidOwner),
        _ => Ok(()),
    }
}

/// A uid or pid for the log; `-` when the kernel did not say.
pub(crate) fn show_id(id: Option<u32>) -> String {
    id.map_or_else(|| "-".to_string(), |id| id.to_string())
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
