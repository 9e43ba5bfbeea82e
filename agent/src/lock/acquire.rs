//! The one acquire: every kind of lock is taken here. A lock, several
//! at once, a semaphore's permit and an election's leadership each bring
//! their contest ([`Take`]: what a round votes for, what a refusal says,
//! what a grant records) and nothing else; the acquire checks what the
//! request asks for, runs its rounds, in line behind this agent's earlier
//! waiters when it waits (the queues and their wake-ups are
//! [`super::waiters`]'), answers a refusal, records the grant, and counts
//! every kind alike (`redlock_acquire_wait_seconds{kind, outcome}`,
//! `redlock_failures_total`).
//!
//! A new kind of lock is one contest in one file, and the
//! [`Kind`](crate::redlock::Kind) its resources are made with (which
//! names it in the metrics and traces).

use std::future::Future;
use std::time::{Duration, Instant};

use redlock_wire::AcquireRequest;
use tokio_util::sync::CancellationToken;

use super::waiters::{Ticket, WaitError, Waiters, Wake, SUBSCRIBE_WAIT};
use super::{check_owner, Ask, Holder, LockError, Locks, Terms};
use crate::config::FenceMode;
use crate::metrics::Outcome;
use crate::redlock::{Acquire, Failure, Grant, Kind, Master, Redlock, Resource, Store, Token};

/// What a waiter competes for in each of its rounds: one lock
/// (`crate::lock::acquire::LockContest`), several at once
/// (`crate::lock::multi::MultiContest`), any permit of a semaphore
/// (`crate::lock::semaphores::PermitContest`) or an election's leadership
/// (`crate::lock::elections::CampaignContest`).
pub trait Contest<M: Master>: Send {
    /// The queue it waits in: the lock's resource, or the semaphore's
    /// (see [`crate::redlock::Resource::queue`]); its releases wake that queue.
    fn queue(&self) -> &str;

    /// Every queue it waits in, [`Contest::queue`] first: a lock on
    /// several resources waits in each of theirs.
    fn queues(&self) -> impl Iterator<Item = &str> + Send {
        std::iter::once(self.queue())
    }

    /// One round of votes. `waiting`: the caller will wait if it fails,
    /// so the votes ask the holder's release to announce itself.
    fn round(
        &mut self,
        redlock: &Redlock<M>,
        waiting: bool,
    ) -> impl std::future::Future<Output = Acquire> + Send;

    /// Whether waiting cannot help (a semaphore asked with another limit
    /// than its permits'): the last round's answer stands.
    fn settled(&self) -> bool {
        false
    }

    /// Told once, when it joins the line (its first round failed, or
    /// others already waited there).
    fn waiting(&mut self) {}

    /// Told before each round in line the token of the release that woke
    /// it, when one did and named it: a semaphore votes for that permit
    /// beside its read.
    fn woken_by(&mut self, token: Option<&str>) {
        let _ = token;
    }

    /// After a granted round in line: whether the next waiter may try at
    /// once instead of waiting for a release, because the round made room
    /// for another holder (a semaphore's round that won more than one
    /// permit and gave the others back) or, with `released`, a release was
    /// heard while it ran (another permit freed). A lock's next waiter
    /// waits: the lock is taken now, whatever was heard.
    fn room_left(&self, released: bool) -> bool {
        let _ = released;
        false
    }

    /// Whether waiters in line may compete at once, each for a release of
    /// its own: a semaphore's (see [`Ticket::hand_offs`]).
    fn several(&self) -> bool {
        false
    }
}

/// A kind of lock as the one acquire takes it: its [`Contest`], and what
/// its refusals and its grants are.
pub trait Take<M: Store>: Contest<M> {
    /// What a granted request gets.
    type Won: Send;

    /// Why the request got nothing when its last round found it taken
    /// (or, for a contest [`Contest::settled`] early, why it stopped).
    fn refused(&mut self) -> LockError;

    /// Records the grant of the round that won (see [`super::Grants`])
    /// and makes the answer.
    fn won(
        &mut self,
        locks: &Locks<M>,
        grant: Grant,
        holder: Option<Holder>,
    ) -> impl Future<Output = Self::Won> + Send;
}

/// One lock: every round of one request uses the same token (see
/// [`Redlock::acquire_once`]), bound to the resource's lock key.
pub struct LockContest<'a> {
    resource: &'a Resource,
    ttl: Duration,
    token: Token,
    fence: bool,
}

