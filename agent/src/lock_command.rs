//! `redlock-agent lock RESOURCE -- COMMAND...`: runs a command while holding
//! a lock, for shell scripts and cron jobs.
//!
//! It takes a hold on the agent's socket through `redlock-client`, runs the
//! command with `REDLOCK_RESOURCE`, `REDLOCK_TOKEN` and
//! `REDLOCK_VALID_UNTIL_MS` (Unix time in ms) in its environment, plus
//! `REDLOCK_FENCE` when asked for a fencing token (`--fence`) and the agent
//! gave one, and releases the lock once the command and every process it
//! started are gone.
//!
//! The command runs under a guardian ([`guardian`]): `lock`'s own binary
//! again, a child subreaper, the command's parent, in a process group of
//! its own. The command gets a process group of its own too (or joins
//! `lock`'s when `lock` is the foreground job of a terminal), and "the
//! tree" is that group plus every descendant of the guardian that left it
//! ([`tree`]). The tree gets SIGTERM, then SIGKILL after `--kill-after`
//! but never later than the end of the last validity (which the guardian
//! keeps too, see below), when:
//! - the agent says the lock is lost (a force release, `--max-hold`, no
//!   quorum), the agent goes away, or no renewal arrives in time (a frozen
//!   agent): `lock` exits 70;
//! - `lock` gets SIGTERM, SIGINT or SIGHUP: it releases, then dies by the
//!   same signal (a second one skips the grace);
//! - the command exits and processes of its tree remain: `lock` exits
//!   with the command's status once they are gone.
//!
//! The guardian keeps the deadline too: `lock` tells it the end of each
//! validity it learns (at the grant and at each renewal), and the guardian
//! SIGKILLs the tree when the last one told runs out, so the tree is gone
//! by then even when `lock` is stopped (SIGSTOP, a debugger) or wedged.
//!
//! If `lock` is killed (SIGKILL included), the guardian sees its end of
//! their socket pair close, SIGKILLs the tree until none of it is left and
//! then releases the lock: the hold asked to be left to expire when its
//! connection closes, so the lock is never free while the tree lives. If
//! the guardian is killed, its direct child dies with it
//! (`PR_SET_PDEATHSIG`) and the rest of the tree falls to `lock`, a
//! subreaper too, which kills it. Not covered: both killed at once, and
//! processes started outside the tree (through systemd, a container
//! runtime, ssh); see docs/scripts.md.

mod error;
pub mod guardian;
pub mod tree;

use error::refused;
pub use error::LockError;

use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redlock_client::{Campaign, CampaignOptions, Client, Error, Hold, HoldOptions, OnDisconnect};
use redlock_wire::{CampaignEvent, HoldEvent};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

/// `1` turns the tree kill off: `lock` signals only the command's own
/// process, as it did before the guardian, so the tests' control runs can
/// show a grandchild outliving the lock. An environment variable, not a
/// flag: no script should be able to turn it off by accident.
pub use redlock_testkit::switches::NO_TREE_KILL as TREE_SWITCH;

/// `1` turns the guardian's own deadline off: only `lock` stops the tree
/// when the validity runs out, so a stopped `lock` lets the command run on
/// (the control run of the stopped `lock` test).
pub use redlock_testkit::switches::NO_GUARDIAN_DEADLINE as DEADLINE_SWITCH;

/// Exit statuses of `lock` itself (otherwise it exits with the command's).
pub mod exit {
    /// Bad arguments, or the agent refused the request as invalid.
    pub const USAGE: u8 = 64;
    /// No quorum of masters, or the agent could not be reached.
    pub const UNAVAILABLE: u8 = 69;
    /// The lock was lost while the command ran; the command was stopped.
    pub const LOST: u8 = 70;
    /// The lock was not acquired within `--wait`; the command did not run.
    pub const NOT_ACQUIRED: u8 = 75;
    /// The command could not be started.
    pub const CANNOT_RUN: u8 = 126;
}

