//! One `redis-server` child process on a free loopback port, and the
//! options it runs with.
//!
//! ## Behavior
//! - Each master runs `redis-server` on a free loopback port, by default
//!   with no persistence, in its own directory, logging to a file there.
//! - [`RedisServer::start`] returns once the server answers PING on its
//!   plain port; a port taken between probe and bind is retried on another.
//! - A master is killed (SIGKILL) when its [`RedisServer`] is dropped; if the
//!   thread is panicking (a failing test) its log is printed first.
//! - `restart` starts it again on the same ports, empty unless persistence
//!   is on: the crash the Redlock page's delayed-restart section is about.
//! - [`RedisServer::save`] keeps a snapshot of the dataset (`SAVE`) beside
//!   the log, and [`RedisServer::restart_from_snapshot`] kills the process
//!   and starts it again from that snapshot: a master restored from an old
//!   dump, with the keys it had then and none written since. A plain
//!   `restart` never loads it.
//! - A master started with [`Options::clock`] keeps time by a clock the
//!   test moves (see [`crate::clock`]), across restarts too.
//! - A Redis Cluster node ([`Options::cluster`]) keeps its `nodes.conf` in
//!   its directory across restarts, so it rejoins its cluster as the same
//!   node; its cluster bus listens on a second free port.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{Clock, ClockControl, ClockError};

/// How long a fresh `redis-server` may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The `redis-server` binary: `$REDIS_SERVER` or the one on PATH.
pub fn redis_server_binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

/// Why a master could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error(
        "redis-server was not found ({0}); install it with `sudo apt-get install -y redis-server` \
         or point REDIS_SERVER at the binary"
    )]
    Missing(io::Error),
    #[error("redis-server on port {port} did not start: {reason}\n--- its log ---\n{log}")]
    NoStart {
        port: u16,
        reason: String,
        log: String,
    },
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Clock(#[from] ClockError),
    #[error("master {0} has no snapshot to restart from: save() it first")]
    NoSnapshot(String),
}

/// One `redis-server` child process on a loopback port.
#[derive(Debug)]
pub struct RedisServer {
    name: String,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Stopped by [`RedisServer::freeze`] and not thawed since.
    frozen: AtomicBool,
    tls_port: Option<u16>,
    /// The cluster bus port, when started with [`Options::cluster`].
    cluster_port: Option<u16>,
    args: Vec<String>,
    /// The moved wall clock, when started with [`Options::clock`].
    clock: Option<ClockControl>,
}

/// A port nobody listens on right now. Another process may take it before
/// we do; [`RedisServer::start`] retries with a new one when that happens.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// A free port not in `taken` (each probe releases its port at once, so two
/// probes may return the same one), added to `taken`.
fn free_port_besides(taken: &mut Vec<u16>) -> io::Result<u16> {
    loop {
        let port = free_port()?;
        if !taken.contains(&port) {
            taken.push(port);
            return Ok(port);
        }
    }
}

/// What `redis-server` logs once it listens.
const READY: &str = "Ready to accept connections";

impl RedisServer {
    /// Starts a master named `name` with its files under `parent/name`, no
    /// persistence, plain TCP only.
    ///
    /// # Errors
    /// When `redis-server` is missing or does not answer PING in time.
    pub fn start(parent: &Path, name: &str) -> Result<RedisServer, SpawnError> {
        RedisServer::start_opts(parent, name, &Options::new())
    }

    /// As [`RedisServer::start`], with extra `redis-server` arguments such as
    /// `["--replicaof", "127.0.0.1", "6379"]`.
    ///
    /// # Errors
    /// When `redis-server` is missing or does not answer PING in time.
    pub fn start_with(
        parent: &Path,
        name: &str,
        extra: &[&str],
    ) -> Result<RedisServer, SpawnError> {
        RedisServer::start_opts(parent, name, &Options::new().args(extra))
    }

