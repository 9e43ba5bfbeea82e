//! Test harness: real `redis-server` masters on free loopback ports (from
//! `redlock-testkit`), the agent in-process on a temp socket, and calls on
//! its socket.
//!
//! Calls that use the API as applications do (acquire, hold, nodes, force
//! release) go through `redlock-client`, the one client of the socket. The
//! raw helper ([`request`], and [`TestAgent::get`], [`TestAgent::post`],
//! [`TestAgent::request`] over it) stays for the tests of the API itself:
//! they assert on status codes, headers and bodies exactly as the agent sent
//! them, and send what no client sends (unknown fields, bad JSON, odd paths).
#![allow(dead_code)] // each test binary uses a different part of it

pub mod tls;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use redlock_agent::config::AddressCheck;
use redlock_agent::Config;
use redlock_client::{AcquireOptions, HoldOptions};
use redlock_testkit::RedisServer;
use redlock_wire::{AcquireRequest, ErrorBody, ErrorResponse, HoldEvent, HoldRequest};
use serde_json::Value;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

/// Short TTLs and probes: the lock and health sections most tests of
/// restarts and lost keys run with. The node timeout is the most
/// default_ttl allows (a tenth), for a machine busy at twice its cores.
pub const SHORT: &str = "lock:\n  default_ttl: 2s\n  max_ttl: 2s\n  node_timeout: 200ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\n";

/// [`SHORT`] with `delayed_restart.extra: 500ms`, so a quarantine
/// (max_ttl + extra = 2.5s) passes quickly.
pub const SHORT_QUARANTINE: &str = "lock:\n  default_ttl: 2s\n  max_ttl: 2s\n  node_timeout: 200ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 500ms\n";

/// The entry of master `name` in a `/v1/nodes` answer.
pub fn node<'a>(nodes: &'a Value, name: &str) -> &'a Value {
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name} in {nodes}"))
}

/// How long a test's client call may take beyond the wait it asks for:
/// long, since the machine running the tests may be busy.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a test's own connection to a master may take to connect and
/// each command to answer. The client's defaults (1s to connect, its
/// handshake included, and 500ms per answer) are deadlines a busy machine
/// misses: the test then fails on its own read, not on what it checks.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(10);

/// A direct connection to the Redis server at `url`, with
/// [`REDIS_TIMEOUT`]; panics naming `url` if it cannot be made.
pub async fn redis_at(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(REDIS_TIMEOUT))
        .set_response_timeout(Some(REDIS_TIMEOUT));
    redis::Client::open(url)
        .unwrap_or_else(|e| panic!("{url}: {e}"))
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// N masters in one temp dir; each is killed when the cluster drops.
pub struct Cluster {
    pub masters: Vec<RedisServer>,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    pub fn start(n: usize) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let masters = (1..=n)
            .map(|i| {
                RedisServer::start(dir.path(), &format!("r{i}")).unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        Cluster { masters, dir }
    }

    /// A direct connection to master `i`, to look at keys behind the agent.
    pub async fn redis(&self, i: usize) -> redis::aio::MultiplexedConnection {
        redis_at(&self.masters[i].url()).await
    }

    /// `GET key` on master `i`.
    pub async fn get(&self, i: usize, key: &str) -> Option<String> {
        let mut conn = self.redis(i).await;
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap()
    }

    /// `SET key value PX ttl_ms` on master `i`, as a foreign holder would.
    pub async fn plant(&self, i: usize, key: &str, value: &str, ttl_ms: u64) {
        let mut conn = self.redis(i).await;
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut conn)
            .await
            .unwrap();
    }

    /// `INFO commandstats` of master `m` as command -> calls, `info`
    /// itself included.
    pub async fn command_calls(&self, m: usize) -> std::collections::HashMap<String, u64> {
        let mut conn = self.redis(m).await;
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("cmdstat_"))
            .filter_map(|l| {
                let (name, rest) = l.split_once(':')?;
                let calls = rest
                    .strip_prefix("calls=")?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                Some((name.to_string(), calls))
            })
            .collect()
    }

    /// The config YAML for an agent over these masters, plus `extra` YAML
    /// appended (sections not otherwise set).
    pub fn config_yaml(&self, socket: &Path, extra: &str) -> String {
        let mut yaml = format!(
            "socket:\n  path: {:?}\nmetrics:\n  listen: \"127.0.0.1:0\"\nlog:\n  level: debug\nmasters:\n",
            socket.display().to_string()
        );
        for m in &self.masters {
            yaml.push_str(&format!("  - name: {}\n    url: {}\n", m.name(), m.url()));
        }
        yaml.push_str(extra);
        yaml
    }
}

