//! What a vote takes on trust, on real masters: an agent's own clock under
//! the fences, and an idle agent's view of masters that came back. (A
//! master's clock and a master restored behind a proxy are in
//! `master_trust.rs`.)

mod common;

use std::time::Duration;

use common::{Cluster, Switch, TestAgent};
use hyper::StatusCode;
use redlock_testkit::switches::FENCE_CLOCK_SKEW_MS;
use serde_json::json;

/// 2^53 - 1: the largest fence.
const MAX_FENCE: u64 = (1 << 53) - 1;

/// Probes every 100 ms; delayed restart off unless a test adds it.
const QUICK: &str =
    "lock:\n  max_ttl: 5s\n  default_ttl: 5s\n  node_timeout: 300ms\nhealth:\n  interval: 100ms\n";

async fn fence_of(agent: &TestAgent, resource: &str) -> u64 {
    let (status, body) = agent
        .post(
            &format!("/v1/locks/{resource}/acquire"),
            json!({"fence": true, "ttl_ms": 2000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["fence"].as_u64().expect("a fence")
}

/// One agent's clock 230 years ahead takes a fenced lock. Before, its clock
/// floor raised every master's counter to 2^53 - 1 and every later fence of
/// every agent was that number for good; now its floor, far from the
/// masters' clocks, is refused: the counters stay where quorum fences put
/// them and later fences keep growing.
#[tokio::test]
async fn an_agent_clock_far_ahead_never_pins_the_fences() {
    let cluster = Cluster::start(3);
    let honest = TestAgent::start(&cluster, QUICK).await;
    let first = fence_of(&honest, "a").await;
    // 230 years in milliseconds.
    let skewed = {
        let _switch = Switch::set(FENCE_CLOCK_SKEW_MS, "7258118400000");
        TestAgent::start(&cluster, QUICK).await
    };
    let from_skewed = fence_of(&skewed, "b").await;
    assert!(
        from_skewed < MAX_FENCE,
        "the skewed agent's fence {from_skewed} is not pinned at the maximum"
    );
    assert!(from_skewed > first, "{first} then {from_skewed}");
    let mut last = from_skewed;
    for resource in ["c", "d", "e"] {
        let next = fence_of(&honest, resource).await;
        assert!(
            next > last && next < MAX_FENCE,
            "fences keep growing after the skewed agent: {last} then {next}"
        );
        last = next;
    }
    for i in 0..3 {
        let counter: u64 = cluster
            .get(i, "redlock: fence")
            .await
            .map_or(0, |c| c.parse().unwrap());
        assert!(counter < MAX_FENCE, "r{}'s counter {counter}", i + 1);
    }
}

/// An idle agent (probes every minute) whose masters went away and came
/// back: its first acquire a second after three of five restarted is
/// granted from what the masters are now, not refused `no_quorum` from the
/// view it had before (delayed restart off: they may vote at once).
#[tokio::test]
async fn an_idle_agent_answers_from_the_masters_that_came_back() {
    let (status, body) =
        first_acquire_after_a_majority_came_back("delayed_restart:\n  enabled: false\n").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the first acquire after the restart: {body}"
    );
}

/// The same with delayed restart on: the restarted masters must stay out,
/// and the first acquire says so (`quarantined`), not that they are down.
#[tokio::test]
async fn an_idle_agent_names_masters_that_came_back_quarantined_not_down() {
    let (status, body) = first_acquire_after_a_majority_came_back("").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "no_quorum", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    for i in 1..=3 {
        assert!(
            message.contains(&format!("r{i} quarantined")),
            "r{i} named quarantined: {message}"
        );
    }
}

/// An idle agent (probes a minute apart, `extra` config added) over five
/// masters; three of them killed, then started again empty; the agent's
/// first acquire a second later, and its answer.
async fn first_acquire_after_a_majority_came_back(extra: &str) -> (StatusCode, serde_json::Value) {
    let mut cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, &format!("{QUICK}  idle_interval: 60s\n{extra}")).await;
    // The agent starts idle; its probes are a minute apart from here.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for master in &mut cluster.masters[..3] {
        master.kill();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for master in &mut cluster.masters[..3] {
        master.restart().unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    agent
        .post("/v1/locks/back/acquire", json!({"ttl_ms": 2000}))
        .await
}
