//! Redlock through the socket API against real masters: grants, contention,
//! release, extend, dead and frozen masters, and cleanup after failures.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::json;

/// Lock settings for these tests: a generous node timeout for a machine
/// busy at twice its cores (five times the default), and little retry
/// jitter.
const LOCK: &str = "lock:\n  node_timeout: 250ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\n";

fn node_timeout() -> Duration {
    Duration::from_millis(250)
}

/// Grant, contend, extend, release: the whole life of a lock.
#[tokio::test]
async fn grant_contend_extend_release_round_trip() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, LOCK).await;

    let (status, grant) = agent
        .post(
            "/v1/locks/orders/acquire",
            json!({"ttl_ms": 5000, "owner": "worker-1"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert_eq!(grant["resource"], "orders");
    assert_eq!(grant["ttl_ms"], 5000);
    let validity = grant["validity_ms"].as_u64().unwrap();
    assert!(
        validity > 0 && validity <= 5000 - 52,
        "validity {validity} leaves room for drift"
    );
    let token = grant["token"].as_str().unwrap();

    // The same value sits on every master, with a TTL.
    for i in 0..5 {
        assert_eq!(
            cluster.get(i, "redlock:orders").await.as_deref(),
            Some(token),
            "master {i}"
        );
    }

    let (status, taken) = agent.post("/v1/locks/orders/acquire", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(taken["error"]["code"], "taken");
    assert!(
        !taken.to_string().contains(token),
        "a 409 must not reveal the holder's token"
    );

    let (status, extended) = agent
        .post(
            "/v1/locks/orders/extend",
            json!({"token": token, "ttl_ms": 8000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{extended}");
    assert_eq!(extended["ttl_ms"], 8000);
    assert!(extended["validity_ms"].as_u64().unwrap() > 5000);
    let mut conn = cluster.redis(0).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg("redlock:orders")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 5000, "extend set the new TTL on the master: {pttl}");

    let (status, released) = agent
        .post("/v1/locks/orders/release", json!({"token": token}))
        .await;
    assert_eq!(
        (status, released),
        (StatusCode::OK, json!({"released": true}))
    );
    for i in 0..5 {
        assert_eq!(
            cluster.get(i, "redlock:orders").await,
            None,
            "master {i} still has the key"
        );
    }
}

/// A released lock can be taken again at once, without waiting for a TTL.
#[tokio::test]
async fn released_lock_is_immediately_acquirable() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, LOCK).await;
    for _ in 0..20 {
        let token = agent.acquire_ok("hot", json!({"ttl_ms": 30000})).await;
        let (status, body) = agent
            .post("/v1/locks/hot/release", json!({"token": token}))
            .await;
        assert_eq!((status, body), (StatusCode::OK, json!({"released": true})));
    }
}

/// Only the token's holder can release or extend; a stale release says so.
#[tokio::test]
async fn wrong_token_can_neither_release_nor_extend() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let token = agent.acquire_ok("acct", json!({"ttl_ms": 10000})).await;
    let forged = "0".repeat(40);

    let (status, body) = agent
        .post("/v1/locks/acct/release", json!({"token": forged}))
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"released": false})));
    let (status, body) = agent
        .post("/v1/locks/acct/extend", json!({"token": forged}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "lost");
    for i in 0..5 {
        assert_eq!(
            cluster.get(i, "redlock:acct").await.as_deref(),
            Some(token.as_str())
        );
    }

    // A token for another resource does not work here either.
    let other = agent.acquire_ok("other", json!({})).await;
    let (_, body) = agent
        .post("/v1/locks/acct/release", json!({"token": other}))
        .await;
    assert_eq!(body, json!({"released": false}));

    // Releasing twice: the second time the lock is no longer held.
    let (_, body) = agent
        .post("/v1/locks/acct/release", json!({"token": token}))
        .await;
    assert_eq!(body, json!({"released": true}));
    let (_, body) = agent
        .post("/v1/locks/acct/release", json!({"token": token}))
        .await;
    assert_eq!(body, json!({"released": false}));
}