/// The agent running in-process; stopped when dropped.
pub struct TestAgent {
    pub socket: PathBuf,
    /// The admin socket (force release), `admin.sock` beside `socket`
    /// unless the config says otherwise.
    pub admin: PathBuf,
    pub metrics: std::net::SocketAddr,
    pub config: Config,
    /// A client of the application socket.
    pub client: redlock_client::Client,
    /// A client of the admin socket.
    pub admin_client: redlock_client::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl TestAgent {
    /// Starts an agent over `cluster` with `extra` config YAML (for example
    /// a `lock:` section) and waits until it answers on its socket.
    pub async fn start(cluster: &Cluster, extra: &str) -> TestAgent {
        TestAgent::start_with(|socket| cluster.config_yaml(socket, extra)).await
    }

    /// As [`TestAgent::start`], but the agent treats the masters as it would
    /// in production: it does not know they started empty, so their low
    /// uptime at first sight puts them in quarantine.
    pub async fn start_cautious(cluster: &Cluster, extra: &str) -> TestAgent {
        TestAgent::launch(
            |socket| cluster.config_yaml(socket, extra),
            false,
            AddressCheck::Resolve,
        )
        .await
    }

    /// As [`TestAgent::start_cautious`], with the whole config YAML that
    /// `yaml` makes (masters given as Redis Clusters, say): new clusters'
    /// slots, without markers, are quarantined at first sight.
    pub async fn start_cautious_with(yaml: impl FnOnce(&Path) -> String) -> TestAgent {
        TestAgent::launch(yaml, false, AddressCheck::Resolve).await
    }

    /// Starts an agent whose whole config YAML `yaml` makes, given the
    /// socket path to use.
    pub async fn start_with(yaml: impl FnOnce(&Path) -> String) -> TestAgent {
        TestAgent::launch(yaml, true, AddressCheck::Resolve).await
    }

    /// As [`TestAgent::start_with`], but the config may list one server
    /// twice (which `check` and start-up refuse), to test what the agent
    /// does when it meets such masters at run time.
    pub async fn start_sharing_servers(yaml: impl FnOnce(&Path) -> String) -> TestAgent {
        TestAgent::launch(yaml, true, AddressCheck::Skip).await
    }

    async fn launch(
        yaml: impl FnOnce(&Path) -> String,
        masters_fresh: bool,
        check: AddressCheck,
    ) -> TestAgent {
        init_tracing();
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("agent.sock");
        let yaml = yaml(&socket);
        let config = Config::from_yaml_with(&yaml, check).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let bound = redlock_agent::Bound::bind_with(config.clone(), masters_fresh)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let metrics = bound.metrics_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(bound.serve(async {
            let _ = stopped.await;
        }));
        let agent = TestAgent {
            admin: config.admin.socket.path.clone(),
            client: redlock_client::Client::new(&socket).with_timeout(CLIENT_TIMEOUT),
            admin_client: redlock_client::Client::new(&config.admin.socket.path)
                .with_timeout(CLIENT_TIMEOUT),
            socket,
            metrics,
            config,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        };
        agent.wait_ready().await;
        agent
    }

    /// Until `/healthz` answers on the application socket, or on the admin
    /// socket: an agent that keeps tokens to pods refuses this process,
    /// which runs in no pod, on the application socket.
    async fn wait_ready(&self) {
        wait_for(
            "the agent to answer /healthz",
            Duration::from_secs(10),
            || async {
                let healthy = |answer: Result<(StatusCode, Value), String>| {
                    matches!(answer, Ok((StatusCode::OK, _)))
                };
                healthy(self.get("/healthz").await)
                    || healthy(request(&self.admin, Method::GET, "/healthz", Bytes::new()).await)
            },
        )
        .await;
    }

    pub async fn request(&self, method: Method, path: &str, body: &str) -> (StatusCode, Value) {
        request(
            &self.socket,
            method.clone(),
            path,
            Bytes::from(body.to_string()),
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub async fn get(&self, path: &str) -> Result<(StatusCode, Value), String> {
        request(&self.socket, Method::GET, path, Bytes::new()).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.request(Method::POST, path, &body.to_string()).await
    }

    /// `POST path` on the admin socket.
    pub async fn admin_post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        request(
            &self.admin,
            Method::POST,
            path,
            Bytes::from(body.to_string()),
        )
        .await
        .unwrap_or_else(|e| panic!("POST {path} on the admin socket: {e}"))
    }

    /// Acquires through the client and returns the token, panicking on
    /// anything but a grant. `body` is an acquire request's JSON.
    pub async fn acquire_ok(&self, resource: &str, body: Value) -> String {
        let request: AcquireRequest = serde_json::from_value(body.clone())
            .unwrap_or_else(|e| panic!("not an acquire request ({e}): {body}"));
        let mut options = AcquireOptions::new();
        if let Some(ttl) = request.ttl_ms {
            options = options.ttl(millis(ttl));
        }
        if let Some(wait) = request.wait_ms {
            options = options.wait(millis(wait));
        }
        if let Some(owner) = request.owner {
            options = options.owner(owner);
        }
        if request.fence {
            options = options.fence();
        }
        if request.mode == redlock_wire::Mode::Shared {
            options = options.shared();
        }
        match self.client.acquire(resource, &options).await {
            Ok(grant) => grant.token,
            Err(e) => panic!("acquire {resource}: {e}"),
        }
    }

    /// `GET path` on the TCP metrics address: status and body text.
    pub async fn get_tcp(&self, path: &str) -> (StatusCode, String) {
        let stream = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let request = Request::get(path)
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// `GET /v1/nodes` through the client, as JSON for the tests to index.
    pub async fn nodes(&self) -> Value {
        let nodes = self.client.nodes().await.expect("nodes");
        // Cannot fail: a wire type of strings, numbers and lists.
        serde_json::to_value(nodes).expect("nodes as JSON")
    }

    /// Waits until `/v1/nodes` reports `usable` usable nodes.
    pub async fn wait_usable(&self, usable: u64) {
        wait_for(
            &format!("{usable} usable nodes"),
            Duration::from_secs(10),
            || async { self.nodes().await["usable"] == usable },
        )
        .await;
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("agent task");
        }
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A hold: its answer's status and, on 200, its events as they arrive
/// (`acquired` first). Dropping it closes the connection, which ends the
/// hold.
pub struct Hold {
    pub status: StatusCode,
    pub error: Option<Value>,
    stream: Option<HoldStream>,
}

// One per test stream: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum HoldStream {
    /// Through the client; `acquired` is still to be read by the test.
    Client {
        hold: redlock_client::Hold,
        acquired: Option<HoldEvent>,
    },
    /// A request the client cannot send, on a raw connection.
    Raw {
        body: hyper::body::Incoming,
        buffer: Vec<u8>,
    },
}

impl Hold {
    /// The next NDJSON event, or `None` when the stream ended or `limit`
    /// passed.
    pub async fn next(&mut self, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        match self.stream.as_mut()? {
            HoldStream::Client { hold, acquired } => {
                let event = match acquired.take() {
                    Some(event) => event,
                    None => tokio::time::timeout_at(deadline.into(), hold.next_event())
                        .await
                        .ok()?
                        .ok()??,
                };
                // Cannot fail: an enum of strings and numbers.
                Some(serde_json::to_value(event).expect("an event as JSON"))
            }
            HoldStream::Raw { body, buffer } => loop {
                if let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    return Some(serde_json::from_slice(&line).expect("an NDJSON line"));
                }
                let frame = tokio::time::timeout_at(deadline.into(), body.frame())
                    .await
                    .ok()??
                    .ok()?;
                if let Ok(data) = frame.into_data() {
                    buffer.extend_from_slice(&data);
                }
            },
        }
    }
}

impl TestAgent {
    /// `POST /v1/locks/{resource}/hold` with `body`: through the client
    /// when `body` is a hold request, raw otherwise (the tests of refused
    /// bodies).
    pub async fn hold(&self, resource: &str, body: Value) -> Hold {
        match serde_json::from_value::<HoldRequest>(body.clone()) {
            Ok(request) => self.hold_through_client(resource, request).await,
            Err(_) => self.hold_raw(resource, body).await,
        }
    }

    async fn hold_through_client(&self, resource: &str, request: HoldRequest) -> Hold {
        let mut options = HoldOptions::new().on_disconnect(request.on_disconnect);
        if let Some(ttl) = request.ttl_ms {
            options = options.ttl(millis(ttl));
        }
        if let Some(wait) = request.wait_ms {
            options = options.wait(millis(wait));
        }
        if let Some(owner) = request.owner {
            options = options.owner(owner);
        }
        if let Some(max_hold) = request.max_hold_ms {
            options = options.max_hold(millis(max_hold));
        }
        if request.fence {
            options = options.fence();
        }
        if let Some(token) = request.token {
            options = options.reenter(token);
        }
        if request.mode == redlock_wire::Mode::Shared {
            options = options.shared();
        }
        match self.client.hold(resource, &options).await {
            Ok(hold) => {
                let acquired = HoldEvent::Acquired {
                    token: hold.token().to_string(),
                    validity_ms: u64::try_from(hold.validity().as_millis()).unwrap(),
                    ttl_ms: u64::try_from(hold.ttl().as_millis()).unwrap(),
                    fence: hold.fence(),
                    permit: None,
                    hold_count: hold.hold_count(),
                };
                Hold {
                    status: StatusCode::OK,
                    error: None,
                    stream: Some(HoldStream::Client {
                        hold,
                        acquired: Some(acquired),
                    }),
                }
            }
            Err(e) => {
                let (status, message) = match &e {
                    redlock_client::Error::Api {
                        status, message, ..
                    } => (*status, message.clone()),
                    redlock_client::Error::Taken { message }
                    | redlock_client::Error::Lost { message } => (409, message.clone()),
                    redlock_client::Error::NoQuorum { message } => (503, message.clone()),
                    other => panic!("hold {resource}: {other}"),
                };
                let code = e.code().expect("an API error has a code");
                let error = ErrorResponse {
                    error: ErrorBody { code, message },
                };
                Hold {
                    status: StatusCode::from_u16(status).unwrap(),
                    // Cannot fail: a wire type of strings.
                    error: Some(serde_json::to_value(error).unwrap()),
                    stream: None,
                }
            }
        }
    }

    /// A hold whose body the client cannot send, on a raw connection.
    async fn hold_raw(&self, resource: &str, body: Value) -> Hold {
        self.stream(
            Method::POST,
            &format!("/v1/locks/{resource}/hold"),
            Some(body),
        )
        .await
    }

    /// A campaign for election `name`, its stream open (200).
    pub async fn campaign(&self, name: &str, body: Value) -> Hold {
        let path = format!("/v1/elections/{name}/campaign");
        let stream = self.stream(Method::POST, &path, Some(body)).await;
        assert_eq!(stream.status, StatusCode::OK, "{:?}", stream.error);
        stream
    }

    /// A request answered with an NDJSON stream (a hold, a permit's hold,
    /// a campaign, an observer), on a raw connection of its own: its
    /// status, and its events or error. Dropping it closes the connection.
    pub async fn stream(&self, method: Method, path: &str, body: Option<Value>) -> Hold {
        let stream = UnixStream::connect(&self.socket).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let body = body.map_or_else(String::new, |b| b.to_string());
        let request = Request::builder()
            .method(method)
            .uri(format!("http://localhost{path}"))
            .header("host", "localhost")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        if status == StatusCode::OK {
            assert_eq!(
                response.headers().get("content-type").unwrap(),
                "application/x-ndjson"
            );
            Hold {
                status,
                error: None,
                stream: Some(HoldStream::Raw {
                    body: response.into_body(),
                    buffer: Vec::new(),
                }),
            }
        } else {
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            Hold {
                status,
                error: Some(serde_json::from_slice(&bytes).unwrap()),
                stream: None,
            }
        }
    }
}

/// One HTTP/1.1 request on a fresh connection to a Unix socket: the raw
/// helper for the tests of the API itself (see the module's doc).
pub async fn request(
    socket: &Path,
    method: Method,
    path: &str,
    body: Bytes,
) -> Result<(StatusCode, Value), String> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = Request::builder()
        .method(method)
        .uri(format!("http://localhost{path}"))
        .header("host", "localhost")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("").to_string());
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    assert_eq!(
        content_type.as_deref(),
        Some("application/json"),
        "every answer is JSON: {status} {}",
        String::from_utf8_lossy(&bytes)
    );
    let json = serde_json::from_slice(&bytes)
        .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))?;
    Ok((status, json))
}

