//! The Rust drivers: one client loop shared by the agent, `rslock` and
//! `redlock` drivers, which differ only in how a client acquires and
//! releases ([`Client`]).
//!
//! Every client loops: acquire (waiting until the window's end at most),
//! release at once, again. A driver prints one [`Report`] as JSON, with
//! the CPU its own process spent, and exits; a client stuck in a call with
//! no timeout does not keep it alive.

pub mod agent;
pub mod redlock_crate;
pub mod rslock;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::spec::{Keys, Report, Spec};
use crate::stats::{self, HotTracker, Window};

/// How one acquire ended.
pub enum Acquired<H> {
    Granted(H),
    /// Still not granted at the deadline.
    TimedOut,
    Failed(String),
}

/// One application client of a peer: its own connection where the peer has
/// connections per client, a handle on shared state where it does not.
pub trait Client: Send + 'static {
    /// Whatever the release needs (a token, a lock value).
    type Held: Send + 'static;

    /// Acquires `resource`, retrying the peer's own way until `deadline`.
    fn acquire(
        &mut self,
        resource: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> impl Future<Output = Acquired<Self::Held>> + Send;

    /// # Errors
    /// The peer's error, in words.
    fn release(&mut self, held: Self::Held) -> impl Future<Output = Result<(), String>> + Send;
}

/// What one client measured.
#[derive(Default)]
struct ClientLog {
    acquire: Vec<f64>,
    cycle: Vec<f64>,
    grants_in_window: u64,
    grants_total: u64,
    cycles: u64,
    timeouts: u64,
    errors: u64,
    error_sample: Option<String>,
    max_wait: f64,
}

impl ClientLog {
    fn error(&mut self, message: String) {
        self.errors += 1;
        self.error_sample.get_or_insert(message);
    }
}

/// Runs `spec` with one client per `clients` entry and prints the report.
/// Never returns: exits the process, so that a client blocked forever in a
/// library call (no timeout on a frozen master) cannot hang the driver.
pub async fn run<C: Client>(spec: Spec, library: String, settings: String, clients: Vec<C>) -> ! {
    let base = Instant::now();
    let cpu_start = crate::cpu::own_cpu_seconds();
    // Tells the orchestrator when the warm-up started (it times faults by it).
    eprintln!("ready");
    let start = base + Duration::from_millis(spec.warmup_ms);
    let window = Window {
        start,
        end: start + Duration::from_millis(spec.duration_ms),
    };
    let hot = Arc::new(HotTracker::default());
    // Per client: when its current acquire started (ns after `base`, 0 = none).
    let waiting: Arc<Vec<AtomicU64>> =
        Arc::new((0..clients.len()).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for (index, client) in clients.into_iter().enumerate() {
        let resource = match spec.keys {
            Keys::Distinct => format!("{}-c{index}", spec.resource_prefix),
            Keys::Hot => format!("{}-hot", spec.resource_prefix),
        };
        let hot = (spec.keys == Keys::Hot).then(|| Arc::clone(&hot));
        let waiting = Arc::clone(&waiting);
        tasks.push(tokio::spawn(client_loop(
            client,
            resource,
            spec.ttl_ms,
            window,
            hot,
            waiting,
            index,
            base,
        )));
    }

    let mut logs = Vec::new();
    let mut stuck = 0;
    let grace = window.end + Duration::from_secs(3);
    for task in tasks {
        match tokio::time::timeout_at(grace.into(), task).await {
            Ok(Ok(log)) => logs.push(log),
            Ok(Err(e)) => {
                let mut log = ClientLog::default();
                log.error(format!("client task failed: {e}"));
                logs.push(log);
            }
            Err(_) => stuck += 1,
        }
    }
    let driver_cpu_s = cpu_start
        .zip(crate::cpu::own_cpu_seconds())
        .map(|(start, end)| (end - start).max(0.0));
    let now = Instant::now();
    let mut censored: f64 = 0.0;
    for since in waiting.iter() {
        let since = since.load(Ordering::Relaxed);
        if since != 0 {
            let started = base + Duration::from_nanos(since);
            censored = censored.max(stats::ms(
                now.min(window.end).saturating_duration_since(started),
            ));
        }
    }

    let mut report = Report {
        peer: spec.peer.clone(),
        library,
        settings,
        clients: spec.clients,
        window_s: spec.duration_ms as f64 / 1000.0,
        stuck,
        driver_cpu_s,
        ..Report::default()
    };
    let (mut acquire, mut cycle) = (Vec::new(), Vec::new());
    for log in logs {
        acquire.extend(log.acquire);
        cycle.extend(log.cycle);
        report.cycles += log.cycles;
        report.grants_total += log.grants_total;
        report.per_client_grants.push(log.grants_in_window);
        report.timeouts += log.timeouts;
        report.errors += log.errors;
        report.max_wait_ms = report.max_wait_ms.max(log.max_wait);
        if report.error_sample.is_none() {
            report.error_sample = log.error_sample;
        }
    }
    report.max_wait_ms = report.max_wait_ms.max(censored);
    report.acquire_ms = stats::percentiles(&mut acquire);
    report.cycle_ms = stats::percentiles(&mut cycle);
    if spec.keys == Keys::Hot {
        let summary = hot.summary(&window);
        report.handoff_ms = Some(summary.handoff_ms);
        report.handoff_other_ms = Some(summary.handoff_other_ms);
        report.longest_gap_ms = Some(summary.longest_gap_ms);
        report.overlaps = summary.overlaps;
    }
    // Cannot fail: plain numbers and strings.
    println!(
        "{}",
        serde_json::to_string(&report).expect("report serializes")
    );
    std::process::exit(0);
}

#[allow(clippy::too_many_arguments)]
async fn client_loop<C: Client>(
    mut client: C,
    resource: String,
    ttl_ms: u64,
    window: Window,
    hot: Option<Arc<HotTracker>>,
    waiting: Arc<Vec<AtomicU64>>,
    index: usize,
    base: Instant,
) -> ClientLog {
    let mut log = ClientLog::default();
    while Instant::now() < window.end {
        let began = Instant::now();
        waiting[index].store((began - base).as_nanos().max(1) as u64, Ordering::Relaxed);
        let outcome = client.acquire(&resource, ttl_ms, window.end).await;
        let granted_at = Instant::now();
        waiting[index].store(0, Ordering::Relaxed);
        let waited = stats::ms(granted_at - began);
        // Waits that overlap the window, cut at its end.
        if granted_at >= window.start && began < window.end {
            log.max_wait = log
                .max_wait
                .max(stats::ms(granted_at.min(window.end) - began));
        }
        match outcome {
            Acquired::Granted(held) => {
                log.grants_total += 1;
                if let Some(hot) = &hot {
                    hot.granted(granted_at, &window, index);
                }
                let in_window = window.contains(granted_at);
                if in_window {
                    log.grants_in_window += 1;
                    log.acquire.push(waited);
                }
                if let Some(hot) = &hot {
                    hot.releasing(Instant::now(), index);
                }
                let released = client.release(held).await;
                let done = Instant::now();
                match released {
                    Ok(()) if window.contains(done) => {
                        log.cycles += 1;
                        log.cycle.push(stats::ms(done - began));
                    }
                    Ok(()) => {}
                    Err(e) => log.error(format!("release: {e}")),
                }
            }
            // The deadline is the window's end: this client is done.
            Acquired::TimedOut => {
                log.timeouts += 1;
                break;
            }
            Acquired::Failed(e) => {
                log.error(e);
                // A library that fails at once (a master down) must not spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    log
}
