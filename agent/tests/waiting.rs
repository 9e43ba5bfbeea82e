//! A waiter does not poll the masters while another holds its lock: the
//! vote that finds the lock taken learns how long the lock's key has left
//! on each master, and the waiter votes again only once the lock can have
//! expired on a quorum, or when a release wakes it (see `lock::acquire`).
//! On real masters, through two agents: A holds a lock, B waits for it,
//! and the `SET` calls master 0 serves while B waits are counted (each of
//! B's votes is one, and one more for its waiting flag). The control run
//! (`REDLOCK_TEST_POLL_WAITERS`) votes every retry delay as before and
//! finds many. Whichever way the lock ends, expiry or release, B gets it
//! then, not at the end of a long wait: margins of seconds, not races.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, Switch, TestAgent};
use hyper::StatusCode;
use serde_json::json;

/// A retry delay of 50 to 70 ms: polling, a 3 s wait is about 45 rounds.
const CONFIG: &str = "lock:\n  node_timeout: 200ms\n  retry_delay: 50ms\n  retry_jitter: 20ms\n";

/// `SET` calls master 0 has served.
async fn set_calls(cluster: &Cluster) -> u64 {
    let calls = cluster.command_calls(0).await;
    calls.get("set").copied().unwrap_or(0)
}

/// A holds `resource` for `hold_ttl_ms` through its agent; B asks for it
/// through another, waiting up to 8 s with `wait_ttl_ms`; A releases it
/// after `release_after` when given. Returns B's answer, how long B
/// waited, and the `SET` calls master 0 served meanwhile.
async fn wait_behind(
    resource: &str,
    hold_ttl_ms: u64,
    wait_ttl_ms: u64,
    release_after: Option<Duration>,
    poll: bool,
) -> ((StatusCode, serde_json::Value), Duration, u64) {
    let cluster = Cluster::start(3);
    let switch = poll.then(|| Switch::set(redlock_testkit::switches::POLL_WAITERS, "1"));
    let a = TestAgent::start(&cluster, CONFIG).await;
    let b = TestAgent::start(&cluster, CONFIG).await;
    drop(switch);
    a.wait_usable(3).await;
    b.wait_usable(3).await;
    let token = a.acquire_ok(resource, json!({"ttl_ms": hold_ttl_ms})).await;
    let before = set_calls(&cluster).await;
    let started = Instant::now();
    let path = format!("/v1/locks/{resource}/acquire");
    let waiter = b.post(&path, json!({"ttl_ms": wait_ttl_ms, "wait_ms": 8000}));
    let releaser = async {
        if let Some(after) = release_after {
            tokio::time::sleep(after).await;
            let release = format!("/v1/locks/{resource}/release");
            let (status, body) = a.post(&release, json!({"token": token})).await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    };
    let (answer, ()) = tokio::join!(waiter, releaser);
    let waited = started.elapsed();
    // The second read counts the first.
    let sets = set_calls(&cluster).await - before - 1;
    eprintln!("{resource}: granted after {waited:?}, {sets} SET calls on master 0");
    (answer, waited, sets)
}

/// A lock that expires: B votes a few times in 3 s, not every retry
/// delay, and is granted once A's TTL has run out.
#[tokio::test]
async fn a_waiter_votes_again_when_the_lock_can_have_expired() {
    let ((status, body), waited, sets) = wait_behind("expires", 3000, 10_000, None, false).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        waited >= Duration::from_millis(2500) && waited < Duration::from_millis(6000),
        "granted after {waited:?}, A's TTL was 3 s"
    );
    assert!(
        sets <= 12,
        "{sets} SET calls on one master while B waited 3 s (polling: about 90)"
    );
}

/// The control: with the switch, B votes every retry delay while it
/// waits, the masters' word on the lock's time left unused.
#[tokio::test]
async fn control_a_waiter_polls_without_the_time_left() {
    let ((status, body), waited, sets) = wait_behind("polls", 3000, 10_000, None, true).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(waited >= Duration::from_millis(2500), "{waited:?}");
    assert!(
        sets >= 24,
        "{sets} SET calls on one master while B waited 3 s: the control must poll"
    );
}

/// A release wakes B at once, long before the lock would have expired,
/// though B's waiting flag (set for B's 1 s TTL) would have lapsed twice
/// over by then had B waited for the expiry: B votes again at least every
/// half TTL to keep it, so the release still announces itself.
#[tokio::test]
async fn a_release_wakes_a_waiter_whose_flag_outlived_its_ttl() {
    let ((status, body), waited, sets) = wait_behind(
        "released",
        8000,
        1000,
        Some(Duration::from_millis(2500)),
        false,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        waited >= Duration::from_millis(2500) && waited < Duration::from_millis(5500),
        "granted after {waited:?}: released at 2.5 s, A's TTL was 8 s"
    );
    assert!(
        sets <= 30,
        "{sets} SET calls on one master while B waited 2.5 s"
    );
}
