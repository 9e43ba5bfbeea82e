//! Render tests of the nodes view: states, the quarantine countdown and
//! its detector, a master's error and warnings in full, cluster masters.

use super::*;

#[test]
fn nodes_view_shows_states_quarantine_countdown_and_details() {
    let (app, _) = app();
    let screen = shot(&app);
    assert!(line_with(&screen, " Nodes [3] ").starts_with("┌ Nodes [3] ──"));
    assert_eq!(
        line_with(&screen, "NAME"),
        "│NAME STATE                      LATENCY             RUN ID   UPTIME PERSIST     LAST ERROR          WARNINGS          │"
    );
    assert_eq!(
        line_with(&screen, "│r1 "),
        "│r1   up                         █            0.40ms r1012345 1h00m  none                                              │"
    );
    // 40s left of the 61s seen when the quarantine began: 7 of 10 cells.
    assert_eq!(
        line_with(&screen, "│r2 "),
        "│r2   quarantined ███████░░░ 40s ██           0.40ms r2012345 1h00m  none                                              │"
    );
    let r3 = line_with(&screen, "│r3 ");
    assert!(r3.starts_with("│r3   down "), "{r3}");
    assert!(r3.contains("connection refused"), "{r3}");
    assert!(r3.contains("maxmemory-policy"), "{r3}");
    assert_eq!(screen[34], "3 of 3 nodes");
}

#[test]
fn the_selected_master_shows_its_error_and_warnings_in_full() {
    let (mut app, _) = app();
    key(&mut app, KeyCode::Char('g'));
    let screen = shot(&app);
    assert!(!contains(&screen, "┌ r1 ─"), "nothing to say about r1");
    key(&mut app, KeyCode::Char('j'));
    let screen = shot(&app);
    assert!(contains(&screen, "┌ r2 ─"), "{}", screen.join("\n"));
    assert!(contains(
        &screen,
        "│quarantined by the run_id detector; takes part in locks again in 40s"
    ));
    key(&mut app, KeyCode::Char('j'));
    let screen = shot(&app);
    assert!(contains(&screen, "│last error connection refused"));
    assert!(contains(
        &screen,
        "│warning maxmemory-policy allkeys-lru evicts lock keys"
    ));
}

#[test]
fn a_cluster_master_shows_its_kind_shards_up_and_quarantined_slots() {
    let app = cluster_app();
    let screen = shot(&app);
    assert_eq!(
        line_with(&screen, "NAME"),
        "│NAME STATE                       KIND        LATENCY             RUN ID   UPTIME PERSIST     LAST ERROR   WARNINGS    │"
    );
    assert_eq!(
        line_with(&screen, "│r1 "),
        "│r1   up                          single      █            0.40ms r1012345 1h00m  none                                 │"
    );
    assert_eq!(
        line_with(&screen, "│c2 "),
        "│c2   up, 5461 slots quarantined  cluster 2/3 █            0.40ms -        -      -                                    │"
    );
    assert!(
        line_with(&screen, "│c3 ").starts_with("│c3   up                          cluster -   ")
    );
    // The colours say which shard count and slots need a look.
    let buffer = render(&app, 120, 35);
    let y = screen.iter().position(|l| l.starts_with("│c2 ")).unwrap();
    let x_of = |needle: &str| screen[y][..screen[y].find(needle).unwrap()].chars().count() as u16;
    let fg = |x: u16| buffer.cell((x, y as u16)).unwrap().fg;
    assert_eq!(fg(x_of("5461 slots")), theme::WARN.fg.unwrap());
    assert_eq!(fg(x_of("cluster 2/3")), theme::WARN.fg.unwrap());
    assert_eq!(fg(x_of("up,")), theme::OK.fg.unwrap());
}

/// A dropped connection leaves the kind column in place, with dashes.
#[test]
fn a_cluster_setup_keeps_its_columns_when_the_connection_drops() {
    let mut app = cluster_app();
    app.update(Action::Client(Event::Conn(Conn::Reconnecting {
        retry_at: Instant::now() + Duration::from_secs(2),
        attempt: 1,
        error: "cannot connect".into(),
    })));
    let screen = shot(&app);
    assert!(line_with(&screen, "NAME").contains(" KIND "));
    let c2 = line_with(&screen, "│c2 ");
    assert_eq!(
        c2.trim_matches('│').split_whitespace().collect::<Vec<_>>(),
        ["c2", "-", "-", "-", "-", "-", "-", "-", "-"]
    );
}

