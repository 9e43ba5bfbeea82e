//! A master's connection: one multiplexed connection to a single server, or
//! one cluster connection that reaches every shard of a Redis Cluster
//! (routing each command by its key's slot, following `MOVED` and `ASK`).
//! Both are cheap handles to clone; every request shares the one
//! underlying connection (or the cluster's one per node).
//!
//! And how long a master had to answer ([`answer_within`]): the time the
//! agent itself was too busy to write a request or read its answer is the
//! agent's, never the master's.

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
    /// The master had the whole bound of the agent's attention and did not
    /// answer: the master's timeout.
    TimedOut,
    /// The overall limit passed before the master had had its bound: the
    /// agent was too busy to tell (how long it waited in all). Not the
    /// master's failure.
    Backlog(Duration),
}

/// Slices of a master's bound: the agent checks its own lateness this many
/// times, so a stall of the agent is taken out within a slice of when it
/// happened.
const SLICES: u32 = 8;

/// How late a timer fires on a runtime with nothing else to do (tokio's
/// timer wheel ticks in milliseconds): lateness below this is not a stall.
const TIMER_GRAIN: Duration = Duration::from_millis(1);

/// Runs `request` until it is answered, the master has had `bound` of the
/// agent's attention, or `limit` has passed in all.
///
/// The master's time is counted in slices of `bound`: a slice whose timer
/// fired late (the runtime busy with other tasks, the agent's threads not
/// scheduled, the connection's writer or reader not polled) counts only
/// what was left of it after the lateness, none once the lateness reaches
/// the slice. Before the master is said to have timed out, the runtime
/// gets one more turn to deliver an answer that has already arrived.
///
/// ## Behavior
/// - On a responsive agent, a master that does not answer times out after
///   `bound` (plus at most a millisecond per slice of timer grain).
/// - A stalled agent never turns into a master's timeout: past `limit`,
///   the answer is [`Within::Backlog`].
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
    let mut credited = Duration::ZERO;
    tokio::pin!(request);
    loop {
        let armed = Instant::now();
        let left = bound.saturating_sub(credited);
        if left.is_zero() || armed >= end {
            // One more turn of the runtime: an answer already on the socket
            // gets read before anyone is blamed.
            tokio::task::yield_now().await;
            if let Some(result) = request.as_mut().now_or_never() {
                return Within::Answered(result);
            }
            return if left.is_zero() {
                Within::TimedOut
            } else {
                Within::Backlog(started.elapsed())
            };
        }
        let planned = (armed + slice.min(left)).min(end);
        tokio::select! {
            biased;
            result = &mut request => return Within::Answered(result),
            () = tokio::time::sleep_until(planned) => {}
        }
        let late = Instant::now()
            .saturating_duration_since(planned)
            .saturating_sub(TIMER_GRAIN);
        credited += (planned - armed).saturating_sub(late);
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

    #[tokio::test(start_paused = true)]
    async fn an_agent_stalled_past_the_limit_is_its_backlog_not_a_timeout() {
        // Every slice's timer fires a whole slice late: the agent, not the
        // master, had the time.
        let request = futures::future::pending::<RedisResult<()>>();
        let stall = async {
            loop {
                tokio::time::sleep(ms(1)).await;
                // A blocking stretch on the runtime, as a paused clock sees it.
                tokio::time::advance(ms(20)).await;
            }
        };
        let outcome = tokio::select! {
            outcome = answer_within(ms(50), ms(400), request) => outcome,
            () = stall => unreachable!(),
        };
        assert!(matches!(outcome, Within::Backlog(_)), "{outcome:?}");
    }
}
