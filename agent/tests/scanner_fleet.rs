//! One scan per fleet, against real masters: one agent of a fleet scans for
//! all and every agent shows its report, another takes over when it stops,
//! and another key prefix is another fleet.

mod common;
mod scanner_common;

use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use scanner_common::{fleet_member, metric, node, sample, token};
use serde_json::{json, Value};

/// `/v1/leaks` of every agent.
async fn leaks_of(agents: &[&TestAgent]) -> Vec<Value> {
    let mut all = Vec::new();
    for agent in agents {
        all.push(agent.get("/v1/leaks").await.unwrap().1);
    }
    all
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
