//! The run: start the masters and the agent, run every workload for every
//! peer (the agent first in each), inject the faults, measure the agent's
//! memory with idle connections and the masters' own limit, and hand the
//! results to [`crate::report`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::cluster::{
    Agent, Clusters, MasterSet, Masters, AGENT_DEFAULT, AGENT_TUNED, MARKER_SWITCH,
};
use crate::cost::{self, CostRuns};
use crate::cpu::{self, Cpu};
use crate::fleet::{self, Fleet};
use crate::idle::{self, Idle};
use crate::limit::{self, Limit};
use crate::modes::{self, Modes};
use crate::multi::{self, Multi};
use crate::peers::Peer;
use crate::primitives::{self, Primitives};
use crate::spec::{Keys, Report, Spec};
use crate::traces::{self, Tracing};

pub use crate::options::{Options, MASTERS, TTL_MS};

/// Primaries of each of W9's clusters.
pub const SHARDS: usize = 3;
/// The master the degraded workload kills or freezes (r5).
pub const VICTIM: usize = MASTERS - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    Killed,
    Frozen,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "workload")]
pub enum Workload {
    Uncontended {
        clients: usize,
    },
    /// Part of W1, the agent only: the socket's floor. The same driver,
    /// clients and connections as the agent's W1 run, through the same
    /// agent, but each cycle is two `GET /healthz` (a constant answer, no
    /// master): what two round trips on the socket cost without the lock.
    Floor {
        clients: usize,
    },
    Hot {
        clients: usize,
        tuned: bool,
    },
    Degraded {
        fault: Fault,
        clients: usize,
    },
    /// W1 for the agent only, through an agent with the in-vote marker
    /// check on (as deployed) or off (its test-only switch: a plain
    /// `SET NX PX` vote, as before the check).
    MarkerCheck {
        clients: usize,
        check: bool,
    },
    /// W1 for the agent only, through the same agent, with `"fence": true`
    /// in every acquire (a fencing token minted by the quorum: a second
    /// round to the granting masters) or without.
    Fence {
        clients: usize,
        fence: bool,
    },
    /// W7, the way most users run: one client per process, each its own
    /// Python interpreter on its own resource; the agent through the
    /// standard-library client, pottery in-process. Agent and pottery only.
    Processes {
        clients: usize,
    },
    /// W9, W1 for the agent only: through the run's agent over the five
    /// single servers, or through an agent whose five masters are each a
    /// Redis Cluster of [`SHARDS`] primaries; the masters' CPU measured
    /// per process.
    Clustered {
        clients: usize,
        cluster: bool,
    },
}

impl Workload {
    pub fn describe(self) -> String {
        match self {
            Workload::Uncontended { clients } => format!("uncontended, {clients} client(s)"),
            Workload::Floor { clients } => {
                format!("W1 socket floor (2 healthz), {clients} client(s)")
            }
            Workload::Hot { clients, tuned } => {
                format!(
                    "hot key, {clients} clients, {}",
                    if tuned { "tuned" } else { "defaults" }
                )
            }
            Workload::Degraded { fault, clients } => {
                format!("degraded ({fault:?}), {clients} client(s)")
            }
            Workload::MarkerCheck { clients, check } => format!(
                "W5 marker check {}, {clients} client(s)",
                if check { "on" } else { "off" }
            ),
            Workload::Fence { clients, fence } => format!(
                "W6 {}, {clients} client(s)",
                if fence {
                    "fenced acquire"
                } else {
                    "plain acquire"
                }
            ),
            Workload::Processes { clients } => format!("W7 {clients} Python processes"),
            Workload::Clustered { clients, cluster } => format!(
                "W9 {}, {clients} client(s)",
                if cluster {
                    "masters as clusters"
                } else {
                    "masters as single servers"
                }
            ),
        }
    }

    /// Its id for `--only`.
    pub fn id(self) -> &'static str {
        match self {
            Workload::Uncontended { .. } | Workload::Floor { .. } => "w1",
            Workload::Hot { .. } => "w2",
            Workload::Degraded { .. } => "w3",
            Workload::MarkerCheck { .. } => "w5",
            Workload::Fence { .. } => "w6",
            Workload::Processes { .. } => "w7",
            Workload::Clustered { .. } => "w9",
        }
    }

    /// The peers it runs for, when not every one.
    fn only_for(self) -> Option<&'static [Peer]> {
        match self {
            Workload::Floor { .. }
            | Workload::MarkerCheck { .. }
            | Workload::Fence { .. }
            | Workload::Clustered { .. } => Some(&[Peer::Agent]),
            Workload::Processes { .. } => Some(&[Peer::Agent, Peer::Pottery]),
            _ => None,
        }
    }
}

