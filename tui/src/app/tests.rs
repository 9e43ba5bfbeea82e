//! The unit tests of `App`: its update on keys and on the client's
//! messages, the confirm dialog, the flash line and the views' data.

use super::*;
use crate::state::locks::tests as lock_fixtures;
use crate::state::nodes::tests as node_fixtures;
use crossterm::event::KeyModifiers;
use redlock_wire::{ForceReleaseResponse, NodeState};

const MASTERS: &[&str] = &["r1", "r2", "r3"];

fn app(readonly: bool) -> (App, Instant) {
    let t0 = Instant::now();
    let mut app = App::new(
        Settings {
            socket: PathBuf::from("/tmp/agent.sock"),
            refresh: Duration::from_secs(1),
            readonly,
        },
        t0,
    );
    app.update(Action::Resize(120, 35));
    app.update(Action::Client(Event::Conn(Conn::Connected)));
    let nodes = node_fixtures::response(vec![
        node_fixtures::status("r1", NodeState::Up),
        node_fixtures::status("r2", NodeState::Up),
        node_fixtures::status("r3", NodeState::Up),
    ]);
    app.update(Action::Client(Event::Polled {
        at: t0,
        update: Update::Nodes(Ok(nodes)),
    }));
    let locks = lock_fixtures::response(
        vec![
            lock_fixtures::lock("a", Some("me"), 30_000, MASTERS, MASTERS),
            lock_fixtures::lock("b", Some("you"), 10_000, MASTERS, MASTERS),
        ],
        MASTERS,
    );
    app.update(Action::Client(Event::Polled {
        at: t0,
        update: Update::Locks(Ok(locks)),
    }));
    (app, t0)
}

fn press(app: &mut App, key: Key) {
    let modifiers = if key.ctrl {
        KeyModifiers::CONTROL
    } else {
        KeyModifiers::NONE
    };
    app.update(Action::Key(KeyEvent::new(key.code, modifiers)));
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        press(app, Key::char(c));
    }
}

fn enter(app: &mut App) {
    press(app, Key::code(KeyCode::Enter));
}

/// Every binding of a dangerous action, in every context it is bound
/// in, opens a confirm dialog and sends nothing; only the dialog's yes
/// sends the command, and no sends nothing.
#[test]
fn every_dangerous_action_has_a_confirm_step() {
    let dangerous: Vec<_> = keys::BINDINGS
        .iter()
        .filter(|b| b.action.is_dangerous())
        .collect();
    assert!(!dangerous.is_empty());
    for binding in dangerous {
        for key in binding.keys {
            for answer in [Key::char('y'), Key::char('n'), Key::code(KeyCode::Esc)] {
                let (mut app, _) = app(false);
                app.update(Action::Do(keys::Action::NextView));
                if binding.scope == keys::Scope::Detail {
                    enter(&mut app);
                    assert_eq!(app.mode, Mode::Detail);
                }
                press(&mut app, *key);
                assert!(
                    app.take_commands().is_empty(),
                    "{} acted without asking",
                    key.label()
                );
                let Mode::Confirm(confirm) = &app.mode else {
                    panic!(
                        "{} in {:?} did not ask: {:?}",
                        key.label(),
                        binding.scope,
                        app.mode
                    );
                };
                assert_eq!(confirm.resource, "a");
                assert_eq!(confirm.owner.as_deref(), Some("me"));
                // Keys of the view do nothing while the dialog is open.
                press(&mut app, Key::char('j'));
                press(&mut app, Key::char('q'));
                assert!(!app.quit);
                press(&mut app, answer);
                let sent = app.take_commands();
                if answer == Key::char('y') {
                    assert_eq!(sent, [Command::ForceRelease("a".into())]);
                } else {
                    assert!(sent.is_empty());
                }
                assert!(!matches!(app.mode, Mode::Confirm(_)));
            }
        }
    }
}

#[test]
fn readonly_never_sends_a_force_release() {
    let (mut app, _) = app(true);
    app.update(Action::Do(keys::Action::NextView));
    press(&mut app, Key::ctrl('d'));
    assert_eq!(app.mode, Mode::Table);
    // Even an action that bypasses the key table is refused.
    app.update(Action::Do(keys::Action::ForceRelease));
    app.update(Action::Do(keys::Action::Confirm));
    assert!(app.take_commands().is_empty());
    assert_eq!(app.mode, Mode::Table);
}

