//! Shutdown triggers: SIGTERM and SIGINT start a drain.

use std::future::Future;

/// Installs the SIGTERM and SIGINT handlers at once and returns what
/// resolves on the first of them. Call it before binding the listeners: a
/// signal that comes as soon as the socket exists then starts a drain
/// instead of killing the process (the default action while no handler is
/// installed).
///
/// # Panics
/// If the signal handlers cannot be installed, which happens only when the
/// process is out of file descriptors at start, or outside a tokio runtime.
pub fn signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install the SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install the SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    }
}
