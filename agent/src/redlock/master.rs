//! What the algorithm needs from one master, and what a master answers.
//!
//! [`Master`] is the engine's only view of a master: [`crate::node::Node`]
//! implements it over Redis; the unit tests implement it in memory. The
//! engine never sees a connection, a script or a probe.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redlock_wire::NodeState;

use super::observe::VoteLabel;

/// How a request to one master failed, classified so callers can branch and
/// metrics can count by cause. Messages are short and lowercase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("not connected")]
    NotConnected,
    #[error("connection: {0}")]
    Connection(String),
    #[error("auth: {0}")]
    Auth(String),
    /// An ACL forbids the command; the connection itself is fine.
    #[error("noperm: {0}")]
    NoPerm(String),
    #[error("readonly: the master is a replica")]
    ReadOnly,
    #[error("oom: the master is out of memory")]
    OutOfMemory,
    #[error("wrongtype: a key of another type sits at the lock key")]
    WrongType,
    #[error("script: {0}")]
    Script(String),
    #[error("{0}")]
    Other(String),
    /// Not answered in time because the agent itself was busy: queued in
    /// the agent, or the agent too slow to write the request or read the
    /// answer, for this long in all. Never the master's failure: it does
    /// not change the master's state.
    #[error("not sent or not read in time: the agent was busy for {0:?} (its own backlog, not the master)")]
    Backlog(Duration),
}

impl NodeError {
    /// Every value of [`NodeError::kind`].
    pub const KINDS: [&'static str; 11] = [
        "timeout",
        "not_connected",
        "connection",
        "auth",
        "noperm",
        "readonly",
        "oom",
        "wrongtype",
        "script",
        "other",
        "backlog",
    ];

    /// A closed label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            NodeError::Timeout(_) => "timeout",
            NodeError::NotConnected => "not_connected",
            NodeError::Connection(_) => "connection",
            NodeError::Auth(_) => "auth",
            NodeError::NoPerm(_) => "noperm",
            NodeError::ReadOnly => "readonly",
            NodeError::OutOfMemory => "oom",
            NodeError::WrongType => "wrongtype",
            NodeError::Script(_) => "script",
            NodeError::Other(_) => "other",
            NodeError::Backlog(_) => "backlog",
        }
    }
}

/// One master's answer to `SET key token NX PX ttl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vote {
    /// The key is ours on this master, with the master's fencing counter
    /// when it was asked for (0 otherwise, or when it has none yet).
    Granted {
        counter: u64,
    },
    /// The key exists: someone else holds the lock on this master. `left`:
    /// for a voter that waits, the time the key has left here, where the
    /// master said (it has a TTL).
    Taken {
        left: Option<Duration>,
    },
    /// The master's incarnation marker is gone: it lost its keys (a flush,
    /// a failover, a restart) and its word on any lock is worthless until
    /// every lock it may have held has expired. Never counts.
    LostState,
    Failed(NodeError),
}

/// One master's answer to a compare-and-pexpire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extension {
    /// The key held the token and has its new TTL.
    Extended,
    /// The key is gone or holds another token.
    NotHeld,
    /// The incarnation marker is gone (see [`Vote::LostState`]).
    LostState,
}

/// One lock command's key and token, built once per request and shared by
/// every master's copy of the command (an `Arc` clone each): the text is
/// not copied per master, and the key's waiting flag is named at most once.
#[derive(Debug)]
pub struct Claim {
    key: String,
    token: String,
    flag: OnceLock<String>,
    shared: bool,
}

impl Claim {
    pub fn new(key: String, token: &str) -> Arc<Claim> {
        Claim::of(key, token, false)
    }

    /// A claim of `kind`'s resource: a reader's ([`super::Kind::Shared`])
    /// or an exclusive one (every other kind).
    pub fn of(key: String, token: &str, shared: bool) -> Arc<Claim> {
        Arc::new(Claim {
            key,
            token: token.to_string(),
            flag: OnceLock::new(),
            shared,
        })
    }

    /// A reader's claim: its vote, extension and release are the shared
    /// lock's (see `crate::node::conn::BATCH`).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The lock key, `<key_prefix><resource>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The token: the key's value while the lock is ours.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The key's waiting flag (`redlock_wire::keys::waiting_key`), named
    /// on first use. Every master of one agent shares `lock.key_prefix`,
    /// so the first master's name is every master's.
    pub fn flag(&self, key_prefix: &str) -> &str {
        self.flag
            .get_or_init(|| redlock_wire::keys::waiting_key(key_prefix, &self.key))
    }
}

