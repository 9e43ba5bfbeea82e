//! [`LockGuard`]: a lock that renews itself (a hold underneath), tells
//! when it is lost, and is released when dropped.
//!
//! ## Behavior
//! - A background task reads the hold's events and moves the validity
//!   deadline on every `renewed`.
//! - The lock counts as lost, once and for good, when the agent says
//!   `lost`, when the hold's connection ends without a notice, or when no
//!   renewal arrived by a twentieth of the last validity before its end, on
//!   this process's clock (the agent or its host is frozen). The agent
//!   sends `lost` at least a tenth of the TTL before the end, so its notice
//!   comes first whenever it is alive.
//! - Dropping the guard closes the hold's connection: the agent releases
//!   the lock on every master. [`LockGuard::release`] releases through the
//!   API first, to learn whether a quorum still held it.

use std::future::Future;
use std::time::Duration;

use redlock_wire::HoldEvent;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::hold::Hold;
use crate::transport::Closer;
use crate::{Client, Error};

/// Why a [`LockGuard`] stopped holding its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The agent said `lost`; the reason is one of `renew_failed`,
    /// `no_quorum`, `max_hold`, `shutdown`, `force_released` or
    /// `node_lost`.
    Agent(String),
    /// The hold's connection ended or failed without a `lost` notice: the
    /// agent stopped or crashed.
    Disconnected(String),
    /// No renewal arrived before the end of the last validity (less a
    /// twentieth of it), counted on this process's clock.
    Expired,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostReason::Agent(reason) => write!(f, "the agent said lost ({reason})"),
            LostReason::Disconnected(why) => write!(f, "the hold's connection ended: {why}"),
            LostReason::Expired => f.write_str("no renewal arrived before the validity ran out"),
        }
    }
}

#[derive(Debug, Clone)]
struct State {
    valid_until: Instant,
    lost: Option<LostReason>,
}

/// A held lock, renewed by the agent for as long as the guard lives.
///
/// Work under the lock should stop when [`LockGuard::lost`] resolves, and
/// never run past [`LockGuard::valid_until`].
pub struct LockGuard {
    client: Client,
    resource: String,
    token: String,
    ttl: Duration,
    state: watch::Receiver<State>,
    watcher: JoinHandle<()>,
    /// Closes the hold's connection at once when the guard goes, though
    /// the hold itself is in the watcher's task.
    closer: Closer,
    /// The guard re-entered a lock: its close is its release.
    reentered: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.resource)
            .field("ttl", &self.ttl)
            .field("lost", &self.state.borrow().lost)
            .finish_non_exhaustive()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // The hold's connection closes now, and the agent releases; its
        // task goes when the runtime next runs it.
        self.closer.close();
        self.watcher.abort();
    }
}

impl LockGuard {
    pub(crate) fn start(client: Client, hold: Hold) -> LockGuard {
        let (tx, state) = watch::channel(State {
            valid_until: hold.valid_until,
            lost: None,
        });
        let resource = hold.resource.clone();
        let token = hold.token.clone();
        let ttl = hold.ttl;
        let closer = hold.conn.closer();
        let reentered = hold.hold_count.is_some();
        let watcher = tokio::spawn(watch_hold(hold, tx));
        LockGuard {
            client,
            resource,
            token,
            ttl,
            state,
            watcher,
            closer,
            reentered,
        }
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The lock's token. Keep it secret: it is the proof of holding it.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// When the validity last granted ends (moved by every renewal). Past
    /// it, another client may hold the lock; it does not move once lost.
    pub fn valid_until(&self) -> std::time::Instant {
        self.state.borrow().valid_until.into_std()
    }

    /// Whether the lock is lost (see [`LockGuard::lost`]).
    pub fn is_lost(&self) -> bool {
        self.state.borrow().lost.is_some()
    }

    /// Resolves when the lock is lost, with why; at once if it already is.
    /// Independent of the guard's lifetime, so it can be moved into another
    /// task or a `select!`. Never resolves once the guard is dropped or
    /// released, except with what was already known.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut state = self.state.clone();
        async move {
            let lost = state
                .wait_for(|s| s.lost.is_some())
                .await
                .ok()
                .and_then(|s| s.lost.clone());
            match lost {
                Some(reason) => reason,
                // The guard is gone and nothing will be reported any more.
                None => std::future::pending().await,
            }
        }
    }

