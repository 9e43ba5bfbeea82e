//! W10, a fleet of idle agents: what each agent that serves nobody costs
//! the masters it shares with the others, as a sidecar fleet multiplies
//! it. For each fleet size N, N agent processes (the release build, the
//! default config but for delayed restart, off as in every agent of this
//! benchmark; the leak scan at its default interval, the fleet's) run over
//! the same masters and serve nothing; over a window the masters' CPU
//! (`/proc/PID/stat`, user + system), their commands (`INFO stats`'s
//! `total_commands_processed`), connections (`INFO clients`), keys
//! (`DBSIZE`) and `SCAN` calls (`INFO commandstats`: the leak scans, one
//! fleet's) are read, and divided by N. Then
//! one client's acquire + release cycle through the fleet's first agent,
//! beside the other N - 1.
//!
//! The per-agent figures are the fleet's less the masters' own with no
//! agent at all (read first), so what an idle `redis-server` costs is not
//! charged to the agents; the slope of the masters' CPU over N and its
//! projection to 10,000 agents come from the rows.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::cluster::{Agent, AgentRetry, Masters};
use crate::cpu;
use crate::idle;

/// Fleet sizes of a full run, and of the smoke run.
pub const SIZES: [usize; 3] = [50, 200, 500];
pub const SMOKE_SIZES: [usize; 1] = [5];
/// The fleet size the report projects to.
pub const PROJECTED: usize = 10_000;
/// The shortest window of a full run: an idle agent's probe interval
/// (`health.idle_interval`, 60 s by default), so every agent of a fleet
/// probes about once in it, at a time of its own.
pub const MIN_WINDOW: Duration = Duration::from_secs(60);
/// Agents started at once.
const STARTING_AT_ONCE: usize = 25;
/// Left to the lone agent after its start, and to a smoke run's fleet,
/// before the window: every agent's first probes, script loads and
/// connections are behind it.
pub const SETTLE: Duration = Duration::from_secs(3);
/// Left to a full run's fleet after its last agent started, before the
/// window: an agent's start is not what it costs while idle. It probes
/// every master within a few seconds of its start, and reads the fleet's
/// leak report in calls of its own until it has seen the scanner's (at
/// its start, and one or two `health.idle_interval`s of 60 s later); from
/// then on it sends one call per master per interval, its probe's.
pub const SETTLE_PAST_START: Duration = Duration::from_secs(135);

/// The masters over one window.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// Agents running (0: the masters alone).
    pub agents: usize,
    pub seconds: f64,
    /// CPU of each master, microseconds per second.
    pub master_cpu_us_per_s: Vec<f64>,
    /// Commands each master served per second.
    pub commands_per_s: Vec<f64>,
    /// Client connections on each master, less the one asking.
    pub connections: Vec<u64>,
    /// Keys on each master.
    pub keys: Vec<u64>,
    /// `SCAN` calls each master served in the window: the leak scans.
    pub scan_calls: Vec<u64>,
}

impl Window {
    fn mean(values: &[f64]) -> f64 {
        values.iter().sum::<f64>() / values.len().max(1) as f64
    }

    /// Mean over the masters of their CPU, µs/s.
    pub fn cpu_us_per_s(&self) -> f64 {
        Window::mean(&self.master_cpu_us_per_s)
    }

    pub fn commands(&self) -> f64 {
        Window::mean(&self.commands_per_s)
    }

    pub fn connections_mean(&self) -> f64 {
        Window::mean(
            &self
                .connections
                .iter()
                .map(|&c| c as f64)
                .collect::<Vec<_>>(),
        )
    }

    /// The most `SCAN` calls a master served in the window.
    pub fn scans_max(&self) -> u64 {
        self.scan_calls.iter().copied().max().unwrap_or(0)
    }

    pub fn keys_max(&self) -> u64 {
        self.keys.iter().copied().max().unwrap_or(0)
    }
}

/// One client's cycles (acquire + release) through an agent of the fleet.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub agents: usize,
    pub cycles: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// What W10 measured.
#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    /// The masters alone.
    pub baseline: Window,
    /// One per fleet size, in order.
    pub fleets: Vec<Window>,
    /// A lone agent's, then one per fleet size.
    pub latency: Vec<Latency>,
    /// Resident memory of one idle agent of the largest fleet, KiB.
    pub agent_rss_kib: Option<u64>,
    /// Why the next fleet size was not measured, when one was not: on a
    /// small machine the idle agents' own probing can leave a large
    /// fleet's last agents no room to start in time.
    pub stopped: Option<String>,
    /// The fleet's `leak_scan.interval` (`--leak-scan`, 30 s by default):
    /// one agent scans for all, the others read its report.
    pub leak_scan: Duration,
    /// When each fleet's window started and how long it lasted.
    pub timing: Timing,
}

