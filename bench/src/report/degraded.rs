//! W3's detail table in the report: every peer with a master faulted.

use std::fmt::Write;

use super::uncontended::{pct, trouble_or_zero};
use super::{na, num, rate};
use crate::peers::Peer;
use crate::plan::{Fault, Results, Run, Workload};

pub(super) fn degraded(md: &mut String, results: &Results, peers: &[Peer]) {
    let runs: Vec<&Run> = results
        .runs
        .iter()
        .filter(|r| matches!(r.workload, Workload::Degraded { .. }))
        .collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## W3: degraded (one client, distinct keys)\n\nMaster r5 is killed (SIGKILL: connections refused) or frozen \
         (SIGSTOP: connections accepted, never answered) as the measured window opens, after a healthy warm-up, \
         while the client runs; it is brought back after the run. Latencies in ms; the max includes the moment of \
         the fault. \"healthy max\" is the same peer's W1 one-client acquire max.\n\n\
         | peer | fault | cycles/s | acquire p50 / p99 / p99.9 | acquire max | healthy max | acquire + release p50 / p99 / max | errors, stuck |\n|---|---|---|---|---|---|---|---|"
    );
    for fault in [Fault::Killed, Fault::Frozen] {
        let w = Workload::Degraded { fault, clients: 1 };
        for &peer in peers {
            let Some(run) = results.find(w, peer) else {
                continue;
            };
            let healthy = results
                .find(Workload::Uncontended { clients: 1 }, peer)
                .and_then(|r| r.result.as_ref().ok())
                .map(|r| r.acquire_ms.max);
            let fault_name = match fault {
                Fault::Killed => "killed",
                Fault::Frozen => "frozen",
            };
            match &run.result {
                Ok(r) => {
                    let _ = writeln!(
                        md,
                        "| {} | {fault_name} | {} | {} | {} | {} | {} | {} |",
                        peer.name(),
                        num(rate(r)),
                        pct(&r.acquire_ms),
                        if r.acquire_ms.count > 0 {
                            num(r.acquire_ms.max)
                        } else {
                            "-".into()
                        },
                        healthy.map_or("-".into(), num),
                        if r.cycle_ms.count > 0 {
                            format!(
                                "{} / {} / {}",
                                num(r.cycle_ms.p50),
                                num(r.cycle_ms.p99),
                                num(r.cycle_ms.max)
                            )
                        } else {
                            "-".into()
                        },
                        trouble_or_zero(r)
                    );
                }
                Err(_) => {
                    let _ = writeln!(
                        md,
                        "| {} | {fault_name} | {} | | | | | |",
                        peer.name(),
                        na(Some(run))
                    );
                }
            }
        }
    }
    md.push('\n');
}
