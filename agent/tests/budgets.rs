//! Every listener has a budget, the metrics port included: a flood of TCP
//! connections to `metrics.listen` never takes the descriptors the socket
//! and the masters need. The real binary runs as a child process with
//! RLIMIT_NOFILE at 1,024 (set between fork and exec), over five real
//! masters; this process opens 1,500 connections to its metrics port and
//! keeps them open. The control lifts the metrics budget with the test
//! switch `REDLOCK_TEST_NO_METRICS_BUDGET=1` and shows the same flood
//! starving the socket, as it did before the budget.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::{wait_for, Cluster};
use hyper::{Method, StatusCode};
use redlock_testkit::switches::NO_METRICS_BUDGET;
use serde_json::{json, Value};

/// The agent's open-files limit, soft and hard.
const NOFILE: u64 = 1024;

/// Connections opened to the metrics port: more than the agent has
/// descriptors.
const FLOOD: usize = 1500;

/// `metrics.max_connections` by default.
const METRICS_BUDGET: usize = 64;

/// Long enough for any answer on a busy machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// The agent as a child process, killed when dropped.
struct Agent {
    child: tokio::process::Child,
    socket: PathBuf,
    metrics: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    /// Starts the agent over `cluster` with RLIMIT_NOFILE at [`NOFILE`];
    /// `budget: false` sets the test switch that lifts the metrics budget.
    async fn start(cluster: &Cluster, budget: bool) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let port = redlock_testkit::free_port().unwrap();
        let metrics: SocketAddr = ([127, 0, 0, 1], port).into();
        let yaml = cluster
            // The masters are fresh: no quarantine for their low uptime.
            .config_yaml(&socket, "delayed_restart:\n  enabled: false\n")
            .replace("listen: \"127.0.0.1:0\"", &format!("listen: \"{metrics}\""))
            .replace("level: debug", "level: info")
            // Connections of the flood that the agent keeps are not closed
            // for idling while the test runs.
            .replacen("socket:\n", "socket:\n  request_timeout: 600s\n", 1);
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, yaml).unwrap();
        let log = dir.path().join("agent.log");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlock-agent"));
        command
            .arg("--config")
            .arg(&config)
            .env_remove("REDLOCK_LOG")
            .env_remove(NO_METRICS_BUDGET)
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true);
        if !budget {
            command.env(NO_METRICS_BUDGET, "1");
        }
        // SAFETY: between fork and exec only setrlimit runs, which is
        // async-signal-safe and touches only the struct passed.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: NOFILE,
                    rlim_max: NOFILE,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let agent = Agent {
            child,
            socket,
            metrics,
            log,
            _dir: dir,
        };
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", agent.pid())).unwrap();
        let open_files = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .expect("the open files line");
        assert_eq!(
            open_files.split_whitespace().collect::<Vec<_>>()[3..5],
            ["1024", "1024"],
            "{open_files}"
        );
        wait_for("the agent to serve", PATIENCE, || async {
            matches!(
                common::request(&agent.socket, Method::GET, "/v1/nodes", Bytes::new()).await,
                Ok((StatusCode::OK, ref body)) if body["available"] == true
            )
        })
        .await;
        agent
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("the agent runs")
    }

    /// Descriptors the agent has open now.
    fn descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// One request on the socket, given up after `limit`.
    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Value,
        limit: Duration,
    ) -> Result<(StatusCode, Value), String> {
        let body = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(body.to_string())
        };
        tokio::time::timeout(limit, common::request(&self.socket, method, path, body))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// This process needs more than [`FLOOD`] descriptors: its soft limit is
/// raised to its hard limit.
fn raise_own_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    assert!(
        limit.rlim_cur >= FLOOD as u64 + 512,
        "the tests need {} open files (ulimit -Hn is {})",
        FLOOD + 512,
        limit.rlim_cur
    );
}

/// Opens [`FLOOD`] TCP connections to `addr`, 100 at a time, and returns
/// those that connected (a connect still unanswered after `patience`, the
/// listen backlog being full, is given up). They send nothing and stay
/// open until dropped.
async fn flood(addr: SocketAddr, patience: Duration) -> Vec<tokio::net::TcpStream> {
    let mut open = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD / 100 {
        let batch: Vec<_> = (0..100)
            .map(|_| {
                tokio::spawn(async move {
                    tokio::time::timeout(patience, tokio::net::TcpStream::connect(addr)).await
                })
            })
            .collect();
        for connect in batch {
            if let Ok(Ok(stream)) = connect.await.unwrap() {
                open.push(stream);
            }
        }
    }
    open
}

/// `redlock_connections_refused_total{listener, reason}` in a scrape.
fn refused(metrics: &str, listener: &str, reason: &str) -> f64 {
    let series = format!(
        "redlock_connections_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series}in\n{metrics}"))
}

