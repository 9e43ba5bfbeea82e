//! A client that stops reading its stream, its connection open, on real
//! masters: its hold (or leadership) stays renewed, no other client gets
//! the lock (or is elected) meanwhile, and when it reads again it finds at
//! most one line written before it stopped, never a backlog of old
//! `renewed` events. The controls set `REDLOCK_TEST_RENEWALS_WAIT_FOR_CLIENT`
//! (renewals wait for the client, streams write whether or not it reads,
//! as before the fix) and find another client granted the lock, or
//! elected, while the first one's connection is open, and a backlog of old
//! renewals waiting in its socket. A renewal can fail on a machine too busy
//! for the 200 ms TTL: the stream then ends with `lost`, as any other, and
//! only a takeover never told `lost` is the fault.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, Switch, TestAgent};
use redlock_testkit::switches::RENEWALS_WAIT_FOR_CLIENT;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const MASTERS: usize = 3;

/// The stream's TTL: renewed every 67 ms, so a stalled client's socket
/// buffer (a few hundred small writes) fills well within [`STALL`] when
/// every renewal is written.
const TTL_MS: u64 = 200;

/// How long the client stops reading: longer than the controls take to be
/// taken over (about 22 s here: a few hundred renewals fill the socket).
const STALL: Duration = Duration::from_secs(30);

/// How long a control's client stops reading at most: it stops as soon as
/// another client gets in, which takes longer on a busy machine.
const CONTROL_STALL: Duration = Duration::from_secs(90);

/// A stream request on a raw connection, which this test reads (or not)
/// as it pleases.
struct RawStream {
    socket: UnixStream,
    /// Bytes read and not yet split into lines.
    pending: Vec<u8>,
}

impl RawStream {
    /// Sends `POST path` with `body` and reads up to the first event.
    async fn open(agent: &TestAgent, path: &str, body: &Value) -> (RawStream, Value) {
        let mut socket = UnixStream::connect(&agent.socket).await.unwrap();
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: agent\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut stream = RawStream {
            socket,
            pending: Vec::new(),
        };
        let first = loop {
            let events = stream.read_once(Duration::from_secs(10)).await;
            if let Some(first) = events.into_iter().next() {
                break first;
            }
        };
        (stream, first)
    }

    /// One read of whatever the socket holds (waiting up to `limit` for
    /// it), as the events it completes. HTTP chunk framing is skipped:
    /// every event is a line that starts with `{`.
    async fn read_once(&mut self, limit: Duration) -> Vec<Value> {
        let mut buffer = vec![0u8; 1 << 20];
        let read = tokio::time::timeout(limit, self.socket.read(&mut buffer)).await;
        if let Ok(Ok(n)) = read {
            self.pending.extend_from_slice(&buffer[..n]);
        }
        let mut events = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim();
            if line.starts_with('{') {
                events.push(serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")));
            }
        }
        events
    }
}

/// Two agents over one set of masters, renewals waiting for clients when
/// `wait` (the control).
async fn agents(cluster: &Cluster, wait: bool) -> (TestAgent, TestAgent, Option<Switch>) {
    let switch = wait.then(|| Switch::set(RENEWALS_WAIT_FOR_CLIENT, "1"));
    let first = TestAgent::start(cluster, "").await;
    let other = TestAgent::start(cluster, "").await;
    (first, other, switch)
}

/// What the stall came to.
#[derive(Debug)]
struct Stall {
    /// Another client got the lock (or was elected) during the stall.
    taken_over: bool,
    /// `renewed` events that waited in the socket, read at once when the
    /// client read again.
    waiting_renewals: usize,
    /// Any `lost` among them.
    lost: bool,
}

impl Stall {
    /// What a stall may come to: no line from before it but one, and no
    /// other client in unless this one is told `lost` when it reads again
    /// (a renewal can fail on a machine busy enough to answer later than
    /// a 200 ms TTL allows: the hold then ends as any other, saying so;
    /// renewals that stop unsaid while the connection is open are the
    /// fault).
    fn check(&self) {
        assert!(self.waiting_renewals <= 1, "{self:?}");
        assert!(
            !self.taken_over || self.lost,
            "another client got in and this one was never told lost: {self:?}"
        );
        if self.lost {
            eprintln!("the stream was lost (the machine too busy for the TTL): renewals during the stall were not checked");
        }
    }
}

