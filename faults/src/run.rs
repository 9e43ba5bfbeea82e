//! Scenarios: the nemesis run (short or long) and the control run, each
//! from a fresh cluster to a [`Report`].
//!
//! The control runs prove the checker can see: a fault on a majority of
//! masters while locks are held, once with the agent's protection against
//! it on (no violation expected) and once off (violations expected); if
//! the second finds nothing, the checker is blind and the suite fails.
//! Three faults, three protections ([`control_cases`]):
//! - restart a majority empty; protection: delayed restart;
//! - `FLUSHALL` a majority (no restart to see); protection: the in-vote
//!   incarnation marker check, turned off through the agent's test-only
//!   switch ([`crate::cluster::NO_MARKER_CHECK_ENV`]);
//! - eviction on a majority ([`Options::eviction_control`]: `maxmemory`
//!   lowered with a `volatile-*` policy and a cache's writes until the
//!   held lock's key is evicted; the marker, without a TTL, stays);
//!   protection: the in-vote eviction check, turned off through the
//!   agent's test-only switch ([`crate::cluster::NO_EVICTION_CHECK_ENV`]).
//!   The agents probe every [`EVICTION_CONTROL_HEALTH_INTERVAL`] there: a
//!   probe also sees `evicted_keys` grow, so with the usual 100 ms a probe
//!   could quarantine the masters before a second client's vote and hide
//!   what the check does.
//!
//! In cluster mode ([`Options::cluster_nemesis`]) each master is a Redis
//! Cluster of 3 primaries with a replica each, and the nemesis restarts
//! shards empty, fails shards over to lagging replicas and migrates slots.
//! Its control ([`Options::cluster_control`], [`cluster_cases`]) is
//! deterministic: a lock is taken while the replicas of the shards serving
//! its slot in a majority of the clusters are frozen, those replicas are
//! promoted without it, and a second client tries the lock; with the
//! in-vote marker check off it must get it.
//!
//! The semaphore and the election have theirs ([`Property`]): the restart
//! pair with permits of one semaphore held instead of a lock
//! ([`Options::semaphore_control`]: off, more permits must be believed at
//! once than the limit), the flush pair with a leader instead
//! ([`Options::election_control`]: off, two leaders at once), and the
//! fence control's skewed clocks without the write-back with campaigners
//! ([`Options::term_control`]: terms out of order).
//!
//! And one for fences ([`Options::fence_control`]): agents whose clocks
//! disagree by seconds (the agent's test-only skew of its fence floor,
//! [`crate::cluster::FENCE_CLOCK_SKEW_ENV`]) mint ordered fences only
//! thanks to round 2's write-back of the fence to the masters; with the
//! write-back off ([`crate::cluster::NO_FENCE_WRITEBACK_ENV`]) the checker
//! must find fences out of order.
//!
//! And two of what a vote cannot see by itself (the `intrusion` module),
//! deterministic, a holder through a1 and an intruder through a2: a
//! majority's wall clocks jumped forward past the lock's TTL
//! ([`Options::clock_control`]; protection: the agents' clock watch), and
//! a majority restored from snapshots behind a2's connection-keeping links
//! ([`Options::restore_control`]; protection: the process check of a vote
//! answered NOSCRIPT).
//!
//! And the multi-resource pair (the `multi` module): grants of several
//! resources beside single locks of the same resources under the random
//! nemesis ([`Options::multi_nemesis`]), and the same clients through
//! agents without the all-or-nothing rule ([`Options::multi_control`],
//! [`MULTI_PARTIAL_ENV`]), where a resource held twice must be found.

mod intrusion;
mod multi;
mod verdict;

pub use intrusion::{CLOCK_CONTROL_JUMP_PAST_TTL, INTRUSION_TTL, RESTORE_CONTROL_HEALTH_INTERVAL};
pub use multi::{MultiRun, MULTI_CONTROL_DURATION, MULTI_PARTIAL_ENV, MULTI_SHORT_DURATION};
pub use verdict::verdicts;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use crate::checker::Ending;
use crate::checker::{Checker, Findings};
use crate::client::{self, Answer};
use crate::clock::Mono;
use crate::cluster::{
    tail, AgentSettings, Cluster, Topology, FENCE_CLOCK_SKEW_ENV, NO_FENCE_WRITEBACK_ENV,
};
use crate::lag::Lag;
use crate::nemesis::{FaultKind, Nemesis, NemesisReport};
use crate::observer;
use crate::store::{FencedStore, StoreClient};
use crate::workload::{self, Ctx, Mix, Phase, PhaseFlag, Plan, Processes, Stats, StatsSnapshot};

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct Options {
    pub name: String,
    pub masters: usize,
    /// Single servers or Redis Clusters.
    pub topology: Topology,
    pub agents: usize,
    pub duration: Duration,
    pub seed: u64,
    pub settings: AgentSettings,
    pub plan: Plan,
    pub mix: Mix,
    /// Faults run on their own first, in this order.
    pub singles: Vec<FaultKind>,
    /// Faults mixed at random afterwards.
    pub pool: Vec<FaultKind>,
    pub fault_ms: (u64, u64),
    /// The `faults` binary, for client processes.
    pub faults_bin: PathBuf,
    /// Set for a control scenario: what [`control`] injects.
    pub control: Option<Control>,
    /// Set for the fence control scenario instead.
    pub fence_control: Option<FenceControl>,
    /// Set for either half of the multi-resource pair instead.
    pub multi: Option<MultiRun>,
    /// The property a control run is about: what it holds while the fault
    /// strikes (a lock, a semaphore's permits, an election's leadership)
    /// and what its verdict asks the checker to find.
    pub property: Property,
}

/// What a control run holds and judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Property {
    /// A lock: never two believed holders (fences in order, for the fence
    /// control).
    Lock,
    /// A semaphore: never more believed permits at once than its limit.
    Semaphore,
    /// An election: never two believed leaders (terms in order, for the
    /// term control).
    Election,
}

impl Property {
    pub fn as_str(self) -> &'static str {
        match self {
            Property::Lock => "lock",
            Property::Semaphore => "semaphore",
            Property::Election => "election",
        }
    }
}

/// The fence control scenario: agents with clocks `skew_ms` apart (agent
/// i's fence floor runs `i * skew_ms` behind), round 2's write-back on or
/// off. Off, the run must find fences out of order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FenceControl {
    pub writeback: bool,
    pub skew_ms: i64,
}

/// How far apart the fence control's agents' clocks are.
pub const FENCE_SKEW_MS: i64 = 5000;

/// A control scenario: `fault` on a majority of the masters while a lock
/// is held, with the agent's protection against it on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Control {
    /// [`FaultKind::RestartMajority`], [`FaultKind::FlushMajority`],
    /// [`FaultKind::Evict`] or [`FaultKind::ShardFailover`] (cluster
    /// masters).
    pub fault: FaultKind,
    /// Delayed restart (for a restart), the marker check (for a flush or
    /// a shard failover) or the eviction check (for an eviction).
    /// Off, the run must find violations.
    pub protected: bool,
}

/// The control runs of the short mode and `faults control`, in order, each
/// with its number of rounds (runs without protection stop at the first
/// violation): the lock's, then the semaphore's and the election's, then
/// the multi-resource pair (its first half a nemesis run).
pub fn control_cases(seed: u64, faults_bin: &std::path::Path) -> Vec<(Options, usize)> {
    let bin = || faults_bin.to_path_buf();
    vec![
        (Options::control(true, seed, faults_bin.to_path_buf()), 2),
        (Options::control(false, seed, faults_bin.to_path_buf()), 4),
        (
            Options::flush_control(true, seed, faults_bin.to_path_buf()),
            2,
        ),
        (
            Options::flush_control(false, seed, faults_bin.to_path_buf()),
            4,
        ),
        (
            Options::eviction_control(true, seed, faults_bin.to_path_buf()),
            2,
        ),
        (
            Options::eviction_control(false, seed, faults_bin.to_path_buf()),
            4,
        ),
        (
            Options::fence_control(true, seed, faults_bin.to_path_buf()),
            1,
        ),
        (
            Options::fence_control(false, seed, faults_bin.to_path_buf()),
            1,
        ),
        (Options::semaphore_control(true, seed, bin()), 2),
        (Options::semaphore_control(false, seed, bin()), 4),
        (Options::election_control(true, seed, bin()), 2),
        (Options::election_control(false, seed, bin()), 4),
        (Options::term_control(false, seed, bin()), 1),
        (Options::clock_control(true, seed, bin()), 1),
        (Options::clock_control(false, seed, bin()), 1),
        (Options::restore_control(true, seed, bin()), 1),
        (Options::restore_control(false, seed, bin()), 1),
        (Options::multi_nemesis(MULTI_SHORT_DURATION, seed, bin()), 1),
        (Options::multi_control(seed, bin()), 1),
    ]
}

