//! Locks on several resources at once over masters that are Redis
//! Clusters (three of three primaries each): the resources live in
//! different hash slots, served by different primaries of each cluster,
//! and are granted together under one token with one fence, refused
//! together when one is held, and released together, every key read back
//! from the primary that serves its slot.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::TestAgent;
use hyper::StatusCode;
use redlock_testkit::RedisCluster;
use redlock_wire::keys;
use serde_json::{json, Value};

const PREFIX: &str = "redlock:";

/// The config of an agent over `clusters`, each by all its nodes.
fn config_yaml(clusters: &[RedisCluster], socket: &Path) -> String {
    let mut yaml = format!(
        "socket:\n  path: {:?}\nmetrics:\n  listen: \"127.0.0.1:0\"\nlock:\n  default_ttl: 5s\n  node_timeout: 500ms\nmasters:\n",
        socket.display().to_string()
    );
    for c in clusters {
        yaml.push_str(&format!("  - name: {}\n    cluster:\n", c.name()));
        for seed in c.seeds() {
            yaml.push_str(&format!("      - {seed}\n"));
        }
    }
    yaml
}

/// The value at `resource`'s lock key in each cluster, read from the
/// primary that serves its slot.
async fn values(clusters: &[RedisCluster], resource: &str) -> Vec<Option<String>> {
    let key = format!("{PREFIX}{resource}");
    let slot = keys::key_slot(key.as_bytes());
    let mut found = Vec::new();
    for cluster in clusters {
        let primary = tokio::task::block_in_place(|| cluster.primaries())
            .unwrap_or_else(|e| panic!("{}: {e}", cluster.name()))
            .into_iter()
            .find(|p| p.owns(slot))
            .expect("a primary serves the slot");
        let mut conn = common::redis_at(&format!("redis://127.0.0.1:{}", primary.port)).await;
        let value: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        found.push(value);
    }
    found
}

/// Waits until no cluster has a key of `resource`: a release answers at
/// its quorum, and the last masters' answers may still be on their way.
async fn settled(clusters: &[RedisCluster], resource: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = values(clusters, resource).await;
        if left.iter().all(Option::is_none) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{resource} left behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_in_different_slots_are_taken_and_released_together() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clusters: Vec<RedisCluster> = tokio::task::block_in_place(|| {
        (1..=3)
            .map(|i| {
                RedisCluster::start(dir.path(), &format!("c{i}"), 3, 0)
                    .unwrap_or_else(|e| panic!("cluster c{i}: {e}"))
            })
            .collect()
    });
    let agent = TestAgent::start_with(|socket| config_yaml(&clusters, socket)).await;
    // A fresh cluster's slots are quarantined once at first sight.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let nodes = agent.nodes().await;
        let clear = nodes["usable"] == 3
            && nodes["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["quarantined_slots"] == 0);
        if clear {
            break;
        }
        assert!(Instant::now() < deadline, "never clear: {nodes}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Three resources whose keys hash to slots far apart (each cluster's
    // three primaries serve a third of the slots each).
    let mut chosen: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let name = format!("wh-{i}");
        let slot = keys::key_slot(format!("{PREFIX}{name}").as_bytes());
        if chosen.iter().all(|(_, s)| slot / 5462 != *s / 5462) {
            chosen.push((name, slot));
        }
        if chosen.len() == 3 {
            break;
        }
    }
    let names: Vec<&str> = chosen.iter().map(|(n, _)| n.as_str()).collect();

    let (status, held) = agent
        .post(&format!("/v1/locks/{}/acquire", names[1]), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{held}");
    let (status, refused) = agent
        .post("/v1/locks/acquire", json!({"resources": names}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    for name in [names[0], names[2]] {
        settled(&clusters, name).await;
    }
    agent
        .post(
            &format!("/v1/locks/{}/release", names[1]),
            json!({"token": held["token"]}),
        )
        .await;

    let (status, granted) = agent
        .post(
            "/v1/locks/acquire",
            json!({"resources": names, "fence": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{granted}");
    assert!(granted["fence"].as_u64().is_some(), "{granted}");
    for name in &names {
        let taken = values(&clusters, name).await;
        let on = taken.iter().filter(|v| v.is_some()).count();
        assert!(on >= 2, "{name} on {on} of 3 clusters: {taken:?}");
    }
    let (status, released): (StatusCode, Value) = agent
        .post("/v1/locks/release", json!({"token": granted["token"]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert_eq!(released["released"], true);
    for name in &names {
        settled(&clusters, name).await;
    }
}