impl<'a> LockContest<'a> {
    pub fn new<M: Master>(
        redlock: &Redlock<M>,
        resource: &'a Resource,
        ttl: Duration,
        owner: Option<&str>,
        fence: bool,
    ) -> LockContest<'a> {
        let token = Token::generate(
            &redlock.key(resource),
            redlock.settings().agent_name.as_deref(),
            owner,
        );
        LockContest {
            resource,
            ttl,
            token,
            fence,
        }
    }
}

impl<M: Master> Contest<M> for LockContest<'_> {
    fn queue(&self) -> &str {
        self.resource.queue()
    }

    async fn round(&mut self, redlock: &Redlock<M>, waiting: bool) -> Acquire {
        redlock
            .acquire_once(self.resource, self.ttl, &self.token, self.fence, waiting)
            .await
    }
}

impl<M: Store> Take<M> for LockContest<'_> {
    type Won = Grant;

    fn refused(&mut self) -> LockError {
        LockError::Taken(self.resource.clone())
    }

    async fn won(&mut self, locks: &Locks<M>, grant: Grant, holder: Option<Holder>) -> Grant {
        locks.grants.granted(self.resource, &grant, holder);
        grant
    }
}

impl<M: Store> Locks<M> {
    /// Acquires `resource`, waiting in line up to `wait_ms`, and records the
    /// grant.
    ///
    /// # Errors
    /// A field out of range, the lock taken for all of the wait, no quorum,
    /// too many waiters, or the agent shutting down.
    pub async fn acquire(&self, resource: &Resource, ask: Ask) -> Result<Grant, LockError> {
        self.take(&ask, resource.kind(), |locks, terms| {
            Ok(LockContest::new(
                &locks.engine,
                resource,
                terms.ttl,
                ask.lock.owner.as_deref(),
                terms.fence,
            ))
        })
        .await
    }

    /// The one acquire, of any kind: checks what `ask` asks for, makes
    /// the kind's contest with `contest`, waits in line up to its
    /// `wait_ms`, and answers; counted, the agent no longer idle.
    ///
    /// # Errors
    /// As [`Locks::acquire`], and whatever `contest` refuses or the
    /// kind's refusal says.
    pub(crate) async fn take<K: Take<M>>(
        &self,
        ask: &Ask,
        kind: Kind,
        contest: impl FnOnce(&Self, &Terms) -> Result<K, LockError>,
    ) -> Result<K::Won, LockError> {
        self.touch();
        let started = Instant::now();
        let taken = async {
            let terms = self.terms(&ask.lock)?;
            let mut contest = contest(self, &terms)?;
            self.contend(&mut contest, terms.wait, ask.holder, None)
                .await
        }
        .await;
        self.count_acquire(kind, started, &taken);
        taken
    }

    /// Wins `contest`, waiting up to `wait` in line (until `cancel`, if
    /// any), and answers as [`Locks::take`] does, uncounted: a campaign,
    /// which waits for as long as its client does, counts its own (see
    /// [`Locks::count_acquire`]).
    ///
    /// # Errors
    /// As [`Locks::take`].
    pub(crate) async fn contend<K: Take<M>>(
        &self,
        contest: &mut K,
        wait: Duration,
        holder: Option<Holder>,
        cancel: Option<&CancellationToken>,
    ) -> Result<K::Won, LockError> {
        let uid = holder.map(|h| h.uid);
        let outcome = contend(&self.waiters, &self.engine, contest, wait, uid, cancel).await?;
        match outcome {
            Acquire::Granted(grant) => Ok(contest.won(self, grant, holder).await),
            Acquire::Taken { .. } => Err(contest.refused()),
            Acquire::NoQuorum(message) => Err(LockError::NoQuorum(message)),
        }
    }

    /// Counts an acquire's answer, `started` when its request came, in
    /// `redlock_acquire_wait_seconds{kind, outcome}`, and a refusal for
    /// taken or without a quorum in `redlock_failures_total`.
    pub(crate) fn count_acquire<T>(
        &self,
        kind: Kind,
        started: Instant,
        taken: &Result<T, LockError>,
    ) {
        let outcome = match taken {
            Ok(_) => Outcome::Acquired,
            Err(LockError::Taken(_) | LockError::TakenMany(_) | LockError::Full { .. }) => {
                self.metrics.fail(Failure::Taken);
                Outcome::Taken
            }
            Err(LockError::NoQuorum(_)) => {
                self.metrics.fail(Failure::NoQuorum);
                Outcome::NoQuorum
            }
            Err(_) => Outcome::Error,
        };
        self.metrics
            .acquire_wait
            .with_label_values(&[kind.as_str(), outcome.as_str()])
            .observe(started.elapsed().as_secs_f64());
    }

