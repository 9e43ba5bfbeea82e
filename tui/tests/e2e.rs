//! End to end: the real `redlock-tui` binary in a tmux pane, against a real
//! `redlock-agent dev` and its three real `redis-server` masters.
//!
//! tmux gives the TUI a real terminal of 120x35; the test types with
//! `send-keys` and reads the screen with `capture-pane -p`. Every wait is
//! for a condition with a deadline. tmux (a private server), the agent,
//! its masters and the restarted master are all cleaned up by guards, so a
//! failing assertion leaves nothing behind; on failure the last screen and
//! the agent's log are printed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WIDTH: u16 = 120;
const HEIGHT: u16 = 35;
const PROMPT: &str = "tui-e2e$ ";

/// Waits for `check` to return `Some` before `timeout`, polling.
fn wait_for<T>(
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

fn require(tool: &str, args: &[&str]) {
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
fn agent_binary() -> PathBuf {
    redlock_testkit::bins::workspace_binary("redlock-agent").unwrap_or_else(|e| panic!("{e}"))
}

fn signal(pid: u32, signal: libc::c_int) -> bool {
    // SAFETY: kill(2) has no memory effects; a stale pid at worst fails.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// Is `pid` a live redis-server? Guards against killing a reused pid.
fn is_redis(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("redis-server"))
}

/// One Redis command over a fresh connection; the raw reply.
fn redis(port: u16, command: &str) -> std::io::Result<String> {
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

/// One Redis command in RESP (any bytes in its arguments) over a fresh
/// connection, waiting up to `timeout`; the first line of the reply.
fn redis_args(port: u16, args: &[&str], timeout: Duration) -> std::io::Result<String> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))?;
    stream.set_read_timeout(Some(timeout))?;
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(command.as_bytes())?;
    let mut first = String::new();
    BufReader::new(stream).read_line(&mut first)?;
    Ok(first)
}

/// The pid of the redis-server on `port`, from its own INFO.
fn redis_pid(port: u16) -> u32 {
    let info = redis(port, "INFO server").expect("INFO from a master");
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no process_id in INFO of port {port}:\n{info}"))
}