impl Options {
    /// The nemesis run: 5 masters, 3 agents (a3 through links that keep
    /// its connections open while a master dies and comes back), every
    /// fault alone then mixed.
    pub fn nemesis(duration: Duration, seed: u64, faults_bin: PathBuf) -> Options {
        Options {
            name: "nemesis".into(),
            masters: 5,
            topology: Topology::Singles,
            agents: 3,
            duration,
            seed,
            settings: AgentSettings {
                keeping_links: vec![2],
                ..AgentSettings::default()
            },
            plan: Plan {
                resources: vec!["res-a".into(), "res-b".into(), "res-c".into()],
                ttl_ms: (400, 1200),
                hold_ttl_ms: (300, 900),
                waits_ms: vec![0, 300, 1000],
                work_share: (0.1, 0.7),
                extend_chance: 0.25,
                hold_ms: (100, 1500),
                think_ms: (0, 50),
                // One semaphore of 2 for 3 permit clients: they contend
                // for its permits as the lock clients do for a resource.
                semaphores: vec![("sem-a".into(), 2)],
                elections: vec!["elect-a".into()],
            },
            mix: Mix {
                acquire: 6,
                hold: 3,
                process_hold: 2,
                lock_command: 2,
                permit_acquire: 2,
                permit_hold: 1,
                campaign: 2,
                multi_acquire: 0,
                multi_hold: 0,
            },
            singles: FaultKind::ALL.to_vec(),
            pool: FaultKind::ALL.to_vec(),
            fault_ms: (800, 2000),
            faults_bin,
            control: None,
            fence_control: None,
            multi: None,
            property: Property::Lock,
        }
    }

    /// The control scenario: restart a majority empty while long locks
    /// are held, with delayed restart as `delayed_restart` says.
    pub fn control(delayed_restart: bool, seed: u64, faults_bin: PathBuf) -> Options {
        let settings = AgentSettings {
            default_ttl: Duration::from_secs(2),
            max_ttl: Duration::from_secs(3),
            delayed_restart,
            ..AgentSettings::default()
        };
        Options {
            name: format!(
                "control (delayed_restart {})",
                if delayed_restart { "on" } else { "off" }
            ),
            masters: 5,
            topology: Topology::Singles,
            agents: 2,
            duration: Duration::from_secs(30),
            seed,
            settings,
            plan: Plan {
                resources: vec!["control".into()],
                ttl_ms: (2500, 2500),
                hold_ttl_ms: (600, 600),
                waits_ms: vec![2500],
                work_share: (0.7, 0.85),
                extend_chance: 0.0,
                hold_ms: (500, 500),
                think_ms: (0, 10),
                semaphores: Vec::new(),
                elections: Vec::new(),
            },
            mix: Mix {
                acquire: 4,
                ..Mix::NONE
            },
            singles: Vec::new(),
            pool: Vec::new(),
            fault_ms: (0, 0),
            faults_bin,
            control: Some(Control {
                fault: FaultKind::RestartMajority,
                protected: delayed_restart,
            }),
            fence_control: None,
            multi: None,
            property: Property::Lock,
        }
    }

    /// The flush control scenario: `FLUSHALL` on a majority while long
    /// locks are held (no restart: delayed restart sees nothing), with the
    /// agents' in-vote marker check on, or off through the test-only switch.
    pub fn flush_control(marker_check: bool, seed: u64, faults_bin: PathBuf) -> Options {
        let mut options = Options::control(true, seed, faults_bin);
        options.name = format!(
            "control flush (marker check {})",
            if marker_check { "on" } else { "off" }
        );
        options.settings.marker_check = marker_check;
        options.control = Some(Control {
            fault: FaultKind::FlushMajority,
            protected: marker_check,
        });
        options
    }

    /// The eviction control scenario: a majority made to evict while long
    /// locks are held (`maxmemory` just above use, `volatile-ttl` in odd
    /// rounds and `volatile-lru` in even ones, a cache's writes until the
    /// held lock's key is gone from each; the incarnation marker has no
    /// TTL and stays, so the marker check sees nothing), with the agents'
    /// in-vote eviction check on, or off through the test-only switch.
    /// The agents probe every [`EVICTION_CONTROL_HEALTH_INTERVAL`], on and
    /// off alike, so that the second client's vote comes before a probe.
    pub fn eviction_control(eviction_check: bool, seed: u64, faults_bin: PathBuf) -> Options {
        let mut options = Options::control(true, seed, faults_bin);
        options.name = format!(
            "control eviction (eviction check {})",
            if eviction_check { "on" } else { "off" }
        );
        options.settings.eviction_check = eviction_check;
        options.settings.health_interval = EVICTION_CONTROL_HEALTH_INTERVAL;
        options.control = Some(Control {
            fault: FaultKind::Evict,
            protected: eviction_check,
        });
        options
    }

    /// The nemesis run in cluster mode: 5 masters, each a Redis Cluster of
    /// [`CLUSTER_PRIMARIES`] primaries with a replica each reached directly
    /// by 2 agents, the same workload, every cluster fault alone then mixed
    /// ([`FaultKind::CLUSTER`]).
    pub fn cluster_nemesis(duration: Duration, seed: u64, faults_bin: PathBuf) -> Options {
        let mut options = Options::nemesis(duration, seed, faults_bin);
        options.name = "nemesis (cluster masters)".into();
        options.topology = CLUSTER_TOPOLOGY;
        options.agents = 2;
        options.settings = cluster_settings(options.settings);
        // A TTL is at least twice the node timeout.
        options.plan.ttl_ms = (600, 1500);
        options.plan.hold_ttl_ms = (600, 1200);
        options.singles = FaultKind::CLUSTER.to_vec();
        options.pool = FaultKind::CLUSTER.to_vec();
        // Lock clients only: five clusters of six servers already keep the
        // two cores busy, and with the semaphore and election clients too
        // an agent's timers ran late enough that a hold's `lost` came after
        // its validity (14.8 ms, seed 7). Permits and leaderships are locks
        // on keys like any other; the single masters' run checks their
        // properties.
        options.mix = Mix {
            permit_acquire: 0,
            permit_hold: 0,
            campaign: 0,
            ..options.mix
        };
        options
    }

    /// The cluster control scenario, deterministic: 5 cluster masters, 2
    /// agents; the replicas of the shards serving the lock's slot in 3 of
    /// the clusters are frozen, a client takes the lock through a1 (it is
    /// written on those primaries only), the replicas are promoted without
    /// it, and a second client tries the lock through a2 while the first
    /// holds it. With the in-vote marker check on, it must not get it; off
    /// (the agents' test-only switch), it must.
    pub fn cluster_control(marker_check: bool, seed: u64, faults_bin: PathBuf) -> Options {
        let mut options = Options::control(true, seed, faults_bin);
        options.name = format!(
            "control cluster failover (marker check {})",
            if marker_check { "on" } else { "off" }
        );
        options.topology = CLUSTER_TOPOLOGY;
        // Long enough that the holder still holds when the promotions are
        // done: each waits for its cluster to settle.
        options.settings = cluster_settings(options.settings);
        options.settings.default_ttl = Duration::from_secs(5);
        options.settings.max_ttl = Duration::from_secs(5);
        options.settings.marker_check = marker_check;
        options.plan.ttl_ms = (5000, 5000);
        options.mix = Mix::NONE;
        options.control = Some(Control {
            fault: FaultKind::ShardFailover,
            protected: marker_check,
        });
        options
    }

    /// The fence control scenario: 2 agents over 5 masters, a2's clock
    /// [`FENCE_SKEW_MS`] behind a1's for the fence floor, plain acquires and
    /// holds on two resources, no fault; round 2's write-back on or off.
    /// Runs until each agent has made enough fenced grants (on), or fences
    /// were found out of order (off), or [`Options::duration`].
    pub fn fence_control(writeback: bool, seed: u64, faults_bin: PathBuf) -> Options {
        let agents = 2;
        let settings = AgentSettings {
            default_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(1),
            agent_env: (0..agents)
                .map(|i| {
                    let mut env = vec![(
                        FENCE_CLOCK_SKEW_ENV.to_string(),
                        (-(i as i64) * FENCE_SKEW_MS).to_string(),
                    )];
                    if !writeback {
                        env.push((NO_FENCE_WRITEBACK_ENV.to_string(), "1".to_string()));
                    }
                    env
                })
                .collect(),
            ..AgentSettings::default()
        };
        Options {
            name: format!(
                "control fence (write-back {}, agent clocks {}s apart)",
                if writeback { "on" } else { "off" },
                FENCE_SKEW_MS / 1000
            ),
            masters: 5,
            topology: Topology::Singles,
            agents,
            duration: Duration::from_secs(8),
            seed,
            settings,
            plan: Plan {
                resources: vec!["fence-a".into(), "fence-b".into()],
                ttl_ms: (300, 800),
                hold_ttl_ms: (300, 600),
                waits_ms: vec![0, 300],
                work_share: (0.05, 0.3),
                extend_chance: 0.1,
                hold_ms: (50, 300),
                think_ms: (0, 20),
                semaphores: Vec::new(),
                elections: Vec::new(),
            },
            mix: Mix {
                acquire: 4,
                hold: 2,
                ..Mix::NONE
            },
            singles: Vec::new(),
            pool: Vec::new(),
            fault_ms: (0, 0),
            faults_bin,
            control: None,
            fence_control: Some(FenceControl {
                writeback,
                skew_ms: FENCE_SKEW_MS,
            }),
            multi: None,
            property: Property::Lock,
        }
    }

