//! The queue against masters in memory, on tokio's paused clock: a
//! waiter retries until the lock expires, a release here wakes it at
//! once, and only the head of a queue competes.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{WaitError, Waiters};
use crate::lock::acquire::{contend, LockContest};
use crate::metrics::Metrics;
use crate::redlock::fence::FenceSettings;
use crate::redlock::memory::{self, Memory};
use crate::redlock::observe::Ignore;
use crate::redlock::{Acquire, Redlock, Resource};

/// A lock's acquire on the queue alone, as the one acquire runs it
/// (`crate::lock::acquire`) without its bookkeeping: no owner, unfenced.
async fn acquire(
    waiters: &Waiters,
    redlock: &Redlock<Memory>,
    resource: &Resource,
    ttl: Duration,
    wait: Duration,
) -> Result<Acquire, WaitError> {
    let mut contest = LockContest::new(redlock, resource, ttl, None, false);
    contend(waiters, redlock, &mut contest, wait, None, None).await
}

fn setup() -> (Vec<Arc<Memory>>, Redlock<Memory>, Waiters) {
    let masters: Vec<Arc<Memory>> = (0..3).map(Memory::new).collect();
    let settings = memory::settings(None, FenceSettings::default());
    let redlock = Redlock::new(masters.clone(), settings, Arc::new(Ignore));
    let waiters = Waiters::new(
        "t:".into(),
        100,
        75,
        Arc::new(Metrics::new(&["m0".into(), "m1".into(), "m2".into()])),
        CancellationToken::new(),
    );
    (masters, redlock, waiters)
}

const TTL: Duration = Duration::from_millis(1000);

/// Another client holds the lock for 300 ms: a waiter with a second to
/// wait retries (timer-driven: nothing announces an expiry) and gets it.
#[tokio::test(start_paused = true)]
async fn a_waiter_retries_until_the_lock_expires() {
    let (masters, redlock, waiters) = setup();
    for m in &masters {
        m.plant("t:r", "someone else", Duration::from_millis(300));
    }
    let r = Resource::new("r").unwrap();
    let started = tokio::time::Instant::now();
    let outcome = acquire(&waiters, &redlock, &r, TTL, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(matches!(outcome, Acquire::Granted(_)), "{outcome:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Without a wait, the same situation is one refused round.
    for m in &masters {
        m.plant("t:q", "someone else", Duration::from_millis(300));
    }
    let q = Resource::new("q").unwrap();
    let once = acquire(&waiters, &redlock, &q, TTL, Duration::ZERO)
        .await
        .unwrap();
    assert!(matches!(once, Acquire::Taken { .. }));
}

/// One release wakes a queue once, however many masters announce it and
/// whether or not this agent released it; the same release heard again
/// after a failed round wakes it again; a release without a token (an
/// older agent's message, an operator's force release) always wakes it.
#[tokio::test]
async fn one_release_wakes_a_queue_once() {
    let (_, _, waiters) = setup();
    let r = Resource::new("r").unwrap();
    let (ticket, _) = waiters.join(std::iter::once(r.as_str()), None).unwrap();
    let wakes = || *ticket.wake.borrow();
    waiters.released("r", Some("t1"));
    for _ in 0..3 {
        waiters.released_on("t:released:r", b"t1");
    }
    assert_eq!(wakes(), 1);
    ticket.hear_again(Some("t1"));
    waiters.released_on("t:released:r", b"t1");
    assert_eq!(wakes(), 2);
    waiters.released_on("t:released:r", b"t2");
    waiters.released("r", Some("t2"));
    assert_eq!(wakes(), 3);
    waiters.released_on("t:released:r", b"released");
    waiters.released_on("t:released:r", b"released");
    waiters.released("r", None);
    assert_eq!(wakes(), 6);
    waiters.released_on("t:released:other", b"t3");
    assert_eq!(wakes(), 6, "another resource's release");
}

/// In a semaphore's queue a release heard while the head has one to take
/// goes to the next waiter, and a failed round forgets only the release
/// it took: another master's message of the one handed to the other
/// waiter wakes nobody again, where forgetting both would send the head
/// after a permit already taken.
#[tokio::test]
async fn a_semaphore_s_failed_round_forgets_only_its_own_release() {
    let (_, _, waiters) = setup();
    let s = || std::iter::once("s");
    let (head, _) = waiters.join(s(), None).unwrap();
    head.hand_offs();
    let (second, _) = waiters.join(s(), None).unwrap();
    waiters.released("s", Some("t1"));
    waiters.released("s", Some("t2"));
    assert!(!head.handed() && second.handed());
    assert_eq!(head.take_release().as_deref(), Some("t1"));
    assert_eq!(second.take_release().as_deref(), Some("t2"));
    head.hear_again(Some("t1"));
    let wakes = || (*head.wake.borrow(), *second.wake.borrow());
    let before = wakes();
    waiters.released_on("t:released:s", b"t2");
    assert_eq!(wakes(), before, "t2 heard again");
    waiters.released_on("t:released:s", b"t1");
    assert_eq!(wakes(), (before.0 + 1, before.1), "t1 heard again");
}

/// In a semaphore's queue whose head is in a round, a release heard from
/// the masters goes to the waiter behind it, but a release through this
/// agent (queued on the masters, not yet run there, so the head's round
/// read the permits before it) is the head's to take next: the first in
/// line gets the first permit freed here.
#[tokio::test]
async fn a_release_here_is_not_handed_past_a_head_in_its_round() {
    let (_, _, waiters) = setup();
    let s = || std::iter::once("s");
    let (head, _) = waiters.join(s(), None).unwrap();
    head.hand_offs();
    let (second, _) = waiters.join(s(), None).unwrap();
    head.running(true);
    waiters.released_here("s", "t1");
    assert!(!second.handed(), "kept for the head");
    waiters.released("s", Some("t2"));
    assert!(second.handed(), "the head has one to take");
    head.running(false);
    assert_eq!(head.take_release().as_deref(), Some("t1"));
    assert_eq!(second.take_release().as_deref(), Some("t2"));
    head.running(true);
    waiters.released("s", Some("t3"));
    assert!(second.handed(), "heard from the masters: handed on");
}

/// A release through this agent wakes the queue's head at once, long
/// before the holder's TTL and without burning retries.
#[tokio::test(start_paused = true)]
async fn a_release_here_wakes_the_head_at_once() {
    let (masters, redlock, waiters) = setup();
    let waiters = Arc::new(waiters);
    let redlock = Arc::new(redlock);
    let r = Resource::new("r").unwrap();
    let Acquire::Granted(first) = acquire(
        &waiters,
        &redlock,
        &r,
        Duration::from_secs(30),
        Duration::ZERO,
    )
    .await
    .unwrap() else {
        panic!("free lock");
    };
    let waiter = {
        let (waiters, redlock, r) = (Arc::clone(&waiters), Arc::clone(&redlock), r.clone());
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let outcome = acquire(&waiters, &redlock, &r, TTL, Duration::from_secs(60))
                .await
                .unwrap();
            (outcome, started.elapsed())
        })
    };
    // The waiter has queued once its first round was refused.
    while waiters.count("r") == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let released_at = tokio::time::Instant::now();
    assert_eq!(
        redlock.release(&r, &first.token).await,
        crate::redlock::Release::Released
    );
    waiters.released("r", Some(first.token.as_str()));
    let (outcome, _) = waiter.await.unwrap();
    assert!(matches!(outcome, Acquire::Granted(_)), "{outcome:?}");
    assert!(
        released_at.elapsed() < Duration::from_secs(1),
        "woken by the release, not by the 30 s TTL"
    );
    assert!(masters.iter().all(|m| m.holds("t:r").is_some()));
}