/// One HTTP/1.1 request over the agent's socket: (status, body).
fn http(socket: &Path, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
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
struct Agent {
    child: Child,
    socket: PathBuf,
    /// The admin socket `redlock-agent dev` makes beside `agent.sock`.
    admin: PathBuf,
    ports: Vec<u16>,
    master_pids: Vec<u32>,
    log: PathBuf,
}

impl Agent {
    fn start(dir: &Path, masters: usize) -> Agent {
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

    fn log(&self) -> String {
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

/// A master started by the test in place of a killed one.
struct Master(Child);

impl Master {
    fn start(port: u16, dir: &Path) -> Master {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--bind", "127.0.0.1", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let master = Master(child);
        wait_for(
            "the restarted master to answer PING",
            Duration::from_secs(10),
            || redis(port, "PING").ok().filter(|r| r.starts_with("+PONG")),
            String::new,
        );
        master
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A private tmux server (its socket in the test's temp dir) with one
/// 120x35 session running a plain shell.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(dir: &Path) -> Tmux {
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

    fn tmux(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&output.stdout).to_string()
    }

    /// Keys by tmux name: `Enter`, `Escape`, `C-d`, `q`.
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "e2e"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Text typed as is.
    fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "e2e", "-l", text]);
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "e2e"])
    }

    fn display(&self, format: &str) -> String {
        self.tmux(&["display-message", "-p", "-t", "e2e", format])
            .trim()
            .to_string()
    }

    /// Waits until the screen passes `check`.
    fn wait_until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
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

    fn wait_for_text(&self, text: &str) -> String {
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
fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("│{name} ");
    screen.lines().find(|l| l.starts_with(&prefix))
}

fn words(line: &str) -> Vec<&str> {
    line.trim_matches('│').split_whitespace().collect()
}

#[test]
fn the_tui_follows_a_real_agent_and_restores_the_terminal() {
    require("tmux", &["-V"]);
    require("redis-server", &["--version"]);
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), 3);
    let tmux = Tmux::start(dir.path());

    let command = format!(
        "'{}' --socket '{}' --refresh 250ms",
        env!("CARGO_BIN_EXE_redlock-tui"),
        agent.admin.display()
    );
    tmux.type_text(&command);
    tmux.keys(&["Enter"]);

    // Every master up, on the nodes view.
    tmux.wait_until("three masters up", |s| {
        s.contains("CONNECTED")
            && s.contains("3/3 usable, quorum 2")
            && ["r1", "r2", "r3"]
                .iter()
                .all(|m| row(s, m).is_some_and(|r| words(r).get(1) == Some(&"up")))
    });
    assert_eq!(
        tmux.display("#{alternate_on}"),
        "1",
        "the TUI uses the alternate screen"
    );

    // A lock taken through the API shows with its resource and TTLs.
    let (status, body) = http(
        &agent.socket,
        "POST",
        "/v1/locks/e2e-demo/acquire",
        r#"{"ttl_ms":30000,"owner":"e2e"}"#,
    )
    .expect("acquire over the socket");
    assert_eq!(status, 200, "{body}");
    // This process asked: the agent saw its pid; the lock names the agent.
    let pid = std::process::id();
    let (_, locks) = http(&agent.socket, "GET", "/v1/locks", "").expect("/v1/locks");
    let agent_name = regex::Regex::new(r#""agent":"([A-Za-z0-9_-]+)""#)
        .unwrap()
        .captures(&locks)
        .unwrap_or_else(|| panic!("an agent name in {locks}"))[1]
        .to_string();
    assert!(locks.contains(&format!("\"pid\":{pid}")), "{locks}");
    tmux.type_text(":locks");
    tmux.keys(&["Enter"]);
    let ttl = regex::Regex::new(r"^\d+\.\ds$").unwrap();
    let screen = tmux.wait_until("the lock with its TTLs", |s| {
        row(s, "e2e-demo").is_some_and(|r| {
            let w = words(r);
            w.len() >= 9 && w[1] == "e2e" && w[2..6].iter().all(|c| ttl.is_match(c))
        })
    });
    let header = screen
        .lines()
        .find(|l| l.contains("RESOURCE"))
        .expect("the locks header");
    assert_eq!(
        &words(header)[..6],
        ["RESOURCE↑", "OWNER", "VALIDITY", "r1", "r2", "r3"],
        "{header}"
    );
    assert!(words(header).contains(&"HOLDER"), "{header}");
    let lock = words(row(&screen, "e2e-demo").unwrap()).join(" ");
    assert!(
        lock.ends_with(&format!("yes 0 yes {agent_name}/{pid}")),
        "quorum agrees, no waiters, held here, by this process: {lock}"
    );

    // `/` filters by regex (the agent by its literal start), `/!` inverts,
    // Escape clears.
    tmux.type_text("/^nomatch$");
    tmux.keys(&["Enter"]);
    tmux.wait_until("the filter to hide the lock", |s| {
        s.contains("Locks [0/0]")
            && s.contains("no lock keys start with \"nomatch\"")
            && row(s, "e2e-demo").is_none()
    });
    tmux.keys(&["Escape"]);
    tmux.wait_until("the filter to clear", |s| {
        s.contains("Locks [1/1]") && row(s, "e2e-demo").is_some()
    });
    tmux.type_text("/!^e2e-");
    tmux.keys(&["Enter"]);
    tmux.wait_until("the inverted filter to hide the lock", |s| {
        s.contains("Locks [0/1]")
    });
    tmux.keys(&["Escape"]);
    tmux.wait_until("the filter to clear again", |s| s.contains("Locks [1/1]"));
    tmux.type_text("/e2e-d");
    tmux.keys(&["Enter"]);
    tmux.wait_until("the filter to keep the lock", |s| {
        s.contains("Locks [1/1]") && s.contains("filter /e2e-d") && row(s, "e2e-demo").is_some()
    });

    // Enter opens the detail: the holder's agent, pid, uid and gid.
    tmux.keys(&["Enter"]);
    // SAFETY: getuid/getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    tmux.wait_for_text(&format!(
        "holder    agent {agent_name} · pid {pid} · uid {uid} · gid {gid}"
    ));

    // Ctrl-d asks, naming the resource and its holder; `y` force-releases
    // it through the agent's admin socket.
    tmux.keys(&["C-d"]);
    tmux.wait_until("the confirm dialog", |s| {
        s.contains("Force-release e2e-demo?") && s.contains("Holder: e2e · on 3 of 3 masters")
    });
    tmux.keys(&["y"]);
    // The flash says what the agent did: deleted on all three masters or,
    // when one answered late (the dev agent keeps the default 50ms node
    // timeout, which a busy machine misses), on the others, naming it.
    tmux.wait_until("the lock to be released", |s| {
        (s.contains("force-released e2e-demo: deleted on 3 masters")
            || s.contains("force-released e2e-demo on 2 masters; could not reach r"))
            && row(s, "e2e-demo").is_none()
    });

    // Escape leaves the detail; `:nodes` switches back.
    tmux.keys(&["Escape"]);
    tmux.type_text(":nodes");
    tmux.keys(&["Enter"]);
    tmux.wait_for_text("Nodes [3]");

    // A master restarted without its data is quarantined.
    let port = agent.ports[1];
    let pid = redis_pid(port);
    assert!(signal(pid, libc::SIGKILL), "kill the master on port {port}");
    wait_for(
        "the master's port to close",
        Duration::from_secs(10),
        || {
            TcpStream::connect(("127.0.0.1", port))
                .is_err()
                .then_some(())
        },
        String::new,
    );
    let restarted_dir = dir.path().join("restarted");
    std::fs::create_dir_all(&restarted_dir).unwrap();
    let _restarted = Master::start(port, &restarted_dir);
    let screen = tmux.wait_until("r2 quarantined", |s| {
        row(s, "r2").is_some_and(|r| words(r).get(1) == Some(&"quarantined"))
    });
    assert!(screen.contains("2/3 usable, quorum 2"), "{screen}");

    // `?` opens the help, Escape closes it.
    tmux.keys(&["?"]);
    tmux.wait_until("the help", |s| {
        s.contains("Help · keys") && s.contains("force-release the lock")
    });
    tmux.keys(&["Escape"]);
    tmux.wait_until("the help to close", |s| {
        !s.contains("Help · keys") && s.contains("Nodes [3]")
    });

    // `q` quits and gives the shell its terminal back.
    tmux.keys(&["q"]);
    wait_for(
        "the TUI to leave the alternate screen",
        Duration::from_secs(10),
        || (tmux.display("#{alternate_on}") == "0").then_some(()),
        || tmux.screen(),
    );
    let screen = tmux.wait_until("the shell prompt after the TUI", |s| {
        s.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| l.trim_end() == PROMPT.trim_end())
    });
    assert!(
        !screen.contains("CONNECTED"),
        "the TUI's screen is gone:\n{screen}"
    );
    assert_eq!(
        tmux.display("#{cursor_flag}"),
        "1",
        "the cursor is visible again"
    );
    assert_eq!(tmux.display("#{pane_current_command}"), "bash");
    // The shell reads lines again: the terminal left raw mode.
    tmux.type_text("echo restored-$((40+2))");
    tmux.keys(&["Enter"]);
    tmux.wait_for_text("\nrestored-42");
}

