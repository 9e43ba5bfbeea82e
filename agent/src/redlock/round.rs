//! One round of Redlock, for one resource ([`Redlock::acquire_once`]) or
//! for several at once ([`Redlock::acquire_many`]: a grant of all of them
//! with one validity and one fence, or of none), and the release that
//! ends a grant or undoes a failed round. Waiting and retrying are the
//! one acquire's ([`crate::lock`]).
//!
//! ## Several resources: why two grants never share a resource
//! A round votes on each resource's key exactly as a lock's round does
//! ([`Redlock::acquire_once`]): `SET NX PX` on every usable master, under
//! the same marker, eviction and process checks, counted only within the
//! validity left after the slowest resource's quorum. The grant stands
//! only if *every* resource got a quorum of yes votes in that round; each
//! resource's quorum then holds that resource's key with this grant's
//! value, so for each resource the grant is a lock's grant, and the lock's
//! argument (docs/safety.md) applies resource by resource: two grants that
//! share a resource each hold its key on a quorum of the same N masters,
//! so they meet on a master that gave its key to both while it was held.
//! The validity is the one both arguments need: the TTL less the whole
//! round (every resource's votes, and the fence's raises) and the drift.
//!
//! ## All or nothing
//! A round in which any resource falls short is released on every master,
//! for every resource, stragglers included, before it answers: no key of a
//! failed round stays behind (one that a master wrote after its release
//! expires with the TTL, as a lock's does). A waiter tries again only with
//! nothing held, so two requests for overlapping sets never hold one part
//! each while waiting for the other's: no deadlock, whatever order they
//! name them in.
//!
//! ## One fence
//! The fence is one above the highest counter any yes vote of any
//! resource read, and at least the floor; it is raised on each resource's
//! quorum while that resource's key holds this grant's value, as a lock's
//! is. A later grant of any of the resources reads a counter at least as
//! high on its quorum (it meets each of ours), so its fence is larger.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};

use super::grant::{Grant, Holding};
use super::master::{Claim, Master, NodeError, Vote};
use super::observe::{Failure, VoteLabel};
use super::trail::{self, Heard};
use super::{fence, Acquire, Redlock, Release, Resource, Token};

/// How often a skewed clock is logged at most.
const SKEW_LOG_EVERY: Duration = Duration::from_secs(60);

/// The result of one round of `SET NX` on every usable master.
#[derive(Debug)]
enum Attempt<M> {
    /// A quorum voted yes: the masters that did so far, with the fencing
    /// counter each read (0 when not asked for); every yes, stragglers'
    /// included, is confirmed in the [`Holding`].
    Granted(Vec<(Arc<M>, u64)>, Arc<Holding>),
    /// Too few yes votes for a quorum. `nothing_written`: every configured
    /// master was asked and answered without writing this round's key (the
    /// lock taken, or its keys lost), none voting yes and none failing.
    Taken {
        nothing_written: bool,
        free_in: Option<Duration>,
    },
    NoQuorum(String),
}

/// One resource's yes votes (with the counter each read) and the masters
/// holding its key.
type Voted<M> = (Vec<(Arc<M>, u64)>, Arc<Holding>);

