//! Faults under a held lock on masters given as Redis Clusters (real local
//! clusters of three primaries each): a shard restarted empty, a lagged
//! failover and a slot migrated under a held lock never grant it twice, and
//! only the affected slots wait out a quarantine (with a control run, the
//! per-slot marker check off, that does grant twice).
//!
//! Every claim is read back from the redis-servers themselves: the lock key
//! and the per-slot bookkeeping keys on the primary that serves their slot.

mod cluster_common;
mod common;

use std::time::{Duration, Instant};

use cluster_common::{
    acquire, blocking, get, in_clusters, lock_key, marker_key, marker_node, node_list, release,
    slot_of, wait_nodes, Masters, SETTINGS_LONG,
};
use common::{node, Switch, TestAgent};
use hyper::StatusCode;
use redlock_testkit::{Primary, RedisCluster};
use serde_json::{json, Value};

/// A second client asks for `resource` again and again until `until`; every
/// answer must be a refusal. Returns how many it made (at least one, or the
/// test saw nothing).
async fn never_granted(second: &TestAgent, resource: &str, until: Instant, why: &str) -> usize {
    let mut tries = 0;
    while Instant::now() < until {
        let (status, body) = second
            .post(
                &format!("/v1/locks/{resource}/acquire"),
                json!({"owner": "second"}),
            )
            .await;
        assert_ne!(
            status,
            StatusCode::OK,
            "double grant: the second client got {resource} while the first one's lock was valid ({why}): {body}"
        );
        assert!(
            body["error"]["code"] == "taken" || body["error"]["code"] == "no_quorum",
            "{body}"
        );
        tries += 1;
    }
    assert!(
        tries > 0,
        "the fault took longer than the first lock's validity: no attempt was made while it held ({why})"
    );
    tries
}

/// A resource whose lock key's slot is served by a shard other than
/// `shard` in cluster `c` (the same in every cluster here: each splits the
/// slots evenly in the same order).
fn resource_off_shard(c: &RedisCluster, shard: usize, stem: &str) -> String {
    blocking(|| {
        (0..)
            .map(|i| format!("{stem}-{i}"))
            .find(|r| c.shard_of_slot(slot_of(r)).unwrap() != shard)
            .expect("some resource lands elsewhere")
    })
}

