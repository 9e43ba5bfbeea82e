//! The listeners: the Unix socket the application talks to, the admin
//! socket operators use, and the TCP address for probes and metrics, all
//! served by hyper (HTTP/1.1), all drained gracefully on shutdown. Each
//! connection is one task ([`super::connection`]): a hyper connection while
//! requests come, only the socket while it is idle.
//!
//! Every Unix connection is checked before its first request is read: the
//! peer's credentials against the allow lists ([`super::peer`]), then the
//! connection budgets. A refused connection gets one JSON error answer and
//! is closed; each refusal is counted in `redlock_connections_refused_total`
//! and logged with the peer's uid and pid (at most one line per listener and
//! reason every [`LOG_EVERY`], saying how many were not logged).
//!
//! ## Descriptors
//! Every listener has a budget, the metrics port included
//! (`metrics.max_connections`): a connection over it is accepted and closed
//! at once. At start ([`budgets`]) the agent raises its open-files limit to
//! the hard limit and checks that the budgets, the refusals being answered
//! and a reserve for the masters' connections fit in it; when they do not,
//! `socket.max_connections` (and its per-uid share, in proportion) is cut
//! to fit, and an agent whose fixed part does not fit refuses to start. So
//! running out on one listener never starves the others or the masters.
//! Each listener accepts in its own loop: one that fails to accept
//! (EMFILE, ENFILE) backs off on its own, without spinning and without
//! holding up the others.

use std::future::Future;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection::{self, Socket};
use super::peer::{Allow, Peer, UidShares, UidSlot};
use super::routes::Surface;
use crate::agent::Agent;
use crate::config::Config;
use crate::metrics::{Refusal, TCP_LISTENER};

/// Connections the admin socket serves at once. Its own budget, so an
/// application that fills `socket.max_connections` never locks operators out.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Refused Unix connections being answered at once, both sockets together.
/// Each keeps its descriptor for up to two seconds while its answer is
/// written and its request drained; a refusal beyond these is closed with
/// whatever answer fits in the socket's buffer at once.
pub const REJECTS_IN_FLIGHT: usize = 64;

/// Descriptors kept for what is neither a listener's connection nor a
/// master's: standard streams, the runtime's, the listeners themselves, the
/// config and certificate files, name lookups.
pub const RESERVE_BASE: u64 = 64;

/// Descriptors kept per master (per four seeds of a Redis Cluster master,
/// whose connection reaches every shard): its shared connection and the one
/// that replaces it, the release-channel subscription, the readers of
/// listings, lock lookups and the leak scanner, with room to spare.
pub const RESERVE_PER_MASTER: u64 = 16;

/// At most one log line per this long for one listener's refusals of one
/// reason, or its failed accepts; the next line counts those not logged.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The test-only switch that lifts the metrics port's budget, so a control
/// run can show what a flood of connections to it did before the budget.
pub use redlock_testkit::switches::NO_METRICS_BUDGET as METRICS_BUDGET_SWITCH;

/// How many connections each listener may hold, fitted to the open-files
/// limit (see the module's "Descriptors").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// `socket.max_connections`, or less to fit the limit.
    pub app: usize,
    /// `socket.max_connections_per_uid`, cut in proportion with `app`.
    pub app_per_uid: usize,
    /// `metrics.max_connections`; `None` only under [`METRICS_BUDGET_SWITCH`].
    pub metrics: Option<usize>,
    /// Descriptors kept for the masters and the agent itself.
    pub reserve: u64,
    /// The open-files limit fitted to; `None` when there is none.
    pub limit: Option<u64>,
}

/// The open-files limit cannot hold even the fixed part of the budgets.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the open-files limit (RLIMIT_NOFILE) is {limit}, too low: the admin socket ({ADMIN_MAX_CONNECTIONS}), \
     metrics.max_connections ({metrics}), refused connections being answered ({REJECTS_IN_FLIGHT}) and a reserve \
     for the masters ({reserve}, {masters} configured) need {fixed}, leaving nothing for socket.max_connections; raise the hard \
     limit (ulimit -Hn, LimitNOFILE= in systemd) or lower metrics.max_connections"
)]
pub struct DescriptorError {
    pub limit: u64,
    pub metrics: usize,
    pub masters: usize,
    pub reserve: u64,
    pub fixed: u64,
}

