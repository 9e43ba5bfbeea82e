//! The listeners: the Unix socket the application talks to and the TCP
//! address for probes and metrics, both served by hyper (HTTP/1.1), both
//! drained gracefully on shutdown.

use std::future::Future;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::routes::{self, Surface};
use crate::agent::Agent;

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

/// Serves both listeners until `shutdown` resolves, then stops accepting
/// and waits up to `grace` for in-flight requests.
pub async fn serve(
    agent: Arc<Agent>,
    socket: SocketListener,
    tcp: TcpListener,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(agent.config().socket.max_connections));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = socket.listener.accept() => match accepted {
                Ok((stream, _)) => match Arc::clone(&slots).try_acquire_owned() {
                    Ok(slot) => spawn_connection(&agent, &graceful, stream, Surface::Socket, slot),
                    Err(_) => refuse(stream, agent.config().socket.max_connections),
                },
                Err(e) => accept_failed(&e).await,
            },
            // Probes and scrapes have their own small budget, so a full
            // socket never makes the agent look dead to its orchestrator.
            accepted = tcp.accept() => match accepted {
                Ok((stream, _)) => spawn_connection(&agent, &graceful, stream, Surface::Metrics, None),
                Err(e) => accept_failed(&e).await,
            },
        }
    }
    drop(socket);
    drop(tcp);
    let grace = agent.config().shutdown.grace;
    tracing::info!(connections = graceful.count(), ?grace, "draining");
    if tokio::time::timeout(grace, graceful.shutdown())
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

fn spawn_connection<S>(
    agent: &Arc<Agent>,
    graceful: &GracefulShutdown,
    stream: S,
    surface: Surface,
    slot: impl Into<Option<OwnedSemaphorePermit>>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let slot = slot.into();
    let agent = Arc::clone(agent);
    let timeout = agent.config().socket.request_timeout;
    let service = service_fn(move |request| routes::handle(Arc::clone(&agent), surface, request));
    let connection = http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .serve_connection(TokioIo::new(stream), service);
    let connection = graceful.watch(connection);
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "connection ended with an error");
        }
        drop(slot);
    });
}

/// Answers a connection over `socket.max_connections` with a 503 and
/// closes it, without reading its request.
fn refuse(mut stream: tokio::net::UnixStream, limit: usize) {
    use tokio::io::AsyncWriteExt;
    tokio::spawn(async move {
        let body = format!(
            "{{\"error\":{{\"code\":\"too_many_connections\",\"message\":\"this agent serves at most {limit} connections (socket.max_connections)\"}}}}\n"
        );
        let response = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            stream.write_all(response.as_bytes()),
        )
        .await;
        let _ = stream.shutdown().await;
    });
    tracing::debug!(limit, "connection refused: socket.max_connections reached");
}

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
