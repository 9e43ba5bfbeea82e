//! The agent's state shared by every request: the config, the lock service,
//! the masters' health settings, the scanner and the metrics; and the
//! background tasks that keep them current. Serving it is
//! [`crate::daemon`]'s.

use std::sync::Arc;
use std::time::Duration;

use redlock_wire::{NodeState, NodeStatus, NodesResponse};

use crate::config::Config;
use crate::health::{self, HealthSettings, Usability};
use crate::lock::idle::IDLE_AFTER;
use crate::lock::waiters::{self, Subscriptions, Waiters};
use crate::lock::{millis, Rules};
use crate::metrics::{Metrics, NodeSeries};
use crate::node::{subscriber, Node, NodeSettings, FENCE_SUFFIX};
use crate::redlock::fence::{FenceSettings, CLOCK_SKEW_SWITCH, NO_WRITEBACK_SWITCH};
use crate::redlock::master::NodeError;
use crate::redlock::{Drift, Settings};
use crate::scanner::{ScanSettings, Scanner};
use crate::telemetry::Telemetry;
use redlock_testkit::switches::{
    MULTI_PARTIAL, NO_LOSS_NOTICE, NO_SLOT_READINESS, POLL_WAITERS, REENTRY_MAY_SHORTEN,
    REENTRY_TRUSTS_PID_ZERO, RENEWALS_WAIT_FOR_CLIENT, SEMAPHORE_LIMIT_BY_GRANTER, SHARED_APART,
    UNSETTLED_HOLD_CLOSE,
};
use tokio_util::sync::CancellationToken;

/// The engine over the Redis masters.
pub type Engine = crate::redlock::Redlock<Node>;
/// The lock service over the Redis masters.
pub type Locks = crate::lock::Locks<Node>;

/// The test-only switch that turns the in-vote marker check off, so a
/// control run can show the fault suite's checker finding the double grant
/// it prevents. An environment variable, not a config key: no deployment
/// should be able to turn it off by accident.
pub use redlock_testkit::switches::NO_MARKER_CHECK as MARKER_SWITCH;

fn marker_check_disabled() -> bool {
    switched_on(MARKER_SWITCH)
}

/// A test-only switch (see [`redlock_testkit::switches`]) set to `1`.
fn switched_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

/// The test-only switch that turns the in-vote eviction check off, for the
/// control run that must find the double grant on masters that evict.
pub use redlock_testkit::switches::NO_EVICTION_CHECK as EVICTION_SWITCH;

fn eviction_check_disabled() -> bool {
    std::env::var_os(EVICTION_SWITCH).is_some_and(|v| v == "1")
}

/// The test-only switch that charges the agent's own time (queued, or too
/// busy to write or read) to the masters again, so a control run can show
/// lock calls failing under the agent's own load without the fix.
pub use redlock_testkit::switches::CHARGE_QUEUED_TIME as CHARGE_QUEUED_SWITCH;

fn charging_queued_time() -> bool {
    std::env::var_os(CHARGE_QUEUED_SWITCH).is_some_and(|v| v == "1")
}

/// State shared by every request.
#[derive(Debug)]
pub struct Agent {
    config: Config,
    locks: Arc<Locks>,
    pub(crate) health: HealthSettings,
    metrics: Arc<Metrics>,
    scanner: Arc<Scanner>,
    started: std::time::Instant,
    /// Readiness counts cluster slots in quarantine; off only under the
    /// test switch `REDLOCK_TEST_NO_SLOT_READINESS`, for control runs.
    slot_readiness: bool,
    /// OpenTelemetry spans of the lock path; holds nothing when off.
    telemetry: Telemetry,
}

/// A master URL the redis crate refuses.
#[derive(Debug, thiserror::Error)]
#[error("masters[{index}].url: {source}")]
pub struct MasterUrlError {
    pub index: usize,
    #[source]
    pub source: redis::RedisError,
}

