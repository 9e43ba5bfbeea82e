//! Load: many connections and many waiters on one agent (a child process
//! over three masters), with its resident memory read from `/proc`.
//!
//! - Connections: `connections` clients each get one answer and stay open;
//!   fresh requests must still be answered quickly; past
//!   `socket.max_connections` new connections get the documented 503
//!   `too_many_connections`; closing them gives the slots back.
//! - Waiters: `waiters` requests wait on one held resource; one more gets
//!   503 `too_many_waiters`; releasing hands the lock down the queue; closing
//!   the waiting connections empties the queue.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::task::JoinSet;

use crate::client::{self, AcquireOptions, Answer, Client, Error, ErrorCode, Grant, HoldOptions};
use crate::cluster::{AgentSettings, Cluster};
use crate::http::{self, Conn};
use crate::openapi::{self, Spec};

/// How much load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub connections: usize,
    pub waiters: usize,
}

/// Latencies of a series of requests, in ms.
#[derive(Debug, Clone, Default)]
pub struct Latencies(pub Vec<f64>);

impl Latencies {
    fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64() * 1000.0);
    }

    pub fn max(&self) -> f64 {
        self.0.iter().copied().fold(0.0, f64::max)
    }

    pub fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }
}

impl fmt::Display for Latencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n={} median {:.1}ms max {:.1}ms",
            self.0.len(),
            self.median(),
            self.max()
        )
    }
}

/// What the load did to the agent.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub connections: usize,
    pub served: usize,
    pub open_fds: usize,
    pub seconds_to_open: f64,
    pub over_limit_tried: usize,
    pub over_limit_refused: usize,
    pub refusal_sample: String,
    /// The same requests on the idle agent, for comparison.
    pub probes_idle: Latencies,
    pub probes_at_connections: Latencies,
    pub rss_baseline_kib: u64,
    pub rss_at_connections_kib: u64,
    pub rss_after_connections_kib: u64,
    /// RSS with every round's connections open, from the second round.
    pub rss_rounds_kib: Vec<u64>,
    pub waiters: usize,
    pub waiters_seen: u64,
    pub seconds_to_queue: f64,
    pub extra_waiter: String,
    pub probes_at_waiters: Latencies,
    pub rss_at_waiters_kib: u64,
    pub handed_down: usize,
    pub handoff_seconds: f64,
    /// Per hand-off with a short queue, for comparison.
    pub small_handoff_ms: f64,
    pub waiters_after_close: u64,
    pub seconds_to_drain: f64,
    pub rss_after_waiters_kib: u64,
    pub problems: Vec<String>,
}

impl LoadReport {
    pub fn problems(&self) -> Vec<String> {
        self.problems.clone()
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_conn = self
            .rss_at_connections_kib
            .saturating_sub(self.rss_baseline_kib) as f64
            / self.connections.max(1) as f64;
        writeln!(f, "== load")?;
        writeln!(
            f,
            "connections: {} opened and answered in {:.1}s ({} served), agent fds {}",
            self.connections, self.seconds_to_open, self.served, self.open_fds
        )?;
        writeln!(
            f,
            "   RSS {} before, {} with {} open ({:.1} KiB per connection), {} after closing; with {} open again, round by round: {}",
            mib(self.rss_baseline_kib),
            mib(self.rss_at_connections_kib),
            self.connections,
            per_conn,
            mib(self.rss_after_connections_kib),
            self.connections,
            self.rss_rounds_kib
                .iter()
                .map(|k| mib(*k))
                .collect::<Vec<_>>()
                .join(", "),
        )?;
        writeln!(
            f,
            "   fresh requests (healthz, acquire+release) while loaded: {}; idle: {}",
            self.probes_at_connections, self.probes_idle
        )?;
        writeln!(
            f,
            "   over socket.max_connections: {} of {} extra connections refused: {}",
            self.over_limit_refused, self.over_limit_tried, self.refusal_sample
        )?;
        writeln!(
            f,
            "waiters: {} queued on one resource in {:.1}s (agent counted {}); one more: {}",
            self.waiters, self.seconds_to_queue, self.waiters_seen, self.extra_waiter
        )?;
        writeln!(
            f,
            "   RSS {} with the queue; fresh requests meanwhile: {}",
            mib(self.rss_at_waiters_kib),
            self.probes_at_waiters
        )?;
        writeln!(
            f,
            "   released: the lock went down the queue {} times in {:.2}s ({:.1}ms each with {} queued; {:.1}ms each with {} queued)",
            self.handed_down,
            self.handoff_seconds,
            self.handoff_seconds * 1000.0 / self.handed_down.max(1) as f64,
            self.waiters,
            self.small_handoff_ms,
            SMALL_QUEUE
        )?;
        writeln!(
            f,
            "   waiting connections closed: {} waiters left after {:.1}s; RSS {}",
            self.waiters_after_close,
            self.seconds_to_drain,
            mib(self.rss_after_waiters_kib)
        )?;
        if self.problems.is_empty() {
            write!(f, "result: ok")
        } else {
            write!(f, "result: {}", self.problems.join("; "))
        }
    }
}

