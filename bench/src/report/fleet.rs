//! W10's part of the report: per fleet size, what the masters spent on the
//! idle agents, per agent; the slope over the fleet size and its
//! projection to [`fleet::PROJECTED`] agents; one client's cycle beside
//! the fleet, against a lone agent.

use std::fmt::Write;

use super::{num, one_line};
use crate::fleet::{self, Fleet};
use crate::plan::Results;

/// The target: master CPU per idle agent, µs per second, at any leak
/// scan interval (it was 10 before the cost-per-lock work).
const TARGET_US_PER_S: f64 = 5.0;

pub fn section(md: &mut String, results: &Results) {
    let Some(measured) = &results.fleet else {
        return;
    };
    let _ = writeln!(
        md,
        "## W10: a fleet of idle agents (the agent only)\n\nN agent processes over the same five \
         masters, serving nothing (delayed restart off, as for every agent here; the leak scan on, \
         every {}s: one agent scans for the fleet); the masters' CPU (`/proc/PID/stat`), commands \
         (`INFO stats`), connections (`INFO clients`, less the asking one), keys (`DBSIZE`) and \
         `SCAN` calls (the leak scans) over one window, mean per master, from {}s after the \
         fleet's last agent started (its start-up calls behind it: what an agent costs while it \
         stays idle). Per agent: less the masters alone (N = 0), over N. Then one client's \
         acquire + release through the fleet's first agent.\n",
        measured.as_ref().map_or(30, |f| f.leak_scan.as_secs()),
        measured
            .as_ref()
            .map_or(fleet::SETTLE_PAST_START, |f| f.timing.settle)
            .as_secs()
    );
    let f = match measured {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(md, "n/a: {}\n", one_line(e));
            return;
        }
    };
    rows(md, f);
    if let Some(why) = &f.stopped {
        let _ = writeln!(md, "\nNot measured: {}", one_line(why));
    }
    let slope = f.slope();
    let projected = slope * fleet::PROJECTED as f64;
    let _ = writeln!(
        md,
        "\nSlope of a master's CPU over N (least squares, N = 0 included): {} µs/s per agent \
         (target ≤ {} µs/s: {}). At {} agents: {} µs/s, {}% of a master's core from idle agents alone; \
         one core is full at about {} agents.",
        num(slope),
        num(TARGET_US_PER_S),
        if slope <= TARGET_US_PER_S {
            "met"
        } else {
            "**MISSED**"
        },
        fleet::PROJECTED,
        num(projected),
        num(projected / 1e4),
        if slope > 0.0 {
            num(1e6 / slope)
        } else {
            "-".into()
        },
    );
    if let Some(rss) = f.agent_rss_kib {
        let _ = writeln!(
            md,
            "One idle agent of the largest fleet: {} MiB resident.",
            num(rss as f64 / 1024.0)
        );
    }
    let _ = writeln!(
        md,
        "\n| agents beside | cycles | acquire + release p50 | p99 |\n|---|---|---|---|"
    );
    for l in &f.latency {
        let _ = writeln!(
            md,
            "| {} | {} | {} ms | {} ms |",
            l.agents.saturating_sub(1),
            l.cycles,
            num(l.p50_ms),
            num(l.p99_ms)
        );
    }
    md.push('\n');
}

fn rows(md: &mut String, f: &Fleet) {
    let _ = writeln!(
        md,
        "| idle agents | master CPU µs/s | per agent µs/s | commands/s per master | per agent | connections per master | per agent | keys per master (most) | SCAN calls per master (most) |\n|---|---|---|---|---|---|---|---|---|"
    );
    let b = &f.baseline;
    let _ = writeln!(
        md,
        "| 0 | {} | - | {} | - | {} | - | {} | {} |",
        num(b.cpu_us_per_s()),
        num(b.commands()),
        num(b.connections_mean()),
        b.keys_max(),
        b.scans_max()
    );
    for w in &f.fleets {
        let n = w.agents.max(1) as f64;
        let per_agent = f.per_agent_cpu(w);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            w.agents,
            num(w.cpu_us_per_s()),
            if per_agent < 0.0 {
                // Said, not hidden: the window was too short to see them.
                format!(
                    "{} (under the masters' own variation: a longer `--duration` measures it)",
                    num(per_agent)
                )
            } else {
                num(per_agent)
            },
            num(w.commands()),
            num((w.commands() - b.commands()) / n),
            num(w.connections_mean()),
            num((w.connections_mean() - b.connections_mean()) / n),
            w.keys_max(),
            w.scans_max()
        );
    }
}