/// An agent of the test's own config (`redlock-agent --config`), stopped
/// (SIGTERM, then SIGKILL) when dropped; its masters belong to the test.
struct ConfiguredAgent {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl ConfiguredAgent {
    fn start(dir: &Path, masters: &str, rest: &str) -> ConfiguredAgent {
        let socket = dir.join("agent.sock");
        let log = dir.join("agent.log");
        let config = dir.join("agent.yaml");
        std::fs::write(
            &config,
            format!(
                "socket:\n  path: {:?}\nmetrics:\n  listen: \"127.0.0.1:0\"\nlog:\n  level: info\nmasters:\n{masters}{rest}",
                socket.display().to_string()
            ),
        )
        .expect("write the agent's config");
        let child = Command::new(agent_binary())
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("agent log file"))
            .spawn()
            .expect("start redlock-agent");
        let mut agent = ConfiguredAgent { child, socket, log };
        let log = agent.log.clone();
        let (child, socket) = (&mut agent.child, &agent.socket);
        wait_for(
            "the agent to serve /v1/nodes",
            Duration::from_secs(30),
            || {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "the agent exited: {status}\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                http(socket, "GET", "/v1/nodes", "")
                    .ok()
                    .filter(|(s, _)| *s == 200)
            },
            || std::fs::read_to_string(&log).unwrap_or_default(),
        );
        agent
    }
}

