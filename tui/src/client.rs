//! The connection to the agent, as a state machine the header shows:
//! `Connecting` → `Connected` → (the socket fails) → `Reconnecting` with a
//! retry time → `Connecting` → …
//!
//! It runs in its own tokio task and talks to the app only through two
//! channels: it sends [`Event`]s (state changes, each endpoint's answer, the
//! outcome of a force release) and receives [`Command`]s. The render path
//! never waits on the socket.
//!
//! The requests themselves go through `redlock-client`, the one client of
//! the agent's API (paths, percent-encoding, decoding, typed errors).
//!
//! ## Behavior
//! - One HTTP/1.1 connection over the Unix socket, kept open across polls
//!   (the client's pool holds it between requests, which run one at a time).
//!   Every `refresh` it asks `/v1/nodes`, `/v1/locks`, `/v1/leaks` and
//!   `/v1/summary` in turn and sends each answer as soon as it arrives, so a
//!   slow endpoint does not hold back the others. `/v1/locks` carries the
//!   app's [`Query`] (the server-side prefix and how many locks to list),
//!   and while a lock's detail is open `/v1/locks/{resource}` is asked
//!   first (not for a permit or a leadership, whose names it refuses). On
//!   the primitives view, each semaphore and election named in that
//!   listing is then asked about (`/v1/semaphores/{name}`,
//!   `/v1/elections/{name}`), in the same poll.
//! - A new [`Query`] polls at once: a poll under way (say, a slow listing
//!   of 100,000 keys) is abandoned and its connection closed, which also
//!   stops the listing on the agent; the next request opens a fresh one.
//! - A request that fails on the socket (refused, reset, closed, or no
//!   answer within [`REQUEST_TIMEOUT`]) drops the connection; the next
//!   attempt waits by capped exponential [`Backoff`], reset on success.
//! - An answer that is an API error (a `404 not_found` from an agent that
//!   does not serve the endpoint yet) or not the expected JSON is reported
//!   for that endpoint only; the connection stays up.
//! - A force release asked for while waiting to reconnect fails at once
//!   with "not connected"; it is never held for a later connection.
//! - The task ends when the app drops its side of either channel.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlock_client::{Error, ErrorCode, LocksQuery};
use redlock_wire::{
    ForceReleaseResponse, LeaksResponse, LockResponse, LocksResponse, NodesResponse,
    SummaryResponse,
};
use tokio::sync::{mpsc, watch};

use crate::state::primitives::{Answers, Kind, Names};
use tokio::task::JoinHandle;

/// Longest wait for the socket to accept or for one answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Locks the agent lists when the app does not ask for more (its default).
pub const DEFAULT_LIMIT: usize = 1000;

/// Most semaphores and elections asked about in one poll, together: a
/// listing of thousands of them must not turn a poll into thousands of
/// requests. Those beyond show `-`.
pub const MAX_PRIMITIVES: usize = 64;

/// What the app wants of `/v1/locks`, changed as the user types and scrolls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Only resources that start with this (the agent filters); "" for all.
    pub prefix: String,
    /// How many locks to list.
    pub limit: usize,
    /// The lock whose detail is open: asked by name every poll.
    pub detail: Option<String>,
    /// Ask `/v1/locks` at all: only while the locks or primitives view is
    /// on screen, so a TUI left on another view does not scan the masters
    /// every poll.
    pub list: bool,
    /// After the listing, ask `/v1/semaphores/{name}` and
    /// `/v1/elections/{name}` for the names in it (at most
    /// [`MAX_PRIMITIVES`]): only while the primitives view is on screen.
    pub primitives: bool,
}

impl Default for Query {
    fn default() -> Query {
        Query {
            prefix: String::new(),
            limit: DEFAULT_LIMIT,
            detail: None,
            list: true,
            primitives: false,
        }
    }
}

impl Query {
    /// The `/v1/locks` request: the prefix, and the limit when it is not
    /// the agent's default.
    pub fn locks_query(&self) -> LocksQuery {
        let mut query = LocksQuery::new().prefix(self.prefix.clone());
        if self.limit != DEFAULT_LIMIT {
            query = query.limit(self.limit);
        }
        query
    }

    /// `/v1/locks` with the prefix and limit, percent-encoded; the bare
    /// path for the agent's defaults.
    pub fn locks_path(&self) -> String {
        self.locks_query().path()
    }
}

/// Where the connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conn {
    /// Opening the socket (`attempt` 0 is the first try).
    Connecting {
        attempt: u32,
    },
    Connected,
    /// The last attempt or the open connection failed; the next attempt
    /// starts at `retry_at`.
    Reconnecting {
        retry_at: Instant,
        attempt: u32,
        error: String,
    },
}