/// The workload ids `--only` takes (w4 is the masters' limit, w8 the idle
/// connections, w10 the fleet of idle agents).
pub const WORKLOAD_IDS: [&str; 15] = [
    "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9", "w10", "w11", "w12", "w13", "w14", "w15",
];

/// W7's processes in a full run (in the smoke run: 4).
pub const PROCESSES: usize = 64;

/// W5's runs for `clients`, adjacent so they see the same machine: the
/// marker check off, then on.
fn marker_pair(clients: usize) -> [Workload; 2] {
    [false, true].map(|check| Workload::MarkerCheck { clients, check })
}

/// W6's runs for `clients`, adjacent so they see the same machine: plain
/// acquires, then fenced ones.
fn fence_pair(clients: usize) -> [Workload; 2] {
    [false, true].map(|fence| Workload::Fence { clients, fence })
}

/// W9's runs for `clients`, adjacent so they see the same machine: single
/// servers, then clusters.
fn cluster_pair(clients: usize) -> [Workload; 2] {
    [false, true].map(|cluster| Workload::Clustered { clients, cluster })
}

/// One peer's run of one workload.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub workload: Workload,
    pub peer: &'static str,
    /// The report, or why there is none ("n/a: ...").
    pub result: Result<Report, String>,
    /// Lock commands the masters executed during the run (warm-up
    /// included), when every master could be asked.
    pub commands: Option<u64>,
    /// W7 only: the most client connections the masters had open during
    /// the run (`INFO clients`, summed over the five, sampled every 100 ms)
    /// minus the same sum just before it (for the agent: before its own
    /// agent started, so the agent's connections count).
    #[serde(default)]
    pub master_connections: Option<u64>,
    /// W1 (with its floor) and W9: the CPU each redis-server process of
    /// the masters and the agent spent during the run (warm-up included,
    /// as `commands`); the agent's only in its own runs.
    #[serde(default)]
    pub cpu: Option<Cpu>,
}

impl Run {
    /// Its report, when the run granted in its window (at least one cycle
    /// and one grant): the runs a per-cycle or per-grant figure divides by.
    pub fn granted(&self) -> Option<&Report> {
        self.result
            .as_ref()
            .ok()
            .filter(|r| r.cycles > 0 && r.grants_total > 0)
    }

    pub fn commands_per_grant(&self) -> Option<f64> {
        let report = self.result.as_ref().ok()?;
        let commands = self.commands?;
        (report.grants_total > 0).then(|| commands as f64 / report.grants_total as f64)
    }
}

/// Everything a run measured.
#[derive(Debug, Default, Serialize)]
pub struct Results {
    pub runs: Vec<Run>,
    pub limit: Option<Result<Limit, String>>,
    /// W8, when it ran.
    pub idle: Option<Result<Idle, String>>,
    /// W10, when it ran.
    pub fleet: Option<Result<Fleet, String>>,
    /// W11, when it ran.
    pub primitives: Option<Result<Primitives, String>>,
    /// W12, when it ran.
    pub tracing: Option<Result<Tracing, String>>,
    /// W13, when it ran.
    pub multi: Option<Result<Multi, String>>,
    /// W15, when it ran.
    pub modes: Option<Result<Modes, String>>,
    /// W14, when it ran.
    pub cost: Option<Result<CostRuns, String>>,
    pub redis_version: String,
    pub agent_failed: bool,
}

impl Results {
    pub fn find(&self, workload: Workload, peer: Peer) -> Option<&Run> {
        self.runs
            .iter()
            .find(|r| r.workload == workload && r.peer == peer.name())
    }
}

