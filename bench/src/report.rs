//! The Markdown report: a summary table (peers as rows, workloads as
//! columns, each cell with its ratio to the agent), the targets with met or
//! missed, one detail table per workload, and the environment. W1's socket
//! floor (what two bare round trips cost beside the lock) is in [`floor`];
//! W9 (masters as Redis Clusters, with its projection per shard) in
//! [`clusters`].

mod clusters;
mod fleet;
mod floor;
mod multi;
mod primitives;
mod traces;

use std::fmt::Write;

use crate::cluster::NODE_TIMEOUT_MS;
use crate::idle::{self, Idle};
use crate::peers::Peer;
use crate::plan::{Fault, Results, Run, Workload, PROCESSES};
use crate::spec::Report;
use crate::stats;

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
    environment(&mut md, results, env, peers);
    md
}

/// A summary column: its title, workload, value and unit.
type Column = (
    &'static str,
    Workload,
    fn(&Report) -> Option<f64>,
    &'static str,
);

fn summary(md: &mut String, results: &Results, peers: &[Peer]) {
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

fn status(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**MISSED**",
        None => "not measured",
    }
}

/// The targets of issue 15 and before it, one row each, for the
/// workloads that ran; nothing when none did.
fn targets(out: &mut String, results: &Results) {
    let mut rows = String::new();
    let md = &mut rows;
    let report = |w: Workload, p: Peer| results.find(w, p).and_then(|r| r.result.as_ref().ok());
    // W1
    let w1 = Workload::Uncontended { clients: 64 };
    let (agent, rslock) = (report(w1, Peer::Agent), report(w1, Peer::Rslock));
    if agent.is_some() || rslock.is_some() {
        let measured = match (agent, rslock) {
            (Some(a), Some(r)) => format!(
                "agent {} cycles/s, rslock {} cycles/s: {:.2}×",
                num(rate(a)),
                num(rate(r)),
                rate(a) / rate(r).max(f64::MIN_POSITIVE)
            ),
            _ => "agent or rslock missing".to_string(),
        };
        let ratio = agent
            .zip(rslock)
            .map(|(a, r)| rate(a) / rate(r).max(f64::MIN_POSITIVE));
        let _ = writeln!(
            md,
            "| W1, 64 clients: agent ≥ rslock in-process | {measured} | {} |",
            status(ratio.map(|x| x >= 1.0))
        );
        let _ = writeln!(
            md,
            "| W1, 64 clients: aim 2× rslock | same | {} |",
            status(ratio.map(|x| x >= 2.0))
        );
    }
    // W1, one client: latency.
    let w1_one = Workload::Uncontended { clients: 1 };
    let (agent, rslock) = (report(w1_one, Peer::Agent), report(w1_one, Peer::Rslock));
    // Only when both ran: an agent-only run (the smoke) compares nothing.
    let both_ran =
        |w| results.find(w, Peer::Agent).is_some() && results.find(w, Peer::Rslock).is_some();
    if both_ran(w1_one) {
        let p50 = |r: &Report| (r.cycle_ms.count > 0).then_some(r.cycle_ms.p50);
        let (measured, met) = match (agent.and_then(p50), rslock.and_then(p50)) {
            (Some(a), Some(r)) => (
                format!(
                    "agent {} ms, rslock {} ms: {:.2}×",
                    num(a),
                    num(r),
                    a / r.max(f64::MIN_POSITIVE)
                ),
                Some(a <= 1.2 * r),
            ),
            _ => ("agent or rslock missing".to_string(), None),
        };
        let _ = writeln!(
            md,
            "| W1, 1 client: agent's p50 acquire + release ≤ 1.2× rslock's | {measured} | {} |",
            status(met)
        );
    }
    // Redis commands per uncontended grant.
    for clients in [1, 8, 64] {
        let w = Workload::Uncontended { clients };
        let per_grant = |p| results.find(w, p).and_then(Run::commands_per_grant);
        if !both_ran(w) {
            continue;
        }
        let (measured, met) = match (per_grant(Peer::Agent), per_grant(Peer::Rslock)) {
            (Some(a), Some(r)) => (format!("agent {}, rslock {}", num(a), num(r)), Some(a <= r)),
            _ => ("agent or rslock missing".to_string(), None),
        };
        let _ = writeln!(
            md,
            "| W1, {clients} client(s): the agent's Redis commands per grant (acquire + release, `INFO commandstats`) ≤ rslock's | {measured} | {} |",
            status(met)
        );
    }
    // W2
    for tuned in [false, true] {
        for clients in [8, 16, 64] {
            let Some(r) = report(hot(clients, tuned), Peer::Agent) else {
                continue;
            };
            let which = if tuned { "tuned" } else { "defaults" };
            let p50 = r.handoff_ms.as_ref().map(|h| h.p50);
            let _ = writeln!(
                md,
                "| W2, {clients} clients, {which}: hand-off p50 < 5 ms | {} | {} |",
                p50.map_or("-".into(), |p| format!("{} ms", num(p))),
                status(p50.map(|p| p < 5.0))
            );
            let gap = r.longest_gap_ms.unwrap_or(f64::INFINITY);
            let live = r.cycles > 0 && gap < 1000.0 && r.overlaps == 0;
            let _ = writeln!(
                md,
                "| W2, {clients} clients, {which}: no livelock (a grant at least every second), no overlap | {} grants, longest gap {} ms, {} overlaps | {} |",
                r.cycles,
                num(gap),
                r.overlaps,
                status(Some(live))
            );
            let per_grant = results
                .find(hot(clients, tuned), Peer::Agent)
                .and_then(Run::commands_per_grant);
            let baseline = results
                .find(Workload::Uncontended { clients: 1 }, Peer::Agent)
                .and_then(Run::commands_per_grant);
            let (measured, met) = match (per_grant, baseline) {
                (Some(h), Some(b)) => (
                    format!("{} − {} = {:+.2}", num(h), num(b), h - b),
                    Some(h - b <= 1.0),
                ),
                (Some(h), None) => (format!("{} (no W1 one-client run)", num(h)), None),
                _ => ("-".to_string(), None),
            };
            let _ = writeln!(
                md,
                "| W2, {clients} clients, {which}: the agent's Redis commands per hot-key grant minus its W1 one-client commands per grant (the \"wasted / grant\" column, unclamped) ≤ 1 | {measured} | {} |",
                status(met)
            );
        }
    }
    // W3
    let healthy = report(Workload::Uncontended { clients: 1 }, Peer::Agent);
    let frozen = report(
        Workload::Degraded {
            fault: Fault::Frozen,
            clients: 1,
        },
        Peer::Agent,
    );
    if let Some(f) = frozen {
        let base = healthy.map_or(0.0, |h| h.acquire_ms.max);
        let added = f.acquire_ms.max - base;
        let _ = writeln!(
            md,
            "| W3, one master frozen: adds ≤ node_timeout ({NODE_TIMEOUT_MS} ms) to any acquire | acquire max {} ms vs {} ms healthy: +{} ms | {} |",
            num(f.acquire_ms.max),
            num(base),
            num(added.max(0.0)),
            status(Some(added <= NODE_TIMEOUT_MS as f64 && f.cycles > 0 && f.stuck == 0))
        );
    }
    // W4
    if let Some(limit) = &results.limit {
        let agent = report(w1, Peer::Agent).map(rate);
        let (measured, met) = match (limit, agent) {
            (Ok(l), Some(a)) => (
                format!(
                    "{} of {} cycles/s: {:.0}%",
                    num(a),
                    num(l.cycles_per_s),
                    100.0 * a / l.cycles_per_s
                ),
                Some(a / l.cycles_per_s >= 0.5),
            ),
            (Err(e), _) => (format!("n/a: {}", one_line(e)), None),
            _ => ("no agent W1 run".into(), None),
        };
        let _ = writeln!(
            md,
            "| W4: agent ≥ half the masters' limit | {measured} | {} |",
            status(met)
        );
    }
    // W8
    if let Some(measured) = &results.idle {
        idle_targets(md, measured);
    }
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "## Targets\n\n| target | measured | status |\n|---|---|---|\n{rows}"
        );
    }
}