/// Capped exponential backoff: `base`, `2·base`, `4·base`, … up to `cap`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
}

impl Default for Backoff {
    /// 1s, 2s, 4s, 8s, then every 10s.
    fn default() -> Backoff {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(10))
    }
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            failures: 0,
        }
    }

    /// The wait after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 1_u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.failures = self.failures.saturating_add(1);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// An endpoint's answer: the body, or why there is none (an API error or
/// an unexpected body), worded for the view's notice line.
pub type Reply<T> = Result<T, String>;

/// One endpoint's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Nodes(Reply<NodesResponse>),
    Locks(Reply<LocksResponse>),
    /// `GET /v1/locks/{resource}` for the open detail pane.
    Lock(String, Reply<LockResponse>),
    /// With the wall clock (Unix ms) when it was asked, for scan ages.
    Leaks(Reply<LeaksResponse>, u64),
    Summary(Reply<SummaryResponse>),
    /// The semaphores and elections of the listing just sent, with the
    /// wall clock (Unix ms) when they were asked, for leaders' ages.
    Primitives(Answers, u64),
}

/// What the client tells the app. Not boxed: a few events a second, each
/// moved once through a channel.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Event {
    Conn(Conn),
    /// An answer, with the instant its request was sent: TTLs in it were
    /// read after that, so countdowns from it never overstate.
    Polled {
        at: Instant,
        update: Update,
    },
    /// The outcome of a [`Command::ForceRelease`].
    Released {
        resource: String,
        result: Result<ForceReleaseResponse, String>,
    },
}

/// What the app asks of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `POST /v1/locks/{resource}/force-release`, then poll at once.
    ForceRelease(String),
    /// `POST /v1/semaphores/{semaphore}/force-release` of one permit, then
    /// poll at once.
    ForceReleasePermit { semaphore: String, permit: u32 },
    /// `POST /v1/elections/{election}/force-release`, then poll at once.
    ForceReleaseLeadership(String),
}

impl Command {
    /// What the command force-releases, as the flash names it: the lock's
    /// resource, a permit of a semaphore or an election's leadership.
    pub fn what(&self) -> String {
        match self {
            Command::ForceRelease(resource) => resource.clone(),
            Command::ForceReleasePermit { semaphore, permit } => {
                format!("permit {permit} of semaphore {semaphore}")
            }
            Command::ForceReleaseLeadership(election) => {
                format!("the leadership of election {election}")
            }
        }
    }

    /// Sends the command: its route, and the agent's answer.
    async fn send(
        &self,
        agent: &redlock_client::Client,
    ) -> (String, Result<ForceReleaseResponse, Error>) {
        use redlock_client::{election_path, lock_path, semaphore_path};
        match self {
            Command::ForceRelease(resource) => (
                lock_path(resource, "force-release"),
                agent.force_release(resource).await,
            ),
            Command::ForceReleasePermit { semaphore, permit } => (
                semaphore_path(semaphore, "force-release"),
                agent.force_release_permit(semaphore, *permit).await,
            ),
            Command::ForceReleaseLeadership(election) => (
                election_path(election, "force-release"),
                agent.force_release_leadership(election).await,
            ),
        }
    }
}

/// Where and how often to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub socket: PathBuf,
    /// Time between the starts of two polls.
    pub refresh: Duration,
    /// Longest wait to connect or for one answer; see [`REQUEST_TIMEOUT`].
    pub timeout: Duration,
}

/// Starts the client task on the current tokio runtime, with the default
/// [`Query`] for good.
pub fn spawn(
    options: Options,
    events: mpsc::Sender<Event>,
    commands: mpsc::Receiver<Command>,
) -> JoinHandle<()> {
    let (_, query) = watch::channel(Query::default());
    spawn_with_query(options, events, commands, query)
}

/// Starts the client task; every change of `query` polls at once.
pub fn spawn_with_query(
    options: Options,
    events: mpsc::Sender<Event>,
    commands: mpsc::Receiver<Command>,
    query: watch::Receiver<Query>,
) -> JoinHandle<()> {
    tokio::spawn(
        Client {
            options,
            events,
            commands,
            query,
        }
        .run(),
    )
}

struct Client {
    options: Options,
    events: mpsc::Sender<Event>,
    commands: mpsc::Receiver<Command>,
    query: watch::Receiver<Query>,
}

