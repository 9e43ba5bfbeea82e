//! The nemesis: injects faults into the cluster, one kind at a time and
//! mixed at random, heals them, and measures how long until locks are
//! grantable again.
//!
//! A cycle: set the phase to `faulted`, inject, wait, heal, then probe
//! every agent with a fresh resource until it grants (the recovery time),
//! then a quiet gap. Liveness holds when every recovery takes at most
//! `max_ttl + delayed_restart.extra` plus a margin.
//!
//! Besides killing, freezing and cutting, the faults that lose keys while
//! the master lives on are the hardest for the agent to see: `FLUSHALL`
//! (the incarnation marker goes too) and eviction ([`FaultKind::Evict`]:
//! `maxmemory` lowered under load with an evicting policy; under
//! `volatile-*` the lock keys go and the marker, which has no TTL, stays).
//!
//! And two that no vote sees by itself (the `clocks` module): a master's wall clock
//! moved (jumped forward past every TTL, jumped back, or frozen), on one
//! master or a majority; and a majority restored from snapshots saved
//! while locks were held, the marker back and the newer locks gone, met by
//! the agents whose links keep their connections open on the connections
//! they had. A cycle with moved clocks may take longer to grant again: its
//! liveness bound grows by the largest move (a key written under a moved
//! clock stays that much longer, and the agents may keep the master out
//! until it is gone).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::checker::{Checker, Ending};
use crate::client::{AcquireOptions, Answer};
use crate::clock::Mono;
use crate::cluster::{Cluster, Eviction, ShardFault};
use crate::observer;
use crate::proxy::LinkFault;
use crate::workload::{Phase, PhaseFlag, Processes};

mod clocks;
mod kind;

use kind::over_at_once;
pub use kind::FaultKind;

/// One fault as injected.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub at: Mono,
    pub detail: String,
}

/// How long one cycle took to grant again after healing.
#[derive(Debug, Clone, Serialize)]
pub struct Recovery {
    pub cycle: usize,
    pub kinds: Vec<FaultKind>,
    /// The faults as injected.
    pub faults: Vec<String>,
    /// Slowest agent's first grant after the heal; `None`: not within the limit.
    pub after_ms: Option<f64>,
    /// Each agent's first grant after the heal.
    pub per_agent_ms: Vec<Option<f64>>,
    /// Each agent's last refusal before it granted (why it was slow).
    pub last_refusals: Vec<String>,
}

/// What the nemesis did and saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NemesisReport {
    pub faults: Vec<FaultRecord>,
    pub recoveries: Vec<Recovery>,
    /// Client killed mid-hold until its token was gone from every master.
    pub kill_release_ms: Vec<f64>,
    pub liveness_bound_ms: u64,
    pub liveness_failures: Vec<String>,
    /// Faults that could not be injected (and why).
    pub skipped: Vec<String>,
}

impl NemesisReport {
    pub fn by_kind(&self) -> BTreeMap<FaultKind, usize> {
        let mut out = BTreeMap::new();
        for f in &self.faults {
            *out.entry(f.kind).or_default() += 1;
        }
        out
    }
}

/// What undoes an injected fault.
#[derive(Debug)]
enum Undo {
    Nothing,
    StartMaster(usize),
    Thaw(usize),
    ClearLinks(usize, Vec<usize>),
    StartAgent(usize),
    /// Restore each master's `maxmemory` and policy, delete its cache keys.
    EndEviction(Vec<(usize, Eviction)>),
    /// Put each master back on the real wall clock.
    ClearClocks(clocks::Moved),
}

/// The policies [`FaultKind::Evict`] picks from: the two that evict only
/// keys with a TTL (every lock key, never the incarnation marker: only the
/// votes' eviction check sees what they took) and one that evicts any key
/// (the marker too, as a flush would).
pub const EVICTION_POLICIES: [&str; 3] = ["volatile-lru", "volatile-ttl", "allkeys-lru"];

/// Cache keys [`FaultKind::Evict`] writes to each master it hits: 8 MiB,
/// four times the headroom it leaves ([`crate::cluster::EVICTION_HEADROOM`]),
/// so most keys there before are evicted.
pub const EVICTION_WRITES: u32 = 512;

