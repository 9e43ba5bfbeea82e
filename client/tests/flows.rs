//! The client's flows against a real agent (in-process, on a temp socket)
//! over three real `redis-server` masters: the same calls the crate's doc
//! examples make, with what the agent and the masters show afterwards.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use redlock_agent::{Bound, Config};
use redlock_client::wire::HoldEvent;
use redlock_client::{
    AcquireOptions, Client, Error, ErrorCode, HoldOptions, LocksQuery, LostReason,
};
use redlock_testkit::RedisServer;
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

const DEADLINE: Duration = Duration::from_secs(15);

/// Three masters and an agent over them; all stop when dropped.
struct Setup {
    client: Client,
    socket: PathBuf,
    /// On the admin socket, where force release is served.
    admin: Client,
    _stop: oneshot::Sender<()>,
    _masters: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    setup_with("").await
}

/// As [`setup`], with `socket_yaml` added under the config's `socket:`
/// (indented two spaces, one key a line).
async fn setup_with(socket_yaml: &str) -> Setup {
    let dir = tempfile::tempdir().expect("temp dir");
    let masters: Vec<RedisServer> = (1..=3)
        .map(|i| RedisServer::start(dir.path(), &format!("r{i}")).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let socket = dir.path().join("agent.sock");
    let mut yaml = format!(
        "socket:\n  path: {:?}\n{socket_yaml}metrics:\n  listen: 127.0.0.1:0\nmasters:\n",
        socket.display().to_string()
    );
    for master in &masters {
        yaml.push_str(&format!(
            "  - name: {}\n    url: {}\n",
            master.name(),
            master.url()
        ));
    }
    let config = Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let admin = config.admin.socket.path.clone();
    // The masters were started empty just now: no quarantine for them.
    let bound = Bound::bind_with(config, true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(bound.serve(async {
        let _ = stopped.await;
    }));
    let client = Client::new(&socket);
    wait_for("a usable quorum", || async {
        client.nodes().await.is_ok_and(|n| n.available)
    })
    .await;
    Setup {
        client,
        admin: Client::new(&admin),
        socket,
        _stop: stop,
        _masters: masters,
        _dir: dir,
    }
}

/// Polls `condition` until it holds; panics after [`DEADLINE`].
async fn wait_for<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Acquire, a second acquire refused as `taken`, extend, release, and a
/// second release that finds nothing.
#[tokio::test]
async fn acquire_extend_release_round_trip() {
    let s = setup().await;
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .owner("billing-worker-3");
    let grant = s.client.acquire("orders-42", &options).await.unwrap();
    assert_eq!(grant.resource, "orders-42");
    assert_eq!(grant.ttl, Duration::from_secs(10));
    assert!(grant.validity > Duration::ZERO && grant.validity <= grant.ttl);
    assert!(
        grant.token.ends_with(".billing-worker-3"),
        "{}",
        grant.token
    );
    assert!(
        !format!("{grant:?}").contains(&grant.token),
        "Debug hides the token"
    );

    let again = s.client.acquire("orders-42", &AcquireOptions::new()).await;
    assert!(matches!(again, Err(Error::Taken { .. })), "{again:?}");

    let extended = s
        .client
        .extend("orders-42", &grant.token, Some(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(extended.ttl, Duration::from_secs(20));
    assert!(extended.validity > Duration::from_secs(10));

    let locks = s.client.locks().await.unwrap();
    let info = locks
        .locks
        .iter()
        .find(|l| l.resource == "orders-42")
        .unwrap();
    assert_eq!(info.owner.as_deref(), Some("billing-worker-3"));
    assert!(info.held_here && info.quorum_agrees);

    assert!(s.client.release("orders-42", &grant.token).await.unwrap());
    assert!(!s.client.release("orders-42", &grant.token).await.unwrap());
    let lost = s.client.extend("orders-42", &grant.token, None).await;
    assert!(matches!(lost, Err(Error::Lost { .. })), "{lost:?}");
}

/// A waiter gets the lock when the holder releases within its wait.
#[tokio::test]
async fn a_waiter_gets_the_lock_when_it_is_released() {
    let s = setup().await;
    let held = s
        .client
        .acquire("queue", &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    let waiter = {
        let client = s.client.clone();
        tokio::spawn(async move {
            client
                .acquire(
                    "queue",
                    &AcquireOptions::new().wait(Duration::from_secs(10)),
                )
                .await
        })
    };
    wait_for("the waiter to queue", || async {
        s.client.locks().await.is_ok_and(|l| {
            l.locks
                .iter()
                .any(|i| i.resource == "queue" && i.waiters == 1)
        })
    })
    .await;
    assert!(s.client.release("queue", &held.token).await.unwrap());
    let grant = waiter.await.unwrap().unwrap();
    assert_ne!(grant.token, held.token);
}

/// Resources are percent-encoded once: a `/`, `:` and `%` arrive as they
/// were given; what the agent refuses comes back with its code.
#[tokio::test]
async fn resources_are_encoded_once_and_refusals_keep_their_code() {
    let s = setup().await;
    let odd = "orders/42:eu%20x";
    let grant = s.client.acquire(odd, &AcquireOptions::new()).await.unwrap();
    assert_eq!(grant.resource, odd);
    let locks = s.client.locks().await.unwrap();
    assert!(locks.locks.iter().any(|l| l.resource == odd), "{locks:?}");
    assert!(s.client.release(odd, &grant.token).await.unwrap());

    let bad = s
        .client
        .acquire("a*b", &AcquireOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(
            bad,
            Error::Api {
                status: 400,
                code: ErrorCode::InvalidResource,
                ..
            }
        ),
        "{bad:?}"
    );
    // Below twice lock.node_timeout (50 ms here): refused, as the OpenAPI
    // document says.
    let short = s
        .client
        .acquire("r", &AcquireOptions::new().ttl(Duration::from_millis(1)))
        .await
        .unwrap_err();
    assert_eq!(short.code(), Some(ErrorCode::TtlOutOfRange), "{short:?}");
}

/// No agent on the socket: a connect error naming it, not a hang.
#[tokio::test]
async fn an_absent_agent_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::new(dir.path().join("nobody.sock"));
    let err = client.nodes().await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains("nobody.sock"), "{err}");
}

/// The hold stream: `acquired` (at `hold`), then `renewed` lines that move
/// the deadline; dropping the hold releases the lock at once.
#[tokio::test]
async fn a_hold_streams_renewals_and_releases_when_dropped() {
    let s = setup().await;
    let options = HoldOptions::new().ttl(Duration::from_millis(600));
    let mut hold = s.client.hold("batch", &options).await.unwrap();
    assert_eq!(hold.ttl(), Duration::from_millis(600));
    let first_deadline = hold.valid_until();
    let event = tokio::time::timeout(DEADLINE, hold.next_event())
        .await
        .expect("a renewal")
        .unwrap();
    assert!(
        matches!(event, Some(HoldEvent::Renewed { .. })),
        "{event:?}"
    );
    assert!(hold.valid_until() > first_deadline);

    hold.close();
    // A TTL far longer than the wait: only a release lets this through.
    let grant = s
        .client
        .acquire(
            "batch",
            &AcquireOptions::new()
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert!(s.client.release("batch", &grant.token).await.unwrap());
}

/// The guard: renewed while it lives, told `lost` when an operator
/// force-releases the lock, and the lock free again after that.
#[tokio::test]
async fn a_guard_hears_of_an_operator_force_release() {
    let s = setup().await;
    let options = HoldOptions::new()
        .ttl(Duration::from_secs(2))
        .owner("report");
    let guard = s.client.lock("nightly", &options).await.unwrap();
    let lost = guard.lost();
    let first = guard.valid_until();
    wait_for("a renewal", || async { guard.valid_until() > first }).await;
    assert!(!guard.is_lost());

    let forced = s.admin.force_release("nightly").await.unwrap();
    assert_eq!(forced.deleted, 3, "{forced:?}");
    let reason = tokio::time::timeout(DEADLINE, lost)
        .await
        .expect("the loss notice");
    assert_eq!(reason, LostReason::Agent("force_released".into()));
    assert!(guard.is_lost());
    // Released on the masters already: ours no more.
    assert!(!guard.release().await.unwrap());
}

/// Dropping the guard releases the lock on every master at once; release()
/// says a quorum still held it.
#[tokio::test]
async fn a_guard_releases_on_drop_and_on_release() {
    let s = setup().await;
    let long = HoldOptions::new().ttl(Duration::from_secs(30));
    let guard = s.client.lock("exports", &long).await.unwrap();
    assert!(guard.valid_until() > Instant::now());
    drop(guard);
    let next = s
        .client
        .lock("exports", &long.clone().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(next.release().await.unwrap());
    let locks = s.client.locks().await.unwrap();
    assert!(
        locks.locks.iter().all(|l| l.resource != "exports"),
        "{locks:?}"
    );
}

/// A guard whose agent goes away learns it from the closed connection.
#[tokio::test]
async fn a_guard_hears_when_its_agent_stops() {
    let s = setup().await;
    let guard = s
        .client
        .lock("jobs", &HoldOptions::new().ttl(Duration::from_secs(10)))
        .await
        .unwrap();
    let Setup { _stop, .. } = s;
    // Stopping the agent ends holds with `lost` (reason `shutdown`).
    let _ = _stop.send(());
    let reason = tokio::time::timeout(DEADLINE, guard.lost())
        .await
        .expect("the loss notice");
    assert!(
        matches!(reason, LostReason::Agent(ref r) if r == "shutdown")
            || matches!(reason, LostReason::Disconnected(_)),
        "{reason:?}"
    );
}

/// The operator reads decode into the wire types.
#[tokio::test]
async fn operator_reads_decode() {
    let s = setup().await;
    assert_eq!(s.client.socket(), s.socket.as_path());
    let nodes = s.client.nodes().await.unwrap();
    assert_eq!((nodes.quorum, nodes.nodes.len()), (2, 3));
    let summary = s.client.summary().await.unwrap();
    assert_eq!(summary.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(s.client.leaks().await.unwrap().repair, "none");
}

/// `healthz` answers while the agent serves, on the pooled connection
/// (again and again), and fails once the agent has stopped.
#[tokio::test]
async fn healthz_answers_while_the_agent_serves() {
    let s = setup().await;
    for _ in 0..3 {
        s.client.healthz().await.unwrap();
    }
    let Setup { client, _stop, .. } = s;
    let _ = _stop.send(());
    wait_for("healthz to fail after the stop", || async {
        client.healthz().await.is_err()
    })
    .await;
}

/// `connect` opens the socket up front; pages of `/v1/locks` walk every
/// lock under a prefix once, by cursor; one lock reads in full, and a
/// lock nobody holds is `not_found`.
#[tokio::test]
async fn lock_listings_page_by_cursor_and_one_lock_reads_in_full() {
    let s = setup().await;
    s.client.connect().await.unwrap();
    let mut tokens = Vec::new();
    for name in ["pg/a", "pg/b", "pg/c", "other"] {
        let grant = s
            .client
            .acquire(name, &AcquireOptions::new().ttl(Duration::from_secs(30)))
            .await
            .unwrap();
        tokens.push(grant.token);
    }
    let mut seen = Vec::new();
    let mut query = LocksQuery::new().prefix("pg/").limit(2);
    loop {
        let page = s.client.locks_page(&query).await.unwrap();
        assert!(page.locks.len() <= 2, "{page:?}");
        seen.extend(page.locks.iter().map(|l| l.resource.clone()));
        match page.next_cursor {
            Some(cursor) => query = query.cursor(cursor),
            None => break,
        }
    }
    assert_eq!(seen, ["pg/a", "pg/b", "pg/c"]);

    let one = s.client.lock_info("pg/b").await.unwrap();
    assert_eq!(one.lock.resource, "pg/b");
    assert!(one.lock.held_here, "{one:?}");
    let missing = s.client.lock_info("pg/none").await.unwrap_err();
    assert_eq!(missing.code(), Some(ErrorCode::NotFound), "{missing}");
    assert!(!missing.is_transport());
}

/// The agent closes a connection idle for `socket.request_timeout`; the
/// client's pooled connection it closed is replaced without the caller
/// seeing it, and the call is answered.
#[tokio::test]
async fn an_idle_connection_the_agent_closed_is_replaced() {
    let s = setup_with("  request_timeout: 300ms\n").await;
    assert!(s.client.nodes().await.unwrap().available);
    // A connection opened after the client's went idle: once the agent has
    // closed this one for idleness, it has closed the client's too.
    let mut sentinel = tokio::net::UnixStream::connect(&s.socket).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(DEADLINE, sentinel.read(&mut buf))
        .await
        .expect("the agent closes an idle connection");
    assert_eq!(read.unwrap(), 0, "the agent closes it without a word");
    let nodes = s.client.nodes().await.unwrap();
    assert!(nodes.available, "{nodes:?}");
    let grant = s
        .client
        .acquire("after-idle", &AcquireOptions::new())
        .await
        .unwrap();
    assert!(s.client.release("after-idle", &grant.token).await.unwrap());
}

/// Two permits of a semaphore of 2 through `acquire_permit`, the third
/// refused as `taken`, another limit refused as `limit_mismatch`; the
/// listing shows both holders without tokens; a freed permit goes to a
/// hold, which names it; extend and release as for locks.
#[tokio::test]
async fn semaphore_permits_round_trip() {
    use redlock_client::{PermitHoldOptions, PermitOptions};
    let s = setup().await;
    let options = PermitOptions::new(2)
        .ttl(Duration::from_secs(10))
        .owner("worker");
    let first = s.client.acquire_permit("pay-api", &options).await.unwrap();
    let second = s.client.acquire_permit("pay-api", &options).await.unwrap();
    assert_eq!(first.semaphore, "pay-api");
    let mut numbers = [first.permit, second.permit];
    numbers.sort_unstable();
    assert_eq!(numbers, [0, 1]);
    assert!(
        !format!("{first:?}").contains(&first.token),
        "Debug hides the token"
    );
    let third = s.client.acquire_permit("pay-api", &options).await;
    assert!(matches!(third, Err(Error::Taken { .. })), "{third:?}");
    let other = s
        .client
        .acquire_permit("pay-api", &PermitOptions::new(3))
        .await
        .unwrap_err();
    assert_eq!(other.code(), Some(ErrorCode::LimitMismatch), "{other}");

    let listing = s.client.semaphore("pay-api").await.unwrap();
    assert_eq!(listing.limit, Some(2));
    assert_eq!(listing.permits.len(), 2, "{listing:?}");
    assert!(listing.permits.iter().all(|p| p.held_here));
    let text = serde_json::to_string(&listing).unwrap();
    assert!(!text.contains(&first.token) && !text.contains(&second.token));

    let extended = s
        .client
        .extend_permit("pay-api", &first.token, Some(Duration::from_secs(20)))
        .await
        .unwrap();
    assert!(extended.validity > Duration::from_secs(10));
    assert!(s
        .client
        .release_permit("pay-api", &first.token)
        .await
        .unwrap());
    assert!(!s
        .client
        .release_permit("pay-api", &first.token)
        .await
        .unwrap());

    let hold = s
        .client
        .hold_permit(
            "pay-api",
            &PermitHoldOptions::new(2).wait(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    assert_eq!(hold.permit(), first.permit, "the freed permit");
    assert_eq!(hold.semaphore(), "pay-api");
    drop(hold);
    wait_for("the hold's permit released", || async {
        s.client
            .semaphore("pay-api")
            .await
            .is_ok_and(|l| l.permits.len() == 1)
    })
    .await;
    assert!(s
        .client
        .release_permit("pay-api", &second.token)
        .await
        .unwrap());
}

/// A campaigner is elected and named by `leader` and an observer; a second
/// waits, and is elected with a larger term when the first resigns by
/// dropping its campaign; once it resigns too, `leader` says `no_leader`.
#[tokio::test]
async fn a_campaign_leads_until_dropped_and_the_next_gets_a_larger_term() {
    use redlock_client::{CampaignEvent, CampaignOptions, ObserveEvent};
    let s = setup().await;
    let options = |value: &str| {
        CampaignOptions::new()
            .ttl(Duration::from_secs(5))
            .value(value)
    };
    let mut first = s.client.campaign("sched", &options("first")).await.unwrap();
    let term = first.elected().await.unwrap().expect("elected");
    assert!(first.is_leader());
    let leader = s.client.leader("sched").await.unwrap();
    assert_eq!(
        (leader.term, leader.value.as_deref()),
        (Some(term), Some("first"))
    );
    let mut observer = s.client.observe("sched").await.unwrap();
    match observer.next_event().await.unwrap() {
        Some(ObserveEvent::Leader(l)) => assert_eq!(l.term, Some(term)),
        other => panic!("{other:?}"),
    }

    let mut second = s
        .client
        .campaign("sched", &options("second"))
        .await
        .unwrap();
    let waiting = second.next_event().await.unwrap();
    assert!(
        matches!(waiting, Some(CampaignEvent::Waiting { .. })),
        "{waiting:?}"
    );
    first.resign();
    let next = tokio::time::timeout(DEADLINE, second.elected())
        .await
        .expect("elected in time")
        .unwrap()
        .expect("elected");
    assert!(next > term, "{next} after {term}");
    let seen = tokio::time::timeout(DEADLINE, async {
        loop {
            match observer.next_event().await.unwrap() {
                Some(ObserveEvent::Leader(l)) if l.term == Some(next) => return l,
                Some(_) => {}
                None => panic!("the observer's stream ended"),
            }
        }
    })
    .await
    .expect("the observer saw the new leader");
    assert_eq!(seen.value.as_deref(), Some("second"));
    drop(second);
    wait_for("no leader", || async {
        s.client
            .leader("sched")
            .await
            .is_err_and(|e| e.code() == Some(ErrorCode::NoLeader))
    })
    .await;
}

/// Several resources at once: all granted under one token (a single
/// acquire of any refused), extended and released by it; one already held
/// keeps the whole request out; a hold of several releases them when
/// dropped.
#[tokio::test]
async fn several_resources_round_trip() {
    let s = setup().await;
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .owner("mover")
        .fence();
    let grant = s
        .client
        .acquire_many(&["stock-b", "stock-a"], &options)
        .await
        .unwrap();
    assert_eq!(grant.resources, ["stock-a", "stock-b"]);
    assert!(grant.fence.is_some(), "{grant:?}");
    assert!(
        !format!("{grant:?}").contains(&grant.token),
        "Debug hides the token"
    );
    for resource in ["stock-a", "stock-b"] {
        let single = s.client.acquire(resource, &AcquireOptions::new()).await;
        assert!(matches!(single, Err(Error::Taken { .. })), "{single:?}");
    }
    let extended = s
        .client
        .extend_many(&grant.token, Some(Duration::from_secs(20)))
        .await
        .unwrap();
    assert!(extended.validity > Duration::from_secs(10));
    let overlapping = s
        .client
        .acquire_many(&["stock-b", "stock-c"], &AcquireOptions::new())
        .await;
    assert!(
        matches!(overlapping, Err(Error::Taken { .. })),
        "{overlapping:?}"
    );
    assert!(s.client.release_many(&grant.token).await.unwrap());

    let hold = s
        .client
        .hold_many(&["stock-a", "stock-c"], &HoldOptions::new())
        .await
        .unwrap();
    let single = s.client.acquire("stock-c", &AcquireOptions::new()).await;
    assert!(matches!(single, Err(Error::Taken { .. })), "{single:?}");
    drop(hold);
    wait_for("both released when the hold is dropped", || async {
        let grant = s
            .client
            .acquire_many(&["stock-a", "stock-c"], &AcquireOptions::new())
            .await;
        match grant {
            Ok(grant) => s.client.release_many(&grant.token).await.unwrap(),
            Err(_) => false,
        }
    })
    .await;
}