/// Two of five masters dead: a quorum of three remains and locks work.
/// Three dead: acquire answers 503 no_quorum, fast, naming the nodes, and
/// so does the release of a lock taken before: two masters releasing it is
/// not a quorum, and it is not `released: false` either (the dead may hold
/// it).
#[tokio::test]
async fn locks_work_with_two_dead_and_fail_fast_with_three() {
    let mut cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, LOCK).await;
    cluster.masters[3].kill();
    cluster.masters[4].kill();

    // Before and after the health probe notices, locks keep working.
    let token = agent.acquire_ok("job", json!({"ttl_ms": 10000})).await;
    let (_, body) = agent
        .post("/v1/locks/job/release", json!({"token": token}))
        .await;
    assert_eq!(body, json!({"released": true}));
    agent.wait_usable(3).await;
    let held = agent.acquire_ok("job", json!({"ttl_ms": 10000})).await;

    cluster.masters[2].kill();
    // Right after the kill (the agent may still think r3 is up) ...
    let started = Instant::now();
    let (status, body) = agent.post("/v1/locks/job2/acquire", json!({})).await;
    let first = started.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "no_quorum");
    // ... and once it knows: then without contacting any master.
    agent.wait_usable(2).await;
    let started = Instant::now();
    let (status, body) = agent
        .post("/v1/locks/job3/acquire", json!({"wait_ms": 5000}))
        .await;
    let second = started.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    for name in ["r3", "r4", "r5"] {
        assert!(message.contains(name), "{message:?} should name {name}");
    }
    // A small multiple of the node timeout (generous for a busy machine),
    // well below the 5s wait budget it would use up if it waited.
    let bound = node_timeout() * 10;
    assert!(first < bound, "first no_quorum took {first:?}");
    assert!(second < bound, "second no_quorum took {second:?}");

    let (status, ready) = agent.get("/readyz").await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");

    let (status, body) = agent
        .post("/v1/locks/job/release", json!({"token": held}))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "no_quorum");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("released on 2 of 5 masters"),
        "{message:?}"
    );
    for name in ["r3", "r4", "r5"] {
        assert!(message.contains(name), "{message:?} should name {name}");
    }
    for i in 0..2 {
        assert_eq!(
            cluster.get(i, "redlock:job").await,
            None,
            "r{} kept it",
            i + 1
        );
    }
}

/// A frozen master (SIGSTOP) does not slow a grant: the quorum answers
/// first. When its vote is needed, it costs at most the node timeout.
#[tokio::test]
async fn frozen_master_costs_at_most_the_node_timeout() {
    let mut cluster = Cluster::start(5);
    // A node timeout long enough that waiting for it would show even on a
    // busy machine, where a grant from four healthy masters still takes
    // far less (the most the default default_ttl of 10s allows).
    let agent = TestAgent::start(
        &cluster,
        "lock:\n  node_timeout: 1s\n  retry_jitter: 0ms\nhealth:\n  interval: 60s\n",
    )
    .await;
    cluster.masters[0].freeze().unwrap();

    let started = Instant::now();
    agent.acquire_ok("report", json!({"ttl_ms": 10000})).await;
    let granted = started.elapsed();
    assert!(
        granted < Duration::from_secs(1),
        "a grant waited for the frozen master: {granted:?}"
    );

    // Now the frozen vote decides: two dead, one frozen, two granting.
    cluster.masters[3].kill();
    cluster.masters[4].kill();
    let started = Instant::now();
    let (status, body) = agent.post("/v1/locks/report2/acquire", json!({})).await;
    let failed = started.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        failed >= Duration::from_secs(1),
        "it did wait for the frozen vote: {failed:?}"
    );
    assert!(
        failed < Duration::from_secs(4),
        "bounded by the node timeout: {failed:?}"
    );
    cluster.masters[0].thaw().unwrap();
}