/// Raises this process's open-files soft limit to its hard limit.
pub fn raise_nofile() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    limit.rlim_cur
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// One served request on a new connection, kept open afterwards: the
/// client returned keeps it for its next call, for as long as it lives.
async fn served(socket: &Path) -> Result<redlock_client::Client, String> {
    let client = redlock_client::Client::new(socket).with_timeout(Duration::from_secs(30));
    client.healthz().await.map_err(|e| e.to_string())?;
    Ok(client)
}

/// `n` acquires of `resource` that wait, one per connection. Each
/// connection is opened in turn, as the agent accepts it (not thousands
/// at once, past the socket's backlog), and its acquire then waits in a
/// task of the set; dropping the set closes the connections.
///
/// # Errors
/// When a connection cannot be opened.
async fn queue(
    socket: &Path,
    resource: &'static str,
    options: &AcquireOptions,
    n: usize,
) -> Result<JoinSet<Result<Grant, Error>>, String> {
    let mut waiting = JoinSet::new();
    for _ in 0..n {
        let waiter = redlock_client::Client::new(socket).with_timeout(client::SLACK);
        waiter.connect().await.map_err(|e| e.to_string())?;
        let options = options.clone();
        waiting.spawn(async move { waiter.acquire(resource, &options).await });
    }
    Ok(waiting)
}

async fn probe(
    client: &Client,
    n: usize,
    into: &mut Latencies,
    problems: &mut Vec<String>,
    what: &str,
) {
    for i in 0..n {
        let started = Instant::now();
        let ok = if i % 2 == 0 {
            client.healthz().await.is_ok()
        } else {
            let tag: String = what.chars().filter(char::is_ascii_alphanumeric).collect();
            let resource = format!("probe-{tag}-{i}");
            let request = AcquireOptions::new().ttl(Duration::from_millis(1000));
            match client.acquire(&resource, &request).await {
                Ok(Answer::Ok(g)) => client.release(&resource, &g.token).await.is_ok(),
                _ => false,
            }
        };
        into.push(started.elapsed());
        if !ok {
            problems.push(format!("a fresh request was not served while {what}"));
        }
    }
}

async fn waiters_now(client: &Client) -> u64 {
    client.summary().await.map_or(0, |s| s.waiters)
}

/// Rounds of connections opened and closed, to see memory plateau.
const ROUNDS: usize = 5;

/// The short queue the hand-off time is compared with.
const SMALL_QUEUE: usize = 20;

/// Milliseconds per hand-off down a queue of `n` waiters (asking for
/// `waiter`) on a fresh resource, each winner releasing at once.
async fn handoffs_with(client: &Client, waiter: &AcquireOptions, n: usize) -> f64 {
    let first = AcquireOptions::new().ttl(Duration::from_millis(2000));
    let Ok(Answer::Ok(first)) = client.acquire("small", &first).await else {
        return f64::NAN;
    };
    let Ok(mut waiting) = queue(client.socket(), "small", waiter, n).await else {
        return f64::NAN;
    };
    while waiters_now(client).await < waiting.len() as u64 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let _ = client.release("small", &first.token).await;
    let mut done = 0;
    while let Some(answer) = waiting.join_next().await {
        if let Ok(Ok(grant)) = answer {
            let _ = client.release("small", &grant.token).await;
        }
        done += 1;
    }
    started.elapsed().as_secs_f64() * 1000.0 / done.max(1) as f64
}

