//! Every metric the agent exports, defined here and nowhere else.
//!
//! Names follow the Prometheus guide: prefix `redlock_`, base units,
//! `_total` on counters. Label values come from closed sets only (the enums
//! of `labels`, node names from the config, HTTP routes and codes); never a
//! resource name or a token. Gauges that describe node state are computed
//! from the nodes when scraped, so they cannot drift from `/v1/nodes`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::redlock::observe::{Failure, Op, VoteLabel};
use crate::redlock::observe::{NodeObserver, Observer};
use crate::redlock::Kind;

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

mod labels;

pub use labels::{Leadership, LeakKind, Outcome, Refusal, ScanWrite, LISTENERS, TCP_LISTENER};

/// Wait buckets from 0.5ms up; [`wait_buckets`] cuts them at the ceiling.
const WAIT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
];

/// The longest wait the default config allows a hold (`lock.max_hold`).
pub const DEFAULT_WAIT_CEILING: Duration = Duration::from_secs(3600);

/// The wait buckets up to `ceiling` (the agent's `lock.max_hold`), which is
/// the last finite bound: a long wait lands in a bucket that says how long,
/// not in `+Inf` above 30s.
pub fn wait_buckets(ceiling: Duration) -> Vec<f64> {
    let top = ceiling.as_secs_f64().max(WAIT_BUCKETS[0]);
    let mut buckets: Vec<f64> = WAIT_BUCKETS.iter().copied().filter(|b| *b < top).collect();
    buckets.push(top);
    buckets
}
const NODE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
const HOLD_BUCKETS: &[f64] = &[
    0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
const RATIO_BUCKETS: &[f64] = &[0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
const SCAN_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0];

/// The kinds whose waits are a request's, as the summary shows them: a
/// campaign waits for as long as another leads.
const REQUEST_KINDS: [Kind; 3] = [Kind::Lock, Kind::Shared, Kind::Permit];

/// The agent's metrics and the registry that serves them.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    pub acquire_wait: HistogramVec,
    pub failures: IntCounterVec,
    pub node_up: IntGaugeVec,
    pub node_quarantined: IntGaugeVec,
    pub node_quarantine_remaining: GaugeVec,
    pub node_quarantined_slots: IntGaugeVec,
    pub node_restarts: IntCounterVec,
    pub node_request_duration: HistogramVec,
    pub node_batch_commands: HistogramVec,
    pub node_votes: IntCounterVec,
    pub node_errors: IntCounterVec,
    pub quorum_size: IntGauge,
    pub usable_nodes: IntGauge,
    pub quorum_available: IntGauge,
    pub locks_held: IntGauge,
    pub permits_held: IntGauge,
    pub readers_held: IntGauge,
    pub leaderships_held: IntGauge,
    pub leadership_changes: IntCounterVec,
    pub last_term: IntGauge,
    pub waiters: IntGauge,
    pub hold_duration: Histogram,
    pub extensions: IntCounterVec,
    pub validity_at_grant: Histogram,
    pub leaked_keys: IntGaugeVec,
    pub leak_scan_duration: Histogram,
    pub leak_scan_keys: IntCounter,
    pub leak_scan_last_success: Gauge,
    pub leak_scanner: IntGauge,
    pub leak_scan_info: IntGaugeVec,
    pub leak_scan_refused: IntCounterVec,
    pub api_requests: IntCounterVec,
    pub force_releases: IntCounter,
    /// Spans not sent to the collector, by reason (`queue_full`: the
    /// bounded queue was full; `export_failed`: the collector refused or
    /// did not answer): tracing never waits for it.
    pub trace_spans_dropped: IntCounterVec,
    pub connections_refused: IntCounterVec,
    pub build_info: IntGaugeVec,
}

fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    // Cannot fail: names, labels and buckets are constants checked by the
    // scrape test.
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("valid histogram")
}

fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .expect("valid histogram")
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter")
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge")
}

