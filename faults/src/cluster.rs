//! The system under test as real processes: N masters, each one
//! `redis-server` (`redlock_testkit::RedisServer`) behind a fault-injecting
//! proxy per agent-master pair, or each a Redis Cluster
//! (`redlock_testkit::RedisCluster`, reached directly: no proxies), and the
//! agents as child processes of the `redlock-agent` binary so they can be
//! killed with SIGKILL.
//!
//! ## Behavior
//! - Every process is killed when the [`Cluster`] drops.
//! - Agents log JSON to `<dir>/<agent>.log`; the log survives restarts.
//! - A restarted master comes back empty on its port; a restarted agent
//!   comes back on its socket (the stale socket file is replaced).
//! - A failed-over master ([`Cluster::failover`]) is its promoted replica
//!   from then on, on the replica's port: the observer reads it there, the
//!   agents reach it through their unchanged links, and a later restart
//!   brings it back empty there.
//! - A cluster master's faults hit one shard at a time
//!   ([`Master::shard_fault`]): a restart empty, a lagged failover, a slot
//!   migration; its node ports never change, and the observer asks the
//!   cluster which nodes are primaries now.
//! - Every single master runs with a wall clock the nemesis can move
//!   (`redlock_testkit::Options::clock`), and can be saved and restored
//!   from its snapshot (the `clock` module).
//! - The agents listed in [`AgentSettings::keeping_links`] reach the single
//!   masters through connection-keeping links
//!   ([`Link::start_keeping`]): a master that dies and comes back behind
//!   one is met again on the connection the agent had.

mod agent;
mod clock;
mod eviction;
mod master;
mod settings;

pub use agent::{agent_binary, build_agent_if_stale, rss_kib, tail, AgentProcess};
pub use eviction::{Eviction, CACHE_PREFIX, CACHE_TTL, CACHE_VALUE_BYTES, EVICTION_HEADROOM};
pub use master::{wait_in_sync, Backend, ClusterMaster, Master, ShardFault, SYNC_TIMEOUT};
pub use settings::{
    AgentSettings, FENCE_CLOCK_SKEW_ENV, NO_CLOCK_CHECK_ENV, NO_EVICTION_CHECK_ENV,
    NO_FENCE_WRITEBACK_ENV, NO_MARKER_CHECK_ENV, NO_PROCESS_CHECK_ENV,
};

use master::connect;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redlock_testkit::{free_port, Options, RedisCluster, RedisServer};

use crate::client::Client;
use crate::proxy::Link;

/// How an agent reaches one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterAddr {
    /// One server (`url:`).
    Url(String),
    /// The seed nodes of a Redis Cluster (`cluster:`).
    Cluster(Vec<String>),
}

/// What each master of a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// One `redis-server` each, behind a proxy per agent.
    #[default]
    Singles,
    /// A Redis Cluster each: `primaries` shards with `replicas` replicas
    /// each, reached directly by the agents.
    Clusters { primaries: usize, replicas: usize },
}

/// Masters, links and agents of one run.
#[derive(Debug)]
pub struct Cluster {
    pub masters: Vec<Master>,
    /// `links[agent][master]`.
    pub links: Vec<Vec<Link>>,
    pub agents: Vec<tokio::sync::Mutex<AgentProcess>>,
    pub settings: AgentSettings,
    /// Failovers so far: names each replica's directory.
    failovers: AtomicU32,
    /// Kept last: dropped after every process in it is gone.
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `masters` single masters, the links, and `agents` agents
    /// through them, and waits until every agent answers.
    ///
    /// # Errors
    /// When a process does not start.
    pub async fn start(
        masters: usize,
        agents: usize,
        settings: AgentSettings,
    ) -> Result<Cluster, String> {
        Cluster::start_with(masters, Topology::Singles, agents, settings).await
    }

