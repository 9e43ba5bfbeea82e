//! The checker's unit tests: sections made up on a clock of milliseconds,
//! and what the checker finds in them.

use super::*;

fn at(ms: u64) -> Mono {
    Mono(1_000_000_000).plus_ms(ms)
}

fn grant(client: &str, token: &str, granted: u64, validity: Option<u64>) -> Grant {
    Grant {
        resource: "r".into(),
        client: client.into(),
        kind: ClientKind::Acquire,
        agent: 0,
        token: token.into(),
        ttl_ms: 1000,
        requested: at(granted.saturating_sub(2)),
        granted: at(granted),
        validity_ms: validity,
        fence: None,
    }
}

/// A fenced section of `resource` requested at `requested`, granted at
/// `granted`, released at `granted + 50`.
fn fenced(
    c: &Checker,
    resource: &str,
    token: &str,
    (requested, granted): (u64, u64),
    fence: u64,
) -> SectionId {
    let mut g = grant(token, token, granted, Some(900));
    g.resource = resource.into();
    g.requested = at(requested);
    g.fence = Some(fence);
    let id = c.enter(g, at(granted));
    c.exit(id, at(granted + 50), Ending::Released { released: true });
    id
}

fn wrote(c: &Checker, id: SectionId, when: u64, outcome: WriteOutcome) {
    c.wrote(
        id,
        StoreWrite {
            at: at(when),
            outcome,
        },
    );
}

#[test]
fn fences_that_grow_from_grant_to_grant_are_in_order() {
    let c = Checker::new();
    let a = fenced(&c, "x", "a", (0, 10), 100);
    wrote(&c, a, 20, WriteOutcome::Accepted { seq: 1 });
    let b = fenced(&c, "x", "b", (60, 70), 101);
    wrote(&c, b, 80, WriteOutcome::Accepted { seq: 2 });
    // Another resource, later still: its fence is above both.
    fenced(&c, "y", "c", (130, 140), 205);
    let f = c.findings(at(1000)).fences;
    assert_eq!((f.fenced_grants, f.unfenced_grants), (3, 0));
    assert_eq!((f.writes_accepted, f.writes_refused), (2, 0));
    assert!(f.out_of_order.is_empty(), "{:?}", f.out_of_order);
    assert!(f.out_of_order_across.is_empty());
    assert!(f.stale_writes_accepted.is_empty());
}

#[test]
fn a_fence_not_above_an_answered_grant_is_out_of_order() {
    let c = Checker::new();
    fenced(&c, "x", "a", (0, 10), 100);
    fenced(&c, "x", "b", (60, 70), 100); // equal: not above
    fenced(&c, "x", "c", (130, 140), 99); // below both
    let f = c.findings(at(1000)).fences;
    assert_eq!(f.out_of_order.len(), 2, "{:?}", f.out_of_order);
    assert_eq!(f.out_of_order[0].later.token, "b");
    assert_eq!(f.out_of_order[1].later.token, "c");
    assert!(f.out_of_order.iter().all(|i| i.earlier.token == "a"));
    assert!(f.out_of_order[0].to_string().contains("FENCE OUT OF ORDER"));
    assert!(f.out_of_order_across.is_empty());
}

#[test]
fn requests_that_overlap_a_grant_may_carry_any_fence() {
    let c = Checker::new();
    // b was requested at 5, before a's grant arrived at 10: the agent
    // may have minted b's fence first.
    fenced(&c, "x", "a", (0, 10), 100);
    fenced(&c, "x", "b", (5, 70), 90);
    let f = c.findings(at(1000)).fences;
    assert!(f.out_of_order.is_empty(), "{:?}", f.out_of_order);
}

#[test]
fn fences_must_grow_across_resources_and_are_reported_apart() {
    let c = Checker::new();
    fenced(&c, "x", "a", (0, 10), 100);
    fenced(&c, "y", "b", (20, 30), 300);
    fenced(&c, "z", "c", (60, 70), 200); // below b, on another resource
    let f = c.findings(at(1000)).fences;
    assert!(f.out_of_order.is_empty());
    assert_eq!(
        f.out_of_order_across.len(),
        1,
        "{:?}",
        f.out_of_order_across
    );
    let i = &f.out_of_order_across[0];
    assert_eq!(
        (i.earlier.token.as_str(), i.later.token.as_str()),
        ("b", "c")
    );
    assert!(i.to_string().contains("across resources"), "{i}");
}