    /// What every request that takes a lock (or locks, or a permit) asks
    /// for, checked: its TTL within the rules, its owner label, how long
    /// it may wait, and whether it is fenced.
    ///
    /// # Errors
    /// The TTL out of range, or an owner label that is not one.
    pub(crate) fn terms(&self, lock: &AcquireRequest) -> Result<Terms, LockError> {
        let ttl = self.rules.ttl(lock.ttl_ms)?;
        check_owner(lock.owner.as_deref())?;
        Ok(Terms {
            ttl,
            wait: Duration::from_millis(lock.wait_ms.unwrap_or(0)),
            fence: lock.fence || self.rules.fence == FenceMode::Always,
        })
    }
}

/// Wins `contest`, waiting up to `wait` in the line of its queue
/// ([`Contest::queue`]) behind this agent's other waiters, or until
/// `cancel` is cancelled (then answered as a wait that ran out). A
/// round under way when `cancel` comes is finished, and its grant
/// answered: the caller releases it.
///
/// # Errors
/// When `lock.max_waiters` requests already wait, or `uid` already has
/// `lock.max_waiters_per_uid` waiting, or the agent shuts down while
/// this one waits.
pub(crate) async fn contend<M: Master, C: Contest<M>>(
    waiters: &Waiters,
    redlock: &Redlock<M>,
    contest: &mut C,
    wait: Duration,
    uid: Option<u32>,
    cancel: Option<&CancellationToken>,
) -> Result<Acquire, WaitError> {
    let deadline = Instant::now() + wait;
    // No one waits here in this queue: try at once, and queue (and
    // subscribe to its release channel) only if it is taken. With
    // waiters, join the queue: newcomers do not overtake them.
    if wait.is_zero() || !waiters.queued(contest.queues()) {
        let first = contest.round(redlock, !wait.is_zero()).await;
        let hopeless = matches!(first, Acquire::NoQuorum(_)) && !redlock.quorum_usable();
        if wait.is_zero() || matches!(first, Acquire::Granted(_)) || hopeless || contest.settled() {
            return Ok(first);
        }
    }
    let (mut ticket, subscribed) = waiters.join(contest.queues(), uid)?;
    if contest.several() {
        ticket.hand_offs();
    }
    ticket.cancel_on(cancel);
    contest.waiting();
    // Once the masters confirm the subscription, no release published
    // after our first attempt can be missed. Bounded: a master that does
    // not answer leaves only the retry delay as the fallback.
    let _ = tokio::time::timeout(SUBSCRIBE_WAIT, futures::future::join_all(subscribed)).await;
    wait_in_line(&mut ticket, redlock, contest, deadline).await
}

