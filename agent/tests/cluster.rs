//! Masters given as Redis Clusters, on real local clusters of three
//! primaries each (`redlock_testkit::RedisCluster`): locks work and spread
//! over every shard; `/v1/nodes` shows each cluster's shards and slots; a
//! shard restarted empty, a lagged failover and a slot migrated under a
//! held lock never grant it twice, and only the affected slots wait out a
//! quarantine (with a control run, the per-slot marker check off, that
//! does grant twice); fences keep growing across grants and a shard that
//! lost its counter; configs that list a cluster wrongly exit 64 naming the
//! field.
//!
//! Every claim is read back from the redis-servers themselves: the lock key
//! and the per-slot bookkeeping keys on the primary that serves their slot.
//!
//! The clusters' fault methods block (they poll the nodes until the cluster
//! settles), so the tests run on a multi-threaded runtime and call them
//! through `block_in_place`: the in-process agents keep serving meanwhile.
//! Faults in several clusters run at once, on scoped threads.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{node, wait_for, Switch, TestAgent};
use hyper::StatusCode;
use redlock_testkit::{Primary, RedisCluster, RedisServer};
use redlock_wire::keys;
use serde_json::{json, Value};

/// The agent's default `lock.key_prefix`.
const PREFIX: &str = "redlock:";

/// Lock and health settings: TTLs long enough for a fault in three
/// clusters at once (a shard restart or a slot migration takes a second or
/// two on a busy machine) to happen inside one lock's validity; a
/// quarantine of max_ttl + extra = 5.5s. The node timeout is the most
/// default_ttl allows (a tenth): fifteen primaries and two agents share
/// the machine, and at 200ms masters that answered late failed grants on a
/// busy one (load 7 on 2 cores).
const SETTINGS: &str = "lock:\n  default_ttl: 5s\n  max_ttl: 5s\n  node_timeout: 500ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 500ms\n";

/// As [`SETTINGS`] with a 10s max_ttl (a quarantine of 10.5s): a lagged
/// failover in three clusters (kill, thaw, takeover, the old primary back
/// as a replica, settle) must fit inside the first holder's validity for
/// the control run to be able to show a double grant; a migration, the
/// checks after it and the holder's release too; a shard restarted empty
/// in three clusters, the checks of its quarantine and a lock elsewhere
/// (over 5s on a busy machine), before the second agent's attempts.
const SETTINGS_LONG: &str = "lock:\n  default_ttl: 5s\n  max_ttl: 10s\n  node_timeout: 500ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 500ms\n";

/// Runs a blocking cluster operation without stalling the runtime that
/// serves the in-process agents.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn lock_key(resource: &str) -> String {
    format!("{PREFIX}{resource}")
}

fn slot_of(resource: &str) -> u16 {
    keys::key_slot(lock_key(resource).as_bytes())
}

/// The incarnation marker of `slot` on a cluster master.
fn marker_key(slot: u16) -> String {
    keys::slot_key(&format!("{PREFIX}{}", keys::MARKER_SUFFIX), slot)
}

/// The node ID a slot's incarnation marker on a cluster master names
/// (the marker is `<node id> e=<evicted keys>`), or `None` without one.
async fn marker_node(port: u16, slot: u16) -> Option<String> {
    let marker = get(port, &marker_key(slot)).await?;
    Some(
        marker
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
    )
}

/// The fence counter of `slot` on a cluster master.
fn fence_key(slot: u16) -> String {
    keys::slot_key(&format!("{PREFIX}{}", keys::FENCE_SUFFIX), slot)
}

/// The masters of a test: Redis Clusters `c1..`, and optionally single
/// servers after them; all killed when dropped.
struct Masters {
    clusters: Vec<RedisCluster>,
    singles: Vec<RedisServer>,
    dir: tempfile::TempDir,
}

