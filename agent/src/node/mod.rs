//! One `Node` = one Redis master behind the engine's
//! [`crate::redlock::Master`]: its connection ([`conn`]) and state here,
//! its commands by job in [`lock`] (the votes, extend, release, fences,
//! sent in batches), [`probe`] (the health task's), [`scan`] (listings'
//! and the leak scanner's reads), [`leak`] (the leak scanner's fenced
//! writes), [`store`] (force release, notes, announcements: with
//! [`lock`], the lock service's [`crate::redlock::Store`]),
//! [`subscriber`] (the pub/sub channels of waiters and force releases),
//! [`check`] (`redlock-agent check`'s) and their [`scripts`]; a master
//! that is a Redis Cluster in [`cluster`].
//!
//! ## Behavior
//! - One connection per master that every lock command shares: a
//!   multiplexed connection, or on a cluster one cluster connection (with
//!   its own connection to each shard). A single server's health probes
//!   share it too; a cluster's health task reads the shards and sweeps the
//!   slots on a connection of its own (see [`cluster`]). Operator reads,
//!   the leak scanner and the subscriber each have one of their own.
//! - Every request is bounded by `node_timeout` (a health probe, by the
//!   probe timeout) of the master's time, counted from when the request is
//!   sent and without the time the agent itself was too busy to write it
//!   or read its answer (see [`conn::answer_within`]): a dead or frozen
//!   master costs at most that, never a hang. Each request also has an
//!   overall bound ([`Node::overall_bound`]); past it, the answer is the
//!   agent's own backlog ([`NodeError::Backlog`]), which never changes the
//!   node's state.
//! - The leak scanner's scans run on a connection of their own (see
//!   [`scan`]), as the operators' listings do: never queued ahead of lock
//!   commands.
//! - A connection error (refused, reset, closed) drops the connection, marks
//!   the node `down` and wakes the health task, which reconnects. Requests
//!   never reconnect inline. A cluster connection is kept: it reconnects to
//!   a failed shard by itself, and one shard's error must not take the
//!   whole master down (the health task replaces a connection that stays
//!   stuck, see `Node::stuck_connections`).
//! - A timeout does not drop the connection by itself (one slow reply is not
//!   a dead master); the health probe decides.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::sync::{watch, Notify};

pub mod check;
pub mod clock;
pub mod cluster;
pub mod conn;
pub mod errors;
pub mod leak;
pub mod lock;
pub mod probe;
pub mod scan;
pub mod scripts;
pub mod settings;
pub mod store;
pub mod subscriber;

pub use crate::redlock::KeyState;
pub use cluster::slots;
pub use conn::Conn;
pub use settings::{Detector, NodeSettings};

use crate::redlock::master::NodeError;
use crate::redlock::observe::{NodeObserver, Op};
use redlock_wire::NodeState;

pub use errors::cluster_node_as_server;
use errors::{classify, classify_text, cluster_only, drops_connection};

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
    conn: Option<Conn>,
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
    /// Probes that answered, counted for the periodic topology check.
    probes: u64,
    /// A hash of `identity.run_id`, for the duplicate check on every request.
    server_id: Option<u64>,
    /// The last reading of the master's clock (see [`clock`]).
    clock: clock::ClockWatch,
    /// What the last clock fault was, while its quarantine lasts.
    clock_fault: Option<String>,
    /// The master refused `TIME` (said once, see [`Node::clock_refused`]).
    clock_refused: bool,
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
    /// Shared with the spans that name this master (see [`Master::shared_name`]).
    name: Arc<str>,
    client: Client,
    timeout: Duration,
    connect_timeout: Duration,
    key_prefix: String,
    marker_key: String,
    fence_key: String,
    marker_check: bool,
    eviction_check: bool,
    quarantine: Duration,
    /// See [`NodeSettings::charge_queued`].
    charge_queued: bool,
    /// See [`NodeSettings::overall`].
    overall: Duration,
    /// See [`NodeSettings::agent_name`].
    agent_name: String,
    /// See [`NodeSettings::clock_check`].
    clock_check: bool,
    /// See [`NodeSettings::process_check`].
    process_check: bool,
    /// See [`NodeSettings::drift_factor`].
    drift_factor: f64,
    /// See [`NodeSettings::stale_after`].
    stale_after: Duration,
    /// This node's copy of [`conn::BATCH`]: its own SHA (see
    /// [`conn::batch`]), so the first vote after the master's process
    /// changed answers NOSCRIPT whoever else loaded theirs.
    batch_script: redis::Script,
    /// This node's copy of the health probe's script (see
    /// [`scripts::probe`]), where the process check is on.
    probe_script: Option<redis::Script>,
    /// The master refused `CLIENT SETNAME` once: said, not again.
    setname_refused: AtomicBool,
    /// The leak scanner's connection (see [`scan`]), opened on first use
    /// and dropped after any error. A std Mutex: held only to clone or
    /// replace the handle.
    scan_conn: Mutex<Option<Conn>>,
    /// The listings' reader connection (see [`Node::open_reader`]), and
    /// when a listing last used it: closed by the health task once unused
    /// for a while ([`Node::close_idle_reader`]).
    list_conn: Mutex<Option<Conn>>,
    list_used: Mutex<Instant>,
    /// The standby scanner's look, read by idle probes (see
    /// [`leak::Look`]). A std Mutex: a few assignments, never across an
    /// await.
    look: Mutex<leak::Look>,
    // A std Mutex: every critical section is a few field reads or writes and
    // never spans an await.
    inner: Mutex<Inner>,
    /// Wakes the health task early after a request saw the connection fail.
    pub(crate) wake: Notify,
    /// When the health task last finished a probe (see [`Node::fresh`]).
    probed: watch::Sender<Option<Instant>>,
    /// How many times this master was seen to lose keys (see
    /// [`Node::lost_keys`]); holds watch it to hear of a loss at once.
    losses: watch::Sender<u64>,
    observer: Arc<dyn NodeObserver>,
    /// The queue of lock commands to this master (see [`lock`]).
    batcher: lock::Batcher,
    /// A master given as a Redis Cluster: its client, shards and slots (see
    /// [`cluster`]); `None` for a single server.
    cluster: Option<cluster::ClusterPart>,
}

