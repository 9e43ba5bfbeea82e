//! The leaked-key scanner: every `leak_scan.interval`, SCAN each master for
//! keys under the prefix, read each batch's values and PTTLs in one script
//! call (`READ_KEYS`, rate-limited), and
//! report the keys that will not go away by themselves.
//!
//! Kinds: `no_ttl` (PTTL -1: a deadlock), `ttl_over_max` (longer than
//! `lock.max_ttl`: written around the agent), `minority` (on fewer than a
//! quorum of masters on two scans in a row: debris of a partial
//! acquisition); each key is counted once, as the first kind that fits in
//! that order. The scanner never deletes; with `repair: expire` it gives
//! `no_ttl` keys a TTL of `lock.max_ttl`.
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
//! shared (or that agents of the old format still run).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_wire::{LeakedKey, LeaksResponse, NodeLeaks, MAX_LEAKED_KEYS_SHOWN};

use crate::config::{LeakScanConfig, Repair};
use crate::metrics::{unix_now, LeakKind, Metrics};
use crate::node::{KeyState, Node};
use crate::redlock::token::{self, Stored};
use crate::redlock::NodeError;

/// Test-only switch (see `redlock_testkit::switches`): set to a
/// `lock.key_prefix`, the scanners of agents with that prefix take every
/// value shaped like a token for a lock key, proven or not, as scanners
/// did before tokens carried a check value. The control run of the repair
/// test, which must see a SHA-1 under the prefix repaired without the proof.
pub use redlock_testkit::switches::LEAK_REPAIR_BY_SHAPE as BY_SHAPE_SWITCH;

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

/// The scanner's memory: the last report and the minority candidates of
/// the previous scan.
#[derive(Debug)]
pub struct Scanner {
    settings: ScanSettings,
    metrics: Arc<Metrics>,
    // A std Mutex: replaced once per scan, read by `/v1/leaks`.
    last: Mutex<LeaksResponse>,
    previous_minority: Mutex<HashSet<String>>,
    /// [`BY_SHAPE_SWITCH`] names this agent's prefix: unproven values count
    /// as lock keys. Never in production.
    by_shape: bool,
}

impl Scanner {
    pub fn new(settings: ScanSettings, metrics: Arc<Metrics>) -> Scanner {
        let last = LeaksResponse {
            scans: 0,
            interval_ms: millis(settings.config.interval),
            repair: match settings.config.repair {
                Repair::None => "none",
                Repair::Expire => "expire",
            }
            .to_string(),
            nodes: Vec::new(),
            unread: settings.masters.clone(),
            partial: true,
        };
        let by_shape = std::env::var(BY_SHAPE_SWITCH).is_ok_and(|v| v == settings.key_prefix);
        if by_shape {
            tracing::warn!(
                "{BY_SHAPE_SWITCH} is set: the scanner takes any value shaped like a token for a \
                 lock key and repairs application data; for control runs of the tests only"
            );
        }
        Scanner {
            settings,
            metrics,
            last: Mutex::new(last),
            previous_minority: Mutex::new(HashSet::new()),
            by_shape,
        }
    }

    /// The last report, for `GET /v1/leaks`.
    pub fn report(&self) -> LeaksResponse {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Scans forever, one round per interval; returns only when aborted.
    pub async fn run(self: Arc<Self>, nodes: Vec<Arc<Node>>) {
        loop {
            tokio::time::sleep(self.settings.config.interval).await;
            self.scan(&nodes).await;
        }
    }

    /// One round over every master at once.
    pub async fn scan(&self, nodes: &[Arc<Node>]) {
        let started = Instant::now();
        let scans = futures::future::join_all(nodes.iter().map(|n| self.scan_node(n))).await;
        self.metrics
            .leak_scan_duration
            .observe(started.elapsed().as_secs_f64());

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

        let scanned_at_ms = (unix_now() * 1000.0) as u64;
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
        if !scanner_failed {
            self.metrics.leak_scan_last_success.set(unix_now());
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.scans += 1;
        // A master that could not be read reports no leaks: say so, so an
        // empty report never looks like a clean one.
        last.unread = reports
            .iter()
            .filter(|r| r.error.is_some())
            .map(|r| r.node.clone())
            .collect();
        last.partial = !last.unread.is_empty();
        last.nodes = reports;
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
    /// `keys_per_second` keys a second.
    async fn scan_node(&self, node: &Node) -> NodeScan {
        let started = Instant::now();
        let mut scan = NodeScan::default();
        let pattern = format!("{}*", self.settings.key_prefix);
        let config = &self.settings.config;
        let mut cursor = 0;
        loop {
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
            for KeyState { key, value, pttl } in batch {
                if redlock_wire::keys::is_bookkeeping(&self.settings.key_prefix, &key) || pttl == -2
                {
                    continue; // the agents' own keys, or a key that expired meanwhile
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
                if pttl == -1 && config.repair == Repair::Expire {
                    match node
                        .expire_if_unchanged(&key, &value, self.settings.max_ttl)
                        .await
                    {
                        Ok(true) => {
                            scan.repaired += 1;
                            tracing::info!(node = node.name(), key = %key, "gave a key without TTL one of lock.max_ttl");
                        }
                        Ok(false) => {}
                        Err(e) => tracing::warn!(node = node.name(), error = %e, "repair failed"),
                    }
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
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
