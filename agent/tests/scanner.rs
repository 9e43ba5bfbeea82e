//! The leaked-key scanner against real masters: what it reports, what it
//! leaves alone, and its repair.

mod common;

use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use serde_json::{json, Value};

/// A value with the shape of a token the agent writes (40 hex digits), as a
/// lock key leaked by a dead client would hold.
const TOKEN: &str = "5f3a9c0e1b2d4f6a8c0e1b2d4f6a8c0e1b2d4f6a";

const FAST_SCAN: &str = "lock:\n  max_ttl: 60s\nleak_scan:\n  interval: 150ms\n  count: 10\n";

async fn leaks_after(agent: &TestAgent, scans: u64) -> Value {
    wait_for(
        &format!("{scans} scans"),
        Duration::from_secs(20),
        || async {
            agent.get("/v1/leaks").await.unwrap().1["scans"]
                .as_u64()
                .unwrap()
                >= scans
        },
    )
    .await;
    agent.get("/v1/leaks").await.unwrap().1
}

fn node<'a>(leaks: &'a Value, name: &str) -> &'a Value {
    leaks["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == name)
        .unwrap()
}

async fn pttl(cluster: &Cluster, i: usize, key: &str) -> i64 {
    let mut conn = cluster.redis(i).await;
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Keys without TTL, with a TTL over max_ttl, and on a minority are found;
/// live locks, keys outside the prefix and the marker are not.
#[tokio::test]
async fn finds_each_kind_of_leak_and_nothing_else() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, FAST_SCAN).await;
    let mut conn = cluster.redis(0).await;
    let _: () = redis::cmd("SET")
        .arg("redlock:stuck")
        .arg(TOKEN)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("other:no-ttl")
        .arg(TOKEN)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("redlock: incarnation")
        .arg("m")
        .query_async(&mut conn)
        .await
        .unwrap();
    cluster
        .plant(1, "redlock:forever-ish", TOKEN, 3_600_000)
        .await;
    cluster
        .plant(2, "redlock:debris", &format!("{TOKEN}.job"), 50_000)
        .await;
    agent.acquire_ok("live", json!({"ttl_ms": 30000})).await;
    // Filler keys so the scan needs several SCAN calls (count 10); their
    // value is no token, so they are examined but are no lock keys.
    for i in 0..40 {
        cluster
            .plant(0, &format!("redlock:filler-{i}"), "v", 50_000)
            .await;
        cluster
            .plant(1, &format!("redlock:filler-{i}"), "v", 50_000)
            .await;
    }

    // Counted from after the planting: a scan already running may have
    // missed some keys, and a minority key shows only in two scans running.
    let planted = agent.get("/v1/leaks").await.unwrap().1["scans"]
        .as_u64()
        .unwrap();
    let leaks = leaks_after(&agent, planted + 3).await;
    let r1 = node(&leaks, "r1");
    assert_eq!(r1["no_ttl"], 1, "{leaks}");
    assert_eq!(
        r1["keys"][0],
        json!({"resource": "stuck", "kind": "no_ttl"}),
        "{leaks}"
    );
    assert_eq!(
        r1["keys_scanned"],
        1 + 1 + 40,
        "stuck, live and the fillers: {leaks}"
    );
    let r2 = node(&leaks, "r2");
    assert_eq!(r2["ttl_over_max"], 1, "{leaks}");
    let r3 = node(&leaks, "r3");
    assert_eq!(r3["minority"], 1, "{leaks}");
    assert!(r3["keys"].to_string().contains("debris"), "{leaks}");
    // r1's stuck key is on one master of three too, but counts once, as no_ttl.
    assert_eq!(r1["minority"], 0, "{leaks}");
    assert!(
        !leaks.to_string().contains("live"),
        "a held lock is no leak: {leaks}"
    );
    assert!(!leaks.to_string().contains("incarnation"), "{leaks}");
    assert!(!leaks.to_string().contains("other:"), "{leaks}");
    assert_eq!(leaks["repair"], "none");
    // Report only: nothing was changed.
    assert_eq!(pttl(&cluster, 0, "redlock:stuck").await, -1);
    assert_eq!(pttl(&cluster, 0, "other:no-ttl").await, -1);
}

/// `repair: expire` gives lock keys without TTL one of max_ttl, only under
/// the prefix, and deletes nothing.
#[tokio::test]
async fn repair_expire_sets_a_ttl_and_deletes_nothing() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(
        &cluster,
        "lock:\n  max_ttl: 20s\nleak_scan:\n  interval: 100ms\n  repair: expire\n",
    )
    .await;
    let mut conn = cluster.redis(0).await;
    let _: () = redis::cmd("SET")
        .arg("redlock:stuck")
        .arg(TOKEN)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("other:no-ttl")
        .arg(TOKEN)
        .query_async(&mut conn)
        .await
        .unwrap();
    wait_for("the repair", Duration::from_secs(10), || async {
        pttl(&cluster, 0, "redlock:stuck").await > 0
    })
    .await;
    let ttl = pttl(&cluster, 0, "redlock:stuck").await;
    assert!(ttl <= 20_000, "{ttl}");
    assert_eq!(
        cluster.get(0, "redlock:stuck").await.as_deref(),
        Some(TOKEN)
    );
    assert_eq!(
        pttl(&cluster, 0, "other:no-ttl").await,
        -1,
        "outside the prefix: untouched"
    );
    let leaks = agent.get("/v1/leaks").await.unwrap().1;
    assert_eq!(leaks["repair"], "expire");
}