impl Fleet {
    /// Master CPU per idle agent, µs/s, at `window`: the fleet's less the
    /// baseline, over its agents.
    pub fn per_agent_cpu(&self, window: &Window) -> f64 {
        (window.cpu_us_per_s() - self.baseline.cpu_us_per_s()) / window.agents.max(1) as f64
    }

    /// Least-squares slope of the masters' CPU (µs/s) over the fleet size,
    /// the baseline included: µs/s one more agent costs a master.
    pub fn slope(&self) -> f64 {
        let points: Vec<(f64, f64)> = std::iter::once(&self.baseline)
            .chain(&self.fleets)
            .map(|w| (w.agents as f64, w.cpu_us_per_s()))
            .collect();
        let n = points.len() as f64;
        let (sx, sy) = points
            .iter()
            .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
        let (mx, my) = (sx / n, sy / n);
        let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
            (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
        });
        if den == 0.0 {
            0.0
        } else {
            num / den
        }
    }
}

/// Reads the masters over `window`, with `agents` running.
fn read_window(masters: &Masters, agents: usize, window: Duration) -> anyhow::Result<Window> {
    let pids = masters.pids();
    let cpu_before: Vec<f64> = pids
        .iter()
        .map(|&pid| cpu::cpu_seconds(pid).context("a master's CPU"))
        .collect::<anyhow::Result<_>>()?;
    let commands_before = masters.total_commands()?;
    let scans_before = masters.scan_calls_each()?;
    let started = Instant::now();
    std::thread::sleep(window);
    let cpu_after: Vec<f64> = pids
        .iter()
        .map(|&pid| cpu::cpu_seconds(pid).context("a master's CPU"))
        .collect::<anyhow::Result<_>>()?;
    let commands_after = masters.total_commands()?;
    let scans_after = masters.scan_calls_each()?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Window {
        agents,
        seconds,
        master_cpu_us_per_s: cpu_before
            .iter()
            .zip(&cpu_after)
            .map(|(b, a)| (a - b).max(0.0) * 1e6 / seconds)
            .collect(),
        commands_per_s: commands_before
            .iter()
            .zip(&commands_after)
            // The window's own two INFO calls are not the agents'.
            .map(|(b, a)| a.saturating_sub(*b + 1) as f64 / seconds)
            .collect(),
        connections: masters
            .clients_each()?
            .into_iter()
            .map(|c| c.saturating_sub(1))
            .collect(),
        keys: masters.dbsize_each()?,
        scan_calls: scans_before
            .iter()
            .zip(&scans_after)
            .map(|(b, a)| a.saturating_sub(*b))
            .collect(),
    })
}

/// `n` agents over `masters` with `retry`, started [`STARTING_AT_ONCE`]
/// at a time.
fn start_fleet(
    bin: &Path,
    dir: &Path,
    masters: &Masters,
    retry: AgentRetry,
    n: usize,
    leak_scan: Duration,
) -> anyhow::Result<Vec<Agent>> {
    let mut fleet = Vec::with_capacity(n);
    for chunk_start in (0..n).step_by(STARTING_AT_ONCE) {
        let chunk: Vec<usize> = (chunk_start..n.min(chunk_start + STARTING_AT_ONCE)).collect();
        let started: Vec<anyhow::Result<Agent>> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&i| {
                    scope.spawn(move || {
                        // Agents started at once may be given the same free
                        // metrics port; the one that loses exits, and goes
                        // again on another.
                        let start = || {
                            Agent::start_scanning(
                                bin,
                                dir,
                                &format!("fleet-{i}"),
                                masters,
                                retry,
                                leak_scan,
                            )
                        };
                        start().or_else(|_| start()).or_else(|_| start())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a starter panicked")))
                })
                .collect()
        });
        for agent in started {
            fleet.push(agent.with_context(|| format!("agent {} of {n}", fleet.len() + 1))?);
        }
    }
    Ok(fleet)
}