impl Drop for ConfiguredAgent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- agent log ---\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 19: a master given as a real Redis Cluster of three primaries
/// (beside two single servers) shows its kind and shards up in the table,
/// its shards in the pane; a shard restarted empty shows its slots
/// quarantined on the master's row and the shard's line until the agent
/// readmits them.
#[test]
fn the_tui_shows_a_cluster_masters_shards_and_quarantined_slots() {
    require("tmux", &["-V"]);
    require("redis-server", &["--version"]);
    let dir = tempfile::tempdir().unwrap();
    let mut cluster =
        redlock_testkit::RedisCluster::start(dir.path(), "c1", 3, 0).expect("start cluster c1");
    let singles: Vec<redlock_testkit::RedisServer> = ["r2", "r3"]
        .iter()
        .map(|name| redlock_testkit::RedisServer::start(dir.path(), name).expect("start a master"))
        .collect();
    let seeds: Vec<String> = cluster.seeds().iter().map(|u| format!("{u:?}")).collect();
    let mut masters = format!("  - name: c1\n    cluster: [{}]\n", seeds.join(", "));
    for (name, server) in ["r2", "r3"].iter().zip(&singles) {
        masters.push_str(&format!("  - name: {name}\n    url: {:?}\n", server.url()));
    }
    // A quarantine long enough to be seen at a 250 ms refresh, short
    // enough for a test: max_ttl 4s + extra 0s; the node timeout the most
    // default_ttl allows, for a busy machine.
    let agent = ConfiguredAgent::start(
        dir.path(),
        &masters,
        "lock:\n  default_ttl: 4s\n  max_ttl: 4s\n  node_timeout: 400ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 0s\n",
    );
    let tmux = Tmux::start(dir.path());
    tmux.type_text(&format!(
        "'{}' --socket '{}' --refresh 250ms",
        env!("CARGO_BIN_EXE_redlock-tui"),
        agent.socket.display()
    ));
    tmux.keys(&["Enter"]);

    // The new cluster's slots are quarantined at first sight, then let in.
    let screen = tmux.wait_until("c1 up, every shard up, no slot quarantined", |s| {
        row(s, "c1")
            .is_some_and(|r| words(r)[..3] == ["c1", "up", "cluster"] && r.contains("cluster 3/3"))
            && s.contains("3/3 usable")
    });
    assert!(screen.contains(" KIND "), "{screen}");
    assert!(
        row(&screen, "r2").is_some_and(|r| r.contains(" single ")),
        "{screen}"
    );

    // c1 sorts first: its pane lists the three primaries by port.
    tmux.keys(&["g"]);
    let ports: Vec<u16> = (0..3).map(|s| cluster.primary_port(s)).collect();
    let screen = tmux.wait_until("c1's shards in the pane", |s| {
        s.contains("│cluster 3 shards, 3 up · 16384 slots")
            && ports
                .iter()
                .all(|p| row(s, &format!("127.0.0.1:{p}")).is_some_and(|r| words(r)[1] == "up"))
    });
    let second = row(&screen, &format!("127.0.0.1:{}", ports[1])).unwrap();
    assert_eq!(words(second)[2], "5461-10921", "{screen}");

    // The second shard loses its keys: its 5461 slots are kept out of locks
    // (the master stays up), then readmitted after the quarantine.
    cluster.restart_empty(1).expect("restart shard 2 empty");
    let screen = tmux.wait_until("c1's second shard's slots quarantined", |s| {
        row(s, "c1").is_some_and(|r| r.contains("up, 5461 slots quarantined"))
    });
    let second = row(&screen, &format!("127.0.0.1:{}", ports[1])).unwrap();
    assert_eq!(words(second)[3], "5461", "{screen}");
    tmux.wait_until("c1's slots readmitted", |s| {
        row(s, "c1").is_some_and(|r| !r.contains("quarantined") && r.contains("cluster 3/3"))
    });
}

