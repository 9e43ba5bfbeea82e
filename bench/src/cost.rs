//! W14: what one acquire + release cycle costs the machine, and what the
//! agent adds as a sidecar.
//!
//! - *CPU per cycle*: W1 (distinct keys, as fast as each client can) for
//!   every peer of the run at 1, 8 and 64 clients, over 3, 5 and 7
//!   masters. The five are the run's own masters and agent; the three and
//!   the seven are started for it (and an agent over them), stopped after.
//!   The CPU of the masters' `redis-server` processes and of the agent from
//!   `/proc/PID/stat`, the driver's own from its `getrusage`, over the
//!   driver's warm-up and window (as W1's floor), divided by its grants.
//! - *Sidecar overhead*: the agent and rslock paced at [`PACED_RATE`]
//!   cycles/s over [`PACED_CLIENTS`] clients on the five masters, as
//!   Dapr's performance report measures its sidecar at a fixed request
//!   rate: the cycle's latency of each, and the agent's CPU and the most
//!   `VmRSS` it had during the run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::cluster::{Agent, MasterSet, Masters, AGENT_DEFAULT};
use crate::cpu::{self, Cpu};
use crate::idle;
use crate::options::{Options, MASTERS, TTL_MS};
use crate::peers::Peer;
use crate::spec::{Keys, Report, Spec};

/// The master counts of the CPU table.
pub const MASTER_COUNTS: [usize; 3] = [3, 5, 7];
/// The client counts of the CPU table.
pub const CLIENT_COUNTS: [usize; 3] = [1, 8, 64];
/// The sidecar overhead's fixed rate, cycles/s for the whole driver.
pub const PACED_RATE: f64 = 1000.0;
/// The clients the paced rate is split over: a cycle every 8 ms each.
pub const PACED_CLIENTS: usize = 8;
/// The peers the sidecar overhead compares: the agent against the library
/// in-process.
pub const PACED_PEERS: [Peer; 2] = [Peer::Agent, Peer::Rslock];

/// One peer's run of W14.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub masters: usize,
    pub clients: usize,
    pub peer: &'static str,
    /// The report, or why there is none ("n/a: ...").
    pub result: Result<Report, String>,
    /// The CPU of every master's process and of the agent (in the agent's
    /// runs) over the driver's run.
    pub cpu: Option<Cpu>,
    /// Paced runs through the agent: the most `VmRSS` the agent had,
    /// sampled every 100 ms during the run, KiB.
    pub agent_rss_kib: Option<u64>,
}

impl Cell {
    /// Its report, when it granted (what a per-cycle figure divides by).
    pub fn granted(&self) -> Option<&Report> {
        self.result
            .as_ref()
            .ok()
            .filter(|r| r.cycles > 0 && r.grants_total > 0)
    }

    /// Whether this is the agent's and it failed: no report, no cycle or
    /// errors (a peer's failures are its row, not the run's).
    fn agent_failed(&self) -> bool {
        self.peer == Peer::Agent.name()
            && self
                .result
                .as_ref()
                .map_or(true, |r| r.cycles == 0 || r.errors > 0 || r.stuck > 0)
    }
}

/// W14's result.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CostRuns {
    /// As fast as each client can, every master count × client count × peer.
    pub cells: Vec<Cell>,
    /// At [`PACED_RATE`], the five masters, [`PACED_PEERS`].
    pub paced: Vec<Cell>,
}

impl CostRuns {
    pub fn failed(&self) -> bool {
        self.cells.iter().chain(&self.paced).any(Cell::agent_failed)
    }

    pub fn paced(&self, peer: Peer) -> Option<&Cell> {
        self.paced.iter().find(|c| c.peer == peer.name())
    }
}

/// Runs W14; `masters` and `agent` are the run's own five and its agent.
///
/// # Errors
/// When a set of masters or its agent cannot be started; a failing driver
/// is a row.
pub fn measure(options: &Options, masters: &Masters, agent: &Agent) -> anyhow::Result<CostRuns> {
    let mut runs = CostRuns::default();
    let mut run_id = 0;
    for n in MASTER_COUNTS {
        // The three and the seven: started for their rows, stopped after.
        let started = if n == MASTERS {
            None
        } else {
            Some(start(options, n)?)
        };
        let (set, through) = match &started {
            Some((m, a)) => (m, a),
            None => (masters, agent),
        };
        for clients in CLIENT_COUNTS {
            for &peer in &options.peers {
                run_id += 1;
                let cell = run(options, set, through, peer, clients, None, run_id);
                runs.cells.push(cell);
            }
        }
        if n == MASTERS {
            for peer in PACED_PEERS {
                if !options.peers.contains(&peer) {
                    continue;
                }
                run_id += 1;
                let cell = run(
                    options,
                    set,
                    through,
                    peer,
                    PACED_CLIENTS,
                    Some(PACED_RATE),
                    run_id,
                );
                runs.paced.push(cell);
            }
        }
    }
    Ok(runs)
}

