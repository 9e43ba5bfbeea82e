//! A master given as a Redis Cluster: one Redlock master whose keys are
//! spread over the cluster's shards by hash slot.
//!
//! ## Safety, per slot
//! Every vote and extension runs in one script with its slot's marker,
//! `<key_prefix> incarnation {<tag>}` (the tag lands in the slot; see
//! `redlock_wire::keys::slot_key`), and counts only if the marker holds the
//! cluster node ID (`CLUSTER MYID`) of the very node running the script
//! (see [`scripts::BATCH`]). That one check, atomic with the write, catches:
//! - a shard restarted empty: the marker is gone with the locks;
//! - a failover: the promoted replica has a copy of the marker that names
//!   the old primary, and may lack the last locks (replication is
//!   asynchronous);
//! - a slot migrated to another shard: the marker moved with the slot's
//!   keys and names the old owner. During the migration a script runs only
//!   where all its keys are (else the cluster answers `ASK` or `TRYAGAIN`),
//!   so a vote never reads a marker without the lock key beside it.
//!
//! The slot is then quarantined alone ([`slots`]): this agent writes
//! a witness in it, waits `max_ttl + delayed_restart.extra`, and rewrites
//! the marker with the serving node's ID only if the witness is still
//! there and was written by that same node. Every other slot keeps voting.
//!
//! A shard restarted with its data (a new `run_id` on the same node ID) or
//! evicting keys is seen by the health probe, which deletes the markers of
//! the shard's slots: the next vote in each quarantines it.

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;
use redlock_wire::keys::{key_slot, slot_key, SLOTS};

use super::conn::bounded;
#[cfg(doc)]
use super::scripts::BATCH;
use super::{info_fields, scripts, ttl_ms, Conn, Node, MARKER_SUFFIX, WITNESS_SUFFIX};
use crate::redlock::master::NodeError;
use crate::redlock::observe::Op;

pub mod slots;

use slots::Slots;

/// Script calls of one kind in flight at once to one cluster, for the
/// per-slot sweeps (16384 markers at first sight).
const SWEEP_CONCURRENCY: usize = 256;

/// One shard: a primary and the slots it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    pub host: String,
    pub port: u16,
    pub node_id: String,
    /// Inclusive slot ranges.
    pub slots: Vec<[u16; 2]>,
    pub replicas: u32,
    /// Its `run_id` and `evicted_keys` at the last probe; `None` while it
    /// did not answer.
    pub run_id: Option<String>,
    pub evicted_keys: Option<u64>,
    /// Its primary answered the last probe's `INFO`.
    pub up: bool,
}

impl Shard {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Every slot it serves.
    fn slot_list(&self) -> impl Iterator<Item = u16> + '_ {
        self.slots
            .iter()
            .flat_map(|[a, b]| *a..=(*b).min(SLOTS - 1))
    }
}

