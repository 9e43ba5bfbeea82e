//! How the end of a leadership is counted, on real masters. One ended by
//! its `max_hold` or by the client closing its campaign is `resigned`
//! (the campaign still hears `lost` with reason `max_hold`: it must stop
//! leading), never `lost`, and no failure of a lock. One whose key is
//! deleted from the masters, or whose masters are stopped, is `lost`,
//! counted once, in `redlock_leadership_changes_total` alone, not in
//! `redlock_failures_total{reason="lost"}`, which counts locks' holds.

mod common;

use std::time::{Duration, Instant};

use common::{wait_for, Cluster, Hold, TestAgent};
use hyper::StatusCode;
use serde_json::{json, Value};

const MASTERS: usize = 3;

/// Every reason a leadership can end with, by event.
const RESIGNED: [&str; 3] = ["closed", "max_hold", "shutdown"];
const LOST: [&str; 4] = ["renew_failed", "no_quorum", "node_lost", "force_released"];

/// A campaign for `name` through `agent`, once elected.
async fn lead(agent: &TestAgent, name: &str, body: Value) -> Hold {
    let mut stream = agent.campaign(name, body).await;
    let elected = next_change(&mut stream, Duration::from_secs(5)).await;
    let elected = elected.expect("elected within 5 s");
    assert_eq!(elected["event"], "elected", "{elected}");
    stream
}

/// Reads the campaign's `lost`, within 5 s; its reason.
async fn lost(stream: &mut Hold) -> String {
    let lost = next_change(stream, Duration::from_secs(5))
        .await
        .expect("lost within 5 s");
    assert_eq!(lost["event"], "lost", "{lost}");
    lost["reason"].as_str().expect("a reason").to_string()
}

/// The next event other than `renewed`, within `limit`.
async fn next_change(stream: &mut Hold, limit: Duration) -> Option<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = stream.next(left).await?;
        if event["event"] != "renewed" {
            return Some(event);
        }
    }
}

/// The value of `series` in the agent's scrape; every series read here is
/// registered at zero, so a missing one fails the test.
async fn scraped(agent: &TestAgent, series: &str) -> u64 {
    let (status, text) = agent.get_tcp("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} not in the scrape:\n{text}"))
        .parse()
        .unwrap_or_else(|e| panic!("{series}: {e}"))
}

/// `redlock_leadership_changes_total{event, reason}`.
async fn changes(agent: &TestAgent, event: &str, reason: &str) -> u64 {
    let series =
        format!("redlock_leadership_changes_total{{event=\"{event}\",reason=\"{reason}\"}}");
    scraped(agent, &series).await
}

/// Every leadership ended with `event`, whatever the reason.
async fn ended(agent: &TestAgent, event: &str) -> u64 {
    let reasons: &[&str] = if event == "lost" { &LOST } else { &RESIGNED };
    let mut sum = 0;
    for reason in reasons {
        sum += changes(agent, event, reason).await;
    }
    sum
}

async fn failures_lost(agent: &TestAgent) -> u64 {
    scraped(agent, "redlock_failures_total{reason=\"lost\"}").await
}

/// Waits until the agent counted `event` with `reason` `n` times.
async fn counted(agent: &TestAgent, event: &str, reason: &str, n: u64) {
    wait_for(
        &format!("{n} leaderships {event} ({reason})"),
        Duration::from_secs(5),
        || async { changes(agent, event, reason).await == n },
    )
    .await;
}

/// A leadership that reaches its `max_hold` tells its campaign `lost`
/// (`max_hold`) and counts as resigned: no leadership lost, no failure.
/// The same for a lock's hold at its `max_hold`, and for a campaign whose
/// client closes its stream (`closed`).
#[tokio::test]
async fn a_leadership_ended_by_max_hold_or_its_client_is_resigned_not_lost() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;

    let mut capped = lead(&agent, "cron", json!({"ttl_ms": 1000, "max_hold_ms": 1500})).await;
    assert_eq!(lost(&mut capped).await, "max_hold");
    counted(&agent, "resigned", "max_hold", 1).await;
    assert_eq!(changes(&agent, "elected", "").await, 1);
    assert_eq!(ended(&agent, "lost").await, 0);
    assert_eq!(failures_lost(&agent).await, 0);

    let mut hold = agent
        .hold("report", json!({"ttl_ms": 1000, "max_hold_ms": 1000}))
        .await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    let mut last = Value::Null;
    while let Some(event) = hold.next(Duration::from_secs(5)).await {
        last = event;
        if last["event"] == "lost" {
            break;
        }
    }
    assert_eq!(last, json!({"event": "lost", "reason": "max_hold"}));
    assert_eq!(failures_lost(&agent).await, 0);

    let leading = lead(&agent, "cron", json!({"ttl_ms": 1000})).await;
    drop(leading);
    counted(&agent, "resigned", "closed", 1).await;
    assert_eq!(changes(&agent, "elected", "").await, 2);
    assert_eq!(ended(&agent, "resigned").await, 2);
    assert_eq!(ended(&agent, "lost").await, 0);
    assert_eq!(failures_lost(&agent).await, 0);
    agent.stop().await;
}

/// The election's key deleted from every master: the next renewal finds
/// no quorum holding the token, the campaign hears `lost`, and the agent
/// counts one leadership lost under that reason, none resigned, and no
/// failure of a lock.
#[tokio::test]
async fn a_leadership_whose_key_is_deleted_from_the_masters_is_lost() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let mut leading = lead(&agent, "cron", json!({"ttl_ms": 1000})).await;
    for i in 0..MASTERS {
        let mut redis = cluster.redis(i).await;
        let deleted: u64 = redis::cmd("DEL")
            .arg("redlock:cron election")
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(deleted, 1, "the election's key on master {i}");
    }
    let reason = lost(&mut leading).await;
    assert!(LOST.contains(&reason.as_str()), "{reason}");
    counted(&agent, "lost", &reason, 1).await;
    assert_eq!(ended(&agent, "lost").await, 1);
    assert_eq!(ended(&agent, "resigned").await, 0);
    assert_eq!(failures_lost(&agent).await, 0);
    agent.stop().await;
}

/// Two of three masters stopped: renewals find no quorum until the
/// validity nearly ends, and the leadership is lost, counted once.
#[tokio::test]
async fn a_leadership_whose_masters_are_stopped_is_lost() {
    let mut cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let mut leading = lead(&agent, "cron", json!({"ttl_ms": 1000})).await;
    cluster.masters[0].kill();
    cluster.masters[1].kill();
    let reason = lost(&mut leading).await;
    assert!(LOST.contains(&reason.as_str()), "{reason}");
    counted(&agent, "lost", &reason, 1).await;
    assert_eq!(ended(&agent, "lost").await, 1);
    assert_eq!(ended(&agent, "resigned").await, 0);
    assert_eq!(failures_lost(&agent).await, 0);
    agent.stop().await;
}
