//! `redlock-agent lock RESOURCE -- COMMAND...`: runs a command while holding
//! a lock, for shell scripts and cron jobs.
//!
//! It takes a hold on the agent's socket through `redlock-client`, runs the
//! command with `REDLOCK_RESOURCE`, `REDLOCK_TOKEN` and
//! `REDLOCK_VALID_UNTIL_MS` (Unix time in ms) in its environment, plus
//! `REDLOCK_FENCE` when asked for a fencing token (`--fence`) and the agent
//! gave one, and closes the hold when the command exits, which releases the
//! lock. If the agent says the lock is lost (or
//! the agent goes away, or no renewal arrives in time, as when the agent is
//! frozen), the command gets SIGTERM at once and SIGKILL after
//! `--kill-after`, but never later than the end of the last validity. The
//! command also gets SIGKILL if this process dies (PR_SET_PDEATHSIG), so it
//! never runs on without the lock.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redlock_client::{Client, Error, HoldOptions};
use redlock_wire::HoldEvent;
use tokio::process::Command;

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
    pub ttl: Option<Duration>,
    pub wait: Duration,
    pub owner: Option<String>,
    pub max_hold: Option<Duration>,
    pub kill_after: Duration,
    /// Ask for a fencing token and pass it on as `REDLOCK_FENCE`.
    pub fence: bool,
    pub command: Vec<String>,
}

/// How long the agent may take to answer beyond the wait asked for: long,
/// since `lock` has nothing better to do than wait, but bounded, so a frozen
/// agent is reported as unreachable instead of hanging a cron job.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Why `lock` stopped before or instead of the command's own exit.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot reach the agent at {0}: {1}")]
    Unreachable(PathBuf, String),
    #[error("{resource} is held by another holder; not acquired within the wait")]
    NotAcquired { resource: String },
    #[error("no quorum of masters: {0}")]
    NoQuorum(String),
    #[error("the agent refused the request: {0}")]
    Refused(String),
    #[error("the lock on {resource} was lost ({reason}); the command was stopped")]
    Lost { resource: String, reason: String },
    #[error("cannot run {command:?}: {error}")]
    CannotRun { command: String, error: String },
}

impl LockError {
    pub fn exit_code(&self) -> u8 {
        match self {
            LockError::Unreachable(..) | LockError::NoQuorum(_) => exit::UNAVAILABLE,
            LockError::NotAcquired { .. } => exit::NOT_ACQUIRED,
            LockError::Refused(_) => exit::USAGE,
            LockError::Lost { .. } => exit::LOST,
            LockError::CannotRun { .. } => exit::CANNOT_RUN,
        }
    }
}

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

/// The error `lock` reports for a hold the agent did not grant.
fn refused(cmd: &LockCommand, error: Error) -> LockError {
    match error {
        Error::Taken { .. } | Error::Api { status: 409, .. } => LockError::NotAcquired {
            resource: cmd.resource.clone(),
        },
        Error::NoQuorum { message }
        | Error::Api {
            status: 503,
            message,
            ..
        } => LockError::NoQuorum(message),
        Error::Connect { source, .. } => {
            LockError::Unreachable(cmd.socket.clone(), source.to_string())
        }
        Error::Connection(_) | Error::Timeout(_) => {
            LockError::Unreachable(cmd.socket.clone(), error.to_string())
        }
        Error::Protocol(_) => LockError::Lost {
            resource: cmd.resource.clone(),
            reason: "the agent ended the hold before it began".into(),
        },
        Error::Lost { message } | Error::Api { message, .. } => LockError::Refused(message),
        other => LockError::Refused(other.to_string()),
    }
}

/// Takes the hold, runs the command, and returns its exit code.
///
/// # Errors
/// When the lock is not acquired, is lost, or the command cannot start.
pub async fn run(cmd: LockCommand) -> Result<u8, LockError> {
    let client = Client::new(&cmd.socket).with_timeout(ANSWER_TIMEOUT);
    let mut options = HoldOptions::new().wait(cmd.wait);
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
    let mut hold = client
        .hold(&cmd.resource, &options)
        .await
        .map_err(|e| refused(&cmd, e))?;
    let validity_ms = ms(hold.validity());
    let valid_until = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, ms)
        .saturating_add(validity_ms);
    let (program, args) = cmd
        .command
        .split_first()
        .ok_or_else(|| LockError::CannotRun {
            command: String::new(),
            error: "no command given".into(),
        })?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env("REDLOCK_RESOURCE", &cmd.resource)
        .env("REDLOCK_TOKEN", hold.token())
        .env("REDLOCK_VALID_UNTIL_MS", valid_until.to_string());
    if let Some(fence) = hold.fence() {
        command.env("REDLOCK_FENCE", fence.to_string());
    }
    // SAFETY: prctl is async-signal-safe; it only sets a flag of the child.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = command.spawn().map_err(|e| LockError::CannotRun {
        command: program.clone(),
        error: e.to_string(),
    })?;

    // The command must never run past the validity the agent last gave:
    // if no renewal (or loss notice) arrives in time, as when the agent is
    // frozen, stop it on our own clock. Counted from arrival, which is
    // after the agent measured it, so the margins below absorb the gap.
    let mut valid_for = Duration::from_millis(validity_ms);
    let mut valid_until = tokio::time::Instant::now() + valid_for;
    let ended = loop {
        let term_at = valid_until - cmd.kill_after.min(valid_for / 3);
        tokio::select! {
            status = child.wait() => break Ok(status),
            // Cancel-safe: a partial line stays buffered in the hold.
            event = hold.next_event() => match event {
                Ok(Some(HoldEvent::Renewed { validity_ms })) => {
                    valid_for = Duration::from_millis(validity_ms);
                    valid_until = tokio::time::Instant::now() + valid_for;
                }
                Ok(Some(HoldEvent::Acquired { .. })) => {}
                Ok(Some(HoldEvent::Lost { reason })) => break Err(reason),
                // The stream ended, failed, or sent something that is
                // not an event: the lock cannot be trusted past it.
                Ok(None) | Err(_) => break Err("the agent closed the hold".to_string()),
            },
            () = tokio::time::sleep_until(term_at) => {
                break Err("no renewal arrived before the validity ran out".to_string());
            }
        }
    };
    let reason = match ended {
        Ok(status) => {
            // Closing the connection ends the hold: the agent releases.
            hold.close();
            let status = status.map_err(|e| LockError::CannotRun {
                command: program.clone(),
                error: e.to_string(),
            })?;
            return Ok(shell_code(status));
        }
        Err(reason) => reason,
    };
    // Lost: SIGTERM now, SIGKILL after --kill-after but never later than
    // just before the validity ends.
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let kill_at = (tokio::time::Instant::now() + cmd.kill_after)
        .min(valid_until - (valid_for / 10).min(Duration::from_millis(50)));
    if tokio::time::timeout_at(kill_at, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
    Err(LockError::Lost {
        resource: cmd.resource,
        reason,
    })
}
