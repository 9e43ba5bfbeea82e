//! End to end: the real `redlock-tui` binary shows a real Redis Cluster
//! master's shards and its quarantined slots (an agent of the test's own
//! config).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{agent_binary, http, require, row, signal, wait_for, words, Tmux};

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
