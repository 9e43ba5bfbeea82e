//! The nodes view: one row per master with its state (and quarantine
//! countdown, or a cluster's quarantined slots), its kind when any master
//! is a Redis Cluster (`single`, or `cluster` with its shards up of all),
//! a latency sparkline, run id,
//! uptime, last error and topology warnings; below it, the selected
//! master's error and warnings in full, which rarely fit a cell, and a
//! cluster master's shards, one line each (address, state, slot ranges,
//! quarantined slots, replicas, node ID).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Wrap};
use ratatui::Frame;
use redlock_wire::{NodeState, NodeStatus};

use crate::app::App;
use crate::state::countdown::fraction_left;
use crate::state::nodes::{NodeColumn, NodeRow, ShardCount};

use super::fmt::{self, DASH};
use super::{render_table, theme, title_cell, view_block, why_unknown};

/// Cells of the quarantine countdown bar.
const BAR_WIDTH: usize = 10;
/// Samples in the latency sparkline.
const SPARK_WIDTH: usize = 12;
/// The state column: `quarantined ███████░░░ 40s`.
const STATE_WIDTH: usize = 26;
/// With a cluster master: room for `up, 16384 slots quarantined`.
const CLUSTER_STATE_WIDTH: usize = 27;
/// The most characters a shard's slot ranges take in the pane.
const SLOTS_WIDTH: usize = 32;

/// The table's and the selected master's pane's areas; the pane only when
/// there is something to say.
pub fn split(body: Rect, app: &App) -> (Rect, Rect) {
    let lines = details(app).len() as u16;
    if lines == 0 {
        return (body, Rect::new(body.x, body.bottom(), body.width, 0));
    }
    // A cluster's shards are a table of their own: the pane may take half.
    let share = if selected_status(app).is_some_and(|s| ShardCount::of(s).is_some()) {
        2
    } else {
        3
    };
    let [table, pane] = Layout::vertical([
        Constraint::Min(0),
        Constraint::Length((lines + 2).min(body.height / share)),
    ])
    .areas(body);
    (table, pane)
}

fn selected(app: &App) -> Option<&NodeRow> {
    app.node_table
        .selected_row()
        .and_then(|i| app.nodes.rows.get(i))
}

fn selected_status(app: &App) -> Option<&NodeStatus> {
    selected(app).and_then(|node| node.status.as_ref())
}

/// What the pane says about the selected master.
fn details(app: &App) -> Vec<Line<'static>> {
    let Some(node) = selected(app) else {
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
    if let Some(count) = ShardCount::of(status) {
        lines.extend(shard_lines(status, count));
    }
    lines
}

/// A cluster master's shards: a line that sums them up, then a table of
/// one line per shard (its primary's address, state, slot ranges,
/// quarantined slots, replicas, node ID), aligned by padding.
fn shard_lines(status: &NodeStatus, count: ShardCount) -> Vec<Line<'static>> {
    if status.shards.is_empty() {
        return vec![Line::from(vec![
            Span::styled("cluster ", theme::HEADING),
            Span::styled(
                "no shard known: the agent has not read its topology yet",
                theme::MUTED,
            ),
        ])];
    }
    let mut summary = vec![
        Span::styled("cluster ", theme::HEADING),
        Span::raw(format!(
            "{} shard{}, {} up · {} slots",
            count.total,
            if count.total == 1 { "" } else { "s" },
            count.up,
            count.slots
        )),
    ];
    if count.quarantined_slots > 0 {
        summary.push(Span::raw(" · "));
        summary.push(Span::styled(
            format!("{} quarantined", count.quarantined_slots),
            theme::WARN,
        ));
    }
    let mut lines = vec![Line::from(summary)];
    let slots: Vec<String> = status
        .shards
        .iter()
        .map(|s| fmt::slot_ranges(&s.slots, SLOTS_WIDTH))
        .collect();
    let addr_w = column_width("SHARD", status.shards.iter().map(|s| s.addr.as_str()));
    let slots_w = column_width("SLOTS", slots.iter().map(String::as_str));
    let state_w = column_width("STATE", status.shards.iter().map(|s| s.state.as_str()));
    const QUARANTINED: &str = "QUARANTINED";
    const REPLICAS: &str = "REPLICAS";
    lines.push(Line::from(Span::styled(
        format!(
            "{:<addr_w$} {:<state_w$} {:<slots_w$} {QUARANTINED} {REPLICAS} NODE ID",
            "SHARD", "STATE", "SLOTS"
        ),
        theme::TABLE_HEADER,
    )));
    for (shard, slots) in status.shards.iter().zip(slots) {
        let quarantined = if shard.quarantined_slots > 0 {
            Span::styled(
                format!("{:<w$}", shard.quarantined_slots, w = QUARANTINED.len()),
                theme::WARN,
            )
        } else {
            Span::raw(format!("{:<w$}", 0, w = QUARANTINED.len()))
        };
        lines.push(Line::from(vec![
            Span::raw(format!("{:<addr_w$} ", shard.addr)),
            Span::styled(
                format!("{:<state_w$}", shard.state.as_str()),
                theme::node_state(Some(shard.state)),
            ),
            Span::raw(format!(" {slots:<slots_w$} ")),
            quarantined,
            Span::raw(format!(
                " {:<w$} {}",
                shard.replicas,
                fmt::short_id(&shard.node_id),
                w = REPLICAS.len()
            )),
        ]));
    }
    lines
}

