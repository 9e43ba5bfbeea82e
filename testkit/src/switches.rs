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

/// `1` turns the in-vote eviction check off (a vote no longer asks whether
/// the master evicted keys since its marker was written): the eviction
/// control run, which must see a double grant on masters that evict.
pub const NO_EVICTION_CHECK: &str = "REDLOCK_TEST_NO_EVICTION_CHECK";

/// A `lock.key_prefix`: the leak scanners of agents with that prefix take
/// any value shaped like a token (`<40 hex>...`, a SHA-1 too) for a lock
/// key, without the proof bound to the key, as scanners did before tokens
/// carried one; with `repair: expire` they change application data. The
/// control run of the scanner's repair test. A prefix, not `1`, so that
/// only the agents of that test see it, whatever else runs in the process.
pub const LEAK_REPAIR_BY_SHAPE: &str = "REDLOCK_TEST_LEAK_REPAIR_BY_SHAPE";

/// `1` lifts the metrics port's connection budget (`metrics.max_connections`):
/// the control run of the descriptor budget test, which must see a flood of
/// connections to the port starve the socket and the masters without it.
pub const NO_METRICS_BUDGET: &str = "REDLOCK_TEST_NO_METRICS_BUDGET";

/// `1` makes `redlock-agent lock` signal only the command's own process,
/// not its process group and descendants: the control runs of the process
/// tree tests, which must see a grandchild outlive the lock without it.
pub const NO_TREE_KILL: &str = "REDLOCK_TEST_NO_TREE_KILL";

/// `1` charges the agent's own time to the masters again: a lock command
/// queued in the agent longer than the node timeout is answered `timeout`
/// unsent, and every request is bounded by the node timeout from the call,
/// however busy the agent is. The load tests' control run, which must see
/// lock calls fail under the agent's own load without the fix.
pub const CHARGE_QUEUED_TIME: &str = "REDLOCK_TEST_CHARGE_QUEUED_TIME";

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

/// `1` turns the scan-fence check off in the leak scanner's writes: a
/// master no longer refuses the repair or report of a scanner whose fence
/// is below the highest it has seen. The control run of the paused
/// scanner test, which must see a superseded scanner's repair go through
/// without it.
pub const NO_SCAN_FENCE: &str = "REDLOCK_TEST_NO_SCAN_FENCE";

/// Milliseconds the leak scanner waits before each repair, after its last
/// look at its scan lock and right before the fenced write: the pause of
/// a scanner stopped (GC, SIGSTOP) at the worst moment, which the paused
/// scanner test widens with SIGSTOP. Logged as "test switch: pausing
/// before a repair".
pub const LEAK_REPAIR_PAUSE_MS: &str = "REDLOCK_TEST_LEAK_REPAIR_PAUSE_MS";

/// A directory the agent reads its peers' cgroups from
/// (`<dir>/<pid>/cgroup`) instead of `/proc`, under `socket.isolate: pod`:
/// for tests on machines whose cgroup tree they cannot write, which put
/// their client processes in pods by writing those files.
pub const PROC_ROOT: &str = "REDLOCK_TEST_PROC_ROOT";

/// `1` lets a re-entry set the lock's TTL to what it asked for (or the
/// default TTL), shorter than its first grant's, and lets a re-entering
/// hold renew at its own TTL: the control runs of the re-entry tests,
/// which must see another agent granted the lock while its first holder's
/// validity still runs.
pub const REENTRY_MAY_SHORTEN: &str = "REDLOCK_TEST_REENTRY_MAY_SHORTEN";

/// `1` turns the `lock`/`elect` guardian's own deadline off: the guardian
/// stops the command only when told to, or when `lock`/`elect` dies, so a
/// stopped `lock` lets its command outlive the validity. The control run of
/// the stopped `lock` test.
pub const NO_GUARDIAN_DEADLINE: &str = "REDLOCK_TEST_NO_GUARDIAN_DEADLINE";

/// `1` lets a peer whose pid the kernel reports as 0 (a process in a pid
/// namespace the agent does not see) re-enter a lock acquired by another
/// such peer, as if 0 named one process: the control run of the re-entry
/// test with the agent in a pid namespace of its own, which must see
/// another process re-enter the lock.
pub const REENTRY_TRUSTS_PID_ZERO: &str = "REDLOCK_TEST_REENTRY_TRUSTS_PID_ZERO";

