//! redlock-bench: the agent against the Redlock libraries an application
//! would otherwise embed, on the same five masters, in one run.
//!
//! Layout:
//! - `plan`: the run (masters, agents, every workload for every peer, faults)
//! - `options`: what the run was asked for, and the TTL and master count
//!   every workload shares
//! - `cluster`: the `redis-server` masters, W9's Redis Clusters, and the
//!   agent processes
//! - `cpu`: the CPU time of the masters' processes, the agent and a
//!   driver (W1, W9)
//! - `peers`: the peers and how each one's driver is started
//! - `spec`: the driver protocol (a JSON spec in, a JSON report out)
//! - `drive`: the Rust drivers (agent over its socket, `rslock`, `redlock`)
//! - `idle`: W8, the agent's memory with 10,000 idle connections
//! - `fleet`: W10, what each idle agent of a sidecar fleet costs the
//!   masters
//! - `primitives`: W11, a permit cycle and a leadership hand-off beside a
//!   lock cycle and a lock hand-off
//! - `traces`: W12, the agent's CPU per W1 cycle with tracing off and with
//!   every request traced to a local OTLP receiver
//! - `multi`: W13, a lock on 3 resources at once beside 3 single locks
//! - `modes`: W15, a reader's and a writer's cycle beside a lock's, and
//!   1, 8 and 64 readers on one resource
//! - `cost`: W14, the CPU per cycle of the masters, the agent and the
//!   driver over 3, 5 and 7 masters, and the agent's overhead as a sidecar
//!   at a fixed rate
//! - `stats`: percentiles, fairness, the hot-key tracker
//! - `limit`: the masters' own limit with `redis-benchmark`
//! - `profile`: `perf` on the agent under the 64-client uncontended load,
//!   and its flame graph (`inferno`)
//! - `report`: the Markdown tables
//!
//! `bench/run.sh` installs the peers and runs `redlock-bench run`; see
//! `bench/README.md`.

mod cluster;
mod cost;
mod cpu;
mod drive;
mod fleet;
mod idle;
mod limit;
mod modes;
mod multi;
mod options;
mod peers;
mod plan;
mod primitives;
mod profile;
mod report;
mod spec;
mod stats;
mod traces;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

use crate::peers::{Drivers, Peer};
use crate::spec::Spec;

#[derive(Parser)]
#[command(about = "Benchmark redlock-agent against Redlock libraries on the same masters")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the benchmark (or its smoke mode) and write the report.
    Run(Box<RunArgs>),
    /// Internal: run one Rust driver with a JSON spec; prints a JSON report.
    Drive { spec: String },
}

#[derive(Parser)]
struct RunArgs {
    /// A few seconds, the agent only; exits non-zero if its driver fails.
    #[arg(long)]
    smoke: bool,
    /// Measured window of each run.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "8s")]
    duration: Duration,
    /// Unmeasured warm-up before each window.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    warmup: Duration,
    /// Peers to run, comma-separated (default: all; --smoke: agent).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Workloads to run, comma-separated: w1 .. w15 (default: all but w12
    /// and w14, which run only when named: tracing's cost, the cost per
    /// cycle over 3, 5 and 7 masters and at a fixed rate). w5 (the
    /// marker check's cost), w6 (a fenced acquire's), w8 (idle
    /// connections), w9 (masters as Redis Clusters), w10 (fleets of idle
    /// agents), w11 (semaphores and elections beside locks), w13 (a lock
    /// on 3 resources beside 3 single locks) and w15 (shared and
    /// exclusive locks beside a lock, readers on one resource) run for the
    /// agent only, w7 (a Python process per client) for the agent and
    /// pottery.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The release build of the agent.
    #[arg(long)]
    agent_bin: PathBuf,
    /// bench/node/driver.mjs, if node-redlock is installed.
    #[arg(long)]
    node_driver: Option<PathBuf>,
    /// The venv's python, if pottery is installed.
    #[arg(long, requires = "python_driver")]
    python: Option<PathBuf>,
    /// bench/python/driver.py.
    #[arg(long)]
    python_driver: Option<PathBuf>,
    /// W7's driver (a process per client).
    #[arg(long, default_value = "bench/python/processes.py")]
    processes_driver: PathBuf,
    /// The directory holding the standard-library Python client's package
    /// (`redlock_client/`) W7's agent processes import.
    #[arg(long, default_value = "clients/python/src")]
    python_client: PathBuf,
    /// Where the report goes (scratch files go to OUT/scratch).
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// W10's fleets' `leak_scan.interval`: one agent scans, the others
    /// read its report (an idle one once per `health.idle_interval`).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    leak_scan: Duration,
    /// Profile the agent with `perf` under workload 1 at 64 clients instead,
    /// and draw its flame graph (results/flamegraph-w1-64-DATE.svg).
    #[arg(long)]
    profile: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Drive { spec } => drive(&spec).map(|()| ExitCode::SUCCESS),
        Cmd::Run(args) => run(*args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("redlock-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn drive(spec: &str) -> anyhow::Result<()> {
    let spec: Spec = serde_json::from_str(spec).context("bad spec")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match spec.peer.as_str() {
            "agent" => {
                let socket = spec
                    .socket
                    .clone()
                    .context("the agent driver needs a socket")?;
                let mut clients = Vec::with_capacity(spec.clients);
                for index in 0..spec.clients {
                    clients.push(
                        drive::agent::AgentClient::connect(&socket, index)
                            .await?
                            .fenced(spec.fence)
                            .floor(spec.floor),
                    );
                }
                let library = format!(
                    "redlock-agent, through redlock-client: HTTP/1.1 keep-alive on its Unix socket (hyper {})",
                    env!("BENCH_VERSION_HYPER")
                );
                drive::run(spec, library, String::new(), clients).await
            }
            "rslock" => {
                let (manager, settings) = drive::rslock::manager(&spec.masters, spec.tuned);
                let clients = (0..spec.clients)
                    .map(|_| drive::rslock::RslockClient {
                        manager: manager.clone(),
                    })
                    .collect();
                let library = format!(
                    "rslock {} (redis-rs {}, tokio)",
                    env!("BENCH_VERSION_RSLOCK"),
                    newest(env!("BENCH_VERSION_REDIS"))
                );
                drive::run(spec, library, settings, clients).await
            }
            "redlock" => {
                let (manager, settings) = drive::redlock_crate::manager(&spec.masters, spec.tuned);
                let clients = (0..spec.clients)
                    .map(|_| drive::redlock_crate::RedlockClient {
                        manager: manager.clone(),
                    })
                    .collect();
                let library = format!(
                    "redlock {} (redis-rs {}, synchronous)",
                    env!("BENCH_VERSION_REDLOCK"),
                    oldest(env!("BENCH_VERSION_REDIS"))
                );
                drive::run(spec, library, settings, clients).await
            }
            other => bail!("no Rust driver for {other:?}"),
        }
    })
}

