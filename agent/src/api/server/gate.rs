//! What admits a connection, before its first request is read: on a Unix
//! socket, the peer's credentials against the allow lists, its pod when
//! the socket keeps tokens to their pods (`socket.isolate: pod`), then the
//! listener's budget and the uid's share of it; on the metrics port, its
//! budget alone. A refusal is answered with one JSON error and closed
//! within a bounded time, counted, and logged at most once per
//! [`LOG_EVERY`] for each listener and reason.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::UnixStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::descriptors::{Budgets, ADMIN_MAX_CONNECTIONS};
use crate::agent::Agent;
use crate::api::peer::{Allow, Peer, UidShares, UidSlot};
use crate::api::pod;
use crate::api::routes::Surface;
use crate::config::Isolate;
use crate::lock::show_id;
use crate::metrics::Refusal;

/// The test-only switch that points the agent at a fake proc tree for its
/// peers' cgroups.
pub use redlock_testkit::switches::PROC_ROOT as PROC_ROOT_SWITCH;

/// At most one log line per this long for one listener's refusals of one
/// reason, or its failed accepts; the next line counts those not logged.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// What admits connections on one Unix listener.
pub(super) struct Gate {
    pub(super) surface: Surface,
    allow: Allow,
    slots: Arc<Semaphore>,
    max_connections: usize,
    /// The per-uid share; the admin socket has none.
    shares: Option<Arc<UidShares>>,
    /// `socket.isolate`; the admin socket is never isolated.
    isolate: Isolate,
    /// Where peers' cgroups are read: `/proc`, but under
    /// [`PROC_ROOT_SWITCH`].
    proc_root: PathBuf,
    /// Refusals being answered, shared by both Unix sockets.
    rejects: Arc<Semaphore>,
    pub(super) logs: RefusalLogs,
}

/// The slots one admitted connection holds until it ends.
pub(super) struct Slots {
    pub(super) _global: Option<OwnedSemaphorePermit>,
    pub(super) _uid: Option<UidSlot>,
}

/// One [`Throttle`] per refusal reason, and one for failed accepts.
#[derive(Default)]
pub(super) struct RefusalLogs {
    refused: [Throttle; Refusal::ALL.len()],
    pub(super) accept: Throttle,
}

impl RefusalLogs {
    pub(super) fn of(&self, reason: Refusal) -> &Throttle {
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
pub(super) struct Throttle {
    // A std Mutex: a comparison and an increment, never across an await.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// `Some(n)` when a line may be logged now, `n` events after the last
    /// line having gone unlogged; `None` (and counted) otherwise.
    pub(super) fn admit(&self) -> Option<u64> {
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
    pub(super) fn app(agent: &Agent, budgets: &Budgets, rejects: &Arc<Semaphore>) -> Gate {
        let socket = &agent.config().socket;
        Gate {
            surface: Surface::Socket,
            allow: Allow::new(&socket.allow_uids, &socket.allow_gids),
            slots: Arc::new(Semaphore::new(budgets.app)),
            max_connections: budgets.app,
            shares: Some(UidShares::new(budgets.app_per_uid)),
            isolate: socket.isolate,
            proc_root: if socket.isolate == Isolate::Pod {
                proc_root()
            } else {
                PathBuf::from(pod::PROC)
            },
            rejects: Arc::clone(rejects),
            logs: RefusalLogs::default(),
        }
    }

    pub(super) fn admin(agent: &Agent, rejects: &Arc<Semaphore>) -> Gate {
        Gate {
            surface: Surface::Admin,
            allow: Allow::new(&agent.config().admin.allow_uids, &[]),
            slots: Arc::new(Semaphore::new(ADMIN_MAX_CONNECTIONS)),
            max_connections: ADMIN_MAX_CONNECTIONS,
            shares: None,
            isolate: Isolate::None,
            proc_root: PathBuf::from(pod::PROC),
            rejects: Arc::clone(rejects),
            logs: RefusalLogs::default(),
        }
    }

    pub(super) fn listener(&self) -> &'static str {
        match self.surface {
            Surface::Admin => "admin",
            _ => "app",
        }
    }

    /// Checks a new connection; on refusal answers it and returns `None`.
    pub(super) fn admit(
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
        // Under socket.isolate, a connection whose pod (or uid) cannot be
        // told could use nothing this socket is for: a call with a token is
        // served only to the grant's pod, and a grant to an unknown pod
        // could be used by no one. So it is refused here, before its first
        // request, as a peer outside the allow lists is: one JSON answer
        // naming the cause, a count, a log line per period. Operators use
        // the admin socket, which is never isolated.
        let peer = match self.identify(peer, &stream) {
            Ok(peer) => peer,
            Err(why) => {
                return refused(
                    Refusal::Unidentified,
                    stream,
                    "403 Forbidden",
                    "forbidden",
                    why,
                )
            }
        };
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

impl Gate {
    /// `peer` with what `socket.isolate` needs of it (its pod, read now
    /// from its cgroup), or why it cannot be told.
    fn identify(&self, peer: Option<Peer>, stream: &UnixStream) -> Result<Option<Peer>, String> {
        match (self.isolate, peer) {
            (Isolate::None, _) => Ok(peer),
            (isolate, None) => Err(format!(
                "socket.isolate is {}, and this peer's credentials could not be read",
                isolate.as_str()
            )),
            (Isolate::Uid, Some(_)) => Ok(peer),
            (Isolate::Pod, Some(mut known)) => {
                match pod::of_peer(stream, known.pid, &self.proc_root) {
                    Ok(pod) => {
                        known.pod = Some(pod);
                        Ok(Some(known))
                    }
                    Err(why) => Err(format!(
                        "socket.isolate is pod, and the pod of this peer (uid {}, pid {}) cannot be told: {why}",
                        known.uid,
                        show_id(known.pid)
                    )),
                }
            }
        }
    }
}

/// `/proc`, or the directory [`PROC_ROOT_SWITCH`] names.
fn proc_root() -> PathBuf {
    match std::env::var_os(PROC_ROOT_SWITCH) {
        Some(dir) if !dir.is_empty() => {
            tracing::warn!(
                "{PROC_ROOT_SWITCH} is set: peers' pods are read from {}, not /proc; for the \
                 tests only",
                PathBuf::from(&dir).display()
            );
            PathBuf::from(dir)
        }
        _ => PathBuf::from(pod::PROC),
    }
}

/// What admits connections on the metrics port: its budget alone.
pub(super) struct TcpGate {
    /// `None` only under [`super::METRICS_BUDGET_SWITCH`].
    pub(super) slots: Option<Arc<Semaphore>>,
    pub(super) max_connections: usize,
    pub(super) logs: RefusalLogs,
}

/// One JSON error answer that closes the connection (`status` like
/// `"403 Forbidden"`).
pub(super) fn refusal_answer(status: &str, code: &str, message: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
