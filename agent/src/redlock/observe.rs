//! What the engine reports as it works, and to whom: an [`Observer`] it is
//! given (the agent's metrics), never an import of the metrics. The label
//! enums are closed sets, shared with `redlock_*` metrics.

use std::time::Duration;

/// Every way a lock operation fails, for `redlock_failures_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Acquire: held by another holder until the wait ran out.
    Taken,
    /// Acquire or extend: fewer than a quorum of masters usable.
    NoQuorum,
    /// A quorum granted, but too slowly: no validity left after drift.
    ValidityExhausted,
    /// Extend: not extended on a quorum in time.
    ExtendFailed,
    /// A hold lost its lock (renewal failed or validity ran out).
    Lost,
    /// Release: the lock was no longer held on a quorum.
    ReleaseFailed,
    /// One master failed one request (counted per master and request).
    NodeError,
    /// A quorum voted yes, but round 2 (raising the fencing counter) was
    /// not confirmed by a quorum with validity left; the round is released
    /// and retried.
    FenceFailed,
}

impl Failure {
    pub const ALL: [Failure; 8] = [
        Failure::Taken,
        Failure::NoQuorum,
        Failure::ValidityExhausted,
        Failure::ExtendFailed,
        Failure::Lost,
        Failure::ReleaseFailed,
        Failure::NodeError,
        Failure::FenceFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Taken => "taken",
            Failure::NoQuorum => "no_quorum",
            Failure::ValidityExhausted => "validity_exhausted",
            Failure::ExtendFailed => "extend_failed",
            Failure::Lost => "lost",
            Failure::ReleaseFailed => "release_failed",
            Failure::NodeError => "node_error",
            Failure::FenceFailed => "fence_failed",
        }
    }
}

/// One master's answer to one request, for `redlock_node_votes_total{vote}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteLabel {
    Granted,
    Taken,
    Error,
    Timeout,
    /// Not answered in time because the agent itself was busy (see
    /// [`super::NodeError::Backlog`]): not the master's failure.
    Backlog,
}

impl VoteLabel {
    pub const ALL: [VoteLabel; 5] = [
        VoteLabel::Granted,
        VoteLabel::Taken,
        VoteLabel::Error,
        VoteLabel::Timeout,
        VoteLabel::Backlog,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VoteLabel::Granted => "granted",
            VoteLabel::Taken => "taken",
            VoteLabel::Error => "error",
            VoteLabel::Timeout => "timeout",
            VoteLabel::Backlog => "backlog",
        }
    }
}

/// Requests to one master, for `redlock_node_request_duration_seconds{op}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Acquire,
    Extend,
    Release,
    Probe,
    /// The leaked-key scanner's SCAN, PTTL and PEXPIRE.
    Scan,
    /// Round 2 of a fenced grant, and reading counters for a readmission.
    Fence,
}

impl Op {
    pub const ALL: [Op; 6] = [
        Op::Acquire,
        Op::Extend,
        Op::Release,
        Op::Probe,
        Op::Scan,
        Op::Fence,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Extend => "extend",
            Op::Release => "release",
            Op::Probe => "probe",
            Op::Scan => "scan",
            Op::Fence => "fence",
        }
    }
}

/// Receives the engine's events (see [`crate::metrics::Metrics`]).
pub trait Observer: Send + Sync + std::fmt::Debug {
    fn failure(&self, failure: Failure);
    /// The share of the TTL left as validity at a grant, 0 to 1.
    fn validity_at_grant(&self, share: f64);
}

/// Receives one master's events; looked up once per master so the request
/// path does not hash label values.
pub trait NodeObserver: Send + Sync + std::fmt::Debug {
    fn vote(&self, vote: VoteLabel);
    fn request(&self, op: Op, took: Duration);
    /// One batch of `commands` lock commands sent to the master in one call.
    fn batch(&self, commands: usize);
    /// One failed request, by its kind's index in
    /// [`super::master::NodeError::KINDS`].
    fn error(&self, kind_index: usize);
    /// One request the agent's own backlog held up
    /// ([`super::master::NodeError::Backlog`]): not the master's error.
    fn backlog(&self) {}
    /// The master lost state or restarted; `detector` names how it was seen.
    fn restart(&self, detector: &'static str);
    /// A cluster master's hash slots in quarantine, now.
    fn quarantined_slots(&self, _slots: usize) {}
}

/// An observer that drops everything, for tests of the engine alone.
#[derive(Debug, Default)]
pub struct Ignore;

impl Observer for Ignore {
    fn failure(&self, _: Failure) {}
    fn validity_at_grant(&self, _: f64) {}
}

impl NodeObserver for Ignore {
    fn vote(&self, _: VoteLabel) {}
    fn request(&self, _: Op, _: Duration) {}
    fn batch(&self, _: usize) {}
    fn error(&self, _: usize) {}
    fn restart(&self, _: &'static str) {}
}
