//! The run's unit tests: the verdicts of the control runs, on reports
//! made up for them.

use super::*;
use crate::checker::{FenceFindings, FenceInversion, Findings, Section};
use crate::clock::Mono;
use crate::cluster::{NO_EVICTION_CHECK_ENV, NO_MARKER_CHECK_ENV};
use crate::nemesis::NemesisReport;
use crate::workload::StatsSnapshot;

pub(super) fn fence_report(writeback: bool, fences: FenceFindings) -> Report {
    let options = Options::fence_control(writeback, 1, PathBuf::from("faults"));
    Report {
        name: options.name.clone(),
        seed: 1,
        masters: options.masters,
        topology: options.topology,
        agents: options.agents,
        clients: 6,
        resources: 2,
        seconds: 4.0,
        max_ttl_ms: 1000,
        quarantine_ms: 1500,
        delayed_restart: true,
        marker_check: true,
        eviction_check: true,
        clock_check: true,
        process_check: true,
        control: None,
        fence_control: options.fence_control,
        multi: None,
        shared: None,
        property: options.property,
        primitives_expected: (false, false),
        stats: StatsSnapshot::default(),
        nemesis: NemesisReport::default(),
        findings: Findings {
            sections: fences.fenced_grants,
            fences,
            ..Findings::default()
        },
        keys_left: 0,
        agent_panics: Vec::new(),
        harness_lag_ms: 0.0,
        agent_rss: Vec::new(),
    }
}

fn inversion() -> FenceInversion {
    let section = Section {
        resource: "fence-a".into(),
        client: "acq1".into(),
        kind: crate::checker::ClientKind::Acquire,
        agent: 0,
        token: "t".into(),
        ttl_ms: 500,
        requested: Mono(1),
        granted: Mono(2),
        valid_until: None,
        strict_valid_until: None,
        belief_end: None,
        entry: Mono(2),
        exit: None,
        ending: crate::checker::Ending::Open,
        fence: Some(5),
        write: None,
        primitive: crate::checker::Primitive::Lock,
    };
    FenceInversion {
        earlier: section.clone(),
        later: section,
        across_resources: false,
    }
}

/// The cluster control without the marker check fails when it finds no
/// double grant, naming the switch the agents may have ignored; with
/// the check, it passes when it finds none.
#[test]
fn the_cluster_control_needs_a_double_grant_only_without_the_marker_check() {
    let report = |marker_check| {
        let options = Options::cluster_control(marker_check, 1, PathBuf::from("faults"));
        let mut r = fence_report(true, FenceFindings::default());
        r.name = options.name.clone();
        r.topology = options.topology;
        r.control = options.control;
        r.fence_control = None;
        r
    };
    let blind = verdicts(&[report(false)]).remove(0);
    assert!(
        blind.starts_with("FAIL") && blind.contains(NO_MARKER_CHECK_ENV),
        "{blind}"
    );
    let safe = verdicts(&[report(true)]).remove(0);
    assert!(safe.starts_with("PASS"), "{safe}");
    assert_eq!(
        Options::cluster_nemesis(Duration::from_secs(1), 1, PathBuf::from("faults")).pool,
        FaultKind::CLUSTER.to_vec()
    );
}

/// The eviction control fails when the lock key was never evicted from
/// a majority (on or off: nothing was tried); off, it needs a double
/// grant and names the switch the agents may have ignored; on, it
/// passes when it finds none. Both are control cases, and the nemesis
/// injects evictions.
#[test]
fn the_eviction_control_needs_an_eviction_and_a_double_grant_only_without_the_check() {
    let report = |eviction_check, struck| {
        let options = Options::eviction_control(eviction_check, 1, PathBuf::from("faults"));
        let mut r = fence_report(true, FenceFindings::default());
        r.name = options.name.clone();
        r.control = options.control;
        r.fence_control = None;
        r.eviction_check = eviction_check;
        if struck {
            r.nemesis.faults.push(crate::nemesis::FaultRecord {
                kind: FaultKind::Evict,
                at: Mono(1),
                detail: "r1 volatile-ttl ..., lock key gone".into(),
            });
        }
        r
    };
    let blind = verdicts(&[report(false, true)]).remove(0);
    assert!(
        blind.starts_with("FAIL") && blind.contains(NO_EVICTION_CHECK_ENV),
        "{blind}"
    );
    let safe = verdicts(&[report(true, true)]).remove(0);
    assert!(safe.starts_with("PASS"), "{safe}");
    for check in [true, false] {
        let idle = verdicts(&[report(check, false)]).remove(0);
        assert!(
            idle.starts_with("FAIL") && idle.contains("never evicted"),
            "{idle}"
        );
    }
    let options = Options::eviction_control(false, 1, PathBuf::from("faults"));
    assert!(options
        .settings
        .env()
        .contains(&(NO_EVICTION_CHECK_ENV.to_string(), "1".to_string())));
    assert!(Options::eviction_control(true, 1, PathBuf::from("faults"))
        .settings
        .env()
        .is_empty());
    let cases = control_cases(1, std::path::Path::new("faults"));
    let evictions: Vec<bool> = cases
        .iter()
        .filter_map(|(o, _)| o.control.filter(|c| c.fault == FaultKind::Evict))
        .map(|c| c.protected)
        .collect();
    assert_eq!(evictions, [true, false]);
    assert!(
        Options::nemesis(Duration::from_secs(1), 1, PathBuf::from("faults"))
            .pool
            .contains(&FaultKind::Evict)
    );
}

