//! A semaphore's limit holds while its permits are held, on real masters,
//! whichever agent renews them and across agent restarts: permits 0 and 1
//! of a limit-2 semaphore are granted through one agent, which then stops;
//! a second agent extends them by token, for three times their TTL (the
//! limit's note, written with the grant, would have lapsed twice over);
//! then a request with limit 5, through the second agent and through the
//! first one started again, is refused `limit_mismatch`, and the view says
//! `limit: 2` with two permits. The control run
//! (`REDLOCK_TEST_SEMAPHORE_LIMIT_BY_GRANTER=1`: only the granting agent
//! keeps the note, as before the fix) finds the violation: permit 2 of a
//! limit-2 semaphore granted, three holders, the view saying `limit: 5`.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, Switch, TestAgent};
use hyper::StatusCode;
use redlock_testkit::switches::SEMAPHORE_LIMIT_BY_GRANTER;
use serde_json::{json, Value};

const MASTERS: usize = 3;

/// The permits' TTL. Extensions come every [`EVERY`], leaving two
/// seconds of margin for a busy machine before a permit would expire.
const TTL_MS: u64 = 3000;
const EVERY: Duration = Duration::from_secs(1);

/// What the requests with limit 5 met, and the semaphore's view after.
struct Seen {
    /// Status and answer of the limit-5 request on each agent.
    answers: Vec<(StatusCode, Value)>,
    view: Value,
}

/// An agent over `cluster`; with `kept: false`, the control's switch on.
async fn agent(cluster: &Cluster, kept: bool) -> TestAgent {
    let _switch = (!kept).then(|| Switch::set(SEMAPHORE_LIMIT_BY_GRANTER, "1"));
    TestAgent::start(cluster, "").await
}

/// The scenario of the module's doc.
async fn scenario(kept: bool) -> Seen {
    let cluster = Cluster::start(MASTERS);
    let granter = agent(&cluster, kept).await;
    let renewer = agent(&cluster, kept).await;
    let ask = json!({"limit": 2, "ttl_ms": TTL_MS});
    let mut permits = Vec::new();
    for _ in 0..2 {
        let (status, granted) = granter.post("/v1/semaphores/s1/acquire", ask.clone()).await;
        assert_eq!(status, StatusCode::OK, "{granted}");
        permits.push(granted);
    }
    let granted_at = Instant::now();
    granter.stop().await;

    // Three TTLs of extensions through the other agent, by token.
    while granted_at.elapsed() < Duration::from_millis(3 * TTL_MS) {
        tokio::time::sleep(EVERY).await;
        for permit in &permits {
            let (status, extended) = renewer
                .post(
                    "/v1/semaphores/s1/extend",
                    json!({"permit": permit["permit"], "token": permit["token"], "ttl_ms": TTL_MS}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "the permit stays held: {extended}");
        }
    }

    let restarted = agent(&cluster, kept).await;
    let mut answers = Vec::new();
    for agent in [&renewer, &restarted] {
        answers.push(
            agent
                .post(
                    "/v1/semaphores/s1/acquire",
                    json!({"limit": 5, "ttl_ms": TTL_MS}),
                )
                .await,
        );
    }
    let (status, view) = renewer.get("/v1/semaphores/s1").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{view}");
    renewer.stop().await;
    restarted.stop().await;
    Seen { answers, view }
}

/// Permits extended only through another agent keep their semaphore's
/// limit: limit 5 is refused on both agents, and the view says limit 2.
#[tokio::test]
async fn the_limit_holds_while_permits_are_extended_through_another_agent() {
    let seen = scenario(true).await;
    for (status, answer) in &seen.answers {
        assert_eq!(*status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["error"]["code"], "limit_mismatch", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("limit 2"), "{message}");
    }
    assert_eq!(seen.view["limit"], 2, "{}", seen.view);
    assert_eq!(
        seen.view["permits"].as_array().unwrap().len(),
        2,
        "{}",
        seen.view
    );
}

/// The control: with only the granting agent keeping the note, it lapses
/// while both permits are held, and limit 5 gets a third permit.
#[tokio::test]
async fn control_without_the_fix_a_third_holder_is_granted() {
    let seen = scenario(false).await;
    let granted: Vec<&Value> = seen
        .answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::OK)
        .map(|(_, answer)| answer)
        .collect();
    assert!(
        !granted.is_empty(),
        "the control found no violation: {:?}",
        seen.answers
    );
    assert_eq!(granted[0]["permit"], 2, "{}", granted[0]);
    assert_eq!(seen.view["limit"], 5, "{}", seen.view);
    let holders = seen.view["permits"].as_array().unwrap().len();
    assert!(
        holders >= 3,
        "{holders} holders of a limit-2 semaphore: {}",
        seen.view
    );
}
