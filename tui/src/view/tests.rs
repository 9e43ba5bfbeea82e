//! Render tests: the model is filled through `update` as the client would,
//! drawn on ratatui's `TestBackend`, and the screen text asserted on.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::Terminal;
use redlock_wire::{NodeState, NodeStatus};

use crate::app::{Action, App, Settings};
use crate::client::{Conn, Event, Update};
use crate::state::leaks::tests as leak_fixtures;
use crate::state::locks::tests as lock_fixtures;
use crate::state::nodes::tests as node_fixtures;
use crate::state::summary::tests as summary_fixtures;

use super::theme;

mod nodes;
mod primitives;
mod shared;

const MASTERS: &[&str] = &["r1", "r2", "r3"];

fn settings(readonly: bool) -> Settings {
    Settings {
        socket: PathBuf::from("/run/redlock/agent.sock"),
        refresh: Duration::from_secs(1),
        readonly,
    }
}

fn polled(app: &mut App, at: Instant, update: Update) {
    app.update(Action::Client(Event::Polled { at, update }));
}

/// An agent with three masters (r2 quarantined for 40s of 61s, r3 down),
/// two locks (one on every master, one on r1 only), leaks and a summary.
fn app_at(t0: Instant, readonly: bool) -> App {
    let mut app = App::new(settings(readonly), t0);
    app.update(Action::Resize(120, 35));
    app.update(Action::Client(Event::Conn(Conn::Connected)));
    let mut quarantined = node_fixtures::status("r2", NodeState::Quarantined);
    quarantined.quarantine_remaining_ms = 61_000;
    polled(
        &mut app,
        t0 - Duration::from_secs(21),
        Update::Nodes(Ok(node_fixtures::response(vec![quarantined.clone()]))),
    );
    quarantined.quarantine_remaining_ms = 40_000;
    let mut down: NodeStatus = node_fixtures::status("r3", NodeState::Down);
    down.warnings = vec!["maxmemory-policy allkeys-lru evicts lock keys".to_string()];
    let nodes = node_fixtures::response(vec![
        node_fixtures::status("r1", NodeState::Up),
        quarantined,
        down,
    ]);
    polled(&mut app, t0, Update::Nodes(Ok(nodes)));
    let mut everywhere =
        lock_fixtures::lock("orders:42", Some("billing"), 30_000, MASTERS, MASTERS);
    everywhere.held_here = true;
    everywhere.waiters = 2;
    everywhere.agent = Some("pod-a".to_string());
    everywhere.pid = Some(4242);
    everywhere.uid = Some(1000);
    everywhere.gid = Some(1001);
    everywhere.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".to_string());
    everywhere.held_with = vec!["orders:42".to_string(), "stock:7".to_string()];
    let mut minority = lock_fixtures::lock("stray", None, 8_000, &["r1"], MASTERS);
    minority.agent = Some("pod-b".to_string());
    polled(
        &mut app,
        t0,
        Update::Locks(Ok(lock_fixtures::response(
            vec![everywhere, minority],
            MASTERS,
        ))),
    );
    polled(
        &mut app,
        t0,
        Update::Leaks(Ok(leak_fixtures::response(1_000_000)), 1_004_000),
    );
    polled(
        &mut app,
        t0 - Duration::from_secs(10),
        Update::Summary(Ok(summary_fixtures::reading(
            1_000,
            100,
            0,
            [0, 100, 0, 0],
            5,
        ))),
    );
    polled(
        &mut app,
        t0,
        Update::Summary(Ok(summary_fixtures::reading(
            11_000,
            180,
            20,
            [100, 100, 0, 0],
            7,
        ))),
    );
    app.update(Action::Tick(t0));
    app
}

fn app() -> (App, Instant) {
    let t0 = Instant::now();
    (app_at(t0, false), t0)
}