/// Slots that may have lost keys, as a probe saw it: a shard restarted
/// with its data or evicted keys, or slots now served by another node
/// than at the last probe (a failover, a migration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostSlots {
    /// The shard's address, for the log.
    pub addr: String,
    pub slots: Vec<u16>,
    pub detector: super::Detector,
}

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

    /// The shards at the last probe, with their slots out, for `/v1/nodes`.
    pub fn shards(&self) -> Vec<(Shard, usize)> {
        let Some(part) = self.part() else {
            return Vec::new();
        };
        let shards = part
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let slots = self.slots();
        shards
            .into_iter()
            .map(|shard| {
                let out = slots.as_ref().map_or(0, |s| s.out_in(&shard.slots));
                (shard, out)
            })
            .collect()
    }

    fn witness_key(&self, slot: u16) -> Option<String> {
        let part = self.part()?;
        let prefix = self.marker_key.trim_end_matches(MARKER_SUFFIX);
        Some(slot_key(
            &format!("{prefix}{}{WITNESS_SUFFIX}", part.witness_id),
            slot,
        ))
    }

    /// Reads the cluster's shards (`CLUSTER SHARDS`) and each primary's
    /// `INFO`; returns the shards whose primary restarted (a new `run_id`
    /// under the same node ID) or evicted keys since the last probe, with
    /// the detector that saw it.
    ///
    /// # Errors
    /// When no node answers `CLUSTER SHARDS` in time.
    pub(crate) async fn probe_shards(&self, conn: &Conn) -> Result<Vec<LostSlots>, NodeError> {
        let Some(part) = self.part() else {
            return Ok(Vec::new());
        };
        let value = self
            .request_on(Op::Probe, conn.clone(), |mut conn| async move {
                redis::cmd("CLUSTER")
                    .arg("SHARDS")
                    .query_async::<Value>(&mut conn)
                    .await
            })
            .await?;
        let mut shards = parse_shards(&value).ok_or_else(|| {
            NodeError::Other(format!("unexpected CLUSTER SHARDS answer: {value:?}"))
        })?;
        // CLUSTER SHARDS is Redis 7: every shard understands SET ... GET.
        self.lock().set_get = true;
        let Some(cluster) = conn.cluster() else {
            return Ok(Vec::new());
        };
        let probe_timeout = self.probe_timeout();
        let infos = futures::future::join_all(shards.iter().map(|shard| {
            let mut cluster = cluster.clone();
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: shard.host.clone(),
                port: shard.port,
            });
            async move {
                let mut cmd = redis::cmd("INFO");
                cmd.arg("server").arg("stats");
                bounded(probe_timeout, cluster.route_command(cmd, route))
                    .await
                    .ok()
                    .and_then(|v| redis::from_redis_value::<String>(v).ok())
            }
        }))
        .await;
        for (shard, info) in shards.iter_mut().zip(infos) {
            shard.up = info.is_some();
            if let Some(info) = info {
                let fields = info_fields(&info);
                shard.run_id = fields.get("run_id").cloned();
                shard.evicted_keys = fields.get("evicted_keys").and_then(|v| v.parse().ok());
            }
        }
        let mut known = part.shards.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed = Vec::new();
        let lost = |shard: &Shard, detector| LostSlots {
            addr: shard.addr(),
            slots: shard.slot_list().collect(),
            detector,
        };
        for shard in &shards {
            let Some(before) = known.iter().find(|b| b.node_id == shard.node_id) else {
                continue;
            };
            if let (Some(b), Some(n)) = (&before.run_id, &shard.run_id) {
                if b != n {
                    changed.push(lost(shard, super::Detector::RunId));
                    continue;
                }
            }
            if let (Some(b), Some(n)) = (before.evicted_keys, shard.evicted_keys) {
                if n > b {
                    changed.push(lost(shard, super::Detector::Eviction));
                }
            }
        }
        // Slots served by another node than at the last probe. Their
        // markers name the old node, so votes refuse them anyway; deleting
        // the markers also keeps a slot out should it move back (a
        // failback) before any vote saw it away.
        if !known.is_empty() {
            let mut owner: Vec<Option<&str>> = vec![None; usize::from(SLOTS)];
            for shard in known.iter() {
                for slot in shard.slot_list() {
                    owner[usize::from(slot)] = Some(shard.node_id.as_str());
                }
            }
            for shard in &shards {
                let moved: Vec<u16> = shard
                    .slot_list()
                    .filter(|slot| {
                        owner[usize::from(*slot)].is_some_and(|was| was != shard.node_id)
                    })
                    .collect();
                if !moved.is_empty() {
                    changed.push(LostSlots {
                        addr: shard.addr(),
                        slots: moved,
                        detector: super::Detector::Marker,
                    });
                }
            }
        }
        // A primary that did not answer keeps what was known of it, so its
        // restart is still seen when it answers again.
        for shard in &mut shards {
            if shard.run_id.is_none() {
                if let Some(before) = known.iter().find(|b| b.node_id == shard.node_id) {
                    shard.run_id = before.run_id.clone();
                    shard.evicted_keys = before.evicted_keys;
                }
            }
        }
        *known = shards;
        Ok(changed)
    }

    /// At first sight, reads every slot's marker: a slot whose marker is
    /// missing or names another node is quarantined at once, rather than at
    /// its first vote. With masters this process started empty, writes the
    /// markers instead. Done once; tried again at the next probe until every
    /// slot answered.
    pub(crate) async fn read_slot_markers(&self, conn: &Conn, fresh: bool) {
        let Some(part) = self.part() else { return };
        if part.markers_read.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let keys: Vec<(u16, Vec<String>)> = (0..SLOTS)
            .map(|slot| (slot, vec![slot_key(&self.marker_key, slot)]))
            .collect();
        let mode = if fresh { "write" } else { "read" };
        let answers = self.sweep(conn, &SWEEP_MARKERS, keys, &[mode]).await;
        // Slots on no known shard (a topology being changed) count as
        // unanswered: read again at the next probe.
        let mut unanswered = usize::from(SLOTS).saturating_sub(answers.len());
        let mut lost = 0;
        for (slot, answer) in answers {
            match answer {
                Ok(1) => {}
                Ok(_) => {
                    lost += 1;
                    if let Some(mut slots) = self.slots() {
                        slots.lose(slot);
                    }
                }
                Err(e) => {
                    tracing::trace!(node = %self.name, slot, error = %e, "slot marker not read");
                    unanswered += 1;
                }
            }
        }
        self.observer.quarantined_slots(self.quarantined_slots());
        if lost > 0 {
            self.lost_keys();
            self.restart_detected(super::Detector::Marker);
            tracing::warn!(
                node = %self.name,
                slots = lost,
                quarantine = ?self.quarantine,
                "cluster slots without this node's marker (a new cluster, or lost keys): quarantined"
            );
        }
        if unanswered == 0 {
            part.markers_read
                .store(true, std::sync::atomic::Ordering::Relaxed);
        } else {
            tracing::debug!(node = %self.name, unanswered, "slot markers not all read; trying again");
        }
    }

    /// Writes this agent's witness in every slot that waits for one, on the
    /// node serving it, and counts each slot's quarantine from its write.
    pub(crate) async fn write_slot_witnesses(&self, conn: &Conn) {
        let wanted: Vec<(u16, u64)> = {
            let Some(mut slots) = self.slots() else {
                return;
            };
            slots
                .need_witness()
                .into_iter()
                .map(|slot| (slot, slots.nonce()))
                .collect()
        };
        if wanted.is_empty() {
            return;
        }
        let ttl = ttl_ms(self.quarantine * 2 + Duration::from_secs(60)).to_string();
        let nonces: std::collections::HashMap<u16, u64> = wanted.iter().copied().collect();
        let keys: Vec<(u16, Vec<String>)> = wanted
            .iter()
            .map(|(slot, nonce)| {
                let witness = self.witness_key(*slot).unwrap_or_default();
                (*slot, vec![witness, nonce.to_string()])
            })
            .collect();
        let written: Vec<(u16, u64, bool)> = self
            .sweep(conn, &SWEEP_WITNESSES, keys, &[&ttl])
            .await
            .into_iter()
            .map(|(slot, answer)| (slot, nonces[&slot], matches!(answer, Ok(1))))
            .collect();
        let until = Instant::now() + self.quarantine;
        let mut failed = 0;
        if let Some(mut slots) = self.slots() {
            for (slot, nonce, ok) in written {
                if ok {
                    slots.witnessed(slot, nonce, until);
                } else {
                    failed += 1;
                }
            }
        }
        if failed > 0 {
            tracing::debug!(node = %self.name, failed, "some quarantine witnesses not written; trying again");
        }
    }

    /// Readmits the slots whose quarantine ran out, each with its fencing
    /// counter caught up to `catch_up(slot)`: the marker is rewritten with
    /// the serving node's ID only where this agent's witness is still there
    /// and was written by that node; elsewhere the slot starts over.
    pub(crate) async fn readmit_slots(&self, conn: &Conn, due: Vec<(u16, u64)>, catch_up: &[u64]) {
        let nonces: std::collections::HashMap<u16, u64> = due.iter().copied().collect();
        let keys: Vec<(u16, Vec<String>)> = due
            .iter()
            .zip(catch_up)
            .map(|((slot, nonce), counter)| {
                (
                    *slot,
                    vec![
                        slot_key(&self.marker_key, *slot),
                        self.witness_key(*slot).unwrap_or_default(),
                        slot_key(&self.fence_key, *slot),
                        nonce.to_string(),
                        counter.to_string(),
                    ],
                )
            })
            .collect();
        let results: Vec<(u16, u64, Result<i64, NodeError>)> = self
            .sweep(conn, &SWEEP_READMIT, keys, &[])
            .await
            .into_iter()
            .map(|(slot, answer)| (slot, nonces[&slot], answer))
            .collect();
        let (mut back, mut again, mut failed) = (0, 0, None);
        if let Some(mut slots) = self.slots() {
            for (slot, nonce, answer) in results {
                match answer {
                    Ok(1) => {
                        slots.readmitted(slot, nonce);
                        back += 1;
                    }
                    Ok(_) => {
                        slots.start_over(slot);
                        again += 1;
                    }
                    Err(e) => failed = Some(e),
                }
            }
            self.observer.quarantined_slots(slots.out());
        }
        if back > 0 {
            tracing::info!(node = %self.name, slots = back, "cluster slots readmitted: markers rewritten");
        }
        if let Some(error) = failed {
            tracing::debug!(node = %self.name, %error, "some cluster slots not readmitted; trying again");
        }
        if again > 0 {
            tracing::warn!(
                node = %self.name,
                slots = again,
                "cluster slots lost their witness while quarantined (lost keys again, or moved): the quarantine starts over"
            );
        }
    }

    /// Slots due for readmission now.
    pub(crate) fn due_slots(&self) -> Vec<(u16, u64)> {
        self.slots()
            .map(|s| s.due(Instant::now()))
            .unwrap_or_default()
    }

    /// This master's fencing counters for `slots` (each slot's on a
    /// cluster; the one counter, for every slot, on a single server), or
    /// for a single server's catch-up (`slots` empty) the highest of all.
    ///
    /// # Errors
    /// When the master does not answer in time or a counter is not a number.
    pub async fn read_fences(&self, slots: &[u16]) -> Result<Vec<u64>, NodeError> {
        if self.part().is_none() {
            let counter = self.read_fence().await?;
            return Ok(vec![counter; slots.len().max(1)]);
        }
        let wanted: Vec<u16> = if slots.is_empty() {
            (0..SLOTS).collect()
        } else {
            slots.to_vec()
        };
        let keys: Vec<String> = wanted
            .iter()
            .map(|slot| slot_key(&self.fence_key, *slot))
            .collect();
        let Some(conn) = self.connection() else {
            return Err(NodeError::NotConnected);
        };
        let keys: Vec<(u16, Vec<String>)> = wanted
            .iter()
            .zip(keys)
            .map(|(slot, key)| (*slot, vec![key]))
            .collect();
        let answers: std::collections::HashMap<u16, Result<i64, NodeError>> = self
            .sweep(&conn, &SWEEP_COUNTERS, keys, &[])
            .await
            .into_iter()
            .collect();
        let mut counters = Vec::with_capacity(wanted.len());
        for slot in &wanted {
            match answers.get(slot) {
                Some(Ok(counter)) => counters.push(u64::try_from(*counter).unwrap_or(0)),
                Some(Err(e)) => return Err(e.clone()),
                None => {
                    return Err(NodeError::Other(format!(
                        "slot {slot} is on no known shard"
                    )))
                }
            }
        }
        if slots.is_empty() {
            return Ok(vec![counters.into_iter().max().unwrap_or(0)]);
        }
        Ok(counters)
    }

    /// `SCAN` on shard `index` of the last probe's list (by address), for
    /// listings and the leak scan: a cluster has no scan over all its
    /// shards. `None` when there is no such shard.
    pub(crate) async fn scan_shard(
        &self,
        conn: &Conn,
        index: usize,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Option<Result<(u64, Vec<String>), NodeError>> {
        let shard = self.shard_addresses().into_iter().nth(index)?;
        let cluster = conn.cluster()?.clone();
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: shard.0,
            port: shard.1,
        });
        let started = Instant::now();
        let mut cluster = cluster;
        let result = bounded(
            self.timeout.max(Duration::from_secs(1)),
            cluster.route_command(cmd, route),
        )
        .await;
        self.observer.request(Op::Scan, started.elapsed());
        Some(
            result
                .and_then(Value::extract_error)
                .and_then(|v| Ok(redis::from_redis_value::<(u64, Vec<String>)>(v)?))
                .map_err(|e| super::classify(&e)),
        )
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
            .connect(self.probe_timeout(), &[&*scripts::BATCH])
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

    /// The primaries' addresses in a stable order (sorted).
    pub(crate) fn shard_addresses(&self) -> Vec<(String, u16)> {
        let Some(part) = self.part() else {
            return Vec::new();
        };
        let mut addrs: Vec<(String, u16)> = part
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|s| (s.host.clone(), s.port))
            .collect();
        addrs.sort();
        addrs
    }
}

