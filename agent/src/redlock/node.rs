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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, ServerErrorKind};
use tokio::sync::Notify;

use super::scripts;
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
    /// A closed label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            NodeError::Timeout(_) => "timeout",
            NodeError::NotConnected => "not_connected",
            NodeError::Connection(_) => "connection",
            NodeError::Auth(_) => "auth",
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
            ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
                NodeError::Auth(e.to_string())
            }
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
    Granted,
    /// The key exists: someone else holds the lock on this master.
    Taken,
    Failed(NodeError),
}

/// What the agent knows about a master; read by `/v1/nodes` and the quorum
/// check, written by requests and the health task.
#[derive(Debug, Clone)]
pub struct NodeSnapshot {
    pub state: NodeState,
    pub latency: Option<Duration>,
    pub last_error: Option<String>,
    pub connected: bool,
}

#[derive(Debug)]
struct Inner {
    conn: Option<MultiplexedConnection>,
    state: NodeState,
    latency: Option<Duration>,
    last_error: Option<String>,
}

/// One Redis master.
#[derive(Debug)]
pub struct Node {
    name: String,
    client: Client,
    timeout: Duration,
    connect_timeout: Duration,
    // A std Mutex: every critical section is a few field reads or writes and
    // never spans an await.
    inner: Mutex<Inner>,
    /// Wakes the health task early after a request saw the connection fail.
    pub(crate) wake: Notify,
}

impl Node {
    /// A node that is not connected yet (state `down`); the health task or
    /// [`Node::connect`] brings it up.
    pub fn new(name: String, client: Client, timeout: Duration) -> Node {
        Node {
            name,
            client,
            timeout,
            // Connecting includes TCP, TLS and the handshake; allow more than
            // one request's worth, but keep it short so a frozen master is
            // noticed quickly. Only the health task waits on it.
            connect_timeout: (timeout * 10)
                .clamp(Duration::from_millis(200), Duration::from_secs(2)),
            inner: Mutex::new(Inner {
                conn: None,
                state: NodeState::Down,
                latency: None,
                last_error: Some("not connected yet".to_string()),
            }),
            wake: Notify::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Poisoning needs a panic while the lock is held; the critical
        // sections cannot panic, so recover the data rather than spread it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn snapshot(&self) -> NodeSnapshot {
        let inner = self.lock();
        NodeSnapshot {
            state: inner.state,
            latency: inner.latency,
            last_error: inner.last_error.clone(),
            connected: inner.conn.is_some(),
        }
    }

    pub fn state(&self) -> NodeState {
        self.lock().state
    }

    /// The node may take part in acquire and extend.
    pub fn is_usable(&self) -> bool {
        let inner = self.lock();
        inner.state == NodeState::Up && inner.conn.is_some()
    }

    pub(crate) fn set_state(&self, state: NodeState) {
        self.lock().state = state;
    }

    fn conn(&self) -> Option<MultiplexedConnection> {
        self.lock().conn.clone()
    }

    /// Opens a fresh connection and loads the scripts. Does not change the
    /// node's state; the health task decides what a new connection means.
    ///
    /// # Errors
    /// When the master cannot be reached or refuses the handshake in time.
    pub async fn connect(&self) -> Result<(), NodeError> {
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
            Ok::<_, RedisError>(conn)
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(mut conn)) => {
                conn.set_response_timeout(self.timeout);
                let mut inner = self.lock();
                inner.conn = Some(conn);
                Ok(())
            }
            Ok(Err(e)) => Err(self.record_error(NodeError::classify(&e))),
            Err(_) => Err(self.record_error(NodeError::Timeout(self.connect_timeout))),
        }
    }

    /// Forgets the connection and marks the node down.
    pub(crate) fn disconnect(&self, why: &NodeError) {
        let mut inner = self.lock();
        inner.conn = None;
        inner.state = NodeState::Down;
        inner.last_error = Some(why.to_string());
    }

    fn record_error(&self, error: NodeError) -> NodeError {
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
    }

    /// Runs one request on the connection, bounded by the node timeout.
    async fn request<T, F, Fut>(&self, op: F) -> Result<T, NodeError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let Some(conn) = self.conn() else {
            return Err(NodeError::NotConnected);
        };
        match tokio::time::timeout(self.timeout, op(conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                let error = match NodeError::classify(&e) {
                    NodeError::Timeout(_) => NodeError::Timeout(self.timeout),
                    other => other,
                };
                Err(self.record_error(error))
            }
            Err(_) => Err(self.record_error(NodeError::Timeout(self.timeout))),
        }
    }

    /// `SET key value NX PX ttl`.
    pub async fn set_nx(&self, key: &str, value: &str, ttl: Duration) -> Vote {
        let result = self
            .request(|mut conn| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms(ttl))
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await;
        match result {
            Ok(Some(_)) => Vote::Granted,
            Ok(None) => Vote::Taken,
            Err(e) => Vote::Failed(e),
        }
    }

    /// Compare-and-delete. `Ok(true)` when this master held the token.
    pub async fn release(&self, key: &str, value: &str) -> Result<bool, NodeError> {
        self.request(|mut conn| async move {
            scripts::RELEASE
                .key(key)
                .arg(value)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }

    /// Compare-and-pexpire. `Ok(true)` when this master held the token.
    pub async fn extend(&self, key: &str, value: &str, ttl: Duration) -> Result<bool, NodeError> {
        self.request(|mut conn| async move {
            scripts::EXTEND
                .key(key)
                .arg(value)
                .arg(ttl_ms(ttl))
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }

    /// `PING`, timed. Used by the health task.
    pub async fn ping(&self) -> Result<Duration, NodeError> {
        let start = Instant::now();
        self.request(|mut conn| async move {
            redis::cmd("PING").query_async::<String>(&mut conn).await
        })
        .await?;
        Ok(start.elapsed())
    }
}

/// Milliseconds for PX and PEXPIRE; never 0, which Redis refuses.
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
