//! The locks view: one row per lock key found on the masters, a matrix of
//! each master's copy (its TTL, `missing`, or `other` for a different
//! holder), and the detail pane for the selected lock: its holder, or a
//! shared lock's readers.

use std::time::{Duration, Instant};

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row};
use ratatui::Frame;

use crate::app::App;
use crate::state::countdown::{fraction_left, urgency, Countdown};
use crate::state::locks::{
    holder_label, is_shared, readers_shown, KeyState, LockColumn, LockRow, READERS_SHOWN,
};
use crate::state::primitives::{holder, Kind};
use crate::state::Known;

use super::fmt::{self, DASH};
use super::{render_notice, render_table, theme, title_cell, view_block, why_unknown};

/// Narrowest cell of the per-master matrix (`missing`).
const MASTER_WIDTH: usize = 7;
/// Cells of the countdown bars in the detail pane.
const BAR_WIDTH: usize = 16;

/// The table's and the detail pane's areas; the pane only when open.
pub fn split(body: Rect, app: &App) -> (Rect, Rect) {
    if !app.detail_open() {
        return (body, Rect::new(body.x, body.bottom(), body.width, 0));
    }
    let masters = app
        .detail
        .get()
        .map_or(0, |d| d.masters.len())
        .max(app.locks.masters().len());
    let wanted = masters as u16 + 9 + app.detail_lock().map_or(0, |l| reader_lines(&l.info));
    let [table, detail] = Layout::vertical([
        Constraint::Min(0),
        Constraint::Length(wanted.min(body.height)),
    ])
    .areas(body);
    (table, detail)
}

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let (table_area, detail_area) = split(area, app);
    render_table_part(frame, table_area, app);
    if detail_area.height > 0 {
        render_detail(frame, detail_area, app);
    }
}

fn render_table_part(frame: &mut Frame, area: Rect, app: &App) {
    let locks = &app.locks;
    let table = &app.lock_table;
    let listed = locks.table.get();
    let truncated = listed.is_some_and(|t| t.truncated);
    let count = format!(
        "{}/{}{}",
        table.order().len(),
        table.total(),
        if truncated { "+" } else { "" }
    );
    let mut title = format!(" Locks [{count}] ");
    if let Some(listed) = listed.filter(|t| t.truncated) {
        title.push_str(&format!("of {} ", listed.total));
    }
    if !app.query.prefix.is_empty() {
        title.push_str(&format!("· agent prefix {:?} ", app.query.prefix));
    }
    let mut block = view_block(title);
    if let Some(listed) = listed.filter(|t| !t.unread.is_empty()) {
        // Never a list that looks complete when it is not.
        block = block.title(Span::styled(
            format!(" partial: {} unread ", listed.unread.join(", ")),
            theme::WARN,
        ));
    }
    if let Some(reason) = why_unknown(app, &locks.table) {
        render_notice(
            frame,
            area,
            block,
            Line::from(Span::styled(reason, theme::WARN)),
        );
        return;
    }
    if table.total() == 0 {
        let text = if app.query.prefix.is_empty() {
            "no lock keys on the masters".to_string()
        } else {
            format!("no lock keys start with {:?}", app.query.prefix)
        };
        render_notice(
            frame,
            area,
            block,
            Line::from(Span::styled(text, theme::MUTED)),
        );
        return;
    }
    let masters = locks.masters();
    // The KIND column only when the listing has permits or leaderships,
    // the MODE column only when it has a lock held shared.
    let kinds = locks
        .rows()
        .iter()
        .any(|r| Kind::of(&r.info.resource) != Kind::Lock);
    let modes = locks.rows().iter().any(|r| is_shared(&r.info));
    let plan = Plan::fit(area.width.saturating_sub(2), masters, kinds, modes);
    let sort = table.sort();
    let mut header = vec![title_cell("RESOURCE", LockColumn::Resource, sort)];
    let mut widths = vec![Constraint::Min(plan.resource)];
    if plan.kind {
        header.push(Cell::from("KIND"));
        widths.push(Constraint::Length(KIND_WIDTH));
    }
    if plan.mode {
        header.push(Cell::from("MODE"));
        widths.push(Constraint::Length(MODE_WIDTH));
    }
    if plan.owner {
        header.push(title_cell("OWNER", LockColumn::Owner, sort));
        widths.push(Constraint::Length(OWNER_WIDTH));
    }
    header.push(title_cell("VALIDITY", LockColumn::Validity, sort));
    widths.push(Constraint::Length(VALIDITY_WIDTH));
    if plan.matrix {
        for master in masters {
            header.push(Cell::from(master.clone()));
            widths.push(Constraint::Length(plan.cell_width(master)));
        }
    }
    header.push(title_cell("QUORUM", LockColumn::Quorum, sort));
    widths.push(Constraint::Length(QUORUM_WIDTH));
    if plan.waiters {
        header.push(title_cell("WAIT", LockColumn::Waiters, sort));
        widths.push(Constraint::Length(FLAG_WIDTH));
    }
    if plan.here {
        header.push(title_cell("HERE", LockColumn::Here, sort));
        widths.push(Constraint::Length(FLAG_WIDTH));
    }
    if plan.holder {
        header.push(Cell::from("HOLDER"));
        widths.push(Constraint::Length(HOLDER_WIDTH));
    }
    let now = app.now();
    let rows = locks.rows();
    render_table(frame, area, block, header, &widths, table, |i| {
        row(&rows[i], now, plan)
    });
}

