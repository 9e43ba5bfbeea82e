//! The deterministic controls of what a vote cannot see by itself, each a
//! holder and an intruder: a client takes a lock through a1, the fault
//! strikes a majority of the masters, and a second client tries the lock
//! through a2 while the first still believes it valid.
//!
//! - The clock control ([`Options::clock_control`]): the wall clocks of 3
//!   of the 5 masters jump forward past the lock's TTL, so Redis drops the
//!   key there at once. With the agents' clock watch the intruder must not
//!   get the lock; without it (the agents' test-only switch
//!   [`NO_CLOCK_CHECK_ENV`]) it must.
//! - The restore control ([`Options::restore_control`]): every master is
//!   saved before the holder's grant, then 3 of the 5 are killed and
//!   started again from their snapshots (the incarnation marker back, the
//!   lock gone). a2 reaches the masters through connection-keeping links,
//!   and probes seldom ([`RESTORE_CONTROL_HEALTH_INTERVAL`]), so it sees
//!   no reconnect and no probe before its vote; only the process check of
//!   a vote answered NOSCRIPT can tell. Without it (the agents' test-only
//!   switch [`NO_PROCESS_CHECK_ENV`]) the intruder must get the lock.
//!
//! a2 is granted and releases another resource first, so that it has
//! talked to every master (its votes and probes have read their clocks,
//! its script is loaded) and is busy: its lock request after the fault
//! wakes no probe of its idle spell (see the agent's `lock::idle`).

use std::time::Duration;

use super::{ending, Control, Harness, Options, Report};
use crate::checker::{ClientKind, Grant, SectionId};
use crate::client::{self, AcquireOptions, Answer, Client, ErrorCode};
use crate::clock::Mono;
use crate::cluster::{AgentSettings, NO_CLOCK_CHECK_ENV, NO_PROCESS_CHECK_ENV};
use crate::nemesis::{FaultKind, FaultRecord, NemesisReport};
use crate::workload::{Mix, Outcome, Phase};

/// The holder's TTL in both controls: long enough that the fault and the
/// intruder's tries all fall inside its validity on a busy machine.
pub const INTRUSION_TTL: Duration = Duration::from_secs(3);

/// How far past the holder's TTL the clock control jumps the clocks.
pub const CLOCK_CONTROL_JUMP_PAST_TTL: Duration = Duration::from_secs(2);

/// a2's `health.interval` in the restore control: no probe of a2 runs
/// between its warm-up and its vote after the restore, as for an agent
/// that probes seldom.
pub const RESTORE_CONTROL_HEALTH_INTERVAL: Duration = Duration::from_secs(10);

/// The resource a2 is granted before the fault.
const WARM_UP: &str = "warm-up";

impl Options {
    /// The clock control scenario: 5 masters, 2 agents, no workload; a
    /// holder takes the lock through a1 with a TTL of [`INTRUSION_TTL`],
    /// the clocks of 3 masters jump forward by the TTL plus
    /// [`CLOCK_CONTROL_JUMP_PAST_TTL`], and an intruder tries the lock
    /// through a2. With the agents' clock watch (`clock_check`) it must not
    /// get it; without, it must.
    pub fn clock_control(clock_check: bool, seed: u64, faults_bin: std::path::PathBuf) -> Options {
        let mut options = intrusion(seed, faults_bin);
        options.name = format!(
            "control clock (clock check {})",
            if clock_check { "on" } else { "off" }
        );
        options.settings.clock_check = clock_check;
        options.control = Some(Control {
            fault: FaultKind::ClockForward,
            protected: clock_check,
        });
        options
    }

    /// The restore control scenario: as the clock control, with every
    /// master saved before the holder's grant and 3 of them restored from
    /// their snapshots instead of a clock jump; a2 reaches the masters
    /// through connection-keeping links and probes every
    /// [`RESTORE_CONTROL_HEALTH_INTERVAL`]. With the agents' process check
    /// of a vote answered NOSCRIPT (`process_check`) the intruder must not
    /// get the lock; without, it must.
    pub fn restore_control(
        process_check: bool,
        seed: u64,
        faults_bin: std::path::PathBuf,
    ) -> Options {
        let mut options = intrusion(seed, faults_bin);
        options.name = format!(
            "control restore behind kept connections (process check {})",
            if process_check { "on" } else { "off" }
        );
        options.settings.process_check = process_check;
        options.settings.keeping_links = vec![1];
        options.settings.agent_health_interval = vec![None, Some(RESTORE_CONTROL_HEALTH_INTERVAL)];
        options.control = Some(Control {
            fault: FaultKind::RestoreMajority,
            protected: process_check,
        });
        options
    }
}