/// In three of five clusters, the shard that serves a held lock's slot
/// restarts empty. While the first holder's lock may be valid, a second
/// agent never gets it; the holder's extend answers `lost`. Those shards'
/// slots are quarantined (`quarantined_slots` > 0 on them, 0 on every other
/// shard, every master still `up`), a lock in another shard's slot works
/// meanwhile, and after max_ttl + extra the slots are readmitted: the
/// slot's marker is back on the restarted primary naming its node ID, and
/// the second agent gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_restarted_empty_never_grants_twice_and_only_its_slots_wait() {
    let mut masters = Masters::start(5, 0);
    let a = masters.agent(SETTINGS_LONG).await;
    let b = masters.agent(SETTINGS_LONG).await;
    let slot = slot_of("held");
    let shard = blocking(|| masters.clusters[0].shard_of_slot(slot)).unwrap();
    let elsewhere = resource_off_shard(&masters.clusters[0], shard, "other");

    let (token, valid_until, _) =
        acquire(&a, "held", json!({"ttl_ms": 10000, "owner": "first"})).await;
    in_clusters(&mut masters, 3, |c| c.restart_empty(shard));
    let owners = masters.owners(slot);
    for (c, p) in masters.clusters.iter().zip(&owners).take(3) {
        assert_eq!(
            p.shard,
            shard,
            "{}: the restarted shard still serves the slot",
            c.name()
        );
        assert_eq!(
            get(p.port, &lock_key("held")).await,
            None,
            "{}: the key is gone",
            c.name()
        );
        assert_eq!(
            get(p.port, &marker_key(slot)).await,
            None,
            "{}: the marker is gone",
            c.name()
        );
    }

    let (status, body) = a
        .post(
            "/v1/locks/held/extend",
            json!({"token": token, "ttl_ms": 5000}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "lost", "{body}");

    let quarantined = |nodes: &Value| {
        masters.clusters[..3].iter().all(|c| {
            let n = node(nodes, c.name());
            n["quarantined_slots"].as_u64() > Some(0)
        })
    };
    let nodes = wait_nodes(
        &b,
        "the restarted shards' slots in quarantine",
        Duration::from_secs(5),
        &quarantined,
    )
    .await;
    for (i, c) in masters.clusters.iter().enumerate() {
        let n = node(&nodes, c.name());
        assert_eq!(n["state"], "up", "only slots are kept out: {n:#}");
        let restarted = i < 3;
        for s in n["shards"].as_array().unwrap() {
            let here = s["addr"] == format!("127.0.0.1:{}", c.primary_port(shard)).as_str();
            if restarted && here {
                assert!(
                    s["quarantined_slots"].as_u64() > Some(0),
                    "{}: {s}",
                    c.name()
                );
            } else {
                assert_eq!(
                    s["quarantined_slots"],
                    0,
                    "{}: only the restarted shard: {n:#}",
                    c.name()
                );
            }
        }
    }

    // Meanwhile: a lock in another shard's slot works, read back on the
    // shard serving it in each cluster: on a quorum of clusters (a vote
    // late on a busy machine may miss one), so in at least one of the three
    // with a shard in quarantine.
    let (other, _, _) = acquire(&b, &elsewhere, json!({"ttl_ms": 5000})).await;
    let mut holding = Vec::new();
    for (i, p) in masters.owners(slot_of(&elsewhere)).iter().enumerate() {
        if get(p.port, &lock_key(&elsewhere)).await.as_deref() == Some(other.as_str()) {
            holding.push(i);
        }
    }
    assert!(
        holding.len() >= 3 && holding.iter().any(|&i| i < 3),
        "{elsewhere} is held on clusters {holding:?}: a quorum, one with a shard in quarantine"
    );
    let body = release(&b, &elsewhere, &other).await;
    assert_eq!(body["released"], true, "{body}");
    let nodes = b.nodes().await;
    assert!(
        quarantined(&nodes),
        "the other lock worked while the slots were still quarantined: {nodes:#}"
    );

    never_granted(
        &b,
        "held",
        valid_until,
        "a shard restarted empty in 3 of 5 clusters",
    )
    .await;

    // Readmitted after the quarantine, with the marker rewritten.
    wait_nodes(
        &b,
        "the slots readmitted",
        // max_ttl + extra, then every slot's witness and marker written
        // again: seconds more on a busy machine.
        Duration::from_secs(60),
        |nodes| node_list(nodes).iter().all(|m| m["quarantined_slots"] == 0),
    )
    .await;
    for (c, p) in masters.clusters.iter().zip(&owners).take(3) {
        assert_eq!(
            marker_node(p.port, slot).await.as_deref(),
            Some(p.node_id.as_str()),
            "{}: the slot's marker names the primary serving it",
            c.name()
        );
    }
    let (status, body) = b
        .post(
            "/v1/locks/held/acquire",
            json!({"wait_ms": 10000, "owner": "second"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(Instant::now() > valid_until);
}

/// What a lagged failover run saw.
struct FailoverRun {
    /// Grants the second agent got while the first one's lock was valid.
    double_grants: usize,
    /// Refusals it got meanwhile.
    refusals: usize,
}

/// Five clusters, the first three with a replica per primary. The replica
/// of the shard serving the lock's slot is frozen (in those three), the
/// first agent takes the lock (on the primaries only), then each of those
/// shards fails over to its replica, which lacks the key but has the slot's
/// marker naming the old primary. The second agent, with the per-slot
/// marker check on or off (`REDLOCK_TEST_NO_MARKER_CHECK=1`), asks for the
/// lock until the first one's validity ends.
async fn lagged_failover(marker_check: bool) -> (FailoverRun, Masters, TestAgent) {
    let mut masters = Masters::start(5, 3);
    let a = masters.agent(SETTINGS_LONG).await;
    let b = if marker_check {
        masters.agent(SETTINGS_LONG).await
    } else {
        let _switch = Switch::set(redlock_testkit::switches::NO_MARKER_CHECK, "1");
        masters.agent(SETTINGS_LONG).await
    };
    let slot = slot_of("failover");
    let shard = blocking(|| masters.clusters[0].shard_of_slot(slot)).unwrap();
    let old: Vec<Primary> = masters.owners(slot);

    in_clusters(&mut masters, 3, |c| c.begin_lagged_failover(shard));
    let (token, valid_until, _) =
        acquire(&a, "failover", json!({"ttl_ms": 10000, "owner": "first"})).await;
    for (c, p) in masters.clusters.iter().zip(&old).take(3) {
        assert_eq!(
            get(p.port, &lock_key("failover")).await.as_deref(),
            Some(token.as_str()),
            "{}: the old primary has the lock",
            c.name()
        );
    }
    in_clusters(&mut masters, 3, |c| c.finish_lagged_failover(shard));
    let new = masters.owners(slot);
    for ((c, before), after) in masters.clusters.iter().zip(&old).zip(&new).take(3) {
        assert_ne!(after.node_id, before.node_id, "{}: failed over", c.name());
        assert_eq!(
            get(after.port, &lock_key("failover")).await,
            None,
            "{}: the promoted replica lacks the lock",
            c.name()
        );
        // The replica's copy of the marker names the old primary, unless an
        // agent's probe saw the failover first and deleted it; never the
        // new primary, which would let the slot vote at once.
        let marker = marker_node(after.port, slot).await;
        assert_ne!(
            marker.as_deref(),
            Some(after.node_id.as_str()),
            "{}: the promoted replica's marker names itself",
            c.name()
        );
        assert!(
            marker.is_none() || marker.as_deref() == Some(before.node_id.as_str()),
            "{}: the promoted replica's marker: {marker:?}",
            c.name()
        );
    }

    let mut run = FailoverRun {
        double_grants: 0,
        refusals: 0,
    };
    while Instant::now() < valid_until {
        let (status, body) = b
            .post("/v1/locks/failover/acquire", json!({"owner": "second"}))
            .await;
        if status == StatusCode::OK {
            if Instant::now() < valid_until {
                run.double_grants += 1;
            }
            break;
        }
        assert!(
            body["error"]["code"] == "taken" || body["error"]["code"] == "no_quorum",
            "{body}"
        );
        run.refusals += 1;
    }
    (run, masters, b)
}

/// A lagged failover of the shard serving a held lock's slot, in three of
/// five clusters: the promoted replicas miss the lock, but their slot's
/// marker names the old primary, so the slot refuses and is quarantined;
/// the second agent never gets the lock while the first one's is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagged_failover_in_three_clusters_never_grants_twice() {
    let (run, masters, b) = lagged_failover(true).await;
    assert_eq!(
        run.double_grants, 0,
        "double grant after a lagged failover in 3 of 5 clusters"
    );
    assert!(
        run.refusals > 0,
        "the failovers outlasted the first lock's validity: nothing was tried"
    );
    let nodes = wait_nodes(
        &b,
        "the failed-over slot in quarantine",
        Duration::from_secs(5),
        |nodes| {
            masters.clusters[..3]
                .iter()
                .all(|c| node(nodes, c.name())["quarantined_slots"].as_u64() > Some(0))
        },
    )
    .await;
    for c in &masters.clusters[3..] {
        assert_eq!(node(&nodes, c.name())["quarantined_slots"], 0, "{nodes:#}");
    }
}

/// The control: the same lagged failover with the second agent's per-slot
/// marker check off (`REDLOCK_TEST_NO_MARKER_CHECK=1`). The promoted
/// replicas vote for the lock they never saw and the second agent gets it
/// while the first one's is still valid: the double grant the check
/// prevents, so the test above can see one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_without_the_marker_check_grants_twice_after_a_lagged_failover() {
    let (run, _masters, _b) = lagged_failover(false).await;
    assert_eq!(
        run.double_grants, 1,
        "the control found no double grant ({} refusals): the test cannot see one, or the agent ignored the switch",
        run.refusals
    );
}

/// The slot of a held lock migrates to another shard in three of five
/// clusters (`MIGRATING`/`IMPORTING`, the keys moved, the slot handed
/// over). Mid-migration and after it, a second agent never gets the lock;
/// the migrated slot is quarantined on its new shard, and only it, since
/// its marker names the old node; the holder releases the lock (`released:
/// true`) and the key is gone from every cluster; once the slot is
/// readmitted on a quorum of masters, the second agent gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_a_held_lock_keeps_it_exclusive() {
    let mut masters = Masters::start(5, 0);
    let a = masters.agent(SETTINGS_LONG).await;
    let b = masters.agent(SETTINGS_LONG).await;
    let slot = slot_of("moving");
    let from = blocking(|| masters.clusters[0].shard_of_slot(slot)).unwrap();
    let to = (from + 1) % 3;

    let (token, valid_until, _) =
        acquire(&a, "moving", json!({"ttl_ms": 10000, "owner": "first"})).await;
    let migrations: Vec<_> = blocking(|| {
        masters.clusters[..3]
            .iter_mut()
            .map(|c| {
                c.begin_migration(slot, to)
                    .unwrap_or_else(|e| panic!("{}: {e}", c.name()))
            })
            .collect()
    });
    let (status, body) = b
        .post("/v1/locks/moving/acquire", json!({"owner": "second"}))
        .await;
    assert_ne!(status, StatusCode::OK, "double grant mid-migration: {body}");

    blocking(|| {
        for (c, m) in masters.clusters.iter_mut().zip(migrations) {
            let name = c.name().to_string();
            c.finish_migration(m)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    });
    let owners = masters.owners(slot);
    for (i, (c, p)) in masters.clusters.iter().zip(&owners).enumerate() {
        assert_eq!(p.shard, if i < 3 { to } else { from }, "{}", c.name());
        assert_eq!(
            get(p.port, &lock_key("moving")).await.as_deref(),
            Some(token.as_str()),
            "{}: the lock is on the shard serving its slot",
            c.name()
        );
        if i < 3 {
            // The marker moved with the slot naming the old node, unless an
            // agent's probe saw the new owner first and deleted it; never
            // the new node's ID, which would let the slot vote at once.
            let marker = marker_node(p.port, slot).await;
            assert_ne!(
                marker.as_deref(),
                Some(p.node_id.as_str()),
                "{}: the moved marker names the node serving the slot now",
                c.name()
            );
        }
    }

    // A short burst of attempts: the holder must still hold it to release.
    let burst = valid_until.min(Instant::now() + Duration::from_millis(500));
    never_granted(&b, "moving", burst, "its slot migrated in 3 of 5 clusters").await;
    let nodes = wait_nodes(
        &b,
        "the migrated slot in quarantine",
        Duration::from_secs(5),
        |nodes| {
            masters.clusters[..3]
                .iter()
                .all(|c| node(nodes, c.name())["quarantined_slots"].as_u64() > Some(0))
        },
    )
    .await;
    for (i, (c, p)) in masters.clusters.iter().zip(&owners).enumerate() {
        let n = node(&nodes, c.name());
        assert_eq!(n["state"], "up", "{n:#}");
        assert_eq!(
            n["quarantined_slots"],
            u64::from(i < 3),
            "only the migrated slot: {n:#}"
        );
        for s in n["shards"].as_array().unwrap() {
            let migrated_here = i < 3 && s["addr"] == format!("127.0.0.1:{}", p.port).as_str();
            assert_eq!(
                s["quarantined_slots"],
                u64::from(migrated_here),
                "{}: only the migrated slot, on its new shard: {n:#}",
                c.name()
            );
        }
    }

    assert!(
        Instant::now() < valid_until,
        "the migrations outlasted the holder's validity; nothing left to release"
    );
    let body = release(&a, "moving", &token).await;
    assert_eq!(body["released"], true, "the holder released it: {body}");
    for (c, p) in masters.clusters.iter().zip(&owners) {
        assert_eq!(
            get(p.port, &lock_key("moving")).await,
            None,
            "{}: released on the shard serving the slot now",
            c.name()
        );
    }

    let (status, body) = b
        .post(
            "/v1/locks/moving/acquire",
            json!({"owner": "second", "wait_ms": 15000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Its votes came from a quorum of masters where the slot is trusted: a
    // quarantined slot never votes.
    let nodes = b.nodes().await;
    let trusted = node_list(&nodes)
        .iter()
        .filter(|m| m["quarantined_slots"] == 0)
        .count();
    assert!(
        trusted >= 3,
        "granted with the slot readmitted on a quorum of masters: {nodes:#}"
    );
}
