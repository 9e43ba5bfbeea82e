//! The read-write pair: readers (`"mode": "shared"`) and writers of the
//! same resources.
//!
//! - On ([`Options::shared_nemesis`]): 3 agents over 5 masters, readers
//!   and writers (acquires and holds of each) of 2 resources, under the
//!   random mix of every fault from the start. No writer may be believed
//!   beside another grant of its resource, readers may be together; every
//!   other property of a run holds too.
//! - Off ([`Options::shared_control`]): the same clients through 2 agents
//!   that keep readers at a key of their own (the agents' test-only switch
//!   [`SHARED_APART_ENV`]), no fault: a writer is granted beside readers,
//!   and the checker must find it. It stops at the first finding.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::{Harness, Options, Report};
use crate::clock::Mono;
use crate::cluster::AgentSettings;
use crate::nemesis::{FaultKind, NemesisReport};
use crate::workload::Mix;

/// The agents' test-only switch that keeps readers apart from writers.
pub const SHARED_APART_ENV: &str = redlock_testkit::switches::SHARED_APART;

/// How long the short mode's read-write nemesis runs.
pub const SHARED_SHORT_DURATION: Duration = Duration::from_secs(15);

/// How long the read-write control may look for a writer beside a reader
/// (it stops at the first).
pub const SHARED_CONTROL_DURATION: Duration = Duration::from_secs(10);

/// Which half of the read-write pair a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SharedRun {
    /// The agents keep readers at the lock's own key, where a writer's
    /// vote sees them; off, the run must find a writer beside a reader.
    pub readers_on_lock_key: bool,
}

impl Options {
    /// The read-write nemesis: 3 agents (a3 through connection-keeping
    /// links, as in the nemesis run), 2 acquire and 2 hold clients of
    /// exclusive locks and 3 acquire and 3 hold clients taking the same 2
    /// resources shared, every fault but a client's kill (all its clients
    /// are in this process) mixed at random from the start.
    pub fn shared_nemesis(
        duration: Duration,
        seed: u64,
        faults_bin: std::path::PathBuf,
    ) -> Options {
        let mut options = Options::nemesis(duration, seed, faults_bin);
        options.name = "read-write (readers on the lock key, nemesis)".into();
        options.plan.resources = vec!["rw-a".into(), "rw-b".into()];
        options.plan.semaphores = Vec::new();
        options.plan.elections = Vec::new();
        options.mix = Mix {
            acquire: 2,
            hold: 2,
            shared_acquire: 3,
            shared_hold: 3,
            ..Mix::NONE
        };
        options.singles = Vec::new();
        // Its clients are all in this process: no client to kill.
        options.pool.retain(|&k| k != FaultKind::KillClient);
        options.shared = Some(SharedRun {
            readers_on_lock_key: true,
        });
        options
    }

    /// The read-write control: the clients of [`Options::shared_nemesis`]
    /// through 2 agents with [`SHARED_APART_ENV`]`=1`, no fault, for at
    /// most [`SHARED_CONTROL_DURATION`].
    pub fn shared_control(seed: u64, faults_bin: std::path::PathBuf) -> Options {
        let mut options = Options::shared_nemesis(SHARED_CONTROL_DURATION, seed, faults_bin);
        options.name = "control read-write (readers kept apart)".into();
        options.agents = 2;
        options.settings = AgentSettings {
            agent_env: vec![vec![(SHARED_APART_ENV.to_string(), "1".to_string())]; 2],
            ..AgentSettings::default()
        };
        options.pool = Vec::new();
        options.shared = Some(SharedRun {
            readers_on_lock_key: false,
        });
        options
    }
}

/// Runs either half of the pair: on, the nemesis run; off, the clients
/// until the checker finds a writer beside a reader or the time is up.
///
/// # Errors
/// When the cluster cannot be started.
pub(super) async fn run(options: &Options, shared: SharedRun) -> Result<Report, String> {
    if shared.readers_on_lock_key {
        return super::nemesis(options).await;
    }
    let harness = Harness::start(options).await?;
    let until = harness.started.plus(options.duration);
    while Mono::now() < until
        && harness
            .checker
            .findings(Mono::now())
            .shared
            .overlaps
            .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(harness.finish(options, NemesisReport::default()).await)
}

/// What a run found about the read-write property, under the checker's
/// line; nothing for a run without readers.
pub(super) fn write_findings(f: &mut fmt::Formatter<'_>, r: &Report) -> fmt::Result {
    let s = &r.findings.shared;
    if s.readers == 0 && r.shared.is_none() {
        return Ok(());
    }
    writeln!(
        f,
        "read-write: {} readers' sections beside {} writers' (at most {} readers at once); \
         a writer beside a reader {}",
        s.readers,
        s.writers,
        s.most_readers,
        s.overlaps.len()
    )?;
    for o in s.overlaps.iter().take(5) {
        writeln!(f, "   {o}")?;
    }
    if s.overlaps.len() > 5 {
        writeln!(f, "   ... {} more", s.overlaps.len() - 5)?;
    }
    Ok(())
}