/// A master that is down is reported with its error, and locks held on a
/// quorum of the others are not mistaken for minority debris.
#[tokio::test]
async fn down_masters_do_not_make_live_locks_look_like_debris() {
    let mut cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, FAST_SCAN).await;
    cluster.masters[3].kill();
    cluster.masters[4].kill();
    agent.wait_usable(3).await;
    agent.acquire_ok("held", json!({"ttl_ms": 30000})).await;
    let first = agent.get("/v1/leaks").await.unwrap().1["scans"]
        .as_u64()
        .unwrap();
    let leaks = leaks_after(&agent, first + 3).await;
    assert!(node(&leaks, "r4")["error"].as_str().is_some(), "{leaks}");
    for name in ["r1", "r2", "r3"] {
        assert_eq!(node(&leaks, name)["minority"], 0, "{leaks}");
    }
}

/// Application data on every master, outside the prefix and under it (a
/// string and a hash without TTL, values that are no token, a key on one
/// master only, a key with a long TTL): with `repair: expire` on, none is
/// changed or reported, while a real leaked lock key is repaired.
#[tokio::test]
async fn repair_touches_only_lock_keys() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(
        &cluster,
        "lock:\n  max_ttl: 20s\nleak_scan:\n  interval: 100ms\n  count: 5\n  repair: expire\n",
    )
    .await;
    let strings = [
        ("app:important", "42"),
        ("redlock:app-data", "v"),
        ("redlock:json", "{\"owner\": \"billing\"}"),
        // One hex digit short of a token.
        ("redlock:almost", &TOKEN[1..]),
    ];
    for i in 0..3 {
        let mut conn = cluster.redis(i).await;
        for (key, value) in strings {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        for key in ["app:hash", "redlock:app-hash"] {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("field")
                .arg("value")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        // The lock key a dead client leaked, without TTL.
        let _: () = redis::cmd("SET")
            .arg("redlock:leaked")
            .arg(format!("{TOKEN}.worker-3"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    // Under the prefix, no token: on one master only, and with a long TTL.
    cluster.plant(0, "redlock:one-master", "v", 15_000).await;
    cluster.plant(1, "redlock:long-lived", "v", 3_600_000).await;

    for i in 0..3 {
        wait_for(
            "the leaked lock repaired",
            Duration::from_secs(10),
            || async { pttl(&cluster, i, "redlock:leaked").await > 0 },
        )
        .await;
    }
    // Two more whole scans, each of which saw every planted key.
    let seen = agent.get("/v1/leaks").await.unwrap().1["scans"]
        .as_u64()
        .unwrap();
    let leaks = leaks_after(&agent, seen + 2).await;

    for i in 0..3 {
        let mut conn = cluster.redis(i).await;
        for (key, value) in strings {
            assert_eq!(
                cluster.get(i, key).await.as_deref(),
                Some(value),
                "r{}: {key}",
                i + 1
            );
            assert_eq!(pttl(&cluster, i, key).await, -1, "r{}: {key}", i + 1);
        }
        for key in ["app:hash", "redlock:app-hash"] {
            let hash: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(
                hash.get("field").map(String::as_str),
                Some("value"),
                "{key}"
            );
            assert_eq!(pttl(&cluster, i, key).await, -1, "r{}: {key}", i + 1);
        }
        let ttl = pttl(&cluster, i, "redlock:leaked").await;
        assert!(ttl > 0 && ttl <= 20_000, "r{}: {ttl}", i + 1);
        assert_eq!(
            cluster.get(i, "redlock:leaked").await,
            Some(format!("{TOKEN}.worker-3")),
            "repair deletes nothing"
        );
    }
    assert!(pttl(&cluster, 1, "redlock:long-lived").await > 20_000);

    // The report names only lock keys; the foreign ones are examined.
    let shown = leaks.to_string();
    for key in [
        "app-data",
        "json",
        "almost",
        "app-hash",
        "one-master",
        "long-lived",
    ] {
        assert!(!shown.contains(key), "{key} reported: {leaks}");
    }
    let r1 = node(&leaks, "r1");
    assert_eq!(
        r1["no_ttl"], 0,
        "repaired, so no longer without TTL: {leaks}"
    );
    assert_eq!(r1["minority"], 0, "{leaks}");
    assert_eq!(node(&leaks, "r2")["ttl_over_max"], 0, "{leaks}");
    assert_eq!(
        r1["keys_scanned"],
        1 + 4 + 1,
        "leaked, the prefixed foreign keys and one-master: {leaks}"
    );
}