/// The workloads of a full run, in order. The smoke run has its own short list.
pub fn workloads(smoke: bool) -> Vec<Workload> {
    if smoke {
        let mut list = vec![
            Workload::Uncontended { clients: 1 },
            Workload::Floor { clients: 1 },
            Workload::Uncontended { clients: 8 },
        ];
        list.extend(marker_pair(1));
        list.extend(fence_pair(1));
        list.push(Workload::Hot {
            clients: 8,
            tuned: false,
        });
        // No W9: fifteen cluster nodes and a fresh cluster's first sight
        // (every slot's marker swept three times) are no smoke test.
        list.push(Workload::Processes { clients: 4 });
        return list;
    }
    // Each floor right after the W1 runs it explains, on the same agent.
    let mut list = vec![
        Workload::Uncontended { clients: 1 },
        Workload::Floor { clients: 1 },
        Workload::Uncontended { clients: 64 },
        Workload::Floor { clients: 64 },
    ];
    list.extend(marker_pair(1));
    list.extend(marker_pair(64));
    list.extend(fence_pair(1));
    list.extend(fence_pair(64));
    for tuned in [false, true] {
        for clients in [16, 64] {
            list.push(Workload::Hot { clients, tuned });
        }
    }
    for fault in [Fault::Killed, Fault::Frozen] {
        list.push(Workload::Degraded { fault, clients: 1 });
    }
    list.push(Workload::Processes { clients: PROCESSES });
    list.extend(cluster_pair(1));
    list.extend(cluster_pair(64));
    list
}

