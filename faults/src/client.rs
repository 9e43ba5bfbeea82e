//! The socket API as the harness's clients use it: through `redlock-client`,
//! as applications do, one fresh connection per call (as a short-lived
//! application process would), every call bounded in time, and the agent's
//! refusals as answers rather than errors.
//!
//! ## Behavior
//! - Each call opens its own connection and closes it once answered: a
//!   reused connection would not show that the agent still accepts new
//!   ones (after a restart, a pause, a fuzz case), and idle ones would
//!   count against its `socket.max_connections`.
//! - Each call is bounded by [`SLACK`] plus the wait it asks for (a hold:
//!   until its `acquired` line); past it, [`Error::Timeout`].
//! - A [`Hold`] keeps its connection until dropped; dropping it (or the
//!   process dying) closes it, and the agent releases the lock.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use redlock_client::{
    AcquireOptions, Campaign, CampaignOptions, Error, ErrorCode, Extended, Grant, Hold,
    HoldOptions, Mode, Permit, PermitHold, PermitHoldOptions, PermitOptions,
};
use redlock_wire::{CampaignEvent, HoldEvent, NodesResponse, SummaryResponse};

pub mod multi;

/// How long past the request's own wait an answer may take before the
/// call counts as unanswered.
pub const SLACK: Duration = Duration::from_secs(5);

/// An agent's answer: what was asked for, or the API error it sent.
#[derive(Debug)]
pub enum Answer<T> {
    Ok(T),
    Refused { code: ErrorCode, message: String },
}

/// A call's result as an [`Answer`]: the agent's refusals (`taken`, `lost`,
/// `no_quorum` and every other API error) are answers; what stays an
/// [`Error`] is a transport failure or an answer out of contract.
///
/// # Errors
/// The error when it is not an API error.
fn answer<T>(result: Result<T, Error>) -> Result<Answer<T>, Error> {
    let (code, message) = match result {
        Ok(value) => return Ok(Answer::Ok(value)),
        Err(Error::Taken { message }) => (ErrorCode::Taken, message),
        Err(Error::Lost { message }) => (ErrorCode::Lost, message),
        Err(Error::NoQuorum { message }) => (ErrorCode::NoQuorum, message),
        Err(Error::Api { code, message, .. }) => (code, message),
        Err(e) => return Err(e),
    };
    Ok(Answer::Refused { code, message })
}

/// Whole milliseconds of a duration the agent sent in milliseconds (a
/// validity, a TTL), for the checker's records.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Calls one agent's socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A `redlock-client` of the agent with no connection yet. Its idle
    /// connections go when it is dropped, so one call through it uses a
    /// connection of its own, closed after the answer.
    pub fn fresh(&self) -> redlock_client::Client {
        redlock_client::Client::new(&self.socket).with_timeout(SLACK)
    }

    /// `POST .../acquire`.
    ///
    /// # Errors
    /// When the agent cannot be reached, does not answer in time, or
    /// answers out of contract.
    pub async fn acquire(
        &self,
        resource: &str,
        options: &AcquireOptions,
    ) -> Result<Answer<Grant>, Error> {
        answer(self.fresh().acquire(resource, options).await)
    }

    /// `POST .../extend`: a new TTL from now (`None`: the agent's default).
    ///
    /// # Errors
    /// As [`Client::acquire`].
    pub async fn extend(
        &self,
        resource: &str,
        token: &str,
        ttl: Option<Duration>,
    ) -> Result<Answer<Extended>, Error> {
        answer(self.fresh().extend(resource, token, ttl).await)
    }

    /// `POST .../release`: whether a quorum still held the token.
    ///
    /// # Errors
    /// As [`Client::acquire`].
    pub async fn release(&self, resource: &str, token: &str) -> Result<Answer<bool>, Error> {
        answer(self.fresh().release(resource, token).await)
    }

    /// `POST .../hold`: once `acquired` has arrived, the hold; read its
    /// next events with [`next_event`]. It lasts until dropped.
    ///
    /// # Errors
    /// As [`Client::acquire`]; [`Error::Protocol`] when the stream does not
    /// start with `acquired`.
    pub async fn hold(&self, resource: &str, options: &HoldOptions) -> Result<Answer<Hold>, Error> {
        answer(self.fresh().hold(resource, options).await)
    }

    /// `POST /v1/semaphores/{name}/acquire`.
    ///
    /// # Errors
    /// As [`Client::acquire`].
    pub async fn acquire_permit(
        &self,
        name: &str,
        options: &PermitOptions,
    ) -> Result<Answer<Permit>, Error> {
        answer(self.fresh().acquire_permit(name, options).await)
    }

    /// `POST /v1/semaphores/{name}/hold`: once `acquired` has arrived.
    ///
    /// # Errors
    /// As [`Client::hold`].
    pub async fn hold_permit(
        &self,
        name: &str,
        options: &PermitHoldOptions,
    ) -> Result<Answer<PermitHold>, Error> {
        answer(self.fresh().hold_permit(name, options).await)
    }

    /// `POST /v1/elections/{name}/campaign`: the stream, as soon as the
    /// agent starts it; it lasts until dropped (which resigns).
    ///
    /// # Errors
    /// As [`Client::acquire`]; [`Error::Protocol`] when the answer is not a
    /// stream.
    pub async fn campaign(
        &self,
        name: &str,
        options: &CampaignOptions,
    ) -> Result<Answer<Campaign>, Error> {
        answer(self.fresh().campaign(name, options).await)
    }

    /// Extends what `held` names (a lock or a permit): a new TTL from now.
    ///
    /// # Errors
    /// As [`Client::acquire`].
    pub async fn extend_held(
        &self,
        held: &Held,
        token: &str,
        ttl: Option<Duration>,
    ) -> Result<Answer<Extended>, Error> {
        match held {
            Held::Lock(resource) => self.extend(resource, token, ttl).await,
            Held::Permit { semaphore, .. } => {
                answer(self.fresh().extend_permit(semaphore, token, ttl).await)
            }
            Held::Multi(resources) => self.extend_multi(resources, token, ttl).await,
        }
    }

    /// Releases what `held` names: whether a quorum still held it.
    ///
    /// # Errors
    /// As [`Client::acquire`].
    pub async fn release_held(&self, held: &Held, token: &str) -> Result<Answer<bool>, Error> {
        match held {
            Held::Lock(resource) => self.release(resource, token).await,
            Held::Permit { semaphore, .. } => {
                answer(self.fresh().release_permit(semaphore, token).await)
            }
            Held::Multi(resources) => self.release_multi(resources, token).await,
        }
    }

    /// `GET /healthz`.
    ///
    /// # Errors
    /// When the agent does not answer `{"status": "ok"}`.
    pub async fn healthz(&self) -> Result<(), Error> {
        self.fresh().healthz().await
    }

    /// `GET /v1/nodes`.
    ///
    /// # Errors
    /// When the agent does not answer with its nodes.
    pub async fn nodes(&self) -> Result<NodesResponse, Error> {
        self.fresh().nodes().await
    }

    /// `GET /v1/summary`.
    ///
    /// # Errors
    /// When the agent does not answer with its summary.
    pub async fn summary(&self) -> Result<SummaryResponse, Error> {
        self.fresh().summary().await
    }
}