/// Narrowest the resource column gets before other columns give way, and
/// once nothing else can.
const RESOURCE_MIN: u16 = 16;
const RESOURCE_FLOOR: u16 = 10;
const OWNER_WIDTH: u16 = 12;
/// `VALIDITY` and its sort arrow.
const VALIDITY_WIDTH: u16 = 9;
const QUORUM_WIDTH: u16 = 7;
const FLAG_WIDTH: u16 = 5;
/// `permit`, `leader`, `lock`.
const KIND_WIDTH: u16 = 6;
/// `shared`, `excl`.
const MODE_WIDTH: u16 = 6;
/// `agent/pid`: a pod name and a pid fit; longer names are cut.
const HOLDER_WIDTH: u16 = 22;

/// Which columns fit: on narrow screens `HOLDER` goes first, the matrix cells shrink to five
/// characters (`missing` becomes `miss`), then `HERE`, `WAIT` and `OWNER`
/// go, then the resource column narrows, and last the matrix goes; the
/// detail pane still shows it all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Narrowest resource column.
    pub resource: u16,
    /// `lock`, `permit` or `leader`: only when the listing has the latter.
    pub kind: bool,
    /// `excl` or `shared`: only when the listing has a shared lock.
    pub mode: bool,
    pub owner: bool,
    /// One column per master.
    pub matrix: bool,
    pub waiters: bool,
    pub here: bool,
    /// The holding agent and, for locks held here, the holder's pid.
    pub holder: bool,
    /// Narrowest matrix cell.
    pub cell: u16,
}

impl Plan {
    /// The widest plan that fits `width` (inside the borders).
    pub fn fit(width: u16, masters: &[String], kind: bool, mode: bool) -> Plan {
        let full = Plan {
            resource: RESOURCE_MIN,
            kind,
            mode,
            owner: true,
            matrix: true,
            waiters: true,
            here: true,
            holder: true,
            cell: MASTER_WIDTH as u16,
        };
        let no_holder = Plan {
            holder: false,
            ..full
        };
        let narrow = Plan {
            cell: 5,
            ..no_holder
        };
        let no_here = Plan {
            here: false,
            ..narrow
        };
        let no_flags = Plan {
            waiters: false,
            ..no_here
        };
        let no_owner = Plan {
            owner: false,
            ..no_flags
        };
        let short = Plan {
            resource: RESOURCE_FLOOR,
            ..no_owner
        };
        let no_matrix = Plan {
            matrix: false,
            ..short
        };
        [full, no_holder, narrow, no_here, no_flags, no_owner, short]
            .into_iter()
            .find(|plan| plan.width(masters) <= width)
            .unwrap_or(no_matrix)
    }

    fn cell_width(&self, master: &str) -> u16 {
        (master.chars().count() as u16).max(self.cell)
    }

    /// Width with the resource column at its minimum, spacing included.
    fn width(&self, masters: &[String]) -> u16 {
        let mut columns = vec![self.resource, VALIDITY_WIDTH, QUORUM_WIDTH];
        if self.matrix {
            columns.extend(masters.iter().map(|m| self.cell_width(m)));
        }
        for (on, width) in [
            (self.kind, KIND_WIDTH),
            (self.mode, MODE_WIDTH),
            (self.owner, OWNER_WIDTH),
            (self.waiters, FLAG_WIDTH),
            (self.here, FLAG_WIDTH),
            (self.holder, HOLDER_WIDTH),
        ] {
            if on {
                columns.push(width);
            }
        }
        columns.iter().sum::<u16>() + columns.len() as u16 - 1
    }
}

