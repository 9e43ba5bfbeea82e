//! HTTP/1.1 over the agent's Unix socket: connections, a small pool of
//! idle ones, request paths (the one place resources are percent-encoded)
//! and decoding answers into wire types or [`Error`]s.
//!
//! ## Behavior
//! - Each request takes an idle connection or opens a new one; after a
//!   complete answer the connection goes back to the pool (at most
//!   [`MAX_IDLE`] are kept). Concurrent requests use separate connections.
//! - An idle connection the agent has closed is noticed before the
//!   request is written (hyper gives the request back), or, when its
//!   driver had not seen the close yet, the socket refuses the write
//!   (EPIPE: nothing delivered); either way the request goes out on a fresh
//!   connection. A GET written into a connection the agent then closed
//!   without answering (its idle timeout racing the request) goes out
//!   again on a fresh one, as HTTP allows for an idempotent request; any
//!   other written request is never sent twice: a failure after that is
//!   [`Error::Connection`].
//! - Every exchange is bounded by the client's timeout plus the wait the
//!   request asked the agent for.
//! - A connection's driver task is aborted when the connection is dropped,
//!   which closes the socket at once (for a hold: the agent releases).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use redlock_wire::ErrorResponse;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use crate::trace::TraceContext;
use crate::Error;

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

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
    let mut path = resource_path_with_room(resource, 1 + action.len());
    path.push('/');
    path.push_str(action);
    path
}

/// The path of one lock, `/v1/locks/{resource}`, the resource
/// percent-encoded as one segment. The only place resources are encoded,
/// so they never are twice.
pub fn resource_path(resource: &str) -> String {
    resource_path_with_room(resource, 0)
}

/// [`resource_path`] in one allocation, with `room` bytes to spare for
/// what the caller appends (when nothing needed encoding).
fn resource_path_with_room(resource: &str, room: usize) -> String {
    const PREFIX: &str = "/v1/locks/";
    let mut path = String::with_capacity(PREFIX.len() + resource.len() + room);
    path.push_str(PREFIX);
    path.extend(utf8_percent_encode(resource, SEGMENT));
    path
}

/// The path of `action` on the semaphore `name`:
/// `/v1/semaphores/{name}/{action}`, or the semaphore itself when `action`
/// is empty; the name percent-encoded as one segment, as a resource is.
pub fn semaphore_path(name: &str, action: &str) -> String {
    named_path("/v1/semaphores/", name, action)
}

/// The path of `action` on the election `name`:
/// `/v1/elections/{name}/{action}`, or the election itself when `action`
/// is empty; the name percent-encoded as one segment, as a resource is.
pub fn election_path(name: &str, action: &str) -> String {
    named_path("/v1/elections/", name, action)
}

fn named_path(collection: &str, name: &str, action: &str) -> String {
    let mut path = String::with_capacity(collection.len() + name.len() + 1 + action.len());
    path.push_str(collection);
    path.extend(utf8_percent_encode(name, SEGMENT));
    if !action.is_empty() {
        path.push('/');
        path.push_str(action);
    }
    path
}

/// `text` percent-encoded for a path segment or a query value: everything
/// but the RFC 3986 unreserved characters.
pub(crate) fn encode(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// A request to the agent: the header values are static or checked when
/// their trace context was built, and the URI, body and trace headers are
/// shared, not copied, with every rebuild of the same request.
fn request(
    method: Method,
    uri: Uri,
    body: Option<Bytes>,
    trace: Option<&TraceContext>,
) -> Request<Full<Bytes>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(uri)
        .header(HOST, HeaderValue::from_static("localhost"));
    if body.is_some() {
        builder = builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    if let Some((traceparent, tracestate)) = trace.map(TraceContext::headers) {
        builder = builder.header(TRACEPARENT, traceparent);
        if let Some(tracestate) = tracestate {
            builder = builder.header(TRACESTATE, tracestate);
        }
    }
    builder
        .body(Full::new(body.unwrap_or_default()))
        // Cannot fail: a known method, a valid URI, and valid header values.
        .expect("a valid request")
}

/// Whether a request failed because the socket refused to take it (EPIPE:
/// the agent had closed the connection before it was written). A Unix
/// socket delivers nothing of a write it refuses, and the agent never acts
/// on a request it did not receive whole, so it may go out again.
fn refused_unread(error: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::BrokenPipe;
        }
        source = cause.source();
    }
    false
}

