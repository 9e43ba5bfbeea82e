//! The event loop: terminal events, client events and frame ticks become
//! [`Action`]s for the [`App`]; after each, the view draws the app and
//! measures its page, and the app's query and commands go to the client
//! task. The only place that knows the app, the view and the client at
//! once, so that none of them knows another's neighbour.

use std::time::Instant;

use crossterm::event::{Event as TermEvent, EventStream};
use futures::StreamExt;
use ratatui::DefaultTerminal;
use tokio::sync::mpsc;

use crate::app::{Action, App, Level, Settings, FRAME};
use crate::client::{self, Query};
use crate::view;

/// Runs the TUI until the user quits: spawns the client, then loops over
/// terminal events, client events and frame ticks, drawing after each.
///
/// # Errors
/// When the terminal cannot be read or drawn on, or the client task died.
pub async fn run(terminal: &mut DefaultTerminal, settings: Settings) -> anyhow::Result<()> {
    let (event_tx, mut events) = mpsc::channel(64);
    let (command_tx, commands) = mpsc::channel(8);
    // The app starts on the nodes view: no listing until the locks view.
    let (query_tx, query) = tokio::sync::watch::channel(Query {
        list: false,
        ..Query::default()
    });
    let options = client::Options {
        socket: settings.socket.clone(),
        refresh: settings.refresh,
        timeout: client::REQUEST_TIMEOUT,
    };
    let client = client::spawn_with_query(options, event_tx, commands, query);
    let size = terminal.size()?;
    let mut app = App::new(settings, Instant::now());
    app.update(Action::Resize(size.width, size.height));
    let mut terminal_events = EventStream::new();
    let mut frames = tokio::time::interval(FRAME);
    frames.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let result = loop {
        if let Err(e) = terminal.draw(|frame| view::draw(frame, &app)) {
            break Err(e.into());
        }
        app.set_page_rows(view::page_rows(&app));
        let action = tokio::select! {
            event = terminal_events.next() => match event {
                Some(Ok(TermEvent::Key(key))) => Action::Key(key),
                Some(Ok(TermEvent::Resize(width, height))) => Action::Resize(width, height),
                Some(Ok(_)) => continue,
                Some(Err(e)) => break Err(e.into()),
                None => break Ok(()),
            },
            event = events.recv() => match event {
                Some(event) => Action::Client(event),
                None => break Err(anyhow::anyhow!("the connection task ended unexpectedly")),
            },
            _ = frames.tick() => Action::Tick(Instant::now()),
            _ = terminate.recv() => break Ok(()),
            _ = hangup.recv() => break Ok(()),
        };
        app.update(action);
        // Never blocks: the client sees the latest query when it next looks.
        query_tx.send_if_modified(|query| {
            let changed = *query != app.query;
            if changed {
                *query = app.query.clone();
            }
            changed
        });
        for command in app.take_commands() {
            // The client drains commands between polls; a full queue means
            // it is stuck on a slow agent, so say so rather than wait.
            if command_tx.try_send(command).is_err() {
                app.notify(
                    Level::Error,
                    "the connection is busy; nothing was sent, try again",
                );
            }
        }
        if app.quit {
            break Ok(());
        }
    };
    client.abort();
    result
}