/// What both controls share: the restart control's 5 masters and 2
/// agents, [`INTRUSION_TTL`] locks, no workload.
fn intrusion(seed: u64, faults_bin: std::path::PathBuf) -> Options {
    let mut options = Options::control(true, seed, faults_bin);
    let ttl_ms = u64::try_from(INTRUSION_TTL.as_millis()).unwrap_or(3000);
    options.settings = AgentSettings {
        default_ttl: INTRUSION_TTL,
        max_ttl: INTRUSION_TTL,
        ..options.settings
    };
    options.plan.ttl_ms = (ttl_ms, ttl_ms);
    options.mix = Mix::NONE;
    options
}

/// Whether `fault` is one of these controls'.
pub(super) fn is_intrusion(fault: FaultKind) -> bool {
    matches!(fault, FaultKind::ClockForward | FaultKind::RestoreMajority)
}

/// The switch the agents of an unprotected run of `fault` must honour.
pub(super) fn switch_of(fault: FaultKind) -> Option<&'static str> {
    match fault {
        FaultKind::ClockForward => Some(NO_CLOCK_CHECK_ENV),
        FaultKind::RestoreMajority => Some(NO_PROCESS_CHECK_ENV),
        _ => None,
    }
}

/// The control: warm-up, holder, fault, intruder, in one round.
pub(super) async fn control(options: &Options, control: Control) -> Result<Report, String> {
    let harness = Harness::start(options).await?;
    let mut report = NemesisReport::default();
    if let Err(why) = struck(&harness, options, control, &mut report).await {
        report.skipped.push(why);
    }
    harness.phase.set(Phase::Quiet);
    Ok(harness.finish(options, report).await)
}

