//! The algorithm against masters in memory, on tokio's paused clock: quorum,
//! validity, early decisions, stragglers, releases of failed rounds,
//! extensions and fences, with every master's behaviour set by the test.
//! The real-Redis tests (`agent/tests/`) cover the same ground end to end.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::fence::FenceSettings;
use super::memory::{self, Memory, Mode};
use super::observe::{Failure, Observer};
use super::{duplicates_of, Acquire, Drift, Extend, Redlock, Release};
use super::{Resource, Settings, Token};

/// Counts the failures the engine reports.
#[derive(Debug, Default)]
struct Seen {
    failures: Mutex<Vec<Failure>>,
}

impl Observer for Seen {
    fn failure(&self, failure: Failure) {
        self.failures.lock().unwrap().push(failure);
    }
    fn validity_at_grant(&self, _: f64) {}
}

struct Setup {
    masters: Vec<Arc<Memory>>,
    redlock: Redlock<Memory>,
    seen: Arc<Seen>,
}

fn setup(n: usize, fence: FenceSettings) -> Setup {
    let masters: Vec<Arc<Memory>> = (0..n).map(Memory::new).collect();
    let seen = Arc::new(Seen::default());
    let settings = memory::settings(None, fence);
    let observer: Arc<dyn Observer> = seen.clone();
    let redlock = Redlock::new(masters.clone(), settings, observer);
    Setup {
        masters,
        redlock,
        seen,
    }
}

fn resource(name: &str) -> Resource {
    Resource::new(name).unwrap()
}

const TTL: Duration = Duration::from_millis(1000);

/// Lets the requests left to finish in the background (stragglers,
/// releases past their quorum) finish: on the paused clock, sleeping runs
/// every other task until it waits on time too.
async fn settle() {
    tokio::time::sleep(TTL).await;
}

async fn acquire(setup: &Setup, name: &str, fence: bool) -> Acquire {
    let token = Token::generate(&format!("t:{name}"), None, None);
    setup
        .redlock
        .acquire_once(&resource(name), TTL, &token, fence, false)
        .await
}

