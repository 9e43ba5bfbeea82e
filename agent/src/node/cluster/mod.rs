//! A master given as a Redis Cluster: one Redlock master whose keys are
//! spread over the cluster's shards by hash slot.
//!
//! ## Safety, per slot
//! Every vote and extension runs in one script with its slot's marker,
//! `<key_prefix> incarnation {<tag>}` (the tag lands in the slot; see
//! `redlock_wire::keys::slot_key`), and counts only if the marker holds the
//! cluster node ID (`CLUSTER MYID`) of the very node running the script
//! (see [`conn::BATCH`]). That one check, atomic with the write, catches:
//! - a shard restarted empty: the marker is gone with the locks;
//! - a failover: the promoted replica has a copy of the marker that names
//!   the old primary, and may lack the last locks (replication is
//!   asynchronous);
//! - a slot migrated to another shard: the marker moved with the slot's
//!   keys and names the old owner. During the migration a script runs only
//!   where all its keys are (else the cluster answers `ASK` or `TRYAGAIN`),
//!   so a vote never reads a marker without the lock key beside it.
//!
//! The slot is then quarantined alone ([`slots`]): this agent writes a
//! witness in it, waits `max_ttl + delayed_restart.extra`, and rewrites the
//! marker with the serving node's ID only if the witness is still there and
//! was written by that same node ([`readmit`]). Every other slot keeps
//! voting.
//!
//! A shard restarted with its data (a new `run_id` on the same node ID) or
//! evicting keys is seen by the health probe ([`topology`]), which deletes
//! the markers of the shard's slots: the next vote in each quarantines it.
//! A shard that lost its keys with no such sign (`FLUSHALL`) is seen by the
//! probe too: it reads one slot's marker per shard every time
//! ([`markers`]), and sweeps a shard found without it, so every slot out is
//! quarantined (and counted by readiness) without waiting for votes.
//!
//! ## Layout
//! Here: the cluster client, a cluster master's own parts
//! ([`ClusterPart`]) and its connections; [`topology`]: `CLUSTER SHARDS`
//! and each primary's `INFO`, read by the health probe; [`slots`]: each
//! slot trusted or in quarantine; [`markers`]: the markers read by the
//! probe, all at first sight, one per shard after; [`readmit`]: the
//! witnesses and readmission; [`scan`]: `SCAN` shard by shard
//! and the per-slot fencing counters; [`sweep`]: the scripts that do one
//! thing for many slots of a shard in one call.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use redlock_wire::keys::key_slot;

use super::{conn, Conn, Node};
use crate::redlock::master::NodeError;

pub mod markers;
pub mod readmit;
pub mod scan;
pub mod slots;
pub mod sweep;
pub mod topology;

pub use scan::{shard_cursor, split_cursor};
pub use topology::{parse_shards, LostSlots, Shard};

use slots::Slots;

/// A cluster master's own parts: its client, its slots, its shards.
pub struct ClusterPart {
    client: ClusterClient,
    pub(super) slots: std::sync::Mutex<Slots>,
    shards: std::sync::Mutex<Vec<Shard>>,
    /// Lock calls to this cluster that failed in a row (timeouts, lost
    /// connections): with every primary answering the probe, the lock
    /// connection itself is stuck, and the health task replaces it.
    lock_failures: std::sync::atomic::AtomicU32,
    /// Probes in a row in which some primary did not answer: the probe's
    /// own connection is opened afresh after a few.
    probe_misses: std::sync::atomic::AtomicU32,
    /// This agent's witness keys are `<key_prefix><id> quarantine witness
    /// {<tag>}`: one name per agent and slot.
    witness_id: String,
    /// Every slot's marker was read once (at first sight).
    markers_read: std::sync::atomic::AtomicBool,
    /// Probes that sampled one marker per shard since: turns the slot
    /// sampled over each shard's slots (see [`markers`]).
    samples: std::sync::atomic::AtomicUsize,
    /// Node IDs of primaries found without a marker whose sweep did not
    /// read every slot: swept again at the next probe.
    to_sweep: std::sync::Mutex<Vec<String>>,
    /// The health task's own connection, bounded by the probe timeout, so
    /// its sweeps over thousands of slots neither time out at the lock
    /// path's bound nor queue ahead of lock commands.
    probe_conn: std::sync::Mutex<Option<Conn>>,
}

impl std::fmt::Debug for ClusterPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPart")
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

impl ClusterPart {
    pub fn new(client: ClusterClient) -> ClusterPart {
        ClusterPart {
            client,
            slots: std::sync::Mutex::new(Slots::new()),
            shards: std::sync::Mutex::new(Vec::new()),
            witness_id: crate::redlock::token::random_id(),
            markers_read: std::sync::atomic::AtomicBool::new(false),
            samples: std::sync::atomic::AtomicUsize::new(0),
            to_sweep: std::sync::Mutex::new(Vec::new()),
            probe_conn: std::sync::Mutex::new(None),
            lock_failures: std::sync::atomic::AtomicU32::new(0),
            probe_misses: std::sync::atomic::AtomicU32::new(0),
        }
    }

