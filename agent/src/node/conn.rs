//! A master's connection: one multiplexed connection to a single server, or
//! one cluster connection that reaches every shard of a Redis Cluster
//! (routing each command by its key's slot, following `MOVED` and `ASK`).
//! Both are cheap handles to clone; every request shares the one
//! underlying connection (or the cluster's one per node).

use std::time::Duration;

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
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "request timed out",
        ))),
    }
}
