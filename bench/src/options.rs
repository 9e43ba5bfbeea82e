//! What a run was asked for, and the settings every workload shares: a
//! leaf that the plan and the workloads it runs all read, so none of them
//! reads the plan for it.

use std::path::PathBuf;
use std::time::Duration;

use crate::peers::{Drivers, Peer};

/// The run's masters (W14 adds sets of 3 and 7 of its own).
pub const MASTERS: usize = 5;
/// Every lock's TTL, for every peer.
pub const TTL_MS: u64 = 10_000;

/// The command line's choices for one run.
#[derive(Debug, Clone)]
pub struct Options {
    pub smoke: bool,
    pub duration: Duration,
    pub warmup: Duration,
    pub peers: Vec<Peer>,
    /// w1..w4 to run; empty for all.
    pub only: Vec<String>,
    pub agent_bin: PathBuf,
    pub drivers: Drivers,
    pub scratch: PathBuf,
    /// W10's fleets' `leak_scan.interval`.
    pub leak_scan: Duration,
}