#[test]
fn a_store_that_accepts_an_older_write_after_a_newer_one_is_caught() {
    let c = Checker::new();
    // a is answered at 10 and pauses; b is requested at 60, writes
    // first; a wakes and its write is accepted after b's.
    let a = fenced(&c, "x", "a", (0, 10), 100);
    let b = fenced(&c, "x", "b", (60, 70), 101);
    wrote(&c, b, 80, WriteOutcome::Accepted { seq: 1 });
    wrote(&c, a, 90, WriteOutcome::Accepted { seq: 2 });
    let f = c.findings(at(1000)).fences;
    assert_eq!(f.stale_writes_accepted.len(), 1);
    let w = &f.stale_writes_accepted[0];
    assert_eq!((w.stale.token.as_str(), w.newer.token.as_str()), ("a", "b"));
    assert!(w.to_string().contains("STALE WRITE ACCEPTED"), "{w}");
    assert!(f.out_of_order.is_empty(), "the fences themselves grew");
}

#[test]
fn a_refused_stale_write_is_counted_and_no_finding() {
    let c = Checker::new();
    let a = fenced(&c, "x", "a", (0, 10), 100);
    let b = fenced(&c, "x", "b", (60, 70), 101);
    wrote(&c, b, 80, WriteOutcome::Accepted { seq: 1 });
    wrote(&c, a, 90, WriteOutcome::Refused { highest: 101 });
    let unfenced = c.enter(grant("u", "u", 200, Some(900)), at(200));
    wrote(
        &c,
        unfenced,
        210,
        WriteOutcome::Failed {
            error: "connection refused".into(),
        },
    );
    let f = c.findings(at(1000)).fences;
    assert!(f.stale_writes_accepted.is_empty());
    assert_eq!(
        (
            f.writes_accepted,
            f.writes_refused,
            f.writes_failed,
            f.unfenced_grants
        ),
        (1, 1, 1, 1)
    );
}

/// A permit of `semaphore` (limit `limit`) granted at `granted` with
/// `validity` ms, left at `exit`.
fn permit(
    c: &Checker,
    (semaphore, limit, number): (&str, u32, u32),
    token: &str,
    (granted, validity, exit): (u64, u64, u64),
) -> SectionId {
    let mut g = grant(token, token, granted, Some(validity));
    g.resource = Primitive::permit_resource(semaphore, number);
    g.kind = ClientKind::PermitAcquire;
    let id = c.enter_as(
        g,
        at(granted),
        Primitive::Permit {
            semaphore: semaphore.into(),
            limit,
            permit: number,
        },
    );
    c.exit(id, at(exit), Ending::Released { released: true });
    id
}

/// A leadership of `election` with `term`, elected at `elected` with
/// `validity` ms, told lost at `lost` (if any), left at `exit`.
fn leadership(
    c: &Checker,
    election: &str,
    term: u64,
    (elected, validity, lost, exit): (u64, u64, Option<u64>, u64),
) -> SectionId {
    let token = format!("{election}#{term}");
    let mut g = grant(&token, &token, elected, Some(validity));
    g.resource = Primitive::election_resource(election);
    g.kind = ClientKind::Campaign;
    g.fence = Some(term);
    let id = c.enter_as(
        g,
        at(elected),
        Primitive::Leadership {
            election: election.into(),
            term,
        },
    );
    if let Some(lost) = lost {
        c.belief_ended(id, at(lost));
    }
    c.exit(id, at(exit), Ending::Closed);
    id
}

#[test]
fn one_permit_more_than_the_limit_believed_at_once_is_an_excess() {
    let c = Checker::new();
    permit(&c, ("sem", 2, 0), "a", (0, 900, 500));
    permit(&c, ("sem", 2, 1), "b", (100, 900, 600));
    // A third holder while both are believed, on a number the limit
    // does not have: no permit is held twice, the semaphore is exceeded.
    permit(&c, ("sem", 2, 2), "c", (300, 900, 400));
    let f = c.findings(at(2000));
    let p = &f.primitives;
    assert_eq!(p.permits, 3);
    assert_eq!(p.semaphore_excess.len(), 1, "{:?}", p.semaphore_excess);
    let e = &p.semaphore_excess[0];
    assert_eq!(
        (e.believed, e.limit, e.from, e.until),
        (3, 2, at(300), at(400))
    );
    assert!(e.strict);
    assert_eq!(e.sections.len(), 3);
    assert!(e.to_string().contains("SEMAPHORE EXCESS"), "{e}");
    assert_eq!(p.most_believed, vec![("sem".to_string(), 2, 3)]);
    assert!(f.violations.is_empty(), "no permit was held twice");
    assert_eq!(p.violations(), 1);
}

