//! The Markdown report: a summary table (peers as rows, workloads as
//! columns, each cell with its ratio to the agent), the targets with met or
//! missed, one detail table per workload, and the environment. W1's socket
//! floor (what two bare round trips cost beside the lock) is in [`floor`];
//! W9 (masters as Redis Clusters, with its projection per shard) in
//! [`clusters`]; W14 (the CPU per cycle of each process, and the agent's
//! overhead as a sidecar at a fixed rate) in [`cost`], with the `Cost`
//! of a cycle both read.
//!
//! Here: [`render`], the cells' helpers and the environment. The summary is
//! in [`summary`], the targets in [`targets`], and each workload's table in
//! its own module: [`uncontended`] (W1, with W5's and W6's pairs),
//! [`hot_key`] (W2), [`degraded`] (W3), [`limit`] (W4), [`processes`] (W7),
//! [`idle_connections`] (W8).

mod clusters;
mod cost;
mod degraded;
mod fleet;
mod floor;
mod hot_key;
mod idle_connections;
mod limit;
mod modes;
mod multi;
mod primitives;
mod processes;
mod summary;
mod targets;
#[cfg(test)]
mod tests;
mod traces;
mod uncontended;

use std::fmt::Write;

use crate::cluster::NODE_TIMEOUT_MS;
use crate::peers::Peer;
use crate::plan::{Results, Run, Workload};
use crate::spec::Report;
use degraded::degraded;
use hot_key::hot_key;
use idle_connections::idle_connections;
use limit::limit;
use processes::processes;
use summary::summary;
use targets::targets;
use uncontended::{fence_cost, marker_check, uncontended};

/// The machine and the versions, for the header.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    pub date: String,
    pub cores: usize,
    pub cpu: String,
    pub kernel: String,
    pub agent: String,
    pub tools: Vec<(String, String)>,
    pub command: String,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub smoke: bool,
}

fn rate(r: &Report) -> f64 {
    if r.window_s > 0.0 {
        r.cycles as f64 / r.window_s
    } else {
        0.0
    }
}

fn num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn ratio(x: f64, agent: Option<f64>) -> String {
    match agent {
        Some(a) if a > 0.0 => {
            let r = x / a;
            if r >= 10.0 {
                format!("{r:.0}×")
            } else {
                format!("{r:.2}×")
            }
        }
        _ => "-".to_string(),
    }
}

/// "n/a: why" for a missing result, in one line.
fn na(run: Option<&Run>) -> String {
    match run.map(|r| &r.result) {
        None => "not run".to_string(),
        Some(Ok(_)) => String::new(),
        Some(Err(e)) => format!("n/a: {}", one_line(e)),
    }
}

fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim();
    let mut line = line.replace('|', "/");
    if line.len() > 90 {
        line.truncate(
            line.char_indices()
                .take_while(|(i, _)| *i < 90)
                .last()
                .map_or(0, |(i, c)| i + c.len_utf8()),
        );
        line.push('…');
    }
    line
}

/// What a run's failures look like in a cell, if any.
fn trouble(r: &Report) -> String {
    let mut parts = Vec::new();
    if r.stuck > 0 {
        parts.push(format!(
            "{} of {} clients stuck (no timeout)",
            r.stuck, r.clients
        ));
    }
    if r.errors > 0 {
        parts.push(format!(
            "{} errors: {}",
            r.errors,
            one_line(r.error_sample.as_deref().unwrap_or("?"))
        ));
    }
    if r.overlaps > 0 {
        parts.push(format!("{} OVERLAPPING GRANTS", r.overlaps));
    }
    parts.join("; ")
}

/// A summary cell: the value, its ratio to the agent, and any failure.
fn cell(
    results: &Results,
    workload: Workload,
    peer: Peer,
    value: impl Fn(&Report) -> Option<f64>,
    unit: &str,
) -> String {
    let run = results.find(workload, peer);
    let Some(Ok(report)) = run.map(|r| &r.result) else {
        return na(run);
    };
    if report.cycles == 0 {
        let why = trouble(report);
        return if why.is_empty() {
            "no grant".to_string()
        } else {
            format!("no grant ({why})")
        };
    }
    let agent = results
        .find(workload, Peer::Agent)
        .and_then(|r| r.result.as_ref().ok())
        .filter(|r| r.cycles > 0)
        .and_then(&value);
    let mut text = match value(report) {
        Some(v) if peer == Peer::Agent => format!("{}{unit}", num(v)),
        Some(v) => format!("{}{unit} ({})", num(v), ratio(v, agent)),
        None if report.acquire_ms.count == 0 => "no grant in the window".to_string(),
        None => "-".to_string(),
    };
    if report.errors > 0 {
        let _ = write!(text, ", {} errors", report.errors);
    }
    if report.stuck > 0 {
        let _ = write!(text, ", {} stuck", report.stuck);
    }
    text
}

