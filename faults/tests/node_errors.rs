//! Masters that answer with errors, against real `redis-server` processes
//! and the agent as a child process (JSON logs): OOM, READONLY, NOSCRIPT
//! after SCRIPT FLUSH, WRONGTYPE, NOAUTH and WRONGPASS. Each must be an
//! error of that master, never a `taken` vote; counted in
//! `redlock_node_errors_total{node,kind}`; logged once per cause and master,
//! not once per request.

use std::time::Duration;

use faults::client::{next_event, AcquireOptions, Answer, Client, Grant, HoldNext, HoldOptions};
use faults::cluster::{agent_binary, AgentProcess, AgentSettings};
use redlock_testkit::{free_port, RedisServer};
use redlock_wire::HoldEvent;
use serde_json::Value;

/// Masters and one agent over them (no proxies: faults here are in the
/// masters' answers).
struct Setup {
    masters: Vec<RedisServer>,
    agent: AgentProcess,
    _dir: tempfile::TempDir,
}

/// Starts `n` masters, `args(i)` extra arguments for master `i`, and an
/// agent whose URL for master `i` is `url(i, port)`.
async fn setup(
    n: usize,
    args: impl Fn(usize, &[RedisServer]) -> Vec<String>,
    url: impl Fn(usize, u16) -> String,
) -> Setup {
    setup_with(n, args, url, |_| {}).await
}

/// As [`setup`], running `before_agent` on the masters first.
async fn setup_with(
    n: usize,
    args: impl Fn(usize, &[RedisServer]) -> Vec<String>,
    url: impl Fn(usize, u16) -> String,
    before_agent: impl FnOnce(&[RedisServer]),
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut masters: Vec<RedisServer> = Vec::new();
    for i in 0..n {
        let extra = args(i, &masters);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let server = RedisServer::start_with(dir.path(), &format!("r{}", i + 1), &extra)
            .unwrap_or_else(|e| panic!("{e}"));
        masters.push(server);
    }
    before_agent(&masters);
    let urls: Vec<(String, String)> = masters
        .iter()
        .enumerate()
        .map(|(i, m)| (m.name().to_string(), url(i, m.port())))
        .collect();
    let settings = AgentSettings {
        key_prefix: "err:".into(),
        default_ttl: Duration::from_secs(1),
        max_ttl: Duration::from_secs(1),
        restart_extra: Duration::from_millis(200),
        ..AgentSettings::default()
    };
    let socket = dir.path().join("agent.sock");
    let port = free_port().unwrap();
    let yaml = settings.yaml(&socket, port, &urls);
    let mut agent = AgentProcess::spawn(
        &agent_binary().unwrap_or_else(|e| panic!("{e}")),
        dir.path(),
        "agent",
        socket,
        port,
        &yaml,
    )
    .unwrap();
    agent
        .wait_ready(Duration::from_secs(15))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    Setup {
        masters,
        agent,
        _dir: dir,
    }
}

/// One inline command over a plain TCP connection; the reply must be `+OK`.
fn inline(port: u16, command: &str) {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    assert!(line.starts_with("+OK"), "{command}: {line}");
}