/// `1` makes a hold's and a campaign's renewals wait until their client
/// has room for the `renewed` event, and writes a stream's lines whether
/// or not the client read the last: the control run of the stalled-stream
/// tests, which must see a client that stopped reading lose its lock to
/// another while its connection is open, then read a backlog of old
/// renewals.
pub const RENEWALS_WAIT_FOR_CLIENT: &str = "REDLOCK_TEST_RENEWALS_WAIT_FOR_CLIENT";

/// `1` lets only the agent that granted a permit keep its semaphore's
/// limit note alive, as before the fix: an extension through another
/// agent, or through the same agent after a restart, no longer lengthens
/// the note, which then lapses while permits are held. The control run of
/// the semaphore limit test, which must see a request with another limit
/// granted beside them without the fix.
pub const SEMAPHORE_LIMIT_BY_GRANTER: &str = "REDLOCK_TEST_SEMAPHORE_LIMIT_BY_GRANTER";

/// `1` grants a lock on several resources once each resource that a
/// quorum granted is counted, whatever the others answered: a resource
/// held by someone else is granted again (the all-or-nothing rule off).
/// The control run of the fault suite's multi-resource property, which
/// must see a resource held by two grants at once without the rule.
pub const MULTI_PARTIAL: &str = "REDLOCK_TEST_MULTI_PARTIAL";

/// `1` keeps a shared lock's readers at a key of their own (the lock key
/// and ` apart`), where no exclusive vote looks and whose readers look at
/// no writer: the check that one master never admits a writer beside a
/// reader, off. The control run of the fault suite's read-write property,
/// which must see a writer's grant overlap a reader's without it.
pub const SHARED_APART: &str = "REDLOCK_TEST_SHARED_APART";

/// `1` leaves a hold that re-entered a lock to settle its close only by
/// its own task, which then waits 200 ms before it lowers the count: a
/// call made right after the close no longer counts it (see the agent's
/// `lock::holds::Closing`). The control run of `agent/tests/reentry.rs`,
/// which must see such a call answered as if the hold were still open.
pub const UNSETTLED_HOLD_CLOSE: &str = "REDLOCK_TEST_UNSETTLED_HOLD_CLOSE";

/// `1` has a waiter that found its lock taken vote again every retry
/// delay, as before the masters said how long the lock has left (see the
/// agent's `lock::acquire`). The control run of `agent/tests/waiting.rs`,
/// which must see a waiter on a held lock vote many times while it waits.
pub const POLL_WAITERS: &str = "REDLOCK_TEST_POLL_WAITERS";

/// Every switch, for suites that clear them from an inherited environment.
pub const ALL: [&str; 24] = [
    NO_MARKER_CHECK,
    NO_FENCE_WRITEBACK,
    FENCE_CLOCK_SKEW_MS,
    NO_EVICTION_CHECK,
    LEAK_REPAIR_BY_SHAPE,
    NO_METRICS_BUDGET,
    NO_TREE_KILL,
    CHARGE_QUEUED_TIME,
    NO_LOSS_NOTICE,
    NO_SLOT_READINESS,
    NO_SCAN_FENCE,
    LEAK_REPAIR_PAUSE_MS,
    PROC_ROOT,
    REENTRY_MAY_SHORTEN,
    NO_GUARDIAN_DEADLINE,
    REENTRY_TRUSTS_PID_ZERO,
    RENEWALS_WAIT_FOR_CLIENT,
    SEMAPHORE_LIMIT_BY_GRANTER,
    MULTI_PARTIAL,
    SHARED_APART,
    UNSETTLED_HOLD_CLOSE,
    NO_CLOCK_CHECK,
    NO_PROCESS_CHECK,
    POLL_WAITERS,
];

/// `1` stops the agent from watching its masters' clocks: the master's
/// time read in each vote and probe is no longer compared with the
/// agent's own monotonic clock, so a master whose clock jumps or freezes
/// keeps voting. The control run of the clock fault, which must see two
/// holders without the watch.
pub const NO_CLOCK_CHECK: &str = "REDLOCK_TEST_NO_CLOCK_CHECK";

/// `1` stops the agent from asking, when a vote's script is missing on a
/// master (NOSCRIPT), whether the master's process changed: the script is
/// loaded again and the vote counts, as before the check, and every agent
/// shares one script. The control run of a master restored from an old
/// snapshot behind a proxy that keeps the agent's connection open, which
/// must see two holders without the check.
pub const NO_PROCESS_CHECK: &str = "REDLOCK_TEST_NO_PROCESS_CHECK";
