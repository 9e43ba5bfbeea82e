//! Read-write locks over masters that are Redis Clusters (three of three
//! primaries each): readers recorded in the sorted set at the lock key on
//! the primary serving its slot, a writer refused beside them, a waiting
//! writer (its flag in the same slot) stopping new readers and granted
//! when they leave, and the readers listed.

mod cluster_common;
mod common;

use std::time::{Duration, Instant};

use cluster_common::{lock_key, slot_of, Masters};
use hyper::StatusCode;
use serde_json::json;

/// The readers at `resource`'s lock key in each cluster, read from the
/// primary that serves its slot (0 where the key is gone or a writer's).
async fn readers(masters: &Masters, resource: &str) -> Vec<usize> {
    let key = lock_key(resource);
    let mut found = Vec::new();
    for primary in masters.owners(slot_of(resource)) {
        let mut conn = cluster_common::redis(primary.port).await;
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
    let masters = Masters::start(3, 0);
    let agent = masters
        .agent("lock:\n  default_ttl: 5s\n  node_timeout: 500ms\n")
        .await;

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
    assert_eq!(readers(&masters, "catalog").await, vec![2, 2, 2]);
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
    assert_eq!(readers(&masters, "catalog").await, vec![0, 0, 0]);
}