/// Runs the round; the fault is recorded in `report` once it struck.
///
/// # Errors
/// When a step before the intruder's tries failed: the round proves nothing.
async fn struck(
    harness: &Harness,
    options: &Options,
    control: Control,
    report: &mut NemesisReport,
) -> Result<(), String> {
    let resource = options.plan.resources[0].clone();
    let clients = harness.cluster.clients().await;
    let (first, second) = (&clients[0], &clients[1 % clients.len()]);
    let majority: Vec<usize> = (0..options.masters / 2 + 1).collect();
    let ttl_ms = options.plan.ttl_ms.0;
    harness.phase.set(Phase::Faulted);

    let wait = Some(options.settings.quarantine() + Duration::from_secs(2));
    let (id, grant, _) = take(harness, (second, 1), WARM_UP, "warm-up", 1000, wait)
        .await
        .map_err(|e| format!("a2's warm-up: {e}"))?;
    let released = second.release(WARM_UP, &grant.token).await;
    harness.checker.exit(id, Mono::now(), ending(released));

    if control.fault == FaultKind::RestoreMajority {
        // The snapshots: the marker in them, no lock.
        let saves = harness.cluster.masters.iter().map(|m| m.save());
        for r in futures::future::join_all(saves).await {
            r?;
        }
    }

    let wait = Some(Duration::from_secs(2));
    let (holder_id, grant, granted) = take(harness, (first, 0), &resource, "holder", ttl_ms, wait)
        .await
        .map_err(|e| format!("the holder: {e}"))?;
    let leaves = granted.plus_ms(client::ms(grant.validity) * 4 / 5);

    let names: Vec<&str> = majority
        .iter()
        .map(|&j| harness.cluster.masters[j].name.as_str())
        .collect();
    let detail = match control.fault {
        FaultKind::ClockForward => {
            let jump = ttl_ms + u64::try_from(CLOCK_CONTROL_JUMP_PAST_TTL.as_millis()).unwrap_or(0);
            for &j in &majority {
                harness.cluster.masters[j].jump_clock(jump as i64)?;
            }
            format!(
                "{}: clocks +{jump}ms, past the holder's {ttl_ms}ms lock on {resource}",
                names.join(",")
            )
        }
        _ => {
            restore(harness, &majority).await?;
            format!(
                "{}: restored from snapshots saved before the holder's lock on {resource}; \
                 a2's kept connections reach the new processes",
                names.join(",")
            )
        }
    };
    report.faults.push(FaultRecord {
        kind: control.fault,
        at: Mono::now(),
        detail,
    });

    // The holder works through 80% of its validity; meanwhile the intruder
    // tries the lock through a2 until it gets it.
    intrude(harness, (second, 1), &resource, leaves).await;
    while Mono::now() < leaves {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let released = first.release(&resource, &grant.token).await;
    harness.checker.exit(holder_id, leaves, ending(released));
    Ok(())
}

/// Restores `masters` from their snapshots at once, then waits until a2's
/// links to them are through to the new processes on the connections
/// they kept.
///
/// # Errors
/// When a master does not come back, or a link does not reconnect in time.
async fn restore(harness: &Harness, masters: &[usize]) -> Result<(), String> {
    let links = &harness.cluster.links[1];
    let before: Vec<u64> = masters.iter().map(|&j| links[j].reconnects()).collect();
    let restores = masters
        .iter()
        .map(|&j| harness.cluster.masters[j].restore());
    for r in futures::future::join_all(restores).await {
        r?;
    }
    let deadline = Mono::now().plus_ms(5000);
    for (&j, before) in masters.iter().zip(before) {
        let link = &links[j];
        while link.reconnects() <= before || link.reconnecting() > 0 {
            if Mono::now() > deadline {
                return Err(format!(
                    "{}: not through to the restored master within 5s ({} reconnects)",
                    link.name(),
                    link.reconnects()
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Ok(())
}

/// Asks `client` of agent `agent` (0 for a1) for `resource` as `owner`,
/// with a fence, waiting up to `wait` (one attempt without); a grant is entered in the checker
/// and counted. The section's id, the grant and when it arrived.
///
/// # Errors
/// A refusal or no answer, as text.
pub(super) async fn take(
    harness: &Harness,
    (client, agent): (&Client, usize),
    resource: &str,
    owner: &str,
    ttl_ms: u64,
    wait: Option<Duration>,
) -> Result<(SectionId, client::Grant, Mono), String> {
    let mut request = AcquireOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .owner(owner)
        .fence();
    if let Some(wait) = wait {
        request = request.wait(wait);
    }
    let requested = Mono::now();
    let answer = client.acquire(resource, &request).await;
    let at = Mono::now();
    match answer {
        Ok(Answer::Ok(grant)) => {
            harness
                .stats
                .attempt(Phase::Faulted, ClientKind::Acquire, Outcome::Granted);
            let id = harness.checker.enter(
                Grant {
                    resource: resource.to_string(),
                    client: owner.to_string(),
                    kind: ClientKind::Acquire,
                    agent,
                    token: grant.token.clone(),
                    ttl_ms,
                    requested,
                    granted: at,
                    validity_ms: Some(client::ms(grant.validity)),
                    fence: grant.fence,
                },
                at,
            );
            Ok((id, grant, at))
        }
        Ok(Answer::Refused { code, message }) => {
            harness
                .stats
                .attempt(Phase::Faulted, ClientKind::Acquire, outcome(code));
            Err(format!("refused: {}: {message}", code.as_str()))
        }
        Err(e) => {
            harness
                .stats
                .attempt(Phase::Faulted, ClientKind::Acquire, Outcome::NoAnswer);
            Err(format!("no answer: {e}"))
        }
    }
}

fn outcome(code: ErrorCode) -> Outcome {
    match code {
        ErrorCode::Taken => Outcome::Taken,
        ErrorCode::NoQuorum => Outcome::NoQuorum,
        _ => Outcome::Refused,
    }
}

/// Tries `resource` through `client` every 50 ms until granted or
/// `leaves`; a grant is released at once (its section ends 10 ms after it
/// arrived, or at the release's answer if sooner).
pub(super) async fn intrude(
    harness: &Harness,
    (client, agent): (&Client, usize),
    resource: &str,
    leaves: Mono,
) {
    while Mono::now() < leaves {
        let tried = take(harness, (client, agent), resource, "intruder", 1000, None);
        if let Ok((id, grant, at)) = tried.await {
            let released = client.release(resource, &grant.token).await;
            harness
                .checker
                .exit(id, at.plus_ms(10).min(Mono::now()), ending(released));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The verdict of an intrusion control run, or `None` for other runs: it
/// fails when the fault never struck (nothing was tried); unprotected, it
/// needs a double grant and names the switch the agents may have ignored;
/// protected, no problem at all.
pub(super) fn verdict(r: &Report) -> Option<String> {
    let control = r.control.filter(|c| is_intrusion(c.fault))?;
    let switch = switch_of(control.fault).unwrap_or("?");
    let n = r.findings.violations.len();
    Some(if r.nemesis.faults.is_empty() {
        format!(
            "FAIL {}: the fault never struck; the run proves nothing ({})",
            r.name,
            r.nemesis.skipped.join("; ")
        )
    } else if control.protected {
        let problems = r.problems();
        if problems.is_empty() {
            format!("PASS {}", r.name)
        } else {
            format!("FAIL {}: {}", r.name, problems.join(", "))
        }
    } else if n > 0 {
        format!(
            "PASS {}: the checker saw {n} violations, as it must",
            r.name
        )
    } else {
        format!(
            "FAIL {}: none found; the checker cannot see a double grant, \
             or the agents ignored {switch}=1",
            r.name
        )
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::checker::FenceFindings;
    use crate::run::tests::fence_report;

    type Make = fn(bool, u64, PathBuf) -> Options;

    /// Both controls fail when their fault never struck (check on or off:
    /// nothing was tried); off, they need a double grant and name the
    /// switch the agents may have ignored; on, they pass with none. Off
    /// starts the agents with the switch, on without; the restore
    /// control's a2 keeps its connections and probes seldom. Both pairs are
    /// control cases, and the nemesis run injects both faults with a3
    /// behind connection-keeping links.
    #[test]
    fn the_intrusion_controls_need_a_strike_and_a_double_grant_only_without_their_check() {
        let pairs: [(Make, FaultKind, &str); 2] = [
            (
                Options::clock_control,
                FaultKind::ClockForward,
                NO_CLOCK_CHECK_ENV,
            ),
            (
                Options::restore_control,
                FaultKind::RestoreMajority,
                NO_PROCESS_CHECK_ENV,
            ),
        ];
        for (make, fault, switch) in pairs {
            let report = |check: bool, struck: bool| {
                let options = make(check, 1, PathBuf::from("faults"));
                let mut r = fence_report(true, FenceFindings::default());
                r.name = options.name.clone();
                r.control = options.control;
                r.fence_control = None;
                if struck {
                    r.nemesis.faults.push(FaultRecord {
                        kind: fault,
                        at: Mono(1),
                        detail: "r1,r2,r3".into(),
                    });
                }
                super::verdict(&r).expect("an intrusion control")
            };
            let blind = report(false, true);
            assert!(
                blind.starts_with("FAIL") && blind.contains(switch),
                "{blind}"
            );
            let safe = report(true, true);
            assert!(safe.starts_with("PASS"), "{safe}");
            for check in [true, false] {
                let idle = report(check, false);
                assert!(
                    idle.starts_with("FAIL") && idle.contains("never struck"),
                    "{idle}"
                );
            }
            let off = make(false, 1, PathBuf::from("faults"));
            assert_eq!(off.settings.env(), [(switch.to_string(), "1".to_string())]);
            assert!(make(true, 1, PathBuf::from("faults"))
                .settings
                .env()
                .is_empty());
            assert_eq!(
                off.mix.total(),
                0,
                "no workload: the holder and the intruder only"
            );
            let cases = super::super::control_cases(1, std::path::Path::new("faults"));
            let pair: Vec<bool> = cases
                .iter()
                .filter_map(|(o, _)| o.control.filter(|c| c.fault == fault))
                .map(|c| c.protected)
                .collect();
            assert_eq!(pair, [true, false]);
        }
        let restore = Options::restore_control(false, 1, PathBuf::from("faults"));
        assert_eq!(restore.settings.keeping_links, [1]);
        assert_eq!(
            restore.settings.of_agent(1).health_interval,
            RESTORE_CONTROL_HEALTH_INTERVAL
        );
        assert_eq!(
            restore.settings.of_agent(0).health_interval,
            restore.settings.health_interval
        );
        let nemesis = Options::nemesis(Duration::from_secs(1), 1, PathBuf::from("faults"));
        assert_eq!(nemesis.settings.keeping_links, [2]);
        for kind in [
            FaultKind::ClockForward,
            FaultKind::ClockBack,
            FaultKind::ClockFreeze,
            FaultKind::RestoreMajority,
        ] {
            assert!(nemesis.pool.contains(&kind) && nemesis.singles.contains(&kind));
        }
    }
}
