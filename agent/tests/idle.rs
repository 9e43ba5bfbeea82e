//! An idle agent on real masters (see `lock::idle`): one connection per
//! master and a probe every `health.idle_interval`, a fresh probe for
//! whoever reads its state, everything back at once with its first lock,
//! and its extra connections closed again once it is idle.

mod common;

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use common::{node, wait_for, Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::json;

/// Probes every 100 ms while busy, every minute while idle: any probe a
/// test sees within a few seconds of an idle agent is not the timer's. No
/// leak scan: its connection is the scanning agent's, not any idle one's.
const CONFIG: &str = "lock:\n  default_ttl: 2s\n  max_ttl: 2s\n  node_timeout: 200ms\nhealth:\n  interval: 100ms\n  idle_interval: 60s\nleak_scan:\n  interval: 1h\n";

/// `INFO` calls master `i` has served (each probe makes one, in its
/// script; the first after a connect three).
async fn info_calls(cluster: &Cluster, i: usize) -> u64 {
    cluster
        .command_calls(i)
        .await
        .get("info")
        .copied()
        .unwrap_or(0)
}

/// `CLIENT LIST` of master `i`.
async fn client_list(cluster: &Cluster, i: usize) -> String {
    let mut conn = cluster.redis(i).await;
    redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// The agent's connections on master `i`, as `name flags` pairs: the
/// named ones and the pub/sub one (`flags=P`, unnamed), not the test's.
async fn agent_connections(cluster: &Cluster, i: usize) -> Vec<String> {
    let list = client_list(cluster, i).await;
    let field = |line: &str, key: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(key))
            .unwrap_or_default()
            .to_string()
    };
    list.lines()
        .map(|line| (field(line, "name="), field(line, "flags=")))
        .filter(|(name, flags)| name.starts_with("redlock-agent:") || flags.contains('P'))
        .map(|(name, flags)| format!("{name} {flags}"))
        .collect()
}

/// An agent that serves nobody keeps its lock connection only, and its
/// probes are the idle interval's; its first lock request wakes both: the
/// hold's agent subscribes to the force-release channel before the hold
/// starts, and probes come every `health.interval` again.
#[tokio::test]
async fn an_idle_agent_keeps_one_connection_and_wakes_with_its_first_lock() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    let name = agent.config.agent.name.clone();

    let before = info_calls(&cluster, 0).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The second read counts the first.
    let idle = info_calls(&cluster, 0).await - before - 1;
    assert!(
        idle <= 2,
        "{idle} INFO calls in 3 s from an idle agent (busy: about 60)"
    );
    assert_eq!(
        agent_connections(&cluster, 0).await,
        vec![format!("redlock-agent:{name}:locks N")],
        "one connection per master while idle"
    );

    let mut hold = agent.hold("job", json!({"ttl_ms": 2000})).await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    let acquired = hold.next(Duration::from_secs(5)).await.expect("acquired");
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    for i in 0..3 {
        let connections = agent_connections(&cluster, i).await;
        assert!(
            connections.iter().any(|c| c.ends_with(" P")),
            "master {i}: subscribed once the hold started: {connections:?}"
        );
    }
    let before = info_calls(&cluster, 0).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let busy = info_calls(&cluster, 0).await - before - 1;
    assert!(
        busy >= 6,
        "{busy} INFO calls in 2 s from a busy agent (about 40 at 100 ms)"
    );
}

/// An idle agent's state is read fresh: a master killed while it was idle
/// shows `down` in the first `/v1/nodes` and `/readyz` after, not a minute
/// later at the idle probe.
#[tokio::test]
async fn an_idle_agent_probes_before_it_answers_for_its_masters() {
    let mut cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    agent.wait_usable(3).await;
    // Past two probe intervals: the state read next is stale without a
    // probe.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.masters[0].kill();

    let nodes = agent.nodes().await;
    assert_eq!(node(&nodes, "r1")["state"], "down", "{nodes}");
    assert_eq!(nodes["usable"], 2, "{nodes}");
    let (status, body) = agent.get_tcp("/readyz").await;
    assert_eq!(status, StatusCode::OK, "2 of 3 is a quorum: {body}");
    assert!(body.contains("\"usable\":2"), "{body}");
}

