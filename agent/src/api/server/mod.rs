//! The listeners: the Unix socket the application talks to, the admin
//! socket operators use, and the TCP address for probes and metrics, all
//! served by hyper (HTTP/1.1), all drained gracefully on shutdown. Each
//! connection is one task ([`super::connection`]): a hyper connection while
//! requests come, only the socket while it is idle.
//!
//! Every Unix connection is checked before its first request is read: the
//! peer's credentials against the allow lists ([`super::peer`]), its pod
//! when the socket keeps tokens to their pods ([`super::pod`]), then the
//! connection budgets. A refused connection gets one JSON error answer and
//! is closed; each refusal is counted in `redlock_connections_refused_total`
//! and logged with the peer's uid and pid (at most one line per listener and
//! reason every [`LOG_EVERY`], saying how many were not logged).
//!
//! Each listener accepts in its own loop: one that fails to accept
//! (EMFILE, ENFILE) backs off on its own, without spinning and without
//! holding up the others.
//!
//! - [`bind`]: the sockets' files (a stale one replaced, anything else at
//!   the path refused) and the metrics port, bound.
//! - [`gate`]: who is admitted on each listener, and the refusals: answered
//!   without holding a descriptor long, logged at most once per
//!   [`LOG_EVERY`].
//! - [`descriptors`]: the open-files limit raised, and every listener's
//!   budget fitted in it with a reserve for the masters.

pub mod bind;
pub mod descriptors;
pub mod gate;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection::{self, Socket};
use super::peer::Peer;
use super::routes::Surface;
use crate::agent::Agent;
use crate::metrics::{Refusal, TCP_LISTENER};

pub use bind::{bind_tcp, clear_stale_socket, BindError, SocketListener};
pub use descriptors::{
    budgets, raise_open_files_limit, Budgets, DescriptorError, ADMIN_MAX_CONNECTIONS,
    METRICS_BUDGET_SWITCH, REJECTS_IN_FLIGHT, RESERVE_BASE, RESERVE_PER_MASTER,
};
pub use gate::LOG_EVERY;

use gate::{refusal_answer, Gate, RefusalLogs, Slots, TcpGate, Throttle};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
