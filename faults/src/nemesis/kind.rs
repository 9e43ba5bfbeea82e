//! The kinds of fault the nemesis injects, and what each kind is like:
//! whether it strikes masters, may take a majority's keys at once, or is
//! over as soon as it is injected.

use serde::Serialize;

/// Every fault the nemesis knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL a master; it comes back empty when healed.
    KillMaster,
    /// Kill a master and start it again at once, empty.
    RestartMaster,
    /// SIGSTOP a master; SIGCONT when healed.
    FreezeMaster,
    /// Delay the links from one agent to some masters.
    LinkLatency,
    /// Close and refuse the links from one agent to some masters.
    LinkCut,
    /// Stall the links from one agent to some masters (a silent partition).
    LinkBlackhole,
    /// SIGKILL an agent; started again when healed.
    KillAgent,
    /// SIGKILL a client process in the middle of a hold.
    KillClient,
    /// Restart a majority of the masters empty at once, while locks are held.
    RestartMajority,
    /// `FLUSHALL` on one master, straight to it (not through a link): it
    /// loses every key while its process lives on (no restart to detect).
    FlushMaster,
    /// `FLUSHALL` on a majority of the masters at once, while locks are held.
    FlushMajority,
    /// Make one to a majority of the masters evict while locks are held,
    /// as a Redis shared with a cache does: `maxmemory` just above what
    /// each uses, a policy picked at random among [`EVICTION_POLICIES`](super::EVICTION_POLICIES),
    /// and [`EVICTION_WRITES`](super::EVICTION_WRITES) cache keys with a TTL written straight to it
    /// (not through a link). Until the heal the agents' own writes keep it
    /// evicting; the heal restores `maxmemory` and the policy and deletes
    /// the cache keys (by their own prefix, never a lock key).
    Evict,
    /// Fail one master over to a replica promoted behind its address (see
    /// [`Cluster::failover`](crate::cluster::Cluster::failover)); the replica stays that master.
    Failover,
    /// Jump the wall clock of one master, or of a majority at once, forward
    /// by more than the longest TTL in use (`max_ttl` plus 0.2 to 1.5 s):
    /// Redis expires keys by its wall clock, so the held locks there go at
    /// once. Put back on the real clock when healed (a jump back: the keys
    /// written meanwhile stay that much longer).
    ClockForward,
    /// Jump the wall clock of one master, or of a majority at once, back by
    /// 0.5 to 2.5 s: keys stay that much longer. Put back when healed (a
    /// jump forward: the keys written meanwhile expire that much earlier).
    ClockBack,
    /// Freeze the wall clock of one master, or of a majority at once: no
    /// key expires meanwhile. Put back on the real clock when healed (a
    /// jump forward by how long it stood still: the keys written meanwhile
    /// expire early).
    ClockFreeze,
    /// `SAVE` on a majority while locks are held, 0.3 to 1.5 s for the
    /// locks to move on, then each killed and started again from its
    /// snapshot at once: a majority restored from old snapshots, with the
    /// incarnation marker and the locks of then, none granted since. The
    /// agents whose links keep their connections open
    /// ([`crate::cluster::AgentSettings::keeping_links`]) meet the restored
    /// processes on the connections they had.
    RestoreMajority,
    /// Cluster masters: restart empty, in one to a majority of the
    /// clusters, the shard serving a hot resource's slot (or a random one).
    RestartShard,
    /// Cluster masters: a lagged failover (the replica frozen and cut off,
    /// the primary killed, the replica promoted without the writes of the
    /// lag) of the shard serving a hot resource's slot (or a random one),
    /// in one to a majority of the clusters at once.
    ShardFailover,
    /// Cluster masters: migrate a hot resource's slot (or a random one) to
    /// another shard, pausing mid-migration, in one to a majority of the
    /// clusters at once.
    MigrateSlot,
}