/// An agent with a single server r1 and two cluster masters: c2 with its
/// second shard down and 5461 slots quarantined on its third, and c3 whose
/// topology the agent has not read yet.
fn cluster_app() -> App {
    let t0 = Instant::now();
    let mut app = App::new(settings(false), t0);
    app.update(Action::Resize(120, 35));
    app.update(Action::Client(Event::Conn(Conn::Connected)));
    let mut shards = node_fixtures::three_shards();
    shards[1].state = NodeState::Down;
    shards[1].replicas = 0;
    shards[2].quarantined_slots = 5_461;
    shards[2].slots = vec![[10_923, 12_000], [12_002, 16_383]];
    shards[0].slots.push([12_001, 12_001]);
    let nodes = node_fixtures::response(vec![
        node_fixtures::status("r1", NodeState::Up),
        node_fixtures::cluster("c2", shards),
        node_fixtures::cluster("c3", Vec::new()),
    ]);
    polled(&mut app, t0, Update::Nodes(Ok(nodes)));
    app.update(Action::Tick(t0));
    app
}

fn key(app: &mut App, code: KeyCode) {
    app.update(Action::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

fn ctrl(app: &mut App, c: char) {
    app.update(Action::Key(KeyEvent::new(
        KeyCode::Char(c),
        KeyModifiers::CONTROL,
    )));
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        key(app, KeyCode::Char(c));
    }
}

fn render(app: &App, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| super::draw(frame, app)).unwrap();
    terminal.backend().buffer().clone()
}

/// The screen as lines, trailing blanks trimmed.
fn lines(buffer: &Buffer) -> Vec<String> {
    let area = buffer.area;
    (0..area.height)
        .map(|y| {
            let line: String = (0..area.width)
                .map(|x| buffer.cell((x, y)).map_or(" ", |c| c.symbol()))
                .collect();
            line.trim_end().to_string()
        })
        .collect()
}

fn shot(app: &App) -> Vec<String> {
    lines(&render(app, 120, 35))
}

/// The one line containing `needle`.
fn line_with<'a>(screen: &'a [String], needle: &str) -> &'a str {
    let found: Vec<&String> = screen.iter().filter(|l| l.contains(needle)).collect();
    assert_eq!(
        found.len(),
        1,
        "{needle:?} on {} lines of\n{}",
        found.len(),
        screen.join("\n")
    );
    found[0]
}

fn contains(screen: &[String], needle: &str) -> bool {
    screen.iter().any(|l| l.contains(needle))
}

#[test]
fn header_shows_socket_connection_quorum_and_hints() {
    let (app, _) = app();
    let screen = shot(&app);
    assert_eq!(
        screen[0],
        " redlock-tui  /run/redlock/agent.sock  CONNECTED  1/3 usable, quorum 2  2 held here · 1 waiting"
    );
    assert_eq!(
        screen[1],
        " <N,S,L,U> sort  <:> view  </> filter  <space> pause  <?> help  <q> quit"
    );
}

#[test]
fn quorum_is_coloured_by_margin() {
    let (app, _) = app();
    let buffer = render(&app, 120, 35);
    let x = lines(&buffer)[0].find("1/3 usable").unwrap() as u16;
    assert_eq!(
        buffer.cell((x, 0)).unwrap().fg,
        theme::CRIT.fg.unwrap(),
        "below quorum is critical"
    );
}

#[test]
fn locks_view_shows_the_matrix_for_full_and_partial_locks() {
    let (mut app, _) = app();
    typed(&mut app, ":locks");
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    assert!(line_with(&screen, " Locks [2/2] ").starts_with("┌ Locks [2/2] ──"));
    let header = line_with(&screen, "RESOURCE");
    assert!(header.starts_with("│RESOURCE↑ "), "{header}");
    for column in [
        "OWNER", "VALIDITY", "r1", "r2", "r3", "QUORUM", "WAIT", "HERE", "HOLDER",
    ] {
        assert!(header.contains(column), "{column} in {header}");
    }
    let words = |line: &str| {
        line.trim_matches('│')
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        words(line_with(&screen, "orders:42")),
        [
            "orders:42",
            "billing",
            "29.9s",
            "30.0s",
            "30.0s",
            "30.0s",
            "yes",
            "2",
            "yes",
            "pod-a/4242"
        ]
    );
    // Only on r1: missing elsewhere, no quorum, no validity.
    assert_eq!(
        words(line_with(&screen, "stray")),
        ["stray", "-", "-", "8.0s", "missing", "missing", "no", "0", "no", "pod-b"]
    );
}

