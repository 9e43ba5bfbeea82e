//! What a vote takes on trust from a master, on real masters: that the
//! process answering is the one that holds the keys the agent saw (a
//! master restored from an old snapshot behind a proxy that keeps the
//! agent's connection open), and that its clock keeps time (a jump
//! forward, back, a freeze). Each with its control: the check off by its
//! test switch, and the second holder found.

mod common;

use std::time::Duration;

use common::{node, wait_for, Cluster, Switch, TestAgent};
use hyper::StatusCode;
use redlock_testkit::proxy::Link;
use redlock_testkit::switches::{NO_CLOCK_CHECK, NO_PROCESS_CHECK};
use redlock_testkit::{Options, RedisServer};
use serde_json::{json, Value};

/// Five masters whose wall clocks the test can move.
fn clocked_cluster() -> Cluster {
    let dir = tempfile::tempdir().expect("temp dir");
    let masters = (1..=5)
        .map(|i| {
            RedisServer::start_opts(dir.path(), &format!("r{i}"), &Options::new().clock())
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    Cluster { masters, dir }
}

/// The config YAML of an agent reaching master `i` at `ports[i]`.
fn yaml_through(cluster: &Cluster, ports: &[u16], socket: &std::path::Path, extra: &str) -> String {
    let mut yaml = cluster.config_yaml(socket, extra);
    for (m, port) in cluster.masters.iter().zip(ports) {
        yaml = yaml.replace(&m.url(), &format!("redis://127.0.0.1:{port}"));
    }
    yaml
}

async fn acquire(agent: &TestAgent, resource: &str, ttl_ms: u64) -> (StatusCode, Value) {
    agent
        .post(
            &format!("/v1/locks/{resource}/acquire"),
            json!({"ttl_ms": ttl_ms}),
        )
        .await
}

/// Agent A connected directly, agent B through a connection-keeping proxy
/// per master, its probes 30 s apart. Every master saves a
/// snapshot (the incarnation marker in it); A takes `L`; masters 1-3 are
/// killed and started again from their snapshots: the marker is back, `L`
/// is gone from them. B's acquire of `L` at once must be refused: its
/// first vote on each restored master finds its own script missing and a
/// new `run_id`. The control (`REDLOCK_TEST_NO_PROCESS_CHECK=1`, every
/// agent one shared script, reloaded silently) is granted: two holders.
#[tokio::test]
async fn a_master_restored_from_a_snapshot_behind_a_proxy_never_grants_twice() {
    for checked in [true, false] {
        let _switch = (!checked).then(|| Switch::set(NO_PROCESS_CHECK, "1"));
        let mut cluster = Cluster::start(5);
        let quick = "lock:\n  max_ttl: 20s\n  node_timeout: 300ms\nhealth:\n  interval: 100ms\n";
        let a = TestAgent::start(&cluster, quick).await;
        let mut links = Vec::new();
        for m in &cluster.masters {
            links.push(
                Link::start_keeping(m.name().to_string(), m.port())
                    .await
                    .unwrap(),
            );
        }
        let ports: Vec<u16> = links.iter().map(Link::port).collect();
        let idle = "lock:\n  max_ttl: 20s\n  node_timeout: 300ms\nhealth:\n  interval: 30s\n  idle_interval: 60s\n";
        let b = TestAgent::start_with(|socket| yaml_through(&cluster, &ports, socket, idle)).await;
        a.wait_usable(5).await;
        b.wait_usable(5).await;
        // B's first request wakes its probes (it starts idle); one now, so
        // none races the vote below: B's next probe is 30 s away.
        let (status, warm) = acquire(&b, "warm-up", 1_000).await;
        assert_eq!(status, StatusCode::OK, "{warm}");
        for m in &cluster.masters {
            m.save().unwrap();
        }
        let (status, grant) = acquire(&a, "L", 15_000).await;
        assert_eq!(status, StatusCode::OK, "A's grant: {grant}");
        let granted = std::time::Instant::now();
        for m in &mut cluster.masters[..3] {
            m.restart_from_snapshot().unwrap();
        }
        for i in 0..3 {
            assert!(
                cluster.get(i, "redlock: incarnation").await.is_some(),
                "r{} has its marker back",
                i + 1
            );
            assert_eq!(cluster.get(i, "redlock:L").await, None, "r{} lost L", i + 1);
        }
        let (status, body) = acquire(&b, "L", 5_000).await;
        let valid =
            granted.elapsed() < Duration::from_millis(grant["validity_ms"].as_u64().unwrap());
        assert!(valid, "the test was too slow: A's lock is no longer valid");
        if checked {
            assert_ne!(
                status,
                StatusCode::OK,
                "B granted L while A holds it: {body}"
            );
            let nodes = b.nodes().await;
            for name in ["r1", "r2", "r3"] {
                assert_eq!(node(&nodes, name)["state"], "quarantined", "{nodes}");
                assert_eq!(node(&nodes, name)["detector"], "run_id", "{nodes}");
            }
        } else {
            assert_eq!(
                status,
                StatusCode::OK,
                "the control found no second holder: {body}"
            );
        }
        drop(links);
    }
}

/// A holds `L` on five masters; the clocks of three jump 15 s forward, past
/// its TTL: Redis drops `L` there. B's acquire at once must be refused,
/// and B's `/v1/nodes` names the three `quarantined` by the `clock`
/// detector with a warning, its metric counting them. The control
/// (`REDLOCK_TEST_NO_CLOCK_CHECK=1` on both agents) is granted: two
/// holders.
#[tokio::test]
async fn a_master_clock_jumping_forward_never_grants_twice() {
    for checked in [true, false] {
        let _switch = (!checked).then(|| Switch::set(NO_CLOCK_CHECK, "1"));
        let cluster = clocked_cluster();
        let quick = "lock:\n  max_ttl: 20s\n  node_timeout: 300ms\nhealth:\n  interval: 100ms\n";
        let a = TestAgent::start(&cluster, quick).await;
        let b = TestAgent::start(&cluster, quick).await;
        a.wait_usable(5).await;
        b.wait_usable(5).await;
        let (status, grant) = acquire(&a, "L", 10_000).await;
        assert_eq!(status, StatusCode::OK, "A's grant: {grant}");
        let granted = std::time::Instant::now();
        // The grant is answered once a quorum has voted; the other votes
        // may still be on their way (a batch leaves after a turn of the
        // agent's runtime). One that lands after the jump writes L with a
        // TTL by the moved clock, so the jump waits for all five.
        wait_for("A's L on every master", Duration::from_secs(5), || async {
            let mut everywhere = true;
            for i in 0..5 {
                everywhere &= cluster.get(i, "redlock:L").await.is_some();
            }
            everywhere
        })
        .await;
        for m in &cluster.masters[..3] {
            m.jump_clock(15_000).unwrap();
        }
        // The moved clock takes effect within a few milliseconds.
        wait_for(
            "r1-r3 to drop L by their clocks",
            Duration::from_secs(5),
            || async {
                let mut gone = true;
                for i in 0..3 {
                    gone &= cluster.get(i, "redlock:L").await.is_none();
                }
                gone
            },
        )
        .await;
        let (status, body) = acquire(&b, "L", 5_000).await;
        let valid =
            granted.elapsed() < Duration::from_millis(grant["validity_ms"].as_u64().unwrap());
        assert!(valid, "the test was too slow: A's lock is no longer valid");
        if !checked {
            assert_eq!(
                status,
                StatusCode::OK,
                "the control found no second holder: {body}"
            );
            continue;
        }
        assert_ne!(
            status,
            StatusCode::OK,
            "B granted L while A holds it: {body}"
        );
        wait_for(
            "the jumped masters quarantined by their clocks",
            Duration::from_secs(10),
            || async {
                let nodes = b.nodes().await;
                ["r1", "r2", "r3"].iter().all(|name| {
                    let n = node(&nodes, name);
                    n["state"] == "quarantined"
                        && n["detector"] == "clock"
                        && n["warnings"]
                            .to_string()
                            .contains("clock jumped or ran ahead")
                })
            },
        )
        .await;
        let (_, metrics) = b.get_tcp("/metrics").await;
        let counted = metrics
            .lines()
            .filter(|l| {
                l.starts_with("redlock_node_restarts_detected_total")
                    && l.contains("detector=\"clock\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        assert!(counted >= 3.0, "clock faults counted: {counted}\n{metrics}");
    }
}

/// A clock that freezes, and one that jumps back a minute: keys outlive
/// their TTL there (a 3 s lock lived a minute). Both are quarantined by
/// the `clock` detector within a few probes.
#[tokio::test]
async fn a_frozen_or_backward_master_clock_is_quarantined() {
    let cluster = clocked_cluster();
    let agent = TestAgent::start(
        &cluster,
        "lock:\n  max_ttl: 20s\n  node_timeout: 300ms\nhealth:\n  interval: 100ms\n",
    )
    .await;
    agent.wait_usable(5).await;
    cluster.masters[0].freeze_clock().unwrap();
    cluster.masters[1].jump_clock(-60_000).unwrap();
    wait_for(
        "the frozen and the backward clock quarantined",
        Duration::from_secs(10),
        || async {
            let nodes = agent.nodes().await;
            ["r1", "r2"].iter().all(|name| {
                let n = node(&nodes, name);
                n["state"] == "quarantined"
                    && n["detector"] == "clock"
                    && n["warnings"]
                        .to_string()
                        .contains("jumped back, froze or ran slow")
            })
        },
    )
    .await;
    let nodes = agent.nodes().await;
    for name in ["r3", "r4", "r5"] {
        assert_eq!(node(&nodes, name)["state"], "up", "{nodes}");
    }
}
