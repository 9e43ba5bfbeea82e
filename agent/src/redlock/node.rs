//! One `Node` = one Redis master: its connection, its state, and the single
//! commands Redlock sends to it, each bounded by the per-node timeout.
//!
//! ## Behavior
//! - One multiplexed connection per master; every request shares it.
//! - Every request is bounded by `node_timeout`: a dead or frozen master costs
//!   at most that, never a hang.
//! - A connection error (refused, reset, closed) drops the connection, marks
//!   the node `down` and wakes the health task, which reconnects. Requests
//!   never reconnect inline.
//! - A timeout does not drop the connection by itself (one slow reply is not
//!   a dead master); the health probe decides.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, ServerErrorKind};
use tokio::sync::Notify;

use super::scripts;
use crate::metrics::{Failure, Metrics, NodeSeries, Op, VoteLabel};
use redlock_wire::NodeState;

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
}

impl NodeError {
    /// Every value of [`NodeError::kind`].
    pub const KINDS: [&'static str; 10] = [
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
        }
    }

    /// Errors after which the connection is not worth keeping.
    fn drops_connection(&self) -> bool {
        matches!(self, NodeError::Connection(_) | NodeError::Auth(_))
    }

    fn classify(e: &RedisError) -> NodeError {
        if e.is_timeout() {
            return NodeError::Timeout(Duration::ZERO);
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            return NodeError::Connection(e.to_string());
        }
        match e.kind() {
            ErrorKind::AuthenticationFailed => NodeError::Auth(e.to_string()),
            ErrorKind::Server(ServerErrorKind::NoPerm) => NodeError::NoPerm(e.to_string()),
            ErrorKind::Server(ServerErrorKind::ReadOnly) => NodeError::ReadOnly,
            ErrorKind::Server(ServerErrorKind::NoScript) => NodeError::Script(e.to_string()),
            _ => match e.code() {
                Some("OOM") => NodeError::OutOfMemory,
                Some("WRONGTYPE") => NodeError::WrongType,
                Some("NOAUTH") | Some("WRONGPASS") => NodeError::Auth(e.to_string()),
                Some("READONLY") => NodeError::ReadOnly,
                _ => {
                    let text = e.to_string();
                    // Lua errors wrap the command's error text.
                    if text.contains("WRONGTYPE") {
                        NodeError::WrongType
                    } else if text.contains("OOM") {
                        NodeError::OutOfMemory
                    } else if text.contains("READONLY") {
                        NodeError::ReadOnly
                    } else {
                        NodeError::Other(text)
                    }
                }
            },
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
    /// The key exists: someone else holds the lock on this master.
    Taken,
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

/// What a node needs to know about the incarnation marker and quarantine.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Bound on every lock request.
    pub timeout: Duration,
    /// `<key_prefix> incarnation`: present while the master may be trusted.
    pub marker_key: String,
    /// `<key_prefix> fence`: the highest fence minted with this master's vote.
    pub fence_key: String,
    /// Check the marker in every vote and extension. Off only through the
    /// test switch `REDLOCK_TEST_NO_MARKER_CHECK`, for control runs.
    pub marker_check: bool,
    /// `max_ttl + delayed_restart.extra`, or zero with delayed restart off.
    pub quarantine: Duration,
}

/// Which restart detector put a node in quarantine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Detector {
    /// The node was unreachable and answers again as a new process.
    Reconnect,
    /// Its `run_id` changed between two probes: a restart faster than the
    /// probe interval.
    RunId,
    /// At first sight its uptime was below the quarantine period.
    Uptime,
    /// The incarnation marker key is gone (a flush, a failover, a restart
    /// no other detector saw): seen by a probe or inside a vote.
    Marker,
    /// `INFO` counted evicted keys since the last probe: lock keys may be
    /// among them.
    Eviction,
}

impl Detector {
    pub fn as_str(self) -> &'static str {
        match self {
            Detector::Reconnect => "reconnect",
            Detector::RunId => "run_id",
            Detector::Uptime => "uptime",
            Detector::Marker => "marker",
            Detector::Eviction => "eviction",
        }
    }
}

/// What `INFO` says about a master's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub run_id: String,
    pub uptime: Duration,
    /// `evicted_keys` from `INFO stats`, where the master reports it.
    pub evicted_keys: Option<u64>,
}

/// What the agent knows about a master; read by `/v1/nodes` and the quorum
/// check, written by requests and the health task.
#[derive(Debug, Clone)]
pub struct NodeSnapshot {
    pub state: NodeState,
    pub latency: Option<Duration>,
    pub last_error: Option<String>,
    pub connected: bool,
    /// Time left in quarantine (zero when not quarantined).
    pub quarantine_remaining: Duration,
    /// The whole length of the current quarantine (zero when not quarantined).
    pub quarantine_len: Duration,
    /// The detector behind the last quarantine.
    pub detector: Option<Detector>,
    pub identity: Option<Identity>,
    pub warnings: Vec<String>,
    pub persistence: Option<String>,
}

