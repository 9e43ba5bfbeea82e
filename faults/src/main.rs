//! `faults`: the fault suite's command line.
//!
//! ```sh
//! cargo run -p faults -- short            # nemesis + control, then cluster mode: about 4 minutes
//! cargo run -p faults -- long --duration 30m --json soak.json
//! cargo run -p faults -- control          # only the control runs
//! cargo run -p faults -- cluster --duration 5m   # masters as Redis Clusters: nemesis + control
//! cargo run -p faults -- load             # 10,000 connections, 3,000 waiters
//! ```
//!
//! Exit codes: 0 when every run passed, 1 when a run found a problem (or
//! a control run without protection found none), 2 when the suite could not run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use faults::run::{self, Options, Report};

#[derive(Debug, Parser)]
#[command(name = "faults", about = "Fault suite for redlock-agent")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The short mode: a nemesis run, then the control runs, then the
    /// same in cluster mode.
    Short {
        /// Length of the nemesis run.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Length of the cluster mode's nemesis run.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        cluster_duration: Duration,
        #[arg(long)]
        seed: Option<u64>,
        /// Also write the reports as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The long mode: a soak of the nemesis run.
    Long {
        #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
        duration: Duration,
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Cluster mode: every master a Redis Cluster (3 primaries, a replica
    /// each); a nemesis run over shard restarts, lagged failovers, slot
    /// migrations and agent and client kills, then the cluster control runs
    /// (lagged failovers of a lock's shards in a majority of the clusters,
    /// marker check on, then off).
    Cluster {
        #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
        duration: Duration,
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Only the control runs (a majority restarted with delayed restart on,
    /// then off; a majority flushed with the marker check on, then off; a
    /// majority made to evict with the eviction check on, then off; agents
    /// with skewed clocks with the fence write-back on, then off; then the
    /// semaphore's restart pair, the election's flush pair, the terms
    /// without the write-back, and the multi-resource and read-write pairs).
    Control {
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Connections and waiters at scale, with the agent's RSS.
    Load {
        #[arg(long, default_value_t = 10_000)]
        connections: usize,
        #[arg(long, default_value_t = 3_000)]
        waiters: usize,
    },
    /// A client process: one hold, events on stdout (used by the suite).
    #[command(hide = true)]
    HoldClient {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        resource: String,
        #[arg(long)]
        ttl_ms: u64,
        #[arg(long)]
        wait_ms: u64,
        #[arg(long)]
        hold_ms: u64,
        #[arg(long)]
        owner: String,
        /// The fenced store's URL: write to it once, with the fence.
        #[arg(long)]
        store: Option<String>,
    },
    /// Kleppmann's client: acquire with a fence, wait for a line on
    /// stdin, write to a fenced store (used by the fencing examples).
    #[command(hide = true)]
    FencedWriter {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        resource: String,
        #[arg(long)]
        ttl_ms: u64,
        /// The fenced store's URL.
        #[arg(long)]
        store: String,
        #[arg(long)]
        data: String,
    },
    /// The command run under `redlock-agent lock` (used by the suite).
    #[command(hide = true)]
    CsChild {
        #[arg(long)]
        ms: u64,
        /// The fenced store's URL: write to it once with `REDLOCK_FENCE`.
        #[arg(long, requires = "resource")]
        store: Option<String>,
        /// The resource whose record the write goes to.
        #[arg(long)]
        resource: Option<String>,
    },
}

fn seed(given: Option<u64>) -> u64 {
    given.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    })
}

fn runtime() -> tokio::runtime::Runtime {
    // Cannot fail short of the OS refusing threads at start.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("faults"));
    // The runs start agents; the client processes the suite spawns do not.
    let runs_agents = !matches!(
        cli.command,
        Cmd::HoldClient { .. } | Cmd::FencedWriter { .. } | Cmd::CsChild { .. }
    );
    if runs_agents {
        if let Err(e) = faults::cluster::build_agent_if_stale() {
            eprintln!("faults: {e}");
            return ExitCode::from(2);
        }
    }
    match cli.command {
        Cmd::HoldClient {
            socket,
            resource,
            ttl_ms,
            wait_ms,
            hold_ms,
            owner,
            store,
        } => {
            // Cannot fail short of the OS refusing an epoll fd at start.
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("start the tokio runtime")
                .block_on(faults::workload::run_hold_client(
                    socket, resource, ttl_ms, wait_ms, hold_ms, owner, store,
                ));
            ExitCode::SUCCESS
        }
        Cmd::FencedWriter {
            socket,
            resource,
            ttl_ms,
            store,
            data,
        } => {
            // Cannot fail short of the OS refusing an epoll fd at start.
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("start the tokio runtime")
                .block_on(faults::store::run_fenced_writer(
                    socket, resource, ttl_ms, store, data,
                ));
            ExitCode::SUCCESS
        }
        Cmd::CsChild {
            ms,
            store,
            resource,
        } => {
            faults::workload::run_cs_child(ms, store.zip(resource));
            ExitCode::SUCCESS
        }
        Cmd::Short {
            duration,
            cluster_duration,
            seed: s,
            json,
        } => {
            let seed = seed(s);
            runtime().block_on(async {
                let mut reports = Vec::new();
                let nemesis = Options::nemesis(duration, seed, me.clone());
                let mut outcome = match run::nemesis(&nemesis).await {
                    Ok(r) => {
                        println!("{r}\n");
                        reports.push(r);
                        control(seed, &me, &mut reports).await
                    }
                    Err(e) => Err(e),
                };
                if outcome.is_ok() {
                    outcome = run::cluster_mode(cluster_duration, seed, &me, &mut reports).await;
                }
                finish(outcome, &reports, json)
            })
        }
        Cmd::Cluster {
            duration,
            seed: s,
            json,
        } => {
            let seed = seed(s);
            runtime().block_on(async {
                let mut reports = Vec::new();
                let outcome = run::cluster_mode(duration, seed, &me, &mut reports).await;
                finish(outcome, &reports, json)
            })
        }
        Cmd::Long {
            duration,
            seed: s,
            json,
        } => {
            let seed = seed(s);
            runtime().block_on(async {
                let mut options = Options::nemesis(duration, seed, me.clone());
                options.name = "nemesis (long)".into();
                options.fault_ms = (1000, 5000);
                let mut reports = Vec::new();
                let outcome = run::nemesis(&options).await.map(|r| {
                    println!("{r}\n");
                    reports.push(r);
                });
                finish(outcome, &reports, json)
            })
        }
        Cmd::Control { seed: s } => {
            let seed = seed(s);
            runtime().block_on(async {
                let mut reports = Vec::new();
                let outcome = control(seed, &me, &mut reports).await;
                finish(outcome, &reports, None)
            })
        }
        Cmd::Load {
            connections,
            waiters,
        } => runtime().block_on(async {
            match faults::load::run(&faults::load::LoadOptions {
                connections,
                waiters,
            })
            .await
            {
                Ok(report) => {
                    println!("{report}");
                    if report.problems().is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("faults load: {e}");
                    ExitCode::from(2)
                }
            }
        }),
    }
}

/// Every control run, printed; those without protection must find violations.
async fn control(seed: u64, me: &std::path::Path, reports: &mut Vec<Report>) -> Result<(), String> {
    for (options, rounds) in run::control_cases(seed, me) {
        let report = run::control(&options, rounds).await?;
        println!("{report}\n");
        reports.push(report);
    }
    Ok(())
}

fn finish(outcome: Result<(), String>, reports: &[Report], json: Option<PathBuf>) -> ExitCode {
    if let Some(path) = json {
        match serde_json::to_vec_pretty(reports) {
            Ok(bytes) => {
                if let Err(e) = std::fs::write(&path, bytes) {
                    eprintln!("faults: cannot write {}: {e}", path.display());
                }
            }
            Err(e) => eprintln!("faults: cannot serialize the reports: {e}"),
        }
    }
    if let Err(e) = outcome {
        eprintln!("faults: {e}");
        return ExitCode::from(2);
    }
    let verdicts = faults::run::verdicts(reports);
    for v in &verdicts {
        println!("{v}");
    }
    if verdicts.iter().all(|v| v.starts_with("PASS")) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
