//! Reentrant locks on real masters: a lock acquired again by the process
//! that holds it, with its token, is held until released as often, and
//! stays one key with one token on the masters; what may not re-enter (a
//! wrong or spent token, a hold's, another process, another agent) is
//! refused with its own code.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Cluster, TestAgent};
use hyper::StatusCode;
use redlock_client::{AcquireOptions, Error, ErrorCode, Released};
use serde_json::{json, Value};

const MASTERS: usize = 3;

/// The lock key of `resource` with the default prefix.
fn key(resource: &str) -> String {
    format!("redlock:{resource}")
}

/// How many masters hold `key` with `token`.
async fn held_with(cluster: &Cluster, key: &str, token: &str) -> usize {
    let mut n = 0;
    for i in 0..MASTERS {
        if cluster.get(i, key).await.as_deref() == Some(token) {
            n += 1;
        }
    }
    n
}

/// The code of a refused client call.
fn code(result: Result<redlock_client::Grant, Error>) -> Option<ErrorCode> {
    match result {
        Ok(grant) => panic!("granted: {grant:?}"),
        Err(e) => e.code(),
    }
}

/// An acquire of `resource` with `body`, sent by another process (`curl`)
/// on `socket`: status code and the JSON answer.
fn acquire_from_another_process(socket: &Path, resource: &str, body: &Value) -> (u16, Value) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--unix-socket"])
        .arg(socket)
        .args(["--write-out", "\n%{http_code}", "--data"])
        .arg(body.to_string())
        .args(["-H", "content-type: application/json"])
        .arg(format!("http://agent/v1/locks/{resource}/acquire"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8(output.stdout).unwrap();
    let (answer, status) = text.rsplit_once('\n').expect("body, then the status");
    (
        status.trim().parse().unwrap_or_else(|_| panic!("{text}")),
        serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}")),
    )
}

/// Acquired, re-entered twice (same token, same fence, count 2 then 3),
/// taken for everyone else meanwhile, and released on the masters only at
/// the third release; the key never changes on the masters until then.
#[tokio::test]
async fn a_reentered_lock_is_held_until_released_as_often() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let client = &agent.client;
    let ttl = Duration::from_secs(20);
    let first = client
        .acquire("orders", &AcquireOptions::new().ttl(ttl).fence())
        .await
        .unwrap();
    assert_eq!(first.hold_count, None, "a first acquire has no count");
    assert!(first.fence.is_some());
    for expected in [2, 3] {
        let again = client
            .acquire(
                "orders",
                &AcquireOptions::new().ttl(ttl).reenter(&first.token),
            )
            .await
            .unwrap();
        assert_eq!(again.token, first.token, "the same token");
        assert_eq!(again.fence, first.fence, "the first grant's fence");
        assert_eq!(again.hold_count, Some(expected));
        assert!(again.validity > Duration::ZERO && again.validity <= ttl);
    }
    assert_eq!(
        held_with(&cluster, &key("orders"), &first.token).await,
        MASTERS
    );
    assert_eq!(
        code(client.acquire("orders", &AcquireOptions::new()).await),
        Some(ErrorCode::Taken),
        "a plain acquire finds it taken"
    );

    for left in [2, 1] {
        assert_eq!(
            client
                .release_counted("orders", &first.token)
                .await
                .unwrap(),
            Released::StillHeld(left)
        );
        assert_eq!(
            held_with(&cluster, &key("orders"), &first.token).await,
            MASTERS,
            "still held on every master with {left} releases to go"
        );
    }
    assert_eq!(
        client
            .release_counted("orders", &first.token)
            .await
            .unwrap(),
        Released::Released
    );
    assert_eq!(held_with(&cluster, &key("orders"), &first.token).await, 0);
    assert_eq!(
        client
            .release_counted("orders", &first.token)
            .await
            .unwrap(),
        Released::NotHeld,
        "a release past zero finds nothing"
    );
    assert_eq!(
        code(
            client
                .acquire("orders", &AcquireOptions::new().reenter(&first.token))
                .await
        ),
        Some(ErrorCode::NotReentrant),
        "a released lock cannot be re-entered"
    );
    let next = client
        .acquire("orders", &AcquireOptions::new())
        .await
        .unwrap();
    assert_ne!(next.token, first.token);
}