/// One master as Redlock uses it. Every request is bounded by the master's
/// own timeout: a dead or frozen master costs at most that, never a hang.
/// The futures are `Send + 'static`-friendly (they borrow only their
/// arguments), so stragglers can finish in the background.
pub trait Master: Send + Sync + std::fmt::Debug + 'static {
    fn name(&self) -> &str;

    /// The name, for a trace's vote to keep without a copy of its own.
    fn shared_name(&self) -> std::sync::Arc<str> {
        self.name().into()
    }

    /// `up`, `down` or `quarantined` (never `duplicate`: that is the
    /// engine's view of two masters, see [`super::Redlock::duplicates`]).
    fn state(&self) -> NodeState;

    /// May take part in acquire and extend: connected and not quarantined.
    fn is_usable(&self) -> bool {
        self.state() == NodeState::Up
    }

    /// Asks for a health probe now rather than at the next tick: the agent
    /// has work again after an idle spell (see `crate::lock::idle`).
    /// Nothing to do for a master without probes.
    fn probe_soon(&self) {}

    /// The master's wall clock now as the agent last read it, in
    /// microseconds since the Unix epoch (see `crate::node::clock`);
    /// `None` when not known.
    fn master_time_us(&self) -> Option<u64> {
        None
    }

    /// Whether what the agent knows of this master may be out of date: it
    /// is marked down, or its last probe is old (an idle agent probes
    /// seldom). A request that would answer from such a view refreshes
    /// it first ([`Master::refresh`]).
    fn is_stale(&self) -> bool {
        false
    }

    /// Probes the master now and waits for the answer (at most the probe's
    /// own timeout), so a request answers from the master's state and not
    /// from an old view. Nothing to do for a master without probes.
    fn refresh(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// A stable id of the server process behind this master (a hash of its
    /// `run_id`), when known: two masters with one id are one server.
    fn server_id(&self) -> Option<u64>;

    /// Why the master cannot be used now, for `no_quorum` answers (for
    /// example `quarantined for 900ms more (... detected by marker)`).
    fn unusable_reason(&self) -> String;

    /// Counts this master's answer to one vote.
    fn count_vote(&self, vote: VoteLabel);

    /// How many times this master was seen to lose keys (a quarantine
    /// begun: a restart, a flush, an eviction; on a cluster, any slot's);
    /// it only grows. Read before a vote or an extension is sent, so
    /// [`Master::lost_since`] can tell later whether what it confirmed is
    /// still there.
    fn losses(&self) -> u64 {
        0
    }

    /// Whether `key` may have been lost on this master since
    /// [`Master::losses`] read `mark`: any loss on a single server; on a
    /// cluster, a loss that keeps `key`'s slot in quarantine now.
    fn lost_since(&self, key: &str, mark: u64) -> bool {
        let _ = key;
        self.losses() != mark
    }

    /// The vote: `SET key token NX PX ttl` for `claim`, atomically with the
    /// check that the master has not lost its keys and, with
    /// `read_counter`, a read of its fencing counter. `waiting`: the voter
    /// will wait if the lock is taken, so the holder's release should
    /// announce itself (see [`Master::release`]).
    fn vote(
        &self,
        claim: &Arc<Claim>,
        ttl: Duration,
        read_counter: bool,
        waiting: bool,
    ) -> impl Future<Output = Vote> + Send;

    /// Round 2 of a fenced grant: raise the fencing counter to `fence` while
    /// the claim's key still holds its token. `Ok(true)` when raised or
    /// already as high.
    fn raise_fence(
        &self,
        claim: &Arc<Claim>,
        fence: u64,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send;

    /// Compare-and-pexpire.
    fn extend(
        &self,
        claim: &Arc<Claim>,
        ttl: Duration,
    ) -> impl Future<Output = Result<Extension, NodeError>> + Send;

    /// Compare-and-delete, announcing the release on `channel` (the token
    /// as the message) when a waiting voter found the lock taken since it
    /// was granted. `Ok(true)` when this master held the token. Queued
    /// when called, not when the future is first polled (as
    /// [`Master::note_queued`]): a caller can queue it on every master and
    /// then wake the waiters whose votes must come behind it.
    fn release(
        self: &Arc<Self>,
        claim: &Arc<Claim>,
        channel: &Arc<str>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static;

    /// What each of `keys` holds, in the order asked, read beside the lock
    /// commands: a semaphore's round reads its limit's note and its
    /// permits so.
    fn peek(&self, keys: &[String]) -> impl Future<Output = Result<Vec<Peeked>, NodeError>> + Send;

    /// Writes `value` at the bookkeeping key `key` with `ttl`, unless it
    /// holds `value` already for at least as long: a semaphore's limit
    /// (kept as long as its longest permit) and an election's leader note.
    fn note(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), NodeError>> + Send;

    /// [`Master::note`], not waited for: a master that does not take it is
    /// logged. It is queued before this returns, so it is written behind
    /// every command this agent queued for that master before and ahead of
    /// every one after.
    fn note_queued(self: &Arc<Self>, key: &str, value: &str, ttl: Duration);

    /// Lengthens the TTL of the bookkeeping key `key` to at least `ttl`
    /// when it is there; never writes it: how an agent that does not know
    /// a semaphore's limit keeps its note alive while it extends a permit.
    fn keep_note(
        &self,
        key: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), NodeError>> + Send;
}

/// A key as [`Master::peek`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peeked {
    Gone,
    /// A string of decimal digits: a semaphore's limit.
    Number(u64),
    /// Anything else: a permit's token, a key of another type.
    Held,
}

/// One key as an operator's read saw it on one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    pub key: String,
    /// `None` when the key is gone or is not a string.
    pub value: Option<String>,
    /// Milliseconds left; -1 without TTL, -2 when the key is gone.
    pub pttl: i64,
    /// A shared lock's readers (their tokens) that have not expired; empty
    /// for any other key.
    pub readers: Vec<String>,
}

