//! W4's section of the report: the masters' limit.

use std::fmt::Write;

use super::{num, one_line};
use crate::plan::Results;

pub(super) fn limit(md: &mut String, results: &Results) {
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