/// Resolves when `query` changes; never once its sender is gone.
async fn changed(query: &mut watch::Receiver<Query>) {
    if query.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The app is gone: stop.
struct Stop;

/// An answer for the app: the body, or the API error (or unexpected body)
/// worded as `GET /v1/locks: 404 not_found: no such endpoint: /v1/locks`.
/// `Err` when the request failed on the socket: the connection is unusable.
fn worded<T>(method: &str, path: &str, answer: Result<T, Error>) -> Result<Reply<T>, Error> {
    match answer {
        Ok(body) => Ok(Ok(body)),
        Err(e) if e.is_transport() => Err(e),
        Err(e) => Ok(Err(format!("{method} {path}: {e}"))),
    }
}

impl Client {
    async fn run(mut self) {
        let mut backoff = Backoff::default();
        loop {
            let attempt = backoff.failures();
            if self
                .send(Event::Conn(Conn::Connecting { attempt }))
                .await
                .is_err()
            {
                return;
            }
            // A fresh client per connection: nothing of a failed one is
            // reused.
            let agent = redlock_client::Client::new(&self.options.socket)
                .with_timeout(self.options.timeout);
            let error = match agent.connect().await {
                Ok(()) => {
                    backoff.reset();
                    if self.send(Event::Conn(Conn::Connected)).await.is_err() {
                        return;
                    }
                    match self.serve(&agent).await {
                        Ok(Stop) => return,
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            };
            let delay = backoff.next_delay();
            let retry_at = Instant::now() + delay;
            let reconnecting = Conn::Reconnecting {
                retry_at,
                attempt: backoff.failures(),
                error: error.to_string(),
            };
            if self.send(Event::Conn(reconnecting)).await.is_err() {
                return;
            }
            if let Err(Stop) = self.wait_disconnected(delay).await {
                return;
            }
        }
    }

    async fn send(&self, event: Event) -> Result<(), Stop> {
        self.events.send(event).await.map_err(|_| Stop)
    }

    /// Waits out a backoff, refusing commands meanwhile.
    async fn wait_disconnected(&mut self, delay: Duration) -> Result<(), Stop> {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return Ok(()),
                command = self.commands.recv() => match command {
                    None => return Err(Stop),
                    Some(command) => {
                        self.send(Event::Released {
                            resource: command.what(),
                            result: Err("not connected to the agent".to_string()),
                        })
                        .await?;
                    }
                },
            }
        }
    }

    /// Polls over `agent` until a request fails on the socket (`Err`) or
    /// the app is gone (`Ok(Stop)`).
    async fn serve(&mut self, agent: &redlock_client::Client) -> Result<Stop, Error> {
        let mut tick = tokio::time::interval(self.options.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut query = self.query.clone();
        query.mark_unchanged();
        let mut again = false;
        loop {
            if std::mem::take(&mut again) {
                tick.reset();
            } else {
                tokio::select! {
                _ = tick.tick() => {}
                () = changed(&mut query) => tick.reset(),
                command = self.commands.recv() => match command {
                    None => return Ok(Stop),
                    Some(command) => {
                        let (path, answer) = command.send(agent).await;
                        let (result, failed) = match worded("POST", &path, answer) {
                            Ok(reply) => (reply, None),
                            Err(e) => (Err(e.to_string()), Some(e)),
                        };
                        let resource = command.what();
                        if self.send(Event::Released { resource, result }).await.is_err() {
                            return Ok(Stop);
                        }
                        if let Some(e) = failed {
                            return Err(e);
                        }
                        // Polled just below, to show the outcome now; the
                        // next tick is a full period after that.
                        tick.reset();
                    }
                },
                }
            }
            let asked = query.borrow_and_update().clone();
            let finished = {
                let poll = self.poll(agent, &asked);
                tokio::pin!(poll);
                tokio::select! {
                    result = &mut poll => Some(result),
                    () = changed(&mut query) => None,
                }
            };
            match finished {
                Some(result) => {
                    if let Err(Stop) = result? {
                        return Ok(Stop);
                    }
                }
                None => {
                    // The answer under way is for an old query: dropping
                    // the poll closed its connection (the agent stops the
                    // listing); ask again, on a fresh one.
                    again = true;
                }
            }
        }
    }

    /// One round over the four endpoints (five with a detail open).
    async fn poll(
        &self,
        agent: &redlock_client::Client,
        query: &Query,
    ) -> Result<Result<(), Stop>, Error> {
        macro_rules! ask {
            ($path:expr, $call:expr, $wrap:expr) => {{
                let at = Instant::now();
                let reply = worded("GET", &$path, $call.await)?;
                if self
                    .send(Event::Polled {
                        at,
                        update: $wrap(reply),
                    })
                    .await
                    .is_err()
                {
                    return Ok(Err(Stop));
                }
            }};
        }
        // A permit's or a leadership's resource has spaces, which
        // `/v1/locks/{resource}` refuses: its pane shows the listing's row.
        let named = query.detail.as_ref().filter(|r| Kind::of(r) == Kind::Lock);
        if let Some(resource) = named {
            ask!(
                redlock_client::resource_path(resource),
                agent.lock_info(resource),
                |reply| Update::Lock(resource.clone(), reply)
            );
        }
        ask!("/v1/nodes", agent.nodes(), Update::Nodes);
        let wall_ms = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        };
        if query.list {
            let locks = query.locks_query();
            let at = Instant::now();
            let reply = worded("GET", &locks.path(), agent.locks_page(&locks).await)?;
            let names = match (&reply, query.primitives) {
                (Ok(listing), true) => Names::of(listing.locks.iter().map(|l| l.resource.as_str())),
                _ => Names::default(),
            };
            if self
                .send(Event::Polled {
                    at,
                    update: Update::Locks(reply),
                })
                .await
                .is_err()
            {
                return Ok(Err(Stop));
            }
            if query.primitives {
                let at = Instant::now();
                let wall = wall_ms();
                let answers = ask_primitives(agent, &names).await?;
                if self
                    .send(Event::Polled {
                        at,
                        update: Update::Primitives(answers, wall),
                    })
                    .await
                    .is_err()
                {
                    return Ok(Err(Stop));
                }
            }
        }
        let wall_ms = wall_ms();
        ask!("/v1/leaks", agent.leaks(), |reply| Update::Leaks(
            reply, wall_ms
        ));
        ask!("/v1/summary", agent.summary(), Update::Summary);
        Ok(Ok(()))
    }
}

/// Asks the agent about the semaphores and elections in `names`, the
/// first [`MAX_PRIMITIVES`] of them. `Err` when the socket failed.
async fn ask_primitives(agent: &redlock_client::Client, names: &Names) -> Result<Answers, Error> {
    let mut answers = Answers::default();
    let mut budget = MAX_PRIMITIVES;
    for name in names.semaphores.iter().take(budget) {
        let path = redlock_client::semaphore_path(name, "");
        let reply = worded("GET", &path, agent.semaphore(name).await)?;
        answers.semaphores.push((name.clone(), reply));
    }
    budget -= answers.semaphores.len();
    for name in names.elections.iter().take(budget) {
        let path = redlock_client::election_path(name, "");
        let reply = match agent.leader(name).await {
            Err(e) if e.code() == Some(ErrorCode::NoLeader) => Ok(None),
            answer => worded("GET", &path, answer.map(Some))?,
        };
        answers.elections.push((name.clone(), reply));
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut backoff = Backoff::default();
        let delays: Vec<u64> = (0..6).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff.failures(), 6);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn backoff_does_not_overflow_after_many_failures() {
        let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
        for _ in 0..1_000 {
            assert!(backoff.next_delay() <= Duration::from_secs(30));
        }
        assert_eq!(backoff.next_delay(), Duration::from_secs(30));
    }

    #[test]
    fn locks_paths_carry_the_query_only_when_it_differs() {
        assert_eq!(Query::default().locks_path(), "/v1/locks");
        let query = Query {
            prefix: "orders/4".into(),
            limit: 2000,
            detail: None,
            list: true,
            primitives: false,
        };
        assert_eq!(query.locks_path(), "/v1/locks?prefix=orders%2F4&limit=2000");
    }

    #[test]
    fn api_errors_are_worded_with_their_code_and_transport_errors_pass_up() {
        let answer: Result<LocksResponse, Error> = Err(Error::Api {
            status: 404,
            code: ErrorCode::NotFound,
            message: "no such endpoint: /v1/locks".into(),
        });
        let reply = worded("GET", "/v1/locks", answer).unwrap();
        assert_eq!(
            reply.unwrap_err(),
            "GET /v1/locks: 404 not_found: no such endpoint: /v1/locks"
        );
        let answer: Result<LocksResponse, Error> = Err(Error::Protocol("502 Bad Gateway".into()));
        assert_eq!(
            worded("GET", "/v1/locks", answer).unwrap().unwrap_err(),
            "GET /v1/locks: unexpected answer: 502 Bad Gateway"
        );
        let answer: Result<LocksResponse, Error> = Err(Error::Timeout(Duration::from_millis(300)));
        let error = worded("GET", "/v1/locks", answer).unwrap_err();
        assert_eq!(error.to_string(), "no answer within 300ms");
    }
}
