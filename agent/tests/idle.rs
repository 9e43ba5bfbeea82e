//! An idle agent on real masters (see `lock::idle`): one connection per
//! master and a probe every `health.idle_interval`, a fresh probe for
//! whoever reads its state, everything back at once with its first lock,
//! and its extra connections closed again once it is idle.

mod common;

use std::time::Duration;

use common::{node, wait_for, Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::json;

/// Probes every 100 ms while busy, every minute while idle: any probe a
/// test sees within a few seconds of an idle agent is not the timer's. No
/// leak scan: its connection is the scanning agent's, not any idle one's.
const CONFIG: &str = "lock:\n  default_ttl: 2s\n  max_ttl: 2s\n  node_timeout: 200ms\nhealth:\n  interval: 100ms\n  idle_interval: 60s\nleak_scan:\n  interval: 1h\n";

/// `INFO` calls master `i` has served (each probe sends two).
async fn info_calls(cluster: &Cluster, i: usize) -> u64 {
    let mut conn = cluster.redis(i).await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_info:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The agent's connections on master `i`, as `name flags` pairs: the
/// named ones and the pub/sub one (`flags=P`, unnamed), not the test's.
async fn agent_connections(cluster: &Cluster, i: usize) -> Vec<String> {
    let mut conn = cluster.redis(i).await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
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
