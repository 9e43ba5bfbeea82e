//! W14 in the report: the CPU per acquire + release cycle of each part of
//! the machine (the masters, the agent, the driver), for every peer, at 1,
//! 8 and 64 clients over 3, 5 and 7 masters; and the sidecar overhead at a
//! fixed rate, in the shape of Dapr's performance report: the latency the
//! agent adds over rslock in-process, the agent's CPU and memory. Also the
//! home of [`Cost`], which W1's floor table reads too.

use std::fmt::Write;

use super::{mib, num, one_line, rate, trouble};
use crate::cost::{Cell, CostRuns, CLIENT_COUNTS, MASTER_COUNTS, PACED_CLIENTS, PACED_RATE};
use crate::cpu::Cpu;
use crate::peers::Peer;
use crate::plan::Results;
use crate::spec::Report;

/// A paced driver kept its rate when it ran at least this share of it in
/// the window (a cycle cut by the window's edges is not counted).
const KEPT: f64 = 0.98;

/// CPU per cycle, µs, of each part of the machine one run used: the CPU
/// over the driver's warm-up and window divided by its grants in that span.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Cost {
    pub agent: Option<f64>,
    pub driver: Option<f64>,
    pub masters: Option<f64>,
}

impl Cost {
    /// `None` parts were not measured (or not read).
    pub fn of(cpu: Option<&Cpu>, report: &Report) -> Cost {
        let per_cycle = |seconds: f64| seconds * 1e6 / report.grants_total as f64;
        Cost {
            agent: cpu.and_then(|c| c.agent_s).map(per_cycle),
            driver: report.driver_cpu_s.map(per_cycle),
            masters: cpu.map(|c| per_cycle(c.servers_s())),
        }
    }

    /// The whole machine: the agent (for rows through it), the driver and
    /// the masters; `None` when a part that ran was not measured.
    pub fn whole(self, through_agent: bool) -> Option<f64> {
        let agent = if through_agent { self.agent? } else { 0.0 };
        Some(agent + self.driver? + self.masters?)
    }
}

/// µs, or `-` when not measured.
pub(super) fn us(x: Option<f64>) -> String {
    x.map_or("-".into(), num)
}

/// Milliseconds, with a third decimal under 1 ms: a round trip on
/// loopback is tens of microseconds.
pub(super) fn ms(x: f64) -> String {
    if x.abs() < 1.0 {
        format!("{x:.3}")
    } else {
        num(x)
    }
}

/// A difference in ms with its sign.
fn added(x: f64) -> String {
    if x < 0.0 {
        format!("−{}", ms(-x))
    } else {
        format!("+{}", ms(x))
    }
}

/// Why a cell has no figures, for its row.
fn why(cell: &Cell) -> String {
    match &cell.result {
        Err(e) => format!("n/a: {}", one_line(e)),
        Ok(r) => {
            let trouble = trouble(r);
            if trouble.is_empty() {
                "no cycle".to_string()
            } else {
                format!("no cycle ({trouble})")
            }
        }
    }
}

/// The section; nothing when W14 did not run.
pub(super) fn section(md: &mut String, results: &Results) {
    let Some(measured) = &results.cost else {
        return;
    };
    let _ = writeln!(md, "## W14: cost per cycle\n");
    let runs = match measured {
        Ok(runs) => runs,
        Err(e) => {
            let _ = writeln!(md, "Not measured: {}\n", one_line(e));
            return;
        }
    };
    cpu_table(md, runs);
    paced_tables(md, runs);
}

