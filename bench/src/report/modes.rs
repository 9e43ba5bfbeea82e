//! W15's part of the report: a reader's cycle and a writer's cycle beside
//! a lock's at each client count, with their ratios to the lock from the
//! same run; then readers on one resource at 1, 8 and 64 beside as many
//! clients taking it exclusively.

use std::fmt::Write;

use super::{num, one_line, ratio};
use crate::modes::Cycles;
use crate::plan::Results;

const TITLE: &str = "## W15: shared and exclusive locks (the agent only)";

/// The cycles' rows, in order, with what each one is.
const KINDS: [(&str, &str); 4] = [
    ("lock", "lock (no mode)"),
    ("shared", "shared (a reader alone)"),
    ("exclusive", "exclusive (a writer after a reader)"),
    ("shared-turn", "shared (a reader after a writer)"),
];

pub fn section(md: &mut String, results: &Results) {
    let Some(measured) = &results.modes else {
        return;
    };
    let m = match measured {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(md, "{TITLE}\n\nn/a: {}\n", one_line(e));
            return;
        }
    };
    let _ = writeln!(
        md,
        "{TITLE}\n\nThrough the run's agent over the same masters. Each client loops acquire + \
         release on its own keep-alive connection and its own resource, one loop after the \
         other: a lock (no mode, as W11's); a reader (`\"mode\": \"shared\"`), alone on its \
         resource; and a resource taken shared, then exclusive, in turn. An exclusive acquire \
         is a lock's on the wire (the mode is left out) and, on a resource no reader has used, \
         in the agent too; so the exclusive row is the writer of the alternating loop, on a \
         resource a reader has just left, and the last row that loop's reader. Their cycles/s \
         are the loop's scaled by its time over theirs (the rate of a loop of that kind alone); \
         with more than one client, that loop's readers and writers run at once, so both of \
         its rows carry the mix's load. Ratios: to the lock; above 1× is more cycles/s, or \
         slower.\n"
    );
    let _ = writeln!(
        md,
        "| clients | cycle | cycles/s | / lock | p50 / p99 ms | / lock p50 | errors |\n\
         |---|---|---|---|---|---|---|"
    );
    let mut counts: Vec<usize> = m.cycles.iter().map(|c| c.clients).collect();
    counts.dedup();
    for clients in counts {
        let lock = m.cycles("lock", clients);
        for (kind, what) in KINDS {
            let Some(c) = m.cycles(kind, clients) else {
                continue;
            };
            let (rate_ratio, p50_ratio) = match lock {
                Some(l) if kind != "lock" => (
                    ratio(c.cycles_per_s, Some(l.cycles_per_s)),
                    if c.cycle.count > 0 && l.cycle.count > 0 {
                        ratio(c.cycle.p50, Some(l.cycle.p50))
                    } else {
                        "-".to_string()
                    },
                ),
                _ => ("-".to_string(), "-".to_string()),
            };
            let _ = writeln!(
                md,
                "| {clients} | {what} | {} | {rate_ratio} | {} | {p50_ratio} | {} |",
                num(c.cycles_per_s),
                latency(c),
                errors(&[c])
            );
        }
    }
    md.push('\n');
    if m.readers.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "Readers: every client on one resource, shared acquire + release loops; beside them, \
         as many clients taking one resource exclusively (each acquire waits for the others). \
         Ratio: shared / exclusive cycles/s.\n"
    );
    let _ = writeln!(
        md,
        "| clients on one resource | shared cycles/s | shared p50 / p99 ms | exclusive cycles/s | \
         exclusive p50 / p99 ms | shared / exclusive | errors |\n|---|---|---|---|---|---|---|"
    );
    let mut counts: Vec<usize> = m.readers.iter().map(|c| c.clients).collect();
    counts.dedup();
    for clients in counts {
        let shared = m.readers("shared", clients);
        let exclusive = m.readers("exclusive", clients);
        let rate = |c: Option<&Cycles>| c.map_or("-".to_string(), |c| num(c.cycles_per_s));
        let lat = |c: Option<&Cycles>| c.map_or("-".to_string(), latency);
        let rate_ratio = match (shared, exclusive) {
            (Some(s), Some(x)) => ratio(s.cycles_per_s, Some(x.cycles_per_s)),
            _ => "-".to_string(),
        };
        let both: Vec<&Cycles> = [shared, exclusive].into_iter().flatten().collect();
        let _ = writeln!(
            md,
            "| {clients} | {} | {} | {} | {} | {rate_ratio} | {} |",
            rate(shared),
            lat(shared),
            rate(exclusive),
            lat(exclusive),
            errors(&both)
        );
    }
    md.push('\n');
}