/// What `lock` was asked to do.
#[derive(Debug, Clone)]
pub struct LockCommand {
    pub socket: PathBuf,
    pub resource: String,
    /// More resources locked with `resource`, all or none, under one token.
    pub also: Vec<String>,
    pub ttl: Option<Duration>,
    pub wait: Duration,
    pub owner: Option<String>,
    pub max_hold: Option<Duration>,
    pub kill_after: Duration,
    /// Ask for a fencing token and pass it on as `REDLOCK_FENCE`.
    pub fence: bool,
    /// Take the lock shared (`--shared`), as one of many readers.
    pub shared: bool,
    /// `elect`: campaign in the election `resource` and run the command
    /// while leading, with this value published to whoever asks who leads.
    pub elect: Option<Elect>,
    pub command: Vec<String>,
}

impl LockCommand {
    /// What the command runs under, for messages: `the lock on R`, or
    /// under `elect`, `the leadership of election R`.
    pub fn what(&self) -> String {
        match self.elect {
            Some(_) => format!("the leadership of election {}", self.resource),
            None => format!("the lock on {}", self.resources().join(", ")),
        }
    }

    /// Every resource locked: `resource`, then `also`.
    pub fn resources(&self) -> Vec<&str> {
        let mut all = vec![self.resource.as_str()];
        all.extend(self.also.iter().map(String::as_str));
        all
    }
}

/// What `redlock-agent elect` adds to `lock`.
#[derive(Debug, Clone, Default)]
pub struct Elect {
    pub value: Option<String>,
}

/// What the command runs under: a lock's hold, or a leadership. Both are
/// an NDJSON stream of renewals ending with `lost`; both end when closed.
enum Lease {
    Lock(Hold),
    Leader(Campaign),
}

impl Lease {
    /// The validity last announced.
    fn validity(&self) -> Duration {
        match self {
            Lease::Lock(hold) => hold.validity(),
            Lease::Leader(campaign) => campaign.validity(),
        }
    }

    /// The next renewal or loss, as a hold's event. Cancel-safe.
    async fn next_event(&mut self) -> Result<Option<HoldEvent>, Error> {
        match self {
            Lease::Lock(hold) => hold.next_event().await,
            Lease::Leader(campaign) => loop {
                return match campaign.next_event().await? {
                    Some(CampaignEvent::Renewed { validity_ms }) => {
                        Ok(Some(HoldEvent::Renewed { validity_ms }))
                    }
                    Some(CampaignEvent::Lost { reason }) => Ok(Some(HoldEvent::Lost { reason })),
                    Some(CampaignEvent::Elected { .. } | CampaignEvent::Waiting { .. }) => continue,
                    None => Ok(None),
                };
            },
        }
    }

    /// The command's environment for this lease.
    fn env(&self, cmd: &LockCommand) -> Vec<(&'static str, String)> {
        match self {
            Lease::Lock(hold) => {
                let mut env = vec![
                    ("REDLOCK_RESOURCE", cmd.resource.clone()),
                    ("REDLOCK_TOKEN", hold.token().to_string()),
                ];
                if !cmd.also.is_empty() {
                    env.push(("REDLOCK_RESOURCES", cmd.resources().join("\n")));
                }
                if let Some(fence) = hold.fence() {
                    env.push(("REDLOCK_FENCE", fence.to_string()));
                }
                env
            }
            Lease::Leader(campaign) => {
                let mut env = vec![("REDLOCK_ELECTION", cmd.resource.clone())];
                if let Some(term) = campaign.term() {
                    env.push(("REDLOCK_TERM", term.to_string()));
                }
                env
            }
        }
    }

    /// Stops renewing without a release (a lost lease).
    fn close(self) {
        match self {
            Lease::Lock(hold) => hold.close(),
            Lease::Leader(campaign) => campaign.resign(),
        }
    }
}

/// How long the agent may take to answer beyond the wait asked for: long,
/// since `lock` has nothing better to do than wait, but bounded, so a frozen
/// agent is reported as unreachable instead of hanging a cron job.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The exit code a shell would report for `status`.
pub fn shell_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        (None, None) => 1,
    }
}