impl Budgets {
    /// The budgets of `config` within `limit` open files (`None`: no limit).
    /// Pure: [`budgets`] reads the limit and logs what it cut.
    ///
    /// # Errors
    /// When the admin socket's and the metrics port's budgets, the refusals
    /// in flight and the reserve leave no room for one connection on the
    /// application socket.
    pub fn fit(config: &Config, limit: Option<u64>) -> Result<Budgets, DescriptorError> {
        let socket = &config.socket;
        let reserve = reserve(config);
        let metrics = config.metrics.max_connections;
        let as_budget = |limit: u64| usize::try_from(limit).unwrap_or(usize::MAX);
        let app = match limit {
            None => socket.max_connections,
            Some(limit) => {
                let fixed = (ADMIN_MAX_CONNECTIONS + metrics + REJECTS_IN_FLIGHT) as u64 + reserve;
                if limit <= fixed {
                    return Err(DescriptorError {
                        limit,
                        metrics,
                        masters: config.masters.len(),
                        reserve,
                        fixed,
                    });
                }
                socket.max_connections.min(as_budget(limit - fixed))
            }
        };
        // The share keeps its proportion of the whole: a cut budget still
        // leaves room for more than one uid.
        let app_per_uid = if app == socket.max_connections {
            socket.max_connections_per_uid
        } else {
            let scaled = (socket.max_connections_per_uid as u128 * app as u128)
                .div_ceil(socket.max_connections.max(1) as u128);
            as_budget(u64::try_from(scaled).unwrap_or(u64::MAX)).clamp(1, app)
        };
        Ok(Budgets {
            app,
            app_per_uid,
            metrics: Some(metrics),
            reserve,
            limit,
        })
    }
}

/// Descriptors kept for the masters and the agent itself.
fn reserve(config: &Config) -> u64 {
    let units: u64 = config
        .masters
        .iter()
        .map(|m| {
            if m.cluster.is_empty() {
                1
            } else {
                m.cluster.len().div_ceil(4).max(1) as u64
            }
        })
        .sum();
    RESERVE_BASE + RESERVE_PER_MASTER * units
}

/// Raises the open-files limit and fits the listeners' budgets in it,
/// logging what had to be cut.
///
/// # Errors
/// When the limit cannot hold the fixed part (see [`Budgets::fit`]).
pub fn budgets(config: &Config) -> Result<Budgets, DescriptorError> {
    let limit = raise_open_files_limit();
    let mut budgets = Budgets::fit(config, limit)?;
    if budgets.app < config.socket.max_connections {
        tracing::warn!(
            limit = limit.unwrap_or(0),
            max_connections = budgets.app,
            max_connections_per_uid = budgets.app_per_uid,
            "the open-files limit (RLIMIT_NOFILE) cannot hold socket.max_connections ({}) beside the admin \
             socket, metrics.max_connections and a reserve of {} for the masters: the socket serves {} \
             connections, {} per uid; raise the hard limit (ulimit -Hn, LimitNOFILE= in systemd) or lower \
             socket.max_connections",
            config.socket.max_connections,
            budgets.reserve,
            budgets.app,
            budgets.app_per_uid
        );
    }
    if std::env::var_os(METRICS_BUDGET_SWITCH).is_some_and(|v| v == "1") {
        tracing::warn!(
            "{METRICS_BUDGET_SWITCH} is set: the metrics port takes every connection it is offered, \
             and a flood of them can starve the sockets and the masters; for control runs of the tests only"
        );
        budgets.metrics = None;
    }
    Ok(budgets)
}