fn cpu_table(md: &mut String, runs: &CostRuns) {
    let _ = writeln!(
        md,
        "### CPU per acquire + release cycle\n\nW1 (each client its own resource, as fast as it can) for every \
         peer of the run, over 3, 5 and 7 masters (the five of the run; three and seven started for these \
         rows, with an agent of their own, and stopped after). CPU per cycle in µs (user + system), over the \
         driver's warm-up and window, divided by its grants in that span: the masters' `redis-server` \
         processes (all of them, and per master) and the agent's from `/proc/PID/stat`, the driver's (the \
         application's process: for a library, the library itself) from its own `getrusage`. Whole machine: \
         masters + agent (through the agent) + driver.\n\n\
         | masters | clients | peer | cycles/s | cycle p50 / p99 ms | masters µs / cycle | per master µs | agent µs / cycle | driver µs / cycle | whole machine µs / cycle |\n\
         |---|---|---|---|---|---|---|---|---|---|"
    );
    for n in MASTER_COUNTS {
        for clients in CLIENT_COUNTS {
            for cell in runs
                .cells
                .iter()
                .filter(|c| c.masters == n && c.clients == clients)
            {
                let Some(r) = cell.granted() else {
                    let _ = writeln!(
                        md,
                        "| {n} | {clients} | {} | {} | | | | | | |",
                        cell.peer,
                        why(cell)
                    );
                    continue;
                };
                let cost = Cost::of(cell.cpu.as_ref(), r);
                let through_agent = cell.peer == Peer::Agent.name();
                let errors = if r.errors > 0 {
                    format!(" ({} errors)", r.errors)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    md,
                    "| {n} | {clients} | {} | {}{errors} | {} / {} | {} | {} | {} | {} | {} |",
                    cell.peer,
                    num(rate(r)),
                    ms(r.cycle_ms.p50),
                    ms(r.cycle_ms.p99),
                    us(cost.masters),
                    us(cost.masters.map(|m| m / n as f64)),
                    if through_agent {
                        us(cost.agent)
                    } else {
                        "-".into()
                    },
                    us(cost.driver),
                    us(cost.whole(through_agent)),
                );
            }
        }
    }
    md.push('\n');
}

/// Whether a paced run kept its rate, in words: empty when it did.
fn missed_rate(r: &Report) -> Option<String> {
    let Some(target) = r.target_rate else {
        return Some("the driver cannot pace: ran as fast as it could".to_string());
    };
    let measured = rate(r);
    (measured < KEPT * target).then(|| {
        format!(
            "did not keep the rate: {} of {} cycles/s, {} slots missed",
            num(measured),
            num(target),
            r.missed_slots
        )
    })
}

