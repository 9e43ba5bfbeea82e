//! Why `lock` (or `elect`) stopped before or instead of the command's own
//! exit, with the exit status each gives, and the error it reports for a
//! hold the agent did not grant.

use std::path::PathBuf;

use redlock_client::Error;

use super::{exit, LockCommand};

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
    /// `what`: the lock on the resource, or the leadership of the election
    /// ([`LockCommand::what`]).
    #[error("{what} was lost ({reason}); the command was stopped")]
    Lost { what: String, reason: String },
    #[error("cannot run {command:?}: {error}")]
    CannotRun { command: String, error: String },
    #[error(
        "stopped by {}{}",
        signal_name(*signal),
        match (*waiting, *elect) {
            (true, false) => " while waiting for the lock",
            (true, true) => " while campaigning for the leadership",
            (false, false) => "; the command's processes were stopped and the lock released",
            (false, true) => "; the command's processes were stopped and the leadership resigned",
        }
    )]
    Signaled {
        signal: i32,
        waiting: bool,
        /// Under `elect`: a leadership, not a lock.
        elect: bool,
    },
}

impl LockError {
    pub fn exit_code(&self) -> u8 {
        match self {
            LockError::Unreachable(..) | LockError::NoQuorum(_) => exit::UNAVAILABLE,
            LockError::NotAcquired { .. } => exit::NOT_ACQUIRED,
            LockError::Refused(_) => exit::USAGE,
            LockError::Lost { .. } => exit::LOST,
            LockError::CannotRun { .. } => exit::CANNOT_RUN,
            LockError::Signaled { signal, .. } => u8::try_from(128 + signal).unwrap_or(255),
        }
    }
}

/// SIGTERM, SIGINT or SIGHUP by name, any other by number.
fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGHUP => "SIGHUP".into(),
        other => format!("signal {other}"),
    }
}

/// The error `lock` reports for a hold the agent did not grant.
pub(super) fn refused(cmd: &LockCommand, error: Error) -> LockError {
    match error {
        Error::Taken { .. } | Error::Api { status: 409, .. } => LockError::NotAcquired {
            resource: cmd.resources().join(", "),
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
            what: cmd.what(),
            reason: "the agent ended the hold before it began".into(),
        },
        Error::Lost { message } | Error::Api { message, .. } => LockError::Refused(message),
        other => LockError::Refused(other.to_string()),
    }
}
