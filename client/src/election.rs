//! Leader elections: `/v1/elections/{name}/...`. Leading is holding the
//! election's lock on the agent's quorum: a fenced grant renewed while the
//! campaign's stream is open, whose fence is the leadership's term (larger
//! than every earlier term). [`Client::campaign`] streams a campaign's
//! events; [`Client::leader`] answers who leads; [`Client::observe`]
//! streams every change of leader.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_client::{CampaignOptions, Client, Error};
//!
//! # async fn example() -> Result<(), Error> {
//! let client = Client::new("/run/redlock/agent.sock");
//! let options = CampaignOptions::new()
//!     .ttl(Duration::from_secs(5))
//!     .value("10.0.0.7:8080");
//! let mut campaign = client.campaign("scheduler", &options).await?;
//! let Some(term) = campaign.elected().await? else {
//!     return Ok(()); // the campaign ended before this process led
//! };
//! println!("leading, term {term}: pass it with every write");
//! tokio::select! {
//!     () = run_the_scheduler(term) => {}
//!     reason = campaign.lost() => eprintln!("no longer leader ({reason:?})"),
//! }
//! drop(campaign); // resigns at once
//! # Ok(())
//! # }
//! # async fn run_the_scheduler(_term: u64) {}
//! ```

use std::time::Duration;

use hyper::Method;
use redlock_wire::{CampaignEvent, ForceReleaseResponse, Leader, ObserveEvent};
use tokio::time::Instant;

use crate::hold::Lines;
pub use crate::options::CampaignOptions;
use crate::transport::{self, election_path, Conn};
use crate::{json, Client, Error};

/// An open campaign ([`Client::campaign`]): its stream's events, and
/// whether this campaigner leads. Dropping it closes the connection: the
/// agent resigns the leadership at once, or stops campaigning.
///
/// ## Behavior
/// - Returned as soon as the agent answered; the events come as they
///   happen: `waiting` (others lead), `elected`, `renewed`, and `lost`
///   last.
/// - `elected` and every `renewed` read set the end of the leadership's
///   validity, counted from when its line arrived.
/// - The stream ending without `lost` (the agent stopped or crashed)
///   reads as `Ok(None)`: a leader must stop acting as one.
pub struct Campaign {
    election: String,
    lines: Lines,
    term: Option<u64>,
    ttl: Option<Duration>,
    validity: Duration,
    valid_until: Option<Instant>,
    ended: bool,
    /// Kept open for as long as the campaign lives.
    _conn: Conn,
}