fn paced_tables(md: &mut String, runs: &CostRuns) {
    if runs.paced.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "### Sidecar overhead at {rate} cycles/s\n\nIn the shape of Dapr's performance report: the agent and \
         rslock in-process, each paced at {rate} acquire + release cycles/s over the five masters ({PACED_CLIENTS} \
         clients, each starting a cycle at its own slot every {period} ms; a client still busy at its next \
         slot starts at once, and one a whole slot behind skips the slots it missed). The cycle's latency, \
         and the agent's CPU (`/proc/PID/stat`, over the driver's warm-up and window, in millicores: \
         thousandths of a core) and its most `VmRSS` during the run (read every 100 ms). A driver that did \
         not keep the rate says so in its row; its figures are then at the rate it ran.\n\n\
         | peer | cycles/s (target {rate}) | cycle p50 / p90 / p99 ms | agent CPU, millicores | agent VmRSS, most |\n\
         |---|---|---|---|---|",
        rate = num(PACED_RATE),
        period = PACED_CLIENTS as f64 * 1000.0 / PACED_RATE,
    );
    for cell in &runs.paced {
        let Some(r) = cell.granted() else {
            let _ = writeln!(md, "| {} | {} | | | |", cell.peer, why(cell));
            continue;
        };
        let through_agent = cell.peer == Peer::Agent.name();
        let millicores = cell
            .cpu
            .as_ref()
            .filter(|c| c.wall_s > 0.0)
            .and_then(|c| Some(c.agent_s? * 1000.0 / c.wall_s));
        let kept = match missed_rate(r) {
            Some(why) => format!(" (**{why}**)"),
            None => String::new(),
        };
        let _ = writeln!(
            md,
            "| {} | {}{kept} | {} / {} / {} | {} | {} |",
            cell.peer,
            num(rate(r)),
            ms(r.cycle_ms.p50),
            ms(r.cycle_ms.p90),
            ms(r.cycle_ms.p99),
            if through_agent {
                us(millicores)
            } else {
                "-".into()
            },
            match (through_agent, cell.agent_rss_kib) {
                (true, Some(kib)) => mib(kib),
                _ => "-".into(),
            },
        );
    }
    md.push('\n');
    let (Some(agent), Some(rslock)) = (runs.paced(Peer::Agent), runs.paced(Peer::Rslock)) else {
        return;
    };
    let (Some(a), Some(r)) = (agent.granted(), rslock.granted()) else {
        return;
    };
    let cost = Cost::of(agent.cpu.as_ref(), a);
    let _ = writeln!(
        md,
        "| the agent as a sidecar, at {} cycles/s | over rslock in-process |\n|---|---|",
        num(PACED_RATE)
    );
    for (name, of) in [
        ("p50", (|p| p.p50) as fn(&crate::spec::Percentiles) -> f64),
        ("p90", |p| p.p90),
        ("p99", |p| p.p99),
    ] {
        let (x, y) = (of(&a.cycle_ms), of(&r.cycle_ms));
        let _ = writeln!(
            md,
            "| latency added, {name} | {} ms (agent {} − rslock {}) |",
            added(x - y),
            ms(x),
            ms(y)
        );
    }
    let _ = writeln!(
        md,
        "| agent CPU per {} cycles/s | {} millicores ({} µs per cycle) |",
        num(PACED_RATE),
        us(cost.agent.map(|us| us * PACED_RATE / 1000.0)),
        us(cost.agent)
    );
    let _ = writeln!(
        md,
        "| agent memory (VmRSS, most during the run) | {} |",
        agent.agent_rss_kib.map_or("-".into(), mib)
    );
    md.push('\n');
    for (cell, report) in [(agent, a), (rslock, r)] {
        if let Some(why) = missed_rate(report) {
            let _ = writeln!(
                md,
                "- {}: {why}; the differences above are at the rates measured.",
                cell.peer
            );
        }
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ServerCpu;
    use crate::report::{render, Environment};
    use crate::spec::Percentiles;

    /// A cell of `grants` cycles in a 1 s window, `p50` ms a cycle (p90
    /// and p99 2× and 4× it), with `agent_s`, `driver_s` CPU seconds and
    /// `masters_s` on each of `masters` masters, over 2 s of wall clock.
    fn cell(
        masters: usize,
        clients: usize,
        peer: Peer,
        grants: u64,
        p50: f64,
        (agent_s, driver_s, masters_s): (Option<f64>, f64, f64),
    ) -> Cell {
        Cell {
            masters,
            clients,
            peer: peer.name(),
            result: Ok(Report {
                peer: peer.name().into(),
                window_s: 1.0,
                cycles: grants,
                grants_total: grants,
                cycle_ms: Percentiles {
                    count: grants,
                    p50,
                    p90: 2.0 * p50,
                    p99: 4.0 * p50,
                    ..Percentiles::default()
                },
                driver_cpu_s: Some(driver_s),
                ..Report::default()
            }),
            cpu: Some(Cpu {
                servers: (1..=masters)
                    .map(|i| ServerCpu {
                        master: format!("r{i}"),
                        addr: String::new(),
                        cpu_s: masters_s,
                    })
                    .collect(),
                agent_s,
                wall_s: 2.0,
            }),
            agent_rss_kib: None,
        }
    }

    fn paced(mut cell: Cell, target: Option<f64>, rss_kib: Option<u64>) -> Cell {
        if let Ok(r) = cell.result.as_mut() {
            r.target_rate = target;
            r.missed_slots = 3;
        }
        cell.agent_rss_kib = rss_kib;
        cell
    }

    fn md(runs: CostRuns) -> String {
        let results = Results {
            cost: Some(Ok(runs)),
            redis_version: "7".into(),
            ..Results::default()
        };
        render(
            &results,
            &Environment::default(),
            &[Peer::Agent, Peer::Rslock],
        )
    }

    /// Each part's CPU per cycle, per master, and the whole machine (the
    /// agent counted only in its own rows); a peer that could not run
    /// says why.
    #[test]
    fn the_cpu_table_splits_each_cycle_by_process() {
        let md = md(CostRuns {
            cells: vec![
                // 1,000 grants: agent 80 µs, driver 30 µs, masters 3 × 20 µs.
                cell(3, 1, Peer::Agent, 1000, 0.5, (Some(0.08), 0.03, 0.02)),
                cell(3, 1, Peer::Rslock, 2000, 0.25, (None, 0.1, 0.02)),
                Cell {
                    result: Err("not installed".into()),
                    cpu: None,
                    ..cell(7, 64, Peer::Pottery, 1, 1.0, (None, 0.0, 0.0))
                },
            ],
            paced: Vec::new(),
        });
        assert!(md.contains("## W14: cost per cycle"), "{md}");
        assert!(
            md.contains(
                "| 3 | 1 | agent | 1000 | 0.500 / 2.00 | 60.0 | 20.0 | 80.0 | 30.0 | 170 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 3 | 1 | rslock | 2000 | 0.250 / 1.00 | 30.0 | 10.0 | - | 50.0 | 80.0 |"),
            "{md}"
        );
        assert!(
            md.contains("| 7 | 64 | pottery | n/a: not installed | | | | | | |"),
            "{md}"
        );
        assert!(!md.contains("Sidecar overhead"), "{md}");
    }

    /// At the fixed rate: each peer's row, and the overhead table of
    /// differences agent − rslock with the agent's CPU and memory.
    #[test]
    fn the_sidecar_overhead_is_agent_minus_rslock_at_the_rate() {
        let md = md(CostRuns {
            cells: Vec::new(),
            paced: vec![
                // 1,000 grants, agent 0.05 s: 50 µs per cycle, 25 millicores
                // over the 2 s of wall clock.
                paced(
                    cell(5, 8, Peer::Agent, 1000, 0.4, (Some(0.05), 0.02, 0.01)),
                    Some(1000.0),
                    Some(12 * 1024),
                ),
                paced(
                    cell(5, 8, Peer::Rslock, 995, 0.3, (None, 0.04, 0.01)),
                    Some(1000.0),
                    None,
                ),
            ],
        });
        assert!(md.contains("### Sidecar overhead at 1000 cycles/s"), "{md}");
        assert!(
            md.contains("| agent | 1000 | 0.400 / 0.800 / 1.60 | 25.0 | 12.0 MiB |"),
            "{md}"
        );
        assert!(
            md.contains("| rslock | 995 | 0.300 / 0.600 / 1.20 | - | - |"),
            "{md}"
        );
        assert!(
            md.contains("| latency added, p50 | +0.100 ms (agent 0.400 − rslock 0.300) |"),
            "{md}"
        );
        assert!(
            md.contains("| latency added, p99 | +0.400 ms (agent 1.60 − rslock 1.20) |"),
            "{md}"
        );
        assert!(
            md.contains("| agent CPU per 1000 cycles/s | 50.0 millicores (50.0 µs per cycle) |"),
            "{md}"
        );
        assert!(
            md.contains("| agent memory (VmRSS, most during the run) | 12.0 MiB |"),
            "{md}"
        );
        assert!(!md.contains("did not keep the rate:"), "{md}");
    }

    /// A driver under the rate, or one that cannot pace, says so in its
    /// row and under the overhead table; its figures are not passed off
    /// as the rate's.
    #[test]
    fn a_driver_that_missed_the_rate_says_so() {
        let md = md(CostRuns {
            cells: Vec::new(),
            paced: vec![
                paced(
                    cell(5, 8, Peer::Agent, 800, 0.4, (Some(0.05), 0.02, 0.01)),
                    Some(1000.0),
                    None,
                ),
                paced(
                    cell(5, 8, Peer::Rslock, 3000, 0.3, (None, 0.04, 0.01)),
                    None,
                    None,
                ),
            ],
        });
        assert!(
            md.contains(
                "| agent | 800 (**did not keep the rate: 800 of 1000 cycles/s, 3 slots missed**) |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| rslock | 3000 (**the driver cannot pace: ran as fast as it could**) |"),
            "{md}"
        );
        assert!(
            md.contains(
                "- agent: did not keep the rate: 800 of 1000 cycles/s, 3 slots missed; the differences \
                 above are at the rates measured."
            ),
            "{md}"
        );
        assert!(
            md.contains("| agent memory (VmRSS, most during the run) | - |"),
            "{md}"
        );
    }
}
