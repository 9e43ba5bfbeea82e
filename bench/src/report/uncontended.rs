//! W1's detail table (uncontended cycles per peer) in the report, with the
//! W1 variant pairs through the agent: W5's marker check and W6's fence
//! cost, and the throughput cells they share with the other tables.

use std::fmt::Write;

use super::floor;
use super::{na, num, rate, ratio, trouble};
use crate::peers::Peer;
use crate::plan::{Results, Run, Workload};
use crate::spec::Report;

pub(super) fn pct(p: &crate::spec::Percentiles) -> String {
    if p.count == 0 {
        return "-".to_string();
    }
    format!("{} / {} / {}", num(p.p50), num(p.p99), num(p.p999))
}

pub(super) fn uncontended(md: &mut String, results: &Results, peers: &[Peer]) {
    let runs: Vec<&Run> = results
        .runs
        .iter()
        .filter(|r| matches!(r.workload, Workload::Uncontended { .. }))
        .collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## W1: uncontended (distinct keys)\n\nEach client locks its own resource, releases it, again. Latencies in ms, p50 / p99 / p99.9.\n\n\
         | peer | clients | cycles/s | ×agent | acquire | acquire + release | Redis commands / grant | errors |\n|---|---|---|---|---|---|---|---|"
    );
    for clients in [1, 8, 64] {
        let w = Workload::Uncontended { clients };
        let agent = results
            .find(w, Peer::Agent)
            .and_then(|r| r.result.as_ref().ok())
            .map(rate);
        for &peer in peers {
            let Some(run) = results.find(w, peer) else {
                continue;
            };
            match &run.result {
                Ok(r) => {
                    let _ = writeln!(
                        md,
                        "| {} | {clients} | {} | {} |",
                        peer.name(),
                        throughput_cells(run, r, (peer != Peer::Agent).then_some(agent)),
                        trouble_or_zero(r)
                    );
                }
                Err(_) => {
                    let _ = writeln!(
                        md,
                        "| {} | {clients} | {} | | | | | |",
                        peer.name(),
                        na(Some(run))
                    );
                }
            }
        }
    }
    md.push('\n');
    floor::section(md, results);
}

/// W5's pair of reports for `clients`: the marker check off, then on.
pub(super) fn marker_runs(results: &Results, clients: usize) -> Option<(&Report, &Report)> {
    let report = |check| {
        results
            .find(Workload::MarkerCheck { clients, check }, Peer::Agent)
            .and_then(|r| r.result.as_ref().ok())
            .filter(|r| r.cycles > 0)
    };
    report(false).zip(report(true))
}

pub(super) fn marker_check(md: &mut String, results: &Results) {
    if !results
        .runs
        .iter()
        .any(|r| matches!(r.workload, Workload::MarkerCheck { .. }))
    {
        return;
    }
    let _ = writeln!(
        md,
        "## W5: the in-vote marker check\n\nW1 for the agent only, through two agents over the same masters, one right \
         after the other: one started with `REDLOCK_TEST_NO_MARKER_CHECK=1` (its test-only switch: the vote is a plain \
         `SET NX PX`, as before the check existed) and one as deployed (the vote is a script that checks the \
         incarnation marker and sets the key in one step). Latencies in ms, p50 / p99 / p99.9; ratios are on / off. \
         Redis commands count the script's inner calls.\n\n\
         | clients | marker check | cycles/s | on / off | acquire | acquire + release | Redis commands / grant | errors |\n|---|---|---|---|---|---|---|---|"
    );
    for clients in [1, 8, 64] {
        let find = |check| results.find(Workload::MarkerCheck { clients, check }, Peer::Agent);
        paired_rows(md, clients, [("off", find(false)), ("on", find(true))]);
    }
    md.push('\n');
}

/// W6's pair of reports for `clients`: plain acquires, then fenced ones.
pub(super) fn fence_runs(results: &Results, clients: usize) -> Option<(&Report, &Report)> {
    let report = |fence| {
        results
            .find(Workload::Fence { clients, fence }, Peer::Agent)
            .and_then(|r| r.result.as_ref().ok())
            .filter(|r| r.cycles > 0)
    };
    report(false).zip(report(true))
}

pub(super) fn fence_cost(md: &mut String, results: &Results) {
    if !results
        .runs
        .iter()
        .any(|r| matches!(r.workload, Workload::Fence { .. }))
    {
        return;
    }
    let _ = writeln!(
        md,
        "## W6: a fenced acquire\n\nW1 for the agent only, through the same agent, one run right after the other: \
         plain acquires, then acquires with `\"fence\": true` (the vote also reads each master's fence counter, and a \
         second round writes the new fence back to the granting masters before the answer). Latencies in ms, \
         p50 / p99 / p99.9; ratios are fenced / plain. Redis commands count the scripts' inner calls.\n\n\
         | clients | acquire | cycles/s | fenced / plain | acquire | acquire + release | Redis commands / grant | errors |\n|---|---|---|---|---|---|---|---|"
    );
    for clients in [1, 8, 64] {
        let find = |fence| results.find(Workload::Fence { clients, fence }, Peer::Agent);
        paired_rows(
            md,
            clients,
            [("plain", find(false)), ("fenced", find(true))],
        );
    }
    md.push('\n');
}

/// The rows of one W1 variant pair through the agent (W5, W6): the first
/// run is the baseline (`1×`), the second's cycles/s is given as a ratio to
/// it. A run that is missing is left out; one that failed says why.
pub(super) fn paired_rows(md: &mut String, clients: usize, pair: [(&str, Option<&Run>); 2]) {
    let base = pair[0].1.and_then(|run| run.result.as_ref().ok()).map(rate);
    for (i, (which, run)) in pair.into_iter().enumerate() {
        let Some(run) = run else {
            continue;
        };
        match &run.result {
            Ok(r) => {
                let _ = writeln!(
                    md,
                    "| {clients} | {which} | {} | {} |",
                    throughput_cells(run, r, (i > 0).then_some(base)),
                    trouble_or_zero(r)
                );
            }
            Err(_) => {
                let _ = writeln!(md, "| {clients} | {which} | {} | | | | | |", na(Some(run)));
            }
        }
    }
}

/// A throughput row's middle cells: cycles/s, its ratio to `base` (`1×`
/// when `None`: the run is the base), acquire and acquire + release
/// percentiles, Redis commands per grant.
pub(super) fn throughput_cells(run: &Run, r: &Report, base: Option<Option<f64>>) -> String {
    format!(
        "{} | {} | {} | {} | {}",
        num(rate(r)),
        base.map_or("1×".into(), |base| ratio(rate(r), base)),
        pct(&r.acquire_ms),
        pct(&r.cycle_ms),
        run.commands_per_grant().map_or("-".into(), num)
    )
}

pub(super) fn trouble_or_zero(r: &Report) -> String {
    let t = trouble(r);
    if t.is_empty() {
        "0".into()
    } else {
        t
    }
}
