//! The `redlock-agent` binary: parses the command line, loads the config and
//! hands over to the library. Exit codes: 0 ok, 64 bad usage or config (and,
//! for `check`, a master it cannot use), 1 the agent could not start.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use redlock_agent::config::{AddressCheck, Config, LogFormat, EXIT_CONFIG};
use redlock_agent::lock_command::guardian::{self, Guardian};
use redlock_agent::lock_command::{self, Elect, LockCommand, LockError};

#[cfg(feature = "dev")]
mod dev;
use std::time::Duration;

/// mimalloc: the profile under load showed glibc malloc/free at about 12%.
/// Built without transparent huge pages (the `no_thp` feature): the agent's
/// memory is many small objects, and a 2 MiB page for a few of them roughly
/// doubled its resident memory with 10,000 idle connections.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_t`, the
/// same in mimalloc 2 and 3; the Rust bindings leave it unnamed).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Milliseconds before mimalloc hands freed memory back to the OS. Its
/// default (1 s) purges only when the thread that freed the memory
/// allocates again, so after a burst (10,000 connections that closed) the
/// memory stayed resident; 0 would hand back every emptied page at once and
/// cost six times the `madvise` calls under steady load.
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Sets the purge delay; `MIMALLOC_PURGE_DELAY` in the environment still
/// wins.
fn configure_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one integer option, before any other thread runs.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "redlock-agent",
    version,
    about = "Redlock over N Redis masters, served on a Unix socket"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    /// Config file (YAML); see config.example.yaml.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log format, overriding log.format.
    #[arg(long, value_name = "FORMAT", global = true)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Validate a config, print it resolved with secrets redacted, and
    /// connect to every master at once; exit 0, or 64 naming each problem
    /// and each master that cannot be used, and why.
    ///
    /// A master cannot be used when it is unreachable within --timeout,
    /// refuses the TLS handshake or the login, does not answer PING, is a
    /// Redis Cluster listed as a single server (or the reverse), is a
    /// replica, or has an eviction policy that can evict lock keys.
    Check {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Check the file only: neither resolve the masters' hosts (so do
        /// not compare their addresses) nor connect to them; to check a
        /// file away from the network it will run in.
        #[arg(long)]
        offline: bool,
        /// How long the masters have to answer (connect, TLS, AUTH, PING,
        /// INFO), all at once.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    #[cfg(feature = "dev")]
    /// Start local redis-server masters and run the agent on them.
    ///
    /// The admin socket (force release, for redlock-tui) is beside the
    /// socket: NAME-admin.sock for NAME.sock.
    Dev {
        /// Where the agent listens.
        #[arg(long, default_value = "./redlock.sock")]
        socket: PathBuf,
        /// How many masters to start.
        #[arg(long, default_value_t = 5)]
        masters: usize,
        /// The metrics/probe address.
        #[arg(long, default_value = "127.0.0.1:9187")]
        metrics: String,
    },
    /// Run a command while holding a lock; release it when the command exits.
    ///
    /// Several resources are locked all or none, under one token; the
    /// command gets REDLOCK_RESOURCES (one a line) besides REDLOCK_RESOURCE.
    ///
    /// The command runs in a process group of its own; on a lost lock, on
    /// SIGTERM/SIGINT/SIGHUP to `lock`, or when it exits leaving processes
    /// behind, the group and every descendant that left it get SIGTERM,
    /// then SIGKILL after --kill-after; the lock is released only once they
    /// are gone. If `lock` is killed, a guardian process kills them.
    ///
    /// Exits with the command's status, or: 75 not acquired within --wait
    /// (the command did not run), 70 the lock was lost (the command was
    /// stopped), 69 no quorum or the agent is unreachable, 64 bad usage,
    /// 126 the command could not start; stopped by a signal, `lock` dies by
    /// that signal once the command's processes are gone.
    Lock {
        /// The agent's socket.
        #[arg(
            long,
            env = "REDLOCK_SOCKET",
            default_value = "/run/redlock/agent.sock"
        )]
        socket: PathBuf,
        /// Lock TTL (renewed while the command runs); default lock.default_ttl.
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<Duration>,
        /// How long to wait for the lock.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        wait: Duration,
        /// Owner label shown to operators.
        #[arg(long)]
        owner: Option<String>,
        /// Give up the lock (and stop the command) after this long.
        #[arg(long, value_parser = humantime::parse_duration)]
        max_hold: Option<Duration>,
        /// After SIGTERM to the command's processes, SIGKILL them after this
        /// long (never later than the end of the lock's validity, which the
        /// guardian enforces too, even when `lock` is stopped).
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        kill_after: Duration,
        /// Ask for a fencing token: the command gets it as REDLOCK_FENCE
        /// (a number larger than every earlier grant's) to send with its
        /// writes, so storage can refuse a writer whose lock has passed on.
        #[arg(long)]
        fence: bool,
        /// Take the lock shared, as one of many readers: the command runs
        /// beside other readers, never beside a holder without --shared.
        /// One resource only.
        #[arg(long)]
        shared: bool,
        /// The resource to lock; several (up to 32) are locked all or none,
        /// under one token and one fence.
        #[arg(required = true, num_args = 1..=32)]
        resources: Vec<String>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run a command while leading an election; stop it when leadership is lost.
    ///
    /// Campaigns in the election NAME through the agent and waits (as long
    /// as it takes) to lead; then runs the command, as `lock` does, with
    /// REDLOCK_ELECTION and REDLOCK_TERM (the leadership's term, a fence
    /// larger than every earlier term's) in its environment. When the
    /// leadership is lost, the command's whole process tree is stopped
    /// (SIGTERM, then SIGKILL after --kill-after, never past the validity);
    /// when the command exits, `elect` resigns at once.
    ///
    /// Exits with the command's status, or: 70 the leadership was lost (the
    /// command was stopped), 69 no quorum or the agent is unreachable, 64
    /// bad usage, 126 the command could not start.
    Elect {
        /// The agent's socket.
        #[arg(
            long,
            env = "REDLOCK_SOCKET",
            default_value = "/run/redlock/agent.sock"
        )]
        socket: PathBuf,
        /// The leadership's TTL: a leader that vanishes is replaced after
        /// at most this long; default lock.default_ttl.
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<Duration>,
        /// What the leader publishes to whoever asks who leads (an address).
        #[arg(long)]
        value: Option<String>,
        /// Owner label shown to operators.
        #[arg(long)]
        owner: Option<String>,
        /// Resign (and stop the command) after leading this long.
        #[arg(long, value_parser = humantime::parse_duration)]
        max_hold: Option<Duration>,
        /// After SIGTERM to the command's processes, SIGKILL them after this
        /// long (never later than the end of the leadership's validity,
        /// which the guardian enforces too, even when `elect` is stopped).
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        kill_after: Duration,
        /// The election.
        name: String,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Internal: the guardian `lock` starts between itself and the command
    /// (see `lock_command::guardian`).
    #[command(name = "lock-guardian", hide = true)]
    LockGuardian {
        /// The agent's socket.
        #[arg(long)]
        socket: PathBuf,
        /// The guardian's end of the socket pair `lock` holds.
        #[arg(long)]
        control_fd: i32,
        /// Signal the command's own process only (the test switch).
        #[arg(long)]
        no_tree: bool,
        /// Run the command in this process group.
        #[arg(long)]
        join_group: Option<i32>,
        /// Kill the command's tree at this moment (`CLOCK_MONOTONIC`, ms)
        /// unless told a later one.
        #[arg(long)]
        until: Option<u64>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
}