    /// The semaphore control scenario: as the restart control
    /// ([`Options::control`]), with permit clients on one semaphore of
    /// [`CONTROL_LIMIT`] permits instead of lock clients: a majority
    /// restarted empty while permits are held, with delayed restart on, or
    /// off (then permits are granted beyond the limit, and the checker must
    /// see more believed at once than the limit).
    pub fn semaphore_control(delayed_restart: bool, seed: u64, faults_bin: PathBuf) -> Options {
        let mut options = Options::control(delayed_restart, seed, faults_bin);
        options.name = format!(
            "control semaphore (delayed_restart {})",
            if delayed_restart { "on" } else { "off" }
        );
        options.plan.resources = Vec::new();
        options.plan.semaphores = vec![("control-sem".into(), CONTROL_LIMIT)];
        options.mix = Mix {
            permit_acquire: 5,
            ..Mix::NONE
        };
        options.property = Property::Semaphore;
        options
    }

    /// The election control scenario: as the flush control
    /// ([`Options::flush_control`]), with campaigners on one election
    /// instead of lock clients: `FLUSHALL` on a majority while a leader
    /// leads, the in-vote marker check on, or off (then a waiting
    /// campaigner is elected while the leader still believes it leads, and
    /// the checker must see two leaders at once).
    pub fn election_control(marker_check: bool, seed: u64, faults_bin: PathBuf) -> Options {
        let mut options = Options::flush_control(marker_check, seed, faults_bin);
        options.name = format!(
            "control election (marker check {})",
            if marker_check { "on" } else { "off" }
        );
        options.plan.resources = Vec::new();
        options.plan.elections = vec!["control-elect".into()];
        // Leaderships of 2.5 s renewed every third, held 2 s; campaigners
        // wait up to 5 s to be elected.
        options.plan.hold_ttl_ms = (2500, 2500);
        options.plan.hold_ms = (2000, 2000);
        options.plan.waits_ms = vec![5000];
        options.mix = Mix {
            campaign: 3,
            ..Mix::NONE
        };
        options.property = Property::Election;
        options
    }

    /// The term control scenario: as the fence control
    /// ([`Options::fence_control`], agents' clocks seconds apart), with
    /// campaigners on one election through both agents: leaderships
    /// elected in turn through an agent whose clock is behind get terms in
    /// order only thanks to round 2's write-back; without it the checker
    /// must find terms out of order.
    pub fn term_control(writeback: bool, seed: u64, faults_bin: PathBuf) -> Options {
        let mut options = Options::fence_control(writeback, seed, faults_bin);
        options.name = format!(
            "control terms (write-back {}, agent clocks {}s apart)",
            if writeback { "on" } else { "off" },
            FENCE_SKEW_MS / 1000
        );
        options.plan.resources = Vec::new();
        options.plan.elections = vec!["term-elect".into()];
        options.plan.waits_ms = vec![300, 1000];
        options.mix = Mix {
            campaign: 4,
            ..Mix::NONE
        };
        options.property = Property::Election;
        options
    }

    /// The name a control run waits for holders of: its lock, semaphore or
    /// election.
    fn control_target(&self) -> String {
        match self.property {
            Property::Lock => self.plan.resources[0].clone(),
            Property::Semaphore => self.plan.semaphores[0].0.clone(),
            Property::Election => self.plan.elections[0].clone(),
        }
    }
}

/// The limit of the semaphore control's semaphore.
pub const CONTROL_LIMIT: u32 = 2;

/// The agents' `health.interval` in the eviction control: a probe sees
/// `evicted_keys` grow and quarantines the master, check or no check, so
/// probes must be rare enough that a waiting client votes first. The
/// waiters retry every 20 to 50 ms: with probes 2 s apart, the chance that
/// one of the three masters is probed in the 100 ms or so between its
/// eviction and the second grant is about one in seven per round, and the
/// run has up to four rounds.
pub const EVICTION_CONTROL_HEALTH_INTERVAL: Duration = Duration::from_secs(2);

/// The eviction control's policies, by round (odd, even): only keys with a
/// TTL go, never the marker.
pub const EVICTION_CONTROL_POLICIES: [&str; 2] = ["volatile-ttl", "volatile-lru"];

/// The most cache keys the eviction control writes to one master while it
/// waits for the lock key to be evicted (64 MiB, 32 times the headroom).
pub const EVICTION_CONTROL_WRITES: u32 = 4096;

/// The validity the eviction control's holder has left, at least, when the
/// eviction begins: a fresh grant (2.5 s locks). Its reads, `CONFIG SET`s
/// and writes take a few hundred ms on a busy machine, and a holder one
/// second from its end may be gone by then (it works 70 to 85% of its TTL):
/// its key would go by its release, not by eviction.
pub const EVICTION_CONTROL_LEFT_MS: u64 = 2000;

/// Cluster mode's agent settings from `settings`: a longer node timeout
/// (and the TTLs it needs, ten times as long) and health interval. The
/// slot sweeps (markers at first sight, witnesses, readmission with each
/// slot's fencing counter read on every other master) run in requests of
/// many slots each, bounded by the node timeout; with 100 ms they timed
/// out on a busy 2-core machine running five clusters (before the sweeps
/// were batched per shard: it may be lowered again).
pub fn cluster_settings(settings: AgentSettings) -> AgentSettings {
    AgentSettings {
        node_timeout: CLUSTER_NODE_TIMEOUT,
        health_interval: CLUSTER_HEALTH_INTERVAL,
        default_ttl: settings.default_ttl.max(CLUSTER_NODE_TIMEOUT * 10),
        max_ttl: settings.max_ttl.max(CLUSTER_NODE_TIMEOUT * 10),
        ..settings
    }
}

/// The agents' `lock.node_timeout` in cluster mode.
pub const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// The agents' `health.interval` in cluster mode: each probe of a cluster
/// with slots due for readmission reads their counters on every master.
pub const CLUSTER_HEALTH_INTERVAL: Duration = Duration::from_millis(250);

/// Shards of each cluster master in cluster mode.
pub const CLUSTER_PRIMARIES: usize = 3;

/// Cluster mode's masters: [`CLUSTER_PRIMARIES`] primaries with one
/// replica each (the lagged failover needs it).
pub const CLUSTER_TOPOLOGY: Topology = Topology::Clusters {
    primaries: CLUSTER_PRIMARIES,
    replicas: 1,
};

/// The cluster mode's control runs, in order, one round each: a second
/// round would first wait for the readmission of the three failed-over
/// shards' slots, which takes longer than the quarantine on a busy machine.
pub fn cluster_cases(seed: u64, faults_bin: &std::path::Path) -> Vec<(Options, usize)> {
    vec![
        (
            Options::cluster_control(true, seed, faults_bin.to_path_buf()),
            1,
        ),
        (
            Options::cluster_control(false, seed, faults_bin.to_path_buf()),
            1,
        ),
    ]
}

/// Fenced grants each agent of the fence control makes before it stops
/// (write-back on).
const FENCE_CONTROL_GRANTS: usize = 20;

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub name: String,
    pub seed: u64,
    pub masters: usize,
    pub topology: Topology,
    pub agents: usize,
    pub clients: usize,
    pub resources: usize,
    pub seconds: f64,
    pub max_ttl_ms: u64,
    pub quarantine_ms: u64,
    pub delayed_restart: bool,
    /// The agents' in-vote incarnation marker check.
    pub marker_check: bool,
    /// The agents' in-vote eviction check.
    pub eviction_check: bool,
    /// The agents' watch on the masters' clocks.
    pub clock_check: bool,
    /// The agents' process check of a vote answered NOSCRIPT.
    pub process_check: bool,
    /// Set for a control run.
    pub control: Option<Control>,
    /// Set for the fence control run.
    pub fence_control: Option<FenceControl>,
    /// Set for either half of the multi-resource pair.
    pub multi: Option<MultiRun>,
    /// What a control run judges.
    pub property: Property,
    /// Clients of semaphores and elections were in the mix: the run must
    /// have granted permits and elected leaders to judge their properties.
    pub primitives_expected: (bool, bool),
    pub stats: StatsSnapshot,
    pub nemesis: NemesisReport,
    pub findings: Findings,
    /// Keys the final scan found (each is also a leak).
    pub keys_left: usize,
    /// Lines of agent logs that show a panic.
    pub agent_panics: Vec<String>,
    /// The worst scheduling lag of the harness itself, in ms.
    pub harness_lag_ms: f64,
    /// Each agent: name, RSS at start and at the end (KiB), times started.
    pub agent_rss: Vec<(String, u64, u64, u32)>,
}

impl Report {
    /// Share of answered attempts that were `no_quorum`.
    pub fn no_quorum_share(&self) -> f64 {
        let t = self.stats.total();
        if t.answered() == 0 {
            0.0
        } else {
            t.no_quorum as f64 / t.answered() as f64
        }
    }

