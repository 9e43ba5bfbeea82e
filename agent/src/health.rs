//! Node health and delayed restart: one task per master that connects,
//! probes every `health.interval` (each probe bounded by the node timeout),
//! detects restarts, and quarantines a master that may have lost its keys
//! for `max_ttl + delayed_restart.extra`, so it cannot grant a lock twice.
//!
//! Restart detectors, each catching what the others miss:
//! - `reconnect`: the master was unreachable and answers again as a new
//!   process (a new `run_id`). A reconnect to the same process (a network
//!   blip) keeps its keys and is not quarantined.
//! - `run_id`: the `run_id` changed between two probes that both answered: a
//!   restart faster than the probe interval.
//! - `uptime`: at first sight (agent start) the master has been up for less
//!   than the quarantine period; the agent cannot know what it missed and
//!   quarantines it for the remainder.
//! - `marker`: every master carries an incarnation marker key without TTL
//!   under the key prefix. The vote and extend scripts check it atomically
//!   (a master without it never counts, see [`crate::node`]), and
//!   every probe reads it, so a master that lost its keys while its process
//!   lived on (FLUSHALL, FLUSHDB, a replica promoted behind its address, an
//!   old snapshot restored) is quarantined like a restart.
//! - `eviction`: `INFO stats` counted evicted keys since the last probe
//!   that read them: a busy agent's every probe; an idle agent's probes
//!   leave the count to the votes, which delete the marker of a master that
//!   evicted (see `crate::node::scripts::probe`).
//!
//! Readiness ([`readiness()`]) counts what a lock needs: a quorum of masters
//! that can vote in its resource's hash slot, with a cluster master's slots
//! in quarantine (or on a shard that is down) not counted, so `/readyz`
//! says yes only when a lock on any resource could be granted now.
//!
//! The marker is written only when a quarantine ends, by the agent that kept
//! the master out for the whole period (and at first sight of masters this
//! process started empty). Any agent that later finds it may trust the
//! master's keys: every lock it held before it lost them has expired. A
//! master first seen without a marker is quarantined once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::InfoDict;

use crate::node::Conn;
use redlock_wire::NodeState;

use crate::node::probe::{ProbeReply, Topology};
use crate::node::{cluster_node_as_server, Detector, Identity, Node};
use crate::redlock::{fence, NodeError};

pub use crate::node::{MARKER_SUFFIX, WITNESS_SUFFIX};

mod readiness;
pub use readiness::{readiness, Readiness, Usability};

/// What the health tasks need from the config.
#[derive(Debug, Clone)]
pub struct HealthSettings {
    pub interval: Duration,
    /// `health.idle_interval`: the probes' interval while the agent is
    /// idle (see [`crate::lock::idle`]).
    pub idle_interval: Duration,
    /// `lock.max_ttl + delayed_restart.extra`.
    pub quarantine: Duration,
    /// `delayed_restart.enabled`: when false, restarts are logged only.
    pub delayed_restart: bool,
    pub marker_key: String,
    /// The masters were started empty by this process (`redlock-agent
    /// dev`): a low uptime at first sight means nothing was lost.
    pub masters_fresh: bool,
}

/// Probes `node` forever, and at the moment its quarantine runs out;
/// returns only when the task is aborted. Every `health.interval` while
/// the lock service has work, every `health.idle_interval` while `idle`
/// says it is idle (see [`crate::lock::idle`]), and at
/// once when woken: by the lock service getting work again, a request that
/// failed on the master's connection, or a reader that wants a fresh state
/// ([`Node::fresh`]).
pub async fn watch(
    node: Arc<Node>,
    peers: Arc<[Arc<Node>]>,
    settings: Arc<HealthSettings>,
    idle: Arc<dyn Fn() -> bool + Send + Sync>,
) {
    loop {
        let interval = if idle() {
            settings.idle_interval
        } else {
            settings.interval
        };
        let next = node.probed_at().unwrap_or_else(Instant::now) + interval;
        let wake = node
            .quarantine_until()
            .map_or(next, |until| until.min(next));
        tokio::select! {
            () = tokio::time::sleep_until(wake.into()) => {}
            () = node.wake.notified() => {}
        }
        probe(&node, &peers, &settings, idle()).await;
        node.probed();
        node.close_idle_reader();
    }
}