/// The connection ended before any answer: reset by the agent, or closed
/// before a whole answer came (never once an answer has begun: hyper
/// returns the response as soon as its head is read).
fn unanswered(error: &hyper::Error) -> bool {
    if error.is_incomplete_message() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionReset;
        }
        source = cause.source();
    }
    false
}

/// One open connection and the task driving it.
pub(crate) struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    driver: JoinHandle<()>,
    closer: Closer,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.closer.close();
        self.driver.abort();
    }
}

impl Conn {
    /// What closes this connection's socket at once, even after the
    /// connection itself has moved on.
    pub(crate) fn closer(&self) -> Closer {
        self.closer.clone()
    }
}

/// Shuts a stream's socket down the moment it is called (or dropped with
/// its [`Conn`]), so the agent reads end-of-file before this process sends
/// anything after it: aborting the task that owns the socket closes it
/// only when the runtime next runs that task, maybe after the next
/// request. Closing a hold that re-entered a lock and then releasing the
/// lock is answered as the calls were made, in that order. A duplicate of
/// the socket, so it never shuts a descriptor another connection reuses;
/// only a stream's connection has one (none for the calls' pooled
/// connections, which would double the descriptors of a process with
/// thousands of them).
#[derive(Clone, Debug, Default)]
pub(crate) struct Closer(Option<std::sync::Arc<std::os::unix::net::UnixStream>>);

impl Closer {
    fn of(stream: &UnixStream) -> Closer {
        use std::os::fd::AsFd;
        let duplicate = stream.as_fd().try_clone_to_owned().ok();
        Closer(duplicate.map(|fd| std::sync::Arc::new(fd.into())))
    }

    /// Shuts the socket down both ways; nothing if it already is.
    pub(crate) fn close(&self) {
        if let Some(socket) = &self.0 {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }
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
        let conn = tokio::time::timeout(self.timeout, self.connect(false))
            .await
            .map_err(|_| Error::Timeout(self.timeout))??;
        self.put_idle(conn);
        Ok(())
    }

    /// A new connection; `closable`: with a [`Closer`] (a stream's).
    async fn connect(&self, closable: bool) -> Result<Conn, Error> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|source| Error::Connect {
                socket: self.socket.clone(),
                source,
            })?;
        let closer = if closable {
            Closer::of(&stream)
        } else {
            Closer::default()
        };
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Error::Connection(Box::new(e)))?;
        let driver = tokio::spawn(async move {
            // Its failure is what the pending request reports.
            let _ = connection.await;
        });
        Ok(Conn {
            sender,
            driver,
            closer,
        })
    }

    fn take_idle(&self) -> Option<Conn> {
        // A poisoned lock only means another thread panicked mid-push or
        // mid-pop; the Vec is still a Vec.
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    pub(crate) fn put_idle(&self, conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Sends one request and returns the answer's head with its connection
    /// (which must stay alive while the body is read). A `stream`'s goes on
    /// a new connection of its own, with a [`Closer`].
    pub(crate) async fn send(
        &self,
        method: Method,
        path: String,
        body: Option<Vec<u8>>,
        stream: bool,
    ) -> Result<(Response<Incoming>, Conn), Error> {
        let uri =
            Uri::try_from(path).map_err(|e| Error::Protocol(format!("not a request path: {e}")))?;
        let body = body.map(Bytes::from);
        // Read here, while the caller's task (and its context) is current.
        let trace = crate::trace::current();
        let rebuild = || request(method.clone(), uri.clone(), body.clone(), trace.as_ref());
        let mut request = rebuild();
        while let Some(mut conn) = (!stream).then(|| self.take_idle()).flatten() {
            if conn.sender.ready().await.is_err() {
                continue;
            }
            match conn.sender.try_send_request(request).await {
                Ok(response) => return Ok((response, conn)),
                Err(mut e) => match e.take_message() {
                    // Not written: the agent had closed this idle connection.
                    Some(unsent) => request = unsent,
                    // Written into a socket the agent had closed before its
                    // driver saw it: nothing was delivered.
                    None if refused_unread(e.error()) => request = rebuild(),
                    // Written, and the agent closed the idle connection
                    // before answering (its idle timeout raced the
                    // request): sent again only when it is idempotent.
                    None if method.is_idempotent() && unanswered(e.error()) => request = rebuild(),
                    None => return Err(Error::Connection(Box::new(e.into_error()))),
                },
            }
        }
        let mut conn = self.connect(stream).await?;
        let response = conn
            .sender
            .send_request(request)
            .await
            .map_err(|e| Error::Connection(Box::new(e)))?;
        Ok((response, conn))
    }

    /// One request whose answer is one JSON document: `T` on 2xx, else the
    /// API error. `wait` is how long the agent may take on purpose.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: String,
        body: Option<Vec<u8>>,
        wait: Duration,
    ) -> Result<T, Error> {
        let limit = self.timeout.saturating_add(wait);
        let exchange = async {
            let (response, conn) = self.send(method, path, body, false).await?;
            let status = response.status();
            let bytes = read_body(response.into_body()).await?;
            self.put_idle(conn);
            decode(status, &bytes)
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| Error::Timeout(limit))?
    }
}

