//! The nodes view's rows: one per master, with its latency history and its
//! quarantine countdown; a master given as a Redis Cluster carries its
//! shards, summed up by [`ShardCount`].

use std::cmp::Ordering;
use std::time::{Duration, Instant};

use redlock_wire::{NodeState, NodeStatus, NodesResponse, ShardStatus};

use super::countdown::Countdown;
use super::filter::Filter;
use super::history::History;
use super::table::Rows;
use super::Known;

/// Latency samples kept per node: one per poll.
pub const LATENCY_SAMPLES: usize = 60;

/// The quorum line of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quorum {
    pub usable: usize,
    pub total: usize,
    pub quorum: usize,
}

impl Quorum {
    /// Masters that may fail before locks stop: negative without a quorum.
    pub fn margin(&self) -> i64 {
        self.usable as i64 - self.quorum as i64
    }
}

/// A quarantine in progress: time left, and its length as first seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quarantine {
    pub left: Countdown,
    /// The longest remaining time seen during this quarantine: its full
    /// length when the TUI saw it start, else the first reading.
    pub full: Duration,
}

/// One master.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub name: String,
    /// `None` while the agent's view of this master is unknown.
    pub status: Option<NodeStatus>,
    pub quarantine: Option<Quarantine>,
    /// Probe round trips in ms, oldest first; `None` where none was known.
    pub latency: History<Option<f64>>,
    /// Whether the agent last said this master is a Redis Cluster; kept
    /// while its status is unknown, so the table keeps its shape.
    pub cluster: bool,
}

/// The `kind` of a master given as a Redis Cluster in `/v1/nodes`.
pub const CLUSTER: &str = "cluster";

/// A cluster master's shards at a glance: how many answer, how many hash
/// slots they serve, and how many of those are kept out of locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardCount {
    pub up: usize,
    pub total: usize,
    /// Slots the shards serve (16384 when every slot is assigned).
    pub slots: u64,
    /// The master's slots in quarantine, as the agent counts them.
    pub quarantined_slots: u64,
}

impl ShardCount {
    /// `None` for a single server.
    pub fn of(status: &NodeStatus) -> Option<ShardCount> {
        (status.kind == CLUSTER).then(|| ShardCount {
            up: status
                .shards
                .iter()
                .filter(|s| s.state == NodeState::Up)
                .count(),
            total: status.shards.len(),
            slots: status.shards.iter().map(served_slots).sum(),
            quarantined_slots: status.quarantined_slots,
        })
    }
}

/// Hash slots a shard serves: its inclusive ranges summed.
pub fn served_slots(shard: &ShardStatus) -> u64 {
    shard
        .slots
        .iter()
        .map(|&[first, last]| u64::from(last.saturating_sub(first)) + 1)
        .sum()
}

/// Columns the nodes table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeColumn {
    Name,
    State,
    Latency,
    Uptime,
}

/// Every master, in the agent's config order until sorted.
#[derive(Debug, Clone, PartialEq)]
pub struct Nodes {
    pub rows: Vec<NodeRow>,
    pub quorum: Known<Quorum>,
}

impl Default for Nodes {
    fn default() -> Nodes {
        Nodes {
            rows: Vec::new(),
            quorum: Known::Unknown,
        }
    }
}

impl Nodes {
    /// Whether any master is a Redis Cluster: the table then has a column
    /// for the kind.
    pub fn any_cluster(&self) -> bool {
        self.rows.iter().any(|row| row.cluster)
    }

    /// Takes in an answer to `GET /v1/nodes` requested at `read_at`,
    /// carrying each master's history over by name.
    pub fn apply(&mut self, response: &NodesResponse, read_at: Instant) {
        let mut old: Vec<NodeRow> = std::mem::take(&mut self.rows);
        self.rows = response
            .nodes
            .iter()
            .map(|status| {
                let previous = old
                    .iter()
                    .position(|row| row.name == status.name)
                    .map(|i| old.swap_remove(i));
                NodeRow::next(previous, status, read_at)
            })
            .collect();
        self.quorum = Known::Known(Quorum {
            usable: response.usable,
            total: response.nodes.len(),
            quorum: response.quorum,
        });
    }

    /// Forgets every value (the connection dropped or the endpoint failed),
    /// keeping the names and histories so the table keeps its shape.
    pub fn forget(&mut self, why: Known<Quorum>) {
        for row in &mut self.rows {
            row.status = None;
            row.quarantine = None;
            row.latency.push(None);
        }
        self.quorum = why;
    }
}

impl NodeRow {
    fn next(previous: Option<NodeRow>, status: &NodeStatus, read_at: Instant) -> NodeRow {
        let mut latency = previous
            .as_ref()
            .map(|p| p.latency.clone())
            .unwrap_or_else(|| History::new(LATENCY_SAMPLES));
        latency.push(status.latency_ms);
        let quarantine = (status.state == NodeState::Quarantined).then(|| {
            let left = Duration::from_millis(status.quarantine_remaining_ms);
            // The agent says how long the quarantine is in all; an older
            // agent does not, and then the longest remainder seen scales it.
            let full = if status.quarantine_ms > 0 {
                Duration::from_millis(status.quarantine_ms).max(left)
            } else {
                previous
                    .as_ref()
                    .and_then(|p| p.quarantine)
                    .map_or(left, |q| q.full.max(left))
            };
            Quarantine {
                left: Countdown::new(left, read_at),
                full,
            }
        });
        NodeRow {
            name: status.name.clone(),
            status: Some(status.clone()),
            quarantine,
            latency,
            cluster: status.kind == CLUSTER,
        }
    }

