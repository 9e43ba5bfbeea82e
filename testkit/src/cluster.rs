//! A real local Redis Cluster: N primaries with R replicas each, every node
//! a `redis-server --cluster-enabled yes` on free loopback ports, and the
//! faults a Redlock master made of a cluster must survive: a shard restarted
//! empty, a failover to a replica that missed the latest writes, a slot
//! migrated to another shard.
//!
//! Shards are numbered from 0 in the order they were started and keep their
//! number across failovers (the primary of a shard may change, its number
//! does not); the slots are split evenly between them at start.
//!
//! ## Behavior
//! - [`RedisCluster::start`] returns once the cluster has settled (see
//!   [`RedisCluster::wait_settled`]): every node reports `cluster_state:ok`,
//!   every node names the same primary for every slot, every replica
//!   follows its shard's primary and is in sync.
//! - Every node runs with `cluster-replica-no-failover yes`: the cluster
//!   never fails over on its own, only when a test asks
//!   ([`RedisCluster::finish_lagged_failover`]), so a primary restarted
//!   empty comes back as the primary of its slots, empty.
//! - Replicas load a full sync without a file (`repl-diskless-load
//!   swapdb`), and a restart removes any data file first: a restarted node
//!   is empty.
//! - Every process is killed when the [`RedisCluster`] is dropped (their
//!   logs printed first when the thread panics).
//! - Waits poll the nodes until a condition holds or a deadline passes; a
//!   timeout says what was awaited and the last state seen.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redlock_wire::keys::{key_slot, SLOTS};

use crate::server::{Options, RedisServer, SpawnError};

mod faults;

/// `cluster-node-timeout` of every node: low, so that a failing node is
/// noticed within a second.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long the cluster may take to settle after a start or a fault. A
/// primary back from a restart refuses writes for 2 s by itself (Redis's
/// rejoin delay); the rest is a loaded machine.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a cluster could not be started or a fault not be injected.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("{command} on port {port}: {error}")]
    Command {
        port: u16,
        command: String,
        error: String,
    },
    #[error("{what} not within {limit:?}; last seen: {last}")]
    Timeout {
        what: String,
        limit: Duration,
        last: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One line of `CLUSTER NODES`: a node as the node asked sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLine {
    pub id: String,
    /// `host:port` of its client port (`:0` when its address is unknown).
    pub addr: String,
    pub port: u16,
    /// `myself`, `master`, `slave`, `fail?`, `fail`, `handshake`, ...
    pub flags: Vec<String>,
    /// The node ID of its primary, for a replica.
    pub primary: Option<String>,
    /// The slot ranges it serves, inclusive (slots in migration, shown in
    /// brackets, are left out).
    pub slots: Vec<(u16, u16)>,
}

impl NodeLine {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// A primary that serves slots and is not known to have failed.
    pub fn serves_slots(&self) -> bool {
        self.has_flag("master") && !self.has_flag("fail") && !self.slots.is_empty()
    }
}

/// Parses the text of `CLUSTER NODES`; lines it cannot read are skipped.
pub fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let id = words.next()?.to_string();
            let address = words.next()?;
            let flags = words.next()?.split(',').map(str::to_string).collect();
            let primary = match words.next()? {
                "-" => None,
                id => Some(id.to_string()),
            };
            // ping-sent, pong-recv, config-epoch, link-state.
            let mut words = words.skip(4);
            let addr = address.split(['@', ',']).next()?.to_string();
            let port = addr.rsplit(':').next()?.parse().ok()?;
            let slots = words
                .by_ref()
                .filter(|w| !w.starts_with('['))
                .filter_map(|w| match w.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => w.parse().ok().map(|s| (s, s)),
                })
                .collect();
            Some(NodeLine {
                id,
                addr,
                port,
                flags,
                primary,
                slots,
            })
        })
        .collect()
}

/// The value of `field` in an `INFO` or `CLUSTER INFO` reply.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Which node serves each slot, as sorted `(first, last, node ID)` ranges
/// with neighbours of one owner merged: two views agree when these are equal.
fn slot_map(view: &[NodeLine]) -> Vec<(u16, u16, String)> {
    let mut ranges: Vec<(u16, u16, String)> = view
        .iter()
        .filter(|n| n.serves_slots())
        .flat_map(|n| n.slots.iter().map(|&(lo, hi)| (lo, hi, n.id.clone())))
        .collect();
    ranges.sort();
    let mut merged: Vec<(u16, u16, String)> = Vec::new();
    for (lo, hi, id) in ranges {
        match merged.last_mut() {
            Some(last) if last.2 == id && u32::from(last.1) + 1 == u32::from(lo) => last.1 = hi,
            _ => merged.push((lo, hi, id)),
        }
    }
    merged
}

