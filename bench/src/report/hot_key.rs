//! W2's detail table in the report: every peer's clients on one hot key.

use std::fmt::Write;

use super::uncontended::trouble_or_zero;
use super::{hot, na, num, rate};
use crate::peers::Peer;
use crate::plan::{Results, Run, Workload};
use crate::stats;

pub(super) fn hot_key(md: &mut String, results: &Results, peers: &[Peer]) {
    let runs: Vec<&Run> = results
        .runs
        .iter()
        .filter(|r| matches!(r.workload, Workload::Hot { .. }))
        .collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## W2: hot key\n\nEvery client locks the same resource, waits until it gets it, releases at once. \
         Hand-off: from the holder starting its release to the next grant, in ms; \"to another client\" counts only \
         grants to a client other than the releaser, and the share of hand-offs that did. Max wait: the longest \
         acquire (waits cut at the window's end included). Jain: fairness of grants over clients (1 = equal). \
         Wasted commands / grant: Redis commands per grant beyond the same peer's uncontended one-client cost.\n\n\
         | peer | settings | clients | cycles/s | hand-off p50 / p99 | to another client p50 / p99 (share) | max wait | Jain | longest gap | commands / grant | wasted / grant | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for tuned in [false, true] {
        for clients in [8, 16, 64] {
            let w = hot(clients, tuned);
            for &peer in peers {
                let Some(run) = results.find(w, peer) else {
                    continue;
                };
                let baseline = results
                    .find(Workload::Uncontended { clients: 1 }, peer)
                    .and_then(Run::commands_per_grant);
                match &run.result {
                    Ok(r) => {
                        let handoff = r
                            .handoff_ms
                            .as_ref()
                            .filter(|h| h.count > 0)
                            .map_or("-".into(), |h| format!("{} / {}", num(h.p50), num(h.p99)));
                        let other = match (&r.handoff_other_ms, &r.handoff_ms) {
                            (Some(o), Some(all)) if o.count > 0 => format!(
                                "{} / {} ({:.0}%)",
                                num(o.p50),
                                num(o.p99),
                                100.0 * o.count as f64 / all.count.max(1) as f64
                            ),
                            _ => "-".into(),
                        };
                        let per_grant = run.commands_per_grant();
                        let wasted = per_grant.zip(baseline).map(|(c, b)| (c - b).max(0.0));
                        let _ = writeln!(
                            md,
                            "| {} | {} | {clients} | {} | {handoff} | {other} | {} ms | {} | {} ms | {} | {} | {} |",
                            peer.name(),
                            r.settings.replace('|', "/"),
                            num(rate(r)),
                            num(r.max_wait_ms),
                            stats::jain(&r.per_client_grants).map_or("-".into(), |j| format!("{j:.3}")),
                            r.longest_gap_ms.map_or("-".into(), num),
                            per_grant.map_or("-".into(), num),
                            wasted.map_or("-".into(), num),
                            trouble_or_zero(r)
                        );
                    }
                    Err(_) => {
                        let _ = writeln!(
                            md,
                            "| {} | {} | {clients} | {} | | | | | | | | |",
                            peer.name(),
                            if tuned { "tuned" } else { "defaults" },
                            na(Some(run))
                        );
                    }
                }
            }
        }
    }
    md.push('\n');
}
