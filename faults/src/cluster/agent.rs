//! The agents as child processes of the `redlock-agent` binary: finding it
//! current, spawning, killing and restarting them, their logs and memory.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::client::Client;

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