#[test]
fn the_selected_cluster_master_lists_its_shards_in_the_pane() {
    let mut app = cluster_app();
    key(&mut app, KeyCode::Char('G'));
    assert!(!contains(&shot(&app), "┌ r1 ─"), "nothing to say about r1");
    key(&mut app, KeyCode::Char('g'));
    let screen = shot(&app);
    assert!(contains(&screen, "┌ c2 ─"), "{}", screen.join("\n"));
    assert!(contains(
        &screen,
        "│cluster 3 shards, 2 up · 16384 slots · 5461 quarantined"
    ));
    for line in [
        "│SHARD          STATE SLOTS                   QUARANTINED REPLICAS NODE ID",
        "│127.0.0.1:7001 up    0-5460,12001            0           1        7001a1b2",
        "│127.0.0.1:7002 down  5461-10922              0           0        7002a1b2",
        "│127.0.0.1:7003 up    10923-12000,12002-16383 5461        1        7003a1b2",
    ] {
        assert_eq!(line_with(&screen, line).trim_end_matches([' ', '│']), line);
    }
    let buffer = render(&app, 120, 35);
    let y = screen
        .iter()
        .position(|l| l.starts_with("│127.0.0.1:7002"))
        .unwrap();
    let x = screen[y][..screen[y].find("down").unwrap()].chars().count() as u16;
    assert_eq!(
        buffer.cell((x, y as u16)).unwrap().fg,
        theme::CRIT.fg.unwrap()
    );
    key(&mut app, KeyCode::Char('j'));
    let screen = shot(&app);
    assert!(contains(
        &screen,
        "│cluster no shard known: the agent has not read its topology yet"
    ));
}

#[test]
fn the_quarantine_counts_down_between_polls() {
    let (mut app, t0) = app();
    app.update(Action::Tick(t0 + Duration::from_millis(12_500)));
    let screen = shot(&app);
    let r2 = line_with(&screen, "│r2 ");
    assert!(r2.contains("quarantined █████░░░░░ 27s"), "{r2}");
}

/// The warnings `/v1/nodes` gives while a clock fault keeps a master in
/// quarantine, as the agent words them.
const AHEAD: &str =
    "the master's clock jumped or ran ahead by 14.997s (keys may have expired early)";
const BEHIND: &str =
    "the master's clock jumped back, froze or ran slow by 60.001s (keys outlive their TTL)";

/// r2's clock jumped forward and r3's back: each is quarantined by the
/// `clock` detector, its row shows the fault in the warning colour, and
/// its pane names the detector and gives the fault in full.
#[test]
fn a_master_quarantined_for_its_clock_names_the_detector_and_the_fault() {
    let t0 = Instant::now();
    let mut app = App::new(settings(false), t0);
    app.update(Action::Resize(120, 35));
    app.update(Action::Client(Event::Conn(Conn::Connected)));
    let clock_fault = |name: &str, fault: &str| {
        let mut status = node_fixtures::status(name, NodeState::Quarantined);
        status.detector = Some("clock".to_string());
        status.warnings = vec![fault.to_string()];
        status
    };
    let nodes = node_fixtures::response(vec![
        node_fixtures::status("r1", NodeState::Up),
        clock_fault("r2", AHEAD),
        clock_fault("r3", BEHIND),
    ]);
    polled(&mut app, t0, Update::Nodes(Ok(nodes)));
    app.update(Action::Tick(t0));
    let screen = shot(&app);
    // First sight: the whole 40s left is the whole bar. The fault is cut
    // to the WARNINGS column.
    assert_eq!(
        line_with(&screen, "│r2 "),
        "│r2   quarantined ██████████ 40s █            0.40ms r2012345 1h00m  none                            the master's clock│"
    );
    let buffer = render(&app, 120, 35);
    let y = screen.iter().position(|l| l.starts_with("│r2 ")).unwrap();
    let x = screen[y][..screen[y].find("the master's").unwrap()]
        .chars()
        .count() as u16;
    assert_eq!(
        buffer.cell((x, y as u16)).unwrap().fg,
        theme::WARN.fg.unwrap()
    );

    key(&mut app, KeyCode::Char('g'));
    key(&mut app, KeyCode::Char('j'));
    let screen = shot(&app);
    assert!(contains(&screen, "┌ r2 ─"), "{}", screen.join("\n"));
    assert!(contains(
        &screen,
        "│quarantined by the clock detector; takes part in locks again in 40s"
    ));
    assert!(
        contains(&screen, &format!("│warning {AHEAD}")),
        "{}",
        screen.join("\n")
    );
    key(&mut app, KeyCode::Char('j'));
    let screen = shot(&app);
    assert!(contains(&screen, "┌ r3 ─"), "{}", screen.join("\n"));
    assert!(contains(
        &screen,
        "│quarantined by the clock detector; takes part in locks again in 40s"
    ));
    assert!(
        contains(&screen, &format!("│warning {BEHIND}")),
        "{}",
        screen.join("\n")
    );
}