/// Runs both load phases.
///
/// # Errors
/// When the cluster cannot start.
pub async fn run(options: &LoadOptions) -> Result<LoadReport, String> {
    let nofile = raise_nofile();
    let need = (options.connections + options.waiters) as u64 + 200;
    if nofile < (options.connections.max(options.waiters) as u64 + 200) {
        return Err(format!(
            "the open-files limit is {nofile}; {need} are needed (ulimit -n)"
        ));
    }
    let spec = Spec::load(&openapi::default_path())?;
    let headroom = 50;
    let settings = AgentSettings {
        key_prefix: "load:".into(),
        socket_extra: vec![
            format!("max_connections: {}", options.connections + headroom),
            // Every connection comes from this one process: its uid may
            // take every slot (the per-uid share has its own test).
            format!(
                "max_connections_per_uid: {}",
                options.connections + headroom
            ),
            "request_timeout: 120s".into(),
        ],
        lock_extra: vec![
            format!("max_waiters: {}", options.waiters),
            // Every waiter comes from this one process: its uid may take
            // every slot (the per-uid share has its own test).
            format!("max_waiters_per_uid: {}", options.waiters),
        ],
        log_level: "warn".into(),
        ..AgentSettings::default()
    };
    let cluster = Cluster::start(3, 1, settings).await?;
    cluster.wait_usable(3, Duration::from_secs(10)).await?;
    let (socket, pid) = {
        let agent = cluster.agents[0].lock().await;
        (agent.socket.clone(), agent.pid().unwrap_or(0))
    };
    let client = Client::new(&socket);
    let rss = || crate::cluster::rss_kib(pid).unwrap_or(0);
    let mut report = LoadReport {
        connections: options.connections,
        waiters: options.waiters,
        ..LoadReport::default()
    };
    let mut warmup = Latencies::default();
    probe(&client, 20, &mut warmup, &mut report.problems, "warming up").await;
    report.probes_idle = warmup;
    report.rss_baseline_kib = rss();

    // Connections.
    let started = Instant::now();
    let mut open: Vec<redlock_client::Client> = Vec::with_capacity(options.connections);
    let mut failures = 0usize;
    let mut first_failure = String::new();
    while open.len() + failures < options.connections {
        let batch = (options.connections - open.len() - failures).min(500);
        let results = futures::future::join_all((0..batch).map(|_| served(&socket))).await;
        for r in results {
            match r {
                Ok(c) => open.push(c),
                Err(e) => {
                    if first_failure.is_empty() {
                        first_failure = e;
                    }
                    failures += 1;
                }
            }
        }
    }
    report.seconds_to_open = started.elapsed().as_secs_f64();
    report.served = open.len();
    if failures > 0 {
        report.problems.push(format!(
            "{failures} of {} connections were not served: {first_failure}",
            options.connections
        ));
    }
    report.open_fds = fds(pid);
    report.rss_at_connections_kib = rss();
    probe(
        &client,
        20,
        &mut report.probes_at_connections,
        &mut report.problems,
        "connections are open",
    )
    .await;
    if report.probes_at_connections.max() > 1000.0 {
        report.problems.push(format!(
            "fresh requests took up to {:.0}ms with {} connections open",
            report.probes_at_connections.max(),
            options.connections
        ));
    }
    // Past the limit: new connections are refused with the documented 503.
    // Raw HTTP: the refusal is judged against the OpenAPI document as it
    // was sent (status, content type, body), which a typed client does not
    // show.
    let extra = headroom * 2;
    report.over_limit_tried = extra;
    let mut extras = Vec::new();
    for _ in 0..extra {
        if let Ok(mut c) = Conn::connect(&socket).await {
            let _ = c.write(&http::request("GET", "/v1/nodes", b"")).await;
            extras.push(c);
        }
    }
    for mut c in extras.drain(..) {
        if let Ok(r) = c.read_response("GET", Duration::from_secs(10)).await {
            if r.status() == 503 {
                report.over_limit_refused += 1;
                if let Err(e) = spec.check("GET", "/v1/nodes", &r) {
                    report
                        .problems
                        .push(format!("the refusal breaks the document: {e}"));
                }
                if report.refusal_sample.is_empty() {
                    report.refusal_sample = r.body_text().trim().to_string();
                }
            }
        }
    }
    if report.over_limit_refused == 0 {
        report
            .problems
            .push("no connection was refused past socket.max_connections".into());
    }
    drop(open);
    // Slots come back.
    let deadline = Instant::now() + Duration::from_secs(10);
    while served(&socket).await.is_err() {
        if Instant::now() > deadline {
            report
                .problems
                .push("connections were not served again after closing".into());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    report.rss_after_connections_kib = rss();
    // More rounds: memory must plateau, not grow with every round.
    for round in 2..=ROUNDS {
        let mut again = Vec::with_capacity(options.connections);
        while again.len() < options.connections {
            let batch = (options.connections - again.len()).min(500);
            let results = futures::future::join_all((0..batch).map(|_| served(&socket))).await;
            let before = again.len();
            again.extend(results.into_iter().flatten());
            if again.len() == before {
                report
                    .problems
                    .push(format!("round {round} of connections was not served"));
                break;
            }
        }
        report.rss_rounds_kib.push(rss());
        drop(again);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let rounds = &report.rss_rounds_kib;
    if let [.., before, last] = rounds.as_slice() {
        if *last > before + before / 10 {
            report.problems.push(format!(
                "RSS still grows round after round of {} connections: {}",
                options.connections,
                rounds
                    .iter()
                    .map(|k| mib(*k))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }

    // Waiters.
    let hold = client
        .hold("hot", &HoldOptions::new().ttl(Duration::from_millis(2000)))
        .await
        .map_err(|e| e.to_string())?;
    let Answer::Ok(hold) = hold else {
        return Err(format!("cannot hold the hot resource: {hold:?}"));
    };
    let waiter = AcquireOptions::new()
        .ttl(Duration::from_millis(2000))
        .wait(Duration::from_secs(120));
    let started = Instant::now();
    let mut waiting = queue(&socket, "hot", &waiter, options.waiters).await?;
    // Queued is what is checked, not how fast: on a loaded machine the
    // agent may take longer than 30 s for them all, so the wait gives up
    // only after 30 s in which no more waiter was counted.
    let (mut most, mut last_progress) = (0, Instant::now());
    loop {
        let seen = waiters_now(&client).await;
        if seen > most {
            (most, last_progress) = (seen, Instant::now());
        }
        report.waiters_seen = seen;
        if seen >= options.waiters as u64 || last_progress.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report.seconds_to_queue = started.elapsed().as_secs_f64();
    if report.waiters_seen < options.waiters as u64 {
        report.problems.push(format!(
            "only {} of {} waiters queued",
            report.waiters_seen, options.waiters
        ));
    }
    // Straight through redlock-client, whose refusal keeps its status.
    let extra = AcquireOptions::new().wait(Duration::from_millis(1000));
    match client.fresh().acquire("hot", &extra).await {
        Err(Error::Api { status, code, .. }) => {
            report.extra_waiter = format!("{status} {}", code.as_str());
            if code != ErrorCode::TooManyWaiters {
                report.problems.push(format!(
                    "one waiter over lock.max_waiters got {}",
                    report.extra_waiter
                ));
            }
        }
        other => {
            report.extra_waiter = format!("{other:?}");
            report
                .problems
                .push(format!("one waiter over lock.max_waiters got {other:?}"));
        }
    }
    report.rss_at_waiters_kib = rss();
    probe(
        &client,
        20,
        &mut report.probes_at_waiters,
        &mut report.problems,
        "waiters queue",
    )
    .await;
    // Release: the head gets it; each winner releases; count the hand-offs.
    let handoffs = 100.min(options.waiters);
    let started = Instant::now();
    drop(hold);
    let mut granted = 0;
    while granted < handoffs {
        let Ok(Some(answer)) =
            tokio::time::timeout(Duration::from_secs(10), waiting.join_next()).await
        else {
            report.problems.push(format!(
                "the lock went down the queue only {granted} times (wanted {handoffs})"
            ));
            break;
        };
        match answer {
            Ok(Ok(grant)) => {
                granted += 1;
                let _ = client.release("hot", &grant.token).await;
            }
            other => report.problems.push(format!("a waiter got {other:?}")),
        }
    }
    report.handed_down = granted;
    report.handoff_seconds = started.elapsed().as_secs_f64();
    // Close every waiting connection: the queue must empty.
    drop(waiting);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(10);
    loop {
        report.waiters_after_close = waiters_now(&client).await;
        if report.waiters_after_close == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report.seconds_to_drain = started.elapsed().as_secs_f64();
    if report.waiters_after_close > 0 {
        report.problems.push(format!(
            "{} waiters stayed queued 10s after their connections closed",
            report.waiters_after_close
        ));
    }
    report.small_handoff_ms = handoffs_with(&client, &waiter, SMALL_QUEUE).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    report.rss_after_waiters_kib = rss();
    // Bounded memory: well under 100 KiB per connection, and it comes back.
    let per = report
        .rss_at_connections_kib
        .saturating_sub(report.rss_baseline_kib)
        / options.connections.max(1) as u64;
    if per > 100 {
        report
            .problems
            .push(format!("{per} KiB of RSS per open connection"));
    }
    let mut raw = UnixStream::connect(&socket)
        .await
        .map_err(|e| e.to_string())?;
    let _ = raw.shutdown().await;
    let mut agent = cluster.agents[0].lock().await;
    if !agent.is_running() {
        report.problems.push("the agent died".into());
    }
    let panics = agent
        .log_text()
        .lines()
        .filter(|l| l.contains("panicked"))
        .count();
    if panics > 0 {
        report
            .problems
            .push(format!("{panics} panics in the agent's log"));
    }
    Ok(report)
}
