//! Reentrant locks on real masters: a lock acquired again by the process
//! that holds it, with its token, is held until released as often, and
//! stays one key with one token on the masters; what may not re-enter (a
//! wrong or spent token, a hold's, another process, another agent) is
//! refused with its own code. A re-entry never shortens the validity its
//! first holder was told: whatever TTL it asks for, and however its inner
//! holds end, no other agent is granted the lock before then.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, Switch, TestAgent};
use hyper::StatusCode;
use redlock_client::{AcquireOptions, Error, ErrorCode, HoldOptions, Released};
use redlock_testkit::switches::{REENTRY_MAY_SHORTEN, UNSETTLED_HOLD_CLOSE};
use serde_json::json;

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

/// Rounds of: a fresh lock acquired, a hold that re-enters it and is
/// closed, then at once a re-entry (count 2, not 3: the close counted) and
/// two releases, the second releasing it on the masters. The first answer
/// that did not count the close, if any; under the control switch the
/// holds' tasks alone settle their closes, 200 ms late.
async fn calls_right_after_closes(unsettled: bool) -> Option<String> {
    const ROUNDS: usize = 40;
    let cluster = Cluster::start(MASTERS);
    let agent = {
        let _switch = unsettled.then(|| Switch::set(UNSETTLED_HOLD_CLOSE, "1"));
        TestAgent::start(&cluster, "").await
    };
    let client = &agent.client;
    for round in 0..ROUNDS {
        let resource = format!("settled-{round}");
        let first = client
            .acquire(
                &resource,
                &AcquireOptions::new().ttl(Duration::from_secs(20)),
            )
            .await
            .unwrap();
        let mut hold = agent
            .hold(&resource, json!({"token": first.token, "ttl_ms": 20000}))
            .await;
        assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
        let acquired = hold.next(Duration::from_secs(5)).await.unwrap();
        assert_eq!(acquired["hold_count"], 2, "round {round}: {acquired}");
        drop(hold);
        let again = client
            .acquire(&resource, &AcquireOptions::new().reenter(&first.token))
            .await
            .unwrap();
        if again.hold_count != Some(2) {
            return Some(format!(
                "round {round}: re-entered with count {:?}",
                again.hold_count
            ));
        }
        for expected in [Released::StillHeld(1), Released::Released] {
            let released = client
                .release_counted(&resource, &first.token)
                .await
                .unwrap();
            if released != expected {
                return Some(format!("round {round}: {released:?}, not {expected:?}"));
            }
        }
        // Released once a quorum said so; the last master's delete may
        // still be on its way.
        common::wait_for(
            "released on every master",
            Duration::from_secs(5),
            || async { held_with(&cluster, &key(&resource), &first.token).await == 0 },
        )
        .await;
    }
    None
}

/// A call right after a re-entering hold's close counts the close: the
/// client closed the connection before sending it, and the agent settles
/// the hold's end before answering (`lock::holds::Closing`), however late
/// the hold's own task hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_right_after_a_reentering_hold_closes_counts_the_close() {
    assert_eq!(calls_right_after_closes(false).await, None);
}

/// Control: with the holds' tasks alone settling their closes, late, a
/// call right after a close is answered as if the hold were still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_call_right_after_a_reentering_hold_closes_misses_the_close() {
    let missed = calls_right_after_closes(true).await;
    assert!(missed.is_some(), "the control switch was not seen");
}

