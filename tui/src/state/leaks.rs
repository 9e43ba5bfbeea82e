//! The leaks view's data: the fleet scanner's last pass over each master,
//! and one row per leaked key it listed.

use std::cmp::Ordering;
use std::time::{Duration, Instant};

use redlock_wire::{LeaksResponse, NodeLeaks};

use super::countdown::Countdown;
use super::filter::Filter;
use super::nodes::cmp_known;
use super::table::Rows;
use super::Known;

/// One leaked key on one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakRow {
    /// `node/kind/resource`: unique, the selection's anchor.
    key: String,
    pub node: String,
    /// `no_ttl`, `ttl_over_max`, `minority` or `unproven`.
    pub kind: String,
    pub resource: String,
    pub ttl: Option<Countdown>,
}

/// The last scan of one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    pub leaks: NodeLeaks,
    /// How long ago the scan ended, as of `read_at`; `None` when the agent's
    /// clock is ahead of ours.
    age_at_read: Option<Duration>,
    read_at: Instant,
}

impl Scan {
    /// Time since the scan ended.
    pub fn age(&self, now: Instant) -> Option<Duration> {
        self.age_at_read
            .map(|age| age + now.saturating_duration_since(self.read_at))
    }
}

/// An answer to `GET /v1/leaks`, shaped for the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakReport {
    pub scans: u64,
    pub interval: Duration,
    pub repair: String,
    pub nodes: Vec<Scan>,
    pub rows: Vec<LeakRow>,
    /// Masters the last scan could not read: their leaks are not counted.
    pub unread: Vec<String>,
    /// The agent that made the scan (one scans for its whole fleet);
    /// `None` before the first, or from an agent that predates the fleet
    /// scan.
    pub scanner: Option<String>,
    /// The agent says the report is older than the fleet's scans should
    /// let it be.
    pub stale: bool,
}

/// Columns the leaked-keys table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeakColumn {
    Node,
    Kind,
    Resource,
    Ttl,
}

/// The leaks view's data.
#[derive(Debug, Clone, PartialEq)]
pub struct Leaks {
    pub report: Known<LeakReport>,
}

impl Default for Leaks {
    fn default() -> Leaks {
        Leaks {
            report: Known::Unknown,
        }
    }
}

impl Leaks {
    /// Takes in an answer requested at `read_at`, when the wall clock read
    /// `wall_ms` (Unix ms): scan times are wall-clock, countdowns monotonic.
    pub fn apply(&mut self, response: &LeaksResponse, read_at: Instant, wall_ms: u64) {
        let nodes = response
            .nodes
            .iter()
            .map(|leaks| Scan {
                leaks: leaks.clone(),
                age_at_read: wall_ms
                    .checked_sub(leaks.scanned_at_ms)
                    .map(Duration::from_millis),
                read_at,
            })
            .collect();
        let rows = response
            .nodes
            .iter()
            .flat_map(|n| {
                n.keys.iter().map(move |k| LeakRow {
                    key: format!("{}/{}/{}", n.node, k.kind, k.resource),
                    node: n.node.clone(),
                    kind: k.kind.clone(),
                    resource: k.resource.clone(),
                    ttl: k.pttl_ms.map(|ms| Countdown::from_ms(ms, read_at)),
                })
            })
            .collect();
        self.report = Known::Known(LeakReport {
            scans: response.scans,
            interval: Duration::from_millis(response.interval_ms),
            repair: response.repair.clone(),
            nodes,
            rows,
            unread: response.unread.clone(),
            scanner: response.scanner.clone(),
            stale: response.stale,
        });
    }

    /// Forgets the report: the connection dropped or the endpoint failed.
    pub fn forget(&mut self, why: Known<LeakReport>) {
        self.report = why;
    }

    pub fn rows(&self) -> &[LeakRow] {
        self.report.get().map_or(&[], |r| &r.rows)
    }
}

