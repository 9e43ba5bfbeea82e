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

mod clock;
mod settings;

pub use settings::{
    AgentSettings, FENCE_CLOCK_SKEW_ENV, NO_CLOCK_CHECK_ENV, NO_EVICTION_CHECK_ENV,
    NO_FENCE_WRITEBACK_ENV, NO_MARKER_CHECK_ENV, NO_PROCESS_CHECK_ENV,
};

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlock_testkit::{free_port, Options, RedisCluster, RedisServer};

use crate::client::Client;
use crate::proxy::Link;

/// Where the `redlock-agent` binary is: `$REDLOCK_AGENT_BIN`, or beside the
/// running executable (`target/<profile>/`, also from `deps/`), current
/// with its sources. Never built here: a build started from a test would
/// wait on any other build's cargo locks with the test's timeout running,
/// so the tests fail at once instead, naming the command that builds it
/// (`tools/test.sh` builds every binary before the tests). The `faults`
/// command line builds it first ([`build_agent_if_stale`]).
///
/// # Errors
/// When it is missing or older than its sources, with the command that
/// builds it.
pub fn agent_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("REDLOCK_AGENT_BIN") {
        return Ok(PathBuf::from(path));
    }
    redlock_testkit::bins::workspace_binary("redlock-agent").map_err(|e| e.to_string())
}

/// For the `faults` command line run by hand: `cargo build -p
/// redlock-agent` when the binary beside it is missing or older than its
/// sources, so a run never uses a stale agent; nothing when it is current,
/// when `$REDLOCK_AGENT_BIN` names another binary, or with
/// `FAULTS_NO_BUILD=1`.
///
/// # Errors
/// When cargo cannot be run or the build fails, with its output.
pub fn build_agent_if_stale() -> Result<(), String> {
    if std::env::var_os("REDLOCK_AGENT_BIN").is_some()
        || std::env::var_os("FAULTS_NO_BUILD").is_some()
        || agent_binary().is_ok()
    {
        return Ok(());
    }
    let release = redlock_testkit::bins::target_dir()
        .map_err(|e| e.to_string())?
        .ends_with("release");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "-q",
            "-p",
            "redlock-agent",
            "--bin",
            "redlock-agent",
        ])
        .arg("--manifest-path")
        .arg(&manifest);
    if release {
        command.arg("--release");
    }
    eprintln!("faults: building redlock-agent (cargo build -p redlock-agent)");
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cargo to build redlock-agent: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo build -p redlock-agent failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

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

/// One agent child process.
#[derive(Debug)]
pub struct AgentProcess {
    pub name: String,
    pub socket: PathBuf,
    pub metrics_port: u16,
    pub config: PathBuf,
    pub log: PathBuf,
    binary: PathBuf,
    /// Extra environment variables (see [`AgentSettings::env`]).
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// Times started, the first included.
    pub starts: u32,
}

impl AgentProcess {
    /// Writes `yaml` beside the log and starts the agent (not waiting).
    ///
    /// # Errors
    /// When the config cannot be written or the binary cannot start.
    pub fn spawn(
        binary: &Path,
        dir: &Path,
        name: &str,
        socket: PathBuf,
        metrics_port: u16,
        yaml: &str,
    ) -> io::Result<AgentProcess> {
        AgentProcess::spawn_with_env(binary, dir, name, socket, metrics_port, yaml, Vec::new())
    }

    /// As [`AgentProcess::spawn`], with extra environment variables for
    /// every start of the process.
    ///
    /// # Errors
    /// When the config cannot be written or the binary cannot start.
    pub fn spawn_with_env(
        binary: &Path,
        dir: &Path,
        name: &str,
        socket: PathBuf,
        metrics_port: u16,
        yaml: &str,
        env: Vec<(String, String)>,
    ) -> io::Result<AgentProcess> {
        let config = dir.join(format!("{name}.yaml"));
        std::fs::write(&config, yaml)?;
        let mut agent = AgentProcess {
            name: name.to_string(),
            socket,
            metrics_port,
            config,
            log: dir.join(format!("{name}.log")),
            binary: binary.to_path_buf(),
            env,
            child: None,
            starts: 0,
        };
        agent.start()?;
        Ok(agent)
    }

    /// Starts the process if it is not running.
    ///
    /// # Errors
    /// When the binary cannot start.
    pub fn start(&mut self) -> io::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = Command::new(&self.binary);
        command
            .arg("--config")
            .arg(&self.config)
            .env_remove("REDLOCK_LOG");
        // No test switch leaks in from the suite's own environment: each
        // agent gets only the ones its scenario asks for, below.
        for switch in redlock_testkit::switches::ALL {
            command.env_remove(switch);
        }
        let child = command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn client(&self) -> Client {
        Client::new(&self.socket)
    }