#[derive(Debug)]
struct Inner {
    conn: Option<MultiplexedConnection>,
    quarantine_until: Option<Instant>,
    /// How long the current quarantine lasts in all.
    quarantine_len: Duration,
    detector: Option<Detector>,
    identity: Option<Identity>,
    latency: Option<Duration>,
    last_error: Option<String>,
    warnings: Vec<String>,
    persistence: Option<String>,
    /// A probe has answered at least once.
    seen: bool,
    /// A connection attempt failed since the last installed connection.
    unreachable: bool,
    /// Error kinds logged since the last installed connection (bit per kind).
    logged_kinds: u16,
    /// The master understands `SET ... NX GET` (Redis 7.0 and later).
    set_get: bool,
    /// A quarantine that ends only once this agent has rewritten the
    /// incarnation marker (see [`Node::readmit`]), even after its time ran out.
    readmit: bool,
    /// The quarantine witness written on the master once this quarantine
    /// began (see [`Node::write_witness`]), and the quarantine's end counted
    /// from that write.
    witness: Option<String>,
    /// Probes that timed out in a row.
    probe_timeouts: u32,
    /// A hash of `identity.run_id`, for the duplicate check on every request.
    server_id: Option<u64>,
}

impl Inner {
    /// `down` without a connection; `quarantined` until its end and, with
    /// the marker checked, until the marker has been rewritten; else `up`.
    fn state(&self, now: Instant) -> NodeState {
        match (&self.conn, self.quarantine_until) {
            (None, _) => NodeState::Down,
            (Some(_), Some(until)) if until > now || self.readmit => NodeState::Quarantined,
            (Some(_), _) => NodeState::Up,
        }
    }
}

/// One Redis master.
#[derive(Debug)]
pub struct Node {
    name: String,
    client: Client,
    timeout: Duration,
    connect_timeout: Duration,
    marker_key: String,
    fence_key: String,
    marker_check: bool,
    quarantine: Duration,
    // A std Mutex: every critical section is a few field reads or writes and
    // never spans an await.
    inner: Mutex<Inner>,
    /// Wakes the health task early after a request saw the connection fail.
    pub(crate) wake: Notify,
    metrics: Arc<Metrics>,
    series: NodeSeries,
}

impl Node {
    /// A node that is not connected yet (state `down`); the health task or
    /// [`Node::connect`] brings it up.
    pub fn new(
        name: String,
        client: Client,
        settings: NodeSettings,
        metrics: Arc<Metrics>,
    ) -> Node {
        let timeout = settings.timeout;
        Node {
            series: NodeSeries::new(&metrics, &name, &NodeError::KINDS),
            name,
            client,
            timeout,
            marker_key: settings.marker_key,
            fence_key: settings.fence_key,
            marker_check: settings.marker_check,
            quarantine: settings.quarantine,
            // Connecting includes TCP, TLS and the handshake; allow more than
            // one request's worth, but keep it short so a frozen master is
            // noticed quickly. Only the health task waits on it.
            connect_timeout: (timeout * 10)
                .clamp(Duration::from_millis(200), Duration::from_secs(2)),
            inner: Mutex::new(Inner {
                conn: None,
                quarantine_until: None,
                quarantine_len: Duration::ZERO,
                detector: None,
                identity: None,
                latency: None,
                last_error: Some("not connected yet".to_string()),
                warnings: Vec::new(),
                persistence: None,
                seen: false,
                unreachable: false,
                logged_kinds: 0,
                set_get: false,
                readmit: false,
                witness: None,
                probe_timeouts: 0,
                server_id: None,
            }),
            wake: Notify::new(),
            metrics,
        }
    }

    /// Counts this master's answer to one acquire.
    pub fn count_vote(&self, vote: VoteLabel) {
        self.series.vote(vote);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The master's client, for connections of another kind (pub/sub).
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Poisoning needs a panic while the lock is held; the critical
        // sections cannot panic, so recover the data rather than spread it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn snapshot(&self) -> NodeSnapshot {
        let now = Instant::now();
        let inner = self.lock();
        NodeSnapshot {
            state: inner.state(now),
            latency: inner.latency,
            last_error: inner.last_error.clone(),
            connected: inner.conn.is_some(),
            quarantine_remaining: inner
                .quarantine_until
                .map_or(Duration::ZERO, |until| until.saturating_duration_since(now)),
            quarantine_len: if inner.quarantine_until.is_some_and(|u| u > now) {
                inner.quarantine_len
            } else {
                Duration::ZERO
            },
            detector: inner.detector,
            identity: inner.identity.clone(),
            warnings: inner.warnings.clone(),
            persistence: inner.persistence.clone(),
        }
    }

