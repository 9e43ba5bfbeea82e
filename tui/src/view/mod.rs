//! Render only: each module draws one part of the screen from `&App` and
//! never changes it or does I/O.
//!
//! The screen, top to bottom: the [`header`] (agent, connection, quorum,
//! key hints), the [`summary`] strip, the current view ([`nodes`] with the
//! selected master's pane, [`locks`] with its detail pane, [`primitives`],
//! [`leaks`]), and
//! the status line (the
//! prompt, a flash message, or the table's counts). [`help`] and
//! [`confirm`] draw over everything. Colours come from [`theme`] only;
//! shared text forms from [`fmt`].
//!
//! Small terminals degrade: the summary strip, then the hints go first,
//! and no layout arithmetic may underflow (render tests go down to 1x1).

pub mod confirm;
pub mod fmt;
pub mod header;
pub mod help;
pub mod leaks;
pub mod locks;
pub mod nodes;
pub mod primitives;
pub mod summary;
pub mod theme;

#[cfg(test)]
mod tests;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};
use ratatui::Frame;

use crate::app::{App, Level, Mode, PromptKind, View};
use crate::client::Conn;
use crate::state::sort::Sort;
use crate::state::table::TableView;
use crate::state::Known;

/// Below this height the summary strip is left out.
const SUMMARY_MIN_HEIGHT: u16 = 20;

/// Where each part of the screen goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    pub summary: Rect,
    pub body: Rect,
    pub status: Rect,
}

/// Splits the screen; parts that do not fit get zero height.
pub fn areas(app: &App, area: Rect) -> Areas {
    let header = header::height(app, area);
    let summary = if area.height >= SUMMARY_MIN_HEIGHT {
        summary::HEIGHT
    } else {
        0
    };
    let status = u16::from(area.height >= 3);
    let [header, summary, body, status] = Layout::vertical([
        Constraint::Length(header),
        Constraint::Length(summary),
        Constraint::Min(0),
        Constraint::Length(status),
    ])
    .areas(area);
    Areas {
        header,
        summary,
        body,
        status,
    }
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let parts = areas(app, area);
    header::render(frame, parts.header, app);
    summary::render(frame, parts.summary, app);
    match app.view {
        View::Nodes => nodes::render(frame, parts.body, app),
        View::Locks => locks::render(frame, parts.body, app),
        View::Primitives => primitives::render(frame, parts.body, app),
        View::Leaks => leaks::render(frame, parts.body, app),
    }
    status_line(frame, parts.status, app);
    match &app.mode {
        Mode::Help { scroll, .. } => help::render(frame, area, app, *scroll),
        Mode::Confirm(confirm) => confirm::render(frame, area, app, confirm),
        _ => {}
    }
}

/// Rows a page holds in the current view's table at the current size.
pub fn page_rows(app: &App) -> usize {
    let parts = areas(app, Rect::new(0, 0, app.size.0, app.size.1));
    let table = match app.view {
        View::Nodes => nodes::split(parts.body, app).0,
        View::Locks => locks::split(parts.body, app).0,
        View::Primitives => parts.body,
        View::Leaks => leaks::split(parts.body, app).1,
    };
    table_rows(table)
}

/// Data rows inside a bordered table with a header row.
pub fn table_rows(area: Rect) -> usize {
    usize::from(area.height.saturating_sub(3))
}

/// A column title, with an arrow on the sort column.
pub fn title_cell<C: PartialEq + Copy>(title: &str, column: C, sort: Sort<C>) -> Cell<'static> {
    if sort.column == column {
        let arrow = if sort.reverse { "↓" } else { "↑" };
        Cell::from(format!("{title}{arrow}"))
    } else {
        Cell::from(title.to_string())
    }
}

/// The bordered block around a view.
pub fn view_block(title: String) -> Block<'static> {
    Block::bordered()
        .border_style(theme::BORDER)
        .title(Span::styled(title, theme::TITLE))
}

