//! The client task against a fake agent on a temp socket: reconnecting with
//! backoff, per-endpoint errors, force release, a silent agent, a restart,
//! the semaphores and elections of a listing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_tui::client::{self, Command, Conn, Event, Options, Update};
use redlock_wire::{
    ErrorBody, ErrorCode, ErrorResponse, ForceReleaseResponse, LeaksResponse, NodeState,
    NodeStatus, NodesResponse, SummaryResponse,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A fake agent: answers the four GETs (404 for `/v1/locks`, as an agent
/// without that endpoint would) and force releases; or, when `silent`,
/// accepts and never answers.
struct FakeAgent {
    task: JoinHandle<()>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl FakeAgent {
    fn start(path: &Path, silent: bool) -> FakeAgent {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).expect("bind the fake agent");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        let task = tokio::spawn(async move {
            // Dropped with this task: every connection is cut, as when
            // the agent process exits.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.spawn(serve(stream, log.clone(), silent));
            }
        });
        FakeAgent { task, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        // Aborting the accept loop drops the listener and the JoinSet,
        // which aborts every connection task.
        self.task.abort();
    }
}

async fn serve(mut stream: UnixStream, log: Arc<Mutex<Vec<String>>>, silent: bool) {
    let mut buffer = Vec::new();
    loop {
        let mut chunk = [0_u8; 4096];
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buffer.extend_from_slice(&chunk[..n]);
        while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_string();
            buffer.drain(..end + 4);
            let line = head.lines().next().unwrap_or_default().to_string();
            let mut words = line.split(' ');
            let request = format!(
                "{} {}",
                words.next().unwrap_or(""),
                words.next().unwrap_or("")
            );
            log.lock().unwrap().push(request.clone());
            if silent {
                continue;
            }
            let (status, body) = answer(&request);
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if stream.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

fn answer(request: &str) -> (&'static str, String) {
    let json = |v: &dyn erased::Json| v.to_json();
    match request {
        "GET /v1/nodes" => (
            "200 OK",
            json(&NodesResponse {
                quorum: 2,
                usable: 3,
                available: true,
                reason: None,
                slots_without_quorum: 0,
                nodes: ["r1", "r2", "r3"]
                    .iter()
                    .map(|name| NodeStatus {
                        name: name.to_string(),
                        state: NodeState::Up,
                        latency_ms: Some(0.3),
                        last_error: None,
                        quarantine_remaining_ms: 0,
                        quarantine_ms: 0,
                        detector: None,
                        run_id: None,
                        uptime_s: None,
                        persistence: None,
                        warnings: Vec::new(),
                        kind: "single".to_string(),
                        shards: Vec::new(),
                        quarantined_slots: 0,
                        quarantined_slots_remaining_ms: 0,
                    })
                    .collect(),
            }),
        ),
        "GET /v1/locks" => (
            "404 Not Found",
            json(&ErrorResponse {
                error: ErrorBody {
                    code: ErrorCode::NotFound,
                    message: "no such endpoint: /v1/locks".into(),
                },
            }),
        ),
        "GET /v1/leaks" => (
            "200 OK",
            json(&LeaksResponse {
                scans: 0,
                interval_ms: 60_000,
                repair: "none".into(),
                nodes: Vec::new(),
                unread: Vec::new(),
                partial: false,
                ..Default::default()
            }),
        ),
        "GET /v1/summary" => (
            "200 OK",
            json(&SummaryResponse {
                version: "0.1.0".into(),
                uptime_ms: 1_000,
                acquires: Default::default(),
                failures: Default::default(),
                waits: Default::default(),
                wait_buckets: vec![(0.1, 0), (f64::MAX, 0)],
                locks_held: 0,
                waiters: 0,
                permits_held: 0,
                readers_held: 0,
                leaderships_held: 0,
                leadership_changes: Default::default(),
            }),
        ),
        "POST /v1/locks/a%2Fb/force-release" => (
            "200 OK",
            json(&ForceReleaseResponse {
                deleted: 3,
                failed: Vec::new(),
            }),
        ),
        // The listing under the prefix `prim`: a permit and a leadership.
        "GET /v1/locks?prefix=prim" => (
            "200 OK",
            r#"{"quorum":2,"masters":["r1","r2","r3"],"total":2,"truncated":false,
                "locks":[
                  {"resource":"prim-pay permit 0","owner":"w1","validity_ms":9000,"nodes":[],
                   "quorum_agrees":true,"held_here":false,"waiters":0},
                  {"resource":"prim-sched election","validity_ms":9000,"nodes":[],
                   "quorum_agrees":true,"held_here":false,"waiters":0}]}"#
                .to_string(),
        ),
        "GET /v1/semaphores/prim-pay" => (
            "200 OK",
            r#"{"semaphore":"prim-pay","limit":2,"waiters":0,
                "permits":[{"permit":0,"agent":"a1","owner":"w1","validity_ms":9000,"held_here":false}]}"#
                .to_string(),
        ),
        "GET /v1/elections/prim-sched" => (
            "404 Not Found",
            json(&ErrorResponse {
                error: ErrorBody {
                    code: ErrorCode::NoLeader,
                    message: "no campaigner leads prim-sched".into(),
                },
            }),
        ),
        _ => ("500 Internal Server Error", "{}".to_string()),
    }
}

/// Serializing the different wire types through one closure.
mod erased {
    pub trait Json {
        fn to_json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> String {
            serde_json::to_string(self).unwrap()
        }
    }
}

struct Client {
    events: mpsc::Receiver<Event>,
    commands: mpsc::Sender<Command>,
    task: JoinHandle<()>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn client(socket: PathBuf, timeout: Duration) -> Client {
    let (event_tx, events) = mpsc::channel(64);
    let (commands, command_rx) = mpsc::channel(8);
    let options = Options {
        socket,
        refresh: Duration::from_millis(100),
        timeout,
    };
    let task = client::spawn(options, event_tx, command_rx);
    Client {
        events,
        commands,
        task,
    }
}

impl Client {
    /// The first event `want` accepts within `within`; panics with the
    /// events seen on the way otherwise.
    async fn wait_for(&mut self, within: Duration, want: impl Fn(&Event) -> bool) -> Event {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) if want(&event) => return event,
                Ok(Some(event)) => seen.push(event),
                Ok(None) => panic!("the client task ended; saw {seen:#?}"),
                Err(_) => panic!("not seen within {within:?}; saw {seen:#?}"),
            }
        }
    }
}