    pub fn state(&self) -> NodeState {
        self.lock().state(Instant::now())
    }

    /// The node may take part in acquire and extend: connected and not in
    /// quarantine.
    pub fn is_usable(&self) -> bool {
        self.state() == NodeState::Up
    }

    /// Keeps the node out of acquire and extend until `until` and, with the
    /// marker checked, until [`Node::readmit`] has rewritten the marker. A
    /// later quarantine never shortens an earlier one.
    pub(crate) fn quarantine(&self, until: Instant, detector: Detector) {
        let mut inner = self.lock();
        if inner.quarantine_until.is_none_or(|u| u < until) {
            inner.quarantine_until = Some(until);
            inner.quarantine_len = until.saturating_duration_since(Instant::now());
        }
        inner.detector = Some(detector);
        if self.marker_check && !inner.readmit {
            inner.readmit = true;
            inner.witness = None;
        }
    }

    /// The master answered a vote or an extension without its marker: it
    /// lost its keys while this agent was connected. Quarantined at once,
    /// without waiting for a probe; the health task is woken so a zero-length
    /// quarantine (delayed restart off) readmits it promptly.
    fn lost_state(&self) {
        let newly = {
            let inner = self.lock();
            !(inner.readmit || inner.quarantine_until.is_some_and(|u| u > Instant::now()))
        };
        if newly {
            tracing::warn!(
                node = %self.name,
                quarantine = ?self.quarantine,
                "incarnation marker missing in a vote: the master lost its keys; quarantined"
            );
            self.quarantine(Instant::now() + self.quarantine, Detector::Marker);
            self.restart_detected(Detector::Marker);
        }
        self.wake.notify_one();
    }

    /// The quarantine's time has run out and the marker must be rewritten
    /// before the node counts again.
    pub(crate) fn readmit_due(&self) -> bool {
        let inner = self.lock();
        inner.readmit && inner.quarantine_until.is_none_or(|u| u <= Instant::now())
    }

    /// The node waits for its marker to be rewritten (its quarantine's time
    /// may or may not have run out).
    pub(crate) fn readmit_pending(&self) -> bool {
        self.lock().readmit
    }

    /// A hash of the master's `run_id`, when a probe has read it: two nodes
    /// with the same one are one server.
    pub fn server_id(&self) -> Option<u64> {
        self.lock().server_id
    }

    /// When the current quarantine's time runs out, if one is running.
    pub(crate) fn quarantine_until(&self) -> Option<Instant> {
        let inner = self.lock();
        inner.quarantine_until.filter(|u| *u > Instant::now())
    }

    /// Whether the marker is checked (false only under the test switch).
    pub fn marker_checked(&self) -> bool {
        self.marker_check
    }

    /// The incarnation marker's key on this master.
    pub fn marker_key(&self) -> &str {
        &self.marker_key
    }