impl Node {
    /// Runs a sweep script on every shard for the slots it serves, in
    /// chunks of [`SWEEP_CHUNK`] slots: `per_slot` gives each slot's
    /// arguments (the same number for every slot), `head` the arguments
    /// before them. Returns one integer answer per slot that was sent, or
    /// the chunk's error; slots on no known shard are left out (a later
    /// probe tries them again).
    async fn sweep(
        &self,
        conn: &Conn,
        script: &SweepScript,
        per_slot: Vec<(u16, Vec<String>)>,
        head: &[&str],
    ) -> Vec<(u16, Result<i64, NodeError>)> {
        let Some(cluster) = conn.cluster() else {
            return Vec::new();
        };
        let shards: Vec<Shard> = self
            .part()
            .map(|p| p.shards.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default();
        let mut owner: Vec<Option<usize>> = vec![None; usize::from(SLOTS)];
        for (index, shard) in shards.iter().enumerate() {
            for slot in shard.slot_list() {
                owner[usize::from(slot)] = Some(index);
            }
        }
        let mut groups: Vec<Vec<(u16, Vec<String>)>> = vec![Vec::new(); shards.len()];
        for (slot, args) in per_slot {
            if let Some(index) = owner[usize::from(slot)] {
                groups[index].push((slot, args));
            }
        }
        let mut calls = Vec::new();
        for (index, group) in groups.into_iter().enumerate() {
            for chunk in group.chunks(SWEEP_CHUNK) {
                calls.push((index, chunk.to_vec()));
            }
        }
        let bound = self.probe_timeout();
        let shards = &shards;
        stream::iter(calls)
            .map(|(index, chunk)| {
                let mut cluster = cluster.clone();
                async move {
                    let shard = &shards[index];
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: shard.host.clone(),
                        port: shard.port,
                    });
                    let mut args: Vec<String> = head.iter().map(|a| a.to_string()).collect();
                    for (_, slot_args) in &chunk {
                        args.extend(slot_args.iter().cloned());
                    }
                    let answer = bounded(bound, script.run(&mut cluster, route, &args)).await;
                    match answer {
                        Ok(Value::Array(items)) if items.len() == chunk.len() => chunk
                            .iter()
                            .zip(items)
                            .map(|((slot, _), item)| {
                                let n = match item {
                                    Value::Int(n) => Ok(n),
                                    other => Err(NodeError::Other(format!(
                                        "unexpected sweep answer {other:?}"
                                    ))),
                                };
                                (*slot, n)
                            })
                            .collect::<Vec<_>>(),
                        Ok(other) => {
                            let error =
                                NodeError::Other(format!("unexpected sweep answer {other:?}"));
                            chunk
                                .iter()
                                .map(|(slot, _)| (*slot, Err(error.clone())))
                                .collect()
                        }
                        Err(e) => {
                            let error = super::classify(&e);
                            chunk
                                .iter()
                                .map(|(slot, _)| (*slot, Err(error.clone())))
                                .collect()
                        }
                    }
                }
            })
            .buffer_unordered(SWEEP_CONCURRENCY)
            .flat_map(stream::iter)
            .collect()
            .await
    }
}