/// Sends a request whose 200 answer is an `application/x-ndjson` stream
/// (a hold, a campaign, an observer) and returns its body with the
/// connection that carries it; any other answer is the error it carries.
/// Bounded by nothing here: the caller bounds the start as it needs.
pub(crate) async fn open_stream(
    transport: &Transport,
    method: Method,
    path: String,
    body: Option<Vec<u8>>,
) -> Result<(Incoming, Conn), Error> {
    let (response, conn) = transport.send(method, path, body, true).await?;
    let status = response.status();
    if status != StatusCode::OK {
        let bytes = read_body(response.into_body()).await?;
        return Err(error_answer(status, &bytes));
    }
    let content_type = response.headers().get(CONTENT_TYPE);
    if content_type.is_none_or(|v| v != "application/x-ndjson") {
        return Err(Error::Protocol(format!(
            "a stream answers application/x-ndjson, got {content_type:?}"
        )));
    }
    Ok((response.into_body(), conn))
}

/// The whole body of an answer, at most [`MAX_ANSWER`] bytes. The agent's
/// answers come in one chunk, which is kept as it came; more are joined.
pub(crate) async fn read_body(body: Incoming) -> Result<Bytes, Error> {
    let mut body = Limited::new(body, MAX_ANSWER);
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        // Trailers carry nothing the answers use.
        let Ok(data) = frame.map_err(Error::Connection)?.into_data() else {
            continue;
        };
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut both = BytesMut::with_capacity(first.len() + data.len());
                both.extend_from_slice(&first);
                both.extend_from_slice(&data);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
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
        assert_eq!(
            semaphore_path("pay/api", "acquire"),
            "/v1/semaphores/pay%2Fapi/acquire"
        );
        assert_eq!(semaphore_path("pay", ""), "/v1/semaphores/pay");
        assert_eq!(
            election_path("sched uler", "observe"),
            "/v1/elections/sched%20uler/observe"
        );
        assert_eq!(election_path("s", ""), "/v1/elections/s");
    }

    /// Reads one request head (requests here have no body) and returns
    /// its request line.
    fn read_request_line(stream: &mut std::os::unix::net::UnixStream) -> String {
        use std::io::Read;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).expect("read a request");
            assert_eq!(n, 1, "the connection closed mid-request: {head:?}");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).expect("an ASCII head");
        head.lines().next().unwrap_or_default().to_string()
    }

    /// An idle connection that the agent closed while the client's task did
    /// not run (its driver has not seen the close yet): the request is
    /// given back unwritten and goes out once, on a fresh connection.
    #[tokio::test(flavor = "current_thread")]
    async fn a_request_on_a_closed_idle_connection_goes_out_once_on_a_fresh_one() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("closing.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let (pooled_tx, pooled_rx) = std::sync::mpsc::channel::<()>();
        let (closed_tx, closed_rx) = std::sync::mpsc::channel::<()>();
        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{\"released\":true}";
        let server = std::thread::spawn(move || {
            let (mut first, _) = listener.accept().unwrap();
            let one = read_request_line(&mut first);
            first.write_all(answer).unwrap();
            // Closed only once the client has put it back in its pool.
            pooled_rx.recv().unwrap();
            drop(first);
            closed_tx.send(()).unwrap();
            let (mut second, _) = listener.accept().unwrap();
            let two = read_request_line(&mut second);
            second.write_all(answer).unwrap();
            (one, two)
        });
        let transport = Transport::new(socket, Duration::from_secs(10));
        let first: redlock_wire::ReleaseResponse = transport
            .call(Method::GET, "/v1/one".into(), None, Duration::ZERO)
            .await
            .unwrap();
        assert!(first.released);
        assert_eq!(transport.idle.lock().unwrap().len(), 1);
        pooled_tx.send(()).unwrap();
        // Blocks this runtime's only thread on purpose: the connection's
        // driver cannot run between the close and the next request.
        closed_rx.recv().unwrap();
        let second: redlock_wire::ReleaseResponse = transport
            .call(Method::GET, "/v1/two".into(), None, Duration::ZERO)
            .await
            .unwrap();
        assert!(second.released);
        let (one, two) = server.join().unwrap();
        assert_eq!(one, "GET /v1/one HTTP/1.1");
        // The second request went out on the second connection only: the
        // closed one never carried it.
        assert_eq!(two, "GET /v1/two HTTP/1.1");
    }

    /// The agent closes a pooled connection as a request arrives on it,
    /// leaving the request unread (its idle timeout racing the request):
    /// the client sees a reset with no answer. A GET goes out again on a
    /// fresh connection; a POST is never sent twice and fails.
    #[tokio::test(flavor = "current_thread")]
    async fn a_reset_before_any_answer_resends_only_idempotent_requests() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("resetting.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{\"released\":true}";
        let server = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for _ in 0..2 {
                let (mut pooled, _) = listener.accept().unwrap();
                lines.push(read_request_line(&mut pooled));
                pooled.write_all(answer).unwrap();
                // The next request's first byte, then the close with the
                // rest unread: the kernel resets the connection.
                let mut byte = [0u8; 1];
                assert_eq!(pooled.read(&mut byte).unwrap(), 1);
                drop(pooled);
                if lines.len() == 1 {
                    // The GET again, on a fresh connection.
                    let (mut fresh, _) = listener.accept().unwrap();
                    lines.push(read_request_line(&mut fresh));
                    fresh.write_all(answer).unwrap();
                }
            }
            lines
        });
        let transport = Transport::new(socket, Duration::from_secs(10));
        for (first, second) in [("/v1/a", Method::GET), ("/v1/c", Method::POST)] {
            let _: redlock_wire::ReleaseResponse = transport
                .call(Method::GET, first.into(), None, Duration::ZERO)
                .await
                .unwrap();
            let again = transport
                .call::<redlock_wire::ReleaseResponse>(
                    second.clone(),
                    "/v1/b".into(),
                    None,
                    Duration::ZERO,
                )
                .await;
            if second == Method::GET {
                assert!(again.unwrap().released);
                // The fresh connection is the pooled one now; drop it so
                // the next round starts on a new one.
                transport.idle.lock().unwrap().clear();
            } else {
                assert!(matches!(again, Err(Error::Connection(_))), "{again:?}");
            }
        }
        let lines = server.join().unwrap();
        assert_eq!(
            lines,
            [
                "GET /v1/a HTTP/1.1",
                "GET /v1/b HTTP/1.1",
                "GET /v1/c HTTP/1.1"
            ],
            "the GET went out again once; the POST never did"
        );
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
