//! The connection to the agent, as a state machine the header shows:
//! `Connecting` → `Connected` → (the socket fails) → `Reconnecting` with a
//! retry time → `Connecting` → …
//!
//! It runs in its own tokio task and talks to the app only through two
//! channels: it sends [`Event`]s (state changes, each endpoint's answer, the
//! outcome of a force release) and receives [`Command`]s. The render path
//! never waits on the socket.
//!
//! ## Behavior
//! - One HTTP/1.1 connection over the Unix socket, kept open across polls.
//!   Every `refresh` it asks `/v1/nodes`, `/v1/locks`, `/v1/leaks` and
//!   `/v1/summary` in turn and sends each answer as soon as it arrives, so a
//!   slow endpoint does not hold back the others. `/v1/locks` carries the
//!   app's [`Query`] (the server-side prefix and how many locks to list),
//!   and while a lock's detail is open `/v1/locks/{resource}` is asked
//!   first.
//! - A new [`Query`] polls at once: a poll under way (say, a slow listing
//!   of 100,000 keys) is abandoned and its connection replaced, which also
//!   stops the listing on the agent.
//! - A request that fails on the socket (refused, reset, closed, or no
//!   answer within [`REQUEST_TIMEOUT`]) drops the connection; the next
//!   attempt waits by capped exponential [`Backoff`], reset on success.
//! - An answer that is an API error (a `404 not_found` from an agent that
//!   does not serve the endpoint yet) or not the expected JSON is reported
//!   for that endpoint only; the connection stays up.
//! - A force release asked for while waiting to reconnect fails at once
//!   with "not connected"; it is never held for a later connection.
//! - The task ends when the app drops its side of either channel.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use redlock_wire::{
    ErrorResponse, ForceReleaseResponse, LeaksResponse, LockResponse, LocksResponse, NodesResponse,
    SummaryResponse,
};
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Longest wait for the socket to accept or for one answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest answer read; thousands of locks fit many times over.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// Characters left as they are in a resource's path segment (RFC 3986
/// unreserved); everything else is percent-encoded, `/` included.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Locks the agent lists when the app does not ask for more (its default).
pub const DEFAULT_LIMIT: usize = 1000;

/// What the app wants of `/v1/locks`, changed as the user types and scrolls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Only resources that start with this (the agent filters); "" for all.
    pub prefix: String,
    /// How many locks to list.
    pub limit: usize,
    /// The lock whose detail is open: asked by name every poll.
    pub detail: Option<String>,
    /// Ask `/v1/locks` at all: only while the locks view is on screen, so
    /// a TUI left on another view does not scan the masters every poll.
    pub list: bool,
}

impl Default for Query {
    fn default() -> Query {
        Query {
            prefix: String::new(),
            limit: DEFAULT_LIMIT,
            detail: None,
            list: true,
        }
    }
}

impl Query {
    /// `/v1/locks` with the prefix and limit, percent-encoded; the bare
    /// path for the agent's defaults.
    pub fn locks_path(&self) -> String {
        let mut params = Vec::new();
        if !self.prefix.is_empty() {
            params.push(format!(
                "prefix={}",
                utf8_percent_encode(&self.prefix, SEGMENT)
            ));
        }
        if self.limit != DEFAULT_LIMIT {
            params.push(format!("limit={}", self.limit));
        }
        if params.is_empty() {
            "/v1/locks".to_string()
        } else {
            format!("/v1/locks?{}", params.join("&"))
        }
    }
}

/// The path of one lock's detail, percent-encoded.
pub fn lock_path(resource: &str) -> String {
    format!("/v1/locks/{}", utf8_percent_encode(resource, SEGMENT))
}

/// Where the connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conn {
    /// Opening the socket (`attempt` 0 is the first try).
    Connecting {
        attempt: u32,
    },
    Connected,
    /// The last attempt or the open connection failed; the next attempt
    /// starts at `retry_at`.
    Reconnecting {
        retry_at: Instant,
        attempt: u32,
        error: String,
    },
}

/// Capped exponential backoff: `base`, `2·base`, `4·base`, … up to `cap`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
}

