//! The targets of issue 15 and before it in the report, each with what
//! was measured and met or missed (the idle connections' RSS among them).

use std::fmt::Write;

use super::{hot, mib, num, one_line, rate, status};
use crate::cluster::NODE_TIMEOUT_MS;
use crate::idle::{self, Idle};
use crate::peers::Peer;
use crate::plan::{Fault, Results, Run, Workload};
use crate::spec::Report;

/// The targets of issue 15 and before it, one row each, for the
/// workloads that ran; nothing when none did.
pub(super) fn targets(out: &mut String, results: &Results) {
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