    /// Whether the run passes: no violation, no hold overrun, no leak, no
    /// liveness failure, no panic, no contract breach.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let f = &self.findings;
        if !f.violations.is_empty() {
            out.push(format!("{} safety violations", f.violations.len()));
        }
        if f.hold_overruns() > 0 {
            out.push(format!(
                "{} holds ran past their validity",
                f.hold_overruns()
            ));
        }
        if !f.leaks.is_empty() {
            out.push(format!("{} leaked keys", f.leaks.len()));
        }
        if !self.nemesis.liveness_failures.is_empty() {
            out.push(format!(
                "{} liveness failures",
                self.nemesis.liveness_failures.len()
            ));
        }
        if !self.agent_panics.is_empty() {
            out.push(format!("{} agent panics", self.agent_panics.len()));
        }
        let fences = &f.fences;
        if !fences.out_of_order.is_empty() {
            out.push(format!("{} fences out of order", fences.out_of_order.len()));
        }
        if !fences.out_of_order_across.is_empty() {
            out.push(format!(
                "{} fences out of order across resources",
                fences.out_of_order_across.len()
            ));
        }
        if !fences.stale_writes_accepted.is_empty() {
            out.push(format!(
                "{} stale writes accepted",
                fences.stale_writes_accepted.len()
            ));
        }
        let p = &f.primitives;
        if !p.semaphore_excess.is_empty() {
            out.push(format!(
                "{} semaphore excesses (more permits believed than the limit)",
                p.semaphore_excess.len()
            ));
        }
        if !p.leader_overlaps.is_empty() {
            out.push(format!(
                "{} times two leaders at once",
                p.leader_overlaps.len()
            ));
        }
        if !p.term_inversions.is_empty() {
            out.push(format!("{} terms out of order", p.term_inversions.len()));
        }
        if !f.multi.overlaps.is_empty() {
            let n = f.multi.overlaps.len();
            out.push(format!("{n} times a resource held by two grants at once"));
        }
        if self.primitives_expected.0 && p.permits == 0 {
            out.push("no permit was granted: the semaphore property saw nothing".into());
        }
        if self.primitives_expected.1 && p.leaderships == 0 {
            out.push("no leader was elected: the election properties saw nothing".into());
        }
        if f.sections > 0 && fences.fenced_grants == 0 {
            out.push("no grant carried a fence: the fence checks saw nothing".into());
        }
        if self.stats.total().malformed > 0 {
            out.push(format!(
                "{} answers broke the API contract",
                self.stats.total().malformed
            ));
        }
        out
    }
}

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * n as f64 / d as f64)
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.stats.total();
        let masters = match self.topology {
            Topology::Singles => format!("{} masters", self.masters),
            Topology::Clusters {
                primaries,
                replicas,
            } => format!(
                "{} cluster masters ({primaries} primaries, {replicas} replica each)",
                self.masters
            ),
        };
        writeln!(
            f,
            "== {}: {masters}, {} agents, {} clients on {} resources, {:.1}s, seed {}",
            self.name, self.agents, self.clients, self.resources, self.seconds, self.seed
        )?;
        writeln!(
            f,
            "   max_ttl {}ms, quarantine {}ms, delayed_restart {}, marker check {}, eviction check {}, \
             clock check {}, process check {}{}",
            self.max_ttl_ms,
            self.quarantine_ms,
            if self.delayed_restart { "on" } else { "off" },
            if self.marker_check { "on" } else { "off" },
            if self.eviction_check { "on" } else { "off" },
            if self.clock_check { "on" } else { "off" },
            if self.process_check { "on" } else { "off" },
            match self.fence_control {
                Some(c) => format!(
                    ", fence write-back {}, agent i's clock i*{}ms behind",
                    if c.writeback { "on" } else { "off" },
                    c.skew_ms
                ),
                None => String::new(),
            }
        )?;
        writeln!(
            f,
            "operations: {} requests; {} lock attempts: {} granted, {} taken, {} no_quorum, {} other refusals, {} agent unreachable, {} unanswered, {} malformed",
            self.stats.operations(),
            t.attempts,
            t.granted,
            t.taken,
            t.no_quorum,
            t.refused,
            t.unreachable,
            t.no_answer,
            t.malformed
        )?;
        for (kind, c) in &self.stats.by_kind {
            writeln!(
                f,
                "   {kind:<13} {:>6} attempts, {:>5} granted, {:>5} taken, {:>4} no_quorum",
                c.attempts, c.granted, c.taken, c.no_quorum
            )?;
        }
        let s = &self.stats;
        writeln!(
            f,
            "   extends {} ({} lost), hold renewals {}, holds told lost {}, hold streams broken {}, releases {} ({} false, {} unanswered)",
            s.extends, s.extends_lost, s.renewals, s.holds_lost, s.holds_broken, s.releases, s.releases_false, s.releases_unanswered
        )?;
        let by_kind = self.nemesis.by_kind();
        if by_kind.is_empty() {
            writeln!(f, "faults: none")?;
        } else {
            let list: Vec<String> = by_kind
                .iter()
                .map(|(k, n)| format!("{} {n}", k.as_str()))
                .collect();
            writeln!(
                f,
                "faults: {} injected: {}",
                self.nemesis.faults.len(),
                list.join(", ")
            )?;
            // A control run's few faults, each as struck (an eviction's
            // policy, cache keys and keys evicted per master).
            if self.control.is_some() {
                for fault in &self.nemesis.faults {
                    writeln!(f, "   {} {}", fault.kind.as_str(), fault.detail)?;
                }
            }
        }
        let fd = &self.findings;
        let kinds: Vec<String> = fd
            .sections_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            f,
            "checker: {} critical sections ({}); safety violations {}; overruns {} (holds {}); leaks {} ({} key sightings); overlaps outside validity {}",
            fd.sections,
            kinds.join(", "),
            fd.violations.len(),
            fd.overruns.len(),
            fd.hold_overruns(),
            fd.leaks.len(),
            fd.sightings,
            fd.benign_overlaps
        )?;
        for v in fd.violations.iter().take(5) {
            writeln!(f, "   {v}")?;
        }
        if fd.violations.len() > 5 {
            writeln!(f, "   ... {} more", fd.violations.len() - 5)?;
        }
        for o in fd.overruns.iter().take(5) {
            writeln!(f, "   {o}")?;
        }
        for l in fd.leaks.iter().take(5) {
            writeln!(f, "   {l}")?;
        }
        multi::write_findings(f, self)?;
        let p = &fd.primitives;
        if p.permits > 0 || self.primitives_expected.0 {
            let most: Vec<String> = p
                .most_believed
                .iter()
                .map(|(name, limit, most)| format!("{name} {most} of {limit}"))
                .collect();
            writeln!(
                f,
                "semaphores: {} permit sections; most believed at once: {}; excesses {}",
                p.permits,
                if most.is_empty() {
                    "-".to_string()
                } else {
                    most.join(", ")
                },
                p.semaphore_excess.len()
            )?;
            for e in p.semaphore_excess.iter().take(3) {
                writeln!(f, "   {e}")?;
            }
        }
        if p.leaderships > 0 || self.primitives_expected.1 {
            writeln!(
                f,
                "elections: {} leaderships in {} elections; two leaders at once {}; terms out of order {}",
                p.leaderships,
                p.elections,
                p.leader_overlaps.len(),
                p.term_inversions.len()
            )?;
            for o in p.leader_overlaps.iter().take(3) {
                writeln!(f, "   {o}")?;
            }
            for i in p.term_inversions.iter().take(3) {
                writeln!(f, "   {i}")?;
            }
        }
        let fences = &fd.fences;
        writeln!(
            f,
            "fences: {} fenced grants ({} without a fence); out of order {} (across resources {}); \
             store writes {} accepted, {} refused, {} unanswered; stale writes accepted {}",
            fences.fenced_grants,
            fences.unfenced_grants,
            fences.out_of_order.len(),
            fences.out_of_order_across.len(),
            fences.writes_accepted,
            fences.writes_refused,
            fences.writes_failed,
            fences.stale_writes_accepted.len()
        )?;
        for i in fences
            .out_of_order
            .iter()
            .chain(&fences.out_of_order_across)
            .take(3)
        {
            writeln!(f, "   {i}")?;
        }
        for w in fences.stale_writes_accepted.iter().take(3) {
            writeln!(f, "   {w}")?;
        }
        writeln!(
            f,
            "   harness scheduling lag: worst {:.0}ms",
            self.harness_lag_ms
        )?;
        let rss: Vec<String> = self
            .agent_rss
            .iter()
            .map(|(name, start, end, starts)| {
                format!(
                    "{name} {:.1} -> {:.1} MiB ({starts} starts)",
                    *start as f64 / 1024.0,
                    *end as f64 / 1024.0
                )
            })
            .collect();
        writeln!(f, "   agent RSS: {}", rss.join(", "))?;
        let (mut n, mut down) = (0, 0);
        let by_phase: Vec<String> = s
            .quorum_readings
            .iter()
            .map(|(p, rn, rd)| {
                n += rn;
                down += rd;
                format!("{p} {}", pct(*rd, *rn))
            })
            .collect();
        let phases: Vec<String> = s
            .by_phase
            .iter()
            .map(|(p, c)| format!("{p} {} of {}", pct(c.no_quorum, c.answered()), c.answered()))
            .collect();
        writeln!(
            f,
            "availability: no_quorum on {} of answered attempts ({}); by phase: {}",
            pct(t.no_quorum, t.answered()),
            t.answered(),
            phases.join(", ")
        )?;
        writeln!(
            f,
            "   over time: agents saw no usable quorum in {} of {} /v1/nodes readings; by phase: {}",
            pct(down, n),
            n,
            by_phase.join(", ")
        )?;
        let mut times: Vec<f64> = self
            .nemesis
            .recoveries
            .iter()
            .filter_map(|r| r.after_ms)
            .collect();
        times.sort_by(f64::total_cmp);
        if !self.nemesis.recoveries.is_empty() {
            writeln!(
                f,
                "recovery after heal: {} cycles, median {:.0}ms, p90 {:.0}ms, max {:.0}ms (bound {}ms); liveness failures {}",
                self.nemesis.recoveries.len(),
                quantile(&times, 0.5),
                quantile(&times, 0.9),
                times.last().copied().unwrap_or(0.0),
                self.nemesis.liveness_bound_ms,
                self.nemesis.liveness_failures.len()
            )?;
            let mut by_kind: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
            for r in &self.nemesis.recoveries {
                if let (1, Some(ms)) = (r.kinds.len(), r.after_ms) {
                    by_kind.entry(r.kinds[0].as_str()).or_default().push(ms);
                }
            }
            let parts: Vec<String> = by_kind
                .iter()
                .map(|(k, v)| format!("{k} {:.0}ms", v.iter().copied().fold(0.0, f64::max)))
                .collect();
            if !parts.is_empty() {
                writeln!(f, "   alone, worst: {}", parts.join(", "))?;
            }
        }
        for failure in &self.nemesis.liveness_failures {
            writeln!(f, "   LIVENESS: {failure}")?;
        }
        for r in &self.nemesis.recoveries {
            if r.after_ms.is_none_or(|ms| ms > 1000.0) {
                let times: Vec<String> = r
                    .per_agent_ms
                    .iter()
                    .enumerate()
                    .map(|(a, t)| match t {
                        Some(ms) => format!("a{} {ms:.0}ms", a + 1),
                        None => format!("a{} never", a + 1),
                    })
                    .collect();
                writeln!(
                    f,
                    "   slow recovery, cycle {}: {} -> {}",
                    r.cycle,
                    r.faults.join(" + "),
                    times.join(", ")
                )?;
                for why in &r.last_refusals {
                    writeln!(f, "      {}", why.chars().take(300).collect::<String>())?;
                }
            }
        }
        if !self.nemesis.kill_release_ms.is_empty() {
            let mut k = self.nemesis.kill_release_ms.clone();
            k.sort_by(f64::total_cmp);
            writeln!(
                f,
                "client killed mid-hold -> its key gone from every master: n={}, median {:.0}ms, max {:.0}ms",
                k.len(),
                quantile(&k, 0.5),
                k.last().copied().unwrap_or(0.0)
            )?;
        }
        if !self.nemesis.skipped.is_empty() {
            writeln!(f, "   not injected: {}", self.nemesis.skipped.join("; "))?;
        }
        for p in &self.agent_panics {
            writeln!(f, "   AGENT PANIC: {p}")?;
        }
        for m in &self.stats.malformed_samples {
            writeln!(f, "   CONTRACT: {m}")?;
        }
        let problems = self.problems();
        if problems.is_empty() {
            write!(f, "result: ok")
        } else {
            write!(f, "result: {}", problems.join(", "))
        }
    }
}