/// A guard that re-enters a lock releases by closing: one release, not
/// two (a release through the API as well would release the lock its first
/// acquire still holds). A guard dropped counts the same, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentering_guard_releases_once() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let client = &agent.client;
    let ttl = Duration::from_secs(20);
    let first = client
        .acquire("guarded", &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let reenter = HoldOptions::new().ttl(ttl).reenter(&first.token);
    let guard = client.lock("guarded", &reenter).await.unwrap();
    assert!(guard.release().await.unwrap());
    let guard = client.lock("guarded", &reenter).await.unwrap();
    drop(guard);
    assert_eq!(
        client
            .release_counted("guarded", &first.token)
            .await
            .unwrap(),
        Released::Released
    );
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
    let (status, answer) = tokio::task::spawn_blocking(move || {
        common::acquire_from_another_process(&socket, "jobs", &body)
    })
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

/// Short TTLs for the re-entry shortening tests: a node timeout that lets
/// a 200 ms TTL through, and a default TTL far below the first grants'.
const SHORTENING: &str =
    "lock:\n  node_timeout: 100ms\n  default_ttl: 1s\n  retry_delay: 20ms\n  retry_jitter: 20ms\n";

/// The outer holder's lock, as it was told: acquired by `agent` with
/// `ttl`, valid until `until` (counted from before the call, so never
/// later than what the agent meant).
struct Outer {
    token: String,
    until: Instant,
}

/// Starts the agent that re-enters and the other agent, both over
/// `cluster`; under the control switch the re-entering agent may shorten.
async fn two_agents(cluster: &Cluster, may_shorten: bool) -> (TestAgent, TestAgent) {
    let agent = {
        let _switch = may_shorten.then(|| Switch::set(REENTRY_MAY_SHORTEN, "1"));
        TestAgent::start(cluster, SHORTENING).await
    };
    let other = TestAgent::start(cluster, SHORTENING).await;
    (agent, other)
}

async fn acquire_outer(agent: &TestAgent, resource: &str, ttl: Duration) -> Outer {
    let asked = Instant::now();
    let grant = agent
        .client
        .acquire(resource, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    assert!(grant.validity > Duration::from_secs(2), "{grant:?}");
    Outer {
        token: grant.token,
        until: asked + grant.validity,
    }
}

/// Whether `other` is granted `resource` before the outer holder's told
/// validity ends (less a margin for the test's own delays): tries again
/// and again until then. A grant is released at once.
async fn granted_to_other_within(other: &TestAgent, resource: &str, outer: &Outer) -> bool {
    let last_try = outer.until - Duration::from_millis(150);
    while Instant::now() < last_try {
        let asked = other
            .client
            .acquire(
                resource,
                &AcquireOptions::new().ttl(Duration::from_millis(500)),
            )
            .await;
        // Refused: taken, or a master slow on a busy machine.
        if let Ok(grant) = asked {
            // A grant that came after the outer validity cut nothing.
            let within = Instant::now() < outer.until;
            let _ = other.client.release(resource, &grant.token).await;
            return within;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    false
}

/// Re-entered with a 200 ms TTL and released once: the outer holder's
/// 4 s validity is not cut, and no other agent is granted the lock while
/// it lasts. With `may_shorten` (the control), the other agent is.
async fn reentry_with_a_short_ttl(may_shorten: bool) -> bool {
    let cluster = Cluster::start(MASTERS);
    let (agent, other) = two_agents(&cluster, may_shorten).await;
    let outer = acquire_outer(&agent, "re2", Duration::from_secs(4)).await;
    let inner = agent
        .client
        .acquire(
            "re2",
            &AcquireOptions::new()
                .ttl(Duration::from_millis(200))
                .reenter(&outer.token),
        )
        .await
        .unwrap();
    assert_eq!(inner.hold_count, Some(2));
    assert_eq!(
        agent
            .client
            .release_counted("re2", &outer.token)
            .await
            .unwrap(),
        Released::StillHeld(1)
    );
    granted_to_other_within(&other, "re2", &outer).await
}

/// A re-entry with a 200 ms TTL, released once, leaves the outer holder
/// its 4 s: another agent is refused while the outer validity lasts.
#[tokio::test]
async fn a_short_reentry_does_not_cut_the_outer_validity() {
    assert!(!reentry_with_a_short_ttl(false).await);
}

/// Control: with the test switch, the same short re-entry cuts the outer
/// holder's validity and another agent is granted the lock within it.
#[tokio::test]
async fn control_a_short_reentry_cuts_the_outer_validity() {
    assert!(reentry_with_a_short_ttl(true).await);
}

/// Re-entered with no TTL (the default, 1 s here, far below the outer
/// grant's 4 s) and released once: another agent is granted the lock
/// within the outer validity only with `may_shorten` (the control).
async fn reentry_with_the_default_ttl(may_shorten: bool) -> bool {
    let cluster = Cluster::start(MASTERS);
    let (agent, other) = two_agents(&cluster, may_shorten).await;
    let outer = acquire_outer(&agent, "re3", Duration::from_secs(4)).await;
    let inner = agent
        .client
        .acquire("re3", &AcquireOptions::new().reenter(&outer.token))
        .await
        .unwrap();
    assert_eq!(inner.hold_count, Some(2));
    assert!(
        may_shorten || inner.ttl >= Duration::from_secs(4),
        "the re-entry is told the TTL it set: {inner:?}"
    );
    assert_eq!(
        agent
            .client
            .release_counted("re3", &outer.token)
            .await
            .unwrap(),
        Released::StillHeld(1)
    );
    granted_to_other_within(&other, "re3", &outer).await
}

/// A re-entry that leaves out `ttl_ms` keeps the outer grant's TTL, not
/// the default: another agent is refused while the outer validity lasts.
#[tokio::test]
async fn a_reentry_without_a_ttl_does_not_cut_the_outer_validity() {
    assert!(!reentry_with_the_default_ttl(false).await);
}

/// Control: with the test switch, a re-entry without a TTL sets the
/// default, and another agent is granted the lock within the outer
/// validity.
#[tokio::test]
async fn control_a_reentry_without_a_ttl_cuts_the_outer_validity() {
    assert!(reentry_with_the_default_ttl(true).await);
}

/// A hold re-enters with a 300 ms TTL and closes after 0.5 s: the outer
/// holder's 4 s validity still holds, and another agent is granted the
/// lock within it only with `may_shorten` (the control).
async fn reentering_hold_closed_early(may_shorten: bool) -> bool {
    let cluster = Cluster::start(MASTERS);
    let (agent, other) = two_agents(&cluster, may_shorten).await;
    let outer = acquire_outer(&agent, "re4", Duration::from_secs(4)).await;
    let mut hold = agent
        .hold("re4", json!({"token": outer.token, "ttl_ms": 300}))
        .await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    let acquired = hold.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(acquired["hold_count"], 2, "{acquired}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(hold);
    granted_to_other_within(&other, "re4", &outer).await
}

/// A re-entering hold closed after 0.5 s leaves the outer validity as it
/// was: another agent is refused while it lasts.
#[tokio::test]
async fn a_closed_reentering_hold_does_not_cut_the_outer_validity() {
    assert!(!reentering_hold_closed_early(false).await);
}

/// Control: with the test switch, the hold renewed at its own 300 ms TTL
/// and its close leaves the key to expire within the outer validity.
#[tokio::test]
async fn control_a_closed_reentering_hold_cuts_the_outer_validity() {
    assert!(reentering_hold_closed_early(true).await);
}