    /// Resident memory in KiB, from `/proc/<pid>/status`.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid()?)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/metrics` text from the metrics listener.
    ///
    /// # Errors
    /// When the agent does not answer.
    pub async fn scrape(&self) -> io::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).await?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await?;
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
            .await
            .map_err(|_| io::Error::other("scrape timed out"))??;
        Ok(out)
    }

    /// Waits until the agent answers `/healthz` on its socket.
    ///
    /// # Errors
    /// When it does not within `limit`, with the end of its log.
    pub async fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.client().healthz().await.is_ok() {
                return Ok(());
            }
            if !self.is_running() {
                return Err(format!(
                    "{} exited:\n{}",
                    self.name,
                    tail(&self.log_text(), 20)
                ));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "{} did not answer /healthz within {limit:?}:\n{}",
                    self.name,
                    tail(&self.log_text(), 20)
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Resident memory of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

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
    fn with<T>(&self, f: impl FnOnce(&mut RedisServer) -> T) -> Option<T> {
        match &self.backend {
            Backend::Single(server) => {
                let mut server = server.lock().unwrap_or_else(|p| p.into_inner());
                Some(f(&mut server))
            }
            Backend::Cluster(_) => None,
        }
    }

    fn single_only(&self, what: &str) -> String {
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

    /// Makes a single master evict, as a Redis shared with a cache does:
    /// `maxmemory` set to what it uses now plus [`EVICTION_HEADROOM`], the
    /// `policy` given (`volatile-lru`, `volatile-ttl`, `allkeys-lru`), then
    /// up to `writes` cache keys of [`CACHE_VALUE_BYTES`] each with a TTL
    /// of [`CACHE_TTL`], straight to it (not through a link), under
    /// [`CACHE_PREFIX`]`<tag>:`, never under a lock prefix. With
    /// `until_lost: (key, token)`, the writes stop as soon as that key no
    /// longer holds that token (evicted); when it does not hold it to begin
    /// with, nothing is done (see [`Eviction::gone`]).
    /// Every lock key has a TTL, so every policy may evict it; only
    /// `allkeys-*` may evict the incarnation marker (it has none).
    ///
    /// The master keeps evicting (the agents' own writes push it over) until
    /// [`Master::end_eviction`] is given the returned [`Eviction`], which
    /// is returned even when a write failed part way (see
    /// [`Eviction::error`]).
    ///
    /// # Errors
    /// When the master does not answer or refuses the `CONFIG SET` (nothing
    /// to undo then), or for a cluster master.
    pub async fn evict(
        &self,
        policy: &'static str,
        tag: &str,
        writes: u32,
        until_lost: Option<(&str, &str)>,
    ) -> Result<Eviction, String> {
        if self.as_cluster().is_some() {
            return Err(self.single_only("evict"));
        }
        let name = &self.name;
        let mut conn = connect(self.port()).await?;
        let was: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory")
            .query_async::<Vec<String>>(&mut conn)
            .await
            .map_err(|e| format!("CONFIG GET maxmemory on {name}: {e}"))?;
        let was_policy: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async::<Vec<String>>(&mut conn)
            .await
            .map_err(|e| format!("CONFIG GET maxmemory-policy on {name}: {e}"))?;
        let (Some(maxmemory), Some(maxmemory_policy)) = (was.get(1), was_policy.get(1)) else {
            return Err(format!("CONFIG GET on {name}: no value"));
        };
        if let Some((key, token)) = until_lost {
            let there: Option<String> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("GET on {name}: {e}"))?;
            if there.as_deref() != Some(token) {
                return Ok(Eviction {
                    master: name.clone(),
                    policy,
                    maxmemory: maxmemory.clone(),
                    maxmemory_policy: maxmemory_policy.clone(),
                    tag: tag.to_string(),
                    limit: 0,
                    written: 0,
                    evicted: 0,
                    gone: None,
                    error: Some(format!("{key} did not hold the lock: nothing done")),
                });
            }
        }
        let used = info_u64(&mut conn, "memory", "used_memory").await?;
        let evicted_before = info_u64(&mut conn, "stats", "evicted_keys").await?;
        let mut eviction = Eviction {
            master: name.clone(),
            policy,
            maxmemory: maxmemory.clone(),
            maxmemory_policy: maxmemory_policy.clone(),
            tag: tag.to_string(),
            limit: used + EVICTION_HEADROOM,
            written: 0,
            evicted: 0,
            gone: None,
            error: None,
        };
        config_set(&mut conn, "maxmemory-policy", policy)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        if let Err(e) = config_set(&mut conn, "maxmemory", &eviction.limit.to_string()).await {
            let _ = config_set(&mut conn, "maxmemory-policy", maxmemory_policy).await;
            return Err(format!("{name}: {e}"));
        }
        let value = "x".repeat(CACHE_VALUE_BYTES);
        let ttl_ms = u64::try_from(CACHE_TTL.as_millis()).unwrap_or(u64::MAX);
        while eviction.written < writes {
            let batch = CACHE_BATCH.min(writes - eviction.written);
            let mut pipe = redis::pipe();
            for n in eviction.written..eviction.written + batch {
                pipe.cmd("SET")
                    .arg(eviction.key(n))
                    .arg(&value)
                    .arg("PX")
                    .arg(ttl_ms)
                    .ignore();
            }
            if let Some((key, _)) = until_lost {
                pipe.cmd("GET").arg(key);
            }
            let reply: Result<Vec<Option<String>>, _> = pipe.query_async(&mut conn).await;
            eviction.written += batch;
            match (reply, until_lost) {
                (Ok(value), Some((_, token)))
                    if value.first().cloned().flatten().as_deref() != Some(token) =>
                {
                    eviction.gone = Some(true);
                    break;
                }
                (Ok(_), Some(_)) => eviction.gone = Some(false),
                (Ok(_), None) => {}
                (Err(e), _) => {
                    eviction.error = Some(format!("cache write on {name}: {e}"));
                    break;
                }
            }
        }
        eviction.evicted = info_u64(&mut conn, "stats", "evicted_keys")
            .await
            .map_or(0, |n| n.saturating_sub(evicted_before));
        Ok(eviction)
    }

    /// Ends an eviction begun by [`Master::evict`]: `maxmemory` and the
    /// policy as they were, then every cache key it wrote deleted (by
    /// name: its own prefix only).
    ///
    /// # Errors
    /// When the master does not answer or refuses a command.
    pub async fn end_eviction(&self, eviction: &Eviction) -> Result<(), String> {
        let name = &self.name;
        let mut conn = connect(self.port()).await?;
        config_set(&mut conn, "maxmemory", &eviction.maxmemory)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        config_set(&mut conn, "maxmemory-policy", &eviction.maxmemory_policy)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        let mut n = 0;
        while n < eviction.written {
            let end = (n + 512).min(eviction.written);
            let mut unlink = redis::cmd("UNLINK");
            for i in n..end {
                unlink.arg(eviction.key(i));
            }
            unlink
                .query_async::<u64>(&mut conn)
                .await
                .map_err(|e| format!("UNLINK cache keys on {name}: {e}"))?;
            n = end;
        }
        Ok(())
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
async fn connect(port: u16) -> Result<redis::aio::MultiplexedConnection, String> {
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
async fn config_set(
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
async fn info_u64(
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

/// Where the cache keys of an eviction go: not under any lock prefix the
/// suite uses (`faults:`), so neither the observer nor the agents' leak
/// scan sees them.
pub const CACHE_PREFIX: &str = "nemesis-cache:";

/// A cache key's value size (as the agent's eviction tests write).
pub const CACHE_VALUE_BYTES: usize = 16 * 1024;

/// A cache key's TTL: it makes the key volatile (a `volatile-*` policy's
/// candidate), and long enough that none expires during a fault; the heal
/// deletes them.
pub const CACHE_TTL: Duration = Duration::from_secs(600);

/// How far above what a master uses its `maxmemory` is set for an
/// eviction: about 128 cache keys fit, the rest push keys out.
pub const EVICTION_HEADROOM: u64 = 2 * 1024 * 1024;

/// Cache keys per round trip.
const CACHE_BATCH: u32 = 16;

/// One eviction begun by [`Master::evict`] and what it did; given back to
/// [`Master::end_eviction`] to undo it.
#[derive(Debug, Clone)]
pub struct Eviction {
    pub master: String,
    pub policy: &'static str,
    /// `maxmemory` and its policy before, restored by the heal.
    maxmemory: String,
    maxmemory_policy: String,
    tag: String,
    /// The `maxmemory` set, in bytes.
    pub limit: u64,
    /// Cache keys written: [`CACHE_PREFIX`]`<tag>:<n>` for `n` below it.
    pub written: u32,
    /// Keys the master evicted during the writes (`evicted_keys` after
    /// minus before).
    pub evicted: u64,
    /// With `until_lost`: whether that key, holding the token at the start,
    /// lost it (`None`: it did not hold it, and nothing was done).
    pub gone: Option<bool>,
    /// A write that failed part way (the writes stopped there).
    pub error: Option<String>,
}

impl Eviction {
    fn key(&self, n: u32) -> String {
        format!("{CACHE_PREFIX}{}:{n}", self.tag)
    }
}

impl std::fmt::Display for Eviction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.gone.is_none() && self.written == 0 {
            if let Some(e) = &self.error {
                return write!(f, "{}: {e}", self.master);
            }
        }
        write!(
            f,
            "{} {} maxmemory {:.1}MiB: {} cache keys, {} evicted",
            self.master,
            self.policy,
            self.limit as f64 / 1048576.0,
            self.written,
            self.evicted
        )?;
        match self.gone {
            Some(true) => write!(f, ", the lock gone")?,
            Some(false) => write!(f, ", the lock still there")?,
            None => {}
        }
        if let Some(e) = &self.error {
            write!(f, " ({e})")?;
        }
        Ok(())
    }
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
