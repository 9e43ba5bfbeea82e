//! Lock calls beside the agent's own load, on real healthy masters: full-
//! speed listings of a thousand locks, a hundred clients, and bursts of
//! thousands of concurrent acquires, never turn a lock call into
//! `no_quorum` nor mark a master `down`. Time a command spends queued inside the agent is the
//! agent's, not the master's.
//!
//! The agent runs in-process with the default `node_timeout` (50ms) on one
//! worker thread (the agent's default), and the clients share its runtime:
//! the load is the agent's own. Each test has a control that runs the same
//! workload with the agent's own time charged to the masters again
//! (`REDLOCK_TEST_CHARGE_QUEUED_TIME=1`) and must see it fail, so a
//! workload too light to show anything cannot pass unnoticed (the 96
//! clients' control only on demand: see its doc).
//!
//! Bounded: each client runs a fixed number of cycles, the readers stop
//! when the clients are done, a control runs at most five times. Nothing
//! here asserts on a duration. The tests run one at a time.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Cluster, Switch, TestAgent};
use redlock_client::{AcquireOptions, Error, LocksQuery};

/// Locks held for the whole run, so every listing reads this many keys on
/// each master. Enough that the control fails lock calls on a quiet
/// machine too: with 300, a quiet machine's control run showed 6
/// `no_quorum` in 1,918 calls, and another none in five runs; with 1,000,
/// a quiet CI run showed none in five runs (a busy one failed calls).
const HELD: usize = 3000;

/// What a run came to.
#[derive(Debug, Default)]
struct Figures {
    calls: AtomicUsize,
    no_quorum: AtomicUsize,
    /// Any other failure (taken, transport, other API errors).
    other: AtomicUsize,
    listings: AtomicUsize,
    /// Listings answered 429 busy (two run at once per agent).
    busy: AtomicUsize,
    /// Listings answered with another error.
    failed_listings: AtomicUsize,
    /// Samples of `/v1/nodes` that showed a master not `up`.
    not_up: AtomicUsize,
    first_no_quorum: std::sync::Mutex<Option<String>>,
    first_not_up: std::sync::Mutex<Option<String>>,
}

impl Figures {
    fn line(&self) -> String {
        format!(
            "{} lock calls, {} no_quorum, {} other failures; {} listings ({} busy, {} failed); {} node samples not up; first no_quorum: {:?}; first not up: {:?}",
            self.calls.load(Ordering::Relaxed),
            self.no_quorum.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
            self.listings.load(Ordering::Relaxed),
            self.busy.load(Ordering::Relaxed),
            self.failed_listings.load(Ordering::Relaxed),
            self.not_up.load(Ordering::Relaxed),
            self.first_no_quorum.lock().unwrap(),
            self.first_not_up.lock().unwrap(),
        )
    }

    /// No lock call failed (no `no_quorum`, nothing else) and no master
    /// was ever seen not `up`.
    fn assert_no_failures(&self) {
        let failures = [
            self.no_quorum.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
            self.not_up.load(Ordering::Relaxed),
        ];
        assert_eq!(failures, [0, 0, 0], "{}", self.line());
    }

    fn count(&self, result: Result<(), Error>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(()) => {}
            Err(Error::NoQuorum { message }) => {
                self.no_quorum.fetch_add(1, Ordering::Relaxed);
                self.first_no_quorum.lock().unwrap().get_or_insert(message);
            }
            Err(e) => {
                self.other.fetch_add(1, Ordering::Relaxed);
                eprintln!("lock call failed: {e}");
            }
        }
    }
}

/// The agents' config: the default node timeout (50ms), and a `max_ttl`
/// long enough for [`HELD`]'s locks to outlast the slowest run.
const CONFIG: &str = "lock:\n  max_ttl: 30m\n";

/// Holds [`HELD`] locks (ttl 30 min) so listings have keys to read.
async fn hold_many(agent: &TestAgent) {
    let options = AcquireOptions::new().ttl(Duration::from_secs(1800));
    for i in 0..HELD {
        agent
            .client
            .acquire(&format!("held-{i:03}"), &options)
            .await
            .unwrap_or_else(|e| panic!("held-{i:03}: {e}"));
    }
}