/// Lock keys written on every master of the scale test.
const KEYS: usize = 100_000;

/// `KEYS` lock keys `redlock:job-000000` … on the master at `port`, with
/// values of the old token format (`<40 hex>.owner-<i mod 7>`), in server-side loops
/// of 10,000 so no single call blocks the master long.
fn fill(port: u16) {
    const SCRIPT: &str = r#"for i = tonumber(ARGV[1]), tonumber(ARGV[2]) - 1 do
  redis.call("set", "redlock:" .. string.format("job-%06d", i),
    string.format("%040x", i) .. ".owner-" .. (i % 7), "px", 600000)
end"#;
    for start in (0..KEYS).step_by(10_000) {
        let end = (start + 10_000).to_string();
        let reply = redis_args(
            port,
            &["EVAL", SCRIPT, "0", &start.to_string(), &end],
            Duration::from_secs(30),
        )
        .expect("EVAL on a master");
        assert!(reply.starts_with("$-1"), "EVAL answered {reply:?}");
    }
}

/// Issue 18's scale: 100,000 lock keys on 5 real masters. Typing a
/// resource name in the locks view's filter shows that lock (the agent
/// filters by prefix), and Enter on it opens its detail, asked of the
/// agent by name: owner, quorum, and each master's copy.
#[test]
fn the_tui_finds_one_lock_among_a_hundred_thousand() {
    require("tmux", &["-V"]);
    require("redis-server", &["--version"]);
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), 5);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for &port in &agent.ports {
            scope.spawn(move || fill(port));
        }
    });
    eprintln!(
        "wrote {KEYS} keys on each of 5 masters in {:?}",
        started.elapsed()
    );
    // The writes may have made a probe time out: wait for every master.
    wait_for(
        "five usable masters",
        Duration::from_secs(30),
        || {
            http(&agent.socket, "GET", "/v1/nodes", "")
                .ok()
                .filter(|(_, body)| body.contains("\"usable\":5"))
        },
        || agent.log(),
    );

    let tmux = Tmux::start(dir.path());
    let command = format!(
        "'{}' --socket '{}' --refresh 1s",
        env!("CARGO_BIN_EXE_redlock-tui"),
        agent.socket.display()
    );
    tmux.type_text(&command);
    tmux.keys(&["Enter"]);
    tmux.wait_until("five masters up", |s| s.contains("5/5 usable, quorum 3"));
    tmux.type_text(":locks");
    tmux.keys(&["Enter"]);
    tmux.wait_for_text("Locks [");

    let typed = Instant::now();
    tmux.type_text("/job-054321");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_until("the named lock in the table", |s| {
        row(s, "job-054321").is_some() && s.contains("Locks [1/1]")
    });
    let found = typed.elapsed();
    assert!(screen.contains("agent prefix \"job-054321\""), "{screen}");
    let lock = words(row(&screen, "job-054321").unwrap()).join(" ");
    assert!(
        lock.starts_with(&format!("job-054321 owner-{} ", 54_321 % 7)),
        "{lock}"
    );

    // Enter on it: the detail pane, from GET /v1/locks/job-054321.
    let opened = Instant::now();
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_until("the lock's detail", |s| {
        s.contains("Lock job-054321")
            && s.contains("agrees")
            && s.contains("held on 5 of 5 masters · quorum 3")
    });
    let detail = opened.elapsed();
    for master in ["r1", "r2", "r3", "r4", "r5"] {
        assert!(
            screen
                .lines()
                .any(|l| words(l).starts_with(&[master, "held"])),
            "{master} holds it:\n{screen}"
        );
    }
    eprintln!("typed name to row on screen: {found:?}; Enter to detail: {detail:?}");
    tmux.keys(&["Escape"]);
    tmux.keys(&["q"]);
    wait_for(
        "the TUI to leave the alternate screen",
        Duration::from_secs(10),
        || (tmux.display("#{alternate_on}") == "0").then_some(()),
        || tmux.screen(),
    );
}