fn latency(c: &Cycles) -> String {
    if c.cycle.count == 0 {
        return "-".to_string();
    }
    format!("{} / {}", num(c.cycle.p50), num(c.cycle.p99))
}

fn errors(cycles: &[&Cycles]) -> String {
    let errs: Vec<String> = cycles
        .iter()
        .filter(|c| c.errors > 0)
        .map(|c| {
            let first = c.first_error.as_deref().unwrap_or("?");
            format!("{} {}: {}", c.kind, c.errors, one_line(first))
        })
        .collect();
    if errs.is_empty() {
        "0".to_string()
    } else {
        errs.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::Modes;
    use crate::spec::Percentiles;

    fn cycles(kind: &'static str, clients: usize, rate: f64, p50: f64) -> Cycles {
        Cycles {
            kind,
            clients,
            cycles_per_s: rate,
            cycle: Percentiles {
                count: 10,
                p50,
                p99: p50 * 2.0,
                p999: p50 * 2.0,
                max: p50 * 2.0,
                ..Percentiles::default()
            },
            errors: 0,
            first_error: None,
        }
    }

    fn results(m: Result<Modes, String>) -> Results {
        Results {
            modes: Some(m),
            ..Results::default()
        }
    }

    /// Each kind is a row with its ratios to the lock of the same client
    /// count; the readers' table sets shared beside exclusive.
    #[test]
    fn ratios_to_the_lock_and_readers_beside_a_writer() {
        let mut failing = cycles("exclusive", 64, 100.0, 600.0);
        failing.errors = 2;
        failing.first_error = Some("exclusive: 503 no_quorum\nmore".into());
        let m = Modes {
            cycles: vec![
                cycles("lock", 1, 1000.0, 1.0),
                cycles("shared", 1, 800.0, 1.25),
                cycles("shared-turn", 1, 700.0, 1.5),
                cycles("exclusive", 1, 900.0, 1.1),
            ],
            readers: vec![cycles("shared", 64, 4000.0, 16.0), failing],
        };
        let mut md = String::new();
        section(&mut md, &results(Ok(m)));
        assert!(md.contains("## W15"), "{md}");
        assert!(
            md.contains("| 1 | lock (no mode) | 1000 | - | 1.00 / 2.00 | - | 0 |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | shared (a reader alone) | 800 | 0.80× | 1.25 / 2.50 | 1.25× | 0 |"),
            "{md}"
        );
        // The table's order, not the measurement's.
        let writer = md.find("| 1 | exclusive (a writer after a reader) | 900 | 0.90×");
        let reader = md.find("| 1 | shared (a reader after a writer) | 700 | 0.70×");
        assert!(writer.is_some() && writer < reader, "{md}");
        assert!(
            md.contains(
                "| 64 | 4000 | 16.0 / 32.0 | 100 | 600 / 1200 | 40× | exclusive 2: exclusive: 503 no_quorum |"
            ),
            "{md}"
        );
    }

    /// A W15 that could not run says why in place of its tables.
    #[test]
    fn failure_is_one_line() {
        let mut md = String::new();
        section(&mut md, &results(Err("connect: refused\nmore".into())));
        assert!(md.contains("n/a: connect: refused"));
        assert!(!md.contains("| clients"));
    }
}
