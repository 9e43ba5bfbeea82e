//! End to end: the real `redlock-tui` binary shows a held permit and a
//! leader, and force-releases each through the admin socket after asking.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use common::{http, require, row, wait_for, words, Agent, Tmux};

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