/// Once the agent is idle again, its pub/sub and listings connections
/// close: after the hold's release and a listing, within the idle time
/// (30 s), the subscriber's check and a probe, with margin.
#[tokio::test]
async fn the_extra_connections_close_once_the_agent_is_idle_again() {
    let quick = CONFIG.replace("idle_interval: 60s", "idle_interval: 2s");
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, &quick).await;
    let name = agent.config.agent.name.clone();
    let mut hold = agent.hold("job", json!({"ttl_ms": 2000})).await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    hold.next(Duration::from_secs(5)).await.expect("acquired");
    agent.client.locks().await.expect("a listing");
    let busy = agent_connections(&cluster, 0).await;
    assert_eq!(busy.len(), 3, "locks, pub/sub, listings: {busy:?}");
    drop(hold);

    wait_for(
        "the pub/sub and listings connections to close",
        Duration::from_secs(75),
        || async {
            agent_connections(&cluster, 0).await == vec![format!("redlock-agent:{name}:locks N")]
        },
    )
    .await;
}

/// A probe of a process the agent knows is one script call with one
/// `INFO` inside (see `node::scripts::probe`), not `INFO server`, `INFO
/// stats` and a marker script: what an idle fleet costs its masters is
/// mostly its probes. Probes every 100 ms, nothing else on the masters.
#[tokio::test]
async fn a_known_master_is_probed_with_one_info() {
    let quick = CONFIG.replace("idle_interval: 60s", "idle_interval: 100ms");
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, &quick).await;
    agent.wait_usable(3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cluster.command_calls(0).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = cluster.command_calls(0).await;
    let delta = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    // The second read of INFO commandstats counts the first.
    let (probes, info) = (delta("evalsha"), delta("info") - 1);
    println!("{probes} probes, {info} INFO calls in 3 s");
    assert!(probes >= 5, "{probes} probes in 3 s at 100 ms: {after:?}");
    assert!(
        info * 2 <= probes * 3,
        "{info} INFO calls for {probes} probes: more than one each (before: three each)"
    );
}

/// [`CONFIG`] with a leak scan every 200 ms.
fn scanning() -> String {
    CONFIG.replace("interval: 1h", "interval: 200ms")
}

/// a1 scanning every 200 ms, then a2 on `a2_config` (named a2 here) once
/// it has read a1's report.
async fn standby_of_a_scanner(cluster: &Cluster, a2_config: &str) -> (TestAgent, TestAgent) {
    let a1 = TestAgent::start(cluster, &format!("agent:\n  name: a1\n{}", scanning())).await;
    wait_for("a1 to scan", Duration::from_secs(30), || async {
        a1.get("/v1/leaks").await.unwrap().1["scanning"] == true
    })
    .await;
    let a2 = TestAgent::start(cluster, &format!("agent:\n  name: a2\n{a2_config}")).await;
    wait_for(
        "a2 to read a1's report",
        Duration::from_secs(30),
        || async { a2.get("/v1/leaks").await.unwrap().1["scanner"] == "a1" },
    )
    .await;
    (a1, a2)
}

