//! One connection's life across its idle gaps: between requests the agent
//! keeps only the socket (hyper's buffers are dropped) and serves the next
//! request with a fresh hyper connection. These tests talk raw HTTP/1.1 on
//! one Unix socket, so every request provably shares it with the others.

mod common;

use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// One keep-alive connection, read response by response.
struct Conn {
    stream: UnixStream,
    buffer: Vec<u8>,
}

impl Conn {
    async fn open(agent: &TestAgent) -> Conn {
        Conn {
            stream: UnixStream::connect(&agent.socket).await.unwrap(),
            buffer: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends `bytes` to an agent that may have closed the connection
    /// already: a failed write is left for the reads to notice.
    async fn send_late(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// Reads until `buffer` holds `n` bytes; panics on end of stream.
    async fn fill(&mut self, n: usize) {
        assert!(
            self.try_fill(n).await,
            "the agent closed the connection: {:?}",
            String::from_utf8_lossy(&self.buffer)
        );
    }

    /// Reads until `buffer` holds `n` bytes; false at end of stream (or
    /// when the agent reset the connection).
    async fn try_fill(&mut self, n: usize) -> bool {
        while self.buffer.len() < n {
            let mut chunk = [0u8; 4096];
            let read = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
                .await
                .expect("an answer within 10s");
            match read {
                Ok(0) | Err(_) => return false,
                Ok(read) => self.buffer.extend_from_slice(&chunk[..read]),
            }
        }
        true
    }

    /// The next response's head (status line and headers).
    async fn head(&mut self) -> String {
        loop {
            if let Some(end) = self.buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head: Vec<u8> = self.buffer.drain(..end + 4).collect();
                return String::from_utf8(head).unwrap();
            }
            let len = self.buffer.len();
            self.fill(len + 1).await;
        }
    }

    /// The next response with a `content-length` body: status line and body.
    async fn response(&mut self) -> (String, serde_json::Value) {
        let head = self.head().await;
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap_or_else(|| panic!("a content-length: {head}"))
            .parse()
            .unwrap();
        self.fill(length).await;
        let body: Vec<u8> = self.buffer.drain(..length).collect();
        let status = head.lines().next().unwrap().to_string();
        (status, serde_json::from_slice(&body).unwrap())
    }

    /// The next response with a `content-length` body: its head and JSON
    /// body; `None` when the agent closed the connection before it began.
    async fn answer(&mut self) -> Option<(String, serde_json::Value)> {
        let end = loop {
            if let Some(end) = self.buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let len = self.buffer.len();
            if !self.try_fill(len + 1).await {
                assert!(
                    self.buffer.is_empty(),
                    "the agent closed the connection inside a response: {:?}",
                    String::from_utf8_lossy(&self.buffer)
                );
                return None;
            }
        };
        let head = String::from_utf8(self.buffer.drain(..end + 4).collect()).unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap_or_else(|| panic!("a content-length: {head}"))
            .parse()
            .unwrap();
        self.fill(length).await;
        let body: Vec<u8> = self.buffer.drain(..length).collect();
        let body = serde_json::from_slice(&body)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned().into());
        Some((head, body))
    }

    /// Whether the agent sends nothing more within `limit` (closing the
    /// connection, or keeping it open and quiet).
    async fn quiet_for(&mut self, limit: Duration) -> bool {
        if !self.buffer.is_empty() {
            return false;
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout(limit, self.stream.read(&mut chunk)).await {
            Err(_) | Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(read)) => {
                self.buffer.extend_from_slice(&chunk[..read]);
                false
            }
        }
    }

    /// Whether the agent closes the connection within `limit`, sending
    /// nothing more.
    async fn closed_within(&mut self, limit: Duration) -> bool {
        let mut chunk = [0u8; 64];
        matches!(
            tokio::time::timeout(limit, self.stream.read(&mut chunk)).await,
            Ok(Ok(0))
        )
    }
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").into_bytes()
}

fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Requests on one connection with idle gaps between them (each one served
/// by a fresh hyper connection) are all answered on it, and a hold taken
/// after such a gap is bound to the connection: held while it is open,
/// released when it closes.
#[tokio::test]
async fn a_connection_serves_requests_across_idle_gaps_and_its_hold_ends_with_it() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "").await;
    let mut conn = Conn::open(&agent).await;