/// Takes the hold, runs the command under its guardian, and returns its
/// exit code once nothing of its tree is left.
///
/// # Errors
/// When the lock is not acquired, is lost, or the command cannot start;
/// [`LockError::Signaled`] when `lock` got SIGTERM, SIGINT or SIGHUP: while
/// waiting (nothing was granted), or while the command ran (its tree was
/// stopped and the lock released).
pub async fn run(cmd: LockCommand) -> Result<u8, LockError> {
    let client = Client::new(&cmd.socket).with_timeout(ANSWER_TIMEOUT);
    // Left to expire if this process dies: the guardian releases it once
    // the command's tree is dead, never before (see `guardian`).
    let mut options = HoldOptions::new()
        .wait(cmd.wait)
        .on_disconnect(OnDisconnect::Expire);
    if let Some(ttl) = cmd.ttl {
        options = options.ttl(ttl);
    }
    if let Some(owner) = &cmd.owner {
        options = options.owner(owner.clone());
    }
    if let Some(max_hold) = cmd.max_hold {
        options = options.max_hold(max_hold);
    }
    if cmd.fence {
        options = options.fence();
    }
    if cmd.shared {
        options = options.shared();
    }
    let program = cmd.command.first().cloned().unwrap_or_default();
    // Caught from before the wait: one arriving between the grant and the
    // guardian's start would otherwise leave the lock to expire.
    let mut signals = Signals::new().map_err(|e| LockError::CannotRun {
        command: program.clone(),
        error: format!("cannot catch signals: {e}"),
    })?;
    let lease = match &cmd.elect {
        None => tokio::select! {
            hold = async {
                match cmd.also.is_empty() {
                    true => client.hold(&cmd.resource, &options).await,
                    false => client.hold_many(&cmd.resources(), &options).await,
                }
            } => {
                Lease::Lock(hold.map_err(|e| refused(&cmd, e))?)
            }
            // Dropping the request ends the wait; nothing was granted.
            signal = signals.recv() => {
                return Err(LockError::Signaled { signal, waiting: true, elect: false });
            }
        },
        Some(elect) => tokio::select! {
            campaign = lead(&client, &cmd, elect) => Lease::Leader(campaign?),
            // Dropping the campaign ends it; nothing was led.
            signal = signals.recv() => {
                return Err(LockError::Signaled { signal, waiting: true, elect: true });
            }
        },
    };
    let tree = !tree_kill_disabled();
    if !tree {
        eprintln!(
            "redlock-agent lock: {TREE_SWITCH} is set: only the command's own process is \
             signalled, and its children can outlive the lock; for control runs of the tests only"
        );
    }
    let deadline = !switched_on(DEADLINE_SWITCH);
    if !deadline {
        eprintln!(
            "redlock-agent lock: {DEADLINE_SWITCH} is set: the guardian keeps no deadline, and \
             the command can outlive the lock when `lock` is stopped; for control runs of the \
             tests only"
        );
    }
    let guarded = match Guarded::start(&cmd, lease, tree, deadline, signals) {
        Ok(guarded) => guarded,
        Err((error, lease)) => {
            release(&cmd, lease).await;
            return Err(LockError::CannotRun {
                command: program,
                error: format!("cannot start its guardian: {error}"),
            });
        }
    };
    guarded.run(&cmd, program).await
}

/// Campaigns in the election `cmd.resource` until elected (however long
/// that takes: `--wait` is for locks).
async fn lead(client: &Client, cmd: &LockCommand, elect: &Elect) -> Result<Campaign, LockError> {
    let mut options = CampaignOptions::new();
    if let Some(ttl) = cmd.ttl {
        options = options.ttl(ttl);
    }
    if let Some(owner) = &cmd.owner {
        options = options.owner(owner.clone());
    }
    if let Some(value) = &elect.value {
        options = options.value(value.clone());
    }
    if let Some(max_hold) = cmd.max_hold {
        options = options.max_hold(max_hold);
    }
    let mut campaign = client
        .campaign(&cmd.resource, &options)
        .await
        .map_err(|e| refused(cmd, e))?;
    match campaign.elected().await {
        Ok(Some(_)) => Ok(campaign),
        Ok(None) => Err(LockError::Lost {
            what: cmd.what(),
            reason: "the agent ended the campaign before it led".into(),
        }),
        Err(e) => Err(LockError::Unreachable(cmd.socket.clone(), e.to_string())),
    }
}

