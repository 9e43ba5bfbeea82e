//! The driver protocol: what the orchestrator asks a driver to do ([`Spec`],
//! one JSON argument) and what the driver answers ([`Report`], one JSON line
//! on stdout). The node and Python drivers speak the same JSON; field names
//! are a contract between the four drivers and [`crate::report`].

use serde::{Deserialize, Serialize};

/// Which keys the clients lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Keys {
    /// Client `i` locks its own resource `<prefix>-c<i>`: no contention.
    Distinct,
    /// Every client locks `<prefix>-hot` and waits until it gets it.
    Hot,
}

/// One run of one driver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// `agent`, `rslock`, `redlock`, `node-redlock` or `pottery`.
    pub peer: String,
    /// `redis://127.0.0.1:PORT` of every master, in order.
    pub masters: Vec<String>,
    /// The agent's socket (agent driver only).
    #[serde(default)]
    pub socket: Option<String>,
    pub keys: Keys,
    pub clients: usize,
    /// Not measured: lets connections open and scripts load.
    pub warmup_ms: u64,
    /// The measured window, after the warm-up.
    pub duration_ms: u64,
    pub ttl_ms: u64,
    /// Resource names start with this; unique per run, so a lock left by a
    /// previous run (or a cancelled one) never meets this one.
    pub resource_prefix: String,
    /// The peer's retry settings: its defaults, or tuned for a hot key
    /// (a 10 ms retry delay; see `bench/README.md`).
    pub tuned: bool,
    /// Agent driver only: ask for a fencing token with every acquire (and
    /// count a grant without one as an error).
    #[serde(default)]
    pub fence: bool,
    /// Agent driver only: each cycle is two `GET /healthz` on the client's
    /// connection instead of an acquire and a release; no lock, no master
    /// (W1's socket floor).
    #[serde(default)]
    pub floor: bool,
    /// W7's agent processes only: the directory of the repository's
    /// standard-library client's package, `clients/python/src`, which they
    /// import as it is.
    #[serde(default)]
    pub python_client: Option<String>,
    /// Cycles per second to pace the whole driver at, split evenly over
    /// its clients (each starts a cycle at its own slots, sleeping until
    /// the next); `None` runs every client as fast as it can. The Rust
    /// drivers only: the others ignore it, and their report says so by
    /// leaving `target_rate` empty.
    #[serde(default)]
    pub rate: Option<f64>,
}

/// Latency percentiles in milliseconds (nearest rank), over the samples
/// whose operation ended inside the window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    /// Older reports and the W7 drivers have none.
    #[serde(default)]
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// What a driver measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub peer: String,
    /// The library and its client, with versions, as the driver loaded them.
    pub library: String,
    /// The retry settings it ran with, in words.
    pub settings: String,
    pub clients: usize,
    /// Length of the measured window, seconds.
    pub window_s: f64,
    /// Full cycles (acquire + release) that ended inside the window.
    pub cycles: u64,
    /// Grants over the whole run, warm-up included: the denominator of
    /// Redis commands per grant (the masters count the warm-up too).
    pub grants_total: u64,
    pub acquire_ms: Percentiles,
    pub cycle_ms: Percentiles,
    /// Hot key only: from a holder starting its release to the next grant.
    #[serde(default)]
    pub handoff_ms: Option<Percentiles>,
    /// Hot key only: the hand-offs that went to another client than the
    /// one releasing (a library whose releaser grabs the lock again at once
    /// hands off mostly to itself).
    #[serde(default)]
    pub handoff_other_ms: Option<Percentiles>,
    /// Grants per client inside the window.
    #[serde(default)]
    pub per_client_grants: Vec<u64>,
    /// Longest acquire, waits still running at the end of the window included.
    pub max_wait_ms: f64,
    /// Hot key only: the longest stretch of the window without a grant.
    #[serde(default)]
    pub longest_gap_ms: Option<f64>,
    /// Hot key only: grants seen while another client of this driver still
    /// held the lock. Must be zero; anything else is a safety bug.
    #[serde(default)]
    pub overlaps: u64,
    /// Clients whose last acquire ended at the window's end without the lock
    /// (still waiting when the run stopped).
    pub timeouts: u64,
    /// Acquires or releases that failed with an error.
    pub errors: u64,
    /// One error message, to say what failed.
    #[serde(default)]
    pub error_sample: Option<String>,
    /// Clients still inside a call a few seconds after the window closed
    /// (a call with no timeout on a frozen master).
    pub stuck: u64,
    /// Every driver but W7's: CPU seconds (user + system, every thread)
    /// the driver's own process spent from the start of the warm-up until
    /// every client had stopped (the Rust drivers' connections already
    /// open; node's and Python's open as the warm-up starts); the same
    /// span as `grants_total`, by which it divides.
    #[serde(default)]
    pub driver_cpu_s: Option<f64>,
    /// The spec's `rate`, when the driver paced its clients to it.
    #[serde(default)]
    pub target_rate: Option<f64>,
    /// Paced runs: slots a client missed because its previous cycle was
    /// still running a whole slot after the next one was due; it started
    /// at once and skipped them rather than burst to catch up.
    #[serde(default)]
    pub missed_slots: u64,
}
