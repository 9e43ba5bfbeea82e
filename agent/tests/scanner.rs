//! The leaked-key scanner against real masters: what it reports, what it
//! leaves alone, and its repair.

mod common;
mod scanner_common;

use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use redlock_agent::redlock::Token;
use scanner_common::{node, pttl, token};
use serde_json::{json, Value};

/// A SHA-1 in hex: 40 lowercase hex digits, the shape old tokens had.
const SHA1: &str = "5f3a9c0e1b2d4f6a8c0e1b2d4f6a8c0e1b2d4f6a";

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

/// Keys without TTL, with a TTL over max_ttl, and on a minority are found;
/// live locks, keys outside the prefix and the marker are not.
#[tokio::test]
async fn finds_each_kind_of_leak_and_nothing_else() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, FAST_SCAN).await;
    let mut conn = cluster.redis(0).await;
    let _: () = redis::cmd("SET")
        .arg("redlock:stuck")
        .arg(token("redlock:stuck"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("other:no-ttl")
        .arg(token("other:no-ttl"))
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
        .plant(
            1,
            "redlock:forever-ish",
            &token("redlock:forever-ish"),
            3_600_000,
        )
        .await;
    let debris = Token::generate("redlock:debris", Some("pod-2"), Some("job"));
    cluster
        .plant(2, "redlock:debris", debris.as_str(), 50_000)
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
    let stuck = token("redlock:stuck");
    let _: () = redis::cmd("SET")
        .arg("redlock:stuck")
        .arg(&stuck)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("other:no-ttl")
        .arg(token("other:no-ttl"))
        .query_async(&mut conn)
        .await
        .unwrap();
    wait_for("the repair", Duration::from_secs(10), || async {
        pttl(&cluster, 0, "redlock:stuck").await > 0
    })
    .await;
    let ttl = pttl(&cluster, 0, "redlock:stuck").await;
    assert!(ttl <= 20_000, "{ttl}");
    assert_eq!(cluster.get(0, "redlock:stuck").await, Some(stuck));
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
        // One hex digit short of an old-format token.
        ("redlock:almost", &SHA1[1..]),
    ];
    let leaked = Token::generate("redlock:leaked", None, Some("worker-3")).into_string();
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
            .arg(&leaked)
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
            cluster.get(i, "redlock:leaked").await.as_ref(),
            Some(&leaked),
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

/// Application values under the prefix that look like tokens but were not
/// written by an agent for their key: a SHA-1, a SHA-1 with `@` or `.`
/// parts (old-format tokens look the same), a real token copied from
/// another key, and a token of the old format.
fn look_alikes(prefix: &str) -> Vec<(String, String)> {
    vec![
        (format!("{prefix}sha1"), SHA1.to_string()),
        (format!("{prefix}sha1-cdn"), format!("{SHA1}@cdn")),
        (format!("{prefix}sha1-v2"), format!("{SHA1}.v2")),
        (
            format!("{prefix}copied"),
            Token::generate(&format!("{prefix}original"), Some("pod-1"), Some("job")).into_string(),
        ),
        (
            format!("{prefix}old-format"),
            "0123456789abcdef0123456789abcdef01234567@pod-0.worker".to_string(),
        ),
    ]
}

/// Plants, without TTL on every master, the [`look_alikes`] under `prefix`
/// and a real leaked lock key (`<prefix>leaked`, a token for that key);
/// then takes `<prefix>dead-client` through the agent and removes its TTL
/// on every master, as a client that died with a bug in the way would
/// leave it. Returns the look-alikes.
async fn plant_lock_keys_and_look_alikes(
    cluster: &Cluster,
    agent: &TestAgent,
    prefix: &str,
) -> Vec<(String, String)> {
    let look_alikes = look_alikes(prefix);
    let leaked = format!("{prefix}leaked");
    agent
        .acquire_ok("dead-client", json!({"ttl_ms": 15000, "owner": "gone"}))
        .await;
    for i in 0..cluster.masters.len() {
        let mut conn = cluster.redis(i).await;
        for (key, value) in look_alikes
            .iter()
            .chain([&(leaked.clone(), token(&leaked))])
        {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let persisted: i64 = redis::cmd("PERSIST")
            .arg(format!("{prefix}dead-client"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(persisted, 1, "r{}: the agent's own lock key", i + 1);
    }
    look_alikes
}

/// Waits until both real leaked lock keys have a TTL on every master.
async fn wait_repaired(cluster: &Cluster, prefix: &str) {
    for i in 0..cluster.masters.len() {
        for key in [format!("{prefix}leaked"), format!("{prefix}dead-client")] {
            wait_for(
                &format!("r{}: {key} repaired", i + 1),
                Duration::from_secs(10),
                || async { pttl(cluster, i, &key).await > 0 },
            )
            .await;
        }
    }
}

/// `repair: expire` on 3 masters: values that only look like tokens (a
/// SHA-1, `sha1@cdn`, `sha1.v2`, a real token copied from another key, an
/// old-format token), without TTL under the prefix, never get one and are
/// reported as `unproven`; the real leaked lock keys (a token written
/// without TTL, and a lock the agent granted whose TTL was removed) are
/// repaired. The control is
/// [`the_shape_alone_would_repair_a_sha1_under_the_test_switch`].
#[tokio::test]
async fn repair_never_touches_values_that_only_look_like_tokens() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(
        &cluster,
        "lock:\n  max_ttl: 20s\nleak_scan:\n  interval: 100ms\n  repair: expire\n",
    )
    .await;
    let look_alikes = plant_lock_keys_and_look_alikes(&cluster, &agent, "redlock:").await;
    wait_repaired(&cluster, "redlock:").await;
    // Two more whole scans, each of which saw every planted key.
    let seen = agent.get("/v1/leaks").await.unwrap().1["scans"]
        .as_u64()
        .unwrap();
    let leaks = leaks_after(&agent, seen + 2).await;

    for i in 0..3 {
        for (key, value) in &look_alikes {
            assert_eq!(pttl(&cluster, i, key).await, -1, "r{}: {key}", i + 1);
            assert_eq!(
                cluster.get(i, key).await.as_ref(),
                Some(value),
                "r{}: {key}",
                i + 1
            );
        }
        let name = format!("r{}", i + 1);
        let report = node(&leaks, &name);
        assert_eq!(report["unproven"], 5, "{name}: {leaks}");
        assert_eq!(report["no_ttl"], 0, "{name}: repaired: {leaks}");
        assert_eq!(report["minority"], 0, "{name}: {leaks}");
        assert_eq!(
            report["keys_scanned"], 7,
            "the look-alikes, leaked and dead-client: {leaks}"
        );
        for key in ["redlock:leaked", "redlock:dead-client"] {
            let ttl = pttl(&cluster, i, key).await;
            assert!(ttl > 0 && ttl <= 20_000, "{name}: {key}: {ttl}");
        }
        let mut unproven: Vec<&str> = report["keys"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["kind"] == "unproven")
            .map(|k| k["resource"].as_str().unwrap())
            .collect();
        unproven.sort_unstable();
        assert_eq!(
            unproven,
            ["copied", "old-format", "sha1", "sha1-cdn", "sha1-v2"],
            "{name}: {leaks}"
        );
    }
    let (_, metrics) = agent.get_tcp("/metrics").await;
    assert!(
        metrics.contains("redlock_leaked_keys{kind=\"unproven\",node=\"r1\"} 5"),
        "{metrics}"
    );
    assert!(
        !leaks.to_string().contains(SHA1),
        "the report never shows values: {leaks}"
    );
}

/// Sets the scanner's shape-only switch for agents with `prefix` while it
/// lives. The agents of other tests in this process use other prefixes, so
/// they never see it, whenever they start.
struct ByShape;

impl ByShape {
    fn set(prefix: &str) -> ByShape {
        std::env::set_var(redlock_agent::scanner::BY_SHAPE_SWITCH, prefix);
        ByShape
    }
}

impl Drop for ByShape {
    fn drop(&mut self) {
        std::env::remove_var(redlock_agent::scanner::BY_SHAPE_SWITCH);
    }
}

/// Control of [`repair_never_touches_values_that_only_look_like_tokens`]:
/// the same planting, with the test switch that makes the scanner trust a
/// value's shape as scanners did before tokens carried their proof. The
/// SHA-1 and every other look-alike then get a TTL: the test above can
/// fail, and fails for the reason it is about.
#[tokio::test]
async fn the_shape_alone_would_repair_a_sha1_under_the_test_switch() {
    let cluster = Cluster::start(3);
    let prefix = "shape-control:";
    let agent = {
        let _switch = ByShape::set(prefix);
        TestAgent::start(
            &cluster,
            &format!(
                "lock:\n  max_ttl: 20s\n  key_prefix: \"{prefix}\"\nleak_scan:\n  interval: 100ms\n  repair: expire\n"
            ),
        )
        .await
    };
    let look_alikes = plant_lock_keys_and_look_alikes(&cluster, &agent, prefix).await;
    wait_repaired(&cluster, prefix).await;
    for i in 0..3 {
        for (key, _) in &look_alikes {
            wait_for(
                &format!("r{}: {key} repaired by its shape", i + 1),
                Duration::from_secs(10),
                || async { pttl(&cluster, i, key).await > 0 },
            )
            .await;
        }
    }
    let sha1 = format!("{prefix}sha1");
    let ttl = pttl(&cluster, 0, &sha1).await;
    assert!(ttl > 0 && ttl <= 20_000, "{sha1}: {ttl}");
}

// --- One scan per fleet -----------------------------------------------------
