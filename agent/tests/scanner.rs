//! The leaked-key scanner against real masters: what it reports, what it
//! leaves alone, and its repair.

mod common;

use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use redlock_agent::redlock::Token;
use serde_json::{json, Value};

/// A token an agent writes for the lock key `key`, as a lock key leaked by
/// a dead client would hold.
fn token(key: &str) -> String {
    Token::generate(key, None, None).into_string()
}

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

/// A fleet member's config: its name, `max_ttl` and scan settings, a node
/// timeout a busy machine keeps (the scan lock's extensions ride on it).
fn fleet_member(name: &str, max_ttl: &str, scan: &str) -> String {
    format!(
        "agent:\n  name: {name}\nlock:\n  default_ttl: 2s\n  max_ttl: {max_ttl}\n  node_timeout: 200ms\nleak_scan:\n{scan}"
    )
}

/// `/v1/leaks` of every agent.
async fn leaks_of(agents: &[&TestAgent]) -> Vec<Value> {
    let mut all = Vec::new();
    for agent in agents {
        all.push(agent.get("/v1/leaks").await.unwrap().1);
    }
    all
}

/// The value of `series` (a name with its labels, as exposed) in a
/// metrics text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn metric(agent: &TestAgent, series: &str) -> f64 {
    let (_, text) = agent.get_tcp("/metrics").await;
    sample(&text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

/// Rounds of the scan this agent made itself.
async fn rounds(agent: &TestAgent) -> f64 {
    metric(agent, "redlock_leak_scan_duration_seconds_count").await
}

/// `SCAN` calls master `i` has served so far (`INFO commandstats`).
async fn scan_calls(cluster: &Cluster, i: usize) -> u64 {
    let mut conn = cluster.redis(i).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_scan:calls=")?.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// What a report found on each master, without when and how long: the
/// same from one scan to the next while the keys stay.
fn findings(leaks: &Value) -> Vec<Value> {
    leaks["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            json!([
                n["node"],
                n["keys_scanned"],
                n["no_ttl"],
                n["ttl_over_max"],
                n["minority"],
                n["unproven"],
                n["keys"]
            ])
        })
        .collect()
}

