//! Delayed restart against real masters: the Redlock page's violation
//! (a restarted master forgets a held lock) reproduced with quarantine off,
//! prevented with it on; each restart detector on its own; topology checks.

mod common;

use std::time::{Duration, Instant};

use common::{node, wait_for, Cluster, TestAgent, SHORT, SHORT_QUARANTINE};
use hyper::StatusCode;
use redlock_testkit::{Options, RedisServer};
use serde_json::{json, Value};

/// Steps 1-2 of the scenario: r4 and r5 down, A holds `res` on r1..r3,
/// then r1 restarts empty and r4, r5 come back empty. Returns A's
/// validity deadline.
async fn lock_then_restart_a_majority(
    cluster: &mut Cluster,
    agent: &TestAgent,
    ttl_ms: u64,
) -> Instant {
    cluster.masters[3].kill();
    cluster.masters[4].kill();
    agent.wait_usable(3).await;
    let asked = Instant::now();
    let (status, grant) = agent
        .post(
            "/v1/locks/res/acquire",
            json!({"ttl_ms": ttl_ms, "owner": "A"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let valid_until = asked + Duration::from_millis(grant["validity_ms"].as_u64().unwrap());
    for i in 0..3 {
        assert!(
            cluster.get(i, "redlock:res").await.is_some(),
            "A's key on r{}",
            i + 1
        );
    }
    cluster.masters[0].restart().unwrap();
    cluster.masters[3].restart().unwrap();
    cluster.masters[4].restart().unwrap();
    assert_eq!(
        cluster.get(0, "redlock:res").await,
        None,
        "r1 came back empty"
    );
    valid_until
}

/// With delayed restart off, the seed's hazard is real: B wins a majority
/// (r1, r4, r5) while A's lock is still valid.
#[tokio::test]
async fn without_delayed_restart_a_restarted_majority_grants_twice() {
    let mut cluster = Cluster::start(5);
    let agent = TestAgent::start(
        &cluster,
        "lock:\n  max_ttl: 60s\n  node_timeout: 500ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  enabled: false\n",
    )
    .await;
    let a_valid_until = lock_then_restart_a_majority(&mut cluster, &agent, 30_000).await;
    agent.wait_usable(5).await;
    let (status, body) = agent
        .post("/v1/locks/res/acquire", json!({"owner": "B"}))
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "B should win the restarted majority: {body}"
    );
    assert!(
        Instant::now() < a_valid_until,
        "both A and B hold res: the safety violation"
    );
    let nodes = agent.nodes().await;
    let warnings = node(&nodes, "r1")["warnings"].to_string();
    assert!(warnings.contains("delayed restart is off"), "{warnings}");
}

/// With delayed restart on, B is refused while A's lock is valid; after
/// max_ttl + extra the restarted masters are usable and B gets the lock.
#[tokio::test]
async fn delayed_restart_keeps_restarted_masters_out_until_old_locks_expire() {
    let mut cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, SHORT_QUARANTINE).await;
    let a_valid_until = lock_then_restart_a_majority(&mut cluster, &agent, 2000).await;

    // Until A's lock is surely gone, every B attempt is refused.
    let mut refusals = 0;
    let mut codes = std::collections::BTreeSet::new();
    while Instant::now() < a_valid_until + Duration::from_millis(100) {
        let (status, body) = agent
            .post("/v1/locks/res/acquire", json!({"owner": "B"}))
            .await;
        assert_ne!(
            status,
            StatusCode::OK,
            "B was granted res while A held it: {body}"
        );
        codes.insert(body["error"]["code"].as_str().unwrap().to_string());
        refusals += 1;
    }
    assert!(refusals > 0);
    assert!(
        codes.iter().all(|c| c == "taken" || c == "no_quorum"),
        "{codes:?}"
    );

    // The restarted masters were quarantined: r4 and r5 by the reconnect
    // detector (they were seen unreachable), r1 by whichever saw it first
    // (its restart may have been faster than a probe).
    let nodes = agent.nodes().await;
    for name in ["r4", "r5"] {
        assert_eq!(node(&nodes, name)["detector"], "reconnect", "{nodes}");
    }
    let r1 = node(&nodes, "r1")["detector"].as_str().unwrap().to_string();
    assert!(r1 == "reconnect" || r1 == "run_id", "{nodes}");
    // ... and once max_ttl + extra has passed, all five are usable again.
    agent.wait_usable(5).await;
    let token = agent.acquire_ok("res", json!({"owner": "B"})).await;
    assert!(token.ends_with(".B"));
}

/// A master that restarts while unreachable comes back `quarantined` with
/// detector `reconnect`, a remaining time that counts down, then `up`.
#[tokio::test]
async fn reconnect_detector_quarantines_and_counts_down() {
    let mut cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, SHORT).await;
    cluster.masters[1].kill();
    wait_for("r2 down", Duration::from_secs(10), || async {
        node(&agent.nodes().await, "r2")["state"] == "down"
    })
    .await;
    cluster.masters[1].restart().unwrap();
    wait_for("r2 quarantined", Duration::from_secs(10), || async {
        node(&agent.nodes().await, "r2")["state"] == "quarantined"
    })
    .await;
    let first = node(&agent.nodes().await, "r2").clone();
    assert_eq!(first["detector"], "reconnect", "{first}");
    let remaining = first["quarantine_remaining_ms"].as_u64().unwrap();
    assert!(
        remaining > 0 && remaining <= 3000,
        "max_ttl 2s + extra 1s: {first}"
    );
    assert!(
        first["run_id"].as_str().is_some_and(|r| r.len() == 40),
        "{first}"
    );
    assert!(first["uptime_s"].as_u64().unwrap() < 5, "{first}");
    wait_for("the countdown to move", Duration::from_secs(5), || async {
        let now = node(&agent.nodes().await, "r2").clone();
        now["state"] == "up" || now["quarantine_remaining_ms"].as_u64().unwrap() < remaining
    })
    .await;
    wait_for("r2 up", Duration::from_secs(10), || async {
        node(&agent.nodes().await, "r2")["state"] == "up"
    })
    .await;
    assert_eq!(
        node(&agent.nodes().await, "r2")["quarantine_remaining_ms"],
        0
    );
}

