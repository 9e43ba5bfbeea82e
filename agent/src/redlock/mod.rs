//! The Redlock algorithm over N masters: acquire on a quorum of the
//! configured N with validity accounting, release everywhere, extend by
//! compare-and-pexpire, fencing tokens from the same quorum.
//!
//! Free of transport, of Redis and of metrics: it works over the
//! [`Master`] trait (Redis behind it in [`crate::node`], memory in the unit
//! tests), reports to an [`Observer`] it is given, and answers with outcome
//! enums. A grant's validity and the masters holding it are in [`grant`],
//! fences in [`fence`], a round for several resources at once in
//! [`multi`].

pub mod fence;
pub mod grant;
pub mod master;
#[cfg(test)]
pub(crate) mod memory;
pub mod multi;
pub mod observe;
pub mod resource;
#[cfg(test)]
mod tests;
pub mod token;
pub mod trail;

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use rand::Rng;

pub use grant::{Drift, Grant, Holding};
pub use master::{
    ChannelChange, Channels, Claim, Extension, KeyState, Master, NodeError, Store, Vote,
};
pub use observe::{Failure, Observer, VoteLabel};
pub use resource::{Kind, Resource, ResourceError};
pub use token::Token;

/// The lock settings Redlock needs, taken from `lock.*` in the config.
#[derive(Debug, Clone)]
pub struct Settings {
    pub key_prefix: String,
    /// Prefix of the channels where the release script announces releases,
    /// so waiters on every agent wake at once: `<key_prefix>released:`, and
    /// the resource after it.
    pub release_channel_prefix: String,
    pub drift: Drift,
    pub retry_delay: Duration,
    pub retry_jitter: Duration,
    /// `agent.name`, written into every lock value after the random part
    /// (see [`token`]) so any agent can say which one holds a lock.
    pub agent_name: Option<String>,
    /// How fences are minted ([`fence`]).
    pub fence: fence::FenceSettings,
    /// A lock on several resources is granted only when every one of them
    /// is ([`multi`]); off only under the test switch
    /// `REDLOCK_TEST_MULTI_PARTIAL` (control runs).
    pub all_or_nothing: bool,
}

/// What an acquisition came to.
#[derive(Debug, Clone)]
pub enum Acquire {
    Granted(Grant),
    /// Held by someone else on enough masters, until the wait ran out.
    Taken,
    /// Fewer than a quorum of masters could be used; the message names them.
    NoQuorum(String),
}

/// What an extension came to.
#[derive(Debug, Clone)]
pub enum Extend {
    /// Extended on a quorum with validity left.
    Extended {
        validity: Duration,
        /// The masters that extended, filled in as the stragglers answer.
        holding: Arc<Holding>,
    },
    /// More than N minus quorum masters answered that they do not hold the
    /// token (gone, another token, or the master lost its keys): no quorum
    /// can hold it again, the lock is gone for good.
    Lost,
    /// Not extended on a quorum this time (timeouts, errors, or too slowly
    /// for any validity to be left); the lock may still be held until the
    /// validity given before.
    Failed,
    NoQuorum(String),
}

/// What a release came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// A quorum still held the token and deleted it.
    Released,
    /// So many masters answered that they do not hold the token that no
    /// quorum did: its validity had run out, or it was never this lock's.
    NotHeld,
    /// Neither is known: too many masters failed or did not answer in time.
    /// A key left on them expires with its TTL; the message names them.
    Unconfirmed(String),
}

/// The result of one round of `SET NX` on every usable master.
#[derive(Debug)]
enum Attempt<M> {
    /// A quorum voted yes: the masters that did so far, with the fencing
    /// counter each read (0 when not asked for); every yes, stragglers'
    /// included, is confirmed in the [`Holding`].
    Granted(Vec<(Arc<M>, u64)>, Arc<Holding>),
    Taken,
    NoQuorum(String),
}

/// Acquire rounds one agent runs at once; more wait for a turn. Without a
/// bound, a burst of thousands of requests puts thousands of votes on each
/// master's connection at once, every vote times out behind the others
/// (the node timeout starts when a vote is sent), every round fails and is
/// retried: overload turned into failure. Each round's timing starts after
/// its turn, so waiting here never eats into a lock's validity.
pub const MAX_ROUNDS_IN_FLIGHT: usize = 128;

