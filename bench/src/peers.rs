//! The peers and how to start each one's driver: the Rust drivers are this
//! binary (`redlock-bench drive`), node-redlock runs under node, pottery
//! under the benchmark's venv. A driver runs in its own process, so each
//! peer has the machine to itself while it runs. W7's driver,
//! `bench/python/processes.py`, starts one process per client: under the
//! system `python3 -I` (the standard library only) for the agent, under the
//! venv's python for pottery.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::spec::{Report, Spec};

/// A peer in the table, in row order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Agent,
    Rslock,
    Redlock,
    NodeRedlock,
    Pottery,
}

impl Peer {
    pub const ALL: [Peer; 5] = [
        Peer::Agent,
        Peer::Rslock,
        Peer::Redlock,
        Peer::NodeRedlock,
        Peer::Pottery,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Peer::Agent => "agent",
            Peer::Rslock => "rslock",
            Peer::Redlock => "redlock",
            Peer::NodeRedlock => "node-redlock",
            Peer::Pottery => "pottery",
        }
    }

    /// How the row is labelled in the table.
    pub fn label(self) -> &'static str {
        match self {
            Peer::Agent => "redlock-agent (socket)",
            Peer::Rslock => "rslock (Rust, in-process)",
            Peer::Redlock => "redlock (Rust crate)",
            Peer::NodeRedlock => "redlock (npm, node-redlock v5 beta)",
            Peer::Pottery => "pottery Redlock (PyPI)",
        }
    }

    pub fn parse(name: &str) -> Option<Peer> {
        Peer::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Where the drivers are.
#[derive(Debug, Clone)]
pub struct Drivers {
    /// This binary.
    pub exe: PathBuf,
    /// `bench/node/driver.mjs`, when node-redlock is installed.
    pub node: Option<PathBuf>,
    /// The venv's python and `bench/python/driver.py`, when pottery is.
    pub python: Option<(PathBuf, PathBuf)>,
    /// `bench/python/processes.py`, W7's driver (a process per client).
    pub processes: PathBuf,
    /// `clients/python/src`, the directory of the standard-library client's
    /// package (`redlock_client/`) W7's agent processes import.
    pub python_client: PathBuf,
}

/// The interpreter W7's agent processes run under: the system's, with
/// `-I` (no user site, no `PYTHON*` variables), so nothing but the
/// standard library and the client file can be imported.
const SYSTEM_PYTHON: &str = "python3";

impl Drivers {
    /// Why `peer` cannot run here, if it cannot.
    pub fn unavailable(&self, peer: Peer) -> Option<String> {
        match peer {
            Peer::NodeRedlock if self.node.is_none() => {
                Some("not installed (npm ci failed?)".into())
            }
            Peer::Pottery if self.python.is_none() => Some("not installed (no venv)".into()),
            _ => None,
        }
    }

    /// Why `peer` cannot run W7 (a process per client) here, if it cannot.
    pub fn processes_unavailable(&self, peer: Peer) -> Option<String> {
        if !self.processes.is_file() {
            return Some(format!("no driver at {}", self.processes.display()));
        }
        match peer {
            Peer::Agent
                if !self
                    .python_client
                    .join("redlock_client")
                    .join("__init__.py")
                    .is_file() =>
            {
                Some(format!(
                    "no redlock_client package in {}",
                    self.python_client.display()
                ))
            }
            Peer::Agent | Peer::Pottery => self.unavailable(peer),
            _ => Some("W7 runs the agent and pottery only".into()),
        }
    }

    /// Runs W7's driver for `peer` (the agent or pottery): `spec.clients`
    /// processes, one client each; its report, or why it failed.
    ///
    /// # Errors
    /// As [`Drivers::run`].
    pub fn run_processes(
        &self,
        peer: Peer,
        spec: &Spec,
        timeout: Duration,
    ) -> Result<Report, String> {
        let json = serde_json::to_string(spec).map_err(|e| e.to_string())?;
        let mut command = match peer {
            Peer::Agent => {
                let mut c = Command::new(SYSTEM_PYTHON);
                c.arg("-I");
                c
            }
            Peer::Pottery => {
                let (python, _) = self.python.as_ref().ok_or("pottery is not installed")?;
                Command::new(python)
            }
            other => return Err(format!("W7 has no driver for {}", other.name())),
        };
        command.arg(&self.processes).arg(&json);
        run_command(peer, command, timeout, None)
    }

    /// Runs one driver; its report, or why it failed. `during` is called
    /// once, that long after the driver said `ready` on stderr (its clients
    /// are connected and its clock has started): a fault to inject.
    ///
    /// # Errors
    /// When the driver cannot start, exits non-zero, prints no report, or
    /// outlives `timeout` (it is killed).
    pub fn run(
        &self,
        peer: Peer,
        spec: &Spec,
        timeout: Duration,
        during: Option<(Duration, &mut dyn FnMut())>,
    ) -> Result<Report, String> {
        let json = serde_json::to_string(spec).map_err(|e| e.to_string())?;
        let command = match peer {
            Peer::Agent | Peer::Rslock | Peer::Redlock => {
                let mut c = Command::new(&self.exe);
                c.arg("drive").arg(&json);
                c
            }
            Peer::NodeRedlock => {
                let script = self.node.as_ref().ok_or("node-redlock is not installed")?;
                let mut c = Command::new("node");
                c.arg(script).arg(&json);
                c
            }
            Peer::Pottery => {
                let (python, script) = self.python.as_ref().ok_or("pottery is not installed")?;
                let mut c = Command::new(python);
                c.arg(script).arg(&json);
                c
            }
        };
        run_command(peer, command, timeout, during)
    }
}

/// Runs one driver's `command`; see [`Drivers::run`].
fn run_command(
    peer: Peer,
    mut command: Command,
    timeout: Duration,
    mut during: Option<(Duration, &mut dyn FnMut())>,
) -> Result<Report, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the {} driver: {e}", peer.name()))?;
    // Drain both pipes on threads so a chatty driver cannot block.
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let (ready_tx, ready_rx) = mpsc::channel();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line == "ready" {
                let _ = ready_tx.send(Instant::now());
            } else {
                s.push_str(&line);
                s.push('\n');
            }
        }
        s
    });
    let until = Instant::now() + timeout;
    let mut ready = None;
    let status = loop {
        if let Ok(at) = ready_rx.try_recv() {
            ready = Some(at);
        }
        if let (Some((after, _)), Some(ready)) = (&during, ready) {
            if ready.elapsed() >= *after {
                if let Some((_, action)) = during.take() {
                    action();
                }
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= until => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(e.to_string()),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    // The last stderr line first (usually the error), then the tail.
    let tail = |s: &str| {
        let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        let last = lines.last().copied().unwrap_or("(no stderr)");
        let from = lines.len().saturating_sub(8);
        let before = &lines[from..lines.len().saturating_sub(1)];
        if before.is_empty() {
            last.to_string()
        } else {
            format!("{last}\n{}", before.join("\n"))
        }
    };
    let Some(status) = status else {
        return Err(format!(
            "did not finish within {timeout:?}: {}",
            tail(&stderr)
        ));
    };
    if !status.success() {
        return Err(format!("{status}: {}", tail(&stderr)));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let line = line.ok_or_else(|| format!("printed no report: {}", tail(&stderr)))?;
    serde_json::from_str(line).map_err(|e| format!("bad report ({e}): {line}"))
}