impl<M: Master> Redlock<M> {
    /// One round of Redlock for `resource`: `SET NX PX` on every usable
    /// master at once, granted on a quorum with validity left. With `fence`,
    /// a second round raises the fencing counter on the masters that voted
    /// yes (see [`fence`]), and the grant needs a quorum of those too, within
    /// the same validity (counted from before the first round).
    /// A failed round is released on every master before this returns,
    /// unless every master answered without writing its key.
    /// Waiting and retrying are the caller's ([`crate::lock::acquire`]).
    ///
    /// Every round of one request uses the same `token`, so a key an earlier
    /// round left behind counts for this one instead of blocking it.
    /// `waiting`: the caller will wait if the lock is taken, so the votes
    /// ask the holder's release to announce itself (see [`Master::vote`]).
    pub async fn acquire_once(
        &self,
        resource: &Resource,
        ttl: Duration,
        token: &Token,
        fence: bool,
        waiting: bool,
    ) -> Acquire {
        // The semaphore is never closed, so a permit always comes.
        let _turn = self.rounds.acquire().await;
        let usable = self.fresh_usable().await;
        if usable.len() < self.quorum {
            return Acquire::NoQuorum(self.describe_unusable());
        }
        let claim = self.claim(resource, token);
        trail::note(|seen| {
            seen.rounds += 1;
            seen.votes.clear();
        });
        // tokio's clock: the same as std's, but for tests on a paused one.
        let started = tokio::time::Instant::now();
        let outcome = match self.attempt(&usable, &claim, ttl, fence, waiting).await {
            Attempt::Granted(granting, holding) => {
                // A reader's fence is minted and raised as a writer's (see
                // docs/primitives.md): the raise goes to the masters that
                // record the reader.
                let minted = if fence {
                    match self.mint(claim.key(), token, &granting).await {
                        Ok(minted) => Some(minted),
                        Err(message) => {
                            self.observer.failure(Failure::FenceFailed);
                            self.release(resource, token).await;
                            tracing::debug!(%resource, %message, "fence not confirmed");
                            return Acquire::NoQuorum(message);
                        }
                    }
                } else {
                    None
                };
                match self.settings.drift.validity(ttl, started.elapsed()) {
                    Some(validity) => {
                        self.observer
                            .validity_at_grant(validity.as_secs_f64() / ttl.as_secs_f64());
                        return Acquire::Granted(Grant {
                            token: token.clone(),
                            ttl,
                            validity,
                            granted_at: tokio::time::Instant::now().into_std(),
                            fence: minted,
                            holding,
                        });
                    }
                    None => {
                        // A quorum was reached too slowly: nothing was left
                        // after drift.
                        self.observer.failure(Failure::ValidityExhausted);
                        Acquire::Taken { free_in: None }
                    }
                }
            }
            // Every master answered and none wrote the key: nothing to
            // undo, and a release would cost each master a call to find
            // that another holds it (as every waiter's round on a held
            // lock would).
            Attempt::Taken {
                nothing_written: true,
                free_in,
            } => return Acquire::Taken { free_in },
            Attempt::Taken { free_in, .. } => Acquire::Taken { free_in },
            Attempt::NoQuorum(message) => Acquire::NoQuorum(message),
        };
        // Undo the partial acquisition everywhere, including the masters
        // that seemed not to answer: their SET may still have landed.
        self.release(resource, token).await;
        tracing::debug!(%resource, elapsed = ?started.elapsed(), ?outcome, "acquire round failed");
        outcome
    }

    /// Round 2 of a fenced grant: the fence is one above the highest counter
    /// the yes votes read, and at least the floor ([`fence::floor`]); every
    /// master that voted yes raises its counter to it while the lock key
    /// still holds `token`. The fence stands once a quorum has raised it.
    /// Under the test switch that turns the write-back off, nothing is
    /// raised (control runs only).
    async fn mint(
        &self,
        key: &str,
        token: &Token,
        granting: &[(Arc<M>, u64)],
    ) -> Result<u64, String> {
        let minted = fence::next(highest(granting), self.floor());
        self.raise(key, token, granting, minted).await?;
        Ok(minted)
    }

    /// Raises the fencing counter to `minted` on every master of
    /// `granting` while `key` still holds `token`; done once a quorum has.
    async fn raise(
        &self,
        key: &str,
        token: &Token,
        granting: &[(Arc<M>, u64)],
        minted: u64,
    ) -> Result<(), String> {
        if !self.settings.fence.writeback {
            return Ok(());
        }
        let claim = Claim::new(key.to_string(), token.as_str());
        let mut raises: FuturesUnordered<_> = granting
            .iter()
            .map(|(node, _)| {
                let (node, claim) = (Arc::clone(node), Arc::clone(&claim));
                async move {
                    let reply = node.raise_fence(&claim, minted).await;
                    (node, reply)
                }
            })
            .collect();
        let (mut raised, mut pending) = (0, granting.len());
        let mut failures = Vec::new();
        while let Some((node, reply)) = raises.next().await {
            pending -= 1;
            match reply {
                Ok(true) => raised += 1,
                Ok(false) => failures.push(format!(
                    "{} (the key no longer held the token)",
                    node.name()
                )),
                Err(e) => failures.push(format!("{} ({e})", node.name())),
            }
            if raised >= self.quorum {
                if !raises.is_empty() {
                    tokio::spawn(async move { while raises.next().await.is_some() {} });
                }
                return Ok(());
            }
            if raised + pending < self.quorum {
                break;
            }
        }
        drop(raises);
        Err(format!(
            "the fencing counter was raised on {raised} masters, quorum is {}; failed: {}",
            self.quorum,
            failures.join(", ")
        ))
    }