/// The most RSS, KiB, with [`idle::CONNECTIONS`] idle connections open.
const IDLE_RSS_TARGET_KIB: u64 = 50 * 1024;
/// "Handed back": RSS after the close at most this much above the RSS
/// before, KiB, or [`HANDED_BACK_PERCENT`] of it if that is more.
const HANDED_BACK_KIB: u64 = 5 * 1024;
const HANDED_BACK_PERCENT: u64 = 10;

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn idle_targets(md: &mut String, measured: &Result<Idle, String>) {
    let i = match measured {
        Ok(i) => i,
        Err(e) => {
            let _ = writeln!(
                md,
                "| W8: RSS with {} idle connections < {} | n/a: {} | not measured |",
                idle::CONNECTIONS,
                mib(IDLE_RSS_TARGET_KIB),
                one_line(e)
            );
            return;
        }
    };
    // Only a full W8 measures the target; a smoke run opens fewer.
    let full = i.connections == idle::CONNECTIONS && i.answered == i.connections;
    let note = if full {
        String::new()
    } else {
        format!(
            " ({} of the target's {} answered)",
            i.answered,
            idle::CONNECTIONS
        )
    };
    let _ = writeln!(
        md,
        "| W8: agent RSS with {} idle connections (each sent one `GET /healthz`) < {} | {} open ({} before, {:.1} KiB per connection){note} | {} |",
        idle::CONNECTIONS,
        mib(IDLE_RSS_TARGET_KIB),
        mib(i.rss_open_kib),
        mib(i.rss_before_kib),
        i.kib_per_connection(),
        status(full.then_some(i.rss_open_kib < IDLE_RSS_TARGET_KIB))
    );
    let allowed = HANDED_BACK_KIB.max(i.rss_before_kib * HANDED_BACK_PERCENT / 100);
    let _ = writeln!(
        md,
        "| W8: memory handed back after they close: RSS after ≤ RSS before + {} or {HANDED_BACK_PERCENT}% of it, whichever is more | {} after ({} s after the close{}) vs {} before: {:+.1} MiB, {:.1} MiB allowed{note} | {} |",
        mib(HANDED_BACK_KIB),
        mib(i.rss_after_kib),
        num(i.seconds_to_settle),
        if i.settled { ", settled" } else { ", still moving" },
        mib(i.rss_before_kib),
        (i.rss_after_kib as f64 - i.rss_before_kib as f64) / 1024.0,
        allowed as f64 / 1024.0,
        status(full.then_some(i.rss_after_kib <= i.rss_before_kib + allowed))
    );
}