/// One probe: connect if needed, read the master's identity, quarantine it
/// if it restarted, and only then let requests use a new connection.
///
/// `peers`: every configured master (this one among them), read for the
/// fencing counter's catch-up when a quarantine ends ([`catch_up`]).
/// `idle`: the lock service is idle, so a known process is probed by one
/// script call (see `Node::probe_identity`).
pub async fn probe(node: &Node, peers: &[Arc<Node>], settings: &HealthSettings, idle: bool) {
    if node.is_cluster() {
        return probe_cluster(node, peers, settings).await;
    }
    let was = node.state();
    let before = node.snapshot().identity;
    // The marker is checked in the probe's own round trip.
    let marker = node
        .marker_checked()
        .then(|| before.as_ref().and_then(|i| i.evicted_keys));
    let mut answer = None;
    if let Some(conn) = node.connection() {
        match node.probe_identity(&conn, marker, idle).await {
            Ok(reply) => answer = Some((conn, false, reply)),
            // One late answer is the agent's own backlog as often as a dead
            // master: lock requests are bounded on their own, so keep the
            // connection until a second probe in a row times out.
            Err(NodeError::Timeout(after)) if !node.probe_timed_out() => {
                tracing::debug!(node = node.name(), ?after, "probe late; trying again");
                return;
            }
            // The agent was too busy to give the master its time: no
            // verdict on the master.
            Err(NodeError::Backlog(waited)) => {
                tracing::debug!(
                    node = node.name(),
                    ?waited,
                    "probe held up by the agent's own backlog; trying again"
                );
                return;
            }
            // The old connection is gone; try a new one right away, so a
            // restart faster than the interval is seen as such.
            Err(e) => node.disconnect(&e),
        }
    }
    let (conn, reconnected, reply) = match answer {
        Some(answer) => answer,
        None => {
            let opened = match node.open().await {
                Ok(conn) => node
                    .probe_identity(&conn, marker, false)
                    .await
                    .map(|reply| (conn, reply)),
                Err(e) => Err(e),
            };
            match opened {
                Ok((conn, reply)) => (conn, true, reply),
                Err(e) => {
                    went_down(node, was, &e);
                    return;
                }
            }
        }
    };
    let ProbeReply {
        latency,
        identity,
        marker,
    } = reply;
    let first_sight = node.first_sight();
    let mut detected = identity.as_ref().and_then(|now| {
        detect(
            before.as_ref(),
            now,
            first_sight,
            node.was_unreachable(),
            settings,
        )
    });
    if node.marker_checked() {
        match check_marker(node, &conn, first_sight, settings, marker).await {
            Ok(None) => {}
            Ok(Some(marker)) => {
                detected = Some(match detected {
                    Some(other) if other.1 >= marker.1 => other,
                    _ => marker,
                });
            }
            Err(NodeError::Timeout(after)) if !node.probe_timed_out() => {
                tracing::debug!(node = node.name(), ?after, "marker read late; trying again");
                return;
            }
            Err(NodeError::Backlog(waited)) => {
                tracing::debug!(
                    node = node.name(),
                    ?waited,
                    "marker read held up by the agent's own backlog; trying again"
                );
                return;
            }
            Err(e) => {
                went_down(node, was, &e);
                return;
            }
        }
    }
    if let Some((detector, duration)) = detected {
        if settings.delayed_restart {
            tracing::warn!(
                node = node.name(),
                detector = detector.as_str(),
                quarantine = ?duration,
                run_id = identity.as_ref().map(|i| i.run_id.as_str()),
                "lost keys possible (restart or lost state detected): quarantined, no locks on it until its old keys have expired"
            );
            node.quarantine(Instant::now() + duration, detector);
        } else {
            tracing::warn!(
                node = node.name(),
                detector = detector.as_str(),
                "restart or lost state detected; delayed_restart is off, so it takes part in locks at once"
            );
            // A zero-length quarantine: the marker is rewritten below.
            node.quarantine(Instant::now(), detector);
        }
        node.restart_detected(detector);
    }
    node.set_identity(identity.clone());
    let probes = node.record_probe(latency);
    if !reconnected && probes.is_multiple_of(TOPOLOGY_EVERY) {
        // A policy changed at run time (CONFIG SET maxmemory-policy) is
        // warned about within this many probes; the votes' eviction check
        // keeps locks safe in between.
        check_topology(node, &conn, settings).await;
    }
    if reconnected {
        check_topology(node, &conn, settings).await;
        node.install(conn.clone());
        tracing::info!(
            node = node.name(),
            ?latency,
            state = node.state().as_str(),
            "node answers"
        );
    }
    if let Err(e) = node.check_witness(&conn).await {
        tracing::debug!(node = node.name(), error = %e, "quarantine witness not read; trying again");
    }
    if node.needs_witness() {
        if let Err(e) = node.write_witness(&conn).await {
            tracing::debug!(node = node.name(), error = %e, "quarantine witness not written; trying again");
        }
    }
    if node.readmit_due() {
        let Some(catch_up) = catch_up(node, peers).await else {
            tracing::debug!(
                node = node.name(),
                "quarantine over, but too few other masters answered for the fencing counter's catch-up; still quarantined"
            );
            return;
        };
        match node.readmit(&conn, catch_up).await {
            Ok(false) => {}
            Ok(true) => tracing::info!(
                node = node.name(),
                "quarantine over: incarnation marker rewritten, the node takes part in locks again"
            ),
            Err(e) => {
                tracing::debug!(node = node.name(), error = %e, "marker rewrite failed; still quarantined");
            }
        }
    }
}

