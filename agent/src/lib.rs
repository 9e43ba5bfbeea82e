//! redlock-agent: a lock sidecar that runs Redlock over N independent Redis
//! masters and serves it to applications over a Unix socket (HTTP/1.1 + JSON).
//!
//! # Layout
//! - `main.rs`: the thin binary: CLI, config loading, tracing, exit codes.
//! - [`config`]: typed configuration, defaults, validation that reports every
//!   problem at once with its field path.
//! - [`redlock`]: the algorithm, free of transport: quorum, validity and drift
//!   math ([`redlock::validity`], pure), tokens, resources, the
//!   compare-and-set scripts, and [`redlock::node`], one master connection.
//! - [`health`]: one task per master that connects, probes, detects restarts
//!   and lost keys (the incarnation marker, evictions), quarantines such a
//!   master (delayed restart) and readmits it by rewriting the marker;
//!   topology checks.
//! - [`grants`]: the locks this agent granted and the process that asked
//!   for each (for `/v1/locks` and metrics).
//! - [`holds`]: locks tied to a client's connection: renewal, loss notices,
//!   release when the connection closes.
//! - [`locks`]: the lock keys on the masters as operators read them:
//!   `/v1/locks` (prefix, cursor paging, masters it could not read),
//!   `/v1/locks/{resource}`, on reader connections apart from the lock
//!   path; force release (admin socket only).
//! - [`metrics`]: every metric, defined in one place.
//! - [`scanner`]: the leaked-key scan (no TTL, TTL over max, minority).
//! - [`waiters`]: per-resource FIFO queues; only the head competes, woken by
//!   releases here or, through pub/sub, on other agents.
//! - [`api`]: HTTP routes ([`api::routes`]), the listeners
//!   ([`api::server`]: the application socket, the admin socket, metrics)
//!   and peer credentials with who may connect ([`api::peer`]); the wire
//!   types are in the `redlock-wire` crate.
//! - [`agent`]: the shared state and `run`, which wires the rest together.
//! - [`dev`]: the local cluster of `redlock-agent dev`: masters from
//!   `redlock-testkit` and the config over them.
//! - [`lock_command`]: `redlock-agent lock -- cmd`, a `redlock-client` of
//!   the socket.
//! - [`shutdown`]: signals that start a drain.
//!
//! Data flows one way: socket → routes → redlock → nodes → Redis, and back.

pub mod agent;
pub mod api;
pub mod config;
pub mod dev;
pub mod grants;
pub mod health;
pub mod holds;
pub mod lock_command;
pub mod locks;
pub mod metrics;
pub mod redlock;
pub mod scanner;
pub mod shutdown;
pub mod waiters;

pub use agent::{run, Agent, Bound};
pub use config::Config;
