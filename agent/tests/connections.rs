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

    /// Reads until `buffer` holds `n` bytes; panics on end of stream.
    async fn fill(&mut self, n: usize) {
        while self.buffer.len() < n {
            let mut chunk = [0u8; 4096];
            let read = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
                .await
                .expect("an answer within 10s")
                .unwrap();
            assert!(
                read > 0,
                "the agent closed the connection: {:?}",
                String::from_utf8_lossy(&self.buffer)
            );
            self.buffer.extend_from_slice(&chunk[..read]);
        }
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