/// Failed lock calls in a row, with every primary answering, after which
/// the lock connection is replaced (see [`Node::stuck_connections`]).
const LOCK_FAILURES_BEFORE_RECONNECT: u32 = 3;

/// Probes in a row with a primary silent after which the probe's own
/// connection is opened afresh.
const PROBE_MISSES_BEFORE_RECONNECT: u32 = 3;

/// Slots per sweep call: one call holds its shard for a few milliseconds
/// at most.
const SWEEP_CHUNK: usize = 1024;

/// A script of the per-slot sweeps, run on one shard for many of its slots
/// at once. It names its keys in `ARGV` (a script's declared keys must
/// share a slot) and carries the `allow-cross-slot-keys` flag; Redis runs
/// it only on keys local to the node, so a chunk whose slots moved fails
/// whole and is tried again after the next topology read. Each slot's part
/// is atomic, as every script is; so is the chunk.
pub struct SweepScript {
    code: &'static str,
    hash: std::sync::OnceLock<String>,
}

impl SweepScript {
    const fn new(code: &'static str) -> SweepScript {
        SweepScript {
            code,
            hash: std::sync::OnceLock::new(),
        }
    }

    /// The script's SHA1, as `EVALSHA` names it.
    fn hash(&self) -> &str {
        self.hash
            .get_or_init(|| redis::Script::new(self.code).get_hash().to_string())
    }