impl Default for Backoff {
    /// 1s, 2s, 4s, 8s, then every 10s.
    fn default() -> Backoff {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(10))
    }
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            failures: 0,
        }
    }

    /// The wait after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 1_u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.failures = self.failures.saturating_add(1);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// An endpoint's answer: the body, or why there is none (an API error or
/// an unexpected body), worded for the view's notice line.
pub type Reply<T> = Result<T, String>;

/// One endpoint's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Nodes(Reply<NodesResponse>),
    Locks(Reply<LocksResponse>),
    /// `GET /v1/locks/{resource}` for the open detail pane.
    Lock(String, Reply<LockResponse>),
    /// With the wall clock (Unix ms) when it was asked, for scan ages.
    Leaks(Reply<LeaksResponse>, u64),
    Summary(Reply<SummaryResponse>),
}

/// What the client tells the app.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Conn(Conn),
    /// An answer, with the instant its request was sent: TTLs in it were
    /// read after that, so countdowns from it never overstate.
    Polled {
        at: Instant,
        update: Update,
    },
    /// The outcome of a [`Command::ForceRelease`].
    Released {
        resource: String,
        result: Result<ForceReleaseResponse, String>,
    },
}

/// What the app asks of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `POST /v1/locks/{resource}/force-release`, then poll at once.
    ForceRelease(String),
}

/// Why a request did not get an answer: the connection is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("reading the answer: {0}")]
    Body(String),
}

/// The path of a force release for `resource`, percent-encoded.
pub fn force_release_path(resource: &str) -> String {
    format!(
        "/v1/locks/{}/force-release",
        utf8_percent_encode(resource, SEGMENT)
    )
}

/// Where and how often to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub socket: PathBuf,
    /// Time between the starts of two polls.
    pub refresh: Duration,
    /// Longest wait to connect or for one answer; see [`REQUEST_TIMEOUT`].
    pub timeout: Duration,
}

/// Starts the client task on the current tokio runtime, with the default
/// [`Query`] for good.
pub fn spawn(
    options: Options,
    events: mpsc::Sender<Event>,
    commands: mpsc::Receiver<Command>,
) -> JoinHandle<()> {
    let (_, query) = watch::channel(Query::default());
    spawn_with_query(options, events, commands, query)
}

/// Starts the client task; every change of `query` polls at once.
pub fn spawn_with_query(
    options: Options,
    events: mpsc::Sender<Event>,
    commands: mpsc::Receiver<Command>,
    query: watch::Receiver<Query>,
) -> JoinHandle<()> {
    tokio::spawn(
        Client {
            options,
            events,
            commands,
            query,
        }
        .run(),
    )
}

struct Client {
    options: Options,
    events: mpsc::Sender<Event>,
    commands: mpsc::Receiver<Command>,
    query: watch::Receiver<Query>,
}

