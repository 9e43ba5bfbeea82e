//! The lock service on masters in memory: waiting order, holds and what
//! ends them, release bookkeeping, force release and its announcement,
//! the listing's honesty about unread masters, and how failures map to
//! [`LockError`]s. The integration tests (`agent/tests/`) prove the same
//! on real masters; these pin the service's own logic without Redis.

use std::sync::Arc;
use std::time::Duration;

use redlock_wire::{AcquireRequest, CampaignEvent, CampaignRequest, HoldEvent, OnDisconnect};
use tokio_util::sync::CancellationToken;

use super::isolation::{Pod, PodUid};
use super::listing::{self, ListQuery, ReadError};
use super::waiters::{Subscriptions, Waiters};
use super::{Ask, Holder, LockError, Locks, Released, Rules};
use crate::config::{FenceMode, Isolate};
use crate::metrics::Metrics;
use crate::redlock::fence::FenceSettings;
use crate::redlock::memory::{self, Memory, Mode};
use crate::redlock::observe::Ignore;
use crate::redlock::{Channels, Redlock, Resource, Token};

/// Long enough that no lock here expires during a test on a busy machine.
const TTL_MS: u64 = 30_000;
/// The longest any wait below may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);

pub(super) fn service() -> (Vec<Arc<Memory>>, Arc<Locks<Memory>>) {
    service_with(Isolate::None)
}

/// The service, keeping tokens to their holders as `isolate` says.
fn service_with(isolate: Isolate) -> (Vec<Arc<Memory>>, Arc<Locks<Memory>>) {
    let masters: Vec<Arc<Memory>> = (0..3).map(Memory::new).collect();
    let names: Vec<String> = masters.iter().map(|m| m.name.clone()).collect();
    let metrics = Arc::new(Metrics::new(&names));
    let settings = memory::settings(Some("here"), FenceSettings::default());
    let engine = Redlock::new(masters.clone(), settings, Arc::new(Ignore));
    let shutdown = CancellationToken::new();
    let waiters = Arc::new(Waiters::new(
        "t:".into(),
        100,
        75,
        Arc::clone(&metrics),
        shutdown.clone(),
    ));
    let rules = Rules {
        default_ttl: Duration::from_millis(TTL_MS),
        max_ttl: Duration::from_secs(60),
        node_timeout: Duration::from_millis(50),
        max_hold: Duration::from_secs(3600),
        fence: FenceMode::OnRequest,
        loss_notice: true,
        isolate,
        reentry_keeps_ttl: true,
        reentry_trusts_pid_zero: false,
        renewals_wait_for_client: false,
        limit_kept_by_any_agent: true,
        max_streams_per_uid: 1024,
    };
    let locks = Locks::new(engine, rules, waiters, metrics, shutdown);
    (masters, Arc::new(locks))
}

pub(super) fn resource(name: &str) -> Resource {
    Resource::new(name).unwrap()
}

pub(super) fn ask(wait_ms: u64, owner: &str) -> Ask {
    lock_ask(AcquireRequest {
        ttl_ms: Some(TTL_MS),
        wait_ms: Some(wait_ms),
        owner: Some(owner.into()),
        fence: false,
        token: None,
        ..AcquireRequest::default()
    })
}

fn lock_ask(lock: AcquireRequest) -> Ask {
    Ask { lock, holder: None }
}

/// The process `pid` (uid and gid 1000), in no pod.
fn process(pid: Option<u32>) -> Holder {
    Holder {
        pid,
        uid: 1000,
        gid: 1000,
        pod: None,
    }
}

/// A process of the pod whose UID ends in `pod` (a hex digit).
fn in_pod(pid: u32, pod: char) -> Holder {
    let uid = format!("00000000-0000-0000-0000-00000000000{pod}");
    Holder {
        pod: Some(Pod {
            uid: PodUid::parse(&uid).unwrap(),
            container: None,
        }),
        ..process(Some(pid))
    }
}

/// Acquires `r` for the process `pid` (uid and gid 1000), owner "billing".
async fn acquire_as(locks: &Locks<Memory>, r: &Resource, pid: u32) -> crate::redlock::Grant {
    acquire_for(locks, r, process(Some(pid))).await
}

