//! The fault suite of redlock-agent: real masters, real agents as child
//! processes, real client processes, a nemesis that breaks them, and a
//! checker that says whether Redlock's promise held.
//!
//! # Layout
//! - [`clock`]: `CLOCK_MONOTONIC` readings shared with child processes.
//! - [`http`]: a raw HTTP/1.1 client over the Unix socket, for requests
//!   no well-behaved client sends and answers read as sent: the fuzzer's,
//!   and the load's refusals judged against the OpenAPI document.
//! - [`client`]: the socket API through `redlock-client`, one fresh
//!   connection per call, the agent's refusals as answers (locks on
//!   several resources at once through [`http`], in [`client::multi`]).
//! - [`proxy`]: the fault-injecting TCP proxy (from `redlock-testkit`),
//!   one per agent-master link; its upstream can be switched (a failover
//!   behind a fixed address), and it can keep the agent's connections open
//!   while the master behind it dies and comes back.
//! - [`cluster`]: masters (single servers behind links, or Redis
//!   Clusters reached directly), links (some keeping the agent's
//!   connections open) and agent processes of one run; flushes, evictions,
//!   failovers, moved clocks and snapshot restores of masters, shard faults
//!   of cluster masters.
//! - [`checker`]: critical sections on one clock; safety violations,
//!   overruns, leaks, fences; semaphores over their limit, two leaders at
//!   once, terms out of order; a resource held by two grants at once when
//!   one of them is of several resources; a writer beside a reader.
//! - [`observer`]: reads lock keys on the masters directly for the checker
//!   (on a cluster master, on the shard serving each key).
//! - [`store`]: the fenced store, a `redis-server` of its own that accepts a
//!   write only with a fence above the highest it accepted.
//! - [`lag`]: the harness's own scheduling lag, to tell a paused client
//!   from a late agent.
//! - [`workload`]: the clients (in-process, and `faults hold-client` /
//!   `redlock-agent lock` child processes) of locks, semaphores' permits
//!   and elections, of several resources at once, and readers, and their
//!   stats.
//! - [`nemesis`]: the faults, alone and mixed, and recovery times.
//! - [`run`]: the nemesis run and the control runs (over single masters,
//!   and in cluster mode), the multi-resource and read-write pairs, and
//!   their report.
//! - [`openapi`]: `agent/openapi.yaml`, loaded and used to validate answers.
//! - [`fuzz`]: request shapes for the fuzzer and the verdict on an answer.
//! - [`load`]: many connections and many waiters; RSS from `/proc`.
//!
//! The binary (`cargo run -p faults -- --help`) runs the short mode, the
//! long soak, the control runs, cluster mode and the load figures.

pub mod checker;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod fuzz;
pub mod http;
pub mod lag;
pub mod load;
pub mod nemesis;
pub mod observer;
pub mod openapi;
pub mod proxy;
pub mod run;
pub mod store;
pub mod workload;