/// Polls `condition` until it holds or `limit` passes (then panics).
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REDLOCK_LOG")
                .unwrap_or_else(|_| "redlock_agent=debug".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Sets a test switch (an environment variable) for the agents started
/// while it lives; removes it when dropped. The agent reads its test
/// switches when it is built, so only agents started in that window see
/// it. Each test runs in its own process under nextest; under `cargo test`
/// another test of the same file starting an agent in the same instant
/// could see it too, which only control tests set, for a moment.
pub struct Switch(&'static str);

impl Switch {
    pub fn set(name: &'static str, value: &str) -> Switch {
        std::env::set_var(name, value);
        Switch(name)
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        std::env::remove_var(self.0);
    }
}

/// An acquire of `resource` with `body`, sent by another process (`curl`)
/// on `socket`: status code and the JSON answer. Blocking: call it off the
/// runtime that serves the agent.
pub fn acquire_from_another_process(socket: &Path, resource: &str, body: &Value) -> (u16, Value) {
    let output = std::process::Command::new("curl")
        .args(["--silent", "--show-error", "--unix-socket"])
        .arg(socket)
        .args(["--write-out", "\n%{http_code}", "--data"])
        .arg(body.to_string())
        .args(["-H", "content-type: application/json"])
        .arg(format!("http://agent/v1/locks/{resource}/acquire"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8(output.stdout).unwrap();
    let (answer, status) = text.rsplit_once('\n').expect("body, then the status");
    (
        status.trim().parse().unwrap_or_else(|_| panic!("{text}")),
        serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}")),
    )
}