    /// The floor of the next fence: this agent's clock, while it is near
    /// the masters' (see [`fence::bounded_floor`]); else none, and the
    /// skew is logged (at most once a minute).
    fn floor(&self) -> u64 {
        let settings = &self.settings.fence;
        let masters = fence::median(
            self.nodes
                .iter()
                .filter_map(|n| n.master_time_us())
                .collect(),
        );
        match fence::bounded_floor(
            fence::floor(settings.clock_skew_ms),
            masters,
            settings.clock_bound,
        ) {
            Ok(floor) => floor,
            Err(off_us) => {
                let now = tokio::time::Instant::now();
                let mut said = self
                    .skew_said
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if said.is_none_or(|at| now.duration_since(at) >= SKEW_LOG_EVERY) {
                    *said = Some(now);
                    tracing::warn!(
                        off_ms = off_us / 1000,
                        bound = ?settings.clock_bound,
                        "this agent's clock is further from the masters' than the fencing bound \
                         (positive: ahead): fences are minted without its clock floor; fix the \
                         host's time"
                    );
                }
                0
            }
        }
    }

    /// One round: `SET NX PX` on every usable master at once. Decides as soon
    /// as the outcome is certain; on failure, waits for the stragglers (each
    /// bounded by the node timeout) so the caller's release comes after them.
    async fn attempt(
        &self,
        usable: &[Arc<M>],
        claim: &Arc<Claim>,
        ttl: Duration,
        fence: bool,
        waiting: bool,
    ) -> Attempt<M> {
        let holding = Holding::new(&self.nodes);
        let mut votes: FuturesUnordered<_> = usable
            .iter()
            .map(|node| {
                let (node, claim) = (Arc::clone(node), Arc::clone(claim));
                let index = self.index_of(&node);
                let holding = Arc::clone(&holding);
                async move {
                    let vote = node.vote(&claim, ttl, fence, waiting).await;
                    if matches!(vote, Vote::Granted { .. }) {
                        holding.confirm(index);
                    }
                    (node, vote)
                }
            })
            .collect();
        // Each vote as it is heard, for a request whose span records them.
        let mut heard = Heard::start(usable.len());
        let (mut taken, mut pending) = (0, usable.len());
        // What the masters that hold the key said it has left.
        let mut lefts: Vec<Duration> = Vec::new();
        let mut granting: Vec<(Arc<M>, u64)> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        let mut failed = 0;
        while let Some((node, vote)) = votes.next().await {
            pending -= 1;
            node.count_vote(vote_label(&vote));
            hear(&mut heard, &*node, &vote);
            match vote {
                Vote::Granted { counter } => granting.push((node, counter)),
                Vote::Taken { left } => {
                    taken += 1;
                    lefts.extend(left);
                }
                Vote::LostState => failures.push(format!(
                    "{} (incarnation marker missing: it lost its keys; quarantined)",
                    node.name()
                )),
                Vote::Failed(e) => {
                    tracing::debug!(node = node.name(), error = %e, "acquire vote failed");
                    failed += 1;
                    failures.push(format!("{} ({e})", node.name()));
                }
            }
            if granting.len() >= self.quorum {
                // Let the stragglers finish on their own; their answers do
                // not change the outcome.
                if !votes.is_empty() {
                    tokio::spawn(async move {
                        while let Some((node, vote)) = votes.next().await {
                            node.count_vote(vote_label(&vote));
                        }
                    });
                }
                return Attempt::Granted(granting, holding);
            }
            if granting.len() + pending < self.quorum {
                break;
            }
        }
        let mut granted = granting.len();
        while let Some((node, vote)) = votes.next().await {
            node.count_vote(vote_label(&vote));
            hear(&mut heard, &*node, &vote);
            match vote {
                Vote::Granted { .. } => granted += 1,
                Vote::Taken { left } => {
                    taken += 1;
                    lefts.extend(left);
                }
                Vote::LostState => failures.push(format!(
                    "{} (incarnation marker missing: it lost its keys; quarantined)",
                    node.name()
                )),
                Vote::Failed(e) => {
                    failed += 1;
                    failures.push(format!("{} ({e})", node.name()));
                }
            }
        }
        if granted + taken < self.quorum && !self.quorum_usable() {
            // Votes quarantined masters (a lost marker): say which and for
            // how long, as an acquire that finds too few usable would.
            Attempt::NoQuorum(self.describe_unusable())
        } else if granted + taken < self.quorum {
            Attempt::NoQuorum(self.describe_votes(usable, granted + taken, &failures))
        } else {
            // A lost marker writes nothing (the script answers before its
            // `SET`), so only a yes or a failure (a `SET` that may have
            // landed unheard) leaves something to undo; a master not asked
            // may hold an earlier round's key.
            // When the lock can be free is known only if every master
            // said: one that failed or was not asked may be free already.
            let said = granted + lefts.len() == self.nodes.len();
            let need = self.quorum.saturating_sub(granted);
            Attempt::Taken {
                nothing_written: granted == 0 && failed == 0 && usable.len() == self.nodes.len(),
                free_in: (waiting && said && !self.settings.poll_waiters)
                    .then(|| free_in(&mut lefts, need, ttl))
                    .flatten(),
            }
        }
    }