/// An agent's `hold lost` log line, placed on the monotonic clock.
#[derive(Debug, Clone)]
struct LostNotice {
    agent: usize,
    resource: String,
    reason: String,
    at: Mono,
}

/// The `hold lost` lines of one agent's JSON log.
fn hold_lost_lines(
    log: &str,
    agent: usize,
    (wall0, mono0): (std::time::SystemTime, Mono),
) -> Vec<LostNotice> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "hold lost")
        .filter_map(|l| {
            let wall = humantime::parse_rfc3339(l["timestamp"].as_str()?).ok()?;
            let at = match wall.duration_since(wall0) {
                Ok(after) => mono0.plus(after),
                Err(e) => Mono(mono0.0.saturating_sub(e.duration().as_nanos() as u64)),
            };
            Some(LostNotice {
                agent,
                resource: l["fields"]["resource"].as_str()?.to_string(),
                reason: l["fields"]["reason"].as_str().unwrap_or("?").to_string(),
                at,
            })
        })
        .collect()
}

/// Says, for each hold overrun, when the agent logged the loss (after it
/// sent `lost`) and how late the harness itself was then.
fn attribute_overruns(findings: &mut Findings, notices: &[LostNotice], lag: &Lag) {
    use crate::checker::Blame;
    for o in &mut findings.overruns {
        let s = &o.section;
        let Some(until) = s.valid_until else { continue };
        let exit = s.exit.unwrap_or(until);
        let harness = lag.worst_between(Mono(until.0.saturating_sub(500_000_000)), exit);
        let notice = notices.iter().find(|n| {
            n.agent == s.agent
                && n.resource == s.resource
                && n.at >= s.granted
                && n.at <= exit.plus_ms(2000)
        });
        let (blame, said) = match (s.kind.is_hold(), notice) {
            (true, Some(n)) if n.at <= until => (
                Blame::Client,
                format!(
                    "the agent logged `lost` ({}) {:.1}ms before the validity ended",
                    n.reason,
                    until.ms_after(n.at)
                ),
            ),
            (true, Some(n)) => (
                Blame::Agent,
                format!(
                    "the agent logged `lost` ({}) {:.1}ms after the validity ended",
                    n.reason,
                    n.at.ms_after(until)
                ),
            ),
            (true, None) => (
                Blame::Unknown,
                "no `hold lost` in the agent's log while the hold was open".into(),
            ),
            (false, _) => (
                Blame::Client,
                "a plain acquire: the client's own timing".into(),
            ),
        };
        o.blame = blame;
        o.note = format!("{said}; harness lag up to {harness:.0}ms around then");
    }
}

/// Everything a scenario runs with, shared by its tasks.
struct Harness {
    cluster: Arc<Cluster>,
    checker: Arc<Checker>,
    stats: Arc<Stats>,
    phase: Arc<PhaseFlag>,
    processes: Arc<Processes>,
    stop: watch::Sender<bool>,
    clients: Vec<tokio::task::JoinHandle<()>>,
    observer: tokio::task::JoinHandle<()>,
    lag: Arc<Lag>,
    started: Mono,
    /// A wall-clock reading and a monotonic one taken together, to place
    /// agent log lines on the monotonic clock.
    wall0: (std::time::SystemTime, Mono),
    /// Each agent's RSS once serving, in KiB.
    rss_start: Vec<u64>,
    /// Kept until the report: the clients write to it.
    _store: FencedStore,
}

impl Harness {
    async fn start(options: &Options) -> Result<Harness, String> {
        let cluster = Arc::new(
            Cluster::start_with(
                options.masters,
                options.topology,
                options.agents,
                options.settings.clone(),
            )
            .await?,
        );
        // Agents quarantine masters whose uptime is below the quarantine at
        // first sight (and every slot of a fresh cluster): wait for them to
        // take every master and slot.
        cluster
            .wait_usable(
                options.masters as u64,
                options.settings.quarantine()
                    + match options.topology {
                        Topology::Singles => Duration::from_secs(5),
                        // A cluster: witnesses and readmission of 16384 slots.
                        Topology::Clusters { .. } => Duration::from_secs(60),
                    },
            )
            .await?;
        let store = FencedStore::start(cluster.dir.path())?;
        let store_client = StoreClient::connect(&store.url()).await?;
        let checker = Arc::new(Checker::new());
        let stats = Arc::new(Stats::default());
        let phase = Arc::new(PhaseFlag::default());
        let processes = Arc::new(Processes::default());
        let (stop, stop_rx) = watch::channel(false);
        let max_ttl_ms = u64::try_from(options.settings.max_ttl.as_millis()).unwrap_or(u64::MAX);
        let observer = tokio::spawn(observer::watch(
            cluster.masters.clone(),
            options.settings.key_prefix.clone(),
            Arc::clone(&checker),
            max_ttl_ms,
            Duration::from_millis(250),
            stop_rx.clone(),
        ));
        let agent_bin = crate::cluster::agent_binary()?;
        let ctx = Ctx {
            checker: Arc::clone(&checker),
            stats: Arc::clone(&stats),
            phase: Arc::clone(&phase),
            processes: Arc::clone(&processes),
            stop: stop_rx,
            plan: options.plan.clone(),
            lock_fence: workload::lock_takes_fence(&agent_bin),
            agent_bin,
            faults_bin: options.faults_bin.clone(),
            store: Some((store_client, store.url())),
        };
        // Availability over time: every agent's view of the quorum.
        {
            let clients = cluster.clients().await;
            let stats = Arc::clone(&stats);
            let phase = Arc::clone(&phase);
            let mut stop = ctx.stop.clone();
            tokio::spawn(async move {
                loop {
                    for c in &clients {
                        if let Ok(nodes) = c.nodes().await {
                            stats.quorum_reading(phase.get(), nodes.available);
                        }
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(100)) => {}
                        _ = stop.changed() => return,
                    }
                }
            });
        }
        let mut rss_start = Vec::new();
        for agent in &cluster.agents {
            rss_start.push(agent.lock().await.rss_kib().unwrap_or(0));
        }
        let lag = Arc::new(Lag::default());
        tokio::spawn(crate::lag::watch(Arc::clone(&lag), ctx.stop.clone()));
        let client_list = cluster.clients().await;
        let clients = workload::spawn(&ctx, options.mix, &client_list, options.seed);
        Ok(Harness {
            cluster,
            checker,
            stats,
            phase,
            processes,
            stop,
            clients,
            observer,
            lag,
            started: Mono::now(),
            wall0: (std::time::SystemTime::now(), Mono::now()),
            rss_start,
            _store: store,
        })
    }

    /// Stops the clients, heals everything, waits out every TTL, scans for
    /// leftovers and builds the report.
    async fn finish(self, options: &Options, nemesis: NemesisReport) -> Report {
        let _ = self.stop.send(true);
        for task in self.clients {
            if tokio::time::timeout(Duration::from_secs(15), task)
                .await
                .is_err()
            {
                eprintln!("faults: a client did not stop in time");
            }
        }
        let _ = self.observer.await;
        let seconds = self.started.elapsed().as_secs_f64();
        self.cluster.clear_links();
        for m in &self.cluster.masters {
            let _ = m.thaw();
        }
        for agent in &self.cluster.agents {
            let mut agent = agent.lock().await;
            if !agent.is_running() {
                let _ = agent.start();
                let _ = agent.wait_ready(Duration::from_secs(10)).await;
            }
        }
        // Every lock has a TTL of at most max_ttl: past it, nothing may
        // remain; nor past the keys a moved clock kept longer.
        let mut gone = Mono::now().plus(options.settings.max_ttl + Duration::from_millis(500));
        if let Some(until) = self.checker.clock_excused_until() {
            gone = gone.max(until);
        }
        tokio::time::sleep(gone.since(Mono::now())).await;
        let keys_left = observer::final_scan(
            &self.cluster.masters,
            &options.settings.key_prefix,
            &self.checker,
        )
        .await;
        let mut agent_rss = Vec::new();
        for (agent, start) in self.cluster.agents.iter().zip(&self.rss_start) {
            let agent = agent.lock().await;
            agent_rss.push((
                agent.name.clone(),
                *start,
                agent.rss_kib().unwrap_or(0),
                agent.starts,
            ));
        }
        let mut agent_panics = Vec::new();
        for agent in &self.cluster.agents {
            let agent = agent.lock().await;
            for line in agent.log_text().lines() {
                if line.contains("panicked") {
                    agent_panics.push(format!("{}: {line}", agent.name));
                }
            }
        }
        let mut findings = self.checker.findings(Mono::now());
        let mut lost_notices = Vec::new();
        for (a, agent) in self.cluster.agents.iter().enumerate() {
            let text = agent.lock().await.log_text();
            lost_notices.extend(hold_lost_lines(&text, a, self.wall0));
        }
        attribute_overruns(&mut findings, &lost_notices, &self.lag);
        let mix = options.mix;
        Report {
            name: options.name.clone(),
            seed: options.seed,
            masters: options.masters,
            topology: options.topology,
            agents: options.agents,
            clients: mix.total(),
            resources: options.plan.resources.len(),
            seconds,
            max_ttl_ms: u64::try_from(options.settings.max_ttl.as_millis()).unwrap_or(0),
            quarantine_ms: u64::try_from(options.settings.quarantine().as_millis()).unwrap_or(0),
            delayed_restart: options.settings.delayed_restart,
            marker_check: options.settings.marker_check,
            eviction_check: options.settings.eviction_check,
            clock_check: options.settings.clock_check,
            process_check: options.settings.process_check,
            control: options.control,
            fence_control: options.fence_control,
            multi: options.multi,
            property: options.property,
            primitives_expected: (mix.permit_acquire + mix.permit_hold > 0, mix.campaign > 0),
            stats: self.stats.snapshot(),
            nemesis,
            findings,
            harness_lag_ms: self.lag.worst(),
            agent_rss,
            keys_left,
            agent_panics,
        }
    }
}

