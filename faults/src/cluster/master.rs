//! One master, a single `redis-server` or a Redis Cluster: its lifecycle
//! (kill, restart, freeze, flush), its shards' faults, and straight
//! connections to it (reads, `INFO`, a replica's sync).

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlock_testkit::{RedisCluster, RedisServer};

use super::MasterAddr;

/// One master, shared between the nemesis and the observer.
#[derive(Debug, Clone)]
pub struct Master {
    pub name: String,
    pub backend: Backend,
}

/// What serves a master.
#[derive(Debug, Clone)]
pub enum Backend {
    /// One `redis-server`: the process serving this master now (a
    /// failover replaces it).
    Single(Arc<Mutex<RedisServer>>),
    /// A Redis Cluster.
    Cluster(Arc<ClusterMaster>),
}

/// A Redis Cluster serving one master.
#[derive(Debug)]
pub struct ClusterMaster {
    /// Every node's port, replicas included; they never change.
    pub ports: Vec<u16>,
    /// The seed URLs the agents are given.
    pub seeds: Vec<String>,
    /// Its faults block (they wait for the cluster to settle), so they run
    /// on blocking threads, one at a time.
    cluster: Mutex<RedisCluster>,
}

/// A fault of one shard of a cluster master ([`Master::shard_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardFault {
    /// Restart the shard's primary empty on its port, its `nodes.conf` kept.
    RestartEmpty,
    /// Freeze the shard's replica and cut its replication, wait, then kill
    /// the primary and promote the replica, which lacks every write of the
    /// wait.
    LaggedFailover,
    /// Begin migrating the slot to another shard, wait (the agents meet
    /// `ASK` redirections), then move its keys and finish.
    MigrateSlot,
}

impl ClusterMaster {
    /// `f` on the cluster, on a blocking thread.
    async fn with<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut RedisCluster) -> Result<T, redlock_testkit::ClusterError> + Send + 'static,
    ) -> Result<T, String> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut cluster = me.cluster.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut cluster).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

impl Master {
    /// A single master on `server`.
    pub fn single(server: RedisServer) -> Master {
        Master {
            name: server.name().to_string(),
            backend: Backend::Single(Arc::new(Mutex::new(server))),
        }
    }

    /// A cluster master on `cluster`.
    pub fn cluster(cluster: RedisCluster) -> Master {
        Master {
            name: cluster.name().to_string(),
            backend: Backend::Cluster(Arc::new(ClusterMaster {
                ports: cluster.ports(),
                seeds: cluster.seeds(),
                cluster: Mutex::new(cluster),
            })),
        }
    }

    /// The cluster behind a cluster master.
    pub fn as_cluster(&self) -> Option<&Arc<ClusterMaster>> {
        match &self.backend {
            Backend::Cluster(c) => Some(c),
            Backend::Single(_) => None,
        }
    }

    /// How an agent reaches this master directly.
    pub fn addr(&self) -> MasterAddr {
        match &self.backend {
            Backend::Single(_) => MasterAddr::Url(self.url()),
            Backend::Cluster(c) => MasterAddr::Cluster(c.seeds.clone()),
        }
    }

