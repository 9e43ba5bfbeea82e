//! An operator's force release of a permit and of a leadership, on real
//! masters, through the admin socket and the Rust client: as safe as a
//! lock's (announced, the holder's stream told `lost` at once, fenced),
//! refused on the application socket, and what they end is named as what
//! it is: a permit of a full semaphore, a leadership.
//!
//! Waits are bounded by generous deadlines, never timed: each only says how
//! long to wait for an event before the test gives up.

mod common;

use std::time::Duration;

use common::{Cluster, TestAgent};
use hyper::{Method, StatusCode};
use redlock_client::{Error, ErrorCode, PermitOptions};
use serde_json::json;

/// Longest wait for one event of a stream: far beyond what any takes.
const PATIENCE: Duration = Duration::from_secs(30);

/// A full semaphore's refusal names it and its limit, not a lock. An
/// operator's force release of permit 0 (admin socket, Rust client) ends
/// its holder's hold with `lost` (`force_released`) at once, and the waiter
/// in line gets that permit with a larger fence. The application socket
/// refuses the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_released_permit_tells_its_holder_lost_and_goes_to_the_waiter() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "").await;

    let mut holder = agent
        .stream(
            Method::POST,
            "/v1/semaphores/big/hold",
            Some(json!({"limit": 1, "ttl_ms": 10_000, "fence": true})),
        )
        .await;
    assert_eq!(holder.status, StatusCode::OK, "{:?}", holder.error);
    let acquired = holder.next(PATIENCE).await.expect("acquired");
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    assert_eq!(acquired["permit"], 0, "{acquired}");
    let first_fence = acquired["fence"].as_u64().expect("a fence");

    // Full: the refusal speaks of the semaphore and its limit.
    let (status, body) = agent
        .post(
            "/v1/semaphores/big/acquire",
            json!({"limit": 1, "ttl_ms": 10_000}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "taken", "{body}");
    assert_eq!(
        body["error"]["message"], "semaphore big has all its permits held by others (limit 1)",
        "{body}"
    );

    // A waiter in line for the semaphore.
    let client = agent.client.clone();
    let waiter = tokio::spawn(async move {
        let options = PermitOptions::new(1)
            .ttl(Duration::from_secs(10))
            .wait(PATIENCE)
            .fence();
        client.acquire_permit("big", &options).await
    });
    common::wait_for("the waiter in line", PATIENCE, || async {
        let (_, semaphore) = agent.get("/v1/semaphores/big").await.unwrap();
        semaphore["waiters"] == 1
    })
    .await;

    // Not on the application socket.
    let (status, body) = agent
        .post("/v1/semaphores/big/force-release", json!({"permit": 0}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("admin socket"),
        "{body}"
    );

    let forced = agent
        .admin_client
        .force_release_permit("big", 0)
        .await
        .expect("force release of permit 0");
    assert_eq!(forced.deleted, 3, "{forced:?}");
    assert!(forced.failed.is_empty(), "{forced:?}");

    let lost = holder.next(PATIENCE).await.expect("lost");
    assert_eq!(lost, json!({"event": "lost", "reason": "force_released"}));
    let permit = waiter.await.unwrap().expect("the waiter gets the permit");
    assert_eq!(permit.permit, 0);
    let fence = permit.fence.expect("a fence");
    assert!(fence > first_fence, "fence {fence} after {first_fence}");

    // A permit number past the largest limit is refused.
    match agent.admin_client.force_release_permit("big", 256).await {
        Err(Error::Api {
            status: 400,
            code: ErrorCode::InvalidRequest,
            ..
        }) => {}
        other => panic!("permit 256: {other:?}"),
    }
    agent.stop().await;
}

/// An operator's force release of a leadership (admin socket, Rust
/// client) ends the leader's campaign with `lost` (`force_released`) at
/// once, and the campaigner in line is elected with a larger term. The
/// application socket refuses the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_released_leadership_tells_its_leader_lost_and_elects_the_next() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "").await;

    let campaign = |owner: &'static str| {
        agent.stream(
            Method::POST,
            "/v1/elections/el1/campaign",
            Some(json!({"ttl_ms": 10_000, "owner": owner})),
        )
    };
    let mut first = campaign("first").await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.error);
    let elected = first.next(PATIENCE).await.expect("elected");
    assert_eq!(elected["event"], "elected", "{elected}");
    let first_term = elected["term"].as_u64().expect("a term");

    let mut second = campaign("second").await;
    let waiting = second.next(PATIENCE).await.expect("waiting");
    assert_eq!(waiting["event"], "waiting", "{waiting}");
    assert_eq!(waiting["leader"]["owner"], "first", "{waiting}");

    let (status, body) = agent
        .post("/v1/elections/el1/force-release", json!({}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    let forced = agent
        .admin_client
        .force_release_leadership("el1")
        .await
        .expect("force release of the leadership");
    assert_eq!(forced.deleted, 3, "{forced:?}");

    let lost = first.next(PATIENCE).await.expect("lost");
    assert_eq!(lost, json!({"event": "lost", "reason": "force_released"}));
    let elected = loop {
        let event = second.next(PATIENCE).await.expect("elected");
        if event["event"] != "waiting" {
            break event;
        }
    };
    assert_eq!(elected["event"], "elected", "{elected}");
    let term = elected["term"].as_u64().expect("a term");
    assert!(term > first_term, "term {term} after {first_term}");
    let (_, leader) = agent.get("/v1/elections/el1").await.unwrap();
    assert_eq!(leader["owner"], "second", "{leader}");
    assert_eq!(leader["term"], term, "{leader}");
    agent.stop().await;
}