#[tokio::test(start_paused = true)]
async fn a_quorum_of_the_configured_masters_grants_and_fewer_cannot() {
    let s = setup(5, FenceSettings::default());
    s.masters[0].set(Mode::Down);
    s.masters[1].set(Mode::Down);
    let Acquire::Granted(grant) = acquire(&s, "a", false).await else {
        panic!("3 of 5 up is a quorum");
    };
    assert!(grant.validity < TTL);
    s.masters[2].set(Mode::Down);
    match acquire(&s, "b", false).await {
        Acquire::NoQuorum(message) => {
            assert!(
                message.contains("2 of 5 masters usable, quorum is 3"),
                "{message}"
            );
            assert!(message.contains("m0 down"), "{message}");
        }
        other => panic!("2 of 5 up granted: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_taken_lock_is_refused_and_the_round_leaves_nothing_behind() {
    let s = setup(5, FenceSettings::default());
    for m in &s.masters[..3] {
        m.plant("t:a", "someone else", TTL);
    }
    assert!(matches!(
        acquire(&s, "a", false).await,
        Acquire::Taken { .. }
    ));
    // The release decides at a quorum; the others finish in the background.
    settle().await;
    for m in &s.masters[3..] {
        assert_eq!(
            m.holds("t:a"),
            None,
            "{} keeps a failed round's key",
            m.name
        );
    }
}

/// A round that every master refused wrote nothing, so it sends no
/// release: a waiter's rounds on a held lock cost the masters their votes
/// alone. One master that failed to answer may have written the key, so
/// that round is released everywhere.
#[tokio::test(start_paused = true)]
async fn a_round_every_master_refused_sends_no_release() {
    let s = setup(5, FenceSettings::default());
    for m in &s.masters {
        m.plant("t:a", "someone else", TTL);
    }
    assert!(matches!(
        acquire(&s, "a", false).await,
        Acquire::Taken { .. }
    ));
    settle().await;
    let releases = |s: &Setup| -> usize {
        s.masters
            .iter()
            .map(|m| m.releases.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    };
    assert_eq!(releases(&s), 0, "a round nobody wrote was released");

    let s = setup(5, FenceSettings::default());
    for m in &s.masters[..4] {
        m.plant("t:a", "someone else", TTL);
    }
    s.masters[4].set(Mode::Down);
    assert!(matches!(
        acquire(&s, "a", false).await,
        Acquire::Taken { .. }
    ));
    settle().await;
    assert_eq!(
        releases(&s),
        5,
        "a round with a failed vote is released on every master"
    );
}

/// A release says released only on a quorum's word, not held only when so
/// many masters said so that no quorum can have held it, and otherwise that
/// it does not know: a master that did not answer may still hold the key.
#[tokio::test(start_paused = true)]
async fn a_release_tells_not_held_from_unconfirmed() {
    let s = setup(5, FenceSettings::default());
    let held = |name: &str| {
        let token = Token::generate(&format!("t:{name}"), None, None);
        for m in &s.masters {
            m.plant(&format!("t:{name}"), token.as_str(), TTL);
        }
        token
    };

    // Two masters down: the other three make the quorum either way.
    s.masters[0].set(Mode::Down);
    s.masters[1].set(Mode::Down);
    let token = held("a");
    assert_eq!(
        s.redlock.release(&resource("a"), &token).await,
        Release::Released
    );
    let stranger = Token::generate("t:b", None, None);
    let _ = held("b");
    assert_eq!(
        s.redlock.release(&resource("b"), &stranger).await,
        Release::NotHeld
    );

    // Three down: two releases are not a quorum, and the three silent
    // masters may hold it.
    s.masters[2].set(Mode::Down);
    let token = held("c");
    match s.redlock.release(&resource("c"), &token).await {
        Release::Unconfirmed(message) => {
            assert!(
                message.contains("released on 2 of 5 masters and not held on 0, quorum is 3"),
                "{message}"
            );
            for name in ["m0", "m1", "m2"] {
                assert!(message.contains(name), "{message} should name {name}");
            }
        }
        other => panic!("2 of 5 answering released: {other:?}"),
    }
    // Even a token nobody holds is not known to be free with three silent.
    assert!(matches!(
        s.redlock.release(&resource("c"), &stranger).await,
        Release::Unconfirmed(_)
    ));

    // One down, one too slow for the caller: three answered "not held",
    // so no quorum held it, whatever the silent two say.
    s.masters[1].set(Mode::Up);
    s.masters[2].set(Mode::Up);
    s.masters[3].set(Mode::Slow(TTL * 10));
    let _ = held("d");
    assert_eq!(
        s.redlock.release(&resource("d"), &stranger).await,
        Release::NotHeld
    );
}

/// Validity is the TTL minus the slowest vote of the quorum minus drift;
/// the answer comes at that vote, not when the frozen masters answer.
#[tokio::test(start_paused = true)]
async fn validity_counts_the_quorum_and_the_answer_does_not_wait_for_stragglers() {
    let s = setup(5, FenceSettings::default());
    let ms = Duration::from_millis;
    for (m, delay) in s.masters.iter().zip([10, 20, 30, 900, 900]) {
        m.set(Mode::Slow(ms(delay)));
    }
    let started = Instant::now();
    let Acquire::Granted(grant) = acquire(&s, "a", false).await else {
        panic!("three masters answered in time");
    };
    assert_eq!(started.elapsed(), ms(30), "decided at the third vote");
    assert_eq!(
        grant.validity,
        Drift::new(0.01).validity(TTL, ms(30)).unwrap()
    );
}

#[tokio::test(start_paused = true)]
async fn a_quorum_reached_too_late_is_no_grant_and_is_released() {
    let s = setup(3, FenceSettings::default());
    for m in &s.masters {
        m.set(Mode::Slow(Duration::from_millis(995)));
    }
    assert!(matches!(
        acquire(&s, "a", false).await,
        Acquire::Taken { .. }
    ));
    assert_eq!(
        *s.seen.failures.lock().unwrap(),
        vec![Failure::ValidityExhausted]
    );
    settle().await;
    for m in &s.masters {
        assert_eq!(m.holds("t:a"), None);
    }
}

/// A round that misses its quorum says how many of the configured masters
/// answered, and names each of the others once: asked and failed, or not
/// usable. The counts agree with the names (issue 40: "0 of 5 masters
/// answered" named three).
#[tokio::test(start_paused = true)]
async fn a_missed_quorum_counts_the_masters_it_names() {
    let s = setup(5, FenceSettings::default());
    s.masters[0].set(Mode::Down);
    s.masters[1].set(Mode::Down);
    for m in &s.masters[2..] {
        m.set(Mode::LostState);
    }
    let Acquire::NoQuorum(message) = acquire(&s, "a", false).await else {
        panic!("no master answered a vote, and a lock was granted");
    };
    assert!(
        message.starts_with("0 of 5 masters answered (3 asked, 2 not usable), quorum is 3; "),
        "{message}"
    );
    let (failed, not_usable) = message
        .split_once("; not usable: ")
        .unwrap_or_else(|| panic!("{message}"));
    for m in ["m2", "m3", "m4"] {
        assert_eq!(failed.matches(&format!("{m} (")).count(), 1, "{message}");
    }
    for m in ["m0", "m1"] {
        assert_eq!(
            not_usable.matches(&format!("{m} (down)")).count(),
            1,
            "{message}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn votes_of_masters_that_lost_their_keys_never_count() {
    let s = setup(3, FenceSettings::default());
    s.masters[0].set(Mode::LostState);
    s.masters[1].set(Mode::LostState);
    assert!(matches!(
        acquire(&s, "a", false).await,
        Acquire::NoQuorum(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn extend_tells_a_lost_lock_from_a_failed_round() {
    let s = setup(5, FenceSettings::default());
    let token = Token::generate("t:e", None, None);
    let r = resource("e");
    assert!(matches!(
        s.redlock.acquire_once(&r, TTL, &token, false, false).await,
        Acquire::Granted(_)
    ));
    assert!(matches!(
        s.redlock.extend(&r, &token, TTL).await,
        Extend::Extended { .. }
    ));
    // Three masters answer while the key is still there, but too late for
    // any validity: not extended this time, not lost.
    for m in &s.masters[..3] {
        m.set(Mode::Slow(Duration::from_millis(995)));
    }
    assert!(matches!(
        s.redlock.extend(&r, &token, TTL).await,
        Extend::Failed
    ));
    // Three no longer hold it: no quorum ever can again.
    for m in &s.masters[..3] {
        m.set(Mode::Up);
        m.keys.lock().unwrap().clear();
    }
    assert!(matches!(
        s.redlock.extend(&r, &token, TTL).await,
        Extend::Lost
    ));
}

/// Grants on shifting quorums (a different master down each time): every
/// fence is above the one before, on any resource.
#[tokio::test(start_paused = true)]
async fn fences_grow_across_shifting_quorums() {
    let s = setup(5, FenceSettings::default());
    let mut last = 0;
    for round in 0..20 {
        for (i, m) in s.masters.iter().enumerate() {
            m.set(if i == round % 5 || i == (round + 2) % 5 {
                Mode::Down
            } else {
                Mode::Up
            });
        }
        let name = if round % 2 == 0 { "x" } else { "y" };
        let token = Token::generate(&format!("t:{name}"), None, None);
        let Acquire::Granted(grant) = s
            .redlock
            .acquire_once(&resource(name), TTL, &token, true, false)
            .await
        else {
            panic!("round {round}: three masters up");
        };
        let fence = grant.fence.expect("asked for a fence");
        assert!(fence > last, "round {round}: {fence} after {last}");
        last = fence;
        assert_eq!(
            s.redlock.release(&resource(name), &token).await,
            Release::Released
        );
    }
}

/// The control at the engine's level: an agent whose floor clock is far
/// behind mints below an earlier grant unless round 2 wrote the fence back.
#[tokio::test(start_paused = true)]
async fn without_the_write_back_a_clock_behind_mints_fences_out_of_order() {
    for writeback in [true, false] {
        let ahead = setup(
            3,
            FenceSettings {
                writeback,
                clock_skew_ms: 0,
                ..FenceSettings::default()
            },
        );
        let Acquire::Granted(first) = acquire(&ahead, "f", true).await else {
            panic!("granted");
        };
        // A second agent on the same masters, its clock a minute behind.
        let behind: Redlock<Memory> = Redlock::new(
            ahead.masters.clone(),
            Settings {
                fence: FenceSettings {
                    writeback,
                    clock_skew_ms: -60_000,
                    ..FenceSettings::default()
                },
                ..ahead.redlock.settings().clone()
            },
            Arc::new(Seen::default()),
        );
        let Acquire::Granted(second) = behind
            .acquire_once(
                &resource("g"),
                TTL,
                &Token::generate("t:g", None, None),
                true,
                false,
            )
            .await
        else {
            panic!("granted");
        };
        assert_eq!(
            second.fence > first.fence,
            writeback,
            "write-back {writeback}: {:?} then {:?}",
            first.fence,
            second.fence
        );
    }
}

/// Every master votes yes, but only one raises its counter: no quorum
/// confirms the fence, so there is no grant, and the round is released.
#[tokio::test(start_paused = true)]
async fn a_fence_whose_second_round_misses_its_quorum_is_no_grant() {
    let s = setup(3, FenceSettings::default());
    s.masters[0].set(Mode::NoRaise);
    s.masters[1].set(Mode::NoRaise);
    match acquire(&s, "z", true).await {
        Acquire::NoQuorum(message) => assert!(
            message.contains("the fencing counter was raised on")
                && message.contains("quorum is 2"),
            "{message}"
        ),
        other => panic!("granted without a confirmed fence: {other:?}"),
    }
    assert_eq!(*s.seen.failures.lock().unwrap(), vec![Failure::FenceFailed]);
    settle().await;
    for m in &s.masters {
        assert_eq!(m.holds("t:z"), None, "{} keeps the key", m.name);
    }
    // Without a fence asked for, the same masters grant.
    assert!(matches!(acquire(&s, "z", false).await, Acquire::Granted(_)));
}

#[test]
fn only_the_first_of_one_server_counts() {
    assert_eq!(
        duplicates_of(&[Some(1), Some(2), Some(1), None, None, Some(2)]),
        vec![None, None, Some(0), None, None, Some(1)]
    );
}

/// The masters a grant and an extension hold on: every yes, the
/// stragglers' included once they answer; a master seen to lose its keys
/// since no longer counts, and below a quorum the lock is known lost
/// without asking the masters.
#[tokio::test(start_paused = true)]
async fn the_holding_counts_every_yes_less_the_masters_that_lost_keys() {
    let s = setup(5, FenceSettings::default());
    s.masters[4].set(Mode::Slow(Duration::from_millis(50)));
    let token = Token::generate("t:h", None, None);
    let r = resource("h");
    let Acquire::Granted(grant) = s.redlock.acquire_once(&r, TTL, &token, false, false).await
    else {
        panic!("five masters up");
    };
    let key = s.redlock.key(&r);
    let nodes = s.redlock.nodes();
    assert!(grant.holding.still_on(nodes, &key) >= 3);
    settle().await;
    assert_eq!(
        grant.holding.still_on(nodes, &key),
        5,
        "the straggler's yes"
    );
    s.masters[0].lose_keys();
    assert_eq!(grant.holding.still_on(nodes, &key), 4);
    s.masters[1].lose_keys();
    s.masters[2].lose_keys();
    assert_eq!(grant.holding.still_on(nodes, &key), 2, "below the quorum");
    // A renewal now holds on the two that kept the key: no quorum.
    assert!(matches!(
        s.redlock.extend(&r, &token, TTL).await,
        Extend::Lost
    ));
    // An extension's holding starts from its own answers.
    let other = Token::generate("t:q", None, None);
    let q = resource("q");
    assert!(matches!(
        s.redlock.acquire_once(&q, TTL, &other, false, false).await,
        Acquire::Granted(_)
    ));
    let Extend::Extended { holding, .. } = s.redlock.extend(&q, &other, TTL).await else {
        panic!("held on five");
    };
    settle().await;
    assert_eq!(holding.still_on(nodes, &s.redlock.key(&q)), 5);
}

#[tokio::test(start_paused = true)]
async fn readers_share_a_lock_that_excludes_a_writer_on_every_master_they_hold() {
    let setup = setup(3, FenceSettings::default());
    let shared = resource("r").shared();
    let a = Token::generate("t:r", None, None);
    let b = Token::generate("t:r", None, None);
    // Readers that outlast the settling below.
    for token in [&a, &b] {
        let granted = setup
            .redlock
            .acquire_once(&shared, TTL * 10, token, false, false)
            .await;
        assert!(matches!(granted, Acquire::Granted(_)), "{granted:?}");
    }
    // The last master's votes land after the quorum's answer.
    settle().await;
    for m in &setup.masters {
        assert_eq!(m.readers_at("t:r").len(), 2, "{}", m.name);
    }
    assert!(matches!(
        acquire(&setup, "r", false).await,
        Acquire::Taken { .. }
    ));
    // Readers on two masters of three still hold a quorum: a writer that
    // finds one master free is refused.
    setup.masters[0].readers.lock().unwrap().clear();
    assert!(matches!(
        acquire(&setup, "r", false).await,
        Acquire::Taken { .. }
    ));
    setup.redlock.release(&shared, &a).await;
    setup.redlock.release(&shared, &b).await;
    settle().await;
    assert!(matches!(
        acquire(&setup, "r", false).await,
        Acquire::Granted(_)
    ));
    let reader = Token::generate("t:r", None, None);
    let refused = setup
        .redlock
        .acquire_once(&shared, TTL, &reader, false, false)
        .await;
    assert!(matches!(refused, Acquire::Taken { .. }), "{refused:?}");
}

/// One round for `t:a` with `token`, `ttl` seconds, found taken: its
/// `free_in`.
async fn free_in(s: &Setup, token: &Token, ttl: u64, waiting: bool) -> Option<Duration> {
    let ttl = Duration::from_secs(ttl);
    match s
        .redlock
        .acquire_once(&resource("a"), ttl, token, false, waiting)
        .await
    {
        Acquire::Taken { free_in } => free_in,
        other => panic!("taken on four of five: {other:?}"),
    }
}

/// A waiting round that finds the lock taken learns when it can be free
/// with nobody releasing it: the quorum-th shortest time its key has left,
/// the masters that granted the vote counting as free now; at most half
/// the round's TTL; never for a voter that does not wait, nor when a
/// master did not say.
#[tokio::test(start_paused = true)]
async fn a_waiting_round_learns_when_a_taken_lock_can_be_free() {
    let s = setup(5, FenceSettings::default());
    for (m, left) in s.masters.iter().zip([3, 5, 7, 9]) {
        m.plant("t:a", "someone else", Duration::from_secs(left));
    }
    let token = Token::generate("t:a", None, None);
    // m4 granted: a quorum of three needs two expiries, the second at 5 s.
    let free = free_in(&s, &token, 60, true)
        .await
        .expect("every master said");
    assert!(free <= Duration::from_secs(5), "{free:?}");
    assert!(free > Duration::from_millis(4900), "{free:?}");
    let half = free_in(&s, &token, 4, true).await;
    assert_eq!(half, Some(Duration::from_secs(2)), "half the TTL");
    assert_eq!(free_in(&s, &token, 60, false).await, None, "not waiting");
    s.masters[4].set(Mode::Down);
    assert_eq!(free_in(&s, &token, 60, true).await, None, "m4 did not say");
}
