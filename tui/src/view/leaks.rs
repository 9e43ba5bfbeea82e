//! The leaks view: the fleet scanner's last pass per master (counts by
//! kind, or why it failed) above the list of leaked keys it found; the
//! title names the agent that scanned, and says when the report is stale.

use std::time::Instant;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Frame;

use crate::app::App;
use crate::state::leaks::{LeakColumn, LeakRow, Scan};

use super::fmt::{self, DASH};
use super::{render_notice, render_table, theme, title_cell, view_block, why_unknown};

/// The per-master summary's and the keys table's areas.
pub fn split(body: Rect, app: &App) -> (Rect, Rect) {
    let masters = app.leaks.report.get().map_or(0, |r| r.nodes.len()) as u16;
    let [scans, keys] = Layout::vertical([
        Constraint::Length((masters + 3).min(body.height / 2)),
        Constraint::Min(0),
    ])
    .areas(body);
    (scans, keys)
}

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let leaks = &app.leaks;
    let Some(report) = leaks.report.get() else {
        let reason = why_unknown(app, &leaks.report).unwrap_or_default();
        let block = view_block(" Leaks ".to_string());
        render_notice(
            frame,
            area,
            block,
            Line::from(Span::styled(reason, theme::WARN)),
        );
        return;
    };
    let title = format!(
        " Leaks · {} scans{} · every {} · repair {}{} ",
        report.scans,
        report
            .scanner
            .as_ref()
            .map_or(String::new(), |s| format!(" by {s}")),
        fmt::coarse(report.interval),
        report.repair,
        if report.stale { " · STALE" } else { "" }
    );
    if report.scans == 0 || report.nodes.is_empty() {
        let text = "no scan has finished yet";
        render_notice(
            frame,
            area,
            view_block(title),
            Line::from(Span::styled(text, theme::MUTED)),
        );
        return;
    }
    let (scans_area, keys_area) = split(area, app);
    let now = app.now();
    let header = Row::new(
        [
            "NODE", "SCANNED", "TOOK", "KEYS", "NO TTL", "TTL>MAX", "MINORITY", "REPAIRED", "ERROR",
        ]
        .map(Cell::from),
    )
    .style(theme::TABLE_HEADER);
    let rows: Vec<Row> = report
        .nodes
        .iter()
        .map(|scan| scan_row(scan, now))
        .collect();
    let widths = [
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Fill(1),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(view_block(title))
            .column_spacing(1),
        scans_area,
    );

    let table = &app.leak_table;
    let block = view_block(format!(
        " Leaked keys [{}/{}] ",
        table.order().len(),
        table.total()
    ));
    if table.total() == 0 {
        let text = if report.unread.is_empty() {
            "no leaked keys".to_string()
        } else {
            format!(
                "no leaked keys on the masters scanned; {} could not be scanned",
                report.unread.join(", ")
            )
        };
        render_notice(
            frame,
            keys_area,
            block,
            Line::from(Span::styled(text, theme::OK)),
        );
        return;
    }
    let sort = table.sort();
    let header = vec![
        title_cell("NODE", LeakColumn::Node, sort),
        title_cell("KIND", LeakColumn::Kind, sort),
        title_cell("RESOURCE", LeakColumn::Resource, sort),
        title_cell("TTL", LeakColumn::Ttl, sort),
    ];
    let widths = [
        Constraint::Length(8),
        Constraint::Length(13),
        Constraint::Fill(1),
        Constraint::Length(9),
    ];
    let rows = leaks.rows();
    render_table(frame, keys_area, block, header, &widths, table, |i| {
        key_row(&rows[i], now)
    });
}

/// A count, highlighted when not zero.
fn count(n: u64) -> Cell<'static> {
    let style = if n > 0 { theme::WARN } else { theme::MUTED };
    Cell::from(Span::styled(n.to_string(), style))
}

fn scan_row(scan: &Scan, now: Instant) -> Row<'static> {
    let leaks = &scan.leaks;
    let ago = scan.age(now).map_or_else(
        || DASH.to_string(),
        |age| format!("{} ago", fmt::coarse(age)),
    );
    Row::new(vec![
        Cell::from(leaks.node.clone()),
        Cell::from(ago),
        Cell::from(fmt::millis(leaks.duration_ms as f64)),
        Cell::from(leaks.keys_scanned.to_string()),
        count(leaks.no_ttl),
        count(leaks.ttl_over_max),
        count(leaks.minority),
        Cell::from(leaks.repaired.to_string()),
        Cell::from(Span::styled(
            leaks.error.clone().unwrap_or_default(),
            theme::CRIT,
        )),
    ])
}

fn key_row(row: &LeakRow, now: Instant) -> Row<'static> {
    let ttl = row.ttl.map_or_else(
        || Span::styled("none", theme::CRIT),
        |t| Span::raw(fmt::duration(t.left(now))),
    );
    Row::new(vec![
        Cell::from(row.node.clone()),
        Cell::from(Span::styled(row.kind.clone(), theme::WARN)),
        Cell::from(row.resource.clone()),
        Cell::from(ttl),
    ])
}