fn main() -> ExitCode {
    configure_allocator();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(EXIT_CONFIG as u8),
            };
        }
    };
    match cli.command {
        Some(Cmd::Lock {
            socket,
            ttl,
            wait,
            owner,
            max_hold,
            kill_after,
            fence,
            shared,
            mut resources,
            command,
        }) => {
            if shared && resources.len() > 1 {
                let _ = <Cli as clap::CommandFactory>::command()
                    .error(
                        clap::error::ErrorKind::ArgumentConflict,
                        "--shared takes one resource: locks on several are exclusive",
                    )
                    .print();
                return ExitCode::from(EXIT_CONFIG as u8);
            }
            lock(LockCommand {
                socket,
                resource: resources.remove(0),
                also: resources,
                ttl,
                wait,
                owner,
                max_hold,
                kill_after,
                fence,
                shared,
                elect: None,
                command,
            })
        }
        Some(Cmd::Elect {
            socket,
            ttl,
            value,
            owner,
            max_hold,
            kill_after,
            name,
            command,
        }) => lock(LockCommand {
            socket,
            resource: name,
            also: Vec::new(),
            ttl,
            wait: Duration::ZERO,
            owner,
            max_hold,
            kill_after,
            fence: false,
            shared: false,
            elect: Some(Elect { value }),
            command,
        }),
        Some(Cmd::LockGuardian {
            socket,
            control_fd,
            no_tree,
            join_group,
            until,
            command,
        }) => ExitCode::from(guardian::run(Guardian {
            socket,
            control_fd,
            tree: !no_tree,
            join_group,
            until,
            command,
        })),
        Some(Cmd::Check {
            config,
            offline,
            timeout,
        }) => check(&config, (!offline).then_some(timeout)),
        #[cfg(feature = "dev")]
        Some(Cmd::Dev {
            socket,
            masters,
            metrics,
        }) => dev::run(&socket, masters, &metrics, cli.log_format),
        None => match cli.config {
            Some(path) => match load(&path, AddressCheck::Resolve) {
                Ok(config) => serve(config, cli.log_format),
                Err(code) => code,
            },
            None => {
                let dev = if cfg!(feature = "dev") {
                    ", or try `redlock-agent dev`"
                } else {
                    ""
                };
                eprintln!("redlock-agent: give --config FILE{dev} (see --help)");
                ExitCode::from(EXIT_CONFIG as u8)
            }
        },
    }
}