/// The nemesis run.
///
/// # Errors
/// When the cluster cannot be started.
pub async fn nemesis(options: &Options) -> Result<Report, String> {
    let harness = Harness::start(options).await?;
    let mut nemesis = Nemesis::new(
        Arc::clone(&harness.cluster),
        Arc::clone(&harness.checker),
        Arc::clone(&harness.processes),
        Arc::clone(&harness.phase),
        options.seed ^ 0x5eed,
    );
    nemesis.fault_ms = options.fault_ms;
    nemesis.hot_keys = options
        .plan
        .resources
        .iter()
        .map(|r| format!("{}{r}", options.settings.key_prefix))
        .collect();
    let until = harness.started.plus(options.duration);
    nemesis.run(&options.singles, &options.pool, until).await;
    nemesis.finish().await;
    let report = nemesis.report.clone();
    Ok(harness.finish(options, report).await)
}

/// The control scenario: up to `rounds` restarts (or flushes, or
/// evictions, as `options.control` says) of a majority while a lock is held
/// with time left; without the protection it stops at the first violation.
/// An eviction strikes a majority of the masters that hold the holder's
/// lock then, and is undone (`maxmemory` and the policy restored, the cache
/// keys deleted) as soon as it is gone from each; a round where it was not
/// there, or did not go by eviction, is reported as not injected.
///
/// # Errors
/// When `options` is not a control scenario, or the cluster cannot be
/// started.
pub async fn control(options: &Options, rounds: usize) -> Result<Report, String> {
    if let Some(fence) = options.fence_control {
        return fence_control(options, fence).await;
    }
    if let Some(multi) = options.multi {
        return multi::run(options, multi).await;
    }
    let control = options
        .control
        .ok_or_else(|| format!("{} is not a control scenario", options.name))?;
    if control.fault == FaultKind::ShardFailover {
        return cluster_control(options, control, rounds).await;
    }
    if intrusion::is_intrusion(control.fault) {
        return intrusion::control(options, control).await;
    }
    let harness = Harness::start(options).await?;
    let resource = options.control_target();
    if control.fault == FaultKind::RestartMajority && !control.protected {
        // The leak detector must see too: a key without a TTL under the prefix.
        // On the last master: the control restarts the first ones.
        let last = harness.cluster.masters.len() - 1;
        plant_leak(&harness.cluster.masters[last], &options.settings.key_prefix).await?;
    }
    let mut report = NemesisReport::default();
    let majority: Vec<usize> = (0..options.masters / 2 + 1).collect();
    let lock_key = format!("{}{resource}", options.settings.key_prefix);
    let left_ms = if control.fault == FaultKind::Evict {
        EVICTION_CONTROL_LEFT_MS
    } else {
        1000
    };
    for round in 1..=rounds {
        // A holder with at least a second of validity left (two for an
        // eviction).
        let deadline = Mono::now().plus_ms(10_000);
        while harness.checker.inside(&resource, left_ms) == 0 && Mono::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let held = harness.checker.inside(&resource, 0);
        harness.phase.set(crate::workload::Phase::Faulted);
        // An eviction strikes a majority of the masters the lock is on (a
        // master still quarantined from the round before may lack it).
        let holder = harness.checker.holders(&resource, left_ms).pop();
        if control.fault == FaultKind::Evict && holder.is_none() {
            // Nothing to evict: cache writes alone prove nothing.
            report
                .skipped
                .push(format!("round {round}: no holder with {left_ms}ms left"));
            harness.phase.set(crate::workload::Phase::Quiet);
            continue;
        }
        let majority = match (control.fault, &holder) {
            (FaultKind::Evict, Some(token)) => holding_majority(&harness.cluster, &lock_key, token)
                .await
                .unwrap_or_else(|| majority.clone()),
            _ => majority.clone(),
        };
        let policy = EVICTION_CONTROL_POLICIES[(round - 1) % EVICTION_CONTROL_POLICIES.len()];
        let tag = format!("control{round}");
        let hits = majority.iter().map(|&j| {
            let m = harness.cluster.masters[j].clone();
            let (tag, lock_key, holder) = (&tag, &lock_key, &holder);
            async move {
                let done = match control.fault {
                    FaultKind::FlushMajority => m.flush().await.map(|()| None),
                    FaultKind::Evict => {
                        let until = Some(lock_key.as_str()).zip(holder.as_deref());
                        m.evict(policy, tag, EVICTION_CONTROL_WRITES, until)
                            .await
                            .map(Some)
                    }
                    _ => m.restart().await.map(|()| None),
                };
                (m, done)
            }
        });
        let mut struck = true;
        let mut evictions = Vec::new();
        for (m, r) in futures::future::join_all(hits).await {
            match r {
                Ok(None) => {}
                Ok(Some(eviction)) => {
                    struck &= eviction.gone == Some(true) && eviction.evicted > 0;
                    evictions.push((m, eviction));
                }
                Err(e) => {
                    struck = false;
                    report
                        .skipped
                        .push(format!("{}: {e}", control.fault.as_str()));
                }
            }
        }
        // Undone at once: the lock key is gone, and the agents' own writes
        // would keep the masters evicting (and quarantined) otherwise.
        for (m, eviction) in &evictions {
            if let Err(e) = m.end_eviction(eviction).await {
                report
                    .skipped
                    .push(format!("end of the eviction on {}: {e}", m.name));
            }
        }
        let names: Vec<&str> = majority
            .iter()
            .map(|&j| harness.cluster.masters[j].name.as_str())
            .collect();
        let detail = if evictions.is_empty() {
            format!("{} while {held} held {resource}", names.join(","))
        } else {
            let each: Vec<String> = evictions.iter().map(|(_, e)| e.to_string()).collect();
            format!("{} while {held} held {resource}", each.join("; "))
        };
        if struck || control.fault != FaultKind::Evict {
            report.faults.push(crate::nemesis::FaultRecord {
                kind: control.fault,
                at: Mono::now(),
                detail,
            });
        } else {
            report.skipped.push(format!(
                "round {round}: {} did not strike: {detail}",
                control.fault.as_str()
            ));
        }
        // Let waiting clients try, and the old locks run out.
        tokio::time::sleep(options.settings.quarantine() + Duration::from_millis(500)).await;
        harness.phase.set(crate::workload::Phase::Quiet);
        if !control.protected && found(options.property, &harness.checker.findings(Mono::now())) {
            break;
        }
    }
    Ok(harness.finish(options, report).await)
}