#[test]
fn ttls_count_down_smoothly_and_turn_to_warning_colours() {
    let (mut app, t0) = app();
    app.update(Action::Do(crate::keys::Action::NextView));
    let at = |app: &mut App, ms: u64| {
        app.update(Action::Tick(t0 + Duration::from_millis(ms)));
        let buffer = render(app, 120, 35);
        let screen = lines(&buffer);
        let y = screen.iter().position(|l| l.contains("stray")).unwrap();
        let line = &screen[y];
        let cell = line
            .trim_matches('│')
            .split_whitespace()
            .nth(3)
            .unwrap()
            .to_string();
        let x = line.chars().take(line.find(&cell).unwrap()).count() as u16;
        (cell, buffer.cell((x, y as u16)).unwrap().fg)
    };
    assert_eq!(at(&mut app, 0), ("8.0s".to_string(), theme::OK.fg.unwrap()));
    assert_eq!(
        at(&mut app, 300),
        ("7.7s".to_string(), theme::OK.fg.unwrap())
    );
    assert_eq!(
        at(&mut app, 6_100),
        ("1.9s".to_string(), theme::WARN.fg.unwrap())
    );
    assert_eq!(
        at(&mut app, 7_500),
        ("0.5s".to_string(), theme::CRIT.fg.unwrap())
    );
    assert_eq!(
        at(&mut app, 9_000),
        ("0.0s".to_string(), theme::CRIT.fg.unwrap())
    );
}

#[test]
fn the_detail_pane_names_the_holding_process_of_a_lock_held_here() {
    let (mut app, _) = app();
    app.update(Action::Do(crate::keys::Action::NextView));
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    assert!(
        contains(&screen, "┌ Lock orders:42 ─"),
        "{}",
        screen.join("\n")
    );
    assert!(contains(
        &screen,
        "│holder    agent pod-a · pid 4242 · uid 1000 · gid 1001"
    ));
    assert!(contains(
        &screen,
        "│trace     4bf92f3577b34da6a3ce929d0e0e4736"
    ));
    // A lock on several resources: one holder of all of them.
    assert!(contains(&screen, "│with      orders:42, stock:7"));
}

#[test]
fn enter_opens_the_detail_pane_of_the_selected_lock() {
    let (mut app, _) = app();
    app.update(Action::Do(crate::keys::Action::NextView));
    key(&mut app, KeyCode::Char('j'));
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    assert!(contains(&screen, "┌ Lock stray ─"), "{}", screen.join("\n"));
    assert!(contains(&screen, "│owner     -"));
    assert!(contains(
        &screen,
        "│holder    agent pod-b · process known only to that agent"
    ));
    assert!(contains(&screen, "│validity  - (no quorum holds it)"));
    assert!(contains(
        &screen,
        "│quorum    does not agree · held on 1 of 3 masters · quorum 2"
    ));
    assert!(contains(&screen, "│r1  held    8.0s ████████████████"));
    assert!(contains(&screen, "│r2  missing"));
    assert_eq!(
        screen[1],
        " <esc> back  <ctrl-d> force release  <space> pause  <?> help  <q> quit"
    );
}

#[test]
fn ctrl_d_asks_first_naming_the_resource_and_its_holder() {
    let (mut app, _) = app();
    app.update(Action::Do(crate::keys::Action::NextView));
    ctrl(&mut app, 'd');
    let screen = shot(&app);
    assert!(
        contains(&screen, "│Force-release orders:42?"),
        "{}",
        screen.join("\n")
    );
    assert!(contains(
        &screen,
        "│Holder: billing · on 3 of 3 masters · valid 29.9s"
    ));
    assert!(contains(&screen, "<y> yes   <n> cancel"));
    assert!(app.take_commands().is_empty());
}

#[test]
fn readonly_has_no_force_release_anywhere() {
    let mut app = app_at(Instant::now(), true);
    app.update(Action::Do(crate::keys::Action::NextView));
    ctrl(&mut app, 'd');
    let screen = shot(&app);
    assert!(!contains(&screen, "Force-release"));
    assert!(!contains(&screen, "force release"));
    assert!(contains(&screen, "READONLY"));
    key(&mut app, KeyCode::Char('?'));
    let screen = shot(&app);
    assert!(contains(&screen, "Help · keys"));
    assert!(!contains(&screen, "ctrl-d"));
}