/// Resolves when `query` changes; never once its sender is gone.
async fn changed(query: &mut watch::Receiver<Query>) {
    if query.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The app is gone: stop.
struct Stop;

impl Client {
    async fn run(mut self) {
        let mut backoff = Backoff::default();
        loop {
            let attempt = backoff.failures();
            if self
                .send(Event::Conn(Conn::Connecting { attempt }))
                .await
                .is_err()
            {
                return;
            }
            let error = match Connection::open(&self.options.socket, self.options.timeout).await {
                Ok(connection) => {
                    backoff.reset();
                    if self.send(Event::Conn(Conn::Connected)).await.is_err() {
                        return;
                    }
                    match self.serve(connection).await {
                        Ok(Stop) => return,
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            };
            let delay = backoff.next_delay();
            let retry_at = Instant::now() + delay;
            let reconnecting = Conn::Reconnecting {
                retry_at,
                attempt: backoff.failures(),
                error: error.to_string(),
            };
            if self.send(Event::Conn(reconnecting)).await.is_err() {
                return;
            }
            if let Err(Stop) = self.wait_disconnected(delay).await {
                return;
            }
        }
    }

    async fn send(&self, event: Event) -> Result<(), Stop> {
        self.events.send(event).await.map_err(|_| Stop)
    }

    /// Waits out a backoff, refusing commands meanwhile.
    async fn wait_disconnected(&mut self, delay: Duration) -> Result<(), Stop> {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return Ok(()),
                command = self.commands.recv() => match command {
                    None => return Err(Stop),
                    Some(Command::ForceRelease(resource)) => {
                        self.send(Event::Released {
                            resource,
                            result: Err("not connected to the agent".to_string()),
                        })
                        .await?;
                    }
                },
            }
        }
    }

    /// Polls on an open connection until it fails (`Err`) or the app is
    /// gone (`Ok(Stop)`).
    async fn serve(&mut self, mut connection: Connection) -> Result<Stop, ClientError> {
        let mut tick = tokio::time::interval(self.options.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut query = self.query.clone();
        query.mark_unchanged();
        let mut again = false;
        loop {
            if std::mem::take(&mut again) {
                tick.reset();
            } else {
                tokio::select! {
                _ = tick.tick() => {}
                () = changed(&mut query) => tick.reset(),
                command = self.commands.recv() => match command {
                    None => return Ok(Stop),
                    Some(Command::ForceRelease(resource)) => {
                        let result = connection
                            .request::<ForceReleaseResponse>(Method::POST, &force_release_path(&resource))
                            .await;
                        let (result, failed) = match result {
                            Ok(reply) => (reply, None),
                            Err(e) => (Err(e.to_string()), Some(e)),
                        };
                        if self.send(Event::Released { resource, result }).await.is_err() {
                            return Ok(Stop);
                        }
                        if let Some(e) = failed {
                            return Err(e);
                        }
                        // Polled just below, to show the outcome now; the
                        // next tick is a full period after that.
                        tick.reset();
                    }
                },
                }
            }
            let asked = query.borrow_and_update().clone();
            let finished = {
                let poll = self.poll(&mut connection, &asked);
                tokio::pin!(poll);
                tokio::select! {
                    result = &mut poll => Some(result),
                    () = changed(&mut query) => None,
                }
            };
            match finished {
                Some(result) => {
                    if let Err(Stop) = result? {
                        return Ok(Stop);
                    }
                }
                None => {
                    // The answer under way is for an old query: drop its
                    // connection (the agent stops the listing) and ask
                    // again on a fresh one.
                    connection =
                        Connection::open(&self.options.socket, self.options.timeout).await?;
                    again = true;
                }
            }
        }
    }

    /// One round over the four endpoints (five with a detail open).
    async fn poll(
        &self,
        connection: &mut Connection,
        query: &Query,
    ) -> Result<Result<(), Stop>, ClientError> {
        macro_rules! ask {
            ($path:expr, $wrap:expr) => {{
                let at = Instant::now();
                let reply = connection.request(Method::GET, &$path).await?;
                if self
                    .send(Event::Polled {
                        at,
                        update: $wrap(reply),
                    })
                    .await
                    .is_err()
                {
                    return Ok(Err(Stop));
                }
            }};
        }
        if let Some(resource) = &query.detail {
            ask!(lock_path(resource), |reply| Update::Lock(
                resource.clone(),
                reply
            ));
        }
        ask!("/v1/nodes", Update::Nodes);
        if query.list {
            ask!(query.locks_path(), Update::Locks);
        }
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        ask!("/v1/leaks", |reply| Update::Leaks(reply, wall_ms));
        ask!("/v1/summary", Update::Summary);
        Ok(Ok(()))
    }
}

/// One HTTP/1.1 connection over the agent's socket.
struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    timeout: Duration,
}

impl Connection {
    async fn open(path: &Path, timeout: Duration) -> Result<Connection, ClientError> {
        let connect = async {
            let stream =
                UnixStream::connect(path)
                    .await
                    .map_err(|source| ClientError::Connect {
                        path: path.display().to_string(),
                        source,
                    })?;
            let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
            // Drives the socket; ends when `sender` is dropped or the peer
            // closes, which the next request then reports.
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok(Connection { sender, timeout })
        };
        tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| ClientError::Timeout(timeout))?
    }

    /// Sends one request; `Err` when the connection failed, `Ok(Err)` when
    /// the agent answered something other than the expected JSON.
    async fn request<T: DeserializeOwned>(
        &mut self,
        method: Method,
        path: &str,
    ) -> Result<Reply<T>, ClientError> {
        let exchange = async {
            self.sender.ready().await?;
            let request = Request::builder()
                .method(method.clone())
                .uri(path)
                .header(hyper::header::HOST, "localhost")
                .body(Full::new(Bytes::new()))
                // Cannot fail: the method is a constant and the path is
                // either a literal or percent-encoded.
                .expect("a valid request");
            let response = self.sender.send_request(request).await?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| ClientError::Body(e.to_string()))?
                .to_bytes();
            Ok::<_, ClientError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout(self.timeout))??;
        Ok(decode(&method, path, status, &body))
    }
}