/// `n` fresh masters in a directory of their own and an agent over them.
fn start(options: &Options, n: usize) -> anyhow::Result<(Masters, Agent)> {
    let dir = options.scratch.join(format!("w14-{n}-masters"));
    std::fs::create_dir_all(&dir)?;
    let masters = Masters::start(n, &dir)?;
    eprintln!("W14: {n} masters: {}", masters.urls().join(" "));
    let name = format!("agent-w14-{n}");
    let agent = Agent::start(
        &options.agent_bin,
        &dir,
        &name,
        &masters,
        AGENT_DEFAULT,
        &[],
        "",
    )?;
    Ok((masters, agent))
}

/// One driver's run over `masters` (through `agent` for the agent), with
/// the CPU of each part and, paced through the agent, its most RSS.
fn run(
    options: &Options,
    masters: &Masters,
    agent: &Agent,
    peer: Peer,
    clients: usize,
    rate: Option<f64>,
    run_id: usize,
) -> Cell {
    let n = masters.len();
    let mut cell = Cell {
        masters: n,
        clients,
        peer: peer.name(),
        result: Err(String::new()),
        cpu: None,
        agent_rss_kib: None,
    };
    let label = match rate {
        Some(rate) => format!("W14 paced {rate:.0}/s, {clients} clients"),
        None => format!("W14 {n} masters, {clients} client(s)"),
    };
    eprint!("{label:<40} {:<14} ", peer.name());
    if let Some(reason) = options.drivers.unavailable(peer) {
        eprintln!("n/a: {reason}");
        cell.result = Err(reason);
        return cell;
    }
    let spec = Spec {
        peer: peer.name().to_string(),
        masters: masters.urls(),
        socket: Some(agent.socket.display().to_string()),
        keys: Keys::Distinct,
        clients,
        warmup_ms: options.warmup.as_millis() as u64,
        duration_ms: options.duration.as_millis() as u64,
        ttl_ms: TTL_MS,
        resource_prefix: format!("bench{}-w14-{run_id}", std::process::id()),
        tuned: false,
        fence: false,
        floor: false,
        python_client: None,
        rate,
    };
    let processes = masters.processes().unwrap_or_default();
    let agent_pid = (peer == Peer::Agent).then(|| agent.pid()).flatten();
    let before = cpu::sample(&processes, agent_pid);
    // Generous: a stuck driver is killed after this and reported.
    let timeout = options.warmup + options.duration + Duration::from_secs(30);
    let drive = || options.drivers.run(peer, &spec, timeout, None);
    let (result, rss) = match (rate, agent_pid) {
        (Some(_), Some(pid)) => while_sampling_rss(pid, drive),
        _ => (drive(), None),
    };
    cell.cpu = cpu::between(&processes, &before, &cpu::sample(&processes, agent_pid));
    cell.agent_rss_kib = rss;
    match &result {
        Ok(r) => eprintln!(
            "{:>9.0} cycles/s  cycle p50 {:.2} ms  errors {}{}",
            r.cycles as f64 / r.window_s,
            r.cycle_ms.p50,
            r.errors,
            if r.missed_slots > 0 {
                format!("  missed slots {}", r.missed_slots)
            } else {
                String::new()
            }
        ),
        Err(e) => eprintln!("FAILED: {}", e.lines().next().unwrap_or_default()),
    }
    cell.result = result;
    cell
}

/// Runs `run` while a thread reads `pid`'s `VmRSS` every 100 ms; its
/// result and the most RSS seen, KiB.
fn while_sampling_rss<T>(pid: u32, run: impl FnOnce() -> T) -> (T, Option<u64>) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut most: Option<u64> = None;
            while !stop.load(Ordering::Relaxed) {
                if let Some(kib) = idle::rss_kib(pid) {
                    most = Some(most.map_or(kib, |m| m.max(kib)));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            most
        });
        let result = run();
        stop.store(true, Ordering::Relaxed);
        (result, sampler.join().unwrap_or(None))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(peer: Peer, result: Result<Report, String>) -> Cell {
        Cell {
            masters: 3,
            clients: 1,
            peer: peer.name(),
            result,
            cpu: None,
            agent_rss_kib: None,
        }
    }

    fn report(cycles: u64, errors: u64) -> Result<Report, String> {
        Ok(Report {
            cycles,
            grants_total: cycles,
            errors,
            ..Report::default()
        })
    }

    /// The agent's failures fail the run, in either table; a peer's are
    /// only its row.
    #[test]
    fn only_the_agent_fails_the_run() {
        let peer_down = CostRuns {
            cells: vec![
                cell(Peer::Agent, report(10, 0)),
                cell(Peer::Rslock, Err("cannot start".into())),
                cell(Peer::Pottery, report(0, 3)),
            ],
            paced: vec![cell(Peer::Agent, report(10, 0))],
        };
        assert!(!peer_down.failed());
        for bad in [report(10, 1), report(0, 0), Err("no report".into())] {
            let runs = CostRuns {
                paced: vec![cell(Peer::Agent, bad)],
                ..peer_down.clone()
            };
            assert!(runs.failed());
        }
    }
}
