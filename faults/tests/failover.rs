//! A failover behind a master's address: a real `redis-server --replicaof`
//! of one master, in sync, promoted with `REPLICAOF NO ONE`, and the proxy
//! the agent reaches that master through switched to it, as a Sentinel or
//! an operator would do behind a fixed address. Replication is
//! asynchronous, so the promoted replica may lack the last locks: the agent
//! must keep it out of every quorum for `max_ttl + delayed_restart.extra`.

use std::time::Duration;

use faults::client::{AcquireOptions, Answer, Client, ErrorCode};
use faults::cluster::{agent_binary, wait_in_sync, AgentProcess, AgentSettings};
use faults::proxy::Link;
use redlock_testkit::{free_port, RedisServer};
use redlock_wire::{NodeState, NodeStatus, NodesResponse};

/// `/v1/nodes` through the agent's socket.
async fn nodes(client: &Client) -> NodesResponse {
    client.nodes().await.unwrap()
}

/// Waits until `/v1/nodes` satisfies `wanted`; the last answer.
async fn wait_nodes(
    client: &Client,
    limit: Duration,
    what: &str,
    wanted: impl Fn(&NodesResponse) -> bool,
) -> NodesResponse {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let seen = nodes(client).await;
        if wanted(&seen) {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}; /v1/nodes: {seen:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn node<'a>(nodes: &'a NodesResponse, name: &str) -> &'a NodeStatus {
    nodes.nodes.iter().find(|n| n.name == name).unwrap()
}

async fn redis(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn acquire(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .owner("failover-test")
}

/// One agent over r1 (through a proxy), r2 and r3 holds a lock; a replica
/// of r1 syncs it, is promoted, and the proxy is switched to it. The agent
/// quarantines r1 with a detector named in `/v1/nodes`; with r2 then gone,
/// an acquire answers `no_quorum` naming r1's quarantine (r1 does not
/// count); once the period ends, r1 and r3 grant again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_promoted_behind_a_masters_address_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let mut r1 = RedisServer::start(dir.path(), "r1").unwrap();
    let mut r2 = RedisServer::start(dir.path(), "r2").unwrap();
    let r3 = RedisServer::start(dir.path(), "r3").unwrap();
    let link = Link::start("a1-r1".into(), r1.port()).await.unwrap();
    let settings = AgentSettings {
        default_ttl: Duration::from_secs(2),
        max_ttl: Duration::from_secs(3),
        restart_extra: Duration::from_secs(1),
        ..AgentSettings::default()
    };
    let urls = [
        (
            "r1".to_string(),
            format!("redis://127.0.0.1:{}", link.port()),
        ),
        ("r2".to_string(), r2.url()),
        ("r3".to_string(), r3.url()),
    ];
    let socket = dir.path().join("a1.sock");
    let metrics = free_port().unwrap();
    let yaml = settings.yaml(&socket, metrics, &urls);
    let mut agent = AgentProcess::spawn_with_env(
        &agent_binary().unwrap(),
        dir.path(),
        "a1",
        socket,
        metrics,
        &yaml,
        settings.env(),
    )
    .unwrap();
    agent
        .wait_ready(Duration::from_secs(15))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = agent.client();
    // Fresh masters are quarantined at first sight: wait them out.
    wait_nodes(
        &client,
        settings.quarantine() + Duration::from_secs(10),
        "every master usable",
        |n| n.usable == 3,
    )
    .await;

    // The agent holds a lock.
    let held = match client.acquire("held", &acquire(3000)).await.unwrap() {
        Answer::Ok(grant) => grant,
        refused => panic!("{refused:?}"),
    };

    // A real replica of r1, in sync: it has the lock's key too.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("repl-diskless-sync-delay")
        .arg(0)
        .query_async::<()>(&mut redis(r1.port()).await)
        .await
        .unwrap();
    let r1_port = r1.port().to_string();
    let replica = RedisServer::start_with(
        dir.path(),
        "r1-replica",
        &["--replicaof", "127.0.0.1", &r1_port],
    )
    .unwrap();
    wait_in_sync(r1.port(), replica.port())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", replica.log()));
    let mut conn = redis(replica.port()).await;
    let copy: Option<String> = redis::cmd("GET")
        .arg(format!("{}held", settings.key_prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        copy.as_deref(),
        Some(held.token.as_str()),
        "the replica has the lock"
    );

    // Failover: promote it, switch the address to it, kill the old master.
    redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    link.switch_upstream(replica.port());
    r1.kill();

    let seen = wait_nodes(
        &client,
        Duration::from_secs(10),
        "r1 quarantined after the failover",
        |n| node(n, "r1").state == NodeState::Quarantined,
    )
    .await;
    let r1_seen = node(&seen, "r1");
    let detector = r1_seen.detector.clone().unwrap_or_default();
    assert!(
        ["reconnect", "run_id", "uptime", "marker"].contains(&detector.as_str()),
        "a quarantine names its detector: {r1_seen:?}"
    );
    assert!(r1_seen.quarantine_ms > 0, "{r1_seen:?}");
    println!(
        "r1 quarantined for {}ms, detector {detector}",
        r1_seen.quarantine_ms
    );
    assert_eq!(seen.usable, 2, "{seen:#?}");

    // r2 goes: only r3 and the quarantined r1 remain. r1 must not count.
    r2.kill();
    wait_nodes(&client, Duration::from_secs(10), "r2 down", |n| {
        node(n, "r2").state == NodeState::Down
    })
    .await;
    match client.acquire("fresh", &acquire(1000)).await.unwrap() {
        Answer::Refused { code, message } => {
            assert_eq!(code, ErrorCode::NoQuorum, "{message}");
            assert!(
                message.contains("r1 quarantined"),
                "the refusal names r1's quarantine: {message}"
            );
        }
        Answer::Ok(grant) => panic!(
            "granted with r3 and the quarantined r1 ({grant:?}); /v1/nodes: {:#?}",
            nodes(&client).await
        ),
    }

    // The period ends: r1 (the promoted replica) counts again.
    wait_nodes(
        &client,
        settings.quarantine() + Duration::from_secs(10),
        "r1 up after its quarantine",
        |n| node(n, "r1").state == NodeState::Up,
    )
    .await;
    match client.acquire("fresh", &acquire(1000)).await.unwrap() {
        Answer::Ok(_) => {}
        refused => panic!("r1 and r3 are a quorum again: {refused:?}"),
    }
    drop(agent);
}