/// A countdown as text in its urgency colour.
fn countdown(c: Countdown, full: Duration, now: Instant) -> Span<'static> {
    let left = c.left(now);
    Span::styled(fmt::duration(left), theme::urgency(urgency(left, full)))
}

/// One master's cell of the matrix, at most `width` wide.
pub fn key_cell(key: &KeyState, full: Duration, now: Instant, width: u16) -> Span<'static> {
    match key {
        KeyState::Held(Some(ttl)) => countdown(*ttl, full, now),
        KeyState::Held(None) => Span::styled("held", theme::OK),
        KeyState::Missing if usize::from(width) < MASTER_WIDTH => {
            Span::styled("miss", theme::MUTED)
        }
        KeyState::Missing => Span::styled("missing", theme::MUTED),
        KeyState::Other(_) => Span::styled("other", theme::WARN),
        KeyState::Unknown => Span::styled(DASH, theme::MUTED),
    }
}

fn yes_no(value: bool, yes: ratatui::style::Style, no: ratatui::style::Style) -> Span<'static> {
    if value {
        Span::styled("yes", yes)
    } else {
        Span::styled("no", no)
    }
}

fn row(lock: &LockRow, now: Instant, plan: Plan) -> Row<'static> {
    let info = &lock.info;
    let mut cells = vec![Cell::from(info.resource.clone())];
    if plan.kind {
        let kind = Kind::of(&info.resource);
        let style = match kind {
            Kind::Lock => theme::MUTED,
            _ => theme::INFO,
        };
        cells.push(Cell::from(Span::styled(kind.word(), style)));
    }
    if plan.mode {
        cells.push(Cell::from(if is_shared(info) {
            Span::styled("shared", theme::INFO)
        } else {
            Span::styled("excl", theme::MUTED)
        }));
    }
    if plan.owner {
        // A shared lock's owners are its readers': their count here.
        let style = if is_shared(info) {
            theme::INFO
        } else {
            theme::TEXT
        };
        cells.push(Cell::from(Span::styled(
            holder_label(info).unwrap_or_else(|| DASH.to_string()),
            style,
        )));
    }
    cells.push(Cell::from(lock.validity.map_or_else(
        || Span::styled(DASH, theme::MUTED),
        |v| countdown(v, lock.full, now),
    )));
    if plan.matrix {
        cells.extend(
            lock.keys
                .iter()
                .map(|k| Cell::from(key_cell(k, lock.full, now, plan.cell))),
        );
    }
    cells.push(Cell::from(yes_no(
        info.quorum_agrees,
        theme::OK,
        theme::CRIT,
    )));
    if plan.waiters {
        let style = if info.waiters > 0 {
            theme::WARN
        } else {
            theme::TEXT
        };
        cells.push(Cell::from(Span::styled(info.waiters.to_string(), style)));
    }
    if plan.here {
        cells.push(Cell::from(yes_no(
            info.held_here,
            theme::INFO,
            theme::MUTED,
        )));
    }
    if plan.holder {
        cells.push(Cell::from(holder_cell(info)));
    }
    Row::new(cells)
}

/// `agent/pid`, `agent` alone for locks held through other agents, `-`
/// when the value names no agent; for a shared lock the agent of its
/// readers, or how many agents granted them.
pub fn holder_cell(info: &redlock_wire::LockInfo) -> Span<'static> {
    if is_shared(info) {
        let mut agents: Vec<&str> = info
            .readers
            .iter()
            .filter_map(|r| r.agent.as_deref())
            .collect();
        agents.sort_unstable();
        agents.dedup();
        return match agents.as_slice() {
            [] => Span::styled(DASH, theme::MUTED),
            [agent] => Span::raw(agent.to_string()),
            many => Span::raw(format!("{} agents", many.len())),
        };
    }
    match (&info.agent, info.pid) {
        (Some(agent), Some(pid)) => Span::raw(format!("{agent}/{pid}")),
        (Some(agent), None) => Span::raw(agent.clone()),
        (None, Some(pid)) => Span::raw(format!("{DASH}/{pid}")),
        (None, None) => Span::styled(DASH, theme::MUTED),
    }
}

/// The detail pane's holder line: agent, then pid, uid and gid when the
/// lock is held through this agent.
pub fn holder_text(info: &redlock_wire::LockInfo) -> String {
    let mut parts = vec![format!("agent {}", info.agent.as_deref().unwrap_or(DASH))];
    for (name, value) in [("pid", info.pid), ("uid", info.uid), ("gid", info.gid)] {
        if let Some(value) = value {
            parts.push(format!("{name} {value}"));
        }
    }
    if info.pid.is_none() && !info.held_here {
        parts.push("process known only to that agent".to_string());
    }
    parts.join(" · ")
}