#[test]
fn release_outcomes_are_flashed() {
    let (mut app, _) = app(false);
    app.update(Action::Client(Event::Released {
        resource: "a".into(),
        result: Ok(ForceReleaseResponse {
            deleted: 2,
            failed: vec!["r3".into()],
        }),
    }));
    let flash = app.flash.clone().unwrap();
    assert_eq!(
        flash.text,
        "force-released a on 2 masters; could not reach r3"
    );
    assert_eq!(flash.level, Level::Warn);
    app.update(Action::Tick(app.clock + FLASH_FOR));
    assert_eq!(app.flash, None);
}

#[test]
fn colon_commands_switch_views_by_unique_prefix() {
    let (mut app, _) = app(false);
    typed(&mut app, ":locks");
    enter(&mut app);
    assert_eq!(app.view, View::Locks);
    typed(&mut app, ":no");
    enter(&mut app);
    assert_eq!(app.view, View::Nodes);
    typed(&mut app, ":leak");
    enter(&mut app);
    assert_eq!(app.view, View::Leaks);
    typed(&mut app, ":l");
    enter(&mut app);
    assert_eq!(app.view, View::Leaks);
    assert_eq!(
        app.flash.as_ref().unwrap().text,
        ":l is ambiguous: locks, leaks"
    );
    typed(&mut app, ":pods");
    enter(&mut app);
    assert!(app
        .flash
        .as_ref()
        .unwrap()
        .text
        .starts_with("unknown command :pods"));
    typed(&mut app, ":q");
    enter(&mut app);
    assert!(app.quit);
}

/// The primitives view asks for the whole listing and the names in
/// it, whatever the locks filter; the locks view gets its prefix back.
#[test]
fn the_primitives_view_lists_everything_and_asks_about_the_names() {
    let (mut app, _) = app(false);
    typed(&mut app, ":locks");
    enter(&mut app);
    typed(&mut app, "/^job");
    enter(&mut app);
    assert_eq!(app.query.prefix, "job");
    assert!(!app.query.primitives);
    typed(&mut app, ":prim");
    enter(&mut app);
    assert_eq!(app.view, View::Primitives);
    assert!(app.query.list && app.query.primitives);
    assert_eq!(app.query.prefix, "");
    typed(&mut app, ":locks");
    enter(&mut app);
    assert_eq!(app.query.prefix, "job");
    typed(&mut app, ":nodes");
    enter(&mut app);
    assert!(!app.query.list && !app.query.primitives);
    assert_eq!(app.query.prefix, "");
}

#[test]
fn tab_cycles_the_views_both_ways() {
    let (mut app, _) = app(false);
    press(&mut app, Key::code(KeyCode::Tab));
    assert_eq!(app.view, View::Locks);
    press(&mut app, Key::code(KeyCode::Tab));
    assert_eq!(app.view, View::Primitives);
    press(&mut app, Key::code(KeyCode::Tab));
    press(&mut app, Key::code(KeyCode::Tab));
    assert_eq!(app.view, View::Nodes);
    press(&mut app, Key::code(KeyCode::BackTab));
    assert_eq!(app.view, View::Leaks);
}

#[test]
fn the_filter_applies_as_typed_and_escape_clears_it() {
    let (mut app, _) = app(false);
    app.update(Action::Do(keys::Action::NextView));
    typed(&mut app, "/^b");
    assert_eq!(app.lock_table.order().len(), 1);
    // An invalid pattern keeps the last valid one and says why.
    typed(&mut app, "[");
    assert_eq!(app.lock_table.order().len(), 1);
    let Mode::Prompt(prompt) = &app.mode else {
        panic!("{:?}", app.mode)
    };
    assert!(prompt.error.is_some());
    press(&mut app, Key::code(KeyCode::Backspace));
    enter(&mut app);
    assert_eq!(app.filter().unwrap().text(), "^b");
    // Reopening starts from the current filter.
    press(&mut app, Key::char('/'));
    let Mode::Prompt(prompt) = &app.mode else {
        panic!()
    };
    assert_eq!(prompt.text, "^b");
    press(&mut app, Key::code(KeyCode::Esc));
    assert!(app.filter().is_none());
    typed(&mut app, "/!^b");
    enter(&mut app);
    let shown: Vec<_> = app
        .lock_table
        .order()
        .iter()
        .map(|&i| app.locks.rows()[i].info.resource.clone())
        .collect();
    assert_eq!(shown, ["a"]);
    press(&mut app, Key::code(KeyCode::Esc));
    assert_eq!(app.lock_table.order().len(), 2);
}