/// What an unprotected control run of `property` must find: violations
/// (a lock), an excess (a semaphore), two leaders at once (an election).
fn found(property: Property, findings: &Findings) -> bool {
    match property {
        Property::Lock => !findings.violations.is_empty(),
        Property::Semaphore => !findings.primitives.semaphore_excess.is_empty(),
        Property::Election => !findings.primitives.leader_overlaps.is_empty(),
    }
}

/// The first majority of the masters where `key` holds `token` now (read
/// straight from them), or `None` when fewer do. A grant is written on a
/// quorum, not always on every master, and a waiter's vote on a master the
/// holder missed is there a moment before the waiter releases it.
async fn holding_majority(cluster: &Cluster, key: &str, token: &str) -> Option<Vec<usize>> {
    let majority = cluster.masters.len() / 2 + 1;
    let reads = cluster.masters.iter().map(|m| m.get(key));
    let holding: Vec<usize> = futures::future::join_all(reads)
        .await
        .into_iter()
        .enumerate()
        .filter(|(_, value)| value.as_ref().is_ok_and(|v| v.as_deref() == Some(token)))
        .map(|(j, _)| j)
        .take(majority)
        .collect();
    (holding.len() == majority).then_some(holding)
}

/// How long the short mode's cluster nemesis runs.
pub const CLUSTER_SHORT_DURATION: Duration = Duration::from_secs(30);

/// Cluster mode: the nemesis run over cluster masters for `duration`, then
/// the cluster control runs ([`cluster_cases`]); each report is printed
/// and pushed to `reports` as it comes.
///
/// # Errors
/// When a run cannot start.
pub async fn cluster_mode(
    duration: Duration,
    seed: u64,
    faults_bin: &std::path::Path,
    reports: &mut Vec<Report>,
) -> Result<(), String> {
    let report = nemesis(&Options::cluster_nemesis(
        duration,
        seed,
        faults_bin.to_path_buf(),
    ))
    .await?;
    println!("{report}\n");
    reports.push(report);
    for (options, rounds) in cluster_cases(seed, faults_bin) {
        let report = control(&options, rounds).await?;
        println!("{report}\n");
        reports.push(report);
    }
    Ok(())
}

/// The cluster control scenario ([`Options::cluster_control`]), up to
/// `rounds` times (without the marker check, until the first violation).
async fn cluster_control(
    options: &Options,
    control: Control,
    rounds: usize,
) -> Result<Report, String> {
    let harness = Harness::start(options).await?;
    let resource = options.plan.resources[0].clone();
    let key = format!("{}{resource}", options.settings.key_prefix);
    let slot = redlock_wire::keys::key_slot(key.as_bytes());
    let majority: Vec<usize> = (0..options.masters / 2 + 1).collect();
    let clients = harness.cluster.clients().await;
    let (first, second) = (clients[0].clone(), clients[1 % clients.len()].clone());
    let ttl_ms = options.plan.ttl_ms.0;
    let mut report = NemesisReport::default();
    for round in 1..=rounds {
        harness.phase.set(Phase::Faulted);
        let begun = futures::future::join_all(majority.iter().map(|&j| {
            let m = harness.cluster.masters[j].clone();
            async move { (m.begin_failover(slot).await, m) }
        }))
        .await;
        let mut lagging = Vec::new();
        for (r, m) in begun {
            match r {
                Ok(shard) => lagging.push((m, shard)),
                Err(e) => report.skipped.push(format!("begin failover: {e}")),
            }
        }
        // The holder: written on the primaries whose replicas are frozen.
        // A later round waits for the slot's quarantine from the one before.
        let wait = Some(options.settings.quarantine() + Duration::from_secs(2));
        let holder =
            match intrusion::take(&harness, (&first, 0), &resource, "holder", ttl_ms, wait).await {
                Ok(holder) => Some(holder),
                Err(e) => {
                    report
                        .skipped
                        .push(format!("round {round}: the holder: {e}"));
                    None
                }
            };
        let promoted =
            futures::future::join_all(lagging.iter().map(|(m, shard)| async move {
                (m.name.clone(), m.finish_failover(*shard).await)
            }))
            .await;
        let mut names = Vec::new();
        for (name, r) in promoted {
            match r {
                Ok(()) => names.push(name),
                Err(e) => report
                    .skipped
                    .push(format!("finish failover of {name}: {e}")),
            }
        }
        let Some((holder_id, grant, granted)) = holder else {
            break;
        };
        report.faults.push(crate::nemesis::FaultRecord {
            kind: control.fault,
            at: Mono::now(),
            detail: format!(
                "{}: the shard of slot {slot} promoted its replica without the lock on {resource}",
                names.join(",")
            ),
        });
        // The holder works through 80% of its validity; meanwhile a second
        // client tries the lock through the other agent.
        let leaves = granted.plus_ms(client::ms(grant.validity) * 4 / 5);
        intrusion::intrude(&harness, (&second, 1), &resource, leaves).await;
        // The holder left when its work was done, even if the harness
        // records it later.
        while Mono::now() < leaves {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let released = first.release(&resource, &grant.token).await;
        harness.checker.exit(holder_id, leaves, ending(released));
        harness.phase.set(Phase::Quiet);
        if !control.protected && !harness.checker.findings(Mono::now()).violations.is_empty() {
            break;
        }
    }
    Ok(harness.finish(options, report).await)
}

/// How a section ended, from its release's answer.
fn ending(released: Result<Answer<bool>, client::Error>) -> Ending {
    match released {
        Ok(Answer::Ok(released)) => Ending::Released { released },
        Ok(Answer::Refused { .. }) => Ending::Released { released: false },
        Err(_) => Ending::ReleaseUnanswered,
    }
}

/// The fence control scenario: the clients run until each agent made
/// [`FENCE_CONTROL_GRANTS`] fenced grants (write-back on) or fences were
/// found out of order (off), or `options.duration` passed.
async fn fence_control(options: &Options, fence: FenceControl) -> Result<Report, String> {
    let harness = Harness::start(options).await?;
    let deadline = Mono::now().plus(options.duration);
    while Mono::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let enough = (0..options.agents).all(|a| harness.checker.fenced(a) >= FENCE_CONTROL_GRANTS);
        if enough && fence.writeback {
            break;
        }
        if enough {
            let found = harness.checker.findings(Mono::now());
            let terms = !found.primitives.term_inversions.is_empty();
            let fences = !found.fences.out_of_order.is_empty()
                || !found.fences.out_of_order_across.is_empty();
            if (options.property == Property::Election && terms)
                || (options.property != Property::Election && fences)
            {
                break;
            }
        }
    }
    Ok(harness.finish(options, NemesisReport::default()).await)
}

/// `SET <prefix>planted-leak x` without a TTL on `master`.
async fn plant_leak(master: &crate::cluster::Master, prefix: &str) -> Result<(), String> {
    let client = redis::Client::open(master.url()).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    redis::cmd("SET")
        .arg(format!("{prefix}{PLANTED}"))
        .arg("planted-by-the-control-run")
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| e.to_string())
}

/// The resource of the key the control run plants without a TTL.
pub const PLANTED: &str = "planted-leak";

