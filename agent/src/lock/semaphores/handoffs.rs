//! A semaphore's hand-offs on the queue alone, against masters in memory
//! on tokio's paused clock: a released permit goes to the head in one
//! round trip, a free permit costs one, and permits released at once go
//! to as many waiters at once, without waiting for another release.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::PermitContest;
use crate::lock::acquire::{contend, Contest};
use crate::lock::Waiters;
use crate::metrics::Metrics;
use crate::redlock::fence::FenceSettings;
use crate::redlock::memory::{self, Memory, Mode};
use crate::redlock::observe::Ignore;
use crate::redlock::{Acquire, Grant, Redlock, Resource};

const TTL: Duration = Duration::from_secs(30);

/// Each master answers after this long once the holders are granted.
const ROUND_TRIP: Duration = Duration::from_millis(20);

/// Three masters in memory whose engine retries after 10 s: a waiter
/// that would wait for the retry rather than a release takes that long.
fn setup() -> (Vec<Arc<Memory>>, Arc<Redlock<Memory>>, Arc<Waiters>) {
    let masters: Vec<Arc<Memory>> = (0..3).map(Memory::new).collect();
    let mut settings = memory::settings(None, FenceSettings::default());
    settings.retry_delay = Duration::from_secs(10);
    let redlock = Redlock::new(masters.clone(), settings, Arc::new(Ignore));
    let metrics = Metrics::new(&["m0".into(), "m1".into(), "m2".into()]);
    let waiters = Waiters::new(
        "t:".into(),
        100,
        75,
        Arc::new(metrics),
        CancellationToken::new(),
    );
    (masters, Arc::new(redlock), Arc::new(waiters))
}

/// A contest for one permit of the semaphore `s` of limit 2.
fn contest(redlock: &Redlock<Memory>) -> PermitContest {
    let name = Resource::new("s").unwrap();
    PermitContest::new(redlock, &name, 2, TTL, None, false)
}

/// A permit granted at once: its index and grant.
async fn holder(redlock: &Redlock<Memory>, waiters: &Waiters) -> (u32, Grant) {
    let mut contest = contest(redlock);
    let outcome = contend(waiters, redlock, &mut contest, Duration::ZERO, None, None).await;
    let Ok(Acquire::Granted(grant)) = outcome else {
        panic!("a free permit: {outcome:?}");
    };
    (contest.won.unwrap(), grant)
}

/// A request that waits up to a minute, started now; answers its outcome
/// and when it was granted.
fn waiter(
    redlock: &Arc<Redlock<Memory>>,
    waiters: &Arc<Waiters>,
) -> tokio::task::JoinHandle<(Acquire, Instant)> {
    let (redlock, waiters) = (Arc::clone(redlock), Arc::clone(waiters));
    tokio::spawn(async move {
        let mut contest = contest(&redlock);
        let wait = Duration::from_secs(60);
        let outcome = contend(&waiters, &redlock, &mut contest, wait, None, None)
            .await
            .unwrap();
        (outcome, Instant::now())
    })
}

/// Waits until `n` requests wait in the semaphore's queue.
async fn queued(waiters: &Waiters, queue: &str, n: u64) {
    while waiters.count(queue) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Both permits held, one waiter; the holder of one releases it, the
/// masters answering after 20 ms. Announced with its token, the waiter
/// votes for that permit beside its read and is granted one round trip
/// after the release; announced without one (as agents before the
/// waiting flag did), it reads, then votes: two round trips.
#[tokio::test(start_paused = true)]
async fn a_released_permit_goes_to_the_head_in_one_round_trip() {
    for named in [true, false] {
        let (masters, redlock, waiters) = setup();
        let queue = Contest::<Memory>::queue(&contest(&redlock)).to_string();
        let _first = holder(&redlock, &waiters).await;
        let (index, second) = holder(&redlock, &waiters).await;
        let waiting = waiter(&redlock, &waiters);
        queued(&waiters, &queue, 1).await;
        for master in &masters {
            master.set(Mode::Slow(ROUND_TRIP));
        }
        let permit = Resource::permit(&Resource::new("s").unwrap(), index);
        redlock.release(&permit, &second.token).await;
        let released = Instant::now();
        waiters.released(&queue, named.then_some(second.token.as_str()));
        let (outcome, granted) = waiting.await.unwrap();
        assert!(matches!(outcome, Acquire::Granted(_)), "{outcome:?}");
        let took = granted - released;
        if named {
            assert!(took < 2 * ROUND_TRIP, "one round trip: {took:?}");
        } else {
            assert!(took >= 2 * ROUND_TRIP, "read, then vote: {took:?}");
        }
    }
}

/// Both permits held, three waiters; both permits are released at once,
/// the masters answering after 20 ms. The head takes one release and the
/// waiter behind it the other: each votes for its permit beside its read,
/// at the same time, so both are granted one round trip after the
/// releases (one after the other, the second would need two more).
#[tokio::test(start_paused = true)]
async fn releases_at_once_are_handed_to_waiters_at_once() {
    let (masters, redlock, waiters) = setup();
    let queue = Contest::<Memory>::queue(&contest(&redlock)).to_string();
    let holders = [
        holder(&redlock, &waiters).await,
        holder(&redlock, &waiters).await,
    ];
    let mut waiting = Vec::new();
    for n in 1..=3 {
        waiting.push(waiter(&redlock, &waiters));
        queued(&waiters, &queue, n).await;
    }
    for master in &masters {
        master.set(Mode::Slow(ROUND_TRIP));
    }
    for (index, grant) in &holders {
        let permit = Resource::permit(&Resource::new("s").unwrap(), *index);
        redlock.release(&permit, &grant.token).await;
    }
    let released = Instant::now();
    for (_, grant) in &holders {
        waiters.released(&queue, Some(grant.token.as_str()));
    }
    let third = waiting.pop().unwrap();
    for waiting in waiting {
        let (outcome, granted) = waiting.await.unwrap();
        assert!(matches!(outcome, Acquire::Granted(_)), "{outcome:?}");
        let took = granted - released;
        assert!(took < 2 * ROUND_TRIP, "one round trip each: {took:?}");
    }
    third.abort();
}

/// A request on a semaphore with a permit free votes for its guess (the
/// lowest permit not held through this agent) beside its read: granted
/// one round trip after it asked, the masters answering after 20 ms;
/// without a guess it reads, then votes: two round trips.
#[tokio::test(start_paused = true)]
async fn a_free_permit_costs_one_round_trip() {
    for guessed in [true, false] {
        let (masters, redlock, waiters) = setup();
        let (first, _) = holder(&redlock, &waiters).await;
        for master in &masters {
            master.set(Mode::Slow(ROUND_TRIP));
        }
        let mut contest = contest(&redlock);
        if guessed {
            let held = Resource::permit(&Resource::new("s").unwrap(), first);
            contest = contest.guess(|permit| *permit == held);
        }
        let asked = Instant::now();
        let outcome = contend(&waiters, &redlock, &mut contest, Duration::ZERO, None, None).await;
        assert!(matches!(outcome, Ok(Acquire::Granted(_))), "{outcome:?}");
        assert_eq!(contest.won, Some(1 - first));
        let took = asked.elapsed();
        if guessed {
            assert!(took < 2 * ROUND_TRIP, "one round trip: {took:?}");
        } else {
            assert!(took >= 2 * ROUND_TRIP, "read, then vote: {took:?}");
        }
    }
}
