//! Readiness says yes only when a lock can be granted, on real Redis
//! Clusters: an agent that meets three new clusters (no slot markers yet)
//! quarantines all 16,384 slots of each for `max_ttl + extra`; every
//! master is `up`, yet no lock can be granted. `/readyz` answers 503 and
//! `/v1/nodes` says `available: false` with its reason and each master's
//! slots in quarantine, agreeing with an acquire's `no_quorum`; once the
//! slots are readmitted, `/readyz` answers 200 and the acquire is granted.
//! The control run counts masters only (`REDLOCK_TEST_NO_SLOT_READINESS=1`)
//! and answers 200 while the acquire answers 503: the test's assertion
//! fails without slot-aware readiness.
//!
//! And readiness does not wait for votes to learn of a loss: every shard
//! of one cluster flushed (`FLUSHALL` on each primary: every slot marker
//! gone, no restart to see) and a second cluster frozen (`SIGSTOP`), the
//! frozen one is `down` within two probe timeouts and `/readyz` answers
//! 503 counting all 16,384 slots, without a single acquire.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{node, redis_at, wait_for, Switch, TestAgent};
use hyper::StatusCode;
use redlock_testkit::switches::NO_SLOT_READINESS;
use redlock_testkit::RedisCluster;
use serde_json::{json, Value};

/// A quarantine of max_ttl + extra = 6 s: long enough to look at the
/// agent during it on a busy machine, short enough to wait out.
const SETTINGS: &str = "lock:\n  default_ttl: 4s\n  max_ttl: 4s\n  node_timeout: 200ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 2s\n";

const CLUSTERS: [&str; 3] = ["c1", "c2", "c3"];

/// Runs a blocking cluster operation without stalling the runtime that
/// serves the in-process agent.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Three Redis Clusters of three primaries each, killed when dropped.
struct Clusters {
    clusters: Vec<RedisCluster>,
    _dir: tempfile::TempDir,
}

impl Clusters {
    fn start() -> Clusters {
        let dir = tempfile::tempdir().expect("temp dir");
        let clusters = blocking(|| {
            CLUSTERS
                .iter()
                .map(|name| {
                    RedisCluster::start(dir.path(), name, 3, 0)
                        .unwrap_or_else(|e| panic!("cluster {name}: {e}"))
                })
                .collect()
        });
        Clusters {
            clusters,
            _dir: dir,
        }
    }

    fn config_yaml(&self, socket: &Path, settings: &str) -> String {
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
        yaml.push_str(settings);
        yaml
    }

    /// An agent that meets these clusters as in production: without their
    /// markers, every slot goes into quarantine at first sight. With
    /// `slot_readiness` false, under the control's switch.
    async fn agent(&self, slot_readiness: bool) -> TestAgent {
        let _switch = (!slot_readiness).then(|| Switch::set(NO_SLOT_READINESS, "1"));
        TestAgent::start_cautious_with(|socket| self.config_yaml(socket, SETTINGS)).await
    }

    /// An agent that knows these clusters started empty: it writes every
    /// slot's marker at first sight instead of quarantining the slots.
    /// Returns once every cluster is up with no slot out and `/readyz`
    /// answers 200.
    async fn agent_fresh(&self, settings: &str) -> TestAgent {
        let agent = TestAgent::start_with(|socket| self.config_yaml(socket, settings)).await;
        wait_for(
            "every cluster up with no slot in quarantine, and ready",
            Duration::from_secs(30),
            || async {
                let nodes = agent.nodes().await;
                CLUSTERS.iter().all(|name| {
                    let n = node(&nodes, name);
                    n["state"] == "up" && n["quarantined_slots"] == 0
                }) && readyz(&agent).await.0 == StatusCode::OK
            },
        )
        .await;
        agent
    }
}

/// `/readyz` on the metrics listener: its status and JSON.
async fn readyz(agent: &TestAgent) -> (StatusCode, Value) {
    let (status, body) = agent.get_tcp("/readyz").await;
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, json)
}

/// What the agent says while every slot of every cluster is quarantined:
/// `/readyz`, `/v1/nodes`, and an acquire's status and body.
struct During {
    ready: (StatusCode, Value),
    nodes: Value,
    acquire: (StatusCode, Value),
}

/// Starts the clusters and the agent, and looks at it while every master
/// is up and every slot quarantined.
async fn during_quarantine(slot_readiness: bool) -> (Clusters, TestAgent, During) {
    let clusters = Clusters::start();
    let agent = clusters.agent(slot_readiness).await;
    // The first probe reads every slot's marker; on a busy machine some
    // answers come at a later probe.
    wait_for(
        "every cluster up with all its slots in quarantine",
        Duration::from_secs(30),
        || async {
            let nodes = agent.nodes().await;
            CLUSTERS.iter().all(|name| {
                let n = node(&nodes, name);
                n["state"] == "up" && n["quarantined_slots"] == 16384
            })
        },
    )
    .await;
    let nodes = agent.nodes().await;
    assert_eq!(nodes["usable"], 3, "{nodes:#}");
    let ready = readyz(&agent).await;
    let acquire = agent.post("/v1/locks/orders-42/acquire", json!({})).await;
    let during = During {
        ready,
        nodes,
        acquire,
    };
    (clusters, agent, during)
}