    /// Starts `masters` masters of `topology` (single masters behind
    /// links, or clusters reached directly), and `agents` agents, and waits
    /// until every agent answers.
    ///
    /// # Errors
    /// When a process does not start or a cluster does not settle.
    pub async fn start_with(
        masters: usize,
        topology: Topology,
        agents: usize,
        settings: AgentSettings,
    ) -> Result<Cluster, String> {
        let binary = agent_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("redlock-faults-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let dir_path = dir.path().to_path_buf();
        let masters: Vec<Master> = match topology {
            Topology::Singles => tokio::task::spawn_blocking(move || {
                (1..=masters)
                    .map(|i| {
                        RedisServer::start_opts(
                            &dir_path,
                            &format!("r{i}"),
                            &Options::new().clock(),
                        )
                        .map(Master::single)
                        .map_err(|e| e.to_string())
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .await
            .map_err(|e| e.to_string())??,
            Topology::Clusters {
                primaries,
                replicas,
            } => {
                // One thread each: every cluster waits for itself to settle.
                let starts = (1..=masters).map(|i| {
                    let dir = dir_path.clone();
                    tokio::task::spawn_blocking(move || {
                        RedisCluster::start(&dir, &format!("c{i}"), primaries, replicas)
                            .map(Master::cluster)
                            .map_err(|e| format!("cluster c{i}: {e}"))
                    })
                });
                let mut out = Vec::new();
                for started in futures::future::join_all(starts).await {
                    out.push(started.map_err(|e| e.to_string())??);
                }
                out
            }
        };
        let mut links = Vec::new();
        let mut procs = Vec::new();
        for a in 1..=agents {
            let mut row = Vec::new();
            let mut addrs = Vec::new();
            for m in &masters {
                if m.as_cluster().is_some() {
                    addrs.push((m.name.clone(), m.addr()));
                    continue;
                }
                let name = format!("a{a}-{}", m.name);
                let link = if settings.keeping_links.contains(&(a - 1)) {
                    Link::start_keeping(name, m.port()).await
                } else {
                    Link::start(name, m.port()).await
                }
                .map_err(|e| e.to_string())?;
                addrs.push((
                    m.name.clone(),
                    MasterAddr::Url(format!("redis://127.0.0.1:{}", link.port())),
                ));
                row.push(link);
            }
            links.push(row);
            let name = format!("a{a}");
            let socket = dir.path().join(format!("{name}.sock"));
            let metrics_port = free_port().map_err(|e| e.to_string())?;
            let yaml = settings
                .of_agent(a - 1)
                .yaml_for(&socket, metrics_port, &addrs);
            let agent = AgentProcess::spawn_with_env(
                &binary,
                dir.path(),
                &name,
                socket,
                metrics_port,
                &yaml,
                settings.env_of(a - 1),
            )
            .map_err(|e| format!("start {name} ({}): {e}", binary.display()))?;
            procs.push(agent);
        }
        // At first sight an agent reads every slot's marker of each
        // cluster before it serves.
        let ready = match topology {
            Topology::Singles => Duration::from_secs(15),
            Topology::Clusters { .. } => Duration::from_secs(90),
        };
        for agent in &mut procs {
            agent.wait_ready(ready).await?;
        }
        Ok(Cluster {
            masters,
            links,
            agents: procs.into_iter().map(tokio::sync::Mutex::new).collect(),
            settings,
            failovers: AtomicU32::new(0),
            dir,
        })
    }

    /// Clients of every agent, in order.
    pub async fn clients(&self) -> Vec<Client> {
        let mut out = Vec::new();
        for agent in &self.agents {
            out.push(agent.lock().await.client());
        }
        out
    }

    /// Waits until every running agent reports `usable` usable masters and,
    /// on cluster masters, no slot in quarantine (a fresh cluster's slots
    /// are all quarantined once, as a fresh single master is).
    ///
    /// # Errors
    /// When one does not within `limit`.
    pub async fn wait_usable(&self, usable: u64, limit: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + limit;
        for agent in &self.agents {
            let client = agent.lock().await.client();
            loop {
                let (seen, slots) = match client.nodes().await {
                    Ok(nodes) => (
                        nodes.usable as u64,
                        nodes
                            .nodes
                            .iter()
                            .filter(|n| n.kind == "cluster")
                            .map(|n| n.quarantined_slots)
                            .sum(),
                    ),
                    Err(_) => (0, 0),
                };
                if seen >= usable && slots == 0 {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!(
                        "{} has {seen} usable masters (wanted {usable}), \
                         {slots} cluster slots in quarantine",
                        client.socket().display()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Fails master `j` over to a replica, as a Sentinel or an operator
    /// would behind a fixed address: a new `redis-server` replicates it
    /// until it is in sync, is promoted with `REPLICAOF NO ONE`, every
    /// agent's link to master `j` is switched to it (closing the agents'
    /// connections, so they reconnect to it), and the old process is
    /// killed. From then on master `j` *is* the promoted replica.
    ///
    /// Replication is asynchronous: a lock written in the last instant
    /// before the promotion may be missing on the replica, which is why the
    /// agents must keep it out of quorums for a quarantine period.
    ///
    /// The replica is started as a plain master and told `REPLICAOF` at
    /// run time rather than with `--replicaof` on its command line (the
    /// same replication), so that a later restart of master `j` brings it
    /// back as an empty master and not as a replica of the dead process.
    ///
    /// Returns a description of what was done.
    ///
    /// # Errors
    /// When the replica does not start or does not reach sync within
    /// [`SYNC_TIMEOUT`]; nothing has been switched then.
    pub async fn failover(&self, j: usize) -> Result<String, String> {
        let master = self.masters[j].clone();
        if master.as_cluster().is_some() {
            return Err(master.single_only("failover"));
        }
        let old_port = master.port();
        let n = self.failovers.fetch_add(1, Ordering::Relaxed) + 1;
        let name = format!("{}-replica{n}", master.name);
        let dir = self.dir.path().to_path_buf();
        // With a clock the nemesis can move, as the master it replaces.
        let replica = tokio::task::spawn_blocking(move || {
            RedisServer::start_opts(&dir, &name, &Options::new().clock())
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let new_port = replica.port();
        {
            // A diskless full sync otherwise waits 5s for more replicas.
            let mut conn = connect(old_port).await?;
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("repl-diskless-sync-delay")
                .arg(0)
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| format!("{}: CONFIG SET: {e}", master.name))?;
            let mut conn = connect(new_port).await?;
            redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(old_port)
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| format!("REPLICAOF on the replica: {e}"))?;
        }
        let synced = wait_in_sync(old_port, new_port).await.map_err(|e| {
            format!(
                "replica of {} on port {new_port}: {e}\n{}",
                master.name,
                tail(&replica.log(), 10)
            )
        })?;
        let mut conn = connect(new_port).await?;
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| format!("REPLICAOF NO ONE on the replica: {e}"))?;
        for row in &self.links {
            row[j].switch_upstream(new_port);
        }
        let Some(mut old) = master.with(|s| std::mem::replace(s, replica)) else {
            return Err(master.single_only("failover"));
        };
        let _ = tokio::task::spawn_blocking(move || old.kill()).await;
        Ok(format!(
            "{}: replica on port {new_port} promoted at offset {synced}, port {old_port} killed",
            master.name
        ))
    }

    /// Heals every link.
    pub fn clear_links(&self) {
        for row in &self.links {
            for link in row {
                link.set(crate::proxy::LinkFault::Clear);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A cluster master is written as its `cluster:` seeds, a single one as
    /// its `url:`, in the order given.
    #[test]
    fn the_config_names_cluster_masters_by_their_seeds() {
        let yaml = AgentSettings::default().yaml_for(
            Path::new("/tmp/a.sock"),
            9000,
            &[
                (
                    "r1".into(),
                    MasterAddr::Url("redis://127.0.0.1:7000".into()),
                ),
                (
                    "c2".into(),
                    MasterAddr::Cluster(vec![
                        "redis://127.0.0.1:7001".into(),
                        "redis://127.0.0.1:7002".into(),
                    ]),
                ),
            ],
        );
        assert!(
            yaml.contains(
                "masters:\n  - name: r1\n    url: \"redis://127.0.0.1:7000\"\n  - name: c2\n    cluster:\n      \
                 - \"redis://127.0.0.1:7001\"\n      - \"redis://127.0.0.1:7002\"\nlock:"
            ),
            "{yaml}"
        );
    }
}
