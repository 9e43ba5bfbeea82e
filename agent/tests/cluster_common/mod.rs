//! The cluster tests' harness: masters given as real local Redis Clusters of
//! three primaries each (`redlock_testkit::RedisCluster`), their settings,
//! faults in several clusters at once, and reads on the redis-servers.
//!
//! The clusters' fault methods block (they poll the nodes until the cluster
//! settles), so the tests run on a multi-threaded runtime and call them
//! through `block_in_place`: the in-process agents keep serving meanwhile.
//! Faults in several clusters run at once, on scoped threads.
#![allow(dead_code)] // each test binary uses a different part of it

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{self, TestAgent};
use hyper::StatusCode;
use redlock_testkit::{Primary, RedisCluster, RedisServer};
use redlock_wire::keys;
use serde_json::{json, Value};

/// The agent's default `lock.key_prefix`.
pub const PREFIX: &str = "redlock:";

/// Lock and health settings: TTLs long enough for a fault in three
/// clusters at once (a shard restart or a slot migration takes a second or
/// two on a busy machine) to happen inside one lock's validity; a
/// quarantine of max_ttl + extra = 5.5s. The node timeout is the most
/// default_ttl allows (a tenth): fifteen primaries and two agents share
/// the machine, and at 200ms masters that answered late failed grants on a
/// busy one (load 7 on 2 cores).
pub const SETTINGS: &str = "lock:\n  default_ttl: 5s\n  max_ttl: 5s\n  node_timeout: 500ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 500ms\n";

/// As [`SETTINGS`] with a 10s max_ttl (a quarantine of 10.5s): a lagged
/// failover in three clusters (kill, thaw, takeover, the old primary back
/// as a replica, settle) must fit inside the first holder's validity for
/// the control run to be able to show a double grant; a migration, the
/// checks after it and the holder's release too; a shard restarted empty
/// in three clusters, the checks of its quarantine and a lock elsewhere
/// (over 5s on a busy machine), before the second agent's attempts.
pub const SETTINGS_LONG: &str = "lock:\n  default_ttl: 5s\n  max_ttl: 10s\n  node_timeout: 500ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 500ms\n";

/// Runs a blocking cluster operation without stalling the runtime that
/// serves the in-process agents.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

pub fn lock_key(resource: &str) -> String {
    format!("{PREFIX}{resource}")
}

pub fn slot_of(resource: &str) -> u16 {
    keys::key_slot(lock_key(resource).as_bytes())
}

/// The incarnation marker of `slot` on a cluster master.
pub fn marker_key(slot: u16) -> String {
    keys::slot_key(&format!("{PREFIX}{}", keys::MARKER_SUFFIX), slot)
}

/// The node ID a slot's incarnation marker on a cluster master names
/// (the marker is `<node id> e=<evicted keys>`), or `None` without one.
pub async fn marker_node(port: u16, slot: u16) -> Option<String> {
    let marker = get(port, &marker_key(slot)).await?;
    Some(
        marker
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
    )
}

/// The masters of a test: Redis Clusters `c1..`, and optionally single
/// servers after them; all killed when dropped.
pub struct Masters {
    pub clusters: Vec<RedisCluster>,
    pub singles: Vec<RedisServer>,
    pub dir: tempfile::TempDir,
}

impl Masters {
    /// `n` clusters of three primaries; the first `with_replica` have one
    /// replica per primary. Started one after the other: a node's start
    /// takes the first server answering PING on its port as its own, so two
    /// nodes started at once on one probed free port would both "start".
    pub fn start(n: usize, with_replica: usize) -> Masters {
        let dir = tempfile::tempdir().expect("temp dir");
        let clusters = blocking(|| {
            (0..n)
                .map(|i| {
                    let name = format!("c{}", i + 1);
                    RedisCluster::start(dir.path(), &name, 3, usize::from(i < with_replica))
                        .unwrap_or_else(|e| panic!("cluster {name}: {e}"))
                })
                .collect()
        });
        Masters {
            clusters,
            singles: Vec::new(),
            dir,
        }
    }

    /// Adds a single-server master, named `r<n>` after its place in the
    /// config.
    pub fn add_single(&mut self) {
        let name = format!("r{}", self.clusters.len() + self.singles.len() + 1);
        let server = RedisServer::start(self.dir.path(), &name).unwrap_or_else(|e| panic!("{e}"));
        self.singles.push(server);
    }

    pub fn count(&self) -> usize {
        self.clusters.len() + self.singles.len()
    }

    /// The config YAML of an agent over these masters: each cluster by all
    /// its nodes as seeds, then the singles by URL; `extra` appended.
    pub fn config_yaml(&self, socket: &Path, extra: &str) -> String {
        let mut yaml = format!(
            "socket:\n  path: {:?}\nmetrics:\n  listen: \"127.0.0.1:0\"\nlog:\n  level: debug\nmasters:\n",
            socket.display().to_string()
        );
        for c in &self.clusters {
            yaml.push_str(&format!("  - name: {}\n    cluster:\n", c.name()));
            for seed in c.seeds() {
                yaml.push_str(&format!("      - {seed}\n"));
            }
        }
        for s in &self.singles {
            yaml.push_str(&format!("  - name: {}\n    url: {}\n", s.name(), s.url()));
        }
        yaml.push_str(extra);
        yaml
    }

