//! Cluster mode: its agent settings and masters, its nemesis run and its
//! deterministic control (a lock's shards failed over to frozen replicas).

use std::time::Duration;

use super::{control, ending, intrusion, nemesis, Control, Harness, Options, Report};
use crate::client::{self};
use crate::clock::Mono;
use crate::cluster::{AgentSettings, Topology};
use crate::nemesis::NemesisReport;
use crate::workload::Phase;

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

/// The cluster control scenario ([`Options::cluster_control`]), up to
/// `rounds` times (without the marker check, until the first violation).
pub(super) async fn cluster_control(
    options: &Options,
    control: Control,
    rounds: usize,
) -> Result<Report, String> {
    let harness = Harness::start(options).await?;
    let resource = options.plan.resources[0].clone();
    let key = format!("{}{resource}", options.settings.key_prefix);
    let slot = redlock_wire::keys::key_slot(key.as_bytes());
    let majority: Vec<usize> = (0..options.masters / 2 + 1).collect();
    let clients = harness.cluster.clients().await;
    let (first, second) = (clients[0].clone(), clients[1 % clients.len()].clone());
    let ttl_ms = options.plan.ttl_ms.0;
    let mut report = NemesisReport::default();
    for round in 1..=rounds {
        harness.phase.set(Phase::Faulted);
        let begun = futures::future::join_all(majority.iter().map(|&j| {
            let m = harness.cluster.masters[j].clone();
            async move { (m.begin_failover(slot).await, m) }
        }))
        .await;
        let mut lagging = Vec::new();
        for (r, m) in begun {
            match r {
                Ok(shard) => lagging.push((m, shard)),
                Err(e) => report.skipped.push(format!("begin failover: {e}")),
            }
        }
        // The holder: written on the primaries whose replicas are frozen.
        // A later round waits for the slot's quarantine from the one before.
        let wait = Some(options.settings.quarantine() + Duration::from_secs(2));
        let holder =
            match intrusion::take(&harness, (&first, 0), &resource, "holder", ttl_ms, wait).await {
                Ok(holder) => Some(holder),
                Err(e) => {
                    report
                        .skipped
                        .push(format!("round {round}: the holder: {e}"));
                    None
                }
            };
        let promoted =
            futures::future::join_all(lagging.iter().map(|(m, shard)| async move {
                (m.name.clone(), m.finish_failover(*shard).await)
            }))
            .await;
        let mut names = Vec::new();
        for (name, r) in promoted {
            match r {
                Ok(()) => names.push(name),
                Err(e) => report
                    .skipped
                    .push(format!("finish failover of {name}: {e}")),
            }
        }
        let Some((holder_id, grant, granted)) = holder else {
            break;
        };
        report.faults.push(crate::nemesis::FaultRecord {
            kind: control.fault,
            at: Mono::now(),
            detail: format!(
                "{}: the shard of slot {slot} promoted its replica without the lock on {resource}",
                names.join(",")
            ),
        });
        // The holder works through 80% of its validity; meanwhile a second
        // client tries the lock through the other agent.
        let leaves = granted.plus_ms(client::ms(grant.validity) * 4 / 5);
        intrusion::intrude(&harness, (&second, 1), &resource, leaves).await;
        // The holder left when its work was done, even if the harness
        // records it later.
        while Mono::now() < leaves {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let released = first.release(&resource, &grant.token).await;
        harness.checker.exit(holder_id, leaves, ending(released));
        harness.phase.set(Phase::Quiet);
        if !control.protected && !harness.checker.findings(Mono::now()).violations.is_empty() {
            break;
        }
    }
    Ok(harness.finish(options, report).await)
}
