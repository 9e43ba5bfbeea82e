//! The summary table (peers as rows, workloads as columns, each cell with
//! its ratio to the agent) and the lines under it.

use std::fmt::Write;

use super::clusters;
use super::processes::processes_summary;
use super::uncontended::{fence_runs, marker_runs};
use super::{acquire_max, cell, handoff_p50, hot, mib, num, rate, ratio};
use crate::peers::Peer;
use crate::plan::{Fault, Results, Run, Workload};
use crate::spec::Report;

/// A summary column: its title, workload, value and unit.
type Column = (
    &'static str,
    Workload,
    fn(&Report) -> Option<f64>,
    &'static str,
);

pub(super) fn summary(md: &mut String, results: &Results, peers: &[Peer]) {
    let _ = writeln!(md, "## Summary\n");
    let columns: Vec<Column> = vec![
        (
            "W1 uncontended, 1 client: cycles/s",
            Workload::Uncontended { clients: 1 },
            |r| Some(rate(r)),
            "",
        ),
        (
            "W1 uncontended, 64 clients: cycles/s",
            Workload::Uncontended { clients: 64 },
            |r| Some(rate(r)),
            "",
        ),
        (
            "W2 hot key, 16 clients, defaults: hand-off p50",
            hot(16, false),
            handoff_p50,
            " ms",
        ),
        (
            "W2 hot key, 64 clients, defaults: hand-off p50",
            hot(64, false),
            handoff_p50,
            " ms",
        ),
        (
            "W2 hot key, 16 clients, tuned: hand-off p50",
            hot(16, true),
            handoff_p50,
            " ms",
        ),
        (
            "W2 hot key, 64 clients, tuned: hand-off p50",
            hot(64, true),
            handoff_p50,
            " ms",
        ),
        (
            "W3 one master killed: acquire max",
            Workload::Degraded {
                fault: Fault::Killed,
                clients: 1,
            },
            acquire_max,
            " ms",
        ),
        (
            "W3 one master frozen: acquire max",
            Workload::Degraded {
                fault: Fault::Frozen,
                clients: 1,
            },
            acquire_max,
            " ms",
        ),
    ];
    let present: Vec<_> = columns
        .into_iter()
        .filter(|(_, w, _, _)| results.runs.iter().any(|r| r.workload == *w))
        .collect();
    if !present.is_empty() {
        summary_table(md, results, peers, &present);
    }
    summary_lines(md, results, &present);
}

/// The summary table: a row per peer, a column per workload that ran.
fn summary_table(md: &mut String, results: &Results, peers: &[Peer], present: &[Column]) {
    let _ = write!(md, "| peer |");
    for (name, ..) in present {
        let _ = write!(md, " {name} |");
    }
    let _ = write!(md, "\n|---|");
    for _ in present {
        let _ = write!(md, "---|");
    }
    md.push('\n');
    for &peer in peers {
        let _ = write!(md, "| {} |", peer.label());
        for (_, workload, value, unit) in present {
            let _ = write!(md, " {} |", cell(results, *workload, peer, value, unit));
        }
        md.push('\n');
    }
}

/// The lines under the summary table: hand-off's meaning, W4 .. W8 in a
/// sentence each.
fn summary_lines(md: &mut String, results: &Results, present: &[Column]) {
    if present
        .iter()
        .any(|(_, w, ..)| matches!(w, Workload::Hot { .. }))
    {
        let _ = writeln!(
            md,
            "\nHand-off counts the next grant to any client. A library whose releaser takes the lock straight \
             back hands off mostly to itself: see W2's \"to another client\", max wait and Jain columns."
        );
    }
    let costs: Vec<String> = [1, 8, 64]
        .into_iter()
        .filter_map(|clients| {
            let (off, on) = marker_runs(results, clients)?;
            Some(format!(
                "{} at {clients} client(s) ({} vs {} cycles/s)",
                ratio(rate(on), Some(rate(off))),
                num(rate(on)),
                num(rate(off))
            ))
        })
        .collect();
    if !costs.is_empty() {
        let _ = writeln!(
            md,
            "
W5 in-vote marker check, uncontended throughput with it on / off (plain `SET NX`): {}.",
            costs.join(", ")
        );
    }
    let fenced: Vec<String> = [1, 8, 64]
        .into_iter()
        .filter_map(|clients| {
            let (plain, fenced) = fence_runs(results, clients)?;
            let per_grant = |fence| {
                results
                    .find(Workload::Fence { clients, fence }, Peer::Agent)
                    .and_then(Run::commands_per_grant)
            };
            Some(format!(
                "{} cycles/s at {clients} client(s) ({} vs {}), {} Redis commands per grant ({} vs {})",
                ratio(rate(fenced), Some(rate(plain))),
                num(rate(fenced)),
                num(rate(plain)),
                match (per_grant(true), per_grant(false)) {
                    (Some(on), Some(off)) if off > 0.0 => format!("{:.2}×", on / off),
                    _ => "-".into(),
                },
                per_grant(true).map_or("-".into(), num),
                per_grant(false).map_or("-".into(), num),
            ))
        })
        .collect();
    if !fenced.is_empty() {
        let _ = writeln!(
            md,
            "\nW6 fenced acquire / plain acquire: {}.",
            fenced.join("; ")
        );
    }
    if let Some(line) = processes_summary(results) {
        let _ = writeln!(md, "\n{line}");
    }
    if let Some(line) = clusters::summary_line(results) {
        let _ = writeln!(md, "\n{line}");
    }
    if let Some(Ok(i)) = &results.idle {
        let _ = writeln!(
            md,
            "\nW8 idle connections: agent RSS {} before, {} with {} open ({:.1} KiB each), {} after they closed{}.",
            mib(i.rss_before_kib),
            mib(i.rss_open_kib),
            i.answered,
            i.kib_per_connection(),
            mib(i.rss_after_kib),
            if i.settled { "" } else { " (still moving)" }
        );
    }
    if let Some(Ok(limit)) = &results.limit {
        let agent = results
            .find(Workload::Uncontended { clients: 64 }, Peer::Agent)
            .and_then(|r| r.result.as_ref().ok())
            .map(rate);
        if let Some(agent) = agent {
            let _ = writeln!(
                md,
                "\nW4 limit: the masters served {} cycles/s under redis-benchmark; the agent's W1 64-client rate is {:.0}% of it.",
                num(limit.cycles_per_s),
                100.0 * agent / limit.cycles_per_s
            );
        }
    }
    md.push('\n');
}