/// The locks filter's literal start becomes the agent's prefix; an
/// inverted filter asks for everything; Escape clears it.
#[test]
fn the_locks_filter_asks_the_agent_for_its_literal_start() {
    let (mut app, _) = app(false);
    assert!(!app.query.list, "no listing off the locks view");
    typed(&mut app, "/job");
    assert_eq!(app.query.prefix, "", "only the locks view asks the agent");
    press(&mut app, Key::code(KeyCode::Esc));
    app.update(Action::Do(keys::Action::NextView));
    assert!(app.query.list);
    typed(&mut app, "/^job-01");
    assert_eq!(app.query.prefix, "job-01");
    press(&mut app, Key::code(KeyCode::Backspace));
    assert_eq!(app.query.prefix, "job-0");
    press(&mut app, Key::code(KeyCode::Esc));
    assert_eq!(app.query.prefix, "");
    typed(&mut app, "/!^job");
    assert_eq!(app.query.prefix, "");
}

/// Enter on a row asks the agent for that lock by name; its answer
/// fills the pane; Escape stops asking.
#[test]
fn the_detail_pane_asks_for_its_lock_by_name() {
    let (mut app, t0) = app(false);
    app.update(Action::Do(keys::Action::NextView));
    enter(&mut app);
    assert_eq!(app.mode, Mode::Detail);
    assert_eq!(app.query.detail.as_deref(), Some("a"));
    let mut lock = lock_fixtures::lock("a", Some("them"), 9_000, &["r1", "r2"], MASTERS);
    lock.nodes[2].state = "unknown".into();
    let response = redlock_wire::LockResponse {
        quorum: 2,
        masters: MASTERS.iter().map(|m| m.to_string()).collect(),
        lock,
        unread: vec!["r3".into()],
        partial: true,
    };
    app.update(Action::Client(Event::Polled {
        at: t0,
        update: Update::Lock("a".into(), Ok(response.clone())),
    }));
    let shown = app.detail_lock().unwrap();
    assert_eq!(
        shown.info.owner.as_deref(),
        Some("them"),
        "the agent's answer wins"
    );
    assert_eq!(app.detail.get().unwrap().unread, ["r3"]);
    // An answer for another lock is not shown.
    app.update(Action::Client(Event::Polled {
        at: t0,
        update: Update::Lock("b".into(), Ok(response)),
    }));
    assert_eq!(app.detail_lock().unwrap().info.resource, "a");
    press(&mut app, Key::code(KeyCode::Esc));
    assert_eq!(app.mode, Mode::Table);
    assert_eq!(app.query.detail, None);
}

/// Scrolling to the end of a truncated list asks for another page.
#[test]
fn scrolling_to_the_end_pages_in_more_locks() {
    let (mut app, t0) = app(false);
    let many = (0..100)
        .map(|i| lock_fixtures::lock(&format!("k{i:03}"), None, 1_000, MASTERS, MASTERS))
        .collect();
    let mut response = lock_fixtures::response(many, MASTERS);
    response.truncated = true;
    app.update(Action::Client(Event::Polled {
        at: t0,
        update: Update::Locks(Ok(response)),
    }));
    app.update(Action::Do(keys::Action::NextView));
    press(&mut app, Key::char('j'));
    assert_eq!(app.query.limit, client::DEFAULT_LIMIT);
    press(&mut app, Key::char('G'));
    assert_eq!(app.query.limit, client::DEFAULT_LIMIT + LOCKS_PAGE);
}

