//! End to end: the real `redlock-tui` binary shows a lock held shared by
//! two readers through a real agent: its mode and reader count in the
//! locks view, and each reader in its detail pane.

mod common;

use std::time::Duration;

use common::{http, require, row, wait_for, words, Agent, Tmux};

/// Two readers take `e2e-cache` shared through the agent's socket, beside
/// an exclusive `e2e-excl`: the locks view gains a MODE column (`shared`,
/// `excl`) and shows `2 readers` for the shared lock's owner; its detail
/// pane gives its mode and lists both readers with their agent, owner,
/// the masters recording each and that they are held here.
#[test]
fn the_tui_shows_a_shared_lock_and_its_readers() {
    require("tmux", &["-V"]);
    require("redis-server", &["--version"]);
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), 3);
    let tmux = Tmux::start(dir.path());

    for owner in ["reader-a", "reader-b"] {
        let (status, body) = http(
            &agent.socket,
            "POST",
            "/v1/locks/e2e-cache/acquire",
            &format!(r#"{{"ttl_ms":60000,"owner":"{owner}","mode":"shared"}}"#),
        )
        .expect("acquire shared over the socket");
        assert_eq!(status, 200, "{owner}: {body}");
    }
    let (status, body) = http(
        &agent.socket,
        "POST",
        "/v1/locks/e2e-excl/acquire",
        r#"{"ttl_ms":60000,"owner":"writer"}"#,
    )
    .expect("acquire over the socket");
    assert_eq!(status, 200, "{body}");
    let (status, lock) =
        http(&agent.socket, "GET", "/v1/locks/e2e-cache", "").expect("the shared lock");
    assert_eq!(status, 200, "{lock}");
    assert!(lock.contains(r#""mode":"shared""#), "{lock}");
    let agent_name = regex::Regex::new(r#""agent":"([A-Za-z0-9_-]+)""#)
        .unwrap()
        .captures(&lock)
        .unwrap_or_else(|| panic!("a reader's agent in {lock}"))[1]
        .to_string();

    let command = format!(
        "'{}' --socket '{}' --refresh 250ms",
        env!("CARGO_BIN_EXE_redlock-tui"),
        agent.admin.display()
    );
    tmux.type_text(&command);
    tmux.keys(&["Enter"]);
    tmux.wait_for_text("CONNECTED");
    tmux.type_text(":locks");
    tmux.keys(&["Enter"]);

    // The table: the mode of each, the readers counted in the owner's place.
    let screen = tmux.wait_until("the shared and the exclusive lock", |s| {
        row(s, "e2e-cache").is_some_and(|r| words(r)[1..4] == ["shared", "2", "readers"])
            && row(s, "e2e-excl").is_some_and(|r| words(r)[1..3] == ["excl", "writer"])
    });
    let header = screen
        .lines()
        .find(|l| l.contains("RESOURCE"))
        .expect("the locks header");
    assert_eq!(
        words(header)[..4],
        ["RESOURCE↑", "MODE", "OWNER", "VALIDITY"],
        "{header}"
    );
    // Both readers were granted here, by this agent.
    let cache = words(row(&screen, "e2e-cache").unwrap()).join(" ");
    assert!(
        cache.ends_with(&format!("yes {agent_name}")),
        "held here, by one agent: {cache}"
    );

    // The detail pane: the mode, then each reader, in place of one owner.
    tmux.type_text("/^e2e-cache");
    tmux.keys(&["Enter"]);
    tmux.wait_until("the filter to keep the shared lock", |s| {
        s.contains("Locks [1/1]")
    });
    tmux.keys(&["Enter"]);
    let reader = |owner: &str| {
        regex::Regex::new(&format!(
            r"│(readers| {{7}})   {agent_name}/{owner} +on [23] of 3 masters · held here"
        ))
        .unwrap()
    };
    let (a, b) = (reader("reader-a"), reader("reader-b"));
    let screen = tmux.wait_until("the readers in the detail pane", |s| {
        s.contains("Lock e2e-cache") && a.is_match(s) && b.is_match(s)
    });
    assert!(screen.contains("│mode      shared · 2 readers"), "{screen}");
    assert!(
        screen.contains("│validity  - (each reader has its own)"),
        "{screen}"
    );
    assert!(!screen.contains("│owner "), "{screen}");

    tmux.keys(&["Escape"]);
    tmux.wait_until("the pane to close", |s| !s.contains("Lock e2e-cache"));
    tmux.keys(&["q"]);
    wait_for(
        "the TUI to quit",
        Duration::from_secs(10),
        || (tmux.display("#{alternate_on}") == "0").then_some(()),
        || tmux.screen(),
    );
}