#[test]
fn one_permit_granted_twice_is_a_violation_and_an_excess_when_over_the_limit() {
    let c = Checker::new();
    permit(&c, ("sem", 2, 0), "a", (0, 900, 500));
    permit(&c, ("sem", 2, 1), "b", (0, 900, 500));
    permit(&c, ("sem", 2, 0), "c", (200, 900, 700));
    let f = c.findings(at(2000));
    assert_eq!(f.violations.len(), 1, "permit 0 twice: {:?}", f.violations);
    assert_eq!(f.violations[0].resource, "sem permit 0");
    assert_eq!(f.primitives.semaphore_excess.len(), 1);
    // Another semaphore's permits never count against this one.
    permit(&c, ("other", 2, 0), "d", (250, 900, 450));
    permit(&c, ("other", 2, 1), "e", (250, 900, 450));
    let f = c.findings(at(2000));
    assert_eq!(f.primitives.semaphore_excess.len(), 1);
    assert_eq!(f.primitives.most_believed.len(), 2);
}

#[test]
fn permits_handed_off_or_lost_in_time_are_no_excess() {
    let c = Checker::new();
    permit(&c, ("sem", 2, 0), "a", (0, 900, 500));
    permit(&c, ("sem", 2, 1), "b", (100, 900, 800));
    // Handed off at the very instant a leaves.
    permit(&c, ("sem", 2, 0), "c", (500, 900, 1200));
    // a2 and e hold; a2 is told lost at 1400 but lingers until 1700;
    // d comes in at 1450: two believed at once, never three.
    let a2 = permit(&c, ("sem", 2, 0), "a2", (1300, 600, 1700));
    c.belief_ended(a2, at(1400));
    permit(&c, ("sem", 2, 1), "e", (1300, 900, 1700));
    permit(&c, ("sem", 2, 0), "d", (1450, 900, 1900));
    let f = c.findings(at(3000));
    let p = &f.primitives;
    assert!(p.semaphore_excess.is_empty(), "{:?}", p.semaphore_excess);
    assert_eq!(p.most_believed, vec![("sem".to_string(), 2, 2)]);
    assert!(f.violations.is_empty(), "{:?}", f.violations);
}

#[test]
fn an_excess_only_counted_from_the_answers_is_not_strict() {
    let c = Checker::new();
    permit(&c, ("sem", 1, 0), "a", (0, 400, 450));
    // Requested at 0, answered at 100: valid until 500 from the
    // answer, 400 from the request.
    let mut g = grant("b", "b", 100, Some(400));
    g.requested = at(0);
    g.resource = Primitive::permit_resource("sem", 0);
    let b = c.enter_as(
        g,
        at(100),
        Primitive::Permit {
            semaphore: "sem".into(),
            limit: 1,
            permit: 0,
        },
    );
    c.exit(b, at(480), Ending::Released { released: false });
    permit(&c, ("sem", 1, 1), "c", (420, 900, 900));
    let f = c.findings(at(2000));
    let e = &f.primitives.semaphore_excess;
    assert!(!e.is_empty());
    assert!(e.iter().any(|e| !e.strict), "{e:?}");
}

#[test]
fn two_believed_leaders_at_once_are_found() {
    let c = Checker::new();
    leadership(&c, "e", 10, (0, 900, None, 600));
    leadership(&c, "e", 11, (400, 900, None, 1000));
    let f = c.findings(at(2000));
    let p = &f.primitives;
    assert_eq!((p.leaderships, p.elections), (2, 1));
    assert_eq!(p.leader_overlaps.len(), 1, "{:?}", p.leader_overlaps);
    let o = &p.leader_overlaps[0];
    assert!((o.overlap_ms - 200.0).abs() < 1e-6, "{}", o.overlap_ms);
    assert!(o.to_string().contains("TWO LEADERS"), "{o}");
    assert!(p.term_inversions.is_empty());
    assert!(
        f.violations.is_empty(),
        "two leaders are the election's finding, not a lock's"
    );
}