/// One uid gets at most its share of the waiter slots, another uid
/// still gets one, the whole agent's bound holds over every uid, and
/// a slot is given back when its waiter leaves; each refusal names
/// its limit.
#[test]
fn each_uid_waits_within_its_share() {
    let waiters = Waiters::new(
        "t:".into(),
        4,
        3,
        Arc::new(Metrics::new(&["m0".into()])),
        CancellationToken::new(),
    );
    let r = Resource::new("r").unwrap();
    let mine: Vec<_> = (0..3)
        .map(|_| waiters.join(std::iter::once(r.as_str()), Some(7)).unwrap())
        .collect();
    assert_eq!(waiters.count_of(7), 3);
    let Err(refused) = waiters.join(std::iter::once(r.as_str()), Some(7)) else {
        panic!("a fourth waiter of uid 7");
    };
    assert_eq!(
        refused,
        WaitError::TooManyWaitersPerUid { uid: 7, limit: 3 }
    );
    assert!(
        refused.to_string().contains("(lock.max_waiters_per_uid)"),
        "{refused}"
    );
    let other = waiters
        .join(std::iter::once(r.as_str()), Some(8))
        .expect("another uid has its own share");
    let Err(full) = waiters.join(std::iter::once(r.as_str()), Some(9)) else {
        panic!("a fifth waiter on the agent");
    };
    assert_eq!(full, WaitError::TooManyWaiters(4));
    assert!(full.to_string().contains("(lock.max_waiters)"), "{full}");
    assert!(
        waiters.join(std::iter::once(r.as_str()), None).is_err(),
        "an unknown peer too"
    );
    assert_eq!(waiters.count_of(9), 0, "a refused uid holds no slot");
    drop(other);
    drop(mine);
    assert_eq!(waiters.count_of(7), 0);
    assert_eq!(waiters.count("r"), 0);
    let _again = waiters
        .join(std::iter::once(r.as_str()), Some(7))
        .expect("slots are given back");
}

/// A release through this agent wakes the waiter here once the release is
/// queued on every master, not once they answer: with the masters
/// answering after 20 ms (each running a command when it comes, as a
/// node's batch runs its commands in order), the waiter's vote goes out
/// behind the release and is granted as the release is answered, one
/// round trip after it started. Woken by the release's answer, the waiter
/// would be granted a round trip later, or after a timer retry (every
/// 10 ms here) and its vote's round trip: later either way.
#[tokio::test(start_paused = true)]
async fn a_release_here_hands_the_lock_to_the_waiter_here_in_one_round_trip() {
    use crate::lock::tests::{ask, resource, service};
    const ROUND_TRIP: Duration = Duration::from_millis(20);
    let (masters, locks) = service();
    let r = resource("r");
    let first = locks.acquire(&r, ask(0, "first")).await.unwrap();
    let waiter = {
        let (locks, r) = (Arc::clone(&locks), r.clone());
        tokio::spawn(async move {
            let grant = locks.acquire(&r, ask(60_000, "second")).await;
            (grant, tokio::time::Instant::now())
        })
    };
    while locks.waiters().count("r") == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for master in &masters {
        master.set(crate::redlock::memory::Mode::Slow(ROUND_TRIP));
    }
    let started = tokio::time::Instant::now();
    let released = locks.release(&r, &first.token, None).await.unwrap();
    assert_eq!(released, crate::lock::Released::Released);
    let (grant, granted) = waiter.await.unwrap();
    grant.expect("the waiter gets the lock");
    let took = granted - started;
    assert!(took <= ROUND_TRIP, "one round trip: {took:?}");
}