/// One master as the lock service uses it beyond Redlock's own commands:
/// the losses its holds listen for, an operator's force release and its
/// announcement, and the operators' reads of lock keys. The lock service
/// ([`crate::lock`]) sees masters only through this trait and [`Master`];
/// [`crate::node::Node`] implements both over Redis, the unit tests in
/// memory.
pub trait Store: Master {
    /// Changes whenever [`Master::losses`] grows: a hold wakes on it to
    /// look at once whether its masters still hold it.
    fn loss_events(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Deletes `key` whoever holds it. `Ok(Some(value))` when a key was
    /// deleted (`""` for a key of another type), `Ok(None)` without one.
    fn force_delete(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<String>, NodeError>> + Send;

    /// Publishes `message` on `channel` (on a cluster, to every node).
    fn announce(
        &self,
        channel: &str,
        message: &str,
    ) -> impl Future<Output = Result<(), NodeError>> + Send;

    /// One step of a walk over the key names matching `pattern` (a `SCAN
    /// MATCH` glob): the next cursor (0 at the end) and the names. Operator
    /// reads never queue behind or ahead of the lock commands.
    fn list_names(
        &self,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> impl Future<Output = Result<(u64, Vec<String>), NodeError>> + Send;

    /// The value and PTTL of each of `keys`, in the order asked; a key
    /// that is gone answers `pttl: -2`.
    fn list_keys(
        &self,
        keys: &[String],
    ) -> impl Future<Output = Result<Vec<KeyState>, NodeError>> + Send;
}

/// A change to the channels a master's subscriber should be on.
#[derive(Debug)]
pub enum ChannelChange {
    /// Subscribe; the sender, if any, hears once the master confirmed.
    Subscribe(String, Option<tokio::sync::oneshot::Sender<()>>),
    Unsubscribe(String),
    /// The lock service has work again: connect if idle; the sender, if
    /// any, hears once the connection is on the force-release channel.
    Wake(Option<tokio::sync::oneshot::Sender<()>>),
}

/// What one master's subscriber serves (see
/// `crate::node::subscriber::listen`): the channels to be on, and where
/// their messages go. The lock service implements it for its waiters and
/// holds; changes to the channels come on a [`ChannelChange`] channel.
pub trait Channels: Send + Sync + 'static {
    /// The fleet's force-release channel, always subscribed to. A master
    /// whose ACL refuses it still serves the other channels.
    fn always(&self) -> &str;

    /// Every other channel wanted now, subscribed to after a (re)connect.
    fn wanted(&self) -> Vec<String>;

    /// A message arrived on `channel`.
    fn message(&self, channel: &str, payload: &[u8]);

    /// Whether the lock service needs the channels now: false once it has
    /// been idle for a while (see `crate::lock::idle`), and the subscriber
    /// may close its connection until a [`ChannelChange`] comes.
    fn needed(&self) -> bool;
}