/// Stops reading `stream` for `limit`, asking `taken_over` every half
/// second whether another client got in (and then no longer), then reads
/// once.
async fn stall<F, Fut>(stream: &mut RawStream, limit: Duration, mut taken_over: F) -> Stall
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + limit;
    let mut over = false;
    while Instant::now() < until && !over {
        tokio::time::sleep(Duration::from_millis(500)).await;
        over = taken_over().await;
    }
    // What waited in the socket comes in the first read; the lines after
    // it are written once it is read, so a `lost` the agent held back
    // meanwhile comes within the next reads.
    let waiting = stream.read_once(Duration::from_secs(5)).await;
    let mut lost = waiting.iter().any(|e| e["event"] == "lost");
    let until = Instant::now() + Duration::from_secs(2);
    while !lost && Instant::now() < until {
        let next = stream.read_once(Duration::from_millis(200)).await;
        lost = next.iter().any(|e| e["event"] == "lost");
    }
    Stall {
        taken_over: over,
        waiting_renewals: waiting.iter().filter(|e| e["event"] == "renewed").count(),
        lost,
    }
}

/// A hold whose client stops reading: returns what the stall came to.
async fn stalled_hold(wait: bool) -> Stall {
    let cluster = Cluster::start(MASTERS);
    let (first, other, _switch) = agents(&cluster, wait).await;
    let (mut stream, acquired) =
        RawStream::open(&first, "/v1/locks/stalled/hold", &json!({"ttl_ms": TTL_MS})).await;
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    let limit = if wait { CONTROL_STALL } else { STALL };
    let result = stall(&mut stream, limit, || async {
        let (status, _) = other
            .post("/v1/locks/stalled/acquire", json!({"ttl_ms": 10_000}))
            .await;
        status.is_success()
    })
    .await;
    if !wait && !result.lost {
        // Renewed and told so when it reads again (or told `lost`, on a
        // machine too busy for the TTL, see `Stall::check`).
        let fresh = stream.read_once(Duration::from_secs(5)).await;
        for event in fresh.iter().take_while(|e| e["event"] != "lost") {
            assert_eq!(event["event"], "renewed", "{event}");
            let validity = event["validity_ms"].as_u64().unwrap();
            assert!(validity > 0 && validity <= TTL_MS, "{event}");
        }
    }
    result
}

/// A leadership whose client stops reading: returns what the stall came
/// to.
async fn stalled_leader(wait: bool) -> Stall {
    let cluster = Cluster::start(MASTERS);
    let (first, other, _switch) = agents(&cluster, wait).await;
    let (mut stream, elected) = RawStream::open(
        &first,
        "/v1/elections/stalled/campaign",
        &json!({"ttl_ms": TTL_MS}),
    )
    .await;
    assert_eq!(elected["event"], "elected", "{elected}");
    let term = elected["term"].clone();
    // Another campaigner waits in line on the other agent; it is elected
    // only once the first leadership is gone.
    let _rival = other
        .stream(
            hyper::Method::POST,
            "/v1/elections/stalled/campaign",
            Some(json!({"ttl_ms": 10_000})),
        )
        .await;
    let limit = if wait { CONTROL_STALL } else { STALL };
    stall(&mut stream, limit, || async {
        match other.get("/v1/elections/stalled").await {
            Ok((status, leader)) => status.is_success() && leader["term"] != term,
            Err(_) => false,
        }
    })
    .await
}

#[tokio::test]
async fn a_hold_whose_client_stops_reading_stays_renewed_and_never_finds_old_renewals() {
    let stall = stalled_hold(false).await;
    eprintln!("after a {STALL:?} stall: {stall:?}");
    stall.check();
}

#[tokio::test]
async fn control_a_hold_whose_renewals_wait_for_its_client_is_taken_over() {
    let stall = stalled_hold(true).await;
    eprintln!("control: {stall:?}");
    assert!(stall.taken_over, "{stall:?}");
    assert!(stall.waiting_renewals > 1, "{stall:?}");
}

#[tokio::test]
async fn a_leader_whose_client_stops_reading_stays_leader_and_never_finds_old_renewals() {
    let stall = stalled_leader(false).await;
    eprintln!("after a {STALL:?} stall: {stall:?}");
    stall.check();
}

#[tokio::test]
async fn control_a_leader_whose_renewals_wait_for_its_client_is_replaced() {
    let stall = stalled_leader(true).await;
    eprintln!("control: {stall:?}");
    assert!(stall.taken_over, "{stall:?}");
    assert!(stall.waiting_renewals > 1, "{stall:?}");
}
