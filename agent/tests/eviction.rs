//! Masters that evict keys (`maxmemory` with a `volatile-*` policy, as on a
//! Redis shared with a cache), on real masters: a lock key evicted from a
//! majority while its holder still believes in it is never granted to
//! another agent. Lock keys have a TTL and the incarnation marker has none,
//! so these policies drop locks and keep the marker; only the votes'
//! eviction check (the master's `evicted_keys` against the count the marker
//! was written with) sees it, atomically with the vote.
//!
//! Each scenario runs with the check on and, as a control, off
//! (`REDLOCK_TEST_NO_EVICTION_CHECK=1`): the control must find the double
//! grant, or the test proves nothing. The agents probe only once a minute,
//! so no probe between the eviction and the second agent's vote can stand
//! in for the check.

mod common;

use std::time::Duration;

use common::{node, wait_for, Cluster, Switch, TestAgent};
use hyper::StatusCode;
use serde_json::{json, Value};

/// Long TTLs (the first lock must still be valid when the second agent
/// asks) and a probe once a minute.
const SETTINGS: &str =
    "lock:\n  default_ttl: 30s\n  max_ttl: 30s\n  node_timeout: 500ms\nhealth:\n  interval: 60s\n";

const RESOURCE: &str = "ev";
const LOCK_KEY: &str = "redlock:ev";

/// How the masters come to evict.
#[derive(Clone, Copy, Debug)]
enum Policy {
    /// `maxmemory` and `volatile-ttl` set before the agents start (they
    /// warn about it).
    Configured,
    /// `noeviction` when the agents start, `volatile-lru` set at run time
    /// after the first lock was granted.
    ChangedAtRunTime,
}

async fn config_set(cluster: &Cluster, i: usize, name: &str, value: &str) {
    let mut conn = cluster.redis(i).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(&mut conn)
        .await
        .unwrap();
}

async fn info_field(cluster: &Cluster, i: usize, section: &str, field: &str) -> u64 {
    let mut conn = cluster.redis(i).await;
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in INFO {section}"))
}

