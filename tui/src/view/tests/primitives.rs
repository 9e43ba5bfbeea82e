//! Render tests of semaphores and elections: the KIND column of the locks
//! view, the force release of a permit or a leadership, the primitives
//! view and the header's figures.

use super::*;
use crate::client::Command;

/// The fixture agent with a semaphore `pay` (permits 0 and 1 of 3) and an
/// election `sched` in its listing, beside a plain lock.
fn primitives_app(t0: Instant) -> App {
    use crate::state::primitives::Answers;
    use redlock_wire::{Leader, PermitInfo, SemaphoreResponse};
    let mut app = app_at(t0, false);
    let mut permit0 = lock_fixtures::lock("pay permit 0", Some("w1"), 20_000, MASTERS, MASTERS);
    permit0.agent = Some("pod-a".to_string());
    let permit1 = lock_fixtures::lock("pay permit 1", Some("w2"), 20_000, MASTERS, MASTERS);
    let mut leader = lock_fixtures::lock("sched election", Some("cron"), 9_000, MASTERS, MASTERS);
    leader.agent = Some("pod-b".to_string());
    let plain = lock_fixtures::lock("orders:42", Some("billing"), 30_000, MASTERS, MASTERS);
    polled(
        &mut app,
        t0,
        Update::Locks(Ok(lock_fixtures::response(
            vec![plain, permit0, permit1, leader],
            MASTERS,
        ))),
    );
    let permit = |i: u32, agent: &str, owner: &str, ms: u64| PermitInfo {
        permit: i,
        agent: Some(agent.to_string()),
        owner: Some(owner.to_string()),
        validity_ms: ms,
        held_here: false,
        pid: None,
        uid: None,
    };
    let answers = Answers {
        semaphores: vec![(
            "pay".to_string(),
            Ok(SemaphoreResponse {
                semaphore: "pay".to_string(),
                limit: Some(3),
                permits: vec![
                    permit(0, "pod-a", "w1", 19_500),
                    permit(1, "pod-b", "w2", 12_000),
                ],
                waiters: 0,
                unread: vec![],
                partial: false,
            }),
        )],
        elections: vec![(
            "sched".to_string(),
            Ok(Some(Leader {
                election: "sched".to_string(),
                agent: Some("pod-b".to_string()),
                owner: Some("cron".to_string()),
                value: Some("10.0.0.7:8080".to_string()),
                pid: None,
                uid: None,
                term: Some(42),
                since_ms: Some(1_000_000),
                validity_ms: 8_000,
            })),
        )],
    };
    polled(&mut app, t0, Update::Primitives(answers, 1_090_000));
    app
}

#[test]
fn the_locks_view_tells_permits_and_leaders_from_locks() {
    let t0 = Instant::now();
    let mut app = primitives_app(t0);
    typed(&mut app, ":locks");
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    let header = line_with(&screen, "RESOURCE");
    assert_eq!(
        header
            .trim_matches('│')
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>(),
        ["RESOURCE↑", "KIND", "OWNER"],
        "{header}"
    );
    assert!(line_with(&screen, "│orders:42").contains(" lock "));
    assert!(line_with(&screen, "│pay permit 0").contains(" permit "));
    assert!(line_with(&screen, "│sched election").contains(" leader "));
    // `/leader` keeps the elections' rows only.
    typed(&mut app, "/leader");
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    assert!(contains(&screen, "Locks [1/4]"), "{}", screen.join("\n"));
}

/// `ctrl-d` on a permit's row asks first, naming the permit of its
/// semaphore and what the force release does; `y` sends the force release
/// of that one permit.
#[test]
fn force_release_of_a_permit_asks_first_and_sends_that_permits_release() {
    let t0 = Instant::now();
    let mut app = primitives_app(t0);
    typed(&mut app, ":locks");
    key(&mut app, KeyCode::Enter);
    typed(&mut app, "/^pay permit 1");
    key(&mut app, KeyCode::Enter);
    ctrl(&mut app, 'd');
    let screen = shot(&app);
    assert!(
        contains(&screen, "│Force-release permit 1 of semaphore pay?"),
        "{}",
        screen.join("\n")
    );
    assert!(
        contains(&screen, "│Holder: w2 · on 3 of 3 masters"),
        "{}",
        screen.join("\n")
    );
    assert!(
        contains(
            &screen,
            "│Deletes this permit on every master; a waiter may take it."
        ),
        "{}",
        screen.join("\n")
    );
    assert!(app.take_commands().is_empty());
    key(&mut app, KeyCode::Char('y'));
    assert_eq!(
        app.take_commands(),
        [Command::ForceReleasePermit {
            semaphore: "pay".to_string(),
            permit: 1
        }]
    );
    let screen = shot(&app);
    assert!(
        contains(&screen, "force-releasing permit 1 of semaphore pay…"),
        "{}",
        screen.join("\n")
    );
}

