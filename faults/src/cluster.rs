//! The system under test as real processes: N `redis-server` masters
//! (`redlock_testkit::RedisServer`), a fault-injecting proxy per
//! agent-master pair, and the agents as child processes of the
//! `redlock-agent` binary so they can be killed with SIGKILL.
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

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlock_testkit::{free_port, RedisServer};

use crate::client::Client;
use crate::proxy::Link;

/// Where the `redlock-agent` binary is: `$REDLOCK_AGENT_BIN`, or beside the
/// running executable (`target/<profile>/`, also from `deps/`), built first
/// with cargo (once per process) so the suite never runs a stale agent;
/// `FAULTS_NO_BUILD=1` skips the build.
///
/// # Errors
/// When it cannot be built or is not there, with the command that builds it.
pub fn agent_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("REDLOCK_AGENT_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    if std::env::var_os("FAULTS_NO_BUILD").is_none() {
        static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        BUILT
            .get_or_init(|| build_agent(dir.ends_with("release")))
            .clone()?;
    }
    let candidate = dir.join("redlock-agent");
    if candidate.is_file() {
        Ok(candidate)
    } else {
        Err(format!(
            "{} is missing; build it first with `cargo build -p redlock-agent` \
             (or point REDLOCK_AGENT_BIN at the binary)",
            candidate.display()
        ))
    }
}

/// `cargo build -p redlock-agent` in this workspace (a no-op when fresh).
fn build_agent(release: bool) -> Result<(), String> {
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

/// The agent settings the suite varies; everything else keeps its default.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub key_prefix: String,
    pub default_ttl: Duration,
    pub max_ttl: Duration,
    pub node_timeout: Duration,
    pub retry_delay: Duration,
    pub retry_jitter: Duration,
    pub health_interval: Duration,
    pub delayed_restart: bool,
    pub restart_extra: Duration,
    /// Extra `key: value` lines under `socket:` (e.g. `max_connections: 10`).
    pub socket_extra: Vec<String>,
    /// Extra lines under `lock:`.
    pub lock_extra: Vec<String>,
    pub log_level: String,
    /// The in-vote incarnation marker check. `false` starts the agents with
    /// [`NO_MARKER_CHECK_ENV`]`=1`, the agent's test-only switch: the
    /// control run that must see what a flush does without it.
    pub marker_check: bool,
    /// Extra environment variables of each agent (`[0]` is a1's): the
    /// fence control run's clock skews and write-back switch.
    pub agent_env: Vec<Vec<(String, String)>>,
}

/// The agent's test-only switch that skips round 2's fence write-back.
pub const NO_FENCE_WRITEBACK_ENV: &str = redlock_testkit::switches::NO_FENCE_WRITEBACK;
/// The agent's test-only clock skew (signed ms) for the fence floor only.
pub const FENCE_CLOCK_SKEW_ENV: &str = redlock_testkit::switches::FENCE_CLOCK_SKEW_MS;

/// The agent's test-only switch that turns the in-vote incarnation marker
/// check off (not a config key, so no deployment can turn it off by
/// mistake). Removed from every agent's environment unless asked for.
pub const NO_MARKER_CHECK_ENV: &str = redlock_testkit::switches::NO_MARKER_CHECK;

impl Default for AgentSettings {
    fn default() -> AgentSettings {
        AgentSettings {
            key_prefix: "faults:".into(),
            default_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(2),
            // The most default_ttl allows (a tenth): the machine that runs
            // the suite is shared and busy.
            node_timeout: Duration::from_millis(100),
            retry_delay: Duration::from_millis(20),
            retry_jitter: Duration::from_millis(30),
            health_interval: Duration::from_millis(100),
            delayed_restart: true,
            restart_extra: Duration::from_millis(500),
            socket_extra: Vec::new(),
            lock_extra: Vec::new(),
            log_level: "info".into(),
            marker_check: true,
            agent_env: Vec::new(),
        }
    }
}

impl AgentSettings {
    /// How long a master that came back stays out: `max_ttl + extra`.
    pub fn quarantine(&self) -> Duration {
        self.max_ttl + self.restart_extra
    }

    /// Environment variables the agents start with.
    pub fn env(&self) -> Vec<(String, String)> {
        if self.marker_check {
            Vec::new()
        } else {
            vec![(NO_MARKER_CHECK_ENV.to_string(), "1".to_string())]
        }
    }

    /// Environment variables agent `index` (0 for a1) starts with.
    pub fn env_of(&self, index: usize) -> Vec<(String, String)> {
        let mut env = self.env();
        env.extend(self.agent_env.get(index).cloned().unwrap_or_default());
        env
    }

