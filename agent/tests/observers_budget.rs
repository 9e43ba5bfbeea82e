//! Observers cost the masters per agent, not per election, on real
//! masters: 1,000 observers of distinct elections nobody leads would each
//! read their election's keys every 5 s (1,000 reads, 5,000 commands on
//! each master, in any window of 5 s); their timer-driven reads share one
//! budget per agent (`OBSERVER_READS_PER_SECOND`, 50 reads a second), so
//! each master serves at most the budget's reads over the window measured,
//! however long the machine took. An election's announcement is never
//! held back by the budget: a campaign's election reaches its observer.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, Hold, TestAgent};
use hyper::{Method, StatusCode};
use serde_json::json;

const MASTERS: usize = 3;

/// Observers opened, each on an election of its own.
const OBSERVERS: usize = 1000;

/// The agent's budget of timer-driven observer reads, per second.
const READS_PER_SECOND: f64 = 50.0;

/// Commands one read of a leader costs a master (a script, and a `GET`
/// and a `PTTL` for each of its two keys).
const COMMANDS_PER_READ: f64 = 5.0;

/// Commands a master may serve meanwhile for other reasons (a probe,
/// reads already under way when the window opened).
const BACKGROUND: f64 = 500.0;

/// A probe every 10 s and no leak scan: little else reaches the masters.
const CONFIG: &str = "health:\n  interval: 10s\nleak_scan:\n  interval: 1h\n";

/// Every call master `m` has served but `INFO`'s.
async fn commands(cluster: &Cluster, m: usize) -> f64 {
    let calls = cluster.command_calls(m).await;
    calls
        .iter()
        .filter(|(name, _)| *name != "info")
        .map(|(_, &n)| n as f64)
        .sum()
}

async fn all_commands(cluster: &Cluster) -> Vec<f64> {
    futures::future::join_all((0..MASTERS).map(|m| commands(cluster, m))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_of_many_elections_share_one_budget_of_reads() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    let mut observers: Vec<Hold> = Vec::with_capacity(OBSERVERS);
    for chunk in (0..OBSERVERS).collect::<Vec<_>>().chunks(50) {
        let opened = futures::future::join_all(chunk.iter().map(|i| {
            let agent = &agent;
            async move {
                let path = format!("/v1/elections/e{i}/observe");
                let mut observer = agent.stream(Method::GET, &path, None).await;
                assert_eq!(observer.status, StatusCode::OK, "{:?}", observer.error);
                let first = observer.next(Duration::from_secs(30)).await.unwrap();
                assert_eq!(first["event"], "no_leader", "{first}");
                observer
            }
        }))
        .await;
        observers.extend(opened);
    }

    // A window longer than the observers' 5 s timer.
    let started = Instant::now();
    let before = all_commands(&cluster).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = all_commands(&cluster).await;
    let window = started.elapsed().as_secs_f64();
    let bound = (READS_PER_SECOND * (1.0 + window)) * COMMANDS_PER_READ + BACKGROUND;
    for (m, (before, after)) in before.iter().zip(&after).enumerate() {
        let served = after - before;
        eprintln!("master {m}: {served} commands in {window:.1}s with {OBSERVERS} observers (bound {bound:.0})");
        assert!(
            served <= bound,
            "master {m}: {served} commands in {window:.1}s with {OBSERVERS} observers, above {bound:.0}"
        );
    }

    // An announcement is heard at once, budget or not.
    let mut campaign = agent
        .stream(
            Method::POST,
            "/v1/elections/e0/campaign",
            Some(json!({"ttl_ms": 10000, "owner": "lead"})),
        )
        .await;
    assert_eq!(campaign.status, StatusCode::OK, "{:?}", campaign.error);
    assert_eq!(
        campaign.next(Duration::from_secs(10)).await.unwrap()["event"],
        "elected"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let event = observers[0]
            .next(deadline.saturating_duration_since(Instant::now()))
            .await
            .expect("the observer of e0 hears the election");
        if event["event"] == "leader" && event["owner"] == "lead" {
            break;
        }
    }
    drop(campaign);
    drop(observers);
    agent.stop().await;
}
