//! The help screen, read from the key table: every scope's bindings, with
//! dangerous ones left out in read-only mode.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};
use ratatui::Frame;

use crate::app::App;
use crate::keys::{self, SCOPES};

use super::{centered, theme};

/// Width of the keys column.
const KEYS_WIDTH: usize = 22;

/// The help text, one line per binding under a heading per scope.
pub fn lines(app: &App) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for &scope in SCOPES {
        let bindings: Vec<_> = keys::BINDINGS
            .iter()
            .filter(|b| b.scope == scope && !(app.settings.readonly && b.action.is_dangerous()))
            .collect();
        if bindings.is_empty() {
            continue;
        }
        if !lines.is_empty() {
            lines.push(Line::default());
        }
        lines.push(Line::from(Span::styled(scope.title(), theme::HEADING)));
        for binding in bindings {
            lines.push(Line::from(vec![
                Span::styled(
                    format!("  {:<KEYS_WIDTH$}", keys::keys_label(binding)),
                    theme::KEY,
                ),
                Span::styled(binding.help, theme::TEXT),
            ]));
        }
    }
    lines.push(Line::default());
    let mut about = format!(
        "redlock-tui {} · {} · refresh {}",
        env!("CARGO_PKG_VERSION"),
        app.settings.socket.display(),
        humantime::format_duration(app.settings.refresh)
    );
    if app.settings.readonly {
        about.push_str(" · read-only: force release is off");
    }
    lines.push(Line::from(Span::styled(about, theme::MUTED)));
    lines
}

pub fn render(frame: &mut Frame, area: Rect, app: &App, scroll: u16) {
    let popup = centered(
        area,
        88,
        area.height.saturating_sub(2).max(area.height.min(3)),
    );
    if popup.width == 0 || popup.height == 0 {
        return;
    }
    let lines = lines(app);
    let inner_height = popup.height.saturating_sub(2);
    let max_scroll = (lines.len() as u16).saturating_sub(inner_height);
    let block = Block::bordered()
        .border_style(theme::BORDER)
        .title(Span::styled(" Help · keys ", theme::TITLE))
        .title_bottom(Span::styled(" esc closes · j/k scroll ", theme::MUTED));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .scroll((scroll.min(max_scroll), 0)),
        popup,
    );
}