    /// Releases the lock on every master and ends the hold. `Ok(true)` when
    /// a quorum still held it; `Ok(false)` means it had expired or was taken
    /// from us (lost, force-released): the work may have overlapped another
    /// holder's.
    ///
    /// A guard that re-entered a lock ([`crate::HoldOptions::reenter`]) is
    /// only closed: its close is its release, which lowers the count once
    /// (a release through the API as well would lower it twice, and
    /// release the lock its first acquire still holds). `Ok(true)` unless
    /// it was lost.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when too many masters failed to tell, or when
    /// the agent cannot be reached; the hold's connection is closed anyway,
    /// so the agent releases the lock if it is up.
    pub async fn release(self) -> Result<bool, Error> {
        if self.reentered {
            return Ok(!self.is_lost());
        }
        self.client.release(&self.resource, &self.token).await
        // Dropped here: the hold's connection closes.
    }
}

/// Reads the hold's events into `state` until the lock is lost or the
/// guard is gone.
async fn watch_hold(mut hold: Hold, state: watch::Sender<State>) {
    let mut valid_for = hold.validity;
    let mut valid_until = hold.valid_until;
    let lost = loop {
        let deadline = valid_until
            .checked_sub(valid_for / 20)
            .unwrap_or(valid_until);
        tokio::select! {
            event = hold.next_event() => match event {
                Ok(Some(HoldEvent::Renewed { .. })) => {
                    valid_for = hold.validity;
                    valid_until = hold.valid_until;
                    state.send_modify(|s| s.valid_until = valid_until);
                }
                Ok(Some(HoldEvent::Acquired { .. })) => {}
                Ok(Some(HoldEvent::Lost { reason })) => break LostReason::Agent(reason),
                Ok(None) => break LostReason::Disconnected("the agent ended the hold".into()),
                Err(e) => break LostReason::Disconnected(e.to_string()),
            },
            () = tokio::time::sleep_until(deadline) => break LostReason::Expired,
        }
    };
    state.send_modify(|s| s.lost = Some(lost));
    // `hold` drops here: its connection closes and the agent releases.
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HoldOptions;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A frozen agent: it grants the hold, then sends nothing more while
    /// keeping the connection open (the real agent under SIGSTOP, which the
    /// Python and Node tests use; an in-process agent cannot be frozen).
    /// The guard must call the lock lost on its own clock.
    #[tokio::test]
    async fn a_silent_agent_is_lost_on_the_clients_clock() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("frozen.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed before its request");
                head.extend_from_slice(&buf[..n]);
            }
            let line =
                b"{\"event\":\"acquired\",\"token\":\"t\",\"validity_ms\":300,\"ttl_ms\":300}\n";
            let mut answer =
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n"
                    .to_vec();
            answer.extend_from_slice(format!("{:x}\r\n", line.len()).as_bytes());
            answer.extend_from_slice(line);
            answer.extend_from_slice(b"\r\n");
            stream.write_all(&answer).await.unwrap();
            // Silent from here on; the connection stays open until the test ends.
            let _ = rx.await;
            drop(stream);
        });
        let client = Client::new(&socket);
        let guard = client
            .lock(
                "frozen",
                &HoldOptions::new().ttl(Duration::from_millis(300)),
            )
            .await
            .unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(15), guard.lost())
            .await
            .expect("the guard gave up on its own");
        assert_eq!(reason, LostReason::Expired);
        assert!(guard.is_lost());
        let _ = tx.send(());
    }
}