    conn.send(&get("/healthz")).await;
    let (status, _) = conn.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK");

    conn.send(&post("/v1/locks/a/acquire", r#"{"ttl_ms": 10000}"#))
        .await;
    let (status, grant) = conn.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{grant}");
    let token = grant["token"].as_str().unwrap();
    conn.send(&post(
        "/v1/locks/a/release",
        &serde_json::json!({ "token": token }).to_string(),
    ))
    .await;
    let (status, released) = conn.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{released}");
    assert_eq!(released["released"], true, "{released}");

    conn.send(&post("/v1/locks/h/hold", r#"{"ttl_ms": 1000}"#))
        .await;
    let head = conn.head().await;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    while !String::from_utf8_lossy(&conn.buffer).contains("\"acquired\"") {
        let len = conn.buffer.len();
        conn.fill(len + 1).await;
    }
    // Renewed while the connection stays open.
    while !String::from_utf8_lossy(&conn.buffer).contains("\"renewed\"") {
        let len = conn.buffer.len();
        conn.fill(len + 1).await;
    }
    assert!(
        cluster.get(0, "redlock:h").await.is_some(),
        "the hold is on the masters"
    );

    drop(conn);
    wait_for(
        "the hold's release after its connection closed",
        Duration::from_secs(5),
        || async { cluster.get(0, "redlock:h").await.is_none() },
    )
    .await;
}

/// A hold whose client shuts down its writing side (a half-close: the end
/// of a pipe's input, `shutdown(SHUT_WR)`) ends as a closed connection
/// does, as docs/api.md says: released at once, long before its TTL, and
/// the stream ends with no `lost` event.
#[tokio::test]
async fn a_half_closed_hold_is_released_at_once_and_ends_without_lost() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "").await;
    let mut conn = Conn::open(&agent).await;
    conn.send(&post("/v1/locks/hc/hold", r#"{"ttl_ms": 60000}"#))
        .await;
    let head = conn.head().await;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    while !String::from_utf8_lossy(&conn.buffer).contains("\"acquired\"") {
        let len = conn.buffer.len();
        conn.fill(len + 1).await;
    }
    conn.stream.shutdown().await.unwrap();
    // The rest of the stream, to its end.
    while conn.try_fill(conn.buffer.len() + 1).await {}
    let rest = String::from_utf8_lossy(&conn.buffer).into_owned();
    assert!(!rest.contains("\"lost\""), "{rest}");
    // Released, not left to its 60 s TTL: the next client takes it now.
    wait_for(
        "the half-closed hold's release",
        Duration::from_secs(20),
        || async { cluster.get(0, "redlock:hc").await.is_none() },
    )
    .await;
    agent
        .acquire_ok("hc", serde_json::json!({"ttl_ms": 1000}))
        .await;
}

/// Two requests in one write, and one request in two writes, are each
/// answered once, in order, on the same connection: bytes hyper read but
/// had not parsed are never lost between hyper connections.
#[tokio::test]
async fn pipelined_and_split_requests_are_answered_in_order() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "").await;
    let mut conn = Conn::open(&agent).await;

    let mut two = get("/healthz");
    two.extend_from_slice(&get("/v1/summary"));
    conn.send(&two).await;
    let (status, healthz) = conn.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{healthz}");
    let (status, summary) = conn.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{summary}");
    assert!(summary.get("waiters").is_some(), "{summary}");

    let request = post("/v1/locks/s/acquire", r#"{"ttl_ms": 5000}"#);
    let (first, second) = request.split_at(20);
    conn.send(first).await;
    conn.send(second).await;
    let (status, grant) = conn.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{grant}");
    assert!(grant["token"].is_string(), "{grant}");

    // And the connection is still usable afterwards.
    conn.send(&get("/healthz")).await;
    let (status, _) = conn.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK");
}

/// A request a late body carries: an acquire that must never run, since
/// it is only the body of the request before it.
const SMUGGLED: &str =
    "POST /v1/locks/smuggled/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n";

/// A request whose answer needs nothing from its body, sent as its head
/// first and its body later: the head, the body, and the answer expected
/// (status line, and the error code when it is an error).
struct LateBody {
    head: String,
    body: Vec<u8>,
    status: &'static str,
    code: Option<&'static str>,
}

impl LateBody {
    /// `method path` with `body` as its body.
    fn new(method: &str, path: &str, body: Vec<u8>, status: &'static str) -> LateBody {
        LateBody {
            head: format!(
                "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            ),
            body,
            status,
            code: None,
        }
    }

    fn error(mut self, code: &'static str) -> LateBody {
        self.code = Some(code);
        self
    }
}

/// Every answer the agent can give without the request's body (the wrong
/// socket, no such route, the wrong method, a malformed resource, a body
/// declared too large, a route that takes no body) still ends that
/// request: its body, arriving after the head and itself shaped as a
/// request, is never parsed as the next request nor run. The connection
/// then answers the next request (or the agent closed it after saying so,
/// and a new connection does): one answer per request.
#[tokio::test]
async fn a_late_body_is_never_taken_for_the_next_request() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "").await;
    let smuggled = || SMUGGLED.as_bytes().to_vec();
    let mut too_large = smuggled();
    too_large.resize(70_000, b' ');
    let cases = [
        LateBody::new("POST", "/v1/locks/x/force-release", smuggled(), "403").error("forbidden"),
        LateBody::new("POST", "/v1/nothing", smuggled(), "404").error("not_found"),
        LateBody::new("PUT", "/v1/locks/x/acquire", smuggled(), "405").error("method_not_allowed"),
        LateBody::new("POST", "/v1/locks/a/b/acquire", smuggled(), "400").error("invalid_resource"),
        LateBody::new("POST", "/v1/locks/x/acquire", too_large, "413").error("body_too_large"),
        LateBody::new("GET", "/healthz", smuggled(), "200"),
        LateBody::new("POST", "/v1/locks/x/force-release", b"{}".to_vec(), "403")
            .error("forbidden"),
    ];
    for case in cases {
        let what = case.head.lines().next().unwrap().to_string();
        let mut conn = Conn::open(&agent).await;
        conn.send(case.head.as_bytes()).await;
        // The body comes late: after any answer sent without it has gone
        // out, and the connection has gone idle.
        tokio::time::sleep(Duration::from_millis(200)).await;
        conn.send_late(&case.body).await;
        conn.send_late(&get("/healthz")).await;

        let (head, answer) = conn
            .answer()
            .await
            .unwrap_or_else(|| panic!("{what}: no answer"));
        assert!(
            head.starts_with(&format!("HTTP/1.1 {}", case.status)),
            "{what}: {head}{answer}"
        );
        if let Some(code) = case.code {
            assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
        }
        match conn.answer().await {
            Some((head, answer)) => {
                assert!(
                    head.starts_with("HTTP/1.1 200"),
                    "{what}, then: {head}{answer}"
                );
                assert_eq!(answer, serde_json::json!({"status": "ok"}), "{what}, then");
            }
            None => {
                let mut fresh = Conn::open(&agent).await;
                fresh.send(&get("/healthz")).await;
                let (status, answer) = fresh.response().await;
                assert_eq!(status, "HTTP/1.1 200 OK", "{what}, then anew: {answer}");
            }
        }
        assert!(
            conn.quiet_for(Duration::from_millis(300)).await,
            "{what}: a third answer for two requests: {:?}",
            String::from_utf8_lossy(&conn.buffer)
        );
        assert_eq!(
            cluster.get(0, "redlock:smuggled").await,
            None,
            "{what}: the body was run as a request"
        );
    }
}

/// A body that stops short of its length (the client stalls) is answered
/// once `socket.request_timeout` has passed, with `connection: close`, and
/// the connection is closed, so the rest of that body, should it come, is
/// never read as a request: a route that reads bodies answers 408, one
/// that reads none (a `GET`) answers as it would without a body, and a
/// request with no route its 404.
#[tokio::test]
async fn a_body_cut_short_is_answered_and_its_connection_closed() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start_with(|socket| {
        cluster.config_yaml(socket, "").replacen(
            "socket:\n",
            "socket:\n  request_timeout: 300ms\n",
            1,
        )
    })
    .await;
    for (method, path, status, code) in [
        (
            "POST",
            "/v1/locks/x/acquire",
            "408",
            Some("request_timeout"),
        ),
        ("GET", "/healthz", "200", None),
        ("POST", "/v1/nothing", "404", Some("not_found")),
    ] {
        let what = format!("{method} {path}");
        let mut conn = Conn::open(&agent).await;
        conn.send(
            format!("{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{{}}")
                .as_bytes(),
        )
        .await;
        let (head, answer) = conn
            .answer()
            .await
            .unwrap_or_else(|| panic!("{what}: no answer"));
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "{what}: {head}{answer}"
        );
        assert!(
            head.lines().any(|l| l == "connection: close"),
            "{what}: {head}"
        );
        match code {
            Some(code) => assert_eq!(answer["error"]["code"], code, "{what}: {answer}"),
            None => assert_eq!(answer, serde_json::json!({"status": "ok"}), "{what}"),
        }
        conn.send_late(SMUGGLED.as_bytes()).await;
        assert!(
            conn.closed_within(Duration::from_secs(10)).await,
            "{what}: the connection stays open"
        );
    }
}

