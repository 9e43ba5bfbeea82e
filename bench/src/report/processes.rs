//! W7's section of the report: the agent's and pottery's many client
//! processes, their cycles and the masters' connections.

use std::fmt::Write;

use super::uncontended::{throughput_cells, trouble_or_zero};
use super::{na, num, rate, ratio};
use crate::peers::Peer;
use crate::plan::{Results, Run, Workload, PROCESSES};

/// W7's pair: the agent's run and pottery's, when both produced a report.
fn processes_runs(results: &Results) -> Option<(usize, &Run, &Run)> {
    [PROCESSES, 4].into_iter().find_map(|clients| {
        let w = Workload::Processes { clients };
        Some((
            clients,
            results.find(w, Peer::Agent)?,
            results.find(w, Peer::Pottery)?,
        ))
    })
}

fn connections(run: &Run) -> String {
    run.master_connections
        .map_or("-".into(), |n| format!("{n:+}"))
}

pub(super) fn processes_summary(results: &Results) -> Option<String> {
    let (clients, agent, pottery) = processes_runs(results)?;
    let (Ok(a), Ok(p)) = (&agent.result, &pottery.result) else {
        return None;
    };
    Some(format!(
        "W7 {clients} Python processes, one client each: agent (standard-library client) {} cycles/s, \
         pottery {} cycles/s: agent / pottery {}; the masters' connections during the run, over the count \
         before it: {} for the agent (its own), {} for pottery.",
        num(rate(a)),
        num(rate(p)),
        ratio(rate(a), Some(rate(p))),
        connections(agent),
        connections(pottery)
    ))
}

pub(super) fn processes(md: &mut String, results: &Results) {
    let runs: Vec<&Run> = results
        .runs
        .iter()
        .filter(|r| matches!(r.workload, Workload::Processes { .. }))
        .collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## W7: a Python process per client, the way most users run\n\nEach client is a process of its own, \
         one Python interpreter looping acquire + release on its own resource. The agent's processes run under \
         `python3 -I` (standard library only) and use the repository's client, \
         `clients/python/src/redlock_client`, as it is (it opens a connection on the socket per call); pottery's \
         each have their own five redis-py clients and one `Redlock`. Latencies in ms, p50 / p99 / p99.9. \
         Master connections: the most client connections the five masters had open during the run (`INFO \
         clients` `connected_clients`, summed, sampled every 100 ms) minus the same sum just before it; for the \
         agent, before its agent (one of its own for this run) started, so the agent's connections are the \
         figure.\n\n\
         | peer | processes | cycles/s | ×agent | acquire | acquire + release | Redis commands / grant | master connections | errors |\n|---|---|---|---|---|---|---|---|---|"
    );
    let agent = runs
        .iter()
        .find(|r| r.peer == Peer::Agent.name())
        .and_then(|r| r.result.as_ref().ok())
        .map(rate);
    for run in runs {
        let clients = match run.workload {
            Workload::Processes { clients } => clients,
            _ => continue,
        };
        match &run.result {
            Ok(r) => {
                let _ = writeln!(
                    md,
                    "| {} | {clients} | {} | {} | {} |",
                    run.peer,
                    throughput_cells(run, r, (run.peer != Peer::Agent.name()).then_some(agent)),
                    connections(run),
                    trouble_or_zero(r)
                );
            }
            Err(_) => {
                let _ = writeln!(
                    md,
                    "| {} | {clients} | {} | | | | | | |",
                    run.peer,
                    na(Some(run))
                );
            }
        }
    }
    md.push('\n');
}