/// `/metrics`, scraped on the Unix socket (the metrics port may be full).
async fn scrape(socket: &Path) -> String {
    use http_body_util::{BodyExt, Full};
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::get("/metrics")
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// `GET /healthz` on the metrics port: the status, or why there was none.
async fn tcp_healthz(addr: SocketAddr) -> Result<StatusCode, String> {
    use http_body_util::Full;
    let attempt = async {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let request = hyper::Request::get("/healthz")
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        Ok(response.status())
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .unwrap_or_else(|_| Err("no answer within 10s".into()))
}

/// 1,500 connections to the metrics port of an agent with 1,024
/// descriptors: it serves 64 of them and closes the rest at once, each
/// refusal counted and only a few logged; the socket still answers
/// `/healthz` and grants a lock on five masters. The socket's own budget
/// was cut at start to fit the limit (and said so). Once the flood closes,
/// the metrics port answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_metrics_connections_leaves_the_socket_and_masters_working() {
    raise_own_limit();
    let cluster = Cluster::start(5);
    let agent = Agent::start(&cluster, true).await;
    let log = agent.log();
    assert!(
        log.contains("cannot hold socket.max_connections (16384)"),
        "the cut budget is logged: {log}"
    );

    let open = flood(agent.metrics, PATIENCE).await;
    assert_eq!(
        open.len(),
        FLOOD,
        "every connection is taken, to be served or closed"
    );
    let expected = (FLOOD - METRICS_BUDGET) as f64;
    wait_for("every refusal of the flood", PATIENCE, || async {
        refused(&scrape(&agent.socket).await, "metrics", "max_connections") >= expected
    })
    .await;
    assert_eq!(
        refused(&scrape(&agent.socket).await, "metrics", "max_connections"),
        expected,
        "{METRICS_BUDGET} served, the rest refused"
    );
    assert!(
        agent.descriptors() < NOFILE as usize / 2,
        "the agent has {} descriptors open",
        agent.descriptors()
    );

    let (status, body) = agent
        .request(Method::GET, "/healthz", Value::Null, PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("/healthz on the socket: {e}"));
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = agent
        .request(
            Method::POST,
            "/v1/locks/budget/acquire",
            json!({"ttl_ms": 30000}),
            PATIENCE,
        )
        .await
        .unwrap_or_else(|e| panic!("acquire on the socket: {e}"));
    assert_eq!(status, StatusCode::OK, "granted on the masters: {body}");
    assert!(body["token"].is_string(), "{body}");

    let refusals = agent
        .log()
        .lines()
        .filter(|l| l.contains("connection refused") && l.contains("metrics.max_connections"))
        .count();
    assert!(
        (1..100).contains(&refusals),
        "{refusals} log lines for {expected} refusals"
    );

    drop(open);
    wait_for("the metrics port to answer again", PATIENCE, || async {
        tcp_healthz(agent.metrics).await == Ok(StatusCode::OK)
    })
    .await;
}

/// The control: the same flood with the metrics budget lifted
/// (`REDLOCK_TEST_NO_METRICS_BUDGET=1`) takes every descriptor the agent
/// has, and the socket neither answers `/healthz` nor grants a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_metrics_budget_the_flood_starves_the_socket() {
    raise_own_limit();
    let cluster = Cluster::start(5);
    let agent = Agent::start(&cluster, false).await;
    assert!(
        agent
            .log()
            .contains("REDLOCK_TEST_NO_METRICS_BUDGET is set"),
        "{}",
        agent.log()
    );
    // The flood is held open (and the agent's idle timeout is 600 s): no
    // descriptor comes back while the test runs. Past the agent's
    // descriptors and its listen backlog connects go unanswered: they are
    // given up sooner, and the flood goes on while the agent has any left.
    let mut open = Vec::new();
    let deadline = std::time::Instant::now() + 2 * PATIENCE;
    loop {
        open.extend(flood(agent.metrics, Duration::from_secs(2)).await);
        let settled = std::time::Instant::now() + Duration::from_secs(10);
        while agent.descriptors() < NOFILE as usize - 4 && std::time::Instant::now() < settled {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if agent.descriptors() >= NOFILE as usize - 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent still has descriptors: {} open after {} connections",
            agent.descriptors(),
            open.len()
        );
    }
    let healthz = agent
        .request(
            Method::GET,
            "/healthz",
            Value::Null,
            Duration::from_secs(10),
        )
        .await;
    assert!(
        !matches!(healthz, Ok((StatusCode::OK, _))),
        "/healthz answered: {healthz:?}"
    );
    let acquire = agent
        .request(
            Method::POST,
            "/v1/locks/budget/acquire",
            json!({"ttl_ms": 30000}),
            Duration::from_secs(10),
        )
        .await;
    assert!(
        !matches!(acquire, Ok((StatusCode::OK, _))),
        "a lock was granted: {acquire:?}"
    );
    drop(open);
}