    /// `EVALSHA` on the node of `route`, loading the script there first if
    /// it does not know it.
    async fn run(
        &self,
        cluster: &mut ClusterConnection,
        route: RoutingInfo,
        args: &[String],
    ) -> redis::RedisResult<Value> {
        let mut call = redis::cmd("EVALSHA");
        call.arg(self.hash()).arg(0).arg(args);
        // A routed command answers a server error as a value: made an
        // error here, like any other request's.
        let first = cluster
            .route_command(call.clone(), route.clone())
            .await
            .and_then(Value::extract_error);
        match first {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(self.code);
                cluster
                    .route_command(load, route.clone())
                    .await
                    .and_then(Value::extract_error)?;
                cluster
                    .route_command(call, route)
                    .await
                    .and_then(Value::extract_error)
            }
            other => other,
        }
    }
}

/// `ARGV[1]` "read" or "write", then one marker per slot: 1 where the
/// marker holds this node's ID (after writing it, for "write": clusters
/// this process started empty), else 0.
static SWEEP_MARKERS: SweepScript = SweepScript::new(SWEEP_MARKERS_CODE);
const SWEEP_MARKERS_CODE: &str = r#"#!lua flags=allow-cross-slot-keys
local id = redis.call("cluster", "myid")
local evicted = string.match(tostring(redis.pcall("info", "stats")), "evicted_keys:(%d+)")
local out = {}
for i = 2, #ARGV do
  if ARGV[1] == "write" then redis.call("set", ARGV[i], evicted and id .. " e=" .. evicted or id) end
  local found = redis.call("get", ARGV[i])
  out[i - 1] = found and string.match(found, "^%S+") == id and 1 or 0