/// A round that fails (the resource is held elsewhere on a majority)
/// leaves none of its keys behind, not even on the masters it won.
#[tokio::test]
async fn failed_acquisition_leaves_no_key_behind() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, LOCK).await;
    for i in 0..3 {
        cluster
            .plant(i, "redlock:contended", "someone-else", 60_000)
            .await;
    }
    let (status, body) = agent
        .post("/v1/locks/contended/acquire", json!({"wait_ms": 200}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    for i in 0..3 {
        assert_eq!(
            cluster.get(i, "redlock:contended").await.as_deref(),
            Some("someone-else"),
            "the foreign holder's key on master {i} must be untouched"
        );
    }
    for i in 3..5 {
        assert_eq!(
            cluster.get(i, "redlock:contended").await,
            None,
            "debris on master {i}"
        );
    }
}

/// With `wait_ms`, the agent retries until the holder's key expires.
#[tokio::test]
async fn waiting_acquire_gets_the_lock_when_it_expires() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    agent.acquire_ok("batch", json!({"ttl_ms": 600})).await;
    let (status, body) = agent
        .post(
            "/v1/locks/batch/acquire",
            json!({"wait_ms": 10000, "ttl_ms": 1000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Release and extend keep working after the scripts are flushed from the
/// masters (NOSCRIPT → load again).
#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let token = agent.acquire_ok("flush", json!({"ttl_ms": 10000})).await;
    for i in 0..3 {
        let mut conn = cluster.redis(i).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let (status, body) = agent
        .post("/v1/locks/flush/extend", json!({"token": token}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = agent
        .post("/v1/locks/flush/release", json!({"token": token}))
        .await;
    assert_eq!(body, json!({"released": true}));
}

/// `/v1/nodes` reports every configured master with its state, and the
/// quorum is a majority of all of them, whatever their state.
#[tokio::test]
async fn nodes_report_states_and_a_fixed_quorum() {
    let mut cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let nodes = agent.nodes().await;
    assert_eq!(nodes["quorum"], 3);
    assert_eq!(nodes["usable"], 5);
    assert_eq!(nodes["available"], true);
    let names: Vec<&str> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["r1", "r2", "r3", "r4", "r5"]);
    assert!(nodes["nodes"][0]["latency_ms"].as_f64().is_some());

    cluster.masters[1].kill();
    agent.wait_usable(4).await;
    let nodes = agent.nodes().await;
    assert_eq!(nodes["quorum"], 3, "the quorum never shrinks");
    assert_eq!(nodes["nodes"][1]["state"], "down");
    assert!(nodes["nodes"][1]["last_error"].is_string());

    // It comes back by itself once the master is back, after its
    // quarantine (see delayed_restart.rs).
    cluster.masters[1].restart().unwrap();
    common::wait_for("r2 to answer again", Duration::from_secs(10), || async {
        agent.nodes().await["nodes"][1]["state"] != "down"
    })
    .await;
    assert_eq!(agent.nodes().await["nodes"][1]["state"], "quarantined");
}

/// `rediss://` masters: TLS with a private CA given by `tls_ca_file`.
#[tokio::test]
async fn tls_masters_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let certs = common::tls::certs_dir(d);
    let masters: Vec<_> = (1..=3)
        .map(|i| common::tls::master(d, &format!("t{i}"), &certs, false))
        .collect();
    let tls_ports: Vec<u16> = masters.iter().map(|m| m.tls_port().unwrap()).collect();
    let ca = certs.join("ca.crt").display().to_string();
    let agent = TestAgent::start_with(|socket| {
        let mut yaml = format!(
            "socket:\n  path: {:?}\nmetrics:\n  listen: \"127.0.0.1:0\"\nmasters:\n",
            socket.display().to_string()
        );
        for (i, port) in tls_ports.iter().enumerate() {
            yaml.push_str(&format!(
                "  - {{name: t{}, url: \"rediss://127.0.0.1:{port}\", tls_ca_file: {ca:?}}}\n",
                i + 1
            ));
        }
        yaml
    })
    .await;
    agent.wait_usable(3).await;
    let token = agent.acquire_ok("secure", json!({})).await;
    let mut conn = common::redis_at(&masters[0].url()).await;
    let value: Option<String> = redis::cmd("GET")
        .arg("redlock:secure")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        value.as_deref(),
        Some(token.as_str()),
        "set over TLS, read over plain TCP"
    );
}