impl Metrics {
    /// Registers every metric, with the per-node series of `nodes` and
    /// every closed label value present from the start (at zero), so
    /// dashboards and alerts see them before the first event; but for
    /// `redlock_leaked_keys`, which only the fleet's scanner exports (see
    /// `crate::scanner`).
    pub fn new(nodes: &[String]) -> Metrics {
        Metrics::with_wait_ceiling(nodes, DEFAULT_WAIT_CEILING)
    }

    /// As [`Metrics::new`], with acquire-wait buckets up to `ceiling`.
    pub fn with_wait_ceiling(nodes: &[String], ceiling: Duration) -> Metrics {
        let m = Metrics {
            registry: Registry::new(),
            acquire_wait: histogram_vec(
                "redlock_acquire_wait_seconds",
                "Time from an acquire request to its answer, waiting included, by kind (lock, permit, leadership: a campaign's wait in line to lead) and outcome.",
                &["kind", "outcome"],
                &wait_buckets(ceiling),
            ),
            failures: counter_vec(
                "redlock_failures_total",
                "Lock operations that failed, by reason (taken, no_quorum, validity_exhausted, extend_failed, lost, release_failed, node_error).",
                &["reason"],
            ),
            node_up: gauge_vec(
                "redlock_node_up",
                "1 when the master is connected and answering (quarantined included), else 0.",
                &["node"],
            ),
            node_quarantined: gauge_vec(
                "redlock_node_quarantined",
                "1 while the master is kept out of locking after a restart (delayed restart).",
                &["node"],
            ),
            node_quarantine_remaining: GaugeVec::new(
                Opts::new(
                    "redlock_node_quarantine_remaining_seconds",
                    "Seconds until a quarantined master takes part in locks again; 0 when not quarantined.",
                ),
                &["node"],
            )
            .expect("valid gauge"),
            node_quarantined_slots: gauge_vec(
                "redlock_node_quarantined_slots",
                "Hash slots of a master given as a Redis Cluster kept out of locks because they may have lost keys (a shard restarted empty, failed over, a slot migrated); 0 for a single server.",
                &["node"],
            ),
            node_restarts: counter_vec(
                "redlock_node_restarts_detected_total",
                "Masters that may have lost keys, by detector (reconnect, run_id, uptime, marker, eviction, clock).",
                &["node", "detector"],
            ),
            node_request_duration: histogram_vec(
                "redlock_node_request_duration_seconds",
                "Duration of requests to one master, by operation (acquire, extend, release, probe, scan).",
                &["node", "op"],
                NODE_BUCKETS,
            ),
            node_batch_commands: histogram_vec(
                "redlock_node_batch_commands",
                "Lock commands (votes, fences, extends, releases) sent to one master in one script call; they batch up while the previous call is on its way.",
                &["node"],
                BATCH_BUCKETS,
            ),
            node_votes: counter_vec(
                "redlock_node_votes_total",
                "Answers of each master to SET NX during acquire (granted, taken, error, timeout; backlog: not answered in time because the agent itself was busy).",
                &["node", "vote"],
            ),
            node_errors: counter_vec(
                "redlock_node_errors_total",
                "Failed requests to each master, by kind (timeout, not_connected, connection, auth, noperm, readonly, oom, wrongtype, script, other; backlog: not sent or not read in time because the agent itself was busy, not the master's failure).",
                &["node", "kind"],
            ),
            quorum_size: IntGauge::new("redlock_quorum_size", "Masters needed for a lock: N/2+1 of the configured N.")
                .expect("valid gauge"),
            usable_nodes: IntGauge::new(
                "redlock_usable_nodes",
                "Masters that may take part in a lock now (up and not quarantined).",
            )
            .expect("valid gauge"),
            quorum_available: IntGauge::new(
                "redlock_quorum_available",
                "1 when a lock on any resource can get a quorum now (what /readyz says: a cluster master's slots in quarantine count), else 0.",
            )
            .expect("valid gauge"),
            locks_held: IntGauge::new(
                "redlock_locks_held",
                "Locks granted through this agent and still valid.",
            )
            .expect("valid gauge"),
            readers_held: IntGauge::new(
                "redlock_readers_held",
                "Shared locks (readers' grants) granted through this agent and still valid.",
            )
            .expect("valid gauge"),
            permits_held: IntGauge::new(
                "redlock_permits_held",
                "Semaphore permits granted through this agent and still valid.",
            )
            .expect("valid gauge"),
            leaderships_held: IntGauge::new(
                "redlock_leaderships_held",
                "Elections led by a campaigner of this agent now.",
            )
            .expect("valid gauge"),
            leadership_changes: counter_vec(
                "redlock_leadership_changes_total",
                "Leaderships of this agent's campaigners, by event and reason: elected (no reason); resigned, ended by its campaign or the agent's rules (closed: the client closed its stream; max_hold; shutdown); lost, taken from it (renew_failed, no_quorum, node_lost, force_released).",
                &["event", "reason"],
            ),
            last_term: IntGauge::new(
                "redlock_last_term",
                "The term (fence) of the last leadership elected through this agent; 0 before any.",
            )
            .expect("valid gauge"),
            waiters: IntGauge::new("redlock_waiters", "Requests waiting for a lock or a permit, or campaigning, in this agent.").expect("valid gauge"),
            hold_duration: histogram(
                "redlock_hold_duration_seconds",
                "How long locks granted through this agent were held, from grant to release or loss.",
                HOLD_BUCKETS,
            ),
            extensions: counter_vec(
                "redlock_extensions_total",
                "Lock extensions, by result (extended, lost).",
                &["result"],
            ),
            validity_at_grant: histogram(
                "redlock_validity_at_grant_ratio",
                "Validity left at grant as a fraction of the TTL; low values mean slow masters or a large drift factor.",
                RATIO_BUCKETS,
            ),
            leaked_keys: gauge_vec(
                "redlock_leaked_keys",
                "Leaked lock keys found by the fleet's last scan, by kind (no_ttl, ttl_over_max, minority; unproven: token-shaped values not proven to be lock keys, never repaired). Exported only by the agent that scans for the fleet (redlock_leak_scanner 1), so a fleet has one set of series.",
                &["node", "kind"],
            ),
            leak_scan_duration: histogram(
                "redlock_leak_scan_duration_seconds",
                "Duration of one leaked-key scan over every master.",
                SCAN_BUCKETS,
            ),
            leak_scan_keys: IntCounter::new(
                "redlock_leak_scan_keys_total",
                "Lock keys examined by the leaked-key scanner.",
            )
            .expect("valid counter"),
            leak_scan_last_success: Gauge::new(
                "redlock_leak_scan_last_success_timestamp_seconds",
                "Unix time of the fleet's last leak scan that reached every master it could, whichever agent made it (as this agent last read it).",
            )
            .expect("valid gauge"),
            leak_scanner: IntGauge::new(
                "redlock_leak_scanner",
                "1 while this agent holds the fleet's scan lock and scans for every agent with its key prefix on its masters, else 0.",
            )
            .expect("valid gauge"),
            leak_scan_info: gauge_vec(
                "redlock_leak_scan_info",
                "Always 1; the agent whose leak scan this agent last read (its agent.name), as a label; absent before the first.",
                &["scanner"],
            ),
            leak_scan_refused: counter_vec(
                "redlock_leak_scan_refused_total",
                "Leak-scanner writes (claim, repair, report) a master refused because it had seen a newer scanner's fence: this agent scanned on after another took over.",
                &["write"],
            ),
            api_requests: counter_vec(
                "redlock_api_requests_total",
                "API requests, by route and HTTP status code.",
                &["route", "code"],
            ),
            force_releases: IntCounter::new(
                "redlock_force_releases_total",
                "Locks deleted on every master by an operator's force release.",
            )
            .expect("valid counter"),
            trace_spans_dropped: counter_vec(
                "redlock_trace_spans_dropped_total",
                "Trace spans dropped rather than sent to the OTLP collector, by reason (queue_full, export_failed).",
                &["reason"],
            ),
            connections_refused: counter_vec(
                "redlock_connections_refused_total",
                "Connections answered and closed before any request, by listener (app, admin, metrics) and reason (forbidden, max_connections, max_connections_per_uid, unidentified).",
                &["listener", "reason"],
            ),
            build_info: gauge_vec("redlock_build_info", "Always 1; the agent's version as a label.", &["version"]),
        };
        m.register_all();
        m.quorum_size
            .set(i64::try_from(nodes.len() / 2 + 1).unwrap_or(i64::MAX));
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        for kind in Kind::ALL {
            for outcome in Outcome::ALL {
                m.acquire_wait
                    .with_label_values(&[kind.as_str(), outcome.as_str()]);
            }
        }
        for failure in Failure::ALL {
            m.failures.with_label_values(&[failure.as_str()]);
        }
        for listener in LISTENERS {
            for refusal in Refusal::ALL {
                m.connections_refused
                    .with_label_values(&[listener, refusal.as_str()]);
            }
        }
        m.connections_refused
            .with_label_values(&[TCP_LISTENER, Refusal::MaxConnections.as_str()]);
        for write in ScanWrite::ALL {
            m.leak_scan_refused.with_label_values(&[write.as_str()]);
        }
        for result in ["extended", "lost"] {
            m.extensions.with_label_values(&[result]);
        }
        for reason in ["queue_full", "export_failed"] {
            m.trace_spans_dropped.with_label_values(&[reason]);
        }
        for change in Leadership::ALL {
            m.leadership_changes
                .with_label_values(&[change.event(), change.reason()]);
        }
        for node in nodes {
            m.node_up.with_label_values(&[node]);
            m.node_quarantined.with_label_values(&[node]);
            m.node_quarantine_remaining.with_label_values(&[node]);
            m.node_quarantined_slots.with_label_values(&[node]);
            for vote in VoteLabel::ALL {
                m.node_votes.with_label_values(&[node, vote.as_str()]);
            }
            for kind in crate::redlock::NodeError::KINDS {
                m.node_errors.with_label_values(&[node, kind]);
            }
            for detector in [
                "reconnect",
                "run_id",
                "uptime",
                "marker",
                "eviction",
                "clock",
            ] {
                m.node_restarts.with_label_values(&[node, detector]);
            }
        }
        m
    }