fn pct(p: &crate::spec::Percentiles) -> String {
    if p.count == 0 {
        return "-".to_string();
    }
    format!("{} / {} / {}", num(p.p50), num(p.p99), num(p.p999))
}

fn uncontended(md: &mut String, results: &Results, peers: &[Peer]) {
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
fn marker_runs(results: &Results, clients: usize) -> Option<(&Report, &Report)> {
    let report = |check| {
        results
            .find(Workload::MarkerCheck { clients, check }, Peer::Agent)
            .and_then(|r| r.result.as_ref().ok())
            .filter(|r| r.cycles > 0)
    };
    report(false).zip(report(true))
}

fn marker_check(md: &mut String, results: &Results) {
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
fn fence_runs(results: &Results, clients: usize) -> Option<(&Report, &Report)> {
    let report = |fence| {
        results
            .find(Workload::Fence { clients, fence }, Peer::Agent)
            .and_then(|r| r.result.as_ref().ok())
            .filter(|r| r.cycles > 0)
    };
    report(false).zip(report(true))
}

fn fence_cost(md: &mut String, results: &Results) {
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
fn paired_rows(md: &mut String, clients: usize, pair: [(&str, Option<&Run>); 2]) {
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
fn throughput_cells(run: &Run, r: &Report, base: Option<Option<f64>>) -> String {
    format!(
        "{} | {} | {} | {} | {}",
        num(rate(r)),
        base.map_or("1×".into(), |base| ratio(rate(r), base)),
        pct(&r.acquire_ms),
        pct(&r.cycle_ms),
        run.commands_per_grant().map_or("-".into(), num)
    )
}

fn trouble_or_zero(r: &Report) -> String {
    let t = trouble(r);
    if t.is_empty() {
        "0".into()
    } else {
        t
    }
}

fn hot_key(md: &mut String, results: &Results, peers: &[Peer]) {
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

fn degraded(md: &mut String, results: &Results, peers: &[Peer]) {
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

fn limit(md: &mut String, results: &Results) {
    let Some(limit) = &results.limit else { return };
    let _ = writeln!(md, "## W4: the masters' limit\n");
    match limit {
        Ok(l) => {
            let _ = writeln!(
                md,
                "All five masters at once, two pipelined `redis-benchmark` processes each (the agent's acquire script, \
                 marker check and `SET … NX GET PX`, and its release script, both by `EVALSHA`), {} requests per process, \
                 {:.1} s: **{} cycles/s** (the slowest process). The keys are random: about half the releases find their \
                 key, and an acquire that finds its key (one token for all) renews it where the agent's would stop; an \
                 estimate, not a bound.\n\n\
                 `{}`\n\n| master | command | requests/s |\n|---|---|---|",
                l.requests_per_process,
                l.wall_s,
                num(l.cycles_per_s),
                l.command_line
            );
            for (master, what, rps) in &l.processes {
                let _ = writeln!(md, "| {master} | {what} | {} |", num(*rps));
            }
        }
        Err(e) => {
            let _ = writeln!(md, "n/a: {}", one_line(e));
        }
    }
    md.push('\n');
}

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

fn processes_summary(results: &Results) -> Option<String> {
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

fn processes(md: &mut String, results: &Results) {
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

fn idle_connections(md: &mut String, results: &Results) {
    let Some(measured) = &results.idle else {
        return;
    };
    let _ = writeln!(
        md,
        "## W8: idle connections (the agent only)\n\nAn agent of its own over the same masters \
         (`socket.max_connections` raised to fit, `request_timeout: 300s` so none is closed for idling), after \
         {} requests on fresh connections. Then the connections open, {} at a time; each sends one `GET \
         /healthz`, reads the answer and stays open, idle; then all close. RSS is the agent's `VmRSS` \
         (`/proc/PID/status`); after the close it is read once it has settled (10 readings 100 ms apart within \
         1%, and the agent's descriptors back to where they were) or after 5 s.\n",
        idle::WARMUP_REQUESTS,
        idle::BATCH
    );
    match measured {
        Ok(i) => {
            let _ = writeln!(
                md,
                "| connections answered | opened in | RSS before | RSS with all open | per connection | RSS after the close | agent fds before / open / after |\n|---|---|---|---|---|---|---|\n\
                 | {} of {}{} | {} s | {} | {} | {:.1} KiB | {} ({} s{}) | {} / {} / {} |\n",
                i.answered,
                i.connections,
                i.first_failure
                    .as_deref()
                    .map_or(String::new(), |e| format!(" (first failure: {})", one_line(e))),
                num(i.seconds_to_open),
                mib(i.rss_before_kib),
                mib(i.rss_open_kib),
                i.kib_per_connection(),
                mib(i.rss_after_kib),
                num(i.seconds_to_settle),
                if i.settled { ", settled" } else { ", still moving" },
                i.fds_before,
                i.fds_open,
                i.fds_after
            );
        }
        Err(e) => {
            let _ = writeln!(md, "n/a: {}\n", one_line(e));
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn marker_run(check: bool, cycles: u64, commands: u64) -> Run {
        Run {
            workload: Workload::MarkerCheck { clients: 1, check },
            peer: Peer::Agent.name(),
            result: Ok(Report {
                peer: "agent".into(),
                clients: 1,
                window_s: 2.0,
                cycles,
                grants_total: cycles,
                ..Report::default()
            }),
            commands: Some(commands),
            master_connections: None,
            cpu: None,
        }
    }

    /// W5 shows both runs, the ratio on / off in the summary and its table,
    /// and the commands per grant of each.
    #[test]
    fn the_marker_check_cost_is_a_ratio_of_two_runs() {
        let results = Results {
            runs: vec![
                marker_run(false, 800, 20_000),
                marker_run(true, 600, 21_000),
            ],
            redis_version: "7".into(),
            ..Results::default()
        };
        let md = render(&results, &Environment::default(), &[Peer::Agent]);
        assert!(
            md.contains(
                "with it on / off (plain `SET NX`): 0.75× at 1 client(s) (300 vs 400 cycles/s)"
            ),
            "{md}"
        );
        assert!(md.contains("## W5: the in-vote marker check"), "{md}");
        assert!(md.contains("| 1 | off | 400 | 1× |"), "{md}");
        assert!(md.contains("| 1 | on | 300 | 0.75× |"), "{md}");
        assert!(md.contains("| 25.0 | 0 |"), "commands per grant off: {md}");
        assert!(md.contains("| 35.0 | 0 |"), "commands per grant on: {md}");
    }

    fn fence_run(fence: bool, cycles: u64, commands: u64) -> Run {
        Run {
            workload: Workload::Fence { clients: 1, fence },
            ..marker_run(false, cycles, commands)
        }
    }

    /// W6 shows the plain and the fenced run, the ratios fenced / plain of
    /// throughput and of Redis commands per grant, in the summary and its
    /// table.
    #[test]
    fn the_fence_cost_is_a_ratio_of_two_runs() {
        let results = Results {
            runs: vec![fence_run(false, 800, 20_000), fence_run(true, 640, 24_000)],
            redis_version: "7".into(),
            ..Results::default()
        };
        let md = render(&results, &Environment::default(), &[Peer::Agent]);
        assert!(
            md.contains(
                "W6 fenced acquire / plain acquire: 0.80× cycles/s at 1 client(s) (320 vs 400), \
                 1.50× Redis commands per grant (37.5 vs 25.0)"
            ),
            "{md}"
        );
        assert!(md.contains("## W6: a fenced acquire"), "{md}");
        assert!(md.contains("| 1 | plain | 400 | 1× |"), "{md}");
        assert!(md.contains("| 1 | fenced | 320 | 0.80× |"), "{md}");
        assert!(
            md.contains("| 37.5 | 0 |"),
            "commands per grant fenced: {md}"
        );
    }

    fn idle(connections: usize, before: u64, open: u64, after: u64) -> Idle {
        Idle {
            connections,
            answered: connections,
            first_failure: None,
            seconds_to_open: 1.0,
            rss_before_kib: before,
            rss_open_kib: open,
            rss_after_kib: after,
            settled: true,
            seconds_to_settle: 1.0,
            fds_before: 20,
            fds_open: 20 + connections,
            fds_after: 20,
        }
    }

    fn with_idle(measured: Idle) -> String {
        let results = Results {
            runs: Vec::new(),
            idle: Some(Ok(measured)),
            redis_version: "7".into(),
            ..Results::default()
        };
        render(&results, &Environment::default(), &[Peer::Agent])
    }

    /// W8's targets: under 50 MiB with 10,000 open, and RSS after the close
    /// within 5 MiB (or 10%) of before; per connection is the growth over
    /// the connections answered.
    #[test]
    fn idle_targets_compare_rss_open_and_after_with_before() {
        let md = with_idle(idle(10_000, 20 * 1024, 40 * 1024, 24 * 1024));
        assert!(
            md.contains("| 40.0 MiB open (20.0 MiB before, 2.0 KiB per connection) | met |"),
            "{md}"
        );
        assert!(md.contains("+4.0 MiB, 5.0 MiB allowed | met |"), "{md}");
        let md = with_idle(idle(10_000, 20 * 1024, 236 * 1024, 236 * 1024));
        assert!(
            md.contains("(20.0 MiB before, 22.1 KiB per connection) | **MISSED** |"),
            "{md}"
        );
        assert!(
            md.contains("+216.0 MiB, 5.0 MiB allowed | **MISSED** |"),
            "{md}"
        );
        // A smoke run opens fewer: measured, not judged.
        let md = with_idle(idle(300, 20 * 1024, 21 * 1024, 20 * 1024));
        assert!(
            md.contains("(300 of the target's 10000 answered) | not measured |"),
            "{md}"
        );
    }

    fn process_run(peer: Peer, cycles: u64, connections: u64) -> Run {
        Run {
            workload: Workload::Processes { clients: PROCESSES },
            peer: peer.name(),
            result: Ok(Report {
                peer: peer.name().into(),
                clients: PROCESSES,
                window_s: 2.0,
                cycles,
                grants_total: cycles,
                ..Report::default()
            }),
            commands: Some(cycles * 20),
            master_connections: Some(connections),
            cpu: None,
        }
    }

    /// W7 gives both peers' cycles/s, agent / pottery, and the masters'
    /// added connections for each.
    #[test]
    fn processes_compare_cycles_and_master_connections() {
        let results = Results {
            runs: vec![
                process_run(Peer::Agent, 4000, 10),
                process_run(Peer::Pottery, 400, 1280),
            ],
            redis_version: "7".into(),
            ..Results::default()
        };
        let md = render(
            &results,
            &Environment::default(),
            &[Peer::Agent, Peer::Pottery],
        );
        assert!(
            md.contains(
                "agent (standard-library client) 2000 cycles/s, pottery 200 cycles/s: agent / pottery 10×; \
                 the masters' connections during the run, over the count before it: +10 for the agent \
                 (its own), +1280 for pottery."
            ),
            "{md}"
        );
        assert!(md.contains("| agent | 64 | 2000 | 1× |"), "{md}");
        assert!(md.contains("| pottery | 64 | 200 | 0.10× |"), "{md}");
        assert!(md.contains("| 20.0 | +1280 | 0 |"), "{md}");
    }

    fn w1_run(peer: Peer, workload: Workload, p50: f64, grants: u64, commands: u64) -> Run {
        Run {
            workload,
            peer: peer.name(),
            result: Ok(Report {
                peer: peer.name().into(),
                clients: 1,
                window_s: 1.0,
                cycles: grants,
                grants_total: grants,
                cycle_ms: crate::spec::Percentiles {
                    count: grants,
                    p50,
                    ..Default::default()
                },
                ..Report::default()
            }),
            commands: Some(commands),
            master_connections: None,
            cpu: None,
        }
    }

    /// Issue 15's rows: one-client latency against 1.2× rslock's, Redis
    /// commands per uncontended grant against rslock's, and per hot-key
    /// grant against the agent's own uncontended cost plus one.
    #[test]
    fn latency_and_command_targets_say_what_they_compare() {
        let one = Workload::Uncontended { clients: 1 };
        let results = Results {
            runs: vec![
                w1_run(Peer::Agent, one, 0.6, 1000, 35_000),
                w1_run(Peer::Rslock, one, 0.5, 1000, 20_000),
                w1_run(Peer::Agent, hot(64, false), 0.0, 1000, 40_200),
            ],
            redis_version: "7".into(),
            ..Results::default()
        };
        let md = render(
            &results,
            &Environment::default(),
            &[Peer::Agent, Peer::Rslock],
        );
        assert!(
            md.contains("≤ 1.2× rslock's | agent 0.60 ms, rslock 0.50 ms: 1.20× | met |"),
            "{md}"
        );
        assert!(
            md.contains("≤ rslock's | agent 35.0, rslock 20.0 | **MISSED** |"),
            "{md}"
        );
        assert!(
            md.contains("≤ 1 | 40.2 − 35.0 = +5.20 | **MISSED** |"),
            "{md}"
        );
    }
}