/// An idle connection is closed after `socket.request_timeout`, as before
/// idle connections were parked: one that was answered, and one that never
/// sent anything; a connection at work is not.
#[tokio::test]
async fn idle_connections_are_closed_after_the_request_timeout() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start_with(|socket| {
        cluster.config_yaml(socket, "").replacen(
            "socket:\n",
            "socket:\n  request_timeout: 300ms\n",
            1,
        )
    })
    .await;
    let mut answered = Conn::open(&agent).await;
    answered.send(&get("/healthz")).await;
    let (status, _) = answered.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let mut silent = Conn::open(&agent).await;
    assert!(answered.closed_within(Duration::from_secs(10)).await);
    assert!(silent.closed_within(Duration::from_secs(10)).await);

    // A hold streams for longer than the timeout on its connection.
    let mut hold = agent.hold("long", serde_json::json!({"ttl_ms": 300})).await;
    assert_eq!(hold.status, hyper::StatusCode::OK);
    for _ in 0..6 {
        let event = hold.next(Duration::from_secs(5)).await.unwrap();
        assert_ne!(event["event"], "lost", "{event}");
    }
}

/// Stopping the agent closes idle connections at once and lets the
/// request in progress on another finish first.
#[tokio::test]
async fn shutdown_closes_idle_connections_and_finishes_a_waiting_request() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "").await;
    let mut idle = Conn::open(&agent).await;
    idle.send(&get("/healthz")).await;
    let (status, _) = idle.response().await;
    assert_eq!(status, "HTTP/1.1 200 OK");

    agent
        .acquire_ok("busy", serde_json::json!({"ttl_ms": 10000}))
        .await;
    let mut waiting = Conn::open(&agent).await;
    waiting
        .send(&post("/v1/locks/busy/acquire", r#"{"wait_ms": 20000}"#))
        .await;
    wait_for("the waiter", Duration::from_secs(5), || async {
        agent.get("/v1/summary").await.unwrap().1["waiters"] == 1
    })
    .await;

    let stopped = tokio::spawn(agent.stop());
    assert!(
        idle.closed_within(Duration::from_secs(10)).await,
        "the idle connection is closed on shutdown"
    );
    // The waiter gets an answer (not a dropped connection) before the end.
    let head = waiting.head().await;
    assert!(head.starts_with("HTTP/1.1 "), "{head}");
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("the drain ends")
        .unwrap();
}

/// The name of every connection on master `i` (`CLIENT LIST`), sorted;
/// unnamed ones as "".
async fn client_names(cluster: &Cluster, i: usize) -> Vec<String> {
    let mut conn = cluster.redis(i).await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut names: Vec<String> = list
        .lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("name="))
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// On a master, the agent's connections carry its name and their purpose
/// (`CLIENT SETNAME`): the lock commands' and, once used, the listings'.
#[tokio::test]
async fn the_agents_connections_are_named_after_it_and_their_purpose() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "").await;
    let name = agent.config.agent.name.clone();
    agent.client.locks().await.expect("a listing");
    let names = client_names(&cluster, 0).await;
    for purpose in ["locks", "listings"] {
        let wanted = format!("redlock-agent:{name}:{purpose}");
        assert!(
            names.contains(&wanted),
            "{wanted} in CLIENT LIST: {names:?}"
        );
    }
}