impl Agent {
    /// Builds the nodes from the config; connects nothing yet.
    ///
    /// # Errors
    /// When the redis crate refuses a master URL.
    pub fn new(config: Config) -> Result<Agent, MasterUrlError> {
        // rediss:// masters use rustls with ring; installing the provider a
        // second time (another agent in this process) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let names: Vec<String> = config.masters.iter().map(|m| m.name.clone()).collect();
        let metrics = Arc::new(Metrics::with_wait_ceiling(&names, config.lock.max_hold));
        let marker_key = format!("{}{}", config.lock.key_prefix, health::MARKER_SUFFIX);
        let marker_check = !marker_check_disabled();
        if !marker_check {
            tracing::warn!(
                "{MARKER_SWITCH} is set: votes do not check the incarnation marker, and a master \
                 that loses its keys can grant a lock twice; for control runs of the tests only"
            );
        }
        let eviction_check = !eviction_check_disabled();
        if !eviction_check {
            tracing::warn!(
                "{EVICTION_SWITCH} is set: votes do not check whether a master evicted keys, and \
                 a master that evicts can grant a lock twice; for control runs of the tests only"
            );
        }
        let charge_queued = charging_queued_time();
        if charge_queued {
            tracing::warn!(
                "{CHARGE_QUEUED_SWITCH} is set: time lock commands spend queued in the agent counts \
                 as the masters' timeouts, and lock calls fail under the agent's own load; for \
                 control runs of the tests only"
            );
        }
        let clock_check = !switched_on(redlock_testkit::switches::NO_CLOCK_CHECK);
        if !clock_check {
            tracing::warn!(
                "{} is set: the masters' clocks are not watched, and a master whose clock jumps \
                 or freezes can grant a lock twice; for control runs of the tests only",
                redlock_testkit::switches::NO_CLOCK_CHECK
            );
        }
        let process_check = !switched_on(redlock_testkit::switches::NO_PROCESS_CHECK);
        if !process_check {
            tracing::warn!(
                "{} is set: a vote that finds its script missing does not ask whether the master \
                 restarted, and a master restored behind a proxy can grant a lock twice; for \
                 control runs of the tests only",
                redlock_testkit::switches::NO_PROCESS_CHECK
            );
        }
        let fence = FenceSettings {
            clock_bound: config.quarantine(),
            ..FenceSettings::from_env()
        };
        if !fence.writeback {
            tracing::warn!(
                "{NO_WRITEBACK_SWITCH} is set: fenced grants do not raise the masters' counters, \
                 and fences can go backwards; for control runs of the tests only"
            );
        }
        if fence.clock_skew_ms != 0 {
            tracing::warn!(
                skew_ms = fence.clock_skew_ms,
                "{CLOCK_SKEW_SWITCH} is set: the fence floor reads a shifted clock; for tests only"
            );
        }
        // Every release names its key's waiting flag with the tag of the
        // key's slot: build the tag table now, not on the first release,
        // where it would hold up that master's queue (milliseconds, more in
        // a debug build).
        redlock_wire::keys::slot_tag(0);
        let node_settings = NodeSettings {
            timeout: config.lock.node_timeout,
            key_prefix: config.lock.key_prefix.clone(),
            marker_key: marker_key.clone(),
            fence_key: format!("{}{}", config.lock.key_prefix, FENCE_SUFFIX),
            marker_check,
            eviction_check,
            quarantine: if config.delayed_restart.enabled {
                config.quarantine()
            } else {
                std::time::Duration::ZERO
            },
            charge_queued,
            overall: config.lock.max_ttl,
            agent_name: config.agent.name.clone(),
            clock_check,
            process_check,
            drift_factor: config.lock.drift_factor,
            stale_after: config.health.interval * 2,
        };
        let mut nodes = Vec::with_capacity(config.masters.len());
        for (index, master) in config.masters.iter().enumerate() {
            let certs = || {
                (master.tls_ca.is_some() || master.tls_client.is_some()).then(|| {
                    redis::TlsCertificates {
                        client_tls: master.tls_client.as_ref().map(|c| redis::ClientTlsConfig {
                            client_cert: c.cert.clone(),
                            client_key: c.key.clone(),
                        }),
                        root_cert: master.tls_ca.clone(),
                    }
                })
            };
            let client = master
                .url
                .connection_info()
                .and_then(|info| match certs() {
                    None => redis::Client::open(info),
                    Some(certs) => redis::Client::build_with_tls(info, certs),
                })
                .map_err(|source| MasterUrlError { index, source })?;
            let series = Arc::new(NodeSeries::new(&metrics, &master.name, &NodeError::KINDS));
            if master.cluster.is_empty() {
                nodes.push(Node::new(
                    master.name.clone(),
                    client,
                    node_settings.clone(),
                    series,
                ));
                continue;
            }
            let cluster = master
                .cluster
                .iter()
                .map(|url| url.connection_info())
                .collect::<redis::RedisResult<Vec<_>>>()
                .and_then(|seeds| crate::node::cluster::client(seeds, certs()))
                .map_err(|source| MasterUrlError { index, source })?;
            nodes.push(Node::new_cluster(
                master.name.clone(),
                client,
                cluster,
                node_settings.clone(),
                series,
            ));
        }
        let settings = Settings {
            key_prefix: config.lock.key_prefix.clone(),
            release_channel_prefix: waiters::release_channel(&config.lock.key_prefix, ""),
            drift: Drift::new(config.lock.drift_factor),
            retry_delay: config.lock.retry_delay,
            retry_jitter: config.lock.retry_jitter,
            agent_name: Some(config.agent.name.clone()),
            fence,
            all_or_nothing: !switched_on(MULTI_PARTIAL),
            shared_apart: switched_on(SHARED_APART),
            poll_waiters: switched_on(POLL_WAITERS),
        };
        let health = HealthSettings {
            interval: config.health.interval,
            idle_interval: config.health.idle_interval,
            quarantine: config.quarantine(),
            delayed_restart: config.delayed_restart.enabled,
            marker_key,
            masters_fresh: false,
        };
        let scanner = Arc::new(Scanner::new(
            ScanSettings {
                config: config.leak_scan.clone(),
                key_prefix: config.lock.key_prefix.clone(),
                max_ttl: config.lock.max_ttl,
                quorum: config.quorum(),
                masters: names.clone(),
                agent_name: config.agent.name.clone(),
                idle_interval: config.health.idle_interval,
            },
            Arc::clone(&metrics),
        ));
        let shutdown = CancellationToken::new();
        let waiters = Arc::new(Waiters::new(
            config.lock.key_prefix.clone(),
            config.lock.max_waiters,
            config.lock.max_waiters_per_uid,
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
        let engine = Engine::new(nodes, settings, metrics.clone());
        let mut rules = Rules::new(&config.lock, config.socket.isolate);
        if switched_on(NO_LOSS_NOTICE) {
            tracing::warn!(
                "{NO_LOSS_NOTICE} is set: holds hear of a force release or of masters that lost \
                 their keys only at their next renewal; for control runs of the tests only"
            );
            rules.loss_notice = false;
        }
        if switched_on(REENTRY_MAY_SHORTEN) {
            tracing::warn!(
                "{REENTRY_MAY_SHORTEN} is set: a re-entry sets the TTL it asks for, and may cut \
                 the validity its lock's first holder was told; for control runs of the tests only"
            );
            rules.reentry_keeps_ttl = false;
        }
        if switched_on(REENTRY_TRUSTS_PID_ZERO) {
            tracing::warn!(
                "{REENTRY_TRUSTS_PID_ZERO} is set: processes the kernel reports as pid 0 (in a pid \
                 namespace this agent does not see) may re-enter each other's locks; for control \
                 runs of the tests only"
            );
            rules.reentry_trusts_pid_zero = true;
        }
        if switched_on(RENEWALS_WAIT_FOR_CLIENT) {
            tracing::warn!(
                "{RENEWALS_WAIT_FOR_CLIENT} is set: renewals wait for their client to read, and \
                 streams write whether or not it reads; for control runs of the tests only"
            );
            rules.renewals_wait_for_client = true;
        }
        if switched_on(MULTI_PARTIAL) {
            tracing::warn!(
                "{MULTI_PARTIAL} is set: a lock on several resources is granted when any of them \
                 is, so a resource held by another is granted again; for control runs of the \
                 tests only"
            );
        }
        if switched_on(SHARED_APART) {
            tracing::warn!(
                "{SHARED_APART} is set: a shared lock's readers are kept apart from its writers, \
                 so a writer is granted beside readers; for control runs of the tests only"
            );
        }
        if switched_on(SEMAPHORE_LIMIT_BY_GRANTER) {
            tracing::warn!(
                "{SEMAPHORE_LIMIT_BY_GRANTER} is set: only the agent that granted a permit keeps \
                 its semaphore's limit, which lapses while permits extended elsewhere are held; \
                 for control runs of the tests only"
            );
            rules.limit_kept_by_any_agent = false;
        }
        let slot_readiness = !switched_on(NO_SLOT_READINESS);
        if !slot_readiness {
            tracing::warn!(
                "{NO_SLOT_READINESS} is set: readiness ignores cluster slots in quarantine and \
                 can say ready while no lock can be granted; for control runs of the tests only"
            );
        }
        let locks = Locks::new(engine, rules, waiters, Arc::clone(&metrics), shutdown);
        if switched_on(UNSETTLED_HOLD_CLOSE) {
            tracing::warn!(
                "{UNSETTLED_HOLD_CLOSE} is set: a re-entering hold's close lowers its lock's count \
                 200 ms late, and a call right after the close does not count it; for control \
                 runs of the tests only"
            );
            locks.holds().leave_closes_unsettled();
        }
        // Traces never stop a lock call, nor the agent: without them it
        // serves as it would with tracing off.
        let telemetry = Telemetry::new(&config.tracing, &config.agent.name, &metrics)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "tracing off");
                Telemetry::default()
            });
        Ok(Agent {
            telemetry,
            config,
            locks: Arc::new(locks),
            health,
            metrics,
            scanner,
            started: std::time::Instant::now(),
            slot_readiness,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn locks(&self) -> &Arc<Locks> {
        &self.locks
    }

    pub fn engine(&self) -> &Engine {
        self.locks.engine()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    pub fn scanner(&self) -> &Scanner {
        &self.scanner
    }

    /// Probes every master once, then starts the tasks that keep the agent
    /// current: one health task per master, the leak scanner, and one
    /// release listener per master for the waiters. Abort them to stop.
    pub async fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let nodes = self.engine().nodes();
        let settings = Arc::new(self.health.clone());
        let peers: Arc<[Arc<Node>]> = nodes.to_vec().into();
        futures::future::join_all(
            nodes
                .iter()
                .map(|n| health::probe(n, &peers, &settings, false)),
        )
        .await;
        for node in nodes {
            node.probed();
        }
        for (node, duplicate) in nodes.iter().zip(self.engine().duplicates()) {
            if let Some(first) = duplicate {
                tracing::warn!(
                    node = node.name(),
                    same_as = nodes[first].name(),
                    "two configured masters reach one server (same run_id): counted once"
                );
            }
        }
        let locks = Arc::clone(&self.locks);
        let idle: Arc<dyn Fn() -> bool + Send + Sync> =
            Arc::new(move || locks.idle_for() >= IDLE_AFTER);
        let mut tasks: Vec<_> = nodes
            .iter()
            .map(|node| {
                tokio::spawn(health::watch(
                    Arc::clone(node),
                    Arc::clone(&peers),
                    Arc::clone(&settings),
                    Arc::clone(&idle),
                ))
            })
            .collect();
        tasks.push(tokio::spawn(
            Arc::clone(&self.scanner).run(Arc::clone(&self.locks)),
        ));
        for node in nodes {
            let (channels, changes) = Subscriptions::new(Arc::clone(&self.locks));
            tasks.push(tokio::spawn(subscriber::listen(
                Arc::clone(node),
                Arc::new(channels),
                changes,
            )));
        }
        tasks
    }

    /// Brings the masters' states up to date before they are read: an idle
    /// agent probes seldom (see [`crate::lock::idle`]), so a reader of its
    /// readiness, nodes or metrics has every master probed first, unless a
    /// probe finished within two `health.interval`s (waiting at most a
    /// probe's bound). A busy agent's probes are current already.
    pub async fn fresh(&self) {
        if self.locks.idle_for() < IDLE_AFTER {
            return;
        }
        let max_age = self.health.interval * 2;
        futures::future::join_all(
            self.engine()
                .nodes()
                .iter()
                .map(|node| node.fresh(max_age, node.probe_timeout())),
        )
        .await;
    }

    /// `GET /v1/nodes` from the nodes' snapshots, with readiness: whether
    /// a lock on any resource could get a quorum now (see
    /// [`health::readiness`]), and why not.
    pub fn nodes(&self) -> NodesResponse {
        let engine = self.engine();
        let mut usability = Vec::with_capacity(engine.nodes().len());
        let mut slot_details = Vec::new();
        let mut nodes: Vec<NodeStatus> = Vec::with_capacity(engine.nodes().len());
        for (node, duplicate) in engine.nodes().iter().zip(engine.duplicates()) {
            let snap = node.snapshot();
            let mut warnings = snap.warnings;
            let state = match duplicate {
                Some(first) => {
                    let first = engine.nodes()[first].name();
                    warnings.push(format!(
                        "same server as {first} (same run_id): counted once, as {first}"
                    ));
                    NodeState::Duplicate
                }
                None => snap.state,
            };
            let slots = node.slot_usability();
            let quarantined_slots = node.quarantined_slots();
            let slots_left = slots.as_ref().map_or(Duration::ZERO, |(_, left)| *left);
            usability.push(match (state, slots) {
                (NodeState::Up, Some((can_vote, _))) if self.slot_readiness => {
                    let cannot = can_vote.iter().filter(|v| !**v).count();
                    if cannot > 0 {
                        slot_details.push(slot_detail(
                            node.name(),
                            quarantined_slots,
                            slots_left,
                            cannot.saturating_sub(quarantined_slots),
                        ));
                    }
                    Usability::Slots(can_vote)
                }
                (NodeState::Up, _) => Usability::Everywhere,
                _ => Usability::Unusable,
            });
            nodes.push(NodeStatus {
                name: node.name().to_string(),
                state,
                latency_ms: snap.latency.map(|d| d.as_micros() as f64 / 1000.0),
                last_error: snap.last_error,
                quarantine_remaining_ms: millis(snap.quarantine_remaining),
                quarantine_ms: millis(snap.quarantine_len),
                detector: snap.detector.map(|d| d.as_str().to_string()),
                run_id: snap.identity.as_ref().map(|i| i.run_id.clone()),
                uptime_s: snap.identity.as_ref().map(|i| i.uptime.as_secs()),
                persistence: snap.persistence,
                warnings,
                kind: if node.is_cluster() {
                    "cluster"
                } else {
                    "single"
                }
                .to_string(),
                shards: node
                    .shards()
                    .into_iter()
                    .map(|(shard, out)| redlock_wire::ShardStatus {
                        addr: shard.addr(),
                        node_id: shard.node_id,
                        slots: shard.slots,
                        state: if shard.up && snap.connected {
                            NodeState::Up
                        } else {
                            NodeState::Down
                        },
                        quarantined_slots: out as u64,
                        replicas: shard.replicas,
                    })
                    .collect(),
                quarantined_slots: quarantined_slots as u64,
                quarantined_slots_remaining_ms: millis(slots_left),
            });
        }
        let usable = nodes.iter().filter(|n| n.state == NodeState::Up).count();
        let quorum = engine.quorum();
        let readiness = health::readiness(&usability, quorum);
        let reason = (!readiness.ready()).then(|| {
            if usable < quorum {
                return engine.describe_unusable();
            }
            format!(
                "{} of {} hash slots have fewer than a quorum of masters that can vote in them \
                 (as few as {}, quorum is {}): a lock on a resource there answers no_quorum; {}",
                readiness.slots_without_quorum,
                redlock_wire::keys::SLOTS,
                readiness.fewest,
                quorum,
                slot_details.join("; ")
            )
        });
        NodesResponse {
            quorum,
            usable,
            available: readiness.ready(),
            reason,
            slots_without_quorum: readiness.slots_without_quorum,
            nodes,
        }
    }

    pub fn summary(&self) -> redlock_wire::SummaryResponse {
        self.sweep_grants();
        self.metrics.summary(self.started.elapsed())
    }

    /// Forgets expired grants and sets `redlock_locks_held`, `redlock_readers_held`,
    /// `redlock_permits_held` and `redlock_leaderships_held`.
    fn sweep_grants(&self) {
        let held = self
            .locks
            .grants()
            .sweep(std::time::Instant::now(), &self.metrics);
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.metrics.locks_held.set(gauge(held.locks));
        self.metrics.permits_held.set(gauge(held.permits));
        self.metrics.readers_held.set(gauge(held.shared));
        self.metrics.leaderships_held.set(gauge(held.leaderships));
    }

    /// The text exposition, with the gauges that mirror node and lock state
    /// computed now.
    pub fn scrape(&self) -> Vec<u8> {
        let m = &self.metrics;
        let mut usable = 0;
        let engine = self.engine();
        for (node, duplicate) in engine.nodes().iter().zip(engine.duplicates()) {
            let snap = node.snapshot();
            let state = snap.state;
            usable += usize::from(state == redlock_wire::NodeState::Up && duplicate.is_none());
            m.node_up
                .with_label_values(&[node.name()])
                .set(i64::from(state != redlock_wire::NodeState::Down));
            m.node_quarantined
                .with_label_values(&[node.name()])
                .set(i64::from(state == redlock_wire::NodeState::Quarantined));
            m.node_quarantine_remaining
                .with_label_values(&[node.name()])
                .set(snap.quarantine_remaining.as_secs_f64());
        }
        m.usable_nodes
            .set(i64::try_from(usable).unwrap_or(i64::MAX));
        // What /readyz says: cluster slots in quarantine count.
        m.quorum_available.set(i64::from(
            usable >= engine.quorum() && self.nodes().available,
        ));
        self.sweep_grants();
        m.encode()
    }
}

/// Why a cluster master cannot vote in some slots, for `/v1/nodes`'s
/// `reason`.
fn slot_detail(name: &str, quarantined: usize, left: Duration, unserved: usize) -> String {
    let mut parts = Vec::new();
    if quarantined > 0 {
        parts.push(format!(
            "{quarantined} slots in quarantine (lost keys possible) for up to {}ms more",
            left.as_millis()
        ));
    }
    if unserved > 0 {
        parts.push(format!("{unserved} slots on shards that are down"));
    }
    format!("{name} has {}", parts.join(" and "))
}
