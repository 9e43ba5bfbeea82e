//! The Redlock algorithm over N masters: acquire on a quorum of the
//! configured N with validity accounting, release everywhere, extend by
//! compare-and-pexpire, fencing tokens from the same quorum.
//!
//! Free of transport, of Redis and of metrics: it works over the
//! [`Master`] trait (Redis behind it in [`crate::node`], memory in the unit
//! tests), reports to an [`Observer`] it is given, and answers with outcome
//! enums. A round of votes, for one resource or several at once, and
//! release are in [`round`]; a grant's validity and the masters holding
//! it in [`grant`], fences in [`fence`].

pub mod fence;
pub mod grant;
pub mod master;
#[cfg(test)]
pub(crate) mod memory;
pub mod observe;
pub mod resource;
pub mod round;
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
    ChannelChange, Channels, Claim, Extension, KeyState, Master, NodeError, Peeked, Store, Vote,
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
    /// A shared lock's readers are kept at a key of their own, apart from
    /// its writers: only under the test switch `REDLOCK_TEST_SHARED_APART`
    /// (control runs).
    pub shared_apart: bool,
    /// A waiter votes again every retry delay even when the masters said
    /// how long the lock has left: only under the test switch
    /// `REDLOCK_TEST_POLL_WAITERS` (control runs).
    pub poll_waiters: bool,
}

/// What an acquisition came to.
#[derive(Debug, Clone)]
pub enum Acquire {
    Granted(Grant),
    /// Held by someone else on enough masters, until the wait ran out.
    /// `free_in`, for a voter that waits: how soon the lock can be free on
    /// a quorum if nobody releases it (see [`round::free_in`]); `None` where
    /// the masters did not say.
    Taken {
        free_in: Option<Duration>,
    },
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

/// Acquire rounds one agent runs at once; more wait for a turn. Without a
/// bound, a burst of thousands of requests puts thousands of votes on each
/// master's connection at once, every vote times out behind the others
/// (the node timeout starts when a vote is sent), every round fails and is
/// retried: overload turned into failure. Each round's timing starts after
/// its turn, so waiting here never eats into a lock's validity.
pub const MAX_ROUNDS_IN_FLIGHT: usize = 128;

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
        let key = resource.key(&self.settings.key_prefix);
        if self.settings.shared_apart && resource.kind() == Kind::Shared {
            return key + " apart";
        }
        key
    }

    /// `token`'s claim on `resource`'s key: a reader's for a shared lock.
    pub fn claim(&self, resource: &Resource, token: &Token) -> Arc<Claim> {
        Claim::of(
            self.key(resource),
            token.as_str(),
            resource.kind() == Kind::Shared,
        )
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
        let claim = self.claim(resource, token);
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