#[test]
fn help_is_rendered_from_the_key_table() {
    let (mut app, _) = app();
    key(&mut app, KeyCode::Char('?'));
    let screen = shot(&app);
    assert!(contains(&screen, "┌ Help · keys ─"));
    assert!(contains(&screen, "│Everywhere"));
    assert!(contains(&screen, "│  j / ↓                 move down"));
    assert!(contains(
        &screen,
        "│  ctrl-d                force-release the lock, permit or leadership (asks first)"
    ));
    assert!(
        screen[1].starts_with(" <esc> close "),
        "hints follow the context: {}",
        screen[1]
    );
}

#[test]
fn leaks_view_shows_scans_per_node_and_the_keys_by_kind() {
    let (mut app, _) = app();
    typed(&mut app, ":leaks");
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    assert!(
        contains(&screen, "┌ Leaks · 3 scans · every 1m00s · repair none ─"),
        "{}",
        screen.join("\n")
    );
    let words = |line: &str| {
        line.trim_matches('│')
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        words(line_with(&screen, "NO TTL")),
        [
            "NODE", "SCANNED", "TOOK", "KEYS", "NO", "TTL", "TTL>MAX", "MINORITY", "REPAIRED",
            "ERROR"
        ]
    );
    assert_eq!(
        words(line_with(&screen, "│r1       4s ago")),
        ["r1", "4s", "ago", "12ms", "1000", "1", "1", "0", "0"]
    );
    assert!(contains(&screen, "┌ Leaked keys [3/3] ─"));
    assert_eq!(
        words(line_with(&screen, "forgotten")),
        ["r1", "no_ttl", "forgotten", "none"]
    );
    assert_eq!(
        words(line_with(&screen, "stray")),
        ["r2", "minority", "stray", "20.0s"]
    );
}

/// The title names the agent that scanned for the fleet, and says when
/// the agent finds the report stale.
#[test]
fn leaks_view_names_the_fleet_scanner_and_a_stale_report() {
    let (mut app, t0) = app();
    let mut report = leak_fixtures::response(1_000_000);
    report.scanner = Some("pod-9".into());
    report.stale = true;
    polled(&mut app, t0, Update::Leaks(Ok(report), 1_004_000));
    typed(&mut app, ":leaks");
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    assert!(
        contains(
            &screen,
            "┌ Leaks · 3 scans by pod-9 · every 1m00s · repair none · STALE ─"
        ),
        "{}",
        screen.join("\n")
    );
}

#[test]
fn summary_strip_shows_rate_percentiles_and_failures() {
    let (app, _) = app();
    let screen = shot(&app);
    let strip = &screen[2];
    assert!(strip.starts_with("acquires 10.0/s 80% ok"), "{strip}");
    assert!(strip.contains("wait p50 0.50ms  p99 0.99ms"), "{strip}");
    assert!(strip.contains("failures/1m no_quorum 2"), "{strip}");
}

/// Issue 18's header: one 60s wait that ended `taken`, above the 30s top
/// bound, and failures `node_error` and `taken` at 120 columns. The wait
/// shows as `>30s` under its own outcome (not as a 30s grant), and no
/// failure reason is cut in half.
#[test]
fn the_strip_shows_long_waits_honestly_and_never_cuts_a_word() {
    let t0 = Instant::now();
    let mut app = App::new(settings(false), t0);
    app.update(Action::Resize(120, 35));
    app.update(Action::Client(Event::Conn(Conn::Connected)));
    let waits =
        |acquired: u64, taken: u64| -> std::collections::BTreeMap<String, Vec<(f64, u64)>> {
            [
                (
                    "acquired".to_string(),
                    vec![(0.001, acquired), (30.0, acquired), (f64::MAX, acquired)],
                ),
                (
                    "taken".to_string(),
                    vec![(0.001, 0), (30.0, 0), (f64::MAX, taken)],
                ),
            ]
            .into()
        };
    let mut before = summary_fixtures::reading(1_000, 0, 0, [0, 0, 0, 0], 0);
    before.waits = waits(0, 0);
    let mut after = summary_fixtures::reading(61_000, 5, 1, [5, 0, 0, 1], 0);
    after.waits = waits(5, 1);
    after.failures = [("node_error".to_string(), 3), ("taken".to_string(), 1)].into();
    polled(
        &mut app,
        t0 - Duration::from_secs(60),
        Update::Summary(Ok(before)),
    );
    polled(&mut app, t0, Update::Summary(Ok(after)));
    app.update(Action::Tick(t0));
    let screen = shot(&app);
    let strip = &screen[2];
    assert!(strip.contains("wait p50 0.50ms  p99 0.99ms"), "{strip}");
    assert!(strip.contains("0.99ms taken >30s"), "{strip}");
    assert!(
        strip.contains("failures/1m node_error 3  taken 1"),
        "{strip}"
    );
    for word in strip.split_whitespace() {
        assert!(
            !["node_er", "node_e", "tak", "take"].contains(&word),
            "a cut word in {strip}"
        );
    }
}