/// Locks must be grantable again within `max_ttl + delayed_restart.extra`
/// plus this after every heal.
pub const LIVENESS_MARGIN: Duration = Duration::from_secs(2);

/// The margin instead of [`LIVENESS_MARGIN`] when the masters are clusters:
/// a shard's slots are readmitted only once the agent has written a witness
/// in each of them and read each one's fencing counter on the other
/// masters, thousands of slots, which takes seconds on a busy 2-core
/// machine; and a later fault may hit another cluster while they wait.
pub const CLUSTER_LIVENESS_MARGIN: Duration = Duration::from_secs(10);

/// Injects faults into one cluster.
pub struct Nemesis {
    cluster: Arc<Cluster>,
    checker: Arc<Checker>,
    processes: Arc<Processes>,
    phase: Arc<PhaseFlag>,
    rng: StdRng,
    pub report: NemesisReport,
    cycle: usize,
    /// Fault duration range, in ms.
    pub fault_ms: (u64, u64),
    /// Quiet gap after each recovery.
    pub gap: Duration,
    /// The lock keys of the workload's resources: the slots the cluster
    /// faults aim at most of the time.
    pub hot_keys: Vec<String>,
    kill_release: Vec<tokio::task::JoinHandle<Option<f64>>>,
    /// The current cycle's liveness bound beyond the report's: the largest
    /// clock move healed in it, in ms.
    cycle_extra_ms: u64,
}

impl Nemesis {
    pub fn new(
        cluster: Arc<Cluster>,
        checker: Arc<Checker>,
        processes: Arc<Processes>,
        phase: Arc<PhaseFlag>,
        seed: u64,
    ) -> Nemesis {
        // The margin covers noticing the heal (a probe interval), a
        // reconnect (up to ten node timeouts) and a loaded machine.
        let clusters = cluster.masters.iter().any(|m| m.as_cluster().is_some());
        let margin = if clusters {
            CLUSTER_LIVENESS_MARGIN
        } else {
            LIVENESS_MARGIN
        };
        let bound = cluster.settings.quarantine() + margin;
        Nemesis {
            cluster,
            checker,
            processes,
            phase,
            rng: StdRng::seed_from_u64(seed),
            report: NemesisReport {
                liveness_bound_ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
                ..NemesisReport::default()
            },
            cycle: 0,
            fault_ms: (800, 2000),
            gap: Duration::from_millis(300),
            hot_keys: Vec::new(),
            kill_release: Vec::new(),
            cycle_extra_ms: 0,
        }
    }

    fn record(&mut self, kind: FaultKind, detail: String) {
        self.report.faults.push(FaultRecord {
            kind,
            at: Mono::now(),
            detail,
        });
    }

    /// `k` distinct masters not in `busy`, chosen at random.
    fn pick_masters(&mut self, k: usize, busy: &mut Vec<usize>) -> Vec<usize> {
        let free: Vec<usize> = (0..self.cluster.masters.len())
            .filter(|i| !busy.contains(i))
            .collect();
        let picked: Vec<usize> = free
            .choose_multiple(&mut self.rng, k.min(free.len()))
            .copied()
            .collect();
        busy.extend(&picked);
        picked
    }

    /// A majority of the masters not in `busy`, for `kind`; `None` (and
    /// the fault skipped, saying why) when too few are free.
    fn pick_majority(&mut self, kind: FaultKind, busy: &mut Vec<usize>) -> Option<Vec<usize>> {
        let majority = self.cluster.masters.len() / 2 + 1;
        let picked = self.pick_masters(majority, busy);
        if picked.len() < majority {
            self.report
                .skipped
                .push(format!("{}: not enough free masters", kind.as_str()));
            return None;
        }
        Some(picked)
    }

