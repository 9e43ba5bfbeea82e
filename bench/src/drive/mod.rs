//! The Rust drivers: one client loop shared by the agent, `rslock` and
//! `redlock` drivers, which differ only in how a client acquires and
//! releases ([`Client`]).
//!
//! Every client loops: acquire (waiting until the window's end at most),
//! release at once, again; or, when the spec sets a `rate`, again at its
//! next slot ([`Pace`]). A driver prints one [`Report`] as JSON, with
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
    missed_slots: u64,
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
    let count = clients.len();
    for (index, client) in clients.into_iter().enumerate() {
        let pace = spec
            .rate
            .and_then(|rate| Pace::new(rate, count, index, base));
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
            pace,
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
        target_rate: spec.rate.filter(|_| count > 0),
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
        report.missed_slots += log.missed_slots;
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
    mut pace: Option<Pace>,
) -> ClientLog {
    let mut log = ClientLog::default();
    while Instant::now() < window.end {
        if let Some(pace) = pace.as_mut() {
            let (start, missed) = pace.take(Instant::now());
            log.missed_slots += missed;
            tokio::time::sleep_until(start.into()).await;
            if Instant::now() >= window.end {
                break;
            }
        }
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

/// One client's share of a paced driver: a cycle every `period` (the
/// clients × the rate's interval), at slots offset by the client's index so
/// the driver's cycles spread evenly over each period. The slots are fixed
/// from the start: a client that wakes late does not drift.
#[derive(Debug, Clone, Copy)]
struct Pace {
    period: Duration,
    next: Instant,
}

impl Pace {
    /// `None` for a rate that is not a positive number.
    fn new(rate: f64, clients: usize, index: usize, base: Instant) -> Option<Pace> {
        if !(rate.is_finite() && rate > 0.0) || clients == 0 {
            return None;
        }
        // Whole nanoseconds, so the slots add up exactly.
        let period = (clients as f64 * 1e9 / rate).round().max(1.0) as u64;
        Some(Pace {
            period: Duration::from_nanos(period),
            next: base + Duration::from_nanos(period * index as u64 / clients as u64),
        })
    }

    /// When the cycle asked for `now` starts (the next slot, or at once
    /// when it is due), and the slots missed: those a whole period or more
    /// in the past, skipped rather than run back to back, so a client that
    /// fell behind does not burst past the rate to catch up.
    fn take(&mut self, now: Instant) -> (Instant, u64) {
        let mut missed = 0;
        let late = now.saturating_duration_since(self.next);
        if late >= self.period {
            missed = (late.as_nanos() / self.period.as_nanos()) as u64;
            self.next += Duration::from_nanos(self.period.as_nanos() as u64 * missed);
        }
        let start = self.next.max(now);
        self.next += self.period;
        (start, missed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1,000 cycles/s over 8 clients: each client's slot comes every 8 ms,
    /// client 2's a quarter of the way in; an early client waits for its
    /// slot, a client late by less than a period starts at once and keeps
    /// the schedule, one late by more skips the slots it missed.
    #[test]
    fn slots_are_kept_from_the_start_and_missed_ones_skipped() {
        let base = Instant::now();
        let ms = Duration::from_millis;
        let mut pace = Pace::new(1000.0, 8, 2, base).expect("a positive rate");
        assert_eq!(pace.period, ms(8));
        assert_eq!(pace.take(base), (base + ms(2), 0));
        assert_eq!(pace.take(base + ms(13)), (base + ms(13), 0));
        assert_eq!(pace.take(base + ms(14)), (base + ms(18), 0));
        // Due at 26 ms; at 45 ms the slots at 26 and 34 ms are past by a
        // whole period: skipped, and the one at 42 ms starts at once.
        assert_eq!(pace.take(base + ms(45)), (base + ms(45), 2));
        assert_eq!(pace.take(base + ms(46)), (base + ms(50), 0));
    }

    #[test]
    fn no_pace_without_a_positive_rate() {
        let base = Instant::now();
        assert!(Pace::new(0.0, 8, 0, base).is_none());
        assert!(Pace::new(f64::NAN, 8, 0, base).is_none());
        assert!(Pace::new(100.0, 0, 0, base).is_none());
    }
}
