//! redlock-testkit: real `redis-server` masters on free loopback ports (and
//! a fault-injecting proxy in front of one), the one starter behind `redlock-agent dev`, the agent's integration tests,
//! the client's tests, the fault suite and the benchmark.
//!
//! Nothing here knows the agent: it starts and stops Redis processes and
//! names the agent's test-only environment switches, so that the suites
//! that start agents as child processes need not link the agent crate.
//!
//! # Layout
//! - [`bins`]: the workspace's binaries (`redlock-agent`, `redlock-tui`,
//!   `faults`) as tests find them, built before the tests and never by
//!   them; missing or stale ones fail at once with the command to run.
//! - [`server`]: [`RedisServer`], one `redis-server` child process, and
//!   [`Options`], what it runs with (persistence, TLS, replication, memory
//!   limit, ACL users, cluster mode, any other argument).
//! - [`cluster`]: [`RedisCluster`], a real local Redis Cluster (N
//!   primaries, R replicas each) and its faults: a shard restarted empty,
//!   a lagged failover, a slot migration.
//! - [`clock`]: a master's wall clock moved by the test (jumped, frozen,
//!   put back) through a small `LD_PRELOAD` library built with `cc`, for
//!   masters started with [`Options::clock`].
//! - [`proxy`]: [`proxy::Link`], a TCP proxy in front of one master that
//!   adds latency, cuts or blackholes the connections on demand (the fault
//!   suite's links between agents and masters), or keeps the agent's
//!   connections open while the master behind it dies and comes back
//!   ([`proxy::Link::start_keeping`]).
//! - [`switches`]: the names of the agent's test-only environment switches.

//!
//! All but [`switches`] are behind the `servers` feature (on by default):
//! the agent's own build needs only the switches' names.

#[cfg(feature = "servers")]
pub mod bins;
#[cfg(feature = "servers")]
pub mod clock;
#[cfg(feature = "servers")]
pub mod cluster;
#[cfg(feature = "servers")]
pub mod proxy;
#[cfg(feature = "servers")]
pub mod server;
pub mod switches;

#[cfg(feature = "servers")]
pub use clock::{Clock, ClockError};
#[cfg(feature = "servers")]
pub use cluster::{ClusterError, Migration, Primary, RedisCluster};
#[cfg(feature = "servers")]
pub use server::{free_port, redis_server_binary, Options, RedisServer, SpawnError, Tls};