/// Lines a shared lock's pane takes beyond an exclusive lock's: its mode
/// line and readers in place of the owner and holder lines.
fn reader_lines(info: &redlock_wire::LockInfo) -> u16 {
    if !is_shared(info) {
        return 0;
    }
    let (shown, more) = readers_shown(&info.readers, READERS_SHOWN);
    let readers = (shown.len() + usize::from(more > 0)).max(1);
    (1 + readers).saturating_sub(2) as u16
}

/// A shared lock's readers, one line each (`agent/owner`, the masters
/// recording it, whether it is held here), at most [`READERS_SHOWN`]
/// lines with `and N more`; a reader on fewer than `quorum` of the
/// `masters` is in warning colours.
fn readers(info: &redlock_wire::LockInfo, masters: usize, quorum: usize) -> Vec<Line<'static>> {
    let field = |name: &'static str| Span::styled(format!("{name:<10}"), theme::HEADING);
    let (shown, more) = readers_shown(&info.readers, READERS_SHOWN);
    let names: Vec<String> = shown
        .iter()
        .map(|r| holder(r.agent.as_deref(), r.owner.as_deref()))
        .collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let mut lines: Vec<Line<'static>> = shown
        .iter()
        .zip(names)
        .map(|(reader, name)| {
            let style = if reader.masters < quorum {
                theme::WARN
            } else {
                theme::MUTED
            };
            let mut spans = vec![
                Span::raw(" ".repeat(10)),
                Span::raw(format!("{name:<width$}  ")),
                Span::styled(format!("on {} of {masters} masters", reader.masters), style),
            ];
            if reader.held_here {
                spans.push(Span::styled(" · held here", theme::INFO));
            }
            Line::from(spans)
        })
        .collect();
    if more > 0 {
        lines.push(Line::from(vec![
            Span::raw(" ".repeat(10)),
            Span::styled(format!("and {more} more"), theme::MUTED),
        ]));
    }
    match lines.first_mut() {
        Some(first) => first.spans[0] = field("readers"),
        None => lines.push(Line::from(vec![
            field("readers"),
            Span::styled(DASH, theme::MUTED),
        ])),
    }
    lines
}

