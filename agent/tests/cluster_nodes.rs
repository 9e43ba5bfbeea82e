//! `/v1/nodes` over masters given as Redis Clusters (real local clusters of
//! three primaries each): each cluster's shards and slots, and a cluster
//! that holds another master's node, or a cluster node listed as a single
//! server, named as such.

mod cluster_common;
mod common;

use std::time::Duration;

use cluster_common::{
    acquire, blocking, get, lock_key, redis, release, slot_of, wait_nodes, Masters, PREFIX,
    SETTINGS,
};
use common::{node, TestAgent};
use redlock_testkit::RedisServer;
use redlock_wire::keys;
use serde_json::json;

/// `/v1/nodes` over four clusters (the first with a replica per primary)
/// and one single server: each cluster is kind `cluster` with its three
/// shards as the cluster itself reports them (address, node ID, slot
/// ranges covering all 16384 slots, replicas), up, nothing quarantined;
/// the single server is kind `single` without shards; the quarantine gauge
/// is exported per master; a lock works over the mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_show_each_cluster_with_its_shards_and_slots() {
    let mut masters = Masters::start(4, 1);
    masters.add_single();
    let agent = masters.agent(SETTINGS).await;
    let nodes = agent.nodes().await;
    assert_eq!(nodes["usable"], 5, "{nodes:#}");

    for (i, c) in masters.clusters.iter().enumerate() {
        let n = node(&nodes, c.name());
        assert_eq!(n["kind"], "cluster", "{n:#}");
        assert_eq!(n["state"], "up", "{n:#}");
        assert_eq!(n["quarantined_slots"], 0, "{n:#}");
        let shards = n["shards"].as_array().expect("shards");
        let primaries = blocking(|| c.primaries()).unwrap();
        assert_eq!(shards.len(), primaries.len(), "{n:#}");
        let mut covered = 0u32;
        for p in &primaries {
            let addr = format!("127.0.0.1:{}", p.port);
            let shard = shards
                .iter()
                .find(|s| s["addr"] == addr.as_str())
                .unwrap_or_else(|| panic!("{}: no shard {addr} in {n:#}", c.name()));
            assert_eq!(shard["node_id"], p.node_id.as_str(), "{shard}");
            let slots: Vec<(u16, u16)> = shard["slots"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r[0].as_u64().unwrap() as u16, r[1].as_u64().unwrap() as u16))
                .collect();
            assert_eq!(slots, p.slots, "{}: {addr}'s slots", c.name());
            covered += slots
                .iter()
                .map(|(lo, hi)| u32::from(hi - lo) + 1)
                .sum::<u32>();
            assert_eq!(shard["state"], "up", "{shard}");
            assert_eq!(shard["quarantined_slots"], 0, "{shard}");
            assert_eq!(shard["replicas"], u64::from(i == 0), "{shard}");
        }
        assert_eq!(covered, u32::from(keys::SLOTS), "{}", c.name());
    }
    let single = node(&nodes, "r5");
    assert_eq!(single["kind"], "single", "{single:#}");
    assert_eq!(single["quarantined_slots"], 0, "{single:#}");
    assert!(
        single.get("shards").is_none_or(|s| s == &json!([])),
        "{single:#}"
    );

    let (_, metrics) = agent.get_tcp("/metrics").await;
    for name in ["c1", "c2", "c3", "c4", "r5"] {
        let line = format!("redlock_node_quarantined_slots{{node=\"{name}\"}} 0");
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }

    let (token, _, _) = acquire(&agent, "mixed", json!({})).await;
    let key = lock_key("mixed");
    for (c, p) in masters
        .clusters
        .iter()
        .zip(masters.owners(slot_of("mixed")))
    {
        assert_eq!(
            get(p.port, &key).await.as_deref(),
            Some(token.as_str()),
            "{}",
            c.name()
        );
    }
    let mut single_conn = redis(masters.singles[0].port()).await;
    let on_single: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut single_conn)
        .await
        .unwrap();
    assert_eq!(on_single.as_deref(), Some(token.as_str()));
    release(&agent, "mixed", &token).await;
}

