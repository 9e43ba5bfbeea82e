//! W1's socket floor in the report: the agent's W1 clients sending two
//! `GET /healthz` per cycle instead of an acquire and a release, beside the
//! agent's and rslock's W1 rows, with the CPU per cycle of every process,
//! and the lines that say how much of the agent's cost is the two round
//! trips and how much is the lock. An explanation, never a target.

use std::fmt::Write;

use super::cost::{ms, us, Cost};
use super::{num, rate};
use crate::peers::Peer;
use crate::plan::{Results, Run, Workload};
use crate::spec::Report;

/// The client counts the floor may run with.
const CLIENTS: [usize; 3] = [1, 8, 64];

/// One row's run and report, when it made progress.
fn measured(run: Option<&Run>) -> Option<(&Run, &Report)> {
    let run = run?;
    Some((run, run.granted()?))
}

/// The three rows for `clients`: the floor, the agent, rslock.
fn rows(results: &Results, clients: usize) -> [(&'static str, Option<&Run>); 3] {
    let w1 = Workload::Uncontended { clients };
    [
        (
            "floor: 2 × `GET /healthz`",
            results.find(Workload::Floor { clients }, Peer::Agent),
        ),
        ("agent: acquire + release", results.find(w1, Peer::Agent)),
        ("rslock in-process", results.find(w1, Peer::Rslock)),
    ]
}

/// The subsection; nothing when no floor ran.
pub(super) fn section(md: &mut String, results: &Results) {
    if !results
        .runs
        .iter()
        .any(|r| matches!(r.workload, Workload::Floor { .. }))
    {
        return;
    }
    let _ = writeln!(
        md,
        "### The socket's floor\n\nAn explanation, not a target. The agent's W1 driver, clients and keep-alive \
         connections (`redlock-client`), through the same agent, in the same run, but each cycle is two \
         `GET /healthz` (a constant answer: no lock, no master) in place of the acquire and the release: what \
         two round trips on the socket cost with nothing behind them. A `GET` has no body and a short \
         answer; an acquire's or a release's JSON body both ways (read, parsed, written) counts as lock work \
         here. The floor runs as fast as it can, so its CPU per cycle is at its own rate, where one wake-up \
         may serve more requests than at the agent's. Cycle: the two requests (acquire + \
         release for the others), ms. CPU per cycle in µs (user + system), over the driver's warm-up and \
         window, divided by its grants (for the floor: first requests) in that span: the agent's and the \
         masters' from `/proc/PID/stat`, the driver's (the application's process: for rslock, the library \
         itself) from its own `getrusage`. Whole machine: agent + driver + masters.\n\n\
         | clients | row | cycles/s | cycle p50 / p99 | agent µs / cycle | driver µs / cycle | masters µs / cycle | whole machine µs / cycle | Redis commands / cycle |\n\
         |---|---|---|---|---|---|---|---|---|"
    );
    for clients in CLIENTS {
        if results
            .find(Workload::Floor { clients }, Peer::Agent)
            .is_none()
        {
            continue;
        }
        for (i, (label, run)) in rows(results, clients).into_iter().enumerate() {
            let Some(run) = run else { continue };
            let Some((run, r)) = measured(Some(run)) else {
                let why = match &run.result {
                    Err(e) => format!("n/a: {}", super::one_line(e)),
                    Ok(r) => format!("no cycle ({})", super::trouble(r)),
                };
                let _ = writeln!(md, "| {clients} | {label} | {why} | | | | | | |");
                continue;
            };
            let cost = Cost::of(run.cpu.as_ref(), r);
            let _ = writeln!(
                md,
                "| {clients} | {label} | {} | {} / {} | {} | {} | {} | {} | {} |",
                num(rate(r)),
                ms(r.cycle_ms.p50),
                ms(r.cycle_ms.p99),
                us(cost.agent),
                us(cost.driver),
                us(cost.masters),
                us(cost.whole(i < 2)),
                run.commands_per_grant().map_or("-".into(), num),
            );
        }
    }
    md.push('\n');
    for line in lines(results) {
        let _ = writeln!(md, "- {line}");
    }
    md.push('\n');
}

/// The derived lines, each computed from the rows above, for the client
/// counts whose rows were measured.
fn lines(results: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for clients in CLIENTS {
        let [floor, agent, rslock] = rows(results, clients).map(|(_, run)| measured(run));
        let (Some((floor_run, floor)), Some((agent_run, agent))) = (floor, agent) else {
            continue;
        };
        let p50 = |r: &Report| (r.cycle_ms.count > 0).then_some(r.cycle_ms.p50);
        if let (Some(a), Some(f)) = (p50(agent), p50(floor)) {
            let lock = a - f;
            let against = match rslock.and_then(|(_, r)| p50(r)) {
                Some(r) => format!(
                    ", against rslock's whole cycle {} ms ({:.2}×)",
                    ms(r),
                    lock / r.max(f64::MIN_POSITIVE)
                ),
                None => String::new(),
            };
            out.push(format!(
                "{clients} client(s), latency: agent p50 {} ms − floor p50 {} ms = {} ms, the lock work beyond \
                 two bare round trips{against}; the floor alone is {:.0}% of the agent's p50.",
                ms(a),
                ms(f),
                ms(lock),
                100.0 * f / a.max(f64::MIN_POSITIVE)
            ));
        }
        let (agent_cost, floor_cost) = (
            Cost::of(agent_run.cpu.as_ref(), agent),
            Cost::of(floor_run.cpu.as_ref(), floor),
        );
        let rslock_cost = rslock.map(|(run, r)| Cost::of(run.cpu.as_ref(), r));
        if let (Some(a), Some(f)) = (agent_cost.agent, floor_cost.agent) {
            let against = match rslock_cost.and_then(|c| c.driver) {
                Some(r) => format!(
                    ", against rslock's whole process {} µs per cycle ({:.2}×)",
                    num(r),
                    (a - f) / r.max(f64::MIN_POSITIVE)
                ),
                None => String::new(),
            };
            out.push(format!(
                "{clients} client(s), agent CPU: {} µs per cycle − the floor's {} µs = {} µs of lock work in \
                 the agent{against}.",
                num(a),
                num(f),
                num(a - f)
            ));
        }
        if let (Some(a), Some((r, rslock))) = (
            agent_cost.whole(true),
            rslock_cost
                .and_then(|c| c.whole(false))
                .zip(rslock.map(|(_, r)| r)),
        ) {
            out.push(format!(
                "{clients} client(s), whole machine: agent + driver + masters {} µs per cycle, rslock's driver + \
                 masters {} µs ({:.2}×; rslock / agent {:.2}, beside cycles/s agent / rslock {:.2}); the \
                 floor's own whole machine {} µs.",
                num(a),
                num(r),
                a / r.max(f64::MIN_POSITIVE),
                r / a.max(f64::MIN_POSITIVE),
                rate(agent) / rate(rslock).max(f64::MIN_POSITIVE),
                us(floor_cost.whole(true))
            ));
        }
        if let (1, Some(a), Some(f), Some(r)) = (
            clients,
            p50(agent),
            p50(floor),
            rslock.and_then(|(_, r)| p50(r)),
        ) {
            // Issue 15's latency target: the agent's p50 at most 1.2×
            // rslock's.
            let leaves = 0.2 * r;
            out.push(format!(
                "{clients} client(s), what the 1.2× latency target takes: an agent p50 of at most {} ms, {} ms \
                 over rslock's cycle; the floor alone is {} ms ({:.1}× that), so the lock work beyond the floor \
                 would have to take at most {} ms, {:.2}× rslock's whole cycle (now {:.2}×).",
                ms(1.2 * r),
                ms(leaves),
                ms(f),
                f / leaves.max(f64::MIN_POSITIVE),
                ms(1.2 * r - f),
                (1.2 * r - f) / r.max(f64::MIN_POSITIVE),
                (a - f) / r.max(f64::MIN_POSITIVE)
            ));
        }
        if let (64, Some(a), Some(f), Some(r)) = (
            clients,
            agent_cost.whole(true),
            floor_cost.whole(true),
            rslock_cost.and_then(|c| c.whole(false)),
        ) {
            // Issue 15's throughput target, at 64 clients: on a machine whose
            // cores are all busy, cycles/s follow the CPU per cycle.
            out.push(format!(
                "{clients} client(s), what 1× rslock's cycles/s takes: the whole machine at most rslock's {} \
                 µs per cycle; less the floor's {} µs, the lock work (agent, driver and masters beyond two \
                 bare round trips) would have to cost at most {} µs, against {} µs now ({:.2}×).",
                num(r),
                num(f),
                num(r - f),
                num(a - f),
                (a - f) / (r - f).max(f64::MIN_POSITIVE)
            ));
        }
        if let Some((_, r)) = rslock {
            out.push(format!(
                "{clients} client(s), throughput: the floor runs {} cycles/s against rslock's {} ({:.2}×) \
                 and the agent's {}.",
                num(rate(floor)),
                num(rate(r)),
                rate(floor) / rate(r).max(f64::MIN_POSITIVE),
                num(rate(agent))
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{Cpu, ServerCpu};
    use crate::report::{render, Environment};
    use crate::spec::Percentiles;

    /// A run of `grants` cycles in a 1 s window, `p50` ms a cycle, with
    /// `agent_s`, `driver_s` and `masters_s` CPU seconds.
    fn run(
        workload: Workload,
        peer: Peer,
        grants: u64,
        p50: f64,
        (agent_s, driver_s, masters_s): (Option<f64>, f64, f64),
    ) -> Run {
        Run {
            workload,
            peer: peer.name(),
            result: Ok(Report {
                peer: peer.name().into(),
                window_s: 1.0,
                cycles: grants,
                grants_total: grants,
                cycle_ms: Percentiles {
                    count: grants,
                    p50,
                    p99: 2.0 * p50,
                    ..Percentiles::default()
                },
                driver_cpu_s: Some(driver_s),
                ..Report::default()
            }),
            commands: Some(grants * 20),
            master_connections: None,
            cpu: Some(Cpu {
                servers: vec![ServerCpu {
                    master: "r1".into(),
                    addr: String::new(),
                    cpu_s: masters_s,
                }],
                agent_s,
                wall_s: 1.0,
            }),
        }
    }

    fn results() -> Results {
        let (one, many) = (
            Workload::Uncontended { clients: 1 },
            Workload::Uncontended { clients: 64 },
        );
        Results {
            runs: vec![
                // 1 client: agent 0.45 ms, floor 0.20 ms, rslock 0.25 ms.
                run(one, Peer::Agent, 2000, 0.45, (Some(0.1), 0.05, 0.1)),
                run(one, Peer::Rslock, 4000, 0.25, (None, 0.1, 0.2)),
                run(
                    Workload::Floor { clients: 1 },
                    Peer::Agent,
                    5000,
                    0.2,
                    (Some(0.1), 0.1, 0.0),
                ),
                // 64 clients, 10,000 cycles: agent 90 µs, floor 40 µs.
                run(many, Peer::Agent, 10_000, 6.0, (Some(0.9), 0.3, 0.8)),
                run(many, Peer::Rslock, 12_000, 5.0, (None, 1.2, 0.96)),
                run(
                    Workload::Floor { clients: 64 },
                    Peer::Agent,
                    20_000,
                    3.0,
                    (Some(0.8), 0.4, 0.0),
                ),
            ],
            redis_version: "7".into(),
            ..Results::default()
        }
    }

    /// The table's rows per client count, and every derived line computed
    /// from them: p50 minus the floor's against rslock's, the agent's CPU
    /// minus the floor's against rslock's process, the whole machine.
    #[test]
    fn the_floor_is_subtracted_from_the_measured_rows() {
        let md = render(
            &results(),
            &Environment::default(),
            &[Peer::Agent, Peer::Rslock],
        );
        assert!(md.contains("### The socket's floor"), "{md}");
        assert!(
            md.contains(
                "| 1 | floor: 2 × `GET /healthz` | 5000 | 0.200 / 0.400 | 20.0 | 20.0 | 0.00 | 40.0 | 20.0 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| 64 | agent: acquire + release | 10000 | 6.00 / 12.0 | 90.0 | 30.0 | 80.0 | 200 | 20.0 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| 64 | rslock in-process | 12000 | 5.00 / 10.0 | - | 100 | 80.0 | 180 | 20.0 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "1 client(s), latency: agent p50 0.450 ms − floor p50 0.200 ms = 0.250 ms, the lock work \
                 beyond two bare round trips, against rslock's whole cycle 0.250 ms (1.00×); the floor alone \
                 is 44% of the agent's p50."
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "64 client(s), agent CPU: 90.0 µs per cycle − the floor's 40.0 µs = 50.0 µs of lock work in \
                 the agent, against rslock's whole process 100 µs per cycle (0.50×)."
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "64 client(s), whole machine: agent + driver + masters 200 µs per cycle, rslock's driver + \
                 masters 180 µs (1.11×; rslock / agent 0.90, beside cycles/s agent / rslock 0.83); the \
                 floor's own whole machine 60.0 µs."
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "1 client(s), what the 1.2× latency target takes: an agent p50 of at most 0.300 ms, 0.050 ms \
                 over rslock's cycle; the floor alone is 0.200 ms (4.0× that), so the lock work beyond the floor \
                 would have to take at most 0.100 ms, 0.40× rslock's whole cycle (now 1.00×)."
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "64 client(s), what 1× rslock's cycles/s takes: the whole machine at most rslock's 180 µs per \
                 cycle; less the floor's 60.0 µs, the lock work (agent, driver and masters beyond two bare round \
                 trips) would have to cost at most 120 µs, against 140 µs now (1.17×)."
            ),
            "{md}"
        );
        assert!(!md.contains("1 client(s), what 1×"), "{md}");
        assert!(!md.contains("64 client(s), what the 1.2×"), "{md}");
        assert!(
            md.contains(
                "64 client(s), throughput: the floor runs 20000 cycles/s against rslock's 12000 (1.67×) \
                 and the agent's 10000."
            ),
            "{md}"
        );
    }

    /// The floor is a row of its own: the W1 table, the summary and the
    /// targets read the agent's and rslock's W1 runs as before.
    #[test]
    fn the_floor_changes_no_target_and_no_w1_row() {
        let md = render(
            &results(),
            &Environment::default(),
            &[Peer::Agent, Peer::Rslock],
        );
        assert!(
            md.contains("| W1, 64 clients: agent ≥ rslock in-process | agent 10000 cycles/s, rslock 12000 cycles/s: 0.83× | **MISSED** |"),
            "{md}"
        );
        assert!(
            md.contains("≤ 1.2× rslock's | agent 0.45 ms, rslock 0.25 ms: 1.80× | **MISSED** |"),
            "{md}"
        );
        let w1 = md
            .split("## W1: uncontended")
            .nth(1)
            .and_then(|s| s.split("### The socket's floor").next())
            .expect("a W1 section before the floor");
        assert_eq!(w1.matches("\n| agent |").count(), 2, "{w1}");
        assert!(!w1.contains("healthz"), "{w1}");
    }

    /// A floor without CPU readings still shows its latency line; the CPU
    /// cells are `-` and no CPU line is made up.
    #[test]
    fn missing_cpu_readings_show_as_dashes() {
        let mut results = results();
        for r in &mut results.runs {
            r.cpu = None;
        }
        let md = render(
            &results,
            &Environment::default(),
            &[Peer::Agent, Peer::Rslock],
        );
        assert!(
            md.contains(
                "| 1 | floor: 2 × `GET /healthz` | 5000 | 0.200 / 0.400 | - | 20.0 | - | - | 20.0 |"
            ),
            "{md}"
        );
        assert!(md.contains("1 client(s), latency:"), "{md}");
        assert!(!md.contains("agent CPU:"), "{md}");
        assert!(!md.contains("whole machine: agent"), "{md}");
    }
}