    /// Says how a round's votes fell short of a quorum: of every configured
    /// master, how many answered, which were asked and failed, and which
    /// were not asked (not usable, or a duplicate), so that the counts
    /// agree with the masters named.
    fn describe_votes(&self, asked: &[Arc<M>], answered: usize, failures: &[String]) -> String {
        let mut not_asked = Vec::new();
        for (node, duplicate) in self.nodes.iter().zip(self.duplicates()) {
            if asked.iter().any(|a| Arc::ptr_eq(a, node)) {
                continue;
            }
            match duplicate {
                Some(first) => not_asked.push(format!(
                    "{} (duplicate of {})",
                    node.name(),
                    self.nodes[first].name()
                )),
                None => not_asked.push(format!("{} ({})", node.name(), node.unusable_reason())),
            }
        }
        let mut message = format!(
            "{answered} of {} masters answered ({} asked, {} not usable), quorum is {}",
            self.nodes.len(),
            asked.len(),
            not_asked.len(),
            self.quorum
        );
        if !failures.is_empty() {
            message.push_str(&format!("; failed: {}", failures.join(", ")));
        }
        if !not_asked.is_empty() {
            message.push_str(&format!("; not usable: {}", not_asked.join(", ")));
        }
        message
    }

    /// Compare-and-delete on every master, all at once. [`Release::Released`]
    /// when a quorum still held the token, [`Release::NotHeld`] when so many
    /// answered that they do not that no quorum can have, and
    /// [`Release::Unconfirmed`] when failures (a master down, a timeout)
    /// leave it open: a master that did not answer may have held it. Returns
    /// as soon as the outcome is certain; the other masters' answers are
    /// awaited in the background, so a frozen master does not hold up the
    /// caller once a quorum has answered.
    pub async fn release(&self, resource: &Resource, token: &Token) -> Release {
        self.release_then(resource, token, || ()).await
    }