#[test]
fn a_dropped_connection_leaves_dashes_not_stale_numbers() {
    let (mut app, t0) = app();
    app.update(Action::Client(Event::Conn(Conn::Reconnecting {
        retry_at: t0 + Duration::from_millis(1_500),
        attempt: 1,
        error: "cannot connect to /run/redlock/agent.sock: Connection refused (os error 111)"
            .into(),
    })));
    let screen = shot(&app);
    assert!(
        screen[0].contains("RECONNECTING in 2s  -/- usable, quorum -"),
        "{}",
        screen[0]
    );
    assert!(!screen[0].contains("held here"));
    assert!(screen[2].starts_with("acquires -"), "{}", screen[2]);
    let r2 = line_with(&screen, "│r2 ");
    assert_eq!(
        r2.trim_matches('│').split_whitespace().collect::<Vec<_>>(),
        ["r2", "-", "-", "-", "-", "-", "-", "-"]
    );
    assert!(contains(&screen, "agent unreachable: cannot connect"));
    assert!(!contains(&screen, "quarantined"));
    app.update(Action::Do(crate::keys::Action::NextView));
    let screen = shot(&app);
    assert!(contains(
        &screen,
        "│agent unreachable: cannot connect to /run/redlock/agent.sock"
    ));
    assert!(!contains(&screen, "orders:42"));
}

#[test]
fn an_endpoint_the_agent_does_not_serve_is_named() {
    let (mut app, t0) = app();
    polled(
        &mut app,
        t0,
        Update::Locks(Err(
            "GET /v1/locks: 404 not_found: no such endpoint: /v1/locks".into(),
        )),
    );
    app.update(Action::Do(crate::keys::Action::NextView));
    let screen = shot(&app);
    assert!(contains(
        &screen,
        "│GET /v1/locks: 404 not_found: no such endpoint: /v1/locks"
    ));
}

#[test]
fn the_filter_prompt_and_pause_are_shown() {
    let (mut app, _) = app();
    app.update(Action::Do(crate::keys::Action::NextView));
    typed(&mut app, "/ord");
    let screen = shot(&app);
    assert_eq!(screen[34], "/ord█");
    assert!(contains(&screen, " Locks [1/2] "));
    key(&mut app, KeyCode::Enter);
    key(&mut app, KeyCode::Char(' '));
    let screen = shot(&app);
    assert_eq!(screen[34], "1 of 2 locks · filter /ord");
    assert!(screen[0].ends_with("  PAUSED"), "{}", screen[0]);
}

#[test]
fn thousands_of_locks_scroll_and_filter() {
    let t0 = Instant::now();
    let mut app = app_at(t0, false);
    let locks = (0..5_000)
        .map(|i| {
            lock_fixtures::lock(
                &format!("job:{i:05}"),
                Some("batch"),
                20_000 + i,
                MASTERS,
                MASTERS,
            )
        })
        .collect();
    polled(
        &mut app,
        t0,
        Update::Locks(Ok(lock_fixtures::response(locks, MASTERS))),
    );
    app.update(Action::Do(crate::keys::Action::NextView));
    let started = Instant::now();
    let screen = shot(&app);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a frame of 5000 locks took {:?}",
        started.elapsed()
    );
    assert!(contains(&screen, " Locks [5000/5000] "));
    assert!(contains(&screen, "job:00000"));
    key(&mut app, KeyCode::Char('G'));
    let screen = shot(&app);
    assert!(contains(&screen, "job:04999"));
    assert!(!contains(&screen, "job:00000"));
    key(&mut app, KeyCode::PageUp);
    key(&mut app, KeyCode::Char('V'));
    key(&mut app, KeyCode::Char('V'));
    key(&mut app, KeyCode::Char('g'));
    let screen = shot(&app);
    assert!(line_with(&screen, "RESOURCE").contains("VALIDITY↓"));
    let first = screen.iter().position(|l| l.contains("RESOURCE")).unwrap() + 1;
    assert!(
        screen[first].starts_with("│job:04999 "),
        "{}",
        screen[first]
    );
    typed(&mut app, "/00[01]$");
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    // job:00000, job:00001, job:01000, job:01001, … job:04001.
    assert!(
        contains(&screen, " Locks [10/5000] "),
        "{}",
        screen.join("\n")
    );
}

