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
//! - `marker`: when an ACL refuses `INFO`, an incarnation marker key without
//!   TTL under the key prefix; if it is gone, the master lost its data.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redlock_wire::NodeState;

use crate::redlock::node::{Detector, Identity};
use crate::redlock::Node;

/// Suffix of the incarnation marker key, after the key prefix. The space
/// cannot occur in a resource name, so the marker never collides with a lock.
pub const MARKER_SUFFIX: &str = " incarnation";

/// What the health tasks need from the config.
#[derive(Debug, Clone)]
pub struct HealthSettings {
    pub interval: Duration,
    /// `lock.max_ttl + delayed_restart.extra`.
    pub quarantine: Duration,
    /// `delayed_restart.enabled`: when false, restarts are logged only.
    pub delayed_restart: bool,
    pub marker_key: String,
    /// The masters were started empty by this process (`redlock-agent
    /// dev`): a low uptime at first sight means nothing was lost.
    pub masters_fresh: bool,
}

/// Probes `node` forever; returns only when the task is aborted.
pub async fn watch(node: Arc<Node>, settings: Arc<HealthSettings>) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(settings.interval) => {}
            () = node.wake.notified() => {}
        }
        probe(&node, &settings).await;
    }
}

/// One probe: connect if needed, read the master's identity, quarantine it
/// if it restarted, and only then let requests use a new connection.
pub async fn probe(node: &Node, settings: &HealthSettings) {
    let was = node.state();
    let before = node.snapshot().identity;
    let mut answer = None;
    if let Some(conn) = node.connection() {
        match node.probe_identity(&conn).await {
            Ok(reply) => answer = Some((conn, false, reply)),
            // The old connection is gone; try a new one right away, so a
            // restart faster than the interval is seen as such.
            Err(e) => node.disconnect(&e),
        }
    }
    let (conn, reconnected, (latency, identity)) = match answer {
        Some(answer) => answer,
        None => {
            let opened = match node.open().await {
                Ok(conn) => node.probe_identity(&conn).await.map(|reply| (conn, reply)),
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
    let first_sight = node.first_sight();
    let detected = match &identity {
        Some(now) => detect(
            before.as_ref(),
            now,
            first_sight,
            node.was_unreachable(),
            settings,
        ),
        None => match node.check_marker(&conn, &settings.marker_key).await {
            Ok(true) => None,
            Ok(false) if first_sight && settings.masters_fresh => None,
            // Gone, or never written: either way the agent cannot tell what
            // the master lost, so it waits out every lock it may have held.
            Ok(false) => Some((Detector::Marker, settings.quarantine)),
            Err(e) => {
                went_down(node, was, &e);
                return;
            }
        },
    };
    if let Some((detector, duration)) = detected {
        if settings.delayed_restart {
            tracing::warn!(
                node = node.name(),
                detector = detector.as_str(),
                quarantine = ?duration,
                run_id = identity.as_ref().map(|i| i.run_id.as_str()),
                "restart detected: quarantined, no locks on it until its old keys have expired"
            );
            node.quarantine(Instant::now() + duration, detector);
            node.restart_detected(detector);
        } else {
            tracing::warn!(
                node = node.name(),
                detector = detector.as_str(),
                "restart detected; delayed_restart is off, so it takes part in locks at once"
            );
            node.restart_detected(detector);
        }
    }
    node.set_identity(identity.clone());
    node.record_probe(latency);
    if reconnected {
        check_topology(node, &conn, settings).await;
        node.install(conn);
        tracing::info!(
            node = node.name(),
            ?latency,
            state = node.state().as_str(),
            "node answers"
        );
    }
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
        _ => None,
    }
}

fn went_down(node: &Node, was: NodeState, error: &crate::redlock::NodeError) {
    if was != NodeState::Down {
        // The error itself was logged (once per kind) where it happened.
        tracing::warn!(node = node.name(), "node down");
    }
    tracing::debug!(node = node.name(), error = %error, "probe failed");
    node.disconnect(error);
}

/// Checks a master that (re)connected for setups that break Redlock's
/// assumptions, and records them as warnings on the node.
async fn check_topology(node: &Node, conn: &MultiplexedConnection, settings: &HealthSettings) {
    let info = node.info(conn).await.ok().flatten().unwrap_or_default();
    let appendonly = node.config_get(conn, "appendonly").await;
    let appendfsync = node.config_get(conn, "appendfsync").await;
    let save = node.config_get(conn, "save").await;
    let persistence = persistence_mode(
        appendonly.as_deref(),
        appendfsync.as_deref(),
        save.as_deref(),
    );
    let mut warnings = topology_warnings(&info);
    if !settings.delayed_restart && persistence.as_deref() != Some("aof always") {
        warnings.push(format!(
            "delayed restart is off and persistence is {}: a crash can lose held locks",
            persistence.as_deref().unwrap_or("unknown")
        ));
    }
    tracing::info!(
        node = node.name(),
        persistence = persistence.as_deref().unwrap_or("unknown"),
        "persistence mode"
    );
    for warning in &warnings {
        tracing::warn!(node = node.name(), warning = %warning, "topology");
    }
    node.set_topology(warnings, persistence);
}

/// For each node, the other configured nodes that reach the same server
/// (same `run_id`): their votes would count twice. `run_ids[i]` belongs to
/// `names[i]`.
pub fn shared_servers(names: &[&str], run_ids: &[Option<&str>]) -> Vec<Vec<String>> {
    run_ids
        .iter()
        .enumerate()
        .map(|(i, mine)| {
            run_ids
                .iter()
                .enumerate()
                .filter(|&(j, theirs)| j != i && mine.is_some() && theirs == mine)
                .map(|(j, _)| names[j].to_string())
                .collect()
        })
        .collect()
}

/// Warnings from one master's `INFO`.
pub fn topology_warnings(info: &HashMap<String, String>) -> Vec<String> {
    let mut warnings = Vec::new();
    if info.get("role").map(String::as_str) == Some("slave") {
        warnings.push(
            "replica (role:slave): Redlock needs independent masters; writes fail or are lost on failover"
                .to_string(),
        );
    }
    if let Some(policy) = info.get("maxmemory_policy") {
        if policy.starts_with("allkeys-") {
            warnings.push(format!(
                "maxmemory-policy {policy} may evict lock keys; use noeviction or a volatile-* policy"
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
        let info: HashMap<String, String> =
            [("role", "slave"), ("maxmemory_policy", "allkeys-lru")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let warnings = topology_warnings(&info);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("replica (role:slave)"));
        assert!(warnings[1].contains("allkeys-lru"));
        let fine: HashMap<String, String> =
            [("role", "master"), ("maxmemory_policy", "noeviction")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
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
