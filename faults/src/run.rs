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
//!
//! And the read-write pair (the `shared` module): readers and writers of
//! the same resources under the random nemesis
//! ([`Options::shared_nemesis`]), and the same clients through agents that
//! keep readers apart from writers ([`Options::shared_control`],
//! [`SHARED_APART_ENV`]), where a writer beside a reader must be found.

mod cluster_mode;
mod control;
mod harness;
mod intrusion;
mod multi;
mod report;
mod shared;
mod verdict;

pub use cluster_mode::{
    cluster_cases, cluster_mode, cluster_settings, CLUSTER_HEALTH_INTERVAL, CLUSTER_NODE_TIMEOUT,
    CLUSTER_PRIMARIES, CLUSTER_SHORT_DURATION, CLUSTER_TOPOLOGY,
};
pub use control::{control, PLANTED};
pub use intrusion::{CLOCK_CONTROL_JUMP_PAST_TTL, INTRUSION_TTL, RESTORE_CONTROL_HEALTH_INTERVAL};
pub use multi::{MultiRun, MULTI_CONTROL_DURATION, MULTI_PARTIAL_ENV, MULTI_SHORT_DURATION};
pub use report::Report;
pub use shared::{SharedRun, SHARED_APART_ENV, SHARED_CONTROL_DURATION, SHARED_SHORT_DURATION};
pub use verdict::verdicts;

use control::{ending, FENCE_CONTROL_GRANTS};
use harness::Harness;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::cluster::{
    tail, AgentSettings, Cluster, Topology, FENCE_CLOCK_SKEW_ENV, NO_FENCE_WRITEBACK_ENV,
};
use crate::nemesis::{FaultKind, Nemesis};
use crate::workload::{Mix, Plan};

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
    /// Set for either half of the read-write pair instead.
    pub shared: Option<SharedRun>,
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
/// the multi-resource pair and the read-write pair (the first half of each
/// a nemesis run).
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
        (
            Options::shared_nemesis(SHARED_SHORT_DURATION, seed, bin()),
            1,
        ),
        (Options::shared_control(seed, bin()), 1),
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
                shared_acquire: 0,
                shared_hold: 0,
            },
            singles: FaultKind::ALL.to_vec(),
            pool: FaultKind::ALL.to_vec(),
            fault_ms: (800, 2000),
            faults_bin,
            control: None,
            fence_control: None,
            multi: None,
            shared: None,
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
            shared: None,
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
            shared: None,
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
mod tests;