/// Runs the whole plan.
///
/// # Errors
/// When the masters or the agent cannot be started; a failing peer is a row
/// in the table, not an error.
pub fn run(options: &Options) -> anyhow::Result<Results> {
    let mut masters = Masters::start(MASTERS, &options.scratch)?;
    let redis_version = masters.redis_version();
    eprintln!(
        "masters: {} (redis {redis_version})",
        masters.urls().join(" ")
    );
    let mut agent = Agent::start(
        &options.agent_bin,
        &options.scratch,
        "agent",
        &masters,
        AGENT_DEFAULT,
        &[],
        "",
    )?;
    let mut tuned_agent: Option<Agent> = None;
    // W5's agent with the marker check off, while W5 runs.
    let mut plain_agent: Option<Agent> = None;
    // W9's clusters and the agent over them, while W9 runs.
    let mut clusters: Option<Clusters> = None;
    let mut cluster_agent: Option<Agent> = None;
    let mut results = Results {
        runs: Vec::new(),
        limit: None,
        idle: None,
        fleet: None,
        primitives: None,
        tracing: None,
        multi: None,
        modes: None,
        cost: None,
        redis_version,
        agent_failed: false,
    };
    let mut run_id = 0;
    let wanted = |w: &str| options.only.is_empty() || options.only.iter().any(|o| o == w);
    for workload in workloads(options.smoke) {
        if !wanted(workload.id()) {
            continue;
        }
        let (keys, clients, tuned) = match workload {
            Workload::Uncontended { clients } | Workload::Floor { clients } => {
                (Keys::Distinct, clients, false)
            }
            Workload::Hot { clients, tuned } => (Keys::Hot, clients, tuned),
            Workload::Degraded { clients, .. } => (Keys::Distinct, clients, false),
            Workload::MarkerCheck { clients, .. } => (Keys::Distinct, clients, false),
            Workload::Fence { clients, .. } => (Keys::Distinct, clients, false),
            Workload::Processes { clients } => (Keys::Distinct, clients, false),
            Workload::Clustered { clients, .. } => (Keys::Distinct, clients, false),
        };
        let w9 = matches!(workload, Workload::Clustered { .. });
        let clustered = matches!(workload, Workload::Clustered { cluster: true, .. });
        if clustered && clusters.is_none() {
            let started = Clusters::start(MASTERS, SHARDS, &options.scratch)?;
            eprintln!("clusters: {MASTERS} of {} primaries each", started.shards());
            cluster_agent = Some(Agent::start(
                &options.agent_bin,
                &options.scratch,
                "agent-clusters",
                &started,
                AGENT_DEFAULT,
                &[],
                "",
            )?);
            clusters = Some(started);
        }
        let processes = matches!(workload, Workload::Processes { .. });
        let plain = matches!(workload, Workload::MarkerCheck { check: false, .. });
        if plain && plain_agent.is_none() {
            plain_agent = Some(Agent::start(
                &options.agent_bin,
                &options.scratch,
                "agent-no-marker-check",
                &masters,
                AGENT_DEFAULT,
                &[(MARKER_SWITCH, "1")],
                "",
            )?);
        }
        if tuned && tuned_agent.is_none() {
            tuned_agent = Some(Agent::start(
                &options.agent_bin,
                &options.scratch,
                "agent-tuned",
                &masters,
                AGENT_TUNED,
                &[],
                "",
            )?);
        }
        for &peer in &options.peers {
            if workload.only_for().is_some_and(|p| !p.contains(&peer)) {
                continue;
            }
            run_id += 1;
            let unavailable = if processes {
                options.drivers.processes_unavailable(peer)
            } else {
                options.drivers.unavailable(peer)
            };
            // W7: the masters' connections before the run, and for the
            // agent an agent of its own, started after that count.
            let baseline = if processes && unavailable.is_none() {
                masters.connected_clients()
            } else {
                None
            };
            let processes_agent = if processes && peer == Peer::Agent && unavailable.is_none() {
                Some(Agent::start(
                    &options.agent_bin,
                    &options.scratch,
                    "agent-processes",
                    &masters,
                    AGENT_DEFAULT,
                    &[],
                    "",
                )?)
            } else {
                None
            };
            let socket = if tuned {
                tuned_agent.as_ref()
            } else if plain {
                plain_agent.as_ref()
            } else if processes {
                processes_agent.as_ref()
            } else if clustered {
                cluster_agent.as_ref()
            } else {
                Some(&agent)
            }
            .map(|a| a.socket.display().to_string());
            let spec = Spec {
                peer: peer.name().to_string(),
                masters: masters.urls(),
                socket,
                keys,
                clients,
                warmup_ms: options.warmup.as_millis() as u64,
                duration_ms: options.duration.as_millis() as u64,
                ttl_ms: TTL_MS,
                resource_prefix: format!("bench{}-{run_id}", std::process::id()),
                tuned,
                fence: matches!(workload, Workload::Fence { fence: true, .. }),
                floor: matches!(workload, Workload::Floor { .. }),
                python_client: (processes && peer == Peer::Agent)
                    .then(|| options.drivers.python_client.display().to_string()),
                rate: None,
            };
            eprint!("{:<40} {:<14} ", workload.describe(), peer.name());
            if let Some(reason) = unavailable {
                eprintln!("n/a: {reason}");
                results.runs.push(Run {
                    workload,
                    peer: peer.name(),
                    result: Err(reason),
                    commands: None,
                    master_connections: None,
                    cpu: None,
                });
                continue;
            }
            let mut peak = None;
            // W9: the masters' processes (single servers or every shard's
            // primary) whose CPU this run measures, and the agent's.
            let counted: &dyn MasterSet = match &clusters {
                Some(c) if clustered => c,
                _ => &masters,
            };
            let (cpu_processes, agent_pid) = if w9 {
                let agent_pid = if clustered {
                    cluster_agent.as_ref().and_then(Agent::pid)
                } else {
                    agent.pid()
                };
                (counted.processes(), agent_pid)
            } else if matches!(
                workload,
                Workload::Uncontended { .. } | Workload::Floor { .. }
            ) {
                // W1 and its floor: the masters' CPU per grant, and the
                // agent's (the driver reports its own).
                let agent_pid = (peer == Peer::Agent).then(|| agent.pid()).flatten();
                (masters.processes(), agent_pid)
            } else {
                (None, None)
            };
            let cpu_before = cpu_processes.as_ref().map(|p| cpu::sample(p, agent_pid));
            let before = counted.lock_commands();
            // Generous: a stuck driver is killed after this and reported.
            let timeout = options.warmup + options.duration + Duration::from_secs(30);
            let mut result = match workload {
                // The fault strikes as the window opens, after a healthy
                // warm-up, while the client runs: as a master dies under a
                // running application. The window sees the moment it happens.
                Workload::Degraded { fault, .. } => {
                    let mut inject = || match fault {
                        Fault::Killed => masters.kill(VICTIM),
                        Fault::Frozen => masters.freeze(VICTIM),
                    };
                    let at = options.warmup;
                    options
                        .drivers
                        .run(peer, &spec, timeout, Some((at, &mut inject)))
                }
                Workload::Processes { .. } => {
                    let (result, most) = while_counting_connections(&masters, || {
                        options.drivers.run_processes(peer, &spec, timeout)
                    });
                    peak = most;
                    result
                }
                _ => options.drivers.run(peer, &spec, timeout, None),
            };
            drop(processes_agent);
            let counted: &dyn MasterSet = match &clusters {
                Some(c) if clustered => c,
                _ => &masters,
            };
            let after = counted.lock_commands();
            let cpu_used = cpu_processes
                .as_ref()
                .zip(cpu_before)
                .and_then(|(p, before)| cpu::between(p, &before, &cpu::sample(p, agent_pid)));
            if let Workload::Degraded { fault, .. } = workload {
                match fault {
                    Fault::Killed => masters.restart(VICTIM)?,
                    Fault::Frozen => masters.thaw(VICTIM),
                }
                for a in [Some(&mut agent), tuned_agent.as_mut(), plain_agent.as_mut()]
                    .into_iter()
                    .flatten()
                {
                    a.wait_usable(MASTERS, Duration::from_secs(15))?;
                }
            }
            if let Ok(report) = result.as_mut() {
                if matches!(workload, Workload::Floor { .. }) {
                    report.settings = "two GET /healthz per cycle, no lock".to_string();
                } else if peer == Peer::Agent {
                    let retry = if tuned { AGENT_TUNED } else { AGENT_DEFAULT };
                    report.settings = format!(
                        "{}: wait_ms to the window's end; woken by releases, else retry_delay {}ms + rand(0..{}ms)",
                        if tuned { "tuned" } else { "defaults" },
                        retry.delay_ms,
                        retry.jitter_ms
                    );
                }
            }
            match &result {
                Ok(r) => eprintln!(
                    "{:>9.0} cycles/s  acquire p50 {:.2} ms  errors {}{}",
                    r.cycles as f64 / r.window_s,
                    r.acquire_ms.p50,
                    r.errors,
                    if r.stuck > 0 {
                        format!("  stuck {}", r.stuck)
                    } else {
                        String::new()
                    }
                ),
                Err(e) => eprintln!("FAILED: {}", e.lines().next().unwrap_or_default()),
            }
            if peer == Peer::Agent && agent_run_failed(workload, &result) {
                results.agent_failed = true;
                if let Err(e) = &result {
                    eprintln!("{e}");
                }
            }
            let commands = before.zip(after).map(|(b, a)| a.saturating_sub(b));
            results.runs.push(Run {
                workload,
                peer: peer.name(),
                result,
                commands,
                master_connections: peak.zip(baseline).map(|(p, b)| p.saturating_sub(b)),
                cpu: cpu_used,
            });
        }
        if !tuned {
            tuned_agent = None;
        }
        if !matches!(workload, Workload::MarkerCheck { .. }) {
            plain_agent = None;
        }
        if !w9 {
            cluster_agent = None;
            clusters = None;
        }
    }
    drop(tuned_agent);
    drop(plain_agent);
    drop(cluster_agent);
    drop(clusters);
    if wanted("w8") && options.peers.contains(&Peer::Agent) {
        let connections = if options.smoke {
            idle::SMOKE_CONNECTIONS
        } else {
            idle::CONNECTIONS
        };
        eprint!(
            "{:<40} {:<14} ",
            format!("W8 {connections} idle connections"),
            "agent"
        );
        let measured = idle_run(options, &masters, connections);
        match &measured {
            Ok(i) => eprintln!(
                "RSS {:.1} MiB before, {:.1} MiB with {} open ({:.1} KiB each), {:.1} MiB after closing{}",
                i.rss_before_kib as f64 / 1024.0,
                i.rss_open_kib as f64 / 1024.0,
                i.answered,
                i.kib_per_connection(),
                i.rss_after_kib as f64 / 1024.0,
                if i.settled { "" } else { " (not settled)" }
            ),
            Err(e) => eprintln!("FAILED: {}", e.lines().next().unwrap_or_default()),
        }
        if measured
            .as_ref()
            .map_or(true, |i| i.answered < i.connections)
        {
            results.agent_failed = true;
        }
        results.idle = Some(measured);
    }
    // Through the run's agent, once the driver workloads are done with it.
    let timing = (options.warmup, options.duration);
    if wanted("w11") && options.peers.contains(&Peer::Agent) {
        let measured = primitives::measure(&agent.socket, options.smoke, timing.0, timing.1);
        let (measured, failed) = crate::told("W11", measured, primitives::Primitives::failed);
        results.agent_failed |= failed;
        results.primitives = Some(measured);
    }
    if wanted("w13") && options.peers.contains(&Peer::Agent) {
        let measured = multi::measure(&agent.socket, options.smoke, timing.0, timing.1);
        let (measured, failed) = crate::told("W13", measured, multi::Multi::failed);
        results.agent_failed |= failed;
        results.multi = Some(measured);
    }
    if wanted("w15") && options.peers.contains(&Peer::Agent) {
        let measured = modes::measure(&agent.socket, options.smoke, timing.0, timing.1);
        let (measured, failed) = crate::told("W15", measured, Modes::failed);
        results.agent_failed |= failed;
        results.modes = Some(measured);
    }
    // Only when asked for by name: W12's two more agents and twelve W1
    // runs; W14's 27 runs per peer and two more sets of masters.
    let asked = |w: &str| options.only.iter().any(|o| o == w);
    if asked("w12") && options.peers.contains(&Peer::Agent) {
        let measured = traces::measure(options, &masters).map_err(|e| format!("{e:#}"));
        if let Err(e) = &measured {
            eprintln!("W12 FAILED: {}", e.lines().next().unwrap_or_default());
            results.agent_failed = true;
        }
        results.tracing = Some(measured);
    }
    if asked("w14") {
        let measured = cost::measure(options, &masters, &agent);
        let (measured, failed) = crate::told("W14", measured, CostRuns::failed);
        results.agent_failed |= failed;
        results.cost = Some(measured);
    }
    if !options.smoke && wanted("w4") {
        eprintln!("limit: redis-benchmark on all {MASTERS} masters at once");
        results.limit = Some(
            limit::measure(
                &masters,
                options.duration,
                &limit::agent_script(&limit::BATCH),
            )
            .map_err(|e| format!("{e:#}")),
        );
    }
    agent.wait_usable(MASTERS, Duration::from_secs(5)).ok();
    drop(agent);
    // Last, with no other agent on the masters: their own cost is its baseline.
    if wanted("w10") && options.peers.contains(&Peer::Agent) {
        let sizes: &[usize] = if options.smoke {
            &fleet::SMOKE_SIZES
        } else {
            &fleet::SIZES
        };
        // An idle agent probes every `health.idle_interval` (30 s): a full
        // run's window spans one, so every agent's probe is in it, and
        // starts once the agents' start-up probes are behind them.
        let timing = if options.smoke {
            fleet::Timing {
                settle: fleet::SETTLE,
                window: options.duration,
            }
        } else {
            fleet::Timing {
                settle: fleet::SETTLE_PAST_START,
                window: options.duration.max(fleet::MIN_WINDOW),
            }
        };
        eprintln!(
            "W10: fleets of {sizes:?} idle agents, {:?} windows",
            timing.window
        );
        let measured = fleet::measure(
            &options.agent_bin,
            &options.scratch,
            &masters,
            AGENT_DEFAULT,
            sizes,
            timing,
            options.leak_scan,
        )
        .map_err(|e| format!("{e:#}"));
        if let Err(e) = &measured {
            eprintln!("W10 FAILED: {}", e.lines().next().unwrap_or_default());
            results.agent_failed = true;
        }
        results.fleet = Some(measured);
    }
    Ok(results)
}

