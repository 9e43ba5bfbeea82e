//! The control runs: a majority struck while a lock (or permits, or a
//! leadership) is held, a cluster's shards failed over to frozen
//! replicas, and the fence control; each until its verdict can be given.

use std::time::Duration;

use super::{
    intrusion, multi, shared, Control, FenceControl, Harness, Options, Property, Report,
    EVICTION_CONTROL_LEFT_MS, EVICTION_CONTROL_POLICIES, EVICTION_CONTROL_WRITES,
};
use crate::checker::{Ending, Findings};
use crate::client::{self, Answer};
use crate::clock::Mono;
use crate::cluster::Cluster;
use crate::nemesis::{FaultKind, NemesisReport};
use crate::workload::Phase;

/// Fenced grants each agent of the fence control makes before it stops
/// (write-back on).
pub(super) const FENCE_CONTROL_GRANTS: usize = 20;

/// The control scenario: up to `rounds` restarts (or flushes, or
/// evictions, as `options.control` says) of a majority while a lock is held
/// with time left; without the protection it stops at the first violation.
/// An eviction strikes a majority of the masters that hold the holder's
/// lock then, and is undone (`maxmemory` and the policy restored, the cache
/// keys deleted) as soon as it is gone from each; a round where it was not
/// there, or did not go by eviction, is reported as not injected.
///
/// # Errors
/// When `options` is not a control scenario, or the cluster cannot be
/// started.
pub async fn control(options: &Options, rounds: usize) -> Result<Report, String> {
    if let Some(fence) = options.fence_control {
        return fence_control(options, fence).await;
    }
    if let Some(multi) = options.multi {
        return multi::run(options, multi).await;
    }
    if let Some(shared) = options.shared {
        return shared::run(options, shared).await;
    }
    let control = options
        .control
        .ok_or_else(|| format!("{} is not a control scenario", options.name))?;
    if control.fault == FaultKind::ShardFailover {
        return cluster_control(options, control, rounds).await;
    }
    if intrusion::is_intrusion(control.fault) {
        return intrusion::control(options, control).await;
    }
    let harness = Harness::start(options).await?;
    let resource = options.control_target();
    if control.fault == FaultKind::RestartMajority && !control.protected {
        // The leak detector must see too: a key without a TTL under the prefix.
        // On the last master: the control restarts the first ones.
        let last = harness.cluster.masters.len() - 1;
        plant_leak(&harness.cluster.masters[last], &options.settings.key_prefix).await?;
    }
    let mut report = NemesisReport::default();
    let majority: Vec<usize> = (0..options.masters / 2 + 1).collect();
    let lock_key = format!("{}{resource}", options.settings.key_prefix);
    let left_ms = if control.fault == FaultKind::Evict {
        EVICTION_CONTROL_LEFT_MS
    } else {
        1000
    };
    for round in 1..=rounds {
        // A holder with at least a second of validity left (two for an
        // eviction).
        let deadline = Mono::now().plus_ms(10_000);
        while harness.checker.inside(&resource, left_ms) == 0 && Mono::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let held = harness.checker.inside(&resource, 0);
        harness.phase.set(crate::workload::Phase::Faulted);
        // An eviction strikes a majority of the masters the lock is on (a
        // master still quarantined from the round before may lack it).
        let holder = harness.checker.holders(&resource, left_ms).pop();
        if control.fault == FaultKind::Evict && holder.is_none() {
            // Nothing to evict: cache writes alone prove nothing.
            report
                .skipped
                .push(format!("round {round}: no holder with {left_ms}ms left"));
            harness.phase.set(crate::workload::Phase::Quiet);
            continue;
        }
        let majority = match (control.fault, &holder) {
            (FaultKind::Evict, Some(token)) => holding_majority(&harness.cluster, &lock_key, token)
                .await
                .unwrap_or_else(|| majority.clone()),
            _ => majority.clone(),
        };
        let policy = EVICTION_CONTROL_POLICIES[(round - 1) % EVICTION_CONTROL_POLICIES.len()];
        let tag = format!("control{round}");
        let hits = majority.iter().map(|&j| {
            let m = harness.cluster.masters[j].clone();
            let (tag, lock_key, holder) = (&tag, &lock_key, &holder);
            async move {
                let done = match control.fault {
                    FaultKind::FlushMajority => m.flush().await.map(|()| None),
                    FaultKind::Evict => {
                        let until = Some(lock_key.as_str()).zip(holder.as_deref());
                        m.evict(policy, tag, EVICTION_CONTROL_WRITES, until)
                            .await
                            .map(Some)
                    }
                    _ => m.restart().await.map(|()| None),
                };
                (m, done)
            }
        });
        let mut struck = true;
        let mut evictions = Vec::new();
        for (m, r) in futures::future::join_all(hits).await {
            match r {
                Ok(None) => {}
                Ok(Some(eviction)) => {
                    struck &= eviction.gone == Some(true) && eviction.evicted > 0;
                    evictions.push((m, eviction));
                }
                Err(e) => {
                    struck = false;
                    report
                        .skipped
                        .push(format!("{}: {e}", control.fault.as_str()));
                }
            }
        }
        // Undone at once: the lock key is gone, and the agents' own writes
        // would keep the masters evicting (and quarantined) otherwise.
        for (m, eviction) in &evictions {
            if let Err(e) = m.end_eviction(eviction).await {
                report
                    .skipped
                    .push(format!("end of the eviction on {}: {e}", m.name));
            }
        }
        let names: Vec<&str> = majority
            .iter()
            .map(|&j| harness.cluster.masters[j].name.as_str())
            .collect();
        let detail = if evictions.is_empty() {
            format!("{} while {held} held {resource}", names.join(","))
        } else {
            let each: Vec<String> = evictions.iter().map(|(_, e)| e.to_string()).collect();
            format!("{} while {held} held {resource}", each.join("; "))
        };
        if struck || control.fault != FaultKind::Evict {
            report.faults.push(crate::nemesis::FaultRecord {
                kind: control.fault,
                at: Mono::now(),
                detail,
            });
        } else {
            report.skipped.push(format!(
                "round {round}: {} did not strike: {detail}",
                control.fault.as_str()
            ));
        }
        // Let waiting clients try, and the old locks run out.
        tokio::time::sleep(options.settings.quarantine() + Duration::from_millis(500)).await;
        harness.phase.set(crate::workload::Phase::Quiet);
        if !control.protected && found(options.property, &harness.checker.findings(Mono::now())) {
            break;
        }
    }
    Ok(harness.finish(options, report).await)
}