    /// The port the master serves on now (it changes with a failover); for
    /// a cluster, its first node's.
    pub fn port(&self) -> u16 {
        match &self.backend {
            Backend::Single(_) => self.with(|s| s.port()).unwrap_or(0),
            Backend::Cluster(c) => c.ports.first().copied().unwrap_or(0),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// `f` on a single master's process; `None` for a cluster.
    pub(super) fn with<T>(&self, f: impl FnOnce(&mut RedisServer) -> T) -> Option<T> {
        match &self.backend {
            Backend::Single(server) => {
                let mut server = server.lock().unwrap_or_else(|p| p.into_inner());
                Some(f(&mut server))
            }
            Backend::Cluster(_) => None,
        }
    }

    pub(super) fn single_only(&self, what: &str) -> String {
        format!(
            "{what} {}: a cluster master; its faults are shard faults",
            self.name
        )
    }

    /// SIGKILL a single master (nothing for a cluster: see
    /// [`Master::shard_fault`]).
    pub async fn kill(&self) {
        let me = self.clone();
        let _ = tokio::task::spawn_blocking(move || me.with(RedisServer::kill)).await;
    }

    /// Starts a single master again, empty, on its port (killing it first
    /// if needed).
    ///
    /// # Errors
    /// When it does not come back, or for a cluster master.
    pub async fn restart(&self) -> Result<(), String> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            me.with(|s| s.restart().map_err(|e| e.to_string()))
                .unwrap_or_else(|| Err(me.single_only("restart")))
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// SIGSTOP a single master.
    ///
    /// # Errors
    /// When it is not running, or for a cluster master.
    pub fn freeze(&self) -> io::Result<()> {
        self.with(|s| s.freeze())
            .unwrap_or_else(|| Err(io::Error::other(self.single_only("freeze"))))
    }

    /// SIGCONT a single master; for a cluster, every frozen node (a
    /// failover begun and not finished).
    ///
    /// # Errors
    /// When a single master is not running.
    pub fn thaw(&self) -> io::Result<()> {
        match &self.backend {
            Backend::Single(_) => self.with(|s| s.thaw()).unwrap_or(Ok(())),
            Backend::Cluster(c) => {
                c.cluster
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .thaw_all();
                Ok(())
            }
        }
    }

    /// The master's log (every node's for a cluster).
    pub fn log(&self) -> String {
        match &self.backend {
            Backend::Single(_) => self.with(|s| s.log()).unwrap_or_default(),
            Backend::Cluster(c) => c.cluster.lock().unwrap_or_else(|p| p.into_inner()).logs(),
        }
    }

    /// `FLUSHALL` on a single master itself (not through a link): it loses
    /// every key, the incarnation marker included, while its process lives
    /// on.
    ///
    /// # Errors
    /// When the master does not answer in time, or for a cluster master.
    pub async fn flush(&self) -> Result<(), String> {
        if self.as_cluster().is_some() {
            return Err(self.single_only("flush"));
        }
        let mut conn = connect(self.port()).await?;
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| format!("FLUSHALL on {}: {e}", self.name))
    }

    /// The value of `key` on a single master now, read straight from it.
    ///
    /// # Errors
    /// When the master does not answer, or for a cluster master.
    pub async fn get(&self, key: &str) -> Result<Option<String>, String> {
        if self.as_cluster().is_some() {
            return Err(self.single_only("get"));
        }
        let mut conn = connect(self.port()).await?;
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .map_err(|e| format!("GET on {}: {e}", self.name))
    }

    /// `fault` on the shard of a cluster master that serves `slot`, taking
    /// `window` for the part that waits (a lagged failover's lag, a
    /// migration's middle). For a migration, `pick` chooses the target
    /// among the other shards. Returns what was done.
    ///
    /// # Errors
    /// For a single master, or when a step fails (a failover begun is
    /// thawed again then).
    pub async fn shard_fault(
        &self,
        fault: ShardFault,
        slot: u16,
        window: Duration,
        pick: usize,
    ) -> Result<String, String> {
        let Some(c) = self.as_cluster() else {
            return Err(format!("{fault:?} on {}: not a cluster master", self.name));
        };
        let name = self.name.clone();
        let shard = c.with(move |cl| cl.shard_of_slot(slot)).await?;
        match fault {
            ShardFault::RestartEmpty => {
                c.with(move |cl| cl.restart_empty(shard)).await?;
                Ok(format!(
                    "{name} shard {shard} (slot {slot}) restarted empty"
                ))
            }
            ShardFault::LaggedFailover => {
                c.with(move |cl| cl.begin_lagged_failover(shard)).await?;
                tokio::time::sleep(window).await;
                let done = c
                    .with(move |cl| {
                        let old = cl.primary_port(shard);
                        cl.finish_lagged_failover(shard)?;
                        Ok((old, cl.primary_port(shard)))
                    })
                    .await;
                match done {
                    Ok((old, new)) => Ok(format!(
                        "{name} shard {shard} (slot {slot}) failed over from port {old} to \
                         port {new}, {}ms of writes lost",
                        window.as_millis()
                    )),
                    Err(e) => {
                        let _ = c
                            .with(|cl| {
                                cl.thaw_all();
                                Ok(())
                            })
                            .await;
                        Err(e)
                    }
                }
            }
            ShardFault::MigrateSlot => {
                let migration = c
                    .with(move |cl| {
                        let n = cl.shards();
                        let to = (shard + 1 + pick % n.saturating_sub(1).max(1)) % n;
                        cl.begin_migration(slot, to)
                    })
                    .await?;
                tokio::time::sleep(window).await;
                c.with(move |cl| cl.finish_migration(migration)).await?;
                Ok(format!(
                    "{name} slot {slot} migrated from shard {} to shard {}",
                    migration.from, migration.to
                ))
            }
        }
    }

    /// Begins a lagged failover of the shard serving `slot` (see
    /// [`Master::shard_fault`]); returns the shard.
    ///
    /// # Errors
    /// For a single master, or when it fails.
    pub async fn begin_failover(&self, slot: u16) -> Result<usize, String> {
        let c = self
            .as_cluster()
            .ok_or_else(|| self.single_only("failover"))?;
        c.with(move |cl| {
            let shard = cl.shard_of_slot(slot)?;
            cl.begin_lagged_failover(shard)?;
            Ok(shard)
        })
        .await
    }

    /// Finishes the lagged failover of `shard` begun by
    /// [`Master::begin_failover`].
    ///
    /// # Errors
    /// For a single master, or when it fails.
    pub async fn finish_failover(&self, shard: usize) -> Result<(), String> {
        let c = self
            .as_cluster()
            .ok_or_else(|| self.single_only("failover"))?;
        c.with(move |cl| cl.finish_lagged_failover(shard)).await
    }
}

/// A connection straight to a master on `port`, with short timeouts so a
/// frozen master cannot hang the nemesis.
pub(super) async fn connect(port: u16) -> Result<redis::aio::MultiplexedConnection, String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .map_err(|e| format!("port {port}: {e}"))?;
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| format!("connect to port {port}: {e}"))
}

