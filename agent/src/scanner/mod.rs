//! The leaked-key scan, once per fleet: every `leak_scan.interval`, the
//! one agent holding the fleet's scan lock ([`lease`]) SCANs each master
//! for keys under the prefix, reads each batch's values and PTTLs in one
//! script call (`READ_KEYS`, rate-limited), reports the keys that will not
//! go away by themselves, and writes its report on every master
//! ([`shared`]), where every other agent reads it.
//!
//! # The fleet
//! Agents with the same `lock.key_prefix` on the same masters are one
//! fleet (another prefix is another fleet, with its own lock and report).
//! Every agent's scanner task, once per interval, either scans (it holds
//! the scan lock) or looks: one script call per master reads the fleet's
//! report and whether the scan lock is there, and when it is not on a
//! quorum, tries to take it; an idle agent's standby looks every
//! `health.idle_interval` instead ([`shared::looks_every`]). So a fleet's
//! scan load on a master is one scanner's (its SCANs, reads and repairs)
//! plus one read per agent per interval, whatever the number of agents,
//! and the keys it adds do not grow with the fleet: the scan lock, the
//! report and the scan fence, one each per prefix (on a cluster master,
//! the fence per slot written in).
//!
//! # The fence
//! Each holder's grant of the scan lock carries a fence above every
//! earlier holder's. Its first write on each master (the claim), its
//! repairs and its reports go through one script
//! ([`crate::node::scripts::LEAK_FENCED`]) that raises the master's scan
//! fence to the writer's, atomically with the write, and refuses a writer
//! whose fence is below it. A holder paused (GC, SIGSTOP) past its lock's
//! validity, after another agent took the lock and claimed the masters,
//! cannot repair nor overwrite the newer report when it runs again: the
//! masters refuse it, it counts the refusal
//! (`redlock_leak_scan_refused_total`) and stops scanning. On a Redis
//! Cluster master the fence lives per slot (a script's keys share one):
//! the claim and the report raise it in the report's slot, each repair in
//! its key's, so there a paused scanner is refused in the slots the new
//! one has written in since it took over; in another slot its repair (a
//! TTL on a proven lock key that still has none) can still land.
//!
//! # What is reported
//! Kinds: `no_ttl` (PTTL -1: a deadlock), `ttl_over_max` (longer than
//! `lock.max_ttl`: written around the agent), `minority` (on fewer than a
//! quorum of masters on two scans in a row by the same scanner: debris of
//! a partial acquisition); each key is counted once, as the first kind
//! that fits in that order. The scanner never deletes; with `repair:
//! expire` it gives `no_ttl` keys a TTL of `lock.max_ttl`.
//!
//! Only keys proven to be lock keys count, and only they are ever changed:
//! a key whose value is a token with the check value of that very key
//! ([`token::stored_at`] answers [`Stored::Token`]). The shape of a value
//! proves nothing (a SHA-1 is 40 hex digits, as tokens of older agents
//! were), so a value that only looks like a token ([`Stored::Unproven`]:
//! the old format, any hex digest, a real token copied under another key)
//! is reported as `unproven` when it has no TTL or one over `max_ttl`,
//! so an operator can look, and is never repaired nor counted as a leak of
//! the other kinds. Any other value (another type, application data) is
//! foreign: neither reported nor repaired. Each scan logs how many unproven
//! and foreign keys a master has, since they mean `lock.key_prefix` is
//! shared (or that agents of the old format still run). The agents' own
//! keys (the scan lock, the report, the fences, the markers) are skipped.
//!
//! # Metrics
//! Only the scanning agent exports `redlock_leaked_keys` (a fleet of
//! 10,000 agents has one set of series, and an alert fires once per
//! fleet); it drops them when it stops scanning. Every agent exports when
//! the fleet's last good scan ended
//! (`redlock_leak_scan_last_success_timestamp_seconds`) and whose report
//! it last read (`redlock_leak_scan_info{scanner}`); the scanner says so
//! with `redlock_leak_scanner` 1.