/// Why a listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another agent is already listening on {0}; stop it or choose another socket.path")]
    InUse(PathBuf),
    /// Something other than a socket is at `socket.path`; the agent never
    /// removes it, since it may be anyone's file.
    #[error("socket.path {}: {what} is there, not a socket; remove it or choose another path", path.display())]
    Occupied { path: PathBuf, what: &'static str },
    /// A socket file is there, but whether anyone listens on it could not
    /// be told (for example, permission denied).
    #[error("socket.path {}: cannot tell whether another agent listens on the socket there ({source}); remove it or choose another path", path.display())]
    Unprobed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot bind the socket {path}: {source}")]
    Socket {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {addr} (metrics.listen): {source}")]
    Tcp {
        addr: std::net::SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// A bound Unix socket that removes its file when dropped.
#[derive(Debug)]
pub struct SocketListener {
    listener: UnixListener,
    path: PathBuf,
}

impl SocketListener {
    /// Binds `path` with file mode `mode`. A stale socket file left by a dead
    /// agent is replaced; a live one is refused, and so is anything that is
    /// not a socket (see [`clear_stale_socket`]).
    ///
    /// # Errors
    /// When another agent answers on `path`, something other than a socket
    /// is there, or binding or chmod fails.
    pub async fn bind(path: &Path, mode: u32) -> Result<SocketListener, BindError> {
        let socket_err = |source| BindError::Socket {
            path: path.to_path_buf(),
            source,
        };
        clear_stale_socket(path).await?;
        let listener = UnixListener::bind(path).map_err(socket_err)?;
        let bound = SocketListener {
            listener,
            path: path.to_path_buf(),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(socket_err)?;
        Ok(bound)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What is at a path before the agent binds its socket there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Occupant {
    Nothing,
    Socket,
    /// Anything else, described for the error message.
    Other(&'static str),
}

/// Looks at `path` itself, not through a symbolic link.
fn occupant(path: &Path) -> io::Result<Occupant> {
    use std::os::unix::fs::FileTypeExt;
    let kind = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta.file_type(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Occupant::Nothing),
        Err(e) => return Err(e),
    };
    Ok(if kind.is_socket() {
        Occupant::Socket
    } else if kind.is_symlink() {
        Occupant::Other("a symbolic link")
    } else if kind.is_dir() {
        Occupant::Other("a directory")
    } else if kind.is_file() {
        Occupant::Other("a regular file")
    } else if kind.is_fifo() {
        Occupant::Other("a FIFO")
    } else if kind.is_block_device() || kind.is_char_device() {
        Occupant::Other("a device file")
    } else {
        Occupant::Other("something")
    })
}

/// Makes `path` free for `bind`: removes a socket file nobody answers on
/// (left by an agent that died), and refuses everything else: a socket
/// another agent listens on, and any other kind of file, directory or
/// symbolic link (dangling or not), which is left alone.
///
/// # Errors
/// [`BindError::InUse`], [`BindError::Occupied`], [`BindError::Unprobed`],
/// or [`BindError::Socket`] when the path cannot be examined or removed.
pub async fn clear_stale_socket(path: &Path) -> Result<(), BindError> {
    let socket_err = |source| BindError::Socket {
        path: path.to_path_buf(),
        source,
    };
    match occupant(path).map_err(socket_err)? {
        Occupant::Nothing => Ok(()),
        Occupant::Other(what) => Err(BindError::Occupied {
            path: path.to_path_buf(),
            what,
        }),
        Occupant::Socket => match UnixStream::connect(path).await {
            Ok(_) => Err(BindError::InUse(path.to_path_buf())),
            // Refused: a socket file with no listener behind it.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "replacing a stale socket file");
                std::fs::remove_file(path).map_err(socket_err)
            }
            Err(source) => Err(BindError::Unprobed {
                path: path.to_path_buf(),
                source,
            }),
        },
    }
}

impl Drop for SocketListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds the metrics address.
///
/// # Errors
/// When the address is taken or not local.
pub async fn bind_tcp(addr: std::net::SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError::Tcp { addr, source })
}

/// What admits connections on one Unix listener.
struct Gate {
    surface: Surface,
    allow: Allow,
    slots: Arc<Semaphore>,
    max_connections: usize,
    /// The per-uid share; the admin socket has none.
    shares: Option<Arc<UidShares>>,
    /// Refusals being answered, shared by both Unix sockets.
    rejects: Arc<Semaphore>,
    logs: RefusalLogs,
}

/// The slots one admitted connection holds until it ends.
struct Slots {
    _global: Option<OwnedSemaphorePermit>,
    _uid: Option<UidSlot>,
}

/// One [`Throttle`] per refusal reason, and one for failed accepts.
#[derive(Default)]
struct RefusalLogs {
    refused: [Throttle; Refusal::ALL.len()],
    accept: Throttle,
}

impl RefusalLogs {
    fn of(&self, reason: Refusal) -> &Throttle {
        let index = Refusal::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or_default();
        &self.refused[index]
    }
}

/// At most one log line per [`LOG_EVERY`] for one kind of event, so a flood
/// of refusals or failed accepts cannot flood the log; the events between
/// two lines are counted and the second says how many.
#[derive(Debug, Default)]
struct Throttle {
    // A std Mutex: a comparison and an increment, never across an await.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// `Some(n)` when a line may be logged now, `n` events after the last
    /// line having gone unlogged; `None` (and counted) otherwise.
    fn admit(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match state.0 {
            Some(last) if now.duration_since(last) < LOG_EVERY => {
                state.1 += 1;
                None
            }
            _ => {
                let unlogged = std::mem::take(&mut state.1);
                state.0 = Some(now);
                Some(unlogged)
            }
        }
    }
}

impl Gate {
    fn app(agent: &Agent, budgets: &Budgets, rejects: &Arc<Semaphore>) -> Gate {
        let socket = &agent.config().socket;
        Gate {
            surface: Surface::Socket,
            allow: Allow::new(&socket.allow_uids, &socket.allow_gids),
            slots: Arc::new(Semaphore::new(budgets.app)),
            max_connections: budgets.app,
            shares: Some(UidShares::new(budgets.app_per_uid)),
            rejects: Arc::clone(rejects),
            logs: RefusalLogs::default(),
        }
    }

    fn admin(agent: &Agent, rejects: &Arc<Semaphore>) -> Gate {
        Gate {
            surface: Surface::Admin,
            allow: Allow::new(&agent.config().admin.allow_uids, &[]),
            slots: Arc::new(Semaphore::new(ADMIN_MAX_CONNECTIONS)),
            max_connections: ADMIN_MAX_CONNECTIONS,
            shares: None,
            rejects: Arc::clone(rejects),
            logs: RefusalLogs::default(),
        }
    }

    fn listener(&self) -> &'static str {
        match self.surface {
            Surface::Admin => "admin",
            _ => "app",
        }
    }

    /// Checks a new connection; on refusal answers it and returns `None`.
    fn admit(
        &self,
        agent: &Agent,
        stream: UnixStream,
    ) -> Option<(UnixStream, Option<Peer>, Slots)> {
        let peer = match Peer::of(&stream) {
            Ok(peer) => Some(peer),
            Err(e) => {
                tracing::warn!(listener = self.listener(), error = %e, "cannot read the peer's credentials");
                None
            }
        };
        let (uid, pid) = (peer.map(|p| p.uid), peer.and_then(|p| p.pid));
        let refused = |reason: Refusal,
                       stream: UnixStream,
                       status: &'static str,
                       code: &'static str,
                       message: String| {
            // Worth an operator's attention, but a peer refused in a loop
            // must not flood the log: one line per reason and LOG_EVERY,
            // the rest at debug (the counter has them all).
            if let Some(unlogged) = self.logs.of(reason).admit() {
                tracing::warn!(
                    listener = self.listener(),
                    reason = reason.as_str(),
                    uid = %show_id(uid),
                    pid = %show_id(pid),
                    unlogged,
                    "connection refused: {message}"
                );
            } else {
                tracing::debug!(
                    listener = self.listener(),
                    reason = reason.as_str(),
                    uid = %show_id(uid),
                    pid = %show_id(pid),
                    "connection refused: {message}"
                );
            }
            agent
                .metrics()
                .connections_refused
                .with_label_values(&[self.listener(), reason.as_str()])
                .inc();
            reject(stream, &self.rejects, status, code, message);
            None
        };
        if !self.allow.admits(peer.as_ref()) {
            let setting = match self.surface {
                Surface::Admin => "admin.allow_uids",
                _ => "socket.allow_uids and socket.allow_gids",
            };
            let who = peer.map_or_else(
                || "a peer whose credentials are unknown".to_string(),
                |p| format!("uid {} (gid {})", p.uid, p.gid),
            );
            return refused(
                Refusal::Forbidden,
                stream,
                "403 Forbidden",
                "forbidden",
                format!("{who} may not use this socket ({setting})"),
            );
        }
        let Ok(global) = Arc::clone(&self.slots).try_acquire_owned() else {
            let setting = match self.surface {
                Surface::Admin => "the admin socket's limit",
                _ => "socket.max_connections",
            };
            return refused(
                Refusal::MaxConnections,
                stream,
                "503 Service Unavailable",
                "too_many_connections",
                format!(
                    "this socket serves at most {} connections ({setting})",
                    self.max_connections
                ),
            );
        };
        let uid_slot = match (&self.shares, peer) {
            (Some(shares), Some(peer)) => match shares.try_take(peer.uid) {
                Some(slot) => Some(slot),
                None => {
                    return refused(
                        Refusal::MaxConnectionsPerUid,
                        stream,
                        "503 Service Unavailable",
                        "too_many_connections",
                        format!(
                            "uid {} already has {} connections open, the most one uid may have (socket.max_connections_per_uid)",
                            peer.uid,
                            shares.limit()
                        ),
                    )
                }
            },
            _ => None,
        };
        Some((
            stream,
            peer,
            Slots {
                _global: Some(global),
                _uid: uid_slot,
            },
        ))
    }
}

/// A uid or pid for the log; `-` when the kernel did not say.
fn show_id(id: Option<u32>) -> String {
    id.map_or_else(|| "-".to_string(), |id| id.to_string())
}

/// Serves the listeners until `shutdown` resolves, then stops accepting
/// and waits up to `shutdown.grace` (from the config) for in-flight
/// requests. `budgets` come from [`budgets`].
pub async fn serve(
    agent: Arc<Agent>,
    socket: SocketListener,
    admin: SocketListener,
    tcp: TcpListener,
    budgets: Budgets,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Connections {
        tracker: TaskTracker::new(),
        shutdown: CancellationToken::new(),
    };
    let rejects = Arc::new(Semaphore::new(REJECTS_IN_FLIGHT));
    let app_gate = Gate::app(&agent, &budgets, &rejects);
    let admin_gate = Gate::admin(&agent, &rejects);
    // Probes and scrapes have their own budget, so a full socket never
    // makes the agent look dead to its orchestrator, and a flood of TCP
    // connections never takes the socket's or the masters' descriptors.
    let metrics_gate = TcpGate {
        slots: budgets.metrics.map(|n| Arc::new(Semaphore::new(n))),
        max_connections: budgets.metrics.unwrap_or(0),
        logs: RefusalLogs::default(),
    };
    // Each listener in its own loop: one backing off after a failed accept
    // never holds up the others.
    tokio::select! {
        () = shutdown => {}
        () = accept_unix(&agent, &connections, &socket, &app_gate) => {}
        () = accept_unix(&agent, &connections, &admin, &admin_gate) => {}
        () = accept_tcp(&agent, &connections, &tcp, &metrics_gate) => {}
    }
    drop(socket);
    drop(admin);
    drop(tcp);
    let grace = agent.config().shutdown.grace;
    tracing::info!(connections = connections.tracker.len(), ?grace, "draining");
    connections.tracker.close();
    connections.shutdown.cancel();
    if tokio::time::timeout(grace, connections.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "grace period over; closing the remaining connections"
        );
    }
}

/// Accepts on one Unix socket forever, admitting each connection through
/// `gate`.
async fn accept_unix(
    agent: &Arc<Agent>,
    connections: &Connections,
    listener: &SocketListener,
    gate: &Gate,
) {
    let mut pause = Pause::default();
    loop {
        match listener.listener.accept().await {
            Ok((stream, _)) => {
                pause.reset();
                if let Some((stream, peer, slots)) = gate.admit(agent, stream) {
                    spawn_connection(agent, connections, stream, gate.surface, peer, Some(slots));
                }
            }
            Err(e) => accept_failed(gate.listener(), &e, &gate.logs.accept, &mut pause).await,
        }
    }
}

/// What admits connections on the metrics port: its budget alone.
struct TcpGate {
    /// `None` only under [`METRICS_BUDGET_SWITCH`].
    slots: Option<Arc<Semaphore>>,
    max_connections: usize,
    logs: RefusalLogs,
}

/// Accepts on the metrics port forever; a connection over
/// `metrics.max_connections` is closed at once, after a 503 if the
/// socket's buffer takes it without waiting.
async fn accept_tcp(
    agent: &Arc<Agent>,
    connections: &Connections,
    listener: &TcpListener,
    gate: &TcpGate,
) {
    let mut pause = Pause::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                accept_failed(TCP_LISTENER, &e, &gate.logs.accept, &mut pause).await;
                continue;
            }
        };
        pause.reset();
        let slot = match &gate.slots {
            None => None,
            Some(slots) => match Arc::clone(slots).try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(_) => {
                    let reason = Refusal::MaxConnections;
                    let message = format!(
                        "this port serves at most {} connections (metrics.max_connections)",
                        gate.max_connections
                    );
                    if let Some(unlogged) = gate.logs.of(reason).admit() {
                        tracing::warn!(listener = TCP_LISTENER, reason = reason.as_str(), peer = %peer, unlogged, "connection refused: {message}");
                    } else {
                        tracing::debug!(listener = TCP_LISTENER, reason = reason.as_str(), peer = %peer, "connection refused: {message}");
                    }
                    agent
                        .metrics()
                        .connections_refused
                        .with_label_values(&[TCP_LISTENER, reason.as_str()])
                        .inc();
                    let answer =
                        refusal_answer("503 Service Unavailable", "too_many_connections", &message);
                    // Never waits: the descriptor is closed now, whatever
                    // part of the answer did not fit.
                    let _ = stream.try_write(answer.as_bytes());
                    drop(stream);
                    continue;
                }
            },
        };
        let slots = Slots {
            _global: slot,
            _uid: None,
        };
        spawn_connection(
            agent,
            connections,
            stream,
            Surface::Metrics,
            None,
            Some(slots),
        );
    }
}