impl FaultKind {
    /// Every fault of single-server masters.
    pub const ALL: [FaultKind; 17] = [
        FaultKind::KillMaster,
        FaultKind::RestartMaster,
        FaultKind::FreezeMaster,
        FaultKind::LinkLatency,
        FaultKind::LinkCut,
        FaultKind::LinkBlackhole,
        FaultKind::KillAgent,
        FaultKind::KillClient,
        FaultKind::RestartMajority,
        FaultKind::FlushMaster,
        FaultKind::FlushMajority,
        FaultKind::Evict,
        FaultKind::Failover,
        FaultKind::ClockForward,
        FaultKind::ClockBack,
        FaultKind::ClockFreeze,
        FaultKind::RestoreMajority,
    ];

    /// Every fault of cluster masters (reached without proxies: no link
    /// faults).
    pub const CLUSTER: [FaultKind; 5] = [
        FaultKind::RestartShard,
        FaultKind::ShardFailover,
        FaultKind::MigrateSlot,
        FaultKind::KillAgent,
        FaultKind::KillClient,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::KillMaster => "kill_master",
            FaultKind::RestartMaster => "restart_master",
            FaultKind::FreezeMaster => "freeze_master",
            FaultKind::LinkLatency => "link_latency",
            FaultKind::LinkCut => "link_cut",
            FaultKind::LinkBlackhole => "link_blackhole",
            FaultKind::KillAgent => "kill_agent",
            FaultKind::KillClient => "kill_client",
            FaultKind::RestartMajority => "restart_majority",
            FaultKind::FlushMaster => "flush_master",
            FaultKind::FlushMajority => "flush_majority",
            FaultKind::Evict => "evict",
            FaultKind::Failover => "failover",
            FaultKind::ClockForward => "clock_forward",
            FaultKind::ClockBack => "clock_back",
            FaultKind::ClockFreeze => "clock_freeze",
            FaultKind::RestoreMajority => "restore_majority",
            FaultKind::RestartShard => "restart_shard",
            FaultKind::ShardFailover => "shard_failover",
            FaultKind::MigrateSlot => "migrate_slot",
        }
    }

    pub(super) fn targets_masters(self) -> bool {
        matches!(
            self,
            FaultKind::ClockForward
                | FaultKind::ClockBack
                | FaultKind::ClockFreeze
                | FaultKind::RestoreMajority
                | FaultKind::KillMaster
                | FaultKind::RestartMaster
                | FaultKind::FreezeMaster
                | FaultKind::RestartMajority
                | FaultKind::FlushMaster
                | FaultKind::FlushMajority
                | FaultKind::Evict
                | FaultKind::Failover
                | FaultKind::RestartShard
                | FaultKind::ShardFailover
                | FaultKind::MigrateSlot
        )
    }

    /// Faults that take (or may take) a majority of the masters' keys at
    /// once.
    pub(super) fn takes_a_majority(self) -> bool {
        matches!(
            self,
            FaultKind::RestartMajority
                | FaultKind::FlushMajority
                | FaultKind::Evict
                | FaultKind::ClockForward
                | FaultKind::ClockBack
                | FaultKind::ClockFreeze
                | FaultKind::RestoreMajority
        )
    }

    /// Moves masters' wall clocks (healed by putting them back).
    pub fn moves_clocks(self) -> bool {
        matches!(
            self,
            FaultKind::ClockForward | FaultKind::ClockBack | FaultKind::ClockFreeze
        )
    }
}

/// Faults that are over as soon as they are injected: nothing to heal.
pub(super) fn over_at_once(kinds: &[FaultKind]) -> bool {
    !kinds.is_empty()
        && kinds.iter().all(|k| {
            matches!(
                k,
                FaultKind::RestartMaster
                    | FaultKind::RestartMajority
                    | FaultKind::RestoreMajority
                    | FaultKind::KillClient
                    | FaultKind::FlushMaster
                    | FaultKind::FlushMajority
                    | FaultKind::Failover
                    | FaultKind::RestartShard
                    | FaultKind::ShardFailover
                    | FaultKind::MigrateSlot
            )
        })
}
