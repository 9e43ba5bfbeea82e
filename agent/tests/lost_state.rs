//! Masters that lose their keys without restarting (FLUSHALL, FLUSHDB), on
//! real masters: the in-vote incarnation marker keeps them from ever
//! counting, quarantines them like a restart, and readmits them by
//! rewriting the marker once every lock they held has expired. Also: a hold
//! learns at once that its lock is gone, and thousands of waiters on a
//! healthy quorum are not turned into `no_quorum` by the agent's own load.

mod common;

use std::time::{Duration, Instant};

// Short TTLs so a quarantine (max_ttl + extra = 2.5s) passes quickly.
use common::SHORT_QUARANTINE as SHORT;
use common::{node, wait_for, Cluster, TestAgent};
use hyper::StatusCode;
use redlock_testkit::{Options, RedisServer};
use serde_json::json;

const MARKER: &str = "redlock: incarnation";

async fn flush(cluster: &Cluster, i: usize, command: &str) {
    let mut conn = cluster.redis(i).await;
    let _: () = redis::cmd(command).query_async(&mut conn).await.unwrap();
}

/// The issue's scenario: A holds `fl`; FLUSHALL on 3 of 5 masters; agent B
/// (same masters, its own socket) is refused while A's lock may be valid,
/// with `no_quorum` naming the `marker` quarantine; A's extend answers
/// `lost`; once the quarantine is over, the marker is back and B gets it.
#[tokio::test]
async fn flushall_on_a_majority_never_grants_twice() {
    let cluster = Cluster::start(5);
    let a = TestAgent::start(&cluster, SHORT).await;
    let b = TestAgent::start(&cluster, SHORT).await;
    for i in 0..5 {
        assert!(
            cluster.get(i, MARKER).await.is_some(),
            "marker on r{}",
            i + 1
        );
    }
    let asked = Instant::now();
    let (status, grant) = a
        .post(
            "/v1/locks/fl/acquire",
            json!({"ttl_ms": 2000, "owner": "A"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let a_valid_until = asked + Duration::from_millis(grant["validity_ms"].as_u64().unwrap());
    for i in 0..3 {
        flush(&cluster, i, "FLUSHALL").await;
    }

    // Until A's lock is surely gone, every B attempt is refused.
    let mut messages = Vec::new();
    while Instant::now() < a_valid_until + Duration::from_millis(100) {
        let (status, body) = b.post("/v1/locks/fl/acquire", json!({"owner": "B"})).await;
        assert_ne!(
            status,
            StatusCode::OK,
            "B was granted fl while A held it: {body}"
        );
        assert_eq!(body["error"]["code"], "no_quorum", "{body}");
        messages.push(body["error"]["message"].as_str().unwrap().to_string());
    }
    assert!(
        messages.iter().any(|m| m.contains("marker")),
        "no_quorum names the marker: {messages:?}"
    );

    let (status, body) = a
        .post(
            "/v1/locks/fl/extend",
            json!({"token": grant["token"], "ttl_ms": 2000}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "lost", "{body}");

    for agent in [&a, &b] {
        let nodes = agent.nodes().await;
        for name in ["r1", "r2", "r3"] {
            let n = node(&nodes, name);
            assert_eq!(n["detector"], "marker", "{nodes}");
        }
    }
    let (_, metrics) = b.get_tcp("/metrics").await;
    assert!(
        metrics.contains(r#"redlock_node_restarts_detected_total{detector="marker",node="r1"} 1"#),
        "{metrics}"
    );

    // The quarantine ends only with the marker rewritten; then B wins.
    b.wait_usable(5).await;
    for i in 0..3 {
        assert!(
            cluster.get(i, MARKER).await.is_some(),
            "marker back on r{}",
            i + 1
        );
    }
    let (status, body) = b
        .post(
            "/v1/locks/fl/acquire",
            json!({"owner": "B", "wait_ms": 3000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(Instant::now() > a_valid_until);
}

/// FLUSHDB on one master while nobody asks for locks: the probe finds the
/// marker gone and quarantines it; locks go on over the other four, and the
/// master counts again after the period.
#[tokio::test]
async fn flushdb_on_one_master_is_seen_by_the_probe() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, SHORT).await;
    flush(&cluster, 1, "FLUSHDB").await;
    wait_for("r2 quarantined", Duration::from_secs(5), || async {
        let nodes = agent.nodes().await;
        node(&nodes, "r2")["state"] == "quarantined"
    })
    .await;
    let nodes = agent.nodes().await;
    assert_eq!(node(&nodes, "r2")["detector"], "marker", "{nodes}");
    assert_eq!(nodes["usable"], 4, "{nodes}");
    agent.acquire_ok("still-works", json!({})).await;
    agent.wait_usable(5).await;
    assert!(cluster.get(1, MARKER).await.is_some(), "marker rewritten");
}

/// A master first seen without its marker (a deployment's first start, or
/// data lost while no agent ran) is quarantined once, then readmitted.
#[tokio::test]
async fn a_master_first_seen_without_marker_is_quarantined_once() {
    let cluster = Cluster::start(3);
    let first = TestAgent::start(&cluster, SHORT).await;
    first.stop().await;
    // Old enough that the uptime detector alone would quarantine for less
    // than the whole period: the missing marker must make it the whole.
    wait_for("r1 up for a second", Duration::from_secs(5), || async {
        let mut conn = cluster.redis(0).await;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .unwrap();
        !info.contains("uptime_in_seconds:0\r")
    })
    .await;
    flush(&cluster, 0, "FLUSHALL").await;
    let agent = TestAgent::start_cautious(&cluster, SHORT).await;
    let nodes = agent.nodes().await;
    assert_eq!(node(&nodes, "r1")["state"], "quarantined", "{nodes}");
    assert_eq!(node(&nodes, "r1")["detector"], "marker", "{nodes}");
    agent.wait_usable(3).await;
    assert!(cluster.get(0, MARKER).await.is_some());
}

/// A hold whose key is deleted from a majority is told `lost` at its next
/// renewal, not at the end of the validity it was given: the renewal sees
/// that no quorum can hold the token any more.
#[tokio::test]
async fn a_hold_learns_at_once_that_a_majority_lost_its_key() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, "lock:\n  max_ttl: 60s\n").await;
    let mut hold = agent.hold("gone", json!({"ttl_ms": 9000})).await;
    let acquired = hold.next(Duration::from_secs(5)).await.expect("acquired");
    let granted_at = Instant::now();
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    let validity = Duration::from_millis(acquired["validity_ms"].as_u64().unwrap());
    for i in 0..3 {
        let mut conn = cluster.redis(i).await;
        let _: () = redis::cmd("DEL")
            .arg("redlock:gone")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let lost = hold
        .next(validity)
        .await
        .expect("an event before validity ends");
    assert_eq!(lost["event"], "lost", "{lost}");
    assert_eq!(lost["reason"], "renew_failed", "{lost}");
    // The old behaviour sent `lost` only a margin (a tenth of the TTL)
    // before the validity ended; the renewal comes at a third of it.
    assert!(
        Instant::now() < granted_at + validity - Duration::from_millis(900),
        "lost came at the first failed renewal"
    );
}

/// Thousands of waiters on distinct resources, each held elsewhere until
/// its key expires, against healthy masters: the agent's own load must not
/// mark masters down, so every waiter gets its lock within `wait_ms`
/// instead of `no_quorum`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_waiters_are_not_turned_into_no_quorum() {
    const WAITERS: usize = 2000;
    let cluster = Cluster::start(5);
    let agent =
        std::sync::Arc::new(TestAgent::start(&cluster, "lock:\n  max_waiters: 5000\n").await);
    for i in 0..5 {
        let mut conn = cluster.redis(i).await;
        let mut pipe = redis::pipe();
        for r in 0..WAITERS {
            pipe.cmd("SET")
                .arg(format!("redlock:w{r}"))
                .arg("0123456789abcdef0123456789abcdef01234567.elsewhere")
                .arg("PX")
                .arg(2000)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await.unwrap();
    }
    let tasks: Vec<_> = (0..WAITERS)
        .map(|r| {
            let agent = std::sync::Arc::clone(&agent);
            tokio::spawn(async move {
                agent
                    .post(
                        &format!("/v1/locks/w{r}/acquire"),
                        json!({"wait_ms": 60000, "ttl_ms": 30000}),
                    )
                    .await
            })
        })
        .collect();
    let mut refused = Vec::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        if status != StatusCode::OK {
            refused.push(body);
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {WAITERS} waiters refused, first: {:?}",
        refused.len(),
        refused.first()
    );
    let nodes = agent.nodes().await;
    assert_eq!(nodes["usable"], 5, "{nodes}");
}

/// A master that evicts keys (a memory limit with a volatile policy, which
/// picks keys with a TTL: lock keys first) is quarantined by the `eviction`
/// detector once its `evicted_keys` grows, and warned about up front.
#[tokio::test]
async fn a_master_that_evicts_keys_is_quarantined() {
    let cluster = Cluster::start(2);
    let evicting = RedisServer::start_opts(
        cluster.dir.path(),
        "evicting",
        &Options::new().maxmemory("4mb", "volatile-lru"),
    )
    .unwrap();
    let agent = TestAgent::start_with(|socket| {
        // config_yaml ends with the masters list: add one, then the rest.
        let mut yaml = cluster.config_yaml(socket, "");
        yaml.push_str(&format!(
            "  - name: evicting\n    url: {}\n",
            evicting.url()
        ));
        yaml.push_str(SHORT);
        yaml
    })
    .await;
    let nodes = agent.nodes().await;
    assert_eq!(node(&nodes, "evicting")["state"], "up", "{nodes}");
    assert!(
        node(&nodes, "evicting")["warnings"]
            .to_string()
            .contains("volatile-lru may evict lock keys"),
        "{nodes}"
    );
    // Fill it past its limit with keys that have a TTL, as locks do.
    let mut conn = redis::Client::open(evicting.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let value = "x".repeat(1024);
    for batch in 0..20 {
        let mut pipe = redis::pipe();
        for i in 0..500 {
            pipe.cmd("SET")
                .arg(format!("filler:{batch}:{i}"))
                .arg(&value)
                .arg("EX")
                .arg(600)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await.unwrap();
    }
    wait_for(
        "the eviction quarantine",
        Duration::from_secs(5),
        || async { node(&agent.nodes().await, "evicting")["detector"] == "eviction" },
    )
    .await;
    let nodes = agent.nodes().await;
    assert_eq!(node(&nodes, "evicting")["state"], "quarantined", "{nodes}");
}

/// The quarantine witness: while this agent waits out r1's lost keys,
/// another agent readmits r1 (here: the marker written directly, as that
/// agent would) and r1 loses its keys again. When this agent's period runs
/// out, the marker is missing again; its witness, which the second loss
/// removed, says the loss came after its quarantine began, so it must not
/// write the marker: the quarantine starts over, then ends normally.
#[tokio::test]
async fn a_second_loss_during_the_quarantine_starts_it_over() {
    let cluster = Cluster::start(3);
    // The probes' own detection is under test, not the votes': the agent,
    // idle all along, probes at the same interval.
    let agent = TestAgent::start(
        &cluster,
        &SHORT.replace(
            "interval: 100ms\n",
            "interval: 100ms\n  idle_interval: 100ms\n",
        ),
    )
    .await;
    flush(&cluster, 0, "FLUSHALL").await;
    wait_for(
        "the quarantine witness on r1",
        Duration::from_secs(5),
        || async {
            let mut conn = cluster.redis(0).await;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("redlock:* quarantine witness")
                .query_async(&mut conn)
                .await
                .unwrap();
            keys.len() == 1
        },
    )
    .await;
    let mut conn = cluster.redis(0).await;
    let _: () = redis::cmd("SET")
        .arg(MARKER)
        .arg("written by another agent's readmission")
        .query_async(&mut conn)
        .await
        .unwrap();
    flush(&cluster, 0, "FLUSHALL").await;
    let restarts = r#"redlock_node_restarts_detected_total{detector="marker",node="r1"}"#;
    wait_for(
        "the quarantine to start over",
        Duration::from_secs(10),
        || async {
            let (_, metrics) = agent.get_tcp("/metrics").await;
            metrics.contains(&format!("{restarts} 2"))
        },
    )
    .await;
    let nodes = agent.nodes().await;
    assert_eq!(node(&nodes, "r1")["state"], "quarantined", "{nodes}");
    agent.wait_usable(3).await;
    assert!(cluster.get(0, MARKER).await.is_some(), "marker rewritten");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("redlock:* quarantine witness")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "witness removed on readmission: {keys:?}");
}

/// A long quarantine (30 s) whose witness goes a moment after it was
/// written, as when a cache is still evicting: the next probe sees the
/// witness gone and starts the quarantine over from there, with a new
/// witness, instead of finding out only when the spoiled period ends. So
/// a master that loses keys for a while is readmitted one period after its
/// last loss, not two.
#[tokio::test]
async fn a_witness_lost_during_the_quarantine_starts_it_over_at_the_next_probe() {
    // The probes' own detection is under test: the idle agent probes at
    // the same interval.
    const LONG: &str = "lock:\n  max_ttl: 30s\n  node_timeout: 200ms\nhealth:\n  interval: 100ms\n  idle_interval: 100ms\n";
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LONG).await;
    flush(&cluster, 0, "FLUSHALL").await;
    wait_for(
        "the quarantine witness on r1",
        Duration::from_secs(5),
        || async { witnesses(&cluster).await.len() == 1 },
    )
    .await;
    let first = witnesses(&cluster).await.remove(0);
    let mut conn = cluster.redis(0).await;
    let _: () = redis::cmd("DEL")
        .arg(&first)
        .query_async(&mut conn)
        .await
        .unwrap();
    let restarts = r#"redlock_node_restarts_detected_total{detector="marker",node="r1"}"#;
    wait_for(
        "the quarantine to start over (a third of the period: not at its end)",
        Duration::from_secs(10),
        || async {
            let (_, metrics) = agent.get_tcp("/metrics").await;
            metrics.contains(&format!("{restarts} 2"))
        },
    )
    .await;
    wait_for("a new witness", Duration::from_secs(5), || async {
        let now = witnesses(&cluster).await;
        now.len() == 1 && now[0] != first
    })
    .await;
    let nodes = agent.nodes().await;
    let r1 = node(&nodes, "r1");
    assert_eq!(r1["state"], "quarantined", "{nodes}");
    assert!(
        r1["quarantine_remaining_ms"].as_u64() > Some(20_000),
        "the period counts from the new witness: {r1}"
    );
    assert!(
        cluster.get(0, MARKER).await.is_none(),
        "not readmitted: {r1}"
    );
}

/// The quarantine witnesses on r1.
async fn witnesses(cluster: &Cluster) -> Vec<String> {
    let mut conn = cluster.redis(0).await;
    redis::cmd("KEYS")
        .arg("redlock:* quarantine witness")
        .query_async(&mut conn)
        .await
        .unwrap()
}