/// Reads an answer: the expected body on 2xx, else the API error, worded
/// as `GET /v1/locks: 404 not_found: no such endpoint: /v1/locks`.
pub fn decode<T: DeserializeOwned>(
    method: &Method,
    path: &str,
    status: StatusCode,
    body: &[u8],
) -> Reply<T> {
    if status.is_success() {
        return serde_json::from_slice(body)
            .map_err(|e| format!("{method} {path}: unexpected answer: {e}"));
    }
    match serde_json::from_slice::<ErrorResponse>(body) {
        Ok(error) => Err(format!(
            "{method} {path}: {} {}: {}",
            status.as_u16(),
            error.error.code.as_str(),
            error.error.message
        )),
        Err(_) => Err(format!("{method} {path}: {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut backoff = Backoff::default();
        let delays: Vec<u64> = (0..6).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff.failures(), 6);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn backoff_does_not_overflow_after_many_failures() {
        let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
        for _ in 0..1_000 {
            assert!(backoff.next_delay() <= Duration::from_secs(30));
        }
        assert_eq!(backoff.next_delay(), Duration::from_secs(30));
    }

    #[test]
    fn force_release_paths_are_one_encoded_segment() {
        assert_eq!(force_release_path("demo"), "/v1/locks/demo/force-release");
        assert_eq!(
            force_release_path("orders/42:eu"),
            "/v1/locks/orders%2F42%3Aeu/force-release"
        );
        assert_eq!(
            force_release_path("a-b_c.d~e"),
            "/v1/locks/a-b_c.d~e/force-release"
        );
    }

    #[test]
    fn locks_paths_carry_the_query_only_when_it_differs() {
        assert_eq!(Query::default().locks_path(), "/v1/locks");
        let query = Query {
            prefix: "orders/4".into(),
            limit: 2000,
            detail: None,
            list: true,
        };
        assert_eq!(query.locks_path(), "/v1/locks?prefix=orders%2F4&limit=2000");
        assert_eq!(lock_path("a b/c"), "/v1/locks/a%20b%2Fc");
    }

    #[test]
    fn api_errors_are_worded_with_their_code() {
        let body = br#"{"error":{"code":"not_found","message":"no such endpoint: /v1/locks"}}"#;
        let reply: Reply<LocksResponse> =
            decode(&Method::GET, "/v1/locks", StatusCode::NOT_FOUND, body);
        assert_eq!(
            reply.unwrap_err(),
            "GET /v1/locks: 404 not_found: no such endpoint: /v1/locks"
        );
        let reply: Reply<LocksResponse> = decode(
            &Method::GET,
            "/v1/locks",
            StatusCode::BAD_GATEWAY,
            b"<html>",
        );
        assert_eq!(reply.unwrap_err(), "GET /v1/locks: 502 Bad Gateway");
        let reply: Reply<ForceReleaseResponse> = decode(
            &Method::POST,
            "/x",
            StatusCode::OK,
            br#"{"deleted":3,"failed":[]}"#,
        );
        assert_eq!(reply.unwrap().deleted, 3);
        let reply: Reply<ForceReleaseResponse> = decode(&Method::POST, "/x", StatusCode::OK, b"{}");
        assert!(reply
            .unwrap_err()
            .starts_with("POST /x: unexpected answer: "));
    }
}
