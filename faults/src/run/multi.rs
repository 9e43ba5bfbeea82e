//! The multi-resource pair: locks on several resources at once beside
//! single locks on the same resources.
//!
//! - On ([`Options::multi_nemesis`]): 3 agents over 5 masters, clients
//!   taking 2 or 3 of 3 resources at once (sets that overlap, named in any
//!   order) and single locks (acquires and holds) of the same resources,
//!   under the random mix of every fault from the start. No resource may be
//!   held by two believed grants at once, a grant of several resources
//!   counted on each; every other property of a run holds too.
//! - Off ([`Options::multi_control`]): the same clients through 2 agents
//!   that grant a request of several resources once one of them has a
//!   quorum (the agents' test-only switch [`MULTI_PARTIAL_ENV`]), no
//!   fault: a resource held by someone else is granted again, and the
//!   checker must find it. It stops at the first finding.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::{Harness, Options, Report};
use crate::clock::Mono;
use crate::cluster::AgentSettings;
use crate::nemesis::{FaultKind, NemesisReport};
use crate::workload::Mix;

/// The agents' test-only switch that turns the all-or-nothing rule off.
pub const MULTI_PARTIAL_ENV: &str = redlock_testkit::switches::MULTI_PARTIAL;

/// How long the short mode's multi-resource nemesis runs.
pub const MULTI_SHORT_DURATION: Duration = Duration::from_secs(25);

/// How long the multi-resource control may look for a resource granted
/// twice (it stops at the first).
pub const MULTI_CONTROL_DURATION: Duration = Duration::from_secs(10);

/// Which half of the multi-resource pair a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MultiRun {
    /// The agents' all-or-nothing rule; off, the run must find a resource
    /// held by two grants at once.
    pub all_or_nothing: bool,
}

impl Options {
    /// The multi-resource nemesis: 3 agents (a3 through connection-keeping
    /// links, as in the nemesis run), 3 acquire and 2 hold clients of single
    /// locks and 3 acquire and 2 hold clients of 2 or 3 resources at once,
    /// all on the same 3 resources, every fault but a client's kill (all
    /// its clients are in this process) mixed at random from the start.
    pub fn multi_nemesis(duration: Duration, seed: u64, faults_bin: std::path::PathBuf) -> Options {
        let mut options = Options::nemesis(duration, seed, faults_bin);
        options.name = "multi-resource (all-or-nothing on, nemesis)".into();
        options.plan.resources = vec!["multi-a".into(), "multi-b".into(), "multi-c".into()];
        options.plan.semaphores = Vec::new();
        options.plan.elections = Vec::new();
        options.mix = Mix {
            acquire: 3,
            hold: 2,
            multi_acquire: 3,
            multi_hold: 2,
            ..Mix::NONE
        };
        options.singles = Vec::new();
        // Its clients are all in this process: no client to kill.
        options.pool.retain(|&k| k != FaultKind::KillClient);
        options.multi = Some(MultiRun {
            all_or_nothing: true,
        });
        options
    }

    /// The multi-resource control: the clients of
    /// [`Options::multi_nemesis`] through 2 agents with
    /// [`MULTI_PARTIAL_ENV`]`=1`, no fault, for at most
    /// [`MULTI_CONTROL_DURATION`].
    pub fn multi_control(seed: u64, faults_bin: std::path::PathBuf) -> Options {
        let mut options = Options::multi_nemesis(MULTI_CONTROL_DURATION, seed, faults_bin);
        options.name = "control multi-resource (all-or-nothing off)".into();
        options.agents = 2;
        options.settings = AgentSettings {
            agent_env: vec![vec![(MULTI_PARTIAL_ENV.to_string(), "1".to_string())]; 2],
            ..AgentSettings::default()
        };
        options.pool = Vec::new();
        options.multi = Some(MultiRun {
            all_or_nothing: false,
        });
        options
    }
}

/// Runs either half of the pair: on, the nemesis run; off, the clients
/// until the checker finds a resource held twice or the time is up.
///
/// # Errors
/// When the cluster cannot be started.
pub(super) async fn run(options: &Options, multi: MultiRun) -> Result<Report, String> {
    if multi.all_or_nothing {
        return super::nemesis(options).await;
    }
    let harness = Harness::start(options).await?;
    let until = harness.started.plus(options.duration);
    while Mono::now() < until
        && harness
            .checker
            .findings(Mono::now())
            .multi
            .overlaps
            .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(harness.finish(options, NemesisReport::default()).await)
}