    /// Ends a quarantine whose time ran out: rewrites the marker first, so
    /// every agent that sees it from now on may trust this master's keys.
    /// Only an agent that kept the master out for the whole period does
    /// this; every lock the master may have held before it lost its keys has
    /// expired by then.
    ///
    /// # Errors
    /// When the master does not take the write; the node stays quarantined.
    /// The marker is written only where this agent's quarantine witness
    /// is still on the master: it proves that nothing was lost since the
    /// quarantine began. Without it (another loss during the quarantine,
    /// perhaps after another agent readmitted the master and it voted
    /// again), the quarantine starts over.
    ///
    /// True when the node takes part in locks again.
    ///
    /// # Errors
    /// When the master does not take the write; the node stays quarantined.
    ///
    /// `catch_up`: the highest fencing counter read from the other masters
    /// (see [`crate::health`]); this master's counter is raised to it in the
    /// same step, so it never votes with a counter below a fence granted
    /// while it was away.
    pub(crate) async fn readmit(
        &self,
        conn: &MultiplexedConnection,
        catch_up: u64,
    ) -> Result<bool, NodeError> {
        // Present already: another agent readmitted it first (by this same
        // rule), or a replica has its master's (its votes fail READONLY
        // anyway). Only the counter's catch-up to write (a replica refuses
        // it; its votes would fail anyway).
        let witness = self.lock().witness.clone();
        if self.marker_present(conn).await? {
            let fence_key = self.fence_key.as_str();
            let raised = self
                .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                    scripts::RAISE_FENCE
                        .key(fence_key)
                        .arg(catch_up.to_string())
                        .invoke_async::<i64>(&mut conn)
                        .await
                })
                .await;
            match raised {
                Ok(_) | Err(NodeError::ReadOnly) => {}
                Err(e) => return Err(e),
            }
            if let Some(witness) = witness {
                let _ = self.delete_key(conn, &witness).await;
            }
            self.lock().readmit = false;
            return Ok(true);
        }
        let Some(witness) = witness else {
            // No witness could be written yet: keep waiting for one.
            return Ok(false);
        };
        let (marker, fence_key) = (self.marker_key.as_str(), self.fence_key.as_str());
        let written = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                scripts::READMIT
                    .key(marker)
                    .key(&witness)
                    .key(fence_key)
                    .arg(MARKER_VALUE)
                    .arg(catch_up.to_string())
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        let mut inner = self.lock();
        if written == 1 {
            inner.readmit = false;
            inner.witness = None;
            Ok(true)
        } else {
            drop(inner);
            tracing::warn!(
                node = %self.name,
                "the master lost its keys again while quarantined: the quarantine starts over"
            );
            let mut inner = self.lock();
            inner.witness = None;
            inner.quarantine_until = Some(Instant::now() + self.quarantine);
            inner.quarantine_len = self.quarantine;
            inner.detector = Some(Detector::Marker);
            drop(inner);
            self.restart_detected(Detector::Marker);
            Ok(false)
        }
    }

    /// Whether the current quarantine still needs its witness written.
    pub(crate) fn needs_witness(&self) -> bool {
        let inner = self.lock();
        inner.readmit && inner.witness.is_none()
    }

    /// Writes this quarantine's witness, a key with a random name under the
    /// prefix that any later loss of the master's keys removes, and counts
    /// the quarantine from now: readmission needs the whole period to pass
    /// after the witness, so a loss between the start of the quarantine and
    /// this write is waited out too. Its TTL outlasts the quarantine; should
    /// the master stay unreachable longer, the quarantine just starts over.
    ///
    /// # Errors
    /// When the master does not take the write; tried again at the next probe.
    pub(crate) async fn write_witness(
        &self,
        conn: &MultiplexedConnection,
    ) -> Result<(), NodeError> {
        let key = format!(
            "{}{}",
            self.marker_key.trim_end_matches(MARKER_SUFFIX),
            crate::redlock::token::Token::generate(None, None).as_str()
        );
        let key = format!("{key}{WITNESS_SUFFIX}");
        let ttl = self.quarantine * 2 + Duration::from_secs(60);
        let written = key.clone();
        self.request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
            redis::cmd("SET")
                .arg(&written)
                .arg("redlock-agent quarantine witness")
                .arg("PX")
                .arg(ttl_ms(ttl))
                .query_async::<()>(&mut conn)
                .await
        })
        .await?;
        let mut inner = self.lock();
        let until = Instant::now() + self.quarantine;
        if inner.quarantine_until.is_none_or(|u| u < until) {
            inner.quarantine_until = Some(until);
            inner.quarantine_len = self.quarantine;
        }
        inner.witness = Some(key);
        Ok(())
    }

    async fn delete_key(&self, conn: &MultiplexedConnection, key: &str) -> Result<(), NodeError> {
        self.request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
            redis::cmd("DEL")
                .arg(key)
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    /// Counts one more probe timeout and says whether it is the second in a
    /// row: one late answer under the agent's own load is not a dead master.
    pub(crate) fn probe_timed_out(&self) -> bool {
        let mut inner = self.lock();
        inner.probe_timeouts += 1;
        inner.probe_timeouts >= 2
    }

    pub(crate) fn restart_detected(&self, detector: Detector) {
        self.metrics
            .node_restarts
            .with_label_values(&[self.name.as_str(), detector.as_str()])
            .inc();
    }

    pub(crate) fn set_identity(&self, identity: Option<Identity>) {
        use std::hash::{Hash, Hasher};
        let server_id = identity.as_ref().map(|i| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            i.run_id.hash(&mut hasher);
            hasher.finish()
        });
        let mut inner = self.lock();
        inner.identity = identity;
        inner.server_id = server_id;
    }

    pub(crate) fn set_topology(&self, warnings: Vec<String>, persistence: Option<String>) {
        let mut inner = self.lock();
        inner.warnings = warnings;
        inner.persistence = persistence;
    }

    /// True the first time it is called: the first probe that answered.
    pub(crate) fn first_sight(&self) -> bool {
        !std::mem::replace(&mut self.lock().seen, true)
    }

    /// Opens a fresh connection and loads the scripts. The node does not use
    /// it until [`Node::install`]: the health task first checks what came
    /// back (a restarted master must be quarantined before any request).
    ///
    /// # Errors
    /// When the master cannot be reached or refuses the handshake in time.
    pub async fn open(&self) -> Result<MultiplexedConnection, NodeError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout));
        let attempt = async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            scripts::RELEASE
                .prepare_invoke()
                .load_async(&mut conn)
                .await?;
            scripts::EXTEND
                .prepare_invoke()
                .load_async(&mut conn)
                .await?;
            scripts::ACQUIRE
                .prepare_invoke()
                .load_async(&mut conn)
                .await?;
            scripts::FENCE
                .prepare_invoke()
                .load_async(&mut conn)
                .await?;
            Ok::<_, RedisError>(conn)
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(mut conn)) => {
                conn.set_response_timeout(self.timeout);
                Ok(conn)
            }
            Ok(Err(e)) => Err(self.unreachable(NodeError::classify(&e))),
            Err(_) => Err(self.unreachable(NodeError::Timeout(self.connect_timeout))),
        }
    }

    fn unreachable(&self, error: NodeError) -> NodeError {
        self.note_error(&error);
        let mut inner = self.lock();
        inner.unreachable = true;
        inner.last_error = Some(error.to_string());
        error
    }

    /// Whether a connection attempt failed since the last installed one.
    pub(crate) fn was_unreachable(&self) -> bool {
        self.lock().unreachable
    }

    /// Makes `conn` the node's connection: from now on it is `up` or
    /// `quarantined`.
    pub(crate) fn install(&self, conn: MultiplexedConnection) {
        let mut inner = self.lock();
        inner.conn = Some(conn);
        inner.unreachable = false;
        inner.logged_kinds = 0;
    }

    /// The current connection, if any.
    pub fn connection(&self) -> Option<MultiplexedConnection> {
        self.lock().conn.clone()
    }

    /// Forgets the connection, which makes the node `down`.
    pub(crate) fn disconnect(&self, why: &NodeError) {
        let mut inner = self.lock();
        inner.conn = None;
        inner.last_error = Some(why.to_string());
    }

    /// Counts an error by kind, and logs it the first time its kind shows
    /// since the last connection was installed (not once per request).
    fn note_error(&self, error: &NodeError) {
        self.metrics.fail(Failure::NodeError);
        let kind_index = NodeError::KINDS
            .iter()
            .position(|k| *k == error.kind())
            .unwrap_or(0);
        self.series.error(kind_index);
        let first_of_its_kind = {
            let bit = 1u16 << kind_index;
            let mut inner = self.lock();
            let first = inner.logged_kinds & bit == 0;
            inner.logged_kinds |= bit;
            first
        };
        if first_of_its_kind {
            tracing::warn!(node = %self.name, kind = error.kind(), error = %error, "master answered with an error");
        }
    }

    fn record_error(&self, error: NodeError) -> NodeError {
        self.note_error(&error);
        if error.drops_connection() {
            self.disconnect(&error);
            self.wake.notify_one();
        } else {
            self.lock().last_error = Some(error.to_string());
        }
        error
    }

    pub(crate) fn record_probe(&self, latency: Duration) {
        let mut inner = self.lock();
        inner.latency = Some(latency);
        inner.last_error = None;
        inner.probe_timeouts = 0;
    }

    /// Runs one request on the node's connection, bounded by the node timeout.
    async fn request<T, F, Fut>(&self, kind: Op, op: F) -> Result<T, NodeError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let Some(conn) = self.connection() else {
            return Err(NodeError::NotConnected);
        };
        self.request_on(kind, conn, op).await
    }

    /// Runs one request on `conn`, bounded by the node timeout; connection
    /// errors disconnect the node.
    async fn request_on<T, F, Fut>(
        &self,
        kind: Op,
        conn: MultiplexedConnection,
        op: F,
    ) -> Result<T, NodeError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        // The connection's own response timeout (the node timeout, set in
        // `open`) bounds the request; no second timer is needed here.
        let started = Instant::now();
        let result = op(conn).await;
        self.series.request(kind, started.elapsed());
        result.map_err(|e| {
            let error = match NodeError::classify(&e) {
                NodeError::Timeout(_) if kind == Op::Probe => {
                    NodeError::Timeout(self.probe_timeout())
                }
                NodeError::Timeout(_) => NodeError::Timeout(self.timeout),
                other => other,
            };
            self.record_error(error)
        })
    }

    /// The vote: `SET key value NX PX ttl` inside the script that checks the
    /// incarnation marker (see [`scripts::ACQUIRE`]), reading the fencing
    /// counter in the same script when `read_counter`; a plain `SET` only
    /// under the test switch without fencing. With `GET` where the master
    /// has it, so a key of another type answers WRONGTYPE instead of looking
    /// taken.
    pub async fn set_nx(&self, key: &str, value: &str, ttl: Duration, read_counter: bool) -> Vote {
        let set_get = self.lock().set_get;
        if self.marker_check || read_counter {
            let (marker, fence_key) = (self.marker_key.as_str(), self.fence_key.as_str());
            let check = if self.marker_check { "1" } else { "0" };
            let result = self
                .request(Op::Acquire, |mut conn| async move {
                    scripts::ACQUIRE
                        .key(key)
                        .key(marker)
                        .key(fence_key)
                        .arg(value)
                        .arg(ttl_ms(ttl))
                        .arg(if set_get { "1" } else { "0" })
                        .arg(check)
                        .arg(if read_counter { "1" } else { "0" })
                        .invoke_async::<redis::Value>(&mut conn)
                        .await
                })
                .await;
            let answer = result.and_then(|reply| {
                acquire_reply(&reply).ok_or_else(|| {
                    self.record_error(NodeError::Other(format!(
                        "unexpected answer to the vote: {reply:?}"
                    )))
                })
            });
            return match answer {
                Ok((1, counter)) => Vote::Granted { counter },
                Ok((-1, _)) => {
                    self.lost_state();
                    Vote::LostState
                }
                Ok(_) => Vote::Taken,
                Err(e) => Vote::Failed(e),
            };
        }
        let result = self
            .request(Op::Acquire, |mut conn| async move {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(value).arg("NX");
                if set_get {
                    cmd.arg("GET");
                }
                cmd.arg("PX").arg(ttl_ms(ttl));
                cmd.query_async::<redis::Value>(&mut conn).await
            })
            .await;
        match (set_get, result) {
            // With GET: nil = it was free and is ours; a value = taken.
            (true, Ok(redis::Value::Nil)) => Vote::Granted { counter: 0 },
            (true, Ok(_)) => Vote::Taken,
            // Without: OK = ours; nil = taken.
            (false, Ok(redis::Value::Nil)) => Vote::Taken,
            (false, Ok(_)) => Vote::Granted { counter: 0 },
            (_, Err(e)) => Vote::Failed(e),
        }
    }

    /// Round 2 of a fenced grant (see [`scripts::FENCE`]): raises this
    /// master's fencing counter to `fence` while `key` still holds `value`.
    /// `Ok(true)` when raised (or already as high).
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn raise_fence(&self, key: &str, value: &str, fence: u64) -> Result<bool, NodeError> {
        let fence_key = self.fence_key.as_str();
        self.request(Op::Fence, |mut conn| async move {
            scripts::FENCE
                .key(key)
                .key(fence_key)
                .arg(value)
                .arg(fence.to_string())
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }

    /// This master's fencing counter (0 when it has none), for the catch-up
    /// of another master's readmission.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or the
    /// counter is not a number.
    pub async fn read_fence(&self) -> Result<u64, NodeError> {
        let fence_key = self.fence_key.as_str();
        let value = self
            .request(Op::Fence, |mut conn| async move {
                redis::cmd("GET")
                    .arg(fence_key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await?;
        match value {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| {
                self.record_error(NodeError::Other(format!(
                    "the fencing counter {fence_key:?} holds {text:?}, not a number"
                )))
            }),
        }
    }

    /// Compare-and-delete. `Ok(true)` when this master held the token.
    pub async fn release(&self, key: &str, value: &str, channel: &str) -> Result<bool, NodeError> {
        self.request(Op::Release, |mut conn| async move {
            scripts::RELEASE
                .key(key)
                .arg(value)
                .arg(channel)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }

    /// Compare-and-pexpire, checking the incarnation marker in the same
    /// script.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn extend(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<Extension, NodeError> {
        let marker = self.marker_key.as_str();
        let check = if self.marker_check { "1" } else { "0" };
        let reply = self
            .request(Op::Extend, |mut conn| async move {
                scripts::EXTEND
                    .key(key)
                    .key(marker)
                    .arg(value)
                    .arg(ttl_ms(ttl))
                    .arg(check)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        Ok(match reply {
            1 => Extension::Extended,
            -1 => {
                self.lost_state();
                Extension::LostState
            }
            _ => Extension::NotHeld,
        })
    }

    /// `INFO server` and `INFO stats`, timed: the process identity, or
    /// `None` when an ACL refuses INFO. Used by the health task, with a
    /// longer bound than lock requests ([`Node::probe_timeout`]): a probe
    /// queued behind the agent's own burst of requests is late, not failed.
    ///
    /// # Errors
    /// When the master does not answer in time or the connection fails.
    pub async fn probe_identity(
        &self,
        conn: &MultiplexedConnection,
    ) -> Result<(Duration, Option<Identity>), NodeError> {
        let start = Instant::now();
        let reply = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                redis::pipe()
                    .cmd("INFO")
                    .arg("server")
                    .cmd("INFO")
                    .arg("stats")
                    .query_async::<(String, String)>(&mut conn)
                    .await
            })
            .await;
        let latency = start.elapsed();
        match reply {
            Ok((server, stats)) => {
                let fields = info_fields(&server);
                if let Some(major) = fields
                    .get("redis_version")
                    .and_then(|v| v.split('.').next())
                    .and_then(|m| m.parse::<u32>().ok())
                {
                    self.lock().set_get = major >= 7;
                }
                let run_id = fields.get("run_id").cloned();
                let uptime = fields.get("uptime_in_seconds").and_then(|v| v.parse().ok());
                let evicted_keys = info_fields(&stats)
                    .get("evicted_keys")
                    .and_then(|v| v.parse().ok());
                match (run_id, uptime) {
                    (Some(run_id), Some(secs)) => Ok((
                        latency,
                        Some(Identity {
                            run_id,
                            uptime: Duration::from_secs(secs),
                            evicted_keys,
                        }),
                    )),
                    _ => Ok((latency, None)),
                }
            }
            Err(NodeError::NoPerm(_)) => Ok((latency, None)),
            Err(NodeError::Timeout(_)) => Err(NodeError::Timeout(self.probe_timeout())),
            Err(e) => Err(e),
        }
    }

    /// The bound on a health probe: the connect timeout (ten node timeouts,
    /// 200ms to 2s).
    pub fn probe_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// A handle on `conn` whose requests are bounded by the probe timeout.
    fn probe_conn(&self, conn: &MultiplexedConnection) -> MultiplexedConnection {
        let mut conn = conn.clone();
        conn.set_response_timeout(self.probe_timeout());
        conn
    }

    /// The whole `INFO` as key/value pairs, for topology checks. `None` when
    /// an ACL refuses it.
    ///
    /// # Errors
    /// When the master does not answer in time or the connection fails.
    pub async fn info(
        &self,
        conn: &MultiplexedConnection,
    ) -> Result<Option<HashMap<String, String>>, NodeError> {
        match self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                redis::cmd("INFO").query_async::<String>(&mut conn).await
            })
            .await
        {
            Ok(text) => Ok(Some(info_fields(&text))),
            Err(NodeError::NoPerm(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `CONFIG GET` of one parameter; `None` when refused or unknown.
    pub async fn config_get(&self, conn: &MultiplexedConnection, name: &str) -> Option<String> {
        let reply = self
            .request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(name)
                    .query_async::<Vec<String>>(&mut conn)
                    .await
            })
            .await
            .ok()?;
        reply.into_iter().nth(1)
    }

    /// Whether the incarnation marker is there. Read-only: a probe never
    /// writes the marker, only [`Node::readmit`] does (and the first sight
    /// of masters this process started empty).
    ///
    /// # Errors
    /// When the master does not answer in time or refuses the read.
    pub async fn marker_present(&self, conn: &MultiplexedConnection) -> Result<bool, NodeError> {
        let key = self.marker_key.as_str();
        self.request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
            redis::cmd("EXISTS")
                .arg(key)
                .query_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }

    /// Writes the incarnation marker. No TTL: it must outlive every lock.
    ///
    /// # Errors
    /// When the master does not answer in time or refuses the write.
    pub(crate) async fn write_marker(&self, conn: &MultiplexedConnection) -> Result<(), NodeError> {
        let key = self.marker_key.as_str();
        self.request_on(Op::Probe, self.probe_conn(conn), |mut conn| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(MARKER_VALUE)
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }
}

impl Node {
    /// One `SCAN cursor MATCH pattern COUNT count`, then the value and
    /// PTTL of every key it returned, in one script call.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn scan_keys(
        &self,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Result<(u64, Vec<KeyState>), NodeError> {
        let (next, keys): (u64, Vec<String>) = self
            .request(Op::Scan, |mut conn| async move {
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(count)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        if keys.is_empty() {
            return Ok((next, Vec::new()));
        }
        let script_keys = keys.clone();
        let reply: Vec<redis::Value> = self
            .request(Op::Scan, |mut conn| async move {
                let mut invocation = scripts::READ_KEYS.prepare_invoke();
                for key in &script_keys {
                    invocation.key(key);
                }
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        Ok((next, key_states(keys.into_iter(), &reply)))
    }

    /// Opens a connection of its own for operator reads (listings, lock
    /// lookups), whose response timeout is `timeout`.
    ///
    /// ## Behavior
    /// - Large `SCAN` replies on it never queue ahead of votes and probes,
    ///   which keep the node's shared connection.
    /// - Health does not watch it: failing to open it or a timeout on it
    ///   never changes the node's state. A node without its shared
    ///   connection (`down`) is not tried at all.
    ///
    /// # Errors
    /// When the node is down, or the master cannot be reached in time.
    pub async fn open_reader(&self, timeout: Duration) -> Result<MultiplexedConnection, NodeError> {
        if self.connection().is_none() {
            return Err(NodeError::NotConnected);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(timeout));
        let attempt = async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            scripts::READ_KEYS
                .prepare_invoke()
                .load_async(&mut conn)
                .await?;
            Ok::<_, RedisError>(conn)
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(NodeError::classify(&e)),
            Err(_) => Err(NodeError::Timeout(self.connect_timeout)),
        }
    }

    /// Runs one operator read on a reader connection (see
    /// [`Node::open_reader`]); a slow answer comes back as an error, never
    /// as "no keys".
    async fn read_request<T, F, Fut>(
        &self,
        conn: &MultiplexedConnection,
        op: F,
    ) -> Result<T, NodeError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let started = Instant::now();
        let result = op(conn.clone()).await;
        self.series.request(Op::Scan, started.elapsed());
        result.map_err(|e| NodeError::classify(&e))
    }

    /// One `SCAN cursor MATCH pattern COUNT count`: the next cursor and the
    /// key names, nothing else (the operator listing reads values only for
    /// the page it answers).
    ///
    /// # Errors
    /// When the master does not answer in time on `conn`, or fails.
    pub async fn scan_names(
        &self,
        conn: &MultiplexedConnection,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Result<(u64, Vec<String>), NodeError> {
        self.read_request(conn, |mut conn| async move {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(count)
                .query_async(&mut conn)
                .await
        })
        .await
    }

    /// The value and PTTL of every key in `keys`, in one script call (one
    /// round trip). Keys that are gone answer `pttl: -2`.
    ///
    /// # Errors
    /// When the master does not answer in time on `conn`, or fails.
    pub async fn read_keys(
        &self,
        conn: &MultiplexedConnection,
        keys: &[String],
    ) -> Result<Vec<KeyState>, NodeError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let reply: Vec<redis::Value> = self
            .read_request(conn, |mut conn| async move {
                let mut invocation = scripts::READ_KEYS.prepare_invoke();
                for key in keys {
                    invocation.key(key);
                }
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        Ok(key_states(keys.iter().cloned(), &reply))
    }

    /// `DEL key`, for an operator's force release. `Ok(true)` when a key
    /// was deleted.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn delete(&self, key: &str) -> Result<bool, NodeError> {
        self.request(Op::Release, |mut conn| async move {
            redis::cmd("DEL")
                .arg(key)
                .query_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }

    /// `PEXPIRE key ms` on a key that has no TTL and still holds `value`
    /// (the scanner's repair, which reads the value first); `Ok(true)` when
    /// a TTL was set.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn expire_if_unchanged(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, NodeError> {
        // One script: the value and the missing TTL are checked where the
        // TTL is set, so nothing written since the scan is touched.
        self.request(Op::Scan, |mut conn| async move {
            scripts::EXPIRE_IF_UNCHANGED
                .key(key)
                .arg(value)
                .arg(ttl_ms(ttl))
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }
}

/// The incarnation marker's value (only its presence matters).
const MARKER_VALUE: &str = "redlock-agent incarnation marker";

pub use redlock_wire::keys::{FENCE_SUFFIX, MARKER_SUFFIX, WITNESS_SUFFIX};

/// One key as a scan saw it on one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    pub key: String,
    /// `None` when the key is gone or is not a string.
    pub value: Option<String>,
    /// Milliseconds left; -1 without TTL, -2 when the key is gone.
    pub pttl: i64,
}

/// Pairs key names with `READ_KEYS`'s flat `value, pttl, value, pttl, …`
/// reply; a key without its pair reads as gone.
fn key_states(keys: impl Iterator<Item = String>, reply: &[redis::Value]) -> Vec<KeyState> {
    let mut pairs = reply.chunks(2);
    keys.map(|key| {
        let pair = pairs.next().unwrap_or(&[]);
        KeyState {
            key,
            value: match pair.first() {
                Some(redis::Value::BulkString(bytes)) => {
                    Some(String::from_utf8_lossy(bytes).into_owned())
                }
                _ => None,
            },
            pttl: match pair.get(1) {
                Some(redis::Value::Int(n)) => *n,
                _ => -2,
            },
        }
    })
    .collect()
}

/// Parses `INFO` text into its `key:value` fields.
/// Reads the vote script's answer: a bare status, or `{status, counter}`
/// when the counter was asked for. `None` for anything else.
fn acquire_reply(reply: &redis::Value) -> Option<(i64, u64)> {
    match reply {
        redis::Value::Int(status) => Some((*status, 0)),
        redis::Value::Array(items) => match items.as_slice() {
            [redis::Value::Int(status), redis::Value::BulkString(counter)] => {
                let counter = std::str::from_utf8(counter).ok()?.parse().ok()?;
                Some((*status, counter))
            }
            _ => None,
        },
        _ => None,
    }
}

pub fn info_fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Milliseconds for PX and PEXPIRE; never 0, which Redis refuses.
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