fn handoff_p50(r: &Report) -> Option<f64> {
    r.handoff_ms.as_ref().filter(|h| h.count > 0).map(|h| h.p50)
}

fn acquire_max(r: &Report) -> Option<f64> {
    (r.acquire_ms.count > 0).then_some(r.acquire_ms.max)
}

fn hot(clients: usize, tuned: bool) -> Workload {
    Workload::Hot { clients, tuned }
}

/// The whole report.
pub fn render(results: &Results, env: &Environment, peers: &[Peer]) -> String {
    let mut md = String::new();
    let title = if env.smoke {
        "redlock-agent benchmark (smoke: agent only, not figures)"
    } else {
        "redlock-agent benchmark"
    };
    let _ = writeln!(md, "# {title}\n");
    let _ = writeln!(
        md,
        "{} · {} cores ({}) · Linux {} · {} s per run after {} s warm-up · `{}`\n",
        env.date,
        env.cores,
        env.cpu,
        env.kernel,
        num(env.duration_s),
        num(env.warmup_s),
        env.command
    );
    let _ = writeln!(
        md,
        "Five local masters (redis {}), shared by every peer in the same run; each driver runs alone \
         in its own process. Ratios are to the agent in the same column: above 1× is more cycles/s \
         for throughput, and slower for latency.\n",
        results.redis_version
    );

    summary(&mut md, results, peers);
    targets(&mut md, results);
    uncontended(&mut md, results, peers);
    marker_check(&mut md, results);
    fence_cost(&mut md, results);
    hot_key(&mut md, results, peers);
    degraded(&mut md, results, peers);
    limit(&mut md, results);
    processes(&mut md, results);
    idle_connections(&mut md, results);
    clusters::section(&mut md, results, env);
    fleet::section(&mut md, results);
    primitives::section(&mut md, results);
    traces::section(&mut md, results);
    multi::section(&mut md, results);
    modes::section(&mut md, results);
    cost::section(&mut md, results);
    environment(&mut md, results, env, peers);
    md
}

fn status(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**MISSED**",
        None => "not measured",
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn environment(md: &mut String, results: &Results, env: &Environment, peers: &[Peer]) {
    let _ = writeln!(
        md,
        "## Environment and versions\n\n| what | version |\n|---|---|"
    );
    let _ = writeln!(md, "| cores | {} ({}) |", env.cores, env.cpu);
    let _ = writeln!(md, "| redlock-agent | {} |", env.agent);
    let _ = writeln!(md, "| redis-server | {} |", results.redis_version);
    for &peer in peers {
        if peer == Peer::Agent {
            continue;
        }
        let library = results
            .runs
            .iter()
            .filter(|r| r.peer == peer.name())
            .find_map(|r| r.result.as_ref().ok().map(|r| r.library.clone()))
            .unwrap_or_else(|| na(results.runs.iter().find(|r| r.peer == peer.name())));
        let _ = writeln!(md, "| {} | {} |", peer.name(), library);
    }
    for (tool, version) in &env.tools {
        let _ = writeln!(md, "| {tool} | {version} |");
    }
    let _ = writeln!(
        md,
        "\nSettings: TTL 10 s for every peer; the agent with `node_timeout: {NODE_TIMEOUT_MS}ms` and \
         `delayed_restart: {{enabled: false}}` (this run starts the masters itself and restarts one; quarantine \
         would only keep the restarted master out, it has no place in a throughput figure), its other settings \
         at their defaults (one worker thread: `agent.workers: 1`). \"Tuned\" gives every \
         peer a 10 ms retry delay (jitter 10 ms where it has one) and, where it has a retry budget, no limit.\n"
    );
}