#[test]
fn a_later_leader_with_a_term_not_above_is_an_inversion() {
    let c = Checker::new();
    leadership(&c, "e", 10, (0, 300, None, 200));
    leadership(&c, "e", 12, (300, 300, None, 500));
    leadership(&c, "e", 12, (600, 300, None, 800)); // equal: not above
    leadership(&c, "e", 7, (900, 300, None, 1100)); // below both
                                                    // Another election's terms are its own.
    leadership(&c, "other", 3, (1200, 300, None, 1400));
    let f = c.findings(at(2000));
    let p = &f.primitives;
    assert!(p.leader_overlaps.is_empty(), "{:?}", p.leader_overlaps);
    assert_eq!(p.term_inversions.len(), 2, "{:?}", p.term_inversions);
    assert_eq!(p.term_inversions[0].later.fence, Some(12));
    assert_eq!(p.term_inversions[1].later.fence, Some(7));
    assert!(p
        .term_inversions
        .iter()
        .all(|i| i.earlier.fence == Some(12) && i.election == "e"));
    assert!(p.term_inversions[1]
        .to_string()
        .contains("TERM OUT OF ORDER"));
}

#[test]
fn leaders_handed_off_in_time_are_fine() {
    let c = Checker::new();
    // Resigns at 500; the next is elected at 500.
    leadership(&c, "e", 10, (0, 900, None, 500));
    // Told lost at 950 (renewals stopped), lingers until 1000; the
    // next is elected at 960.
    let b = leadership(&c, "e", 11, (500, 300, None, 1000));
    c.renewed(b, at(800), at(800), 300);
    c.belief_ended(b, at(950));
    leadership(&c, "e", 14, (960, 900, Some(1500), 1500));
    // Elected once the last validity ran out, with no word from it.
    leadership(&c, "e", 15, (2400, 900, None, 2600));
    let f = c.findings(at(3000));
    let p = &f.primitives;
    assert_eq!(p.leaderships, 4);
    assert!(p.leader_overlaps.is_empty(), "{:?}", p.leader_overlaps);
    assert!(p.term_inversions.is_empty(), "{:?}", p.term_inversions);
    assert_eq!(p.violations(), 0);
}

#[test]
fn sequential_sections_are_fine() {
    let c = Checker::new();
    let a = c.enter(grant("a", "t1", 0, Some(900)), at(1));
    c.exit(a, at(500), Ending::Released { released: true });
    let b = c.enter(grant("b", "t2", 510, Some(900)), at(511));
    c.exit(b, at(800), Ending::Released { released: true });
    let f = c.findings(at(2000));
    assert_eq!(
        (f.sections, f.violations.len(), f.overruns.len()),
        (2, 0, 0)
    );
    assert_eq!(f.benign_overlaps, 0);
}

#[test]
fn two_believed_holders_at_once_are_a_violation() {
    let c = Checker::new();
    let a = c.enter(grant("a", "t1", 0, Some(900)), at(1));
    let b = c.enter(grant("b", "t2", 300, Some(900)), at(301));
    c.exit(a, at(600), Ending::Released { released: true });
    c.exit(b, at(700), Ending::Released { released: true });
    let f = c.findings(at(2000));
    assert_eq!(f.violations.len(), 1);
    let v = &f.violations[0];
    assert!((v.overlap_ms - 299.0).abs() < 1e-6, "{}", v.overlap_ms);
    assert!(v.strict);
    assert!(v.to_string().contains("SAFETY VIOLATION"), "{v}");
}

#[test]
fn overlap_after_the_first_lost_its_validity_is_benign_and_an_overrun() {
    let c = Checker::new();
    // a is valid until 400 but stays until 600; b enters at 450.
    let a = c.enter(grant("a", "t1", 0, Some(400)), at(1));
    let b = c.enter(grant("b", "t2", 450, Some(900)), at(450));
    c.exit(a, at(600), Ending::Released { released: false });
    c.exit(b, at(700), Ending::Released { released: true });
    let f = c.findings(at(2000));
    assert!(f.violations.is_empty());
    assert_eq!(f.benign_overlaps, 1);
    assert_eq!(f.overruns.len(), 1);
    assert!((f.overruns[0].by_ms - 200.0).abs() < 1e-6);
}