    /// The config YAML of an agent on `socket` reaching masters at `urls`.
    pub fn yaml(&self, socket: &Path, metrics_port: u16, urls: &[(String, String)]) -> String {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut y = String::new();
        let _ = writeln!(y, "socket:\n  path: {:?}", socket.display().to_string());
        for line in &self.socket_extra {
            let _ = writeln!(y, "  {line}");
        }
        let _ = writeln!(y, "metrics:\n  listen: \"127.0.0.1:{metrics_port}\"");
        let _ = writeln!(y, "log:\n  format: json\n  level: {:?}", self.log_level);
        let _ = writeln!(y, "masters:");
        for (name, url) in urls {
            let _ = writeln!(y, "  - name: {name}\n    url: {url:?}");
        }
        let _ = writeln!(y, "lock:\n  key_prefix: {:?}", self.key_prefix);
        let _ = writeln!(y, "  default_ttl: {}", ms(self.default_ttl));
        let _ = writeln!(y, "  max_ttl: {}", ms(self.max_ttl));
        let _ = writeln!(y, "  node_timeout: {}", ms(self.node_timeout));
        let _ = writeln!(y, "  retry_delay: {}", ms(self.retry_delay));
        let _ = writeln!(y, "  retry_jitter: {}", ms(self.retry_jitter));
        for line in &self.lock_extra {
            let _ = writeln!(y, "  {line}");
        }
        let _ = writeln!(y, "health:\n  interval: {}", ms(self.health_interval));
        let _ = writeln!(
            y,
            "delayed_restart:\n  enabled: {}\n  extra: {}",
            self.delayed_restart,
            ms(self.restart_extra)
        );
        let _ = writeln!(y, "leak_scan:\n  interval: 5s");
        let _ = writeln!(y, "shutdown:\n  grace: 1s");
        y
    }
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
        let child = Command::new(&self.binary)
            .arg("--config")
            .arg(&self.config)
            .env_remove("REDLOCK_LOG")
            .env_remove(NO_MARKER_CHECK_ENV)
            .env_remove(NO_FENCE_WRITEBACK_ENV)
            .env_remove(FENCE_CLOCK_SKEW_ENV)
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
            if let Ok((200, _)) = self.client().get_json("/healthz").await {
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
    /// The process serving this master now: a failover replaces it.
    pub server: Arc<Mutex<RedisServer>>,
}

impl Master {
    /// The port the master serves on now (it changes with a failover).
    pub fn port(&self) -> u16 {
        self.with(|s| s.port())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    fn with<T>(&self, f: impl FnOnce(&mut RedisServer) -> T) -> T {
        let mut server = self.server.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut server)
    }

    /// SIGKILL.
    pub async fn kill(&self) {
        let me = self.clone();
        let _ = tokio::task::spawn_blocking(move || me.with(RedisServer::kill)).await;
    }

    /// Starts it again, empty, on its port (killing it first if needed).
    ///
    /// # Errors
    /// When it does not come back.
    pub async fn restart(&self) -> Result<(), String> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.with(|s| s.restart().map_err(|e| e.to_string())))
            .await
            .map_err(|e| e.to_string())?
    }

    /// SIGSTOP.
    pub fn freeze(&self) -> io::Result<()> {
        self.with(|s| s.freeze())
    }

    /// SIGCONT.
    pub fn thaw(&self) -> io::Result<()> {
        self.with(|s| s.thaw())
    }

    pub fn log(&self) -> String {
        self.with(|s| s.log())
    }

    /// `FLUSHALL` on the master itself (not through a link): it loses every
    /// key, the incarnation marker included, while its process lives on.
    ///
    /// # Errors
    /// When the master does not answer in time.
    pub async fn flush(&self) -> Result<(), String> {
        let mut conn = connect(self.port()).await?;
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| format!("FLUSHALL on {}: {e}", self.name))
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
    /// Starts `masters` masters, the links, and `agents` agents through
    /// them, and waits until every agent answers.
    ///
    /// # Errors
    /// When a process does not start.
    pub async fn start(
        masters: usize,
        agents: usize,
        settings: AgentSettings,
    ) -> Result<Cluster, String> {
        let binary = agent_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("redlock-faults-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let dir_path = dir.path().to_path_buf();
        let servers = tokio::task::spawn_blocking(move || {
            (1..=masters)
                .map(|i| RedisServer::start(&dir_path, &format!("r{i}")).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| e.to_string())??;
        let masters: Vec<Master> = servers
            .into_iter()
            .map(|s| Master {
                name: s.name().to_string(),
                server: Arc::new(Mutex::new(s)),
            })
            .collect();
        let mut links = Vec::new();
        let mut procs = Vec::new();
        for a in 1..=agents {
            let mut row = Vec::new();
            let mut urls = Vec::new();
            for m in &masters {
                let link = Link::start(format!("a{a}-{}", m.name), m.port())
                    .await
                    .map_err(|e| e.to_string())?;
                urls.push((m.name.clone(), format!("redis://127.0.0.1:{}", link.port())));
                row.push(link);
            }
            links.push(row);
            let name = format!("a{a}");
            let socket = dir.path().join(format!("{name}.sock"));
            let metrics_port = free_port().map_err(|e| e.to_string())?;
            let yaml = settings.yaml(&socket, metrics_port, &urls);
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
        for agent in &mut procs {
            agent.wait_ready(Duration::from_secs(15)).await?;
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

    /// Waits until every running agent reports `usable` usable masters.
    ///
    /// # Errors
    /// When one does not within `limit`.
    pub async fn wait_usable(&self, usable: u64, limit: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + limit;
        for agent in &self.agents {
            let client = agent.lock().await.client();
            loop {
                let seen = match client.get_json("/v1/nodes").await {
                    Ok((200, nodes)) => nodes["usable"].as_u64().unwrap_or(0),
                    _ => 0,
                };
                if seen >= usable {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!(
                        "{} has {seen} usable masters, wanted {usable}",
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
        let old_port = master.port();
        let n = self.failovers.fetch_add(1, Ordering::Relaxed) + 1;
        let name = format!("{}-replica{n}", master.name);
        let dir = self.dir.path().to_path_buf();
        let replica = tokio::task::spawn_blocking(move || RedisServer::start(&dir, &name))
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
        let mut old = master.with(|s| std::mem::replace(s, replica));
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
