//! The nodes view: one row per master with its state (and quarantine
//! countdown), a latency sparkline, run id, uptime, last error and
//! topology warnings; below it, the selected master's error and warnings in
//! full, which rarely fit a cell.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Wrap};
use ratatui::Frame;
use redlock_wire::NodeState;

use crate::app::App;
use crate::state::countdown::fraction_left;
use crate::state::nodes::{NodeColumn, NodeRow};

use super::fmt::{self, DASH};
use super::{render_table, theme, title_cell, view_block, why_unknown};

/// Cells of the quarantine countdown bar.
const BAR_WIDTH: usize = 10;
/// Samples in the latency sparkline.
const SPARK_WIDTH: usize = 12;

/// The table's and the selected master's pane's areas; the pane only when
/// there is something to say.
pub fn split(body: Rect, app: &App) -> (Rect, Rect) {
    let lines = details(app).len() as u16;
    if lines == 0 {
        return (body, Rect::new(body.x, body.bottom(), body.width, 0));
    }
    let [table, pane] = Layout::vertical([
        Constraint::Min(0),
        Constraint::Length((lines + 2).min(body.height / 3)),
    ])
    .areas(body);
    (table, pane)
}

/// What the pane says about the selected master.
fn details(app: &App) -> Vec<Line<'static>> {
    let Some(node) = app
        .node_table
        .selected_row()
        .and_then(|i| app.nodes.rows.get(i))
    else {
        return Vec::new();
    };
    let Some(status) = &node.status else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    if let Some(q) = node.quarantine {
        lines.push(Line::from(vec![
            Span::styled("quarantined ", theme::WARN),
            Span::raw(format!(
                "by the {} detector; takes part in locks again in {}",
                status.detector.as_deref().unwrap_or(DASH),
                fmt::coarse(q.left.left(app.now()))
            )),
        ]));
    }
    if let Some(error) = &status.last_error {
        lines.push(Line::from(vec![
            Span::styled("last error ", theme::CRIT),
            Span::raw(error.clone()),
        ]));
    }
    for warning in &status.warnings {
        lines.push(Line::from(vec![
            Span::styled("warning ", theme::WARN),
            Span::raw(warning.clone()),
        ]));
    }
    lines
}

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let (area, pane) = split(area, app);
    render_table_part(frame, area, app);
    if pane.height > 0 {
        let name = app
            .node_table
            .selected_key()
            .unwrap_or_default()
            .to_string();
        frame.render_widget(
            Paragraph::new(details(app))
                .block(view_block(format!(" {name} ")))
                .wrap(Wrap { trim: true }),
            pane,
        );
    }
}

fn render_table_part(frame: &mut Frame, area: Rect, app: &App) {
    let nodes = &app.nodes;
    let table = &app.node_table;
    let mut block = view_block(format!(" Nodes [{}] ", nodes.rows.len()));
    if let Some(reason) = why_unknown(app, &nodes.quorum) {
        block = block.title_bottom(Span::styled(format!(" {reason} "), theme::WARN));
    }
    if nodes.rows.is_empty() {
        let text = why_unknown(app, &nodes.quorum).unwrap_or_else(|| "no masters".to_string());
        super::render_notice(
            frame,
            area,
            block,
            Line::from(Span::styled(text, theme::MUTED)),
        );
        return;
    }
    let name_width = nodes
        .rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let sort = table.sort();
    let header = vec![
        title_cell("NAME", NodeColumn::Name, sort),
        title_cell("STATE", NodeColumn::State, sort),
        title_cell("LATENCY", NodeColumn::Latency, sort),
        Cell::from("RUN ID"),
        title_cell("UPTIME", NodeColumn::Uptime, sort),
        Cell::from("PERSIST"),
        Cell::from("LAST ERROR"),
        Cell::from("WARNINGS"),
    ];
    let widths = [
        Constraint::Length(name_width as u16),
        Constraint::Length(26),
        Constraint::Length((SPARK_WIDTH + 7) as u16),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(11),
        Constraint::Fill(1),
        Constraint::Fill(1),
    ];
    let now = app.now();
    render_table(frame, area, block, header, &widths, table, |i| {
        row(&nodes.rows[i], now)
    });
}

fn row(node: &NodeRow, now: std::time::Instant) -> Row<'static> {
    let Some(status) = &node.status else {
        let mut cells = vec![Cell::from(node.name.clone())];
        cells.extend((0..7).map(|_| Cell::from(Span::styled(DASH, theme::MUTED))));
        return Row::new(cells);
    };
    let state_style = theme::node_state(Some(status.state));
    let mut state = vec![Span::styled(status.state.as_str(), state_style)];
    if let (NodeState::Quarantined, Some(q)) = (status.state, node.quarantine) {
        let left = q.left.left(now);
        state.push(Span::raw(" "));
        state.push(Span::styled(
            fmt::bar(fraction_left(left, q.full), BAR_WIDTH),
            theme::BAR,
        ));
        state.push(Span::styled(format!(" {}", fmt::coarse(left)), theme::WARN));
    }
    let history: Vec<Option<f64>> = node.latency.iter().copied().collect();
    let latency = Line::from(vec![
        Span::styled(
            format!("{:<w$}", fmt::spark(&history, SPARK_WIDTH), w = SPARK_WIDTH),
            theme::SPARK,
        ),
        Span::raw(" "),
        Span::styled(
            status
                .latency_ms
                .map_or_else(|| DASH.to_string(), fmt::millis),
            theme::TEXT,
        ),
    ]);
    let warnings = if status.warnings.is_empty() {
        Span::raw("")
    } else {
        Span::styled(status.warnings.join("; "), theme::WARN)
    };
    Row::new(vec![
        Cell::from(node.name.clone()),
        Cell::from(Line::from(state)),
        Cell::from(latency),
        Cell::from(
            status
                .run_id
                .as_deref()
                .map_or(DASH, fmt::short_id)
                .to_string(),
        ),
        Cell::from(status.uptime_s.map_or_else(
            || DASH.to_string(),
            |s| fmt::coarse(std::time::Duration::from_secs(s)),
        )),
        Cell::from(fmt::or_dash(status.persistence.as_deref())),
        Cell::from(Span::styled(
            status.last_error.clone().unwrap_or_default(),
            theme::CRIT,
        )),
        Cell::from(warnings),
    ])
}