/// Three agents on the same masters with a 200ms interval: one of them
/// scans for all (the only one whose scan count grows, with one `SCAN`
/// per round on a master, not three), and every agent's `/v1/leaks` shows
/// the same findings, named after that agent, with their age.
#[tokio::test]
async fn one_agent_of_three_scans_and_every_agent_shows_its_report() {
    let cluster = Cluster::start(3);
    let scan = "  interval: 200ms\n";
    let a1 = TestAgent::start(&cluster, &fleet_member("a1", "60s", scan)).await;
    let a2 = TestAgent::start(&cluster, &fleet_member("a2", "60s", scan)).await;
    let a3 = TestAgent::start(&cluster, &fleet_member("a3", "60s", scan)).await;
    let agents = [&a1, &a2, &a3];
    let mut conn = cluster.redis(0).await;
    let _: () = redis::cmd("SET")
        .arg("redlock:stuck")
        .arg(token("redlock:stuck"))
        .query_async(&mut conn)
        .await
        .unwrap();

    // Every agent shows the planted key, in a report named after one agent.
    wait_for(
        "every agent to show the stuck key",
        Duration::from_secs(30),
        || async {
            leaks_of(&agents).await.iter().all(|l| {
                l["scanner"].is_string()
                    && l["nodes"]
                        .as_array()
                        .is_some_and(|n| n.iter().any(|n| n["no_ttl"] == 1))
            })
        },
    )
    .await;
    let all = leaks_of(&agents).await;
    let scanner = all[0]["scanner"].as_str().unwrap().to_string();
    let at = agents
        .iter()
        .position(|a| a.config.agent.name == scanner)
        .unwrap_or_else(|| panic!("the scanner {scanner} is none of the fleet"));
    for (i, leaks) in all.iter().enumerate() {
        assert_eq!(leaks["scanner"], scanner.as_str(), "{leaks}");
        assert_eq!(findings(leaks), findings(&all[at]), "a{}: {leaks}", i + 1);
        assert_eq!(leaks["scanning"], i == at, "a{}: {leaks}", i + 1);
        assert!(leaks["age_ms"].is_u64(), "{leaks}");
        assert_eq!(leaks["stale"], false, "{leaks}");
        assert_eq!(node(leaks, "r1")["keys"][0]["resource"], "stuck");
        let text = agents[i].get_tcp("/metrics").await.1;
        assert_eq!(
            sample(&text, "redlock_leak_scanner"),
            Some(if i == at { 1.0 } else { 0.0 }),
            "a{}",
            i + 1
        );
        assert_eq!(
            sample(
                &text,
                &format!("redlock_leak_scan_info{{scanner=\"{scanner}\"}}")
            ),
            Some(1.0),
            "a{}: {text}",
            i + 1
        );
        // Only the scanner exports the leak series: one set per fleet.
        assert_eq!(
            text.contains("redlock_leaked_keys{"),
            i == at,
            "a{}: {text}",
            i + 1
        );
        assert!(sample(&text, "redlock_leak_scan_last_success_timestamp_seconds").unwrap() > 0.0);
    }

    // Ten rounds: the scanner's count grows, the others' does not, and
    // r1 serves one SCAN per round (one page), not one per agent.
    let before: Vec<f64> = rounds_of(&agents).await;
    let scans_before = scan_calls(&cluster, 0).await;
    wait_for("ten rounds", Duration::from_secs(60), || async {
        rounds(agents[at]).await >= before[at] + 10.0
    })
    .await;
    let scans_after = scan_calls(&cluster, 0).await;
    let after: Vec<f64> = rounds_of(&agents).await;
    for i in 0..3 {
        if i != at {
            assert_eq!(after[i], before[i], "a{} scanned too", i + 1);
        }
    }
    let rounds_made = (after[at] - before[at]) as u64;
    let scans_served = scans_after - scans_before;
    println!("{rounds_made} rounds by {scanner}; r1 served {scans_served} SCAN calls");
    // A round in progress at either end may add or miss one.
    assert!(
        scans_served <= rounds_made + 1 && scans_served + 1 >= rounds_made,
        "{scans_served} SCANs for {rounds_made} rounds"
    );
    // The scan lock is no client's: listings skip it, and no request can
    // name it.
    let (_, listing) = a1.get("/v1/locks").await.unwrap();
    let listed: Vec<&str> = listing["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["resource"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["stuck"], "{listing}");
    let (status, body) = a1.get("/v1/locks/%20leak%20scan").await.unwrap();
    assert_eq!(status, hyper::StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_resource");
    // The fleet's keys on a master: one of each per prefix, none per agent.
    let mut conn = cluster.redis(0).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("redlock:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort_unstable();
    // The fencing counter is on this master only if its vote was among
    // the scan lock's quorum when the fence was raised.
    keys.retain(|k| k != "redlock: fence");
    assert_eq!(
        keys,
        [
            "redlock: incarnation",
            "redlock: leak fence",
            "redlock: leak report",
            "redlock: leak scan",
            "redlock:stuck"
        ]
    );
}

async fn rounds_of(agents: &[&TestAgent]) -> Vec<f64> {
    let mut all = Vec::new();
    for agent in agents {
        all.push(rounds(agent).await);
    }
    all
}

/// The scanning agent stops: another of the fleet takes the scan lock,
/// with a higher fence, and the fleet's scan count goes on from where it
/// was; the survivors agree on the new scanner.
#[tokio::test]
async fn another_agent_scans_when_the_scanner_stops() {
    let cluster = Cluster::start(3);
    let scan = "  interval: 200ms\n";
    let mut agents = Vec::new();
    for name in ["a1", "a2", "a3"] {
        agents.push(TestAgent::start(&cluster, &fleet_member(name, "60s", scan)).await);
    }
    wait_for("a scanner", Duration::from_secs(30), || async {
        agents[0].get("/v1/leaks").await.unwrap().1["scanner"].is_string()
    })
    .await;
    let first = agents[0].get("/v1/leaks").await.unwrap().1;
    let scanner = first["scanner"].as_str().unwrap().to_string();
    let fence = first["fence"].as_u64().unwrap();
    let at = agents
        .iter()
        .position(|a| a.config.agent.name == scanner)
        .unwrap();
    let stopped = agents.remove(at);
    let scans = stopped.get("/v1/leaks").await.unwrap().1["scans"]
        .as_u64()
        .unwrap();
    let started = std::time::Instant::now();
    stopped.stop().await;

    let survivors: Vec<&TestAgent> = agents.iter().collect();
    wait_for("another scanner", Duration::from_secs(30), || async {
        leaks_of(&survivors).await.iter().all(|l| {
            l["scanner"].is_string()
                && l["scanner"] != scanner.as_str()
                && l["scans"].as_u64() > Some(scans)
        })
    })
    .await;
    println!("taken over after {:?}", started.elapsed());
    let all = leaks_of(&survivors).await;
    let next = all[0]["scanner"].as_str().unwrap();
    assert_eq!(all[1]["scanner"], next, "{all:?}");
    for leaks in &all {
        assert!(leaks["fence"].as_u64().unwrap() > fence, "{leaks}");
    }
    let mut scanning = 0.0;
    for agent in &survivors {
        scanning += metric(agent, "redlock_leak_scanner").await;
    }
    assert_eq!(scanning, 1.0);
}

/// Agents with another `lock.key_prefix` on the same masters are another
/// fleet: each fleet has its own scan lock, scanner and report, and sees
/// only its own keys.
#[tokio::test]
async fn another_key_prefix_is_another_fleet() {
    let cluster = Cluster::start(3);
    let scan = "  interval: 200ms\n";
    let a = TestAgent::start(&cluster, &fleet_member("a", "60s", scan)).await;
    let b = TestAgent::start(
        &cluster,
        &fleet_member("b", "60s", scan).replace("lock:\n", "lock:\n  key_prefix: \"other:\"\n"),
    )
    .await;
    let mut conn = cluster.redis(0).await;
    for key in ["redlock:stuck", "other:stuck"] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(token(key))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    for (agent, name) in [(&a, "a"), (&b, "b")] {
        wait_for(
            &format!("{name} to scan its fleet"),
            Duration::from_secs(30),
            || async {
                let leaks = agent.get("/v1/leaks").await.unwrap().1;
                leaks["scanner"] == name
                    && leaks["scanning"] == true
                    && node(&leaks, "r1")["no_ttl"] == 1
            },
        )
        .await;
        assert_eq!(metric(agent, "redlock_leak_scanner").await, 1.0, "{name}");
    }
    let theirs = b.get("/v1/leaks").await.unwrap().1;
    assert_eq!(node(&theirs, "r1")["keys"][0]["resource"], "stuck");
    assert_eq!(
        node(&theirs, "r1")["keys_scanned"],
        1,
        "only other:stuck: {theirs}"
    );
}

// --- A paused scanner -------------------------------------------------------

/// An agent run as a child process, so it can be paused with SIGSTOP; its
/// log lines are kept for the test to wait on (and printed when it
/// panics). Killed when dropped.
struct Process {
    child: tokio::process::Child,
    pid: i32,
    socket: std::path::PathBuf,
    metrics: std::net::SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Process {
    /// Starts `redlock-agent` over `cluster` with `extra` config YAML and
    /// the test switches `env`; waits until it serves.
    async fn start(
        cluster: &Cluster,
        dir: &std::path::Path,
        name: &str,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Process {
        use tokio::io::AsyncBufReadExt;
        let socket = dir.join(format!("{name}.sock"));
        // A free port for the metrics: the test reads them.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // The masters just started: a process that cannot know it would
        // keep them out for max_ttl + extra (31s here) by their uptime.
        let extra = format!("{extra}delayed_restart:\n  enabled: false\n");
        let yaml = cluster
            .config_yaml(&socket, &extra)
            .replace("\"127.0.0.1:0\"", &format!("\"127.0.0.1:{port}\""))
            .replace("level: debug", "level: info");
        let config = dir.join(format!("{name}.yaml"));
        std::fs::write(&config, yaml).unwrap();
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlock-agent"));
        command
            .arg("--config")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for switch in redlock_testkit::switches::ALL {
            command.env_remove(switch);
        }
        command.env_remove("REDLOCK_LOG");
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().unwrap();
        let pid = i32::try_from(child.id().unwrap()).unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let kept = std::sync::Arc::clone(&log);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        let process = Process {
            child,
            pid,
            socket,
            metrics: format!("127.0.0.1:{port}").parse().unwrap(),
            log,
        };
        wait_for(
            &format!("{name} to serve"),
            Duration::from_secs(20),
            || async {
                matches!(
                    common::request(
                        &process.socket,
                        hyper::Method::GET,
                        "/healthz",
                        bytes::Bytes::new()
                    )
                    .await,
                    Ok((hyper::StatusCode::OK, _))
                )
            },
        )
        .await;
        process
    }

    async fn leaks(&self) -> Value {
        common::request(
            &self.socket,
            hyper::Method::GET,
            "/v1/leaks",
            bytes::Bytes::new(),
        )
        .await
        .unwrap()
        .1
    }

    /// Log lines that contain `text`.
    fn logged(&self, text: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(text))
            .count()
    }

    async fn metric(&self, series: &str) -> f64 {
        let stream = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let request = hyper::Request::get("/metrics")
            .header("host", "localhost")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let text = String::from_utf8_lossy(&body).into_owned();
        sample(&text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child.
        let done = unsafe { libc::kill(self.pid, signal) };
        assert_eq!(done, 0, "kill({}, {signal})", self.pid);
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child; it may have exited already.
        unsafe { libc::kill(self.pid, libc::SIGCONT) };
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            eprintln!("--- agent {} log ---", self.pid);
            for line in self.log.lock().unwrap().iter() {
                eprintln!("{line}");
            }
        }
    }
}

/// How a paused scanner's repair ends on every master.
#[derive(Debug, PartialEq, Eq)]
enum StaleRepair {
    /// The masters refused it (the fence check).
    Refused,
    /// It went through (the control, without the fence check).
    Applied,
}

/// Agent `a` scans with `repair: expire` and `max_ttl: 30s`; agent `b`
/// stands by with `max_ttl: 10s`. A lock key without TTL is planted on
/// every master; `a` finds it and, at the test switch's pause before the
/// repair (a pause after its last look at its scan lock), is stopped
/// (SIGSTOP). Its scan lock expires, `b` takes it over (claiming the
/// masters with its higher fence), finds the key and pauses before its
/// own repair. Then `a` runs again (SIGCONT) and sends its repair, with
/// its old fence, before `b` sends its own. Returns the key's TTL on
/// each master once both are done, and `a`'s refused repairs.
async fn paused_scanner(fence_check: bool) -> (Vec<i64>, f64, StaleRepair) {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let scan = "  interval: 300ms\n  repair: expire\n";
    let no_fence: &[(&str, &str)] = if fence_check {
        &[]
    } else {
        &[(redlock_agent::scanner::NO_FENCE_SWITCH, "1")]
    };
    let mut a_env = vec![(redlock_agent::scanner::REPAIR_PAUSE_SWITCH, "5000")];
    a_env.extend_from_slice(no_fence);
    let a = Process::start(
        &cluster,
        dir.path(),
        "a",
        &fleet_member("a", "30s", scan),
        &a_env,
    )
    .await;
    wait_for("a to scan", Duration::from_secs(20), || async {
        a.leaks().await["scanner"] == "a"
    })
    .await;
    let a_fence = a.leaks().await["fence"].as_u64().unwrap();
    let b = Process::start(
        &cluster,
        dir.path(),
        "b",
        &fleet_member("b", "10s", scan),
        &[(redlock_agent::scanner::REPAIR_PAUSE_SWITCH, "8000")],
    )
    .await;
    wait_for("b to read a's report", Duration::from_secs(20), || async {
        b.leaks().await["scanner"] == "a"
    })
    .await;

    let stuck = token("redlock:stuck");
    for i in 0..3 {
        let mut conn = cluster.redis(i).await;
        let _: () = redis::cmd("SET")
            .arg("redlock:stuck")
            .arg(&stuck)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let pausing = "test switch: pausing before a repair";
    wait_for(
        "a to pause before its repairs",
        Duration::from_secs(20),
        || async { a.logged(pausing) >= 3 },
    )
    .await;
    a.signal(libc::SIGSTOP);
    let stopped = std::time::Instant::now();
    for i in 0..3 {
        assert_eq!(
            pttl(&cluster, i, "redlock:stuck").await,
            -1,
            "r{}: a repaired before it was stopped (the machine is too slow for a 5s pause)",
            i + 1
        );
    }
    // a's scan lock (TTL 2s) expires; b takes it over and pauses too.
    wait_for("b to take over", Duration::from_secs(30), || async {
        b.logged("took the fleet's scan lock") >= 1
    })
    .await;
    println!("b took over {:?} after a stopped", stopped.elapsed());
    wait_for(
        "b to pause before its repairs",
        Duration::from_secs(30),
        || async { b.logged(pausing) >= 3 },
    )
    .await;
    assert_eq!(b.logged("took the fleet's scan lock"), 1);
    a.signal(libc::SIGCONT);

    // a's repair goes first: b waits 8s, a at most what is left of 5s.
    let outcome = if fence_check {
        wait_for(
            "the masters to refuse a",
            Duration::from_secs(20),
            || async {
                a.metric("redlock_leak_scan_refused_total{write=\"repair\"}")
                    .await
                    >= 3.0
            },
        )
        .await;
        for i in 0..3 {
            assert_eq!(pttl(&cluster, i, "redlock:stuck").await, -1, "r{}", i + 1);
        }
        StaleRepair::Refused
    } else {
        wait_for("a's repair to land", Duration::from_secs(20), || async {
            let mut all = true;
            for i in 0..3 {
                all &= pttl(&cluster, i, "redlock:stuck").await > 10_000;
            }
            all
        })
        .await;
        StaleRepair::Applied
    };
    // Then b's round ends and its report is the fleet's.
    wait_for("b's report", Duration::from_secs(30), || async {
        let leaks = b.leaks().await;
        leaks["scanner"] == "b" && leaks["scanning"] == true
    })
    .await;
    let leaks = b.leaks().await;
    assert!(leaks["fence"].as_u64().unwrap() > a_fence, "{leaks}");
    let expected_repairs = u64::from(fence_check);
    for name in ["r1", "r2", "r3"] {
        assert_eq!(node(&leaks, name)["repaired"], expected_repairs, "{leaks}");
    }
    let mut ttls = Vec::new();
    for i in 0..3 {
        ttls.push(pttl(&cluster, i, "redlock:stuck").await);
        assert_eq!(cluster.get(i, "redlock:stuck").await.as_ref(), Some(&stuck));
    }
    let refused = a
        .metric("redlock_leak_scan_refused_total{write=\"repair\"}")
        .await;
    wait_for("a to stand down", Duration::from_secs(20), || async {
        a.metric("redlock_leak_scanner").await == 0.0
    })
    .await;
    (ttls, refused, outcome)
}

/// A scanner paused (SIGSTOP) between its last look at its scan lock and
/// its repair, while another agent takes over, cannot repair when it runs
/// again: every master refuses its fence, and the key is repaired once,
/// by the current scanner (its 10s max_ttl, not the paused one's 30s).
/// The control is [`a_paused_scanner_repairs_without_the_fence_check`].
#[tokio::test]
async fn a_paused_scanner_cannot_repair_after_another_took_over() {
    let (ttls, refused, outcome) = paused_scanner(true).await;
    assert_eq!(outcome, StaleRepair::Refused);
    assert_eq!(refused, 3.0, "one refusal per master");
    for ttl in ttls {
        assert!(ttl > 0 && ttl <= 10_000, "repaired by b: {ttl}");
    }
}

/// Control of [`a_paused_scanner_cannot_repair_after_another_took_over`]:
/// the same pause with the test switch that turns the masters' fence
/// check off. The paused scanner's repair goes through (the key gets its
/// 30s), and the current scanner finds nothing left to repair: the test
/// above can fail, and fails for the reason it is about.
#[tokio::test]
async fn a_paused_scanner_repairs_without_the_fence_check() {
    let (ttls, refused, outcome) = paused_scanner(false).await;
    assert_eq!(outcome, StaleRepair::Applied);
    assert_eq!(refused, 0.0);
    for ttl in ttls {
        assert!(ttl > 10_000 && ttl <= 30_000, "repaired by a: {ttl}");
    }
}