/// Competes in `contest` whenever `ticket` is the head of its queue
/// and something changed, until granted, `deadline` or its cancel.
async fn wait_in_line<M: Master, C: Contest<M>>(
    ticket: &mut Ticket<'_>,
    redlock: &Redlock<M>,
    contest: &mut C,
    deadline: Instant,
) -> Result<Acquire, WaitError> {
    let mut last = Acquire::Taken { free_in: None };
    loop {
        // Only the head competes (and, in a semaphore's queue, a waiter
        // handed a release); the others wait for a change of head.
        while !ticket.may_compete() {
            match ticket.changed_until(deadline).await {
                Wake::Changed => {}
                Wake::TimedOut | Wake::Cancelled => return Ok(last),
                Wake::ShuttingDown => return Err(WaitError::ShuttingDown),
            }
        }
        if ticket.is_head() && ticket.take_held_hint() && !ticket.handed() {
            // The previous head just got the lock: trying now would only
            // find it taken. Wait for its release (or, should it expire
            // instead, the retry delay).
            let retry = (Instant::now() + redlock.retry_delay()).min(deadline);
            if ticket.changed_until(retry).await == Wake::ShuttingDown {
                return Err(WaitError::ShuttingDown);
            }
            if Instant::now() >= deadline || ticket.cancelled() {
                return Ok(last);
            }
        }
        ticket.seen();
        let release = ticket.take_release();
        contest.woken_by(release.as_deref());
        ticket.running(true);
        last = contest.round(redlock, true).await;
        ticket.running(false);
        if contest.settled() {
            return Ok(last);
        }
        match last {
            Acquire::Granted(_) => {
                if !contest.room_left(ticket.woken()) {
                    ticket.granted();
                }
                return Ok(last);
            }
            // With no quorum usable there is nothing to wait for here;
            // answer at once rather than hold the caller.
            Acquire::NoQuorum(_) if !redlock.quorum_usable() => return Ok(last),
            Acquire::Taken { .. } | Acquire::NoQuorum(_) => {
                ticket.hear_again(release.as_deref());
            }
        }
        // Wait for a release, or vote again in case the lock expires
        // instead (expiry publishes nothing): once it can have expired on
        // a quorum, as the masters said, or where they did not say after
        // a random delay. Such a retry needs the agent's retry budget, a
        // release never does.
        let mut wait = match &last {
            Acquire::Taken {
                free_in: Some(free_in),
            } => (*free_in).max(redlock.retry_delay()),
            _ => redlock.retry_delay(),
        };
        loop {
            let retry = (Instant::now() + wait).min(deadline);
            let wake = ticket.changed_until(retry).await;
            if wake == Wake::ShuttingDown {
                return Err(WaitError::ShuttingDown);
            }
            if Instant::now() >= deadline || ticket.cancelled() {
                return Ok(last);
            }
            if wake == Wake::Changed || ticket.may_retry() {
                break;
            }
            wait = redlock.retry_delay();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use redlock_wire::{CampaignEvent, CampaignRequest};

    use crate::lock::multi::resources;
    use crate::lock::tests::{ask, lead, next_of, resource, service};
    use crate::lock::Held;
    use crate::redlock::memory::Mode;

    /// On masters in memory: a lock, a permit, a lock on two resources
    /// and a leadership all go through the one acquire: each answer is
    /// counted in `redlock_acquire_wait_seconds` (a campaign's too), and
    /// each grant is recorded with its kind.
    #[tokio::test]
    async fn every_kind_is_counted_and_recorded_with_its_kind() {
        let (_, locks) = service();
        let count = |kind: &str, outcome: &str| {
            locks
                .metrics()
                .acquire_wait
                .with_label_values(&[kind, outcome])
                .get_sample_count()
        };
        locks.acquire(&resource("a"), ask(0, "x")).await.unwrap();
        locks
            .acquire(&resource("a"), ask(0, "y"))
            .await
            .unwrap_err();
        locks
            .acquire_permit(&resource("pool"), 2, ask(0, "x"))
            .await
            .unwrap();
        let both = resources(&["m1".into(), "m2".into()]).unwrap();
        locks.acquire_many(&both, ask(0, "x")).await.unwrap();
        let _leading = lead(&locks, "cron", None).await;
        let counts = ["lock", "permit", "leadership"].map(|kind| count(kind, "acquired"));
        assert_eq!(counts, [2, 1, 1]);
        assert_eq!(count("lock", "taken"), 1);
        let held = locks.grants().sweep(Instant::now(), locks.metrics());
        assert_eq!(
            held,
            Held {
                locks: 3,
                shared: 0,
                permits: 1,
                leaderships: 1
            }
        );
    }

    /// A campaign while no quorum answers says it waits, with no leader,
    /// goes round again every retry delay, and counts that outage once
    /// (not once a round); elected when the masters are back.
    #[tokio::test]
    async fn a_campaign_without_a_quorum_waits_and_counts_the_outage_once() {
        let (masters, locks) = service();
        for master in &masters {
            master.set(Mode::Down);
        }
        let request = CampaignRequest {
            ttl_ms: Some(10_000),
            owner: None,
            value: None,
            max_hold_ms: None,
        };
        let mut events = locks.campaign(resource("cron"), request, None).unwrap();
        match next_of(&mut events).await {
            CampaignEvent::Waiting { leader: None } => {}
            other => panic!("expected waiting, no leader: {other:?}"),
        }
        // Rounds every 10 ms (the unit tests' retry delay): a dozen or more.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let count = |outcome: &str| {
            locks
                .metrics()
                .acquire_wait
                .with_label_values(&["leadership", outcome])
                .get_sample_count()
        };
        let failures = locks.metrics().failures.with_label_values(&["no_quorum"]);
        assert_eq!((count("no_quorum"), failures.get()), (1, 1));
        for master in &masters {
            master.set(Mode::Up);
        }
        loop {
            match next_of(&mut events).await {
                CampaignEvent::Elected { .. } => break,
                CampaignEvent::Waiting { .. } => {}
                other => panic!("expected elected: {other:?}"),
            }
        }
        assert_eq!((count("acquired"), count("no_quorum")), (1, 1));
    }
}
