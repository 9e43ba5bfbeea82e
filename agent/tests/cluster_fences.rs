//! Fences on masters given as Redis Clusters (real local clusters of three
//! primaries each): they keep growing across grants and a shard that lost
//! its counter, read back from each slot's fence counter on the
//! redis-servers.

mod cluster_common;
mod common;

use std::time::Duration;

use cluster_common::{
    acquire, blocking, get, in_these_clusters, node_list, release, slot_of, wait_nodes, Masters,
    PREFIX, SETTINGS,
};
use common::{node, TestAgent};
use redlock_testkit::Primary;
use redlock_wire::keys;
use serde_json::json;

/// The fence counter of `slot` on a cluster master.
fn fence_key(slot: u16) -> String {
    keys::slot_key(&format!("{PREFIX}{}", keys::FENCE_SUFFIX), slot)
}

/// A fenced acquire of `resource`: its token and fence.
async fn fenced(agent: &TestAgent, resource: &str) -> (String, u64) {
    let (token, _, grant) = acquire(agent, resource, json!({"ttl_ms": 2000, "fence": true})).await;
    let fence = grant["fence"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fence in {grant}"));
    (token, fence)
}

/// The fence counter of `slot` on each cluster's primary in `owners`
/// (`None` where it has none).
async fn fence_counters(owners: &[Primary], slot: u16) -> Vec<Option<u64>> {
    let mut counters = Vec::new();
    for p in owners {
        counters.push(get(p.port, &fence_key(slot)).await.map(|c| {
            c.parse()
                .unwrap_or_else(|e| panic!("port {}: fence counter {c:?}: {e}", p.port))
        }));
    }
    counters
}

/// What one fenced grant left in the counters, read after its release:
/// round 2 wrote `fence` to the masters that voted yes, and the grant was
/// answered only once a quorum of them confirmed, so at least a quorum of
/// clusters hold `fence`, each up from a smaller counter or none. No
/// counter is above `fence` (the largest fence answered so far), and none
/// went down or vanished (a master that did not vote keeps its counter).
fn check_counters(
    masters: &Masters,
    round: &str,
    before: &[Option<u64>],
    after: &[Option<u64>],
    fence: u64,
) {
    let mut holders = Vec::new();
    for (i, c) in masters.clusters.iter().enumerate() {
        let name = c.name();
        match (before[i], after[i]) {
            (Some(b), None) => panic!("{round}: {name}: the fence counter {b} vanished"),
            (Some(b), Some(a)) => {
                assert!(a >= b, "{round}: {name}: the counter went down, {b} to {a}")
            }
            _ => {}
        }
        let Some(counter) = after[i] else { continue };
        assert!(
            counter <= fence,
            "{round}: {name}: {counter} above the fence answered, {fence}"
        );
        if counter == fence {
            assert!(
                before[i].is_none_or(|b| b < fence),
                "{round}: {name}: held the new fence {fence} before it was answered"
            );
            holders.push(i);
        }
    }
    assert!(
        holders.len() > masters.count() / 2,
        "{round}: a quorum of clusters holds the fence {fence}: {holders:?}, counters {after:?}"
    );
}

/// Fences for one resource keep growing over grants by two agents on five
/// clusters; after each grant, the slot's counter on the shard serving it
/// holds that fence on a quorum of clusters (the ones that voted yes: a
/// cluster that did not vote may have an older counter, or none yet) and
/// is never above it or going down. The shard serving it restarts empty
/// in three clusters, two holders of the last fence surviving (the counter
/// gone on the three); once readmitted, their counters have caught up to
/// the last fence and the next fences are still larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_keep_growing_on_clusters_across_a_shard_restarted_empty() {
    let mut masters = Masters::start(5, 0);
    let a = masters.agent(SETTINGS).await;
    let b = masters.agent(SETTINGS).await;
    let slot = slot_of("fenced");
    let shard = blocking(|| masters.clusters[0].shard_of_slot(slot)).unwrap();
    let owners = masters.owners(slot);

    let mut last = 0;
    let mut counters = vec![None; masters.count()];
    for round in 0..6 {
        let agent = if round % 2 == 0 { &a } else { &b };
        let (token, fence) = fenced(agent, "fenced").await;
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        last = fence;
        release(agent, "fenced", &token).await;
        let now = fence_counters(&owners, slot).await;
        check_counters(&masters, &format!("round {round}"), &counters, &now, fence);
        counters = now;
    }
    let holders: Vec<usize> = (0..counters.len())
        .filter(|&i| counters[i] == Some(last))
        .collect();

    // Three clusters restart, the ones without the last fence first, so
    // that two holders of it survive for the catch-up to read (with all
    // of them lost, fences rest on the clock floor instead).
    let mut restarted: Vec<usize> = (0..5).filter(|i| !holders.contains(i)).collect();
    restarted.extend(holders.iter().copied());
    restarted.truncate(3);
    in_these_clusters(&mut masters, &restarted, |c| c.restart_empty(shard));
    for &i in &restarted {
        assert_eq!(
            get(owners[i].port, &fence_key(slot)).await,
            None,
            "{}: the counter is gone",
            masters.clusters[i].name()
        );
    }
    wait_nodes(
        &a,
        "the restarted slots in quarantine",
        Duration::from_secs(5),
        |nodes| {
            restarted.iter().all(|&i| {
                node(nodes, masters.clusters[i].name())["quarantined_slots"].as_u64() > Some(0)
            })
        },
    )
    .await;
    wait_nodes(
        &a,
        "the slots readmitted",
        // max_ttl + extra, then every slot's witness and marker written
        // again: seconds more on a busy machine.
        Duration::from_secs(60),
        |nodes| node_list(nodes).iter().all(|m| m["quarantined_slots"] == 0),
    )
    .await;
    for &i in &restarted {
        let name = masters.clusters[i].name();
        let counter: u64 = get(owners[i].port, &fence_key(slot))
            .await
            .unwrap_or_else(|| panic!("{name}: the counter is back with the marker"))
            .parse()
            .unwrap();
        assert!(
            counter >= last,
            "{name}: the counter {counter} caught up to the last fence {last}, which clusters {holders:?} held"
        );
    }
    let mut counters = fence_counters(&owners, slot).await;
    for (round, agent) in [&b, &a].into_iter().enumerate() {
        let (token, fence) = fenced(agent, "fenced").await;
        assert!(
            fence > last,
            "after the restart: fence {fence} after {last}"
        );
        last = fence;
        release(agent, "fenced", &token).await;
        let now = fence_counters(&owners, slot).await;
        let what = format!("round {round} after the restart");
        check_counters(&masters, &what, &counters, &now, fence);
        counters = now;
    }
}