fn plain(_: usize, port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

fn no_args(_: usize, _: &[RedisServer]) -> Vec<String> {
    Vec::new()
}

impl Setup {
    fn client(&self) -> Client {
        self.agent.client()
    }

    async fn redis(&self, i: usize) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.masters[i].url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    async fn cmd(&self, i: usize, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let mut conn = self.redis(i).await;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query_async(&mut conn).await
    }

    /// Waits until `/v1/nodes` reports at least `usable` usable masters.
    async fn wait_usable(&self, usable: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(nodes) = self.client().nodes().await {
                if nodes.usable as u64 >= usable {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "never {usable} usable masters: {nodes:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `redlock_node_errors_total{node, kind}` now.
    async fn errors(&self, node: &str, kind: &str) -> u64 {
        let text = self.agent.scrape().await.expect("scrape");
        text.lines()
            .filter(|l| l.starts_with("redlock_node_errors_total{"))
            .filter(|l| {
                l.contains(&format!("node=\"{node}\"")) && l.contains(&format!("kind=\"{kind}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    }

    /// The agent's WARN and ERROR log lines about `node` that name `word`.
    fn warnings(&self, node: &str, word: &str) -> Vec<String> {
        self.agent
            .log_text()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| matches!(l["level"].as_str(), Some("WARN" | "ERROR")))
            .filter(|l| l["fields"]["node"].as_str() == Some(node))
            .map(|l| l.to_string())
            .filter(|l| l.to_ascii_lowercase().contains(word))
            .collect()
    }

    async fn acquire(&self, resource: &str) -> Answer<Grant> {
        self.client()
            .acquire(
                resource,
                &AcquireOptions::new().ttl(Duration::from_millis(1000)),
            )
            .await
            .unwrap_or_else(|e| panic!("acquire {resource}: {e}"))
    }
}

fn code<T>(answer: &Answer<T>) -> &str {
    match answer {
        Answer::Ok(_) => "granted",
        Answer::Refused { code, .. } => code.as_str(),
    }
}

/// Asserts the error was logged once for `node` although it hit many requests.
fn logged_once(setup: &Setup, node: &str, word: &str) {
    let lines = setup.warnings(node, word);
    assert_eq!(
        lines.len(),
        1,
        "one warning for {node} {word}, not one per request; got {}:\n{}",
        lines.len(),
        lines.join("\n")
    );
}

const REQUESTS: usize = 20;

/// A master out of memory (maxmemory tiny, noeviction) refuses the SET: an
/// `oom` error of that master. With two of three OOM there is no quorum,
/// which is `no_quorum`, never `taken`.
#[tokio::test]
async fn oom_masters_are_errors_not_taken() {
    let s = setup(3, no_args, plain).await;
    s.wait_usable(3).await;
    for i in [0, 1] {
        s.cmd(i, &["CONFIG", "SET", "maxmemory-policy", "noeviction"])
            .await
            .unwrap();
        s.cmd(i, &["CONFIG", "SET", "maxmemory", "1"])
            .await
            .unwrap();
    }
    for n in 0..REQUESTS {
        let answer = s.acquire(&format!("oom-{n}")).await;
        assert_eq!(code(&answer), "no_quorum", "{answer:?}");
    }
    for node in ["r1", "r2"] {
        let counted = s.errors(node, "oom").await;
        assert!(
            counted >= REQUESTS as u64,
            "{node}: {counted} oom errors counted"
        );
        logged_once(&s, node, "oom");
    }
    assert_eq!(s.errors("r3", "oom").await, 0);
    // Memory back: locks again.
    for i in [0, 1] {
        s.cmd(i, &["CONFIG", "SET", "maxmemory", "0"])
            .await
            .unwrap();
    }
    assert_eq!(code(&s.acquire("oom-after").await), "granted");
}

/// A replica behind a master URL answers READONLY: a `readonly` error of
/// that master, and `/v1/nodes` warns that it is a replica.
#[tokio::test]
async fn readonly_replicas_are_errors_not_taken() {
    let s = setup(
        3,
        |i, started| {
            if i == 0 {
                Vec::new()
            } else {
                let primary = started[0].port().to_string();
                vec!["--replicaof".into(), "127.0.0.1".into(), primary]
            }
        },
        plain,
    )
    .await;
    s.wait_usable(3).await;
    for n in 0..REQUESTS {
        let answer = s.acquire(&format!("ro-{n}")).await;
        assert_eq!(code(&answer), "no_quorum", "{answer:?}");
    }
    for node in ["r2", "r3"] {
        let counted = s.errors(node, "readonly").await;
        assert!(
            counted >= REQUESTS as u64,
            "{node}: {counted} readonly errors counted"
        );
        logged_once(&s, node, "readonly");
    }
    let nodes = s.client().nodes().await.unwrap();
    let warned = nodes.nodes[1].warnings.join("; ");
    assert!(warned.contains("replica"), "{nodes:?}");
}

/// After SCRIPT FLUSH every master answers NOSCRIPT to the release and
/// extend scripts; the agent loads them again and the caller sees nothing.
#[tokio::test]
async fn noscript_after_script_flush_is_transparent() {
    let s = setup(3, no_args, plain).await;
    s.wait_usable(3).await;
    let Answer::Ok(grant) = s.acquire("ns").await else {
        panic!("no lock")
    };
    for i in 0..3 {
        s.cmd(i, &["SCRIPT", "FLUSH"]).await.unwrap();
    }
    let extended = s
        .client()
        .extend("ns", &grant.token, Some(Duration::from_millis(1000)))
        .await
        .unwrap();
    assert_eq!(
        code(&extended),
        "granted",
        "extend after SCRIPT FLUSH: {extended:?}"
    );
    for i in 0..3 {
        s.cmd(i, &["SCRIPT", "FLUSH"]).await.unwrap();
    }
    match s.client().release("ns", &grant.token).await.unwrap() {
        Answer::Ok(released) => assert!(released, "released after SCRIPT FLUSH"),
        other => panic!("{other:?}"),
    }
    // A hold keeps renewing across a flush. Its TTL is max_ttl: renewals
    // every third of it leave a busy machine time to answer each one.
    let Answer::Ok(mut hold) = s
        .client()
        .hold(
            "ns-hold",
            &HoldOptions::new().ttl(Duration::from_millis(1000)),
        )
        .await
        .unwrap()
    else {
        panic!("no hold")
    };
    // A hold is returned only once its first event, `acquired`, arrived.
    assert!(!hold.token().is_empty(), "acquired: {hold:?}");
    for i in 0..3 {
        s.cmd(i, &["SCRIPT", "FLUSH"]).await.unwrap();
    }
    for _ in 0..3 {
        match next_event(&mut hold).await {
            HoldNext::Event(HoldEvent::Renewed { .. }) => {}
            other => panic!("after SCRIPT FLUSH the hold said {other:?}"),
        }
    }
    for node in ["r1", "r2", "r3"] {
        eprintln!(
            "{node}: script errors counted: {}",
            s.errors(node, "script").await
        );
    }
}

/// A key of another type at a lock key (a collision under the prefix)
/// answers WRONGTYPE to `SET NX GET`: a `wrongtype` error of that master,
/// not a vote for `taken`.
#[tokio::test]
async fn wrongtype_collisions_are_errors_not_taken() {
    let s = setup(3, no_args, plain).await;
    s.wait_usable(3).await;
    for i in [0, 1] {
        s.cmd(i, &["LPUSH", "err:clash", "x"]).await.unwrap();
    }
    for _ in 0..REQUESTS {
        let answer = s.acquire("clash").await;
        assert_eq!(code(&answer), "no_quorum", "{answer:?}");
    }
    for node in ["r1", "r2"] {
        let counted = s.errors(node, "wrongtype").await;
        assert!(
            counted >= REQUESTS as u64,
            "{node}: {counted} wrongtype errors counted"
        );
        logged_once(&s, node, "wrongtype");
    }
    // One collision of three: the other two grant.
    s.cmd(1, &["DEL", "err:clash"]).await.unwrap();
    assert_eq!(code(&s.acquire("clash").await), "granted");
}

/// A master that wants a password the URL does not carry (NOAUTH), or
/// carries wrong (WRONGPASS): an `auth` error of that master, counted and
/// logged once while the agent keeps retrying, and locks still work on the
/// other two.
#[tokio::test]
async fn auth_failures_are_counted_and_logged_once() {
    let s = setup_with(
        3,
        no_args,
        |i, port| match i {
            0 => format!("redis://127.0.0.1:{port}"),        // NOAUTH
            1 => format!("redis://:wrong@127.0.0.1:{port}"), // WRONGPASS
            _ => format!("redis://127.0.0.1:{port}"),
        },
        |masters| {
            for m in &masters[..2] {
                inline(m.port(), "CONFIG SET requirepass s3cret");
            }
        },
    )
    .await;
    // Let the health task retry many times.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answer = s.acquire("auth").await;
    assert_eq!(code(&answer), "no_quorum", "{answer:?}");
    let message = match &answer {
        Answer::Refused { message, .. } => message.clone(),
        Answer::Ok(_) => String::new(),
    };
    assert!(
        message.contains("auth"),
        "the answer names the cause: {message}"
    );
    for node in ["r1", "r2"] {
        let counted = s.errors(node, "auth").await;
        assert!(
            counted >= 1,
            "{node}: auth errors not counted; the agent's log:\n{}",
            faults::cluster::tail(&s.agent.log_text(), 12)
        );
        logged_once(&s, node, "auth");
    }
}

/// A password rotated under a running agent: the connection is killed, the
/// reconnect fails with WRONGPASS/NOAUTH, and that is logged once.
#[tokio::test]
async fn a_rotated_password_is_logged_once_and_locks_go_on() {
    let s = setup(3, no_args, plain).await;
    s.wait_usable(3).await;
    // One connection: once the password is set, a new one would need it.
    let mut conn = s.redis(0).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("rotated")
        .query_async(&mut conn)
        .await
        .unwrap();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(killed >= 1, "the agent's connection was killed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in 0..REQUESTS {
        assert_eq!(code(&s.acquire(&format!("rot-{n}")).await), "granted");
    }
    assert!(
        s.errors("r1", "auth").await >= 1,
        "auth errors not counted; the agent's log:\n{}",
        faults::cluster::tail(&s.agent.log_text(), 12)
    );
    logged_once(&s, "r1", "auth");
}
