//! What a run found ([`Report`]), what it counts as a problem, and how
//! it prints.

use std::fmt;

use serde::Serialize;

use super::{multi, shared, Control, FenceControl, MultiRun, Property, SharedRun};
use crate::checker::Findings;
use crate::cluster::Topology;
use crate::nemesis::NemesisReport;
use crate::workload::StatsSnapshot;

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub name: String,
    pub seed: u64,
    pub masters: usize,
    pub topology: Topology,
    pub agents: usize,
    pub clients: usize,
    pub resources: usize,
    pub seconds: f64,
    pub max_ttl_ms: u64,
    pub quarantine_ms: u64,
    pub delayed_restart: bool,
    /// The agents' in-vote incarnation marker check.
    pub marker_check: bool,
    /// The agents' in-vote eviction check.
    pub eviction_check: bool,
    /// The agents' watch on the masters' clocks.
    pub clock_check: bool,
    /// The agents' process check of a vote answered NOSCRIPT.
    pub process_check: bool,
    /// Set for a control run.
    pub control: Option<Control>,
    /// Set for the fence control run.
    pub fence_control: Option<FenceControl>,
    /// Set for either half of the multi-resource pair.
    pub multi: Option<MultiRun>,
    /// Set for either half of the read-write pair.
    pub shared: Option<SharedRun>,
    /// What a control run judges.
    pub property: Property,
    /// Clients of semaphores and elections were in the mix: the run must
    /// have granted permits and elected leaders to judge their properties.
    pub primitives_expected: (bool, bool),
    pub stats: StatsSnapshot,
    pub nemesis: NemesisReport,
    pub findings: Findings,
    /// Keys the final scan found (each is also a leak).
    pub keys_left: usize,
    /// Lines of agent logs that show a panic.
    pub agent_panics: Vec<String>,
    /// The worst scheduling lag of the harness itself, in ms.
    pub harness_lag_ms: f64,
    /// Each agent: name, RSS at start and at the end (KiB), times started.
    pub agent_rss: Vec<(String, u64, u64, u32)>,
}

impl Report {
    /// Share of answered attempts that were `no_quorum`.
    pub fn no_quorum_share(&self) -> f64 {
        let t = self.stats.total();
        if t.answered() == 0 {
            0.0
        } else {
            t.no_quorum as f64 / t.answered() as f64
        }
    }

