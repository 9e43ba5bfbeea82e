//! The listeners: the Unix socket the application talks to, the admin
//! socket operators use, and the TCP address for probes and metrics, all
//! served by hyper (HTTP/1.1), all drained gracefully on shutdown. Each
//! connection is one task ([`super::connection`]): a hyper connection while
//! requests come, only the socket while it is idle.
//!
//! Every Unix connection is checked before its first request is read: the
//! peer's credentials against the allow lists ([`super::peer`]), then the
//! connection budgets. A refused connection gets one JSON error answer and
//! is closed; each refusal is logged with the peer's uid and pid and counted
//! in `redlock_connections_refused_total`.

use std::future::Future;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
use crate::metrics::Refusal;

/// Connections the admin socket serves at once. Its own budget, so an
/// application that fills `socket.max_connections` never locks operators out.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

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
}

/// The slots one admitted connection holds until it ends.
struct Slots {
    _global: OwnedSemaphorePermit,
    _uid: Option<UidSlot>,
}

impl Gate {
    fn app(agent: &Agent) -> Gate {
        let socket = &agent.config().socket;
        Gate {
            surface: Surface::Socket,
            allow: Allow::new(&socket.allow_uids, &socket.allow_gids),
            slots: Arc::new(Semaphore::new(socket.max_connections)),
            max_connections: socket.max_connections,
            shares: Some(UidShares::new(socket.max_connections_per_uid)),
        }
    }

    fn admin(agent: &Agent) -> Gate {
        Gate {
            surface: Surface::Admin,
            allow: Allow::new(&agent.config().admin.allow_uids, &[]),
            slots: Arc::new(Semaphore::new(ADMIN_MAX_CONNECTIONS)),
            max_connections: ADMIN_MAX_CONNECTIONS,
            shares: None,
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
            // Forbidden peers are worth an operator's attention; a client
            // over its connection budget could flood the log, so those go
            // to debug (the counter shows them).
            if reason == Refusal::Forbidden {
                tracing::warn!(
                    listener = self.listener(),
                    reason = reason.as_str(),
                    uid = %show_id(uid),
                    pid = %show_id(pid),
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
            reject(stream, status, code, message);
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
                _global: global,
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
/// requests.
pub async fn serve(
    agent: Arc<Agent>,
    socket: SocketListener,
    admin: SocketListener,
    tcp: TcpListener,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Connections {
        tracker: TaskTracker::new(),
        shutdown: CancellationToken::new(),
    };
    let app_gate = Gate::app(&agent);
    let admin_gate = Gate::admin(&agent);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = socket.listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if let Some((stream, peer, slots)) = app_gate.admit(&agent, stream) {
                        spawn_connection(&agent, &connections, stream, Surface::Socket, peer, Some(slots));
                    }
                }
                Err(e) => accept_failed(&e).await,
            },
            accepted = admin.listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if let Some((stream, peer, slots)) = admin_gate.admit(&agent, stream) {
                        spawn_connection(&agent, &connections, stream, Surface::Admin, peer, Some(slots));
                    }
                }
                Err(e) => accept_failed(&e).await,
            },
            // Probes and scrapes have their own small budget, so a full
            // socket never makes the agent look dead to its orchestrator.
            accepted = tcp.accept() => match accepted {
                Ok((stream, _)) => spawn_connection(&agent, &connections, stream, Surface::Metrics, None, None),
                Err(e) => accept_failed(&e).await,
            },
        }
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

/// Accept errors are mostly resource exhaustion (EMFILE); back off briefly
/// instead of spinning.
async fn accept_failed(error: &io::Error) {
    tracing::warn!(error = %error, "accept failed");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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

/// Answers a refused connection with one JSON error (`status` like
/// `"403 Forbidden"`) and closes it, without reading its request.
fn reject(mut stream: UnixStream, status: &'static str, code: &'static str, message: String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::spawn(async move {
        let body = serde_json::json!({"error": {"code": code, "message": message}});
        let body = format!("{body}\n");
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
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
/// `socket.max_connections` is not cut short by a low default.
pub fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
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
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