    pub(super) async fn connect(
        &self,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> redis::RedisResult<ClusterConnection> {
        let config = ClusterConfig::new()
            .set_connection_timeout(connect_timeout)
            .set_response_timeout(response_timeout);
        self.client.get_async_connection_with_config(config).await
    }
}

/// The cluster client for `seeds`, with retries short enough that a
/// request stays within the node timeout (redirections and `TRYAGAIN`
/// during a slot migration are retried, a few times, quickly).
///
/// # Errors
/// When the client refuses the seeds.
pub fn client(
    seeds: Vec<redis::ConnectionInfo>,
    certs: Option<redis::TlsCertificates>,
) -> redis::RedisResult<ClusterClient> {
    let mut builder = redis::cluster::ClusterClientBuilder::new(seeds)
        .retries(3)
        .min_retry_wait(2)
        .max_retry_wait(20);
    if let Some(certs) = certs {
        builder = builder.certs(certs);
    }
    builder.build()
}

impl Node {
    fn part(&self) -> Option<&ClusterPart> {
        self.cluster.as_ref()
    }

    /// The health task's connection to this cluster (see
    /// [`ClusterPart`]), opened on first use.
    ///
    /// # Errors
    /// When the cluster cannot be reached.
    pub(crate) async fn probe_connection(&self) -> Result<Conn, NodeError> {
        let Some(part) = self.part() else {
            return Err(NodeError::NotConnected);
        };
        if let Some(conn) = part
            .probe_conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Ok(conn);
        }
        let conn = self
            .connect(self.probe_timeout(), &[&*conn::BATCH], "probe")
            .await?;
        *part.probe_conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Counts a lock call to this cluster that failed, or clears the count
    /// after one that was answered.
    pub(crate) fn cluster_lock_result(&self, answered: bool) {
        if let Some(part) = self.part() {
            if answered {
                part.lock_failures
                    .store(0, std::sync::atomic::Ordering::Relaxed);
            } else {
                part.lock_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// After a probe: whether the lock connection must be replaced. The
    /// cluster client repairs a connection to a restarted shard in the
    /// background, but that repair has been seen to stall for good while
    /// the cluster itself was healthy; a fresh connection works at once.
    /// So when every primary answered this probe and lock calls kept
    /// failing (`LOCK_FAILURES_BEFORE_RECONNECT` in a row), the connection
    /// is at fault, not the cluster. Likewise the probe's own connection is
    /// dropped after a few probes in a row with a primary silent, so a
    /// stuck probe connection cannot hide a healthy shard.
    pub(crate) fn stuck_connections(&self) -> bool {
        let Some(part) = self.part() else {
            return false;
        };
        let all_up = {
            let shards = part.shards.lock().unwrap_or_else(|e| e.into_inner());
            !shards.is_empty() && shards.iter().all(|s| s.up)
        };
        use std::sync::atomic::Ordering::Relaxed;
        if all_up {
            part.probe_misses.store(0, Relaxed);
        } else if part.probe_misses.fetch_add(1, Relaxed) + 1 >= PROBE_MISSES_BEFORE_RECONNECT {
            part.probe_misses.store(0, Relaxed);
            self.drop_probe_connection();
        }
        if all_up && part.lock_failures.load(Relaxed) >= LOCK_FAILURES_BEFORE_RECONNECT {
            part.lock_failures.store(0, Relaxed);
            return true;
        }
        false
    }

    /// Forgets the health task's connection after it failed.
    pub(crate) fn drop_probe_connection(&self) {
        if let Some(part) = self.part() {
            *part.probe_conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

/// Failed lock calls in a row, with every primary answering, after which
/// the lock connection is replaced (see [`Node::stuck_connections`]).
const LOCK_FAILURES_BEFORE_RECONNECT: u32 = 3;

/// Probes in a row with a primary silent after which the probe's own
/// connection is opened afresh.
const PROBE_MISSES_BEFORE_RECONNECT: u32 = 3;

/// `items` grouped by the hash slot of each one's `key`, in first-seen
/// order: a script's keys must share a slot, so a cluster gets one call per
/// group.
pub(crate) fn by_slot<T>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> &str,
) -> Vec<(u16, Vec<T>)> {
    let mut groups: Vec<(u16, Vec<T>)> = Vec::new();
    for item in items {
        let slot = key_slot(key(&item).as_bytes());
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(item),
            None => groups.push((slot, vec![item])),
        }
    }
    groups
}

/// A cluster connection that sends every command to one node, by address
/// (a primary of the last probe's shards), whatever keys the command
/// names: for the sweeps' scripts, which name their keys in `ARGV`, and
/// commands about a node rather than a key.
pub(crate) struct OnNode {
    cluster: ClusterConnection,
    route: SingleNodeRoutingInfo,
}

impl OnNode {
    pub(crate) fn new(cluster: ClusterConnection, host: String, port: u16) -> OnNode {
        OnNode {
            cluster,
            route: SingleNodeRoutingInfo::ByAddress { host, port },
        }
    }
}

/// A routed command answers a server error as a value; a query on this
/// connection makes it an error, like any other request's.
impl ConnectionLike for OnNode {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let route = RoutingInfo::SingleNode(self.route.clone());
        Box::pin(self.cluster.route_command(cmd.clone(), route))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let route = self.route.clone();
        Box::pin(
            self.cluster
                .route_pipeline(pipeline.clone(), offset, count, route),
        )
    }

    fn get_db(&self) -> i64 {
        self.cluster.get_db()
    }
}