impl Rows for Leaks {
    type Column = LeakColumn;

    fn len(&self) -> usize {
        self.rows().len()
    }

    fn key(&self, i: usize) -> &str {
        &self.rows()[i].key
    }

    fn keep(&self, i: usize, filter: &Filter) -> bool {
        let row = &self.rows()[i];
        filter.keeps([row.node.as_str(), row.kind.as_str(), row.resource.as_str()])
    }

    fn compare(&self, a: usize, b: usize, column: LeakColumn) -> Ordering {
        let rows = self.rows();
        let (a, b) = (&rows[a], &rows[b]);
        match column {
            LeakColumn::Node => a.node.cmp(&b.node),
            LeakColumn::Kind => a.kind.cmp(&b.kind),
            LeakColumn::Resource => a.resource.cmp(&b.resource),
            LeakColumn::Ttl => cmp_known(a.ttl.map(|t| t.at_read()), b.ttl.map(|t| t.at_read())),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::state::table::TableView;
    use redlock_wire::LeakedKey;

    pub(crate) fn response(scanned_at_ms: u64) -> LeaksResponse {
        let node = |name: &str, keys: Vec<LeakedKey>| NodeLeaks {
            node: name.to_string(),
            scanned_at_ms,
            duration_ms: 12,
            keys_scanned: 1_000,
            error: None,
            no_ttl: keys.iter().filter(|k| k.kind == "no_ttl").count() as u64,
            ttl_over_max: keys.iter().filter(|k| k.kind == "ttl_over_max").count() as u64,
            minority: keys.iter().filter(|k| k.kind == "minority").count() as u64,
            unproven: keys.iter().filter(|k| k.kind == "unproven").count() as u64,
            repaired: 0,
            keys,
        };
        let key = |resource: &str, kind: &str, pttl_ms| LeakedKey {
            resource: resource.to_string(),
            kind: kind.to_string(),
            pttl_ms,
        };
        LeaksResponse {
            scans: 3,
            interval_ms: 60_000,
            repair: "none".to_string(),
            unread: Vec::new(),
            partial: false,
            nodes: vec![
                node(
                    "r1",
                    vec![
                        key("forgotten", "no_ttl", None),
                        key("huge", "ttl_over_max", Some(900_000)),
                    ],
                ),
                node("r2", vec![key("stray", "minority", Some(20_000))]),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn flattens_keys_and_ages_scans_from_the_wall_clock() {
        let t0 = Instant::now();
        let mut leaks = Leaks::default();
        leaks.apply(&response(1_000_000), t0, 1_004_000);
        assert_eq!(leaks.rows().len(), 3);
        let report = leaks.report.get().unwrap();
        assert_eq!(
            report.nodes[0].age(t0 + Duration::from_secs(1)),
            Some(Duration::from_secs(5))
        );
        // The agent's clock ahead of ours: the age is unknown, not negative.
        leaks.apply(&response(2_000_000), t0, 1_000_000);
        assert_eq!(leaks.report.get().unwrap().nodes[0].age(t0), None);
    }

    #[test]
    fn sorts_by_kind_and_ttl_and_filters_on_any_column() {
        let mut leaks = Leaks::default();
        leaks.apply(&response(0), Instant::now(), 0);
        let mut view = TableView::new(LeakColumn::Ttl);
        view.rebuild(&leaks);
        let order: Vec<_> = view
            .order()
            .iter()
            .map(|&i| leaks.rows()[i].resource.as_str())
            .collect();
        assert_eq!(order, ["stray", "huge", "forgotten"]);
        view.set_filter(Filter::parse("no_ttl").unwrap(), &leaks);
        assert_eq!(view.order().len(), 1);
        leaks.forget(Known::Failed("404 not_found".into()));
        assert_eq!(leaks.report.reason(), Some("404 not_found"));
        view.rebuild(&leaks);
        assert!(view.order().is_empty());
    }
}
