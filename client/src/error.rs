//! What can go wrong talking to the agent, as one enum callers branch on:
//! the answers an application acts on (`taken`, `lost`, `no_quorum`) have
//! their own variants, every other API error keeps its code, and transport
//! failures say whether the agent could be reached at all.

use std::path::PathBuf;
use std::time::Duration;

use redlock_wire::ErrorCode;

/// Why a call did not give the answer asked for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// 409 `taken`: another holder kept the lock for all of `wait`.
    #[error("taken: {message}")]
    Taken { message: String },
    /// 409 `lost`: an extend did not reach a quorum in time; another client
    /// may hold the lock now. Stop using it.
    #[error("lost: {message}")]
    Lost { message: String },
    /// 503 `no_quorum`: fewer than N/2+1 masters are usable, or (a
    /// release) too many failed to tell whether they held the lock (the
    /// message names them). Worth retrying later.
    #[error("no quorum: {message}")]
    NoQuorum { message: String },
    /// Any other API error, with its status and code (`invalid_resource`,
    /// `ttl_out_of_range`, `too_many_waiters`, ...).
    #[error("{status} {}: {message}", code.as_str())]
    Api {
        status: u16,
        code: ErrorCode,
        message: String,
    },
    /// The socket could not be opened: no agent listens there, or no
    /// permission.
    #[error("cannot connect to {}: {source}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The connection failed during the exchange. For an acquire, the lock
    /// may or may not have been granted; it expires with its TTL.
    #[error("the connection to the agent failed: {0}")]
    Connection(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// No answer within the client's timeout (plus the wait asked for).
    #[error("no answer within {}ms", .0.as_millis())]
    Timeout(Duration),
    /// The agent answered something that is not the documented JSON.
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

impl Error {
    /// The API error code, for errors the agent answered with.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Taken { .. } => Some(ErrorCode::Taken),
            Error::Lost { .. } => Some(ErrorCode::Lost),
            Error::NoQuorum { .. } => Some(ErrorCode::NoQuorum),
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the agent could not be reached or did not answer: the
    /// socket, the connection or the time failed, not the request. Callers
    /// that keep a connection (the TUI) reconnect on these and report the
    /// others as answers.
    pub fn is_transport(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. } | Error::Connection(_) | Error::Timeout(_)
        )
    }

    /// Builds the error for an API error answer.
    pub(crate) fn from_api(status: u16, code: ErrorCode, message: String) -> Error {
        match code {
            ErrorCode::Taken => Error::Taken { message },
            ErrorCode::Lost => Error::Lost { message },
            ErrorCode::NoQuorum => Error::NoQuorum { message },
            code => Error::Api {
                status,
                code,
                message,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_their_variants_and_back() {
        for code in [ErrorCode::Taken, ErrorCode::Lost, ErrorCode::NoQuorum] {
            let e = Error::from_api(409, code, "m".into());
            assert!(!matches!(e, Error::Api { .. }), "{code:?} has a variant");
            assert_eq!(e.code(), Some(code));
        }
        let e = Error::from_api(400, ErrorCode::TtlOutOfRange, "too short".into());
        assert!(matches!(
            e,
            Error::Api {
                status: 400,
                code: ErrorCode::TtlOutOfRange,
                ..
            }
        ));
        assert_eq!(e.to_string(), "400 ttl_out_of_range: too short");
        assert_eq!(Error::Timeout(Duration::from_secs(1)).code(), None);
        assert!(Error::Timeout(Duration::from_secs(1)).is_transport());
        assert!(!e.is_transport());
    }
}