/// Whether the test-only switch turned the tree kill off.
fn tree_kill_disabled() -> bool {
    switched_on(TREE_SWITCH)
}

/// Whether the test-only switch `name` is set to `1`.
fn switched_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

/// How long after a validity of `valid_for` arrives the tree may run at
/// most: a little before it ends, for the last signal to land.
fn last_moment(valid_for: Duration) -> Duration {
    valid_for.saturating_sub((valid_for / 10).min(Duration::from_millis(50)))
}

/// How long `lock` waits for the agent to answer its release.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Ends a hold that asked to be left to expire: closes it, then releases
/// the lock by its token. A failed release is reported: the lock then
/// expires at the end of its validity. A leadership resigns at once when
/// its campaign closes.
async fn release(cmd: &LockCommand, lease: Lease) {
    let hold = match lease {
        Lease::Lock(hold) => hold,
        Lease::Leader(campaign) => return campaign.resign(),
    };
    let token = hold.token().to_string();
    // Closing first stops the renewals, so none races the release.
    hold.close();
    let client = Client::new(&cmd.socket).with_timeout(RELEASE_TIMEOUT);
    let released = match cmd.also.is_empty() {
        true => client.release(&cmd.resource, &token).await,
        false => client.release_many(&token).await,
    };
    if let Err(e) = released {
        eprintln!(
            "redlock-agent lock: cannot release {} ({e}); it expires at the end of its validity",
            cmd.what()
        );
    }
}

/// SIGTERM, SIGINT and SIGHUP to `lock`: each stops the command's tree.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal's number. Cancel-safe: each `recv` is.
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.int.recv() => libc::SIGINT,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// `lock`'s process group when `lock` is the foreground job of its
/// controlling terminal: the command then joins it, so the terminal's job
/// control (Ctrl-C, Ctrl-Z, reading from it) works as for any command.
fn foreground_group() -> Option<i32> {
    use std::os::unix::fs::OpenOptionsExt;
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open("/dev/tty")
        .ok()?;
    // SAFETY: tcgetpgrp(3) on an open descriptor; getpgrp(2) cannot fail.
    let (foreground, own) = unsafe { (libc::tcgetpgrp(tty.as_raw_fd()), libc::getpgrp()) };
    (foreground == own).then_some(own)
}

/// Why `lock` is stopping the command's tree.
#[derive(Debug)]
enum Stop {
    /// The command exited, leaving processes behind.
    Exited,
    Lost(String),
    Signal(i32),
}

/// The command running under its guardian, with the hold.
struct Guarded {
    hold: Lease,
    guardian: Child,
    reports: Lines<BufReader<OwnedReadHalf>>,
    orders: OwnedWriteHalf,
    signals: Signals,
    tree: bool,
    /// The command joined `lock`'s process group (see [`foreground_group`]).
    joined: bool,
    /// The guardian keeps the deadline (off only under the test switch).
    deadline: bool,
}

impl Guarded {
    /// Starts the guardian, which starts the command. On failure, the hold
    /// is handed back for release.
    #[allow(clippy::result_large_err)]
    fn start(
        cmd: &LockCommand,
        hold: Lease,
        tree: bool,
        deadline: bool,
        signals: Signals,
    ) -> Result<Guarded, (std::io::Error, Lease)> {
        let join = foreground_group();
        match Guarded::spawn(cmd, &hold, tree, deadline, join) {
            Ok((guardian, ours)) => {
                let (reports, orders) = ours.into_split();
                Ok(Guarded {
                    hold,
                    guardian,
                    reports: BufReader::new(reports).lines(),
                    orders,
                    signals,
                    tree,
                    joined: join.is_some(),
                    deadline,
                })
            }
            Err(e) => Err((e, hold)),
        }
    }