fn socket_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("agent.sock")
}

/// No agent: Connecting, then Reconnecting after 1s with the error; a
/// force release meanwhile fails at once; once the agent appears the
/// client connects and every endpoint's answer arrives, the missing
/// endpoint as an error of its own.
#[tokio::test]
async fn reconnects_with_backoff_until_the_agent_appears() {
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_in(&dir);
    let mut client = client(socket.clone(), Duration::from_secs(2));
    client
        .wait_for(Duration::from_secs(2), |e| {
            *e == Event::Conn(Conn::Connecting { attempt: 0 })
        })
        .await;
    let event = client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(e, Event::Conn(Conn::Reconnecting { .. }))
        })
        .await;
    let Event::Conn(Conn::Reconnecting {
        retry_at,
        attempt,
        error,
    }) = event
    else {
        unreachable!()
    };
    assert_eq!(attempt, 1);
    assert!(error.starts_with("cannot connect to "), "{error}");
    let wait = retry_at.saturating_duration_since(Instant::now());
    assert!(
        wait > Duration::from_millis(500) && wait <= Duration::from_secs(1),
        "{wait:?}"
    );

    client
        .commands
        .send(Command::ForceRelease("a/b".into()))
        .await
        .unwrap();
    let released = client
        .wait_for(Duration::from_secs(1), |e| {
            matches!(e, Event::Released { .. })
        })
        .await;
    assert_eq!(
        released,
        Event::Released {
            resource: "a/b".into(),
            result: Err("not connected to the agent".into())
        }
    );

    let _agent = FakeAgent::start(&socket, false);
    client
        .wait_for(Duration::from_secs(5), |e| {
            *e == Event::Conn(Conn::Connected)
        })
        .await;
    let nodes = client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(
                e,
                Event::Polled {
                    update: Update::Nodes(_),
                    ..
                }
            )
        })
        .await;
    let Event::Polled {
        update: Update::Nodes(Ok(nodes)),
        ..
    } = nodes
    else {
        panic!("{nodes:?}")
    };
    assert_eq!(nodes.nodes.len(), 3);
    let locks = client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(
                e,
                Event::Polled {
                    update: Update::Locks(_),
                    ..
                }
            )
        })
        .await;
    assert_eq!(
        locks.clone(),
        Event::Polled {
            at: match locks {
                Event::Polled { at, .. } => at,
                _ => unreachable!(),
            },
            update: Update::Locks(Err(
                "GET /v1/locks: 404 not_found: no such endpoint: /v1/locks".into()
            )),
        }
    );
    client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(
                e,
                Event::Polled {
                    update: Update::Leaks(Ok(_), _),
                    ..
                }
            )
        })
        .await;
    client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(
                e,
                Event::Polled {
                    update: Update::Summary(Ok(_)),
                    ..
                }
            )
        })
        .await;
}