/// How often a skewed clock is logged at most.
const SKEW_LOG_EVERY: Duration = Duration::from_secs(60);

/// Redlock over a fixed set of masters.
///
/// The quorum is N/2+1 of the configured N, whatever state the nodes are in:
/// a majority of the nodes that happen to be up is not a majority.
#[derive(Debug)]
pub struct Redlock<M: Master> {
    nodes: Vec<Arc<M>>,
    quorum: usize,
    settings: Settings,
    observer: Arc<dyn Observer>,
    rounds: tokio::sync::Semaphore,
    /// When a skewed clock was last logged (see [`Redlock::floor`]).
    skew_said: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl<M: Master> Redlock<M> {
    /// # Panics
    /// If `nodes` is empty (the config refuses that).
    pub fn new(nodes: Vec<Arc<M>>, settings: Settings, observer: Arc<dyn Observer>) -> Redlock<M> {
        assert!(!nodes.is_empty(), "Redlock needs at least one master");
        let quorum = nodes.len() / 2 + 1;
        Redlock {
            nodes,
            quorum,
            settings,
            observer,
            rounds: tokio::sync::Semaphore::new(MAX_ROUNDS_IN_FLIGHT),
            skew_said: std::sync::Mutex::new(None),
        }
    }

    pub fn nodes(&self) -> &[Arc<M>] {
        &self.nodes
    }

    /// Asks every master for a health probe now ([`Master::probe_soon`]).
    pub fn probe_soon(&self) {
        for node in &self.nodes {
            node.probe_soon();
        }
    }

    pub fn quorum(&self) -> usize {
        self.quorum
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn key(&self, resource: &Resource) -> String {
        resource.key(&self.settings.key_prefix)
    }

    /// At least a quorum of masters may take part in a lock right now.
    pub fn quorum_usable(&self) -> bool {
        self.usable().len() >= self.quorum
    }

    /// For each node, the earlier configured node that reaches the same
    /// server (the same `run_id`: a proxy, a NAT, two spellings of one
    /// address), if any. Only the first of such a group counts toward any
    /// quorum; the others are `duplicate`.
    pub fn duplicates(&self) -> Vec<Option<usize>> {
        let ids: Vec<Option<u64>> = self.nodes.iter().map(|n| n.server_id()).collect();
        duplicates_of(&ids)
    }

    /// The place of `node` in the configured masters.
    fn index_of(&self, node: &Arc<M>) -> usize {
        self.nodes
            .iter()
            .position(|n| Arc::ptr_eq(n, node))
            .unwrap_or(usize::MAX)
    }

    /// The nodes that may vote now: usable, and not a duplicate of another.
    fn usable(&self) -> Vec<Arc<M>> {
        let duplicates = self.duplicates();
        self.nodes
            .iter()
            .zip(duplicates)
            .filter(|(n, duplicate)| duplicate.is_none() && n.is_usable())
            .map(|(n, _)| Arc::clone(n))
            .collect()
    }

    /// The nodes that may vote now, from a view that is not out of date:
    /// when too few are usable, or one that is usable has not been probed
    /// for a while (an idle agent), the stale ones ([`Master::is_stale`])
    /// are probed first and waited for. An agent that was idle while
    /// masters came back answers from what they are now, not `no_quorum`
    /// from what they were.
    async fn fresh_usable(&self) -> Vec<Arc<M>> {
        let usable = self.usable();
        if usable.len() >= self.quorum && !usable.iter().any(|n| n.is_stale()) {
            return usable;
        }
        let stale: Vec<&Arc<M>> = self.nodes.iter().filter(|n| n.is_stale()).collect();
        if stale.is_empty() {
            return usable;
        }
        futures::future::join_all(stale.iter().map(|n| n.refresh())).await;
        self.usable()
    }

    /// Says which nodes cannot be used and why, for `no_quorum` answers.
    pub fn describe_unusable(&self) -> String {
        let usable = self.usable().len();
        let mut parts = Vec::new();
        for (node, duplicate) in self.nodes.iter().zip(self.duplicates()) {
            if let Some(first) = duplicate {
                parts.push(format!(
                    "{} duplicate of {} (same run_id: one server, counted once)",
                    node.name(),
                    self.nodes[first].name()
                ));
                continue;
            }
            if node.is_usable() {
                continue;
            }
            parts.push(format!("{} {}", node.name(), node.unusable_reason()));
        }
        format!(
            "{usable} of {} masters usable, quorum is {}; {}",
            self.nodes.len(),
            self.quorum,
            parts.join(", ")
        )
    }

    /// One round of Redlock for `resource`: `SET NX PX` on every usable
    /// master at once, granted on a quorum with validity left. With `fence`,
    /// a second round raises the fencing counter on the masters that voted
    /// yes (see [`fence`]), and the grant needs a quorum of those too, within
    /// the same validity (counted from before the first round).
    /// A failed round is released on every master before this returns.
    /// Waiting and retrying are the caller's ([`crate::lock::waiters`]).
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
        let key = self.key(resource);
        trail::note(|seen| {
            seen.rounds += 1;
            seen.votes.clear();
        });
        // tokio's clock: the same as std's, but for tests on a paused one.
        let started = tokio::time::Instant::now();
        let outcome = match self
            .attempt(&usable, &key, token, ttl, fence, waiting)
            .await
        {
            Attempt::Granted(granting, holding) => {
                let minted = if fence {
                    match self.mint(&key, token, &granting).await {
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
                        Acquire::Taken
                    }
                }
            }
            Attempt::Taken => Acquire::Taken,
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

    /// The pause before another round: `retry_delay` plus a random part of
    /// `retry_jitter`, so contenders on different agents drift apart.
    pub fn retry_delay(&self) -> Duration {
        let jitter = u64::try_from(self.settings.retry_jitter.as_micros()).unwrap_or(u64::MAX);
        let extra = if jitter == 0 {
            0
        } else {
            rand::rng().random_range(0..=jitter)
        };
        self.settings.retry_delay + Duration::from_micros(extra)
    }

    /// One round: `SET NX PX` on every usable master at once. Decides as soon
    /// as the outcome is certain; on failure, waits for the stragglers (each
    /// bounded by the node timeout) so the caller's release comes after them.
    async fn attempt(
        &self,
        usable: &[Arc<M>],
        key: &str,
        token: &Token,
        ttl: Duration,
        fence: bool,
        waiting: bool,
    ) -> Attempt<M> {
        let claim = Claim::new(key.to_string(), token.as_str());
        let holding = Holding::new(&self.nodes);
        let mut votes: FuturesUnordered<_> = usable
            .iter()
            .map(|node| {
                let (node, claim) = (Arc::clone(node), Arc::clone(&claim));
                let index = self.index_of(&node);
                let holding = Arc::clone(&holding);
                async move {
                    // Timed only for a request whose span records it.
                    let asked = trail::followed().then(std::time::Instant::now);
                    let vote = node.vote(&claim, ttl, fence, waiting).await;
                    if matches!(vote, Vote::Granted { .. }) {
                        holding.confirm(index);
                    }
                    if let Some(asked) = asked {
                        let (name, label) = (node.name().to_string(), vote_label(&vote));
                        trail::note(|seen| {
                            seen.votes.push(trail::VoteSeen {
                                node: name,
                                vote: label,
                                latency: asked.elapsed(),
                            });
                        });
                    }
                    (node, vote)
                }
            })
            .collect();
        let (mut taken, mut pending) = (0, usable.len());
        let mut granting: Vec<(Arc<M>, u64)> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        while let Some((node, vote)) = votes.next().await {
            pending -= 1;
            node.count_vote(vote_label(&vote));
            match vote {
                Vote::Granted { counter } => granting.push((node, counter)),
                Vote::Taken => taken += 1,
                Vote::LostState => failures.push(format!(
                    "{} (incarnation marker missing: it lost its keys; quarantined)",
                    node.name()
                )),
                Vote::Failed(e) => {
                    tracing::debug!(node = node.name(), error = %e, "acquire vote failed");
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
            match vote {
                Vote::Granted { .. } => granted += 1,
                Vote::Taken => taken += 1,
                Vote::LostState => failures.push(format!(
                    "{} (incarnation marker missing: it lost its keys; quarantined)",
                    node.name()
                )),
                Vote::Failed(e) => failures.push(format!("{} ({e})", node.name())),
            }
        }
        if granted + taken < self.quorum && !self.quorum_usable() {
            // Votes quarantined masters (a lost marker): say which and for
            // how long, as an acquire that finds too few usable would.
            Attempt::NoQuorum(self.describe_unusable())
        } else if granted + taken < self.quorum {
            Attempt::NoQuorum(self.describe_votes(usable, granted + taken, &failures))
        } else {
            Attempt::Taken
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
        let claim = Claim::new(self.key(resource), token.as_str());
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
                let (node, claim, channel) =
                    (Arc::clone(node), Arc::clone(&claim), Arc::clone(&channel));
                async move {
                    let reply = node.release(&claim, &channel).await;
                    (node, reply)
                }
            })
            .collect();
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

    /// Extends to a new `ttl` on every usable master; granted only when a
    /// quorum held the token and validity is left after the round trip.
    /// Decides as soon as the outcome is certain: a quorum extended, or so
    /// many masters no longer hold the token that no quorum ever can.
    pub async fn extend(&self, resource: &Resource, token: &Token, ttl: Duration) -> Extend {
        // A quarantined master cannot help: it takes no extends, and any key
        // of this lock on it expires before its quarantine (longer than any
        // TTL) ends. Neither can a duplicate.
        let may_hold = self
            .nodes
            .iter()
            .zip(self.duplicates())
            .filter(|(n, duplicate)| {
                duplicate.is_none() && n.state() != redlock_wire::NodeState::Quarantined
            })
            .count();
        let usable = self.usable();
        if may_hold < self.quorum {
            return Extend::Lost;
        }
        if usable.len() < self.quorum {
            return Extend::NoQuorum(self.describe_unusable());
        }
        let claim = Claim::new(self.key(resource), token.as_str());
        let holding = Holding::new(&self.nodes);
        // tokio's clock: the same as std's, but for tests on a paused one.
        let started = tokio::time::Instant::now();
        let mut replies: FuturesUnordered<_> = usable
            .iter()
            .map(|node| {
                let (node, claim) = (Arc::clone(node), Arc::clone(&claim));
                let index = self.index_of(&node);
                let holding = Arc::clone(&holding);
                async move {
                    let reply = node.extend(&claim, ttl).await;
                    if matches!(reply, Ok(Extension::Extended)) {
                        holding.confirm(index);
                    }
                    reply
                }
            })
            .collect();
        let (mut extended, mut not_held) = (0, 0);
        while let Some(reply) = replies.next().await {
            match reply {
                Ok(Extension::Extended) => extended += 1,
                Ok(Extension::NotHeld | Extension::LostState) => not_held += 1,
                Err(_) => {}
            }
            if extended >= self.quorum || may_hold - not_held < self.quorum {
                break;
            }
        }
        let elapsed = started.elapsed();
        if may_hold - not_held < self.quorum {
            return Extend::Lost;
        }
        if extended < self.quorum {
            return Extend::Failed;
        }
        match self.settings.drift.validity(ttl, elapsed) {
            Some(validity) => {
                // The stragglers' answers fill in the holding (each bounded
                // by its master's timeout).
                if !replies.is_empty() {
                    tokio::spawn(async move { while replies.next().await.is_some() {} });
                }
                Extend::Extended { validity, holding }
            }
            None => Extend::Failed,
        }
    }
}

/// For each id, the index of the first earlier equal id (see
/// [`Redlock::duplicates`]); unknown ids (`None`) are never duplicates.
fn duplicates_of(ids: &[Option<u64>]) -> Vec<Option<usize>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let id = (*id)?;
            ids[..i].iter().position(|other| *other == Some(id))
        })
        .collect()
}

/// The highest fencing counter the yes votes read.
fn highest<M>(granting: &[(Arc<M>, u64)]) -> u64 {
    granting
        .iter()
        .map(|(_, counter)| *counter)
        .max()
        .unwrap_or(0)
}

fn vote_label(vote: &Vote) -> VoteLabel {
    match vote {
        Vote::Granted { .. } => VoteLabel::Granted,
        Vote::Taken => VoteLabel::Taken,
        Vote::Failed(NodeError::Timeout(_)) => VoteLabel::Timeout,
        Vote::Failed(NodeError::Backlog(_)) => VoteLabel::Backlog,
        Vote::LostState | Vote::Failed(_) => VoteLabel::Error,
    }
}