fn render_detail(frame: &mut Frame, area: Rect, app: &App) {
    let now = app.now();
    let name = app.query.detail.as_deref().unwrap_or_default();
    let Some(lock) = app.detail_lock() else {
        let block = view_block(format!(" Lock {name} "));
        let (text, style) = match &app.detail {
            Known::Failed(e) if e.contains(" 404 ") => (
                "no master has this lock (released, expired, or never taken)".to_string(),
                theme::MUTED,
            ),
            Known::Failed(e) => (e.clone(), theme::WARN),
            _ => ("asking the agent…".to_string(), theme::MUTED),
        };
        render_notice(frame, area, block, Line::from(Span::styled(text, style)));
        return;
    };
    let info = &lock.info;
    let detail = app
        .detail
        .get()
        .filter(|d| d.row.info.resource == info.resource);
    let mut block = Block::bordered()
        .border_style(theme::BORDER)
        .title(Span::styled(
            format!(" Lock {} ", info.resource),
            theme::TITLE,
        ));
    if let Some(detail) = detail.filter(|d| !d.unread.is_empty()) {
        block = block.title(Span::styled(
            format!(" partial: {} unread ", detail.unread.join(", ")),
            theme::WARN,
        ));
    }
    let field = |name: &'static str| Span::styled(format!("{name:<10}"), theme::HEADING);
    let mut lines = if is_shared(info) {
        // Readers have no one owner or process: who they are comes below.
        vec![Line::from(vec![
            field("mode"),
            Span::styled("shared", theme::INFO),
            Span::raw(format!(
                " · {}",
                holder_label(info).unwrap_or_else(|| DASH.to_string())
            )),
        ])]
    } else {
        vec![
            Line::from(vec![
                field("owner"),
                Span::raw(info.owner.clone().unwrap_or_else(|| DASH.to_string())),
            ]),
            Line::from(vec![field("holder"), Span::raw(holder_text(info))]),
        ]
    };
    // The trace of the request that took the grant, to look up in the
    // tracing backend; only for a traced grant held through this agent.
    if let Some(trace) = &info.trace_id {
        lines.push(Line::from(vec![field("trace"), Span::raw(trace.clone())]));
    }
    // One holder of several resources: all of them, taken and released
    // together.
    if !info.held_with.is_empty() {
        lines.push(Line::from(vec![
            field("with"),
            Span::raw(info.held_with.join(", ")),
        ]));
    }
    let mut validity = vec![field("validity")];
    match lock.validity {
        Some(v) => {
            validity.push(countdown(v, lock.full, now));
            validity.push(Span::raw(" "));
            validity.push(Span::styled(
                fmt::bar(fraction_left(v.left(now), lock.full), BAR_WIDTH),
                theme::BAR,
            ));
        }
        // The agent keeps no validity of a shared lock as a whole.
        None if is_shared(info) && info.quorum_agrees => validity.push(Span::styled(
            format!("{DASH} (each reader has its own)"),
            theme::MUTED,
        )),
        None => validity.push(Span::styled(
            format!("{DASH} (no quorum holds it)"),
            theme::CRIT,
        )),
    }
    lines.push(Line::from(validity));
    let quorum = detail.map_or_else(
        || app.locks.table.get().map_or(0, |t| t.quorum),
        |d| d.quorum,
    );
    lines.push(Line::from(vec![
        field("quorum"),
        if info.quorum_agrees {
            Span::styled("agrees", theme::OK)
        } else {
            Span::styled("does not agree", theme::CRIT)
        },
        Span::styled(
            format!(
                " · held on {} of {} masters · quorum {quorum}",
                lock.held_on(),
                lock.keys.len()
            ),
            theme::MUTED,
        ),
    ]));
    lines.push(Line::from(vec![
        field("here"),
        Span::raw(if info.held_here {
            "held through this agent"
        } else {
            "not held through this agent"
        }),
        Span::styled(format!(" · {} waiting here", info.waiters), theme::MUTED),
    ]));
    if is_shared(info) {
        lines.extend(readers(info, lock.keys.len(), quorum));
    }
    lines.push(Line::default());
    let masters = detail.map_or_else(|| app.locks.masters(), |d| d.masters.as_slice());
    let width = masters.iter().map(|m| m.chars().count()).max().unwrap_or(0);
    for (master, key) in masters.iter().zip(&lock.keys) {
        let (state, ttl) = match key {
            KeyState::Held(ttl) => ("held", *ttl),
            KeyState::Missing => ("missing", None),
            KeyState::Other(ttl) => ("other", *ttl),
            KeyState::Unknown => (DASH, None),
        };
        let mut spans = vec![
            Span::styled(format!("{master:<width$}  "), theme::TEXT),
            Span::styled(
                format!("{state:<8}"),
                match key {
                    KeyState::Held(_) => theme::OK,
                    KeyState::Other(_) => theme::WARN,
                    _ => theme::MUTED,
                },
            ),
        ];
        if let Some(ttl) = ttl {
            spans.push(countdown(ttl, lock.full, now));
            spans.push(Span::raw(" "));
            spans.push(Span::styled(
                fmt::bar(fraction_left(ttl.left(now), lock.full), BAR_WIDTH),
                theme::BAR,
            ));
        }
        lines.push(Line::from(spans));
    }
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masters(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("r{i}")).collect()
    }

    #[test]
    fn columns_give_way_in_order_as_the_screen_narrows() {
        let five = masters(5);
        let at = |width| Plan::fit(width, &five, false, false);
        let full = Plan {
            resource: 16,
            kind: false,
            mode: false,
            owner: true,
            matrix: true,
            waiters: true,
            here: true,
            holder: true,
            cell: 7,
        };
        assert_eq!(at(122), full);
        assert_eq!(
            at(118),
            Plan {
                holder: false,
                ..full
            }
        );
        // 80 columns: five-wide cells, no WAIT or HERE, the owner kept.
        let eighty = Plan {
            cell: 5,
            waiters: false,
            here: false,
            holder: false,
            ..full
        };
        assert_eq!(at(78), eighty);
        assert_eq!(
            at(58),
            Plan {
                resource: 10,
                owner: false,
                ..eighty
            }
        );
        assert!(!at(38).matrix);
        assert!(!at(0).matrix, "the last plan when nothing fits");
        // Long master names are never cut.
        let long = vec!["redis-eu-1".to_string()];
        assert_eq!(
            Plan::fit(200, &long, false, false).cell_width("redis-eu-1"),
            10
        );
    }
}