/// One probe of a master that is a Redis Cluster (see
/// [`crate::node::cluster`]): connect if needed, read its shards, quarantine
/// the slots of a shard that restarted or evicted keys, read every slot's
/// marker at first sight and one slot's per shard after (a shard found
/// without it is swept, and every slot without its marker quarantined: see
/// [`crate::node::cluster::markers`]), then write the witnesses of slots
/// newly quarantined and readmit those whose time ran out.
async fn probe_cluster(node: &Node, peers: &[Arc<Node>], settings: &HealthSettings) {
    let was = node.state();
    let (lock_conn, reconnected) = match node.connection() {
        Some(conn) => (conn, false),
        None => match node.open().await {
            Ok(conn) => (conn, true),
            Err(e) => {
                went_down(node, was, &e);
                return;
            }
        },
    };
    // The lock path's connection stays for lock commands; the probe and
    // its sweeps go on the health task's own.
    let conn = match node.probe_connection().await {
        Ok(probe) => probe,
        Err(e) => {
            went_down(node, was, &e);
            return;
        }
    };
    let started = Instant::now();
    let changed = match node.probe_shards(&conn).await {
        Ok(changed) => changed,
        Err(NodeError::Timeout(after)) if !reconnected && !node.probe_timed_out() => {
            tracing::debug!(node = node.name(), ?after, "probe late; trying again");
            return;
        }
        Err(NodeError::Backlog(waited)) if !reconnected => {
            tracing::debug!(
                node = node.name(),
                ?waited,
                "probe held up by the agent's own backlog; trying again"
            );
            return;
        }
        Err(e) => {
            node.drop_probe_connection();
            went_down(node, was, &e);
            return;
        }
    };
    if let Some(why) = shares_a_server(node, peers) {
        let error = NodeError::Other(why);
        node.drop_probe_connection();
        went_down(node, was, &error);
        tracing::warn!(node = node.name(), error = %error, "cluster refused");
        return;
    }
    node.record_probe(started.elapsed());
    let (lock_conn, reconnected) = if !reconnected && node.stuck_connections() {
        tracing::warn!(
            node = node.name(),
            "every shard answers the probe but lock requests keep failing: opening a fresh cluster connection"
        );
        match node.open().await {
            Ok(conn) => (conn, true),
            Err(e) => {
                went_down(node, was, &e);
                return;
            }
        }
    } else {
        (lock_conn, reconnected)
    };
    if reconnected {
        node.install(lock_conn);
        tracing::info!(
            node = node.name(),
            shards = node.shard_addresses().len(),
            "cluster answers"
        );
    }
    if !node.marker_checked() {
        return;
    }
    for lost in changed {
        if settings.delayed_restart {
            node.slots_lost(&conn, &lost).await;
        }
    }
    node.read_slot_markers(&conn, settings.masters_fresh).await;
    node.write_slot_witnesses(&conn).await;
    let due = node.due_slots();
    if due.is_empty() {
        return;
    }
    let slots: Vec<u16> = due.iter().map(|(slot, _)| *slot).collect();
    let Some(catch_up) = catch_up_slots(node, peers, &slots).await else {
        tracing::debug!(
            node = node.name(),
            "slot quarantine over, but too few other masters answered for the fencing counters' catch-up; still quarantined"
        );
        return;
    };
    node.readmit_slots(&conn, due, &catch_up).await;
}