/// The widest of a column's title and values.
fn column_width<'a>(title: &str, values: impl Iterator<Item = &'a str>) -> usize {
    values
        .map(|v| v.chars().count())
        .chain([title.len()])
        .max()
        .unwrap_or(0)
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
    // Only a setup with a cluster master spends a column on the kind.
    let clusters = nodes.any_cluster();
    let kind_width = nodes
        .rows
        .iter()
        .filter_map(|r| r.status.as_ref())
        .map(|s| kind(s).0.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let sort = table.sort();
    let mut header = vec![
        title_cell("NAME", NodeColumn::Name, sort),
        title_cell("STATE", NodeColumn::State, sort),
        Cell::from("KIND"),
        title_cell("LATENCY", NodeColumn::Latency, sort),
        Cell::from("RUN ID"),
        title_cell("UPTIME", NodeColumn::Uptime, sort),
        Cell::from("PERSIST"),
        Cell::from("LAST ERROR"),
        Cell::from("WARNINGS"),
    ];
    let mut widths = vec![
        Constraint::Length(name_width as u16),
        Constraint::Length(if clusters {
            CLUSTER_STATE_WIDTH
        } else {
            STATE_WIDTH
        } as u16),
        Constraint::Length(kind_width as u16),
        Constraint::Length((SPARK_WIDTH + 7) as u16),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(11),
        Constraint::Fill(1),
        Constraint::Fill(1),
    ];
    if !clusters {
        header.remove(KIND_COLUMN);
        widths.remove(KIND_COLUMN);
    }
    let now = app.now();
    render_table(frame, area, block, header, &widths, table, |i| {
        row(&nodes.rows[i], now, clusters)
    });
}

/// The kind column's place, when it is shown.
const KIND_COLUMN: usize = 2;

fn row(node: &NodeRow, now: std::time::Instant, clusters: bool) -> Row<'static> {
    let Some(status) = &node.status else {
        let unknown = if clusters { 8 } else { 7 };
        let mut cells = vec![Cell::from(node.name.clone())];
        cells.extend((0..unknown).map(|_| Cell::from(Span::styled(DASH, theme::MUTED))));
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
    // A cluster stays up while some of its slots are kept out of locks.
    if let Some(count) = ShardCount::of(status).filter(|c| c.quarantined_slots > 0) {
        state.push(Span::raw(", "));
        state.push(Span::styled(
            format!("{} slots quarantined", count.quarantined_slots),
            theme::WARN,
        ));
    }
    let (kind_text, kind_style) = kind(status);
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
    let mut cells = vec![
        Cell::from(node.name.clone()),
        Cell::from(Line::from(state)),
        Cell::from(Span::styled(kind_text, kind_style)),
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
    ];
    if !clusters {
        cells.remove(KIND_COLUMN);
    }
    Row::new(cells)
}

/// The kind cell: `single`, or `cluster 2/3` (shards up of all), in a
/// warning colour while a shard is down.
fn kind(status: &NodeStatus) -> (String, Style) {
    match ShardCount::of(status) {
        None => (status.kind.clone(), theme::TEXT),
        Some(c) if c.total == 0 => (format!("{} {DASH}", status.kind), theme::MUTED),
        Some(c) => (
            format!("{} {}/{}", status.kind, c.up, c.total),
            if c.up < c.total {
                theme::WARN
            } else {
                theme::TEXT
            },
        ),
    }
}