    fn names(&self, masters: &[usize]) -> String {
        masters
            .iter()
            .map(|&i| self.cluster.masters[i].name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A slot for a cluster fault: three times in four a hot resource's.
    fn pick_slot(&mut self) -> u16 {
        let hot = self.hot_keys.choose(&mut self.rng).cloned();
        match hot {
            Some(key) if self.rng.random_bool(0.75) => redlock_wire::keys::key_slot(key.as_bytes()),
            _ => self.rng.random_range(0..redlock_wire::keys::SLOTS),
        }
    }

    /// A shard fault in one to a majority of the cluster masters at once,
    /// each on the shard serving a slot of its own choosing.
    async fn inject_shards(
        &mut self,
        kind: FaultKind,
        fault: ShardFault,
        busy: &mut Vec<usize>,
    ) -> Option<Undo> {
        let majority = self.cluster.masters.len() / 2 + 1;
        let k = self.rng.random_range(1..=majority);
        busy.extend(
            (0..self.cluster.masters.len())
                .filter(|&j| self.cluster.masters[j].as_cluster().is_none()),
        );
        let picked = self.pick_masters(k, busy);
        if picked.is_empty() {
            self.report
                .skipped
                .push(format!("{}: no free cluster master", kind.as_str()));
            return None;
        }
        let window = Duration::from_millis(self.rng.random_range(200..=800));
        let targets: Vec<(usize, u16, usize)> = picked
            .iter()
            .map(|&j| (j, self.pick_slot(), self.rng.random_range(0..1000)))
            .collect();
        let held = self.checker.open();
        let hits = targets.iter().map(|&(j, slot, pick)| {
            let m = self.cluster.masters[j].clone();
            async move { m.shard_fault(fault, slot, window, pick).await }
        });
        let mut done = Vec::new();
        for r in futures::future::join_all(hits).await {
            match r {
                Ok(detail) => done.push(detail),
                Err(e) => self.report.skipped.push(format!("{}: {e}", kind.as_str())),
            }
        }
        if done.is_empty() {
            return None;
        }
        self.record(kind, format!("{} ({held} sections open)", done.join("; ")));
        Some(Undo::Nothing)
    }

    async fn inject(
        &mut self,
        kind: FaultKind,
        busy: &mut Vec<usize>,
        agent_down: &mut bool,
    ) -> Option<Undo> {
        let agents = self.cluster.agents.len();
        match kind {
            FaultKind::RestartShard => {
                self.inject_shards(kind, ShardFault::RestartEmpty, busy)
                    .await
            }
            FaultKind::ShardFailover => {
                self.inject_shards(kind, ShardFault::LaggedFailover, busy)
                    .await
            }
            FaultKind::MigrateSlot => {
                self.inject_shards(kind, ShardFault::MigrateSlot, busy)
                    .await
            }
            FaultKind::ClockForward | FaultKind::ClockBack | FaultKind::ClockFreeze => {
                self.inject_clocks(kind, busy)
            }
            FaultKind::RestoreMajority => self.inject_restore(busy).await,
            FaultKind::KillMaster | FaultKind::RestartMaster | FaultKind::FreezeMaster => {
                let Some(&j) = self.pick_masters(1, busy).first() else {
                    self.report
                        .skipped
                        .push(format!("{}: no free master", kind.as_str()));
                    return None;
                };
                let master = self.cluster.masters[j].clone();
                let undo = match kind {
                    FaultKind::KillMaster => {
                        master.kill().await;
                        Undo::StartMaster(j)
                    }
                    FaultKind::RestartMaster => {
                        if let Err(e) = master.restart().await {
                            self.report
                                .skipped
                                .push(format!("restart {}: {e}", master.name));
                        }
                        Undo::Nothing
                    }
                    _ => {
                        if let Err(e) = master.freeze() {
                            self.report
                                .skipped
                                .push(format!("freeze {}: {e}", master.name));
                            return None;
                        }
                        Undo::Thaw(j)
                    }
                };
                self.record(kind, master.name.clone());
                Some(undo)
            }
            FaultKind::RestartMajority | FaultKind::FlushMajority => {
                let picked = self.pick_majority(kind, busy)?;
                let held = self.checker.open();
                let flush = kind == FaultKind::FlushMajority;
                let hits = picked.iter().map(|&j| {
                    let m = self.cluster.masters[j].clone();
                    async move {
                        if flush {
                            m.flush().await
                        } else {
                            m.restart().await
                        }
                    }
                });
                for r in futures::future::join_all(hits).await {
                    if let Err(e) = r {
                        self.report.skipped.push(format!("{}: {e}", kind.as_str()));
                    }
                }
                let detail = format!("{} ({held} sections open)", self.names(&picked));
                self.record(kind, detail);
                Some(Undo::Nothing)
            }
            FaultKind::FlushMaster | FaultKind::Failover => {
                let Some(&j) = self.pick_masters(1, busy).first() else {
                    self.report
                        .skipped
                        .push(format!("{}: no free master", kind.as_str()));
                    return None;
                };
                let held = self.checker.open();
                let done = if kind == FaultKind::FlushMaster {
                    let m = &self.cluster.masters[j];
                    m.flush().await.map(|()| m.name.clone())
                } else {
                    self.cluster.failover(j).await
                };
                match done {
                    Ok(detail) => {
                        self.record(kind, format!("{detail} ({held} sections open)"));
                        Some(Undo::Nothing)
                    }
                    Err(e) => {
                        self.report.skipped.push(format!("{}: {e}", kind.as_str()));
                        None
                    }
                }
            }
            FaultKind::Evict => {
                let majority = self.cluster.masters.len() / 2 + 1;
                let k = self.rng.random_range(1..=majority);
                let picked = self.pick_masters(k, busy);
                if picked.is_empty() {
                    self.report
                        .skipped
                        .push("evict: no free master".to_string());
                    return None;
                }
                let targets: Vec<(usize, &'static str)> = picked
                    .iter()
                    .map(|&j| {
                        let policy = *EVICTION_POLICIES
                            .choose(&mut self.rng)
                            .unwrap_or(&EVICTION_POLICIES[0]);
                        (j, policy)
                    })
                    .collect();
                let held = self.checker.open();
                let tag = format!("cycle{}", self.cycle);
                let hits = targets.iter().map(|&(j, policy)| {
                    let m = self.cluster.masters[j].clone();
                    let tag = tag.clone();
                    async move { (j, m.evict(policy, &tag, EVICTION_WRITES, None).await) }
                });
                let mut begun = Vec::new();
                for (j, r) in futures::future::join_all(hits).await {
                    match r {
                        Ok(eviction) => begun.push((j, eviction)),
                        Err(e) => self.report.skipped.push(format!("evict: {e}")),
                    }
                }
                if begun.is_empty() {
                    return None;
                }
                let detail = begun
                    .iter()
                    .map(|(_, e)| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                self.record(kind, format!("{detail} ({held} sections open)"));
                Some(Undo::EndEviction(begun))
            }
            FaultKind::LinkLatency | FaultKind::LinkCut | FaultKind::LinkBlackhole => {
                let a = self.rng.random_range(0..agents);
                let k = self
                    .rng
                    .random_range(1..=self.cluster.masters.len() / 2 + 1);
                let mut none = Vec::new();
                let masters = self.pick_masters(k, &mut none);
                let fault = match kind {
                    FaultKind::LinkLatency => {
                        let ms = *[5u64, 20, 40, 80, 150].choose(&mut self.rng).unwrap_or(&20);
                        LinkFault::Latency(Duration::from_millis(ms))
                    }
                    FaultKind::LinkCut => LinkFault::Cut,
                    _ => LinkFault::Blackhole,
                };
                for &j in &masters {
                    self.cluster.links[a][j].set(fault);
                }
                let detail = format!("a{} -> {} {fault:?}", a + 1, self.names(&masters));
                self.record(kind, detail);
                Some(Undo::ClearLinks(a, masters))
            }
            FaultKind::KillAgent => {
                if *agent_down || agents < 2 {
                    self.report
                        .skipped
                        .push("kill_agent: one agent is already down".into());
                    return None;
                }
                let a = self.rng.random_range(0..agents);
                self.cluster.agents[a].lock().await.kill();
                *agent_down = true;
                self.record(kind, format!("a{}", a + 1));
                Some(Undo::StartAgent(a))
            }
            FaultKind::KillClient => {
                // Wait a little for a client process to be inside a hold.
                let deadline = Mono::now().plus_ms(2000);
                let pick = self.rng.random_range(0..1000usize);
                let found = loop {
                    if let Some(found) = self.processes.inside(pick) {
                        break Some(found);
                    }
                    if Mono::now() > deadline {
                        break None;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                };
                let Some((pid, running)) = found else {
                    self.report
                        .skipped
                        .push("kill_client: no client process inside a section".into());
                    return None;
                };
                let killed_at = Mono::now();
                // SAFETY: kill(2) on a child of this process (or a pid just
                // reaped, which at worst fails with ESRCH).
                let ok = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } == 0;
                if !ok {
                    self.report
                        .skipped
                        .push(format!("kill_client: pid {pid} gone"));
                    return None;
                }
                self.processes.killed(pid);
                if let Some((id, token)) = running.section {
                    self.checker.exit(id, killed_at, Ending::Killed);
                    let masters = self.cluster.masters.clone();
                    let prefix = self.cluster.settings.key_prefix.clone();
                    self.kill_release.push(tokio::spawn(async move {
                        let deadline = killed_at.plus_ms(10_000);
                        while Mono::now() < deadline {
                            if !observer::token_present(&masters, &prefix, &token).await {
                                return Some(Mono::now().ms_after(killed_at));
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        None
                    }));
                }
                self.record(
                    kind,
                    format!("{} ({}, pid {pid})", running.client, running.kind.as_str()),
                );
                Some(Undo::Nothing)
            }
        }
    }

    async fn heal(&mut self, undo: Undo) {
        match undo {
            Undo::Nothing => {}
            Undo::StartMaster(j) => {
                let m = self.cluster.masters[j].clone();
                if let Err(e) = m.restart().await {
                    self.report
                        .liveness_failures
                        .push(format!("{} did not come back: {e}", m.name));
                }
            }
            Undo::Thaw(j) => {
                let _ = self.cluster.masters[j].thaw();
            }
            Undo::ClearLinks(a, masters) => {
                for j in masters {
                    self.cluster.links[a][j].set(LinkFault::Clear);
                }
            }
            Undo::EndEviction(evictions) => {
                let ends = evictions.iter().map(|(j, eviction)| {
                    let m = self.cluster.masters[*j].clone();
                    async move { m.end_eviction(eviction).await }
                });
                for r in futures::future::join_all(ends).await {
                    if let Err(e) = r {
                        self.report
                            .liveness_failures
                            .push(format!("an eviction was not undone: {e}"));
                    }
                }
            }
            Undo::ClearClocks(moved) => self.clear_clocks(moved),
            Undo::StartAgent(a) => {
                let mut agent = self.cluster.agents[a].lock().await;
                let started = agent.start();
                let ready = match started {
                    Ok(()) => agent.wait_ready(Duration::from_secs(10)).await,
                    Err(e) => Err(e.to_string()),
                };
                if let Err(e) = ready {
                    self.report
                        .liveness_failures
                        .push(format!("a{} did not come back: {e}", a + 1));
                }
            }
        }
    }

    /// One cycle with `kinds` at once.
    pub async fn cycle(&mut self, kinds: &[FaultKind]) {
        self.cycle += 1;
        self.cycle_extra_ms = 0;
        self.phase.set(Phase::Faulted);
        let mut busy = Vec::new();
        let mut agent_down = false;
        let faults_before = self.report.faults.len();
        let mut undos = Vec::new();
        let mut injected = Vec::new();
        for &kind in kinds {
            if let Some(undo) = self.inject(kind, &mut busy, &mut agent_down).await {
                undos.push(undo);
                injected.push(kind);
            }
        }
        // A restart is over once the masters run again: recovery from a
        // cycle of restarts only is timed from then, not from the wait's end.
        let injected_at = Mono::now();
        let hold = self.rng.random_range(self.fault_ms.0..=self.fault_ms.1);
        if !over_at_once(&injected) {
            tokio::time::sleep(Duration::from_millis(hold)).await;
        }
        for undo in undos.into_iter().rev() {
            self.heal(undo).await;
        }
        let healed = if over_at_once(&injected) {
            injected_at
        } else {
            Mono::now()
        };
        self.phase.set(Phase::Recovering);
        let probes = self.recovery(healed).await;
        let per_agent_ms: Vec<Option<f64>> = probes.iter().map(|(t, _)| *t).collect();
        let slowest = per_agent_ms
            .iter()
            .try_fold(0.0f64, |acc, t| t.map(|t| acc.max(t)));
        let bound_ms = self.report.liveness_bound_ms + self.cycle_extra_ms;
        let after = slowest.filter(|&ms| ms <= bound_ms as f64);
        let faults: Vec<String> = self.report.faults[faults_before..]
            .iter()
            .map(|f| format!("{} {}", f.kind.as_str(), f.detail))
            .collect();
        let last_refusals = if after.is_none_or(|ms| ms > 1000.0) {
            probes
                .iter()
                .enumerate()
                .map(|(a, (_, why))| format!("a{}: {why}", a + 1))
                .collect()
        } else {
            Vec::new()
        };
        if after.is_none() {
            self.report.liveness_failures.push(format!(
                "cycle {} ({}): no grant on every agent within {bound_ms}ms of healing",
                self.cycle,
                injected
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join("+"),
            ));
        }
        self.report.recoveries.push(Recovery {
            cycle: self.cycle,
            kinds: injected,
            faults,
            after_ms: after,
            per_agent_ms,
            last_refusals,
        });
        self.phase.set(Phase::Quiet);
        tokio::time::sleep(self.gap).await;
    }

    /// Probes every agent with a fresh resource until each grants; the
    /// slowest agent's time, or `None` past twice the bound.
    async fn recovery(&self, healed: Mono) -> Vec<(Option<f64>, String)> {
        let limit = healed.plus_ms((self.report.liveness_bound_ms + self.cycle_extra_ms) * 2);
        let clients = self.cluster.clients().await;
        let cycle = self.cycle;
        // 300 ms, or the least the agents take: twice their node timeout.
        let probe_ttl = (self.cluster.settings.node_timeout * 2).max(Duration::from_millis(300));
        let probes = clients
            .into_iter()
            .enumerate()
            .map(|(a, client)| async move {
                let resource = format!("probe-{cycle}-a{}", a + 1);
                let request = AcquireOptions::new().ttl(probe_ttl).owner("probe");
                let mut last = String::new();
                while Mono::now() < limit {
                    match client.acquire(&resource, &request).await {
                        Ok(Answer::Ok(grant)) => {
                            let at = Mono::now();
                            let _ = client.release(&resource, &grant.token).await;
                            return (Some(at.ms_after(healed)), last);
                        }
                        Ok(Answer::Refused { code, message }) => {
                            last = format!("{}: {message}", code.as_str());
                        }
                        Err(e) => last = e.to_string(),
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                (None, last)
            });
        futures::future::join_all(probes).await
    }

    /// Runs cycles until `until`: first each of `singles` on its own, then
    /// random mixes of one to three of `pool`.
    pub async fn run(&mut self, singles: &[FaultKind], pool: &[FaultKind], until: Mono) {
        for &kind in singles {
            if Mono::now() >= until {
                break;
            }
            self.cycle(&[kind]).await;
        }
        while Mono::now() < until && !pool.is_empty() {
            let n = self.rng.random_range(1..=3usize);
            let mut kinds: Vec<FaultKind> = Vec::new();
            let mut masters_faults = 0;
            for _ in 0..n {
                let kind = *pool.choose(&mut self.rng).unwrap_or(&pool[0]);
                // At most one fault that takes masters away by majority.
                if kind.takes_a_majority() && masters_faults > 0 {
                    continue;
                }
                if kind.targets_masters() {
                    masters_faults += 1;
                }
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            self.cycle(&kinds).await;
        }
    }

    /// Waits for the client-kill release measurements.
    pub async fn finish(&mut self) {
        for task in self.kill_release.drain(..) {
            if let Ok(Some(ms)) = task.await {
                self.report.kill_release_ms.push(ms);
            }
        }
    }
}