/// A force release goes out as one POST with the resource percent-encoded.
#[tokio::test]
async fn force_release_is_posted_with_the_resource_encoded() {
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_in(&dir);
    let agent = FakeAgent::start(&socket, false);
    let mut client = client(socket, Duration::from_secs(2));
    client
        .wait_for(Duration::from_secs(2), |e| {
            *e == Event::Conn(Conn::Connected)
        })
        .await;
    client
        .commands
        .send(Command::ForceRelease("a/b".into()))
        .await
        .unwrap();
    let released = client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(e, Event::Released { .. })
        })
        .await;
    assert_eq!(
        released,
        Event::Released {
            resource: "a/b".into(),
            result: Ok(ForceReleaseResponse {
                deleted: 3,
                failed: Vec::new()
            }),
        }
    );
    assert!(agent
        .requests()
        .contains(&"POST /v1/locks/a%2Fb/force-release".to_string()));
}

/// On the primitives view the client asks about each semaphore and
/// election named in the listing, in the same poll; an election nobody
/// leads (`404 no_leader`) is an answer, not an error.
#[tokio::test]
async fn the_names_in_the_listing_are_asked_about() {
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_in(&dir);
    let agent = FakeAgent::start(&socket, false);
    let (event_tx, mut events) = mpsc::channel(64);
    let (_commands, command_rx) = mpsc::channel(8);
    let (_query_tx, query) = tokio::sync::watch::channel(client::Query {
        prefix: "prim".into(),
        primitives: true,
        ..client::Query::default()
    });
    let options = Options {
        socket,
        refresh: Duration::from_millis(100),
        timeout: Duration::from_secs(2),
    };
    let task = client::spawn_with_query(options, event_tx, command_rx, query);
    let answers = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.recv().await {
                Some(Event::Polled {
                    update: Update::Primitives(answers, _),
                    ..
                }) => return answers,
                Some(_) => {}
                None => panic!("the client task ended"),
            }
        }
    })
    .await
    .expect("the primitives' answers within 5s");
    task.abort();
    assert_eq!(answers.semaphores.len(), 1);
    let (name, pay) = &answers.semaphores[0];
    assert_eq!(name, "prim-pay");
    let pay = pay.as_ref().expect("the semaphore's answer");
    assert_eq!((pay.limit, pay.permits.len()), (Some(2), 1));
    assert_eq!(
        answers.elections,
        [("prim-sched".to_string(), Ok(None))],
        "nobody leads"
    );
    let requests = agent.requests();
    for path in [
        "GET /v1/locks?prefix=prim",
        "GET /v1/semaphores/prim-pay",
        "GET /v1/elections/prim-sched",
    ] {
        assert!(requests.contains(&path.to_string()), "{path}: {requests:?}");
    }
}

/// An agent that accepts but never answers is given up on after the
/// timeout, and the client goes on retrying.
#[tokio::test]
async fn a_silent_agent_times_out_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_in(&dir);
    let agent = FakeAgent::start(&socket, true);
    let mut client = client(socket, Duration::from_millis(300));
    client
        .wait_for(Duration::from_secs(2), |e| {
            *e == Event::Conn(Conn::Connected)
        })
        .await;
    let event = client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(e, Event::Conn(Conn::Reconnecting { .. }))
        })
        .await;
    let Event::Conn(Conn::Reconnecting { error, .. }) = event else {
        unreachable!()
    };
    assert_eq!(error, "no answer within 300ms");
    client
        .wait_for(Duration::from_secs(3), |e| {
            *e == Event::Conn(Conn::Connected)
        })
        .await;
    assert!(agent.requests().iter().all(|r| r == "GET /v1/nodes"));
}

/// The agent going away and coming back: the open connection fails, the
/// client reports it and reconnects to the new agent.
#[tokio::test]
async fn an_agent_restart_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_in(&dir);
    let agent = FakeAgent::start(&socket, false);
    let mut client = client(socket.clone(), Duration::from_secs(2));
    client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(
                e,
                Event::Polled {
                    update: Update::Summary(_),
                    ..
                }
            )
        })
        .await;
    drop(agent);
    std::fs::remove_file(&socket).unwrap();
    client
        .wait_for(Duration::from_secs(3), |e| {
            matches!(e, Event::Conn(Conn::Reconnecting { .. }))
        })
        .await;
    let _agent = FakeAgent::start(&socket, false);
    client
        .wait_for(Duration::from_secs(5), |e| {
            *e == Event::Conn(Conn::Connected)
        })
        .await;
    client
        .wait_for(Duration::from_secs(2), |e| {
            matches!(
                e,
                Event::Polled {
                    update: Update::Nodes(Ok(_)),
                    ..
                }
            )
        })
        .await;
}