/// Prints the end of every agent log; for failures.
pub fn agent_logs(cluster: &Cluster) -> String {
    let mut out = String::new();
    for agent in &cluster.agents {
        if let Ok(agent) = agent.try_lock() {
            out.push_str(&format!(
                "--- {} ---\n{}\n",
                agent.name,
                tail(&agent.log_text(), 30)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{FenceFindings, FenceInversion, Section};
    use crate::cluster::{NO_EVICTION_CHECK_ENV, NO_MARKER_CHECK_ENV};

    pub(super) fn fence_report(writeback: bool, fences: FenceFindings) -> Report {
        let options = Options::fence_control(writeback, 1, PathBuf::from("faults"));
        Report {
            name: options.name.clone(),
            seed: 1,
            masters: options.masters,
            topology: options.topology,
            agents: options.agents,
            clients: 6,
            resources: 2,
            seconds: 4.0,
            max_ttl_ms: 1000,
            quarantine_ms: 1500,
            delayed_restart: true,
            marker_check: true,
            eviction_check: true,
            clock_check: true,
            process_check: true,
            control: None,
            fence_control: options.fence_control,
            multi: None,
            property: options.property,
            primitives_expected: (false, false),
            stats: StatsSnapshot::default(),
            nemesis: NemesisReport::default(),
            findings: Findings {
                sections: fences.fenced_grants,
                fences,
                ..Findings::default()
            },
            keys_left: 0,
            agent_panics: Vec::new(),
            harness_lag_ms: 0.0,
            agent_rss: Vec::new(),
        }
    }

    fn inversion() -> FenceInversion {
        let section = Section {
            resource: "fence-a".into(),
            client: "acq1".into(),
            kind: crate::checker::ClientKind::Acquire,
            agent: 0,
            token: "t".into(),
            ttl_ms: 500,
            requested: Mono(1),
            granted: Mono(2),
            valid_until: None,
            strict_valid_until: None,
            belief_end: None,
            entry: Mono(2),
            exit: None,
            ending: crate::checker::Ending::Open,
            fence: Some(5),
            write: None,
            primitive: crate::checker::Primitive::Lock,
        };
        FenceInversion {
            earlier: section.clone(),
            later: section,
            across_resources: false,
        }
    }

    /// The cluster control without the marker check fails when it finds no
    /// double grant, naming the switch the agents may have ignored; with
    /// the check, it passes when it finds none.
    #[test]
    fn the_cluster_control_needs_a_double_grant_only_without_the_marker_check() {
        let report = |marker_check| {
            let options = Options::cluster_control(marker_check, 1, PathBuf::from("faults"));
            let mut r = fence_report(true, FenceFindings::default());
            r.name = options.name.clone();
            r.topology = options.topology;
            r.control = options.control;
            r.fence_control = None;
            r
        };
        let blind = verdicts(&[report(false)]).remove(0);
        assert!(
            blind.starts_with("FAIL") && blind.contains(NO_MARKER_CHECK_ENV),
            "{blind}"
        );
        let safe = verdicts(&[report(true)]).remove(0);
        assert!(safe.starts_with("PASS"), "{safe}");
        assert_eq!(
            Options::cluster_nemesis(Duration::from_secs(1), 1, PathBuf::from("faults")).pool,
            FaultKind::CLUSTER.to_vec()
        );
    }

    /// The eviction control fails when the lock key was never evicted from
    /// a majority (on or off: nothing was tried); off, it needs a double
    /// grant and names the switch the agents may have ignored; on, it
    /// passes when it finds none. Both are control cases, and the nemesis
    /// injects evictions.
    #[test]
    fn the_eviction_control_needs_an_eviction_and_a_double_grant_only_without_the_check() {
        let report = |eviction_check, struck| {
            let options = Options::eviction_control(eviction_check, 1, PathBuf::from("faults"));
            let mut r = fence_report(true, FenceFindings::default());
            r.name = options.name.clone();
            r.control = options.control;
            r.fence_control = None;
            r.eviction_check = eviction_check;
            if struck {
                r.nemesis.faults.push(crate::nemesis::FaultRecord {
                    kind: FaultKind::Evict,
                    at: Mono(1),
                    detail: "r1 volatile-ttl ..., lock key gone".into(),
                });
            }
            r
        };
        let blind = verdicts(&[report(false, true)]).remove(0);
        assert!(
            blind.starts_with("FAIL") && blind.contains(NO_EVICTION_CHECK_ENV),
            "{blind}"
        );
        let safe = verdicts(&[report(true, true)]).remove(0);
        assert!(safe.starts_with("PASS"), "{safe}");
        for check in [true, false] {
            let idle = verdicts(&[report(check, false)]).remove(0);
            assert!(
                idle.starts_with("FAIL") && idle.contains("never evicted"),
                "{idle}"
            );
        }
        let options = Options::eviction_control(false, 1, PathBuf::from("faults"));
        assert!(options
            .settings
            .env()
            .contains(&(NO_EVICTION_CHECK_ENV.to_string(), "1".to_string())));
        assert!(Options::eviction_control(true, 1, PathBuf::from("faults"))
            .settings
            .env()
            .is_empty());
        let cases = control_cases(1, std::path::Path::new("faults"));
        let evictions: Vec<bool> = cases
            .iter()
            .filter_map(|(o, _)| o.control.filter(|c| c.fault == FaultKind::Evict))
            .map(|c| c.protected)
            .collect();
        assert_eq!(evictions, [true, false]);
        assert!(
            Options::nemesis(Duration::from_secs(1), 1, PathBuf::from("faults"))
                .pool
                .contains(&FaultKind::Evict)
        );
    }

    /// The semaphore and election controls without their protection pass
    /// only when the checker found what their property forbids (lock
    /// violations alone do not count), and the term control only when it
    /// found terms out of order; with protection, any of those fails. All
    /// are control cases, and the nemesis run has their clients.
    #[test]
    fn the_primitive_controls_need_their_own_findings() {
        use crate::checker::{LeaderOverlap, PrimitiveFindings, SemaphoreExcess, TermInversion};
        let section = inversion().earlier;
        let excess = SemaphoreExcess {
            semaphore: "control-sem".into(),
            limit: CONTROL_LIMIT,
            believed: 3,
            from: Mono(1),
            until: Mono(2),
            strict: true,
            sections: vec![section.clone()],
        };
        let overlap = LeaderOverlap {
            election: "control-elect".into(),
            first: section.clone(),
            second: section.clone(),
            overlap_ms: 5.0,
        };
        let inverted = TermInversion {
            election: "term-elect".into(),
            earlier: section.clone(),
            later: section,
        };
        let report = |options: Options, primitives: PrimitiveFindings| {
            let mut r = fence_report(true, FenceFindings::default());
            r.name = options.name.clone();
            r.control = options.control;
            r.fence_control = options.fence_control;
            r.property = options.property;
            r.findings.primitives = primitives;
            // The planted leak, which the restart controls also need.
            r.findings.leaks.push(crate::checker::Leak {
                master: "r5".into(),
                resource: PLANTED.into(),
                token: "planted".into(),
                pttl_ms: -1,
                seen: Mono(1),
                why: "no TTL".into(),
            });
            r
        };
        let bin = || PathBuf::from("faults");
        let verdict = |options, primitives| verdicts(&[report(options, primitives)]).remove(0);
        let with_excess = PrimitiveFindings {
            semaphore_excess: vec![excess],
            ..PrimitiveFindings::default()
        };
        let with_overlap = PrimitiveFindings {
            leader_overlaps: vec![overlap],
            ..PrimitiveFindings::default()
        };
        let with_inversion = PrimitiveFindings {
            term_inversions: vec![inverted],
            leaderships: 30,
            ..PrimitiveFindings::default()
        };
        let none = PrimitiveFindings::default;
        let sem = |on| Options::semaphore_control(on, 1, bin());
        assert!(verdict(sem(false), with_excess.clone()).starts_with("PASS"));
        let blind = verdict(sem(false), with_overlap.clone());
        assert!(
            blind.starts_with("FAIL") && blind.contains("more permits than the limit"),
            "{blind}"
        );
        assert!(verdict(sem(true), with_excess).starts_with("FAIL"));
        let elect = |on| Options::election_control(on, 1, bin());
        assert!(verdict(elect(false), with_overlap.clone()).starts_with("PASS"));
        let blind = verdict(elect(false), none());
        assert!(
            blind.starts_with("FAIL") && blind.contains(NO_MARKER_CHECK_ENV),
            "{blind}"
        );
        assert!(verdict(elect(true), with_overlap).starts_with("FAIL"));
        let terms = |writeback| Options::term_control(writeback, 1, bin());
        assert!(verdict(terms(false), with_inversion.clone()).starts_with("PASS"));
        let blind = verdict(terms(false), none());
        assert!(
            blind.starts_with("FAIL") && blind.contains(NO_FENCE_WRITEBACK_ENV),
            "{blind}"
        );
        assert!(verdict(terms(true), with_inversion).starts_with("FAIL"));
        let cases = control_cases(1, std::path::Path::new("faults"));
        let properties: Vec<(Property, bool)> = cases
            .iter()
            .filter(|(o, _)| o.property != Property::Lock)
            .map(|(o, _)| {
                let protected = o
                    .control
                    .map(|c| c.protected)
                    .or(o.fence_control.map(|f| f.writeback));
                (o.property, protected.unwrap_or(true))
            })
            .collect();
        assert_eq!(
            properties,
            [
                (Property::Semaphore, true),
                (Property::Semaphore, false),
                (Property::Election, true),
                (Property::Election, false),
                (Property::Election, false),
            ]
        );
        let mix = Options::nemesis(Duration::from_secs(1), 1, bin()).mix;
        assert!(mix.permit_acquire + mix.permit_hold > 0 && mix.campaign > 0);
    }

    /// The fence control passes with the write-back only when no fence is
    /// out of order and enough grants were fenced, and without it only
    /// when some are out of order.
    #[test]
    fn the_fence_control_needs_order_with_the_write_back_and_disorder_without() {
        let ordered = FenceFindings {
            fenced_grants: 40,
            ..FenceFindings::default()
        };
        let disordered = FenceFindings {
            out_of_order: vec![inversion()],
            ..ordered.clone()
        };
        let verdict = |writeback, f: &FenceFindings| {
            verdicts(&[fence_report(writeback, f.clone())]).remove(0)
        };
        assert!(verdict(true, &ordered).starts_with("PASS"));
        assert!(verdict(true, &disordered).starts_with("FAIL"));
        assert!(verdict(false, &disordered).starts_with("PASS"));
        let blind = verdict(false, &ordered);
        assert!(
            blind.starts_with("FAIL") && blind.contains(NO_FENCE_WRITEBACK_ENV),
            "{blind}"
        );
        let few = FenceFindings {
            fenced_grants: 3,
            ..FenceFindings::default()
        };
        assert!(
            verdict(true, &few).contains("too few"),
            "{}",
            verdict(true, &few)
        );
        let mut none = fence_report(true, FenceFindings::default());
        none.findings.sections = 10;
        assert!(
            none.problems()
                .iter()
                .any(|p| p.contains("no grant carried a fence")),
            "{:?}",
            none.problems()
        );
    }
}