#[test]
fn a_lost_notice_ends_belief_and_renewals_extend_it() {
    let c = Checker::new();
    let a = c.enter(grant("a", "t1", 0, Some(300)), at(1));
    c.renewed(a, at(200), at(200), 300); // valid until 500
    c.belief_ended(a, at(450)); // told lost at 450
    c.exit(
        a,
        at(460),
        Ending::Lost {
            reason: "renew_failed".into(),
        },
    );
    let b = c.enter(grant("b", "t2", 455, Some(900)), at(455));
    c.exit(b, at(900), Ending::Released { released: true });
    let f = c.findings(at(2000));
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    assert_eq!(f.benign_overlaps, 1);
    assert!(
        f.overruns.is_empty(),
        "stopping just after `lost` is in time"
    );
}

#[test]
fn lock_commands_are_believed_until_they_stop_and_open_sections_count() {
    let c = Checker::new();
    let mut g = grant("cmd", "t1", 0, None);
    g.kind = ClientKind::LockCommand;
    let _open = c.enter(g, at(1));
    let b = c.enter(grant("b", "t2", 5000, Some(900)), at(5000));
    c.exit(b, at(5100), Ending::Released { released: true });
    let f = c.findings(at(6000));
    assert_eq!(f.violations.len(), 1, "the command never stopped");
    assert!(f.overruns.is_empty(), "no validity known, no overrun");
}

#[test]
fn strictness_tells_a_slow_answer_from_a_double_grant() {
    let c = Checker::new();
    // Granted at 100 but requested at 0: valid until 500 from the
    // answer, 400 from the request.
    let mut g = grant("a", "t1", 100, Some(400));
    g.requested = at(0);
    let a = c.enter(g, at(100));
    c.exit(a, at(480), Ending::Released { released: false });
    let b = c.enter(grant("b", "t2", 450, Some(900)), at(450));
    c.exit(b, at(900), Ending::Released { released: true });
    let f = c.findings(at(2000));
    assert_eq!(f.violations.len(), 1);
    assert!(!f.violations[0].strict);
}

#[test]
fn keys_that_outlive_their_lock_are_leaks_once() {
    let c = Checker::new();
    let a = c.enter(grant("a", "t1", 0, Some(900)), at(1));
    c.exit(a, at(100), Ending::Killed);
    c.key_seen(
        Sighting {
            master: "r1",
            resource: "r",
            token: "t1",
            pttl_ms: 500,
            seen: at(900),
        },
        2000,
        200,
    ); // first seen after exit
    assert!(c.findings(at(3000)).leaks.is_empty());
    c.key_seen(
        Sighting {
            master: "r1",
            resource: "r",
            token: "t1",
            pttl_ms: 500,
            seen: at(1400),
        },
        2000,
        200,
    ); // within TTL of that
    assert!(c.findings(at(3000)).leaks.is_empty());
    c.key_seen(
        Sighting {
            master: "r1",
            resource: "r",
            token: "t1",
            pttl_ms: 500,
            seen: at(2200),
        },
        2000,
        200,
    ); // 1300ms > 1000+200
    c.key_seen(
        Sighting {
            master: "r1",
            resource: "r",
            token: "t1",
            pttl_ms: 400,
            seen: at(2300),
        },
        2000,
        200,
    );
    // A key that landed late and then expired is no leak.
    let late = c.enter(grant("b", "t3", 0, Some(900)), at(1));
    c.exit(late, at(100), Ending::Released { released: true });
    c.key_seen(
        Sighting {
            master: "r3",
            resource: "r",
            token: "t3",
            pttl_ms: 900,
            seen: at(5000),
        },
        2000,
        200,
    );
    c.key_seen(
        Sighting {
            master: "r3",
            resource: "r",
            token: "t3",
            pttl_ms: 100,
            seen: at(5800),
        },
        2000,
        200,
    );
    c.key_seen(
        Sighting {
            master: "r2",
            resource: "r",
            token: "other",
            pttl_ms: -1,
            seen: at(10),
        },
        2000,
        200,
    );
    c.key_seen(
        Sighting {
            master: "r2",
            resource: "r",
            token: "big",
            pttl_ms: 5000,
            seen: at(10),
        },
        2000,
        200,
    );
    let f = c.findings(at(3000));
    assert_eq!(f.leaks.len(), 3, "{:?}", f.leaks);
}