    fn spawn(
        cmd: &LockCommand,
        hold: &Lease,
        tree: bool,
        deadline: bool,
        join: Option<i32>,
    ) -> std::io::Result<(Child, tokio::net::UnixStream)> {
        if tree {
            // Should the guardian die, the command's processes fall to
            // `lock`, which kills them before it releases.
            if let Err(e) = tree::become_subreaper() {
                eprintln!("redlock-agent lock: cannot become a subreaper: {e}");
            }
        }
        let valid_until = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, ms)
            .saturating_add(ms(hold.validity()));
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let fd = theirs.as_raw_fd();
        // The guardian is this binary again: /proc/self/exe is the file we
        // run even if it was replaced or deleted since.
        let mut guardian = Command::new("/proc/self/exe");
        guardian
            .arg0(
                std::env::args_os()
                    .next()
                    .unwrap_or_else(|| "redlock-agent".into()),
            )
            .arg("lock-guardian")
            .arg("--socket")
            .arg(&cmd.socket)
            .arg("--control-fd")
            .arg(fd.to_string());
        if !tree {
            guardian.arg("--no-tree");
        }
        if let Some(group) = join {
            guardian.arg("--join-group").arg(group.to_string());
        }
        if deadline {
            let until = guardian::monotonic_ms().saturating_add(ms(last_moment(hold.validity())));
            guardian.arg("--until").arg(until.to_string());
        }
        guardian
            .arg("--")
            .args(&cmd.command)
            .envs(hold.env(cmd))
            .env("REDLOCK_VALID_UNTIL_MS", valid_until.to_string())
            // A group of its own: a signal to `lock`'s group (`timeout -s
            // KILL` sends one) leaves it alive to clean up.
            .process_group(0);
        // SAFETY: fcntl(2) is async-signal-safe; the closure allocates
        // nothing. It lets the guardian inherit its end of the pair.
        unsafe {
            guardian.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = guardian.spawn()?;
        drop(theirs);
        Ok((child, tokio::net::UnixStream::from_std(ours)?))
    }

