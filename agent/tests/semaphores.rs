//! Semaphores on real masters: `limit` permits at once and no more,
//! through one agent or two; the next request waits in line and is granted
//! as permits are released, in order; a request with another limit is
//! refused while permits are held; a permit's hold, extend and release;
//! bad requests refused with their codes.

mod common;

use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const MASTERS: usize = 3;

/// Acquires a permit of `name` with `body`: the answer.
async fn permit(agent: &TestAgent, name: &str, body: Value) -> (StatusCode, Value) {
    agent
        .post(&format!("/v1/semaphores/{name}/acquire"), body)
        .await
}

async fn release(agent: &TestAgent, name: &str, granted: &Value) -> Value {
    let (status, answer) = agent
        .post(
            &format!("/v1/semaphores/{name}/release"),
            json!({"permit": granted["permit"], "token": granted["token"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

async fn semaphore(agent: &TestAgent, name: &str) -> Value {
    let (status, answer) = agent.get(&format!("/v1/semaphores/{name}")).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

/// Two permits of limit 2 are granted (permits 0 and 1, each with its
/// own fence); a third request without a wait is refused `taken`; two
/// waiters queue, and each release grants the first in line the permit
/// just freed. The listing shows the holders and never a token.
#[tokio::test]
async fn k_permits_are_granted_and_the_next_waits_in_line() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let ask = json!({"limit": 2, "ttl_ms": 20000, "fence": true, "owner": "worker"});
    let (status, first) = permit(&agent, "pay", ask.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, second) = permit(&agent, "pay", ask.clone()).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(first["semaphore"], "pay");
    let mut numbers = [first["permit"].as_u64(), second["permit"].as_u64()];
    numbers.sort_unstable();
    assert_eq!(numbers, [Some(0), Some(1)], "{first} {second}");
    assert!(second["fence"].as_u64() > first["fence"].as_u64());
    assert_ne!(first["token"], second["token"]);

    let (status, refused) = permit(&agent, "pay", ask.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "taken");
    let (_, metrics) = agent.get_tcp("/metrics").await;
    assert!(metrics.contains("redlock_permits_held 2\n"), "{metrics}");
    assert!(metrics.contains("redlock_locks_held 0\n"), "{metrics}");

    let listed = semaphore(&agent, "pay").await;
    assert_eq!(listed["limit"], 2, "{listed}");
    assert_eq!(listed["permits"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(listed["permits"][0]["owner"], "worker");
    assert_eq!(listed["permits"][0]["held_here"], true);
    let text = listed.to_string();
    for granted in [&first, &second] {
        let token = granted["token"].as_str().unwrap();
        assert!(!text.contains(token), "a token in the listing: {text}");
    }

    // Two waiters, the second queued once the first is.
    let mut waiting = ask.clone();
    waiting["wait_ms"] = json!(20000);
    let third = {
        let (agent, waiting) = (&agent, waiting.clone());
        async move { permit(agent, "pay", waiting).await }
    };
    let fourth = {
        let (agent, waiting) = (&agent, waiting.clone());
        async move {
            wait_for(
                "the first waiter to queue",
                Duration::from_secs(10),
                || async { semaphore(agent, "pay").await["waiters"] == 1 },
            )
            .await;
            permit(agent, "pay", waiting).await
        }
    };
    let releases = async {
        wait_for("both waiters to queue", Duration::from_secs(10), || async {
            semaphore(&agent, "pay").await["waiters"] == 2
        })
        .await;
        assert_eq!(release(&agent, "pay", &first).await["released"], true);
        wait_for(
            "the first waiter's grant",
            Duration::from_secs(10),
            || async { semaphore(&agent, "pay").await["waiters"] == 1 },
        )
        .await;
        assert_eq!(release(&agent, "pay", &second).await["released"], true);
    };
    let ((status3, third), (status4, fourth), ()) = tokio::join!(third, fourth, releases);
    assert_eq!(status3, StatusCode::OK, "{third}");
    assert_eq!(status4, StatusCode::OK, "{fourth}");
    assert_eq!(
        third["permit"], first["permit"],
        "the first waiter got the first permit freed"
    );
    assert_eq!(fourth["permit"], second["permit"]);
    assert!(fourth["fence"].as_u64() > third["fence"].as_u64());
    agent.stop().await;
}

/// Permits through two agents on the same masters: the second agent's
/// request is refused while the first's two are held, and its waiter is
/// woken by a release through the first agent (the permits' release
/// channel), not by polling alone.
#[tokio::test]
async fn two_agents_share_the_limit_and_a_release_on_one_wakes_a_waiter_on_the_other() {
    let cluster = Cluster::start(MASTERS);
    let one = TestAgent::start(&cluster, "").await;
    let two = TestAgent::start(&cluster, "").await;
    let ask = json!({"limit": 2, "ttl_ms": 30000});
    let (_, a) = permit(&one, "jobs", ask.clone()).await;
    let (_, b) = permit(&one, "jobs", ask.clone()).await;
    let (status, refused) = permit(&two, "jobs", ask.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(
        semaphore(&two, "jobs").await["permits"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let mut waiting = ask.clone();
    waiting["wait_ms"] = json!(20000);
    let started = std::time::Instant::now();
    let (granted, ()) = tokio::join!(permit(&two, "jobs", waiting), async {
        wait_for(
            "the waiter on the second agent",
            Duration::from_secs(10),
            || async { semaphore(&two, "jobs").await["waiters"] == 1 },
        )
        .await;
        release(&one, "jobs", &b).await;
    });
    assert_eq!(granted.0, StatusCode::OK, "{}", granted.1);
    assert_eq!(granted.1["permit"], b["permit"]);
    // Far below the 30 s TTL: the release woke it.
    assert!(started.elapsed() < Duration::from_secs(15));
    release(&one, "jobs", &a).await;
    one.stop().await;
    two.stop().await;
}

/// The limit is part of the semaphore: while a permit of limit 2 is held,
/// limit 3 is refused `limit_mismatch` (through another agent too); once
/// nothing is held, another limit is accepted.
#[tokio::test]
async fn another_limit_is_refused_while_permits_are_held() {
    let cluster = Cluster::start(MASTERS);
    let one = TestAgent::start(&cluster, "").await;
    let two = TestAgent::start(&cluster, "").await;
    let (status, held) = permit(&one, "db", json!({"limit": 2, "ttl_ms": 2000})).await;
    assert_eq!(status, StatusCode::OK, "{held}");
    for agent in [&one, &two] {
        let (status, refused) = permit(agent, "db", json!({"limit": 3})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused}");
        assert_eq!(refused["error"]["code"], "limit_mismatch", "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("limit 2"), "{message}");
    }
    release(&one, "db", &held).await;
    // The note outlives the release by at most the permit's TTL.
    wait_for("the limit to be free", Duration::from_secs(10), || async {
        permit(&two, "db", json!({"limit": 3, "ttl_ms": 2000}))
            .await
            .0
            == StatusCode::OK
    })
    .await;
    one.stop().await;
    two.stop().await;
}

/// A permit's hold names its permit, is renewed, and its release on
/// close frees the permit for the next; extend and release by permit
/// number and token.
#[tokio::test]
async fn a_permits_hold_extend_and_release() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let mut hold = agent
        .stream(
            Method::POST,
            "/v1/semaphores/gpu/hold",
            Some(json!({"limit": 1, "ttl_ms": 600})),
        )
        .await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    let acquired = hold.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(acquired["event"], "acquired");
    assert_eq!(acquired["permit"], 0);
    let renewed = hold.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(renewed["event"], "renewed", "{renewed}");
    let (status, _) = permit(&agent, "gpu", json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    drop(hold);
    wait_for(
        "the permit released on close",
        Duration::from_secs(5),
        || async {
            semaphore(&agent, "gpu").await["permits"]
                .as_array()
                .unwrap()
                .is_empty()
        },
    )
    .await;

    let (status, granted) = permit(&agent, "gpu", json!({"limit": 1, "ttl_ms": 1000})).await;
    assert_eq!(status, StatusCode::OK, "{granted}");
    let (status, extended) = agent
        .post(
            "/v1/semaphores/gpu/extend",
            json!({"permit": 0, "token": granted["token"], "ttl_ms": 30000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{extended}");
    assert!(extended["validity_ms"].as_u64().unwrap() > 20000);
    let (status, wrong) = agent
        .post(
            "/v1/semaphores/gpu/release",
            json!({"permit": 1, "token": granted["token"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{wrong}");
    assert_eq!(
        wrong["released"], false,
        "another permit's number releases nothing"
    );
    assert_eq!(release(&agent, "gpu", &granted).await["released"], true);
    agent.stop().await;
}

/// A permit is extended and released by its token alone, through the
/// agent that granted it or another one: the agent finds the permit from
/// the token. A token made for no permit of the semaphore (another
/// semaphore's, a lock's) is refused with its code, and changes nothing.
#[tokio::test]
async fn a_permit_is_extended_and_released_by_its_token_alone() {
    let cluster = Cluster::start(MASTERS);
    let one = TestAgent::start(&cluster, "").await;
    let two = TestAgent::start(&cluster, "").await;
    let ask = json!({"limit": 3, "ttl_ms": 30000});
    let (_, first) = permit(&one, "batch", ask.clone()).await;
    let (status, second) = permit(&one, "batch", ask).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_ne!(first["permit"], second["permit"]);

    let token_only = json!({"token": second["token"], "ttl_ms": 30000});
    let (status, extended) = one.post("/v1/semaphores/batch/extend", token_only).await;
    assert_eq!(status, StatusCode::OK, "{extended}");

    let (_, other) = permit(&one, "other", json!({"limit": 1, "ttl_ms": 30000})).await;
    let (status, lock) = one.post("/v1/locks/batch/acquire", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{lock}");
    for wrong in [&other["token"], &lock["token"]] {
        let body = json!({"token": wrong});
        let (status, answer) = two.post("/v1/semaphores/batch/release", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
    }
    assert_eq!(
        semaphore(&two, "batch").await["permits"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let body = json!({"token": second["token"]});
    let (status, released) = two.post("/v1/semaphores/batch/release", body).await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert_eq!(released["released"], true, "{released}");
    let listed = semaphore(&one, "batch").await;
    let permits = listed["permits"].as_array().unwrap();
    assert_eq!(permits.len(), 1, "{listed}");
    assert_eq!(permits[0]["permit"], first["permit"], "{listed}");
}

/// Refused with their codes: no limit, limit 0 or above the maximum, a
/// permit number out of range, a name with a space, and taking a permit
/// on the admin socket.
#[tokio::test]
async fn bad_semaphore_requests_are_refused_with_their_codes() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    for body in [
        json!({}),
        json!({"limit": 0}),
        json!({"limit": 100000}),
        json!({"limit": 2, "size": 1}),
    ] {
        let (status, answer) = permit(&agent, "x", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(
            answer["error"]["code"], "invalid_request",
            "{body}: {answer}"
        );
    }
    let (status, answer) = agent
        .post(
            "/v1/semaphores/x/release",
            json!({"permit": 99999, "token": "t"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, answer) = permit(&agent, "a%20b", json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_resource");
    let (status, answer) = agent
        .admin_post("/v1/semaphores/x/acquire", json!({"limit": 1}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    agent.stop().await;
}