fn versions(list: &str) -> Vec<&str> {
    let mut v: Vec<&str> = list.split(',').collect();
    v.sort_by_key(|s| {
        s.split('.')
            .map(|n| n.parse::<u64>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    v
}

fn newest(list: &str) -> &str {
    versions(list).last().copied().unwrap_or("?")
}

fn oldest(list: &str) -> &str {
    versions(list).first().copied().unwrap_or("?")
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let peers: Vec<Peer> = if args.peers.is_empty() {
        if args.smoke {
            vec![Peer::Agent]
        } else {
            Peer::ALL.to_vec()
        }
    } else {
        args.peers
            .iter()
            .map(|name| Peer::parse(name).with_context(|| format!("unknown peer {name:?}")))
            .collect::<anyhow::Result<_>>()?
    };
    let (duration, warmup) = if args.smoke {
        (Duration::from_millis(1000), Duration::from_millis(300))
    } else {
        (args.duration, args.warmup)
    };
    for w in &args.only {
        if !plan::WORKLOAD_IDS.contains(&w.as_str()) {
            bail!(
                "unknown workload {w:?}: use {}",
                plan::WORKLOAD_IDS.join(", ")
            );
        }
    }
    let drivers = Drivers {
        exe: std::env::current_exe()?,
        node: args.node_driver.clone(),
        python: args.python.clone().zip(args.python_driver.clone()),
        processes: args.processes_driver.clone(),
        python_client: args.python_client.clone(),
    };
    std::fs::create_dir_all(&args.out)?;
    let scratch_root = args.out.join("scratch");
    std::fs::create_dir_all(&scratch_root)?;
    let scratch = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&scratch_root)?;
    let options = plan::Options {
        smoke: args.smoke,
        duration,
        warmup,
        peers: peers.clone(),
        only: args.only.clone(),
        agent_bin: args.agent_bin.clone(),
        drivers,
        scratch: scratch.path().to_path_buf(),
        leak_scan: args.leak_scan,
    };
    let env = environment(&args, &options);

    if args.profile {
        let profile = profile::run(&options)?;
        let date = env.date.replace(':', "");
        let path = args.out.join(format!("profile-{date}.txt"));
        std::fs::write(&path, &profile.text)?;
        println!("{}\nwritten to {}", profile.text, path.display());
        match profile.flamegraph {
            Ok(svg) => {
                let path = args.out.join(format!("flamegraph-w1-64-{date}.svg"));
                std::fs::write(&path, svg)?;
                println!("flame graph written to {}", path.display());
            }
            Err(e) => bail!("no flame graph: {e}"),
        }
        return Ok(ExitCode::SUCCESS);
    }

    let results = match plan::run(&options) {
        Ok(results) => results,
        Err(e) => {
            // Keep the logs of a run that could not even start.
            let kept = scratch.keep();
            bail!("{e:#}\n(logs kept in {})", kept.display());
        }
    };
    let markdown = report::render(&results, &env, &peers);
    println!("\n{markdown}");
    // A partial run (some workloads or peers) is not a result to keep: it
    // goes to scratch/ and leaves latest.md alone.
    let partial = !args.only.is_empty() || !args.peers.is_empty();
    let name = if args.smoke {
        "scratch/smoke".to_string()
    } else if partial {
        format!(
            "scratch/{}-{}core-partial",
            env.date.replace(':', ""),
            env.cores
        )
    } else {
        format!("{}-{}core", env.date.replace(':', ""), env.cores)
    };
    let path = args.out.join(format!("{name}.md"));
    std::fs::write(&path, &markdown)?;
    std::fs::write(
        args.out.join(format!("{name}.json")),
        serde_json::to_string_pretty(&results)?,
    )?;
    if !args.smoke && !partial {
        std::fs::write(args.out.join("latest.md"), &markdown)?;
    }
    eprintln!("written to {}", path.display());
    if results.agent_failed {
        let kept = scratch.keep();
        eprintln!(
            "redlock-bench: the agent's driver failed (logs kept in {})",
            kept.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let text = if text.is_empty() {
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    } else {
        text
    };
    (!text.is_empty()).then(|| text.lines().next().unwrap_or_default().to_string())
}

fn environment(args: &RunArgs, options: &plan::Options) -> report::Environment {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "?".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = root.to_string_lossy();
    let rev =
        output("git", &["-C", &root, "rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".into());
    let dirty = output(
        "git",
        &["-C", &root, "status", "--porcelain", "--", "agent"],
    )
    .is_some();
    let agent_bin = args.agent_bin.to_string_lossy();
    let agent = format!(
        "{} (git {rev}{})",
        output(&agent_bin, &["--version"]).unwrap_or_else(|| "?".into()),
        if dirty {
            ", with uncommitted changes in agent/"
        } else {
            ""
        }
    );
    let mut tools = vec![
        (
            "redis-benchmark".to_string(),
            output("redis-benchmark", &["--version"]).unwrap_or_else(|| "?".into()),
        ),
        (
            "rustc".to_string(),
            output("rustc", &["--version"]).unwrap_or_else(|| "?".into()),
        ),
    ];
    if options.drivers.node.is_some() {
        tools.push((
            "node".into(),
            output("node", &["--version"]).unwrap_or_else(|| "?".into()),
        ));
    }
    if let Some((python, _)) = &options.drivers.python {
        tools.push((
            "python".into(),
            output(&python.to_string_lossy(), &["--version"]).unwrap_or_else(|| "?".into()),
        ));
    }
    let mut command = String::from("bench/run.sh");
    if args.smoke {
        command.push_str(" --smoke");
    } else if options.duration != Duration::from_secs(8) || options.warmup != Duration::from_secs(1)
    {
        command.push_str(&format!(
            " --duration {} --warmup {}",
            humantime::format_duration(options.duration),
            humantime::format_duration(options.warmup)
        ));
    }
    if !args.only.is_empty() {
        command.push_str(&format!(" --only {}", args.only.join(",")));
    }
    if !args.peers.is_empty() {
        command.push_str(&format!(" --peers {}", args.peers.join(",")));
    }
    if options.leak_scan != Duration::from_secs(30) {
        command.push_str(&format!(
            " --leak-scan {}",
            humantime::format_duration(options.leak_scan)
        ));
    }
    report::Environment {
        date: output("date", &["-u", "+%Y-%m-%dT%H:%MZ"]).unwrap_or_else(|| "?".into()),
        cores: std::thread::available_parallelism().map_or(0, usize::from),
        cpu,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or("?".into(), |s| s.trim().to_string()),
        agent,
        tools,
        command,
        duration_s: options.duration.as_secs_f64(),
        warmup_s: options.warmup.as_secs_f64(),
        smoke: options.smoke,
    }
}

/// How a workload run through the agent went, printed: its result (the
/// error as text) and whether it failed, in part (`failed`) or whole.
pub(crate) fn told<T>(
    name: &str,
    measured: anyhow::Result<T>,
    failed: impl Fn(&T) -> bool,
) -> (Result<T, String>, bool) {
    let measured = measured.map_err(|e| format!("{e:#}"));
    let failed = match &measured {
        Ok(m) if failed(m) => {
            eprintln!("{name}: some operations FAILED (see the {name} table)");
            true
        }
        Ok(_) => false,
        Err(e) => {
            eprintln!("{name} FAILED: {}", e.lines().next().unwrap_or_default());
            true
        }
    };
    (measured, failed)
}