/// What a run found about the multi-resource property, under the
/// checker's line; nothing for a run without grants of several resources.
pub(super) fn write_findings(f: &mut fmt::Formatter<'_>, r: &Report) -> fmt::Result {
    let m = &r.findings.multi;
    if m.grants == 0 && r.multi.is_none() {
        return Ok(());
    }
    writeln!(
        f,
        "multi-resource: {} grants of several resources ({} resource-sections); a resource held by two grants at once {}",
        m.grants,
        m.resource_sections,
        m.overlaps.len()
    )?;
    for o in m.overlaps.iter().take(5) {
        writeln!(f, "   {o}")?;
    }
    if m.overlaps.len() > 5 {
        writeln!(f, "   ... {} more", m.overlaps.len() - 5)?;
    }
    Ok(())
}

/// The verdict of either half, `None` for the other runs. On: no problem,
/// and grants of several resources to judge; off: a resource held twice
/// must be found.
pub(super) fn verdict(r: &Report) -> Option<String> {
    let multi = r.multi?;
    let m = &r.findings.multi;
    Some(if multi.all_or_nothing {
        let mut problems = r.problems();
        if m.grants == 0 {
            problems.push(
                "no grant of several resources: the multi-resource property saw nothing".into(),
            );
        }
        if problems.is_empty() {
            format!(
                "PASS {}: {} grants of several resources, no resource held by two at once",
                r.name, m.grants
            )
        } else {
            format!("FAIL {}: {}", r.name, problems.join(", "))
        }
    } else if !m.overlaps.is_empty() {
        format!(
            "PASS {}: the checker saw {} times a resource held by two grants at once, as it must",
            r.name,
            m.overlaps.len()
        )
    } else {
        format!(
            "FAIL {}: none found in {} grants of several resources; the checker cannot see a \
             resource granted twice, or the agents ignored {MULTI_PARTIAL_ENV}=1",
            r.name, m.grants
        )
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::checker::multi::{MultiFindings, MultiOverlap};
    use crate::checker::{Checker, ClientKind, Grant, Section, Violation};
    use crate::run::tests::fence_report;

    /// A report of `options` with `grants` grants of several resources and
    /// one overlap or none.
    fn report(options: &Options, grants: usize, overlap: bool) -> Report {
        let mut r = fence_report(true, Default::default());
        r.name = options.name.clone();
        r.fence_control = None;
        r.multi = options.multi;
        r.findings.multi = MultiFindings {
            grants,
            resource_sections: grants * 2,
            overlaps: Vec::new(),
        };
        if overlap {
            r.findings.multi.overlaps.push(MultiOverlap(Violation {
                resource: "multi-a".into(),
                first: section(),
                second: section(),
                overlap_ms: 10.0,
                strict: true,
            }));
        }
        r
    }

    /// A section for the finding's text.
    fn section() -> Section {
        let c = Checker::new();
        let grant = Grant {
            resource: "multi-a".into(),
            client: "c".into(),
            kind: ClientKind::Acquire,
            agent: 0,
            token: "t".into(),
            ttl_ms: 1000,
            requested: Mono(1),
            granted: Mono(2),
            validity_ms: Some(900),
            fence: None,
        };
        c.enter(grant, Mono(2));
        c.by_token("t").unwrap()
    }

    #[test]
    fn the_control_passes_only_when_it_finds_a_resource_held_twice() {
        let off = Options::multi_control(1, PathBuf::from("faults"));
        assert!(off
            .settings
            .agent_env
            .iter()
            .all(|env| env.contains(&(MULTI_PARTIAL_ENV.to_string(), "1".to_string()))));
        assert!(off.pool.is_empty() && off.singles.is_empty());
        let blind = verdict(&report(&off, 40, false)).unwrap();
        assert!(
            blind.starts_with("FAIL") && blind.contains(MULTI_PARTIAL_ENV),
            "{blind}"
        );
        let seen = verdict(&report(&off, 40, true)).unwrap();
        assert!(seen.starts_with("PASS"), "{seen}");
    }

    #[test]
    fn the_nemesis_half_fails_on_an_overlap_or_without_grants() {
        let on = Options::multi_nemesis(MULTI_SHORT_DURATION, 1, PathBuf::from("faults"));
        assert!(on
            .settings
            .agent_env
            .iter()
            .flatten()
            .all(|(k, _)| k != MULTI_PARTIAL_ENV));
        assert!(!on.pool.is_empty() && on.mix.multi_acquire > 0);
        let fine = report(&on, 40, false);
        let v = verdict(&fine).unwrap();
        assert!(fine.problems().is_empty() && v.starts_with("PASS"), "{v}");
        let overlap = verdict(&report(&on, 40, true)).unwrap();
        assert!(overlap.starts_with("FAIL"), "{overlap}");
        let nothing = verdict(&report(&on, 0, false)).unwrap();
        assert!(
            nothing.starts_with("FAIL") && nothing.contains("saw nothing"),
            "{nothing}"
        );
        // Runs of the other scenarios are not judged here.
        let other = fence_report(true, Default::default());
        assert!(verdict(&other).is_none());
    }
}
