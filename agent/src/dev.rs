//! Local Redis masters as child processes: the embedded cluster behind
//! `redlock-agent dev`, and the harness the integration tests use.
//!
//! ## Behavior
//! - Each master runs `redis-server` on a free loopback port with no
//!   persistence, in its own directory, logging to a file there.
//! - A master is killed (SIGKILL) when its [`RedisServer`] is dropped; if the
//!   thread is panicking (a failing test) its log is printed first.
//! - `restart` starts it again on the same port with no data: the crash the
//!   Redlock page's delayed-restart section is about.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
}

/// One `redis-server` child process on a loopback port.
#[derive(Debug)]
pub struct RedisServer {
    name: String,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    extra_args: Vec<String>,
}

/// A port nobody listens on right now. Another process may take it before
/// we do; [`RedisServer::start`] retries with a new one when that happens.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

impl RedisServer {
    /// Starts a master named `name` with its files under `parent/name`.
    ///
    /// # Errors
    /// When `redis-server` is missing or does not answer PING in time.
    pub fn start(parent: &Path, name: &str) -> Result<RedisServer, SpawnError> {
        RedisServer::start_with(parent, name, &[])
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
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir)?;
        let mut last = None;
        for _ in 0..5 {
            let mut server = RedisServer {
                name: name.to_string(),
                port: free_port()?,
                dir: dir.clone(),
                child: None,
                extra_args: extra.iter().map(ToString::to_string).collect(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                // Most likely the port was taken between probe and bind.
                Err(e @ SpawnError::NoStart { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("the loop ran at least once"))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn spawn(&mut self) -> Result<(), SpawnError> {
        let log = self.log_path();
        let child = Command::new(redis_server_binary())
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--protected-mode", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(SpawnError::Missing)?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.ping().is_ok() {
                return Ok(());
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
    }

    /// SIGSTOP: the process keeps its sockets but answers nothing.
    ///
    /// # Errors
    /// When the process is gone.
    pub fn freeze(&self) -> io::Result<()> {
        signal(self.pid().ok_or_else(not_running)?, libc::SIGSTOP)
    }

    /// SIGCONT after [`RedisServer::freeze`].
    ///
    /// # Errors
    /// When the process is gone.
    pub fn thaw(&self) -> io::Result<()> {
        signal(self.pid().ok_or_else(not_running)?, libc::SIGCONT)
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
}

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

/// The config YAML for an agent over `masters`, as `redlock-agent dev`
/// writes it.
pub fn config_yaml(socket: &Path, metrics: &str, masters: &[RedisServer]) -> String {
    let mut yaml = format!(
        "socket:\n  path: {:?}\nmetrics:\n  listen: {metrics:?}\nmasters:\n",
        socket.display().to_string()
    );
    for master in masters {
        yaml.push_str(&format!(
            "  - name: {}\n    url: {}\n",
            master.name(),
            master.url()
        ));
    }
    yaml
}