    /// Starts an agent over every master and waits until all of them are
    /// usable with no slot in quarantine (a fresh cluster's slots are
    /// quarantined once at first sight).
    pub async fn agent(&self, extra: &str) -> TestAgent {
        let agent = TestAgent::start_with(|socket| self.config_yaml(socket, extra)).await;
        self.wait_clear(&agent).await;
        agent
    }

    pub async fn wait_clear(&self, agent: &TestAgent) {
        let n = self.count();
        wait_nodes(
            agent,
            "every master up, with no slot in quarantine",
            Duration::from_secs(40),
            |nodes| {
                nodes["usable"] == n
                    && node_list(nodes).iter().all(|m| {
                        m["state"] == "up"
                            && m["quarantined_slots"] == 0
                            && (m["kind"] == "single"
                                || m["shards"].as_array().is_some_and(|s| s.len() == 3))
                    })
            },
        )
        .await;
    }

    /// Each cluster's primary that serves `slot` now, as the cluster says.
    pub fn owners(&self, slot: u16) -> Vec<Primary> {
        blocking(|| {
            self.clusters
                .iter()
                .map(|c| owner(c, slot))
                .collect::<Vec<_>>()
        })
    }
}

/// The primary of `cluster` that serves `slot` now (blocking).
pub fn owner(cluster: &RedisCluster, slot: u16) -> Primary {
    let primaries = cluster
        .primaries()
        .unwrap_or_else(|e| panic!("{}: {e}", cluster.name()));
    primaries
        .into_iter()
        .find(|p| p.owns(slot))
        .unwrap_or_else(|| panic!("{}: no primary serves slot {slot}", cluster.name()))
}

/// Runs `fault` on the first `n` clusters at once, each on its own thread.
pub fn in_clusters(
    masters: &mut Masters,
    n: usize,
    fault: impl Fn(&mut RedisCluster) -> Result<(), redlock_testkit::ClusterError> + Sync,
) {
    in_these_clusters(masters, &(0..n).collect::<Vec<_>>(), fault);
}

/// Runs `fault` on the clusters at indexes `which` at once, each on its own
/// thread.
pub fn in_these_clusters(
    masters: &mut Masters,
    which: &[usize],
    fault: impl Fn(&mut RedisCluster) -> Result<(), redlock_testkit::ClusterError> + Sync,
) {
    let fault = &fault;
    blocking(|| {
        std::thread::scope(|s| {
            let running: Vec<_> = masters
                .clusters
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| which.contains(i))
                .map(|(_, c)| {
                    s.spawn(move || {
                        let name = c.name().to_string();
                        fault(c).unwrap_or_else(|e| panic!("{name}: {e}\n{}", c.logs()));
                    })
                })
                .collect();
            for t in running {
                t.join().expect("a fault panicked");
            }
        });
    });
}

pub fn node_list(nodes: &Value) -> &Vec<Value> {
    nodes["nodes"].as_array().expect("a nodes list")
}

/// Polls `/v1/nodes` until `wanted` holds; panics with the last answer at
/// `limit`.
pub async fn wait_nodes(
    agent: &TestAgent,
    what: &str,
    limit: Duration,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let nodes = agent.nodes().await;
        if wanted(&nodes) {
            return nodes;
        }
        assert!(
            Instant::now() < deadline,
            "timed out ({limit:?}) waiting for {what}; last /v1/nodes:\n{nodes:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn redis(port: u16) -> redis::aio::MultiplexedConnection {
    common::redis_at(&format!("redis://127.0.0.1:{port}")).await
}

/// `GET key` on the node at `port`, which must serve the key's slot.
pub async fn get(port: u16, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut redis(port).await)
        .await
        .unwrap_or_else(|e| panic!("GET {key:?} on port {port}: {e}"))
}

/// How long a grant these tests expect may be retried inside the agent
/// (`wait_ms`, unless the body sets one): on a busy machine a vote can
/// miss the node timeout and the round fail `no_quorum` with every master
/// healthy. No resource acquired this way is held by anyone else, so the
/// wait only ever outlasts such rounds.
pub const GRANT_WAIT_MS: u64 = 10_000;

/// Acquires `resource` with `body`; the token and the instant before which
/// the grant is surely valid (asked + validity).
pub async fn acquire(
    agent: &TestAgent,
    resource: &str,
    mut body: Value,
) -> (String, Instant, Value) {
    if body.get("wait_ms").is_none() {
        body["wait_ms"] = json!(GRANT_WAIT_MS);
    }
    let asked = Instant::now();
    let (status, grant) = agent
        .post(&format!("/v1/locks/{resource}/acquire"), body)
        .await;
    assert_eq!(status, StatusCode::OK, "acquire {resource}: {grant}");
    let validity = grant["validity_ms"].as_u64().expect("validity_ms");
    let token = grant["token"].as_str().expect("a token").to_string();
    (token, asked + Duration::from_millis(validity), grant)
}

pub async fn release(agent: &TestAgent, resource: &str, token: &str) -> Value {
    let (status, body) = agent
        .post(
            &format!("/v1/locks/{resource}/release"),
            json!({ "token": token }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "release {resource}: {body}");
    body
}
