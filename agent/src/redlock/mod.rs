//! The Redlock algorithm over N masters: acquire on a quorum of the
//! configured N with validity accounting, release everywhere, extend by
//! compare-and-pexpire.
//!
//! Free of transport: callers pass resources and durations, and get outcome
//! enums back. Validity math lives in [`validity`], node I/O in [`node`].

pub mod node;
pub mod resource;
pub mod scripts;
pub mod token;
pub mod validity;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use rand::Rng;

pub use node::{Node, NodeError, Vote};
pub use resource::{Resource, ResourceError};
pub use token::Token;
pub use validity::Drift;

use crate::metrics::{Failure, Metrics, VoteLabel};

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
}

/// A lock this agent acquired.
#[derive(Debug, Clone)]
pub struct Grant {
    pub token: Token,
    pub ttl: Duration,
    /// Safe to use for this long from `granted_at`.
    pub validity: Duration,
    pub granted_at: Instant,
}

impl Grant {
    pub fn valid_until(&self) -> Instant {
        self.granted_at + self.validity
    }
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
    },
    /// Not extended on a quorum in time: the lock may be someone else's now.
    Lost,
    NoQuorum(String),
}

/// The result of one round of `SET NX` on every usable master.
#[derive(Debug)]
enum Attempt {
    Granted(Duration),
    /// A quorum was reached too slowly: nothing was left after drift.
    ValidityExhausted,
    Taken,
    NoQuorum(String),
}

/// Redlock over a fixed set of masters.
///
/// The quorum is N/2+1 of the configured N, whatever state the nodes are in:
/// a majority of the nodes that happen to be up is not a majority.
#[derive(Debug)]
pub struct Redlock {
    nodes: Vec<Arc<Node>>,
    quorum: usize,
    settings: Settings,
    metrics: Arc<Metrics>,
}

impl Redlock {
    /// # Panics
    /// If `nodes` is empty (the config refuses that).
    pub fn new(nodes: Vec<Arc<Node>>, settings: Settings, metrics: Arc<Metrics>) -> Redlock {
        assert!(!nodes.is_empty(), "Redlock needs at least one master");
        let quorum = nodes.len() / 2 + 1;
        Redlock {
            nodes,
            quorum,
            settings,
            metrics,
        }
    }

    pub fn nodes(&self) -> &[Arc<Node>] {
        &self.nodes
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
        self.nodes.iter().filter(|n| n.is_usable()).count() >= self.quorum
    }

    fn usable(&self) -> Vec<Arc<Node>> {
        self.nodes
            .iter()
            .filter(|n| n.is_usable())
            .cloned()
            .collect()
    }

    /// Says which nodes cannot be used and why, for `no_quorum` answers.
    pub fn describe_unusable(&self) -> String {
        let usable = self.nodes.iter().filter(|n| n.is_usable()).count();
        let mut parts = Vec::new();
        for node in &self.nodes {
            if node.is_usable() {
                continue;
            }
            let snap = node.snapshot();
            let why = match (snap.state, snap.detector, snap.last_error) {
                (redlock_wire::NodeState::Quarantined, detector, _) => format!(
                    "quarantined for {}ms more (restart detected by {})",
                    snap.quarantine_remaining.as_millis(),
                    detector.map_or("?", |d| d.as_str())
                ),
                (state, _, Some(err)) => format!("{} ({err})", state.as_str()),
                (state, _, None) => state.as_str().to_string(),
            };
            parts.push(format!("{} {why}", node.name()));
        }
        format!(
            "{usable} of {} masters usable, quorum is {}; {}",
            self.nodes.len(),
            self.quorum,
            parts.join(", ")
        )
    }