fn lock(command: LockCommand) -> ExitCode {
    let name = if command.elect.is_some() {
        "elect"
    } else {
        "lock"
    };
    // One thread is plenty: `lock` waits on one socket and one child.
    // Cannot fail short of the OS refusing an epoll fd at start.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    match runtime.block_on(lock_command::run(command)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("redlock-agent {name}: {e}");
            if let LockError::Signaled { signal, .. } = e {
                lock_command::die_by(signal);
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn load(path: &Path, check: AddressCheck) -> Result<Config, ExitCode> {
    Config::load_with(path, check).map_err(|e| {
        eprintln!(
            "redlock-agent: {} is not a usable config:\n{e}",
            path.display()
        );
        ExitCode::from(EXIT_CONFIG as u8)
    })
}

/// `check`: the file, then, unless offline (`connect` is `None`), every
/// master within `connect`.
fn check(path: &Path, connect: Option<Duration>) -> ExitCode {
    let addresses = match connect {
        Some(_) => AddressCheck::Resolve,
        None => AddressCheck::Skip,
    };
    let config = match load(path, addresses) {
        Ok(config) => config,
        Err(code) => return code,
    };
    // Cannot fail: the config holds only strings, numbers and bools.
    let yaml = serde_saphyr::to_string(&config).expect("config serializes");
    println!("{yaml}");
    if let Some(timeout) = connect {
        // Cannot fail short of the OS refusing an epoll fd at start.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("start the tokio runtime");
        let verdicts = match runtime.block_on(redlock_agent::check::masters(&config, timeout)) {
            Ok(verdicts) => verdicts,
            Err(e) => {
                eprintln!(
                    "redlock-agent: {} is not a usable config:\n{e}",
                    path.display()
                );
                return ExitCode::from(EXIT_CONFIG as u8);
            }
        };
        for verdict in &verdicts {
            for line in verdict.lines() {
                eprintln!("{line}");
            }
        }
        let unusable = verdicts.iter().filter(|v| !v.usable()).count();
        if unusable > 0 {
            eprintln!(
                "redlock-agent: {}: {unusable} of {} masters cannot be used",
                path.display(),
                verdicts.len()
            );
            return ExitCode::from(EXIT_CONFIG as u8);
        }
    }
    eprintln!(
        "{}: ok ({} masters, quorum {})",
        path.display(),
        config.masters.len(),
        config.quorum()
    );
    ExitCode::SUCCESS
}

fn init_tracing(config: &Config, format: Option<LogFormat>) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("REDLOCK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format.unwrap_or(config.log.format) {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The agent's runtime: `agent.workers` worker threads. A multi-thread
/// runtime even with one worker: the main thread only waits for the end,
/// and with one worker it served more locks per second than a
/// current-thread runtime (bench/README.md, "Worker threads").
fn runtime(workers: usize) -> tokio::runtime::Runtime {
    // Cannot fail short of the OS refusing threads or an epoll fd at start.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("start the tokio runtime")
}

fn serve(config: Config, format: Option<LogFormat>) -> ExitCode {
    serve_with(config, format, false)
}

/// Runs the agent; `masters_fresh` when this process started the masters.
fn serve_with(config: Config, format: Option<LogFormat>, masters_fresh: bool) -> ExitCode {
    init_tracing(&config, format);
    if !config.delayed_restart.enabled {
        tracing::warn!(
            "delayed_restart.enabled is false: a master that restarts without its data rejoins at once \
             and can grant a lock that is still held; keep it off only with appendfsync always"
        );
    }
    let started = runtime(config.agent.workers).block_on(async {
        // Before the socket exists, so an early SIGTERM drains, not kills.
        let shutdown = redlock_agent::shutdown::signal();
        let bound = redlock_agent::Bound::bind_with(config, masters_fresh).await?;
        bound.serve(shutdown).await;
        Ok::<(), redlock_agent::StartError>(())
    });
    match started {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            eprintln!("redlock-agent: {e}");
            ExitCode::FAILURE
        }
    }
}
