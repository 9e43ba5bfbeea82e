//! The confirm dialog in front of a force release: it names the lock, the
//! permit or the leadership and its holder, says what will happen, and
//! takes its answer keys from the key table.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};
use ratatui::Frame;

use crate::app::{App, Confirm};
use crate::client::Command;
use crate::keys;

use super::fmt::{self, DASH};
use super::{centered, theme};

pub fn render(frame: &mut Frame, area: Rect, app: &App, confirm: &Confirm) {
    let popup = centered(area, 66, 10);
    if popup.width == 0 || popup.height == 0 {
        return;
    }
    let holder = confirm
        .owner
        .clone()
        .unwrap_or_else(|| "unknown (no owner label)".to_string());
    // Live, not as of the question: the lock may run out while it is asked.
    let validity = match app.locks.find(&confirm.resource) {
        Some(lock) => lock
            .validity
            .map_or_else(|| DASH.to_string(), |v| fmt::duration(v.left(app.now()))),
        None => "gone".to_string(),
    };
    let mut answers = Vec::new();
    for (key, word) in keys::hints(keys::CONFIRM, app.settings.readonly) {
        answers.push(Span::styled(format!("<{key}>"), theme::KEY));
        answers.push(Span::styled(format!(" {word}   "), theme::HINT));
    }
    let lines = vec![
        Line::from(vec![
            Span::raw("Force-release "),
            Span::styled(confirm.command.what(), theme::TITLE),
            Span::raw("?"),
        ]),
        Line::from(vec![
            Span::raw("Holder: "),
            Span::styled(holder, theme::TITLE),
            Span::styled(
                format!(
                    " · on {} of {} masters · valid {validity}",
                    confirm.held_on, confirm.masters
                ),
                theme::MUTED,
            ),
        ]),
        Line::default(),
        Line::from(Span::styled(consequence(&confirm.command), theme::WARN)),
        Line::default(),
        Line::from(answers),
    ];
    let block = Block::bordered()
        .border_style(theme::DIALOG_BORDER)
        .title(Span::styled(" Force release ", theme::CRIT));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(block).wrap(Wrap { trim: true }),
        popup,
    );
}

/// What the force release does, and who hears of it.
fn consequence(command: &Command) -> &'static str {
    match command {
        Command::ForceRelease(_) => {
            "Deletes the key on every master. A hold hears lost at once; other holders are not \
             told and may go on."
        }
        Command::ForceReleasePermit { .. } => {
            "Deletes this permit on every master; a waiter may take it. Its hold hears lost at \
             once; other holders are not told."
        }
        Command::ForceReleaseLeadership(_) => {
            "Ends this leadership on every master: its campaign hears lost at once, and the next \
             leader gets a larger term."
        }
    }
}