/// One client's acquire + release cycles through `agent` for `window`.
fn cycles(agent: &Agent, agents: usize, window: Duration) -> anyhow::Result<Latency> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = redlock_client::Client::new(&agent.socket);
    let options = redlock_client::AcquireOptions::new();
    let mut took = Vec::new();
    let until = Instant::now() + window;
    runtime.block_on(async {
        while Instant::now() < until {
            let start = Instant::now();
            let grant = client.acquire("w10", &options).await?;
            client.release("w10", &grant.token).await?;
            took.push(start.elapsed().as_secs_f64() * 1e3);
        }
        Ok::<_, redlock_client::Error>(())
    })?;
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    anyhow::ensure!(!took.is_empty(), "no cycle in {window:?}");
    Ok(Latency {
        agents,
        cycles: took.len(),
        p50_ms: at(0.5),
        p99_ms: at(0.99),
    })
}

/// When a fleet's window starts, after its last agent started, and how
/// long it lasts.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Timing {
    pub settle: Duration,
    pub window: Duration,
}

/// W10 over `masters` (no other agent on them), each agent with `retry`,
/// for each of `sizes`.
///
/// # Errors
/// When an agent does not start or a master cannot be read.
pub fn measure(
    bin: &Path,
    dir: &Path,
    masters: &Masters,
    retry: AgentRetry,
    sizes: &[usize],
    timing: Timing,
    leak_scan: Duration,
) -> anyhow::Result<Fleet> {
    let Timing { settle, window } = timing;
    let baseline = read_window(masters, 0, window)?;
    let mut latency = Vec::new();
    {
        let lone = start_fleet(bin, dir, masters, retry, 1, leak_scan)?;
        std::thread::sleep(SETTLE);
        latency.push(cycles(&lone[0], 1, window)?);
    }
    let mut fleets = Vec::new();
    let mut agent_rss_kib = None;
    let mut stopped = None;
    for &n in sizes {
        let fleet = match start_fleet(bin, dir, masters, retry, n, leak_scan) {
            Ok(fleet) => fleet,
            Err(e) if !fleets.is_empty() => {
                eprintln!(
                    "W10 {n} idle agents: not measured: {}",
                    format!("{e:#}").lines().next().unwrap_or_default()
                );
                stopped = Some(format!("{n} agents: {e:#}"));
                break;
            }
            Err(e) => return Err(e),
        };
        std::thread::sleep(settle);
        fleets.push(read_window(masters, n, window)?);
        latency.push(cycles(&fleet[0], n, window)?);
        agent_rss_kib = fleet.last().and_then(Agent::pid).and_then(idle::rss_kib);
        eprintln!(
            "W10 {n} idle agents: masters {:.0} µs/s of CPU each ({:.1} per agent), {:.0} commands/s, {:.1} connections per agent",
            fleets.last().map_or(0.0, Window::cpu_us_per_s),
            fleets.last().map_or(0.0, |w| (w.cpu_us_per_s() - baseline.cpu_us_per_s()) / n as f64),
            fleets.last().map_or(0.0, Window::commands),
            fleets.last().map_or(0.0, |w| w.connections_mean() / n as f64),
        );
    }
    Ok(Fleet {
        baseline,
        fleets,
        latency,
        agent_rss_kib,
        stopped,
        leak_scan,
        timing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(agents: usize, cpu: f64) -> Window {
        Window {
            agents,
            seconds: 1.0,
            master_cpu_us_per_s: vec![cpu, cpu],
            commands_per_s: vec![0.0, 0.0],
            connections: vec![0, 0],
            keys: vec![1, 1],
            scan_calls: vec![0, 0],
        }
    }

    /// The masters' own cost is the baseline, not the agents': per agent
    /// is the fleet's less it, over N; the slope runs through every row.
    #[test]
    fn per_agent_figures_leave_out_the_masters_own() {
        let fleet = Fleet {
            baseline: window(0, 2_000.0),
            fleets: vec![window(50, 22_000.0), window(200, 82_000.0)],
            latency: Vec::new(),
            agent_rss_kib: None,
            stopped: None,
            leak_scan: Duration::from_secs(30),
            timing: Timing {
                settle: SETTLE_PAST_START,
                window: MIN_WINDOW,
            },
        };
        assert_eq!(fleet.per_agent_cpu(&fleet.fleets[0]), 400.0);
        assert_eq!(fleet.per_agent_cpu(&fleet.fleets[1]), 400.0);
        assert!((fleet.slope() - 400.0).abs() < 1e-9, "{}", fleet.slope());
    }
}
