//! Binding the listeners: a Unix socket's file, where a stale socket left
//! by a dead agent is replaced and anything else is refused and left
//! alone, and the metrics port.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener, UnixStream};

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
    pub(super) listener: UnixListener,
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