/// Three new clusters, every slot in quarantine, every master up: `/readyz`
/// answers 503 and `/v1/nodes` says why (`available: false`, a reason,
/// 16384 slots without a quorum, each master's slots in quarantine and the
/// time left), as an acquire answers 503 `no_quorum`. Once the slots are
/// readmitted, `/readyz` answers 200 and the acquire is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_cluster_slots_are_quarantined_and_200_after() {
    let (_clusters, agent, during) = during_quarantine(true).await;
    let (status, body) = &during.acquire;
    assert_eq!(*status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "no_quorum", "{body}");

    let (status, ready) = &during.ready;
    assert_eq!(*status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert_eq!(ready["ready"], false, "{ready}");
    assert_eq!(ready["slots_without_quorum"], 16384, "{ready}");
    let nodes = &during.nodes;
    assert_eq!(nodes["available"], false, "{nodes:#}");
    assert_eq!(nodes["slots_without_quorum"], 16384, "{nodes:#}");
    let reason = nodes["reason"].as_str().expect("a reason");
    assert!(reason.contains("16384 of 16384 hash slots"), "{reason}");
    for name in CLUSTERS {
        assert!(reason.contains(name), "{reason}");
        let left = node(nodes, name)["quarantined_slots_remaining_ms"].as_u64();
        assert!(left.is_some_and(|ms| ms > 0 && ms <= 6000), "{nodes:#}");
    }

    // Readmission reads and writes every slot's marker and fencing counter
    // (16384 per cluster), slowly on a busy machine: 30 to 50 s after the
    // quarantine ended at a load of 18 to 20 on 2 cores (2026-11-26).
    wait_for(
        "/readyz to answer 200 after the slots' readmission",
        Duration::from_secs(180),
        || async { readyz(&agent).await.0 == StatusCode::OK },
    )
    .await;
    let nodes = agent.nodes().await;
    assert_eq!(nodes["available"], true, "{nodes:#}");
    assert_eq!(nodes["slots_without_quorum"], 0, "{nodes:#}");
    assert!(nodes.get("reason").is_none(), "{nodes:#}");
    let (status, body) = agent.post("/v1/locks/orders-42/acquire", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// The control: with readiness counting masters only
/// (`REDLOCK_TEST_NO_SLOT_READINESS=1`), the same agent answers `/readyz`
/// 200 while its acquire answers 503: the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_counting_masters_only_says_ready_while_no_lock_can_be_granted() {
    let (_clusters, _agent, during) = during_quarantine(false).await;
    assert_eq!(
        during.acquire.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        during.acquire.1
    );
    assert_eq!(
        during.ready.0,
        StatusCode::OK,
        "the control said not ready: the switch is ignored, or the test cannot tell: {}",
        during.ready.1
    );
    assert_eq!(during.nodes["available"], true, "{:#}", during.nodes);
}

/// As [`SETTINGS`] with a quarantine of max_ttl + extra = 64 s: the
/// flushed cluster's slots stay out for the whole test. The probe timeout
/// is the node timeout times ten, at most 2 s.
const SETTINGS_LONG_QUARANTINE: &str = "lock:\n  default_ttl: 4s\n  max_ttl: 4s\n  node_timeout: 200ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 60s\n";

/// Two probe timeouts of 2 s (a probe that times out once is tried again
/// before the master counts as down), plus the probes' interval and room
/// for a busy machine.
const FROZEN_DOWN_WITHIN: Duration = Duration::from_secs(12);

/// Polls `/readyz` until `done` holds of its status and JSON, or panics at
/// `limit` with the last answer.
async fn wait_readyz(
    agent: &TestAgent,
    what: &str,
    limit: Duration,
    done: impl Fn(StatusCode, &Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (status, body) = readyz(agent).await;
        if done(status, &body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; /readyz answered {status}: {body:#}\n\
             /v1/nodes: {:#}",
            agent.nodes().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every shard of c1 flushed (every slot marker gone while the primaries
/// live on) and c2 frozen: no acquire can succeed (c3 alone is no quorum).
/// With no vote to tell it, the agent still sees c2 `down` within two
/// probe timeouts and every slot of c1 in quarantine, and `/readyz`
/// answers 503 counting all 16,384 slots without a quorum, as the acquire
/// that follows answers `no_quorum`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_counting_every_slot_after_a_cluster_is_flushed_and_another_frozen() {
    let mut clusters = Clusters::start();
    let agent = clusters.agent_fresh(SETTINGS_LONG_QUARANTINE).await;

    let flushed = &clusters.clusters[0];
    for shard in 0..flushed.shards() {
        let port = flushed.primary_port(shard);
        let mut conn = redis_at(&format!("redis://127.0.0.1:{port}")).await;
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("FLUSHALL on {port}: {e}"));
    }
    blocking(|| clusters.clusters[1].freeze_all()).expect("freeze c2");

    wait_for("c2, frozen, to be down", FROZEN_DOWN_WITHIN, || async {
        node(&agent.nodes().await, "c2")["state"] == "down"
    })
    .await;

    let ready = wait_readyz(
        &agent,
        "/readyz to answer 503 with every slot without a quorum",
        Duration::from_secs(10),
        |status, body| {
            status == StatusCode::SERVICE_UNAVAILABLE && body["slots_without_quorum"] == 16384
        },
    )
    .await;
    assert_eq!(ready["ready"], false, "{ready:#}");
    let reason = ready["reason"].as_str().expect("a reason");
    assert!(reason.contains("16384 of 16384 hash slots"), "{reason}");
    assert!(
        reason.contains("c1 has 16384 slots in quarantine"),
        "{reason}"
    );
    let nodes = agent.nodes().await;
    assert_eq!(node(&nodes, "c1")["quarantined_slots"], 16384, "{nodes:#}");
    assert_eq!(node(&nodes, "c3")["quarantined_slots"], 0, "{nodes:#}");

    let (status, body) = agent.post("/v1/locks/orders-42/acquire", json!({})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "no_quorum", "{body}");
    blocking(|| clusters.clusters[1].thaw_all());
}
