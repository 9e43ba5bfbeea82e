//! Cluster mode: its agent settings and masters, its nemesis run, and
//! its control runs in order (the control itself, a lock's shards failed
//! over to frozen replicas, is in [`super::control`]).

use std::time::Duration;

use super::{control, nemesis, Options, Report};
use crate::cluster::{AgentSettings, Topology};

/// Cluster mode's agent settings from `settings`: a longer node timeout
/// (and the TTLs it needs, ten times as long) and health interval. The
/// slot sweeps (markers at first sight, witnesses, readmission with each
/// slot's fencing counter read on every other master) run in requests of
/// many slots each, bounded by the node timeout; with 100 ms they timed
/// out on a busy 2-core machine running five clusters (before the sweeps
/// were batched per shard: it may be lowered again).
pub fn cluster_settings(settings: AgentSettings) -> AgentSettings {
    AgentSettings {
        node_timeout: CLUSTER_NODE_TIMEOUT,
        health_interval: CLUSTER_HEALTH_INTERVAL,
        default_ttl: settings.default_ttl.max(CLUSTER_NODE_TIMEOUT * 10),
        max_ttl: settings.max_ttl.max(CLUSTER_NODE_TIMEOUT * 10),
        ..settings
    }
}

/// The agents' `lock.node_timeout` in cluster mode.
pub const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// The agents' `health.interval` in cluster mode: each probe of a cluster
/// with slots due for readmission reads their counters on every master.
pub const CLUSTER_HEALTH_INTERVAL: Duration = Duration::from_millis(250);

/// Shards of each cluster master in cluster mode.
pub const CLUSTER_PRIMARIES: usize = 3;

/// Cluster mode's masters: [`CLUSTER_PRIMARIES`] primaries with one
/// replica each (the lagged failover needs it).
pub const CLUSTER_TOPOLOGY: Topology = Topology::Clusters {
    primaries: CLUSTER_PRIMARIES,
    replicas: 1,
};

/// The cluster mode's control runs, in order, one round each: a second
/// round would first wait for the readmission of the three failed-over
/// shards' slots, which takes longer than the quarantine on a busy machine.
pub fn cluster_cases(seed: u64, faults_bin: &std::path::Path) -> Vec<(Options, usize)> {
    vec![
        (
            Options::cluster_control(true, seed, faults_bin.to_path_buf()),
            1,
        ),
        (
            Options::cluster_control(false, seed, faults_bin.to_path_buf()),
            1,
        ),
    ]
}

/// How long the short mode's cluster nemesis runs.
pub const CLUSTER_SHORT_DURATION: Duration = Duration::from_secs(30);

/// Cluster mode: the nemesis run over cluster masters for `duration`, then
/// the cluster control runs ([`cluster_cases`]); each report is printed
/// and pushed to `reports` as it comes.
///
/// # Errors
/// When a run cannot start.
pub async fn cluster_mode(
    duration: Duration,
    seed: u64,
    faults_bin: &std::path::Path,
    reports: &mut Vec<Report>,
) -> Result<(), String> {
    let report = nemesis(&Options::cluster_nemesis(
        duration,
        seed,
        faults_bin.to_path_buf(),
    ))
    .await?;
    println!("{report}\n");
    reports.push(report);
    for (options, rounds) in cluster_cases(seed, faults_bin) {
        let report = control(&options, rounds).await?;
        println!("{report}\n");
        reports.push(report);
    }
    Ok(())
}
