//! Every colour and text style of the TUI. Views pick a style from here by
//! its meaning (`CRIT`, `MUTED`), never a colour, so the palette can change
//! in one place.

use ratatui::style::{Color, Modifier, Style};

use crate::state::countdown::Urgency;
use redlock_wire::NodeState;

pub const TEXT: Style = Style::new();
pub const MUTED: Style = Style::new().fg(Color::DarkGray);
pub const TITLE: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
pub const BORDER: Style = Style::new().fg(Color::Blue);
pub const TABLE_HEADER: Style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
pub const SELECTED: Style = Style::new().add_modifier(Modifier::REVERSED);
pub const KEY: Style = Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD);
pub const HINT: Style = Style::new().fg(Color::Gray);
pub const HEADING: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);

pub const OK: Style = Style::new().fg(Color::Green);
pub const WARN: Style = Style::new().fg(Color::Yellow);
pub const CRIT: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub const INFO: Style = Style::new().fg(Color::Cyan);

pub const CONNECTED: Style = Style::new().fg(Color::Green).add_modifier(Modifier::BOLD);
pub const CONNECTING: Style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
pub const RECONNECTING: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub const PAUSED: Style = Style::new()
    .fg(Color::Black)
    .bg(Color::Yellow)
    .add_modifier(Modifier::BOLD);
pub const READONLY: Style = Style::new().fg(Color::Black).bg(Color::Cyan);

pub const SPARK: Style = Style::new().fg(Color::Cyan);
pub const SPARK_FAILURE: Style = Style::new().fg(Color::Red);
pub const BAR: Style = Style::new().fg(Color::Yellow);

pub const PROMPT: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
pub const PROMPT_BAD: Style = Style::new().fg(Color::Red);
pub const DIALOG_BORDER: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);

/// A countdown's colour by how close it is to its end.
pub fn urgency(urgency: Urgency) -> Style {
    match urgency {
        Urgency::Calm => OK,
        Urgency::Warning => WARN,
        Urgency::Critical | Urgency::Expired => CRIT,
    }
}

/// The quorum line's colour by margin: masters that may still fail.
pub fn margin(margin: i64) -> Style {
    match margin {
        m if m < 0 => CRIT,
        0 => WARN,
        _ => OK,
    }
}

pub fn node_state(state: Option<NodeState>) -> Style {
    match state {
        Some(NodeState::Up) => OK,
        Some(NodeState::Quarantined) => WARN,
        // Counts for nothing: as bad as down for the quorum.
        Some(NodeState::Down | NodeState::Duplicate) => CRIT,
        None => MUTED,
    }
}

#[cfg(test)]
mod tests {
    /// Colours come from this module only: no other view names one.
    #[test]
    fn no_other_view_names_a_colour() {
        let views = [
            ("mod.rs", include_str!("mod.rs")),
            ("fmt.rs", include_str!("fmt.rs")),
            ("header.rs", include_str!("header.rs")),
            ("summary.rs", include_str!("summary.rs")),
            ("nodes.rs", include_str!("nodes.rs")),
            ("locks.rs", include_str!("locks.rs")),
            ("leaks.rs", include_str!("leaks.rs")),
            ("help.rs", include_str!("help.rs")),
            ("confirm.rs", include_str!("confirm.rs")),
        ];
        for (name, source) in views {
            for needle in ["Color::", "Color;", "Color}", ".fg(", ".bg(", "Modifier::"] {
                assert!(
                    !source.contains(needle),
                    "view/{name} uses {needle} instead of the theme"
                );
            }
        }
    }
}