    fn register_all(&self) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.acquire_wait.clone()),
            Box::new(self.failures.clone()),
            Box::new(self.node_up.clone()),
            Box::new(self.node_quarantined.clone()),
            Box::new(self.node_quarantine_remaining.clone()),
            Box::new(self.node_restarts.clone()),
            Box::new(self.node_quarantined_slots.clone()),
            Box::new(self.node_request_duration.clone()),
            Box::new(self.node_batch_commands.clone()),
            Box::new(self.node_votes.clone()),
            Box::new(self.node_errors.clone()),
            Box::new(self.quorum_size.clone()),
            Box::new(self.usable_nodes.clone()),
            Box::new(self.quorum_available.clone()),
            Box::new(self.locks_held.clone()),
            Box::new(self.permits_held.clone()),
            Box::new(self.readers_held.clone()),
            Box::new(self.leaderships_held.clone()),
            Box::new(self.leadership_changes.clone()),
            Box::new(self.last_term.clone()),
            Box::new(self.waiters.clone()),
            Box::new(self.hold_duration.clone()),
            Box::new(self.extensions.clone()),
            Box::new(self.validity_at_grant.clone()),
            Box::new(self.leaked_keys.clone()),
            Box::new(self.leak_scan_duration.clone()),
            Box::new(self.leak_scan_keys.clone()),
            Box::new(self.leak_scan_last_success.clone()),
            Box::new(self.leak_scanner.clone()),
            Box::new(self.leak_scan_info.clone()),
            Box::new(self.leak_scan_refused.clone()),
            Box::new(self.api_requests.clone()),
            Box::new(self.force_releases.clone()),
            Box::new(self.trace_spans_dropped.clone()),
            Box::new(self.connections_refused.clone()),
            Box::new(self.build_info.clone()),
        ];
        for collector in collectors {
            // Cannot fail: each name is registered once, here.
            self.registry
                .register(collector)
                .expect("unique metric names");
        }
    }

    /// A leadership of this agent's campaigners began or ended.
    pub fn leadership(&self, change: Leadership) {
        self.leadership_changes
            .with_label_values(&[change.event(), change.reason()])
            .inc();
    }

    pub fn fail(&self, failure: Failure) {
        self.failures.with_label_values(&[failure.as_str()]).inc();
    }

    /// Cumulative figures for `GET /v1/summary`, read from the metrics
    /// themselves so the two never disagree.
    pub fn summary(&self, uptime: Duration) -> redlock_wire::SummaryResponse {
        use prometheus::core::Metric;
        let mut acquires = std::collections::BTreeMap::new();
        let mut buckets: Vec<(f64, u64)> = Vec::new();
        let mut waits = std::collections::BTreeMap::new();
        // A request's waits: a lock's (one or several) and a permit's,
        // never a campaign's, which waits for as long as another leads.
        for outcome in Outcome::ALL {
            let mut count = 0;
            let mut own: Vec<(f64, u64)> = Vec::new();
            for kind in REQUEST_KINDS {
                let histogram = self
                    .acquire_wait
                    .with_label_values(&[kind.as_str(), outcome.as_str()]);
                count += histogram.get_sample_count();
                let proto = histogram.metric();
                for (i, bucket) in proto.get_histogram().get_bucket().iter().enumerate() {
                    match own.get_mut(i) {
                        Some(slot) => slot.1 += bucket.cumulative_count(),
                        None => own.push((bucket.upper_bound(), bucket.cumulative_count())),
                    }
                    match buckets.get_mut(i) {
                        Some(slot) => slot.1 += bucket.cumulative_count(),
                        None => buckets.push((bucket.upper_bound(), bucket.cumulative_count())),
                    }
                }
            }
            acquires.insert(outcome.as_str().to_string(), count);
            own.push((f64::MAX, count));
            waits.insert(outcome.as_str().to_string(), own);
        }
        let total: u64 = acquires.values().sum();
        buckets.push((f64::MAX, total));
        let failures = Failure::ALL
            .iter()
            .map(|f| {
                (
                    f.as_str().to_string(),
                    self.failures.with_label_values(&[f.as_str()]).get(),
                )
            })
            .collect();
        redlock_wire::SummaryResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_ms: u64::try_from(uptime.as_millis()).unwrap_or(u64::MAX),
            acquires,
            failures,
            wait_buckets: buckets,
            waits,
            locks_held: u64::try_from(self.locks_held.get()).unwrap_or(0),
            waiters: u64::try_from(self.waiters.get()).unwrap_or(0),
            permits_held: u64::try_from(self.permits_held.get()).unwrap_or(0),
            readers_held: u64::try_from(self.readers_held.get()).unwrap_or(0),
            leaderships_held: u64::try_from(self.leaderships_held.get()).unwrap_or(0),
            // By event, the reasons of each added up.
            leadership_changes: Leadership::ALL.iter().fold(
                std::collections::BTreeMap::new(),
                |mut by_event, change| {
                    *by_event.entry(change.event().to_string()).or_default() += self
                        .leadership_changes
                        .with_label_values(&[change.event(), change.reason()])
                        .get();
                    by_event
                },
            ),
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Cannot fail: writing to a Vec.
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encode metrics");
        out
    }
}