impl std::fmt::Debug for Campaign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Campaign")
            .field("election", &self.election)
            .field("term", &self.term)
            .field("validity", &self.validity)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Campaign {
    pub fn election(&self) -> &str {
        &self.election
    }

    /// The term of this campaigner's leadership, once `elected` was read
    /// (it stays after `lost`, to say which term ended).
    pub fn term(&self) -> Option<u64> {
        self.term
    }

    /// The leadership's TTL, once elected.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// The validity last announced (`elected` or `renewed`).
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// When the validity last announced ends; `None` before `elected`.
    /// Past it, another campaigner may lead.
    pub fn valid_until(&self) -> Option<std::time::Instant> {
        self.valid_until.map(Instant::into_std)
    }

    /// Whether this campaigner leads now: elected, not told `lost`, the
    /// stream not ended, and the validity last announced not run out.
    pub fn is_leader(&self) -> bool {
        !self.ended && self.valid_until.is_some_and(|until| Instant::now() < until)
    }

    /// The next event of the stream; `None` once it ended (after `lost`,
    /// or without it: leadership lost too). Cancel-safe: a partial line
    /// stays buffered for the next call.
    ///
    /// # Errors
    /// [`Error::Protocol`] for a line that is not a campaign event,
    /// [`Error::Connection`] when the socket failed; the campaign is over
    /// either way.
    pub async fn next_event(&mut self) -> Result<Option<CampaignEvent>, Error> {
        if self.ended {
            return Ok(None);
        }
        let event = match self.lines.next_as::<CampaignEvent>("campaign event").await {
            Ok(event) => event,
            Err(e) => {
                self.ended = true;
                return Err(e);
            }
        };
        match &event {
            Some(CampaignEvent::Elected {
                term,
                validity_ms,
                ttl_ms,
            }) => {
                self.term = Some(*term);
                self.ttl = Some(Duration::from_millis(*ttl_ms));
                self.validity = Duration::from_millis(*validity_ms);
                self.valid_until = Some(Instant::now() + self.validity);
            }
            Some(CampaignEvent::Renewed { validity_ms }) => {
                self.validity = Duration::from_millis(*validity_ms);
                self.valid_until = Some(Instant::now() + self.validity);
            }
            Some(CampaignEvent::Lost { .. }) | None => self.ended = true,
            Some(CampaignEvent::Waiting { .. }) => {}
        }
        Ok(event)
    }

    /// Waits until this campaigner is elected: its term, or `None` when the
    /// campaign ended first. `waiting` events are read and passed over.
    ///
    /// # Errors
    /// As [`Campaign::next_event`].
    pub async fn elected(&mut self) -> Result<Option<u64>, Error> {
        loop {
            match self.next_event().await? {
                Some(CampaignEvent::Elected { term, .. }) => return Ok(Some(term)),
                Some(CampaignEvent::Lost { .. }) | None => return Ok(None),
                Some(_) => {}
            }
        }
    }

    /// Resolves when the leadership (or the campaign) is over: the agent
    /// said `lost` (its reason), or the stream ended or failed (`None`).
    /// Renewals read on the way move [`Campaign::valid_until`]. Cancel-safe.
    pub async fn lost(&mut self) -> Option<String> {
        loop {
            match self.next_event().await {
                Ok(Some(CampaignEvent::Lost { reason })) => return Some(reason),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Resigns (or stops campaigning): closes the connection. The same as
    /// dropping it, said out loud.
    pub fn resign(self) {}
}

/// An open `observe` stream ([`Client::observe`]): the leader when it
/// started, then every change. Dropping it closes the connection.
pub struct Observer {
    election: String,
    lines: Lines,
    _conn: Conn,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.election)
            .finish_non_exhaustive()
    }
}

impl Observer {
    pub fn election(&self) -> &str {
        &self.election
    }

    /// The next change: a leader (with its term) or none; `None` when the
    /// stream ended. Cancel-safe.
    ///
    /// # Errors
    /// [`Error::Protocol`] for a line that is not an observe event,
    /// [`Error::Connection`] when the socket failed.
    pub async fn next_event(&mut self) -> Result<Option<ObserveEvent>, Error> {
        self.lines.next_as("observe event").await
    }
}

impl Client {
    /// `POST /v1/elections/{name}/campaign`: campaigns for leadership of
    /// `name`, returned as soon as the agent starts the stream; read its
    /// events with [`Campaign::next_event`] (or [`Campaign::elected`], then
    /// [`Campaign::lost`]). Dropping the campaign resigns.
    ///
    /// # Errors
    /// [`Error::Api`] for a refused request (`invalid_resource`,
    /// `ttl_out_of_range`, a value too long, ...), [`Error::Protocol`] when
    /// the answer is not an NDJSON stream, or a transport error.
    pub async fn campaign(&self, name: &str, options: &CampaignOptions) -> Result<Campaign, Error> {
        let limit = self.transport.timeout();
        let start = transport::open_stream(
            &self.transport,
            Method::POST,
            election_path(name, "campaign"),
            Some(json(options.request())),
        );
        let (body, conn) = tokio::time::timeout(limit, start)
            .await
            .map_err(|_| Error::Timeout(limit))??;
        Ok(Campaign {
            election: name.to_string(),
            lines: Lines::new(body),
            term: None,
            ttl: None,
            validity: Duration::ZERO,
            valid_until: None,
            ended: false,
            _conn: conn,
        })
    }

    /// `GET /v1/elections/{name}`: who leads now.
    ///
    /// ```no_run
    /// # use redlock_client::{Client, Error, ErrorCode};
    /// # async fn example(client: Client) -> Result<(), Error> {
    /// match client.leader("scheduler").await {
    ///     Ok(leader) => println!("term {:?}: {:?}", leader.term, leader.value),
    ///     Err(e) if e.code() == Some(ErrorCode::NoLeader) => println!("nobody leads"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Api`] with [`crate::ErrorCode::NoLeader`] (404) when no
    /// campaigner leads; otherwise an API or transport error.
    pub async fn leader(&self, name: &str) -> Result<Leader, Error> {
        self.get(election_path(name, "")).await
    }

    /// `POST /v1/elections/{name}/force-release`: for operators, on the
    /// admin socket, ends the leadership of `name` whoever holds it, as
    /// [`Client::force_release`] does a lock: the leader's campaign hears
    /// `lost` (`force_released`) at once, and another campaigner is
    /// elected with a larger term.
    ///
    /// # Errors
    /// [`Error::Api`] for a refused request (`forbidden` on the
    /// application socket), or a transport error.
    pub async fn force_release_leadership(
        &self,
        name: &str,
    ) -> Result<ForceReleaseResponse, Error> {
        self.transport
            .call(
                Method::POST,
                election_path(name, "force-release"),
                None,
                Duration::ZERO,
            )
            .await
    }

    /// `GET /v1/elections/{name}/observe`: the leader now, then every
    /// change, as a stream.
    ///
    /// ```no_run
    /// # use redlock_client::{Client, Error, ObserveEvent};
    /// # async fn example(client: Client) -> Result<(), Error> {
    /// let mut observer = client.observe("scheduler").await?;
    /// while let Some(event) = observer.next_event().await? {
    ///     match event {
    ///         ObserveEvent::Leader(leader) => println!("led by {:?}", leader.value),
    ///         ObserveEvent::NoLeader { .. } => println!("nobody leads"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Client::campaign`].
    pub async fn observe(&self, name: &str) -> Result<Observer, Error> {
        let limit = self.transport.timeout();
        let start = transport::open_stream(
            &self.transport,
            Method::GET,
            election_path(name, "observe"),
            None,
        );
        let (body, conn) = tokio::time::timeout(limit, start)
            .await
            .map_err(|_| Error::Timeout(limit))??;
        Ok(Observer {
            election: name.to_string(),
            lines: Lines::new(body),
            _conn: conn,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A fake agent answering one request with `lines` as a chunked
    /// NDJSON stream, then keeping the connection open until told.
    async fn streaming_agent(
        lines: &'static [&'static str],
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed before its request");
                head.extend_from_slice(&buf[..n]);
            }
            let mut answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            for line in lines {
                let line = format!("{line}\n");
                answer.extend_from_slice(format!("{:x}\r\n", line.len()).as_bytes());
                answer.extend_from_slice(line.as_bytes());
                answer.extend_from_slice(b"\r\n");
            }
            stream.write_all(&answer).await.unwrap();
            let _ = rx.await;
            drop(stream);
        });
        (dir, socket, tx)
    }

    #[tokio::test]
    async fn a_campaign_reads_waiting_elected_renewed_and_lost() {
        let (_dir, socket, done) = streaming_agent(&[
            r#"{"event":"waiting","leader":{"election":"s","agent":"a2","term":7,"validity_ms":900}}"#,
            r#"{"event":"elected","term":9,"validity_ms":4000,"ttl_ms":5000}"#,
            r#"{"event":"renewed","validity_ms":4500}"#,
            r#"{"event":"lost","reason":"renew_failed"}"#,
        ])
        .await;
        let client = Client::new(&socket);
        let mut campaign = client
            .campaign("s", &CampaignOptions::new().value("v"))
            .await
            .unwrap();
        assert!(!campaign.is_leader());
        assert_eq!(campaign.elected().await.unwrap(), Some(9));
        assert!(campaign.is_leader());
        assert_eq!(campaign.ttl(), Some(Duration::from_secs(5)));
        assert_eq!(
            campaign.next_event().await.unwrap(),
            Some(CampaignEvent::Renewed { validity_ms: 4500 })
        );
        assert_eq!(campaign.validity(), Duration::from_millis(4500));
        assert_eq!(campaign.lost().await.as_deref(), Some("renew_failed"));
        assert!(!campaign.is_leader());
        assert_eq!(campaign.term(), Some(9));
        assert_eq!(campaign.next_event().await.unwrap(), None);
        let _ = done.send(());
    }

    #[tokio::test]
    async fn an_observer_reads_leaders_and_their_absence() {
        let (_dir, socket, done) = streaming_agent(&[
            r#"{"event":"leader","election":"s","agent":"a1","term":7,"validity_ms":900}"#,
            r#"{"event":"no_leader","election":"s"}"#,
        ])
        .await;
        let client = Client::new(&socket);
        let mut observer = client.observe("s").await.unwrap();
        match observer.next_event().await.unwrap() {
            Some(ObserveEvent::Leader(leader)) => {
                assert_eq!(
                    (leader.term, leader.agent.as_deref()),
                    (Some(7), Some("a1"))
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            observer.next_event().await.unwrap(),
            Some(ObserveEvent::NoLeader {
                election: "s".into()
            })
        );
        let _ = done.send(());
    }
}