/// Slots covered by a slot map.
fn covered(map: &[(u16, u16, String)]) -> u32 {
    map.iter()
        .map(|(lo, hi, _)| u32::from(*hi) - u32::from(*lo) + 1)
        .sum()
}

/// One shard's primary as the cluster reports it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primary {
    pub shard: usize,
    pub port: u16,
    pub node_id: String,
    /// The slot ranges it serves, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl Primary {
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }
}

/// A slot on its way from one shard to another: begun by
/// [`RedisCluster::begin_migration`], ended by
/// [`RedisCluster::finish_migration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub slot: u16,
    pub from: usize,
    pub to: usize,
}

/// One node: its process and its cluster node ID (which survives restarts:
/// it is in `nodes.conf`).
#[derive(Debug)]
struct Node {
    server: RedisServer,
    id: String,
}

/// The nodes of one shard, as indexes into [`RedisCluster::nodes`].
#[derive(Debug, Clone)]
struct Shard {
    primary: usize,
    replicas: Vec<usize>,
}

/// A running Redis Cluster of local `redis-server` processes.
#[derive(Debug)]
pub struct RedisCluster {
    name: String,
    dir: PathBuf,
    nodes: Vec<Node>,
    shards: Vec<Shard>,
    /// Shards whose failover was begun and not finished.
    lagging: Vec<usize>,
}

/// The options every node runs with.
fn node_options() -> Options {
    Options::new().cluster(NODE_TIMEOUT).args(&[
        "--cluster-replica-no-failover",
        "yes",
        // A full sync straight away, into memory, never through a file
        // that a later restart would load.
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
        "--repl-diskless-load",
        "swapdb",
    ])
}

/// One command on a fresh connection to the node on `port`, with timeouts
/// so a frozen node cannot hang the caller, yet long enough for a node on
/// a busy machine (a fresh connection's handshake took over 500ms there).
fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, ClusterError> {
    let fail = |error: String| ClusterError::Command {
        port,
        command: command_name(cmd),
        error,
    };
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .map_err(|e| fail(e.to_string()))?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .map_err(|e| fail(e.to_string()))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .and_then(|()| conn.set_write_timeout(Some(Duration::from_secs(5))))
        .map_err(|e| fail(e.to_string()))?;
    cmd.query(&mut conn).map_err(|e| fail(e.to_string()))
}