/// The sum over masters of `redlock_node_errors_total{kind}` in a scrape
/// of the agent's metrics; panics unless every master has the series.
async fn errors_of_kind(agent: &TestAgent, kind: &str) -> f64 {
    let (_, scrape) = agent.get_tcp("/metrics").await;
    let label = format!("kind=\"{kind}\"");
    let values: Vec<f64> = scrape
        .lines()
        .filter(|l| l.starts_with("redlock_node_errors_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(values.len(), 5, "one {label} series per master:\n{scrape}");
    values.iter().sum()
}

/// Samples `/v1/nodes` every 10ms until `done`, counting the samples in
/// which a master was not `up`.
async fn watch_nodes(client: redlock_client::Client, figures: Arc<Figures>, done: Arc<AtomicBool>) {
    while !done.load(Ordering::Relaxed) {
        let nodes = client.nodes().await.expect("nodes");
        let down: Vec<String> = nodes
            .nodes
            .iter()
            .filter(|n| n.state != redlock_wire::NodeState::Up)
            .map(|n| format!("{} {:?} ({:?})", n.name, n.state, n.last_error))
            .collect();
        if !down.is_empty() {
            figures.not_up.fetch_add(1, Ordering::Relaxed);
            figures
                .first_not_up
                .lock()
                .unwrap()
                .get_or_insert(down.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `clients` acquire/release loops of `cycles` each on resources of their
/// own, `readers` loops of `GET /v1/locks` at full speed until the clients
/// are done, and a watcher of `/v1/nodes`.
async fn run(agent: &TestAgent, clients: usize, cycles: usize, readers: usize) -> Arc<Figures> {
    let figures = Arc::new(Figures::default());
    let done = Arc::new(AtomicBool::new(false));
    let mut background = Vec::new();
    for _ in 0..readers {
        let (client, figures, done) = (agent.client.clone(), figures.clone(), done.clone());
        background.push(tokio::spawn(async move {
            let query = LocksQuery::new().limit(5000);
            while !done.load(Ordering::Relaxed) {
                match client.locks_page(&query).await {
                    Ok(page) => {
                        assert!(
                            page.locks.len() >= HELD,
                            "{} locks listed",
                            page.locks.len()
                        );
                        figures.listings.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if e.code() == Some(redlock_wire::ErrorCode::Busy) => {
                        figures.busy.fetch_add(1, Ordering::Relaxed);
                    }
                    // Not what this file tests (a listing's reads have
                    // their own bounds); counted and shown.
                    Err(e) => {
                        figures.failed_listings.fetch_add(1, Ordering::Relaxed);
                        eprintln!("listing failed: {e}");
                    }
                }
            }
        }));
    }
    background.push(tokio::spawn(watch_nodes(
        agent.client.clone(),
        figures.clone(),
        done.clone(),
    )));
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let (client, figures) = (agent.client.clone(), figures.clone());
            tokio::spawn(async move {
                let options = AcquireOptions::new().ttl(Duration::from_secs(10));
                for i in 0..cycles {
                    let resource = format!("work-{c}-{i}");
                    match client.acquire(&resource, &options).await {
                        Ok(grant) => {
                            let released = client.release(&resource, &grant.token).await;
                            figures.count(Ok(()));
                            figures.count(released.map(|_| ()));
                        }
                        Err(e) => figures.count(Err(e)),
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a client loop");
    }
    done.store(true, Ordering::Relaxed);
    for task in background {
        task.await.expect("a reader or the watcher");
    }
    figures
}

/// The workload of the listing tests: 8 clients of 120 acquire/release
/// cycles each, beside 4 listing loops. Long enough that the control,
/// which fails lock calls at random, shows it in most runs even on a
/// quiet machine (at load 3, one run of 60 cycles in two showed nothing).
const CLIENTS: usize = 8;
const CYCLES: usize = 120;
const READERS: usize = 4;

/// Runs of a control's workload before it gives up finding what the test
/// guards against: the old bounds fail lock calls at random, more often
/// the busier the machine.
const CONTROL_RUNS: usize = 5;

/// The tests of this file one at a time: each loads the machine, and the
/// control sets a process-wide switch while its agent starts.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Eight acquire/release clients beside four `GET /v1/locks` readers at
/// full speed over 1,000 held locks: no lock call fails and every master
/// stays `up`.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn listings_at_full_speed_never_fail_lock_calls() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    hold_many(&agent).await;
    let figures = run(&agent, CLIENTS, CYCLES, READERS).await;
    eprintln!(
        "listings beside lock calls: {}; errors counted: {} timeout, {} backlog",
        figures.line(),
        errors_of_kind(&agent, "timeout").await,
        errors_of_kind(&agent, "backlog").await
    );
    assert!(
        figures.listings.load(Ordering::Relaxed) > 0,
        "{}",
        figures.line()
    );
    figures.assert_no_failures();
    assert_eq!(agent.nodes().await["usable"], 5);
}

/// Clients of the many-clients tests, with no listing beside them.
const MANY: usize = 96;
const MANY_CYCLES: usize = 40;

/// 96 acquire/release clients and nothing else: the agent's own batching
/// and HTTP work never turn a lock call into `no_quorum`.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn ninety_six_clients_never_fail_lock_calls() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    let figures = run(&agent, MANY, MANY_CYCLES, 0).await;
    eprintln!(
        "96 clients: {}; errors counted: {} timeout, {} backlog",
        figures.line(),
        errors_of_kind(&agent, "timeout").await,
        errors_of_kind(&agent, "backlog").await
    );
    figures.assert_no_failures();
}

/// The control of [`ninety_six_clients_never_fail_lock_calls`], with the
/// agent's own time charged to the masters again. Not run by default: it
/// shows the failure only on a busy machine (117 and 188 `no_quorum` in
/// 7,680 calls at load 7, none in five runs at load 3), so it cannot be
/// relied on; the listing and burst controls above exercise the same
/// bounds and run every time. `cargo test -p redlock-agent --test load --
/// --ignored` runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[ignore = "shows the failure only on a busy machine"]
async fn control_charging_queued_time_makes_ninety_six_clients_fail() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start(5);
    let agent = {
        let _switch = Switch::set(redlock_testkit::switches::CHARGE_QUEUED_TIME, "1");
        TestAgent::start(&cluster, CONFIG).await
    };
    let mut lines = Vec::new();
    for _ in 0..CONTROL_RUNS {
        let figures = run(&agent, MANY, MANY_CYCLES, 0).await;
        eprintln!(
            "control, 96 clients, queued time charged: {}",
            figures.line()
        );
        lines.push(figures.line());
        if figures.no_quorum.load(Ordering::Relaxed) > 0 {
            return;
        }
    }
    panic!(
        "charging the agent's own time never failed a lock call of 96 clients:\n{}",
        lines.join("\n")
    );
}

/// Acquires in the burst tests, all at once.
const BURST: usize = 2_000;

/// [`BURST`] acquires at once, each on a resource of its own with a wait
/// (20 s), each released once granted; a watcher of `/v1/nodes` beside.
async fn burst(agent: &TestAgent) -> Arc<Figures> {
    let figures = Arc::new(Figures::default());
    let done = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_nodes(
        agent.client.clone(),
        figures.clone(),
        done.clone(),
    ));
    let acquires: Vec<_> = (0..BURST)
        .map(|i| {
            let (client, figures) = (agent.client.clone(), figures.clone());
            tokio::spawn(async move {
                let options = AcquireOptions::new()
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(20));
                let resource = format!("burst-{i}");
                match client.acquire(&resource, &options).await {
                    Ok(grant) => {
                        figures.count(Ok(()));
                        let released = client.release(&resource, &grant.token).await;
                        figures.count(released.map(|_| ()));
                    }
                    Err(e) => figures.count(Err(e)),
                }
            })
        })
        .collect();
    for task in acquires {
        task.await.expect("an acquire");
    }
    done.store(true, Ordering::Relaxed);
    watcher.await.expect("the watcher");
    figures
}

/// 2,000 acquires at once, each on a resource of its own with a wait, then
/// released: every one is granted, none answers `no_quorum`, and no master
/// is marked `down` by the agent's own backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_burst_of_acquires_marks_no_master_down() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    let figures = burst(&agent).await;
    eprintln!(
        "burst: {}; errors counted: {} timeout, {} backlog",
        figures.line(),
        errors_of_kind(&agent, "timeout").await,
        errors_of_kind(&agent, "backlog").await
    );
    figures.assert_no_failures();
    assert_eq!(agent.nodes().await["usable"], 5);
}

/// The control of [`listings_at_full_speed_never_fail_lock_calls`]: the
/// same workload on an agent that charges its own time to the masters
/// again (`REDLOCK_TEST_CHARGE_QUEUED_TIME=1`: a command queued longer than
/// the node timeout is answered `timeout` unsent, and every request is
/// bounded from the call) turns lock calls into `no_quorum`. Up to
/// [`CONTROL_RUNS`] runs, stopping at the first that shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn control_charging_queued_time_makes_lock_calls_fail() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start(5);
    let agent = {
        let _switch = Switch::set(redlock_testkit::switches::CHARGE_QUEUED_TIME, "1");
        TestAgent::start(&cluster, CONFIG).await
    };
    hold_many(&agent).await;
    let mut lines = Vec::new();
    for _ in 0..CONTROL_RUNS {
        let figures = run(&agent, CLIENTS, CYCLES, READERS).await;
        eprintln!("control, queued time charged: {}", figures.line());
        lines.push(figures.line());
        if figures.no_quorum.load(Ordering::Relaxed) > 0 {
            return;
        }
    }
    panic!(
        "charging the agent's own time never failed a lock call: the workload is too light to \
         show what the tests above guard against:\n{}",
        lines.join("\n")
    );
}

/// The control of [`a_burst_of_acquires_marks_no_master_down`]: the same
/// burst on an agent that charges its own time to the masters again turns
/// acquires or releases into `no_quorum` (or marks a master down). Up to
/// [`CONTROL_RUNS`] bursts, stopping at the first that shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn control_charging_queued_time_makes_a_burst_fail() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start(5);
    let agent = {
        let _switch = Switch::set(redlock_testkit::switches::CHARGE_QUEUED_TIME, "1");
        TestAgent::start(&cluster, CONFIG).await
    };
    let mut lines = Vec::new();
    for _ in 0..CONTROL_RUNS {
        let figures = burst(&agent).await;
        eprintln!("control burst, queued time charged: {}", figures.line());
        lines.push(figures.line());
        if figures.no_quorum.load(Ordering::Relaxed) + figures.not_up.load(Ordering::Relaxed) > 0 {
            return;
        }
    }
    panic!(
        "charging the agent's own time never failed a burst: it is too small to show what \
         a_burst_of_acquires_marks_no_master_down guards against:\n{}",
        lines.join("\n")
    );
}