/// Every view and overlay at 80x24, 40x10 and much smaller: degrade, never
/// panic; a cluster master's pane too.
#[test]
fn small_terminals_degrade_without_panicking() {
    let (mut app, _) = app();
    let mut sizes = vec![(80, 24), (40, 10)];
    for width in [0, 1, 2, 5, 12, 30] {
        for height in [0, 1, 2, 3, 4, 6, 8, 11, 12, 19, 20] {
            sizes.push((width, height));
        }
    }
    let check = |app: &mut App, what: &str| {
        for &(width, height) in &sizes {
            app.update(Action::Resize(width, height));
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                render(app, width, height)
            }));
            assert!(result.is_ok(), "{what} at {width}x{height} panicked");
        }
        app.update(Action::Resize(120, 35));
    };
    for view in ["nodes", "locks", "leaks"] {
        typed(&mut app, &format!(":{view}"));
        key(&mut app, KeyCode::Enter);
        check(&mut app, view);
        key(&mut app, KeyCode::Char('/'));
        check(&mut app, "filter prompt");
        key(&mut app, KeyCode::Esc);
        key(&mut app, KeyCode::Char('?'));
        check(&mut app, "help");
        key(&mut app, KeyCode::Esc);
    }
    typed(&mut app, ":locks");
    key(&mut app, KeyCode::Enter);
    key(&mut app, KeyCode::Enter);
    check(&mut app, "detail");
    ctrl(&mut app, 'd');
    check(&mut app, "confirm");
    let mut app = cluster_app();
    key(&mut app, KeyCode::Char('g'));
    check(&mut app, "a cluster's shards");
}

#[test]
fn at_80x24_and_40x10_the_essentials_remain() {
    let (mut app, _) = app();
    app.update(Action::Resize(80, 24));
    let screen = lines(&render(&app, 80, 24));
    assert!(screen[0]
        .starts_with(" redlock-tui  /run/redlock/agent.sock  CONNECTED  1/3 usable, quorum 2"));
    assert!(contains(&screen, "<?> help"));
    assert!(contains(&screen, "│r2   quarantined"));
    assert_eq!(screen[23], "3 of 3 nodes");
    app.update(Action::Do(crate::keys::Action::NextView));
    let screen = lines(&render(&app, 80, 24));
    let words = |line: &str| {
        line.trim_matches('│')
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        words(line_with(&screen, "│stray")),
        ["stray", "-", "-", "8.0s", "miss", "miss", "no", "0", "no"],
        "five-wide cells at 80 columns"
    );
    app.update(Action::Do(crate::keys::Action::PrevView));
    app.update(Action::Resize(40, 10));
    let screen = lines(&render(&app, 40, 10));
    assert_eq!(
        screen[0], " CONNECTED  1/3 usable, quorum 2",
        "the title and socket go first"
    );
    assert!(contains(&screen, "│r1   up"), "{}", screen.join("\n"));
    assert_eq!(screen[9], "3 of 3 nodes");
}

/// The page the view measures for the app's PageUp/PageDown: the locks
/// table's data rows at 80x24 (the app's own paging test uses this figure).
#[test]
fn a_page_is_what_the_table_shows() {
    let (mut app, _) = app();
    app.update(Action::Resize(80, 24));
    app.update(Action::Do(crate::keys::Action::NextView));
    let page = super::page_rows(&app);
    assert!(page > 10, "{page}");
    assert_eq!(page, 15);
}
