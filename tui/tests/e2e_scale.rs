//! End to end at scale: the real `redlock-tui` binary finds one lock among
//! 100,000 lock keys on 5 real masters.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{http, require, row, wait_for, words, Agent, Tmux};

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