/// `ctrl-d` on a leader's row asks first, naming the election's
/// leadership; `y` sends the force release of that leadership.
#[test]
fn force_release_of_a_leadership_asks_first_and_sends_it() {
    let t0 = Instant::now();
    let mut app = primitives_app(t0);
    typed(&mut app, ":locks");
    key(&mut app, KeyCode::Enter);
    typed(&mut app, "/^sched election");
    key(&mut app, KeyCode::Enter);
    ctrl(&mut app, 'd');
    let screen = shot(&app);
    assert!(
        contains(&screen, "│Force-release the leadership of election sched?"),
        "{}",
        screen.join("\n")
    );
    assert!(
        contains(&screen, "│Ends this leadership on every master:"),
        "{}",
        screen.join("\n")
    );
    key(&mut app, KeyCode::Char('y'));
    assert_eq!(
        app.take_commands(),
        [Command::ForceReleaseLeadership("sched".to_string())]
    );
}

#[test]
fn the_primitives_view_shows_permits_of_the_limit_and_the_leader() {
    let t0 = Instant::now();
    let mut app = primitives_app(t0);
    typed(&mut app, ":primitives");
    key(&mut app, KeyCode::Enter);
    app.update(Action::Tick(t0 + Duration::from_secs(2)));
    let screen = shot(&app);
    assert!(contains(
        &screen,
        "Semaphores & elections [2/2] · here: permits 0 · leading 0"
    ));
    let header = line_with(&screen, "HELD BY");
    assert_eq!(
        header
            .trim_matches('│')
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["KIND↑", "NAME", "HELD", "TERM", "SINCE", "VALIDITY", "HELD", "BY"]
    );
    let pay = line_with(&screen, "│semaphore");
    let words: Vec<&str> = pay.trim_matches('│').split_whitespace().collect();
    assert_eq!(
        words,
        ["semaphore", "pay", "2/3", "10.0s", "pod-a/w1,", "pod-b/w2"],
        "the shortest permit's validity, counted down: {pay}"
    );
    let sched = line_with(&screen, "│election");
    let words: Vec<&str> = sched.trim_matches('│').split_whitespace().collect();
    assert_eq!(
        words,
        [
            "election",
            "sched",
            "42",
            "1m32s",
            "6.0s",
            "pod-b/cron",
            "value",
            "10.0.0.7:8080"
        ],
        "{sched}"
    );
    assert!(contains(&screen, "2 of 2 semaphores and elections"));
}

/// Before the agent answers, and when the connection drops: `-`, never
/// the last numbers.
#[test]
fn the_primitives_view_shows_dashes_until_asked_and_after_a_drop() {
    let t0 = Instant::now();
    let mut app = app_at(t0, false);
    typed(&mut app, ":semaphores");
    key(&mut app, KeyCode::Enter);
    assert!(app.query.primitives && app.query.list);
    let leader = lock_fixtures::lock("sched election", Some("cron"), 9_000, MASTERS, MASTERS);
    polled(
        &mut app,
        t0,
        Update::Locks(Ok(lock_fixtures::response(vec![leader], MASTERS))),
    );
    let screen = shot(&app);
    let sched = line_with(&screen, "│election");
    let words: Vec<&str> = sched.trim_matches('│').split_whitespace().collect();
    assert_eq!(words, ["election", "sched", "-", "-", "-", "-"], "{sched}");
    let mut app = primitives_app(t0);
    typed(&mut app, ":elections");
    key(&mut app, KeyCode::Enter);
    app.update(Action::Client(Event::Conn(Conn::Reconnecting {
        retry_at: t0 + Duration::from_secs(2),
        attempt: 1,
        error: "connection refused".into(),
    })));
    let screen = shot(&app);
    assert!(!contains(&screen, "42"), "{}", screen.join("\n"));
    assert!(contains(&screen, "agent unreachable: connection refused"));
}

#[test]
fn the_header_counts_permits_and_leaderships_held_here() {
    let t0 = Instant::now();
    let mut app = app_at(t0, false);
    let mut reading = summary_fixtures::reading(12_000, 190, 20, [100, 100, 0, 0], 7);
    reading.permits_held = 2;
    reading.leaderships_held = 1;
    polled(&mut app, t0, Update::Summary(Ok(reading)));
    let screen = shot(&app);
    assert!(screen[0].contains("permits 2 · leading 1"), "{}", screen[0]);
}

#[test]
fn the_header_counts_readers_held_here_apart_from_locks() {
    let t0 = Instant::now();
    let mut app = app_at(t0, false);
    let mut reading = summary_fixtures::reading(12_000, 190, 20, [100, 100, 0, 0], 7);
    reading.locks_held = 1;
    reading.readers_held = 3;
    polled(&mut app, t0, Update::Summary(Ok(reading)));
    let screen = shot(&app);
    assert!(
        screen[0].contains("1 held here · 3 reading · "),
        "{}",
        screen[0]
    );
}
