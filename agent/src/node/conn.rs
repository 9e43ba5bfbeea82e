//! A master's connection: one multiplexed connection to a single server, or
//! one cluster connection that reaches every shard of a Redis Cluster
//! (routing each command by its key's slot, following `MOVED` and `ASK`).
//! Both are cheap handles to clone; every request shares the one
//! underlying connection (or the cluster's one per node).
//!
//! And how long a master had to answer ([`answer_within`]): the time the
//! agent itself was too busy to write a request or read its answer is the
//! agent's, never the master's. And the name a connection shows in the
//! master's `CLIENT LIST` ([`set_name`]).

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

/// A master's connection, of the kind its config names.
#[derive(Clone)]
pub enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Single(_) => f.write_str("Conn::Single"),
            Conn::Cluster(_) => f.write_str("Conn::Cluster"),
        }
    }
}

impl Conn {
    /// Bounds each request on this handle. A cluster connection's bound is
    /// set once, when it is opened (every attempt, and the whole request
    /// with its redirections and retries): this is a no-op for it.
    pub fn set_response_timeout(&mut self, timeout: Duration) {
        if let Conn::Single(conn) = self {
            conn.set_response_timeout(timeout);
        }
    }

    /// The cluster connection, for commands routed to one node.
    pub fn cluster(&self) -> Option<&ClusterConnection> {
        match self {
            Conn::Cluster(conn) => Some(conn),
            Conn::Single(_) => None,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Runs `request` within `bound`. A cluster connection bounds each
/// attempt, but a request to a shard being reconnected after a failover
/// can wait longer than that; a lock request must never hang, so cluster
/// requests also get a timer of their own. A timeout is an I/O timeout,
/// as the connection's own.
pub async fn bounded<T>(
    bound: Duration,
    request: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(bound, request).await {
        Ok(result) => result,
        Err(_) => Err(timed_out()),
    }
}

/// The error of a request that timed out, an I/O timeout as the
/// connection's own.
pub fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "request timed out",
    ))
}

/// What became of a request run by [`answer_within`].
#[derive(Debug)]
pub enum Within<T> {
    /// The master answered, or its connection failed.
    Answered(RedisResult<T>),
    /// The master had the request for the whole bound and no answer had
    /// arrived when the agent last looked: the master's timeout.
    TimedOut,
    /// The overall limit passed before the agent could even tell that the
    /// request was on its way (how long it took in all): the agent was too
    /// busy. Not the master's failure.
    Backlog(Duration),
}

/// Looks per bound: how often the agent checks whether an answer has
/// arrived, and so how much past its bound a master that never answers
/// is given up (a slice at most).
const SLICES: u32 = 8;

/// How late a timer fires on a runtime with nothing else to do (tokio's
/// timer wheel ticks in milliseconds): lateness below this is not a stall.
const TIMER_GRAIN: Duration = Duration::from_millis(1);

/// Turns of the runtime before each look: the connection's reader is a task
/// of its own, and an answer that reached the socket while the agent was
/// busy is delivered once the runtime has worked through the tasks queued
/// ahead of it. At least [`MIN_TURNS`] (the first may only hand the runtime
/// to the reader), then until a turn comes back within [`QUICK_TURN`] (the
/// runtime had next to nothing queued: the reader has run), at most
/// [`MAX_TURNS`].
const MIN_TURNS: usize = 2;
const MAX_TURNS: usize = 64;
const QUICK_TURN: Duration = Duration::from_micros(100);

