//! Loss told at once, on real masters: a hold hears `lost` within one
//! health probe interval (twice it, plus a second of margin for a busy
//! machine) of an operator's force release, through its own agent or
//! through another, and of a majority of its masters losing their keys
//! (`FLUSHALL`); its TTL is 30 s, so its next renewal, which used to be
//! where it heard of the loss, comes 10 s after the grant. A minority
//! flushed is no loss: the hold goes on. Each has a control run with the
//! notices off (`REDLOCK_TEST_NO_LOSS_NOTICE=1`), in which the same hold
//! hears nothing within the bound: the assertion of the test above it
//! fails without the notice.

mod common;

use std::time::{Duration, Instant};

use common::{wait_for, Cluster, Hold, Switch, TestAgent};
use hyper::StatusCode;
use redlock_testkit::switches::NO_LOSS_NOTICE;
use serde_json::json;

/// The health probe's interval in these tests.
const INTERVAL: Duration = Duration::from_millis(200);

/// A 30 s TTL: renewals every 10 s, so a notice within [`bound`] cannot
/// be the renewal's.
const CONFIG: &str = "lock:\n  default_ttl: 30s\n  max_ttl: 30s\n  node_timeout: 200ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 200ms\n";

const TTL_MS: u64 = 30_000;

/// The default `lock.key_prefix`'s force-release channel.
const CHANNEL: &str = "redlock:released: force-release";

/// Within one probe interval, with room for a machine at twice its cores
/// in load: twice the interval and a second.
fn bound() -> Duration {
    INTERVAL * 2 + Duration::from_secs(1)
}

/// An agent over `cluster`, with the loss notices on or off.
async fn agent(cluster: &Cluster, notices: bool) -> TestAgent {
    let _switch = (!notices).then(|| Switch::set(NO_LOSS_NOTICE, "1"));
    TestAgent::start(cluster, CONFIG).await
}