/// A cluster whose shards include a server that another master is, or has
/// among its shards: one server's votes would count twice toward a quorum,
/// so the cluster is kept `down` (both, when two clusters share one), in
/// whichever order the config lists them. Compared by `run_id`, whatever
/// address each reaches the server by.
fn shares_a_server(node: &Node, peers: &[Arc<Node>]) -> Option<String> {
    let mine: Vec<(String, String)> = node
        .shards()
        .into_iter()
        .filter_map(|(shard, _)| shard.run_id.clone().map(|id| (id, shard.addr())))
        .collect();
    for peer in peers.iter().filter(|p| !std::ptr::eq(p.as_ref(), node)) {
        let theirs: Vec<String> = if peer.is_cluster() {
            peer.shards()
                .into_iter()
                .filter_map(|(shard, _)| shard.run_id)
                .collect()
        } else {
            peer.snapshot()
                .identity
                .map(|i| vec![i.run_id])
                .unwrap_or_default()
        };
        if let Some((_, addr)) = mine.iter().find(|(id, _)| theirs.contains(id)) {
            return Some(format!(
                "its shard {addr} is also master {}: one server's vote would count twice \
                 toward a quorum; give each master its own servers",
                peer.name()
            ));
        }
    }
    None
}

/// The fencing counters a cluster master's readmitted `slots` must have at
/// least, slot by slot: the rule of [`catch_up`], with each other master's
/// counter for the slot (a single server has one for all).
async fn catch_up_slots(node: &Node, peers: &[Arc<Node>], slots: &[u16]) -> Option<Vec<u64>> {
    let quorum = peers.len() / 2 + 1;
    let required = fence::catch_up_reads(peers.len(), quorum);
    let others: Vec<&Arc<Node>> = peers
        .iter()
        .filter(|p| !std::ptr::eq(p.as_ref(), node))
        .collect();
    let usable: Vec<&Arc<Node>> = others.iter().copied().filter(|p| p.is_usable()).collect();
    let mut answers = read_slot_counters(&usable, slots).await;
    if answers.len() < required {
        if usable.len() >= quorum {
            return None;
        }
        answers = read_slot_counters(&others, slots).await;
        tracing::warn!(
            node = node.name(),
            read = answers.len(),
            required,
            "too few masters usable for a full fencing catch-up: readmitting slots with the counters that \
             answered; fences rest on the clock floor until the others are back"
        );
    }
    Some(
        (0..slots.len())
            .map(|i| answers.iter().map(|a| a[i]).max().unwrap_or(0))
            .collect(),
    )
}

