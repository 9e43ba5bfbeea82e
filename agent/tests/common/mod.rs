//! Test harness: real `redis-server` masters on free loopback ports, the
//! agent in-process on a temp socket, and a small HTTP client for the socket.
#![allow(dead_code)] // each test binary uses a different part of it

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use redlock_agent::config::AddressCheck;
use redlock_agent::dev::RedisServer;
use redlock_agent::Config;
use serde_json::Value;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

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
        redis::Client::open(self.masters[i].url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.masters[i].name()))
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
    pub metrics: std::net::SocketAddr,
    pub config: Config,
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

    async fn wait_ready(&self) {
        wait_for(
            "the agent to answer /healthz",
            Duration::from_secs(10),
            || async { matches!(self.get("/healthz").await, Ok((StatusCode::OK, _))) },
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

    /// Acquires and returns the token, panicking on anything but 200.
    pub async fn acquire_ok(&self, resource: &str, body: Value) -> String {
        let (status, json) = self
            .post(&format!("/v1/locks/{resource}/acquire"), body)
            .await;
        assert_eq!(status, StatusCode::OK, "acquire {resource}: {json}");
        json["token"].as_str().expect("token").to_string()
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

    /// `GET /v1/nodes`.
    pub async fn nodes(&self) -> Value {
        self.get("/v1/nodes").await.expect("nodes").1
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

/// A hold: its answer's status and, on 200, its events as they arrive.
/// Dropping it closes the connection, which ends the hold.
pub struct Hold {
    pub status: StatusCode,
    pub error: Option<Value>,
    body: Option<hyper::body::Incoming>,
    buffer: Vec<u8>,
}

impl Hold {
    /// The next NDJSON event, or `None` when the stream ended or `limit`
    /// passed.
    pub async fn next(&mut self, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).expect("an NDJSON line"));
            }
            let body = self.body.as_mut()?;
            let frame = tokio::time::timeout_at(deadline.into(), body.frame())
                .await
                .ok()??
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }
}

impl TestAgent {
    /// `POST /v1/locks/{resource}/hold` with `body`.
    pub async fn hold(&self, resource: &str, body: Value) -> Hold {
        let stream = UnixStream::connect(&self.socket).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let request = Request::post(format!("http://localhost/v1/locks/{resource}/hold"))
            .header("host", "localhost")
            .body(Full::new(Bytes::from(body.to_string())))
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
                body: Some(response.into_body()),
                buffer: Vec::new(),
            }
        } else {
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            Hold {
                status,
                error: Some(serde_json::from_slice(&bytes).unwrap()),
                body: None,
                buffer: Vec::new(),
            }
        }
    }
}

/// One HTTP/1.1 request on a fresh connection to a Unix socket.
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