impl Observer for Metrics {
    fn failure(&self, failure: Failure) {
        self.fail(failure);
    }

    fn validity_at_grant(&self, share: f64) {
        self.validity_at_grant.observe(share);
    }
}

/// One master's series, looked up once so the request path does not hash
/// label values on every vote.
#[derive(Debug, Clone)]
pub struct NodeSeries {
    node: String,
    votes: [IntCounter; 5],
    requests: [Histogram; 6],
    batches: Histogram,
    errors: Vec<IntCounter>,
    /// `errors`' series of kind `backlog`, when `kinds` has it.
    backlog: Option<IntCounter>,
    node_errors: IntCounter,
    restarts: IntCounterVec,
    quarantined_slots: IntGauge,
}

impl NodeSeries {
    /// `kinds`: every error kind of the node, in a fixed order.
    pub fn new(metrics: &Metrics, node: &str, kinds: &[&str]) -> NodeSeries {
        NodeSeries {
            node: node.to_string(),
            votes: VoteLabel::ALL
                .map(|v| metrics.node_votes.with_label_values(&[node, v.as_str()])),
            requests: Op::ALL.map(|op| {
                metrics
                    .node_request_duration
                    .with_label_values(&[node, op.as_str()])
            }),
            batches: metrics.node_batch_commands.with_label_values(&[node]),
            errors: kinds
                .iter()
                .map(|k| metrics.node_errors.with_label_values(&[node, k]))
                .collect(),
            backlog: kinds
                .contains(&"backlog")
                .then(|| metrics.node_errors.with_label_values(&[node, "backlog"])),
            node_errors: metrics
                .failures
                .with_label_values(&[Failure::NodeError.as_str()]),
            restarts: metrics.node_restarts.clone(),
            quarantined_slots: metrics.node_quarantined_slots.with_label_values(&[node]),
        }
    }
}

