//! End to end: the real `redlock-tui` binary in a tmux pane follows a real
//! `redlock-agent dev` and its three real `redis-server` masters, a master
//! killed and restarted in its place, and restores the terminal.

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{http, redis, redis_pid, require, row, signal, wait_for, words, Agent, Tmux, PROMPT};

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
