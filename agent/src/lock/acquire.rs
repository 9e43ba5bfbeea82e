//! The one acquire: every kind of lock is taken here. A lock, several
//! at once, a semaphore's permit and an election's leadership each bring
//! their contest ([`Take`]: what a round votes for, what a refusal says,
//! what a grant records) and nothing else; the acquire checks what the
//! request asks for, waits in line for it ([`super::waiters`]), answers a
//! refusal, records the grant, and counts every kind alike
//! (`redlock_acquire_wait_seconds{kind, outcome}`,
//! `redlock_failures_total`).
//!
//! A new kind of lock is one contest in one file, and the
//! [`Kind`](crate::redlock::Kind) its resources are made with (which
//! names it in the metrics and traces).

use std::future::Future;
use std::time::{Duration, Instant};

use redlock_wire::AcquireRequest;
use tokio_util::sync::CancellationToken;

use super::waiters::Contest;
use super::{check_owner, Ask, Holder, LockError, Locks, Terms};
use crate::config::FenceMode;
use crate::metrics::Outcome;
use crate::redlock::{Acquire, Failure, Grant, Kind, Master, Redlock, Resource, Store, Token};

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
        let outcome = self
            .waiters
            .contend(&self.engine, contest, wait, uid, cancel)
            .await?;
        match outcome {
            Acquire::Granted(grant) => Ok(contest.won(self, grant, holder).await),
            Acquire::Taken => Err(contest.refused()),
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