    pub fn state(&self) -> Option<NodeState> {
        self.status.as_ref().map(|s| s.state)
    }
}

/// Healthy first, then quarantined, then duplicates, then down, then unknown.
fn state_rank(state: Option<NodeState>) -> u8 {
    match state {
        Some(NodeState::Up) => 0,
        Some(NodeState::Quarantined) => 1,
        Some(NodeState::Duplicate) => 2,
        Some(NodeState::Down) => 3,
        None => 4,
    }
}

/// Known values first, ascending; unknown ones last.
pub(crate) fn cmp_known<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

impl Rows for Nodes {
    type Column = NodeColumn;

    fn len(&self) -> usize {
        self.rows.len()
    }

    fn key(&self, i: usize) -> &str {
        &self.rows[i].name
    }

    fn keep(&self, i: usize, filter: &Filter) -> bool {
        let row = &self.rows[i];
        let status = row.status.as_ref();
        let fields = std::iter::once(row.name.as_str())
            .chain(status.map(|s| s.state.as_str()))
            .chain(status.map(|s| s.kind.as_str()))
            .chain(status.and_then(|s| s.last_error.as_deref()))
            .chain(
                status
                    .into_iter()
                    .flat_map(|s| s.warnings.iter().map(String::as_str)),
            )
            // A shard's address or node ID finds the cluster it belongs to.
            .chain(status.into_iter().flat_map(|s| {
                s.shards
                    .iter()
                    .flat_map(|shard| [shard.addr.as_str(), shard.node_id.as_str()])
            }));
        filter.keeps(fields)
    }

