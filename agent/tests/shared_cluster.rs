//! Read-write locks over masters that are Redis Clusters (three of three
//! primaries each): readers recorded in the sorted set at the lock key on
//! the primary serving its slot, a writer refused beside them, a waiting
//! writer (its flag in the same slot) stopping new readers and granted
//! when they leave, and the readers listed.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::TestAgent;
use hyper::StatusCode;
use redlock_testkit::RedisCluster;
use redlock_wire::keys;
use serde_json::json;

const PREFIX: &str = "redlock:";

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

/// The readers at `resource`'s lock key in each cluster, read from the
/// primary that serves its slot (0 where the key is gone or a writer's).
async fn readers(clusters: &[RedisCluster], resource: &str) -> Vec<usize> {
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
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let count: usize = if kind == "zset" {
            redis::cmd("ZCARD")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap()
        } else {
            0
        };
        found.push(count);
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_a_waiting_writer_on_clusters() {
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

    let shared = json!({"mode": "shared", "ttl_ms": 20000});
    let (status, first) = agent
        .post("/v1/locks/catalog/acquire", shared.clone())
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, second) = agent
        .post(
            "/v1/locks/catalog/acquire",
            json!({"mode": "shared", "ttl_ms": 20000, "fence": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert!(second["fence"].as_u64().is_some(), "{second}");
    assert_eq!(readers(&clusters, "catalog").await, vec![2, 2, 2]);
    let (status, listed) = agent.get("/v1/locks/catalog").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["lock"]["mode"], "shared", "{listed}");
    assert_eq!(
        listed["lock"]["readers"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    let (status, refused) = agent
        .post("/v1/locks/catalog/acquire", json!({"ttl_ms": 20000}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");

    let writer = {
        let client = agent.client.clone();
        tokio::spawn(async move {
            let options = redlock_client::AcquireOptions::new()
                .ttl(Duration::from_secs(20))
                .wait(Duration::from_secs(60))
                .fence();
            client.acquire("catalog", &options).await
        })
    };
    // The writer's waiting flag, in the lock key's slot, stops new readers.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, early) = agent
            .post("/v1/locks/catalog/acquire", shared.clone())
            .await;
        if status == StatusCode::CONFLICT {
            break;
        }
        // In before the writer's flag: out again at once.
        agent
            .post(
                "/v1/locks/catalog/release",
                json!({"token": early["token"]}),
            )
            .await;
        assert!(
            Instant::now() < deadline,
            "new readers still admitted beside the waiting writer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!writer.is_finished(), "the writer entered beside readers");
    for token in [&first["token"], &second["token"]] {
        let (status, released) = agent
            .post("/v1/locks/catalog/release", json!({"token": token}))
            .await;
        assert_eq!(status, StatusCode::OK, "{released}");
    }
    let granted = writer
        .await
        .unwrap()
        .expect("the writer, once the readers left");
    let reader_fence = second["fence"].as_u64().unwrap();
    assert!(
        granted.fence.unwrap() > reader_fence,
        "{granted:?} after a reader's {reader_fence}"
    );
    assert_eq!(readers(&clusters, "catalog").await, vec![0, 0, 0]);
}