/// Acquires `r` for `holder`, owner "billing".
async fn acquire_for(locks: &Locks<Memory>, r: &Resource, holder: Holder) -> crate::redlock::Grant {
    let ask = Ask {
        holder: Some(holder),
        ..ask(0, "billing")
    };
    locks.acquire(r, ask).await.unwrap()
}

/// Waits until every master holds `key`, or none does (the engine answers
/// once a quorum did; the last master's command lands a moment later).
async fn on_every_master(masters: &[Arc<Memory>], key: &str, held: bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !masters.iter().all(|m| m.holds(key).is_some() == held) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key} held={held} not on every master"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A hold on `name`, and the token of its first event, `acquired`.
async fn start_hold(
    locks: &Arc<Locks<Memory>>,
    name: &str,
) -> (super::events::Receiver<HoldEvent>, String) {
    let mut events = locks
        .hold(
            resource(name),
            ask(0, "worker"),
            None,
            OnDisconnect::Release,
        )
        .await
        .unwrap();
    let HoldEvent::Acquired { token, .. } = next(&mut events).await else {
        panic!("the first event is acquired");
    };
    (events, token)
}

/// The hold's next event is `lost` with `reason`.
async fn expect_lost(events: &mut super::events::Receiver<HoldEvent>, reason: &str) {
    match next(events).await {
        HoldEvent::Lost { reason: said } => assert_eq!(said, reason),
        other => panic!("expected lost ({reason}): {other:?}"),
    }
}

/// The next event of a hold, failing the test after [`PATIENCE`].
async fn next(events: &mut super::events::Receiver<HoldEvent>) -> HoldEvent {
    tokio::time::timeout(PATIENCE, super::events::next_timely(events))
        .await
        .expect("a hold event in time")
        .expect("the hold's stream is open")
}