/// A cache's writes on master `i`: keys with a TTL, 16 KiB each, under a
/// `maxmemory` just above what the master uses now, until the lock key is
/// gone (evicted). Panics if it never goes.
async fn fill_until_evicted(cluster: &Cluster, i: usize) {
    let used = info_field(cluster, i, "memory", "used_memory").await;
    config_set(
        cluster,
        i,
        "maxmemory",
        &(used + 4 * 1024 * 1024).to_string(),
    )
    .await;
    let mut conn = cluster.redis(i).await;
    let value = "x".repeat(16 * 1024);
    for n in 0..20_000u32 {
        let _: () = redis::cmd("SET")
            .arg(format!("cache:{n}"))
            .arg(&value)
            .arg("PX")
            .arg(3_600_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        if n % 16 == 0 && cluster.get(i, LOCK_KEY).await.is_none() {
            assert!(
                info_field(cluster, i, "stats", "evicted_keys").await > 0,
                "r{}: the lock key went without an eviction",
                i + 1
            );
            return;
        }
    }
    panic!("r{}: the lock key was never evicted", i + 1);
}

/// A holds the lock; r1 to r3 evict it; then, with `late_agent`, C (an
/// agent started after the eviction, which meets the evicting masters at
/// its first probe) asks for it, and B (started before, watching) asks.
/// Returns their answers, A's agent and the masters.
async fn evicted_majority(
    policy: Policy,
    late_agent: bool,
    eviction_check: bool,
) -> (Vec<(StatusCode, Value)>, TestAgent, Cluster) {
    let cluster = Cluster::start(5);
    if let Policy::Configured = policy {
        for i in 0..3 {
            config_set(&cluster, i, "maxmemory", "1gb").await;
            config_set(&cluster, i, "maxmemory-policy", "volatile-ttl").await;
        }
    }
    let switch =
        (!eviction_check).then(|| Switch::set(redlock_testkit::switches::NO_EVICTION_CHECK, "1"));
    let a = TestAgent::start(&cluster, SETTINGS).await;
    let b = TestAgent::start(&cluster, SETTINGS).await;
    a.wait_usable(5).await;
    b.wait_usable(5).await;
    // B's first request wakes its probes (an agent starts idle): one now,
    // so that no probe races B's vote below, whose own check is the one
    // under test (its next probe is a minute away).
    let warm = b.acquire_ok("warm-up", json!({"ttl_ms": 1000})).await;
    let (status, body) = b
        .post("/v1/locks/warm-up/release", json!({"token": warm}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    if let Policy::Configured = policy {
        let nodes = a.nodes().await;
        let warnings = node(&nodes, "r1")["warnings"].to_string();
        assert!(
            warnings.contains("may evict lock keys"),
            "r1 is named as a master that may evict lock keys: {warnings}"
        );
    }

    let token = a
        .acquire_ok(RESOURCE, json!({"ttl_ms": 30000, "owner": "A"}))
        .await;
    for i in 0..5 {
        assert_eq!(
            cluster.get(i, LOCK_KEY).await.as_deref(),
            Some(token.as_str())
        );
    }
    if let Policy::ChangedAtRunTime = policy {
        for i in 0..3 {
            config_set(&cluster, i, "maxmemory-policy", "volatile-lru").await;
        }
    }
    for i in 0..3 {
        fill_until_evicted(&cluster, i).await;
    }
    // A's lock is still valid (30 s) and still on r4 and r5.
    for i in 3..5 {
        assert_eq!(
            cluster.get(i, LOCK_KEY).await.as_deref(),
            Some(token.as_str())
        );
    }

    let mut answers = Vec::new();
    if late_agent {
        let c = TestAgent::start(&cluster, SETTINGS).await;
        answers.push(
            c.post(
                &format!("/v1/locks/{RESOURCE}/acquire"),
                json!({"ttl_ms": 30000, "owner": "C"}),
            )
            .await,
        );
        c.stop().await;
    }
    answers.push(
        b.post(
            &format!("/v1/locks/{RESOURCE}/acquire"),
            json!({"ttl_ms": 30000, "owner": "B"}),
        )
        .await,
    );
    drop(switch);
    b.stop().await;
    (answers, a, cluster)
}

fn assert_never_granted(answers: &[(StatusCode, Value)]) {
    for (status, body) in answers {
        assert_ne!(
            *status,
            StatusCode::OK,
            "a second holder while the first lock is valid: {body}"
        );
    }
}

/// The scenario: masters configured to evict (`volatile-ttl`), a
/// cache fills three of five, the lock key goes from those three while A
/// holds it. Neither an agent started after the eviction (C, whose first
/// probe meets it) nor one that watched (B) is granted the lock; the
/// markers are gone, so every agent sees the loss, A's agent included.
#[tokio::test]
async fn an_evicted_lock_is_never_granted_twice() {
    let (answers, a, cluster) = evicted_majority(Policy::Configured, true, true).await;
    assert_never_granted(&answers);
    // The vote deleted the marker on every master that evicted: every
    // agent, including one that was not watching, sees the loss.
    for i in 0..3 {
        assert_eq!(
            cluster.get(i, "redlock: incarnation").await,
            None,
            "r{}",
            i + 1
        );
    }
    let (status, body) = a
        .post(&format!("/v1/locks/{RESOURCE}-other/acquire"), json!({}))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    wait_for("A to quarantine r1", Duration::from_secs(30), || async {
        node(&a.nodes().await, "r1")["state"] == "quarantined"
    })
    .await;
    a.stop().await;
}

/// The policy changed at run time (`CONFIG SET maxmemory-policy
/// volatile-lru` after the grant), seen by nothing but B's vote: refused,
/// and the vote deleted the markers so every agent sees the loss.
#[tokio::test]
async fn an_eviction_policy_set_at_run_time_never_grants_twice() {
    let (answers, a, cluster) = evicted_majority(Policy::ChangedAtRunTime, false, true).await;
    assert_never_granted(&answers);
    for i in 0..3 {
        assert_eq!(
            cluster.get(i, "redlock: incarnation").await,
            None,
            "r{}",
            i + 1
        );
        // B's vote found the key free, set it, saw the eviction and
        // deleted it again: nothing of a vote that cannot count stays.
        assert_eq!(cluster.get(i, LOCK_KEY).await, None, "r{}", i + 1);
    }
    a.stop().await;
}

/// The eviction check costs a master an `INFO stats` only for a vote that
/// would count: votes that find the lock taken, as under contention, ask
/// for none, while each vote that finds a lock free does (which shows
/// the count of calls moves at all). Probes are a minute apart.
#[tokio::test]
async fn only_a_vote_that_would_count_reads_the_eviction_count() {
    let cluster = Cluster::start(3);
    let a = TestAgent::start(&cluster, SETTINGS).await;
    let b = TestAgent::start(&cluster, SETTINGS).await;
    a.wait_usable(3).await;
    b.wait_usable(3).await;
    a.acquire_ok(RESOURCE, json!({"ttl_ms": 30000})).await;
    // B's first request wakes its probes: one now, then a minute apart.
    let warm = b.acquire_ok("warm-up", json!({"ttl_ms": 1000})).await;
    let (status, body) = b
        .post("/v1/locks/warm-up/release", json!({"token": warm}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let before = cluster.command_calls(0).await["info"];
    for _ in 0..20 {
        let (status, body) = b
            .post(&format!("/v1/locks/{RESOURCE}/acquire"), json!({}))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
    }
    // The read of `before` is itself one INFO call; a probe of each agent
    // may fall in the window (B's, woken by its warm-up), never one per
    // vote (20, as when every vote checked).
    let taken = cluster.command_calls(0).await["info"] - before - 1;
    assert!(
        taken <= 2,
        "20 votes on a taken lock read the count {taken} times"
    );

    let before = cluster.command_calls(0).await["info"];
    for n in 0..5 {
        b.acquire_ok(&format!("free-{n}"), json!({})).await;
    }
    let free = cluster.command_calls(0).await["info"] - before - 1;
    assert!(
        free >= 5,
        "5 votes that find their locks free read it {free} times"
    );
    a.stop().await;
    b.stop().await;
}

/// The control of the probe's check: without the eviction check, C, an
/// agent started after the eviction, trusts the markers and is granted the
/// lock while A's is valid. Proves the first test can fail.
#[tokio::test]
async fn control_an_agent_started_after_the_eviction_grants_twice() {
    let (answers, a, _cluster) = evicted_majority(Policy::Configured, true, false).await;
    assert_eq!(
        answers[0].0,
        StatusCode::OK,
        "the control must find the double grant: {answers:?}"
    );
    a.stop().await;
}

/// The control of the votes' check: without it, B's vote on the masters
/// that evicted counts, and B is granted the lock while A's is valid.
/// Proves the second test can fail.
#[tokio::test]
async fn control_a_vote_after_the_eviction_grants_twice() {
    let (answers, a, _cluster) = evicted_majority(Policy::ChangedAtRunTime, false, false).await;
    assert_eq!(
        answers[0].0,
        StatusCode::OK,
        "the control must find the double grant: {answers:?}"
    );
    a.stop().await;
}

/// One vote of the batch script on master 0, whose marker says it had
/// evicted 5 keys when written (this master has evicted none, so the count
/// has moved); with `oom`, under a `maxmemory` of 1 byte (and
/// `noeviction`), so the master refuses every write: the vote's answer line.
async fn vote_after_eviction(cluster: &Cluster, oom: bool) -> String {
    let mut conn = cluster.redis(0).await;
    let _: () = redis::cmd("SET")
        .arg("redlock: incarnation")
        .arg("m e=5")
        .query_async(&mut conn)
        .await
        .unwrap();
    if oom {
        config_set(cluster, 0, "maxmemory", "1").await;
    }
    let answer: String = redlock_agent::node::conn::BATCH
        .key("redlock: incarnation")
        .key("redlock: fence")
        .key(LOCK_KEY)
        .key(LOCK_KEY)
        .arg("1")
        .arg("1")
        .arg("1")
        .arg("v")
        .arg("token-b")
        .arg(30_000)
        .arg("0")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    if oom {
        config_set(cluster, 0, "maxmemory", "0").await;
    }
    answer.lines().last().unwrap_or_default().to_string()
}

/// The script itself, on a real master: a vote that finds its lock free
/// on a master that evicted since its marker was written answers -3 and
/// leaves neither its key nor the marker. So does one whose write the
/// master refuses for memory (`maxmemory` reached under `noeviction`, as
/// a cache leaves a master): it is checked before its OOM is answered,
/// so the loss is seen at once, not at the next probe.
#[tokio::test]
async fn a_vote_on_a_master_that_evicted_writes_nothing() {
    let cluster = Cluster::start(1);
    assert_eq!(vote_after_eviction(&cluster, false).await, "-3");
    assert_eq!(cluster.get(0, LOCK_KEY).await, None);
    assert_eq!(cluster.get(0, "redlock: incarnation").await, None);

    let oom = vote_after_eviction(&cluster, true).await;
    assert_eq!(oom, "-3", "a refused write is checked too");
    assert_eq!(cluster.get(0, LOCK_KEY).await, None);
    assert_eq!(cluster.get(0, "redlock: incarnation").await, None);
}