/// What a plain acquire holds, for its extend and release: a lock, a
/// semaphore's permit, or a grant of several resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Lock(String),
    Permit { semaphore: String, permit: u32 },
    Multi(Vec<String>),
}

/// What a campaign's stream said next.
#[derive(Debug)]
pub enum CampaignNext {
    Event(CampaignEvent),
    /// The stream ended cleanly.
    Ended,
    /// The connection broke, or a line was no event.
    Broken(String),
}

/// Waits for a campaign's next event.
pub async fn next_campaign_event(campaign: &mut Campaign) -> CampaignNext {
    match campaign.next_event().await {
        Ok(Some(event)) => CampaignNext::Event(event),
        Ok(None) => CampaignNext::Ended,
        Err(e) => CampaignNext::Broken(e.to_string()),
    }
}

/// What a hold's stream said next.
#[derive(Debug)]
pub enum HoldNext {
    Event(HoldEvent),
    /// The stream ended cleanly (after `lost`, or at the agent's drain).
    Ended,
    /// The connection broke: the agent died, or sent something that is no event.
    Broken(String),
}

/// Waits for a hold's next event after `acquired`.
pub async fn next_event(hold: &mut Hold) -> HoldNext {
    match hold.next_event().await {
        Ok(Some(event)) => HoldNext::Event(event),
        Ok(None) => HoldNext::Ended,
        Err(e) => HoldNext::Broken(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_answers_and_transport_failures_errors() {
        let refused = |e: Error| match answer::<()>(Err(e)) {
            Ok(Answer::Refused { code, message }) => Some((code, message)),
            _ => None,
        };
        let m = || "m".to_string();
        assert_eq!(
            refused(Error::Taken { message: m() }),
            Some((ErrorCode::Taken, m()))
        );
        assert_eq!(
            refused(Error::Lost { message: m() }),
            Some((ErrorCode::Lost, m()))
        );
        assert_eq!(
            refused(Error::NoQuorum { message: m() }),
            Some((ErrorCode::NoQuorum, m()))
        );
        assert_eq!(
            refused(Error::Api {
                status: 503,
                code: ErrorCode::TooManyWaiters,
                message: m(),
            }),
            Some((ErrorCode::TooManyWaiters, m()))
        );
        for e in [
            Error::Timeout(SLACK),
            Error::Protocol("not JSON".into()),
            Error::Connect {
                socket: "/nowhere".into(),
                source: std::io::ErrorKind::NotFound.into(),
            },
        ] {
            let shown = e.to_string();
            match answer::<()>(Err(e)) {
                Err(e) => assert_eq!(e.to_string(), shown),
                Ok(other) => panic!("{shown} became {other:?}"),
            }
        }
        assert!(matches!(answer(Ok(7)), Ok(Answer::Ok(7))));
    }

    /// Two calls, two connections, although the agent keeps the first
    /// one open (keep-alive): a reused connection would leave the second
    /// accept waiting, and the call unanswered.
    #[tokio::test]
    async fn every_call_opens_its_own_connection() {
        use std::io::{BufRead, BufReader, Write};
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let agent = std::thread::spawn(move || {
            let mut open = Vec::new();
            for _ in 0..2 {
                let (conn, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                // The request head, up to its empty line.
                while reader.read_line(&mut line).unwrap() > 2 {
                    line.clear();
                }
                (&conn)
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                          content-length: 15\r\n\r\n{\"status\":\"ok\"}",
                    )
                    .unwrap();
                open.push(conn);
            }
            open.len()
        });
        let client = Client::new(&socket);
        client.healthz().await.unwrap();
        client.healthz().await.unwrap();
        assert_eq!(agent.join().unwrap(), 2);
    }

    /// A fresh client per call: nothing listens, so the call fails to
    /// connect, and it says so at once rather than after the slack.
    #[tokio::test]
    async fn an_absent_agent_is_unreachable_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::new(dir.path().join("absent.sock"));
        let started = std::time::Instant::now();
        let e = client.healthz().await.unwrap_err();
        assert!(matches!(e, Error::Connect { .. }), "{e}");
        assert!(started.elapsed() < SLACK, "{:?}", started.elapsed());
    }
}