/// Runs `request` until it is answered, the master has had it for `bound`
/// without answering, or `limit` has passed in all.
///
/// The master's time is counted from when the request is surely on its
/// way, and only up to the last time the agent looked for an answer and
/// found none, so the agent's own stalls are never the master's:
/// - every slice of `bound`, the agent gives its runtime turns until it
///   has worked through what was queued (so the connection's own task
///   writes what is queued and reads what has arrived; see `MIN_TURNS`)
///   and looks: an answer that arrived while the agent was busy is found
///   then, whenever that is;
/// - the request is surely on its way from the first look (the writer had
///   its turns), or from the start when the first slice's timer fired on
///   time (the agent was responsive all along);
/// - the master has timed out once a look at least `bound` after that
///   still finds no answer.
///
/// ## Behavior
/// - A master that answers is never timed out because the agent was
///   slow: its answer is found at the next look.
/// - A master that does not answer times out after `bound` (plus at most a
///   slice), on a busy agent too: the time between looks counts, since the
///   request was on the socket all along.
/// - [`Within::Backlog`] only when `limit` passes before the first look.
/// - The handle `request` runs on must not bound the request below `limit`
///   itself (set its response timeout to `limit`, or to none).
pub async fn answer_within<T>(
    bound: Duration,
    limit: Duration,
    request: impl Future<Output = RedisResult<T>>,
) -> Within<T> {
    let started = Instant::now();
    let end = started + limit.max(bound);
    let slice = (bound / SLICES).max(TIMER_GRAIN);
    // From when the master surely has the request.
    let mut since: Option<Instant> = None;
    tokio::pin!(request);
    loop {
        let planned = match since {
            None => started + slice,
            Some(since) => (Instant::now() + slice).min(since + bound),
        }
        .min(end);
        tokio::select! {
            biased;
            result = &mut request => return Within::Answered(result),
            () = tokio::time::sleep_until(planned) => {}
        }
        let fired = Instant::now();
        for turn in 1..=MAX_TURNS {
            // The real clock: a turn takes real time even on a paused one.
            let before = std::time::Instant::now();
            tokio::task::yield_now().await;
            if let Some(result) = request.as_mut().now_or_never() {
                return Within::Answered(result);
            }
            if turn >= MIN_TURNS && before.elapsed() < QUICK_TURN {
                break;
            }
        }
        let looked = Instant::now();
        match since {
            None if looked >= end => return Within::Backlog(looked - started),
            None if fired.saturating_duration_since(planned) <= TIMER_GRAIN => {
                since = Some(started);
            }
            None => since = Some(looked),
            Some(_) => {}
        }
        if since.is_some_and(|since| looked.saturating_duration_since(since) >= bound) {
            return Within::TimedOut;
        }
    }
}
/// Names `conn` `name` (`CLIENT SETNAME`), so an operator tells a fleet's
/// connections apart in `CLIENT LIST`. `Ok(Err(e))` when the master's ACL
/// refuses it (the documented ACL grants `client|setname`): the
/// connection works on, unnamed. Any other error is the connection's.
///
/// # Errors
/// The connection's, or the master's other than `NOPERM`.
pub async fn set_name(
    conn: &mut MultiplexedConnection,
    name: &str,
) -> RedisResult<Result<(), RedisError>> {
    match redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(name)
        .query_async::<()>(conn)
        .await
    {
        Ok(()) => Ok(Ok(())),
        Err(e) if e.code() == Some("NOPERM") => Ok(Err(e)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_is_the_answer() {
        let request = async {
            tokio::time::sleep(ms(30)).await;
            Ok(7)
        };
        assert!(matches!(
            answer_within(ms(50), ms(1000), request).await,
            Within::Answered(Ok(7))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_master_that_never_answers_times_out_after_its_bound() {
        let started = Instant::now();
        let outcome = answer_within(
            ms(50),
            ms(1000),
            futures::future::pending::<RedisResult<()>>(),
        )
        .await;
        assert!(matches!(outcome, Within::TimedOut), "{outcome:?}");
        let took = started.elapsed();
        assert!(took >= ms(50) && took < ms(100), "{took:?}");
    }

    /// A request whose answer arrives at `at` but is only readable once the
    /// runtime has had a turn after that (as a reply sits on the socket
    /// until the connection's task runs).
    async fn answered_at(at: Instant) -> RedisResult<u8> {
        tokio::time::sleep_until(at).await;
        tokio::task::yield_now().await;
        Ok(1)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_arrived_while_the_agent_was_stalled_is_found() {
        let started = Instant::now();
        // The agent is stalled for 200ms (four bounds) right after sending;
        // the master answered after 5ms, during the stall.
        let request = answered_at(started + ms(5));
        let outcome = tokio::select! {
            outcome = answer_within(ms(50), ms(1000), request) => outcome,
            () = async {
                tokio::task::yield_now().await;
                tokio::time::advance(ms(200)).await;
                futures::future::pending::<()>().await
            } => unreachable!(),
        };
        assert!(matches!(outcome, Within::Answered(Ok(1))), "{outcome:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_agent_stalled_before_its_first_look_does_not_time_the_master_out() {
        // A stall of 80ms (past the 50ms bound) before the first look: the
        // master's time starts at that look, and it answers 10ms later.
        let started = Instant::now();
        let request = answered_at(started + ms(90));
        let outcome = tokio::select! {
            outcome = answer_within(ms(50), ms(1000), request) => outcome,
            () = async {
                tokio::task::yield_now().await;
                tokio::time::advance(ms(80)).await;
                futures::future::pending::<()>().await
            } => unreachable!(),
        };
        assert!(matches!(outcome, Within::Answered(Ok(1))), "{outcome:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_past_the_limit_before_any_look_is_the_agents_backlog() {
        let request = futures::future::pending::<RedisResult<()>>();
        let outcome = tokio::select! {
            outcome = answer_within(ms(50), ms(300), request) => outcome,
            () = async {
                tokio::task::yield_now().await;
                tokio::time::advance(ms(400)).await;
                futures::future::pending::<()>().await
            } => unreachable!(),
        };
        assert!(matches!(outcome, Within::Backlog(_)), "{outcome:?}");
    }
}
