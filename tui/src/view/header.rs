//! The header: the agent's socket, the connection state, the quorum and the
//! key hints of what has the keyboard.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::app::App;
use crate::client::Conn;
use crate::keys;
use crate::state::Known;

use super::{fmt, theme};

/// Below this height the hints are left out.
const HINTS_MIN_HEIGHT: u16 = 12;
/// At most this many lines of hints.
const HINT_LINES: usize = 2;

/// Lines the header takes at this screen size.
pub fn height(app: &App, area: Rect) -> u16 {
    if area.height < 2 {
        return area.height;
    }
    if area.height < HINTS_MIN_HEIGHT {
        return 1;
    }
    1 + hint_lines(app, area.width).len() as u16
}

/// `CONNECTED`, `CONNECTING`, `RECONNECTING in 2s`.
pub fn conn_text(conn: &Conn, clock: std::time::Instant) -> (String, ratatui::style::Style) {
    match conn {
        Conn::Connected => ("CONNECTED".to_string(), theme::CONNECTED),
        Conn::Connecting { attempt: 0 } => ("CONNECTING".to_string(), theme::CONNECTING),
        Conn::Connecting { .. } => ("RECONNECTING now".to_string(), theme::CONNECTING),
        Conn::Reconnecting { retry_at, .. } => {
            let left = retry_at.saturating_duration_since(clock);
            // Round up: "in 0s" would be a lie until the attempt starts.
            let secs = left.as_millis().div_ceil(1_000).max(1);
            (format!("RECONNECTING in {secs}s"), theme::RECONNECTING)
        }
    }
}

/// `4/5 usable, quorum 3`, coloured by how many more masters may fail.
pub fn quorum_span(app: &App) -> Span<'static> {
    match &app.nodes.quorum {
        Known::Known(q) => Span::styled(
            format!("{}/{} usable, quorum {}", q.usable, q.total, q.quorum),
            theme::margin(q.margin()),
        ),
        _ => Span::styled(
            format!("{d}/{d} usable, quorum {d}", d = fmt::DASH),
            theme::MUTED,
        ),
    }
}

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    if area.height == 0 {
        return;
    }
    let mut lines = vec![first_line(app, area.width)];
    if area.height > 1 {
        lines.extend(hint_lines(app, area.width));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// The status line, dropping its least useful parts until it fits `width`:
/// the connection state and the quorum go last.
fn first_line(app: &App, width: u16) -> Line<'static> {
    let (conn, conn_style) = conn_text(&app.conn, app.clock);
    // (keep rank: lower is kept longer, span) in screen order.
    let mut parts: Vec<(u8, Span<'static>)> = vec![
        (5, Span::styled("redlock-tui", theme::TITLE)),
        (
            4,
            Span::styled(app.settings.socket.display().to_string(), theme::TEXT),
        ),
        (0, Span::styled(conn, conn_style)),
        (1, quorum_span(app)),
    ];
    if let Some(latest) = app.summary.latest() {
        // Readers are not in `locks_held`: named once there are any.
        let readers = if latest.readers_held > 0 {
            format!(" · {} reading", latest.readers_held)
        } else {
            String::new()
        };
        parts.push((
            6,
            Span::styled(
                format!(
                    "{} held here{readers} · {} waiting",
                    latest.locks_held, latest.waiters
                ),
                theme::MUTED,
            ),
        ));
    }
    if let Some(latest) = app.summary.latest() {
        // Semaphores and elections through this agent, once it has any;
        // the first figures to go when the line is short (the
        // primitives view's title repeats them).
        if latest.permits_held > 0 || latest.leaderships_held > 0 {
            parts.push((
                7,
                Span::styled(
                    format!(
                        "permits {} · leading {}",
                        latest.permits_held, latest.leaderships_held
                    ),
                    theme::MUTED,
                ),
            ));
        }
    }
    if app.paused.is_some() {
        parts.push((2, Span::styled(" PAUSED ", theme::PAUSED)));
    }
    if app.settings.readonly {
        parts.push((3, Span::styled(" READONLY ", theme::READONLY)));
    }
    let cost =
        |parts: &[(u8, Span<'static>)]| -> usize { parts.iter().map(|(_, s)| s.width() + 2).sum() };
    while cost(&parts) > usize::from(width) + 1 && parts.len() > 1 {
        let drop = parts
            .iter()
            .enumerate()
            .max_by_key(|(_, (rank, _))| *rank)
            .map(|(i, _)| i)
            .unwrap_or(0);
        parts.remove(drop);
    }
    let mut spans = vec![Span::raw(" ")];
    for (i, (_, span)) in parts.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw("  "));
        }
        spans.push(span);
    }
    Line::from(spans)
}

/// The hints of the current context packed into lines of `width`,
/// `<key> word` each; what does not fit in [`HINT_LINES`] is left to `?`.
fn hint_lines(app: &App, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width);
    let mut lines: Vec<Vec<Span<'static>>> = vec![Vec::new()];
    let mut used = 0;
    for (key, word) in keys::hints(app.context(), app.settings.readonly) {
        // " <key>" and " word ".
        let cost = key.chars().count() + word.chars().count() + 5;
        if used > 0 && used + cost > width {
            if lines.len() == HINT_LINES {
                break;
            }
            lines.push(Vec::new());
            used = 0;
        }
        // Cannot fail: `lines` starts with one line and only grows.
        let spans = lines.last_mut().expect("at least one line");
        spans.push(Span::styled(format!(" <{key}>"), theme::KEY));
        spans.push(Span::styled(format!(" {word} "), theme::HINT));
        used += cost;
    }
    lines
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(Line::from)
        .collect()
}
