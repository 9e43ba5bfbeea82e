//! The harness every scenario runs in: the cluster, the checker, the
//! clients and the observer started together, and stopped into a [`Report`]
//! (with agents' `hold lost` lines placed beside the overruns they explain).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Options, Report};
use crate::checker::{Checker, Findings};
use crate::clock::Mono;
use crate::cluster::{Cluster, Topology};
use crate::lag::Lag;
use crate::nemesis::NemesisReport;
use crate::observer;
use crate::store::{FencedStore, StoreClient};
use crate::workload::{self, Ctx, PhaseFlag, Processes, Stats};

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
pub(super) struct Harness {
    pub(super) cluster: Arc<Cluster>,
    pub(super) checker: Arc<Checker>,
    pub(super) stats: Arc<Stats>,
    pub(super) phase: Arc<PhaseFlag>,
    pub(super) processes: Arc<Processes>,
    pub(super) stop: watch::Sender<bool>,
    pub(super) clients: Vec<tokio::task::JoinHandle<()>>,
    pub(super) observer: tokio::task::JoinHandle<()>,
    pub(super) lag: Arc<Lag>,
    pub(super) started: Mono,
    /// A wall-clock reading and a monotonic one taken together, to place
    /// agent log lines on the monotonic clock.
    pub(super) wall0: (std::time::SystemTime, Mono),
    /// Each agent's RSS once serving, in KiB.
    pub(super) rss_start: Vec<u64>,
    /// Kept until the report: the clients write to it.
    pub(super) _store: FencedStore,
}

impl Harness {
    pub(super) async fn start(options: &Options) -> Result<Harness, String> {
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
    pub(super) async fn finish(self, options: &Options, nemesis: NemesisReport) -> Report {
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
            shared: options.shared,
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