    /// Whether the run passes: no violation, no hold overrun, no leak, no
    /// liveness failure, no panic, no contract breach.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let f = &self.findings;
        if !f.violations.is_empty() {
            out.push(format!("{} safety violations", f.violations.len()));
        }
        if f.hold_overruns() > 0 {
            out.push(format!(
                "{} holds ran past their validity",
                f.hold_overruns()
            ));
        }
        if !f.leaks.is_empty() {
            out.push(format!("{} leaked keys", f.leaks.len()));
        }
        if !self.nemesis.liveness_failures.is_empty() {
            out.push(format!(
                "{} liveness failures",
                self.nemesis.liveness_failures.len()
            ));
        }
        if !self.agent_panics.is_empty() {
            out.push(format!("{} agent panics", self.agent_panics.len()));
        }
        let fences = &f.fences;
        if !fences.out_of_order.is_empty() {
            out.push(format!("{} fences out of order", fences.out_of_order.len()));
        }
        if !fences.out_of_order_across.is_empty() {
            out.push(format!(
                "{} fences out of order across resources",
                fences.out_of_order_across.len()
            ));
        }
        if !fences.stale_writes_accepted.is_empty() {
            out.push(format!(
                "{} stale writes accepted",
                fences.stale_writes_accepted.len()
            ));
        }
        let p = &f.primitives;
        if !p.semaphore_excess.is_empty() {
            out.push(format!(
                "{} semaphore excesses (more permits believed than the limit)",
                p.semaphore_excess.len()
            ));
        }
        if !p.leader_overlaps.is_empty() {
            out.push(format!(
                "{} times two leaders at once",
                p.leader_overlaps.len()
            ));
        }
        if !p.term_inversions.is_empty() {
            out.push(format!("{} terms out of order", p.term_inversions.len()));
        }
        if !f.multi.overlaps.is_empty() {
            let n = f.multi.overlaps.len();
            out.push(format!("{n} times a resource held by two grants at once"));
        }
        if !f.shared.overlaps.is_empty() {
            let n = f.shared.overlaps.len();
            out.push(format!("{n} times a writer beside a reader"));
        }
        if self.primitives_expected.0 && p.permits == 0 {
            out.push("no permit was granted: the semaphore property saw nothing".into());
        }
        if self.primitives_expected.1 && p.leaderships == 0 {
            out.push("no leader was elected: the election properties saw nothing".into());
        }
        if f.sections > 0 && fences.fenced_grants == 0 {
            out.push("no grant carried a fence: the fence checks saw nothing".into());
        }
        if self.stats.total().malformed > 0 {
            out.push(format!(
                "{} answers broke the API contract",
                self.stats.total().malformed
            ));
        }
        out
    }
}

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * n as f64 / d as f64)
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.stats.total();
        let masters = match self.topology {
            Topology::Singles => format!("{} masters", self.masters),
            Topology::Clusters {
                primaries,
                replicas,
            } => format!(
                "{} cluster masters ({primaries} primaries, {replicas} replica each)",
                self.masters
            ),
        };
        writeln!(
            f,
            "== {}: {masters}, {} agents, {} clients on {} resources, {:.1}s, seed {}",
            self.name, self.agents, self.clients, self.resources, self.seconds, self.seed
        )?;
        writeln!(
            f,
            "   max_ttl {}ms, quarantine {}ms, delayed_restart {}, marker check {}, eviction check {}, \
             clock check {}, process check {}{}",
            self.max_ttl_ms,
            self.quarantine_ms,
            if self.delayed_restart { "on" } else { "off" },
            if self.marker_check { "on" } else { "off" },
            if self.eviction_check { "on" } else { "off" },
            if self.clock_check { "on" } else { "off" },
            if self.process_check { "on" } else { "off" },
            match self.fence_control {
                Some(c) => format!(
                    ", fence write-back {}, agent i's clock i*{}ms behind",
                    if c.writeback { "on" } else { "off" },
                    c.skew_ms
                ),
                None => String::new(),
            }
        )?;
        writeln!(
            f,
            "operations: {} requests; {} lock attempts: {} granted, {} taken, {} no_quorum, {} other refusals, {} agent unreachable, {} unanswered, {} malformed",
            self.stats.operations(),
            t.attempts,
            t.granted,
            t.taken,
            t.no_quorum,
            t.refused,
            t.unreachable,
            t.no_answer,
            t.malformed
        )?;
        for (kind, c) in &self.stats.by_kind {
            writeln!(
                f,
                "   {kind:<13} {:>6} attempts, {:>5} granted, {:>5} taken, {:>4} no_quorum",
                c.attempts, c.granted, c.taken, c.no_quorum
            )?;
        }
        let s = &self.stats;
        writeln!(
            f,
            "   extends {} ({} lost), hold renewals {}, holds told lost {}, hold streams broken {}, releases {} ({} false, {} unanswered)",
            s.extends, s.extends_lost, s.renewals, s.holds_lost, s.holds_broken, s.releases, s.releases_false, s.releases_unanswered
        )?;
        let by_kind = self.nemesis.by_kind();
        if by_kind.is_empty() {
            writeln!(f, "faults: none")?;
        } else {
            let list: Vec<String> = by_kind
                .iter()
                .map(|(k, n)| format!("{} {n}", k.as_str()))
                .collect();
            writeln!(
                f,
                "faults: {} injected: {}",
                self.nemesis.faults.len(),
                list.join(", ")
            )?;
            // A control run's few faults, each as struck (an eviction's
            // policy, cache keys and keys evicted per master).
            if self.control.is_some() {
                for fault in &self.nemesis.faults {
                    writeln!(f, "   {} {}", fault.kind.as_str(), fault.detail)?;
                }
            }
        }
        let fd = &self.findings;
        let kinds: Vec<String> = fd
            .sections_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            f,
            "checker: {} critical sections ({}); safety violations {}; overruns {} (holds {}); leaks {} ({} key sightings); overlaps outside validity {}",
            fd.sections,
            kinds.join(", "),
            fd.violations.len(),
            fd.overruns.len(),
            fd.hold_overruns(),
            fd.leaks.len(),
            fd.sightings,
            fd.benign_overlaps
        )?;
        for v in fd.violations.iter().take(5) {
            writeln!(f, "   {v}")?;
        }
        if fd.violations.len() > 5 {
            writeln!(f, "   ... {} more", fd.violations.len() - 5)?;
        }
        for o in fd.overruns.iter().take(5) {
            writeln!(f, "   {o}")?;
        }
        for l in fd.leaks.iter().take(5) {
            writeln!(f, "   {l}")?;
        }
        multi::write_findings(f, self)?;
        shared::write_findings(f, self)?;
        let p = &fd.primitives;
        if p.permits > 0 || self.primitives_expected.0 {
            let most: Vec<String> = p
                .most_believed
                .iter()
                .map(|(name, limit, most)| format!("{name} {most} of {limit}"))
                .collect();
            writeln!(
                f,
                "semaphores: {} permit sections; most believed at once: {}; excesses {}",
                p.permits,
                if most.is_empty() {
                    "-".to_string()
                } else {
                    most.join(", ")
                },
                p.semaphore_excess.len()
            )?;
            for e in p.semaphore_excess.iter().take(3) {
                writeln!(f, "   {e}")?;
            }
        }
        if p.leaderships > 0 || self.primitives_expected.1 {
            writeln!(
                f,
                "elections: {} leaderships in {} elections; two leaders at once {}; terms out of order {}",
                p.leaderships,
                p.elections,
                p.leader_overlaps.len(),
                p.term_inversions.len()
            )?;
            for o in p.leader_overlaps.iter().take(3) {
                writeln!(f, "   {o}")?;
            }
            for i in p.term_inversions.iter().take(3) {
                writeln!(f, "   {i}")?;
            }
        }
        let fences = &fd.fences;
        writeln!(
            f,
            "fences: {} fenced grants ({} without a fence); out of order {} (across resources {}); \
             store writes {} accepted, {} refused, {} unanswered; stale writes accepted {}",
            fences.fenced_grants,
            fences.unfenced_grants,
            fences.out_of_order.len(),
            fences.out_of_order_across.len(),
            fences.writes_accepted,
            fences.writes_refused,
            fences.writes_failed,
            fences.stale_writes_accepted.len()
        )?;
        for i in fences
            .out_of_order
            .iter()
            .chain(&fences.out_of_order_across)
            .take(3)
        {
            writeln!(f, "   {i}")?;
        }
        for w in fences.stale_writes_accepted.iter().take(3) {
            writeln!(f, "   {w}")?;
        }
        writeln!(
            f,
            "   harness scheduling lag: worst {:.0}ms",
            self.harness_lag_ms
        )?;
        let rss: Vec<String> = self
            .agent_rss
            .iter()
            .map(|(name, start, end, starts)| {
                format!(
                    "{name} {:.1} -> {:.1} MiB ({starts} starts)",
                    *start as f64 / 1024.0,
                    *end as f64 / 1024.0
                )
            })
            .collect();
        writeln!(f, "   agent RSS: {}", rss.join(", "))?;
        let (mut n, mut down) = (0, 0);
        let by_phase: Vec<String> = s
            .quorum_readings
            .iter()
            .map(|(p, rn, rd)| {
                n += rn;
                down += rd;
                format!("{p} {}", pct(*rd, *rn))
            })
            .collect();
        let phases: Vec<String> = s
            .by_phase
            .iter()
            .map(|(p, c)| format!("{p} {} of {}", pct(c.no_quorum, c.answered()), c.answered()))
            .collect();
        writeln!(
            f,
            "availability: no_quorum on {} of answered attempts ({}); by phase: {}",
            pct(t.no_quorum, t.answered()),
            t.answered(),
            phases.join(", ")
        )?;
        writeln!(
            f,
            "   over time: agents saw no usable quorum in {} of {} /v1/nodes readings; by phase: {}",
            pct(down, n),
            n,
            by_phase.join(", ")
        )?;
        let mut times: Vec<f64> = self
            .nemesis
            .recoveries
            .iter()
            .filter_map(|r| r.after_ms)
            .collect();
        times.sort_by(f64::total_cmp);
        if !self.nemesis.recoveries.is_empty() {
            writeln!(
                f,
                "recovery after heal: {} cycles, median {:.0}ms, p90 {:.0}ms, max {:.0}ms (bound {}ms); liveness failures {}",
                self.nemesis.recoveries.len(),
                quantile(&times, 0.5),
                quantile(&times, 0.9),
                times.last().copied().unwrap_or(0.0),
                self.nemesis.liveness_bound_ms,
                self.nemesis.liveness_failures.len()
            )?;
            let mut by_kind: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
            for r in &self.nemesis.recoveries {
                if let (1, Some(ms)) = (r.kinds.len(), r.after_ms) {
                    by_kind.entry(r.kinds[0].as_str()).or_default().push(ms);
                }
            }
            let parts: Vec<String> = by_kind
                .iter()
                .map(|(k, v)| format!("{k} {:.0}ms", v.iter().copied().fold(0.0, f64::max)))
                .collect();
            if !parts.is_empty() {
                writeln!(f, "   alone, worst: {}", parts.join(", "))?;
            }
        }
        for failure in &self.nemesis.liveness_failures {
            writeln!(f, "   LIVENESS: {failure}")?;
        }
        for r in &self.nemesis.recoveries {
            if r.after_ms.is_none_or(|ms| ms > 1000.0) {
                let times: Vec<String> = r
                    .per_agent_ms
                    .iter()
                    .enumerate()
                    .map(|(a, t)| match t {
                        Some(ms) => format!("a{} {ms:.0}ms", a + 1),
                        None => format!("a{} never", a + 1),
                    })
                    .collect();
                writeln!(
                    f,
                    "   slow recovery, cycle {}: {} -> {}",
                    r.cycle,
                    r.faults.join(" + "),
                    times.join(", ")
                )?;
                for why in &r.last_refusals {
                    writeln!(f, "      {}", why.chars().take(300).collect::<String>())?;
                }
            }
        }
        if !self.nemesis.kill_release_ms.is_empty() {
            let mut k = self.nemesis.kill_release_ms.clone();
            k.sort_by(f64::total_cmp);
            writeln!(
                f,
                "client killed mid-hold -> its key gone from every master: n={}, median {:.0}ms, max {:.0}ms",
                k.len(),
                quantile(&k, 0.5),
                k.last().copied().unwrap_or(0.0)
            )?;
        }
        if !self.nemesis.skipped.is_empty() {
            writeln!(f, "   not injected: {}", self.nemesis.skipped.join("; "))?;
        }
        for p in &self.agent_panics {
            writeln!(f, "   AGENT PANIC: {p}")?;
        }
        for m in &self.stats.malformed_samples {
            writeln!(f, "   CONTRACT: {m}")?;
        }
        let problems = self.problems();
        if problems.is_empty() {
            write!(f, "result: ok")
        } else {
            write!(f, "result: {}", problems.join(", "))
        }
    }
}
