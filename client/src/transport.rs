//! HTTP/1.1 over the agent's Unix socket: connections, a small pool of
//! idle ones, request paths (the one place resources are percent-encoded)
//! and decoding answers into wire types or [`Error`]s.
//!
//! ## Behavior
//! - Each request takes an idle connection or opens a new one; after a
//!   complete answer the connection goes back to the pool (at most
//!   [`MAX_IDLE`] are kept). Concurrent requests use separate connections.
//! - An idle connection the agent has closed is noticed before the
//!   request is written (hyper gives the request back) and the request
//!   goes out on a fresh connection. A request that was written is never
//!   sent twice: a failure after that is [`Error::Connection`].
//! - Every exchange is bounded by the client's timeout plus the wait the
//!   request asked the agent for.
//! - The task that makes a request drives its connection (no task hop per
//!   request); an idle connection in the pool is not polled until it is
//!   taken, and the first poll then reads whether the agent closed it
//!   before the request is written. A hold's connection is handed to a
//!   task of its own ([`Conn::drive_in_background`]), as its body streams
//!   for as long as the hold lives.
//! - Dropping a connection closes the socket at once (for a hold: its task
//!   is aborted, and the agent releases).

use std::future::{poll_fn, Future};
use std::path::{Path, PathBuf};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use redlock_wire::ErrorResponse;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use crate::Error;

/// Idle connections kept for reuse.
pub(crate) const MAX_IDLE: usize = 16;

/// Largest answer read; `/v1/locks` with thousands of locks fits many times.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// Characters left as they are in a resource's path segment (RFC 3986
/// unreserved); everything else is percent-encoded, `/` included.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The path of `action` on `resource`: `/v1/locks/{resource}/{action}`,
/// the resource percent-encoded as one segment (see [`resource_path`]).
pub fn lock_path(resource: &str, action: &str) -> String {
    format!("{}/{action}", resource_path(resource))
}

/// The path of one lock, `/v1/locks/{resource}`, the resource
/// percent-encoded as one segment. The only place resources are encoded,
/// so they never are twice.
pub fn resource_path(resource: &str) -> String {
    format!("/v1/locks/{}", encode(resource))
}

/// `text` percent-encoded for a path segment or a query value: everything
/// but the RFC 3986 unreserved characters.
pub(crate) fn encode(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// hyper's side of one connection: it reads and writes the socket when
/// polled, and owns the socket.
type Connection = http1::Connection<TokioIo<UnixStream>, Full<Bytes>>;

/// One open connection: the handle requests are sent on and what drives
/// the socket.
pub(crate) struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    /// Polled by the task using the connection; `None` once it ended (every
    /// request pending on it has then been answered with an error) or once
    /// it was moved to `driver`.
    inline: Option<Inline>,
    /// A hold's connection, driven by a task of its own.
    driver: Option<JoinHandle<()>>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // `inline`, if still here, drops with the struct: the socket closes
        // now.
        if let Some(driver) = &self.driver {
            driver.abort();
        }
    }
}

impl Conn {
    /// Whether a request could be sent on this connection later.
    fn reusable(&self) -> bool {
        self.inline.is_some() && !self.sender.is_closed()
    }

    /// Runs `work` (a request, its answer's body) while driving the
    /// connection on this task.
    async fn drive<F: Future>(&mut self, work: F) -> F::Output {
        drive(&mut self.inline, work).await
    }

    /// Hands the connection to a task of its own, for an answer whose body
    /// streams while the caller does other things (a hold). The task is
    /// aborted when this `Conn` drops.
    pub(crate) fn drive_in_background(&mut self) {
        if let Some(inline) = self.inline.take() {
            // Its first poll registers the task's own waker with the socket
            // and hyper's channels, in place of the relay's.
            self.driver = Some(tokio::spawn(async move {
                // Its failure is what the body being read reports.
                let _ = inline.connection.await;
            }));
        }
    }

    /// Forgets the task that last used the connection, so that nothing
    /// happening on it while idle wakes that task.
    fn park(&self) {
        if let Some(inline) = &self.inline {
            inline.relay.state.store(BUSY, Ordering::Release);
            inline.relay.set_task(None);
        }
    }
}

/// A connection driven by the task that uses it.
struct Inline {
    connection: Connection,
    relay: Arc<Relay>,
    /// `relay` as a waker, made once.
    waker: Waker,
}

impl Inline {
    fn new(connection: Connection) -> Inline {
        let relay = Arc::new(Relay {
            state: AtomicU8::new(BUSY),
            task: Mutex::new(None),
        });
        Inline {
            connection,
            waker: Waker::from(Arc::clone(&relay)),
            relay,
        }
    }
}