    /// [`Redlock::release`], calling `queued` once the release is queued on
    /// every master (see [`Master::release`]) and before any answer: a
    /// vote this agent queues from then on runs behind the release on each
    /// master, so a waiter here woken by `queued` has its vote in the same
    /// call as the release wherever the two meet in one batch, instead of
    /// one round trip later.
    pub async fn release_then(
        &self,
        resource: &Resource,
        token: &Token,
        queued: impl FnOnce(),
    ) -> Release {
        let claim = self.claim(resource, token);
        let channel: Arc<str> = format!(
            "{}{}",
            self.settings.release_channel_prefix,
            resource.queue()
        )
        .into();
        // One server reached twice releases once and counts once.
        let targets: Vec<&Arc<M>> = self
            .nodes
            .iter()
            .zip(self.duplicates())
            .filter(|(_, duplicate)| duplicate.is_none())
            .map(|(node, _)| node)
            .collect();
        let mut pending = targets.len();
        let mut replies: FuturesUnordered<_> = targets
            .into_iter()
            .map(|node| {
                let reply = node.release(&claim, &channel);
                let node = Arc::clone(node);
                async move { (node, reply.await) }
            })
            .collect();
        queued();
        let (mut released, mut not_held) = (0, 0);
        let mut failures = Vec::new();
        while let Some((node, reply)) = replies.next().await {
            pending -= 1;
            match reply {
                Ok(true) => released += 1,
                Ok(false) => not_held += 1,
                Err(e) => failures.push(format!("{} ({e})", node.name())),
            }
            // Masters that may hold it: those that released it, and those
            // that have not said they do not.
            if released >= self.quorum || released + failures.len() + pending < self.quorum {
                break;
            }
        }
        if !replies.is_empty() {
            tokio::spawn(async move { while replies.next().await.is_some() {} });
        }
        if released >= self.quorum {
            Release::Released
        } else if released + failures.len() + pending < self.quorum {
            Release::NotHeld
        } else {
            Release::Unconfirmed(format!(
                "released on {released} of {} masters and not held on {not_held}, quorum is {}; \
                 failed: {}; a key left on those expires with its TTL",
                self.nodes.len(),
                self.quorum,
                failures.join(", ")
            ))
        }
    }

    /// One round for every resource of `resources` at once, `values[i]`
    /// the value stored at `resources[i]`'s key (see
    /// [`Token::for_key`]): a grant of each, all with one validity and one
    /// fence, or `Err` with the round's outcome after every key it took was
    /// released. The arguments are as in [`Redlock::acquire_once`].
    pub async fn acquire_many(
        &self,
        resources: &[Resource],
        ttl: Duration,
        values: &[Token],
        fence: bool,
        waiting: bool,
    ) -> Result<Vec<Grant>, Acquire> {
        debug_assert_eq!(resources.len(), values.len());
        let _turn = self.rounds.acquire().await;
        let usable = self.fresh_usable().await;
        if usable.len() < self.quorum {
            return Err(Acquire::NoQuorum(self.describe_unusable()));
        }
        let keys: Vec<String> = resources.iter().map(|r| self.key(r)).collect();
        let claims: Vec<Arc<Claim>> = resources
            .iter()
            .zip(values)
            .map(|(resource, value)| self.claim(resource, value))
            .collect();
        trail::note(|seen| {
            seen.rounds += 1;
            seen.votes.clear();
        });
        let started = tokio::time::Instant::now();
        let attempts = join_all(
            claims
                .iter()
                .map(|claim| self.attempt(&usable, claim, ttl, fence, waiting)),
        )
        .await;
        let granted = attempts
            .iter()
            .filter(|a| matches!(a, Attempt::Granted(..)))
            .count();
        let enough = if self.settings.all_or_nothing {
            granted == attempts.len()
        } else {
            granted > 0
        };
        let outcome = if enough {
            match self
                .grant_many(&keys, values, attempts, ttl, fence, started)
                .await
            {
                Ok(grants) => return Ok(grants),
                Err(outcome) => outcome,
            }
        } else if let Some(Attempt::NoQuorum(message)) = attempts
            .into_iter()
            .find(|a| matches!(a, Attempt::NoQuorum(_)))
        {
            Acquire::NoQuorum(message)
        } else {
            Acquire::Taken { free_in: None }
        };
        self.release_many(resources, values).await;
        tracing::debug!(resources = resources.len(), elapsed = ?started.elapsed(), ?outcome, "multi-resource round failed");
        Err(outcome)
    }