/// A restart faster than the probe interval (the master was never seen
/// unreachable) is caught by its new `run_id`.
#[tokio::test]
async fn run_id_detector_catches_a_fast_restart() {
    let mut cluster = Cluster::start(3);
    // Probes are rare, so only the restart itself can wake the health task.
    let agent = TestAgent::start(
        &cluster,
        "lock:\n  default_ttl: 2s\n  max_ttl: 2s\n  node_timeout: 200ms\nhealth:\n  interval: 60s\n",
    )
    .await;
    let before = node(&agent.nodes().await, "r1")["run_id"].clone();
    cluster.masters[0].restart().unwrap();
    // The next request finds the old connection dead and wakes the probe,
    // which connects at the first try to a process with a new run_id.
    agent.post("/v1/locks/x/acquire", json!({})).await;
    wait_for("r1 quarantined", Duration::from_secs(10), || async {
        node(&agent.nodes().await, "r1")["state"] == "quarantined"
    })
    .await;
    let r1 = node(&agent.nodes().await, "r1").clone();
    assert_eq!(r1["detector"], "run_id", "{r1}");
    assert_ne!(r1["run_id"], before);
}

/// An agent that starts beside freshly started masters cannot know what
/// they lost, so it quarantines them for the rest of max_ttl + extra, and
/// acquire says why.
#[tokio::test]
async fn uptime_detector_quarantines_young_masters_at_agent_start() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start_cautious(&cluster, SHORT).await;
    let nodes = agent.nodes().await;
    let young: Vec<&Value> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["state"] == "quarantined")
        .collect();
    // On a slow machine some may already be old enough; most are not. A
    // master that is a second old and has no incarnation marker yet is
    // quarantined for the whole period by the marker detector instead (the
    // longer of the two wins).
    let detected_young = |d: &Value| d == "uptime" || d == "marker";
    if !young.is_empty() {
        for n in &young {
            assert!(detected_young(&n["detector"]), "{n}");
            assert!(
                n["quarantine_remaining_ms"].as_u64().unwrap() <= 3000,
                "{n}"
            );
        }
    }
    if nodes["available"] == false {
        let (status, body) = agent.post("/v1/locks/y/acquire", json!({})).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("quarantined for")
                && (message.contains("uptime") || message.contains("marker")),
            "{message}"
        );
    }
    assert!(
        !young.is_empty(),
        "masters started a moment ago were not quarantined: {nodes}"
    );
    agent.wait_usable(3).await;
    agent.acquire_ok("y", json!({})).await;
}