/// [`drive`] returned `Pending`: the task waits, and a wake goes to it.
const WAITING: u8 = 0;
/// Anything else (inside [`drive`], between two of its calls, idle in the
/// pool): the task, if any, polls the connection before it waits again, so a
/// wake is only noted.
const BUSY: u8 = 1;
/// As [`BUSY`], and woken since: [`drive`] polls once more before it waits.
const WOKEN: u8 = 2;

/// The waker a connection and the request on it are polled with. hyper
/// wakes one side of a connection from the other (a request queued, a
/// response or body chunk delivered, room for the next): with both sides
/// on one task, such a wake lands while that task runs, and the runtime
/// would then reschedule it as a yield and wake another worker thread to
/// steal it. The relay instead turns such a wake into one more round of
/// [`drive`]'s poll, and passes the wakes that come while the task waits
/// (the socket became readable) to the task.
struct Relay {
    state: AtomicU8,
    task: Mutex<Option<Waker>>,
}

impl Relay {
    fn set_task(&self, waker: Option<&Waker>) {
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        match (task.as_ref(), waker) {
            (Some(old), Some(new)) if old.will_wake(new) => {}
            _ => *task = waker.cloned(),
        }
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self
            .state
            .compare_exchange(BUSY, WOKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_err_and(|state| state == WAITING)
        {
            let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(task) = task {
                task.wake();
            }
        }
    }
}

/// Rounds of one poll in [`drive`] before it yields to the runtime, as
/// hyper's own loop does, so a connection that keeps waking itself cannot
/// starve the task's neighbours.
const ROUNDS: usize = 8;

/// Polls the connection (while it runs) and then `work`, until `work` is
/// done. A connection that ended is dropped at once, which answers every
/// request still pending on it (with the request itself when it was not
/// written).
async fn drive<F: Future>(inline: &mut Option<Inline>, work: F) -> F::Output {
    let mut work = pin!(work);
    poll_fn(|cx: &mut Context<'_>| {
        let Some(running) = inline.as_mut() else {
            return work.as_mut().poll(cx);
        };
        running.relay.set_task(Some(cx.waker()));
        let relay = Arc::clone(&running.relay);
        let waker = running.waker.clone();
        let mut relayed = Context::from_waker(&waker);
        for _ in 0..ROUNDS {
            relay.state.store(BUSY, Ordering::Release);
            if let Some(running) = inline.as_mut() {
                // Its error, if any, is what the pending request reports.
                if Pin::new(&mut running.connection)
                    .poll(&mut relayed)
                    .is_ready()
                {
                    *inline = None;
                }
            }
            if let Poll::Ready(done) = work.as_mut().poll(&mut relayed) {
                return Poll::Ready(done);
            }
            if inline.is_none() {
                // Nothing on this connection will wake `work` any more: the
                // task's own waker takes over.
                return work.as_mut().poll(cx);
            }
            if relay
                .state
                .compare_exchange(BUSY, WAITING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        // Still woken after every round: yield to the runtime.
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// Where the agent listens, how long to wait, and the idle connections.
pub(crate) struct Transport {
    socket: PathBuf,
    timeout: Duration,
    idle: Mutex<Vec<Conn>>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("socket", &self.socket)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Transport {
    pub(crate) fn new(socket: PathBuf, timeout: Duration) -> Transport {
        Transport {
            socket,
            timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Opens a connection now and keeps it for the next request.
    pub(crate) async fn warm(&self) -> Result<(), Error> {
        let conn = tokio::time::timeout(self.timeout, self.connect())
            .await
            .map_err(|_| Error::Timeout(self.timeout))??;
        self.put_idle(conn);
        Ok(())
    }

    async fn connect(&self) -> Result<Conn, Error> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|source| Error::Connect {
                socket: self.socket.clone(),
                source,
            })?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Error::Connection(Box::new(e)))?;
        Ok(Conn {
            sender,
            inline: Some(Inline::new(connection)),
            driver: None,
        })
    }

    fn take_idle(&self) -> Option<Conn> {
        // A poisoned lock only means another thread panicked mid-push or
        // mid-pop; the Vec is still a Vec.
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    pub(crate) fn put_idle(&self, conn: Conn) {
        if !conn.reusable() {
            return;
        }
        conn.park();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Sends one request and returns the answer's head with its connection
    /// (which must stay alive, and be driven, while the body is read: with
    /// [`Transport::call`]'s `Conn::drive`, or [`Conn::drive_in_background`]).
    pub(crate) async fn send(
        &self,
        method: &Method,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(Response<Incoming>, Conn), Error> {
        let request = || {
            let mut builder = Request::builder()
                .method(method.clone())
                .uri(path)
                .header(hyper::header::HOST, "localhost");
            if body.is_some() {
                builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
            }
            builder
                .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
                // Cannot fail: a known method, a path built by lock_path or a
                // literal, and fixed headers.
                .expect("a valid request")
        };
        while let Some(mut conn) = self.take_idle() {
            // The first poll of an idle connection reads first: a connection
            // the agent closed ends here, before anything is written.
            let Conn { sender, inline, .. } = &mut conn;
            if drive(inline, sender.ready()).await.is_err() {
                continue;
            }
            let sent = drive(inline, sender.try_send_request(request())).await;
            match sent {
                Ok(response) => return Ok((response, conn)),
                // Not written: the agent had closed this idle connection.
                Err(e) if e.message().is_some() => continue,
                Err(e) => return Err(Error::Connection(Box::new(e.into_error()))),
            }
        }
        let mut conn = self.connect().await?;
        let Conn { sender, inline, .. } = &mut conn;
        let response = drive(inline, sender.send_request(request()))
            .await
            .map_err(|e| Error::Connection(Box::new(e)))?;
        Ok((response, conn))
    }

    /// One request whose answer is one JSON document: `T` on 2xx, else the
    /// API error. `wait` is how long the agent may take on purpose.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&[u8]>,
        wait: Duration,
    ) -> Result<T, Error> {
        let limit = self.timeout.saturating_add(wait);
        let exchange = async {
            let (response, mut conn) = self.send(&method, path, body).await?;
            let status = response.status();
            let bytes = conn.drive(read_body(response.into_body())).await?;
            self.put_idle(conn);
            decode(status, &bytes)
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| Error::Timeout(limit))?
    }
}

/// The whole body of an answer, at most [`MAX_ANSWER`] bytes.
pub(crate) async fn read_body(body: Incoming) -> Result<Bytes, Error> {
    Limited::new(body, MAX_ANSWER)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .map_err(Error::Connection)
}

/// An answer as `T` (2xx) or the error it carries.
pub(crate) fn decode<T: DeserializeOwned>(status: StatusCode, body: &[u8]) -> Result<T, Error> {
    if status.is_success() {
        return serde_json::from_slice(body)
            .map_err(|e| Error::Protocol(format!("{status}: {e}: {}", snippet(body))));
    }
    Err(error_answer(status, body))
}

/// The [`Error`] for a non-2xx answer.
pub(crate) fn error_answer(status: StatusCode, body: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorResponse>(body) {
        Ok(e) => Error::from_api(status.as_u16(), e.error.code, e.error.message),
        Err(_) => Error::Protocol(format!("{status}: {}", snippet(body))),
    }
}

/// The start of a body, for messages.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    if body.len() > 200 {
        format!("{text}...")
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_one_encoded_segment() {
        assert_eq!(lock_path("demo", "acquire"), "/v1/locks/demo/acquire");
        assert_eq!(
            lock_path("orders/42:eu%", "hold"),
            "/v1/locks/orders%2F42%3Aeu%25/hold"
        );
        assert_eq!(
            lock_path("a-b_c.d~e", "release"),
            "/v1/locks/a-b_c.d~e/release"
        );
        assert_eq!(resource_path("a b/c"), "/v1/locks/a%20b%2Fc");
    }

    #[test]
    fn answers_decode_to_bodies_or_errors() {
        let ok: redlock_wire::ReleaseResponse =
            decode(StatusCode::OK, br#"{"released":true}"#).unwrap();
        assert!(ok.released);
        let taken = decode::<redlock_wire::AcquireResponse>(
            StatusCode::CONFLICT,
            br#"{"error":{"code":"taken","message":"held"}}"#,
        )
        .unwrap_err();
        assert!(matches!(taken, Error::Taken { ref message } if message == "held"));
        let odd = decode::<redlock_wire::ReleaseResponse>(StatusCode::BAD_GATEWAY, b"<html>")
            .unwrap_err();
        assert_eq!(
            odd.to_string(),
            "unexpected answer: 502 Bad Gateway: <html>"
        );
        let short = decode::<redlock_wire::ReleaseResponse>(StatusCode::OK, b"{}").unwrap_err();
        assert!(matches!(short, Error::Protocol(_)), "{short}");
    }
}