/// The verdict of either half, `None` for the other runs. On: no problem,
/// and readers held together beside writers to judge; off: a writer
/// beside a reader must be found.
pub(super) fn verdict(r: &Report) -> Option<String> {
    let shared = r.shared?;
    let s = &r.findings.shared;
    Some(if shared.readers_on_lock_key {
        let mut problems = r.problems();
        if s.readers == 0 || s.writers == 0 {
            problems.push(format!(
                "{} readers' and {} writers' sections: the read-write property saw nothing",
                s.readers, s.writers
            ));
        } else if s.most_readers < 2 {
            problems
                .push("readers never held a resource together: the shared mode saw no use".into());
        }
        if problems.is_empty() {
            format!(
                "PASS {}: {} readers' sections (at most {} at once) beside {} writers', no writer beside a reader",
                r.name, s.readers, s.most_readers, s.writers
            )
        } else {
            format!("FAIL {}: {}", r.name, problems.join(", "))
        }
    } else if !s.overlaps.is_empty() {
        format!(
            "PASS {}: the checker saw {} times a writer beside a reader, as it must",
            r.name,
            s.overlaps.len()
        )
    } else {
        format!(
            "FAIL {}: none found in {} readers' and {} writers' sections; the checker is blind \
             to a writer beside a reader, or the agents ignored {SHARED_APART_ENV}=1",
            r.name, s.readers, s.writers
        )
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::checker::shared::{SharedFindings, SharedOverlap};
    use crate::checker::{Checker, ClientKind, Grant, Primitive, Section, Violation};
    use crate::run::tests::fence_report;

    /// A report of `options` with `readers` readers' sections beside 10
    /// writers', at most `together` at once, and one overlap or none.
    fn report(options: &Options, readers: usize, together: usize, overlap: bool) -> Report {
        let mut r = fence_report(true, Default::default());
        r.name = options.name.clone();
        r.fence_control = None;
        r.shared = options.shared;
        r.findings.shared = SharedFindings {
            readers,
            writers: 10,
            most_readers: together,
            overlaps: Vec::new(),
        };
        if overlap {
            r.findings.shared.overlaps.push(SharedOverlap(Violation {
                resource: "rw-a".into(),
                first: section("w", Primitive::Lock),
                second: section("s", Primitive::Shared),
                overlap_ms: 10.0,
                strict: true,
            }));
        }
        r
    }

    /// A section for the finding's text.
    fn section(token: &str, primitive: Primitive) -> Section {
        let c = Checker::new();
        let grant = Grant {
            resource: "rw-a".into(),
            client: "c".into(),
            kind: ClientKind::Acquire,
            agent: 0,
            token: token.into(),
            ttl_ms: 1000,
            requested: Mono(1),
            granted: Mono(2),
            validity_ms: Some(900),
            fence: None,
        };
        c.enter_as(grant, Mono(2), primitive);
        c.by_token(token).unwrap()
    }

    #[test]
    fn the_control_passes_only_when_it_finds_a_writer_beside_a_reader() {
        let off = Options::shared_control(1, PathBuf::from("faults"));
        assert!(off
            .settings
            .agent_env
            .iter()
            .all(|env| env.contains(&(SHARED_APART_ENV.to_string(), "1".to_string()))));
        assert!(off.pool.is_empty() && off.singles.is_empty());
        assert!(off.mix.shared_acquire > 0 && off.mix.acquire > 0);
        let blind = verdict(&report(&off, 40, 3, false)).unwrap();
        assert!(
            blind.starts_with("FAIL")
                && blind.contains("blind")
                && blind.contains(SHARED_APART_ENV),
            "{blind}"
        );
        let seen = verdict(&report(&off, 40, 3, true)).unwrap();
        assert!(seen.starts_with("PASS"), "{seen}");
    }

    #[test]
    fn the_nemesis_half_fails_on_an_overlap_or_without_readers_together() {
        let on = Options::shared_nemesis(SHARED_SHORT_DURATION, 1, PathBuf::from("faults"));
        assert!(on
            .settings
            .agent_env
            .iter()
            .flatten()
            .all(|(k, _)| k != SHARED_APART_ENV));
        assert!(!on.pool.is_empty() && !on.pool.contains(&FaultKind::KillClient));
        let fine = report(&on, 40, 3, false);
        let v = verdict(&fine).unwrap();
        assert!(fine.problems().is_empty() && v.starts_with("PASS"), "{v}");
        let overlap = verdict(&report(&on, 40, 3, true)).unwrap();
        assert!(
            overlap.starts_with("FAIL") && overlap.contains("writer beside a reader"),
            "{overlap}"
        );
        let nothing = verdict(&report(&on, 0, 0, false)).unwrap();
        assert!(
            nothing.starts_with("FAIL") && nothing.contains("saw nothing"),
            "{nothing}"
        );
        let alone = verdict(&report(&on, 40, 1, false)).unwrap();
        assert!(
            alone.starts_with("FAIL") && alone.contains("no use"),
            "{alone}"
        );
        // Runs of the other scenarios are not judged here.
        let other = fence_report(true, Default::default());
        assert!(verdict(&other).is_none());
    }
}