impl Masters {
    /// `n` clusters of three primaries; the first `with_replica` have one
    /// replica per primary. Started one after the other: a node's start
    /// takes the first server answering PING on its port as its own, so two
    /// nodes started at once on one probed free port would both "start".
    fn start(n: usize, with_replica: usize) -> Masters {
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
    fn add_single(&mut self) {
        let name = format!("r{}", self.clusters.len() + self.singles.len() + 1);
        let server = RedisServer::start(self.dir.path(), &name).unwrap_or_else(|e| panic!("{e}"));
        self.singles.push(server);
    }

    fn count(&self) -> usize {
        self.clusters.len() + self.singles.len()
    }

    /// The config YAML of an agent over these masters: each cluster by all
    /// its nodes as seeds, then the singles by URL; `extra` appended.
    fn config_yaml(&self, socket: &Path, extra: &str) -> String {
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
    async fn agent(&self, extra: &str) -> TestAgent {
        let agent = TestAgent::start_with(|socket| self.config_yaml(socket, extra)).await;
        self.wait_clear(&agent).await;
        agent
    }

    async fn wait_clear(&self, agent: &TestAgent) {
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
    fn owners(&self, slot: u16) -> Vec<Primary> {
        blocking(|| {
            self.clusters
                .iter()
                .map(|c| owner(c, slot))
                .collect::<Vec<_>>()
        })
    }
}

/// The primary of `cluster` that serves `slot` now (blocking).
fn owner(cluster: &RedisCluster, slot: u16) -> Primary {
    let primaries = cluster
        .primaries()
        .unwrap_or_else(|e| panic!("{}: {e}", cluster.name()));
    primaries
        .into_iter()
        .find(|p| p.owns(slot))
        .unwrap_or_else(|| panic!("{}: no primary serves slot {slot}", cluster.name()))
}

/// Runs `fault` on the first `n` clusters at once, each on its own thread.
fn in_clusters(
    masters: &mut Masters,
    n: usize,
    fault: impl Fn(&mut RedisCluster) -> Result<(), redlock_testkit::ClusterError> + Sync,
) {
    in_these_clusters(masters, &(0..n).collect::<Vec<_>>(), fault);
}

/// Runs `fault` on the clusters at indexes `which` at once, each on its own
/// thread.
fn in_these_clusters(
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

fn node_list(nodes: &Value) -> &Vec<Value> {
    nodes["nodes"].as_array().expect("a nodes list")
}

/// Polls `/v1/nodes` until `wanted` holds; panics with the last answer at
/// `limit`.
async fn wait_nodes(
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

async fn redis(port: u16) -> redis::aio::MultiplexedConnection {
    common::redis_at(&format!("redis://127.0.0.1:{port}")).await
}

/// `GET key` on the node at `port`, which must serve the key's slot.
async fn get(port: u16, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut redis(port).await)
        .await
        .unwrap_or_else(|e| panic!("GET {key:?} on port {port}: {e}"))
}

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

/// How long a grant these tests expect may be retried inside the agent
/// (`wait_ms`, unless the body sets one): on a busy machine a vote can
/// miss the node timeout and the round fail `no_quorum` with every master
/// healthy. No resource acquired this way is held by anyone else, so the
/// wait only ever outlasts such rounds.
const GRANT_WAIT_MS: u64 = 10_000;

/// Acquires `resource` with `body`; the token and the instant before which
/// the grant is surely valid (asked + validity).
async fn acquire(agent: &TestAgent, resource: &str, mut body: Value) -> (String, Instant, Value) {
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

async fn release(agent: &TestAgent, resource: &str, token: &str) -> Value {
    let (status, body) = agent
        .post(
            &format!("/v1/locks/{resource}/release"),
            json!({ "token": token }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "release {resource}: {body}");
    body
}

/// A second client asks for `resource` again and again until `until`; every
/// answer must be a refusal. Returns how many it made (at least one, or the
/// test saw nothing).
async fn never_granted(second: &TestAgent, resource: &str, until: Instant, why: &str) -> usize {
    let mut tries = 0;
    while Instant::now() < until {
        let (status, body) = second
            .post(
                &format!("/v1/locks/{resource}/acquire"),
                json!({"owner": "second"}),
            )
            .await;
        assert_ne!(
            status,
            StatusCode::OK,
            "double grant: the second client got {resource} while the first one's lock was valid ({why}): {body}"
        );
        assert!(
            body["error"]["code"] == "taken" || body["error"]["code"] == "no_quorum",
            "{body}"
        );
        tries += 1;
    }
    assert!(
        tries > 0,
        "the fault took longer than the first lock's validity: no attempt was made while it held ({why})"
    );
    tries
}

/// A resource whose lock key's slot is served by a shard other than
/// `shard` in cluster `c` (the same in every cluster here: each splits the
/// slots evenly in the same order).
fn resource_off_shard(c: &RedisCluster, shard: usize, stem: &str) -> String {
    blocking(|| {
        (0..)
            .map(|i| format!("{stem}-{i}"))
            .find(|r| c.shard_of_slot(slot_of(r)).unwrap() != shard)
            .expect("some resource lands elsewhere")
    })
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

/// In three of five clusters, the shard that serves a held lock's slot
/// restarts empty. While the first holder's lock may be valid, a second
/// agent never gets it; the holder's extend answers `lost`. Those shards'
/// slots are quarantined (`quarantined_slots` > 0 on them, 0 on every other
/// shard, every master still `up`), a lock in another shard's slot works
/// meanwhile, and after max_ttl + extra the slots are readmitted: the
/// slot's marker is back on the restarted primary naming its node ID, and
/// the second agent gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_restarted_empty_never_grants_twice_and_only_its_slots_wait() {
    let mut masters = Masters::start(5, 0);
    let a = masters.agent(SETTINGS_LONG).await;
    let b = masters.agent(SETTINGS_LONG).await;
    let slot = slot_of("held");
    let shard = blocking(|| masters.clusters[0].shard_of_slot(slot)).unwrap();
    let elsewhere = resource_off_shard(&masters.clusters[0], shard, "other");

    let (token, valid_until, _) =
        acquire(&a, "held", json!({"ttl_ms": 10000, "owner": "first"})).await;
    in_clusters(&mut masters, 3, |c| c.restart_empty(shard));
    let owners = masters.owners(slot);
    for (c, p) in masters.clusters.iter().zip(&owners).take(3) {
        assert_eq!(
            p.shard,
            shard,
            "{}: the restarted shard still serves the slot",
            c.name()
        );
        assert_eq!(
            get(p.port, &lock_key("held")).await,
            None,
            "{}: the key is gone",
            c.name()
        );
        assert_eq!(
            get(p.port, &marker_key(slot)).await,
            None,
            "{}: the marker is gone",
            c.name()
        );
    }

    let (status, body) = a
        .post(
            "/v1/locks/held/extend",
            json!({"token": token, "ttl_ms": 5000}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "lost", "{body}");

    let quarantined = |nodes: &Value| {
        masters.clusters[..3].iter().all(|c| {
            let n = node(nodes, c.name());
            n["quarantined_slots"].as_u64() > Some(0)
        })
    };
    let nodes = wait_nodes(
        &b,
        "the restarted shards' slots in quarantine",
        Duration::from_secs(5),
        &quarantined,
    )
    .await;
    for (i, c) in masters.clusters.iter().enumerate() {
        let n = node(&nodes, c.name());
        assert_eq!(n["state"], "up", "only slots are kept out: {n:#}");
        let restarted = i < 3;
        for s in n["shards"].as_array().unwrap() {
            let here = s["addr"] == format!("127.0.0.1:{}", c.primary_port(shard)).as_str();
            if restarted && here {
                assert!(
                    s["quarantined_slots"].as_u64() > Some(0),
                    "{}: {s}",
                    c.name()
                );
            } else {
                assert_eq!(
                    s["quarantined_slots"],
                    0,
                    "{}: only the restarted shard: {n:#}",
                    c.name()
                );
            }
        }
    }

    // Meanwhile: a lock in another shard's slot works, read back on the
    // shard serving it in each cluster: on a quorum of clusters (a vote
    // late on a busy machine may miss one), so in at least one of the three
    // with a shard in quarantine.
    let (other, _, _) = acquire(&b, &elsewhere, json!({"ttl_ms": 5000})).await;
    let mut holding = Vec::new();
    for (i, p) in masters.owners(slot_of(&elsewhere)).iter().enumerate() {
        if get(p.port, &lock_key(&elsewhere)).await.as_deref() == Some(other.as_str()) {
            holding.push(i);
        }
    }
    assert!(
        holding.len() >= 3 && holding.iter().any(|&i| i < 3),
        "{elsewhere} is held on clusters {holding:?}: a quorum, one with a shard in quarantine"
    );
    let body = release(&b, &elsewhere, &other).await;
    assert_eq!(body["released"], true, "{body}");
    let nodes = b.nodes().await;
    assert!(
        quarantined(&nodes),
        "the other lock worked while the slots were still quarantined: {nodes:#}"
    );

    never_granted(
        &b,
        "held",
        valid_until,
        "a shard restarted empty in 3 of 5 clusters",
    )
    .await;

    // Readmitted after the quarantine, with the marker rewritten.
    wait_nodes(
        &b,
        "the slots readmitted",
        // max_ttl + extra, then every slot's witness and marker written
        // again: seconds more on a busy machine.
        Duration::from_secs(60),
        |nodes| node_list(nodes).iter().all(|m| m["quarantined_slots"] == 0),
    )
    .await;
    for (c, p) in masters.clusters.iter().zip(&owners).take(3) {
        assert_eq!(
            marker_node(p.port, slot).await.as_deref(),
            Some(p.node_id.as_str()),
            "{}: the slot's marker names the primary serving it",
            c.name()
        );
    }
    let (status, body) = b
        .post(
            "/v1/locks/held/acquire",
            json!({"wait_ms": 10000, "owner": "second"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(Instant::now() > valid_until);
}

/// What a lagged failover run saw.
struct FailoverRun {
    /// Grants the second agent got while the first one's lock was valid.
    double_grants: usize,
    /// Refusals it got meanwhile.
    refusals: usize,
}

/// Five clusters, the first three with a replica per primary. The replica
/// of the shard serving the lock's slot is frozen (in those three), the
/// first agent takes the lock (on the primaries only), then each of those
/// shards fails over to its replica, which lacks the key but has the slot's
/// marker naming the old primary. The second agent, with the per-slot
/// marker check on or off (`REDLOCK_TEST_NO_MARKER_CHECK=1`), asks for the
/// lock until the first one's validity ends.
async fn lagged_failover(marker_check: bool) -> (FailoverRun, Masters, TestAgent) {
    let mut masters = Masters::start(5, 3);
    let a = masters.agent(SETTINGS_LONG).await;
    let b = if marker_check {
        masters.agent(SETTINGS_LONG).await
    } else {
        let _switch = Switch::set(redlock_testkit::switches::NO_MARKER_CHECK, "1");
        masters.agent(SETTINGS_LONG).await
    };
    let slot = slot_of("failover");
    let shard = blocking(|| masters.clusters[0].shard_of_slot(slot)).unwrap();
    let old: Vec<Primary> = masters.owners(slot);

    in_clusters(&mut masters, 3, |c| c.begin_lagged_failover(shard));
    let (token, valid_until, _) =
        acquire(&a, "failover", json!({"ttl_ms": 10000, "owner": "first"})).await;
    for (c, p) in masters.clusters.iter().zip(&old).take(3) {
        assert_eq!(
            get(p.port, &lock_key("failover")).await.as_deref(),
            Some(token.as_str()),
            "{}: the old primary has the lock",
            c.name()
        );
    }
    in_clusters(&mut masters, 3, |c| c.finish_lagged_failover(shard));
    let new = masters.owners(slot);
    for ((c, before), after) in masters.clusters.iter().zip(&old).zip(&new).take(3) {
        assert_ne!(after.node_id, before.node_id, "{}: failed over", c.name());
        assert_eq!(
            get(after.port, &lock_key("failover")).await,
            None,
            "{}: the promoted replica lacks the lock",
            c.name()
        );
        // The replica's copy of the marker names the old primary, unless an
        // agent's probe saw the failover first and deleted it; never the
        // new primary, which would let the slot vote at once.
        let marker = marker_node(after.port, slot).await;
        assert_ne!(
            marker.as_deref(),
            Some(after.node_id.as_str()),
            "{}: the promoted replica's marker names itself",
            c.name()
        );
        assert!(
            marker.is_none() || marker.as_deref() == Some(before.node_id.as_str()),
            "{}: the promoted replica's marker: {marker:?}",
            c.name()
        );
    }

    let mut run = FailoverRun {
        double_grants: 0,
        refusals: 0,
    };
    while Instant::now() < valid_until {
        let (status, body) = b
            .post("/v1/locks/failover/acquire", json!({"owner": "second"}))
            .await;
        if status == StatusCode::OK {
            if Instant::now() < valid_until {
                run.double_grants += 1;
            }
            break;
        }
        assert!(
            body["error"]["code"] == "taken" || body["error"]["code"] == "no_quorum",
            "{body}"
        );
        run.refusals += 1;
    }
    (run, masters, b)
}

/// A lagged failover of the shard serving a held lock's slot, in three of
/// five clusters: the promoted replicas miss the lock, but their slot's
/// marker names the old primary, so the slot refuses and is quarantined;
/// the second agent never gets the lock while the first one's is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagged_failover_in_three_clusters_never_grants_twice() {
    let (run, masters, b) = lagged_failover(true).await;
    assert_eq!(
        run.double_grants, 0,
        "double grant after a lagged failover in 3 of 5 clusters"
    );
    assert!(
        run.refusals > 0,
        "the failovers outlasted the first lock's validity: nothing was tried"
    );
    let nodes = wait_nodes(
        &b,
        "the failed-over slot in quarantine",
        Duration::from_secs(5),
        |nodes| {
            masters.clusters[..3]
                .iter()
                .all(|c| node(nodes, c.name())["quarantined_slots"].as_u64() > Some(0))
        },
    )
    .await;
    for c in &masters.clusters[3..] {
        assert_eq!(node(&nodes, c.name())["quarantined_slots"], 0, "{nodes:#}");
    }
}

/// The control: the same lagged failover with the second agent's per-slot
/// marker check off (`REDLOCK_TEST_NO_MARKER_CHECK=1`). The promoted
/// replicas vote for the lock they never saw and the second agent gets it
/// while the first one's is still valid: the double grant the check
/// prevents, so the test above can see one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_without_the_marker_check_grants_twice_after_a_lagged_failover() {
    let (run, _masters, _b) = lagged_failover(false).await;
    assert_eq!(
        run.double_grants, 1,
        "the control found no double grant ({} refusals): the test cannot see one, or the agent ignored the switch",
        run.refusals
    );
}

/// The slot of a held lock migrates to another shard in three of five
/// clusters (`MIGRATING`/`IMPORTING`, the keys moved, the slot handed
/// over). Mid-migration and after it, a second agent never gets the lock;
/// the migrated slot is quarantined on its new shard, and only it, since
/// its marker names the old node; the holder releases the lock (`released:
/// true`) and the key is gone from every cluster; once the slot is
/// readmitted on a quorum of masters, the second agent gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_a_held_lock_keeps_it_exclusive() {
    let mut masters = Masters::start(5, 0);
    let a = masters.agent(SETTINGS_LONG).await;
    let b = masters.agent(SETTINGS_LONG).await;
    let slot = slot_of("moving");
    let from = blocking(|| masters.clusters[0].shard_of_slot(slot)).unwrap();
    let to = (from + 1) % 3;

    let (token, valid_until, _) =
        acquire(&a, "moving", json!({"ttl_ms": 10000, "owner": "first"})).await;
    let migrations: Vec<_> = blocking(|| {
        masters.clusters[..3]
            .iter_mut()
            .map(|c| {
                c.begin_migration(slot, to)
                    .unwrap_or_else(|e| panic!("{}: {e}", c.name()))
            })
            .collect()
    });
    let (status, body) = b
        .post("/v1/locks/moving/acquire", json!({"owner": "second"}))
        .await;
    assert_ne!(status, StatusCode::OK, "double grant mid-migration: {body}");

    blocking(|| {
        for (c, m) in masters.clusters.iter_mut().zip(migrations) {
            let name = c.name().to_string();
            c.finish_migration(m)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    });
    let owners = masters.owners(slot);
    for (i, (c, p)) in masters.clusters.iter().zip(&owners).enumerate() {
        assert_eq!(p.shard, if i < 3 { to } else { from }, "{}", c.name());
        assert_eq!(
            get(p.port, &lock_key("moving")).await.as_deref(),
            Some(token.as_str()),
            "{}: the lock is on the shard serving its slot",
            c.name()
        );
        if i < 3 {
            // The marker moved with the slot naming the old node, unless an
            // agent's probe saw the new owner first and deleted it; never
            // the new node's ID, which would let the slot vote at once.
            let marker = marker_node(p.port, slot).await;
            assert_ne!(
                marker.as_deref(),
                Some(p.node_id.as_str()),
                "{}: the moved marker names the node serving the slot now",
                c.name()
            );
        }
    }

    // A short burst of attempts: the holder must still hold it to release.
    let burst = valid_until.min(Instant::now() + Duration::from_millis(500));
    never_granted(&b, "moving", burst, "its slot migrated in 3 of 5 clusters").await;
    let nodes = wait_nodes(
        &b,
        "the migrated slot in quarantine",
        Duration::from_secs(5),
        |nodes| {
            masters.clusters[..3]
                .iter()
                .all(|c| node(nodes, c.name())["quarantined_slots"].as_u64() > Some(0))
        },
    )
    .await;
    for (i, (c, p)) in masters.clusters.iter().zip(&owners).enumerate() {
        let n = node(&nodes, c.name());
        assert_eq!(n["state"], "up", "{n:#}");
        assert_eq!(
            n["quarantined_slots"],
            u64::from(i < 3),
            "only the migrated slot: {n:#}"
        );
        for s in n["shards"].as_array().unwrap() {
            let migrated_here = i < 3 && s["addr"] == format!("127.0.0.1:{}", p.port).as_str();
            assert_eq!(
                s["quarantined_slots"],
                u64::from(migrated_here),
                "{}: only the migrated slot, on its new shard: {n:#}",
                c.name()
            );
        }
    }

    assert!(
        Instant::now() < valid_until,
        "the migrations outlasted the holder's validity; nothing left to release"
    );
    let body = release(&a, "moving", &token).await;
    assert_eq!(body["released"], true, "the holder released it: {body}");
    for (c, p) in masters.clusters.iter().zip(&owners) {
        assert_eq!(
            get(p.port, &lock_key("moving")).await,
            None,
            "{}: released on the shard serving the slot now",
            c.name()
        );
    }

    let (status, body) = b
        .post(
            "/v1/locks/moving/acquire",
            json!({"owner": "second", "wait_ms": 15000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Its votes came from a quorum of masters where the slot is trusted: a
    // quarantined slot never votes.
    let nodes = b.nodes().await;
    let trusted = node_list(&nodes)
        .iter()
        .filter(|m| m["quarantined_slots"] == 0)
        .count();
    assert!(
        trusted >= 3,
        "granted with the slot readmitted on a quorum of masters: {nodes:#}"
    );
}

/// A fenced acquire of `resource`: its token and fence.
async fn fenced(agent: &TestAgent, resource: &str) -> (String, u64) {
    let (token, _, grant) = acquire(agent, resource, json!({"ttl_ms": 2000, "fence": true})).await;
    let fence = grant["fence"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fence in {grant}"));
    (token, fence)
}

/// The fence counter of `slot` on each cluster's primary in `owners`
/// (`None` where it has none).
async fn fence_counters(owners: &[Primary], slot: u16) -> Vec<Option<u64>> {
    let mut counters = Vec::new();
    for p in owners {
        counters.push(get(p.port, &fence_key(slot)).await.map(|c| {
            c.parse()
                .unwrap_or_else(|e| panic!("port {}: fence counter {c:?}: {e}", p.port))
        }));
    }
    counters
}

/// What one fenced grant left in the counters, read after its release:
/// round 2 wrote `fence` to the masters that voted yes, and the grant was
/// answered only once a quorum of them confirmed, so at least a quorum of
/// clusters hold `fence`, each up from a smaller counter or none. No
/// counter is above `fence` (the largest fence answered so far), and none
/// went down or vanished (a master that did not vote keeps its counter).
fn check_counters(
    masters: &Masters,
    round: &str,
    before: &[Option<u64>],
    after: &[Option<u64>],
    fence: u64,
) {
    let mut holders = Vec::new();
    for (i, c) in masters.clusters.iter().enumerate() {
        let name = c.name();
        match (before[i], after[i]) {
            (Some(b), None) => panic!("{round}: {name}: the fence counter {b} vanished"),
            (Some(b), Some(a)) => {
                assert!(a >= b, "{round}: {name}: the counter went down, {b} to {a}")
            }
            _ => {}
        }
        let Some(counter) = after[i] else { continue };
        assert!(
            counter <= fence,
            "{round}: {name}: {counter} above the fence answered, {fence}"
        );
        if counter == fence {
            assert!(
                before[i].is_none_or(|b| b < fence),
                "{round}: {name}: held the new fence {fence} before it was answered"
            );
            holders.push(i);
        }
    }
    assert!(
        holders.len() > masters.count() / 2,
        "{round}: a quorum of clusters holds the fence {fence}: {holders:?}, counters {after:?}"
    );
}

/// Fences for one resource keep growing over grants by two agents on five
/// clusters; after each grant, the slot's counter on the shard serving it
/// holds that fence on a quorum of clusters (the ones that voted yes: a
/// cluster that did not vote may have an older counter, or none yet) and
/// is never above it or going down. The shard serving it restarts empty
/// in three clusters, two holders of the last fence surviving (the counter
/// gone on the three); once readmitted, their counters have caught up to
/// the last fence and the next fences are still larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_keep_growing_on_clusters_across_a_shard_restarted_empty() {
    let mut masters = Masters::start(5, 0);
    let a = masters.agent(SETTINGS).await;
    let b = masters.agent(SETTINGS).await;
    let slot = slot_of("fenced");
    let shard = blocking(|| masters.clusters[0].shard_of_slot(slot)).unwrap();
    let owners = masters.owners(slot);

    let mut last = 0;
    let mut counters = vec![None; masters.count()];
    for round in 0..6 {
        let agent = if round % 2 == 0 { &a } else { &b };
        let (token, fence) = fenced(agent, "fenced").await;
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        last = fence;
        release(agent, "fenced", &token).await;
        let now = fence_counters(&owners, slot).await;
        check_counters(&masters, &format!("round {round}"), &counters, &now, fence);
        counters = now;
    }
    let holders: Vec<usize> = (0..counters.len())
        .filter(|&i| counters[i] == Some(last))
        .collect();

    // Three clusters restart, the ones without the last fence first, so
    // that two holders of it survive for the catch-up to read (with all
    // of them lost, fences rest on the clock floor instead).
    let mut restarted: Vec<usize> = (0..5).filter(|i| !holders.contains(i)).collect();
    restarted.extend(holders.iter().copied());
    restarted.truncate(3);
    in_these_clusters(&mut masters, &restarted, |c| c.restart_empty(shard));
    for &i in &restarted {
        assert_eq!(
            get(owners[i].port, &fence_key(slot)).await,
            None,
            "{}: the counter is gone",
            masters.clusters[i].name()
        );
    }
    wait_nodes(
        &a,
        "the restarted slots in quarantine",
        Duration::from_secs(5),
        |nodes| {
            restarted.iter().all(|&i| {
                node(nodes, masters.clusters[i].name())["quarantined_slots"].as_u64() > Some(0)
            })
        },
    )
    .await;
    wait_nodes(
        &a,
        "the slots readmitted",
        // max_ttl + extra, then every slot's witness and marker written
        // again: seconds more on a busy machine.
        Duration::from_secs(60),
        |nodes| node_list(nodes).iter().all(|m| m["quarantined_slots"] == 0),
    )
    .await;
    for &i in &restarted {
        let name = masters.clusters[i].name();
        let counter: u64 = get(owners[i].port, &fence_key(slot))
            .await
            .unwrap_or_else(|| panic!("{name}: the counter is back with the marker"))
            .parse()
            .unwrap();
        assert!(
            counter >= last,
            "{name}: the counter {counter} caught up to the last fence {last}, which clusters {holders:?} held"
        );
    }
    let mut counters = fence_counters(&owners, slot).await;
    for (round, agent) in [&b, &a].into_iter().enumerate() {
        let (token, fence) = fenced(agent, "fenced").await;
        assert!(
            fence > last,
            "after the restart: fence {fence} after {last}"
        );
        last = fence;
        release(agent, "fenced", &token).await;
        let now = fence_counters(&owners, slot).await;
        let what = format!("round {round} after the restart");
        check_counters(&masters, &what, &counters, &now, fence);
        counters = now;
    }
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

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");

/// `redlock-agent <args> --config FILE` on `yaml`: exit code and stderr.
fn run_agent(args: &[&str], yaml: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, yaml).unwrap();
    let out = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A master with both `url` and `cluster`, one with an empty `cluster`, a
/// seed that is not a redis URL, a cluster seed that is another master's
/// server and two clusters sharing a seed: `check` reports every one at
/// once with its field path and exits 64; so does a plain run, before
/// binding its socket.
#[test]
fn bad_cluster_masters_are_refused_with_their_field_paths() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let yaml = format!(
        "socket:\n  path: {:?}\nmasters:\n\
         \x20 - name: r1\n    url: redis://127.0.0.1:7001\n\
         \x20 - name: both\n    url: redis://127.0.0.1:7101\n    cluster: [redis://127.0.0.1:7102]\n\
         \x20 - name: empty\n    cluster: []\n\
         \x20 - name: http\n    cluster: [redis://127.0.0.1:7301, http://127.0.0.1:7302]\n\
         \x20 - name: shares-r1\n    cluster: [redis://127.0.0.1:7401, redis://localhost:7001]\n\
         \x20 - name: c6\n    cluster: [redis://127.0.0.1:7601, redis://127.0.0.1:7602]\n\
         \x20 - name: c7\n    cluster: [redis://127.0.0.1:7701, redis://127.0.0.1:7602]\n",
        socket.display().to_string()
    );
    let (code, stderr) = run_agent(&["check"], &yaml);
    assert_eq!(code, Some(64), "{stderr}");
    for expected in [
        "masters[1].cluster: give url (one server) or cluster (a Redis Cluster's seed nodes), not both",
        "masters[2].cluster: needs at least one seed node",
        "masters[3].cluster[1]: not a redis:// or rediss:// URL: \"http://127.0.0.1:7302/\"",
        "masters[4].cluster[1]: shares-r1 reaches the same server as masters[0].url (r1)",
        "masters[6].cluster[1]: c7 reaches the same server as masters[5].cluster[1] (c6)",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in:\n{stderr}");
    }
    // The master each error line is about: the first one it names.
    let subjects: std::collections::BTreeSet<usize> = stderr
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("masters[")? + "masters[".len()..];
            rest[..rest.find(']')?].parse().ok()
        })
        .collect();
    assert_eq!(
        subjects,
        [1, 2, 3, 4, 6].into(),
        "errors about exactly the bad masters (r1 and c6 are fine on their own):\n{stderr}"
    );

    let (code, stderr) = run_agent(&[], &yaml);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("masters[2].cluster"), "{stderr}");
    assert!(!socket.exists(), "refused before binding its socket");
}

/// Each problem alone is refused too (no error hides behind another), and
/// a good mix of singles and clusters passes the file's checks (`check
/// --offline`; `check` then names each master, none of which runs).
#[test]
fn each_cluster_config_problem_alone_exits_64_and_a_good_mix_passes() {
    let single =
        |name: &str, port: u16| format!("  - name: {name}\n    url: redis://127.0.0.1:{port}\n");
    let cluster = |name: &str, ports: &[u16]| {
        let mut s = format!("  - name: {name}\n    cluster:\n");
        for p in ports {
            s.push_str(&format!("      - redis://127.0.0.1:{p}\n"));
        }
        s
    };
    let config = |masters: &[String]| format!("masters:\n{}", masters.concat());
    let cases = [
        (
            "url and cluster",
            config(&[
                single("r1", 7001),
                "  - name: c2\n    url: redis://127.0.0.1:7002\n    cluster: [redis://127.0.0.1:7003]\n".to_string(),
                single("r3", 7004),
            ]),
            "masters[1].cluster: give url (one server) or cluster (a Redis Cluster's seed nodes), not both",
        ),
        (
            "an empty cluster",
            config(&[single("r1", 7001), "  - name: c2\n    cluster: []\n".to_string(), single("r3", 7004)]),
            "masters[1].cluster: needs at least one seed node",
        ),
        (
            "neither url nor cluster",
            config(&[single("r1", 7001), "  - name: c2\n".to_string(), single("r3", 7004)]),
            "masters[1].url: required (or cluster: a Redis Cluster's seed nodes)",
        ),
        (
            "a cluster seed that is a single master",
            config(&[single("r1", 7001), cluster("c2", &[7002, 7001]), single("r3", 7004)]),
            "masters[1].cluster[1]: c2 reaches the same server as masters[0].url (r1)",
        ),
        (
            "two clusters sharing a seed",
            config(&[cluster("c1", &[7001, 7002]), cluster("c2", &[7003, 7002]), single("r3", 7004)]),
            "masters[1].cluster[1]: c2 reaches the same server as masters[0].cluster[1] (c1)",
        ),
    ];
    for (what, yaml, field) in &cases {
        let (code, stderr) = run_agent(&["check"], yaml);
        assert_eq!(code, Some(64), "{what}: {stderr}\n{yaml}");
        assert!(
            stderr.contains(field),
            "{what}: {field:?} not in:\n{stderr}"
        );
    }

    let good = config(&[
        single("r1", 7001),
        cluster("c2", &[7101, 7102, 7103]),
        cluster("c3", &[7201]),
        single("r4", 7004),
        cluster("c5", &[7501, 7502]),
    ]);
    // Nothing listens on these ports: the file passes (no field is
    // refused), and then every master is named as one check cannot reach;
    // --offline passes it.
    let (code, stderr) = run_agent(&["check"], &good);
    assert_eq!(code, Some(64), "{stderr}\n{good}");
    assert!(!stderr.contains("not a usable config"), "{stderr}");
    assert!(stderr.contains("5 of 5 masters cannot be used"), "{stderr}");
    let (code, stderr) = run_agent(&["check", "--offline"], &good);
    assert_eq!(code, Some(0), "{stderr}\n{good}");
    assert!(stderr.contains("(5 masters, quorum 3)"), "{stderr}");
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
