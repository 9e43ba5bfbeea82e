//! W13's part of the report: a cycle of one lock on several resources
//! beside a cycle of as many single locks, at each client count, with
//! their ratios (multi / singles) from the same run.

use std::fmt::Write;

use super::{num, one_line, ratio};
use crate::multi::Cycles;
use crate::plan::Results;

const TITLE: &str = "## W13: locks on several resources at once (the agent only)";

pub fn section(md: &mut String, results: &Results) {
    let Some(measured) = &results.multi else {
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
        "{TITLE}\n\nThrough the run's agent over the same masters. Each client loops on its own \
         keep-alive connection and its own {n} resources: multi, one lock on the {n} resources \
         (`POST /v1/locks/acquire`, then `POST /v1/locks/release` of its token); singles, a \
         lock on each of the {n} in turn, then the release of each ({} requests), all {n} held \
         at once as with the one lock. Ratios: multi / singles; above 1× is more cycles/s, or \
         slower.\n",
        2 * m.resources,
        n = m.resources
    );
    let _ = writeln!(
        md,
        "| clients | multi cycles/s | singles cycles/s | multi / singles | multi p50 / p99 ms | \
         singles p50 / p99 ms | multi / singles p50 | errors |\n|---|---|---|---|---|---|---|---|"
    );
    let mut counts: Vec<usize> = m.cycles.iter().map(|c| c.clients).collect();
    counts.dedup();
    for clients in counts {
        let multi = m.cycles("multi", clients);
        let singles = m.cycles("singles", clients);
        let rate = |c: Option<&Cycles>| c.map_or("-".to_string(), |c| num(c.cycles_per_s));
        let lat = |c: Option<&Cycles>| {
            c.filter(|c| c.cycle.count > 0)
                .map_or("-".to_string(), |c| {
                    format!("{} / {}", num(c.cycle.p50), num(c.cycle.p99))
                })
        };
        let (rate_ratio, p50_ratio) = match (multi, singles) {
            (Some(a), Some(s)) => (
                ratio(a.cycles_per_s, Some(s.cycles_per_s)),
                if a.cycle.count > 0 && s.cycle.count > 0 {
                    ratio(a.cycle.p50, Some(s.cycle.p50))
                } else {
                    "-".to_string()
                },
            ),
            _ => ("-".to_string(), "-".to_string()),
        };
        let errs: Vec<String> = [multi, singles]
            .into_iter()
            .flatten()
            .filter(|c| c.errors > 0)
            .map(|c| {
                let first = c.first_error.as_deref().unwrap_or("?");
                format!("{} {}: {}", c.kind, c.errors, one_line(first))
            })
            .collect();
        let _ = writeln!(
            md,
            "| {clients} | {} | {} | {rate_ratio} | {} | {} | {p50_ratio} | {} |",
            rate(multi),
            rate(singles),
            lat(multi),
            lat(singles),
            if errs.is_empty() {
                "0".to_string()
            } else {
                errs.join("; ")
            }
        );
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multi::Multi;
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

    fn results(m: Result<Multi, String>) -> Results {
        Results {
            multi: Some(m),
            ..Results::default()
        }
    }

    /// The table carries both kinds side by side and their ratios.
    #[test]
    fn ratios_of_one_lock_on_three_to_three_single_locks() {
        let mut failing = cycles("singles", 16, 500.0, 30.0);
        failing.errors = 2;
        failing.first_error = Some("singles: 503 no_quorum\nmore".into());
        let m = Multi {
            resources: 3,
            cycles: vec![
                cycles("multi", 1, 900.0, 1.0),
                cycles("singles", 1, 300.0, 3.0),
                cycles("multi", 16, 2000.0, 8.0),
                failing,
            ],
        };
        let mut md = String::new();
        section(&mut md, &results(Ok(m)));
        assert!(md.contains("## W13"), "{md}");
        assert!(
            md.contains("| 1 | 900 | 300 | 3.00× | 1.00 / 2.00 | 3.00 / 6.00 | 0.33× | 0 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| 16 | 2000 | 500 | 4.00× | 8.00 / 16.0 | 30.0 / 60.0 | 0.27× | singles 2: singles: 503 no_quorum |"
            ),
            "{md}"
        );
    }

    /// A W13 that could not run says why in place of its table.
    #[test]
    fn failure_is_one_line() {
        let mut md = String::new();
        section(&mut md, &results(Err("connect: refused\nmore".into())));
        assert!(md.contains("n/a: connect: refused"));
        assert!(!md.contains("| clients |"));
    }
}