/// Waits until `agents` listeners are subscribed to the fleet's
/// force-release channel on every master (an agent subscribes once it has
/// work: see `lock::idle`).
async fn wait_subscribed(cluster: &Cluster, agents: u64) {
    for i in 0..cluster.masters.len() {
        wait_for(
            "the agents' subscriptions to the force-release channel",
            Duration::from_secs(10),
            || async move {
                let mut conn = cluster.redis(i).await;
                let (_, count): (String, u64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(CHANNEL)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                count >= agents
            },
        )
        .await;
    }
}

/// A hold of `resource` on `agent`, its `acquired` read.
async fn hold(agent: &TestAgent, resource: &str) -> Hold {
    let mut hold = agent
        .hold(resource, json!({"ttl_ms": TTL_MS, "owner": "job"}))
        .await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    let acquired = hold.next(Duration::from_secs(5)).await.expect("acquired");
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    hold
}

/// The reason of the hold's `lost` and when it came after `since`, if it
/// came within `limit` of `since`. Any other event meanwhile fails the
/// test: with a 30 s TTL no renewal is due.
async fn lost_within(
    hold: &mut Hold,
    since: Instant,
    limit: Duration,
) -> Option<(String, Duration)> {
    let left = (since + limit).saturating_duration_since(Instant::now());
    let event = hold.next(left).await?;
    let after = since.elapsed();
    assert_eq!(event["event"], "lost", "{event}");
    let reason = event["reason"].as_str().unwrap().to_string();
    eprintln!("lost ({reason}) {after:?} after the loss");
    (after <= limit).then_some((reason, after))
}

/// A hold on one agent over three masters, and an operator's force
/// release of its lock on the admin socket of that agent or of a second
/// one: when the hold hears `lost`, within the bound.
async fn force_release(through_another: bool, notices: bool) -> Option<(String, Duration)> {
    let cluster = Cluster::start(3);
    let holder = agent(&cluster, notices).await;
    let other = if through_another {
        Some(TestAgent::start(&cluster, CONFIG).await)
    } else {
        None
    };
    let mut hold = hold(&holder, "nightly").await;
    // The holder's agent started idle; its hold had it subscribe.
    wait_subscribed(&cluster, 1).await;

    let operator = other.as_ref().unwrap_or(&holder);
    let since = Instant::now();
    let forced = operator
        .admin_client
        .force_release("nightly")
        .await
        .expect("force release");
    assert_eq!(forced.deleted, 3, "{forced:?}");
    lost_within(&mut hold, since, bound()).await
}

/// An operator's force release on the holder's own agent: the hold hears
/// `lost` (`force_released`) within one probe interval.
#[tokio::test]
async fn a_force_release_on_the_same_agent_is_heard_within_one_probe_interval() {
    let heard = force_release(false, true).await;
    let (reason, after) = heard.expect("no loss notice within the bound");
    assert_eq!(reason, "force_released");
    assert!(after < bound(), "{after:?}");
}

/// An operator's force release on a second agent over the same masters:
/// the holder's agent hears it on the fleet's channel, and the hold says
/// `lost` (`force_released`) within one probe interval.
#[tokio::test]
async fn a_force_release_through_another_agent_is_heard_within_one_probe_interval() {
    let heard = force_release(true, true).await;
    let (reason, after) = heard.expect("no loss notice within the bound");
    assert_eq!(reason, "force_released");
    assert!(after < bound(), "{after:?}");
}

/// The control: the same force releases with the notices off
/// (`REDLOCK_TEST_NO_LOSS_NOTICE=1`) are not heard within the bound (the
/// hold would hear at its renewal, 10 s after the grant): the two tests
/// above can fail.
#[tokio::test]
async fn the_control_without_notices_hears_no_force_release_within_the_bound() {
    assert_eq!(
        force_release(false, false).await,
        None,
        "heard on the same agent with the notices off: the test cannot tell"
    );
    assert_eq!(
        force_release(true, false).await,
        None,
        "heard through another agent with the notices off: the test cannot tell"
    );
}

/// `FLUSHALL` on masters `which` of `cluster`.
async fn flush(cluster: &Cluster, which: std::ops::Range<usize>) {
    for i in which {
        let mut conn = cluster.redis(i).await;
        let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    }
}

/// A hold over five masters; one is flushed (the hold must go on: four
/// still hold it), then two more (three of five lost: a quorum no longer
/// holds it): when the hold hears `lost` after the third flush, within
/// the bound. Panics on a `lost` after the first.
async fn majority_flushed(notices: bool) -> Option<(String, Duration)> {
    let cluster = Cluster::start(5);
    let holder = agent(&cluster, notices).await;
    let mut hold = hold(&holder, "report").await;

    flush(&cluster, 0..1).await;
    wait_for(
        "the flushed master's quarantine",
        Duration::from_secs(10),
        || async { common::node(&holder.nodes().await, "r1")["state"] == "quarantined" },
    )
    .await;
    let since = Instant::now();
    assert_eq!(
        lost_within(&mut hold, since, bound()).await,
        None,
        "a minority flushed: four of five masters still hold the lock"
    );

    let since = Instant::now();
    flush(&cluster, 1..3).await;
    lost_within(&mut hold, since, bound()).await
}

/// `FLUSHALL` on three of five masters under a hold: each is quarantined
/// at its next probe (the marker is gone), and the hold hears `lost`
/// (`node_lost`) within one probe interval of the third, long before its
/// renewal; the first alone (a minority) does not end it.
#[tokio::test]
async fn a_majority_flushed_is_heard_before_the_renewal() {
    let (reason, after) = majority_flushed(true)
        .await
        .expect("no loss notice within the bound");
    assert_eq!(reason, "node_lost");
    assert!(after < bound(), "{after:?}");
}

/// The control: the same flushes with the notices off are not heard
/// within the bound: the test above can fail.
#[tokio::test]
async fn the_control_without_notices_hears_no_flush_within_the_bound() {
    assert_eq!(
        majority_flushed(false).await,
        None,
        "heard with the notices off: the test cannot tell"
    );
}