/// The wait before a listener accepts again after a failed accept: from
/// [`Pause::FIRST`], doubling to [`Pause::LONGEST`], back to the first
/// after a connection is accepted.
#[derive(Debug)]
struct Pause(Duration);

impl Pause {
    const FIRST: Duration = Duration::from_millis(10);
    const LONGEST: Duration = Duration::from_millis(500);

    fn reset(&mut self) {
        self.0 = Pause::FIRST;
    }

    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Pause::LONGEST);
        now
    }
}

impl Default for Pause {
    fn default() -> Pause {
        Pause(Pause::FIRST)
    }
}

/// Whether a failed accept concerns only the connection it would have
/// returned (the listener can accept the next one at once).
fn only_that_connection(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ECONNABORTED | libc::ECONNRESET | libc::EPROTO | libc::EPERM | libc::EINTR)
    )
}

/// After a failed accept: a connection's own failure is skipped; anything
/// else (EMFILE, ENFILE, ENOBUFS, ENOMEM: out of descriptors or memory)
/// pauses this listener alone, longer while it keeps failing, so it never
/// spins. Logged at most once per [`LOG_EVERY`] per listener.
async fn accept_failed(
    listener: &'static str,
    error: &io::Error,
    log: &Throttle,
    pause: &mut Pause,
) {
    if only_that_connection(error) {
        tracing::debug!(listener, error = %error, "accept failed for one connection");
        return;
    }
    let wait = pause.next();
    if let Some(unlogged) = log.admit() {
        tracing::warn!(
            listener,
            error = %error,
            unlogged,
            ?wait,
            "accept failed; pausing this listener"
        );
    }
    tokio::time::sleep(wait).await;
}

