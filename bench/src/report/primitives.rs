//! W11's part of the report: a permit cycle beside a lock cycle at each
//! client count, and a leadership hand-off beside a lock hand-off, with
//! their ratios (permit / lock, election / lock) from the same run.

use std::fmt::Write;

use super::{num, one_line, ratio};
use crate::plan::Results;
use crate::primitives::{Cycles, Handoffs, Primitives};
use crate::spec::Percentiles;

pub fn section(md: &mut String, results: &Results) {
    let Some(measured) = &results.primitives else {
        return;
    };
    let p = match measured {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(
                md,
                "## W11: semaphores and elections beside locks (the agent only)\n\nn/a: {}\n",
                one_line(e)
            );
            return;
        }
    };
    let _ = writeln!(
        md,
        "## W11: semaphores and elections beside locks (the agent only)\n\nThrough the run's agent \
         over the same masters. Cycles: each client loops acquire + release on its own \
         connection, a lock on a resource of its own (as W1), then a permit of one semaphore of \
         {} permits shared by every client (with more clients than permits, a cycle includes the \
         wait for a free one). Hand-offs: a lock's, one holder and one waiter, from the release's \
         start to the waiter's grant; an election's, {} campaigners, from the leader dropping its \
         campaign (resigning) to another's `elected`, the resigned one campaigning again. \
         Ratios: permit / lock, election / lock; above 1× is more cycles/s, or slower.\n",
        p.limit, p.campaigners
    );
    cycles(md, p);
    handoffs(md, p);
}

fn errors(n: u64, first: Option<&String>) -> String {
    if n == 0 {
        "0".to_string()
    } else {
        format!("{n}: {}", one_line(first.map_or("?", String::as_str)))
    }
}

fn p50_p99(p: &Percentiles) -> String {
    if p.count == 0 {
        return "-".to_string();
    }
    format!("{} / {}", num(p.p50), num(p.p99))
}

fn cycles(md: &mut String, p: &Primitives) {
    let _ = writeln!(
        md,
        "| clients | lock cycles/s | permit cycles/s | permit / lock | lock p50 / p99 ms | permit \
         p50 / p99 ms | permit / lock p50 | errors |\n|---|---|---|---|---|---|---|---|"
    );
    let mut counts: Vec<usize> = p.cycles.iter().map(|c| c.clients).collect();
    counts.dedup();
    for clients in counts {
        let lock = p.cycles("lock", clients);
        let permit = p.cycles("permit", clients);
        let rate = |c: Option<&Cycles>| c.map_or("-".to_string(), |c| num(c.cycles_per_s));
        let lat = |c: Option<&Cycles>| c.map_or("-".to_string(), |c| p50_p99(&c.cycle));
        let (rate_ratio, p50_ratio) = match (lock, permit) {
            (Some(l), Some(s)) => (
                ratio(s.cycles_per_s, Some(l.cycles_per_s)),
                if l.cycle.count > 0 && s.cycle.count > 0 {
                    ratio(s.cycle.p50, Some(l.cycle.p50))
                } else {
                    "-".to_string()
                },
            ),
            _ => ("-".to_string(), "-".to_string()),
        };
        let errs: Vec<String> = [lock, permit]
            .into_iter()
            .flatten()
            .filter(|c| c.errors > 0)
            .map(|c| format!("{} {}", c.kind, errors(c.errors, c.first_error.as_ref())))
            .collect();
        let _ = writeln!(
            md,
            "| {clients} | {} | {} | {rate_ratio} | {} | {} | {p50_ratio} | {} |",
            rate(lock),
            rate(permit),
            lat(lock),
            lat(permit),
            if errs.is_empty() {
                "0".to_string()
            } else {
                errs.join("; ")
            }
        );
    }
    md.push('\n');
}

fn handoffs(md: &mut String, p: &Primitives) {
    let _ = writeln!(
        md,
        "| hand-off | count | p50 ms | p99 ms | max ms | errors |\n|---|---|---|---|---|---|"
    );
    let label = |h: &Handoffs| match h.kind {
        "lock" => "lock: the holder releases, the waiter is granted".to_string(),
        "election" => format!(
            "election: the leader resigns, one of {} others is elected",
            p.campaigners - 1
        ),
        other => other.to_string(),
    };
    for h in &p.handoffs {
        let (p50, p99, max) = if h.latency.count > 0 {
            (num(h.latency.p50), num(h.latency.p99), num(h.latency.max))
        } else {
            ("-".into(), "-".into(), "-".into())
        };
        let _ = writeln!(
            md,
            "| {} | {} | {p50} | {p99} | {max} | {} |",
            label(h),
            h.latency.count,
            errors(h.errors, h.first_error.as_ref())
        );
    }
    if let (Some(l), Some(e)) = (p.handoff("lock"), p.handoff("election")) {
        if l.latency.count > 0 && e.latency.count > 0 {
            let _ = writeln!(
                md,
                "\nElection / lock hand-off: p50 {}, p99 {}.",
                ratio(e.latency.p50, Some(l.latency.p50)),
                ratio(e.latency.p99, Some(l.latency.p99))
            );
        }
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn percentiles(p50: f64, p99: f64) -> Percentiles {
        Percentiles {
            count: 10,
            p50,
            p99,
            p999: p99,
            max: p99,
            ..Percentiles::default()
        }
    }

    fn cycles(kind: &'static str, clients: usize, rate: f64, p50: f64) -> Cycles {
        Cycles {
            kind,
            clients,
            cycles_per_s: rate,
            cycle: percentiles(p50, p50 * 2.0),
            errors: 0,
            first_error: None,
        }
    }

    fn results(p: Result<Primitives, String>) -> Results {
        Results {
            primitives: Some(p),
            redis_version: "7".into(),
            ..Results::default()
        }
    }

    /// The table carries both kinds side by side and their ratios.
    #[test]
    fn ratios_of_permit_to_lock_and_election_to_lock() {
        let p = Primitives {
            limit: 4,
            campaigners: 3,
            cycles: vec![
                cycles("lock", 1, 1000.0, 1.0),
                cycles("permit", 1, 500.0, 2.0),
                cycles("lock", 16, 4000.0, 4.0),
                cycles("permit", 16, 1000.0, 16.0),
            ],
            handoffs: vec![
                Handoffs {
                    kind: "lock",
                    latency: percentiles(1.0, 2.0),
                    errors: 0,
                    first_error: None,
                },
                Handoffs {
                    kind: "election",
                    latency: percentiles(3.0, 8.0),
                    errors: 1,
                    first_error: Some("term 5 after term 5".into()),
                },
            ],
        };
        let mut md = String::new();
        section(&mut md, &results(Ok(p)));
        assert!(md.contains("| 1 | 1000 | 500 | 0.50× | 1.00 / 2.00 | 2.00 / 4.00 | 2.00× | 0 |"));
        assert!(md.contains("| 16 | 4000 | 1000 | 0.25× | 4.00 / 8.00 | 16.0 / 32.0 | 4.00× | 0 |"));
        assert!(md.contains("| 10 | 3.00 | 8.00 | 8.00 | 1: term 5 after term 5 |"));
        assert!(md.contains("Election / lock hand-off: p50 3.00×, p99 4.00×."));
    }

    /// A W11 that could not run says why in place of its tables.
    #[test]
    fn failure_is_one_line() {
        let mut md = String::new();
        section(&mut md, &results(Err("connect: refused\nmore".into())));
        assert!(md.contains("n/a: connect: refused"));
        assert!(!md.contains("| clients |"));
    }
}
