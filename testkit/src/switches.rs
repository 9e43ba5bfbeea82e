//! The agent's test-only switches: environment variables, not config keys,
//! so that no deployment can turn a safety check off by mistake. Suites
//! that run agents as child processes set them by these names; the agent
//! reads them by the same names.

/// `1` turns the in-vote incarnation marker check off: the control run of
/// the fault suite, which must see what a flush does without it.
pub const NO_MARKER_CHECK: &str = "REDLOCK_TEST_NO_MARKER_CHECK";

/// `1` skips round 2's write-back of a fenced grant (the masters'
/// counters are not raised; fences are still computed): the fence control
/// run, which must see fences out of order without it.
pub const NO_FENCE_WRITEBACK: &str = "REDLOCK_TEST_NO_FENCE_WRITEBACK";

/// A signed number of milliseconds added to the agent's clock for the
/// fence floor only: hosts whose clocks disagree.
pub const FENCE_CLOCK_SKEW_MS: &str = "REDLOCK_TEST_FENCE_CLOCK_SKEW_MS";

/// `1` turns the loss notices between renewals off: a hold hears of an
/// operator's force release or of masters that lost its keys only at its
/// next renewal. The control runs of `agent/tests/loss_notice.rs`, which
/// must see the notice come late without it.
pub const NO_LOSS_NOTICE: &str = "REDLOCK_TEST_NO_LOSS_NOTICE";

/// `1` makes readiness (`/readyz`, `available` in `/v1/nodes`) ignore the
/// hash slots a cluster master keeps in quarantine, counting masters only:
/// the control run of `agent/tests/readiness.rs`, which must see the agent
/// say ready while no lock can be granted.
pub const NO_SLOT_READINESS: &str = "REDLOCK_TEST_NO_SLOT_READINESS";

/// Every switch, for suites that clear them from an inherited environment.
pub const ALL: [&str; 5] = [
    NO_MARKER_CHECK,
    NO_FENCE_WRITEBACK,
    FENCE_CLOCK_SKEW_MS,
    NO_LOSS_NOTICE,
    NO_SLOT_READINESS,
];