/// Where an ACL refuses INFO, the incarnation marker stands in: a master
/// that loses its data (here FLUSHALL) is quarantined by detector `marker`.
#[tokio::test]
async fn marker_detector_works_where_info_is_refused() {
    let cluster = Cluster::start(3);
    for i in 0..3 {
        let mut conn = cluster.redis(i).await;
        let _: () = redis::cmd("ACL")
            .arg(&[
                "SETUSER", "agent", "on", ">pw", "~*", "&*", "+@all", "-info",
            ])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let agent = TestAgent::start_with(|socket| {
        cluster
            .config_yaml(socket, SHORT)
            .replace("url: redis://127.0.0.1", "url: redis://agent:pw@127.0.0.1")
    })
    .await;
    let nodes = agent.nodes().await;
    assert_eq!(
        nodes["usable"], 3,
        "fresh masters with no marker yet: {nodes}"
    );
    assert!(
        node(&nodes, "r1")["run_id"].is_null(),
        "INFO is refused: {nodes}"
    );
    assert!(
        cluster.get(1, "redlock: incarnation").await.is_some(),
        "the marker was written"
    );

    let mut conn = cluster.redis(1).await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    wait_for("r2 quarantined", Duration::from_secs(10), || async {
        node(&agent.nodes().await, "r2")["state"] == "quarantined"
    })
    .await;
    assert_eq!(node(&agent.nodes().await, "r2")["detector"], "marker");
}

/// Topology checks: a replica, two URLs reaching one server (here one
/// server listening on two loopback addresses, as behind a proxy or a NAT),
/// an evicting memory policy, and the persistence mode, in `/v1/nodes`. The
/// second URL of one server is `duplicate`: it never counts toward a quorum.
#[tokio::test]
async fn topology_warnings_for_replicas_shared_servers_and_eviction() {
    let cluster = Cluster::start(1);
    let replica = RedisServer::start_opts(
        cluster.dir.path(),
        "replica",
        &Options::new().replica_of(cluster.masters[0].port()),
    )
    .unwrap();
    let evicting = RedisServer::start_with(
        cluster.dir.path(),
        "evicting",
        &["--maxmemory-policy", "allkeys-lru"],
    )
    .unwrap();
    let twice = RedisServer::start_with(
        cluster.dir.path(),
        "twice",
        &["--bind", "127.0.0.1", "127.0.0.2"],
    )
    .unwrap();
    // The config refuses two loopback addresses with one port up front;
    // this test is about the run-time check behind it (a proxy, a NAT).
    let agent = TestAgent::start_sharing_servers(|socket| {
        // config_yaml ends with the masters list, so entries appended land in it.
        let mut yaml = cluster.config_yaml(socket, "");
        yaml.push_str(&format!(
            "  - name: replica\n    url: {}\n  - name: evicting\n    url: {}\n  - name: twice\n    url: redis://127.0.0.1:{port}\n  - name: twice-again\n    url: redis://127.0.0.2:{port}\n",
            replica.url(),
            evicting.url(),
            port = twice.port(),
        ));
        yaml
    })
    .await;
    let nodes = agent.nodes().await;
    let warnings = |name: &str| node(&nodes, name)["warnings"].to_string();
    assert!(
        warnings("replica").contains("replica (role:slave)"),
        "{nodes}"
    );
    assert!(warnings("evicting").contains("allkeys-lru"), "{nodes}");
    assert_eq!(node(&nodes, "twice")["state"], "up", "{nodes}");
    assert_eq!(node(&nodes, "twice-again")["state"], "duplicate", "{nodes}");
    assert!(
        warnings("twice-again").contains("same server as twice"),
        "{nodes}"
    );
    // r1, evicting and twice count; the replica cannot, twice-again is twice.
    assert_eq!(nodes["usable"], 3, "{nodes}");
    assert_eq!(node(&nodes, "r1")["persistence"], "none", "{nodes}");
}