/// A hold with the token re-enters the lock: the same token and fence,
/// `hold_count` 2, renewed while open; closing it lowers the count without
/// releasing, so the lock stays taken until the first acquire's release.
/// The last holder's close releases: a lock re-entered by a hold and then
/// released by its acquirer is released on the masters when the hold
/// closes. `on_disconnect: expire` with a token is refused.
#[tokio::test]
async fn a_hold_reenters_and_its_close_lowers_the_count() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let client = &agent.client;
    let first = client
        .acquire(
            "batch",
            &AcquireOptions::new().ttl(Duration::from_secs(2)).fence(),
        )
        .await
        .unwrap();
    let mut hold = agent
        .hold(
            "batch",
            json!({"token": first.token, "ttl_ms": 600, "fence": true}),
        )
        .await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    let acquired = hold.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(acquired["token"], first.token.as_str(), "{acquired}");
    assert_eq!(acquired["fence"], first.fence.unwrap(), "{acquired}");
    assert_eq!(acquired["hold_count"], 2, "{acquired}");
    // Renewed past the first acquire's 2 s TTL.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        let event = hold.next(Duration::from_secs(2)).await.unwrap();
        assert_eq!(event["event"], "renewed", "{event}");
    }
    assert_eq!(
        held_with(&cluster, &key("batch"), &first.token).await,
        MASTERS
    );
    drop(hold);
    common::wait_for("the count lowered", Duration::from_secs(5), || async {
        client
            .acquire("batch", &AcquireOptions::new().reenter(&first.token))
            .await
            .is_ok_and(|again| again.hold_count == Some(2))
    })
    .await;
    assert_eq!(
        held_with(&cluster, &key("batch"), &first.token).await,
        MASTERS,
        "the hold's close did not release the lock"
    );
    // Two releases undo the acquire and the re-entry above.
    for expected in [Released::StillHeld(1), Released::Released] {
        assert_eq!(
            client.release_counted("batch", &first.token).await.unwrap(),
            expected
        );
    }
    let second = client
        .acquire("batch", &AcquireOptions::new().ttl(Duration::from_secs(20)))
        .await
        .unwrap();
    let mut hold = agent
        .hold("batch", json!({"token": second.token, "ttl_ms": 3000}))
        .await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    assert_eq!(
        hold.next(Duration::from_secs(5)).await.unwrap()["hold_count"],
        2
    );
    assert_eq!(
        client
            .release_counted("batch", &second.token)
            .await
            .unwrap(),
        Released::StillHeld(1),
        "the hold still counts"
    );
    drop(hold);
    common::wait_for(
        "the last count released",
        Duration::from_secs(5),
        || async { held_with(&cluster, &key("batch"), &second.token).await == 0 },
    )
    .await;
    let refused = agent
        .hold("batch", json!({"token": "t", "on_disconnect": "expire"}))
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
}

/// Another process with the token is refused (403 `forbidden`), and the
/// lock keeps its count: one release releases it.
#[tokio::test]
async fn only_the_acquiring_process_may_reenter() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let grant = agent
        .client
        .acquire("jobs", &AcquireOptions::new().ttl(Duration::from_secs(20)))
        .await
        .unwrap();
    let (socket, body) = (agent.socket.clone(), json!({"token": grant.token}));
    // Off the runtime: the agent answers on it.
    let (status, answer) =
        tokio::task::spawn_blocking(move || acquire_from_another_process(&socket, "jobs", &body))
            .await
            .unwrap();
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
    assert_eq!(
        agent
            .client
            .release_counted("jobs", &grant.token)
            .await
            .unwrap(),
        Released::Released,
        "the refused re-entry counted nothing"
    );
}

/// A wrong token, a hold's token and another agent's grant are not
/// re-entered (409 `not_reentrant`); a fence the first grant did not mint
/// and another owner label are refused (400) before any master is asked.
#[tokio::test]
async fn what_cannot_be_reentered_is_refused_with_its_code() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let other = TestAgent::start(&cluster, "").await;
    let client = &agent.client;
    let grant = client
        .acquire(
            "ledger",
            &AcquireOptions::new()
                .ttl(Duration::from_secs(20))
                .owner("billing"),
        )
        .await
        .unwrap();

    let wrong = format!("{}x", grant.token);
    assert_eq!(
        code(
            client
                .acquire("ledger", &AcquireOptions::new().reenter(wrong))
                .await
        ),
        Some(ErrorCode::NotReentrant)
    );
    assert_eq!(
        code(
            other
                .client
                .acquire("ledger", &AcquireOptions::new().reenter(&grant.token))
                .await
        ),
        Some(ErrorCode::NotReentrant),
        "another agent's grant"
    );
    assert_eq!(
        code(
            client
                .acquire(
                    "ledger",
                    &AcquireOptions::new().reenter(&grant.token).fence()
                )
                .await
        ),
        Some(ErrorCode::InvalidRequest),
        "a fence the first grant has not"
    );
    assert_eq!(
        code(
            client
                .acquire(
                    "ledger",
                    &AcquireOptions::new().reenter(&grant.token).owner("someone")
                )
                .await
        ),
        Some(ErrorCode::InvalidRequest),
        "another owner label"
    );
    let same_owner = client
        .acquire(
            "ledger",
            &AcquireOptions::new().reenter(&grant.token).owner("billing"),
        )
        .await
        .unwrap();
    assert_eq!(
        same_owner.hold_count,
        Some(2),
        "the same owner label is fine"
    );

    let mut hold = agent.hold("rota", json!({"ttl_ms": 20000})).await;
    let acquired = hold.next(Duration::from_secs(10)).await.expect("acquired");
    let token = acquired["token"].as_str().expect("a token").to_string();
    let (status, answer) = agent
        .post("/v1/locks/rota/acquire", json!({"token": token}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"]["code"], "not_reentrant", "a hold's grant");
}