/// Renders the visible window of `view` as a table: only the rows that fit
/// are built, so thousands of rows cost what a screenful does.
pub fn render_table<C: Copy + PartialEq>(
    frame: &mut Frame,
    area: Rect,
    block: Block<'static>,
    header: Vec<Cell<'static>>,
    widths: &[Constraint],
    view: &TableView<C>,
    build: impl Fn(usize) -> Row<'static>,
) {
    let height = table_rows(area);
    let offset = view.offset_for(height);
    let selected = view.selected_position();
    let rows: Vec<Row> = view
        .order()
        .iter()
        .enumerate()
        .skip(offset)
        .take(height)
        .map(|(position, &i)| {
            let row = build(i);
            if Some(position) == selected {
                row.style(theme::SELECTED)
            } else {
                row
            }
        })
        .collect();
    let table = Table::new(rows, widths.to_vec())
        .header(Row::new(header).style(theme::TABLE_HEADER))
        .block(block)
        .column_spacing(1);
    frame.render_widget(table, area);
}

/// A message in place of a table's rows.
pub fn render_notice(frame: &mut Frame, area: Rect, block: Block<'static>, line: Line<'static>) {
    frame.render_widget(
        Paragraph::new(line)
            .block(block)
            .wrap(ratatui::widgets::Wrap { trim: true }),
        area,
    );
}

/// Why a view has no data: the connection's error when it is down, else
/// the endpoint's.
pub fn why_unknown<T>(app: &App, known: &Known<T>) -> Option<String> {
    let reason = known.reason()?;
    Some(match &app.conn {
        Conn::Reconnecting { error, .. } => format!("agent unreachable: {error}"),
        Conn::Connecting { .. } if matches!(known, Known::Unknown) => {
            "connecting to the agent…".to_string()
        }
        _ => reason.to_string(),
    })
}

/// A rectangle of at most `width` x `height` centred in `area`.
pub fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect::new(
        area.x + (area.width - width) / 2,
        area.y + (area.height - height) / 2,
        width,
        height,
    )
}

/// The bottom line: the prompt while typing, else a flash message, else the
/// current table's counts, filter and sort.
fn status_line(frame: &mut Frame, area: Rect, app: &App) {
    if area.height == 0 {
        return;
    }
    let line = match (&app.mode, &app.flash) {
        (Mode::Prompt(prompt), _) => {
            let sigil = match prompt.kind {
                PromptKind::Command => ":",
                PromptKind::Filter => "/",
            };
            let style = if prompt.error.is_some() {
                theme::PROMPT_BAD
            } else {
                theme::PROMPT
            };
            let mut spans = vec![
                Span::styled(format!("{sigil}{}", prompt.text), style),
                Span::styled("█", theme::PROMPT),
            ];
            if let Some(error) = &prompt.error {
                spans.push(Span::styled(format!("  {error}"), theme::PROMPT_BAD));
            }
            Line::from(spans)
        }
        (_, Some(flash)) => {
            let style = match flash.level {
                Level::Info => theme::INFO,
                Level::Warn => theme::WARN,
                Level::Error => theme::CRIT,
            };
            Line::from(Span::styled(flash.text.clone(), style))
        }
        _ => Line::from(Span::styled(table_status(app), theme::MUTED)),
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// `3 of 120 locks · filter /orders · sort validity↑`
fn table_status(app: &App) -> String {
    let (shown, total) = match app.view {
        View::Nodes => (app.node_table.order().len(), app.node_table.total()),
        View::Locks => (app.lock_table.order().len(), app.lock_table.total()),
        View::Primitives => (
            app.primitive_table.order().len(),
            app.primitive_table.total(),
        ),
        View::Leaks => (app.leak_table.order().len(), app.leak_table.total()),
    };
    let noun = match app.view {
        View::Nodes => "nodes",
        View::Locks => "locks",
        View::Primitives => "semaphores and elections",
        View::Leaks => "leaked keys",
    };
    let mut text = format!("{shown} of {total} {noun}");
    if let Some(filter) = app.filter() {
        text.push_str(&format!(" · filter /{}", filter.text()));
    }
    if matches!(app.view, View::Locks | View::Primitives)
        && app.locks.table.get().is_some_and(|t| t.truncated)
    {
        text.push_str(" · the agent listed only some keys");
    }
    text
}