    /// Waits for the command and its tree, renewing the lock, and stops
    /// the tree on a loss, on a signal, or when the command left processes
    /// behind; releases once the tree is gone.
    async fn run(mut self, cmd: &LockCommand, program: String) -> Result<u8, LockError> {
        // The command must never run past the validity the agent last gave:
        // if no renewal (or loss notice) arrives in time, as when the agent
        // is frozen, stop it on our own clock. Counted from arrival, which
        // is after the agent measured it, so the margins below absorb the
        // gap.
        let mut valid_for = self.hold.validity();
        let mut valid_until = Instant::now() + valid_for;
        let mut stop: Option<Stop> = None;
        let mut kill_at: Option<Instant> = None;
        let mut killed = false;
        let mut left = false;
        let mut cannot_run: Option<String> = None;
        let mut group: Option<i32> = None;
        let mut hold_open = true;
        let mut reports_open = true;
        let status = loop {
            let term_at = valid_until - cmd.kill_after.min(valid_for / 3);
            // SIGTERM now, SIGKILL after --kill-after but never later than
            // just before the validity ends.
            let stopping_at = |valid_until: Instant, valid_for: Duration| {
                (Instant::now() + cmd.kill_after)
                    .min(valid_until - valid_for + last_moment(valid_for))
            };
            let mut begin = None;
            tokio::select! {
                status = self.guardian.wait() => break status,
                line = self.reports.next_line(), if reports_open => match line {
                    Ok(Some(line)) => match guardian::Report::parse(&line) {
                        Some(guardian::Report::Started { pid }) => {
                            group = Some(pid);
                        }
                        Some(guardian::Report::Left { .. }) => {
                            left = true;
                            begin = Some(Stop::Exited);
                        }
                        Some(guardian::Report::Error(error)) => cannot_run = Some(error),
                        None => {}
                    },
                    // The guardian is ending; its exit is what counts.
                    Ok(None) | Err(_) => reports_open = false,
                },
                // Cancel-safe: a partial line stays buffered in the hold.
                event = self.hold.next_event(), if hold_open => match event {
                    Ok(Some(HoldEvent::Renewed { validity_ms })) => {
                        valid_for = Duration::from_millis(validity_ms);
                        valid_until = Instant::now() + valid_for;
                        if self.deadline && stop.is_none() {
                            let until = guardian::monotonic_ms()
                                .saturating_add(ms(last_moment(valid_for)));
                            let _ = self.orders.write_all(&guardian::until_line(until)).await;
                        }
                    }
                    Ok(Some(HoldEvent::Acquired { .. })) => {}
                    Ok(Some(HoldEvent::Lost { reason })) => {
                        hold_open = false;
                        begin = Some(Stop::Lost(reason));
                    }
                    // The stream ended, failed, or sent something that is
                    // not an event: the lock cannot be trusted past it.
                    Ok(None) | Err(_) => {
                        hold_open = false;
                        begin = Some(Stop::Lost("the agent ended the stream without a lost event".to_string()));
                    }
                },
                () = tokio::time::sleep_until(term_at), if stop.is_none() => {
                    begin = Some(Stop::Lost(
                        "no renewal arrived before the validity ran out".to_string(),
                    ));
                }
                () = sleep_until_some(kill_at), if !killed => {
                    killed = true;
                    let _ = self.orders.write_all(guardian::KILL).await;
                }
                signal = self.signals.recv() => {
                    if stop.is_none() {
                        begin = Some(Stop::Signal(signal));
                    } else if !killed {
                        // A second signal while stopping: no more grace.
                        killed = true;
                        let _ = self.orders.write_all(guardian::KILL).await;
                    }
                }
            }
            match (begin, &stop) {
                (Some(why), None) => {
                    stop = Some(why);
                    kill_at = Some(stopping_at(valid_until, valid_for));
                    let _ = self.orders.write_all(guardian::TERM).await;
                }
                // Lost while the processes the command left were being
                // stopped: they may have run beside another holder.
                (Some(Stop::Lost(reason)), Some(Stop::Exited)) => stop = Some(Stop::Lost(reason)),
                _ => {}
            }
        };
        if stop.is_none()
            && self.deadline
            && Instant::now() >= valid_until - valid_for + last_moment(valid_for)
        {
            // `lock` could not act (stopped, wedged) past the last moment
            // it told the guardian, which killed the tree on its own.
            stop = Some(Stop::Lost(
                "the validity ran out while `lock` was stopped; the guardian killed the command"
                    .to_string(),
            ));
        }
        let status = status.map_err(|e| LockError::CannotRun {
            command: program.clone(),
            error: e.to_string(),
        })?;
        if status.signal().is_some() {
            // The guardian itself was killed: its direct child died with
            // it, the rest of the tree fell to us (a subreaper too).
            eprintln!(
                "redlock-agent lock: the command's guardian was killed ({status}); killing \
                 what is left of the command's processes"
            );
            if self.tree {
                let tree = tree::Tree {
                    root: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
                    // Not ours to reap: its id is checked against the walk.
                    command: None,
                    group: group.filter(|_| !self.joined),
                };
                let _ = tokio::task::spawn_blocking(move || tree.kill_all()).await;
            }
        }
        match stop {
            Some(Stop::Lost(reason)) => {
                // The agent let the lock go, or cannot be reached: nothing
                // to release.
                self.hold.close();
                Err(LockError::Lost {
                    what: cmd.what(),
                    reason,
                })
            }
            Some(Stop::Signal(signal)) => {
                release(cmd, self.hold).await;
                Err(LockError::Signaled {
                    signal,
                    waiting: false,
                    elect: cmd.elect.is_some(),
                })
            }
            Some(Stop::Exited) | None => {
                release(cmd, self.hold).await;
                if let Some(error) = cannot_run {
                    return Err(LockError::CannotRun {
                        command: program,
                        error,
                    });
                }
                if left {
                    eprintln!(
                        "redlock-agent lock: the command left processes running; they were \
                         stopped before {} was given up",
                        cmd.what()
                    );
                }
                Ok(shell_code(status))
            }
        }
    }
}

/// Sleeps until `at`, or forever when there is no `at`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Dies by `signal` as if `lock` had not caught it, so that a parent (a
/// shell) sees what stopped it. Falls back to returning, for the caller
/// to exit with 128 + `signal`.
pub fn die_by(signal: i32) {
    // SAFETY: resets one signal's disposition and raises it in this
    // process; nothing else runs concurrently that depends on its handler.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}
