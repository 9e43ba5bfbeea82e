//! What a node is told by the config ([`NodeSettings`]) and the
//! detectors that can put it in quarantine ([`Detector`]).

use std::time::Duration;

/// What a node needs to know about the incarnation marker and quarantine.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Bound on every lock request.
    pub timeout: Duration,
    /// `lock.key_prefix`: lock keys are `<key_prefix><resource>`, and each
    /// has its waiting flag (`redlock_wire::keys::waiting_key`).
    pub key_prefix: String,
    /// `<key_prefix> incarnation`: present while the master may be trusted.
    pub marker_key: String,
    /// `<key_prefix> fence`: the highest fence minted with this master's vote.
    pub fence_key: String,
    /// Check the marker in every vote and extension. Off only through the
    /// test switch `REDLOCK_TEST_NO_MARKER_CHECK`, for control runs.
    pub marker_check: bool,
    /// Check in every vote that the master evicted no key since its marker
    /// was written (see [`super::conn::BATCH`]). Off only through the test
    /// switch `REDLOCK_TEST_NO_EVICTION_CHECK`, for control runs.
    pub eviction_check: bool,
    /// `max_ttl + delayed_restart.extra`, or zero with delayed restart off.
    pub quarantine: Duration,
    /// Charge the agent's own time (queued, or too busy to write or read)
    /// to the master, as before it was taken out. On only through the test
    /// switch `REDLOCK_TEST_CHARGE_QUEUED_TIME`, for control runs.
    pub charge_queued: bool,
    /// The longest a request to the master may take in all, queued in the
    /// agent or on its way, before the agent gives it up as its own
    /// backlog: `lock.max_ttl`, past which no lock it could concern is
    /// still held. A vote or an extension also stops at its own TTL (see
    /// [`super::lock`]).
    pub overall: Duration,
    /// `agent.name`: each connection to a single server is named
    /// `redlock-agent:<agent>:<purpose>` (`CLIENT SETNAME`), so operators
    /// can tell a fleet's connections apart in `CLIENT LIST`.
    pub agent_name: String,
    /// Watch the master's clock in every vote and probe (see [`super::clock`]).
    /// Off only through the test switch `REDLOCK_TEST_NO_CLOCK_CHECK`.
    pub clock_check: bool,
    /// Give this node a vote script of its own and, when a master answers
    /// NOSCRIPT to it, check the master's `run_id` before the vote counts
    /// (see [`super::lock`]). Off only through the test switch
    /// `REDLOCK_TEST_NO_PROCESS_CHECK`.
    pub process_check: bool,
    /// `lock.drift_factor`: how far the master's clock may run from the
    /// agent's, as a fraction of the time between two readings.
    pub drift_factor: f64,
    /// How old the last probe may be before a request that needs this
    /// master asks for a fresh one (see [`crate::redlock::Master::refresh`]): twice
    /// `health.interval`.
    pub stale_after: Duration,
}

/// Which restart detector put a node in quarantine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Detector {
    /// The node was unreachable and answers again as a new process.
    Reconnect,
    /// Its `run_id` changed between two probes: a restart faster than the
    /// probe interval.
    RunId,
    /// At first sight its uptime was below the quarantine period.
    Uptime,
    /// The incarnation marker key is gone (a flush, a failover, a restart
    /// no other detector saw): seen by a probe or inside a vote.
    Marker,
    /// The master evicted keys since the last probe, or since its marker
    /// was written (seen inside a vote or by a probe): lock keys may be
    /// among them.
    Eviction,
    /// The master's clock jumped, froze or ran at the wrong rate (seen in
    /// a vote or a probe, see [`super::clock`]): keys may have expired early or
    /// outlive their TTL.
    Clock,
}

impl Detector {
    pub fn as_str(self) -> &'static str {
        match self {
            Detector::Reconnect => "reconnect",
            Detector::RunId => "run_id",
            Detector::Uptime => "uptime",
            Detector::Marker => "marker",
            Detector::Eviction => "eviction",
            Detector::Clock => "clock",
        }
    }
}
