//! Shutdown triggers: SIGTERM and SIGINT start a drain.

/// Resolves on the first SIGTERM or SIGINT.
///
/// # Panics
/// If the signal handlers cannot be installed, which happens only when the
/// process is out of file descriptors at start.
pub async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install the SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install the SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
