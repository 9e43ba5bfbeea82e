//! The faults of a [`RedisCluster`] a Redlock master made of a cluster must
//! survive, one shard at a time: a restart empty, a lagged failover, a slot
//! migration; and the whole cluster frozen.

use std::path::Path;

use super::{
    cluster_cmd, info_field, query, replica_in_sync, wait_for, ClusterError, Migration,
    RedisCluster, SETTLE_TIMEOUT,
};

/// Keys moved per `MIGRATE` while a slot migrates.
const MIGRATE_BATCH: usize = 100;

/// Removes the data files a restart would load, so it comes back empty.
fn remove_data_files(dir: &Path) -> Result<(), ClusterError> {
    for name in ["dump.rdb", "appendonlydir", "appendonly.aof"] {
        let path = dir.join(name);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

impl RedisCluster {
    /// Restarts shard `shard`'s primary on its port with its `nodes.conf`
    /// and no data: it rejoins as the primary of its slots with none of
    /// their keys (a shard that lost its keys; its replicas resync and lose
    /// them too). Returns once the cluster has settled.
    ///
    /// # Errors
    /// When the node does not come back or the cluster does not settle.
    pub fn restart_empty(&mut self, shard: usize) -> Result<(), ClusterError> {
        self.check_shard(shard)?;
        let node = &mut self.nodes[self.shards[shard].primary].server;
        node.kill();
        remove_data_files(node.dir())?;
        node.restart()?;
        self.wait_settled()
    }

    /// Begins a lagged failover of shard `shard`: once its first replica
    /// is in sync, freezes it (SIGSTOP) and cuts its replication link
    /// (`CLIENT KILL TYPE replica` on the primary; on loopback every write
    /// sent would otherwise wait in the frozen replica's socket and arrive
    /// at the thaw). Writes the caller makes to the shard from now on
    /// never reach the replica; [`RedisCluster::finish_lagged_failover`]
    /// promotes it.
    ///
    /// # Errors
    /// When the shard has no replica, is already lagging, or the replica
    /// is not in sync in time.
    pub fn begin_lagged_failover(&mut self, shard: usize) -> Result<(), ClusterError> {
        self.check_shard(shard)?;
        if self.lagging.contains(&shard) {
            return Err(ClusterError::Invalid(format!(
                "shard {shard} of {} is already failing over",
                self.name
            )));
        }
        let Some(&r) = self.shards[shard].replicas.first() else {
            return Err(ClusterError::Invalid(format!(
                "shard {shard} of {} has no replica",
                self.name
            )));
        };
        let primary = self.primary_port(shard);
        let replica = self.nodes[r].server.port();
        wait_for(
            &format!("the replica on port {replica} to be in sync"),
            SETTLE_TIMEOUT,
            |last| {
                Ok(match replica_in_sync(primary, replica)? {
                    Ok(()) => Some(()),
                    Err(why) => {
                        *last = why;
                        None
                    }
                })
            },
        )?;
        self.nodes[r].server.freeze()?;
        let mut kill = redis::cmd("CLIENT");
        kill.arg("KILL").arg("TYPE").arg("replica");
        if let Err(e) = query::<i64>(primary, &kill) {
            let _ = self.nodes[r].server.thaw();
            return Err(e);
        }
        self.lagging.push(shard);
        Ok(())
    }

    /// Ends the lagged failover begun on shard `shard`: kills the primary
    /// (SIGKILL), thaws the replica and makes it take the slots over
    /// (`CLUSTER FAILOVER TAKEOVER`), so it serves them without the writes
    /// made since the failover began. The old primary then restarts empty
    /// on its port and rejoins as the new primary's replica, so the shard
    /// can fail over again. Returns once the cluster has settled.
    ///
    /// # Errors
    /// When no failover was begun on the shard, or a step does not
    /// complete in time.
    pub fn finish_lagged_failover(&mut self, shard: usize) -> Result<(), ClusterError> {
        self.check_shard(shard)?;
        let Some(at) = self.lagging.iter().position(|&s| s == shard) else {
            return Err(ClusterError::Invalid(format!(
                "no failover was begun on shard {shard} of {}",
                self.name
            )));
        };
        self.lagging.remove(at);
        let old = self.shards[shard].primary;
        let new = self.shards[shard].replicas[0];
        self.nodes[old].server.kill();
        self.nodes[new].server.thaw()?;
        let port = self.nodes[new].server.port();
        query::<()>(port, &cluster_cmd(&["FAILOVER", "TAKEOVER"]))?;
        wait_for(
            &format!("the replica on port {port} to be a primary"),
            SETTLE_TIMEOUT,
            |last| {
                let mut info = redis::cmd("INFO");
                info.arg("replication");
                let info: String = query(port, &info)?;
                let role = info_field(&info, "role").unwrap_or("?");
                *last = format!("role {role}");
                Ok((role == "master").then_some(()))
            },
        )?;
        self.shards[shard].primary = new;
        self.shards[shard].replicas[0] = old;
        let new_id = self.nodes[new].id.clone();
        let old_node = &mut self.nodes[old].server;
        remove_data_files(old_node.dir())?;
        old_node.restart()?;
        let old_port = old_node.port();
        // It comes back claiming the slots with its old epoch; the others
        // answer with the new owner's, and it turns into its replica. Told
        // so as well, once it has let go of the slots.
        wait_for(
            &format!("the old primary on port {old_port} to follow the new one"),
            SETTLE_TIMEOUT,
            |last| {
                let mut info = redis::cmd("INFO");
                info.arg("replication");
                let info: String = query(old_port, &info)?;
                if info_field(&info, "role") == Some("slave")
                    && info_field(&info, "master_port") == Some(&port.to_string())
                {
                    return Ok(Some(()));
                }
                if let Err(e) = query::<()>(old_port, &cluster_cmd(&["REPLICATE", &new_id])) {
                    *last = e.to_string();
                }
                Ok(None)
            },
        )?;
        self.wait_settled()
    }

    /// Begins moving `slot` to shard `to`: `CLUSTER SETSLOT IMPORTING` on
    /// the target, `MIGRATING` on the source. Until
    /// [`RedisCluster::finish_migration`], the source answers `ASK` for the
    /// slot's keys it does not have.
    ///
    /// # Errors
    /// When `to` already serves the slot, or a command fails.
    pub fn begin_migration(&mut self, slot: u16, to: usize) -> Result<Migration, ClusterError> {
        self.check_shard(to)?;
        let from = self.shard_of_slot(slot)?;
        if from == to {
            return Err(ClusterError::Invalid(format!(
                "shard {to} of {} already serves slot {slot}",
                self.name
            )));
        }
        let s = slot.to_string();
        let (src, dst) = (self.primary_port(from), self.primary_port(to));
        let (src_id, dst_id) = (
            self.primary_id(from).to_string(),
            self.primary_id(to).to_string(),
        );
        query::<()>(dst, &cluster_cmd(&["SETSLOT", &s, "IMPORTING", &src_id]))?;
        query::<()>(src, &cluster_cmd(&["SETSLOT", &s, "MIGRATING", &dst_id]))?;
        Ok(Migration { slot, from, to })
    }

    /// Ends a migration: moves every key of the slot (`CLUSTER
    /// GETKEYSINSLOT`, `MIGRATE ... KEYS`), then gives the slot to the
    /// target (`CLUSTER SETSLOT NODE` on the target, the source, then every
    /// other primary). Returns once the cluster has settled.
    ///
    /// # Errors
    /// When a command fails (a key on both sides fails `MIGRATE` with
    /// `BUSYKEY`) or the cluster does not settle.
    pub fn finish_migration(&mut self, migration: Migration) -> Result<(), ClusterError> {
        let Migration { slot, from, to } = migration;
        self.check_shard(from)?;
        self.check_shard(to)?;
        let s = slot.to_string();
        let (src, dst) = (self.primary_port(from), self.primary_port(to));
        loop {
            let keys: Vec<Vec<u8>> = query(
                src,
                &cluster_cmd(&["GETKEYSINSLOT", &s, &MIGRATE_BATCH.to_string()]),
            )?;
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(dst)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys);
            query::<()>(src, &migrate)?;
        }
        let dst_id = self.primary_id(to).to_string();
        let mut order = vec![to, from];
        order.extend((0..self.shards.len()).filter(|&x| x != to && x != from));
        for shard in order {
            query::<()>(
                self.primary_port(shard),
                &cluster_cmd(&["SETSLOT", &s, "NODE", &dst_id]),
            )?;
        }
        self.wait_settled()?;
        let now = self.shard_of_slot(slot)?;
        if now == to {
            Ok(())
        } else {
            Err(ClusterError::Invalid(format!(
                "slot {slot} is on shard {now} after its migration to shard {to}"
            )))
        }
    }

    /// Moves `slot` and its keys to shard `to` in one go.
    ///
    /// # Errors
    /// As [`RedisCluster::begin_migration`] and
    /// [`RedisCluster::finish_migration`].
    pub fn migrate_slot(&mut self, slot: u16, to: usize) -> Result<(), ClusterError> {
        let migration = self.begin_migration(slot, to)?;
        self.finish_migration(migration)
    }

    /// Freezes (SIGSTOP) every node: the whole cluster keeps its sockets
    /// open and answers nothing, as a master whose host stalls.
    /// [`RedisCluster::thaw_all`] thaws it.
    ///
    /// # Errors
    /// When a node is not running (the nodes frozen before it stay so).
    pub fn freeze_all(&self) -> Result<(), ClusterError> {
        for node in &self.nodes {
            node.server.freeze()?;
        }
        Ok(())
    }

    /// Thaws every frozen node (a failover begun and never finished, or
    /// [`RedisCluster::freeze_all`]).
    pub fn thaw_all(&mut self) {
        for node in &self.nodes {
            if node.server.is_frozen() {
                let _ = node.server.thaw();
            }
        }
        self.lagging.clear();
    }

    fn check_shard(&self, shard: usize) -> Result<(), ClusterError> {
        if shard < self.shards.len() {
            Ok(())
        } else {
            Err(ClusterError::Invalid(format!(
                "{} has {} shards, not a shard {shard}",
                self.name,
                self.shards.len()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{get, set, start};

    /// A real 3-primary cluster with a replica each: a primary restarted
    /// empty serves its slots again without their keys; a lagged failover
    /// promotes a replica that lacks the key written while it was frozen
    /// (and has the one written before), and the shard can fail over again.
    #[test]
    fn a_real_cluster_loses_keys_on_an_empty_restart_and_a_lagged_failover() {
        let dir = tempfile::tempdir().unwrap();
        let mut cluster = start(dir.path());

        let shard = cluster.shard_of_key(b"kept").unwrap();
        let port = cluster.primary_port(shard);
        let id = cluster.primary_id(shard).to_string();
        set(port, "kept", "1").unwrap();
        cluster.restart_empty(shard).unwrap();
        assert_eq!(cluster.primary_port(shard), port);
        assert_eq!(
            cluster.primary_id(shard),
            id,
            "the same node, from nodes.conf"
        );
        assert_eq!(cluster.shard_of_key(b"kept").unwrap(), shard);
        assert_eq!(get(port, "kept").unwrap(), None, "restarted empty");

        // "{x}before" and "{x}after" share a slot.
        let shard = cluster.shard_of_key(b"x").unwrap();
        let old = cluster.primary_port(shard);
        let replica = cluster.replica_ports(shard)[0];
        set(old, "{x}before", "1").unwrap();
        cluster.begin_lagged_failover(shard).unwrap();
        set(old, "{x}after", "1").unwrap();
        cluster.finish_lagged_failover(shard).unwrap();
        assert_eq!(cluster.primary_port(shard), replica);
        assert_eq!(cluster.replica_ports(shard), vec![old]);
        let primaries = cluster.primaries().unwrap();
        assert_eq!(primaries[shard].port, replica, "{primaries:?}");
        assert_eq!(get(replica, "{x}before").unwrap().as_deref(), Some("1"));
        assert_eq!(
            get(replica, "{x}after").unwrap(),
            None,
            "the write it missed"
        );

        // Back again, through the old primary now a replica.
        cluster.begin_lagged_failover(shard).unwrap();
        cluster.finish_lagged_failover(shard).unwrap();
        assert_eq!(cluster.primary_port(shard), old);
        assert_eq!(get(old, "{x}before").unwrap().as_deref(), Some("1"));
        assert!(cluster.finish_lagged_failover(shard).is_err(), "none begun");
    }
}