/// `CONFIG SET name value`.
pub(super) async fn config_set(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    value: &str,
) -> Result<(), String> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async::<()>(conn)
        .await
        .map_err(|e| format!("CONFIG SET {name} {value}: {e}"))
}

/// A number field of `INFO <section>`.
pub(super) async fn info_u64(
    conn: &mut redis::aio::MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<u64, String> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .map_err(|e| format!("INFO {section}: {e}"))?;
    info_field(&info, field)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no {field} in INFO {section}"))
}

/// The value of `field` in an `INFO` reply.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// `INFO replication` of the server on `port`.
async fn replication(port: u16) -> Result<String, String> {
    let mut conn = connect(port).await?;
    redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("INFO replication on port {port}: {e}"))
}

/// How long a new replica may take to be in sync with its master.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits until the replica on `replica` has its link to the master on
/// `master` up and has processed at least the replication offset the
/// master reported just before (under a steady write load the two are
/// never equal at one instant); returns that offset.
///
/// # Errors
/// When that does not happen within [`SYNC_TIMEOUT`], with the last state.
pub async fn wait_in_sync(master: u16, replica: u16) -> Result<u64, String> {
    let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
    loop {
        let state = async {
            let wanted: u64 = info_field(&replication(master).await?, "master_repl_offset")
                .and_then(|v| v.parse().ok())
                .ok_or("the master reports no master_repl_offset")?;
            let info = replication(replica).await?;
            let link = info_field(&info, "master_link_status")
                .unwrap_or("?")
                .to_string();
            let done: u64 = info_field(&info, "slave_repl_offset")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            Ok::<_, String>((wanted, link, done))
        }
        .await;
        let last = match state {
            Ok((wanted, link, done)) if link == "up" && done >= wanted => return Ok(done),
            Ok((wanted, link, done)) => {
                format!("link {link}, offset {done} of the master's {wanted}")
            }
            Err(e) => e,
        };
        if tokio::time::Instant::now() > deadline {
            return Err(format!("not in sync within {SYNC_TIMEOUT:?}: {last}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
