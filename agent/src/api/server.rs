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
    /// agent is replaced; a live one is refused.
    ///
    /// # Errors
    /// When another agent answers on `path`, or binding or chmod fails.
    pub async fn bind(path: &Path, mode: u32) -> Result<SocketListener, BindError> {
        let socket_err = |source| BindError::Socket {
            path: path.to_path_buf(),
            source,
        };
        if path.exists() {
            if UnixStream::connect(path).await.is_ok() {
                return Err(BindError::InUse(path.to_path_buf()));
            }
            tracing::info!(path = %path.display(), "replacing a stale socket file");
            std::fs::remove_file(path).map_err(socket_err)?;
        }
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