    /// As [`RedisServer::start`], with `options`.
    ///
    /// # Errors
    /// When `redis-server` is missing or does not answer PING in time.
    pub fn start_opts(
        parent: &Path,
        name: &str,
        options: &Options,
    ) -> Result<RedisServer, SpawnError> {
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir)?;
        let mut clock = if options.clock {
            Some(ClockControl::new(&dir)?)
        } else {
            None
        };
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            let mut taken = vec![port];
            let tls_port = match options.tls {
                Some(_) => Some(free_port_besides(&mut taken)?),
                None => None,
            };
            let cluster_port = match options.cluster_node_timeout {
                Some(_) => Some(free_port_besides(&mut taken)?),
                None => None,
            };
            let mut server = RedisServer {
                name: name.to_string(),
                port,
                dir: dir.clone(),
                child: None,
                frozen: AtomicBool::new(false),
                tls_port,
                cluster_port,
                args: options.to_args(tls_port, cluster_port),
                clock: clock.take(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                // Most likely a port was taken between probe and bind.
                Err(e @ SpawnError::NoStart { .. }) => {
                    clock = server.clock.take();
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        // Cannot fail: every pass of the loop either returned or set it.
        Err(last.expect("the loop ran at least once"))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn spawn(&mut self) -> Result<(), SpawnError> {
        let log = self.log_path();
        // The log survives restarts: count the readiness lines already there.
        let ready_before = self.log().matches(READY).count();
        let mut command = Command::new(redis_server_binary());
        if let Some(clock) = &self.clock {
            command.envs(clock.env());
        }
        let child = command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1"])
            .args(["--daemonize", "no", "--protected-mode", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(SpawnError::Missing)?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // Another test's server may hold the port for a moment and
            // answer the PING: only this process's own log saying it
            // listens makes the server ours (a failed bind exits instead,
            // and the caller tries another port).
            if self.ping().is_ok() && self.log().matches(READY).count() > ready_before {
                let exited = self
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if exited.is_none() {
                    return Ok(());
                }
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let mut stderr = String::new();
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                    if let Some(mut err) = child.stderr.take() {
                        let _ = err.read_to_string(&mut stderr);
                    }
                }
                return Err(SpawnError::NoStart {
                    port: self.port,
                    reason: match exited {
                        Some(status) => format!("it exited with {status}"),
                        None => "it did not answer PING in time".to_string(),
                    },
                    log: format!("{}{stderr}", self.log()),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One blocking PING over a fresh connection.
    fn ping(&self) -> io::Result<()> {
        let mut stream = TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.port).into(),
            Duration::from_millis(200),
        )?;
        stream.set_read_timeout(Some(Duration::from_millis(500)))?;
        stream.write_all(b"PING\r\n")?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        if line.starts_with("+PONG") {
            Ok(())
        } else {
            Err(io::Error::other(format!("unexpected reply {line:?}")))
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TLS port, when started with [`Options::tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The cluster bus port, when started with [`Options::cluster`].
    pub fn cluster_port(&self) -> Option<u16> {
        self.cluster_port
    }

    /// The directory the server runs in (its log, and its data files when
    /// persistence is on).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Thaw first: a stopped process still dies on SIGKILL, but its
            // socket closes only once it is reaped.
            let _ = signal(child.id(), libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
        self.frozen.store(false, Ordering::Relaxed);
    }

    /// SIGSTOP: the process keeps its sockets but answers nothing.
    ///
    /// # Errors
    /// When the process is gone.
    pub fn freeze(&self) -> io::Result<()> {
        signal(self.pid().ok_or_else(not_running)?, libc::SIGSTOP)?;
        self.frozen.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Frozen by [`RedisServer::freeze`] and not thawed, killed or
    /// restarted since.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }

    /// SIGCONT after [`RedisServer::freeze`].
    ///
    /// # Errors
    /// When the process is gone.
    pub fn thaw(&self) -> io::Result<()> {
        signal(self.pid().ok_or_else(not_running)?, libc::SIGCONT)?;
        self.frozen.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Starts the master again on the same port, empty (no persistence),
    /// killing it first if it still runs.
    ///
    /// # Errors
    /// When it does not come back in time.
    pub fn restart(&mut self) -> Result<(), SpawnError> {
        self.kill();
        self.spawn()
    }

    /// The clock library's control, when started with [`Options::clock`].
    pub(crate) fn clock_shim(&self) -> Option<&ClockControl> {
        self.clock.as_ref()
    }

    /// Where [`RedisServer::save`] keeps the snapshot.
    pub fn snapshot_path(&self) -> PathBuf {
        self.dir.join(SNAPSHOT)
    }

    /// `SAVE`: the dataset as it is now (keys with their expiry times, the
    /// incarnation marker an agent wrote among them) is kept as this
    /// master's snapshot, replacing any earlier one, for
    /// [`RedisServer::restart_from_snapshot`]. The dump file `SAVE` writes
    /// is moved aside at once, so a plain restart still comes back empty.
    ///
    /// # Errors
    /// When the master does not answer or cannot write its dump.
    pub fn save(&self) -> io::Result<()> {
        let client = redis::Client::open(self.url()).map_err(io::Error::other)?;
        let mut conn = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(io::Error::other)?;
        redis::cmd("SAVE")
            .query::<()>(&mut conn)
            .map_err(|e| io::Error::other(format!("SAVE on {}: {e}", self.name)))?;
        std::fs::rename(self.dir.join(DUMP), self.snapshot_path())
    }

    /// Kills the master (SIGKILL) and starts it again on the same port
    /// from its last [`RedisServer::save`]: what it held then, and nothing
    /// written since, as a master restored from an old snapshot. The
    /// snapshot is kept (a later call restores it again); the process is
    /// not killed when there is none. Not for [`Options::aof_always`]
    /// masters (they load their append-only file instead).
    ///
    /// # Errors
    /// When there is no snapshot, or the master does not come back in time.
    pub fn restart_from_snapshot(&mut self) -> Result<(), SpawnError> {
        if !self.snapshot_path().is_file() {
            return Err(SpawnError::NoSnapshot(self.name.clone()));
        }
        self.kill();
        let dump = self.dir.join(DUMP);
        std::fs::copy(self.snapshot_path(), &dump)?;
        let started = self.spawn();
        // Loaded (or failed): the next plain restart is empty again.
        let _ = std::fs::remove_file(&dump);
        started
    }
}

/// The dump file `redis-server` loads at start and `SAVE` writes (its
/// default `dbfilename`).
const DUMP: &str = "dump.rdb";

/// Where [`RedisServer::save`] moves the dump to.
const SNAPSHOT: &str = "snapshot.rdb";

fn not_running() -> io::Error {
    io::Error::other("redis-server is not running")
}

fn signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill(2) has no memory effects; a stale pid at worst fails.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- log of master {} (port {}) ---\n{}",
                self.name,
                self.port,
                self.log()
            );
        }
        self.kill();
    }
}

/// A TLS listener's files, for [`Options::tls`]; paths as `redis-server`
/// takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_file: PathBuf,
    /// `tls-auth-clients`: require a client certificate signed by the CA.
    pub auth_clients: bool,
}

/// What a [`RedisServer`] runs with beyond its port, directory and log.
/// The default is what a Redlock master should be in tests: no
/// persistence, no memory limit, plain TCP, the default user only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// `appendonly yes` with `appendfsync always`: the one persistence mode
    /// under which a restart loses no lock.
    pub aof_always: bool,
    /// A TLS port beside the plain one (which the readiness PING uses).
    pub tls: Option<Tls>,
    /// `replicaof 127.0.0.1 <port>`.
    pub replica_of: Option<u16>,
    /// `maxmemory` and `maxmemory-policy`, e.g. `("4mb", "volatile-lru")`.
    pub maxmemory: Option<(String, String)>,
    /// `user` lines, e.g. `"redlock on >pw ~* +@all"`, each one ACL rule set.
    pub users: Vec<String>,
    /// `cluster-enabled yes` with this `cluster-node-timeout`.
    pub cluster_node_timeout: Option<Duration>,
    /// The wall clock the test moves ([`crate::clock`]), through the clock
    /// library preloaded into the process.
    pub clock: bool,
    /// Any other arguments, after all of the above.
    pub extra: Vec<String>,
}

impl Options {
    pub fn new() -> Options {
        Options::default()
    }

    /// Append-only file, fsync on every write (`appendfsync always`).
    pub fn aof_always(mut self) -> Options {
        self.aof_always = true;
        self
    }

    /// A TLS listener on a second free port ([`RedisServer::tls_port`]).
    pub fn tls(mut self, tls: Tls) -> Options {
        self.tls = Some(tls);
        self
    }

    /// A replica of the master on loopback `port`.
    pub fn replica_of(mut self, port: u16) -> Options {
        self.replica_of = Some(port);
        self
    }

    /// A memory limit with an eviction policy.
    pub fn maxmemory(mut self, limit: &str, policy: &str) -> Options {
        self.maxmemory = Some((limit.to_string(), policy.to_string()));
        self
    }

    /// An ACL user, as the rules of one `user` config line.
    pub fn user(mut self, rules: &str) -> Options {
        self.users.push(rules.to_string());
        self
    }

    /// A Redis Cluster node (`cluster-enabled yes`) that declares a peer
    /// failing after `node_timeout` without an answer (`cluster-node-timeout`;
    /// low in tests, for fast failovers), its `nodes.conf` in its directory,
    /// its cluster bus on a second free port ([`RedisServer::cluster_port`]).
    /// [`crate::RedisCluster`] joins such nodes into a cluster.
    pub fn cluster(mut self, node_timeout: Duration) -> Options {
        self.cluster_node_timeout = Some(node_timeout);
        self
    }

    /// A wall clock the test can move: jumped, frozen, put back
    /// ([`RedisServer::jump_clock`] and the rest), so that the master
    /// expires keys early or late. Needs a C compiler as `cc` (the clock
    /// library is built on first use).
    pub fn clock(mut self) -> Options {
        self.clock = true;
        self
    }

    /// Extra `redis-server` arguments, e.g. `["--bind", "127.0.0.1", "127.0.0.2"]`
    /// (later arguments win over earlier ones).
    pub fn args(mut self, args: &[&str]) -> Options {
        self.extra.extend(args.iter().map(ToString::to_string));
        self
    }

    /// The `redis-server` arguments, given the TLS and cluster bus ports picked.
    fn to_args(&self, tls_port: Option<u16>, cluster_port: Option<u16>) -> Vec<String> {
        let mut args: Vec<String> = Vec::new();
        let mut push = |words: &[&str]| args.extend(words.iter().map(ToString::to_string));
        if self.aof_always {
            push(&[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ]);
        } else {
            push(&["--save", "", "--appendonly", "no"]);
        }
        if let (Some(tls), Some(port)) = (&self.tls, tls_port) {
            let path = |p: &PathBuf| p.display().to_string();
            push(&["--tls-port", &port.to_string()]);
            push(&["--tls-cert-file", &path(&tls.cert_file)]);
            push(&["--tls-key-file", &path(&tls.key_file)]);
            push(&["--tls-ca-cert-file", &path(&tls.ca_file)]);
            push(&[
                "--tls-auth-clients",
                if tls.auth_clients { "yes" } else { "no" },
            ]);
        }
        if let Some(port) = self.replica_of {
            push(&["--replicaof", "127.0.0.1", &port.to_string()]);
        }
        if let Some((limit, policy)) = &self.maxmemory {
            push(&["--maxmemory", limit, "--maxmemory-policy", policy]);
        }
        for user in &self.users {
            let mut words = vec!["--user"];
            words.extend(user.split_whitespace());
            push(&words);
        }
        if let (Some(timeout), Some(port)) = (self.cluster_node_timeout, cluster_port) {
            push(&["--cluster-enabled", "yes"]);
            push(&["--cluster-config-file", "nodes.conf"]);
            push(&["--cluster-node-timeout", &timeout.as_millis().to_string()]);
            push(&["--cluster-port", &port.to_string()]);
        }
        args.extend(self.extra.iter().cloned());
        args
    }
}

/// A master's wall clock, for masters started with [`Options::clock`]
/// (see [`crate::clock`]).
impl RedisServer {
    fn clock_control(&self) -> Result<&ClockControl, ClockError> {
        self.clock_shim()
            .ok_or_else(|| ClockError::NotShimmed(self.name().to_string()))
    }

    /// Where the master's clock is now; `None` without the clock library.
    pub fn clock(&self) -> Option<Clock> {
        self.clock_shim().map(ClockControl::get)
    }

    /// Jumps the master's wall clock by `ms` (negative: back), at once; a
    /// frozen clock stays frozen, `ms` further on. Forward past a key's TTL,
    /// the key is gone at the master's next look at it.
    ///
    /// # Errors
    /// When the master was started without [`crate::Options::clock`], or
    /// the control file cannot be written.
    pub fn jump_clock(&self, ms: i64) -> Result<Clock, ClockError> {
        self.clock_control()?.update(|c, _| c.jumped(ms))
    }

    /// Stops the master's wall clock where it reads now: TTLs stop running
    /// down, `TIME` stops moving.
    ///
    /// # Errors
    /// As [`RedisServer::jump_clock`].
    pub fn freeze_clock(&self) -> Result<Clock, ClockError> {
        self.clock_control()?.update(Clock::frozen)
    }

    /// Lets a frozen clock run again from where it stopped (behind the real
    /// one by how long it stood still); a running clock is left as it is.
    ///
    /// # Errors
    /// As [`RedisServer::jump_clock`].
    pub fn resume_clock(&self) -> Result<Clock, ClockError> {
        self.clock_control()?.update(Clock::resumed)
    }

    /// Puts the master back on the real wall clock (a jump by however far
    /// it was off).
    ///
    /// # Errors
    /// As [`RedisServer::jump_clock`].
    pub fn clear_clock(&self) -> Result<Clock, ClockError> {
        self.clock_control()?.update(|_, _| Clock::Real)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_arguments_in_a_fixed_order() {
        let args = Options::new()
            .replica_of(7000)
            .maxmemory("4mb", "volatile-lru")
            .args(&["--bind", "127.0.0.1", "127.0.0.2"])
            .to_args(None, None);
        assert_eq!(
            args.join(" "),
            "--save  --appendonly no --replicaof 127.0.0.1 7000 \
             --maxmemory 4mb --maxmemory-policy volatile-lru --bind 127.0.0.1 127.0.0.2"
        );
        let args = Options::new().aof_always().to_args(None, None);
        assert!(args
            .join(" ")
            .contains("--appendonly yes --appendfsync always"));
        let args = Options::new()
            .cluster(Duration::from_millis(1000))
            .to_args(None, Some(17001));
        assert!(
            args.join(" ").ends_with(
                "--cluster-enabled yes --cluster-config-file nodes.conf \
                 --cluster-node-timeout 1000 --cluster-port 17001"
            ),
            "{args:?}"
        );
    }

    /// A real server: started, answering on its port, with its options in
    /// effect; killed and restarted empty on the same port.
    #[test]
    fn a_real_server_starts_restarts_and_dies_with_its_handle() {
        let dir = tempfile::tempdir().unwrap();
        let mut server = RedisServer::start_opts(
            dir.path(),
            "r1",
            &Options::new()
                .maxmemory("4mb", "noeviction")
                .user("tester on >pw ~* +@all"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let port = server.port();
        assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
        assert!(server.ping().is_ok());
        assert!(
            server.log().contains("Ready to accept connections"),
            "{}",
            server.log()
        );
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(b"AUTH tester pw\r\n").unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        assert_eq!(line, "+OK\r\n", "the ACL user exists");
        server.freeze().unwrap();
        assert!(server.is_frozen());
        assert!(server.ping().is_err(), "frozen, yet it answers");
        server.restart().unwrap();
        assert!(!server.is_frozen());
        assert_eq!(server.port(), port);
        assert!(server.ping().is_ok());
        server.kill();
        assert!(server.ping().is_err(), "killed, yet it answers");
        assert!(server.pid().is_none());
    }

    /// A master restored from its snapshot has the keys it had at `save`
    /// (with their TTLs) and none written since, comes back as a new
    /// process on the same port, and can be restored again; a plain
    /// restart after that is empty.
    #[test]
    fn a_restart_from_a_snapshot_brings_back_what_was_saved_and_nothing_since() {
        let dir = tempfile::tempdir().unwrap();
        let mut server = RedisServer::start(dir.path(), "r1").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            server.restart_from_snapshot(),
            Err(SpawnError::NoSnapshot(_))
        ));
        assert!(server.pid().is_some(), "not killed without a snapshot");
        let client = redis::Client::open(server.url()).unwrap();
        let conn = || {
            client
                .get_connection_with_timeout(Duration::from_secs(2))
                .unwrap()
        };
        let set = |key: &str, ttl_ms: Option<u64>| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg("v");
            if let Some(ms) = ttl_ms {
                cmd.arg("PX").arg(ms);
            }
            cmd.query::<()>(&mut conn()).unwrap();
        };
        let keys = || {
            let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn()).unwrap();
            keys.sort();
            keys
        };
        set("marker", None);
        set("held", Some(60_000));
        server.save().unwrap();
        set("later", Some(60_000));
        let pid = server.pid();

        server
            .restart_from_snapshot()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(server.pid(), pid, "a new process");
        assert_eq!(keys(), ["held", "marker"]);
        let ttl: i64 = redis::cmd("PTTL").arg("held").query(&mut conn()).unwrap();
        assert!((1..=60_000).contains(&ttl), "the TTL is kept: {ttl}");
        set("later", None);
        server
            .restart_from_snapshot()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keys(), ["held", "marker"], "restored again");

        server.restart().unwrap_or_else(|e| panic!("{e}"));
        assert!(keys().is_empty(), "a plain restart is empty");
        assert!(server.snapshot_path().is_file());
    }
}
