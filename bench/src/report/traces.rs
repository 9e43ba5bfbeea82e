//! W12's part of the report: the agent's CPU per W1 cycle with tracing off
//! and with every request traced, and their ratio, at each client count.

use std::fmt::Write;

use super::{num, one_line};
use crate::plan::Results;
use crate::traces::ROUNDS;

pub fn section(md: &mut String, results: &Results) {
    let Some(measured) = &results.tracing else {
        return;
    };
    let title = "## W12: what tracing costs the agent (the agent only)";
    let t = match measured {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(md, "{title}\n\nn/a: {}\n", one_line(e));
            return;
        }
    };
    let _ = writeln!(
        md,
        "{title}\n\nW1 (distinct keys, acquire + release) through an agent with tracing off and \
         one with `tracing.sample_ratio: 1.0` (every cycle's acquire and release spans made and \
         exported) to an OTLP/HTTP receiver in the benchmark process ({} exports answered), over \
         the same masters; {ROUNDS} alternating rounds of each, summed. CPU: the agent process's \
         user + system time over each run's warm-up and window, per grant.\n",
        t.exports
    );
    let _ = writeln!(
        md,
        "| clients | cycles/s off | cycles/s on | agent CPU µs per cycle, off | on | on / off |\n|---|---|---|---|---|---|"
    );
    for row in &t.rows {
        let (off, on) = (row.off_us_per_cycle(), row.on_us_per_cycle());
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {:.2}× |",
            row.clients,
            num(row.off_cycles as f64 / row.off_window_s.max(f64::MIN_POSITIVE)),
            num(row.on_cycles as f64 / row.on_window_s.max(f64::MIN_POSITIVE)),
            num(off),
            num(on),
            on / off
        );
    }
    md.push('\n');
}