/// The fencing counters of `slots` on each of `nodes` that answered.
async fn read_slot_counters(nodes: &[&Arc<Node>], slots: &[u16]) -> Vec<Vec<u64>> {
    futures::future::join_all(nodes.iter().map(|p| p.read_fences(slots)))
        .await
        .into_iter()
        .filter_map(Result::ok)
        .filter(|counters| counters.len() == slots.len())
        .collect()
}

/// The fencing counter a readmitted master must have at least: the highest
/// read from enough of the other masters ([`fence::catch_up_reads`]) that
/// every quorum which raised a fence with this master in it has another
/// member among them. `None` while too few answer: the master stays out.
///
/// When fewer than a quorum of masters are usable anyway (a majority lost
/// their keys at once, or is down), no grant can happen until some are
/// readmitted: then whatever answers is taken, and fences rest on the floor
/// (the clock; see [`fence`]), which delayed restart has moved past every
/// earlier fence.
pub async fn catch_up(node: &Node, peers: &[Arc<Node>]) -> Option<u64> {
    let quorum = peers.len() / 2 + 1;
    let required = fence::catch_up_reads(peers.len(), quorum);
    let own_id = node.server_id();
    let others: Vec<&Arc<Node>> = peers
        .iter()
        .filter(|p| !std::ptr::eq(p.as_ref(), node))
        .filter(|p| own_id.is_none() || p.server_id() != own_id)
        .collect();
    let usable: Vec<&Arc<Node>> = others.iter().copied().filter(|p| p.is_usable()).collect();
    let counters = read_counters(&usable).await;
    if counters.len() >= required {
        return Some(counters.into_iter().max().unwrap_or(0));
    }
    if usable.len() >= quorum {
        // Grants go on without this master: wait until enough answer.
        return None;
    }
    let counters = read_counters(&others).await;
    tracing::warn!(
        node = node.name(),
        read = counters.len(),
        required,
        "too few masters usable for a full fencing catch-up: readmitting with the counters that \
         answered; fences rest on the clock floor until the others are back"
    );
    Some(counters.into_iter().max().unwrap_or(0))
}

/// The fencing counters of `nodes` that answered (a cluster's highest over
/// its slots: a single master's counter covers every resource).
async fn read_counters(nodes: &[&Arc<Node>]) -> Vec<u64> {
    futures::future::join_all(nodes.iter().map(|p| p.read_fences(&[])))
        .await
        .into_iter()
        .filter_map(|counters| counters.ok()?.first().copied())
        .collect()
}

/// Reads the incarnation marker, unless the probe's round trip did
/// (`read`). `Some` when it is missing and the node must be quarantined
/// for it; a node already waiting for readmission is not quarantined
/// again, and masters this process started empty get their marker at
/// first sight.
async fn check_marker(
    node: &Node,
    conn: &Conn,
    first_sight: bool,
    settings: &HealthSettings,
    read: Option<Result<Option<Detector>, NodeError>>,
) -> Result<Option<(Detector, Duration)>, NodeError> {
    let answer = match read {
        Some(answer) => answer?,
        None => {
            let last_evicted = node.snapshot().identity.and_then(|i| i.evicted_keys);
            node.check_marker(conn, last_evicted).await?
        }
    };
    match answer {
        None => return Ok(None),
        // The master evicted keys since its marker was written: the script
        // deleted the marker, so every agent sees the loss; quarantined
        // even where a readmission was pending, which must start over.
        Some(Detector::Eviction) => return Ok(Some((Detector::Eviction, settings.quarantine))),
        Some(_) => {}
    }
    if first_sight && settings.masters_fresh {
        return Ok(match node.write_marker(conn).await {
            Ok(()) => None,
            // Connected, but it refuses the write (a replica, OOM, an ACL):
            // it cannot take part in locks, and stays out until it can.
            Err(e)
                if !matches!(
                    e,
                    NodeError::Timeout(_) | NodeError::Connection(_) | NodeError::Backlog(_)
                ) =>
            {
                Some((Detector::Marker, settings.quarantine))
            }
            Err(e) => return Err(e),
        });
    }
    if node.readmit_pending() {
        return Ok(None);
    }
    // Gone, or never written: either way the agent cannot tell what the
    // master lost, so it waits out every lock it may have held.
    Ok(Some((Detector::Marker, settings.quarantine)))
}

