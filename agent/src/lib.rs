//! redlock-agent: a lock sidecar that runs Redlock over N independent Redis
//! masters and serves it to applications over a Unix socket (HTTP/1.1 + JSON).
//!
//! # Layout
//! - `main.rs`: the thin binary: CLI, config loading, tracing, the runtime
//!   (`agent.workers` threads), exit codes; its `dev.rs` is
//!   `redlock-agent dev` (local masters from `redlock-testkit`, the `dev`
//!   feature, on by default), which the library does not contain.
//! - [`config`]: typed configuration, defaults, validation that reports every
//!   problem at once with its field path: the file (read only when it is a
//!   regular file), the YAML's syntax errors and the walker over its tree,
//!   durations at most a day ([`config::yaml`]), every section but the masters
//!   ([`config::sections`]), the masters with their passwords and TLS files
//!   ([`config::masters`]), their URLs parsed and shown without passwords
//!   ([`config::urls`]), and their hosts resolved so that no two are one
//!   server ([`config::addresses`]).
//! - [`redlock`]: the algorithm, free of transport, of Redis and of metrics:
//!   quorum, a round of votes and the release ([`redlock::round`]: for
//!   one resource, or for several at once, all or none, with one fence),
//!   a grant's validity and drift (pure) and the masters that
//!   hold it ([`redlock::grant`]), fencing ([`redlock::fence`]), tokens,
//!   what one request's rounds saw, for its span ([`redlock::trail`]),
//!   resources, over the
//!   [`redlock::master::Master`] trait, reporting to the
//!   [`redlock::observe::Observer`] it is given. Unit tests run it against
//!   masters in memory. [`redlock::master`] also holds the lock service's
//!   other ports: [`redlock::Store`] (force deletes, announcements,
//!   operator reads, loss notices) and [`redlock::Channels`] (what a
//!   master's pub/sub subscriber serves).
//! - [`node`]: one Redis master behind that trait: its connection
//!   ([`node::conn`]: one server's, or a Redis Cluster's; the lock
//!   commands' script, each node its own copy, and the check that a vote's
//!   answer comes from the master process the agent knows: NOSCRIPT, then
//!   `run_id`) and state (what the config tells it and the detectors of a
//!   quarantine in [`node::settings`]), the lock commands
//!   ([`node::lock`]: votes, fences, extends, releases, and a semaphore's
//!   reads and the bookkeeping notes beside them, sent in batches: what
//!   queued while the previous call was on its way, or during one more
//!   turn of the runtime, goes in one script call, one per slot on a
//!   cluster; each command's letter and
//!   arguments in `node/lock/command.rs`), the other scripts
//!   ([`node::scripts`]), the watch on the master's clock, read in every
//!   vote and probe ([`node::clock`]),
//!   the health probes' commands ([`node::probe`]), the scans and
//!   operator reads ([`node::scan`]), the leak scanner's fenced writes
//!   ([`node::leak`]), force release and announcements
//!   ([`node::store`]), how a master's errors are sorted
//!   ([`node::errors`]),
//!   `check`'s own ([`node::check`]), and the pub/sub subscriber
//!   ([`node::subscriber`]): the only code that talks to Redis for the
//!   lock service. A master that
//!   is a Redis Cluster ([`node::cluster`]) checks its marker per slot
//!   against the serving node's ID and quarantines slots one by one
//!   ([`node::cluster::slots`]); the health task reads its shards
//!   ([`node::cluster::topology`]) and their markers
//!   ([`node::cluster::markers`]: all at first sight, one per shard at
//!   every probe, a shard found without it swept whole), and brings
//!   quarantined slots back ([`node::cluster::readmit`]: witnesses,
//!   readmission), with
//!   scripts that serve many slots of a shard per call
//!   ([`node::cluster::sweep`]); it is scanned, and its per-slot fencing
//!   counters read, shard by shard ([`node::cluster::scan`]).
//! - [`health`]: one task per master that connects, probes, detects restarts
//!   and lost keys (the incarnation marker, evictions), quarantines such a
//!   master (delayed restart) and readmits it by rewriting the marker and
//!   catching its fencing counter up; on a cluster, the same per slot, and
//!   each shard's restarts; topology checks; and readiness
//!   ([`health::readiness()`], in `health/readiness.rs`): whether a lock on
//!   any resource could get a quorum now, counted slot by slot.
//! - [`lock`]: the lock service, the one home of the lock lifecycle:
//!   one acquire for every kind of lock (`lock/acquire.rs`: it checks
//!   the request, runs its rounds, in line when it waits, answers,
//!   records the grant with its kind and counts it; each kind brings
//!   only its contest, what it votes for in a round, beside it: a lock's
//!   there, the others' in their own files), holds ([`lock::holds`]: renewed, and told `lost` the moment
//!   a force release or a master's loss is heard; their events, and a
//!   campaign's and an observer's, on their way to the client in
//!   [`lock::events`]: stamped, never waited for by a renewal, written as
//!   true when written), extend, release, force release (of a lock, a
//!   permit or a leadership alike); the TTL and owner rules, grant bookkeeping
//!   ([`lock::Grants`], in `lock/grants.rs`), waiters ([`lock::waiters`]: per-resource FIFO
//!   queues, in which only the head competes (in a semaphore's, also a
//!   waiter handed a release of its own), woken by releases here (once
//!   queued on the masters, so the next vote rides behind the release)
//!   or, through pub/sub, on other agents, and otherwise voting again
//!   only once the lock can have expired, as the masters said in the
//!   vote that found it taken, [`redlock::round::free_in`]; what each
//!   master's subscriber serves, `lock/waiters/subscriptions.rs`),
//!   locks on several resources at once ([`lock::multi`]: one lock grant
//!   per resource under one token, waiting in every resource's queue at
//!   once, a hold of each told as one stream),
//!   re-entry by the holding process ([`lock::reentry`]: a count over one
//!   grant), read-write locks (a reader's grant is a lock of kind
//!   [`redlock::Kind::Shared`] on the lock's own key, which the vote's
//!   script in `node/conn.rs` keeps a writer's or readers', never both;
//!   several readers per resource in the grant bookkeeping), semaphores ([`lock::semaphores`]: `limit` permits, each a
//!   lock of its own, won by a contest of the waiters' queue; its
//!   hand-offs tested in `lock/semaphores/handoffs.rs`), leader
//!   elections ([`lock::elections`]: leading is holding a fenced lock; the
//!   term is its fence; campaigns, the leader's note, observers), when the
//!   service is idle ([`lock::idle`]: probes slow down and
//!   pub/sub connections close until its next request), tokens kept to the
//!   pod or uid that acquired them ([`lock::isolation`], `socket.isolate`,
//!   for an agent that serves a whole node), each uid's share of the
//!   streams served ([`lock::streams`]: holds, campaigns, observers), the
//!   rate budgets of timer-driven work shared by every resource
//!   ([`lock::budget`]: waiters' retries, observers' reads) and
//!   the operators' listing of lock keys, whose turns semaphore and
//!   leader reads share ([`lock::listing`]). Generic
//!   over [`redlock::Store`]: it imports nothing from [`node`], and its
//!   unit tests run it on masters in memory.
//! - [`metrics`]: every metric, defined in one place, with the closed sets
//!   of its label values (`metrics/labels.rs`); the engine's observer.
//! - [`scanner`]: the leaked-key scan (no TTL, TTL over max, minority),
//!   once per fleet: the agent holding the fleet's scan lock
//!   ([`scanner::lease`]: a fenced Redlock grant on a reserved resource,
//!   kept by extension) scans and repairs with its fence, and writes its
//!   report on every master; every other agent reads the freshest copy
//!   ([`scanner::shared`]) once per interval, or once per
//!   `health.idle_interval` while it is idle, then in its probes' own call
//!   (`scanner/look.rs`).
//! - [`api`]: HTTP routes ([`api::routes`]: routing and the views;
//!   [`api::handlers`]: the requests that take locks (on one resource or
//!   several at once) and permits, to the lock service and back, and what
//!   every route reads and answers with: bodies read and parsed, answers,
//!   errors with their codes; [`api::grants`]: extend, release and force
//!   release of a grant already made), the API's
//!   OpenAPI document with the config's bounds filled in
//!   ([`api::openapi`], `GET /v1/openapi.json`), the
//!   listeners ([`api::server`]: the application socket, the
//!   admin socket, metrics; binding them, [`api::server::bind`]; who each
//!   admits, [`api::server::gate`]; their budgets within the open-files
//!   limit, [`api::server::descriptors`]), each connection's life
//!   ([`api::connection`]: hyper while it has requests, only the socket
//!   while idle), peer credentials with who may connect ([`api::peer`])
//!   and a peer's pod, read from its cgroup ([`api::pod`]); the wire types
//!   are in the `redlock-wire` crate.
//! - [`agent`]: the state shared by every request and its background
//!   tasks; joins the lock service to the Redis masters (`Locks` over
//!   [`node::Node`], one subscriber per master).
//! - [`check`]: `redlock-agent check` past the file: every master
//!   connected at once through the agent's own nodes, and judged usable or
//!   not (unreachable, TLS or AUTH refused, a cluster listed as a single
//!   server or the reverse, a policy that evicts lock keys).
//! - [`daemon`]: binds the listeners, starts the tasks, serves, drains.
//! - [`lock_command`]: `redlock-agent lock -- cmd` and `redlock-agent elect
//!   NAME -- cmd` (the same, while leading an election), `redlock-client`s
//!   of the socket; the command runs under a guardian process
//!   ([`lock_command::guardian`], the hidden `lock-guardian` command) that
//!   stops its whole process tree ([`lock_command::tree`]: its group and
//!   every descendant found in `/proc`), even when `lock` is killed, and
//!   keeps the validity's deadline itself, even when `lock` is stopped;
//!   why `lock` stops, with its exit statuses, in `lock_command/error.rs`.
//!   `lock` takes one resource or several (all or none).
//! - [`shutdown`]: signals that start a drain.
//! - [`telemetry`]: OpenTelemetry traces: the caller's W3C trace context,
//!   the spans of acquires, holds, leaderships, extends and releases
//!   ([`telemetry::spans`]; what their rounds saw comes from the trail the
//!   engine and the waiters note into, [`redlock::trail`], which knows
//!   nothing of traces), and a bounded queue to the OTLP collector that a
//!   lock call never waits for ([`telemetry::export`]). Built by `agent`,
//!   used by `api`; it imports `lock` and `redlock` types, never the reverse.
//!
//! Imports point one way, with no loops: `daemon` → `api` → `agent` →
//! `lock` and `node` (side by side: neither imports the other) →
//! `redlock`; `api` and `agent` → `telemetry` → `lock` and `redlock`;
//! `check` → `agent`, beside `daemon`; `metrics` and `health` beside them.

pub mod agent;
pub mod api;
pub mod check;
pub mod config;
pub mod daemon;
pub mod health;
pub mod lock;
pub mod lock_command;
pub mod metrics;
pub mod node;
pub mod redlock;
pub mod scanner;
pub mod shutdown;
pub mod telemetry;

pub use agent::Agent;
pub use config::Config;
pub use daemon::{run, Bound, StartError};