impl NodeObserver for NodeSeries {
    fn vote(&self, vote: VoteLabel) {
        self.votes[vote as usize].inc();
    }

    fn request(&self, op: Op, took: Duration) {
        self.requests[op as usize].observe(took.as_secs_f64());
    }

    fn batch(&self, commands: usize) {
        self.batches.observe(commands as f64);
    }

    /// Counts an error of the kind at `index` in the `kinds` given to `new`,
    /// and one more `node_error` failure.
    fn error(&self, index: usize) {
        self.node_errors.inc();
        if let Some(counter) = self.errors.get(index) {
            counter.inc();
        }
    }

    /// Counts a request the agent's own backlog held up, under its kind
    /// only: it is no master's error, so no `node_error` failure.
    fn backlog(&self) {
        if let Some(counter) = &self.backlog {
            counter.inc();
        }
    }

    fn restart(&self, detector: &'static str) {
        self.restarts
            .with_label_values(&[self.node.as_str(), detector])
            .inc();
    }

    fn quarantined_slots(&self, slots: usize) {
        self.quarantined_slots
            .set(i64::try_from(slots).unwrap_or(i64::MAX));
    }
}

/// Seconds since the Unix epoch, for timestamp gauges.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_buckets_end_at_the_ceiling() {
        let buckets = wait_buckets(Duration::from_secs(3600));
        assert_eq!(buckets.first(), Some(&0.0005));
        assert_eq!(buckets.last(), Some(&3600.0));
        assert!(buckets.contains(&60.0));
        let short = wait_buckets(Duration::from_secs(45));
        assert_eq!(&short[short.len() - 2..], [30.0, 45.0]);
        assert!(buckets.windows(2).all(|w| w[0] < w[1]));
    }

    /// A 60s wait that ended `taken` is counted under `taken` only, in a
    /// bucket that says how long, not in `+Inf` above 30s.
    #[test]
    fn the_summary_keeps_waits_apart_by_outcome() {
        let metrics = Metrics::with_wait_ceiling(&["r1".to_string()], Duration::from_secs(3600));
        metrics
            .acquire_wait
            .with_label_values(&["lock", "taken"])
            .observe(60.0);
        metrics
            .acquire_wait
            .with_label_values(&["permit", "acquired"])
            .observe(0.002);
        let summary = metrics.summary(Duration::from_secs(1));
        let taken = &summary.waits["taken"];
        let first_with = taken.iter().find(|(_, n)| *n == 1).unwrap();
        assert_eq!(first_with.0, 60.0);
        assert_eq!(taken.last(), Some(&(f64::MAX, 1)));
        assert!(summary.waits["acquired"]
            .iter()
            .find(|(_, n)| *n == 1)
            .is_some_and(|(le, _)| *le == 0.0025));
        assert_eq!(summary.waits["no_quorum"].last(), Some(&(f64::MAX, 0)));
    }
}