/// The `field` of the `purpose` connection of agent `agent` on master `i`,
/// as `CLIENT LIST` shows it.
async fn connection_field(
    cluster: &Cluster,
    i: usize,
    agent: &str,
    purpose: &str,
    field: &str,
) -> String {
    let list = client_list(cluster, i).await;
    let name = format!("name=redlock-agent:{agent}:{purpose} ");
    let line = list
        .lines()
        .find(|l| l.contains(&name))
        .unwrap_or_else(|| panic!("no {name}in {list}"));
    line.split(' ')
        .find_map(|f| f.strip_prefix(field)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        .to_string()
}

/// Seconds since the last command on the `purpose` connection of agent
/// `agent` on master `i` (`idle` in `CLIENT LIST`).
async fn connection_idle_s(cluster: &Cluster, i: usize, agent: &str, purpose: &str) -> u64 {
    connection_field(cluster, i, agent, purpose, "idle")
        .await
        .parse()
        .unwrap()
}

/// A fleet scanning every 200 ms: the idle standby does not read the
/// fleet's report every 200 ms but once per `health.idle_interval` (a
/// minute here): its connection stays silent; a reader of its
/// `/v1/leaks` gets the fleet's report, not stale, and wakes it to read
/// the masters' copies again.
#[tokio::test]
async fn an_idle_standby_reads_the_fleets_report_once_per_idle_interval() {
    let cluster = Cluster::start(3);
    let (_a1, a2) = standby_of_a_scanner(&cluster, &scanning()).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let silent = connection_idle_s(&cluster, 0, "a2", "locks").await;
    assert!(
        silent >= 2,
        "a2's connection idle for {silent} s while a1 scans every 200 ms"
    );
    let leaks = a2.get("/v1/leaks").await.unwrap().1;
    assert_eq!(leaks["scanner"], "a1", "{leaks}");
    assert_eq!(leaks["stale"], false, "{leaks}");
    wait_for(
        "the read to wake a2's look",
        Duration::from_secs(10),
        || async { connection_idle_s(&cluster, 0, "a2", "locks").await == 0 },
    )
    .await;
}

/// One call a master ran, as `MONITOR` shows it: the connection that
/// sent it (`ip:port`), its command, and the commands its script ran
/// (`MONITOR` prints those as `lua`, right after the call).
#[derive(Debug)]
struct Call {
    client: String,
    command: String,
    script: Vec<String>,
}

/// The calls master `i` runs from now on, watched through `MONITOR` until
/// `enough` says so of them, and of those, the ones `client` sent; panics
/// after `deadline`. Only whole calls: the last call seen is left out, as
/// its script's commands may still be on their way.
async fn monitor(
    cluster: &Cluster,
    i: usize,
    client: &str,
    deadline: Duration,
    enough: impl Fn(&[Call]) -> bool,
) -> Vec<Call> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", cluster.masters[i].port()))
        .await
        .unwrap();
    stream.write_all(b"MONITOR\r\n").await.unwrap();
    let mut lines = tokio::io::BufReader::new(stream).lines();
    let end = tokio::time::Instant::now() + deadline;
    let mut calls: Vec<Call> = Vec::new();
    while !enough(&calls[..calls.len().saturating_sub(1)]) {
        let line = tokio::time::timeout_at(end, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("not enough calls from {client} in {deadline:?}: {calls:?}"))
            .unwrap()
            .expect("MONITOR open");
        // +1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" "..." ...
        let Some((from, words)) = line
            .split_once(" [")
            .and_then(|(_, rest)| rest.split_once("] "))
        else {
            continue;
        };
        let from = from.split_once(' ').map_or(from, |(_, from)| from);
        let command = words.split('"').nth(1).unwrap_or_default().to_lowercase();
        if from == "lua" {
            if let Some(call) = calls.last_mut() {
                call.script.push(command);
            }
        } else {
            calls.push(Call {
                client: from.to_string(),
                command,
                script: Vec::new(),
            });
        }
    }
    calls.pop();
    calls.retain(|call| call.client == client);
    calls
}

/// The `ip:port` of the `purpose` connection of agent `agent` on master
/// `i`, as `CLIENT LIST` and `MONITOR` show it.
async fn connection_addr(cluster: &Cluster, i: usize, agent: &str, purpose: &str) -> String {
    connection_field(cluster, i, agent, purpose, "addr").await
}

/// An idle standby behind a live scanner sends each master one call per
/// idle probe, and nothing else but the topology check (one `INFO` every
/// tenth probe): the probe's script reads the incarnation marker, the
/// master's clock, and the fleet's report and scan lock for the standby's
/// look, without `INFO` (see `node::scripts::probe`). Where it made two
/// calls, each with an `INFO` inside, what an idle fleet costs its masters
/// is halved. Counted in `MONITOR` over five of a2's probes, while a1
/// scans every 200 ms.
#[tokio::test]
async fn an_idle_standby_sends_each_master_one_call_per_probe() {
    let cluster = Cluster::start(3);
    let quick = scanning().replace("idle_interval: 60s", "idle_interval: 1s");
    let (_a1, _a2) = standby_of_a_scanner(&cluster, &quick).await;
    let addr = connection_addr(&cluster, 0, "a2", "locks").await;
    let probes = |calls: &[Call]| {
        calls
            .iter()
            .filter(|c| c.client == addr && c.script.contains(&"time".to_string()))
            .count()
    };
    // The first probes may precede a2's first look that rides on them.
    let calls = monitor(&cluster, 0, &addr, Duration::from_secs(60), |calls| {
        probes(calls) >= 8
    })
    .await;
    let folded = calls
        .iter()
        .position(|c| c.script.contains(&"exists".to_string()))
        .expect("a probe that reads the scan lock");
    let calls = &calls[folded..];
    let (scripts, others): (Vec<&Call>, Vec<&Call>) =
        calls.iter().partition(|c| c.command == "evalsha");
    assert!(scripts.len() >= 5, "{calls:?}");
    for call in &scripts {
        assert_eq!(
            call.script,
            ["get", "time", "get", "exists"],
            "each call is a probe and a look, with no INFO: {calls:?}"
        );
    }
    assert!(
        others.len() <= 1 && others.iter().all(|c| c.command == "info"),
        "nothing else but one topology check: {calls:?}"
    );
}