/// A cluster master given by one seed, and another master whose URL is a
/// primary of that same cluster (the one serving the slot of a single
/// master's marker key, so it works as one): the config cannot see it (the addresses
/// differ), the agent can once it discovers the cluster's shards. The
/// cluster master is marked `down` with an error naming the shared node
/// and the other master, and does not count, whichever of the two comes
/// first in the config: otherwise that server would vote twice, once as
/// the single master and once as the cluster's shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_turns_out_to_hold_another_masters_node_is_down() {
    let masters = Masters::start(1, 0);
    // The shared primary serves the slot of a single master's marker key,
    // so as `r3` it answers the agent's probes like any single server (any
    // other primary would answer MOVED and be down anyway).
    let marker_slot = keys::key_slot(format!("{PREFIX}{}", keys::MARKER_SUFFIX).as_bytes());
    let primaries = blocking(|| masters.clusters[0].primaries()).unwrap();
    let shared = primaries.iter().find(|p| p.owns(marker_slot)).unwrap().port;
    let seed = primaries.iter().find(|p| p.port != shared).unwrap().port;
    let single = RedisServer::start(masters.dir.path(), "r2").unwrap_or_else(|e| panic!("{e}"));
    for cluster_first in [false, true] {
        let cluster = format!("  - name: c1\n    cluster: [redis://127.0.0.1:{seed}]\n");
        let alias = format!("  - name: r3\n    url: redis://127.0.0.1:{shared}\n");
        let (first, third) = if cluster_first {
            (cluster, alias)
        } else {
            (alias, cluster)
        };
        let agent = TestAgent::start_with(|socket| {
            format!(
                "socket:\n  path: {:?}\nmetrics:\n  listen: \"127.0.0.1:0\"\nmasters:\n{first}  - name: r2\n    url: {}\n{third}{SETTINGS}",
                socket.display().to_string(),
                single.url(),
            )
        })
        .await;
        let order = if cluster_first {
            "the cluster listed first"
        } else {
            "the cluster listed last"
        };
        let nodes = wait_nodes(
            &agent,
            &format!("c1 down for sharing a server with r3 ({order})"),
            Duration::from_secs(10),
            |nodes| node(nodes, "c1")["state"] == "down",
        )
        .await;
        let c1 = node(&nodes, "c1");
        let error = c1["last_error"].as_str().unwrap_or_default();
        assert!(
            error.contains("r3") && error.contains(&format!("127.0.0.1:{shared}")),
            "{order}: the error names the shared server and the other master: {c1:#}"
        );
        assert!(
            nodes["usable"].as_u64() <= Some(2),
            "{order}: c1 does not count: {nodes:#}"
        );
        agent.stop().await;
    }
}

/// Two primaries of a Redis Cluster listed as single servers (`url`), not
/// as a cluster: the one that does not serve the marker key's slot answers
/// MOVED, the one that does answers like a single server. `/v1/nodes` says
/// of each that it is a cluster node to be listed under `cluster:`: the
/// first in its error (never the raw redirect), the second in its
/// warnings, read from `cluster_enabled:1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_listed_as_a_single_server_is_named_as_one() {
    let mut masters = Masters::start(1, 0);
    masters.add_single();
    let marker_slot = keys::key_slot(format!("{PREFIX}{}", keys::MARKER_SUFFIX).as_bytes());
    let primaries = blocking(|| masters.clusters[0].primaries()).unwrap();
    let serving = primaries.iter().find(|p| p.owns(marker_slot)).unwrap().port;
    let moved = primaries.iter().find(|p| p.port != serving).unwrap().port;
    let single = masters.singles[0].url();
    let agent = TestAgent::start_with(|socket| {
        format!(
            "socket:\n  path: {:?}\nmetrics:\n  listen: \"127.0.0.1:0\"\nmasters:\n  - name: r1\n    url: {single}\n  - name: m1\n    url: redis://127.0.0.1:{moved}\n  - name: s1\n    url: redis://127.0.0.1:{serving}\n{SETTINGS}",
            socket.display().to_string(),
        )
    })
    .await;
    let said = "it is a Redis Cluster node";
    let advice = "listed as a single server (url): list the cluster's nodes under cluster: instead (see docs/redis-cluster.md)";
    let nodes = wait_nodes(
        &agent,
        "m1's error and s1's warning",
        Duration::from_secs(20),
        |nodes| {
            let error = node(nodes, "m1")["last_error"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let warned = node(nodes, "s1")["warnings"].as_array().is_some_and(|w| {
                w.iter()
                    .any(|w| w.as_str().unwrap_or_default().contains(said))
            });
            error.contains(said) && warned
        },
    )
    .await;
    let m1 = node(&nodes, "m1");
    let error = m1["last_error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("{said} (it answered MOVED), {advice}")),
        "{m1:#}"
    );
    assert!(!error.to_lowercase().contains("key moved"), "{m1:#}");
    let s1 = node(&nodes, "s1");
    assert!(
        s1["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with(&format!("{said} (cluster_enabled:1), {advice}"))),
        "{s1:#}"
    );
    agent.stop().await;
}

// --- config -------------------------------------------------------------