    fn compare(&self, a: usize, b: usize, column: NodeColumn) -> Ordering {
        let (a, b) = (&self.rows[a], &self.rows[b]);
        match column {
            NodeColumn::Name => a.name.cmp(&b.name),
            NodeColumn::State => state_rank(a.state()).cmp(&state_rank(b.state())),
            NodeColumn::Latency => cmp_known(
                a.status.as_ref().and_then(|s| s.latency_ms),
                b.status.as_ref().and_then(|s| s.latency_ms),
            ),
            NodeColumn::Uptime => cmp_known(
                a.status.as_ref().and_then(|s| s.uptime_s),
                b.status.as_ref().and_then(|s| s.uptime_s),
            ),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::state::table::TableView;

    pub(crate) fn status(name: &str, state: NodeState) -> NodeStatus {
        NodeStatus {
            name: name.to_string(),
            state,
            latency_ms: (state != NodeState::Down).then_some(0.4),
            last_error: (state == NodeState::Down).then(|| "connection refused".to_string()),
            quarantine_remaining_ms: if state == NodeState::Quarantined {
                40_000
            } else {
                0
            },
            quarantine_ms: 0,
            detector: (state == NodeState::Quarantined).then(|| "run_id".to_string()),
            run_id: Some(format!("{name}0123456789abcdef")),
            uptime_s: Some(3_600),
            persistence: Some("none".to_string()),
            warnings: Vec::new(),
            kind: "single".to_string(),
            shards: Vec::new(),
            quarantined_slots: 0,
            quarantined_slots_remaining_ms: 0,
        }
    }

    /// A shard serving `slots`, with one replica and nothing quarantined.
    pub(crate) fn shard(port: u16, slots: &[[u16; 2]], state: NodeState) -> ShardStatus {
        ShardStatus {
            addr: format!("127.0.0.1:{port}"),
            node_id: format!("{port}a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4")[..40].to_string(),
            slots: slots.to_vec(),
            state,
            quarantined_slots: 0,
            replicas: 1,
        }
    }

    /// A master given as a Redis Cluster: no run id, uptime or persistence
    /// of its own; its quarantined slots are its shards' sum.
    pub(crate) fn cluster(name: &str, shards: Vec<ShardStatus>) -> NodeStatus {
        NodeStatus {
            run_id: None,
            uptime_s: None,
            persistence: None,
            kind: CLUSTER.to_string(),
            quarantined_slots: shards.iter().map(|s| s.quarantined_slots).sum(),
            shards,
            ..status(name, NodeState::Up)
        }
    }

    /// Three shards over every slot, the usual split of `--cluster create`.
    pub(crate) fn three_shards() -> Vec<ShardStatus> {
        vec![
            shard(7001, &[[0, 5460]], NodeState::Up),
            shard(7002, &[[5461, 10922]], NodeState::Up),
            shard(7003, &[[10923, 16383]], NodeState::Up),
        ]
    }

    pub(crate) fn response(nodes: Vec<NodeStatus>) -> NodesResponse {
        let usable = nodes.iter().filter(|n| n.state == NodeState::Up).count();
        let quorum = nodes.len() / 2 + 1;
        NodesResponse {
            quorum,
            usable,
            available: usable >= quorum,
            reason: None,
            slots_without_quorum: 0,
            nodes,
        }
    }

    #[test]
    fn apply_keeps_latency_history_by_name() {
        let t0 = Instant::now();
        let mut nodes = Nodes::default();
        let mut first = response(vec![
            status("r1", NodeState::Up),
            status("r2", NodeState::Up),
        ]);
        nodes.apply(&first, t0);
        first.nodes[0].latency_ms = Some(2.0);
        first.nodes.reverse();
        nodes.apply(&first, t0);
        let r1 = nodes.rows.iter().find(|r| r.name == "r1").unwrap();
        assert_eq!(
            r1.latency.iter().copied().collect::<Vec<_>>(),
            [Some(0.4), Some(2.0)]
        );
        assert_eq!(
            nodes.quorum,
            Known::Known(Quorum {
                usable: 2,
                total: 2,
                quorum: 2
            })
        );
    }

    #[test]
    fn a_quarantine_remembers_its_full_length_and_counts_down() {
        let t0 = Instant::now();
        let mut nodes = Nodes::default();
        let mut q = status("r1", NodeState::Quarantined);
        q.quarantine_remaining_ms = 61_000;
        nodes.apply(&response(vec![q.clone()]), t0);
        q.quarantine_remaining_ms = 31_000;
        let t1 = t0 + Duration::from_secs(30);
        nodes.apply(&response(vec![q]), t1);
        let quarantine = nodes.rows[0].quarantine.unwrap();
        assert_eq!(quarantine.full, Duration::from_secs(61));
        assert_eq!(
            quarantine.left.left(t1 + Duration::from_secs(1)),
            Duration::from_secs(30)
        );
        // Back up: no quarantine, and the next one starts afresh.
        nodes.apply(&response(vec![status("r1", NodeState::Up)]), t1);
        assert_eq!(nodes.rows[0].quarantine, None);
    }

    #[test]
    fn a_quarantine_seen_midway_is_scaled_by_the_agents_full_length() {
        let mut nodes = Nodes::default();
        let mut q = status("r1", NodeState::Quarantined);
        q.quarantine_remaining_ms = 20_000;
        q.quarantine_ms = 61_000;
        nodes.apply(&response(vec![q]), Instant::now());
        assert_eq!(
            nodes.rows[0].quarantine.unwrap().full,
            Duration::from_secs(61)
        );
    }

    #[test]
    fn forget_keeps_names_but_no_values() {
        let mut nodes = Nodes::default();
        nodes.apply(&response(vec![status("r1", NodeState::Up)]), Instant::now());
        nodes.forget(Known::Unknown);
        assert_eq!(nodes.rows[0].name, "r1");
        assert!(!nodes.any_cluster());
        assert_eq!(nodes.rows[0].status, None);
        assert_eq!(nodes.rows[0].latency.last(), Some(&None));
        assert_eq!(nodes.quorum, Known::Unknown);
    }

    #[test]
    fn a_cluster_counts_its_shards_up_and_its_slots() {
        let mut shards = three_shards();
        shards[1].state = NodeState::Down;
        shards[2].quarantined_slots = 100;
        shards[2].slots = vec![[10923, 16283], [16300, 16383]];
        let c = cluster("c1", shards);
        assert_eq!(
            ShardCount::of(&c),
            Some(ShardCount {
                up: 2,
                total: 3,
                slots: 16_384 - 16,
                quarantined_slots: 100
            })
        );
        assert_eq!(ShardCount::of(&status("r1", NodeState::Up)), None);
    }

    #[test]
    fn a_shard_address_filters_to_its_cluster() {
        let mut nodes = Nodes::default();
        nodes.apply(
            &response(vec![
                status("r1", NodeState::Up),
                cluster("c2", three_shards()),
            ]),
            Instant::now(),
        );
        let mut view = TableView::new(NodeColumn::Name);
        view.rebuild(&nodes);
        view.set_filter(Filter::parse("127.0.0.1:7002").unwrap(), &nodes);
        assert_eq!(view.order(), [1]);
        view.set_filter(Filter::parse("^cluster$").unwrap(), &nodes);
        assert_eq!(view.order(), [1]);
        nodes.forget(Known::Unknown);
        assert!(nodes.any_cluster(), "the table keeps its shape");
    }

    #[test]
    fn sorts_by_state_worst_last_and_filters_on_errors() {
        let mut nodes = Nodes::default();
        nodes.apply(
            &response(vec![
                status("r1", NodeState::Down),
                status("r2", NodeState::Up),
                status("r3", NodeState::Quarantined),
            ]),
            Instant::now(),
        );
        let mut view = TableView::new(NodeColumn::State);
        view.rebuild(&nodes);
        let names: Vec<_> = view
            .order()
            .iter()
            .map(|&i| nodes.rows[i].name.as_str())
            .collect();
        assert_eq!(names, ["r2", "r3", "r1"]);
        view.set_filter(Filter::parse("refused").unwrap(), &nodes);
        assert_eq!(view.order(), [0]);
    }
}