/// The semaphore and election controls without their protection pass
/// only when the checker found what their property forbids (lock
/// violations alone do not count), and the term control only when it
/// found terms out of order; with protection, any of those fails. All
/// are control cases, and the nemesis run has their clients.
#[test]
fn the_primitive_controls_need_their_own_findings() {
    use crate::checker::{LeaderOverlap, PrimitiveFindings, SemaphoreExcess, TermInversion};
    let section = inversion().earlier;
    let excess = SemaphoreExcess {
        semaphore: "control-sem".into(),
        limit: CONTROL_LIMIT,
        believed: 3,
        from: Mono(1),
        until: Mono(2),
        strict: true,
        sections: vec![section.clone()],
    };
    let overlap = LeaderOverlap {
        election: "control-elect".into(),
        first: section.clone(),
        second: section.clone(),
        overlap_ms: 5.0,
    };
    let inverted = TermInversion {
        election: "term-elect".into(),
        earlier: section.clone(),
        later: section,
    };
    let report = |options: Options, primitives: PrimitiveFindings| {
        let mut r = fence_report(true, FenceFindings::default());
        r.name = options.name.clone();
        r.control = options.control;
        r.fence_control = options.fence_control;
        r.property = options.property;
        r.findings.primitives = primitives;
        // The planted leak, which the restart controls also need.
        r.findings.leaks.push(crate::checker::Leak {
            master: "r5".into(),
            resource: PLANTED.into(),
            token: "planted".into(),
            pttl_ms: -1,
            seen: Mono(1),
            why: "no TTL".into(),
        });
        r
    };
    let bin = || PathBuf::from("faults");
    let verdict = |options, primitives| verdicts(&[report(options, primitives)]).remove(0);
    let with_excess = PrimitiveFindings {
        semaphore_excess: vec![excess],
        ..PrimitiveFindings::default()
    };
    let with_overlap = PrimitiveFindings {
        leader_overlaps: vec![overlap],
        ..PrimitiveFindings::default()
    };
    let with_inversion = PrimitiveFindings {
        term_inversions: vec![inverted],
        leaderships: 30,
        ..PrimitiveFindings::default()
    };
    let none = PrimitiveFindings::default;
    let sem = |on| Options::semaphore_control(on, 1, bin());
    assert!(verdict(sem(false), with_excess.clone()).starts_with("PASS"));
    let blind = verdict(sem(false), with_overlap.clone());
    assert!(
        blind.starts_with("FAIL") && blind.contains("more permits than the limit"),
        "{blind}"
    );
    assert!(verdict(sem(true), with_excess).starts_with("FAIL"));
    let elect = |on| Options::election_control(on, 1, bin());
    assert!(verdict(elect(false), with_overlap.clone()).starts_with("PASS"));
    let blind = verdict(elect(false), none());
    assert!(
        blind.starts_with("FAIL") && blind.contains(NO_MARKER_CHECK_ENV),
        "{blind}"
    );
    assert!(verdict(elect(true), with_overlap).starts_with("FAIL"));
    let terms = |writeback| Options::term_control(writeback, 1, bin());
    assert!(verdict(terms(false), with_inversion.clone()).starts_with("PASS"));
    let blind = verdict(terms(false), none());
    assert!(
        blind.starts_with("FAIL") && blind.contains(NO_FENCE_WRITEBACK_ENV),
        "{blind}"
    );
    assert!(verdict(terms(true), with_inversion).starts_with("FAIL"));
    let cases = control_cases(1, std::path::Path::new("faults"));
    let properties: Vec<(Property, bool)> = cases
        .iter()
        .filter(|(o, _)| o.property != Property::Lock)
        .map(|(o, _)| {
            let protected = o
                .control
                .map(|c| c.protected)
                .or(o.fence_control.map(|f| f.writeback));
            (o.property, protected.unwrap_or(true))
        })
        .collect();
    assert_eq!(
        properties,
        [
            (Property::Semaphore, true),
            (Property::Semaphore, false),
            (Property::Election, true),
            (Property::Election, false),
            (Property::Election, false),
        ]
    );
    let mix = Options::nemesis(Duration::from_secs(1), 1, bin()).mix;
    assert!(mix.permit_acquire + mix.permit_hold > 0 && mix.campaign > 0);
}

/// The fence control passes with the write-back only when no fence is
/// out of order and enough grants were fenced, and without it only
/// when some are out of order.
#[test]
fn the_fence_control_needs_order_with_the_write_back_and_disorder_without() {
    let ordered = FenceFindings {
        fenced_grants: 40,
        ..FenceFindings::default()
    };
    let disordered = FenceFindings {
        out_of_order: vec![inversion()],
        ..ordered.clone()
    };
    let verdict =
        |writeback, f: &FenceFindings| verdicts(&[fence_report(writeback, f.clone())]).remove(0);
    assert!(verdict(true, &ordered).starts_with("PASS"));
    assert!(verdict(true, &disordered).starts_with("FAIL"));
    assert!(verdict(false, &disordered).starts_with("PASS"));
    let blind = verdict(false, &ordered);
    assert!(
        blind.starts_with("FAIL") && blind.contains(NO_FENCE_WRITEBACK_ENV),
        "{blind}"
    );
    let few = FenceFindings {
        fenced_grants: 3,
        ..FenceFindings::default()
    };
    assert!(
        verdict(true, &few).contains("too few"),
        "{}",
        verdict(true, &few)
    );
    let mut none = fence_report(true, FenceFindings::default());
    none.findings.sections = 10;
    assert!(
        none.problems()
            .iter()
            .any(|p| p.contains("no grant carried a fence")),
        "{:?}",
        none.problems()
    );
}
