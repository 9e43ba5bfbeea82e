//! Locks on masters given as Redis Clusters (real local clusters of three
//! primaries each): locks work and spread over every shard, and the leak
//! scan walks every shard.
//!
//! Every claim is read back from the redis-servers themselves: the lock key
//! on the primary that serves its slot.

mod cluster_common;
mod common;

use std::time::{Duration, Instant};

use cluster_common::{
    acquire, blocking, get, lock_key, redis, release, slot_of, Masters, PREFIX, SETTINGS,
};
use common::wait_for;
use hyper::StatusCode;
use serde_json::{json, Value};

/// `PTTL key` on the node at `port`.
async fn pttl(port: u16, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut redis(port).await)
        .await
        .unwrap_or_else(|e| panic!("PTTL {key:?} on port {port}: {e}"))
}

/// The keys matching `pattern` stored on the node at `port` itself.
async fn keys_on(port: u16, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut redis(port).await)
        .await
        .unwrap_or_else(|e| panic!("KEYS {pattern:?} on port {port}: {e}"))
}

/// Locks through the agent on five clusters: one lock's acquire, extend and
/// release, read back on the primary serving its slot in every cluster;
/// then 48 resources held at once, counted per primary directly on the
/// redis-servers: every primary of every cluster holds some, only ones
/// whose slots it serves, and each is on a quorum of clusters; `/v1/locks` lists them all
/// (a SCAN per primary); closing the holds removes every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_on_five_clusters_and_spread_over_every_shard() {
    let masters = Masters::start(5, 0);
    let agent = masters.agent(SETTINGS).await;

    let key = lock_key("orders");
    let owners = masters.owners(slot_of("orders"));
    // A TTL that outlasts the reads below on a busy machine (ten fresh
    // connections) before the extend, which must find the lock still held.
    let asked = Instant::now();
    let (token, _, _) = acquire(&agent, "orders", json!({"ttl_ms": 4000})).await;
    for (c, p) in masters.clusters.iter().zip(&owners) {
        assert_eq!(
            get(p.port, &key).await.as_deref(),
            Some(token.as_str()),
            "{}: the lock key on its shard {} (port {})",
            c.name(),
            p.shard,
            p.port
        );
        assert!(pttl(p.port, &key).await <= 4000);
    }
    let (status, body) = agent
        .post(
            "/v1/locks/orders/extend",
            json!({"token": token, "ttl_ms": 5000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (c, p) in masters.clusters.iter().zip(&owners) {
        // Without the extend, the key would expire by `asked` + 4s: it now
        // outlives that, however long the reads take.
        let unextended = Duration::from_millis(4000).saturating_sub(asked.elapsed());
        let left = pttl(p.port, &key).await;
        assert!(
            u128::try_from(left).is_ok_and(|left| left > unextended.as_millis()),
            "{}: the extend set the TTL on the shard: {left}ms, past the {unextended:?} the acquire left",
            c.name()
        );
    }
    let body = release(&agent, "orders", &token).await;
    assert_eq!(body["released"], true, "{body}");
    for (c, p) in masters.clusters.iter().zip(&owners) {
        assert_eq!(get(p.port, &key).await, None, "{}: released", c.name());
    }

    // Many resources held at once, spread over the shards.
    let resources: Vec<String> = (0..48).map(|i| format!("spread-{i}")).collect();
    let mut holds = Vec::new();
    for r in &resources {
        let mut hold = agent.hold(r, json!({"ttl_ms": 3000})).await;
        assert_eq!(hold.status, StatusCode::OK, "hold {r}: {:?}", hold.error);
        let acquired = hold.next(Duration::from_secs(5)).await.expect("acquired");
        assert_eq!(acquired["event"], "acquired", "{acquired}");
        holds.push(hold);
    }
    // Per primary: only locks of its own slots, and some of them. Per
    // resource: on a quorum of clusters at least (a grant needs no more).
    let mut copies = std::collections::BTreeMap::<String, usize>::new();
    for c in &masters.clusters {
        let primaries = blocking(|| c.primaries()).unwrap();
        assert_eq!(primaries.len(), 3, "{}: {primaries:?}", c.name());
        for p in &primaries {
            let stored = keys_on(p.port, &format!("{PREFIX}spread-*")).await;
            let own: Vec<String> = resources
                .iter()
                .filter(|r| p.owns(slot_of(r)))
                .map(|r| lock_key(r))
                .collect();
            assert!(
                !stored.is_empty(),
                "{} shard {} (port {}) holds none of the locks; its slots' locks: {own:?}",
                c.name(),
                p.shard,
                p.port
            );
            for key in &stored {
                assert!(
                    own.contains(key),
                    "{} shard {} (port {}) holds {key}, whose slot it does not serve",
                    c.name(),
                    p.shard,
                    p.port
                );
                *copies.entry(key.clone()).or_default() += 1;
            }
        }
    }
    for r in &resources {
        let n = copies.get(&lock_key(r)).copied().unwrap_or(0);
        assert!(n >= 3, "{r} is held on {n} clusters, fewer than a quorum");
    }
    let (status, listing) = agent
        .get("/v1/locks?prefix=spread-")
        .await
        .expect("GET /v1/locks");
    assert_eq!(status, StatusCode::OK, "{listing}");
    assert_eq!(listing["total"], 48, "{listing}");
    assert_eq!(listing["partial"], false, "{listing}");
    let listed = listing["locks"].as_array().unwrap();
    assert_eq!(listed.len(), 48, "{listing}");
    for lock in listed {
        assert_eq!(lock["quorum_agrees"], true, "{lock}");
        let states: Vec<&Value> = lock["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| &n["state"])
            .collect();
        assert_eq!(states.len(), 5, "a column per cluster: {lock}");
        assert!(
            states.iter().filter(|s| **s == "held").count() >= 3
                && states.iter().all(|s| *s == "held" || *s == "missing"),
            "held on a quorum of clusters, by nobody else anywhere: {lock}"
        );
    }

    drop(holds);
    for c in &masters.clusters {
        for p in blocking(|| c.primaries()).unwrap() {
            let pattern = format!("{PREFIX}spread-*");
            let limit = Instant::now() + Duration::from_secs(10);
            loop {
                let left = keys_on(p.port, &pattern).await;
                if left.is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < limit,
                    "{} shard {}: keys left after the holds closed: {left:?}",
                    c.name(),
                    p.shard
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// The leak scanner walks every shard of a cluster master (a `SCAN` per
/// primary): a key without TTL planted on each of a cluster's three shards
/// is reported, the per-slot bookkeeping keys and live locks are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leak_scan_walks_every_shard_of_a_cluster() {
    let masters = Masters::start(3, 0);
    let agent = masters
        .agent(&format!(
            "{SETTINGS}leak_scan:\n  interval: 150ms\n  count: 100\n"
        ))
        .await;
    // One resource per shard of c1, by the slot each name lands in.
    let c1 = &masters.clusters[0];
    let mut planted: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let resource = format!("stuck-{i}");
        let shard = blocking(|| c1.shard_of_key(lock_key(&resource).as_bytes()))
            .unwrap_or_else(|e| panic!("{e}"));
        if planted
            .iter()
            .all(|(_, port)| *port != c1.primary_port(shard))
        {
            planted.push((resource, c1.primary_port(shard)));
        }
        if planted.len() == 3 {
            break;
        }
    }
    for (resource, port) in &planted {
        // A token an agent wrote for this key: the scanner counts only those.
        let token = redlock_agent::redlock::Token::generate(&lock_key(resource), None, None);
        let _: () = redis::cmd("SET")
            .arg(lock_key(resource))
            .arg(token.as_str())
            .query_async(&mut redis(*port).await)
            .await
            .unwrap();
    }
    acquire(&agent, "live", json!({"ttl_ms": 5000})).await;
    let before = agent.get("/v1/leaks").await.unwrap().1["scans"]
        .as_u64()
        .unwrap();
    // A scan walks every shard past up to 16,384 markers and counters per
    // cluster: seconds each on a busy machine.
    wait_for(
        "two scans after the planting",
        Duration::from_secs(120),
        || async {
            agent.get("/v1/leaks").await.unwrap().1["scans"]
                .as_u64()
                .unwrap()
                >= before + 2
        },
    )
    .await;
    let leaks = agent.get("/v1/leaks").await.unwrap().1;
    let c1_leaks = leaks["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "c1")
        .unwrap_or_else(|| panic!("no c1 in {leaks}"));
    assert_eq!(c1_leaks["no_ttl"], 3, "one per shard: {leaks}");
    let mut found: Vec<String> = c1_leaks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["resource"].as_str().unwrap().to_string())
        .collect();
    found.sort();
    let mut wanted: Vec<String> = planted.iter().map(|(r, _)| r.clone()).collect();
    wanted.sort();
    assert_eq!(found, wanted, "{leaks}");
    for other in ["c2", "c3"] {
        let n = leaks["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == other)
            .unwrap();
        assert_eq!(n["no_ttl"], 0, "{other}: {leaks}");
    }
}