/// A campaign over the agent's socket, its stream read until this
/// campaigner is elected; closing it (on drop) resigns.
struct Campaign {
    /// Held open while leading: closing it resigns.
    _stream: UnixStream,
}

impl Campaign {
    fn start(socket: &Path, election: &str, body: &str) -> Campaign {
        let mut stream = UnixStream::connect(socket).expect("connect to the agent");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        write!(
            stream,
            "POST /v1/elections/{election}/campaign HTTP/1.1\r\nHost: localhost\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("send the campaign");
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            let n = reader
                .read_line(&mut line)
                .expect("read the campaign stream");
            assert!(n > 0, "the campaign ended before it was elected:\n{seen}");
            seen.push_str(&line);
            if line.contains(r#""event":"elected""#) {
                return Campaign { _stream: stream };
            }
        }
    }
}

/// A permit and a leadership taken through the agent show as such in the
/// locks view, and in the `:primitives` view with the permits held of the
/// limit, the leader's holder, value and term; `ctrl-d` on each asks first,
/// naming the permit of its semaphore or the election's leadership, and
/// `y` force-releases it through the admin socket: the permit is free and
/// the election has no leader.
#[test]
fn the_tui_shows_a_held_permit_and_a_leader() {
    require("tmux", &["-V"]);
    require("redis-server", &["--version"]);
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), 3);
    let tmux = Tmux::start(dir.path());

    let (status, body) = http(
        &agent.socket,
        "POST",
        "/v1/semaphores/e2e-pool/acquire",
        r#"{"limit":2,"ttl_ms":30000,"owner":"worker"}"#,
    )
    .expect("acquire a permit");
    assert_eq!(status, 200, "{body}");
    let _leading = Campaign::start(
        &agent.socket,
        "e2e-sched",
        r#"{"ttl_ms":30000,"owner":"cron","value":"v1"}"#,
    );
    let (status, leader) =
        http(&agent.socket, "GET", "/v1/elections/e2e-sched", "").expect("the leader");
    assert_eq!(status, 200, "{leader}");
    let term = regex::Regex::new(r#""term":(\d+)"#)
        .unwrap()
        .captures(&leader)
        .unwrap_or_else(|| panic!("a term in {leader}"))[1]
        .to_string();
    let agent_name = regex::Regex::new(r#""agent":"([A-Za-z0-9_-]+)""#)
        .unwrap()
        .captures(&leader)
        .unwrap_or_else(|| panic!("an agent in {leader}"))[1]
        .to_string();

    let command = format!(
        "'{}' --socket '{}' --refresh 250ms",
        env!("CARGO_BIN_EXE_redlock-tui"),
        agent.admin.display()
    );
    tmux.type_text(&command);
    tmux.keys(&["Enter"]);
    tmux.wait_for_text("CONNECTED");

    // The locks view: the internal resources, told apart.
    tmux.type_text(":locks");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_until("the permit and the leadership as locks", |s| {
        row(s, "e2e-pool permit 0").is_some() && row(s, "e2e-sched election").is_some()
    });
    assert_eq!(
        words(row(&screen, "e2e-pool permit 0").unwrap())[3..5],
        ["permit", "worker"],
        "{screen}"
    );
    assert_eq!(
        words(row(&screen, "e2e-sched election").unwrap())[2..4],
        ["leader", "cron"],
        "{screen}"
    );
    // Force release asks first, naming the permit of its semaphore; `n`
    // leaves it held.
    tmux.type_text("/^e2e-pool");
    tmux.keys(&["Enter"]);
    tmux.wait_until("the filter to keep the permit", |s| {
        s.contains("Locks [1/1]")
    });
    tmux.keys(&["C-d"]);
    tmux.wait_until("the permit's confirm dialog", |s| {
        s.contains("Force-release permit 0 of semaphore e2e-pool?")
            && s.contains("Holder: worker · on 3 of 3 masters")
    });
    tmux.keys(&["n"]);
    tmux.wait_until("the dialog to close", |s| {
        !s.contains("Force-release permit 0") && row(s, "e2e-pool permit 0").is_some()
    });
    // Its detail pane is the listing's row (the agent's lock route
    // refuses these names): owner and holder, no error.
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_until("the permit's detail pane", |s| {
        s.contains("Lock e2e-pool permit 0") && s.contains("owner     worker")
    });
    assert!(!screen.contains("invalid_resource"), "{screen}");
    // One key at a time: an Escape with a key right behind it reads as Alt.
    tmux.keys(&["Escape"]);
    tmux.wait_until("the pane to close", |s| {
        !s.contains("Lock e2e-pool permit 0")
    });
    tmux.keys(&["Escape"]);
    tmux.wait_until("the filter to clear", |s| s.contains("Locks [2/2]"));

    // The primitives view: permits of the limit and holders; the leader.
    tmux.type_text(":primitives");
    tmux.keys(&["Enter"]);
    let validity = regex::Regex::new(r"^\d+\.\ds$").unwrap();
    let screen = tmux.wait_until("the semaphore and the election", |s| {
        s.contains("here: permits 1 · leading 1")
            && row(s, "semaphore").is_some_and(|r| words(r).get(2) == Some(&"1/2"))
            && row(s, "election").is_some_and(|r| words(r).get(2) == Some(&term.as_str()))
    });
    let pool = words(row(&screen, "semaphore").unwrap());
    assert_eq!(pool[1], "e2e-pool", "{screen}");
    assert!(validity.is_match(pool[3]), "{screen}");
    assert_eq!(pool[4], format!("{agent_name}/worker"), "{screen}");
    let sched = words(row(&screen, "election").unwrap());
    assert_eq!(sched[1], "e2e-sched", "{screen}");
    assert!(validity.is_match(sched[4]), "{screen}");
    assert_eq!(
        sched[5..],
        [format!("{agent_name}/cron").as_str(), "value", "v1"],
        "{screen}"
    );

    // Back in the locks view, `y` force-releases the permit, then the
    // leadership. The flash says what the agent did: deleted on all three
    // masters or, when one answered late, on the others, naming it.
    tmux.type_text(":locks");
    tmux.keys(&["Enter"]);
    tmux.type_text("/^e2e-pool");
    tmux.keys(&["Enter"]);
    tmux.wait_until("the filter to keep the permit", |s| {
        s.contains("Locks [1/1]")
    });
    tmux.keys(&["C-d"]);
    tmux.wait_for_text("Force-release permit 0 of semaphore e2e-pool?");
    tmux.keys(&["y"]);
    tmux.wait_until("the permit to be released", |s| {
        (s.contains("force-released permit 0 of semaphore e2e-pool: deleted on 3 masters")
            || s.contains("force-released permit 0 of semaphore e2e-pool on 2 masters"))
            && row(s, "e2e-pool permit 0").is_none()
    });
    tmux.keys(&["Escape"]);
    tmux.wait_until("the filter to clear", |s| {
        s.contains("Locks [1/1]") && row(s, "e2e-sched election").is_some()
    });
    tmux.type_text("/^e2e-sched");
    tmux.keys(&["Enter"]);
    tmux.keys(&["C-d"]);
    tmux.wait_for_text("Force-release the leadership of election e2e-sched?");
    tmux.keys(&["y"]);
    tmux.wait_until("the leadership to be released", |s| {
        (s.contains("force-released the leadership of election e2e-sched: deleted on 3")
            || s.contains("force-released the leadership of election e2e-sched on 2"))
            && row(s, "e2e-sched election").is_none()
    });
    let (status, semaphore) =
        http(&agent.socket, "GET", "/v1/semaphores/e2e-pool", "").expect("the semaphore");
    assert_eq!(status, 200, "{semaphore}");
    assert!(semaphore.contains(r#""permits":[]"#), "{semaphore}");
    let (status, leader) =
        http(&agent.socket, "GET", "/v1/elections/e2e-sched", "").expect("the leader");
    assert_eq!(status, 404, "{leader}");

    tmux.keys(&["q"]);
    wait_for(
        "the TUI to quit",
        Duration::from_secs(10),
        || (tmux.display("#{alternate_on}") == "0").then_some(()),
        || tmux.screen(),
    );
}