    /// One round of Redlock for `resource`: a fresh token, `SET NX PX` on
    /// every usable master at once, granted on a quorum with validity left.
    /// A failed round is released on every master before this returns.
    /// Waiting and retrying are the caller's ([`crate::waiters`]).
    pub async fn acquire_once(
        &self,
        resource: &Resource,
        ttl: Duration,
        owner: Option<&str>,
    ) -> Acquire {
        let usable = self.usable();
        if usable.len() < self.quorum {
            return Acquire::NoQuorum(self.describe_unusable());
        }
        let key = self.key(resource);
        let token = Token::generate(self.settings.agent_name.as_deref(), owner);
        let started = Instant::now();
        let outcome = match self.attempt(&usable, &key, &token, ttl).await {
            Attempt::Granted(validity) => {
                self.metrics
                    .validity_at_grant
                    .observe(validity.as_secs_f64() / ttl.as_secs_f64());
                return Acquire::Granted(Grant {
                    token,
                    ttl,
                    validity,
                    granted_at: Instant::now(),
                });
            }
            Attempt::ValidityExhausted => {
                self.metrics.fail(Failure::ValidityExhausted);
                Acquire::Taken
            }
            Attempt::Taken => Acquire::Taken,
            Attempt::NoQuorum(message) => Acquire::NoQuorum(message),
        };
        // Undo the partial acquisition everywhere, including the masters
        // that seemed not to answer: their SET may still have landed.
        self.release_all(resource, &token).await;
        tracing::debug!(%resource, elapsed = ?started.elapsed(), ?outcome, "acquire round failed");
        outcome
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
        usable: &[Arc<Node>],
        key: &str,
        token: &Token,
        ttl: Duration,
    ) -> Attempt {
        let started = Instant::now();
        let mut votes: FuturesUnordered<_> = usable
            .iter()
            .map(|node| {
                let node = Arc::clone(node);
                let key = key.to_string();
                let value = token.as_str().to_string();
                async move {
                    let vote = node.set_nx(&key, &value, ttl).await;
                    (node, vote)
                }
            })
            .collect();
        let (mut granted, mut taken, mut pending) = (0, 0, usable.len());
        let mut failures: Vec<String> = Vec::new();
        while let Some((node, vote)) = votes.next().await {
            pending -= 1;
            node.count_vote(vote_label(&vote));
            match vote {
                Vote::Granted => granted += 1,
                Vote::Taken => taken += 1,
                Vote::Failed(e) => {
                    tracing::debug!(node = node.name(), error = %e, "acquire vote failed");
                    failures.push(format!("{} ({e})", node.name()));
                }
            }
            if granted >= self.quorum {
                let elapsed = started.elapsed();
                // Let the stragglers finish on their own; their answers do
                // not change the outcome.
                if !votes.is_empty() {
                    tokio::spawn(async move {
                        while let Some((node, vote)) = votes.next().await {
                            node.count_vote(vote_label(&vote));
                        }
                    });
                }
                return match self.settings.drift.validity(ttl, elapsed) {
                    Some(validity) => Attempt::Granted(validity),
                    None => Attempt::ValidityExhausted,
                };
            }
            if granted + pending < self.quorum {
                break;
            }
        }
        while let Some((node, vote)) = votes.next().await {
            node.count_vote(vote_label(&vote));
            match vote {
                Vote::Granted => granted += 1,
                Vote::Taken => taken += 1,
                Vote::Failed(_) => {}
            }
        }
        if granted + taken < self.quorum {
            Attempt::NoQuorum(format!(
                "{} of {} masters answered, quorum is {}; failed: {}",
                granted + taken,
                self.nodes.len(),
                self.quorum,
                failures.join(", ")
            ))
        } else {
            Attempt::Taken
        }
    }

    /// Compare-and-delete on every master with a connection, all at once.
    /// Returns as soon as a quorum has released (true) or cannot any more
    /// (false); the other masters' answers are awaited in the background,
    /// so a frozen master does not hold up the caller.
    async fn release_all(&self, resource: &Resource, token: &Token) -> bool {
        let key = self.key(resource);
        let key = key.as_str();
        let mut replies: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|node| {
                let node = Arc::clone(node);
                let key = key.to_string();
                let value = token.as_str().to_string();
                let channel = format!("{}{}", self.settings.release_channel_prefix, resource);
                async move { node.release(&key, &value, &channel).await }
            })
            .collect();
        let (mut released, mut pending) = (0, self.nodes.len());
        while let Some(reply) = replies.next().await {
            pending -= 1;
            released += usize::from(matches!(reply, Ok(true)));
            if released >= self.quorum || released + pending < self.quorum {
                break;
            }
        }
        if !replies.is_empty() {
            tokio::spawn(async move { while replies.next().await.is_some() {} });
        }
        released >= self.quorum
    }

    /// Releases on every master at once. True when a quorum still held the
    /// token (false: its validity had already run out, or it was never held).
    pub async fn release(&self, resource: &Resource, token: &Token) -> bool {
        self.release_all(resource, token).await
    }

    /// Extends to a new `ttl` on every usable master; granted only when a
    /// quorum held the token and validity is left after the round trip.
    pub async fn extend(&self, resource: &Resource, token: &Token, ttl: Duration) -> Extend {
        let usable = self.usable();
        if usable.len() < self.quorum {
            return Extend::NoQuorum(self.describe_unusable());
        }
        let key = self.key(resource);
        let started = Instant::now();
        let mut replies: FuturesUnordered<_> = usable
            .iter()
            .map(|node| {
                let key = &key;
                async move { node.extend(key, token.as_str(), ttl).await }
            })
            .collect();
        let mut extended = 0;
        while let Some(reply) = replies.next().await {
            if matches!(reply, Ok(true)) {
                extended += 1;
                if extended >= self.quorum {
                    break;
                }
            }
        }
        let elapsed = started.elapsed();
        drop(replies);
        if extended < self.quorum {
            return Extend::Lost;
        }
        match self.settings.drift.validity(ttl, elapsed) {
            Some(validity) => Extend::Extended { validity },
            None => Extend::Lost,
        }
    }
}

fn vote_label(vote: &Vote) -> VoteLabel {
    match vote {
        Vote::Granted => VoteLabel::Granted,
        Vote::Taken => VoteLabel::Taken,
        Vote::Failed(NodeError::Timeout(_)) => VoteLabel::Timeout,
        Vote::Failed(_) => VoteLabel::Error,
    }
}