/// The first two words of a command (`CLUSTER SETSLOT`), for errors.
fn command_name(cmd: &redis::Cmd) -> String {
    cmd.args_iter()
        .take(2)
        .filter_map(|a| match a {
            redis::Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn cluster_cmd(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("CLUSTER");
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// Polls `check` every 20 ms until it returns `Ok(Some(_))`, or fails with
/// its last `Ok(None)` reason (given through `last`) or error at `limit`.
fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut(&mut String) -> Result<Option<T>, ClusterError>,
) -> Result<T, ClusterError> {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    loop {
        match check(&mut last) {
            Ok(Some(done)) => return Ok(done),
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            return Err(ClusterError::Timeout {
                what: what.to_string(),
                limit,
                last,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl RedisCluster {
    /// Starts a cluster named `name` under `parent/name`: `primaries`
    /// shards, each a primary with `replicas` replicas, the slots split
    /// evenly (`CLUSTER ADDSLOTSRANGE`), the nodes joined (`CLUSTER MEET`),
    /// the replicas attached (`CLUSTER REPLICATE`); returns once it has
    /// settled.
    ///
    /// # Errors
    /// When a node does not start, a command fails, or the cluster does not
    /// settle within [`SETTLE_TIMEOUT`].
    pub fn start(
        parent: &Path,
        name: &str,
        primaries: usize,
        replicas: usize,
    ) -> Result<RedisCluster, ClusterError> {
        if primaries == 0 || primaries > usize::from(SLOTS) {
            return Err(ClusterError::Invalid(format!(
                "a cluster needs 1 to {SLOTS} primaries, not {primaries}"
            )));
        }
        let dir = parent.join(name);
        let options = node_options();
        let mut cluster = RedisCluster {
            name: name.to_string(),
            dir: dir.clone(),
            nodes: Vec::new(),
            shards: Vec::new(),
            lagging: Vec::new(),
        };
        for s in 0..primaries {
            let mut members = Vec::new();
            for n in 0..=replicas {
                let node_name = format!("{name}-s{}n{}", s + 1, n + 1);
                let server = RedisServer::start_opts(&dir, &node_name, &options)?;
                let id: String = query(server.port(), &cluster_cmd(&["MYID"]))?;
                members.push(cluster.nodes.len());
                cluster.nodes.push(Node { server, id });
            }
            cluster.shards.push(Shard {
                primary: members[0],
                replicas: members[1..].to_vec(),
            });
        }
        // Distinct epochs up front, as redis-cli does: no collisions to resolve.
        for (i, node) in cluster.nodes.iter().enumerate() {
            let epoch = (i + 1).to_string();
            query::<()>(
                node.server.port(),
                &cluster_cmd(&["SET-CONFIG-EPOCH", &epoch]),
            )?;
        }
        let total = u32::from(SLOTS);
        let n = u32::try_from(primaries).unwrap_or(1);
        for (s, shard) in cluster.shards.iter().enumerate() {
            let s = u32::try_from(s).unwrap_or(0);
            let (lo, hi) = (s * total / n, (s + 1) * total / n - 1);
            let port = cluster.nodes[shard.primary].server.port();
            query::<()>(
                port,
                &cluster_cmd(&["ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()]),
            )?;
        }
        let first = cluster.nodes[0].server.port();
        for node in &cluster.nodes[1..] {
            let port = node.server.port().to_string();
            let bus = node
                .server
                .cluster_port()
                .map(|p| p.to_string())
                .unwrap_or_default();
            query::<()>(first, &cluster_cmd(&["MEET", "127.0.0.1", &port, &bus]))?;
        }
        let ids: Vec<String> = cluster.nodes.iter().map(|n| n.id.clone()).collect();
        wait_for("every node to know every other", SETTLE_TIMEOUT, |last| {
            for node in &cluster.nodes {
                let view = parse_nodes(&query::<String>(
                    node.server.port(),
                    &cluster_cmd(&["NODES"]),
                )?);
                let known = ids
                    .iter()
                    .filter(|id| {
                        view.iter()
                            .any(|l| &&l.id == id && !l.has_flag("handshake"))
                    })
                    .count();
                if known < ids.len() {
                    *last = format!(
                        "port {} knows {known} of {} nodes",
                        node.server.port(),
                        ids.len()
                    );
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })?;
        for shard in &cluster.shards {
            let primary = cluster.nodes[shard.primary].id.clone();
            for &r in &shard.replicas {
                query::<()>(
                    cluster.nodes[r].server.port(),
                    &cluster_cmd(&["REPLICATE", &primary]),
                )?;
            }
        }
        cluster.wait_settled()?;
        Ok(cluster)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory every node's directory is in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of shards (primaries).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Every node's URL, replicas included: seeds for a client, which
    /// discovers the topology from any of them. Ports never change.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.server.url()).collect()
    }

    /// Every node's port, replicas included.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.server.port()).collect()
    }

    /// The port of shard `shard`'s primary, as this handle placed it (the
    /// cluster itself is asked by [`RedisCluster::primaries`]).
    ///
    /// # Panics
    /// When there is no such shard.
    pub fn primary_port(&self, shard: usize) -> u16 {
        self.nodes[self.shards[shard].primary].server.port()
    }

    /// The node ID of shard `shard`'s primary.
    ///
    /// # Panics
    /// When there is no such shard.
    pub fn primary_id(&self, shard: usize) -> &str {
        &self.nodes[self.shards[shard].primary].id
    }

    /// The ports of shard `shard`'s replicas.
    ///
    /// # Panics
    /// When there is no such shard.
    pub fn replica_ports(&self, shard: usize) -> Vec<u16> {
        self.shards[shard]
            .replicas
            .iter()
            .map(|&r| self.nodes[r].server.port())
            .collect()
    }

    /// The shard a node ID belongs to.
    fn shard_of_id(&self, id: &str) -> Option<usize> {
        let node = self.nodes.iter().position(|n| n.id == id)?;
        self.shards
            .iter()
            .position(|s| s.primary == node || s.replicas.contains(&node))
    }

    /// Nodes that run and are not frozen.
    fn live(&self) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(|n| n.server.pid().is_some() && !n.server.is_frozen())
    }

    /// The cluster's view of its primaries, from the first live node that
    /// answers `CLUSTER NODES`, in shard order.
    ///
    /// # Errors
    /// When no node answers.
    pub fn primaries(&self) -> Result<Vec<Primary>, ClusterError> {
        let mut last = None;
        for node in self.live() {
            match query::<String>(node.server.port(), &cluster_cmd(&["NODES"])) {
                Ok(text) => {
                    let mut out: Vec<Primary> = parse_nodes(&text)
                        .into_iter()
                        .filter(NodeLine::serves_slots)
                        .filter_map(|l| {
                            Some(Primary {
                                shard: self.shard_of_id(&l.id)?,
                                port: l.port,
                                node_id: l.id,
                                slots: l.slots,
                            })
                        })
                        .collect();
                    out.sort_by_key(|p| p.shard);
                    return Ok(out);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ClusterError::Invalid("no node is running".into())))
    }

    /// The shard whose primary serves `slot` now.
    ///
    /// # Errors
    /// When no node answers, or no primary serves the slot.
    pub fn shard_of_slot(&self, slot: u16) -> Result<usize, ClusterError> {
        self.primaries()?
            .into_iter()
            .find(|p| p.owns(slot))
            .map(|p| p.shard)
            .ok_or_else(|| ClusterError::Invalid(format!("no primary serves slot {slot}")))
    }

    /// The shard whose primary serves `key` now (its slot from
    /// [`redlock_wire::keys::key_slot`], hash tags honoured).
    ///
    /// # Errors
    /// As [`RedisCluster::shard_of_slot`].
    pub fn shard_of_key(&self, key: &[u8]) -> Result<usize, ClusterError> {
        self.shard_of_slot(key_slot(key))
    }

    /// Waits until the cluster has settled: every live node says
    /// `cluster_state:ok`, names the same primary for every one of the
    /// 16384 slots, and that primary is the one this handle placed; every
    /// live replica follows its shard's primary with its link up and in
    /// sync with the primary's offset read first.
    ///
    /// # Errors
    /// When that does not happen within [`SETTLE_TIMEOUT`], with the last
    /// state seen.
    pub fn wait_settled(&self) -> Result<(), ClusterError> {
        let primaries: Vec<&str> = self
            .shards
            .iter()
            .map(|s| self.nodes[s.primary].id.as_str())
            .collect();
        wait_for(
            &format!("cluster {} to settle", self.name),
            SETTLE_TIMEOUT,
            |last| {
                let mut agreed: Option<Vec<(u16, u16, String)>> = None;
                for node in self.live() {
                    let port = node.server.port();
                    let info: String = query(port, &cluster_cmd(&["INFO"]))?;
                    let state = info_field(&info, "cluster_state").unwrap_or("?");
                    if state != "ok" {
                        *last = format!("port {port}: cluster_state {state}");
                        return Ok(None);
                    }
                    let map = slot_map(&parse_nodes(&query::<String>(
                        port,
                        &cluster_cmd(&["NODES"]),
                    )?));
                    if covered(&map) != u32::from(SLOTS) {
                        *last = format!("port {port} sees {} slots served", covered(&map));
                        return Ok(None);
                    }
                    if let Some((lo, _, id)) = map
                        .iter()
                        .find(|(_, _, id)| !primaries.contains(&id.as_str()))
                    {
                        *last = format!("port {port} sees slot {lo} on {id}, not a primary here");
                        return Ok(None);
                    }
                    match &agreed {
                        Some(first) if first != &map => {
                            *last = format!("port {port} disagrees on the slot map");
                            return Ok(None);
                        }
                        Some(_) => {}
                        None => agreed = Some(map),
                    }
                }
                for shard in &self.shards {
                    let primary = &self.nodes[shard.primary].server;
                    for &r in &shard.replicas {
                        let replica = &self.nodes[r].server;
                        if replica.pid().is_none() || replica.is_frozen() {
                            continue;
                        }
                        if let Err(why) = replica_in_sync(primary.port(), replica.port())? {
                            *last = why;
                            return Ok(None);
                        }
                    }
                }
                Ok(Some(()))
            },
        )
    }

    /// Every node's log, for a failure report.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            out.push_str(&format!(
                "--- {} (port {}) ---\n{}\n",
                node.server.name(),
                node.server.port(),
                node.server.log()
            ));
        }
        out
    }
}

/// `Ok(Ok(()))` when the replica on `replica` follows the primary on
/// `primary` with its link up and has processed at least the offset the
/// primary reported just before; `Ok(Err(why))` when not yet.
fn replica_in_sync(primary: u16, replica: u16) -> Result<Result<(), String>, ClusterError> {
    let mut info = redis::cmd("INFO");
    info.arg("replication");
    let wanted: u64 = info_field(&query::<String>(primary, &info)?, "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let text: String = query(replica, &info)?;
    let role = info_field(&text, "role").unwrap_or("?");
    let following = info_field(&text, "master_port").and_then(|p| p.parse::<u16>().ok());
    let link = info_field(&text, "master_link_status").unwrap_or("?");
    let done: u64 = info_field(&text, "slave_repl_offset")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok(
        if role == "slave" && following == Some(primary) && link == "up" && done >= wanted {
            Ok(())
        } else {
            Err(format!(
                "replica on port {replica}: role {role}, following {following:?} (wanted {primary}), \
                 link {link}, offset {done} of {wanted}"
            ))
        },
    )
}

/// Slot ranges per shard index, for tests and reports: `{shard: [(lo, hi)]}`.
pub fn slots_by_shard(primaries: &[Primary]) -> BTreeMap<usize, Vec<(u16, u16)>> {
    primaries
        .iter()
        .map(|p| (p.shard, p.slots.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn set(port: u16, key: &str, value: &str) -> Result<(), ClusterError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(value);
        query(port, &cmd)
    }

    pub(super) fn get(port: u16, key: &str) -> Result<Option<String>, ClusterError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        query(port, &cmd)
    }

    pub(super) fn start(dir: &Path) -> RedisCluster {
        RedisCluster::start(dir, "c1", 3, 1).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn cluster_nodes_lines_are_parsed() {
        let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922 [10923->-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 10923
6ec23923021cf3ffec47632106199cb7f496ce01 :0@0 master,fail,noaddr - 1426238316232 1426238316232 5 disconnected
";
        let lines = parse_nodes(text);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].port, 30004);
        assert_eq!(
            lines[0].primary.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert!(!lines[0].serves_slots());
        assert_eq!(
            lines[1].slots,
            vec![(5461, 10922)],
            "a migrating slot is left out"
        );
        assert_eq!(lines[2].addr, "127.0.0.1:30001");
        assert!(lines[2].has_flag("myself"));
        assert_eq!(lines[2].slots, vec![(0, 5460), (10923, 10923)]);
        assert!(!lines[3].serves_slots());
        let map = slot_map(&lines);
        assert_eq!(covered(&map), 5461 + 5462 + 1);
    }

    /// A real 3-primary cluster: every slot served once, a key lives on the
    /// shard that owns its slot (the others redirect); a slot migrated in
    /// two halves and in one go takes its key along.
    #[test]
    fn a_real_cluster_serves_every_slot_and_migrates_one_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let mut cluster = start(dir.path());
        let primaries = cluster.primaries().unwrap();
        assert_eq!(primaries.len(), 3);
        let by_shard = slots_by_shard(&primaries);
        assert_eq!(by_shard[&0], vec![(0, 5460)]);
        assert_eq!(by_shard[&1], vec![(5461, 10921)]);
        assert_eq!(by_shard[&2], vec![(10922, 16383)]);
        assert_eq!(cluster.seeds().len(), 6);
        for p in &primaries {
            assert_eq!(p.port, cluster.primary_port(p.shard));
            assert_eq!(p.node_id, cluster.primary_id(p.shard));
        }

        // "foo" is in slot 12182: shard 2.
        let owner = cluster.shard_of_key(b"foo").unwrap();
        assert_eq!(owner, 2);
        set(cluster.primary_port(owner), "foo", "1").unwrap();
        let elsewhere = get(cluster.primary_port(0), "foo").unwrap_err().to_string();
        assert!(elsewhere.to_lowercase().contains("moved"), "{elsewhere}");

        // In two halves: mid-way the source still has the key and answers
        // ASK for keys it does not have.
        let slot = key_slot(b"foo");
        let migration = cluster.begin_migration(slot, 0).unwrap();
        assert_eq!(
            get(cluster.primary_port(2), "foo").unwrap().as_deref(),
            Some("1")
        );
        let ask = get(cluster.primary_port(2), "{foo}absent")
            .unwrap_err()
            .to_string();
        assert!(ask.to_lowercase().contains("ask"), "{ask}");
        cluster.finish_migration(migration).unwrap();
        assert_eq!(cluster.shard_of_key(b"foo").unwrap(), 0);
        assert_eq!(
            get(cluster.primary_port(0), "foo").unwrap().as_deref(),
            Some("1")
        );
        let moved = get(cluster.primary_port(2), "foo").unwrap_err().to_string();
        assert!(moved.to_lowercase().contains("moved"), "{moved}");

        // In one go, to a third shard.
        cluster.migrate_slot(slot, 1).unwrap();
        assert_eq!(cluster.shard_of_key(b"foo").unwrap(), 1);
        assert_eq!(
            get(cluster.primary_port(1), "foo").unwrap().as_deref(),
            Some("1")
        );
        assert!(cluster.migrate_slot(slot, 1).is_err(), "already there");
    }
}