/// Which detector fires, and for how long the node must stay out.
fn detect(
    before: Option<&Identity>,
    now: &Identity,
    first_sight: bool,
    unreachable: bool,
    settings: &HealthSettings,
) -> Option<(Detector, Duration)> {
    match before {
        None if first_sight => {
            if settings.masters_fresh || now.uptime >= settings.quarantine {
                None
            } else {
                Some((Detector::Uptime, settings.quarantine - now.uptime))
            }
        }
        Some(before) if before.run_id != now.run_id => {
            let detector = if unreachable {
                Detector::Reconnect
            } else {
                Detector::RunId
            };
            Some((detector, settings.quarantine))
        }
        Some(before)
            if before
                .evicted_keys
                .zip(now.evicted_keys)
                .is_some_and(|(b, n)| n > b) =>
        {
            Some((Detector::Eviction, settings.quarantine))
        }
        _ => None,
    }
}

fn went_down(node: &Node, was: NodeState, error: &NodeError) {
    if was != NodeState::Down {
        // The error itself was logged (once per kind) where it happened.
        tracing::warn!(node = node.name(), "node down");
    }
    tracing::debug!(node = node.name(), error = %error, "probe failed");
    node.disconnect(error);
}

/// How often (in probes that answered) a connected master's topology is
/// read again: every 10 probes, 5 s at the default interval.
const TOPOLOGY_EVERY: u64 = 10;

/// Checks a master that (re)connected, and every [`TOPOLOGY_EVERY`] probes
/// after, for setups that break Redlock's assumptions, and records them as
/// warnings on the node; logs only what changed. One round trip: an idle
/// agent's tenth probe costs the master one wake-up more, not four.
async fn check_topology(node: &Node, conn: &Conn, settings: &HealthSettings) {
    let Topology {
        info,
        appendonly,
        appendfsync,
        save,
    } = node.topology(conn).await.unwrap_or_default();
    let info = info.unwrap_or_else(|| InfoDict::new(""));
    let persistence = persistence_mode(
        appendonly.as_deref(),
        appendfsync.as_deref(),
        save.as_deref(),
    );
    let mut warnings = topology_warnings(&info);
    if !node.is_cluster() && info.get::<String>("cluster_enabled").as_deref() == Some("1") {
        warnings.push(cluster_node_as_server("cluster_enabled:1"));
    }
    if !settings.delayed_restart && persistence.as_deref() != Some("aof always") {
        warnings.push(format!(
            "delayed restart is off and persistence is {}: a crash can lose held locks",
            persistence.as_deref().unwrap_or("unknown")
        ));
    }
    let known = node.snapshot();
    if known.persistence != persistence || node.connection().is_none() {
        tracing::info!(
            node = node.name(),
            persistence = persistence.as_deref().unwrap_or("unknown"),
            "persistence mode"
        );
    }
    for warning in warnings.iter().filter(|w| !known.warnings.contains(w)) {
        tracing::warn!(node = node.name(), warning = %warning, "topology");
    }
    node.set_topology(warnings, persistence);
}