pub mod lease;
mod look;
pub mod shared;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_wire::keys::{LEAK_FENCE_SUFFIX, LEAK_REPORT_SUFFIX};
use redlock_wire::{LeakedKey, LeaksResponse, NodeLeaks, MAX_LEAKED_KEYS_SHOWN};

use crate::config::{LeakScanConfig, Repair};
use crate::lock::Locks;
use crate::metrics::{unix_now, LeakKind, Metrics, ScanWrite};
use crate::node::leak::{Fenced, LeakWrite};
use crate::node::{KeyState, Node};
use crate::redlock::token::{self, Stored};
use crate::redlock::NodeError;
use lease::Lease;
use shared::View;

/// Test-only switch (see `redlock_testkit::switches`): set to a
/// `lock.key_prefix`, the scanners of agents with that prefix take every
/// value shaped like a token for a lock key, proven or not, as scanners
/// did before tokens carried a check value. The control run of the repair
/// test, which must see a SHA-1 under the prefix repaired without the proof.
pub use redlock_testkit::switches::LEAK_REPAIR_BY_SHAPE as BY_SHAPE_SWITCH;

/// Test-only switch: `1` sends this agent's scan writes with the fence
/// check off, so the masters take a superseded scanner's repairs. The
/// control run of the paused scanner test.
pub use redlock_testkit::switches::NO_SCAN_FENCE as NO_FENCE_SWITCH;

/// Test-only switch: milliseconds to wait before each repair, after the
/// last look at the scan lock (see `redlock_testkit::switches`).
pub use redlock_testkit::switches::LEAK_REPAIR_PAUSE_MS as REPAIR_PAUSE_SWITCH;

/// What the scanner needs to know.
#[derive(Debug, Clone)]
pub struct ScanSettings {
    pub config: LeakScanConfig,
    pub key_prefix: String,
    pub max_ttl: Duration,
    pub quorum: usize,
    /// Master names in config order: all of them are `unread` until the
    /// first scan ends.
    pub masters: Vec<String>,
    /// `agent.name`: the scanner named in the reports this agent makes.
    pub agent_name: String,
    /// `health.idle_interval` (see [`shared::looks_every`]).
    pub idle_interval: Duration,
}

/// One master's keys from one scan.
#[derive(Debug, Default)]
struct NodeScan {
    /// Every lock key under the prefix with its PTTL (-1: none).
    keys: HashMap<String, i64>,
    /// Keys whose value looks like a token but is not proven to be a lock
    /// key's, with their PTTL (left alone).
    unproven: HashMap<String, i64>,
    /// Keys under the prefix that are not lock keys (left alone).
    foreign: u64,
    duration: Duration,
    repaired: u64,
    error: Option<NodeError>,
}

/// The scanner's memory: the fleet's report as this agent knows it and
/// the minority candidates of its own previous scan.
#[derive(Debug)]
pub struct Scanner {
    settings: ScanSettings,
    metrics: Arc<Metrics>,
    /// `<prefix> leak report`.
    report_key: String,
    /// `<prefix> leak fence`.
    fence_key: String,
    // A std Mutex: replaced once per interval, read by `/v1/leaks`.
    view: Mutex<View>,
    previous_minority: Mutex<HashSet<String>>,
    /// [`BY_SHAPE_SWITCH`] names this agent's prefix: unproven values count
    /// as lock keys. Never in production.
    by_shape: bool,
    /// Writes ask the masters to check the fence; off only under
    /// [`NO_FENCE_SWITCH`].
    fence_check: bool,
    /// [`REPAIR_PAUSE_SWITCH`]'s pause before each repair. Never in
    /// production.
    repair_pause: Option<Duration>,
    /// A reader of `/v1/leaks` wakes a standby that looks seldom.
    wake: tokio::sync::Notify,
}