/// What an unprotected control run of `property` must find: violations
/// (a lock), an excess (a semaphore), two leaders at once (an election).
fn found(property: Property, findings: &Findings) -> bool {
    match property {
        Property::Lock => !findings.violations.is_empty(),
        Property::Semaphore => !findings.primitives.semaphore_excess.is_empty(),
        Property::Election => !findings.primitives.leader_overlaps.is_empty(),
    }
}

/// The first majority of the masters where `key` holds `token` now (read
/// straight from them), or `None` when fewer do. A grant is written on a
/// quorum, not always on every master, and a waiter's vote on a master the
/// holder missed is there a moment before the waiter releases it.
async fn holding_majority(cluster: &Cluster, key: &str, token: &str) -> Option<Vec<usize>> {
    let majority = cluster.masters.len() / 2 + 1;
    let reads = cluster.masters.iter().map(|m| m.get(key));
    let holding: Vec<usize> = futures::future::join_all(reads)
        .await
        .into_iter()
        .enumerate()
        .filter(|(_, value)| value.as_ref().is_ok_and(|v| v.as_deref() == Some(token)))
        .map(|(j, _)| j)
        .take(majority)
        .collect();
    (holding.len() == majority).then_some(holding)
}

/// How a section ended, from its release's answer.
pub(super) fn ending(released: Result<Answer<bool>, client::Error>) -> Ending {
    match released {
        Ok(Answer::Ok(released)) => Ending::Released { released },
        Ok(Answer::Refused { .. }) => Ending::Released { released: false },
        Err(_) => Ending::ReleaseUnanswered,
    }
}

/// The fence control scenario: the clients run until each agent made
/// [`FENCE_CONTROL_GRANTS`] fenced grants (write-back on) or fences were
/// found out of order (off), or `options.duration` passed.
async fn fence_control(options: &Options, fence: FenceControl) -> Result<Report, String> {
    let harness = Harness::start(options).await?;
    let deadline = Mono::now().plus(options.duration);
    while Mono::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let enough = (0..options.agents).all(|a| harness.checker.fenced(a) >= FENCE_CONTROL_GRANTS);
        if enough && fence.writeback {
            break;
        }
        if enough {
            let found = harness.checker.findings(Mono::now());
            let terms = !found.primitives.term_inversions.is_empty();
            let fences = !found.fences.out_of_order.is_empty()
                || !found.fences.out_of_order_across.is_empty();
            if (options.property == Property::Election && terms)
                || (options.property != Property::Election && fences)
            {
                break;
            }
        }
    }
    Ok(harness.finish(options, NemesisReport::default()).await)
}

/// `SET <prefix>planted-leak x` without a TTL on `master`.
async fn plant_leak(master: &crate::cluster::Master, prefix: &str) -> Result<(), String> {
    let client = redis::Client::open(master.url()).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    redis::cmd("SET")
        .arg(format!("{prefix}{PLANTED}"))
        .arg("planted-by-the-control-run")
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| e.to_string())
}

/// The resource of the key the control run plants without a TTL.
pub const PLANTED: &str = "planted-leak";

/// The cluster control scenario ([`Options::cluster_control`]), up to
/// `rounds` times (without the marker check, until the first violation).
async fn cluster_control(
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