impl Node {
    /// A node that is not connected yet (state `down`); the health task
    /// ([`crate::health`]) brings it up.
    pub fn new(
        name: String,
        client: Client,
        settings: NodeSettings,
        observer: Arc<dyn NodeObserver>,
    ) -> Arc<Node> {
        Node::build(name, client, None, settings, observer)
    }

    /// A master that is a Redis Cluster: `cluster` reaches its shards,
    /// `client` (one of its seeds) carries the pub/sub subscription, which in
    /// a cluster hears every node's `PUBLISH`.
    pub fn new_cluster(
        name: String,
        client: Client,
        cluster: redis::cluster::ClusterClient,
        settings: NodeSettings,
        observer: Arc<dyn NodeObserver>,
    ) -> Arc<Node> {
        let part = cluster::ClusterPart::new(cluster);
        Node::build(name, client, Some(part), settings, observer)
    }

    fn build(
        name: String,
        client: Client,
        cluster: Option<cluster::ClusterPart>,
        settings: NodeSettings,
        observer: Arc<dyn NodeObserver>,
    ) -> Arc<Node> {
        let timeout = settings.timeout;
        // This node's own script copies (see `process`): none on a cluster.
        let tag =
            (settings.process_check && cluster.is_none()).then(crate::redlock::token::random_id);
        Arc::new_cyclic(|node| Node {
            name: name.into(),
            client,
            timeout,
            key_prefix: settings.key_prefix,
            marker_key: settings.marker_key,
            fence_key: settings.fence_key,
            marker_check: settings.marker_check,
            eviction_check: settings.eviction_check,
            quarantine: settings.quarantine,
            charge_queued: settings.charge_queued,
            overall: settings.overall,
            agent_name: settings.agent_name,
            clock_check: settings.clock_check,
            process_check: settings.process_check,
            drift_factor: settings.drift_factor,
            stale_after: settings.stale_after,
            batch_script: tag
                .as_deref()
                .map_or_else(|| conn::BATCH.clone(), |tag| conn::batch(Some(tag))),
            probe_script: tag.as_deref().map(scripts::probe),
            setname_refused: AtomicBool::new(false),
            scan_conn: Mutex::new(None),
            list_conn: Mutex::new(None),
            list_used: Mutex::new(Instant::now()),
            look: Mutex::default(),
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
                probes: 0,
                server_id: None,
                clock: clock::ClockWatch::default(),
                clock_fault: None,
                clock_refused: false,
            }),
            wake: Notify::new(),
            probed: watch::Sender::new(None),
            losses: watch::Sender::new(0),
            observer,
            batcher: lock::Batcher::new(node.clone()),
            cluster,
        })
    }

    /// The master is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// See [`NodeSettings::overall`].
    pub fn overall_bound(&self) -> Duration {
        self.overall
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
            warnings: inner
                .warnings
                .iter()
                .cloned()
                .chain(
                    inner
                        .clock_fault
                        .clone()
                        .filter(|_| inner.state(now) == NodeState::Quarantined),
                )
                .collect(),
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
        drop(inner);
        self.lost_keys();
    }

    /// Counts one more loss of keys on this master (on a cluster, of some
    /// slots', already marked out) and wakes every hold waiting on
    /// [`Node::loss_events`]: each checks at once whether a quorum of the
    /// masters it held on still holds it. Called after the state that
    /// shows the loss is written.
    pub(crate) fn lost_keys(&self) {
        self.losses.send_modify(|n| *n += 1);
    }

    /// Changes whenever this master is seen to lose keys.
    pub fn loss_events(&self) -> watch::Receiver<u64> {
        self.losses.subscribe()
    }

    /// How many times this master was seen to lose keys.
    pub fn losses(&self) -> u64 {
        *self.losses.borrow()
    }

    /// The master answered a vote or an extension without its marker: it
    /// lost its keys while this agent was connected. Quarantined at once,
    /// without waiting for a probe; the health task is woken so a zero-length
    /// quarantine (delayed restart off) readmits it promptly.
    ///
    /// `detector`: [`Detector::Marker`] for a missing marker,
    /// [`Detector::Eviction`] for a master that evicted keys since its
    /// marker was written (the vote deleted the marker).
    fn lost_state(&self, detector: Detector) {
        let newly = {
            let inner = self.lock();
            !(inner.readmit || inner.quarantine_until.is_some_and(|u| u > Instant::now()))
        };
        if newly {
            match detector {
                Detector::Eviction => tracing::warn!(
                    node = %self.name,
                    quarantine = ?self.quarantine,
                    "the master evicted keys since its incarnation marker was written (seen in a vote): lock keys may be gone; quarantined"
                ),
                _ => tracing::warn!(
                    node = %self.name,
                    quarantine = ?self.quarantine,
                    "incarnation marker missing in a vote: the master lost its keys; quarantined"
                ),
            }
            self.quarantine(Instant::now() + self.quarantine, detector);
            self.restart_detected(detector);
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

    /// When the current quarantine's time runs out, if one is running (on
    /// a cluster: the next slot's).
    pub(crate) fn quarantine_until(&self) -> Option<Instant> {
        if self.is_cluster() {
            return self.next_slot_due();
        }
        let inner = self.lock();
        inner.quarantine_until.filter(|u| *u > Instant::now())
    }

    /// Whether the marker is checked (false only under the test switch).
    pub fn marker_checked(&self) -> bool {
        self.marker_check
    }

    /// Opens a fresh connection and loads the scripts. The node does not use
    /// it until `Node::install`: the health task first checks what came
    /// back (a restarted master must be quarantined before any request).
    ///
    /// # Errors
    /// When the master cannot be reached or refuses the handshake in time.
    pub async fn open(&self) -> Result<Conn, NodeError> {
        if self.cluster.is_some() {
            return match self.connect(self.timeout, &[&*conn::BATCH], "locks").await {
                Ok(conn) => Ok(conn),
                Err(e) => Err(self.unreachable(e)),
            };
        }
        match self
            .connect(self.connect_timeout, &[&self.batch_script], "locks")
            .await
        {
            Ok(mut conn) => {
                conn.set_response_timeout(self.timeout);
                Ok(conn)
            }
            Err(e) => Err(self.unreachable(e)),
        }
    }

    /// A new connection whose requests are bounded by `response_timeout`,
    /// with `scripts` loaded, all within the connect timeout. On a single
    /// server it is named `redlock-agent:<agent>:<purpose>` (see
    /// [`conn::set_name`]); a refusal is said once per master.
    pub(crate) async fn connect(
        &self,
        response_timeout: Duration,
        scripts: &[&redis::Script],
        purpose: &str,
    ) -> Result<Conn, NodeError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(response_timeout));
        let attempt = async {
            let mut conn = match &self.cluster {
                Some(part) => {
                    Conn::Cluster(part.connect(self.connect_timeout, response_timeout).await?)
                }
                None => Conn::Single(
                    self.client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ),
            };
            for script in scripts {
                script.prepare_invoke().load_async(&mut conn).await?;
            }
            // A cluster's connections stay unnamed: the cluster client
            // opens and replaces one per shard on its own.
            if let Conn::Single(single) = &mut conn {
                let name = format!("redlock-agent:{}:{purpose}", self.agent_name);
                if let Err(e) = conn::set_name(single, &name).await? {
                    if !self.setname_refused.swap(true, Ordering::Relaxed) {
                        tracing::info!(node = %self.name, error = %e, "the master refuses CLIENT SETNAME: this agent's connections show unnamed in its CLIENT LIST");
                    }
                }
            }
            Ok::<_, RedisError>(conn)
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(classify(&e)),
            Err(_) => Err(NodeError::Timeout(self.connect_timeout)),
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
    pub(crate) fn install(&self, conn: Conn) {
        let mut inner = self.lock();
        inner.conn = Some(conn);
        inner.unreachable = false;
        inner.logged_kinds = 0;
    }

    /// The current connection, if any.
    pub fn connection(&self) -> Option<Conn> {
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
        let kind_index = NodeError::KINDS
            .iter()
            .position(|k| *k == error.kind())
            .unwrap_or(0);
        self.observer.error(kind_index);
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
        // A cluster connection reconnects to a failed shard by itself; one
        // shard's error must not take the whole master down.
        if drops_connection(&error) && self.cluster.is_none() {
            self.disconnect(&error);
            self.wake.notify_one();
        } else {
            self.lock().last_error = Some(error.to_string());
        }
        error
    }

    /// Returns how many probes have answered so far, this one included.
    pub(crate) fn record_probe(&self, latency: Duration) -> u64 {
        let mut inner = self.lock();
        inner.latency = Some(latency);
        inner.last_error = None;
        inner.probe_timeouts = 0;
        inner.probes += 1;
        inner.probes
    }

    /// Runs one request on the node's connection, bounded by the node timeout.
    async fn request<T, F, Fut>(&self, kind: Op, op: F) -> Result<T, NodeError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let Some(conn) = self.connection() else {
            return Err(NodeError::NotConnected);
        };
        self.request_on(kind, conn, op).await
    }

    /// Runs one request on `conn`, bounded by the node timeout (a probe: the
    /// probe timeout) of the master's time (see [`conn::answer_within`]);
    /// connection errors disconnect the node. Past the overall bound (a
    /// probe: four probe timeouts) without the master having had its time,
    /// [`NodeError::Backlog`], which changes nothing on the node.
    async fn request_on<T, F, Fut>(&self, kind: Op, conn: Conn, op: F) -> Result<T, NodeError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let bound = if kind == Op::Probe {
            self.probe_timeout()
        } else {
            self.timeout
        };
        let started = Instant::now();
        let result = if self.charge_queued {
            // The control: a single server's connection bounds the request
            // with its own response timeout from the call (set in `open`);
            // a cluster's gets a timer too (see `conn::bounded`).
            if self.is_cluster() {
                conn::bounded(bound, op(conn)).await
            } else {
                op(conn).await
            }
        } else {
            let limit = if kind == Op::Probe {
                bound * 4
            } else {
                self.overall_bound()
            };
            // The handle's own response timeout must not cut the request
            // short of the limit (a cluster's bounds each attempt itself).
            let mut conn = conn;
            conn.set_response_timeout(limit);
            match conn::answer_within(bound, limit, op(conn)).await {
                conn::Within::Answered(result) => result,
                conn::Within::TimedOut => Err(conn::timed_out()),
                conn::Within::Backlog(waited) => {
                    self.observer.request(kind, started.elapsed());
                    self.observer.backlog();
                    tracing::debug!(node = %self.name, ?kind, ?waited, "request held up by the agent's own backlog; not the master's failure");
                    return Err(NodeError::Backlog(waited));
                }
            }
        };
        self.observer.request(kind, started.elapsed());
        result.map_err(|e| self.failed(kind, &e))
    }

    /// Classifies an error this master answered: as [`classify`], but an
    /// answer only a Redis Cluster node gives, from a master listed as a
    /// single server, says so and what to change in the config rather
    /// than passing the raw redirect on.
    pub(crate) fn classify(&self, e: &RedisError) -> NodeError {
        match cluster_only(e).filter(|_| self.cluster.is_none()) {
            Some(code) => NodeError::Other(cluster_node_as_server(&format!("it answered {code}"))),
            None => classify(e),
        }
    }

    /// Classifies and records a failed request of `kind`.
    fn failed(&self, kind: Op, e: &RedisError) -> NodeError {
        let error = match self.classify(e) {
            NodeError::Timeout(_) if kind == Op::Probe => NodeError::Timeout(self.probe_timeout()),
            NodeError::Timeout(_) => NodeError::Timeout(self.timeout),
            other => other,
        };
        self.record_error(error)
    }
}

/// The incarnation marker's value (only its presence matters).
const MARKER_VALUE: &str = "redlock-agent incarnation marker";

pub use redlock_wire::keys::{FENCE_SUFFIX, MARKER_SUFFIX, WITNESS_SUFFIX};

/// Milliseconds for PX and PEXPIRE; never 0, which Redis refuses.
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