impl Scanner {
    pub fn new(settings: ScanSettings, metrics: Arc<Metrics>) -> Scanner {
        let report = LeaksResponse {
            scans: 0,
            interval_ms: millis(settings.config.interval),
            repair: repair_name(settings.config.repair).to_string(),
            nodes: Vec::new(),
            unread: settings.masters.clone(),
            partial: true,
            scanner: None,
            fence: None,
            scanned_at_ms: None,
            last_success_ms: None,
            age_ms: None,
            stale: false,
            scanning: false,
            copies_unread: Vec::new(),
        };
        let by_shape = std::env::var(BY_SHAPE_SWITCH).is_ok_and(|v| v == settings.key_prefix);
        if by_shape {
            tracing::warn!(
                "{BY_SHAPE_SWITCH} is set: the scanner takes any value shaped like a token for a \
                 lock key and repairs application data; for control runs of the tests only"
            );
        }
        let fence_check = std::env::var_os(NO_FENCE_SWITCH).is_none_or(|v| v != "1");
        if !fence_check {
            tracing::warn!(
                "{NO_FENCE_SWITCH} is set: the masters take this scanner's repairs and reports \
                 even after another agent took over the fleet's scan; for control runs of the \
                 tests only"
            );
        }
        let repair_pause = std::env::var(REPAIR_PAUSE_SWITCH)
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis);
        if let Some(pause) = repair_pause {
            tracing::warn!(
                ?pause,
                "{REPAIR_PAUSE_SWITCH} is set: the scanner waits before each repair; for tests only"
            );
        }
        let interval = settings.config.interval;
        Scanner {
            report_key: format!("{}{LEAK_REPORT_SUFFIX}", settings.key_prefix),
            fence_key: format!("{}{LEAK_FENCE_SUFFIX}", settings.key_prefix),
            settings,
            metrics,
            view: Mutex::new(View {
                report,
                scanning: false,
                copies_unread: Vec::new(),
                looks_every: interval,
            }),
            previous_minority: Mutex::new(HashSet::new()),
            by_shape,
            fence_check,
            repair_pause,
            wake: tokio::sync::Notify::new(),
        }
    }

    /// The fleet's last report as this agent knows it, for `GET
    /// /v1/leaks`: with its age, whether it is stale, and whether this
    /// agent made it. A standby that looks seldom (see
    /// [`shared::looks_every`]) is woken to look now, for this reader's
    /// next read.
    pub fn report(&self) -> LeaksResponse {
        let view = self.view();
        if !view.scanning && view.looks_every > self.settings.config.interval {
            self.wake.notify_one();
        }
        shared::answer(
            &view.report,
            view.scanning,
            &view.copies_unread,
            view.looks_every,
            unix_ms(),
        )
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        // Poisoning needs a panic while held; the sections only assign.
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Once per interval, scans for the fleet while this agent holds the
    /// scan lock, or looks at the fleet's report and takes the lock when
    /// it is free. When the agent starts to drain (the lock service's
    /// shutdown token), releases the lock so another agent takes over at
    /// its next look, and returns; aborted, it releases the lock in the
    /// background (see [`Lease`]).
    pub async fn run(self: Arc<Self>, locks: Arc<Locks<Node>>) {
        let nodes = locks.engine().nodes().to_vec();
        let shutdown = locks.shutdown_token();
        let mut held: Option<Lease<Node>> = None;
        let mut others_scan = false;
        loop {
            let (interval, idle_interval) =
                (self.settings.config.interval, self.settings.idle_interval);
            let idle = locks.idle_for() >= crate::lock::idle::IDLE_AFTER;
            let scanning = held.is_some();
            let wait = shared::looks_every(interval, idle_interval, scanning, others_scan, idle);
            let folded = shared::folded(interval, idle_interval, scanning, others_scan, idle);
            self.view().looks_every = wait;
            // Readers wake only a standby that looks seldom.
            let seldom = wait > interval;
            let woken = tokio::select! {
                () = tokio::time::sleep(wait) => false,
                () = self.wake.notified(), if seldom => true,
                () = shutdown.cancelled() => {
                    if let Some(lease) = held.take() {
                        lease.release().await;
                        tracing::info!("released the fleet's scan lock: another agent takes over the scan");
                    }
                    self.step_down(None);
                    return;
                }
            };
            if held.as_ref().is_some_and(|lease| !lease.held()) {
                tracing::warn!(
                    "this agent no longer holds the fleet's scan lock; it stops scanning"
                );
                self.step_down(held.take());
            }
            if held.is_none() {
                let folded = folded.then(|| wait + wait / 2);
                others_scan = !self.look(&nodes, folded, woken).await;
                if !others_scan {
                    held = self.take_over(&locks, &nodes).await;
                }
            }
            if let Some(lease) = &held {
                if !self.round(&nodes, lease).await {
                    tracing::warn!(
                        fence = lease.fence(),
                        "this agent no longer holds the fleet's scan lock; it stops scanning"
                    );
                    self.step_down(held.take());
                }
            }
        }
    }

    /// Takes the scan lock and claims every master with its fence: from
    /// here on the masters refuse an earlier holder's writes. `None` when
    /// the lock was not granted, or a master has seen a higher fence (a
    /// newer holder exists, and the lock is released again).
    async fn take_over(
        &self,
        locks: &Arc<Locks<Node>>,
        nodes: &[Arc<Node>],
    ) -> Option<Lease<Node>> {
        let ttl = lease::ttl(self.settings.config.interval, self.settings.max_ttl);
        let lease = match Lease::take(Arc::clone(locks), ttl).await {
            Ok(lease) => lease,
            Err(e) => {
                tracing::debug!(error = %e, "the fleet's scan lock was not taken");
                return None;
            }
        };
        let claim = LeakWrite::Claim {
            key: &self.report_key,
        };
        let claims = futures::future::join_all(
            nodes
                .iter()
                .map(|n| n.leak_write(&self.fence_key, lease.fence(), self.fence_check, &claim)),
        )
        .await;
        for (node, claim) in nodes.iter().zip(&claims) {
            match claim {
                Ok(Fenced::Refused) => {
                    self.refused(ScanWrite::Claim, node, lease.fence());
                    return None;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(node = node.name(), error = %e, "the scan fence could not be raised on this master; a paused earlier scanner is refused there only after this one's next report")
                }
            }
        }
        tracing::info!(
            fence = lease.fence(),
            ttl = ?ttl,
            "took the fleet's scan lock: this agent scans for every agent with its key prefix"
        );
        self.metrics.leak_scanner.set(1);
        Some(lease)
    }

    /// This agent no longer scans: its lock released (when still its),
    /// its leak series gone (the next scanner exports them), its minority
    /// candidates forgotten (a minority needs two scans in a row by one
    /// scanner).
    fn step_down(&self, lease: Option<Lease<Node>>) {
        drop(lease);
        self.metrics.leak_scanner.set(0);
        self.metrics.leaked_keys.reset();
        self.previous_minority
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.view().scanning = false;
    }

    /// A master refused a write of this scanner: a newer one took over.
    fn refused(&self, write: ScanWrite, node: &Node, fence: u64) {
        self.metrics
            .leak_scan_refused
            .with_label_values(&[write.as_str()])
            .inc();
        tracing::warn!(
            node = node.name(),
            write = write.as_str(),
            fence,
            "the master refused this scanner's write: it has seen a newer scanner's fence; this \
             agent stops scanning"
        );
    }

    /// The fleet's last scan as this agent knows it, in its metrics.
    fn export_view(&self, report: &LeaksResponse) {
        if let Some(at) = report.last_success_ms {
            self.metrics.leak_scan_last_success.set(at as f64 / 1000.0);
        }
        if let Some(scanner) = &report.scanner {
            self.metrics.leak_scan_info.reset();
            self.metrics
                .leak_scan_info
                .with_label_values(&[scanner.as_str()])
                .set(1);
        }
    }

    /// One scan for the fleet, over every master at once, then its report
    /// written on every master. False when this agent turned out not to
    /// hold the scan lock any more (lost, or a master refused its fence):
    /// the scan is then not reported.
    async fn round(&self, nodes: &[Arc<Node>], lease: &Lease<Node>) -> bool {
        let started = Instant::now();
        let scans = futures::future::join_all(nodes.iter().map(|n| self.scan_node(n, lease))).await;
        self.metrics
            .leak_scan_duration
            .observe(started.elapsed().as_secs_f64());
        if !lease.held() {
            return false;
        }

        let failed = scans.iter().filter(|s| s.error.is_some()).count();
        let mut holders: HashMap<&str, usize> = HashMap::new();
        for scan in &scans {
            for key in scan.keys.keys() {
                *holders.entry(key.as_str()).or_default() += 1;
            }
        }
        // A key is on a minority when even the masters that could not be
        // scanned would not make up a quorum with the ones that have it.
        let minority_now: HashSet<String> = holders
            .iter()
            .filter(|&(_, &count)| count + failed < self.settings.quorum)
            .map(|(key, _)| key.to_string())
            .collect();
        let confirmed: HashSet<String> = {
            let mut previous = self
                .previous_minority
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let confirmed = minority_now.intersection(&previous).cloned().collect();
            *previous = minority_now;
            confirmed
        };

        let scanned_at_ms = unix_ms();
        let mut reports = Vec::with_capacity(nodes.len());
        for (node, scan) in nodes.iter().zip(&scans) {
            let report = self.node_report(node, scan, &confirmed, scanned_at_ms);
            for (kind, count) in [
                (LeakKind::NoTtl, report.no_ttl),
                (LeakKind::TtlOverMax, report.ttl_over_max),
                (LeakKind::Minority, report.minority),
                (LeakKind::Unproven, report.unproven),
            ] {
                self.metrics
                    .leaked_keys
                    .with_label_values(&[node.name(), kind.as_str()])
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            if report.no_ttl + report.ttl_over_max + report.minority > 0 {
                tracing::warn!(
                    node = node.name(),
                    no_ttl = report.no_ttl,
                    ttl_over_max = report.ttl_over_max,
                    minority = report.minority,
                    repaired = report.repaired,
                    "leaked lock keys"
                );
            }
            if report.unproven > 0 {
                tracing::warn!(
                    node = node.name(),
                    unproven = report.unproven,
                    "keys under lock.key_prefix without TTL (or with one over lock.max_ttl) whose \
                     value looks like a token but is not proven to be this key's: an older \
                     agent's leaked lock, or application data; never repaired, check them by hand"
                );
            }
            reports.push(report);
        }
        // Masters that are down are skipped, not failures of the scanner.
        let scanner_failed = scans.iter().any(|s| {
            s.error
                .as_ref()
                .is_some_and(|e| *e != NodeError::NotConnected)
        });
        // A master that could not be read reports no leaks: say so, so an
        // empty report never looks like a clean one.
        let unread: Vec<String> = reports
            .iter()
            .filter(|r| r.error.is_some())
            .map(|r| r.node.clone())
            .collect();
        let previous = self.view().report.clone();
        let report = LeaksResponse {
            // Counting on from the predecessor's report, so the fleet's
            // count only grows across a takeover.
            scans: previous.scans + 1,
            interval_ms: millis(self.settings.config.interval),
            repair: repair_name(self.settings.config.repair).to_string(),
            partial: !unread.is_empty(),
            unread,
            nodes: reports,
            scanner: Some(self.settings.agent_name.clone()),
            fence: Some(lease.fence()),
            scanned_at_ms: Some(scanned_at_ms),
            last_success_ms: if scanner_failed {
                previous.last_success_ms
            } else {
                Some(scanned_at_ms)
            },
            age_ms: None,
            stale: false,
            scanning: false,
            copies_unread: Vec::new(),
        };
        if !self.publish(nodes, lease, &report, started.elapsed()).await {
            return false;
        }
        self.export_view(&report);
        let mut view = self.view();
        view.report = report;
        view.scanning = true;
        view.copies_unread = Vec::new();
        true
    }

    /// Writes `report` on every master, fenced, with a TTL of a few
    /// intervals. False when a master refused it (a newer scanner).
    async fn publish(
        &self,
        nodes: &[Arc<Node>],
        lease: &Lease<Node>,
        report: &LeaksResponse,
        took: Duration,
    ) -> bool {
        // Cannot fail: a wire type of strings, numbers and lists.
        let json = serde_json::to_string(report).expect("a report as JSON");
        let write = LeakWrite::Report {
            key: &self.report_key,
            json: &json,
            ttl: shared::report_ttl(self.settings.config.interval, took),
        };
        let writes = futures::future::join_all(
            nodes
                .iter()
                .map(|n| n.leak_write(&self.fence_key, lease.fence(), self.fence_check, &write)),
        )
        .await;
        let mut kept = true;
        for (node, written) in nodes.iter().zip(writes) {
            match written {
                Ok(Fenced::Refused) => {
                    self.refused(ScanWrite::Report, node, lease.fence());
                    lease.supersede();
                    kept = false;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(node = node.name(), error = %e, "the fleet's leak report was not written on this master");
                }
            }
        }
        kept
    }

    fn node_report(
        &self,
        node: &Node,
        scan: &NodeScan,
        minority: &HashSet<String>,
        scanned_at_ms: u64,
    ) -> NodeLeaks {
        let max_ttl_ms = i64::try_from(self.settings.max_ttl.as_millis()).unwrap_or(i64::MAX);
        let mut leaked: BTreeSet<(LeakKind, &str, i64)> = BTreeSet::new();
        // One kind per key, the most telling first: a key without TTL on one
        // master is reported as no_ttl, not also as minority debris.
        for (key, &pttl) in &scan.keys {
            let kind = if pttl == -1 {
                LeakKind::NoTtl
            } else if pttl > max_ttl_ms {
                LeakKind::TtlOverMax
            } else if minority.contains(key) {
                LeakKind::Minority
            } else {
                continue;
            };
            leaked.insert((kind, key, pttl));
        }
        // Values that only look like tokens: worth a look when they would
        // never go away by themselves, never repaired.
        for (key, &pttl) in &scan.unproven {
            if pttl == -1 || pttl > max_ttl_ms {
                leaked.insert((LeakKind::Unproven, key, pttl));
            }
        }
        let count = |kind| leaked.iter().filter(|(k, _, _)| *k == kind).count() as u64;
        NodeLeaks {
            node: node.name().to_string(),
            scanned_at_ms,
            duration_ms: millis(scan.duration),
            keys_scanned: scan.keys.len() as u64 + scan.unproven.len() as u64 + scan.foreign,
            error: scan.error.as_ref().map(ToString::to_string),
            no_ttl: count(LeakKind::NoTtl),
            ttl_over_max: count(LeakKind::TtlOverMax),
            minority: count(LeakKind::Minority),
            unproven: count(LeakKind::Unproven),
            repaired: scan.repaired,
            keys: leaked
                .iter()
                .take(MAX_LEAKED_KEYS_SHOWN)
                .map(|(kind, key, pttl)| LeakedKey {
                    resource: key
                        .strip_prefix(self.settings.key_prefix.as_str())
                        .unwrap_or(key)
                        .to_string(),
                    kind: kind.as_str().to_string(),
                    pttl_ms: u64::try_from(*pttl).ok(),
                })
                .collect(),
        }
    }

    /// Walks one master's keyspace under the prefix, at most
    /// `keys_per_second` keys a second, while this agent holds the scan
    /// lock (looked at before each page and each repair).
    async fn scan_node(&self, node: &Node, lease: &Lease<Node>) -> NodeScan {
        let started = Instant::now();
        let mut scan = NodeScan::default();
        let pattern = format!("{}*", self.settings.key_prefix);
        let config = &self.settings.config;
        let mut cursor = 0;
        loop {
            if !lease.held() {
                scan.error = Some(NodeError::Other(
                    "this agent lost the fleet's scan lock during the scan".into(),
                ));
                break;
            }
            let (next, batch) = match node.scan_keys(cursor, &pattern, config.count).await {
                Ok(answer) => answer,
                Err(e) => {
                    scan.error = Some(e);
                    scan.keys.clear();
                    scan.unproven.clear();
                    scan.foreign = 0;
                    break;
                }
            };
            for KeyState {
                key,
                value,
                pttl,
                readers,
            } in batch
            {
                if redlock_wire::keys::is_bookkeeping(&self.settings.key_prefix, &key)
                    || pttl == -2
                    || !readers.is_empty()
                {
                    // The agents' own keys, a key that expired meanwhile,
                    // or a shared lock's readers (whose key has a TTL).
                    continue;
                }
                self.metrics.leak_scan_keys.inc();
                let stored = value
                    .as_deref()
                    .map_or(Stored::Foreign, |v| token::stored_at(&key, v));
                let value = match (stored, value) {
                    (Stored::Token, Some(value)) => value,
                    (Stored::Unproven, Some(value)) if self.by_shape => value,
                    (Stored::Unproven, _) => {
                        scan.unproven.insert(key, pttl);
                        continue;
                    }
                    _ => {
                        scan.foreign += 1;
                        continue;
                    }
                };
                // Only a value proven to be this key's token gets here (or,
                // under the test switch, any value shaped like one).
                if pttl == -1
                    && config.repair == Repair::Expire
                    && lease.held()
                    && self.repair(node, lease, &key, &value).await
                {
                    scan.repaired += 1;
                }
                scan.keys.insert(key, pttl);
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
            // Rate limit: never ahead of keys_per_second.
            let examined = scan.keys.len() as u64 + scan.unproven.len() as u64 + scan.foreign;
            let due = Duration::from_secs_f64(examined as f64 / config.keys_per_second as f64);
            if let Some(ahead) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(ahead).await;
            }
        }
        scan.duration = started.elapsed();
        if scan.foreign + scan.unproven.len() as u64 > 0 && scan.error.is_none() {
            tracing::warn!(
                node = node.name(),
                foreign = scan.foreign,
                unproven = scan.unproven.len(),
                key_prefix = %self.settings.key_prefix,
                "keys under lock.key_prefix that are not proven lock keys; the scanner leaves them \
                 alone, but the prefix should belong to the agent alone"
            );
        }
        scan
    }

    /// Gives `key`, found without TTL and holding `value`, a TTL of
    /// `lock.max_ttl`, fenced: a master that has seen a newer scanner
    /// refuses, and this agent stops scanning. True when the TTL was set.
    async fn repair(&self, node: &Node, lease: &Lease<Node>, key: &str, value: &str) -> bool {
        if let Some(pause) = self.repair_pause {
            tracing::warn!(
                node = node.name(),
                fence = lease.fence(),
                ?pause,
                "test switch: pausing before a repair"
            );
            tokio::time::sleep(pause).await;
        }
        let write = LeakWrite::Repair {
            key,
            value,
            ttl: self.settings.max_ttl,
        };
        match node
            .leak_write(&self.fence_key, lease.fence(), self.fence_check, &write)
            .await
        {
            Ok(Fenced::Written) => {
                tracing::info!(node = node.name(), key = %key, fence = lease.fence(), "gave a key without TTL one of lock.max_ttl");
                true
            }
            Ok(Fenced::Unchanged) => false,
            Ok(Fenced::Refused) => {
                self.refused(ScanWrite::Repair, node, lease.fence());
                lease.supersede();
                false
            }
            Err(e) => {
                tracing::warn!(node = node.name(), error = %e, "repair failed");
                false
            }
        }
    }
}

/// Unix time in ms, for the reports.
fn unix_ms() -> u64 {
    (unix_now() * 1000.0) as u64
}

fn repair_name(repair: Repair) -> &'static str {
    match repair {
        Repair::None => "none",
        Repair::Expire => "expire",
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
