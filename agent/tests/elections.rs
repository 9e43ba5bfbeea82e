//! Leader elections on real masters: three campaigners through two agents
//! with exactly one leader; its resignation elects the next within a
//! second with a larger term; observers and `GET` on either agent follow;
//! an election without a leader answers 404 `no_leader`.

mod common;

use std::time::{Duration, Instant};

use common::{wait_for, Cluster, Hold, TestAgent};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const MASTERS: usize = 3;

async fn leader(agent: &TestAgent, name: &str) -> (StatusCode, Value) {
    agent.get(&format!("/v1/elections/{name}")).await.unwrap()
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

/// Reads events until `found` says so, within 5 s.
async fn wait_for_event(stream: &mut Hold, mut found: impl FnMut(&Value) -> bool) {
    loop {
        let event = next_change(stream, Duration::from_secs(5))
            .await
            .expect("the event within 5 s");
        if found(&event) {
            return;
        }
    }
}

/// Three campaigners, two on one agent and one on the other: one is
/// elected, the others say `waiting` with it as leader; `GET` on both
/// agents and an observer name it with its value and term. When it
/// closes its stream, exactly one of the others is elected within a
/// second (its TTL is 9 s), with a larger term; the last is told the new
/// leader, and the observer sees the change.
#[tokio::test]
async fn one_leader_of_three_campaigners_and_the_next_elected_on_resignation() {
    let cluster = Cluster::start(MASTERS);
    let one = TestAgent::start(&cluster, "").await;
    let two = TestAgent::start(&cluster, "").await;
    // A long TTL: the next is elected within a second only if the
    // resignation releases at once.
    let ttl = json!(9000);
    let mut first = one
        .campaign(
            "scheduler",
            json!({"ttl_ms": ttl, "value": "10.0.0.1:8080", "owner": "a"}),
        )
        .await;
    let elected = first.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(elected["event"], "elected", "{elected}");
    let term = elected["term"].as_u64().unwrap();

    let mut second = two
        .campaign(
            "scheduler",
            json!({"ttl_ms": ttl, "value": "10.0.0.2:8080", "owner": "b"}),
        )
        .await;
    let mut third = one
        .campaign(
            "scheduler",
            json!({"ttl_ms": ttl, "value": "10.0.0.3:8080", "owner": "c"}),
        )
        .await;
    for stream in [&mut second, &mut third] {
        let waiting = stream.next(Duration::from_secs(5)).await.unwrap();
        assert_eq!(waiting["event"], "waiting", "{waiting}");
        assert_eq!(waiting["leader"]["value"], "10.0.0.1:8080", "{waiting}");
        assert_eq!(waiting["leader"]["term"], term);
    }
    for agent in [&one, &two] {
        let (status, led) = leader(agent, "scheduler").await;
        assert_eq!(status, StatusCode::OK, "{led}");
        assert_eq!(led["owner"], "a");
        assert_eq!(led["value"], "10.0.0.1:8080");
        assert_eq!(led["term"], term);
        assert!(led["pid"].as_u64().is_some(), "{led}");
        assert!(led["since_ms"].as_u64().is_some(), "{led}");
        assert!(
            !led.to_string().contains("rl2-"),
            "a token in the answer: {led}"
        );
    }
    let (_, metrics) = one.get_tcp("/metrics").await;
    assert!(
        metrics.contains("redlock_leaderships_held 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("redlock_leadership_changes_total{event=\"elected\",reason=\"\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("redlock_last_term {term}\n")),
        "{metrics}"
    );
    let mut observer = two
        .stream(Method::GET, "/v1/elections/scheduler/observe", None)
        .await;
    assert_eq!(observer.status, StatusCode::OK);
    let seen = observer.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(seen["event"], "leader", "{seen}");
    assert_eq!(seen["term"], term);

    // Still one leader a while later: the others keep waiting.
    assert!(next_change(&mut second, Duration::from_millis(1500))
        .await
        .is_none());
    assert!(next_change(&mut third, Duration::from_millis(10))
        .await
        .is_none());

    let resigned = Instant::now();
    drop(first);
    // Whichever speaks first, read as the events arrive (a short look at
    // each in turn), so the time is the election's, not a timeout's.
    // `waiting` events (the leaderless moment, the new leader) may come
    // first on the other's stream; the first `elected` decides.
    // The last `waiting` each was told while the loop read it.
    let (mut told_second, mut told_third) = (Value::Null, Value::Null);
    let (winner, mut other, told) = loop {
        if let Some(event) = next_change(&mut second, Duration::from_millis(20)).await {
            if event["event"] == "elected" {
                break (event, third, told_third);
            }
            assert_eq!(event["event"], "waiting", "{event}");
            told_second = event;
        }
        if let Some(event) = next_change(&mut third, Duration::from_millis(20)).await {
            if event["event"] == "elected" {
                break (event, second, told_second);
            }
            assert_eq!(event["event"], "waiting", "{event}");
            told_third = event;
        }
        assert!(
            resigned.elapsed() < Duration::from_secs(5),
            "no one elected"
        );
    };
    let took = resigned.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "elected {took:?} after the resignation"
    );
    let next_term = winner["term"].as_u64().unwrap();
    assert!(next_term > term, "{next_term} after {term}");
    // The other is told the new leader (once its note is there), and
    // stays in line.
    if told["leader"]["term"] != next_term {
        wait_for_event(&mut other, |e| {
            assert_eq!(e["event"], "waiting", "a second leader: {e}");
            e["leader"]["term"] == next_term
        })
        .await;
    }
    assert!(
        next_change(&mut other, Duration::from_millis(500))
            .await
            .is_none(),
        "a second leader"
    );
    // The observer may see the moment without a leader between the two.
    let mut changed = next_change(&mut observer, Duration::from_secs(5))
        .await
        .unwrap();
    if changed["event"] == "no_leader" {
        changed = next_change(&mut observer, Duration::from_secs(5))
            .await
            .unwrap();
    }
    assert_eq!(changed["event"], "leader", "{changed}");
    assert_eq!(changed["term"], next_term, "{changed}");
    let (_, led) = leader(&one, "scheduler").await;
    assert_eq!(led["term"], next_term);
    drop((other, observer));
    one.stop().await;
    two.stop().await;
}

/// No campaigner: 404 `no_leader`, and an observer says `no_leader`; a
/// leader's loss (its masters flushed) ends its leadership with `lost`
/// before its validity.
#[tokio::test]
async fn no_leader_answers_404_and_a_lost_leadership_says_lost() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(
        &cluster,
        "health:\n  interval: 100ms\n  idle_interval: 100ms\n",
    )
    .await;
    let (status, answer) = leader(&agent, "cron").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(answer["error"]["code"], "no_leader");
    let mut observer = agent
        .stream(Method::GET, "/v1/elections/cron/observe", None)
        .await;
    let none = observer.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(none, json!({"event": "no_leader", "election": "cron"}));

    let mut leading = agent.campaign("cron", json!({"ttl_ms": 5000})).await;
    let elected = leading.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(elected["event"], "elected");
    let seen = observer.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(seen["event"], "leader", "{seen}");
    for i in 0..2 {
        let mut redis = cluster.redis(i).await;
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut redis)
            .await
            .unwrap();
    }
    let lost = next_change(&mut leading, Duration::from_secs(4))
        .await
        .unwrap();
    assert_eq!(lost["event"], "lost", "{lost}");
    assert_eq!(lost["reason"], "node_lost", "{lost}");
    wait_for("no leader", Duration::from_secs(5), || async {
        leader(&agent, "cron").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    agent.stop().await;
}