fn spawn_connection<S: Socket>(
    agent: &Arc<Agent>,
    connections: &Connections,
    stream: S,
    surface: Surface,
    peer: Option<Peer>,
    slot: Option<Slots>,
) {
    let agent = Arc::clone(agent);
    let timeout = agent.config().socket.request_timeout;
    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(timeout);
    let shutdown = connections.shutdown.clone();
    connections.tracker.spawn(async move {
        connection::serve(agent, builder, timeout, stream, surface, peer, shutdown).await;
        drop(slot);
    });
}

/// The open connections: every connection's task, and the signal that
/// starts their graceful shutdown.
struct Connections {
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

/// One JSON error answer that closes the connection (`status` like
/// `"403 Forbidden"`).
fn refusal_answer(status: &str, code: &str, message: &str) -> String {
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    let body = format!("{body}\n");
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Answers a refused connection with one JSON error (`status` like
/// `"403 Forbidden"`) and closes it, without reading its request. Holds a
/// slot of `rejects` while it does; with none left, the connection is
/// closed at once with what of the answer its buffer takes without waiting.
fn reject(
    mut stream: UnixStream,
    rejects: &Arc<Semaphore>,
    status: &'static str,
    code: &'static str,
    message: String,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let response = refusal_answer(status, code, &message);
    let Ok(slot) = Arc::clone(rejects).try_acquire_owned() else {
        let _ = stream.try_write(response.as_bytes());
        return;
    };
    tokio::spawn(async move {
        let _slot = slot;
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            stream.write_all(response.as_bytes()),
        )
        .await;
        let _ = stream.shutdown().await;
        // Closing with the request unread would reset the connection and
        // could lose the answer on its way; read (and drop) what the client
        // sends until it closes, briefly and boundedly.
        let drain = async {
            let mut buf = [0u8; 4096];
            let mut left = REJECT_DRAIN_BYTES;
            while left > 0 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
    });
}

/// Most bytes of a refused connection's request read before closing it.
const REJECT_DRAIN_BYTES: usize = 64 * 1024;

/// Raises the soft limit on open files to the hard limit, so
/// `socket.max_connections` is not cut short by a low default, and returns
/// the soft limit now in force (`None`: unlimited, or unknown).
pub fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                tracing::debug!(
                    from = limit.rlim_cur,
                    to = limit.rlim_max,
                    "raised the open files limit"
                );
                limit.rlim_cur = limit.rlim_max;
            }
        }
    }
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let yaml = format!(
            "masters:\n  - {{name: r1, url: \"redis://127.0.0.1:6379\"}}\n  - {{name: r2, url: \"redis://127.0.0.1:6380\"}}\n  - {{name: r3, url: \"redis://127.0.0.1:6381\"}}\n{extra}"
        );
        Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    /// With room, the budgets are the config's; without, the socket's (and
    /// its per-uid share, in proportion) are cut so that every budget and
    /// the reserve fit; below the fixed part, the agent refuses to start.
    #[test]
    fn budgets_fit_the_open_files_limit() {
        let defaults = config("");
        let three = RESERVE_BASE + 3 * RESERVE_PER_MASTER;
        let roomy = Budgets::fit(&defaults, None).unwrap();
        assert_eq!(
            roomy,
            Budgets {
                app: 16_384,
                app_per_uid: 12_288,
                metrics: Some(64),
                reserve: three,
                limit: None,
            }
        );
        assert_eq!(Budgets::fit(&defaults, Some(1 << 20)).unwrap().app, 16_384);

        let fixed = (ADMIN_MAX_CONNECTIONS + 64 + REJECTS_IN_FLIGHT) as u64 + three;
        let tight = Budgets::fit(&defaults, Some(1024)).unwrap();
        assert_eq!(tight.app as u64, 1024 - fixed);
        assert_eq!(tight.app, 720);
        assert_eq!(tight.app_per_uid, 540, "three quarters, as configured");
        assert_eq!(tight.metrics, Some(64));
        let sum = (tight.app + ADMIN_MAX_CONNECTIONS + 64 + REJECTS_IN_FLIGHT) as u64 + three;
        assert!(sum <= 1024, "{sum}");

        let err = Budgets::fit(&defaults, Some(fixed)).unwrap_err();
        assert_eq!(err.fixed, fixed);
        let text = err.to_string();
        assert!(
            text.starts_with("the open-files limit (RLIMIT_NOFILE) is 304, too low"),
            "{text}"
        );
        assert!(text.contains("metrics.max_connections (64)"), "{text}");
        assert_eq!(Budgets::fit(&defaults, Some(fixed + 1)).unwrap().app, 1);

        // A smaller metrics budget leaves more to the socket; a socket
        // that fits is left as configured.
        let small = config("metrics: {max_connections: 4}\nsocket: {max_connections: 100, max_connections_per_uid: 100}\n");
        let fitted = Budgets::fit(&small, Some(1024)).unwrap();
        assert_eq!(
            (fitted.app, fitted.app_per_uid, fitted.metrics),
            (100, 100, Some(4))
        );
        let cut = Budgets::fit(&small, Some(fixed - 60 + 10)).unwrap();
        assert_eq!((cut.app, cut.app_per_uid), (10, 10));

        // A cluster master reserves for its shards too.
        let cluster = Config::from_yaml(
            "masters:\n  - {name: c1, cluster: [\"redis://127.0.0.1:7001\", \"redis://127.0.0.1:7002\", \"redis://127.0.0.1:7003\", \"redis://127.0.0.1:7004\", \"redis://127.0.0.1:7005\"]}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reserve(&cluster), RESERVE_BASE + 2 * RESERVE_PER_MASTER);
    }

    #[test]
    fn a_throttle_logs_once_per_period_and_counts_the_rest() {
        let throttle = Throttle::default();
        assert_eq!(throttle.admit(), Some(0));
        assert_eq!(throttle.admit(), None);
        assert_eq!(throttle.admit(), None);
        // As if the period had passed.
        throttle.state.lock().unwrap().0 = Some(Instant::now() - LOG_EVERY);
        assert_eq!(throttle.admit(), Some(2));
        assert_eq!(throttle.admit(), None);
    }

    #[test]
    fn a_failing_listener_pauses_longer_up_to_a_bound() {
        let mut pause = Pause::default();
        let waits: Vec<_> = (0..8).map(|_| pause.next()).collect();
        assert_eq!(waits[0], Pause::FIRST);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(*waits.last().unwrap(), Pause::LONGEST);
        pause.reset();
        assert_eq!(pause.next(), Pause::FIRST);
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let aborted = io::Error::from_raw_os_error(libc::ECONNABORTED);
        assert!(!only_that_connection(&emfile));
        assert!(only_that_connection(&aborted));
    }

    #[tokio::test]
    async fn only_a_socket_nobody_answers_on_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);

        assert_eq!(occupant(&path("none")).unwrap(), Occupant::Nothing);
        clear_stale_socket(&path("none")).await.unwrap();

        std::fs::write(path("file"), "data").unwrap();
        std::fs::create_dir(path("dir")).unwrap();
        std::os::unix::fs::symlink(path("gone"), path("dangling")).unwrap();
        std::os::unix::fs::symlink(path("file"), path("link")).unwrap();
        for (name, what) in [
            ("file", "a regular file"),
            ("dir", "a directory"),
            ("dangling", "a symbolic link"),
            ("link", "a symbolic link"),
        ] {
            assert_eq!(occupant(&path(name)).unwrap(), Occupant::Other(what));
            let err = clear_stale_socket(&path(name)).await.unwrap_err();
            assert!(
                matches!(err, BindError::Occupied { what: w, .. } if w == what),
                "{name}: {err}"
            );
            assert!(
                err.to_string().ends_with(&format!(
                    ": {what} is there, not a socket; remove it or choose another path"
                )),
                "{err}"
            );
            assert!(
                std::fs::symlink_metadata(path(name)).is_ok(),
                "{name} is left alone"
            );
        }
        assert_eq!(std::fs::read_to_string(path("file")).unwrap(), "data");

        // A live socket is refused and kept; a stale one is removed.
        let live = std::os::unix::net::UnixListener::bind(path("live.sock")).unwrap();
        let err = clear_stale_socket(&path("live.sock")).await.unwrap_err();
        assert!(matches!(err, BindError::InUse(_)), "{err}");
        assert!(path("live.sock").exists());
        drop(live);
        assert_eq!(occupant(&path("live.sock")).unwrap(), Occupant::Socket);
        clear_stale_socket(&path("live.sock")).await.unwrap();
        assert_eq!(occupant(&path("live.sock")).unwrap(), Occupant::Nothing);
    }
}