/// Warnings from one master's `INFO`.
pub fn topology_warnings(info: &InfoDict) -> Vec<String> {
    let mut warnings = Vec::new();
    if info.get::<String>("role").as_deref() == Some("slave") {
        warnings.push(
            "replica (role:slave): Redlock needs independent masters; writes fail or are lost on failover"
                .to_string(),
        );
    }
    // Lock keys all have a TTL, so volatile-* policies evict them first;
    // only noeviction keeps them (a full master then refuses new locks).
    let limited = info
        .get::<String>("maxmemory")
        .is_some_and(|m| m.parse::<u64>().map_or(true, |m| m > 0));
    if let Some(policy) = info.get::<String>("maxmemory_policy") {
        if policy.starts_with("allkeys-") || (limited && policy != "noeviction") {
            warnings.push(format!(
                "maxmemory-policy {policy} may evict lock keys: every eviction quarantines the master (its votes are refused from that moment); use noeviction"
            ));
        }
    }
    warnings
}

/// `none`, `rdb`, `aof everysec`, `aof always`, ... from CONFIG values.
fn persistence_mode(
    appendonly: Option<&str>,
    appendfsync: Option<&str>,
    save: Option<&str>,
) -> Option<String> {
    match appendonly? {
        "yes" => Some(format!("aof {}", appendfsync.unwrap_or("unknown"))),
        _ if save.is_some_and(|s| !s.trim().is_empty()) => Some("rdb".to_string()),
        _ => Some("none".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> HealthSettings {
        HealthSettings {
            interval: Duration::from_millis(500),
            idle_interval: Duration::from_secs(30),
            quarantine: Duration::from_secs(61),
            delayed_restart: true,
            marker_key: "redlock: incarnation".into(),
            masters_fresh: false,
        }
    }

    fn id(run_id: &str, uptime: u64) -> Identity {
        Identity {
            run_id: run_id.into(),
            uptime: Duration::from_secs(uptime),
            evicted_keys: Some(0),
        }
    }

    #[test]
    fn low_uptime_at_first_sight_quarantines_for_the_remainder() {
        let s = settings();
        assert_eq!(
            detect(None, &id("a", 10), true, true, &s),
            Some((Detector::Uptime, Duration::from_secs(51)))
        );
        assert_eq!(detect(None, &id("a", 61), true, true, &s), None);
        let fresh = HealthSettings {
            masters_fresh: true,
            ..settings()
        };
        assert_eq!(detect(None, &id("a", 0), true, true, &fresh), None);
    }

    #[test]
    fn a_new_run_id_is_a_restart_named_by_how_it_was_seen() {
        let s = settings();
        let full = Duration::from_secs(61);
        assert_eq!(
            detect(Some(&id("a", 500)), &id("b", 0), false, true, &s),
            Some((Detector::Reconnect, full))
        );
        assert_eq!(
            detect(Some(&id("a", 500)), &id("b", 0), false, false, &s),
            Some((Detector::RunId, full))
        );
        // The same process after a network blip kept its keys.
        assert_eq!(
            detect(Some(&id("a", 500)), &id("a", 505), false, true, &s),
            None
        );
    }

    #[test]
    fn topology_warnings_name_replicas_and_evicting_policies() {
        let info = InfoDict::new("role:slave\r\nmaxmemory_policy:allkeys-lru\r\n");
        let warnings = topology_warnings(&info);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("replica (role:slave)"));
        assert!(warnings[1].contains("allkeys-lru"));
        let fine = InfoDict::new("role:master\r\nmaxmemory_policy:noeviction\r\n");
        assert!(topology_warnings(&fine).is_empty());
    }

    #[test]
    fn persistence_modes() {
        assert_eq!(
            persistence_mode(Some("no"), Some("everysec"), Some("")).as_deref(),
            Some("none")
        );
        assert_eq!(
            persistence_mode(Some("no"), None, Some("3600 1")).as_deref(),
            Some("rdb")
        );
        assert_eq!(
            persistence_mode(Some("yes"), Some("always"), None).as_deref(),
            Some("aof always")
        );
        assert_eq!(persistence_mode(None, None, None), None);
    }
}
