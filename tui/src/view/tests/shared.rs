//! Render tests of read-write locks: the MODE column and a shared lock's
//! reader count in the locks view, its readers in the detail pane, and
//! the force release's dialog naming them.

use super::*;

/// The fixture agent with a lock `cache` held shared by seven readers
/// (the first through this agent, the last on one master only) beside
/// the exclusive `orders:42` and `stray`.
fn shared_app(t0: Instant) -> App {
    let mut app = app_at(t0, false);
    let mut cache = lock_fixtures::shared(
        "cache",
        20_000,
        &[
            ("pod-a", "web-1", 3),
            ("pod-a", "web-2", 3),
            ("pod-b", "report", 3),
            ("pod-c", "warm", 2),
            ("pod-c", "w5", 2),
            ("pod-c", "w6", 2),
            ("pod-d", "late", 1),
        ],
        MASTERS,
    );
    cache.readers[0].held_here = true;
    cache.held_here = true;
    let plain = lock_fixtures::lock("orders:42", Some("billing"), 30_000, MASTERS, MASTERS);
    polled(
        &mut app,
        t0,
        Update::Locks(Ok(lock_fixtures::response(vec![plain, cache], MASTERS))),
    );
    app.update(Action::Do(crate::keys::Action::NextView));
    key(&mut app, KeyCode::Char('g'));
    app
}

fn words(line: &str) -> Vec<&str> {
    line.trim_matches('│').split_whitespace().collect()
}

#[test]
fn the_mode_column_shows_only_with_a_shared_lock_and_its_readers_count() {
    let (mut app, _) = app();
    app.update(Action::Do(crate::keys::Action::NextView));
    let screen = shot(&app);
    assert!(!line_with(&screen, "RESOURCE").contains("MODE"));

    let app = shared_app(Instant::now());
    let screen = shot(&app);
    let header = line_with(&screen, "RESOURCE");
    assert_eq!(
        words(header)[..4],
        ["RESOURCE↑", "MODE", "OWNER", "VALIDITY"],
        "{header}"
    );
    // No validity of its own; held on every master; four agents grant it.
    assert_eq!(
        words(line_with(&screen, "│cache")),
        [
            "cache", "shared", "7", "readers", "-", "20.0s", "20.0s", "20.0s", "yes", "0", "yes",
            "4", "agents"
        ]
    );
    assert_eq!(
        words(line_with(&screen, "│orders:42"))[..3],
        ["orders:42", "excl", "billing"]
    );
}

#[test]
fn the_detail_pane_of_a_shared_lock_lists_its_first_readers() {
    let mut app = shared_app(Instant::now());
    key(&mut app, KeyCode::Enter);
    let screen = shot(&app);
    let all = screen.join("\n");
    assert!(contains(&screen, "┌ Lock cache ─"), "{all}");
    assert!(contains(&screen, "│mode      shared · 7 readers"), "{all}");
    assert!(!contains(&screen, "│owner "), "{all}");
    assert!(!contains(&screen, "│holder "), "{all}");
    assert!(
        contains(&screen, "│validity  - (each reader has its own)"),
        "{all}"
    );
    assert!(
        contains(
            &screen,
            "│quorum    agrees · held on 3 of 3 masters · quorum 2"
        ),
        "{all}"
    );
    // Four readers, in the agent's order, then a count of the rest.
    for line in [
        "│readers   pod-a/web-1   on 3 of 3 masters · held here",
        "│          pod-a/web-2   on 3 of 3 masters",
        "│          pod-b/report  on 3 of 3 masters",
        "│          pod-c/warm    on 2 of 3 masters",
        "│          and 3 more",
    ] {
        assert!(
            screen
                .iter()
                .any(|l| l.trim_end_matches('│').trim_end() == line),
            "{line:?} in\n{all}"
        );
    }
    assert!(!contains(&screen, "pod-c/w5"), "{all}");
    // Every master still shows below, the pane grown to hold the readers.
    for master in ["│r1  held", "│r2  held", "│r3  held"] {
        assert!(contains(&screen, master), "{master} in\n{all}");
    }
}

#[test]
fn a_reader_below_quorum_is_a_warning_and_few_readers_are_all_listed() {
    let t0 = Instant::now();
    let mut app = app_at(t0, false);
    let cache = lock_fixtures::shared(
        "cache",
        20_000,
        &[("pod-a", "web-1", 3), ("pod-d", "late", 1)],
        MASTERS,
    );
    polled(
        &mut app,
        t0,
        Update::Locks(Ok(lock_fixtures::response(vec![cache], MASTERS))),
    );
    app.update(Action::Do(crate::keys::Action::NextView));
    key(&mut app, KeyCode::Enter);
    let buffer = render(&app, 120, 35);
    let screen = lines(&buffer);
    assert!(contains(
        &screen,
        "│readers   pod-a/web-1  on 3 of 3 masters"
    ));
    let y = screen
        .iter()
        .position(|l| l.contains("pod-d/late   on 1 of 3 masters"))
        .unwrap_or_else(|| panic!("the late reader in\n{}", screen.join("\n")));
    let at = screen[y].find("on 1 of").unwrap();
    let x = screen[y][..at].chars().count() as u16;
    assert_eq!(
        buffer.cell((x, y as u16)).unwrap().fg,
        theme::WARN.fg.unwrap()
    );
    assert!(!contains(&screen, "more"));
    // Two agents granted them: the HOLDER column counts them.
    let holder = crate::view::locks::holder_cell(&app.locks.rows()[0].info);
    assert_eq!(holder.content, "2 agents");
}

#[test]
fn force_release_of_a_shared_lock_names_its_readers() {
    let mut app = shared_app(Instant::now());
    ctrl(&mut app, 'd');
    let screen = shot(&app);
    assert!(
        contains(&screen, "│Force-release cache?"),
        "{}",
        screen.join("\n")
    );
    assert!(
        contains(&screen, "│Holder: 7 readers · on 3 of 3 masters · valid -"),
        "{}",
        screen.join("\n")
    );
}
