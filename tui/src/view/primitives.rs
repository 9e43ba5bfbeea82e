//! The semaphores and elections view: one row per semaphore and election
//! named in the locks listing, with what the agent said of it this poll:
//! a semaphore's permits held of its limit and their holders, an
//! election's leader, term, time in office and validity.

use std::time::Instant;

use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row};
use ratatui::Frame;

use crate::app::App;
use crate::state::countdown::{urgency, Countdown};
use crate::state::primitives::{Primitive, PrimitiveColumn};
use crate::state::Known;

use super::fmt::{self, DASH};
use super::{render_notice, render_table, theme, title_cell, view_block, why_unknown};

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let primitives = &app.primitives;
    let table = &app.primitive_table;
    let mut title = format!(
        " Semaphores & elections [{}/{}] ",
        table.order().len(),
        table.total()
    );
    if let Some(latest) = app.summary.latest() {
        title.push_str(&format!(
            "· here: permits {} · leading {} ",
            latest.permits_held, latest.leaderships_held
        ));
    }
    if app.locks.table.get().is_some_and(|t| t.truncated) {
        title.push_str("· from a truncated listing ");
    }
    let block = view_block(title);
    if let Some(reason) = why_unknown(app, &primitives.rows) {
        render_notice(
            frame,
            area,
            block,
            Line::from(Span::styled(reason, theme::WARN)),
        );
        return;
    }
    if table.total() == 0 {
        let text = "no permit or leadership is held on the masters";
        render_notice(
            frame,
            area,
            block,
            Line::from(Span::styled(text, theme::MUTED)),
        );
        return;
    }
    let sort = table.sort();
    let header = vec![
        title_cell("KIND", PrimitiveColumn::Kind, sort),
        title_cell("NAME", PrimitiveColumn::Name, sort),
        Cell::from("HELD"),
        title_cell("TERM", PrimitiveColumn::Term, sort),
        Cell::from("SINCE"),
        Cell::from("VALIDITY"),
        Cell::from("HELD BY"),
    ];
    let widths = [
        Constraint::Length(10),
        Constraint::Min(12),
        Constraint::Length(7),
        // Terms are fences: up to 20 digits, 16 in practice.
        Constraint::Length(16),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Min(16),
    ];
    let now = app.now();
    let rows = primitives.rows();
    render_table(frame, area, block, header, &widths, table, |i| {
        row(&rows[i], now)
    });
}

fn dash() -> Span<'static> {
    Span::styled(DASH, theme::MUTED)
}

/// A validity counting down, coloured against what it was when read.
fn validity(c: Countdown, now: Instant) -> Span<'static> {
    let left = c.left(now);
    Span::styled(
        fmt::duration(left),
        theme::urgency(urgency(left, c.at_read())),
    )
}

/// One row; `-` for whatever the agent has not (yet) said, blank for what
/// does not apply to the kind.
pub fn row(primitive: &Primitive, now: Instant) -> Row<'static> {
    let kind = Cell::from(primitive.kind());
    let name = Cell::from(primitive.name().to_string());
    let blank = || Cell::from("");
    let holders = |text: Option<String>| {
        Cell::from(text.map_or_else(dash, |t| if t.is_empty() { dash() } else { Span::raw(t) }))
    };
    let failed = |e: &str| Cell::from(Span::styled(e.to_string(), theme::WARN));
    match primitive {
        Primitive::Semaphore { state, .. } => {
            let (held, valid, by) = match state {
                Known::Known(s) => (
                    Cell::from(format!(
                        "{}/{}",
                        s.permits.len(),
                        s.limit.map_or_else(|| DASH.to_string(), |l| l.to_string())
                    )),
                    Cell::from(s.validity.map_or_else(dash, |v| validity(v, now))),
                    holders(primitive.holders()),
                ),
                Known::Failed(e) => (Cell::from(dash()), Cell::from(dash()), failed(e)),
                Known::Unknown => (Cell::from(dash()), Cell::from(dash()), Cell::from(dash())),
            };
            Row::new(vec![kind, name, held, blank(), blank(), valid, by])
        }
        Primitive::Election { state, .. } => {
            let (term, since, valid, by) = match state {
                Known::Known(Some(l)) => (
                    Cell::from(fmt::or_dash(l.leader.term)),
                    Cell::from(
                        l.led_at(now)
                            .map_or_else(dash, |d| Span::raw(fmt::coarse(d))),
                    ),
                    Cell::from(validity(l.validity, now)),
                    holders(primitive.holders()),
                ),
                Known::Known(None) => (
                    Cell::from(dash()),
                    Cell::from(dash()),
                    Cell::from(dash()),
                    Cell::from(Span::styled("no leader", theme::WARN)),
                ),
                Known::Failed(e) => (
                    Cell::from(dash()),
                    Cell::from(dash()),
                    Cell::from(dash()),
                    failed(e),
                ),
                Known::Unknown => (
                    Cell::from(dash()),
                    Cell::from(dash()),
                    Cell::from(dash()),
                    Cell::from(dash()),
                ),
            };
            Row::new(vec![kind, name, blank(), term, since, valid, by])
        }
    }
}