/// Waiters get the lock in the order they came: each release here hands
/// it to the next in line, never to a later one.
#[tokio::test]
async fn waiters_get_the_lock_in_the_order_they_came() {
    let (_, locks) = service();
    let r = resource("r");
    let first = locks.acquire(&r, ask(0, "first")).await.unwrap();
    let mut queued = Vec::new();
    for owner in ["second", "third"] {
        let (service, name) = (Arc::clone(&locks), r.clone());
        queued.push(tokio::spawn(async move {
            let grant = service.acquire(&name, ask(15_000, owner)).await.unwrap();
            (owner, grant)
        }));
        // In line before the next one joins.
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while (locks.waiters().count(r.as_str()) as usize) < queued.len() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{owner} never queued"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let mut order = Vec::new();
    let mut holder = first.token;
    for handle in queued {
        assert_eq!(
            locks.release(&r, &holder, None).await.unwrap(),
            Released::Released,
            "released"
        );
        let (owner, grant) = tokio::time::timeout(PATIENCE, handle)
            .await
            .expect("the next waiter got the lock in time")
            .unwrap();
        order.push(owner);
        holder = grant.token;
    }
    assert_eq!(order, ["second", "third"]);
    assert_eq!(
        locks.release(&r, &holder, None).await.unwrap(),
        Released::Released
    );
    assert_eq!(locks.waiters().count(r.as_str()), 0);
}

/// A grant is remembered with its process until it is released; a second
/// release of the same token finds nothing, and says so.
#[tokio::test]
async fn a_release_forgets_the_grant_and_a_second_release_finds_nothing() {
    let (masters, locks) = service();
    let r = resource("orders");
    let grant = acquire_as(&locks, &r, 42).await;
    on_every_master(&masters, "t:orders", true).await;
    let (token, process) = locks.grants().current("orders").expect("granted here");
    assert_eq!(token, grant.token.as_str());
    assert_eq!(process.and_then(|p| p.pid), Some(42));
    for m in &masters {
        assert_eq!(m.holds("t:orders").as_deref(), Some(token.as_str()));
    }
    assert_eq!(
        locks.release(&r, &grant.token, None).await.unwrap(),
        Released::Released
    );
    assert!(locks.grants().current("orders").is_none());
    on_every_master(&masters, "t:orders", false).await;
    assert_eq!(
        locks.release(&r, &grant.token, None).await.unwrap(),
        Released::NotHeld
    );
}

/// Each way a request can fail comes back as its own error: bad fields
/// before any master is asked, a lock held elsewhere as `Taken`, too few
/// masters as `NoQuorum` naming them, an extension of a lost lock as
/// `Lost`, and a release nobody can confirm as `NoQuorum`.
#[tokio::test]
async fn failures_map_to_their_own_errors() {
    let (masters, locks) = service();
    let r = resource("r");
    let short = locks
        .acquire(
            &r,
            lock_ask(AcquireRequest {
                ttl_ms: Some(1),
                ..AcquireRequest::default()
            }),
        )
        .await;
    assert!(
        matches!(
            short,
            Err(LockError::TtlOutOfRange {
                min: 100,
                ms: 1,
                ..
            })
        ),
        "{short:?}"
    );
    let owner = locks.acquire(&r, ask(0, "a\nb")).await;
    assert!(matches!(owner, Err(LockError::InvalidOwner)), "{owner:?}");
    assert!(
        masters.iter().all(|m| m.holds("t:r").is_none()),
        "nothing was asked"
    );

    for m in &masters {
        m.plant("t:r", "someone else", Duration::from_secs(30));
    }
    let taken = locks.acquire(&r, ask(0, "me")).await;
    assert!(
        matches!(taken, Err(LockError::Taken(ref t)) if t == &r),
        "{taken:?}"
    );

    let free = resource("free");
    let grant = locks.acquire(&free, ask(0, "me")).await.unwrap();
    masters[0].set(Mode::Down);
    masters[1].set(Mode::Down);
    let none = locks.acquire(&resource("other"), ask(0, "me")).await;
    match none {
        Err(LockError::NoQuorum(message)) => {
            assert!(
                message.contains("m0") && message.contains("m1"),
                "{message}"
            )
        }
        other => panic!("expected no_quorum: {other:?}"),
    }
    let release = locks.release(&free, &grant.token, None).await;
    assert!(
        matches!(release, Err(LockError::NoQuorum(_))),
        "{release:?}"
    );
    masters[0].set(Mode::Up);
    masters[1].set(Mode::Up);

    let stranger = Token::generate("t:free", None, None);
    let lost = locks.extend(&free, &stranger, Some(TTL_MS), None).await;
    assert!(matches!(lost, Err(LockError::Lost(_))), "{lost:?}");
}

/// An operator's force release deletes the key on every master, announces
/// the value it removed on the fleet's channel on each, and ends the hold
/// of that token here with `lost: force_released`.
#[tokio::test]
async fn a_force_release_is_announced_and_ends_the_hold() {
    let (masters, locks) = service();
    let r = resource("stuck");
    let (mut events, token) = start_hold(&locks, "stuck").await;
    on_every_master(&masters, "t:stuck", true).await;
    let answer = locks.force_release(&r, None).await;
    assert_eq!(answer.deleted, 3, "{answer:?}");
    assert!(answer.failed.is_empty());
    let channel = locks.waiters().force_channel().to_string();
    for m in &masters {
        assert!(m.holds("t:stuck").is_none());
        assert_eq!(
            *m.announced.lock().unwrap(),
            [(channel.clone(), format!("stuck\n{token}"))]
        );
    }
    expect_lost(&mut events, "force_released").await;
    assert!(locks.grants().current("stuck").is_none());
}

/// A force release announced by another agent, as each master's
/// subscriber hands it over, ends the hold here the same way; a garbled
/// message ends nothing.
#[tokio::test]
async fn a_force_release_heard_from_another_agent_ends_the_hold() {
    let (_, locks) = service();
    let (channels, _changes) = Subscriptions::new(Arc::clone(&locks));
    let (mut events, token) = start_hold(&locks, "elsewhere").await;
    channels.message(channels.always(), b"no line break");
    channels.message(channels.always(), b"elsewhere\nanother-token");
    channels.message(channels.always(), format!("elsewhere\n{token}").as_bytes());
    expect_lost(&mut events, "force_released").await;
}

/// Masters so slow that a grant has less validity left than a hold needs
/// to say `lost` in time: a plain acquire still gets the lock (its caller
/// sees `validity_ms`), a hold is refused as `no_quorum` and the lock
/// released, never handed out to be worked past its validity.
#[tokio::test]
async fn a_hold_is_never_granted_with_too_little_validity_to_say_lost() {
    let (masters, locks) = service();
    for m in &masters {
        m.set(Mode::Slow(Duration::from_millis(60)));
    }
    // TTL 100 ms: at most 40 ms of validity left, under the 50 ms margin.
    let short = |owner: &str| {
        lock_ask(AcquireRequest {
            ttl_ms: Some(100),
            ..ask(0, owner).lock
        })
    };
    let refused = locks
        .hold(resource("slow"), short("hold"), None, OnDisconnect::Release)
        .await;
    match refused {
        Err(LockError::NoQuorum(message)) => {
            assert!(message.contains("validity left"), "{message}")
        }
        other => panic!("expected no_quorum: {:?}", other.map(|_| "a hold")),
    }
    assert!(locks.grants().current("slow").is_none());
    on_every_master(&masters, "t:slow", false).await;
}

/// Two of three masters lose their keys during a hold: fewer than a
/// quorum still hold it, so the hold ends with `lost: node_lost` as soon
/// as the loss is seen, not at its next renewal.
#[tokio::test]
async fn a_hold_whose_masters_lose_their_keys_ends_with_node_lost() {
    let (masters, locks) = service();
    let (mut events, _) = start_hold(&locks, "h").await;
    masters[0].lose_keys();
    masters[1].lose_keys();
    expect_lost(&mut events, "node_lost").await;
}

/// A campaign for `name` led until `max_hold_ms`, elected before this
/// returns.
pub(super) async fn lead(
    locks: &Arc<Locks<Memory>>,
    name: &str,
    max_hold_ms: Option<u64>,
) -> super::events::Receiver<CampaignEvent> {
    let request = CampaignRequest {
        ttl_ms: Some(TTL_MS),
        owner: Some("scheduler".into()),
        value: None,
        max_hold_ms,
    };
    let mut events = locks.campaign(resource(name), request, None).unwrap();
    loop {
        match next_of(&mut events).await {
            CampaignEvent::Elected { .. } => return events,
            CampaignEvent::Waiting { .. } => {}
            other => panic!("expected elected: {other:?}"),
        }
    }
}

/// The next event of a campaign, failing the test after [`PATIENCE`].
pub(super) async fn next_of(events: &mut super::events::Receiver<CampaignEvent>) -> CampaignEvent {
    tokio::time::timeout(PATIENCE, super::events::next_timely(events))
        .await
        .expect("a campaign event in time")
        .expect("the campaign's stream is open")
}

/// The campaign's stream, read to its end.
async fn to_the_end(events: &mut super::events::Receiver<CampaignEvent>) {
    tokio::time::timeout(PATIENCE, async { while events.recv().await.is_some() {} })
        .await
        .expect("the campaign's stream ends");
}

/// `redlock_leadership_changes_total{event, reason}` and
/// `redlock_failures_total{reason="lost"}`, once the campaign counted its
/// leadership's end; and every loss of a leadership, whatever its reason.
async fn ended_counts(locks: &Locks<Memory>, event: &str, reason: &str) -> (u64, u64, u64) {
    let changes = &locks.metrics().leadership_changes;
    let count = |event: &str| {
        crate::metrics::Leadership::ALL
            .iter()
            .filter(|c| c.event() == event)
            .map(|c| changes.with_label_values(&[c.event(), c.reason()]).get())
            .sum::<u64>()
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while count("resigned") + count("lost") == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no end counted");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let failures = locks.metrics().failures.with_label_values(&["lost"]).get();
    let this = changes.with_label_values(&[event, reason]).get();
    (this, count("lost"), failures)
}

/// A leadership that reaches its `max_hold` tells the client `lost`
/// (`max_hold`), as a hold does, but counts as resigned: no loss, and no
/// failure of a lock.
#[tokio::test]
async fn a_leadership_ended_by_max_hold_counts_as_resigned_not_lost() {
    let (_, locks) = service();
    let mut events = lead(&locks, "cron", Some(300)).await;
    match next_of(&mut events).await {
        CampaignEvent::Lost { reason } => assert_eq!(reason, "max_hold"),
        other => panic!("expected lost (max_hold): {other:?}"),
    }
    to_the_end(&mut events).await;
    let (resigned, lost, failures) = ended_counts(&locks, "resigned", "max_hold").await;
    assert_eq!((resigned, lost, failures), (1, 0, 0));
}

/// The agent's shutdown ends a leadership, told `lost` (`shutdown`) and
/// counted as resigned; so does the client closing its stream
/// (`closed`).
#[tokio::test]
async fn a_leadership_ended_by_shutdown_or_the_client_counts_as_resigned() {
    let (_, locks) = service();
    let events = lead(&locks, "closed", None).await;
    drop(events);
    let (resigned, lost, failures) = ended_counts(&locks, "resigned", "closed").await;
    assert_eq!((resigned, lost, failures), (1, 0, 0));

    let mut events = lead(&locks, "stopped", None).await;
    locks.shutdown_token().cancel();
    match next_of(&mut events).await {
        CampaignEvent::Lost { reason } => assert_eq!(reason, "shutdown"),
        other => panic!("expected lost (shutdown): {other:?}"),
    }
    to_the_end(&mut events).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while ended_counts(&locks, "resigned", "shutdown").await.0 == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "shutdown not counted"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (resigned, lost, failures) = ended_counts(&locks, "resigned", "shutdown").await;
    assert_eq!((resigned, lost, failures), (1, 0, 0));
}

/// A leadership whose masters lose their keys is lost (`node_lost`),
/// counted once, in the leadership metric, not as a lock's failure.
#[tokio::test]
async fn a_leadership_whose_masters_lose_their_keys_counts_as_lost_once() {
    let (masters, locks) = service();
    let mut events = lead(&locks, "cron", None).await;
    masters[0].lose_keys();
    masters[1].lose_keys();
    match next_of(&mut events).await {
        CampaignEvent::Lost { reason } => assert_eq!(reason, "node_lost"),
        other => panic!("expected lost (node_lost): {other:?}"),
    }
    to_the_end(&mut events).await;
    let (node_lost, lost, failures) = ended_counts(&locks, "lost", "node_lost").await;
    assert_eq!((node_lost, lost, failures), (1, 1, 0));
}

/// A lock's hold ended by its `max_hold` is told `lost` but is no
/// failure; one whose masters lost it is.
#[tokio::test]
async fn only_a_lost_hold_counts_as_a_failure_of_a_lock() {
    let (masters, locks) = service();
    let failures = || locks.metrics().failures.with_label_values(&["lost"]).get();
    let mut capped = locks
        .hold(
            resource("capped"),
            ask(0, "worker"),
            Some(300),
            OnDisconnect::Release,
        )
        .await
        .unwrap();
    assert!(matches!(
        next(&mut capped).await,
        HoldEvent::Acquired { .. }
    ));
    expect_lost(&mut capped, "max_hold").await;
    assert_eq!(failures(), 0);
    let (mut events, _) = start_hold(&locks, "h").await;
    masters[0].lose_keys();
    masters[1].lose_keys();
    expect_lost(&mut events, "node_lost").await;
    assert_eq!(failures(), 1);
}

/// The listing names a master it could not read and says `partial`; with
/// fewer than a quorum read it refuses to answer rather than look
/// complete.
#[tokio::test]
async fn the_listing_names_unread_masters_and_refuses_without_a_quorum() {
    let (masters, locks) = service();
    let grant = locks
        .acquire(&resource("a"), ask(0, "billing"))
        .await
        .unwrap();
    masters[2].set(Mode::Down);
    let page = listing::list(&locks, &ListQuery::default()).await.unwrap();
    assert_eq!(page.unread, ["m2"]);
    assert!(page.partial);
    let [lock] = &page.locks[..] else {
        panic!("one lock: {page:?}");
    };
    assert_eq!(lock.resource, "a");
    assert_eq!(lock.owner.as_deref(), Some("billing"));
    assert_eq!(lock.agent.as_deref(), Some("here"));
    assert!(lock.quorum_agrees && lock.held_here);
    let states: Vec<&str> = lock.nodes.iter().map(|n| n.state.as_str()).collect();
    assert_eq!(states, ["held", "held", "unknown"]);
    assert!(
        !serde_json::to_string(&page)
            .unwrap()
            .contains(grant.token.as_str()),
        "never a token"
    );

    masters[1].set(Mode::Down);
    let refused = listing::list(&locks, &ListQuery::default()).await;
    assert!(
        matches!(
            refused,
            Err(ReadError::TooFewRead {
                read: 1,
                quorum: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    let one = listing::get(&locks, &resource("a")).await;
    assert!(matches!(one, Err(ReadError::TooFewRead { .. })), "{one:?}");
}

/// Pid 0 is what the kernel reports for every peer in a pid namespace the
/// agent does not see: two such processes are not one, and neither
/// re-enters a lock the other acquired (nor its own: the agent cannot tell
/// which is asking).
#[tokio::test]
async fn processes_reported_as_pid_zero_never_reenter() {
    let (_masters, locks) = service();
    let r = resource("ledger");
    let grant = acquire_as(&locks, &r, 0).await;
    let request = AcquireRequest {
        token: Some(grant.token.as_str().to_string()),
        ..AcquireRequest::default()
    };
    let refused = locks
        .reenter(&r, &grant.token, Some(&process(Some(0))), &request)
        .await;
    assert!(
        matches!(refused, Err(LockError::ReentryUnavailable(_))),
        "{refused:?}"
    );
    assert_eq!(
        locks.release(&r, &grant.token, None).await.unwrap(),
        Released::Released,
        "the refused re-entry counted nothing"
    );
}

/// A re-entry counts one acquire more and a release one less, on the
/// grant's own token; once a release goes to the masters (the count at
/// zero, its delete perhaps still on its way) no re-entry gets in, and a
/// process other than the grant's (or one whose pid is unknown) never does.
#[tokio::test]
async fn reentries_count_and_end_when_a_release_goes_to_the_masters() {
    let (masters, locks) = service();
    let r = resource("ledger");
    let grant = acquire_as(&locks, &r, 7).await;
    let request = AcquireRequest {
        token: Some(grant.token.as_str().to_string()),
        ..AcquireRequest::default()
    };
    let refused = locks
        .reenter(&r, &grant.token, Some(&process(Some(8))), &request)
        .await;
    assert!(
        matches!(refused, Err(LockError::ReentryForbidden(_))),
        "{refused:?}"
    );
    let refused = locks
        .reenter(&r, &grant.token, Some(&process(None)), &request)
        .await;
    assert!(
        matches!(refused, Err(LockError::ReentryUnavailable(_))),
        "{refused:?}"
    );
    let again = locks
        .reenter(&r, &grant.token, Some(&process(Some(7))), &request)
        .await
        .unwrap();
    assert_eq!(
        (again.hold_count, again.token.as_str()),
        (2, grant.token.as_str())
    );
    assert_eq!(
        locks.release(&r, &grant.token, None).await.unwrap(),
        Released::StillHeld(1)
    );
    on_every_master(&masters, "t:ledger", true).await;

    // The last release, as it starts: the count goes to zero first.
    assert_eq!(
        locks.grants().release_one("ledger", grant.token.as_str()),
        None
    );
    let late = locks
        .reenter(&r, &grant.token, Some(&process(Some(7))), &request)
        .await;
    assert!(matches!(late, Err(LockError::NotReentrant(_))), "{late:?}");
}

/// A re-entry never sets less than the longest TTL set before for its
/// token, whatever it asks for (or with none asked, the default); nor does
/// an extension while the lock is re-entered. Once the inner acquire is
/// released, the holder's own extension sets what it asks for.
#[tokio::test]
async fn a_reentry_never_sets_a_shorter_ttl() {
    let (_masters, locks) = service();
    let r = resource("ledger");
    let grant = acquire_as(&locks, &r, 7).await;
    let short = AcquireRequest {
        token: Some(grant.token.as_str().to_string()),
        ttl_ms: Some(200),
        ..AcquireRequest::default()
    };
    let again = locks
        .reenter(&r, &grant.token, Some(&process(Some(7))), &short)
        .await
        .unwrap();
    assert_eq!(again.ttl, grant.ttl, "the first grant's TTL, not 200 ms");
    let extended = locks
        .extend(&r, &grant.token, Some(200), None)
        .await
        .unwrap();
    assert_eq!(
        extended.ttl, grant.ttl,
        "re-entered: not cut by an extension"
    );
    assert_eq!(
        locks.release(&r, &grant.token, None).await.unwrap(),
        Released::StillHeld(1)
    );
    let own = locks
        .extend(&r, &grant.token, Some(200), None)
        .await
        .unwrap();
    assert_eq!(own.ttl, Duration::from_millis(200), "its own lock again");
}

/// Kept to pods: another pod's extend, release and re-entry with the
/// token are refused before any master is asked, exactly as a token that
/// was never granted, and the lock stays held; the acquiring pod (another
/// of its processes too) is served. The control: without isolation the
/// other pod's release goes through.
#[tokio::test]
async fn another_pods_token_is_refused_as_an_unknown_one() {
    let (masters, locks) = service_with(Isolate::Pod);
    let r = resource("ledger");
    let grant = acquire_for(&locks, &r, in_pod(7, 'a')).await;
    let stranger = Token::from_client("rl2-not-a-grant".into());
    let b = in_pod(8, 'b');
    let reentry = |token: &Token| AcquireRequest {
        token: Some(token.as_str().to_string()),
        ..AcquireRequest::default()
    };
    let mut answers = Vec::new();
    for token in [&grant.token, &stranger] {
        let extend = locks.extend(&r, token, Some(TTL_MS), Some(&b)).await;
        let release = locks.release(&r, token, Some(&b)).await;
        let reenter = locks
            .reenter(&r, token, Some(&b), &reentry(token))
            .await
            .map(|_| ());
        let nowhere = locks.release(&r, token, None).await;
        answers.push(format!("{extend:?} {release:?} {reenter:?} {nowhere:?}"));
        for refused in [
            extend.map(|_| ()),
            release.map(|_| ()),
            reenter,
            nowhere.map(|_| ()),
        ] {
            assert!(
                matches!(refused, Err(LockError::Isolated { .. })),
                "{refused:?}"
            );
        }
    }
    assert_eq!(
        answers[0], answers[1],
        "the same answers for a held and an unknown token"
    );
    on_every_master(&masters, "t:ledger", true).await;

    let same_pod = in_pod(9, 'a');
    locks
        .extend(&r, &grant.token, Some(TTL_MS), Some(&same_pod))
        .await
        .unwrap();
    assert_eq!(
        locks
            .release(&r, &grant.token, Some(&same_pod))
            .await
            .unwrap(),
        Released::Released
    );
    on_every_master(&masters, "t:ledger", false).await;

    let (masters, locks) = service_with(Isolate::None);
    let grant = acquire_for(&locks, &r, in_pod(7, 'a')).await;
    assert_eq!(
        locks.release(&r, &grant.token, Some(&b)).await.unwrap(),
        Released::Released,
        "without isolation a token is a bearer secret"
    );
    on_every_master(&masters, "t:ledger", false).await;
}

/// Kept to uids: another uid is refused, the same uid in another process
/// is served.
#[tokio::test]
async fn isolated_by_uid_a_token_serves_its_uid_alone() {
    let (_masters, locks) = service_with(Isolate::Uid);
    let r = resource("jobs");
    let grant = acquire_for(&locks, &r, process(Some(7))).await;
    let other_uid = Holder {
        uid: 1001,
        ..process(Some(8))
    };
    let refused = locks.release(&r, &grant.token, Some(&other_uid)).await;
    assert!(
        matches!(refused, Err(LockError::Isolated { .. })),
        "{refused:?}"
    );
    assert_eq!(
        locks
            .release(&r, &grant.token, Some(&process(Some(8))))
            .await
            .unwrap(),
        Released::Released
    );
}