#[test]
fn shift_letter_sorts_and_again_reverses() {
    let (mut app, _) = app(false);
    app.update(Action::Do(keys::Action::NextView));
    let order = |app: &App| -> Vec<String> {
        app.lock_table
            .order()
            .iter()
            .map(|&i| app.locks.rows()[i].info.resource.clone())
            .collect()
    };
    assert_eq!(order(&app), ["a", "b"]);
    press(&mut app, Key::char('V'));
    assert_eq!(order(&app), ["b", "a"], "shortest validity first");
    press(&mut app, Key::char('V'));
    assert_eq!(order(&app), ["a", "b"]);
}

#[test]
fn pause_freezes_countdowns_and_holds_updates_until_resumed() {
    let (mut app, t0) = app(false);
    app.update(Action::Tick(t0 + Duration::from_secs(1)));
    press(&mut app, Key::char(' '));
    assert_eq!(app.paused, Some(t0 + Duration::from_secs(1)));
    app.update(Action::Tick(t0 + Duration::from_secs(5)));
    assert_eq!(app.now(), t0 + Duration::from_secs(1));
    let newer = lock_fixtures::response(
        vec![lock_fixtures::lock("c", None, 5_000, MASTERS, MASTERS)],
        MASTERS,
    );
    app.update(Action::Client(Event::Polled {
        at: t0,
        update: Update::Locks(Ok(newer)),
    }));
    assert_eq!(app.locks.rows().len(), 2, "held back while paused");
    press(&mut app, Key::char(' '));
    assert_eq!(app.locks.rows().len(), 1);
    assert_eq!(app.now(), t0 + Duration::from_secs(5));
}

#[test]
fn a_dropped_connection_forgets_everything() {
    let (mut app, t0) = app(false);
    app.update(Action::Do(keys::Action::NextView));
    enter(&mut app);
    assert_eq!(app.mode, Mode::Detail);
    app.update(Action::Client(Event::Conn(Conn::Reconnecting {
        retry_at: t0 + Duration::from_secs(2),
        attempt: 1,
        error: "refused".into(),
    })));
    assert!(app.locks.rows().is_empty());
    assert!(app.nodes.rows.iter().all(|r| r.status.is_none()));
    assert_eq!(app.nodes.quorum, Known::Unknown);
    assert_eq!(app.mode, Mode::Table);
}

#[test]
fn moves_page_and_jump() {
    let (mut app, t0) = app(false);
    let many = (0..100)
        .map(|i| lock_fixtures::lock(&format!("k{i:03}"), None, 1_000, MASTERS, MASTERS))
        .collect();
    app.update(Action::Client(Event::Polled {
        at: t0,
        update: Update::Locks(Ok(lock_fixtures::response(many, MASTERS))),
    }));
    app.update(Action::Do(keys::Action::NextView));
    // A page as the view measures the locks table at 80x24
    // (view::tests::a_page_is_what_the_table_shows).
    let page = 15;
    app.set_page_rows(page);
    press(&mut app, Key::code(KeyCode::PageDown));
    assert_eq!(app.lock_table.selected_position(), Some(page));
    press(&mut app, Key::char('k'));
    press(&mut app, Key::code(KeyCode::Up));
    assert_eq!(app.lock_table.selected_position(), Some(page - 2));
    press(&mut app, Key::char('G'));
    assert_eq!(app.lock_table.selected_position(), Some(99));
    press(&mut app, Key::code(KeyCode::PageUp));
    assert_eq!(app.lock_table.selected_position(), Some(99 - page));
    press(&mut app, Key::code(KeyCode::Home));
    assert_eq!(app.lock_table.selected_position(), Some(0));
}

#[test]
fn help_opens_over_the_current_mode_and_closes_back_to_it() {
    let (mut app, _) = app(false);
    app.update(Action::Do(keys::Action::NextView));
    enter(&mut app);
    press(&mut app, Key::char('?'));
    assert!(matches!(app.mode, Mode::Help { .. }));
    assert!(app.detail_open());
    press(&mut app, Key::char('j'));
    press(&mut app, Key::char('q'));
    assert!(!app.quit, "q closes help");
    assert_eq!(app.mode, Mode::Detail);
    press(&mut app, Key::code(KeyCode::Esc));
    assert_eq!(app.mode, Mode::Table);
    press(&mut app, Key::char('q'));
    assert!(app.quit);
}