end
return out"#;

/// `ARGV[1]` the TTL in ms, then per slot its witness key and nonce: writes
/// each witness as this node's ID and the nonce. 1 per slot.
static SWEEP_WITNESSES: SweepScript = SweepScript::new(SWEEP_WITNESSES_CODE);
const SWEEP_WITNESSES_CODE: &str = r#"#!lua flags=allow-cross-slot-keys
local id = redis.call("cluster", "myid")
local out = {}
for i = 2, #ARGV, 2 do
  redis.call("set", ARGV[i], id .. ":" .. ARGV[i + 1], "PX", ARGV[1])
  out[#out + 1] = 1
end
return out"#;

/// Per slot: marker, witness, fencing counter, nonce, catch-up. Each slot
/// as [`scripts::READMIT_SLOT`]: 1 readmitted, 0 starts over.
static SWEEP_READMIT: SweepScript = SweepScript::new(SWEEP_READMIT_CODE);
const SWEEP_READMIT_CODE: &str = r#"#!lua flags=allow-cross-slot-keys
local id = redis.call("cluster", "myid")
local evicted = string.match(tostring(redis.pcall("info", "stats")), "evicted_keys:(%d+)")
local out = {}
for i = 1, #ARGV, 5 do
  local marker, witness, fence = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local found = redis.call("get", marker)
  local marked = found and string.match(found, "^%S+") == id
  local answer = 1
  if redis.call("get", witness) == id .. ":" .. ARGV[i + 3] then
    redis.call("del", witness)
  elseif not marked then
    answer = 0
  end
  if answer == 1 then
    local current = tonumber(redis.call("get", fence) or "0") or 0
    if current < tonumber(ARGV[i + 4]) then redis.call("set", fence, ARGV[i + 4]) end
    if not marked then redis.call("set", marker, evicted and id .. " e=" .. evicted or id) end
  end
  out[#out + 1] = answer
end
return out"#;

/// One key per slot, deleted. 1 per slot.
static SWEEP_DELETE: SweepScript = SweepScript::new(SWEEP_DELETE_CODE);
const SWEEP_DELETE_CODE: &str = r#"#!lua flags=allow-cross-slot-keys
local out = {}
for i = 1, #ARGV do
  redis.call("del", ARGV[i])
  out[i] = 1
end
return out"#;

/// One fencing counter per slot: its value (0 when missing). A counter is
/// below 2^53, so Lua's number keeps it exact.
static SWEEP_COUNTERS: SweepScript = SweepScript::new(SWEEP_COUNTERS_CODE);
const SWEEP_COUNTERS_CODE: &str = r#"#!lua flags=allow-cross-slot-keys
local out = {}
for i = 1, #ARGV do
  out[i] = tonumber(redis.call("get", ARGV[i]) or "0") or 0
end
return out"#;

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

/// A cursor over all shards: the shard's index in the high 16 bits, its own
/// `SCAN` cursor in the low 48 (Redis cursors stay far below 2^48).
pub fn shard_cursor(index: usize, cursor: u64) -> u64 {
    ((index as u64) << 48) | (cursor & ((1 << 48) - 1))
}

/// The shard index and shard cursor of a cursor from [`shard_cursor`].
pub fn split_cursor(cursor: u64) -> (usize, u64) {
    ((cursor >> 48) as usize, cursor & ((1 << 48) - 1))
}

/// A map or a flat key/value array (RESP3 or RESP2) as pairs.
fn pairs(value: &Value) -> Vec<(String, &Value)> {
    match value {
        Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| text(k).map(|k| (k, v)))
            .collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => text(k).map(|k| (k, v)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The primaries of a `CLUSTER SHARDS` answer, with their slots. `None`
/// when the answer is not shaped as Redis 7 sends it.
pub fn parse_shards(value: &Value) -> Option<Vec<Shard>> {
    let Value::Array(items) = value else {
        return None;
    };
    let mut shards = Vec::new();
    for item in items {
        let fields = pairs(item);
        let slots: Vec<u16> = match fields.iter().find(|(k, _)| k == "slots")?.1 {
            Value::Array(bounds) => bounds
                .iter()
                .filter_map(|b| text(b)?.parse().ok())
                .collect(),
            _ => return None,
        };
        let Value::Array(nodes) = fields.iter().find(|(k, _)| k == "nodes")?.1 else {
            return None;
        };
        let nodes: Vec<Vec<(String, String)>> = nodes
            .iter()
            .map(|n| {
                pairs(n)
                    .into_iter()
                    .filter_map(|(k, v)| text(v).map(|v| (k, v)))
                    .collect()
            })
            .collect();
        let get = |node: &[(String, String)], key: &str| {
            node.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        };
        let Some(primary) = nodes
            .iter()
            .find(|n| get(n, "role").as_deref() == Some("master"))
        else {
            continue;
        };
        if slots.is_empty() {
            continue;
        }
        let host = get(primary, "ip")
            .or_else(|| get(primary, "endpoint"))
            .unwrap_or_default();
        let port = get(primary, "port")
            .or_else(|| get(primary, "tls-port"))
            .and_then(|p| p.parse().ok())?;
        shards.push(Shard {
            host,
            port,
            node_id: get(primary, "id").unwrap_or_default(),
            slots: slots
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| [c[0], c[1]])
                .collect(),
            replicas: u32::try_from(nodes.len().saturating_sub(1)).unwrap_or(u32::MAX),
            run_id: None,
            evicted_keys: None,
            up: false,
        });
    }
    Some(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn cluster_shards_answer_gives_primaries_and_slots() {
        let node = |id: &str, port: i64, role: &str| {
            Value::Array(vec![
                bulk("id"),
                bulk(id),
                bulk("port"),
                Value::Int(port),
                bulk("ip"),
                bulk("127.0.0.1"),
                bulk("role"),
                bulk(role),
                bulk("health"),
                bulk("online"),
            ])
        };
        let answer = Value::Array(vec![Value::Array(vec![
            bulk("slots"),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(100),
                Value::Int(200),
                Value::Int(5460),
            ]),
            bulk("nodes"),
            Value::Array(vec![node("r", 7002, "replica"), node("p", 7001, "master")]),
        ])]);
        let shards = parse_shards(&answer).unwrap();
        assert_eq!(shards.len(), 1);
        assert_eq!(shards[0].addr(), "127.0.0.1:7001");
        assert_eq!(shards[0].node_id, "p");
        assert_eq!(shards[0].slots, vec![[0, 100], [200, 5460]]);
        assert_eq!(shards[0].replicas, 1);
    }

    #[test]
    fn shard_cursors_round_trip() {
        assert_eq!(split_cursor(shard_cursor(2, 12345)), (2, 12345));
        assert_eq!(split_cursor(0), (0, 0));
    }
}