/// Runs `run` while a thread samples the masters' connected clients every
/// 100 ms; its result and the most connections seen.
fn while_counting_connections<T>(masters: &Masters, run: impl FnOnce() -> T) -> (T, Option<u64>) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut most: Option<u64> = None;
            while !stop.load(Ordering::Relaxed) {
                if let Some(n) = masters.connected_clients() {
                    most = Some(most.map_or(n, |m| m.max(n)));
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

/// W8 through an agent of its own over the same masters, with room for
/// every connection (`socket.max_connections`, the per-uid share) and a
/// request timeout longer than the run, so none is closed for idling.
fn idle_run(options: &Options, masters: &Masters, connections: usize) -> Result<Idle, String> {
    let room = connections + 100;
    let agent = Agent::start(
        &options.agent_bin,
        &options.scratch,
        "agent-idle",
        masters,
        AGENT_DEFAULT,
        &[],
        &format!("max_connections: {room}, max_connections_per_uid: {room}, request_timeout: 300s"),
    )
    .map_err(|e| format!("{e:#}"))?;
    let pid = agent.pid().ok_or("the agent has no pid")?;
    idle::measure(pid, &agent.socket, connections).map_err(|e| format!("{e:#}"))
}

/// Whether the agent's own run failed: no report, errors, no progress, two
/// holders at once, or a client stuck. Degraded runs may see errors (the
/// fault is the point) but must make progress; so may W7's, whose 64
/// interpreters leave the agent and the masters little CPU on a small
/// machine (a vote past `node_timeout` fails), and its table shows them.
fn agent_run_failed(workload: Workload, result: &Result<Report, String>) -> bool {
    let Ok(r) = result else { return true };
    let errors_allowed = matches!(
        workload,
        Workload::Degraded { .. } | Workload::Processes { .. }
    );
    r.cycles == 0 || r.overlaps > 0 || r.stuck > 0 || (!errors_allowed && r.errors > 0)
}