    /// The grants of a round whose every resource got its quorum: the
    /// fence minted once for all and raised on each resource's quorum,
    /// then one validity from the round's start.
    async fn grant_many(
        &self,
        keys: &[String],
        values: &[Token],
        attempts: Vec<Attempt<M>>,
        ttl: Duration,
        fence: bool,
        started: tokio::time::Instant,
    ) -> Result<Vec<Grant>, Acquire> {
        // Under the control switch, a resource without a quorum is "held"
        // with no master confirmed: the overlap the checker must find.
        let granting: Vec<Voted<M>> = attempts
            .into_iter()
            .map(|attempt| match attempt {
                Attempt::Granted(granting, holding) => (granting, holding),
                _ => (Vec::new(), Holding::new(&self.nodes)),
            })
            .collect();
        let minted = if fence {
            let top = granting.iter().map(|(g, _)| highest(g)).max().unwrap_or(0);
            let minted = fence::next(top, self.floor());
            let raises = join_all(
                keys.iter()
                    .zip(values)
                    .zip(&granting)
                    .filter(|(_, (g, _))| !g.is_empty())
                    .map(|((key, value), (g, _))| self.raise(key, value, g, minted)),
            )
            .await;
            if let Some(message) = raises.into_iter().find_map(Result::err) {
                self.observer.failure(Failure::FenceFailed);
                return Err(Acquire::NoQuorum(message));
            }
            Some(minted)
        } else {
            None
        };
        let Some(validity) = self.settings.drift.validity(ttl, started.elapsed()) else {
            self.observer.failure(Failure::ValidityExhausted);
            return Err(Acquire::Taken { free_in: None });
        };
        self.observer
            .validity_at_grant(validity.as_secs_f64() / ttl.as_secs_f64());
        let granted_at = tokio::time::Instant::now().into_std();
        Ok(values
            .iter()
            .zip(granting)
            .map(|(value, (_, holding))| Grant {
                token: value.clone(),
                ttl,
                validity,
                granted_at,
                fence: minted,
                holding,
            })
            .collect())
    }

    /// Releases every resource's key on every master at once (see
    /// [`Redlock::release`]); what each came to, in order.
    pub async fn release_many(
        &self,
        resources: &[Resource],
        values: &[Token],
    ) -> Vec<super::Release> {
        join_all(
            resources
                .iter()
                .zip(values)
                .map(|(resource, value)| self.release(resource, value)),
        )
        .await
    }
}

/// The highest fencing counter the yes votes read.
fn highest<M>(granting: &[(Arc<M>, u64)]) -> u64 {
    granting
        .iter()
        .map(|(_, counter)| *counter)
        .max()
        .unwrap_or(0)
}

/// How soon a lock found taken can be free on a quorum if nobody releases
/// it, from what every master said in one round: `need` more masters (a
/// quorum less those that granted the vote) must see its key expire, so
/// the `need`-th shortest of the times its key has left. At most half of
/// `ttl`: a waiter votes again by then, before the waiting flag its vote
/// set (for `ttl`) lapses, so a release still announces itself however
/// long the lock is held. Waking a waiter, never granting: its next vote
/// is an ordinary round.
pub fn free_in(lefts: &mut [Duration], need: usize, ttl: Duration) -> Option<Duration> {
    lefts.sort_unstable();
    let free = match need {
        0 => Duration::ZERO,
        need => *lefts.get(need - 1)?,
    };
    Some(free.min(ttl / 2))
}

/// Notes `node`'s `vote` in `heard`, when the request's span records votes.
fn hear<M: Master>(heard: &mut Option<Heard>, node: &M, vote: &Vote) {
    if let Some(heard) = heard {
        heard.push(node.shared_name(), vote_label(vote));
    }
}

fn vote_label(vote: &Vote) -> VoteLabel {
    match vote {
        Vote::Granted { .. } => VoteLabel::Granted,
        Vote::Taken { .. } => VoteLabel::Taken,
        Vote::Failed(NodeError::Timeout(_)) => VoteLabel::Timeout,
        Vote::Failed(NodeError::Backlog(_)) => VoteLabel::Backlog,
        Vote::LostState | Vote::Failed(_) => VoteLabel::Error,
    }
}

/// Writes the bookkeeping note `key` (a semaphore's limit, a leader's
/// note) on every master in `nodes`, as `value` or, without one, keeps
/// the note there with its value, to last `ttl` at least. Best effort: a
/// master that does not take it is logged, never an error; what each
/// note's readers make of a master without it is said where the note is.
pub async fn note_everywhere<M: Master>(
    nodes: &[Arc<M>],
    key: &str,
    value: Option<&str>,
    ttl: Duration,
) {
    let writes = nodes.iter().map(|node| async move {
        match value {
            Some(value) => node.note(key, value, ttl).await,
            None => node.keep_note(key, ttl).await,
        }
    });
    for result in futures::future::join_all(writes).await {
        if let Err(e) = result {
            tracing::debug!(key, error = %e, "note not written on a master");
        }
    }
}
