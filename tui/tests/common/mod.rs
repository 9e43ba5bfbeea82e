//! The end-to-end harness: the real `redlock-tui` binary in a tmux pane,
//! against a real `redlock-agent dev` and its three real `redis-server`
//! masters.
//!
//! tmux gives the TUI a real terminal of 120x35; the test types with
//! `send-keys` and reads the screen with `capture-pane -p`. Every wait is
//! for a condition with a deadline. tmux (a private server), the agent,
//! its masters and the restarted master are all cleaned up by guards, so a
//! failing assertion leaves nothing behind; on failure the last screen and
//! the agent's log are printed.
#![allow(dead_code)] // each test binary uses a different part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const WIDTH: u16 = 120;
pub const HEIGHT: u16 = 35;
pub const PROMPT: &str = "tui-e2e$ ";

/// Waits for `check` to return `Some` before `timeout`, polling.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                context()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn require(tool: &str, args: &[&str]) {
    let found = Command::new(tool)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{tool} is needed for this test; install it (apt-get install -y {tool})"
    );
}

/// `redlock-agent` next to `redlock-tui`, built before the tests and
/// current with its sources. Never built here: a build from a test would
/// wait on any other build's cargo locks with the test's timeout running.
pub fn agent_binary() -> PathBuf {
    redlock_testkit::bins::workspace_binary("redlock-agent").unwrap_or_else(|e| panic!("{e}"))
}

pub fn signal(pid: u32, signal: libc::c_int) -> bool {
    // SAFETY: kill(2) has no memory effects; a stale pid at worst fails.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// Is `pid` a live redis-server? Guards against killing a reused pid.
pub fn is_redis(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("redis-server"))
}

/// One Redis command over a fresh connection; the raw reply.
pub fn redis(port: u16, command: &str) -> std::io::Result<String> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut first = String::new();
    reader.read_line(&mut first)?;
    if let Some(len) = first.strip_prefix('$') {
        let len: usize = len.trim().parse().map_err(std::io::Error::other)?;
        let mut body = vec![0; len + 2];
        reader.read_exact(&mut body)?;
        return Ok(String::from_utf8_lossy(&body).to_string());
    }
    Ok(first)
}

/// The pid of the redis-server on `port`, from its own INFO.
pub fn redis_pid(port: u16) -> u32 {
    let info = redis(port, "INFO server").expect("INFO from a master");
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no process_id in INFO of port {port}:\n{info}"))
}

/// One HTTP/1.1 request over the agent's socket: (status, body).
pub fn http(socket: &Path, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {answer:?}")))?;
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// `redlock-agent dev` with its masters; stopped (SIGTERM, then SIGKILL)
/// with its masters when dropped.
pub struct Agent {
    child: Child,
    pub socket: PathBuf,
    /// The admin socket `redlock-agent dev` makes beside `agent.sock`.
    pub admin: PathBuf,
    pub ports: Vec<u16>,
    master_pids: Vec<u32>,
    log: PathBuf,
}

impl Agent {
    pub fn start(dir: &Path, masters: usize) -> Agent {
        let socket = dir.join("agent.sock");
        let log = dir.join("agent.log");
        let child = Command::new(agent_binary())
            .args([
                "dev",
                "--masters",
                &masters.to_string(),
                "--metrics",
                "127.0.0.1:0",
                "--socket",
            ])
            .arg(&socket)
            .env("REDLOCK_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("agent log file"))
            .spawn()
            .expect("start redlock-agent dev");
        let mut agent = Agent {
            child,
            admin: socket.with_file_name("admin.sock"),
            socket,
            ports: Vec::new(),
            master_pids: Vec::new(),
            log,
        };
        // "redlock-agent dev: 3 masters on 127.0.0.1 ports 1, 2, 3; config ..."
        let stdout = agent.child.stdout.take().expect("piped stdout");
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the agent printed no ports\n{}", agent.log()));
        agent.ports = first
            .split_once(" ports ")
            .and_then(|(_, rest)| rest.split(';').next())
            .map(|ports| {
                ports
                    .split(", ")
                    .filter_map(|p| p.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(agent.ports.len(), masters, "ports from {first:?}");
        agent.master_pids = agent.ports.iter().map(|&p| redis_pid(p)).collect();
        let socket = agent.socket.clone();
        wait_for(
            "the agent to serve /v1/nodes",
            Duration::from_secs(30),
            || {
                http(&socket, "GET", "/v1/nodes", "")
                    .ok()
                    .filter(|(s, _)| *s == 200)
            },
            || agent.log(),
        );
        agent
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", self.log());
        }
        // SIGTERM drains and stops the masters it started.
        signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for &pid in &self.master_pids {
            if is_redis(pid) {
                signal(pid, libc::SIGKILL);
            }
        }
    }
}

/// A private tmux server (its socket in the test's temp dir) with one
/// 120x35 session running a plain shell.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    pub fn start(dir: &Path) -> Tmux {
        let tmux = Tmux {
            socket: dir.join("tmux.sock"),
        };
        // Bash sets its own PS1 over an inherited one; an rc file wins.
        let rc = dir.join("bashrc");
        std::fs::write(&rc, format!("PS1='{PROMPT}'\n")).expect("write the shell's rc file");
        let shell = format!("bash --noprofile --rcfile '{}' -i", rc.display());
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&tmux.socket)
            .args(["-f", "/dev/null", "new-session", "-d"])
            .args([
                "-x",
                &WIDTH.to_string(),
                "-y",
                &HEIGHT.to_string(),
                "-s",
                "e2e",
            ])
            .arg(shell)
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        wait_for(
            "the shell prompt",
            Duration::from_secs(10),
            || tmux.screen().contains(PROMPT.trim()).then_some(()),
            || tmux.screen(),
        );
        tmux
    }

    pub fn tmux(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&output.stdout).to_string()
    }

    /// Keys by tmux name: `Enter`, `Escape`, `C-d`, `q`.
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "e2e"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Text typed as is.
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "e2e", "-l", text]);
    }

    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "e2e"])
    }

    pub fn display(&self, format: &str) -> String {
        self.tmux(&["display-message", "-p", "-t", "e2e", format])
            .trim()
            .to_string()
    }

    /// Waits until the screen passes `check`.
    pub fn wait_until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        wait_for(
            what,
            Duration::from_secs(20),
            || {
                let screen = self.screen();
                check(&screen).then_some(screen)
            },
            || format!("--- screen ---\n{}", self.screen()),
        )
    }

    pub fn wait_for_text(&self, text: &str) -> String {
        self.wait_until(&format!("{text:?} on screen"), |s| s.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- last screen ---\n{}", self.screen());
        }
        self.tmux(&["kill-server"]);
    }
}

/// The table row of `name` (a master or a resource).
pub fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("│{name} ");
    screen.lines().find(|l| l.starts_with(&prefix))
}

pub fn words(line: &str) -> Vec<&str> {
    line.trim_matches('│').split_whitespace().collect()
}
